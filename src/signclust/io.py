"""Atomic writes: outputs appear complete or not at all.

Every temporary name is unique and carries the writer's pid:
``.<name>.<pid>.<random>.tmp[<suffix>]`` for a file or folder being written, and
``.<name>.<pid>.<random>.old`` for the version being replaced. A killed writer leaves them
behind; the next atomic write of the same path removes those whose pid is no longer alive
(``clean_stale``), and restores an ``.old`` version when the kill came between moving the old
version away and moving the new one in.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

_UMASK = os.umask(0)
os.umask(_UMASK)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # exists, owned by someone else
        return True
    return True


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def clean_stale(path: str | Path) -> list[Path]:
    """Remove the temporary siblings of ``path`` left by killed writers; returns what was removed.

    A sibling is ours when it is named ``.<name>.<pid>.<random>.tmp...`` or ``....old`` (or the
    pid-less ``.<name>.<random>.tmp...`` and ``.<name>.old`` of earlier versions) and its pid is
    not a live process.
    """
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        return []
    name = re.escape(path.name)
    pattern = re.compile(rf"^\.{name}\.(?:(\d+)\.)?[A-Za-z0-9_]{{8}}\.(tmp.*|old)$|^\.{name}\.(old)$")
    removed = []
    for entry in os.listdir(parent):
        m = pattern.match(entry)
        if not m:
            continue
        pid = int(m.group(1)) if m.group(1) else None
        if pid is not None and _pid_alive(pid):
            continue
        stale = parent / entry
        if "old" in (m.group(2), m.group(3)) and not os.path.lexists(path):
            with contextlib.suppress(OSError):
                os.replace(stale, path)          # killed between the two renames: keep the old version
                continue
        _remove(stale)
        removed.append(stale)
    return removed


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path next to ``path``; rename it over ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp" + path.suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_dir(path: str | Path):
    """Yield a temporary folder next to ``path``; swap it in for ``path`` on success.

    Whatever is at ``path`` (a folder, a file, a link) is replaced; callers that must not replace
    a user's files check first (``signclust.data.corpus.check_corpus_out``).
    """
    path = Path(path)
    if not path.name or path.name in (".", ".."):
        raise ValueError(f"atomic_dir needs a named folder, not {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_UMASK)
        if os.path.lexists(path):
            old = tmp.with_name(tmp.name[: -len(".tmp")] + ".old")     # unique, like tmp
            os.replace(path, old)
            os.replace(tmp, path)
            _remove(old)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


def write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def save_npy(path: str | Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, array)


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x)}")
