"""Stage `train`: fit one configured method (ours or a baseline) on a corpus, for several seeds.

    python -m signclust.models.train lm cypriot            # a row of params.yaml `runs`
    python -m signclust.models.train lm_seed cypriot --seeds 0

A *run name* (a row of the comparison tables) maps to a method, optionally one preset and
optionally its own parameter overrides, in params.yaml:

    runs:
      lm:          {method: lm}
      lm_seed:     {method: lm, preset: seed}
      ward_pixels: {method: ward, params: {pca_dim: 0}}
      lm_tuned:    {method: lm, params_file: params/tuned_lm.yaml}

The layers of a run's configuration are listed in ``run_config``. Each seed writes
models/runs/<run>/<corpus>/seed<k>/ (assignment.csv, embedding.npy, info.json with every
resolved parameter) and one MLflow run (experiment ``train``: the model's parameters, per-epoch
metrics, the final V-measure etc. when the corpus has labels, tags ``config`` (a hash of the
configuration) and ``resumed``, and the run folder as the artifact ``run``); methods that train
in steps also write history.csv (what ``dvc plots`` draws). Long fits checkpoint every epoch
under <out>/.checkpoints/<run>/<corpus>/seed<k>/ and resume after a kill with the same result
(``signclust.models.checkpoint``); a finished fit removes its checkpoint.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from signclust import tracking
from signclust.config import REPO_ROOT, deep_update, load_params, numeric_platform
from signclust.data.corpus import Corpus
from signclust.distances.provider import load_knn, open_distances
from signclust.errors import UserError, cli_main
from signclust.io import write_json
from signclust.models.base import FitContext, get_clusterer, save_result
from signclust.progress import status


RUN_KEYS = ("method", "preset", "params_file", "params")


def preset_values(method: str, preset: str, params: dict, where: str) -> dict:
    """The parameter dict of a named preset: the method class's ``PRESETS[preset]`` (e.g. the
    paper's settings) or params.yaml ``presets.<method>.<preset>``; one name, one source."""
    from signclust.models.base import get_class
    in_class = get_class(method).PRESETS or {}
    in_yaml = ((params.get("presets") or {}).get(method) or {})
    if preset in in_class and preset in in_yaml:
        raise UserError(f"{where}: preset '{preset}' of {method} is defined both in its class and in "
                        f"params.yaml presets.{method}; rename one")
    if preset in in_class:
        return dict(in_class[preset])
    if preset in in_yaml:
        return dict(in_yaml[preset] or {})
    known = sorted(set(in_class) | set(in_yaml))
    raise UserError(f"{where}: method '{method}' has no parameter set '{preset}' (known: {', '.join(known) or 'none'})")


def run_config(run_name: str, params: dict) -> tuple[str, dict, str | None]:
    """(method, parameters, preset) for a run name of params.yaml `runs`.

    The configuration is built in four layers; each overrides the ones before it:

      1. the method's class defaults (``PARAMS`` in its source file; filled in by the class),
      2. params.yaml ``models.<method>``: what the comparison changes from the class defaults
         (the CPU-sized cuts), shared by every row of that method,
      3. one preset, named by the row: ``preset: NAME`` (the class's ``PRESETS[NAME]``, e.g.
         ``paper``, or params.yaml ``presets.<method>.NAME``) or ``params_file: FILE`` (a YAML
         file ``{<method>: {param: value}}``, e.g. the tune stage's ``params/tuned_<method>.yaml``);
         a row names at most one of the two,
      4. the row's own ``params``.

    The returned dict holds layers 2-4; ``get_clusterer(method, **cfg)`` adds layer 1 and checks
    every value (models/params.py). The third element names the preset (``NAME`` or the file).
    """
    runs = params.get("runs") or {}
    if run_name not in runs:
        raise UserError(f"unknown run '{run_name}'; params.yaml runs: {', '.join(runs) or 'none'}")
    spec = runs[run_name] or {}
    if not isinstance(spec, dict):
        raise UserError(f"runs.{run_name}: expected a mapping ({', '.join(RUN_KEYS)})")
    unknown = sorted(set(spec) - set(RUN_KEYS))
    if unknown:
        raise UserError(f"runs.{run_name}: unknown key(s) {', '.join(unknown)} (known: {', '.join(RUN_KEYS)})")
    method = spec.get("method", run_name)
    if spec.get("preset") and spec.get("params_file"):
        raise UserError(f"runs.{run_name}: name a preset or a params_file, not both (one preset layer)")
    models = params.get("models") or {}
    cfg = dict(models.get(method) or {})
    preset = None
    if spec.get("preset"):
        preset = str(spec["preset"])
        cfg = deep_update(cfg, preset_values(method, preset, params, f"run '{run_name}'"))
    elif spec.get("params_file"):
        path = REPO_ROOT / spec["params_file"]
        if not path.exists():
            raise UserError(f"run '{run_name}': {spec['params_file']} not found (run the tune stage first)")
        loaded = load_params(path)
        if not isinstance(loaded.get(method), dict):
            raise UserError(f"run '{run_name}': {spec['params_file']} has no '{method}:' mapping")
        cfg = deep_update(cfg, loaded[method])
        preset = str(spec["params_file"])
    return method, deep_update(cfg, spec.get("params") or {}), preset


def check_seeds(seeds) -> list[int]:
    """Seeds are whole numbers in 0 .. 2**32 - 1 (what every RNG here accepts)."""
    seeds = list(seeds if isinstance(seeds, (list, tuple)) else [seeds])
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2 ** 32]
    if bad or not seeds:
        raise UserError(f"seeds must be whole numbers from 0 to {2 ** 32 - 1}; got {', '.join(map(str, bad)) or 'none'}")
    return seeds


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
    """Fit ``run_name`` on the corpus for each seed; run folders under ``out_root``, checkpoints (when
    ``ckpt_root`` is given) under ``ckpt_root/<run>/<corpus>/seed<k>`` (see checkpoint_root)."""
    method, cfg, preset = run_config(run_name, params)
    seeds = check_seeds(seeds)
    get_clusterer(method, **cfg)            # a bad configuration stops here, before any data is read
    corpus = Corpus.load(corpus_dir)
    if len(corpus.images) < 2:
        raise UserError(f"corpus '{corpus_name}' has {len(corpus.images)} distinct image(s) for "
                        f"{corpus.n_tokens} tokens: nothing to cluster (were blank images imported?)")
    device = (params.get("train") or {}).get("device", "auto")
    if not isinstance(device, str) or not (device in ("auto", "cpu") or device.startswith("cuda")):
        raise UserError(f"train.device: {device!r} is not allowed (expected auto, cpu or cuda[:N])")
    distances = open_distances(corpus, dist_dir) if dist_dir and dist_dir.exists() else None
    knn = load_knn(dist_dir) if dist_dir and dist_dir.exists() else None
    k_true = corpus.counts()["types"] or None
    summaries, timings = [], {}
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
                result = fit_with_checkpoints(clusterer, corpus, ctx)
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
            result.info, fit_times = split_timings(result.info)
            # the run folder holds only what the fit determines (same params + seed -> same bytes);
            # wall times and run ids go to MLflow and reports/timings/, which no later stage reads
            save_result(result, folder, {"method": method, "run": run_name, "preset": preset, "seed": seed,
                                         "corpus": corpus_name, "params": clusterer.params,
                                         "config_hash": chash})
            timings[f"seed{seed}"] = {"seconds": seconds, "resumed": resumed, **fit_times,
                                      "mlflow_run_id": mlrun.run_id}
            if ckpt_dir is not None:
                _prune_empty(ckpt_dir, ckpt_root.parent)
            records = previous + _history(result.info, logged)   # a resumed fit keeps the epochs it resumed
            history = write_history(records, folder / "history.csv")
            scores = final_scores(corpus, result.labels)
            mlrun.set_tags({"resumed": str(resumed).lower(), "history": "yes" if history else "no",
                            **({"resumed_from_epoch": resumed_from} if resumed else {})})
            mlrun.log_metrics({"seconds": seconds, "k_found": result.k_found, **scores,
                               **{k: float(v) for k, v in fit_times.items()}})
            mlrun.log_artifacts(folder, "run")       # SignClusterer.load("runs:/<id>/run") reads it back
        v = f", V {scores['v_measure']:.3f}" if "v_measure" in scores else ""
        print(f"{label}: K found {result.k_found}{v}, {seconds:.1f}s"
              + (f" (resumed from epoch {resumed_from})" if resumed else "") + f" -> {folder}")
        summaries.append({"seed": seed, "k_found": result.k_found, "seconds": seconds, "resumed": resumed,
                          "mlflow_run_id": mlrun.run_id})
    write_json(timings_path(out_root, run_name, corpus_name),
               {"run": run_name, "corpus": corpus_name, "per_seed": timings, "platform": numeric_platform(),
                "note": "wall time of each fit on the machine that ran it; resumed fits say so"})
    return summaries


# run-to-run noise: never written into a run folder (a DVC output that evaluate depends on)
TIMING_KEYS = ("wall_s", "wall_time_s", "setup_s", "seconds_fit", "seconds_train")


def split_timings(info: dict) -> tuple[dict, dict]:
    """(the fit's info without wall times, the wall times it reported)."""
    return ({k: v for k, v in info.items() if k not in TIMING_KEYS},
            {k: v for k, v in info.items() if k in TIMING_KEYS})


def timings_path(out_root: Path, run_name: str, corpus_name: str) -> Path:
    """reports/timings/<run>_<corpus>.json beside the default run folders (models/runs); under the
    run root itself for any other --out, so that scratch runs never touch the committed reports."""
    default = REPO_ROOT / "models" / "runs"
    base = REPO_ROOT / "reports" / "timings" if Path(out_root).resolve() == default.resolve() \
        else Path(out_root) / ".timings"
    return base / f"{run_name}_{corpus_name}.json"


def fit_with_checkpoints(clusterer, corpus: Corpus, ctx: FitContext):
    """``clusterer.fit``; a class that does not use FitCheckpoint itself (``fit_checkpoint`` False: the
    LM clusterer until its rewrite, the classical methods) gets a checkpoint folder keyed by the fit's
    content key (``<checkpoint_dir>/fit-<key>``, older keys removed) and the same lock, so that it can
    neither resume another fit nor collide with a concurrent one; the folder is removed when it
    finishes."""
    if not ctx.checkpoint_dir or type(clusterer).fit_checkpoint:
        return clusterer.fit(corpus, ctx)
    import dataclasses
    import shutil

    from signclust.models.checkpoint import FitCheckpoint, fit_key
    key = fit_key(clusterer, corpus, ctx)
    folder = Path(ctx.checkpoint_dir)
    own = folder / ("fit-" + hashlib.sha256("".join(key[k] for k in sorted(key)).encode()).hexdigest()[:16])
    with FitCheckpoint(folder, key, f"{clusterer.name} seed {ctx.seed}"):
        for other in folder.glob("fit-*"):
            if other != own:
                print(f"checkpoint: ignoring {other}: written for a different fit; removed", file=sys.stderr)
                shutil.rmtree(other, ignore_errors=True)
        result = clusterer.fit(corpus, dataclasses.replace(ctx, checkpoint_dir=str(own)))
        shutil.rmtree(own, ignore_errors=True)
    return result


def checkpoint_root(out_root: Path) -> Path:
    """Where the train stage keeps checkpoints: ``<out>/.checkpoints`` (outside every run folder, so
    that DVC, which empties a stage's outputs before re-running it, leaves them for the resume)."""
    return Path(out_root) / ".checkpoints"


def _prune_empty(folder: Path, stop: Path) -> None:
    """Remove ``folder`` and its parents while empty, up to (not including) ``stop``."""
    folder, stop = Path(folder), Path(stop)
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return
        folder = folder.parent


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run name of params.yaml `runs`")
    ap.add_argument("corpora", nargs="+", metavar="corpus", help="one or more corpora, trained in turn")
    ap.add_argument("--seeds", type=int, nargs="+", help="default: params.yaml train.seeds")
    ap.add_argument("--seed-set", help="use params.yaml train.seed_sets.NAME (e.g. suite_deep) instead")
    ap.add_argument("--corpus-dir", type=Path)
    ap.add_argument("--dist-dir", type=Path)
    ap.add_argument("--out", type=Path, help="run folders root (default models/runs)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    params = load_params()
    train_cfg = params.get("train") or {}
    if args.seed_set is not None:
        sets = train_cfg.get("seed_sets") or {}
        if args.seed_set not in sets:
            raise UserError(f"unknown seed set '{args.seed_set}'; params.yaml train.seed_sets: "
                            f"{', '.join(sets) or 'none'}")
        seeds = sets[args.seed_set]
    else:
        seeds = args.seeds if args.seeds is not None else train_cfg.get("seeds", [0])
    if len(args.corpora) > 1 and (args.corpus_dir or args.dist_dir):
        raise UserError("--corpus-dir and --dist-dir name one corpus's folders; give one corpus with them")
    out_root = args.out or REPO_ROOT / "models" / "runs"
    for name in args.corpora:
        train(args.run, name, seeds, params,
              corpus_dir=args.corpus_dir or REPO_ROOT / "data" / "corpora" / name,
              dist_dir=args.dist_dir or REPO_ROOT / "data" / "distances" / name,
              out_root=out_root, ckpt_root=checkpoint_root(out_root),
              progress=not args.no_progress)


if __name__ == "__main__":
    main()
