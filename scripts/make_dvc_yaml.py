#!/usr/bin/env python3
"""Writes dvc.yaml from params.yaml: run it after adding a corpus, a row or a source file.

    .venv/bin/python scripts/make_dvc_yaml.py          # rewrites dvc.yaml
    .venv/bin/python scripts/make_dvc_yaml.py --check  # exit 1 if dvc.yaml differs (a test runs this)

Why generated: each stage depends on its own script, the modules it really imports and its exact
parameter keys (DVC's example-get-started style), and the suite's stages list their 18 corpora's
outputs one by one; writing that by hand drifts. Layout:

- prepare@<builtin>, prepare_suite@<suite corpus>, distances@<corpus>: one stage per corpus;
- train_<group>@<run>-<builtin>, evaluate@<run>-<builtin>: one stage per row and built-in corpus;
- train_suite_<group>@<run>, evaluate_suite@<run>: one stage per row over all suite corpora, in one
  process (a Python start costs seconds, 13 rows x 18 corpora of them would cost most of an hour;
  the suite corpora share prepare.suite, so they change together anyway);
- inventory, report, suite_report, ablation, paper_check.
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
MERGING = "src/signclust/models/merging.py"
ENCODER = "src/signclust/models/visual_encoder.py"
STYLE = "src/signclust/models/style_alignment.py"      # lm's pass after the fit
# what the distance stage computes with, and what a model reading its outputs computes on demand with
METRIC = ["src/signclust/distances/l1.py", "src/signclust/distances/hamming.py", "src/signclust/distances/metrics.py"]
# train group -> (rows, files besides CORE (``{run}`` = the row's method file), needs distances, models key, seed set)
GROUPS = {
    "lm": (["lm"], ["src/signclust/models/lm_clusterer.py", STYLE, ENCODER, MERGING, GLYPHS, NETS], False, False, None),
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


def build(params: dict) -> dict:
    builtin = [c for c in params["report"]["corpora"]]
    suite = suite_corpora(params)
    rows = [r for g in GROUPS.values() for r in g[0]]
    st: dict = {}
    common_prepare = ["prepare.seed", "prepare.image_size", "prepare.sheet_types", "prepare.sheet_tokens"]
    st["prepare"] = {"foreach": builtin, "do": {
        "cmd": "python -m signclust.data.prepare ${item}",
        "deps": [f"src/signclust/data/{f}.py" for f in ("prepare", "sources", "fonts", "render", "corpus", "contact_sheet")],
        "params": common_prepare + ["prepare.render", "prepare.corpora.${item}"],
        "outs": ["data/corpora/${item}", out_file("reports/figures/contact_${item}.png")]}}
    st["prepare_suite"] = {"foreach": suite, "do": {
        "cmd": "python -m signclust.data.prepare ${item}",
        "deps": [f"src/signclust/data/{f}.py" for f in ("prepare", "suite", "corpus", "contact_sheet", "import_corpus")],
        "params": common_prepare + ["prepare.suite"],
        "outs": ["data/corpora/${item}", out_file("reports/figures/contact_${item}.png")]}}
    st["distances"] = {"foreach": builtin + suite, "do": {
        "cmd": "python -m signclust.distances.stage ${item}",
        "deps": ["data/corpora/${item}", "src/signclust/distances/stage.py", *METRIC, GLYPHS,
                 "src/signclust/data/corpus.py"],
        "params": ["distances.k", "distances.dense_max_images", "distances.chunk_rows", "distances.metric"],
        "outs": ["data/distances/${item}"]}}
    for group, (runs, files, dist, models_key, seed_set) in GROUPS.items():
        src = [f.replace("{run}", "${item.run}") for f in files]
        params_b = ["train.device", "train.seeds", "runs.${item.run}"] + (["models.${item.run}"] if models_key else [])
        st[f"train_{group}"] = {
            "matrix": {"run": runs, "corpus": builtin},
            "cmd": "python -m signclust.models.train ${item.run} ${item.corpus}",
            "deps": ["data/corpora/${item.corpus}"] + (["data/distances/${item.corpus}"] if dist else []) + src + CORE,
            "params": params_b,
            "outs": ["models/runs/${item.run}/${item.corpus}",
                     out_file("reports/timings/${item.run}_${item.corpus}.json")]}
        seeds = f" --seed-set {seed_set}" if seed_set else ""
        src = [f.replace("{run}", "${item}") for f in files]
        st[f"train_suite_{group}"] = {"foreach": runs, "do": {
            "cmd": "python -m signclust.models.train ${item} " + " ".join(suite) + seeds,
            "deps": [f"data/corpora/{c}" for c in suite] + ([f"data/distances/{c}" for c in suite] if dist else [])
            + src + CORE,
            "params": ["train.device", f"train.seed_sets.{seed_set}" if seed_set else "train.seeds", "runs.${item}"]
            + (["models.${item}"] if models_key else []),
            "outs": [f"models/runs/${{item}}/{c}" for c in suite]
            + [out_file(f"reports/timings/${{item}}_{c}.json") for c in suite]}}
    st["evaluate"] = {
        "matrix": {"run": rows, "corpus": builtin},
        "cmd": "python -m signclust.evaluation.evaluate ${item.run} ${item.corpus}",
        "deps": ["data/corpora/${item.corpus}", "models/runs/${item.run}/${item.corpus}"] + EVALUATE,
        "params": EVALUATE_PARAMS,
        "metrics": [out_file("reports/metrics/${item.run}_${item.corpus}.json")]}
    st["evaluate_suite"] = {"foreach": rows, "do": {
        "cmd": "python -m signclust.evaluation.evaluate ${item} " + " ".join(suite),
        "deps": [f"data/corpora/{c}" for c in suite] + [f"models/runs/${{item}}/{c}" for c in suite] + EVALUATE,
        "params": EVALUATE_PARAMS,
        "metrics": [out_file(f"reports/metrics/${{item}}_{c}.json") for c in suite]}}
    shown = ["cypriot", "lineara", "latin_free", "japanese_free"]
    st["inventory"] = {
        "matrix": {"run": ["lm"], "corpus": shown},
        "cmd": "python -m signclust.reports.inventory ${item.run} ${item.corpus}",
        "deps": ["data/corpora/${item.corpus}", "models/runs/${item.run}/${item.corpus}",
                 "src/signclust/reports/inventory.py", "src/signclust/reports/inventory_assets.py"],
        "params": ["report.inventory"],
        "outs": [out_file("reports/inventory/${item.run}_${item.corpus}.html"),
                 out_file("reports/inventory/${item.run}_${item.corpus}.png")]}
    st["report"] = {
        "cmd": "python -m signclust.reports.table",
        "deps": [f"reports/metrics/{r}_{c}.json" for c in builtin for r in params["report"]["methods"]]
        + [f"reports/timings/{r}_{c}.json" for c in builtin for r in params["report"]["methods"]]
        + ["src/signclust/reports/table.py"],
        "params": ["report.methods", "report.corpora"],
        "outs": [out_file("reports/comparison.md"), out_file("reports/figures/comparison.png")]}
    suite_cfg = params["report"]["suite"]
    st["suite_report"] = {
        "cmd": "python -m signclust.reports.suite",
        "deps": [f"reports/metrics/{r}_{c}.json" for c in suite_cfg["corpora"] + suite_cfg["builtin"]
                 for r in suite_cfg["rows"]]
        + [f"reports/timings/{suite_cfg['ours']}_{c}.json" for c in suite_cfg["corpora"]]
        + [f"reports/metrics/ablation_{c}.json" for c in suite_cfg["corpora"] if c.endswith("_free")]
        + [f"reports/studies/{s}.json" for s in suite_cfg.get("rho_studies") or []]
        + ["src/signclust/reports/suite.py", "src/signclust/reports/table.py"],
        "params": ["report.suite"],
        "outs": [out_file("reports/suite.md"), out_file("reports/figures/suite.png")]}
    ablate = ["cypriot"] + [c for c in suite if c.endswith("_free")] + ["latin_hands", "latin_handwriting"]
    st["ablation"] = {"foreach": ablate, "do": {
        "cmd": "python -m signclust.evaluation.ablation ${item}",
        "deps": ["data/corpora/${item}", "data/distances/${item}", "src/signclust/models/lm_clusterer.py", STYLE,
                 ENCODER, MERGING, GLYPHS, NETS, "src/signclust/evaluation/ablation.py"] + EVALUATE[:2] + CORE,
        "params": ["ablation", "runs.lm"] + EVALUATE_PARAMS,
        "outs": [out_file("reports/ablation_${item}.md"), out_file("reports/figures/ablation_${item}.png"),
                 out_file("reports/timings/ablation_${item}.json")],   # wall times: no stage reads them
        "metrics": [out_file("reports/metrics/ablation_${item}.json")]}}
    baselines = ["_nets", "_codes", "classical", "dp_moves", "deepcluster", "deepdpm", "jule", "swav", "twostage"]
    st["paper_check"] = {
        "cmd": "python -m signclust.reports.paper_check",
        "deps": [f"src/signclust/models/baselines/{b}.py" for b in baselines]
        + [MERGING, "src/signclust/data/benchmarks.py", "src/signclust/reports/paper_check.py"] + CORE,
        "params": ["paper_check"] + [f"models.{m}" for runs, _, _, models_key, _ in GROUPS.values() if models_key
                                     for m in runs],
        "outs": [out_file("reports/paper_check.md"), out_file("reports/paper_check.json")]}
    return {"stages": st, "plots": plots(suite)}


def plots(suite: list[str]) -> list:
    h = "models/runs/{}/{}/seed0/history.csv"
    return [
        {"lm_types_per_round": {"title": "lm: types left after each merge round (seed 0)", "template": "linear",
                                "x": "epoch", "y": {h.format("lm", c): "types" for c in
                                                    ["cypriot", "lineara", "latin_free", "japanese_free"]}}},
        {"lm_v1_loss": {"title": "lm_v1 (gradient LSTM): loss and types in use per epoch (seed 0)",
                        "template": "linear", "x": "epoch",
                        "y": {h.format("lm_v1", c): ["loss", "types_in_use"] for c in ["cypriot", "lineara"]}}},
        {"deep_baselines_loss": {"title": "deep baselines: training loss per epoch (seed 0)", "template": "linear",
                                 "x": "epoch", "y": {h.format(r, c): "loss" for r in ["deepcluster", "swav", "twostage"]
                                                     for c in ["cypriot", "lineara"]}}},
        {"clusters_per_epoch": {"title": "clusters per epoch of the methods that find K (seed 0)",
                                "template": "linear", "x": "epoch",
                                "y": {h.format(r, c): "k" for r in ["jule", "deepdpm"] for c in ["cypriot", "lineara"]}}},
        "reports/figures/comparison.png",
        "reports/figures/suite.png",
        "reports/figures/ablation_cypriot.png",
    ]


HEADER = """# Generated by scripts/make_dvc_yaml.py from params.yaml: edit that script, then run it.
# data -> distances -> models (ours + baselines) -> evaluation -> reports. Each stage depends on its own
# script, the modules it really imports and its exact parameter keys: an edit to one method re-runs
# that method's rows only. Suite stages run one row over all 18 suite corpora in one process.
"""


def render(params: dict) -> str:
    return HEADER + yaml.safe_dump(build(params), sort_keys=False, width=120, default_flow_style=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if dvc.yaml is not what this script writes")
    args = ap.parse_args(argv)
    text = render(yaml.safe_load((ROOT / "params.yaml").read_text()))
    target = ROOT / "dvc.yaml"
    if args.check:
        same = target.read_text() == text
        print("dvc.yaml is up to date" if same else "dvc.yaml differs from scripts/make_dvc_yaml.py's output")
        return 0 if same else 1
    target.write_text(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
