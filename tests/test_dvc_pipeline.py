"""The DVC pipeline re-runs only what changed.

Fast: dvc.yaml itself — every stage depends on files (never a source folder) and on exact
parameter keys (never a whole section that other methods share), each train stage on its own
method's source, and no cache folder is ever hashed.
Slow: a scratch clone of the repository runs a few real stages, then shows that a second
`dvc repro` does nothing, that a comment in our model's file makes only our model's stages stale,
and that changing our model's parameters leaves a baseline's stage up to date.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from signclust.config import REPO_ROOT

DVC = Path(sys.executable).with_name("dvc")
SHARED_SECTIONS = {"models", "runs", "presets", "train", "prepare", "report", "evaluate"}


PIPELINES = ("dvc.yaml", "full/dvc.yaml")   # the main job, then the full tables


def stages() -> dict:
    """Every stage of both pipeline files, a full/dvc.yaml stage named as DVC addresses it from the root."""
    out = {}
    for path in PIPELINES:
        for name, stage in yaml.safe_load((REPO_ROOT / path).read_text())["stages"].items():
            out[name if path == "dvc.yaml" else f"{path}:{name}"] = stage
    return out


def deps_of(stage: dict) -> list[str]:
    body = stage.get("do", stage)
    return [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", [])]


def params_of(stage: dict) -> list[str]:
    body = stage.get("do", stage)
    return [p if isinstance(p, str) else next(iter(p)) for p in body.get("params", [])]


def test_stages_depend_on_files_and_exact_param_keys():
    for name, stage in stages().items():
        for dep in deps_of(stage):
            if dep.startswith("src/"):
                assert dep.endswith(".py"), f"{name} depends on the folder {dep}: name the files"
                if "${" not in dep:
                    assert (REPO_ROOT / dep).is_file(), f"{name}: {dep} does not exist"
        for key in params_of(stage):
            assert key not in SHARED_SECTIONS, f"{name} tracks the whole '{key}' section"


def test_dvc_yaml_is_what_the_generator_writes():
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_dvc_yaml.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_each_train_stage_reads_only_its_own_method():
    own = {"train_lm": "lm_clusterer.py", "train_lm_gradient": "lm_gradient.py", "train_classical": "classical.py",
           "train_deep": "${item.run}.py", "train_suite_lm": "lm_clusterer.py",
           "train_suite_lm_gradient": "lm_gradient.py", "train_suite_classical": "classical.py",
           "train_suite_deep": "${item}.py", "train_deepdpm": "deepdpm.py", "train_suite_deepdpm": "deepdpm.py"}
    models = ("lm_clusterer.py", "lm_gradient.py", "classical.py", "jule.py", "deepcluster.py", "swav.py",
              "twostage.py", "deepdpm.py")
    trains = {n: s for n, s in stages().items() if n.split(":")[-1].startswith("train")}
    assert {n.split(":")[-1] for n in trains} == set(own)
    assert {n for n in trains if ":" not in n} == {n for n in own if not n.startswith("train_suite_")}
    for name, stage in trains.items():
        files = {Path(d).name for d in deps_of(stage)}
        assert own[name.split(":")[-1]] in files
        assert not (files & set(models)) - {own[name.split(":")[-1]]}, f"{name} depends on another method's file"
        assert "runs.${item.run}" in params_of(stage) or "runs.${item}" in params_of(stage)


def _expanded_deps(stage: dict) -> set[str]:
    """A stage's file deps, with ``${item}`` / ``${item.run}`` filled in for each of its rows."""
    if "matrix" in stage:
        items = [{"item.run": r} for r in stage["matrix"].get("run", [])]
    elif "foreach" in stage:
        items = [{"item": i} for i in stage["foreach"] if isinstance(i, str)]
    else:
        items = [{}]
    out = set()
    for dep in deps_of(stage):
        for item in items or [{}]:
            for key, value in item.items():
                dep = dep.replace("${" + key + "}", value)
            out.add(dep)
    return out


def test_every_model_module_a_method_imports_is_a_dependency():
    # a helper module split out of a method's file (dp_moves.py out of classical.py) must invalidate
    # the stages that run that method, or an edit to it leaves stale results looking up to date
    import re
    pattern = re.compile(r"signclust\.models\.([\w.]+) import|from signclust\.models import (\w+)")
    for name, stage in stages().items():
        deps = _expanded_deps(stage)
        methods = [d for d in deps if d.startswith("src/signclust/models/") and "${" not in d
                   and Path(d).name not in {"train.py", "base.py", "params.py", "checkpoint.py"}]
        for dep in methods:
            for dotted, short in pattern.findall((REPO_ROOT / dep).read_text()):
                module = "src/signclust/models/" + (dotted or short).replace(".", "/") + ".py"
                assert module in deps, f"{name}: {dep} imports {module}, which is not among its deps"


def _paths(stage: dict, key: str) -> set[str]:
    """A stage's ``deps``/``outs``/``metrics`` paths, for every item of its foreach or matrix."""
    import itertools
    body = stage.get("do", stage)
    if "matrix" in stage:
        axes = stage["matrix"]
        items = [{f"item.{k}": v for k, v in zip(axes, combo)} for combo in itertools.product(*axes.values())]
    elif "foreach" in stage:
        items = [{"item": i} for i in stage["foreach"]]
    else:
        items = [{}]
    out = set()
    for entry in body.get(key, []):
        path = entry if isinstance(entry, str) else next(iter(entry))
        for item in items:
            filled = path
            for k, v in item.items():
                filled = filled.replace("${" + k + "}", v)
            out.add(filled)
    return out


def test_the_main_job_is_every_row_on_the_main_corpora_and_nothing_of_the_full_tables():
    # `dvc repro` runs dvc.yaml's stages and what they depend on: if one of them read an output of
    # full/dvc.yaml, the main job would set off the hours of the full tables
    from signclust.config import load_params
    params = load_params()
    main = params["report"]["main_corpora"]
    everything = stages()
    root = {n: s for n, s in everything.items() if ":" not in n}
    full_outs = set().union(*(_paths(s, k) for n, s in everything.items() if ":" in n for k in ("outs", "metrics")))
    root_deps = set().union(*(_paths(s, "deps") for s in root.values()))
    assert not root_deps & full_outs, f"the main job reads the full tables' {sorted(root_deps & full_outs)}"
    for name, stage in root.items():
        corpora = stage["matrix"]["corpus"] if "matrix" in stage else stage.get("foreach")
        if corpora is not None:
            assert set(corpora) == set(main), f"{name} runs on {corpora}, the main job on {main}"
    evaluated = {p for p in _paths(root["evaluate"], "metrics")}
    assert evaluated == {f"reports/metrics/{r}_{c}.json" for r in params["report"]["methods"] for c in main}
    assert {f"reports/comparison_{'_'.join(main)}.md"} <= _paths(root["report_main"], "outs")
    # the full tables keep every other built-in corpus, and no stage is in both files
    full_corpora = set(everything["full/dvc.yaml:evaluate"]["matrix"]["corpus"])
    assert full_corpora == set(params["report"]["corpora"]) - set(main)
    outs = [o for s in everything.values() for k in ("outs", "metrics") for o in _paths(s, k)]
    assert len(outs) == len(set(outs)), "two stages write the same output"


def test_caches_are_outside_every_hashed_dependency():
    ignore = (REPO_ROOT / ".dvcignore").read_text().split()
    assert "__pycache__/" in ignore and "*.nbc" in ignore and "*.pyc" in ignore


# -- a scratch clone, real stages -------------------------------------------------------------------

def dvc(repo: Path, *args: str) -> str:
    env = {**os.environ, "PATH": f"{DVC.parent}:{os.environ.get('PATH', '')}", "SIGNCLUST_MLFLOW": "0"}
    out = subprocess.run([str(DVC), *args], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.slow
@pytest.mark.skipif(not DVC.exists(), reason="dvc is not installed in this interpreter's environment")
def test_second_repro_is_a_noop_and_an_edit_reruns_only_its_stages(tmp_path):
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(repo)], check=True)
    # what this test changes and runs, with one seed to keep it short
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["train"]["seeds"] = [0]
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "commit", "-qam", "one seed"], cwd=repo, check=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})
    lm, ward = "train_lm@lm-cypriot", "train_classical@ward_pixels-cypriot"
    dvc(repo, "repro", "-s", "prepare@cypriot")
    dvc(repo, "repro", "-s", lm)
    dvc(repo, "repro", "-s", ward)
    # importing every module (as a test run or an editor does) writes __pycache__: still clean
    subprocess.run([sys.executable, "-c", "import signclust.models.base as b; b._import_all()"], cwd=repo,
                   env={**os.environ, "PYTHONPATH": str(repo / "src")}, check=True)
    assert "up to date" in dvc(repo, "status", lm, ward) or dvc(repo, "status", lm, ward).strip() == ""
    again = dvc(repo, "repro", lm, ward)
    assert "didn't change, skipping" in again or "is cached" in again or "up to date" in again.lower()
    assert "Running stage" not in again
    # a comment in our model's file: only our model's stage is stale
    source = repo / "src" / "signclust" / "models" / "lm_clusterer.py"
    source.write_text(source.read_text() + "\n# a comment\n")
    status = dvc(repo, "status", lm, ward)
    assert lm in status and ward not in status
    shutil.copy(REPO_ROOT / "src" / "signclust" / "models" / "lm_clusterer.py", source)
    # our model's parameters: the baseline stays up to date
    params["runs"]["lm"]["params"] = {"context_beta": 0.2}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = dvc(repo, "status", lm, ward)
    assert lm in status and ward not in status
