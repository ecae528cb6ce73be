"""Signs split by hand style, joined by deciphering one style's types against the other's.

A noisy corpus written in two styles (one per text: a cursive hand beside print hands, a scribal
school beside another) shows some signs in two forms that never share a text. Context cannot join
the two types the merge loop holds for such a sign: their neighbours are split by style too, so the
two context distributions are over different types (reports/style_split_study.md: dL_LM -109 nats
at the median on latin_handwriting). Reading one style as a substitution cipher of the other can:

1. ``style_groups``: the texts' two styles, from the types that avoid each other's texts. Each text
   is its counts of those *marker* types (cosine-normalised); the Fiedler vector of the normalised
   graph Laplacian of the texts' cosine affinities is split at its largest gap. ``lambda2`` (0: two
   groups of texts share no marker type; near 1: no structure) says how clean the split is.
2. ``decipher``: an HMM over the minor group's texts whose hidden states are the major group's types,
   with the major group's bigram model of its types (Dirichlet-smoothed, text boundaries as a state)
   as transitions; the emissions P(observed type | hidden type) are learnt by EM (Baum-Welch with the
   transitions fixed), started from the identity for the types both groups use and uniform for the
   minor group's own types (>= 90% of their tokens there). A minor type's decoding is the hidden type
   with the largest posterior mass over its tokens.
3. ``align_styles``: a minor type joins its decoding where that holds at least ``p_min`` of the mass.

``lm`` makes this pass after its fit on a noisy corpus (``style_alignment``, default on);
scripts/style_alignment_study.py measures it on fits made without it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from signclust.models.lm_clusterer import avoidance


@dataclass(frozen=True)
class StyleSplit:
    minor: np.ndarray      # (T,) bool: the texts of the smaller group
    lambda2: float         # second eigenvalue of the normalised Laplacian of the texts' affinities
    markers: np.ndarray    # the types that avoid another type's texts (the affinities' features)


def type_counts(z: np.ndarray, texts: list[np.ndarray], k: int) -> np.ndarray:
    """(T, k) tokens of each type in each text."""
    counts = np.zeros((len(texts), k))
    for j, t in enumerate(texts):
        np.add.at(counts[j], z[t], 1.0)
    return counts


def style_groups(z: np.ndarray, texts: list[np.ndarray], k: int, avoid_c0: float = 6.0,
                 min_tokens: int = 5) -> StyleSplit | None:
    """The texts split into two styles, or None where fewer than two types of ``min_tokens`` tokens
    avoid each other (``avoidance`` below -``avoid_c0``, lm's own test) or fewer than two texts hold
    a marker type."""
    size = np.bincount(z, minlength=k)
    frequent = np.flatnonzero(size >= min_tokens)
    if len(frequent) < 2:
        return None
    u, v = np.triu_indices(len(frequent), 1)
    u, v = frequent[u], frequent[v]
    avoiding = avoidance(z, k, texts, u, v) < -avoid_c0
    markers = np.unique(np.r_[u[avoiding], v[avoiding]])
    if len(markers) < 2:
        return None
    prof = type_counts(z, texts, k)[:, markers]                       # (T, m)
    held = prof.sum(1) > 0
    if held.sum() < 2:
        return None
    prof = prof[held] / np.linalg.norm(prof[held], axis=1, keepdims=True)
    affinity = prof @ prof.T                                          # (T', T') cosine, >= 0
    deg = affinity.sum(1)
    lap = np.eye(len(deg)) - affinity / np.sqrt(np.outer(deg, deg))
    vals, vecs = np.linalg.eigh(lap)
    fiedler = vecs[:, 1] / np.sqrt(deg)
    order = np.sort(fiedler)
    gap = int(np.argmax(np.diff(order)))
    side = np.zeros(len(texts), dtype=bool)
    side[np.flatnonzero(held)] = fiedler > (order[gap] + order[gap + 1]) / 2
    # texts without a marker type go with the larger group (they show no minor style)
    minor = side if side[held].sum() <= (~side[held]).sum() else ~side & held
    return StyleSplit(minor, float(vals[1]), markers)


@dataclass(frozen=True)
class _Batch:
    """Texts padded to one length, so that the forward-backward passes step every text at once (a
    Python loop over positions, not over texts and positions). obs (B, N): each text's observed types,
    0 past its end; length (B,); valid (B, N): the positions inside each text; seen: the observed
    types of the valid positions, texts in order (the rows of ``_batch_posteriors``' posteriors)."""
    obs: np.ndarray
    length: np.ndarray
    valid: np.ndarray
    seen: np.ndarray

    @classmethod
    def of(cls, texts: list[np.ndarray]) -> "_Batch":
        length = np.array([len(t) for t in texts])
        obs = np.zeros((len(texts), int(length.max())), dtype=np.int64)
        for b, t in enumerate(texts):
            obs[b, :len(t)] = t
        valid = np.arange(obs.shape[1])[None, :] < length[:, None]
        return cls(obs, length, valid, obs[valid])


def _batch_posteriors(batch: _Batch, start: np.ndarray, trans: np.ndarray, stop: np.ndarray,
                      emit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The posterior of each hidden state at each position of every text of ``batch`` (scaled
    forward-backward): the (sum of lengths, H) posteriors, texts in order, and each text's
    log-likelihood (B,), the sum of its forward pass's log normalisers. Every text steps through the
    same positions at once; a text that has ended is left as it is."""
    obs, length = batch.obs, batch.length
    n_b, n = obs.shape
    h = len(start)
    fwd, bwd = np.zeros((n_b, n, h)), np.zeros((n_b, n, h))
    a = start[None, :] * emit[:, obs[:, 0]].T                          # (B, H)
    loglik = np.log(a.sum(1))
    fwd[:, 0] = a / a.sum(1, keepdims=True)
    for i in range(1, n):
        on = np.flatnonzero(length > i)                               # texts still running
        a = (fwd[on, i - 1] @ trans) * emit[:, obs[on, i]].T
        loglik[on] += np.log(a.sum(1))
        fwd[on, i] = a / a.sum(1, keepdims=True)
    rows = np.arange(n_b)
    loglik += np.log(fwd[rows, length - 1] @ stop)
    bwd[rows, length - 1] = stop / stop.sum()
    for i in range(n - 2, -1, -1):
        on = np.flatnonzero(length - 1 > i)                           # texts with a position after i
        b = (emit[:, obs[on, i + 1]].T * bwd[on, i + 1]) @ trans.T
        bwd[on, i] = b / b.sum(1, keepdims=True)
    post = (fwd * bwd)[batch.valid]                                    # (sum of lengths, H), texts in order
    return post / post.sum(1, keepdims=True), loglik


def _baum_welch(batch: _Batch, start: np.ndarray, trans: np.ndarray, stop: np.ndarray,
                emit: np.ndarray, iters: int) -> tuple[np.ndarray, float]:
    """Emissions (H, k) after ``iters`` EM steps with the transitions fixed, and the log-likelihood
    of the texts of ``batch`` under them."""
    for step in range(iters + 1):
        expected = np.full(emit.shape, 1e-6)
        post, loglik = _batch_posteriors(batch, start, trans, stop, emit)
        np.add.at(expected.T, batch.seen, post)
        if step == iters:
            return emit, float(loglik.sum())            # the likelihood of the emissions returned
        emit = expected / expected.sum(1, keepdims=True)


def decipher(z: np.ndarray, texts: list[np.ndarray], k: int, minor: np.ndarray, iters: int = 60,
             beta: float = 0.1, own_share: float = 0.9, min_tokens: int = 3, restarts: int = 8,
             seed: int = 0) -> dict[int, tuple[int, float]]:
    """{minor type: (major type, posterior share)} for the minor group's own types: the types with
    at least ``min_tokens`` tokens in the minor group's texts and ``own_share`` of their tokens there.
    Texts of one token are left out (no neighbours); {} where either group has no longer text.
    EM starts ``restarts`` times (the first from uniform own-type emissions, the others from random
    ones) and the most likely emissions are kept: where the styles share few types, little anchors
    the cipher and EM from one start stops in a local optimum (tests/test_lm_clusterer.py)."""
    # a text of one token holds no pair of neighbours: nothing to decipher with
    major_texts = [t for t, m in zip(texts, minor) if not m and len(t) >= 2]
    minor_texts = [t for t, m in zip(texts, minor) if m and len(t) >= 2]
    if not major_texts or not minor_texts:
        return {}
    in_major = np.bincount(z[np.concatenate(major_texts)], minlength=k)
    in_minor = np.bincount(z[np.concatenate(minor_texts)], minlength=k)
    own = np.flatnonzero((in_minor >= min_tokens) & (in_minor >= own_share * (in_major + in_minor)))
    hidden = np.setdiff1d(np.flatnonzero(in_major > 0), own)         # an own type is not a decoding
    if not len(own) or not len(hidden):
        return {}
    h = len(hidden)
    state = np.full(k, -1)
    state[hidden] = np.arange(h)
    bigram = np.full((h + 1, h + 1), beta)                           # state h: the text boundary
    for t in major_texts:
        s = np.r_[h, state[z[t]], h]
        np.add.at(bigram, (s[:-1], s[1:]), 1.0)
    bigram /= bigram.sum(1, keepdims=True)
    start, trans, stop = bigram[h, :h], bigram[:h, :h], bigram[:h, h]
    batch = _Batch.of([z[t] for t in minor_texts])                  # the minor texts' observed types
    shared = hidden[in_minor[hidden] > 0]
    rng = np.random.default_rng(seed)
    best = None
    for r in range(restarts):
        emit = np.full((h, k), 1e-3)
        emit[state[shared], shared] += 1.0                            # a shared type reads as itself
        # an own type as anything: evenly on the first start, at random on the others
        emit[:, own] += 1.0 / h if r == 0 else rng.dirichlet(np.ones(h), len(own)).T
        emit, loglik = _baum_welch(batch, start, trans, stop, emit / emit.sum(1, keepdims=True), iters)
        if best is None or loglik > best[1] + 1e-9:
            best = (emit, loglik)
    emit = best[0]
    mass = np.zeros((k, h))
    np.add.at(mass, batch.seen, _batch_posteriors(batch, start, trans, stop, emit)[0])
    return {int(c): (int(hidden[mass[c].argmax()]), float(mass[c].max() / mass[c].sum())) for c in own}


def align_styles(z: np.ndarray, texts: list[np.ndarray], p_min: float = 0.5, avoid_c0: float = 6.0,
                 iters: int = 60) -> tuple[np.ndarray, dict]:
    """z with each minor-style type joined to its decoding where the posterior share is >= p_min;
    labels compacted. Returns (labels, info: lambda2, the groups' sizes, every decoding and the joins)."""
    z = np.unique(z, return_inverse=True)[1]
    k = int(z.max()) + 1
    split = style_groups(z, texts, k, avoid_c0)
    if split is None:
        return z, {"lambda2": None, "minor_texts": 0, "decoded": {}, "joined": 0}
    decoded = decipher(z, texts, k, split.minor, iters)
    mapping = np.arange(k)
    joins = {c: a for c, (a, p) in decoded.items() if p >= p_min}
    for c, a in joins.items():
        mapping[c] = a
    info = {"lambda2": split.lambda2, "minor_texts": int(split.minor.sum()), "decoded": decoded, "joined": len(joins)}
    return np.unique(mapping[z], return_inverse=True)[1], info
