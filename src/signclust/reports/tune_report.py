"""The report of one Optuna study: reports/tune_<study>.md, its figures, its summary JSON and the
tuned parameters file (see signclust.tuning.study for the names and the no-clobber rule).

Written by ``signclust tune`` after a study changed; reports/tune_comparison.md (every published
study side by side) is signclust.tuning.summary.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from signclust.config import REPO_ROOT
from signclust.io import atomic_path, atomic_write_text, write_json
from signclust.tuning.storage import redact
from signclust.tuning.study import LABEL_FREE, OBJECTIVE_SCORES, SCORE_KEYS, count_states


def _shown(path: Path) -> Path:
    path = Path(path)
    return path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path


def spearman(x: list[float], y: list[float]) -> dict:
    from scipy.stats import spearmanr
    out = {"n": len(x), "rho": None, "p": None}
    if len(x) >= 3 and len(set(x)) > 1 and len(set(y)) > 1:
        res = spearmanr(x, y)
        out.update(rho=float(res.statistic), p=float(res.pvalue))
    return out


def reaches(rho: float, target: float) -> bool:
    """``rho`` >= ``target``, rounded first: scipy gives a rank correlation of exactly 0.8 (24 trials, sum of
    squared rank differences 460) as 0.7999999999999999."""
    return round(rho, 12) >= target


def agreement(study) -> dict:
    """Rank agreement with V-measure of the two label-free scores (U, ``unsupervised``; the controlled
    context evidence, ``context``: trials made before it was recorded have none) and of the pruning proxy."""
    from optuna.trial import TrialState
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if "v_measure" in t.user_attrs]
    p = [t for t in done if "proxy" in t.user_attrs]
    out = {"proxy_vs_v": spearman([t.user_attrs["proxy"] for t in p], [t.user_attrs["v_measure"] for t in p])}
    for name in LABEL_FREE:
        key = OBJECTIVE_SCORES[name]
        scored = [t for t in done if key in t.user_attrs]
        if name == "context" and not scored:
            continue
        out[f"{name}_vs_v"] = spearman([t.user_attrs[key] for t in scored], [t.user_attrs["v_measure"] for t in scored])
        if scored:
            best_s = max(scored, key=lambda t: t.user_attrs[key])
            best_v = max(scored, key=lambda t: t.user_attrs["v_measure"])
            out[f"pick_by_{name}"] = {"trial": best_s.number, "v_measure": best_s.user_attrs["v_measure"],
                                      "best_v_trial": best_v.number, "best_v": best_v.user_attrs["v_measure"]}
    return out


def write_tuned_params(path: Path, method: str, config: dict, study_name: str, best, objective: str,
                       corpus: str) -> None:
    import yaml
    clean = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in config.items()}
    header = (f"# Best configuration of Optuna study '{study_name}' (trial {best.number}, {objective} objective "
              f"= {best.value:.4f} on {corpus}),\n"
              "# written by `signclust tune`: the method's configured parameters, the settings\n"
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


OBJECTIVE_WORDS = {"supervised": "V-measure", "unsupervised": "label-free U, see signclust.evaluation.label_free",
                   "context": "label-free controlled context evidence, see signclust.evaluation.label_free"}


def report_markdown(study, spec, proxy_keys: list[str], budget: int, tuned_path: Path | None, figures: dict) -> str:
    """reports/tune_<study>.md: best trial, U-V agreement, transfer, top trials, figures."""
    from optuna.trial import TrialState
    counts = count_states(study)
    lines = [f"# Optuna study `{study.study_name}`", "",
             f"Method `{spec.method}` tuned on `{spec.corpus}`, {spec.objective} objective "
             f"({OBJECTIVE_WORDS[spec.objective]}), "
             f"budget {budget} finished trials. Storage `{redact(spec.storage)}`; the study itself: "
             f"`{_shown(spec.outputs()['journal'])}` (`optuna-dashboard` opens it).", "",
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
        lines += [f"Full configuration: `{_shown(tuned_path)}`.", ""]
    agree = agreement(study)
    a, pr = agree["unsupervised_vs_v"], agree["proxy_vs_v"]
    lines += ["## Does the label-free objective agree with V-measure?", "",
              f"Spearman ρ between the unsupervised objective U and V over {a['n']} completed trials: "
              f"{_fmt(a['rho'])} (p = {_fmt(a['p'], '{:.3g}')}).  "]
    if "pick_by_unsupervised" in agree:
        pk = agree["pick_by_unsupervised"]
        lines.append(f"Picking the trial with the best U (trial {pk['trial']}) gives V {pk['v_measure']:.3f}; "
                     f"the best V found is {pk['best_v']:.3f} (trial {pk['best_v_trial']}).  ")
    if "context_vs_v" in agree:
        c = agree["context_vs_v"]
        lines.append(f"Spearman ρ between the controlled context evidence and V over {c['n']} trials: "
                     f"{_fmt(c['rho'])} (p = {_fmt(c['p'], '{:.3g}')}).  ")
        if "pick_by_context" in agree:
            pk = agree["pick_by_context"]
            lines.append(f"Picking the trial with the best context evidence (trial {pk['trial']}) gives V "
                         f"{pk['v_measure']:.3f}.  ")
    proxy = " ".join((f"- {k[1:]}" if k.startswith("-") else f"+ {k}") for k in proxy_keys).lstrip("+ ")
    lines += [f"Pruning proxy (per-epoch -({proxy})) vs V, at the last epoch: ρ = {_fmt(pr['rho'])} over "
              f"{pr['n']} trials." if proxy else f"No pruning: `{spec.method}` has no per-epoch proxy "
              "(params.yaml tune.intermediate).", ""]
    transfer = study.user_attrs.get("transfer")
    if transfer:
        stale = transfer.get("trial") != best.number
        lines += [f"## Transfer: tuned on `{spec.corpus}`, reported on `{transfer['corpus']}`", "",
                  f"Seeds {', '.join(map(str, transfer['seeds']))}; mean ± std. Both with the tuning's fixed settings; "
                  f"`configured` is params.yaml's configuration of `{spec.method}`."
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


def study_summary(study, spec, facts: dict) -> dict:
    """What the study found, in a file that outlives the (git-ignored) working Optuna storage: read by
    ``signclust.tuning.summary`` to put the methods' studies side by side."""
    from optuna.trial import TrialState
    out = {"study": study.study_name, "method": spec.method, "corpus": spec.corpus, "objective": spec.objective,
           "metric": spec.metric_name, "budget": facts["budget"], "uid": facts["uid"],
           "published": facts["published"], "journal": spec.outputs()["journal"].name,
           "trials": count_states(study), "agreement": agreement(study),
           "transfer": study.user_attrs.get("transfer")}
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        best = study.best_trial
        out["best"] = {"trial": best.number, "value": best.value, "params": best.params,
                       "scores": {k: v for k, v in best.user_attrs.items() if k in SCORE_KEYS}}
    return out


def write_outputs(study, spec, params: dict, cfg: dict, facts: dict) -> dict:
    """Every output of the study (names in StudySpec.outputs) and, for a published study, the
    side-by-side comparison; returns {what: path}."""
    from optuna.trial import TrialState

    from signclust.tuning.study import best_config
    out = spec.outputs()
    written = {"report": out["report"], "summary": out["summary"], "history": out["history"],
               "importance": out["importance"]}
    tuned_path = None
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        best, config = best_config(study, spec.method, params, cfg)
        tuned_path = out["params"]
        write_tuned_params(tuned_path, spec.method, config, spec.name, best, spec.objective, spec.corpus)
        written["params"] = tuned_path
    plot_study(study, out["history"], out["importance"])
    proxy_keys = list((cfg["intermediate"] or {}).get(spec.method) or [])
    atomic_write_text(out["report"], report_markdown(study, spec, proxy_keys, facts["budget"], tuned_path,
                                                     {"history": out["history"], "importance": out["importance"]}))
    write_json(out["summary"], study_summary(study, spec, facts))
    if facts["published"]:
        from signclust.tuning.summary import write_comparison
        written["comparison"] = write_comparison(Path(spec.reports))   # every published study, side by side
    return {k: v for k, v in written.items() if v is not None}
