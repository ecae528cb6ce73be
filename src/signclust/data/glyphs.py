"""Glyph normalisation: the sign's shape without the hand's ink, position and size."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def _ink_square(img: np.ndarray, threshold: float, min_blob: int) -> np.ndarray | None:
    """One uint8 image, ink bright -> float32 (m, m): the ink binarised at ``threshold``, blobs
    smaller than ``min_blob`` px dropped (speckle), cropped to its bounding box and centred in a
    square; None for an image without ink. The first step of both glyph representations."""
    from scipy.ndimage import label as blobs
    b = np.asarray(img, dtype=np.float32) / 255.0 > threshold
    if min_blob > 1 and b.any():
        lab, _ = blobs(b)
        sizes = np.bincount(lab.ravel())
        keep = sizes >= min_blob
        keep[0] = False
        b = keep[lab] if keep.any() else b
    rows, cols = np.flatnonzero(b.any(1)), np.flatnonzero(b.any(0))
    if len(rows) == 0:
        return None
    crop = b[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].astype(np.float32)
    h, w = crop.shape
    m = max(h, w)
    square = np.zeros((m, m), dtype=np.float32)
    square[(m - h) // 2:(m - h) // 2 + h, (m - w) // 2:(m - w) // 2 + w] = crop
    return square


def normalize_glyphs(images: np.ndarray, threshold: float = 0.3, size: int = 32, blur: float = 1.0,
                     min_blob: int = 6) -> np.ndarray:
    """uint8 (m, H, W), ink bright -> uint8 (m, size, size): the sign's shape without the hand's ink.

    Binarise at ``threshold`` (ink intensity and paper noise differ between hands), drop
    connected blobs smaller than ``min_blob`` px (speckle), crop to the bounding box, pad to a
    square (aspect kept), resize to ``size`` px with a 2 px margin and blur by ``blur`` px.
    What remains is shape: position, size and ink of a token say nothing about its type.
    """
    from scipy.ndimage import gaussian_filter
    pad = 2
    inner = size - 2 * pad
    out = np.zeros((len(images), size, size), dtype=np.float32)
    for i, img in enumerate(images):
        square = _ink_square(img, threshold, min_blob)
        if square is None:
            continue
        resized = F.interpolate(torch.from_numpy(square)[None, None], size=(inner, inner), mode="area")[0, 0]
        out[i, pad:pad + inner, pad:pad + inner] = resized.numpy()
    if blur > 0:
        out = np.stack([gaussian_filter(x, blur) for x in out])
    return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)


def skeleton_glyphs(images: np.ndarray, size: int = 32, work: int = 64, width: float = 2.5,
                    blur: float = 2.0, threshold: float = 0.3, min_blob: int = 6) -> np.ndarray:
    """uint8 (m, H, W), ink bright -> float32 (m, size, size): the sign's stroke skeleton.

    Binarise and despeckle as :func:`normalize_glyphs`, crop to the bounding box, pad to a
    square, resize to ``work`` px, thin to a one-pixel skeleton (scikit-image), redraw it with a
    Gaussian pen of ``width`` px and downsample to ``size`` px with a ``blur`` px blur (in
    ``work`` px). What remains is the path of the strokes, not their width: a bold gothic and a
    thin mincho kanji, or a broad and a fine pen, give nearly the same picture. Measured on two-
    typeface Japanese: the visual nearest neighbour of a glyph image is the other typeface's
    version of the same sign for 94% of images with skeletons, 78% with :func:`normalize_glyphs`.
    Blank images give zeros.
    """
    from scipy.ndimage import gaussian_filter
    from skimage.morphology import skeletonize
    out = np.zeros((len(images), size, size), dtype=np.float32)
    for i, img in enumerate(images):
        square = _ink_square(img, threshold, min_blob)
        if square is None:
            continue
        big = F.interpolate(torch.from_numpy(square)[None, None], size=(work, work), mode="bilinear",
                            align_corners=False)[0, 0].numpy() > 0.5
        pen = gaussian_filter(skeletonize(big).astype(np.float32), width)
        pen /= pen.max() + 1e-6
        small = F.interpolate(torch.from_numpy(pen)[None, None], size=(size, size), mode="area")[0, 0].numpy()
        out[i] = gaussian_filter(small, blur * size / work)
    return out
