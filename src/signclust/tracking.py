"""MLflow logging for every stage: a SQLite store in the repo, no telemetry, no network."""
from __future__ import annotations

import contextlib
import os
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


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


class _NullRun:
    """Stands in for an MLflow run when logging is off (tests, SIGNCLUST_MLFLOW=0)."""
    run_id = None

    def log_params(self, params): pass
    def log_metrics(self, metrics, step=None): pass
    def log_artifact(self, path): pass
    def set_tags(self, tags): pass


class _Run:
    def __init__(self, mlflow, run):
        self._mlflow = mlflow
        self.run_id = run.info.run_id

    def log_params(self, params: dict):
        flat = {k: str(v)[:500] for k, v in flatten(params).items()}
        items = list(flat.items())
        for i in range(0, len(items), 100):
            self._mlflow.log_params(dict(items[i:i + 100]))

    def log_metrics(self, metrics: dict, step: int | None = None):
        clean = {k: float(v) for k, v in flatten(metrics).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if clean:
            self._mlflow.log_metrics(clean, step=step)

    def log_artifact(self, path):
        if Path(path).exists():
            self._mlflow.log_artifact(str(path))

    def set_tags(self, tags: dict):
        self._mlflow.set_tags({k: str(v) for k, v in tags.items()})


@contextlib.contextmanager
def run(experiment: str, run_name: str, nested: bool = False, tags: dict | None = None):
    """``with tracking.run("train", "lm/cypriot") as r: r.log_metrics(...)``."""
    if not enabled():
        yield _NullRun()
        return
    mlflow = _mlflow()
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        ARTIFACT_ROOT.mkdir(parents=True, exist_ok=True)
        try:
            mlflow.create_experiment(experiment, artifact_location=(ARTIFACT_ROOT / experiment).as_uri())
        except Exception:  # another process created it first
            pass
    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=run_name, nested=nested, tags=tags) as active:
        yield _Run(mlflow, active)
