"""Glyph representations (data/glyphs.py) against the plain per-image computation.

``normalize_glyphs`` and ``skeleton_glyphs`` work on blocks of images (one labelling of the blobs
of a whole block, one blur call, one resize per square side). The references below are the
per-image loops they replaced, kept verbatim: every fit that reads glyphs depends on these bytes.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.ndimage import gaussian_filter
from scipy.ndimage import label as blobs

from signclust.data import glyphs
from signclust.data.glyphs import normalize_glyphs, skeleton_glyphs
from conftest import SHAPES, draw_shape


def ink_square_reference(img, threshold, min_blob):
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


def normalize_reference(images, threshold=0.3, size=32, blur=1.0, min_blob=6):
    pad = 2
    inner = size - 2 * pad
    out = np.zeros((len(images), size, size), dtype=np.float32)
    for i, img in enumerate(images):
        square = ink_square_reference(img, threshold, min_blob)
        if square is None:
            continue
        resized = F.interpolate(torch.from_numpy(square)[None, None], size=(inner, inner), mode="area")[0, 0]
        out[i, pad:pad + inner, pad:pad + inner] = resized.numpy()
    if blur > 0:
        out = np.stack([gaussian_filter(x, blur) for x in out])
    return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)


def skeleton_reference(images, size=32, work=64, width=2.5, blur=2.0, threshold=0.3, min_blob=6):
    from skimage.morphology import skeletonize
    out = np.zeros((len(images), size, size), dtype=np.float32)
    for i, img in enumerate(images):
        square = ink_square_reference(img, threshold, min_blob)
        if square is None:
            continue
        big = F.interpolate(torch.from_numpy(square)[None, None], size=(work, work), mode="bilinear",
                            align_corners=False)[0, 0].numpy() > 0.5
        pen = gaussian_filter(skeletonize(big).astype(np.float32), width)
        pen /= pen.max() + 1e-6
        small = F.interpolate(torch.from_numpy(pen)[None, None], size=(size, size), mode="area")[0, 0].numpy()
        out[i] = gaussian_filter(small, blur * size / work)
    return out


def glyph_zoo(seed: int = 0) -> np.ndarray:
    """uint8 (m, 40, 36) images that reach every branch: shapes of every size and aspect at
    random places and ink levels, grey noise, speckle beside a sign, speckle alone (every blob
    small: all kept), blank and full images, ink at the borders, grey levels around the
    threshold (one exactly at 102 / 255), and pairs of neighbouring images with speckle at the same pixels (a labelling
    that joined blobs across images would keep them)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(60):
        img = np.zeros((40, 36), np.float64)
        side = int(rng.integers(6, 34))
        g = draw_shape(SHAPES[k % len(SHAPES)], side).astype(np.float64)
        h = int(rng.integers(3, side + 1)) if k % 3 == 0 else side       # squashed: aspect != 1
        g = np.asarray(F.interpolate(torch.from_numpy(g)[None, None], size=(h, side))[0, 0])
        y, x = int(rng.integers(0, 40 - h + 1)), int(rng.integers(0, 36 - side + 1))
        img[y:y + h, x:x + side] = g * rng.uniform(0.35, 1.0)
        img += rng.normal(0, rng.choice([0.0, 10.0, 40.0]), img.shape)
        for _ in range(int(rng.integers(0, 4))):                          # speckle of 1-5 px
            sy, sx = int(rng.integers(0, 39)), int(rng.integers(0, 35))
            img[sy:sy + int(rng.integers(1, 3)), sx:sx + int(rng.integers(1, 3))] = 255
        out.append(np.clip(np.rint(img), 0, 255).astype(np.uint8))
    blank = np.zeros((40, 36), np.uint8)
    speckle = blank.copy()
    speckle[[3, 20, 30], [4, 17, 33]] = 200
    same_pixels = blank.copy()
    same_pixels[10:12, 10:12] = 255                                        # 4 px in each of two images
    border = blank.copy()
    border[0, :] = 255
    border[:, 35] = 255
    levels = (60 + np.arange(40 * 36).reshape(40, 36) % 80).astype(np.uint8)  # grey 60..139
    full = np.full((40, 36), 255, np.uint8)
    out += [blank, speckle, same_pixels, same_pixels.copy(), border, levels, full, blank]
    return np.stack(out)


@pytest.mark.parametrize("kwargs", [{}, {"min_blob": 1}, {"blur": 0.0}, {"threshold": 0.5, "size": 24},
                                    {"threshold": 102 / 255}])
def test_normalize_glyphs_equals_the_per_image_computation(kwargs, monkeypatch):
    zoo = glyph_zoo()
    want = normalize_reference(zoo, **kwargs)
    assert np.array_equal(normalize_glyphs(zoo, **kwargs), want)
    monkeypatch.setattr(glyphs, "CHUNK", 7)                                # blocks that split the zoo
    assert np.array_equal(normalize_glyphs(zoo, **kwargs), want)
    as_float = normalize_glyphs(zoo.astype(np.float64), **kwargs)          # not uint8: no look-up table
    assert np.array_equal(as_float, want)


@pytest.mark.parametrize("kwargs", [{}, {"min_blob": 1}, {"size": 16, "work": 48}])
def test_skeleton_glyphs_equals_the_per_image_computation(kwargs, monkeypatch):
    zoo = glyph_zoo(1)
    want = skeleton_reference(zoo, **kwargs)
    got = skeleton_glyphs(zoo, **kwargs)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    monkeypatch.setattr(glyphs, "CHUNK", 5)
    assert np.array_equal(skeleton_glyphs(zoo, **kwargs), want)


def test_the_zoo_reaches_the_branches():
    """The zoo is only a good reference input if it exercises what the block code does
    differently: speckle dropped beside a sign, speckle kept when it is all there is, blank
    images, and more than one square side."""
    zoo = glyph_zoo()
    ink = zoo.astype(np.float32) / 255.0 > 0.3
    dropped = kept_alone = blank = 0
    sides = set()
    for img, b in zip(zoo, ink):
        lab, n = blobs(b)
        sizes = np.bincount(lab.ravel())[1:]
        dropped += int(n > 0 and (sizes >= 6).any() and (sizes < 6).any())
        kept_alone += int(n > 0 and (sizes < 6).all())
        blank += int(n == 0)
        sq = ink_square_reference(img, 0.3, 6)
        if sq is not None:
            sides.add(len(sq))
    assert dropped >= 10 and kept_alone >= 3 and blank >= 2 and len(sides) >= 15


def test_no_images_give_an_empty_block():
    empty = np.zeros((0, 40, 36), np.uint8)
    assert normalize_glyphs(empty).shape == (0, 32, 32)
    assert skeleton_glyphs(empty).shape == (0, 32, 32)
