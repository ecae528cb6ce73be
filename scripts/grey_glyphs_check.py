"""lm with grey-level glyphs: a what-if for a future default (issue 9's generality, a diagnosis).

    .venv/bin/python scripts/grey_glyphs_check.py            # -> reports/grey_glyphs_check.md
    .venv/bin/python scripts/grey_glyphs_check.py --corpora digits --seeds 0 --out /tmp/grey.md

``normalize_glyphs`` binarises each image at a fixed ink level before cropping (data/glyphs.py).
``scripts/glyph_normalisation_study.py`` finds that binarisation is most of what Ward on the glyphs
loses against Ward on the pixels of scikit-learn's 8x8 digits. This script asks what ``lm`` itself
would do without it: it fits ``runs.lm`` as configured, and again with its normalised glyphs (its
glyph block and its encoder's input; the stroke skeleton block is drawn from the binarised ink
either way) replaced by ``grey_glyphs`` -- the same bounding square, resize and blur, filled with
the image's own grey levels -- and nothing else changed. ``--saturate S`` draws every grey level at
or above S as full ink (``min(1, v / S)``): soft edges and faint strokes keep their levels, the
strength and texture of solid ink do not.

The swap is made here, for the duration of the second fit, by replacing the name
``normalize_glyphs`` inside ``models/lm_clusterer.py``; no stage, default or committed fit reads
it. Corpora as in ``glyph_normalisation_study.py``: the real digits, the held-out scripts and the
suite's scripts drawn in unseen typefaces (``@unseen``), and suite corpora (scored, so a change
chosen from them would be tuned on them: they show what it would cost, not whether to make it).
The labels are used only to score.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from glyph_normalisation_study import build, grey_glyphs  # noqa: E402
from heldout_scripts import encoder_dtype, fit_row  # noqa: E402
from pair_model_calibration import report_path  # noqa: E402
from signclust.config import load_params  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models import lm_clusterer  # noqa: E402

DEFAULT_CORPORA = ("digits", "mnist_test", "latin_hands@unseen", "cyrillic_hands@unseen", "armenian_hands",
                   "armenian_handwriting", "ethiopic_hands", "ethiopic_handwriting", "latin_hands",
                   "japanese_hands", "greek_handwriting", "cypriot")
VARIANTS = ("binary", "grey")


def grey_uint8(images: np.ndarray, saturate: float | None = None) -> np.ndarray:
    """``grey_glyphs`` as ``normalize_glyphs`` returns its glyphs: uint8 (m, 32, 32). No other option of
    ``normalize_glyphs`` is taken: a call in lm that passed one would fail here rather than be ignored."""
    return np.clip(np.rint(grey_glyphs(images, saturate=saturate) * 255.0), 0, 255).astype(np.uint8)


@contextlib.contextmanager
def lm_glyphs(variant: str, saturate: float | None = None):
    """Within the block, ``lm`` reads its glyphs binarised (``binary``: as configured) or ``grey`` (levels at or
    above ``saturate`` as full ink)."""
    original = lm_clusterer.normalize_glyphs
    lm_clusterer.normalize_glyphs = original if variant == "binary" else functools.partial(grey_uint8,
                                                                                           saturate=saturate)
    try:
        yield
    finally:
        lm_clusterer.normalize_glyphs = original


def markdown(table: dict, seeds: list[int], dtype: str, saturate: float | None = None) -> str:
    lines = ["# lm with grey-level glyphs", "",
             f"Written by `scripts/grey_glyphs_check.py` (seeds {', '.join(map(str, seeds))}; mean ± std). `runs.lm` "
             "as configured (*binary*: `normalize_glyphs`, binarised at the ink threshold) and with its normalised "
             "glyphs (the glyph block and the encoder's input; the skeleton block as configured) filled with the "
             "image's own grey levels instead (*grey*: `grey_glyphs` of `scripts/glyph_normalisation_study.py`), "
             + (f"every level at or above {saturate:g} drawn as full ink (`--saturate`); " if saturate else "")
             + "nothing else changed; never given K. `@unseen`: drawn in "
             "typefaces no suite corpus uses. Corpora of the scored suite show what the change would cost there, "
             "not whether to make it. "
             f"The encoder trained in {dtype} here (`encoder_precision` as configured); fit times are this machine's.", "",
             "| corpus | K true | binary V | K found | grey V | K found | Δ V | s / fit (binary, grey) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in table.items():
        v = {x: np.array([f[0] for f in row[x]]) for x in VARIANTS}
        k = {x: float(np.mean([f[1] for f in row[x]])) for x in VARIANTS}
        s = {x: float(np.mean([f[2] for f in row[x]])) for x in VARIANTS}
        lines.append(f"| {name} | {row['k_true']} | {v['binary'].mean():.3f} ± {v['binary'].std():.3f} | {k['binary']:.0f} | "
                     f"{v['grey'].mean():.3f} ± {v['grey'].std():.3f} | {k['grey']:.0f} | "
                     f"{v['grey'].mean() - v['binary'].mean():+.3f} | {s['binary']:.0f}, {s['grey']:.0f} |")
    return "\n".join(lines) + "\n"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", default=list(DEFAULT_CORPORA))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--saturate", type=float, metavar="S",
                    help="grey levels at or above S (in (0, 1]) drawn as full ink (default: none)")
    ap.add_argument("--out", help="default reports/grey_glyphs_check.md")
    args = ap.parse_args(argv)
    out = report_path(args.out, "grey_glyphs_check.md", ("--corpora", "--seeds", "--saturate"),
                      list(args.corpora) != list(DEFAULT_CORPORA) or list(args.seeds) != [0]
                      or args.saturate is not None)
    if args.saturate is not None and not 0 < args.saturate <= 1:
        raise UserError(f"--saturate {args.saturate:g}: expected a grey level in (0, 1]")
    params = load_params()
    corpora = {name: build(name, params) for name in args.corpora}     # a bad name fails before any fit
    table: dict = {}
    for name, corpus in corpora.items():
        table[name] = {"k_true": corpus.counts()["types"]}
        for variant in VARIANTS:
            with lm_glyphs(variant, args.saturate):
                table[name][variant] = [fit_row("lm", corpus, s, params) for s in args.seeds]
        print(f"{name}: " + ", ".join(f"{x} V {np.mean([f[0] for f in table[name][x]]):.3f} "
                                      f"K {np.mean([f[1] for f in table[name][x]]):.0f}" for x in VARIANTS), flush=True)
    text = markdown(table, args.seeds, encoder_dtype(), args.saturate)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
