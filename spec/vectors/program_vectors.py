"""Test vectors for whole programs: a :class:`~shardlaw.spec.program.description.Program`, the
transformations the spec applies to it, and what ``jax.jit`` does with the result.

A vector is one JSON object::

    {"format": "shardlaw-program", "version": 1, "jax": "0.10.2",
     "name": "DA-1-reject-1", "rule": "DA-1", "side": "reject",
     "program": {"type": "Program", "inputs": {"tuple": [...]}, "equations": ...},
     "transforms": [{"transform": "vmap", "arguments": {"axis_size": 4}}],
     "until": "run",
     "expect": {"accepted": false, "rule": "DA-1", "stage": "lower", "path": "body[0]", ...}}

The program is written with the values writer of :mod:`~shardlaw.spec.vectors.value_json`
(meshes, shardings and PartitionSpecs as the jit-call vectors write them, tagged
containers, and the program's records — ``Program``,
``Value``, ``Const`` and each kind of equation — as ``{"type": NAME, field: value, ...}``
with the fields not at their defaults). ``transforms`` lists, innermost first, the
rewrites the spec applies before asking (:data:`TRANSFORMATIONS`: ``vmap``, ``jvp``,
``linearize``, ``vjp``, ``grad``, as far as this shardlaw has them); ``until`` is the last
stage asked about (``"run"``, or ``"trace"`` for a program over abstract meshes). A vector
that is not of this form is refused with VEC-1, naming the JSON path.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Any, Callable

from ..core.rules import Rejection, reject, tracing
from ..program.description import Program
from ..program.explain import UNTIL, ProgramVerdict, explain_program
from .jit_vectors import check_label
from .value_json import (
    ValueReader as _ValueReader, read_header, rule_read as _rule_read,
    rule_written as _rule_written, value_json as _value_json,
)
from .vector_checks import (
    JAX_VERSION, UnreadableWhenWritten, read_document, check_vector, check_writable,
)
from .vector_reader import as_object

__all__ = ["PROGRAM_FORMAT", "PROGRAM_VERSION", "PROGRAM_VERSIONS", "TRANSFORMATIONS",
           "ProgramVector", "dump_program", "load_program", "program_differences",
           "replay_program"]

PROGRAM_FORMAT = "shardlaw-program"
PROGRAM_VERSION = 1
PROGRAM_VERSIONS = (1,)

# The rewrites a vector may ask for: name -> (module of spec/program/, function).
TRANSFORMATIONS: dict[str, tuple[str, str]] = {
    "vmap": ("batching", "vmap_program"),
    "jvp": ("autodiff", "jvp_program"),
    "linearize": ("autodiff", "linearize_program"),
    "vjp": ("autodiff", "vjp_program"),
    "grad": ("autodiff", "grad_program"),
}

# What an expected verdict holds, and what of it is compared (the message explains).
_ACCEPTED = ("out_shardings", "out_committed", "device_assignment", "kept_inputs", "until")
_REJECTED = ("rule", "error_type", "jax_error", "path", "stage")


def _transformation(name: str) -> Callable[..., Program]:
    module, function = TRANSFORMATIONS[name]
    found = getattr(importlib.import_module(f"{__package__.rpartition('.')[0]}.program."
                                            f"{module}"), function, None)
    check_vector(callable(found), ("transforms",), f"a transformation this shardlaw has "
                 f"({name} is not built yet)", name)
    return found


@dataclasses.dataclass(frozen=True)
class ProgramVector:
    """A program vector, read: the program, the transformations to apply (name, keyword
    arguments; innermost first), the last stage asked about, the expected verdict (a dict
    of the compared fields; None: none recorded) and its labels."""

    program: Program
    transforms: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    until: str = "run"
    expect: dict | None = None
    name: str | None = None
    rule: str | None = None
    side: str | None = None
    description: str | None = None
    jax: str = JAX_VERSION

    def transformations(self) -> list[tuple[Callable[..., Program], dict]]:
        """Each transformation's function and keyword arguments, innermost first (VEC-1:
        one this shardlaw has)."""
        return [(_transformation(name), dict(arguments)) for name, arguments in self.transforms]

    def transformed(self) -> Program:
        """The program the vector asks about: its transformations applied by the spec."""
        return _applied(self.program, self.transformations())


def _applied(program: Program, transformations: list) -> Program:
    for function, arguments in transformations:
        program = function(program, **arguments)
    return program


# =========================================================================== writing

def _expect_json(verdict: ProgramVerdict) -> dict:
    trace = [_rule_written(r, ("expect", "trace", i)) for i, r in enumerate(verdict.trace)]
    if not verdict.accepted:
        out = {k: getattr(verdict, k) for k in _REJECTED}
        return {"accepted": False, **out, "message": verdict.message, "trace": trace}
    out = {"accepted": True, "until": verdict.until, "trace": trace,
           "out_shardings": _value_json(tuple(verdict.out_shardings),
                                        ("expect", "out_shardings")),
           "out_committed": list(verdict.out_committed),
           "kept_inputs": list(verdict.kept_inputs),
           "device_assignment": None if verdict.device_assignment is None
           else list(verdict.device_assignment)}
    return out


def dump_program(program: Program, verdict: ProgramVerdict | None = None, *,
                 transforms: tuple = (), until: str = "run", name: str | None = None,
                 rule: str | None = None, side: str | None = None,
                 description: str | None = None) -> dict:
    """The vector of ``program`` (with the transformations the spec applies to it first,
    as ``(name, {keyword: value})`` pairs) and its expected verdict, as a JSON-ready dict.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import ShardingConstraint, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> program = Program((Value.placed((8, 8), NamedSharding(mesh, P("x"))),),
    ...     (ShardingConstraint((0,), sharding=NamedSharding(mesh, P("y"))),), outputs=(1,))
    >>> vector = dump_program(program, explain_program(program), rule="PROG-4", side="accept")
    >>> vector["expect"]["out_shardings"]["tuple"][0]["spec"]
    {'type': 'PartitionSpec', 'partitions': ['y']}
    >>> load_program(vector).program == program
    True
    """
    check_writable(isinstance(program, Program), ("program",), "the program", "a Program",
                   program)
    check_writable(verdict is None or isinstance(verdict, ProgramVerdict), ("expect",),
                   "the verdict", "a ProgramVerdict or None", verdict)
    out: dict[str, Any] = {"format": PROGRAM_FORMAT, "version": PROGRAM_VERSION,
                           "jax": JAX_VERSION}
    for key, value in (("name", name), ("rule", rule), ("side", side),
                       ("description", description)):
        if value is not None:
            out[key] = value
    out["program"] = _value_json(program, ("program",))
    out["transforms"] = [{"transform": t, "arguments": {
        k: _value_json(v, ("transforms", i, "arguments", k)) for k, v in dict(a).items()}}
        for i, (t, a) in enumerate(transforms)]
    out["until"] = until
    if verdict is not None:
        out["expect"] = _expect_json(verdict)
    try:  # what is written must read back, equal
        back = load_program(out)
    except Rejection as error:
        raise reject(UnreadableWhenWritten(str(error))) from None
    check_writable(back.program == program, ("program",), "the program",
                   "made of values that read back equal", program)
    return out


# =========================================================================== reading

def _transforms(reader: _ValueReader, value: Any) -> tuple:
    check_vector(isinstance(value, list), ("transforms",), "a JSON array of transformations",
                 value)
    out = []
    for i, item in enumerate(value):
        at = ("transforms", i)
        fields = as_object(item, at, "a transformation", ("transform", "arguments"))
        name = fields["transform"]
        check_vector(name in TRANSFORMATIONS, at + ("transform",),
                     f"a transformation ({', '.join(TRANSFORMATIONS)})", name)
        arguments = fields["arguments"]
        check_vector(isinstance(arguments, dict), at + ("arguments",),
                     "a JSON object of keyword arguments", arguments)
        out.append((name, tuple((k, reader.value(v, at + ("arguments", k)))
                                for k, v in arguments.items())))
    return tuple(out)


def _expect(reader: _ValueReader, value: Any) -> dict:
    check_vector(isinstance(value, dict) and type(value.get("accepted")) is bool,
                 ("expect",), "a verdict: a JSON object with \"accepted\" true or false", value)
    if not value["accepted"]:
        fields = as_object(value, ("expect",), "a refusal", ("accepted", "rule", "stage"),
                           ("error_type", "jax_error", "path", "message", "trace"))
        out = {k: fields.get(k) for k in _REJECTED}
        out["rule"] = _rule_read(fields["rule"], ("expect", "rule"))
    else:
        fields = as_object(value, ("expect",), "an accepted verdict", ("accepted",),
                           (*_ACCEPTED, "trace"))
        out = {k: fields.get(k) for k in _ACCEPTED}
        if "out_shardings" in fields:
            out["out_shardings"] = reader.value(fields["out_shardings"],
                                                ("expect", "out_shardings"))
    out["accepted"] = value["accepted"]
    trace = fields.get("trace", [])
    check_vector(isinstance(trace, list), ("expect", "trace"), "a JSON array of rule IDs",
                 trace)
    out["trace"] = tuple(_rule_read(r, ("expect", "trace", i)) for i, r in enumerate(trace))
    return out


def load_program(program_json: Any) -> ProgramVector:
    """The :class:`ProgramVector` a JSON object (or its text) describes; VEC-1 when it is
    malformed.

    >>> empty = load_program('{"format": "shardlaw-program", "version": 1, "jax": "0.10.2", '
    ...                      '"program": {"type": "Program"}}')
    >>> empty.program.equations, empty.until, empty.expect
    ((), 'run', None)
    >>> load_program('{"format": "shardlaw-program", "version": 1, "jax": "0.10.2", '
    ...              '"program": {"type": "Program"}, "until": "lower"}')
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VEC-1] at until: expected the last stage asked about ("trace" or "run"), got "lower"

    """
    fields, header = read_header(read_document(program_json), "a program vector", PROGRAM_FORMAT,
                                 PROGRAM_VERSIONS, ("program",), ("transforms", "until", "expect"))
    jax, labels, label, side = header.jax, header.labels, header.rule, header.side
    until = fields.get("until", "run")
    check_vector(until in UNTIL, ("until",), "the last stage asked about (" + " or ".join(
        json.dumps(u) for u in UNTIL) + ")", until)
    reader = _ValueReader()
    program = reader.value(fields["program"], ("program",))
    check_vector(isinstance(program, Program), ("program",), "a Program record", program)
    transforms = _transforms(reader, fields.get("transforms", []))
    expect = None if fields.get("expect") is None else _expect(reader, fields["expect"])
    if expect is not None and label is not None and side in ("accept", "reject"):
        check_label(_Labelled(expect), label, side)
    return ProgramVector(program, transforms, until, expect, labels["name"], label, side,
                         labels["description"], jax)


@dataclasses.dataclass(frozen=True)
class _Labelled:
    """An expected verdict as the label check reads one (accepted, rule, trace)."""

    expect: dict

    @property
    def accepted(self) -> bool:
        return self.expect["accepted"]

    @property
    def rule(self) -> str | None:
        return self.expect.get("rule")

    @property
    def trace(self) -> tuple:
        return self.expect["trace"]


# =========================================================================== comparing

def replay_program(vector: ProgramVector) -> ProgramVerdict:
    """The spec's verdict on the vector's question: its transformations applied, then
    :func:`~shardlaw.spec.explain_program` until its stage. A transformation that refuses
    the program (vmap's BAT rules, AD-0 ...) is the verdict: refused by its rule, at the
    stage it raised in (``trace``), with its path. Either way the verdict's trace begins
    with the rules the transformations fired (not the reader's VEC-1)."""
    transformations = vector.transformations()
    with tracing() as fired:
        try:
            program = _applied(vector.program, transformations)
        except Rejection as error:
            failure = error.failure
            return ProgramVerdict(False, tuple(dict.fromkeys(fired)), rule=failure.rule,
                                  error_type=failure.error_type.__name__,
                                  jax_error=failure.jax_error, message=str(error),
                                  path=error.path, stage=error.stage or "trace",
                                  until=vector.until)
    verdict = explain_program(program, until=vector.until)
    return dataclasses.replace(verdict, trace=tuple(dict.fromkeys((*fired, *verdict.trace))))


def program_differences(vector: ProgramVector, actual: ProgramVerdict | None = None
                        ) -> list[str]:
    """How ``actual`` (default: the spec's verdict now) differs from the vector's expected
    verdict (empty: it conforms)."""
    check_writable(isinstance(vector, ProgramVector), ("vector",), "the vector",
                   "a ProgramVector", vector)
    if vector.expect is None:
        return []
    actual = replay_program(vector) if actual is None else actual
    expected = vector.expect
    if expected["accepted"] != actual.accepted:
        said = {True: "accepted", False: f"refused by {expected.get('rule')}"}
        return [f"expected the program to be {said[expected['accepted']]}, it was "
                + ("accepted" if actual.accepted else f"refused by {actual.rule}")]
    keys = _ACCEPTED if actual.accepted else _REJECTED
    out = []
    for key in keys:
        if key not in expected or expected[key] is None and key != "path":
            continue
        got = getattr(actual, key)
        got = list(got) if key in ("out_committed", "kept_inputs", "device_assignment") \
            and got is not None else got
        if key == "out_shardings":
            got = tuple(got)
        if got != expected[key]:
            out.append(f"{key}: expected {expected[key]!r}, got {got!r}")
    return out
