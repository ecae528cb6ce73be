"""Stage `distances`: the image distance matrix (below a size threshold) and always a kNN graph.

    python -m signclust.distances.stage cypriot

Outputs in data/distances/<corpus>/: dist.npy (float16, m x m, only when
m <= dense_max_images; open it memory-mapped), knn.npz (indices, distances: k
nearest other images of every image) and meta.json.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from signclust import tracking
from signclust.config import REPO_ROOT, section
from signclust.data.corpus import Corpus
from signclust.distances.l1 import iter_row_blocks, knn_from_block
from signclust.distances.metrics import prepare
from signclust.errors import UserError, cli_main
from signclust.io import atomic_dir, write_json


def compute(images: np.ndarray, k: int, dense_max: int, chunk: int, out_dir: Path,
            progress: bool = True, metric: str = "l1") -> dict:
    m = len(images)
    if k < 1:
        raise UserError("distances.k must be at least 1")
    rows, between = prepare(images, metric)
    dense = m <= dense_max
    matrix = np.lib.format.open_memmap(out_dir / "dist.npy", mode="w+", dtype=np.float16,
                                       shape=(m, m)) if dense else None
    k_eff = min(k, m - 1)
    knn_idx = np.empty((m, k_eff), dtype=np.int64)
    knn_dist = np.empty((m, k_eff), dtype=np.float32)
    with tqdm(total=m, desc="distances", unit="img", disable=not progress, mininterval=1) as bar:
        for start, stop, block in iter_row_blocks(rows, chunk, between):
            if dense:
                matrix[start:stop] = block.astype(np.float16)
            knn_idx[start:stop], knn_dist[start:stop] = knn_from_block(block, start, k_eff)
            bar.update(stop - start)
    if dense:
        matrix.flush()
        del matrix
    np.savez(out_dir / "knn.npz", indices=knn_idx, distances=knn_dist)
    info = {"images": m, "dense": dense, "k": k_eff, "pixels": int(np.prod(images.shape[1:]))}
    return info if metric == "l1" else {**info, "metric": metric}


OUT_FILES = {"dist.npy", "knn.npz", "meta.json"}


def check_out(out) -> Path:
    """A new, empty or earlier distances folder (replaced atomically); never anything else. Stale
    temporary folders of a killed run (``.<out>.<pid>.<random>.tmp``) are removed when it is written."""
    raw = Path(out)
    if raw.name in ("", ".", ".."):
        raise UserError(f"output folder '{out}' must name a folder (e.g. data/distances/mine)")
    out = raw.absolute()
    if out.exists() and (not out.is_dir() or out.is_symlink()):
        raise UserError(f"output path {out} exists and is not a folder")
    if out.is_dir() and not set(os.listdir(out)) <= OUT_FILES:
        raise UserError(f"output folder {out} holds files a distances stage did not write; choose another")
    return out


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--corpus-dir", help="default data/corpora/<corpus>")
    ap.add_argument("--out", help="default data/distances/<corpus>")
    args = ap.parse_args(argv)
    cfg = section("distances")
    corpus = Corpus.load(args.corpus_dir or REPO_ROOT / "data" / "corpora" / args.corpus, mmap=True)
    out = check_out(args.out or REPO_ROOT / "data" / "distances" / args.corpus)
    t0 = time.time()
    with atomic_dir(out) as tmp:
        info = compute(np.asarray(corpus.images), int(cfg["k"]), int(cfg["dense_max_images"]),
                       int(cfg["chunk_rows"]), tmp, metric=str(cfg["metric"]))
        # meta.json is a dependency of every train stage: no wall time in it (MLflow has it)
        write_json(tmp / "meta.json", info)
    seconds = time.time() - t0
    print(f"{args.corpus}: {info['images']} images, dense={info['dense']}, k={info['k']}, "
          f"{seconds:.1f}s -> {out}")
    with tracking.run("distances", args.corpus) as run:
        run.log_params({"corpus": args.corpus, **cfg})
        run.log_metrics({**info, "seconds": seconds, "pairs_per_second": info["images"] ** 2 / max(seconds, 1e-9)})


if __name__ == "__main__":
    main()
