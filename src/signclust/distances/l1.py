"""Visual dissimilarity d(u, v) = mean |img_u - img_v| with intensities in [0, 1].

The kernel sums |a - b| over uint8 pixels exactly, in int32: written as
``acc += abs(int32(a[k]) - int32(b[k]))``, LLVM recognises a sum of absolute differences of bytes
and emits x86's ``psadbw``, which takes 32 (AVX2) or 64 (AVX-512) pixel pairs per instruction
with no widening of the inputs (on other CPUs the same loop is plain integer code, still exact).
That is why every value is cast to int32 explicitly: numba would otherwise type the arithmetic
as int64, which the pattern does not match (4 lanes per vector instead of 32). A sum stays below
2**31 for images of up to ``EXACT_I32_PIXELS`` pixels; larger images take the int64 kernel. Rows
run in parallel over all cores. Everything above it works in row chunks, so memory is
O(chunk x m) however large the corpus.
"""
from __future__ import annotations

import os

import numba
import numpy as np

# numba picks all cores by default; respect an explicit cap (CI, tests, shared machines)
if os.environ.get("SIGNCLUST_THREADS"):
    numba.set_num_threads(int(os.environ["SIGNCLUST_THREADS"]))

EXACT_I32_PIXELS = (2 ** 31 - 1) // 255     # 8,421,504 pixels (2902 x 2902): int32 sums stay exact


@numba.njit(parallel=True, cache=True, fastmath=True)
def _l1_sums_sad(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    n, m, dim = a.shape[0], b.shape[0], a.shape[1]
    for i in numba.prange(n):
        ai = a[i]
        for j in range(m):
            bj = b[j]
            acc = np.int32(0)
            for k in range(dim):
                acc = np.int32(acc + np.int32(abs(np.int32(np.int32(ai[k]) - np.int32(bj[k])))))
            out[i, j] = acc


@numba.njit(parallel=True, cache=True, fastmath=False)
def _l1_sums_int(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
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


def as_rows(x: np.ndarray, dtype=np.uint8) -> np.ndarray:
    """(n, ...) images -> contiguous (n, pixels) rows."""
    return np.ascontiguousarray(x.reshape(len(x), int(np.prod(x.shape[1:]))), dtype=dtype)


def l1_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer sums of |a_i - b_j| for uint8 rows: (n, m) int64."""
    a, b = as_rows(a), as_rows(b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"image sizes differ: {a.shape[1]} vs {b.shape[1]} pixels")
    out = np.empty((len(a), len(b)), dtype=np.int64)
    if len(a) and len(b):
        if a.shape[1] <= EXACT_I32_PIXELS:
            _l1_sums_sad(a, b, out)
        else:
            _l1_sums_int(a, b, out)
    return out


def mean_l1(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """d(a_i, b_j) in [0, 1] as float32, (n, m)."""
    dim = int(np.prod(a.shape[1:]))
    return (l1_sums(a, b) / (255.0 * dim)).astype(np.float32)


def iter_row_blocks(images: np.ndarray, chunk: int, between=mean_l1):
    """Yield (start, stop, between(images[start:stop], images)) row blocks (default: mean_l1)."""
    for start in range(0, len(images), chunk):
        stop = min(start + chunk, len(images))
        yield start, stop, between(images[start:stop], images)


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
