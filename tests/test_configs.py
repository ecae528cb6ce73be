"""The real params.yaml and the parameter schema: every configured row builds, every name it uses
exists, and a bad value is one clear error (fast: no fits)."""
from __future__ import annotations

import re

import pytest
import yaml

from signclust.config import REPO_ROOT, load_params
from signclust.errors import UserError
from signclust.models.base import REGISTRY, get_class, get_clusterer
from signclust.models.params import Param, resolve
from signclust.models.train import preset_values, run_config

PARAMS = load_params(REPO_ROOT / "params.yaml")
RUNS = sorted(PARAMS["runs"])


def param_names(method: str) -> set[str]:
    cls = get_class(method)
    return set(cls.PARAMS if cls.PARAMS is not None else cls.DEFAULTS)


def all_methods() -> list[str]:
    get_class("lm")                     # imports every model module
    return sorted(REGISTRY)


# ------------------------------------------------------------------------------ the real params.yaml
@pytest.mark.parametrize("run", RUNS)
def test_every_run_row_builds(run):
    method, cfg, _ = run_config(run, PARAMS)
    clusterer = get_clusterer(method, **cfg)
    assert set(cfg) <= set(clusterer.params)
    assert set(clusterer.params) >= param_names(method)      # the effective configuration is complete


def test_models_sections_name_real_parameters_and_change_something():
    for method, cfg in (PARAMS.get("models") or {}).items():
        cls = get_class(method)
        assert set(cfg or {}) <= param_names(method), method
        get_clusterer(method, **(cfg or {}))
        if cls.PARAMS is not None:       # only what the comparison changes from the class defaults
            same = [k for k, v in (cfg or {}).items() if cls.PARAMS[k].check(v) == cls.DEFAULTS[k]]
            assert not same, f"models.{method} repeats class defaults: {same}"


def test_every_preset_applies_and_has_one_source():
    yaml_presets = PARAMS.get("presets") or {}
    assert set(yaml_presets) <= set(all_methods())
    for method in all_methods():
        cls = get_class(method)
        names = set(cls.PRESETS) | set(yaml_presets.get(method) or {})
        for name in names:
            values = preset_values(method, name, PARAMS, "test")   # raises when both define it
            assert set(values) <= param_names(method)
            get_clusterer(method, **values)
            if cls.PARAMS is not None and name in cls.PRESETS:
                assert get_clusterer(method, preset=name).params == get_clusterer(method, **values).params
    for method in ("kmeans", "ward", "dpgmm", "deepcluster", "swav", "twostage", "jule", "deepdpm"):
        assert "paper" in get_class(method).PRESETS, method
        assert "paper" not in (yaml_presets.get(method) or {}), f"presets.{method}.paper copies the class"


def test_tune_spaces_and_fixed_are_parameters_of_their_method():
    tune = PARAMS["tune"]
    for section in ("spaces", "fixed"):
        for method, keys in (tune.get(section) or {}).items():
            unknown = set(keys) - param_names(method)
            assert not unknown, f"tune.{section}.{method}: {unknown}"
    for method, fixed in (tune.get("fixed") or {}).items():
        get_clusterer(method, **fixed)


def test_rows_named_by_other_sections_exist():
    runs = set(RUNS)
    rows = PARAMS["reproduce"]["rows"]
    assert {r for corpus_rows in rows.values() for r in corpus_rows} <= runs
    for run, reduction in (PARAMS["reproduce"].get("reduced") or {}).items():
        assert run in runs
        method, cfg, _ = run_config(run, PARAMS)
        get_clusterer(method, **{**cfg, **(reduction.get("params") or {})})
    assert set(PARAMS["report"]["methods"]) <= runs
    main, full = (yaml.safe_load((REPO_ROOT / f).read_text())["stages"] for f in ("dvc.yaml", "full/dvc.yaml"))
    trained = {r for name, stage in main.items() if name.startswith("train_") and "matrix" in stage
               for r in stage["matrix"]["run"]}
    on_suite = {r for name, stage in full.items() if name.startswith("train_suite_") for r in stage["foreach"]}
    evaluated = set(main["evaluate"]["matrix"]["run"])
    # the main job trains and evaluates every row, and so do the full tables
    assert trained <= runs and evaluated == trained == on_suite == set(full["evaluate_suite"]["foreach"])
    assert set(full["evaluate"]["matrix"]["run"]) == evaluated
    suite = PARAMS["report"]["suite"]
    assert set(suite["rows"]) <= evaluated and {suite["ours"], *suite["references"], *suite["deep"]} <= evaluated
    for claim in PARAMS["reproduce"]["claims"]:
        assert {claim[k] for k in ("a", "b", "run") if k in claim} <= runs


def test_ablation_variants_name_real_parameters_and_presets():
    from signclust.evaluation.ablation import config, variant_params
    cfg = config(PARAMS)
    method, base, _ = run_config(cfg["run"], PARAMS)
    names = param_names(method)
    defaults = get_clusterer(method, **base).params
    for name, spec in cfg["variants"].items():
        spec = spec or {}
        assert set(spec.get("set") or {}) <= names, name
        assert set(spec.get("scale") or {}) <= names, name
        vparams = variant_params(name, spec, base, method, PARAMS, defaults, cfg["epochs"])
        get_clusterer(method, **vparams)


def test_paper_checks_build():
    from signclust.models.base import get_class
    from signclust.reports.paper_check import check_params, check_setting, with_preset
    for check in PARAMS["paper_check"]["checks"]:
        method = check["method"]
        for scale in ("full", "ci"):             # exactly what the stage and the CI reproduction fit
            get_clusterer(method, **check_params(check_setting(check, PARAMS, scale), PARAMS))
        # the study of the method's own settings (paper_check --preset NAME) builds for every preset
        for preset in get_class(method).PRESETS or {}:
            get_clusterer(method, **check_params(with_preset(check, preset, None), PARAMS))


# ------------------------------------------------------------------------------ layers
LAYERED = {
    "runs": {
        "plain": {"method": "deepcluster"},
        "row_params": {"method": "deepcluster", "params": {"lr": 0.2}},
        "class_preset": {"method": "deepcluster", "preset": "paper", "params": {"epochs": 3}},
        "yaml_preset": {"method": "deepcluster", "preset": "quick"},
        "both": {"method": "deepcluster", "preset": "quick", "params_file": "x.yaml"},
        "shadowed": {"method": "kmeans", "preset": "paper"},
        "typo": {"method": "deepcluster", "parmas": {}},
    },
    "models": {"deepcluster": {"epochs": 10, "lr": 0.1, "width": 8}},
    "presets": {"deepcluster": {"quick": {"epochs": 2}}, "kmeans": {"paper": {"n_init": 1}}},
}


def _build(run: str):
    method, cfg, _ = run_config(run, LAYERED)
    return get_clusterer(method, **cfg)


def test_layers_defaults_models_preset_row_params():
    cls = get_class("deepcluster")
    plain = _build("plain").params                                      # class defaults < models
    assert (plain["epochs"], plain["lr"], plain["width"]) == (10, 0.1, 8)
    assert plain["batch_size"] == cls.DEFAULTS["batch_size"]
    assert _build("row_params").params["lr"] == 0.2                     # row params over models
    p = _build("class_preset").params                                   # preset over models, row over preset
    paper = cls.PRESETS["paper"]
    assert (p["epochs"], p["width"], p["lr"]) == (3, paper["width"], paper["lr"])
    q = _build("yaml_preset").params
    assert (q["epochs"], q["width"]) == (2, 8)
    assert run_config("class_preset", LAYERED)[2] == "paper"


@pytest.mark.parametrize("run, message", [
    ("both", "a preset or a params_file, not both"),
    ("shadowed", "defined both in its class and in params.yaml"),
    ("typo", r"unknown key\(s\) parmas"),
])
def test_layer_errors(run, message):
    with pytest.raises(UserError, match=message):
        run_config(run, LAYERED)


# ------------------------------------------------------------------------------ the schema
BAD = [
    ("deepcluster", {"epochs": -5}, "deepcluster.epochs: -5 is not allowed (expected a whole number >= 1)"),
    ("deepcluster", {"epochs": "forty"}, "deepcluster.epochs: 'forty' is not allowed"),
    ("deepcluster", {"epochs": 2.5}, "deepcluster.epochs: 2.5 is not allowed"),
    ("deepcluster", {"epochs": True}, "deepcluster.epochs: true is not allowed"),
    ("deepcluster", {"lr": 0}, "deepcluster.lr: 0 is not allowed (expected a number > 0)"),
    ("deepcluster", {"lr": -0.1}, "deepcluster.lr: -0.1 is not allowed"),
    ("deepcluster", {"augment": 1}, "deepcluster.augment: 1 is not allowed (expected true or false)"),
    ("deepcluster", {"momentum": 1.0}, "deepcluster.momentum: 1 is not allowed (expected a number >= 0 and < 1)"),
    ("twostage", {"select_rate": 1.5}, "twostage.select_rate: 1.5 is not allowed (expected a number >= 0 and <= 1)"),
    ("twostage", {"stage1_lr_milestones": [2, -1]}, "twostage.stage1_lr_milestones"),
    ("twostage", {"stage1_lr_milestones": 3}, "expected a list of items"),
    ("swav", {"small_crop_scale": [0.1]}, "it has 1 items"),
    ("swav", {"small_crop_scale": [0.7, 0.3]}, "low <= high"),
    ("jule", {"negatives": "far"}, "jule.negatives: 'far' is not allowed (expected one of 'random', 'nearest')"),
    ("jule", {"eta": 0}, "jule.eta: 0 is not allowed (expected a number > 0 and <= 1)"),
    ("deepdpm", {"nu": 3.0}, "deepdpm.nu: 3 is not allowed"),
    ("deepdpm", {"init_k": None}, "deepdpm.init_k: null is not allowed"),
    ("dpgmm", {"weight_concentration": "a lot"}, "dpgmm.weight_concentration: 'a lot' is not allowed"),
    ("kmeans", {"pca_dim": -1}, "kmeans.pca_dim: -1 is not allowed (expected a whole number >= 0)"),
    ("kmeans", {"pca_dims": 3}, r"kmeans: unknown parameter\(s\) pca_dims \(pca_dims: did you mean pca_dim\?\); "
                                r"known: glyphs, n_init, n_iter, pca_dim"),
    ("lm_gradient", {"epochs": "forty"}, "lm_gradient.epochs: 'forty' is not allowed"),
    ("lm_gradient", {"epochs": 2.5}, "lm_gradient.epochs: 2.5 is not allowed"),
    ("lm_gradient", {"epochs": -5}, "lm_gradient.epochs: -5 is not allowed"),
    ("lm_gradient", {"s": 1}, "lm_gradient.s: 1 is not allowed"),
    ("lm", {"feature_dim": "forty"}, "lm.feature_dim: 'forty' is not allowed"),
    ("lm", {"context_beta": 0}, "lm.context_beta: 0 is not allowed"),
    ("lm", {"batch": 1.5}, "lm.batch: 1.5 is not allowed"),
    ("lm", {"skeleton": 1}, "lm.skeleton: 1 is not allowed"),
    ("lm", {"epochs": 40}, "lm: unknown parameter"),
]


@pytest.mark.parametrize("method, params, message", BAD)
def test_bad_values_are_one_user_error(method, params, message):
    with pytest.raises(UserError) as err:
        get_clusterer(method, **params)
    assert message in str(err.value) or re.search(message, str(err.value)), str(err.value)
    assert "\n" not in str(err.value)


def test_several_problems_in_one_error_and_conversions():
    with pytest.raises(UserError) as err:
        get_clusterer("deepcluster", epochs=0, lr="fast")
    assert "deepcluster.epochs" in str(err.value) and "deepcluster.lr" in str(err.value)
    p = get_clusterer("deepcluster", epochs=40.0, lr="1e-3", momentum=0).params
    assert p["epochs"] == 40 and isinstance(p["epochs"], int)          # integral float -> int
    assert p["lr"] == 0.001 and p["momentum"] == 0.0 and isinstance(p["momentum"], float)
    assert get_clusterer("deepdpm", nu=None).params["nu"] is None       # nullable


def test_unknown_preset_and_param_declarations():
    with pytest.raises(UserError, match="has no preset 'fast'"):
        get_clusterer("deepcluster", preset="fast")
    schema = {"s": Param(0, int, min=2, also=(0,), doc="types (0: from the data)")}
    assert resolve("m", schema, {"s": 0})["s"] == 0 and resolve("m", schema, {"s": 5})["s"] == 5
    with pytest.raises(UserError, match=r"m.s: 1 is not allowed \(expected a whole number >= 2, or 0\)"):
        resolve("m", schema, {"s": 1})
    with pytest.raises(TypeError):
        Param([1], list)                 # a list needs its item type

    from signclust.models.base import Clusterer

    with pytest.raises(TypeError, match="fails its own check"):
        type("Bad", (Clusterer,), {"name": "bad", "PARAMS": {"k": Param(0, int, min=1)},
                                   "fit": lambda self, c, x: None})
    with pytest.raises(TypeError, match="PRESETS"):
        type("Bad2", (Clusterer,), {"name": "bad2", "PARAMS": {"k": Param(1, int, min=1)},
                                    "PRESETS": {"paper": {"k": 0}}, "fit": lambda self, c, x: None})


def test_every_declared_param_has_a_doc():
    for method in all_methods():
        cls = get_class(method)
        if cls.PARAMS is not None:
            assert all(p.doc for p in cls.PARAMS.values()), method


def test_params_yaml_survives_dvc_exp_run_set_param(tmp_path):
    """`dvc exp run -S key=value` rewrites params.yaml through ruamel (dvc.utils.hydra.apply_overrides,
    the function it calls): every list comes back in block style and comments attached to a replaced
    list are dropped. params.yaml is kept in that form, so one value set changes its own line only."""
    import difflib
    import shutil

    from dvc.utils.hydra import apply_overrides
    path = tmp_path / "params.yaml"
    shutil.copy(REPO_ROOT / "params.yaml", path)
    before = path.read_text().splitlines()
    apply_overrides(path, ["distances.k=15"])                        # a value it already has
    assert path.read_text().splitlines() == before
    apply_overrides(path, ["distances.k=16", "+runs.lm.params.context_beta=0.2"])
    changed = [line for line in difflib.unified_diff(before, path.read_text().splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert [c.split("#")[0].rstrip() for c in changed] == [
        "-  k: 15", "+  k: 16", "-  lm: {method: lm}", "+  lm: {method: lm, params: {context_beta: 0.2}}"]
    assert sum(line.count("#") for line in before) == path.read_text().count("#")   # no comment lost
