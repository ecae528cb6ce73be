"""Speed of one training step of lm's contrastive glyph encoder: NCHW against channels_last, and
channels_last in float32 against bfloat16 mixed precision (``encoder_precision``).

    .venv/bin/python benchmarks/bench_encoder.py
    .venv/bin/python benchmarks/bench_encoder.py --steps 20 --batch 256 --size 32

models/visual_encoder.py keeps GlyphCNN and its input batches in channels_last (NHWC) memory
format. This script times ``visual_encoder._step`` (two deformed views of a batch, forward,
NT-Xent, backward, Adam) as the encoder runs it, and the same step with the network and views in
the default NCHW format, on the same random glyphs, same weights and same views, in one run; it
prints ms per step for each, their ratio, and how far the two formats' losses drift apart over
the steps (float rounding only: the same arithmetic in another order). The bf16 row is the step of
``encoder_precision: bf16`` (the network's passes in bfloat16 under autocast); its losses drift
further (bfloat16 keeps 8 bits of mantissa). Whether this CPU has bf16 in hardware
(``visual_encoder.native_bf16``) is printed first: without it oneDNN emulates bf16 and the row is
slower than float32 (``ONEDNN_MAX_CPU_ISA=AVX512_CORE`` or ``AVX2`` shows such a CPU on one that
has it).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from signclust.models import visual_encoder as E
from signclust.models.baselines._nets import images_to_tensor


def run(glyphs: np.ndarray, cfg: E.EncoderConfig, steps: int, channels_last: bool,
        dtype: torch.dtype = torch.float32) -> tuple[float, list[float]]:
    """Mean seconds per step after one warm-up step, and the loss of every step."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    net, head, opt, view = E._parts(glyphs, cfg, "cpu", gen)
    if not channels_last:
        net = net.to(memory_format=torch.contiguous_format)

    def step(batch):
        if channels_last:
            return E._step(net, head, opt, view, batch, batch, cfg.tau, dtype)
        x = images_to_tensor(batch)                         # the same step, views left in NCHW
        z = head(net(torch.cat([view(x), view(x)])))
        loss = E.nt_xent(z[:len(batch)], z[len(batch):], cfg.tau)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    batches = [glyphs[i * cfg.batch:(i + 1) * cfg.batch] for i in range(steps + 1)]
    losses = [step(batches[0]).item()]
    t = time.perf_counter()
    for b in batches[1:]:
        losses.append(step(b).item())
    return (time.perf_counter() - t) / steps, losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256, help="images per step (two views each)")
    ap.add_argument("--size", type=int, default=32, help="glyph side in pixels (the corpora's normalised glyphs: 32)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    glyphs = ((rng.random((args.batch * (args.steps + 1), args.size, args.size)) > 0.8) * 255).astype(np.uint8)
    cfg = E.EncoderConfig(epochs=1, strength=0.5, batch=args.batch)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch} x 2 views, "
          f"{args.size} px, {args.steps} timed steps; bf16 in hardware: {E.native_bf16(torch.device('cpu'))}")
    nchw, loss_nchw = run(glyphs, cfg, args.steps, channels_last=False)
    nhwc, loss_nhwc = run(glyphs, cfg, args.steps, channels_last=True)
    print(f"NCHW (reference)  {1000 * nchw:7.1f} ms / step")
    print(f"channels_last     {1000 * nhwc:7.1f} ms / step   speed-up {nchw / nhwc:.2f}x")
    bf16, loss_bf16 = run(glyphs, cfg, args.steps, channels_last=True, dtype=torch.bfloat16)
    print(f"channels_last bf16 {1000 * bf16:6.1f} ms / step   speed-up {nhwc / bf16:.2f}x against channels_last")
    for name, other in (("channels_last", loss_nhwc), ("bf16", loss_bf16)):
        print(f"loss, first step: NCHW {loss_nchw[0]:.6f} vs {name} {other[0]:.6f}; largest difference over "
              f"{len(loss_nchw)} steps {max(abs(a - b) for a, b in zip(loss_nchw, other)):.2e}")


if __name__ == "__main__":
    main()
