"""Stage `train`: fit one configured method (ours or a baseline) on a corpus, for several seeds.

    python -m signclust.models.train lm cypriot            # a row of params.yaml `runs`
    python -m signclust.models.train lm_seed cypriot --seeds 0

A *run name* (a row of the comparison tables) maps to a method and optionally a
named parameter set, in params.yaml:

    runs:
      lm:      {method: lm}
      lm_seed: {method: lm, preset: seed}

The method's parameters are its DEFAULTS, overlaid by ``models.<method>``,
overlaid by ``presets.<method>.<preset>``. Each seed writes
models/runs/<run>/<corpus>/seed<k>/ (assignment.csv, embedding.npy, info.json)
and one MLflow run (experiment ``train``: the model's parameters, per-epoch metrics, the final
V-measure etc. when the corpus has labels, tags ``config`` (a hash of the configuration) and
``resumed``, and the run folder as the artifact ``run``); methods that train in epochs also write
history.csv (what ``dvc plots`` draws). Long fits checkpoint to models/checkpoints/ and resume.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from signclust import tracking
from signclust.config import REPO_ROOT, deep_update, load_params
from signclust.data.corpus import Corpus
from signclust.distances.provider import load_knn, open_distances
from signclust.errors import UserError, cli_main
from signclust.models.base import FitContext, get_clusterer, save_result
from signclust.progress import status


def run_config(run_name: str, params: dict) -> tuple[str, dict, str | None]:
    """(method, its parameters, preset name) for a run name of params.yaml `runs`."""
    runs = params.get("runs", {})
    if run_name not in runs:
        raise UserError(f"unknown run '{run_name}'; params.yaml runs: {', '.join(runs) or 'none'}")
    spec = runs[run_name] or {}
    method = spec.get("method", run_name)
    preset = spec.get("preset")
    cfg = deep_update(params.get("models", {}).get(method, {}) or {}, spec.get("params", {}) or {})
    if spec.get("params_file"):
        # e.g. params/tuned_lm_cypriot_supervised.yaml written by the tune stage: {<method>: {param: value}}
        path = REPO_ROOT / spec["params_file"]
        if not path.exists():
            raise UserError(f"run '{run_name}': {spec['params_file']} not found (run the tune stage first)")
        cfg = deep_update(cfg, load_params(path).get(method) or {})
    if preset:
        presets = params.get("presets", {}).get(method, {}) or {}
        if preset not in presets:
            raise UserError(f"run '{run_name}': method '{method}' has no parameter set '{preset}' "
                            f"(known: {', '.join(presets) or 'none'})")
        cfg = deep_update(cfg, presets[preset])
    return method, cfg, preset


def config_hash(method: str, params: dict, preset: str | None) -> str:
    """Short fingerprint of a configuration: two runs with different parameters never share it
    (an MLflow tag and info.json field, so configurations can be told apart and grouped)."""
    blob = json.dumps({"method": method, "preset": preset or "", "params": params}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def write_history(records: list[dict], path: Path) -> Path | None:
    """Per-epoch records (``epoch`` + the numbers the method logged) as CSV: what ``dvc plots``
    draws. None (no file) for methods without epochs."""
    import pandas as pd

    from signclust.io import atomic_path
    rows = {}
    for rec in records:
        if "epoch" in rec:
            rows[int(rec["epoch"])] = {k: v for k, v in rec.items()
                                       if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not rows:
        return None
    frame = pd.DataFrame([rows[e] for e in sorted(rows)])
    frame["epoch"] = frame["epoch"].astype(int)
    frame = frame[["epoch"] + [c for c in frame.columns if c != "epoch"]]
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return path


def read_history(path: Path) -> list[dict]:
    """The records of a history.csv ([] when there is none)."""
    import pandas as pd
    if not Path(path).is_file():
        return []
    frame = pd.read_csv(path)
    return [{k: v for k, v in rec.items() if pd.notna(v)} for rec in frame.to_dict("records")]


def _history(info: dict, logged: list[dict]) -> list[dict]:
    """The fit's full per-epoch history when the method returns one (``info["history"]``), else
    what it logged through FitContext.log_metrics during this process (a resumed fit logs only the
    epochs it ran)."""
    own = info.get("history")
    if isinstance(own, list) and all(isinstance(r, dict) and "epoch" in r for r in own) and len(own) >= len(logged):
        return own
    return logged


def final_scores(corpus: Corpus, labels) -> dict:
    """Native scores against the gold labels (empty without labels): logged on the train run so
    that `mlflow ui` compares configurations by V-measure in the train experiment itself."""
    if not corpus.has_labels:
        return {}
    from signclust.evaluation.metrics import score
    s = score(corpus.labels(), labels)
    return {k: s[k] for k in ("v_measure", "homogeneity", "completeness", "nmi", "ari", "acc", "purity",
                              "k_true") if k in s}


def train(run_name: str, corpus_name: str, seeds: list[int], params: dict, corpus_dir: Path,
          dist_dir: Path | None, out_root: Path, ckpt_root: Path | None, progress: bool = True,
          experiment: str = "train") -> list[dict]:
    method, cfg, preset = run_config(run_name, params)
    corpus = Corpus.load(corpus_dir)
    device = params.get("train", {}).get("device", "auto")
    distances = open_distances(corpus, dist_dir) if dist_dir and dist_dir.exists() else None
    knn = load_knn(dist_dir) if dist_dir and dist_dir.exists() else None
    k_true = corpus.counts()["types"] or None
    summaries = []
    for seed in seeds:
        clusterer = get_clusterer(method, **cfg)
        if clusterer.needs_k and not k_true:
            raise UserError(f"{method} needs the number of types, but corpus '{corpus_name}' has no labels")
        chash = config_hash(method, clusterer.params, preset)
        ckpt_dir = ckpt_root / run_name / corpus_name / f"seed{seed}" if ckpt_root else None
        had_checkpoint = bool(ckpt_dir and ckpt_dir.is_dir() and any(ckpt_dir.iterdir()))
        label = f"{run_name}/{corpus_name}/seed{seed}"
        with tracking.run(experiment, label, tags={"method": method, "run": run_name, "corpus": corpus_name,
                                                   "seed": seed, "config": chash}) as mlrun:
            mlrun.log_params({"method": method, "preset": preset or "", "corpus": corpus_name, "seed": seed,
                              "device": device, **clusterer.params})
            logged: list[dict] = []

            def log_epoch(metrics: dict, step: int) -> None:
                logged.append({"epoch": int(step), **metrics})
                mlrun.log_metrics(metrics, step)

            ctx = FitContext(seed=seed, n_clusters=k_true if clusterer.needs_k else None, device=device,
                             distances=distances, knn=knn, progress=progress, log_metrics=log_epoch,
                             checkpoint_dir=str(ckpt_dir) if ckpt_dir else None)
            k_note = f", K {ctx.n_clusters}" if ctx.n_clusters else ""
            t0 = time.time()
            with status(f"{label}: {method} on {corpus.n_tokens} tokens{k_note}", enabled=progress) as st:
                result = clusterer.fit(corpus, ctx)
                st.done(f"K found {result.k_found}")
            seconds = time.time() - t0
            # resumed: the fit found its checkpoint and did not start at epoch 1 (a finished
            # checkpoint logs no epoch at all); a method may say so itself in info
            first = logged[0]["epoch"] if logged else None
            resumed_from = result.info.get("resumed_from_epoch")
            if resumed_from is None and had_checkpoint and (first is None or first > 1):
                resumed_from = (first - 1) if first is not None else result.info.get("epochs", "end")
            resumed = bool(resumed_from)
            folder = out_root / run_name / corpus_name / f"seed{seed}"
            previous = read_history(folder / "history.csv") if resumed else []
            save_result(result, folder, {"method": method, "run": run_name, "preset": preset, "seed": seed,
                                         "corpus": corpus_name, "seconds": seconds, "params": clusterer.params,
                                         "config_hash": chash, "resumed": resumed,
                                         "mlflow_run_id": mlrun.run_id})
            records = previous + _history(result.info, logged)   # a resumed fit keeps the epochs it resumed
            history = write_history(records, folder / "history.csv")
            scores = final_scores(corpus, result.labels)
            mlrun.set_tags({"resumed": str(resumed).lower(), "history": "yes" if history else "no",
                            **({"resumed_from_epoch": resumed_from} if resumed else {})})
            mlrun.log_metrics({"seconds": seconds, "k_found": result.k_found, **scores})
            mlrun.log_artifacts(folder, "run")       # SignClusterer.load("runs:/<id>/run") reads it back
        v = f", V {scores['v_measure']:.3f}" if "v_measure" in scores else ""
        print(f"{label}: K found {result.k_found}{v}, {seconds:.1f}s"
              + (f" (resumed from epoch {resumed_from})" if resumed else "") + f" -> {folder}")
        summaries.append({"seed": seed, "k_found": result.k_found, "seconds": seconds, "resumed": resumed,
                          "mlflow_run_id": mlrun.run_id})
    return summaries


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run name of params.yaml `runs`")
    ap.add_argument("corpus")
    ap.add_argument("--seeds", type=int, nargs="+", help="default: params.yaml train.seeds")
    ap.add_argument("--corpus-dir", type=Path)
    ap.add_argument("--dist-dir", type=Path)
    ap.add_argument("--out", type=Path, help="run folders root (default models/runs)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    params = load_params()
    seeds = args.seeds if args.seeds is not None else list(params.get("train", {}).get("seeds", [0]))
    train(args.run, args.corpus, seeds, params,
          corpus_dir=args.corpus_dir or REPO_ROOT / "data" / "corpora" / args.corpus,
          dist_dir=args.dist_dir or REPO_ROOT / "data" / "distances" / args.corpus,
          out_root=args.out or REPO_ROOT / "models" / "runs",
          ckpt_root=REPO_ROOT / "models" / "checkpoints",
          progress=not args.no_progress)


if __name__ == "__main__":
    main()
