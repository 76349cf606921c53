"""Propagation over several meshes of one device list (issue 33, item 2): a constraint's or
an inner jit's sharding over another mesh read as the split it makes over the mesh the
program is propagated over.

Shardy places a module over one mesh, the first of the most axes of size above 1 (the
inputs' before the body's; :func:`~shardlaw.spec.program.placement_checks.main_mesh`), and
holds an axis of another mesh as the whole axes of that one it is made of
(:func:`~shardlaw.spec.program.placement_checks.crossmesh_split`). Where the inputs' mesh
is that mesh and every axis a sharding names is made of whole axes of it, the sharding is
that split over it: propagation goes on from it as from one written over the inputs' mesh
(a value computed from the constraint's result, an inner jit's in sharding). A sharding
whose axes are parts of the inputs' mesh's axes (sub-axes), over a mesh of more axes, of
another device list or with Explicit axes, or with UNCONSTRAINED dimensions, is not read
(the constraint's own result is PROP-8's).
"""

from __future__ import annotations

import math
from typing import Any

from ..core.rules import rule
from ..core.shardings import UNCONSTRAINED, NamedSharding
from ..core.values import AxisType, Mesh, PartitionSpec
from .placement_checks import crossmesh_split
from .primitives import entry_of

__all__ = ["over_the_inputs_mesh", "placed_elsewhere"]


def _wide(mesh: Mesh) -> int:
    return sum(1 for n in mesh.axis_sizes if n > 1)


@rule("PROP-12", mirrors="shardy: the meshes of a module over one device list (an axis "
                         "held as the main mesh's axes it is made of)")
def over_the_inputs_mesh(sharding: NamedSharding, mesh: Any, rank: int
                         ) -> NamedSharding | None:
    """A sharding over another mesh of the inputs' devices, of no more axes of size above 1, is propagated as the split it makes over the inputs' mesh where each of its dimensions is made of whole axes there.

    None where it is not (PROP-6 then leaves it open, and PROP-8 places a constraint's own
    result).

    >>> from shardlaw.spec import Mesh, P
    >>> wide, line = Mesh.iota((2, 4), ("x", "y")), Mesh.iota((8,), ("k",))
    >>> over_the_inputs_mesh(NamedSharding(line, P("k")), wide, 2).spec
    P(('x', 'y'), None)
    >>> tall = Mesh.iota((4, 2), ("a", "b"))
    >>> print(over_the_inputs_mesh(NamedSharding(tall, P("a")), wide, 2))   # 'a': x, half y
    None
    """
    other = sharding.mesh
    if not (isinstance(other, Mesh) and isinstance(mesh, Mesh)
            and other.devices == mesh.devices and _wide(other) <= _wide(mesh)
            and all(t is AxisType.Auto for t in other.axis_types + mesh.axis_types)):
        return None
    spec = sharding.spec
    if spec.unreduced or spec.reduced or UNCONSTRAINED in spec.partitions \
            or len(spec.partitions) > rank:
        return None
    split = crossmesh_split(sharding, mesh, rank)
    for entry, axes in zip(tuple(spec.partitions) + (None,) * rank, split):
        names = () if entry is None else (entry,) if isinstance(entry, str) else entry
        if math.prod(other.axis_size(a) for a in names) != \
                math.prod(mesh.axis_size(a) for a in axes):
            return None
    return NamedSharding(mesh, PartitionSpec(*(
        None if not a else a[0] if len(a) == 1 else a for a in split)))


def placed_elsewhere(program: Any, mesh: Any) -> bool:
    """Whether a constraint or an inner jit anywhere in ``program`` (its bodies included)
    places a value over a mesh other than ``mesh``: JAX then spells a result over the mesh
    of the placement propagation reached it from (seen: ``sin`` of a value constrained
    over a mesh ``(8,)`` comes back over that mesh, beside ``sin(a)`` over the inputs'),
    which :func:`~shardlaw.spec.program.propagation_spelling.predicted_out_shardings` does
    not write."""
    for eq in program.equations:
        held = [getattr(eq, "sharding", None)]
        if eq.kind == "jit":
            held += list(eq.body.in_shardings or ()) + list(eq.body.out_shardings or ())
        if any(isinstance(s, NamedSharding) and s.mesh.abstract != mesh.abstract
               for s in held):
            return True
        for name in entry_of(eq).bodies.fields:
            bodies = getattr(eq, name)
            for body in (bodies if isinstance(bodies, tuple) else (bodies,)):
                if placed_elsewhere(body, mesh):
                    return True
    return False
