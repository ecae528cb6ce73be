"""DeepDPM (Ronen, Finder & Freifeld, CVPR 2022): deep clustering that infers K with
split/merge moves under a Dirichlet-process Gaussian mixture (seed 004).

On fixed features (codes) x_i in R^D:

- Clustering net f_cl: MLP (one hidden layer) -> softmax over the current K clusters, trained
  with L_cl = KL(r^E || r) to the E-step responsibilities r^E_ik ∝ pi_k N(x_i; mu_k, Sigma_k).
- Sub-clustering nets f_sub^k: one small MLP per cluster -> softmax over 2 sub-clusters, trained
  on the points hard-assigned to k with the isotropic loss sum_j r~_ij ||x_i - mu~_kj||^2.
- M-step (each epoch, from the nets' soft outputs): MAP estimates of pi (Dirichlet), mu and
  Sigma (Normal-inverse-Wishart prior with mean m0 = data mean, kappa, nu, Psi).
- Every few epochs, alternately, split or merge proposals (Metropolis-Hastings):
  split k into its two sub-clusters with H_s = alpha Γ(N1) f(X1) Γ(N2) f(X2) / (Γ(N) f(X)),
  f the NIW marginal likelihood in closed form; merge each cluster with one of its 3 nearest
  clusters (by mean) with H_m = 1 / H_s. A move is taken when H > 1, and otherwise with
  probability H (``stochastic``). After a split the two sub-clusters become clusters (the
  clustering net's output unit is duplicated); after a merge the merged cluster gets fresh
  sub-clusters (2-means on its first principal component, as the authors' code).

Features (DeepDPM clusters a learned embedding; on MNIST an autoencoder's 10-d codes):
``features: pca`` (default, CPU-cheap: pixels -> PCA) or ``features: ae`` (a small conv
autoencoder trained first with MSE). DeepDPM's alternation of AE and clustering training
(its "end-to-end" variant) is not reproduced; the paper's main setting clusters fixed codes.
The paper's MNIST/USPS/Fashion-MNIST figures cluster UMAP embeddings of AE codes (the authors'
make_umap_embeddings.py: UMAP to 10 dims, n_neighbors 20, min_dist 0; then DeepDPM.py's default
``--transform_input_data normalize``, L2 rows): ``umap_dim: 10, transform: normalize`` (umap-learn,
pinned in requirements.txt), the ``paper_umap`` preset. Off by default and in the ``paper`` preset
(``umap_dim: 0``), which keeps the end-to-end MNIST command's ``--transform_input_data None``.

Choices taken from the authors' code where the paper is silent: schedule (sub-clustering from
epoch 45, moves from 55, one every 30 epochs, parameters frozen 5 epochs after a move), nets
(50 hidden units, Adam 5e-4 / 5e-3), sub-cluster initialisation (2-means on the first principal
component), merge proposals via 3-NN of the means, new output units copied from the parent.
Two deliberate differences: the NIW marginal likelihood uses each point set's own sample mean
(the textbook closed form; the authors plug in the model's current mean), and the Dirichlet
prior adds ``pi_prior_counts`` pseudo-counts to the *counts* (the authors add them to the
proportions, which flattens pi when K is large). The paper presets also keep the clustering net's
rate per epoch on a subset (``cluster_lr_steps: 547``, the authors' 5e-4 at 70 000 codes and batch 128):
the schedule counts epochs, and with a seventh of the steps the net does not tell a split's two clusters
apart within the freeze, so one takes the other's points (reports/deepdpm_split_lr.md).
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy.special import gammaln, multigammaln

from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.models.base import Clusterer, ClusterResult, FitContext, register
from signclust.models.baselines._codes import CODE_PARAMS, ae_features, l2_rows, umap_embed
from signclust.models.baselines._nets import (embed, epoch_bar, faiss_kmeans, fit_setup, log_epoch,
                                              shuffled_batches)
from signclust.models.checkpoint import FitCheckpoint, capture_rng, restore_rng
from signclust.models.params import Param


# =========================================================================== NIW prior
class NIWPrior:
    """Normal-inverse-Wishart prior NIW(m0, kappa, nu, Psi) on a Gaussian's (mu, Sigma)."""

    def __init__(self, m0: np.ndarray, kappa: float, nu: float, psi: np.ndarray):
        self.m0 = np.asarray(m0, dtype=np.float64)
        self.kappa = float(kappa)
        self.nu = float(nu)
        self.psi = np.asarray(psi, dtype=np.float64)
        d = len(self.m0)
        if self.psi.shape != (d, d):
            raise UserError(f"NIW: Psi must be {d}x{d}")
        if self.nu <= d - 1:
            raise UserError(f"NIW: nu must exceed D - 1 = {d - 1}")
        if self.kappa <= 0:
            raise UserError("NIW: kappa must be positive")
        sign, self._logdet_psi = np.linalg.slogdet(self.psi)
        if sign <= 0:
            raise UserError("NIW: Psi must be positive definite")

    @property
    def dim(self) -> int:
        return len(self.m0)

    @classmethod
    def from_data(cls, x: np.ndarray, kappa: float = 1e-4, nu: float | None = None,
                  psi_choice: str = "isotropic", psi_scale: float = 0.005) -> "NIWPrior":
        """m0 = data mean; Psi = scale * I (isotropic), scale * diag(std) (data_std, as the
        authors' code), or scale * the data covariance (data_cov)."""
        x = np.asarray(x, dtype=np.float64)
        d = x.shape[1]
        nu = float(d + 2) if nu is None else float(nu)
        if psi_choice == "isotropic":
            psi = np.eye(d) * psi_scale
        elif psi_choice == "data_std":
            psi = np.diag(x.std(axis=0) + 1e-12) * psi_scale
        elif psi_choice == "data_cov":
            psi = (np.cov(x, rowvar=False).reshape(d, d) + 1e-9 * np.eye(d)) * psi_scale
        else:
            raise UserError("deepdpm: psi_choice must be isotropic, data_std or data_cov, "
                            f"not {psi_choice!r}")
        return cls(x.mean(axis=0), kappa, nu, psi)

    def posterior(self, x: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray]:
        """(kappa*, nu*, m*, Psi*) after observing the rows of x."""
        x = np.asarray(x, dtype=np.float64)
        n = len(x)
        if n == 0:
            return self.kappa, self.nu, self.m0.copy(), self.psi.copy()
        xbar = x.mean(axis=0)
        xc = x - xbar
        kappa_n = self.kappa + n
        dm = (xbar - self.m0)[:, None]
        psi_n = self.psi + xc.T @ xc + (self.kappa * n / kappa_n) * (dm @ dm.T)
        m_n = (self.kappa * self.m0 + n * xbar) / kappa_n
        return kappa_n, self.nu + n, m_n, psi_n

    def map_mean(self, n: np.ndarray | float, xbar: np.ndarray) -> np.ndarray:
        n = np.asarray(n, dtype=np.float64)
        return (n[..., None] * xbar + self.kappa * self.m0) / (n[..., None] + self.kappa)

    def map_cov(self, n: float, xbar: np.ndarray, scatter_cov: np.ndarray) -> np.ndarray:
        """Posterior mode of Sigma given n (possibly soft) points with mean xbar and
        (1/n-normalised) scatter matrix ``scatter_cov``."""
        d = self.dim
        if n <= 0:
            return self.psi / (self.nu + d + 2)
        dm = (np.asarray(xbar) - self.m0)[:, None]
        return (self.psi + n * scatter_cov
                + (self.kappa * n / (self.kappa + n)) * (dm @ dm.T)) / (self.nu + n + d + 2)


def niw_log_marginal(x: np.ndarray, prior: NIWPrior) -> float:
    """log f(X; lambda): marginal likelihood of the rows of X under a Gaussian with NIW prior,
    integrated in closed form (Murphy 2007, eq. 266):

    -(N D / 2) log pi + log Γ_D(nu*/2) - log Γ_D(nu/2) + (nu/2) log|Psi| - (nu*/2) log|Psi*|
    + (D/2) (log kappa - log kappa*)
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n == 0:
        return 0.0
    d = prior.dim
    kappa_n, nu_n, _, psi_n = prior.posterior(x)
    sign, logdet_n = np.linalg.slogdet(psi_n)
    if sign <= 0:
        raise UserError("NIW: posterior scale matrix is not positive definite")
    return float(-0.5 * n * d * math.log(math.pi)
                 + multigammaln(nu_n / 2.0, d) - multigammaln(prior.nu / 2.0, d)
                 + 0.5 * prior.nu * prior._logdet_psi - 0.5 * nu_n * logdet_n
                 + 0.5 * d * (math.log(prior.kappa) - math.log(kappa_n)))


def _lgamma0(n: int) -> float:
    # the authors' convention: an empty side contributes Γ(.) = 1
    return float(gammaln(n)) if n > 0 else 0.0


def log_hastings_split(x: np.ndarray, sub: np.ndarray, prior: NIWPrior, alpha: float) -> float:
    """log H_s for splitting the points ``x`` into ``sub == 0`` and ``sub == 1``:
    log alpha + log Γ(N1) + log f(X1) + log Γ(N2) + log f(X2) - log Γ(N) - log f(X)."""
    x = np.asarray(x, dtype=np.float64)
    sub = np.asarray(sub)
    x1, x2 = x[sub == 0], x[sub == 1]
    n1, n2 = len(x1), len(x2)
    return (math.log(alpha) + _lgamma0(n1) + niw_log_marginal(x1, prior)
            + _lgamma0(n2) + niw_log_marginal(x2, prior)
            - _lgamma0(n1 + n2) - niw_log_marginal(x, prior))


def dp_log_joint(x: np.ndarray, z: np.ndarray, prior: NIWPrior, alpha: float) -> float:
    """log p(X, z) of DeepDPM's model: the CRP(alpha) probability of the partition z,
    K log alpha + log Γ(alpha) - log Γ(alpha + N) + sum_k log Γ(N_k), plus each cluster's NIW
    marginal log f(X_k). A split's log H_s is this joint after the split minus before it, so
    the moves climb it; it scores any labelling (the true one included) on the model's terms."""
    x = np.asarray(x, dtype=np.float64)
    _, z = np.unique(np.asarray(z), return_inverse=True)
    sizes = np.bincount(z)
    crp = (len(sizes) * math.log(alpha) + float(gammaln(alpha)) - float(gammaln(alpha + len(z)))
           + float(gammaln(sizes).sum()))
    return crp + sum(niw_log_marginal(x[z == k], prior) for k in range(len(sizes)))


def log_hastings_merge(x1: np.ndarray, x2: np.ndarray, prior: NIWPrior, alpha: float) -> float:
    """log H_m = -log H_s of the reverse split of the union into x1 and x2."""
    x1 = np.asarray(x1, dtype=np.float64).reshape(-1, prior.dim)
    x2 = np.asarray(x2, dtype=np.float64).reshape(-1, prior.dim)
    x = np.concatenate([x1, x2])
    sub = np.r_[np.zeros(len(x1), dtype=np.int64), np.ones(len(x2), dtype=np.int64)]
    return -log_hastings_split(x, sub, prior, alpha)


# =========================================================================== mixture algebra
def _soft_stats(x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Soft counts (K,), means (K, D) and 1/N-normalised scatter matrices (K, D, D)."""
    nk = r.sum(axis=0) + 1e-10
    means = (r.T @ x) / nk[:, None]
    covs = np.einsum("nk,nd,ne->kde", r, x, x, optimize=True) / nk[:, None, None]
    covs -= np.einsum("kd,ke->kde", means, means)
    return nk, means, covs


def map_params(x: np.ndarray, r: np.ndarray, prior: NIWPrior, pi_counts: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """M-step with priors from soft responsibilities r (n, K) -> (pi, mus, covs)."""
    nk, xbar, scat = _soft_stats(x, r)
    k = r.shape[1]
    pi = (nk + pi_counts) / (nk.sum() + k * pi_counts)
    mus = prior.map_mean(nk, xbar)
    covs = np.stack([prior.map_cov(nk[j], xbar[j], scat[j]) for j in range(k)])
    return pi, mus, covs


def gaussian_log_resp(x: np.ndarray, pi: np.ndarray, mus: np.ndarray, covs: np.ndarray
                      ) -> np.ndarray:
    """log r^E (n, K): normalised log pi_k N(x; mu_k, Sigma_k)."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[1]
    out = np.empty((len(x), len(pi)))
    for k in range(len(pi)):
        c = np.linalg.cholesky(covs[k] + 1e-9 * np.eye(d))
        z = np.linalg.solve(c, (x - mus[k]).T)
        out[:, k] = (math.log(max(pi[k], 1e-300)) - 0.5 * (z * z).sum(axis=0)
                     - np.log(np.diag(c)).sum() - 0.5 * d * math.log(2 * math.pi))
    out -= out.max(axis=1, keepdims=True)
    out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
    return out


def two_means_1d(x: np.ndarray) -> np.ndarray:
    """2-means on the first principal component, solved exactly (sorted scan), so the split
    proposal's initial sub-clusters need no random restarts. -> labels in {0, 1}."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 2:
        return np.zeros(n, dtype=np.int64)
    xc = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(xc, full_matrices=False)
    p = xc @ vt[0]
    order = np.argsort(p, kind="stable")
    ps = p[order]
    cs, cs2 = np.cumsum(ps), np.cumsum(ps ** 2)
    i = np.arange(1, n)                                 # size of the left part
    left = cs2[i - 1] - cs[i - 1] ** 2 / i
    right = (cs2[-1] - cs2[i - 1]) - (cs[-1] - cs[i - 1]) ** 2 / (n - i)
    cut = int(i[np.argmin(left + right)])
    lab = np.ones(n, dtype=np.int64)
    lab[order[:cut]] = 0
    return lab


# =========================================================================== nets
def _uniform_(t: torch.Tensor, bound: float, gen: torch.Generator) -> torch.Tensor:
    with torch.no_grad():
        t.copy_((torch.rand(t.shape, generator=gen) * 2 - 1) * bound)
    return t


class ClusterNet(nn.Module):
    """x -> Linear -> ReLU -> Linear(K) -> softmax; the last layer grows and shrinks."""

    def __init__(self, d: int, hidden: int, k: int, gen: torch.Generator):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, k)
        for lin in (self.fc1, self.fc2):
            b = 1.0 / math.sqrt(lin.in_features)
            _uniform_(lin.weight, b, gen)
            _uniform_(lin.bias, b, gen)

    def forward(self, x):
        return F.softmax(self.fc2(F.relu(self.fc1(x))), dim=1)

    def reshape_output(self, source: list[int]) -> None:
        """New output unit j copies old unit source[j] (split: the parent twice; merge: the
        cluster with the higher marginal likelihood)."""
        src = torch.as_tensor(source, dtype=torch.long, device=self.fc2.weight.device)
        new = nn.Linear(self.fc2.in_features, len(source)).to(self.fc2.weight.device)
        with torch.no_grad():
            new.weight.copy_(self.fc2.weight[src])
            new.bias.copy_(self.fc2.bias[src])
        self.fc2 = new


class SubClusterNets(nn.Module):
    """K independent MLPs x -> hidden -> 2, evaluated for each point with its cluster's net."""

    def __init__(self, d: int, hidden: int, k: int, gen: torch.Generator):
        super().__init__()
        self.d, self.hidden = d, hidden
        self.w1 = nn.Parameter(torch.empty(k, d, hidden))
        self.b1 = nn.Parameter(torch.empty(k, hidden))
        self.w2 = nn.Parameter(torch.empty(k, hidden, 2))
        self.b2 = nn.Parameter(torch.empty(k, 2))
        self._init(range(k), gen)

    def _init(self, ks, gen):
        ks = list(ks)
        if not ks:
            return
        with torch.no_grad():
            for k in ks:
                _uniform_(self.w1[k], 1.0 / math.sqrt(self.d), gen)
                _uniform_(self.b1[k], 1.0 / math.sqrt(self.d), gen)
                _uniform_(self.w2[k], 1.0 / math.sqrt(self.hidden), gen)
                _uniform_(self.b2[k], 1.0 / math.sqrt(self.hidden), gen)

    def forward(self, x, z):
        w1, b1, w2, b2 = (p.index_select(0, z) for p in (self.w1, self.b1, self.w2, self.b2))
        h = F.relu(torch.einsum("nd,ndh->nh", x, w1) + b1)
        return F.softmax(torch.einsum("nh,nho->no", h, w2) + b2, dim=1)

    def reshape(self, source: list[int | None], gen: torch.Generator) -> None:
        """New net j copies old net source[j], or is freshly initialised where None."""
        k = len(source)
        dev = self.w1.device
        keep = [j for j, s in enumerate(source) if s is not None]
        src = torch.as_tensor([source[j] for j in keep], dtype=torch.long, device=dev)
        new = {n: torch.empty((k,) + tuple(p.shape[1:]), device=dev)
               for n, p in self.named_parameters()}
        with torch.no_grad():
            for n, p in self.named_parameters():
                if keep:
                    new[n][keep] = p.data[src]
        self.w1, self.b1 = nn.Parameter(new["w1"]), nn.Parameter(new["b1"])
        self.w2, self.b2 = nn.Parameter(new["w2"]), nn.Parameter(new["b2"])
        self._init([j for j, s in enumerate(source) if s is None], gen)


# =========================================================================== the clusterer
@register
class DeepDPM(Clusterer):
    name = "deepdpm"
    needs_k = False
    fit_checkpoint = True

    PARAMS = {
        "features": Param("pca", str, choices=("pca", "ae"), doc="what is clustered: PCA of pixels | AE codes"),
        "feat_dim": CODE_PARAMS["feat_dim"],
        "transform": Param("scale", str, choices=("none", "scale", "standard", "normalize"),
                           doc="none | scale (one global std) | standard | normalize (L2 rows)"),
        # the paper's MNIST/USPS/Fashion pipeline (the authors' make_umap_embeddings.py + DeepDPM.py):
        # AE codes -> UMAP(10 dims, n_neighbors 20, min_dist 0) -> L2-normalised rows -> DeepDPM
        "umap_dim": Param(0, int, min=0, doc="UMAP the codes to this many dims before clustering "
                          "(0: off; the paper's pipeline: 10; needs umap-learn)"),
        "umap_neighbors": CODE_PARAMS["umap_neighbors"],
        "umap_min_dist": CODE_PARAMS["umap_min_dist"],
        "ae_epochs": CODE_PARAMS["ae_epochs"],
        "ae_width": CODE_PARAMS["ae_width"],
        "ae_lr": CODE_PARAMS["ae_lr"],
        "init_k": Param(10, int, min=1, doc="clusters at the start (k-means)"),
        "alpha": Param(10.0, float, gt=0, doc="DP concentration"),
        "kappa": Param(1e-4, float, gt=0, doc="NIW: strength of the prior on means"),
        "nu": Param(None, float, gt=0, nullable=True, doc="NIW degrees of freedom, > D - 1 (null: D + 2)"),
        "psi_choice": Param("isotropic", str, choices=("isotropic", "data_std", "data_cov"),
                            doc="NIW scale matrix: isotropic | data_std | data_cov"),
        "psi_scale": Param(0.005, float, gt=0, doc="NIW scale factor"),
        "pi_prior_counts": Param(0.1, float, min=0, doc="Dirichlet pseudo-counts on pi"),
        "hidden": Param(50, int, min=1, doc="hidden units of the clustering and sub-clustering nets"),
        # after a split both new clusters start as copies of their parent's output unit, and the net must
        # tell them apart within the freeze_after_move epochs, or the M-step that follows sees each copy at
        # half of every parent point and one copy takes them all (the next merge step merges the empty one
        # away). How far Adam moves in those epochs is the rate times the steps: the authors' 5e-4 was set
        # for MNIST's 547 steps an epoch, a 2k-7k corpus gives 10x fewer (hence this row's 5e-3), and
        # cluster_lr_steps keeps a rate per epoch on a subset of the paper's data
        "cluster_lr": Param(5e-3, float, gt=0, doc="clustering net Adam learning rate"),
        "cluster_lr_steps": Param(0, int, min=0, doc="the steps an epoch cluster_lr was set for: the net "
                                  "runs at cluster_lr x cluster_lr_steps / its own steps an epoch (0: at "
                                  "cluster_lr; the paper presets: 547, MNIST's 70 000 codes at batch 128)"),
        "subcluster_lr": Param(5e-3, float, gt=0, doc="sub-clustering nets Adam learning rate"),
        "batch_size": Param(128, int, min=1, doc="codes per step"),
        "max_epochs": Param(300, int, min=1, doc="clustering epochs"),
        "start_computing_params": Param(25, int, min=0, doc="first epoch with an M-step"),
        "start_sub_clustering": Param(45, int, min=0, doc="first epoch training the sub-clusters"),
        "start_splitting": Param(55, int, min=0, doc="first epoch with a split/merge move"),
        "split_merge_every": Param(20, int, min=1, doc="epochs between moves; splits and merges alternate"),
        "freeze_after_move": Param(5, int, min=0, doc="epochs without M-step after a split/merge"),
        "merge_neighbors": Param(3, int, min=1, doc="merge proposals with this many nearest clusters"),
        "min_split_size": Param(5, int, min=0, doc="no split proposal for smaller (sub)clusters"),
        "stochastic": Param(True, bool, doc="accept H < 1 moves with probability H (MH)"),
        "proposal_fallback": Param(True, bool, doc="a split proposal of the sub-cluster net with a side of at "
                                   "most min_split_size points: propose the nearer-sub-cluster-mean split instead "
                                   "(false: no proposal, the authors' code)"),
    }
    PRESETS = {"paper": {
        "features": "ae", "feat_dim": 10, "transform": "none",
        "umap_dim": 0, "umap_neighbors": 20, "umap_min_dist": 0.0,
        "ae_epochs": 50, "ae_width": 32, "ae_lr": 1e-3,
        "init_k": 3, "alpha": 10.0, "kappa": 1e-4, "nu": None,
        "psi_choice": "isotropic", "psi_scale": 0.005, "pi_prior_counts": 0.1,
        "hidden": 50, "cluster_lr": 5e-4, "subcluster_lr": 5e-3, "batch_size": 128,
        # ours, not the paper's: the authors' 5e-4 at 547 steps an epoch (all 70 000 MNIST codes, batch
        # 128), kept per epoch on a subset (on all 70 000 the net runs at exactly 5e-4)
        "cluster_lr_steps": 547,
        "max_epochs": 500, "start_computing_params": 25, "start_sub_clustering": 45,
        "start_splitting": 55, "split_merge_every": 30, "freeze_after_move": 5,
        "merge_neighbors": 3, "min_split_size": 5, "stochastic": True,
        # ours, not the paper's: a fix of a one-sided split proposal (the authors' code: false), kept on
        "proposal_fallback": True,
    }}
    # the pipeline behind the paper's MNIST/USPS/Fashion-MNIST figures: the same settings on UMAP
    # embeddings of the AE codes, L2 rows (make_umap_embeddings.py, then DeepDPM.py's default transform)
    PRESETS["paper_umap"] = {**PRESETS["paper"], "umap_dim": 10, "transform": "normalize"}

    @property
    def cfg(self) -> dict:
        return self.params

    def validate(self):
        nu = self.params["nu"]
        umap_dim = self.params["umap_dim"]
        d, what = (umap_dim, "umap_dim") if umap_dim > 0 else (self.params["feat_dim"], "feat_dim")
        if nu is not None and nu <= d - 1:
            raise UserError(f"deepdpm.nu: {nu:g} is not allowed (expected a number > {what} - 1 = {d - 1}, "
                            "or null)")

    # -- features -------------------------------------------------------------------
    def codes(self, corpus: Corpus, ctx: FitContext, device, gen, ckpt: FitCheckpoint | None = None,
              resume: dict | None = None) -> np.ndarray:
        c = self.cfg
        images = corpus.token_images()
        if c["features"] == "pca":
            from sklearn.decomposition import PCA
            x = images.reshape(len(images), -1).astype(np.float64) / 255.0
            dim = int(min(c["feat_dim"], x.shape[0] - 1, x.shape[1]))
            z = PCA(n_components=dim, svd_solver="full", random_state=int(ctx.seed)).fit_transform(x)
        else:
            z = ae_features(images, int(c["feat_dim"]), int(c["ae_width"]), int(c["ae_epochs"]),
                            float(c["ae_lr"]), int(c["batch_size"]), device, gen, ctx.progress,
                            ckpt, resume)
        z = np.asarray(z, dtype=np.float64)
        if int(c["umap_dim"]) > 0:
            z = umap_embed(z, int(c["umap_dim"]), int(c["umap_neighbors"]), float(c["umap_min_dist"]),
                           int(ctx.seed))
        t = c["transform"]
        if t == "scale":
            # one factor for all dims: keeps PCA's variance ordering, fixes the scale that the
            # prior's Psi is expressed in
            z = (z - z.mean(axis=0)) / (z.std() + 1e-12)
        elif t == "standard":
            z = (z - z.mean(axis=0)) / (z.std(axis=0) + 1e-12)
        elif t == "normalize":
            z = l2_rows(z)
        return z

    # -- fit ------------------------------------------------------------------------
    def fit(self, corpus: Corpus, ctx: FitContext) -> ClusterResult:
        t0 = time.time()
        device, gen = fit_setup(ctx)
        with FitCheckpoint.for_fit(self, corpus, ctx) as ckpt:
            # phase "ae": autoencoder epochs (features: ae); phase "dpm": clustering epochs, with the codes
            state = ckpt.load()
            if state is not None and state["phase"] == "dpm":
                x = state["x"]
                run = _DPMRun(x, self.cfg, int(ctx.seed), device, gen)
                run.load_state(state["run"])
                restore_rng(state["rng"], gen)
                start = state["epoch"]
            else:
                x = self.codes(corpus, ctx, device, gen, ckpt, state)
                run = _DPMRun(x, self.cfg, int(ctx.seed), device, gen)
                start = 0

            def save(epoch: int) -> None:
                ckpt.save({"phase": "dpm", "epoch": epoch, "x": x, "run": run.state(), "rng": capture_rng(gen)})

            run.train(ctx, start, save)
            labels = run.predict()
        k_found = int(len(np.unique(labels)))
        info = {
            "k_found": k_found, "k_model": int(run.K), "k_init": int(self.cfg["init_k"]),
            "k_history": run.k_history, "moves": run.moves,
            "n_splits": int(sum(m["type"] == "split" for m in run.moves)),
            "n_merges": int(sum(m["type"] == "merge" for m in run.moves)),
            "final_cluster_loss": run.last_losses.get("cluster_loss"),
            "wall_time_s": time.time() - t0,
        }
        if ctx.n_clusters is not None:
            info["k_true"] = int(ctx.n_clusters)      # reporting only: never used to fit
        return ClusterResult(labels=labels, embedding=x.astype(np.float32), info=info)


class _DPMRun:
    """The training state of one DeepDPM fit (numpy for the mixture, torch for the nets)."""

    def __init__(self, x: np.ndarray, cfg: dict, seed: int, device, gen):
        self.cfg, self.seed, self.device, self.gen = cfg, seed, device, gen
        self.x = np.asarray(x, dtype=np.float64)
        self.n, self.d = self.x.shape
        self.xt = torch.from_numpy(self.x.astype(np.float32)).to(device)
        self.prior = NIWPrior.from_data(self.x, kappa=float(cfg["kappa"]), nu=cfg["nu"],
                                        psi_choice=cfg["psi_choice"], psi_scale=float(cfg["psi_scale"]))
        self.K = int(min(cfg["init_k"], self.n))
        steps = math.ceil(self.n / int(cfg["batch_size"]))            # an epoch: every code once
        ref = int(cfg["cluster_lr_steps"])
        self.cluster_lr = float(cfg["cluster_lr"]) * (ref / steps if ref else 1.0)
        self.k_history: list[int] = []
        self.moves: list[dict] = []
        self.last_losses: dict = {}
        self.last_move_epoch = -10 ** 9
        self.last_performed = "merge"
        # initial parameters: k-means, then MAP estimates from the hard assignment
        if self.K > 1:
            lab, _, _ = faiss_kmeans(self.x.astype(np.float32), self.K, seed=seed, niter=50, nredo=3)
        else:
            lab = np.zeros(self.n, dtype=np.int64)
        r0 = np.eye(self.K)[lab]
        self.pi, self.mus, self.covs = map_params(self.x, r0, self.prior, float(cfg["pi_prior_counts"]))
        self.z = lab.copy()
        self.mus_sub = np.zeros((self.K, 2, self.d))
        self.covs_sub = np.tile(self.prior.psi, (self.K, 2, 1, 1))
        self.pi_sub = np.full((self.K, 2), 0.5)
        self.sub_ready = False
        self.cnet = ClusterNet(self.d, int(cfg["hidden"]), self.K, gen).to(device)
        self.snet = SubClusterNets(self.d, int(cfg["hidden"]), self.K, gen).to(device)
        self.copt = torch.optim.Adam(self.cnet.parameters(), lr=self.cluster_lr)
        self.sopt = torch.optim.Adam(self.snet.parameters(), lr=float(cfg["subcluster_lr"]))

    # -- schedule -----------------------------------------------------------------
    def _move_due(self, epoch: int) -> bool:
        c = self.cfg
        start = int(c["start_splitting"])
        return epoch >= start and (epoch - start) % int(c["split_merge_every"]) == 0

    def _frozen(self, epoch: int) -> bool:
        return (epoch < int(self.cfg["start_computing_params"])
                or 0 < epoch - self.last_move_epoch <= int(self.cfg["freeze_after_move"]))

    # -- training -----------------------------------------------------------------
    def train(self, ctx, start: int = 0, save=None) -> None:
        """Epochs ``start`` .. max_epochs - 1; ``save(epochs_done)`` after each."""
        bar = epoch_bar(int(self.cfg["max_epochs"]), ctx.progress, "deepdpm", start)
        for epoch in bar:
            losses = self._train_epoch(epoch)
            if save is not None:
                save(epoch + 1)
            if losses is not None:
                log_epoch(ctx, bar, {**losses, "k": self.K}, epoch)

    # what a checkpoint holds: every attribute the epochs change
    _STATE = ("K", "k_history", "moves", "last_losses", "last_move_epoch", "last_performed", "pi", "mus",
              "covs", "z", "mus_sub", "covs_sub", "pi_sub", "sub_ready")

    def state(self) -> dict:
        return {**{k: getattr(self, k) for k in self._STATE},
                "cnet": self.cnet.state_dict(), "snet": self.snet.state_dict(),
                "copt": self.copt.state_dict(), "sopt": self.sopt.state_dict()}

    def load_state(self, state: dict) -> None:
        for k in self._STATE:
            setattr(self, k, state[k])
        hidden = int(self.cfg["hidden"])
        self.cnet = ClusterNet(self.d, hidden, self.K, self.gen).to(self.device)
        self.cnet.load_state_dict(state["cnet"])
        self.snet = SubClusterNets(self.d, hidden, self.K, self.gen).to(self.device)
        self.snet.load_state_dict(state["snet"])
        self.copt = torch.optim.Adam(self.cnet.parameters(), lr=self.cluster_lr)
        self.copt.load_state_dict(state["copt"])
        self.sopt = torch.optim.Adam(self.snet.parameters(), lr=float(self.cfg["subcluster_lr"]))
        self.sopt.load_state_dict(state["sopt"])

    def _train_epoch(self, epoch: int) -> dict | None:
        c = self.cfg
        if epoch == 0:
            # the authors' epoch 0 only gathers codes and initialises the mixture
            self.k_history.append(self.K)
            return None
        resp, resp_sub, losses = self._epoch(epoch)
        self.last_losses = losses
        self.z = resp.argmax(axis=1)
        frozen = self._frozen(epoch)
        if not frozen:
            self.pi, self.mus, self.covs = map_params(self.x, resp, self.prior,
                                                      float(c["pi_prior_counts"]))
        if epoch + 1 == int(c["start_sub_clustering"]):
            self._init_subclusters(range(self.K))
        elif epoch >= int(c["start_sub_clustering"]) and not frozen and resp_sub is not None:
            self._update_subclusters(resp_sub)
        if self._move_due(epoch) and not frozen and self.sub_ready:
            if self.last_performed == "merge":
                self.last_performed = "split"
                self._split_step(epoch, resp_sub)
            else:
                self.last_performed = "merge"
                self._merge_step(epoch)
        self.k_history.append(self.K)
        return losses

    def _epoch(self, epoch: int):
        c = self.cfg
        log_re = gaussian_log_resp(self.x, self.pi, self.mus, self.covs)
        r_e = torch.from_numpy(np.exp(log_re).astype(np.float32)).to(self.device)
        eps = 1e-5
        r_e = (r_e + eps) / (r_e + eps).sum(dim=1, keepdim=True)
        train_sub = epoch >= int(c["start_sub_clustering"]) and self.sub_ready
        mus_sub = torch.from_numpy(self.mus_sub.astype(np.float32)).to(self.device)
        resp = np.zeros((self.n, self.K))
        resp_sub = np.zeros((self.n, 2)) if train_sub else None
        tot_cl = tot_sub = 0.0
        self.cnet.train()
        for idx in shuffled_batches(self.n, int(c["batch_size"]), self.gen, drop_last=False):
            xb = self.xt[idx]
            r = self.cnet(xb)
            rs = (r + eps) / (r + eps).sum(dim=1, keepdim=True)
            loss = F.kl_div(torch.log(rs), r_e[idx], reduction="batchmean")
            self.copt.zero_grad(set_to_none=True)
            loss.backward()
            self.copt.step()
            tot_cl += float(loss.detach()) * len(idx)
            rd = r.detach()
            resp[idx.numpy()] = rd.cpu().numpy()
            if train_sub:
                zb = rd.argmax(dim=1)
                rsub = self.snet(xb, zb)
                d2 = ((xb[:, None, :] - mus_sub[zb]) ** 2).sum(-1)          # (b, 2)
                sloss = (rsub * d2).sum() / len(idx)
                self.sopt.zero_grad(set_to_none=True)
                sloss.backward()
                self.sopt.step()
                tot_sub += float(sloss.detach()) * len(idx)
                resp_sub[idx.numpy()] = rsub.detach().cpu().numpy()
        losses = {"cluster_loss": tot_cl / self.n}
        if train_sub:
            losses["subcluster_loss"] = tot_sub / self.n
        return resp, resp_sub, losses

    # -- sub-clusters -------------------------------------------------------------
    def _sub_params_hard(self, k: int, sub: np.ndarray) -> None:
        pts = self.x[self.z == k]
        r = np.eye(2)[sub] if len(pts) else np.zeros((0, 2))
        self._sub_params_soft(k, pts, r)

    def _sub_params_soft(self, k: int, pts: np.ndarray, r: np.ndarray) -> None:
        if len(pts) == 0:
            self.mus_sub[k] = self.mus[k]
            self.covs_sub[k] = self.covs[k]
            self.pi_sub[k] = self.pi[k] / 2
            return
        nk, xbar, scat = _soft_stats(pts, r)
        self.mus_sub[k] = self.prior.map_mean(nk, xbar)
        self.covs_sub[k] = np.stack([self.prior.map_cov(nk[j], xbar[j], scat[j]) for j in range(2)])
        self.pi_sub[k] = nk / self.n

    def _init_subclusters(self, ks) -> None:
        for k in ks:
            pts = self.x[self.z == k]
            self._sub_params_hard(k, two_means_1d(pts) if len(pts) >= 2 else np.zeros(len(pts), int))
        self.sub_ready = True

    def _update_subclusters(self, resp_sub: np.ndarray) -> None:
        for k in range(self.K):
            m = self.z == k
            r = resp_sub[m]
            if m.sum() < 2 or len(np.unique(r.argmax(axis=1))) < 2:
                # a sub-cluster emptied: start this cluster's sub-clusters afresh
                self._init_subclusters([k])
            else:
                self._sub_params_soft(k, self.x[m], r)

    # -- split / merge ------------------------------------------------------------
    def _accept(self, log_h: float) -> bool:
        if log_h > 0:
            return True
        if not self.cfg["stochastic"]:
            return False
        u = float(torch.rand(1, generator=self.gen))
        return math.exp(max(log_h, -700.0)) > u

    def _split_step(self, epoch: int, resp_sub: np.ndarray | None) -> None:
        min_size = int(self.cfg["min_split_size"])
        alpha = float(self.cfg["alpha"])
        accepted = []
        for k in range(self.K):
            m = self.z == k
            if m.sum() < min_size:
                continue
            sub = (resp_sub[m].argmax(axis=1) if resp_sub is not None
                   else two_means_1d(self.x[m]))
            if min((sub == 0).sum(), (sub == 1).sum()) <= min_size and self.cfg["proposal_fallback"]:
                # the net's proposal is one-sided: the sub-clusters' own one instead (each point to the
                # nearer sub-cluster mean), as the authors' code proposes without sub-cluster nets
                # (ignore_subclusters); after a sub-cluster emptied these are the 2-means halves. A net
                # whose softmax saturated on one side gets no gradient from the isotropic loss
                # (r (1 - r) -> 0) and stays one-sided, so without this a cluster of several classes whose
                # split its own log p accepts is never split (reports/deepdpm_posterior_paper_umap_10000.md)
                sub = ((self.x[m][:, None, :] - self.mus_sub[k][None]) ** 2).sum(-1).argmin(axis=1)
            if min((sub == 0).sum(), (sub == 1).sum()) <= min_size:
                continue
            log_h = log_hastings_split(self.x[m], sub, self.prior, alpha)
            if self._accept(log_h):
                accepted.append((k, sub, log_h))
        if not accepted:
            return
        split = {k for k, _, _ in accepted}
        keep = [k for k in range(self.K) if k not in split]
        src_net = list(keep)
        mus, covs, pi = [self.mus[k] for k in keep], [self.covs[k] for k in keep], [self.pi[k] for k in keep]
        new_z = np.full(self.n, -1, dtype=np.int64)
        for j, k in enumerate(keep):
            new_z[self.z == k] = j
        sub_src: list[int | None] = list(keep)
        j = len(keep)
        for k, sub, log_h in accepted:
            idx = np.flatnonzero(self.z == k)
            for s in (0, 1):
                mus.append(self.mus_sub[k, s])
                covs.append(self.covs_sub[k, s])
                pi.append(self.pi_sub[k, s])
                new_z[idx[sub == s]] = j
                src_net.append(k)
                sub_src.append(None)
                j += 1
            self.moves.append({"epoch": epoch, "type": "split", "cluster": int(k), "log_h": float(log_h)})
        old_subs = (self.mus_sub, self.covs_sub, self.pi_sub)
        self._apply(np.array(mus), np.array(covs), np.array(pi), new_z, src_net, sub_src, epoch)
        # the kept clusters keep their sub-clusters; the new ones get fresh 2-means ones
        for j, k in enumerate(keep):
            self.mus_sub[j], self.covs_sub[j], self.pi_sub[j] = (o[k] for o in old_subs)
        self._init_subclusters(range(len(keep), self.K))

    def _merge_step(self, epoch: int) -> None:
        from sklearn.neighbors import NearestNeighbors
        if self.K < 2:
            return
        alpha = float(self.cfg["alpha"])
        nnb = int(min(self.cfg["merge_neighbors"], self.K))
        nbrs = NearestNeighbors(n_neighbors=nnb).fit(self.mus).kneighbors(self.mus, return_distance=False)
        free = set(range(self.K))
        pairs = []
        for p in range(self.K):
            for q in nbrs[p]:
                q = int(q)
                if q == p or p not in free or q not in free:
                    continue
                x1, x2 = self.x[self.z == p], self.x[self.z == q]
                log_h = log_hastings_merge(x1, x2, self.prior, alpha)
                if self._accept(log_h):
                    ll1 = niw_log_marginal(x1, self.prior)
                    ll2 = niw_log_marginal(x2, self.prior)
                    pairs.append((p, q, p if ll1 >= ll2 else q, log_h))
                    free.discard(p)
                    free.discard(q)
                    self.moves.append({"epoch": epoch, "type": "merge", "clusters": [p, q],
                                       "log_h": float(log_h)})
        if not pairs:
            return
        keep = sorted(free)
        mus, covs, pi = [self.mus[k] for k in keep], [self.covs[k] for k in keep], [self.pi[k] for k in keep]
        new_z = np.full(self.n, -1, dtype=np.int64)
        for j, k in enumerate(keep):
            new_z[self.z == k] = j
        src_net, sub_src = list(keep), list(keep)
        for j, (p, q, best, _) in enumerate(pairs, start=len(keep)):
            n1, n2 = float((self.z == p).sum()), float((self.z == q).sum())
            mu = ((n1 * self.mus[p] + n2 * self.mus[q]) / (n1 + n2) if n1 + n2 > 0
                  else (self.mus[p] + self.mus[q]) / 2)
            m = (self.z == p) | (self.z == q)
            pts = self.x[m]
            if len(pts):
                xc = pts - mu
                cov = self.prior.map_cov(len(pts), mu, xc.T @ xc / len(pts))
            else:
                cov = self.covs[p]
            mus.append(self.prior.map_mean(len(pts), mu))
            covs.append(cov)
            pi.append(self.pi[p] + self.pi[q])
            new_z[m] = j
            src_net.append(best)
            sub_src.append(best)
        old_subs = (self.mus_sub.copy(), self.covs_sub.copy(), self.pi_sub.copy())
        self._apply(np.array(mus), np.array(covs), np.array(pi), new_z, src_net, sub_src, epoch)
        for j, k in enumerate(keep):
            self.mus_sub[j], self.covs_sub[j], self.pi_sub[j] = (o[k] for o in old_subs)
        # the merged clusters get fresh sub-clusters (2-means on the first principal component of
        # their points), as the authors' update_subclusters_params_merge (how_to_init_mu_sub
        # kmeans_1d); seeding them with the two merged clusters would propose the rejected reverse
        # split again at the next split step
        self._init_subclusters(range(len(keep), self.K))

    def _apply(self, mus, covs, pi, new_z, src_net, sub_src, epoch) -> None:
        self.K = len(mus)
        self.mus, self.covs = mus, covs
        self.pi = pi / pi.sum()
        self.z = new_z
        self.mus_sub = np.zeros((self.K, 2, self.d))
        self.covs_sub = np.tile(self.prior.psi, (self.K, 2, 1, 1))
        self.pi_sub = np.full((self.K, 2), 0.5)
        old_fc1 = list(self.cnet.fc1.parameters())
        self.cnet.reshape_output(src_net)
        state = {p: self.copt.state[p] for p in old_fc1 if p in self.copt.state}
        self.copt = torch.optim.Adam(self.cnet.parameters(), lr=self.cluster_lr)
        for p, s in state.items():
            self.copt.state[p] = s
        self.snet.reshape(sub_src, self.gen)
        self.sopt = torch.optim.Adam(self.snet.parameters(), lr=float(self.cfg["subcluster_lr"]))
        self.last_move_epoch = epoch

    @torch.no_grad()
    def predict(self) -> np.ndarray:
        self.cnet.eval()
        r = embed(self.cnet, self.xt.cpu(), batch_size=4096, device=self.device)
        _, lab = np.unique(r.argmax(axis=1), return_inverse=True)
        return lab.astype(np.int64).ravel()
