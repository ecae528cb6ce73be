"""scripts/rho_seed_ceiling.py: lm's tuning trials fitted at a second seed, V against V and against the evidence."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from signclust.config import REPO_ROOT, load_params
from signclust.evaluation.label_free import CorpusData, unsupervised_score
from signclust.evaluation.metrics import score
from signclust.models.base import FitContext, get_clusterer
from signclust.tuning.study import base_config, tune_config

sys.path.insert(0, str(REPO_ROOT / "scripts"))        # the script imports label_free_rho beside it
spec = importlib.util.spec_from_file_location("rho_seed_ceiling", REPO_ROOT / "scripts" / "rho_seed_ceiling.py")
ceiling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ceiling)
label_free_rho = sys.modules["label_free_rho"]


def test_summary_and_table_on_known_numbers():
    # V at seed 0 ranks 2 < 3 < 0 < 1, at seed 1 2 < 0 < 3 < 1 (rho 0.8); the recorded evidence ranks
    # 1 < 3 < 0 < 2 (rho -0.8 with V0), seed 1's 2 < 3 < 0 < 1 (rho +1 with V0, +0.8 with V1)
    rows = [{"trial": i, "v0": v0, "ec0": ec0, "v1": v1, "ec1": ec1, "k1": 5}
            for i, (v0, ec0, v1, ec1) in enumerate([(0.90, 0.3, 0.86, 0.3), (0.95, 0.1, 0.97, 0.4),
                                                    (0.80, 0.4, 0.80, 0.1), (0.85, 0.2, 0.88, 0.2)])]
    res = {"corpus": "c", "seeds": [0, 1], "rows": rows, "checked": 1, "shift": 0.0}
    s = ceiling.summarise(res)
    assert s["rho_vv"] == pytest.approx(0.8) and s["rho_target"] == pytest.approx(-0.8)
    assert s["rho_cross"] == pytest.approx(1.0) and s["rho_own1"] == pytest.approx(0.8)
    # means: V 0.88, 0.96, 0.80, 0.865 (2 < 3 < 0 < 1); evidence 0.3, 0.25, 0.25, 0.2 (a tie: ranks 4, 2.5, 2.5, 1)
    assert s["rho_mean"] == pytest.approx(1.5 / 22.5 ** 0.5)     # rank deviations (.5, 1.5, -1.5, -.5), (1.5, 0, 0, -1.5)
    assert s["seed_diff"] == pytest.approx(0.025) and s["v_range"] == (0.80, 0.97)
    text = ceiling.markdown({"lm_c_supervised_x": res}, 0.8, "python scripts/rho_seed_ceiling.py")
    assert ("| lm_c_supervised_x | c | 4 | 0.800–0.970 | 0.0250 | +0.80 | -0.80 | +0.80 | +1.00 | +0.32 | "
            "1 trials, 0.0000 |") in text
    assert "- ρ ≥ 0.8 for V at one seed against V at the other: 1 of 1 studies, median ρ +0.80" in text
    assert "- ρ ≥ 0.8 for the controlled context evidence against V (seed 0, the target): 0 of 1 studies" in text


def test_cached_fits_drop_a_torn_last_line(tmp_path):
    path = tmp_path / "s_seed1.json"
    path.write_text(json.dumps({"trial": 3, "v": 0.5, "k": 4, "ec": 0.1}) + "\n" + '{"trial": 4, "v": 0.')
    assert ceiling.cached_fits(path) == {3: {"trial": 3, "v": 0.5, "k": 4, "ec": 0.1}}
    assert ceiling.cached_fits(tmp_path / "none.json") == {}


def make_study(folder, name, summary, trials):
    """A study journal and summary under ``folder``: ``trials`` (rank_c0, user attrs) complete."""
    import optuna

    from signclust.tuning.storage import journal_storage
    study = optuna.create_study(study_name=name, storage=journal_storage(folder / f"{name}.optuna.log"),
                                direction="maximize")
    dist = {"rank_c0": optuna.distributions.FloatDistribution(0.0, 8.0),
            "encoder_epochs": optuna.distributions.IntDistribution(0, 1)}
    for rank_c0, attrs in trials:
        study.add_trial(optuna.trial.create_trial(params={"rank_c0": rank_c0, "encoder_epochs": 0}, distributions=dist,
                                                  value=0.5, user_attrs=attrs))
    (folder / f"{name}.json").write_text(json.dumps(summary))


@pytest.fixture
def study_dirs(tmp_path, monkeypatch, tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=1)
    corpus.save(tmp_path / "corpora" / "tiny")
    (tmp_path / "studies").mkdir()
    monkeypatch.setattr(label_free_rho, "STUDIES_DIR", tmp_path / "studies")
    monkeypatch.setattr(label_free_rho, "CORPORA_DIR", tmp_path / "corpora")
    monkeypatch.setattr(ceiling, "CORPORA_DIR", tmp_path / "corpora")
    monkeypatch.setattr(ceiling, "CACHE", tmp_path / "cache")
    return corpus, tmp_path / "studies"


def direct_fit(corpus, rank_c0, seed):
    params = load_params()
    cfg = tune_config(params)
    fitted = get_clusterer("lm", **{**base_config("lm", params, cfg), "rank_c0": rank_c0, "encoder_epochs": 0}).fit(
        corpus, FitContext(seed=seed, progress=False))
    ec = unsupervised_score(fitted.labels, CorpusData(corpus, "tiny"), cfg["unsupervised"])["context_evidence"]
    return score(corpus.labels(), fitted.labels)["v_measure"], fitted.k_found, ec


def test_second_seed_fits_are_the_trials_own_kept_and_resumed(study_dirs, monkeypatch):
    corpus, folder = study_dirs
    name = "lm_tiny_supervised_t"
    v_true, _, ec_true = direct_fit(corpus, 0.5, 0)         # trial 0 records what a fit at seed 0 gives
    trials = [(0.5, {"v_measure": v_true, "context_evidence": ec_true}),
              (6.0, {"v_measure": 0.7, "context_evidence": 0.2}), (2.0, {"v_measure": 0.6, "context_evidence": 0.1})]
    make_study(folder, name, {"corpus": "tiny", "method": "lm"}, trials)
    res = ceiling.study_fits(name, load_params(), 1, 1, ceiling.CACHE)
    assert res["seeds"] == [0, 1] and res["checked"] == 1 and res["shift"] == 0.0
    for row, (rank_c0, attrs) in zip(res["rows"], trials):
        v, k, ec = direct_fit(corpus, rank_c0, 1)
        assert (row["v1"], row["k1"], row["ec1"]) == (v, k, ec)
        assert (row["v0"], row["ec0"]) == (attrs["v_measure"], attrs["context_evidence"])
    lines = (ceiling.CACHE / f"{name}_seed1.json").read_text().splitlines()
    assert [json.loads(line)["trial"] for line in lines] == [0, 1, 2]
    # a second run reads the kept fits: no trial is fitted again (check 0)
    monkeypatch.setattr(ceiling, "fit_trial", lambda *a, **k: pytest.fail("fitted again"))
    again = ceiling.study_fits(name, load_params(), 1, 0, ceiling.CACHE)
    assert again["rows"] == res["rows"] and again["checked"] == 0


def test_a_recorded_value_that_no_longer_holds_shows_as_the_shift(study_dirs):
    corpus, folder = study_dirs
    v_true, _, ec_true = direct_fit(corpus, 0.5, 0)
    make_study(folder, "lm_tiny_supervised_s", {"corpus": "tiny", "method": "lm"},
               [(0.5, {"v_measure": v_true - 0.25, "context_evidence": ec_true})] * 3)
    res = ceiling.study_fits("lm_tiny_supervised_s", load_params(), 2, 1, ceiling.CACHE)
    assert res["shift"] == pytest.approx(0.25)


def test_bad_input_is_one_error_line(study_dirs, cli_error):
    _, folder = study_dirs
    make_study(folder, "lm_tiny_supervised_old", {"corpus": "tiny", "method": "lm"}, [(1.0, {"v_measure": 0.5})] * 3)
    out = str(folder / "x.md")
    for argv, message in ((["--studies", "lm_nope", "--out", out], "study lm_nope: lm_nope.json not found in"),
                          (["--studies", "lm_tiny_supervised_old"], "--studies or --seed make another study than "
                                                                    "reports/rho_seed_ceiling.md: give it its own --out"),
                          (["--check", "-1"], "--check -1: a number of trials, at least 0"),
                          (["--studies", "lm_tiny_supervised_old", "--out", out, "--seed", "0"],
                           "--seed 0 is the studies' own fit seed (tune.fit_seed); give another"),
                          (["--studies", "lm_tiny_supervised_old", "--out", out],
                           "study lm_tiny_supervised_old: trials [0, 1, 2] recorded no context_evidence")):
        cli_error(ceiling.main, argv, message)
    assert not (folder / "x.md").exists()
