"""A contrastive glyph encoder fitted on the corpus itself: the visual side of ``lm`` on a noisy corpus.

SimCLR (Chen et al. 2020) on the normalised glyphs: two randomly deformed views of each image go
through ``GlyphCNN`` and a projection head; the NT-Xent loss makes each view pick out its twin
among the 2B - 1 other views of the batch. What survives is what the deformations do not change:
the shape of the sign rather than the hand that wrote it, which pixel and PCA features cannot
separate (a sign's forms by two hands are further apart there than two signs by one hand).

The deformations are a smooth random displacement field (``elastic``: pen wobble, letterform
proportions) followed by ``GlyphAugment`` (affine warp, stroke width, noise), both scaled by
``strength``. Strong deformations merge signs of a large inventory that differ by one stroke;
the default strength is half of the usual glyph augmentation. The embedding returned is the
encoder's feature (before the projection head, as SimCLR evaluates it), L2-normalised.

The deformations are ours, not the hand's. A caller that knows pairs of images that are likely one
sign written twice (``lm``: within-text mutual nearest neighbours, one hand) can go on training with
each pair's two images as the two views (``pairs``, one list of pairs per round, each round
``pair_epochs`` epochs, as NNCLR and SCAN take mined neighbours as positives): the variation it
then learns to ignore is the corpus's own.
"""
from __future__ import annotations

import copy
import hashlib
import os
from collections import OrderedDict
from dataclasses import astuple, dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from signclust.config import seed_everything, torch_device
from signclust.models.baselines._nets import (GlyphAugment, GlyphCNN, embed, epoch_bar, images_to_tensor, mlp,
                                              shuffled_batches)
from signclust.models.checkpoint import capture_rng, restore_rng


@dataclass
class EncoderConfig:
    epochs: int               # passes over (at most ``max_images`` of) the images
    strength: float           # deformation scale: 1 is the usual glyph augmentation, 0 none
    dim: int = 64             # encoder feature size (what is returned)
    width: int = 16           # GlyphCNN channels of the first block
    tau: float = 0.2          # NT-Xent temperature
    batch: int = 256
    lr: float = 3e-3
    max_images: int = 20000   # an epoch sees at most this many images (a random subset beyond)
    pair_epochs: int = 30     # epochs of each round of ``pairs`` (train_encoder)
    precision: str = "fp32"   # of the training steps' network: "fp32", "bf16" or "auto" (compute_dtype)


PRECISIONS = ("auto", "bf16", "fp32")


# oneDNN instruction-set caps (ONEDNN_MAX_CPU_ISA, formerly DNNL_MAX_CPU_ISA) below AVX512_CORE_BF16:
# under them oneDNN emulates bf16 whatever the CPU has
_ISA_CAPS_WITHOUT_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                                    "AVX512_CORE_VNNI"})


def native_bf16(dev: torch.device) -> bool:
    """Whether ``dev`` multiplies bfloat16 in hardware: a CUDA GPU that supports it, or a CPU with
    AVX512-BF16 or AMX whose oneDNN is not capped below them. Elsewhere oneDNN emulates bf16
    convolutions and a step is slower than in float32 (benchmarks/bench_encoder.py under
    ONEDNN_MAX_CPU_ISA; figures in the README)."""
    if dev.type == "cuda":
        return torch.cuda.is_bf16_supported()
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    if cap.strip().upper() in _ISA_CAPS_WITHOUT_BF16:
        return False
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def compute_dtype(precision: str, dev: torch.device) -> torch.dtype:
    """The dtype of the encoder's training forward and backward passes: bfloat16 for "bf16", and
    for "auto" where the device has it in hardware (``native_bf16``); float32 otherwise. The
    weights, Adam's moments, the loss and the returned features stay float32 (mixed precision)."""
    if precision not in PRECISIONS:
        raise ValueError(f"encoder precision {precision!r} is not one of {PRECISIONS}")
    if precision == "auto":
        precision = "bf16" if native_bf16(torch.device(dev)) else "fp32"
    return torch.bfloat16 if precision == "bf16" else torch.float32


def elastic(x: torch.Tensor, alpha: float, gen: torch.Generator, grid: int = 4) -> torch.Tensor:
    """A smooth random displacement of each image (n, 1, H, W): a (grid x grid) field of
    N(0, (2 alpha / H)^2) offsets in affine_grid's [-1, 1] coordinates (about alpha pixels),
    interpolated bicubically to every pixel."""
    n, _, h, w = x.shape
    coarse = torch.randn(n, 2, grid, grid, generator=gen) * alpha / h * 2
    flow = F.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=False).permute(0, 2, 3, 1)
    base = F.affine_grid(torch.eye(2, 3).unsqueeze(0), (1, 1, h, w), align_corners=False)   # (1, H, W, 2), every image's
    return F.grid_sample(x, (base + flow).to(x.device), align_corners=False)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """SimCLR's loss for two views (B, d) of one batch: the mean over the 2B views of
    -log softmax(cos(view, twin) / tau) against every other view of the batch."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)                     # (2B, d)
    sim = z @ z.t() / tau
    sim = sim.masked_fill(torch.eye(len(z), dtype=torch.bool, device=z.device), float("-inf"))
    b = len(z1)
    twin = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)]).to(z.device)
    return F.cross_entropy(sim, twin)


# Fits that differ only in what the encoder does not see (the ablation's variants, an Optuna
# study's trials) would train the same encoder again: the last few results are kept in this
# process, keyed on the glyph bytes, the config, the seed, the device and the pair rounds, together
# with the global RNG states the training left behind (so that a hit leaves the process as a
# training would) and the trained state (from which a further round of pairs goes on).
_CACHE: OrderedDict[str, tuple[np.ndarray, dict, dict]] = OrderedDict()
CACHE_SIZE = 8

Pairs = tuple[np.ndarray, np.ndarray]     # (a, b): image a[i] and image b[i] are likely one sign


def cache_key(glyphs: np.ndarray, cfg: EncoderConfig, seed: int, device, pairs: tuple = ()) -> str:
    if not pairs:                           # the SimCLR phase does not read pair_epochs: one entry for all
        cfg = replace(cfg, pair_epochs=0)
    h = hashlib.sha1(np.ascontiguousarray(glyphs).tobytes())
    h.update(repr((glyphs.shape, str(glyphs.dtype), astuple(cfg), seed, str(device), len(pairs))).encode())
    for a, b in pairs:
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes() + b"|")
        h.update(np.ascontiguousarray(b, dtype=np.int64).tobytes() + b"|")
    return h.hexdigest()


def train_encoder(glyphs: np.ndarray, cfg: EncoderConfig, seed: int, device: str = "auto",
                  progress: bool = False, cache: bool = True, pairs: list[Pairs] | tuple = ()) -> np.ndarray:
    """uint8 (m, H, W) normalised glyphs -> float32 (m, cfg.dim) L2-normalised features.
    Every random draw comes from one CPU generator seeded with ``seed``. Images become float
    tensors a batch at a time (100k glyphs would be 0.9 GB as one tensor). ``pairs``: after the
    SimCLR epochs, one round of ``cfg.pair_epochs`` epochs per entry, with each pair's two images
    as the two views. With ``cache``, the same glyphs, config, seed, device and pairs return (a copy
    of) the features trained before, and a call with one more round of pairs goes on from the
    cached state of the rounds before it."""
    return _encode(glyphs, cfg, seed, torch_device(device), progress, cache, tuple(pairs))[0].copy()


def _encode(glyphs, cfg, seed, dev, progress, cache, pairs) -> tuple[np.ndarray, dict]:
    key = cache_key(glyphs, cfg, seed, dev, pairs) if cache else None
    if key in _CACHE:
        feats, states, state = _CACHE[key]
        _CACHE.move_to_end(key)
        restore_rng(states)
        return feats, state
    if pairs:                                   # the rounds before the last (cached or trained), then it
        _, before = _encode(glyphs, cfg, seed, dev, progress, cache, pairs[:-1])
        feats, state = _refine(glyphs, cfg, before, pairs[-1], dev, progress, len(pairs))
    else:
        feats, state = _train(glyphs, cfg, seed, dev, progress)
    if key is not None:
        _CACHE[key] = (feats.copy(), capture_rng(), state)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return feats, state


def _parts(glyphs: np.ndarray, cfg: EncoderConfig, dev, gen: torch.Generator):
    """The encoder, its projection head, their optimiser and the random view of a batch."""
    # channels_last: oneDNN's NHWC convolutions and max-pooling train faster on CPU (benchmarks/bench_encoder.py)
    net = GlyphCNN(image_size=glyphs.shape[-1], feat_dim=cfg.dim, width=cfg.width, n_blocks=3,
                   pool=2).to(dev, memory_format=torch.channels_last)
    head = mlp(cfg.dim, 128, 64).to(dev)
    opt = torch.optim.Adam(list(net.parameters()) + list(head.parameters()), lr=cfg.lr)
    s = cfg.strength
    augment = GlyphAugment(rotation=8 * s, scale=(1 - 0.1 * s, 1 + 0.1 * s), translate=0.06 * s,
                           shear=10 * s, p_thicker=0.3, p_thinner=0.3, noise=0.03)

    def view(xb):
        return augment(elastic(xb, 2 * s, gen), gen).to(dev)
    return net, head, opt, view


def _step(net, head, opt, view, a: np.ndarray, b: np.ndarray, tau: float,
          dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One NT-Xent step with images a[i] and b[i] (B, H, W) as the twins (b is a: SimCLR); the
    network's passes in ``dtype`` (compute_dtype), the views and the loss in float32."""
    xa = images_to_tensor(a)                                            # (B, 1, H, W)
    xb = xa if b is a else images_to_tensor(b)
    # both views in one forward pass: BatchNorm normalises them with the same statistics
    views = torch.cat([view(xa), view(xb)]).contiguous(memory_format=torch.channels_last)
    with torch.autocast(views.device.type, dtype=dtype, enabled=dtype != torch.float32):
        z = head(net(views)).float()                                    # (2B, 64)
    loss = nt_xent(z[:len(a)], z[len(a):], tau)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def _state(net, head, opt, gen: torch.Generator) -> dict:
    """What a further round of pairs goes on from (copies: the cache must not share live tensors)."""
    return {"net": copy.deepcopy(net.state_dict()), "head": copy.deepcopy(head.state_dict()),
            "opt": copy.deepcopy(opt.state_dict()), "gen": gen.get_state()}


def _features(net, glyphs: np.ndarray, cfg: EncoderConfig, dev) -> np.ndarray:
    feats = np.concatenate([embed(net, images_to_tensor(glyphs[a:a + cfg.max_images]), device=dev)
                            for a in range(0, len(glyphs), cfg.max_images)])
    return F.normalize(torch.from_numpy(feats), dim=1).numpy()


def _epochs(n: int, desc: str, progress: bool, batches, step) -> None:
    """``n`` epochs of ``step(idx)`` over the index batches ``batches()`` draws for each epoch."""
    bar = epoch_bar(n, progress, desc)
    loss = None
    for _ in bar:
        for idx in batches():
            if len(idx) < 8:                    # too few negatives (and BatchNorm) for a step
                continue
            loss = step(idx.numpy())
        if loss is not None:                    # None: fewer than 8 images, nothing to train on
            bar.set_postfix(loss=f"{loss.item():.3f}")


def _train(glyphs: np.ndarray, cfg: EncoderConfig, seed: int, dev, progress: bool) -> tuple[np.ndarray, dict]:
    seed_everything(seed)
    gen = torch.Generator().manual_seed(seed)
    net, head, opt, view = _parts(glyphs, cfg, dev, gen)
    steps = -(-min(len(glyphs), cfg.max_images) // cfg.batch)
    dtype = compute_dtype(cfg.precision, dev)

    def step(idx):
        batch = glyphs[idx]
        return _step(net, head, opt, view, batch, batch, cfg.tau, dtype)
    _epochs(cfg.epochs, "encoder", progress,
            lambda: shuffled_batches(len(glyphs), cfg.batch, gen, drop_last=False)[:steps], step)
    return _features(net, glyphs, cfg, dev), _state(net, head, opt, gen)


def _refine(glyphs: np.ndarray, cfg: EncoderConfig, before: dict, pairs: Pairs, dev, progress: bool,
            round_: int) -> tuple[np.ndarray, dict]:
    """One round of ``cfg.pair_epochs`` epochs from the trained state ``before``: in each batch of
    pairs, a[i]'s view and b[i]'s view are the twins."""
    gen = torch.Generator()
    gen.set_state(before["gen"])
    net, head, opt, view = _parts(glyphs, cfg, dev, gen)
    net.load_state_dict(before["net"])
    head.load_state_dict(before["head"])
    # a copy: Optimizer.load_state_dict keeps the given moment tensors, which the steps below update in
    # place, so the cached state would go on from this round the next time it is read
    opt.load_state_dict(copy.deepcopy(before["opt"]))
    a, b = (np.asarray(p, dtype=np.int64) for p in pairs)
    dtype = compute_dtype(cfg.precision, dev)
    if len(a) != len(b):
        raise ValueError(f"train_encoder: a round of pairs has {len(a)} first and {len(b)} second images")
    _epochs(cfg.pair_epochs, f"encoder pairs {round_}", progress,
            lambda: shuffled_batches(len(a), cfg.batch, gen, drop_last=False),
            lambda idx: _step(net, head, opt, view, glyphs[a[idx]], glyphs[b[idx]], cfg.tau, dtype))
    return _features(net, glyphs, cfg, dev), _state(net, head, opt, gen)
