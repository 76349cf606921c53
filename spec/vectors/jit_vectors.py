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

The format's parts have rooms beside this one: ``vector_checks.py`` (the VEC rules, the
versions and the limits on a vector's text), ``vector_writer.py`` and ``vector_reader.py``
(values, calls and verdicts to JSON and back) and ``sequence_vectors.py`` (calls in sequence
against the caches).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..core.rules import RULES, Rejection, reject
from ..core.pytree import leaves
from ..jit.call import Call, Verdict
from ..jit.layouts import AUTO_LAYOUT, Format, Layout
from .sequence_vectors import SEQUENCE_FORMAT, SequenceVector, dump_sequence, load_sequence
from .vector_checks import (
    JAX_VERSION, VERSION, VERSIONS, UnreadableWhenWritten, read_document, check_vector,
    check_writable,
)
from .vector_reader import CALL_KEYS, CallReader, as_int, maybe, as_object, as_rule_id, as_str
from .vector_writer import call_json, verdict_json

__all__ = [
    "FORMAT", "VERSION", "VERSIONS", "JAX_VERSION", "uses_layouts", "uses_version_2",
    "JIT_FAMILIES", "jit_rules", "Vector", "load_vector", "dump_vector", "vector_text",
    "verdict_differences", "rules_hit", "load_any",
    # the call-sequence format's, as documented before it had a module of its own
    "dump_sequence", "load_sequence",
]

FORMAT = "shardlaw-jit-call"

SIDES = ("accept", "reject")

# The rule families of the jit call, in the order jit applies them: what vectors exercise.
JIT_FAMILIES = ("JIT", "TREE", "FIT", "RES", "LAY", "KEEP", "DA", "EXE", "OUT", "AOT")


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
    out["call"] = call_json(call)
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

_VECTOR_KEYS = ("format", "version", "jax", "name", "rule", "side", "description", "call",
                "expect")


def load_vector(obj_or_text: Any) -> Vector:
    """The :class:`Vector` a JSON object (or its text) describes; VEC-1 when it is malformed.

    >>> v = load_vector('''{"format": "shardlaw-jit-call", "version": 1, "jax": "0.10.2",
    ...   "call": {"args": [{"type": "Arg", "kind": "numpy", "shape": [8]}],
    ...            "outputs": {"type": "Out", "shape": [8]}}}''')
    >>> v.call.args
    (<numpy float32[8]>,)
    """
    vector = read_document(obj_or_text)
    fields = as_object(vector, (), "a vector (a JSON object)", ("format", "version", "jax", "call"),
                       ("name", "rule", "side", "description", "expect"))
    check_vector(fields["format"] == FORMAT, ("format",), f"the format name {json.dumps(FORMAT)}",
                 fields["format"])
    check_vector(fields["version"] in VERSIONS and type(fields["version"]) is int, ("version",),
                 f"a format version this shardlaw reads ({', '.join(map(str, VERSIONS))})",
                 fields["version"])
    jax = as_str(fields["jax"], ("jax",), "a JAX version such as \"0.10.2\"")
    labels = {key: maybe(as_str)(fields.get(key), (key,)) for key in ("name", "description")}
    label_rule = maybe(as_rule_id)(fields.get("rule"), ("rule",))
    side = fields.get("side")
    check_vector(side is None or side in SIDES, ("side",), 'null, "accept" or "reject"', side)

    call_fields = as_object(fields["call"], ("call",), "the call", (), CALL_KEYS)
    count = as_int(call_fields.get("devices", 8), ("call", "devices"),
                   "a device count of at least 1", 1)
    processes = as_int(call_fields.get("process_count", 1), ("call", "process_count"),
                       "a process count of at least 1", 1)
    reader = CallReader(count * processes, count)
    call = reader.call(call_fields, ("call",))
    expect = maybe(reader.verdict)(fields.get("expect"), ("expect",))
    check_vector(fields["version"] >= 2 or not uses_version_2(call, expect), ("version",),
                 "version 2 for a vector with layouts or compiler_in (version 1 has neither)",
                 fields["version"])
    if expect is not None and label_rule is not None and side is not None:
        check_label(expect, label_rule, side)
    return Vector(call, expect, labels["name"], label_rule, side, labels["description"], jax)


def check_label(expect: Any, label: str, side: str) -> None:
    """A vector labelled with a rule and a side expects that rule to decide that way (a jit
    call's Verdict, or a program's: both have accepted, rule and trace)."""
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


def load_any(obj_or_text: Any) -> Vector | SequenceVector:
    """A call vector or a sequence vector, by its ``format``."""
    vector = read_document(obj_or_text)
    if isinstance(vector, dict) and vector.get("format") == SEQUENCE_FORMAT:
        return load_sequence(vector)
    return load_vector(vector)
