"""Propagation through control flow (issue 33): the bodies the partitioner enters.

JAX 0.10.2 lowers a ``scan`` to a while loop whose carry is one value from the initial
carry through every iteration to the final one (Shardy's data-flow edges: the operand, the
body's argument and return, and the result share one sharding), its ``xs`` sliced and its
``ys`` stacked along the loop's dimension; a ``cond`` to a case whose branches read the
operands directly and whose results join every branch's; ``remat`` and the custom
derivatives' calls to their bodies inline. :func:`inline_flow` adds each to the flat
program :mod:`~shardlaw.spec.program.propagation` propagates over.
"""

from __future__ import annotations

from typing import Any

from ..core.rules import rule
from ..core.values import AxisType
from .primitives import Factors, entry_of_name
from .propagation import COPY, Flat, inline_body, stop
from .propagation_pins import check_joins as pins_check_joins
from .propagation_heldout import out_sharding_reach
from .propagation_schedule import chosen

__all__ = ["inline_flow", "constraint_led", "carry_constraint", "check_joins"]


def inline_flow(eq: Any, operands: list, results: list, path: str, flat: Flat, mesh: Any,
                constraints: list) -> list:
    """The ids of a control-flow equation's results (of types ``results``), its bodies
    added to ``flat``."""
    if eq.kind == "scan":
        return _scan(eq, operands, results, path, flat, mesh, constraints)
    if eq.kind == "while":
        return _while(eq, operands, path, flat, mesh, constraints)
    if eq.kind == "cond":
        outs = [inline_body(branch, list(operands[1:]), path, flat, mesh, constraints,
                            f"{path}.cond.branches[{b}].")
                for b, branch in enumerate(eq.branches)]
        # (the branch index is live where a result is: its computation runs, and communicates)
        return [_joined(flat, [o[i] for o in outs], path, constraints, mesh, operands[0])
                for i in range(len(outs[0]))]
    return inline_body(eq.body, operands, path, flat, mesh, constraints,
                       f"{path}.{eq.kind}.")


def _scan(eq: Any, operands: list, results: list, path: str, flat: Flat, mesh: Any,
          constraints: list) -> list:
    """A scan's final carry and stacked ``ys``: each carry one value through the loop
    (joining the initial carry and the body's next one), each ``xs`` sliced along its
    first dimension, each ``ys`` stacked along a first dimension of its own."""
    body, c, k = eq.body, eq.num_consts, eq.num_carry
    carry = [flat.new(body.inputs[c + i]) for i in range(k)]
    slices = [flat.new(value) for value in body.inputs[c + k:]]
    for xs, piece in zip(operands[c + k:], slices):
        dims = tuple(f"f{d}" for d in range(len(flat.types[piece].shape)))
        _step(flat, "dynamic_slice", Factors((("o0",) + dims,), (dims,),
                                             replicated=frozenset(("o0",))), [xs], piece, path)
    outs = inline_body(body, list(operands[:c]) + carry + slices, path, flat, mesh,
                       constraints, f"{path}.scan.")
    for i in range(k):
        # (a data-flow edge: after the body's own operations, as seen — a carry takes the
        # split its body's operations give it before the initial carry's reaches it)
        _edge(flat, "scan", operands[c + i], outs[i], carry[i], path, constraints, mesh)
    stacked: list = []   # (filled below; the loop's record keeps them: _check_carry_axes)
    flat.loops.append((list(operands[:c]), list(operands[c:c + k]), carry, path,
                       (list(outs[:k]), stacked, list(operands[c + k:]))))
    finals = [_joined(flat, [v], path) for v in carry]
    for piece, value in zip(outs[k:], results[k:]):
        stacked.append(flat.new(value))
        dims = tuple(f"f{d}" for d in range(len(flat.types[piece].shape)))
        _step(flat, "dynamic_update_slice", Factors((dims,), (("r0",) + dims,)), [piece],
              stacked[-1], path)
    return finals + stacked


def _while(eq: Any, operands: list, path: str, flat: Flat, mesh: Any, constraints: list
           ) -> list:
    """A while loop's final carry: each carry one value through the loop, as a scan's;
    the predicate reads it too (its bool result is no value of the program's)."""
    cc, bc, body = eq.cond_consts, eq.body_consts, eq.body_fun
    carry = [flat.new(value) for value in body.inputs[bc:]]
    inline_body(eq.cond, list(operands[:cc]) + carry, path, flat, mesh, constraints,
                f"{path}.while.cond.")
    outs = inline_body(body, list(operands[cc:cc + bc]) + carry, path, flat, mesh,
                       constraints, f"{path}.while.body.")
    for i, value in enumerate(carry):
        _edge(flat, "while", operands[cc + bc + i], outs[i], value, path, constraints, mesh)
    flat.loops.append((list(operands[cc:cc + bc]), list(operands[cc + bc:]), carry, path,
                       None))
    return [_joined(flat, [v], path) for v in carry]


def _edge(flat: Flat, name: str, initial: int, out: int, carry: int, path: str,
          constraints: list, mesh: Any) -> None:
    """A loop's data-flow edge: its carry joins the initial carry and the body's next one,
    led by the body's next one where a constraint places it (PROP-13), else by a
    constraint the body puts on the carry itself (PROP-22)."""
    dims = tuple(f"f{d}" for d in range(len(flat.types[carry].shape)))
    leader = out if constraint_led([out], constraints, mesh) == 0 else carry_constraint(
        carry, constraints, mesh)
    if leader is not None:
        sources = [leader] + [n for n in (out, initial) if n != leader]
        _step(flat, "sharding_constraint", Factors(tuple(dims for _ in sources), (dims,)),
              sources, carry, path)
        flat.led.append((sources, carry, path))
        flat.edges.append(([initial, out], carry, path))
        return
    _step(flat, name, Factors((dims, dims), (dims,)), [initial, out], carry, path)
    flat.joins.append(([initial, out], carry, path))
    flat.edges.append(([initial, out], carry, path))


@rule("PROP-13", mirrors="shardy: the data-flow edges of a while loop and a case (the "
                         "shardings a body returns)")
def constraint_led(sources: list, constraints: list, mesh: Any) -> int | None:
    """A loop's carry whose body returns a sharding constraint's result, or a cond's result exactly one branch of which returns one, takes that constraint's split where the other sources' conflict with it, and joins them elsewhere.

    Over Auto axes only, for a constraint without UNCONSTRAINED dimensions; ``sources``:
    the values joined (the body's next carry; the branches' results), ``constraints`` the
    flat program's (operand, result, (split, open dimensions), path). Gives the position
    of the source that leads (None: none does).

    >>> from shardlaw.spec import Mesh
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> constraint_led([5, 7], [(6, 7, ((("y",), ()), (False, False)), "body[0]")], mesh)
    1
    >>> print(constraint_led([5, 7], [(6, 7, ((("y",), ()), (True, False)), "body[0]")], mesh))
    None
    """
    if AxisType.Explicit in mesh.axis_types:
        return None
    closed = {result for _, result, held, _ in constraints
              if held is not None and not any(held[1])}
    placed = {result for _, result, _, _ in constraints}
    led = [k for k, n in enumerate(sources) if n in closed]
    if len(led) != 1 or any(n in placed for n in sources if n != sources[led[0]]):
        return None
    return led[0]


@rule("PROP-22", mirrors="shardy: a constraint on a while body's block argument (the "
                         "data-flow edge's owner keeps it open)")
def carry_constraint(carry: int, constraints: list, mesh: Any) -> int | None:
    """A loop's carry its body constrains, without UNCONSTRAINED dimensions, takes that constraint's split where the initial carry's or the body's next one conflicts with it, and their longer split elsewhere.

    Over Auto axes only; ``constraints`` as :func:`constraint_led`'s. Gives the
    constraint's result, which leads the carry's join (None: no such constraint, or two of
    different splits); the carry itself is not placed. (Seen, mesh ``(2, 2, 2)``: a carry
    on ``P('y', 'z')`` constrained to ``P('y', None)`` before a ``sin`` stays
    ``P('y', 'z')``; to ``P('x', None)``, ``P('x', 'z')``; on ``P(('y', 'z'), None)``
    constrained to ``P(None, 'z')``, ``P('y', 'z')``.)

    >>> from shardlaw.spec import Mesh
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> carry_constraint(5, [(5, 7, ((("y",), ()), (False, False)), "body[0]")], mesh)
    7
    >>> print(carry_constraint(5, [(5, 7, ((("y",), ()), (False, True)), "body[0]")], mesh))
    None
    """
    on = [c for c in constraints if c[0] == carry]
    if AxisType.Explicit in mesh.axis_types or not on or any(
            c[2] is None or any(c[2][1]) or c[2] != on[0][2] for c in on):
        return None
    return on[0][1]


def _joined(flat: Flat, sources: list, path: str, constraints: list = (), mesh: Any = None,
            index: int | None = None) -> int:
    """A new value joining ``sources`` dimension for dimension (a cond's result, a loop's
    final carry): one factor per dimension shared by all, led by a branch's constraint
    (PROP-13); a cond's ``index`` read too."""
    made = flat.new(flat.types[sources[0]])
    dims = tuple(f"f{d}" for d in range(len(flat.types[made].shape)))
    read = [] if index is None else [index]
    unsplit = ((),) * len(read)
    led = constraint_led(sources, list(constraints), mesh) if len(sources) > 1 else None
    if led is None:
        _step(flat, "copy", Factors(tuple(dims for _ in sources) + unsplit, (dims,)),
              sources + read, made, path)
        flat.joins.append((sources, made, path))
        flat.edges.append((sources, made, path))
        return made
    others = [n for k, n in enumerate(sources) if k != led]
    _step(flat, "sharding_constraint", Factors(tuple(dims for _ in sources) + unsplit,
                                               (dims,)),
          [sources[led]] + others + read, made, path)
    flat.led.append(([sources[led]] + others, made, path))
    flat.edges.append((sources, made, path))
    if len(others) > 1:   # (the other branches apart from each other: PROP-4)
        flat.joins.append((others, made, path))
    return made


def check_joins(flat: Flat, splits: dict) -> None:
    """After propagation: a loop's carry or a cond's result whose sources end apart
    (:func:`~shardlaw.spec.program.propagation_pins.check_joins`), or whose join a
    constraint leads but which ends split otherwise than its sources give it (seen: a carry
    the body's uses would split beside a replicated constraint the body returns stays
    replicated): which the partitioner keeps is not written (PROP-4)."""
    pins_check_joins(flat, splits)
    out_sharding_reach(flat, splits)   # (PROP-26: its own module)
    _check_constants(flat, splits)
    _check_carry_axes(flat, splits)
    for sources, result, path in flat.led:
        if result not in flat.live:
            continue
        given = tuple(chosen("prefer", [splits[s][d] for s in sources], [])
                      for d in range(len(splits[result])))
        if given != splits[result]:
            stop("PROP-4", "a loop's carry or a cond's result a constraint leads is split "
                 "beyond what its sources give it (by its own uses): which the partitioner "
                 "keeps is not written", path)


def _check_constants(flat: Flat, splits: dict) -> None:
    """After propagation: a loop's initial carry that gives up a mesh axis a constant of
    the loop holds, where that constant is read outside the loop too (a later equation's
    operand, a result): which of the two the partitioner moves is not written (PROP-4).

    (Seen, mesh ``(2, 1, 4)``: ``fori_loop(0, 2, lambda i, c: sin(c) * w, a)`` of ``a``
    on ``P('x', None, 'z')`` and ``w`` on ``P(None, 'x', None)``: read by the loop alone,
    ``w`` leads and ``a`` moves, 128 bytes; returned too, or read by a constraint, ``a``
    leads, ``w`` moves before the loop, 512 bytes, and the loop's result is
    ``P('x', None, 'z')``.)"""
    for consts, initials, carries, path, _ in flat.loops:
        lost = {a for initial, carry in zip(initials, carries) if carry in flat.live
                for have, kept in zip(splits[initial], splits[carry])
                for a in have if a not in kept}
        for n in consts:
            held = lost & {a for axes in splits[n] for a in axes}
            if held and _read_outside(flat, n, path):
                stop("PROP-4", f"a loop's initial carry gives up mesh axes {sorted(held)} "
                     f"that a constant of the loop, read outside it too, holds: which of "
                     f"the two the partitioner moves is not written", path)


def _check_carry_axes(flat: Flat, splits: dict) -> None:
    """After propagation: a scan's carry whose initial split and next one (the body's) hold
    one mesh axis on different dimensions, where the loop's stacked ``ys`` are live, the
    body reads the carry more than once or an ``xs`` is read outside the loop too: which
    of the two it keeps is Shardy's order, not written (PROP-4). (The root, seen in
    Shardy's passes run from jaxlib: its first pass holds back a pass-through operation
    reading a value of several uses, so the carry's edge brings the initial split first;
    the spec's schedule does not count uses.)

    (Seen, mesh ``(2, 4)``: a carry ``(4, 16, 4)`` on ``P(None, None, 'x')``, its ``xs``
    on ``P(None, 'y', 'x', None)``, body ``(sin(c) + t, None)`` and the final carry
    returned: ``P('y', 'x')``, the body's; with ``ys`` ``c * 2`` or ``c`` returned, or the
    body's next carry ``sin(c) + t + 0 * cos(c)``: ``P('y', None, 'x')``, the initial
    one's 'x'; with ``ys`` the next carry, the body's again. Mesh ``(2, 2, 2)``: a carry
    ``(4, 4)`` on ``P(None, ('y', 'z'))``, ``xs`` on ``P('z', ('x', 'y'), None)``: the
    body's ``P(('x', 'y'))``; with the ``xs`` read outside the loop too (returned, a
    squeeze or ``sin`` of it returned): ``P('x', ('y', 'z'))``, the initial one's.)"""
    for _, initials, carries, path, scan in flat.loops:
        if scan is None:
            continue
        for initial, carry, out in zip(initials, carries, scan[0]):
            xs_read = any(_read_outside(flat, xs, path) for xs in scan[2])
            if not (flat.live & set(scan[1]) or _readers(flat, carry, path) > 1 or xs_read):
                continue
            held = [set(axes) for axes in splits[initial]]
            moved = sorted({a for d, axes in enumerate(splits[out]) for a in axes
                            for e, there in enumerate(held) if e != d and a in there})
            if moved:
                stop("PROP-4", f"a scan's carry whose initial split and next one hold mesh "
                     f"axes {moved} on different dimensions, its ys live, the body "
                     f"reading it more than once or its xs read outside the loop too: "
                     f"which it keeps is not written", path)


def _readers(flat: Flat, n: int, path: str) -> int:
    """How many live equations inside the loop at ``path`` read value ``n``."""
    return sum(1 for _, _, every, _, at, count in flat.steps
               if at.startswith(f"{path}.") and n in every[:count]
               and flat.live & set(every[count:]))


def _read_outside(flat: Flat, n: int, path: str) -> bool:
    """Whether value ``n`` is a result or an operand of a live equation outside the loop
    at ``path`` (a step, a constraint, a join)."""
    inside = (path, f"{path}.")
    return n in flat.outputs or any(
        n in every[:count] and not at.startswith(inside) and flat.live & set(every[count:])
        for _, _, every, _, at, count in flat.steps)


def _step(flat: Flat, name: str, rule: Factors, operands: list, result: int, path: str
          ) -> None:
    every = tuple(operands) + (result,)
    entry = COPY if name == "copy" else entry_of_name(name)   # ("sharding_constraint": led)
    flat.steps.append((entry, rule, every, tuple(flat.types[i] for i in every), path,
                       len(operands)))
