"""The greedy step of merge moves, shared by every clusterer that merges types by a gain.

Both our LM clusterer (lm_clusterer.py: the seed objective's gain) and the DP-GMM baseline
(baselines/dp_moves.py: the change of log p(X, z)) score candidate pairs of types and then apply
the best pairs that do not share a type, all in one round. This is that step, once: choose the
pairs (``disjoint_best``), then relabel the tokens (``apply_merges``).
"""
from __future__ import annotations

import numpy as np


def disjoint_best(u: np.ndarray, v: np.ndarray, gain: np.ndarray, limit: int | None = None) -> list[tuple[int, int]]:
    """The pairs (u[i], v[i]) to merge this round: the highest positive gains first, each type in
    at most one merge, at most ``limit`` merges (None: no limit)."""
    chosen, used = [], set()
    for i in np.argsort(-gain):
        if gain[i] <= 0 or (limit is not None and len(chosen) >= limit):
            break
        a, b = int(u[i]), int(v[i])
        if a not in used and b not in used:
            used.update((a, b))
            chosen.append((a, b))
    return chosen


def apply_merges(z: np.ndarray, merges: list[tuple[int, int]], k: int) -> np.ndarray:
    """Token labels after the round: type b of each merged pair (a, b) becomes type a; labels
    keep their numbers (b's is left unused, for the caller to compact)."""
    mapping = np.arange(k)
    for a, b in merges:
        mapping[b] = a
    return mapping[z]
