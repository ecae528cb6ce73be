"""Stage `tune`: Optuna search over a method's parameters, in parallel workers, resumable.

    signclust tune --method lm --corpus cypriot --trials 30 --workers 2 --report-on lineara
    signclust tune --method ward --corpus cypriot --trials 4 --name quick   # a side study: own files only
    signclust tune --method lm --corpus cypriot --objective unsupervised     # no labels needed
    signclust tune --method lm --corpus cypriot --trials 30 --storage postgresql://user@host/optuna

Names and outputs (signclust.tuning.study). The study is ``<method>_<corpus>_<objective>``, plus
``_<NAME>`` with ``--name NAME``; every output carries that name: reports/tune_<study>.md, its two
figures, reports/studies/<study>.json, reports/studies/<study>.optuna.log (the study as an Optuna
journal: ``optuna-dashboard reports/studies/<study>.optuna.log``), params/tuned_<study>.yaml. A
study made without ``--name`` is also a row of reports/tune_comparison.md. Outputs are rewritten
only by the study that wrote them (its uid), and only when it changed; another study of the same
name is refused before any trial runs (``--replace`` overrides).

What is searched: params.yaml ``tune.spaces.<method>`` (one entry per parameter:
``{low, high[, log, step]}`` or ``{choices: [...]}``), on top of the method's configured
parameters (``runs.<method>`` / ``models.<method>``) and ``tune.fixed.<method>`` (settings held
fixed during the search to keep a trial affordable, e.g. fewer epochs: they are part of the
tuned configuration written at the end). Every method gets the same ``--trials`` budget, so a
tuned baseline is compared with a tuned LM clusterer.

Budget and workers (signclust.tuning.workers). ``--trials N`` is the study's budget: trials are
added until the study holds N finished (complete or pruned) trials; a smaller N than the study's
budget so far runs nothing. The study is created once here, then W worker processes each run
their share of the missing trials. Rerunning the same command resumes; no trial is lost to a kill.
The working storage is SQLite optuna.db (git-ignored) or ``--storage``; a study that is not in it
but has a committed journal is imported from the journal first (a fresh clone resumes).

Objectives (the study maximises; the metric is named in the study):
  supervised     V-measure against the tuning corpus's gold labels (``v_measure``).
  unsupervised   label-free U (``label_free_U``, signclust.evaluation.label_free).
  context        label-free: the types' controlled context evidence (``context_evidence``, the same
                 module; reports/label_free_rho.md: it ranks lm's trials like V better than U).
All three are recorded for every trial (V when the corpus has labels); the report gives the
Spearman correlation of each label-free score with V over the completed trials.

Pruning (signclust.tuning.objective): MedianPruner on a per-epoch training proxy, through the
FitContext.log_metrics contract (the callback raises StopFit); ``tune.pruner.type: none`` turns it off.

MLflow (signclust.tuning.mlflow_runs): experiment ``tune``, one parent run per study, each trial
a child run. ``--report-on CORPUS`` fits the best and the configured parameters on another
labelled corpus over ``tune.report_seeds`` (signclust.tuning.transfer).
"""
from __future__ import annotations

import argparse
import os
import signal
import warnings
from pathlib import Path

from signclust.config import REPO_ROOT, load_params
from signclust.data.corpus import Corpus
from signclust.errors import UserError, cli_main
from signclust.reports import tune_report
from signclust.tuning import mlflow_runs, storage as st, transfer, workers
from signclust.tuning.study import (OBJECTIVES, StudySpec, count_states, ensure_identity, fit_seeds,
                                    guard_outputs, study_name, tune_config)


def open_study(spec: StudySpec, cfg: dict):
    """The study in the working storage: loaded, else imported from its committed journal, else
    created. Returns (storage, study, facts, imported trial count)."""
    import optuna
    storage = st.make_storage(spec.storage, cfg)
    imported = 0
    journal = spec.outputs()["journal"]
    if not st.has_study(storage, spec.name) and journal.exists() and not spec.replace:
        imported = st.import_journal(journal, spec.name, storage)
        print(f"study {spec.name}: imported {imported} trial(s) from {journal}", flush=True)
    # created here, once, before any worker starts: workers only load it
    study = optuna.create_study(study_name=spec.name, storage=storage, direction="maximize", load_if_exists=True)
    facts = ensure_identity(study, spec)
    return storage, study, facts, imported


def run_parent(spec: StudySpec, params: dict, cfg: dict, workers_n: int, report_on: str | None = None,
               report_on_dir: Path | None = None, report_seeds: list[int] | None = None) -> dict:
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage, study, facts, _ = open_study(spec, cfg)
    spec.published = facts["published"]
    guard_outputs(study, spec)                          # before any trial: never overwrite another study
    spec.trials = facts["budget"]
    optuna.storages.fail_stale_trials(study)           # killed-outright trials past their grace period
    requeued = workers.reenqueue_interrupted(study)
    counts = count_states(study)
    finished = counts["complete"] + counts["pruned"]
    missing = max(0, spec.trials - finished)
    print(f"study {spec.name} ({st.redact(spec.storage)}): {finished} finished, {counts['fail']} failed, "
          f"{counts['running']} running, {counts['waiting']} waiting ({requeued} re-enqueued); "
          f"{missing} to run", flush=True)
    info = {"method": spec.method, "corpus": spec.corpus, "objective": spec.objective}
    parent_run_id = mlflow_runs.open_parent_run(study, spec.name, {**info, "storage": st.redact(spec.storage)}) \
        if (missing or report_on) else study.user_attrs.get("mlflow_parent_run_id")
    failed_workers = 0
    n_before = len(study.get_trials(deepcopy=False))
    if missing:
        failed_workers = workers.start_workers(spec, workers_n, missing, n_before, parent_run_id)
    study = optuna.load_study(study_name=spec.name, storage=storage)
    changed = len(study.get_trials(deepcopy=False)) != n_before or bool(requeued) or spec.replace
    if report_on:
        if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            raise UserError("no completed trial to report on another corpus")
        seeds = report_seeds if report_seeds is not None else list(cfg["report_seeds"])
        configs = transfer.transfer_configs(spec.method, params, cfg, study)
        if transfer.up_to_date(study, report_on, seeds, configs):
            print(f"transfer to {report_on}: already fitted for trial {study.best_trial.number} with these "
                  "configurations and seeds; reusing it", flush=True)
        else:
            study.set_user_attr("transfer", transfer.run_transfer(spec.method, spec.corpus, report_on, report_on_dir,
                                                                  params, cfg, study, seeds, configs))
            changed = True
    out = spec.outputs()
    if changed or not all(out[k].exists() for k in ("report", "summary", "journal")):
        outputs = tune_report.write_outputs(study, spec, params, cfg, facts)
        outputs["journal"] = st.export_journal(storage, spec.name, out["journal"])
        print("-> " + ", ".join(str(p) for p in outputs.values()))
    else:
        outputs = {k: out[k] for k in ("report", "summary", "journal") if out[k].exists()}
        print(f"study {spec.name}: unchanged; its outputs stay as they are ({out['report']})")
    mlflow_runs.finish_parent_run(parent_run_id, study, outputs, tune_report.agreement(study))
    counts = count_states(study)
    print(f"study {spec.name}: {counts['complete']} complete, {counts['pruned']} pruned, {counts['fail']} failed"
          + (f"; best trial {study.best_trial.number} = {study.best_value:.4f}" if counts["complete"] else ""))
    if failed_workers:
        raise UserError(f"{failed_workers} worker(s) exited with an error (see above); rerun to finish the budget")
    return outputs


def check_writable(folder: Path, what: str) -> None:
    """One UserError unless ``folder`` can be made or written: its nearest existing ancestor must be a
    writable folder."""
    folder = Path(folder).absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{what} {folder}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{what} {folder} cannot be written ({existing} is not writable)")


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="lm", help="a method with a space in params.yaml tune.spaces")
    ap.add_argument("--corpus", default="cypriot", help="the tuning (development) corpus")
    ap.add_argument("--objective", choices=OBJECTIVES, help="default tune.objective")
    ap.add_argument("--name", help="a side study <method>_<corpus>_<objective>_<NAME>: its own outputs, "
                                   "left out of reports/tune_comparison.md")
    ap.add_argument("--study", help="the study's full name instead (e.g. to extend a study by its name)")
    ap.add_argument("--corpus-dir", type=Path, help="default data/corpora/<corpus>")
    ap.add_argument("--trials", type=int, help="the study's budget of finished trials (default tune.trials)")
    ap.add_argument("--workers", type=int, help="parallel worker processes (default tune.workers)")
    ap.add_argument("--storage", help="working storage, a SQLAlchemy URL (default tune.storage, else "
                                      "sqlite:///optuna.db in the project)")
    ap.add_argument("--report-on", help="fit the best configuration on this other labelled corpus and report it")
    ap.add_argument("--report-on-dir", type=Path, help="default data/corpora/<report-on>")
    ap.add_argument("--report-seeds", type=int, nargs="+", help="default tune.report_seeds")
    ap.add_argument("--reports", type=Path, help="reports folder (default reports/)")
    ap.add_argument("--params-dir", type=Path, help="where params/tuned_<study>.yaml goes (default params/)")
    ap.add_argument("--params-out", type=Path, help="the tuned parameters file itself (default "
                                                    "<params-dir>/tuned_<study>.yaml)")
    ap.add_argument("--replace", action="store_true",
                    help="overwrite the outputs of another study of the same name (never needed to extend one)")
    # internal: a worker process started by the parent
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n-trials", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seen-trials", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--parent-run-id", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    params = load_params()
    cfg = tune_config(params)
    trials = int(cfg["trials"] if args.trials is None else args.trials)
    n_workers = int(cfg["workers"] if args.workers is None else args.workers)
    objective = args.objective or cfg["objective"]
    if objective not in OBJECTIVES:
        raise UserError(f"tune.objective must be one of {', '.join(OBJECTIVES)}")
    fit_seeds(cfg)                          # a bad tune.fit_seed is one error here, not one per worker
    if args.name and args.study:
        raise UserError("give --name (a suffix) or --study (a full name), not both")
    if trials < 0 or n_workers < 1:
        raise UserError("--trials must be >= 0 and --workers >= 1")
    spaces = cfg["spaces"] or {}
    if not spaces.get(args.method):
        raise UserError(f"params.yaml tune.spaces has no search space for '{args.method}' "
                        f"(have: {', '.join(spaces) or 'none'})")
    spec = StudySpec(name=args.study or study_name(args.method, args.corpus, objective, args.name),
                     method=args.method, corpus=args.corpus, objective=objective, trials=trials,
                     storage=args.storage or cfg["storage"] or st.default_storage(),
                     corpus_dir=args.corpus_dir or REPO_ROOT / "data" / "corpora" / args.corpus,
                     reports=args.reports or REPO_ROOT / "reports", params_out=args.params_out,
                     params_dir=args.params_dir or REPO_ROOT / "params",
                     published=not args.name, replace=args.replace)
    if not Path(spec.corpus_dir).exists():
        Corpus.load(spec.corpus_dir)        # the error names the corpora that exist
    if args.report_on and args.report_on == args.corpus:
        raise UserError("--report-on must name a different corpus than --corpus: never tune and report "
                        "on the same gold labels")
    if args.worker:
        workers.run_worker(spec, params, cfg, args.n_trials, args.worker_index, args.seen_trials, args.parent_run_id)
        return
    # what a study needs at its end is checked before its first trial: a misspelt --report-on, an
    # unlabelled one, or an output folder that cannot be written would otherwise stop it after the
    # whole budget (and a tuned-parameters file written without its report)
    if args.report_on:
        transfer.report_corpus(args.report_on, args.report_on_dir, mmap=True)
    check_writable(spec.reports, "--reports")
    check_writable(Path(spec.params_out).parent if spec.params_out else spec.params_dir,
                   "--params-out's folder" if spec.params_out else "--params-dir")
    signal.signal(signal.SIGTERM, workers.raise_interrupt)   # stop the workers too, their trials marked interrupted
    if objective == "supervised" and not Corpus.load(spec.corpus_dir, mmap=True).has_labels:
        raise UserError(f"corpus '{args.corpus}' has no gold labels: use a label-free --objective "
                        "(unsupervised or context)")
    run_parent(spec, params, cfg, n_workers, args.report_on, args.report_on_dir, args.report_seeds)


if __name__ == "__main__":
    main()
