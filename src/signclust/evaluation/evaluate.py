"""Stage `evaluate`: score every seed of one method on one corpus, both protocols of SPEC §5.

    python -m signclust.evaluation.evaluate kmeans cypriot

Reads the corpus and every run folder models/runs/<method>/<corpus>/seed*/ and writes
reports/metrics/<method>_<corpus>.json (a DVC metrics file): per seed the native scores of
the method's own assignment, the fixed-K scores (Ward on its embedding at K_true + offsets)
and its wall time; over seeds the mean and std of each. Also logged to MLflow (experiment
``evaluate``, run ``<method>/<corpus>``, with the model's parameters and tags naming its train
runs), and each seed's scores onto that seed's train run.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

from signclust import tracking
from signclust.config import REPO_ROOT, load_params
from signclust.data.corpus import Corpus
from signclust.errors import UserError, cli_main
from signclust.evaluation.metrics import FIXED_K_OFFSETS, fixed_k_scores, score
from signclust.io import write_json
from signclust.models.base import load_result
from signclust.progress import status

DEFAULTS = {
    "pca_dims": 64,     # Ward on a wider embedding is slow on lineara (6.7k tokens); PCA first
    "std_ddof": 1,      # sample std over seeds (0 = population std)
    "fixed_k_offsets": list(FIXED_K_OFFSETS),
}

# scalar metrics that get a mean and std over seeds, in table order
NATIVE_KEYS = ("v_measure", "homogeneity", "completeness", "nmi", "ari", "acc", "purity", "k_found")
FIXED_KEYS = ("fixed_k_v_measure", "fixed_k_v_at_ktrue")


def config(params: dict | None = None) -> dict:
    """DEFAULTS overlaid with params.yaml's ``evaluate`` section, when there is one."""
    params = load_params() if params is None else params
    return {**DEFAULTS, **(params.get("evaluate") or {})}


def seed_folders(runs_dir: Path) -> list[tuple[int, Path]]:
    """(seed, folder) for every complete-looking seed<k>/ folder, by seed number."""
    found = []
    for path in Path(runs_dir).glob("seed*"):
        match = re.fullmatch(r"seed(\d+)", path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def reduce_embedding(embedding: np.ndarray, max_dims: int, seed: int = 0) -> tuple[np.ndarray, dict]:
    """PCA to at most ``max_dims`` dimensions when wider; the note says what was done."""
    x = np.asarray(embedding, dtype=np.float64)
    if not np.isfinite(x).all():
        raise UserError("embedding contains NaN or infinite values")
    note = {"dims": int(x.shape[1]), "reduced_to": int(x.shape[1]), "reduction": "none"}
    if max_dims and x.shape[1] > max_dims:
        from sklearn.decomposition import PCA
        dims = int(min(max_dims, x.shape[0], x.shape[1]))
        x = PCA(n_components=dims, random_state=seed).fit_transform(x)
        note.update(reduced_to=dims, reduction="pca")
    return x, note


def score_result(gold: np.ndarray, result, cfg: dict, seed: int) -> dict:
    """Both protocols for one fit: native scores, fixed-K scores and how the embedding was reduced."""
    out = score(gold, result.labels)
    emb, note = reduce_embedding(result.embedding, int(cfg["pca_dims"]), seed)
    out.update(fixed_k_scores(gold, emb, offsets=tuple(cfg["fixed_k_offsets"])))
    out["embedding"] = note
    return out


def evaluate_seed(gold: np.ndarray, folder: Path, cfg: dict, seed: int) -> dict:
    """Both protocols for one run folder; a folder that does not fit the corpus is one UserError
    naming it (tests/test_evaluation.py)."""
    try:
        result = load_result(folder)
    except ValueError as err:          # e.g. assignment.csv and embedding.npy of different lengths
        raise UserError(f"{folder}: {err}") from err
    if len(result.labels) != len(gold):
        raise UserError(f"{folder}: {len(result.labels)} assigned tokens, corpus has {len(gold)}")
    if not np.isfinite(result.embedding).all():
        raise UserError(f"{folder}: embedding.npy contains NaN or infinite values")
    return score_result(gold, result, cfg, seed)


def summarise(per_seed: dict[str, dict], ddof: int,
              keys: tuple = NATIVE_KEYS + FIXED_KEYS) -> tuple[dict, dict]:
    """Mean and std over seeds of each scalar metric (over the seeds that report it)."""
    mean, std = {}, {}
    for key in keys:
        values = [s[key] for s in per_seed.values() if key in s]
        if not values:
            continue
        mean[key] = float(np.mean(values))
        # one seed has no spread to report: 0 (n_seeds in the file says how much to trust it)
        std[key] = float(np.std(values, ddof=ddof)) if len(values) > ddof else 0.0
    return mean, std


def evaluate(corpus: Corpus, runs_dir: Path, cfg: dict, method: str = "", corpus_name: str = "") -> dict:
    """The metrics document for one method on one corpus."""
    if not corpus.has_labels:
        raise UserError(f"corpus '{corpus_name or corpus.meta.get('name', '?')}' has no gold labels "
                        "for every token; evaluate needs a labelled (benchmark) corpus")
    gold = corpus.labels()
    folders = seed_folders(runs_dir)
    if not folders:
        raise UserError(missing_run_message(runs_dir))
    per_seed = {f"seed{seed}": evaluate_seed(gold, folder, cfg, seed) for seed, folder in folders}
    mean, std = summarise(per_seed, int(cfg["std_ddof"]))
    first = next(iter(per_seed.values()))
    return {
        "method": method, "corpus": corpus_name,
        "n_seeds": len(per_seed), "seeds": [seed for seed, _ in folders],
        "n_tokens": int(len(gold)), "k_true": int(first["k_true"]),
        "std_ddof": int(cfg["std_ddof"]),
        "fixed_k_offsets": [int(o) for o in cfg["fixed_k_offsets"]],
        "embedding": first["embedding"],   # same method, same width for every seed
        "mean": mean, "std": std, "per_seed": per_seed,
    }


def missing_run_message(runs_dir: Path) -> str:
    """'no run folders' naming the runs that were trained on this corpus (runs_dir is
    <runs root>/<run>/<corpus>)."""
    import difflib
    runs_dir = Path(runs_dir)
    run, corpus, root = runs_dir.parent.name, runs_dir.name, runs_dir.parent.parent
    have = sorted(p.parent.name for p in root.glob(f"*/{corpus}") if seed_folders(p)) if root.is_dir() else []
    close = difflib.get_close_matches(run, have, n=1)
    return (f"no run folders seed*/ under {runs_dir}; train it first (signclust train {run} {corpus})"
            + (f"; did you mean '{close[0]}'?" if close else "")
            + (f" Trained on '{corpus}': {', '.join(have)}." if have else ""))


def metrics_path(reports_dir: Path, method: str, corpus: str) -> Path:
    return Path(reports_dir) / "metrics" / f"{method}_{corpus}.json"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("method")
    ap.add_argument("corpora", nargs="+", metavar="corpus", help="one or more corpora, evaluated in turn")
    ap.add_argument("--corpus-dir", help="default data/corpora/<corpus> (one corpus only)")
    ap.add_argument("--runs-dir", help="default models/runs/<method>/<corpus> (one corpus only)")
    ap.add_argument("--out", help="default reports/metrics/<method>_<corpus>.json (one corpus only)")
    args = ap.parse_args(argv)
    if len(args.corpora) > 1 and (args.corpus_dir or args.runs_dir or args.out):
        raise UserError("--corpus-dir, --runs-dir and --out name one corpus's paths; give one corpus with them")
    cfg = config()
    for name in args.corpora:
        evaluate_one(args.method, name, cfg, args.corpus_dir, args.runs_dir, args.out)


def evaluate_one(method: str, name: str, cfg: dict, corpus_dir=None, runs_dir=None, out=None) -> dict:
    corpus = Corpus.load(corpus_dir or REPO_ROOT / "data" / "corpora" / name, mmap=True)
    runs_dir = Path(runs_dir or REPO_ROOT / "models" / "runs" / method / name)
    out = Path(out or metrics_path(REPO_ROOT / "reports", method, name))
    with status(f"evaluate {method}/{name}: native + fixed-K Ward at "
                f"{len(cfg['fixed_k_offsets'])} K's per seed") as st:
        doc = evaluate(corpus, runs_dir, cfg, method, name)
        st.done(f"{doc['n_seeds']} seed(s)")
    write_json(out, doc)
    m, s = doc["mean"], doc["std"]
    print(f"{method}/{name}: {doc['n_seeds']} seed(s), V = {m['v_measure']:.3f} ± {s['v_measure']:.3f}, "
          f"fixed-K V = {m['fixed_k_v_measure']:.3f} ± {s['fixed_k_v_measure']:.3f}, "
          f"K {m['k_found']:.1f} vs {doc['k_true']} -> {out}")
    log_evaluation(doc, runs_dir, cfg, out)
    return doc


def train_runs(runs_dir: Path) -> dict[str, dict]:
    """Per seed folder: configuration hash and parameters (info.json) and the train run's MLflow id
    (the train stage's timings file beside the run folders: run-to-run data, kept out of them)."""
    import json

    from signclust.models.train import timings_path
    runs_dir = Path(runs_dir)
    try:
        timing = json.loads(timings_path(runs_dir.parent.parent, runs_dir.parent.name, runs_dir.name)
                            .read_text()).get("per_seed", {})
    except (OSError, ValueError):
        timing = {}
    out = {}
    for seed, folder in seed_folders(runs_dir):
        try:
            info = json.loads((folder / "info.json").read_text())
        except (OSError, ValueError):
            info = {}
        out[f"seed{seed}"] = {"run_id": (timing.get(f"seed{seed}") or {}).get("mlflow_run_id"),
                              "config": info.get("config_hash"), "params": info.get("params") or {},
                              "preset": info.get("preset")}
    return out


def log_evaluation(doc: dict, runs_dir: Path, cfg: dict, out: Path) -> str | None:
    """MLflow, one view for comparing configurations: the evaluate run carries the model's
    parameters and tags naming its train runs (``train_run_ids``, ``train_run.seed<k>``); each
    train run gets its seed's final scores (both protocols) and a tag back to this evaluate run."""
    trained = train_runs(runs_dir)
    first = next(iter(trained.values()), {})
    ids = {seed: t["run_id"] for seed, t in trained.items() if t["run_id"]}
    configs = sorted({t["config"] for t in trained.values() if t["config"]})
    tags = {"method": doc["method"], "corpus": doc["corpus"], "train_run_ids": ",".join(ids.values()),
            **{f"train_run.{seed}": run_id for seed, run_id in ids.items()}}
    if configs:
        tags["config"] = ",".join(configs)
    with tracking.run("evaluate", f"{doc['method']}/{doc['corpus']}", tags=tags) as run:
        run.log_params({"method": doc["method"], "corpus": doc["corpus"], "n_seeds": doc["n_seeds"],
                        "preset": first.get("preset") or "", **(first.get("params") or {}),
                        "evaluate": {**cfg, "embedding": doc["embedding"]}})
        run.log_metrics({"mean": doc["mean"], "std": doc["std"], **doc["mean"]})
        run.log_artifact(out)
        evaluate_id = run.run_id
    for seed, run_id in ids.items():
        scores = {k: v for k, v in doc["per_seed"].get(seed, {}).items()
                  if k in NATIVE_KEYS + FIXED_KEYS + ("k_true",)}
        tracking.update(run_id, metrics=scores, tags={"evaluate_run_id": evaluate_id or ""})
    return evaluate_id


if __name__ == "__main__":
    main()
