"""The values of a program vector as JSON, and back: the writer and reader the program
vectors (:mod:`~shardlaw.spec.vectors.program_vectors`) share with one another.

Values are written as in the jit-call vectors (:mod:`~shardlaw.spec.vectors.jit_vectors`):
meshes, PartitionSpecs and shardings by the same writers and readers; containers tagged so
that a tuple and a list stay apart (``{"tuple": [...]}``, ``{"list": [...]}``,
``{"dict": {...}}`` for string keys, ``{"mapping": [[key, value], ...]}`` for other keys,
``{"frozenset": [...]}``, ``{"set": [...]}``); JSON's null, booleans, integers, finite
floats and strings as themselves; and a program's records (:data:`RECORDS`: ``Program``,
``Value``, ``Const`` and each kind of equation) as ``{"type": NAME, field: value, ...}``
with the fields not at their defaults. ``docs/vectors.rst`` describes the format. A value
that is not of this form is refused with VEC-1, naming the JSON path; one the format cannot
carry back exactly is refused with VEC-2.

(These were the transformed-call vectors' values until that format was retired, issue 31;
the program vectors' files are unchanged.)
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Callable

from ..program.description import Const, Equation, Program, Value
from ..jit.call import Arg
from ..core.hlo import HloSharding
from ..jit.layouts import AUTO_LAYOUT, Format, Layout
from ..core.rules import RULES, Rejection, reject
from ..core.shardings import AUTO, UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..transforms import shardmap
from ..core.values import UNCONSTRAINED, AbstractMesh, AxisType, Mesh, PartitionSpec
from .vector_checks import (
    MAX_DEPTH, RefusedValue, check_vector, check_writable, json_path,
)
from .vector_reader import CallPartsReader, as_object
from .vector_writer import hlo_json, input_json, mesh_json, sharding_json

__all__ = ["RECORDS", "Header", "read_header", "value_json", "ValueReader", "rule_read",
           "rule_written"]


def _kinds(cls: type) -> list[type]:
    """An equation class's concrete kinds, at any depth of subclassing."""
    return [k for sub in cls.__subclasses__() for k in (sub, *_kinds(sub))]


# The records a program vector's values are built from, by name: a whole program's values,
# constants and every kind of equation.
RECORDS: dict[str, type] = {cls.__name__: cls for cls in (
    Program, Value, Const, *_kinds(Equation))}

# Shardings and their kin, written and read as the jit-call vectors write and read them.
_SHARDING_TYPES = ("NamedSharding", "SingleDeviceSharding", "GSPMDSharding", "PartitionSpec",
                   "UNSPECIFIED", "Format", "Layout", "Layout.AUTO")
_MARKERS = {"AUTO": AUTO, "UNCONSTRAINED": UNCONSTRAINED}
if getattr(shardmap, "INFER", None) is not None:  # shard_map's in_specs read off the types
    _MARKERS["INFER"] = shardmap.INFER
_CONTAINERS = ("tuple", "list", "dict", "mapping", "frozenset", "set")
_SIDE = re.compile(r"^[a-z][a-z-]{0,30}$")
_LONGEST_INTEGER = 100
_DEVICES = 8  # the devices a vector's concrete meshes may use


# =========================================================================== writing

def _shallow(value: Any, path: tuple) -> None:
    check_writable(len(path) < MAX_DEPTH, path, "a value",
                   f"nested at most {MAX_DEPTH} deep (JSON arrays and objects)", value)


def _scalar_json(value: Any, path: tuple) -> Any:
    if type(value) is int:
        check_writable(-10 ** _LONGEST_INTEGER < value < 10 ** _LONGEST_INTEGER, path,
                       "an integer", f"at most {_LONGEST_INTEGER} digits long",
                       f"an integer of {value.bit_length()} bits")
    if type(value) is float:
        check_writable(math.isfinite(value), path, "a number", "finite", value)
    return value


def _sort_key(encoded: Any) -> str:
    return json.dumps(encoded, sort_keys=True)


def _container_json(value: Any, path: tuple) -> Any:
    kind = type(value).__name__
    _shallow(value, path)
    if kind in ("tuple", "list"):
        return {kind: [value_json(v, path + (kind, i)) for i, v in enumerate(value)]}
    if kind in ("frozenset", "set"):
        return {kind: sorted((value_json(v, path + (kind, 0)) for v in value),
                             key=_sort_key)}
    if all(type(k) is str for k in value):
        return {"dict": {k: value_json(v, path + ("dict", k)) for k, v in value.items()}}
    return {"mapping": [[value_json(k, path + ("mapping", i, 0)),
                         value_json(v, path + ("mapping", i, 1))]
                        for i, (k, v) in enumerate(value.items())]}


def _default(field: dataclasses.Field) -> Any:
    """A field's default value (``_NO_DEFAULT`` when it has none)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return _NO_DEFAULT


_NO_DEFAULT = object()


def _at_default(field: dataclasses.Field, value: Any) -> bool:
    default = _default(field)
    return default is not _NO_DEFAULT and type(value) is type(default) and value == default


def _record_json(value: Any, path: tuple, name: str) -> dict:
    _shallow(value, path)
    at = path
    # A field left at its default is not written: a record that gains a field with a
    # default reads its old vectors as before (and they read back equal).
    fields = {f.name: value_json(getattr(value, f.name), at + (f.name,))
              for f in dataclasses.fields(value)
              if f.init and not _at_default(f, getattr(value, f.name))}
    return {"type": name, **fields}


def value_json(value: Any, path: tuple) -> Any:
    """Any value of a program vector, as JSON (VEC-2 when it cannot be written so that it
    reads back equal)."""
    if value is None or type(value) in (bool, int, float, str):
        return _scalar_json(value, path)
    if type(value) in (tuple, list, dict, frozenset, set):
        return _container_json(value, path)
    for name, marker in _MARKERS.items():
        if value is marker:
            return {"type": name}
    if value is UNSPECIFIED or value is AUTO_LAYOUT or isinstance(
            value, (NamedSharding, SingleDeviceSharding, GSPMDSharding, PartitionSpec,
                    Format, Layout)):
        return sharding_json(value, path)
    if isinstance(value, (Mesh, AbstractMesh)):
        return mesh_json(value)
    if isinstance(value, HloSharding):
        return {"type": "HloSharding", "text": hlo_json(value)}
    if isinstance(value, AxisType):
        return {"type": "AxisType", "value": value.value}
    if type(value) is Arg:
        return input_json(value, path)
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and RECORDS.get(name) is type(value):
        return _record_json(value, path, name)
    check_writable(False, path, "a value", "null, a boolean, a number, a string, a tuple, "
                   "list, dict, set or frozenset, a mesh, a sharding or PartitionSpec, or a "
                   f"record ({', '.join(RECORDS)})", value)


def rule_written(rule_id: Any, path: tuple) -> str:
    check_writable(isinstance(rule_id, str) and rule_id in RULES, path, "a rule of a trace",
                   "a registered rule ID", rule_id)
    return rule_id


# =========================================================================== reading

def _hashable(value: Any, path: tuple) -> Any:
    try:
        hash(value)
    except TypeError:
        check_vector(False, path, "a hashable value (a key or a set's element)", value)
    return value


def _construct(cls: Callable[..., Any], at: tuple, what: str, fields: dict) -> Any:
    """Build a value from what was read; any refusal becomes VEC-1 at ``path``."""
    try:
        return cls(**fields)
    except Rejection as error:
        if error.rule == "VEC-1":
            raise
        raise reject(RefusedValue(what, str(error)), json_path(at)) from None
    except Exception as error:  # a record's own checks
        raise reject(RefusedValue(what, f"{type(error).__name__}: {error}"),
                     json_path(at)) from None


class ValueReader:
    """Reads the values of one vector (concrete meshes of at most 8 devices)."""

    def __init__(self) -> None:
        self.jit = CallPartsReader(_DEVICES, _DEVICES)

    def value(self, value: Any, path: tuple) -> Any:
        if value is None or type(value) in (bool, int, float, str):
            return value
        check_vector(isinstance(value, dict), path,
                     "a value: null, a boolean, a number, a string, a tagged container or "
                     "an object with a \"type\"", value)
        if "type" not in value:
            return self.container(value, path)
        kind = value["type"]
        if kind in _SHARDING_TYPES:
            return self.jit.sharding(value, path, _SHARDING_TYPES)
        if kind in ("Mesh", "AbstractMesh"):
            return self.jit.mesh(value, path)
        if kind == "Arg":
            return self.jit.input(value, path)
        if kind in _MARKERS:
            as_object(value, path, f"the {kind} marker", ("type",))
            return _MARKERS[kind]
        if kind == "HloSharding":
            fields = as_object(value, path, "an HloSharding", ("type", "text"))
            return self.jit.hlo(fields["text"], path + ("text",))
        if kind == "AxisType":
            fields = as_object(value, path, "an AxisType", ("type", "value"))
            names = [t.value for t in AxisType]
            check_vector(fields["value"] in names, path + ("value",),
                         f"an axis type ({', '.join(names)})", fields["value"])
            return AxisType(fields["value"])
        check_vector(isinstance(kind, str) and kind in RECORDS, path + ("type",),
                     "a value type (" + ", ".join(
                         [*_SHARDING_TYPES, "Mesh", "AbstractMesh", "Arg", *_MARKERS,
                          "HloSharding", "AxisType", *RECORDS]) + ")", kind)
        return self.record(value, path, RECORDS[kind])

    def record(self, value: dict, path: tuple, cls: type) -> Any:
        every = [f for f in dataclasses.fields(cls) if f.init]  # the rest are derived
        required = tuple(f.name for f in every if _default(f) is _NO_DEFAULT)
        optional = tuple(f.name for f in every if _default(f) is not _NO_DEFAULT)
        fields = as_object(value, path, f"a {cls.__name__}", ("type", *required), optional)
        read = {n: self.value(v, path + (n,)) for n, v in fields.items() if n != "type"}
        return _construct(cls, path, f"the {cls.__name__}", read)

    def container(self, value: dict, path: tuple) -> Any:
        check_vector(len(value) == 1 and next(iter(value)) in _CONTAINERS, path,
                     "a tagged container: one key of " + ", ".join(_CONTAINERS), value)
        (kind, inner), = value.items()
        at = path + (kind,)
        if kind == "dict":
            check_vector(isinstance(inner, dict), at, "a JSON object", inner)
            return {k: self.value(v, at + (k,)) for k, v in inner.items()}
        check_vector(isinstance(inner, list), at, "a JSON array", inner)
        if kind == "mapping":
            return dict(self.pair(item, at + (i,)) for i, item in enumerate(inner))
        items = [self.value(v, at + (i,)) for i, v in enumerate(inner)]
        if kind in ("frozenset", "set"):
            members = [_hashable(v, at + (i,)) for i, v in enumerate(items)]
            check_vector(len(set(members)) == len(members), at, "distinct members", inner)
            return frozenset(members) if kind == "frozenset" else set(members)
        return tuple(items) if kind == "tuple" else items

    def pair(self, item: Any, path: tuple) -> tuple:
        check_vector(isinstance(item, list) and len(item) == 2, path, "a [key, value] pair",
                     item)
        return _hashable(self.value(item[0], path + (0,)), path + (0,)), \
            self.value(item[1], path + (1,))


def rule_read(value: Any, path: tuple) -> str:
    check_vector(isinstance(value, str) and value in RULES, path, "a registered rule ID", value)
    return value


def _text(value: Any, path: tuple, what: str = "a string", optional: bool = True) -> Any:
    check_vector((optional and value is None) or isinstance(value, str), path,
                 what + (" or null" if optional else ""), value)
    return value


@dataclasses.dataclass(frozen=True)
class Header:
    """What every vector format after the jit call's begins with: the JAX version it was
    written against, its name and description, the rule it is labelled with and its side."""

    jax: str
    labels: dict
    rule: str | None
    side: str | None


def read_header(vector: Any, what: str, format_name: str, versions: tuple,
                required: tuple, optional: tuple) -> tuple[dict, Header]:
    """A vector's fields (its own ``required`` and ``optional`` ones besides the header's)
    and its :class:`Header`, each checked (VEC-1 at the field's path)."""
    fields = as_object(vector, (), f"{what} (a JSON object)",
                       ("format", "version", "jax", *required),
                       ("name", "rule", "side", "description", *optional))
    check_vector(fields["format"] == format_name, ("format",),
                 f"the format name {json.dumps(format_name)}", fields["format"])
    check_vector(type(fields["version"]) is int and fields["version"] in versions,
                 ("version",), "a format version this shardlaw reads (" + ", ".join(
                     str(v) for v in versions) + ")", fields["version"])
    jax = _text(fields["jax"], ("jax",), "a JAX version such as \"0.10.2\"", optional=False)
    labels = {k: _text(fields.get(k), (k,)) for k in ("name", "description")}
    label = None if fields.get("rule") is None else rule_read(fields["rule"], ("rule",))
    side = fields.get("side")
    check_vector(side is None or (isinstance(side, str) and _SIDE.match(side) is not None),
                 ("side",), 'null or a side: "accept", "reject" or an outcome\'s name', side)
    return fields, Header(jax, labels, label, side)
