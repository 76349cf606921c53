"""A convolution's operands (PROG-15) and a solve's (PROG-16) over Explicit axes, where JAX
traces them.

JAX 0.10.2 types a ``conv_general_dilated`` given no ``out_sharding`` by its operands: its
kernel (the rhs) must be unsplit over Explicit axes and its lhs's input-feature dimension
too, or JAX refuses the call while tracing (a ShardingTypeError asking for
``out_sharding``); the result then takes the lhs's split, dimension by dimension, so a
dimension the convolution resizes stays divisible by the devices its split spreads it
over (PROG-9, the check JAX shares with a slice). A ``triangular_solve`` (by a rule of
its own), a ``tridiagonal_solve`` and the one-operand factorizations (``cholesky``,
``qr``, ``eigh``, ``svd``, ``lu``, ``eig``, ``schur``, ``hessenberg``, ``tridiagonal``:
JAX's ``linalg_sharding_rule``) are typed alike: their operands' batch dimensions (those
before each operand's matrix or vector dimensions) split alike, and the dimensions the
primitive contracts or factors unsplit (every non-batch one but for
``triangular_solve``'s kept ones); ``triangular_solve``'s result keeps ``a``'s kept
dimension's split and ``b``'s, the others' results the batch's alone.

Standard library only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, rule
from .contraction import explicit_split
from .primitives import FACTORIZATIONS, TRACING
from .structural_types import check_resized_split

__all__ = ["check_conv_type", "check_linalg_type", "linalg_contracted", "SplitConvolution",
           "SplitLinalg", "conv_lhs_feature"]


@dataclasses.dataclass(frozen=True)
class SplitConvolution(Failure, rule="PROG-15", error=Exception,
                       jax_error="ShardingTypeError"):
    template = ("the conv_general_dilated {why}, so JAX cannot type its result: its lhs is "
                "typed {lhs} and its rhs {rhs}")
    hint = ("Pass out_sharding= to lax.conv_general_dilated, or reshard (jax.sharding."
            "reshard) the kernel unsplit and the lhs's feature dimension unsplit.")
    why: str
    lhs: str
    rhs: str


@dataclasses.dataclass(frozen=True)
class SplitLinalg(Failure, rule="PROG-16", error=Exception, jax_error="ShardingTypeError"):
    template = "the {primitive} {why}: its operands are typed {types}"
    hint = ("Reshard the operands (jax.sharding.reshard) so that their batch dimensions are "
            "split alike and the dimensions the primitive reads whole are unsplit.")
    primitive: str
    why: str
    types: str


@rule("PROG-15", mirrors="jax._src.lax.convolution._conv_general_dilated_sharding_rule")
def check_conv_type(lhs: Any, rhs: Any, feature: int, path: str = "") -> None:
    """A conv_general_dilated given no out_sharding whose rhs is split over Explicit axes, or whose lhs splits its input-feature dimension, is refused while tracing (ShardingTypeError).

    ``feature`` is the lhs's input-feature dimension (its dimension numbers' second).

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> lhs = dataclasses.replace(Value.typed((4, 2, 8), mesh=mesh), spec=P("x"))
    >>> kernel = dataclasses.replace(Value.typed((4, 2, 3), mesh=mesh), spec=P())
    >>> check_conv_type(lhs, kernel, 1)
    >>> check_conv_type(lhs, dataclasses.replace(kernel, spec=P("y")), 1, path="body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-15] at body[0]: the conv_general_dilated has its rhs split over Explicit axes, so JAX cannot type its result: its lhs is typed ('x', None, None) and its rhs ('y', None, None). Pass out_sharding= to lax.conv_general_dilated, or reshard (jax.sharding.reshard) the kernel unsplit and the lhs's feature dimension unsplit.
    """
    left, right = explicit_split(lhs), explicit_split(rhs)
    why = None
    if any(e is not None for e in right):
        why = "has its rhs split over Explicit axes"
    elif 0 <= feature < len(left) and left[feature] is not None:
        why = f"splits its lhs's input-feature dimension {feature} over {left[feature]!r}"
    if why is not None:
        raise reject(SplitConvolution(why, repr(left), repr(right)), path or None)


def linalg_contracted(primitive: str, params: dict) -> tuple | None:
    """Per operand, (its rank past the batch, the dimensions of those it must leave
    unsplit), for a primitive JAX types by a linear-algebra rule; None for another."""
    if primitive in FACTORIZATIONS:
        return ((2, (0, 1)),)
    if primitive == "tridiagonal_solve":
        return ((1, (0,)),) * 3 + ((2, (0, 1)),)
    if primitive == "triangular_solve":
        left, transposed = bool(params.get("left_side")), bool(params.get("transpose_a"))
        return ((2, (int(left ^ transposed),)), (2, (int(not left),)))
    return None


@rule("PROG-16", mirrors="jax._src.lax.linalg.linalg_sharding_rule")
def check_linalg_type(primitive: str, operands: tuple, contracted: tuple, path: str = ""
                     ) -> None:
    """A solve or factorization (triangular_solve, tridiagonal_solve, cholesky, qr, eigh, svd, lu and kin) whose operands split their batch dimensions differently over Explicit axes, or split a matrix dimension it reads whole, is refused while tracing (ShardingTypeError).

    ``contracted`` holds, per operand, its rank past the batch and which of those
    dimensions must be unsplit (:func:`linalg_contracted`).

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> a = dataclasses.replace(Value.typed((8, 8), mesh=mesh), spec=P("y"))
    >>> b = dataclasses.replace(Value.typed((8, 3), mesh=mesh), spec=P())
    >>> numbers = linalg_contracted("triangular_solve", {"left_side": True})
    >>> check_linalg_type("triangular_solve", (a, b), numbers)
    >>> check_linalg_type("triangular_solve", (b, a), numbers, path="body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-16] at body[0]: the triangular_solve splits operand 1's dimension 0, which it reads whole, over 'y': its operands are typed ((None, None), ('y', None)). Reshard the operands (jax.sharding.reshard) so that their batch dimensions are split alike and the dimensions the primitive reads whole are unsplit.
    """
    splits = [explicit_split(v) for v in operands]
    types = repr(tuple(splits))
    batches = [s[:len(s) - rank] for s, (rank, _) in zip(splits, contracted)]
    if any(b != batches[0] for b in batches):
        raise reject(SplitLinalg(primitive, "has operands whose batch dimensions are split "
                                "differently", types), path or None)
    for i, (split, (rank, dims)) in enumerate(zip(splits, contracted)):
        own = split[len(split) - rank:]
        for d in dims:
            if d < len(own) and own[d] is not None:
                where = len(split) - rank + d
                raise reject(SplitLinalg(primitive, f"splits operand {i}'s dimension {where}, "
                                        f"which it reads whole, over {own[d]!r}", types),
                             path or None)


def conv_lhs_feature(numbers: Any) -> int | None:
    """The lhs's input-feature dimension of a convolution's dimension numbers as the
    description holds them, or None where unreadable."""
    from .batching_folded import conv_dimension_numbers

    read = conv_dimension_numbers(numbers)
    return None if read is None else read[0][1]


@TRACING.register("conv_types")
def _trace_conv(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                seen: dict) -> None:
    """A convolution's operands' types where JAX traces it (PROG-15, then PROG-9)."""
    params = dict(eq.params)
    feature = conv_lhs_feature(params.get("dimension_numbers"))
    if len(operands) != 2 or feature is None or params.get("out_sharding") is not None:
        return
    check_conv_type(operands[0], operands[1], feature, path)
    check_resized_split("conv_general_dilated", operands[0],
                        tuple(r.type.shape for r in eq.results), path)


@TRACING.register("solve_types")
def _trace_solve(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                 seen: dict) -> None:
    """A solve's or a factorization's operands' types where JAX traces it (PROG-16)."""
    contracted = linalg_contracted(eq.primitive, dict(eq.params))
    if contracted is not None and len(operands) == len(contracted):
        check_linalg_type(eq.primitive, operands, contracted, path)
