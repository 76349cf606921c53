"""How ``vmap`` batches the primitives JAX batches by folding the batch into another
dimension (issue 32): a convolution, ``triangular_solve`` and ``tridiagonal_solve``.

JAX 0.10.2's batching rules for these bind the primitive once over the whole batch by
reshaping it into one of the operand's own dimensions and out of the result's; each rule
here stages the same reshapes and transposes onto the body being batched
(:class:`~shardlaw.spec.program.batching_rules.BatchedBody`), typed as JAX types them, so
tracing's checks of them (PROG-12 for a reshape of a split dimension) apply where JAX's do:

* ``conv_general_dilated``: an lhs batched alone has its batch folded into its batch
  dimension (with ``batch_group_count``: into each group), an rhs batched alone into its
  output-feature dimension (with groups: inside each group), both batched into the lhs's
  feature dimension (or batch dimension, with ``batch_group_count``) and the rhs's output
  features, the groups multiplied by the batch; the result's batch axis is the output's
  batch dimension (lhs alone) or feature dimension;
* ``triangular_solve``: where only ``b`` is batched, its batch moved last (left side: the
  columns) or next to last (right side: the rows) and folded into that dimension; else
  both operands batched first, an unbatched one broadcast split as the batch;
* ``tridiagonal_solve``: where only ``b`` is batched, its batch folded into its columns;
  else every operand batched first, an unbatched one broadcast unsplit.

A result's type follows the primitive's sharding rule in JAX: a convolution's is its
lhs's (over Explicit axes only where its rhs is unsplit and its lhs's feature dimension
too); a solve's operands share their batch dimensions' split, their other dimensions
unsplit. Where JAX's sharding rule would refuse (ShardingTypeError) the spec does not
state it yet: the batching is refused as not described (PROG-0, an abstention), as is a
convolution given ``out_sharding``.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any

from ..core.rules import Rejection
from ..core.values import PartitionSpec
from .batching_primitives import at_front, batch_size, moved_to
from .batching_rules import BatchedBody, batch_entry
from .contraction import explicit_split
from .description import Opaque, Value, check_program
from .primitives import BATCHING
from .structural_types import reshaped_split

__all__ = ["reshape_into", "reshape_out_of", "conv_dimension_numbers"]


def _params(eq: Opaque) -> dict:
    return dict(eq.params)


def _reshaped(rw: BatchedBody, number: int, new_sizes: tuple, dimensions: Any = None) -> int:
    """A reshape of ``number`` to ``new_sizes`` (JAX's ``lax.reshape``: ``dimensions`` its
    operand's order first, None where that is the identity), typed by its split (PROG-12;
    unsplit where tracing refuses it, which explain then does at its path)."""
    value = rw.types[number]
    new = tuple(int(s) for s in new_sizes)
    if dimensions is not None and tuple(dimensions) == tuple(range(len(value.shape))):
        dimensions = None
    try:
        split = reshaped_split(value, new, dimensions)
    except Rejection:
        split = (None,) * len(new)
    spec = value.spec
    if value.mesh is not None and spec is not None:
        spec = PartitionSpec(*split, unreduced=spec.unreduced, reduced=spec.reduced)
    result = dataclasses.replace(value.type, shape=new, spec=spec)
    params = (("dimensions", None if dimensions is None else tuple(dimensions)),
              ("new_sizes", new), ("sharding", None))
    rw.add(Opaque((number,), (result,), primitive="reshape", params=params), (None,))
    return len(rw.types) - 1


def reshape_into(rw: BatchedBody, src: int, dst: int, number: int) -> int:
    """Dimension ``src`` of ``number`` folded into dimension ``dst`` (numbered once ``src``
    is gone), as its major part (JAX's ``_reshape_axis_into``)."""
    shape = list(rw.types[number].shape)
    perm = [i for i in range(len(shape)) if i != src]
    perm.insert(dst, src)
    new = [s for i, s in enumerate(shape) if i != src]
    new[dst] *= shape[src]
    return _reshaped(rw, number, tuple(new), tuple(perm))


def reshape_out_of(rw: BatchedBody, src: int, size: int, number: int) -> int:
    """Dimension ``src`` of ``number`` split into ``size`` and the rest, ``size`` major
    (JAX's ``_reshape_axis_out_of``)."""
    shape = list(rw.types[number].shape)
    shape[src:src + 1] = [size, shape[src] // size]
    return _reshaped(rw, number, tuple(shape))


def _moveaxis(rw: BatchedBody, number: int, source: int, target: int) -> int:
    """JAX's ``batching.moveaxis``: the value itself where the axis is there already."""
    rank = len(rw.types[number].shape)
    target = target % rank
    return number if source == target else moved_to(rw, number, source, target)


def _typed_result(eq: Opaque, shape: tuple, like: Value, split: tuple, varying: Any
                  ) -> Value:
    """The primitive's result of ``shape`` over ``like``'s mesh, split as ``split``."""
    result = eq.results[0].type
    spec = like.spec
    if like.mesh is not None and spec is not None:
        spec = PartitionSpec(*split, unreduced=spec.unreduced, reduced=spec.reduced)
    elif like.mesh is None:
        spec = result.spec
    return dataclasses.replace(result, shape=tuple(shape), mesh=like.mesh, spec=spec,
                               varying=result.varying | varying)


def _bound(rw: BatchedBody, eq: Opaque, operands: tuple, params: dict, result: Value) -> int:
    rw.add(dataclasses.replace(eq, operands=tuple(operands), results=(result,),
                               params=tuple(sorted(params.items()))), (None,))
    return len(rw.types) - 1


def _undescribed(condition: bool, eq: Opaque, path: str, expected: str, got: Any) -> None:
    check_program(condition, f"the {eq.primitive} at {path} under vmap", expected, got)


# --------------------------------------------------------------------------- convolution

_SPECS = re.compile(r"(lhs_spec|rhs_spec|out_spec)=(\([^)]*\))")


def conv_dimension_numbers(given: Any) -> tuple[tuple, tuple, tuple] | None:
    """A convolution's (lhs, rhs, out) dimension numbers as the description holds them (a
    ``ConvDimensionNumbers`` spelled as text, or three tuples); None where unreadable."""
    if isinstance(given, tuple) and len(given) == 3:
        return tuple(tuple(int(a) for a in spec) for spec in given)
    found = dict(_SPECS.findall(str(given)))
    if set(found) != {"lhs_spec", "rhs_spec", "out_spec"}:
        return None
    return tuple(tuple(ast.literal_eval(found[k])) for k in ("lhs_spec", "rhs_spec",
                                                              "out_spec"))


def _conv(rw: BatchedBody, eq: Opaque, lhs: int, rhs: int, params: dict, axis: int,
          size: int, path: str) -> int:
    """The convolution over the folded operands, its result's dimension ``axis`` the
    batch times the example's, typed by JAX's sharding rule: its lhs's split (PROG-0
    where that rule would refuse)."""
    left, right = rw.types[lhs], rw.types[rhs]
    lhs_spec = conv_dimension_numbers(params["dimension_numbers"])[0]
    _undescribed(all(e is None for e in explicit_split(right)) and
                 explicit_split(left)[lhs_spec[1]] is None, eq, path,
                 "an rhs unsplit over Explicit axes and an lhs whose feature dimension is "
                 "(JAX's sharding rule refuses others, ShardingTypeError, not stated yet)",
                 (explicit_split(left), explicit_split(right)))
    shape = list(eq.results[0].shape)
    shape[axis] *= size
    split = explicit_split(left)
    _undescribed(all(e is None or old == new for e, old, new in
                     zip(split, left.shape, shape)), eq, path, "a result whose resized "
                 "dimensions are unsplit (JAX's sharding rule checks their divisibility, "
                 "not stated yet)", split)
    result = _typed_result(eq, shape, left, split, rw.axis.varying)
    return _bound(rw, eq, (lhs, rhs), params, result)


@BATCHING.register("conv_general_dilated")
def _batch_conv(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                ) -> None:
    """A convolution under vmap, as JAX's rule folds the batch (module docstring)."""
    params = _params(eq)
    numbers_read = conv_dimension_numbers(params.get("dimension_numbers"))
    _undescribed(len(numbers) == 2 and numbers_read is not None and
                 params.get("out_sharding") is None, eq, path,
                 "two operands held, dimension numbers read and no out_sharding",
                 (numbers, params.get("dimension_numbers"), params.get("out_sharding")))
    (L, R, O), (lhs, rhs), (ld, rd) = numbers_read, numbers, dims
    size = batch_size(rw, numbers, dims)
    features, groups = int(params["feature_group_count"]), int(params["batch_group_count"])
    if ld is not None and rd is not None:
        if groups > 1:
            lhs, params["batch_group_count"] = reshape_into(rw, ld, L[0], lhs), groups * size
        else:
            lhs = reshape_into(rw, ld, L[1], lhs)
            params["feature_group_count"] = features * size
        rhs = reshape_into(rw, rd, R[0], rhs)
        out = _conv(rw, eq, lhs, rhs, params, O[1], size, path)
        reshape_out_of(rw, O[1], size, out)
        return _batched_last(rw, O[1])
    if ld is not None:
        if groups > 1:
            lhs = reshape_out_of(rw, L[0] + int(ld <= L[0]), groups, lhs)
            lhs = reshape_into(rw, ld + int(L[0] < ld), L[0] + 1, lhs)
            lhs = reshape_into(rw, L[0], L[0], lhs)
        else:
            lhs = reshape_into(rw, ld, L[0], lhs)
        out = _conv(rw, eq, lhs, rhs, params, O[0], size, path)
        reshape_out_of(rw, O[0], size, out)
        return _batched_last(rw, O[0])
    if features == 1 and groups == 1:
        out = _conv(rw, eq, lhs, reshape_into(rw, rd, R[0], rhs), params, O[1], size, path)
        reshape_out_of(rw, O[1], size, out)
        return _batched_last(rw, O[1])
    group = features if features > 1 else groups
    rhs = reshape_out_of(rw, R[0] + int(rd <= R[0]), group, rhs)
    rhs = reshape_into(rw, rd + int(R[0] < rd), R[0] + 1, rhs)
    rhs = reshape_into(rw, R[0], R[0], rhs)
    out = _conv(rw, eq, lhs, rhs, params, O[1], size, path)
    out = reshape_out_of(rw, O[1], group, out)
    out = reshape_out_of(rw, O[1] + 1, size, out)
    reshape_into(rw, O[1], O[1] + 1, out)
    return _batched_last(rw, O[1])


def _batched_last(rw: BatchedBody, d: int) -> None:
    """The last value added is the batched result, its batch axis ``d``."""
    rw.dims[-1] = d


# --------------------------------------------------------------------------- solves

def _solve_split(eq: Opaque, operands: tuple, ranks: tuple, path: str) -> tuple:
    """The split JAX's linear-algebra sharding rule gives the result: the operands' batch
    dimensions' (the leading ones past each operand's ``ranks``), which they share, their
    other dimensions unsplit (PROG-0 where they do not: JAX refuses, not stated yet)."""
    splits = [explicit_split(v) for v in operands]
    batches = [s[:len(s) - r] for s, r in zip(splits, ranks)]
    _undescribed(all(b == batches[0] for b in batches) and all(
        e is None for s, r in zip(splits, ranks) for e in s[len(s) - r:]), eq, path,
        "operands sharing their batch dimensions' split over Explicit axes, their "
        "others unsplit (JAX's sharding rule refuses others, ShardingTypeError, not "
        "stated yet)", splits)
    return batches[0]


@BATCHING.register("triangular_solve")
def _batch_triangular_solve(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple,
                            path: str) -> None:
    """A triangular_solve under vmap, as JAX's rule folds the batch (module docstring)."""
    params = _params(eq)
    _undescribed(len(numbers) == 2, eq, path, "two operands held", numbers)
    (a, b), (da, db) = numbers, dims
    size = batch_size(rw, numbers, dims)
    left = bool(params.get("left_side"))
    if da is None:
        b = _moveaxis(rw, b, db, -1 if left else -2)
        shape = tuple(rw.types[b].shape)
        flat = shape[:-2] + (shape[-2] * shape[-1],) if left else \
            shape[:-3] + (shape[-3] * shape[-2], shape[-1])
        folded = _reshaped(rw, b, flat)
        out = _solved(rw, eq, (a, folded), params, path)
        _reshaped(rw, out, shape)
        return _batched_last(rw, len(shape) - (1 if left else 2))
    entry = batch_entry(rw.axis)
    a, b = at_front(rw, a, da, size, entry), at_front(rw, b, db, size, entry)
    _solved(rw, eq, (a, b), params, path)
    _batched_last(rw, 0)


def _solved(rw: BatchedBody, eq: Opaque, operands: tuple, params: dict, path: str) -> int:
    """triangular_solve over ``operands``, typed by JAX's rule for it: the batch split
    shared, ``a``'s contracted dimension and ``b``'s unsplit, the result split as ``a``'s
    kept dimension and ``b``'s."""
    a, b = (rw.types[n] for n in operands)
    left, transposed = bool(params.get("left_side")), bool(params.get("transpose_a"))
    sa, sb = explicit_split(a), explicit_split(b)
    batch = sa[:-2]
    _undescribed(batch == sb[:-2] and sa[-2:][left ^ transposed] is None and
                 sb[-2:][not left] is None, eq, path, "operands sharing their batch "
                 "split, their contracted dimensions unsplit (JAX's sharding rule refuses "
                 "others, ShardingTypeError, not stated yet)", (sa, sb))
    kept = (sa[-2:][transposed], sb[-2:][1]) if left else (sb[-2:][0], sa[-2:][not transposed])
    result = _typed_result(eq, b.shape, a, batch + kept, rw.axis.varying)
    return _bound(rw, eq, operands, params, result)


@BATCHING.register("tridiagonal_solve")
def _batch_tridiagonal_solve(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple,
                             path: str) -> None:
    """A tridiagonal_solve under vmap, as JAX's rule folds the batch (module docstring)."""
    params = _params(eq)
    _undescribed(len(numbers) == 4, eq, path, "four operands held", numbers)
    size = batch_size(rw, numbers, dims)
    if all(d is None for d in dims[:3]):
        b = _moveaxis(rw, numbers[3], dims[3], -2)
        shape = tuple(rw.types[b].shape)
        folded = _reshaped(rw, b, shape[:-3] + (shape[-3], shape[-2] * shape[-1]))
        operands = tuple(numbers[:3]) + (folded,)
        out = _bound(rw, eq, operands, params, _tridiagonal_result(rw, eq, operands, path))
        _reshaped(rw, out, shape)
        return _batched_last(rw, len(shape) - 2)
    operands = tuple(at_front(rw, n, d, size) for n, d in zip(numbers, dims))
    _bound(rw, eq, operands, params, _tridiagonal_result(rw, eq, operands, path))
    _batched_last(rw, 0)


def _tridiagonal_result(rw: BatchedBody, eq: Opaque, operands: tuple, path: str) -> Value:
    """tridiagonal_solve's result (``b``'s shape) split as its operands' shared batch."""
    values = tuple(rw.types[n] for n in operands)
    batch = _solve_split(eq, values, (1, 1, 1, 2), path)
    shape = values[3].shape
    return _typed_result(eq, shape, values[0], tuple(batch) + (None,) * (len(shape) -
                                                                         len(batch)),
                         rw.axis.varying)
