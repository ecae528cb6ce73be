"""Parts the deep baselines share, written once.

- ``Baseline``: a Clusterer with ``self.p``, the resolved parameters (declared in ``PARAMS``,
  named sets such as the paper's in ``PRESETS``; resolved and checked by ``Clusterer``).
- ``fit_setup``: seeding, device, one CPU ``torch.Generator`` that drives every random draw
  so that a seed fixes the run on CPU.
- ``GlyphCNN``: a small conv net for 32-64 px sign images.
- ``images_to_tensor``, ``GlyphAugment``, ``random_resized_crop``: input and the
  augmentations that make sense for glyphs (no colour jitter, no flips: a mirrored sign
  may be another sign).
- ``embed``, ``shuffled_batches``, ``uniform_label_sampler``, ``epoch_bar``, ``log_epoch``:
  the training-loop plumbing.
- ``pca_whiten_l2``, ``faiss_kmeans``: the generic feature post-processing and k-means
  (scikit-learn and faiss do the arithmetic).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from signclust.config import seed_everything, torch_device
from signclust.errors import UserError
from signclust.models.base import Clusterer


# --------------------------------------------------------------------------- params & setup
class Baseline(Clusterer):
    """A clusterer whose class declares ``PARAMS`` (CPU-feasible defaults) and ``PRESETS``
    (``"paper"``: the paper's settings). ``self.p`` is ``self.params``, the resolved dict."""

    @property
    def p(self) -> dict:
        return self.params


def fit_setup(ctx) -> tuple[torch.device, torch.Generator]:
    """Seed the global RNGs and return (device, generator).

    The generator lives on the CPU: every random draw (batch order, augmentation parameters,
    noise) is made there and moved to the device afterwards, so a seed gives the same draws
    on CPU and GPU.
    """
    seed_everything(int(ctx.seed))
    gen = torch.Generator()
    gen.manual_seed(int(ctx.seed))
    return torch_device(ctx.device), gen


def require_k(method: str, ctx, factor: float = 1.0) -> int:
    if ctx.n_clusters is None:
        raise UserError(f"{method} needs the number of clusters (FitContext.n_clusters)")
    return max(2, int(round(ctx.n_clusters * factor)))


# --------------------------------------------------------------------------- network
def _block(c_in: int, c_out: int, n_convs: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(n_convs):
        layers += [nn.Conv2d(c_in if i == 0 else c_out, c_out, 3, padding=1, bias=False),
                   nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
    layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class GlyphCNN(nn.Module):
    """Conv-BN-ReLU blocks (each halves the resolution), adaptive pooling, a linear layer.

    Three blocks take 48 px to 6 px; the adaptive pool to ``pool`` x ``pool`` keeps a
    coarse layout (where the strokes are matters for signs, unlike for natural-image
    classes) and makes any input size from 32 to 64 px give the same feature size.
    ``forward`` returns the pre-activation feature vector of size ``feat_dim``; methods
    put their own heads on top.
    """

    def __init__(self, image_size: int = 48, feat_dim: int = 128, width: int = 32,
                 n_blocks: int = 3, convs_per_block: int = 1, pool: int = 2):
        super().__init__()
        if image_size < 2 ** n_blocks:
            raise UserError(f"image size {image_size} is too small for {n_blocks} conv blocks")
        chans = [1] + [width * 2 ** i for i in range(n_blocks)]
        self.trunk = nn.Sequential(*[_block(chans[i], chans[i + 1], convs_per_block)
                                     for i in range(n_blocks)])
        self.pool = nn.AdaptiveAvgPool2d(pool)
        self.fc = nn.Linear(chans[-1] * pool * pool, feat_dim)
        self.feat_dim = feat_dim
        self.image_size = image_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.trunk(x)                                  # (n, C, H', W')
        # adaptive pooling's CUDA backward adds with atomics and has no deterministic kernel
        # (config.deterministic_cuda); the CPU keeps it, whose last bits the committed fits were made with
        h = grid_means(h, self.pool.output_size) if h.is_cuda else self.pool(h)
        return self.fc(torch.flatten(h, 1))                # (n, feat_dim)


def grid_means(h: torch.Tensor, side: int) -> torch.Tensor:
    """(n, C, H, W) -> (n, C, side, side): ``adaptive_avg_pool2d``'s means (to float rounding) by
    operations whose backward is deterministic on CUDA. Equal cells (H and W multiples of ``side``,
    as a 48 px glyph's 6 x 6 map is) are a fixed-window average pool; otherwise two products with
    averaging matrices, cell i of an axis of length L spanning [floor(i L / side), ceil((i + 1) L / side))
    as in adaptive pooling."""
    if h.shape[-2] % side == 0 and h.shape[-1] % side == 0:
        return F.avg_pool2d(h, (h.shape[-2] // side, h.shape[-1] // side))

    def averaging(length: int) -> torch.Tensor:                  # (side, length), rows sum to 1
        m = torch.zeros(side, length, dtype=h.dtype, device=h.device)
        for i in range(side):
            lo, hi = (i * length) // side, -((-(i + 1) * length) // side)
            m[i, lo:hi] = 1.0 / (hi - lo)
        return m
    return torch.einsum("nchw,ih,jw->ncij", h, averaging(h.shape[-2]), averaging(h.shape[-1]))


def mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    """Linear-BN-ReLU-Linear: the usual projection head of contrastive / SwAV methods."""
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.BatchNorm1d(d_hidden),
                         nn.ReLU(inplace=True), nn.Linear(d_hidden, d_out))


# --------------------------------------------------------------------------- data
def images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 (n, H, W), ink=255 on 0 -> float32 (n, 1, H, W) in [0, 1] (ink stays bright,
    so zero padding from affine warps and crops is background)."""
    arr = np.asarray(images)
    if arr.ndim != 3:
        raise UserError(f"expected images of shape (n, H, W); got {arr.shape}")
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32) / 255.0).unsqueeze(1)


def _uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=gen)


def _warp(x: torch.Tensor, theta: torch.Tensor, size: tuple[int, int] | None = None) -> torch.Tensor:
    out_size = (x.shape[0], x.shape[1]) + tuple(size or x.shape[-2:])
    grid = F.affine_grid(theta.to(x.device, x.dtype), out_size, align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _affine_theta(n: int, rot_deg: float, scale: tuple[float, float], translate: float,
                  shear_deg: float, gen: torch.Generator) -> torch.Tensor:
    """Sampling matrices (n, 2, 3) of a random similarity + shear, in affine_grid's
    normalised coordinates ([-1, 1], so ``translate`` is a fraction of half the side)."""
    ang = torch.deg2rad(_uniform(n, -rot_deg, rot_deg, gen))
    sh = torch.deg2rad(_uniform(n, -shear_deg, shear_deg, gen))
    # log-uniform scale, so zooming in and out are equally likely
    s = torch.exp(_uniform(n, math.log(scale[0]), math.log(scale[1]), gen))
    t = _uniform(2 * n, -translate, translate, gen).view(n, 2)
    cos, sin, tan = torch.cos(ang), torch.sin(ang), torch.tan(sh)
    # grid_sample maps output coords to input coords, so the matrix is the inverse
    # transform; dividing by s makes s > 1 enlarge the glyph.
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = cos / s
    theta[:, 0, 1] = (-sin + tan * cos) / s
    theta[:, 1, 0] = sin / s
    theta[:, 1, 1] = (cos + tan * sin) / s
    theta[:, :, 2] = t
    return theta


def grey_dilate(x: torch.Tensor) -> torch.Tensor:
    """3 x 3 grey dilation of images (n, 1, H, W): the maximum over each pixel's neighbourhood,
    outside the image ignored. The same values as ``F.max_pool2d(x, 3, stride=1, padding=1)``
    (a maximum is exact in any order) as a row maximum and then a column maximum of shifted
    views, faster on CPU, where stride-1 max-pooling of one channel is slow
    (benchmarks/bench_exact_speedups.py)."""
    h, w = x.shape[-2:]
    p = F.pad(x, (1, 1, 1, 1), value=float("-inf"))                   # (n, 1, H + 2, W + 2)
    rows = torch.maximum(torch.maximum(p[..., 0:w], p[..., 1:w + 1]), p[..., 2:w + 2])
    return torch.maximum(torch.maximum(rows[..., 0:h, :], rows[..., 1:h + 1, :]), rows[..., 2:h + 2, :])


def _stroke(x: torch.Tensor, p_thicker: float, p_thinner: float, gen: torch.Generator) -> torch.Tensor:
    """Per-image stroke-width change: grey dilation or erosion (-dilation(-x)), the way scribes'
    pens and scans differ. Only the images drawn for each are dilated or eroded."""
    if p_thicker <= 0 and p_thinner <= 0:
        return x
    u = torch.rand(x.shape[0], generator=gen).to(x.device)
    out = x.clone()
    thick = torch.nonzero(u < p_thicker).flatten()
    thin = torch.nonzero((u >= p_thicker) & (u < p_thicker + p_thinner)).flatten()
    if len(thick):
        out[thick] = grey_dilate(x[thick])
    if len(thin):
        out[thin] = -grey_dilate(-x[thin])
    return out


@dataclass
class GlyphAugment:
    """Random affine warp, stroke-width change and pixel noise on a batch (n, 1, H, W).

    All random numbers come from the caller's generator, so a seed fixes the views.
    Defaults are mild: a sign rotated by 45 degrees or stretched 1.5x can be a different
    sign in many scripts.
    """
    rotation: float = 10.0          # degrees, +-
    scale: tuple = (0.85, 1.15)
    translate: float = 0.1          # fraction of half the side
    shear: float = 8.0              # degrees, +-
    p_thicker: float = 0.25
    p_thinner: float = 0.25
    noise: float = 0.05             # std of additive gaussian noise

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        n = x.shape[0]
        x = _warp(x, _affine_theta(n, self.rotation, tuple(self.scale), self.translate,
                                   self.shear, gen))
        x = _stroke(x, self.p_thicker, self.p_thinner, gen)
        if self.noise > 0:
            x = x + self.noise * torch.randn(x.shape, generator=gen).to(x.device)
        return x.clamp_(0.0, 1.0)


def random_resized_crop(x: torch.Tensor, size: int, scale: tuple[float, float],
                        gen: torch.Generator, augment: GlyphAugment | None = None) -> torch.Tensor:
    """SwAV-style small views: a random square crop covering ``scale`` of the area, resized
    to ``size`` px (one affine sample does crop and resize), then optionally ``augment``."""
    n = x.shape[0]
    side = torch.sqrt(_uniform(n, scale[0], scale[1], gen))   # crop side / image side
    # the crop centre lies anywhere that keeps the crop inside the image
    centre = (torch.rand(n, 2, generator=gen) * 2 - 1) * (1 - side).unsqueeze(1)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = side
    theta[:, 1, 1] = side
    theta[:, :, 2] = centre
    out = _warp(x, theta, (size, size))
    return augment(out, gen) if augment is not None else out


# --------------------------------------------------------------------------- loops
def shuffled_batches(n: int, batch_size: int, gen: torch.Generator,
                     drop_last: bool = True) -> list[torch.Tensor]:
    """One epoch of index batches in a seeded random order. Drops a last batch smaller than
    2 even when ``drop_last`` is False (BatchNorm cannot train on one sample)."""
    perm = torch.randperm(n, generator=gen)
    batches = list(torch.split(perm, batch_size))
    if batches and (len(batches[-1]) < 2 or (drop_last and len(batches[-1]) < batch_size
                                             and len(batches) > 1)):
        batches.pop()
    return batches


def uniform_label_sampler(labels: np.ndarray, n_samples: int, gen: torch.Generator) -> np.ndarray:
    """Indices drawn so that every (non-empty) label is equally likely, then a member of it
    uniformly: DeepCluster's remedy for a few huge clusters dominating the pseudo-label loss.
    Samples cycle through a random permutation of each class, so every member is used
    before any repeats."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    per_class = int(math.ceil(n_samples / len(classes)))
    out = []
    for c in classes:
        members = np.flatnonzero(labels == c)
        reps = int(math.ceil(per_class / len(members)))
        picks = np.concatenate([members[torch.randperm(len(members), generator=gen).numpy()]
                                for _ in range(reps)])[:per_class]
        out.append(picks)
    idx = np.concatenate(out)
    idx = idx[torch.randperm(len(idx), generator=gen).numpy()]
    return idx[:n_samples]


@torch.no_grad()
def embed(model: nn.Module, X: torch.Tensor, batch_size: int = 512,
          device: torch.device | str = "cpu", fn=None) -> np.ndarray:
    """Batched no-grad forward in eval mode (BatchNorm uses running stats), restoring the
    module's train/eval mode afterwards. ``fn(model, xb)`` replaces ``model(xb)`` when given."""
    was_training = model.training
    model.eval()
    outs = []
    for start in range(0, len(X), batch_size):
        xb = X[start:start + batch_size].to(device)
        out = model(xb) if fn is None else fn(model, xb)
        outs.append(out.float().cpu())
    model.train(was_training)
    return torch.cat(outs).numpy().astype(np.float32)


def epoch_bar(n_epochs: int, progress: bool, desc: str, start: int = 0):
    """A progress bar over epochs ``start .. n_epochs - 1`` (a resumed fit starts later)."""
    from tqdm.auto import tqdm
    return tqdm(range(start, n_epochs), desc=desc, disable=not progress, leave=False,
                initial=start, total=n_epochs)


def log_epoch(ctx, bar, metrics: dict, step: int) -> None:
    """Show the epoch's numbers on the bar and hand them to the tracker if there is one."""
    bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items()})
    if ctx.log_metrics is not None:
        ctx.log_metrics({k: float(v) for k, v in metrics.items()}, step)


# --------------------------------------------------------------------------- features
def pca_whiten_l2(features: np.ndarray, dim: int, seed: int = 0) -> np.ndarray:
    """PCA to ``dim`` components with whitening, then L2-normalise each row: DeepCluster's
    pre-processing before k-means (whitening stops a few high-variance directions from
    deciding the clustering). ``dim`` is capped by the data's rank bound."""
    from sklearn.decomposition import PCA
    x = np.asarray(features, dtype=np.float64)
    dim = int(min(dim, x.shape[0], x.shape[1]))
    if dim < 1:
        raise UserError("pca_whiten_l2: need at least one component")
    z = PCA(n_components=dim, whiten=True, svd_solver="full", random_state=seed).fit_transform(x)
    z /= np.linalg.norm(z, axis=1, keepdims=True) + 1e-12
    return z.astype(np.float32)


def faiss_kmeans(x: np.ndarray, k: int, seed: int = 0, niter: int = 20, nredo: int = 1,
                 max_points_per_centroid: int = 100000,
                 threads: int = 1) -> tuple[np.ndarray, np.ndarray, float]:
    """faiss k-means (best of ``nredo`` seeded runs) -> (labels, centroids, objective).

    ``max_points_per_centroid`` is raised from faiss's 256 so that it never subsamples our
    (small) corpora silently, and the minimum lowered to 1 so that small test inputs do not
    print warnings.
    """
    import faiss
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not 1 <= k <= len(x):
        raise UserError(f"k-means: k={k} must lie in 1..{len(x)} (number of points)")
    km = faiss.Kmeans(x.shape[1], int(k), niter=int(niter), nredo=int(nredo), seed=int(seed),
                      max_points_per_centroid=max_points_per_centroid,
                      min_points_per_centroid=1, verbose=False)
    # One OpenMP thread by default: on a shared or oversubscribed CPU, faiss's spinning
    # threads made a 60-point k-means take seconds instead of milliseconds, and our corpora
    # (thousands of points) cluster in well under a second on one core.
    prev = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(int(threads))
    try:
        km.train(x)
        dist, lab = km.index.search(x, 1)
    finally:
        faiss.omp_set_num_threads(prev)
    return lab[:, 0].astype(np.int64), km.centroids.copy(), float(dist.sum())
