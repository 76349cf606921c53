"""The partitioner's schedule (issue 33): which factors of an equation propagate in which
pass of Shardy's op-priority propagation, and which way — merged both ways, one way, or
led by one tensor whose split wins a conflict. :mod:`~shardlaw.spec.program.propagation`
applies it equation by equation; its own module for size.

>>> chosen("both", [("x",)], [("x", "y")])
('x', 'y')
>>> chosen("prefer", [("y",), ("x",)], [()])   # the leader (a constraint's result) wins
('y',)
>>> chosen("forward", [("x", "y")], [("x", "z")])   # the operand leads, cut by the result
('x',)
"""

from __future__ import annotations

import math
from typing import Any

from ..core.rules import rule
from .primitives import Factors, Kind
from .propagation import ELEMENTWISE_FIRST, factor_split
from .sharding_factors import factors_of_dimension

__all__ = ["PASSES", "directions", "chosen", "one_way", "conflict", "ordered_growth",
           "forward_chains"]

# The partitioner's schedule (Shardy's op-priority propagation): each pass runs to a fixed
# point over the operations and factors it admits, and the next admits more.
PASSES = ("elementwise, reshape and transpose", "every factor passed through",
          "every factor")


def directions(entry_name: str, kind: Any, rule_: Factors, priority: int) -> dict:
    """Per factor of an equation, the way it propagates in pass ``priority`` (absent: not
    in that pass): into a shard_map leaving axes automatic one way (PROP-11), a loop's or
    cond's join led by a constraint's result (PROP-13), in every pass; a dynamic slice or
    dynamic update slice forward from the first pass (Shardy's pass-through operations:
    seen, a scan's carry meets its ``xs``' split there)."""
    every = {f for dims in rule_.operands + rule_.results for dim in dims
             for f in factors_of_dimension(dim)}
    if priority == 0 and not getattr(rule_, "first_pass", True):
        return {}   # (an all-reduce of a shard_map's body: PROP-11)
    if entry_name == "shard_map":
        return {f: "forward" for f in every}
    if entry_name == "sharding_constraint" or getattr(rule_, "led", False):
        return {f: "prefer" for f in every}   # (a shard_map's operand leads its link: PROP-20)
    if kind is Kind.ELEMENTWISE or entry_name in ELEMENTWISE_FIRST:
        return {f: "both" for f in every}
    if priority == 0:
        return {f: "forward" for f in every} if entry_name in (
            "dynamic_slice", "dynamic_update_slice") else {}
    passed = {f for f in every if f not in rule_.reduced and f not in rule_.replicated}
    if priority == 1:
        way = "backward" if entry_name == "broadcast_in_dim" else "both"
        return {f: way for f in passed}
    return {f: "both" for f in every}


def chosen(direction: str, operands: list, results: list) -> tuple[str, ...]:
    """A factor's split from its operands' and results' along ``direction``: merged
    (``both``, PROP-2), one way (``backward``: the results lead; ``forward``: the operands),
    or led by the first operand, whose split wins a conflict (``prefer``)."""
    if direction == "prefer" and any(conflict(operands[0], p) for p in operands + results):
        return operands[0]
    if direction in ("both", "prefer"):
        return factor_split(operands + results)
    if direction == "backward":
        return one_way(results, operands)
    return one_way(operands, results)


def one_way(leading: list[tuple[str, ...]], following: list[tuple[str, ...]]
            ) -> tuple[str, ...]:
    """A factor's split propagated one way: the leading tensors' (PROP-2), cut where a
    following tensor's conflicts with it; the following ones never extend it."""
    split = factor_split(leading)
    for other in following:
        cut = 0
        while cut < min(len(split), len(other)) and split[cut] == other[cut]:
            cut += 1
        if cut < min(len(split), len(other)):
            split = split[:cut]
    return split


def conflict(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether neither split is a prefix of the other."""
    return a[:len(b)] != b and b[:len(a)] != a


def _factor_order(tensors: tuple, current: list, chosen: dict, count: int, sizes: dict,
                  ways: Any) -> list:
    """((-source size, -ways, source, position), factor) of each factor with a split to
    grow: its source the largest tensor holding that whole split, the earliest of equal
    ones; ``ways(split)``: how many pieces a split makes (0: not compared)."""
    size = [math.prod(sizes[f] for f in t) for t in current]
    order: list = []
    for position, f in enumerate(dict.fromkeys(f for dims in tensors[count:] + tensors[:count]
                                               for dim in dims
                                               for f in factors_of_dimension(dim))):
        split = chosen.get(f, ())
        sources = [k for k, t in enumerate(current) if f in t and t[f][:len(split)] == split]
        if split and sources:
            source = max(sources, key=lambda k: (size[k], -k))
            order.append(((-size[source], -ways(split), source, position), f))
    return order


@rule("PROP-14", mirrors="shardy: AggressiveFactorPropagation::propagateFactorShardings")
def ordered_growth(tensors: tuple, current: list, chosen: dict, directions: dict,
                   count: int, sizes: dict, takes: Any, elementwise: bool, mesh: Any
                   ) -> tuple[list[dict], list]:
    """Where one mesh axis would split two factors of an equation, its factors grow in turn,
    the largest source tensor's first, and each tensor takes a factor's split cut before the
    first axis another of its factors holds.

    A factor's source is the largest tensor (of its operands, then results) holding its
    whole split; ties go, in an elementwise operation, to the split of more pieces, then to
    the earlier tensor, then the earlier factor. Each factor grows
    the results, then the operands (a backward factor only these, a forward one only
    those); ``takes(k, f, split)`` is what tensor ``k``'s limits let it take. An
    elementwise operation's operand takes no more than its results hold. Gives each
    tensor's factor splits after, and per cut the axis and the tensor whose split decided
    it (the cut tensor, where the other factor held the axis before; else that factor's
    source).

    (Seen: ``a`` on ``P('x', None)`` times ``b`` on ``P(None, 'x')``, of one size: ``a``'s
    factor comes first and the product is ``P('x', None)``; ``max`` of ``P('x', 'y', None)``
    and ``P(('x', 'y'), None, None)`` is ``P(('x', 'y'))``; a projection ``[b, k] @ [k, n]``
    whose result holds ``'data'`` on ``b`` keeps its weight's ``'data'`` off ``n``.)

    >>> from shardlaw.spec import Mesh
    >>> splits, cut = ordered_growth(
    ...     (("f0", "f1"), ("f0", "f1"), ("f0", "f1")),
    ...     [{"f0": ("x",), "f1": ()}, {"f0": (), "f1": ("x",)}, {"f0": (), "f1": ()}],
    ...     {"f0": ("x",), "f1": ("x",)}, {"f0": "both", "f1": "both"}, 2,
    ...     {"f0": 8, "f1": 8}, lambda k, f, split: split, True, Mesh.iota((2, 4), ("x", "y")))
    >>> splits[2], cut
    ({'f0': ('x',), 'f1': ()}, [('x', 1), ('x', 0), ('x', 0)])
    """
    state = [dict(t) for t in current]
    order = _factor_order(tensors, current, chosen, count, sizes, lambda split: math.prod(
        mesh.axis_size(a) for a in split) if elementwise else 0)
    cuts: list = []
    source_of = {f: k for (_, _, k, _), f in order}
    for _, f in sorted(order):
        way = directions.get(f, "both")
        targets = ([] if way == "backward" else list(range(count, len(state)))) + (
            [] if way == "forward" else list(range(count)))
        for k in targets:
            if f not in state[k]:
                continue
            old, new = state[k][f], takes(k, f, chosen[f])
            if not (len(old) < len(new) and new[:len(old)] == old):
                continue
            held = {a: g for g, axes in state[k].items() if g != f for a in axes}
            cut = next((i for i, a in enumerate(new) if a in held), len(new))
            if cut < len(new):   # (whose timing decides it: k's own, or the holder's source)
                g = held[new[cut]]
                cuts.append((new[cut], k if new[cut] in current[k][g] else source_of[g]))
            new = new[:cut]
            if elementwise and k < count:   # (no operand grows sideways past the results)
                for r in state[count:]:
                    held_r = r.get(f, new)
                    if len(held_r) < len(new) and new[:len(held_r)] == held_r:
                        new = held_r
            if len(new) > len(old):
                state[k][f] = new
    return state, cuts


@rule("PROP-15", mirrors="shardy: the greedy rewrite driver's worklist (top-down, program order)")
def forward_chains(steps: list, equations: list, placed: Any, outputs: Any = ()
                   ) -> frozenset:
    """A value a one-operand elementwise equation computes from a placed value read by it
    alone, or from another such value, read by one later equation alone, holds its whole
    split when that equation is first visited.

    Shardy's driver visits the operations in program order first, and a value's split
    grows only from the equations that read or write it; so a conflict between such
    values keeps the prefix they share (PROP-2) whatever else grows in the pass. ``steps``
    and ``equations`` are :class:`~shardlaw.spec.program.propagation.Flat`'s, ``placed``
    the values placed whole, ``outputs`` the program's results. (Seen: ``sin(a) + cos(b)``
    of ``P('y')`` and ``P('z')``, in either order, is ``P()``; of ``P(('x', 'y'))`` and
    ``P(('x', 'z'))``, ``P('x')``. Not a chain where the placed value is read elsewhere too,
    even returned: ``sin(b) * d`` of ``b`` on ``P(None, ('y', 'z'))`` and ``d`` on
    ``P(('y', 'z'), None)`` is ``b``'s split, beside ``cos(b)`` (before or after it), a
    scan over ``b`` or ``b`` itself returned, ``d``'s.)

    >>> from shardlaw.spec.program.primitives import entry_of_name
    >>> sin = (entry_of_name("sin"), None, (0, 2), (), "body[0]", 1)
    >>> add = (entry_of_name("add"), None, (2, 1, 3), (), "body[1]", 2)
    >>> sorted(forward_chains([sin, add], [], {0, 1}))
    [2]
    """
    readers: dict = {}
    for _, _, every, _, path, count in steps:
        for n in every[:count]:
            readers.setdefault(n, set()).add(path)
    for path, _, operands, _ in equations:
        for n in operands:
            readers.setdefault(n, set()).add(path)
    order = {step[4]: k for k, step in enumerate(steps)}
    chains: set = set()
    for k, (entry, _, every, _, _, count) in enumerate(steps):
        if count != 1 or len(every) != 2 or entry.kind is not Kind.ELEMENTWISE \
                or entry.name == "copy":
            continue
        read = readers.get(every[1], ())
        alone = every[0] in chains or (every[0] in placed and every[0] not in outputs
                                       and len(readers.get(every[0], ())) == 1)
        if alone and len(read) == 1 and all(
                order.get(p, -1) > k and steps[order[p]][0].name != "copy" for p in read):
            chains.add(every[1])
    return frozenset(chains)
