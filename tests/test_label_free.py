"""evaluation/label_free.py: the context evidence, lm's selection score read over fixed symbols."""
from __future__ import annotations

import numpy as np
import pytest

from signclust.evaluation import label_free
from signclust.evaluation.label_free import CorpusData
from signclust.models import lm_clusterer as lm


def test_context_evidence_is_the_neighbour_evidence_per_token():
    rng = np.random.default_rng(0)
    texts = [np.arange(0, 10), np.arange(10, 25)]
    z, symbols = rng.integers(0, 4, 25), rng.integers(0, 3, 25)
    assert label_free.context_evidence(z, texts, symbols) == pytest.approx(lm.neighbour_evidence(z, texts, symbols, 1.0) / 25)
    # type names do not matter: the same partition under other labels scores the same
    assert label_free.context_evidence(np.array([7, 3, 9, 5])[z], texts, symbols) == pytest.approx(
        label_free.context_evidence(z, texts, symbols))
    # types that alternate with their neighbours' symbols predict them: better than one type for all
    alternating = np.arange(25) % 2
    assert label_free.context_evidence(alternating, texts, alternating) > label_free.context_evidence(np.zeros(25, int), texts,
                                                                                       alternating) + 0.3


def test_shuffled_evidence_is_the_evidence_of_shuffled_texts():
    rng = np.random.default_rng(0)
    texts = [np.arange(0, 12), np.arange(12, 20), np.arange(20, 31)]
    z, symbols = rng.integers(0, 3, 31), rng.integers(0, 4, 31)
    orders = np.random.default_rng(7)
    first = [orders.permutation(t) for t in texts]                  # the first of the seed's shuffles
    assert label_free.shuffled_evidence(z, texts, symbols, 1.0, 7, shuffles=1) == pytest.approx(
        lm.neighbour_evidence(z, first, symbols, 1.0), abs=1e-12)
    # types that follow only the text (a hand's style): shuffling changes nothing, controlled evidence 0
    by_text = np.repeat([0, 1, 2], [12, 8, 11])
    assert label_free.shuffled_evidence(by_text, texts, by_text, 1.0, 7) == pytest.approx(
        lm.neighbour_evidence(by_text, texts, by_text, 1.0), abs=1e-12)
    # types that predict their neighbours (0 1 0 1 ...): the order holds evidence the shuffle destroys
    alternating = np.arange(31) % 2
    texts_even = [np.arange(0, 16), np.arange(16, 30)]
    assert lm.neighbour_evidence(alternating, texts_even, alternating, 1.0) > label_free.shuffled_evidence(
        alternating, texts_even, alternating, 1.0, 7) + 5


def test_shuffled_evidence_is_the_mean_over_shuffles_drawn_shuffle_by_shuffle():
    # the committed reports/pair_ratio_sweep_controlled*.md were made with these draws: one generator
    # of the seed, each shuffle permuting the texts in order, then the next shuffle
    rng = np.random.default_rng(0)
    texts = [np.arange(0, 9), np.arange(9, 21), np.arange(21, 26)]
    z, symbols = rng.integers(0, 3, 26), rng.integers(0, 4, 26)
    draws = np.random.default_rng(11)
    naive = []
    for _ in range(5):
        order = [draws.permutation(t) for t in texts]
        naive.append(lm.neighbour_evidence(z, order, symbols, 0.7))
    assert label_free.shuffled_evidence(z, texts, symbols, 0.7, 11) == pytest.approx(sum(naive) / 5, abs=1e-12)
    assert label_free.CONTROL_SHUFFLES == 5


def test_controlled_evidence_is_the_evidence_less_the_shuffled_per_token():
    rng = np.random.default_rng(3)
    texts = [np.arange(0, 14), np.arange(14, 30)]
    z, symbols = rng.integers(0, 4, 30), rng.integers(0, 3, 30)
    assert label_free.context_evidence(z, texts, symbols, 0.5, controlled=True, seed=2) == pytest.approx(
        (lm.neighbour_evidence(z, texts, symbols, 0.5) - label_free.shuffled_evidence(z, texts, symbols, 0.5, 2)) / 30)


def test_glyph_symbols_cut_the_glyphs_into_n_groups(tiny_corpus):
    corpus = tiny_corpus(n_types=4, per_type=6, n_texts=3, seed=2)
    data = CorpusData(corpus, "tiny")
    symbols = label_free.glyph_symbols(data, 4)
    assert symbols.shape == (corpus.n_tokens,) and sorted(np.unique(symbols)) == [0, 1, 2, 3]
    # four clean, very different shapes: the cut is the shapes (one symbol per sign, one sign per symbol)
    labels = corpus.labels()
    assert all(len(np.unique(symbols[labels == s])) == 1 for s in np.unique(labels))
