"""Where XLA's partitioner plans an operation its own way (issue 33): the collectives of
:mod:`~shardlaw.spec.program.collectives` bring each operand to the splits its operation
computes with; three kinds of operation are partitioned otherwise, seen on JAX 0.10.2's
compiled modules (8 CPU devices). :func:`~shardlaw.spec.program.collectives._plan` asks
each at every equation; its own module for size.

- A dynamic slice whose start indices are literals is folded into a static slice before
  partitioning: along a split dimension its pieces move by collective-permutes of the
  window each device needs (COLL-17), not by an all-gather of the operand.
- A reduction whose operand holds a kept dimension split otherwise than its result is
  computed where the operand stands, and the smaller result moves (COLL-18).
- A dot that gathers an operand another operation gathered already to the same split may
  gather it again (seen, a product and a gradient's transposed product of one weight):
  left open (COLL-20).
- A dot whose left operand alone splits a batch dimension while both split a contracted
  one is grouped by the batch dimension's devices: with a mesh axis neither operand
  splits ahead of the batch's and the contracted dimension's axes, XLA sends the left
  operand and the result through collective-permutes to its own grouping (seen), a plan
  not read yet (left open, COLL-2).
- A concatenate whose operands split one dimension over different mesh axes is computed
  where one operand stands, the other moved to it by all-to-alls and collective-permutes
  (seen); which operand Shardy picks is not read yet (left open, COLL-1).
- A broadcast of a broadcast's result is folded by StableHLO into one broadcast of the
  first one's operand (as propagation reads it, PROP-4's ``rebroadcast``): its operand is
  brought from where that operand stands, not from the first result's split, which no
  operation computes (:func:`through_folded_broadcasts`).

>>> from shardlaw.spec import Mesh, NamedSharding, P
>>> from shardlaw.spec.program.description import Opaque, Program, ShardingConstraint, Value
>>> from shardlaw.spec.program.collectives import predicted_collectives
>>> mesh = Mesh.iota((2, 4), ("x", "y"))
>>> a = Value.placed((8, 4, 2), NamedSharding(mesh, P("x", None, None)))
>>> total = Opaque((0,), primitive="reduce_sum", results=(Value.typed((8, 2)),),
...                params=(("axes", (1,)),))
>>> put = ShardingConstraint((1,), sharding=NamedSharding(mesh, P(None, "x")))
>>> for c in predicted_collectives(Program((a,), (total, put), outputs=(2,))): print(c)
all-to-all over ('x',) at body[0]: float32[4, 2], 32 bytes per device
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import rule
from .primitives import entry_of
from .propagation import Undetermined, folded_equations

__all__ = ["through_folded_broadcasts", "sliced_as_a_slice", "reduced_where_it_stands",
           "batch_grouped", "regathered_by_a_dot", "concatenated_apart"]


def _params(eq: Any) -> dict:
    return dict(getattr(eq, "params", ()) or ())


def through_folded_broadcasts(program: Any, k: int, every: tuple) -> tuple:
    """Equation ``k`` and its values' numbers ``every`` as partitioned: a broadcast_in_dim
    of a folded broadcast_in_dim's result reads that broadcast's operand, its dimensions
    composed (seen: ``x`` on ``P('x')`` broadcast twice and constrained to
    ``P(None, ('y', 'x'), None)`` slices ``x`` and permutes it, the first result unsplit)."""
    eq = program.equations[k]
    if not _one_broadcast(eq) or isinstance(folded := folded_equations(program), Undetermined):
        return eq, every
    made = {n: j for j, numbers in enumerate(program.result_numbers()) for n in numbers}
    source, where = eq.operands[0], tuple(_params(eq)["broadcast_dimensions"])
    while (j := made.get(source)) is not None and j in folded and \
            _one_broadcast(program.equations[j]):
        first = program.equations[j]
        inner = tuple(_params(first)["broadcast_dimensions"])
        source, where = first.operands[0], tuple(where[w] for w in inner)
    if source == eq.operands[0]:
        return eq, every
    params = tuple((n, where if n == "broadcast_dimensions" else v) for n, v in eq.params)
    return dataclasses.replace(eq, operands=(source,), params=params), (source,) + every[1:]


def _one_broadcast(eq: Any) -> bool:
    return eq.kind == "opaque" and eq.primitive == "broadcast_in_dim" and \
        len(eq.operands) == 1 and _params(eq).get("broadcast_dimensions") is not None


@rule("COLL-17", mirrors="xla: AlgebraicSimplifier (a dynamic-slice of constant starts is a "
      "slice) + SpmdPartitioner's windowed slice")
def sliced_as_a_slice(eq: Any, typed: tuple, held: tuple) -> Undetermined | None:
    """A dynamic slice whose start indices are all literals is partitioned as a static
    slice: shorter along a dimension its operand splits, its pieces move by the windowed
    collective-permutes of the partitioner's own plan.

    Seen (mesh ``(2, 4)``): ``dynamic_slice_in_dim(x, 1, 8)`` of ``x`` f32[128] on
    ``P(('x', 'y'))`` is seven collective-permutes of 4 bytes from device 0, whatever
    split the result is given, where a start index the data give is one all-gather of
    512 bytes; ``lax.slice_in_dim`` alike. The permutes' count and bytes follow the
    window and are not read yet: the step is left open (None: not such a slice).

    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> eq = Opaque((0,), primitive="dynamic_slice", results=(Value.typed((8,)),),
    ...             params=(("slice_sizes", (8,)),))
    >>> sliced_as_a_slice(eq, (Value.typed((128,)),), ((("x", "y"),),)).rule
    'COLL-17'
    >>> print(sliced_as_a_slice(eq, (Value.typed((128,)),), (((),),)))
    None
    """
    if entry_of(eq).name != "dynamic_slice" or len(eq.operands) != 1:
        return None   # (a start index the data give is an operand: gathered, COLL-2)
    sizes = tuple(_params(eq).get("slice_sizes", ()))
    shape = tuple(typed[0].shape)
    for d, (axes, n, m) in enumerate(zip(held[0], sizes, shape)):
        if axes and n < m:
            return Undetermined("COLL-17", f"a dynamic slice of literal starts, shorter "
                                f"along dimension {d} split over {axes}, is partitioned as "
                                f"a static slice: its pieces move by the windowed "
                                f"collective-permutes of XLA's own plan (seen), not read "
                                f"yet", "")
    return None


@rule("COLL-18", mirrors="xla: SpmdPartitioner's reduce (computed on the operand's shards)")
def reduced_where_it_stands(eq: Any, factors: Any, read: list, chosen: dict
                            ) -> dict | None:
    """A reduction whose operand splits a kept dimension otherwise than its result is
    computed where the operand stands and its result moves after.

    Seen (mesh ``(2, 4)``, Auto or Explicit 'y'): ``a.sum(1)`` of ``a`` f32[8, 4, 2] on
    ``P('x', None, None)``, read on ``P(None, 'x')``, is one all-to-all of the f32[4, 2]
    sums (32 bytes), not of the f32[4, 4, 2] operand (128 bytes); ``max`` alike; an
    elementwise operation's operand moves instead. Gives the splits it computes with
    (None: not such a reduction); a reduced dimension the operand splits is summed
    before the move (its order left open, COLL-3).

    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> from shardlaw.spec.program.primitives import Factors
    >>> eq = Opaque((0,), primitive="reduce_sum", results=(Value.typed((8, 2)),),
    ...             params=(("axes", (1,)),))
    >>> sums = Factors((("f0", "f1", "f2"),), (("f0", "f2"),), reduced=frozenset({"f1"}))
    >>> reduced_where_it_stands(eq, sums, [{"f0": ("x",), "f1": (), "f2": ()},
    ...                                    {"f0": (), "f2": ("x",)}], {"f0": (), "f2": ("x",)})
    {'f0': ('x',), 'f1': (), 'f2': ()}
    """
    name = entry_of(eq).name
    if not name.startswith("reduce_") or len(eq.operands) != 1 or not factors.reduced:
        return None
    own = read[0]
    if not any(_loses(own.get(f, ()), axes) for f, axes in chosen.items()
               if f not in factors.reduced):
        return None
    return {f: tuple(own.get(f, ())) for f in factors.operands[0]}


def _loses(have: tuple, need: tuple) -> bool:
    """Whether a split ``have`` holds axes beyond the prefix it shares with ``need``."""
    kept = 0
    while kept < min(len(have), len(need)) and have[kept] == need[kept]:
        kept += 1
    return len(have) > kept


def batch_grouped(eq: Any, factors: Any, read: list, mesh: Any) -> Undetermined | None:
    """A dot whose left operand alone splits a batch dimension, both splitting a contracted
    one, over a mesh with an axis neither operand splits ahead of the batch's and the
    contracted dimension's axes: left open (COLL-2).

    Seen (mesh ``(2, 2, 2)``, either device order): the batched product of f32[4, 2, 4] on
    ``P('y', None, 'z')`` and f32[4, 4, 4] on ``P(None, 'z', None)`` is a
    collective-permute of the left operand (32 bytes), the all-reduce over 'z', and one of
    the result (64 bytes), its batch moved through 'x' and back (``P('z', None, 'y')``
    alike); on ``P('x', None, 'z')``, ``P('z', None, 'x')``, ``P('y', None, 'x')`` or with
    the right operand splitting the batch too, the all-reduce alone. How XLA groups the
    devices is not read yet.
    """
    if entry_of(eq).name != "dot_general" or len(read) < 2:
        return None
    left, right = factors.operands[0], factors.operands[1]
    batch = [f for f in left if f in right and f not in factors.reduced]
    split = [f for f in batch if read[0].get(f) and not read[1].get(f)]
    summed = any(read[0].get(f) and read[1].get(f) for f in factors.reduced)
    if not split or not summed:
        return None
    used = {a for r in read[:2] for axes in r.values() for a in axes}
    first = min(mesh.axis_names.index(a) for f in split + sorted(factors.reduced)
                for a in read[0].get(f, ()))
    idle = [a for a in mesh.axis_names[:first] if a not in used and mesh.axis_size(a) > 1]
    if not idle:
        return None
    return Undetermined("COLL-2", f"a dot whose left operand alone splits its batch "
                        f"dimension, a mesh axis {idle} neither operand splits ahead of "
                        f"the batch's and the contracted axes: XLA groups the devices by the batch and moves the "
                        f"left operand and the result by collective-permutes of its own "
                        f"grouping (seen), not read yet", "")


_DOTS = ("dot_general", "transposed_dot_general")


@rule("COLL-20", mirrors="xla: SpmdPartitioner's dot handler (its operands' all-gathers, "
      "not always shared through the reshard cache)")
def regathered_by_a_dot(eq: Any, made: Any) -> Undetermined | None:
    """A dot that would gather an operand another operation already gathered to the same split is left open: XLA's dot partitioning may gather it again.

    ``made``: the collectives that bring the operand to the split the dot computes with
    (the step makes them once: one value brought to one split once).

    Seen (mesh ``(2, 4)``): ``w2`` f32[32, 16] on ``P('y', 'x')`` read by
    ``dot_general(x, w2, (((1,), (1,)), ((), ())))`` (``x`` on ``P('x', 'y')``) and by
    ``dot_general(w1 * 2, w2, (((1,), (0,)), ((), ())))``, or by that product's gradient's
    transposed product: two all-gathers over 'x' of 512 bytes each where the spec's one
    reshard of a value would make one. When XLA shares the gather is not read yet.

    >>> from types import SimpleNamespace
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> dot = Opaque((0, 1), primitive="dot_general", results=(Value.typed((16, 8)),),
    ...              params=(("dimension_numbers", (((1,), (1,)), ((), ()))),))
    >>> regathered_by_a_dot(dot, [SimpleNamespace(kind="all-gather")]).rule
    'COLL-20'
    >>> print(regathered_by_a_dot(dot, []))
    None
    """
    if entry_of(eq).name not in _DOTS or isinstance(made, Undetermined) or not any(
            c.kind == "all-gather" for c in made):
        return None
    return Undetermined("COLL-20", "a dot's operand gathered already to the split it "
                        "computes with (for another operation): XLA's dot partitioning may "
                        "gather it again (seen), by a plan not read yet", "")


def concatenated_apart(eq: Any, held: tuple) -> Undetermined | None:
    """A concatenate whose operands split one dimension over different mesh axes (neither
    split a start of the other) is left open (COLL-1): Shardy computes it where one
    operand stands, not unsplit, and which one it picks is not read yet.

    Seen (mesh ``(2, 4)``, Auto): ``concatenate([a, b], 2)`` of f32[4, 4, 4] ``a`` on
    ``P('y', 'x', None)`` and ``b`` on ``P('x', 'y', None)``, in either order, is computed
    on ``P('x', 'y', None)``: ``a`` moves by an all-to-all (32 bytes) and a
    collective-permute (32 bytes), where the spec gathered both. With ``a`` on
    ``P('y', None, None)`` and ``b`` on ``P('x', None, None)`` it is computed on ``a``'s
    split, ``b`` moved by a collective-permute (64 bytes). None: not such a concatenate.

    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> eq = Opaque((0, 1), primitive="concatenate", results=(Value.typed((4, 4, 8)),),
    ...             params=(("dimension", 2),))
    >>> concatenated_apart(eq, ((("y",), ("x",), ()), (("x",), ("y",), ()))).rule
    'COLL-1'
    >>> print(concatenated_apart(eq, ((("x",), (), ()), (("x", "y"), (), ()))))
    None
    """
    if entry_of(eq).name != "concatenate":
        return None
    splits = held[:len(eq.operands)]
    for d in range(min((len(s) for s in splits), default=0)):
        given = [s[d] for s in splits if s[d]]
        for first in given:
            for other in given:
                if first[:len(other)] != other and other[:len(first)] != first:
                    return Undetermined("COLL-1", f"a concatenate whose operands split "
                                        f"dimension {d} over {first} and {other}: Shardy "
                                        f"computes it where one operand stands and moves "
                                        f"the other (seen), its choice not read yet", "")
    return None
