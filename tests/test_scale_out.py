"""The scale-out path (scripts/scale_out.py): a local PostgreSQL, an MLflow tracking server on it,
and a study with two worker processes sharing that database and logging to that server. Skipped,
with the script's own one-line reason, where PostgreSQL cannot be started (a failing MLflow server
is a failure, not a skip)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

from conftest import ward_study_params
from signclust.config import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "scale_out.py"


@pytest.mark.slow   # initdb, two servers and a four-trial study: about a minute
def test_a_study_with_two_workers_on_postgresql_logs_to_the_mlflow_server(tiny_corpus, saved_corpus, tmp_path):
    import optuna
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(ward_study_params(trials=4, workers=2)))
    corpus_dir = saved_corpus(tiny_corpus(per_type=5, n_texts=3), "tiny")
    work = tmp_path / "work"
    out = subprocess.run([sys.executable, str(SCRIPT), "--method", "ward", "--corpus", "tiny", "--corpus-dir",
                          str(corpus_dir), "--trials", "4", "--workers", "2", "--params", str(params_file),
                          "--workdir", str(work)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true"))
    if out.returncode == 3:
        pytest.skip(out.stderr.strip().splitlines()[-1])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "2 worker(s) for 4 trial(s)" in out.stdout
    summary = json.loads(out.stdout[out.stdout.rindex("\n{\n"):out.stdout.rindex("}") + 1])   # the last block
    assert summary["trials_finished"] == 4 and summary["mlflow_trial_runs"] == 4
    # the study's journal export stayed in the work folder; PostgreSQL was stopped
    journal = work / "reports" / "studies" / "ward_tiny_scaleout.optuna.log"
    from signclust.tuning.storage import journal_storage
    study = optuna.load_study(study_name="ward_tiny_scaleout", storage=journal_storage(journal))
    assert len(study.trials) == 4 and study.best_value == summary["best_value"]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", summary["postgres_port"]), timeout=2)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--corpus", "nope", "--corpus-dir", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [f"error: no corpus at {tmp_path / 'nope'} "
                                               "(signclust prepare nope, or --corpus-dir)"]
