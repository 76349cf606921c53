"""How ``vmap`` batches indexing: gathers, scatters and the dynamic slices (issue 32).

Each rule is registered under the name its entry in the primitive table gives and rewrites
one equation onto the body being batched
(:class:`~shardlaw.spec.program.batching_rules.BatchedBody`), as JAX 0.10.2's batching
rules of ``lax/slicing.py`` bind it:

* ``gather``: an operand batched alone is moved first and sliced whole along its batch
  (a new offset dimension, first in the result); indices batched alone are moved first and
  index the operand per example (their batch dimension becomes the result's first); both
  batched: moved first, the batch an operand batching dimension paired with an indices
  batching one;
* ``scatter`` (``scatter``, ``scatter-add``, ``scatter-sub``, ``scatter-mul``,
  ``scatter-min``, ``scatter-max``): the operand and the updates moved first (an unbatched
  one broadcast to the batch); unbatched indices scatter each example's window whole,
  batched ones pair the batch as an operand batching dimension;
* ``dynamic_slice`` and ``dynamic_update_slice``: their start indices, scalars, gathered
  into one index vector (each broadcast to ``(1,)``, or to ``(batch, 1)`` where one is
  batched, then concatenated), then batched as the gather or the scatter they are (the
  batched equation is a ``gather`` or a ``scatter``, as JAX's trace holds).

Dimension numbers are written as a description reads JAX's (``GatherDimensionNumbers(
offset_dims=(1,), ...)``: the parameter's text). A start index the description does not
hold (a literal: ``lax.dynamic_slice(x, (i, 0), ...)``) is broadcast as a value of none,
after the held ones, typed as they are (the description does not say where it stood).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .batching_rules import (
    BatchedBody, batch_entry, batch_typed, batched_type, broadcast_equation, moved_axis,
    operands_batch_split, split_at, transpose_equation,
)
from .description import Opaque, Value, check_program
from .primitives import BATCHING
from .sharding_factors import dimension_numbers
from ..core.shardings import NamedSharding
from ..core.values import PartitionSpec

__all__ = ["GATHER_FIELDS", "SCATTER_FIELDS", "numbers_text"]

GATHER_FIELDS = ("offset_dims", "collapsed_slice_dims", "start_index_map",
                 "operand_batching_dims", "start_indices_batching_dims")
SCATTER_FIELDS = ("update_window_dims", "inserted_window_dims",
                  "scatter_dims_to_operand_dims", "operand_batching_dims",
                  "scatter_indices_batching_dims")
_CLIP = "GatherScatterMode.CLIP"


def numbers_text(kind: str, fields: tuple[str, ...], numbers: dict) -> str:
    """Dimension numbers as a description holds them: the text of JAX's NamedTuple."""
    inner = ", ".join(f"{f}={tuple(int(a) for a in numbers[f])!r}" for f in fields)
    return f"{kind}({inner})"


def _plus(axes: tuple, k: int = 1) -> tuple[int, ...]:
    return tuple(int(a) + k for a in axes)


def _front(rw: BatchedBody, number: int, d: int | None, size: int) -> int:
    """JAX's ``bdim_at_front``: a batched value's batch axis moved first (a transpose
    where it is not), an unbatched one broadcast to the batch."""
    value = rw.types[number]
    if d is None:
        shape = (size,) + tuple(value.shape)
        rw.add(broadcast_equation(number, value, shape, tuple(range(1, len(shape))),
                                  batch_typed(value, 0, batch_entry(rw.axis))), (0,))
    elif d != 0:
        rw.add(transpose_equation(number, value, moved_axis(len(value.shape), d, 0)), (0,))
    else:
        return number
    return len(rw.types) - 1


def _size(rw: BatchedBody, numbers: tuple, dims: tuple) -> int:
    return next(rw.types[n].shape[d] for n, d in zip(numbers, dims) if d is not None)


# --------------------------------------------------------------------------- gather

@dataclasses.dataclass(frozen=True)
class _Gather:
    """A gather's parameters, as the batching rule rewrites them."""

    numbers: dict
    slice_sizes: tuple
    unique: bool
    ordered: bool
    mode: Any
    fill: Any

    @classmethod
    def of(cls, eq: Opaque) -> "_Gather":
        p = dict(eq.params)
        return cls(dimension_numbers(p["dimension_numbers"], GATHER_FIELDS),
                   tuple(p["slice_sizes"]), p.get("unique_indices", False),
                   p.get("indices_are_sorted", False), p.get("mode"), p.get("fill_value"))

    def params(self) -> tuple:
        return tuple(sorted({
            "dimension_numbers": numbers_text("GatherDimensionNumbers", GATHER_FIELDS,
                                              self.numbers),
            "slice_sizes": self.slice_sizes, "unique_indices": self.unique,
            "indices_are_sorted": self.ordered, "mode": self.mode,
            "fill_value": self.fill}.items()))


def _batched_gather(g: _Gather, dims: tuple, size: int) -> _Gather:
    """JAX's gather batching rule: the dimension numbers once the operand, the indices or
    both are batched, their batch axes first."""
    n, (od, idim) = g.numbers, dims
    if idim is None:   # the operand alone: a new offset dimension, the whole batch
        new = {**n, "offset_dims": (0,) + _plus(n["offset_dims"]),
               "collapsed_slice_dims": _plus(n["collapsed_slice_dims"]),
               "operand_batching_dims": _plus(n["operand_batching_dims"]),
               "start_index_map": _plus(n["start_index_map"])}
        return dataclasses.replace(g, numbers=new, slice_sizes=(size,) + g.slice_sizes)
    if od is None:     # the indices alone: each example's indices into one operand
        new = {**n, "offset_dims": _plus(n["offset_dims"]),
               "start_indices_batching_dims": _plus(n["start_indices_batching_dims"])}
        return dataclasses.replace(g, numbers=new, unique=False, ordered=False)
    new = {"offset_dims": _plus(n["offset_dims"]),
           "collapsed_slice_dims": _plus(n["collapsed_slice_dims"]),
           "start_index_map": _plus(n["start_index_map"]),
           "operand_batching_dims": (0,) + _plus(n["operand_batching_dims"]),
           "start_indices_batching_dims": (0,) + _plus(n["start_indices_batching_dims"])}
    return dataclasses.replace(g, numbers=new, slice_sizes=(int(size != 0),) + g.slice_sizes)


def _bind_gather(rw: BatchedBody, eq: Opaque, g: _Gather, numbers: tuple, dims: tuple,
                 size: int) -> None:
    """The batched gather of ``numbers`` at ``dims`` (the operand moved first, then the
    indices), its result batched first."""
    operand, indices = numbers
    if dims[0] is not None:
        operand = _front(rw, operand, dims[0], size)
    if dims[1] is not None:
        indices = _front(rw, indices, dims[1], size)
    new = _batched_gather(g, dims, size)
    (result,) = eq.results
    typed = split_at(batched_type(result, 0, size, rw.axis.varying), 0,
                     operands_batch_split(rw, (operand, indices)))
    rw.add(Opaque((operand, indices), (typed,),
                  primitive="gather", params=new.params()), (0,))


@BATCHING.register("gather")
def _batch_gather(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                  ) -> None:
    """A gather under vmap (JAX's gather batching rule)."""
    check_program(len(numbers) == 2, f"the gather at {path} under vmap",
                  "an operand and indices the description holds", numbers)
    _bind_gather(rw, eq, _Gather.of(eq), numbers, dims, _size(rw, numbers, dims))


# --------------------------------------------------------------------------- dynamic slices

def _index_vector(rw: BatchedBody, numbers: tuple, dims: tuple, count: int, size: int
                  ) -> tuple[int, int | None]:
    """JAX's batching of a dynamic slice's start indices: each (``count`` in all, those the
    description does not hold last) broadcast to ``(1,)``, or to ``(batch, 1)`` where one
    is batched (split as the batched one's batch dimension), then concatenated: the index
    vector's number and batch axis."""
    held = [rw.types[n] for n in numbers]
    dtype = held[0].dtype if held else "int32"
    batched = any(d is not None for d in dims)
    shape = (size, 1) if batched else (1,)
    first = next((v for v, d in zip(held, dims) if d is not None), None)
    typed = None
    if first is not None and first.mesh is not None:
        entry = tuple(first.spec or ())[:1] or (None,)
        typed = NamedSharding(first.mesh, PartitionSpec(entry[0], None))
    parts = []
    for k in range(count):
        if k < len(numbers):
            n, value, d = numbers[k], held[k], dims[k]
            kept = (0,) if d is not None else ()
            rw.add(broadcast_equation(n, value, shape, kept, typed), (0 if batched else None,))
        else:   # a literal index: a broadcast of no value the description holds
            literal = Value.typed((), dtype)
            eq = broadcast_equation(0, literal, shape, (), typed)
            rw.add(dataclasses.replace(eq, operands=()), (0 if batched else None,))
        parts.append(len(rw.types) - 1)
    if len(parts) > 1:
        joined = dataclasses.replace(rw.types[parts[0]].type,
                                     shape=shape[:-1] + (count,))
        rw.add(Opaque(tuple(parts), (joined,), primitive="concatenate",
                      params=(("dimension", len(shape) - 1),)), (0 if batched else None,))
    return len(rw.types) - 1, (0 if batched else None)


@BATCHING.register("dynamic_slice")
def _batch_dynamic_slice(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple,
                         path: str) -> None:
    """A dynamic_slice under vmap: the gather it is (JAX's batching rule), its start
    indices one index vector, sliced whole along each dimension they index."""
    size = _size(rw, numbers, dims)
    rank = len(eq.results[0].shape)
    check_program(0 < rank and len(numbers) - 1 <= rank,
                  f"the dynamic_slice at {path} under vmap",
                  "an operand of rank one or more and at most one start index per dimension",
                  numbers)
    index, idim = _index_vector(rw, numbers[1:], dims[1:], rank, size)
    every = tuple(range(rank))
    g = _Gather({"offset_dims": every, "collapsed_slice_dims": (), "start_index_map": every,
                 "operand_batching_dims": (), "start_indices_batching_dims": ()},
                tuple(dict(eq.params)["slice_sizes"]), True, True, _CLIP, None)
    _bind_gather(rw, eq, g, (numbers[0], index), (dims[0], idim), size)


# --------------------------------------------------------------------------- scatters

def _scatter_params(eq: Opaque, numbers: dict, **given: Any) -> tuple:
    params = {**dict(eq.params), **given}
    params["dimension_numbers"] = numbers_text("ScatterDimensionNumbers", SCATTER_FIELDS,
                                               numbers)
    return tuple(sorted(params.items()))


def _batched_scatter(n: dict, indices_batched: bool) -> dict:
    """JAX's scatter batching rule: the dimension numbers once the operand and the updates
    are batched first; unbatched indices write each example's window whole (a new update
    window dimension), batched ones pair the batch as a batching dimension."""
    if not indices_batched:
        return {**n, "update_window_dims": (0,) + _plus(n["update_window_dims"]),
                "inserted_window_dims": _plus(n["inserted_window_dims"]),
                "operand_batching_dims": _plus(n["operand_batching_dims"]),
                "scatter_dims_to_operand_dims": _plus(n["scatter_dims_to_operand_dims"])}
    return {"update_window_dims": _plus(n["update_window_dims"]),
            "inserted_window_dims": _plus(n["inserted_window_dims"]),
            "scatter_dims_to_operand_dims": _plus(n["scatter_dims_to_operand_dims"]),
            "operand_batching_dims": (0,) + _plus(n["operand_batching_dims"]),
            "scatter_indices_batching_dims": (0,) + _plus(n["scatter_indices_batching_dims"])}


def _bind_scatter(rw: BatchedBody, eq: Opaque, primitive: str, numbers: tuple, dims: tuple,
                  n: dict, size: int, **given: Any) -> None:
    """The batched scatter of (operand, indices, updates) at ``dims``: the operand, then
    the updates, then batched indices brought to the front; the result batched first."""
    operand, indices, updates = numbers
    operand = _front(rw, operand, dims[0], size)
    updates = _front(rw, updates, dims[2], size)
    if dims[1] is not None:
        indices = _front(rw, indices, dims[1], size)
    (result,) = eq.results
    rw.add(Opaque((operand, indices, updates),
                  (split_at(batched_type(result, 0, size, rw.axis.varying), 0,
                            operands_batch_split(rw, (operand, updates))),),
                  primitive=primitive,
                  params=_scatter_params(eq, _batched_scatter(n, dims[1] is not None),
                                         **given)), (0,))


@BATCHING.register("scatter")
def _batch_scatter(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                   ) -> None:
    """A scatter of any combiner under vmap (JAX's scatter batching rule)."""
    check_program(len(numbers) == 3, f"the {eq.primitive} at {path} under vmap",
                  "an operand, indices and updates the description holds", numbers)
    n = dimension_numbers(dict(eq.params)["dimension_numbers"], SCATTER_FIELDS)
    _bind_scatter(rw, eq, eq.primitive, numbers, dims, n, _size(rw, numbers, dims))


@BATCHING.register("dynamic_update_slice")
def _batch_dynamic_update_slice(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple,
                                path: str) -> None:
    """A dynamic_update_slice under vmap: the scatter it is (JAX's batching rule), its
    start indices one index vector, the update written whole."""
    size = _size(rw, numbers, dims)
    rank = len(eq.results[0].shape)
    check_program(len(numbers) >= 2 and 0 < rank and len(numbers) - 2 <= rank,
                  f"the dynamic_update_slice at {path} under vmap",
                  "an operand of rank one or more, an update and at most one start index "
                  "per dimension", numbers)
    index, idim = _index_vector(rw, numbers[2:], dims[2:], rank, size)
    every = tuple(range(rank))
    n = {"update_window_dims": every, "inserted_window_dims": (),
         "scatter_dims_to_operand_dims": every, "operand_batching_dims": (),
         "scatter_indices_batching_dims": ()}
    _bind_scatter(rw, eq, "scatter", (numbers[0], index, numbers[1]),
                  (dims[0], idim, dims[1]), n, size, indices_are_sorted=True,
                  unique_indices=True, mode=_CLIP, update_consts=(), update_jaxpr=None)
