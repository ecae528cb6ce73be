"""scripts/small_types_study.py: the what-if absorption of tiny types, and the fit it studies is lm's own."""
from __future__ import annotations

import importlib.util

import numpy as np

from signclust.config import REPO_ROOT
from signclust.evaluation.metrics import score
from signclust.models import lm_clusterer as lm
from signclust.models.base import FitContext

spec = importlib.util.spec_from_file_location("small_types_study", REPO_ROOT / "scripts" / "small_types_study.py")
small = importlib.util.module_from_spec(spec)
spec.loader.exec_module(small)


def test_absorb_moves_tiny_types_to_the_nearest_larger_centroid():
    # types 5 (3 tokens, centroid 0), 7 (2 tokens, centroid 10), 9 (1 token at 8), 2 (1 token at 1)
    x = np.array([[0.0], [-1.0], [1.0], [10.0], [10.0], [8.0], [1.0]])
    z = np.array([5, 5, 5, 7, 7, 9, 2])
    # m = 1: the singleton at 8 is nearer 10 than 0, the one at 1 nearer 0; renumbered in order of old label
    assert small.absorb_small_types(z, x, 1).tolist() == [0, 0, 0, 1, 1, 1, 0]
    # m = 2: type 7 is small too, so everything goes to the only larger type
    assert small.absorb_small_types(z, x, 2).tolist() == [0] * 7
    # no type larger than m: nothing moves
    assert small.absorb_small_types(z, x, 3).tolist() == [1, 1, 1, 2, 2, 3, 0]


def test_study_scores_lms_own_fit(tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=1)
    cfg = {"encoder_epochs": 0}
    fitted = lm.LMSignClusterer(**cfg).fit(corpus, FitContext(seed=1, progress=False))
    row = small.study(corpus, cfg, seed=1)
    found = np.bincount(fitted.labels)
    assert row["k"] == fitted.k_found and row["k_true"] == 5
    assert row["v"] == score(corpus.labels(), fitted.labels)["v_measure"]
    assert row["small"][1][0] == int((found <= 1).sum()) and row["small"][1][1] == 0
    assert all(k <= row["k"] for k, _ in row["absorbed"].values())
    md = small.markdown({"tiny": row}, 1)
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in table}) == 1
