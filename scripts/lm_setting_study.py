"""lm with one parameter set otherwise: what it does to K and V on the noisy corpora.

    .venv/bin/python scripts/lm_setting_study.py --key vote --values none edge --out /tmp/vote.md
    .venv/bin/python scripts/lm_setting_study.py --key same_text --values pairs --seed 1 --out /tmp/s1.md

reports/same_text_study.md (and ``_seed1``, ``_seed2``, with ``--seed``) were made with
``--key same_text --values tokens`` while ``pairs`` was the default.

Fits ``runs.lm`` as configured and once more for each of ``--values`` of ``models.lm.<--key>`` (the
rest of the configuration unchanged) on every noisy corpus (the suite's hands and handwriting
regimes, cypriot, lineara; or ``--corpora``) and scores K and V against the configured value, with
the wall time of each fit (the encoder's cache is emptied before each, so no fit reuses another's
training; time a study on an otherwise idle machine). The labels are used only to score. Corpora not in ``data/corpora`` are built in memory by the suite's
builder, as scripts/pair_ratio_sweep.py does. Every study names its own ``--out``: a report is
never rewritten by another study.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from knn_vote_study import k_error  # noqa: E402
from pair_model_calibration import load_corpus, noisy_corpora  # noqa: E402  (data/corpora, else the suite builder in memory)
from small_types_study import within  # noqa: E402  (K within ±20% of K true)
from signclust.config import load_params  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models import visual_encoder  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.lm_clusterer import LMConfig  # noqa: E402
from signclust.models.params import params_of  # noqa: E402
from signclust.models.train import run_config  # noqa: E402


def show(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def markdown(table: dict, seed: int, key: str, values: list) -> str:
    """``table``: corpus -> {"k_true": int, show(value): (K, V, seconds) for each value}; the first
    value is the configured one, the reference of the summary's changes."""
    cols = [show(v) for v in values]
    ref = cols[0]
    lines = [f"# lm with `{key}` set otherwise", "",
             f"Written by `scripts/lm_setting_study.py` (seed {seed}, `runs.lm` as configured, "
             f"one fit per value of `models.lm.{key}`; the configured value `{ref}` first). "
             f"`{key}`: {params_of(LMConfig)[key].doc}. K error: (K - K true) / K true; bold: within ±20%.", "",
             "| corpus | K true | " + " | ".join(f"`{c}` K | V | s" for c in cols) + " |",
             "|---|---:|" + "---:|---:|---:|" * len(cols)]
    for name, r in table.items():
        cells = [name, str(r["k_true"])]
        for c in cols:
            k, vm, sec = r[c]
            err = k_error(k, r["k_true"])
            cells += [f"**{k}** ({err:+.0%})" if within(k, r["k_true"]) else f"{k} ({err:+.0%})", f"{vm:.3f}",
                      f"{sec:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"| `{key}` | K within ±20% | median K error | mean V | change of V against `{ref}`: mean | "
              "largest loss | largest gain | median s / fit | slowest |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cols:
        errs = [abs(k_error(r[c][0], r["k_true"])) for r in table.values()]
        dv = [r[c][1] - r[ref][1] for r in table.values()]
        hits = sum(within(r[c][0], r["k_true"]) for r in table.values())
        lines.append(f"| `{c}` | {hits} of {len(errs)} | {np.median(errs):.0%} | "
                     f"{np.mean([r[c][1] for r in table.values()]):.3f} | {np.mean(dv):+.4f} | {min(dv):+.4f} | "
                     f"{max(dv):+.4f} | {np.median([r[c][2] for r in table.values()]):.0f} | "
                     f"{max(r[c][2] for r in table.values()):.0f} |")
    return "\n".join(lines + [""])


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--key", required=True, help="an lm parameter (models.lm.<key>)")
    ap.add_argument("--values", nargs="+", required=True, help="its values fitted beside the configured one (YAML)")
    ap.add_argument("--corpora", nargs="+", help="default: the suite's hands and handwriting corpora, cypriot, lineara")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="the report (a new name for each study)")
    args = ap.parse_args(argv)
    known = params_of(LMConfig)
    if args.key not in known:
        raise UserError(f"--key {args.key}: not an lm parameter (known: {', '.join(known)})")
    params = load_params()
    names = args.corpora or noisy_corpora(params)
    method, row_cfg, _ = run_config("lm", params)
    values = [get_clusterer(method, **row_cfg).params[args.key]] + [yaml.safe_load(v) for v in args.values]
    if len({show(v) for v in values}) < len(values):
        raise UserError(f"--values {' '.join(args.values)}: each value once, none the configured "
                        f"{show(values[0])}")
    for v in values:                                            # a bad value fails here, before any fit
        get_clusterer(method, **{**row_cfg, args.key: v})
    table = {}
    for name in names:
        corpus = load_corpus(name, params["prepare"])
        gold = corpus.labels()
        table[name] = r = {"k_true": len(np.unique(gold))}
        for value in values:
            visual_encoder._CACHE.clear()            # each fit trains its own encoder: its time is a whole fit's
            t0 = time.perf_counter()
            result = get_clusterer(method, **{**row_cfg, args.key: value}).fit(
                corpus, FitContext(seed=args.seed, n_clusters=None, device="cpu", progress=False))
            r[show(value)] = (int(result.info["k_found"]), score(gold, np.asarray(result.labels))["v_measure"],
                              time.perf_counter() - t0)
        print(f"{name} (K true {r['k_true']}): " + ", ".join(
            f"{show(v)} K {r[show(v)][0]} V {r[show(v)][1]:.3f} {r[show(v)][2]:.0f} s" for v in values), flush=True)
    text = markdown(table, args.seed, args.key, values)
    atomic_write_text(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
