"""Does lm's own score prefer the truth? Its selection evidence for the fit and for the gold labels.

    .venv/bin/python scripts/gold_evidence_study.py        # -> reports/gold_evidence_study.md
    .venv/bin/python scripts/gold_evidence_study.py --corpora cyrillic_handwriting japanese_hands --out /tmp/g.md

lm keeps, among its candidate fits and along each merge path, the labelling whose types best
predict their neighbours' hand-invariant symbols (``neighbour_evidence``, the selection's score;
README "The LM sign clusterer"). This study fits ``runs.lm`` (``--seed``, default 0) on each noisy
corpus, keeps the fit's own features (``small_types_study.fit_keeping_features``), draws the
selection's symbols from them exactly as the fit did (``LMSignClusterer.evidence_symbols``) and
scores, on those symbols:

- the fit (after the style alignment, what lm returns);
- the gold labels: where they score higher than the fit, the search fell short of a labelling the
  score prefers; where lower, no search that climbs this score reaches them;
- the gold labels with the tokens of the fit's small types (at most ``--max-size`` tokens) split
  off into those types, i.e. the truth plus the fit's outliers: what the score charges for them.

The labels are used only to score; nothing in lm reads this study.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from pair_model_calibration import load_corpus, noisy_corpora, report_path  # noqa: E402
from small_types_study import fit_keeping_features, within  # noqa: E402
from signclust.config import load_params  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import get_clusterer  # noqa: E402
from signclust.models.lm_clusterer import neighbour_evidence  # noqa: E402
from signclust.models.train import run_config  # noqa: E402


def with_outliers(gold: np.ndarray, z: np.ndarray, max_size: int) -> np.ndarray:
    """The gold labels (integer codes), each token of a type of ``z`` with at most ``max_size``
    tokens moved into a label of its own for that type (one new label per small type)."""
    z = np.unique(z, return_inverse=True)[1]
    small = np.bincount(z)[z] <= max_size
    out = gold.copy()
    out[small] = gold.max() + 1 + z[small]
    return np.unique(out, return_inverse=True)[1]


def study(corpus, row_cfg: dict, seed: int, max_size: int) -> dict:
    clusterer = get_clusterer("lm", **row_cfg)
    result, (x, texts, clean) = fit_keeping_features(clusterer, corpus, seed)
    if clean:
        raise UserError(f"{corpus.meta.get('name', 'corpus')}: a clean corpus has no selection evidence")
    # the selection's symbols without its kNN graph and linkage tree: with no coarse symbols given,
    # evidence_symbols draws the same Ward cut (coarse_symbols of x, select_symbols, seed) itself
    symbols = clusterer.evidence_symbols(x, (None, None, None), seed)
    beta = clusterer.cfg.select_beta
    _, gold = np.unique(corpus.labels(), return_inverse=True)
    z = np.unique(np.asarray(result.labels), return_inverse=True)[1]
    outl = with_outliers(gold, z, max_size)

    def evidence(labels):
        return neighbour_evidence(labels, texts, symbols, beta)

    return {"n": len(z), "k_true": int(gold.max()) + 1, "k": int(z.max()) + 1, "v": score(gold, z)["v_measure"],
            "ev_fit": evidence(z), "ev_gold": evidence(gold), "k_outliers": int(outl.max()) + 1,
            "ev_outliers": evidence(outl), "kept": [(s["pair_ratio"], s["k"], s["evidence"])
                                                    for s in result.info.get("selection", [])]}


def markdown(table: dict, seed: int, max_size: int) -> str:
    lines = ["# Does lm's selection score prefer the truth?", "",
             f"Written by `scripts/gold_evidence_study.py` (seed {seed}, `runs.lm` as configured). Evidence: "
             "`neighbour_evidence` (nats; higher is preferred) on the symbols lm's selection drew from the fit's "
             "own features. *gold − fit*: positive where the score prefers the truth to what the search "
             f"returned. *+ outliers*: the gold labels with the fit's small types (at most {max_size} tokens) "
             "split off; *their cost*: gold minus that. K bold: within ±20% of K true.", "",
             "| corpus | tokens | K true | K | V | evidence: fit | gold | gold − fit | nats/token | + outliers: K "
             "| their cost (nats) |", "|---|" + "---:|" * 10]
    for name, r in table.items():
        k = f"**{r['k']}**" if within(r["k"], r["k_true"]) else str(r["k"])
        gap = r["ev_gold"] - r["ev_fit"]
        lines.append(f"| {name} | {r['n']} | {r['k_true']} | {k} | {r['v']:.3f} | {r['ev_fit']:.1f} | "
                     f"{r['ev_gold']:.1f} | {gap:+.1f} | {gap / r['n']:+.4f} | {r['k_outliers']} | "
                     f"{r['ev_gold'] - r['ev_outliers']:+.1f} |")
    above = [n for n, r in table.items() if r["ev_gold"] > r["ev_fit"]]
    lines += ["", f"The gold labels score above the fit on {len(above)} of {len(table)} corpora"
              + (f" ({', '.join(above)})" if above else "") + "; there the search, not the score, stops short.", ""]
    return "\n".join(lines)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help="default: the noisy corpora (suite hands and handwriting, "
                                                 "cypriot, lineara)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-size", type=int, default=3, help="a small type has at most this many tokens")
    ap.add_argument("--out", help="default reports/gold_evidence_study.md")
    args = ap.parse_args(argv)
    if args.max_size < 1:
        raise UserError(f"--max-size {args.max_size}: a small type has at least 1 token")
    params = load_params()
    names = args.corpora or noisy_corpora(params)
    out = report_path(args.out, "gold_evidence_study.md", ("--corpora", "--seed", "--max-size"),
                      bool(args.corpora or args.seed or args.max_size != 3))
    _, row_cfg, _ = run_config("lm", params)
    corpora = {name: load_corpus(name, params["prepare"]) for name in names}   # a missing one fails before any fit
    table = {}
    for name, corpus in corpora.items():
        table[name] = r = study(corpus, row_cfg, args.seed, args.max_size)
        print(f"{name}: K {r['k']} (true {r['k_true']}), evidence fit {r['ev_fit']:.1f} gold {r['ev_gold']:.1f}",
              flush=True)
    text = markdown(table, args.seed, args.max_size)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
