"""A writer's slant: measured from an image's second moments and undone by a shear.

One writer leans every sign alike, and the lean is what handwriting recognisers remove first
(slant correction). ``models/lm_clusterer.py`` measures each token's slant, takes the median over
each text (one hand) and shears the text's tokens upright by it (``text_deslant``).
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

CHUNK = 4096        # images per block of the moment sums (float64 copies of one block at a time)


def moment_slants(images: np.ndarray) -> np.ndarray:
    """uint8 (m, H, W), ink bright -> float64 (m,): each image's slant from the second moments of
    its grey levels, mu11 / mu02: how far the ink shifts right per pixel down (negative for a
    sign leaning right, as italic type does). The slant estimate of handwriting recognisers
    (Bozinovic & Srihari 1989). An image without ink gives 0."""
    m, h, w = images.shape
    ys = np.arange(h, dtype=np.float64)
    xs = np.arange(w, dtype=np.float64)
    out = np.zeros(m)
    for lo in range(0, m, CHUNK):          # float64 copies of one block at a time
        ink = np.asarray(images[lo:lo + CHUNK], dtype=np.float64)
        mass = ink.sum((1, 2))
        safe = np.maximum(mass, 1e-12)
        rows, cols = ink.sum(2), ink.sum(1)                                  # (b, H), (b, W)
        cy, cx = rows @ ys / safe, cols @ xs / safe
        mu02 = rows @ ys**2 / safe - cy**2
        mu11 = np.einsum("bij,i,j->b", ink, ys, xs) / safe - cy * cx
        out[lo:lo + CHUNK] = np.where((mass > 0) & (mu02 > 1e-12), mu11 / np.maximum(mu02, 1e-12), 0.0)
    return out


def shear_glyphs(images: np.ndarray, shear: np.ndarray) -> np.ndarray:
    """uint8 (m, H, W), ink bright -> uint8 (m, H, W): image i sheared horizontally by shear[i],
    each row moved left by shear[i] x its distance below the ink's centroid (a sign of slant s
    comes out upright at shear s, see :func:`moment_slants`), then cropped to the ink and centred
    as an imported image is (``import_corpus.normalise_image``). shear 0 returns the image
    as it is."""
    from PIL import Image

    from signclust.data.import_corpus import normalise_image
    m, h, w = images.shape
    if h != w:
        raise ValueError(f"shear_glyphs: images must be square (corpus images are), not {h}x{w}")
    out = np.array(images, dtype=np.uint8, copy=True)
    pad = max(h, w) // 2
    rows = np.asarray(images).sum(axis=2, dtype=np.float64)                  # (m, H)
    cy = rows @ np.arange(h) / np.maximum(rows.sum(1), 1e-12)               # the ink's centroid row
    for i in np.flatnonzero(np.asarray(shear) != 0):
        big = np.zeros((h + 2 * pad, w + 2 * pad), dtype=np.float32)
        big[pad:pad + h, pad:pad + w] = images[i]
        s = float(shear[i])
        # output (y, x) reads input (y, x + s (y - cy)): the shift grows with the distance below the centroid
        moved = ndimage.affine_transform(big, np.array([[1.0, 0.0], [s, 1.0]]),
                                         offset=np.array([0.0, -s * (cy[i] + pad)]), order=1)
        out[i] = normalise_image(Image.fromarray(np.clip(moved, 0, 255).astype(np.uint8)), h)
    return out
