"""Stage `tune`: Optuna search over a method's parameters, in parallel workers, resumable.

    python -m signclust.tuning.tune --method lm --corpus cypriot --trials 30 --workers 2
    python -m signclust.tuning.tune --method swav --corpus cypriot --trials 30 --workers 2   # same budget
    python -m signclust.tuning.tune --method lm --corpus cypriot --trials 30 --report-on lineara
    python -m signclust.tuning.tune --study lm_unsup --method lm --corpus cypriot --trials 30 \\
        --objective unsupervised --storage postgresql://user@host/optuna    # workers on several machines

What is searched: params.yaml ``tune.spaces.<method>`` (one entry per parameter:
``{low, high[, log, step]}`` or ``{choices: [...]}``), on top of the method's configured
parameters (``runs.<method>`` / ``models.<method>``) and ``tune.fixed.<method>`` (settings held
fixed during the search to keep a trial affordable, e.g. fewer epochs: they are part of the
tuned configuration written at the end). Every method gets the same ``--trials`` budget, so a
tuned baseline is compared with a tuned LM clusterer.

Budget and workers. ``--trials N`` is the study's budget: trials are added until the study
holds N finished (complete or pruned) trials. The study is created once here, then W worker
processes (this command with ``--worker``) each load it and run their share of the missing
trials (TPE with a constant liar, so parallel workers do not propose the same point).
Rerunning the same command resumes: completed trials are kept, and no trial is lost to a
kill: a worker stopped by Ctrl-C/SIGTERM marks its trial interrupted and the next invocation
re-enqueues it with the same parameters; a worker killed outright (SIGKILL, a lost machine)
stops its heartbeat, and after ``tune.grace_s`` seconds the first worker to notice fails the
trial and re-enqueues it (Optuna's RetryHeartbeatStaleTrialCallback on an RDB storage).

Objectives (the study maximises):
  supervised     V-measure against the tuning corpus's gold labels.
  unsupervised   usable on an undeciphered script: minus (a * held-out bigram cross-entropy of
                 the type sequence / log n + b * visual inhomogeneity), see ``unsupervised_score``.
                 Computed from the assignment alone, the same for every method.
Both are recorded for every trial when the corpus has labels, and the report gives their
Spearman correlation over the completed trials: how far the label-free objective can be
trusted to rank configurations.

Pruning: MedianPruner on a per-epoch value the method logs through FitContext.log_metrics:
minus the signed sum of the record keys ``tune.intermediate.<method>`` (lm: L_LM - H(marginal) + L_hom,
unweighted so that trials with other loss weights compare, and with the marginal entropy taken off
because L_LM alone grows like log K and would prune every trial that finds more types; the deep
baselines: their training loss). V-measure is not
observable per epoch (the log record has no assignment), so under the supervised objective the
pruner works on this training-side proxy; the report gives the proxy's rank agreement with V so
that it can be judged, and ``tune.pruner.type: none`` turns pruning off.

Outputs: reports/tune_<study>.md (best trial, its parameters, the agreement, dev->test transfer),
reports/figures/tune_<study>_history.png and _importance.png, params/tuned_<method>.yaml (the best
configuration in the shape of ``models.<method>``). MLflow: experiment ``tune``, one parent run per
study, each trial a child run (parameters, per-epoch metrics, scores, objective value).

``--report-on CORPUS`` fits the best configuration and the configured one (same fixed settings)
on another labelled corpus over ``tune.report_seeds`` and writes both into the report: tuning and
reporting never use the same gold labels.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from signclust import tracking
from signclust.config import REPO_ROOT, deep_update, load_params
from signclust.data.corpus import Corpus
from signclust.errors import UserError, cli_main
from signclust.io import atomic_path, atomic_write_text, write_json

DEFAULTS: dict = {
    "trials": 20,
    "workers": 2,
    "storage": None,            # null: sqlite:///<repo>/optuna.db
    "objective": "supervised",
    "fit_seed": 0,              # the seed of every trial's fit (trials differ only in parameters)
    "sampler_seed": 0,
    "pruner": {"type": "median", "startup_trials": 5, "warmup_epochs": 5},
    "heartbeat_s": 30,          # a running trial writes a heartbeat this often ...
    "grace_s": 120,             # ... and is failed and re-enqueued when none came for this long
    "max_retry": 2,
    "report_seeds": [0, 1, 2],
    "unsupervised": {"lm_weight": 1.0, "hom_weight": 1.0, "folds": 5, "alpha": 0.1},
    "intermediate": {"lm": ["lm", "-entropy", "hom"], "deepcluster": ["loss"], "swav": ["loss"]},
    "fixed": {},
    "spaces": {},
}
OBJECTIVES = ("supervised", "unsupervised")
SCORE_KEYS = ("v_measure", "nmi", "ari", "acc", "k_found", "unsupervised", "heldout_ce", "hom_rel", "seconds")


def tune_config(params: dict) -> dict:
    return deep_update(DEFAULTS, params.get("tune") or {})


def default_storage() -> str:
    return f"sqlite:///{REPO_ROOT / 'optuna.db'}"


def redact(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1] if "@" in url else url


def make_storage(url: str, cfg: dict):
    """An RDB storage (any SQLAlchemy URL) with heartbeats, so killed trials are retried."""
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    try:
        return RDBStorage(url, engine_kwargs=engine_kwargs,
                          heartbeat_interval=int(cfg["heartbeat_s"]), grace_period=int(cfg["grace_s"]),
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                              max_retry=cfg["max_retry"]))
    except (optuna.exceptions.StorageInternalError, ImportError, ValueError) as err:
        raise UserError(f"cannot open Optuna storage {redact(url)}: {err}") from err


def make_pruner(cfg: dict):
    import optuna
    kind = (cfg["pruner"] or {}).get("type", "median")
    if kind in (None, "none"):
        return optuna.pruners.NopPruner()
    if kind != "median":
        raise UserError(f"tune.pruner.type must be median or none, not '{kind}'")
    return optuna.pruners.MedianPruner(n_startup_trials=int(cfg["pruner"].get("startup_trials", 5)),
                                       n_warmup_steps=int(cfg["pruner"].get("warmup_epochs", 5)))


# -- search space ---------------------------------------------------------------------------------

def suggest(trial, space: dict) -> dict:
    """One value per parameter of ``space`` ({low, high[, log, step, type]} or {choices})."""
    out = {}
    for name, spec in space.items():
        if not isinstance(spec, dict):
            raise UserError(f"tune space '{name}': expected a mapping ({{low, high}} or {{choices}})")
        if "choices" in spec:
            out[name] = trial.suggest_categorical(name, list(spec["choices"]))
            continue
        if "low" not in spec or "high" not in spec:
            raise UserError(f"tune space '{name}': needs low and high, or choices")
        kind = spec.get("type") or ("int" if all(isinstance(spec[k], int) and not isinstance(spec[k], bool)
                                                 for k in ("low", "high")) else "float")
        log = bool(spec.get("log", False))
        if kind == "int":
            out[name] = trial.suggest_int(name, int(spec["low"]), int(spec["high"]),
                                          step=int(spec.get("step", 1)), log=log)
        elif kind == "float":
            out[name] = trial.suggest_float(name, float(spec["low"]), float(spec["high"]),
                                            step=spec.get("step"), log=log)
        else:
            raise UserError(f"tune space '{name}': type must be int or float")
    return out


def base_config(method: str, params: dict, cfg: dict) -> dict:
    """The method's configured parameters (its row of `runs`, else models.<method>) + tune.fixed."""
    from signclust.models.train import run_config
    if method in (params.get("runs") or {}):
        run_method, base, _ = run_config(method, params)
        if run_method != method:
            raise UserError(f"runs.{method} is method '{run_method}'; tune a method by its own name")
    else:
        base = dict((params.get("models") or {}).get(method) or {})
    return deep_update(base, (cfg["fixed"] or {}).get(method) or {})


# -- the label-free objective ---------------------------------------------------------------------

class CorpusData:
    """What scoring needs, computed once per corpus: gold labels, texts, normalised glyph pixels."""

    def __init__(self, corpus: Corpus, name: str):
        from signclust.data.glyphs import normalize_glyphs
        self.corpus, self.name = corpus, name
        self.gold = corpus.labels() if corpus.has_labels else None
        self.texts = [t for t in corpus.texts() if len(t)]
        g = normalize_glyphs(corpus.images)
        self.glyphs = g.reshape(len(g), -1).astype(np.float32) / 255.0     # per image
        self.image_index = corpus.image_index()

    @property
    def k_true(self) -> int | None:
        return None if self.gold is None else int(len(np.unique(self.gold)))


def heldout_bigram_ce(labels: np.ndarray, texts: list[np.ndarray], folds: int = 5, alpha: float = 0.1,
                      seed: int = 0) -> float:
    """Cross-entropy (nats per symbol) of each held-out text's type sequence under an add-alpha
    bigram model fitted on the other texts (k-fold by text; a text boundary symbol starts and ends
    every text). With one text only there is nothing to hold out: scored in-sample."""
    labels = np.unique(np.asarray(labels), return_inverse=True)[1]
    k = int(labels.max()) + 1 if len(labels) else 1
    boundary = k
    vocab = k + 1
    folds = max(1, min(int(folds), len(texts)))
    rank = np.empty(len(texts), dtype=np.int64)
    rank[np.random.default_rng(seed).permutation(len(texts))] = np.arange(len(texts))
    prev, nxt, fold = [], [], []
    for i, t in enumerate(texts):
        seq = np.concatenate([[boundary], labels[t], [boundary]])
        prev.append(seq[:-1])
        nxt.append(seq[1:])
        fold.append(np.full(len(seq) - 1, rank[i] % folds))
    prev, nxt, fold = np.concatenate(prev), np.concatenate(nxt), np.concatenate(fold)
    code = prev * vocab + nxt
    total = 0.0
    for f in range(folds):
        test = fold == f
        train = ~test if folds > 1 else np.ones_like(test)
        keys, counts = np.unique(code[train], return_counts=True)
        row_tot = np.bincount(prev[train], minlength=vocab)
        pos = np.searchsorted(keys, code[test])
        pos = np.minimum(pos, max(len(keys) - 1, 0))
        c = np.where((len(keys) > 0) & (keys[pos] == code[test]), counts[pos], 0) if len(keys) else \
            np.zeros(int(test.sum()))
        p = (c + alpha) / (row_tot[prev[test]] + alpha * vocab)
        total += float(-np.log(p).sum())
    return total / len(code)


def visual_inhomogeneity(labels: np.ndarray, glyphs: np.ndarray, image_index: np.ndarray,
                         chunk: int = 20000) -> float:
    """Mean L1 distance of a token's normalised glyph to its type's mean glyph, divided by the same
    to the corpus mean glyph: 1 for one type, 0 when every type is a set of identical glyphs."""
    labels = np.unique(np.asarray(labels), return_inverse=True)[1]
    k = int(labels.max()) + 1
    sums = np.zeros((k, glyphs.shape[1]), dtype=np.float64)
    np.add.at(sums, labels, glyphs[image_index])
    cent = sums / np.bincount(labels, minlength=k)[:, None]
    mean = sums.sum(0) / len(labels)
    within = across = 0.0
    for start in range(0, len(labels), chunk):
        x = glyphs[image_index[start:start + chunk]]
        within += float(np.abs(x - cent[labels[start:start + chunk]]).sum())
        across += float(np.abs(x - mean).sum())
    return within / across if across > 0 else 0.0


def unsupervised_score(labels: np.ndarray, data: CorpusData, ucfg: dict) -> dict:
    """U = -(a * CE_heldout / log(n) + b * inhomogeneity), both terms in [0, ~1].

    A clustering that lumps everything is perfectly predictable (CE 0) and maximally
    inhomogeneous (1); one that splits every token is homogeneous (0) and unpredictable
    (CE ~ log n). The weights a, b are ``tune.unsupervised.lm_weight``/``hom_weight``.
    Measured on cypriot Ward cuts from K=5 to 800 this sum is nearly flat (-1.10 .. -1.16) while V
    rises from 0.42 to 0.70: a weak signal; the tune report's Spearman correlation says how it
    ranks real trials.
    """
    n = len(labels)
    ce = heldout_bigram_ce(labels, data.texts, int(ucfg.get("folds", 5)), float(ucfg.get("alpha", 0.1)))
    hom = visual_inhomogeneity(labels, data.glyphs, data.image_index)
    ce_norm = ce / math.log(max(n, 2))
    u = -(float(ucfg.get("lm_weight", 1.0)) * ce_norm + float(ucfg.get("hom_weight", 1.0)) * hom)
    return {"unsupervised": u, "heldout_ce": ce, "hom_rel": hom}


def fit_and_score(method: str, params: dict, data: CorpusData, seed: int, device: str, ucfg: dict,
                  log_metrics=None, fixed_k: bool = False, eval_cfg: dict | None = None) -> dict:
    from signclust.evaluation.metrics import score
    from signclust.models.base import FitContext, get_clusterer
    clusterer = get_clusterer(method, **params)
    if clusterer.needs_k and data.k_true is None:
        raise UserError(f"{method} needs the number of types, but corpus '{data.name}' has no labels")
    ctx = FitContext(seed=seed, n_clusters=data.k_true if clusterer.needs_k else None, device=device,
                     progress=False, log_metrics=log_metrics)
    t0 = time.time()
    result = clusterer.fit(data.corpus, ctx)
    out = {"seconds": time.time() - t0, "k_found": result.k_found}
    out.update(unsupervised_score(result.labels, data, ucfg))
    if data.gold is not None:
        s = score(data.gold, result.labels)
        out.update({k: s[k] for k in ("v_measure", "nmi", "ari", "acc")})
        if fixed_k:
            from signclust.evaluation.ablation import evaluate_fit
            out["fixed_k_v_measure"] = evaluate_fit(data.gold, result, eval_cfg, seed)["fixed_k_v_measure"]
    return out


# -- MLflow, never fatal inside a trial -----------------------------------------------------------

class _SafeRun:
    def __init__(self, run):
        self._run, self._warned = run, False
        self.run_id = getattr(run, "run_id", None)

    def _call(self, name, *args, **kwargs):
        try:
            getattr(self._run, name)(*args, **kwargs)
        except Exception as err:  # a tracking hiccup must not cost the trial
            if not self._warned:
                print(f"warning: MLflow {name} failed: {err}", file=sys.stderr)
                self._warned = True

    def log_params(self, p): self._call("log_params", p)
    def log_metrics(self, m, step=None): self._call("log_metrics", m, step)
    def set_tags(self, t): self._call("set_tags", t)


def _mlflow_client():
    mlflow = tracking._mlflow()
    return mlflow, mlflow.tracking.MlflowClient()


def open_parent_run(study, study_name: str, info: dict) -> str | None:
    """The study's MLflow parent run (created once, reused by later invocations)."""
    if not tracking.enabled():
        return None
    try:
        mlflow, client = _mlflow_client()
        run_id = study.user_attrs.get("mlflow_parent_run_id")
        if run_id:
            try:
                client.get_run(run_id)
                client.update_run(run_id, status="RUNNING")
                return run_id
            except Exception:
                pass
        with tracking.run("tune", study_name, tags={"study": study_name, **{k: str(v) for k, v in info.items()}}) \
                as parent:
            parent.log_params(info)
            run_id = parent.run_id
        client.update_run(run_id, status="RUNNING")
        study.set_user_attr("mlflow_parent_run_id", run_id)
        return run_id
    except Exception as err:
        print(f"warning: no MLflow parent run: {err}", file=sys.stderr)
        return None


# -- the objective and the worker -----------------------------------------------------------------

def proxy_value(record: dict, keys: list[str]) -> float | None:
    """Minus the signed sum of ``keys`` of an epoch record ("-entropy" subtracts): higher is better."""
    if not keys:
        return None
    total = 0.0
    for key in keys:
        sign, name = (-1.0, key[1:]) if key.startswith("-") else (1.0, key)
        if name not in record:
            return None
        total += sign * float(record[name])
    return -total if math.isfinite(total) else None


class Objective:
    def __init__(self, method: str, params: dict, cfg: dict, data: CorpusData, objective: str,
                 study_name: str, parent_run_id: str | None):
        self.method, self.params, self.cfg, self.data = method, params, cfg, data
        self.objective, self.study_name, self.parent_run_id = objective, study_name, parent_run_id
        self.base = base_config(method, params, cfg)
        self.space = (cfg["spaces"] or {}).get(method)
        if not self.space:
            raise UserError(f"params.yaml tune.spaces has no search space for '{method}'")
        self.proxy_keys = list((cfg["intermediate"] or {}).get(method) or [])
        self.device = (params.get("train") or {}).get("device", "auto")

    def __call__(self, trial):
        import optuna
        suggested = suggest(trial, self.space)
        config = {**self.base, **suggested}
        tags = {"study": self.study_name, "method": self.method, "corpus": self.data.name,
                "trial": str(trial.number)}
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        state = {"proxy": None}
        try:
            run_ctx = tracking.run("tune", f"{self.study_name}/trial{trial.number:04d}", tags=tags)
            run = run_ctx.__enter__()
        except Exception as err:
            print(f"warning: no MLflow run for trial {trial.number}: {err}", file=sys.stderr)
            run_ctx, run = None, tracking._NullRun()
        mlrun = _SafeRun(run)
        exc_info = (None, None, None)
        try:
            mlrun.log_params({"method": self.method, "corpus": self.data.name, "objective": self.objective,
                              "trial": trial.number, **config})

            def log_metrics(metrics: dict, step: int):
                mlrun.log_metrics(metrics, step)
                value = proxy_value(metrics, self.proxy_keys)
                if value is None:
                    return
                if not math.isfinite(value):
                    return
                state["proxy"] = value
                trial.report(value, int(step))
                if trial.should_prune():
                    raise optuna.TrialPruned(f"epoch {step}: proxy {value:.4f} below the median")

            try:
                scores = fit_and_score(self.method, config, self.data, int(self.cfg["fit_seed"]), self.device,
                                       self.cfg["unsupervised"], log_metrics)
            except optuna.TrialPruned:
                mlrun.set_tags({"state": "pruned"})
                raise
            except KeyboardInterrupt:
                trial.set_user_attr("interrupted", True)   # the next invocation re-enqueues it
                mlrun.set_tags({"state": "interrupted"})
                raise
            if state["proxy"] is not None:
                scores["proxy"] = state["proxy"]
            for key, value in scores.items():
                trial.set_user_attr(key, float(value))
            if self.objective == "supervised":
                if "v_measure" not in scores:
                    raise UserError(f"corpus '{self.data.name}' has no gold labels: use --objective unsupervised")
                value = scores["v_measure"]
            else:
                value = scores["unsupervised"]
            mlrun.log_metrics({**scores, "value": value})
            mlrun.set_tags({"state": "complete"})
            print(f"trial {trial.number}: value {value:.4f} (V {scores.get('v_measure', float('nan')):.3f}, "
                  f"U {scores['unsupervised']:.3f}, K {scores['k_found']}, {scores['seconds']:.1f}s) {suggested}",
                  flush=True)
            return value
        except optuna.TrialPruned:      # a pruned trial ends normally in MLflow (tag state=pruned)
            raise
        except BaseException:
            exc_info = sys.exc_info()
            raise
        finally:
            if run_ctx is not None:
                try:
                    run_ctx.__exit__(*exc_info)
                except Exception:
                    pass


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run_worker(args, params: dict, cfg: dict) -> None:
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    threads = int(os.environ.get("SIGNCLUST_WORKER_THREADS", "0"))
    if threads > 0:
        import torch
        torch.set_num_threads(threads)
    storage = make_storage(args.storage, cfg)
    n_before = args.seen_trials
    sampler = optuna.samplers.TPESampler(seed=int(cfg["sampler_seed"]) * 10007 + 101 * n_before + args.worker_index,
                                         constant_liar=True)
    study = optuna.load_study(study_name=args.study, storage=storage, sampler=sampler, pruner=make_pruner(cfg))
    data = CorpusData(Corpus.load(args.corpus_dir), args.corpus)
    objective = Objective(args.method, params, cfg, data, args.objective, args.study, args.parent_run_id)
    study.optimize(objective, n_trials=args.n_trials, catch=(Exception,), gc_after_trial=True,
                   callbacks=[MaxTrialsCallback(args.trials, states=(TrialState.COMPLETE, TrialState.PRUNED))])


# -- the parent: study, workers, report -----------------------------------------------------------

def count_states(study) -> dict:
    from optuna.trial import TrialState
    counts = {s.name.lower(): 0 for s in TrialState}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name.lower()] += 1
    return counts


def reenqueue_interrupted(study) -> int:
    """FAIL trials marked interrupted (Ctrl-C/SIGTERM) and not retried yet go back to the queue."""
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    callback = RetryHeartbeatStaleTrialCallback(max_retry=None)   # an interrupt is never the trial's fault
    n = 0
    for t in trials:
        if t.state == TrialState.FAIL and t.user_attrs.get("interrupted") and t.number not in retried:
            callback(study, t)
            n += 1
    return n


def shares(total: int, workers: int) -> list[int]:
    base, extra = divmod(total, workers)
    return [base + (1 if i < extra else 0) for i in range(workers) if base + (1 if i < extra else 0) > 0]


def start_workers(args, n_missing: int, seen: int, parent_run_id: str | None) -> int:
    """Run the workers (subprocesses of this command) and wait; returns how many failed."""
    workers = shares(n_missing, max(1, args.workers))
    threads = max(1, (os.cpu_count() or 1) // max(1, len(workers)))
    env = dict(os.environ, SIGNCLUST_WORKER_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    procs = []
    for i, n in enumerate(workers):
        cmd = [sys.executable, "-m", "signclust.tuning.tune", "--worker", "--study", args.study,
               "--method", args.method, "--corpus", args.corpus, "--corpus-dir", str(args.corpus_dir),
               "--storage", args.storage, "--objective", args.objective, "--trials", str(args.trials),
               "--n-trials", str(n), "--worker-index", str(i), "--seen-trials", str(seen)]
        if parent_run_id:
            cmd += ["--parent-run-id", parent_run_id]
        procs.append(subprocess.Popen(cmd, env=env))
    print(f"study {args.study}: {len(procs)} worker(s) for {n_missing} trial(s), pids "
          f"{', '.join(str(p.pid) for p in procs)}", flush=True)
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        for p in procs:          # our own children, one by one: they mark their trials interrupted
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    return sum(1 for c in codes if c != 0)


def spearman(x: list[float], y: list[float]) -> dict:
    from scipy.stats import spearmanr
    out = {"n": len(x), "rho": None, "p": None}
    if len(x) >= 3 and len(set(x)) > 1 and len(set(y)) > 1:
        res = spearmanr(x, y)
        out.update(rho=float(res.statistic), p=float(res.pvalue))
    return out


def agreement(study) -> dict:
    """Rank agreement with V-measure of the unsupervised objective and of the pruning proxy."""
    from optuna.trial import TrialState
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if "v_measure" in t.user_attrs]
    u = [t for t in done if "unsupervised" in t.user_attrs]
    p = [t for t in done if "proxy" in t.user_attrs]
    out = {"unsupervised_vs_v": spearman([t.user_attrs["unsupervised"] for t in u],
                                         [t.user_attrs["v_measure"] for t in u]),
           "proxy_vs_v": spearman([t.user_attrs["proxy"] for t in p], [t.user_attrs["v_measure"] for t in p])}
    if u:
        best_u = max(u, key=lambda t: t.user_attrs["unsupervised"])
        best_v = max(u, key=lambda t: t.user_attrs["v_measure"])
        out["pick_by_unsupervised"] = {"trial": best_u.number, "v_measure": best_u.user_attrs["v_measure"],
                                       "best_v_trial": best_v.number, "best_v": best_v.user_attrs["v_measure"]}
    return out


def best_config(study, method: str, params: dict, cfg: dict) -> tuple[object, dict]:
    best = study.best_trial
    return best, {**base_config(method, params, cfg), **best.params}


def write_tuned_params(path: Path, method: str, config: dict, study_name: str, best, objective: str,
                       corpus: str) -> None:
    import yaml
    clean = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in config.items()}
    header = (f"# Best configuration of Optuna study '{study_name}' (trial {best.number}, {objective} objective "
              f"= {best.value:.4f} on {corpus}),\n"
              "# written by `python -m signclust.tuning.tune`: the method's configured parameters, the settings\n"
              "# held fixed during tuning (tune.fixed) and the tuned ones, in the shape of params.yaml\n"
              "# models.<method>.\n")
    atomic_write_text(path, header + yaml.safe_dump({method: clean}, sort_keys=True))


def plot_study(study, history_path: Path, importance_path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    for path, fn in ((history_path, ovm.plot_optimization_history), (importance_path, ovm.plot_param_importances)):
        plt.close("all")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")        # e.g. "importances will be equal" on few trials
                ax = fn(study)
            fig = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
        except Exception as err:   # e.g. importance needs two completed trials that differ
            fig, ax = plt.subplots(figsize=(6, 3))
            ax.axis("off")
            ax.text(0.5, 0.5, f"{fn.__name__}: not available yet\n({err})", ha="center", va="center",
                    fontsize=8, wrap=True)
        fig.set_size_inches(7, 4)
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
        plt.close(fig)


def _fmt(v, spec="{:.3f}"):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return spec.format(v) if isinstance(v, (int, float)) else str(v)


def report_markdown(study, args, storage_url: str, tuned_path: Path | None, figures: dict) -> str:
    from optuna.trial import TrialState
    counts = count_states(study)
    lines = [f"# Optuna study `{study.study_name}`", "",
             f"Method `{args.method}` tuned on `{args.corpus}`, {args.objective} objective "
             f"({'V-measure' if args.objective == 'supervised' else 'label-free U, see signclust.tuning.tune'}), "
             f"budget {args.trials} finished trials. Storage `{redact(storage_url)}`.", "",
             "Trials: " + ", ".join(f"{counts[s]} {s}" for s in ("complete", "pruned", "fail", "running", "waiting")
                                     if counts.get(s)) + ".", ""]
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return "\n".join(lines + ["No completed trial yet.", ""])
    best = study.best_trial
    ua = best.user_attrs
    lines += ["## Best trial", "",
              f"Trial {best.number}: objective {best.value:.4f}; V {_fmt(ua.get('v_measure'))}, "
              f"NMI {_fmt(ua.get('nmi'))}, ARI {_fmt(ua.get('ari'))}, K {_fmt(ua.get('k_found'), '{:.0f}')}, "
              f"U {_fmt(ua.get('unsupervised'))}, {_fmt(ua.get('seconds'), '{:.1f}')} s.", "",
              "| parameter | value |", "|---|---|"]
    lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in best.params.items()]
    lines.append("")
    if tuned_path is not None:
        shown = tuned_path.relative_to(REPO_ROOT) if tuned_path.is_relative_to(REPO_ROOT) else tuned_path
        lines += [f"Full configuration: `{shown}`.", ""]
    agree = agreement(study)
    a, pr = agree["unsupervised_vs_v"], agree["proxy_vs_v"]
    lines += ["## Does the label-free objective agree with V-measure?", "",
              f"Spearman ρ between the unsupervised objective U and V over {a['n']} completed trials: "
              f"{_fmt(a['rho'])} (p = {_fmt(a['p'], '{:.3g}')}).  "]
    if "pick_by_unsupervised" in agree:
        pk = agree["pick_by_unsupervised"]
        lines.append(f"Picking the trial with the best U (trial {pk['trial']}) gives V {pk['v_measure']:.3f}; "
                     f"the best V found is {pk['best_v']:.3f} (trial {pk['best_v_trial']}).  ")
    proxy = " ".join((f"- {k[1:]}" if k.startswith("-") else f"+ {k}") for k in args.proxy_keys).lstrip("+ ")
    lines += [f"Pruning proxy (per-epoch -({proxy})) vs V, at the last epoch: ρ = {_fmt(pr['rho'])} over "
              f"{pr['n']} trials." if proxy else f"No pruning: `{args.method}` has no per-epoch proxy "
              "(params.yaml tune.intermediate).", ""]
    transfer = study.user_attrs.get("transfer")
    if transfer:
        stale = transfer.get("trial") != best.number
        lines += [f"## Transfer: tuned on `{args.corpus}`, reported on `{transfer['corpus']}`", "",
                  f"Seeds {', '.join(map(str, transfer['seeds']))}; mean ± std. Both with the tuning's fixed settings; "
                  f"`configured` is params.yaml's configuration of `{args.method}`."
                  + (f" **Computed for trial {transfer['trial']}, not the current best: rerun with --report-on.**"
                     if stale else ""), "",
                  "| configuration | V | NMI | ARI | K | fixed-K V | s / fit |", "|---|---:|---:|---:|---:|---:|---:|"]
        for name in ("tuned", "configured"):
            m, s = transfer[name]["mean"], transfer[name]["std"]
            cells = [f"{_fmt(m.get(k))} ± {_fmt(s.get(k))}" for k in ("v_measure", "nmi", "ari")]
            cells += [_fmt(m.get("k_found"), "{:.1f}"), f"{_fmt(m.get('fixed_k_v_measure'))} ± "
                      f"{_fmt(s.get('fixed_k_v_measure'))}", _fmt(m.get("seconds"), "{:.1f}")]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    top = sorted(complete, key=lambda t: t.value, reverse=True)[:10]
    keys = list(best.params)
    lines += ["## Top trials", "", "| trial | value | V | U | K | " + " | ".join(keys) + " |",
              "|" + "---:|" * (5 + len(keys))]
    for t in top:
        cells = [str(t.number), f"{t.value:.4f}", _fmt(t.user_attrs.get("v_measure")),
                 _fmt(t.user_attrs.get("unsupervised")), _fmt(t.user_attrs.get("k_found"), "{:.0f}")]
        cells += [f"{t.params.get(k):.4g}" if isinstance(t.params.get(k), float) else str(t.params.get(k, "–"))
                  for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"![history](figures/{figures['history'].name}) ![importance](figures/{figures['importance'].name})",
              ""]
    return "\n".join(lines)


def transfer_configs(args, params: dict, cfg: dict, study) -> dict:
    return {"tuned": best_config(study, args.method, params, cfg)[1],
            "configured": base_config(args.method, params, cfg)}


def run_transfer(args, params: dict, cfg: dict, study, seeds: list[int], configs: dict) -> dict:
    """Best and configured parameters fitted on another labelled corpus."""
    from signclust.evaluation import evaluate as ev
    from signclust.evaluation.ablation import summarise
    if args.report_on == args.corpus:
        raise UserError("--report-on must name a different corpus than --corpus: never tune and report "
                        "on the same gold labels")
    corpus_dir = args.report_on_dir or REPO_ROOT / "data" / "corpora" / args.report_on
    if not Path(corpus_dir).exists():
        raise UserError(f"corpus folder not found: {corpus_dir}")
    corpus = Corpus.load(corpus_dir)
    if not corpus.has_labels:
        raise UserError(f"--report-on corpus '{args.report_on}' has no gold labels to report against")
    data = CorpusData(corpus, args.report_on)
    device = (params.get("train") or {}).get("device", "auto")
    eval_cfg = ev.config(params)
    out = {"corpus": args.report_on, "seeds": seeds, "trial": study.best_trial.number, "configs": configs}
    for name, conf in configs.items():
        per_seed = {}
        for seed in seeds:
            per_seed[f"seed{seed}"] = fit_and_score(args.method, conf, data, seed, device, cfg["unsupervised"],
                                                    fixed_k=True, eval_cfg=eval_cfg)
            print(f"transfer {name} on {args.report_on} seed {seed}: V {per_seed[f'seed{seed}']['v_measure']:.3f}",
                  flush=True)
        mean, std = summarise(per_seed, int(eval_cfg["std_ddof"]))
        extra = [k for k in ("unsupervised",) if all(k in s for s in per_seed.values())]
        for k in extra:
            mean[k] = float(np.mean([s[k] for s in per_seed.values()]))
        out[name] = {"mean": mean, "std": std, "per_seed": per_seed}
    return out


def run_parent(args, params: dict, cfg: dict) -> dict:
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage = make_storage(args.storage, cfg)
    info = {"method": args.method, "corpus": args.corpus, "objective": args.objective}
    # created here, once, before any worker starts: workers only load it
    study = optuna.create_study(study_name=args.study, storage=storage, direction="maximize", load_if_exists=True)
    for key, value in info.items():
        have = study.user_attrs.get(key)
        if have is None:
            study.set_user_attr(key, value)
        elif have != value:
            raise UserError(f"study '{args.study}' was made for {key} '{have}', not '{value}': "
                            f"choose another --study name")
    optuna.storages.fail_stale_trials(study)           # killed-outright trials past their grace period
    requeued = reenqueue_interrupted(study)
    counts = count_states(study)
    finished = counts["complete"] + counts["pruned"]
    missing = max(0, args.trials - finished)
    print(f"study {args.study} ({redact(args.storage)}): {finished} finished, {counts['fail']} failed, "
          f"{counts['running']} running, {counts['waiting']} waiting ({requeued} re-enqueued); "
          f"{missing} to run", flush=True)
    parent_run_id = open_parent_run(study, args.study, {**info, "storage": redact(args.storage)}) \
        if (missing or args.report_on) else study.user_attrs.get("mlflow_parent_run_id")
    failed_workers = 0
    if missing:
        failed_workers = start_workers(args, missing, len(study.get_trials(deepcopy=False)), parent_run_id)
    study = optuna.load_study(study_name=args.study, storage=storage)
    if args.report_on:
        if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            raise UserError("no completed trial to report on another corpus")
        seeds = args.report_seeds if args.report_seeds is not None else list(cfg["report_seeds"])
        done = study.user_attrs.get("transfer") or {}
        configs = transfer_configs(args, params, cfg, study)
        same = {"corpus": args.report_on, "seeds": seeds, "trial": study.best_trial.number, "configs": configs}
        if all(done.get(k) == v for k, v in same.items()):
            print(f"transfer to {args.report_on}: already fitted for trial {same['trial']} with these "
                  "configurations and seeds; reusing it", flush=True)
        else:
            study.set_user_attr("transfer", run_transfer(args, params, cfg, study, seeds, configs))
    outputs = write_outputs(study, args, params, cfg)
    _finish_parent_run(parent_run_id, study, outputs)
    counts = count_states(study)
    print(f"study {args.study}: {counts['complete']} complete, {counts['pruned']} pruned, {counts['fail']} failed"
          + (f"; best trial {study.best_trial.number} = {study.best_value:.4f}" if counts["complete"] else ""))
    print("-> " + ", ".join(str(p) for p in outputs.values()))
    if failed_workers:
        raise UserError(f"{failed_workers} worker(s) exited with an error (see above); rerun to finish the budget")
    return outputs


def write_outputs(study, args, params: dict, cfg: dict) -> dict:
    from optuna.trial import TrialState
    reports = Path(args.reports or REPO_ROOT / "reports")
    figures = {"history": reports / "figures" / f"tune_{args.study}_history.png",
               "importance": reports / "figures" / f"tune_{args.study}_importance.png"}
    tuned_path = None
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        best, config = best_config(study, args.method, params, cfg)
        tuned_path = Path(args.params_out or REPO_ROOT / "params" / f"tuned_{args.method}.yaml")
        write_tuned_params(tuned_path, args.method, config, args.study, best, args.objective, args.corpus)
    plot_study(study, figures["history"], figures["importance"])
    md = reports / f"tune_{args.study}.md"
    args.proxy_keys = list((cfg["intermediate"] or {}).get(args.method) or [])
    atomic_write_text(md, report_markdown(study, args, args.storage, tuned_path, figures))
    summary = reports / "studies" / f"{args.study}.json"   # not metrics/: no dvc stage reads it
    write_json(summary, study_summary(study, args))
    out = {"report": md, "summary": summary, **figures}
    from signclust.tuning.summary import write_comparison
    out["comparison"] = write_comparison(reports)      # every study so far, side by side
    if tuned_path is not None:
        out["params"] = tuned_path
    return out


def study_summary(study, args) -> dict:
    """What the study found, in a file that outlives the (git-ignored) Optuna storage: read by
    ``signclust.tuning.summary`` to put the methods' studies side by side."""
    from optuna.trial import TrialState
    out = {"study": study.study_name, "method": args.method, "corpus": args.corpus,
           "objective": args.objective, "budget": args.trials, "trials": count_states(study),
           "agreement": agreement(study), "transfer": study.user_attrs.get("transfer")}
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        best = study.best_trial
        out["best"] = {"trial": best.number, "value": best.value, "params": best.params,
                       "scores": {k: v for k, v in best.user_attrs.items() if k in SCORE_KEYS}}
    return out


def _finish_parent_run(run_id: str | None, study, outputs: dict) -> None:
    if not run_id or not tracking.enabled():
        return
    try:
        _, client = _mlflow_client()
        counts = count_states(study)
        for k in ("complete", "pruned", "fail"):
            client.log_metric(run_id, f"trials_{k}", counts[k])
        if counts["complete"]:
            client.log_metric(run_id, "best_value", study.best_value)
            for k, v in study.best_trial.user_attrs.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    client.log_metric(run_id, f"best.{k}", float(v))
        a = agreement(study)["unsupervised_vs_v"]
        if a["rho"] is not None:
            client.log_metric(run_id, "spearman_unsupervised_v", a["rho"])
        transfer = study.user_attrs.get("transfer") or {}
        for name in ("tuned", "configured"):
            for k, v in (transfer.get(name) or {}).get("mean", {}).items():
                client.log_metric(run_id, f"transfer.{name}.{k}", float(v))
        for path in outputs.values():
            if Path(path).exists():
                client.log_artifact(run_id, str(path))
        client.set_terminated(run_id)
    except Exception as err:
        print(f"warning: MLflow parent run not updated: {err}", file=sys.stderr)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", help="study name (default <method>_<corpus>_<objective>)")
    ap.add_argument("--method", default="lm", help="a method with a space in params.yaml tune.spaces")
    ap.add_argument("--corpus", default="cypriot", help="the tuning (development) corpus")
    ap.add_argument("--corpus-dir", type=Path, help="default data/corpora/<corpus>")
    ap.add_argument("--trials", type=int, help="the study's budget of finished trials (default tune.trials)")
    ap.add_argument("--workers", type=int, help="parallel worker processes (default tune.workers)")
    ap.add_argument("--storage", help="SQLAlchemy URL (default tune.storage, else sqlite:///optuna.db in the repo)")
    ap.add_argument("--objective", choices=OBJECTIVES, help="default tune.objective")
    ap.add_argument("--report-on", help="fit the best configuration on this other labelled corpus and report it")
    ap.add_argument("--report-on-dir", type=Path, help="default data/corpora/<report-on>")
    ap.add_argument("--report-seeds", type=int, nargs="+", help="default tune.report_seeds")
    ap.add_argument("--reports", type=Path, help="reports folder (default reports/)")
    ap.add_argument("--params-out", type=Path, help="default params/tuned_<method>.yaml")
    # internal: a worker process started by the parent
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n-trials", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seen-trials", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--parent-run-id", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    params = load_params()
    cfg = tune_config(params)
    args.trials = int(cfg["trials"] if args.trials is None else args.trials)
    args.workers = int(cfg["workers"] if args.workers is None else args.workers)
    args.objective = args.objective or cfg["objective"]
    if args.objective not in OBJECTIVES:
        raise UserError(f"tune.objective must be one of {', '.join(OBJECTIVES)}")
    args.storage = args.storage or cfg["storage"] or default_storage()
    args.study = args.study or f"{args.method}_{args.corpus}_{args.objective}"
    args.corpus_dir = args.corpus_dir or REPO_ROOT / "data" / "corpora" / args.corpus
    if args.trials < 0 or args.workers < 1:
        raise UserError("--trials must be >= 0 and --workers >= 1")
    if not (cfg["spaces"] or {}).get(args.method):
        raise UserError(f"params.yaml tune.spaces has no search space for '{args.method}' "
                        f"(have: {', '.join(cfg['spaces'] or {}) or 'none'})")
    if not Path(args.corpus_dir).exists():
        raise UserError(f"corpus folder not found: {args.corpus_dir}")
    if args.report_on and args.report_on == args.corpus:
        raise UserError("--report-on must name a different corpus than --corpus: never tune and report "
                        "on the same gold labels")
    if args.worker:
        run_worker(args, params, cfg)
        return
    signal.signal(signal.SIGTERM, _raise_interrupt)   # stop the workers too, their trials marked interrupted
    if args.objective == "supervised" and not Corpus.load(args.corpus_dir, mmap=True).has_labels:
        raise UserError(f"corpus '{args.corpus}' has no gold labels: use --objective unsupervised")
    run_parent(args, params, cfg)


if __name__ == "__main__":
    main()
