"""DeepDPM's clustering on the DeepDPM authors' own MNIST / Fashion-MNIST features (issue 10).

    .venv/bin/python scripts/deepdpm_authors_embeddings.py DIR [DIR ...] [--subset 10000] [--seeds 0]

DIR: a folder of the authors' repository (github.com/BGU-CS-VIL/DeepDPM, MIT licence),
``pretrained_embeddings/umap_embedded_datasets/<NAME>``, holding ``train_data.pt`` (the features
their README clusters for MNIST and Fashion-MNIST: UMAP-10 of the codes of an autoencoder trained
on the whole training split) and ``train_labels.pt``. The files are not in this repository and the
CI machine cannot reach GitHub, so this study runs where a user has them; the report records each
file's git blob hash.

The paper check (reports/paper_check.md) runs DeepDPM on features we make (an autoencoder trained on
3000 images); its NMI gap to the paper's MNIST row (0.94) mixes the features with the clustering.
Here the features are the authors', so what is left is our implementation of the clustering: the
`paper` preset's clustering settings (init K 3, alpha 10, NIW prior, 500 epochs, cluster lr 5e-4)
after DeepDPM.py's default transform (`normalize`: L2 rows), on a random subset (a fixed
permutation, seed 0; the authors cluster all of it, about 15 min a fit here). Each fit runs twice:
as the row does (``proposal_fallback: true``) and as the authors' code does (a one-sided sub-cluster
net proposes no split). Beside them, k-means at the true K on the same features, and each
labelling's log p(X, z) under the fit's own prior (``deepdpm.dp_log_joint``): the moves climb it,
so a k-means labelling above the fit means the moves stopped short. The labels only score.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext  # noqa: E402
from signclust.models.baselines import deepdpm as dd  # noqa: E402
from signclust.models.baselines._codes import l2_rows  # noqa: E402
from signclust.models.baselines._nets import faiss_kmeans  # noqa: E402

# the paper's Table 1 rows (DeepDPM, Ronen et al. 2022), by the folder's name
PAPER = {"MNIST": {"nmi": 0.94, "k": "10 ± 0.00"}, "FASHION": {"nmi": 0.68, "k": "10.2 ± 0.79"}}


def blob_hash(path: Path) -> str:
    """git's blob hash of a file (what `git ls-tree` lists for it in the authors' repository)."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def safe_load(path: Path):
    """torch.load without running pickled code (weights_only), allowing the numpy array that the
    authors' FASHION/train_data.pt holds (the other files hold tensors)."""
    import codecs

    from numpy._core.multiarray import _reconstruct
    allowed = [(codecs.encode, "_codecs.encode"), _reconstruct, (_reconstruct, "numpy.core.multiarray._reconstruct"),
               np.ndarray, np.dtype, (np.dtype, "numpy.dtype"),
               np.dtypes.Float32DType, np.dtypes.Float64DType, np.dtypes.Int64DType, np.dtypes.UInt8DType]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, weights_only=True)
    except Exception as err:                 # a file of another kind: one line, not the unpickler's page
        raise UserError(f"{path}: not a tensor or numpy array file torch.load can read safely "
                        f"({type(err).__name__})") from None


def fixed_subset(n: int, subset: int) -> np.ndarray:
    """Sorted indices of ``subset`` of ``n`` points, the first of a fixed permutation (seed 0), so
    that every study of these features clusters the same points (0 or at least n: all)."""
    if subset and subset < n:
        return np.sort(np.random.default_rng(0).permutation(n)[:subset])
    return np.arange(n)


def load(folder: Path, subset: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """The folder's features (L2 rows, DeepDPM.py's default transform) and labels, cut to ``subset``
    rows of a fixed permutation (seed 0; 0: all), and the files' blob hashes."""
    files = {name: folder / f"{name}.pt" for name in ("train_data", "train_labels")}
    for path in files.values():
        if not path.is_file():
            raise UserError(f"{path} not found (expected the authors' pretrained_embeddings/"
                            "umap_embedded_datasets/<NAME> folder)")
    x = np.asarray(safe_load(files["train_data"]), dtype=np.float64)
    y = np.asarray(safe_load(files["train_labels"]), dtype=np.int64)
    if x.ndim != 2 or len(x) != len(y):
        raise UserError(f"{folder}: expected (n, d) features and n labels, got {x.shape} and {y.shape}")
    keep = fixed_subset(len(x), subset)
    x, y = x[keep], y[keep]
    return l2_rows(x), y, {name: blob_hash(path) for name, path in files.items()}


def fit(x: np.ndarray, seed: int, fallback: bool, on_epoch=None, **overrides
        ) -> tuple[np.ndarray, dd._DPMRun, float]:
    """One DeepDPM clustering run with the paper preset's settings (and ``overrides``); (labels, run,
    seconds). ``on_epoch(run)`` after every epoch, its move included."""
    cfg = {**dd.DeepDPM.DEFAULTS, **dd.DeepDPM.PRESETS["paper"], "proposal_fallback": fallback, **overrides}
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.time()
    run = dd._DPMRun(x, cfg, seed, torch.device("cpu"), gen)
    run.train(FitContext(seed=seed, progress=False), save=None if on_epoch is None else lambda done: on_epoch(run))
    return run.predict(), run, time.time() - t0


@cli_main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="the authors' umap_embedded_datasets/<NAME> folders")
    ap.add_argument("--subset", type=int, default=10000, help="points of each (0: all)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "deepdpm_authors_embeddings.md")
    args = ap.parse_args(argv)
    data = [(folder.name, *load(folder, args.subset)) for folder in args.dirs]   # every file checked first
    lines = ["# DeepDPM on the authors' own features", "",
             f"Generated by `python scripts/deepdpm_authors_embeddings.py {' '.join(d.name for d in args.dirs)} "
             f"--subset {args.subset} --seeds {' '.join(map(str, args.seeds))}` (the folders of "
             "github.com/BGU-CS-VIL/DeepDPM `pretrained_embeddings/umap_embedded_datasets/`, MIT licence). "
             "The `paper` preset's clustering settings on the authors' features (L2 rows); `fallback`: "
             "this row's split proposal when the sub-cluster net's is one-sided, `authors`: none then. "
             "V is NMI (arithmetic mean). log p: the labelling's log p(X, z) under the fit's prior, per "
             "point, less the best of the data set's labellings.", "",
             "| data (n) | paper NMI / K | labelling | seed | K | V (NMI) | log p below the best, nats/point | s |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    notes = []
    for name, x, y, hashes in data:
        paper = PAPER.get(name, {"nmi": None, "k": "—"})
        head = f"{name} ({len(x)})", "—" if paper["nmi"] is None else f"{paper['nmi']:.2f} / {paper['k']}"
        rows = []
        for seed in args.seeds:
            for fallback in (True, False):
                labels, run, seconds = fit(x, seed, fallback)
                rows.append(("fallback" if fallback else "authors", seed, labels, seconds))
                print(f"{name} seed {seed} {rows[-1][0]}: K {len(np.unique(labels))}, "
                      f"V {score(y, labels)['v_measure']:.3f}, {seconds:.0f} s", flush=True)
        k_true = len(np.unique(y))
        rows.append((f"k-means K={k_true} (true K)", "–", faiss_kmeans(x.astype(np.float32), k_true, seed=0,
                                                                       niter=50, nredo=3)[0], None))
        rows.append(("true labels", "–", y, None))
        # every fit's prior is the same function of x and the preset: the last run's scores them all
        log_p = [dd.dp_log_joint(x, labels, run.prior, float(run.cfg["alpha"])) for _, _, labels, _ in rows]
        best = max(log_p)
        for (what, seed, labels, seconds), lp in zip(rows, log_p):
            lines.append(f"| {head[0]} | {head[1]} | {what} | {seed} | {len(np.unique(labels))} | "
                         f"{score(y, labels)['v_measure']:.3f} | {(best - lp) / len(x):.2f} | "
                         f"{'–' if seconds is None else f'{seconds:.0f}'} |")
        notes.append(f"- {name}: train_data.pt blob {hashes['train_data']}, train_labels.pt blob "
                     f"{hashes['train_labels']}")
    atomic_write_text(args.out, "\n".join(lines + ["", "Files:", ""] + notes) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
