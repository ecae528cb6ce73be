"""Where a deep baseline's fit spends its time: augmentation, forward, backward, optimiser step,
no-grad embedding passes, the clustering step (k-means, Sinkhorn, agglomeration, split/merge
statistics, neighbour mining), and the rest.

    .venv/bin/python benchmarks/profile_baselines.py [--corpus cypriot] [--runs twostage swav ...]
                                                      [--seed 0] [--threads 2] [--out FILE.md]

Each row is fitted twice at its committed setting (params.yaml ``runs.<row>``, the CPU-sized cuts):
once plain, for the wall time, and once with timers wrapped around the functions of each part
(outermost part wins: a forward pass inside an embedding pass counts as the embedding pass; every
part is timed inclusive of what it calls). The two fits must give the same labels (the timers
change nothing the fit computes); the table says so. An unrecorded fit of ``jule`` first pays for
torch's one-time set-up. No assertions on time: this prints numbers.
Issue 12 asks where the time goes before anything is made faster.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from signclust.errors import UserError, cli_main  # noqa: E402

RUNS = ["twostage", "swav", "deepcluster", "deepdpm", "jule"]

# part -> the functions and methods timed as that part, "module:qualified.name"
PARTS = {
    "augment": ["signclust.models.baselines._nets:GlyphAugment.__call__",
                "signclust.models.baselines._nets:random_resized_crop"],
    "embed": ["signclust.models.baselines._nets:embed"],
    "cluster": ["signclust.models.baselines._nets:faiss_kmeans",
                "signclust.models.baselines._nets:pca_whiten_l2",
                "signclust.models.baselines.swav:sinkhorn",
                "signclust.models.baselines.deepcluster:fix_empty_clusters",
                "signclust.models.baselines.jule:agglomerate",
                "signclust.models.baselines.jule:affinity_graph",
                "signclust.models.baselines.jule:knn_search",
                "signclust.models.baselines._codes:umap_embed",
                "signclust.models.baselines.deepdpm:gaussian_log_resp",
                "signclust.models.baselines.deepdpm:map_params",
                "signclust.models.baselines.deepdpm:log_hastings_split",
                "signclust.models.baselines.deepdpm:log_hastings_merge",
                "signclust.models.baselines.twostage:AnchorNeighbourhoods.update"],
    "forward": ["torch.nn:Module.__call__"],
    "backward": ["torch:Tensor.backward", "torch.autograd:backward"],
    "step": ["torch.optim:SGD.step", "torch.optim:Adam.step"],
}
HEADINGS = {"augment": "augmentation", "forward": "forward", "backward": "backward", "step": "optimiser step",
            "embed": "embedding passes", "cluster": "clustering step"}


class PartTimer:
    """Wraps the functions of PARTS with timers; only the outermost timed call counts."""

    def __init__(self):
        self.seconds: Counter = Counter()
        self.calls: Counter = Counter()
        self._depth = 0
        self._undo: list[tuple[object, str, object]] = []

    def _wrap(self, part: str, fn):
        timer = self

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if timer._depth:
                return fn(*args, **kwargs)
            timer._depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timer.seconds[part] += time.perf_counter() - t0
                timer.calls[part] += 1
                timer._depth -= 1
        return timed

    def _set(self, owner, name: str, value) -> None:
        self._undo.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, value)

    def __enter__(self):
        import importlib
        for part, targets in PARTS.items():
            for target in targets:
                module_name, qualname = target.split(":")
                module = importlib.import_module(module_name)
                *owner_path, name = qualname.split(".")
                owner = module
                for attr in owner_path:
                    owner = getattr(owner, attr)
                original = getattr(owner, name)
                wrapped = self._wrap(part, original)
                self._set(owner, name, wrapped)
                if owner is module:
                    # the baselines import these functions by name: rebind every such copy too
                    for mod_name, mod in list(sys.modules.items()):
                        if mod_name.startswith("signclust.") and mod is not module \
                                and getattr(mod, name, None) is original:
                            self._set(mod, name, wrapped)
        return self

    def __exit__(self, *exc):
        for owner, name, value in reversed(self._undo):
            setattr(owner, name, value)
        self._undo.clear()
        return False


def fit(run: str, corpus, params: dict, seed: int, distances):
    import numpy as np

    from signclust.models.base import FitContext, get_clusterer
    from signclust.models.train import run_config
    method, cfg, _ = run_config(run, params)
    clusterer = get_clusterer(method, **cfg)
    k = int(len(np.unique(corpus.labels()))) if clusterer.needs_k else None
    ctx = FitContext(seed=seed, n_clusters=k, device="cpu", distances=distances, progress=False)
    t0 = time.perf_counter()
    result = clusterer.fit(corpus, ctx)
    return time.perf_counter() - t0, np.asarray(result.labels)


def table(rows: list[dict], corpus: str, seed: int, threads: int) -> str:
    parts = list(PARTS)
    lines = [f"# Where the deep baselines' fits spend their time ({corpus}, seed {seed}, {threads} torch threads)", "",
             "Written by `python benchmarks/profile_baselines.py`: each row at its committed setting "
             "(`runs.<row>`), fitted once plain (*fit s*) and once with a timer around the functions of each part "
             "(*timed fit s*; outermost part wins, so the forward passes inside an embedding pass count there). "
             "Each part: seconds (share of the timed fit). *rest*: the timed fit less its parts (Python loops, "
             "tensor copies, losses computed outside a module, logging). *same labels*: the two fits agree.", "",
             "| row | fit s | timed fit s | " + " | ".join(HEADINGS[p] for p in parts) + " | rest | same labels |",
             "|---|---:|---:|" + "---:|" * len(parts) + "---:|---|"]
    for r in rows:
        total = r["timed"]
        cells = [f"{r['seconds'][p]:.1f} ({100 * r['seconds'][p] / total:.0f}%)" for p in parts]
        rest = total - sum(r["seconds"][p] for p in parts)
        lines.append(f"| `{r['run']}` | {r['plain']:.1f} | {total:.1f} | " + " | ".join(cells)
                     + f" | {rest:.1f} ({100 * rest / total:.0f}%) | {'yes' if r['same'] else '**no**'} |")
    lines.append("")
    return "\n".join(lines)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="cypriot", help="a built corpus under data/corpora (default cypriot)")
    ap.add_argument("--runs", nargs="+", default=RUNS, help=f"rows of params.yaml runs (default {' '.join(RUNS)})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2, as the committed fits)")
    ap.add_argument("--out", type=Path, help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    os.environ.setdefault("SIGNCLUST_MLFLOW", "0")
    import numpy as np
    import torch

    from signclust.config import load_params
    from signclust.data.corpus import Corpus
    from signclust.distances.provider import open_distances
    from signclust.io import atomic_write_text

    torch.set_num_threads(args.threads)
    params = load_params()
    corpus_dir = REPO / "data" / "corpora" / args.corpus
    if not corpus_dir.exists():
        raise UserError(f"corpus '{args.corpus}' is not built (dvc repro -s prepare@{args.corpus} ...)")
    corpus = Corpus.load(corpus_dir)
    dist_dir = REPO / "data" / "distances" / args.corpus
    distances = open_distances(corpus, dist_dir) if dist_dir.exists() else None
    from signclust.models.train import run_config
    for run in args.runs:                      # a misspelt row fails here, before any fit
        run_config(run, params)
    # the first fit in a process pays for torch's one-time set-up (kernel selection, allocator):
    # one unrecorded fit of the cheapest row first, so every row is timed warm
    fit("jule", corpus, params, args.seed, distances)
    rows = []
    for run in args.runs:
        plain, labels = fit(run, corpus, params, args.seed, distances)
        with PartTimer() as timer:
            timed, timed_labels = fit(run, corpus, params, args.seed, distances)
        rows.append({"run": run, "plain": plain, "timed": timed, "seconds": timer.seconds,
                     "same": bool(np.array_equal(labels, timed_labels))})
        print(f"{run}: {plain:.1f} s plain, {timed:.1f} s timed; "
              + ", ".join(f"{p} {timer.seconds[p]:.1f} s / {timer.calls[p]} calls" for p in PARTS), flush=True)
    md = table(rows, args.corpus, args.seed, args.threads)
    print(md)
    if args.out:
        atomic_write_text(args.out, md)
        print(f"-> {args.out}")


if __name__ == "__main__":
    main()
