"""A baseline's settings on dev images, never on the images its paper check scores.

    .venv/bin/python scripts/dev_split_study.py swav --variants '{"queue 1024": {"queue_length": 1024}}' \
        --out reports/swav_queue_dev_study.md

    .venv/bin/python scripts/dev_split_study.py twostage --datasets armenian_hands ethiopic_handwriting \
        --variants '{"stage 2: 30 epochs": {"stage2_epochs": 30}}' --seeds 0 --out /tmp/t.md

Fits ``models.<method>`` of params.yaml (for a method of the paper check, with the check's own
parameters, e.g. swav's 10 epochs) with each variant's parameters overlaid, at each seed, on
dev sets: 3000 images of the MNIST *train* split (the paper check scores 3000 of the test
split), 3000 of the Fashion-MNIST test split, scikit-learn's digits, or a held-out script of
the suite builder (``armenian_hands``, ``ethiopic_handwriting``, ...: scripts the scored suite
leaves out). Scored data are refused (MNIST-test, cypriot, lineara and the suite's corpora) unless
``--measure-scored``: then the table measures what a setting gives there (e.g. a longer budget
than the CPU-sized cut, for a paper target) and says that it chooses nothing. The
method's ``default`` row is always fitted. Prints (and with ``--out`` writes) mean NMI of the
native assignment (= V-measure) with the per-seed values, K found, and the fixed-K V of the fit's
embedding as ``evaluate`` computes it; labels are used only to score.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from sklearn.metrics import normalized_mutual_info_score  # noqa: E402

from pair_model_calibration import load_corpus  # noqa: E402  (data/corpora, else the suite builder)
from signclust.config import load_params  # noqa: E402
from signclust.data import suite  # noqa: E402
from signclust.data.benchmarks import build  # noqa: E402
from signclust.evaluation.evaluate import config as eval_config  # noqa: E402
from signclust.evaluation.evaluate import score_result  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.reports.paper_check import check_params  # noqa: E402

DEV_SETS = ("mnist_train:3000", "fashion_test:3000", "digits")


def method_params(method: str, params: dict) -> dict:
    """The paper check's parameters for ``method`` (models.<method> + the check's own), else
    models.<method>."""
    for check in params["paper_check"]["checks"]:
        if check["method"] == method:
            return check_params(check, params)
    return dict(params.get("models", {}).get(method) or {})


def dev_corpus(spec: str, params: dict, allow_scored: bool = False):
    """A dev set by name: a benchmark image set (name[:subset]) or a held-out suite script; a
    scored corpus (cypriot, lineara, the suite's) only with ``allow_scored``."""
    name, _, sub = spec.partition(":")
    script, _, regime = name.rpartition("_")
    scored = set(params["prepare"]["suite"]["scripts"]) | {"cypriot", "lineara"}
    is_corpus = name in scored or script in scored
    if not allow_scored and (name == "mnist_test" or is_corpus):
        raise UserError(f"{name} is scored (paper check, comparison or suite), not a dev set "
                        "(--measure-scored to measure a setting there)")
    if is_corpus:
        return load_corpus(name, params["prepare"])
    if script in suite.SCRIPTS and regime in suite.REGIMES:
        return suite.build(name, params["prepare"])
    return build(name, int(sub or 0))


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("method")
    ap.add_argument("--variants", default="{}", help="JSON: name -> parameters overlaid on the default")
    ap.add_argument("--datasets", nargs="+", default=list(DEV_SETS), help="name[:subset]")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--measure-scored", action="store_true",
                    help="allow scored corpora: the table measures a setting, it chooses nothing")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        variants = {"default": {}, **json.loads(args.variants)}
    except json.JSONDecodeError as exc:
        raise UserError(f"--variants is not JSON: {exc}") from None
    params = load_params()
    base = method_params(args.method, params)
    ecfg = eval_config(params)
    cmd = "python scripts/dev_split_study.py " + " ".join(
        a if " " not in a and "{" not in a else f"'{a}'" for a in (argv if argv is not None else sys.argv[1:]))
    lines = [f"# {args.method}: settings on dev images", "",
             f"Generated by `{cmd}`. The paper check's setting of {args.method} ({json.dumps(base)}) "
             "with each variant's parameters overlaid; NMI of the native assignment, mean over the "
             "seeds, and per seed; fixed-K V: Ward on the fit's embedding at K true + offsets (as `evaluate`). "
             "Dev sets only: the check scores 3000 MNIST *test* images; the held-out scripts are not in "
             "the scored suite." + (" **Scored data (`--measure-scored`): this table measures what the "
                                    "settings give there; no setting was chosen from it.**"
                                    if args.measure_scored else ""), "",
             "| data | variant | NMI | per seed | K found | fixed-K V | s/fit |", "|---|---|---:|---|---:|---:|---:|"]
    for ds in args.datasets:
        corpus = dev_corpus(ds, params, args.measure_scored)
        gold, k = np.asarray(corpus.labels()), corpus.counts()["types"]
        for vname, overlay in variants.items():
            nmis, ks, secs, fixed = [], [], [], []
            for seed in args.seeds:
                t0 = time.time()
                result = get_clusterer(args.method, **{**base, **overlay}).fit(
                    corpus, FitContext(seed=seed, n_clusters=k, progress=False))
                secs.append(time.time() - t0)
                nmis.append(normalized_mutual_info_score(gold, result.labels))
                ks.append(result.k_found)
                fixed.append(score_result(gold, result, ecfg, seed)["fixed_k_v_measure"])
            row = (f"| {ds} | {vname} | {np.mean(nmis):.3f} | {' '.join(f'{v:.3f}' for v in nmis)} | "
                   f"{np.mean(ks):.1f} | {np.mean(fixed):.3f} | {np.mean(secs):.0f} |")
            print(row, flush=True)
            lines.append(row)
    if args.out:
        atomic_write_text(args.out, "\n".join(lines) + "\n")
        print(f"-> {args.out}")


if __name__ == "__main__":
    main()
