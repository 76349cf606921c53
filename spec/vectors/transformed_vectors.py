"""Test vectors for transformed calls: a :class:`~shardlaw.spec.transforms.transformed.TransformedCall`
and the spec's verdict on it, as versioned JSON any implementation can replay.

A vector is one JSON object::

    {"format": "shardlaw-transformed-call", "version": 1, "jax": "0.10.2",
     "name": "BAT-4-reject-1", "rule": "BAT-4", "side": "reject",
     "call": {"transform": "vmap_jit", "arguments": {"arg_shardings": ..., ...}},
     "expect": {"accepted": false, "rule": "BAT-4", "error_type": "ValueError", ...},
     "origin": {"harness": "batching", "compared_with": "...", "case": {...}}}

Values are written as in the jit-call vectors (:mod:`~shardlaw.spec.vectors.jit_vectors`): meshes,
PartitionSpecs and shardings by the same writers and readers; containers tagged so that a
tuple and a list stay apart (``{"tuple": [...]}``, ``{"list": [...]}``, ``{"dict": {...}}``
for string keys, ``{"mapping": [[key, value], ...]}`` for other keys, ``{"frozenset": [...]}``,
``{"set": [...]}``); JSON's null, booleans, integers, finite floats and strings as
themselves; and the records of the transformation families (:data:`RECORDS`) as
``{"type": NAME, field: value, ...}`` with every field. ``docs/vectors.rst`` describes
the format. A vector that is not of this form is refused with VEC-1, naming the JSON path;
a call or verdict the format cannot carry back exactly is refused with VEC-2.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import math
import re
from typing import Any, Callable

from ..program.description import Const, Equation, Program, Value
from ..transforms.arguments import Placement
from ..transforms.autodiff import JitBody, JitEquation, Linearized, PartiallyEvaluated
from ..transforms.batching import BatchedJit
from ..jit.call import Arg
from ..transforms.constraint import Constraint
from ..core.hlo import HloSharding
from ..jit.layouts import AUTO_LAYOUT, Format, Layout
from ..core.rules import RULES, Rejection, reject
from ..core.shardings import AUTO, UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..transforms import shardmap
from ..transforms.shardmap_parameters import Returned, Shaped, ShardMapTypes
from ..transforms.transformed import TRANSFORMS, TransformedCall, TransformedVerdict
from ..core.values import UNCONSTRAINED, AbstractMesh, AxisType, Mesh, PartitionSpec
from .jit_vectors import _check_label
from .vector_checks import (
    JAX_VERSION, MAX_DEPTH, RefusedValue, UnreadableWhenWritten, _document, check_vector,
    check_writable, json_path,
)
from .vector_reader import CallPartsReader, _object
from .vector_writer import _hlo_json, _input_json, _mesh_json, _sharding_json

__all__ = [
    "TRANSFORMED_FORMAT", "TRANSFORMED_VERSION", "TRANSFORMED_VERSIONS", "RECORDS",
    "HarnessCase", "TransformedVector", "dump_transformed", "load_transformed",
    "transformed_differences", "transformed_rules_hit",
]

TRANSFORMED_FORMAT = "shardlaw-transformed-call"
TRANSFORMED_VERSION = 1
TRANSFORMED_VERSIONS = (1,)

# The records a transformed call's arguments and results are built from, by name.
RECORDS: dict[str, type] = {cls.__name__: cls for cls in (
    JitEquation, JitBody, Linearized, PartiallyEvaluated, BatchedJit, Constraint, Shaped,
    Returned, ShardMapTypes, Placement)}


def _kinds(cls: type) -> list[type]:
    """An equation class's concrete kinds, at any depth of subclassing."""
    return [k for sub in cls.__subclasses__() for k in (sub, *_kinds(sub))]


# ... and a whole program's (the program vectors, :mod:`~shardlaw.spec.vectors.program_vectors`):
# its values, constants and every kind of equation.
RECORDS.update({cls.__name__: cls for cls in (Program, Value, Const, *_kinds(Equation))})

# The classes of the harness cases an ``origin`` may hold (properties/<family>_harness.py).
HARNESS_CASES = ("ArgumentCase", "VmapCase", "Vmap", "GradCase", "OutputPlan",
                 "ConstraintCase", "SmapCall", "CollectiveCase", "ManualCase")
HARNESSES = ("arguments", "batching", "autodiff", "constraint", "shardmap")

# Shardings and their kin, written and read as the jit-call vectors write and read them.
_SHARDING_TYPES = ("NamedSharding", "SingleDeviceSharding", "GSPMDSharding", "PartitionSpec",
                   "UNSPECIFIED", "Format", "Layout", "Layout.AUTO")
_MARKERS = {"AUTO": AUTO, "UNCONSTRAINED": UNCONSTRAINED}
if getattr(shardmap, "INFER", None) is not None:  # shard_map's in_specs read off the types
    _MARKERS["INFER"] = shardmap.INFER
_CONTAINERS = ("tuple", "list", "dict", "mapping", "frozenset", "set")
_SIDE = re.compile(r"^[a-z][a-z-]{0,30}$")
_LONGEST_INTEGER = 100
_DEVICES = 8  # the devices a transformed call's concrete meshes may use


@dataclasses.dataclass(frozen=True)
class HarnessCase:
    """A case of a family's harness, as a vector's ``origin`` holds it: the harness
    (``"batching"``...), the case's class name and its fields (name, value pairs)."""

    harness: str
    name: str
    fields: tuple[tuple[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class TransformedVector:
    """A transformed call, its expected verdict (None: none given), its labels, and where
    it came from (``origin``: the harness case real JAX was compared on, or None)."""

    call: TransformedCall
    expect: TransformedVerdict | None = None
    name: str | None = None
    rule: str | None = None
    side: str | None = None
    description: str | None = None
    compared_with: str | None = None
    origin: HarnessCase | None = None
    jax: str = JAX_VERSION


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


def _container_json(value: Any, path: tuple, cases: bool) -> Any:
    kind = type(value).__name__
    _shallow(value, path)
    if kind in ("tuple", "list"):
        return {kind: [_value_json(v, path + (kind, i), cases) for i, v in enumerate(value)]}
    if kind in ("frozenset", "set"):
        return {kind: sorted((_value_json(v, path + (kind, 0), cases) for v in value),
                             key=_sort_key)}
    if all(type(k) is str for k in value):
        return {"dict": {k: _value_json(v, path + ("dict", k), cases) for k, v in value.items()}}
    return {"mapping": [[_value_json(k, path + ("mapping", i, 0), cases),
                         _value_json(v, path + ("mapping", i, 1), cases)]
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


def _record_json(value: Any, path: tuple, name: str, cases: bool) -> dict:
    _shallow(value, path)
    case = cases and name in HARNESS_CASES
    at = path + ("fields",) if case else path
    # A field left at its default is not written: a record that gains a field with a
    # default reads its old vectors as before (and they read back equal).
    fields = {f.name: _value_json(getattr(value, f.name), at + (f.name,), cases)
              for f in dataclasses.fields(value)
              if f.init and not _at_default(f, getattr(value, f.name))}
    if case:
        return {"type": "Case", "class": name, "fields": fields}
    return {"type": name, **fields}


def _value_json(value: Any, path: tuple, cases: bool = False) -> Any:
    """Any value of a transformed call's arguments or results, as JSON (VEC-2 when it
    cannot be written so that it reads back equal); with ``cases``, harness cases too."""
    if value is None or type(value) in (bool, int, float, str):
        return _scalar_json(value, path)
    if type(value) in (tuple, list, dict, frozenset, set):
        return _container_json(value, path, cases)
    for name, marker in _MARKERS.items():
        if value is marker:
            return {"type": name}
    if value is UNSPECIFIED or value is AUTO_LAYOUT or isinstance(
            value, (NamedSharding, SingleDeviceSharding, GSPMDSharding, PartitionSpec,
                    Format, Layout)):
        return _sharding_json(value, path)
    if isinstance(value, (Mesh, AbstractMesh)):
        return _mesh_json(value)
    if isinstance(value, HloSharding):
        return {"type": "HloSharding", "text": _hlo_json(value)}
    if isinstance(value, AxisType):
        return {"type": "AxisType", "value": value.value}
    if type(value) is Arg:
        return _input_json(value, path)
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and (RECORDS.get(name) is type(value) or (
            cases and name in HARNESS_CASES)):
        return _record_json(value, path, name, cases)
    check_writable(False, path, "a value", "null, a boolean, a number, a string, a tuple, "
                   "list, dict, set or frozenset, a mesh, a sharding or PartitionSpec, or a "
                   f"record ({', '.join(RECORDS)})", value)


def _verdict_json(verdict: TransformedVerdict) -> dict:
    trace = [_rule_written(r, ("expect", "trace", i)) for i, r in enumerate(verdict.trace)]
    if verdict.accepted:
        return {"accepted": True, "result": _value_json(verdict.result, ("expect", "result")),
                "trace": trace}
    return {"accepted": False, "rule": verdict.rule, "error_type": verdict.error_type,
            "jax_error": verdict.jax_error, "path": verdict.path, "message": verdict.message,
            "trace": trace}


def _rule_written(rule_id: Any, path: tuple) -> str:
    check_writable(isinstance(rule_id, str) and rule_id in RULES, path, "a rule of a trace",
                   "a registered rule ID", rule_id)
    return rule_id


def dump_transformed(transformed_call: TransformedCall,
                     verdict: TransformedVerdict | None = None, *,
                     name: str | None = None, rule: str | None = None,
                     side: str | None = None, description: str | None = None,
                     compared_with: str | None = None, origin: Any = None,
                     origin_harness: str | None = None) -> dict:
    """The vector of a transformed call (and its expected verdict) as a JSON-ready dict.

    ``origin``: the harness case (properties/<``origin_harness``>_harness.py) the call was
    derived from and compared with real JAX on (``compared_with`` says how).

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.transforms.transformed import explain_transformed
    >>> call = TransformedCall.of("batch_sharding", sharding=NamedSharding(
    ...     Mesh.iota((2, 4), ("x", "y")), P("y")), batch_axis=0, rank=1)
    >>> vector = dump_transformed(call, explain_transformed(call), rule="BAT-2", side="accept")
    >>> vector["expect"]["result"]["spec"]
    {'type': 'PartitionSpec', 'partitions': [None, 'y']}
    >>> load_transformed(vector).call == call
    True
    """
    call = transformed_call
    check_writable(isinstance(call, TransformedCall), ("call",), "the call",
                   "a TransformedCall", call)
    check_writable(verdict is None or isinstance(verdict, TransformedVerdict), ("expect",),
                   "the verdict", "a TransformedVerdict or None", verdict)
    out: dict[str, Any] = {"format": TRANSFORMED_FORMAT, "version": TRANSFORMED_VERSION,
                           "jax": JAX_VERSION}
    for key, value in (("name", name), ("rule", rule), ("side", side),
                       ("description", description)):
        if value is not None:
            out[key] = value
    out["call"] = {"transform": call.transform, "arguments": {
        key: _value_json(value, ("call", "arguments", key)) for key, value in call.arguments}}
    if verdict is not None:
        out["expect"] = _verdict_json(verdict)
    if origin is not None:
        out["origin"] = {"harness": origin_harness, "compared_with": compared_with,
                         "case": _value_json(origin, ("origin", "case"), cases=True)}
    try:  # what is written must read back, equal
        back = load_transformed(out)
    except Rejection as error:
        raise reject(UnreadableWhenWritten(str(error))) from None
    check_writable(back.call == call, ("call",), "the call", "made of values that read back "
                   "equal", call)
    check_writable(verdict is None or back.expect == verdict, ("expect",), "the verdict",
                   "made of values that read back equal", verdict)
    return out


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


class _ValueReader:
    """Reads the values of one transformed call (concrete meshes of at most 8 devices)."""

    def __init__(self) -> None:
        self.jit = CallPartsReader(_DEVICES, _DEVICES)
        self.cases = False  # harness cases are read in an origin only

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
        if kind == "Case" and self.cases:
            return self.case(value, path)
        if kind in _MARKERS:
            _object(value, path, f"the {kind} marker", ("type",))
            return _MARKERS[kind]
        if kind == "HloSharding":
            fields = _object(value, path, "an HloSharding", ("type", "text"))
            return self.jit.hlo(fields["text"], path + ("text",))
        if kind == "AxisType":
            fields = _object(value, path, "an AxisType", ("type", "value"))
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
        fields = _object(value, path, f"a {cls.__name__}", ("type", *required), optional)
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

    def case(self, value: Any, path: tuple) -> HarnessCase:
        fields = _object(value, path, "a harness case", ("type", "class", "fields"))
        check_vector(fields["type"] == "Case", path + ("type",), '"Case"', fields["type"])
        check_vector(fields["class"] in HARNESS_CASES, path + ("class",),
                     f"a harness case class ({', '.join(HARNESS_CASES)})", fields["class"])
        inner = fields["fields"]
        check_vector(isinstance(inner, dict), path + ("fields",), "a JSON object", inner)
        read = tuple((key, self.value(item, path + ("fields", key)))
                     for key, item in inner.items())
        return HarnessCase("", fields["class"], read)


def _rule_read(value: Any, path: tuple) -> str:
    check_vector(isinstance(value, str) and value in RULES, path, "a registered rule ID", value)
    return value


def _text(value: Any, path: tuple, what: str = "a string", optional: bool = True) -> Any:
    check_vector((optional and value is None) or isinstance(value, str), path,
                 what + (" or null" if optional else ""), value)
    return value


def _verdict(reader: _ValueReader, value: Any, path: tuple) -> TransformedVerdict:
    check_vector(isinstance(value, dict) and isinstance(value.get("accepted"), bool), path,
                 'a verdict: an object with "accepted": true or false', value)
    trace_list = value.get("trace", [])
    check_vector(isinstance(trace_list, list), path + ("trace",), "a list of rule IDs",
                 trace_list)
    trace = tuple(_rule_read(r, path + ("trace", i)) for i, r in enumerate(trace_list))
    if value["accepted"]:
        fields = _object(value, path, "an accepting verdict", ("accepted", "result"), ("trace",))
        return TransformedVerdict(True, trace, reader.value(fields["result"], path + ("result",)))
    fields = _object(value, path, "a rejecting verdict", ("accepted", "rule", "error_type"),
                     ("jax_error", "path", "message", "trace"))
    error_type = _text(fields["error_type"], path + ("error_type",), optional=False)
    known = getattr(builtins, error_type, None)
    check_vector(isinstance(known, type) and issubclass(known, BaseException),
                 path + ("error_type",), "the name of a built-in exception type", error_type)
    return TransformedVerdict(
        False, trace, None, _rule_read(fields["rule"], path + ("rule",)), error_type,
        *(_text(fields.get(k), path + (k,)) for k in ("jax_error", "message", "path")))


def _call(reader: _ValueReader, value: Any) -> TransformedCall:
    fields = _object(value, ("call",), "the call", ("transform", "arguments"))
    transform = fields["transform"]
    check_vector(isinstance(transform, str) and transform in TRANSFORMS, ("call", "transform"),
                 f"a transform ({', '.join(sorted(TRANSFORMS))})", transform)
    arguments = fields["arguments"]
    check_vector(isinstance(arguments, dict), ("call", "arguments"),
                 "an object of keyword arguments", arguments)
    pairs = tuple((k, reader.value(v, ("call", "arguments", k))) for k, v in arguments.items())
    return _construct(TransformedCall, ("call", "arguments"), f"the call of {transform}",
                      {"transform": transform, "arguments": pairs})


def _origin(reader: _ValueReader, value: Any) -> tuple[str | None, HarnessCase]:
    fields = _object(value, ("origin",), "the origin", ("harness", "case"), ("compared_with",))
    harness = fields["harness"]
    check_vector(harness in HARNESSES, ("origin", "harness"),
                 f"a harness ({', '.join(HARNESSES)})", harness)
    said = _text(fields.get("compared_with"), ("origin", "compared_with"))
    reader.cases = True
    case = reader.case(fields["case"], ("origin", "case"))
    return said, dataclasses.replace(case, harness=harness)


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
    fields = _object(vector, (), f"{what} (a JSON object)",
                     ("format", "version", "jax", *required),
                     ("name", "rule", "side", "description", *optional))
    check_vector(fields["format"] == format_name, ("format",),
                 f"the format name {json.dumps(format_name)}", fields["format"])
    check_vector(type(fields["version"]) is int and fields["version"] in versions,
                 ("version",), "a format version this shardlaw reads (" + ", ".join(
                     str(v) for v in versions) + ")", fields["version"])
    jax = _text(fields["jax"], ("jax",), "a JAX version such as \"0.10.2\"", optional=False)
    labels = {k: _text(fields.get(k), (k,)) for k in ("name", "description")}
    label = None if fields.get("rule") is None else _rule_read(fields["rule"], ("rule",))
    side = fields.get("side")
    check_vector(side is None or (isinstance(side, str) and _SIDE.match(side) is not None),
                 ("side",), 'null or a side: "accept", "reject" or an outcome\'s name', side)
    return fields, Header(jax, labels, label, side)


def load_transformed(transformed_json: Any) -> TransformedVector:
    """The :class:`TransformedVector` a JSON object (or its text) describes; VEC-1 when it
    is malformed.

    >>> v = load_transformed('''{"format": "shardlaw-transformed-call", "version": 1,
    ...   "jax": "0.10.2", "call": {"transform": "manual_axes_of", "arguments": {
    ...     "mesh": {"type": "AbstractMesh", "axis_sizes": [2, 4], "axis_names": ["x", "y"]},
    ...     "manual_axes": {"frozenset": ["x"]}}}}''')
    >>> v.call.keywords["manual_axes"]
    frozenset({'x'})
    """
    fields, header = read_header(_document(transformed_json), "a transformed-call vector",
                                 TRANSFORMED_FORMAT, TRANSFORMED_VERSIONS, ("call",),
                                 ("expect", "origin"))
    jax, labels, label, side = header.jax, header.labels, header.rule, header.side
    reader = _ValueReader()
    call = _call(reader, fields["call"])
    expect = None if fields.get("expect") is None else _verdict(reader, fields["expect"],
                                                                 ("expect",))
    said, origin = (None, None) if fields.get("origin") is None else _origin(
        reader, fields["origin"])
    if expect is not None and label is not None and side in ("accept", "reject"):
        _check_label(expect, label, side)
    return TransformedVector(call, expect, labels["name"], label, side, labels["description"],
                             said, origin, jax)


# =========================================================================== comparing

COMPARED_ACCEPTED = ("result", "trace")
COMPARED_REJECTED = ("rule", "error_type", "jax_error", "path", "trace")


def transformed_differences(expected: Any, actual: Any) -> list[str]:
    """How verdict ``actual`` differs from ``expected`` (empty: it conforms). An accepted
    verdict is compared on its result and trace; a rejected one on its rule, exception
    types, path and trace (the message explains; it is not compared).

    >>> ok = TransformedVerdict(False, ("BAT-0", "BAT-4"), rule="BAT-4",
    ...                         error_type="ValueError", jax_error="ValueError")
    >>> transformed_differences(ok, TransformedVerdict(True, ("BAT-0",), result=3))
    ['expected the call to be rejected by BAT-4, it was accepted']
    >>> transformed_differences(ok, dataclasses.replace(ok, path="in_axes[0]"))
    ['path: expected None, got in_axes[0]']
    """
    for which, verdict in (("expected", expected), ("actual", actual)):
        check_writable(isinstance(verdict, TransformedVerdict), (which,), f"the {which} verdict",
                       "a TransformedVerdict", verdict)
    if expected.accepted != actual.accepted:
        def said(v: TransformedVerdict) -> str:
            return "accepted" if v.accepted else f"rejected by {v.rule}"
        return [f"expected the call to be {said(expected)}, it was {said(actual)}"]
    names = COMPARED_ACCEPTED if expected.accepted else COMPARED_REJECTED
    return [f"{n}: expected {getattr(expected, n)!r}, got {getattr(actual, n)!r}"
            if n in ("result", "trace") else
            f"{n}: expected {getattr(expected, n)}, got {getattr(actual, n)}"
            for n in names if getattr(expected, n) != getattr(actual, n)]


def transformed_rules_hit(transformed_vector: TransformedVector) -> list[tuple[str, str]]:
    """(rule, side) for the vector's label and every rule its expected verdict shows
    firing (``"accept"``) or refusing (``"reject"``)."""
    vector = transformed_vector
    check_writable(isinstance(vector, TransformedVector), (), "the vector",
                   "a TransformedVector", vector)
    hits = [] if vector.rule is None else [(vector.rule, vector.side or "accept")]
    if vector.expect is not None:
        refusing = None if vector.expect.accepted else vector.expect.rule
        hits += [(r, "reject" if r == refusing else "accept") for r in vector.expect.trace]
        if refusing is not None:
            hits.append((refusing, "reject"))
    return list(dict.fromkeys(hits))
