"""Lone types and rare signs: whether lm's K is right for the right reason (issue 9's K target).

    .venv/bin/python scripts/lone_types_study.py          # -> reports/lone_types_study.md
    .venv/bin/python scripts/lone_types_study.py --set seat_odds=true --out reports/lone_types_study_seat_odds.md

K found counts every type, so a fit that keeps outlying tokens of frequent signs as types of their
own (lone types) and swallows the rare signs into other types can land on K true by two errors
that cancel. For each corpus this fits ``runs.lm`` (seed 0 by default, never given K) and counts:
the lone types found and how many of them hold a token of a *rare* gold sign (at most ``--rare``
tokens); the rare gold signs; and the rare signs' tokens that sit in a type holding their sign
alone, in the micro-clusters lm starts from (the cut of the pair model the selection kept) and in
its final types. The labels are used only to count. The default corpora are the held-out scripts'
noisy regimes (scripts/heldout_scripts.py), built in memory by the suite's builder.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from heldout_scripts import parse_changes  # noqa: E402
from pair_model_calibration import load_corpus, report_path  # noqa: E402
from small_types_study import fit_keeping_features  # noqa: E402
from signclust.config import load_params  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models import lm_clusterer as lm  # noqa: E402
from signclust.models.base import get_clusterer  # noqa: E402
from signclust.models.train import run_config  # noqa: E402

HELD_OUT = ["armenian_hands", "armenian_handwriting", "ethiopic_hands", "ethiopic_handwriting"]


def rare_alone(gold: np.ndarray, z: np.ndarray, rare: np.ndarray) -> int:
    """How many of the tokens ``rare`` (indices) sit in a type of z that holds only their gold sign."""
    out = 0
    for t in rare:
        out += bool(np.all(gold[z == z[t]] == gold[t]))
    return out


def census(gold: np.ndarray, z: np.ndarray, micro: np.ndarray, rare_max: int) -> dict:
    """The counts of one fit: gold (n,) sign codes, z (n,) its types, micro (n,) its micro-clusters."""
    gold, z = np.unique(gold, return_inverse=True)[1], np.unique(z, return_inverse=True)[1]
    gold_size, size = np.bincount(gold), np.bincount(z)
    lone = np.flatnonzero(size[z] == 1)                                   # tokens that are a type alone
    rare = np.flatnonzero(gold_size[gold] <= rare_max)                    # tokens of rare gold signs
    return {"k_true": len(gold_size), "k": len(size), "lone": len(lone),
            "lone_rare": int((gold_size[gold[lone]] <= rare_max).sum()),
            "rare_signs": int((gold_size <= rare_max).sum()), "rare_tokens": len(rare),
            "rare_alone_micro": rare_alone(gold, np.unique(micro, return_inverse=True)[1], rare),
            "rare_alone": rare_alone(gold, z, rare)}


def study(corpus: Corpus, row_cfg: dict, seed: int, rare_max: int) -> dict:
    """Fits lm as configured and counts (``census``); the micro-clusters are lm's own: the cut of the
    pair model its selection kept, on the features of the same fit (``micro_k`` of them). With
    ``refits`` the fit records the refitted pair model, not the one that cut the micro-clusters:
    refused."""
    if row_cfg.get("refits", 0):
        raise UserError(f"refits {row_cfg['refits']}: the study rebuilds the micro-clusters from the pair model the fit "
                        "records, which refits replace; run it with refits 0")
    clusterer = get_clusterer("lm", **row_cfg)
    result, (x, _, clean) = fit_keeping_features(clusterer, corpus, seed)
    pair = result.info.get("pair_model")
    micro = lm.micro_clusters(x, clusterer.hand_images(corpus)[1], clean, lm.PairModel(**pair) if pair else None,
                              clusterer.cfg, seed)
    return {**census(corpus.labels(), np.asarray(result.labels), micro, rare_max),
            "micro_k": int(len(np.unique(micro)))}


def markdown(table: dict, seed: int, rare_max: int, changes: dict) -> str:
    lines = ["# Lone types and rare signs: is lm's K right for the right reason?", "",
             f"Written by `scripts/lone_types_study.py` (seed {seed}, `runs.lm` as configured"
             + (", changed by " + ", ".join(f"`{k}: {v}`" for k, v in changes.items()) if changes else "")
             + f"). *Lone types*: types of one token; *of a rare sign*: whose token's gold sign has at most "
             f"{rare_max} tokens. *Rare signs' tokens alone*: tokens of such signs in a type that holds their "
             "sign only, in lm's micro-clusters (the cut of the pair model its selection kept) and in its "
             "final types. A K near K true with many lone types not of rare signs and few rare signs alone "
             "is two errors cancelling.", "",
             "| corpus | K true | K found | lone types | of a rare sign | rare gold signs | their tokens | "
             "alone in micro-clusters | alone in the types |", "|---|" + "---:|" * 8]
    for name, r in table.items():
        lines.append(f"| {name} | {r['k_true']} | {r['k']} | {r['lone']} | {r['lone_rare']} | {r['rare_signs']} | "
                     f"{r['rare_tokens']} | {r['rare_alone_micro']} | {r['rare_alone']} |")
    return "\n".join(lines) + "\n"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help=f"default: {' '.join(HELD_OUT)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rare", type=int, default=2, help="a gold sign of at most this many tokens is rare")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="change lm's parameters")
    ap.add_argument("--out", help="default reports/lone_types_study.md")
    args = ap.parse_args(argv)
    if args.rare < 1:
        raise UserError(f"--rare {args.rare}: expected at least 1")
    if args.seed < 0:
        raise UserError(f"--seed {args.seed}: expected 0 or more")
    changes = parse_changes(args.set)
    out = report_path(args.out, "lone_types_study.md", ("--corpora", "--seed", "--rare", "--set"),
                      bool(args.corpora or args.seed or args.rare != 2 or changes))
    params = load_params()
    _, row_cfg, _ = run_config("lm", params)
    get_clusterer("lm", **{**row_cfg, **changes})                 # bad parameters: one line, before any fit
    corpora = {name: load_corpus(name, params["prepare"]) for name in args.corpora or HELD_OUT}   # bad names too
    table = {}
    for name, corpus in corpora.items():
        table[name] = r = study(corpus, {**row_cfg, **changes}, args.seed, args.rare)
        print(f"{name}: K {r['k']} (true {r['k_true']}), lone {r['lone']} ({r['lone_rare']} of a rare sign), "
              f"rare signs {r['rare_signs']}, tokens alone {r['rare_alone_micro']} -> {r['rare_alone']} of "
              f"{r['rare_tokens']}", flush=True)
    text = markdown(table, args.seed, args.rare, changes)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
