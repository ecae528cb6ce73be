"""A trial: suggest parameters, fit, score; prune on a per-epoch proxy.

Pruning contract (see ``signclust.models.base.FitContext``): the trial's ``log_metrics`` callback
reports the per-epoch proxy to Optuna and, when the pruner says so, raises
``signclust.models.base.StopFit``; the fit lets it propagate and the objective turns it into
``optuna.TrialPruned``. Models never see Optuna.

The proxy is minus the signed sum of the epoch record's keys ``tune.intermediate.<method>`` (lm:
L_LM - H(marginal) + L_hom, unweighted so that trials with other loss weights compare, and with
the marginal entropy taken off because L_LM alone grows like log K; the deep baselines: their
training loss). V-measure is not observable per epoch, so under the supervised objective the
pruner works on this training-side proxy; the report gives its rank agreement with V.
"""
from __future__ import annotations

import math
import time

from signclust import tracking
from signclust.errors import UserError
from signclust.evaluation.label_free import CorpusData, unsupervised_score
from signclust.tuning.study import OBJECTIVE_SCORES, base_config, fit_seeds


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


def fit_and_score(method: str, params: dict, data: CorpusData, seed: int, device: str, ucfg: dict,
                  log_metrics=None, fixed_k: bool = False, eval_cfg: dict | None = None) -> dict:
    """Fit one configuration and score it: label-free U always, V/NMI/ARI/ACC with labels."""
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


def mean_scores(runs: list[dict]) -> dict:
    """One trial's scores over its fits (one per ``tune.fit_seed``): each score's mean, the seconds summed."""
    if len(runs) == 1:
        return runs[0]
    return {key: (sum(r[key] for r in runs) if key == "seconds" else sum(r[key] for r in runs) / len(runs))
            for key in runs[0]}


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


class PruningCallback:
    """``FitContext.log_metrics`` of a trial: logs the epoch to MLflow, reports the proxy to Optuna
    and raises ``StopFit`` when the pruner prunes (the documented contract of FitContext)."""

    def __init__(self, trial, proxy_keys: list[str], mlrun):
        self.trial, self.proxy_keys, self.mlrun = trial, proxy_keys, mlrun
        self.last: float | None = None

    def __call__(self, metrics: dict, step: int) -> None:
        from signclust.models.base import StopFit
        self.mlrun.log_metrics(metrics, step)
        value = proxy_value(metrics, self.proxy_keys)
        if value is None or not math.isfinite(value):
            return
        self.last = value
        self.trial.report(value, int(step))
        if self.trial.should_prune():
            raise StopFit(f"epoch {step}: proxy {value:.4f} below the median")


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
        self.seeds = fit_seeds(cfg)

    def __call__(self, trial):
        import optuna

        from signclust.models.base import StopFit
        suggested = suggest(trial, self.space)
        config = {**self.base, **suggested}
        tags = {"study": self.study_name, "method": self.method, "corpus": self.data.name,
                "trial": str(trial.number)}
        pruned = None
        # a pruned trial ends its MLflow run normally (tag state=pruned); any other exception
        # leaving the block ends it FAILED. Tracking errors only warn (fail_soft).
        with tracking.run("tune", f"{self.study_name}/trial{trial.number:04d}", tags=tags,
                          parent_run_id=self.parent_run_id, fail_soft=True) as mlrun:
            mlrun.log_params({"method": self.method, "corpus": self.data.name, "objective": self.objective,
                              "trial": trial.number, **config})
            callback = PruningCallback(trial, self.proxy_keys, mlrun)
            try:
                # the pruner reads the first seed's epochs only: the proxy of other seeds' fits would be
                # reported at the same steps again
                scores = mean_scores([fit_and_score(self.method, config, self.data, seed, self.device,
                                                    self.cfg["unsupervised"], callback if i == 0 else None)
                                      for i, seed in enumerate(self.seeds)])
            except StopFit as stop:
                mlrun.set_tags({"state": "pruned"})
                pruned = stop
            except KeyboardInterrupt:
                trial.set_user_attr("interrupted", True)   # the next invocation re-enqueues it
                mlrun.set_tags({"state": "interrupted"})
                raise
            if pruned is None:
                value = self._record(trial, scores, callback.last)
                mlrun.log_metrics({**scores, "value": value})
                mlrun.set_tags({"state": "complete"})
        if pruned is not None:
            raise optuna.TrialPruned(str(pruned))
        print(f"trial {trial.number}: value {value:.4f} (V {scores.get('v_measure', float('nan')):.3f}, "
              f"U {scores['unsupervised']:.3f}, context {scores['context_evidence']:.4f}, K {scores['k_found']}, "
              f"{scores['seconds']:.1f}s) {suggested}",
              flush=True)
        return value

    def _record(self, trial, scores: dict, proxy: float | None) -> float:
        if proxy is not None:
            scores["proxy"] = proxy
        for key, value in scores.items():
            trial.set_user_attr(key, float(value))
        if self.objective == "supervised" and "v_measure" not in scores:
            raise UserError(f"corpus '{self.data.name}' has no gold labels: use a label-free --objective "
                            "(unsupervised or context)")
        return scores[OBJECTIVE_SCORES[self.objective]]
