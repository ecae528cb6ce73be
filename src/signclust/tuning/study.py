"""What a study is: its configuration (params.yaml ``tune``), its name, its outputs, and the rule
that keeps one study from overwriting another's committed results.

Names. A study is named ``<method>_<corpus>_<objective>``, plus ``_<name>`` with ``--name NAME``
(``--study FULLNAME`` names it outright, e.g. to extend a study by its full name). Every output
carries the study's name, so two studies never share a file:

    reports/tune_<study>.md                      the study's report
    reports/figures/tune_<study>_history.png     Optuna's history and importance plots
    reports/figures/tune_<study>_importance.png
    reports/studies/<study>.json                 its summary (read by tune_comparison.md)
    reports/studies/<study>.optuna.log           the study itself: an Optuna journal (all finished
                                                 trials), to open in optuna-dashboard or resume from
    params/tuned_<study>.yaml                    the best configuration, shaped like models.<method>

A study made with ``--name`` is a side study: its files are its own and it is left out of
reports/tune_comparison.md (``signclust tune-summary --all`` lists it). A study made without is
*published*: it is a row of that table.

Identity. Each study gets a random ``uid`` when it is created; its summary records it. Outputs are
(re)written only by the study they came from, and only when it changed (trials added, transfer
fitted, an output missing): a study with the same name but another uid (a fresh database, a
colleague's) is refused before any trial runs, unless ``--replace``.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from signclust.config import REPO_ROOT, deep_update
from signclust.errors import UserError
from signclust.json_files import read_json

DEFAULTS: dict = {
    "trials": 20,
    "workers": 2,
    "storage": None,            # null: sqlite:///<repo>/optuna.db
    "objective": "supervised",
    "fit_seed": 0,              # the seed of every trial's fit (trials differ only in parameters); a list of
                                # seeds fits each trial once per seed and records the means (fit_seeds)
    "sampler_seed": 0,
    "pruner": {"type": "median", "startup_trials": 5, "warmup_epochs": 5},
    "heartbeat_s": 30,          # a running trial writes a heartbeat this often ...
    "grace_s": 120,             # ... and is failed and re-enqueued when none came for this long
    "max_retry": 2,
    "report_seeds": [0, 1, 2],
    "unsupervised": {"lm_weight": 1.0, "hom_weight": 1.0, "folds": 5, "alpha": 0.1, "context_symbols": 10},
    "intermediate": {"lm": ["lm", "-entropy", "hom"], "deepcluster": ["loss"], "swav": ["loss"]},
    "fixed": {},
    "spaces": {},
}
OBJECTIVES = ("supervised", "unsupervised", "context")
METRIC_NAMES = {"supervised": "v_measure", "unsupervised": "label_free_U",             # study.set_metric_names
                "context": "context_evidence"}
OBJECTIVE_SCORES = {"supervised": "v_measure", "unsupervised": "unsupervised", "context": "context_evidence"}
LABEL_FREE = tuple(o for o in OBJECTIVES if o != "supervised")     # the objectives that need no labels
SCORE_KEYS = ("v_measure", "nmi", "ari", "acc", "k_found", "unsupervised", "heldout_ce", "hom_rel", "context_evidence",
              "seconds")


def tune_config(params: dict) -> dict:
    return deep_update(DEFAULTS, params.get("tune") or {})


def fit_seeds(cfg: dict) -> list[int]:
    """``tune.fit_seed`` as a list: one seed, or several distinct ones (a trial's scores are then the means
    over its fits: one fit's V moves with the seed, reports/rho_seed_ceiling.md)."""
    seed = cfg["fit_seed"]
    seeds = seed if isinstance(seed, list) else [seed]
    if (not seeds or not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds)
            or len(set(seeds)) != len(seeds)):
        raise UserError(f"tune.fit_seed is {seed!r}: a seed (an integer) or a list of distinct seeds")
    return seeds


def study_name(method: str, corpus: str, objective: str, name: str | None = None) -> str:
    base = f"{method}_{corpus}_{objective}"
    if not name:
        return base
    if not all(c.isalnum() or c in "-_." for c in name):
        raise UserError(f"--name '{name}': use letters, digits, '-', '_' or '.'")
    return f"{base}_{name}"


@dataclass
class StudySpec:
    """One study as the command line asked for it (never an argparse namespace)."""
    name: str
    method: str
    corpus: str
    objective: str
    trials: int
    storage: str
    corpus_dir: Path
    reports: Path = field(default_factory=lambda: REPO_ROOT / "reports")
    params_out: Path | None = None
    params_dir: Path = field(default_factory=lambda: REPO_ROOT / "params")
    published: bool = True
    replace: bool = False

    @property
    def metric_name(self) -> str:
        return METRIC_NAMES[self.objective]

    def outputs(self) -> dict[str, Path]:
        r = Path(self.reports)
        return {"report": r / f"tune_{self.name}.md",
                "summary": r / "studies" / f"{self.name}.json",
                "journal": r / "studies" / f"{self.name}.optuna.log",
                "history": r / "figures" / f"tune_{self.name}_history.png",
                "importance": r / "figures" / f"tune_{self.name}_importance.png",
                "params": Path(self.params_out or Path(self.params_dir) / f"tuned_{self.name}.yaml")}


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


def best_config(study, method: str, params: dict, cfg: dict) -> tuple[object, dict]:
    best = study.best_trial
    return best, {**base_config(method, params, cfg), **best.params}


def count_states(study) -> dict:
    from optuna.trial import TrialState
    counts = {s.name.lower(): 0 for s in TrialState}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name.lower()] += 1
    return counts


# -- identity: never overwrite another study's outputs ------------------------------------------

def ensure_identity(study, spec: StudySpec) -> dict:
    """Give a new study its uid, budget and published flag (kept by later invocations); check that
    an existing one was made for this method, corpus and objective. Returns the study's facts."""
    info = {"method": spec.method, "corpus": spec.corpus, "objective": spec.objective}
    for key, value in info.items():
        have = study.user_attrs.get(key)
        if have is None:
            study.set_user_attr(key, value)
        elif have != value:
            raise UserError(f"study '{spec.name}' was made for {key} '{have}', not '{value}': "
                            f"choose another --name")
    if "uid" not in study.user_attrs:
        study.set_user_attr("uid", uuid.uuid4().hex)
    if "published" not in study.user_attrs:
        study.set_user_attr("published", bool(spec.published))
    budget = max(int(study.user_attrs.get("budget") or 0), int(spec.trials))
    if study.user_attrs.get("budget") != budget:
        study.set_user_attr("budget", budget)
    if not study.metric_names:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")           # experimental in Optuna (since 3.2): the name, not a hint
            study.set_metric_names([spec.metric_name])
    return {**info, "uid": study.user_attrs["uid"], "budget": budget,
            "published": bool(study.user_attrs["published"])}


def same_study(summary: dict, study) -> bool:
    """Whether a committed summary was written by this study: same uid; for summaries written
    before studies had one, the database must hold the summary's best trial with its value and
    parameters and at least its finished trials."""
    if summary.get("uid"):
        return summary["uid"] == study.user_attrs.get("uid")
    from optuna.trial import TrialState
    best = summary.get("best") or {}
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    t = trials.get(best.get("trial"))
    if t is None or t.state != TrialState.COMPLETE or t.value != best.get("value") or t.params != best.get("params"):
        return False
    done = sum(1 for x in trials.values() if x.state in (TrialState.COMPLETE, TrialState.PRUNED))
    have = summary.get("trials") or {}
    return done >= int(have.get("complete", 0)) + int(have.get("pruned", 0))


def guard_outputs(study, spec: StudySpec) -> None:
    """Refuse (before any trial runs) to let this study overwrite outputs another study wrote."""
    out = spec.outputs()
    if not out["summary"].exists() or spec.replace:
        return
    summary = read_json(out["summary"], "a tune summary")
    if same_study(summary, study):
        return
    journal = out["journal"]
    if journal.exists():
        why = (f"the study in your working storage {spec.storage} is not the one in {journal.name}: "
               f"delete it there (optuna delete-study --study-name {spec.name} --storage URL) to resume "
               "the committed one from its journal")
    else:
        why = (f"no journal {journal.name} holds it (it predates committed journals and its database is not "
               "here)")
    raise UserError(
        f"{out['summary']} holds the results of another study named '{spec.name}'; {why}. "
        "To keep them, run yours under another name (--name NAME); to overwrite them on purpose, --replace")
