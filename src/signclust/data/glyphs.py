"""Glyph normalisation: the sign's shape without the hand's ink, position and size.

Both representations work on blocks of images at once (binarise, despeckle, crop, resize and blur
as array operations; images grouped by the side of their ink's bounding square): a Python loop
per image took 15 s for 100 000 normalised glyphs. Each output equals the per-image computation
bit for bit (tests/test_glyphs.py keeps that computation as the reference).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage

CHUNK = 4096        # images per block: the labels of one block (int32, m x H x W) stay small


def _ink_masks(images: np.ndarray, threshold: float, min_blob: int) -> np.ndarray:
    """uint8 (m, H, W), ink bright -> bool (m, H, W): the ink binarised at ``threshold`` with
    blobs smaller than ``min_blob`` px dropped (speckle) -- unless that would drop every blob of
    an image, which then keeps them all."""
    if images.dtype == np.uint8:       # the same per-pixel test, looked up for the 256 grey levels
        b = (np.arange(256, dtype=np.float32) / 255.0 > threshold)[images]
    else:
        b = images.astype(np.float32) / 255.0 > threshold
    if min_blob > 1 and b.any():
        # 4-connected blobs within each image, never across images
        structure = np.zeros((3, 3, 3), dtype=bool)
        structure[1] = ndimage.generate_binary_structure(2, 1)
        lab = ndimage.label(b, structure)[0][b]             # the blob of every ink pixel
        keep = np.bincount(lab) >= min_blob
        keep[0] = False
        kept = np.zeros_like(b)
        kept[b] = keep[lab]
        b = np.where(kept.any(axis=(1, 2))[:, None, None], kept, b)
    return b


def _ink_squares(images: np.ndarray, threshold: float,
                 min_blob: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """uint8 (m, H, W) -> (indices, float32 (g, side, side)) per square side: each image's ink
    (:func:`_ink_masks`) cropped to its bounding box and centred in a square. Images without ink
    are in no group. The first step of both glyph representations."""
    b = _ink_masks(images, threshold, min_blob)
    rows, cols = b.any(2), b.any(1)                         # (m, H), (m, W)
    inked = rows.any(1)
    r0, c0 = rows.argmax(1), cols.argmax(1)
    h = rows.shape[1] - rows[:, ::-1].argmax(1) - r0
    w = cols.shape[1] - cols[:, ::-1].argmax(1) - c0
    side = np.maximum(h, w)
    for m in np.unique(side[inked]):
        idx = np.flatnonzero(inked & (side == m))
        squares = np.zeros((len(idx), m, m), dtype=np.float32)
        for j, i in enumerate(idx):
            top, left = (m - h[i]) // 2, (m - w[i]) // 2
            squares[j, top:top + h[i], left:left + w[i]] = b[i, r0[i]:r0[i] + h[i], c0[i]:c0[i] + w[i]]
        yield idx, squares


def _resize(squares: np.ndarray, side: int, mode: str) -> np.ndarray:
    """float32 (g, m, m) -> float32 (g, side, side) by torch's interpolation (area or bilinear)."""
    kw = {"align_corners": False} if mode == "bilinear" else {}
    return F.interpolate(torch.from_numpy(squares)[:, None], size=(side, side), mode=mode, **kw)[:, 0].numpy()


def _blur(stack: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur of each image of a float32 (m, H, W) stack, none across images."""
    return ndimage.gaussian_filter(stack, (0, sigma, sigma))


def _in_chunks(fn, images: np.ndarray, shape: tuple[int, int], dtype) -> np.ndarray:
    out = np.zeros((len(images), *shape), dtype=dtype)
    for lo in range(0, len(images), CHUNK):
        out[lo:lo + CHUNK] = fn(np.asarray(images[lo:lo + CHUNK]))
    return out


def normalize_glyphs(images: np.ndarray, threshold: float = 0.3, size: int = 32, blur: float = 1.0,
                     min_blob: int = 6) -> np.ndarray:
    """uint8 (m, H, W), ink bright -> uint8 (m, size, size): the sign's shape without the hand's ink.

    Binarise at ``threshold`` (ink intensity and paper noise differ between hands), drop
    connected blobs smaller than ``min_blob`` px (speckle), crop to the bounding box, pad to a
    square (aspect kept), resize to ``size`` px with a 2 px margin and blur by ``blur`` px.
    What remains is shape: position, size and ink of a token say nothing about its type.
    """
    pad = 2
    inner = size - 2 * pad

    def block(imgs: np.ndarray) -> np.ndarray:
        out = np.zeros((len(imgs), size, size), dtype=np.float32)
        for idx, squares in _ink_squares(imgs, threshold, min_blob):
            out[idx, pad:pad + inner, pad:pad + inner] = _resize(squares, inner, "area")
        if blur > 0:
            out = _blur(out, blur)
        return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)

    return _in_chunks(block, images, (size, size), np.uint8)


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
    from skimage.morphology import skeletonize

    def block(imgs: np.ndarray) -> np.ndarray:
        out = np.zeros((len(imgs), size, size), dtype=np.float32)
        for idx, squares in _ink_squares(imgs, threshold, min_blob):
            big = _resize(squares, work, "bilinear") > 0.5
            pen = _blur(np.stack([skeletonize(x) for x in big]).astype(np.float32), width)
            pen /= pen.max(axis=(1, 2), keepdims=True) + 1e-6
            out[idx] = _blur(_resize(pen, size, "area"), blur * size / work)
        return out

    return _in_chunks(block, images, (size, size), np.float32)
