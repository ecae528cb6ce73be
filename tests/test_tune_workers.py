"""The tune stage's pruner as configured, and what happens to the trial of a worker that dies:
killed outright (heartbeat goes stale) or interrupted (Ctrl-C / SIGTERM) -> the trial is failed
and re-enqueued with the same parameters, exactly once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from signclust.errors import UserError
from signclust.tuning import storage as st
from signclust.tuning import workers
from signclust.tuning.study import tune_config

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _cfg(**tune) -> dict:
    return tune_config({"tune": tune})


# -- median pruner -----------------------------------------------------------------------------

def _finished(study, values: list[float], steps=(1, 2, 3, 4)):
    import optuna
    for v in values:
        study.add_trial(optuna.trial.create_trial(
            params={"x": 0.5}, distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
            value=v, intermediate_values={s: v for s in steps}))


def test_median_pruner_follows_the_config():
    """tune.pruner {type: median, startup_trials: 2, warmup_epochs: 2}: no pruning before 2 trials
    finished nor before epoch 2; then a trial whose proxy is below the finished trials' median at the
    same epoch is pruned, one above it is not (the study maximises)."""
    import optuna
    pruner = workers.make_pruner(_cfg(pruner={"type": "median", "startup_trials": 2, "warmup_epochs": 2}))
    assert isinstance(pruner, optuna.pruners.MedianPruner)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    _finished(study, [1.0])
    early = study.ask()
    early.report(0.1, 3)
    assert not early.should_prune()                 # one finished trial < startup_trials
    _finished(study, [2.0])                         # median at every epoch: 1.5
    low = study.ask()
    low.report(0.1, 1)
    assert not low.should_prune()                   # epoch 1 < warmup_epochs
    low.report(1.4, 3)
    assert low.should_prune()
    high = study.ask()
    high.report(1.6, 3)
    assert not high.should_prune()


def test_pruner_types():
    import optuna
    assert isinstance(workers.make_pruner(_cfg(pruner={"type": "none"})), optuna.pruners.NopPruner)
    default = workers.make_pruner(_cfg())                        # study.DEFAULTS: median, 5, 5
    assert isinstance(default, optuna.pruners.MedianPruner)
    assert (default._n_startup_trials, default._n_warmup_steps) == (5, 5)
    with pytest.raises(UserError, match="median or none"):
        workers.make_pruner(_cfg(pruner={"type": "hyperband"}))


# -- a dead worker's trial -----------------------------------------------------------------------

WORKER = textwrap.dedent("""
    import sys, time
    import optuna
    from signclust.tuning.storage import make_storage
    from signclust.tuning.study import tune_config
    cfg = tune_config({"tune": {"heartbeat_s": 1, "grace_s": 2}})
    study = optuna.load_study(study_name="s", storage=make_storage(sys.argv[1], cfg))
    def objective(trial):
        trial.suggest_float("x", 0.0, 1.0)
        trial.suggest_int("k", 2, 9)
        print("running", trial.number, flush=True)
        time.sleep(600)                           # killed before it returns
    study.optimize(objective, n_trials=1)
""")


def test_a_killed_workers_trial_is_failed_and_requeued_with_its_parameters(tmp_path):
    """A worker process dies by SIGKILL in the middle of a trial: its heartbeat stops; once the
    grace period passes, fail_stale_trials (what `signclust tune` runs first) fails the trial and
    puts a copy with the same parameters back in the queue, which the next worker runs."""
    import optuna
    from optuna.trial import TrialState
    url = f"sqlite:///{tmp_path / 'o.db'}"
    cfg = _cfg(heartbeat_s=1, grace_s=2)
    storage = st.make_storage(url, cfg)
    optuna.create_study(study_name="s", storage=storage, direction="maximize")
    proc = subprocess.Popen([sys.executable, "-c", WORKER, url], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == "running 0"
        time.sleep(1.5)                              # at least one heartbeat written
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    study = optuna.load_study(study_name="s", storage=storage)
    [running] = study.get_trials(deepcopy=False)
    assert running.state == TrialState.RUNNING       # nobody told the storage the worker died
    time.sleep(2.5)                                  # past the grace period
    optuna.storages.fail_stale_trials(study)
    failed, waiting = study.get_trials(deepcopy=False)
    assert failed.state == TrialState.FAIL and waiting.state == TrialState.WAITING
    assert waiting.params == failed.params and set(waiting.params) == {"x", "k"}
    assert waiting.system_attrs["failed_trial"] == 0 and waiting.system_attrs["retry_history"] == [0]
    # the next worker takes the waiting copy, not a new point
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0) + 0 * t.suggest_int("k", 2, 9), n_trials=1)
    done = study.get_trials(deepcopy=False)[1]
    assert done.state == TrialState.COMPLETE and done.params == failed.params
    assert len(study.get_trials(deepcopy=False)) == 2


def test_an_interrupted_trial_is_requeued_once():
    """Ctrl-C / SIGTERM marks the trial `interrupted` (Objective); the next invocation re-enqueues it
    with the same parameters, and a second invocation does not enqueue it again."""
    import optuna
    from optuna.trial import TrialState
    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    study.add_trial(optuna.trial.create_trial(params={"x": 0.25}, distributions=dist, state=TrialState.FAIL,
                                              user_attrs={"interrupted": True}))
    study.add_trial(optuna.trial.create_trial(params={"x": 0.75}, distributions=dist, state=TrialState.FAIL))
    assert workers.reenqueue_interrupted(study) == 1          # a trial that failed on its own stays failed
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL, TrialState.WAITING]
    assert trials[2].params == {"x": 0.25} and trials[2].system_attrs["retry_history"] == [0]
    assert workers.reenqueue_interrupted(study) == 0
    assert len(study.get_trials(deepcopy=False)) == 3
