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
resolved parameter) and one MLflow run that logs the same. Long fits checkpoint every epoch
under <out>/.checkpoints/<run>/<corpus>/seed<k>/ and resume after a kill with the same result
(``signclust.models.checkpoint``); a finished fit removes its checkpoint.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

from signclust import tracking
from signclust.config import REPO_ROOT, deep_update, load_params
from signclust.data.corpus import Corpus
from signclust.distances.provider import load_knn, open_distances
from signclust.errors import UserError, cli_main
from signclust.models.base import FitContext, get_clusterer, save_result


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
    summaries = []
    for seed in seeds:
        clusterer = get_clusterer(method, **cfg)
        if clusterer.needs_k and not k_true:
            raise UserError(f"{method} needs the number of types, but corpus '{corpus_name}' has no labels")
        with tracking.run(experiment, f"{run_name}/{corpus_name}/seed{seed}",
                          tags={"method": method, "run": run_name, "corpus": corpus_name}) as mlrun:
            # the effective configuration: every resolved parameter, class defaults included
            mlrun.log_params({"method": method, "preset": preset or "", "corpus": corpus_name, "seed": seed,
                              "device": device, **clusterer.params})
            ckpt_dir = ckpt_root / run_name / corpus_name / f"seed{seed}" if ckpt_root else None
            ctx = FitContext(seed=seed, n_clusters=k_true if clusterer.needs_k else None, device=device,
                             distances=distances, knn=knn, progress=progress,
                             log_metrics=mlrun.log_metrics,
                             checkpoint_dir=str(ckpt_dir) if ckpt_dir else None)
            t0 = time.time()
            result = fit_with_checkpoints(clusterer, corpus, ctx)
            seconds = time.time() - t0
            folder = out_root / run_name / corpus_name / f"seed{seed}"
            save_result(result, folder, {"method": method, "run": run_name, "preset": preset, "seed": seed,
                                         "corpus": corpus_name, "seconds": seconds, "params": clusterer.params})
            if ckpt_dir is not None:
                _prune_empty(ckpt_dir, ckpt_root.parent)
            mlrun.log_metrics({"seconds": seconds, "k_found": result.k_found})
            mlrun.log_artifact(folder / "assignment.csv")
        print(f"{run_name}/{corpus_name}/seed{seed}: K found {result.k_found}, {seconds:.1f}s -> {folder}")
        summaries.append({"seed": seed, "k_found": result.k_found, "seconds": seconds})
    return summaries


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
    ap.add_argument("corpus")
    ap.add_argument("--seeds", type=int, nargs="+", help="default: params.yaml train.seeds")
    ap.add_argument("--corpus-dir", type=Path)
    ap.add_argument("--dist-dir", type=Path)
    ap.add_argument("--out", type=Path, help="run folders root (default models/runs)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    params = load_params()
    seeds = args.seeds if args.seeds is not None else (params.get("train") or {}).get("seeds", [0])
    out_root = args.out or REPO_ROOT / "models" / "runs"
    train(args.run, args.corpus, seeds, params,
          corpus_dir=args.corpus_dir or REPO_ROOT / "data" / "corpora" / args.corpus,
          dist_dir=args.dist_dir or REPO_ROOT / "data" / "distances" / args.corpus,
          out_root=out_root, ckpt_root=checkpoint_root(out_root),
          progress=not args.no_progress)


if __name__ == "__main__":
    main()
