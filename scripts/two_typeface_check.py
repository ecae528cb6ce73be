"""Our clusterer on free-variation corpora of two typefaces instead of three (issue 9: "generality").

    .venv/bin/python scripts/two_typeface_check.py                 # -> reports/two_typeface_check.md
    .venv/bin/python scripts/two_typeface_check.py --scripts latin japanese --seeds 0 --out /tmp/t.md
    .venv/bin/python scripts/two_typeface_check.py --scripts latin greek cyrillic \
        --typefaces DejaVuSansMono.ttf NotoSerifDisplay-Italic.ttf DejaVuSans-Bold.ttf --out reports/x.md

The suite's ``free`` corpora mix the two or three typefaces of ``prepare.suite.fonts.<script>`` at
random within every text. A user's corpus of mixed print (issue 9's held-out Latin and Japanese
corpora) may have two. This builds ``<script>_free`` in memory (the suite's builder, data/suite.py)
once for every pair of the script's configured typefaces, fits the configured rows (``runs.<row>``,
as the train stage configures them: ours, ``report.suite.ours``, never given K; ``ward_pixels`` given K true) and scores
them against the suite's targets for the free regime: native V, the margin over ``ward_pixels``,
K found against K true. The default scripts are the suite's and the two held-out ones
(scripts/heldout_scripts.py); no default of ``lm`` was chosen on a two-typeface corpus. With
``--typefaces``, the pairs are drawn from those font files instead (Debian's, as the builder finds
them; each must draw every sign of the script): typefaces that no corpus of the suite uses. The
labels are used only to score.
"""
from __future__ import annotations

import argparse
import copy
import itertools
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from heldout_scripts import HELDOUT, check_typefaces, fit_row, target_rows  # noqa: E402  (the held-out scripts, ...)
from pair_model_calibration import report_path  # noqa: E402  (--out, else reports/<name>)
from signclust.config import load_params  # noqa: E402
from signclust.data import suite  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402

def font_pairs(fonts: list[str]) -> list[tuple[str, str]]:
    """Every pair of a script's configured typefaces, in their order in params.yaml."""
    return list(itertools.combinations(fonts, 2))


def with_fonts(prepare: dict, script: str, fonts: tuple[str, ...]) -> dict:
    """A copy of params.yaml's ``prepare`` section whose ``script`` draws only ``fonts``."""
    out = copy.deepcopy(prepare)
    out["suite"]["fonts"][script] = list(fonts)
    return out


def markdown(rows: list[dict], seeds: list[int], targets: dict, free_v: float, ours: str = "lm",
             typefaces: list[str] | None = None) -> str:
    ref = targets["margin_over"]
    given = (f" The typefaces are drawn from {', '.join(f'`{f}`' for f in typefaces)} (`--typefaces`), not from "
             "`prepare.suite.fonts`." if typefaces else "")
    lines = ["# Free variation between two typefaces: the suite's free targets, one pair at a time", "",
             f"Written by `scripts/two_typeface_check.py` (seeds {', '.join(map(str, seeds))}; mean ± std). Each "
             "corpus is `<script>_free` built in memory by the suite's builder (`data/suite.py`) with only the two "
             "typefaces named (`prepare.suite.fonts.<script>` holds two or three), mixed at random within every "
             f"text. `{ours}` is never given K; `{ref}` is given K true. Scripts marked † are held out of the "
             "scored suite and of every default (scripts/heldout_scripts.py); ‡: the script has two typefaces configured, so "
             "the corpus is its free corpus as the builder makes it (the suite's, or the held-out one)." + given, "",
             f"| corpus | typefaces | K true | `{ours}` V | K found (error) | `{ref}` V | margin |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        k = float(np.mean(r["k"]))
        err = (k - r["k_true"]) / r["k_true"]
        mark = (" †" if r["script"] in HELDOUT else "") + (" ‡" if r.get("all_fonts") else "")
        lines.append(f"| {r['name']}{mark} | {' + '.join(Path(f).stem for f in r['fonts'])} | {r['k_true']} | "
                     f"{np.mean(r['v']):.3f} ± {np.std(r['v']):.3f} | {k:.0f} ({err:+.0%}) | {r['ref_v']:.3f} | "
                     f"{np.mean(r['v']) - r['ref_v']:+.3f} |")
    v = [(r["name"], float(np.mean(r["v"]))) for r in rows]
    low = [f"{n} ({x:.3f})" for n, x in v if x < free_v]
    margins = [(r["name"], float(np.mean(r["v"])) - r["ref_v"]) for r in rows]
    kerr = [(r["name"], (float(np.mean(r["k"])) - r["k_true"]) / r["k_true"]) for r in rows]
    lines += ["", "## Targets (the suite's, for the free regime)", "",
              "| target | measured | misses |", "|---|---|---|",
              f"| native V ≥ {free_v} | {len(v) - len(low)}/{len(v)} corpora; lowest {min(x for _, x in v):.3f} | "
              f"{', '.join(low) or '–'} |"] + target_rows(margins, kerr, targets)
    return "\n".join(lines) + "\n"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scripts", nargs="+", help="default: the suite's scripts, then armenian and ethiopic")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--typefaces", nargs="+", metavar="FONT", help="font files to pair instead of each script's "
                    "prepare.suite.fonts (at least two)")
    ap.add_argument("--out", help="default reports/two_typeface_check.md")
    args = ap.parse_args(argv)
    params = load_params()
    scripts = args.scripts or list(params["prepare"]["suite"]["scripts"]) + HELDOUT
    unknown = [s for s in scripts if s not in suite.SCRIPTS]
    if unknown:
        raise UserError(f"{', '.join(unknown)}: not a script the suite builder knows ({', '.join(suite.SCRIPTS)})")
    check_typefaces(args.typefaces)
    out = report_path(args.out, "two_typeface_check.md", ("--scripts", "--seeds", "--typefaces"),
                      bool(args.scripts) or args.seeds != [0, 1, 2] or bool(args.typefaces))
    targets = params["report"]["suite"]["targets"]
    free_v, ours, ref = targets["free_v"], params["report"]["suite"]["ours"], targets["margin_over"]
    # every corpus built before any fit: a font that lacks a sign fails now, not after the others' fits
    corpora = [(script, pair, suite.build(f"{script}_free", with_fonts(params["prepare"], script, pair)))
               for script in scripts
               for pair in font_pairs(args.typefaces or params["prepare"]["suite"]["fonts"][script])]
    rows = []
    for script, pair, corpus in corpora:
        fits = [fit_row(ours, corpus, s, params) for s in args.seeds]
        ref_v = fit_row(ref, corpus, args.seeds[0], params)[0]          # Ward at K true: no seed enters it
        rows.append({"name": f"{script}_free", "script": script, "fonts": pair, "k_true": corpus.counts()["types"],
                     "v": [x[0] for x in fits], "k": [x[1] for x in fits], "ref_v": ref_v,
                     "all_fonts": not args.typefaces and len(params["prepare"]["suite"]["fonts"][script]) == 2})
        print(f"{script}_free {' + '.join(Path(f).stem for f in pair)}: {ours} V {np.mean(rows[-1]['v']):.3f} "
              f"K {np.mean(rows[-1]['k']):.0f} of {rows[-1]['k_true']}, {ref} V {ref_v:.3f}", flush=True)
    text = markdown(rows, args.seeds, targets, free_v, ours, args.typefaces)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
