"""How well can any label-free score rank lm's configurations like V? The seed-to-seed ceiling (issue 9)

    .venv/bin/python scripts/rho_seed_ceiling.py                 # -> reports/rho_seed_ceiling.md
    .venv/bin/python scripts/rho_seed_ceiling.py --studies lm_greek_free_supervised_rho_ctx4 --out /tmp/c.md

The suite's rho target asks the label-free objective (the controlled context evidence) to rank an
Optuna study's trials like V does, Spearman rho >= 0.8. Each trial is one fit at one seed
(``tune.fit_seed``), so its V is the configuration's V plus the seed's noise. This script fits every
complete trial of each study again at another seed and reports how well V at one seed ranks V at
the other: if V itself reaches rho 0.5 across seeds, no score read from one fit can be expected to
reach 0.8 against it. It also gives the target's own figure (the study's recorded evidence against
its recorded V), the evidence of the new fit against the recorded V (the score carries no
information about the seed-0 noise), and both averaged over the two seeds.

The first seed's V and evidence are the ones the study recorded (``v_measure``, ``context_evidence``);
``--check N`` fits the first N trials again at that seed and reports the largest difference, so a
change of lm since the study shows. Finished fits are kept in
``models/checkpoints/rho_seed_ceiling/<study>_seed<s>.json`` (one line per trial), so a killed run
resumes where it stopped. The labels score only.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from label_free_rho import CORPORA_DIR, load_trials, spearman  # noqa: E402
from signclust.config import load_params  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.label_free import CorpusData, unsupervised_score  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.tuning.study import base_config, tune_config  # noqa: E402

CACHE = REPO / "models" / "checkpoints" / "rho_seed_ceiling"


def fit_trial(method: str, base: dict, trial_params: dict, data: CorpusData, ucfg: dict, seed: int) -> dict:
    """One trial's configuration fitted at ``seed``: V, K and the controlled context evidence (ec)."""
    t0 = time.time()
    result = get_clusterer(method, **{**base, **trial_params}).fit(data.corpus, FitContext(seed=seed, progress=False))
    label_free = unsupervised_score(result.labels, data, ucfg)
    return {"v": float(score(data.gold, result.labels)["v_measure"]), "k": int(result.k_found),
            "ec": float(label_free["context_evidence"]), "seconds": round(time.time() - t0, 1)}


def cached_fits(path: Path) -> dict:
    """trial number -> fit, from a cache file of one JSON object per line (a torn last line is dropped)."""
    fits = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            fits[int(row["trial"])] = row
    return fits


def study_fits(study: str, params: dict, seed: int, n_check: int, cache: Path) -> dict:
    """The study's trials: recorded V and evidence (the first seed), a fit at ``seed``, and the largest
    difference between recorded and refitted V over the first ``n_check`` trials."""
    cfg = tune_config(params)
    first = int(cfg["fit_seed"])
    if seed == first:
        raise UserError(f"--seed {seed} is the studies' own fit seed (tune.fit_seed); give another")
    summary, trials = load_trials(study)
    missing = [t.number for t in trials if "context_evidence" not in t.user_attrs]
    if missing:
        raise UserError(f"study {study}: trials {missing[:5]} recorded no context_evidence (a study made before "
                        "the tuner recorded it; scripts/label_free_rho.py fits such a study again)")
    data = CorpusData(Corpus.load(CORPORA_DIR / summary["corpus"]), summary["corpus"])
    ucfg = {**cfg["unsupervised"]}
    base = base_config(summary["method"], params, cfg)
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{study}_seed{seed}.json"
    done = cached_fits(path)
    rows = []
    for trial in trials:
        if trial.number not in done:
            fit = {"trial": trial.number, **fit_trial(summary["method"], base, trial.params, data, ucfg, seed)}
            with path.open("a") as fh:                       # one line per finished fit: a killed run resumes
                fh.write(json.dumps(fit) + "\n")
            done[trial.number] = fit
            print(f"{study} trial {trial.number} seed {seed}: V {fit['v']:.4f} (seed {first}: "
                  f"{trial.user_attrs['v_measure']:.4f}), K {fit['k']}, evidence {fit['ec']:.4f}, {fit['seconds']}s",
                  flush=True)
        rows.append({"trial": trial.number, "v0": float(trial.user_attrs["v_measure"]),
                     "ec0": float(trial.user_attrs["context_evidence"]),
                     "v1": done[trial.number]["v"], "ec1": done[trial.number]["ec"], "k1": done[trial.number]["k"]})
    shift = 0.0
    for trial in trials[:n_check]:
        again = fit_trial(summary["method"], base, trial.params, data, ucfg, first)
        shift = max(shift, abs(again["v"] - float(trial.user_attrs["v_measure"])),
                    abs(again["ec"] - float(trial.user_attrs["context_evidence"])))
        print(f"{study} trial {trial.number} seed {first} again: V {again['v']:.4f} (recorded "
              f"{trial.user_attrs['v_measure']:.4f})", flush=True)
    return {"corpus": summary["corpus"], "seeds": [first, seed], "rows": rows,
            "checked": min(n_check, len(trials)), "shift": shift}


def summarise(res: dict) -> dict:
    """The rank correlations of one study (None where a rank is constant)."""
    r = res["rows"]
    v0, v1, ec0, ec1 = (np.array([row[k] for row in r]) for k in ("v0", "v1", "ec0", "ec1"))
    v_mean, ec_mean = (v0 + v1) / 2, (ec0 + ec1) / 2
    return {"n": len(r), "v_range": (float(min(v0.min(), v1.min())), float(max(v0.max(), v1.max()))),
            "seed_diff": float(np.median(np.abs(v0 - v1))),
            "rho_vv": spearman(v0, v1),                 # V at one seed against V at the other: the ceiling
            "rho_target": spearman(ec0, v0),            # the target's figure: one fit's evidence, its own V
            "rho_cross": spearman(ec1, v0),             # the other seed's evidence against the recorded V
            "rho_own1": spearman(ec1, v1),              # the same as the target, at the other seed
            "rho_mean": spearman(ec_mean, v_mean)}      # both averaged over the two seeds


def markdown(results: dict, target: float, command: str) -> str:
    fmt = lambda x: "–" if x is None else f"{x:+.2f}"                                 # noqa: E731
    seeds = next(iter(results.values()))["seeds"]
    a, b = seeds
    lines = ["# The seed-to-seed ceiling of the label-free objective's rank correlation", "",
             f"Written by `{command}`. Every complete trial of each study of `report.suite.rho_studies` "
             f"fitted again at seed {b} with today's code and configuration (`runs.lm`, `tune.fixed`, the "
             f"trial's parameters); seed {a}'s V and controlled context evidence are the ones the study recorded "
             f"(*checked*: the first trials fitted again at seed {a}, the largest difference from the record in V "
             "or evidence). ρ is Spearman's over the trials. *V↔V*: V at one seed against V at the other, how "
             "well the configuration's V is ranked by a perfect score read from another fit; the target's ρ is "
             f"the evidence against V of one fit (seed {a}: what `reports/suite.md` scores; seed {b} beside it); "
             f"*cross*: seed {b}'s evidence against seed {a}'s V; *2-seed mean*: both averaged over the two fits. "
             "*|ΔV| seeds*: the median over the trials of |V(seed a) − V(seed b)|.", "",
             "| study | corpus | trials | V range | median \\|ΔV\\| seeds | ρ V↔V | ρ target "
             f"(seed {a}) | ρ target (seed {b}) | ρ cross | ρ 2-seed mean | checked |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    sums = {}
    for study, res in results.items():
        s = sums[study] = summarise(res)
        check = f"{res['checked']} trials, {res['shift']:.4f}" if res["checked"] else "–"
        lines.append(f"| {study} | {res['corpus']} | {s['n']} | {s['v_range'][0]:.3f}–{s['v_range'][1]:.3f} | "
                     f"{s['seed_diff']:.4f} | {fmt(s['rho_vv'])} | {fmt(s['rho_target'])} | {fmt(s['rho_own1'])} | "
                     f"{fmt(s['rho_cross'])} | {fmt(s['rho_mean'])} | {check} |")
    lines.append("")
    for key, name in (("rho_vv", "V at one seed against V at the other"),
                      ("rho_target", f"the controlled context evidence against V (seed {a}, the target)"),
                      ("rho_own1", f"the same at seed {b}"),
                      ("rho_mean", "the two seeds' mean evidence against their mean V")):
        vals = [s[key] for s in sums.values() if s[key] is not None]
        # rounded: scipy gives a rank correlation of exactly 0.8 as 0.7999999999999999
        lines.append(f"- ρ ≥ {target} for {name}: {sum(round(x, 12) >= target for x in vals)} of {len(sums)} studies"
                     + (f", median ρ {np.median(vals):+.2f}" if vals else ""))
    return "\n".join(lines) + "\n"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", nargs="+", help="default: report.suite.rho_studies")
    ap.add_argument("--seed", type=int, default=1, help="the second seed (default 1; not tune.fit_seed)")
    ap.add_argument("--check", type=int, default=1, help="trials fitted again at the studies' own seed (default 1)")
    ap.add_argument("--out", help="default reports/rho_seed_ceiling.md (beside it the per-trial .json)")
    args = ap.parse_args(argv)
    if args.check < 0:
        raise UserError(f"--check {args.check}: a number of trials, at least 0")
    params = load_params()
    suite_cfg = ((params.get("report") or {}).get("suite") or {})
    studies = args.studies or list(suite_cfg.get("rho_studies") or [])
    if not studies:
        raise UserError("no studies: give --studies or list them in report.suite.rho_studies")
    if args.out is None and (args.studies or args.seed != 1):
        raise UserError("--studies or --seed make another study than reports/rho_seed_ceiling.md: give it its own --out")
    out = Path(args.out) if args.out else REPO / "reports" / "rho_seed_ceiling.md"
    for study in studies:
        load_trials(study)                                      # every study readable before the first fit
    results = {study: study_fits(study, params, args.seed, args.check, CACHE) for study in studies}
    command = "python scripts/rho_seed_ceiling.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])
                                                       if (argv if argv is not None else sys.argv[1:]) else "")
    text = markdown(results, float((suite_cfg.get("targets") or {}).get("rho", 0.8)), command)
    atomic_write_text(out.with_suffix(".json"), json.dumps(results, indent=1) + "\n")
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
