"""Does a label-free score rank lm's configurations like V-measure does? (issue 9's rho target)

    .venv/bin/python scripts/label_free_rho.py            # -> reports/label_free_rho.md
    .venv/bin/python scripts/label_free_rho.py --studies lm_latin_free_supervised_rho --out /tmp/r.md

The suite's target reads, for each study of ``report.suite.rho_studies``, the Spearman correlation
between V and the tuner's label-free U (``evaluation/label_free.py``: held-out bigram cross-entropy
plus visual inhomogeneity) over the study's trials. lm chooses among its own fits by another
label-free score, ``neighbour_evidence``: how well the types predict their neighbours' symbols (a
Dirichlet-multinomial marginal likelihood, so fits with different K compare). Read over symbols
that no configuration changes (a Ward cut of the normalised glyphs, ``glyph_symbols``), it can
score any labelling of the corpus: ``context_evidence``, in nats per token; and controlled for what a
type predicts about its whole text (a hand's style), less the same with every text shuffled.

This script fits every complete trial of each study again with today's code and configuration
(``runs.lm`` + ``tune.fixed`` + the trial's parameters, the first seed of ``tune.fit_seed``), scores the
labelling with V, U and the context evidence (plain and controlled), and reports the three rank
correlations with V. The trials' parameters come from the study's committed journal
(``reports/studies/<study>.optuna.log``); the labels score only. V of a refit differs from the V the
study recorded where lm's code or configuration changed after the study was made: the report
gives the largest difference.
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

from signclust.config import load_params  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.label_free import CorpusData, context_evidence, unsupervised_score  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.reports import tune_report  # noqa: E402
from signclust.tuning.storage import journal_storage  # noqa: E402
from signclust.tuning.study import base_config, fit_seeds, tune_config  # noqa: E402

STUDIES_DIR = REPO / "reports" / "studies"
CORPORA_DIR = REPO / "data" / "corpora"


def spearman(a, b) -> float | None:
    return tune_report.spearman(list(a), list(b))["rho"]


def rho_studies(params: dict, given: list[str] | None) -> tuple[list[str], float]:
    """The studies to score (``given``, else ``report.suite.rho_studies``), each readable, and the suite's rho
    target; one error before any fit."""
    suite_cfg = ((params.get("report") or {}).get("suite") or {})
    studies = given or list(suite_cfg.get("rho_studies") or [])
    if not studies:
        raise UserError("no studies: give --studies or list them in report.suite.rho_studies")
    for study in studies:
        load_trials(study)
    return studies, float((suite_cfg.get("targets") or {}).get("rho", 0.8))


def at_target(rhos: list[float], target: float) -> int:
    """How many of ``rhos`` reach ``target`` (``tune_report.reaches``)."""
    return sum(tune_report.reaches(r, target) for r in rhos)


def load_trials(study: str) -> tuple[dict, list]:
    """The study's summary (its JSON) and its complete trials that recorded V (from its journal);
    a one-line error for anything this script cannot score, before any fit."""
    import optuna
    summary, journal = STUDIES_DIR / f"{study}.json", STUDIES_DIR / f"{study}.optuna.log"
    for path in (summary, journal):
        if not path.is_file():
            raise UserError(f"study {study}: {path.name} not found in {STUDIES_DIR} (made by `signclust tune ... --name`)")
    summary = json.loads(summary.read_text())
    if summary.get("method") != "lm" or "corpus" not in summary:
        raise UserError(f"study {study}: a study of lm on a corpus is needed (its summary has method "
                        f"{summary.get('method')!r}, corpus {summary.get('corpus')!r})")
    if not (CORPORA_DIR / str(summary["corpus"])).is_dir():
        raise UserError(f"study {study}: corpus {summary['corpus']} not in {CORPORA_DIR} (dvc repro prepare first)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    loaded = optuna.load_study(study_name=study, storage=journal_storage(journal))
    trials = [t for t in loaded.trials if t.state.name == "COMPLETE" and "v_measure" in t.user_attrs]
    if len(trials) < 3:
        raise UserError(f"study {study}: {len(trials)} complete trial(s) with a recorded V; a rank correlation needs 3")
    return summary, trials


def rescore(study: str, params: dict, n_symbols: int) -> dict:
    """Every complete trial of ``study`` fitted again: its recorded V, V, K, U and the context evidence,
    plain (e) and controlled (ec)."""
    summary, trials = load_trials(study)
    cfg = tune_config(params)
    data = CorpusData(Corpus.load(CORPORA_DIR / summary["corpus"]), summary["corpus"])
    if data.gold is None:
        raise UserError(f"study {study}: corpus {summary['corpus']} has no labels to score V with")
    symbols = data.context_symbols(n_symbols)                    # what unsupervised_score reads below
    ucfg = {**cfg["unsupervised"], "context_symbols": n_symbols}
    base = base_config(summary["method"], params, cfg)
    rows = []
    for trial in trials:
        clusterer = get_clusterer(summary["method"], **{**base, **trial.params})
        t0 = time.time()
        result = clusterer.fit(data.corpus, FitContext(seed=fit_seeds(cfg)[0], progress=False))
        rows.append({"trial": trial.number, "v_recorded": float(trial.user_attrs["v_measure"]),
                     "v": float(score(data.gold, result.labels)["v_measure"]), "k": int(result.k_found),
                     "e": context_evidence(result.labels, data.texts, symbols)})
        label_free = unsupervised_score(result.labels, data, ucfg)            # U and the controlled evidence
        rows[-1].update(u=float(label_free["unsupervised"]), ec=float(label_free["context_evidence"]))
        row = rows[-1]
        print(f"{study} trial {trial.number}: V {row['v']:.3f} (recorded {row['v_recorded']:.3f}), U {row['u']:.4f}, "
              f"evidence {row['e']:.4f}, controlled {row['ec']:.4f}, K {row['k']}, {time.time() - t0:.1f}s", flush=True)
    return {"corpus": summary["corpus"], "rows": rows}


def summarise(result: dict) -> dict:
    rows = result["rows"]
    v, u, e, ec = (np.array([r[key] for r in rows]) for key in ("v", "u", "e", "ec"))
    pick = lambda s: float(v[int(np.argmax(s))])                                     # noqa: E731 (first of a tie)
    return {"n": len(rows), "rho_u": spearman(u, v), "rho_e": spearman(e, v), "rho_ec": spearman(ec, v),
            "v_best": float(v.max()), "v_by_u": pick(u), "v_by_e": pick(e), "v_by_ec": pick(ec),
            "v_range": (float(v.min()), float(v.max())),
            "recorded_shift": float(np.max(np.abs(v - np.array([r["v_recorded"] for r in rows])))) if rows else 0.0}


def markdown(results: dict, n_symbols: int, target: float) -> str:
    fmt = lambda r: "–" if r is None else f"{r:+.2f}"                                 # noqa: E731
    lines = ["# Label-free scores against V over lm's tuning studies", "",
             "Written by `scripts/label_free_rho.py`. Each complete trial of each study fitted again with today's "
             "code and configuration (`runs.lm`, `tune.fixed`, the trial's parameters; seed `tune.fit_seed`) and scored "
             "three ways: V-measure (labels), the tuner's "
             "label-free U (`evaluation/label_free.py`) and the *context evidence*: lm's `neighbour_evidence` of the "
             f"trial's types over {n_symbols} fixed symbols (a Ward cut of the normalised glyphs' PCA), in nats per "
             "token; *controlled*: less the same types' evidence with every text shuffled (sequential context only, "
             "not what a type predicts about its whole text). ρ: Spearman's rank correlation with V over the trials; *V picked*: the V of the trial each "
             "score ranks first. *recorded*: the largest |V − the V the study recorded| (not 0 where lm's code or "
             "configuration changed after the study was made).", "",
             "| study | corpus | trials | V range | ρ with V: U | evidence | controlled | V picked by: U | evidence "
             "| controlled | best V | recorded |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for study, res in results.items():
        s = summarise(res)
        lines.append(f"| {study} | {res['corpus']} | {s['n']} | {s['v_range'][0]:.3f}–{s['v_range'][1]:.3f} | "
                     f"{fmt(s['rho_u'])} | {fmt(s['rho_e'])} | {fmt(s['rho_ec'])} | {s['v_by_u']:.3f} | "
                     f"{s['v_by_e']:.3f} | {s['v_by_ec']:.3f} | "
                     f"{s['v_best']:.3f} | {s['recorded_shift']:.3f} |")
    summaries = [summarise(r) for r in results.values()]
    for key, name in (("rho_u", "U"), ("rho_e", "the context evidence"), ("rho_ec", "the controlled context evidence")):
        vals = [s[key] for s in summaries if s[key] is not None]
        lines.append("")
        lines.append(f"ρ ≥ {target} for {name} on {at_target(vals, target)} of {len(summaries)} studies"
                     + (f" (median ρ {np.median(vals):+.2f})." if vals else "."))
    return "\n".join(lines) + "\n"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", nargs="+", help="default: report.suite.rho_studies")
    ap.add_argument("--symbols", type=int, default=10, help="context symbols of the evidence (default 10)")
    ap.add_argument("--out", help="default reports/label_free_rho.md")
    args = ap.parse_args(argv)
    if args.symbols < 2:
        raise UserError(f"--symbols {args.symbols}: at least 2 symbols")
    if args.out is None and (args.studies or args.symbols != 10):
        raise UserError("--studies or --symbols make another study than reports/label_free_rho.md: give it its own --out")
    params = load_params()
    studies, target = rho_studies(params, args.studies)
    out = Path(args.out) if args.out else REPO / "reports" / "label_free_rho.md"
    results = {study: rescore(study, params, args.symbols) for study in studies}
    text = markdown(results, args.symbols, target)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
