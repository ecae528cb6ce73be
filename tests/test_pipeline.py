"""The train stage, run configuration, benchmark loaders and the paper-check table."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from signclust.data.benchmarks import read_idx
from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.evaluation.evaluate import main as evaluate_main
from signclust.models.base import ClusterResult, load_result
from signclust.models.train import run_config, train
from signclust.reports.paper_check import measure, render

PARAMS = {
    "train": {"seeds": [0], "device": "cpu"},
    "runs": {
        "lm": {"method": "lm"},
        "lm_seed": {"method": "lm", "preset": "seed"},
        "ward_raw": {"method": "ward", "params": {"pca_dim": 0}},
        "bad_preset": {"method": "lm", "preset": "nope"},
        "lm_seed_long": {"method": "lm", "preset": "seed", "params": {"s": 9, "epochs": 5}},
    },
    "models": {"lm": {"epochs": 2, "s": 0}, "ward": {"pca_dim": 10}},
    "presets": {"lm": {"seed": {"tie": "token", "s": 7}}},
}


def test_run_config_overlays_models_then_preset_then_row_params():
    method, cfg, preset = run_config("lm_seed", PARAMS)
    assert (method, preset) == ("lm", "seed")
    assert cfg == {"epochs": 2, "s": 7, "tie": "token"}
    assert run_config("lm_seed_long", PARAMS)[1] == {"epochs": 5, "s": 9, "tie": "token"}
    method, cfg, preset = run_config("ward_raw", PARAMS)
    assert (method, cfg, preset) == ("ward", {"pca_dim": 0}, None)


@pytest.mark.parametrize("run, message", [("nope", "unknown run 'nope'"),
                                          ("bad_preset", "has no parameter set 'nope'")])
def test_run_config_errors_name_the_problem(run, message):
    with pytest.raises(UserError, match=message):
        run_config(run, PARAMS)


def test_train_writes_run_folders_that_evaluate_reads(tiny_corpus, saved_corpus, tmp_path):
    corpus = tiny_corpus(n_types=3, per_type=10, n_texts=3)
    folder = saved_corpus(corpus, "tiny")
    out = tmp_path / "runs"
    summary = train("ward_raw", "tiny", [0, 1], PARAMS, corpus_dir=folder, dist_dir=None,
                    out_root=out, ckpt_root=None, progress=False)
    assert [s["seed"] for s in summary] == [0, 1]
    result = load_result(out / "ward_raw" / "tiny" / "seed1")
    assert len(result.labels) == corpus.n_tokens
    assert result.k_found == 3                      # Ward was told K_true by the stage
    info = json.loads((out / "ward_raw" / "tiny" / "seed1" / "info.json").read_text())
    assert info["method"] == "ward" and info["seed"] == 1
    # run-to-run noise stays out of the run folder (a DVC output evaluate depends on): same bytes twice
    assert not {"seconds", "wall_s", "mlflow_run_id", "resumed"} & set(info)
    first = (out / "ward_raw" / "tiny" / "seed1" / "info.json").read_bytes()
    train("ward_raw", "tiny", [1], PARAMS, corpus_dir=folder, dist_dir=None, out_root=out, ckpt_root=None,
          progress=False)
    assert (out / "ward_raw" / "tiny" / "seed1" / "info.json").read_bytes() == first
    timing = json.loads((out / ".timings" / "ward_raw_tiny.json").read_text())
    assert timing["per_seed"]["seed1"]["seconds"] >= 0 and timing["per_seed"]["seed1"]["resumed"] is False
    # the effective configuration: every resolved parameter, not only what params.yaml supplied
    assert info["params"] == {"pca_dim": 0, "glyphs": False}
    metrics = tmp_path / "m.json"
    evaluate_main(["ward_raw", "tiny", "--corpus-dir", str(folder), "--runs-dir", str(out / "ward_raw" / "tiny"),
                   "--out", str(metrics)])
    scores = json.loads(metrics.read_text())
    assert scores["n_seeds"] == 2
    assert scores["mean"]["v_measure"] == pytest.approx(1.0)   # three clean shapes


def test_train_cli_unknown_run_is_one_line_exit_2(run_cli):
    proc = run_cli("signclust.models.train", "no_such_run", "cypriot")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: unknown run 'no_such_run'")
    assert "Traceback" not in proc.stderr


def _idx_bytes(arr: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def test_read_idx_plain_and_gzipped(tmp_path):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a-idx3-ubyte").write_bytes(_idx_bytes(arr))
    with gzip.open(tmp_path / "b-idx3-ubyte.gz", "wb") as fh:
        fh.write(_idx_bytes(arr))
    assert np.array_equal(read_idx(tmp_path / "a-idx3-ubyte"), arr)
    assert np.array_equal(read_idx(tmp_path / "b-idx3-ubyte.gz"), arr)


def test_read_idx_truncated_file_is_a_user_error(tmp_path):
    arr = np.zeros((5, 4), np.uint8)
    (tmp_path / "t").write_bytes(_idx_bytes(arr)[:-3])
    with pytest.raises(UserError, match="truncated"):
        read_idx(tmp_path / "t")


def test_benchmark_splits_read_their_own_idx_files(tmp_path, monkeypatch):
    """mnist_train is the train file alone (the dev split for settings checked on mnist_test),
    mnist_full train then test; an unknown split is one error naming the known ones."""
    from signclust.data import benchmarks
    for part, n in (("train", 3), ("t10k", 2)):
        (tmp_path / f"{part}-images-idx3-ubyte").write_bytes(_idx_bytes(np.full((n, 2, 2), n, np.uint8)))
        (tmp_path / f"{part}-labels-idx1-ubyte").write_bytes(_idx_bytes(np.arange(n, dtype=np.uint8)))
    monkeypatch.setattr(benchmarks, "MNIST_DIR", tmp_path)
    assert benchmarks.load_split("mnist_train")[0].shape == (3, 2, 2)
    assert benchmarks.load_split("mnist_test")[0][:, 0, 0].tolist() == [2, 2]
    assert benchmarks.load_split("mnist_full")[1].tolist() == [0, 1, 2, 0, 1]
    with pytest.raises(UserError, match="unknown split 'dev' \\(test, train or full\\)"):
        benchmarks.load_split("mnist_dev")


def test_benchmark_data_never_writes_over_a_users_folder_or_file(tmp_path, capsys):
    """`signclust benchmark-data --out` replaced whatever was at OUT (exit 0: a folder of the user's
    files gone). Now a folder that is not a corpus and a file are refused with one line and kept; an
    existing corpus is replaced, as `prepare` does; a negative --subset is one error."""
    from signclust.data import benchmarks
    users = tmp_path / "thesis"
    (users / "sub").mkdir(parents=True)
    (users / "thesis.tex").write_text("keep")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep")
    for out, message in ((users, "is not empty and not a signclust corpus"),
                         (a_file, "exists and is not a folder")):
        with pytest.raises(SystemExit) as exit_:
            benchmarks.main(["digits", "--subset", "10", "--out", str(out)])
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err
    assert (users / "thesis.tex").read_text() == "keep" and (users / "sub").is_dir()
    assert a_file.read_text() == "keep"
    with pytest.raises(SystemExit):
        benchmarks.main(["digits", "--subset", "-5", "--out", str(tmp_path / "new")])
    assert "--subset must be 0 (all images) or a positive count, not -5" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    corpus = tmp_path / "digits"
    benchmarks.main(["digits", "--subset", "10", "--out", str(corpus)])
    benchmarks.main(["digits", "--subset", "12", "--out", str(corpus)])
    assert Corpus.load(corpus).counts()["tokens"] == 12


def test_measure_native_and_reclustered():
    gold = np.array([0, 0, 0, 1, 1, 1])
    # a wrong native assignment, but a representation in which Ward separates the two groups
    result = ClusterResult(np.zeros(6, int), np.array([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2]]))
    assert measure(gold, result, "nmi") == pytest.approx(0.0)
    assert measure(gold, result, "nmi_rc") == pytest.approx(1.0)


def test_render_shows_gap_and_dash_without_paper_figure():
    base = {"method": "m", "dataset": "d", "n": 10, "ours_std": 0.0, "k_found": 10, "k_true": 10,
            "paper_k": None, "setting": "s", "reduced": True, "seconds": 1.0, "source": "src"}
    md = render([{**base, "metric": "nmi", "paper": 0.5, "ours": 0.45, "gap": -0.05},
                 {**base, "metric": "acc", "paper": None, "ours": 0.7, "gap": None}], "full")
    assert "| NMI | 0.500 | 0.450 ± 0.000 | -0.050 |" in md
    assert "| ACC | — | 0.700 ± 0.000 | — |" in md


def test_train_logs_every_resolved_parameter_to_mlflow(tiny_corpus, saved_corpus, tmp_path, monkeypatch):
    import contextlib

    from signclust.models import train as train_mod
    from signclust.models.base import get_class
    logged = {}

    class Recorder:
        run_id = None
        def log_params(self, params): logged.update(params)
        def log_metrics(self, metrics, step=None): pass
        def log_artifact(self, path): pass
        def log_artifacts(self, path, artifact_path=None): pass
        def set_tags(self, tags): pass

    monkeypatch.setattr(train_mod.tracking, "run", lambda *a, **k: contextlib.nullcontext(Recorder()))
    folder = saved_corpus(tiny_corpus(n_types=3, per_type=6, n_texts=3), "tiny")
    params = {**PARAMS, "runs": {"km": {"method": "kmeans", "params": {"n_init": 2}}}}
    train("km", "tiny", [0], params, corpus_dir=folder, dist_dir=None, out_root=tmp_path / "runs",
          ckpt_root=None, progress=False)
    assert set(get_class("kmeans").PARAMS) <= set(logged)
    assert logged["n_init"] == 2 and logged["n_iter"] == get_class("kmeans").DEFAULTS["n_iter"]


def test_paper_check_other_seeds_need_their_own_out(capsys):
    # other seeds are another study: never written over the committed reports/paper_check.md
    from signclust.reports.paper_check import main as paper_check_main
    with pytest.raises(SystemExit) as exit_:
        paper_check_main(["--only", "kmeans", "--seeds", "0", "1"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("error: --seeds makes another study than the committed paper check: "
                                       "give it its own --out\n")


def test_paper_check_with_a_preset_runs_the_presets_values_alone():
    # the study of a method's own (paper) settings: our CPU cuts (models.<method>) and the check's
    # reduced parameters give way to the preset; the data follow --subset, and the row says so
    from signclust.models.baselines.deepdpm import DeepDPM
    from signclust.reports.paper_check import check_params, with_preset
    params = {"models": {"deepdpm": {"max_epochs": 7}}, "presets": {}}
    check = {"method": "deepdpm", "dataset": "fashion_test", "subset": 3000, "reduced": True,
             "setting": "ours", "params": {"features": "ae", "ae_epochs": 2}}
    assert check_params(check, params) == {"max_epochs": 7, "features": "ae", "ae_epochs": 2}
    same = with_preset(check, "paper", None)
    assert check_params(same, params) == DeepDPM.PRESETS["paper"]
    assert (same["subset"], same["reduced"], same["params"]) == (3000, True, {})
    assert same["setting"] == "the `paper` preset of deepdpm, 3000 images"
    whole = with_preset(check, "paper", 0)
    assert (whole["subset"], whole["reduced"], whole["setting"]) == (0, False, "the `paper` preset of deepdpm, all images")
    assert check["params"] == {"features": "ae", "ae_epochs": 2} and "preset" not in check   # not changed


@pytest.mark.parametrize("args, message", [
    (["--only", "kmeans", "--preset", "paper"],
     "--preset makes another study than the committed paper check: give it its own --out"),
    (["--only", "kmeans", "--subset", "100", "--out", "x.md"],
     "--subset goes with --preset (the committed checks keep their own subsets)"),
    (["--only", "kmeans", "--preset", "paper", "--subset", "-1", "--out", "x.md"],
     "--subset -1: expected 0 (all images) or a positive count"),
    (["--only", "deepdpm", "--preset", "nope", "--out", "x.md"],
     "paper_check --preset: method 'deepdpm' has no parameter set 'nope' (known: paper, paper_umap)"),
])
def test_paper_check_preset_study_bad_arguments(args, message, tmp_path, monkeypatch, capsys):
    from signclust.reports.paper_check import main as paper_check_main
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        paper_check_main(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "x.md").exists()
