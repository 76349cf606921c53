"""What the user placed, at the boundaries propagation meets (issue 33): the pins
:mod:`~shardlaw.spec.program.propagation` fixes before it propagates — a placed value's
split and its open dimensions, an inner jit's shardings and a full-manual shard_map's
specs (moved onto their operands where live), the types' Explicit axes beside Auto ones,
the out shardings JAX's lowering makes of a type, a reshard as JAX lowers it (a
constraint to its type), the joins of control flow checked after, and the values a
conflict the partitioner's order decides may reach. Its own module for size; the rules
are PROP-6's and PROP-4's.
"""

from __future__ import annotations

import math
from typing import Any

from ..core.rules import rule
from ..core.shardings import UNSPECIFIED, NamedSharding
from ..core.values import AxisType, PartitionSpec
from .description import Program
from .primitives import Factors, entry_of
from .sharding_factors import broadcast_factors, factors_of_dimension
from .propagation import COPY, ORDER_DECIDES, Flat, Split, Undetermined, placed_pin, stop
from .propagation_branches import types_written
from .propagation_schedule import ordered_growth

__all__ = ["check_joins", "implied_out_shardings", "typed_pins", "pin", "link", "boundary",
           "rebroadcast", "move_pins", "manual_boundary", "grown_split", "barred_cut", "takes_of",
           "held_takes", "folded",
           "place_constraints", "constraint_pin", "joined_constraint_pin", "reshard_pin",
           "may_grow", "axes_apart", "resolve_apart", "contested_values", "shared_chain_link"]


def _apart(a: tuple, b: tuple) -> bool:
    """Whether neither split is a prefix of the other."""
    return a[:len(b)] != b and b[:len(a)] != a


def check_joins(flat: Flat, splits: dict) -> None:
    """A loop's carry or a cond's result whose sources (the initial carry and the body's
    next one; the branches' results) end split apart: which the partitioner keeps is its
    own order's (seen: a carry takes the body's split over the initial one's)."""
    for sources, result, path in flat.joins:
        if result in flat.live and any(_apart(a, b) for s in sources for t in sources
                                       for a, b in zip(splits[s], splits[t])):
            stop("PROP-4", "a loop's carry or a cond's results are split apart by their "
                  "sources: which the partitioner keeps is its own order's", path)
    shared_chain_link(flat, splits)


def shared_chain_link(flat: Flat, splits: dict) -> None:
    """A shard_map leaving axes automatic whose operand ends without its spec's manual axes
    where the spec puts them, made from a value of more than one use, is left open (PROP-4).

    Its operand's own producer then won the conflict (PROP-20); JAX gives the spec's
    split instead where a value the operand is made from has another use (an operation,
    or a result of the program). Seen, mesh ``(4, 2)``: ``t = a.T`` of ``a`` on
    ``P('y', None)``, read by ``shard_map(..., in_specs=P('y', None),
    axis_names={'y'})``, comes back ``P(None, 'y')``, and ``P('y', None)`` where the
    program also reads ``a + b``, ``a * 2`` or ``sin(a)``, or returns ``a``; where the
    spec agrees with the producer (``P('x', None)`` over ``{'x'}``), ``P('x', 'y')``
    either way. Which order the partitioner visits such a chain in is not written.

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.program.propagation_shardmap import operand_link
    >>> flat = Flat()
    >>> a, t, held = (flat.new(Value.typed((8, 8))) for _ in range(3))
    >>> flat.equations, flat.live = [("body[0]", "transpose", (a,), (t,))], {a, t, held}
    >>> flat.fixed[held] = (("y",), ())
    >>> operand_link(flat, t, held, "body[1]")
    >>> splits = {a: (("y",), ()), t: ((), ("y",)), held: (("y",), ())}
    >>> shared_chain_link(flat, splits)   # a has one use: the transpose's split stands
    >>> flat.outputs = [a]
    >>> try:
    ...     shared_chain_link(flat, splits)
    ... except Exception as stopped:
    ...     print(stopped.undetermined.rule)
    PROP-4
    """
    for _, rule_, every, _, path, _ in flat.steps:
        if not getattr(rule_, "automatic", False):
            continue
        operand, held = every
        if all(splits[operand][d][:len(axes)] == axes
               for d, axes in enumerate(flat.fixed.get(held, ())) if axes):
            continue
        if _shared_source(flat, operand):
            stop("PROP-4", "a shard_map leaving axes automatic reads a value made from one "
                 "of more uses, which keeps its producer's split over the spec's manual "
                 "axes: which the partitioner keeps is its order of visiting that chain",
                 path)


def _shared_source(flat: Flat, number: int) -> bool:
    """Whether a value ``number`` is made from (not itself) has more than one use: a live
    equation reading it (jit drops dead ones), or the program returning it."""
    uses: dict = {}
    made: dict = {}
    for _, _, operands, results in flat.equations:
        if not flat.live & set(results):
            continue
        for n in set(operands):
            uses[n] = uses.get(n, 0) + 1
        for n in results:
            made[n] = operands
    for n in flat.outputs:
        uses[n] = uses.get(n, 0) + 1
    seen: set = set()
    todo = list(made.get(number, ()))
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if uses.get(n, 0) > 1:
            return True
        todo += made.get(n, ())
    return False


def implied_out_shardings(program: Program, mesh: Any) -> tuple:
    """The out shardings the partitioner sees: the jit's, and on a mesh with Explicit
    axes, for a result left open whose type splits every dimension, its type's sharding
    (JAX's lowering makes one of the type; seen: ``sin`` of ``P(('x', 'y'))``, 'x'
    Explicit, comes back ``P('x')``, while a rank-2 ``P(('x', 'y'), None)`` keeps 'y')."""
    given = program.out_shardings or (UNSPECIFIED,) * len(program.outputs)
    if AxisType.Explicit not in mesh.axis_types:
        return given
    types = program.value_types
    out = []
    for n, sharding in zip(program.outputs, given):
        value = types[n]
        spec = tuple(value.spec or ())
        if sharding is UNSPECIFIED and value.mesh == mesh.abstract and len(spec) == len(
                value.shape) and all(e is not None for e in spec):
            sharding = NamedSharding(mesh, PartitionSpec(*spec))
        out.append(sharding)
    return tuple(out)


def typed_pins(flat: Flat, mesh: Any) -> Undetermined | None:
    """On a mesh with Explicit axes every value's type holds its split over them (JAX's
    lowering constrains each result to its type, the Auto axes left open: ``{"x", ?}``;
    over Explicit axes alone every dimension closed: ``{"x"}``):
    a value not placed otherwise starts on its type's split, grows over Auto axes only,
    and never takes an Explicit axis its type does not hold."""
    explicit = {n for n, t in zip(mesh.axis_names, mesh.axis_types)
                if t is AxisType.Explicit}
    if not explicit:
        return None
    auto = AxisType.Auto in mesh.axis_types
    for number, value in enumerate(flat.types):
        if not value.shape or number not in flat.live:
            continue
        if value.mesh is None:
            continue   # a value typed over no mesh is not constrained by lowering
        spec = value.spec or PartitionSpec()
        if value.mesh != mesh.abstract or spec.unreduced or spec.reduced:
            return Undetermined("PROP-1", "a value typed over another mesh, or with unreduced "
                                "or reduced axes, is not propagated")
        entries = tuple(spec) + (None,) * len(value.shape)
        typed = tuple(tuple(a for a in ((e,) if isinstance(e, str) else e or ())
                            if a in explicit) for e in entries[:len(value.shape)])
        flat.barred[number] = frozenset(explicit - {a for d in typed for a in d})
        if number not in flat.fixed:   # (closed where the mesh has no Auto axis)
            pin(flat, number, tuple(tuple(a for a in d if mesh.axis_size(a) != 1)
                                     for d in typed), (auto,) * len(value.shape))
    return None


def pin(flat: Flat, number: int, split: Split, opens: tuple[bool, ...]) -> None:
    """Value ``number`` placed on ``split``, its ``opens`` dimensions left to grow."""
    flat.fixed[number] = split
    if any(opens):
        flat.open[number] = opens


def link(flat: Flat, operand: int, result: int, path: str) -> None:
    """A step passing ``operand``'s every dimension to ``result`` (a constraint's open
    dimensions, an inner jit's boundary): one factor per dimension, as a copy."""
    dims = tuple(f"f{d}" for d in range(len(flat.types[operand].shape)))
    flat.steps.append((COPY, Factors((dims,), (dims,)), (operand, result),
                       (flat.types[operand], flat.types[result]), path, 1))


def boundary(flat: Flat, number: int, sharding: Any, value: Any, mesh: Any, path: str,
              into: bool = False) -> int:
    """The value an inner jit's body sees for ``number`` under its in (``into``) or out
    sharding: ``number`` itself when none is given; an operand not placed otherwise is
    placed on its in sharding, whatever its other uses (seen: ``sin(a)`` returned and
    passed to a jit of in sharding ``P('x')`` comes back ``P('x')``), and the value its
    body returns on its out sharding alike; else a new value
    placed on it and linked to ``number`` (the partitioner keeps the shardings as
    written)."""
    if sharding is UNSPECIFIED:
        return number
    placed = placed_pin(sharding, mesh, len(value.shape))
    if placed is None or any(placed[1]):
        stop("PROP-6", "an inner jit's in or out sharding is not a NamedSharding over the "
              "program's mesh without unreduced axes or UNCONSTRAINED dimensions", path)
    inner = flat.new(value)
    pin(flat, inner, *placed)
    link(flat, number, inner, path)
    if not any(placed[1]) and AxisType.Explicit not in mesh.axis_types:
        # moved onto ``number`` once the dead code is gone (an out sharding too, onto the
        # value the body returns: seen, PROP-18's cut follows it); over Explicit axes lowering
        # constrains ``number`` to its type first, and the sharding stays a constraint in
        # the callee as written (seen: P('x', None) on a value typed P(None, 'y') is
        # ``[{"x"}, {}]``), propagated through
        flat.moves.append((number, inner, placed[0], path))
    return inner


def move_pins(flat: Flat, mesh: Any) -> Undetermined | None:
    """Each live in sharding or in spec placed on the operand it is moved onto where every
    one on that operand agrees (an operand placed otherwise keeps its placement; seen: two
    inner jits placing ``g`` on ``P('x', None)`` and ``P(None, 'y')`` leave it to
    propagation, which brings it ``P('x', 'y')``), or why not."""
    wanted: dict[int, set] = {}
    for number, inner, split, _ in flat.moves:
        if inner in flat.live:
            wanted.setdefault(number, set()).add(split)
    for number, splits in wanted.items():   # (None: a use of an open in sharding, PROP-20)
        if number not in flat.fixed and len(splits) == 1 and None not in splits:
            pin(flat, number, next(iter(splits)), ())
            flat.bounded.add(number)
    return None


def manual_boundary(flat: Flat, eq: Any, operands: list, results: list, mesh: Any,
                     path: str) -> None:
    """A shard_map whose every axis is manual, from the outside: its in specs are where
    its operands are brought (propagated back to them as an inner jit's in shardings are),
    its out specs where its results are; the partitioner does not enter its body."""
    free = [a for a in mesh.axis_names if a not in eq.manual_axes and mesh.axis_size(a) != 1]
    if free or eq.mesh.abstract != mesh.abstract:
        stop("PROP-6", f"a shard_map leaving mesh axes {free} automatic, or over another "
              f"mesh, is not propagated yet", path)
    inner = [boundary(flat, n, NamedSharding(mesh, spec), flat.types[n], mesh, path,
                       into=True) for n, spec in zip(operands, eq.in_specs)]
    for n, spec in zip(results, eq.out_specs):
        # (a result reduced over an axis is replicated along it when lowered)
        spec = PartitionSpec(*spec.partitions, unreduced=spec.unreduced) if spec.reduced \
            else spec
        found = placed_pin(NamedSharding(mesh, spec), mesh, len(flat.types[n].shape))
        if found is None:
            stop("PROP-6", f"a shard_map result put together unreduced ({spec}) is not "
                 f"propagated yet", path)
        pin(flat, n, *found)
    # the body, unseen: results computed from the operands' placed values, sharing no factor
    tensors = [tuple(f"m{k}_{d}" for d in range(len(flat.types[n].shape)))
               for k, n in enumerate(inner + results)]
    every = tuple(inner + results)
    flat.steps.append((entry_of(eq), Factors(tuple(tensors[:len(inner)]),
                                             tuple(tensors[len(inner):]),
                                             replicated=frozenset(f for t in tensors
                                                                  for f in t)),
                       every, tuple(flat.types[i] for i in every), path, len(inner)))


def grown_split(number: int, new: Split, splits: dict, fixed: Any, path: str) -> Split | None:
    """The split value ``number`` grows to where ``new`` extends it (in its open
    dimensions only, where it is placed in part); None: it does not grow."""
    old = splits[number]
    opens = fixed.open.get(number)
    if opens is not None:
        new = tuple(n if o else d for n, o, d in zip(new, opens, old))
    if new == old or not all(n[:len(o)] == o for n, o in zip(new, old)):
        return None
    new = barred_cut(new, old, fixed.barred.get(number, ()))
    return None if new == old else new


@rule("PROP-9", mirrors="shardy: a tensor's replicated axes (JAX lowers a type so)")
def barred_cut(new: Split, old: Split, barred: Any) -> Split:
    """A value grows onto no Explicit axis its type does not hold: each dimension's growth
    stops before the first such axis, the value keeping what it held.

    JAX's lowering marks the value replicated over those axes, and Shardy propagates no
    axis a tensor holds replicated (seen: ``reshard(sin(a), P(None, 'y'))``, 'y' Explicit
    and 'x' Auto, of ``a`` on ``P('x', None)``: ``sin(a)``, typed without 'y', stays on
    ``P('x', None)``, and the reshard comes back ``P('x', 'y')`` with no collective).

    >>> barred_cut(((), ("x", "y")), ((), ("x",)), {"y"})
    ((), ('x',))
    >>> barred_cut((("x",), ("z", "y")), ((), ()), {"y"})
    (('x',), ('z',))
    """
    out = []
    for n, o in zip(new, old):
        kept = len(o)
        while kept < len(n) and n[kept] not in barred:
            kept += 1
        out.append(n[:kept])
    return tuple(out)


@rule("PROP-10", mirrors="shardy: compatible major axes (a tensor's replicated axes cut them)")
def takes_of(split: tuple[str, ...], fixed: Any, number: int) -> tuple[str, ...]:
    """Of a factor's split another tensor holds, value ``number`` could take only the axes
    before the first Explicit axis its type bars: a conflict with nothing it could take is
    decided whatever the partitioner's order.

    (Seen: ``reshard(sin(a), P('y', None))``, 'y' Explicit, of ``a`` on ``P('x', None)``:
    ``sin(a)`` keeps ``'x'`` and the reshard ``'y'`` in either order: ``P('y', None)``.)

    >>> from shardlaw.spec.program.propagation import Limits
    >>> takes_of(("y", "x"), Limits(frozenset(), {}, {3: frozenset("y")}), 3)
    ()
    """
    barred = fixed.barred.get(number, ())
    kept = 0
    while kept < len(split) and split[kept] not in barred:
        kept += 1
    return split[:kept]


@rule("PROP-23", mirrors="shardy: sdy.manual_computation's in and out shardings (the "
                         "manual axes a closed prefix of each dimension, open after it)")
def held_takes(split: tuple[str, ...], held: tuple[str, ...], fixed: Any, number: int
               ) -> tuple[str, ...]:
    """A value a shard_map leaving axes automatic holds on its manual axes takes a factor's split that extends them past them, up to the first axis it is barred from after them.

    The manual axes it holds are the closed prefix of its in or out sharding; only a
    manual axis taken anew is barred (PROP-11). Where one mesh axis would split two
    factors of its link (PROP-14) they grow it as anywhere else. Seen, mesh ``(2, 2, 2)``:
    ``a`` on ``P(('y', 'x'), 'z', None)`` read by ``shard_map(cos, in_specs=P('y', None,
    'z'), axis_names={'y', 'z'})`` comes back ``P(('y', 'x'), None, 'z')``: ``'x'``
    enters the body although ``'z'`` splits another dimension of ``a``.

    >>> from shardlaw.spec.program.propagation import Limits
    >>> held_takes(("y", "x"), ("y",), Limits(frozenset(), {}, {3: frozenset("yz")}), 3)
    ('y', 'x')
    >>> held_takes(("y", "z", "x"), ("y",), Limits(frozenset(), {}, {3: frozenset("yz")}), 3)
    ('y',)
    """
    if split[:len(held)] != held:
        return takes_of(split, fixed, number)
    return held + takes_of(split[len(held):], fixed, number)


def is_reshape(name: str, operand: Any, result: Any) -> bool:
    """Whether an equation is a reshape as StableHLO reads it: a reshape, a squeeze, or a
    broadcast_in_dim that only adds dimensions of size 1 (seen: ``squeeze`` of
    ``broadcast_in_dim`` of an input folded back to the input, returned on its placement)."""
    if name in ("reshape", "squeeze"):
        return True
    return name == "broadcast_in_dim" and operand is not None and result is not None and \
        math.prod(operand.shape) == math.prod(result.shape)


def folded(eq: Any, operands: list, result: Any, flat: Flat, path: str) -> int | None:
    """The value an equation StableHLO folds away is (None: not folded): a slice of every
    element is its operand (seen: an in spec not moved onto it), a reshape back to the
    shape before a reshape that reshape's operand ((4, 16) -> (64,) -> (4, 16))."""
    name = getattr(eq, "primitive", "") or eq.kind
    if operands and operands[0] in flat.reshaped and is_reshape(
            name, flat.types[operands[0]], result) and not types_written(
                flat.types[operands[0]].mesh):   # (a type's constraint between: PROP-25)
        first = flat.reshaped[operands[0]]
        if flat.types[first].shape != result.shape:
            stop("PROP-4", "a reshape of a reshape's result: StableHLO folds the two into "
                  "one, which is not written", path)
        return first
    if name in ("slice", "dynamic_slice") and result.shape == flat.types[operands[0]].shape \
            and not _typed_explicit(result):
        return operands[0]   # (over Explicit axes the lowered type's constraint stays)
    if name == "slice" and operands[0] in flat.concats:
        return _sliced_part(dict(eq.params), *flat.concats[operands[0]], flat)
    if name == "name":
        return operands[0]   # (checkpoint_name: lowering emits nothing, AD-21)
    if eq.kind == "reshard" and not _typed_explicit(result):
        return operands[0]   # (typed over no Explicit axis: lowering emits nothing)
    return None


def _typed_explicit(value: Any) -> bool:
    """Whether a value is typed over a mesh with Explicit axes (JAX lowers its result with
    its type's constraint, which stays when StableHLO folds the equation away; seen: a
    whole slice of ``P(('z', 'y'), 'x')``, 'z' Auto, comes back ``P('y', 'x')``)."""
    return value.mesh is not None and AxisType.Explicit in value.mesh.axis_types


def _sliced_part(params: dict, parts: tuple, axis: int, flat: Flat) -> int | None:
    """The operand of a concatenate along ``axis`` whose whole range a slice takes (StableHLO
    folds the slice to it; seen: ``concatenate([a, b])[0:4]`` of ``a`` on ``P(None)`` and
    ``b`` on ``P('y')`` comes back ``P(None)``); None: another slice."""
    if any(s != 1 for s in params.get("strides") or ()):
        return None
    offset = 0
    for part in parts:
        shape = flat.types[part].shape
        if all((start, limit) == ((offset, offset + n) if d == axis else (0, n))
               for d, (start, limit, n) in enumerate(zip(
                   params["start_indices"], params["limit_indices"], shape))):
            return part
        offset += shape[axis]
    return None


def rebroadcast(flat: Flat, eq: Any, operands: list, result: int, rule_: Any) -> tuple:
    """A broadcast_in_dim's operands and factors as StableHLO folds a broadcast of a
    broadcast's result: one broadcast of the first one's operand (seen: a split a use gives
    the second result is not moved onto the first's)."""
    where = dict(getattr(eq, "params", ())).get("broadcast_dimensions")
    if where is None or len(operands) != 1:
        return operands, rule_
    where = tuple(where)
    if operands[0] in flat.broadcasts:
        source, first = flat.broadcasts[operands[0]]
        operands, where = [source], tuple(where[w] for w in first)
        rule_ = broadcast_factors(tuple(flat.types[source].shape),
                                  tuple(flat.types[result].shape), where)
    flat.broadcasts[result] = (operands[0], where)
    return operands, rule_


def place_constraints(flat: Flat, constraints: list, outputs: list) -> Undetermined | None:
    """The live sharding constraints as the partitioner imports them (PROP-6), in program
    order, or why not: each is a step passing its operand to its result dimension for
    dimension, its result placed as written (its UNCONSTRAINED dimensions open), and its
    split moved onto its operand where the constraint has no open dimension, the operand
    no placement yet (on a mesh with Explicit axes lowering constrains every value to its
    type first) and no other constraint of another split — whatever its other uses (seen:
    ``sin(a)`` returned beside ``wsc(sin(a), P(None, 'y'))`` comes back on ``P(None, 'y')``)."""
    uses = _live_uses(flat, constraints, outputs)
    on: dict[int, list] = {}
    for c in constraints:
        on.setdefault(c[0], []).append(c)
    made = {c[1] for c in constraints}
    edges = {result for _, result, _ in flat.joins}
    moved = {m[0] for m in flat.moves if m[1] in flat.live}
    led = {result for _, result, _ in flat.led} & {c for loop in flat.loops for c in loop[2]}
    for operand, _, (split, opens), _ in constraints:   # (a move and a constraint apart)
        if operand in flat.bounded and (flat.fixed[operand] != split or any(opens)):
            del flat.fixed[operand]
            flat.bounded.discard(operand)
    for operand, result, (split, opens), path in constraints:
        pin(flat, result, split, opens)
        link(flat, operand, result, path)
    for operand, result, (split, opens), path in constraints:
        if operand in made or operand in flat.fixed or _type_constrained(flat.types[operand]):
            continue
        tail = _chain_tail(result, uses, on)
        if tail is not None and len(on[operand]) == 1 and operand not in moved:
            _read_after(flat, operand, tail)
        if any(opens) or operand in moved or operand in led or any(
                other[2] != (split, opens) for other in on[operand]):
            continue   # (a loop's carry its constraint leads stays open: PROP-22)
        if operand in edges:
            if operand in outputs:
                return Undetermined("PROP-6", "a constraint on a loop's or cond's result that "
                                    "is also returned: where the return reads it is not "
                                    "written", path)
            _read_after(flat, operand, result, every=True)
            continue
        pin(flat, operand, split, tuple(opens))
    return None


def _type_constrained(value: Any) -> bool:
    """Whether JAX's lowering constrains the value to its type (a value typed over a mesh
    with Explicit axes: ``sdy.sharding_constraint %v <@mesh, [{"y", ?}, {?}]>``), which
    places it before any constraint of the user's is imported."""
    mesh = value.mesh
    return bool(value.shape) and mesh is not None and AxisType.Explicit in mesh.axis_types


def _live_uses(flat: Flat, constraints: list, outputs: list) -> dict:
    """How many live uses each value has: the steps' operands, the constraints' and the
    program's results."""
    uses: dict[int, int] = {}
    for every, count in ((s[2], s[5]) for s in flat.steps):
        for n in every[:count]:
            uses[n] = uses.get(n, 0) + 1
    for n in [c[0] for c in constraints] + list(outputs):
        uses[n] = uses.get(n, 0) + 1
    return uses


def _chain_tail(result: int, uses: dict, on: dict) -> int | None:
    """The last value of a chain of constraints from ``result`` each of whose values but
    the last has the next constraint as its only use (None: a chain of one, or its last
    value read by another constraint too)."""
    tail = result
    while uses.get(tail, 0) == 1 and len(on.get(tail, ())) == 1:
        tail = on[tail][0][1]
    if tail == result or on.get(tail):
        return None
    return tail


def _read_after(flat: Flat, operand: int, value: int, every: bool = False) -> None:
    """The steps after ``value`` (all of them: ``every``) that read ``operand`` read
    ``value`` instead (Shardy's import: the uses after a chain of constraints read its
    last; a loop's or cond's result's uses read its constraint's), but the constraints'
    own steps."""
    for k, (entry, rule_, nums, types, path, count) in enumerate(flat.steps):
        if entry is COPY and nums == (operand, value):
            continue
        after = every or min(nums[count:], default=-1) > value
        if operand in nums[:count] and after and value not in nums[count:]:
            nums = tuple(value if (i < count and n == operand) else n
                         for i, n in enumerate(nums))
            flat.steps[k] = (entry, rule_, nums, types, path, count)


def constraint_pin(eq: Any, operand: Any, result: Any, mesh: Any) -> tuple:
    """A sharding constraint's or a reshard's pin as JAX lowers it, and why it is not
    propagated where the pin is None."""
    if eq.kind == "reshard":
        return reshard_pin(result, mesh), (
            "a reshard to another mesh, or with unreduced or reduced axes, is not propagated")
    pin = placed_pin(eq.sharding, mesh, len(result.shape), eq.unconstrained_dims)
    if AxisType.Explicit not in mesh.axis_types:
        return pin, ("a sharding constraint over another mesh, or with unreduced axes, is "
                     "not propagated")
    # JAX joins the constraint with the operand's type (seen: P(None, 'x') over Auto 'x' on
    # a value typed P(None, 'y') comes back P(None, ('y', 'x')))
    return joined_constraint_pin(pin, operand, mesh), (
        "a sharding constraint over another mesh, or on a value typed over another mesh or "
        "with unreduced axes, is not propagated")


def reshard_pin(result: Any, mesh: Any) -> tuple | None:
    """A reshard's pin over Explicit axes (None: not propagated): JAX lowers it as a
    sharding constraint of its operand to the result's type, each dimension closed on the
    type's axes, open over Auto axes where the mesh has any (seen: ``P('y', None)`` over
    Explicit ('x', 'y') is ``[{"y"}, {}]``, ``P('x')`` with 'y' Auto ``[{"x", ?}, {?}]``)."""
    spec = result.spec or PartitionSpec()
    if result.mesh != mesh.abstract or spec.unreduced or spec.reduced:
        return None
    entries = tuple(spec) + (None,) * len(result.shape)
    split = tuple(tuple(a for a in ((e,) if isinstance(e, str) else e or ())
                        if mesh.axis_size(a) != 1) for e in entries[:len(result.shape)])
    auto = AxisType.Auto in mesh.axis_types
    return split, (auto,) * len(result.shape)


def joined_constraint_pin(placed: tuple | None, value: Any, mesh: Any) -> tuple | None:
    """A constraint's pin on a mesh with Explicit axes as JAX lowers it (None: not
    propagated): per dimension the operand type's Explicit axes, then the constraint's
    (it may name Auto axes only); where the type holds an Explicit axis every dimension is
    closed, an UNCONSTRAINED one keeping the type's axes alone (seen: ``P(UNCONSTRAINED,
    'x')`` on a value typed ``P(None, 'y')``, 'y' Explicit, is ``[{}, {"y", "x"}]``)."""
    if placed is None or value.mesh is None or value.mesh != mesh.abstract:
        return None
    spec = value.spec or PartitionSpec()
    if spec.unreduced or spec.reduced:
        return None
    explicit = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t is AxisType.Explicit}
    entries = tuple(spec) + (None,) * len(value.shape)
    typed = tuple(tuple(a for a in ((e,) if isinstance(e, str) else e or ())
                        if a in explicit and mesh.axis_size(a) != 1)
                  for e in entries[:len(value.shape)])
    split, opens = placed
    if any(a in explicit for d in split for a in d):
        return None   # (JAX refuses it while tracing)
    if any(a in explicit for e in entries for a in ((e,) if isinstance(e, str) else e or ())):
        opens = (False,) * len(opens)
    return tuple(t + d for t, d in zip(typed, split)), opens


def may_grow(f: str, split: tuple[str, ...], tensors: tuple, numbers: tuple, current: list,
             fixed: Any, extend: bool = False) -> bool:
    """Whether factor ``f``'s split would extend a tensor holding it in a dimension open
    to growth (a factor that grows nothing leaves the partitioner no cut to make);
    ``extend``: only a tensor whose split is a prefix of it (a conflict between tensors
    that cannot grow is the types' to resolve, by a collective)."""
    for dims, number, read in zip(tensors, numbers, current):
        if number in fixed.closed or f not in read or read[f] == split:
            continue
        if extend and split[:len(read[f])] != read[f]:
            continue
        opens = fixed.open.get(number)
        if opens is None or any(o and f in factors_of_dimension(d)
                                for d, o in zip(dims, opens)):
            return True
    return False


def axes_apart(chosen: dict, current: list) -> set:
    """The mesh axes another factor holds, or would take, in a tensor of a factor that
    would take them too (empty: none; PROP-14 then orders the factors)."""
    found: set = set()
    for f, split in chosen.items():
        for t in current if split else ():
            if f in t:
                found.update(a for g, axes in t.items() if g != f
                             for a in set(split) & (set(axes) | set(chosen.get(g, ()))))
    return found


def resolve_apart(form: Any, current: list, chosen: dict, directions: dict, numbers: tuple,
                  fixed: Any, grown: dict, priority: int, path: str, mesh: Any) -> list[dict]:
    """Each tensor's factor splits where one mesh axis would split two factors of an
    equation (PROP-14), or why not: a dimension of several factors (a reshape's), or a cut
    decided by a value another equation grew in this pass (which comes first is then the
    partitioner's order of visiting)."""
    apart = sorted(axes_apart(chosen, current))
    if any("*" in dim for dims in form.tensors for dim in dims):
        stop("PROP-4", f"a mesh axis of {apart} would split two factors of an equation "
             f"whose dimension holds several factors: how Shardy cuts them is not written",
             path)
    if getattr(form, "name", None) == "concatenate":   # (seen otherwise: s19 final deep run)
        stop("PROP-4", f"a mesh axis of {apart} would split two factors of a concatenate: "
             f"which Shardy keeps is not written (its operands' order does not decide it)",
             path)

    def takes(k: int, f: str, split: tuple) -> tuple:
        number = numbers[k]
        opens = fixed.open.get(number)
        if number in fixed.closed or (opens is not None and not any(
                o and f in factors_of_dimension(d) for d, o in zip(form.tensors[k], opens))):
            return ()
        return held_takes(split, current[k].get(f, ()), fixed, number)   # (PROP-23)
    state, cuts = ordered_growth(form.tensors, current, chosen, directions, form.count,
                                 form.sizes, takes, form.elementwise, mesh)
    led = set(directions.values()) == {"prefer"}   # (its leader, operand 0, came first)
    for axis, k in cuts:
        if grown.get(numbers[k]) == priority and fixed.by.get(numbers[k]) != numbers \
                and numbers[k] not in fixed.chains and not (led and k == 0):   # (PROP-15)
            stop("PROP-4", f"a mesh axis of {[axis]} would split two factors of one "
                 f"equation, and a value holding it grew in this pass: which factor keeps "
                 f"it is the partitioner's order of visiting operations", path)
    return state


def contested_values(flat: Flat, limits: Any) -> dict:
    """Each value a conflict the partitioner's visiting order decides may reach (a value
    open to growth linked to one of the conflict's by steps through open values: a placed
    value never changes, so it bounds the reach), with why it is left open."""
    reach = {n for numbers in limits.contested or () for n in numbers
             if n not in limits.closed}
    grew = True
    while grew:
        grew = False
        for step in flat.steps:
            every = set(step[2]) - limits.closed
            if every & reach and not every <= reach:
                reach |= every
                grew = True
    return dict.fromkeys(reach, Undetermined("PROP-4", ORDER_DECIDES))
