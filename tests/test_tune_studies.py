"""Optuna studies never clobber each other's outputs; a study travels with the repo as a journal."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ward_study_params

from signclust.config import load_params
from signclust.errors import UserError
from signclust.tuning import storage as st
from signclust.tuning.study import StudySpec, ensure_identity, guard_outputs, study_name


def _spec(tmp_path, name="ward_tiny_supervised", **kw) -> StudySpec:
    return StudySpec(name=name, method="ward", corpus="tiny", objective="supervised", trials=2,
                     storage="memory", corpus_dir=tmp_path, reports=tmp_path / "reports",
                     params_dir=tmp_path / "params", **kw)


def test_study_names_and_outputs_carry_the_name(tmp_path):
    assert study_name("lm", "cypriot", "supervised") == "lm_cypriot_supervised"
    assert study_name("ward", "cypriot", "supervised", "quick") == "ward_cypriot_supervised_quick"
    with pytest.raises(UserError):
        study_name("lm", "cypriot", "supervised", "a/b")
    out = _spec(tmp_path, "ward_tiny_supervised_quick").outputs()
    assert {p.name for p in out.values()} == {
        "tune_ward_tiny_supervised_quick.md", "ward_tiny_supervised_quick.json",
        "ward_tiny_supervised_quick.optuna.log", "tune_ward_tiny_supervised_quick_history.png",
        "tune_ward_tiny_supervised_quick_importance.png", "tuned_ward_tiny_supervised_quick.yaml"}


def test_guard_refuses_another_study_of_the_same_name(tmp_path):
    import optuna
    spec = _spec(tmp_path)
    first = optuna.create_study(direction="maximize")
    facts = ensure_identity(first, spec)
    assert first.metric_names == ["v_measure"] and facts["budget"] == 2 and facts["published"]
    summary = spec.outputs()["summary"]
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"study": spec.name, "uid": facts["uid"], "trials": {}}))
    guard_outputs(first, spec)                              # the same study: fine
    other = optuna.create_study(direction="maximize")
    ensure_identity(other, spec)
    with pytest.raises(UserError, match="another study named 'ward_tiny_supervised'.*--name"):
        guard_outputs(other, spec)
    guard_outputs(other, _spec(tmp_path, replace=True))    # on purpose
    # a summary from before uids: the same study only if it holds that best trial
    summary.write_text(json.dumps({"study": spec.name, "trials": {"complete": 1, "pruned": 0},
                                   "best": {"trial": 0, "value": 0.5, "params": {"x": 1}}}))
    first.add_trial(optuna.trial.create_trial(params={"x": 1}, distributions={
        "x": optuna.distributions.IntDistribution(0, 2)}, value=0.5))
    guard_outputs(first, spec)
    with pytest.raises(UserError, match="predates committed journals"):
        guard_outputs(other, spec)
    with pytest.raises(UserError, match="made for method 'ward'"):
        ensure_identity(first, dataclasses.replace(spec, method="lm"))


def test_journal_export_and_import_keep_the_study(tmp_path):
    import optuna
    from optuna.trial import TrialState
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    ensure_identity(study, _spec(tmp_path, "s"))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    running = study.ask()                                     # a trial still running elsewhere
    path = st.export_journal(storage, "s", tmp_path / "s.optuna.log")
    back = optuna.load_study(study_name="s", storage=st.journal_storage(path))
    assert [t.value for t in back.trials[:3]] == [t.value for t in study.trials[:3]]
    assert back.trials[3].state == TrialState.FAIL and back.trials[3].user_attrs["interrupted"]
    assert back.user_attrs["uid"] == study.user_attrs["uid"] and back.metric_names == ["v_measure"]
    rdb = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    assert st.import_journal(path, "s", rdb) == 4
    assert [p.name for p in tmp_path.iterdir() if "lock" in p.name] == []      # the journal was only read
    again = optuna.load_study(study_name="s", storage=rdb)
    assert again.best_value == study.best_value and again.user_attrs["uid"] == study.user_attrs["uid"]
    assert running.number == 3


# -- end to end: a side study and a re-run leave the committed outputs alone -------------------------

def _params() -> dict:
    return ward_study_params(trials=3, workers=1)


def _snapshot(*folders) -> dict:
    return {p: p.read_bytes() for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


@pytest.mark.slow   # several `signclust tune` processes (about a minute)
def test_a_side_study_or_a_rerun_never_touches_the_committed_outputs(tiny_corpus, saved_corpus, tmp_path):
    import optuna

    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(_params()))
    corpus_dir = saved_corpus(tiny_corpus(per_type=5, n_texts=3), "tiny")
    reports, pdir = tmp_path / "reports", tmp_path / "params"

    def tune(storage, *extra, reports_dir=reports):
        cmd = [sys.executable, "-m", "signclust.cli", "--params", str(params_file), "tune", "--method", "ward",
               "--corpus", "tiny", "--corpus-dir", str(corpus_dir), "--workers", "1",
               "--storage", f"sqlite:///{tmp_path / storage}", "--reports", str(reports_dir),
               "--params-dir", str(pdir), *map(str, extra)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, SIGNCLUST_MLFLOW="0"))

    first = tune("a.db", "--trials", 3)
    assert first.returncode == 0, first.stderr[-2000:]
    journal = reports / "studies" / "ward_tiny_supervised.optuna.log"
    assert journal.exists() and (pdir / "tuned_ward_tiny_supervised.yaml").exists()
    committed = _snapshot(reports, pdir)

    # a second, smaller study under another name: its own files only
    side = tune("a.db", "--trials", 2, "--name", "quick")
    assert side.returncode == 0, side.stderr[-2000:]
    after = _snapshot(reports, pdir)
    assert {p: after[p] for p in committed} == committed
    new = {p.name for p in set(after) - set(committed)}
    assert {"tune_ward_tiny_supervised_quick.md", "ward_tiny_supervised_quick.json",
            "ward_tiny_supervised_quick.optuna.log", "tuned_ward_tiny_supervised_quick.yaml"} <= new
    assert "quick" not in (reports / "tune_comparison.md").read_text()
    assert json.loads((reports / "studies" / "ward_tiny_supervised_quick.json").read_text())["published"] is False

    # the same study with a smaller budget: nothing runs, nothing is rewritten
    again = tune("a.db", "--trials", 2)
    assert again.returncode == 0 and "0 to run" in again.stdout and "unchanged" in again.stdout
    assert {p: p.read_bytes() for p in committed} == committed

    # a fresh clone (no optuna.db): the committed journal is imported, the same study resumes
    clone = tune("b.db", "--trials", 3)
    assert clone.returncode == 0 and "imported 3 trial(s)" in clone.stdout and "0 to run" in clone.stdout
    assert {p: p.read_bytes() for p in committed} == committed

    # without the journal a new study of that name is refused before any trial; outputs untouched
    elsewhere = tmp_path / "reports2"
    shutil.copytree(reports, elsewhere)
    (elsewhere / "studies" / journal.name).unlink()
    refused = tune("c.db", "--trials", 2, reports_dir=elsewhere)
    assert refused.returncode == 2 and "another study named 'ward_tiny_supervised'" in refused.stderr
    assert "trial 0" not in refused.stdout

    # extending the same study (from the clone) rewrites its outputs, same uid, one more trial
    uid = json.loads((reports / "studies" / "ward_tiny_supervised.json").read_text())["uid"]
    more = tune("b.db", "--trials", 4)
    assert more.returncode == 0, more.stderr[-2000:]
    summary = json.loads((reports / "studies" / "ward_tiny_supervised.json").read_text())
    assert summary["uid"] == uid and summary["budget"] == 4 and summary["trials"]["complete"] == 4
    study = optuna.load_study(study_name="ward_tiny_supervised", storage=st.journal_storage(journal))
    assert len(study.trials) == 4 and study.metric_names == ["v_measure"]


def test_pruning_goes_through_the_fit_context_contract(tiny_corpus, monkeypatch):
    """The trial's log_metrics callback raises StopFit (models never see Optuna); the objective turns
    it into a pruned trial whose MLflow run ends normally."""
    import optuna

    from signclust.evaluation.label_free import CorpusData
    from signclust.models.base import StopFit
    from signclust.tuning import objective as obj
    from signclust.tuning.study import tune_config

    class Trial:
        number = 0
        def __init__(self): self.reported = []
        def report(self, value, step): self.reported.append((step, value))
        def should_prune(self): return len(self.reported) >= 2

    class Run:
        def log_metrics(self, m, step=None): pass

    trial = Trial()
    cb = obj.PruningCallback(trial, ["lm", "-entropy"], Run())
    cb({"lm": 3.0, "entropy": 1.0}, 1)
    with pytest.raises(StopFit, match="epoch 2"):
        cb({"lm": 2.5, "entropy": 1.0}, 2)
    assert trial.reported == [(1, -2.0), (2, -1.5)] and cb.last == -1.5

    def fake_fit(method, params, data, seed, device, ucfg, log_metrics=None, **kw):
        for epoch in (1, 2, 3):
            log_metrics({"lm": 1.0 / epoch, "entropy": 0.0, "hom": 0.0}, epoch)
        raise AssertionError("not reached: the callback stops the fit")

    monkeypatch.setattr(obj, "fit_and_score", fake_fit)
    params = load_params()
    params["tune"] = {"spaces": {"lm": {"w_lm": {"low": 0.1, "high": 1.0}}}, "pruner": {"type": "none"}}
    cfg = tune_config(params)
    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=0, n_warmup_steps=0))
    study.add_trial(optuna.trial.create_trial(params={"w_lm": 0.5}, value=1.0,
                                              distributions={"w_lm": optuna.distributions.FloatDistribution(0.1, 1.0)},
                                              intermediate_values={1: 100.0, 2: 100.0, 3: 100.0}))
    objective = obj.Objective("lm", params, cfg, CorpusData(tiny_corpus(per_type=3), "tiny"), "supervised", "s", None)
    study.optimize(objective, n_trials=1)
    assert study.trials[-1].state == optuna.trial.TrialState.PRUNED


def test_a_trial_fits_once_per_seed_of_fit_seed_and_records_the_means(tiny_corpus, monkeypatch):
    """tune.fit_seed as a list: one fit per seed, the trial's scores their means (seconds summed), the
    pruning callback given to the first fit only; a bad fit_seed is one error."""
    import optuna

    from signclust.evaluation.label_free import CorpusData
    from signclust.tuning import objective as obj
    from signclust.tuning.study import fit_seeds, tune_config

    calls = []

    def fake_fit(method, params, data, seed, device, ucfg, log_metrics=None, **kw):
        calls.append((seed, log_metrics is not None))
        return {"seconds": 2.0, "k_found": 4 + seed, "v_measure": 0.5 + 0.1 * seed, "unsupervised": -1.0,
                "context_evidence": 0.2 * seed}

    monkeypatch.setattr(obj, "fit_and_score", fake_fit)
    params = load_params()
    params["tune"] = {"spaces": {"lm": {"w_lm": {"low": 0.1, "high": 1.0}}}, "fit_seed": [3, 1]}
    cfg = tune_config(params)
    study = optuna.create_study(direction="maximize")
    objective = obj.Objective("lm", params, cfg, CorpusData(tiny_corpus(per_type=3), "tiny"), "supervised", "s", None)
    study.optimize(objective, n_trials=1)
    trial = study.trials[-1]
    assert calls == [(3, True), (1, False)]
    assert trial.value == pytest.approx(0.7) and trial.user_attrs["v_measure"] == pytest.approx(0.7)
    assert trial.user_attrs["k_found"] == 6.0 and trial.user_attrs["seconds"] == 4.0
    assert trial.user_attrs["context_evidence"] == pytest.approx(0.4)
    assert fit_seeds({"fit_seed": 5}) == [5] and fit_seeds({"fit_seed": [0, 2]}) == [0, 2]
    for bad in ([], [1, 1], [0, "1"], True, 1.5):
        with pytest.raises(UserError, match=r"tune.fit_seed is .*: a seed \(an integer\) or a list of distinct seeds"):
            fit_seeds({"fit_seed": bad})


def test_a_bad_fit_seed_is_one_error_before_any_trial(tiny_corpus, saved_corpus, tmp_path):
    params = _params()
    params["tune"]["fit_seed"] = [1, 1]
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(params))
    corpus_dir = saved_corpus(tiny_corpus(per_type=5, n_texts=3), "tiny")
    out = subprocess.run([sys.executable, "-m", "signclust.cli", "--params", str(params_file), "tune", "--method",
                          "ward", "--corpus", "tiny", "--corpus-dir", str(corpus_dir), "--storage", "memory",
                          "--reports", str(tmp_path / "reports"), "--params-dir", str(tmp_path / "params")],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, SIGNCLUST_MLFLOW="0"))
    assert out.returncode == 2 and "trial 0" not in out.stdout
    assert out.stderr.strip().splitlines() == ["error: tune.fit_seed is [1, 1]: a seed (an integer) or a list of "
                                               "distinct seeds"]
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("case", ["report_on_missing", "report_on_unlabelled", "storage_dialect", "reports_not_a_folder",
                                  "params_dir_not_a_folder"])
def test_what_a_study_needs_at_its_end_is_one_error_before_any_trial(case, tiny_corpus, saved_corpus, tmp_path):
    """A misspelt or unlabelled --report-on corpus was found only after every trial ran; an output folder
    that cannot be written failed after the trials too (with the tuned-parameters file already written);
    a storage URL SQLAlchemy cannot open was a traceback of 37 to 125 lines. Each is now one line, exit 2,
    before the first trial, and nothing is written."""
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(_params()))
    corpus_dir = saved_corpus(tiny_corpus(per_type=5, n_texts=3), "tiny")
    unlabelled = tiny_corpus(per_type=5, n_texts=3)
    unlabelled.tokens["label"] = ""
    unlabelled_dir = saved_corpus(unlabelled, "unlabelled")
    a_file = tmp_path / "a_file"
    a_file.write_text("keep")
    reports, params_dir = tmp_path / "reports", tmp_path / "params"
    extra, message = {
        "report_on_missing": ({"--report-on": "nosuch", "--report-on-dir": str(tmp_path / "corpora" / "nosuch")},
                              "error: no corpus 'nosuch'"),
        "report_on_unlabelled": ({"--report-on": "unlabelled", "--report-on-dir": str(unlabelled_dir)},
                                 "error: --report-on corpus 'unlabelled' has no gold labels to report against"),
        "storage_dialect": ({"--storage": "bogus://x"},
                            "error: cannot open Optuna storage bogus://x: Can't load plugin: sqlalchemy.dialects:bogus"),
        "reports_not_a_folder": ({"--reports": str(a_file / "reports")},
                                 f"error: --reports {a_file / 'reports'}: {a_file} is not a folder"),
        "params_dir_not_a_folder": ({"--params-dir": str(a_file / "params")},
                                    f"error: --params-dir {a_file / 'params'}: {a_file} is not a folder"),
    }[case]
    args = {"--storage": f"sqlite:///{tmp_path / 'o.db'}", "--reports": str(reports), "--params-dir": str(params_dir),
            **extra}
    out = subprocess.run([sys.executable, "-m", "signclust.cli", "--params", str(params_file), "tune", "--method",
                          "ward", "--corpus", "tiny", "--corpus-dir", str(corpus_dir),
                          *[x for kv in args.items() for x in kv]],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, SIGNCLUST_MLFLOW="0"))
    lines = [line for line in out.stderr.strip().splitlines() if "Warning" not in line and "optuna_warn" not in line]
    assert out.returncode == 2 and "trial 0" not in out.stdout, out.stdout + out.stderr
    assert len(lines) == 1 and lines[0].startswith(message), out.stderr
    assert not reports.exists() and not params_dir.exists() and a_file.read_text() == "keep"
