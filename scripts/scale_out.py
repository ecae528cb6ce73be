"""The scale-out path, tried end to end on one machine: a local PostgreSQL, an MLflow tracking
server on it, and an Optuna study whose two worker processes share that database and log to that
server. What runs here on one machine runs the same on several (README, "Several machines").

    .venv/bin/python scripts/scale_out.py                       # lm on cypriot, 4 trials, 2 workers
    .venv/bin/python scripts/scale_out.py --method ward --corpus tiny --corpus-dir DIR --trials 3

Steps: initdb in a scratch folder (as the ``postgres`` user when run as root: PostgreSQL refuses
root), pg_ctl start on a free port, two databases (``optuna``, ``mlflow``), ``mlflow server`` with
the ``mlflow`` database as its backend store, then ``signclust tune --workers 2 --storage
postgresql://.../optuna`` with MLFLOW_TRACKING_URI pointing at the server. It checks that every
trial finished in the database and that the server holds the study's runs, prints a summary, and
stops both servers (``--keep`` leaves them running and prints their URLs).

Exit codes: 0 done; 2 bad input or a failed step, the MLflow server included (one line on stderr);
3 PostgreSQL is not available on this machine (the test suite skips with that line as the reason).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNAVAILABLE = 3


class Unavailable(Exception):
    """PostgreSQL cannot be started here (not a bug in what we run)."""


def pg_bin(name: str) -> str:
    """A PostgreSQL server binary: on PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise Unavailable(f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_db_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its binaries as the 'postgres' user then."""
    if os.geteuid() != 0:
        return cmd
    try:
        import pwd
        pwd.getpwnam("postgres")
    except KeyError:
        raise Unavailable("running as root and there is no 'postgres' user to run PostgreSQL as") from None
    return ["runuser", "-u", "postgres", "--", *cmd]


def run(cmd: list[str], what: str, unavailable: bool = False, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        last = (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:] or ["(no output)"]
        raise (Unavailable if unavailable else RuntimeError)(f"{what} failed: {last[0]}")
    return out


class Postgres:
    """A throw-away cluster in its own temporary folder (one the 'postgres' user can reach when we
    run as root), removed by ``stop``; trust authentication on 127.0.0.1 only."""

    def __init__(self, user: str = "signclust"):
        self.folder = Path(tempfile.mkdtemp(prefix="signclust-pg-"))
        self.data, self.socket_dir = self.folder / "pgdata", self.folder / "sock"
        self.user, self.port = user, free_port()

    def start(self) -> None:
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            self.folder.chmod(0o755)
            for d in (self.folder, self.socket_dir):
                shutil.chown(d, "postgres")
        run(as_db_user([pg_bin("initdb"), "-D", str(self.data), "-U", self.user, "-A", "trust", "-E", "UTF8"]),
            "initdb", unavailable=True)
        opts = f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1"
        run(as_db_user([pg_bin("pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.folder / "pg.log"),
                        "-w", "-t", "60", "start"]), "pg_ctl start", unavailable=True)

    def url(self, db: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{db}"

    def create(self, db: str) -> None:
        import psycopg          # SQLAlchemy 2.1's driver for postgresql:// URLs
        with psycopg.connect(self.url("postgres"), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{db}"')

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(as_db_user([pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "stop"]),
                           capture_output=True, text=True)
        shutil.rmtree(self.folder, ignore_errors=True)


def start_mlflow(backend: str, artifacts: Path, log: Path, timeout: float = 120.0) -> tuple[subprocess.Popen, str]:
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow) if mlflow.exists() else "mlflow", "server", "--backend-store-uri", backend,
           "--default-artifact-root", artifacts.as_uri(), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url, t0 = f"http://127.0.0.1:{port}", time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:      # a pinned dependency of ours: its failure is a bug, not a skip
            raise RuntimeError(f"mlflow server exited ({proc.returncode}); see {log}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(1)
    proc.terminate()
    raise RuntimeError(f"mlflow server did not answer within {timeout:.0f} s; see {log}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="lm")
    ap.add_argument("--corpus", default="cypriot")
    ap.add_argument("--corpus-dir", type=Path, help="default data/corpora/<corpus>")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--params", type=Path, help="a params.yaml to use instead of the repository's")
    ap.add_argument("--workdir", type=Path, help="scratch folder for the database, logs and outputs "
                    "(default: a temporary folder, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="leave PostgreSQL and MLflow running, print their URLs")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.workers < 1:
        print("error: --trials and --workers must be at least 1", file=sys.stderr)
        return 2
    corpus_dir = args.corpus_dir or ROOT / "data" / "corpora" / args.corpus
    if not (corpus_dir / "tokens.csv").exists():
        print(f"error: no corpus at {corpus_dir} (signclust prepare {args.corpus}, or --corpus-dir)", file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="signclust-scaleout-"))
    work.mkdir(parents=True, exist_ok=True)
    pg, server = Postgres(), None
    study = f"{args.method}_{args.corpus}_scaleout"
    try:
        pg.start()
        for db in ("optuna", "mlflow"):
            pg.create(db)
        server, mlflow_url = start_mlflow(pg.url("mlflow"), work / "mlartifacts", work / "mlflow.log")
        print(f"PostgreSQL on port {pg.port}, MLflow tracking server at {mlflow_url}", flush=True)
        env = dict(os.environ, MLFLOW_TRACKING_URI=mlflow_url, SIGNCLUST_MLFLOW="1",
                   SIGNCLUST_ARTIFACTS=str(work / "mlartifacts"))
        if args.params:
            env["SIGNCLUST_PARAMS"] = str(args.params.absolute())
        cmd = [sys.executable, "-m", "signclust.tuning.tune", "--method", args.method, "--corpus", args.corpus,
               "--corpus-dir", str(corpus_dir), "--study", study, "--trials", str(args.trials),
               "--workers", str(args.workers), "--storage", pg.url("optuna"), "--reports", str(work / "reports"),
               "--params-out", str(work / f"tuned_{study}.yaml")]
        t0 = time.time()
        tune = subprocess.run(cmd, env=env, text=True, capture_output=True)
        sys.stdout.write(tune.stdout)
        if tune.returncode != 0:
            raise RuntimeError(f"signclust tune exited {tune.returncode}: "
                               f"{(tune.stderr.strip().splitlines() or ['(no output)'])[-1]}")
        summary = check(pg.url("optuna"), study, mlflow_url, args.trials, time.time() - t0)
        summary["postgres_port"] = pg.port
        summary["workers"] = next((line.strip() for line in tune.stdout.splitlines() if "worker(s)" in line), None)
        print(json.dumps(summary, indent=1))
        if args.keep:
            print(f"kept: optuna storage {pg.url('optuna')}, MLflow {mlflow_url}, database in {pg.folder}")
        return 0
    except Unavailable as e:
        print(f"unavailable: {e}", file=sys.stderr)
        return UNAVAILABLE
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            if server is not None:
                server.terminate()
                try:
                    server.wait(30)
                except subprocess.TimeoutExpired:
                    server.kill()
            pg.stop()
            if args.workdir is None:
                shutil.rmtree(work, ignore_errors=True)


def check(storage: str, study_name: str, mlflow_url: str, trials: int, seconds: float) -> dict:
    """Every trial finished in PostgreSQL and the server holds the study's trial runs."""
    import mlflow
    import optuna
    from optuna.trial import TrialState
    study = optuna.load_study(study_name=study_name, storage=storage)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    if len(done) < trials:
        raise RuntimeError(f"{len(done)} of {trials} trials finished in the database")
    client = mlflow.tracking.MlflowClient(mlflow_url)
    exp = client.get_experiment_by_name("tune")
    runs = client.search_runs([exp.experiment_id]) if exp else []
    nested = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    if not nested:
        raise RuntimeError("the MLflow server holds no trial runs of the study")
    return {"study": study_name, "trials_finished": len(done), "best_value": study.best_value,
            "mlflow_runs": len(runs), "mlflow_trial_runs": len(nested), "seconds": round(seconds, 1)}


if __name__ == "__main__":
    sys.exit(main())
