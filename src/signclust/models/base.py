"""The one interface every clusterer implements, ours and the baselines.

A clusterer is built from its parameters, fitted on a corpus, and returns
a per-token assignment plus a per-token representation (what the fixed-K
protocol runs Ward on). The registry maps method names (as used in params.yaml,
dvc.yaml and the tables) to classes.

Parameters are declared once per class (``PARAMS``, named parameter sets in ``PRESETS``; see
``signclust.models.params``) and resolved and checked in ``Clusterer.__init__``, the one place
every entry point goes through: ``self.params`` is then the complete, effective configuration.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.models import params as _params


@dataclass
class ClusterResult:
    labels: np.ndarray                      # (n_tokens,) int64 type id per token
    embedding: np.ndarray                   # (n_tokens, e) float32 token representation
    info: dict = field(default_factory=dict)  # e.g. inferred K, final losses, wall time

    def __post_init__(self):
        self.labels = np.asarray(self.labels, dtype=np.int64)
        self.embedding = np.asarray(self.embedding, dtype=np.float32)
        if self.embedding.ndim == 1:
            self.embedding = self.embedding[:, None]
        if len(self.labels) != len(self.embedding):
            raise ValueError("labels and embedding disagree on the number of tokens")

    @property
    def k_found(self) -> int:
        return int(len(np.unique(self.labels)))


class StopFit(Exception):
    """Raised by a ``FitContext.log_metrics`` callback to end a fit early (e.g. an Optuna trial
    pruned at this epoch). A fit never catches it: it propagates out of ``fit`` to the caller that
    installed the callback, which decides what it means."""


@dataclass
class FitContext:
    """What a clusterer may know besides the images: used by methods that need it.

    ``log_metrics(metrics: dict, step: int)`` is called by methods that train in epochs, once per
    epoch (step = epoch number from 1) after the epoch's checkpoint is written. Contract: the
    callback MAY raise :class:`StopFit` to stop the fit (how the tune stage prunes a trial); a
    method must let any exception from it propagate, never swallow it.
    """
    seed: int = 0
    n_clusters: int | None = None           # K_true for methods that must be told K; None otherwise
    device: str = "auto"
    distances: object | None = None         # a signclust.distances.provider.DistanceProvider, if built
    knn: tuple[np.ndarray, np.ndarray] | None = None  # (indices, distances) over images, if built
    progress: bool = True
    log_metrics: object | None = None       # callable(dict, step) per epoch; may raise StopFit (above)
    checkpoint_dir: str | None = None       # where a long fit may checkpoint and resume


class Clusterer(ABC):
    """Subclasses declare ``PARAMS`` (name -> :class:`~signclust.models.params.Param`) and
    ``PRESETS`` (name -> a parameter dict, e.g. ``"paper"``); ``DEFAULTS`` is derived from PARAMS.

    ``Clusterer(preset=None, **params)``: class defaults <- ``PRESETS[preset]`` <- ``params``,
    every value checked; ``self.params`` holds every resolved parameter. A class without
    ``PARAMS`` (the LM clusterer until its rewrite) passes its own complete dict and gets a type
    check against its ``DEFAULTS``.
    """
    name: str = "base"
    needs_k: bool = False                   # True: must be given K_true (parametric methods)
    PARAMS: dict | None = None              # name -> Param; None: legacy class with plain DEFAULTS
    PRESETS: dict[str, dict] = {}           # named parameter sets (the paper's settings as "paper")
    DEFAULTS: dict = {}                     # derived from PARAMS (do not declare both)
    # True: fit() checkpoints through signclust.models.checkpoint.FitCheckpoint in ctx.checkpoint_dir.
    # False: the train stage gives it a folder keyed by the fit's content and holds the lock itself.
    fit_checkpoint: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "PARAMS" in cls.__dict__ and cls.PARAMS is not None:
            if "DEFAULTS" in cls.__dict__:
                raise TypeError(f"{cls.__name__}: declare PARAMS or DEFAULTS, not both")
            _params.check_declaration(cls)
            cls.DEFAULTS = _params.defaults(cls.PARAMS)

    def __init__(self, preset: str | None = None, **params):
        if self.PARAMS is None:
            if preset is not None:
                raise UserError(f"{self.name}: presets are not declared in its class")
            self.params = _params.infer_types(self.name, self.DEFAULTS, params)
        else:
            self.params = _params.resolve(self.name, self.PARAMS, params, self.PRESETS, preset)
        self.validate()

    def validate(self) -> None:
        """Checks that involve several parameters (``self.params``); raise UserError. Optional."""

    @abstractmethod
    def fit(self, corpus: Corpus, ctx: FitContext) -> ClusterResult:
        ...


REGISTRY: dict[str, type[Clusterer]] = {}


def register(cls: type[Clusterer]) -> type[Clusterer]:
    REGISTRY[cls.name] = cls
    return cls


def get_clusterer(name: str, **params) -> Clusterer:
    """A configured clusterer: ``params`` are checked and completed by the class (see Clusterer)."""
    return get_class(name)(**params)


def get_class(name: str) -> type[Clusterer]:
    _import_all()
    if name not in REGISTRY:
        raise UserError(f"unknown method '{name}'; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def _import_all() -> None:
    """Import every model module so that their @register decorators run."""
    import importlib
    import pkgutil

    import signclust.models as models_pkg
    import signclust.models.baselines as baselines_pkg
    for pkg in (models_pkg, baselines_pkg):
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.name.startswith("_") and mod.name not in ("base", "params", "checkpoint", "train"):
                importlib.import_module(f"{pkg.__name__}.{mod.name}")


# -- stored results: models/runs/<method>/<corpus>/seed<k>/ -------------------------------------
# assignment.csv  token_id,type        embedding.npy  (n, e) float32        info.json  method info

def save_result(result: ClusterResult, folder, extra_info: dict | None = None) -> None:
    """Write one fit's outputs atomically (the folder appears complete or not at all)."""
    import pandas as pd

    from signclust.io import atomic_dir, write_json
    with atomic_dir(folder) as tmp:
        pd.DataFrame({"token_id": np.arange(len(result.labels)), "type": result.labels}).to_csv(
            tmp / "assignment.csv", index=False)
        np.save(tmp / "embedding.npy", result.embedding)
        write_json(tmp / "info.json", {**result.info, **(extra_info or {}), "k_found": result.k_found})


def load_result(folder) -> ClusterResult:
    import json
    from pathlib import Path

    import pandas as pd
    folder = Path(folder)
    for name in ("assignment.csv", "embedding.npy", "info.json"):
        if not (folder / name).exists():
            raise UserError(f"{folder} is not a run folder: {name} is missing")
    assignment = pd.read_csv(folder / "assignment.csv")
    return ClusterResult(assignment["type"].to_numpy(), np.load(folder / "embedding.npy"),
                         json.loads((folder / "info.json").read_text()))
