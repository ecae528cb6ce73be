"""scripts/grey_glyphs_check.py: lm fitted with its glyphs binarised (as configured) and in grey levels."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from signclust.config import REPO_ROOT
from signclust.data.glyphs import normalize_glyphs
from signclust.models import lm_clusterer

sys.path.insert(0, str(REPO_ROOT / "scripts"))
spec = importlib.util.spec_from_file_location("grey_glyphs_check", REPO_ROOT / "scripts" / "grey_glyphs_check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def faint_images() -> np.ndarray:
    """Two 24 x 24 images whose strokes differ only in ink level: full and faint (above the threshold)."""
    img = np.zeros((2, 24, 24), dtype=np.uint8)
    img[:, 4:20, 10:13] = 255
    img[1, 4:20, 10:13] = 110
    return img


def test_the_swap_reaches_lm_glyph_blocks_and_is_undone_even_after_an_error():
    images = faint_images()
    with check.lm_glyphs("binary"):
        binary = lm_clusterer.glyph_blocks(images, skeleton=False)[0]
    assert np.array_equal(binary, normalize_glyphs(images).reshape(2, -1))
    assert np.array_equal(binary[0], binary[1])                   # binarised: the ink level is gone
    with check.lm_glyphs("grey"):
        grey = lm_clusterer.glyph_blocks(images, skeleton=False)[0]
    assert np.array_equal(grey, check.grey_uint8(images).reshape(2, -1))
    assert grey[1].max() < grey[0].max()                           # grey: the faint stroke stays faint
    with check.lm_glyphs("grey", saturate=0.4):                   # 110 / 255 >= 0.4: the faint stroke is full ink
        saturated = lm_clusterer.glyph_blocks(images, skeleton=False)[0]
    assert np.array_equal(saturated[0], saturated[1])
    assert np.array_equal(saturated, check.grey_uint8(images, saturate=0.4).reshape(2, -1))
    with pytest.raises(RuntimeError):
        with check.lm_glyphs("grey"):
            raise RuntimeError("a fit failed")
    assert lm_clusterer.normalize_glyphs is normalize_glyphs


def test_markdown_on_known_fits():
    table = {"digits": {"k_true": 10, "binary": [(0.80, 20, 60.0), (0.84, 22, 70.0)],
                        "grey": [(0.85, 18, 66.0), (0.85, 18, 68.0)]}}
    row = next(line for line in check.markdown(table, [0, 1], "float32").splitlines() if line.startswith("| digits"))
    assert row == "| digits | 10 | 0.820 ± 0.020 | 21 | 0.850 ± 0.000 | 18 | +0.030 | 65, 67 |"
    assert check.encoder_dtype() in ("float32", "bfloat16")
    assert "binarised at the ink threshold) and with" in check.markdown(table, [0, 1], "float32")
    assert "every level at or above 0.5 drawn as full ink (`--saturate`); nothing else changed" in \
        check.markdown(table, [0, 1], "float32", 0.5)
    assert "`), nothing else changed" in check.markdown(table, [0, 1], "float32")


def test_a_changed_study_needs_its_own_out_and_a_bad_corpus_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        check.main(["--seeds", "0", "1"])
    assert exit_.value.code == 2 and capsys.readouterr().err.strip().endswith("give it its own --out")
    with pytest.raises(SystemExit):
        check.main(["--corpora", "latin_hands@typo", "--out", "/tmp/never.md"])
    assert "the only tag is @unseen" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        check.main(["--saturate", "1.5", "--out", "/tmp/never.md"])
    assert capsys.readouterr().err.strip() == "error: --saturate 1.5: expected a grey level in (0, 1]"
    with pytest.raises(SystemExit):
        check.main(["--saturate", "0.5"])                           # another study: its own --out
    assert capsys.readouterr().err.strip().endswith("give it its own --out")
