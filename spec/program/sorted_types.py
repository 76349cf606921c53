"""A sort's operands over Explicit axes (PROG-14), where JAX traces it.

JAX 0.10.2 types a ``sort`` (``jnp.sort``, ``jnp.argsort``, ``lax.sort``, and the sort a
``vmap`` of one stages) by its operands' types: each operand typed over a mesh with
Explicit axes must leave the sorted dimension unsplit, and all such operands must be split
alike (their meshes and splits equal); otherwise it refuses the call while tracing (a
ShardingTypeError: ``jnp.sort(a, -1)`` of an ``f32[8, 8@y]``). The result keeps the
operands' split. Reshard the operand so that the sorted dimension is unsplit.

Standard library only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, rule
from ..core.values import AxisType
from .contraction import explicit_split
from .primitives import TRACING

__all__ = ["check_sort_type", "SplitSort"]


@dataclasses.dataclass(frozen=True)
class SplitSort(Failure, rule="PROG-14", error=Exception, jax_error="ShardingTypeError"):
    template = "the sort along dimension {dimension} {why}: its operands are typed {types}"
    hint = ("Reshard the operands (jax.sharding.reshard) so that the sorted dimension is "
            "unsplit and the operands are split alike.")
    dimension: int
    why: str
    types: str


def _over_explicit_axes(value: Any) -> bool:
    """Whether ``value``'s type is over a mesh with an Explicit axis (what JAX's sort reads)."""
    mesh = value.mesh
    return mesh is not None and AxisType.Explicit in tuple(mesh.axis_types)


@rule("PROG-14", mirrors="jax._src.lax.lax._sort_abstract_eval")
def check_sort_type(operands: tuple, dimension: int, path: str = "") -> None:
    """A sort whose operands typed over a mesh with Explicit axes split the sorted dimension, or are split differently, is refused while tracing (ShardingTypeError).

    ``operands`` are the operands' types (the keys, then the values sorted with them);
    operands over no mesh or a mesh without Explicit axes are not read.

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> x = dataclasses.replace(Value.typed((8, 16), mesh=mesh), spec=P("x"))
    >>> check_sort_type((x,), 1)
    >>> check_sort_type((x,), 0, path="body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-14] at body[1]: the sort along dimension 0 splits it over 'x': its operands are typed (('x', None),). Reshard the operands (jax.sharding.reshard) so that the sorted dimension is unsplit and the operands are split alike.
    """
    typed = [v for v in operands if _over_explicit_axes(v)]
    types = repr(tuple(explicit_split(v) for v in operands))
    for value in typed:
        split = explicit_split(value)
        # The sorted dimension is unsplit
        if 0 <= dimension < len(split) and split[dimension] is not None:
            raise reject(SplitSort(dimension, f"splits it over {split[dimension]!r}", types),
                         path or None)
        # Every operand over Explicit axes is split as the first is
        if (value.mesh, split) != (typed[0].mesh, explicit_split(typed[0])):
            raise reject(SplitSort(dimension, "has operands split differently", types),
                         path or None)


@TRACING.register("sorts")
def _trace_sort(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                seen: dict) -> None:
    """A sort's operands' types where JAX traces it (PROG-14)."""
    dimension = dict(eq.params).get("dimension")
    if operands and isinstance(dimension, int):
        check_sort_type(operands, dimension, path)
