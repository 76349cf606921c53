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

from typing import Any

from .primitives import Factors, Kind
from .propagation import ELEMENTWISE_FIRST, factor_split
from .sharding_factors import factors_of_dimension

__all__ = ["PASSES", "directions", "chosen", "one_way", "conflict"]

# The partitioner's schedule (Shardy's op-priority propagation): each pass runs to a fixed
# point over the operations and factors it admits, and the next admits more.
PASSES = ("elementwise, reshape and transpose", "every factor passed through",
          "every factor")


def directions(entry_name: str, kind: Any, rule_: Factors, priority: int) -> dict:
    """Per factor of an equation, the way it propagates in pass ``priority`` (absent: not
    in that pass): into a shard_map leaving axes automatic one way (PROP-11), a loop's or
    cond's join led by a constraint's result (PROP-13), in every pass."""
    every = {f for dims in rule_.operands + rule_.results for dim in dims
             for f in factors_of_dimension(dim)}
    if entry_name == "shard_map":
        return {f: "forward" for f in every}
    if entry_name == "sharding_constraint":
        return {f: "prefer" for f in every}
    if kind is Kind.ELEMENTWISE or entry_name in ELEMENTWISE_FIRST:
        return {f: "both" for f in every}
    if priority == 0:
        return {}
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
