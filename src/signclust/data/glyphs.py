"""Glyph normalisation: the sign's shape without the hand's ink, position and size."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def normalize_glyphs(images: np.ndarray, threshold: float = 0.3, size: int = 32, blur: float = 1.0,
                     min_blob: int = 6) -> np.ndarray:
    """uint8 (m, H, W), ink bright -> uint8 (m, size, size): the sign's shape without the hand's ink.

    Binarise at ``threshold`` (ink intensity and paper noise differ between hands), drop
    connected blobs smaller than ``min_blob`` px (speckle), crop to the bounding box, pad to a
    square (aspect kept), resize to ``size`` px with a 2 px margin and blur by ``blur`` px.
    What remains is shape: position, size and ink of a token say nothing about its type.
    """
    from scipy.ndimage import gaussian_filter
    from scipy.ndimage import label as blobs
    pad = 2
    inner = size - 2 * pad
    out = np.zeros((len(images), size, size), dtype=np.float32)
    for i, img in enumerate(images):
        b = np.asarray(img, dtype=np.float32) / 255.0 > threshold
        if min_blob > 1 and b.any():
            lab, _ = blobs(b)
            sizes = np.bincount(lab.ravel())
            keep = sizes >= min_blob
            keep[0] = False
            b = keep[lab] if keep.any() else b
        rows, cols = np.flatnonzero(b.any(1)), np.flatnonzero(b.any(0))
        if len(rows) == 0:
            continue
        crop = b[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].astype(np.float32)
        h, w = crop.shape
        m = max(h, w)
        square = np.zeros((m, m), dtype=np.float32)
        square[(m - h) // 2:(m - h) // 2 + h, (m - w) // 2:(m - w) // 2 + w] = crop
        resized = F.interpolate(torch.from_numpy(square)[None, None], size=(inner, inner), mode="area")[0, 0]
        out[i, pad:pad + inner, pad:pad + inner] = resized.numpy()
    if blur > 0:
        out = np.stack([gaussian_filter(x, blur) for x in out])
    return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)
