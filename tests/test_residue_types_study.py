"""scripts/residue_types_study.py: the sorting of small types' tokens, the ranks and the context lift."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from signclust.config import REPO_ROOT

spec = importlib.util.spec_from_file_location("residue_types_study", REPO_ROOT / "scripts" / "residue_types_study.py")
residue = importlib.util.module_from_spec(spec)
spec.loader.exec_module(residue)


def test_neighbours_stop_at_a_texts_edge():
    left, right = residue.neighbours([np.array([0, 1, 2]), np.array([3, 4])], 5)
    assert left.tolist() == [-1, 0, 1, -1, 3]
    assert right.tolist() == [1, 2, -1, 4, -1]


def test_context_lift_equals_counting_each_types_neighbours_by_hand():
    rng = np.random.default_rng(2)
    z = rng.integers(0, 4, 30)
    texts = [np.arange(0, 12), np.arange(12, 13), np.arange(13, 30)]
    pseudo = 5.0
    got = residue.context_lift(z, texts, pseudo)
    k = 4
    left, right = residue.neighbours(texts, len(z))
    sym = {"l": [z[j] if j >= 0 else k for j in left], "r": [z[j] if j >= 0 else k for j in right]}
    for i in range(len(z)):
        for b in range(k):
            total = 0.0
            for side in ("l", "r"):
                counts = np.zeros((k, k + 1))
                for t in range(len(z)):
                    counts[z[t], sym[side][t]] += 1
                marginal = (counts.sum(0) + 0.5) / (counts.sum() + 0.5 * (k + 1))
                s = sym[side][i]
                p = (counts[b, s] + pseudo * marginal[s]) / (counts[b].sum() + pseudo)
                total += np.log(p) - np.log(marginal[s])
            assert got[i, b] == pytest.approx(total, rel=1e-12)


def test_study_sorts_residue_from_rare_signs_and_ranks_the_signs_type():
    # types 0 and 1 large (sign A near 0, sign B near 10); a token of A at 9 alone (residue, its
    # sign's type 2nd nearest), a token of C at 1 alone (a rare sign)
    x = np.array([[0.0], [0.5], [-0.5], [0.2], [10.0], [10.5], [9.5], [10.2], [9.0], [1.0]])
    z = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 3])
    gold = np.array(["A"] * 4 + ["B"] * 4 + ["A", "C"])
    texts = [np.arange(10)]
    row = residue.study(x, z, gold, texts, max_tokens=3, pseudo=5.0)
    assert (row["k"], row["k_true"], row["small_types"], row["small_tokens"]) == (4, 3, 2, 2)
    assert (row["residue"], row["rare"]) == (1, 1)
    assert row["nearest"] == 0.0 and row["top5"] == 1.0 and row["top10"] == 1.0
    lift = residue.context_lift(z, texts, 5.0)
    assert row["sign_lift"] == pytest.approx(lift[8, 0])              # the residue token under A's type
    assert row["residue_nearest_lift"] == pytest.approx(lift[8, 1])   # under B's, its nearest
    assert row["rare_nearest_lift"] == pytest.approx(lift[9, 0])
    md = residue.markdown({"toy": row, "none": dict(row, residue=0, rare=0, small_tokens=0)}, 0, 3, 5.0)
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in table}) == 1
    assert "1 residue tokens, of which 0% have their sign's type as the nearest" in md


def test_no_small_type_gives_counts_only():
    x = np.arange(8, dtype=float)[:, None]
    row = residue.study(x, np.repeat([0, 1], 4), np.repeat(["A", "B"], 4), [np.arange(8)], 3, 5.0)
    assert row == {"k_true": 2, "k": 2, "small_types": 0, "small_tokens": 0, "residue": 0, "rare": 0}
