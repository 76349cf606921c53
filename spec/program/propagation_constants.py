"""Constants each use computes for itself (issue 33): Shardy's constant-or-scalar splitter.

Before propagating, Shardy gives every use of a constant expression its own copy of it — an
iota, a constant (``jnp.zeros``: a broadcast of a literal), and a broadcast, reshape, slice
or elementwise operation of constant expressions only — and every use of a broadcast of a
scalar its own broadcast. Such a value read by two operations apart does not carry one's
split to the other (seen: ``jnp.zeros((8, 8))`` added to a value on ``P('x')`` and
multiplied by one on ``P(None, 'y')``: the results stay on ``P('x')`` and ``P(None, 'y')``;
returned as well, it is returned on ``P()``). :func:`split_constants` makes those copies in
the flat program :mod:`~shardlaw.spec.program.propagation` propagates.

Before propagating, too, a product by a constant one and a sum with a constant zero are
folded to their other operand, which then stands for the result where it is placed (seen:
AD's seed of a gradient, ``mul(broadcast 1.0, w)``, and ``a * jnp.ones_like(a)``); the
description keeps no literal's value, so :func:`check_folded_constants` leaves open a
program where the fold would change a split (PROP-27).
"""

from __future__ import annotations

from typing import Any

from ..core.rules import rule
from .primitives import Kind
from .propagation import COPY, Flat, stop

__all__ = ["split_constants", "PRESERVING", "copied_values", "check_folded_constants"]

# The operations whose result is a constant expression where every operand is one
# (besides elementwise ones): squeeze and expand_dims lower to a reshape.
PRESERVING = frozenset(("broadcast_in_dim", "reshape", "squeeze", "expand_dims", "slice"))


@rule("PROP-16", mirrors="shardy: sdy-constant-or-scalar-splitter (each use its own copy)")
def split_constants(flat: Flat, outputs: list, constraints: list) -> None:
    """Each use of a constant expression (an iota, a literal's broadcast, and a broadcast, reshape, slice or elementwise operation of constant expressions) or of a scalar's broadcast reads a copy of its own.

    The first use in the flat program keeps the value (a returned one first: the result
    keeps its number); every constant expression is marked constant (``flat.constants``).
    Stops (PROP-4) where a loop's or a cond's join reads such a value besides another use.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Program, Value
    >>> from shardlaw.spec.program.propagation import propagate
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
    >>> b = Value.placed((8, 8), NamedSharding(mesh, P(None, "y")))
    >>> iota = Opaque((), primitive="iota", results=(Value.typed((8, 8)),),
    ...               params=(("dimension", 0), ("shape", (8, 8))))
    >>> add = Opaque((0, 2), primitive="add", results=(Value.typed((8, 8)),))
    >>> mul = Opaque((1, 2), primitive="mul", results=(Value.typed((8, 8)),))
    >>> splits = propagate(Program((a, b), (iota, add, mul), outputs=(3, 4)))
    >>> splits[3], splits[4]   # each reads an iota of its own
    ((('x',), ()), ((), ('y',)))
    """
    made = {}
    for k, step in enumerate(flat.steps):
        for r in step[2][step[5]:]:
            made[r] = k
    copied = _copied(flat, made)
    uses = _uses(flat, outputs, constraints, copied)
    joined = {s for sources, _, _ in flat.joins + flat.led + flat.edges for s in sources}
    for value, sites in uses.items():
        if len(sites) > 1 and value in joined:
            stop("PROP-4", "a constant, or a scalar's broadcast, read by a loop's or a cond's "
                 "join and by another use: each use computes its own copy, not written "
                 "through joins yet", flat.steps[made[value]][4])
        for site in sites[1:]:
            _rewire(flat, outputs, constraints, site, _clone(flat, made, copied, value))


def _copied(flat: Flat, made: dict) -> set:
    """The values each use copies: constant expressions (added to ``flat.constants``) and
    scalars' broadcasts."""
    copied = set()
    for entry, rule_, every, types, _, count in flat.steps:
        results = every[count:]
        if len(results) != 1 or not types[-1].shape or entry is COPY:
            continue
        operands = every[:count]
        if entry.name == "iota" or (entry.name == "broadcast_in_dim" and not operands):
            flat.constants.add(results[0])
        elif (entry.name in PRESERVING or entry.kind is Kind.ELEMENTWISE) and all(
                o in flat.constants for o in operands):
            flat.constants.add(results[0])
        elif not (entry.name == "broadcast_in_dim" and count == 1 and not types[0].shape):
            continue
        copied.add(results[0])
    return copied


def _uses(flat: Flat, outputs: list, constraints: list, copied: set) -> dict:
    """Per copied value, the places it is read by what is not itself copied, returned
    ones first: ("output", k), ("step", k, position) or ("constraint", k)."""
    uses: dict = {}
    for k, n in enumerate(outputs):
        if n in copied and n not in uses:   # (returned twice: one value, as the program's)
            uses[n] = [("output", k)]
    for k, (_, _, every, _, _, count) in enumerate(flat.steps):
        if every[count:] and every[count] in copied and every[count] in flat.constants:
            continue   # (a constant expression's operands are part of it)
        for position, n in enumerate(every[:count]):
            if n in copied:
                uses.setdefault(n, []).append(("step", k, position))
    for k, c in enumerate(constraints):
        if c[0] in copied:
            uses.setdefault(c[0], []).append(("constraint", k))
    return uses


def _clone(flat: Flat, made: dict, copied: set, value: int) -> int:
    """A copy of ``value``'s step, and of each operand of it that is a copied constant
    expression (a scalar, which takes no split, is shared)."""
    entry, rule_, every, types, path, count = flat.steps[made[value]]
    operands = tuple(_clone(flat, made, copied, o) if o in copied and flat.types[o].shape
                     and o in flat.constants else o for o in every[:count])
    new = flat.new(flat.types[value])
    if value in flat.constants:
        flat.constants.add(new)
    flat.steps.append((entry, rule_, operands + (new,), types, path, count))
    made[new] = len(flat.steps) - 1
    flat.live.add(new)
    return new


def _rewire(flat: Flat, outputs: list, constraints: list, site: tuple, new: int) -> None:
    """The read at ``site`` reads ``new`` instead."""
    if site[0] == "output":
        outputs[site[1]] = new
    elif site[0] == "constraint":
        operand, result, pin, path = constraints[site[1]]
        constraints[site[1]] = (new, result, pin, path)
    else:
        entry, rule_, every, types, path, count = flat.steps[site[1]]
        every = every[:site[2]] + (new,) + every[site[2] + 1:]
        flat.steps[site[1]] = (entry, rule_, every, types, path, count)


def copied_values(program: Any) -> frozenset:
    """The values of ``program``'s own equations (its bodies' not read) that PROP-16 copies
    for each use: computed in whatever split a use needs, they are never resharded."""
    from .primitives import entry_of
    constant, copied = set(), set()
    types = program.value_types
    for eq, numbers in zip(program.equations, program.result_numbers()):
        entry = entry_of(eq)
        if len(numbers) != 1 or not types[numbers[0]].shape:
            continue
        if entry.name == "iota" or (entry.name == "broadcast_in_dim" and not eq.operands) or (
                (entry.name in PRESERVING or entry.kind is Kind.ELEMENTWISE) and eq.operands
                and all(o in constant for o in eq.operands)):
            constant.add(numbers[0])
        elif not (entry.name == "broadcast_in_dim" and len(eq.operands) == 1
                  and not types[eq.operands[0]].shape):
            continue
        copied.add(numbers[0])
    return frozenset(copied)


# Where a constant operand of an elementwise operation may be its identity (a product by
# one, a sum with zero, a difference with zero, a quotient by one).
_IDENTITIES = {"mul": (0, 1), "add": (0, 1), "add_any": (0, 1), "sub": (1,), "div": (1,)}


@rule("PROP-27", mirrors="stablehlo: the multiply and add folders (x * 1, x + 0) the "
      "partitioner's import pipeline applies before Shardy propagates")
def check_folded_constants(flat: Flat, splits: dict) -> None:
    """A product, sum, difference or quotient with a constant expression whose other operand ends split otherwise than its result is left open: StableHLO folds one by its identity before propagation, and the description keeps no literal's value.

    Seen (mesh ``(2, 4)``): the gradient of ``sum(dot_general(x, w2, (((1,), (1,)), ((),
    ()))) * w1)`` with ``w1`` and ``w2`` on ``P()``, ``x`` on ``P(('x', 'y'))``: the
    cotangent ``mul(broadcast 1.0, w1)`` is ``w1`` itself, so the gradient of ``x`` (its
    product with ``w2``) comes back on ``P()``, where the product as written would carry
    the split ``x``'s gradient of ``w2`` gives the cotangent, ``P(('x', 'y'))``. Over a
    mesh ``(4, 2)`` with ``w1`` on ``P(None, 'y')`` and ``x`` on ``P('x')`` the results
    agree but XLA gathers ``x`` where the product as written all-reduces; ``a *
    jnp.ones_like(a)`` alike, ``a * jnp.full_like(a, 3.0)`` all-reduces.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import (
    ...     Opaque, Program, ShardingConstraint, Value)
    >>> from shardlaw.spec.program.propagation import propagate
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
    >>> ones = Opaque((), primitive="broadcast_in_dim", results=(Value.typed((8, 8)),),
    ...               params=(("shape", (8, 8)), ("broadcast_dimensions", ())))
    >>> mul = Opaque((0, 1), primitive="mul", results=(Value.typed((8, 8)),))
    >>> def held(spec):
    ...     put = ShardingConstraint((2,), sharding=NamedSharding(mesh, spec))
    ...     return propagate(Program((a,), (ones, mul, put), outputs=(3,)))
    >>> held(P(None, "y")).rule, held(P("x", None))[2]
    ('PROP-27', (('x',), ()))
    """
    literal = _literals(flat)
    for entry, _, every, _, path, count in flat.steps:
        where = _IDENTITIES.get(getattr(entry, "name", ""), ()) if entry is not COPY else ()
        if len(every) != count + 1 or not any(
                i < count and every[i] in literal for i in where):
            continue
        result = splits.get(every[count])
        moved = [i for i in range(count) if every[i] not in literal
                 and splits.get(every[i]) != result]
        if moved:
            stop("PROP-27", f"{entry.name} of a constant expression (its value not kept: a "
                 f"literal one or zero is folded before propagation) and operand "
                 f"{moved} split otherwise than its result ({splits.get(every[moved[0]])} "
                 f"against {result}): whether the operand stands for the result is open",
                 path)


def _literals(flat: Flat) -> set:
    """The values made of literals alone: a literal's broadcast (an equation of no
    operand: the seed of a gradient, ``jnp.ones``), and a broadcast, reshape, slice or
    elementwise operation of such values, a scalar's included."""
    found: set = set()
    grew = True
    while grew:
        grew = False
        for entry, _, every, _, _, count in flat.steps:
            if entry is COPY or len(every) != count + 1 or every[count] in found:
                continue
            name = getattr(entry, "name", "")
            if (name == "broadcast_in_dim" and not count) or count and (
                    name in PRESERVING or entry.kind is Kind.ELEMENTWISE) and all(
                    o in found for o in every[:count]):
                found.add(every[count])
                grew = True
    return found
