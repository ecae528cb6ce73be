"""scripts/style_split_study.py: which types are one sign split in two, the gain terms it reads are
the merge loop's own, and the probed fit is lm's own fit."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from signclust.config import REPO_ROOT
from signclust.evaluation.metrics import score
from signclust.models import lm_clusterer as lm
from signclust.models.base import FitContext

spec = importlib.util.spec_from_file_location("style_split_study", REPO_ROOT / "scripts" / "style_split_study.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


def test_splits_are_pure_minor_types_of_a_larger_types_sign():
    # gold signs 0, 1; types: 0 = 6 x sign 0 (main), 1 = 5 x sign 0 (a split), 2 = 4 x sign 0 (too small),
    # 3 = 6 x sign 1 (main), 4 = 3 x sign 1 + 2 x sign 0 (majority 1 but 60% pure: not a split at 0.8)
    z = np.array([0] * 6 + [1] * 5 + [2] * 4 + [3] * 6 + [4] * 5)
    gold = np.array([0] * 6 + [0] * 5 + [0] * 4 + [1] * 6 + [1, 1, 1, 0, 0])
    assert study.splits(z, gold, min_tokens=5, purity=0.8) == [(0, 1)]
    assert study.splits(z, gold, min_tokens=4, purity=0.8) == [(0, 1), (0, 2)]
    assert study.splits(z, gold, min_tokens=5, purity=0.6) == [(0, 1), (3, 4)]
    # one type per sign: nothing is split
    assert study.splits(np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1]), 1, 0.5) == []


def test_gain_terms_are_the_merge_loops_own():
    rng = np.random.default_rng(0)
    z = rng.integers(0, 6, 200)
    texts = [np.arange(i, i + 20) for i in range(0, 200, 20)]
    coarse = z % 3
    x = rng.normal(size=(200, 4))
    u, v = np.array([0, 1, 2]), np.array([3, 4, 5])
    terms = study.gain_terms((z, x, texts, None, coarse, None), lm.LMConfig(), u, v)
    left, right = lm.context_counts(z, texts, 6)
    assert np.array_equal(terms["d_lm"], lm.lm_gain(left, right, lm.context_prior(z, 10, 6, 0.1), u, v))
    cl, cr = lm.context_counts(z, texts, 6, coarse, 3)
    assert np.array_equal(terms["d_coarse"], lm.lm_gain(cl, cr, lm.context_prior(coarse, 10, 3, 0.1), u, v))
    assert np.array_equal(terms["avoid"], lm.avoidance(z, 6, texts, u, v))
    assert terms["candidate"].dtype == bool and len(terms["candidate"]) == 3


def test_study_probes_lms_own_fit(tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=1)
    cfg = {"encoder_epochs": 0}
    fitted = lm.LMSignClusterer(**cfg).fit(corpus, FitContext(seed=1, progress=False))
    row = study.study("tiny", corpus, cfg, seed=1, min_tokens=2, purity=0.5)
    assert row["k"] == fitted.k_found and row["k_true"] == 5 and row["committed"] is None
    assert row["v"] == score(corpus.labels(), fitted.labels)["v_measure"]
    assert row["splits"] is not None and row["whatif_k"] == row["k"] - row["splits"]
    md = study.markdown({"tiny": row}, 1, 2, 0.5)
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 3 and len({line.count("|") for line in table}) == 1


def test_bad_purity_is_one_error_line(capsys):
    with pytest.raises(SystemExit) as exc:
        study.main(["--purity", "1.5", "--out", "/tmp/never.md"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --purity 1.5: expected a share in (0, 1]"]
