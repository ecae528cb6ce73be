"""MLflow logging for every stage: a SQLite store in the project, no telemetry, no network.

Public API (everything a stage needs; nothing else should import mlflow for logging):

``run(experiment, name, tags=..., parent_run_id=..., fail_soft=...)``
    context manager yielding a run handle with ``run_id``, ``log_params``, ``log_metrics``,
    ``log_artifact``, ``log_artifacts``, ``set_tags``. ``parent_run_id`` nests it under a run
    started elsewhere (another process); ``fail_soft=True`` turns every tracking error into one
    warning (a trial or a fit must never die of a tracking hiccup).
``start_detached(experiment, name, tags, params)`` / ``reopen(run_id)`` / ``update(run_id, ...)``
    a run that outlives one process (an Optuna study's parent run): created once, reopened and
    updated by later invocations, ended with ``update(..., terminate=True)``.
``enabled()``
    False when ``SIGNCLUST_MLFLOW=0`` (the tests): every call above is then a no-op.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from signclust.config import REPO_ROOT

TRACKING_URI = os.environ.get("MLFLOW_TRACKING_URI", f"sqlite:///{REPO_ROOT / 'mlflow.db'}")
ARTIFACT_ROOT = Path(os.environ.get("SIGNCLUST_ARTIFACTS", REPO_ROOT / "mlartifacts"))


def _mlflow():
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    import logging
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    import mlflow
    mlflow.set_tracking_uri(TRACKING_URI)
    return mlflow


def enabled() -> bool:
    return os.environ.get("SIGNCLUST_MLFLOW", "1") != "0"


def client():
    """An ``MlflowClient`` on the project's store (None when logging is off)."""
    if not enabled():
        return None
    mlflow = _mlflow()
    return mlflow.tracking.MlflowClient(TRACKING_URI)


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _clean_params(params: dict) -> dict:
    return {k: str(v)[:500] for k, v in flatten(params).items()}


def _clean_metrics(metrics: dict) -> dict:
    return {k: float(v) for k, v in flatten(metrics).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


class _NullRun:
    """Stands in for an MLflow run when logging is off (tests, SIGNCLUST_MLFLOW=0)."""
    run_id = None

    def log_params(self, params): pass
    def log_metrics(self, metrics, step=None): pass
    def log_artifact(self, path): pass
    def log_artifacts(self, folder, artifact_path=None): pass
    def set_tags(self, tags): pass


class _Run:
    def __init__(self, mlflow, run):
        self._mlflow = mlflow
        self.run_id = run.info.run_id

    def log_params(self, params: dict):
        items = list(_clean_params(params).items())
        for i in range(0, len(items), 100):
            self._mlflow.log_params(dict(items[i:i + 100]))

    def log_metrics(self, metrics: dict, step: int | None = None):
        clean = _clean_metrics(metrics)
        if clean:
            self._mlflow.log_metrics(clean, step=step)

    def log_artifact(self, path):
        if Path(path).exists():
            self._mlflow.log_artifact(str(path))

    def log_artifacts(self, folder, artifact_path: str | None = None):
        """Every file of ``folder`` under ``artifact_path`` (e.g. a run folder, readable back with
        ``SignClusterer.load("runs:/<run_id>/run")``)."""
        if Path(folder).is_dir():
            self._mlflow.log_artifacts(str(folder), artifact_path=artifact_path)

    def set_tags(self, tags: dict):
        self._mlflow.set_tags({k: str(v) for k, v in tags.items()})


class _SoftRun:
    """A run whose every call only warns (once) on failure."""

    def __init__(self, run):
        self._run, self._warned = run, False
        self.run_id = getattr(run, "run_id", None)

    def _call(self, name, *args, **kwargs):
        try:
            getattr(self._run, name)(*args, **kwargs)
        except Exception as err:  # a tracking hiccup must not cost the fit
            _warn_once(self, f"MLflow {name} failed: {err}")

    def log_params(self, params): self._call("log_params", params)
    def log_metrics(self, metrics, step=None): self._call("log_metrics", metrics, step)
    def log_artifact(self, path): self._call("log_artifact", path)
    def log_artifacts(self, folder, artifact_path=None): self._call("log_artifacts", folder, artifact_path)
    def set_tags(self, tags): self._call("set_tags", tags)


def _warn_once(owner, message: str) -> None:
    if not getattr(owner, "_warned", False):
        print(f"warning: {message}", file=sys.stderr)
        owner._warned = True


def _experiment(mlflow, experiment: str) -> str:
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        ARTIFACT_ROOT.mkdir(parents=True, exist_ok=True)
        try:
            return mlflow.create_experiment(experiment, artifact_location=(ARTIFACT_ROOT / experiment).as_uri())
        except Exception:  # another process created it first
            exp = mlflow.get_experiment_by_name(experiment)
    return exp.experiment_id


@contextlib.contextmanager
def run(experiment: str, run_name: str, nested: bool = False, tags: dict | None = None,
        parent_run_id: str | None = None, fail_soft: bool = False):
    """``with tracking.run("train", "lm/cypriot") as r: r.log_metrics(...)``.

    An exception leaving the block ends the run FAILED and propagates; catch what should end it
    normally (e.g. a pruned trial) inside the block."""
    if not enabled():
        yield _NullRun()
        return
    tags = {k: str(v) for k, v in (tags or {}).items()}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    try:
        mlflow = _mlflow()
        mlflow.set_experiment(experiment_id=_experiment(mlflow, experiment))
        ctx = mlflow.start_run(run_name=run_name, nested=nested, tags=tags)
        active = ctx.__enter__()
    except Exception as err:
        if not fail_soft:
            raise
        print(f"warning: no MLflow run for {run_name}: {err}", file=sys.stderr)
        yield _NullRun()
        return
    handle = _Run(mlflow, active)
    try:
        yield _SoftRun(handle) if fail_soft else handle
    except BaseException:
        try:
            ctx.__exit__(*sys.exc_info())
        except Exception:
            if not fail_soft:
                raise
        raise
    else:
        try:
            ctx.__exit__(None, None, None)
        except Exception as err:
            if not fail_soft:
                raise
            print(f"warning: MLflow run {run_name} not closed: {err}", file=sys.stderr)


# -- runs that outlive one process -------------------------------------------------------------

def start_detached(experiment: str, run_name: str, tags: dict | None = None,
                   params: dict | None = None) -> str | None:
    """Create a run and leave it RUNNING (not the active run of this process); its id, or None
    when logging is off or fails (a warning says why)."""
    if not enabled():
        return None
    try:
        mlflow = _mlflow()
        c = mlflow.tracking.MlflowClient(TRACKING_URI)
        created = c.create_run(_experiment(mlflow, experiment), run_name=run_name,
                               tags={k: str(v) for k, v in (tags or {}).items()})
        run_id = created.info.run_id
        if params:
            items = list(_clean_params(params).items())
            for i in range(0, len(items), 100):
                from mlflow.entities import Param
                c.log_batch(run_id, params=[Param(k, v) for k, v in items[i:i + 100]])
        return run_id
    except Exception as err:
        print(f"warning: no MLflow run {run_name}: {err}", file=sys.stderr)
        return None


def reopen(run_id: str | None) -> bool:
    """Mark an existing run RUNNING again; False when it does not exist (or logging is off)."""
    if not enabled() or not run_id:
        return False
    try:
        c = client()
        c.get_run(run_id)
        c.update_run(run_id, status="RUNNING")
        return True
    except Exception:
        return False


def update(run_id: str | None, metrics: dict | None = None, tags: dict | None = None,
           params: dict | None = None, artifacts=(), terminate: bool = False) -> bool:
    """Log onto a run by id (any process, active or finished): metrics (no step), tags, params
    not logged yet, artifact files; ``terminate`` ends it FINISHED. Never raises: False and one
    warning on failure."""
    if not enabled() or not run_id:
        return False
    try:
        from mlflow.entities import Metric, Param, RunTag
        import time
        c = client()
        now = int(time.time() * 1000)
        batch_m = [Metric(k, v, now, 0) for k, v in _clean_metrics(metrics or {}).items()]
        batch_t = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        have = set(c.get_run(run_id).data.params) if params else set()
        batch_p = [Param(k, v) for k, v in _clean_params(params or {}).items() if k not in have]
        for i in range(0, max(len(batch_m), len(batch_t), len(batch_p)), 100):
            c.log_batch(run_id, metrics=batch_m[i:i + 100], params=batch_p[i:i + 100], tags=batch_t[i:i + 100])
        for path in artifacts:
            if Path(path).exists():
                c.log_artifact(run_id, str(path))
        if terminate:
            c.set_terminated(run_id)
        return True
    except Exception as err:
        print(f"warning: MLflow run {run_id} not updated: {err}", file=sys.stderr)
        return False


def download(uri: str) -> Path:
    """A local copy of an artifact folder given as ``runs:/<run_id>/<path>`` (or any MLflow
    artifact URI)."""
    mlflow = _mlflow()
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
