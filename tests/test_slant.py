"""The writer's slant (data/slant.py): measured by second moments, undone by a shear."""
from __future__ import annotations

import numpy as np
import pytest

from signclust.data import slant
from test_glyphs import glyph_zoo


def slanted_column(slant: float, size: int = 48) -> np.ndarray:
    """uint8 (size, size): a vertical bar whose rows move right by ``slant`` px per px down."""
    img = np.zeros((size, size), np.uint8)
    for y in range(8, size - 8):
        x = size / 2 + slant * (y - size / 2)
        img[y, int(round(x)) - 2:int(round(x)) + 3] = 255
    return img


def test_moment_slants_measure_how_far_the_ink_moves_per_row():
    images = np.stack([slanted_column(s) for s in (-0.4, 0.0, 0.25)] + [np.zeros((48, 48), np.uint8)])
    got = slant.moment_slants(images)
    np.testing.assert_allclose(got[:3], [-0.4, 0.0, 0.25], atol=0.02)
    assert got[3] == 0.0                                                    # no ink: no slant
    # a naive per-pixel reference: the same moments of one image, summed pixel by pixel
    img = glyph_zoo()[5].astype(np.float64)
    ys, xs = np.nonzero(img >= 0)
    w = img[ys, xs]
    cy, cx = (w * ys).sum() / w.sum(), (w * xs).sum() / w.sum()
    want = (w * (xs - cx) * (ys - cy)).sum() / (w * (ys - cy) ** 2).sum()
    assert slant.moment_slants(glyph_zoo()[5:6])[0] == pytest.approx(want, rel=1e-9)


def test_shear_glyphs_stands_a_slanted_sign_upright():
    leaning = np.stack([slanted_column(-0.4), slanted_column(0.3)])
    upright = slant.shear_glyphs(leaning, slant.moment_slants(leaning))
    assert upright.shape == leaning.shape and upright.dtype == np.uint8
    np.testing.assert_allclose(slant.moment_slants(upright), 0.0, atol=0.03)
    # sheared by half its slant, a sign keeps half of it
    half = slant.shear_glyphs(leaning[:1], np.array([-0.2]))
    assert slant.moment_slants(half)[0] == pytest.approx(-0.2, abs=0.03)
    # shear 0 leaves an image as it is, bit for bit
    zoo = glyph_zoo()[:, :36, :36]
    assert np.array_equal(slant.shear_glyphs(zoo, np.zeros(len(zoo))), zoo)
    with pytest.raises(ValueError, match="square"):
        slant.shear_glyphs(glyph_zoo()[:2], np.ones(2))
