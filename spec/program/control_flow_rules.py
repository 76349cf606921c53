"""The rules of the control-flow kinds of equation (:mod:`control_flow`), registered in
every rewrite that has one for them: their typing (PROG-1), their checks where JAX traces
them (each body traced as a jit's is), inside a shard_map's body, and what vmap and AD do
with them.

Remat and the custom-derivative calls are jits without options to the rewrites (their
entries name the jit's rules); a loop and a branching equation have rules of their own
here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, located, reject, rule, staged
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec
from .control_flow import Cond, Scan, While, stacked
from .description import Value
from .explain import trace_body
from .primitives import IN_SHARD_MAP, TRACING, TYPING
from .shardmap import walk_body

__all__ = ["scan_results", "while_results", "cond_results", "check_one_type", "TypesDiffer"]

P = PartitionSpec  # the name the examples use


# --------------------------------------------------------------------------- PROG-1

@TYPING.register("scan")
def scan_results(eq: Scan, operands: tuple[Value, ...]) -> tuple[Value, ...]:
    """A scan's results: the carry its body returns, then each slice of ``ys`` it returns
    stacked on a leading axis of ``length``."""
    body = eq.body
    made = [body.value_types[n] for n in body.outputs]
    return tuple(made[:eq.num_carry]) + tuple(stacked(v, eq.length)
                                              for v in made[eq.num_carry:])


@TYPING.register("while")
def while_results(eq: While, operands: tuple[Value, ...]) -> tuple[Value, ...]:
    """A while's results: the carry its body returns."""
    body = eq.body_fun
    return tuple(body.value_types[n] for n in body.outputs)


@TYPING.register("cond")
def cond_results(eq: Cond, operands: tuple[Value, ...]) -> tuple[Value, ...]:
    """A cond's results: its branches' (one type, checked when it is built)."""
    first = eq.branches[0]
    return tuple(first.value_types[n] for n in first.outputs)


# --------------------------------------------------------------------------- LOOP-1

@dataclasses.dataclass(frozen=True)
class TypesDiffer(Failure, rule="LOOP-1", error=TypeError):
    template = ("{what} must have one type: it is {given} in and {made} out (at {path}); "
                "they differ in {differs}")
    hint = ("Give the loop's initial carry the type its body returns (jax.sharding.reshard "
            "it, or jax.lax.pcast it to the varying axes), or reshard the body's result "
            "to the type it takes; a cond's branches must return results of one type.")
    what: str
    given: str
    made: str
    path: str
    differs: str


def _explicit(mesh: Any) -> bool:
    return mesh is not None and any(t == AxisType.Explicit for t in mesh.axis_types)


def _split(value: Value) -> tuple:
    parts = list(value.spec.partitions) if value.spec is not None else []
    parts += [None] * (len(value.shape) - len(parts))
    spec = value.spec
    return (tuple(parts), spec.reduced if spec is not None else frozenset(),
            spec.unreduced if spec is not None else frozenset())


def _short(value: Value) -> str:
    split = "" if value.spec is None else f" split {value.spec}"
    return f"{value.dtype}{list(value.shape)}{split}"


@rule("LOOP-1", mirrors="jax._src.lax.control_flow.loops._check_carry_type; "
                        "jax._src.lax.control_flow.common._check_tree_and_avals; "
                        "jax._src.core.typematch")
def check_one_type(given: Value, made: Value, what: str, path: str = "") -> None:
    """A loop's carry comes back from its body of the type it went in, and a cond's branches return one type: shape, dtype, varying axes, and the split over Explicit axes where both types have a mesh (TypeError at trace).

    >>> from shardlaw.spec.program.description import Value
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> check_one_type(Value((8,), mesh=mesh, spec=P("x")), Value((8,), mesh=mesh, spec=P("x")),
    ...                "the carry of the scan")
    >>> check_one_type(Value((8,), mesh=mesh, spec=P("x")), Value((8,), mesh=mesh, spec=P("y")),
    ...                "carry 0 of the scan", "body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [LOOP-1]: carry 0 of the scan must have one type: it is float32[8] split P('x') in and float32[8] split P('y') out (at body[1]); they differ in the split over Explicit axes. Give the loop's initial carry the type its body returns (jax.sharding.reshard it, or jax.lax.pcast it to the varying axes), or reshard the body's result to the type it takes; a cond's branches must return results of one type.
    """
    differs = []
    if (given.shape, given.dtype) != (made.shape, made.dtype):
        differs.append("shape or dtype")
    if given.varying != made.varying:
        differs.append("varying manual axes")
    if given.mesh is not None and made.mesh is not None and (
            _explicit(given.mesh) or _explicit(made.mesh)) and (
            given.mesh != made.mesh or _split(given) != _split(made)):
        differs.append("the split over Explicit axes")
    if differs:
        raise reject(TypesDiffer(what, _short(given), _short(made), path,
                                 " and ".join(differs)))


def _one_type_pairs(eq: Any, operands: tuple[Value, ...]) -> list[tuple[Value, Value, str]]:
    """(the type in, the type out, what) of each carry of a loop and each result of a
    cond's branches (against branch 0's)."""
    if isinstance(eq, Scan):
        body, c = eq.body, eq.num_consts
        return [(operands[c + k], body.value_types[body.outputs[k]], f"carry {k} of the scan")
                for k in range(eq.num_carry)]
    if isinstance(eq, While):
        body, bc = eq.body_fun, eq.body_consts
        carry = operands[eq.cond_consts + bc:]
        return [(v, body.value_types[body.outputs[k]], f"carry {k} of the while loop")
                for k, v in enumerate(carry)]
    first = eq.branches[0]
    return [(first.value_types[n], branch.value_types[m], f"result {j} of branch {i} of the cond")
            for i, branch in enumerate(eq.branches[1:], 1)
            for j, (n, m) in enumerate(zip(first.outputs, branch.outputs))]


# --------------------------------------------------------------------------- tracing

@TRACING.register("bodies")
def _trace_bodies(eq: Any, operands: tuple[Value, ...], context: Mesh | None, path: str,
                  decided: list, seen: dict) -> None:
    """A loop's or a branching equation's bodies, each traced as a jit without options
    is: every constraint, device_put, reshard, nested jit and shard_map inside checked;
    then its carry's or its branches' types matched (LOOP-1)."""
    trace_body(eq.body, context, f"{path}.{eq.kind}.", decided, seen)
    with staged("trace"), located(path):
        for given, made, what in _one_type_pairs(eq, operands):
            check_one_type(given.type, made.type, what, path)


@IN_SHARD_MAP.register("bodies")
def _walk_bodies(eq: Any, operands: tuple[Value, ...], context: Any, path: str,
                 decided: list) -> None:
    """Inside a shard_map's body: each of its bodies walked as the shard_map's is."""
    walk_body(eq.body, context, f"{path}.{eq.kind}.", decided)
