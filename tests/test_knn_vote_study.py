"""scripts/knn_vote_study.py: one fit per vote setting with lm's configured params, the noisy
corpora by default, its own --out for another study, and a summary computed from the rows."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from signclust.config import REPO_ROOT
from signclust.models import lm_clusterer as lm
from signclust.models.base import ClusterResult

spec = importlib.util.spec_from_file_location("knn_vote_study", REPO_ROOT / "scripts" / "knn_vote_study.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


@pytest.fixture
def fake_fits(tiny_corpus, monkeypatch):
    """load_corpus and get_clusterer replaced: every name loads one tiny corpus (4 signs); a fit
    reports K 4, 5, 3 or 6 for vote none, token, edge, near. Returns (names loaded, (method, params) fitted)."""
    corpus = tiny_corpus(n_types=4, per_type=5, n_texts=2, seed=1)
    loaded, fits = [], []
    monkeypatch.setattr(study, "load_corpus", lambda name, prep: loaded.append(name) or corpus)

    class Fake:
        def __init__(self, method, **cfg):
            fits.append((method, cfg))

        def fit(self, corpus_, ctx):
            k = {"none": 4, "token": 5, "edge": 3, "near": 6}[fits[-1][1]["vote"]]
            return ClusterResult(corpus_.labels() % k, np.zeros(corpus_.n_tokens), {"k_found": k})
    monkeypatch.setattr(study, "get_clusterer", Fake)
    return loaded, fits


def test_main_fits_lm_once_per_vote_with_the_configured_params(fake_fits, tmp_path, capsys):
    loaded, fits = fake_fits
    out = tmp_path / "v.md"
    study.main(["--corpora", "a_hands", "b", "--out", str(out)])
    assert loaded == ["a_hands", "b"]
    _, configured, _ = study.run_config("lm", study.load_params())
    assert [cfg["vote"] for _, cfg in fits] == ["none", "token", "edge"] * 2
    assert all(method == "lm" and {**cfg, "vote": "none"} == {**configured, "vote": "none"} for method, cfg in fits)
    text = out.read_text()
    assert "| a_hands | 4 | **4** (+0%) | 1.000 |" in text
    assert "| `none` | 2 of 2 | 0% | 1.000 |" in text
    assert "| `token` | 0 of 2 | 25% | 1.000 |" in text and "| `edge` | 0 of 2 | 25% |" in text
    with pytest.raises(SystemExit) as stop:
        study.main(["--corpora", "a_hands"])
    assert stop.value.code != 0 and "give it its own --out" in capsys.readouterr().err


def test_votes_fits_the_settings_given_beside_none_and_needs_its_own_out(fake_fits, tmp_path, capsys):
    loaded, fits = fake_fits
    out = tmp_path / "near.md"
    study.main(["--corpora", "a_hands", "--votes", "near", "--out", str(out)])
    assert [cfg["vote"] for _, cfg in fits] == ["none", "near"]
    text = out.read_text()
    assert "| corpus | K true | `none` K | V | `near` K | V |" in text and "`near` every edge, against the tokens near" in text
    assert "| `near` | 0 of 1 | 50% | 1.000 | +0.0000 | +0.0000 |" in text and "| `token` |" not in text
    with pytest.raises(SystemExit) as stop:
        study.main(["--votes", "near"])
    assert stop.value.code != 0 and "--votes make another study" in capsys.readouterr().err


def test_the_default_corpora_are_the_noisy_ones_and_every_vote_can_be_studied(fake_fits, tmp_path):
    # --votes offers every vote LMConfig accepts but none (fitted always), and the report describes each
    assert ("none",) + study.KNN_VOTE_MODES == lm.params_of(lm.LMConfig)["vote"].choices
    assert set(study.MEANS) == set(study.KNN_VOTE_MODES)
    names = study.noisy_corpora({"prepare": {"suite": {"scripts": ["latin", "greek"]}}})
    assert names == ["latin_hands", "latin_handwriting", "greek_hands", "greek_handwriting", "cypriot", "lineara"]
    loaded, _ = fake_fits
    study.main(["--out", str(tmp_path / "v.md")])
    assert loaded == study.noisy_corpora(study.load_params())


def test_markdown_summary_from_the_rows():
    rows = {"a": {"k_true": 10, "none": (20, 0.8), "token": (11, 0.85), "edge": (7, 0.7)},
            "b": {"k_true": 100, "none": (90, 0.9), "token": (60, 0.88), "edge": (100, 0.95)}}
    md = study.markdown(rows, 0)
    assert "| a | 10 | 20 (+100%) | 0.800 | **11** (+10%) | 0.850 | 7 (-30%) | 0.700 |" in md
    assert "| `none` | 1 of 2 | 55% | 0.850 | +0.0000 | +0.0000 |" in md
    assert "| `token` | 1 of 2 | 25% | 0.865 | +0.0150 | -0.0200 |" in md
    assert "| `edge` | 1 of 2 | 15% | 0.825 | -0.0250 | -0.1000 |" in md
