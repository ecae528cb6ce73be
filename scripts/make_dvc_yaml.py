#!/usr/bin/env python3
"""Writes dvc.yaml and full/dvc.yaml from params.yaml: run it after adding a corpus, a row or a source file.

    .venv/bin/python scripts/make_dvc_yaml.py          # rewrites both
    .venv/bin/python scripts/make_dvc_yaml.py --check  # exit 1 if either differs (a test runs this)

Why generated: each stage depends on its own script, the modules it really imports and its exact
parameter keys (DVC's example-get-started style), and the suite's stages list their 18 corpora's
outputs one by one; writing that by hand drifts.

Why two files: `dvc repro` runs the dvc.yaml of the working directory, and that is the main job a
newcomer runs first — every row on the built-in corpus of ``report.main_corpora`` (cypriot), its
table and inventory, in minutes. full/dvc.yaml holds the rest (hours on 2 cores): `dvc repro
--all-pipelines` (`make repro-full`) runs both; both are one DVC graph, so the full tables reuse the
main job's outputs. Layout:

- prepare@<builtin>, prepare_suite@<suite corpus>, distances@<corpus>: one stage per corpus;
- train_<group>@<run>-<builtin>, evaluate@<run>-<builtin>: one stage per row and built-in corpus;
- train_suite_<group>@<run>, evaluate_suite@<run>: one stage per row over all suite corpora, in one
  process (a Python start costs seconds, 13 rows x 18 corpora of them would cost most of an hour;
  the suite corpora share prepare.suite, so they change together anyway);
- inventory, report_main (the main job's table), report, suite_report, ablation, paper_check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CORE = ["src/signclust/models/train.py", "src/signclust/models/base.py", "src/signclust/models/params.py",
        "src/signclust/models/checkpoint.py", "src/signclust/data/corpus.py", "src/signclust/distances/provider.py",
        "src/signclust/config.py", "src/signclust/io.py", "src/signclust/tracking.py", "src/signclust/progress.py"]
NETS = "src/signclust/models/baselines/_nets.py"
CODES = "src/signclust/models/baselines/_codes.py"
GLYPHS = "src/signclust/data/glyphs.py"
# lm's hand normalisation (text_deslant): the slant and shear, and the importer's crop-and-centre it ends with
SLANT = ["src/signclust/data/slant.py", "src/signclust/data/import_corpus.py"]
MERGING = "src/signclust/models/merging.py"
ENCODER = "src/signclust/models/visual_encoder.py"
STYLE = "src/signclust/models/style_alignment.py"      # lm's pass after the fit
# what the distance stage computes with, and what a model reading its outputs computes on demand with
METRIC = ["src/signclust/distances/l1.py", "src/signclust/distances/hamming.py", "src/signclust/distances/metrics.py"]
# train group -> (rows, files besides CORE (``{run}`` = the row's method file), needs distances, models key, seed set)
GROUPS = {
    "lm": (["lm"], ["src/signclust/models/lm_clusterer.py", STYLE, ENCODER, MERGING, GLYPHS, *SLANT, NETS], False, False,
           None),
    "lm_gradient": (["lm_v1", "lm_seed"], ["src/signclust/models/lm_gradient.py", GLYPHS, NETS] + METRIC,
                    True, False, None),
    "classical": (["ward_pixels", "ward_glyphs", "kmeans", "ward", "dpgmm"],
                  ["src/signclust/models/baselines/classical.py", "src/signclust/models/baselines/dp_moves.py",
                   MERGING, NETS, CODES, GLYPHS], False, False, None),
    "deep": (["jule", "deepcluster", "twostage", "swav"],
             ["src/signclust/models/baselines/{run}.py", NETS] + METRIC, True, True, "suite_deep"),
    # the deep baseline with a helper module of its own (its autoencoder and UMAP codes, shared with dpgmm)
    "deepdpm": (["deepdpm"], ["src/signclust/models/baselines/deepdpm.py", CODES, NETS] + METRIC, True, True,
                "suite_deep"),
}
EVALUATE = ["src/signclust/evaluation/evaluate.py", "src/signclust/evaluation/metrics.py",
            "src/signclust/models/base.py"]
EVALUATE_PARAMS = ["evaluate.pca_dims", "evaluate.std_ddof", "evaluate.fixed_k_offsets"]


def suite_corpora(params: dict) -> list[str]:
    s = params["prepare"]["suite"]
    return [f"{script}_{regime}" for script in s["scripts"] for regime in s["regimes"]]


def out_file(path: str) -> dict:
    return {path: {"cache": False}}


def build(params: dict) -> tuple[dict, dict]:
    """(the main job's dvc.yaml, full/dvc.yaml): the main job is every row on ``report.main_corpora``, the
    rest every other stage; one graph, so a full stage's inputs made by the main job are shared, not copied."""
    builtin = [c for c in params["report"]["corpora"]]
    main = list(params["report"]["main_corpora"])
    unknown = [c for c in main if c not in builtin]
    if unknown:
        sys.exit(f"error: report.main_corpora {unknown} not in report.corpora {builtin}")
    rest = [c for c in builtin if c not in main]
    suite = suite_corpora(params)
    rows = [r for g in GROUPS.values() for r in g[0]]
    shown = ["cypriot", "lineara", "latin_free", "japanese_free"]
    m: dict = {}   # dvc.yaml
    f: dict = {}   # full/dvc.yaml
    common_prepare = ["prepare.seed", "prepare.image_size", "prepare.sheet_types", "prepare.sheet_tokens"]

    def prepare(corpora: list) -> dict:
        return {"foreach": corpora, "do": {
            "cmd": "python -m signclust.data.prepare ${item}",
            "deps": [f"src/signclust/data/{f}.py" for f in ("prepare", "sources", "fonts", "render", "corpus",
                                                            "contact_sheet")],
            "params": common_prepare + ["prepare.render", "prepare.corpora.${item}"],
            "outs": ["data/corpora/${item}", out_file("reports/figures/contact_${item}.png")]}}

    def distances(corpora: list) -> dict:
        return {"foreach": corpora, "do": {
            "cmd": "python -m signclust.distances.stage ${item}",
            "deps": ["data/corpora/${item}", "src/signclust/distances/stage.py", *METRIC, GLYPHS,
                     "src/signclust/data/corpus.py"],
            "params": ["distances.k", "distances.dense_max_images", "distances.chunk_rows", "distances.metric"],
            "outs": ["data/distances/${item}"]}}

    def train(runs: list, files: list, dist: bool, models_key: bool, corpora: list) -> dict:
        src = [f.replace("{run}", "${item.run}") for f in files]
        return {
            "matrix": {"run": runs, "corpus": corpora},
            "cmd": "python -m signclust.models.train ${item.run} ${item.corpus}",
            "deps": ["data/corpora/${item.corpus}"] + (["data/distances/${item.corpus}"] if dist else []) + src + CORE,
            "params": ["train.device", "train.seeds", "runs.${item.run}"] + (["models.${item.run}"] if models_key else []),
            "outs": ["models/runs/${item.run}/${item.corpus}",
                     out_file("reports/timings/${item.run}_${item.corpus}.json")]}

    def evaluate(corpora: list) -> dict:
        return {
            "matrix": {"run": rows, "corpus": corpora},
            "cmd": "python -m signclust.evaluation.evaluate ${item.run} ${item.corpus}",
            "deps": ["data/corpora/${item.corpus}", "models/runs/${item.run}/${item.corpus}"] + EVALUATE,
            "params": EVALUATE_PARAMS,
            "metrics": [out_file("reports/metrics/${item.run}_${item.corpus}.json")]}

    def inventory(corpora: list) -> dict:
        return {
            "matrix": {"run": ["lm"], "corpus": corpora},
            "cmd": "python -m signclust.reports.inventory ${item.run} ${item.corpus}",
            "deps": ["data/corpora/${item.corpus}", "models/runs/${item.run}/${item.corpus}",
                     "src/signclust/reports/inventory.py", "src/signclust/reports/inventory_assets.py"],
            "params": ["report.inventory"],
            "outs": [out_file("reports/inventory/${item.run}_${item.corpus}.html"),
                     out_file("reports/inventory/${item.run}_${item.corpus}.png")]}

    def table(corpora: list, out: str, figure: str, params_keys: list, extra: str = "") -> dict:
        return {
            "cmd": "python -m signclust.reports.table" + extra,
            "deps": [f"reports/metrics/{r}_{c}.json" for c in corpora for r in params["report"]["methods"]]
            + [f"reports/timings/{r}_{c}.json" for c in corpora for r in params["report"]["methods"]]
            + ["src/signclust/reports/table.py"],
            "params": params_keys,
            "outs": [out_file(out), out_file(figure)]}

    # -- the main job: dvc.yaml ----------------------------------------------------------------------
    m["prepare"] = prepare(main)
    m["distances"] = distances(main)
    for group, (runs, files, dist, models_key, _) in GROUPS.items():
        m[f"train_{group}"] = train(runs, files, dist, models_key, main)
    m["evaluate"] = evaluate(main)
    if shown_main := [c for c in shown if c in main]:
        m["inventory"] = inventory(shown_main)
    md, png = f"reports/comparison_{'_'.join(main)}.md", f"reports/figures/comparison_{'_'.join(main)}.png"
    m["report_main"] = table(main, md, png, ["report.methods", "report.main_corpora"],
                             f" --corpora {' '.join(main)} --out {md} --figure {png}")

    # -- everything else: full/dvc.yaml ----------------------------------------------------------------
    if rest:
        f["prepare"] = prepare(rest)
    f["prepare_suite"] = {"foreach": suite, "do": {
        "cmd": "python -m signclust.data.prepare ${item}",
        "deps": [f"src/signclust/data/{f}.py" for f in ("prepare", "suite", "corpus", "contact_sheet", "import_corpus")],
        "params": common_prepare + ["prepare.suite"],
        "outs": ["data/corpora/${item}", out_file("reports/figures/contact_${item}.png")]}}
    f["distances"] = distances(rest + suite)
    for group, (runs, files, dist, models_key, seed_set) in GROUPS.items():
        if rest:
            f[f"train_{group}"] = train(runs, files, dist, models_key, rest)
        seeds = f" --seed-set {seed_set}" if seed_set else ""
        src = [f.replace("{run}", "${item}") for f in files]
        f[f"train_suite_{group}"] = {"foreach": runs, "do": {
            "cmd": "python -m signclust.models.train ${item} " + " ".join(suite) + seeds,
            "deps": [f"data/corpora/{c}" for c in suite] + ([f"data/distances/{c}" for c in suite] if dist else [])
            + src + CORE,
            "params": ["train.device", f"train.seed_sets.{seed_set}" if seed_set else "train.seeds", "runs.${item}"]
            + (["models.${item}"] if models_key else []),
            "outs": [f"models/runs/${{item}}/{c}" for c in suite]
            + [out_file(f"reports/timings/${{item}}_{c}.json") for c in suite]}}
    if rest:
        f["evaluate"] = evaluate(rest)
    f["evaluate_suite"] = {"foreach": rows, "do": {
        "cmd": "python -m signclust.evaluation.evaluate ${item} " + " ".join(suite),
        "deps": [f"data/corpora/{c}" for c in suite] + [f"models/runs/${{item}}/{c}" for c in suite] + EVALUATE,
        "params": EVALUATE_PARAMS,
        "metrics": [out_file(f"reports/metrics/${{item}}_{c}.json") for c in suite]}}
    f["inventory"] = inventory([c for c in shown if c not in main])
    f["report"] = table(builtin, "reports/comparison.md", "reports/figures/comparison.png",
                        ["report.methods", "report.corpora"])
    suite_cfg = params["report"]["suite"]
    f["suite_report"] = {
        "cmd": "python -m signclust.reports.suite",
        "deps": [f"reports/metrics/{r}_{c}.json" for c in suite_cfg["corpora"] + suite_cfg["builtin"]
                 for r in suite_cfg["rows"]]
        + [f"reports/timings/{r}_{c}.json" for c in suite_cfg["corpora"] + suite_cfg["builtin"]
           for r in suite_cfg["rows"]]     # ours' wall times, and the machine of every row
        + [f"reports/metrics/ablation_{c}.json" for c in suite_cfg["corpora"] if c.endswith("_free")]
        + [f"reports/studies/{s}.json" for s in suite_cfg.get("rho_studies") or []]
        + ["src/signclust/reports/suite.py", "src/signclust/reports/table.py"],
        "params": ["report.suite"],
        "outs": [out_file("reports/suite.md"), out_file("reports/figures/suite.png")]}
    ablate = ["cypriot"] + [c for c in suite if c.endswith("_free")] + ["latin_hands", "latin_handwriting"]
    f["ablation"] = {"foreach": ablate, "do": {
        "cmd": "python -m signclust.evaluation.ablation ${item}",
        "deps": ["data/corpora/${item}", "data/distances/${item}", "src/signclust/models/lm_clusterer.py", STYLE,
                 ENCODER, MERGING, GLYPHS, *SLANT, NETS, "src/signclust/evaluation/ablation.py"] + EVALUATE[:2] + CORE,
        "params": ["ablation", "runs.lm"] + EVALUATE_PARAMS,
        "outs": [out_file("reports/ablation_${item}.md"), out_file("reports/figures/ablation_${item}.png"),
                 out_file("reports/timings/ablation_${item}.json")],   # wall times: no stage reads them
        "metrics": [out_file("reports/metrics/ablation_${item}.json")]}}
    baselines = ["_nets", "_codes", "classical", "dp_moves", "deepcluster", "deepdpm", "jule", "swav", "twostage"]
    f["paper_check"] = {
        "cmd": "python -m signclust.reports.paper_check",
        "deps": [f"src/signclust/models/baselines/{b}.py" for b in baselines]
        + [MERGING, "src/signclust/data/benchmarks.py", "src/signclust/reports/paper_check.py"] + CORE,
        "params": ["paper_check"] + [f"models.{m}" for runs, _, _, models_key, _ in GROUPS.values() if models_key
                                     for m in runs],
        "outs": [out_file("reports/paper_check.md"), out_file("reports/paper_check.json")]}
    for stage in f.values():      # full/dvc.yaml's paths are the repository's, as in dvc.yaml
        (stage["do"] if "do" in stage else stage)["wdir"] = ".."
    return {"stages": m, "plots": plots(main, "")}, {"stages": f, "plots": plots(rest, "../", suite)}


def plots(corpora: list[str], up: str, suite: list[str] | None = None) -> list:
    """The plots of ``corpora`` (and of the suite's, when given); ``up``: the way from the dvc.yaml to the
    repository (top-level plot paths are relative to their dvc.yaml, not to a stage's wdir)."""
    h = up + "models/runs/{}/{}/seed0/history.csv"
    shown = corpora + (["latin_free", "japanese_free"] if suite else [])
    out = [
        {"lm_types_per_round": {"title": "lm: types left after each merge round (seed 0)", "template": "linear",
                                "x": "epoch", "y": {h.format("lm", c): "types" for c in shown}}},
        {"lm_v1_loss": {"title": "lm_v1 (gradient LSTM): loss and types in use per epoch (seed 0)",
                        "template": "linear", "x": "epoch",
                        "y": {h.format("lm_v1", c): ["loss", "types_in_use"] for c in corpora}}},
        {"deep_baselines_loss": {"title": "deep baselines: training loss per epoch (seed 0)", "template": "linear",
                                 "x": "epoch", "y": {h.format(r, c): "loss" for r in ["deepcluster", "swav", "twostage"]
                                                     for c in corpora}}},
        {"clusters_per_epoch": {"title": "clusters per epoch of the methods that find K (seed 0)",
                                "template": "linear", "x": "epoch",
                                "y": {h.format(r, c): "k" for r in ["jule", "deepdpm"] for c in corpora}}},
    ]
    figures = (["comparison.png", "suite.png", "ablation_cypriot.png"] if suite else
               [f"comparison_{'_'.join(corpora)}.png"])
    return out + [f"{up}reports/figures/{name}" for name in figures]


HEADER = """# Generated by scripts/make_dvc_yaml.py from params.yaml: edit that script, then run it.
# The main job (`dvc repro`, `make repro`): every row on the built-in corpus of report.main_corpora, 3 seeds,
# then its comparison table and sign inventory; full/dvc.yaml holds the rest of the tables (`make repro-full`).
# data -> distances -> models (ours + baselines) -> evaluation -> reports. Each stage depends on its own
# script, the modules it really imports and its exact parameter keys: an edit to one method re-runs
# that method's rows only.
"""
FULL_HEADER = """# Generated by scripts/make_dvc_yaml.py from params.yaml: edit that script, then run it.
# The full tables beside the main job of ../dvc.yaml: the other built-in corpora, the multi-script suite (its
# stages run one row over all 18 suite corpora in one process), the ablation and the paper check. Every stage
# runs in the repository (wdir ..). `make repro-full` (dvc repro --all-pipelines) runs both files;
# one stage: dvc repro -s full/dvc.yaml:<stage>.
"""
FILES = {"dvc.yaml": HEADER, "full/dvc.yaml": FULL_HEADER}


def render(params: dict) -> dict[str, str]:
    """{path under the repository: text} of both pipeline files."""
    return {path: head + yaml.safe_dump(doc, sort_keys=False, width=120, default_flow_style=False)
            for (path, head), doc in zip(FILES.items(), build(params))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if dvc.yaml or full/dvc.yaml is not what this "
                                                         "script writes")
    args = ap.parse_args(argv)
    texts = render(yaml.safe_load((ROOT / "params.yaml").read_text()))
    if args.check:
        stale = [p for p, text in texts.items() if not (ROOT / p).is_file() or (ROOT / p).read_text() != text]
        print(f"{' and '.join(stale)} differ from scripts/make_dvc_yaml.py's output" if stale
              else "dvc.yaml and full/dvc.yaml are up to date")
        return 1 if stale else 0
    for path, text in texts.items():
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(text)
        print(f"wrote {ROOT / path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
