"""Speed of the parts of an ``lm`` fit that were rewritten to compute the same quantities with their
sums in another order, each against the code it replaced, timed in the same run on the same inputs:

    .venv/bin/python benchmarks/bench_reordered_sums.py
    .venv/bin/python benchmarks/bench_reordered_sums.py --repeats 5 --types 270 --texts 18 --text-length 45

- ``lm_clusterer.log_dm`` (the context term of every merge round, over the candidate pairs' rows of
  k + 1 neighbour counts): the nonzero counts only, summed per row by ``np.bincount``, against the
  formula over every count;
- ``style_alignment._baum_welch`` (the style pass after a noisy fit): the forward-backward passes
  step every minor text at once (texts padded to one length), against one text at a time.

Unlike benchmarks/bench_exact_speedups.py these are not bit-equal: the sums run in another order,
so the outputs agree to rounding (the largest relative difference is printed), and the committed
fits were made again with the new code. No assertions on time: this prints numbers.
"""
from __future__ import annotations

import argparse

import numpy as np
from scipy.special import gammaln

from bench_exact_speedups import compare
from signclust.models import lm_clusterer as L
from signclust.models import style_alignment as S


def log_dm_reference(counts: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``lm_clusterer.log_dm`` as it was: every count of every row."""
    total = alpha.sum()
    return (gammaln(total) - gammaln(total + counts.sum(-1))
            + (gammaln(alpha + counts) - gammaln(alpha)).sum(-1))


def posteriors_reference(obs, start, trans, stop, emit):
    """One text's scaled forward-backward, as ``style_alignment`` made it before the batch."""
    n, h = len(obs), len(start)
    fwd, bwd = np.empty((n, h)), np.empty((n, h))
    a = start * emit[:, obs[0]]
    loglik = np.log(a.sum())
    fwd[0] = a / a.sum()
    for i in range(1, n):
        a = (fwd[i - 1] @ trans) * emit[:, obs[i]]
        loglik += np.log(a.sum())
        fwd[i] = a / a.sum()
    loglik += np.log(fwd[-1] @ stop)
    bwd[-1] = stop / stop.sum()
    for i in range(n - 2, -1, -1):
        b = trans @ (emit[:, obs[i + 1]] * bwd[i + 1])
        bwd[i] = b / b.sum()
    post = fwd * bwd
    return post / post.sum(1, keepdims=True), float(loglik)


def baum_welch_reference(texts, start, trans, stop, emit, iters):
    """``style_alignment._baum_welch`` as it was: a loop over texts inside each EM step."""
    for step in range(iters + 1):
        expected, loglik = np.full(emit.shape, 1e-6), 0.0
        for t in texts:
            post, ll = posteriors_reference(t, start, trans, stop, emit)
            np.add.at(expected.T, t, post)
            loglik += ll
        if step == iters:
            return emit, loglik
        emit = expected / expected.sum(1, keepdims=True)


def largest_relative_difference(a, b) -> float:
    if isinstance(a, tuple):
        return max(largest_relative_difference(p, q) for p, q in zip(a, b))
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-300)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--types", type=int, default=270, help="at most this many types (japanese_handwriting's "
                    "fits: 230-440)")
    ap.add_argument("--partners", type=int, default=10, help="candidate pairs per type (lm's `candidates`)")
    ap.add_argument("--texts", type=int, default=18, help="minor-style texts of the style pass")
    ap.add_argument("--text-length", type=int, default=45)
    ap.add_argument("--iters", type=int, default=10, help="EM steps per call (lm: 60, eight starts)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    # context counts of a Zipf-like labelling, as a merge round sees them (every type holds a token,
    # as in lm: its alpha is then > 0)
    z = np.unique(np.minimum(rng.zipf(1.3, args.tokens) - 1, args.types - 1), return_inverse=True)[1]
    k = int(z.max()) + 1
    left = np.zeros((k, k + 1))
    np.add.at(left, (z, np.r_[k, z[:-1]]), 1.0)
    alpha = L.context_prior(z, 100, k, 0.1)
    u = np.repeat(np.arange(k), args.partners)
    v = rng.integers(0, k, len(u))
    rows = left[u] + left[v]
    # an HMM of the style pass: hidden = the major style's types, the minor texts' observed types
    h = args.types
    bigram = rng.random((h + 1, h + 1)) + 0.1
    bigram /= bigram.sum(1, keepdims=True)
    start, trans, stop = bigram[h, :h], bigram[:h, :h], bigram[:h, h]
    emit = rng.random((h, h))
    emit /= emit.sum(1, keepdims=True)
    lengths = rng.integers(max(2, args.text_length // 2), args.text_length * 3 // 2 + 1, args.texts)
    texts = [rng.integers(0, h, n) for n in lengths]
    cases = [
        (f"log_dm, {len(rows)} pair rows of {k + 1} counts",
         lambda: log_dm_reference(rows, alpha), lambda: L.log_dm(rows, alpha)),
        (f"Baum-Welch, {args.iters} EM steps, {args.texts} texts of {lengths.min()}-{lengths.max()} tokens, "
         f"{h} states", lambda: baum_welch_reference(texts, start, trans, stop, emit, args.iters),
         lambda: S._baum_welch(S._Batch.of(texts), start, trans, stop, emit, args.iters)),
    ]
    print(f"{args.repeats} timed calls each")
    compare(cases, args.repeats, lambda a, b: f"largest relative difference {largest_relative_difference(a, b):.1e}")


if __name__ == "__main__":
    main()
