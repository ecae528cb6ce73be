"""How strict lm's pair model should be, per corpus, and what its selection keeps (issue 9).

    .venv/bin/python scripts/pair_ratio_sweep.py          # -> reports/pair_ratio_sweep.md
    .venv/bin/python scripts/pair_ratio_sweep.py --corpora latin_hands lineara --out /tmp/s.md

On a noisy corpus lm's pair model is fitted on the within-text nearest neighbours that pass a
ratio test, and ``fit`` makes one fit per ratio in ``pair_ratios`` and keeps the one whose types
best predict their neighbours' symbols (``LMSignClusterer.select``). This script fits every ratio
of ``--ratios`` (wider than ``pair_ratios``) through the same ``LMSignClusterer.candidates`` as ``fit``
and writes, per corpus, K and V-measure at each ratio, the ratio the selection keeps, and the
ratio with the best V (a labelled reference that nothing in lm reads). The labels are used only to
score. Corpora not in ``data/corpora`` (the held-out scripts) are built in memory by the suite's
builder, as scripts/heldout_scripts.py does.

Beside the selection's evidence, each fit gets a *controlled* evidence: the evidence minus the
same evidence with every text's tokens shuffled (``evaluation.label_free.shuffled_evidence``).
Types that follow a hand's style predict the style of the same text's other tokens whether or not
they are neighbours; only what is left after the shuffle is sequential context. The last section
compares the fits each criterion would keep, and the fit of the best V (a labelled oracle), against
K true.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from pair_model_calibration import load_corpus, noisy_corpora, report_path  # noqa: E402  (data/corpora, else the suite builder in memory)
from signclust.config import load_params  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.label_free import CONTROL_SHUFFLES, shuffled_evidence  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.lm_clusterer import coarse_symbols  # noqa: E402
from signclust.models.train import run_config  # noqa: E402

DEFAULT_RATIOS = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def sweep(corpus: Corpus, row_cfg: dict, ratios: list[float], seed: int) -> dict:
    """One corpus: K, V and the selection's evidence at each ratio; the ratio ``fit`` keeps."""
    clusterer = get_clusterer("lm", **row_cfg)
    cfg = clusterer.cfg
    check_ratios(ratios, cfg.pair_ratios)
    ctx = FitContext(seed=seed, progress=False)
    hand = clusterer.hand_images(corpus)                  # the images lm reads, and each token's
    x, texts, clean = clusterer.features(corpus, ctx, hand=hand)
    if clean:
        raise UserError("a clean corpus (its sign images recur exactly): lm fits no pair model there")
    labels = corpus.labels()
    symbols = coarse_symbols(x, cfg.select_symbols, cfg.max_linkage_tokens, seed)   # the selection's symbols
    rows = [{"ratio": ratio, "k": int(result.k_found), "v": float(score(labels, result.labels)["v_measure"]),
             "evidence": evidence,
             "controlled": evidence - shuffled_evidence(result.labels, texts, symbols, cfg.select_beta, seed)}
            for ratio, result, evidence in clusterer.candidates(x, texts, hand[1], ctx, ratios)]
    by_ratio = {r["ratio"]: r for r in rows}
    kept = max((by_ratio[r] for r in cfg.pair_ratios), key=lambda r: r["evidence"])   # the first of a tie, as fit
    return {"k_true": int(labels.max()) + 1, "rows": rows, "kept": kept["ratio"],
            "best_v": max(rows, key=lambda r: r["v"])["ratio"], "pair_ratios": list(cfg.pair_ratios)}


def check_ratios(ratios: list[float], pair_ratios: list[float]) -> None:
    """Every ratio lm's selection tries must be swept: the kept ratio is chosen among all of them."""
    missing = [r for r in pair_ratios if r not in ratios]
    if missing:
        raise UserError(f"--ratios {ratios} leaves out {missing} of lm's pair_ratios {pair_ratios}: "
                        "the kept ratio is chosen among all of them")


def markdown(table: dict, ratios: list[float], seed: int) -> str:
    pair_ratios = next(iter(table.values()))["pair_ratios"]
    lines = ["# lm's pair-model strictness: V and K at each ratio test, and the one the selection keeps", "",
             f"Written by `scripts/pair_ratio_sweep.py` (seed {seed}, `runs.lm` as configured). Each cell is one "
             "fit of `lm` with the pair model of that ratio test (a within-text nearest neighbour this much "
             "nearer than the second is a positive), on the same features and kNN graph: V-measure (K found). "
             f"`fit` tries {', '.join(f'{r:g}' for r in pair_ratios)} (`pair_ratios`) and keeps the fit whose types "
             "best predict their neighbours' symbols (`neighbour_evidence`): **bold**. *best V*: the ratio with "
             "the highest V, a labelled reference that nothing in `lm` reads.", "",
             "| corpus | K true | " + " | ".join(f"{r:g}" for r in ratios) + " | kept | best V |",
             "|---|---:|" + "---:|" * len(ratios) + "---:|---:|"]
    kept_v, v08, best = [], [], []
    for name, t in table.items():
        cells = []
        for r in t["rows"]:
            cell = f"{r['v']:.3f} ({r['k']})"
            cells.append(f"**{cell}**" if r["ratio"] == t["kept"] else cell)
        lines.append(f"| {name} | {t['k_true']} | " + " | ".join(cells) + f" | {t['kept']:g} | {t['best_v']:g} |")
        by = {r["ratio"]: r for r in t["rows"]}
        kept_v.append(by[t["kept"]]["v"])
        best.append(max(r["v"] for r in t["rows"]))
        if 0.8 in by:
            v08.append(by[0.8]["v"])
    lines += ["", f"Mean V over the {len(table)} corpora: the kept fits {np.mean(kept_v):.3f}"
              + (f", ratio 0.8 alone (the previous default) {np.mean(v08):.3f}" if len(v08) == len(table) else "")
              + f", the best ratio of each corpus {np.mean(best):.3f}."]
    return "\n".join(lines + wider_grids(table, ratios, pair_ratios) + criteria(table, ratios, pair_ratios)) + "\n"


def kept_from(t: dict, grid: list[float]) -> dict:
    """The row the selection would keep if ``pair_ratios`` were ``grid``: the highest evidence,
    the first of a tie (``LMSignClusterer.select``)."""
    by = {r["ratio"]: r for r in t["rows"]}
    return max((by[r] for r in grid), key=lambda r: r["evidence"])


def wider_grids(table: dict, ratios: list[float], pair_ratios: list[float]) -> list[str]:
    """What the selection would keep from each grid that starts lower than ``pair_ratios`` and runs
    through it (every swept ratio from the lower start up): per corpus V (K), and the summary."""
    top = max(pair_ratios)
    starts = [r for r in ratios if r <= min(pair_ratios)]
    grids = [[r for r in ratios if lo <= r <= top] for lo in sorted(starts, reverse=True)]
    if len(grids) < 2:
        return []
    name_of = [f"{g[0]:g}-{g[-1]:g}" + (" (pair_ratios)" if g == sorted(pair_ratios) else "") for g in grids]
    lines = ["", "## The selection over a wider grid", "",
             "What `fit` would keep if `pair_ratios` were each grid below (the fits above, the same evidence): "
             "V (K); bold K within ±20% of K true.", "",
             "| corpus | K true | " + " | ".join(name_of) + " |", "|---|---:|" + "---:|" * len(grids)]
    summary = [[] for _ in grids]
    for name, t in table.items():
        cells = []
        for i, g in enumerate(grids):
            r = kept_from(t, g)
            err = r["k"] / t["k_true"] - 1
            summary[i].append((r["v"], err))
            k = f"**{r['k']}**" if abs(err) <= 0.2 else str(r["k"])
            cells.append(f"{r['v']:.3f} ({k})")
        lines.append(f"| {name} | {t['k_true']} | " + " | ".join(cells) + " |")
    lines.append("| mean V; K within ±20%; median K error | | " + " | ".join(
        f"{np.mean([v for v, _ in s]):.3f}; {sum(abs(e) <= 0.2 for _, e in s)}/{len(s)}; "
        f"{100 * np.median([abs(e) for _, e in s]):.0f}%" for s in summary) + " |")
    return lines


CRITERIA = (("evidence (`fit`)", "evidence"), ("controlled evidence", "controlled"), ("best V (labelled oracle)", "v"))


def criteria(table: dict, ratios: list[float], pair_ratios: list[float]) -> list[str]:
    """Per grid (``pair_ratios``, every swept ratio) and criterion: the mean V of the fits it keeps,
    how many of their K lie within ±20% of K true, and the median K error. The first of a tie wins."""
    grids = [("pair_ratios", sorted(pair_ratios)), ("every swept ratio", sorted(ratios))]
    lines = ["", "## Which fit each criterion keeps", "",
             "*controlled evidence*: the evidence minus the same types' evidence with every text shuffled "
             f"(mean of {CONTROL_SHUFFLES} shuffles), i.e. sequential context only. *best V*: the fit of the highest V, read "
             "from the labels: no label-free criterion can keep a better one from these fits. Cells: mean V; K within "
             "±20% of K true; median K error.", "",
             "| criterion | " + " | ".join(f"{name} ({', '.join(f'{r:g}' for r in g)})" for name, g in grids) + " |",
             "|---|" + "---|" * len(grids)]
    for label, key in CRITERIA:
        cells = []
        for _, grid in grids:
            kept = [(max((r for r in t["rows"] if r["ratio"] in grid), key=lambda r: r[key]), t["k_true"])
                    for t in table.values()]
            err = [abs(r["k"] / k_true - 1) for r, k_true in kept]
            cells.append(f"{np.mean([r['v'] for r, _ in kept]):.3f}; {sum(e <= 0.2 for e in err)}/{len(err)}; "
                         f"{100 * np.median(err):.0f}%")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help="default: the suite's hands and handwriting corpora, cypriot, lineara")
    ap.add_argument("--ratios", nargs="+", type=float, default=list(DEFAULT_RATIOS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="default reports/pair_ratio_sweep.md")
    args = ap.parse_args(argv)
    if any(not 0 < r <= 1 for r in args.ratios):
        raise UserError(f"--ratios {args.ratios}: each ratio must be in (0, 1]")
    params = load_params()
    names = args.corpora or noisy_corpora(params)
    out = report_path(args.out, "pair_ratio_sweep.md", ("--corpora", "--ratios", "--seed"),
                      bool(args.corpora or args.ratios != list(DEFAULT_RATIOS) or args.seed))
    _, row_cfg, _ = run_config("lm", params)
    check_ratios(args.ratios, get_clusterer("lm", **row_cfg).cfg.pair_ratios)
    table = {}
    for name in names:
        corpus = load_corpus(name, params["prepare"])                    # its errors name the corpus
        try:
            table[name] = sweep(corpus, row_cfg, args.ratios, args.seed)
        except UserError as err:
            raise UserError(f"{name}: {err}") from None
        t = table[name]
        print(f"{name}: " + ", ".join(f"{r['ratio']:g} K {r['k']} V {r['v']:.3f}" for r in t["rows"])
              + f"; kept {t['kept']}, best V {t['best_v']}", flush=True)
    text = markdown(table, args.ratios, args.seed)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
