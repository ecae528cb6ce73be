"""What could place the tokens of lm's tiny types: their look, or their neighbours? (issue 9's K target)

    .venv/bin/python scripts/residue_types_study.py          # -> reports/residue_types_study.md
    .venv/bin/python scripts/residue_types_study.py --corpora cyrillic_handwriting --out /tmp/r.md

On the handwriting corpora lm finds too many types, most of the excess types of 1-3 tokens
(reports/small_types_study.md); on the Japanese ones too few, while hundreds of its signs have 1-3
tokens. This fits ``runs.lm`` (seed 0) on each corpus, keeps its own features (the x that
``LMSignClusterer.features`` returns in the fit's last round) and sorts the tokens of its *small*
types (at most ``--max-tokens``) by their gold sign:

- *residue*: the sign is the majority of a larger type (its *sign's type*: the largest such), so
  the token is an outlier of a sign lm holds elsewhere -- moving it there would lower K, rightly;
- *rare sign*: no larger type holds the sign in majority -- moving the token anywhere would
  merge two signs.

For the residue it asks whether the two kinds of evidence lm merges by would find the sign's type:

- look: the rank of the sign's type among the larger types by centroid distance in x (1: nearest);
- neighbours: the *context lift* of a larger type b for a token with left and right neighbour
  types l, r: log P(l | b) + log P(r | b) - log P(l) - log P(r), each type's neighbour
  distribution smoothed towards the corpus's by ``--pseudo`` counts (a small type's tokens are
  not in b's counts: no token scores itself). Positive: b's contexts favour this token's neighbours.

The same lift of the nearest larger type is given for both kinds: if it separated residue from rare
signs, a rule could absorb the one and keep the other. The labels are used only to sort and score;
nothing here is part of lm. Corpora not in ``data/corpora`` are built in memory by the suite's builder.
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
from signclust.errors import cli_main  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import get_clusterer  # noqa: E402
from signclust.models.lm_clusterer import context_counts, group_sums  # noqa: E402
from signclust.models.train import run_config  # noqa: E402
from small_types_study import fit_keeping_features  # noqa: E402


def neighbours(texts: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n,) each token's left and right neighbour token, -1 at a text's edge."""
    left, right = np.full(n, -1), np.full(n, -1)
    for t in texts:
        left[t[1:]], right[t[:-1]] = t[:-1], t[1:]
    return left, right


def context_lift(z: np.ndarray, texts: list[np.ndarray], pseudo: float) -> np.ndarray:
    """(n, k) the context lift of every type for every token (module docstring): the neighbours'
    types l, r (k: the text's edge) under each type's smoothed neighbour distribution against the
    corpus's. A token's own type's counts include the token; only other types' lifts are read."""
    k = int(z.max()) + 1
    left_c, right_c = context_counts(z, texts, k)                                 # (k, k+1) each
    lt, rt = neighbours(texts, len(z))
    sym_l, sym_r = np.where(lt >= 0, z[lt], k), np.where(rt >= 0, z[rt], k)       # (n,) neighbour symbols

    def log_ratio(counts: np.ndarray, sym: np.ndarray) -> np.ndarray:
        marginal = (counts.sum(0) + 0.5) / (counts.sum() + 0.5 * counts.shape[1])    # (k+1,)
        p = (counts[:, sym] + pseudo * marginal[sym]) / (counts.sum(1, keepdims=True) + pseudo)   # (k, n)
        return (np.log(p) - np.log(marginal[sym])).T                              # (n, k)
    return log_ratio(left_c, sym_l) + log_ratio(right_c, sym_r)


def study(x: np.ndarray, z: np.ndarray, gold: np.ndarray, texts: list[np.ndarray], max_tokens: int,
          pseudo: float) -> dict:
    """The counts and medians of one fit (module docstring); gold: each token's sign."""
    z = np.unique(z, return_inverse=True)[1]
    gold = np.unique(gold, return_inverse=True)[1]
    k = int(z.max()) + 1
    size = np.bincount(z, minlength=k)
    majority = np.array([np.bincount(gold[z == t]).argmax() for t in range(k)])
    large = np.flatnonzero(size > max_tokens)
    row = {"k_true": int(gold.max()) + 1, "k": k, "small_types": int((size <= max_tokens).sum())}
    small = np.flatnonzero(size[z] <= max_tokens)
    row["small_tokens"] = len(small)
    if not len(small) or not len(large):
        return dict(row, residue=0, rare=0)
    # the sign's type of each sign: the largest larger type that holds it in majority
    signs_type = {}
    for t in large[np.argsort(-size[large], kind="stable")]:
        signs_type.setdefault(int(majority[t]), t)
    centroids = group_sums(x, z, k)[large] / size[large, None]                    # (L, D)
    dist = np.linalg.norm(x[small, None, :] - centroids[None], axis=2)            # (S, L)
    order = np.argsort(dist, axis=1, kind="stable")
    lift = context_lift(z, texts, pseudo)[small][:, large]                        # (S, L)
    nearest_lift = lift[np.arange(len(small)), order[:, 0]]
    where = {int(t): i for i, t in enumerate(large)}
    is_residue = np.array([int(g) in signs_type for g in gold[small]])
    rank, sign_lift = [], []
    for i in np.flatnonzero(is_residue):
        col = where[int(signs_type[int(gold[small[i]])])]
        rank.append(int(np.flatnonzero(order[i] == col)[0]) + 1)
        sign_lift.append(lift[i, col])
    rank = np.array(rank)
    row.update(residue=int(is_residue.sum()), rare=int((~is_residue).sum()))
    if len(rank):
        row.update(nearest=float((rank == 1).mean()), top5=float((rank <= 5).mean()),
                   top10=float((rank <= 10).mean()), sign_lift=float(np.median(sign_lift)),
                   residue_nearest_lift=float(np.median(nearest_lift[is_residue])))
    if (~is_residue).any():
        row["rare_nearest_lift"] = float(np.median(nearest_lift[~is_residue]))
    return row


def markdown(table: dict, seed: int, max_tokens: int, pseudo: float) -> str:
    lines = ["# What could place the tokens of lm's tiny types", "",
             f"Written by `scripts/residue_types_study.py` (seed {seed}, `runs.lm` as configured). Small types: "
             f"at most {max_tokens} tokens. *Residue*: a small type's token whose gold sign a larger type holds in "
             "majority (its sign's type); *rare sign*: one whose sign no larger type holds. *Sign's type nearest / "
             "in 5 / in 10*: the share of residue tokens whose sign's type is the nearest, among the 5, among the "
             "10 nearest larger types by centroid in lm's own features (lm's merges look at 10 visual "
             "partners). *Lift*: log P(left | type) + log P(right | type) − log P(left) − log P(right), nats, "
             f"each type's neighbour distribution smoothed by {pseudo:g} pseudo-counts towards the corpus's; "
             "median over the tokens. The labels are used only to sort and score; nothing here is part of lm.", "",
             "| corpus | K true | K | small types | their tokens | residue | rare sign | sign's type nearest | "
             "in 5 | in 10 | lift of the sign's type | lift of the nearest: residue | rare sign |",
             "|---|" + "---:|" * 12]

    def pct(r, key):
        return f"{100 * r[key]:.0f}%" if key in r else "–"

    def nats(r, key):
        return f"{r[key]:+.2f}" if key in r else "–"

    for name, r in table.items():
        cells = [name, str(r["k_true"]), str(r["k"]), str(r["small_types"]), str(r["small_tokens"]),
                 str(r["residue"]), str(r["rare"]), pct(r, "nearest"), pct(r, "top5"), pct(r, "top10"),
                 nats(r, "sign_lift"), nats(r, "residue_nearest_lift"), nats(r, "rare_nearest_lift")]
        lines.append("| " + " | ".join(cells) + " |")
    residue = sum(r["residue"] for r in table.values())
    if residue:
        share = sum(r.get("nearest", 0) * r["residue"] for r in table.values()) / residue
        lines += ["", f"Over all corpora: {residue} residue tokens, of which {100 * share:.0f}% have their sign's "
                  "type as the nearest larger type; "
                  f"{sum(r['rare'] for r in table.values())} tokens of rare signs.", ""]
    return "\n".join(lines)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help="default: the suite's hands and handwriting corpora")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=3, help="a small type holds at most this many tokens")
    ap.add_argument("--pseudo", type=float, default=5.0, help="pseudo-counts of the neighbour distributions")
    ap.add_argument("--out", help="default reports/residue_types_study.md")
    args = ap.parse_args(argv)
    params = load_params()
    names = args.corpora or [f"{s}_{r}" for s in params["prepare"]["suite"]["scripts"]
                             for r in suite.REGIMES if r != "free"]
    out = report_path(args.out, "residue_types_study.md", ("--corpora", "--seed", "--max-tokens", "--pseudo"),
                      bool(args.corpora or args.seed or args.max_tokens != 3 or args.pseudo != 5.0))
    _, row_cfg, _ = run_config("lm", params)
    table = {}
    for name in names:
        corpus = load_corpus(name, params["prepare"])
        result, (x, texts, _) = fit_keeping_features(get_clusterer("lm", **row_cfg), corpus, args.seed)
        table[name] = r = study(x, np.asarray(result.labels), corpus.labels(), texts, args.max_tokens, args.pseudo)
        print(f"{name}: K {r['k']} (true {r['k_true']}), {r['small_tokens']} tokens in {r['small_types']} small "
              f"types: {r['residue']} residue, {r['rare']} of rare signs", flush=True)
    text = markdown(table, args.seed, args.max_tokens, args.pseudo)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
