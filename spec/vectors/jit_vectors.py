"""Test vectors: a jit call and the verdict on it, as versioned JSON any implementation can replay.

A vector is one JSON object::

    {"format": "shardlaw-jit-call", "version": 1, "jax": "0.10.2",
     "name": "DA-1-reject-01", "rule": "DA-1", "side": "reject",
     "call": {...every field of a Call...},
     "expect": {...the verdict: accepted or the rule that rejects, and the facts...}}

:func:`dump_vector` writes a :class:`~shardlaw.spec.jit.call.Call` (and, optionally, its
:class:`~shardlaw.spec.jit.call.Verdict`) as such an object and :func:`load_vector` reads one
back, exactly: ``load_vector(dump_vector(call)).call == call``. Pytrees keep their
containers apart (``{"tuple": [...]}``, ``{"list": [...]}``, ``{"dict": {...}}``, ``null``);
every other value is an object whose ``"type"`` names it. A vector that is not of this form
is refused with VEC-1, naming the JSON path of what is wrong and the value found there; a
call the format cannot carry back exactly is refused with VEC-2. ``docs/vectors.rst``
describes every field.

``"version"`` is the version of this format; ``"jax"`` the JAX version whose behaviour the
expected verdict describes (the spec describes :data:`JAX_VERSION`).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import json
import math
import re
from typing import Any, Callable, Iterator

from ..jit.cache import LEVELS, CacheRow, CallSite, check_sequence
from ..jit.call import Arg, Call, JitOptions, Out, Static, Verdict
from ..core.hlo import HloSharding, Tiled, hlo_text, parse_hlo
from ..core.iota import Iota
from shardlaw.rule_index import STAGES
from ..jit.layouts import AUTO_LAYOUT, Format, Layout
from ..core.pytree import leaves
from ..core.rules import RULES, Failure, Rejection, reject, rule
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import (
    UNCONSTRAINED, AbstractMesh, AxisType, Device, DeviceList, Mesh, PartitionSpec,
)

__all__ = [
    "FORMAT", "VERSION", "VERSIONS", "JAX_VERSION", "uses_layouts", "uses_version_2", "JIT_FAMILIES", "jit_rules", "Vector", "load_vector", "dump_vector", "vector_text",
    "verdict_json", "verdict_differences", "rules_hit", "json_path", "check_vector",
    "check_writable",
]

FORMAT = "shardlaw-jit-call"
VERSION = 2
VERSIONS = (1, 2)   # the versions this shardlaw reads; 2 added layouts (Arg.layout, Format,
                    # ...) and the compiler's choices for inputs jit left open (compiler_in)
JAX_VERSION = "0.10.2"

# A list of device ids longer than this is written symbolically when it is an iota.
_LONGEST_ID_LIST = 64

# The deepest a vector nests JSON arrays and objects (the stored vectors reach 13). Python's
# JSON parser and this reader recurse once per level, so deeper input is refused (VEC-1)
# before it is read, and a call whose vector would nest deeper is not written (VEC-2).
MAX_DEPTH = 100

# The most digits an integer of a vector's text may have (int64 needs 19; larger values are
# read, then refused with what they mean, up to this length).
_LONGEST_INTEGER = 100

SIDES = ("accept", "reject")

# The rule families of the jit call, in the order jit applies them: what vectors exercise.
JIT_FAMILIES = ("JIT", "TREE", "FIT", "RES", "LAY", "KEEP", "DA", "EXE", "OUT", "AOT")


# =========================================================================== failures

@dataclasses.dataclass(frozen=True)
class BadVector(Failure, rule="VEC-1"):
    template = "expected {expected}, got {shown}"
    expected: str
    shown: str


@dataclasses.dataclass(frozen=True)
class RefusedValue(Failure, rule="VEC-1"):
    template = "{what} is not valid: {reason}"
    what: str
    reason: str


@dataclasses.dataclass(frozen=True)
class NotWritable(Failure, rule="VEC-2", error=TypeError):
    template = "{what} cannot be written as a vector: it must be {expected}, got {shown}"
    what: str
    expected: str
    shown: str


@dataclasses.dataclass(frozen=True)
class UnreadableWhenWritten(Failure, rule="VEC-2"):
    template = "the call was written, but the vector does not read back: {reason}"
    reason: str


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def json_path(path: tuple) -> str:
    """``('call', 'args', 0, 'sharding')`` -> ``call.args[0].sharding``; ``()`` -> ``(the vector)``."""
    if not path:
        return "(the vector)"
    text = ""
    for key in path:
        if isinstance(key, int):
            text += f"[{key}]"
        elif isinstance(key, str) and _NAME.match(key):
            text += ("." if text else "") + key
        elif isinstance(key, str):
            text += f"[{json.dumps(key)}]"
        else:  # a key of an object given as Python values, not read from JSON text
            text += f"[{_show(key)}]"
    return text


def _show(value: Any) -> str:
    """The value as a message shows it: its JSON (else its repr), at most 160 characters."""
    if _too_deep(value) is not None:
        return f"a {type(value).__name__} that nests too deep (more than {MAX_DEPTH} levels)"
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        try:
            text = repr(value)
        except Exception as error:  # a value whose own repr fails (a 5,000-digit integer)
            text = f"<a {type(value).__name__} whose repr() raises {type(error).__name__}>"
    return text if len(text) <= 160 else text[:150] + " ... (" + str(len(text)) + " characters)"


def _too_deep(value: Any) -> tuple | None:
    """The path to the first array or object of ``value`` that lies deeper than
    :data:`MAX_DEPTH` (the outermost is at depth 1); None when there is none. Read without
    recursion, so that a value of any depth (or one that holds itself) is answered."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, (list, tuple)):
            children = enumerate(item)
        else:
            continue
        if len(path) >= MAX_DEPTH:
            return path
        stack.extend((child, path + (key,)) for key, child in children)
    return None


# A JSON string, to the end of the text if it is not closed (skipped: brackets inside it
# nest nothing), or a bracket.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')


def _text_depth_exceeded(text: str) -> int | None:
    """The character at which JSON ``text`` opens an array or object deeper than
    :data:`MAX_DEPTH`; None when it does not."""
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match[0]
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return match.start()
        elif token in "]}":
            depth -= 1
    return None


@rule("VEC-1", mirrors="(input checking of a test vector; JAX has no such format)")
def check_vector(condition: bool, path: tuple, expected: str, value: Any) -> None:
    """A test vector is a JSON object of this format and version whose every field has the documented type, names only devices the call has, and holds values the spec accepts.

    >>> load_vector('{"format": "shardlaw-jit-call", "version": 3, "jax": "0.10.2", "call": {}}')
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VEC-1] at version: expected a format version this shardlaw reads (1, 2), got 3
    >>> load_vector({"format": "shardlaw-jit-call", "version": 1, "jax": "0.10.2",
    ...              "call": {"args": [{"type": "Arg", "kind": "committed", "shape": [4],
    ...                                 "sharding": {"type": "SingleDeviceSharding",
    ...                                              "device": 11}}]}})
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VEC-1] at call.args[0].sharding.device: expected a device id below 8 (the call has 8 devices), got 11
    """
    if not condition:
        raise reject(BadVector(expected, _show(value)), json_path(path))


@rule("VEC-2", mirrors="(output checking of a test vector; JAX has no such format)")
def check_writable(condition: bool, path: tuple, what: str, expected: str, value: Any) -> None:
    """A call is written as a vector only when JSON carries every value back exactly: dict keys are strings, numbers are finite, and static values are built from None, booleans, numbers, strings, tuples, lists and dicts.

    >>> dump_vector(Call(args=({1: Arg.numpy((2,))},), outputs=Out((2,))))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [VEC-2] at call.args[0]: a dict key cannot be written as a vector: it must be a string, got 1
    """
    if not condition:
        raise reject(NotWritable(what, expected, _show(value)), json_path(path))


@contextlib.contextmanager
def _building(path: tuple, what: str) -> Iterator[None]:
    """Build a spec value from what was read; the spec's refusal becomes VEC-1 at ``path``."""
    try:
        yield
    except Rejection as error:
        if error.rule == "VEC-1":  # already located where it was read
            raise
        raise reject(RefusedValue(what, str(error)), json_path(path)) from None


# =========================================================================== the vector

@dataclasses.dataclass(frozen=True)
class Vector:
    """A call, its expected verdict (None: none given) and the vector's labels.

    ``rule`` and ``side`` say which rule the vector exercises and on which side
    (``"accept"``: the rule fires and lets the call through; ``"reject"``: it refuses the
    call); ``jax`` is the JAX version the expected verdict describes.
    """

    call: Call
    expect: Verdict | None = None
    name: str | None = None
    rule: str | None = None
    side: str | None = None
    description: str | None = None
    jax: str = JAX_VERSION


# =========================================================================== writing

def _device_json(device: Device) -> Any:
    if device.platform == "cpu" and device.process_index == 0:
        return device.id
    return {"id": device.id, "platform": device.platform, "process_index": device.process_index}


def _device_list_json(devices: DeviceList) -> Any:
    iota = devices.iota
    if iota is not None and len(devices) > _LONGEST_ID_LIST:
        return {"iota": list(iota.reshape_dims), "perm": list(iota.perm),
                "platform": devices.platform, "devices_per_process": devices.devices_per_process}
    return [_device_json(d) for d in devices]


def _axes_json(mesh: Mesh | AbstractMesh) -> dict:
    return {"axis_sizes": list(mesh.axis_sizes), "axis_names": list(mesh.axis_names),
            "axis_types": [t.value for t in mesh.axis_types]}


def _mesh_json(mesh: Mesh | AbstractMesh) -> dict:
    if isinstance(mesh, AbstractMesh):
        return {"type": "AbstractMesh", **_axes_json(mesh)}
    return {"type": "Mesh", **_axes_json(mesh), "devices": _device_list_json(mesh.devices)}


def _entry_json(entry: Any) -> Any:
    if entry is UNCONSTRAINED:
        return {"type": "UNCONSTRAINED"}
    return list(entry) if isinstance(entry, tuple) else entry


def _spec_json(spec: PartitionSpec) -> dict:
    out: dict[str, Any] = {"type": "PartitionSpec",
                           "partitions": [_entry_json(e) for e in spec.partitions]}
    if spec.unreduced:
        out["unreduced"] = sorted(spec.unreduced)
    if spec.reduced:
        out["reduced"] = sorted(spec.reduced)
    return out


def _hlo_json(hlo: HloSharding) -> str:
    # hlo_text writes a one-device explicit tile assignment as a list ("{devices=[1]0}"),
    # which XLA's parser and parse_hlo refuse; "<=[1]" reads back as the same value.
    if isinstance(hlo, Tiled) and not isinstance(hlo.assignment, Iota) \
            and len(hlo.assignment) == 1:
        return hlo_text(Tiled(hlo.dims, Iota((1,)), hlo.subgroups))
    return hlo_text(hlo)


def _layout_json(value: Any) -> Any:
    """A layout: ``{"type": "Layout", "major_to_minor": [...]}`` or ``{"type": "Layout.AUTO"}``."""
    if value is AUTO_LAYOUT:
        return {"type": "Layout.AUTO"}
    return {"type": "Layout", "major_to_minor": list(value.major_to_minor)}


def _sharding_json(value: Any, path: tuple) -> Any:
    """A leaf of a shardings tree: a sharding, a PartitionSpec, a Format, a layout,
    UNSPECIFIED or a plain value."""
    if value is None:
        return None
    if value is UNSPECIFIED:
        return {"type": "UNSPECIFIED"}
    if value is AUTO_LAYOUT or isinstance(value, Layout):  # bare: JIT-2 refuses it
        return _layout_json(value)
    if isinstance(value, Format):
        return {"type": "Format",
                "layout": None if value.layout is None else _layout_json(value.layout),
                "sharding": _sharding_json(value.sharding, path + ("sharding",))}
    if isinstance(value, PartitionSpec):
        return _spec_json(value)
    if isinstance(value, NamedSharding):
        return {"type": "NamedSharding", "mesh": _mesh_json(value.mesh),
                "spec": _spec_json(value.spec), "memory_kind": value.memory_kind}
    if isinstance(value, SingleDeviceSharding):
        return {"type": "SingleDeviceSharding", "device": _device_json(value.device),
                "memory_kind": value.memory_kind}
    if isinstance(value, GSPMDSharding):
        return {"type": "GSPMDSharding", "devices": _device_list_json(value.devices),
                "hlo": _hlo_json(value.hlo), "memory_kind": value.memory_kind}
    if isinstance(value, Arg):  # an array passed where a sharding belongs (JIT-2 refuses it)
        return _input_json(value, path)
    check_writable(type(value) in (str, int, bool) or (
        type(value) is float and math.isfinite(value)), path, "a leaf of a shardings tree",
        "a sharding, a PartitionSpec, a Format, a Layout, None, UNSPECIFIED, an Arg or a "
        "string, integer, boolean or finite float", value)
    return {"type": "python", "value": value}


def _static_json(value: Any, path: tuple) -> Any:
    """A static value: JSON scalars as themselves, containers tagged like pytrees."""
    if value is None or type(value) in (str, int, bool):
        return value
    if type(value) is float:
        check_writable(math.isfinite(value), path, "a static value", "a finite number", value)
        return value
    if type(value) in (tuple, list, dict):
        _check_shallow(value, path)
    if type(value) in (tuple, list):
        return {type(value).__name__: [_static_json(v, path + (i,)) for i, v in enumerate(value)]}
    if type(value) is dict:
        return {"dict": {_key(k, path): _static_json(v, path + (k,)) for k, v in value.items()}}
    check_writable(False, path, "a static value", "None, a boolean, a number, a string, or a "
                   "tuple, list or dict of these", value)


def _check_shallow(container: Any, path: tuple) -> None:
    """A container is written only where the vector it is written in still reads back: its
    path, each step of which is a level of JSON, stays within :data:`MAX_DEPTH` (VEC-2)."""
    check_writable(len(path) < MAX_DEPTH, path, "a value",
                   f"nested at most {MAX_DEPTH} deep (JSON arrays and objects)", container)


def _key(key: Any, path: tuple) -> str:
    check_writable(isinstance(key, str), path, "a dict key", "a string", key)
    return key


def _tree_json(tree: Any, path: tuple, leaf: Callable[[Any, tuple], Any]) -> Any:
    if tree is None:
        return None
    if type(tree) in (tuple, list, dict):
        _check_shallow(tree, path)
    if type(tree) in (tuple, list):
        kind = type(tree).__name__
        return {kind: [_tree_json(v, path + (kind, i), leaf) for i, v in enumerate(tree)]}
    if type(tree) is dict:
        return {"dict": {_key(k, path): _tree_json(v, path + ("dict", k), leaf)
                         for k, v in tree.items()}}
    return leaf(tree, path)


def _input_json(value: Any, path: tuple) -> Any:
    if isinstance(value, Static):
        return {"type": "Static", "value": _static_json(value.value, path + ("value",))}
    check_writable(isinstance(value, Arg), path, "an argument", "an Arg or a Static", value)
    out = {"type": "Arg", "kind": value.kind, "shape": list(value.shape), "dtype": value.dtype,
           "sharding": _sharding_json(value.sharding, path + ("sharding",))}
    if value.layout is not None:  # absent: the default layout
        out["layout"] = _layout_json(value.layout)
    return out


def _out_json(value: Any, path: tuple) -> Any:
    check_writable(isinstance(value, Out), path, "a result", "an Out", value)
    return {"type": "Out", "shape": list(value.shape), "dtype": value.dtype,
            "source": value.source, "mesh": None if value.mesh is None else _mesh_json(value.mesh)}


def _shardings_tree_json(tree: Any, path: tuple) -> Any:
    if tree is UNSPECIFIED:
        return {"type": "UNSPECIFIED"}
    return _tree_json(tree, path, _sharding_json)


def _options_json(options: JitOptions, path: tuple) -> dict:
    return {
        "in_shardings": _shardings_tree_json(options.in_shardings, path + ("in_shardings",)),
        "out_shardings": _shardings_tree_json(options.out_shardings, path + ("out_shardings",)),
        "static_argnums": list(options.static_argnums),
        "static_argnames": list(options.static_argnames),
        "donate_argnums": list(options.donate_argnums),
        "donate_argnames": list(options.donate_argnames),
        "keep_unused": options.keep_unused, "device": options.device, "backend": options.backend,
    }


def _inputs_json(args: tuple | None, kwargs: dict | None, path: tuple) -> tuple[Any, Any]:
    if args is None:
        return None, None
    return ([_tree_json(a, path + ("args", i), _input_json) for i, a in enumerate(args)],
            {_key(k, path + ("kwargs",)): _tree_json(v, path + ("kwargs", k), _input_json)
             for k, v in (kwargs or {}).items()})


def _call_json(call: Call) -> dict:
    path = ("call",)
    args, kwargs = _inputs_json(call.args, call.kwargs, path)
    aot_args, aot_kwargs = _inputs_json(call.aot_args, call.aot_kwargs, path + ("aot",))
    return {
        "args": args, "kwargs": kwargs,
        "outputs": _tree_json(call.outputs, path + ("outputs",), _out_json),
        "options": _options_json(call.options, path + ("options",)),
        "context_mesh": None if call.context_mesh is None else _mesh_json(call.context_mesh),
        "uses": None if call.uses is None else list(call.uses),
        "compiler": None if call.compiler is None else [
            None if c is None else _hlo_json(c) for c in call.compiler],
        "compiler_memory": None if call.compiler_memory is None else list(call.compiler_memory),
        "devices": call.devices, "default_device": call.default_device,
        "process_count": call.process_count,
        "aot_args": aot_args, "aot_kwargs": aot_kwargs,
        # Written only when given, so that vectors without them read as before.
        **{name: [None if c is None else _layout_json(c) for c in getattr(call, name)]
           for name in ("compiler_layouts", "compiler_in_layouts")
           if getattr(call, name) is not None},
        **({} if call.compiler_in is None else {"compiler_in": [
            None if c is None else _hlo_json(c) for c in call.compiler_in]}),
    }


def verdict_json(verdict: Verdict) -> dict:
    """A verdict as the ``"expect"`` object of a vector."""
    trace = list(verdict.trace)
    if not verdict.accepted:
        return {"accepted": False, "rule": verdict.rule, "error_type": verdict.error_type,
                "jax_error": verdict.jax_error, "stage": verdict.stage, "path": verdict.path,
                "message": verdict.message, "trace": trace}
    path = ("expect",)

    def laid(entry: dict, layouts: tuple, i: int) -> dict:
        # A "layout" is written where it is not the default one (absent: the default).
        if i < len(layouts) and layouts[i] is not None:
            entry["layout"] = _layout_json(layouts[i])
        return entry

    return {
        "accepted": True,
        "device_assignment": None if verdict.device_assignment is None
        else list(verdict.device_assignment),
        "num_devices": verdict.num_devices,
        "inputs": [laid({"path": p, "sharding": _sharding_json(s, path + ("inputs", i, "sharding"))},
                        verdict.in_layouts, i)
                   for i, (p, s) in enumerate(zip(verdict.in_paths, verdict.in_shardings))],
        "outputs": [laid({"path": p, "sharding": _sharding_json(s, path + ("outputs", i, "sharding")),
                          "committed": c}, verdict.out_layouts, i) for i, (p, s, c) in enumerate(
                         zip(verdict.out_paths, verdict.out_shardings, verdict.out_committed))],
        "kept_inputs": list(verdict.kept_inputs), "transfers": list(verdict.transfers),
        "trace": trace,
    }


def dump_vector(call: Call, verdict: Verdict | None = None, *, name: str | None = None,
                rule: str | None = None, side: str | None = None,
                description: str | None = None, jax: str = JAX_VERSION) -> dict:
    """The vector for ``call`` (and its expected ``verdict``) as a JSON-ready dict.

    >>> v = dump_vector(Call(args=(Arg.numpy((4,)),), outputs=Out((4,))))
    >>> v["call"]["args"]
    [{'type': 'Arg', 'kind': 'numpy', 'shape': [4], 'dtype': 'float32', 'sharding': None}]
    >>> load_vector(v).call == Call(args=(Arg.numpy((4,)),), outputs=Out((4,)))
    True
    """
    check_writable(isinstance(call, Call), (), "the call", "a Call", call)
    check_writable(verdict is None or isinstance(verdict, Verdict), ("expect",), "the verdict",
                   "a Verdict or None", verdict)
    # A vector without what version 2 added stays a version-1 vector, readable by any shardlaw.
    version = VERSION if uses_version_2(call, verdict) else 1
    out: dict[str, Any] = {"format": FORMAT, "version": version, "jax": jax}
    for key, value in (("name", name), ("rule", rule), ("side", side),
                       ("description", description)):
        if value is not None:
            out[key] = value
    out["call"] = _call_json(call)
    if verdict is not None:
        out["expect"] = verdict_json(verdict)
    # What is written must read back: labels and device ids are checked only on the way in.
    try:
        load_vector(out)
    except Rejection as error:
        raise reject(UnreadableWhenWritten(str(error))) from None
    return out


def uses_layouts(call: Call, verdict: Verdict | None = None) -> bool:
    """Whether a call or its verdict says anything of layouts (a version-2 vector)."""
    arrays = [leaf for tree in (call.args, call.kwargs, call.aot_args, call.aot_kwargs)
              for leaf in leaves(tree)]
    shardings = [leaf for tree in (call.options.in_shardings, call.options.out_shardings)
                 for leaf in leaves(tree)]
    return (any(getattr(a, "layout", None) is not None for a in arrays)
            or any(isinstance(leaf, (Format, Layout)) or leaf is AUTO_LAYOUT
                   for leaf in shardings)
            or call.compiler_layouts is not None or call.compiler_in_layouts is not None
            or (verdict is not None and any(
                x is not None for x in (*verdict.in_layouts, *verdict.out_layouts))))


def uses_version_2(call: Call, verdict: Verdict | None = None) -> bool:
    """Whether a call or its verdict needs what version 2 of the format added: layouts, or
    the compiler's choices for inputs jit left open (``compiler_in``)."""
    return uses_layouts(call, verdict) or call.compiler_in is not None


def vector_text(vector: dict, width: int = 100) -> str:
    """A vector as JSON text: one field per line; short values and lists of numbers or
    strings on one line."""
    def write(value: Any, indent: int) -> str:
        flat = json.dumps(value, allow_nan=False)
        scalars = isinstance(value, list) and not any(isinstance(v, (dict, list)) for v in value)
        if indent + len(flat) <= width or scalars or not isinstance(value, (dict, list)) \
                or not value:
            return flat
        pad = " " * (indent + 2)
        if isinstance(value, dict):
            items = [f"{pad}{json.dumps(k)}: {write(v, indent + 2)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
        items = [pad + write(v, indent + 2) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"

    return write(vector, 0) + "\n"


# =========================================================================== reading

def _object(value: Any, path: tuple, what: str, required: tuple = (),
            optional: tuple = ()) -> dict:
    check_vector(isinstance(value, dict), path, what, value)
    known = (*required, *optional)
    for key in value:
        check_vector(key in known, path + (key,), f"a key of {what} ({', '.join(known)})",
                     key)
    for key in required:
        check_vector(key in value, path, f"{what} with the key {json.dumps(key)}",
                     value)
    return value


def _int(value: Any, path: tuple, what: str = "an integer", least: int | None = None) -> int:
    check_vector(isinstance(value, int) and not isinstance(value, bool)
                 and (least is None or value >= least), path, what, value)
    return value


def _str(value: Any, path: tuple, what: str = "a string") -> str:
    check_vector(isinstance(value, str), path, what, value)
    return value


def _bool(value: Any, path: tuple, what: str = "true or false") -> bool:
    check_vector(isinstance(value, bool), path, what, value)
    return value


def _list(value: Any, path: tuple, what: str) -> list:
    check_vector(isinstance(value, list), path, what, value)
    return value


def _each(value: Any, path: tuple, what: str, read: Callable[[Any, tuple], Any]) -> tuple:
    return tuple(read(v, path + (i,)) for i, v in enumerate(_list(value, path, what)))


def _maybe(read: Callable[[Any, tuple], Any]) -> Callable[[Any, tuple], Any]:
    return lambda value, path: None if value is None else read(value, path)


def _ints(value: Any, path: tuple, what: str, least: int | None = None) -> tuple[int, ...]:
    return _each(value, path, what, lambda v, p: _int(v, p, "an integer" if least is None
                                                       else f"an integer of at least {least}",
                                                       least))


def _strs(value: Any, path: tuple, what: str) -> tuple[str, ...]:
    return _each(value, path, what, _str)


def _static(value: Any, path: tuple) -> Any:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    container = _container(value, path, "a static value: null, a boolean, a number, a string, "
                                         "or a {\"tuple\": [...]}, {\"list\": [...]} or "
                                         "{\"dict\": {...}} of these")
    kind, inner = container
    if kind == "dict":
        return {k: _static(v, path + ("dict", k)) for k, v in inner.items()}
    items = [_static(v, path + (kind, i)) for i, v in enumerate(inner)]
    return tuple(items) if kind == "tuple" else items


def _container(value: Any, path: tuple, what: str) -> tuple[str, Any]:
    check_vector(isinstance(value, dict) and len(value) == 1
                 and next(iter(value)) in ("tuple", "list", "dict"), path, what, value)
    (kind, inner), = value.items()
    if kind == "dict":
        check_vector(isinstance(inner, dict), path + ("dict",), "a JSON object", inner)
    else:
        check_vector(isinstance(inner, list), path + (kind,), "a JSON array", inner)
    return kind, inner


class _Reader:
    """Reads the parts of one call, knowing how many devices the call has."""

    def __init__(self, device_limit: int, device_count: int) -> None:
        self.limit = device_limit
        self.count = device_count

    # ------------------------------------------------------------------ devices
    def device_id(self, value: Any, path: tuple) -> int:
        _int(value, path, "a device id (a non-negative integer)", 0)
        check_vector(value < self.limit, path, f"a device id below {self.limit} (the call has "
                     f"{self._devices_said()})", value)
        return value

    def _devices_said(self) -> str:
        if self.limit == self.count:
            return f"{self.count} devices"
        return f"{self.limit} devices: {self.limit // self.count} processes of {self.count}"

    def device(self, value: Any, path: tuple) -> Device:
        if not isinstance(value, dict):
            return Device(self.device_id(value, path))
        fields = _object(value, path, "a device", ("id",), ("platform", "process_index"))
        ident = self.device_id(fields["id"], path + ("id",))
        platform = _str(fields.get("platform", "cpu"), path + ("platform",))
        process = _int(fields.get("process_index", 0), path + ("process_index",),
                       "a process index (a non-negative integer)", 0)
        with _building(path, "the device"):
            return Device(ident, platform, process)

    def device_list(self, value: Any, path: tuple) -> DeviceList:
        if isinstance(value, dict):
            return self._iota_list(value, path)
        devices = _each(value, path, "a list of devices, or {\"iota\": [...], ...}", self.device)
        with _building(path, "the device list"):
            if all(isinstance(v, int) for v in value):  # plain ids: symbolic when they can be
                return DeviceList.of_ids([d.id for d in devices])
            return DeviceList(devices)

    def _iota_list(self, value: Any, path: tuple) -> DeviceList:
        fields = _object(value, path, "a symbolic device list", ("iota",),
                         ("perm", "platform", "devices_per_process"))
        dims = _ints(fields["iota"], path + ("iota",), "the iota's reshape dims", 0)
        perm = fields.get("perm")
        perm = None if perm is None else _ints(perm, path + ("perm",), "a permutation", 0)
        platform = _str(fields.get("platform", "cpu"), path + ("platform",))
        per = _maybe(lambda v, p: _int(v, p, "a positive integer", 1))(
            fields.get("devices_per_process"), path + ("devices_per_process",))
        with _building(path + ("iota",), "the iota"):
            iota = Iota(dims, perm)
        check_vector(len(iota) <= self.limit, path + ("iota",), f"at most {self.limit} devices "
                     f"(the call has {self._devices_said()})", list(dims))
        with _building(path, "the device list"):
            return DeviceList(iota, platform=platform, devices_per_process=per)

    # ------------------------------------------------------------------ meshes and specs
    def mesh(self, value: Any, path: tuple, abstract_only: bool = False) -> Mesh | AbstractMesh:
        kinds = ("AbstractMesh",) if abstract_only else ("Mesh", "AbstractMesh")
        what = "an abstract mesh" if abstract_only else "a mesh"
        check_vector(isinstance(value, dict) and value.get("type") in kinds, path,
                     f"{what}: an object with \"type\" {' or '.join(map(json.dumps, kinds))}",
                     value)
        concrete = value["type"] == "Mesh"
        fields = _object(value, path, what, ("type", "axis_sizes", "axis_names")
                         + (("devices",) if concrete else ()), ("axis_types",))
        sizes = _ints(fields["axis_sizes"], path + ("axis_sizes",), "a list of axis sizes", 1)
        names = _strs(fields["axis_names"], path + ("axis_names",), "a list of axis names")
        types = fields.get("axis_types")
        if types is not None:
            types = _each(types, path + ("axis_types",), "a list of axis types", self._axis_type)
        with _building(path, f"the {value['type']}"):
            if concrete:
                devices = self.device_list(fields["devices"], path + ("devices",))
                return Mesh(sizes, names, devices, types)
            return AbstractMesh(sizes, names, types)

    @staticmethod
    def _axis_type(value: Any, path: tuple) -> AxisType:
        names = [t.value for t in AxisType]
        check_vector(value in names, path, f"an axis type ({', '.join(names)})", value)
        return AxisType(value)

    def spec(self, value: Any, path: tuple) -> PartitionSpec:
        fields = _object(value, path, "a PartitionSpec", ("type", "partitions"),
                         ("unreduced", "reduced"))
        check_vector(fields["type"] == "PartitionSpec", path + ("type",), '"PartitionSpec"',
                     fields["type"])
        entries = _each(fields["partitions"], path + ("partitions",), "a list of entries",
                        self._entry)
        unreduced = _strs(fields.get("unreduced", []), path + ("unreduced",), "a list of axis names")
        reduced = _strs(fields.get("reduced", []), path + ("reduced",), "a list of axis names")
        with _building(path, "the PartitionSpec"):
            return PartitionSpec(*entries, unreduced=unreduced, reduced=reduced)

    @staticmethod
    def _entry(value: Any, path: tuple) -> Any:
        if value == {"type": "UNCONSTRAINED"}:
            return UNCONSTRAINED
        if value is None or isinstance(value, str):
            return value
        return _strs(value, path, 'a PartitionSpec entry: null, an axis name, a list of axis '
                                  'names or {"type": "UNCONSTRAINED"}')

    # ------------------------------------------------------------------ shardings
    SHARDINGS = ("NamedSharding", "SingleDeviceSharding", "GSPMDSharding")
    LAYOUTS = ("Layout", "Layout.AUTO")
    LEAVES = SHARDINGS + ("PartitionSpec", "UNSPECIFIED", "Arg", "python", "Format") + LAYOUTS

    def layout(self, value: Any, path: tuple, allowed: tuple = LAYOUTS) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        check_vector(kind in allowed, path, "a layout: an object with \"type\" "
                     + " or ".join(map(json.dumps, allowed)), value)
        if kind == "Layout.AUTO":
            _object(value, path, "the Layout.AUTO marker", ("type",))
            return AUTO_LAYOUT
        fields = _object(value, path, "a Layout", ("type", "major_to_minor"))
        order = _ints(fields["major_to_minor"], path + ("major_to_minor",),
                      "a list of dimensions", 0)
        with _building(path, "the Layout"):
            return Layout(order)

    def sharding(self, value: Any, path: tuple, allowed: tuple = LEAVES) -> Any:
        if value is None:
            return None
        kind = value.get("type") if isinstance(value, dict) else None
        check_vector(kind in allowed, path, "null or an object with \"type\" one of "
                     + ", ".join(allowed), value)
        if kind == "PartitionSpec":
            return self.spec(value, path)
        if kind == "UNSPECIFIED":
            _object(value, path, "the UNSPECIFIED marker", ("type",))
            return UNSPECIFIED
        if kind in self.LAYOUTS:
            return self.layout(value, path)
        if kind == "Format":
            fields = _object(value, path, "a Format", ("type",), ("layout", "sharding"))
            layout = _maybe(self.layout)(fields.get("layout"), path + ("layout",))
            sharding = self.sharding(fields.get("sharding"), path + ("sharding",),
                                     self.SHARDINGS)
            with _building(path, "the Format"):
                return Format(layout, sharding)
        if kind == "Arg":
            return self.input(value, path)
        if kind == "python":
            fields = _object(value, path, "a plain Python leaf", ("type", "value"))
            leaf = fields["value"]
            check_vector(isinstance(leaf, (str, int, float)), path + ("value",),
                         "a string, a number or a boolean", leaf)
            return leaf
        parts = {"NamedSharding": ("mesh", "spec"), "SingleDeviceSharding": ("device",),
                 "GSPMDSharding": ("devices", "hlo")}[kind]
        fields = _object(value, path, f"a {kind}", ("type", *parts), ("memory_kind",))
        memory = _maybe(_str)(fields.get("memory_kind"), path + ("memory_kind",))
        with _building(path, f"the {kind}"):
            if kind == "NamedSharding":
                return NamedSharding(self.mesh(fields["mesh"], path + ("mesh",)),
                                     self.spec(fields["spec"], path + ("spec",)),
                                     memory_kind=memory)
            if kind == "SingleDeviceSharding":
                return SingleDeviceSharding(self.device(fields["device"], path + ("device",)),
                                            memory_kind=memory)
            devices = self.device_list(fields["devices"], path + ("devices",))
            hlo = self.hlo(fields["hlo"], path + ("hlo",))
            return GSPMDSharding(devices, hlo, memory_kind=memory)

    @staticmethod
    def hlo(value: Any, path: tuple) -> Any:
        _str(value, path, "HLO sharding text such as \"{devices=[2,4]<=[8]}\"")
        with _building(path, "the HLO sharding text"):
            return parse_hlo(value)

    def shardings_tree(self, value: Any, path: tuple) -> Any:
        if isinstance(value, dict) and value.get("type") == "UNSPECIFIED":
            return self.sharding(value, path)
        return self.tree(value, path, self.sharding)

    # ------------------------------------------------------------------ pytrees and leaves
    def tree(self, value: Any, path: tuple, leaf: Callable[[Any, tuple], Any]) -> Any:
        if value is None:
            return None
        if isinstance(value, dict) and "type" in value:
            return leaf(value, path)
        kind, inner = _container(value, path, 'a pytree node: null, {"tuple": [...]}, '
                                              '{"list": [...]}, {"dict": {...}} or a leaf '
                                              'object with a "type"')
        if kind == "dict":
            return {k: self.tree(v, path + ("dict", k), leaf) for k, v in inner.items()}
        items = [self.tree(v, path + (kind, i), leaf) for i, v in enumerate(inner)]
        return tuple(items) if kind == "tuple" else items

    def input(self, value: Any, path: tuple) -> Arg | Static:
        kind = value.get("type")
        check_vector(kind in ("Arg", "Static"), path + ("type",), '"Arg" or "Static"', kind)
        if kind == "Static":
            fields = _object(value, path, "a Static", ("type", "value"))
            return Static(_static(fields["value"], path + ("value",)))
        fields = _object(value, path, "an Arg", ("type", "kind", "shape"),
                         ("dtype", "sharding", "layout"))
        arg_kind = _str(fields["kind"], path + ("kind",))
        shape = _ints(fields["shape"], path + ("shape",), "a shape (a list of sizes)", 0)
        dtype = _str(fields.get("dtype", "float32"), path + ("dtype",))
        sharding = self.sharding(fields.get("sharding"), path + ("sharding",), self.SHARDINGS)
        layout = _maybe(lambda v, p: self.layout(v, p, ("Layout",)))(
            fields.get("layout"), path + ("layout",))
        with _building(path, "the Arg"):
            return Arg(arg_kind, shape, dtype, sharding, layout)

    def output(self, value: Any, path: tuple) -> Out:
        fields = _object(value, path, "an Out", ("type", "shape"), ("dtype", "source", "mesh"))
        check_vector(fields["type"] == "Out", path + ("type",), '"Out"', fields["type"])
        shape = _ints(fields["shape"], path + ("shape",), "a shape (a list of sizes)", 0)
        dtype = _str(fields.get("dtype", "float32"), path + ("dtype",))
        source = _maybe(lambda v, p: _int(v, p, "a flat input index", 0))(
            fields.get("source"), path + ("source",))
        mesh = _maybe(lambda v, p: self.mesh(v, p, abstract_only=True))(
            fields.get("mesh"), path + ("mesh",))
        with _building(path, "the Out"):
            return Out(shape, dtype, source, mesh)

    def inputs(self, args: Any, kwargs: Any, path: tuple, names: tuple[str, str]
               ) -> tuple[tuple, dict]:
        positional = _each(args, path + (names[0],), "a list of argument trees",
                           lambda v, p: self.tree(v, p, self.input))
        check_vector(isinstance(kwargs, dict), path + (names[1],),
                     "an object of keyword argument trees", kwargs)
        return positional, {k: self.tree(v, path + (names[1], k), self.input)
                            for k, v in kwargs.items()}

    # ------------------------------------------------------------------ options and call
    def options(self, value: Any, path: tuple) -> JitOptions:
        fields = _object(value, path, "the jit options", (), _OPTION_KEYS)
        get = lambda key, default: fields.get(key, default)  # noqa: E731
        at = lambda key: path + (key,)  # noqa: E731
        with _building(path, "the jit options"):
            return JitOptions(
                in_shardings=self.shardings_tree(get("in_shardings", {"type": "UNSPECIFIED"}),
                                                 at("in_shardings")),
                out_shardings=self.shardings_tree(get("out_shardings", {"type": "UNSPECIFIED"}),
                                                  at("out_shardings")),
                static_argnums=_ints(get("static_argnums", []), at("static_argnums"),
                                     "a list of positions"),
                static_argnames=_strs(get("static_argnames", []), at("static_argnames"),
                                      "a list of names"),
                donate_argnums=_ints(get("donate_argnums", []), at("donate_argnums"),
                                     "a list of positions"),
                donate_argnames=_strs(get("donate_argnames", []), at("donate_argnames"),
                                      "a list of names"),
                keep_unused=_bool(get("keep_unused", False), at("keep_unused")),
                device=_maybe(self.device_id)(get("device", None), at("device")),
                backend=_maybe(_str)(get("backend", None), at("backend")))

    def call(self, fields: dict, path: tuple) -> Call:
        get = lambda key, default: fields.get(key, default)  # noqa: E731
        at = lambda key: path + (key,)  # noqa: E731
        args, kwargs = self.inputs(get("args", []), get("kwargs", {}), path, ("args", "kwargs"))
        aot = get("aot_args", None), get("aot_kwargs", None)
        aot_args = aot_kwargs = None
        if aot != (None, None):
            aot_args, aot_kwargs = self.inputs(aot[0] if aot[0] is not None else [],
                                               aot[1] if aot[1] is not None else {}, path,
                                               ("aot_args", "aot_kwargs"))
        with _building(path, "the call"):
            return Call(
                args=args, kwargs=kwargs,
                outputs=self.tree(get("outputs", {"tuple": []}), at("outputs"), self.output),
                options=self.options(get("options", {}), at("options")),
                context_mesh=_maybe(self.mesh)(get("context_mesh", None), at("context_mesh")),
                uses=_maybe(lambda v, p: _each(v, p, "a list of booleans", _bool))(
                    get("uses", None), at("uses")),
                compiler=_maybe(lambda v, p: _each(v, p, "a list of HLO sharding texts or null",
                                                   _maybe(self.hlo)))(
                    get("compiler", None), at("compiler")),
                compiler_memory=_maybe(lambda v, p: _each(
                    v, p, "a list of memory kinds or null", _maybe(_str)))(
                    get("compiler_memory", None), at("compiler_memory")),
                devices=self.count,
                default_device=self.device_id(get("default_device", 0), at("default_device")),
                process_count=self.limit // self.count,
                aot_args=aot_args, aot_kwargs=aot_kwargs,
                compiler_layouts=self._choices(get("compiler_layouts", None),
                                               at("compiler_layouts")),
                compiler_in_layouts=self._choices(get("compiler_in_layouts", None),
                                                  at("compiler_in_layouts")),
                compiler_in=_maybe(lambda v, p: _each(v, p, "a list of HLO sharding texts or null",
                                                      _maybe(self.hlo)))(
                    get("compiler_in", None), at("compiler_in")))

    def _choices(self, value: Any, path: tuple) -> Any:
        """The compiler's layout choices: a list of layouts or null, or null."""
        return _maybe(lambda v, p: _each(v, p, "a list of layouts or null", _maybe(
            lambda w, q: self.layout(w, q, ("Layout",)))))(value, path)

    # ------------------------------------------------------------------ the verdict
    def verdict(self, value: Any, path: tuple) -> Verdict:
        check_vector(isinstance(value, dict) and isinstance(value.get("accepted"), bool), path,
                     'a verdict: an object with "accepted": true or false', value)
        trace = _each(value.get("trace", []), path + ("trace",), "a list of rule IDs", _rule_id)
        if not value["accepted"]:
            fields = _object(value, path, "a rejecting verdict", ("accepted", "rule", "error_type"),
                             ("jax_error", "stage", "path", "message", "trace"))
            error_type = _str(fields["error_type"], path + ("error_type",))
            known = getattr(builtins, error_type, None)
            check_vector(isinstance(known, type) and issubclass(known, BaseException),
                         path + ("error_type",), "the name of a built-in exception type",
                         error_type)
            stages = list(STAGES)
            stage = _maybe(_str)(fields.get("stage"), path + ("stage",))
            check_vector(stage is None or stage in stages, path + ("stage",),
                         f"null or a stage ({', '.join(stages)})", stage)
            return Verdict(False, trace, rule=_rule_id(fields["rule"], path + ("rule",)),
                           error_type=error_type,
                           jax_error=_maybe(_str)(fields.get("jax_error"), path + ("jax_error",)),
                           message=_maybe(_str)(fields.get("message"), path + ("message",)),
                           path=_maybe(_str)(fields.get("path"), path + ("path",)), stage=stage)
        fields = _object(value, path, "an accepting verdict", ("accepted", "num_devices"),
                         ("device_assignment", "inputs", "outputs", "kept_inputs", "transfers",
                          "trace"))
        inputs = _each(fields.get("inputs", []), path + ("inputs",), "a list of inputs",
                       lambda v, p: self._placed(v, p, ("path", "sharding")))
        outputs = _each(fields.get("outputs", []), path + ("outputs",), "a list of results",
                        lambda v, p: self._placed(v, p, ("path", "sharding", "committed")))
        in_layouts = tuple(found[-1] for found in inputs)
        out_layouts = tuple(found[-1] for found in outputs)
        assignment = _maybe(lambda v, p: _each(v, p, "a list of device ids", self.device_id))(
            fields.get("device_assignment"), path + ("device_assignment",))
        return Verdict(
            True, trace, in_paths=tuple(p for p, _, _ in inputs),
            in_shardings=tuple(s for _, s, _ in inputs),
            out_paths=tuple(p for p, _, _, _ in outputs),
            out_shardings=tuple(s for _, s, _, _ in outputs),
            device_assignment=assignment,
            num_devices=_int(fields["num_devices"], path + ("num_devices",),
                             "a device count", 0),
            kept_inputs=_ints(fields.get("kept_inputs", []), path + ("kept_inputs",),
                              "a list of flat input indices", 0),
            out_committed=tuple(c for _, _, c, _ in outputs),
            transfers=_strs(fields.get("transfers", []), path + ("transfers",),
                            "a list of input paths"),
            in_layouts=in_layouts, out_layouts=out_layouts)

    def _placed(self, value: Any, path: tuple, keys: tuple) -> tuple:
        """(path, sharding[, committed], layout) of an input or result; the layout is None
        (the default) where the key is absent."""
        fields = _object(value, path, "an object", keys, ("layout",))
        sharding = self.sharding(fields["sharding"], path + ("sharding",),
                                 self.SHARDINGS + ("UNSPECIFIED",))
        check_vector(sharding is not None, path + ("sharding",), "a sharding or UNSPECIFIED",
                     None)
        found = (_str(fields["path"], path + ("path",)), sharding)
        if "committed" in keys:
            found += (_bool(fields["committed"], path + ("committed",)),)
        return found + (_maybe(self.layout)(fields.get("layout"), path + ("layout",)),)


_OPTION_KEYS = ("in_shardings", "out_shardings", "static_argnums", "static_argnames",
                "donate_argnums", "donate_argnames", "keep_unused", "device", "backend")
_CALL_KEYS = ("args", "kwargs", "outputs", "options", "context_mesh", "uses", "compiler",
              "compiler_memory", "devices", "default_device", "process_count", "aot_args",
              "aot_kwargs", "compiler_layouts", "compiler_in_layouts", "compiler_in")
_VECTOR_KEYS = ("format", "version", "jax", "name", "rule", "side", "description", "call",
                "expect")


def _rule_id(value: Any, path: tuple) -> str:
    check_vector(isinstance(value, str) and value in RULES, path, "a registered rule ID", value)
    return value


def _parse(text: str | bytes | bytearray) -> Any:
    def no_repeats(pairs: list[tuple[str, Any]]) -> dict:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            check_vector(key not in seen, (), "JSON objects without repeated keys",
                         f"the key {key!r} twice")
            seen[key] = value
        return seen

    def no_constant(name: str) -> Any:
        check_vector(False, (), "JSON numbers (no NaN or Infinity)", name)

    def integer(digits: str) -> int:
        # Every integer of a vector is an int64 (19 digits); a longer one is refused before
        # Python converts it (past 4,300 digits its conversion refuses with ValueError).
        check_vector(len(digits.lstrip("-")) <= _LONGEST_INTEGER, (),
                     f"JSON integers of at most {_LONGEST_INTEGER} digits",
                     f"an integer of {len(digits.lstrip('-')):,} digits")
        return int(digits)

    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
        except UnicodeDecodeError as error:
            check_vector(False, (), "JSON text", str(error))
    deep = _text_depth_exceeded(text)
    check_vector(deep is None, (), f"JSON text nested at most {MAX_DEPTH} deep",
                 f"text that nests too deep: an array or object at depth {MAX_DEPTH + 1}, "
                 f"opened at character {deep}")
    try:
        return json.loads(text, object_pairs_hook=no_repeats, parse_constant=no_constant,
                          parse_int=integer)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        check_vector(False, (), "JSON text", str(error))


def _document(obj_or_text: Any) -> Any:
    """What a vector is read from: its JSON text parsed, or the JSON value as given; either
    nested at most :data:`MAX_DEPTH` deep (VEC-1, at the path where it goes deeper)."""
    if isinstance(obj_or_text, (str, bytes, bytearray)):
        return _parse(obj_or_text)
    deep = _too_deep(obj_or_text)
    if deep is not None:
        found: Any = obj_or_text
        for key in deep:
            found = found[key]
        check_vector(False, deep, f"JSON nested at most {MAX_DEPTH} deep", found)
    return obj_or_text


def load_vector(obj_or_text: Any) -> Vector:
    """The :class:`Vector` a JSON object (or its text) describes; VEC-1 when it is malformed.

    >>> v = load_vector('''{"format": "shardlaw-jit-call", "version": 1, "jax": "0.10.2",
    ...   "call": {"args": [{"type": "Arg", "kind": "numpy", "shape": [8]}],
    ...            "outputs": {"type": "Out", "shape": [8]}}}''')
    >>> v.call.args
    (<numpy float32[8]>,)
    """
    vector = _document(obj_or_text)
    fields = _object(vector, (), "a vector (a JSON object)", ("format", "version", "jax", "call"),
                     ("name", "rule", "side", "description", "expect"))
    check_vector(fields["format"] == FORMAT, ("format",), f"the format name {json.dumps(FORMAT)}",
                 fields["format"])
    check_vector(fields["version"] in VERSIONS and type(fields["version"]) is int, ("version",),
                 f"a format version this shardlaw reads ({', '.join(map(str, VERSIONS))})",
                 fields["version"])
    jax = _str(fields["jax"], ("jax",), "a JAX version such as \"0.10.2\"")
    labels = {key: _maybe(_str)(fields.get(key), (key,)) for key in ("name", "description")}
    label_rule = _maybe(_rule_id)(fields.get("rule"), ("rule",))
    side = fields.get("side")
    check_vector(side is None or side in SIDES, ("side",), 'null, "accept" or "reject"', side)

    call_fields = _object(fields["call"], ("call",), "the call", (), _CALL_KEYS)
    count = _int(call_fields.get("devices", 8), ("call", "devices"),
                 "a device count of at least 1", 1)
    processes = _int(call_fields.get("process_count", 1), ("call", "process_count"),
                     "a process count of at least 1", 1)
    reader = _Reader(count * processes, count)
    call = reader.call(call_fields, ("call",))
    expect = _maybe(reader.verdict)(fields.get("expect"), ("expect",))
    check_vector(fields["version"] >= 2 or not uses_version_2(call, expect), ("version",),
                 "version 2 for a vector with layouts or compiler_in (version 1 has neither)",
                 fields["version"])
    if expect is not None and label_rule is not None and side is not None:
        _check_label(expect, label_rule, side)
    return Vector(call, expect, labels["name"], label_rule, side, labels["description"], jax)


def _check_label(expect: Any, label: str, side: str) -> None:
    """A vector labelled with a rule and a side expects that rule to decide that way (a jit
    call's Verdict, or a transformed call's: both have accepted, rule and trace)."""
    if side == "reject":
        check_vector(not expect.accepted and expect.rule == label, ("expect", "rule"),
                     f"{label} (the vector is labelled as rejected by {label})",
                     expect.rule if not expect.accepted else "an accepted call")
    else:
        check_vector(label in expect.trace and expect.rule != label, ("expect", "trace"),
                     f"a trace in which {label} fires and lets the call through (the vector is "
                     f"labelled as accepted by {label})", list(expect.trace))


# =========================================================================== comparing

# The facts of a verdict that a conforming implementation reproduces. The trace, the
# message and the layouts the executable takes its inputs in explain a verdict; they are not
# compared. The stage is compared where both verdicts name one (an implementation that
# cannot tell the stages apart leaves it None). A verdict without layouts says the default
# layout everywhere.
COMPARED_REJECTED = ("rule", "error_type", "jax_error", "path", "stage")
COMPARED_ACCEPTED = ("device_assignment", "num_devices", "in_paths", "in_shardings",
                     "out_paths", "out_shardings", "out_committed", "kept_inputs", "transfers",
                     "out_layouts")


def verdict_differences(expected: Verdict, actual: Verdict) -> list[str]:
    """How ``actual`` differs from ``expected`` in the compared facts (empty: it conforms).

    >>> ok = Verdict(False, rule="DA-1", error_type="ValueError", jax_error="ValueError")
    >>> verdict_differences(ok, Verdict(False, rule="RES-4", error_type="ValueError",
    ...                                 jax_error="ValueError"))
    ['rule: expected DA-1, got RES-4']
    >>> staged = dataclasses.replace(ok, stage="lower")
    >>> verdict_differences(staged, dataclasses.replace(ok, stage="trace"))
    ['stage: expected lower, got trace']
    >>> verdict_differences(staged, ok)
    []
    """
    if expected.accepted != actual.accepted:
        said = {True: "accepted", False: "rejected"}
        got = said[actual.accepted] + ("" if actual.accepted else f" by {actual.rule}")
        want = said[expected.accepted] + ("" if expected.accepted else f" by {expected.rule}")
        return [f"expected the call to be {want}, it was {got}"]
    names = COMPARED_ACCEPTED if expected.accepted else COMPARED_REJECTED

    def fact(verdict: Verdict, name: str) -> Any:
        if name == "out_layouts":
            return verdict.out_layouts or (None,) * len(verdict.out_paths)
        return getattr(verdict, name)

    def compared(name: str) -> bool:
        return name != "stage" or (expected.stage is not None and actual.stage is not None)

    return [f"{name}: expected {_said(fact(expected, name))}, got {_said(fact(actual, name))}"
            for name in names if compared(name) and fact(expected, name) != fact(actual, name)]


def _said(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_said, value)) + ("," if len(value) == 1 else "") + ")"
    return repr(value) if not isinstance(value, str) else value


def jit_rules() -> list[str]:
    """The registered rules of the jit-call families, family by family, in ID order."""
    def key(rule_id: str) -> tuple[int, int]:
        family, number = rule_id.rsplit("-", 1)
        return JIT_FAMILIES.index(family), int(number)

    return sorted((r for r in RULES if r.rsplit("-", 1)[0] in JIT_FAMILIES), key=key)


def rules_hit(vector: Vector) -> list[tuple[str, str]]:
    """(rule, side) for every rule the expected verdict shows firing."""
    if vector.expect is None:
        return [] if vector.rule is None else [(vector.rule, vector.side or "accept")]
    rejecting = None if vector.expect.accepted else vector.expect.rule
    hits = [(r, "reject" if r == rejecting else "accept") for r in vector.expect.trace]
    if rejecting is not None and rejecting not in vector.expect.trace:
        hits.append((rejecting, "reject"))
    return hits


# =========================================================================== call sequences

SEQUENCE_FORMAT = "shardlaw-jit-sequence"
OUTCOMES = ("hit", "miss", "")   # "": the call never reached that level


@dataclasses.dataclass(frozen=True)
class SequenceVector:
    """A sequence of calls (each a :class:`~shardlaw.spec.jit.cache.CallSite`) and, optionally,
    the cache outcome expected for each call: per level ``"hit"``, ``"miss"`` or ``""`` (a
    level the call never reached)."""

    sites: tuple
    expect: tuple | None = None
    name: str | None = None
    description: str | None = None
    jax: str = JAX_VERSION


def dump_sequence(sites: Any, *, expect: Any = None, name: str | None = None,
                  description: str | None = None, jax: str = JAX_VERSION) -> dict:
    """The vector for a call sequence (and its expected cache outcomes) as a JSON-ready dict.

    ``expect``: the rows of :func:`~shardlaw.spec.jit.cache.explain_cache` (their outcomes are
    written), or None.

    >>> from shardlaw.spec.jit.cache import CallSite, explain_cache
    >>> sites = [CallSite(Call(args=(Arg.numpy((4,)),), outputs=Out((4,))))] * 2
    >>> v = dump_sequence(sites, expect=explain_cache(sites))
    >>> v["expect_cache"][1]["dispatch"], load_sequence(v).sites == tuple(sites)
    ('hit', True)
    """

    sites = check_sequence(sites)  # an iterable of CallSites, as explain_cache takes (CACHE-0)
    out: dict[str, Any] = {"format": SEQUENCE_FORMAT, "version": VERSION, "jax": jax}
    for key, value in (("name", name), ("description", description)):
        if value is not None:
            out[key] = value
    entries = []
    for i, site in enumerate(sites):
        check_writable(isinstance(site, CallSite), ("sequence", i), "a call site",
                       "a CallSite", site)
        entries.append({"function": site.function, "wrapper": site.wrapper,
                        "call": _call_json(site.call)})
    out["sequence"] = entries
    if expect is not None:
        rows = _expected_rows(expect, len(entries))
        out["expect_cache"] = [_outcome_json(row) for row in rows]
    try:
        load_sequence(out)
    except Rejection as error:
        raise reject(UnreadableWhenWritten(str(error))) from None
    return out


def _outcome_json(row: Any) -> dict:
    form = row.as_dict() if hasattr(row, "as_dict") else row
    return {level: value for level, value in form["outcome"].items()}


def _expected_rows(expect: Any, count: int) -> tuple[CacheRow, ...]:
    """The expected outcomes of a sequence: explain_cache's rows, one per call site."""
    check_writable(isinstance(expect, (list, tuple)), ("expect_cache",), "the expected outcomes",
                   "a list of explain_cache rows (or None)", expect)
    for i, row in enumerate(expect):
        check_writable(isinstance(row, CacheRow), ("expect_cache", i), "an expected outcome",
                       "a row of explain_cache", row)
    check_writable(len(expect) == count, ("expect_cache",), "the expected outcomes",
                   f"one row per call site ({count})", expect)
    return tuple(expect)


def load_sequence(obj_or_text: Any) -> SequenceVector:
    """The :class:`SequenceVector` a JSON object (or its text) describes; VEC-1 when malformed."""

    vector = _document(obj_or_text)
    fields = _object(vector, (), "a sequence vector (a JSON object)",
                     ("format", "version", "jax", "sequence"),
                     ("name", "description", "expect_cache"))
    check_vector(fields["format"] == SEQUENCE_FORMAT, ("format",),
                 f"the format name {json.dumps(SEQUENCE_FORMAT)}", fields["format"])
    check_vector(fields["version"] in VERSIONS and type(fields["version"]) is int, ("version",),
                 f"a format version this shardlaw reads ({', '.join(map(str, VERSIONS))})",
                 fields["version"])
    jax = _str(fields["jax"], ("jax",), "a JAX version such as \"0.10.2\"")
    labels = {key: _maybe(_str)(fields.get(key), (key,)) for key in ("name", "description")}
    entries = _list(fields["sequence"], ("sequence",), "a list of calls")
    check_vector(len(entries) > 0, ("sequence",), "at least one call", entries)
    sites = []
    for i, entry in enumerate(entries):
        path = ("sequence", i)
        site = _object(entry, path, "a call site", ("call",), ("function", "wrapper"))
        call_fields = _object(site["call"], path + ("call",), "the call", (), _CALL_KEYS)
        count = _int(call_fields.get("devices", 8), path + ("call", "devices"),
                     "a device count of at least 1", 1)
        processes = _int(call_fields.get("process_count", 1), path + ("call", "process_count"),
                         "a process count of at least 1", 1)
        call = _Reader(count * processes, count).call(call_fields, path + ("call",))
        sites.append(CallSite(call, _str(site.get("function", "f"), path + ("function",)),
                              _str(site.get("wrapper", "w"), path + ("wrapper",))))
    expect = None
    if fields.get("expect_cache") is not None:
        rows = _list(fields["expect_cache"], ("expect_cache",), "a list of per-call outcomes")
        check_vector(len(rows) == len(sites), ("expect_cache",),
                     f"one outcome per call ({len(sites)})", len(rows))
        outcomes = []
        for i, row in enumerate(rows):
            got = _object(row, ("expect_cache", i), "a per-level outcome", LEVELS, ())
            for level in LEVELS:
                check_vector(got[level] in OUTCOMES, ("expect_cache", i, level),
                             f"one of {list(OUTCOMES)}", got[level])
            outcomes.append(dict(got))
        expect = tuple(outcomes)
    return SequenceVector(tuple(sites), expect, labels["name"], labels["description"], jax)


def cache_differences(vector: SequenceVector, rows: Any) -> list[str]:
    """Where the rows of explain_cache differ from the outcomes the vector expects."""
    if vector.expect is None:
        return []
    found = []
    for i, (want, row) in enumerate(zip(vector.expect, rows)):
        got = _outcome_json(row)
        for level, value in want.items():
            if got.get(level) != value:
                found.append(f"call {i}: {level} expected {value}, the model says {got.get(level)}")
    return found


def load_any(obj_or_text: Any) -> Vector | SequenceVector:
    """A call vector or a sequence vector, by its ``format``."""
    vector = _document(obj_or_text)
    if isinstance(vector, dict) and vector.get("format") == SEQUENCE_FORMAT:
        return load_sequence(vector)
    return load_vector(vector)


__all__ += ["SEQUENCE_FORMAT", "SequenceVector", "dump_sequence", "load_sequence",
            "cache_differences", "load_any"]
