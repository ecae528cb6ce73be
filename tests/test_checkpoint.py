"""Checkpoints: never a stale result, never a collision, the same bytes after a kill.

The fast tests interrupt fits in-process (an exception after the k-th checkpoint save, the way a
kill after that epoch would) and check the key, the lock and the files. The slow test kills the
real train CLI with SIGKILL at random epochs, resumes it and compares the run folder byte for
byte with an uninterrupted run; it is parametrised by run name: the gradient LM (lm_v1) and two
deep baselines. Our merge-move LM (lm) has no epochs: a fit takes seconds and is not checkpointed
(a kill loses that fit only; test_legacy_checkpointing_class_gets_a_content_keyed_folder).
"""
from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from signclust.config import REPO_ROOT, load_params
from signclust.errors import UserError
from signclust.models import checkpoint as ck
from signclust.models.base import FitContext, get_clusterer

# small, fast configurations of every deep baseline (each runs several epochs / phases)
FAST = {
    "deepcluster": dict(epochs=6, width=4, feat_dim=16, pca_dim=8),
    "swav": dict(epochs=6, width=4, feat_dim=16, hidden_dim=16, proj_dim=8, queue_length=40,
                 queue_start_epoch=1, batch_size=16, n_small_crops=1),
    "twostage": dict(rounds=2, epochs_per_round=2, stage2_epochs=3, width=4, dim=16, batch_size=16,
                     stage1_lr_milestones=[1]),
    "jule": dict(epochs_per_period=2, width=4, feat_dim=16, batch_size=16, ks=5, eta=0.3),
    "deepdpm": dict(max_epochs=40, start_computing_params=5, start_sub_clustering=10, start_splitting=15,
                    split_merge_every=5, init_k=2),
    "deepdpm_ae": dict(features="ae", ae_epochs=3, ae_width=4, max_epochs=25, start_computing_params=5,
                       start_sub_clustering=10, start_splitting=15, split_merge_every=5, init_k=2),
}


class Killed(Exception):
    """Stands in for a kill right after a checkpoint save."""


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture
def corpus(tiny_corpus):
    return tiny_corpus(n_types=3, per_type=10, n_texts=3)


def _fit(name, corpus, ckpt_dir=None, seed=1, **extra):
    method = name.split("_")[0]
    c = get_clusterer(method, **{**FAST[name], **extra})
    ctx = FitContext(seed=seed, n_clusters=3 if c.needs_k else None, progress=False,
                     checkpoint_dir=str(ckpt_dir) if ckpt_dir else None)
    return c.fit(corpus, ctx)


def _interrupt_after(monkeypatch, n_saves: int):
    """Raise Killed right after the n-th checkpoint save from now."""
    real = ck.FitCheckpoint.save
    count = {"n": 0}

    def save(self, state):
        real(self, state)
        count["n"] += 1
        if count["n"] == n_saves:
            raise Killed
    monkeypatch.setattr(ck.FitCheckpoint, "save", save)
    return lambda: monkeypatch.setattr(ck.FitCheckpoint, "save", real)


@pytest.mark.parametrize("name", list(FAST))
def test_interrupted_fits_resume_to_the_same_bytes(name, corpus, tmp_path, monkeypatch, capsys):
    ref = _fit(name, corpus)
    ckpt_dir = tmp_path / "ckpt"
    rng = random.Random(name)
    interrupts = 0
    for _ in range(3):                                   # three kills at random epochs, each resumed
        undo = _interrupt_after(monkeypatch, rng.randint(1, 2))
        try:
            _fit(name, corpus, ckpt_dir)
        except Killed:
            interrupts += 1
        undo()
        assert (ckpt_dir / ck.FILE).exists() or not ckpt_dir.exists()
    assert interrupts >= 2
    out = _fit(name, corpus, ckpt_dir)
    assert "resuming" in capsys.readouterr().err
    assert out.labels.tobytes() == ref.labels.tobytes()
    assert out.embedding.tobytes() == ref.embedding.tobytes()
    assert not ckpt_dir.exists()                         # a finished fit keeps nothing


@pytest.mark.parametrize("change, why", [
    ("images", "corpus images"),          # the same files' pixels changed (e.g. prepare.render edited)
    ("reassign", "token order"),          # tokens point at other images (a re-import, images reassigned)
    ("order", "token order"),
    ("params", "parameters"),
    ("seed", "seed, K or device"),
])
def test_a_checkpoint_of_another_fit_is_never_used(change, why, corpus, tmp_path, monkeypatch, capsys):
    ckpt_dir = tmp_path / "ckpt"
    undo = _interrupt_after(monkeypatch, 2)
    with pytest.raises(Killed):
        _fit("deepcluster", corpus, ckpt_dir)
    undo()
    seed, extra = 1, {}
    if change == "images":
        corpus.images = np.ascontiguousarray(corpus.images[:, ::-1])
    elif change == "reassign":
        corpus.tokens["image_index"] = (corpus.tokens["image_index"] + 1) % len(corpus.images)
    elif change == "order":
        corpus.tokens["position"] = corpus.tokens["position"][::-1].to_numpy()
    elif change == "params":
        extra = {"lr": 0.01}
    else:
        seed = 2
    capsys.readouterr()
    out = _fit("deepcluster", corpus, ckpt_dir, seed=seed, **extra)
    err = capsys.readouterr().err
    assert f"changed: {why}" in err and "starting from the beginning" in err
    fresh = _fit("deepcluster", corpus, None, seed=seed, **extra)
    assert out.labels.tobytes() == fresh.labels.tobytes() and out.embedding.tobytes() == fresh.embedding.tobytes()


def test_code_version_follows_the_source(monkeypatch, tmp_path):
    from signclust.models.baselines.deepcluster import DeepCluster
    from signclust.models.baselines.jule import JULE
    a = ck.code_version(DeepCluster)
    assert a != ck.code_version(JULE)
    ck.code_version.cache_clear()
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + (b"#" if self.name == "deepcluster.py" else b""))
    assert ck.code_version(DeepCluster) != a
    monkeypatch.undo()
    ck.code_version.cache_clear()


@pytest.mark.parametrize("edited", ["visual_encoder.py", "_nets.py", "glyphs.py"])
def test_code_version_follows_modules_imported_inside_functions(monkeypatch, edited):
    # lm_clusterer imports the encoder (and, through it, _nets) inside fit: an edit there must
    # still make an lm checkpoint (and the ablation's per-fit cache) stale
    from signclust.models.lm_clusterer import LMSignClusterer
    ck.code_version.cache_clear()
    a = ck.code_version(LMSignClusterer)
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + (b"#" if self.name == edited else b""))
    ck.code_version.cache_clear()
    assert ck.code_version(LMSignClusterer) != a
    monkeypatch.undo()
    ck.code_version.cache_clear()
    assert ck.code_version(LMSignClusterer) == a


def test_code_version_ignores_other_methods_files(monkeypatch):
    from signclust.models.lm_clusterer import LMSignClusterer
    ck.code_version.cache_clear()
    a = ck.code_version(LMSignClusterer)
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + (b"#" if self.name == "jule.py" else b""))
    ck.code_version.cache_clear()
    assert ck.code_version(LMSignClusterer) == a
    monkeypatch.undo()
    ck.code_version.cache_clear()


def test_unreadable_or_foreign_checkpoint_is_ignored(corpus, tmp_path, capsys):
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    (ckpt_dir / ck.FILE).write_bytes(b"not a checkpoint")
    ref = _fit("deepcluster", corpus)
    out = _fit("deepcluster", corpus, ckpt_dir)
    assert "unreadable" in capsys.readouterr().err
    assert out.labels.tobytes() == ref.labels.tobytes()


def test_loads_are_weights_only(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    torch.save({"format": 1, "key": {}, "state": Evil()}, tmp_path / "x.pt")
    with pytest.raises(Exception, match="[Ww]eights only|WeightsUnpickler|Unsupported global"):
        ck.load_weights(tmp_path / "x.pt")
    state = {"a": np.arange(5, dtype=np.int32), "b": np.float64(2.5), "c": [np.zeros((2, 2), bool)],
             "rng": ck.capture_rng(torch.Generator().manual_seed(3))}
    ck.save_atomic(state, tmp_path / "y.pt")
    back = ck.load_weights(tmp_path / "y.pt")
    assert back["a"].dtype == np.int32 and np.array_equal(back["a"], state["a"]) and back["b"] == 2.5
    g = torch.Generator()
    ck.restore_rng(back["rng"], g)
    assert torch.equal(torch.rand(3, generator=g), torch.rand(3, generator=torch.Generator().manual_seed(3)))


def test_a_second_process_on_the_same_fit_is_refused(corpus, tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    fd = os.open(ckpt_dir / ck.LOCK, os.O_RDWR | os.O_CREAT)     # another holder (flock is per open file)
    os.write(fd, b"4242\n")
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(UserError, match=r"another process \(pid 4242\) is running this fit"):
            _fit("deepcluster", corpus, ckpt_dir)
    finally:
        os.close(fd)
    _fit("deepcluster", corpus, ckpt_dir)                          # released: runs


def test_saves_use_unique_temp_names_and_stale_ones_are_removed(corpus, tmp_path, monkeypatch):
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    stale = ckpt_dir / f"{ck.FILE}.99999.abcdefgh.tmp"               # a save killed half-way
    stale.write_bytes(b"half")
    names = []
    real = ck.tempfile.mkstemp

    def spy(**kw):
        fd, name = real(**kw)
        names.append(name)
        return fd, name
    monkeypatch.setattr(ck.tempfile, "mkstemp", spy)
    _fit("deepcluster", corpus, ckpt_dir)
    assert not stale.exists()
    assert len(names) == len(set(names)) == FAST["deepcluster"]["epochs"]
    assert all(str(os.getpid()) in Path(n).name for n in names)


def test_train_stage_checkpoints_under_out_and_cleans_up(corpus, saved_corpus, tmp_path, monkeypatch):
    from signclust.models import train as train_mod
    folder = saved_corpus(corpus, "tiny")
    params = {"train": {"device": "cpu"}, "runs": {"dc": {"method": "deepcluster", "params": FAST["deepcluster"]}},
              "models": {}}
    seen = []
    real = ck.FitCheckpoint.save
    monkeypatch.setattr(ck.FitCheckpoint, "save", lambda self, s: seen.append(self.dir) or real(self, s))
    out = tmp_path / "out"
    train_mod.train("dc", "tiny", [0], params, folder, None, out, train_mod.checkpoint_root(out), progress=False)
    assert set(seen) == {out / ".checkpoints" / "dc" / "tiny" / "seed0"}
    assert not (out / ".checkpoints").exists() and (out / "dc" / "tiny" / "seed0" / "assignment.csv").exists()


def test_legacy_checkpointing_class_gets_a_content_keyed_folder(tiny_corpus, saved_corpus, tmp_path, capsys):
    """A class that does not checkpoint epochs itself (our LM clusterer: a fit takes seconds) cannot
    resume another fit: the train stage gives it a folder keyed by the content and removes other
    keys' folders."""
    from signclust.models import train as train_mod
    corpus = tiny_corpus(n_types=3, per_type=6, n_texts=3)
    folder = saved_corpus(corpus, "tiny")
    params = {"train": {"device": "cpu"}, "runs": {"lm": {"method": "lm", "params": {"max_rounds": 2}}}, "models": {}}
    out = tmp_path / "out"
    stale = out / ".checkpoints" / "lm" / "tiny" / "seed0" / "fit-0123456789abcdef"
    stale.mkdir(parents=True)
    (stale / "lm-x.pt").write_bytes(b"from another corpus")
    train_mod.train("lm", "tiny", [0], params, folder, None, out, train_mod.checkpoint_root(out), progress=False)
    assert "written for a different fit; removed" in capsys.readouterr().err
    assert not (out / ".checkpoints").exists()


# ----------------------------------------------------------------------------- kill -9 and resume
# The train CLI's main() in a child process that SIGKILLs itself at a chosen checkpoint save: right
# after the n-th save ("after:n"), or half-way through writing it ("during:n", which leaves a partial
# temporary file behind). No cleanup code runs in either case, exactly as with `kill -9`.
CHILD = """
import os, signal, sys
from signclust.models import checkpoint as ck
from signclust.models.train import main
mode, n = os.environ.get("KILL_AT", "never:0").split(":")
count = [0]
real_save, real_torch_save = ck.FitCheckpoint.save, ck.save_atomic

def killing_save_atomic(obj, path):
    if mode == "during" and count[0] + 1 == int(n):
        import tempfile
        fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
        os.write(fd, b"half a checkpoint")
        os.kill(os.getpid(), signal.SIGKILL)
    real_torch_save(obj, path)

def save(self, state):
    real_save(self, state)
    count[0] += 1
    if mode == "after" and count[0] == int(n):
        os.kill(os.getpid(), signal.SIGKILL)

ck.FitCheckpoint.save = save
ck.save_atomic = killing_save_atomic
sys.argv = ["signclust.models.train"] + sys.argv[1:]
try:
    main()
finally:
    print(f"saves this process: {count[0]}", file=sys.stderr)
"""
# run name -> (method parameters on the test corpus, kills). Every deep baseline resumes exactly in the
# fast in-process test above; these two run the real thing (DeepDPM: across its AE and DPM phases).
# Add "lm" once lm_clusterer.py checkpoints through signclust.models.checkpoint.
KILL_RUNS = {
    "lm_v1": ({"epochs": 8, "d": 8, "hidden": 16, "init_threshold": 0.0, "s": 6}, ["after", "during"]),
    "deepcluster": ({"epochs": 9, "width": 8, "feat_dim": 32, "pca_dim": 16}, ["after", "during", "after"]),
    "deepdpm": ({"features": "ae", "ae_epochs": 3, "ae_width": 8, "max_epochs": 40, "start_computing_params": 5,
                 "start_sub_clustering": 10, "start_splitting": 15, "split_merge_every": 5}, ["after", "during"]),
}
TIMING_KEYS = {"seconds", "wall_s", "wall_time_s", "seconds_train"}


def _saves(path: Path) -> int:
    return int(ck.load_weights(path).get("saves", 0)) if path.exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize("run", list(KILL_RUNS))
def test_sigkill_at_random_epochs_then_resume_is_byte_identical(run, tiny_corpus, saved_corpus, tmp_path):
    method_params, kills = KILL_RUNS[run]
    corpus_dir = saved_corpus(tiny_corpus(n_types=3, per_type=12, n_texts=4), "kc")
    params = load_params(REPO_ROOT / "params.yaml")
    params["train"] = {"seeds": [0], "device": "cpu"}
    params["models"][params["runs"][run]["method"]] = method_params
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "SIGNCLUST_PARAMS": str(tmp_path / "params.yaml"), "SIGNCLUST_MLFLOW": "0",
           "OMP_NUM_THREADS": "1"}

    def train(out: Path, kill: str | None = None) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-c", CHILD, run, "kc", "--corpus-dir", str(corpus_dir), "--dist-dir",
               str(tmp_path / "none"), "--out", str(out), "--seeds", "0", "--no-progress"]
        return subprocess.run(cmd, env={**env, "KILL_AT": kill or "never:0"}, capture_output=True, text=True,
                              timeout=600)

    ref, out = tmp_path / "ref", tmp_path / "killed"
    proc = train(ref)
    assert proc.returncode == 0, proc.stderr
    total = int(proc.stderr.rsplit("saves this process: ", 1)[1].split()[0])
    ckpt = out / ".checkpoints" / run / "kc" / "seed0" / ck.FILE
    rng = random.Random()
    history = []
    for mode in kills:                                   # SIGKILL at a random later epoch, each time resumed
        n = rng.randint(1, max(1, min(3, total - _saves(ckpt) - 1)))
        proc = train(out, f"{mode}:{n}")
        history.append((mode, n, proc.returncode, _saves(ckpt)))
        assert proc.returncode == -signal.SIGKILL, (history, proc.stderr[-2000:])
        assert ckpt.exists()
        if mode == "during":                             # the half-written save is left behind ...
            assert any(p.name.endswith(".tmp") for p in ckpt.parent.iterdir())
    assert not any(p.name.endswith(".tmp") for p in ckpt.parent.iterdir()) or kills[-1] == "during"
    final = train(out)
    assert final.returncode == 0, final.stderr
    assert "resuming" in final.stderr
    a, b = ref / run / "kc" / "seed0", out / run / "kc" / "seed0"
    for name in ("assignment.csv", "embedding.npy"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), f"{run} {name} differs after kills {history}"
    strip = lambda d: {k: v for k, v in d.items() if k not in TIMING_KEYS}  # noqa: E731
    assert strip(json.loads((a / "info.json").read_text())) == strip(json.loads((b / "info.json").read_text()))
    assert not (out / ".checkpoints").exists()          # finished: checkpoint, lock and temp files gone
