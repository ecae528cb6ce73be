"""DeepDPM's cluster-net rate on a subset: the authors' rate as given, or kept per epoch (issue 10).

    .venv/bin/python scripts/deepdpm_split_lr.py [AUTHORS_DIR ...] [--subset 10000] [--seed 0]
        [--threads 1] [--out reports/deepdpm_split_lr.md]

The authors' clustering-net rate, 5e-4, was set for all 70 000 MNIST codes at batch 128: 547 Adam steps
an epoch. The paper's schedule counts epochs (a move every 30, parameters frozen 5 after it), so on a
subset of 10 000 points each epoch has 79 steps and the net moves a seventh as far between moves. After a
split both new clusters start as copies of the parent's output unit; if the net has not told them apart
when the freeze ends, the M-step sees each copy at about half of every parent point, one copy takes them
all, and the next merge step merges the empty one away. This study fits the `paper` preset twice on each
data set, with ``cluster_lr_steps`` 0 (the rate as given) and 547 (the rate per epoch kept, the presets'
setting), and counts for every accepted split whether both of its clusters still hold more than
``min_split_size`` points just before the next move step. Data: N2D's features made here (as
scripts/deepdpm_n2d_features.py: its autoencoder 5 epochs on all 70 000 MNIST images, UMAP-10, L2 rows)
and each of the authors' ``pretrained_embeddings/umap_embedded_datasets/<NAME>`` folders given (as
scripts/deepdpm_authors_embeddings.py), both on the same fixed subset. The labels only score.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
from signclust.data.benchmarks import load_split  # noqa: E402
from signclust.errors import cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.baselines import deepdpm as dd  # noqa: E402
from signclust.models.baselines._codes import l2_rows  # noqa: E402


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


authors = _script("deepdpm_authors_embeddings")
n2d = _script("deepdpm_n2d_features")
RATES = (0, 547)                          # cluster_lr_steps: the rate as given | kept per epoch


def fit(x: np.ndarray, seed: int, lr_steps: int) -> tuple[np.ndarray, dd._DPMRun, list[np.ndarray], float]:
    """The `paper` preset with the split fallback and ``cluster_lr_steps``; (labels, run, the cluster
    sizes after every epoch, seconds)."""
    sizes: list[np.ndarray] = []
    labels, run, seconds = authors.fit(x, seed, True, on_epoch=lambda r: sizes.append(np.bincount(r.z, minlength=r.K)),
                                       cluster_lr_steps=lr_steps)
    return labels, run, sizes, seconds


def kept_splits(run: dd._DPMRun, sizes: list[np.ndarray]) -> list[tuple[int, int, int]]:
    """For each epoch with accepted splits: (epoch, splits, splits whose two clusters both hold more than
    min_split_size points after the last epoch before the next move step). A split step appends each
    split's two clusters at the end, in order, and no index changes before the next move."""
    every, min_size = int(run.cfg["split_merge_every"]), int(run.cfg["min_split_size"])
    out = []
    for epoch in sorted({m["epoch"] for m in run.moves if m["type"] == "split"}):
        n = sum(m["epoch"] == epoch and m["type"] == "split" for m in run.moves)
        k_after = len(sizes[epoch])                          # sizes[e]: after epoch e, its move included
        later = sizes[min(epoch + every - 1, len(sizes) - 1)]
        new = later[k_after - 2 * n:k_after].reshape(n, 2)
        out.append((epoch, n, int((new.min(axis=1) > min_size).sum())))
    return out


@cli_main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="the authors' umap_embedded_datasets/<NAME> folders")
    ap.add_argument("--subset", type=int, default=10000, help="points of each (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ae-epochs", type=int, default=5, help="N2D autoencoder epochs (N2D: 1000)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the figures depend on it)")
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "deepdpm_split_lr.md")
    args = ap.parse_args(argv)
    n2d.check_settings(args)
    data = [(folder.name, *authors.load(folder, args.subset)[:2]) for folder in args.dirs]   # checked first
    torch.set_num_threads(args.threads)
    images, y_all, _ = load_split("mnist_full")
    features = n2d.n2d_features(images, args.ae_epochs, args.seed)
    keep = authors.fixed_subset(len(features), args.subset)
    data.insert(0, (f"MNIST, N2D features made here ({args.ae_epochs} AE epochs)", l2_rows(features[keep]),
                    y_all.astype(np.int64)[keep]))
    lines = ["# DeepDPM: the cluster net's rate on a subset", "",
             f"Generated by `python scripts/deepdpm_split_lr.py {' '.join(d.name for d in args.dirs)} --subset "
             f"{args.subset} --seed {args.seed} --ae-epochs {args.ae_epochs} --threads {args.threads}`. The "
             "`paper` preset with the split fallback; `cluster_lr_steps` 0: the authors' rate 5e-4 as given; "
             "547: kept per epoch (5e-4 x 547 / the steps an epoch here, the presets' setting). Kept splits: "
             "accepted splits whose two clusters both still hold more than `min_split_size` points before the "
             "next move step. V is NMI (arithmetic mean).", "",
             "| data (n) | paper NMI / K | cluster_lr_steps | rate | K | V (NMI) | splits kept / accepted | "
             "split steps (epoch: kept/accepted) | s |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for name, x, y in data:
        paper = authors.PAPER.get(name.split(",")[0], {"nmi": None, "k": "—"})
        head = f"{name} ({len(x)})", "—" if paper["nmi"] is None else f"{paper['nmi']:.2f} / {paper['k']}"
        for lr_steps in RATES:
            labels, run, sizes, seconds = fit(x, args.seed, lr_steps)
            kept = kept_splits(run, sizes)
            k, v = len(np.unique(labels)), score(y, labels)["v_measure"]
            print(f"{name} cluster_lr_steps {lr_steps}: K {k}, V {v:.3f}, {seconds:.0f} s", flush=True)
            steps = ", ".join(f"{e}: {good}/{n}" for e, n, good in kept) or "—"
            lines.append(f"| {head[0]} | {head[1]} | {lr_steps} | {run.cluster_lr:.2g} | {k} | {v:.3f} | "
                         f"{sum(g for *_, g in kept)} / {sum(n for _, n, _ in kept)} | {steps} | {seconds:.0f} |")
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
