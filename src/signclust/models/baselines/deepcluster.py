"""DeepCluster (Caron et al. 2018, seed 002).

Each epoch: CNN features of the clean images -> PCA whitening + L2 -> k-means (faiss)
-> pseudo-labels; a freshly initialised linear classifier on top of the CNN is then trained
for one pass on augmented images, sampled uniformly over pseudo-labels. The two guards
against degenerate solutions from the paper are both here:

- empty clusters: a non-empty cluster's centroid is copied with a small perturbation and
  its points are split between the two (faiss applies the same rule inside its iterations;
  ``fix_empty_clusters`` makes it hold for the final assignment too);
- trivial parameterisation: images are drawn uniformly over pseudo-labels
  (``uniform_label_sampler``), so one huge cluster cannot dominate the loss.

After the last training pass the features are clustered once more: that k-means is the
returned assignment, and its input (whitened, L2-normalised features) the embedding.
Not carried over: Sobel pre-filtering (the paper uses it to remove colour; glyphs are
grey already) and AlexNet/VGG (a small CNN suits 32-64 px glyphs).
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from signclust.data.corpus import Corpus
from signclust.models.base import ClusterResult, FitContext, register
from signclust.models.baselines._nets import (Baseline, GlyphAugment, GlyphCNN, embed,
                                              epoch_bar, faiss_kmeans, fit_setup,
                                              images_to_tensor, log_epoch, pca_whiten_l2,
                                              require_k, uniform_label_sampler)
from signclust.models.checkpoint import FitCheckpoint, capture_rng, restore_rng
from signclust.models.params import Param


def fix_empty_clusters(x: np.ndarray, labels: np.ndarray, centroids: np.ndarray, k: int,
                       gen: torch.Generator, eps: float = 1.0 / 1024) -> tuple[np.ndarray, np.ndarray, int]:
    """Give every empty cluster half of a donor cluster (DeepCluster's rule).

    The donor is drawn with probability proportional to (size - 1) among clusters with at
    least 2 points (as in faiss); its centroid c becomes c(1 + eps*s) and the empty
    cluster's c(1 - eps*s) for random signs s, and its points go to the nearer of the two.
    If the perturbation leaves one side empty (e.g. identical points), the points are split
    in half by their projection on the perturbation. Returns (labels, centroids, n_fixed).
    """
    labels = np.asarray(labels, dtype=np.int64).copy()
    centroids = np.array(centroids, dtype=np.float32, copy=True)
    if len(x) < k:
        raise ValueError(f"cannot fill {k} clusters with {len(x)} points")
    counts = np.bincount(labels, minlength=k)
    n_fixed = 0
    for empty in np.flatnonzero(counts == 0):
        weights = np.maximum(counts - 1, 0).astype(np.float64)
        u = float(torch.rand(1, generator=gen)) * weights.sum()
        donor = int(min(np.searchsorted(np.cumsum(weights), u, side="right"), k - 1))
        while counts[donor] < 2:            # guard against float round-off at the edges
            donor = (donor + 1) % k
        members = np.flatnonzero(labels == donor)
        c = centroids[donor]
        signs = (torch.randint(0, 2, c.shape, generator=gen).numpy() * 2 - 1).astype(np.float32)
        delta = eps * signs * np.where(np.abs(c) > 0, np.abs(c), 1.0)
        proj = (x[members] - c) @ delta
        side_b = proj < 0                   # nearer to c - delta than to c + delta
        if side_b.all() or not side_b.any():
            order = np.argsort(proj, kind="stable")
            side_b = np.zeros(len(members), dtype=bool)
            side_b[order[: len(members) // 2]] = True
        labels[members[side_b]] = empty
        centroids[donor], centroids[empty] = c + delta, c - delta
        counts[donor], counts[empty] = int((~side_b).sum()), int(side_b.sum())
        n_fixed += 1
    return labels, centroids, n_fixed


class _DeepClusterNet(nn.Module):
    """CNN -> features (pre-ReLU, what k-means sees) -> ReLU -> top layer (re-made per epoch)."""

    def __init__(self, image_size: int, feat_dim: int, width: int):
        super().__init__()
        self.features = GlyphCNN(image_size, feat_dim, width)
        self.top_layer: nn.Linear | None = None

    def forward(self, x):
        return self.top_layer(F.relu(self.features(x)))


@register
class DeepCluster(Baseline):
    name = "deepcluster"
    needs_k = True
    fit_checkpoint = True
    PARAMS = {
        "epochs": Param(30, int, min=1, doc="clustering + training passes"),
        "batch_size": Param(128, int, min=2, doc="images per SGD step"),
        "lr": Param(0.05, float, gt=0, doc="SGD learning rate (CNN and top layer)"),
        "momentum": Param(0.9, float, min=0, lt=1, doc="SGD momentum"),
        "weight_decay": Param(1e-5, float, min=0, doc="SGD weight decay"),
        "width": Param(16, int, min=1, doc="channels of the first conv block (doubling per block)"),
        "feat_dim": Param(128, int, min=1, doc="CNN feature size (what k-means sees, before PCA)"),
        "pca_dim": Param(64, int, min=1, doc="PCA-whitening dimension before k-means"),
        "overcluster": Param(1.0, float, gt=0, doc="k = round(overcluster * K_true) during training"),
        "kmeans_iter": Param(20, int, min=1, doc="k-means iterations"),
        "kmeans_redo": Param(3, int, min=1, doc="k-means restarts: cheap, and one run can land badly"),
        "augment": Param(True, bool, doc="train on augmented images (GlyphAugment)"),
        "embed_batch": Param(512, int, min=1, doc="images per no-grad forward when embedding"),
    }
    # Caron et al.: SGD lr 0.05, momentum 0.9, wd 1e-5, batch 256, PCA 256, 500 epochs.
    # Their k = 10000 on ImageNet (10x the classes) served feature transfer; as a clustering
    # method (the MNIST-style numbers) k = the number of classes, hence overcluster 1.
    PRESETS = {"paper": {"epochs": 500, "batch_size": 256, "lr": 0.05, "momentum": 0.9,
                         "weight_decay": 1e-5, "pca_dim": 256, "overcluster": 1.0, "width": 64,
                         "feat_dim": 512, "kmeans_redo": 1}}

    def fit(self, corpus: Corpus, ctx: FitContext) -> ClusterResult:
        p = self.p
        t0 = time.time()
        device, gen = fit_setup(ctx)
        k_final = require_k(self.name, ctx)
        k_train = min(require_k(self.name, ctx, p["overcluster"]), corpus.n_tokens)
        X = images_to_tensor(corpus.token_images())
        net = _DeepClusterNet(X.shape[-1], p["feat_dim"], p["width"]).to(device)
        opt = torch.optim.SGD(net.features.parameters(), lr=p["lr"], momentum=p["momentum"],
                              weight_decay=p["weight_decay"])
        augment = GlyphAugment() if p["augment"] else None

        def cluster(k: int, step: int):
            feats = embed(net.features, X, p["embed_batch"], device)
            z = pca_whiten_l2(feats, p["pca_dim"], seed=ctx.seed)
            labels, cent, obj = faiss_kmeans(z, k, seed=ctx.seed + step, niter=p["kmeans_iter"],
                                             nredo=p["kmeans_redo"])
            labels, cent, n_fixed = fix_empty_clusters(z, labels, cent, k, gen)
            return labels, z, obj, n_fixed

        with FitCheckpoint.for_fit(self, corpus, ctx) as ckpt:
            history: list[dict] = []
            prev, start = None, 0
            state = ckpt.load()
            if state is not None:
                net.features.load_state_dict(state["features"])
                opt.load_state_dict(state["opt"])
                start, history, prev = state["epoch"], state["history"], state["prev"]
                restore_rng(state["rng"], gen)
            bar = epoch_bar(p["epochs"], ctx.progress, self.name, start)
            for epoch in bar:
                prev = self._epoch(net, opt, X, cluster, k_train, gen, augment, device, epoch, prev, history)
                ckpt.save({"epoch": epoch + 1, "features": net.features.state_dict(), "opt": opt.state_dict(),
                           "prev": prev, "history": history, "rng": capture_rng(gen)})
                log_epoch(ctx, bar, history[-1], epoch)
            labels, z, obj, n_fixed = cluster(k_final, p["epochs"])
        info = {"k_found": int(len(np.unique(labels))), "k_train": k_train,
                "final_kmeans_obj": obj, "final_empty_fixed": n_fixed,
                "loss": history[-1]["loss"] if history else None,
                "history": history, "wall_s": time.time() - t0}
        return ClusterResult(labels, z, info)

    def _epoch(self, net, opt, X, cluster, k_train, gen, augment, device, epoch, prev, history):
        """One epoch: cluster the features, train on the pseudo-labels; appends to ``history``."""
        from sklearn.metrics import normalized_mutual_info_score as nmi
        p = self.p
        n = len(X)
        labels, _, obj, n_fixed = cluster(k_train, epoch)
        # a fresh top layer each epoch: the pseudo-label ids are unrelated across epochs
        top = nn.Linear(p["feat_dim"], k_train)
        with torch.no_grad():
            top.weight.copy_(0.01 * torch.randn(top.weight.shape, generator=gen))
            top.bias.zero_()
        net.top_layer = top.to(device)
        opt_top = torch.optim.SGD(net.top_layer.parameters(), lr=p["lr"],
                                  momentum=p["momentum"], weight_decay=p["weight_decay"])
        targets = torch.from_numpy(labels)
        idx = torch.from_numpy(uniform_label_sampler(labels, n, gen))
        net.train()
        tot, cnt = 0.0, 0
        for batch in torch.split(idx, p["batch_size"]):
            if len(batch) < 2:
                continue
            xb = X[batch].to(device)
            if augment is not None:
                xb = augment(xb, gen)
            loss = F.cross_entropy(net(xb), targets[batch].to(device))
            opt.zero_grad()
            opt_top.zero_grad()
            loss.backward()
            opt.step()
            opt_top.step()
            tot += loss.item() * len(batch)
            cnt += len(batch)
        stats = {"loss": tot / max(cnt, 1), "kmeans_obj": obj, "empty_fixed": n_fixed,
                 "nmi_prev": float(nmi(prev, labels)) if prev is not None else 0.0}
        history.append(stats)
        return labels
