"""How well can any label-free score rank lm's configurations like V? The seed-to-seed ceiling (issue 9)

    .venv/bin/python scripts/rho_seed_ceiling.py                 # -> reports/rho_seed_ceiling.md
    .venv/bin/python scripts/rho_seed_ceiling.py --studies lm_greek_free_supervised_rho_ctx4 --out /tmp/c.md

The suite's rho target asks the label-free objective (the controlled context evidence) to rank an
Optuna study's trials like V does, Spearman rho >= 0.8. Each trial is one fit at one seed
(``tune.fit_seed``), so its V is the configuration's V plus the seed's noise. This script fits every
complete trial of each study again at two seeds with today's code and reports how well V at one seed
ranks V at the other: if V itself reaches rho 0.5 across seeds, no score read from one fit can be
expected to reach 0.8 against it. It also gives the target's own figure at each seed (one fit's
evidence against its own V), the evidence of one seed against V of the other (the score knows
nothing of the other fit's noise), and both averaged over the two seeds. *record*: the largest
difference between the first seed's refit and the V the study recorded (not 0 where lm changed
after the study, or where the study ran two workers, each fit then on one thread).

Finished fits are kept in ``models/checkpoints/rho_seed_ceiling/<study>_seed<s>.json`` (one line
per trial), so a killed run resumes where it stopped. The labels score only.
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

from label_free_rho import CORPORA_DIR, at_target, load_trials, rho_studies, spearman  # noqa: E402
from signclust.config import load_params  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.label_free import CorpusData, unsupervised_score  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.tuning.study import base_config, fit_seeds, tune_config  # noqa: E402

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


def seed_fits(study: str, method: str, base: dict, trials: list, data: CorpusData, ucfg: dict, seed: int,
              cache: Path) -> dict:
    """trial number -> its fit at ``seed``: read from the cache, the missing ones fitted and appended."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{study}_seed{seed}.json"
    done = cached_fits(path)
    for trial in trials:
        if trial.number not in done:
            fit = {"trial": trial.number, **fit_trial(method, base, trial.params, data, ucfg, seed)}
            with path.open("a") as fh:                       # one line per finished fit: a killed run resumes
                fh.write(json.dumps(fit) + "\n")
            done[trial.number] = fit
            print(f"{study} trial {trial.number} seed {seed}: V {fit['v']:.4f} (recorded "
                  f"{trial.user_attrs['v_measure']:.4f}), K {fit['k']}, evidence {fit['ec']:.4f}, {fit['seconds']}s",
                  flush=True)
    return done


def study_fits(study: str, params: dict, seeds: tuple[int, int], cache: Path) -> dict:
    """The study's trials fitted at both ``seeds``: V, K and the controlled context evidence of each, and
    the V and evidence the study recorded."""
    summary, trials = load_trials(study)
    missing = [t.number for t in trials if "context_evidence" not in t.user_attrs]
    if missing:
        raise UserError(f"study {study}: trials {missing[:5]} recorded no context_evidence (a study made before "
                        "the tuner recorded it; scripts/label_free_rho.py fits such a study again)")
    cfg = tune_config(params)
    data = CorpusData(Corpus.load(CORPORA_DIR / summary["corpus"]), summary["corpus"])
    base = base_config(summary["method"], params, cfg)
    a, b = (seed_fits(study, summary["method"], base, trials, data, dict(cfg["unsupervised"]), seed, cache)
            for seed in seeds)
    rows = [{"trial": t.number, "v_rec": float(t.user_attrs["v_measure"]), "ec_rec": float(t.user_attrs["context_evidence"]),
             "v0": a[t.number]["v"], "ec0": a[t.number]["ec"], "k0": a[t.number]["k"],
             "v1": b[t.number]["v"], "ec1": b[t.number]["ec"], "k1": b[t.number]["k"]} for t in trials]
    return {"corpus": summary["corpus"], "seeds": list(seeds), "rows": rows,
            "shift": max(abs(r["v0"] - r["v_rec"]) for r in rows)}


def summarise(res: dict) -> dict:
    """The rank correlations of one study (None where a rank is constant)."""
    r = res["rows"]
    v0, v1, ec0, ec1, v_rec, ec_rec = (np.array([row[k] for row in r]) for k in ("v0", "v1", "ec0", "ec1", "v_rec", "ec_rec"))
    return {"n": len(r), "v_range": (float(min(v0.min(), v1.min())), float(max(v0.max(), v1.max()))),
            "seed_diff": float(np.median(np.abs(v0 - v1))),
            "rho_vv": spearman(v0, v1),                 # V at one seed against V at the other: the ceiling
            "rho_recorded": spearman(ec_rec, v_rec),    # the target as reports/suite.md reads it (the study's record)
            "rho_own0": spearman(ec0, v0),              # the same on today's fits, each seed
            "rho_own1": spearman(ec1, v1),
            "rho_cross": spearman(ec1, v0),             # one seed's evidence against the other's V
            "rho_mean": spearman(ec0 + ec1, v0 + v1)}   # both averaged over the two seeds


ROW_WORDS = (("rho_vv", "V at one seed against V at the other"),
             ("rho_recorded", "the controlled context evidence against V as the study recorded them (the target)"),
             ("rho_own0", "the same on today's fits at the first seed"),
             ("rho_own1", "the same at the second seed"),
             ("rho_cross", "the second seed's evidence against the first seed's V"),
             ("rho_mean", "the two seeds' mean evidence against their mean V"))


def markdown(results: dict, target: float, command: str) -> str:
    fmt = lambda x: "–" if x is None else f"{x:+.2f}"                                 # noqa: E731
    a, b = next(iter(results.values()))["seeds"]
    lines = ["# The seed-to-seed ceiling of the label-free objective's rank correlation", "",
             f"Written by `{command}`. Every complete trial of each study fitted again at seeds {a} and {b} with "
             "today's code and configuration (`runs.lm`, `tune.fixed`, the trial's parameters) and scored by V and "
             "the controlled context evidence (the label-free objective of the suite's ρ target). ρ is Spearman's "
             f"over the trials. *V↔V*: V at seed {a} against V at seed {b}, how well a configuration's V at one "
             "seed is ranked by a perfect score read from another fit of it; *recorded*: the target's ρ as "
             f"`reports/suite.md` reads it, the evidence against V as the study recorded them; *seed {a} / {b}*: the "
             f"same on today's fits; *cross*: seed {b}'s evidence against seed {a}'s V; *2-seed mean*: both "
             f"averaged over the two fits. *|ΔV| seeds*: the median over the trials of |V(seed {a}) − V(seed {b})|. "
             f"*record*: the largest |V(seed {a}) − the V the study recorded| (not 0 where lm changed after the "
             "study, or where it ran two workers, each fit then on one thread).", "",
             f"| study | corpus | trials | V range | median \\|ΔV\\| seeds | ρ V↔V | ρ recorded | ρ seed {a} | ρ seed {b} "
             "| ρ cross | ρ 2-seed mean | record |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    sums = {}
    for study, res in results.items():
        s = sums[study] = summarise(res)
        lines.append(f"| {study} | {res['corpus']} | {s['n']} | {s['v_range'][0]:.3f}–{s['v_range'][1]:.3f} | "
                     f"{s['seed_diff']:.4f} | " + " | ".join(fmt(s[k]) for k, _ in ROW_WORDS) + f" | {res['shift']:.4f} |")
    lines.append("")
    for key, name in ROW_WORDS:
        vals = [s[key] for s in sums.values() if s[key] is not None]
        lines.append(f"- ρ ≥ {target} for {name}: {at_target(vals, target)} of {len(sums)} studies"
                     + (f", median ρ {np.median(vals):+.2f}" if vals else ""))
    return "\n".join(lines) + "\n"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", nargs="+", help="default: report.suite.rho_studies")
    ap.add_argument("--seeds", nargs=2, type=int, metavar=("A", "B"),
                    help="the two seeds (default: the first of tune.fit_seed and the next)")
    ap.add_argument("--out", help="default reports/rho_seed_ceiling.md (beside it the per-trial .json)")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    params = load_params()
    first = fit_seeds(tune_config(params))[0]
    seeds = tuple(args.seeds) if args.seeds else (first, first + 1)
    if seeds[0] == seeds[1]:
        raise UserError(f"--seeds {seeds[0]} {seeds[1]}: two different seeds")
    if args.out is None and (args.studies or seeds != (first, first + 1)):
        raise UserError("--studies or --seeds make another study than reports/rho_seed_ceiling.md: give it its own --out")
    studies, target = rho_studies(params, args.studies)
    out = Path(args.out) if args.out else REPO / "reports" / "rho_seed_ceiling.md"
    results = {study: study_fits(study, params, seeds, CACHE) for study in studies}
    command = "python scripts/rho_seed_ceiling.py" + ("".join(" " + a for a in argv))
    text = markdown(results, target, command)
    atomic_write_text(out.with_suffix(".json"), json.dumps(results, indent=1) + "\n")
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
