"""lm followed by the style alignment (models/style_alignment.py): K and V before and after.

    .venv/bin/python scripts/style_alignment_study.py --out reports/style_alignment_study.md
    .venv/bin/python scripts/style_alignment_study.py --corpora armenian_handwriting --seeds 0 1 --out /tmp/a.md

Fits ``runs.lm`` as configured but with ``style_alignment: false`` (lm makes this pass itself since it
became the default) on every noisy corpus (the suite's hands and handwriting regimes,
cypriot, lineara; or ``--corpora``, which may name the held-out scripts' corpora: the suite builder
makes them in memory) and applies ``align_styles`` to its labels, which reads the labels of the fit
and the texts only. The gold labels are used only to score: V before and after, and how many of the
joins put together two types whose majority is one gold sign (*right joins*). Every study names its --out.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from pair_model_calibration import load_corpus, noisy_corpora  # noqa: E402
from style_split_study import lm_row, majority_signs  # noqa: E402  (runs.lm checked; majority sign per type)
from signclust.config import load_params  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.style_alignment import align_styles  # noqa: E402


def right_joins(z: np.ndarray, decoded: dict, p_min: float, gold: np.ndarray) -> int:
    """Joins (posterior share >= p_min) of two types whose majority gold sign is the same; z compact."""
    majority = majority_signs(z, gold)[0]
    return sum(majority[c] == majority[a] for c, (a, p) in decoded.items() if p >= p_min)


def study(corpus, row_cfg: dict, seed: int, p_min: float) -> dict:
    result = get_clusterer("lm", **row_cfg).fit(corpus, FitContext(seed=seed, n_clusters=None, device="cpu",
                                                                     progress=False))
    gold = np.asarray(corpus.labels())
    z = np.unique(np.asarray(result.labels), return_inverse=True)[1]
    texts = [t for t in corpus.texts() if len(t)]
    t0 = time.time()
    aligned, info = align_styles(z, texts, p_min)
    return {"k_true": len(np.unique(gold)), "k": int(z.max()) + 1, "v": score(gold, z)["v_measure"],
            "k_after": int(aligned.max()) + 1, "v_after": score(gold, aligned)["v_measure"],
            "lambda2": info["lambda2"], "minor_texts": info["minor_texts"], "texts": len(texts),
            "decoded": len(info["decoded"]), "joined": info["joined"],
            "right": right_joins(z, info["decoded"], p_min, gold), "seconds": time.time() - t0}


def markdown(rows: dict, seeds: list[int], p_min: float) -> str:
    lines = ["# lm followed by the style alignment", "",
             f"Written by `scripts/style_alignment_study.py` (seeds {', '.join(map(str, seeds))}, `runs.lm` as configured with "
             "`style_alignment: false`, "
             f"then `models/style_alignment.align_styles` with p_min {p_min}). The alignment splits the texts into "
             "two styles by the types that avoid each other's texts (λ2: the second eigenvalue of the texts' "
             "normalised Laplacian, 0 for two groups that share no such type), deciphers the minor group's own "
             "types against the major group's bigram model (HMM, emissions by EM) and joins a type to its decoding "
             "where the posterior share is ≥ p_min. It reads the fit's labels and the texts; the gold labels "
             "only score: *right*: joins of two types whose majority is one gold sign. K error: bold within ±20%.", "",
             "| corpus | seed | K true | K | V | λ2 | minor texts | decoded | joined | right | K after | V after | Δ V |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    bold = lambda k, kt: f"**{k}**" if abs(k - kt) <= 0.2 * kt else str(k)  # noqa: E731
    for (name, seed), r in rows.items():
        lam = "–" if r["lambda2"] is None else f"{r['lambda2']:.3f}"
        lines.append(f"| {name} | {seed} | {r['k_true']} | {bold(r['k'], r['k_true'])} | {r['v']:.3f} | {lam} | "
                     f"{r['minor_texts']} of {r['texts']} | {r['decoded']} | {r['joined']} | {r['right']} | "
                     f"{bold(r['k_after'], r['k_true'])} | {r['v_after']:.3f} | {r['v_after'] - r['v']:+.3f} |")
    dv = [r["v_after"] - r["v"] for r in rows.values()]
    within = lambda key: sum(abs(r[key] - r["k_true"]) <= 0.2 * r["k_true"] for r in rows.values())  # noqa: E731
    lines += ["", f"Over {len(rows)} fits: mean Δ V {np.mean(dv):+.4f}, largest loss {min(dv):+.4f}, largest gain "
              f"{max(dv):+.4f}; joins {sum(r['joined'] for r in rows.values())}, right "
              f"{sum(r['right'] for r in rows.values())}; K within ±20% {within('k')} → {within('k_after')}; "
              f"the alignment took at most {max(r['seconds'] for r in rows.values()):.1f} s a fit.", ""]
    return "\n".join(lines)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help="default: the suite's hands and handwriting corpora, cypriot, lineara")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--p-min", type=float, default=0.5, help="the posterior share a join needs")
    ap.add_argument("--out", required=True, help="the report (a new name for each study)")
    args = ap.parse_args(argv)
    if not 0 < args.p_min <= 1:
        raise UserError(f"--p-min {args.p_min}: expected a share in (0, 1]")
    params = load_params()
    row_cfg = {**lm_row(params, "aligns lm's fit"), "style_alignment": False}   # the pass is measured here
    rows = {}
    for name in args.corpora or noisy_corpora(params):
        corpus = load_corpus(name, params["prepare"])
        for seed in args.seeds:
            rows[(name, seed)] = r = study(corpus, row_cfg, seed, args.p_min)
            print(f"{name} seed {seed}: K {r['k']} -> {r['k_after']} (true {r['k_true']}), V {r['v']:.3f} -> "
                  f"{r['v_after']:.3f}, joins {r['joined']} ({r['right']} right)", flush=True)
    text = markdown(rows, args.seeds, args.p_min)
    atomic_write_text(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
