"""The result type over Explicit axes of a primitive that changes a dimension's size
(PROG-9), scans along one (PROG-10), reshapes its operand (PROG-12) or gathers from it
(PROG-13), where JAX traces it.

JAX 0.10.2 types a ``slice`` (``a[1:5]``, ``a[0]``), a ``dynamic_slice``, a ``pad`` and a
``split`` by the operand's split: each result keeps it, so a dimension whose size the
primitive changes must stay divisible by the number of devices its split spreads it over,
and where it does not JAX refuses the call while tracing (a ShardingTypeError: ``a[0:3]``
of an ``f32[8@x]`` over ``x`` of size 2). A cumulative reduction (``cumsum``,
``cumprod``, ``cummax``, ``cummin``, ``cumlogsumexp``) keeps its operand's split too, and
JAX refuses one that scans along a dimension split over Explicit axes. Reshard the operand
(or slice whole shards) to make the call typed.

A ``reshape`` of a split operand is typed only where it adds or drops size-1 dimensions,
splits one dimension into several (its split dealt to the leading ones, each dividing) or
merges several into one (only the leading ones split); any other reshape is refused
(``(8, 16)`` split ``('x', None)`` reshaped to ``(4, 32)``). A ``gather`` (``jnp.take``,
``a[idx]``) is typed only where every dimension it indexes into is unsplit or taken whole,
its indices are split along their batching dimensions alone, and those agree with the
operand's; its result keeps the splits of the dimensions it takes whole and of the indices.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.rules import Failure, reject, rule
from .contraction import explicit_split
from .primitives import TRACING
from .sharding_factors import dimension_numbers

__all__ = ["check_resized_split", "check_scanned_split", "IndivisibleResult",
           "ScannedSplit", "reshaped_split", "UnsupportedReshape", "gathered_split",
           "AmbiguousGather"]


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


@dataclasses.dataclass(frozen=True)
class UnsupportedReshape(Failure, rule="PROG-12", error=Exception,
                         jax_error="ShardingTypeError"):
    template = ("the reshape of {shape} (typed {split}) to {new_sizes} neither only adds or "
                "drops size-1 dimensions, nor splits one dimension whose split its leading "
                "factors divide, nor merges dimensions only the leading of which are split")
    hint = ("Reshard the operand (jax.sharding.reshard) so that the reshaped dimensions are "
            "unsplit, or give the result's sharding (jax.lax.reshape's out_sharding).")
    shape: tuple
    new_sizes: tuple
    split: str


@dataclasses.dataclass(frozen=True)
class AmbiguousGather(Failure, rule="PROG-13", error=Exception,
                      jax_error="ShardingTypeError"):
    template = ("the gather from an operand typed {split} with indices typed {indices} {why}")
    hint = ("Reshard the operand or the indices (jax.sharding.reshard) so that they are "
            "unsplit there, or give the result's sharding (.at[...].get(out_sharding=)).")
    split: str
    indices: str
    why: str


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
    split = explicit_split(operand)
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
    split = explicit_split(operand)
    # The scanned dimension is unsplit
    if 0 <= axis < len(split) and split[axis] is not None:
        raise reject(ScannedSplit(primitive, axis, split[axis], repr(split)), path or None)


def _entry(axes: list) -> Any:
    """A dimension's split entry from the axes it is split over, in order."""
    return None if not axes else axes[0] if len(axes) == 1 else tuple(axes)


def _deal(operand: Any, axes: tuple, sizes: tuple) -> tuple | None:
    """The axes of one split dealt to consecutive dimensions of ``sizes``, leading first,
    each taking axes while its size left is above 1 (None: an axis does not divide it, or
    axes are left over)."""
    left, entries = list(axes), []
    for size in sizes:
        taken = []
        while size > 1 and left:
            size, rest = divmod(size, operand.mesh.shape[left[0]])
            if rest:
                return None
            taken.append(left.pop(0))
        entries.append(_entry(taken))
    return None if left else tuple(entries)


def _axes(entry: Any) -> tuple:
    return () if entry is None else entry if isinstance(entry, tuple) else (entry,)


def _regrouped(operand: Any, split: tuple, new: tuple, dimensions: Any) -> tuple | None:
    """The split of a reshape that splits one dimension or merges several (the shapes'
    common leading and trailing dimensions kept), or None where it does neither."""
    old = tuple(operand.shape)
    lo = 0
    while lo < min(len(old), len(new)) and old[lo] == new[lo]:
        lo += 1
    hi = 0
    while hi < min(len(old), len(new)) - lo and old[-1 - hi] == new[-1 - hi]:
        hi += 1
    group, into = split[lo:len(old) - hi], new[lo:len(new) - hi]
    if not ((len(group) == 1 and len(into) > 1) or (len(group) > 1 and len(into) == 1)):
        return None
    if all(e is None for e in group):
        middle = (None,) * len(into)
    elif dimensions is not None:
        return None   # (a reshape given dimensions: JAX types none of a split group)
    elif len(group) == 1:
        middle = _deal(operand, _axes(group[0]), into)
    else:
        kept = list(group)
        while kept[-1] is None:
            kept.pop()
        middle = None if None in kept else _deal(
            operand, tuple(a for e in kept for a in _axes(e)), into)
    return None if middle is None else split[:lo] + middle + split[len(old) - hi:]


@rule("PROG-12", mirrors="jax._src.lax.lax._reshape_sharding_rule")
def reshaped_split(operand: Any, new_sizes: tuple, dimensions: Any = None,
                   path: str = "") -> tuple:
    """A reshape of an operand split over Explicit axes is refused while tracing (ShardingTypeError) unless it only adds or drops size-1 dimensions, splits a dimension its split's axes divide in order, or merges dimensions split only in the leading ones.

    Returns the result's split, one entry per dimension.

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> x = dataclasses.replace(Value.typed((8, 16), mesh=mesh), spec=P("x"))
    >>> reshaped_split(x, (128,)), reshaped_split(x, (2, 4, 16)), reshaped_split(x, (8, 1, 16))
    (('x',), ('x', None, None), ('x', None, None))
    >>> reshaped_split(x, (4, 32), path="body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-12] at body[1]: the reshape of (8, 16) (typed ('x', None)) to (4, 32) neither only adds or drops size-1 dimensions, nor splits one dimension whose split its leading factors divide, nor merges dimensions only the leading of which are split. Reshard the operand (jax.sharding.reshard) so that the reshaped dimensions are unsplit, or give the result's sharding (jax.lax.reshape's out_sharding).
    """
    split, new = explicit_split(operand), tuple(int(s) for s in new_sizes)
    if all(e is None for e in split):
        return (None,) * len(new)
    # Only size-1 dimensions added or dropped: the others keep their splits, in order
    if [s for s in operand.shape if s != 1] == [s for s in new if s != 1]:
        kept = iter(e for s, e in zip(operand.shape, split) if s != 1)
        return tuple(None if s == 1 else next(kept) for s in new)
    # One dimension split, or several merged, its split dealt to the leading dimensions
    regrouped = _regrouped(operand, split, new, dimensions)
    if regrouped is None:
        raise reject(UnsupportedReshape(tuple(operand.shape), new, repr(split)), path or None)
    return regrouped


_GATHER_FIELDS = ("offset_dims", "collapsed_slice_dims", "start_index_map",
                  "operand_batching_dims", "start_indices_batching_dims")


def _gather_refusal(split: tuple, index: list, n: dict, sizes: tuple, shape: tuple
                    ) -> str | None:
    """Why JAX cannot type a gather's result from its operand's and indices' splits."""
    for d in n["start_index_map"]:
        if split[d] is not None and sizes[d] != shape[d]:
            return (f"indexes into dimension {d}, split over {split[d]!r}, taking {sizes[d]} "
                    f"of {shape[d]}")
    for d, i in zip(n["operand_batching_dims"], n["start_indices_batching_dims"]):
        if None not in (split[d], index[i]) and split[d] != index[i]:
            return f"batches dimension {d} over {split[d]!r} and its indices over {index[i]!r}"
    for i, e in enumerate(index):
        if e is not None and i not in n["start_indices_batching_dims"]:
            return f"has its indices split over {e!r} along their dimension {i}"
    return None


@rule("PROG-13", mirrors="jax._src.lax.slicing._gather_sharding_rule")
def gathered_split(operand: Any, indices: Any, numbers: Any, slice_sizes: tuple,
                   path: str = "") -> tuple:
    """A gather is refused while tracing (ShardingTypeError) where it indexes part of a dimension split over Explicit axes, splits its indices outside their batching dimensions, or batches a dimension split differently in operand and indices.

    ``numbers`` are its dimension numbers (JAX's or their text). Returns the result's
    split: an offset dimension's its operand's, the others' its indices'.

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> x = dataclasses.replace(Value.typed((8, 16), mesh=mesh), spec=P("x"))
    >>> idx = Value.typed((3, 1), "int32", mesh=mesh)
    >>> take = dict(offset_dims=(0,), collapsed_slice_dims=(1,), start_index_map=(1,),
    ...             operand_batching_dims=(), start_indices_batching_dims=())
    >>> gathered_split(x, idx, take, (8, 1))
    ('x', None)
    >>> rows = dict(take, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
    >>> gathered_split(x, idx, rows, (1, 16), path="body[2]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-13] at body[2]: the gather from an operand typed ('x', None) with indices typed (None, None) indexes into dimension 0, split over 'x', taking 1 of 8. Reshard the operand or the indices (jax.sharding.reshard) so that they are unsplit there, or give the result's sharding (.at[...].get(out_sharding=)).
    """
    n = numbers if isinstance(numbers, dict) else dimension_numbers(numbers, _GATHER_FIELDS)
    split, index = explicit_split(operand), list(explicit_split(indices))
    sizes, shape = tuple(int(s) for s in slice_sizes), tuple(operand.shape)
    why = _gather_refusal(split, index, n, sizes, shape)
    if why is not None:
        raise reject(AmbiguousGather(repr(split), repr(tuple(index)), why), path or None)
    for d, i in zip(n["operand_batching_dims"], n["start_indices_batching_dims"]):
        index[i] = index[i] if index[i] is not None else split[d]
    taken = iter(split[d] for d in range(len(shape))
                 if d not in n["collapsed_slice_dims"] and d not in n["operand_batching_dims"])
    rest = iter(index)
    return tuple(next(taken) if d in n["offset_dims"] else next(rest)
                 for d in range(len(n["offset_dims"]) + len(index) - 1))


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


@TRACING.register("reshaped")
def _trace_reshaped(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                    seen: dict) -> None:
    """A reshape's result type where traced, unless given its sharding (PROG-12)."""
    params = dict(eq.params)
    if operands and params.get("sharding") is None and "new_sizes" in params:
        reshaped_split(operands[0], tuple(params["new_sizes"]), params.get("dimensions"),
                       path)


@TRACING.register("gathered")
def _trace_gathered(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                    seen: dict) -> None:
    """A gather's result type where traced (PROG-13)."""
    params = dict(eq.params)
    if len(operands) == 2 and "dimension_numbers" in params and "slice_sizes" in params:
        gathered_split(operands[0], operands[1], params["dimension_numbers"],
                       tuple(params["slice_sizes"]), path)
