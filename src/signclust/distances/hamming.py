"""The same mean |img_u - img_v| for binarised glyphs, by popcount on bit-packed images.

A binarised glyph (ink 1, background 0) differs from another exactly where the bits differ, so
its L1 sum is the Hamming distance: XOR of the two packed images, 64 pixels per word, then a
popcount: LLVM's ctpop, which is the CPU's POPCNT instruction where there is one and a short bit
trick elsewhere. A 32 x 32 glyph is 16 words instead of 1024 byte differences: the exact result at a
small fraction of the grey-level cost (``benchmarks/bench_distances.py`` prints the ratios).

    bits = pack_bits(binarised_glyphs(images))  # (n, words) uint64, ink >= threshold
    hamming_sums(bits, bits)                    # (n, n) int64 differing pixels
    mean_hamming(bits, bits, pixels)            # (n, n) float32 in [0, 1]

``binarised_glyphs`` is what the lm-family compares: the normalised glyph (ink, position and size
removed, data/glyphs.py) thresholded at half intensity.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from signclust.distances.l1 import as_rows


@intrinsic
def _popcount64(typingctx, x):
    """Number of set bits of a uint64 (llvm.ctpop)."""
    if x != types.uint64:
        return None
    return types.uint64(types.uint64), lambda context, builder, sig, args: builder.ctpop(args[0])


@numba.njit(parallel=True, cache=True)
def _hamming_sums(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    n, m, words = a.shape[0], b.shape[0], a.shape[1]
    for i in numba.prange(n):
        ai = a[i]
        for j in range(m):
            bj = b[j]
            acc = np.uint64(0)
            for w in range(words):
                acc += _popcount64(ai[w] ^ bj[w])
            out[i, j] = acc


def pack_bits(images: np.ndarray, threshold: int = 128) -> np.ndarray:
    """(n, ...) uint8 images -> (n, words) uint64: pixel >= threshold is a 1 bit, zero-padded
    to whole 64-bit words (padding bits are 0 in every image, so they never differ)."""
    bits = np.packbits(as_rows(images) >= threshold, axis=1)
    pad = (-bits.shape[1]) % 8
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits).view(np.uint64)


def hamming_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of differing bits between packed rows: (n, m) int64."""
    a, b = np.ascontiguousarray(a, dtype=np.uint64), np.ascontiguousarray(b, dtype=np.uint64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"packed rows differ: {a.shape} vs {b.shape} (use pack_bits on images of one size)")
    out = np.empty((len(a), len(b)), dtype=np.int64)
    if len(a) and len(b):
        _hamming_sums(a, b, out)
    return out


def mean_hamming(a: np.ndarray, b: np.ndarray, pixels: int) -> np.ndarray:
    """Share of differing pixels, float32 (n, m) in [0, 1]: mean |a - b| of the 0/1 images."""
    return (hamming_sums(a, b) / float(pixels)).astype(np.float32)


def binarised_glyphs(images: np.ndarray) -> np.ndarray:
    """The normalised glyphs (data/glyphs.py) as 0/255 uint8 images: ink at half intensity or more."""
    from signclust.data.glyphs import normalize_glyphs
    return np.where(normalize_glyphs(images) >= 128, 255, 0).astype(np.uint8)
