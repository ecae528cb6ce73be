"""Issue 11: never delete a user's files, one clear error for bad input, no leftovers of a kill.

Each case of the bad-input tables ran into a traceback, a silent wrong result or a deleted file
before; now it ends in one ``error:`` line and exit status 2 with everything on disk untouched.
"""
from __future__ import annotations

import fcntl
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image, ImageDraw

from signclust import config
from signclust.config import REPO_ROOT
from signclust.data import import_corpus as imp
from signclust.data.corpus import Corpus
from signclust.io import atomic_dir, atomic_path, clean_stale

from conftest import one_error_line
from test_import import write_manifest


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` (or the file itself) with its bytes."""
    folder = Path(folder)
    if folder.is_file():
        return {folder.name: folder.read_bytes()}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def glyphs(tmp_path):
    """An image folder with two good glyphs and a manifest using them; returns (manifest, folder)."""
    d = tmp_path / "imgs"
    d.mkdir()
    for name, box in (("a.png", [10, 20, 50, 30]), ("b.png", [25, 5, 35, 55])):
        im = Image.new("L", (60, 60), 255)
        ImageDraw.Draw(im).rectangle(box, fill=0)
        im.save(d / name)
    manifest = write_manifest(tmp_path / "m.csv", [("t", "0", "a.png", "", ""), ("t", "1", "b.png", "", "")])
    return manifest, d


def run_import(*args):
    imp.main([str(a) for a in args])


# ----------------------------------------------------------------------------- the importer's OUT
OUT_CASES = {
    # name: (how OUT relates to the inputs, expected message)
    "out_is_image_folder": (lambda t, m, d: d, "is the image folder"),
    "out_contains_image_folder": (lambda t, m, d: t, "contains the image folder"),
    "out_inside_image_folder": (lambda t, m, d: d / "corpus", "is inside the image folder"),
    "out_is_manifest": (lambda t, m, d: m, "is the manifest"),
    "out_is_a_file": (lambda t, m, d: _file(t / "afile"), "exists and is not a folder"),
    "out_not_a_corpus": (lambda t, m, d: _folder_with(t / "mine", "notes.txt"), "is not empty and not a signclust corpus"),
    "out_corpus_without_force": (lambda t, m, d: _corpus(t / "old"), "already holds a corpus; pass --force"),
}


def _file(p: Path) -> Path:
    p.write_text("keep me")
    return p


def _folder_with(p: Path, name: str) -> Path:
    p.mkdir()
    (p / name).write_text("keep me")
    return p


def _corpus(p: Path) -> Path:
    Corpus.from_arrays(np.full((2, 8, 8), 7, np.uint8)).save(p)
    return p


@pytest.mark.parametrize("case", list(OUT_CASES))
def test_importer_never_replaces_what_is_not_a_corpus(case, glyphs, tmp_path, capsys):
    manifest, folder = glyphs
    make_out, expected = OUT_CASES[case]
    out = make_out(tmp_path, manifest, folder)
    before = {p: snapshot(p) for p in (tmp_path,)}
    with pytest.raises(SystemExit) as exc:
        run_import(manifest, folder, out)
    one_error_line(capsys, exc, expected)
    assert {p: snapshot(p) for p in (tmp_path,)} == before           # not a byte changed, no stray .old


def test_importer_out_dot_is_refused(glyphs, tmp_path, monkeypatch, capsys):
    manifest, folder = glyphs
    work = tmp_path / "work"
    _folder_with(work, "mine.txt")
    monkeypatch.chdir(work)
    for out in (".", str(work), str(tmp_path)):
        with pytest.raises(SystemExit) as exc:
            run_import(manifest, folder, out)
        one_error_line(capsys, exc, "output folder")
    assert snapshot(work) == {"mine.txt": b"keep me"}


def test_importer_replaces_a_corpus_only_with_force_atomically(glyphs, tmp_path, capsys):
    manifest, folder = glyphs
    out = _corpus(tmp_path / "old")
    run_import(manifest, folder, out, "--force")
    assert Corpus.load(out).n_tokens == 2
    assert sorted(os.listdir(tmp_path)) == ["imgs", "m.csv", "old"]    # no .old, no .tmp left


def _project(root: Path, name: str) -> dict:
    """A project at ``root`` with what the later stages made from data/corpora/<name> and from another
    corpus ``<name>_2`` (whose names end like the first's); returns relative path -> bytes of it all."""
    made = {f"data/distances/{name}/dist.npy": b"d", f"models/runs/lm/{name}/seed0/info.json": b"{}",
            f"models/runs/ward/{name}/seed0/info.json": b"{}", f"models/runs/.checkpoints/lm/{name}/seed0/c": b"c",
            f"reports/metrics/lm_{name}.json": b"m", f"reports/timings/lm_{name}.json": b"t",
            f"reports/inventory/lm_{name}.html": b"h", f"reports/inventory/lm_{name}.png": b"p",
            f"reports/ablation_{name}.md": b"a", f"reports/metrics/ablation_{name}.json": b"a",
            # another corpus's: kept
            f"data/distances/{name}_2/dist.npy": b"d", f"models/runs/lm/{name}_2/seed0/info.json": b"{}",
            f"reports/inventory/lm_{name}_2.html": b"h", f"reports/metrics/lm_x{name}.json": b"m"}
    for rel, data in made.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return made


def test_reimport_of_other_tokens_removes_what_was_made_from_the_old_corpus(glyphs, tmp_path, monkeypatch, capsys):
    manifest, folder = glyphs
    root = tmp_path / "project"
    monkeypatch.setattr(imp, "REPO_ROOT", root)
    out = root / "data" / "corpora" / "mine"
    run_import(manifest, folder, out)
    assert Corpus.load(out).meta["name"] == "mine"                    # OUT's folder name, not the manifest's
    made = _project(root, "mine")
    capsys.readouterr()
    run_import(manifest, folder, out, "--force")                     # the same tokens and images: nothing removed
    assert "removed" not in capsys.readouterr().out
    assert all((root / rel).exists() for rel in made)
    other = write_manifest(tmp_path / "other.csv", [("t", "0", "b.png", "", ""), ("t", "1", "a.png", "", "")])
    run_import(other, folder, out, "--force")
    printed = capsys.readouterr().out
    gone = [rel for rel in made if not (root / rel).exists()]
    assert sorted(gone) == sorted(rel for rel in made if "mine_2" not in rel and "xmine" not in rel)
    assert "removed what the later stages made from the corpus it replaced: data/distances/mine, " in printed
    assert "models/runs/lm/mine, " in printed and "reports/inventory/lm_mine.png" in printed
    assert sorted(Path(p).name for p in imp.derived_outputs(root, "mine")) == []
    # a corpus outside the project's data/corpora has no derived outputs there: they stay
    _project(root, "elsewhere")
    away = tmp_path / "elsewhere"
    run_import(manifest, folder, away)
    run_import(other, folder, away, "--force")
    assert (root / "models" / "runs" / "lm" / "elsewhere").is_dir()


def test_an_import_with_some_labels_says_the_stages_will_read_it_as_unlabelled(glyphs, tmp_path, capsys):
    manifest, folder = glyphs
    partly = write_manifest(tmp_path / "p.csv", [("t", "0", "a.png", "A", ""), ("t", "1", "b.png", "", "")])
    run_import(partly, folder, tmp_path / "p")
    out = capsys.readouterr().out
    assert ("note: 1 of 2 tokens have no label; the stages read a corpus as labelled only when every token is "
            "(evaluate refuses it; the inventory counts the labelled tokens alone)") in out
    run_import(manifest, folder, tmp_path / "none")                  # no label at all: nothing to note
    assert "note:" not in capsys.readouterr().out


def test_importer_unwritable_parent_and_os_errors_are_one_line(glyphs, tmp_path, monkeypatch, capsys):
    manifest, folder = glyphs
    import signclust.data.corpus as corpus_mod
    monkeypatch.setattr(corpus_mod.os, "access", lambda *a: False)
    with pytest.raises(SystemExit) as exc:
        run_import(manifest, folder, tmp_path / "ro" / "mine")
    one_error_line(capsys, exc, "is not writable")
    monkeypatch.undo()

    def denied(self, folder):
        raise PermissionError(13, "Permission denied", str(folder))
    monkeypatch.setattr(Corpus, "save", denied)
    with pytest.raises(SystemExit) as exc:
        run_import(manifest, folder, tmp_path / "mine")
    one_error_line(capsys, exc, "Permission denied: ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_importer_read_only_parent_for_real(glyphs, tmp_path, capsys):
    manifest, folder = glyphs
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(SystemExit) as exc:
            run_import(manifest, folder, ro / "mine")
        one_error_line(capsys, exc, "is not writable")
    finally:
        ro.chmod(0o755)


# ----------------------------------------------------------------------------- the importer's input
def png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG that claims width x height (8-bit gray) with almost no data: decoding would fail or
    allocate width * height bytes; only the header may be read."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
                     + chunk(b"IEND", b""))
    return path


def _blank(path, size, value, mode="L"):
    Image.new(mode, size, value).save(path)
    return path


INPUT_CASES = {
    # name: (manifest rows from the folder, extra args, expected)
    "bomb_20000": (lambda d: [("t", "0", png_header_only(d / "bomb.png", 20000, 20000).name)], [],
                   "manifest row 2: image 'bomb.png' is 20000 x 20000 = 400000000 pixels, more than the limit"),
    "big_12000": (lambda d: [("t", "0", png_header_only(d / "big.png", 12000, 12000).name)], [],
                  "is 12000 x 12000 = 144000000 pixels"),
    "over_own_limit": (lambda d: [("t", "0", "a.png")], ["--max-pixels", "100"], "more than the limit of 100"),
    "blank_1x1": (lambda d: [("t", "0", "a.png"), ("t", "1", _blank(d / "one.png", (1, 1), 0).name)], [],
                  "manifest row 3: image 'one.png' is blank"),
    "blank_black": (lambda d: [("t", "0", _blank(d / "k.png", (40, 40), 0).name), ("t", "1", "a.png")], [],
                    "manifest row 2: image 'k.png' is blank"),
    "blank_white": (lambda d: [("t", "0", _blank(d / "w.png", (40, 40), 255).name)], [],
                    "manifest row 2: image 'w.png' is blank"),
    "blank_transparent": (lambda d: [("t", "0", _blank(d / "tr.png", (40, 40), (0, 0, 0, 0), "RGBA").name)], [],
                          "image 'tr.png' is blank"),
    "near_blank_speck": (lambda d: [("t", "0", _speck(d / "speck.png").name)], [],
                         "image 'speck.png' is near-blank (only 1 ink pixel of 40000)"),
    "several_blank": (lambda d: [("t", "0", _blank(d / "w.png", (9, 9), 255).name),
                                 ("t", "1", _blank(d / "k.png", (9, 9), 0).name)], [], "(and 1 more); pass --allow-blank"),
    "position_above_int64": (lambda d: [("t", "9223372036854775808", "a.png")], [],
                             "position '9223372036854775808' is not a whole number from 0 to 2147483647"),
    "position_above_int32": (lambda d: [("t", "3000000000", "a.png")], [], "position '3000000000' is not a whole number"),
    "manifest_is_a_folder": (None, [], "is not a file"),
}


def _speck(path):
    im = Image.new("L", (200, 200), 255)
    im.putpixel((100, 100), 0)
    im.save(path)
    return path


@pytest.mark.parametrize("case", list(INPUT_CASES))
def test_importer_bad_input_is_one_error(case, glyphs, tmp_path, capsys):
    _, folder = glyphs
    rows_of, extra, expected = INPUT_CASES[case]
    if rows_of is None:
        manifest = tmp_path / "a_folder.csv"
        manifest.mkdir()
    else:
        manifest = write_manifest(tmp_path / "bad.csv", [r + ("", "") for r in rows_of(folder)])
    with pytest.raises(SystemExit) as exc:
        run_import(manifest, folder, tmp_path / "out", *extra)
    one_error_line(capsys, exc, expected)
    assert not (tmp_path / "out").exists()


def test_allow_blank_imports_with_one_warning_per_image(glyphs, tmp_path, capsys):
    _, folder = glyphs
    manifest = write_manifest(tmp_path / "m2.csv", [("t", "0", "a.png", "", ""),
                                                    ("t", "1", _blank(folder / "w.png", (9, 9), 255).name, "", "")])
    run_import(manifest, folder, tmp_path / "out", "--allow-blank")
    err = capsys.readouterr().err
    assert err.count("warning: manifest row 3: image 'w.png' is blank") == 1
    assert Corpus.load(tmp_path / "out").n_tokens == 2


@pytest.mark.parametrize("ink", [(255, 255, 255), (250, 240, 40), (0, 0, 0), (30, 30, 140)])
def test_ink_on_a_transparent_background_survives_whatever_its_colour(ink):
    im = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    ImageDraw.Draw(im).line([8, 8, 55, 55], fill=ink + (255,), width=6)
    glyph, problem = imp.normalise_and_check(im, 48)
    reference = np.zeros((64, 64), np.uint8)
    ref_im = Image.fromarray(reference)
    ImageDraw.Draw(ref_im).line([8, 8, 55, 55], fill=255, width=6)
    expected = imp.normalise_image(ref_im, 48)
    assert problem is None
    assert glyph.max() >= 200 and glyph[0].max() == 0                    # bright ink, dark background
    assert np.abs(glyph.astype(int) - expected.astype(int)).mean() < 3   # the same glyph as ink on black


def test_position_limits_are_checked_when_a_corpus_is_loaded(tmp_path, capsys):
    from signclust.errors import UserError
    c = Corpus.from_arrays(np.arange(2 * 64, dtype=np.uint8).reshape(2, 8, 8))
    c.save(tmp_path / "c")
    t = (tmp_path / "c" / "tokens.csv").read_text().replace("\n0,0,0,0,", "\n0,0,0,9223372036854775807,", 1)
    (tmp_path / "c" / "tokens.csv").write_text(t)
    with pytest.raises(UserError, match="position must be a whole number from 0 to 2147483647"):
        Corpus.load(tmp_path / "c")


# ----------------------------------------------------------------------------- the other stages
@pytest.fixture
def params_file(tmp_path, monkeypatch):
    """write(params) -> path: the stages read it instead of params.yaml (as dvc exp run -S does)."""
    def write(params=None, text=None):
        path = tmp_path / "params.yaml"
        path.write_text(text if text is not None else yaml.safe_dump(params))
        monkeypatch.setattr(config, "PARAMS_FILE", path)
        return path
    return write


def real_params() -> dict:
    return config.load_params(REPO_ROOT / "params.yaml")


def _train(*args):
    from signclust.models.train import main
    main([str(a) for a in args])


@pytest.fixture
def small_corpus(tiny_corpus, saved_corpus):
    return saved_corpus(tiny_corpus(n_types=3, per_type=6, n_texts=3), "tiny")


TRAIN_CASES = {
    # name: (params.yaml change, train args, expected)
    "deepcluster_epochs_negative": (lambda p: p["models"]["deepcluster"].update(epochs=-5), ["deepcluster"],
                                    "deepcluster.epochs: -5 is not allowed (expected a whole number >= 1)"),
    "deepcluster_lr_string": (lambda p: p["models"]["deepcluster"].update(lr="fast"), ["deepcluster"],
                              "deepcluster.lr: 'fast' is not allowed (expected a number > 0)"),
    "lm_epochs_forty": (lambda p: p["runs"]["lm_v1"].update(params={"epochs": "forty"}), ["lm_v1"],
                        "lm_gradient.epochs: 'forty' is not allowed"),
    "lm_beta_zero": (lambda p: p["runs"]["lm"].update(params={"context_beta": 0}), ["lm"],
                     "lm.context_beta: 0 is not allowed"),
    "row_param_unknown": (lambda p: p["runs"]["ward"].update(params={"pca": 3}), ["ward"],
                          "ward: unknown parameter(s) pca"),
    "seeds_negative": (lambda p: None, ["kmeans", "--seeds", "-1"], "seeds must be whole numbers from 0 to"),
    "seeds_in_params": (lambda p: p["train"].update(seeds=[0, "one"]), ["kmeans"], "seeds must be whole numbers"),
    "device_bad": (lambda p: p["train"].update(device="tpu"), ["kmeans"], "train.device: 'tpu' is not allowed"),
}


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_train_bad_configuration_is_one_error(case, params_file, small_corpus, tmp_path, capsys):
    change, args, expected = TRAIN_CASES[case]
    params = real_params()
    change(params)
    params_file(params)
    with pytest.raises(SystemExit) as exc:
        _train(args[0], "tiny", "--corpus-dir", small_corpus, "--out", tmp_path / "runs", "--no-progress", *args[1:])
    one_error_line(capsys, exc, expected)
    assert not (tmp_path / "runs").exists()


def test_broken_yaml_is_one_error(params_file, small_corpus, tmp_path, capsys):
    params_file(text="train:\n  seeds: [0, 1\nruns: {}\n")
    with pytest.raises(SystemExit) as exc:
        _train("kmeans", "tiny", "--corpus-dir", small_corpus, "--out", tmp_path / "runs")
    one_error_line(capsys, exc, "is not valid YAML at line")
    params_file(text="- just\n- a list\n")
    with pytest.raises(SystemExit) as exc:
        _train("kmeans", "tiny", "--corpus-dir", small_corpus, "--out", tmp_path / "runs")
    one_error_line(capsys, exc, "must hold a mapping of sections")


def test_a_corpus_of_blank_images_is_one_error_not_a_scipy_traceback(saved_corpus, tmp_path, capsys):
    blank = saved_corpus(Corpus.from_arrays(np.zeros((12, 16, 16), np.uint8), text_ids=[i // 4 for i in range(12)]),
                         "blank")
    with pytest.raises(SystemExit) as exc:
        _train("lm", "blank", "--corpus-dir", blank, "--out", tmp_path / "runs", "--no-progress")
    one_error_line(capsys, exc, "has 1 distinct image(s) for 12 tokens: nothing to cluster")


def test_train_refuses_while_another_process_runs_the_same_fit(small_corpus, tmp_path, capsys):
    lock = tmp_path / "runs" / ".checkpoints" / "deepcluster" / "tiny" / "seed0" / "lock"
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"777\n")
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(SystemExit) as exc:
            _train("deepcluster", "tiny", "--corpus-dir", small_corpus, "--out", tmp_path / "runs", "--seeds", "0",
                   "--no-progress")
        one_error_line(capsys, exc, "another process (pid 777) is running this fit")
    finally:
        os.close(fd)


def test_prepare_unknown_corpus_and_bad_out(tmp_path, capsys, monkeypatch):
    from signclust.data.prepare import main
    with pytest.raises(SystemExit) as exc:
        main(["atlantean"])
    one_error_line(capsys, exc, "unknown corpus 'atlantean'")
    keep = _folder_with(tmp_path / "mine", "thesis.tex")
    with pytest.raises(SystemExit) as exc:
        main(["cypriot", "--out", str(keep), "--sheet", str(tmp_path / "s.png")])
    one_error_line(capsys, exc, "is not empty and not a signclust corpus")
    assert snapshot(keep) == {"thesis.tex": b"keep me"}


def test_distances_stage_removes_a_killed_runs_temp_folder(tiny, saved_corpus, tmp_path, capsys):
    from signclust.distances.stage import main
    folder = saved_corpus(tiny, "tiny")
    out = tmp_path / "dist" / "tiny"
    out.parent.mkdir()
    dead = out.parent / ".tiny.99999999.abcdefgh.tmp"            # what a kill during the stage leaves
    legacy = out.parent / ".tiny.abcd1234.tmp"                    # the same from before pids were in the name
    for d in (dead, legacy):
        d.mkdir()
        (d / "dist.npy").write_bytes(b"partial")
    main(["tiny", "--corpus-dir", str(folder), "--out", str(out)])
    assert sorted(os.listdir(out.parent)) == ["tiny"]
    capsys.readouterr()
    for bad_out, expected in ((".", "must name a folder"), (str(_folder_with(tmp_path / "x", "a.txt")), "did not write")):
        with pytest.raises(SystemExit) as exc:
            main(["tiny", "--corpus-dir", str(folder), "--out", bad_out])
        one_error_line(capsys, exc, expected)


def test_atomic_writes_use_unique_names_and_leave_nothing(tmp_path):
    target = tmp_path / "afile"
    target.write_text("old")
    with atomic_dir(target) as tmp:                  # a file replaced by a folder: no stray .afile.old
        assert str(os.getpid()) in tmp.name
        (tmp / "x").write_text("new")
    assert sorted(os.listdir(tmp_path)) == ["afile"] and (target / "x").read_text() == "new"
    with atomic_path(tmp_path / "f.json") as a, atomic_path(tmp_path / "f.json") as b:
        assert a != b                                # two writers never share a temporary name
        a.write_text("1")
        b.write_text("2")
    assert sorted(os.listdir(tmp_path)) == ["afile", "f.json"]
    # killed between moving the old version away and moving the new one in: the old one comes back
    (tmp_path / ".g.99999999.abcdefgh.old").write_text("previous")
    clean_stale(tmp_path / "g")
    assert (tmp_path / "g").read_text() == "previous"
    mine = tmp_path / f".h.{os.getpid()}.abcdefgh.tmp"           # a live writer's: kept
    mine.mkdir()
    assert clean_stale(tmp_path / "h") == [] and mine.exists()


def test_dvc_exp_run_style_override_subprocess(tmp_path, small_corpus, run_cli, monkeypatch):
    """`dvc exp run -S models.deepcluster.epochs=-5` rewrites params.yaml; the stage must refuse."""
    params = real_params()
    params["models"]["deepcluster"]["epochs"] = -5
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    monkeypatch.setenv("SIGNCLUST_PARAMS", str(path))
    r = run_cli("signclust.models.train", "deepcluster", "tiny", "--corpus-dir", small_corpus, "--out", tmp_path / "r")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "error: deepcluster.epochs: -5 is not allowed (expected a whole number >= 1)"

