"""params.yaml access: each stage reads its own slice, named parameter sets overlay it."""
from __future__ import annotations

import copy
import os
import random
from pathlib import Path

import numpy as np
import yaml

from signclust.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
PARAMS_FILE = Path(os.environ.get("SIGNCLUST_PARAMS", REPO_ROOT / "params.yaml"))


def load_params(path: str | Path | None = None) -> dict:
    path = Path(path or PARAMS_FILE)
    if not path.exists():
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
