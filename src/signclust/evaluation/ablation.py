"""Stage `ablation`: what each loss of the LM clusterer buys, measured over several seeds.

    python -m signclust.evaluation.ablation cypriot                 # params.yaml `ablation`
    python -m signclust.evaluation.ablation cypriot --seeds 0 --variants default no_lm --epochs 5

Each *variant* of params.yaml ``ablation.variants`` is the base configuration (the run
``ablation.run`` of ``runs``, i.e. the LM clusterer with ``models.lm``) changed by

    preset: NAME            a preset of the method (params.yaml ``presets.lm``, e.g. ``seed``, or a
                            class preset), applied first
    set:    {param: value}  parameters replaced (``w_hom: 0`` removes L_hom)
    scale:  {param: factor} parameters multiplied (``w_lm: 3`` is L_LM three times as heavy)

or, with ``run: NAME``, another row of ``runs`` altogether (e.g. ``lm_v1``, ``lm_seed``: the
earlier readings of the seed, kept beside the shipped method), and ``ablation.epochs`` (when not
null) replaces the number of epochs of every variant that trains in epochs, so
the whole grid stays affordable on a CPU. Every variant x seed is fitted, scored against the
gold labels (native V, NMI, ARI, ACC, K found; fixed-K V: Ward on its embedding at
K_true + offsets, as the evaluate stage does) and timed.

Outputs (atomic): reports/ablation_<corpus>.md (table, Δ V against ``ablation.reference``),
reports/figures/ablation_<corpus>.png (bars with std over seeds), reports/metrics/ablation_<corpus>.json
(what the fits determine: same params + seeds, same bytes; the suite report reads it) and
reports/timings/ablation_<corpus>.json (the wall time of each fit, which no stage reads).
MLflow: experiment ``ablation``, one parent run per corpus, one nested child run per
variant x seed (its parameters, per-epoch losses and scores), so ``mlflow ui`` compares
them side by side. Each finished fit is cached under models/checkpoints/ablation/<corpus>/
(keyed by the full configuration, the corpus content and the method's code version): an
interrupted stage resumes, an edited method refits.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from signclust import tracking
from signclust.config import REPO_ROOT, deep_update, load_params, numeric_platform
from signclust.data.corpus import Corpus
from signclust.errors import UserError, cli_main
from signclust.evaluation import evaluate as ev
from signclust.io import atomic_path, atomic_write_text, write_json
from signclust.models.base import FitContext, get_clusterer
from signclust.models.checkpoint import code_version
from signclust.models.train import preset_values, run_config

DEFAULTS = {
    "run": "lm",            # base configuration: a row of params.yaml `runs`
    "seeds": [0, 1, 2],
    "epochs": None,         # replaces the epochs of every variant when set
    "reference": "default",  # Δ V is measured against this variant
    "variants": {"default": {}},
}
VARIANT_KEYS = {"run", "preset", "set", "scale"}
# (key in a fit's scores, table header, format)
COLUMNS = [
    ("v_measure", "V", "{:.3f}"),
    ("nmi", "NMI", "{:.3f}"),
    ("ari", "ARI", "{:.3f}"),
    ("acc", "ACC", "{:.3f}"),
    ("k_found", "K", "{:.1f}"),
    ("fixed_k_v_measure", "fixed-K V", "{:.3f}"),
]
SCALAR_KEYS = ("v_measure", "homogeneity", "completeness", "nmi", "ari", "acc", "purity", "k_found",
               "fixed_k_v_measure", "fixed_k_v_at_ktrue")


def config(params: dict) -> dict:
    cfg = {**DEFAULTS, **(params.get("ablation") or {})}
    if not cfg["variants"]:
        raise UserError("params.yaml ablation.variants is empty")
    for name, spec in cfg["variants"].items():
        unknown = set(spec or {}) - VARIANT_KEYS
        if unknown:
            raise UserError(f"ablation variant '{name}': unknown key(s) {', '.join(sorted(unknown))} "
                            f"(use {', '.join(sorted(VARIANT_KEYS))})")
    if cfg["reference"] not in cfg["variants"]:
        raise UserError(f"ablation.reference '{cfg['reference']}' is not one of the variants")
    return cfg


def variant_params(name: str, spec: dict | None, base: dict, method: str, params: dict,
                   defaults: dict, epochs: int | None) -> dict:
    """The full parameter dict of one variant: base <- preset <- epochs <- set <- scale (a variant
    that sets its own epochs, e.g. 0 for the initialisation alone, keeps them)."""
    spec = spec or {}
    cfg = {**defaults, **base}
    if spec.get("preset"):
        cfg = deep_update(cfg, preset_values(method, spec["preset"], params, f"ablation variant '{name}'"))
    if epochs is not None and "epochs" in cfg:
        cfg["epochs"] = int(epochs)
    cfg = deep_update(cfg, spec.get("set") or {})
    for key, factor in (spec.get("scale") or {}).items():
        if not isinstance(cfg.get(key), (int, float)) or isinstance(cfg.get(key), bool):
            raise UserError(f"ablation variant '{name}': cannot scale '{key}' (not a numeric parameter)")
        cfg[key] = cfg[key] * float(factor)
    return cfg


def corpus_fingerprint(corpus: Corpus) -> str:
    h = hashlib.sha1()
    h.update(np.ascontiguousarray(corpus.images).tobytes())
    h.update(corpus.image_index().tobytes())
    h.update(corpus.tokens["position"].to_numpy(dtype=np.int64).tobytes())
    h.update("\x00".join(corpus.tokens["label"].astype(str)).encode())
    h.update("\x00".join(corpus.tokens["text_id"].astype(str)).encode())
    return h.hexdigest()[:16]


def evaluate_fit(gold: np.ndarray, result, eval_cfg: dict, seed: int) -> dict:
    """The evaluate stage's scores, without the per-K detail the ablation table does not show."""
    out = ev.score_result(gold, result, eval_cfg, seed)
    out.pop("fixed_k_per_k", None)
    out.pop("embedding", None)
    return out


def summarise(per_seed: dict[str, dict], ddof: int) -> tuple[dict, dict]:
    return ev.summarise(per_seed, ddof, SCALAR_KEYS)


def run_ablation(corpus: Corpus, corpus_name: str, params: dict, seeds: list[int] | None = None,
                 variants: list[str] | None = None, epochs: int | None = None,
                 dist_dir: Path | None = None, cache_dir: Path | None = None,
                 reports_dir: Path | None = None, progress: bool = False) -> tuple[dict, dict]:
    """Fit every variant x seed; return (the metrics document, the fits' wall times), both also
    logged to MLflow. The document holds only what the fits determine; the wall times
    ({variant: {"per_seed": {"seed<N>": {"seconds", "cached"}}, "mean_seconds"}}, the train stage's
    timings layout) are kept apart from it.

    With ``reports_dir`` the table, plot and both JSON files are written there (and attached to the
    parent run).
    """
    cfg = config(params)
    seeds = list(cfg["seeds"] if seeds is None else seeds)
    epochs = cfg["epochs"] if epochs is None else epochs
    names = list(cfg["variants"]) if not variants else list(variants)
    unknown = [v for v in names if v not in cfg["variants"]]
    if unknown:
        raise UserError(f"unknown ablation variant(s) {', '.join(unknown)}; known: {', '.join(cfg['variants'])}")
    if not seeds:
        raise UserError("no seeds to run")
    if not corpus.has_labels:
        raise UserError(f"corpus '{corpus_name}' has no gold labels for every token; the ablation scores "
                        "against them (use a benchmark corpus)")
    method, base, _ = run_config(cfg["run"], params)
    probe = get_clusterer(method, **base)
    defaults = dict(getattr(probe, "p", None) or probe.params)   # every parameter, for the logs
    gold = corpus.labels()
    eval_cfg = ev.config(params)
    device = (params.get("train") or {}).get("device", "auto")
    distances = None
    if dist_dir is not None and Path(dist_dir).exists():
        from signclust.distances.provider import open_distances
        distances = open_distances(corpus, dist_dir)
    fingerprint = corpus_fingerprint(corpus)
    doc = {"corpus": corpus_name, "method": method, "base_run": cfg["run"], "seeds": seeds,
           "epochs": epochs, "reference": cfg["reference"], "n_tokens": int(corpus.n_tokens),
           "k_true": int(len(np.unique(gold))), "variants": {}}
    timings: dict = {}
    with tracking.run("ablation", f"ablation/{corpus_name}",
                      tags={"corpus": corpus_name, "method": method, "stage": "ablation"}) as parent:
        parent.log_params({"corpus": corpus_name, "method": method, "base_run": cfg["run"],
                           "seeds": seeds, "epochs": epochs, "variants": ",".join(names)})
        for name in names:
            spec = cfg["variants"][name] or {}
            v_method, v_base, v_defaults = method, base, defaults
            if spec.get("run"):                      # another row of `runs`, e.g. lm_v1
                v_method, v_base, _ = run_config(spec["run"], params)
                v_defaults = dict(get_clusterer(v_method, **v_base).params)
            vparams = variant_params(name, spec, v_base, v_method, params, v_defaults, epochs)
            per_seed, fit_times = {}, {}
            for seed in seeds:
                per_seed[f"seed{seed}"], fit_times[f"seed{seed}"] = _fit_one(
                    corpus, gold, v_method, name, spec, vparams, seed, corpus_name, device, distances, eval_cfg,
                    fingerprint, cache_dir, progress)
            measured = [t["seconds"] for t in fit_times.values() if t["seconds"] is not None]
            timings[name] = {"per_seed": fit_times, "mean_seconds": float(np.mean(measured)) if measured else None}
            mean, std = summarise(per_seed, int(eval_cfg["std_ddof"]))
            doc["variants"][name] = {"spec": spec, "method": v_method, "params": vparams,
                                     "mean": mean, "std": std, "per_seed": per_seed}
            parent.log_metrics({f"{name}.{k}_mean": v for k, v in mean.items()})
            if timings[name]["mean_seconds"] is not None:
                parent.log_metrics({f"{name}.seconds_mean": timings[name]["mean_seconds"]})
        ref = doc["variants"].get(cfg["reference"])
        ref_params = ref["params"] if ref else variant_params(cfg["reference"], cfg["variants"][cfg["reference"]],
                                                               base, method, params, defaults, epochs)
        for name, entry in doc["variants"].items():
            entry["changed"] = {k: v for k, v in entry["params"].items() if ref_params.get(k) != v}
            entry["delta_v"] = (entry["mean"]["v_measure"] - ref["mean"]["v_measure"]) if ref else None
            if entry["delta_v"] is not None:
                parent.log_metrics({f"{name}.delta_v": entry["delta_v"]})
        if reports_dir is not None:
            for path in write_outputs(doc, timings, reports_dir).values():
                parent.log_artifact(path)
    return doc, timings


def _fit_one(corpus, gold, method, name, spec, vparams, seed, corpus_name, device, distances, eval_cfg,
             fingerprint, cache_dir, progress) -> tuple[dict, dict]:
    """(the fit's scores, {"seconds": its wall time, "cached": read from the cache}). A cached fit
    keeps the wall time it took when it ran."""
    from signclust.models.base import get_class
    key = hashlib.sha256(json.dumps({"method": method, "params": vparams, "seed": seed, "corpus": fingerprint,
                                     "eval": eval_cfg, "code": code_version(get_class(method))},
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    cache = Path(cache_dir) / f"{name}-seed{seed}-{key}.json" if cache_dir else None
    if cache is not None and cache.exists():
        out = json.loads(cache.read_text())
        seconds = out.pop("seconds", None)     # None: a cache file that did not record it
        print(f"ablation/{corpus_name}/{name}/seed{seed}: cached V = {out['v_measure']:.3f}")
        return out, {"seconds": seconds, "cached": True}
    with tracking.run("ablation", f"{name}/seed{seed}", nested=True,
                      tags={"corpus": corpus_name, "variant": name, "seed": str(seed)}) as child:
        child.log_params({"variant": name, "corpus": corpus_name, "seed": seed,
                          "preset": spec.get("preset") or "", **vparams})
        clusterer = get_clusterer(method, **vparams)
        ctx = FitContext(seed=seed, n_clusters=int(len(np.unique(gold))) if clusterer.needs_k else None,
                         device=device, distances=distances, progress=progress, log_metrics=child.log_metrics)
        t0 = time.time()
        result = clusterer.fit(corpus, ctx)
        seconds = time.time() - t0
        out = evaluate_fit(gold, result, eval_cfg, seed)
        final = (result.info or {}).get("final") or {}
        out["final"] = {k: float(v) for k, v in final.items() if isinstance(v, (int, float))}
        child.log_metrics({**{k: out[k] for k in SCALAR_KEYS if k in out}, "seconds": seconds})
    print(f"ablation/{corpus_name}/{name}/seed{seed}: V = {out['v_measure']:.3f}, K {out['k_found']}, "
          f"{seconds:.1f}s")
    if cache is not None:
        write_json(cache, {**out, "seconds": seconds})
    return out, {"seconds": seconds, "cached": False}


# -- outputs -----------------------------------------------------------------------------------

def markdown(doc: dict, timings: dict | None = None) -> str:
    """The ablation table; with ``timings`` (run_ablation's second value) a last column of wall
    seconds per fit."""
    seeds = doc["seeds"]
    lines = [f"# Ablation of the LM clusterer on {doc['corpus']}", "",
             f"{doc['n_tokens']} tokens, {doc['k_true']} gold types; seeds {', '.join(map(str, seeds))}; "
             f"epochs {doc['epochs'] if doc['epochs'] is not None else 'as configured'}. "
             f"Mean ± std over seeds; Δ V against `{doc['reference']}`. "
             + (f"`s / fit` (reports/timings/ablation_{doc['corpus']}.json): wall time of one fit when it "
                "ran (a cached fit keeps its time), all in one process, so a variant that leaves the contrastive "
                "encoder's glyphs, settings and seed alone reuses the encoder the first fit trained "
                "(models/visual_encoder.py). " if timings else "")
             + "Written by `python -m signclust.evaluation.ablation`.", ""]
    header = ["variant"] + [h for _, h, _ in COLUMNS] + ["Δ V", "changed parameters"] + \
        (["s / fit"] if timings else [])
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) + 1) + ["---"]
                                + (["---:"] if timings else [])) + "|")
    for name, entry in doc["variants"].items():
        cells = [f"`{name}`"]
        for key, _, fmt in COLUMNS:
            if key in entry["mean"]:
                m, s = entry["mean"][key], entry["std"].get(key, 0.0)
                cells.append(f"{fmt.format(m)} ± {fmt.format(s)}" if key in ("v_measure", "fixed_k_v_measure")
                             or len(seeds) > 1 else fmt.format(m))
            else:
                cells.append("–")
        d = entry.get("delta_v")
        cells.append("–" if d is None or name == doc["reference"] else f"{d:+.3f}")
        spec = entry["spec"] or {}
        shown = {k: v for k, v in entry["changed"].items()   # a preset is named, not spelt out
                 if not spec.get("preset") or k in (spec.get("set") or {}) or k in (spec.get("scale") or {})}
        changed = ([f"preset `{spec['preset']}`"] if spec.get("preset") else []) + \
            [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()]
        cells.append(", ".join(changed) or "–")
        if timings:
            seconds = (timings.get(name) or {}).get("mean_seconds")
            cells.append("–" if seconds is None else f"{seconds:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def bar_plot(doc: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["variants"])
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(4.5, 0.75 * len(names) + 1.5), 3.6))
    for offset, key, label, color in ((-0.2, "v_measure", "native V", "#35608d"),
                                      (0.2, "fixed_k_v_measure", "fixed-K V", "#e0803a")):
        means = [doc["variants"][n]["mean"].get(key, np.nan) for n in names]
        stds = [doc["variants"][n]["std"].get(key, 0.0) for n in names]
        ax.bar(x + offset, means, 0.4, yerr=stds, capsize=3, label=label, color=color)
    ref = doc["variants"].get(doc["reference"])
    if ref:
        ax.axhline(ref["mean"]["v_measure"], color="#35608d", lw=0.8, ls="--")
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"V-measure (mean ± std, {len(doc['seeds'])} seed(s))")
    ax.set_title(f"LM clusterer ablation, {doc['corpus']}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def write_outputs(doc: dict, timings: dict, reports_dir: Path) -> dict[str, Path]:
    reports_dir = Path(reports_dir)
    corpus = doc["corpus"]
    paths = {"md": reports_dir / f"ablation_{corpus}.md",
             "png": reports_dir / "figures" / f"ablation_{corpus}.png",
             "json": reports_dir / "metrics" / f"ablation_{corpus}.json",
             "timings": reports_dir / "timings" / f"ablation_{corpus}.json"}
    write_json(paths["json"], doc)
    write_json(paths["timings"], {"corpus": corpus, "variants": timings, "platform": numeric_platform(),
                                  "note": "wall time of each fit on the machine that ran it; a cached fit "
                                          "keeps the time it took when it ran"})
    atomic_write_text(paths["md"], markdown(doc, timings))
    bar_plot(doc, paths["png"])
    return paths


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--seeds", type=int, nargs="+", help="default: params.yaml ablation.seeds")
    ap.add_argument("--variants", nargs="+", help="a subset of params.yaml ablation.variants")
    ap.add_argument("--epochs", type=int, help="default: params.yaml ablation.epochs")
    ap.add_argument("--corpus-dir", type=Path)
    ap.add_argument("--dist-dir", type=Path)
    ap.add_argument("--reports", type=Path, help="reports folder (default reports/)")
    ap.add_argument("--no-cache", action="store_true", help="refit even when a cached fit exists")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args(argv)
    params = load_params()
    corpus = Corpus.load(args.corpus_dir or REPO_ROOT / "data" / "corpora" / args.corpus)
    cache_dir = None if args.no_cache else REPO_ROOT / "models" / "checkpoints" / "ablation" / args.corpus
    reports = args.reports or REPO_ROOT / "reports"
    doc, timings = run_ablation(corpus, args.corpus, params, seeds=args.seeds, variants=args.variants,
                                epochs=args.epochs,
                                dist_dir=args.dist_dir or REPO_ROOT / "data" / "distances" / args.corpus,
                                cache_dir=cache_dir, reports_dir=reports, progress=args.progress)
    print(markdown(doc, timings))
    print(f"-> {reports}/ablation_{args.corpus}.md, figures/ablation_{args.corpus}.png, "
          f"metrics/ablation_{args.corpus}.json, timings/ablation_{args.corpus}.json")

if __name__ == "__main__":
    main()
