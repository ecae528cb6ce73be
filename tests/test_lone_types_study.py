"""scripts/lone_types_study.py: the counts on a hand-made fit, lm's own fit and micro-clusters, bad input."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from signclust.config import REPO_ROOT
from signclust.models import lm_clusterer as lm
from signclust.models.base import FitContext

spec = importlib.util.spec_from_file_location("lone_types_study", REPO_ROOT / "scripts" / "lone_types_study.py")
lone = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lone)


def test_census_by_hand():
    # gold: sign 7 has 5 tokens, sign 3 has 3, signs 1 and 9 one token each (rare at rare_max 2)
    gold = np.array([7, 7, 7, 7, 7, 3, 3, 3, 1, 9])
    # types: 7's tokens in type 10 but one outlier alone (type 50); sign 1 swallowed by type 20 (sign 3's);
    # sign 9 alone (type 40)
    z = np.array([10, 10, 10, 10, 50, 20, 20, 20, 20, 40])
    micro = np.array([0, 0, 1, 1, 2, 3, 3, 4, 5, 6])                    # both rare tokens alone here
    r = lone.census(gold, z, micro, rare_max=2)
    assert r == {"k_true": 4, "k": 4, "lone": 2, "lone_rare": 1, "rare_signs": 2, "rare_tokens": 2,
                 "rare_alone_micro": 2, "rare_alone": 1}
    # a type of two tokens of one rare sign counts both as alone; at rare_max 3 sign 3 is rare too
    r = lone.census(np.array([1, 1, 2, 2, 2]), np.array([0, 0, 1, 1, 2]), np.arange(5), rare_max=3)
    assert (r["rare_signs"], r["rare_tokens"], r["rare_alone"], r["rare_alone_micro"]) == (2, 5, 5, 5)


def test_study_counts_lms_own_fit_and_micro_clusters(tiny_corpus):
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=60.0, seed=1)
    cfg = {"encoder_epochs": 0}
    model = lm.LMSignClusterer(**cfg)
    fitted = model.fit(corpus, FitContext(seed=1, progress=False))
    row = lone.study(corpus, cfg, seed=1, rare_max=2)
    assert row["k"] == fitted.k_found and row["k_true"] == 5 and row["micro_k"] == fitted.info["micro_clusters"]
    assert row["lone"] == int((np.bincount(fitted.labels) == 1).sum())
    assert row["rare_signs"] == 0 and row["rare_tokens"] == 0           # every sign has 10 tokens
    every = lone.study(corpus, cfg, seed=1, rare_max=10)                # every sign rare: all 50 tokens counted
    assert every["rare_signs"] == 5 and every["rare_tokens"] == 50 and every["micro_k"] == row["micro_k"]
    gold, z = corpus.labels(), fitted.labels
    assert every["rare_alone"] == sum(bool(np.all(gold[z == z[t]] == gold[t])) for t in range(50))
    assert every["rare_alone_micro"] >= every["rare_alone"] > 0         # merges only join micro-clusters
    with pytest.raises(lone.UserError, match="refits 1: the study rebuilds the micro-clusters"):
        lone.study(corpus, {**cfg, "refits": 1}, seed=1, rare_max=2)
    md = lone.markdown({"tiny": row}, 1, 2, {"seat_odds": True})
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in table}) == 1 and "`seat_odds: True`" in md


@pytest.mark.parametrize("argv, message", [
    (["--set", "seat_odds=true"], "give it its own --out"),
    (["--rare", "0", "--out", "x.md"], "--rare 0: expected at least 1"),
    (["--set", "no_such_key=1", "--out", "x.md"], "no_such_key"),
    (["--set", "seat_odds=[", "--out", "x.md"], "the value is not YAML"),
    (["--seed", "-1", "--out", "x.md"], "--seed -1: expected 0 or more"),
    (["--corpora", "nowhere_hands", "--out", "x.md"], "nowhere_hands: not in data/corpora"),
])
def test_bad_input_is_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        lone.main(argv)
    assert exc.value.code != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
