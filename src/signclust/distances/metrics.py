"""The image metrics the distance stage offers (``distances.metric``), behind one call.

    rows, between = prepare(images, "hamming_glyphs")
    between(rows[:10], rows)            # (10, m) float32 in [0, 1]

- ``l1``: mean |a - b| of the grey-level images as the corpus stores them (distances/l1.py).
- ``hamming_glyphs``: the same mean |a - b| of the binarised normalised glyphs (ink, position and
  size removed), computed exactly as a popcount of bit-packed images (distances/hamming.py).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from signclust.distances.hamming import binarised_glyphs, mean_hamming, pack_bits
from signclust.distances.l1 import mean_l1
from signclust.errors import UserError

METRICS = ("l1", "hamming_glyphs")


def prepare(images: np.ndarray, metric: str) -> tuple[np.ndarray, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """(rows, between): rows are what the metric compares (one per image, in order) and
    between(rows_a, rows_b) is their (len(a), len(b)) float32 distance in [0, 1]."""
    if metric == "l1":
        return images, mean_l1
    if metric == "hamming_glyphs":
        glyphs = binarised_glyphs(images)
        pixels = int(np.prod(glyphs.shape[1:]))
        return pack_bits(glyphs), lambda a, b: mean_hamming(a, b, pixels)
    raise UserError(f"distances.metric must be one of {', '.join(METRICS)}, not {metric!r}")
