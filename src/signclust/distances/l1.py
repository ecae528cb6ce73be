"""Visual dissimilarity d(u, v) = mean |img_u - img_v| with intensities in [0, 1].

The kernel sums |a - b| over uint8 pixels exactly. It widens to float32, not to integers: numba
types integer arithmetic as int64, which leaves 4 lanes per AVX2 vector, while float32 gives 8
(16 with AVX-512) and the compiler may reorder the sum (``fastmath``). Every partial sum is an
integer no larger than 255 x pixels, and float32 holds integers exactly up to 2**24, so for images
of up to ``EXACT_F32_PIXELS`` pixels the result equals the integer sum bit for bit whatever the
order; larger images take the int64 kernel. Each row of ``a`` is compared with four rows of ``b``
per pass, so one load of a pixel serves four differences. Rows run in parallel over all cores.
Everything above it works in row chunks, so memory is O(chunk x m) however large the corpus.
"""
from __future__ import annotations

import os

import numba
import numpy as np

# numba picks all cores by default; respect an explicit cap (CI, tests, shared machines)
if os.environ.get("SIGNCLUST_THREADS"):
    numba.set_num_threads(int(os.environ["SIGNCLUST_THREADS"]))

EXACT_F32_PIXELS = 2 ** 24 // 255      # 65793 pixels (256 x 256): float32 sums of |a - b| stay exact


@numba.njit(parallel=True, cache=True, fastmath=True)
def _l1_sums_f32(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    n, m, dim = a.shape[0], b.shape[0], a.shape[1]
    m4 = m - m % 4
    for i in numba.prange(n):
        ai = a[i]
        for j in range(0, m4, 4):
            b0, b1, b2, b3 = b[j], b[j + 1], b[j + 2], b[j + 3]
            s0 = s1 = s2 = s3 = np.float32(0)
            for k in range(dim):
                x = np.float32(ai[k])
                s0 += abs(x - np.float32(b0[k]))
                s1 += abs(x - np.float32(b1[k]))
                s2 += abs(x - np.float32(b2[k]))
                s3 += abs(x - np.float32(b3[k]))
            out[i, j], out[i, j + 1], out[i, j + 2], out[i, j + 3] = s0, s1, s2, s3
        for j in range(m4, m):
            bj = b[j]
            s = np.float32(0)
            for k in range(dim):
                s += abs(np.float32(ai[k]) - np.float32(bj[k]))
            out[i, j] = s


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
        if a.shape[1] <= EXACT_F32_PIXELS:
            _l1_sums_f32(a, b, out)
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
