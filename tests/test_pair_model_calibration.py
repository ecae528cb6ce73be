"""scripts/pair_model_calibration.py: lm's pair model against the fit from the true pairs."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from signclust.config import REPO_ROOT
from signclust.models import lm_clusterer as lm

spec = importlib.util.spec_from_file_location("pair_model_calibration", REPO_ROOT / "scripts" / "pair_model_calibration.py")
calib = importlib.util.module_from_spec(spec)
spec.loader.exec_module(calib)


def test_positives_are_lms_own_selection_and_their_precision_is_counted():
    # one text on a line: (0, 1) and (2, 3) are mutual nearest neighbours far nearer than their second;
    # 4 is nobody's nearest. (0, 1) show one sign, (2, 3) two signs.
    x = np.array([[0.0], [0.1], [5.0], [5.1], [10.0]])
    texts = [np.arange(5)]
    labels = np.array([0, 0, 1, 2, 3])
    pos, _ = lm.confident_pairs(x, texts, 0.8)
    assert calib.positives_precision(x, texts, labels, 0.8) == (len(pos), 0.5) == (2, 0.5)
    # at ratio 0.01 neither pair passes (0.1 > 0.01 x 4.9)
    assert calib.positives_precision(x, texts, labels, 0.01) == (0, 0.0)


def test_on_well_separated_noisy_signs_the_pair_model_is_precise_and_the_true_cut_finds_k(tiny_corpus):
    corpus = tiny_corpus(n_types=4, per_type=12, n_texts=3, noise=20.0)
    r = calib.calibration("tiny", corpus, {"encoder_epochs": 0}, seed=0)
    assert r["k_true"] == 4 and r["texts"] == 3
    assert r["positives"] > 0 and r["precision"] == 1.0
    assert r["micro_k_true"] == 4 and r["micro_v_true"] == pytest.approx(1.0)
    assert r["lm_k_true"] == 4 and r["lm_v_true"] == pytest.approx(1.0)


def test_lm_with_its_own_pair_model_is_lms_fit(tiny_corpus):
    # the "ours" columns are lm's own fit: cluster() with the corpus-fitted pair model gives fit's types
    from signclust.evaluation.metrics import score
    from signclust.models.base import FitContext
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=40.0, seed=5)   # the candidates differ here
    cfg = {"encoder_epochs": 0, "vote": "none"}                    # (with no kNN vote; near makes them one fit)
    fitted = lm.LMSignClusterer(**cfg).fit(corpus, FitContext(seed=1, progress=False))
    r = calib.calibration("tiny", corpus, cfg, seed=1)
    assert r["ratio"] == fitted.info["pair_ratio"] != fitted.info["selection"][0]["pair_ratio"]
    assert r["lm_k_ours"] == fitted.k_found
    assert r["lm_v_ours"] == score(corpus.labels(), fitted.labels)["v_measure"]


def test_table_on_known_numbers():
    rows = {"a_hands": {"k_true": 41, "texts": 70, "ratio": 0.7, "positives": 650, "precision": 0.98, "even_odds": 0.672,
                        "even_odds_true": 0.808, "micro_k_ours": 155, "micro_k_true": 81,
                        "micro_v_ours": 0.842, "micro_v_true": 0.894, "lm_k_ours": 79, "lm_k_true": 39,
                        "lm_v_ours": 0.958, "lm_v_true": 0.964},
            "b_hands": {"k_true": 317, "texts": 1659, "ratio": 1.0, "positives": 963, "precision": 0.684, "even_odds": 0.952,
                        "even_odds_true": 0.852, "micro_k_ours": 230, "micro_k_true": 469,
                        "micro_v_ours": 0.748, "micro_v_true": 0.778, "lm_k_ours": 167, "lm_k_true": 300,
                        "lm_v_ours": 0.726, "lm_v_true": 0.764}}
    text = calib.markdown(rows, 0)
    assert "| a_hands | 41 | 0.7 | 650 | 0.98 | 0.672 | 0.808 | 155 | 81 | 0.842 | 0.894 | 79 | 39 | 0.958 | 0.964 |" in text
    assert "| b_hands | 317 | 1 | 963 | 0.68 | 0.952 | 0.852 | 230 | 469 | 0.748 | 0.778 | 167 | 300 | 0.726 | 0.764 |" in text
    assert "With our pair model, lm's K is within ±20% of K true on 0 of 2 corpora; its mean V is 0.842." in text
    assert ("At the true-pair fit, lm's K is within ±20% of K true on 2 of 2 corpora (a_hands, b_hands); "
            "its mean V is 0.864.") in text
    assert "a cut too fine: more micro-clusters): 1 of 2 corpora; above it (too coarse): b_hands." in text


def test_bad_input_is_one_error_line(tiny_corpus, cli_error):
    clean = tiny_corpus(n_types=3, per_type=2, noise=0.0, shift=0, duplicates=30)
    with pytest.raises(Exception) as exc:
        calib.calibration("c", clean, {}, seed=0)
    assert "c: a clean corpus (its sign images recur exactly): lm fits no pair model there" in str(exc.value)
    for argv, message in ((["--corpora", "cypriot"], "--corpora makes another study than "
                                                     "reports/pair_model_calibration.md: give it its own --out"),
                          (["--corpora", "nope_hands", "--out", "x.md"], "nope_hands: not in data/corpora")):
        cli_error(calib.main, argv, message)
