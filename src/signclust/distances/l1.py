"""Visual dissimilarity d(u, v) = mean |img_u - img_v| with intensities in [0, 1].

The kernel sums |a - b| over uint8 pixels in integer arithmetic (exact; the
compiler turns the inner loop into packed absolute-difference instructions) and
runs rows in parallel over all cores. Everything above it works in row chunks,
so memory is O(chunk x m) however large the corpus.
"""
from __future__ import annotations

import os

import numba
import numpy as np

# numba picks all cores by default; respect an explicit cap (CI, tests, shared machines)
if os.environ.get("SIGNCLUST_THREADS"):
    numba.set_num_threads(int(os.environ["SIGNCLUST_THREADS"]))


@numba.njit(parallel=True, cache=True, fastmath=False)
def _l1_sums(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    n, m, dim = a.shape[0], b.shape[0], a.shape[1]
    for i in numba.prange(n):
        ai = a[i]
        for j in range(m):
            bj = b[j]
            acc = 0
            for k in range(dim):
                diff = np.int32(ai[k]) - np.int32(bj[k])
                acc += diff if diff >= 0 else -diff
            out[i, j] = acc


def l1_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer sums of |a_i - b_j| for uint8 rows: (n, m) int64."""
    a = np.ascontiguousarray(a.reshape(len(a), int(np.prod(a.shape[1:]))), dtype=np.uint8)
    b = np.ascontiguousarray(b.reshape(len(b), int(np.prod(b.shape[1:]))), dtype=np.uint8)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"image sizes differ: {a.shape[1]} vs {b.shape[1]} pixels")
    out = np.empty((len(a), len(b)), dtype=np.int64)
    if len(a) and len(b):
        _l1_sums(a, b, out)
    return out


def mean_l1(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """d(a_i, b_j) in [0, 1] as float32, (n, m)."""
    dim = int(np.prod(a.shape[1:]))
    return (l1_sums(a, b) / (255.0 * dim)).astype(np.float32)


def iter_row_blocks(images: np.ndarray, chunk: int):
    """Yield (start, stop, d(images[start:stop], images)) row blocks."""
    for start in range(0, len(images), chunk):
        stop = min(start + chunk, len(images))
        yield start, stop, mean_l1(images[start:stop], images)


def knn_from_block(block: np.ndarray, start: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k nearest other images for each row of a distance block (self excluded, ties by index)."""
    block = block.copy()
    rows = np.arange(len(block))
    block[rows, start + rows] = np.inf
    k = min(k, block.shape[1] - 1)
    if k <= 0:
        return np.zeros((len(block), 0), np.int64), np.zeros((len(block), 0), block.dtype)
    # keep everything below the k-th distance, then the lowest-index ties at it
    kth = np.partition(block, k - 1, axis=1)[:, k - 1:k]
    less, tie = block < kth, block == kth
    need = k - less.sum(1, keepdims=True)
    take = less | (tie & (np.cumsum(tie, 1) <= need))
    part = np.nonzero(take)[1].reshape(len(block), k)
    dist = np.take_along_axis(block, part, 1)
    # stable order: by distance, then by index, so results do not depend on argpartition internals
    order = np.lexsort((part, dist), axis=1)
    return np.take_along_axis(part, order, 1).astype(np.int64), np.take_along_axis(dist, order, 1)
