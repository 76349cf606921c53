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
"""

from __future__ import annotations

from typing import Any

from ..core.rules import rule
from ..core.values import AxisType

__all__ = ["shares_reshard", "returned_split"]


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
