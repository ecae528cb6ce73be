"""Method parameters: declared once in the method's class, resolved and checked in one place.

Declaring (in a clusterer class; see ``models/baselines/deepcluster.py`` for a full example)::

    from signclust.models.params import Param

    class DeepCluster(Baseline):
        PARAMS = {
            "epochs": Param(30, int, min=1, doc="clustering + training passes"),
            "lr": Param(0.05, float, gt=0, doc="SGD learning rate"),
            "augment": Param(True, bool, doc="augmented views during training"),
            "features": Param("pca", str, choices=("pca", "ae"), doc="what is clustered"),
            "nu": Param(None, float, gt=0, nullable=True, doc="NIW dof (null: D + 2)"),
            "s": Param(0, int, min=2, also=(0,), doc="types (0: from the data)"),
            "milestones": Param([3], list, item=int, min=0, doc="lr x0.1 at these epochs"),
        }
        PRESETS = {"paper": {"epochs": 500, "lr": 0.05}}   # named parameter sets, the paper's first

A ``Param`` is a default, a type (``int``, ``float``, ``bool``, ``str`` or ``list`` with an
``item`` type), what is allowed (``min``/``max`` inclusive, ``gt``/``lt`` exclusive,
``choices``, ``nullable`` for None, ``also`` for extra values outside the range, ``length``
for lists) and a one-line ``doc``. Range bounds apply to a list's items.

Resolving: ``Clusterer.__init__(**params)`` (models/base.py) calls :func:`resolve`, so every
entry point (the train CLI, ``dvc exp run -S``, the tune/ablation/paper-check stages and the
Python API) gets the same result: the class defaults overlaid by the given parameters (and,
with ``preset=NAME``, by that class preset first), every value checked. Errors are one
:class:`~signclust.errors.UserError` each, naming ``<method>.<key>``, the value and what is
allowed; an unknown key lists the known ones. Booleans are never accepted as numbers, a
string never as a number except a float written in exponent form that YAML left as a string
(``1e-3``); an integral float (``40.0``) is accepted where an int is expected. ``float``
parameters come back as floats.

``Clusterer.__init_subclass__`` checks each class's own declaration when it is defined (every
default and every preset must pass), and sets ``DEFAULTS`` (name -> default) for convenience.
"""
from __future__ import annotations

import difflib
import math
import numbers
from dataclasses import dataclass
from typing import Any

from signclust.errors import UserError

_TYPES = (int, float, bool, str, list)


@dataclass(frozen=True)
class Param:
    default: Any
    type: type
    doc: str = ""
    min: float | None = None        # inclusive lower bound
    max: float | None = None        # inclusive upper bound
    gt: float | None = None         # exclusive lower bound (learning rates > 0)
    lt: float | None = None         # exclusive upper bound
    choices: tuple | None = None    # the only allowed values
    nullable: bool = False          # None allowed (the doc says what it means)
    also: tuple = ()                # values allowed besides the range (e.g. 0 = "automatic")
    item: type | None = None        # element type of a list parameter
    length: int | None = None       # a list parameter's fixed length

    def __post_init__(self):
        if self.type not in _TYPES:
            raise TypeError(f"Param type must be one of {_TYPES}, not {self.type!r}")
        if (self.type is list) != (self.item is not None):
            raise TypeError("a list Param needs item=<type>; only list Params take one")

    # -- what is allowed, in words ------------------------------------------------------------
    def describe(self) -> str:
        kind = self.item if self.type is list else self.type
        if self.choices is not None:
            text = "one of " + ", ".join(_show(c) for c in self.choices)
        else:
            text = {int: "a whole number", float: "a number", bool: "true or false",
                    str: "a string"}[kind]
            bounds = []
            if self.min is not None:
                bounds.append(f">= {_show(self.min)}")
            if self.gt is not None:
                bounds.append(f"> {_show(self.gt)}")
            if self.max is not None:
                bounds.append(f"<= {_show(self.max)}")
            if self.lt is not None:
                bounds.append(f"< {_show(self.lt)}")
            if bounds:
                text += " " + " and ".join(bounds)
        if self.type is list:
            n = f"{self.length} " if self.length is not None else ""
            text = f"a list of {n}items, each {text}"
        extra = [_show(v) for v in self.also] + (["null"] if self.nullable else [])
        if extra:
            text += ", or " + " or ".join(extra)
        return text

    # -- checking one value -------------------------------------------------------------------
    def check(self, value: Any) -> Any:
        """The value, converted where that is lossless (int -> float, 40.0 -> 40); ValueError with
        a short reason when it is not allowed."""
        if value is None:
            if self.nullable:
                return None
            raise ValueError("null is not allowed")
        if self.also and any(_same(value, v) for v in self.also):
            return value
        if self.type is list:
            if not isinstance(value, (list, tuple)):
                raise ValueError("not a list")
            if self.length is not None and len(value) != self.length:
                raise ValueError(f"has {len(value)} items")
            return [self._scalar(v, self.item) for v in value]
        return self._scalar(value, self.type)

    def _scalar(self, value: Any, kind: type) -> Any:
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError("not true or false")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, (numbers.Integral, float)):
                raise ValueError("not a whole number")
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError("not a whole number")
            value = int(value)
        elif kind is float:
            if isinstance(value, str):
                # PyYAML reads 1e-3 (no dot) as a string; accept what float() reads, if finite
                try:
                    value = float(value)
                except ValueError:
                    raise ValueError("not a number") from None
            elif isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError("not a number")
            value = float(value)
            if not math.isfinite(value):
                raise ValueError("not a finite number")
        elif kind is str:
            if not isinstance(value, str):
                raise ValueError("not a string")
        if self.choices is not None:
            if not any(_same(value, c) for c in self.choices):
                raise ValueError("not allowed")
            return value
        if kind in (int, float):
            if ((self.min is not None and value < self.min) or (self.max is not None and value > self.max)
                    or (self.gt is not None and value <= self.gt) or (self.lt is not None and value >= self.lt)):
                raise ValueError("out of range")
        return value


def _same(a, b) -> bool:
    """Equality that does not confuse True with 1."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _show(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v)) if v != 0 else "0"
    return str(v)


def defaults(schema: dict[str, Param]) -> dict:
    import copy
    return {k: copy.deepcopy(p.default) for k, p in schema.items()}


def unknown_key_error(method: str, unknown: list[str], known) -> UserError:
    known = sorted(known)
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1)
        if close:
            hints.append(f"{key}: did you mean {close[0]}?")
    hint = f" ({'; '.join(hints)})" if hints else ""
    return UserError(f"{method}: unknown parameter(s) {', '.join(unknown)}{hint}; known: {', '.join(known)}")


def resolve(method: str, schema: dict[str, Param], params: dict, presets: dict | None = None,
            preset: str | None = None) -> dict:
    """Class defaults <- preset ``preset`` of ``presets`` <- ``params``, every value checked.

    Returns the complete parameter dict (every key of ``schema``). Raises one UserError for an
    unknown preset, unknown keys (listing the known ones) or bad values (each as
    ``<method>.<key>: <value> is not allowed (expected ...)``).
    """
    layer: dict = {}
    if preset is not None:
        presets = presets or {}
        if preset not in presets:
            raise UserError(f"{method} has no preset '{preset}' (known: {', '.join(sorted(presets)) or 'none'})")
        layer = dict(presets[preset])
    layer.update(params or {})
    unknown = sorted(set(layer) - set(schema))
    if unknown:
        raise unknown_key_error(method, unknown, schema)
    out = defaults(schema)
    problems = []
    for key, value in layer.items():
        try:
            out[key] = schema[key].check(value)
        except ValueError as why:
            problems.append(_problem(method, key, value, why, schema[key]))
    if problems:
        raise UserError("; ".join(problems))
    return out


def _problem(method: str, key: str, value, why: ValueError, param: Param) -> str:
    detail = f": it {why}" if str(why).startswith("has ") else ""
    return f"{method}.{key}: {_value(value)} is not allowed{detail} (expected {param.describe()})"


def _value(v) -> str:
    text = repr(v) if isinstance(v, str) else _show(v) if not isinstance(v, (list, tuple)) else str(list(v))
    return text if len(text) <= 60 else text[:57] + "..."


def check_declaration(cls) -> None:
    """A class's own PARAMS defaults and PRESETS must pass its schema (a developer error if not)."""
    name = getattr(cls, "name", cls.__name__)
    for key, p in cls.PARAMS.items():
        if not isinstance(p, Param):
            raise TypeError(f"{cls.__name__}.PARAMS['{key}'] is not a Param")
        try:
            p.check(p.default)
        except ValueError as why:
            raise TypeError(f"{cls.__name__}.PARAMS['{key}']: default {p.default!r} fails its own "
                            f"check ({why})") from None
    for preset, values in (cls.PRESETS or {}).items():
        try:
            resolve(name, cls.PARAMS, values)
        except UserError as err:
            raise TypeError(f"{cls.__name__}.PRESETS['{preset}']: {err}") from None


def infer_types(method: str, defaults_: dict, params: dict) -> dict:
    """Type check for a class that declares plain ``DEFAULTS`` instead of ``PARAMS`` (the LM
    clusterer until its rewrite adopts PARAMS): a value must have its default's type (int,
    float, bool, str); ranges are the class's own business. Returns params with integral floats
    given for int defaults made ints."""
    out = dict(params)
    problems = []
    for key, value in params.items():
        if key not in defaults_ or defaults_[key] is None or value is None:
            continue
        kind = type(defaults_[key])
        if kind not in (int, float, bool, str):
            continue
        try:
            out[key] = Param(defaults_[key], kind).check(value)
            if kind is float and isinstance(value, numbers.Real) and not isinstance(value, bool):
                out[key] = value            # keep the caller's value (int stays int): no behaviour change
        except ValueError as why:
            problems.append(_problem(method, key, value, why, Param(defaults_[key], kind)))
    if problems:
        raise UserError("; ".join(problems))
    return out


# --------------------------------------------------------------------------- config dataclasses
def config_field(default, type_: type, **kw):
    """A dataclass field that is also a :class:`Param`: a model with a config dataclass (like
    ``LMConfig`` in models/lm_clusterer.py) declares each parameter once, as a field, and gets
    its ``PARAMS`` from :func:`params_of`."""
    import dataclasses
    param = Param(default, type_, **kw)
    if isinstance(default, (list, dict)):
        import copy
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata={"param": param})
    return dataclasses.field(default=default, metadata={"param": param})


def params_of(config_cls) -> dict[str, Param]:
    """name -> Param of a dataclass whose fields were declared with :func:`config_field`."""
    import dataclasses
    out = {}
    for f in dataclasses.fields(config_cls):
        if "param" not in f.metadata:
            raise TypeError(f"{config_cls.__name__}.{f.name} is not declared with config_field()")
        out[f.name] = f.metadata["param"]
    return out
