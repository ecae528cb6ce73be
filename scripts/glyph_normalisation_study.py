"""What the glyph normalisation keeps and loses: Ward at K true on each step's output (a diagnosis).

    .venv/bin/python scripts/glyph_normalisation_study.py     # -> reports/glyph_normalisation_study.md
    .venv/bin/python scripts/glyph_normalisation_study.py --corpora digits latin_hands --out /tmp/g.md

``normalize_glyphs`` (data/glyphs.py) is the visual input of ``lm`` and of ``ward_glyphs``: binarise
at a fixed ink threshold, drop specks, crop to the ink's bounding square, resize to 28 px in a
32 px frame, blur. On real handwritten digits Ward on it scores below Ward on the raw pixels
(docs/results.md "Real handwriting (digits)": 0.800 against 0.853 on scikit-learn's digits, 0.656 against
0.689 on MNIST), and on a hand-drawn high-contrast italic (the unseen typefaces' hands corpora)
``lm`` keeps frequent signs in two or three types. This script takes the normalisation apart: for
each corpus it clusters, with Ward at K true (the classical reference of the suite's targets), the
tokens' images after each variant below, every one both as raw features and as PCA-50 (``ward_pixels``
clusters raw pixels, ``ward_glyphs`` PCA-50 of the glyphs, so their rows differ in two ways):

- ``pixels``: the images as drawn (``ward_pixels`` / ``ward``);
- ``glyphs``: ``normalize_glyphs`` as configured (``ward_glyphs``);
- ``grey``: the same crop, resize and blur of the image's own grey levels inside the ink's bounding
  square (no binarisation);
- ``grey_saturated``: ``grey`` with every level at or above half strength drawn as full ink (``min(1, 2v)``):
  soft edges and faint hairlines keep their levels, the texture and strength of solid ink do not;
- ``threshold_0.1`` / ``threshold_0.5``: binarised at another ink level;
- ``no_despeckle``: no blob dropped (``min_blob`` 1);
- ``no_blur``: no blur after the resize;
- ``no_crop``: binarised, despeckled and blurred but the whole frame resized (position and size kept);
- ``skeleton``: the stroke skeleton (``skeleton_glyphs``), lm's second block;
- ``lm_blocks``: lm's glyph features before its encoder (``glyph_features``: PCA of [glyph, skeleton]).

Corpora: MNIST test digits and scikit-learn's digits (``scripts/real_handwriting_check.py``), the
latin and cyrillic hands corpora drawn in the typefaces no suite corpus uses (the
``--typefaces`` of ``scripts/heldout_scripts.py``), and suite corpora as built. Nothing here is read
by any stage or default; the labels are used only to score. Ward is deterministic, so one run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from pair_model_calibration import load_corpus, report_path  # noqa: E402
from real_handwriting_check import build as build_digits  # noqa: E402
from signclust.config import load_params  # noqa: E402
from signclust.data import glyphs as g  # noqa: E402
from signclust.data import suite  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models import lm_clusterer as lm  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.train import run_config  # noqa: E402

UNSEEN_TYPEFACES = ("DejaVuSansMono.ttf", "NotoSerifDisplay-Italic.ttf", "DejaVuSans-Bold.ttf")
DEFAULT_CORPORA = ("mnist_test", "digits", "latin_hands@unseen", "cyrillic_hands@unseen",
                   "latin_hands", "greek_handwriting", "japanese_hands", "cypriot")
VARIANTS = ("pixels", "glyphs", "grey", "grey_saturated", "threshold_0.1", "threshold_0.5", "no_despeckle", "no_blur",
            "no_crop", "skeleton", "lm_blocks")
SIZE, PAD = 32, 2


def grey_glyphs(images: np.ndarray, threshold: float = 0.3, min_blob: int = 6, blur: float = 1.0,
                saturate: float | None = None) -> np.ndarray:
    """uint8 (m, H, W) -> float32 (m, 32, 32): ``normalize_glyphs``'s bounding square (of the despeckled
    ink) and geometry, filled with the image's own grey levels instead of the binary ink; with
    ``saturate``, every level at or above it drawn as full ink (``min(1, v / saturate)``)."""
    masks = g._ink_masks(images, threshold, min_blob)
    out = np.zeros((len(images), SIZE, SIZE), dtype=np.float32)
    for i, (img, b) in enumerate(zip(images, masks)):
        rows, cols = np.flatnonzero(b.any(1)), np.flatnonzero(b.any(0))
        if not len(rows):
            continue
        crop = img[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].astype(np.float32) / 255.0
        if saturate is not None:
            crop = np.minimum(crop / np.float32(saturate), np.float32(1.0))
        side = max(crop.shape)
        square = np.zeros((side, side), dtype=np.float32)
        top, left = (side - crop.shape[0]) // 2, (side - crop.shape[1]) // 2
        square[top:top + crop.shape[0], left:left + crop.shape[1]] = crop
        out[i, PAD:SIZE - PAD, PAD:SIZE - PAD] = g._resize(square[None], SIZE - 2 * PAD, "area")[0]
    return g._blur(out, blur) if blur > 0 else out


def uncropped_glyphs(images: np.ndarray, threshold: float = 0.3, min_blob: int = 6, blur: float = 1.0) -> np.ndarray:
    """uint8 (m, H, W) -> float32 (m, 32, 32): binarised and despeckled as ``normalize_glyphs``, the whole
    frame resized into the same 28 px inner square (the ink's position and size kept)."""
    b = g._ink_masks(images, threshold, min_blob).astype(np.float32)
    side = max(b.shape[1:])
    frame = np.zeros((len(b), side, side), dtype=np.float32)
    frame[:, :b.shape[1], :b.shape[2]] = b
    out = np.zeros((len(b), SIZE, SIZE), dtype=np.float32)
    out[:, PAD:SIZE - PAD, PAD:SIZE - PAD] = g._resize(frame, SIZE - 2 * PAD, "area")
    return g._blur(out, blur) if blur > 0 else out


def variant_images(images: np.ndarray, variant: str, seed: int) -> np.ndarray:
    """uint8 (m, H, W) distinct images -> float32 (m, d): the images after ``variant`` (VARIANTS)."""
    m = len(images)
    if variant == "pixels":
        x = images.astype(np.float32) / 255.0
    elif variant == "glyphs":
        x = g.normalize_glyphs(images).astype(np.float32) / 255.0
    elif variant == "grey":
        x = grey_glyphs(images)
    elif variant == "grey_saturated":
        x = grey_glyphs(images, saturate=0.5)
    elif variant.startswith("threshold_"):
        x = g.normalize_glyphs(images, threshold=float(variant.split("_")[1])).astype(np.float32) / 255.0
    elif variant == "no_despeckle":
        x = g.normalize_glyphs(images, min_blob=1).astype(np.float32) / 255.0
    elif variant == "no_blur":
        x = g.normalize_glyphs(images, blur=0.0).astype(np.float32) / 255.0
    elif variant == "no_crop":
        x = uncropped_glyphs(images)
    elif variant == "skeleton":
        x = g.skeleton_glyphs(images)
    elif variant == "lm_blocks":
        _, cfg, _ = run_config("lm", load_params())
        return lm.glyph_features(images, get_clusterer("lm", **cfg).cfg, seed)
    else:
        raise UserError(f"{variant}: unknown variant (known: {', '.join(VARIANTS)})")
    return x.reshape(m, -1)


def ward_v(x: np.ndarray, corpus: Corpus, pca: bool, seed: int) -> float:
    """V-measure of Ward at K true on the tokens' features ``x[image_index]`` (PCA-50 first with ``pca``,
    fitted on the tokens, as the ``ward`` row does)."""
    ward = get_clusterer("ward", pca_dim=0)
    x = x[corpus.image_index()]
    if pca and x.shape[1] > 50:
        from sklearn.decomposition import PCA
        x = PCA(50, random_state=seed).fit_transform(x).astype(np.float32)
    k = corpus.counts()["types"]
    labels, _ = ward.cluster(x, FitContext(seed=seed, n_clusters=k, progress=False))
    return float(score(corpus.labels(), labels)["v_measure"])


def build(name: str, params: dict) -> Corpus:
    """A corpus of the study: ``mnist_test`` / ``digits`` (3000 / 1797 real digits in random texts of
    30), ``<script>_<regime>@unseen`` (drawn in UNSEEN_TYPEFACES), or a corpus of data/corpora or the
    suite's builder."""
    if name in ("mnist_test", "digits"):
        return build_digits(name, 3000, 30)
    base, _, tag = name.partition("@")
    if tag:
        if tag != "unseen":
            raise UserError(f"{name}: the only tag is @unseen (the typefaces no suite corpus uses)")
        prep = {**params["prepare"], "suite": {**params["prepare"]["suite"],
                                              "fonts": {**params["prepare"]["suite"]["fonts"]}}}
        script, _, regime = base.rpartition("_")
        if regime == "handwriting" or script not in suite.SCRIPTS:
            raise UserError(f"{name}: @unseen draws a suite script's free or hands corpus in other typefaces")
        prep["suite"]["fonts"][script] = list(UNSEEN_TYPEFACES)
        return suite.build(base, prep)
    return load_corpus(name, params["prepare"])


def markdown(table: dict, seed: int) -> str:
    lines = ["# What the glyph normalisation keeps and loses", "",
             f"Written by `scripts/glyph_normalisation_study.py` (seed {seed} for the PCA). V-measure of Ward at K "
             "true on the tokens' images after each step of `normalize_glyphs` taken away or changed (the "
             "script's docstring defines each); *raw*: the images as features, *PCA*: PCA-50 of them first. "
             "`ward_pixels` is `pixels` raw, `ward_glyphs` is `glyphs` PCA. `@unseen`: drawn in "
             f"{', '.join(f'`{f}`' for f in UNSEEN_TYPEFACES)}, which no suite corpus uses. Bold: the best of "
             "the corpus's row. The labels are used only to score.", "",
             "| corpus | K true | " + " | ".join(f"`{v}`" for v in VARIANTS) + " |",
             "|---|---:|" + "---:|" * len(VARIANTS)]
    for name, row in table.items():
        for mode in ("raw", "PCA"):
            vals = [row[v][mode] for v in VARIANTS]
            best = max(x for x in vals if x is not None)
            cells = ["–" if x is None else (f"**{x:.3f}**" if x == best else f"{x:.3f}") for x in vals]
            lines.append(f"| {name} ({mode}) | {row['k_true']} | " + " | ".join(cells) + " |")
    lines += ["", "`lm_blocks` is lm's PCA to 32 dimensions already; its row shows it once, under PCA.", ""]
    return "\n".join(lines)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", default=list(DEFAULT_CORPORA))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="default reports/glyph_normalisation_study.md")
    args = ap.parse_args(argv)
    out = report_path(args.out, "glyph_normalisation_study.md", ("--corpora", "--seed"),
                      list(args.corpora) != list(DEFAULT_CORPORA) or args.seed != 0)
    params = load_params()
    corpora = {name: build(name, params) for name in args.corpora}     # a bad name fails before any fit
    table: dict = {}
    for name, corpus in corpora.items():
        t0 = time.time()
        table[name] = {"k_true": corpus.counts()["types"]}
        for variant in VARIANTS:
            x = variant_images(corpus.images, variant, args.seed)
            table[name][variant] = {"raw": None if variant == "lm_blocks" else ward_v(x, corpus, False, args.seed),
                                    "PCA": ward_v(x, corpus, True, args.seed)}
        print(f"{name}: " + ", ".join(f"{v} {table[name][v]['PCA']:.3f}" for v in VARIANTS)
              + f" ({time.time() - t0:.0f} s)", flush=True)
    text = markdown(table, args.seed)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
