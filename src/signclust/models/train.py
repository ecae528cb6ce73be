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
and one MLflow run; long fits checkpoint to models/checkpoints/ and resume.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from signclust import tracking
from signclust.config import REPO_ROOT, deep_update, load_params
from signclust.data.corpus import Corpus
from signclust.distances.provider import load_knn, open_distances
from signclust.errors import UserError, cli_main
from signclust.models.base import FitContext, get_clusterer, save_result


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
        # e.g. params/tuned_lm.yaml written by the tune stage: {<method>: {param: value}}
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
        with tracking.run(experiment, f"{run_name}/{corpus_name}/seed{seed}",
                          tags={"method": method, "run": run_name, "corpus": corpus_name}) as mlrun:
            mlrun.log_params({"method": method, "preset": preset or "", "corpus": corpus_name, "seed": seed,
                              "device": device, **clusterer.params})
            ctx = FitContext(seed=seed, n_clusters=k_true if clusterer.needs_k else None, device=device,
                             distances=distances, knn=knn, progress=progress,
                             log_metrics=mlrun.log_metrics,
                             checkpoint_dir=str(ckpt_root / run_name / corpus_name / f"seed{seed}") if ckpt_root else None)
            t0 = time.time()
            result = clusterer.fit(corpus, ctx)
            seconds = time.time() - t0
            folder = out_root / run_name / corpus_name / f"seed{seed}"
            save_result(result, folder, {"method": method, "run": run_name, "preset": preset, "seed": seed,
                                         "corpus": corpus_name, "seconds": seconds, "params": clusterer.params})
            mlrun.log_metrics({"seconds": seconds, "k_found": result.k_found})
            mlrun.log_artifact(folder / "assignment.csv")
        print(f"{run_name}/{corpus_name}/seed{seed}: K found {result.k_found}, {seconds:.1f}s -> {folder}")
        summaries.append({"seed": seed, "k_found": result.k_found, "seconds": seconds})
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
