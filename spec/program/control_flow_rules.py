"""The rules of the control-flow kinds of equation (:mod:`control_flow`), registered in
every rewrite that has one for them: their typing (PROG-1), their checks where JAX traces
them (each body traced as a jit's is), inside a shard_map's body, and what vmap and AD do
with them.

Remat and the custom-derivative calls are jits without options to the rewrites (their
entries name the jit's rules); a loop and a branching equation have rules of their own
here.
"""

from __future__ import annotations

from typing import Any

from ..core.values import Mesh
from .control_flow import Cond, Scan, While, stacked
from .description import Value
from .explain import trace_body
from .primitives import BATCHING, IN_SHARD_MAP, TRACING, TYPING
from .shardmap import walk_body
from .typed_values import check_program

__all__ = ["scan_results", "while_results", "cond_results"]


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


# --------------------------------------------------------------------------- tracing

@TRACING.register("bodies")
def _trace_bodies(eq: Any, operands: tuple[Value, ...], context: Mesh | None, path: str,
                  decided: list, seen: dict) -> None:
    """A loop's or a branching equation's bodies, each traced as a jit without options
    is: every constraint, device_put, reshard, nested jit and shard_map inside checked."""
    trace_body(eq.body, context, f"{path}.{eq.kind}.", decided, seen)


@IN_SHARD_MAP.register("bodies")
def _walk_bodies(eq: Any, operands: tuple[Value, ...], context: Any, path: str,
                 decided: list) -> None:
    """Inside a shard_map's body: each of its bodies walked as the shard_map's is."""
    walk_body(eq.body, context, f"{path}.{eq.kind}.", decided)


# --------------------------------------------------------------------------- rewrites

@BATCHING.register("control_flow")
def _batch_refused(rw: Any, eq: Any, numbers: tuple, dims: tuple, path: str) -> None:
    check_program(False, f"the {eq.kind} at {path} under vmap",
                  "an equation whose batching the spec knows (vmap of scan, while and "
                  "cond is not written yet)", dims)
