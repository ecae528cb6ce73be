"""Independent references: each figure below is derived by hand (the derivation is in the comment
or written out with math/numpy/scipy primitives in the test), never by calling the code under test
twice. Covers the fixed-K protocol's clamping and de-duplication, DeepDPM's Hastings ratios and
M-step, SwAV's Sinkhorn codes and swapped prediction, Two-stage's Super-AND (AND, UE, AUG) and
consistency losses, and IIC."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from scipy.special import gammaln

from signclust.evaluation.metrics import fixed_k_scores
from signclust.models.baselines import deepdpm as dd
from signclust.models.baselines.swav import SwAV, sinkhorn
from signclust.models.baselines.twostage import (AnchorNeighbourhoods, and_loss, iic_loss, instance_pair_loss,
                                                 ue_loss)


# =========================================================================== fixed-K protocol
def _entropy(counts) -> float:
    counts = np.asarray([c for c in counts if c > 0], dtype=float)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def _v_pure(cluster_sizes_by_class: list[list[int]]) -> float:
    """V-measure of a clustering whose clusters are all pure (homogeneity 1): only completeness
    = 1 - H(K|C) / H(K) is below 1; V = 2 c / (1 + c)."""
    n = sum(sum(s) for s in cluster_sizes_by_class)
    h_k = _entropy([s for sizes in cluster_sizes_by_class for s in sizes])
    h_k_given_c = sum(sum(sizes) / n * _entropy(sizes) for sizes in cluster_sizes_by_class)
    c = 1.0 - h_k_given_c / h_k if h_k > 0 else 1.0
    return 2 * c / (1 + c)


# 3 classes x 2 pairs of 1-d points. Within-pair gaps 0.1 .. 0.6 (A: 0.1, 0.5; B: 0.2, 0.6; C: 0.3,
# 0.4), pairs of a class 1 apart, A and B 10 apart, C 100 away. Ward merges the pairs in gap order
# (cost gap^2 / 2 <= 0.18), then pairs within a class (cost >= 1), then A with B, then C.
GAPS = {"A": (0.1, 0.5), "B": (0.2, 0.6), "C": (0.3, 0.4)}
ORIGIN = {"A": 0.0, "B": 10.0, "C": 100.0}


def _fixed_k_case():
    xs, gold = [], []
    for c, name in enumerate("ABC"):
        for j, gap in enumerate(GAPS[name]):
            start = ORIGIN[name] + j * 1.0
            xs += [start, start + gap]
            gold += [c, c]
    return np.array(xs)[:, None], np.array(gold)


def test_fixed_k_mean_by_hand_when_k_true_plus_offsets_clamp():
    """K_true = 3, n = 12: K_true + (-15, -10, -5, 0, 5, 10, 15) clamps to (2, 2, 2, 3, 8, 12, 12);
    the protocol scores each distinct K once: the mean is over K = 2, 3, 8, 12."""
    x, gold = _fixed_k_case()
    v = {2: None, 3: 1.0, 8: None, 12: None}
    # K = 2: {A u B} (8) and {C} (4): completeness 1; homogeneity 1 - H(C|K) / H(C)
    h = 1 - (8 / 12) * math.log(2) / math.log(3)
    v[2] = 2 * h / (1 + h)
    # K = 8: the pairs with gaps 0.5 (A) and 0.6 (B) are still split, every cluster pure
    v[8] = _v_pure([[2, 1, 1], [2, 1, 1], [2, 2]])
    # K = 12: every token alone
    v[12] = _v_pure([[1] * 4, [1] * 4, [1] * 4])
    out = fixed_k_scores(gold, x)
    assert set(out["fixed_k_per_k"]) == {"2", "3", "8", "12"}
    for k, value in v.items():
        assert out["fixed_k_per_k"][str(k)] == pytest.approx(value, abs=1e-12), k
    mean_distinct = float(np.mean(list(v.values())))
    assert out["fixed_k_v_measure"] == pytest.approx(mean_distinct, abs=1e-12)
    assert out["fixed_k_v_at_ktrue"] == 1.0
    # what the de-duplication changes: the plain mean over the 7 clamped offsets weighs K = 2
    # three times and K = 12 twice, a different figure
    clamped = [min(max(2, 3 + o), 12) for o in (-15, -10, -5, 0, 5, 10, 15)]
    assert clamped == [2, 2, 2, 3, 8, 12, 12]
    mean_clamped = float(np.mean([v[k] for k in clamped]))
    assert abs(mean_clamped - mean_distinct) > 0.02
    # a mean, not the best K: the max would be 1.0
    assert out["fixed_k_v_measure"] < max(v.values()) - 0.1


def test_fixed_k_offsets_are_the_protocols_and_other_offsets_are_honoured():
    x, gold = _fixed_k_case()
    only_true = fixed_k_scores(gold, x, offsets=(0,))
    assert only_true["fixed_k_per_k"] == {"3": 1.0} and only_true["fixed_k_v_measure"] == 1.0
    two = fixed_k_scores(gold, x, offsets=(-1, 0))
    h = 1 - (8 / 12) * math.log(2) / math.log(3)
    assert two["fixed_k_v_measure"] == pytest.approx((2 * h / (1 + h) + 1.0) / 2, abs=1e-12)


def test_fixed_k_at_k_true_two_is_the_two_cluster_cut():
    """K_true = 2 (A and B one class, C the other): V at K_true is the K = 2 cut, which Ward gets
    exactly right; K = 3 would split the first class."""
    x, gold = _fixed_k_case()
    gold = (gold == 2).astype(int)
    out = fixed_k_scores(gold, x)
    assert set(out["fixed_k_per_k"]) == {"2", "7", "12"}            # 2 + (-15 .. 15) clamped to [2, 12]
    assert out["fixed_k_v_at_ktrue"] == out["fixed_k_per_k"]["2"] == 1.0


def test_fixed_k_cuts_equal_a_ward_refit_at_every_k():
    """One Ward tree cut at each K gives the clustering a Ward fit at that K gives (V for V), also
    at K = n, which scipy's cut_tree gets wrong when asked for it after a smaller K."""
    from sklearn.datasets import make_blobs
    from sklearn.metrics import v_measure_score

    from signclust.evaluation.metrics import ward_labels
    x, gold = make_blobs(n_samples=20, centers=6, n_features=3, cluster_std=1.5, random_state=1)
    out = fixed_k_scores(gold, x)
    ks = sorted({min(max(2, 6 + o), 20) for o in (-15, -10, -5, 0, 5, 10, 15)})
    assert ks == [2, 6, 11, 16, 20]
    assert set(out["fixed_k_per_k"]) == {str(k) for k in ks}
    for k in ks:
        refit = v_measure_score(gold, ward_labels(x, k)) if k < 20 else v_measure_score(gold, np.arange(20))
        assert out["fixed_k_per_k"][str(k)] == pytest.approx(refit, abs=1e-12), k


# =========================================================================== DeepDPM
def _log_multigamma(a: float, d: int) -> float:
    """log Γ_D(a) = D (D - 1) / 4 log π + sum_{j=1..D} log Γ(a + (1 - j) / 2)."""
    return d * (d - 1) / 4 * math.log(math.pi) + sum(float(gammaln(a + (1 - j) / 2)) for j in range(1, d + 1))


def _niw_log_marginal(x: np.ndarray, m0, kappa: float, nu: float, psi) -> float:
    """Murphy (2007) eq. 266 written out: posterior kappa_n = kappa + n, nu_n = nu + n,
    Psi_n = Psi + S + kappa n / (kappa + n) (xbar - m0)(xbar - m0)^T with S the scatter about xbar."""
    n, d = x.shape
    xbar = x.mean(axis=0)
    scatter = sum(np.outer(r - xbar, r - xbar) for r in x)
    dm = xbar - np.asarray(m0)
    psi_n = np.asarray(psi) + scatter + kappa * n / (kappa + n) * np.outer(dm, dm)
    kappa_n, nu_n = kappa + n, nu + n
    return (-n * d / 2 * math.log(math.pi) + _log_multigamma(nu_n / 2, d) - _log_multigamma(nu / 2, d)
            + nu / 2 * math.log(np.linalg.det(psi)) - nu_n / 2 * math.log(np.linalg.det(psi_n))
            + d / 2 * (math.log(kappa) - math.log(kappa_n)))


X1 = np.array([[0.0, 0.2], [0.3, -0.1], [-0.2, 0.1], [0.1, 0.4]])
X2 = np.array([[2.0, 1.8], [2.4, 2.1], [1.7, 2.2]])
PRIOR = dict(m0=np.array([1.0, 1.0]), kappa=0.5, nu=4.0, psi=np.array([[0.6, 0.1], [0.1, 0.4]]))


def _prior() -> dd.NIWPrior:
    return dd.NIWPrior(**PRIOR)


@pytest.mark.parametrize("alpha", [1.0, 10.0, 0.05])
def test_hastings_split_and_merge_against_explicit_formulas(alpha):
    """DeepDPM eq. (H_s): alpha Γ(N1) f(X1) Γ(N2) f(X2) / (Γ(N) f(X)); H_m its inverse."""
    x = np.concatenate([X1, X2])
    lf = {k: _niw_log_marginal(v, **PRIOR) for k, v in (("1", X1), ("2", X2), ("all", x))}
    log_hs = (math.log(alpha) + math.lgamma(4) + lf["1"] + math.lgamma(3) + lf["2"]
              - math.lgamma(7) - lf["all"])
    log_hm = (math.lgamma(7) + lf["all"]
              - math.log(alpha) - math.lgamma(4) - lf["1"] - math.lgamma(3) - lf["2"])
    sub = np.r_[np.zeros(4, int), np.ones(3, int)]
    assert dd.log_hastings_split(x, sub, _prior(), alpha) == pytest.approx(log_hs, rel=1e-10, abs=1e-10)
    assert dd.log_hastings_merge(X1, X2, _prior(), alpha) == pytest.approx(log_hm, rel=1e-10, abs=1e-10)
    # the two clearly separated groups: a split is favoured for every alpha here
    assert log_hs > 0 > log_hm


def test_niw_log_marginal_against_explicit_formula():
    for x in (X1, X2, np.concatenate([X1, X2]), X1[:1]):
        assert dd.niw_log_marginal(x, _prior()) == pytest.approx(_niw_log_marginal(x, **PRIOR), rel=1e-10)


def _crp_log_prob_by_seating(z, alpha: float) -> float:
    """The Chinese restaurant process told customer by customer: the i-th (0-based) joins an
    occupied table with probability n_table / (alpha + i), a new one with alpha / (alpha + i)."""
    seated: dict = {}
    total = 0.0
    for i, table in enumerate(z):
        total += math.log(seated.get(table, 0) or alpha) - math.log(alpha + i)
        seated[table] = seated.get(table, 0) + 1
    return total


@pytest.mark.parametrize("alpha", [0.3, 10.0])
def test_dp_log_joint_is_crp_by_seating_plus_the_marginals(alpha):
    x = np.concatenate([X1, X2])
    for z in (np.r_[0, 0, 0, 0, 1, 1, 1], np.r_[5, 2, 5, 2, 2, 9, 5], np.zeros(7, int), np.arange(7)):
        expected = _crp_log_prob_by_seating(z, alpha) + sum(
            _niw_log_marginal(x[z == k], **PRIOR) for k in np.unique(z))
        assert dd.dp_log_joint(x, z, _prior(), alpha) == pytest.approx(expected, rel=1e-10, abs=1e-10)


def test_a_split_changes_dp_log_joint_by_its_log_hastings_ratio():
    """The moves climb dp_log_joint: its change under a split is the split's log H_s."""
    x = np.concatenate([X1, X2])
    z = np.r_[0, 0, 1, 1, 1, 1, 1]
    sub = np.r_[0, 0, 0, 1, 1]                              # cluster 1 split into {2, 3, 4} and {5, 6}
    after = z.copy()
    after[5:] = 2
    change = dd.dp_log_joint(x, after, _prior(), 3.0) - dd.dp_log_joint(x, z, _prior(), 3.0)
    assert change == pytest.approx(dd.log_hastings_split(x[2:], sub, _prior(), 3.0), rel=1e-10, abs=1e-10)


def test_hastings_split_with_an_empty_side_counts_gamma_as_one():
    """The authors' convention: an empty sub-cluster contributes Γ(.) f(.) = 1."""
    sub = np.zeros(4, int)
    expected = math.log(2.0) + math.lgamma(4) + _niw_log_marginal(X1, **PRIOR) - math.lgamma(4) \
        - _niw_log_marginal(X1, **PRIOR)
    assert dd.log_hastings_split(X1, sub, _prior(), 2.0) == pytest.approx(expected, abs=1e-10)


def test_m_step_on_a_two_cluster_toy_by_hand():
    """MAP estimates from responsibilities r (soft counts N_k = sum_i r_ik):
    pi_k = (N_k + c) / (N + K c); mu_k = (N_k xbar_k + kappa m0) / (N_k + kappa);
    Sigma_k = (Psi + N_k S_k + kappa N_k / (kappa + N_k) (xbar_k - m0)(xbar_k - m0)^T) / (nu + N_k + D + 2),
    with xbar_k the r-weighted mean and S_k the r-weighted scatter / N_k."""
    x = np.concatenate([X1, X2])
    r = np.zeros((7, 2))
    r[:4, 0] = 1.0
    r[4:, 1] = 1.0
    r[3] = [0.75, 0.25]                       # one soft point
    c, prior = 2.0, _prior()
    pi, mus, covs = dd.map_params(x, r, prior, c)
    m0, kappa, nu, psi = PRIOR["m0"], PRIOR["kappa"], PRIOR["nu"], PRIOR["psi"]
    nks = r.sum(axis=0)
    assert nks.tolist() == [3.75, 3.25]
    np.testing.assert_allclose(pi, [(3.75 + 2) / (7 + 4), (3.25 + 2) / (7 + 4)], rtol=1e-9)
    for k in range(2):
        w, nk = r[:, k], nks[k]
        xbar = sum(w[i] * x[i] for i in range(7)) / nk
        scat = sum(w[i] * np.outer(x[i] - xbar, x[i] - xbar) for i in range(7)) / nk
        mu = (nk * xbar + kappa * m0) / (nk + kappa)
        dm = xbar - m0
        cov = (psi + nk * scat + kappa * nk / (kappa + nk) * np.outer(dm, dm)) / (nu + nk + 2 + 2)
        np.testing.assert_allclose(mus[k], mu, rtol=1e-9)
        np.testing.assert_allclose(covs[k], cov, rtol=1e-8)


def test_m_step_hard_responsibilities_recover_the_two_groups():
    """Hard r, a weak prior: the means are the group means, pi the shares (up to the prior)."""
    x = np.concatenate([X1, X2])
    r = np.zeros((7, 2))
    r[:4, 0] = r[4:, 1] = 1.0
    prior = dd.NIWPrior(m0=np.zeros(2), kappa=1e-6, nu=3.0, psi=np.eye(2) * 1e-6)
    pi, mus, covs = dd.map_params(x, r, prior, 0.0)
    np.testing.assert_allclose(pi, [4 / 7, 3 / 7], rtol=1e-9)
    np.testing.assert_allclose(mus, [X1.mean(0), X2.mean(0)], rtol=1e-5, atol=1e-6)
    # Sigma_k ~ N_k S_k / (nu + N_k + 4): the population covariance scaled by N_k / (N_k + 7)
    np.testing.assert_allclose(covs[0], np.cov(X1.T, bias=True) * 4 / (4 + 7), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(covs[1], np.cov(X2.T, bias=True) * 3 / (3 + 7), rtol=1e-4, atol=1e-6)


# =========================================================================== SwAV
E = math.e


def test_sinkhorn_one_iteration_by_hand():
    """scores [[1, 0], [0, 0]], eps 1: A = exp(S) = [[e, 1], [1, 1]] (samples x prototypes).
    Prototype columns to 1/K each: (e, 1) / (2 (e + 1)) and (1, 1) / 4; then every sample row to 1."""
    q = sinkhorn(torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64), eps=1.0, n_iters=1)
    a, b = E / (2 * (E + 1)), 1 / (2 * (E + 1))
    expected = torch.tensor([[a / (a + 0.25), 0.25 / (a + 0.25)],
                             [b / (b + 0.25), 0.25 / (b + 0.25)]], dtype=torch.float64)
    torch.testing.assert_close(q, expected, atol=1e-12, rtol=0)
    # eps divides the scores: eps = 0.5 is exp(2 S)
    q2 = sinkhorn(torch.tensor([[0.5, 0.0], [0.0, 0.0]], dtype=torch.float64), eps=0.5, n_iters=1)
    torch.testing.assert_close(q2, expected, atol=1e-12, rtol=0)


def test_sinkhorn_converges_to_the_closed_form_2x2_plan():
    """A 2x2 kernel [[a, b], [c, d]] scaled to rows summing to 1 and columns to B/K = 1 is
    [[p, 1 - p], [1 - p, p]] with (p / (1 - p))^2 = a d / (b c)."""
    s = torch.tensor([[0.9, 0.1], [0.3, 0.6]], dtype=torch.float64)
    eps = 0.5
    a, b, c, d = (math.exp(v / eps) for v in (0.9, 0.1, 0.3, 0.6))
    p = math.sqrt(a * d) / (math.sqrt(a * d) + math.sqrt(b * c))
    q = sinkhorn(s, eps=eps, n_iters=500)
    torch.testing.assert_close(q, torch.tensor([[p, 1 - p], [1 - p, p]], dtype=torch.float64), atol=1e-10, rtol=0)
    assert sinkhorn(s.float(), eps=eps, n_iters=3).dtype == torch.float32


class _FixedScores(nn.Module):
    """Stands in for the SwAV net: two views' prototype scores fixed by the test."""

    def __init__(self, view_scores: torch.Tensor):
        super().__init__()
        self.view_scores = view_scores
        self.prototypes = nn.Linear(4, view_scores.shape[-1], bias=False)
        self.w = nn.Parameter(torch.zeros(()))

    def normalize_prototypes(self):
        pass

    def forward(self, x):
        z = torch.zeros(len(x), 4)
        return z, self.view_scores + 0 * self.w


@pytest.mark.parametrize("tau,expected", [
    # view 0 scores 0 -> codes q0 = (1/2, 1/2); view 1 scores I -> q1 = (sigmoid(1), sigmoid(-1)) rows.
    # loss = 1/2 [CE(q0, softmax(S1 / tau)) + CE(q1, softmax(S0 / tau))]; the second term is log 2.
    # tau 1: CE(q0, softmax(1, 0)) = (log(1 + e^-1) + log(1 + e)) / 2
    (1.0, ((math.log(1 + 1 / E) + math.log(1 + E)) / 2 + math.log(2)) / 2),
    # tau 1/2: softmax(2, 0)
    (0.5, ((math.log(1 + math.exp(-2)) + math.log(1 + math.exp(2))) / 2 + math.log(2)) / 2),
])
def test_swav_swapped_prediction_loss_by_hand(tau, expected):
    """Each view's softmax(scores / tau) predicts the *other* view's Sinkhorn codes."""
    view_scores = torch.cat([torch.zeros(2, 2), torch.eye(2)])          # rows: view 0 (2), view 1 (2)
    model = SwAV(epsilon=1.0, sinkhorn_iters=1, temperature=tau, queue_length=0, batch_size=2, lr=0.01)
    net = _FixedScores(view_scores)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    history: list[dict] = []
    queue = torch.zeros(2, 0, 4)
    model._epoch(net, opt, torch.zeros(2, 1, 8, 8), lambda x, gen: x, torch.Generator().manual_seed(0), queue,
                 0, 0, 1, 1, 0, 2, 8, 2, "cpu", history)
    assert history[-1]["loss"] == pytest.approx(expected, abs=1e-6)


# =========================================================================== Two-stage
def test_instance_pair_loss_by_hand():
    """AUG / consistency-preserving loss, B = 2 images, two views each, tau 1. Rows v0 = v2 = e1
    (image 0), v1 = v3 = e2 (image 1). Row 0 sees rows 1, 2, 3 with similarities 0, 1, 0:
    p_pos = e / (e + 2), each of the two negatives 1 / (e + 2). Every row is alike by symmetry."""
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    p_pos, p_neg = E / (E + 2), 1 / (E + 2)
    expected = -math.log(p_pos) - 2 * math.log(1 - p_neg)
    assert float(instance_pair_loss(v, 1.0)) == pytest.approx(expected, abs=1e-6)
    # tau scales the similarities: tau 0.5 -> e^2
    p_pos, p_neg = E ** 2 / (E ** 2 + 2), 1 / (E ** 2 + 2)
    assert float(instance_pair_loss(v, 0.5)) == pytest.approx(-math.log(p_pos) - 2 * math.log(1 - p_neg), abs=1e-6)


def test_instance_pair_loss_asymmetric_case_by_hand():
    """Rows: v0 = e1, v1 = e2 (view 1 of images 0, 1); v2 = (0.6, 0.8), v3 = e1 (view 2). tau 1.
    Row i's distribution is over the other three rows; its positive is row (i + 2) mod 4."""
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [1.0, 0.0]])
    sims = v.numpy() @ v.numpy().T
    total = 0.0
    for i in range(4):
        others = [j for j in range(4) if j != i]
        z = sum(math.exp(sims[i, j]) for j in others)
        pos = (i + 2) % 4
        total += -math.log(math.exp(sims[i, pos]) / z)
        total += -sum(math.log(1 - math.exp(sims[i, j]) / z) for j in others if j != pos)
    assert float(instance_pair_loss(v, 1.0)) == pytest.approx(total / 4, abs=1e-6)


def test_and_and_ue_losses_by_hand():
    """Two rows (tokens 0 and 2) against a memory of 4 tokens, logits already divided by T.
    Token 0 is an anchor whose neighbour is token 1; token 2 is not an anchor.
    AND: row 0 -log((e^1 + e^0) / (e^1 + 3)); row 1 -log(e^2 / (e^0 + e^1 + e^2 + e^0)).
    UE: entropy over the other tokens: row 0 softmax(0, 0, 0) -> log 3; row 1 softmax(0, 1, 0)."""
    logits = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 2.0, 0.0]])
    idx = torch.tensor([0, 2])
    ans = AnchorNeighbourhoods(4, "cpu")
    ans.is_anchor = torch.tensor([True, False, False, False])
    ans.neighbours = torch.tensor([[1], [0], [3], [2]])
    row0 = -math.log((E + 1) / (E + 3))
    row1 = -math.log(E ** 2 / (2 + E + E ** 2))
    assert float(and_loss(logits, idx, ans)) == pytest.approx((row0 + row1) / 2, abs=1e-6)
    # before round 1 there are no neighbourhoods: every token is its own class
    plain = AnchorNeighbourhoods(4, "cpu")
    assert float(and_loss(logits, idx, plain)) == pytest.approx((-math.log(E / (E + 3)) + row1) / 2, abs=1e-6)
    # an anchor flag without it being the row's token changes nothing
    ans.is_anchor = torch.tensor([False, False, False, True])
    assert float(and_loss(logits, idx, ans)) == pytest.approx((-math.log(E / (E + 3)) + row1) / 2, abs=1e-6)
    p = [1 / (E + 2), E / (E + 2), 1 / (E + 2)]
    h1 = -sum(x * math.log(x) for x in p)
    assert float(ue_loss(logits, idx)) == pytest.approx((math.log(3) + h1) / 2, abs=1e-6)


def test_iic_loss_by_hand_on_a_non_trivial_joint():
    """Two samples, two classes: y1 = [(1, 0), (0.5, 0.5)], y2 = [(1, 0), (0, 1)].
    P = (y1_0 y2_0^T + y1_1 y2_1^T) = [[1, 0.5], [0, 0.5]], symmetrised [[1, 0.25], [0.25, 0.5]] / 2.
    -I = -sum P_ij log(P_ij / (P_i P_j))."""
    y1 = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    y2 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = np.array([[1.0, 0.25], [0.25, 0.5]]) / 2
    pi, pj = p.sum(1), p.sum(0)
    mi = sum(p[i, j] * math.log(p[i, j] / (pi[i] * pj[j])) for i in range(2) for j in range(2))
    assert float(iic_loss(y1, y2)) == pytest.approx(-mi, abs=1e-6)
