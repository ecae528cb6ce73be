"""Our LM sign clusterer (models/lm_clusterer.py): each term of the merge gain against a hand
computation or a naive reference, and the fit on corpora where the answer is known: an obvious
one, and one where only context can tell that two images are one sign."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import gammaln
from sklearn.metrics import v_measure_score

from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.models import lm_clusterer as L
from signclust.models.base import FitContext, get_clusterer

from conftest import SHAPES, draw_shape


def fit(corpus, seed=0, **params):
    return get_clusterer("lm", **params).fit(corpus, FitContext(seed=seed, progress=False, device="cpu"))


# -- L_LM: the Dirichlet-multinomial context model ---------------------------------------------------

def test_log_dm_is_the_sequential_predictive_probability():
    # outcomes 0, 0, 1 under alpha (1, 1): 1/2 * 2/3 * 1/4 = 1/12, in any order
    assert float(L.log_dm(np.array([2.0, 1.0]), np.array([1.0, 1.0]))) == pytest.approx(-math.log(12))
    # alpha (0.5, 2): first 0 -> 0.5/2.5, then 0 -> 1.5/3.5, then 1 -> 2/4.5
    expected = math.log(0.5 / 2.5) + math.log(1.5 / 3.5) + math.log(2 / 4.5)
    assert float(L.log_dm(np.array([2.0, 1.0]), np.array([0.5, 2.0]))) == pytest.approx(expected)
    rows = L.log_dm(np.array([[2.0, 1.0], [0.0, 0.0]]), np.array([1.0, 1.0]))
    assert rows.shape == (2,) and rows[1] == 0.0            # no outcomes: probability 1


def test_context_counts_with_text_boundaries():
    z = np.array([0, 1, 0, 2, 1])
    texts = [np.array([0, 1, 2]), np.array([3, 4])]          # types 0 1 0 | 2 1
    left, right = L.context_counts(z, texts, 3)
    # column 3 is the boundary: BOS on the left, EOS on the right
    assert left.tolist() == [[0, 1, 0, 1], [1, 0, 1, 0], [0, 0, 0, 1]]
    assert right.tolist() == [[0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 0, 0]]
    # against a fixed coarser partition of the neighbours
    ref = np.array([0, 0, 0, 1, 1])
    left, right = L.context_counts(z, texts, 3, ref, 2)
    assert left.tolist() == [[1, 0, 1], [1, 1, 0], [0, 0, 1]]
    assert right.tolist() == [[1, 0, 1], [1, 0, 1], [0, 1, 0]]


def test_lm_gain_equals_the_naive_bayes_factor():
    rng = np.random.default_rng(0)
    left, right = rng.integers(0, 4, (5, 6)).astype(float), rng.integers(0, 4, (5, 6)).astype(float)
    alpha = rng.uniform(0.1, 2.0, 6)
    u, v = np.array([0, 1, 3]), np.array([2, 4, 4])

    def dm(c):      # sum over the outcomes' log-gamma terms, written out
        return gammaln(alpha.sum()) - gammaln(alpha.sum() + c.sum()) + sum(
            gammaln(a + n) - gammaln(a) for a, n in zip(alpha, c))
    naive = [dm(left[a] + left[b]) - dm(left[a]) - dm(left[b]) + dm(right[a] + right[b]) - dm(right[a]) - dm(right[b])
             for a, b in zip(u, v)]
    assert np.allclose(L.lm_gain(left, right, alpha, u, v), naive)


def test_lm_gain_rewards_shared_contexts_and_punishes_different_ones():
    alpha = np.full(4, 0.1)
    same = np.array([[10.0, 0, 0, 0], [10.0, 0, 0, 0]])
    diff = np.array([[10.0, 0, 0, 0], [0, 10.0, 0, 0]])
    z = np.zeros((2, 4))
    assert L.lm_gain(same, z, alpha, np.array([0]), np.array([1]))[0] > 0
    assert L.lm_gain(diff, z, alpha, np.array([0]), np.array([1]))[0] < -10


def test_context_prior_is_beta_times_symbols_times_frequency():
    z = np.array([0, 0, 1, 2])
    alpha = L.context_prior(z, n_texts=2, k=3, beta=0.5)
    assert np.allclose(alpha, 0.5 * 4 * np.array([2, 1, 1, 2]) / 6)


# -- L_hom: the visual side --------------------------------------------------------------------------

def test_text_centre_against_a_loop():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 3))
    text = np.array([0, 0, 0, 1, 1, 2, 2])
    out = L.text_centre(x, text, kappa=2.0)
    g = x.mean(0)
    for i in range(7):
        members = text == text[i]
        n = members.sum()
        assert np.allclose(out[i], x[i] - n / (n + 2.0) * (x[members].mean(0) - g), atol=1e-6)
    assert L.text_centre(x, text, 0.0) is x


def test_hom_gain_uses_the_rms_distance_between_the_types():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(9, 4))
    z = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])
    pair = L.PairModel(a=3.0, b=2.0, n_positive=10)
    u, v = np.array([0, 1]), np.array([1, 2])
    got = L.hom_gain(x, z, 3, pair, u, v)
    for k, (a, b) in enumerate(zip(u, v)):
        d2 = [np.sum((x[i] - x[j]) ** 2) for i in np.flatnonzero(z == a) for j in np.flatnonzero(z == b)]
        assert got[k] == pytest.approx(3.0 - 2.0 * math.sqrt(np.mean(d2)))


def test_within_text_evidence_against_a_loop():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 2))
    z = np.array([0, 1, 0, 2, 1, 2, 0, 1])
    texts = [np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7])]
    pair = L.PairModel(a=1.0, b=0.5, n_positive=10)
    m = L.within_text_evidence(x, z, 3, texts, pair).toarray()
    naive = np.zeros((3, 3))
    for t in texts:
        for i in t:
            for j in t:
                if i < j and z[i] != z[j]:
                    a, b = sorted((z[i], z[j]))
                    naive[a, b] += 1.0 - 0.5 * np.linalg.norm(x[i] - x[j])
    assert np.allclose(m, naive)


def test_nearest_link_is_the_smallest_edge_between_two_types():
    i = np.array([0, 0, 1, 2, 3, 3])
    j = np.array([1, 2, 3, 3, 0, 1])
    d = np.array([0.5, 2.0, 1.0, 0.25, 3.0, 1.5])
    z = np.array([0, 1, 1, 2])              # edges between types: (0,1): 0.5, 2.0; (1,2): 1.0, 0.25, 1.5; (0,2): 3.0
    link = L.nearest_link((i, j, d), z, 3).toarray()
    back = lambda s: 1.0 / s - 1.0           # noqa: E731  stored as 1 / (1 + d)
    assert back(link[0, 1]) == pytest.approx(0.5)
    assert back(link[1, 2]) == pytest.approx(0.25)
    assert back(link[0, 2]) == pytest.approx(3.0)


def test_fit_pair_model_separates_near_from_far():
    # three texts, each holding two copies of one shape among four others: the copies are the pairs
    rng = np.random.default_rng(4)
    parts = []
    for t in range(6):
        centres = rng.normal(scale=10, size=(5, 3))
        parts.append(np.concatenate([centres, centres[:1] + rng.normal(scale=0.1, size=(1, 3))]))
    x = np.concatenate(parts)
    texts = [np.arange(6 * t, 6 * t + 6) for t in range(6)]
    pair = L.fit_pair_model(x, texts, ratio=0.8, seed=0)
    # the six copies, and a few random points that happen to pass the ratio test
    assert pair is not None and pair.n_positive >= 6
    typical = np.median(L.confident_pairs(x, texts, 0.8)[1])      # a typical within-text distance
    assert pair.log_odds(np.array([0.1]))[0] > 0 > pair.log_odds(np.array([typical]))[0]


def test_dup_prior_and_candidate_ratio_test():
    assert np.allclose(L.dup_prior(np.array([1, 2, 4]), 2.0), [-2.0, -2.0 - math.log(2), -2.0 - math.log(4)])
    cen = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [10.0, 5.0]])
    prof = np.ones((4, 3))
    u, v, rank, ratio = L.candidate_pairs(cen, prof, prof, k_nn=1, by_context=False)
    pairs = {(int(a), int(b)): (int(r), float(q)) for a, b, r, q in zip(u, v, rank, ratio)}
    # 0 and 1 are mutual nearest: ratio = 1 / min(second-nearest of 0 (10), of 1 (9)) = 1/9
    assert pairs[(0, 1)] == (1, pytest.approx(1 / 9))
    # 2 and 3 are mutual nearest too: ratio 5 / min(9, sqrt(106))
    assert pairs[(2, 3)][1] == pytest.approx(5 / 9)


def test_disjoint_best_takes_the_best_gains_each_type_once():
    u, v = np.array([0, 0, 1, 2, 3]), np.array([1, 2, 2, 3, 4])
    # (1,2) gains most; every other pair with a positive gain shares type 1 or 2 with it
    assert L.disjoint_best(u, v, np.array([5.0, 4.0, 6.0, 1.0, -1.0]), limit=10) == [(1, 2)]
    assert L.disjoint_best(u, v, np.array([5.0, 0.5, -6.0, 1.0, -1.0]), limit=10) == [(0, 1), (2, 3)]
    assert L.disjoint_best(u, v, np.array([5.0, 0.5, -6.0, 1.0, -1.0]), limit=1) == [(0, 1)]
    assert L.disjoint_best(u, v, np.array([-1.0, 0.0, -6.0, -1.0, -1.0]), limit=10) == []


# -- fits where the answer is known -----------------------------------------------------------------

def test_obvious_corpus_is_recovered_exactly_and_deterministically(tiny_corpus):
    corpus = tiny_corpus(n_types=4, per_type=8, n_texts=4)
    a, b = fit(corpus), fit(corpus)
    assert v_measure_score(corpus.labels(), a.labels) >= 0.9
    assert a.k_found == 4
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.embedding, b.embedding)


def free_variation_corpus(n_texts=40, length=30, seed=0) -> Corpus:
    """Three signs, each written with one of two unrelated shapes at random per token (clean
    images, so visual evidence alone keeps six types); the texts follow the cycle A B C A B C ..."""
    rng = np.random.default_rng(seed)
    variants = {0: ("bar", "dot"), 1: ("column", "triangle"), 2: ("ring", "cross")}
    pictures = {s: draw_shape(s, 32) for s in SHAPES}
    images, labels, texts = [], [], []
    for t in range(n_texts):
        start = int(rng.integers(3))
        for p in range(length):
            sign = (start + p) % 3
            images.append(pictures[variants[sign][int(rng.integers(2))]])
            labels.append("ABC"[sign])
            texts.append(f"T{t:03d}")
    return Corpus.from_arrays(np.stack(images), labels=labels, text_ids=texts,
                              meta={"name": "free", "source": "synthetic (tests)", "licence": "n/a",
                                    "attribution": "tests"})


def test_context_alone_merges_variants_in_free_variation():
    corpus = free_variation_corpus()
    gold = corpus.labels()
    ours = fit(corpus)
    assert v_measure_score(gold, ours.labels) >= 0.9 and ours.k_found == 3
    blind = fit(corpus, w_lm=0.0)                 # no context: the six shapes stay six types
    assert blind.k_found == 6 and v_measure_score(gold, blind.labels) < 0.8


def test_ink_and_size_of_the_images_do_not_change_the_result(tiny_corpus):
    corpus = tiny_corpus(n_types=4, per_type=8, n_texts=4)
    faint = Corpus(corpus.tokens.copy(), (corpus.images * 0.6).astype(np.uint8), dict(corpus.meta))
    assert np.array_equal(fit(corpus).labels, fit(faint).labels)


def test_parameters_are_checked():
    with pytest.raises(UserError, match="lm.context_beta"):
        get_clusterer("lm", context_beta=0.0)
    with pytest.raises(UserError, match="unknown parameter"):
        get_clusterer("lm", epochs=3)
    assert get_clusterer("lm").cfg == L.LMConfig()
