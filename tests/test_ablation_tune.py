"""Ablation stage and Optuna tuning: tiny corpora, few epochs, temporary storages."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from signclust import config as sc_config
from signclust import tracking
from signclust.config import load_params
from signclust.errors import UserError
from signclust.evaluation import ablation, label_free
from signclust.reports import tune_report
from signclust.tuning import mlflow_runs, objective, study as tune_study, tune, workers

PNG = b"\x89PNG\r\n\x1a\n"


def tiny_params(**tune_overrides) -> dict:
    """The repository's params.yaml with small `ablation` and `tune` sections for tests."""
    params = load_params()
    params["ablation"] = {"run": "lm_v1", "seeds": [0], "epochs": 2, "reference": "default",
                          "variants": {"default": {}, "no_lm": {"set": {"w_lm": 0.0}},
                                       "hom_x3": {"scale": {"w_hom": 3.0}}, "seed": {"preset": "seed"}}}
    params["tune"] = {
        "trials": 3, "workers": 2, "objective": "supervised", "fit_seed": 0, "sampler_seed": 0,
        "pruner": {"type": "none"}, "heartbeat_s": 5, "grace_s": 20, "max_retry": 1, "report_seeds": [0],
        "unsupervised": {"lm_weight": 1.0, "hom_weight": 1.0, "folds": 3, "alpha": 0.1},
        "intermediate": {"lm_gradient": ["lm", "-entropy", "hom"]},
        # a random init makes the assignment (and so V and U) differ from trial to trial
        "fixed": {"lm_gradient": {"epochs": 2, "init": "random", "tie": "image", "init_threshold": 0.0}},
        "spaces": {"lm_gradient": {"s": {"low": 2, "high": 12}, "w_hom": {"low": 0.1, "high": 10.0, "log": True},
                          "hidden": {"choices": [8, 16]}}},
        **tune_overrides}
    return params


# -- ablation ------------------------------------------------------------------------------------

def test_variant_params_preset_set_scale():
    params = tiny_params()
    base = {"w_hom": 2.0, "epochs": 60, "s": 0}
    defaults = {"w_hom": 1.0, "w_lm": 1.0, "epochs": 60, "s": 0, "tie": "image"}
    v = ablation.variant_params("x", {"scale": {"w_hom": 0.3}, "set": {"w_lm": 0.0}}, base, "lm_gradient", params,
                                defaults, epochs=5)
    assert v["w_hom"] == pytest.approx(0.6) and v["w_lm"] == 0.0 and v["epochs"] == 5
    init_only = ablation.variant_params("init_only", {"set": {"epochs": 0}}, base, "lm_gradient", params, defaults, epochs=5)
    assert init_only["epochs"] == 0
    seed = ablation.variant_params("seed", {"preset": "seed"}, base, "lm_gradient", params, defaults, epochs=None)
    assert seed["tie"] == "token" and seed["s"] == 100 and seed["epochs"] == 60
    with pytest.raises(UserError):
        ablation.variant_params("bad", {"preset": "nope"}, base, "lm_gradient", params, defaults, None)
    with pytest.raises(UserError):
        ablation.variant_params("bad", {"scale": {"tie": 2}}, base, "lm_gradient", params, defaults, None)
    bad = tiny_params()
    bad["ablation"]["variants"]["typo"] = {"sett": {"w_lm": 0}}
    with pytest.raises(UserError, match="unknown key"):
        ablation.config(bad)


def test_ablation_writes_table_plot_json(tiny_corpus, tmp_path):
    params = tiny_params()
    corpus = tiny_corpus(per_type=6, n_texts=3)
    doc, timings = ablation.run_ablation(corpus, "tiny", params, variants=["default", "no_lm"],
                                         reports_dir=tmp_path, cache_dir=tmp_path / "cache")
    md = (tmp_path / "ablation_tiny.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert [r.split("|")[1].strip() for r in rows] == ["`default`", "`no_lm`"]
    assert "w_lm=0" in rows[1] and "fixed-K V" in md and "Δ V" in md
    # the table's last column is the wall time of the timings file
    assert md.splitlines()[4].rstrip(" |").endswith("s / fit")
    assert rows[1].split("|")[-2].strip() == f"{timings['no_lm']['mean_seconds']:.1f}"
    assert len({line.count("|") for line in md.splitlines()[4:] if line}) == 1   # header, separator, rows
    assert (tmp_path / "figures" / "ablation_tiny.png").read_bytes()[:8] == PNG
    metrics_json = tmp_path / "metrics" / "ablation_tiny.json"
    saved = json.loads(metrics_json.read_text())
    assert list(saved["variants"]) == ["default", "no_lm"] and saved["seeds"] == [0]
    for entry in saved["variants"].values():
        assert set(entry["per_seed"]) == {"seed0"}
        for key in ("v_measure", "nmi", "ari", "acc", "k_found", "fixed_k_v_measure"):
            assert key in entry["mean"]
    # wall times are run-to-run noise: the suite report reads this file, so they live apart from it
    assert "seconds" not in metrics_json.read_text()
    saved_times = json.loads((tmp_path / "timings" / "ablation_tiny.json").read_text())["variants"]
    assert set(saved_times) == {"default", "no_lm"}
    assert saved_times["no_lm"]["per_seed"]["seed0"]["seconds"] > 0
    assert saved_times["no_lm"]["per_seed"]["seed0"]["cached"] is False
    assert saved["variants"]["default"]["delta_v"] == 0.0
    assert saved["variants"]["no_lm"]["params"]["w_lm"] == 0.0 and saved["variants"]["no_lm"]["params"]["epochs"] == 2
    assert doc["variants"]["no_lm"]["changed"] == {"w_lm": 0.0}
    # a second run reads every fit from the cache: the same metrics file, byte for byte, and the
    # wall time each fit took when it ran
    first_bytes = metrics_json.read_bytes()
    cached, cached_times = ablation.run_ablation(corpus, "tiny", params, variants=["default", "no_lm"],
                                                 cache_dir=tmp_path / "cache", reports_dir=tmp_path)
    assert cached["variants"]["no_lm"]["per_seed"] == doc["variants"]["no_lm"]["per_seed"]
    assert metrics_json.read_bytes() == first_bytes
    assert cached_times["no_lm"]["per_seed"]["seed0"] == {"seconds": timings["no_lm"]["per_seed"]["seed0"]["seconds"],
                                                          "cached": True}


@pytest.fixture
def mlflow_tmp(tmp_path, monkeypatch):
    """MLflow on for this test, into a temporary SQLite store."""
    pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("SIGNCLUST_MLFLOW", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)     # mlflow.set_tracking_uri writes it: restored after
    monkeypatch.setattr(tracking, "TRACKING_URI", uri)
    monkeypatch.setattr(tracking, "ARTIFACT_ROOT", tmp_path / "mlartifacts")
    import mlflow
    yield mlflow.tracking.MlflowClient(tracking.TRACKING_URI)
    while mlflow.active_run():
        mlflow.end_run()


@pytest.mark.slow
def test_mlflow_parent_and_nested_runs(tiny_corpus, tmp_path, mlflow_tmp):
    """Ablation: children nested under the corpus run; tune: trials nested under the study run."""
    import optuna
    client = mlflow_tmp
    corpus = tiny_corpus(per_type=5, n_texts=3)
    params = tiny_params()
    ablation.run_ablation(corpus, "tiny", params, variants=["default", "no_lm"], reports_dir=tmp_path / "r")
    exp = client.get_experiment_by_name("ablation")
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if r.info.run_name == "ablation/tiny"]
    assert len(parent) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]
    assert sorted(r.info.run_name for r in children) == ["default/seed0", "no_lm/seed0"]
    wanted = {"v_measure", "nmi", "ari", "acc", "k_found", "fixed_k_v_measure", "seconds"}
    assert wanted <= set(children[0].data.metrics)
    assert "ablation_tiny.md" in {a.path for a in client.list_artifacts(parent[0].info.run_id)}
    assert {"default.seconds_mean", "no_lm.seconds_mean", "no_lm.v_measure_mean"} <= set(parent[0].data.metrics)

    # tune: the objective as a worker runs it, in-process, against an in-memory study
    cfg = tune_study.tune_config(params)
    study = optuna.create_study(direction="maximize")
    parent_id = mlflow_runs.open_parent_run(study, "s", {"method": "lm_gradient"})
    data = label_free.CorpusData(corpus, "tiny")
    study.optimize(objective.Objective("lm_gradient", params, cfg, data, "supervised", "s", parent_id), n_trials=1)
    exp = client.get_experiment_by_name("tune")
    trials = [r for r in client.search_runs([exp.experiment_id]) if r.info.run_name == "s/trial0000"]
    assert trials and trials[0].data.tags["mlflow.parentRunId"] == parent_id
    assert "value" in trials[0].data.metrics and "s" in trials[0].data.params


# -- the label-free objective ----------------------------------------------------------------------

def test_unsupervised_terms(tiny_corpus):
    corpus = tiny_corpus(per_type=6, n_texts=4)
    data = label_free.CorpusData(corpus, "tiny")
    one = np.zeros(corpus.n_tokens, dtype=int)
    assert label_free.visual_inhomogeneity(one, data.glyphs, data.image_index) == pytest.approx(1.0)
    gold = corpus.labels()
    assert label_free.visual_inhomogeneity(gold, data.glyphs, data.image_index) < 0.5
    singletons = np.arange(corpus.n_tokens)
    assert label_free.visual_inhomogeneity(singletons, data.glyphs, data.image_index) == pytest.approx(0.0)
    # one type: only "type follows type" and boundaries: far more predictable than singletons
    ce_one = label_free.heldout_bigram_ce(one, data.texts, folds=2)
    ce_single = label_free.heldout_bigram_ce(singletons, data.texts, folds=2)
    assert 0 < ce_one < ce_single
    u = label_free.unsupervised_score(gold, data, {"lm_weight": 1.0, "hom_weight": 1.0})
    assert set(u) == {"unsupervised", "heldout_ce", "hom_rel", "context_evidence"} and u["unsupervised"] < 0
    # beside U, the controlled context evidence over the corpus's glyph symbols (10 unless set)
    assert u["context_evidence"] == label_free.context_evidence(gold, data.texts, label_free.glyph_symbols(data, 10),
                                                                controlled=True)
    four = label_free.unsupervised_score(gold, data, {"context_symbols": 4})["context_evidence"]
    assert four == label_free.context_evidence(gold, data.texts, label_free.glyph_symbols(data, 4), controlled=True)
    assert four != u["context_evidence"]
    assert objective.proxy_value({"lm": 4.0, "entropy": 3.5, "hom": 0.2}, ["lm", "-entropy", "hom"]) == pytest.approx(-0.7)
    assert objective.proxy_value({"lm": 4.0}, ["lm", "hom"]) is None and objective.proxy_value({"lm": 1.0}, []) is None
    assert tune_report.spearman([1, 2, 3, 4], [2, 4, 6, 9])["rho"] == pytest.approx(1.0)
    assert tune_report.spearman([1, 2], [1, 2])["rho"] is None


def test_suggest_space_and_shares():
    import optuna
    space = {"a": {"low": 1, "high": 5}, "b": {"low": 0.1, "high": 1.0, "log": True}, "c": {"choices": ["x", "y"]}}
    trial = optuna.create_study().ask()
    got = objective.suggest(trial, space)
    assert isinstance(got["a"], int) and 0.1 <= got["b"] <= 1.0 and got["c"] in ("x", "y")
    with pytest.raises(UserError):
        objective.suggest(trial, {"z": {"low": 1}})
    assert workers.shares(3, 2) == [2, 1] and workers.shares(1, 4) == [1] and sum(workers.shares(10, 3)) == 10


# -- tuning end to end: parallel workers on SQLite, resume -------------------------------------------

def _tune_cli(params_file, storage, corpus_dir, tmp_path, *extra):
    env = dict(os.environ, SIGNCLUST_PARAMS=str(params_file), SIGNCLUST_MLFLOW="0")
    cmd = [sys.executable, "-m", "signclust.tuning.tune", "--study", "t", "--method", "lm_gradient", "--corpus", "tiny",
           "--corpus-dir", str(corpus_dir), "--storage", storage, "--reports", str(tmp_path / "reports"),
           "--params-out", str(tmp_path / "tuned_lm.yaml"), *map(str, extra)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
def test_tune_parallel_workers_then_resume(tiny_corpus, saved_corpus, tmp_path):
    import optuna
    from optuna.trial import TrialState
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_params()))
    corpus_dir = saved_corpus(tiny_corpus(per_type=5, n_texts=3), "tiny")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"

    first = _tune_cli(params_file, storage, corpus_dir, tmp_path, "--trials", 3, "--workers", 2)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "2 worker(s) for 3 trial(s)" in first.stdout
    study = optuna.load_study(study_name="t", storage=storage)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(study.trials) == 3 and len(done) == 3
    before = {t.number: t.value for t in done}
    agree = tune_report.agreement(study)["unsupervised_vs_v"]
    assert agree["n"] == 3 and agree["rho"] is not None
    md = (tmp_path / "reports" / "tune_t.md").read_text()
    assert "## Best trial" in md and "Spearman" in md and f"{agree['rho']:.3f}" in md
    context = tune_report.agreement(study)["context_vs_v"]
    assert context["n"] == 3 and ("Spearman ρ between the controlled context evidence and V over 3 trials: "
                                  f"{context['rho']:.3f}") in md
    for name in ("tune_t_history.png", "tune_t_importance.png"):
        assert (tmp_path / "reports" / "figures" / name).read_bytes()[:8] == PNG
    tuned = yaml.safe_load((tmp_path / "tuned_lm.yaml").read_text())
    assert set(study.best_params) <= set(tuned["lm_gradient"]) and tuned["lm_gradient"]["epochs"] == 2
    assert tuned["lm_gradient"]["s"] == study.best_params["s"]

    # the same budget again: nothing to do; a larger one adds only the missing trials
    again = _tune_cli(params_file, storage, corpus_dir, tmp_path, "--trials", 3, "--workers", 2)
    assert again.returncode == 0 and "0 to run" in again.stdout
    more = _tune_cli(params_file, storage, corpus_dir, tmp_path, "--trials", 4, "--workers", 2)
    assert more.returncode == 0, more.stderr[-3000:]
    study = optuna.load_study(study_name="t", storage=storage)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(study.trials) == 4 and len(done) == 4
    assert {t.number: t.value for t in done if t.number in before} == before

    # transfer to another labelled corpus: fitted once, reused while best trial, configs and seeds stay
    other = saved_corpus(tiny_corpus(per_type=4, n_texts=2, seed=7), "other")
    transfer = ["--report-on", "other", "--report-on-dir", other, "--report-seeds", 0]
    told = _tune_cli(params_file, storage, corpus_dir, tmp_path, "--trials", 4, *transfer)
    assert told.returncode == 0, told.stderr[-3000:]
    assert "transfer tuned on other seed 0" in told.stdout
    summary_path = tmp_path / "reports" / "studies" / "t.json"
    summary = json.loads(summary_path.read_text())
    assert summary["best"]["trial"] == study.best_trial.number and summary["trials"]["complete"] == 4
    assert set(summary["transfer"]) >= {"tuned", "configured"} and summary["transfer"]["seeds"] == [0]
    assert summary["transfer"]["configs"]["tuned"]["s"] == study.best_params["s"]
    side_by_side = (tmp_path / "reports" / "tune_comparison.md").read_text()
    assert "| lm_gradient | [t](tune_t.md) | 4 (4 / 0) | tiny |" in side_by_side
    assert f"{summary['transfer']['tuned']['mean']['v_measure']:.3f}" in side_by_side
    # the transfer table's `s / fit`: the mean wall time of the fits, as the per-seed record has it
    transferred = summary["transfer"]["tuned"]
    assert transferred["per_seed"]["seed0"]["seconds"] > 0
    assert transferred["mean"]["seconds"] == pytest.approx(transferred["per_seed"]["seed0"]["seconds"])
    report_md = (tmp_path / "reports" / "tune_t.md").read_text()
    assert f"| {transferred['mean']['seconds']:.1f} |" in report_md
    reused = _tune_cli(params_file, storage, corpus_dir, tmp_path, "--trials", 4, *transfer)
    assert reused.returncode == 0 and "reusing it" in reused.stdout and "transfer tuned" not in reused.stdout
    assert json.loads(summary_path.read_text())["transfer"] == summary["transfer"]


def test_tune_refuses_report_on_the_tuning_corpus(tmp_path, monkeypatch, tiny_corpus, saved_corpus):
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_params()))
    monkeypatch.setattr(sc_config, "PARAMS_FILE", params_file)
    corpus_dir = saved_corpus(tiny_corpus(), "tiny")
    with pytest.raises(SystemExit) as exit_info:
        tune.main(["--method", "lm_gradient", "--corpus", "tiny", "--corpus-dir", str(corpus_dir), "--report-on", "tiny",
                   "--storage", f"sqlite:///{tmp_path / 'o.db'}"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        tune.main(["--method", "nosuch", "--corpus", "tiny", "--corpus-dir", str(corpus_dir)])


def test_baseline_trials_share_the_objective(tiny_corpus):
    """A baseline (Ward: needs K, no epochs, never pruned) goes through the same objective."""
    import optuna
    params = tiny_params()
    params["tune"]["spaces"]["ward"] = {"pca_dim": {"choices": [0, 10]}, "glyphs": {"choices": [False, True]}}
    cfg = tune_study.tune_config(params)
    study = optuna.create_study(direction="maximize", pruner=workers.make_pruner(cfg))
    data = label_free.CorpusData(tiny_corpus(per_type=5), "tiny")
    study.optimize(objective.Objective("ward", params, cfg, data, "supervised", "w", None), n_trials=2)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert all({"v_measure", "unsupervised", "context_evidence", "k_found"} <= set(t.user_attrs) for t in study.trials)
    assert all(t.user_attrs["k_found"] == 4 for t in study.trials)


def test_the_context_objective_tunes_by_the_context_evidence(tiny_corpus):
    """``--objective context``: each trial's value is its controlled context evidence; the report's
    agreement gives that score's rank correlation with V beside U's."""
    import optuna
    params = tiny_params()
    params["tune"]["spaces"]["ward"] = {"pca_dim": {"choices": [0, 10]}, "glyphs": {"choices": [False, True]}}
    cfg = tune_study.tune_config(params)
    study = optuna.create_study(direction="maximize", pruner=workers.make_pruner(cfg))
    data = label_free.CorpusData(tiny_corpus(per_type=5, noise=60.0), "tiny")
    study.optimize(objective.Objective("ward", params, cfg, data, "context", "w", None), n_trials=3)
    assert all(t.value == t.user_attrs["context_evidence"] for t in study.trials)
    agree = tune_report.agreement(study)
    assert agree["context_vs_v"] == tune_report.spearman([t.value for t in study.trials],
                                                         [t.user_attrs["v_measure"] for t in study.trials])
    best = max(study.trials, key=lambda t: t.value)
    assert agree["pick_by_context"]["trial"] == best.number
    assert agree["pick_by_context"]["v_measure"] == best.user_attrs["v_measure"]
    assert tune_study.METRIC_NAMES["context"] == "context_evidence"
