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

from ..core.rules import rule

__all__ = ["shares_reshard"]


@rule("COLL-15", mirrors="xla: SpmdPartitioner's reshard of a while loop's operand tuple")
def shares_reshard(where: str) -> bool:
    """A value moved into a loop before it is brought there apart from any other reshard of
    it to the same split: XLA reshards each element of the while loop's operand tuple on
    its own.

    ``where``: where the move runs — "before" the loop (an initial carry, ``xs`` gathered
    whole), "body", "after" the loop, or "" for an equation's own operand.

    >>> shares_reshard("after")
    True
    """
    return where != "before"
