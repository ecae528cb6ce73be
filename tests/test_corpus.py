"""The corpus format: construction, dedupe, validation, atomic storage, views."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from signclust.data.corpus import TOKEN_COLUMNS, Corpus, dedupe_images
from signclust.errors import UserError


def naive_dedupe(images):
    """Reference: first-seen unique images and each input's index into them."""
    seen, uniq, index = {}, [], []
    for img in images:
        key = img.tobytes()
        if key not in seen:
            seen[key] = len(uniq)
            uniq.append(img)
        index.append(seen[key])
    return np.stack(uniq), np.array(index)


def manual_corpus(rows, images):
    """A Corpus from explicit (text_id, position, image_index, label) rows."""
    tokens = pd.DataFrame(rows, columns=["text_id", "position", "image_index", "label"])
    tokens.insert(0, "token_id", np.arange(len(tokens)))
    tokens["line"] = 0
    tokens["hand"] = ""
    return Corpus(tokens[TOKEN_COLUMNS], images, {})


# -- construction and round trip ---------------------------------------------------------------

def test_from_arrays_positions_and_counts(tiny_corpus):
    c = tiny_corpus(n_types=3, per_type=5, n_texts=2, duplicates=2)
    t = c.tokens
    assert list(t.columns) == TOKEN_COLUMNS
    assert np.array_equal(t["token_id"], np.arange(17))
    # positions count 0.. within each text in row order
    for _, g in t.groupby("text_id"):
        assert g["position"].tolist() == list(range(len(g)))
    assert c.counts() == {"texts": 2, "tokens": 17, "types": 3, "images": 15}
    assert c.meta["images"] == 15 and c.meta["tokens"] == 17
    assert c.has_labels
    # token images are exactly the input images, in order
    assert c.token_images().shape == (17, 32, 32)


def test_from_arrays_defaults_one_text_per_token_and_no_labels():
    imgs = np.random.default_rng(1).integers(0, 256, (5, 8, 8), dtype=np.uint8)
    c = Corpus.from_arrays(imgs)
    assert c.counts() == {"texts": 5, "tokens": 5, "types": 0, "images": 5}
    assert (c.tokens["position"] == 0).all()
    assert not c.has_labels
    with pytest.raises(UserError, match="no gold labels"):
        c.labels()
    assert np.array_equal(c.token_images(), imgs)


def test_save_load_roundtrip_exact(tiny_corpus, tmp_path):
    c = tiny_corpus(duplicates=3)
    c.meta["extra"] = {"nested": [1, 2]}
    c.save(tmp_path / "c")
    d = Corpus.load(tmp_path / "c")
    pd.testing.assert_frame_equal(d.tokens[TOKEN_COLUMNS], c.tokens[TOKEN_COLUMNS], check_dtype=False)
    assert d.images.dtype == np.uint8
    assert np.array_equal(d.images, c.images)
    assert np.array_equal(d.token_images(), c.token_images())
    assert d.meta["extra"] == {"nested": [1, 2]}
    assert d.meta["image_size"] == [32, 32]
    assert d.meta["images"] == len(c.images) and d.meta["tokens"] == c.n_tokens
    assert np.array_equal(d.labels(), c.labels())
    # memory-mapped load gives the same data
    e = Corpus.load(tmp_path / "c", mmap=True)
    assert isinstance(e.images, np.memmap)
    assert np.array_equal(np.asarray(e.images), c.images)


def test_roundtrip_keeps_strings_as_written(tmp_path):
    """Text ids with leading zeros and labels like 'NA' / 'nan' (real Cypriot syllables) stay strings."""
    imgs = np.random.default_rng(2).integers(0, 256, (4, 6, 6), dtype=np.uint8)
    c = Corpus.from_arrays(imgs, labels=["NA", "nan", "NULL", "10"], text_ids=["007", "007", "7", "7"],
                           hands=["", "", "h", "h"])
    c.save(tmp_path / "c")
    d = Corpus.load(tmp_path / "c")
    assert d.tokens["label"].tolist() == ["NA", "nan", "NULL", "10"]
    assert d.tokens["text_id"].tolist() == ["007", "007", "7", "7"]
    assert d.tokens["hand"].tolist() == ["", "", "h", "h"]
    assert d.counts()["texts"] == 2 and d.counts()["types"] == 4


def test_load_missing_file_is_user_error(tiny, tmp_path):
    tiny.save(tmp_path / "c")
    (tmp_path / "c" / "images.npy").unlink()
    with pytest.raises(UserError, match=r"not a corpus folder: images.npy is missing"):
        Corpus.load(tmp_path / "c")
    # a misspelt corpus names the corpora that exist beside it (issue 13)
    with pytest.raises(UserError, match=r"no corpus 'cc' .*did you mean 'c'\? Corpora in .*: c\."):
        Corpus.load(tmp_path / "cc")


# -- dedupe ----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dedupe_matches_naive_reference(seed):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (7, 5, 4), dtype=np.uint8)
    base[3] = 0
    base[4] = 255
    pick = rng.integers(0, 7, size=40)
    images = base[pick]
    uniq, index = dedupe_images(images)
    ref_uniq, ref_index = naive_dedupe(images)
    assert np.array_equal(uniq, ref_uniq)
    assert np.array_equal(index, ref_index)
    assert np.array_equal(uniq[index], images)
    assert index[0] == 0 and uniq.dtype == np.uint8


def test_dedupe_distinguishes_images_differing_in_one_pixel():
    a = np.zeros((3, 4, 4), np.uint8)
    a[1, 3, 3] = 1
    a[2, 0, 0] = 1
    uniq, index = dedupe_images(a)
    assert len(uniq) == 3 and index.tolist() == [0, 1, 2]


def test_from_arrays_stores_identical_images_once():
    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, (3, 8, 8), dtype=np.uint8)
    imgs = base[[2, 0, 2, 1, 0, 2]]
    c = Corpus.from_arrays(imgs, text_ids=[0] * 6)
    assert len(c.images) == 3
    assert c.tokens["image_index"].tolist() == [0, 1, 0, 2, 1, 0]
    assert np.array_equal(c.images, base[[2, 0, 1]])
    assert np.array_equal(c.token_images(), imgs)
    nodup = Corpus.from_arrays(imgs, text_ids=[0] * 6, dedupe=False)
    assert len(nodup.images) == 6 and nodup.tokens["image_index"].tolist() == list(range(6))


# -- validation ------------------------------------------------------------------------------

def test_validate_accepts_good_corpus(tiny):
    tiny.validate()


def test_validate_duplicate_text_position():
    imgs = np.zeros((2, 4, 4), np.uint8)
    imgs[1] = 9
    c = manual_corpus([("a", 0, 0, "x"), ("a", 1, 1, "y"), ("a", 1, 0, "x")], imgs)
    with pytest.raises(UserError, match=r"^duplicate \(text_id, position\) = \(a, 1\)$"):
        c.validate()


@pytest.mark.parametrize("bad", [-1, 2, 5])
def test_validate_image_index_out_of_range(bad):
    imgs = np.zeros((2, 4, 4), np.uint8)
    c = manual_corpus([("a", 0, 0, "x"), ("a", 1, bad, "y")], imgs)
    with pytest.raises(UserError, match=r"^image_index out of range 0\.\.1$"):
        c.validate()


@pytest.mark.parametrize("images", [np.zeros((2, 4, 4), np.float32), np.zeros((2, 4, 4), np.int64),
                                    np.zeros((2, 16), np.uint8)])
def test_validate_wrong_images_dtype_or_shape(images):
    c = manual_corpus([("a", 0, 0, "x"), ("a", 1, 1, "y")], images)
    with pytest.raises(UserError, match=r"^images must be uint8 \(m, H, W\); got "):
        c.validate()


def test_validate_missing_column_empty_and_token_ids():
    imgs = np.zeros((1, 4, 4), np.uint8)
    c = manual_corpus([("a", 0, 0, "x")], imgs)
    c.tokens = c.tokens.drop(columns=["hand", "line"])
    with pytest.raises(UserError, match=r"lacks column\(s\): line, hand"):
        c.validate()
    empty = manual_corpus([], imgs)
    with pytest.raises(UserError, match="no tokens"):
        empty.validate()
    c = manual_corpus([("a", 0, 0, "x"), ("a", 1, 0, "x")], imgs)
    c.tokens["token_id"] = [1, 0]
    with pytest.raises(UserError, match="token_id must run 0..n-1"):
        c.validate()


def test_save_refuses_invalid_corpus_and_writes_nothing(tmp_path):
    imgs = np.zeros((1, 4, 4), np.uint8)
    c = manual_corpus([("a", 0, 0, "x"), ("a", 0, 0, "x")], imgs)
    with pytest.raises(UserError, match="duplicate"):
        c.save(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


# -- atomic save -----------------------------------------------------------------------------

def test_save_failing_midway_leaves_no_folder(tiny, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError("disk full (simulated)")
    monkeypatch.setattr(np, "save", boom)
    with pytest.raises(OSError, match="simulated"):
        tiny.save(tmp_path / "c")
    assert list(tmp_path.iterdir()) == []            # neither the folder nor a temporary one


def test_save_failing_midway_keeps_previous_version(tiny_corpus, tmp_path, monkeypatch):
    old = tiny_corpus(per_type=3, seed=1)
    old.save(tmp_path / "c")
    before = {p.name: p.read_bytes() for p in (tmp_path / "c").iterdir()}
    new = tiny_corpus(per_type=5, seed=2)
    monkeypatch.setattr(np, "save", lambda *a, **k: (_ for _ in ()).throw(OSError("simulated")))
    with pytest.raises(OSError):
        new.save(tmp_path / "c")
    assert [p.name for p in tmp_path.iterdir()] == ["c"]
    assert {p.name: p.read_bytes() for p in (tmp_path / "c").iterdir()} == before
    monkeypatch.undo()
    new.save(tmp_path / "c")                          # overwriting works once the failure is gone
    assert Corpus.load(tmp_path / "c").n_tokens == new.n_tokens
    assert [p.name for p in tmp_path.iterdir()] == ["c"]
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["tokens"] == new.n_tokens


# -- views -----------------------------------------------------------------------------------

def test_texts_reading_order_from_shuffled_rows():
    rng = np.random.default_rng(4)
    imgs = rng.integers(0, 256, (1, 4, 4), dtype=np.uint8)
    rows = [("b", 2, 0, "x"), ("a", 1, 0, "x"), ("b", 0, 0, "x"), ("c", 0, 0, "x"),
            ("a", 0, 0, "x"), ("b", 1, 0, "x"), ("a", 10, 0, "x"), ("a", 2, 0, "x")]
    c = manual_corpus(rows, imgs)
    c.validate()
    texts = c.texts()
    # texts sorted by text_id; inside a text, tokens by numeric position (10 after 2)
    assert [t.tolist() for t in texts] == [[4, 1, 7, 6], [2, 5, 0], [3]]
    assert sorted(np.concatenate(texts).tolist()) == list(range(len(rows)))


def test_texts_partition_tiny(tiny):
    texts = tiny.texts()
    assert len(texts) == tiny.counts()["texts"]
    allids = np.concatenate(texts)
    assert sorted(allids.tolist()) == list(range(tiny.n_tokens))
    for ids in texts:
        sub = tiny.tokens.iloc[ids]
        assert sub["text_id"].nunique() == 1
        assert np.all(np.diff(sub["position"].to_numpy()) > 0)


def test_subset_renumbers_and_keeps_only_used_images(tiny_corpus):
    c = tiny_corpus(n_types=3, per_type=6, duplicates=4, seed=5)
    # choose tokens that include a shared image and skip others
    shared = c.tokens["image_index"].duplicated(keep=False).to_numpy()
    ids = np.concatenate([np.flatnonzero(shared)[:2], [0, 3, 7]])
    ids = np.unique(ids)[::-1]                       # reversed order is kept as given
    s = c.subset(ids)
    s.validate()
    assert s.n_tokens == len(ids)
    assert np.array_equal(s.tokens["token_id"], np.arange(len(ids)))
    assert np.array_equal(s.token_images(), c.token_images()[ids])
    assert s.tokens["label"].tolist() == c.tokens["label"].to_numpy()[ids].tolist()
    used = np.unique(c.image_index()[ids])
    assert len(s.images) == len(used)
    assert s.meta["tokens"] == len(ids) and s.meta["images"] == len(used)
    assert c.n_tokens == 22                            # the original is untouched


def test_load_with_missing_token_column_is_one_clear_error(tmp_path, run_cli):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "tokens.csv").write_text("token_id,text_id\n0,a\n")
    np.save(folder / "images.npy", np.zeros((1, 4, 4), np.uint8))
    (folder / "meta.json").write_text("{}")
    proc = run_cli("signclust.distances.stage", "x", "--corpus-dir", folder, "--out", tmp_path / "d")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: tokens table lacks column(s): line, position, image_index")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "d").exists()
