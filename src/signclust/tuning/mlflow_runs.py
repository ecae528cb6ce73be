"""A study in MLflow: experiment ``tune``, one parent run per study (created once, reopened by
later invocations, its id kept in the study), each trial a child run (see tuning.objective).
Everything here goes through signclust.tracking's public API and never fails a study."""
from __future__ import annotations

from signclust import tracking
from signclust.tuning.study import count_states


def open_parent_run(study, study_name: str, info: dict) -> str | None:
    """The study's MLflow parent run: the one recorded in the study when it still exists, else a
    new one (recorded). None when logging is off or fails."""
    if not tracking.enabled():
        return None
    run_id = study.user_attrs.get("mlflow_parent_run_id")
    if run_id and tracking.reopen(run_id):
        return run_id
    run_id = tracking.start_detached("tune", study_name, tags={"study": study_name, **info}, params=info)
    if run_id:
        study.set_user_attr("mlflow_parent_run_id", run_id)
    return run_id


def finish_parent_run(run_id: str | None, study, outputs: dict, agreement: dict) -> None:
    """Study-level numbers (trial counts, best value and its scores, U-V agreement, transfer means)
    and the outputs as artifacts; the run ends FINISHED."""
    if not run_id:
        return
    counts = count_states(study)
    metrics = {f"trials_{k}": counts[k] for k in ("complete", "pruned", "fail")}
    if counts["complete"]:
        metrics["best_value"] = study.best_value
        metrics.update({f"best.{k}": v for k, v in study.best_trial.user_attrs.items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)})
    for name in ("unsupervised", "context"):
        rho = (agreement.get(f"{name}_vs_v") or {}).get("rho")
        if rho is not None:
            metrics[f"spearman_{name}_v"] = rho
    transfer = study.user_attrs.get("transfer") or {}
    for name in ("tuned", "configured"):
        for k, v in (transfer.get(name) or {}).get("mean", {}).items():
            metrics[f"transfer.{name}.{k}"] = v
    tracking.update(run_id, metrics=metrics, artifacts=[p for p in outputs.values() if p], terminate=True)
