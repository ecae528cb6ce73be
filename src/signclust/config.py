"""params.yaml access: each stage reads its own slice, named parameter sets overlay it."""
from __future__ import annotations

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
    path = Path(path or PARAMS_FILE)
    if not path.exists():
        if path == Path(PARAMS_FILE) and PROJECT_ROOT is None and "SIGNCLUST_PARAMS" not in os.environ:
            raise UserError(f"no params.yaml: {Path.cwd()} is not inside a signclust project (no folder up "
                            "from it holds params.yaml or dvc.yaml); run from the project, set SIGNCLUST_ROOT, "
                            "or pass --params FILE")
        raise UserError(f"parameter file not found: {path}")
    with open(path) as fh:
        return yaml.safe_load(fh) or {}


def section(name: str, params: dict | None = None) -> dict:
    params = load_params() if params is None else params
    if name not in params:
        raise UserError(f"params.yaml has no '{name}' section")
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


def with_preset(cfg: dict, preset: str | None, presets_key: str = "presets") -> dict:
    """Overlay a named parameter set (``cfg[presets_key][preset]``) on ``cfg``."""
    presets = cfg.get(presets_key, {}) or {}
    base = {k: v for k, v in cfg.items() if k != presets_key}
    if not preset:
        return base
    if preset not in presets:
        raise UserError(f"unknown parameter set '{preset}'; known: {', '.join(sorted(presets)) or 'none'}")
    return deep_update(base, presets[preset])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch
        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a hard requirement, but data stages need not import it
        pass


def torch_device(requested: str = "auto"):
    """CUDA when present (or asked for), CPU otherwise."""
    import torch
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("device 'cuda' requested but CUDA is not available")
    return torch.device(requested)
