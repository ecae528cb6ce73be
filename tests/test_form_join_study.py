"""scripts/form_join_study.py: the grid's fits are lm's own (the uneven-typeface draw it asks for is the
builder's ``font_shares``, tested in test_suite.py)."""
from __future__ import annotations

import importlib.util
import numpy as np
import pytest

from signclust.config import REPO_ROOT
from signclust.evaluation.metrics import score
from signclust.models import lm_clusterer as lm
from signclust.models.base import FitContext

spec = importlib.util.spec_from_file_location("form_join_study", REPO_ROOT / "scripts" / "form_join_study.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


def test_grid_scores_lms_own_fits(tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=0.0, seed=2)
    cfg = {"encoder_epochs": 0}
    grid = [{"form_occupancy": False, "form_shrink": 0.1}, {"form_occupancy": True, "form_shrink": 0.3}]
    rows = study.fit_grid(corpus, cfg, grid, seeds=[0, 1])
    for (k, v), setting in zip(rows, grid):
        fits = [lm.LMSignClusterer(**cfg, **setting).fit(corpus, FitContext(seed=s, progress=False)) for s in (0, 1)]
        assert k == np.mean([f.k_found for f in fits])
        assert v == pytest.approx(np.mean([score(corpus.labels(), f.labels)["v_measure"] for f in fits]))
    md = study.markdown({"tiny": rows, "held": rows}, {"tiny": 5, "held": 5}, grid, [0, 1], ["held"], [0.7, 0.3])
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert {line.count("|") for line in table[:4]} == {6}                   # setting + 2 corpora x (K, V)
    assert "shares 0.7, 0.3" in md and "occupancy on, shrink 0.3" in md


def test_bad_font_shares_get_the_builders_one_line_error(cli_error, tmp_path):
    cli_error(study.main, ["--corpora", "greek_free", "--heldout", "--font-shares", "1", "0", "1",
                           "--out", str(tmp_path / "x.md")], "font_shares: [1.0, 0.0, 1.0] (expected 3 positive")
    assert not (tmp_path / "x.md").exists()
