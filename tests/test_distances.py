"""Distance kernel, kNN, the distance stage and the two distance providers."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from signclust.distances import stage
from signclust.distances import l1
from signclust.distances.hamming import binarised_glyphs, hamming_sums, mean_hamming, pack_bits
from signclust.distances.l1 import EXACT_I32_PIXELS, iter_row_blocks, knn_from_block, l1_sums, mean_l1
from signclust.errors import UserError
from signclust.io import write_json
from signclust.distances.provider import (MatrixDistances, OnDemandDistances, load_knn, open_distances,
                                          read_meta)

F16_RTOL = 2.0 ** -11          # float16 unit roundoff (relative rounding error of a normal number)


def rand_images(rng, n, shape, extremes=True):
    x = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    if extremes and n >= 3:
        x[0] = 0
        x[1] = 255
        x[2].flat[::2] = 255
        x[2].flat[1::2] = 0
    return x


def naive_sums(a, b):
    a = a.reshape(len(a), -1).astype(np.int64)
    b = b.reshape(len(b), -1).astype(np.int64)
    return np.abs(a[:, None, :] - b[None, :, :]).sum(-1)


def naive_mean(a, b):
    a = a.reshape(len(a), -1).astype(np.float64) / 255.0
    b = b.reshape(len(b), -1).astype(np.float64) / 255.0
    return np.abs(a[:, None, :] - b[None, :, :]).mean(-1)


def naive_knn(d, k):
    """Sorted by distance then index, self excluded."""
    d = np.array(d, dtype=np.float64)
    np.fill_diagonal(d, np.inf)
    idx = np.array([np.lexsort((np.arange(len(row)), row))[:k] for row in d])
    return idx, np.take_along_axis(d, idx, 1)


# -- kernel ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,m,shape", [(7, 11, (5, 9)), (1, 13, (16, 3)), (9, 1, (12, 12)), (1, 1, (1, 1)),
                                       (20, 20, (48, 48)), (3, 4, (7,))])
def test_l1_sums_exact(n, m, shape):
    rng = np.random.default_rng(n * 100 + m)
    a, b = rand_images(rng, n, shape), rand_images(rng, m, shape)
    got = l1_sums(a, b)
    assert got.shape == (n, m) and got.dtype == np.int64
    assert np.array_equal(got, naive_sums(a, b))


def test_l1_sums_extremes_and_large_images():
    dim = 300 * 300
    a = np.zeros((1, 300, 300), np.uint8)
    b = np.stack([np.full((300, 300), 255, np.uint8), np.zeros((300, 300), np.uint8)])
    assert l1_sums(a, b).tolist() == [[255 * dim, 0]]
    assert l1_sums(b, a).tolist() == [[255 * dim], [0]]


def test_int32_kernel_is_exact_up_to_its_bound_and_the_int64_kernel_takes_over_beyond():
    # the worst sum on the int32 (psadbw) path, 255 x EXACT_I32_PIXELS, is the largest below 2**31
    assert 255 * EXACT_I32_PIXELS <= 2 ** 31 - 1 < 255 * (EXACT_I32_PIXELS + 1)
    for dim in (EXACT_I32_PIXELS, EXACT_I32_PIXELS + 1):       # the last int32 size, the first int64 one
        a = np.zeros((1, dim), np.uint8)
        b = np.full((3, dim), 255, np.uint8)
        b[1] = 0
        b[2, ::3] = 1
        assert l1_sums(a, b).tolist() == [[255 * dim, 0, 255 * dim - 254 * len(b[2, ::3])]]
    rng = np.random.default_rng(11)
    x, y = rand_images(rng, 6, (256, 256)), rand_images(rng, 7, (256, 256))
    out_s, out_i = np.empty((6, 7), np.int64), np.empty((6, 7), np.int64)
    l1._l1_sums_sad(l1.as_rows(x), l1.as_rows(y), out_s)
    l1._l1_sums_int(l1.as_rows(x), l1.as_rows(y), out_i)
    assert np.array_equal(out_s, out_i) and np.array_equal(out_s, naive_sums(x, y))


def test_l1_sums_non_contiguous_and_non_uint8_views():
    rng = np.random.default_rng(5)
    big = rand_images(rng, 12, (10, 14))
    a, b = big[::2, :, ::2], big[1::3, :, ::2]          # strided views
    assert np.array_equal(l1_sums(a, b), naive_sums(np.ascontiguousarray(a), np.ascontiguousarray(b)))


def test_l1_sums_mismatched_sizes():
    b = np.zeros((3, 4, 4), np.uint8)
    with pytest.raises(ValueError, match="image sizes differ: 16 vs 20 pixels"):
        l1_sums(b, np.zeros((2, 4, 5), np.uint8))


def test_l1_sums_empty():
    a = np.zeros((0, 4, 4), np.uint8)
    b = np.zeros((3, 4, 4), np.uint8)
    assert l1_sums(a, b).shape == (0, 3)
    assert l1_sums(b, a).shape == (3, 0)


@pytest.mark.parametrize("shape", [(48, 48), (17, 31)])
def test_mean_l1_matches_float_reference(shape):
    rng = np.random.default_rng(6)
    a, b = rand_images(rng, 10, shape), rand_images(rng, 8, shape)
    got = mean_l1(a, b)
    assert got.dtype == np.float32
    assert np.abs(got - naive_mean(a, b)).max() < 1e-6
    full = mean_l1(np.zeros((1, *shape), np.uint8), np.full((1, *shape), 255, np.uint8))
    assert full[0, 0] == 1.0
    assert (got >= 0).all() and (got <= 1).all()


# -- the popcount path -------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(48, 48), (7, 9), (8, 8), (1, 65), (32, 32)])
def test_hamming_equals_the_grey_kernel_on_binary_images(shape):
    rng = np.random.default_rng(sum(shape))
    a = (rng.random((9, *shape)) < 0.3).astype(np.uint8) * 255
    b = (rng.random((11, *shape)) < 0.5).astype(np.uint8) * 255
    b[0] = 255                                            # every bit set, including the last partial word
    got = hamming_sums(pack_bits(a), pack_bits(b))
    assert got.dtype == np.int64 and got.shape == (9, 11)
    assert np.array_equal(got * 255, l1_sums(a, b))
    pixels = int(np.prod(shape))
    assert np.allclose(mean_hamming(pack_bits(a), pack_bits(b), pixels), mean_l1(a, b), atol=1e-7)


def test_pack_bits_thresholds_at_half_and_pads_with_zero_bits():
    img = np.array([[[0, 127, 128, 255, 200]]], np.uint8)
    bits = pack_bits(img)
    assert bits.dtype == np.uint64 and bits.shape == (1, 1)
    assert np.unpackbits(bits.view(np.uint8))[:8].tolist() == [0, 0, 1, 1, 1, 0, 0, 0]
    assert hamming_sums(bits, pack_bits(np.zeros((1, 1, 5), np.uint8))).tolist() == [[3]]


def test_hamming_rejects_rows_of_different_widths():
    with pytest.raises(ValueError, match="packed rows differ"):
        hamming_sums(pack_bits(np.zeros((2, 8, 8), np.uint8)), pack_bits(np.zeros((2, 9, 9), np.uint8)))


def test_binarised_glyphs_are_0_or_255_and_ignore_position_and_size():
    img = np.zeros((4, 40, 40), np.uint8)
    img[0, 5:15, 5:10] = 255                              # an upright bar
    img[1, 25:35, 30:35] = 255                            # the same bar elsewhere
    img[2, 10:30, 20:30] = 255                            # twice the size
    img[3, 5:10, 5:15] = 255                              # a lying bar: another shape
    g = binarised_glyphs(img)
    assert set(np.unique(g).tolist()) == {0, 255}
    d = hamming_sums(pack_bits(g), pack_bits(g))
    assert d[0, 1] == 0 and d[0, 2] < 0.25 * d[0, 3]


def test_stage_with_the_hamming_metric_writes_glyph_hamming_distances(tmp_path):
    rng = np.random.default_rng(12)
    x = rand_images(rng, 40, (20, 20), extremes=False)
    info = stage.compute(x, k=5, dense_max=1000, chunk=16, out_dir=tmp_path, progress=False, metric="hamming_glyphs")
    assert info["metric"] == "hamming_glyphs"
    g = binarised_glyphs(x)
    dist = np.load(tmp_path / "dist.npy")
    assert np.allclose(dist.astype(np.float64), naive_mean(g, g), rtol=F16_RTOL, atol=1e-7)
    with pytest.raises(UserError, match="distances.metric must be one of l1, hamming_glyphs, not 'cosine'"):
        stage.compute(x, k=5, dense_max=1000, chunk=16, out_dir=tmp_path, progress=False, metric="cosine")


def test_on_demand_columns_follow_the_metric_of_the_stage(tiny_corpus, tmp_path):
    c = tiny_corpus(n_types=4, per_type=6, seed=5)
    info = stage.compute(np.asarray(c.images), k=3, dense_max=0, chunk=8, out_dir=tmp_path, progress=False,
                         metric="hamming_glyphs")
    write_json(tmp_path / "meta.json", info)                 # as the stage's CLI does
    ond = open_distances(c, tmp_path)
    assert isinstance(ond, OnDemandDistances)
    g = binarised_glyphs(c.token_images())
    assert np.allclose(ond.columns(np.arange(c.n_tokens)), naive_mean(g, g), atol=1e-6)


def test_iter_row_blocks_cover_all_rows():
    rng = np.random.default_rng(7)
    x = rand_images(rng, 23, (6, 6))
    blocks = list(iter_row_blocks(x, 5))
    assert [(s, e) for s, e, _ in blocks] == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 23)]
    assert np.array_equal(np.concatenate([b for *_, b in blocks]), mean_l1(x, x))


# -- kNN ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 3, 10, 19, 50])
def test_knn_from_block_distinct_values(k):
    rng = np.random.default_rng(k)
    m = 20
    full = rng.permutation(m * m).reshape(m, m).astype(np.float32) / (m * m)
    start, stop = 5, 12
    idx, dist = knn_from_block(full[start:stop], start, k)
    ref_idx, ref_dist = naive_knn(full, min(k, m - 1))
    assert idx.dtype == np.int64 and idx.shape == (stop - start, min(k, m - 1))
    assert np.array_equal(idx, ref_idx[start:stop])
    assert np.allclose(dist, ref_dist[start:stop])
    assert not np.any(idx == np.arange(start, stop)[:, None])       # self excluded


def test_knn_from_block_does_not_modify_input_and_orders_inner_ties():
    block = np.array([[0, 1, 1, 1, 2, 0.5]], np.float32)
    before = block.copy()
    idx, dist = knn_from_block(block, 0, 5)
    assert np.array_equal(block, before)
    # all tied values fit in k: ordered by index
    assert idx.tolist() == [[5, 1, 2, 3, 4]]
    assert dist.tolist() == [[0.5, 1, 1, 1, 2]]


def test_knn_from_block_ties_at_boundary_broken_by_index():
    rng = np.random.default_rng(0)
    for _ in range(50):
        m = int(rng.integers(5, 120))
        block = rng.integers(0, 4, size=(m, m)).astype(np.float32)
        k = int(rng.integers(1, m - 1))
        idx, _ = knn_from_block(block, 0, k)
        ref, _ = naive_knn(block, k)
        assert np.array_equal(idx, ref)


# -- stage -------------------------------------------------------------------------------------

def test_compute_dense_matrix_and_knn(tmp_path):
    rng = np.random.default_rng(8)
    x = rand_images(rng, 150, (12, 20))
    info = stage.compute(x, k=7, dense_max=1000, chunk=32, out_dir=tmp_path, progress=False)
    assert info == {"images": 150, "dense": True, "k": 7, "pixels": 240}
    dist = np.load(tmp_path / "dist.npy")
    assert dist.dtype == np.float16 and dist.shape == (150, 150)
    ref = naive_mean(x, x)
    assert np.allclose(dist.astype(np.float64), ref, rtol=F16_RTOL, atol=1e-7)
    assert np.array_equal(dist, dist.T)
    assert np.all(np.diag(dist) == 0)
    idx, d = load_knn(tmp_path)
    ref_idx, ref_d = naive_knn(mean_l1(x, x), 7)
    assert idx.shape == (150, 7) and d.dtype == np.float32
    assert np.allclose(d, ref_d, rtol=0, atol=1e-7)
    # indices equal wherever the row has no tie at the k-th distance
    full = mean_l1(x, x)
    np.fill_diagonal(full, np.inf)
    srt = np.sort(full, 1)
    clean = srt[:, 6] != srt[:, 7]
    assert clean.mean() > 0.9
    assert np.array_equal(idx[clean], ref_idx[clean])


def test_compute_k_larger_than_set_and_k_zero(tmp_path):
    x = rand_images(np.random.default_rng(9), 4, (5, 5))
    info = stage.compute(x, k=15, dense_max=10, chunk=3, out_dir=tmp_path, progress=False)
    assert info["k"] == 3
    idx, _ = load_knn(tmp_path)
    assert idx.shape == (4, 3)
    assert all(sorted(row) == sorted(set(range(4)) - {i}) for i, row in enumerate(idx.tolist()))
    with pytest.raises(UserError, match="at least 1"):
        stage.compute(x, k=0, dense_max=10, chunk=3, out_dir=tmp_path, progress=False)


def test_compute_above_threshold_allocates_no_square_matrix(tmp_path, monkeypatch):
    m = 3000
    rng = np.random.default_rng(10)
    x = rand_images(rng, m, (16, 16))
    opened = []
    real_open = np.lib.format.open_memmap
    monkeypatch.setattr(np.lib.format, "open_memmap", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    square = m * m * 4                                  # one float32 m x m matrix
    stage.compute(x[:8], k=5, dense_max=1, chunk=4, out_dir=tmp_path, progress=False)  # numba load/compile
    tracemalloc.start()
    try:
        probe = np.zeros(m * m, np.float32)             # the measurement does see numpy allocations
        del probe
        _, probe_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        info = stage.compute(x, k=5, dense_max=m - 1, chunk=64, out_dir=tmp_path, progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert probe_peak >= square
    assert info["dense"] is False
    assert opened == []
    assert not (tmp_path / "dist.npy").exists()
    assert peak < square / 4, f"peak {peak} bytes vs m*m*4 = {square}"
    idx, d = load_knn(tmp_path)
    assert idx.shape == (m, 5)
    rows = np.array([0, 1, 777, m - 1])
    ref = mean_l1(x[rows], x).astype(np.float64)
    ref[np.arange(len(rows)), rows] = np.inf
    assert np.allclose(d[rows], np.sort(ref, 1)[:, :5], rtol=0, atol=1e-7)
    assert np.allclose(np.take_along_axis(ref, idx[rows], 1), d[rows], rtol=0, atol=1e-7)


# -- providers ---------------------------------------------------------------------------------

@pytest.fixture
def corpus_and_dists(tiny_corpus, tmp_path):
    c = tiny_corpus(n_types=4, per_type=10, duplicates=6, seed=3)
    assert len(c.images) < c.n_tokens                   # some tokens share an image
    stage.compute(c.images, k=5, dense_max=10_000, chunk=16, out_dir=tmp_path, progress=False)
    return c, tmp_path


def test_open_distances_picks_matrix_or_on_demand(corpus_and_dists, tmp_path_factory):
    c, folder = corpus_and_dists
    assert isinstance(open_distances(c, folder), MatrixDistances)
    assert isinstance(open_distances(c, None), OnDemandDistances)
    assert isinstance(open_distances(c, tmp_path_factory.mktemp("empty")), OnDemandDistances)


def test_matrix_and_on_demand_agree(corpus_and_dists):
    c, folder = corpus_and_dists
    mat, ond = open_distances(c, folder), open_distances(c, None)
    ii = c.image_index()
    shared = np.flatnonzero(np.bincount(ii)[ii] > 1)
    a, b = shared[ii[shared] == ii[shared[0]]][:2]      # two tokens with the same image
    ids = np.array([a, b, 0, 5, 17, a, c.n_tokens - 1])
    cm, co = mat.columns(ids), ond.columns(ids)
    assert cm.shape == co.shape == (c.n_tokens, len(ids))
    assert cm.dtype == co.dtype == np.float32
    assert np.allclose(cm, co, rtol=F16_RTOL, atol=1e-7)
    exact = naive_mean(c.token_images(), c.token_images()[ids])
    assert np.abs(co - exact).max() < 1e-6
    assert np.array_equal(co[:, 0], co[:, 1]) and np.array_equal(cm[:, 0], cm[:, 1])
    assert co[a, 1] == 0 and co[b, 0] == 0 and cm[a, 1] == 0
    pm, po = mat.pairs([1, 2, 3], [a, 4]), ond.pairs([1, 2, 3], [a, 4])
    assert pm.shape == (3, 2) and np.allclose(pm, po, rtol=F16_RTOL, atol=1e-7)
    assert mat.n_tokens == ond.n_tokens == c.n_tokens


def test_on_demand_caches_columns(tiny_corpus):
    c = tiny_corpus(n_types=3, per_type=6, duplicates=4, seed=4)
    ond = OnDemandDistances(c.images, c.image_index(), cache_columns=6)
    ii = c.image_index()
    ids = np.array([0, 1, 2])
    first = ond.columns(ids)
    assert ond.computed == len(set(ii[ids].tolist()))
    n0 = ond.computed
    again = ond.columns(ids)
    assert ond.computed == n0 and np.array_equal(first, again)
    # another token with one of the same images: nothing new either
    twin = [t for t in range(c.n_tokens) if ii[t] == ii[0] and t != 0]
    if twin:
        ond.columns([twin[0]])
        assert ond.computed == n0
    # a request with repeats computes each distinct image once
    ond2 = OnDemandDistances(c.images, ii, cache_columns=100)
    ond2.columns([3, 3, 3, 4])
    assert ond2.computed == len({int(ii[3]), int(ii[4])})
    # LRU eviction: filling past the capacity drops the oldest; asking again recomputes it
    others = [t for t in range(c.n_tokens) if ii[t] not in set(ii[ids].tolist())]
    distinct_others = list({int(ii[t]): t for t in others}.values())[:6]
    ond.columns(distinct_others)
    assert len(ond.cache) <= 6
    before = ond.computed
    ond.columns([0])
    assert ond.computed == before + 1
    # a request bigger than the cache is still answered in full
    big = ond.columns(np.arange(c.n_tokens))
    assert big.shape == (c.n_tokens, c.n_tokens)
    assert np.allclose(big, mean_l1(c.token_images(), c.token_images()))


# -- CLI ---------------------------------------------------------------------------------------

def test_stage_cli_missing_corpus(tmp_path, run_cli):
    out = tmp_path / "dist"
    r = run_cli("signclust.distances.stage", "nope", "--corpus-dir", tmp_path / "nope", "--out", out)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "no corpus 'nope'" in lines[0]
    assert not out.exists()


def test_stage_cli_writes_outputs(tiny, saved_corpus, tmp_path, run_cli):
    folder = saved_corpus(tiny, "tiny")
    out = tmp_path / "dist" / "tiny"
    r = run_cli("signclust.distances.stage", "tiny", "--corpus-dir", folder, "--out", out)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["dist.npy", "knn.npz", "meta.json"]
    meta = read_meta(out)
    assert meta["images"] == len(tiny.images) and meta["dense"] is True
    dist = np.load(out / "dist.npy")
    assert np.allclose(dist, mean_l1(tiny.images, tiny.images), rtol=F16_RTOL, atol=1e-7)
    assert [p.name for p in out.parent.iterdir()] == ["tiny"]          # no temporary folder left


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "AMD64"), reason="psadbw is an x86 instruction")
def test_grey_kernel_compiles_to_a_sum_of_absolute_differences_instruction():
    # the int32 casts in _l1_sums_sad are what lets LLVM see a byte SAD reduction; int64
    # arithmetic (numba's default) compiles to 4-lane code at a third of the speed
    import numba
    kernel = numba.njit(parallel=True, fastmath=True)(l1._l1_sums_sad.py_func)   # uncached: inspectable
    a, b = np.zeros((2, 64), np.uint8), np.zeros((3, 64), np.uint8)
    kernel(a, b, np.empty((2, 3), np.int64))
    asm = "\n".join(kernel.inspect_asm().values())
    assert "psadbw" in asm
