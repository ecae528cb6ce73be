"""params.yaml access: each stage reads its own section (a method's layers: models/train.py run_config)."""
from __future__ import annotations

import contextlib
import copy
import os
import random
from pathlib import Path

import numpy as np
import yaml

from signclust.errors import UserError

ROOT_MARKERS = ("params.yaml", "dvc.yaml")


def find_project_root(start: str | Path | None = None) -> Path | None:
    """The signclust project the user works in: ``$SIGNCLUST_ROOT`` when set, else the first of
    ``start`` (default: the working directory) and its parents that holds params.yaml or dvc.yaml;
    None outside any project. Never derived from where the package is installed."""
    env = os.environ.get("SIGNCLUST_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / marker).is_file() for marker in ROOT_MARKERS):
            return folder
    return None


# Found once, at import: every stage's default paths (data/, models/, reports/, mlflow.db) hang
# off it. Outside a project the working directory stands in, and reading params.yaml says so.
PROJECT_ROOT = find_project_root()
REPO_ROOT = PROJECT_ROOT or Path.cwd().resolve()
PARAMS_FILE = Path(os.environ.get("SIGNCLUST_PARAMS", REPO_ROOT / "params.yaml"))


def set_params_file(path: str | Path) -> Path:
    """Use another parameter file from now on (``signclust --params FILE``); subprocesses inherit it."""
    global PARAMS_FILE
    PARAMS_FILE = Path(path).expanduser().resolve()
    os.environ["SIGNCLUST_PARAMS"] = str(PARAMS_FILE)
    return PARAMS_FILE


def project_params_file() -> Path | None:
    """The parameter file in effect when there is one (``--params``/``$SIGNCLUST_PARAMS``, else the
    project's params.yaml), None when there is none."""
    return PARAMS_FILE if Path(PARAMS_FILE).is_file() else None


def load_params(path: str | Path | None = None) -> dict:
    """The parameter file as a dict; a missing, unreadable or malformed file is one UserError."""
    path = Path(path or PARAMS_FILE)
    if not path.exists() and path == Path(PARAMS_FILE) and PROJECT_ROOT is None \
            and "SIGNCLUST_PARAMS" not in os.environ:
        raise UserError(f"no params.yaml: {Path.cwd()} is not inside a signclust project (no folder up "
                        "from it holds params.yaml or dvc.yaml); run from the project, set SIGNCLUST_ROOT, "
                        "or pass --params FILE")
    if not path.is_file():
        raise UserError(f"parameter file not found: {path}" if not path.exists()
                        else f"parameter file {path} is not a file")
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{path} is not valid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read parameter file {path}: {err}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise UserError(f"{path} must hold a mapping of sections, not a {type(doc).__name__}")
    return doc


def section(name: str, params: dict | None = None) -> dict:
    params = load_params() if params is None else params
    if name not in params:
        raise UserError(f"params.yaml has no '{name}' section")
    if not isinstance(params[name], dict):
        raise UserError(f"params.yaml section '{name}' must be a mapping")
    return copy.deepcopy(params[name])


def deep_update(base: dict, override: dict) -> dict:
    """Recursive dict merge: ``override`` wins, nested dicts are merged not replaced."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_update(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch
        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a hard requirement, but data stages need not import it
        pass


def numeric_platform() -> dict:
    """What a fit's exact floating-point figures depend on besides its seed: the CPU (torch, MKL,
    oneDNN and OpenBLAS choose their kernels by its instruction set, and a network trained on
    another CPU drifts apart), the vector width torch dispatches to, the torch thread count and the
    library versions. Two machines with the same record give the same bytes; reports/timings/
    keeps it beside each fit's wall time (never in a DVC output a later stage reads)."""
    import platform

    import torch
    cpu = {"model name": platform.processor() or platform.machine()}
    with contextlib.suppress(OSError):             # Linux: the first processor's block of /proc/cpuinfo
        block = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
        lines = (line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in lines}
        cpu = {k: fields[k] for k in ("vendor_id", "cpu family", "model", "model name", "cache size") if k in fields}
        # a virtual machine may call every CPU "Processor": the vector extensions tell them apart
        cpu["vector extensions"] = " ".join(sorted(f for f in fields.get("flags", "").split()
                                                   if f.startswith(("avx", "amx", "fma", "sse"))))
    return {"cpu": cpu, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "numpy": np.__version__}


def torch_device(requested: str = "auto"):
    """CUDA when present (or asked for), CPU otherwise. A CUDA device comes with deterministic
    kernels (``deterministic_cuda``), so that the same params and seed give the same fit there too."""
    import torch
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("device 'cuda' requested but CUDA is not available")
    device = torch.device(requested)
    if device.type == "cuda":
        deterministic_cuda()
    return device


def deterministic_cuda() -> None:
    """Make this process's CUDA kernels deterministic. Left alone, cuDNN picks its convolution
    algorithms per process and some backward kernels add with atomics in whatever order threads
    finish: an ``lm`` fit of latin_hands at seed 0 found K 41 in one process and 36 in the next on an
    H100 (benchmarks/device_check.py). An operation without a deterministic CUDA kernel then raises
    instead of drifting. The CPU needs none of this: its kernels are deterministic already."""
    import torch
    # cuBLAS reads its workspace size when a handle is made: fixed, its reductions keep their order.
    # A stage sets it before its first CUDA call; a notebook that ran cuBLAS before its first fit
    # should export it before starting Python
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)


@contextlib.contextmanager
def torch_switches_kept():
    """Put torch's determinism switches back as they were when the block ends. A stage is a process
    of its own; the Python API fits inside the caller's process, whose own torch code must not find
    deterministic algorithms turned on by a fit on CUDA (``deterministic_cuda``)."""
    import sys
    torch = sys.modules.get("torch")       # not imported yet: torch's defaults are what to restore
    saved = ((torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
             if torch is not None else (False, False, False, False))
    try:
        yield
    finally:
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[2], saved[3]
