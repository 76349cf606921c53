"""How ``vmap`` batches the primitives of a real step (issue 32): contractions, the
primitives with a dimension parameter, sorts, selects and the structural primitives.

Each rule is registered under the name its entry in the primitive table gives
(``@BATCHING.register("dot_general")``) and rewrites one equation onto the body being
batched (:class:`~shardlaw.spec.program.batching_rules.BatchedBody`), as JAX 0.10.2's
batching rule of that primitive binds it:

* ``dot_general``: the batch axis of an operand batched alone stays a free dimension of it
  (the result's batch axis is where that free dimension lands); operands batched both
  gain a new batch dimension, first in the dimension numbers and the result;
* ``axis_param`` (``cumsum``, ``cumprod``, ``cummax``, ``cummin``, ``cumlogsumexp``):
  their ``axis`` moves past the batch axis;
* ``sorted`` (``sort``): every operand moved to the first batched operand's batch axis (an
  unbatched one broadcast to its shape), the sorted dimension past it;
* ``select_n``: the predicate and the cases batched alike, else moved first;
* ``reshape`` (its ``dimensions`` too), ``squeeze``, ``concatenate``: the batch axis
  moved first; ``slice``, ``rev`` and ``pad``: the batch axis kept, their parameters
  given an entry for it;
* ``moved_first`` (``random_wrap``, ``fft``): the operand's batch axis moved first;
* ``per_operand`` (``optimization_barrier``): each operand and result keep their axis;
* ``leading_batch`` (linear algebra: ``cholesky``, ``eigh``, ``qr``, ``svd`` ...): every
  operand batched first, an unbatched one broadcast to the batch;
* ``windowed`` (``reduce_window_sum``, ``_max``, ``_min``): a window of 1 over the batch;
* ``add_any`` (the sum of cotangents, in a gradient vmapped): an unbatched operand
  broadcast to the batch at the other's axis, or the first moved to the second's;
* ``callback`` (``pure_callback``): refused without a vmap_method JAX batches (BAT-11),
  its operands moved first for ``expand_dims`` and ``broadcast_all``; ``io_callback``:
  refused where ordered (BAT-12).

A generic ``reduce_window`` (``lax.reduce_window`` with a function of its own) has its
initial values unbatched (BAT-13), its operands batched first under a window of 1;
``approx_top_k`` its reduction dimension moved past the batch axis; a ``sequential``
pure_callback and an unordered io_callback are mapped over the batch by a scan of them
(:func:`scanned_over_batch`), as JAX maps them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .batching_rules import (
    BatchedBody, batch_entry, batch_typed, batched_parameter, batched_type,
    broadcast_equation, moved_axis, operands_batch_split, split_at, transpose_equation,
    typed_like,
)
from ..core.rules import Failure, reject, rule
from .description import Opaque, Value, check_program
from .primitives import BATCHING

__all__ = ["batch_size", "moved_first", "moved_to", "broadcast_into", "bind_batched", "at_front",
           "dot_general_dims", "CALLBACK_METHODS", "CallbackNotBatched",
           "check_callback_batched", "OrderedCallbackBatched", "check_io_callback_batched",
           "scanned_over_batch", "InitialValueBatched", "check_initial_values_unbatched"]


def _params(eq: Opaque) -> dict:
    return dict(eq.params)


def batch_size(rw: BatchedBody, numbers: tuple, dims: tuple) -> int:
    """The batch as the operands hold it."""
    return next(rw.types[n].shape[d] for n, d in zip(numbers, dims) if d is not None)


def _bumped(axes: tuple, d: int) -> tuple[int, ...]:
    """Dimension numbers of an operand once a batch axis is inserted at ``d``."""
    return tuple(int(a) + (int(a) >= d) for a in axes)


def moved_first(rw: BatchedBody, number: int, d: int) -> int:
    """The value ``number`` with its batch axis ``d`` moved first (itself where it is)."""
    if d == 0:
        return number
    value = rw.types[number]
    rw.add(transpose_equation(number, value, moved_axis(len(value.shape), d, 0)), (0,))
    return len(rw.types) - 1


def broadcast_into(rw: BatchedBody, number: int, shape: tuple, kept: tuple, d: int | None,
            typed: Any = None) -> int:
    """A broadcast_in_dim of ``number`` to ``shape``, its dimensions at ``kept``, bound
    with the sharding ``typed`` (None: typed from its operand, new dimensions unsplit)."""
    rw.add(broadcast_equation(number, rw.types[number], tuple(shape), tuple(kept), typed),
           (d,))
    return len(rw.types) - 1


def bind_batched(rw: BatchedBody, eq: Opaque, numbers: tuple, params: dict, d: int, size: int
          ) -> None:
    """``eq`` over ``numbers`` with ``params``, each result batched at ``d``."""
    entry = operands_batch_split(rw, tuple(numbers))   # the batch split as the operands'
    results = tuple(split_at(batched_type(r, d, size, rw.axis.varying), d, entry)
                    for r in eq.results)
    rw.add(dataclasses.replace(eq, operands=tuple(numbers), results=results,
                               params=tuple(sorted(params.items()))), (d,) * len(results))


# --------------------------------------------------------------------------- dot_general

def dot_general_dims(ranks: tuple[int, int], dims: tuple, numbers: tuple
                     ) -> tuple[tuple, int]:
    """dot_general's dimension numbers once its operands are batched at ``dims`` (their
    batched ``ranks``), and the result's batch axis (JAX's dot_general batching rule)."""
    (lc, rc), (lb, rb) = numbers
    ld, rd = dims
    if ld is not None and rd is not None:   # a new batch dimension, first
        return ((_bumped(lc, ld), _bumped(rc, rd)),
                ((ld,) + _bumped(lb, ld), (rd,) + _bumped(rb, rd))), 0
    if rd is None:   # the lhs's batch axis stays one of its free dimensions
        free = [a for a in range(ranks[0]) if a not in set(lc) | set(lb)]
        at = len(lb) + sum(a < ld for a in free)
        return ((_bumped(lc, ld), tuple(rc)), (_bumped(lb, ld), tuple(rb))), at
    free = [a for a in range(ranks[1]) if a not in set(rc) | set(rb)]
    lhs_kept = ranks[0] - len(lc)   # the batch and free dimensions of the lhs
    at = lhs_kept + sum(a < rd for a in free)
    return ((tuple(lc), _bumped(rc, rd)), (tuple(lb), _bumped(rb, rd))), at


@BATCHING.register("dot_general")
def _batch_dot_general(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                       ) -> None:
    """A dot_general under vmap: its dimension numbers bumped past the batch axes."""
    params = _params(eq)
    check_program(len(numbers) == 2, f"the dot_general at {path} under vmap",
                  "two operands the description holds", numbers)
    ranks = tuple(len(rw.types[n].shape) for n in numbers)
    ranks = (ranks[0] - (dims[0] is not None), ranks[1] - (dims[1] is not None))
    params["dimension_numbers"], d = dot_general_dims(ranks, dims,
                                                      params["dimension_numbers"])
    if params.get("out_sharding") is not None:   # its typed parameter, at the result's axis
        params["out_sharding"] = batched_parameter(params["out_sharding"], d, rw.axis)
    bind_batched(rw, eq, numbers, params, d, batch_size(rw, numbers, dims))


# --------------------------------------------------------------------------- axis parameters

@BATCHING.register("axis_param")
def _batch_axis_param(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                      ) -> None:
    """A cumulative primitive under vmap: its ``axis`` moves past the batch axis."""
    params, d = _params(eq), dims[0]
    params["axis"] = int(params["axis"]) + (d <= int(params["axis"]))
    bind_batched(rw, eq, numbers, params, d, batch_size(rw, numbers, dims))


@BATCHING.register("rev")
def _batch_rev(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str) -> None:
    """A rev under vmap: its reversed dimensions move past the batch axis."""
    params, d = _params(eq), dims[0]
    params["dimensions"] = _bumped(tuple(params["dimensions"]), d)
    bind_batched(rw, eq, numbers, params, d, batch_size(rw, numbers, dims))


@BATCHING.register("slice")
def _batch_slice(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                 ) -> None:
    """A slice under vmap: the whole batch axis taken (start 0, limit the batch, stride
    1 where strides are given)."""
    params, d = _params(eq), dims[0]
    size = batch_size(rw, numbers, dims)

    def with_entry(items: Any, entry: int) -> Any:
        return None if items is None else tuple(items)[:d] + (entry,) + tuple(items)[d:]
    params["start_indices"] = with_entry(params["start_indices"], 0)
    params["limit_indices"] = with_entry(params["limit_indices"], size)
    params["strides"] = with_entry(params.get("strides"), 1)
    bind_batched(rw, eq, numbers, params, d, size)


@BATCHING.register("pad")
def _batch_pad(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str) -> None:
    """A pad under vmap: the batch axis left unpadded (its padding value unbatched, held
    or a literal; a batched one is refused, as JAX then selects rather than pads)."""
    check_program(len(dims) in (1, 2) and dims[1:] in ((), (None,)) and dims[0] is not None,
                  f"the pad at {path} under vmap", "a batched operand and an unbatched "
                  "padding value (held, or a literal)", dims)
    params, d = _params(eq), dims[0]
    config = tuple(params["padding_config"])
    params["padding_config"] = config[:d] + ((0, 0, 0),) + config[d:]
    bind_batched(rw, eq, numbers, params, d, batch_size(rw, numbers, dims))


@BATCHING.register("add_any")
def _batch_add_any(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                   ) -> None:
    """add_any under vmap: kept where both operands are batched at one axis; an unbatched
    one broadcast to the batch at the other's axis; else the first moved to the second's
    axis."""
    (x, y), (dx, dy) = numbers, dims
    size = batch_size(rw, numbers, dims)
    if dx == dy:
        return bind_batched(rw, eq, numbers, _params(eq), dx, size)
    if dx is None or dy is None:
        d, n = (dy, x) if dx is None else (dx, y)
        value = rw.types[n]
        shape = tuple(value.shape)[:d] + (size,) + tuple(value.shape)[d:]
        spread = broadcast_into(rw, n, shape, tuple(i for i in range(len(shape)) if i != d), d,
                         batch_typed(value, d, batch_entry(rw.axis)))
        pair = (spread, y) if dx is None else (x, spread)
        return bind_batched(rw, eq, pair, _params(eq), d, size)
    bind_batched(rw, eq, (moved_to(rw, x, dx, dy), y), _params(eq), dy, size)


# --------------------------------------------------------------------------- moved first

@BATCHING.register("reshape")
def _batch_reshape(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                   ) -> None:
    """A reshape under vmap: its operand's batch axis moved first, the batch prefixed to
    its new sizes, and to its ``dimensions`` where given (the batch first, the others
    past it: JAX 0.10.2's rule)."""
    params = _params(eq)
    size = batch_size(rw, numbers, dims)
    operand = moved_first(rw, numbers[0], dims[0])
    params["new_sizes"] = (size,) + tuple(params["new_sizes"])
    if params.get("dimensions") is not None:
        params["dimensions"] = (0,) + tuple(int(a) + 1 for a in params["dimensions"])
    params["sharding"] = batched_parameter(params.get("sharding"), 0, rw.axis)
    (result,) = eq.results
    # typed by its sharding parameter where bound with one, else from its operand
    entry = batch_entry(rw.axis) if params.get("sharding") is not None else \
        operands_batch_split(rw, (operand,))
    typed = split_at(batched_type(result, 0, size, rw.axis.varying), 0, entry)
    rw.add(dataclasses.replace(eq, operands=(operand,), results=(typed,),
                               params=tuple(sorted(params.items()))), (0,))


@BATCHING.register("moved_first")
def _batch_moved_first(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                       ) -> None:
    """random_wrap under vmap: its key data's batch axis moved first, the keys batched
    there (the trailing key-data dimension stays last)."""
    operand = moved_first(rw, numbers[0], dims[0])
    bind_batched(rw, eq, (operand,), _params(eq), 0, batch_size(rw, numbers, dims))


@BATCHING.register("squeeze")
def _batch_squeeze(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                   ) -> None:
    """A squeeze under vmap: its operand's batch axis moved first, its dimensions past it."""
    params = _params(eq)
    operand = moved_first(rw, numbers[0], dims[0])
    params["dimensions"] = tuple(int(a) + 1 for a in params["dimensions"])
    bind_batched(rw, eq, (operand,), params, 0, batch_size(rw, numbers, dims))


@BATCHING.register("concatenate")
def _batch_concatenate(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                       ) -> None:
    """A concatenate under vmap: every operand batched first (an unbatched one broadcast
    to the batch), joined along its dimension past the batch."""
    params, size = _params(eq), batch_size(rw, numbers, dims)
    operands = []
    for n, d in zip(numbers, dims):
        if d is None:
            shape = (size,) + tuple(rw.types[n].shape)   # split as the batched operands
            operands.append(broadcast_into(rw, n, shape, tuple(range(1, len(shape))), 0,
                                    batch_typed(rw.types[n], 0, batch_entry(rw.axis))))
        else:
            operands.append(moved_first(rw, n, d))
    params["dimension"] = int(params["dimension"]) + 1
    bind_batched(rw, eq, tuple(operands), params, 0, size)


# --------------------------------------------------------------------------- sort, select

@BATCHING.register("sorted")
def _batch_sort(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                ) -> None:
    """A sort under vmap: every operand at the first batched operand's batch axis (moved
    there, or an unbatched one broadcast to its shape), the sorted dimension past it."""
    params = _params(eq)
    first, d = next((n, d) for n, d in zip(numbers, dims) if d is not None)
    shape = tuple(rw.types[first].shape)
    operands = []
    for n, dim in zip(numbers, dims):
        if dim is None:
            kept = tuple(i for i in range(len(shape)) if i != d)
            operands.append(broadcast_into(rw, n, shape, kept, d, typed_like(rw.types[first])))
        elif dim != d:
            value = rw.types[n]
            rw.add(transpose_equation(n, value, moved_axis(len(value.shape), dim, d)), (d,))
            operands.append(len(rw.types) - 1)
        else:
            operands.append(n)
    params["dimension"] = int(params["dimension"]) + (d <= int(params["dimension"]))
    bind_batched(rw, eq, tuple(operands), params, d, shape[d])


@BATCHING.register("select_n")
def _batch_select_n(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                    ) -> None:
    """A select_n under vmap (JAX's select batching rule): kept where the predicate and the
    cases are batched at one axis (a batched scalar predicate broadcast to the cases), or
    the predicate an unbatched scalar; else each moved first (an unbatched one broadcast
    to the batch)."""
    check_program(len(numbers) >= 1, f"the select_n at {path} under vmap",
                  "a predicate the description holds", numbers)
    size = batch_size(rw, numbers, dims)
    if len(numbers) < 3:
        return _select_literal_cases(rw, eq, numbers, dims, size, path)
    which, cases = numbers[0], list(numbers[1:])
    wd, case_dims = dims[0], dims[1:]
    shape = lambda n: tuple(rw.types[n].shape)   # noqa: E731
    if all(c == wd for c in case_dims):
        if shape(which) != shape(cases[0]):   # a batched scalar predicate
            which = broadcast_into(rw, which, shape(cases[0]), (wd,), wd,
                                   typed_like(rw.types[cases[0]]))
        return bind_batched(rw, eq, (which,) + tuple(cases), _params(eq), wd, size)
    if shape(which) == () and all(c is not None for c in case_dims):
        d = case_dims[0]
        if all(c == d for c in case_dims) or len({shape(c) for c in cases}) == 1:
            cases = [n if c == d else moved_to(rw, n, c, d) for n, c in zip(cases, case_dims)]
            return bind_batched(rw, eq, (which,) + tuple(cases), _params(eq), d, size)
    entry = batch_entry(rw.axis)
    if shape(which) != ():
        which = at_front(rw, which, wd, size, entry)
    if not all(shape(c) == () for c in cases):
        cases = [at_front(rw, n, c, size, entry) for n, c in zip(cases, case_dims)]
    if 0 < len(shape(which)) < len(shape(cases[0])):
        which = broadcast_into(rw, which, shape(cases[0]), (0,), 0, typed_like(rw.types[cases[0]]))
    if len(shape(which)) > len(shape(cases[0])):   # (broadcast_like: the predicate's type)
        target = shape(which)
        cases = [broadcast_into(rw, n, target, tuple(range(len(shape(n)))), 0,
                         typed_like(rw.types[which])) for n in cases]
    bind_batched(rw, eq, (which,) + tuple(cases), _params(eq), 0, size)


def _select_literal_cases(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple,
                          size: int, path: str) -> None:
    """A select_n whose cases the description does not all hold (literals, scalars: two
    cases, as ``jnp.where`` binds, the held ones first): JAX's rule for scalar cases, each
    brought to the front or broadcast to the batched predicate, literals as broadcasts of
    no held value."""
    rank = lambda n, d: len(rw.types[n].shape) - (d is not None)   # noqa: E731
    check_program(all(rank(n, d) == 0 for n, d in zip(numbers, dims)),
                  f"the select_n at {path} under vmap", "a predicate and cases held, or "
                  "scalar ones beside literal cases", numbers)
    which, wd = numbers[0], dims[0]
    cases = list(zip(numbers[1:], dims[1:])) + [(None, None)] * (3 - len(numbers))
    dtype = eq.results[0].dtype

    def spread(n: int | None, shape: tuple) -> int:
        if n is not None:   # (JAX's bdim_at_front, over the axes vmap maps over)
            return broadcast_into(rw, n, shape, (), 0,
                           batch_typed(rw.types[n], 0, batch_entry(rw.axis)))
        literal = broadcast_equation(0, Value.typed((), dtype), shape, ())
        rw.add(dataclasses.replace(literal, operands=()), (0,))
        return len(rw.types) - 1
    if any(d is not None for _, d in cases):
        cases = [(n, 0) if d is not None else (spread(n, (size,)), 0) for n, d in cases]
    elif wd is not None:
        cases = [(spread(n, (size,)), 0) for n, _ in cases]
    bind_batched(rw, eq, (which,) + tuple(n for n, _ in cases), _params(eq), 0, size)


def moved_to(rw: BatchedBody, number: int, source: int, target: int) -> int:
    """The value ``number`` with its axis ``source`` moved to ``target`` (a transpose)."""
    value = rw.types[number]
    rw.add(transpose_equation(number, value, moved_axis(len(value.shape), source, target)),
           (target,))
    return len(rw.types) - 1


def at_front(rw: BatchedBody, number: int, d: int | None, size: int, entry: Any = None
              ) -> int:
    """JAX's ``bdim_at_front``: a batched value's batch axis moved first, an unbatched one
    broadcast to the batch (split over ``entry``: the axes vmap maps over where the rule
    passes them, else unsplit)."""
    if d is not None:
        return moved_first(rw, number, d)
    value: Value = rw.types[number]
    shape = (size,) + tuple(value.shape)
    return broadcast_into(rw, number, shape, tuple(range(1, len(shape))), 0,
                   batch_typed(value, 0, entry))


# --------------------------------------------------------------------------- clamp

@BATCHING.register("clamp")
def _batch_clamp(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                 ) -> None:
    """A clamp under vmap (JAX's clamp batching rule): kept where its bounds are scalars
    and its operand batched, or all three batched alike; else each moved first (an
    unbatched one broadcast to the batch), a scalar or vector bound broadcast to the
    operand's shape. A bound the description does not hold (a literal) is a scalar."""
    size = batch_size(rw, numbers, dims)
    shape = lambda n: tuple(rw.types[n].shape)   # noqa: E731
    if len(numbers) < 3:   # a literal bound: the operand is the one of the result's rank
        rank = len(eq.results[0].shape)
        check_program(sum(len(shape(n)) - (d is not None) == rank
                          for n, d in zip(numbers, dims)) == 1 and all(
            d is not None for n, d in zip(numbers, dims)
            if len(shape(n)) - (d is not None) == rank) and all(
            d is None and shape(n) == () for n, d in zip(numbers, dims)
            if len(shape(n)) - (d is not None) != rank),
            f"the clamp at {path} under vmap", "a batched operand between scalar bounds "
            "(a literal bound's place is not described)", dims)
        d = next(d for d in dims if d is not None)
        return bind_batched(rw, eq, numbers, _params(eq), d, size)
    (low, x, high), (dl, dx, dh) = numbers, dims
    if dl == dx == dh and (shape(low) == shape(x) == shape(high)):
        return bind_batched(rw, eq, numbers, _params(eq), dx, size)
    if dl == dx == dh and len(shape(low)) == len(shape(high)) == 1:
        low = broadcast_into(rw, low, shape(x), (dl,), dx)
        high = broadcast_into(rw, high, shape(x), (dh,), dx)
        return bind_batched(rw, eq, (low, x, high), _params(eq), dx, size)
    if shape(low) == () and shape(high) == () and dx is not None:
        return bind_batched(rw, eq, numbers, _params(eq), dx, size)
    low = at_front(rw, low, dl, size) if shape(low) else low
    high = at_front(rw, high, dh, size) if shape(high) else high
    x = at_front(rw, x, dx, size) if shape(x) else x
    bounds = [low, high]   # scalar bounds broadcast first, then vector ones
    for k, bound in enumerate(bounds):
        if shape(bound) == () and shape(x) != ():
            bounds[k] = broadcast_into(rw, bound, shape(x), (), 0)
    for k, bound in enumerate(bounds):
        if 0 < len(shape(bound)) < len(shape(x)):
            bounds[k] = broadcast_into(rw, bound, shape(x), (0,), 0)
    low, high = bounds
    if len(shape(low)) > len(shape(x)):
        x = broadcast_into(rw, x, shape(low), (), 0)
    bind_batched(rw, eq, (low, x, high), _params(eq), 0, size)


# --------------------------------------------------------------------------- callbacks

# The ways JAX's batching rule for a callback batches it, by the vmap_method it was given.
CALLBACK_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all")


@dataclasses.dataclass(frozen=True)
class CallbackNotBatched(Failure, rule="BAT-11", error=NotImplementedError):
    template = ("vmap batches the {primitive} at {path}, whose vmap_method is {method!r}: "
                "vmap is only supported for the {primitive} primitive when vmap_method is "
                "one of 'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all'")
    hint = ("Give the callback a vmap_method saying how it takes a batch (jax.pure_callback("
            "..., vmap_method='sequential') calls it once per example).")
    primitive: str
    path: str
    method: Any


@rule("BAT-11", mirrors="jax._src.ffi.ffi_batching_rule (pure_callback's, ffi_call's)")
def check_callback_batched(primitive: str, method: Any, path: str) -> None:
    """vmap batches a pure_callback only where its vmap_method is one of sequential, sequential_unrolled, expand_dims or broadcast_all: JAX's batching rule refuses any other (NotImplementedError), while tracing.

    >>> check_callback_batched("pure_callback", "expand_dims", "body[0]")
    >>> check_callback_batched("pure_callback", None, "body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNotImplementedError: [BAT-11] at body[0]: vmap batches the pure_callback at body[0], whose vmap_method is None: vmap is only supported for the pure_callback primitive when vmap_method is one of 'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all'. Give the callback a vmap_method saying how it takes a batch (jax.pure_callback(..., vmap_method='sequential') calls it once per example).
    """
    if method not in CALLBACK_METHODS:
        raise reject(CallbackNotBatched(primitive, path, method), path)


@BATCHING.register("callback")
def _batch_callback(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                    ) -> None:
    """A pure_callback under vmap (BAT-11), as JAX's rule binds it: for ``expand_dims``
    and ``broadcast_all`` every batched operand's batch axis moved first, an unbatched one
    given a leading dimension of 1 (``broadcast_all``: of the batch), the callback's
    results batched first; for ``sequential`` and ``sequential_unrolled`` a scan of the
    callback over the batch (:func:`scanned_over_batch`)."""
    params = _params(eq)
    method = params.get("vmap_method")
    check_callback_batched(eq.primitive, method, path)
    if method in ("sequential", "sequential_unrolled"):
        return scanned_over_batch(rw, eq, numbers, dims)
    size = batch_size(rw, numbers, dims)
    lead = size if method == "broadcast_all" else 1
    moved = []
    for n, d in zip(numbers, dims):
        shape = rw.types[n].shape
        moved.append(moved_first(rw, n, d) if d is not None else broadcast_into(
            rw, n, (lead,) + tuple(shape), tuple(range(1, len(shape) + 1)), None))
    params["result_avals"] = tuple(_batched_aval(a, size)
                                   for a in params.get("result_avals", ()))
    bind_batched(rw, eq, tuple(moved), params, 0, size)


def scanned_over_batch(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple) -> None:
    """A callback JAX maps over the batch (a ``sequential`` pure_callback, an unordered
    io_callback: ``lax.scan``/``lax.map`` of it): its batched operands moved first are
    the scan's ``xs`` (their leading dimension unsplit, LOOP-5), its unbatched ones the
    scan's constants, its body the callback over one slice; its results stacked first."""
    from .control_flow import Scan, unstacked
    from .description import Program
    from .scan_length import scan_length

    consts = tuple(n for n, d in zip(numbers, dims) if d is None)
    xs = tuple(moved_first(rw, n, d) for n, d in zip(numbers, dims) if d is not None)
    length = scan_length(tuple(rw.types[n] for n in xs), None)
    inputs = tuple(rw.types[n].type for n in consts) + tuple(
        unstacked(rw.types[n].type) for n in xs)
    at = iter(range(len(consts), len(inputs)))
    unbatched = iter(range(len(consts)))
    operands = tuple(next(unbatched) if d is None else next(at) for d in dims)
    call = dataclasses.replace(eq, operands=operands)
    body = Program(inputs, (call,), tuple(range(len(inputs), len(inputs) + len(eq.results))))
    rw.add(Scan(consts + xs, body=body, length=length, num_consts=len(consts)),
           (0,) * len(eq.results))


def _batched_aval(aval: Any, size: int) -> Any:
    """A callback's result type as its parameter spells it (``float32[8]``), batched first."""
    text = str(aval)
    head, bracket, rest = text.partition("[")
    if not bracket:
        return aval
    return f"{head}[{size}{',' if not rest.startswith(']') else ''}{rest}"


@dataclasses.dataclass(frozen=True)
class OrderedCallbackBatched(Failure, rule="BAT-12"):
    template = ("vmap batches the ordered io_callback at {path}: Cannot `vmap` ordered IO "
                "callback (its calls would run in an order the batch does not give)")
    hint = "Give the io_callback ordered=False, or call it outside the vmap."
    path: str


@rule("BAT-12", mirrors="jax._src.callback.io_callback_batching_rule")
def check_io_callback_batched(ordered: Any, path: str) -> None:
    """vmap batches no ordered io_callback: JAX's batching rule refuses one (ValueError), while tracing.

    >>> check_io_callback_batched(False, "body[0]")
    >>> check_io_callback_batched(True, "body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [BAT-12] at body[0]: vmap batches the ordered io_callback at body[0]: Cannot `vmap` ordered IO callback (its calls would run in an order the batch does not give). Give the io_callback ordered=False, or call it outside the vmap.
    """
    if ordered is True:
        raise reject(OrderedCallbackBatched(path), path)


@BATCHING.register("io_callback")
def _batch_io_callback(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                       ) -> None:
    """An io_callback under vmap: an ordered one refused (BAT-12); an unordered one mapped
    over the batch by a scan of it (:func:`scanned_over_batch`), as JAX's rule maps it."""
    check_io_callback_batched(_params(eq).get("ordered"), path)
    scanned_over_batch(rw, eq, numbers, dims)


@BATCHING.register("per_operand")
def _batch_per_operand(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                       ) -> None:
    """An optimization_barrier under vmap: bound over the batched operands as they are,
    each result batched where its operand is (JAX's rule returns the operands' batch
    axes)."""
    check_program(len(numbers) == len(eq.results), f"the {eq.primitive} at {path} under vmap",
                  "one result per operand", (len(numbers), len(eq.results)))
    size = batch_size(rw, numbers, dims)
    results = tuple(r if d is None else split_at(
        batched_type(r, d, size, rw.axis.varying), d, operands_batch_split(rw, (n,)))
        for r, n, d in zip(eq.results, numbers, dims))
    rw.add(dataclasses.replace(eq, operands=tuple(numbers), results=results), tuple(dims))


@BATCHING.register("leading_batch")
def _batch_leading(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                   ) -> None:
    """A linear-algebra primitive under vmap (``cholesky``, ``eigh``, ``qr``, ``svd`` ...;
    JAX's ``expand_dims_batcher``): every batched operand's batch axis moved first, an
    unbatched one broadcast to the batch there (unsplit), every result batched first."""
    size = batch_size(rw, numbers, dims)
    moved = []
    for n, d in zip(numbers, dims):
        shape = tuple(rw.types[n].shape)
        moved.append(moved_first(rw, n, d) if d is not None else broadcast_into(
            rw, n, (size,) + shape, tuple(range(1, len(shape) + 1)), 0))
    bind_batched(rw, eq, tuple(moved), _params(eq), 0, size)


@BATCHING.register("windowed")
def _batch_windowed(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                    ) -> None:
    """A windowed reduction under vmap (``reduce_window_sum``, ``_max``, ``_min``): a
    window of 1 over the batch axis, which stays where it is (JAX's rule)."""
    params, d = _params(eq), dims[0]
    ones = {"window_dimensions": 1, "window_strides": 1, "base_dilation": 1,
            "window_dilation": 1, "padding": (0, 0)}
    for key, unit in ones.items():
        given = tuple(params[key])
        params[key] = given[:d] + (unit,) + given[d:]
    bind_batched(rw, eq, numbers, params, d, batch_size(rw, numbers, dims))


# --------------------------------------------------------------------------- approx_top_k

@BATCHING.register("approx_top_k")
def _batch_approx_top_k(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                        ) -> None:
    """An approx_top_k under vmap: its ``reduction_dimension`` moves past the batch axis,
    both results batched where its operand is (JAX's rule)."""
    params, d = _params(eq), dims[0]
    rank = len(rw.types[numbers[0]].shape) - 1
    reduced = int(params["reduction_dimension"]) % max(rank, 1)
    params["reduction_dimension"] = reduced + (reduced >= d)
    bind_batched(rw, eq, numbers, params, d, batch_size(rw, numbers, dims))


# --------------------------------------------------------------------------- reduce_window

@dataclasses.dataclass(frozen=True)
class InitialValueBatched(Failure, rule="BAT-13", error=NotImplementedError):
    template = ("vmap batches the initial value {index} of the reduce_window at {path}: "
                "reduce_window batching is not implemented for initial values")
    hint = ("Give the reduction an initial value that does not depend on the mapped "
            "arguments (a constant), or reduce outside the vmap.")
    index: int
    path: str


@rule("BAT-13", mirrors="jax._src.lax.windowed_reductions._generic_reduce_window_batch_rule")
def check_initial_values_unbatched(dims: tuple, path: str) -> None:
    """vmap batches a generic reduce_window only where none of its initial values is batched: JAX's batching rule refuses one that is (NotImplementedError), while tracing.

    ``dims`` are the initial values' batch axes (None: unbatched).

    >>> check_initial_values_unbatched((None,), "body[0]")
    >>> check_initial_values_unbatched((0,), "body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNotImplementedError: [BAT-13] at body[0]: vmap batches the initial value 0 of the reduce_window at body[0]: reduce_window batching is not implemented for initial values. Give the reduction an initial value that does not depend on the mapped arguments (a constant), or reduce outside the vmap.
    """
    for k, d in enumerate(dims):
        if d is not None:
            raise reject(InitialValueBatched(k, path), path)


@BATCHING.register("reduce_window")
def _batch_reduce_window(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                         ) -> None:
    """A generic reduce_window (its reduction a jaxpr: ``lax.reduce_window`` with a
    function of its own) under vmap: its initial values unbatched (BAT-13), every operand
    batched first (an unbatched one broadcast to the batch, unsplit), a window of 1 over
    the batch, every result batched first (JAX's rule). An initial value the description
    does not hold is a literal, unbatched."""
    count = len(eq.results)   # one operand and one initial value per result
    check_program(len(numbers) >= count, f"the reduce_window at {path} under vmap",
                  f"its {count} operands held by the description", numbers)
    check_initial_values_unbatched(tuple(dims[count:]), path)
    size = batch_size(rw, numbers, dims)
    operands = tuple(at_front(rw, n, d, size) for n, d in zip(numbers[:count], dims))
    params = _params(eq)
    for key, unit in (("window_dimensions", 1), ("window_strides", 1),
                      ("padding", (0, 0)), ("base_dilation", 1), ("window_dilation", 1)):
        params[key] = (unit,) + tuple(params[key])
    bind_batched(rw, eq, operands + tuple(numbers[count:]), params, 0, size)
