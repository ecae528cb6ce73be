"""Distances between tokens behind one interface, whatever the corpus size.

Below a size threshold the distance stage writes the full image x image matrix
and :class:`MatrixDistances` reads it memory-mapped. Above it no n x n array
exists: :class:`OnDemandDistances` computes the columns for the requested
(exemplar) tokens from the images and caches them while the exemplars stay put,
so memory is O(n x s).
"""
from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np

from signclust.data.corpus import Corpus
from signclust.distances.metrics import prepare


class DistanceProvider:
    """d(i, j) for token ids; subclasses differ only in where image distances come from."""

    def __init__(self, image_index: np.ndarray):
        self.image_index = np.asarray(image_index, dtype=np.int64)

    @property
    def n_tokens(self) -> int:
        return len(self.image_index)

    def image_columns(self, image_ids: np.ndarray) -> np.ndarray:  # (m, len(image_ids)) float32
        raise NotImplementedError

    def columns(self, token_ids) -> np.ndarray:
        """(n_tokens, len(token_ids)) float32: distance of every token to each given token."""
        token_ids = np.asarray(token_ids, dtype=np.int64)
        cols = self.image_columns(self.image_index[token_ids])
        return cols[self.image_index]

    def pairs(self, a_ids, b_ids) -> np.ndarray:
        """(len(a), len(b)) distances between two small token sets."""
        a_ids = np.asarray(a_ids, dtype=np.int64)
        return self.columns(b_ids)[a_ids]


class MatrixDistances(DistanceProvider):
    def __init__(self, matrix: np.ndarray, image_index: np.ndarray):
        super().__init__(image_index)
        self.matrix = matrix

    def image_columns(self, image_ids):
        # the matrix is symmetric: reading rows is contiguous, columns are scattered (5-7x slower)
        return np.asarray(self.matrix[image_ids], dtype=np.float32).T


class OnDemandDistances(DistanceProvider):
    """Columns computed from the images when first asked for, kept in an LRU cache."""

    def __init__(self, images: np.ndarray, image_index: np.ndarray, cache_columns: int = 4096,
                 metric: str = "l1"):
        super().__init__(image_index)
        self.images = images
        self.rows, self.between = prepare(images, metric)      # what the metric compares, and how
        self.cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.cache_columns = cache_columns
        self.computed = 0            # columns computed so far (for tests and logs)

    def image_columns(self, image_ids):
        image_ids = np.asarray(image_ids, dtype=np.int64)
        if len(image_ids) == 0:
            return np.zeros((len(self.images), 0), np.float32)
        missing = [int(i) for i in dict.fromkeys(image_ids.tolist()) if int(i) not in self.cache]
        if missing:
            fresh = self.between(self.rows, self.rows[missing])
            self.computed += len(missing)
            for col, img in enumerate(missing):
                self.cache[img] = fresh[:, col].copy()
        for i in image_ids.tolist():
            self.cache.move_to_end(int(i))
        while len(self.cache) > max(self.cache_columns, len(image_ids)):
            self.cache.popitem(last=False)
        return np.stack([self.cache[int(i)] for i in image_ids], axis=1)


def open_distances(corpus: Corpus, folder: str | Path | None, cache_columns: int = 4096) -> DistanceProvider:
    """The precomputed matrix when the distance stage wrote one, else on-demand columns."""
    metric = "l1"
    if folder is not None:
        path = Path(folder) / "dist.npy"
        if path.exists():
            return MatrixDistances(np.load(path, mmap_mode="r"), corpus.image_index())
        if (Path(folder) / "meta.json").exists():
            metric = read_meta(folder).get("metric", "l1")        # written only when not l1
    return OnDemandDistances(corpus.images, corpus.image_index(), cache_columns, metric)


def load_knn(folder: str | Path) -> tuple[np.ndarray, np.ndarray] | None:
    path = Path(folder) / "knn.npz"
    if not path.exists():
        return None
    z = np.load(path)
    return z["indices"], z["distances"]


def read_meta(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "meta.json").read_text())
