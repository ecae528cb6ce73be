"""JULE and DeepDPM: the merge / split-merge mathematics on toy inputs, then tiny fits."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.stats import multivariate_t
from sklearn.metrics import v_measure_score

from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.models.base import FitContext, get_clusterer
from signclust.models.baselines import deepdpm as dd
from signclust.models.baselines import jule as jl


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """These nets are tiny: one torch thread (conftest's fixture; tens of times faster on a
    shared 2-core machine)."""
    yield


def _glyph(kind: int, rng: np.random.Generator, size: int = 32) -> np.ndarray:
    """A ring, a plus or three bars, jittered in position, size and stroke width."""
    yy, xx = np.mgrid[0:size, 0:size].astype(float)
    c = size / 2 - 0.5 + rng.uniform(-2, 2, size=2)
    s = size * rng.uniform(0.8, 1.0)
    t = rng.uniform(1.2, 2.2)
    y, x = yy - c[0], xx - c[1]
    if kind == 0:
        img = np.abs(np.hypot(x, y) - 0.33 * s) < t
    elif kind == 1:
        img = (((np.abs(x) < t) & (np.abs(y) < 0.38 * s))
               | ((np.abs(y) < t) & (np.abs(x) < 0.38 * s)))
    else:
        img = np.zeros_like(x, dtype=bool)
        for off in (-0.3, 0.0, 0.3):
            img |= (np.abs(y - off * s) < t) & (np.abs(x) < 0.35 * s)
    return np.clip(img * 255.0 + rng.normal(0, 10, img.shape), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def glyph_corpus() -> Corpus:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 30)
    rng.shuffle(labels)
    return Corpus.from_arrays(np.stack([_glyph(k, rng) for k in labels]), labels=labels)


def _sym_graph(weights: dict, n: int) -> sp.csr_matrix:
    W = np.zeros((n, n))
    for (i, j), w in weights.items():
        W[i, j] = W[j, i] = w
    return sp.csr_matrix(W)


def _naive_gdl(W: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The appendix's eq. 12 written out with explicit sub-matrices."""
    cs = [np.flatnonzero(labels == c) for c in range(labels.max() + 1)]
    A = np.zeros((len(cs), len(cs)))
    for i, ci in enumerate(cs):
        for j, cj in enumerate(cs):
            if i != j:
                A[i, j] = (np.ones(len(ci)) @ W[np.ix_(ci, cj)] @ W[np.ix_(cj, ci)] @ np.ones(len(ci))
                           / len(ci) ** 2
                           + np.ones(len(cj)) @ W[np.ix_(cj, ci)] @ W[np.ix_(ci, cj)] @ np.ones(len(cj))
                           / len(cj) ** 2)
    return A


def _naive_jule_merges(W: np.ndarray, labels: np.ndarray, n_merges: int, kc: int, lam: float):
    """Recompute every affinity from scratch at each timestep and apply eq. 7 literally."""
    labels = labels.copy()
    merges = []
    for _ in range(n_merges):
        act = sorted(set(labels.tolist()))
        pos = {c: i for i, c in enumerate(act)}
        A = _naive_gdl(W, np.array([pos[c] for c in labels]))
        np.fill_diagonal(A, -np.inf)
        kce = min(kc, len(act) - 1)
        best = None
        for i in range(len(act)):
            nbrs = sorted(range(len(act)), key=lambda j: (-A[i, j], j))[:kce]
            v = [A[i, j] for j in nbrs]
            s = v[0] + (lam / (kce - 1) * sum(v[0] - x for x in v[1:]) if kce > 1 else 0.0)
            if best is None or s > best[0]:
                best = (s, i, nbrs[0])
        a, b = sorted((act[best[1]], act[best[2]]))
        labels[labels == b] = a
        merges.append((a, b))
    return merges


# =========================================================================== JULE
def test_gdl_affinity_matches_the_papers_formula():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 3))
    W, _ = jl.affinity_graph(x, ks=4, a=1.0)
    labels = np.unique(rng.integers(0, 9, size=30), return_inverse=True)[1]
    A_path, A = jl.gdl_affinity(W, labels)
    assert np.allclose(A, A.T)
    assert np.allclose(np.diag(A), 0)
    assert np.allclose(A, _naive_gdl(W.toarray(), labels))
    # a directed graph: the path sums themselves are not symmetric, the affinity is
    assert not np.allclose(A_path, A_path.T)


def test_affinity_graph_is_the_papers_knn_graph():
    x = np.array([[0.0], [1.0], [3.0], [7.0]])
    W, idx = jl.affinity_graph(x, ks=1, a=1.0)
    # nearest neighbours 0->1, 1->0, 2->1, 3->2; sigma^2 = mean(1, 1, 4, 16) = 5.5
    assert idx[:, 0].tolist() == [1, 0, 1, 2]
    expected = np.zeros((4, 4))
    for i, j, d2 in [(0, 1, 1), (1, 0, 1), (2, 1, 4), (3, 2, 16)]:
        expected[i, j] = math.exp(-d2 / 5.5)
    assert np.allclose(W.toarray(), expected)
    # following nearest neighbours links all four into one chain
    assert len(set(jl.nn_chain_init(idx).tolist())) == 1


def test_jule_merge_order_on_toy_graph():
    """Two tight triangles {0,1,2}, {3,4,5} and a weaker chain 6-7-8-9 hanging off node 2.

    Singletons: A(i, j) = 2 w_ij^2; with K_c = 2, lambda = 1 the score is 2 A1 - A2.
      t1: node 1: A1 = A(1,0) = 1.62, A2 = A(1,2) = 0.50 -> 2.74 (best)  => merge (0, 1)
      t2: C={0,1}: A(C,2) = (0.85+0.8)^2/4 + (0.85^2+0.8^2) = 2.0431 -> 4.086 => (0, 2)
      t3: node 4: 2*1.5488 - 1.2168 = 1.881 beats node 3 (1.720), node 6 (0.9) => (3, 4)
      t4: C={3,4}: A(C,5) = (0.83+0.78)^2/4 + (0.83^2+0.78^2) = 1.9453, no rival => (3, 5)
      t5: the triangles are done; node 6: 2*0.5 - A({0,1,2},6) = 1 - 0.1 = 0.9 => (6, 7)
      t6: C={6,7}: A(C,8) = 0.2025/4 + 0.2025 = 0.2531, A(C,{0,1,2}) = 0.0325 -> 0.474,
          but node 9: 2*0.32 - 0 = 0.64 wins                                  => (8, 9)
      t7: A({6,7},{8,9}) = 0.2025/4 * 2 = 0.1013 beats the 0.0325 link to the triangle => (6, 8)
    """
    W = _sym_graph({(0, 1): .9, (0, 2): .85, (1, 2): .8, (3, 4): .88, (3, 5): .83, (4, 5): .78,
                    (6, 7): .5, (7, 8): .45, (8, 9): .4, (2, 6): .3}, 10)
    labels, merges = jl.agglomerate(W, np.arange(10), 7, kc=2, lam=1.0, kc_min_clusters=0)
    assert merges == [(0, 1), (0, 2), (3, 4), (3, 5), (6, 7), (8, 9), (6, 8)]
    assert labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2]


def test_local_structure_term_prefers_an_isolated_pair():
    """Fig. 3: b-c is the closest pair but sits in a dense region (b-d, c-d nearly as close);
    e-f is slightly farther apart and alone. Plain linkage merges b-c, eq. 7 merges e-f."""
    W = _sym_graph({(0, 1): 1.0, (0, 2): 0.9 ** .5, (1, 2): 0.9 ** .5, (3, 4): 0.95 ** .5}, 5)
    assert jl.agglomerate(W, np.arange(5), 1, kc=2, lam=0.0)[1] == [(0, 1)]
    assert jl.agglomerate(W, np.arange(5), 1, kc=2, lam=1.0)[1] == [(3, 4)]
    # the authors' code drops the local term once few clusters remain
    assert jl.agglomerate(W, np.arange(5), 1, kc=2, lam=1.0, kc_min_clusters=100)[1] == [(0, 1)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_affinity_updates_match_recomputation(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(36, 4))
    W, _ = jl.affinity_graph(x, ks=5, a=1.0)
    labels = np.unique(rng.integers(0, 16, size=36), return_inverse=True)[1]
    _, fast = jl.agglomerate(W, labels, 10, kc=3, lam=1.0, kc_min_clusters=0)
    assert fast == _naive_jule_merges(W.toarray(), labels, 10, kc=3, lam=1.0)


def test_merge_step_falls_back_to_centroids_without_edges():
    W = _sym_graph({(0, 1): 0.9}, 4)
    feats = np.array([[0.0], [0.1], [5.0], [5.2]])
    state = jl.GDLAgglomeration(W, np.arange(4), kc=2, lam=1.0, features=feats)
    assert jl.merge_step(state) == (0, 1)
    assert jl.merge_step(state) == (2, 3)          # no edge left: closest centroids


def test_weighted_triplet_loss():
    f = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    lab = torch.tensor([0, 0, 1, 1])
    loss, n = jl.weighted_triplet_loss(f, lab, gamma=2.0, margin=0.2, n_neg=2, negatives="nearest")
    assert n == 2 * 2 and float(loss) == 0.0       # positives coincide, negatives at d^2 = 2
    swapped = torch.tensor([0, 1, 0, 1])
    # anchor 0: positive 2 at d^2 = 2; its nearest other-cluster sample is 1, at d^2 = 0
    loss, n = jl.weighted_triplet_loss(f, swapped, gamma=2.0, margin=0.2, n_neg=1, negatives="nearest")
    assert n == 2 and float(loss) == pytest.approx(2 * 2.0 - 0.0 + 0.2)
    loss, n = jl.weighted_triplet_loss(f, swapped, gamma=2.0, margin=0.2, n_neg=2, negatives="nearest")
    assert n == 4 and float(loss) == pytest.approx((4.2 + 2.2) / 2)
    loss, n = jl.weighted_triplet_loss(f, torch.arange(4), gamma=2.0)
    assert n == 0 and float(loss) == 0.0


_JULE_TINY = dict(width=8, feat_dim=32, epochs_per_period=3, batch_size=32, ks=10, eta=0.5)


def test_jule_fit_finds_the_glyph_types(glyph_corpus):
    m = get_clusterer("jule", **_JULE_TINY)
    assert m.needs_k
    r = m.fit(glyph_corpus, FitContext(seed=0, n_clusters=3, progress=False))
    assert r.labels.shape == (glyph_corpus.n_tokens,)
    assert r.embedding.shape == (glyph_corpus.n_tokens, 32)
    assert r.info["k_found"] == 3 and r.k_found == 3
    assert r.info["k_history"][0] > 3 and r.info["k_history"][-1] == 3
    assert v_measure_score(glyph_corpus.labels(), r.labels) > 0.8
    r2 = get_clusterer("jule", **_JULE_TINY).fit(
        glyph_corpus, FitContext(seed=0, n_clusters=3, progress=False))
    assert np.array_equal(r.labels, r2.labels)
    assert np.allclose(r.embedding, r2.embedding)


def test_jule_needs_k_and_rejects_unknown_params(glyph_corpus):
    with pytest.raises(UserError, match="bogus"):
        get_clusterer("jule", bogus=1)
    with pytest.raises(UserError):
        get_clusterer("jule", **_JULE_TINY).fit(glyph_corpus, FitContext(seed=0, progress=False))
    assert set(jl.JULE.PRESETS["paper"]) == set(jl.JULE.PARAMS)


# =========================================================================== DeepDPM
def _prior(x: np.ndarray) -> dd.NIWPrior:
    return dd.NIWPrior.from_data(x, kappa=1e-4, psi_choice="isotropic", psi_scale=0.005)


def test_niw_marginal_equals_product_of_student_t_predictives():
    """Chain rule: log f(X) = sum_i log p(x_i | x_<i), each a multivariate Student t."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 3)) @ np.array([[1.0, 0.3, 0.0], [0.0, 0.7, 0.2], [0.0, 0.0, 0.5]])
    prior = dd.NIWPrior(m0=np.array([0.1, -0.2, 0.0]), kappa=0.5, nu=5.0, psi=np.diag([0.5, 1.0, 2.0]))
    total = 0.0
    for i in range(len(x)):
        kn, nun, mn, psin = prior.posterior(x[:i])
        df = nun - 3 + 1
        total += multivariate_t(loc=mn, shape=psin * (kn + 1) / (kn * df), df=df).logpdf(x[i])
    assert dd.niw_log_marginal(x, prior) == pytest.approx(total, rel=1e-9, abs=1e-9)
    assert dd.niw_log_marginal(x[:0], prior) == 0.0


def test_split_accepted_for_a_bimodal_cluster():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-3, 1, size=(150, 2)), rng.normal(3, 1, size=(150, 2))])
    sub = np.r_[np.zeros(150, int), np.ones(150, int)]
    assert dd.log_hastings_split(x, sub, _prior(x), alpha=10.0) > 0
    # the 2-means sub-clusters DeepDPM starts from find the same split
    assert dd.log_hastings_split(x, dd.two_means_1d(x), _prior(x), alpha=10.0) > 0


def test_split_rejected_for_a_unimodal_blob():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    sub = dd.two_means_1d(x)                        # the best 2-way cut along the main axis
    assert 100 < (sub == 0).sum() < 200
    assert dd.log_hastings_split(x, sub, _prior(x), alpha=10.0) < 0


def test_merge_accepted_for_two_halves_of_one_blob_and_rejected_for_two_blobs():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    sub = dd.two_means_1d(x)
    prior = _prior(x)
    h = dd.log_hastings_merge(x[sub == 0], x[sub == 1], prior, alpha=10.0)
    assert h > 0
    assert h == pytest.approx(-dd.log_hastings_split(x, sub, prior, alpha=10.0))
    far = np.concatenate([x, x + 8.0])
    assert dd.log_hastings_merge(far[:300], far[300:], _prior(far), alpha=10.0) < 0


_DPM_FAST = dict(init_k=1, max_epochs=90, start_computing_params=5, start_sub_clustering=10,
                 start_splitting=15, split_merge_every=10, batch_size=32)


def test_deepdpm_recovers_k_on_three_blobs():
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0, 0, 0], [8, 0, 0, 0], [0, 8, 0, 0]], dtype=float)
    y = np.repeat(np.arange(3), 100)
    x = centres[y] + rng.normal(size=(300, 4))
    x = (x - x.mean(axis=0)) / x.std()
    cfg = {**dd.DeepDPM.DEFAULTS, **_DPM_FAST}
    gen = torch.Generator()
    gen.manual_seed(0)
    torch.manual_seed(0)
    run = dd._DPMRun(x, cfg, 0, torch.device("cpu"), gen)
    run.train(FitContext(seed=0, progress=False))
    labels = run.predict()
    assert abs(len(np.unique(labels)) - 3) <= 1
    assert v_measure_score(y, labels) > 0.9
    assert run.k_history[0] == 1 and any(m["type"] == "split" for m in run.moves)


def test_deepdpm_fit_infers_k_without_being_told(glyph_corpus):
    m = get_clusterer("deepdpm", feat_dim=8, **_DPM_FAST)
    assert not m.needs_k
    r = m.fit(glyph_corpus, FitContext(seed=0, progress=False))
    assert r.labels.shape == (glyph_corpus.n_tokens,)
    assert r.embedding.shape == (glyph_corpus.n_tokens, 8)
    assert 2 <= r.info["k_found"] <= 4
    assert r.info["k_history"][0] == 1 and len(r.info["k_history"]) == 90
    assert v_measure_score(glyph_corpus.labels(), r.labels) > 0.6
    # same seed, same labels; and K_true, if given, is only reported
    r2 = get_clusterer("deepdpm", feat_dim=8, **_DPM_FAST).fit(
        glyph_corpus, FitContext(seed=0, n_clusters=40, progress=False))
    assert np.array_equal(r.labels, r2.labels)
    assert r2.info["k_true"] == 40


def test_deepdpm_rejects_unknown_params():
    with pytest.raises(UserError, match="bogus"):
        get_clusterer("deepdpm", bogus=1)
    with pytest.raises(UserError):
        get_clusterer("deepdpm", features="pixels")
    assert set(dd.DeepDPM.PRESETS["paper"]) == set(dd.DeepDPM.PARAMS)
