"""The Python API, in scikit-learn's shape: fit on images in reading order, read the types.

    from signclust import SignClusterer

    model = SignClusterer(method="lm", epochs=20).fit(images, text_ids, positions)
    model.labels_          # (n,) type of each token, in the order given
    model.n_types_         # number of types found
    model.embedding_       # (n, e) the method's token representation
    model.inventory_       # one row per type: size, exemplar token, members (+ majority/purity with y)
    model.predict(new_images)                 # assign unseen tokens to the found types
    model.save("my_model"); SignClusterer.load("my_model")
    model.write_inventory("out/")             # the interactive HTML inventory + PNG sheet

Configuration. ``method`` is a method (``lm``, ``ward``, ``kmeans``, ``dpgmm``, ``jule``, ...) or a
run name of params.yaml ``runs`` (``lm_seed``, ``ward_glyphs``, ...). With ``config="auto"`` (the
default) and a project params.yaml in reach (the working directory or a parent holds params.yaml /
dvc.yaml, or ``$SIGNCLUST_ROOT``/``$SIGNCLUST_PARAMS``), the defaults are the shipped configuration,
exactly what ``signclust train <method>`` fits: a run name goes through
``signclust.models.train.run_config`` (``runs.<name>`` -> ``models.<method>`` + preset), a method
that is not a run name gets ``models.<method>``. Without a params.yaml (or with ``config=None``)
the defaults are the method class's own ``DEFAULTS``. Keyword arguments override either.
``config_source_`` says which applied. ``config`` may also be a path to a parameter file or a
dict shaped like params.yaml.

Predicting unseen tokens. No method of the repository has its own out-of-sample rule, so
``predict`` assigns each new token to the nearest type centroid (Euclidean) in a representation
that can be computed for new images:
  - ``kmeans``, ``ward``, ``dpgmm``: the method's own features, PCA of the pixels (or of the
    normalised glyphs with ``glyphs: true``) refitted exactly as the method fitted it on the
    training tokens; for k-means this is k-means' own assignment rule.
  - every other method (``lm``, the deep baselines, ``dpgmm`` with ``features: ae_umap``): the
    normalised glyphs (the visual representation ``lm`` starts from); their learned representation
    of a token needs the token in the training corpus (a row of S, a net that is not kept after the
    fit, a UMAP embedding).
``predict_rule_`` names the rule used.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from signclust.errors import UserError

PIXEL_METHODS = ("kmeans", "ward", "dpgmm")


def _on_pixels(method: str, params: dict) -> bool:
    """Whether the method clustered (PCA of) the pixels, a representation refittable for new images."""
    return method in PIXEL_METHODS and params.get("features", "pixels") == "pixels"


def _registry() -> dict:
    from signclust.models.base import REGISTRY, _import_all
    _import_all()
    return REGISTRY


def resolve_config(method: str, config="auto", overrides: dict | None = None) -> tuple[str, dict, str | None, str]:
    """(method, parameters, preset, where the defaults came from) for ``SignClusterer(method, config=...)``."""
    from signclust import config as sc_config
    from signclust.models.train import run_config
    registry = _registry()
    params = None
    where = "class defaults"
    if isinstance(config, dict):
        params, where = config, "the given config dict"
    elif isinstance(config, (str, Path)) and str(config) != "auto":
        params, where = sc_config.load_params(config), str(config)
    elif config == "auto":
        found = sc_config.project_params_file()
        if found is not None:
            params, where = sc_config.load_params(found), str(found)
    elif config not in (None, False):
        raise UserError(f"config must be 'auto', None, a path or a dict, not {config!r}")
    preset = None
    if params is not None and method in (params.get("runs") or {}):
        real, cfg, preset = run_config(method, params)
        source = f"runs.{method} of {where}"
    elif method in registry:
        real = method
        cfg = dict(((params or {}).get("models") or {}).get(method) or {})
        source = f"models.{method} of {where}" if params is not None else "class defaults"
    else:
        runs = sorted((params or {}).get("runs") or {})
        raise UserError(f"unknown method '{method}'; methods: {', '.join(sorted(registry))}"
                        + (f"; runs of {where}: {', '.join(runs)}" if runs else ""))
    return real, {**cfg, **(overrides or {})}, preset, source


def _as_images(images) -> np.ndarray:
    x = np.asarray(images)
    if x.ndim != 3:
        raise UserError(f"images must be an array (n, H, W); got shape {x.shape}")
    if x.dtype != np.uint8:
        if np.issubdtype(x.dtype, np.floating) and x.size and float(np.nanmax(x)) <= 1.0:
            x = x * 255.0
        x = np.clip(np.rint(x), 0, 255).astype(np.uint8)
    return x


def make_corpus(images, text_ids=None, positions=None, hands=None, y=None):
    """A Corpus from arrays: one token per image, in the given order. Without ``text_ids`` the
    tokens are one text in the given order; without ``positions`` each text's tokens are in the
    given order."""
    from signclust.data.corpus import Corpus
    if isinstance(images, Corpus):
        return images
    if isinstance(images, (str, Path)):
        return Corpus.load(images)
    x = _as_images(images)
    n = len(x)
    text_ids = np.zeros(n, dtype=int) if text_ids is None else np.asarray(text_ids)
    for name, arr in (("text_ids", text_ids), ("positions", positions), ("hands", hands), ("y", y)):
        if arr is not None and len(arr) != n:
            raise UserError(f"{name} has {len(arr)} entries for {n} images")
    corpus = Corpus.from_arrays(x, labels=y, text_ids=text_ids, hands=hands,
                                meta={"name": "api", "source": "SignClusterer.fit"})
    if positions is not None:
        corpus.tokens["position"] = np.asarray(positions, dtype=np.int64)
    corpus.validate()
    return corpus


class SignClusterer:
    """Cluster sign tokens into types; scikit-learn-shaped (``fit`` returns self, results in
    trailing-underscore attributes, ``get_params``/``set_params``). See the module docstring."""

    def __init__(self, method: str = "lm", *, n_clusters: int | None = None, seed: int = 0,
                 device: str = "auto", progress: bool = False, config="auto", **params):
        self.method = method
        self.n_clusters = n_clusters
        self.seed = seed
        self.device = device
        self.progress = progress
        self.config = config
        self.params = params

    # -- scikit-learn protocol ---------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict:
        return {"method": self.method, "n_clusters": self.n_clusters, "seed": self.seed, "device": self.device,
                "progress": self.progress, "config": self.config, **self.params}

    def set_params(self, **kw) -> "SignClusterer":
        for key, value in kw.items():
            if key in ("method", "n_clusters", "seed", "device", "progress", "config"):
                setattr(self, key, value)
            else:
                self.params[key] = value
        return self

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.params.items())
        return f"SignClusterer(method={self.method!r}{extra})"

    # -- fitting ---------------------------------------------------------------------------------
    def resolved_config(self) -> dict:
        """The parameters a fit would use: the defaults (see ``config``) + the keyword overrides,
        completed with the method's DEFAULTS."""
        method, cfg, _, _ = resolve_config(self.method, self.config, self.params)
        return _full_params(_registry()[method](**cfg))

    def fit(self, images, text_ids=None, positions=None, hands=None, y=None) -> "SignClusterer":
        """Fit on ``images`` (uint8 (n, H, W), ink bright on a dark background as in the corpus
        format; floats in [0, 1] are scaled), or a Corpus / corpus folder. ``text_ids`` and
        ``positions`` give the reading order (default: one text, in the given order); ``hands``
        and the gold labels ``y`` are optional and only used by ``inventory_``/``score``."""
        import time

        from signclust.config import torch_switches_kept
        from signclust.models.base import FitContext, get_clusterer
        method, cfg, preset, source = resolve_config(self.method, self.config, self.params)
        corpus = make_corpus(images, text_ids, positions, hands, y)
        model = get_clusterer(method, **cfg)
        k = self.n_clusters
        if model.needs_k and k is None:
            raise UserError(f"{method} needs the number of types: SignClusterer('{self.method}', n_clusters=K)")
        ctx = FitContext(seed=int(self.seed), n_clusters=int(k) if model.needs_k else None, device=self.device,
                         progress=bool(self.progress))
        t0 = time.time()
        with torch_switches_kept():                 # a fit on CUDA turns deterministic kernels on
            result = model.fit(corpus, ctx)
        self._set_result(method, preset, _full_params(model), source, corpus, result, time.time() - t0)
        return self

    def fit_predict(self, images, text_ids=None, positions=None, hands=None, y=None) -> np.ndarray:
        return self.fit(images, text_ids, positions, hands, y).labels_

    def _set_result(self, method, preset, params, source, corpus, result, seconds):
        self.method_, self.preset_, self.params_, self.config_source_ = method, preset, params, source
        self.corpus_ = corpus
        self.result_ = result
        self.labels_ = result.labels
        self.embedding_ = result.embedding
        self.n_types_ = int(len(np.unique(result.labels)))
        self.info_ = dict(result.info)
        self.seconds_ = seconds
        self.predict_rule_ = ("nearest type centroid in the method's features (PCA of "
                              + ("normalised glyphs" if params.get("glyphs") else "pixels") + ")"
                              if _on_pixels(method, params) else "nearest type centroid of the normalised glyphs")
        self._predictor = None
        self._inventory = None

    def _check_fitted(self):
        if not hasattr(self, "labels_"):
            raise UserError("this SignClusterer is not fitted yet: call fit(images, ...) first")

    def _check_corpus(self, what: str):
        self._check_fitted()
        if self.corpus_ is None:
            raise UserError(f"{what} needs the training images, which this loaded model does not have: "
                            "SignClusterer.load(path, corpus=<Corpus or corpus folder>)")

    # -- reading the result ------------------------------------------------------------------------
    @property
    def inventory_(self):
        """One row per found type, largest first: ``type``, ``size``, ``exemplar`` (token index of
        the medoid), ``members`` (token indices), and with gold labels ``majority``, ``purity``."""
        import pandas as pd

        from signclust.reports.inventory import build_types
        self._check_corpus("inventory_")
        if self._inventory is None:
            cfg = _inventory_config()
            types = build_types(self.corpus_, self.labels_, cfg, seed=int(self.seed))
            rows = [{"type": t.type_id, "size": t.size, "exemplar": t.exemplar, "members": t.members.tolist(),
                     **({"majority": t.majority, "purity": t.purity} if t.majority is not None else {})}
                    for t in types]
            self._inventory = pd.DataFrame(rows)
        return self._inventory

    def score(self, y) -> dict:
        """V-measure, NMI, ARI, accuracy, purity, ... of ``labels_`` against gold labels ``y``."""
        from signclust.evaluation.metrics import score
        self._check_fitted()
        gold = np.unique(np.asarray([str(v) for v in y]), return_inverse=True)[1]
        return score(gold, self.labels_)

    def write_inventory(self, out_dir, name: str | None = None) -> tuple[Path, Path]:
        """The interactive HTML inventory and its PNG sheet into ``out_dir``; returns both paths."""
        from signclust.reports.inventory import write_inventory
        self._check_corpus("write_inventory")
        names = {"method": name or self.method, "corpus": self.corpus_.meta.get("name", "api"), "seed": self.seed}
        return write_inventory(self.corpus_, self.labels_, Path(out_dir), names, _inventory_config())

    # -- predicting --------------------------------------------------------------------------------
    def predict(self, images) -> np.ndarray:
        """Type of each new image (uint8 (m, H, W) like the training images): the nearest type
        centroid in ``predict_rule_``'s representation."""
        self._check_corpus("predict")
        x = _as_images(images)
        if self._predictor is None:
            self._predictor = _Predictor(self.method_, self.params_, int(self.seed), self.corpus_, self.labels_)
        return self._predictor.predict(x)

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path) -> Path:
        """A run folder (assignment.csv, embedding.npy, info.json: the same format as the train
        stage's models/runs/<run>/<corpus>/seed<k>/) plus the training corpus in ``corpus/``."""
        from signclust.models.base import save_result
        self._check_fitted()
        path = Path(path)
        save_result(self.result_, path, {
            "method": self.method_, "run": self.method, "preset": self.preset_, "seed": self.seed,
            "params": self.params_, "seconds": self.seconds_,
            "api": {"n_clusters": self.n_clusters, "config_source": self.config_source_, "device": self.device}})
        if self.corpus_ is not None:
            self.corpus_.save(path / "corpus")
        return path

    @classmethod
    def load(cls, path, corpus=None) -> "SignClusterer":
        """Read back ``save(path)``, a train-stage run folder (models/runs/<run>/<corpus>/seed<k>/),
        or an MLflow train run's artifact ``runs:/<run_id>/run``. The training images (needed by
        ``predict`` and ``inventory_``) come from ``path/corpus/``, else ``corpus`` (a Corpus or a
        folder), else the project's data/corpora/<corpus> named in info.json when it exists."""
        from signclust.data.corpus import Corpus
        from signclust.models.base import load_result
        if str(path).startswith(("runs:/", "models:/", "mlflow-artifacts:/")):
            from signclust import tracking
            path = tracking.download(str(path))
        path = Path(path)
        result = load_result(path)
        info = result.info
        api = info.get("api") or {}
        # refitting a loaded model repeats its configuration exactly: the method with its saved parameters
        obj = cls(info.get("method", "lm"), n_clusters=api.get("n_clusters"), seed=int(info.get("seed") or 0),
                  device=api.get("device", "auto"), config=None, **dict(info.get("params") or {}))
        if (path / "corpus").is_dir():
            corpus = Corpus.load(path / "corpus")
        elif corpus is not None and not isinstance(corpus, Corpus):
            corpus = Corpus.load(corpus)
        elif corpus is None and info.get("corpus"):
            from signclust.config import REPO_ROOT
            folder = REPO_ROOT / "data" / "corpora" / str(info["corpus"])
            corpus = Corpus.load(folder) if (folder / "tokens.csv").is_file() else None
        if corpus is not None and corpus.n_tokens != len(result.labels):
            raise UserError(f"the corpus has {corpus.n_tokens} tokens, the run folder {len(result.labels)}")
        method = info.get("method", obj.method)
        params = dict(info.get("params") or {})
        try:                        # a train-stage folder records the given parameters: complete them
            params = _full_params(_registry()[method](**params))
        except Exception:
            pass
        obj._set_result(method, info.get("preset"), params, api.get("config_source", f"loaded from {path}"),
                        corpus, result, info.get("seconds"))
        return obj


def _inventory_config() -> dict:
    """params.yaml ``report.inventory`` when a project params.yaml is in reach, else its defaults."""
    from signclust import config as sc_config
    from signclust.reports.inventory import config as inv_config
    found = sc_config.project_params_file()
    return inv_config(sc_config.load_params(found) if found else {})


def _full_params(model) -> dict:
    """A clusterer's complete parameters: its DEFAULTS overlaid with what it was given."""
    merged = getattr(model, "p", None)
    if isinstance(merged, dict) and merged:
        return dict(merged)
    return {**getattr(model, "DEFAULTS", {}), **model.params}


class _Predictor:
    """Nearest type centroid in a representation computable for unseen images."""

    def __init__(self, method: str, params: dict, seed: int, corpus, labels: np.ndarray):
        self.pixel = _on_pixels(method, params)
        self.glyphs = bool(params.get("glyphs")) if self.pixel else True
        self.pca = None
        self.shape = corpus.image_size
        x = self._raw(corpus.images)[corpus.image_index()]
        if self.pixel:
            dim = int(params.get("pca_dim", 0) or 0)
            if dim > 0:
                from sklearn.decomposition import PCA   # as PixelClusterer.features fits it
                self.pca = PCA(n_components=min(dim, x.shape[0], x.shape[1]), random_state=seed).fit(x)
                x = self.pca.transform(x).astype(np.float32)
        self.types, inverse = np.unique(labels, return_inverse=True)
        sums = np.zeros((len(self.types), x.shape[1]), dtype=np.float64)
        np.add.at(sums, inverse, x)
        self.centroids = (sums / np.bincount(inverse)[:, None]).astype(np.float32)

    def _raw(self, images: np.ndarray) -> np.ndarray:
        if self.glyphs:
            from signclust.data.glyphs import normalize_glyphs
            images = normalize_glyphs(images)
        return images.reshape(len(images), -1).astype(np.float32) / 255.0

    def transform(self, images: np.ndarray) -> np.ndarray:
        if not self.glyphs and tuple(images.shape[1:]) != tuple(self.shape):
            raise UserError(f"new images are {images.shape[1:]}, the training images {self.shape}")
        x = self._raw(images)
        return self.pca.transform(x).astype(np.float32) if self.pca is not None else x

    def predict(self, images: np.ndarray) -> np.ndarray:
        z = self.transform(images)
        out = np.empty(len(z), dtype=np.int64)
        c2 = (self.centroids.astype(np.float64) ** 2).sum(1)
        for start in range(0, len(z), 2048):
            b = z[start:start + 2048].astype(np.float64)
            d = c2[None, :] - 2 * b @ self.centroids.T.astype(np.float64)
            out[start:start + 2048] = self.types[np.argmin(d, axis=1)]
        return out
