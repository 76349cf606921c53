"""The result type over Explicit axes of a primitive that changes a dimension's size
(PROG-9) or scans along one (PROG-10), where JAX traces it.

JAX 0.10.2 types a ``slice`` (``a[1:5]``, ``a[0]``), a ``dynamic_slice``, a ``pad`` and a
``split`` by the operand's split: each result keeps it, so a dimension whose size the
primitive changes must stay divisible by the number of devices its split spreads it over,
and where it does not JAX refuses the call while tracing (a ShardingTypeError: ``a[0:3]``
of an ``f32[8@x]`` over ``x`` of size 2). A cumulative reduction (``cumsum``,
``cumprod``, ``cummax``, ``cummin``, ``cumlogsumexp``) keeps its operand's split too, and
JAX refuses one that scans along a dimension split over Explicit axes. Reshard the operand
(or slice whole shards) to make the call typed.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.rules import Failure, reject, rule
from .primitives import TRACING

__all__ = ["check_resized_split", "check_scanned_split", "IndivisibleResult",
           "ScannedSplit"]


@dataclasses.dataclass(frozen=True)
class IndivisibleResult(Failure, rule="PROG-9", error=Exception,
                        jax_error="ShardingTypeError"):
    template = ("the {primitive} makes dimension {dim} of size {size}, which its split "
                "{entry!r} over {ways} devices does not divide (its operand is typed {split})")
    hint = ("Reshard the operand (jax.sharding.reshard) so that the dimension is unsplit, or "
            "make the result's size a multiple of the devices it is split over.")
    primitive: str
    dim: int
    size: int
    entry: Any
    ways: int
    split: str


@dataclasses.dataclass(frozen=True)
class ScannedSplit(Failure, rule="PROG-10", error=Exception, jax_error="ShardingTypeError"):
    template = ("the {primitive} scans along dimension {axis}, which its operand splits over "
                "{entry!r} (its operand is typed {split})")
    hint = ("Reshard the operand (jax.sharding.reshard) so that the scanned dimension is "
            "unsplit.")
    primitive: str
    axis: int
    entry: Any
    split: str


def _split(value: Any) -> tuple:
    """``value``'s split over Explicit axes, one entry per dimension (None: unsplit)."""
    spec = tuple(value.spec or ()) if value.mesh is not None else ()
    return tuple(spec[d] if d < len(spec) else None for d in range(len(value.shape)))


def _ways(value: Any, entry: Any) -> int:
    """The number of devices a split ``entry`` of ``value``'s type spreads a dimension over."""
    names = entry if isinstance(entry, tuple) else (entry,)
    return math.prod(value.mesh.shape[n] for n in names)


@rule("PROG-9", mirrors="jax._src.lax.slicing._get_sharding_for_varying_out_shape")
def check_resized_split(primitive: str, operand: Any, shapes: tuple, path: str = "") -> None:
    """A slice, dynamic_slice, pad or split that resizes a dimension its operand splits over Explicit axes is refused while tracing where the split does not divide the new size (ShardingTypeError); each result keeps the operand's split.

    ``operand`` is the operand's type, ``shapes`` the results' shapes.

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> x = dataclasses.replace(Value.typed((8, 16), mesh=mesh), spec=P("x"))
    >>> check_resized_split("slice", x, ((4, 3),))
    >>> check_resized_split("slice", x, ((3, 16),), path="body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-9] at body[1]: the slice makes dimension 0 of size 3, which its split 'x' over 2 devices does not divide (its operand is typed ('x', None)). Reshard the operand (jax.sharding.reshard) so that the dimension is unsplit, or make the result's size a multiple of the devices it is split over.
    """
    split = _split(operand)
    for shape in shapes:
        if len(shape) != len(operand.shape):
            continue   # (a rank JAX's shape rule refuses first: not a type's split)
        for d, (was, size, entry) in enumerate(zip(operand.shape, shape, split)):
            # A dimension the primitive resizes stays divisible by its split
            if was != size and entry is not None and size % _ways(operand, entry):
                raise reject(IndivisibleResult(primitive, d, size, entry,
                                               _ways(operand, entry), repr(split)),
                             path or None)


@rule("PROG-10", mirrors="jax._src.lax.control_flow.loops._cumred_sharding_rule")
def check_scanned_split(primitive: str, operand: Any, axis: int, path: str = "") -> None:
    """A cumulative reduction along a dimension its operand splits over Explicit axes is refused while tracing (ShardingTypeError); along an unsplit one its result keeps the operand's split.

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> x = dataclasses.replace(Value.typed((8, 16), mesh=mesh), spec=P("x"))
    >>> check_scanned_split("cumsum", x, 1)
    >>> check_scanned_split("cumsum", x, 0, path="body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-10] at body[0]: the cumsum scans along dimension 0, which its operand splits over 'x' (its operand is typed ('x', None)). Reshard the operand (jax.sharding.reshard) so that the scanned dimension is unsplit.
    """
    split = _split(operand)
    # The scanned dimension is unsplit
    if 0 <= axis < len(split) and split[axis] is not None:
        raise reject(ScannedSplit(primitive, axis, split[axis], repr(split)), path or None)


@TRACING.register("resized")
def _trace_resized(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                   seen: dict) -> None:
    """A slice's, dynamic_slice's, pad's or split's result type where traced (PROG-9)."""
    results = eq.results or ()
    if operands and results:
        check_resized_split(str(eq.primitive), operands[0],
                            tuple(tuple(r.shape) for r in results), path)


@TRACING.register("scanned")
def _trace_scanned(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                   seen: dict) -> None:
    """A cumulative reduction's result type where traced (PROG-10)."""
    axis = dict(eq.params).get("axis")
    if operands and isinstance(axis, int):
        check_scanned_split(str(eq.primitive), operands[0], axis, path)
