"""JULE (Yang, Parikh & Batra, CVPR 2016): agglomerative clustering unrolled as a recurrent
process, interleaved with CNN training under a weighted triplet loss.

What follows the paper (seed 001, Sec. 3 and appendix A):

- Sample graph: directed K_s-nearest-neighbour graph on the current (L2-normalised) features,
  W(i, j) = exp(-||x_i - x_j||^2 / sigma^2) for x_j in N_i^{K_s}, with
  sigma^2 = a / (n K_s) * sum of the squared kNN distances (eq. 4).
- Cluster affinity: graph degree linkage (GDL, Zhang et al. 2012; appendix eq. 12),
  A(C_i, C_j) = 1/|C_i|^2 1' W_{Ci,Cj} W_{Cj,Ci} 1 + 1/|C_j|^2 1' W_{Cj,Ci} W_{Ci,Cj} 1,
  updated *exactly* after each merge (eq. 13/14, which the paper used in all experiments).
- Merge criterion (eq. 7): the cluster C_i maximising
  A(C_i, N^{K_c}[1]) + lambda/(K_c - 1) * sum_{k=2..K_c} (A(C_i, N[1]) - A(C_i, N[k]))
  is merged with its nearest neighbour cluster N[1].
- Partial unrolling: period p merges ceil(eta * n_c^s) times (n_c^s = clusters at the start
  of the period), then trains the CNN for some epochs; repeat until the target K.
- Initial over-clustering from raw L2-normalised intensities, following each sample's
  nearest neighbour (connected components of the 1-NN graph: clusters of a few samples,
  as the authors' code does); the first CNN period trains on it before any merge.
- Weighted triplet loss (eq. 11, as in the authors' Torch criterion):
  max(0, gamma * ||x_i - x_j||^2 - ||x_i - x_k||^2 + margin) for every same-cluster pair
  (x_i, x_j) of a batch and negatives x_k from other clusters of the batch. The paper takes the
  K_c samples nearest to x_i; the authors' Torch code draws 20 at random, which is the default
  here because nearest negatives are mostly same-class fragments of the early over-clustering:
  with them (and gamma = 2) the loss sat at the margin and the features collapsed in our MNIST
  runs. ``negatives: nearest`` keeps the paper's wording available.
- CNN: conv-BN-ReLU-pool blocks, a 160-d inner-product layer, L2 normalisation; SGD
  (lr 0.01, momentum 0.9, weight decay 5e-5) with the "inv" learning-rate policy.

Deviations, all parameters: the CNN is the shared small GlyphCNN (3x3 convs, widths doubling)
instead of 50-channel 5x5 stacks; the default period length is 5 epochs instead of ~20 so that
a 7k-token corpus fits in minutes on a CPU. ``kc_min_clusters`` (default 100) reproduces the
authors' code, which applies the K_c local term only while more than 100 clusters remain.
"""
from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy.sparse.csgraph import connected_components

from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.models.base import Clusterer, ClusterResult, FitContext, register
from signclust.models.baselines._nets import (GlyphAugment, GlyphCNN, embed, epoch_bar,
                                              fit_setup, images_to_tensor, log_epoch,
                                              require_k, shuffled_batches)
from signclust.models.checkpoint import FitCheckpoint, capture_rng, restore_rng
from signclust.models.params import Param


# =========================================================================== sample graph
def knn_search(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours of every row among the other rows (faiss flat L2).

    Returns (indices (n, k), squared distances (n, k)), nearest first. The point itself is
    removed even when duplicates tie with it at distance 0.
    """
    import faiss
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = len(x)
    k = int(min(k, n - 1))
    if k < 1:
        raise UserError("need at least two samples to build a neighbour graph")
    index = faiss.IndexFlatL2(x.shape[1])
    index.add(x)
    # one OpenMP thread: faiss's idle workers spin and starve torch/numpy on a shared CPU
    # (the same reason as in _nets.faiss_kmeans); an exact search of 10k points is fast anyway
    prev = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        d2, idx = index.search(x, k + 1)
    finally:
        faiss.omp_set_num_threads(prev)
    keep = idx != np.arange(n)[:, None]
    # rows where ties pushed the point itself out of the list: drop the farthest instead
    missing = keep.all(axis=1)
    keep[missing, -1] = False
    idx = idx[keep].reshape(n, k)
    d2 = np.maximum(d2[keep].reshape(n, k), 0.0)
    return idx.astype(np.int64), d2.astype(np.float64)


def affinity_graph(x: np.ndarray, ks: int = 20, a: float = 1.0) -> tuple[sp.csr_matrix, np.ndarray]:
    """The paper's directed sample graph W (eq. 4) and the kNN indices it was built from."""
    idx, d2 = knn_search(x, ks)
    n, k = idx.shape
    sigma2 = a * float(d2.mean())
    if not sigma2 > 0:          # all neighbours identical: every edge gets weight 1
        sigma2 = 1.0
    w = np.exp(-d2 / sigma2)
    W = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(n), k), idx.ravel())), shape=(n, n))
    return W, idx


def nn_chain_init(nn_idx: np.ndarray) -> np.ndarray:
    """Initial over-clustering: every sample joins its nearest neighbour's cluster, i.e. the
    connected components of the 1-NN graph (what the authors' ``agg_clustering.init`` does by
    following nearest-neighbour chains). Typically clusters of 2-6 samples."""
    n = len(nn_idx)
    g = sp.csr_matrix((np.ones(n), (np.arange(n), nn_idx[:, 0])), shape=(n, n))
    _, labels = connected_components(g, directed=True, connection="weak")
    return labels.astype(np.int64)


# =========================================================================== GDL affinity
def _indicator(labels: np.ndarray, nc: int) -> sp.csr_matrix:
    n = len(labels)
    return sp.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, nc))


def gdl_affinity(W, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Graph-degree-linkage affinities between the clusters of ``labels`` (0..nc-1).

    Returns (A_path, A): A_path[a, b] = 1' W_{Ca,Cb} W_{Cb,Ca} 1 (the unnormalised path sum
    from C_a through C_b and back), and the symmetric cluster affinity
    A[a, b] = A_path[b, a] / |C_b|^2 + A_path[a, b] / |C_a|^2, i.e.
    A(C_a -> C_b) + A(C_b -> C_a) of the appendix's eq. 12; the diagonal is 0.

    Sparse algebra: A_path[a, b] = sum_{v in C_b} In_a(v) Out_a(v), with In_a(v) the weight
    of the edges from C_a into v and Out_a(v) the weight of the edges from v into C_a.
    """
    W = sp.csr_matrix(W, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    nc = int(labels.max()) + 1
    M = _indicator(labels, nc)
    In = (M.T @ W).tocsr()
    OutT = (M.T @ W.T).tocsr()
    A_path = (In.multiply(OutT).tocsr() @ M).toarray()
    np.fill_diagonal(A_path, 0.0)
    sizes = np.bincount(labels, minlength=nc).astype(np.float64)
    half = A_path / sizes[:, None] ** 2
    A = half + half.T
    np.fill_diagonal(A, 0.0)
    return A_path, A


class GDLAgglomeration:
    """Agglomerative clustering with GDL affinities and JULE's merge criterion.

    Holds the per-cluster in/out edge-weight vectors so that a merge updates the affinities
    exactly (appendix eq. 13 for the column, eq. 14 recomputed for the row) in O(edges of
    the merged cluster + n_clusters), and caches each cluster's K_c best neighbours so that
    choosing the next merge does not rescan the n_c x n_c table.
    """

    def __init__(self, W, labels: np.ndarray, kc: int = 5, lam: float = 1.0,
                 kc_min_clusters: int = 0, features: np.ndarray | None = None):
        if kc < 1:
            raise UserError("JULE: K_c must be >= 1")
        W = sp.csr_matrix(W, dtype=np.float64)
        _, labels = np.unique(np.asarray(labels), return_inverse=True)
        self.labels = labels.astype(np.int64).ravel()
        self.nc0 = nc = int(self.labels.max()) + 1
        self.kc, self.lam, self.kc_min_clusters = int(kc), float(lam), int(kc_min_clusters)
        self.features = None if features is None else np.asarray(features, dtype=np.float64)
        M = _indicator(self.labels, nc)
        In = (M.T @ W).tocsr()
        OutT = (M.T @ W.T).tocsr()
        self._in = [In[c] for c in range(nc)]
        self._out = [OutT[c] for c in range(nc)]
        self.A_path = (In.multiply(OutT).tocsr() @ M).toarray()
        np.fill_diagonal(self.A_path, 0.0)
        self.sizes = np.bincount(self.labels, minlength=nc).astype(np.float64)
        half = self.A_path / self.sizes[:, None] ** 2
        self.A = half + half.T
        np.fill_diagonal(self.A, -np.inf)          # -inf marks "not a candidate neighbour"
        self.active = np.ones(nc, dtype=bool)
        self.n_active = nc
        self.topv = np.full((nc, self.kc), -np.inf)
        self.topi = np.zeros((nc, self.kc), dtype=np.int64)
        self._refresh(np.arange(nc))

    # -- neighbour cache ------------------------------------------------------------
    def _refresh(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) == 0:
            return
        sub = self.A[rows]
        kc = min(self.kc, sub.shape[1])
        part = np.argpartition(-sub, kc - 1, axis=1)[:, :kc]
        vals = np.take_along_axis(sub, part, axis=1)
        # best first; equal affinities by cluster id so that the order is reproducible
        order = np.lexsort((part, -vals), axis=1)
        self.topi[rows, :kc] = np.take_along_axis(part, order, axis=1)
        self.topv[rows, :kc] = np.take_along_axis(vals, order, axis=1)

    def scores(self) -> np.ndarray:
        """Eq. 7 negated: A(C_i, N[1]) + lambda/(K_c-1) sum_k (A(C_i, N[1]) - A(C_i, N[k]))."""
        a1 = self.topv[:, 0]
        kc_eff = min(self.kc, self.n_active - 1)
        s = a1.copy()
        act = self.active
        if self.lam != 0 and kc_eff > 1 and self.n_active > self.kc_min_clusters:
            gaps = a1[act, None] - self.topv[act, 1:kc_eff]
            s[act] += self.lam / (kc_eff - 1) * gaps.sum(axis=1)
        s[~act] = -np.inf
        return s

    # -- one timestep -----------------------------------------------------------------
    def choose(self) -> tuple[int, int]:
        if self.n_active < 2:
            raise UserError("JULE: nothing left to merge")
        s = self.scores()
        i = int(np.argmax(s))
        j = int(self.topi[i, 0])
        if not self.topv[i, 0] > 0:
            # no two clusters share a graph edge any more: fall back to the closest centroids
            i, j = self._closest_centroids()
        return i, j

    def _closest_centroids(self) -> tuple[int, int]:
        act = np.flatnonzero(self.active)
        if self.features is None:
            return int(act[0]), int(act[1])
        n = len(self.labels)
        member = sp.csr_matrix((np.ones(n), (self.labels, np.arange(n))), shape=(self.nc0, n))
        cent = np.asarray(member @ self.features)[act] / self.sizes[act, None]
        sq = (cent ** 2).sum(axis=1)
        d = sq[:, None] + sq[None, :] - 2.0 * cent @ cent.T
        np.fill_diagonal(d, np.inf)
        p, q = np.unravel_index(int(np.argmin(d)), d.shape)
        return int(act[p]), int(act[q])

    def merge(self, i: int, j: int) -> tuple[int, int]:
        """Merge clusters i and j; the lower id survives. Returns (kept, removed)."""
        a, b = (i, j) if i < j else (j, i)
        self._in[a] = self._in[a] + self._in[b]
        self._out[a] = self._out[a] + self._out[b]
        self._in[b] = self._out[b] = None
        self.labels[self.labels == b] = a
        self.sizes[a] += self.sizes[b]
        self.sizes[b] = 0
        self.active[b] = False
        self.n_active -= 1
        nc = self.nc0
        # eq. 13: paths from C_i through the union and back add up
        self.A_path[:, a] += self.A_path[:, b]
        # eq. 14: paths from the union through C_i and back do not; recompute them
        p = self._in[a].multiply(self._out[a]).tocsr()
        self.A_path[a] = np.bincount(self.labels[p.indices], weights=p.data, minlength=nc)
        self.A_path[a, a] = 0.0
        self.A_path[b, :] = 0.0
        self.A_path[:, b] = 0.0
        act = self.active
        row = np.full(nc, -np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            row[act] = (self.A_path[a, act] / self.sizes[a] ** 2
                        + self.A_path[act, a] / self.sizes[act] ** 2)
        row[a] = -np.inf
        self.A[a, :] = row
        self.A[:, a] = row
        self.A[b, :] = -np.inf
        self.A[:, b] = -np.inf
        self.topv[b] = -np.inf
        # rows whose K_c best neighbours may have changed
        if self.n_active <= self.kc:
            stale = np.flatnonzero(act)
        else:
            touched = (self.topi == a).any(axis=1) | (self.topi == b).any(axis=1)
            touched |= row > self.topv[:, -1]
            touched[a] = True
            stale = np.flatnonzero(touched & act)
        self._refresh(stale)
        return a, b

    def step(self) -> tuple[int, int]:
        i, j = self.choose()
        return self.merge(i, j)

    def compact_labels(self) -> np.ndarray:
        return np.unique(self.labels, return_inverse=True)[1].astype(np.int64).ravel()


def merge_step(state: GDLAgglomeration) -> tuple[int, int]:
    """One JULE timestep on ``state``: pick by eq. 7, merge, update affinities. -> (kept, removed)."""
    return state.step()


def agglomerate(W, labels: np.ndarray, n_merges: int, kc: int = 5, lam: float = 1.0,
                kc_min_clusters: int = 0, features: np.ndarray | None = None
                ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Run ``n_merges`` JULE merges from the clustering ``labels`` on the sample graph W.

    Returns the new labels (renumbered 0..k-1 in order of first cluster id) and the merge
    sequence as (kept, removed) pairs of the input's cluster ids (after renumbering the input
    to 0..nc-1 in sorted order).
    """
    state = GDLAgglomeration(W, labels, kc=kc, lam=lam, kc_min_clusters=kc_min_clusters,
                             features=features)
    n_merges = int(min(n_merges, state.n_active - 1))
    merges = [state.step() for _ in range(max(0, n_merges))]
    return state.compact_labels(), merges


# =========================================================================== CNN & loss
class _L2Net(nn.Module):
    """GlyphCNN with the paper's L2-normalisation layer on top of the inner-product layer."""

    def __init__(self, image_size: int, feat_dim: int, width: int, n_blocks: int = 3, pool: int = 2):
        super().__init__()
        self.body = GlyphCNN(image_size=image_size, feat_dim=feat_dim, width=width,
                             n_blocks=n_blocks, pool=pool)

    def forward(self, x):
        return F.normalize(self.body(x), dim=1)


def weighted_triplet_loss(f: torch.Tensor, labels: torch.Tensor, gamma: float = 2.0,
                          margin: float = 0.2, n_neg: int = 20,
                          negatives: str = "random", gen: torch.Generator | None = None
                          ) -> tuple[torch.Tensor, int]:
    """Eq. 11 on one batch: every same-cluster pair (i, j), i < j, is a positive pair; its
    negatives are ``n_neg`` samples of other clusters in the batch, drawn at random (authors'
    code) or the nearest to x_i (``negatives="nearest"``, the paper's wording).

    Returns (mean hinge loss over the triplets, number of triplets); (0, 0) if the batch has
    no positive pair.
    """
    b = f.shape[0]
    d2 = torch.cdist(f, f).pow(2)
    same = labels[:, None] == labels[None, :]
    pos = torch.triu(same, diagonal=1)
    if not bool(pos.any()):
        return f.sum() * 0.0, 0
    other = ~same
    n_neg = int(max(1, min(n_neg, b - 1)))
    with torch.no_grad():
        if negatives == "nearest":
            key = d2.detach().clone()
        elif negatives == "random":
            key = torch.rand(b, b, generator=gen).to(f.device)
        else:
            raise UserError(f"JULE: negatives must be 'nearest' or 'random', not {negatives!r}")
        key = key.masked_fill(~other, float("inf"))
        neg_idx = torch.topk(key, n_neg, dim=1, largest=False).indices        # (b, n_neg)
        neg_ok = torch.gather(other, 1, neg_idx)                               # (b, n_neg)
    d_neg = torch.gather(d2, 1, neg_idx)                                       # (b, n_neg)
    hinge = F.relu(gamma * d2[:, :, None] - d_neg[:, None, :] + margin)         # (b, b, n_neg)
    mask = pos[:, :, None] & neg_ok[:, None, :]
    n_trip = int(mask.sum())
    if n_trip == 0:
        return f.sum() * 0.0, 0
    return hinge[mask].mean(), n_trip


# =========================================================================== the clusterer
@register
class JULE(Clusterer):
    name = "jule"
    needs_k = True
    fit_checkpoint = True

    PARAMS = {
        "ks": Param(20, int, min=1, doc="K_s: neighbours in the sample graph"),
        "a": Param(1.0, float, gt=0, doc="sigma^2 scale in eq. 4"),
        "kc": Param(5, int, min=1, doc="K_c: neighbour clusters in the merge criterion"),
        "lam": Param(1.0, float, min=0, doc="lambda: weight of the local-structure term (7b)"),
        "gamma": Param(2.0, float, min=0, doc="weight of the positive pair in the triplet loss"),
        "eta": Param(0.9, float, gt=0, max=1, doc="unrolling rate: merges per period = ceil(eta * clusters)"),
        "margin": Param(0.2, float, min=0, doc="triplet hinge margin (authors' code)"),
        "n_negatives": Param(20, int, min=1, doc="negatives per positive pair"),
        "negatives": Param("random", str, choices=("random", "nearest"),
                           doc="random (authors' Torch code) | nearest (paper's wording)"),
        "kc_min_clusters": Param(100, int, min=0,
                                 doc="local term only while more clusters remain (authors' code)"),
        "epochs_per_period": Param(5, int, min=1, doc="CNN epochs after each period's merges (paper ~20)"),
        "max_periods": Param(50, int, min=0,
                             doc="training periods; then merge to K on the last features without training"),
        "batch_size": Param(100, int, min=2, doc="images per SGD step"),
        "lr": Param(0.01, float, gt=0, doc="base learning rate"),
        "momentum": Param(0.9, float, min=0, lt=1, doc="SGD momentum"),
        "weight_decay": Param(5e-5, float, min=0, doc="SGD weight decay"),
        "lr_gamma": Param(1e-4, float, min=0, doc='"inv" policy: lr * (1 + lr_gamma * iter) ** -lr_power'),
        "lr_power": Param(0.75, float, min=0, doc='"inv" policy exponent'),
        "feat_dim": Param(160, int, min=1, doc="inner-product layer size"),
        "width": Param(16, int, min=1, doc="channels of the first conv block"),
        "n_blocks": Param(3, int, min=1, doc="conv blocks (each halves the resolution)"),
        "pool": Param(2, int, min=1, doc="adaptive pooling to pool x pool before the inner product"),
        "augment": Param(False, bool, doc="augmented views (the paper trains on the images as they are)"),
        "init": Param("nn_chain", str, choices=("nn_chain", "singletons"),
                      doc="initial over-clustering: nn_chain (paper) | singletons"),
    }
    PRESETS = {"paper": {
        "ks": 20, "a": 1.0, "kc": 5, "lam": 1.0, "gamma": 2.0, "eta": 0.9,
        "margin": 0.2, "n_negatives": 20, "negatives": "random", "kc_min_clusters": 100,
        "epochs_per_period": 20, "max_periods": 50, "batch_size": 100, "lr": 0.01,
        "momentum": 0.9, "weight_decay": 5e-5, "lr_gamma": 1e-4, "lr_power": 0.75,
        # 50-channel conv layers down to a ~10x10 map (8x8 on MNIST), a 160-d inner product
        "feat_dim": 160, "width": 50, "n_blocks": 2, "pool": 8, "augment": False,
        "init": "nn_chain",
    }}

    @property
    def cfg(self) -> dict:
        return self.params

    def fit(self, corpus: Corpus, ctx: FitContext) -> ClusterResult:
        c = self.cfg
        t0 = time.time()
        device, gen = fit_setup(ctx)
        k_target = require_k(self.name, ctx)
        images = corpus.token_images()
        n = len(images)
        if n < k_target:
            raise UserError(f"jule: {n} tokens cannot form {k_target} clusters")
        if images.shape[1] != images.shape[2]:
            raise UserError(f"jule: square images expected, got {images.shape[1:]}")
        X = images_to_tensor(images)

        # period 0: over-clustering on raw L2-normalised intensities
        pix = X.view(n, -1).numpy().astype(np.float64)
        pix /= np.linalg.norm(pix, axis=1, keepdims=True) + 1e-12
        _, nn_idx = affinity_graph(pix, int(c["ks"]), float(c["a"]))
        labels = nn_chain_init(nn_idx) if c["init"] == "nn_chain" else np.arange(n)
        if labels.max() + 1 <= k_target:     # too few chains for the target: start from samples
            labels = np.arange(n, dtype=np.int64)
        n_init = int(labels.max()) + 1

        model = _L2Net(images.shape[1], int(c["feat_dim"]), int(c["width"]),
                       int(c["n_blocks"]), int(c["pool"])).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=float(c["lr"]),
                              momentum=float(c["momentum"]), weight_decay=float(c["weight_decay"]))
        augment = GlyphAugment() if c["augment"] else None
        state = {"iter": 0}
        k_history = [n_init]
        feats = pix.astype(np.float32)
        period = 0
        last_loss = float("nan")
        nc = n_init
        with FitCheckpoint.for_fit(self, corpus, ctx) as ckpt:
            # a checkpoint after every CNN epoch: (period, epochs done in it) and the state that
            # period started from; the merges after a period's last epoch are recomputed
            resume = ckpt.load()
            if resume is not None:
                model.load_state_dict(resume["model"])
                opt.load_state_dict(resume["opt"])
                labels, k_history = resume["labels"], resume["k_history"]
                period, last_loss, state["iter"] = resume["period"], resume["last_loss"], resume["iter"]
                nc = int(labels.max()) + 1
                restore_rng(resume["rng"], gen)

            def save(epoch: int, partial: tuple[float, int]) -> None:
                ckpt.save({"epoch": epoch, "period": period, "partial": list(partial), "model": model.state_dict(),
                           "opt": opt.state_dict(), "labels": labels, "k_history": k_history,
                           "last_loss": last_loss, "iter": state["iter"], "rng": capture_rng(gen)})

            bar = epoch_bar(int(c["max_periods"]) + 1, ctx.progress, "jule", period)
            while nc > k_target:
                train = period < int(c["max_periods"])
                if train:
                    done, partial = 0, (0.0, 0)
                    if resume is not None:
                        done, partial = resume["epoch"], tuple(resume["partial"])
                        resume = None
                    last_loss = self._train_period(model, opt, X, labels, device, gen, augment, state,
                                                   start=done, partial=partial, save=save)
                    feats = embed(model, X, device=device)
                W, _ = affinity_graph(feats, int(c["ks"]), float(c["a"]))
                n_merge = nc - k_target
                if train:
                    n_merge = min(int(math.ceil(float(c["eta"]) * nc)), n_merge)
                labels, _ = agglomerate(W, labels, n_merge, kc=int(c["kc"]), lam=float(c["lam"]),
                                        kc_min_clusters=int(c["kc_min_clusters"]), features=feats)
                nc = int(labels.max()) + 1
                k_history.append(nc)
                period += 1
                bar.update(1)
                metrics = {"k": nc} if math.isnan(last_loss) else {"loss": last_loss, "k": nc}
                log_epoch(ctx, bar, metrics, period)
            bar.close()
            if period == 0:
                # the initial clustering already had K clusters (tiny inputs): still learn features
                self._train_period(model, opt, X, labels, device, gen, augment, state)
                feats = embed(model, X, device=device)
        info = {
            "k_found": int(nc), "k_target": int(k_target), "k_initial": n_init,
            "k_history": k_history, "periods": period, "final_loss": last_loss,
            "iterations": state["iter"], "wall_time_s": time.time() - t0,
        }
        return ClusterResult(labels=labels, embedding=feats, info=info)

    def _train_period(self, model, opt, X, labels, device, gen, augment, state, start: int = 0,
                      partial: tuple[float, int] = (0.0, 0), save=None) -> float:
        """The period's CNN epochs from epoch ``start`` (``partial``: the loss sum and triplet count
        of the epochs before it); ``save(epochs_done, partial)`` after each epoch."""
        c = self.cfg
        lab = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        model.train()
        total, count = partial
        for epoch in range(start, int(c["epochs_per_period"])):
            for idx in shuffled_batches(len(X), int(c["batch_size"]), gen, drop_last=False):
                yb = lab[idx].to(device)
                xb = X[idx]
                if augment is not None:
                    xb = augment(xb, gen)
                f = model(xb.to(device))
                loss, n_trip = weighted_triplet_loss(
                    f, yb, gamma=float(c["gamma"]), margin=float(c["margin"]),
                    n_neg=int(c["n_negatives"]), negatives=c["negatives"], gen=gen)
                lr = float(c["lr"]) * (1 + float(c["lr_gamma"]) * state["iter"]) ** -float(c["lr_power"])
                for g in opt.param_groups:
                    g["lr"] = lr
                state["iter"] += 1
                if n_trip == 0:
                    continue
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * n_trip
                count += n_trip
            if save is not None:
                save(epoch + 1, (total, count))
        return total / count if count else float("nan")
