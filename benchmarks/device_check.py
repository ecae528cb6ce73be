"""Every torch-using row fitted on the device ``train.device: auto`` picks (CUDA when present), next
to the committed CPU result of the same row, corpus and seed, and whether the fit is deterministic:

    .venv/bin/python benchmarks/device_check.py                       # latin_hands, seed 0, all rows
    .venv/bin/python benchmarks/device_check.py --twice --labels l.npz   # refit each row; keep labels
    .venv/bin/python benchmarks/device_check.py --labels l.npz           # another process: compare

For each row it prints the device the fit ran on, the GPU memory it peaked at, V-measure, K found and
seconds, and the committed figures (reports/metrics/<row>_<corpus>.json, reports/timings/...).
A GPU run is not bit-equal to the CPU's (other kernels, other summation orders), so V and K are
compared with the CPU, and labels only between GPU fits. The run fails (exit 1) when CUDA is present
but a row left the GPU untouched (the code silently fell back to the CPU), a fit raised, or a refit
gave other labels. Figures of one H100: reports/device_check_h100.md.

No stage depends on this script; its figures go to stdout and ``--out``.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from signclust.config import load_params, torch_device
from signclust.data.corpus import Corpus
from signclust.distances.provider import load_knn, open_distances
from signclust.evaluation.metrics import score
from signclust.io import atomic_write_text
from signclust.models.base import FitContext, get_clusterer
from signclust.models.train import run_config

ROOT = Path(__file__).resolve().parents[1]
TORCH_ROWS = ("lm", "lm_seed", "deepcluster", "swav", "twostage", "jule", "deepdpm")


def committed(row: str, corpus: str, seed: int) -> dict:
    """The committed CPU figures of one row, corpus and seed (empty where none are committed)."""
    out = {}
    m = ROOT / "reports" / "metrics" / f"{row}_{corpus}.json"
    if m.is_file():
        s = json.loads(m.read_text())["per_seed"].get(f"seed{seed}", {})
        out.update({k: s[k] for k in ("v_measure", "k_found") if k in s})
    t = ROOT / "reports" / "timings" / f"{row}_{corpus}.json"
    if t.is_file():
        per = json.loads(t.read_text()).get("per_seed", {}).get(f"seed{seed}", {})
        if "seconds" in per:
            out["seconds"] = per["seconds"]
    return out


def distances(corpus: Corpus, dist_dir: Path) -> dict:
    """The distance provider and k-NN graph the train stage passes, where the distances stage built them."""
    if not dist_dir.exists():
        return {}
    return {"distances": open_distances(corpus, dist_dir), "knn": load_knn(dist_dir)}


def fit_on_device(row: str, corpus: Corpus, seed: int, params: dict, device: str, built: dict) -> dict:
    """One fit as the train stage makes it (``built``: the corpus's distances and k-NN, ``distances``), on ``device``."""
    method, cfg, _ = run_config(row, params)
    clusterer = get_clusterer(method, **cfg)
    k_true = corpus.counts()["types"]
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    result = clusterer.fit(corpus, FitContext(seed=seed, n_clusters=k_true if clusterer.needs_k else None,
                                              device=device, progress=False, **built))
    if cuda:
        torch.cuda.synchronize()
    seconds = time.time() - t0
    return {"labels": np.asarray(result.labels), "v_measure": float(score(corpus.labels(), result.labels)["v_measure"]),
            "k_found": int(result.k_found), "seconds": seconds,
            "gpu_peak_mib": torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else 0.0}


def compared(labels: np.ndarray, other: np.ndarray) -> str:
    """'yes' when two labellings are the same partition, else how many tokens' labels differ."""
    if np.array_equal(labels, other):
        return "yes"
    return f"no: {(labels != other).mean():.1%} of the labels differ"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="latin_hands")
    ap.add_argument("--corpus-dir", type=Path, default=None, help="the corpus folder (default data/corpora/<corpus>)")
    ap.add_argument("--rows", nargs="+", default=list(TORCH_ROWS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    ap.add_argument("--twice", action="store_true",
                    help="fit each row a second time and say whether the labels are the same (run-to-run determinism)")
    ap.add_argument("--labels", type=Path, default=None,
                    help="an .npz of each row's labels: written when absent, else compared with (determinism "
                         "across processes: run the script twice with the same file)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    a = ap.parse_args(argv)
    earlier = dict(np.load(a.labels)) if a.labels and a.labels.is_file() else None
    kept = {}
    params = load_params(ROOT / "params.yaml")
    corpus = Corpus.load(a.corpus_dir or ROOT / "data" / "corpora" / a.corpus)
    dev = torch_device(a.device)
    built = distances(corpus, ROOT / "data" / "distances" / a.corpus)       # read once for every fit
    head = (f"torch {torch.__version__}, numpy {np.__version__}, device {dev}"
            + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else f" ({platform.processor() or platform.machine()})")
            + f"; corpus {a.corpus} ({corpus.n_tokens} tokens, {corpus.counts()['types']} types), seed {a.seed}")
    print(head, flush=True)
    lines = [f"# Device check: {a.corpus}, seed {a.seed}", "", head, "",
             "| row | device | GPU peak MiB | V | K | s | same labels on a refit | same labels as the earlier process "
             "| committed CPU V | K | s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    failures = []
    for row in a.rows:
        ref = committed(row, a.corpus, a.seed)
        try:
            got = fit_on_device(row, corpus, a.seed, params, a.device, built)
        except Exception as e:          # report every row, then fail
            traceback.print_exc()
            failures.append(f"{row}: {type(e).__name__}: {e}")
            lines.append(f"| {row} | {dev.type} | failed: {type(e).__name__} | | | | | | | | |")
            continue
        if dev.type == "cuda" and got["gpu_peak_mib"] == 0:
            failures.append(f"{row}: CUDA is present but the fit allocated nothing on the GPU")
        same = before = "–"
        if a.twice:
            again = fit_on_device(row, corpus, a.seed, params, a.device, built)
            same = compared(got["labels"], again["labels"])
            if same != "yes":
                failures.append(f"{row}: a refit in the same process gave other labels ({same})")
        kept[row] = got["labels"]
        if earlier is not None and row in earlier:
            before = compared(got["labels"], earlier[row])
            if before != "yes":
                failures.append(f"{row}: other labels than the earlier process ({before})")
        f = lambda d, k, fmt: format(d[k], fmt) if k in d else "–"   # noqa: E731
        lines.append(f"| {row} | {dev.type} | {got['gpu_peak_mib']:.0f} | {got['v_measure']:.3f} | "
                     f"{got['k_found']} | {got['seconds']:.1f} | {same} | {before} | {f(ref, 'v_measure', '.3f')} | "
                     f"{f(ref, 'k_found', '')} | {f(ref, 'seconds', '.1f')} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines + ([""] + ["- FAILED " + x for x in failures] if failures else [])) + "\n"
    if a.out:
        atomic_write_text(a.out, text)
    if a.labels and earlier is None:
        np.savez(a.labels, **kept)
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
