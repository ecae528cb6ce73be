"""Stage `suite_report`: our clusterer against every row on the multi-script suite, and the targets.

    python -m signclust.reports.suite

Reads reports/metrics/<run>_<corpus>.json (the evaluate stage) for the corpora of params.yaml
``report.suite.corpora`` (the suite, then the built-in corpora the targets also name) and writes

- reports/suite.md: per corpus ours (``report.suite.ours``) beside the reference rows, the best
  deep baseline and K found against K true; the mean of every row over the suite; and each
  target of ``report.suite.targets`` with its verdict, measured on these numbers;
- reports/figures/suite.png: V per corpus (ours, the references, the best deep baseline) and
  K found against K true.

The report ends with the machines each row's fits ran on (the ``platform`` records of
reports/timings/<run>_<corpus>.json, as the comparison tables name them): a torch row's figures
and ``lm``'s K depend on the CPU, and its wall times on whether the CPU has bf16 hardware.

Three targets are measured outside the evaluate stage, and read here from their own outputs: the
wall time of each fit of ours on a suite corpus (the train stage's reports/timings/<ours>_<corpus>.json,
fresh fits only: a fit resumed from a checkpoint says so there and is left out), what
removing the context term costs on the free-variation corpora (the ablation stage's
reports/metrics/ablation_<corpus>.json, variant ``report.suite.context_ablation``), and whether
the label-free objective ranks configurations like V-measure (Spearman rho, over the trials of each
Optuna study named in ``report.suite.rho_studies``, of V and the label-free score
``report.suite.rho_score`` that every trial records: ``context``, the controlled context evidence
that ``signclust tune --objective context`` selects by, or ``unsupervised``, U; the other score's
rho is shown beside it; reports/studies/<study>.json, made by ``signclust tune``).

Missing metrics files are an error naming them (run ``dvc repro`` first), so a table never
silently drops a row.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from signclust.config import REPO_ROOT, load_params
from signclust.errors import UserError, cli_main
from signclust.io import atomic_path, atomic_write_text
from signclust.json_files import read_json
from signclust.reports.table import add_wall_time, fresh_seconds, machine_name, machines_section
from signclust.reports.tune_report import reaches
from signclust.tuning.study import LABEL_FREE

# the label-free scores a tuning trial records, as the target names them
SCORE_WORDS = {"unsupervised": "U", "context": "controlled context evidence"}

DEFAULTS = {
    "ours": "lm",
    "references": ["ward_pixels", "ward_glyphs"],
    "deep": ["jule", "deepcluster", "twostage", "swav", "deepdpm"],
    "rows": [],
    "corpora": [],
    "builtin": [],
    "context_ablation": "no_context",
    "rho_studies": [],
    "rho_score": "context",     # the label-free score of the rho target: one of tuning.study.LABEL_FREE
    "rho_note": [],             # lines printed under the targets: what the studies were made with, if not the current code
    "targets": {"margin_over": "ward_pixels", "margin": 0.05, "k_within": 0.2, "k_median_within": 0.1,
                "free_v": 0.97, "seconds": 60.0, "context_cost": 0.05, "rho": 0.8},
}


def config(params: dict) -> dict:
    cfg = {**DEFAULTS, **((params.get("report") or {}).get("suite") or {})}
    cfg["targets"] = {**DEFAULTS["targets"], **(cfg.get("targets") or {})}
    if not cfg["corpora"]:
        raise UserError("params.yaml report.suite.corpora is empty")
    if cfg["rho_score"] not in LABEL_FREE:
        raise UserError(f"params.yaml report.suite.rho_score is {cfg['rho_score']!r}; "
                        f"it must be one of {', '.join(LABEL_FREE)}")
    return cfg


def complete_rows(metrics_dir: Path, runs: list[str], corpora: list[str]) -> list[str]:
    """The runs that have a metrics file for every corpus."""
    return [r for r in runs if all((Path(metrics_dir) / f"{r}_{c}.json").is_file() for c in corpora)]


def load(metrics_dir: Path, runs: list[str], corpora: list[str]) -> dict[tuple[str, str], dict]:
    docs, missing = {}, []
    for corpus in corpora:
        for run in runs:
            path = Path(metrics_dir) / f"{run}_{corpus}.json"
            if path.is_file():
                docs[run, corpus] = read_json(path, "the evaluate stage's metrics")
            else:
                missing.append(path.name)
    if missing:
        raise UserError(f"{len(missing)} metrics file(s) missing in {metrics_dir}, e.g. {', '.join(missing[:4])}; "
                        "run the evaluate stages first (dvc repro)")
    return docs


def load_side(cfg: dict, metrics_dir: Path, studies_dir: Path, partial: bool = False,
              timings_dir: Path | None = None) -> dict:
    """Ours' wall times per suite corpus, {corpus: [seconds of each fresh fit]}, and the CPUs that
    took them; the ablation's context cost per free-variation corpus, {corpus: delta V}; and each named
    study's rho for each label-free score, {score: {study: (corpus, rho, trials)}} (rho None where the
    study's trials did not record that score). A missing file (or a timings file of resumed fits only)
    is an error naming it (with ``partial``: left out, and the target says what was measured).
    ``timings_dir``: reports/timings/ beside ``metrics_dir`` unless given."""
    side: dict = {"seconds": {}, "cpus": [], "ablation": {}, "rho": {s: {} for s in LABEL_FREE}, "missing": []}
    timings_dir = Path(timings_dir) if timings_dir is not None else Path(metrics_dir).parent / "timings"
    for c in cfg["corpora"]:
        path = timings_dir / f"{cfg['ours']}_{c}.json"
        doc = read_json(path, "the train stage's timings") if path.is_file() else {}
        fresh = fresh_seconds(doc)
        if not fresh:
            side["missing"].append(f"{path.name} (resumed fits only)" if doc else path.name)
            continue
        side["seconds"][c] = fresh
        if doc.get("platform") and (cpu := machine_name(doc["platform"])) not in side["cpus"]:
            side["cpus"].append(cpu)
    for c in [c for c in cfg["corpora"] if regime(c) == "free"]:
        path = Path(metrics_dir) / f"ablation_{c}.json"
        if not path.is_file():
            side["missing"].append(path.name)
            continue
        variants = read_json(path, "the ablation's metrics").get("variants") or {}
        if cfg["context_ablation"] not in variants:
            raise UserError(f"{path.name} has no variant {cfg['context_ablation']!r} (report.suite.context_ablation); "
                            f"it has {', '.join(variants)}")
        side["ablation"][c] = float(variants[cfg["context_ablation"]]["delta_v"])
    for name in cfg["rho_studies"]:
        path = Path(studies_dir) / f"{name}.json"
        if not path.is_file():
            side["missing"].append(path.name)
            continue
        doc = read_json(path, "a tune summary")
        for score in LABEL_FREE:
            agree = (doc.get("agreement") or {}).get(f"{score}_vs_v") or {}
            side["rho"][score][name] = (doc["corpus"], agree.get("rho"), int(agree.get("n") or 0))
    if side["missing"] and not partial:
        raise UserError(f"{len(side['missing'])} file(s) missing: {', '.join(side['missing'][:4])}; run the train "
                        "and ablation stages (dvc repro) and the studies of report.suite.rho_studies first")
    return side


def side_verdicts(side: dict, cfg: dict) -> list[dict]:
    """The three targets measured by the train stage's timings, the ablation and the tuning studies."""
    t, out = cfg["targets"], []
    secs = side["seconds"]
    slow = [f"{c} ({max(s):.0f} s)" for c, s in secs.items() if max(s) > t["seconds"]]
    slowest = max(secs, key=lambda c: max(secs[c])) if secs else None
    out.append({"target": f"at most {t['seconds']:g} s per fit of `{cfg['ours']}` on a suite corpus and seed "
                          "(fresh fits, `reports/timings/`)",
                "measured": (f"{len(secs) - len(slow)}/{len(secs)} corpora; slowest {max(secs[slowest]):.0f} s "
                             f"({slowest}); median fit {np.median([x for s in secs.values() for x in s]):.0f} s"
                             + (f"; on {', '.join(side['cpus'])}" if side["cpus"] else "")
                             if secs else "not measured"), "ok": bool(secs) and not slow, "misses": slow})
    abl = side["ablation"]
    cheap = [f"{c} ({d:+.3f})" for c, d in abl.items() if -d < t["context_cost"]]
    out.append({"target": f"removing the context term (`{cfg['context_ablation']}`) costs ≥ {t['context_cost']} V "
                          "on the free-variation corpora",
                "measured": (f"{len(abl) - len(cheap)}/{len(abl)} corpora; Δ V " + ", ".join(f"{d:+.3f}" for d in abl.values())
                             if abl else "not measured"), "ok": bool(abl) and not cheap, "misses": cheap})
    score = cfg["rho_score"]

    def summary(rho: dict) -> tuple[str, str, list[str]]:
        """'k/n' studies at the target, ', median ρ +x.xx' (over the studies that recorded it), the misses"""
        low = [f"{corpus} ({r:+.2f})" if r is not None else f"{corpus} (–)" for corpus, r, _ in rho.values()
               if r is None or not reaches(r, t["rho"])]
        known = [r for _, r, _ in rho.values() if r is not None]
        return f"{len(rho) - len(low)}/{len(rho)}", f", median ρ {np.median(known):+.2f}" if known else "", low

    rho = side["rho"][score]
    count, median, low = summary(rho)
    trials = sorted({n for _, r, n in rho.values() if r is not None})
    others = "".join(f"; {SCORE_WORDS[s]}: " + "".join(summary(side["rho"][s])[:2]) for s in LABEL_FREE if s != score)
    out.append({"target": f"the label-free objective ({SCORE_WORDS[score]}) ranks configurations like V: "
                          f"Spearman ρ ≥ {t['rho']} over an Optuna study",
                "measured": (f"{count} studies of {'/'.join(map(str, trials))} trials (one per corpus){median}{others}"
                             if rho else "not measured"),
                "ok": bool(rho) and not low, "misses": low})
    return out


def regime(corpus: str) -> str:
    return corpus.rsplit("_", 1)[1] if "_" in corpus else "built-in"


def mean(doc: dict, key: str = "v_measure") -> float:
    return float(doc["mean"][key])


def best_of(docs: dict, runs: list[str], corpus: str) -> tuple[str, float]:
    run = max(runs, key=lambda r: mean(docs[r, corpus]))
    return run, mean(docs[run, corpus])


def verdicts(docs: dict, cfg: dict) -> list[dict]:
    """Each target of the issue, measured on the evaluate stage's numbers."""
    t, ours = cfg["targets"], cfg["ours"]
    suite, every = cfg["corpora"], cfg["corpora"] + cfg["builtin"]
    others = [r for r in cfg["rows"] if r != ours]
    out = []
    margins = {c: mean(docs[ours, c]) - mean(docs[t["margin_over"], c]) for c in every}
    bad = [f"{c} ({m:+.3f})" for c, m in margins.items() if m < t["margin"]]
    out.append({"target": f"native V ≥ {t['margin_over']} + {t['margin']} on every corpus",
                "measured": f"{len(every) - len(bad)}/{len(every)} corpora; smallest margin "
                            f"{min(margins.values()):+.3f}", "ok": not bad, "misses": bad})
    suite_mean = {r: float(np.mean([mean(docs[r, c]) for c in suite])) for r in [ours] + others}
    beaten = [r for r in others if suite_mean[r] >= suite_mean[ours]]
    out.append({"target": "above every other row on the suite mean"
                + (" (of the rows evaluated so far)" if cfg.get("left_out") else ""),
                "measured": f"ours {suite_mean[ours]:.3f}; best other {max(others, key=suite_mean.get)} "
                            f"{max(suite_mean[r] for r in others):.3f}", "ok": not beaten, "misses": beaten})
    kerr = {c: (mean(docs[ours, c], "k_found") - docs[ours, c]["k_true"]) / docs[ours, c]["k_true"] for c in every}
    far = [f"{c} ({e:+.0%})" for c, e in kerr.items() if abs(e) > t["k_within"]]
    out.append({"target": f"K found within ±{t['k_within']:.0%} of K true on every corpus",
                "measured": f"{len(every) - len(far)}/{len(every)} corpora", "ok": not far, "misses": far})
    med = float(np.median(np.abs(list(kerr.values()))))
    out.append({"target": f"median absolute K error within {t['k_median_within']:.0%}",
                "measured": f"{med:.0%}", "ok": med <= t["k_median_within"], "misses": []})
    free = [c for c in suite if regime(c) == "free"]
    low = [f"{c} ({mean(docs[ours, c]):.3f})" for c in free if mean(docs[ours, c]) < t["free_v"]]
    out.append({"target": f"native V ≥ {t['free_v']} on the free-variation corpora",
                "measured": f"{len(free) - len(low)}/{len(free)} corpora", "ok": not low, "misses": low})
    return out


def _v(doc: dict) -> str:
    return f"{doc['mean']['v_measure']:.3f} ± {doc['std'].get('v_measure', 0.0):.3f}"


def seed_counts(docs: dict, run: str, suite: list[str], builtin: list[str]) -> str:
    """How many seeds a row has: one number, or the suite's and the built-in corpora's apart
    (the deep baselines run the suite with fewer seeds)."""
    on_suite = min(docs[run, c]["n_seeds"] for c in suite)
    on_builtin = min(docs[run, c]["n_seeds"] for c in builtin) if builtin else on_suite
    return str(on_suite) if on_suite == on_builtin else f"{on_suite} on the suite, {on_builtin} on the built-in corpora"


def markdown(docs: dict, cfg: dict, seeds: dict[str, str], side: dict) -> str:
    ours, refs, deep = cfg["ours"], cfg["references"], cfg["deep"]
    every = cfg["corpora"] + cfg["builtin"]
    lines = ["# The multi-script suite: our clusterer against every row", "",
             "Written by `python -m signclust.reports.suite` from the evaluate stage's metrics "
             "(`reports/metrics/`); native V-measure, mean ± std over seeds. Corpora: the UDHR in six "
             "scripts, three regimes each (`free`: typefaces mixed within every text, `hands`: one hand "
             "per text, `handwriting`: one writer per text with strong per-token variation), then the "
             "built-in corpora. Seeds per row: "
             + ", ".join(f"`{r}` {n}" for r, n in seeds.items()) + ".", "",
             "## Ours beside the references", "",
             "Bold: the best V of the corpus's row (ours, a reference or the best deep baseline).", "",
             f"| corpus | K true | `{ours}` V | K found | " + " | ".join(f"`{r}` V" for r in refs)
             + " | best deep baseline (given K) | margin over `" + cfg["targets"]["margin_over"] + "` |",
             "|---|---:|---:|---:|" + "---:|" * len(refs) + "---|---:|"]
    left_out = cfg.get("left_out") or []
    if left_out:
        lines[2:2] = [f"**Partial report** (`--partial`): rows without metrics for every corpus yet are left "
                      f"out: {', '.join(f'`{r}`' for r in left_out)}. The full `dvc repro` writes them all.", ""]
    for c in every:
        d = docs[ours, c]
        deep_run, deep_v = best_of(docs, deep, c) if deep else (None, -np.inf)
        top = max([mean(d), deep_v] + [mean(docs[r, c]) for r in refs])

        def bold(text: str, v: float) -> str:
            return f"**{text}**" if v == top else text
        best = f"`{deep_run}` {bold(f'{deep_v:.3f}', deep_v)}" if deep else "– (not run)"
        margin = mean(d) - mean(docs[cfg["targets"]["margin_over"], c])
        lines.append(f"| {c} | {d['k_true']} | {bold(_v(d), mean(d))} | {d['mean']['k_found']:.0f} | "
                     + " | ".join(bold(_v(docs[r, c]), mean(docs[r, c])) for r in refs)
                     + f" | {best} | {margin:+.3f} |")
    lines += ["", "## Every row, suite mean and per regime", "",
              "| row | suite mean V | free | hands | handwriting | " + " | ".join(cfg["builtin"]) + " |",
              "|---|---:|---:|---:|---:|" + "---:|" * len(cfg["builtin"])]
    for r in cfg["rows"]:
        per = {g: [mean(docs[r, c]) for c in cfg["corpora"] if regime(c) == g] for g in ("free", "hands", "handwriting")}
        cells = [f"{np.mean([mean(docs[r, c]) for c in cfg['corpora']]):.3f}"] + \
                [f"{np.mean(v):.3f}" if v else "–" for v in per.values()] + \
                [f"{mean(docs[r, c]):.3f}" for c in cfg["builtin"]]
        label = f"**`{r}`**" if r == ours else f"`{r}`"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "## Targets", "", "| target | measured | verdict | misses |", "|---|---|---|---|"]
    for v in verdicts(docs, cfg) + side_verdicts(side, cfg):
        lines.append(f"| {v['target']} | {v['measured']} | {'met' if v['ok'] else '**not met**'} | "
                     f"{', '.join(v['misses']) or '–'} |")
    if side["missing"]:
        lines += ["", f"Not yet measured (`--partial`): {', '.join(side['missing'])}."]
    if cfg["rho_note"]:
        lines += ["", "The ρ studies: " + " ".join(cfg["rho_note"])]
    if machines := machines_section(list(docs.values()), list(dict.fromkeys(r for r, _ in docs)),
                                    {"the suite": cfg["corpora"]}):
        lines += ["", machines.rstrip("\n")]
    return "\n".join(lines) + "\n"


def figure(docs: dict, cfg: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    every = cfg["corpora"] + cfg["builtin"]
    shown = [cfg["ours"]] + cfg["references"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(16, 5.5), gridspec_kw={"width_ratios": [3, 1]})
    x = np.arange(len(every))
    width = 0.8 / (len(shown) + 1)
    for i, r in enumerate(shown):
        ax.bar(x + i * width, [mean(docs[r, c]) for c in every], width, label=r)
    if cfg["deep"]:
        ax.bar(x + len(shown) * width, [best_of(docs, cfg["deep"], c)[1] for c in every], width,
               label="best deep baseline (given K)", color="0.6")
    ax.set_xticks(x + 0.4 - width / 2, every, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("native V-measure")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("V-measure per corpus")
    kt = np.array([docs[cfg["ours"], c]["k_true"] for c in every], dtype=float)
    kf = np.array([mean(docs[cfg["ours"], c], "k_found") for c in every])
    for g, marker in (("free", "o"), ("hands", "s"), ("handwriting", "^"), ("built-in", "D")):
        sel = np.array([regime(c) == g for c in every])
        if sel.any():
            bx.scatter(kt[sel], kf[sel], marker=marker, label=g)
    lo, hi = 10, 1.5 * max(kt.max(), kf.max())
    grid = np.geomspace(lo, hi, 50)
    bx.plot(grid, grid, "k-", lw=0.8)
    bx.fill_between(grid, 0.8 * grid, 1.2 * grid, color="0.85", label="±20%")
    bx.set_xscale("log")
    bx.set_yscale("log")
    bx.set_xlabel("K true")
    bx.set_ylabel(f"K found by {cfg['ours']}")
    bx.legend(fontsize=8)
    bx.set_title("number of types")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def build(params: dict, metrics_dir: Path, out_md: Path, out_png: Path | None, partial: bool = False,
          studies_dir: Path | None = None, timings_dir: Path | None = None) -> str:
    """Write the report. ``partial``: rows other than ours and the references that lack a corpus's
    metrics are left out (and named in the report) instead of being an error."""
    cfg = config(params)
    runs = list(dict.fromkeys([cfg["ours"], *cfg["references"], *cfg["deep"], *cfg["rows"]]))
    every = cfg["corpora"] + cfg["builtin"]
    if partial:
        have = set(complete_rows(metrics_dir, runs, every)) | {cfg["ours"], *cfg["references"]}
        cfg["left_out"] = [r for r in runs if r not in have]
        cfg["deep"] = [r for r in cfg["deep"] if r in have]
        cfg["rows"] = [r for r in cfg["rows"] if r in have]
        runs = [r for r in runs if r in have]
    docs = load(metrics_dir, runs, every)
    timings_dir = Path(timings_dir) if timings_dir is not None else Path(metrics_dir).parent / "timings"
    for (run, corpus), doc in docs.items():     # the machine each row's fits ran on, for the Machines section
        add_wall_time(doc, timings_dir / f"{run}_{corpus}.json")
    seeds = {r: seed_counts(docs, r, cfg["corpora"], cfg["builtin"]) for r in runs}
    side = load_side(cfg, metrics_dir, studies_dir or Path(metrics_dir).parent / "studies", partial, timings_dir)
    text = markdown(docs, cfg, seeds, side)
    atomic_write_text(out_md, text)
    if out_png is not None:
        figure(docs, cfg, out_png)
    return text


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrics-dir", default=str(REPO_ROOT / "reports" / "metrics"))
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "suite.md"))
    ap.add_argument("--studies-dir", default=str(REPO_ROOT / "reports" / "studies"))
    ap.add_argument("--timings-dir", default=str(REPO_ROOT / "reports" / "timings"))
    ap.add_argument("--figure", default=str(REPO_ROOT / "reports" / "figures" / "suite.png"))
    ap.add_argument("--partial", action="store_true",
                    help="leave out (and name) the rows not yet evaluated on every corpus instead of failing")
    args = ap.parse_args(argv)
    text = build(load_params(), Path(args.metrics_dir), Path(args.out), Path(args.figure), partial=args.partial,
                 studies_dir=Path(args.studies_dir), timings_dir=Path(args.timings_dir))
    print(text.split("## Targets", 1)[1].strip())


if __name__ == "__main__":
    main()
