"""Shared test setup: quiet, small and reproducible.

Environment (set before anything from signclust is imported, and inherited by the
subprocesses the CLI tests start): no MLflow logging, and one thread count for every pool --
numba, OpenMP (torch), MKL, OpenBLAS: ``SIGNCLUST_TEST_THREADS``, default 2 (CI's machine), whatever
the caller's shell sets. A fit's floats depend on the thread count, and a mixed state is the worst:
with OMP_NUM_THREADS=MKL_NUM_THREADS=1 in the shell (scripts/mutation.sh set them) torch began at
one thread, numba's import raised its OpenMP pool to 2 midway, MKL stayed at 1, and
test_coarse_contexts_join_the_forms_of_a_sign_split_by_hand failed (the coarse contexts joined the
two hands' forms on 1 of 3 draws instead of 3; K 9 and V 0.78 on draws 1 and 2 where 2 threads give
K 6 and 5, V 0.93 and 0.96).

Fixtures
--------
``tiny_corpus``   a *factory*: ``tiny_corpus(per_type=8, n_texts=4, size=32, ...)`` returns a
                  labelled :class:`~signclust.data.corpus.Corpus` of a few very different shapes
                  (bar, column, ring, cross, ...) with small noise, spread over a few texts.
``tiny``          ``tiny_corpus()`` with the defaults (a ready Corpus).
``saved_corpus``  a factory that saves a corpus to a fresh folder and returns the folder.
``one_torch_thread``  torch on one intra-op thread for the test, restored afterwards (a leaked
                  setting changes the floating-point results of every later fit, see test_reproduce).
``run_cli``       runs ``python -m <module> args...`` with this interpreter, returns CompletedProcess.
``cli_error``     ``cli_error(main, argv, expected)``: ``main(argv)`` must exit 2 with one ``error:`` line
                  containing ``expected`` and no traceback (``one_error_line``, for a caught SystemExit).
"""
from __future__ import annotations

import os

os.environ["SIGNCLUST_MLFLOW"] = "0"
TEST_THREADS = os.environ.get("SIGNCLUST_TEST_THREADS", "2")
for _pool in ("SIGNCLUST_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_pool] = TEST_THREADS
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

from signclust.data.corpus import Corpus  # noqa: E402

# torch may have been imported before this file (mutmut's forkserver preloads it): the environment
# above came too late for it, so its OpenMP and MKL pools are set here as well
torch.set_num_threads(int(TEST_THREADS))

SHAPES = ("bar", "column", "ring", "cross", "triangle", "dot")


def draw_shape(shape: str, size: int = 32, width: int | None = None) -> np.ndarray:
    """One clean glyph, uint8 (size, size), ink 255 on 0."""
    img = Image.new("L", (size, size), 0)
    d = ImageDraw.Draw(img)
    w = width or max(2, size // 10)
    lo, hi, mid = size // 6, size - 1 - size // 6, size // 2
    if shape == "bar":
        d.rectangle([lo, mid - w, hi, mid + w], fill=255)
    elif shape == "column":
        d.rectangle([mid - w, lo, mid + w, hi], fill=255)
    elif shape == "ring":
        d.ellipse([lo, lo, hi, hi], outline=255, width=w)
    elif shape == "cross":
        d.line([lo, lo, hi, hi], fill=255, width=w)
        d.line([lo, hi, hi, lo], fill=255, width=w)
    elif shape == "triangle":
        d.polygon([(mid, lo), (hi, hi), (lo, hi)], outline=255, width=w)
    elif shape == "dot":
        d.ellipse([mid - 2 * w, mid - 2 * w, mid + 2 * w, mid + 2 * w], fill=255)
    else:
        raise ValueError(shape)
    return np.asarray(img, dtype=np.uint8)


def make_tiny_corpus(n_types: int = 4, per_type: int = 8, n_texts: int = 4, size: int = 32,
                     noise: float = 12.0, shift: int = 1, duplicates: int = 0, seed: int = 0) -> Corpus:
    """Labelled synthetic corpus: ``n_types`` shapes x ``per_type`` noisy tokens, shuffled into texts.

    ``duplicates`` > 0 appends that many exact copies of earlier tokens' images (tokens sharing an
    image). Token order is shuffled; texts are assigned round-robin, hands are per text.
    """
    if not 1 <= n_types <= len(SHAPES):
        raise ValueError(f"n_types must be 1..{len(SHAPES)}")
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for t in range(n_types):
        clean = draw_shape(SHAPES[t], size).astype(np.float64)
        for _ in range(per_type):
            dy, dx = rng.integers(-shift, shift + 1, size=2)
            img = np.roll(clean, (dy, dx), axis=(0, 1)) + rng.normal(0, noise, clean.shape)
            images.append(np.clip(np.rint(img), 0, 255).astype(np.uint8))
            labels.append(SHAPES[t])
    order = rng.permutation(len(images))
    images = [images[i] for i in order]
    labels = [labels[i] for i in order]
    for _ in range(duplicates):
        j = int(rng.integers(len(images)))
        images.append(images[j].copy())
        labels.append(labels[j])
    n = len(images)
    text_ids = [f"T{i % n_texts}" for i in range(n)]
    hands = [f"hand{i % n_texts}" for i in range(n)]
    return Corpus.from_arrays(np.stack(images), labels=labels, text_ids=text_ids, hands=hands,
                              meta={"name": "tiny", "source": "synthetic (tests)", "licence": "n/a",
                                    "attribution": "tests"})


def ward_study_params(trials: int = 3, workers: int = 1) -> dict:
    """The real params.yaml with a small `tune` section: a Ward study over two choices (seconds)."""
    from signclust.config import load_params
    params = load_params()
    params["tune"] = {"trials": trials, "workers": workers, "objective": "supervised", "fit_seed": 0,
                      "sampler_seed": 0, "pruner": {"type": "none"}, "heartbeat_s": 5, "grace_s": 20, "max_retry": 1,
                      "report_seeds": [0], "unsupervised": {"lm_weight": 1.0, "hom_weight": 1.0, "folds": 3},
                      "intermediate": {}, "fixed": {},
                      "spaces": {"ward": {"pca_dim": {"choices": [0, 5, 10]}, "glyphs": {"choices": [False, True]}}}}
    return params


def make_lm_study(folder, name: str, summary: dict, trials: list) -> None:
    """A study journal and summary under ``folder`` (as ``signclust tune`` leaves them): ``trials`` are
    (rank_c0, the trial's user attributes: v_measure, context_evidence ...), each complete."""
    import json

    import optuna

    from signclust.tuning.storage import journal_storage
    study = optuna.create_study(study_name=name, storage=journal_storage(folder / f"{name}.optuna.log"),
                                direction="maximize")
    dist = {"rank_c0": optuna.distributions.FloatDistribution(0.0, 8.0),
            "encoder_epochs": optuna.distributions.IntDistribution(0, 1)}
    for rank_c0, attrs in trials:
        study.add_trial(optuna.trial.create_trial(params={"rank_c0": rank_c0, "encoder_epochs": 0}, distributions=dist,
                                                  value=0.5, user_attrs=attrs))
    (folder / f"{name}.json").write_text(json.dumps(summary))


def lm_study_dirs(tmp_path, monkeypatch, corpus: Corpus, modules: list) -> Path:
    """``corpus`` saved as tmp_path/corpora/tiny and an empty tmp_path/studies, which every module of
    ``modules`` (the scripts that read lm's tuning studies) reads instead of the repository's folders."""
    corpus.save(tmp_path / "corpora" / "tiny")
    (tmp_path / "studies").mkdir()
    for module in modules:
        for attr, folder in (("STUDIES_DIR", "studies"), ("CORPORA_DIR", "corpora")):
            if hasattr(module, attr):
                monkeypatch.setattr(module, attr, tmp_path / folder)
    return tmp_path / "studies"


@pytest.fixture
def tiny_corpus():
    """Factory fixture: ``tiny_corpus(**kwargs)`` -> Corpus (see :func:`make_tiny_corpus`)."""
    return make_tiny_corpus


@pytest.fixture
def tiny() -> Corpus:
    return make_tiny_corpus()


@pytest.fixture
def saved_corpus(tmp_path):
    """Factory: ``saved_corpus(corpus, name="c")`` saves under tmp_path/corpora/<name>, returns the folder."""
    def save(corpus: Corpus, name: str = "c") -> Path:
        folder = tmp_path / "corpora" / name
        corpus.save(folder)
        return folder
    return save


@pytest.fixture
def run_cli():
    """``run_cli("signclust.data.import_corpus", arg, ...)`` -> CompletedProcess (text, captured)."""
    def run(module: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True,
                              text=True, timeout=timeout, env=dict(os.environ))
    return run


def one_error_line(capsys, exc, expected: str) -> str:
    """The SystemExit ``exc`` (pytest.raises) is exit 2 with exactly one ``error:`` line on stderr,
    containing ``expected``; returns that line."""
    assert exc.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err
    assert expected in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def cli_error(capsys):
    """``cli_error(main, argv, expected)`` -> the one error line of ``main(argv)`` (exit 2)."""
    def run(main, argv: list[str], expected: str) -> str:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        return one_error_line(capsys, exc, expected)
    return run


@pytest.fixture
def one_torch_thread():
    """Tiny nets: intra-op threads only add synchronisation. Import every model module first: one
    of them sets numba's OpenMP thread count on import, which is torch's too."""
    import torch

    from signclust.models.base import get_clusterer
    get_clusterer("jule")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
