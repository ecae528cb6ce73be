"""CI-sized reproductions of the committed tables (slow: build real corpora and fit real methods).

Each test regenerates a number of reports/comparison.md or reports/paper_check.md at a reduced
scale and checks it against the committed full-size figure within a stated tolerance.
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from signclust.config import REPO_ROOT, load_params
from signclust.data.benchmarks import MNIST_DIR
from signclust.data.prepare import build
from signclust.evaluation.metrics import score
from signclust.models.base import FitContext, get_clusterer
from signclust.models.train import run_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cypriot():
    return build("cypriot", load_params()["prepare"], progress=False)


def _fit_v(run: str, corpus, seed: int = 0) -> float:
    method, cfg, _ = run_config(run, load_params())
    clusterer = get_clusterer(method, **cfg)
    k_true = corpus.counts()["types"]
    result = clusterer.fit(corpus, FitContext(seed=seed, n_clusters=k_true if clusterer.needs_k else None,
                                              progress=False))
    return score(corpus.labels(), result.labels)["v_measure"]


def test_lm_beats_ward_on_pixels_on_cypriot(cypriot):
    """Target of issue 3: our default above Ward-on-pixels at K_true (one seed in CI, 3 in the table)."""
    v_lm = _fit_v("lm", cypriot)
    v_ward = _fit_v("ward_pixels", cypriot)
    assert v_lm > v_ward + 0.03, (v_lm, v_ward)


def test_seed_variant_collapses_below_default_on_cypriot(cypriot):
    params = load_params()
    method, cfg, _ = run_config("lm_seed", params)
    cfg = {**copy.deepcopy(cfg), "epochs": 40}
    result = get_clusterer(method, **cfg).fit(cypriot, FitContext(seed=0, progress=False))
    assert result.k_found < cfg["s"] // 2                      # types collapse from s = 100
    assert score(cypriot.labels(), result.labels)["v_measure"] < 0.3


@pytest.mark.skipif(not (MNIST_DIR / "t10k-images-idx3-ubyte").exists(),
                    reason="MNIST not fetched (scripts/setup.sh needs npm)")
def test_kmeans_mnist_test_nmi_matches_jule_table3():
    """JULE Table 3: K-means on MNIST-test raw intensities, NMI 0.528 (tolerance ±0.03)."""
    from signclust.data.benchmarks import build as build_benchmark
    corpus = build_benchmark("mnist_test")
    result = get_clusterer("kmeans", pca_dim=0, n_init=3, n_iter=100).fit(
        corpus, FitContext(seed=0, n_clusters=10, progress=False))
    nmi = score(corpus.labels(), result.labels)["nmi"]
    assert abs(nmi - 0.528) <= 0.03, nmi


def test_committed_comparison_agrees_with_ci_run(cypriot):
    """The committed full-size table (3 seeds) and a one-seed CI run agree within 0.05 V."""
    path = REPO_ROOT / "reports" / "metrics" / "lm_cypriot.json"
    if not path.exists():
        pytest.skip("no committed reports/metrics/lm_cypriot.json yet")
    committed = json.loads(path.read_text())["mean"]["v_measure"]
    assert abs(_fit_v("lm", cypriot) - committed) < 0.05
    assert np.isfinite(committed)
