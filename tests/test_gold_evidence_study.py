"""scripts/gold_evidence_study.py: lm's selection score for the fit and the gold labels, on the fit's own symbols."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from signclust.config import REPO_ROOT

spec = importlib.util.spec_from_file_location("gold_evidence_study", REPO_ROOT / "scripts" / "gold_evidence_study.py")
gold_ev = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gold_ev)


def test_with_outliers_splits_each_small_type_off_the_gold_labels():
    gold = np.array([0, 0, 0, 1, 1, 1, 2])
    z = np.array([4, 4, 9, 7, 7, 7, 3])          # types 9 and 3 hold one token each
    out = gold_ev.with_outliers(gold, z, 1)
    # tokens 2 and 6 leave their gold signs, each into a label of its own; the rest keep theirs
    assert out[:2].tolist() == [0, 0] and out[3:6].tolist() == [1, 1, 1]
    assert len({out[2], out[6]} | {0, 1}) == 4
    assert out.max() + 1 == 4                      # sign 2 had only token 6: it is gone
    assert gold_ev.with_outliers(gold, z, 0).tolist() == gold.tolist()


def test_study_scores_the_fit_on_the_selections_own_symbols(tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=1)
    row = gold_ev.study(corpus, {"encoder_epochs": 0, "style_alignment": False}, seed=1, max_size=1)
    assert row["k_true"] == 5 and row["n"] == 50
    # without the style alignment the fit is the kept candidate: its evidence is the selection's
    kept = max(row["kept"], key=lambda c: c[2])
    assert row["k"] == kept[1]
    assert row["ev_fit"] == pytest.approx(kept[2], abs=1e-9)
    md = gold_ev.markdown({"tiny": row}, 1, 1)
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in table}) == 1


def test_a_bad_max_size_is_one_error_line(cli_error):
    cli_error(gold_ev.main, ["--max-size", "0", "--out", "/tmp/never.md"], "--max-size 0")
