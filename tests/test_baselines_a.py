"""Baselines A: classical (k-means, Ward, DP-GMM), DeepCluster, SwAV, Two-stage, and the
shared network helpers. Each core step is checked on a tiny input where the right answer
is known; each deep method fits a 60-token synthetic corpus of three very different glyphs."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import gammaln
import torch

from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.evaluation.metrics import score
from signclust.models.base import FitContext, get_clusterer
from signclust.models.baselines import _nets, dp_moves
from signclust.models.baselines.classical import DPGMMPixels, KMeansPixels, WardPixels
from signclust.models.baselines.deepcluster import DeepCluster, fix_empty_clusters
from signclust.models.baselines.swav import SwAV, sinkhorn
from signclust.models.baselines.twostage import (AnchorNeighbourhoods, TwoStage, iic_loss,
                                                 instance_pair_loss)

ALL = [KMeansPixels, WardPixels, DPGMMPixels, DeepCluster, SwAV, TwoStage]


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


# ----------------------------------------------------------------------------- data
def glyph_corpus(n_per: int = 20, size: int = 32, seed: int = 0) -> Corpus:
    """Plus, ring and X shapes with jittered position, size, stroke width and noise."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    imgs, labels = [], []
    for c in range(3):
        for _ in range(n_per):
            cx, cy = size / 2 + rng.uniform(-2, 2, 2)
            w, r = rng.uniform(1.2, 2.0), size * rng.uniform(0.28, 0.34)
            if c == 0:
                d = np.minimum(np.where(np.abs(yy - cy) < r, np.abs(xx - cx), 99),
                               np.where(np.abs(xx - cx) < r, np.abs(yy - cy), 99))
            elif c == 1:
                d = np.abs(np.hypot(xx - cx, yy - cy) - r)
            else:
                u, v = (xx - cx + yy - cy) / np.sqrt(2), (xx - cx - (yy - cy)) / np.sqrt(2)
                d = np.minimum(np.where(np.abs(v) < r, np.abs(u), 99),
                               np.where(np.abs(u) < r, np.abs(v), 99))
            img = np.clip(1.5 - d / w, 0, 1) + rng.normal(0, 0.05, d.shape)
            imgs.append((np.clip(img, 0, 1) * 255).astype(np.uint8))
            labels.append(c)
    return Corpus.from_arrays(np.stack(imgs), labels=labels)


def blob_corpus(n_per: int = 20, size: int = 16, seed: int = 0) -> Corpus:
    """Three fixed images (vertical bar, horizontal bar, diagonal) plus pixel noise."""
    rng = np.random.RandomState(seed)
    protos = np.zeros((3, size, size))
    protos[0][:, size // 2 - 1:size // 2 + 1] = 1
    protos[1][size // 2 - 1:size // 2 + 1, :] = 1
    np.fill_diagonal(protos[2], 1)
    imgs = [np.clip(protos[c] + rng.normal(0, 0.08, (size, size)), 0, 1)
            for c in range(3) for _ in range(n_per)]
    return Corpus.from_arrays((np.stack(imgs) * 255).astype(np.uint8),
                              labels=np.repeat(np.arange(3), n_per))


# ----------------------------------------------------------------------------- params
@pytest.mark.parametrize("cls", ALL)
def test_defaults_paper_and_unknown_params(cls):
    paper = cls.PRESETS["paper"]
    assert set(paper) <= set(cls.PARAMS), "the paper preset must only set known parameters"
    assert cls(preset="paper").p == cls(**paper).p
    assert cls(preset="paper").p == {**cls.DEFAULTS, **{k: cls.PARAMS[k].check(v) for k, v in paper.items()}}
    with pytest.raises(UserError, match="nonsense_key"):
        cls(nonsense_key=1)


@pytest.mark.parametrize("name", ["kmeans", "ward", "deepcluster", "swav", "twostage"])
def test_parametric_methods_need_k(name):
    clusterer = get_clusterer(name)
    assert clusterer.needs_k
    with pytest.raises(UserError, match="number of clusters"):
        clusterer.fit(blob_corpus(), FitContext(seed=0, n_clusters=None, progress=False))


# ----------------------------------------------------------------------------- shared helpers
def test_glyph_cnn_any_size_and_tensor_conversion():
    x = _nets.images_to_tensor(np.full((2, 40, 40), 255, dtype=np.uint8))
    assert x.shape == (2, 1, 40, 40) and x.dtype == torch.float32 and float(x.max()) == 1.0
    for size in (32, 48, 64):
        net = _nets.GlyphCNN(size, feat_dim=16, width=4)
        assert net(torch.rand(3, 1, size, size)).shape == (3, 16)


def test_augmentations_are_seeded_and_keep_ink_range():
    x = _nets.images_to_tensor(glyph_corpus(n_per=2).token_images())
    aug = _nets.GlyphAugment()
    a = aug(x, torch.Generator().manual_seed(3))
    b = aug(x, torch.Generator().manual_seed(3))
    c = aug(x, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == x.shape and float(a.min()) >= 0 and float(a.max()) <= 1
    # mild: an augmented glyph stays closer to its own original than to another class
    d_own = (a[0] - x[0]).abs().mean()
    d_other = (a[0] - x[3]).abs().mean()
    assert d_own < d_other
    crop = _nets.random_resized_crop(x, 16, (0.3, 0.6), torch.Generator().manual_seed(0))
    assert crop.shape == (len(x), 1, 16, 16)


def test_stroke_dilation_thickens_and_erosion_thins():
    x = torch.zeros(2, 1, 9, 9)
    x[:, :, 4, 2:7] = 1.0                       # a 1-px horizontal stroke
    thick = _nets._stroke(x, 1.0, 0.0, torch.Generator().manual_seed(0))
    thin = _nets._stroke(x, 0.0, 1.0, torch.Generator().manual_seed(0))
    assert thick.sum() > x.sum() and thin.sum() < x.sum()


def test_stroke_equals_max_pooling_of_the_drawn_images():
    """grey_dilate is 3 x 3 max-pooling computed another way: the same values, bit for bit, and
    _stroke draws the same images to thicken and thin as the max-pool version it replaced."""
    import torch.nn.functional as F
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(64, 1, 13, 11, generator=gen) > 0.7) * torch.rand(64, 1, 13, 11, generator=gen)
    assert torch.equal(_nets.grey_dilate(x), F.max_pool2d(x, 3, stride=1, padding=1))
    assert torch.equal(-_nets.grey_dilate(-x), -F.max_pool2d(-x, 3, stride=1, padding=1))
    for seed in range(3):
        u = torch.rand(64, generator=torch.Generator().manual_seed(seed)).view(-1, 1, 1, 1)
        thick, thin = F.max_pool2d(x, 3, stride=1, padding=1), -F.max_pool2d(-x, 3, stride=1, padding=1)
        naive = torch.where((u >= 0.3) & (u < 0.6), thin, torch.where(u < 0.3, thick, x))
        assert torch.equal(_nets._stroke(x, 0.3, 0.3, torch.Generator().manual_seed(seed)), naive)
    assert torch.equal(_nets._stroke(x, 0.0, 0.0, gen), x)


@pytest.mark.parametrize("shape, side", [((4, 8, 6, 6), 2), ((4, 8, 6, 6), 3), ((3, 5, 5, 5), 2),
                                         ((2, 3, 7, 6), 3), ((2, 3, 4, 9), 4), ((2, 3, 6, 6), 1)])
def test_grid_means_are_adaptive_pooling_forward_and_backward(shape, side):
    """GlyphCNN's pooling on CUDA (deterministic kernels) computes adaptive pooling's numbers, equal
    cells and unequal, overlapping ones alike, with the same gradient."""
    import torch.nn.functional as F
    x = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref, got = F.adaptive_avg_pool2d(a, side), _nets.grid_means(b, side)
    g = torch.randn(ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref.backward(g)
    got.backward(g)
    assert got.shape == ref.shape
    assert torch.allclose(got, ref, rtol=0, atol=1e-12) and torch.allclose(b.grad, a.grad, rtol=0, atol=1e-12)


def test_deterministic_cuda_fixes_cudnn_cublas_and_torch_algorithms(monkeypatch):
    """What a CUDA device turns on (config.torch_device): run on the CPU, then put back."""
    from signclust.config import deterministic_cuda
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
             torch.backends.cudnn.deterministic)
    try:
        deterministic_cuda()
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        import os
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(saved[0])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[1], saved[2]


def test_an_api_fit_puts_the_callers_torch_switches_back(monkeypatch, tiny):
    """A fit on CUDA turns deterministic kernels on (simulated here: kmeans' fit calls
    deterministic_cuda); the Python API fits in the caller's process and puts the switches back."""
    from signclust import SignClusterer
    from signclust.config import deterministic_cuda
    real_fit = KMeansPixels.fit

    def fit_on_cuda(self, corpus, ctx):
        deterministic_cuda()
        assert torch.are_deterministic_algorithms_enabled()
        return real_fit(self, corpus, ctx)
    monkeypatch.setattr(KMeansPixels, "fit", fit_on_cuda)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
              torch.backends.cudnn.deterministic)
    model = SignClusterer("kmeans", config=None, n_clusters=4).fit(
        tiny.token_images(), tiny.tokens["text_id"].to_numpy(), tiny.tokens["position"].to_numpy())
    assert model.n_types_ == 4
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic) == before == (False, False, False)


def test_cuda_when_present_comes_with_deterministic_kernels_and_cpu_without(monkeypatch):
    from signclust import config
    calls = []
    monkeypatch.setattr(config, "deterministic_cuda", lambda: calls.append(1))
    assert config.torch_device("cpu").type == "cpu" and calls == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert config.torch_device("auto").type == "cpu" and calls == []
    with pytest.raises(UserError, match="CUDA is not available"):
        config.torch_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)     # a GPU machine, as seen from here
    assert config.torch_device("auto").type == "cuda" and calls == [1]
    assert config.torch_device("cuda:0") == torch.device("cuda:0") and calls == [1, 1]


def test_pca_whiten_l2_rows_unit_norm():
    z = _nets.pca_whiten_l2(np.random.RandomState(0).rand(40, 12), 5)
    assert z.shape == (40, 5)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)


def test_uniform_sampler_draws_each_pseudo_label_equally_often():
    labels = np.array([0] * 90 + [1] * 8 + [2] * 2)
    idx = _nets.uniform_label_sampler(labels, 3000, torch.Generator().manual_seed(0))
    assert len(idx) == 3000
    np.testing.assert_array_equal(np.bincount(labels[idx]), [1000, 1000, 1000])
    # within a class every member is used before any repeats: the 8 members of class 1
    # are each drawn exactly 125 times
    np.testing.assert_array_equal(np.bincount(idx[labels[idx] == 1])[90:98], [125] * 8)
    # in expectation over draws as well, when n is not a multiple of the number of classes
    counts = np.zeros(3)
    for s in range(30):
        counts += np.bincount(labels[_nets.uniform_label_sampler(
            labels, 100, torch.Generator().manual_seed(s))], minlength=3)
    assert np.abs(counts / counts.sum() - 1 / 3).max() < 0.01


# ----------------------------------------------------------------------------- classical
@pytest.mark.parametrize("name,params", [
    ("kmeans", {}), ("kmeans", {"pca_dim": 0}),
    ("ward", {}), ("ward", {"pca_dim": 0}),
    # the upper bound is 10 components: the DP prior must leave 7 of them empty
    ("dpgmm", {"n_components": 10, "pca_dim": 5}),
    ("dpgmm", {"n_components": 10, "pca_dim": 5, "inference": "vb"}),
    ("dpgmm", {"n_components": 10, "pca_dim": 5, "inference": "vb", "covariance_type": "spherical"}),
])
def test_classical_recovers_separated_blobs(name, params):
    corpus = blob_corpus()
    result = get_clusterer(name, **params).fit(corpus, FitContext(seed=0, n_clusters=3))
    assert score(corpus.labels(), result.labels)["v_measure"] == pytest.approx(1.0)
    assert result.info["k_found"] == 3
    assert len(result.embedding) == corpus.n_tokens


@pytest.mark.parametrize("covariance_type", ["full", "tied"])
def test_dpgmm_runs_with_every_covariance_model(covariance_type):
    # sklearn gives the tied model's lower bound as shape (1,) (a crash here before); these two
    # models keep spare components on the blobs (measured V 0.90 / 0.87), so only the run is checked
    result = DPGMMPixels(n_components=10, pca_dim=5, covariance_type=covariance_type,
                         inference="vb").fit(blob_corpus(), FitContext(seed=0))
    assert isinstance(result.info["lower_bound"], float) and np.isfinite(result.info["lower_bound"])
    assert 3 <= result.info["k_found"] <= 10 and len(result.labels) == blob_corpus().n_tokens


def test_dpgmm_does_not_need_k():
    assert not DPGMMPixels.needs_k
    result = DPGMMPixels(n_components=10, pca_dim=5).fit(blob_corpus(), FitContext(seed=1))
    assert result.info["k_found"] == 3


def test_dpgmm_merge_inference_is_diagonal_only():
    with pytest.raises(UserError, match="inference 'merge' models diagonal covariances only"):
        DPGMMPixels(n_components=10, pca_dim=5, covariance_type="full").fit(blob_corpus(), FitContext(seed=0))


@pytest.mark.slow                     # numba compiles UMAP on first use (tens of seconds, once)
def test_dpgmm_ae_umap_features_are_the_deepdpm_rows_codes():
    """features: ae_umap clusters exactly what deepdpm clusters with features ae, umap_dim and L2
    rows (the DeepDPM paper's Table 1 features), as float32; the pixel features are untouched."""
    kw = dict(feat_dim=4, ae_epochs=2, ae_width=4, umap_neighbors=5)
    corpus = blob_corpus()
    ctx = FitContext(seed=3, progress=False, device="cpu")
    ours = DPGMMPixels(features="ae_umap", umap_dim=3, **kw).features(corpus, 3, ctx)
    from signclust.models.baselines._nets import fit_setup
    deepdpm = get_clusterer("deepdpm", features="ae", umap_dim=3, transform="normalize", **kw)
    ref = deepdpm.codes(corpus, ctx, *fit_setup(ctx))
    assert ours.dtype == np.float32 and ours.shape == (corpus.n_tokens, 3)
    assert np.array_equal(ours, ref.astype(np.float32))
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    # the default stays PCA of the pixels, exactly what k-means and Ward cluster
    assert np.array_equal(DPGMMPixels(pca_dim=5).features(corpus, 3), KMeansPixels(pca_dim=5).features(corpus, 3))


@pytest.mark.slow                     # numba compiles UMAP on first use (tens of seconds, once)
def test_dpgmm_on_learned_features_recovers_separated_blobs():
    """The whole fit with features ae_umap: the three clean prototypes stay three components, and
    the returned embedding is the learned features (unit rows), not the pixels."""
    corpus = blob_corpus(n_per=30)
    result = DPGMMPixels(features="ae_umap", n_components=10, feat_dim=4, ae_epochs=5, ae_width=4,
                         umap_neighbors=10).fit(corpus, FitContext(seed=0, progress=False, device="cpu"))
    assert score(corpus.labels(), result.labels)["v_measure"] == pytest.approx(1.0)
    assert result.info["k_found"] == 3 and result.info["feature_dim"] == 10
    assert np.allclose(np.linalg.norm(result.embedding, axis=1), 1.0, atol=1e-6)


def test_dpgmm_learned_features_refuse_the_glyph_switch():
    with pytest.raises(UserError, match="glyphs: true is a choice of the pixel features"):
        DPGMMPixels(features="ae_umap", glyphs=True)
    with pytest.raises(UserError, match="features"):
        DPGMMPixels(features="umap")
    DPGMMPixels(features="pixels", glyphs=True)           # the pixel features keep the switch


@pytest.mark.parametrize("name,params", [("dpgmm", {"features": "ae_umap"}), ("deepdpm", {"features": "ae"})])
def test_learned_features_refuse_images_that_are_not_square(name, params):
    # the autoencoder's decoder rebuilds square images: one error before any training
    corpus = Corpus.from_arrays(np.zeros((6, 16, 12), np.uint8), labels=np.arange(6) % 2)
    with pytest.raises(UserError, match=rf"^{name}: square images expected, got \(16, 12\)"):
        get_clusterer(name, **params).fit(corpus, FitContext(seed=0, progress=False, device="cpu"))


def _gaussian_blobs(centres, n_per=40, sd=0.3, seed=0):
    rng = np.random.default_rng(seed)
    x = np.concatenate([c + sd * rng.standard_normal((n_per, len(c))) for c in np.asarray(centres, float)])
    return x, np.repeat(np.arange(len(centres)), n_per)


@pytest.mark.parametrize("dof,k_found", [(2.0, 3), (20.0, 2)])
def test_dpgmm_prior_dof_decides_whether_separate_blobs_stay_apart(dof, k_found):
    # PCA-20 of three clean prototypes, 60 tokens each: with sklearn's dof = D the prior's
    # pseudo-variances make two tight blobs look wide and the merges join them (dp_moves.py)
    corpus = blob_corpus(n_per=60)
    result = DPGMMPixels(n_components=10, pca_dim=20, prior_dof=dof).fit(corpus, FitContext(seed=0))
    assert result.info["k_found"] == k_found


def test_normal_gamma_marginal_is_the_product_of_sequential_predictives():
    # p(x_1..x_n) = prod_i p(x_i | x_1..x_{i-1}): the closed-form marginal against the chain rule
    x = np.random.default_rng(3).normal(size=(7, 3)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -2.0]
    prior = dp_moves.NormalGammaPrior(np.array([0.1, 0.2, 0.3]), 0.7, 1.5, np.array([1.0, 2.0, 0.5]))
    one = lambda rows: dp_moves.component_stats(rows, np.zeros(len(rows), int), 1)  # noqa: E731
    closed = dp_moves.log_marginal(*one(x), prior)[0]
    chain = dp_moves.log_predictive(x[:1], np.zeros(1), np.zeros((1, 3)), np.zeros((1, 3)), prior)[0, 0]
    for i in range(1, len(x)):
        chain += dp_moves.log_predictive(x[i:i + 1], *one(x[:i]), prior)[0, 0]
    assert closed == pytest.approx(chain, rel=1e-10)


def test_log_joint_is_the_crp_weight_plus_each_components_chain_rule_marginal():
    # log p(X, z) = sum_c [log alpha + log Gamma(n_c) + log p(X_c)], each p(X_c) by the chain rule of the
    # predictives (found by mutation testing: log_joint with - log p(X_c) survived every test)
    rng = np.random.default_rng(5)
    x, z, alpha = rng.normal(size=(9, 2)), np.array([0, 0, 1, 1, 1, 2, 0, 2, 1]), 0.7
    prior = dp_moves.NormalGammaPrior.from_data(x)
    expected = 0.0
    for c in range(3):
        rows = x[z == c]
        expected += np.log(alpha) + gammaln(len(rows))
        for i in range(len(rows)):
            stats = dp_moves.component_stats(rows[:i], np.zeros(i, int), 1)
            expected += dp_moves.log_predictive(rows[i:i + 1], *stats, prior)[0, 0]
    assert dp_moves.log_joint(x, z, prior, alpha) == pytest.approx(expected, rel=1e-10)


def test_merge_moves_join_the_pieces_of_a_blob_and_keep_blobs_apart():
    x, y = _gaussian_blobs([[0, 0], [6, 0], [0, 6]])
    prior = dp_moves.NormalGammaPrior.from_data(x)
    # start: every blob cut in two along its first axis -> 6 components
    start = 2 * y + (x[:, 0] > np.array([0, 6, 0])[y])
    z = dp_moves.merge_moves(x, start, prior, alpha=1.0)
    assert score(y, z)["v_measure"] == pytest.approx(1.0)
    assert dp_moves.log_joint(x, z, prior, 1.0) > dp_moves.log_joint(x, start, prior, 1.0)
    # the three blobs as given: no merge raises log p(X, z)
    assert np.array_equal(dp_moves.merge_moves(x, y, prior, alpha=1.0), y)


def test_reassign_moves_stray_tokens_to_their_blob():
    x, y = _gaussian_blobs([[0, 0], [6, 0]])
    z = y.copy()
    z[[0, 1, 2]] = 1                      # three tokens of blob 0 put in blob 1
    assert np.array_equal(dp_moves.reassign(x, z, dp_moves.NormalGammaPrior.from_data(x)), y)


def test_a_reassignment_sweep_weighs_each_component_by_its_size():
    # the seat-choice weight n_c of the CRP times the predictive (found by mutation testing: the sign of
    # log n_c was read by no test): one sweep against a naive argmax, on two overlapping components of
    # 200 and 10 tokens, where the weight decides for some tokens
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0.0, 1.0, (200, 1)), rng.normal(2.5, 1.0, (10, 1))])
    z = np.repeat([0, 1], [200, 10])
    prior = dp_moves.NormalGammaPrior.from_data(x)
    n, s1, s2 = dp_moves.component_stats(x, z, 2)
    log_pred = np.array([[dp_moves.log_predictive(x[i:i + 1], n[c:c + 1], s1[c:c + 1], s2[c:c + 1], prior)[0, 0]
                          for c in range(2)] for i in range(len(x))])
    expected = (log_pred + np.log(n)).argmax(1)
    assert not np.array_equal(expected, (log_pred - np.log(n)).argmax(1))    # the weight matters here
    assert np.array_equal(dp_moves.reassign(x, z, prior, sweeps=1), np.unique(expected, return_inverse=True)[1])


def test_fit_dp_merge_finds_k_from_an_overcomplete_start():
    x, y = _gaussian_blobs([[0, 0, 0], [5, 0, 0], [0, 5, 0], [0, 0, 5]], n_per=50)
    z, info = dp_moves.fit_dp_merge(x, k_start=30, alpha=1.0, seed=0)
    assert info["history"][0][0] == 30 and z.max() + 1 == 4
    assert score(y, z)["v_measure"] == pytest.approx(1.0)


def test_fit_dp_merge_history_is_each_rounds_k_and_log_p_under_its_prior_and_the_start_follows_the_seed():
    # found by mutation testing (scripts/mutation.sh dpgmm): the history's K and log p(X, z) were read
    # by no test, nor the default dof, the float64 arithmetic or the seed of the k-means start
    x, _ = _gaussian_blobs([[0, 0, 0], [5, 0, 0], [0, 5, 0], [0, 0, 5]], n_per=50)
    x32 = x.astype(np.float32)                      # a PCA of the pixels arrives in float32
    z, info = dp_moves.fit_dp_merge(x32, k_start=30, alpha=1.0, seed=0)
    x64 = x32.astype(np.float64)
    prior = dp_moves.NormalGammaPrior.from_data(x64, dof=2.0)
    k_last, log_p_last = info["history"][-1]
    assert k_last == len(np.unique(z)) == z.max() + 1
    assert log_p_last == pytest.approx(dp_moves.log_joint(x64, z, prior, 1.0), rel=1e-12, abs=0)
    assert all(k == int(k) for k, _ in info["history"]) and info["history"][0][0] == 30
    again, other = (dp_moves.fit_dp_merge(x32, k_start=30, alpha=1.0, seed=s)[1]["history"][0] for s in (0, 1))
    assert again == info["history"][0] and other[1] != info["history"][0][1]   # another seed, another start


# ----------------------------------------------------------------------------- DeepCluster
def test_empty_cluster_reassignment_leaves_no_empty_cluster():
    # 3 distinct points, each 10 times: k-means with k=5 must leave clusters empty
    # (identical points always go to the same nearest centroid)
    base = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]], dtype=np.float32)
    x = np.repeat(base, 10, axis=0)
    labels, cent, _ = _nets.faiss_kmeans(x, 5, seed=0)
    assert len(np.unique(labels)) < 5
    fixed, new_cent, n_fixed = fix_empty_clusters(x, labels, cent, 5, torch.Generator().manual_seed(0))
    assert np.bincount(fixed, minlength=5).min() > 0
    assert n_fixed == 5 - len(np.unique(labels)) and new_cent.shape == (5, 2)
    # only splits: each new cluster lies inside one old cluster
    for c in range(5):
        assert len(np.unique(labels[fixed == c])) == 1


def test_empty_cluster_reassignment_splits_by_perturbed_centroids():
    rng = np.random.RandomState(0)
    x = np.concatenate([rng.normal(0, 1, (20, 3)), rng.normal(10, 1, (20, 3))]).astype(np.float32)
    labels = np.r_[np.zeros(20), np.ones(20)].astype(int)
    cent = np.stack([x[:20].mean(0), x[20:].mean(0), np.full(3, 99.0)]).astype(np.float32)
    fixed, new_cent, n = fix_empty_clusters(x, labels, cent, 3, torch.Generator().manual_seed(1))
    assert n == 1 and np.bincount(fixed).min() > 0
    # the moved points are the ones nearer to the new (perturbed) centroid
    donor = int(np.bincount(labels[fixed == 2]).argmax())
    members = np.flatnonzero(labels == donor)
    d_new = ((x[members] - new_cent[2]) ** 2).sum(1)
    d_old = ((x[members] - new_cent[donor]) ** 2).sum(1)
    np.testing.assert_array_equal(fixed[members] == 2, d_new < d_old)


# ----------------------------------------------------------------------------- SwAV
def test_sinkhorn_rows_are_distributions_and_prototypes_equipartitioned():
    gen = torch.Generator().manual_seed(0)
    b, k = 64, 8
    scores = torch.rand(b, k, generator=gen) * 2 - 1
    q = sinkhorn(scores, eps=0.05, n_iters=3)
    assert q.shape == (b, k) and float(q.min()) >= 0
    torch.testing.assert_close(q.sum(1), torch.ones(b), atol=1e-5, rtol=0)
    # converged: every prototype gets B/K of the mass, even when all samples prefer one
    collapsed = scores.clone()
    collapsed[:, 0] += 1.0
    for s in (scores, collapsed):
        q = sinkhorn(s, eps=0.1, n_iters=2000)
        torch.testing.assert_close(q.sum(1), torch.ones(b), atol=1e-5, rtol=0)
        torch.testing.assert_close(q.sum(0), torch.full((k,), b / k), atol=1e-5, rtol=0)


def test_sinkhorn_small_eps_is_stable_and_sharp():
    # B == K with a clear best permutation: small eps gives (almost) that hard assignment
    perm = torch.tensor([2, 0, 3, 1])
    scores = torch.full((4, 4), -0.5)
    scores[torch.arange(4), perm] = 0.9
    q = sinkhorn(scores, eps=0.01, n_iters=50)
    assert torch.isfinite(q).all()
    assert torch.equal(q.argmax(1), perm) and float(q.max(1).values.min()) > 0.99


# ----------------------------------------------------------------------------- Two-stage
def test_iic_loss_is_minus_log_k_for_confident_agreeing_balanced_views():
    k = 4
    y = torch.eye(k).repeat(8, 1)                 # 32 samples, balanced, one-hot
    assert float(iic_loss(y, y)) == pytest.approx(-np.log(k), abs=1e-5)
    uniform = torch.full((32, k), 1 / k)
    assert float(iic_loss(uniform, uniform)) == pytest.approx(0.0, abs=1e-6)


def test_instance_pair_loss_prefers_matching_views():
    gen = torch.Generator().manual_seed(0)
    v = torch.nn.functional.normalize(torch.randn(16, 8, generator=gen), dim=1)
    matching = torch.cat([v, v])
    shuffled = torch.cat([v, v[torch.randperm(16, generator=gen)]])
    assert instance_pair_loss(matching, 0.1) < instance_pair_loss(shuffled, 0.1)


def test_anchor_neighbourhoods_pick_low_entropy_tokens_and_exclude_self():
    # tokens 0-3 sit in a tight pair structure, 4-9 are spread out
    gen = torch.Generator().manual_seed(0)
    m = torch.nn.functional.normalize(torch.randn(10, 6, generator=gen), dim=1)
    m[1] = torch.nn.functional.normalize(m[0] + 0.01, dim=0)
    ans = AnchorNeighbourhoods(10, "cpu")
    ans.update(m, tau=0.1, n_anchors=3, size=1)
    assert int(ans.is_anchor.sum()) == 3
    assert (ans.neighbours[:, 0] != torch.arange(10)).all()
    assert int(ans.neighbours[0, 0]) == 1 and int(ans.neighbours[1, 0]) == 0


# ----------------------------------------------------------------------------- deep fits
TINY = {
    # seeds 0-4: v = 1.0, 1.0, 1.0, 0.94, 1.0 (with a single k-means run per epoch seed 0
    # fell to 0.24: restarts matter on 60 points)
    "deepcluster": {"epochs": 25, "batch_size": 16, "width": 8, "feat_dim": 32, "pca_dim": 4,
                    "kmeans_redo": 5},
    # seeds 0-3 gave v = 1.0, 0.61, 0.73, 1.0 here: SwAV can merge two of only three
    # prototypes; the queue (equipartition over 80 instead of 20 samples) is what made it work
    "swav": {"epochs": 40, "batch_size": 20, "lr": 0.05, "width": 8, "feat_dim": 32,
             "hidden_dim": 32, "proj_dim": 16, "queue_length": 60, "queue_start_epoch": 3,
             # measured with the prototypes never frozen (the class default was 0 then; now 1
             # epoch, as the paper's code): on 60 images, 3 steps an epoch, seed 0 then merges two types
             "freeze_prototypes_epochs": 0,
             # and with epsilon 0.05 (the class default then; now 0.03, the official README's remedy:
             # on these 60 images seed 0 then merges two types, v = 0.69)
             "epsilon": 0.05,
             # and with temperature 0.1 (the class default then; now 0.2): seeds 0-4 give v = 1.0,
             # 0.61, 0.73, 1.0, 1.0 at 0.1 and 0.78, 0.94, 1.0, 1.0, 1.0 at 0.2 (one torch thread)
             "temperature": 0.1},
    # fixed row-normalised Norm-FC heads (the released code): seeds 0, 2, 3, 4 found the three
    # types (v = 1.0), seed 1 merged two (v = 0.73); the trained cosine heads merged two on seeds 0-3.
    # With tau_c scaled by sqrt(10 / K) (0.18 at K = 3; the refit's machine, one thread) seeds 0-4
    # give v = 1.0, 0.73 (K 2), 1.0, 0.73 (K 2), 1.0, and with tau_c fixed at 0.1 1.0, 1.0, 0.84, 1.0, 0.80
    "twostage": {"rounds": 2, "epochs_per_round": 4, "ue_step_every": 2, "stage2_epochs": 25,
                 "batch_size": 20, "width": 8, "dim": 32},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TINY))
def test_deep_method_on_the_three_glyph_types(name):
    """DeepCluster, SwAV and Two-stage each find the three glyph types exactly on some seed of 0-4.
    Which seeds do is not fixed: on 60 images one rounding difference (another CPU's kernels,
    another thread count) sends a fit to another result. Measured on an AVX-512 machine, V by seed:
    DeepCluster 1, 1, 1, 0.94, 1; SwAV 0.56, 0.55, 0.71, 1, 1; Two-stage 1, 0.73 (K 2), 1, 0.84, 1;
    the machine that made the committed results had SwAV's seed 0 at 1.0, this one 0.56 (0.90 under
    pytest), so a test of seed 0 alone passed on one CPU and failed on the other."""
    corpus = glyph_corpus()
    v = []
    for seed in range(5):
        logged = []
        ctx = FitContext(seed=seed, n_clusters=3, progress=False, device="cpu",
                         log_metrics=lambda metrics, step: logged.append(step))
        result = get_clusterer(name, **TINY[name]).fit(corpus, ctx)
        assert result.labels.shape == (corpus.n_tokens,)
        assert len(result.embedding) == corpus.n_tokens
        assert result.info["k_found"] == len(np.unique(result.labels)) <= 3
        assert logged and logged == sorted(logged)
        v.append(score(corpus.labels(), result.labels)["v_measure"])
    assert max(v) > 0.999, v


@pytest.mark.parametrize("name", sorted(TINY))
def test_deep_method_same_seed_same_labels(name):
    corpus = glyph_corpus(n_per=8)
    short = {**TINY[name], **({"epochs": 2} if "epochs" in TINY[name] else
                              {"rounds": 2, "epochs_per_round": 1, "stage2_epochs": 1})}
    runs = [get_clusterer(name, **short).fit(
        corpus, FitContext(seed=s, n_clusters=3, progress=False, device="cpu")) for s in (5, 5)]
    np.testing.assert_array_equal(runs[0].labels, runs[1].labels)
    np.testing.assert_array_equal(runs[0].embedding, runs[1].embedding)
