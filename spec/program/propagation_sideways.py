"""How far an operand takes a split from the other operands of its equation (issue 33):
Shardy's aggressive propagation avoids "sideways" propagation — from one operand to
another — past a result placed whole. :mod:`~shardlaw.spec.program.propagation` applies it
to each operand that grows; its own module for size.

Seen (JAX 0.10.2, 8 CPU devices, mesh ``(2, 2, 2)``): ``c = sin(a)`` of ``a`` on ``P()``,
``d = c - b`` of ``b`` on ``P('y')``, ``d`` then placed whole by a constraint
``P(None)`` (or passed to a shard_map of in spec ``P(None)``, or to an inner jit of in
sharding ``P(None)``): ``c`` comes back ``P(None)``, not ``P('y')``; constrained
``P(('y', 'x'))`` instead, ``c`` takes ``'y'`` and ``'x'``; of ``b`` on ``P(('x', 'y'))``
constrained ``P('x')``, ``c`` takes ``'x'`` alone. An operand placed whole cuts nothing
(``s + b`` of ``s`` constrained ``P(None)`` comes back ``P('y')``), nor does a result
placed by an out sharding (the partitioner keeps that one on the function's result and
reshards there), nor a constraint with ``UNCONSTRAINED`` dimensions (it stays a value of
its own).

>>> sideways_cap(("y",), [()])
()
>>> sideways_cap(("x", "y"), [("x",)])
('x',)
>>> sideways_cap(("y",), [(), None])   # another result, open, lets it through
('y',)
"""

from __future__ import annotations

from typing import Any

from ..core.rules import rule

__all__ = ["sideways_cap", "operand_splits", "unbar"]


@rule("PROP-18", mirrors="shardy: AggressiveFactorPropagation (no sideways propagation "
                         "past a closed result)")
def sideways_cap(split: tuple[str, ...], results: list) -> tuple[str, ...]:
    """An operand takes a factor's split only as far as some result holding that factor
    allows: a result placed whole allows the prefix it shares with the split, any other
    result all of it.

    ``results``: per result holding the factor, its split where it is placed whole, None
    where it is open to growth; no result holding it (a reduced factor) cuts nothing.

    >>> sideways_cap(("x", "y"), [("x", "y")])
    ('x', 'y')
    >>> sideways_cap(("y",), [("x",)])
    ()
    >>> sideways_cap(("y",), [])
    ('y',)
    """
    if not results or any(r is None for r in results):
        return split
    longest = 0
    for held in results:
        shared = 0
        while shared < min(len(split), len(held)) and split[shared] == held[shared]:
            shared += 1
        longest = max(longest, shared)
    return split[:longest]


def operand_splits(targets: list, rule_: Any, holders: dict, current: list, numbers: tuple,
                   held: frozenset) -> list[dict]:
    """Per tensor of an equation of sharding rule ``rule_`` (its operands, then its
    results), its target factor splits ``targets`` as the tensor may take them: an
    operand's cut by PROP-18, a result's whole. ``holders``: per factor, the operands' and
    results' indices holding it; ``current``: each tensor's factor splits; ``held``: the
    values placed whole."""
    if not held or not any(numbers[i] in held for _, at in holders.values() for i in at):
        return targets
    return [target if k >= len(rule_.operands) else {
        f: sideways_cap(split, [current[i][f] if numbers[i] in held else None
                                for i in holders[f][1]]) for f, split in target.items()}
        for k, target in enumerate(targets)]


@rule("PROP-19", mirrors="jax: lower_sharding_constraint (no replicated axes on its result)")
def unbar(flat: Any) -> None:
    """A sharding constraint's result may take an Explicit axis its type does not hold, in
    its open dimensions: JAX lowers the constraint as written, without the replicated axes
    it gives every other result.

    (Seen, mesh ``(2, 4)``, 'x' Auto, 'y' Explicit: ``v = wsc(a, P(None, UNCONSTRAINED,
    UNCONSTRAINED))`` of ``a`` typed ``P()``, then ``reshard(v, P(None, 'y', None))``: ``v``
    comes back ``P(None, 'y')``, its constraint lowered ``[{}, {?}, {?}]``; the result of
    a reshard, lowered with ``replicated={"y"}`` where its type lacks 'y', takes no 'y'.)

    ``flat``: the flat program (``propagation.Flat``), whose ``written`` values are its user
    constraints' results; each loses the axes PROP-9 barred it from.

    >>> from shardlaw.spec.program.propagation import Flat
    >>> flat = Flat(barred={3: frozenset("y"), 4: frozenset("y")}, written={3})
    >>> unbar(flat)
    >>> flat.barred   # value 3, a constraint's result; value 4, a reshard's
    {4: frozenset({'y'})}
    """
    for number in flat.written:
        flat.barred.pop(number, None)
