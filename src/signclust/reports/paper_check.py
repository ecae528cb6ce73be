"""Stage `paper_check`: every method against a figure of its own paper, on the paper's data.

    python -m signclust.reports.paper_check                 # settings of params.yaml paper_check
    python -m signclust.reports.paper_check --only kmeans   # one row
    python -m signclust.reports.paper_check --scale ci      # CI-sized: reports/ci/paper_check.md
    python -m signclust.reports.paper_check --only swav deepcluster --seeds 0 1 2 3 4 \
        --out reports/paper_check_seeds.md                  # a study of its own, under its own name
    python -m signclust.reports.paper_check --only deepdpm --preset paper --subset 10000 \
        --out reports/paper_check_deepdpm_paper_10k.md      # the paper's own settings, more data

Each check names a method, a benchmark set (signclust.data.benchmarks), our CPU-feasible
setting (subset size and parameter overrides), the metric and the paper's figure with its
source. Writes reports/paper_check.md (and .json): paper figure, ours, the gap, and whether
our setting is reduced with respect to the paper's. At ``--scale ci`` the checks with a ``ci``
block run smaller; `signclust.reports.reproduce` compares the result with the committed table.
"""
from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import numpy as np

from signclust import tracking
from signclust.config import REPO_ROOT, deep_update, load_params, numeric_platform
from signclust.data.benchmarks import build as build_benchmark
from signclust.errors import UserError, cli_main
from signclust.evaluation.metrics import score, ward_labels
from signclust.io import atomic_write_text, write_json
from signclust.models.base import FitContext, get_clusterer
from signclust.models.train import preset_values


def check_setting(check: dict, params: dict, scale: str) -> dict:
    """The check as it runs at ``scale``. At 'ci' a check with a ``ci`` block runs smaller (its
    subset, parameter overrides and setting text) and is marked reduced; one without runs exactly
    as at full size, so that CI reproduces the committed figure itself."""
    check = copy.deepcopy(check)
    ci = check.pop("ci", None) or {}
    if scale != "ci":
        return check
    check["ci_reduced"] = bool(ci)
    if ci:
        check["subset"] = ci.get("subset", check.get("subset"))
        check["params"] = deep_update(check.get("params", {}) or {}, ci.get("params", {}) or {})
        check["setting"] = ci.get("setting", check.get("setting", ""))
        check["reduced"] = True
    default = (params["paper_check"].get("ci") or {}).get("tolerance", 0.02)
    check["ci_tolerance"] = float(ci.get("tolerance", default))
    return check


def measure(gold: np.ndarray, result, metric: str) -> float:
    """A metric of the native assignment, or ``<metric>_rc``: re-clustered by Ward at K_true on the
    learned representation (JULE's OURS-RC protocol)."""
    if metric.endswith("_rc"):
        pred = ward_labels(result.embedding, len(np.unique(gold)))
        return float(score(gold, pred)[metric[:-3]])
    return float(score(gold, result.labels)[metric])


def check_params(check: dict, params: dict) -> dict:
    """The method's parameters in a check: params.yaml's models.<method> under the check's own, or
    with a ``preset`` (see :func:`with_preset`) that preset's values alone."""
    if check.get("preset"):
        return preset_values(check["method"], check["preset"], params, "paper_check --preset")
    return deep_update(params.get("models", {}).get(check["method"], {}) or {}, check.get("params", {}) or {})


def with_preset(check: dict, preset: str, subset: int | None) -> dict:
    """The check run with the method's named parameter set (e.g. ``paper``: the paper's settings)
    instead of our CPU-sized cuts and the check's reductions, on ``subset`` images (None: the
    check's own subset; 0: the whole set). Reduced = still a subset of the data."""
    check = copy.deepcopy(check)
    check["preset"] = preset
    check["params"] = {}
    if subset is not None:
        check["subset"] = subset
    n = int(check.get("subset") or 0)
    check["setting"] = f"the `{preset}` preset of {check['method']}, " + (f"{n} images" if n else "all images")
    check["reduced"] = n > 0
    return check


def check_data(check: dict):
    """The benchmark images a check runs on: its data set, cut to its subset (0 or none: all)."""
    return build_benchmark(check["dataset"], int(check.get("subset") or 0))


def run_check(check: dict, params: dict, seeds: list[int], progress: bool) -> list[dict]:
    """One fit per seed; one row per paper figure of the check."""
    method = check["method"]
    cfg = check_params(check, params)
    corpus = check_data(check)
    gold = corpus.labels()
    k_true = corpus.counts()["types"]
    values = {f["metric"]: [] for f in check["figures"]}
    k_found, seconds = [], []
    for seed in seeds:
        clusterer = get_clusterer(method, **cfg)
        ctx = FitContext(seed=seed, n_clusters=k_true if clusterer.needs_k else None, progress=progress)
        t0 = time.time()
        result = clusterer.fit(corpus, ctx)
        seconds.append(time.time() - t0)
        k_found.append(result.k_found)
        for metric in values:
            values[metric].append(measure(gold, result, metric))
    rows = []
    for fig in check["figures"]:
        ours = float(np.mean(values[fig["metric"]]))
        paper = fig.get("paper")
        rows.append({
            "method": method, "dataset": check["dataset"], "n": corpus.n_tokens, "metric": fig["metric"],
            "paper": None if paper is None else float(paper), "source": fig.get("source", ""),
            "ours": ours, "ours_std": float(np.std(values[fig["metric"]])),
            "gap": None if paper is None else ours - float(paper),
            "k_found": float(np.mean(k_found)), "k_true": k_true, "paper_k": check.get("paper_k"),
            "seconds": float(np.mean(seconds)), "seeds": seeds, "setting": check.get("setting", ""),
            "params": check.get("params", {}), "reduced": bool(check.get("reduced", False)),
            **{k: check[k] for k in ("ci_reduced", "ci_tolerance", "preset") if k in check},
        })
    return rows


def render(rows: list[dict], scale: str, command: str | None = None) -> str:
    command = command or "python -m signclust.reports.paper_check" + (" --scale ci" if scale == "ci" else "")
    lines = [
        "# Baselines against their papers",
        "",
        f"Generated by `{command}`. "
        "Ours = mean ± std over the seeds; gap = ours − paper. *Reduced* marks a setting smaller than "
        "the paper's (a subset of the data, fewer epochs, a smaller network, other features) so that it "
        "runs on 2 CPU cores. `_RC` = re-clustered by Ward at K_true on the learned representation "
        "(JULE's OURS-RC). A dash under *paper*: the paper reports no figure on these images (it "
        "evaluates ImageNet/CIFAR); the row still shows what the method does here.",
        "",
        "| method | data (n) | metric | paper | ours | gap | K found / true | our setting | reduced | time/seed | paper source |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        k = f"{r['k_found']:.1f} / {r['k_true']}" + (f" (paper: {r['paper_k']})" if r.get("paper_k") else "")
        paper = "—" if r["paper"] is None else f"{r['paper']:.3f}"
        gap = "—" if r["gap"] is None else f"{r['gap']:+.3f}"
        lines.append(
            f"| {r['method']} | {r['dataset']} ({r['n']}) | {r['metric'].upper()} | {paper} | "
            f"{r['ours']:.3f} ± {r['ours_std']:.3f} | {gap} | {k} | {r['setting']} | "
            f"{'yes' if r['reduced'] else 'no'} | {r['seconds']:.0f}s | {r['source']} |")
    return "\n".join(lines) + "\n"


def run_all(params: dict, scale: str, out: Path, only: list[str] | None = None, progress: bool = True,
            seeds: list[int] | None = None, command: str | None = None, preset: str | None = None,
            subset: int | None = None) -> list[dict]:
    """Run the checks of params.yaml ``paper_check`` at ``scale`` (``seeds``: other seeds than the
    configured ones; ``preset``/``subset``: :func:`with_preset`); write ``out`` (.md and .json)."""
    if "paper_check" not in params:
        raise UserError("params.yaml has no paper_check section")
    pc = params["paper_check"]
    if seeds is None:
        seeds = list((pc.get("ci") or {}).get("seeds", [0]) if scale == "ci" else pc.get("seeds", [0]))
    checks = [check_setting(c, params, scale) for c in pc["checks"] if not only or c["method"] in only]
    if not checks:
        raise UserError(f"no paper checks for {', '.join(only or [])}")
    if preset is not None:
        checks = [with_preset(c, preset, subset) for c in checks]
        for c in checks:                     # an unknown preset is one error before any fit
            check_params(c, params)
    rows = []
    with tracking.run("paper_check", scale) as parent:
        for check in checks:
            for row in run_check(check, params, seeds, progress=progress):
                rows.append(row)
                paper = "—" if row["paper"] is None else f"{row['paper']:.3f}"
                print(f"{row['method']:12s} {row['dataset']:14s} {row['metric']:8s} paper {paper} "
                      f"ours {row['ours']:.3f} (K {row['k_found']:.1f}, {row['seconds']:.0f}s)", flush=True)
                parent.log_metrics({f"{row['method']}.{row['dataset']}.{row['metric']}": row["ours"]})
    atomic_write_text(out, render(rows, scale, command))
    # the CPU and libraries the figures were made with: the CI reproduction holds another CPU's
    # deep baselines to a wider tolerance (signclust.reports.reproduce)
    write_json(out.with_suffix(".json"), {"scale": scale, "rows": rows, "platform": numeric_platform()})
    return rows


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=["full", "ci"], default="full")
    ap.add_argument("--only", nargs="+", help="run only these methods")
    ap.add_argument("--out", type=Path, help="default reports/paper_check.md (ci: reports/ci/paper_check.md)")
    ap.add_argument("--seeds", nargs="+", type=int, help="other seeds than paper_check.seeds: another "
                    "study, so it needs its own --out")
    ap.add_argument("--preset", help="run each check with this named parameter set of its method (e.g. "
                    "paper) instead of our settings: another study, so it needs its own --out")
    ap.add_argument("--subset", type=int, help="with --preset: images of the data set (0: all; default: "
                    "the check's subset)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    for flag, value in (("--seeds", args.seeds), ("--preset", args.preset)):
        if value is not None and args.out is None:
            raise UserError(f"{flag} makes another study than the committed paper check: give it its own --out")
    if args.subset is not None and args.preset is None:
        raise UserError("--subset goes with --preset (the committed checks keep their own subsets)")
    if args.subset is not None and args.subset < 0:
        raise UserError(f"--subset {args.subset}: expected 0 (all images) or a positive count")
    out = args.out or REPO_ROOT / "reports" / ("ci" if args.scale == "ci" else "") / "paper_check.md"
    command = None                                   # the configured check: render's default line
    if args.seeds is not None or args.preset is not None:
        command = " ".join(["python -m signclust.reports.paper_check", *(["--scale ci"] if args.scale == "ci" else []),
                            *(["--only", *args.only] if args.only else []),
                            *(["--preset", args.preset] if args.preset else []),
                            *(["--subset", str(args.subset)] if args.subset is not None else []),
                            *(["--seeds", *map(str, args.seeds)] if args.seeds is not None else []),
                            "--out", str(args.out)])
    run_all(load_params(), args.scale, out, args.only, progress=not args.no_progress, seeds=args.seeds,
            command=command, preset=args.preset, subset=args.subset)
    print(f"-> {out}")


if __name__ == "__main__":
    main()
