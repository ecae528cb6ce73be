"""scripts/dp_prior_grid.py: DeepDPM's model scored under other priors and feature sizes."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from signclust.config import REPO_ROOT
from signclust.models.base import FitContext, get_clusterer
from signclust.models.baselines._nets import faiss_kmeans
from signclust.models.baselines.deepdpm import NIWPrior

sys.path.insert(0, str(REPO_ROOT / "scripts"))        # the script imports dp_posterior beside it
spec = importlib.util.spec_from_file_location("dp_prior_grid", REPO_ROOT / "scripts" / "dp_prior_grid.py")
grid = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grid)


def test_k_grid_is_k_true_times_each_factor_within_a_quarter_of_the_tokens():
    assert grid.k_grid(53, 1728) == [3, 7, 13, 26, 40, 53, 80, 106]
    assert grid.k_grid(440, 3000) == [28, 55, 110, 220, 330, 440, 660]      # 880 > 3000 / 4: left out
    assert grid.k_grid(3, 1000) == [2, 3, 4, 6]      # at least 2, each K once (4.5 rounds to even: 4)


def test_cell_finds_the_true_k_and_a_zero_gap_on_separate_blobs():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(c, 0.1, (60, 2)) for c in ((0, 0), (5, 0), (0, 5))])
    gold = np.repeat([0, 1, 2], 60)
    labellings = {k: faiss_kmeans(x.astype(np.float32), k, seed=0, niter=50, nredo=3)[0] for k in (2, 3, 6)}
    out = grid.cell(x, labellings, gold, NIWPrior.from_data(x, psi_scale=0.005), alpha=10.0)
    assert out["best_k"] == 3
    assert abs(out["gap"]) < 1e-9          # k-means at 3 is the truth up to its numbering: the same log p


def test_codes_are_the_rows_own_or_the_encoders_put_through_its_reduction(tiny_corpus):
    corpus = tiny_corpus()
    row = dict(get_clusterer("deepdpm").params)
    own = grid.codes(row, corpus, 3, "pixels", None, seed=0)
    expected = get_clusterer("deepdpm", feat_dim=3).codes(corpus, FitContext(seed=0, progress=False), None, None)
    np.testing.assert_array_equal(own, expected)
    enc = np.random.default_rng(1).normal(size=(corpus.n_tokens, 12))
    from sklearn.decomposition import PCA
    z = PCA(n_components=3, random_state=0).fit_transform(enc)
    np.testing.assert_allclose(grid.codes(row, corpus, 3, "encoder", enc, seed=0), (z - z.mean(0)) / z.std())


def test_an_unknown_corpus_is_one_error_line(capsys, tmp_path):
    out = tmp_path / "grid.md"
    with pytest.raises(SystemExit) as exit_:
        grid.main(["--corpora", "cypriot", "nowhere", "--out", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "no corpus nowhere in data/corpora" in err and err.count("\n") == 1
    assert not out.exists()


def test_summary_counts_cells_near_k_true_and_names_settings_near_it_everywhere():
    def row(corpus, k_true, prior, best_k):
        return {"corpus": corpus, "k_true": k_true, "source": "pixels", "dim": d, "prior": prior,
                "v_at_k": 0.5, "grid": [2, k_true], "best_k": best_k, "gap": 1.0}
    rows = []
    for d in grid.DIMS:
        for choice, scale in grid.PRIORS:
            prior = f"{choice} {scale:g}"
            good = (d, prior) == (10, "isotropic 0.5")            # the one setting near K true on both
            rows += [row("a", 40, prior, 45 if good else 3), row("b", 100, prior, 70 if good or d == 20 else 5)]
    text = grid.render(rows, "python scripts/dp_prior_grid.py", 0)
    n = len(grid.DIMS) * len(grid.PRIORS)
    assert f"| a | 40 | 1 of {n} | 45 |" in text
    assert f"| b | 100 | {len(grid.PRIORS) + 1} of {n} | 70 |" in text       # 70 is -30%: within
    assert f"on every corpus above: pixels D 10 isotropic 0.5 (of {n})." in text
    assert "| pixels | 10 | 0.500 | " in text and "45 (+1.00)" in text
