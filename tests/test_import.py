"""Bring-your-own-corpus importer: real image files in, the corpus format out; bad input -> one clear error."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from signclust.data.corpus import Corpus
from signclust.data.import_corpus import import_corpus, main, normalise_image

SIZE = 48
CENTRE = (SIZE - 1) / 2


# -- helpers -----------------------------------------------------------------------------------

def write_manifest(path: Path, rows, header=("text_id", "position", "image", "label", "hand")) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        if header:
            w.writerow(header)
        w.writerows(rows)
    return path


def ink_box(img: np.ndarray, thr: int = 64):
    ys, xs = np.nonzero(img > thr)
    return ys.min(), ys.max(), xs.min(), xs.max()


def ink_centre(img: np.ndarray):
    w = img.astype(np.float64)
    yy, xx = np.mgrid[0:img.shape[0], 0:img.shape[1]]
    return (w * yy).sum() / w.sum(), (w * xx).sum() / w.sum()


def assert_normalised(img: np.ndarray, thr: int = 64):
    """Background 0 along the border, bright ink, ink centred."""
    assert img.dtype == np.uint8 and img.shape == (SIZE, SIZE)
    border = np.concatenate([img[0], img[-1], img[:, 0], img[:, -1]])
    assert border.max() <= 8, f"background not dark: border max {border.max()}"
    assert img.max() >= 200, f"ink not bright: max {img.max()}"
    y0, y1, x0, x1 = ink_box(img, thr)
    assert abs((y0 + y1) / 2 - CENTRE) <= 1.5 and abs((x0 + x1) / 2 - CENTRE) <= 1.5, (y0, y1, x0, x1)


@pytest.fixture
def image_folder(tmp_path):
    """A folder of real image files in several sizes, modes and formats; returns (folder, names)."""
    d = tmp_path / "imgs"
    d.mkdir()
    # RGB, white paper, dark ink: a wide horizontal bar (80 x 16)
    im = Image.new("RGB", (120, 80), (250, 248, 240))
    ImageDraw.Draw(im).rectangle([20, 30, 99, 45], fill=(20, 15, 10))
    im.save(d / "wide_rgb.png")
    # L, dark background, bright ink: a tall column (10 x 60), JPEG-compressed
    im = Image.new("L", (50, 90), 12)
    ImageDraw.Draw(im).rectangle([20, 15, 29, 74], fill=235)
    im.save(d / "tall_dark.jpg", quality=90)
    # RGBA, transparent background, opaque dark-blue ink: a cross
    im = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    dr = ImageDraw.Draw(im)
    dr.line([8, 8, 55, 55], fill=(20, 20, 120, 255), width=6)
    dr.line([8, 55, 55, 8], fill=(20, 20, 120, 255), width=6)
    im.save(d / "cross_rgba.png")
    # palette GIF, white background, black ring, in a subfolder
    (d / "sub").mkdir()
    im = Image.new("L", (200, 150), 255)
    ImageDraw.Draw(im).ellipse([50, 25, 150, 125], outline=0, width=8)
    im.convert("P").save(d / "sub" / "ring.gif")
    # a tiny one and a byte-identical copy under another name (stored once)
    im = Image.new("L", (10, 6), 255)
    ImageDraw.Draw(im).rectangle([2, 1, 7, 4], fill=0)
    im.save(d / "small.png")
    (d / "small_copy.png").write_bytes((d / "small.png").read_bytes())
    return d


# -- images ------------------------------------------------------------------------------------

def test_import_normalises_all_modes(image_folder, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [
        ("t2", "1", "tall_dark.jpg", "col", "B"),
        ("t1", "0", "wide_rgb.png", "bar", "A"),
        ("t1", "1", "cross_rgba.png", "cross", "A"),
        ("t2", "0", "sub/ring.gif", "ring", "B"),
        ("t3", "0", "small.png", "bar", ""),
        ("t3", "1", "small_copy.png", "bar", ""),
    ])
    c = import_corpus(manifest, image_folder, size=SIZE)
    c.validate()
    t = c.tokens
    # sorted by text, then position; manifest values kept
    assert t["text_id"].tolist() == ["t1", "t1", "t2", "t2", "t3", "t3"]
    assert t["position"].tolist() == [0, 1, 0, 1, 0, 1]
    assert t["label"].tolist() == ["bar", "cross", "ring", "col", "bar", "bar"]
    assert t["hand"].tolist() == ["A", "A", "B", "B", "", ""]
    assert c.counts() == {"texts": 3, "tokens": 6, "types": 4, "images": 5}
    assert t["image_index"].iloc[4] == t["image_index"].iloc[5]
    imgs = c.token_images()
    for img in imgs:
        assert_normalised(img)
    # aspect kept: the wide bar stays wide, the column stays tall, the ring stays round
    y0, y1, x0, x1 = ink_box(imgs[0])
    assert (x1 - x0 + 1) >= 3.5 * (y1 - y0 + 1), "wide bar lost its aspect"
    assert 36 <= x1 - x0 + 1 <= 42
    y0, y1, x0, x1 = ink_box(imgs[3])
    assert (y1 - y0 + 1) >= 4 * (x1 - x0 + 1), "tall column lost its aspect"
    y0, y1, x0, x1 = ink_box(imgs[2])
    assert abs((y1 - y0) - (x1 - x0)) <= 1
    assert imgs[2][int(CENTRE), int(CENTRE)] < 20, "ring interior should be background"
    # the RGBA cross: ink on both diagonals, background off them
    cross = imgs[1]
    assert cross[12, 12] > 128 and cross[35, 35] > 128 and cross[12, 35] > 128 and cross[35, 12] > 128
    assert cross[int(CENTRE), 5] < 20 and cross[5, int(CENTRE)] < 20


def test_scale_fills_the_canvas_for_any_input_size(tmp_path):
    for w, h in [(12, 7), (400, 300), (33, 90)]:
        im = Image.new("L", (w, h), 255)
        ImageDraw.Draw(im).rectangle([w // 4, h // 4, 3 * w // 4, 3 * h // 4], fill=0)
        out = normalise_image(im, SIZE)
        assert_normalised(out)
        y0, y1, x0, x1 = ink_box(out, 128)
        assert max(y1 - y0, x1 - x0) + 1 in range(38, 42)       # longer side = size * (1 - 2 * 0.08)


def test_polarity_same_result_for_inverted_input():
    im = Image.new("L", (60, 60), 255)
    ImageDraw.Draw(im).polygon([(30, 5), (55, 55), (5, 55)], fill=0)
    a = normalise_image(im, SIZE)
    b = normalise_image(Image.eval(im, lambda v: 255 - v), SIZE)
    assert np.array_equal(a, b)
    assert_normalised(a)


def _letter_e(ink: int, paper: int, pad: int) -> Image.Image:
    """A sans-serif E (a stem and three bars: ink along three sides of its box, 38% of its area) on
    ``pad`` px of paper."""
    im = Image.new("L", (30 + 2 * pad, 40 + 2 * pad), paper)
    d = ImageDraw.Draw(im)
    for box in [(0, 0, 3, 39), (0, 0, 29, 3), (0, 18, 25, 21), (0, 36, 29, 39)]:
        d.rectangle([box[0] + pad, box[1] + pad, box[2] + pad, box[3] + pad], fill=ink)
    return im


@pytest.mark.parametrize("ink, paper", [(0, 255), (255, 0)])
def test_a_crop_cut_tight_to_the_ink_keeps_its_polarity(ink, paper):
    """Cut to the ink's box, an E has ink on most of its border (the old rule, the border's majority
    tone, took the ink for the background and returned the sign inverted): the same glyph as with a
    margin of paper."""
    with_margin = normalise_image(_letter_e(ink, paper, pad=10), SIZE)
    tight = normalise_image(_letter_e(ink, paper, pad=0), SIZE)
    assert_normalised(with_margin)
    assert np.array_equal(tight, with_margin)
    assert tight[14, 30] < 20 and tight[23, 30] > 200      # between the bars background, the middle bar ink


def test_a_margin_of_one_tone_decides_even_for_a_sign_of_mostly_ink():
    """A heavy sign (ink over 70% of the image) with a margin of paper: the border is one tone and
    decides, whatever most pixels are."""
    im = Image.new("L", (50, 50), 255)
    ImageDraw.Draw(im).rectangle([3, 3, 46, 46], fill=0)
    ImageDraw.Draw(im).rectangle([20, 20, 28, 28], fill=255)          # a small counter
    out = normalise_image(im, SIZE)
    assert_normalised(out)
    assert out[int(CENTRE), int(CENTRE)] < 20 and out[10, 10] > 200    # the counter dark, the ink bright


def test_sixteen_bit_grayscale(tmp_path):
    arr = np.full((60, 90), 60000, np.uint16)         # white paper
    arr[25:35, 10:80] = 4000                          # dark ink: a wide bar
    im = Image.fromarray(arr)
    assert im.mode == "I;16"
    im.save(tmp_path / "scan16.png")
    with Image.open(tmp_path / "scan16.png") as reread:
        out = normalise_image(reread, SIZE)
    assert_normalised(out)
    y0, y1, x0, x1 = ink_box(out)
    assert (x1 - x0 + 1) >= 4 * (y1 - y0 + 1)


def test_cli_success_writes_loadable_corpus(image_folder, tmp_path, run_cli):
    manifest = write_manifest(tmp_path / "m.csv", [("a", "0", "wide_rgb.png", "bar", ""),
                                                   ("a", "1", "sub/ring.gif", "ring", "")])
    out = tmp_path / "out" / "mine"
    r = run_cli("signclust.data.import_corpus", manifest, image_folder, out, "--size", 32, "--name", "mine")
    assert r.returncode == 0, r.stderr
    assert "imported 2 tokens in 1 texts" in r.stdout
    c = Corpus.load(out)
    assert c.image_size == (32, 32) and c.meta["name"] == "mine"
    assert c.meta["import"]["image_size"] == 32


# -- bad input: one line, exit 2, nothing written ----------------------------------------------

def _bad_cases(tmp_path: Path, folder: Path):
    """name -> (manifest path, expected message fragment)."""
    (folder / "notes.png").write_text("this is not an image\n")
    Image.new("L", (8, 8), 0).save(tmp_path / "outside.png")
    ok = ("t", "0", "wide_rgb.png", "", "")
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "empty.csv").write_bytes(b"")
    cases = {
        "missing_image": (write_manifest(m / "missing.csv", [ok, ("t", "1", "nope.png", "", "")]),
                          "manifest row 3: image 'nope.png' not found in"),
        "unreadable": (write_manifest(m / "unreadable.csv", [("t", "1", "notes.png", "", ""), ok]),
                       "manifest row 2: image 'notes.png' is unreadable"),
        "escape_relative": (write_manifest(m / "esc.csv", [ok, ("t", "1", "../outside.png", "", "")]),
                            "manifest row 3: image path '../outside.png' escapes the image folder"),
        "escape_absolute": (write_manifest(m / "abs.csv", [ok, ok[:1] + ("5", str(tmp_path / "outside.png"), "", "")]),
                            "manifest row 3: image path '/"),
        "duplicate": (write_manifest(m / "dup.csv", [ok, ("t", "1", "sub/ring.gif", "", ""), ("t", "0", "small.png", "", "")]),
                      "manifest row 4: duplicate (text_id, position) = (t, 0)"),
        "duplicate_spelling": (write_manifest(m / "dup2.csv", [ok, ("t", "00", "small.png", "", "")]),
                               "manifest row 3: duplicate (text_id, position) = (t, 0)"),
        "empty_file": (m / "empty.csv", "is empty"),
        "header_only": (write_manifest(m / "header.csv", []), "has no rows"),
        "position_text": (write_manifest(m / "pos.csv", [ok, ("t", "abc", "small.png", "", "")]),
                          "manifest row 3: position 'abc' is not a whole number from 0 to 2147483647"),
        "position_fraction": (write_manifest(m / "pos2.csv", [("t", "1.5", "small.png", "", "")]),
                              "manifest row 2: position '1.5' is not a whole number"),
        "position_negative": (write_manifest(m / "pos3.csv", [("t", "-1", "small.png", "", "")]),
                              "manifest row 2: position '-1' is not a whole number"),
        "position_empty": (write_manifest(m / "pos4.csv", [ok, ("t", "", "small.png", "", "")]),
                           "manifest row 3: position '' is not a whole number"),
        "missing_column": (write_manifest(m / "cols.csv", [("t", "0", "x")], header=("text_id", "position", "file")),
                           "lacks column(s) image"),
        "empty_image_path": (write_manifest(m / "nopath.csv", [ok, ("t", "1", "", "", "")]),
                             "manifest row 3: empty image path"),
        "no_manifest": (m / "does_not_exist.csv", "manifest not found"),
    }
    return cases


BAD = ["missing_image", "unreadable", "escape_relative", "escape_absolute", "duplicate", "duplicate_spelling",
       "empty_file", "header_only", "position_text", "position_fraction", "position_negative", "position_empty",
       "missing_column", "empty_image_path", "no_manifest"]


@pytest.mark.parametrize("case", BAD)
def test_bad_input_one_error_exit_2_nothing_written(case, image_folder, tmp_path, capsys):
    manifest, expected = _bad_cases(tmp_path, image_folder)[case]
    out_parent = tmp_path / "corpora"
    with pytest.raises(SystemExit) as exc:
        main([str(manifest), str(image_folder), str(out_parent / "mine")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert expected in lines[0], lines[0]
    assert not out_parent.exists() or list(out_parent.iterdir()) == []


def test_symlink_escaping_folder_is_refused(image_folder, tmp_path):
    Image.new("L", (8, 8), 0).save(tmp_path / "secret.png")
    (image_folder / "link.png").symlink_to(tmp_path / "secret.png")
    manifest = write_manifest(tmp_path / "m.csv", [("t", "0", "link.png", "", "")])
    with pytest.raises(SystemExit):
        main([str(manifest), str(image_folder), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_missing_image_folder_and_bad_size(image_folder, tmp_path, capsys):
    manifest = write_manifest(tmp_path / "m.csv", [("t", "0", "wide_rgb.png", "", "")])
    for argv, expected in [([manifest, tmp_path / "nofolder", tmp_path / "o"], "image folder not found"),
                           ([manifest, image_folder, tmp_path / "o", "--size", "4"], "--size must be between")]:
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in argv])
        assert exc.value.code == 2
        assert capsys.readouterr().err.startswith(f"error: {expected}")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("case", ["missing_image", "unreadable", "escape_absolute", "empty_file", "missing_column"])
def test_bad_input_subprocess(case, image_folder, tmp_path, run_cli):
    manifest, expected = _bad_cases(tmp_path, image_folder)[case]
    out = tmp_path / "corpora" / "mine"
    r = run_cli("signclust.data.import_corpus", manifest, image_folder, out)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], r.stderr
    assert r.stdout == ""
    assert not (tmp_path / "corpora").exists()
