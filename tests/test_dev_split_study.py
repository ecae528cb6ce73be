"""scripts/dev_split_study.py: a baseline's settings on dev images, never on scored ones."""
from __future__ import annotations

import importlib.util

import pytest

from signclust.config import REPO_ROOT, load_params
from signclust.errors import UserError

spec = importlib.util.spec_from_file_location("dev_split_study", REPO_ROOT / "scripts" / "dev_split_study.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


@pytest.mark.parametrize("name", ["mnist_test", "mnist_test:3000", "cypriot", "lineara", "latin_hands",
                                  "japanese_handwriting"])
def test_scored_data_are_refused(name):
    with pytest.raises(UserError, match=f"{name.partition(':')[0]} is scored .*--measure-scored"):
        study.dev_corpus(name, load_params())


def test_the_method_runs_with_its_paper_check_parameters_else_its_models_entry():
    params = {"paper_check": {"checks": [{"method": "swav", "params": {"epochs": 3}}]},
              "models": {"swav": {"epochs": 10, "lr": 0.2}, "twostage": {"rounds": 2}}}
    assert study.method_params("swav", params) == {"epochs": 3, "lr": 0.2}
    assert study.method_params("twostage", params) == {"rounds": 2}
    assert study.method_params("jule", params) == {}


def test_a_scored_corpus_is_loaded_only_when_asked(monkeypatch):
    """With allow_scored a scored corpus comes from data/corpora (else the suite builder), as the
    other studies load it; a held-out script is built by the suite builder."""
    loaded = []
    monkeypatch.setattr(study, "load_corpus", lambda name, prepare: loaded.append(name) or name)
    monkeypatch.setattr(study.suite, "build", lambda name, prepare: f"built {name}")
    params = load_params()
    assert study.dev_corpus("cypriot", params, allow_scored=True) == "cypriot"
    assert study.dev_corpus("latin_hands", params, allow_scored=True) == "latin_hands"
    assert study.dev_corpus("armenian_hands", params) == "built armenian_hands"
    assert loaded == ["cypriot", "latin_hands"]
