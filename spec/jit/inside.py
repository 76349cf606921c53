"""The shardings inside a jit's body, as lowering and recovery read them (PROG-3).

A jit call whose body holds shardings of its own — constraints, device_puts with a
sharding, inner jits' shardings, shard_map meshes — lists them in
:attr:`Call.inside <shardlaw.spec.jit.call.Call>` (the whole-program layer,
:mod:`shardlaw.spec.program`, finds them: PROG-2). Lowering puts them after the results'
shardings in the one device assignment (DA-1, DA-2) and counts them for the results'
committedness (EXE-2); after compiling, they can decide the type the results come back in
(PROG-3, below). A call without them is decided exactly as before.
"""

from __future__ import annotations

from typing import Any, Sequence

from .assignment import Source
from .call import Out
from ..core.rules import rule
from ..core.shardings import NamedSharding, SingleDeviceSharding
from ..core.values import Mesh

__all__ = ["recovery_origin"]

_TYPED = (NamedSharding, SingleDeviceSharding)


@rule("PROG-3", mirrors="jax._src.interpreters.pxla.maybe_recover_user_shardings "
                        "(intermediate_shardings)")
def recovery_origin(recovered: Sequence[Any], kept_values: Sequence[Out],
                    results: Sequence[Out], inside: Sequence[Source]
                    ) -> tuple[list[Any], list[Any], list[Out]]:
    """With no kept input placed by a NamedSharding or SingleDeviceSharding, results the compiler placed take the type of the first such sharding inside the body, re-read over its own mesh; over an abstract mesh they stay as placed.

    Returns what OUT-1 (:func:`~shardlaw.spec.jit.recovery.recover_shardings`) is given:
    the shardings and types whose first NamedSharding or SingleDeviceSharding it follows,
    and the results' types — without their meshes when a sharding inside the body is
    followed, since JAX then reads the results over that sharding's mesh, whatever their
    types say. The first one is followed even when it is a NamedSharding over an abstract
    mesh (a transposed device_put's target, a rewritten jit's sharding): JAX's re-reading
    over it fails and leaves the results as the compiler placed them (OUT-1 C4; on one
    device, OUT-3). An abstract constraint's sharding is not listed inside at all.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> inside = [Source(NamedSharding(mesh, P("x")), "sharding_constraint at body[0]")]
    >>> given, _, typed = recovery_origin([], [], [Out((8,), mesh=mesh.abstract)], inside)
    >>> given, typed[0].mesh
    ([NamedSharding(Mesh({'x': 2, 'y': 4}), P('x'))], None)
    >>> lone = [SingleDeviceSharding(0)]
    >>> recovery_origin(lone, [Out((8,))], [Out((8,))], inside)[0]
    [SingleDeviceSharding(Device(0))]
    """
    if any(isinstance(s, _TYPED) for s in recovered):
        return list(recovered), list(kept_values), list(results)
    for source in inside:
        s = source.sharding
        if isinstance(s, _TYPED):
            return [s], [None], [Out(o.shape, o.dtype) for o in results]
    return list(recovered), list(kept_values), list(results)
