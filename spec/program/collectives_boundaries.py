"""Which reshards XLA shares between the uses of one value (issue 33): the partitioner
reshards a value once per split it is needed in (COLL-4), but a loop's operand is an
element of the while loop's tuple and is resharded there on its own.
:mod:`~shardlaw.spec.program.collectives_loops` asks it at each move; its own module for
size.

Seen (JAX 0.10.2, 8 CPU devices, mesh ``(4, 2)``): ``xs`` on ``P('y', None, None)`` read
by a scan whose body needs each slice whole along the loop's dimension and split over 'y'
on its last (one all-to-all before the loop), beside ``wsc(xs, P(None, None, 'y'))``: two
all-to-alls of the same 64 bytes, not one; two scans over the same ``xs``: two; the
constraint alone, or the scan alone: one.

>>> shares_reshard("before"), shares_reshard("body"), shares_reshard("")
(False, True, True)
"""

from __future__ import annotations

from typing import Any

from ..core.rules import rule
from ..core.values import AxisType

__all__ = ["shares_reshard", "returned_split"]


@rule("COLL-15", mirrors="xla: SpmdPartitioner's reshard of a while loop's operand tuple")
def shares_reshard(where: str) -> bool:
    """A loop's operand moved before the loop is resharded apart from any other reshard of
    the same value to the same split: XLA reshards each element of the while loop's
    operand tuple on its own.

    ``where``: where the move runs — "before" the loop (an initial carry, ``xs`` gathered
    whole), "body", "after" the loop, or "" for an equation's own operand.

    >>> shares_reshard("after")
    True
    """
    return where != "before"


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
