"""Where lm's K overshoot comes from: types of one or two tokens (issue 9's K target).

    .venv/bin/python scripts/small_types_study.py          # -> reports/small_types_study.md
    .venv/bin/python scripts/small_types_study.py --corpora latin_hands cypriot --out /tmp/s.md

Fits ``runs.lm`` (seed 0) on each corpus and counts the types found with at most one and two
tokens beside the gold signs that rare. Then, as a what-if that nothing in lm does, it absorbs
every token of a type of at most m tokens into the larger type whose centroid is nearest in lm's
own feature space (the x that ``LMSignClusterer.features`` returns), and scores K and V again. The
labels are used only to score. Corpora not in ``data/corpora`` are built in memory by the suite's
builder, as scripts/pair_ratio_sweep.py does.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from pair_model_calibration import load_corpus, report_path  # noqa: E402  (data/corpora, else the suite builder in memory)
from signclust.config import load_params  # noqa: E402
from signclust.data import suite  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.train import run_config  # noqa: E402

SIZES = (1, 2)


def absorb_small_types(z: np.ndarray, x: np.ndarray, m: int) -> np.ndarray:
    """Every token of a type of at most ``m`` tokens moves to the larger type (> m tokens) with the
    nearest centroid in x (squared Euclidean); labels renumbered 0..K-1. No larger type: z as is."""
    z = np.unique(z, return_inverse=True)[1]
    sizes = np.bincount(z)
    big = np.flatnonzero(sizes > m)
    if len(big) == 0:
        return z
    centroids = np.stack([x[z == t].mean(axis=0) for t in big])                     # (k_big, D)
    small = np.flatnonzero(sizes[z] <= m)
    d = ((x[small, None, :] - centroids[None, :, :]) ** 2).sum(axis=-1)             # (n_small, k_big)
    out = z.copy()
    out[small] = big[d.argmin(axis=1)]
    return np.unique(out, return_inverse=True)[1]


def fit_keeping_features(clusterer, corpus: Corpus, seed: int):
    """lm's fit of ``corpus`` at ``seed`` and the (x, texts, clean) its ``features`` returned during
    that fit: the fit's own features, not a second encoder run."""
    features, kept = clusterer.features, {}

    def keep_features(c, ctx, *args, **kwargs):        # the last call: the fit's last round
        kept["f"] = features(c, ctx, *args, **kwargs)
        return kept["f"]

    clusterer.features = keep_features
    result = clusterer.fit(corpus, FitContext(seed=seed, n_clusters=None, device="cpu", progress=False))
    return result, kept["f"]


def study(corpus: Corpus, row_cfg: dict, seed: int) -> dict:
    result, (x, _, _) = fit_keeping_features(get_clusterer("lm", **row_cfg), corpus, seed)
    gold, z = corpus.labels(), np.asarray(result.labels)
    found, true = np.bincount(np.unique(z, return_inverse=True)[1]), np.unique(gold, return_counts=True)[1]
    row = {"k_true": len(true), "k": len(found), "v": score(gold, z)["v_measure"],
           "small": {m: (int((found <= m).sum()), int((true <= m).sum())) for m in SIZES}, "absorbed": {}}
    for m in SIZES:
        zz = absorb_small_types(z, x, m)
        row["absorbed"][m] = (int(zz.max()) + 1, score(gold, zz)["v_measure"])
    return row


def within(k: int, k_true: int) -> bool:
    return abs(k - k_true) <= 0.2 * k_true


def markdown(table: dict, seed: int) -> str:
    lines = ["# lm's K overshoot: types of one or two tokens", "",
             f"Written by `scripts/small_types_study.py` (seed {seed}, `runs.lm` as configured). *types of ≤ m "
             "tokens*: found / gold. *absorbed ≤ m*: K and V after every token of a type of at most m tokens "
             "moves to the larger type with the nearest centroid in lm's feature space — a what-if, not part "
             "of lm. Bold K: within ±20% of K true.", "",
             "| corpus | K true | K | V | types of 1 token | types of ≤ 2 | absorbed ≤ 1: K | V | "
             "absorbed ≤ 2: K | V |", "|---|" + "---:|" * 9]

    def k_cell(k, k_true):
        return f"**{k}**" if within(k, k_true) else str(k)

    for name, r in table.items():
        cells = [name, str(r["k_true"]), k_cell(r["k"], r["k_true"]), f"{r['v']:.3f}"]
        cells += [f"{r['small'][m][0]} / {r['small'][m][1]}" for m in SIZES]
        for m in SIZES:
            k, v = r["absorbed"][m]
            cells += [k_cell(k, r["k_true"]), f"{v:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    n = len(table)
    lines += ["", f"K within ±20% on {sum(within(r['k'], r['k_true']) for r in table.values())} of {n} corpora as "
              "fitted; " + "; ".join(
                  f"after absorbing types of ≤ {m}: {sum(within(r['absorbed'][m][0], r['k_true']) for r in table.values())}"
                  f" of {n}, mean V change {np.mean([r['absorbed'][m][1] - r['v'] for r in table.values()]):+.4f},"
                  f" largest V loss {min(r['absorbed'][m][1] - r['v'] for r in table.values()):+.4f}"
                  for m in SIZES) + ".", ""]
    return "\n".join(lines)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help="default: every suite corpus, cypriot, lineara")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="default reports/small_types_study.md")
    args = ap.parse_args(argv)
    params = load_params()
    names = args.corpora or [f"{s}_{r}" for s in params["prepare"]["suite"]["scripts"]
                             for r in suite.REGIMES] + ["cypriot", "lineara"]
    out = report_path(args.out, "small_types_study.md", ("--corpora", "--seed"), bool(args.corpora or args.seed))
    _, row_cfg, _ = run_config("lm", params)
    table = {}
    for name in names:
        corpus = load_corpus(name, params["prepare"])
        table[name] = r = study(corpus, row_cfg, args.seed)
        print(f"{name}: K {r['k']} (true {r['k_true']}) V {r['v']:.3f}; "
              + ", ".join(f"absorbed <= {m}: K {k} V {v:.3f}" for m, (k, v) in r["absorbed"].items()), flush=True)
    text = markdown(table, args.seed)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
