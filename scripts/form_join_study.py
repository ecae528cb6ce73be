"""lm's form joins on the clean (free-variation) corpora: the two-covariance model's shrinkage and the
forms' occupancy term, on the suite's free corpora and on held-out scripts.

    .venv/bin/python scripts/form_join_study.py --out reports/form_join_study.md
    .venv/bin/python scripts/form_join_study.py --shrinks 0.1 0.3 --seeds 0 --out /tmp/f.md

On a clean corpus lm joins the typeface forms of a sign after its merges (``join_forms``): a
two-covariance model of the forms (``form_shrink``: how far its within-sign covariance is shrunk
towards its diagonal) and, with ``form_occupancy``, how likely each type's count of forms is if every
sign shows its forms in free variation (``FormOccupancy``). This fits ``runs.lm`` with each
(form_occupancy, form_shrink) of the grid, the rest as configured, on every corpus and seed, and
scores K and V. The held-out scripts (``--heldout``, built in memory by the suite's builder as
scripts/heldout_scripts.py builds them) are in no default's choice. The labels are used only to score.
Clean fits take about a second (japanese_free about ten).

``--font-shares 0.7 0.2 0.1``: a what-if of uneven typeface use. Every corpus is then built in memory
with each token's font drawn with these shares (in the order of the script's fonts in params.yaml)
instead of uniformly, as the suite builder does (``SuiteRenderer.free_fonts``, whose rule that a text
mixes at least two fonts is kept); the occupancy's shares are learned from the complete types, so
this shows whether the term still helps where a typeface is rare.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from knn_vote_study import k_error  # noqa: E402
from pair_model_calibration import load_corpus  # noqa: E402  (data/corpora, else the suite builder in memory)
from small_types_study import within  # noqa: E402  (K within ±20% of K true)
from signclust.config import load_params  # noqa: E402
from signclust.data import suite  # noqa: E402
from signclust.errors import cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402

SUITE_FREE = ["latin_free", "greek_free", "cyrillic_free", "georgian_free", "devanagari_free", "japanese_free"]
HELDOUT_FREE = ["armenian_free", "ethiopic_free"]


def fit_grid(corpus, row_cfg: dict, grid: list[dict], seeds: list[int]) -> list[tuple[float, float]]:
    """(mean K, mean V) over ``seeds`` of lm with each setting of ``grid``."""
    gold, out = corpus.labels(), []
    for setting in grid:
        ks, vs = [], []
        for seed in seeds:
            result = get_clusterer("lm", **{**row_cfg, **setting}).fit(
                corpus, FitContext(seed=seed, n_clusters=None, device="cpu", progress=False))
            z = np.asarray(result.labels)
            ks.append(len(np.unique(z)))
            vs.append(score(gold, z)["v_measure"])
        out.append((float(np.mean(ks)), float(np.mean(vs))))
    return out


def name_of(setting: dict) -> str:
    return f"occupancy {'on' if setting['form_occupancy'] else 'off'}, shrink {setting['form_shrink']:g}"


def markdown(table: dict, k_true: dict, grid: list[dict], seeds: list[int], heldout: list[str],
             font_shares: list[float] | None = None) -> str:
    names = [name_of(s) for s in grid]
    drawn = (f" Fonts drawn with shares {', '.join(f'{x:g}' for x in font_shares)} (`--font-shares`), not uniformly: "
             "every corpus built in memory." if font_shares else "")
    lines = ["# lm's form joins on the clean corpora: shrinkage and occupancy", "",
             f"Written by `scripts/form_join_study.py` (seeds {', '.join(map(str, seeds))}; mean K and V over them; "
             "`runs.lm` as configured but for `form_occupancy` and `form_shrink`). Held out (in no default's choice): "
             f"{', '.join(heldout) or 'none'}. Bold K: within ±20% of K true.{drawn}", "",
             "| setting | " + " | ".join(f"{c} K | V" for c in table) + " |",
             "|---|" + "---:|---:|" * len(table)]
    for i, name in enumerate(names):
        cells = [f"`{name}`"]
        for c, rows in table.items():
            k, v = rows[i]
            cells += [f"**{k:g}**" if within(round(k), k_true[c]) else f"{k:g}", f"{v:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"K true: {', '.join(f'{c} {k_true[c]}' for c in table)}.", "",
              "| setting | suite: K within ±20% | median K error | mean V | held out: K within ±20% | mean V | "
              "V change against the first row: suite, largest loss | held out, largest loss |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    parts = {"suite": [c for c in table if c not in heldout], "held out": [c for c in table if c in heldout]}
    for i, name in enumerate(names):
        cells = [f"`{name}`"]
        for label in ("suite", "held out"):
            cs = parts[label]
            if not cs:
                cells += ["–"] * (3 if label == "suite" else 2)
                continue
            hits = sum(within(round(table[c][i][0]), k_true[c]) for c in cs)
            if label == "suite":
                errs = [abs(k_error(table[c][i][0], k_true[c])) for c in cs]
                cells += [f"{hits} of {len(cs)}", f"{np.median(errs):.0%}"]
            else:
                cells.append(f"{hits} of {len(cs)}")
            cells.append(f"{np.mean([table[c][i][1] for c in cs]):.4f}")
        for label in ("suite", "held out"):
            dv = [table[c][i][1] - table[c][0][1] for c in parts[label]]
            cells.append(f"{np.mean(dv):+.4f}, {min(dv):+.4f}" if dv else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""])


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", default=SUITE_FREE, help="default: the suite's free corpora")
    ap.add_argument("--heldout", nargs="*", default=HELDOUT_FREE, help="held-out scripts' free corpora")
    ap.add_argument("--shrinks", nargs="+", type=float, default=[0.1, 0.3, 0.6, 1.0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--font-shares", nargs="+", type=float,
                    help="draw each token's font with these shares (what-if; default: uniform, as the suite)")
    ap.add_argument("--out", required=True, help="the report (a new name for each study)")
    args = ap.parse_args(argv)
    params = load_params()
    row_cfg = {k: v for k, v in params["runs"]["lm"].items() if k != "method"}
    grid = [{"form_occupancy": occ, "form_shrink": s} for occ in (False, True) for s in args.shrinks]
    table, k_true = {}, {}
    for name in args.corpora + args.heldout:
        in_memory = name in args.heldout or args.font_shares
        corpus = (suite.build(name, params["prepare"], font_shares=args.font_shares or None) if in_memory
                  else load_corpus(name, params["prepare"]))
        k_true[name] = len(np.unique(corpus.labels()))
        table[name] = fit_grid(corpus, row_cfg, grid, args.seeds)
        print(name, " ".join(f"{k:g}/{v:.4f}" for k, v in table[name]), flush=True)
    atomic_write_text(Path(args.out), markdown(table, k_true, grid, args.seeds, args.heldout, args.font_shares))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
