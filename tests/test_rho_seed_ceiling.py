"""scripts/rho_seed_ceiling.py: lm's tuning trials fitted at a second seed, V against V and against the evidence."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from conftest import lm_study_dirs, make_lm_study

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
    # V at seed 0 ranks 2 < 3 < 0 < 1, at seed 1 2 < 0 < 3 < 1 (rho 0.8); seed 0's evidence ranks
    # 1 < 3 < 0 < 2 (rho -0.8 with V0), seed 1's 2 < 3 < 0 < 1 (rho +1 with V0, +0.8 with V1); the record
    # is seed 0's but trial 1's V (0.93 recorded: the same ranks)
    rows = [{"trial": i, "v0": v0, "ec0": ec0, "k0": 5, "v1": v1, "ec1": ec1, "k1": 5, "v_rec": v0, "ec_rec": ec0}
            for i, (v0, ec0, v1, ec1) in enumerate([(0.90, 0.3, 0.86, 0.3), (0.95, 0.1, 0.97, 0.4),
                                                    (0.80, 0.4, 0.80, 0.1), (0.85, 0.2, 0.88, 0.2)])]
    rows[1]["v_rec"] = 0.93
    res = {"corpus": "c", "seeds": [0, 1], "rows": rows, "shift": 0.02}
    s = ceiling.summarise(res)
    assert s["rho_vv"] == pytest.approx(0.8) and s["rho_own0"] == pytest.approx(-0.8)
    assert s["rho_recorded"] == pytest.approx(-0.8)
    assert s["rho_cross"] == pytest.approx(1.0) and s["rho_own1"] == pytest.approx(0.8)
    # means: V 0.88, 0.96, 0.80, 0.865 (2 < 3 < 0 < 1); evidence 0.3, 0.25, 0.25, 0.2 (a tie: ranks 4, 2.5, 2.5, 1)
    assert s["rho_mean"] == pytest.approx(1.5 / 22.5 ** 0.5)     # rank deviations (.5, 1.5, -1.5, -.5), (1.5, 0, 0, -1.5)
    assert s["seed_diff"] == pytest.approx(0.025) and s["v_range"] == (0.80, 0.97)
    text = ceiling.markdown({"lm_c_supervised_x": res}, 0.8, "python scripts/rho_seed_ceiling.py")
    assert "| lm_c_supervised_x | c | 4 | 0.800–0.970 | 0.0250 | +0.80 | -0.80 | -0.80 | +0.80 | +1.00 | +0.32 | 0.0200 |" in text
    assert "| ρ seed 0 | ρ seed 1 |" in text
    # scipy's 0.7999999999999999 counts as the target's 0.8
    assert "- ρ ≥ 0.8 for V at one seed against V at the other: 1 of 1 studies, median ρ +0.80" in text
    assert "- ρ ≥ 0.8 for the two seeds' mean evidence against their mean V: 0 of 1 studies, median ρ +0.32" in text


def test_cached_fits_drop_a_torn_last_line(tmp_path):
    path = tmp_path / "s_seed1.json"
    path.write_text(json.dumps({"trial": 3, "v": 0.5, "k": 4, "ec": 0.1}) + "\n" + '{"trial": 4, "v": 0.')
    assert ceiling.cached_fits(path) == {3: {"trial": 3, "v": 0.5, "k": 4, "ec": 0.1}}
    assert ceiling.cached_fits(tmp_path / "none.json") == {}


@pytest.fixture
def study_dirs(tmp_path, monkeypatch, tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=1)
    studies = lm_study_dirs(tmp_path, monkeypatch, corpus, [label_free_rho, ceiling])
    monkeypatch.setattr(ceiling, "CACHE", tmp_path / "cache")
    return corpus, studies


def direct_fit(corpus, rank_c0, seed):
    params = load_params()
    cfg = tune_config(params)
    fitted = get_clusterer("lm", **{**base_config("lm", params, cfg), "rank_c0": rank_c0, "encoder_epochs": 0}).fit(
        corpus, FitContext(seed=seed, progress=False))
    ec = unsupervised_score(fitted.labels, CorpusData(corpus, "tiny"), cfg["unsupervised"])["context_evidence"]
    return score(corpus.labels(), fitted.labels)["v_measure"], fitted.k_found, ec


def test_both_seeds_fits_are_the_trials_own_kept_and_resumed(study_dirs, monkeypatch):
    corpus, folder = study_dirs
    name = "lm_tiny_supervised_t"
    trials = [(0.5, {"v_measure": 0.55, "context_evidence": 0.3}),
              (6.0, {"v_measure": 0.7, "context_evidence": 0.2}), (2.0, {"v_measure": 0.6, "context_evidence": 0.1})]
    make_lm_study(folder, name, {"corpus": "tiny", "method": "lm"}, trials)
    res = ceiling.study_fits(name, load_params(), (0, 1), ceiling.CACHE)
    assert res["seeds"] == [0, 1]
    for row, (rank_c0, attrs) in zip(res["rows"], trials):
        for seed in (0, 1):
            v, k, ec = direct_fit(corpus, rank_c0, seed)
            assert (row[f"v{seed}"], row[f"k{seed}"], row[f"ec{seed}"]) == (v, k, ec)
        assert (row["v_rec"], row["ec_rec"]) == (attrs["v_measure"], attrs["context_evidence"])
    assert res["shift"] == max(abs(r["v0"] - r["v_rec"]) for r in res["rows"]) > 0
    for seed in (0, 1):
        lines = (ceiling.CACHE / f"{name}_seed{seed}.json").read_text().splitlines()
        assert [json.loads(line)["trial"] for line in lines] == [0, 1, 2]
    # a second run reads the kept fits: no trial is fitted again
    monkeypatch.setattr(ceiling, "fit_trial", lambda *a, **k: pytest.fail("fitted again"))
    assert ceiling.study_fits(name, load_params(), (0, 1), ceiling.CACHE) == res


def test_bad_input_is_one_error_line(study_dirs, cli_error):
    _, folder = study_dirs
    make_lm_study(folder, "lm_tiny_supervised_old", {"corpus": "tiny", "method": "lm"}, [(1.0, {"v_measure": 0.5})] * 3)
    out = str(folder / "x.md")
    for argv, message in ((["--studies", "lm_nope", "--out", out], "study lm_nope: lm_nope.json not found in"),
                          (["--studies", "lm_tiny_supervised_old"], "--studies or --seeds make another study than "
                                                                    "reports/rho_seed_ceiling.md: give it its own --out"),
                          (["--seeds", "3", "3"], "--seeds 3 3: two different seeds"),
                          (["--studies", "lm_tiny_supervised_old", "--out", out],
                           "study lm_tiny_supervised_old: trials [0, 1, 2] recorded no context_evidence")):
        cli_error(ceiling.main, argv, message)
    assert not (folder / "x.md").exists()
