"""Parallel workers of one study, and what makes a killed study resumable.

The parent (``signclust tune``) creates the study once; W worker processes (the same command with
``--worker``) each load it and run their share of the missing trials (TPE with a constant liar, so
parallel workers do not propose the same point). A worker stopped by Ctrl-C/SIGTERM marks its
trial interrupted, and the next invocation re-enqueues it with the same parameters; a worker
killed outright stops its heartbeat and, after ``tune.grace_s``, the first worker to notice fails
the trial and re-enqueues it (Optuna's RetryHeartbeatStaleTrialCallback on an RDB storage).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings

from signclust.errors import UserError


def make_pruner(cfg: dict):
    import optuna
    kind = (cfg["pruner"] or {}).get("type", "median")
    if kind in (None, "none"):
        return optuna.pruners.NopPruner()
    if kind != "median":
        raise UserError(f"tune.pruner.type must be median or none, not '{kind}'")
    return optuna.pruners.MedianPruner(n_startup_trials=int(cfg["pruner"].get("startup_trials", 5)),
                                       n_warmup_steps=int(cfg["pruner"].get("warmup_epochs", 5)))


def raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run_worker(spec, params: dict, cfg: dict, n_trials: int, worker_index: int, seen_trials: int,
               parent_run_id: str | None) -> None:
    """One worker process: load the study and run up to ``n_trials`` until the budget is reached."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    from signclust.data.corpus import Corpus
    from signclust.evaluation.label_free import CorpusData
    from signclust.tuning.objective import Objective
    from signclust.tuning.storage import make_storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    signal.signal(signal.SIGTERM, raise_interrupt)
    threads = int(os.environ.get("SIGNCLUST_WORKER_THREADS", "0"))
    if threads > 0:
        import torch
        torch.set_num_threads(threads)
    storage = make_storage(spec.storage, cfg)
    sampler = optuna.samplers.TPESampler(seed=int(cfg["sampler_seed"]) * 10007 + 101 * seen_trials + worker_index,
                                         constant_liar=True)
    study = optuna.load_study(study_name=spec.name, storage=storage, sampler=sampler, pruner=make_pruner(cfg))
    data = CorpusData(Corpus.load(spec.corpus_dir), spec.corpus)
    objective = Objective(spec.method, params, cfg, data, spec.objective, spec.name, parent_run_id)
    study.optimize(objective, n_trials=n_trials, catch=(Exception,), gc_after_trial=True,
                   callbacks=[MaxTrialsCallback(spec.trials, states=(TrialState.COMPLETE, TrialState.PRUNED))])


def reenqueue_interrupted(study) -> int:
    """FAIL trials marked interrupted (Ctrl-C/SIGTERM) and not retried yet go back to the queue."""
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    callback = RetryHeartbeatStaleTrialCallback(max_retry=None)   # an interrupt is never the trial's fault
    n = 0
    for t in trials:
        if t.state == TrialState.FAIL and t.user_attrs.get("interrupted") and t.number not in retried:
            callback(study, t)
            n += 1
    return n


def shares(total: int, workers: int) -> list[int]:
    base, extra = divmod(total, workers)
    return [base + (1 if i < extra else 0) for i in range(workers) if base + (1 if i < extra else 0) > 0]


def start_workers(spec, workers: int, n_missing: int, seen: int, parent_run_id: str | None) -> int:
    """Run the workers (subprocesses of this command) and wait; returns how many failed."""
    parts = shares(n_missing, max(1, workers))
    threads = max(1, (os.cpu_count() or 1) // max(1, len(parts)))
    env = dict(os.environ, SIGNCLUST_WORKER_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    procs = []
    for i, n in enumerate(parts):
        cmd = [sys.executable, "-m", "signclust.tuning.tune", "--worker", "--study", spec.name,
               "--method", spec.method, "--corpus", spec.corpus, "--corpus-dir", str(spec.corpus_dir),
               "--storage", spec.storage, "--objective", spec.objective, "--trials", str(spec.trials),
               "--n-trials", str(n), "--worker-index", str(i), "--seen-trials", str(seen)]
        if parent_run_id:
            cmd += ["--parent-run-id", parent_run_id]
        procs.append(subprocess.Popen(cmd, env=env))
    print(f"study {spec.name}: {len(procs)} worker(s) for {n_missing} trial(s), pids "
          f"{', '.join(str(p.pid) for p in procs)}", flush=True)
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        for p in procs:          # our own children, one by one: they mark their trials interrupted
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    return sum(1 for c in codes if c != 0)
