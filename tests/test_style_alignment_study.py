"""scripts/style_alignment_study.py: right joins counted by the gold majority, the row is lm's own fit
followed by align_styles, and a bad option is one error line."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from signclust.config import REPO_ROOT
from signclust.evaluation.metrics import score
from signclust.models import lm_clusterer as lm
from signclust.models.base import FitContext
from signclust.models.style_alignment import align_styles

spec = importlib.util.spec_from_file_location("style_alignment_study", REPO_ROOT / "scripts" / "style_alignment_study.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


def test_right_joins_count_joins_of_one_gold_sign_above_p_min():
    z = np.array([0, 0, 1, 1, 2, 2, 3])
    gold = np.array([5, 5, 5, 5, 6, 6, 5])
    decoded = {1: (0, 0.9), 2: (0, 0.8), 3: (0, 0.4)}      # right, wrong, right but below p_min
    assert study.right_joins(z, decoded, 0.5, gold) == 1
    assert study.right_joins(z, decoded, 0.3, gold) == 2


def test_study_is_lms_fit_then_the_alignment(tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=1)
    cfg = {"encoder_epochs": 0, "style_alignment": False}      # as main() fits: the pass is the study's
    fitted = lm.LMSignClusterer(**cfg).fit(corpus, FitContext(seed=1, progress=False))
    row = study.study(corpus, cfg, seed=1, p_min=0.5)
    gold = corpus.labels()
    z = np.unique(fitted.labels, return_inverse=True)[1]
    aligned, info = align_styles(z, [t for t in corpus.texts() if len(t)], 0.5)
    assert row["k"] == fitted.k_found and row["v"] == score(gold, fitted.labels)["v_measure"]
    assert row["k_after"] == int(aligned.max()) + 1 and row["v_after"] == score(gold, aligned)["v_measure"]
    assert row["joined"] == info["joined"] and row["texts"] == 4
    md = study.markdown({("tiny", 1): row}, [1], 0.5)
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 3 and len({line.count("|") for line in table}) == 1


def test_bad_p_min_is_one_error_line(capsys):
    with pytest.raises(SystemExit) as exc:
        study.main(["--p-min", "0", "--out", "/tmp/never.md"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: --p-min 0.0: expected a share in (0, 1]"]
