"""Which reshards XLA shares between the uses of one value (issue 33): the partitioner
reshards a value once per split it is needed in (COLL-4), but a scan's ``xs`` gathered
whole for its body is resharded in the body and hoisted out after XLA's CSE has run, so it
stays a reshard of its own. :mod:`~shardlaw.spec.program.collectives_loops` asks it at
each move; its own module for size.

Seen (JAX 0.10.2, 8 CPU devices, mesh ``(4, 2)``): ``xs`` on ``P('y', None, None)`` read
by a scan whose body needs each slice whole along the loop's dimension and split over 'y'
on its last (one all-to-all before the loop), beside ``wsc(xs, P(None, None, 'y'))``: two
all-to-alls of the same 64 bytes, not one; two scans over the same ``xs``: two; the
constraint alone, or the scan alone: one. A fori loop's initial carry on
``P('y', None, None)`` that the loop needs on ``P(None, 'y', None)`` (mesh ``(2, 4)``),
beside ``max(a, carry)`` of ``a`` on that split, or a constraint of it to that split: one
all-to-all of 32 bytes, made at the while loop's operand, which both read.

>>> shares_reshard("xs"), shares_reshard("before"), shares_reshard("body")
(False, True, True)

A value the function returns under an out sharding is not the function's result: Shardy
keeps the result's sharding on the return and lets the value grow as an open one
(COLL-19), where an inner jit's out sharding or a constraint holds its value.
"""

from __future__ import annotations

from typing import Any

from ..core.rules import rule
from ..core.values import AxisType
from .primitives import Kind
from .propagation import (
    COPY, Undetermined, propagated, propagation_mesh, tensor_factor_splits,
)

__all__ = ["shares_reshard", "returned_split", "grown_returns", "with_grown_returns"]


@rule("COLL-15", mirrors="xla: SpmdPartitioner's reshard in a while loop's body, hoisted by "
      "WhileLoopInvariantCodeMotion after CSE")
def shares_reshard(where: str) -> bool:
    """A scan's ``xs`` gathered whole before the loop is resharded apart from any other
    reshard of the same value to the same split, where every other move shares it.

    XLA reshards ``xs`` in the body, where the slice is read, and hoists the loop-invariant
    reshard out after its CSE has run; an initial carry is moved at the while loop's
    operand, before the loop, where CSE joins it with the value's other reshards.

    ``where``: where the move runs — "xs" (``xs`` gathered whole before the loop),
    "before" the loop (an initial carry), "body", "after" the loop, or "" for an
    equation's own operand.

    >>> shares_reshard("after")
    True
    """
    return where != "xs"


@rule("COLL-16", mirrors="jax: the lowered function's result shardings over Explicit axes")
def returned_split(split: tuple, value: Any, mesh: Any) -> tuple:
    """Over a mesh of Explicit axes only, a result left to the compiler is returned on its
    type's split, whatever split its value stands on; over any other mesh on its
    predicted split.

    JAX's lowering gives each result of such a function its type's sharding (seen, mesh
    ``(2, 4)`` both Explicit: ``jit(sin, out_shardings=P('x', 'y'))(a)`` of ``a`` typed
    ``P('x', None)``, returned, is ``[{"x"}, {}]`` on the function's result: XLA
    all-gathers it over 'y', 128 bytes per device).

    >>> from shardlaw.spec import AxisType, Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> typed = Value.placed((4, 16), NamedSharding(mesh, P("x", None)))
    >>> returned_split((("x",), ("y",)), typed, mesh)
    (('x',), ())
    >>> auto = Mesh.iota((2, 4), ("x", "y"))
    >>> returned_split((("x",), ("y",)), Value.typed((4, 16)), auto)
    (('x',), ('y',))
    """
    if AxisType.Auto in mesh.axis_types or value.mesh != mesh.abstract:
        return split
    spec = value.spec
    if spec is None:   # (typed over the mesh and split by no axis: returned whole)
        return ((),) * len(value.shape)
    if spec.unreduced or spec.reduced:
        return split
    entries = tuple(spec) + (None,) * len(value.shape)
    return tuple(tuple(a for a in ((e,) if isinstance(e, str) else e or ())
                       if mesh.axis_size(a) != 1) for e in entries[:len(value.shape)])


@rule("COLL-19", mirrors="shardy: a function's result shardings, kept apart from the values "
      "it returns (the return reshards)")
def grown_returns(program: Any) -> dict | Undetermined:
    """A value the function returns under an out sharding (the jit's, or its type's over Explicit axes) starts on that split and takes the further Auto axes its elementwise operation's operands split it by; the return reshards it.

    Shardy keeps a function's result sharding on the return, not on the value: the value
    is open, grows from its operands, and the partitioner gathers it at the return. Seen
    (mesh ``(2, 1, 4)``, Auto axes or 'z' Explicit): ``(a, jnp.maximum(a, b))`` of ``a``
    on ``P(('z', 'x'))`` returned under ``P('z')`` twice computes the maximum on the
    f32[1] pieces and gathers each result over 'x' (two all-gathers of 8 bytes), not
    ``a`` once for both; under ``with_sharding_constraint(..., P('z'))`` or an inner jit's
    out sharding the value is held and ``a`` gathered once. Over Explicit axes only the
    type's constraint closes the value: nothing grows.

    Gives the grown splits by the value's id in the inlined program (propagation's), only
    those that differ from the out sharding's; an Undetermined where the value grows through
    an operation other than an elementwise one, or where an operand would grow with it; a
    reduction's result moves as COLL-18 says, a loop's or a cond's as COLL-10 says.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Program, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8,), NamedSharding(mesh, P(("y", "x"))))
    >>> sin = Opaque((0,), primitive="sin", results=(Value.typed((8,)),))
    >>> put = NamedSharding(mesh, P("y"))
    >>> grown_returns(Program((a,), (sin,), outputs=(1,), out_shardings=(put,)))
    {1: (('y', 'x'),)}
    """
    found = propagated(program)
    if isinstance(found, Undetermined):
        return found
    flat, splits = found
    mesh = propagation_mesh(program)
    if AxisType.Auto not in mesh.axis_types:   # (the type's constraint closes every value)
        return {}
    out = {}
    for number in sorted(flat.returned):
        made = [s for s in flat.steps if number in s[2][s[5]:]]
        if not made:
            continue
        grown = _grown(flat, splits, made, number, mesh)
        if isinstance(grown, Undetermined):
            return grown
        if grown != splits[number]:
            out[number] = grown
    return out


def with_grown_returns(program: Any, splits: dict, by_id: bool) -> dict | Undetermined:
    """``splits`` (by value id in the inlined program, or by the program's numbers) with
    each returned value's grown split (COLL-19), or why not."""
    grown = grown_returns(program)
    if isinstance(grown, Undetermined) or not grown:
        return grown or splits
    if not by_id:
        ids = propagated(program)[0].ids
        grown = {n: grown[i] for n, i in enumerate(ids) if i in grown}
    return {**splits, **{n: g for n, g in grown.items()
                         if not isinstance(splits.get(n), Undetermined)}}


def _grown(flat: Any, splits: dict, made: list, number: int, mesh: Any
           ) -> tuple | Undetermined:
    """The split returned value ``number`` grows to from the operands of the steps that
    make it (``made``), or why it is not read."""
    entry, rule_, every, typed, path, count = made[0]
    pinned = splits[number]
    if entry.kind is Kind.REDUCTION or any(step[0] is COPY for step in made):
        return pinned   # (COLL-18 moves a reduction's result; COLL-10 a loop's or a cond's)
    read = [tensor_factor_splits(rule_, typed, i, splits[n], mesh) for i, n in enumerate(every)]
    if any(isinstance(r, Undetermined) for r in read):
        return pinned   # (the equation's own plan says why it is not read)
    held = read[every.index(number)]
    grows = {f: _longest(read[:count], f, axes) for f, axes in held.items()}
    if any(isinstance(g, Undetermined) for g in grows.values()):
        return _open_return(path, "its operands split it further in orders that differ")
    if grows == held:
        return pinned
    if len(made) > 1 or entry.kind is not Kind.ELEMENTWISE:
        return _open_return(path, f"it grows through {entry.name}, not an elementwise "
                            "operation")
    barred = flat.barred.get(number, frozenset())
    auto = {a for a, t in zip(mesh.axis_names, mesh.axis_types) if t is AxisType.Auto}
    extra = [a for f, g in grows.items() for a in g[len(held[f]):]]
    if len(set(extra)) < len(extra) or any(
            a in barred or a not in auto or any(a in axes for axes in pinned) for a in extra):
        return _open_return(path, "it would take an axis it holds or may not take")
    for r, operand in zip(read[:count], every[:count]):
        for f, g in grows.items():
            have = r.get(f, g)
            if have != g and g[:len(have)] != have:
                return _open_return(path, "an operand splits it otherwise")
            if have != g and (operand not in flat.fixed or operand in flat.open):
                return _open_return(path, "an operand open to the partitioner would grow "
                                    "with it")
    return tuple(grows[f] for f in rule_.results[every[count:].index(number)])


def _longest(read: list, factor: str, pinned: tuple) -> tuple | Undetermined:
    """The longest split of ``factor`` among the operands' (``read``) extending ``pinned``
    (``pinned`` where none does); an Undetermined where two extend it differently."""
    longest = pinned
    for r in read:
        have = r.get(factor, ())
        if have[:len(pinned)] != pinned:
            continue   # (not an extension: brought to the value's split, COLL-2)
        if have[:len(longest)] == longest:
            longest = have
        elif longest[:len(have)] != have:
            return Undetermined("COLL-19", "", "")
    return longest


def _open_return(path: str, why: str) -> Undetermined:
    return Undetermined("COLL-19", "a value returned under an out sharding grows beyond it "
                        f"from its operands (Shardy keeps the sharding on the return), but "
                        f"{why}: where it is computed is not read yet", path)
