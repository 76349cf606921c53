"""An out sharding on the result of a shard_map leaving mesh axes automatic (issue 33):
the partitioner pushes it back through the body onto the shard_map's operand.

Shardy sets each function result's sharding on the value returned before it visits any
operation (``propagateFuncResults``); a manual computation's result, body and operands
are data-flow edges of its first pass. So an out sharding's free axes reach the
shard_map's operand in that pass, and the operand keeps its own split only where its
producer placed it first: an operation of the first pass over placed values, in program
order. A loop's result (its carry, a scan's stacked ``ys``), a cond's, or a later pass's
operation's (a dot, a reduction) get theirs later. Seen (jax 0.10.2, 8 CPU devices, mesh
``(4, 2)``, ``sm`` a shard_map over ``{'x'}`` of specs ``P()``, body ``cos``): a scan's
``ys`` ``c * 2`` on ``P(None, None, 'y', 'x')`` read by ``sm`` returned under
``P('y', None, None, 'x')`` come back ``P('y', None, None, 'x')``; ``a @ w`` of ``a`` on
``P('y', None)`` read by ``sm`` under ``P(None, 'y')`` comes back ``P(None, 'y')``; but
``sin(a)`` and ``a.T`` keep their own split. :mod:`~shardlaw.spec.program.propagation`
keeps such an out sharding on the function's result only (``Flat.held_outs``); what it
would move upstream is left open here where the spec cannot say who comes first.
"""

from __future__ import annotations

from typing import Any

from ..core.rules import rule
from .primitives import Kind
from .propagation import COPY, ELEMENTWISE_FIRST, Flat, stop

__all__ = ["out_sharding_reach", "brought_axes"]

_INSIDE = (".scan.", ".while.", ".cond.", ".shard_map.")


@rule("PROP-26", mirrors="shardy: propagateFuncResults before the first pass, and a "
                         "manual computation's data-flow edges")
def out_sharding_reach(flat: Flat, splits: dict) -> None:
    """A shard_map's operand is left open where an out sharding on its result places a free axis the body does not give, unless the operand is placed whole or made in the first pass holding every such axis.

    ``flat.held_outs``: (the shard_map's result, its out sharding) of each result returned
    once under an out sharding (PROP-6 keeps it on the function's result only);
    ``splits``: each value's split after propagation. Stops (an Undetermined, PROP-26) at
    the shard_map's path where the out sharding may reach the operand first. (Seen: a
    scan's ``ys``, a cond's result, a dot's result read by the shard_map take the out
    sharding's free axis; ``sin(a)`` and ``a.T`` of a placed ``a`` holding that axis keep
    their own split.)

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> mesh = Mesh.iota((4, 2), ("x", "y"))
    >>> brought_axes(NamedSharding(mesh, P("y", None, None, "x")), ((), (), ("y",), ()),
    ...              frozenset("x"))
    ['y']
    """
    settled: dict = {}
    for number, given in flat.held_outs:
        found = [(path, operands) for path, name, operands, results in flat.equations
                 if name == "shard_map" and number in results and number in flat.live]
        barred = flat.barred.get(number, frozenset())
        brought = brought_axes(given, splits[number], barred)
        if not found or not brought:
            continue
        path, operands = found[0]
        for n in operands:
            held = {a for axes in splits[n] for a in axes}
            if _placed(flat, n) or (_first(flat, n, settled) and set(brought) <= held):
                continue
            stop("PROP-26", f"an out sharding on a shard_map's result places free axes "
                 f"{brought} its body does not give it: whether they reach the shard_map's "
                 f"operand before the operand's own split does is the partitioner's order",
                 path)


def brought_axes(given: Any, split: tuple, barred: frozenset) -> list[str]:
    """The free axes (not ``barred``, of size above 1) out sharding ``given`` places on a
    result of ``split`` beyond what each dimension holds: per dimension, where the free
    axes given are not a prefix of the free axes held, those given."""
    mesh = given.mesh
    parts = tuple(given.spec.partitions) + (None,) * len(split)
    out: list[str] = []
    for entry, axes in zip(parts, split):
        named = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        free = tuple(a for a in named if a not in barred and mesh.axis_size(a) != 1)
        held = tuple(a for a in axes if a not in barred)
        if free != held[:len(free)]:
            out += [a for a in free if a not in out]
    return out


def _placed(flat: Flat, n: int) -> bool:
    """Whether value ``n`` is placed whole (an input, a constant, a closed placement)."""
    return n in flat.fixed and not any(flat.open.get(n) or ())


def _first(flat: Flat, n: int, settled: dict) -> bool:
    """Whether value ``n`` takes its whole split in the partitioner's first pass, in
    program order: placed whole, or an elementwise operation's, a reshape's or a
    transpose's outside any body, over such values only."""
    if n in settled:
        return settled[n]
    settled[n] = False   # (a value under consideration does not settle itself)
    if _placed(flat, n):
        settled[n] = True
        return True
    made = [(entry, every, path, count) for entry, _, every, _, path, count in flat.steps
            if n in every[count:]]
    if len(made) != 1:
        return False
    entry, every, path, count = made[0]
    first = entry is not COPY and not any(part in path for part in _INSIDE) and (
        entry.kind is Kind.ELEMENTWISE or entry.name in ELEMENTWISE_FIRST)
    settled[n] = first and all(_first(flat, o, settled) for o in every[:count])
    return settled[n]
