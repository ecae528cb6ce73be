"""scripts/pair_ratio_sweep.py: lm at every ratio test, and the ratio lm's selection keeps."""
from __future__ import annotations

import importlib.util

import pytest

from signclust.config import REPO_ROOT
from signclust.evaluation import label_free
from signclust.evaluation.metrics import score
from signclust.models import lm_clusterer as lm
from signclust.models.base import FitContext

spec = importlib.util.spec_from_file_location("pair_ratio_sweep", REPO_ROOT / "scripts" / "pair_ratio_sweep.py")
sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep)


def test_the_kept_ratio_and_its_fit_are_lms_own(tiny_corpus):
    # a corpus whose four candidate fits differ (K 7, 8, 8, 8 here) and fit keeps the second; with no
    # kNN vote (vote: none): the near vote makes the four fits of this tiny corpus one (draw 5 at noise 40:
    # with the slant correction the four fits of the earlier draw, 1 at noise 60, are one fit too)
    corpus = tiny_corpus(n_types=5, per_type=10, n_texts=4, noise=40.0, seed=5)
    cfg = {"encoder_epochs": 0, "vote": "none"}
    fitted = lm.LMSignClusterer(**cfg).fit(corpus, FitContext(seed=1, progress=False))
    assert len({s["evidence"] for s in fitted.info["selection"]}) > 1
    assert fitted.info["pair_ratio"] != fitted.info["selection"][0]["pair_ratio"]
    t = sweep.sweep(corpus, cfg, [1.0, 0.5, 0.7, 0.8, 0.9], seed=1)       # another order: fit's tie rule holds
    assert [r["ratio"] for r in t["rows"]] == [1.0, 0.5, 0.7, 0.8, 0.9] and t["k_true"] == 5
    assert t["kept"] == fitted.info["pair_ratio"]
    kept = next(r for r in t["rows"] if r["ratio"] == t["kept"])
    assert kept["k"] == fitted.k_found and kept["v"] == score(corpus.labels(), fitted.labels)["v_measure"]
    assert sorted((r["ratio"], r["evidence"]) for r in t["rows"] if r["ratio"] >= 0.7) == [
        (s["pair_ratio"], s["evidence"]) for s in fitted.info["selection"]]
    # the controlled evidence is the evidence less that of the same fit's types with the texts shuffled
    clusterer = lm.LMSignClusterer(**cfg)
    x, texts, _ = clusterer.features(corpus, FitContext(seed=1, progress=False))
    symbols = lm.coarse_symbols(x, clusterer.cfg.select_symbols, clusterer.cfg.max_linkage_tokens, 1)
    assert kept["controlled"] == pytest.approx(kept["evidence"] - label_free.shuffled_evidence(
        fitted.labels, texts, symbols, clusterer.cfg.select_beta, 1), abs=1e-9)


def test_table_on_known_numbers():
    def row(ratio, k, v, e, c=0.0):
        return {"ratio": ratio, "k": k, "v": v, "evidence": e, "controlled": c}
    table = {"a_hands": {"k_true": 41, "kept": 0.9, "best_v": 1.0, "pair_ratios": [0.8, 0.9, 1.0],
                         "rows": [row(0.5, 90, 0.90, -3.0), row(0.8, 79, 0.95, -2.0), row(0.9, 60, 0.96, -1.0),
                                  row(1.0, 50, 0.98, -1.5)]},
             "b_hands": {"k_true": 317, "kept": 0.8, "best_v": 0.5, "pair_ratios": [0.8, 0.9, 1.0],
                         "rows": [row(0.5, 600, 0.80, -9.0), row(0.8, 170, 0.72, -1.0), row(0.9, 120, 0.70, -2.0),
                                  row(1.0, 100, 0.66, -3.0)]}}
    text = sweep.markdown(table, [0.5, 0.8, 0.9, 1.0], 0)
    assert "| a_hands | 41 | 0.900 (90) | 0.950 (79) | **0.960 (60)** | 0.980 (50) | 0.9 | 1 |" in text
    assert "| b_hands | 317 | 0.800 (600) | **0.720 (170)** | 0.700 (120) | 0.660 (100) | 0.8 | 0.5 |" in text
    assert ("Mean V over the 2 corpora: the kept fits 0.840, ratio 0.8 alone (the previous default) 0.835, "
            "the best ratio of each corpus 0.890.") in text
    assert "`fit` tries 0.8, 0.9, 1 (`pair_ratios`)" in text
    # the wider grid 0.5-1 keeps a_hands' 0.9 (evidence -1.0 still the highest) and b_hands' 0.8
    # (-1.0 against 0.5's -9.0); K error: a 60/41 +46%, b 170/317 -46%
    assert "| corpus | K true | 0.8-1 (pair_ratios) | 0.5-1 |" in text
    assert "| a_hands | 41 | 0.960 (60) | 0.960 (60) |" in text
    assert "| mean V; K within ±20%; median K error | | 0.840; 0/2; 46% | 0.840; 0/2; 46% |" in text
    table["b_hands"]["rows"][0]["evidence"] = 0.0               # now 0.5 wins b_hands: K 600, +89%; median (46 + 89) / 2
    text = sweep.markdown(table, [0.5, 0.8, 0.9, 1.0], 0)
    assert "| b_hands | 317 | 0.720 (170) | 0.800 (600) |" in text
    assert "| mean V; K within ±20%; median K error | | 0.840; 0/2; 46% | 0.880; 0/2; 68% |" in text
    # the criteria: evidence keeps a 0.9 (K 60, +46%) and b 0.8 (-46%) from pair_ratios, b 0.5 (600) from all;
    # controlled (all 0: the first row of a tie) keeps a 0.8 (79, +93%) and b 0.8 from pair_ratios, a 0.5 (90,
    # +120%) and b 0.5 (+89%) from all;
    # best V keeps a 1.0 (50, +22%) and b 0.8 / 0.5
    assert "| criterion | pair_ratios (0.8, 0.9, 1) | every swept ratio (0.5, 0.8, 0.9, 1) |" in text
    assert "| evidence (`fit`) | 0.840; 0/2; 46% | 0.880; 0/2; 68% |" in text
    assert "| controlled evidence | 0.835; 0/2; 70% | 0.850; 0/2; 104% |" in text
    assert "| best V (labelled oracle) | 0.850; 0/2; 34% | 0.890; 0/2; 56% |" in text
    table["a_hands"]["rows"][3]["controlled"] = 1.0              # now controlled keeps a 1.0: K 50, +22%
    assert "| controlled evidence | 0.850; 0/2; 34% | 0.890; 0/2; 56% |" in sweep.markdown(table, [0.5, 0.8, 0.9, 1.0], 0)


def test_bad_input_is_one_error_line(cli_error):
    for argv, message in ((["--corpora", "cypriot"], "--corpora, --ratios or --seed make another study than "
                                                     "reports/pair_ratio_sweep.md: give it its own --out"),
                          (["--ratios", "0.5", "1.5", "--out", "x.md"], "--ratios [0.5, 1.5]: each ratio must be in (0, 1]"),
                          (["--ratios", "0.5", "0.8", "--corpora", "nope_hands", "--out", "x.md"],
                           "--ratios [0.5, 0.8] leaves out [0.7, 0.9, 1.0] of lm's pair_ratios [0.7, 0.8, 0.9, 1.0]"),
                          (["--corpora", "nope_hands", "--out", "x.md"], "nope_hands: not in data/corpora")):
        cli_error(sweep.main, argv, message)
