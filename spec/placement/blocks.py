"""Placement: from a sharding and a shape to which device holds which part of the array.

The rules here answer, in order: what HLO sharding a sharding lowers to for a given rank
(``LOW``), how many ways each dimension is split and whether it divides (``DIV``), which
box of the array each device holds and its replica id (``IDX``), whether the sharding is
fully replicated (``REP``), and which devices it spans (``DEV``).

A *box* is a tuple of ``(start, stop)`` pairs, one per dimension.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator

from ..core.hlo import (
    HloSharding, Manual, Maximal, Replicated, SubgroupType, Tiled, Unreduced, canonical_tiled,
)
from ..core.iota import Iota, unravel
from ..core.rules import Failure, reject, require, rule, varies
from ..core.shardings import GSPMDSharding, NamedSharding, NotASharding, SingleDeviceSharding
from ..core.dims import MAX_RANK, check_rank_count
from ..core.values import AxisType, DeviceList, UNCONSTRAINED, check_dims

__all__ = [
    "to_hlo", "tiles_per_dimension", "replication_factor", "shard_shape", "box_of",
    "devices_indices_map", "replica_id", "is_fully_replicated", "device_ids", "num_devices",
    "addressable_device_ids", "check_rank", "replica_ids",
]
# The package's names. The doors the placement layer's other modules and the prover use
# (SHARDINGS, check_shape, acts_replicated, devices_of, per_device_layout, box_at,
# box_of_tile) are public here but not exported.

Box = tuple[tuple[int, int], ...]
Shape = tuple[int, ...]


# --------------------------------------------------------------------------- failures

@dataclasses.dataclass(frozen=True)
class RankTooSmall(Failure, rule="NS-5"):
    template = ("{sharding} needs a value of rank at least {needed}, but the value "
                "has rank {rank}{extra}")
    sharding: Any
    needed: int
    rank: int
    extra: str = ""


@dataclasses.dataclass(frozen=True)
class ManualAxisSplits(Failure, rule="LOW-2", jax_error="AssertionError"):
    template = ("{sharding} splits a dimension over Manual mesh axis {axes} while "
                "mesh axes {left} split nothing; JAX cannot lower that")
    hint = ("Leave Manual axes out of the PartitionSpec (inside shard_map they are "
            "already split), or use every mesh axis in it.")
    sharding: Any
    axes: tuple
    left: tuple


@dataclasses.dataclass(frozen=True)
class TilesDoNotMatchRank(Failure, rule="DIV-1"):
    template = "{sharding} cuts {tiled} dimensions, but the shape {shape} has {rank}"
    sharding: Any
    tiled: int
    rank: int
    shape: tuple


@dataclasses.dataclass(frozen=True)
class Indivisible(Failure, rule="DIV-1", jax_error="IndivisibleError"):
    template = ("dimension {dim} of shape {shape} has size {size}, which {sharding} "
                "splits {ways} ways; {size} is not a multiple of {ways} "
                "(ways per dimension: {tiles})")
    hint = "Pad dimension {dim} to a multiple of {ways}, or split it over fewer mesh axes."
    sharding: Any
    dim: int
    size: int
    ways: int
    shape: tuple
    tiles: tuple


@dataclasses.dataclass(frozen=True)
class NoPerDeviceLayout(Failure, rule="IDX-1", error=NotImplementedError):
    template = "{sharding} is {kind}: devices do not hold boxes of the array"
    sharding: Any
    kind: str


@dataclasses.dataclass(frozen=True)
class DeviceCountDisagrees(Failure, rule="DEV-1"):
    template = ("the HLO sharding {hlo} names {named} device positions, but the "
                "device list holds {held}")
    hlo: str
    named: int
    held: int


@dataclasses.dataclass(frozen=True)
class NoDevices(Failure, rule="DEV-1"):
    template = ("{sharding} is over an abstract mesh, which has no devices; "
                "{question} needs concrete devices")
    hint = "Build the NamedSharding over a concrete Mesh."
    sharding: Any
    question: str


@dataclasses.dataclass(frozen=True)
class NotOnDevice(Failure, rule="IDX-1", error=KeyError):
    template = "device {device} holds no part of an array placed by {sharding}"
    device: int
    sharding: Any


# --------------------------------------------------------------------------- lowering

# Each NamedSharding lowered so far, by (sharding, rank): a step's many inputs share a few
# placements. One over Manual or unreduced axes is lowered afresh (LOW-2 fires for it).
_LOWERED: dict[tuple[NamedSharding, int], HloSharding] = {}


def _named_to_hlo(s: NamedSharding, ndim: int) -> HloSharding:
    found = _LOWERED.get((s, ndim))
    if found is None:
        found = _lower_named(s, ndim)
        if AxisType.Manual not in s.mesh.axis_types and not s.spec.unreduced:
            if len(_LOWERED) >= 4096:
                _LOWERED.clear()
            _LOWERED[(s, ndim)] = found
    return found


def _lower_named(s: NamedSharding, ndim: int) -> HloSharding:
    mesh = s.mesh
    size = mesh.sizes_by_name
    # Size-1 axes cut nothing and copy nothing: they vanish before lowering.
    kept = mesh.nontrivial_axes
    dim_of: dict[str, int] = {}
    for dim, entry in enumerate(s.spec.partitions):
        if entry is None or entry is UNCONSTRAINED:
            continue
        for axis in (entry if type(entry) is tuple else (entry,)):
            if size[axis] != 1:
                dim_of[axis] = dim
                if dim >= ndim:
                    raise reject(RankTooSmall(s, dim + 1, ndim))
    kind_of = {n: SubgroupType.REPLICATED for n in kept if n not in dim_of}
    if AxisType.Manual in mesh.axis_types or s.spec.unreduced:
        check_manual_axes(s, kept, dim_of)
        for n, t in zip(mesh.axis_names, mesh.axis_types):
            if t is AxisType.Manual and n in kind_of:
                kind_of[n] = SubgroupType.MANUAL
        for n in s.spec.unreduced:
            if n in kind_of:
                kind_of[n] = SubgroupType.UNREDUCED
    if not dim_of and all(k is SubgroupType.REPLICATED for k in kind_of.values()):
        return Replicated()
    position = {n: i for i, n in enumerate(kept)}
    dims = [1] * ndim
    perm: list[int] = []
    for axis, dim in sorted(dim_of.items(), key=lambda item: item[1]):
        dims[dim] *= size[axis]
        perm.append(position[axis])
    kinds: list[SubgroupType] = []
    for kind in (SubgroupType.MANUAL, SubgroupType.UNREDUCED, SubgroupType.REPLICATED):
        axes = [n for n in kept if kind_of.get(n) is kind]
        if axes:
            kinds.append(kind)
            dims.append(math.prod(size[n] for n in axes))
            perm.extend(position[n] for n in axes)
    return canonical_tiled(tuple(dims), Iota.trusted(tuple(size[n] for n in kept), tuple(perm)),
                           tuple(kinds), groups_sorted=True)


@rule("LOW-2", mirrors="jax._src.named_sharding.named_sharding_to_xla_hlo_sharding (its assert "
                       "on special axes)")
def check_manual_axes(s: NamedSharding, kept: list[str], dim_of: dict[str, int]) -> None:
    """A Manual mesh axis (of size above 1) may split a dimension only when every other mesh axis of size above 1 splits one too; then the split is an ordinary tiling.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Manual, AxisType.Auto))
    >>> print(to_hlo(NamedSharding(mesh, P("y")), 1))
    {devices=[4,2]<=[2,4]T(1,0) last_tile_dims={manual}}
    >>> to_hlo(NamedSharding(mesh, P("x")), 1)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [LOW-2]: NamedSharding(Mesh({'x': 2, 'y': 4}, types=('Manual', 'Auto')), P('x')) splits a dimension over Manual mesh axis ('x',) while mesh axes ('y',) split nothing; JAX cannot lower that. Leave Manual axes out of the PartitionSpec (inside shard_map they are already split), or use every mesh axis in it.
    """
    manual_used = tuple(n for n in kept if n in dim_of and s.mesh.axis_type(n) is AxisType.Manual)
    left = tuple(n for n in kept if n not in dim_of)
    require(not (manual_used and left), lambda: ManualAxisSplits(s, manual_used, left))


@rule("LOW-1", mirrors="jax._src.named_sharding.named_sharding_to_xla_hlo_sharding; "
                       "SingleDeviceSharding/GSPMDSharding._to_xla_hlo_sharding", pure=True)
def to_hlo(sharding: Any, ndim: int) -> HloSharding:
    """A sharding lowers, for a value of rank ``ndim``, to the HLO sharding whose tile assignment holds positions of its device list.

    (C1) Mesh axes of size 1 vanish.
    (C2) Each dimension is tiled by the product of the sizes of its mesh axes, the device
    order being the iota order transposed to the spec's axis order.
    (C3) Mesh axes that no dimension uses become trailing subgroups.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> print(to_hlo(NamedSharding(mesh, P("y", "x")), 2))
    {devices=[4,2]<=[2,4]T(1,0)}
    >>> print(to_hlo(NamedSharding(mesh, P("x")), 2))
    {devices=[2,1,4]<=[8] last_tile_dim_replicate}
    >>> print(to_hlo(NamedSharding(mesh, P(None, "x")), 1))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [NS-5]: NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, 'x')) needs a value of rank at least 2, but the value has rank 1
    """
    ndim = _check_ndim(ndim)
    if isinstance(sharding, NamedSharding):
        return _named_to_hlo(sharding, ndim)
    if isinstance(sharding, SingleDeviceSharding):
        return Replicated()
    if isinstance(sharding, GSPMDSharding):
        return sharding.hlo
    _check_sharding(sharding)
    raise AssertionError("unreachable")


# The shardings the placement queries take (VAL-8 refuses anything else).
SHARDINGS = (NamedSharding, SingleDeviceSharding, GSPMDSharding)


def _check_sharding(sharding: Any) -> Any:
    """The one check of a placement query's sharding argument, before any of its attributes
    is read: the query refuses what is not a sharding, citing VAL-8."""
    if not isinstance(sharding, SHARDINGS):
        raise reject(NotASharding("the sharding", "a NamedSharding, SingleDeviceSharding or "
                                                  "GSPMDSharding", sharding))
    return sharding


def _check_lowered(sharding: Any, ndim: Any, lowered: Any) -> tuple[int, HloSharding]:
    """A query's rank and HLO sharding: ``lowered`` when the caller has lowered the sharding
    already, checked (as the sharding is) as the HLO sharding it must be, citing VAL-8."""
    ndim = _check_ndim(ndim)
    if lowered is None:
        return ndim, to_hlo(sharding, ndim)
    _check_sharding(sharding)
    if not isinstance(lowered, HloSharding):
        raise reject(NotASharding("the lowered sharding", "an HloSharding", lowered))
    return ndim, lowered


def _check_ndim(ndim: Any) -> int:
    # A rank is a count, checked as every size is (VAL-1), and bounded: 10**20 or 2**40 is
    # refused here instead of overflowing or filling memory where the answer is built.
    if type(ndim) is int and 0 <= ndim <= MAX_RANK:
        return ndim
    return check_rank_count(ndim)


def check_shape(shape: Any) -> Shape:
    """A placement query's shape argument as a tuple of sizes, each checked (VAL-1)."""
    return check_dims(shape, what="array dimensions")


def acts_replicated(hlo: HloSharding) -> bool:
    """Whether every device holds the whole value under ``hlo``."""
    # JAX treats any HLO sharding over a single device position as replicated (maximal too);
    # manual and unreduced name no position and are not replicated.
    return isinstance(hlo, Replicated) or hlo.num_devices == 1


@rule("NS-5", mirrors="NamedSharding.check_compatible_aval / GSPMDSharding.check_compatible_aval")
def check_rank(sharding: Any, shape: Any) -> None:
    """A sharding applies only to values whose rank is at least its spec's length (trailing Nones count) or its tile rank.

    >>> check_rank(NamedSharding(Mesh.iota((2,), ("x",)), P("x", None)), (4, 4))
    >>> check_rank(NamedSharding(Mesh.iota((2,), ("x",)), P("x", None)), (4,))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [NS-5]: NamedSharding(Mesh({'x': 2}), P('x', None)) needs a value of rank at least 2, but the value has rank 1
    """
    shape = check_shape(shape)
    if isinstance(sharding, NamedSharding):
        needed = len(sharding.spec)
    elif isinstance(sharding, GSPMDSharding):
        hlo = sharding.hlo
        if isinstance(hlo, Manual) or (isinstance(hlo, Tiled) and SubgroupType.MANUAL in hlo.subgroups):
            raise reject(NoPerDeviceLayout(sharding, "manual"))
        # A maximal sharding has one tile dimension of size 1.
        needed = hlo.data_rank if isinstance(hlo, Tiled) else 1 if isinstance(hlo, Maximal) else 0
    else:
        return
    extra = "; for a scalar the PartitionSpec is P()" if not shape and needed else ""
    require(len(shape) >= needed, lambda: RankTooSmall(sharding, needed, len(shape), extra))


# --------------------------------------------------------------------------- ways and shapes

@rule("DIV-2", mirrors="jax._src.op_shardings.get_num_ways_dim_sharded")
def tiles_per_dimension(sharding: Any, ndim: int, *, lowered: HloSharding | None = None
                        ) -> tuple[tuple[int, ...], int]:
    """Each dimension is cut as many ways as its tile count, and every tile is held by as many devices as the replicated subgroups hold.

    >>> tiles_per_dimension(NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("y")), 2)
    ((4, 1), 2)
    """
    # ``lowered``: to_hlo(sharding, ndim), when the caller has it already
    ndim, hlo = _check_lowered(sharding, ndim, lowered)
    if acts_replicated(hlo) or isinstance(hlo, Unreduced):
        return (1,) * ndim, (num_devices(sharding) if isinstance(hlo, Replicated) else 1)
    if isinstance(hlo, Manual):
        raise reject(NoPerDeviceLayout(sharding, "manual"))
    assert isinstance(hlo, Tiled)
    require(SubgroupType.MANUAL not in hlo.subgroups,
            lambda: NoPerDeviceLayout(sharding, "partly manual"))
    return hlo.tiles, hlo.subgroup_size(SubgroupType.REPLICATED)


def replication_factor(sharding: Any, ndim: int) -> int:
    """How many devices hold each tile."""
    return tiles_per_dimension(sharding, ndim)[1]


@varies("0.4.13", "Each dimension is split into as many equal pieces as it has tiles, and "
        "its size must be a multiple of that number; an indivisible one is a plain "
        "ValueError.",
        raises={"IndivisibleError": "ValueError"})
@rule("DIV-1", mirrors="jax._src.sharding._common_shard_shape")
def shard_shape(sharding: Any, shape: Any, *, lowered: HloSharding | None = None) -> Shape:
    """Each dimension is split into as many equal pieces as it has tiles, and its size must be a multiple of that number.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> shard_shape(NamedSharding(mesh, P("x", "y")), (8, 8))
    (4, 2)
    >>> shard_shape(NamedSharding(mesh, P("x", "y")), (7, 8))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [DIV-1]: dimension 0 of shape (7, 8) has size 7, which NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', 'y')) splits 2 ways; 7 is not a multiple of 2 (ways per dimension: (2, 4)). Pad dimension 0 to a multiple of 2, or split it over fewer mesh axes.
    """
    shape = check_shape(shape)
    _, hlo = _check_lowered(sharding, len(shape), lowered)
    if acts_replicated(hlo) or isinstance(hlo, Unreduced):
        return shape
    tiles, _ = tiles_per_dimension(sharding, len(shape), lowered=hlo)
    require(len(tiles) == len(shape),
            lambda: TilesDoNotMatchRank(sharding, len(tiles), len(shape), shape))
    out = []
    for dim, (size, ways) in enumerate(zip(shape, tiles)):
        # Every dimension divides evenly by the number of ways it is split
        require(size % ways == 0, lambda: Indivisible(sharding, dim, size, ways, shape, tiles))
        out.append(size // ways)
    return tuple(out)


# --------------------------------------------------------------------------- devices

def devices_of(sharding: Any, question: str) -> DeviceList:
    """The sharding's device list, refused (DEV-1) when it has none (an abstract mesh) for a
    ``question`` that needs devices."""
    devices = _check_sharding(sharding).device_list
    require(devices is not None, lambda: NoDevices(sharding, question))
    return devices


@rule("DEV-1", mirrors="Sharding.num_devices / device_set / _device_assignment")
def num_devices(sharding: Any) -> int:
    """A NamedSharding spans its mesh's devices, a SingleDeviceSharding one device, and a GSPMDSharding its device list, which its tile assignment must fill exactly.

    >>> num_devices(NamedSharding(AbstractMesh((2, 4), ("x", "y")), P("x")))
    8
    """
    if isinstance(sharding, NamedSharding):
        return sharding.mesh.size
    if isinstance(sharding, SingleDeviceSharding):
        return 1
    if isinstance(sharding, GSPMDSharding):
        hlo, held = sharding.hlo, len(sharding.devices)
        if isinstance(hlo, Tiled):
            require(hlo.num_devices == held, lambda: DeviceCountDisagrees(
                str(hlo), hlo.num_devices, held))
        if isinstance(hlo, Maximal):
            require(hlo.device < held, lambda: DeviceCountDisagrees(str(hlo), hlo.device + 1, held))
        return held
    _check_sharding(sharding)
    raise AssertionError("unreachable")


def device_ids(sharding: Any) -> Iterator[int]:
    """The ids of the devices the sharding spans, in device-assignment order."""
    num_devices(sharding)
    return devices_of(sharding, "its device set").ids()


@rule("DEV-2", mirrors="Sharding.addressable_devices")
def addressable_device_ids(sharding: Any, process_index: int) -> tuple[int, ...]:
    """The devices a process can address are the sharding's devices owned by that process.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), devices_per_process=4)
    >>> addressable_device_ids(NamedSharding(mesh, P("x")), 1)
    (4, 5, 6, 7)
    """
    devices = devices_of(sharding, "addressability")
    (process_index,) = check_dims((process_index,), what="a process index")
    return tuple(d.id for d in devices if d.process_index == process_index)


# --------------------------------------------------------------------------- boxes

def _full_box(shape: Shape) -> Box:
    return tuple((0, n) for n in shape)


def per_device_layout(sharding: Any, shape: Shape) -> tuple[HloSharding, Shape, DeviceList]:
    """The HLO sharding, the shard shape and the device list of ``sharding`` for ``shape``,
    after the checks every per-device question makes first, in JAX's order: divisibility,
    then unreduced, then devices."""
    hlo = to_hlo(sharding, len(shape))
    piece = shard_shape(sharding, shape, lowered=hlo)
    if isinstance(hlo, Unreduced) or (
            isinstance(hlo, Tiled) and SubgroupType.UNREDUCED in hlo.subgroups):
        raise reject(NoPerDeviceLayout(sharding, "unreduced"))
    devices = devices_of(sharding, "which device holds which box")
    num_devices(sharding)
    return hlo, piece, devices


def check_places(sharding: Any, shape: Shape) -> None:
    """The checks IDX-1 makes before it says which device holds which box (divisibility,
    unreduced, devices), for a question that can be answered without the boxes."""
    if not isinstance(sharding, SingleDeviceSharding):
        per_device_layout(sharding, shape)


def box_at(hlo: HloSharding, piece: Shape, shape: Shape, position: int) -> Box:
    """The box held by the device at ``position`` of the device list (IDX-1), ``piece`` the
    shard shape."""
    if acts_replicated(hlo):
        return _full_box(shape)
    assert isinstance(hlo, Tiled)
    return box_of_tile(hlo, piece, hlo.tile_of(position))


def box_of_tile(hlo: Tiled, piece: Shape, tile: int) -> Box:
    """The box of the tile at flat index ``tile`` of the tile assignment."""
    coords = unravel(tile, hlo.dims)
    return tuple((c * p, (c + 1) * p) for c, p in zip(coords, piece))


@rule("IDX-1", mirrors="jax._src.sharding.common_devices_indices_map / op_sharding_to_indices")
def devices_indices_map(sharding: Any, shape: Any) -> dict[int, Box]:
    """The device at position p of the device list holds the box of the tile at p's place in the tile assignment: along each dimension, tile c of n covers [c*size/n, (c+1)*size/n).

    >>> mesh = Mesh.iota((2, 2), ("x", "y"))
    >>> devices_indices_map(NamedSharding(mesh, P("y")), (4, 3))
    {0: ((0, 2), (0, 3)), 1: ((2, 4), (0, 3)), 2: ((0, 2), (0, 3)), 3: ((2, 4), (0, 3))}
    """
    shape = check_shape(shape)
    if isinstance(sharding, SingleDeviceSharding):
        return {sharding.device.id: _full_box(shape)}
    hlo, piece, devices = per_device_layout(sharding, shape)
    return {devices.id_at(p): box_at(hlo, piece, shape, p) for p in range(len(devices))}


def box_of(sharding: Any, shape: Any, device_id: int) -> Box:
    """The box that one device holds, without enumerating the others (IDX-1 for one device)."""
    shape = check_shape(shape)
    (device_id,) = check_dims((device_id,), what="a device id")
    if isinstance(sharding, SingleDeviceSharding):
        require(device_id == sharding.device.id, lambda: NotOnDevice(device_id, sharding))
        return _full_box(shape)
    hlo, piece, devices = per_device_layout(sharding, shape)
    position = devices.position_of(device_id)
    require(position is not None, lambda: NotOnDevice(device_id, sharding))
    return box_at(hlo, piece, shape, position)  # type: ignore[arg-type]


@rule("IDX-2", mirrors="jax._src.sharding_impls.device_replica_id_map")
def replica_id(sharding: Any, shape: Any, device_id: int) -> int:
    """A device's replica id counts the devices before it in the device list that hold the same box.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"))
    >>> [replica_id(NamedSharding(mesh, P("y")), (4,), d) for d in range(4)]
    [0, 0, 1, 1]
    """
    shape = check_shape(shape)
    (device_id,) = check_dims((device_id,), what="a device id")
    if isinstance(sharding, SingleDeviceSharding):
        require(device_id == sharding.device.id, lambda: NotOnDevice(device_id, sharding))
        return 0
    hlo, piece, devices = per_device_layout(sharding, shape)
    position = devices.position_of(device_id)
    require(position is not None, lambda: NotOnDevice(device_id, sharding))
    assert position is not None
    if acts_replicated(hlo):
        return position  # every device holds the whole array
    assert isinstance(hlo, Tiled)
    if any(n == 0 for n in shape):
        # Tiles that differ only along an empty dimension hold the same (empty) box.
        mine = box_at(hlo, piece, shape, position)
        return sum(1 for p in range(position) if box_at(hlo, piece, shape, p) == mine)
    # The copies of a tile fill the trailing subgroup dims; count those before `position`.
    group = hlo.num_devices // math.prod(hlo.tiles)
    first = (hlo.tile_of(position) // group) * group
    return sum(1 for t in range(first, first + group) if hlo.position_at(t) < position)


def replica_ids(sharding: Any, shape: Any) -> dict[int, int]:
    """Every device's replica id (IDX-2 for all devices at once, after IDX-1's checks)."""
    boxes = devices_indices_map(sharding, shape)
    seen: dict[Box, int] = {}
    out = {}
    for device, box in boxes.items():
        out[device] = seen.get(box, 0)
        seen[box] = out[device] + 1
    return out


@rule("REP-1", mirrors="NamedSharding.is_fully_replicated / is_hlo_sharding_replicated")
def is_fully_replicated(sharding: Any) -> bool:
    """A sharding is fully replicated when every device holds the whole array: a one-device mesh, a spec whose axes multiply to 1 (and nothing unreduced), a single device, or an HLO sharding that is replicated or over one device.

    >>> mesh = Mesh.iota((1, 8), ("x", "y"))
    >>> is_fully_replicated(NamedSharding(mesh, P("x"))), is_fully_replicated(NamedSharding(mesh, P("y")))
    (True, False)
    """
    if isinstance(sharding, NamedSharding):
        mesh = sharding.mesh
        if mesh.size == 1:
            return True
        if sharding.spec.unreduced:
            return False
        return math.prod(mesh.axis_size(a) for a in sharding.spec.axes()) == 1
    if isinstance(sharding, SingleDeviceSharding):
        return True
    if isinstance(sharding, GSPMDSharding):
        return acts_replicated(sharding.hlo)
    _check_sharding(sharding)
    raise AssertionError("unreachable")
