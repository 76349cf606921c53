"""An elementwise operation's result type over Explicit axes (PROG-8), where JAX traces it.

JAX 0.10.2 types an n-ary elementwise primitive (``add``, ``mul``, a comparison ...) by its
broadcasting sharding rule: where two operands split one dimension over different
Explicit axes the result's split is not defined, so it refuses the call while tracing (a ShardingTypeError: ``x + y`` with ``x``
split ``P('x', 'y')`` and ``y`` split ``P('y', 'x')``). A dimension one operand splits and
another leaves unsplit is split in the result (no refusal), so the result may name one axis
on two dimensions, which no type may: JAX refuses that too (``f32[8@x,8] + f32[8,8@x]``;
"produces an illegally sharded result"), a lower-rank operand ``jnp`` broadcasts included
(its dimensions are the trailing ones, the leading ones unsplit); splits over different axes on
different dimensions (``P('x', None) + P(None, 'y')``) are typed ``P('x', 'y')``. A
``select_n`` (``jnp.where``)
is refused likewise where its cases are split differently or its predicate, not a scalar,
is split otherwise than they are. (JAX also refuses operands typed over two meshes; that
check is not stated here yet.) Reshard an operand to make
the splits agree.

Standard library only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, rule
from .contraction import axis_named_twice, explicit_split
from .primitives import TRACING

__all__ = ["check_elementwise_type", "MismatchedSplits"]


@dataclasses.dataclass(frozen=True)
class MismatchedSplits(Failure, rule="PROG-8", error=Exception,
                       jax_error="ShardingTypeError"):
    template = "the {primitive} {why}: its operands are typed {types}"
    hint = ("Reshard an operand (jax.sharding.reshard) so that the operands' types are "
            "split alike, or pass out_sharding= where the operation that made one takes it.")
    primitive: str
    why: str
    types: str


def _typed(value: Any) -> tuple:
    """What select_n compares of a case's type: its split."""
    return explicit_split(value)


@rule("PROG-8", mirrors="jax._src.lax.lax.broadcasting_sharding_rule")
def check_elementwise_type(primitive: str, operands: tuple, path: str = "") -> None:
    """An elementwise operation whose operands split one dimension over different Explicit axes, or whose result would split two dimensions over one axis, is refused while tracing (ShardingTypeError), as is a select_n whose cases are split differently.

    ``operands`` are the operands' types (for ``select_n``: the predicate, then the cases).

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> x = dataclasses.replace(Value.typed((8, 16), mesh=mesh), spec=P("x", "y"))
    >>> y = dataclasses.replace(x, spec=P("y", "x"))
    >>> check_elementwise_type("add", (x, dataclasses.replace(x, spec=P("x"))))
    >>> rows, columns = (dataclasses.replace(x, spec=P(*s)) for s in (("x",), (None, "x")))
    >>> check_elementwise_type("mul", (rows, columns))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-8]: the mul would split two dimensions of its result over 'x' (typed ('x', 'x')): its operands are typed (('x', None), (None, 'x')). Reshard an operand (jax.sharding.reshard) so that the operands' types are split alike, or pass out_sharding= where the operation that made one takes it.
    >>> check_elementwise_type("add", (x, y), path="body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-8] at body[1]: the add splits dimension 0 over different axes ('x' and 'y'): its operands are typed (('x', 'y'), ('y', 'x')). Reshard an operand (jax.sharding.reshard) so that the operands' types are split alike, or pass out_sharding= where the operation that made one takes it.
    """
    def refuse(why: str) -> None:
        types = tuple(explicit_split(v) for v in operands)
        raise reject(MismatchedSplits(primitive, why, repr(types)), path or None)
    if primitive == "select_n":
        _check_select(operands, refuse)
        return
    shaped = [v for v in operands if v.shape]
    if not shaped or len({len(v.shape) for v in shaped}) != 1:
        return   # scalars only, or ranks that differ (JAX's TypeError, not a type's split)
    result = []
    for d in range(len(shaped[0].shape)):
        split = [explicit_split(v)[d] for v in shaped]
        named = [e for e in split if e is not None]
        if any(e != named[0] for e in named[1:]):
            refuse(f"splits dimension {d} over different axes "
                   f"({' and '.join(repr(e) for e in dict.fromkeys(named))})")
        result.append(named[0] if named else None)
    twice = axis_named_twice(result)
    if twice is not None:
        refuse(f"would split two dimensions of its result over {twice!r} "
               f"(typed {tuple(result)!r})")


def _check_select(operands: tuple, refuse: Any) -> None:
    """select_n's cases typed alike (those over a mesh), its predicate a scalar or split
    as they are."""
    which, cases = operands[0], [v for v in operands[1:] if v.mesh is not None]
    if not cases:
        return
    if any(_typed(c) != _typed(cases[0]) for c in cases[1:]):
        refuse("has cases split differently")
    if which.shape and which.mesh is not None and _typed(which) != _typed(cases[0]):
        refuse("has a predicate split otherwise than its cases")


@TRACING.register("elementwise")
def _trace_elementwise(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                       seen: dict) -> None:
    """An elementwise equation's result type where JAX traces it (PROG-8)."""
    if len(operands) > 1:
        check_elementwise_type(str(getattr(eq, "primitive", "")), operands, path)
