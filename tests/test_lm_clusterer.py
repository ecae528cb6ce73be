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
from signclust.models.base import ClusterResult, FitContext, get_clusterer

from conftest import SHAPES, draw_shape


def fit(corpus, seed=0, **params):
    # float32 encoder unless asked: `auto` takes bf16 only on a CPU that has it (bf16:
    # tests/test_visual_encoder.py). float32 is not one arithmetic everywhere either: its kernels round
    # differently on a CPU without AVX-512, and 20 epochs of training carry that into the features, so
    # an exact K after the encoder holds only where the fit is far from a tie (see the near_loose test)
    params.setdefault("encoder_precision", "fp32")
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


def test_log_dm_of_sparse_rows_equals_the_dense_formula():
    """Only nonzero counts are summed: the rows' values equal the formula over every count, for a
    matrix of rows and for a single row."""
    from scipy.special import gammaln
    rng = np.random.default_rng(5)
    counts = rng.poisson(0.3, (40, 23)).astype(np.float64)                # mostly zeros
    counts[3] = 0.0
    alpha = rng.random(23) * 0.2 + 0.01

    def dense(c):
        return gammaln(alpha.sum()) - gammaln(alpha.sum() + c.sum(-1)) + (gammaln(alpha + c) - gammaln(alpha)).sum(-1)
    np.testing.assert_allclose(L.log_dm(counts, alpha), dense(counts), rtol=1e-12, atol=1e-12)
    assert float(L.log_dm(counts[7], alpha)) == pytest.approx(float(dense(counts[7])), rel=1e-12)


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


def test_group_sums_equal_np_add_at_bit_for_bit():
    rng = np.random.default_rng(1)
    for n, k in ((1, 1), (50, 7), (3000, 300)):
        x = (rng.normal(size=(n, 24)) * rng.uniform(0.01, 100)).astype(np.float32)
        z = rng.integers(0, k, n)
        want = np.zeros((k, 24))
        np.add.at(want, z, x)
        assert np.array_equal(L.group_sums(x, z, k), want)
    assert L.group_sums(np.zeros((0, 3)), np.zeros(0, dtype=int), 2).tolist() == [[0, 0, 0], [0, 0, 0]]


def test_context_counts_equal_the_naive_loop_over_texts():
    """The vectorised counts against one np.add.at per text and side, texts of every length
    (empty and one-token ones included), in any token order."""
    def naive(z, texts, k, ref, k_ref):
        left, right = np.zeros((k, k_ref + 1)), np.zeros((k, k_ref + 1))
        for t in texts:
            np.add.at(left, (z[t], np.r_[k_ref, ref[t][:-1]]), 1)
            np.add.at(right, (z[t], np.r_[ref[t][1:], k_ref]), 1)
        return left, right
    rng = np.random.default_rng(0)
    for trial in range(100):
        n, k = int(rng.integers(1, 40)), int(rng.integers(1, 6))
        z = rng.integers(0, k, n)
        texts = np.split(rng.permutation(n), np.sort(rng.integers(0, n + 1, int(rng.integers(0, 5)))))
        got = L.context_counts(z, texts, k) if trial % 2 else L.context_counts(z, texts, k, z % 2, 2)
        want = naive(z, texts, k, z, k) if trial % 2 else naive(z, texts, k, z % 2, 2)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_neighbour_symbols_equal_the_naive_loop_over_texts():
    rng = np.random.default_rng(1)
    for trial in range(100):
        n = int(rng.integers(1, 40))
        symbols = rng.integers(0, 4, n)
        kept = rng.permutation(n)[: int(rng.integers(0, n + 1))]          # tokens in no text keep the boundary
        texts = np.split(kept, np.sort(rng.integers(0, len(kept) + 1, int(rng.integers(0, 5)))))
        boundary = None if trial % 2 else 9
        edge = int(symbols.max()) + 1 if boundary is None else boundary
        want_prev, want_next = np.full(n, edge), np.full(n, edge)
        for t in texts:
            for i, tok in enumerate(t):
                if i > 0:
                    want_prev[tok] = symbols[t[i - 1]]
                if i < len(t) - 1:
                    want_next[tok] = symbols[t[i + 1]]
        prev, nxt = L.neighbour_symbols(texts, symbols, n, boundary)
        assert np.array_equal(prev, want_prev) and np.array_equal(nxt, want_next)


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


def test_text_shears_against_a_loop():
    """Each token's shear: its text's median slant less the corpus's median, shrunk by n_t / (n_t + kappa)."""
    rng = np.random.default_rng(4)
    slant = rng.normal(0, 0.3, 23)
    text = rng.integers(0, 6, 23)
    text = np.unique(text, return_inverse=True)[1]                # every text holds a token
    got = L.text_shears(slant, text, kappa=3.0)
    for i in range(23):
        members = slant[text == text[i]]
        n = len(members)
        assert got[i] == pytest.approx(n / (n + 3.0) * (np.median(members) - np.median(slant)), abs=1e-12)


def slanted_corpus(n_texts: int = 6, per_text: int = 12, clean: bool = False) -> Corpus:
    """Texts of the six shapes, each text written at its own slant (a writer's lean) and every token
    leaning a little more or less (so that no two images are the same): the same shape's images differ
    between texts by a shear. ``clean``: every token upright, the images of a shape identical (a clean
    corpus)."""
    from signclust.data.slant import shear_glyphs
    rng = np.random.default_rng(0)
    images, labels, text_ids = [], [], []
    for t in range(n_texts):
        lean = 0.0 if clean else (-0.35 + 0.7 * t / (n_texts - 1))
        shapes = [SHAPES[i % len(SHAPES)] for i in rng.permutation(per_text)]
        drawn = np.stack([draw_shape(s, 48) for s in shapes])
        jitter = np.zeros(per_text) if clean else rng.uniform(-0.04, 0.04, per_text)
        images.append(shear_glyphs(drawn, lean + jitter))
        labels += shapes
        text_ids += [f"T{t}"] * per_text
    return Corpus.from_arrays(np.concatenate(images), labels=labels, text_ids=text_ids,
                              meta={"name": "slanted", "source": "synthetic (tests)", "licence": "n/a",
                                    "attribution": "n/a"})


def test_hand_images_undo_each_texts_slant():
    """One shape written by six writers of different slants: after ``hand_images`` its images from
    different texts are far closer than before (a text's median slant is its writer's, not its
    signs'), closer still where the texts' slants are trusted more (12 tokens a text: the default
    undoes 12 / 20 of each lean); with text_deslant 0, or on a clean corpus, the distinct images come
    back as they are."""
    corpus = slanted_corpus()
    model = get_clusterer("lm")
    images, image_index, clean = model.hand_images(corpus)
    assert not clean and images.shape == (corpus.n_tokens, 48, 48) and np.array_equal(image_index, np.arange(corpus.n_tokens))
    raw = np.asarray(corpus.images)[corpus.image_index()].astype(np.float64)
    labels = corpus.tokens["label"].to_numpy()
    texts = corpus.tokens["text_id"].to_numpy()

    def spread(stack):             # mean L1 distance between one shape's images in different texts
        d = [np.abs(stack[i] - stack[j]).mean() for i in range(len(stack)) for j in range(i)
             if labels[i] == labels[j] and texts[i] != texts[j]]
        return float(np.mean(d))
    assert spread(images.astype(np.float64)) < 0.6 * spread(raw)                  # measured 0.50
    trusted = get_clusterer("lm", text_deslant=0.5).hand_images(corpus)[0]
    assert spread(trusted.astype(np.float64)) < 0.25 * spread(raw)                  # measured 0.18
    off_images, off_index, _ = get_clusterer("lm", text_deslant=0.0).hand_images(corpus)
    assert off_images is not None and np.array_equal(off_images, np.asarray(corpus.images))
    assert np.array_equal(off_index, corpus.image_index())
    clean_corpus = slanted_corpus(clean=True)
    c_images, c_index, c_clean = model.hand_images(clean_corpus)
    assert c_clean and len(c_images) == 6 and np.array_equal(c_index, clean_corpus.image_index())


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


def test_within_text_evidence_counting_tokens_against_a_loop():
    # types of 1, 2 and 3 tokens in one text and other counts in the next: a text's sum for (u, v)
    # is divided by the larger of u's and v's counts in that text
    rng = np.random.default_rng(5)
    x = rng.normal(size=(11, 3))
    z = np.array([0, 1, 1, 2, 2, 2, 0, 0, 1, 2, 3])
    texts = [np.arange(6), np.arange(6, 11)]
    pair = L.PairModel(a=1.0, b=0.5, n_positive=10)
    m = L.within_text_evidence(x, z, 4, texts, pair, count="tokens").toarray()
    naive = np.zeros((4, 4))
    for t in texts:
        n = {c: int((z[t] == c).sum()) for c in set(z[t])}
        for i in t:
            for j in t:
                if i < j and z[i] != z[j]:
                    a, b = sorted((z[i], z[j]))
                    naive[a, b] += (1.0 - 0.5 * np.linalg.norm(x[i] - x[j])) / max(n[a], n[b])
    assert np.allclose(m, naive)
    # one token against the three of another type in its text: one comparison's weight, not three
    single = L.within_text_evidence(x, z, 4, texts[:1], pair, count="tokens").toarray()[0, 2]
    summed = L.within_text_evidence(x, z, 4, texts[:1], pair).toarray()[0, 2]
    assert single == pytest.approx(summed / 3)
    with pytest.raises(ValueError, match="count 'all' is not one of pairs, tokens"):
        L.within_text_evidence(x, z, 4, texts, pair, count="all")


@pytest.mark.parametrize("count", ["pairs", "tokens"])
def test_text_pairs_kept_across_labellings_give_the_same_evidence(count):
    """A merge pass makes the texts' pairs once (text_pairs) and relabels them every round: bit for
    bit the evidence computed afresh, and a per-text loop's up to float rounding, for every labelling."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(40, 3))
    texts = np.split(rng.permutation(40), [1, 4, 12, 13, 25])          # lengths 1, 3, 8, 1, 12, 15
    pair = L.PairModel(a=0.7, b=0.4, n_positive=10)
    kept = L.text_pairs(x, texts, pair)
    assert len(kept.i) == sum(len(t) * (len(t) - 1) // 2 for t in texts)
    for k in (2, 5, 9):
        z = rng.integers(0, k, 40)
        got = L.within_text_evidence(x, z, k, texts, pair, count, kept)
        fresh = L.within_text_evidence(x, z, k, texts, pair, count)
        assert np.array_equal(got.indptr, fresh.indptr) and np.array_equal(got.indices, fresh.indices)
        assert np.array_equal(got.data, fresh.data)
        naive = np.zeros((k, k))
        for t in texts:
            n = np.bincount(z[t], minlength=k)
            for i in t:
                for j in t:
                    if i < j and z[i] != z[j]:
                        a, b = sorted((z[i], z[j]))
                        w = max(n[a], n[b]) if count == "tokens" else 1
                        naive[a, b] += (0.7 - 0.4 * np.linalg.norm(x[i] - x[j])) / w
        assert np.allclose(got.toarray(), naive)
    empty = L.text_pairs(x, [np.array([0]), np.array([1])], pair)
    assert L.within_text_evidence(x, np.zeros(40, int), 2, texts[:1], pair, count, empty).nnz == 0


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
    # 12 tokens a sign: a token's 10 graph neighbours (``candidates``) can all be its own sign's.
    # With 8 a sign, every token sends 3 or more edges out of its type, so every type "leaves" for
    # its nearest other sign, and the kNN vote reads that as evidence of one sign: 4 signs in 4
    # texts lump to 3 types (in 8 texts to 2 while the encoder trained 10 epochs; with 20, 4).
    corpus = tiny_corpus(n_types=4, per_type=12, n_texts=4)
    a, b = fit(corpus), fit(corpus)
    assert v_measure_score(corpus.labels(), a.labels) >= 0.9
    assert a.k_found == 4
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.embedding, b.embedding)


@pytest.mark.parametrize("per_type, n_texts, encoder_epochs, near_lumps",
                         [(8, 8, 0, True), (10, 5, 0, True), (8, 4, 0, False), (6, 3, 20, True), (10, 5, 20, True),
                          (8, 8, 20, False)])
def test_near_loose_keeps_apart_signs_with_fewer_tokens_than_graph_neighbours(tiny_corpus, per_type, n_texts,
                                                                             encoder_epochs, near_lumps):
    """The limit of the near vote: every token of a sign with fewer tokens than its 10 kNN neighbours
    must send edges to another sign, and near reads those forced edges as evidence of one sign and
    joins signs (K below 4); near_loose damps the vote by the small type's cohesion (these signs fill
    their slots: no vote) and finds the four. On the glyph features alone (no encoder: the same
    arithmetic on every CPU) near lumps in 8 texts of 8 tokens a sign (K 1) and in 5 of 10 (K 3), and
    not in 4 of 8. With the encoder (20 epochs) it lumps in 3 texts of 6 and 5 of 10 and finds the four
    in 8 of 8. The encoder's case of 4 texts of 8 is left out: its float32 training rounds differently
    on a CPU without AVX-512, where near_loose then found 3 (K 4 elsewhere; 2026-11-29). Without
    self-training: with its round near no longer joins two signs in 3 texts of 6 tokens a sign, which
    hides the vote's limit. Without the slant correction: these figures were measured before it, and the
    vote, not the images, is what this tests."""
    corpus = tiny_corpus(n_types=4, per_type=per_type, n_texts=n_texts)
    kw = dict(self_rounds=0, encoder_epochs=encoder_epochs, text_deslant=0.0)
    near = fit(corpus, vote="near", **kw).k_found
    assert (near < 4) if near_lumps else (near == 4)
    loose = fit(corpus, vote="near_loose", **kw)
    assert loose.k_found == 4 and v_measure_score(corpus.labels(), loose.labels) == pytest.approx(1.0)


def free_variation_corpus(n_texts=40, length=30, seed=0) -> Corpus:
    """Three signs, each written with one of two unrelated shapes at random per token (clean
    images, so visual evidence alone keeps six types); the texts follow the cycle A B C A B C ..."""
    rng = np.random.default_rng(seed)
    variants = {0: ("bar", "dot"), 1: ("column", "triangle"), 2: ("ring", "cross")}
    pictures = {s: draw_shape(s, 32) for s in SHAPES}
    texts = []
    for _ in range(n_texts):
        start = int(rng.integers(3))
        signs = [(start + p) % 3 for p in range(length)]
        texts.append([(pictures[variants[s][int(rng.integers(2))]], "ABC"[s]) for s in signs])
    return corpus_of_texts(texts, "free")


def corpus_of_texts(texts: list[list[tuple[np.ndarray, str]]], name: str) -> Corpus:
    """A labelled corpus from texts given as lists of (image, label), text ids T000, T001, ..."""
    tokens = [(img, label, f"T{t:03d}") for t, text in enumerate(texts) for img, label in text]
    return Corpus.from_arrays(np.stack([tok[0] for tok in tokens]), labels=[tok[1] for tok in tokens],
                              text_ids=[tok[2] for tok in tokens],
                              meta={"name": name, "source": "synthetic (tests)", "licence": "n/a",
                                    "attribution": "tests"})


def test_context_alone_merges_variants_in_free_variation():
    corpus = free_variation_corpus()
    gold = corpus.labels()
    ours = fit(corpus)
    assert v_measure_score(gold, ours.labels) >= 0.9 and ours.k_found == 3
    blind = fit(corpus, w_lm=0.0)                 # no context: the six shapes stay six types
    assert blind.k_found == 6 and v_measure_score(gold, blind.labels) < 0.8


def test_refits_on_a_clean_corpus_leave_the_result_alone():
    # a clean corpus has no pair model, so there is nothing to refit (before: an AttributeError)
    corpus = free_variation_corpus(n_texts=20)
    assert np.array_equal(fit(corpus, refits=1).labels, fit(corpus).labels)


def test_ink_and_size_of_the_images_do_not_change_the_result(tiny_corpus):
    from signclust.data.slant import moment_slants
    corpus = tiny_corpus(n_types=4, per_type=8, n_texts=4)
    faint = Corpus(corpus.tokens.copy(), (corpus.images * 0.6).astype(np.uint8), dict(corpus.meta))
    # the normalised glyphs are the same images: every feature after them sees no ink
    assert np.array_equal(L.normalize_glyphs(np.asarray(corpus.images)), L.normalize_glyphs(np.asarray(faint.images)))
    assert np.array_equal(fit(corpus, text_deslant=0.0).labels, fit(faint, text_deslant=0.0).labels)
    # the slant pass reads the moments of the grey images, which the ink's rounding to uint8 moves a little
    # (by at most 0.0025 here); a shear that much apart can flip a glyph's edge pixels, and on this 4-sign
    # corpus of 32 tokens (K 1-2 either way) that flipped the labels on an AVX2-only CPU's float32 encoder
    slant, faint_slant = moment_slants(np.asarray(corpus.images)), moment_slants(np.asarray(faint.images))
    assert np.abs(slant - faint_slant).max() < 0.01 and np.abs(slant).max() > 0.05


def test_parameters_are_checked():
    with pytest.raises(UserError, match="lm.context_beta"):
        get_clusterer("lm", context_beta=0.0)
    with pytest.raises(UserError, match=r"lm.pair_ratios: \[\] is not allowed"):
        get_clusterer("lm", pair_ratios=[])
    with pytest.raises(UserError, match="lm.pair_ratios"):
        get_clusterer("lm", pair_ratios=[0.8, 1.5])
    with pytest.raises(UserError, match="unknown parameter"):
        get_clusterer("lm", epochs=3)
    with pytest.raises(UserError, match="lm.vote"):
        get_clusterer("lm", vote="all")
    assert get_clusterer("lm").cfg == L.LMConfig()


# -- cases found by mutation testing (reports/mutation.md) -------------------------------------------

def test_context_prior_counts_unused_symbols():
    # symbol 2 never occurs: it still gets a (zero-frequency) column before the boundary
    alpha = L.context_prior(np.array([0, 0, 1]), n_texts=1, k=3, beta=1.0)
    assert np.allclose(alpha, 4 * np.array([2, 1, 0, 1]) / 4)


def test_text_centre_small_kappa_single_token_texts_and_dtype():
    x = np.array([[0.0], [2.0], [4.0], [10.0]])
    text = np.array([0, 0, 1, 2])                      # text 1 and text 2 hold one token each
    out = L.text_centre(x, text, kappa=0.5)             # kappa in (0, 1] still centres
    g = 4.0                                             # the corpus mean
    expected = [0 - 2 / 2.5 * (1 - g), 2 - 2 / 2.5 * (1 - g), 4 - 1 / 1.5 * (4 - g), 10 - 1 / 1.5 * (10 - g)]
    assert out.dtype == np.float32
    assert np.allclose(out[:, 0], expected)


def test_hom_gain_below_unit_distance_and_with_empty_types():
    x = np.array([[0.0], [0.1], [0.3], [0.5]])
    z = np.array([0, 0, 1, 1])
    pair = L.PairModel(a=1.0, b=4.0, n_positive=10)
    # k = 3: type 2 is empty; rms distance between types 0 and 1: sqrt(mean of 0.09, 0.25, 0.04, 0.16)
    with np.errstate(invalid="ignore"):                # the empty type's centroid is 0 / 0
        got = L.hom_gain(x, z, 3, pair, np.array([0]), np.array([1]))
    assert got[0] == pytest.approx(1.0 - 4.0 * math.sqrt((0.09 + 0.25 + 0.04 + 0.16) / 4))


def test_within_text_evidence_short_texts():
    x = np.array([[0.0], [1.0], [5.0], [6.0]])
    z = np.array([0, 1, 2, 0])
    pair = L.PairModel(a=1.0, b=0.5, n_positive=10)
    # a one-token text (no pairs) first, then a two-token text: its one pair counts
    m = L.within_text_evidence(x, z, 3, [np.array([0]), np.array([2, 3])], pair).toarray()
    expected = np.zeros((3, 3))
    expected[0, 2] = 1.0 - 0.5 * 1.0
    assert np.allclose(m, expected)
    # no text of two tokens: an empty (k, k) matrix
    empty = L.within_text_evidence(x, z, 3, [np.array([0]), np.array([1])], pair)
    assert empty.shape == (3, 3) and empty.nnz == 0


def test_nearest_link_is_k_by_k_when_the_last_types_have_no_edge():
    i, j, d = np.array([0, 1]), np.array([1, 0]), np.array([0.5, 0.25])
    link = L.nearest_link((i, j, d), np.array([0, 1, 2, 3]), 4)
    assert link.shape == (4, 4) and link.nnz == 1
    assert link[0, 1] == pytest.approx(1 / 1.25)


def test_nearest_link_is_empty_when_every_edge_stays_inside_a_type():
    # well-separated signs whose types hold all their tokens' neighbours: no link (this raised IndexError)
    i, j, d = np.array([0, 1, 2, 3]), np.array([1, 0, 3, 2]), np.array([0.1, 0.1, 0.2, 0.2])
    link = L.nearest_link((i, j, d), np.array([0, 0, 1, 1]), 2)
    assert link.shape == (2, 2) and link.nnz == 0


def _line(*points):
    return np.array(points, dtype=float)[:, None]


def test_confident_pairs_by_hand():
    x = np.concatenate([
        _line(0.0, 0.1),                 # a text of 2 tokens: skipped
        _line(0.0, 0.1, 5.0),            # 3 tokens: 0 and 0.1 are mutual nearest, 0.1 <= 0.8 x 5
        _line(10.0, 0.0, 1.0, -1.1),     # 0 and 1 mutual nearest, but 1 > 0.8 x 1.1 (0's 2nd nearest)
    ]) + np.repeat([0.0, 100.0, 200.0], [2, 3, 4])[:, None]
    texts = [np.arange(0, 2), np.arange(2, 5), np.arange(5, 9)]
    pos, background = L.confident_pairs(x, texts, 0.8)
    assert np.allclose(pos, [0.1])                      # once, not once per end of the pair
    assert np.allclose(background, [0.1, 5.0, 4.9, 10.0, 9.0, 11.1, 1.0, 1.1, 2.1])
    # no text of 3 tokens: nothing, and no error
    pos, background = L.confident_pairs(x, [np.arange(0, 2)], 0.8)
    assert len(pos) == 0 and len(background) == 0


def _pair_texts(n_pos_texts, n_plain_texts):
    """Texts of 3 tokens on a line: [0, 0.5, 1.5] gives one confident pair (0.5) and 3 background
    distances; [0, 0.55, 1.05] none and 3 more. Every distance is in [0.5, 1.5] (spread exactly 1)."""
    parts = [_line(0.0, 0.5, 1.5)] * n_pos_texts + [_line(0.0, 0.55, 1.05)] * n_plain_texts
    x = np.concatenate([p + 100.0 * t for t, p in enumerate(parts)])
    return x, [np.arange(3 * t, 3 * t + 3) for t in range(len(parts))]


def test_fit_pair_model_needs_five_pairs_and_twenty_background_pairs():
    from sklearn.linear_model import LogisticRegression
    x, texts = _pair_texts(5, 2)                        # 5 pairs, 21 background distances
    pair = L.fit_pair_model(x, texts, 0.8, seed=0)
    assert pair is not None and pair.n_positive == 5 and pair.b > 0
    # a balanced logistic fit (class_weight="balanced") of the same distances
    pos, background = L.confident_pairs(x, texts, 0.8)
    ref = LogisticRegression(class_weight="balanced").fit(np.r_[pos, background][:, None],
                                                          np.r_[np.ones(len(pos)), np.zeros(len(background))])
    assert pair.a == pytest.approx(ref.intercept_[0], rel=1e-4)
    assert pair.b == pytest.approx(-ref.coef_[0, 0], rel=1e-4)
    assert L.fit_pair_model(*_pair_texts(4, 3), 0.8, seed=0) is None      # 4 pairs, 21 background
    assert L.fit_pair_model(*_pair_texts(5, 1), 0.8, seed=0) is None      # 5 pairs, 18 background


def test_fit_pair_model_subsample_is_seeded():
    # one text of 205 tokens: 20910 background pairs, more than the 20000 the fit keeps
    rng = np.random.default_rng(5)
    x = rng.normal(size=(205, 2))
    texts = [np.arange(205)]
    a, b = L.fit_pair_model(x, texts, 1.0, seed=3), L.fit_pair_model(x, texts, 1.0, seed=3)
    assert a is not None and (a.a, a.b) == (b.a, b.b)


def test_refit_pair_model_learns_from_within_text_pairs_only():
    # 8 texts, each in its own hand: the hand shifts every token of the text by 4.0 along one axis,
    # so two copies of a sign in different texts lie ~4 apart, in one text ~0.1 apart, and two
    # different signs in one text ~3 or more apart. Types found = the signs.
    rng = np.random.default_rng(6)
    signs = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0], [3.0, 3.0]])
    x, z, texts = [], [], []
    for t in range(8):
        s = rng.permutation(np.repeat(np.arange(4), 3))                 # each sign 3 times
        x.append(signs[s] + [4.0 * t, 0.0] + rng.normal(scale=0.05, size=(12, 2)))
        z.append(s)
        texts.append(np.arange(12 * t, 12 * t + 12))
    x, z = np.concatenate(x), np.concatenate(z)
    pair = L.refit_pair_model(x, z, texts, seed=0)
    assert pair is not None and pair.n_positive == 8 * 4 * 3            # 3 same-sign pairs per sign and text
    # same sign in one hand (~0.1) is a match; two signs of one hand (3) are not. Pairs across
    # hands never enter: had they, the sign's positives would reach 28 apart and the fit would call
    # 3.0 a match (the across-text refit did exactly that and lumped).
    assert pair.log_odds(np.array([0.1]))[0] > 0 > pair.log_odds(np.array([3.0]))[0]
    assert 0.1 < pair.even_odds < 3.0
    # a balanced logistic fit of exactly those within-text distances
    from scipy.spatial.distance import pdist
    from sklearn.linear_model import LogisticRegression
    pos, neg = [], []
    for t in texts:
        iu = np.triu_indices(len(t), 1)
        same = z[t][iu[0]] == z[t][iu[1]]
        d = pdist(x[t])
        pos.append(d[same]), neg.append(d[~same])
    pos, neg = np.concatenate(pos), np.concatenate(neg)
    ref = LogisticRegression(class_weight="balanced").fit(np.r_[pos, neg][:, None],
                                                          np.r_[np.ones(len(pos)), np.zeros(len(neg))])
    assert pair.a == pytest.approx(ref.intercept_[0], rel=1e-4)
    assert pair.b == pytest.approx(-ref.coef_[0, 0], rel=1e-4)
    assert L.refit_pair_model(x, np.arange(len(x)), texts, seed=0) is None   # no type recurs in a text


def test_candidate_pairs_visual_and_context_partners_by_hand():
    cen = _line(0.0, 1.0, 10.0, 25.0)
    # left contexts: 0 and 3 alike (cosine 0.995), 2 nearer 0 than 3 or 1, 1 nearest 2; norms differ
    left = np.array([[1.0, 0, 0], [0, 1.0, 0], [5.0, 4.0, 0], [1.0, 0, 0.1]])
    right = np.zeros((4, 2))
    u, v, rank, ratio = L.candidate_pairs(cen, left, right, k_nn=1)              # by_context by default
    got = {(int(a), int(b)): (int(r), float(q)) for a, b, r, q in zip(u, v, rank, ratio)}
    assert len(u) == len(got)                            # each pair once
    # visual nearest: 0-1, 1-0, 2-1, 3-2; context nearest: 0-3, 1-2, 2-0, 3-0
    assert got == {(0, 1): (1, pytest.approx(1 / 9)), (1, 2): (1, math.inf), (2, 3): (1, math.inf),
                   (0, 3): (3, math.inf), (0, 2): (2, math.inf)}
    u, v, _, _ = L.candidate_pairs(cen, left, right, k_nn=1, by_context=False)
    assert sorted(zip(u.tolist(), v.tolist())) == [(0, 1), (1, 2), (2, 3)]
    # the ratio does not depend on the scale, also below distance 1
    assert L.candidate_pairs(cen * 0.01, left, right, k_nn=1)[3][0] == pytest.approx(1 / 9)


def test_candidate_pairs_with_three_and_two_types():
    prof = np.ones((3, 2))
    u, v, rank, ratio = L.candidate_pairs(_line(0.0, 1.0, 3.0), prof, prof, k_nn=10, by_context=False)
    assert list(zip(u.tolist(), v.tolist(), rank.tolist())) == [(0, 1, 1), (0, 2, 2), (1, 2, 1)]
    assert ratio[0] == pytest.approx(1 / 2) and np.isinf(ratio[1:]).all()       # 0 and 1 mutual
    # two types: no second nearest, so the ratio of the one pair is 0
    u, v, rank, ratio = L.candidate_pairs(_line(0.0, 1.0), prof[:2], prof[:2], k_nn=10, by_context=False)
    assert (u.tolist(), v.tolist(), rank.tolist(), ratio.tolist()) == ([0], [1], [1], [0.0])


def _merge_round(monkeypatch, z, x, texts, pair, edges=None, coarse=None, **params):
    """One call of the merge loop with disjoint_best watched: (its arguments per round, the
    history, what log_metrics got, the partition returned)."""
    seen, logged, history = [], [], []
    original = L.disjoint_best

    def spy(u, v, gain, limit):
        seen.append((u.copy(), v.copy(), gain.copy(), limit))
        return original(u, v, gain, limit)
    monkeypatch.setattr(L, "disjoint_best", spy)
    model = get_clusterer("lm", **params)
    model.edges = edges
    ctx = FitContext(seed=0, progress=False, device="cpu", log_metrics=lambda m, step: logged.append((m, step)))
    out = model._merge(z, x, texts, pair, coarse, history, ctx)
    return seen, history, logged, out


def _naive_lm_gain(z, texts, ref, beta, a, b):
    """dL_LM of merging types a and b, from counts taken by a loop and explicit log-gamma sums."""
    k, k_ref = z.max() + 1, ref.max() + 1
    left, right = np.zeros((k, k_ref + 1)), np.zeros((k, k_ref + 1))
    for t in texts:
        for p, i in enumerate(t):
            left[z[i], ref[t[p - 1]] if p else k_ref] += 1
            right[z[i], ref[t[p + 1]] if p + 1 < len(t) else k_ref] += 1
    freq = np.array([np.sum(ref == c) for c in range(k_ref)] + [len(texts)], dtype=float)
    alpha = beta * (k_ref + 1) * freq / freq.sum()

    def dm(c):
        return gammaln(alpha.sum()) - gammaln(alpha.sum() + c.sum()) + sum(
            gammaln(al + n) - gammaln(al) for al, n in zip(alpha, c))
    return sum(dm(c[a] + c[b]) - dm(c[a]) - dm(c[b]) for c in (left, right))


def _visual_rank(x, z, a, b):
    cen = np.array([x[z == c].mean(0) for c in range(z.max() + 1)])
    d = np.linalg.norm(cen[:, None] - cen[None], axis=2)
    rank = lambda p, q: 1 + sum(d[p, r] < d[p, q] for r in range(len(cen)) if r != p)  # noqa: E731
    return min(rank(a, b), rank(b, a))


def _naive_avoidance(z, texts, a, b):
    """log P(at most the observed tokens of a in texts holding b | Poisson, mean n_a x share of
    tokens in those texts), both ways, the larger; by loops over the texts."""
    from scipy.stats import poisson
    total = sum(len(t) for t in texts)

    def one(p, q):
        holding = [t for t in texts if (z[t] == q).any()]
        seen = sum(int((z[t] == p).sum()) for t in holding)
        return poisson.logcdf(seen, int((z == p).sum()) * sum(len(t) for t in holding) / total)
    return max(one(a, b), one(b, a))


def _naive_knn_vote(edges, z, a, b, mode):
    """knn_vote of types a and b by counting edges one at a time: s the smaller type (a on a tie)."""
    i, j, _ = edges
    pairs = list(zip(z[i].tolist(), z[j].tolist()))
    s, big = (a, b) if (z == a).sum() <= (z == b).sum() else (b, a)
    p1 = sum(p == q for p, q in pairs) / len(pairs)
    m = sum(p == s and q == big for p, q in pairs)
    n = sum(p == s and q != s for p, q in pairs)
    if mode in ("near", "near_loose"):
        # each token outside big: the share of its edges that land in big, kept when in (0, 1/2]
        shares = []
        for t in range(len(z)):
            targets = [z[jj] for ii, jj in zip(i, j) if ii == t]
            if z[t] != big and targets and 0 < targets.count(big) <= len(targets) / 2:
                shares.append(targets.count(big) / len(targets))
        p0 = sum(shares) / len(shares) if shares else len(z) / len(pairs)
    else:
        p0 = sum(q == big and p != big for p, q in pairs) / sum(p != q and p != big for p, q in pairs)
    p0 = min(max(p0, 1e-6), 1 - 1e-6)                              # as the code clips it
    if mode in ("near", "near_loose") and p0 >= p1:
        return -math.inf
    llr = m * math.log(p1 / p0) + (n - m) * math.log((1 - p1) / (1 - p0))
    if mode == "near_loose":
        return llr * (1 - _naive_cohesion(edges, z, s))
    return llr / (len(pairs) / len(z)) if mode == "token" else llr


def _naive_cohesion(edges, z, s):
    """The edges that type s's tokens send to each other over the most they could send: each token
    at most one edge to each other token of s and at most its own edge count; 0 for a single token."""
    i, j, _ = edges
    inside = sum(z[a] == s and z[b] == s for a, b in zip(i, j))
    slots = sum(min(int((i == t).sum()), int((z == s).sum()) - 1) for t in np.flatnonzero(z == s))
    return inside / slots if slots else 0.0


@pytest.mark.parametrize("mode, seed, k_nn", [("edge", 3, 3), ("token", 3, 3), ("near", 8, 4), ("near_loose", 8, 4)])
def test_knn_vote_against_a_loop(mode, seed, k_nn):
    rng = np.random.default_rng(seed)
    z = np.repeat(np.arange(5), [1, 2, 4, 6, 6])                 # types of 1 to 6 tokens; 3 and 4 tie
    x = rng.normal(size=(19, 2)) + z[:, None] * 1.5
    d = np.linalg.norm(x[:, None] - x[None], axis=2)
    np.fill_diagonal(d, np.inf)
    nb = np.argsort(d, axis=1)[:, :k_nn]                          # a kNN graph, as LMSignClusterer.graph builds
    edges = (np.repeat(np.arange(19), k_nn), nb.ravel(), d[np.arange(19)[:, None], nb].ravel())
    u, v = np.array([0, 0, 1, 2, 3, 1, 3]), np.array([1, 2, 2, 3, 4, 4, 2])   # the last pair: v is the smaller
    got = L.knn_vote(edges, z, 5, u, v, mode)
    want = [_naive_knn_vote(edges, z, a, b, mode) for a, b in zip(u, v)]
    assert got == pytest.approx(want)
    finite = [w for w in want if w > -math.inf]
    assert max(finite) > 0 > min(finite)                          # neighbours vote for some pairs, against others
    assert (len(finite) < len(want)) == mode.startswith("near")  # near: no vote where p0 >= p1
    if mode == "near_loose":                                      # a damped near, and not everywhere the same
        near = np.array([_naive_knn_vote(edges, z, a, b, "near") for a, b in zip(u, v)])
        keep = np.isfinite(near)
        assert np.all(np.abs(got[keep]) <= np.abs(near[keep]) + 1e-12)
        assert len({round(g / w, 9) for g, w in zip(got[keep], near[keep]) if w}) > 1


def test_cohesion_by_hand():
    """A whole sign of 3 tokens whose 2 slots each are its own (1), a type of 4 whose tokens send
    3 of their 12 possible edges to each other (1/4), a single token (0), a type of 2 that sends
    its one possible edge each way once (1/2)."""
    z = np.array([0, 0, 0, 1, 1, 1, 1, 2, 3, 3])
    nb = [[1, 2, 3], [0, 2, 3], [0, 1, 4],                        # type 0: 2 of 2 slots each inside
          [4, 0, 7], [0, 1, 2], [3, 0, 8], [5, 7, 0],              # type 1: 3 edges inside of 4 x 3 slots
          [0, 3, 8],                                               # the single token
          [9, 0, 1], [0, 1, 7]]                                    # type 3: 1 of its 2 slots
    edges = (np.repeat(np.arange(10), 3), np.array(nb).ravel(), np.ones(30))
    assert L.cohesion(edges, z, 4) == pytest.approx([1.0, 3 / 12, 0.0, 1 / 2])
    assert L.cohesion(edges, z, 4) == pytest.approx([_naive_cohesion(edges, z, t) for t in range(4)])


def test_knn_vote_absorbs_a_token_whose_neighbours_are_all_one_type():
    """A lone token whose every neighbour is in one large type gets positive evidence for joining
    it and negative evidence for joining a type it has no edge to."""
    z = np.array([0] * 6 + [1] * 6 + [2] * 6 + [3])               # type 3: the lone token
    nb = [[1, 2], [0, 2], [0, 1], [4, 5], [3, 5], [3, 7],          # type 0: two groups, one edge to type 1
          [7, 8], [6, 8], [6, 7], [10, 11], [9, 11], [9, 12],     # type 1 alike, one edge to type 2
          [13, 14], [12, 14], [12, 13], [16, 17], [15, 17], [15, 6],
          [3, 4]]                                                  # the lone token: both edges into type 0
    edges = (np.repeat(np.arange(19), 2), np.array(nb).ravel(), np.ones(38))
    vote = L.knn_vote(edges, z, 4, np.array([0, 1]), np.array([3, 3]), "token")
    # p1 = 33/38 of the edges stay in their type; half the edges that reach another type reach type 0
    assert vote[0] == pytest.approx(2 * math.log((33 / 38) / 0.5) / 2)
    assert vote[1] == pytest.approx(2 * math.log((5 / 38) / 0.5) / 2) and vote[1] < 0


def test_near_rate_leaves_out_the_fragments_of_a_type():
    """near_rate of a type: the mean share of their edges that the tokens outside it send into it,
    over those that send it at least one and at most half; tokens that send more (fragments of
    its sign) and the type's own tokens are left out, and a type no such token reaches gets the
    share of one edge of the mean token (N / E)."""
    z = np.array([0, 0, 0, 0, 1, 2, 3, 4, 1])
    nb = [[1, 2, 3, 4], [0, 2, 3, 5], [0, 1, 3, 0], [0, 1, 2, 1],    # type 0: one edge out to type 1, one to 2
          [0, 1, 2, 5],                    # token 4 (type 1): 3/4 into type 0 (left out), 1/4 into type 2
          [0, 4, 6, 6],                    # token 5 (type 2): 1/4 into 0, 1/4 into 1, 1/2 into 3
          [0, 1, 5, 5],                    # token 6 (type 3): 1/2 into 0, 1/2 into 2
          [0, 1, 2, 3, 0, 1],              # token 7 (type 4): all 6 into type 0 (left out); nothing reaches it
          [4, 4, 0, 5]]                    # token 8 (type 1): half inside its own type, 1/4 into 0, 1/4 into 2
    edges = (np.repeat(np.arange(9), [len(n) for n in nb]), np.concatenate(nb), np.ones(38))
    assert L.near_rate(edges, z, 5) == pytest.approx([(1 / 4 + 1 / 2 + 1 / 4) / 3, 1 / 4,
                                                       (1 / 4 + 1 / 4 + 1 / 2 + 1 / 4) / 4, 1 / 2, 9 / 38])


@pytest.mark.parametrize("same_text", ["pairs", "tokens"])
@pytest.mark.parametrize("vote", ["none", "token", "edge", "near", "near_loose"])
@pytest.mark.parametrize("coarse", [False, True], ids=["contexts over the types", "with coarse contexts"])
def test_merge_gain_of_every_pair_against_a_naive_sum(monkeypatch, coarse, vote, same_text):
    """gain = w_lm dL_LM + max(w_dup prior(rank), w_hom log-odds(nearest link) - link_c0) + w_hom same-hand,
    where dL_LM is the larger of the type and the coarse contexts' for pairs that avoid each other;
    with ``vote`` the max also holds w_dup prior(rank) + w_hom knn_vote; same-hand sums the log-odds of
    the pairs in one text, each divided by the larger type's count there with ``same_text: tokens``."""
    x = _line(0.0, 0.3, 1.0, 1.2, 3.0, 3.1, 5.0, 5.6, 8.0, 8.2, 8.9, 9.3)
    z = np.array([0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5])     # types of 1 to 3 tokens
    order = np.array([0, 4, 2, 9, 1, 6, 11, 3, 5, 10, 7, 8])
    texts = [order[:4], order[4:8], order[8:]]
    pair = L.PairModel(a=2.0, b=1.5, n_positive=10)
    # the token graph: each token's 4 nearest tokens, as LMSignClusterer.graph builds (types 0 and 5 have no link)
    d = np.abs(x[:, None, 0] - x[None, :, 0])
    np.fill_diagonal(d, np.inf)
    nb = np.argsort(d, axis=1, kind="stable")[:, :4]
    edges = (np.repeat(np.arange(12), 4), nb.ravel(), d[np.arange(12)[:, None], nb].ravel())
    symbols = np.array([0, 0, 0, 1, 1, 1, 0, 2, 2, 2, 1, 0]) if coarse else None   # coarse context symbols
    w = dict(w_lm=0.7, w_hom=1.3, w_dup=0.9, rank_c0=1.7, link_c0=0.6, context_beta=0.3, avoid_c0=0.5)
    seen, history, logged, out = _merge_round(monkeypatch, z, x, texts, pair, edges, symbols, batch=0.5,
                                              candidates=2, max_rounds=1, vote=vote, same_text=same_text, **w)
    (u, v, gain, limit), = seen
    assert limit == 3                                    # batch 0.5 x 6 types
    # candidates: each type's 2 visually nearest types (no context partners: there is a pair model)
    cen = np.array([x[z == c, 0].mean() for c in range(6)])
    near = {tuple(sorted((a, int(b)))) for a in range(6) for b in np.argsort(np.abs(cen - cen[a]))[1:3]}
    assert sorted(zip(u.tolist(), v.tolist())) == sorted(near) and len(near) < 15
    by_link, by_vote, n_open, n_shared = [], [], 0, 0
    for a, b, g in zip(u, v, gain):
        lm = _naive_lm_gain(z, texts, z, 0.3, a, b)
        if symbols is not None and _naive_avoidance(z, texts, a, b) < -0.5:
            n_open += 1
            lm = max(lm, _naive_lm_gain(z, texts, symbols, 0.3, a, b))
        prior = -1.7 - math.log(_visual_rank(x, z, a, b))
        between = [dd for ii, jj, dd in zip(*edges) if {z[ii], z[jj]} == {a, b}]
        link = 2.0 - 1.5 * min(between) if between else -math.inf
        knn = 0.9 * prior + 1.3 * _naive_knn_vote(edges, z, a, b, vote) if vote != "none" else -math.inf
        by_link.append(1.3 * link - 0.6 > max(0.9 * prior, knn))
        by_vote.append(knn > max(0.9 * prior, 1.3 * link - 0.6))
        share = {t.tobytes(): max((z[t] == a).sum(), (z[t] == b).sum()) if same_text == "tokens" else 1
                 for t in texts}
        n_shared += any(share[t.tobytes()] > 1 and (z[t] == a).any() and (z[t] == b).any() for t in texts)
        hand = sum((2.0 - 1.5 * abs(x[p, 0] - x[q, 0])) / share[t.tobytes()] for t in texts for p in t for q in t
                   if p < q and {z[p], z[q]} == {a, b})
        assert g == pytest.approx(0.7 * lm + max(0.9 * prior, 1.3 * link - 0.6, knn) + 1.3 * hand), (a, b)
    assert 0 < sum(by_link) < len(by_link)              # some pairs scored by their link, some by rank
    # and with the vote, some by the kNN vote; near_loose none here: the near votes that win come from
    # types of 2-3 tokens that fill their kNN slots (cohesion 1), and the lone tokens' do not win
    assert (sum(by_vote) > 0) == (vote in ("token", "edge", "near"))
    assert (n_open > 0) == coarse                       # the coarse contexts were in play
    assert (n_shared > 0) == (same_text == "tokens")    # a pair whose text holds 2+ tokens of one of them
    chosen = L.disjoint_best(u, v, gain, 3)
    assert len(chosen) >= 2
    mapping = np.arange(6)
    for a, b in chosen:
        mapping[b] = a
    assert np.array_equal(out, mapping[z])
    accepted = sum(float(gain[(u == a) & (v == b)][0]) for a, b in chosen)
    record = {"types": 6 - len(chosen), "merges": len(chosen), "best_gain": pytest.approx(float(gain.max())),
              "accepted_gain": pytest.approx(accepted)}
    assert history == [{"round": 1, **record}]
    assert logged == [(record, 1)]


@pytest.mark.parametrize("vote", ["none", "token", "edge", "near", "near_loose"])
def test_merge_gain_without_the_pair_evidence_is_finite(monkeypatch, vote):
    """w_hom = 0 (the ablation's no_pair): a pair without a link keeps the rank prior, a linked pair
    gets max(prior, -link_c0); before, 0 x log-odds(inf) made the gain of unlinked pairs NaN, and
    0 x the near vote's -inf (no vote) would."""
    x = _line(0.0, 0.3, 1.0, 1.2, 3.0, 3.1, 5.0, 5.6, 8.0, 8.2, 8.9, 9.3)
    z = np.array([0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5])
    texts = [np.arange(0, 4), np.arange(4, 8), np.arange(8, 12)]
    i, j = np.triu_indices(12, 1)
    d = np.abs(x[i, 0] - x[j, 0])
    edges = (i[d < 1.5], j[d < 1.5], d[d < 1.5])                 # types 1 and 2 have no link
    seen, *_ = _merge_round(monkeypatch, z, x, texts, L.PairModel(3.0, 1.5, 10), edges, None, batch=0.5,
                            candidates=2, max_rounds=1, w_hom=0.0, w_lm=0.0, w_dup=1.0, rank_c0=1.7, link_c0=0.6,
                            vote=vote)
    (u, v, gain, _), = seen
    if vote == "near":                                            # the case the guard is for: no vote somewhere
        assert np.isinf(L.knn_vote(edges, z, 6, u, v, "near")).any()
    linked = {(int(z[a]), int(z[b])) for a, b in zip(*edges[:2]) if z[a] != z[b]}
    assert np.isfinite(gain).all()
    for a, b, g in zip(u, v, gain):
        prior = -1.7 - math.log(_visual_rank(x, z, a, b))
        assert g == pytest.approx(max(prior, -0.6) if (a, b) in linked else prior), (a, b)
    assert any((a, b) not in linked for a, b in zip(u, v)) and any((a, b) in linked for a, b in zip(u, v))


def test_merge_clean_corpus_gain_context_partners_and_match_bonus(monkeypatch):
    """No pair model: candidates are each type's visual and context nearest; a mutual match whose
    ratio is below match_ratio (strictly) earns match_bonus on top of the rank prior."""
    x = _line(0.0, 0.75, 1.75, 7.0)                      # one token per type
    z = np.arange(4)
    texts = [np.array([0, 1]), np.array([3, 2])]
    seen, history, _, _ = _merge_round(monkeypatch, z, x, texts, None, candidates=1, max_rounds=1,
                                       match_ratio=0.75, match_bonus=2.5, w_lm=0.0)
    (u, v, gain, limit), = seen
    # visual nearest: 0-1, 1-0, 2-1, 3-2; context nearest (left BOS / right EOS alike): 0-3, 3-0, 1-2, 2-1
    assert sorted(zip(u.tolist(), v.tolist())) == [(0, 1), (0, 3), (1, 2), (2, 3)]
    got = dict(zip(zip(u.tolist(), v.tolist()), gain.tolist()))
    # 0 and 1: mutual nearest at ratio 0.75 / min(1.75, 1.0) = 0.75, not below 0.75: no bonus
    assert got[(0, 1)] == pytest.approx(-2.0)
    assert got[(0, 3)] == pytest.approx(-2.0 - math.log(3))
    assert limit == 1 and history == []                  # nothing positive: no merge
    seen, _, _, _ = _merge_round(monkeypatch, z, x, texts, None, candidates=1, max_rounds=1,
                                 match_ratio=0.76, match_bonus=2.5, w_lm=0.0)
    got = dict(zip(zip(seen[0][0].tolist(), seen[0][1].tolist()), seen[0][2].tolist()))
    assert got[(0, 1)] == pytest.approx(-2.0 + 2.5)


def test_merge_goes_down_to_one_type(monkeypatch):
    # two types of tokens that look alike and share every context: they merge, then the loop stops
    x = _line(0.0, 0.01, 0.02, 0.03)
    seen, history, _, out = _merge_round(monkeypatch, np.array([0, 1, 0, 1]), x, [np.arange(4)], None,
                                         match_bonus=5.0, w_lm=0.0, max_rounds=5)
    assert out.tolist() == [0, 0, 0, 0] and len(history) == 1 and len(seen) == 1


def _path_setup(n=40, seed=0):
    """40 tokens on a line, each its own type, in four texts; a token graph of 4 neighbours; three
    fixed neighbour symbols by position on the line."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 10, n))[:, None]
    texts = np.split(rng.permutation(n), [10, 20, 30])
    d = np.abs(x[:, None, 0] - x[None, :, 0])
    np.fill_diagonal(d, np.inf)
    nb = np.argsort(d, axis=1, kind="stable")[:, :4]
    edges = (np.repeat(np.arange(n), 4), nb.ravel(), d[np.arange(n)[:, None], nb].ravel())
    return x, np.arange(n), texts, edges, np.arange(n) * 3 // n


@pytest.mark.parametrize("margin, kept", [(0.0, 1), (1.0, 1), (2.0, 3), (1e9, 3)])
def test_path_evidence_keeps_the_best_state_of_the_merge_path_against_a_rerun_per_round(margin, kept):
    """The state kept against the naive reference: the loop rerun with max_rounds = 0, 1, ..., R,
    each end scored by neighbour_evidence; the best (first of equals) where it beats the end by more
    than the margin, else the end. On this path the best is round 1, 1.30 nats above the end (3)."""
    x, z, texts, edges, symbols = _path_setup()
    pair = L.PairModel(a=2.0, b=1.5, n_positive=10)
    ctx = FitContext(seed=0, progress=False, device="cpu")

    def run(max_rounds, path=None, **params):
        model = get_clusterer("lm", max_rounds=max_rounds, batch=0.2, **params)
        model.edges = edges
        history = []
        return model._merge(z, x, texts, pair, None, history, ctx, path=path, symbols=symbols), history
    end, history = run(1000)
    rounds = len(history)
    states = [run(r)[0] for r in range(rounds + 1)]
    evidence = [L.neighbour_evidence(np.unique(s, return_inverse=True)[1], texts, symbols, 1.0) for s in states]
    best = int(np.argmax(evidence))
    want = best if evidence[best] > evidence[-1] + margin else rounds
    compact = lambda labels: np.unique(labels, return_inverse=True)[1]   # noqa: E731  (types keep their numbers)
    assert (rounds, want) == (3, kept) and np.array_equal(compact(states[-1]), compact(end))
    path = {}
    out, _ = run(1000, path, path_evidence=True, path_margin=margin)
    assert np.array_equal(compact(out), compact(states[want]))
    assert path == {"rounds": rounds, "kept_round": want, "evidence_start": evidence[0],
                    "evidence_end": evidence[-1], "evidence_kept": evidence[want]}


def test_path_evidence_with_an_unreachable_margin_is_the_fit_without_it():
    corpus = hand_split_corpus(n_texts=12, length=20)
    kw = dict(encoder_pair_rounds=0, self_rounds=0, style_alignment=False)
    off, on = fit(corpus, path_evidence=False, **kw), fit(corpus, path_margin=1e9, **kw)   # on: the default
    assert np.array_equal(off.labels, on.labels) and "merge_path" not in off.info
    path = on.info["merge_path"]
    assert path["kept_round"] == path["rounds"] and path["evidence_kept"] == path["evidence_end"]
    assert path["evidence_kept"] == on.info["selection"][[s["pair_ratio"] for s in on.info["selection"]].index(
        on.info["pair_ratio"])]["evidence"]


def test_avoidance_against_loops_and_its_two_extremes():
    rng = np.random.default_rng(3)
    z = rng.integers(5, size=60)
    texts = [np.arange(0, 12), np.arange(12, 20), np.arange(20, 41), np.arange(41, 60)]
    u, v = np.array([0, 0, 1, 2, 3]), np.array([1, 4, 2, 3, 4])
    got = L.avoidance(z, 5, texts, u, v)
    assert got == pytest.approx([_naive_avoidance(z, texts, a, b) for a, b in zip(u, v)], abs=1e-12)
    # two frequent types, each confined to its own half of the texts: strong avoidance
    z = np.r_[np.zeros(30, int), np.ones(30, int)]
    texts = [np.arange(i, i + 10) for i in range(0, 60, 10)]
    assert L.avoidance(z, 2, texts, np.array([0]), np.array([1]))[0] == pytest.approx(-15.0)  # Poisson(0; 30 x 1/2)
    # the same two types mixed in every text: log P(X <= 15 | 15) ~ -0.6, no avoidance
    assert L.avoidance(np.tile([0, 1], 30), 2, texts, np.array([0]), np.array([1]))[0] > -1.0


def test_coarse_symbols_cut_into_the_asked_number_with_kmeans_above_the_linkage_limit():
    x = np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32)
    assert len(np.unique(L.coarse_symbols(x, 7, 20000, seed=0))) == 7
    km = L.coarse_symbols(x, 7, 100, seed=0)             # 300 tokens > 100: k-means
    assert km.shape == (300,) and len(np.unique(km)) == 7
    assert np.array_equal(km, L.coarse_symbols(x, 7, 100, seed=0))


def hand_split_corpus(n_texts=24, length=30, angle=20, noise=10.0, seed=0, successors=None) -> Corpus:
    """Four signs in a Markov chain (each followed by the next or the one after, or by one of
    ``successors[sign]``); texts alternate between two hands, the second drawing every sign turned
    by ``angle`` degrees -- one sign, two forms that never share a text, and every neighbour split
    the same way."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    shapes = ("bar", "ring", "cross", "triangle")
    pictures = {(s, h): np.asarray(Image.fromarray(draw_shape(s, 32)).rotate(angle * h, resample=Image.BILINEAR))
                for s in shapes for h in (0, 1)}
    texts = []
    for t in range(n_texts):
        signs = [int(rng.integers(4))]
        while len(signs) < length:
            nxt = (signs[-1] + 1, signs[-1] + 2) if successors is None else successors[signs[-1]]
            signs.append(int(nxt[int(rng.integers(len(nxt)))]) % 4)
        noisy = [pictures[(shapes[s], t % 2)] + rng.normal(0, noise, (32, 32)) for s in signs]
        texts.append([(np.clip(np.rint(img), 0, 255).astype(np.uint8), shapes[s]) for img, s in zip(noisy, signs)])
    return corpus_of_texts(texts, "hands")


@pytest.mark.parametrize("pair_rounds, gain", [(0, 0.1), (2, 0.05)])
def test_coarse_contexts_join_the_forms_of_a_sign_split_by_hand(pair_rounds, gain):
    # three draws of the corpus; measured mean V gain 0.16 without pair rounds and 0.12 with the
    # default two, whose mined pairs already join the two hands' forms on the first draw (no gain there).
    # self_rounds 0: the coarse contexts alone, not a self-training round on each variant's own types
    # (which would also join the forms; with it the two cases took 205 and 195 s on the Intel Xeon, 82 s
    # together without)
    gains, fewer = [], []
    for seed in range(3):
        corpus = hand_split_corpus(seed=seed)
        gold = corpus.labels()
        # no style alignment: it joins such forms too (the test below), after the merges; no path_evidence: with
        # 4 signs x 2 hands, the selection's 10 evidence symbols split by hand, so its score undoes the joins
        # the coarse contexts make (16 types kept against 11 at seed 0) -- this test is about the coarse contexts;
        # no slant correction either: the gains above were measured before it
        kw = dict(encoder_pair_rounds=pair_rounds, self_rounds=0, style_alignment=False, path_evidence=False,
                  text_deslant=0.0)
        ours = fit(corpus, coarse_contexts=4, **kw)
        fine = fit(corpus, coarse_contexts=0, **kw)                  # contexts over the current types only
        shut = fit(corpus, coarse_contexts=4, avoid_c0=1e9, **kw)    # coarse contexts never opened
        assert np.array_equal(fine.labels, shut.labels)
        assert ours.k_found <= fine.k_found
        fewer.append(ours.k_found < fine.k_found)
        gains.append(v_measure_score(gold, ours.labels) - v_measure_score(gold, fine.labels))
    assert sum(fewer) >= 2 and min(gains) >= 0
    assert np.mean(gains) >= gain


def test_style_alignment_joins_the_forms_the_current_type_contexts_leave_split():
    """Without coarse contexts each hand's forms stay two types; the style pass after the fit reads
    one hand's texts as a cipher of the other's and joins them. The chain has no symmetry (each sign
    has its own in- and out-degree): the cyclic chain of the test above reads the same under a
    rotation of the signs, so no deciphering can tell its signs apart."""
    # measured: K 13 -> 4, 9 -> 4, 12 -> 5 and V 0.71 -> 1.00, 0.77 -> 1.00, 0.74 -> 0.93 (one EM start
    # instead of 8: V 0.65, 1.00, 0.41)
    for seed in range(3):
        corpus = hand_split_corpus(seed=seed, successors={0: (1, 2), 1: (0,), 2: (3,), 3: (0, 1)})
        # no splits: they run after the alignment and may cut a joined type again (one of the three draws on an
        # AVX2-only CPU's float32 encoder: K 18, 11 after the alignment's 7 joins, 12 after a cut), which is
        # not what this tests
        kw = dict(encoder_pair_rounds=0, self_rounds=0, coarse_contexts=0, splits=False)
        on, off = fit(corpus, **kw), fit(corpus, style_alignment=False, **kw)
        assert on.info["style_alignment"]["joined"] == off.k_found - on.k_found > 0
        gold = corpus.labels()
        assert v_measure_score(gold, on.labels) > v_measure_score(gold, off.labels) + 0.1


def test_glyph_features_in_chunks_equal_the_features_built_at_once():
    # a corpus above ``chunk`` images builds its feature blocks a chunk at a time (memory); the
    # result is the same features up to float rounding (variances summed in float64 by chunk)
    from signclust.models.lm_clusterer import LMConfig, glyph_features
    rng = np.random.default_rng(0)
    images = np.zeros((230, 24, 24), np.uint8)
    for i in range(len(images)):                       # strokes of random length and place
        r, c = rng.integers(2, 12, 2)
        images[i, r:r + rng.integers(3, 10), c:c + 3] = 255
        images[i, r:r + 3, c:c + rng.integers(3, 10)] = 200
    cfg = LMConfig(feature_dim=8)
    whole = glyph_features(images, cfg, seed=3, chunk=1000, pca_sample=1000)
    chunked = glyph_features(images, cfg, seed=3, chunk=64, pca_sample=1000)
    assert whole.shape == chunked.shape == (230, 8)
    assert np.allclose(whole, chunked, atol=1e-4 * np.abs(whole).max())


def test_disjoint_best_without_a_limit_takes_every_disjoint_positive_pair():
    from signclust.models.merging import disjoint_best
    u, v = np.array([0, 1, 2, 3, 0]), np.array([1, 2, 3, 4, 4])
    # by gain: (2,3) 9, (0,1) 8, (1,2) 7 (1 and 2 taken), (3,4) 6 (3 taken), (0,4) 5 (0 taken)
    assert disjoint_best(u, v, np.array([8.0, 7.0, 9.0, 6.0, 5.0])) == [(2, 3), (0, 1)]
    assert disjoint_best(u, v, np.array([8.0, 7.0, 9.0, 6.0, 5.0]), limit=1) == [(2, 3)]
    assert disjoint_best(u, v, np.array([8.0, -7.0, -9.0, 6.0, 5.0])) == [(0, 1), (3, 4)]


def test_apply_merges_relabels_the_second_type_of_each_pair():
    from signclust.models.merging import apply_merges
    z = np.array([0, 1, 2, 3, 4, 1, 3])
    assert apply_merges(z, [(2, 3), (0, 1)], 5).tolist() == [0, 0, 2, 2, 4, 0, 2]
    assert apply_merges(z, [], 5).tolist() == z.tolist()


# -- the selection among ratio tests (a noisy corpus) -----------------------------------------------

def test_neighbour_evidence_is_the_sequential_predictive_probability_of_the_neighbours():
    rng = np.random.default_rng(1)
    z, symbols = rng.integers(0, 3, 12), rng.integers(0, 2, 12)
    texts = [np.arange(0, 5), np.arange(5, 12)]
    beta = 0.7
    freq = np.r_[np.bincount(symbols, minlength=2), len(texts)].astype(float)    # symbols 0, 1; boundary 2
    alpha = beta * 3 * freq / freq.sum()
    total = 0.0
    for side in (-1, 1):                     # each type and side predicts its neighbours one by one
        seen = {}
        for t in texts:
            for pos, i in enumerate(t):
                j = pos + side
                sym = symbols[t[j]] if 0 <= j < len(t) else 2
                counts = seen.setdefault(z[i], np.zeros(3))
                total += math.log((alpha[sym] + counts[sym]) / (alpha.sum() + counts.sum()))
                counts[sym] += 1
    assert L.neighbour_evidence(z, texts, symbols, beta) == pytest.approx(total, rel=1e-12)


def test_neighbour_evidence_prefers_the_types_the_neighbours_follow():
    # signs 0, 1, 2 in cycles; each token's symbol is its sign's: the true types predict every
    # neighbour, one type predicts none, and each type split at random in two predicts as well
    # from half the counts
    rng = np.random.default_rng(0)
    texts, z = [], []
    for t in range(20):
        start = int(rng.integers(3))
        texts.append(np.arange(30 * t, 30 * t + 30))
        z += [(start + p) % 3 for p in range(30)]
    truth = np.array(z)
    split = truth * 2 + rng.integers(0, 2, len(truth))

    def evidence(types):
        return L.neighbour_evidence(types, texts, truth, 1.0)
    assert evidence(truth) > evidence(split) > evidence(np.zeros_like(truth))


def test_fit_keeps_the_ratio_whose_types_have_the_highest_evidence(monkeypatch):
    corpus = free_variation_corpus(n_texts=4, length=6)
    x = np.random.default_rng(0).normal(size=(corpus.n_tokens, 3))
    texts = [t for t in corpus.texts() if len(t)]
    monkeypatch.setattr(L.LMSignClusterer, "features", lambda self, c, ctx, **kw: (x, texts, False))
    tried = []
    monkeypatch.setattr(L, "corpus_pair_model", lambda x_, t_, ratio, seed: tried.append(ratio) or ratio)

    graphs = []

    def cluster(self, x_, t_, clean, image_index, pair, ctx, t0=None, graph=None, symbols=None):   # K = 10 x the ratio
        assert ctx.log_metrics is None and not clean                        # candidates log nothing
        graphs.append(graph)
        k = round(pair * 10)
        return ClusterResult(np.arange(len(x_)) % k, x_, {"k_found": k, "setup_s": 0.0, "history": [
            {"round": 1, "types": k + 1, "merges": 1}, {"round": 2, "types": k, "merges": 1}]})
    monkeypatch.setattr(L.LMSignClusterer, "cluster", cluster)
    evidence = {7: -5.0, 8: -1.0, 9: -1.0, 10: -2.0}                        # 0.8 and 0.9 tie
    monkeypatch.setattr(L, "neighbour_evidence", lambda z, t_, symbols, beta: evidence[int(z.max()) + 1])
    logged = []
    ctx = FitContext(seed=0, progress=False, log_metrics=lambda metrics, step: logged.append((metrics, step)))
    result = get_clusterer("lm", self_rounds=0).fit(corpus, ctx)   # one selection (self-training: test_visual_encoder)
    assert tried == [0.7, 0.8, 0.9, 1.0]
    assert graphs[0] is not None and all(g is graphs[0] for g in graphs)   # one kNN graph for all four
    assert result.info["pair_ratio"] == 0.8 and result.k_found == 8         # the best; the first of a tie
    assert [(s["pair_ratio"], s["k"], s["evidence"]) for s in result.info["selection"]] == [
        (0.7, 7, -5.0), (0.8, 8, -1.0), (0.9, 9, -1.0), (1.0, 10, -2.0)]
    assert logged == [({"types": 9, "merges": 1}, 1), ({"types": 8, "merges": 1}, 2)]   # the kept fit's rounds


def test_a_clean_corpus_makes_one_fit_without_a_pair_model(monkeypatch):
    tried = []
    monkeypatch.setattr(L, "corpus_pair_model", lambda *a: tried.append(a) or None)
    result = fit(free_variation_corpus(n_texts=6))
    assert tried == [] and "selection" not in result.info and result.info["pair_model"] is None


def _ewens_log_prob(z, alpha):
    """log P(partition z) under the Chinese restaurant process, told customer by customer: the
    i-th token (0-based) opens a new table with probability alpha / (alpha + i), else joins a
    table of m tokens with probability m / (alpha + i)."""
    seated, logp = {}, 0.0
    for i, t in enumerate(z):
        m = seated.get(t, 0)
        logp += math.log((m if m else alpha) / (alpha + i))
        seated[t] = m + 1
    return logp


@pytest.mark.parametrize("k, n", [(1, 7), (2, 7), (5, 40), (41, 3000), (440, 3000), (2999, 3000)])
def test_crp_concentration_expects_k_tables_among_n_tokens(k, n):
    alpha = L.crp_concentration(k, n)
    assert sum(alpha / (alpha + i) for i in range(n)) == pytest.approx(k, rel=1e-9, abs=1e-6)


def test_crp_concentration_grows_with_k_and_refuses_impossible_counts():
    alphas = [L.crp_concentration(k, 3000) for k in (10, 41, 100, 440)]
    assert alphas == sorted(alphas) and alphas[0] < 2 and 6 < alphas[1] < 7 and alphas[3] > 100
    assert L.crp_concentration(3000, 3000) == pytest.approx(1e12)   # every token alone: only in the limit
    assert L.crp_concentration(1, 3000) == pytest.approx(1e-12)     # one type: alpha -> 0
    for k, n in ((0, 5), (6, 5)):
        with pytest.raises(ValueError, match="crp_concentration: k"):
            L.crp_concentration(k, n)


def test_seat_odds_is_the_change_of_the_partitions_crp_probability():
    """A lone token joining another type changes log P(partition) by log(n_other / alpha); two lone
    tokens by -log alpha; pairs of larger types get 0 (the term is for lone tokens only)."""
    z = np.array([0] * 6 + [1] * 3 + [2, 3, 4] + [5] * 2)
    size = np.bincount(z)
    u, v = np.array([0, 1, 2, 2, 0, 1, 4]), np.array([2, 3, 3, 5, 1, 5, 0])
    alpha = L.crp_concentration(6, len(z))
    got = L.crp_seat_odds(size, u, v)
    for a, b, g in zip(u, v, got):
        if min(size[a], size[b]) > 1:
            assert g == 0.0
            continue
        merged = np.where(z == b, a, z)
        assert g == pytest.approx(_ewens_log_prob(merged, alpha) - _ewens_log_prob(z, alpha)), (a, b)
    assert got[0] == pytest.approx(math.log(6 / alpha)) and got[2] == pytest.approx(-math.log(alpha))


def test_seat_odds_join_an_outlying_token_to_a_frequent_sign_only(monkeypatch):
    """Two frequent signs (20 tokens each, one per text pair) and one token far off the first: the
    visual evidence alone keeps it apart (its link's log-odds are below link_c0's cost), the seat
    odds log(20 / alpha) with alpha for 3 types among 41 tokens tip it into its sign; the gain of
    every other pair is unchanged. Off, and on a clean corpus (no pair model), nothing moves."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0.0, 0.05, 20), rng.normal(10.0, 0.05, 20), [1.6]])[:, None]
    z = np.r_[np.zeros(20, int), np.ones(20, int), 2]
    texts = [np.arange(41)]
    pair = L.PairModel(a=2.0, b=2.0, n_positive=10)
    d = np.abs(x - x.T)
    np.fill_diagonal(d, np.inf)
    nb = np.argsort(d, axis=1, kind="stable")[:, :2]
    edges = (np.repeat(np.arange(41), 2), nb.ravel(), d[np.arange(41)[:, None], nb].ravel())
    common = dict(candidates=2, max_rounds=1, batch=1.0, w_lm=0.0, vote="none", link_c0=0.6)
    off, *_, out_off = _merge_round(monkeypatch, z, x, texts, pair, edges, None, seat_odds=False, **common)
    on, *_, out_on = _merge_round(monkeypatch, z, x, texts, pair, edges, None, seat_odds=True, **common)
    (u, v, g_off, _), (_, _, g_on, _) = off[0], on[0]
    lone = (u == 2) | (v == 2)
    assert np.allclose(g_on[~lone], g_off[~lone])
    assert np.allclose(g_on[lone] - g_off[lone], np.log(20 / L.crp_concentration(3, 41)))
    assert out_off.tolist() == z.tolist()                       # the outlier stays a type of its own
    assert out_on.tolist() == [0] * 20 + [1] * 20 + [0]         # it joins the sign it is nearest to
    clean, *_, out_clean = _merge_round(monkeypatch, z, x, texts, None, None, None, seat_odds=True, **common)
    plain, *_, out_plain = _merge_round(monkeypatch, z, x, texts, None, None, None, seat_odds=False, **common)
    assert np.allclose(clean[0][2], plain[0][2]) and out_clean.tolist() == out_plain.tolist()


# -- a sign's forms on a clean corpus: the two-covariance model and the pass that joins them --------
def _forms(n_signs=40, per_sign=3, dims=4, seed=0, between=25.0, within=0.2):
    """Form features of n_signs signs, per_sign forms each: a centre ~ N(0, between I) plus a form
    offset ~ N(0, within I); labels are the sign of each form."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, np.sqrt(between), (n_signs, dims))
    labels = np.repeat(np.arange(n_signs), per_sign)
    return centres[labels] + rng.normal(0, np.sqrt(within), (len(labels), dims)), labels


def _naive_two_covariance_log_odds(model, a, na, b, nb):
    """log N([a; b] | one centre) - log N(a) - log N(b) in the feature space, by scipy, from the W
    and B that the model's basis and variances stand for (W -> I, B -> diag(between))."""
    from scipy.stats import multivariate_normal
    inv = np.linalg.inv(model.basis)
    w, bb = inv.T @ inv, inv.T @ np.diag(model.between) @ inv
    joint = np.block([[bb + w / na, bb], [bb, bb + w / nb]])
    m = model.mean
    return (multivariate_normal(np.r_[m, m], joint).logpdf(np.r_[a, b])
            - multivariate_normal(m, bb + w / na).logpdf(a) - multivariate_normal(m, bb + w / nb).logpdf(b))


def test_two_covariance_recovers_the_within_and_between_variances():
    feats, labels = _forms(n_signs=600, per_sign=3, dims=2, between=25.0, within=0.2)
    model = L.TwoCovariance.fit(feats, labels, shrink=0.0)
    inv = np.linalg.inv(model.basis)
    w, b = inv.T @ inv, inv.T @ np.diag(model.between) @ inv
    assert np.allclose(np.diag(w), 0.2, rtol=0.1) and abs(w[0, 1]) < 0.02
    assert np.allclose(np.diag(b), 25.0, rtol=0.15)
    assert model.dof == 600 * 2


def test_two_covariance_log_odds_equal_the_gaussian_densities_written_out():
    feats, labels = _forms(n_signs=30, per_sign=2, dims=3, seed=1)
    model = L.TwoCovariance.fit(feats, labels, shrink=0.1)
    rng = np.random.default_rng(2)
    for na, nb in ((1, 1), (2, 1), (1, 3)):
        a, b = rng.normal(0, 3, 3), rng.normal(0, 3, 3)
        got = model.log_odds(model.project(a[None]), np.array([na], float), model.project(b[None]),
                             np.array([nb], float))[0]
        assert got == pytest.approx(_naive_two_covariance_log_odds(model, a, na, b, nb), rel=1e-9, abs=1e-9)
    # two forms of one sign are one sign by a wide margin; forms of two signs are not
    same = model.log_odds(model.project(feats[[0]]), np.ones(1), model.project(feats[[1]]), np.ones(1))[0]
    other = model.log_odds(model.project(feats[[0]]), np.ones(1), model.project(feats[[2]]), np.ones(1))[0]
    assert same > 3 and other < -3


def test_two_covariance_needs_as_many_degrees_of_freedom_as_dimensions():
    feats, labels = _forms(n_signs=3, per_sign=2, dims=4)                  # 3 types of 2 forms: dof 3 < 4
    assert L.TwoCovariance.fit(feats, labels, shrink=0.1) is None
    feats, labels = _forms(n_signs=4, per_sign=2, dims=4)                  # dof 4
    assert L.TwoCovariance.fit(feats, labels, shrink=0.1).dof == 4


def test_form_capacity_is_the_median_forms_of_the_frequent_types():
    forms = np.array([3, 3, 2, 1, 1, 1, 4])
    size = np.array([50, 12, 10, 9, 1, 2, 30])
    assert L.form_capacity(forms, size) == 3                               # median of 3, 3, 2, 4
    assert L.form_capacity(forms, size, min_tokens=40) == 3
    assert L.form_capacity(forms, np.full(7, 9)) == 1                      # no type of 10 tokens


def _naive_occupancy(p: np.ndarray, n: int, f: int) -> float:
    """log P(exactly f distinct forms in n draws with shares p), every sequence of draws enumerated."""
    import itertools
    total = 0.0
    for seq in itertools.product(range(len(p)), repeat=n):
        if len(set(seq)) == f:
            total += float(np.prod(p[list(seq)]))
    return math.log(total) if total > 0 else -math.inf


@pytest.mark.parametrize("shares", [[1 / 3, 1 / 3, 1 / 3], [0.5, 0.3, 0.2], [0.7, 0.3], [0.4, 0.3, 0.2, 0.1]])
def test_form_occupancy_is_the_probability_of_the_forms_seen(shares):
    p = np.array(shares)
    model = L.FormOccupancy(p[::-1])                                   # any order: sorted inside
    n = np.array([n for n in range(1, 7) for f in range(1, len(p) + 1) if f <= n])
    f = np.array([f for n in range(1, 7) for f in range(1, len(p) + 1) if f <= n])
    want = [_naive_occupancy(p, a, b) for a, b in zip(n, f)]
    assert model.log_p(n, f) == pytest.approx(want, rel=1e-9, abs=1e-12)
    # large n: no underflow; one form of three in 49 draws, two in 93 (uniform): the closed forms
    uni = L.FormOccupancy(np.full(3, 1 / 3))
    got = uni.log_p(np.array([49, 93, 142]), np.array([1, 2, 3]))
    assert got[0] == pytest.approx(math.log(3) - 49 * math.log(3))
    assert got[1] == pytest.approx(math.log(3) + 93 * math.log(2 / 3) + math.log1p(-2 * 0.5 ** 93))
    assert got[2] == pytest.approx(math.log1p(-3 * (2 / 3) ** 142 + 3 * (1 / 3) ** 142), abs=1e-12)
    assert uni.log_p(np.array([5]), np.array([4]))[0] == uni.log_p(np.array([5]), np.array([3]))[0]   # f > F: F


def test_form_occupancy_gain_joins_a_frequent_signs_missing_form_not_two_rare_signs():
    uni = L.FormOccupancy(np.full(3, 1 / 3))
    n, f = np.array([93.0, 49.0, 1.0, 1.0]), np.array([2, 1, 1, 1])
    gain = uni.merge_gain(n, f, np.array([0, 2]), np.array([1, 3]))
    # the italic forms (49 tokens, one form) beside the sign's 93 tokens in two forms: likelier joined
    assert gain[0] == pytest.approx(-(math.log(3) - 49 * math.log(3))
                                    - (math.log(3) + 93 * math.log(2 / 3) + math.log1p(-2 * 0.5 ** 93)), rel=1e-9)
    assert gain[0] > 80
    assert gain[1] == pytest.approx(math.log(2 / 3))                  # two lone tokens: nearly neutral


def test_form_occupancy_learns_the_shares_of_the_complete_types():
    # types given as tokens per form: two complete types of >= 10 tokens (sorted shares averaged),
    # one of 9 tokens and one of two forms (both left out)
    model = L.FormOccupancy.fit([np.array([2, 6, 4]), np.array([10, 5, 5]), np.array([3, 3, 3]), np.array([50, 1])], 3)
    assert model.p == pytest.approx([(0.5 + 0.5) / 2, (4 / 12 + 0.25) / 2, (2 / 12 + 0.25) / 2])
    assert L.FormOccupancy.fit([np.array([50, 1])], 3).p == pytest.approx(np.full(3, 1 / 3))   # none: uniform
    # occupancy_model reads the tokens per form of each type from the labels; none above MAX_FORMS forms
    z = np.array([0] * 12 + [1] * 3)
    form = np.array([0] * 6 + [1] * 4 + [2] * 2 + [3] * 3)
    assert L.occupancy_model(z, form, 3).p == pytest.approx([0.5, 4 / 12, 2 / 12])
    assert L.occupancy_model(z, form, L.FormOccupancy.MAX_FORMS + 1) is None


def test_form_pairs_are_the_open_types_that_fit_together():
    rng = np.random.default_rng(0)
    means = rng.normal(0, 1, (8, 2))
    forms = np.array([2, 1, 1, 3, 1, 2, 1, 1], float)
    u, v = L.form_pairs(means, forms, capacity=3, k_nn=10)                 # every open type's every partner
    naive = [(a, b) for a in range(8) for b in range(a + 1, 8) if forms[a] < 3 and forms[b] < 3
             and forms[a] + forms[b] <= 3]
    assert list(zip(u.tolist(), v.tolist())) == naive
    u, v = L.form_pairs(means, forms, capacity=3, k_nn=1)                  # the nearest type with room only
    near = set()
    for a in (a for a in range(8) if forms[a] < 3):
        b = min((c for c in range(8) if c != a and forms[a] + forms[c] <= 3),
                key=lambda c: np.linalg.norm(means[a] - means[c]))
        near.add((min(a, b), max(a, b)))
    assert set(zip(u.tolist(), v.tolist())) == near
    assert len(L.form_pairs(means, np.full(8, 3.0), capacity=3, k_nn=4)[0]) == 0
    # a two-form type whose nearest open type holds two forms too still finds the one-form type beyond
    u, v = L.form_pairs(np.array([[0.0], [0.1], [1.0]]), np.array([2.0, 2.0, 1.0]), capacity=3, k_nn=1)
    assert list(zip(u.tolist(), v.tolist())) == [(0, 2), (1, 2)]


def _forms_corpus(seed=0):
    """Features of a clean corpus, as ``_join_forms`` reads them: 30 frequent signs, each with two
    forms already joined into one type (the typeface's change: a fixed offset), and a rare sign R
    whose two forms are types of their own (R: forms 30 and 62, one token each), and a rare sign Q
    of one form (31; its second, 63, never occurs). Each text: 12 frequent forms at random, in
    random order. Returns x, texts, image_index, the types z and the signs, per token."""
    rng = np.random.default_rng(seed)
    offset = np.array([1.5, -1.0, 0.5, 0.0])
    centres = rng.normal(0, 5, (32, 4))
    form_x = np.concatenate([centres, centres + offset]) + rng.normal(0, 0.05, (64, 4))   # form f: sign f % 32
    form_sign = np.arange(64) % 32
    frequent = [f for f in range(64) if form_sign[f] < 30]
    text_forms = []
    for t in range(40):
        forms = list(rng.choice(frequent, 12, replace=False))
        if t in (3, 17):
            forms.append(30 if t == 3 else 62)                               # R: form 30 in text 3, 62 in text 17
        if t == 25:
            forms.append(31)                                                 # Q: one form
        rng.shuffle(forms)
        text_forms.append(forms)
    z_form = np.array([s if s < 30 else {30: 30, 62: 31, 31: 32, 63: 33}[f] for f, s in enumerate(form_sign)])
    return _tokens_of(text_forms, form_x, z_form, form_sign)


def _tokens_of(text_forms: list, form_x: np.ndarray, z_form: np.ndarray, form_sign: np.ndarray):
    """Texts given as lists of forms -> the tokens' features x, the texts (token indices), the
    image_index (a token's form), the types z and the signs, per token."""
    lengths = [len(forms) for forms in text_forms]
    starts = np.cumsum([0] + lengths)
    texts = [np.arange(a, a + k) for a, k in zip(starts, lengths)]
    image_index = np.array([f for forms in text_forms for f in forms])
    return form_x[image_index].astype(np.float32), texts, image_index, z_form[image_index], form_sign[image_index]


def _watch_form_rounds(monkeypatch):
    """(seen, labellings): each round's candidates and gains as disjoint_best gets them, and the
    round's labelling as apply_merges gets it (the labels u and v refer to)."""
    seen, labellings = [], []
    pick, merge = L.disjoint_best, L.apply_merges

    def spy_pick(u, v, gain, limit=None):
        seen.append((u.copy(), v.copy(), gain.copy()))
        return pick(u, v, gain, limit)

    def spy_merge(z, merges, k):
        labellings.append(z.copy())
        return merge(z, merges, k)
    monkeypatch.setattr(L, "disjoint_best", spy_pick)
    monkeypatch.setattr(L, "apply_merges", spy_merge)
    return seen, labellings


def _assert_form_gains(round_seen, z, x, texts, image_index, start_z, open_types, capacity):
    """Every candidate's gain of one round against w_lm dL_LM + w_hom log-odds - w_dup log K
    + occupancy written out: counts by a loop, the log-odds by scipy from the model fitted (with the
    configured form_shrink) on the pass's first labelling, a type's mean over its forms (not its
    tokens), n its number of forms; the occupancy from the shares of the round's complete types (tokens
    per form sorted, averaged) and, for each type and the two joined, P(exactly its forms seen),
    summed over the sets of that many of the capacity's forms by inclusion-exclusion, written out."""
    import itertools
    u, v, gain = round_seen
    cfg = get_clusterer("lm").cfg
    present = np.unique(image_index)                                     # the forms some token shows
    feats = np.array([x[image_index == f].mean(0) for f in present], dtype=np.float64)
    first = np.unique(start_z, return_inverse=True)[1]
    tc = L.TwoCovariance.fit(feats, np.array([first[image_index == f][0] for f in present]), cfg.form_shrink)
    type_of_form = np.array([z[image_index == f][0] for f in present])
    k = z.max() + 1
    per_form = [np.array([np.sum((z == t) & (image_index == f)) for f in present if np.any((z == t) & (image_index == f))])
                for t in range(k)]
    full = [np.sort(c)[::-1] / c.sum() for c in per_form if len(c) == capacity and c.sum() >= 10]
    shares = np.mean(full, axis=0) if full else np.full(capacity, 1 / capacity)

    def log_p(n, f):                                                     # f of the capacity's forms, n tokens
        total = 0.0
        for s in itertools.combinations(range(capacity), min(f, capacity)):
            total += sum((-1) ** (len(s) - t) * sum(shares[list(sub)]) ** n
                         for t in range(1, len(s) + 1) for sub in itertools.combinations(s, t))
        return math.log(total)

    def occupancy(t):
        return log_p(int(sum(per_form[t])), len(per_form[t]))

    assert {t for pair in zip(u, v) for t in pair} <= set(open_types)
    for a, b, g in zip(u, v, gain):
        fa, fb = np.flatnonzero(type_of_form == a), np.flatnonzero(type_of_form == b)
        lo = _naive_two_covariance_log_odds(tc, feats[fa].mean(0), len(fa), feats[fb].mean(0), len(fb))
        occ = (log_p(int(sum(per_form[a]) + sum(per_form[b])), len(per_form[a]) + len(per_form[b]))
               - occupancy(a) - occupancy(b))
        want = _naive_lm_gain(z, texts, z, 0.1, a, b) + lo - math.log(k) + occ
        assert g == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_join_forms_joins_a_rare_signs_forms_by_what_the_frequent_signs_teach(monkeypatch):
    x, texts, image_index, z, sign = _forms_corpus()
    seen, labellings = _watch_form_rounds(monkeypatch)
    model = get_clusterer("lm")
    history = []
    out, info = model._join_forms(z.copy(), x, texts, image_index, history, FitContext(seed=0, progress=False))
    assert info["form_capacity"] == 2 and info["form_model_dof"] == 30 and info["form_merges"] == 1
    assert len(np.unique(out)) == 32                              # R's two forms are one type; Q stays alone
    assert v_measure_score(sign, out) == pytest.approx(1.0)
    assert len(history) == 1 and history[0]["merges"] == 1
    zz = np.unique(z, return_inverse=True)[1]
    assert np.array_equal(labellings[0], zz)
    _assert_form_gains(seen[0], zz, x, texts, image_index, z, open_types={30, 31, 32}, capacity=2)
    # off, or with too few forms joined to learn from, nothing moves
    off = get_clusterer("lm", join_forms=False)
    assert "form_capacity" not in off.cluster(x, texts, True, image_index, None, FitContext(seed=0)).info
    alone = np.unique(image_index, return_inverse=True)[1]                # every form its own type: capacity 1
    same, info = model._join_forms(alone.copy(), x, texts, image_index, [], FitContext(seed=0))
    assert info == {"form_capacity": 1, "form_model_dof": None, "form_merges": 0}
    assert np.array_equal(same, alone)


def _three_faces_corpus(seed=0):
    """As _forms_corpus with three typefaces: 30 frequent signs of three forms each, joined; a rare
    sign R of three forms (90, 91, 92), two tokens each, each form its own type; a sign Q of one
    form (93). Returns x, texts, image_index, the types z and the signs, per token."""
    rng = np.random.default_rng(seed)
    offsets = np.array([[0.0, 0.0, 0.0, 0.0], [1.5, -1.0, 0.5, 0.0], [-1.0, 0.5, 1.2, 0.3]])
    centres = rng.normal(0, 5, (32, 4))
    form_sign = np.r_[np.repeat(np.arange(30), 3), [30, 30, 30, 31]]                 # forms 0..93
    face = np.r_[np.tile(np.arange(3), 30), [0, 1, 2, 0]]
    form_x = centres[form_sign] + offsets[face] + rng.normal(0, 0.05, (94, 4))
    extra = {2: 90, 9: 90, 14: 91, 21: 91, 27: 92, 33: 92, 36: 93}                 # text -> rare form
    text_forms = []
    for t in range(40):
        forms = [(12 * t + j) % 90 for j in range(12)] + ([extra[t]] if t in extra else [])   # every form shows
        rng.shuffle(forms)
        text_forms.append(forms)
    z_form = np.r_[np.repeat(np.arange(30), 3), [30, 31, 32, 33]]
    return _tokens_of(text_forms, form_x, z_form, form_sign)


def test_join_forms_fills_a_type_up_to_the_capacity_over_rounds(monkeypatch):
    """Capacity 3: two of R's forms join in the first round, the third joins that two-form type in
    the second; the second round's gains read the two-form type's mean over its forms, n = 2."""
    x, texts, image_index, z, sign = _three_faces_corpus()
    seen, labellings = _watch_form_rounds(monkeypatch)
    history = []
    out, info = get_clusterer("lm")._join_forms(z.copy(), x, texts, image_index, history, FitContext(seed=0))
    assert info["form_capacity"] == 3 and info["form_merges"] == 2 and len(history) == 2
    assert len(np.unique(out)) == 32 and v_measure_score(sign, out) == pytest.approx(1.0)   # R one type, Q one
    two = np.unique(labellings[1][np.isin(image_index, [90, 91, 92])])
    assert len(two) == 2                                           # after round 1: a two-form type and one form
    _assert_form_gains(seen[0], labellings[0], x, texts, image_index, z, open_types={30, 31, 32, 33}, capacity=3)
    _assert_form_gains(seen[1], labellings[1], x, texts, image_index, z, open_types={30, 31, 32}, capacity=3)


def test_join_forms_skips_types_that_split_a_form():
    x, texts, image_index, z, _ = _forms_corpus()
    z = z.copy()
    z[np.flatnonzero(image_index == 0)[0]] = z.max() + 1          # one token of form 0 in a type of its own
    out, info = get_clusterer("lm")._join_forms(z.copy(), x, texts, image_index, [], FitContext(seed=0))
    assert info == {"form_capacity": None, "form_model_dof": None, "form_merges": 0}
    assert v_measure_score(z, out) == pytest.approx(1.0)


def test_two_covariance_shrinks_w_towards_its_diagonal():
    rng = np.random.default_rng(3)
    n_signs, cov_w = 800, np.array([[1.0, 0.8], [0.8, 1.0]])
    labels = np.repeat(np.arange(n_signs), 3)
    feats = rng.normal(0, 5, (n_signs, 2))[labels] + rng.multivariate_normal([0, 0], cov_w, len(labels))
    for shrink in (0.0, 0.5):
        inv = np.linalg.inv(L.TwoCovariance.fit(feats, labels, shrink=shrink).basis)
        w = inv.T @ inv
        assert w[0, 1] == pytest.approx((1 - shrink) * 0.8, abs=0.06)
        assert np.allclose(np.diag(w), 1.0, atol=0.1)


def test_two_covariance_floors_a_negative_between_variance_and_refuses_a_zero_w():
    rng = np.random.default_rng(4)
    n_signs = 50
    labels = np.repeat(np.arange(n_signs), 3)
    spread = rng.uniform(0.5, 1.5, n_signs)[labels] * np.tile([-1.0, 0.0, 1.0], n_signs)
    feats = np.c_[rng.normal(0, 5, n_signs)[labels] + rng.normal(0, 0.3, len(labels)), 2.0 + spread]
    model = L.TwoCovariance.fit(feats, labels, shrink=0.0)       # every type's mean y is 2: B's estimate < 0 there
    assert model.between.min() == 1e-3
    a = model.project(feats[[0, 3]])
    assert np.all(np.isfinite(model.log_odds(a[:1], np.ones(1), a[1:], np.ones(1))))
    same = np.repeat(rng.normal(0, 5, (n_signs, 2)), 3, axis=0)    # forms identical within each type: W = 0
    assert L.TwoCovariance.fit(same, labels, shrink=0.1) is None


def test_a_clean_fit_reports_its_form_pass():
    corpus = free_variation_corpus()
    on, off = fit(corpus), fit(corpus, join_forms=False)
    assert on.info["form_capacity"] == 2 and on.info["form_merges"] == 0   # every sign's two forms joined already
    assert np.array_equal(on.labels, off.labels) and "form_capacity" not in off.info


def test_forms_per_type_counts_each_types_distinct_images():
    rng = np.random.default_rng(5)
    z, form = rng.integers(0, 6, 200), rng.integers(0, 9, 200)
    want = [len(set(form[z == t].tolist())) for t in range(7)]            # type 6 holds no token
    assert L.forms_per_type(z, form, 7).tolist() == want


def test_merges_with_a_form_capacity_give_no_type_more_forms():
    """The merges after the form joins: with capacity 1 no two one-form types may merge, though
    the same merges without it join the three signs' two forms each (free_variation_corpus)."""
    corpus = free_variation_corpus()
    model = get_clusterer("lm")
    x, texts, clean = model.features(corpus, FitContext(seed=0, progress=False))
    image_index = corpus.image_index()
    forms = np.unique(image_index, return_inverse=True)[1]
    start = forms.copy()                                                  # one type per form: six
    free = model._merge(start.copy(), x, texts, None, None, [], FitContext(seed=0))
    assert len(np.unique(free)) == 3 and v_measure_score(corpus.labels(), free) == pytest.approx(1.0)
    capped = model._merge(start.copy(), x, texts, None, None, [], FitContext(seed=0), (forms, 1))
    assert np.array_equal(np.unique(capped, return_inverse=True)[1], np.unique(start, return_inverse=True)[1])
    two = model._merge(start.copy(), x, texts, None, None, [], FitContext(seed=0), (forms, 2))
    assert np.array_equal(two, free)


def test_a_clean_fit_ends_where_neither_the_merges_nor_the_form_joins_move_a_type():
    """cyrillic_free as the suite builds it (3000 tokens, seed 0): the form joins change the
    contexts the merges read, so the fit takes turns until neither pass moves a type. After one
    pass of each, as before, merges of positive gain were left (the italic and upright types of
    five signs, e.g. р of 142 tokens in two types): K 46 then, 43 after, 42 of 41 since the forms'
    occupancy joined р's italic type (test_form_occupancy_joins_a_frequent_signs_italic_type)."""
    from signclust.config import section
    from signclust.data import suite
    corpus = suite.build("cyrillic_free", section("prepare"))
    model, ctx = get_clusterer("lm"), FitContext(seed=0, progress=False)
    result = model.fit(corpus, ctx)
    x, texts, _ = model.features(corpus, ctx)
    z, image_index = np.asarray(result.labels), corpus.image_index()
    info = result.info
    assert info["form_turns"] >= 2 and info["form_capacity"] == 3
    joined, again = model._join_forms(z.copy(), x, texts, image_index, [], ctx)
    assert again["form_merges"] == 0 and np.array_equal(joined, z)
    forms = np.unique(image_index, return_inverse=True)[1]
    merged = model._merge(z.copy(), x, texts, None, None, [], ctx, (forms, info["form_capacity"]))
    assert np.array_equal(merged, z)
    assert v_measure_score(corpus.labels(), z) > 0.99 and int(z.max()) + 1 <= 42


def test_form_occupancy_joins_a_frequent_signs_italic_type():
    """cyrillic_free as the suite builds it (seed 0): р's italic form (49 tokens) and its other two
    forms (93) have context evidence of about +1 nat, short of the join's prior; as two signs of three
    typefaces their counts of forms are some 90 nats less likely than as one, and with the occupancy
    the join takes them together. Off (and form_shrink 0.1, the default before), they stay apart."""
    from signclust.config import section
    from signclust.data import suite
    corpus = suite.build("cyrillic_free", section("prepare"))
    on, off = fit(corpus), fit(corpus, form_occupancy=False, form_shrink=0.1)
    name = corpus.tokens["label"].astype(str).to_numpy()
    er = name == "CYRILLIC SMALL LETTER ER"
    assert er.sum() == 142
    assert len(set(np.asarray(on.labels)[er].tolist())) == 1
    assert len(set(np.asarray(off.labels)[er].tolist())) == 2
    assert v_measure_score(corpus.labels(), on.labels) > v_measure_score(corpus.labels(), off.labels) + 0.003


def _stray_form_state():
    """_three_faces_corpus with one stray: sign 1's third form (5) sits in sign 0's type, whose own
    third form (2) is a type of its own, barred from joining it by the capacity (3 forms). Returns
    x, texts, image_index, the types z (compact) and the true types."""
    x, texts, image_index, z_true, sign = _three_faces_corpus()
    z = z_true.copy()
    z[image_index == 5] = z[image_index == 0][0]
    z[image_index == 2] = z_true.max() + 1
    return x, texts, image_index, np.unique(z, return_inverse=True)[1], z_true


def _form_inputs(x, texts, image_index, z):
    """What the form passes read, computed by hand: each form's mean feature, its type, each token's
    form, K, the number of forms, the two-covariance model fitted on every type, each form's context
    counts over the types z, and the context prior."""
    present = np.unique(image_index)
    feats = np.array([x[image_index == f].mean(0) for f in present], dtype=np.float64)
    type_of_form = np.array([z[image_index == f][0] for f in present])
    form_of_token = np.searchsorted(present, image_index)
    k, m = int(z.max()) + 1, len(present)
    model = L.TwoCovariance.fit(feats, type_of_form, 0.1)
    form_left, form_right = L.context_counts(form_of_token, texts, m, z, k)
    return (feats, type_of_form, form_of_token, k, m, model, form_left, form_right,
            L.context_prior(z, len(texts), k, 0.1))


def test_form_move_gains_are_the_objective_after_the_move_less_before():
    """Every candidate move's gain against the objective written out: the context Bayes factors by
    the loop of _naive_lm_gain over a labelling with f its own type, the log-odds by scipy, and the
    join the move frees (the stray's case: form 5 to sign 1's type, then sign 0's type takes form 2)."""
    x, texts, image_index, z, _ = _stray_form_state()
    feats, type_of_form, form_of_token, k, m, model, form_left, form_right, alpha = _form_inputs(x, texts, image_index, z)
    f, b, c, gain = L.form_move_gains(form_left, form_right, alpha, model.project(feats), type_of_form, k,
                                      model, 3, 10, 1.0, 1.0, 1.0)
    assert len(f) and np.all(np.bincount(type_of_form, minlength=k)[type_of_form[f]] >= 2)

    def lo(forms_a, forms_b):
        return _naive_two_covariance_log_odds(model, feats[forms_a].mean(0), len(forms_a),
                                              feats[forms_b].mean(0), len(forms_b))
    for f_, b_, c_, g in zip(f, b, c, gain):
        a_ = type_of_form[f_]
        rest = np.flatnonzero((type_of_form == a_) & (np.arange(m) != f_))
        alone = np.where(form_of_token == f_, k, z)                     # f a type of its own, contexts over z
        want = (_naive_lm_gain(alone, texts, z, 0.1, k, b_) - _naive_lm_gain(alone, texts, z, 0.1, k, a_)
                + lo([f_], np.flatnonzero(type_of_form == b_)) - lo([f_], rest))
        if c_ >= 0:                                                     # the freed join: barred before, gains now
            assert np.sum(type_of_form == a_) + np.sum(type_of_form == c_) > 3 and len(rest) + np.sum(type_of_form == c_) <= 3
            moved = np.where(form_of_token == f_, b_, z)
            want += (_naive_lm_gain(moved, texts, z, 0.1, a_, c_) + lo(rest, np.flatnonzero(type_of_form == c_))
                     - math.log(k))
        assert g == pytest.approx(want, rel=1e-6, abs=1e-6)
    stray = (f == 5) & (b == type_of_form[3])
    assert stray.sum() == 1 and c[stray][0] == type_of_form[2] and gain[stray][0] > 0


def test_move_forms_returns_a_stray_form_to_its_sign_and_frees_the_join():
    x, texts, image_index, z, z_true = _stray_form_state()
    model = get_clusterer("lm")
    out, moves = model._move_forms(z.copy(), x, texts, image_index)
    assert moves == 1 and v_measure_score(z_true, out) == pytest.approx(1.0)
    assert len(np.unique(out)) == len(np.unique(z)) - 1
    # the joins alone cannot: sign 0's type is full, form 2 has nowhere else to go
    joined, _ = model._join_forms(z.copy(), x, texts, image_index, [], FitContext(seed=0))
    assert v_measure_score(z_true, joined) < 1.0
    # a form that moved in an earlier turn stays (the moves end), and the mark is kept
    moved_once = np.zeros(94, bool)
    moved_once[5] = True
    held, n_held = model._move_forms(z.copy(), x, texts, image_index, moved_once)
    others = np.flatnonzero(moved_once & (np.arange(94) != 5))               # what moved instead of 5
    assert n_held == len(others) and 5 not in others
    moved_once = np.zeros(94, bool)
    model._move_forms(z.copy(), x, texts, image_index, moved_once)
    assert moved_once.tolist() == [f == 5 for f in range(94)]
    # a clean state has nothing to move
    same, none = model._move_forms(z_true.copy(), x, texts, image_index)
    assert none == 0 and np.array_equal(same, np.unique(z_true, return_inverse=True)[1])


def _suite_fit_without(corpus_name, form_pass, monkeypatch):
    """A suite corpus as the suite builds it, fitted (seed 0) as configured and with one form pass
    (a method of LMSignClusterer) doing nothing: (on, off, types(result, sign name) -> the set of
    types its tokens fall in, the gold labels)."""
    from signclust.config import section
    from signclust.data import suite
    corpus = suite.build(corpus_name, section("prepare"))
    on = fit(corpus)
    monkeypatch.setattr(L.LMSignClusterer, form_pass, lambda self, z, *args: (z, 0))
    off = fit(corpus)
    name = corpus.tokens["label"].astype(str).to_numpy()

    def types(result, label):
        return set(np.asarray(result.labels)[name == label].tolist())
    return on, off, types, corpus.labels()


def test_a_clean_fit_moves_a_stray_form_out_of_a_frequent_signs_type(monkeypatch):
    """georgian_free as the suite builds it (seed 0): the serif GAN (18 tokens) had joined MAN's
    type, which then held three forms and could not take MAN's DejaVu form (49 tokens). Without the
    moves (the code before them) it stays there."""
    on, off, types, gold = _suite_fit_without("georgian_free", "_move_forms", monkeypatch)
    man, gan = "GEORGIAN LETTER MAN", "GEORGIAN LETTER GAN"
    assert len(types(off, man)) == 2 and types(off, gan) & types(off, man)
    assert len(types(on, man)) == 1 and not types(on, gan) & types(on, man) and on.info["form_moves"] >= 1
    assert v_measure_score(gold, on.labels) > v_measure_score(gold, off.labels) + 0.005
    assert on.info["k_found"] < off.info["k_found"]


def _two_signs_one_type():
    """_three_faces_corpus with signs 0 and 1 (three forms each) in one type: six forms, over the
    capacity of 3. Returns x, texts, image_index, the types z (compact) and the true types."""
    x, texts, image_index, z_true, sign = _three_faces_corpus()
    z = np.where(z_true == 1, 0, z_true)
    return x, texts, image_index, np.unique(z, return_inverse=True)[1], z_true


def test_split_gains_take_the_best_bipartition_of_a_type_over_the_capacity():
    """The split gain of every bipartition written out (the join of its two parts by _naive_lm_gain
    and scipy's log-odds, negated); split_gains returns the best one, and only for the type over
    the capacity."""
    from itertools import combinations
    x, texts, image_index, z, _ = _two_signs_one_type()
    feats, type_of_form, form_of_token, k, m, model, form_left, form_right, alpha = _form_inputs(x, texts, image_index, z)
    out = L.split_gains(form_left, form_right, alpha, model.project(feats), type_of_form, k, model, 3,
                        1.0, 1.0, 1.0)
    assert len(out) == 1 and out[0][0] == type_of_form[0]
    fs = np.flatnonzero(type_of_form == type_of_form[0])
    naive = {}
    for r in range(1, len(fs)):
        for p in combinations(fs.tolist(), r):
            if fs[0] not in p:
                continue
            q = [f for f in fs if f not in p]
            two = np.where(np.isin(form_of_token, q), k, z)              # Q a type of its own, contexts over z
            lo = _naive_two_covariance_log_odds(model, feats[list(p)].mean(0), len(p), feats[q].mean(0), len(q))
            naive[p] = -(_naive_lm_gain(two, texts, z, 0.1, type_of_form[0], k) + lo - math.log(k))
    best = max(naive, key=naive.get)
    assert len(naive) == 2 ** (len(fs) - 1) - 1
    assert sorted(out[0][1].tolist()) == sorted(best) and out[0][2] == pytest.approx(naive[best], rel=1e-6)
    assert sorted(best) == [0, 1, 2] and naive[best] > 0                  # sign 0's three forms, apart from sign 1's


def test_split_forms_parts_two_signs_in_one_type_and_leaves_a_full_type():
    x, texts, image_index, z, z_true = _two_signs_one_type()
    model = get_clusterer("lm")
    out, splits = model._split_forms(z.copy(), x, texts, image_index)
    assert splits == 1 and v_measure_score(z_true, out) == pytest.approx(1.0)
    same, none = model._split_forms(np.unique(z_true, return_inverse=True)[1], x, texts, image_index)
    assert none == 0 and np.array_equal(same, np.unique(z_true, return_inverse=True)[1])


def test_a_clean_fit_splits_two_vowel_signs_out_of_one_type(monkeypatch):
    """devanagari_free as the suite builds it (seed 0; capacity 2): the vowel signs E and II, two
    forms each, sat in one type, and neither had a type of its own to move to."""
    on, off, types, gold = _suite_fit_without("devanagari_free", "_split_forms", monkeypatch)
    e, ii = "DEVANAGARI VOWEL SIGN E", "DEVANAGARI VOWEL SIGN II"
    assert types(off, e) == types(off, ii) and len(types(off, e)) == 1
    assert len(types(on, e)) == 1 and len(types(on, ii)) == 1 and types(on, e) != types(on, ii)
    assert on.info["form_splits"] >= 1 and on.info["k_found"] > off.info["k_found"]
    assert v_measure_score(gold, on.labels) > v_measure_score(gold, off.labels) + 0.005


# -- split moves (``splits``, a noisy corpus) --------------------------------------------------------

def test_two_means_cuts_two_blobs_the_same_way_every_time():
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 0.3, (15, 4)), rng.normal(3, 0.3, (9, 4))]
    side = L.two_means(x)
    assert len(set(side[:15])) == 1 and len(set(side[15:])) == 1 and side[0] != side[-1]
    assert np.array_equal(side, L.two_means(x))
    assert not L.two_means(np.ones((6, 4))).any()                       # nothing to cut: one side
    # the start is the principal axis of the *centred* rows: a shift of the features (here one that a
    # single overall mean would not remove) moves no point across the cut
    assert np.array_equal(L.two_means(x + np.array([100.0, -100.0, 0.0, 0.0])), side)


def _two_signs_in_one_type(shared_texts: bool):
    """Signs A (tokens near x = 0) and B (near x = 5), 8 tokens each, in one type 0 beside a filler
    type 1 (one image); A is always followed by symbol 0, B by symbol 1, as a sign and the next.
    Texts of 8 tokens, two runs of (sign, its follower, two fillers) each. ``shared_texts``: one A
    run and one B run in every text (two signs of one hand); else two A runs in the first 4 texts
    and two B runs in the last 4 (one sign by two hands)."""
    texts, x, z, symbols = [], [], [], []
    for t in range(8):
        texts.append(np.arange(8 * t, 8 * t + 8))
        for run in range(2):
            is_b = run if shared_texts else int(t >= 4)
            x += [[5.0 * is_b + 0.01 * t], [20.0], [20.0], [20.0]]
            z += [0, 1, 1, 1]
            symbols += [2, is_b, 2, 2]
    return np.array(x), np.array(z), texts, np.array(symbols)


def test_split_types_cuts_a_type_of_two_signs_that_share_texts_by_the_evidence_it_gains():
    x, z, texts, symbols = _two_signs_in_one_type(shared_texts=True)
    out, n = L.split_types(z, x, texts, symbols, beta=1.0, margin=2.0, avoid=2.0, fdr=0.05, seed=0)
    sign_b = (x[:, 0] > 2) & (x[:, 0] < 10)
    assert n == 1 and len(np.unique(out)) == 3
    assert len(set(out[z == 0][~sign_b[z == 0]])) == 1 and len(set(out[sign_b])) == 1
    assert out[sign_b][0] != out[(z == 0) & ~sign_b][0]
    gain = L.neighbour_evidence(out, texts, symbols, 1.0) - L.neighbour_evidence(z, texts, symbols, 1.0)
    # the gain is the negative of lm_gain over the symbols for the two halves
    left, right = L.context_counts(out, texts, 3, symbols, 3)
    alpha = L.context_prior(symbols, len(texts), 3, 1.0)
    a, b = out[sign_b][0], out[(z == 0) & ~sign_b][0]
    assert gain == pytest.approx(-float(L.lm_gain(left, right, alpha, np.array([a]), np.array([b]))[0]), rel=1e-9)
    assert gain > 2.0
    # a margin above the gain: nothing is cut
    same, n0 = L.split_types(z, x, texts, symbols, beta=1.0, margin=gain + 0.01, avoid=2.0, fdr=0.05, seed=0)
    assert n0 == 0 and np.array_equal(same, z)


def test_split_types_leaves_halves_that_keep_to_different_texts():
    # the same gain in evidence, but A and B never meet in a text: one sign by two hands
    x, z, texts, symbols = _two_signs_in_one_type(shared_texts=False)
    out, n = L.split_types(z, x, texts, symbols, beta=1.0, margin=2.0, avoid=2.0, fdr=0.05, seed=0)
    assert n == 0 and np.array_equal(out, z)
    cut, n_any = L.split_types(z, x, texts, symbols, beta=1.0, margin=2.0, avoid=1e9, fdr=0.05, seed=0)    # no text test
    assert n_any == 1 and len(np.unique(cut)) == 3


def test_benjamini_hochberg_against_the_step_up_rule_by_hand():
    rng = np.random.default_rng(2)
    for _ in range(200):
        m = int(rng.integers(1, 12))
        p = np.round(rng.random(m) ** 3, 3)
        q = float(rng.choice([0.05, 0.2, 0.5]))
        ranked = sorted(p)
        last = max([i for i in range(1, m + 1) if ranked[i - 1] <= q * i / m], default=0)
        want = p <= ranked[last - 1] if last else np.zeros(m, dtype=bool)
        assert np.array_equal(L.benjamini_hochberg(p, q), want)
    assert L.benjamini_hochberg(np.array([0.01, 0.02, 0.03, 0.5]), 0.05).tolist() == [True, True, True, False]
    assert L.benjamini_hochberg(np.array([0.02, 0.5]), 0.05).tolist() == [True, False]       # 0.02 <= 1 x 0.05 / 2
    assert L.benjamini_hochberg(np.array([0.03, 0.5]), 0.05).tolist() == [False, False]      # 0.03 > 0.025


def test_split_types_random_cuts_hold_chance_cuts_near_their_rate():
    """Contexts that do not depend on the visual halves: a type of 24 tokens (two visual groups of
    12, one token of each in every text) whose neighbours are fillers with symbols drawn at random
    from 10. The margin alone cuts about a fifth of such types by chance (the Dirichlet prior is
    weak); with the p-value against random cuts of the same sizes (one type tried: p <= 0.05), about
    1 in 20."""
    rng = np.random.default_rng(7)
    x = np.r_[np.zeros((12, 1)), np.ones((12, 1))] + rng.normal(0, 0.01, (24, 1))
    x = np.r_[x, np.full((48, 1), 9.0)]                          # 48 fillers of type 1: one image
    z = np.r_[np.zeros(24, int), np.ones(48, int)]
    f = 24 + 4 * np.arange(12)                                   # each text: filler, a, filler, filler, b, filler
    texts = [np.r_[f[t], t, f[t] + 1, f[t] + 2, 12 + t, f[t] + 3] for t in range(12)]
    cuts = {1.0: 0, 0.05: 0}                     # fdr 1: every cut past the margin (the p-values unread)
    for trial in range(300):
        symbols = rng.integers(0, 10, 72)
        for fdr in cuts:
            cuts[fdr] += L.split_types(z, x, texts, symbols, 1.0, 2.0, 2.0, fdr, seed=trial)[1]
    assert cuts[1.0] >= 45 and cuts[0.05] <= 0.08 * 300


def test_splits_off_is_the_fit_without_them_and_on_reports_its_cuts():
    corpus = hand_split_corpus(n_texts=12, length=20)
    kw = dict(encoder_pair_rounds=0, self_rounds=0, style_alignment=False)
    off, on = fit(corpus, splits=False, **kw), fit(corpus, split_margin=1e9, **kw)     # on: the default
    assert np.array_equal(off.labels, on.labels) and "splits" not in off.info
    assert on.info["splits"] == {"k_before": off.info["k_found"], "cuts": 0} and on.info["k_found"] == off.info["k_found"]
