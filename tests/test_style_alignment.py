"""models/style_alignment.py: two styles of texts found from the types that avoid each other, and
one style's own types deciphered into the other's on a known substitution."""
from __future__ import annotations

import numpy as np
import pytest

from signclust.models.style_alignment import align_styles, decipher, style_groups


def markov_texts(n_texts: int, length: int, n_signs: int, seed: int) -> list[np.ndarray]:
    """Texts of a sparse random bigram language over n_signs signs (each sign has 3 likely successors)."""
    rng = np.random.default_rng(seed)
    trans = np.full((n_signs, n_signs), 0.02)
    for s in range(n_signs):
        trans[s, rng.choice(n_signs, 3, replace=False)] += rng.uniform(1, 3, 3)
    trans /= trans.sum(1, keepdims=True)
    out = []
    for _ in range(n_texts):
        s = [int(rng.integers(n_signs))]
        for _ in range(length - 1):
            s.append(int(rng.choice(n_signs, p=trans[s[-1]])))
        out.append(np.array(s))
    return out


def two_styles(n_major=40, n_minor=15, length=40, n_signs=10, restyled=(1, 3, 4, 7), seed=0):
    """Sign sequences written in two styles, as one labelling: the major texts' tokens are labelled by
    their sign; in the minor texts the signs in ``restyled`` are written as types n_signs + sign (their
    own forms), the others as the sign. Returns (labels z, texts as token index arrays, gold, minor mask)."""
    seqs = markov_texts(n_major + n_minor, length, n_signs, seed)
    z, gold, texts, pos = [], [], [], 0
    restyled = set(restyled)
    for j, s in enumerate(seqs):
        minor = j >= n_major
        z += [n_signs + c if minor and c in restyled else c for c in s.tolist()]
        gold += s.tolist()
        texts.append(np.arange(pos, pos + len(s)))
        pos += len(s)
    minor = np.r_[np.zeros(n_major, bool), np.ones(n_minor, bool)]
    return np.array(z), texts, np.array(gold), minor


def test_style_groups_find_the_minor_styles_texts():
    z, texts, _, minor = two_styles()
    split = style_groups(z, texts, int(z.max()) + 1)
    assert split is not None
    assert np.array_equal(split.minor, minor)
    assert split.lambda2 < 0.05                   # the two groups share no marker type
    # the markers are restyled signs, in either style (a sign written alike by both avoids nothing)
    assert set(split.markers.tolist()) <= {1, 3, 4, 7, 11, 13, 14, 17} and len(split.markers) >= 6


def test_decipher_maps_each_restyled_type_to_its_sign():
    z, texts, _, minor = two_styles()
    decoded = decipher(z, texts, int(z.max()) + 1, minor)
    assert sorted(decoded) == [11, 13, 14, 17]
    assert {c: a for c, (a, _) in decoded.items()} == {11: 1, 13: 3, 14: 4, 17: 7}
    assert all(p > 0.5 for _, p in decoded.values())


def test_align_styles_recovers_the_signs():
    z, texts, gold, _ = two_styles()
    aligned, info = align_styles(z, texts)
    assert info["joined"] == 4 and info["minor_texts"] == 15
    assert np.array_equal(np.unique(gold, return_inverse=True)[1], aligned)


def test_one_style_is_left_alone():
    z, texts, gold, _ = two_styles(restyled=())
    aligned, info = align_styles(z, texts)
    assert info == {"lambda2": None, "minor_texts": 0, "decoded": {}, "joined": 0}
    assert np.array_equal(aligned, np.unique(z, return_inverse=True)[1])


def test_a_join_needs_the_posterior_share():
    z, texts, _, _ = two_styles()
    aligned, info = align_styles(z, texts, p_min=1.0 + 1e-9)
    assert info["joined"] == 0 and len(info["decoded"]) == 4
    assert int(aligned.max()) + 1 == 14


@pytest.mark.parametrize("seed", [1, 2])
def test_other_languages_and_sizes(seed):
    z, texts, gold, _ = two_styles(n_major=30, n_minor=12, n_signs=12, restyled=(0, 5, 6, 9, 11), seed=seed)
    aligned, info = align_styles(z, texts)
    assert info["joined"] == 5
    assert np.array_equal(np.unique(gold, return_inverse=True)[1], aligned)


def test_degenerate_labellings_are_left_alone():
    one_type = np.zeros(30, dtype=np.int64)
    texts = [np.arange(i, i + 10) for i in range(0, 30, 10)]
    assert style_groups(one_type, texts, 1) is None
    aligned, info = align_styles(one_type, texts)
    assert info["joined"] == 0 and np.array_equal(aligned, one_type)
    # one-token texts: two frequent types that never share a text avoid each other and split the
    # texts in two, but no text holds a pair of neighbours, so nothing is deciphered or joined
    # (with one hidden state, every decoding would hold all the mass)
    z = np.r_[np.zeros(30, np.int64), np.ones(30, np.int64)]
    single = [np.array([i]) for i in range(60)]
    aligned, info = align_styles(z, single)
    assert info["minor_texts"] == 30 and info["decoded"] == {} and np.array_equal(aligned, z)


def test_lm_joins_a_two_style_labelling_and_recomputes_its_embedding():
    """LMSignClusterer.align_styles: the fit's labels aligned, k_found and the embedding follow them."""
    from signclust.models.base import ClusterResult
    from signclust.models.lm_clusterer import LMSignClusterer
    z, texts, gold, _ = two_styles()
    x = np.random.default_rng(0).normal(size=(len(z), 4))
    model = LMSignClusterer()
    out = model.align_styles(ClusterResult(z, x, {"k_found": 14, "history": []}), x, texts)
    assert np.array_equal(out.labels, np.unique(gold, return_inverse=True)[1])
    assert out.info["k_found"] == 10 and out.info["history"] == []
    assert out.info["style_alignment"] == {"k_before": 14, "lambda2": pytest.approx(align_styles(z, texts)[1]["lambda2"]),
                                           "minor_texts": 15, "joined": 4}
    assert np.array_equal(out.embedding, model._embedding(x, out.labels, texts, 10))
    off = LMSignClusterer(style_p_min=1.0).align_styles(ClusterResult(z, x, {"k_found": 14}), x, texts)
    assert off.info["k_found"] == 14 and off.info["style_alignment"]["joined"] == 0


def test_lm_fit_is_the_fit_without_alignment_then_the_pass(tiny_corpus):
    from signclust.models.base import FitContext
    from signclust.models.lm_clusterer import LMSignClusterer
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=1)
    ctx = FitContext(seed=1, progress=False)
    on = LMSignClusterer(encoder_epochs=0).fit(corpus, ctx)
    off = LMSignClusterer(encoder_epochs=0, style_alignment=False).fit(corpus, ctx)
    aligned, info = align_styles(off.labels, [t for t in corpus.texts() if len(t)])
    assert np.array_equal(on.labels, aligned)
    assert on.info["style_alignment"]["k_before"] == off.info["k_found"]
    assert "style_alignment" not in off.info


def test_restarts_decipher_styles_that_share_no_type():
    """Every sign restyled: no shared type anchors the cipher. EM from the one even start stops in a
    local optimum on one of these draws (seed 3: 1 of 10 right); the most likely of 8 starts reads
    every draw right."""
    right = {}
    for seed in range(4):
        z, texts, _, minor = two_styles(restyled=tuple(range(10)), seed=seed)
        for restarts in (1, 8):
            decoded = decipher(z, texts, int(z.max()) + 1, minor, restarts=restarts)
            assert sorted(decoded) == list(range(10, 20))
            right[seed, restarts] = sum(a == c - 10 for c, (a, _) in decoded.items())
    assert all(right[seed, 8] == 10 for seed in range(4))
    assert min(right[seed, 1] for seed in range(4)) < 10


def test_batched_forward_backward_equals_enumerating_every_hidden_path():
    """The posteriors and log-likelihoods of texts of different lengths, stepped together, against
    the sum over every hidden path of each text on its own."""
    import itertools

    from signclust.models.style_alignment import _Batch, _batch_posteriors
    rng = np.random.default_rng(3)
    h, k = 3, 4
    bigram = rng.random((h + 1, h + 1))
    bigram /= bigram.sum(1, keepdims=True)
    start, trans, stop = bigram[h, :h], bigram[:h, :h], bigram[:h, h]
    emit = rng.random((h, k))
    emit /= emit.sum(1, keepdims=True)
    texts = [np.array([2]), np.array([0, 3, 1, 1]), np.array([3, 0])]
    post, loglik = _batch_posteriors(_Batch.of(texts), start, trans, stop, emit)
    expected_post, expected_ll = [], []
    for t in texts:
        joint = np.zeros((len(t), h))
        total = 0.0
        for path in itertools.product(range(h), repeat=len(t)):
            p = start[path[0]] * emit[path[0], t[0]] * stop[path[-1]]
            for i in range(1, len(t)):
                p *= trans[path[i - 1], path[i]] * emit[path[i], t[i]]
            total += p
            joint[np.arange(len(t)), path] += p
        expected_post.append(joint / total)
        expected_ll.append(np.log(total))
    np.testing.assert_allclose(post, np.concatenate(expected_post), rtol=1e-10)
    np.testing.assert_allclose(loglik, expected_ll, rtol=1e-10)
