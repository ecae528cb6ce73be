"""scripts/dp_posterior.py: the DP methods' own posteriors on the labellings they could have found."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from signclust.config import REPO_ROOT, load_params

spec = importlib.util.spec_from_file_location("dp_posterior", REPO_ROOT / "scripts" / "dp_posterior.py")
post = importlib.util.module_from_spec(spec)
spec.loader.exec_module(post)


def test_labellings_include_k_means_at_the_true_k_once_and_in_order():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(c, 0.1, (20, 2)) for c in ((0, 0), (5, 0), (0, 5))])   # 60 points
    gold = np.repeat([0, 1, 2], 20)
    rows = list(post.labellings(x, gold, fitted=gold[::-1].copy(), seed=0))
    names = [name for name, _ in rows]
    # the grid up to n / 4 = 15 (2, 4, 8) with the true K (3) in its place
    assert names == ["the fit", "one cluster", "k-means K=2", "k-means K=3 (true K)", "k-means K=4",
                     "k-means K=8", "true labels"]
    at_k = dict(rows)["k-means K=3 (true K)"]
    assert len(np.unique(at_k)) == 3
    assert all(len(np.unique(at_k[gold == c])) == 1 for c in range(3))   # three clean blobs: found
    # a true K on the grid is not a second row
    gold4 = np.repeat([0, 1, 2, 3], 15)
    names4 = [name for name, _ in post.labellings(x, gold4, gold4, seed=0)]
    assert names4.count("k-means K=4 (true K)") == 1 and "k-means K=4" not in names4


def test_default_data_sets_are_the_corpora_then_the_methods_paper_check_sets():
    params = load_params(REPO_ROOT / "params.yaml")
    checked = [c["dataset"] for c in params["paper_check"]["checks"] if c["method"] == "deepdpm"]
    assert post.default_datasets(params, "deepdpm") == [*post.CORPORA, *dict.fromkeys(checked)]
    assert "mnist_test" in post.default_datasets(params, "deepdpm")
    assert post.default_datasets(params, "dpgmm") == [*post.CORPORA, "fashion_test"]


@pytest.mark.parametrize("argv, message", [
    (["--subset", "3"], "--subset goes with --preset"),
    (["--datasets", "cypriot", "nowhere"], "nowhere is neither a corpus"),
    (["--preset", "paper_umap"], "--preset is for the benchmark sets, not the corpora (cypriot, lineara, latin_hands)"),
    (["--datasets", "mnist_test", "--preset", "nope"], "has no parameter set 'nope'"),
    (["--features", "encoder", "--datasets", "cypriot", "mnist_test"], "--features encoder is for the corpora, not mnist_test"),
    (["--features", "encoder", "--preset", "paper"], "--features encoder is for the corpora, --preset for the benchmark sets"),
])
def test_bad_options_are_one_error_line_before_any_fit(argv, message, capsys, tmp_path):
    out = tmp_path / "posterior.md"
    with pytest.raises(SystemExit) as exit_:
        post.main([*argv, "--out", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_encoder_features_replace_each_methods_own_reduced_as_its_own():
    """--features encoder: the row's own fit on other features, reduced to its dimensions and
    transformed as it transforms its own; a row whose features are not PCA is refused."""
    from sklearn.decomposition import PCA

    from signclust.errors import UserError
    from signclust.models.base import get_clusterer
    f = np.random.default_rng(0).normal(size=(40, 16)) * np.arange(1, 17)
    deepdpm = get_clusterer("deepdpm", feat_dim=4)                 # the row's transform: one global scale
    post.on_encoder_features(deepdpm, "deepdpm", f)
    z = PCA(n_components=4, random_state=0).fit_transform(f)
    np.testing.assert_allclose(deepdpm.codes(None, None), (z - z.mean(0)) / z.std())
    assert abs(deepdpm.codes(None, None).std() - 1) < 1e-12
    dpgmm = get_clusterer("dpgmm", pca_dim=6)
    post.on_encoder_features(dpgmm, "dpgmm", f)
    x = dpgmm.features(None, 0)
    assert x.dtype == np.float32 and x.shape == (40, 6)
    np.testing.assert_allclose(x, PCA(n_components=6, random_state=0).fit_transform(f), rtol=1e-5, atol=1e-5)
    with pytest.raises(UserError, match="not features 'ae'"):
        post.on_encoder_features(get_clusterer("deepdpm", features="ae"), "deepdpm", f)
    with pytest.raises(UserError, match="not 'ae_umap'"):
        post.on_encoder_features(get_clusterer("dpgmm", features="ae_umap"), "dpgmm", f)
