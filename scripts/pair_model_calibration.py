"""Where lm's K goes wrong on noisy corpora: the pair model's calibration (issue 9, a diagnosis).

    .venv/bin/python scripts/pair_model_calibration.py        # -> reports/pair_model_calibration.md
    .venv/bin/python scripts/pair_model_calibration.py --corpora latin_hands cypriot --out /tmp/c.md

lm's micro-clusters are an average-linkage cut where the corpus-fitted pair model's odds are even,
and the merges that follow only join them; so a cut that is too fine or too coarse sets how far K
can be from the truth. For each noisy corpus (one hand or writer per text) this script measures,
with lm's own features (``LMSignClusterer.features``) and pair model, at the configured ``runs.lm``:

- the pair model's positives (within-text mutual nearest neighbours passing the ratio test): how
  many, and how many show one sign (their precision);
- the distance where the odds are even, beside the same balanced fit made from the *true*
  within-text pairs (same sign against different signs): what a perfectly calibrated pair model
  of the same form would give;
- the micro-clusters at each of the two: K and V-measure;
- lm's types at each of the two (the same features, micro-clusters and merges; only the pair model
  differs): K and V-measure. The first is lm's own fit at this seed; the second says how far K
  would come with a perfectly calibrated pair model of the same form, and at what V.

The labels are used only to score and for the reference fit; nothing here is read by any stage,
default or study. Corpora not in ``data/corpora`` (the held-out scripts) are built in memory by
the suite's builder, as scripts/heldout_scripts.py does.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from signclust.config import load_params  # noqa: E402
from signclust.data import suite  # noqa: E402
from signclust.data.corpus import Corpus, is_corpus_folder  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models import lm_clusterer as lm  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.train import run_config  # noqa: E402

DEFAULT_HELD_OUT = ("armenian", "ethiopic")


def positives_precision(x: np.ndarray, texts: list[np.ndarray], labels: np.ndarray, ratio: float) -> tuple[int, float]:
    """(number, share showing one sign) of the pair model's positives (``lm.text_positives``)."""
    n = same = 0
    for t, _, i, j in lm.text_positives(x, texts, ratio):
        n += len(i)
        same += int((labels[t[i]] == labels[t[j]]).sum())
    return n, same / max(n, 1)


def calibration(name: str, corpus: Corpus, row_cfg: dict, seed: int) -> dict:
    """One corpus: the pair model's positives, its even odds against the true pairs' fit, and
    the micro-clusters at each."""
    from scipy.cluster.hierarchy import fcluster, linkage
    clusterer = get_clusterer("lm", **row_cfg)
    ctx = FitContext(seed=seed, progress=False)
    hand = clusterer.hand_images(corpus)                  # the images lm reads, and each token's
    x, texts, clean = clusterer.features(corpus, ctx, hand=hand)
    if clean:
        raise UserError(f"{name}: a clean corpus (its sign images recur exactly): lm fits no pair model there")
    labels = corpus.labels()                                        # (n,) integer codes 0..K-1
    # lm's own pair model: the one of the ratio test its selection keeps (LMSignClusterer.select)
    kept, _ = clusterer.select(x, texts, hand[1], ctx, time.time())
    ratio = kept.info["pair_ratio"]
    pair = lm.corpus_pair_model(x, texts, ratio, seed)
    truth = lm.refit_pair_model(x, labels, texts, seed)
    if pair is None or truth is None:
        raise UserError(f"{name}: too few texts of 3+ tokens to fit a pair model")
    n_pos, precision = positives_precision(x, texts, labels, ratio)
    tree = linkage(x, "average")
    out = {"k_true": int(labels.max()) + 1, "texts": len(texts), "ratio": ratio, "positives": n_pos, "precision": precision,
           "even_odds": pair.even_odds, "even_odds_true": truth.even_odds}
    for key, model in (("ours", pair), ("true", truth)):
        z = fcluster(tree, model.even_odds, "distance") - 1
        out[f"micro_k_{key}"] = int(z.max()) + 1
        out[f"micro_v_{key}"] = float(score(labels, z)["v_measure"])
        types = kept.labels if key == "ours" else clusterer.cluster(x, texts, clean, hand[1], model, ctx).labels
        out[f"lm_k_{key}"] = int(types.max()) + 1
        out[f"lm_v_{key}"] = float(score(labels, types)["v_measure"])
    return out


def noisy_corpora(params: dict, held_out: tuple[str, ...] = ()) -> list[str]:
    """The corpora with a pair model, the studies' default: the suite's hands and handwriting
    regimes (of the ``held_out`` scripts too), cypriot, lineara. The free regime is clean."""
    return [f"{s}_{r}" for s in [*params["prepare"]["suite"]["scripts"], *held_out]
            for r in suite.REGIMES if r != "free"] + ["cypriot", "lineara"]


def report_path(out: str | None, report: str, options: tuple[str, ...], changed: bool) -> Path:
    """Where a study writes: ``out``, else reports/<report>. A study whose ``options`` are ``changed``
    from their defaults is another study than the committed report and must name its own --out."""
    if changed and not out:
        named = options[0] if len(options) == 1 else ", ".join(options[:-1]) + " or " + options[-1]
        raise UserError(f"{named} make{'s' if len(options) == 1 else ''} another study than reports/{report}: "
                        "give it its own --out")
    return Path(out) if out else REPO / "reports" / report


def load_corpus(name: str, prepare_params: dict) -> Corpus:
    folder = REPO / "data" / "corpora" / name
    if is_corpus_folder(folder):
        return Corpus.load(folder)
    script, _, regime = name.rpartition("_")
    if script in suite.SCRIPTS and regime in suite.REGIMES:
        return suite.build(name, prepare_params)
    raise UserError(f"{name}: not in data/corpora (run `dvc repro` first) and not a script_regime the suite builder knows")


def markdown(rows: dict, seed: int) -> str:
    lines = ["# The pair model's calibration: where lm's K goes wrong on noisy corpora", "",
             f"Written by `scripts/pair_model_calibration.py` (seed {seed}, `runs.lm` as configured). "
             "lm's micro-clusters are an average-linkage cut at the distance where its pair model's odds "
             "are even; the merges only join them. *Positives* are the pairs the pair model is fitted on "
             "(within-text mutual nearest neighbours passing the ratio test; *ratio*: the test of the fit lm's "
             "selection keeps), *precision* the share of them "
             "that show one sign. *True-pair fit*: the same balanced logistic fit made from the true "
             "within-text pairs (same sign against different signs), a reference that needs labels; "
             "nothing in lm reads it. *lm K, V*: lm's types from the same features, micro-clusters and merges "
             "with each pair model (with ours: lm's own fit at this seed).", "",
             "| corpus | K true | ratio | positives | precision | even odds: ours | true-pair fit | micro K: ours | "
             "at the true-pair fit | micro V: ours | at the true-pair fit | lm K: ours | at the true-pair fit | "
             "lm V: ours | at the true-pair fit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['k_true']} | {r['ratio']:g} | {r['positives']} | {r['precision']:.2f} | {r['even_odds']:.3f} | "
                     f"{r['even_odds_true']:.3f} | {r['micro_k_ours']} | {r['micro_k_true']} | "
                     f"{r['micro_v_ours']:.3f} | {r['micro_v_true']:.3f} | {r['lm_k_ours']} | {r['lm_k_true']} | "
                     f"{r['lm_v_ours']:.3f} | {r['lm_v_true']:.3f} |")
    too_fine = [n for n, r in rows.items() if r["even_odds"] < r["even_odds_true"]]
    lines += ["", f"Even odds below the true-pair fit's (a cut too fine: more micro-clusters): "
              f"{len(too_fine)} of {len(rows)} corpora; above it (too coarse): "
              f"{', '.join(n for n in rows if n not in too_fine) or 'none'}."]
    for key, where in (("ours", "With our pair model"), ("true", "At the true-pair fit")):
        near = [n for n, r in rows.items() if abs(r[f"lm_k_{key}"] - r["k_true"]) <= 0.2 * r["k_true"]]
        mean_v = np.mean([r[f"lm_v_{key}"] for r in rows.values()])
        lines += ["", f"{where}, lm's K is within ±20% of K true on {len(near)} of {len(rows)} corpora"
                     f"{' (' + ', '.join(near) + ')' if near else ''}; its mean V is {mean_v:.3f}."]
    return "\n".join(lines) + "\n"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", help="default: the suite's hands and handwriting corpora, cypriot, "
                    "lineara, and the held-out scripts' (armenian, ethiopic)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="default reports/pair_model_calibration.md")
    args = ap.parse_args(argv)
    params = load_params()
    names = args.corpora or noisy_corpora(params, DEFAULT_HELD_OUT)
    out = report_path(args.out, "pair_model_calibration.md", ("--corpora",), bool(args.corpora))
    _, row_cfg, _ = run_config("lm", params)
    rows = {}
    for name in names:
        rows[name] = calibration(name, load_corpus(name, params["prepare"]), row_cfg, args.seed)
        r = rows[name]
        print(f"{name}: precision {r['precision']:.2f}, even odds {r['even_odds']:.3f} (true pairs "
              f"{r['even_odds_true']:.3f}), micro K {r['micro_k_ours']} / {r['micro_k_true']}, lm K "
              f"{r['lm_k_ours']} / {r['lm_k_true']} (K true {r['k_true']}), lm V {r['lm_v_ours']:.3f} / "
              f"{r['lm_v_true']:.3f}",
              flush=True)
    text = markdown(rows, args.seed)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
