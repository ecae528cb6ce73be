"""scripts/glyph_normalisation_study.py: Ward at K true on each step of the glyph normalisation."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from signclust.config import REPO_ROOT, load_params
from signclust.data.corpus import Corpus
from signclust.data.glyphs import normalize_glyphs
from signclust.errors import UserError

sys.path.insert(0, str(REPO_ROOT / "scripts"))
spec = importlib.util.spec_from_file_location("glyph_normalisation_study",
                                              REPO_ROOT / "scripts" / "glyph_normalisation_study.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


def shapes(n_each: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Binary 40 x 40 images (0 / 255) of three shapes -- a bar, a cross, a box -- at random offsets
    and sizes; labels 0, 1, 2."""
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for k in range(3):
        for _ in range(n_each):
            img = np.zeros((40, 40), dtype=np.uint8)
            s = int(rng.integers(10, 20))
            r, c = (int(v) for v in rng.integers(2, 40 - s - 2, size=2))
            if k == 0:
                img[r:r + s, c + s // 2 - 1:c + s // 2 + 2] = 255
            elif k == 1:
                img[r:r + s, c + s // 2 - 1:c + s // 2 + 2] = 255
                img[r + s // 2 - 1:r + s // 2 + 2, c:c + s] = 255
            else:
                img[r:r + s, c:c + s] = 255
                img[r + 3:r + s - 3, c + 3:c + s - 3] = 0
            images.append(img)
            labels.append(k)
    return np.stack(images), np.array(labels)


def test_grey_equals_the_binary_glyph_on_a_binary_image():
    # an image of pure ink and paper has no grey levels to keep: the grey variant must be the glyph itself
    images, _ = shapes(4)
    grey = study.grey_glyphs(images)
    assert np.array_equal(np.clip(np.rint(grey * 255), 0, 255).astype(np.uint8), normalize_glyphs(images))


def test_grey_keeps_the_ink_level_the_glyph_throws_away():
    images, _ = shapes(1)
    faint = (images[:1] // 255 * 128).astype(np.uint8)          # ink at half strength, above the 0.3 threshold
    assert np.array_equal(normalize_glyphs(faint), normalize_glyphs(images[:1]))
    assert study.grey_glyphs(faint).max() == pytest.approx(study.grey_glyphs(images[:1]).max() * 128 / 255, rel=1e-5)


def test_saturated_grey_draws_half_strength_ink_as_full_and_keeps_fainter_levels():
    images, _ = shapes(1)
    full = images[:1]
    half = (full // 255 * 128).astype(np.uint8)                 # 0.502: at or above the saturation
    assert np.array_equal(study.grey_glyphs(half, saturate=0.5), study.grey_glyphs(full))
    ramp = full.copy()
    ramp[0, :, :20] = ramp[0, :, :20] // 255 * 100             # the shape's left part at 0.39 of full ink
    sat = study.grey_glyphs(ramp, saturate=0.5)
    plain = study.grey_glyphs(ramp)
    assert np.array_equal(study.grey_glyphs(full, saturate=0.5), study.grey_glyphs(full))   # full ink unchanged
    assert (sat >= plain - 1e-6).all() and (sat > plain + 1e-3).any()   # the faint part lifted (x 1/0.5), not cut


def test_uncropped_keeps_position_and_equals_the_glyph_when_the_ink_fills_the_frame():
    img = np.zeros((1, 40, 40), dtype=np.uint8)
    img[0, 5:15, 5:15] = 255
    moved = np.roll(img, 20, axis=2)
    assert np.array_equal(normalize_glyphs(img), normalize_glyphs(moved))                # the crop forgets where
    assert not np.allclose(study.uncropped_glyphs(img), study.uncropped_glyphs(moved))    # no crop: it is kept
    full = np.zeros((1, 40, 40), dtype=np.uint8)
    full[0, 0, :] = full[0, -1, :] = full[0, :, 0] = full[0, :, -1] = 255                # ink bounds the frame
    full[0, 10:30, 18:22] = 255
    assert np.array_equal(np.clip(np.rint(study.uncropped_glyphs(full) * 255), 0, 255).astype(np.uint8),
                          normalize_glyphs(full))


def test_every_variant_gives_one_row_per_image_and_ward_separates_clear_shapes():
    images, labels = shapes(6)
    corpus = Corpus.from_arrays(images, labels=labels, dedupe=False)
    for variant in study.VARIANTS:
        x = study.variant_images(corpus.images, variant, 0)
        assert x.shape[0] == len(corpus.images) and np.isfinite(x).all(), variant
    # three shapes whose sizes and offsets vary: the crop makes each shape one point cloud
    assert study.ward_v(study.variant_images(corpus.images, "glyphs", 0), corpus, False, 0) == pytest.approx(1.0)


def test_bad_names_are_one_line_errors(capsys):
    with pytest.raises(UserError, match="unknown variant"):
        study.variant_images(np.zeros((2, 8, 8), dtype=np.uint8), "sharpen", 0)
    params = load_params()
    with pytest.raises(UserError, match="the only tag is @unseen"):
        study.build("latin_hands@other", params)
    with pytest.raises(UserError, match="free or hands"):
        study.build("latin_handwriting@unseen", params)
    with pytest.raises(SystemExit) as exit_:
        study.main(["--corpora", "digits"])         # another study than the committed report, no --out
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().endswith("give it its own --out")


def test_markdown_bolds_the_best_and_shows_lm_blocks_under_pca_only():
    row = {v: {"raw": 0.5, "PCA": 0.6} for v in study.VARIANTS}
    row["lm_blocks"] = {"raw": None, "PCA": 0.7}
    row["pixels"]["raw"] = 0.8
    text = study.markdown({"digits": {"k_true": 10, **row}}, 0)
    raw = next(line for line in text.splitlines() if line.startswith("| digits (raw)"))
    pca = next(line for line in text.splitlines() if line.startswith("| digits (PCA)"))
    assert raw.split(" | ")[2] == "**0.800**" and raw.rstrip(" |").endswith("–")
    assert pca.rstrip(" |").endswith("**0.700**")
