"""Merge moves for a Dirichlet-process mixture of diagonal Gaussians (the `dpgmm` row's inference).

scikit-learn's variational DP-GMM, started from a k-means fit of its truncation (400 components),
prunes almost nothing: coordinate ascent cannot empty a component that owns a few tokens, so K
stays wherever the start put it (126 on Fashion-MNIST-3k, 394 on latin_hands; one broad
component swallows the rest: 996 of cypriot's 1728 tokens). The DP-GMM the DeepDPM paper compares
with is memoized VB (moVB, Hughes & Sudderth 2013), which adds *merge moves*: two components are
merged when that raises the objective. This module does the hard-assignment form of those moves
under the same conjugate prior as scikit-learn's defaults:

    each dimension d of a component:  precision tau_d ~ Gamma(a0, b0_d),  mu_d ~ N(m0_d, 1 / (k0 tau_d))
    m0 = the data mean, k0 = 1 (``mean_precision_prior``), b0_d = a0 x var_d (``covariance_prior``
    = the data variances), a0 = dof / 2
    partition:  Chinese restaurant process with concentration alpha

One change from scikit-learn's defaults: dof = 2, not D. D is the least a Wishart prior on a
*full* covariance allows; a diagonal model puts a Gamma on each variance, proper for any dof > 0.
With dof = D = 20 every component carries 10 pseudo-observations of the *whole data's* variance
in every dimension, so tight components look wide and merging them costs little: on three
separate blobs (PCA-20, 60 tokens each) the merges keep 2 components (a test checks dof = 2 keeps 3).

    log p(X, z) = sum_c [ log alpha + log Gamma(n_c) + log p(X_c) ] + const

with p(X_c) the closed-form marginal likelihood of a component's tokens (Normal-Gamma, below).
From k-means over-clustering, rounds alternate (1) greedy merges of nearby components while
log p(X, z) rises and (2) reassignment sweeps: every token to the component with the largest
n_c x posterior predictive density (Student-t). K is where that stops.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from signclust.models.merging import apply_merges, disjoint_best


@dataclass
class NormalGammaPrior:
    m0: np.ndarray          # (D,) prior mean
    k0: float               # pseudo-observations of the mean
    a0: float               # Gamma shape of each precision
    b0: np.ndarray          # (D,) Gamma rates

    @classmethod
    def from_data(cls, x: np.ndarray, k0: float = 1.0, dof: float = 2.0) -> "NormalGammaPrior":
        """Mean = the data mean, prior variances = the data variances (scikit-learn's defaults),
        ``dof`` pseudo-observations of each variance."""
        a0 = dof / 2.0
        return cls(x.mean(0), float(k0), float(a0), a0 * np.maximum(x.var(0), 1e-12))


def component_stats(x: np.ndarray, z: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sufficient statistics per component: counts (k,), sums (k, D), sums of squares (k, D)."""
    n = np.bincount(z, minlength=k).astype(np.float64)
    s1 = np.zeros((k, x.shape[1]))
    np.add.at(s1, z, x)
    s2 = np.zeros((k, x.shape[1]))
    np.add.at(s2, z, x * x)
    return n, s1, s2


def _posterior(n, s1, s2, prior: NormalGammaPrior):
    """(k_n, a_n, m_n, b_n) of the Normal-Gamma posterior; n (...,), s1/s2 (..., D)."""
    n = n[..., None]
    mean = s1 / np.maximum(n, 1e-300)
    ss = np.maximum(s2 - n * mean ** 2, 0.0)                 # scatter about the component mean
    kn, an = prior.k0 + n, prior.a0 + n / 2
    mn = (prior.k0 * prior.m0 + s1) / kn
    bn = prior.b0 + 0.5 * ss + prior.k0 * n * (mean - prior.m0) ** 2 / (2 * kn)
    return kn, an, mn, bn


def log_marginal(n: np.ndarray, s1: np.ndarray, s2: np.ndarray, prior: NormalGammaPrior) -> np.ndarray:
    """log p(X_c) of each component's tokens, summed over the D independent dimensions."""
    kn, an, _, bn = _posterior(n, s1, s2, prior)
    return (-n[..., None] / 2 * np.log(2 * np.pi) + 0.5 * np.log(prior.k0 / kn)
            + prior.a0 * np.log(prior.b0) - an * np.log(bn) + gammaln(an) - gammaln(prior.a0)).sum(-1)


def log_predictive(x: np.ndarray, n: np.ndarray, s1: np.ndarray, s2: np.ndarray,
                   prior: NormalGammaPrior) -> np.ndarray:
    """(N, k) log posterior predictive density of each token under each component: a Student-t
    per dimension with 2 a_n degrees of freedom, location m_n, scale^2 b_n (k_n + 1) / (a_n k_n)."""
    kn, an, mn, bn = _posterior(n, s1, s2, prior)            # (k, 1), (k, 1), (k, D), (k, D)
    nu, scale2 = 2 * an, bn * (kn + 1) / (an * kn)
    const = (gammaln((nu + 1) / 2) - gammaln(nu / 2) - 0.5 * np.log(nu * np.pi * scale2)).sum(-1)  # (k,)
    out = np.empty((len(x), len(n)))
    for c in range(len(n)):                                  # (N, D) at a time: memory O(N D)
        t = (x - mn[c]) ** 2 / scale2[c]
        out[:, c] = const[c] - ((nu[c] + 1) / 2 * np.log1p(t / nu[c])).sum(-1)
    return out


def merge_moves(x: np.ndarray, z: np.ndarray, prior: NormalGammaPrior, alpha: float,
                candidates: int = 10) -> np.ndarray:
    """Greedy merges while log p(X, z) rises: each round scores every component against its
    ``candidates`` nearest components (by mean) and applies the best disjoint positive merges."""
    from scipy.spatial.distance import cdist
    z = np.unique(z, return_inverse=True)[1]
    while True:
        k = int(z.max()) + 1
        if k < 2:
            return z
        n, s1, s2 = component_stats(x, z, k)
        own = log_marginal(n, s1, s2, prior)
        d = cdist(s1 / n[:, None], s1 / n[:, None])
        np.fill_diagonal(d, np.inf)
        partners = np.argsort(d, axis=1)[:, :min(candidates, k - 1)]
        u = np.repeat(np.arange(k), partners.shape[1])
        v = partners.ravel()
        u, v = np.unique(np.stack([np.minimum(u, v), np.maximum(u, v)], 1), axis=0).T
        # change of log p(X, z): one component instead of two (CRP: one log alpha fewer)
        gain = (log_marginal(n[u] + n[v], s1[u] + s1[v], s2[u] + s2[v], prior) - own[u] - own[v]
                + gammaln(n[u] + n[v]) - gammaln(n[u]) - gammaln(n[v]) - np.log(alpha))
        merges = disjoint_best(u, v, gain)
        if not merges:
            return z
        z = np.unique(apply_merges(z, merges, k), return_inverse=True)[1]


def reassign(x: np.ndarray, z: np.ndarray, prior: NormalGammaPrior, sweeps: int = 5) -> np.ndarray:
    """Hard sweeps: every token to argmax_c n_c p(x | X_c) (the CRP's seat-choice weight times
    the posterior predictive), all tokens at once, until nothing moves or ``sweeps`` run out."""
    for _ in range(sweeps):
        z = np.unique(z, return_inverse=True)[1]
        n, s1, s2 = component_stats(x, z, int(z.max()) + 1)
        new = (log_predictive(x, n, s1, s2, prior) + np.log(n)[None]).argmax(1)
        if np.array_equal(new, z):
            break
        z = new
    return np.unique(z, return_inverse=True)[1]


def log_joint(x: np.ndarray, z: np.ndarray, prior: NormalGammaPrior, alpha: float) -> float:
    """log p(X, z) up to a constant of the data size: what the merge moves climb."""
    z = np.unique(z, return_inverse=True)[1]
    n, s1, s2 = component_stats(x, z, int(z.max()) + 1)
    return float((np.log(alpha) + gammaln(n) + log_marginal(n, s1, s2, prior)).sum())


def fit_dp_merge(x: np.ndarray, k_start: int, alpha: float, seed: int, rounds: int = 10,
                 dof: float = 2.0) -> tuple[np.ndarray, dict]:
    """k-means into ``k_start`` components, then rounds of merges and reassignment sweeps until
    the partition stops changing. Returns labels 0..K-1 and the history of (K, log p(X, z))."""
    from signclust.models.baselines._nets import faiss_kmeans
    x = np.asarray(x, dtype=np.float64)
    prior = NormalGammaPrior.from_data(x, dof=dof)
    z = faiss_kmeans(x.astype(np.float32), int(min(k_start, len(x))), seed=seed, niter=20)[0]
    z = np.unique(z, return_inverse=True)[1]
    history = [(int(z.max()) + 1, log_joint(x, z, prior, alpha))]
    for _ in range(rounds):
        new = reassign(x, merge_moves(x, z, prior, alpha), prior)
        history.append((int(new.max()) + 1, log_joint(x, new, prior, alpha)))
        if len(new) == len(z) and np.array_equal(new, z):
            break
        z = new
    return z, {"history": history}
