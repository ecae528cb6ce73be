"""Where studies live while they run, and how a study travels with the repository.

Working storage: an Optuna RDB storage (SQLite ``optuna.db`` in the project by default, git-ignored;
any SQLAlchemy URL such as ``postgresql://...`` for workers on several machines) with heartbeats,
so that a worker killed outright has its trial failed and re-enqueued.

Committed copy: after a study changed, its trials (and its attributes, metric name, uid) are exported to ``reports/studies/<study>.optuna.log``, an Optuna journal file. A fresh clone
has no optuna.db; the next ``signclust tune`` of that study imports the journal into the working
storage first and extends the same study (same uid). The journal also opens directly in
``optuna-dashboard reports/studies/<study>.optuna.log`` or from Python with
``optuna.load_study(study_name=..., storage=journal_storage(path))``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

from signclust.config import REPO_ROOT
from signclust.errors import UserError


def default_storage() -> str:
    return f"sqlite:///{REPO_ROOT / 'optuna.db'}"


def redact(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1] if "@" in url else url


def make_storage(url: str, cfg: dict):
    """An RDB storage (any SQLAlchemy URL) with heartbeats, so killed trials are retried."""
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
    from sqlalchemy.exc import SQLAlchemyError
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    try:
        return RDBStorage(url, engine_kwargs=engine_kwargs,
                          heartbeat_interval=int(cfg["heartbeat_s"]), grace_period=int(cfg["grace_s"]),
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                              max_retry=cfg["max_retry"]))
    except (optuna.exceptions.StorageInternalError, SQLAlchemyError, ImportError, ValueError) as err:
        # SQLAlchemy's own errors (an unknown dialect, a database file that cannot be opened) end in a
        # multi-line "Background on this error" paragraph: the first line says what went wrong
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"cannot open Optuna storage {redact(url)}: {first}") from err


def journal_storage(path: str | Path):
    """An Optuna JournalStorage on a journal file (read it, or write a fresh one)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path))))


def has_study(storage, name: str) -> bool:
    return any(s.study_name == name for s in storage.get_all_studies())


def copy_study(name: str, from_storage, to_storage) -> int:
    """Copy a study (attributes, metric name, every trial with its number) into a storage that does
    not hold it. A trial still running elsewhere is copied as failed and marked interrupted, so the
    next invocation re-enqueues it (a waiting trial stays waiting). Returns the trials copied."""
    import copy
    import datetime

    import optuna
    from optuna.trial import TrialState
    src = optuna.load_study(study_name=name, storage=from_storage)
    dst = optuna.create_study(study_name=name, storage=to_storage, directions=src.directions)
    for key, value in from_storage.get_study_system_attrs(src._study_id).items():
        to_storage.set_study_system_attr(dst._study_id, key, value)
    for key, value in src.user_attrs.items():
        dst.set_user_attr(key, value)
    trials = src.get_trials(deepcopy=False)
    for trial in trials:
        if trial.state == TrialState.RUNNING:
            trial = copy.deepcopy(trial)
            trial.state = TrialState.FAIL
            trial.datetime_complete = datetime.datetime.now()
            trial.set_user_attr("interrupted", True)
        to_storage.create_new_trial(dst._study_id, template_trial=trial)
    return len(trials)


def export_journal(storage, name: str, path: Path) -> Path:
    """The study as a journal file, replacing ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix=".journal.", dir=path.parent))
    try:
        tmp = tmpdir / path.name
        copy_study(name, storage, journal_storage(tmp))
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return path


def import_journal(path: Path, name: str, storage) -> int:
    """Load a committed journal's study into the working storage (which must not hold it yet).
    The committed file is only read (a scratch copy is opened: the journal backend writes lock
    files beside what it opens)."""
    tmpdir = Path(tempfile.mkdtemp(prefix="signclust-journal-"))
    try:
        tmp = tmpdir / Path(path).name
        shutil.copyfile(path, tmp)
        source = journal_storage(tmp)
        if not has_study(source, name):
            raise UserError(f"{path} holds no study named '{name}'")
        return copy_study(name, source, storage)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
