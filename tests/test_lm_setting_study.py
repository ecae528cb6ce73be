"""scripts/lm_setting_study.py: one fit with lm's configured params and one per value of --key, the
noisy corpora by default, an --out of its own, and a summary computed from the rows."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from sklearn.metrics import v_measure_score

from signclust.config import REPO_ROOT
from signclust.models.base import ClusterResult
from signclust.models.lm_clusterer import LMConfig

spec = importlib.util.spec_from_file_location("lm_setting_study", REPO_ROOT / "scripts" / "lm_setting_study.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)

CONFIGURED = LMConfig().same_text                       # the class default: runs.lm sets no same_text
OTHER = {"pairs": "tokens", "tokens": "pairs"}[CONFIGURED]


@pytest.fixture
def fake_fits(tiny_corpus, monkeypatch):
    """load_corpus replaced (every name loads one tiny corpus of 4 signs) and the fits: the gold
    labels with the configured same_text, two signs to a type with the other. Returns (names
    loaded, the params of every fit); each fit's params also record how many trained encoders
    the encoder's cache held when it started (``cached``)."""
    corpus = tiny_corpus(n_types=4, per_type=5, n_texts=2, seed=1)
    loaded, fits = [], []
    monkeypatch.setattr(study, "load_corpus", lambda name, prep: loaded.append(name) or corpus)

    def fake_fit(self, corpus_, ctx):
        fits.append(dict(self.params, cached=len(study.visual_encoder._CACHE)))
        study.visual_encoder._CACHE["a trained encoder"] = None          # as a real fit leaves one
        gold = corpus_.labels()
        z = gold if self.params["same_text"] == CONFIGURED else gold // 2
        return ClusterResult(z, np.zeros(corpus_.n_tokens), {"k_found": len(np.unique(z))})
    monkeypatch.setattr(study.get_clusterer("lm").__class__, "fit", fake_fit)
    return loaded, fits


def test_main_fits_the_configured_lm_and_each_value(fake_fits, tmp_path):
    loaded, fits = fake_fits
    out = tmp_path / "s.md"
    study.main(["--key", "same_text", "--values", OTHER, "--corpora", "a_hands", "b", "--out", str(out)])
    assert loaded == ["a_hands", "b"]
    method, configured, _ = study.run_config("lm", study.load_params())
    default = study.get_clusterer(method, **configured).params
    assert default["same_text"] == CONFIGURED
    assert [f["same_text"] for f in fits] == [CONFIGURED, OTHER] * 2
    assert [f.pop("cached") for f in fits] == [0] * 4          # no fit reuses another's encoder: times are whole fits
    assert all({**f, "same_text": None} == {**default, "same_text": None} for f in fits)
    text = out.read_text()
    gold = study.load_corpus("c", None).labels()
    lumped = v_measure_score(gold, gold // 2)                   # two signs to a type
    assert 0 < lumped < 1
    assert f"| corpus | K true | `{CONFIGURED}` K | V | s | `{OTHER}` K | V | s |" in text
    assert f"| a_hands | 4 | **4** (+0%) | 1.000 | 0 | 2 (-50%) | {lumped:.3f} | 0 |" in text    # fake fits: 0 s
    assert f"| `{CONFIGURED}` | 2 of 2 | 0% | 1.000 | +0.0000 | +0.0000 | +0.0000 | 0 | 0 |" in text
    change = f"{lumped - 1:+.4f}"
    assert f"| `{OTHER}` | 0 of 2 | 50% | {lumped:.3f} | {change} | {change} | {change} | 0 | 0 |" in text


@pytest.mark.parametrize("argv, message", [
    (["--key", "nope", "--values", "1"], "--key nope: not an lm parameter (known: feature_dim,"),
    (["--key", "same_text", "--values", CONFIGURED],
     f"--values {CONFIGURED}: each value once, none the configured {CONFIGURED}"),
    (["--key", "same_text", "--values", OTHER, OTHER], "each value once"),
    (["--key", "same_text", "--values", "all"], "lm.same_text: 'all' is not allowed"),
])
def test_bad_settings_are_one_error_before_any_fit(fake_fits, tmp_path, capsys, argv, message):
    loaded, fits = fake_fits
    with pytest.raises(SystemExit) as stop:
        study.main(argv + ["--out", str(tmp_path / "s.md")])
    assert stop.value.code != 0 and message in capsys.readouterr().err
    assert loaded == [] and fits == [] and not (tmp_path / "s.md").exists()


def test_out_is_required_and_the_default_corpora_are_the_noisy_ones(fake_fits, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        study.main(["--key", "same_text", "--values", OTHER])
    assert stop.value.code != 0 and "--out" in capsys.readouterr().err
    loaded, _ = fake_fits
    study.main(["--key", "same_text", "--values", OTHER, "--out", str(tmp_path / "s.md")])
    assert loaded == study.noisy_corpora(study.load_params())


def test_values_are_read_as_yaml():
    assert study.show(0.5) == "0.5" and study.show([0.7, 0.8]) == "[0.7, 0.8]" and study.show("near") == "near"
    rows = {"a": {"k_true": 10, "0.7": (20, 0.8, 70.0), "0.9": (11, 0.85, 50.0)},
            "b": {"k_true": 100, "0.7": (90, 0.9, 80.0), "0.9": (60, 0.88, 64.0)}}
    md = study.markdown(rows, 3, "match_ratio", [0.7, 0.9])
    assert "seed 3" in md and "| `0.9` | 1 of 2 | 25% | 0.865 | +0.0150 | -0.0200 | +0.0500 | 57 | 64 |" in md
    assert "| a | 10 | 20 (+100%) | 0.800 | 70 | **11** (+10%) | 0.850 | 50 |" in md
