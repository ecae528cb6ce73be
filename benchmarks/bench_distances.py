"""Distance throughput: our exact L1 kernels vs scipy cdist(cityblock) and faiss-cpu brute-force L1.

    .venv/bin/python benchmarks/bench_distances.py [--n 3000] [--sub 400] [--threads T]

Data: the first N rendered Linear A glyphs (data/corpora/lineara/images.npy) when the corpus is
built, else random uint8 images. Ours runs on all N x N pairs; the slower libraries on a row
subset (sub x N pairs) and their throughput is scaled from that. All three are checked to agree
on the subset. The binary path (distances/hamming.py: the same N glyphs binarised and normalised,
bit-packed, popcount) runs on all N x N pairs too, against faiss-cpu's own Hamming kernel, and is
checked equal to the grey kernel on the 0/255 glyphs. Also times the full distance stage (dense
matrix + kNN graph) for N images. Targets (issue 12), as ratios measured in this one run:
grey L1 >= 3x faiss L1, binary >= 20x faiss L1 for the same glyph count.
No assertions on time: this prints numbers.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def best_of(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000, help="number of images (default 3000)")
    ap.add_argument("--sub", type=int, default=400, help="query rows for scipy/faiss (default 400)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("SIGNCLUST_THREADS", 0)) or os.cpu_count(),
                    help="threads for numba and faiss (default: SIGNCLUST_THREADS or all cores)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--k", type=int, default=15, help="kNN size for the stage timing")
    args = ap.parse_args(argv)
    os.environ["SIGNCLUST_THREADS"] = str(args.threads)
    os.environ.setdefault("SIGNCLUST_MLFLOW", "0")
    # faiss's OpenMP threads otherwise spin for a while after each call and slow whatever runs next
    # (measured: our popcount kernel 10x slower right after a faiss call)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import faiss
    import numba
    import numpy as np
    from scipy.spatial.distance import cdist

    from signclust.distances.hamming import binarised_glyphs, hamming_sums, pack_bits
    from signclust.distances.l1 import l1_sums, mean_l1
    from signclust.distances.stage import compute

    numba.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)

    path = REPO / "data" / "corpora" / "lineara" / "images.npy"
    rng = np.random.default_rng(0)
    if path.exists():
        pool = np.load(path)
        take = np.arange(args.n) if args.n <= len(pool) else rng.integers(0, len(pool), args.n)
        images, source = np.ascontiguousarray(pool[take]), f"lineara glyphs ({path.relative_to(REPO)})"
        if args.n > len(pool):
            source += f", {len(pool)} distinct, sampled with repeats"
    else:
        images, source = rng.integers(0, 256, (args.n, 48, 48), dtype=np.uint8), "random uint8 (corpus not built)"
    n, dim = len(images), int(np.prod(images.shape[1:]))
    sub = min(args.sub, n)
    flat_u8 = images.reshape(n, dim)
    x64 = flat_u8.astype(np.float64)
    x32 = flat_u8.astype(np.float32)
    print(f"data: {n} images of {images.shape[1]}x{images.shape[2]} ({dim} px) from {source}")
    print(f"threads: {args.threads} (numba {numba.get_num_threads()}, faiss {faiss.omp_get_max_threads()}), "
          f"cores: {os.cpu_count()}; subset for scipy/faiss: {sub} x {n} pairs")

    l1_sums(images[:2], images[:2])                                   # compile / load the kernel cache
    rows = []
    t_ours, full = best_of(lambda: l1_sums(images, images), args.repeat)
    rows.append(("ours l1_sums (uint8, exact int)", n * n, t_ours))
    t_mean, _ = best_of(lambda: mean_l1(images, images), args.repeat)
    rows.append(("ours mean_l1 (-> float32 in [0,1])", n * n, t_mean))
    t_scipy, d_scipy = best_of(lambda: cdist(x64[:sub], x64, metric="cityblock"), max(1, args.repeat - 1))
    rows.append(("scipy cdist cityblock (float64)", sub * n, t_scipy))
    t_faiss, d_faiss = best_of(lambda: faiss.pairwise_distances(x32[:sub], x32, metric=faiss.METRIC_L1),
                               max(1, args.repeat - 1))
    rows.append(("faiss pairwise_distances L1 (float32)", sub * n, t_faiss))

    glyphs = binarised_glyphs(images)
    bits = pack_bits(glyphs)
    hamming_sums(bits[:2], bits[:2])
    # the binary kernels take milliseconds: best of more repeats against the VM's scheduling noise
    t_ham, ham = best_of(lambda: hamming_sums(bits, bits), 10 * args.repeat)
    rows.append((f"ours hamming_sums ({bits.shape[1]} x 64 bits)", n * n, t_ham))
    packed = np.ascontiguousarray(bits).view(np.uint8)
    faiss_ham = np.empty((n, n), np.int32)
    t_fham, _ = best_of(lambda: faiss.hammings(faiss.swig_ptr(packed), faiss.swig_ptr(packed), n, n,
                                               packed.shape[1], faiss.swig_ptr(faiss_ham)), 10 * args.repeat)
    rows.append(("faiss hammings (same bits)", n * n, t_fham))
    agree_ham = bool(np.array_equal(ham, faiss_ham)) and bool(np.array_equal(ham[:sub] * 255,
                                                                              l1_sums(glyphs[:sub], glyphs)))

    # agreement on the subset (sums of |a-b| over uint8 are integers; float64/float32 hold them exactly)
    ours_sub = full[:sub]
    agree_scipy = bool(np.array_equal(ours_sub, d_scipy.astype(np.int64))) and bool(np.all(d_scipy == np.rint(d_scipy)))
    agree_faiss = float(np.abs(ours_sub - d_faiss.astype(np.float64)).max())

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        info = compute(images, k=args.k, dense_max=10**9, chunk=512, out_dir=Path(tmp), progress=False)
        t_stage = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        compute(images, k=args.k, dense_max=0, chunk=512, out_dir=Path(tmp), progress=False)
        t_stage_knn = time.perf_counter() - t0

    print()
    print(f"{'method':40s} {'pairs':>12s} {'seconds':>9s} {'Mpairs/s':>9s} {'GB/s px':>8s}")
    rate = {}
    for name, pairs, sec in rows:
        rate[name] = pairs / sec
        print(f"{name:40s} {pairs:12d} {sec:9.3f} {pairs / sec / 1e6:9.2f} {pairs * dim / sec / 1e9:8.1f}")
    ours = rate[rows[0][0]]
    print()
    faiss_l1 = rate[rows[3][0]]
    print(f"ratio ours/scipy: {ours / rate[rows[2][0]]:8.1f}x")
    print(f"ratio ours/faiss: {ours / faiss_l1:8.1f}x   (target >= 3x)")
    print(f"ratio binary (hamming) / faiss L1: {rate[rows[4][0]] / faiss_l1:8.1f}x   (target >= 20x; "
          f"{images.shape[1]}x{images.shape[2]} grey vs {glyphs.shape[1]}x{glyphs.shape[2]} binary glyphs)")
    print(f"ratio binary (hamming) / faiss hammings: {rate[rows[4][0]] / rate[rows[5][0]]:8.1f}x")
    print(f"agreement on {sub}x{n}: scipy exact={agree_scipy}, faiss max |diff|={agree_faiss:g}; "
          f"hamming = faiss hammings and = grey kernel on the 0/255 glyphs: {agree_ham}")
    print()
    print(f"distance stage, N={n}, k={info['k']}, dense (dist.npy float16 + kNN): {t_stage:7.2f} s "
          f"({n * n / t_stage / 1e6:.1f} Mpairs/s)")
    print(f"distance stage, N={n}, k={info['k']}, kNN only (above dense threshold):  {t_stage_knn:7.2f} s "
          f"({n * n / t_stage_knn / 1e6:.1f} Mpairs/s)")
    if not agree_scipy or agree_faiss > 0.5 or not agree_ham:
        print("DISAGREEMENT between implementations", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
