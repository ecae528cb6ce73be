"""Where lm's extra types on a noisy corpus come from: a sign split by hand style, and what the merge
gain says about joining the halves.

    .venv/bin/python scripts/style_split_study.py --out reports/style_split_study.md
    .venv/bin/python scripts/style_split_study.py --corpora latin_handwriting --seed 1 --out /tmp/s.md

Fits ``runs.lm`` as configured (one seed) on every noisy corpus (the suite's hands and handwriting
regimes, cypriot, lineara; or ``--corpora``) and reads the kept fit's last labelling, with the
features, pair model and kNN graph its merge loop ended on. The labels are used only to diagnose:

- a *split* is a type of at least ``--min-tokens`` tokens, ``--purity`` of them one gold sign, whose
  sign is also the majority of a larger type (the *main* type): one sign held as two types;
- for each split, the merge gain's terms for (main, split) at the end of the loop, as
  ``LMSignClusterer._merge`` computes them: dL_LM over the types (``lm_gain``), over the coarse
  context symbols, the texts' avoidance, and whether the pair is a merge candidate at all;
- *what if*: K and V with every split joined to its main type (not a method: it reads the labels).

Beside each corpus: K and V of the same seed in the committed metrics (``reports/metrics/lm_<corpus>.json``),
to show how far a fit on this machine's CPU lands from the committed one. A study names its --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from pair_model_calibration import load_corpus, noisy_corpora  # noqa: E402
from signclust.config import load_params, numeric_platform  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models import lm_clusterer as lm  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.train import run_config  # noqa: E402


class Probe(lm.LMSignClusterer):
    """lm, keeping what every merge loop ended on: (labels, x, texts, pair model, coarse symbols, edges)."""
    name = "lm_probe"

    def __init__(self, **params):
        super().__init__(**params)
        self.ends = []

    def _merge(self, z, x, texts, pair, coarse, history, ctx, *args, **kwargs):
        z = super()._merge(z, x, texts, pair, coarse, history, ctx, *args, **kwargs)   # forms, path, symbols
        self.ends.append((z, x, texts, pair, coarse, getattr(self, "edges", None) if pair is not None else None))
        return z


def majority_signs(z: np.ndarray, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k,) each type's majority gold sign (the smallest on a tie) and the share of its tokens that
    sign holds; z compact (0 .. k-1), as ``np.unique(..., return_inverse=True)`` gives."""
    from sklearn.metrics.cluster import contingency_matrix
    signs = np.unique(gold)
    cm = contingency_matrix(gold, z)                                          # (signs, k)
    return signs[cm.argmax(0)], cm.max(0) / cm.sum(0)


def splits(z: np.ndarray, gold: np.ndarray, min_tokens: int, purity: float) -> list[tuple[int, int]]:
    """(main, split) type pairs: ``split`` holds >= min_tokens tokens, >= purity of them one gold sign,
    and ``main`` is the largest type whose majority is that sign."""
    size = np.bincount(z)
    maj, pur = majority_signs(z, gold)
    out = []
    for sign in np.unique(maj):
        ts = np.flatnonzero(maj == sign)
        main = ts[np.argmax(size[ts])]
        out += [(int(main), int(t)) for t in ts if t != main and size[t] >= min_tokens and pur[t] >= purity]
    return out


def gain_terms(end: tuple, cfg: lm.LMConfig, u: np.ndarray, v: np.ndarray) -> dict:
    """dL_LM over the types and over the coarse symbols, avoidance and candidacy of pairs (u, v)."""
    z, x, texts, pair, coarse, edges = end
    k = int(z.max()) + 1
    size = np.bincount(z, minlength=k).astype(np.float64)
    left, right = lm.context_counts(z, texts, k)
    d_lm = lm.lm_gain(left, right, lm.context_prior(z, len(texts), k, cfg.context_beta), u, v)
    k_c = int(coarse.max()) + 1
    c_left, c_right = lm.context_counts(z, texts, k, coarse, k_c)
    d_coarse = lm.lm_gain(c_left, c_right, lm.context_prior(coarse, len(texts), k_c, cfg.context_beta), u, v)
    cu, cv, _, _ = lm.candidate_pairs(lm.group_sums(x, z, k) / size[:, None], left, right, cfg.candidates)
    cand = set(zip(cu.tolist(), cv.tolist()))
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    return {"d_lm": d_lm, "d_coarse": d_coarse, "avoid": lm.avoidance(z, k, texts, u, v),
            "candidate": np.array([(a, b) in cand for a, b in zip(lo.tolist(), hi.tolist())])}


def committed(name: str, seed: int) -> tuple[int, float] | None:
    path = REPO / "reports" / "metrics" / f"lm_{name}.json"
    if not path.exists():
        return None
    row = json.loads(path.read_text())["per_seed"].get(f"seed{seed}")
    return (int(row["k_found"]), float(row["v_measure"])) if row else None


def study(name: str, corpus, row_cfg: dict, seed: int, min_tokens: int, purity: float) -> dict:
    probe = Probe(**row_cfg)
    result = probe.fit(corpus, FitContext(seed=seed, n_clusters=None, device="cpu", progress=False))
    gold = np.asarray(corpus.labels())
    labels = np.asarray(result.labels)
    row = {"k_true": len(np.unique(gold)), "k": int(result.info["k_found"]),
           "v": score(gold, labels)["v_measure"], "committed": committed(name, seed)}
    if result.info.get("clean_corpus") or not probe.ends:
        return {**row, "splits": None}
    # the kept fit's merge loop: the last selection tried every pair ratio, in order
    ratios = probe.cfg.pair_ratios
    end = probe.ends[-len(ratios):][ratios.index(result.info["pair_ratio"])]
    z = np.unique(end[0], return_inverse=True)[1]
    if not np.array_equal(z, np.unique(labels, return_inverse=True)[1]):
        raise RuntimeError(f"{name}: the probed labelling is not the fit's")
    pairs = splits(z, gold, min_tokens, purity)
    size = np.bincount(z)
    merged = z.copy()
    for main, t in pairs:
        merged[z == t] = main
    row.update(splits=len(pairs), split_tokens=int(sum(size[t] for _, t in pairs)),
               whatif_k=len(np.unique(merged)), whatif_v=score(gold, merged)["v_measure"])
    if pairs:
        u, v = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
        terms = gain_terms(end, probe.cfg, u, v)
        row.update(median_d_lm=float(np.median(terms["d_lm"])), median_d_coarse=float(np.median(terms["d_coarse"])),
                   coarse_positive=int((terms["d_coarse"] > 0).sum()), avoiding=int((terms["avoid"] < -probe.cfg.avoid_c0).sum()),
                   candidates=int(terms["candidate"].sum()))
    return row


def markdown(rows: dict, seed: int, min_tokens: int, purity: float) -> str:
    cpu = numeric_platform()["cpu"].get("model name", "an unnamed CPU")
    lines = ["# Where lm's extra types come from: signs split by hand style", "",
             f"Written by `scripts/style_split_study.py` (seed {seed}, `runs.lm` as configured, fitted on {cpu}). "
             f"A *split*: a type of ≥ {min_tokens} tokens, ≥ {purity:.0%} one gold sign, whose sign is also the "
             "majority of a larger type (its *main* type). The gain terms are those of `LMSignClusterer._merge` "
             "for (main, split) at the end of the kept fit's merge loop: dL_LM over the types, over the coarse "
             "context symbols (used where the pair avoids each other's texts, avoidance < −avoid_c0), and how "
             "many of the pairs are merge candidates at all. *What if*: every split joined to its main type "
             "(reads the labels; not a method). *Committed*: the same seed in `reports/metrics/lm_<corpus>.json`.", "",
             "| corpus | K true | K | V | committed K | V | splits | their tokens | what if: K | V | "
             "median dL_LM | median dL_LM coarse | coarse > 0 | avoiding | candidates |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        c = r["committed"]
        cells = [name, str(r["k_true"]), str(r["k"]), f"{r['v']:.3f}",
                 str(c[0]) if c else "–", f"{c[1]:.3f}" if c else "–"]
        if r["splits"] is None:
            cells += ["clean corpus"] + ["–"] * 8
        else:
            cells += [str(r["splits"]), str(r["split_tokens"]), str(r["whatif_k"]), f"{r['whatif_v']:.3f}"]
            cells += ([f"{r['median_d_lm']:.1f}", f"{r['median_d_coarse']:.1f}", f"{r['coarse_positive']}",
                       f"{r['avoiding']}", f"{r['candidates']}"] if r["splits"] else ["–"] * 5)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""])


def lm_row(params: dict, purpose: str) -> dict:
    """``runs.lm``'s configuration of method lm; one error line where the row names another method."""
    method, row_cfg, _ = run_config("lm", params)
    if method != "lm":
        raise UserError(f"runs.lm uses method {method}; this study {purpose}")
    return row_cfg


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help="default: the suite's hands and handwriting corpora, cypriot, lineara")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-tokens", type=int, default=5)
    ap.add_argument("--purity", type=float, default=0.8)
    ap.add_argument("--out", required=True, help="the report (a new name for each study)")
    args = ap.parse_args(argv)
    if not 0 < args.purity <= 1:
        raise UserError(f"--purity {args.purity}: expected a share in (0, 1]")
    params = load_params()
    row_cfg = lm_row(params, "probes lm's merge loop")
    rows = {}
    for name in args.corpora or noisy_corpora(params):
        corpus = load_corpus(name, params["prepare"])
        rows[name] = r = study(name, corpus, row_cfg, args.seed, args.min_tokens, args.purity)
        print(f"{name}: K {r['k']} (true {r['k_true']}) V {r['v']:.3f}, splits {r['splits']}", flush=True)
    text = markdown(rows, args.seed, args.min_tokens, args.purity)
    atomic_write_text(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
