"""Epoch checkpoints of one fit: resume after a kill with the same result, never a stale one.

Use in a clusterer's ``fit`` (``models/baselines/deepcluster.py`` is the simplest example)::

    from signclust.models.checkpoint import FitCheckpoint, capture_rng, restore_rng

    with FitCheckpoint.for_fit(self, corpus, ctx) as ckpt:      # no-op without ctx.checkpoint_dir
        start, history = 0, []
        state = ckpt.load()                                     # None, or what save() stored
        if state is not None:
            net.load_state_dict(state["net"]); opt.load_state_dict(state["opt"])
            start, history = state["epoch"], state["history"]
            restore_rng(state["rng"], gen)
        for epoch in range(start, epochs):
            ...                                                 # one epoch
            ckpt.save({"epoch": epoch + 1, "net": net.state_dict(), "opt": opt.state_dict(),
                       "history": history, "rng": capture_rng(gen)})
            log_epoch(...)                                      # after saving: a failing logger loses nothing
    return result

What is guaranteed:

- **Key.** A checkpoint is used only when its key matches the fit: sha256 over the corpus
  images' bytes (and shape, dtype), the token order (text_id, position, image_index of every
  row), the resolved parameters, the seed, K (when given) and the device type, and the code
  version: the source files of the method's class, its base classes and every signclust module
  they import (the closure, imports inside functions included), plus the torch and numpy
  versions. A checkpoint whose key differs, or that cannot be read, is ignored with one line on
  stderr saying why, and overwritten by the fit's first save.
- **Where.** ``ctx.checkpoint_dir`` (one folder per fit; the train stage passes
  ``<out>/.checkpoints/<run>/<corpus>/seed<k>``): ``checkpoint.pt`` and ``lock``. Nothing is
  written without a checkpoint_dir (the Python API, tune trials, paper checks, ablation).
- **Writes** go to a unique temporary file in that folder, then ``os.replace``: a kill leaves
  the previous checkpoint or the new one, never half of one; leftover temporary files are
  removed when the next fit of that folder starts.
- **Loads** use ``torch.load(..., weights_only=True)``: a checkpoint cannot run code. States
  may hold tensors, numpy arrays, numbers, strings, None and dicts/lists/tuples of them (numpy
  arrays and scalars are converted on save and restored on load).
- **Concurrency.** The fit holds an exclusive ``fcntl.flock`` on ``lock`` from start to end;
  a second process on the same fit stops at once with a UserError naming the holder's pid
  (flock is released by the kernel when a process dies, so a killed fit never leaves a
  stale lock).
- **Finished fits keep nothing**: on success the checkpoint, the lock file and the folder (if
  then empty) are removed; after an exception (or a kill) the checkpoint stays for the resume.
- **Exactness.** Resuming replays the rest of the fit exactly when the state saved is complete:
  model and optimiser states, every counter, and the random-number state (``capture_rng``:
  torch's, numpy's and Python's global generators and the fit's own ``torch.Generator``s).
  Same CPU thread count, same bytes.

Not guaranteed: durability against power loss (no fsync), and identical results after moving a
checkpoint between CPU and GPU (the device type is part of the key, so that never happens).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

from signclust.errors import UserError

FORMAT = 1
FILE = "checkpoint.pt"
LOCK = "lock"
_WHAT = {"corpus": "corpus images", "tokens": "token order (text_id, position, image_index)",
         "params": "parameters", "context": "seed, K or device", "code": "code (method source, torch or numpy)",
         "extra": "method-specific inputs"}


# ----------------------------------------------------------------------------------- the key
def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()


def corpus_hash(corpus) -> str:
    images = np.ascontiguousarray(corpus.images)
    h = hashlib.sha256(f"{images.dtype}{images.shape}".encode())
    h.update(memoryview(images.reshape(-1)).cast("B") if images.size else b"")
    return h.hexdigest()


def tokens_hash(corpus) -> str:
    t = corpus.tokens
    return _sha("\x00".join(t["text_id"].astype(str)).encode(),
                np.ascontiguousarray(t["position"].to_numpy(dtype=np.int64)).tobytes(),
                np.ascontiguousarray(t["image_index"].to_numpy(dtype=np.int64)).tobytes())


def signclust_imports(path: str) -> set[str]:
    """The files of the signclust modules a source file imports, wherever the import stands: at
    module level or inside a function (``lm_clusterer`` imports the encoder inside ``fit``)."""
    import ast
    import importlib.util
    names = set()
    for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)   # ``from pkg import module``
    files = set()
    for name in names:
        if name.split(".")[0] != "signclust":
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):            # ``from signclust.x import function``: not a module
            continue
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            files.add(spec.origin)
    return files


@functools.lru_cache(maxsize=None)
def code_version(cls) -> str:
    """sha256 of the source files a method's behaviour comes from: the modules of its class and
    base classes and every signclust module they import, directly or through each other, at
    module level or inside a function; plus torch and numpy versions."""
    todo = [sys.modules[k.__module__].__file__ for k in inspect.getmro(cls)
            if k.__module__.startswith("signclust.") and getattr(sys.modules.get(k.__module__), "__file__", None)]
    files: set[str] = set()
    while todo:                                      # the import closure within signclust
        f = todo.pop()
        if f not in files:
            files.add(f)
            todo.extend(signclust_imports(f) - files)
    import torch
    h = hashlib.sha256(f"torch {torch.__version__} numpy {np.__version__}".encode())
    for f in sorted(files):
        h.update(Path(f).name.encode())
        h.update(Path(f).read_bytes())
    return h.hexdigest()


def fit_key(clusterer, corpus, ctx, extra: dict | None = None) -> dict[str, str]:
    """The components of a fit's checkpoint key (each a sha256 hex digest)."""
    from signclust.config import torch_device
    context = {"seed": int(ctx.seed), "n_clusters": ctx.n_clusters, "device": torch_device(ctx.device).type}
    key = {
        "corpus": corpus_hash(corpus),
        "tokens": tokens_hash(corpus),
        "params": _sha(json.dumps({"method": clusterer.name, "params": clusterer.params},
                                  sort_keys=True, default=str).encode()),
        "context": _sha(json.dumps(context, sort_keys=True).encode()),
        "code": code_version(type(clusterer)),
    }
    if extra:
        key["extra"] = _sha(json.dumps(extra, sort_keys=True, default=str).encode())
    return key


# ----------------------------------------------------------------------------------- states
def _encode(x):
    """numpy arrays/scalars -> what torch.load(weights_only=True) reads back."""
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise TypeError("checkpoint states cannot hold object arrays")
        return {"__ndarray__": _np_tensor(x)}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {k: _encode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_encode(v) for v in x)
    return x


def _np_tensor(x: np.ndarray):
    import torch
    return torch.from_numpy(np.array(x, copy=True, order="C"))


def _decode(x):
    if isinstance(x, dict):
        if set(x) == {"__ndarray__"}:
            return x["__ndarray__"].numpy()
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_decode(v) for v in x)
    return x


def capture_rng(*generators) -> dict:
    """Every random-number state a fit may draw from: torch (CPU, and CUDA once initialised),
    numpy's and Python's global generators, and the given ``torch.Generator``s."""
    import torch
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
             "generators": [g.get_state() for g in generators]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict, *generators) -> None:
    import torch
    torch.set_rng_state(state["torch"])
    np.random.set_state(tuple(state["numpy"]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if len(generators) != len(state["generators"]):
        raise ValueError(f"checkpoint holds {len(state['generators'])} generator states, not {len(generators)}")
    for g, s in zip(generators, state["generators"]):
        g.set_state(s)


def load_weights(path, map_location="cpu"):
    """``torch.load`` that cannot execute code (weights_only=True), numpy arrays restored."""
    import torch
    return _decode(torch.load(path, map_location=map_location, weights_only=True))


def save_atomic(obj, path) -> None:
    """``torch.save`` to a unique temporary file next to ``path``, then rename over it."""
    import torch
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(_encode(obj), fh)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _say(msg: str) -> None:
    print(f"checkpoint: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------- the object
class FitCheckpoint:
    """Checkpoints of one fit in one folder (see the module docstring). Disabled (every method a
    no-op, ``load`` returns None) when ``directory`` is None."""

    def __init__(self, directory, key: dict[str, str] | None, label: str = "fit"):
        self.dir = Path(directory) if directory is not None else None
        self.key = dict(key or {})
        self.label = label
        self.saves = 0                     # saves of this fit so far, resumes included
        self._lock_fd: int | None = None

    @classmethod
    def for_fit(cls, clusterer, corpus, ctx, extra: dict | None = None) -> "FitCheckpoint":
        if not getattr(ctx, "checkpoint_dir", None):
            return cls(None, None, clusterer.name)
        return cls(ctx.checkpoint_dir, fit_key(clusterer, corpus, ctx, extra),
                   f"{clusterer.name} seed {ctx.seed}")

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    @property
    def path(self) -> Path | None:
        return self.dir / FILE if self.dir is not None else None

    # -- lock ---------------------------------------------------------------------------------
    def __enter__(self) -> "FitCheckpoint":
        if not self.enabled:
            return self
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as err:
            raise UserError(f"cannot use checkpoint folder {self.dir}: {err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UserError(f"another process (pid {holder}) is running this fit ({self.label}, checkpoint "
                            f"folder {self.dir}); wait for it to finish or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd
        for stale in self.dir.glob(f"{FILE}.*.tmp"):     # a killed save's leftovers: we hold the lock
            with contextlib.suppress(OSError):
                stale.unlink()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._lock_fd is None:
            return
        try:
            if exc_type is None:                         # finished: nothing to resume
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                with contextlib.suppress(FileNotFoundError):
                    (self.dir / LOCK).unlink()
                with contextlib.suppress(OSError):
                    self.dir.rmdir()                     # only if empty
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- state ----------------------------------------------------------------------------------
    def load(self) -> dict | None:
        """The state of the last save of this very fit, or None (with one line saying why when a
        checkpoint exists but is not used)."""
        if not self.enabled or not self.path.exists():
            return None
        try:
            doc = load_weights(self.path)
        except Exception as err:                         # truncated by hand, other torch, not ours
            _say(f"ignoring {self.path}: unreadable ({err.__class__.__name__}); starting from the beginning")
            return None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("key"), dict):
            _say(f"ignoring {self.path}: not a signclust checkpoint of this format; starting from the beginning")
            return None
        differ = [k for k in sorted(set(self.key) | set(doc["key"])) if self.key.get(k) != doc["key"].get(k)]
        if differ:
            what = ", ".join(_WHAT.get(k, k) for k in differ)
            _say(f"ignoring {self.path}: written for a different fit (changed: {what}); "
                 "starting from the beginning")
            return None
        state = doc["state"]
        self.saves = int(doc.get("saves", 0))
        where = f" at epoch {state['epoch']}" if isinstance(state, dict) and "epoch" in state else ""
        _say(f"resuming {self.label}{where} from {self.path}")
        return state

    def save(self, state: dict) -> None:
        if not self.enabled:
            return
        if self._lock_fd is None:
            raise RuntimeError("FitCheckpoint.save outside its `with` block")
        self.saves += 1
        save_atomic({"format": FORMAT, "key": self.key, "saves": self.saves, "state": state}, self.path)
