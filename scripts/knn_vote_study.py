"""lm's kNN-vote evidence (``models.lm.vote``): what it does to K and V on the noisy corpora.

    .venv/bin/python scripts/knn_vote_study.py          # -> reports/knn_vote_study.md
    .venv/bin/python scripts/knn_vote_study.py --corpora latin_hands cypriot --out /tmp/v.md
    .venv/bin/python scripts/knn_vote_study.py --votes near --out reports/knn_vote_study_near.md

Fits ``runs.lm`` (seed 0) once per ``vote`` setting (none; token; edge; or the settings given by
``--votes``, always beside none; ``none`` is called ``off`` in the reports made before the name
changed, when it was the default) on every
noisy corpus (the suite's hands and handwriting regimes, cypriot, lineara: a clean corpus has no
kNN graph, so the setting cannot change it) and scores K and V. The labels are used only to score.
Corpora not in ``data/corpora`` are built in memory by the suite's builder, as
scripts/pair_ratio_sweep.py does.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from pair_model_calibration import load_corpus, noisy_corpora, report_path  # noqa: E402  (data/corpora, else the suite builder in memory)
from small_types_study import within  # noqa: E402  (K within ±20% of K true)
from signclust.config import load_params  # noqa: E402
from signclust.errors import cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.lm_clusterer import KNN_VOTE_MODES  # noqa: E402
from signclust.models.train import run_config  # noqa: E402

STUDIED = ("token", "edge")                # the settings of reports/knn_vote_study.md
MEANS = {"token": "counts each token once", "edge": "every edge",
         "near": "every edge, against the tokens near the larger type",
         "near_loose": "as near, times 1 - the small type's cohesion on the kNN graph"}


def k_error(k: int, k_true: int) -> float:
    return (k - k_true) / k_true


def markdown(table: dict, seed: int, votes: tuple[str, ...] = ("none",) + STUDIED) -> str:
    lines = ["# lm with kNN-vote evidence for small types (`models.lm.vote`)", "",
             f"Written by `scripts/knn_vote_study.py` (seed {seed}, `runs.lm` as configured, one fit per `vote`). "
             "A small type's merge into a larger one may also be scored by where its tokens' kNN edges land "
             "(`knn_vote` in models/lm_clusterer.py): " + ", ".join(f"`{v}` {MEANS[v]}" for v in votes[1:]) + ". "
             "K error: (K - K true) / K true; bold: within ±20%.", "",
             "| corpus | K true | " + " | ".join(f"`{v}` K | V" for v in votes) + " |",
             "|---|---:|" + "---:|---:|" * len(votes)]
    for name, r in table.items():
        cells = [name, str(r["k_true"])]
        for v in votes:
            k, vm = r[v]
            err = k_error(k, r["k_true"])
            cells += [f"**{k}** ({err:+.0%})" if within(k, r["k_true"]) else f"{k} ({err:+.0%})", f"{vm:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| `vote` | K within ±20% | median K error | mean V | change of V against `none`: mean | "
              "largest loss |", "|---|---:|---:|---:|---:|---:|"]
    for v in votes:
        errs = [abs(k_error(r[v][0], r["k_true"])) for r in table.values()]
        dv = [r[v][1] - r["none"][1] for r in table.values()]
        hits = sum(within(r[v][0], r["k_true"]) for r in table.values())
        lines.append(f"| `{v}` | {hits} of {len(errs)} | {np.median(errs):.0%} | "
                     f"{np.mean([r[v][1] for r in table.values()]):.3f} | {np.mean(dv):+.4f} | {min(dv):+.4f} |")
    return "\n".join(lines + [""])


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help="default: the suite's hands and handwriting corpora, cypriot, lineara")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--votes", nargs="+", choices=KNN_VOTE_MODES, default=list(STUDIED),
                    help="the settings fitted beside none (default: %(default)s)")
    ap.add_argument("--out", help="default reports/knn_vote_study.md")
    args = ap.parse_args(argv)
    params = load_params()
    names = args.corpora or noisy_corpora(params)
    votes = ("none",) + tuple(dict.fromkeys(args.votes))
    out = report_path(args.out, "knn_vote_study.md", ("--corpora", "--seed", "--votes"),
                      bool(args.corpora or args.seed or votes[1:] != STUDIED))
    method, row_cfg, _ = run_config("lm", params)
    table = {}
    for name in names:
        corpus = load_corpus(name, params["prepare"])
        gold = corpus.labels()
        table[name] = r = {"k_true": len(np.unique(gold))}
        for vote in votes:
            result = get_clusterer(method, **{**row_cfg, "vote": vote}).fit(
                corpus, FitContext(seed=args.seed, n_clusters=None, device="cpu", progress=False))
            r[vote] = (int(result.info["k_found"]), score(gold, np.asarray(result.labels))["v_measure"])
        print(f"{name} (K true {r['k_true']}): " + ", ".join(f"{v} K {r[v][0]} V {r[v][1]:.3f}" for v in votes),
              flush=True)
    text = markdown(table, args.seed, votes)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
