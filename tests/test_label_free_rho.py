"""scripts/label_free_rho.py: lm's tuning trials fitted again and scored by V, U and the context evidence."""
from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import lm_study_dirs, make_lm_study

from signclust.config import REPO_ROOT, load_params
from signclust.evaluation import label_free
from signclust.evaluation.label_free import CorpusData, unsupervised_score
from signclust.evaluation.metrics import score
from signclust.models.base import FitContext, get_clusterer
from signclust.tuning.study import base_config, tune_config

spec = importlib.util.spec_from_file_location("label_free_rho", REPO_ROOT / "scripts" / "label_free_rho.py")
rho = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rho)


def test_summary_and_table_on_known_numbers():
    rows = [{"trial": i, "v_recorded": v, "v": v, "k": 10, "u": u, "e": e, "ec": -e}
            for i, (v, u, e) in enumerate([(0.90, -1.0, -2.0), (0.95, -1.2, -1.5), (0.80, -0.9, -2.5), (0.85, -1.1, -2.2)])]
    rows[1]["v_recorded"] = 0.93
    s = rho.summarise({"corpus": "c", "rows": rows})
    # V ranks 2 < 3 < 0 < 1; U ranks 1 < 3 < 0 < 2 (rho -0.8); evidence ranks 2 < 3 < 0 < 1 (rho 1)
    assert s["rho_u"] == pytest.approx(-0.8) and s["rho_e"] == pytest.approx(1.0) and s["rho_ec"] == pytest.approx(-1.0)
    assert (s["v_by_u"], s["v_by_e"], s["v_by_ec"], s["v_best"]) == (0.80, 0.95, 0.80, 0.95)
    assert s["recorded_shift"] == pytest.approx(0.02)
    text = rho.markdown({"lm_c_supervised_x": {"corpus": "c", "rows": rows}}, 10, 0.8)
    assert "| lm_c_supervised_x | c | 4 | 0.800–0.950 | -0.80 | +1.00 | -1.00 | 0.800 | 0.950 | 0.800 | 0.950 | 0.020 |" in text
    assert "ρ ≥ 0.8 for U on 0 of 1 studies (median ρ -0.80)." in text
    assert "ρ ≥ 0.8 for the context evidence on 1 of 1 studies (median ρ +1.00)." in text
    assert "ρ ≥ 0.8 for the controlled context evidence on 0 of 1 studies (median ρ -1.00)." in text


def make_study(folder, name, summary, trials):
    """``make_lm_study`` with trials given as (rank_c0, recorded V or None)."""
    make_lm_study(folder, name, summary, [(r, {} if v is None else {"v_measure": v}) for r, v in trials])


@pytest.fixture
def study_dirs(tmp_path, monkeypatch, tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=6)
    return corpus, lm_study_dirs(tmp_path, monkeypatch, corpus, [rho])


def test_rescore_fits_each_trial_again(study_dirs):
    corpus, folder = study_dirs
    name = "lm_tiny_supervised_t"
    # rank_c0 0.5 and 2 merge three of the five signs on this corpus (K 3), 6 does not (K 5); a trial
    # without a recorded V is left out, as the tune report leaves it out (draw 6: on draw 1, where 0.5
    # merged two signs before the slant correction, every trial now finds the five)
    make_study(folder, name, {"corpus": "tiny", "method": "lm"}, [(0.5, 0.5), (2.0, 0.6), (7.5, None), (6.0, 0.7)])
    params = load_params()
    result = rho.rescore(name, params, 3)
    assert result["corpus"] == "tiny" and [r["trial"] for r in result["rows"]] == [0, 1, 3]
    assert [r["k"] for r in result["rows"]] == [3, 3, 5]
    cfg = tune_config(params)
    data = CorpusData(corpus, "tiny")
    symbols = label_free.glyph_symbols(data, 3)
    for row, rank_c0 in zip(result["rows"], (0.5, 2.0, 6.0)):
        fitted = get_clusterer("lm", **{**base_config("lm", params, cfg), "rank_c0": rank_c0, "encoder_epochs": 0}).fit(
            corpus, FitContext(seed=int(cfg["fit_seed"]), progress=False))
        assert row["v"] == score(corpus.labels(), fitted.labels)["v_measure"] and row["k"] == fitted.k_found
        assert row["u"] == unsupervised_score(fitted.labels, data, cfg["unsupervised"])["unsupervised"]
        assert row["e"] == label_free.context_evidence(fitted.labels, data.texts, symbols)
        assert row["ec"] == label_free.context_evidence(fitted.labels, data.texts, symbols, controlled=True)
    assert [r["v_recorded"] for r in result["rows"]] == [0.5, 0.6, 0.7]


def test_a_study_it_cannot_score_is_refused_before_any_fit(study_dirs, cli_error):
    _, folder = study_dirs
    make_study(folder, "ward_tiny_supervised_w", {"corpus": "tiny", "method": "ward"}, [(1.0, 0.5)] * 3)
    make_study(folder, "lm_gone_supervised_g", {"corpus": "gone", "method": "lm"}, [(1.0, 0.5)] * 3)
    make_study(folder, "lm_tiny_supervised_two", {"corpus": "tiny", "method": "lm"}, [(1.0, 0.5), (2.0, None), (3.0, 0.6)])
    for study, message in (("ward_tiny_supervised_w", "a study of lm on a corpus is needed (its summary has method 'ward'"),
                           ("lm_gone_supervised_g", "corpus gone not in"),
                           ("lm_tiny_supervised_two", "2 complete trial(s) with a recorded V; a rank correlation needs 3")):
        # listed after a good study: still no fit runs
        assert f"study {study}: " in cli_error(rho.main, ["--studies", study, "--out", str(folder / "x.md")], message)
    assert not (folder / "x.md").exists()


def test_bad_input_is_one_error_line(cli_error, tmp_path, monkeypatch):
    monkeypatch.setattr(rho, "STUDIES_DIR", tmp_path)
    for argv, message in ((["--studies", "lm_nope", "--out", "x.md"], "study lm_nope: lm_nope.json not found in"),
                          (["--studies", "lm_nope"], "--studies or --symbols make another study than "
                                                     "reports/label_free_rho.md: give it its own --out"),
                          (["--symbols", "1", "--out", "x.md"], "--symbols 1: at least 2 symbols")):
        cli_error(rho.main, argv, message)
