"""Speed of the parts of an ``lm`` fit that were rewritten to give the same numbers faster, each
against the code it replaced, timed in the same run on the same inputs:

    .venv/bin/python benchmarks/bench_exact_speedups.py
    .venv/bin/python benchmarks/bench_exact_speedups.py --repeats 50 --tokens 3000 --types 300

- stroke width (``_nets._stroke``, every augmented view of the glyph encoder and of the deep
  baselines): 3 x 3 grey dilation and erosion as shifted maxima of the drawn images only, against
  ``F.max_pool2d`` of every image twice (stride-1 max-pooling of one channel is slow on CPU);
- context counts (``lm_clusterer.context_counts``, every merge round): one ``np.bincount`` over all
  texts, against one ``np.add.at`` per text and side;
- type sums (``lm_clusterer.group_sums``: centroids in every merge round, ``hom_gain``, ``text_centre``):
  one sparse product, against ``np.add.at`` into a float64 array;
- within-text evidence (``lm_clusterer.within_text_evidence``, every merge round with a pair model,
  ``same_text: tokens``): the texts' token pairs and their log-odds made once a merge pass
  (``text_pairs``), then one gather and one sparse matrix a round, against a distance matrix, the
  log-odds and the counts of every text, every round.

For each it prints ms per call, the speed-up and whether the outputs are equal bit for bit (they
must be: the committed fits were made with the old code, and these changes keep them).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from signclust.models import lm_clusterer as L
from signclust.models.baselines import _nets


def stroke_reference(x: torch.Tensor, p_thicker: float, p_thinner: float, gen: torch.Generator) -> torch.Tensor:
    """``_nets._stroke`` as it was: both max-pools of every image, then a choice per image."""
    u = torch.rand(x.shape[0], generator=gen).to(x.device).view(-1, 1, 1, 1)
    thick = F.max_pool2d(x, 3, stride=1, padding=1)
    thin = -F.max_pool2d(-x, 3, stride=1, padding=1)
    out = torch.where(u < p_thicker, thick, x)
    return torch.where((u >= p_thicker) & (u < p_thicker + p_thinner), thin, out)


def context_counts_reference(z, texts, k):
    left, right = np.zeros((k, k + 1)), np.zeros((k, k + 1))
    for t in texts:
        np.add.at(left, (z[t], np.r_[k, z[t][:-1]]), 1)
        np.add.at(right, (z[t], np.r_[z[t][1:], k]), 1)
    return left, right


def group_sums_reference(x, z, k):
    out = np.zeros((k, x.shape[1]))
    np.add.at(out, z, x)
    return out


def within_text_evidence_reference(x, z, k, texts, pair, count):
    """``lm_clusterer.within_text_evidence`` as it was: one distance matrix per text and round."""
    from scipy import sparse
    from scipy.spatial.distance import cdist
    rows, cols, vals = [], [], []
    for t in texts:
        if len(t) < 2:
            continue
        lo = pair.log_odds(cdist(x[t], x[t]))
        zt = z[t]
        iu = np.triu_indices(len(t), 1)
        a, b = zt[iu[0]], zt[iu[1]]
        keep = a != b
        lo = lo[iu]
        if count == "tokens":
            _, where, n_in_text = np.unique(zt, return_inverse=True, return_counts=True)
            n_in_text = n_in_text[where.ravel()]
            lo = lo / np.maximum(n_in_text[iu[0]], n_in_text[iu[1]])
        rows.append(np.minimum(a, b)[keep])
        cols.append(np.maximum(a, b)[keep])
        vals.append(lo[keep])
    return sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(k, k))


def timed(fn, repeats: int):
    """(ms per call after one warm-up call, the last output)."""
    out = fn()
    t = time.perf_counter()
    for _ in range(repeats):
        out = fn()
    return 1000 * (time.perf_counter() - t) / repeats, out


def compare(cases, repeats: int, agreement) -> None:
    """Times each (name, reference, new) case, the reference first, and prints ms per call, the
    speed-up and ``agreement(reference output, new output)``, a phrase."""
    for name, ref, new in cases:
        t_ref, out_ref = timed(ref, repeats)
        t_new, out_new = timed(new, repeats)
        print(f"{name}: reference {t_ref:8.2f} ms, now {t_new:8.2f} ms, speed-up {t_ref / t_new:5.1f}x, "
              f"{agreement(out_ref, out_new)}")


def equal(a, b) -> bool:
    if isinstance(a, tuple):
        return all(equal(p, q) for p, q in zip(a, b))
    if hasattr(a, "tocsr"):                              # a sparse matrix: its stored arrays
        return equal((a.indptr, a.indices, a.data), (b.indptr, b.indices, b.data)) and a.shape == b.shape
    return bool(torch.equal(a, b)) if isinstance(a, torch.Tensor) else bool(np.array_equal(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--batch", type=int, default=256, help="views per stroke call (the encoder's batch)")
    ap.add_argument("--size", type=int, default=32, help="glyph side in pixels")
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--types", type=int, default=300)
    ap.add_argument("--text-length", type=int, default=30, help="tokens per text (cypriot's inscriptions: 10 or fewer)")
    ap.add_argument("--dim", type=int, default=96, help="feature size of the type sums")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    views = ((torch.rand(args.batch, 1, args.size, args.size, generator=gen) > 0.8)
             * torch.rand(args.batch, 1, args.size, args.size, generator=gen))
    z = rng.integers(0, args.types, args.tokens)
    texts = np.split(np.arange(args.tokens), np.arange(args.text_length, args.tokens, args.text_length))
    x = rng.normal(size=(args.tokens, args.dim)).astype(np.float32)
    pair = L.PairModel(a=1.0, b=0.5, n_positive=10)
    kept = L.text_pairs(x, texts, pair)
    cases = [
        (f"stroke width, {args.batch} views of {args.size} px",
         lambda: stroke_reference(views, 0.3, 0.3, torch.Generator().manual_seed(1)),
         lambda: _nets._stroke(views, 0.3, 0.3, torch.Generator().manual_seed(1))),
        (f"context counts, {args.tokens} tokens, {args.types} types, {len(texts)} texts",
         lambda: context_counts_reference(z, texts, args.types),
         lambda: L.context_counts(z, texts, args.types)),
        (f"type sums, {args.tokens} x {args.dim} into {args.types}",
         lambda: group_sums_reference(x, z, args.types),
         lambda: L.group_sums(x, z, args.types)),
        (f"within-text evidence, {len(texts)} texts of {args.text_length} tokens",
         lambda: within_text_evidence_reference(x, z, args.types, texts, pair, "tokens"),
         lambda: L.within_text_evidence(x, z, args.types, texts, pair, "tokens", kept)),
    ]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeats} timed calls each")
    compare(cases, args.repeats, lambda a, b: f"bit-equal {equal(a, b)}")


if __name__ == "__main__":
    main()
