"""Learned codes of the images that two non-parametric baselines cluster: a small conv autoencoder's
codes, optionally embedded by UMAP (the N2D features of the DeepDPM paper).

DeepDPM (``features: ae``) and the DP-GMM (``features: ae_umap``) share them: the DeepDPM paper runs
every method of its Table 1 (DeepDPM, moVB's DP-GMM, k-means, ...) on the same features on
MNIST / USPS / Fashion-MNIST, the authors' ``pretrained_embeddings/umap_embedded_datasets/*_N2D``:
an autoencoder's codes, then UMAP to 10 dimensions (make_umap_embeddings.py: n_neighbors 20,
min_dist 0), then DeepDPM.py's default input transform, L2 rows. The authors' autoencoder is an
MLP trained on all 70 000 images; ours is a small conv autoencoder trained on the images at hand.

``CODE_PARAMS``: the parameters (and defaults) of the autoencoder and UMAP steps, declared once
for every class that uses them.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from signclust.errors import UserError
from signclust.models.baselines._nets import GlyphCNN, embed, epoch_bar, images_to_tensor, shuffled_batches
from signclust.models.checkpoint import FitCheckpoint, capture_rng, restore_rng
from signclust.models.params import Param

CODE_PARAMS = {
    "feat_dim": Param(10, int, min=1, doc="code size D"),
    "umap_neighbors": Param(20, int, min=2, doc="UMAP n_neighbors (the authors' 20)"),
    "umap_min_dist": Param(0.0, float, min=0, doc="UMAP min_dist (the authors' 0)"),
    "ae_epochs": Param(30, int, min=1, doc="autoencoder epochs"),
    "ae_width": Param(16, int, min=1, doc="autoencoder conv width"),
    "ae_lr": Param(1e-3, float, gt=0, doc="autoencoder Adam learning rate"),
}


class _ConvAE(nn.Module):
    """GlyphCNN encoder, transposed-conv decoder: the optional learned features."""

    def __init__(self, image_size: int, feat_dim: int, width: int):
        super().__init__()
        self.encoder = GlyphCNN(image_size=image_size, feat_dim=feat_dim, width=width)
        self.size = image_size
        self.s0 = int(math.ceil(image_size / 8))
        c = width * 4
        self.c0 = c
        self.fc = nn.Linear(feat_dim, c * self.s0 * self.s0)
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(c, c // 2, 4, stride=2, padding=1), nn.BatchNorm2d(c // 2), nn.ReLU(True),
            nn.ConvTranspose2d(c // 2, c // 4, 4, stride=2, padding=1), nn.BatchNorm2d(c // 4), nn.ReLU(True),
            nn.ConvTranspose2d(c // 4, 1, 4, stride=2, padding=1))

    def forward(self, x):
        z = self.encoder(x)
        h = F.relu(self.fc(z)).view(-1, self.c0, self.s0, self.s0)
        out = self.dec(h)
        if out.shape[-1] != self.size:
            out = F.interpolate(out, size=(self.size, self.size), mode="bilinear", align_corners=False)
        return torch.sigmoid(out)


def ae_features(images: np.ndarray, feat_dim: int, width: int, epochs: int, lr: float,
                batch_size: int, device, gen, progress: bool, ckpt: FitCheckpoint | None = None,
                resume: dict | None = None, name: str = "deepdpm") -> np.ndarray:
    """Codes of a conv autoencoder trained with MSE; with ``ckpt`` a checkpoint after every epoch
    (phase "ae"), ``resume`` one to continue from. The decoder rebuilds square images only."""
    if images.shape[1] != images.shape[2]:
        raise UserError(f"{name}: square images expected, got {images.shape[1:]}")
    X = images_to_tensor(images)
    model = _ConvAE(images.shape[1], feat_dim, width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    start = 0
    if resume is not None:
        model.load_state_dict(resume["model"])
        opt.load_state_dict(resume["opt"])
        start = resume["epoch"]
        restore_rng(resume["rng"], gen)
    bar = epoch_bar(epochs, progress, f"{name}-ae", start)
    for epoch in bar:
        tot, cnt = 0.0, 0
        for idx in shuffled_batches(len(X), batch_size, gen, drop_last=False):
            xb = X[idx].to(device)
            loss = F.mse_loss(model(xb), xb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * len(idx)
            cnt += len(idx)
        if ckpt is not None:
            ckpt.save({"phase": "ae", "epoch": epoch + 1, "model": model.state_dict(), "opt": opt.state_dict(),
                       "rng": capture_rng(gen)})
        bar.set_postfix(mse=f"{tot / max(cnt, 1):.4g}")
    return embed(model.encoder, X, device=device)


def umap_embed(z: np.ndarray, dim: int, n_neighbors: int, min_dist: float, seed: int,
               name: str = "deepdpm", without: str = "set umap_dim: 0") -> np.ndarray:
    """The authors' make_umap_embeddings.py: ``umap.UMAP(n_neighbors=20, min_dist=0,
    n_components=10)`` on the codes, before DeepDPM.py's input transform (its default: L2 rows,
    the scale the NIW prior's Psi = 0.005 I was set for). UMAP with min_dist 0 packs each kNN
    neighbourhood into a tight clump. Seeded, single-threaded (deterministic)."""
    try:
        import umap
    except ImportError as e:          # pragma: no cover - depends on the environment
        raise UserError(f"{name}: the UMAP step needs umap-learn (pip install umap-learn), or {without}") from e
    import warnings
    z = np.asarray(z, dtype=np.float64)
    n = len(z)
    if n < 4:
        return z
    dim = int(min(dim, n - 2))
    reducer = umap.UMAP(n_components=dim, n_neighbors=int(min(n_neighbors, n - 1)), min_dist=min_dist,
                        random_state=seed, n_jobs=1)
    # UMAP's numba kernels run on OpenMP, the same libgomp as torch's: they reset its thread count to
    # every core, and the fit that follows would train at that count, not at the one set (the figures
    # depend on it, and a 1-thread job beside another then oversubscribes the cores)
    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            # spectral initialisation falls back to random on a disconnected kNN graph; n_jobs with a seed
            warnings.simplefilter("ignore")
            out = reducer.fit_transform(z)
    finally:
        torch.set_num_threads(threads)
    return np.asarray(out, dtype=np.float64)


def l2_rows(z: np.ndarray) -> np.ndarray:
    """(n, d) -> each row divided by its Euclidean norm (DeepDPM.py's ``normalize`` transform)."""
    return z / (np.linalg.norm(z, axis=1, keepdims=True) + 1e-12)
