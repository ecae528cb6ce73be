"""DeepDPM: the split/merge moves must infer K from a wrong start, and the paper's feature pipeline
(codes -> UMAP(10, n_neighbors 20, min_dist 0) -> L2 rows, the authors' make_umap_embeddings.py and
DeepDPM.py) must be what is clustered when asked for. Each test a few seconds on one thread."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import v_measure_score

from signclust.errors import UserError
from signclust.models.base import FitContext, get_clusterer
from signclust.models.baselines import deepdpm as dd


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


# a short schedule: M-steps from epoch 5, sub-clusters from 10, a move every 10 epochs from 15
_FAST = dict(max_epochs=130, start_computing_params=5, start_sub_clustering=10, start_splitting=15,
             split_merge_every=10, batch_size=32, stochastic=False)


def _blobs(k: int, per: int, d: int, sep: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """k well-separated isotropic Gaussian blobs (unit variance, centres ``sep`` apart on axes
    and their pairwise sums), scaled as the clusterer's default ``transform: scale`` does."""
    rng = np.random.default_rng(seed)
    centres = np.zeros((k, d))
    for j in range(k):
        centres[j, j % d] = sep
        if j >= d:
            centres[j, (j + 1) % d] = sep
    y = np.repeat(np.arange(k), per)
    x = centres[y] + rng.normal(size=(k * per, d))
    return (x - x.mean(axis=0)) / x.std(), y


def _new_run(x: np.ndarray, **cfg) -> dd._DPMRun:
    """A DPM run on codes ``x`` with the short schedule, seed 0, not yet trained."""
    gen = torch.Generator()
    gen.manual_seed(0)
    return dd._DPMRun(x, {**dd.DeepDPM.DEFAULTS, **_FAST, **cfg}, 0, torch.device("cpu"), gen)


def _run(x: np.ndarray, **cfg) -> dd._DPMRun:
    torch.manual_seed(0)
    run = _new_run(x, **cfg)
    run.train(FitContext(seed=0, progress=False))
    return run


@pytest.mark.parametrize("init_k", [2, 16])
def test_split_merge_reaches_k_from_a_wrong_start(init_k):
    """8 blobs of 60 points in 6-D (the sign corpora's tens of points per type), started from
    too few (2: only splits can reach 8) or too many clusters (16: only merges can): K within
    ±20% of 8 and the blobs recovered."""
    x, y = _blobs(8, 60, 6, sep=12.0)
    run = _run(x, init_k=init_k)
    labels = run.predict()
    k = len(np.unique(labels))
    assert 0.8 * 8 <= k <= 1.2 * 8, (k, run.k_history[::10])
    assert v_measure_score(y, labels) > 0.85
    moved = "split" if init_k < 8 else "merge"
    assert any(m["type"] == moved for m in run.moves)


def test_merged_cluster_gets_fresh_principal_axis_subclusters():
    """After a merge the merged cluster's sub-clusters are 2-means on the first principal
    component of its points (the authors' update_subclusters_params_merge, kmeans_1d), not the
    two clusters just merged (whose reverse split the merge has just rejected)."""
    rng = np.random.default_rng(1)
    blob = rng.normal(size=(300, 2)) * np.array([1.0, 3.0])      # elongated along y
    far = rng.normal(size=(100, 2)) + np.array([30.0, 0.0])
    x = np.concatenate([blob, far])
    z = np.r_[np.where(blob[:, 0] < 0, 1, 2), np.zeros(100, int)]   # the blob cut across its short axis
    run = _new_run(x, init_k=3)
    run.z = z
    run.pi, run.mus, run.covs = dd.map_params(x, np.eye(3)[z], run.prior, 0.1)
    run._init_subclusters(range(3))
    run._merge_step(epoch=20)
    assert run.K == 2 and run.moves[-1]["type"] == "merge" and sorted(run.moves[-1]["clusters"]) == [1, 2]
    merged = run.K - 1                                          # merged clusters are appended
    assert np.array_equal(run.z == merged, np.arange(400) < 300)
    sub = dd.two_means_1d(blob)                                 # cuts the blob across y, its long axis
    want = np.stack([blob[sub == s].mean(axis=0) for s in (0, 1)])
    got = run.mus_sub[merged]
    assert np.allclose(got[np.argsort(got[:, 1])], want[np.argsort(want[:, 1])], atol=1e-3)
    assert abs(got[0, 1] - got[1, 1]) > 3.0 and abs(got[0, 0] - got[1, 0]) < 0.5


def test_umap_params_checked():
    assert get_clusterer("deepdpm").params["umap_dim"] == 0       # off unless asked (umap-learn)
    p = get_clusterer("deepdpm", umap_dim=10).params               # the authors' UMAP settings
    assert (p["umap_neighbors"], p["umap_min_dist"]) == (20, 0.0)
    # nu is checked against the dimension actually clustered
    get_clusterer("deepdpm", feat_dim=32, umap_dim=10, nu=12.0)
    with pytest.raises(UserError, match="umap_dim - 1"):
        get_clusterer("deepdpm", feat_dim=4, umap_dim=10, nu=5.0)
    with pytest.raises(UserError):
        get_clusterer("deepdpm", umap_dim=-1)


@pytest.mark.slow                     # numba compiles UMAP on first use (tens of seconds, once)
def test_umap_codes_are_what_is_clustered(tiny):
    """With umap_dim the clustered codes are UMAP's (umap_dim wide), then L2 rows; seeded."""
    from signclust.models.baselines._nets import fit_setup
    m = get_clusterer("deepdpm", feat_dim=8, umap_dim=3, umap_neighbors=5, transform="normalize")
    ctx = FitContext(seed=0, progress=False, device="cpu")
    z = m.codes(tiny, ctx, *fit_setup(ctx))
    assert z.shape == (tiny.n_tokens, 3)
    assert np.allclose(np.linalg.norm(z, axis=1), 1.0)
    assert np.array_equal(z, m.codes(tiny, ctx, *fit_setup(ctx)))


@pytest.mark.slow                     # a fresh interpreter: numba loads UMAP's kernels again
def test_umap_leaves_torch_at_the_thread_count_set():
    """numba runs UMAP's kernels on OpenMP, torch's libgomp: once torch has used its thread pool (here a
    product at the default count), numba's first launch in the process sets torch back to every core, and
    the clustering after the UMAP step would run there, not at the count set (the figures depend on it;
    a DeepDPM fit pinned to one thread ran at two). A fresh interpreter, so that the launch is the first."""
    import subprocess
    import sys
    code = ("import numpy as np, torch; a = torch.randn(1000, 1000); (a @ a).sum(); torch.set_num_threads(1); "
            "from signclust.models.baselines._codes import umap_embed; "
            "umap_embed(np.random.default_rng(0).normal(size=(300, 10)), 3, 10, 0.0, 0); "
            "print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1"]


def _subcluster_grads(threads: int) -> list[torch.Tensor]:
    """Gradients of SubClusterNets' parameters for 4000 points over 3 clusters, on ``threads``."""
    from signclust.reports.reproduce import torch_threads
    with torch_threads(threads):
        gen = torch.Generator().manual_seed(0)
        nets = dd.SubClusterNets(d=10, hidden=50, k=3, gen=gen)
        x = torch.randn(4000, 10, generator=gen)
        z = torch.randint(0, 3, (4000,), generator=gen)
        nets(x, z)[:, 0].sum().backward()
        return [p.grad.clone() for p in nets.parameters()]


def test_subcluster_gradients_are_the_same_on_every_run_with_two_threads():
    """Indexing each point's net as w1[z] back-propagates through index_put_(accumulate=True),
    whose multi-threaded CPU sum order varies from run to run: the same seed gave another DeepDPM
    labelling on latin_hands in two runs with 2 threads. index_select's backward does not."""
    first = _subcluster_grads(2)
    for _ in range(5):
        assert all(torch.equal(a, b) for a, b in zip(first, _subcluster_grads(2)))
    # and the one-thread sums, which were already repeatable, are the ones they were
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(first, _subcluster_grads(1)))


@pytest.mark.parametrize("fallback", [True, False])
def test_a_one_sided_sub_cluster_net_does_not_block_the_split(fallback):
    """Two blobs in one cluster, its sub-cluster net saturated on one side (every point in sub-cluster
    0): the isotropic loss gives it no gradient, so the net never proposes a split. Without
    ``proposal_fallback`` (the authors' code) K stays 1; with it the split step proposes the
    sub-clusters' own split (each point to the nearer sub-cluster mean: the 2-means halves once the
    one-sided sub-clusters were started afresh) and makes it."""
    x, y = _blobs(2, 100, 2, sep=12.0)
    torch.manual_seed(0)
    run = _new_run(x, init_k=1, proposal_fallback=fallback, max_epochs=60)
    with torch.no_grad():
        run.snet.w2.zero_()
        run.snet.b2.copy_(torch.tensor([[50.0, -50.0]]))
    run.train(FitContext(seed=0, progress=False))
    labels = run.predict()
    if fallback:
        assert run.K == 2 and v_measure_score(y, labels) == 1.0
        assert [m["type"] for m in run.moves][:1] == ["split"]
    else:
        assert run.K == 1 and not run.moves


@pytest.mark.parametrize("lr_steps", [0, 547])
def test_a_split_is_learned_by_the_cluster_net_within_the_freeze(lr_steps):
    """After a split both new clusters start as copies of the parent's output unit. At the paper's rate
    (5e-4, set for 547 steps an epoch) and the 19 steps an epoch of 600 points, five frozen epochs leave
    every point at about 0.8 of its own new cluster, and the M-step that follows mixes the two (on
    10 000 MNIST codes one copy then took every point and was merged away, reports/deepdpm_split_lr.md);
    with the rate kept per epoch (``cluster_lr_steps``, the paper presets' 547) the net has learned the
    split when the freeze ends."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], [400, 200])                         # unequal halves: the parent's bias favours one
    x = np.c_[6.0 * y, np.zeros(600)] + rng.normal(size=(600, 2))
    x = (x - x.mean(axis=0)) / x.std()
    torch.manual_seed(0)
    split_at, freeze = _FAST["start_splitting"], dd.DeepDPM.DEFAULTS["freeze_after_move"]
    run = _new_run(x, init_k=1, cluster_lr=5e-4, cluster_lr_steps=lr_steps, max_epochs=split_at + 1)
    assert run.cluster_lr == pytest.approx(5e-4 * (lr_steps / 19 if lr_steps else 1.0))
    run.train(FitContext(seed=0, progress=False))
    assert run.K == 2 and v_measure_score(y, run.z) == 1.0      # the split, exactly the two blobs
    z = run.z.copy()
    run.cfg = {**run.cfg, "max_epochs": split_at + 1 + freeze}
    run.train(FitContext(seed=0, progress=False), start=split_at + 1)
    assert all(run._frozen(e) for e in range(split_at + 1, split_at + 1 + freeze))
    with torch.no_grad():
        own = run.cnet(run.xt).numpy()[np.arange(600), z]      # each point's responsibility of its cluster
    if lr_steps:
        assert own.mean() > 0.97, own.mean()
    else:
        assert 0.6 < own.mean() < 0.9, own.mean()
    assert dd.DeepDPM.PRESETS["paper"]["cluster_lr_steps"] == dd.DeepDPM.PRESETS["paper_umap"]["cluster_lr_steps"] == 547
