"""shard_map's collectives and manual shardings (SMAP-13 to SMAP-15).

The axes a collective inside the body may name (SMAP-13), the devices it reduces together
(SMAP-14), and the HLO sharding that marks the body manual when lowered (SMAP-15).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.dims import check_rank_count
from ..core.hlo import HloSharding, SubgroupType, iota_tile
from ..core.rules import Failure, require, rule
from ..core.values import AbstractMesh, Mesh
from .shardmap_parameters import MAX_LISTED_DEVICES, BadParameter, bounded_items, checked_mesh
from .shardmap_specs import manual_axes_of

__all__ = ["check_collective_axes", "replica_groups", "collective_groups", "manual_sharding"]


# --------------------------------------------------------------------------- SMAP-13, SMAP-14

@dataclasses.dataclass(frozen=True)
class CollectiveAxisUnknown(Failure, rule="SMAP-13", error=AssertionError):
    template = "a collective over {axes} names {name!r}, which is not an axis of the mesh {names}"
    axes: tuple
    name: Any
    names: tuple


@dataclasses.dataclass(frozen=True)
class CollectiveAxisNotManual(Failure, rule="SMAP-13", error=NameError):
    template = ("a collective over {axes} names {name!r}, which is not a manual "
                "axis; collectives run over the manual axes {manual}")
    axes: tuple
    name: Any
    manual: tuple


@dataclasses.dataclass(frozen=True)
class CollectiveAxesMixed(Failure, rule="SMAP-13"):
    template = ("a collective over {axes} mixes axes its operand varies along "
                "({varying}) with axes it does not vary along")
    hint = "Sum over the varying axes and the others in two separate collectives"
    axes: tuple
    varying: tuple


@dataclasses.dataclass(frozen=True)
class CollectiveAxisRepeated(Failure, rule="SMAP-13"):
    template = "a collective over {axes} names {name!r} more than once"
    axes: tuple
    name: str


def _axis_tuple(collective_axes: Any) -> tuple[str, ...]:
    axes = (collective_axes,) if isinstance(collective_axes, str) else collective_axes
    require(type(axes) in (tuple, list), lambda: BadParameter(
        "collective_axes", "an axis name or a tuple of axis names", collective_axes))
    axes = tuple(bounded_items(axes, "collective_axes"))
    for name in axes:
        require(isinstance(name, str), lambda: BadParameter(
            "collective_axes", "an axis name or a tuple of axis names", collective_axes))
    return axes


@rule("SMAP-13", mirrors="jax._src.lax.parallel.psum (_get_from, pvary, _check_axis_names; "
                         "_axis_groups when lowered)")
def check_collective_axes(mesh: Mesh | AbstractMesh, collective_axes: Any,
                          manual_axes: frozenset[str], varying: frozenset[str] | None = None,
                          *, lowering: bool = True) -> tuple[str, ...]:
    """A collective's axes are manual axes (NameError; AssertionError for non-mesh names under check_vma), under check_vma all or none among its operand's varying axes (ValueError), and distinct (ValueError, when lowered).

    ``varying`` is None without check_vma.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> check_collective_axes(mesh, "x", frozenset({"x"}))
    ('x',)
    >>> check_collective_axes(mesh, ("x", "y"), frozenset({"x"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNameError: [SMAP-13]: a collective over ('x', 'y') names 'y', which is not a manual axis; collectives run over the manual axes ('x',)
    >>> check_collective_axes(mesh, ("x", "y"), frozenset({"x", "y"}), frozenset({"x"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-13]: a collective over ('x', 'y') mixes axes its operand varies along (('x',)) with axes it does not vary along. Sum over the varying axes and the others in two separate collectives.
    """
    axes = _axis_tuple(collective_axes)
    manual = tuple(sorted(manual_axes))
    if varying is not None:
        along = tuple(a for a in axes if a in varying)
        require(not along or len(along) == len(axes), lambda: CollectiveAxesMixed(
            axes, tuple(sorted(varying))))
        for name in axes:
            require(name in mesh.axis_names or along, lambda: CollectiveAxisUnknown(
                axes, name, mesh.axis_names))
    for name in axes:
        require(name in manual_axes, lambda: CollectiveAxisNotManual(axes, name, manual))
    for i, name in enumerate(axes):
        require(not lowering or name not in axes[:i], lambda: CollectiveAxisRepeated(axes, name))
    return axes


def replica_groups(mesh: Mesh | AbstractMesh, collective_axes: Any,
                   manual_axes: Any = frozenset()) -> tuple[tuple[int, ...], ...]:
    """The groups of a collective as mesh positions (row-major), as the HLO's ``replica_groups`` print them (SMAP-14).

    >>> replica_groups(Mesh.iota((2, 4), ("x", "y")), "x")
    ((0, 4), (1, 5), (2, 6), (3, 7))
    """
    manual = manual_axes_of(checked_mesh(mesh), manual_axes)
    axes = check_collective_axes(mesh, collective_axes, manual)
    require(mesh.size <= MAX_LISTED_DEVICES, lambda: BadParameter(
        "mesh", f"a mesh of at most {MAX_LISTED_DEVICES} devices to list its groups", mesh))
    sizes = mesh.axis_sizes
    strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    summed = [mesh.axis_names.index(a) for a in axes]
    kept = [i for i in range(len(sizes)) if i not in summed]
    return tuple(tuple(_offset(base, summed, sizes, strides))
                 for base in _offset(0, kept, sizes, strides))


def _offset(base: int, axes: list[int], sizes: tuple[int, ...], strides: list[int]) -> list[int]:
    """``base`` plus every combination of coordinates along ``axes``, the first axis major."""
    out = [base]
    for i in axes:
        out = [p + c * strides[i] for p in out for c in range(sizes[i])]
    return out


@rule("SMAP-14", mirrors="jax._src.interpreters.pxla.axis_groups (with the device order of "
                         "the mesh)")
def collective_groups(mesh: Mesh, collective_axes: Any,
                      manual_axes: Any = frozenset()) -> tuple[tuple[int, ...], ...]:
    """A collective over some axes (psum, pmax, pmin, all_gather, psum_scatter, all_to_all) groups the devices whose mesh positions differ only along those axes; each group lists them in the order of those axes, the first major.

    >>> order = Mesh((2, 4), ("x", "y"), [3, 1, 0, 2, 7, 5, 6, 4])
    >>> collective_groups(order, "x")
    ((3, 7), (1, 5), (0, 6), (2, 4))
    >>> collective_groups(order, ("y", "x"))
    ((3, 7, 1, 5, 0, 6, 2, 4),)
    """
    require(isinstance(mesh, Mesh), lambda: BadParameter(
        "mesh", "a Mesh with devices (an AbstractMesh has none)", mesh))
    return tuple(tuple(mesh.devices.id_at(p) for p in group)
                 for group in replica_groups(mesh, collective_axes, manual_axes))


# --------------------------------------------------------------------------- SMAP-15

@rule("SMAP-15", mirrors="jax._src.interpreters.pxla.manual_proto (met in _xla_shard / "
                         "_xla_unshard when the Shardy partitioner is off)")
def manual_sharding(mesh: Mesh | AbstractMesh, manual_axes: Any, rank: int) -> HloSharding | None:
    """A shard's HLO sharding tiles no dimension and groups the devices in a replicated subgroup of the automatic axes and a manual one of the manual axes, these ordered by name; none when they hold one device.

    >>> mesh = Mesh.iota((2, 2, 2), ("z", "y", "x"))
    >>> print(manual_sharding(mesh, {"y", "x"}, 1))   # manual devices in the order x, y
    {devices=[1,4,2]<=[2,2,2]T(2,1,0) last_tile_dims={manual, replicated}}
    >>> print(manual_sharding(mesh, set(), 2))
    {manual}
    >>> print(manual_sharding(Mesh.iota((1, 8), ("x", "y")), {"x"}, 2))
    None
    """
    manual = manual_axes_of(checked_mesh(mesh), manual_axes)
    rank = check_rank_count(rank)
    sizes = mesh.sizes_by_name
    if math.prod(sizes[a] for a in manual) == 1:
        return None  # JAX adds no sharding ops around the body
    automatic = [a for a in mesh.axis_names if a not in manual]
    in_order = sorted(manual, key=str)
    perm = [mesh.axis_names.index(a) for a in automatic + in_order]
    dims = (1,) * rank + (math.prod(sizes[a] for a in automatic),
                          math.prod(sizes[a] for a in in_order))
    return iota_tile(dims, mesh.axis_sizes, perm,
                     (SubgroupType.REPLICATED, SubgroupType.MANUAL))
