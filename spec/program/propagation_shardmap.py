"""Propagation through a shard_map that leaves some mesh axes automatic (issue 33): the
partitioner enters its body.

JAX 0.10.2 lowers ``jax.shard_map(..., axis_names={'x'})`` over a mesh ``('x', 'y')`` to an
``sdy.manual_computation`` whose in and out shardings hold the specs' manual axes as a
closed prefix of each dimension, open after it (``[{"x", ?}, {?}]``), over a body of local
shapes. Shardy moves the free axes an operand holds after that prefix into the body, the
body's own operations propagate them as any program's do, and its results carry them out
after their manual prefix, both ways (a result's uses reach back into the body); no free
value takes a manual axis. The boundary is a data-flow edge both ways too: an operand left
open takes its spec's manual axes and the body's free axes back (seen: ``sin(a)`` read by
the shard_map and returned on ``P('x', 'y')``; a dot's result on ``P('y', 'x')``).
:func:`shard_map_boundary` adds such a shard_map to the flat program
:mod:`~shardlaw.spec.program.propagation` propagates; one whose every axis is manual is
seen from outside only (:func:`~shardlaw.spec.program.propagation_pins.manual_boundary`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import rule
from ..core.shardings import NamedSharding
from ..core.values import AxisType
from .primitives import Factors
from .propagation import COPY, Flat, inline_body, placed_pin, stop
from .propagation_pins import manual_boundary, pin

__all__ = ["shard_map_boundary", "free_axes_boundary", "operand_link", "held_result_open",
           "loop_result_read", "LedLink", "AutoLink", "AllReduceLink", "LOCAL_ELEMENTWISE",
           "ALL_REDUCE"]


@dataclasses.dataclass(frozen=True)
class LedLink(Factors):
    """The rule of a link between a shard_map's operand and the value it holds: one factor
    per dimension, led by the operand (PROP-20); the schedule reads ``led``."""

    led = True   # (a class attribute: not a field)


@dataclasses.dataclass(frozen=True)
class AutoLink(LedLink):
    """A :class:`LedLink` into a shard_map leaving axes automatic;
    :func:`~shardlaw.spec.program.propagation_pins.shared_chain_link` (PROP-4) reads
    ``automatic``."""

    automatic = True   # (a class attribute: not a field)


@dataclasses.dataclass(frozen=True)
class AllReduceLink(Factors):
    """The rule of a body's psum, pmax or pmin over its manual axes (PROP-11): every
    dimension passed through, from the schedule's second pass on (lowered to an
    all-reduce, which Shardy does not count elementwise); the schedule reads
    ``first_pass``."""

    first_pass = False   # (a class attribute: not a field)


# The collectives of a body over its manual axes only: elementwise over its local shapes.
LOCAL_ELEMENTWISE = frozenset(("psum", "pmax", "pmin", "pvary", "psum_invariant", "pcast"))
# Those of them lowered to an all-reduce: not elementwise to the partitioner's schedule.
ALL_REDUCE = frozenset(("psum", "pmax", "pmin", "psum_invariant"))


def shard_map_boundary(flat: Flat, eq: Any, operands: list, results: list, mesh: Any,
                       path: str, constraints: list) -> None:
    """A shard_map in the flat program: seen from outside where every axis is manual
    (PROP-6), else its body entered (PROP-11); over Auto axes a free axis of size 1 too
    (JAX then lowers its boundary open, ``[{?}]``, as for any other free axis), over a mesh
    with Explicit axes not (its lowering types every value first: seen from outside)."""
    explicit = AxisType.Explicit in mesh.axis_types
    free = [a for a in mesh.axis_names
            if a not in eq.manual_axes and not (explicit and mesh.axis_size(a) == 1)]
    if not free:
        manual_boundary(flat, eq, operands, results, mesh, path)
        for n in operands:
            operand_link(flat, n, -1, path, full=True)
        return
    free_axes_boundary(flat, eq, operands, results, mesh, path, constraints)


@rule("PROP-11", mirrors="shardy: sdy.manual_computation (the free axes propagated "
                         "through its body)")
def free_axes_boundary(flat: Flat, eq: Any, operands: list, results: list, mesh: Any,
                       path: str, constraints: list) -> None:
    """A shard_map leaving mesh axes automatic holds each operand and result on its spec's manual axes, then the free axes its operand, its body or its result's uses give, and an operand left open takes that back.

    The body is propagated over its local shapes; its collectives over manual axes pass
    every dimension's split through, a psum, pmax or pmin (an all-reduce, not elementwise
    to Shardy's schedule) from its second pass on, after the data-flow edges of the
    shard_maps around it (seen: its result read by a next shard_map through a manual
    axis takes that axis, not the free ones of its body); only the held values are
    barred from taking a manual axis anew, and those they hold bar nothing (PROP-23). Stops (an Undetermined at ``path``) over another mesh or a mesh with
    Explicit axes.

    >>> from shardlaw.spec import Mesh, NamedSharding, P, explain_program
    >>> from shardlaw.spec.program.description import Opaque, Program, ShardMap, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8, 8), NamedSharding(mesh, P(None, "y")))
    >>> t = Value.typed((4, 8))
    >>> body = Program((t,), (Opaque((0,), primitive="cos", results=(Value.typed((4, 8)),)),),
    ...                outputs=(1,))
    >>> smap = ShardMap((0,), results=(Value.typed((8, 8)),), body=body, mesh=mesh,
    ...                 in_specs=(P("x", None),), out_specs=(P("x", None),),
    ...                 manual_axes=frozenset({"x"}), check_vma=False)
    >>> explain_program(Program((a,), (smap,), outputs=(1,))).out_shardings[0].spec
    P('x', 'y')
    """
    if eq.mesh.abstract != mesh.abstract or AxisType.Explicit in mesh.axis_types:
        stop("PROP-11", "a shard_map leaving mesh axes automatic over another mesh, or over "
             "a mesh with Explicit axes, is not propagated yet", path)
    manual = frozenset(a for a in eq.manual_axes if mesh.axis_size(a) != 1)
    body = eq.body
    inner = []
    for n, spec, local in zip(operands, eq.in_specs, body.inputs):
        held = _held(flat, flat.types[n], spec, mesh, manual, path)
        loop_result_read(flat, n, held, path)
        operand_link(flat, n, held, path)
        inner.append(flat.new(local))
        flat.barred[inner[-1]] = manual
        _strip(flat, held, inner[-1], _manual_dims(flat, held, mesh), path, inward=True)
    first = len(flat.steps)
    outs = inline_body(body, inner, path, flat, mesh, constraints, f"{path}.shard_map.")
    _local_collectives(flat, first)
    for n, spec, out in zip(results, eq.out_specs, outs):
        _hold(flat, n, spec, mesh, manual, path)
        _strip(flat, n, out, _manual_dims(flat, n, mesh), path, inward=False)


@rule("PROP-20", mirrors="shardy: PropagateManualComputationOp (operand and in sharding, "
                         "visited in program order) and ApplyShardingConstraintsPass")
def operand_link(flat: Flat, operand: int, held: int, path: str, full: bool = False) -> None:
    """A shard_map's operand leads its link to the value the shard_map holds, its own split winning a conflict, and beside a shard_map leaving axes automatic takes no other use's closed placement.

    Shardy propagates between a manual computation's operand and its in sharding in every
    pass of its schedule, visiting operations in program order: an operand whose producer
    propagates in the same pass (sin, convert, a transpose) keeps the split that producer
    gives; one made by a later pass's operation (a dot, a reduction) takes the held value's
    split first. Seen, mesh ``(2, 4)``: ``s = sin(a)`` of ``a`` on ``P('y', None)`` read
    through ``P('x', None)`` over ``{'x'}`` comes back ``P('y', None)``; ``s = a @ w`` of
    ``a`` on ``P('x', None)`` read through ``P(None, 'x')``, ``P(None, 'x')``.

    A closed sharding (a constraint's, an inner jit's, a full shard_map's in spec) is
    moved onto the value it reads only where no other constraint or manual computation
    reads that value under another sharding; a shard_map leaving axes automatic has an
    open one (``[{?}, {?}]``): ``b = sin(a)`` read by a full shard_map of in spec
    ``P(None, 'y')`` comes back ``P(None, 'y')``, read by one over ``{'x'}`` too,
    ``P('y', None)``. Recorded as a move of no split onto ``operand``, which
    :func:`~shardlaw.spec.program.propagation_pins.move_pins` and
    :func:`~shardlaw.spec.program.propagation_pins.place_constraints` read so. ``full``:
    the shard_map makes every axis manual (its link made by
    :func:`~shardlaw.spec.program.propagation_pins.manual_boundary`, ``held`` ignored).

    >>> from shardlaw.spec.program.propagation import Flat
    >>> from shardlaw.spec.program.description import Value
    >>> flat = Flat()
    >>> a, held = flat.new(Value.typed((8,))), flat.new(Value.typed((8,)))
    >>> operand_link(flat, a, held, "body[2]")
    >>> flat.steps[0][1].led, flat.steps[0][2], flat.moves
    (True, (0, 1), [(0, 1, None, 'body[2]')])
    """
    if full:
        for k, (entry, rule_, every, types, at, count) in enumerate(flat.steps):
            if entry is COPY and count == 1 and every[0] == operand and at == path:
                flat.steps[k] = (entry, LedLink(rule_.operands, rule_.results), every,
                                 types, at, count)
        return
    dims = tuple(f"f{d}" for d in range(len(flat.types[held].shape)))
    every = (operand, held)
    flat.steps.append((COPY, AutoLink((dims,), (dims,)), every,
                       tuple(flat.types[i] for i in every), path, 1))
    flat.moves.append((operand, held, None, path))


@rule("PROP-21", mirrors="shardy: op-priority propagation's first pass (a while's "
                         "data-flow edges, a dynamic slice forward) before a manual "
                         "computation")
def loop_result_read(flat: Flat, operand: int, held: int, path: str) -> None:
    """A loop's or cond's result read by a shard_map leaving axes automatic through a spec naming a manual axis, in a program placing other splits, is left open: which reaches it first is the partitioner's order.

    Shardy visits a loop's data-flow edges and its dynamic slices (a scan's ``xs``) in the
    first pass of its schedule, before the shard_map that reads the loop's result, where
    the spec's loop joins come in a later pass; what the loop's body brings may win. Seen,
    mesh ``(2, 4)``: a scan's carry, initial ``P()``, ``xs`` on ``P(None, 'x')``, read by
    ``shard_map(..., in_specs=P('y'), axis_names={'y'})``, comes back ``P('x')``; with
    ``xs`` on ``P()`` it takes the manual ``'y'``.

    >>> from shardlaw.spec.program.propagation import Flat
    >>> from shardlaw.spec.program.description import Value
    >>> flat = Flat()
    >>> carry, held = flat.new(Value.typed((8,))), flat.new(Value.typed((8,)))
    >>> flat.edges.append(([], carry, "body[0]"))   # (a loop's carry)
    >>> flat.fixed[held], flat.barred[held] = (("y",),), frozenset("y")
    >>> loop_result_read(flat, carry, held, "body[1]")   # nothing else placed: linked
    >>> flat.fixed[7] = (("x",),)   # an input placed on P('x')
    >>> try:
    ...     loop_result_read(flat, carry, held, "body[1]")
    ... except Exception as stopped:
    ...     print(stopped.undetermined.rule)
    PROP-21
    """
    if not any(flat.fixed[held]):
        return
    joined = {result for _, result, _ in flat.edges}
    copied = {every[1] for entry, _, every, _, _, _ in flat.steps
              if entry is COPY and len(every) == 2 and every[0] in joined}
    if operand not in joined | copied:
        return
    split = any(axes for number, fixed in flat.fixed.items() if number not in flat.barred
                for axes in fixed)
    if split:
        stop("PROP-21", "a loop's or cond's result read by a shard_map leaving axes "
             "automatic over a spec naming a manual axis: whether the loop's body or the "
             "manual axes split it first is the partitioner's order of visiting", path)


def held_result_open(flat: Flat, number: int, given: Any, uses: int) -> bool:
    """Whether out sharding ``given`` on value ``number``, a shard_map's result held open
    after its manual axes (PROP-11), is left to the partitioner: the value has other
    ``uses`` and some axis of ``given`` is neither held nor barred to it, so it could move
    on, as for any value (PROP-6). Seen: ``s = shard_map(cos, axis_names={'y'},
    in_specs=P(None))(a)`` returned under ``P('x')`` and read by ``s * 2``: JAX returns
    ``s * 2`` on ``P('x')``; over ``{'x'}`` nothing moves (``P(None)``)."""
    if uses == 1 or not flat.open.get(number):
        if uses == 1 and flat.open.get(number):   # (read after propagation: PROP-26)
            flat.held_outs.append((number, given))
        return False
    barred = flat.barred.get(number, frozenset())
    held = {a for axes in flat.fixed[number] for a in axes}
    return any(a not in barred and a not in held for e in given.spec.partitions
               for a in ((e,) if isinstance(e, str) else e or ()))


def _held(flat: Flat, value: Any, spec: Any, mesh: Any, manual: frozenset, path: str) -> int:
    """A new value of ``value``'s type held on ``spec``'s manual axes, open after them."""
    number = flat.new(value)
    _hold(flat, number, spec, mesh, manual, path)
    return number


def _hold(flat: Flat, number: int, spec: Any, mesh: Any, manual: frozenset, path: str
          ) -> None:
    """Value ``number`` placed on ``spec``'s manual axes, every dimension open after them,
    barred from taking a manual axis anew."""
    rank = len(flat.types[number].shape)
    placed = placed_pin(NamedSharding(mesh, spec), mesh, rank)
    if placed is None or any(a not in manual for d in placed[0] for a in d):
        stop("PROP-11", "a shard_map's spec names an axis it does not make manual", path)
    pin(flat, number, placed[0], (True,) * rank)
    flat.barred[number] = manual


def _manual_dims(flat: Flat, number: int, mesh: Any) -> tuple[int, ...]:
    """Per dimension of a held value, how many ways its manual axes split it."""
    ways = []
    for axes in flat.fixed[number]:
        ways.append(1)
        for a in axes:
            ways[-1] *= mesh.axis_size(a)
    return tuple(ways)


def _strip(flat: Flat, held: int, local: int, ways: tuple[int, ...], path: str,
           inward: bool) -> None:
    """The step between a held value and its body's local one (``inward``: the held value
    is the operand): per dimension a factor of its manual ways major in the held value's
    dimension, the local rest shared with the body's value."""
    shape = flat.types[local].shape
    whole = tuple(f"m{d}*f{d}" if w > 1 else f"f{d}" for d, w in enumerate(ways))
    part = tuple(f"f{d}" for d in range(len(shape)))
    sizes = tuple(item for d, w in enumerate(ways) if w > 1
                  for item in ((f"m{d}", w), (f"f{d}", shape[d])))
    rule_ = Factors((whole,), (part,), sizes=sizes) if inward else \
        Factors((part,), (whole,), sizes=sizes)
    every = (held, local) if inward else (local, held)
    flat.steps.append((COPY, rule_, every, tuple(flat.types[i] for i in every), path, 1))


def _local_collectives(flat: Flat, first: int) -> None:
    """The body's collectives over its manual axes from step ``first`` on, of one result
    and one operand of its shape (or none: a literal's ``pvary``): each dimension's split
    passed through."""
    for k in range(first, len(flat.steps)):
        entry, rule_, every, types, path, count = flat.steps[k]
        if entry.name in LOCAL_ELEMENTWISE and count <= 1 and len(every) == count + 1 and \
                all(t.shape == types[-1].shape for t in types):
            dims = tuple(f"f{d}" for d in range(len(types[-1].shape)))
            kind = AllReduceLink if entry.name in ALL_REDUCE else Factors
            flat.steps[k] = (COPY, kind((dims,) * count, (dims,)), every, types, path,
                             count)
