"""Several processes: what each process of a multi-controller program addresses, holds, fetches.

In a program of several processes (``jax.distributed``) every device belongs to one process,
and a process reaches only its own devices (DEV-2). The rules here answer, for one process:

* what it addresses and holds: whether it addresses every device of a sharding (PROC-1),
  which shards of an array it holds, with their boxes and replica ids (PROC-2);
* what it may read: whether it may fetch an array's value to the host (PROC-5) or close
  over the array in a jitted function (PROC-10);
* how per-process data becomes a global array and back: the global shape its local data
  stands for (PROC-3), where its rows land under ``jax.make_array_from_process_local_data``
  (PROC-4), its local mesh (PROC-6), ``host_local_array_to_global_array`` (PROC-7) and
  ``global_array_to_host_local_array`` (PROC-8), and ``make_array_from_single_device_arrays``
  (PROC-9); and what ``process_allgather`` gives back (PROC-11).

* where ``jax.make_mesh`` puts each process's devices (PROC-12) and which mesh coordinates
  a process addresses there (PROC-13);
* ``jax.device_put`` across processes (PROC-14 .. PROC-16) and donation (PROC-17,
  PROC-18): :mod:`~shardlaw.spec.placement.process_transfers`.

jit's rule for numpy arguments across processes is RES-2. The transfers between processes
that the CPU backend lacks are refused as JAX 0.10.2 refuses them on CPU devices; other
backends may transfer instead.

The examples use a mesh of 2 x 2 devices whose devices 0, 1 belong to process 0 and 2, 3
to process 1 (``devices_per_process=2``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .blocks import (
    addressable_device_ids, device_ids, devices_indices_map, devices_of, is_fully_replicated,
    num_devices, replica_ids, shard_shape, tiles_per_dimension,
)
from ..core.rules import Failure, reject, require, rule
from ..core.shardings import NamedSharding, NotASharding, check_part
from ..core.values import Device, DeviceList, Mesh, PartitionSpec, check_dims

P = PartitionSpec  # the name the examples use

__all__ = ["Shard", "is_fully_addressable", "addressable_shards", "global_shape_from_local",
           "process_local_slices", "check_fetchable", "local_mesh", "host_local_to_global",
           "global_to_host_local", "place_single_device_arrays", "check_closed_over",
           "gathered", "process_mesh", "MeshPart", "make_mesh_part"]

Box = tuple[tuple[int, int], ...]
Shape = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard a process holds: its device, the box of the global array, its replica id."""

    device: int
    box: Box
    replica_id: int


def check_process_index(process_index: Any) -> int:
    """A query's process index, checked as every count is (VAL-1)."""
    (process_index,) = check_dims((process_index,), what="a process index")
    return process_index


@rule("PROC-1", mirrors="Sharding.is_fully_addressable / jax.Array.is_fully_addressable")
def is_fully_addressable(sharding: Any, process_index: int) -> bool:
    """A sharding is fully addressable by a process when that process owns every device of it.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> is_fully_addressable(NamedSharding(mesh, P("x")), 0)
    False
    >>> one = Mesh.iota((2, 2), ("x", "y"), devices_per_process=4)
    >>> is_fully_addressable(NamedSharding(one, P("x")), 0)
    True
    """
    process_index = check_process_index(process_index)
    owned = addressable_device_ids(sharding, process_index)
    return len(owned) == len(tuple(device_ids(sharding)))


@rule("PROC-2", mirrors="jax.Array.addressable_shards / Sharding.addressable_devices_indices_map")
def addressable_shards(sharding: Any, shape: Any, process_index: int) -> tuple[Shard, ...]:
    """A process holds one shard per device it owns in the sharding, in device-list order, each with its device's box (IDX-1) and its replica id counted over every process's devices (IDX-2).

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> addressable_shards(NamedSharding(mesh, P("y")), (4,), 1)
    (Shard(device=2, box=((0, 2),), replica_id=1), Shard(device=3, box=((2, 4),), replica_id=1))
    """
    process_index = check_process_index(process_index)
    boxes = devices_indices_map(sharding, shape)
    replicas = replica_ids(sharding, shape)
    owned = set(addressable_device_ids(sharding, process_index))
    return tuple(Shard(device, box, replicas[device]) for device, box in boxes.items()
                 if device in owned)


def _slices_per_process(sharding: Any, ndim: int, dim: int) -> dict[int, frozenset]:
    """process -> the slices of dimension ``dim`` its devices hold, read on the shape that
    every sharding of N devices divides, ``(N,) * ndim``."""
    universal = (num_devices(sharding),) * ndim
    owner = _owners(sharding)
    held: dict[int, set] = {}
    for device, box in devices_indices_map(sharding, universal).items():
        held.setdefault(owner[device], set()).add(box[dim])
    return {process: frozenset(slices) for process, slices in held.items()}


def _owners(sharding: Any) -> dict[int, int]:
    """device id -> the process that owns it."""
    return {d.id: d.process_index for d in devices_of(sharding, "which process owns it")}


def _distinct_slice_sets(sharding: Any, ndim: int, dim: int) -> int | None:
    """How many distinct sets of slices the processes hold along ``dim``, or None when the
    sharding is not process-uniform there (the sets differ in size, or overlap unequally)."""
    sets = _slices_per_process(sharding, ndim, dim)
    sizes = {len(s) for s in sets.values()}
    distinct = set(sets.values())
    if len(sizes) != 1 or sum(len(s) for s in distinct) != len(set().union(*distinct)):
        return None
    return len(distinct)


@rule("PROC-3", mirrors="jax._src.sharding_impls.local_to_global_shape / "
                        "get_process_index_and_count")
def global_shape_from_local(sharding: Any, local_shape: Any, process_index: int
                            ) -> tuple[int | None, ...]:
    """Along each dimension the global size is the local size times the number of distinct slice sets the processes hold there, or unknown (None) where those sets differ in size or overlap unequally.

    A sharding fully addressable by the process, or fully replicated, keeps the local shape.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> global_shape_from_local(NamedSharding(mesh, P("x", "y")), (3, 5), 0)
    (6, 5)
    >>> global_shape_from_local(NamedSharding(mesh, P("y", "x")), (3, 5), 0)
    (3, 10)
    >>> crossed = DeviceList.of_ids([0, 1, 2, 3, 4, 6, 5, 7], devices_per_process=2)
    >>> global_shape_from_local(NamedSharding(Mesh((2, 4), ("x", "y"), crossed), P("x", "y")),
    ...                         (2, 2), 0)
    (4, None)
    """
    local_shape = check_dims(local_shape, what="a local shape")
    process_index = check_process_index(process_index)
    if is_fully_addressable(sharding, process_index) or is_fully_replicated(sharding):
        return tuple(local_shape)
    counts = [_distinct_slice_sets(sharding, len(local_shape), dim)
              for dim in range(len(local_shape))]
    return tuple(None if n is None else size * n for size, n in zip(local_shape, counts))


@dataclasses.dataclass(frozen=True)
class GlobalShapeUnknown(Failure, rule="PROC-4"):
    template = ("process-local data of shape {local_shape} under {sharding} does not tell the "
                "global shape: along dimension(s) {dims} the processes hold different slices "
                "(PROC-3 leaves them unknown: {partial})")
    hint = "Pass global_shape to jax.make_array_from_process_local_data."
    local_shape: tuple
    sharding: Any
    dims: tuple
    partial: tuple


@dataclasses.dataclass(frozen=True)
class LocalDataMisfit(Failure, rule="PROC-4"):
    template = ("process-local data of shape {local_shape} has {size} elements along "
                "dimension {dim}, but the global array has {global_size} there and this "
                "process addresses {process_size} ({slices} distinct slice(s) of {piece})")
    hint = ("Give this process's own rows ({process_size} along dimension {dim}) or the "
            "whole dimension ({global_size}).")
    local_shape: tuple
    dim: int
    size: int
    global_size: int
    process_size: int
    slices: int
    piece: int


def _misfit_check(sharding: Any, local_shape: Shape, global_shape: Shape, process_index: int,
                  boxes: dict[int, Box]) -> tuple[bool, ...]:
    """Whether each dimension of the data is the whole global dimension (C2 refuses a
    dimension that is neither that nor the process's own extent)."""
    piece = shard_shape(sharding, global_shape)
    full = []
    for dim, (size, global_size) in enumerate(zip(local_shape, global_shape)):
        full.append(size == global_size)
        if size != global_size:
            slices = len({box[dim] for box in boxes.values()})
            require(size == slices * piece[dim], lambda: LocalDataMisfit(
                tuple(local_shape), dim, size, global_size, slices * piece[dim], slices,
                piece[dim]))
    return tuple(full)


@rule("PROC-4", mirrors="jax.make_array_from_process_local_data "
                        "(jax._src.array._array_from_process_local_data)")
def process_local_slices(sharding: Any, local_shape: Any, global_shape: Any,
                         process_index: int) -> tuple[Shape, dict[int, Box]]:
    """From a process's local data each of its devices takes its own slice along dimensions as large as the global array, and elsewhere the slice ranked by its start among the process's distinct starts there.

    The answer is the global shape and, for each device the process owns, the box of the
    local data it takes.

    (C1) With no global shape given it is PROC-3's, and refused where PROC-3 leaves a
    dimension unknown.
    (C2) A dimension of the data that is neither the global size nor the extent the process
    addresses there (its distinct slices times the shard size) is refused.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> process_local_slices(NamedSharding(mesh, P("x")), (2, 3), None, 1)
    ((4, 3), {2: ((0, 2), (0, 3)), 3: ((0, 2), (0, 3))})
    >>> process_local_slices(NamedSharding(mesh, P("y")), (4, 3), None, 1)
    ((4, 3), {2: ((0, 2), (0, 3)), 3: ((2, 4), (0, 3))})
    >>> process_local_slices(NamedSharding(mesh, P("x")), (3, 3), (4, 3), 0)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [PROC-4]: process-local data of shape (3, 3) has 3 elements along dimension 0, but the global array has 4 there and this process addresses 2 (1 distinct slice(s) of 2). Give this process's own rows (2 along dimension 0) or the whole dimension (4).
    """
    local_shape = check_dims(local_shape, what="a local shape")
    process_index = check_process_index(process_index)
    if global_shape is None:
        inferred = global_shape_from_local(sharding, local_shape, process_index)
        unknown = tuple(d for d, n in enumerate(inferred) if n is None)
        require(not unknown, lambda: GlobalShapeUnknown(tuple(local_shape), sharding, unknown,
                                                        inferred))
        global_shape = inferred
    global_shape = tuple(check_dims(global_shape, what="a global shape"))
    owned = set(addressable_device_ids(sharding, process_index))
    boxes = {d: box for d, box in devices_indices_map(sharding, global_shape).items()
             if d in owned}
    full = _misfit_check(sharding, local_shape, global_shape, process_index, boxes)
    starts = [sorted({box[dim][0] for box in boxes.values()}) for dim in range(len(full))]
    piece = shard_shape(sharding, global_shape)

    def local_box(box: Box) -> Box:
        return tuple(box[dim] if full[dim] else
                     (starts[dim].index(box[dim][0]) * piece[dim],
                      (starts[dim].index(box[dim][0]) + 1) * piece[dim])
                     for dim in range(len(full)))

    return global_shape, {d: local_box(box) for d, box in boxes.items()}


@dataclasses.dataclass(frozen=True)
class ValueNotFetchable(Failure, rule="PROC-5", error=RuntimeError):
    template = ("process {process} cannot fetch the value of an array of shape {shape} under "
                "{sharding}: it holds {held} of its {distinct} distinct shard(s), the others "
                "live on devices of other processes")
    hint = ("Gather it first (jax.experimental.multihost_utils.process_allgather), or read "
            "this process's own pieces from .addressable_shards.")
    process: int
    shape: tuple
    sharding: Any
    held: int
    distinct: int


@rule("PROC-5", mirrors="jax.Array._value (np.asarray, .item(), str of a jax.Array)")
def check_fetchable(sharding: Any, shape: Any, process_index: int) -> None:
    """A process can fetch an array's value (``np.asarray``, ``.item()``) only when the array is fully replicated on some device it owns, fully addressable by it (PROC-1), or its devices hold every distinct box.

    Printing such an array does not refuse: it shows only the shape and dtype.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> check_fetchable(NamedSharding(mesh, P("y")), (4,), 0)
    >>> check_fetchable(NamedSharding(mesh, P("x")), (4,), 0)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [PROC-5]: process 0 cannot fetch the value of an array of shape (4,) under NamedSharding(Mesh({'x': 2, 'y': 2}), P('x')): it holds 1 of its 2 distinct shard(s), the others live on devices of other processes. Gather it first (jax.experimental.multihost_utils.process_allgather), or read this process's own pieces from .addressable_shards.
    """
    process_index = check_process_index(process_index)
    shape = tuple(check_dims(shape, what="a shape"))
    missing = _shards_out_of_reach(sharding, shape, process_index)
    require(missing is None, lambda: ValueNotFetchable(process_index, shape, sharding,
                                                       *missing))


def _shards_out_of_reach(sharding: Any, shape: Shape, process_index: int
                         ) -> tuple[int, int] | None:
    """None when the process can fetch the value (PROC-5), else (the distinct boxes it
    holds, the distinct boxes of the array)."""
    owned = addressable_device_ids(sharding, process_index)
    if is_fully_replicated(sharding) and owned:
        return None
    if is_fully_addressable(sharding, process_index):
        return None
    boxes = devices_indices_map(sharding, shape)
    distinct = set(boxes.values())
    held = {boxes[d] for d in owned}
    return None if held == distinct else (len(held), len(distinct))


@dataclasses.dataclass(frozen=True)
class ClosedOverOutOfReach(Failure, rule="PROC-10", error=RuntimeError):
    template = ("the jitted function closes over an array of shape {shape} under {sharding} "
                "whose value process {process} cannot fetch (it holds {held} of its "
                "{distinct} distinct shard(s)); jit embeds a closed-over array's value")
    hint = "Pass the array to the function as an argument."
    process: int
    shape: tuple
    sharding: Any
    held: int
    distinct: int


@rule("PROC-10", mirrors="jax._src.array._array_mlir_constant_handler")
def check_closed_over(sharding: Any, shape: Any, process_index: int) -> None:
    """A jitted function may close over an array only when the process can fetch its value (PROC-5): lowering embeds the value, so an array some of whose shards only other processes hold is refused.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> check_closed_over(NamedSharding(mesh, P("y")), (4,), 1)
    >>> check_closed_over(NamedSharding(mesh, P("x")), (4,), 1)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [PROC-10]: the jitted function closes over an array of shape (4,) under NamedSharding(Mesh({'x': 2, 'y': 2}), P('x')) whose value process 1 cannot fetch (it holds 1 of its 2 distinct shard(s)); jit embeds a closed-over array's value. Pass the array to the function as an argument.
    """
    process_index = check_process_index(process_index)
    shape = tuple(check_dims(shape, what="a shape"))
    missing = _shards_out_of_reach(sharding, shape, process_index)
    require(missing is None, lambda: ClosedOverOutOfReach(process_index, shape, sharding,
                                                          *missing))


# --------------------------------------------------------------------------- host-local arrays

@dataclasses.dataclass(frozen=True)
class LocalDevicesNotSubcube(Failure, rule="PROC-6"):
    template = ("the devices of process {process} do not form a block of the mesh "
                "{mesh}: the smallest block holding them, rows {hull} of each axis, also "
                "holds devices {others} of other processes")
    hint = ("Order the mesh's devices so that each process's devices are contiguous (as "
            "jax.make_mesh does), or build the global array with "
            "jax.make_array_from_process_local_data.")
    process: int
    mesh: Any
    hull: tuple
    others: tuple


@dataclasses.dataclass(frozen=True)
class NoLocalDevices(Failure, rule="PROC-6"):
    template = "process {process} owns no device of the mesh {mesh}, so it has no local mesh"
    process: int
    mesh: Any


def _coordinates(mesh: Mesh) -> list[tuple[int, ...]]:
    """The mesh coordinates of each position of its flat device list, in order."""
    out = [()]
    for size in mesh.axis_sizes:
        out = [c + (i,) for c in out for i in range(size)]
    return out


@rule("PROC-6", mirrors="jax.sharding.Mesh.local_mesh (jax._src.mesh._get_local_mesh)")
def local_mesh(mesh: Mesh, process_index: int) -> Mesh:
    """A process's local mesh is the smallest block of the mesh, along every axis a range of indices, that holds all of the devices it owns; it must hold no other device.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> local_mesh(mesh, 1).devices.id_tuple(), local_mesh(mesh, 1).axis_sizes
    ((2, 3), (1, 2))
    >>> crossed = DeviceList.of_ids([0, 2, 1, 3], devices_per_process=2)
    >>> local_mesh(Mesh((2, 2), ("x", "y"), crossed), 0).devices.id_tuple()
    (0, 1)
    >>> local_mesh(Mesh((2, 2), ("x", "y"), DeviceList.of_ids([0, 2, 3, 1],
    ...                                                      devices_per_process=2)), 0)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [PROC-6]: the devices of process 0 do not form a block of the mesh Mesh({'x': 2, 'y': 2}, devices=DeviceList([0, 2, 3, 1])): the smallest block holding them, rows ((0, 2), (0, 2)) of each axis, also holds devices (2, 3) of other processes. Order the mesh's devices so that each process's devices are contiguous (as jax.make_mesh does), or build the global array with jax.make_array_from_process_local_data.
    """
    check_part(mesh, Mesh, "the mesh a local mesh is taken of", "a Mesh (with devices)")
    process_index = check_process_index(process_index)
    devices = list(mesh.devices)
    coords = _coordinates(mesh)
    mine = [c for c, d in zip(coords, devices) if d.process_index == process_index]
    require(bool(mine), lambda: NoLocalDevices(process_index, mesh))
    hull = tuple((min(c[a] for c in mine), max(c[a] for c in mine) + 1)
                 for a in range(len(mesh.axis_sizes)))
    inside = [(c, d) for c, d in zip(coords, devices)
              if all(lo <= x < hi for x, (lo, hi) in zip(c, hull))]
    others = tuple(d.id for _, d in inside if d.process_index != process_index)
    require(not others, lambda: LocalDevicesNotSubcube(process_index, mesh, hull, others))
    return Mesh(tuple(hi - lo for lo, hi in hull), mesh.axis_names,
                DeviceList(tuple(d for _, d in inside)), mesh.axis_types)


def _local_and_global(mesh: Mesh, spec: PartitionSpec, process_index: int
                      ) -> tuple[NamedSharding, NamedSharding]:
    return (NamedSharding(local_mesh(mesh, process_index), spec), NamedSharding(mesh, spec))


@rule("PROC-7", mirrors="jax.experimental.multihost_utils.host_local_array_to_global_array")
def host_local_to_global(mesh: Mesh, spec: PartitionSpec, local_shape: Any,
                         process_index: int) -> tuple[Shape, dict[int, Box]]:
    """A host-local array grows along each dimension by the ways the mesh splits it over the ways the local mesh (PROC-6) does, each device taking its box of the local array under the spec over the local mesh.

    The answer is the global shape and, for each device the process owns, the box of the
    local array it takes (its box of the global array is IDX-1's).

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> host_local_to_global(mesh, P("x", "y"), (1, 4), 1)
    ((2, 4), {2: ((0, 1), (0, 2)), 3: ((0, 1), (2, 4))})
    """
    local_shape = tuple(check_dims(local_shape, what="a local shape"))
    local, whole = _local_and_global(mesh, spec, process_index)
    local_piece = shard_shape(local, local_shape)
    global_shape = tuple(p * w for p, w in zip(local_piece, _ways(whole, len(local_shape))))
    return global_shape, devices_indices_map(local, local_shape)


def _ways(sharding: NamedSharding, ndim: int) -> tuple[int, ...]:
    return tiles_per_dimension(sharding, ndim)[0]


@rule("PROC-8", mirrors="jax.experimental.multihost_utils.global_array_to_host_local_array")
def global_to_host_local(mesh: Mesh, spec: PartitionSpec, global_shape: Any,
                         process_index: int) -> tuple[Shape, dict[int, tuple[Box, Box]]]:
    """A global array's host-local part shrinks along each dimension by the ways the mesh splits it over the ways the local mesh (PROC-6) does, each device's shard standing at its box under the spec over the local mesh.

    The answer is the local shape and, for each device the process owns, its box of the
    local array and the box of the global array whose values it holds there.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> global_to_host_local(mesh, P("x", "y"), (2, 4), 1)
    ((1, 4), {2: (((0, 1), (0, 2)), ((1, 2), (0, 2))), 3: (((0, 1), (2, 4)), ((1, 2), (2, 4)))})
    """
    global_shape = tuple(check_dims(global_shape, what="a global shape"))
    local, whole = _local_and_global(mesh, spec, process_index)
    piece = shard_shape(whole, global_shape)
    local_shape = tuple(p * w for p, w in zip(piece, _ways(local, len(global_shape))))
    global_boxes = devices_indices_map(whole, global_shape)
    return local_shape, {d: (box, global_boxes[d])
                         for d, box in devices_indices_map(local, local_shape).items()}


# --------------------------------------------------------------------------- single-device arrays

@dataclasses.dataclass(frozen=True)
class PerDeviceArraysMisfit(Failure, rule="PROC-9"):
    template = ("process {process} hands {count} single-device array(s) on devices {given} "
                "for a sharding whose devices it owns are {owned}: {why}")
    hint = ("Hand exactly one array per device this process owns in the sharding "
            "(sharding.addressable_devices), each of the shard shape {piece}.")
    process: int
    count: int
    given: tuple
    owned: tuple
    why: str
    piece: tuple


def _pairs(arrays: Any) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Single-device arrays as (device id, shape) pairs, each part checked."""
    expected = "a sequence of (device id, shape) pairs"
    check_part(arrays, (list, tuple), "the single-device arrays", expected)
    out = []
    for item in arrays:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise reject(NotASharding("a single-device array", "a (device id, shape) pair",
                                      item))
        (device,) = check_dims((item[0],), what="a device id")
        out.append((device, tuple(check_dims(item[1], what="an array's shape"))))
    return tuple(out)


@rule("PROC-9", mirrors="jax.make_array_from_single_device_arrays "
                        "(jax._src.array.ArrayImpl._check_and_rearrange)")
def place_single_device_arrays(sharding: Any, shape: Any, arrays: Any,
                               process_index: int) -> dict[int, Box]:
    """A process builds its part of a global array from single-device arrays only from one array of the shard shape on each device it owns in the sharding; each becomes its device's shard, in any order.

    ``arrays`` is a sequence of (device id, shape) pairs; the answer is, for each device,
    the box of the global array its array stands for.

    (C1) As many arrays as the devices the process owns in the sharding.
    (C2) On distinct devices.
    (C3) On exactly those devices.
    (C4) Each of the shard shape (DIV-1).

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> s = NamedSharding(mesh, P("x", "y"))
    >>> place_single_device_arrays(s, (2, 4), [(3, (1, 2)), (2, (1, 2))], 1)
    {3: ((1, 2), (2, 4)), 2: ((1, 2), (0, 2))}
    >>> place_single_device_arrays(s, (2, 4), [(2, (1, 2))], 1)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [PROC-9]: process 1 hands 1 single-device array(s) on devices (2,) for a sharding whose devices it owns are (2, 3): it owns 2 device(s) of the sharding. Hand exactly one array per device this process owns in the sharding (sharding.addressable_devices), each of the shard shape (1, 2).
    """
    process_index = check_process_index(process_index)
    shape = tuple(check_dims(shape, what="a shape"))
    arrays = _pairs(arrays)
    owned = addressable_device_ids(sharding, process_index)
    piece = tuple(shard_shape(sharding, shape))
    given = tuple(device for device, _ in arrays)

    def misfit(why: str) -> Failure:
        return PerDeviceArraysMisfit(process_index, len(given), given, owned, why, piece)

    require(len(given) == len(owned),
            lambda: misfit(f"it owns {len(owned)} device(s) of the sharding"))
    require(len(set(given)) == len(given), lambda: misfit("two arrays share a device"))
    require(set(given) == set(owned), lambda: misfit(
        "the arrays' devices are not the devices it owns in the sharding"))
    for device, array_shape in arrays:
        require(tuple(array_shape) == piece, lambda: misfit(
            f"the array on device {device} has shape {tuple(array_shape)}, not the shard "
            f"shape"))
    boxes = devices_indices_map(sharding, shape)
    return {device: boxes[device] for device in given}


# --------------------------------------------------------------------------- gathering

@dataclasses.dataclass(frozen=True)
class GatherNotTiled(Failure, rule="PROC-11"):
    template = ("process_allgather of an array of shape {shape} under {sharding}, which process "
                "{process} does not fully address, stacks nothing: such an array is gathered "
                "whole")
    hint = "Pass tiled=True."
    process: int
    shape: tuple
    sharding: Any


# process_allgather's answer lists every process's box: at most this many processes.
MAX_PROCESSES = 1 << 16


@dataclasses.dataclass(frozen=True)
class TooManyProcesses(Failure, rule="PROC-11"):
    template = ("a process count must be at most {limit} (each process's rows are listed), "
                "got {value}")
    value: int
    limit: int


@rule("PROC-11", mirrors="jax.experimental.multihost_utils.process_allgather")
def gathered(shape: Any, processes: int, tiled: bool, process_index: int,
             sharding: Any = None) -> tuple[Shape, tuple[Box, ...] | None]:
    """process_allgather gives every process an array the process does not fully address whole, and stacks host data (numpy, or an array it fully addresses) of one shape along a new first axis in process order.

    The answer is the gathered shape and, for host data, the box holding each process's
    data (None for an array gathered whole).

    (C1) An array not fully addressable by the process (PROC-1), ``sharding`` given, is
    gathered only with ``tiled=True``, into its whole value.
    (C2) With ``tiled=True`` host data of rank at least 1 is concatenated along its first
    axis instead.

    >>> gathered((2, 3), 2, False, 0)
    ((2, 2, 3), (((0, 1), (0, 2), (0, 3)), ((1, 2), (0, 2), (0, 3))))
    >>> gathered((2, 3), 2, True, 0)
    ((4, 3), (((0, 2), (0, 3)), ((2, 4), (0, 3))))
    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> gathered((4,), 2, True, 0, NamedSharding(mesh, P("x")))
    ((4,), None)
    """
    shape = tuple(check_dims(shape, what="a shape"))
    (processes,) = check_dims((processes,), what="a process count")
    require(processes <= MAX_PROCESSES, lambda: TooManyProcesses(processes, MAX_PROCESSES))
    process_index = check_process_index(process_index)
    if sharding is not None and not is_fully_addressable(sharding, process_index):
        require(tiled, lambda: GatherNotTiled(process_index, shape, sharding))
        return shape, None
    if not tiled or not shape:
        rest = tuple((0, n) for n in shape)
        return (processes, *shape), tuple(((p, p + 1), *rest) for p in range(processes))
    rest = tuple((0, n) for n in shape[1:])
    first = shape[0]
    return ((processes * first, *shape[1:]),
            tuple(((p * first, (p + 1) * first), *rest) for p in range(processes)))


# --------------------------------------------------------------------------- jax.make_mesh

@dataclasses.dataclass(frozen=True)
class TooFewDevices(Failure, rule="PROC-12"):
    template = ("the number of devices, {devices}, is less than the product of mesh_shape "
                "{axis_sizes}, {positions}")
    hint = "Give a mesh shape whose product is at most the number of devices."
    axis_sizes: tuple
    positions: int
    devices: int


@dataclasses.dataclass(frozen=True)
class NotAsManyDevices(TooFewDevices):
    template = ("the number of devices, {devices}, is not the product of mesh_shape "
                "{axis_sizes}, {positions}, which create_device_mesh needs exactly")
    hint = "Give a mesh shape whose product is the number of devices, or use jax.make_mesh."


@dataclasses.dataclass(frozen=True)
class TooManyDevices(Failure, rule="PROC-12"):
    template = ("a program of at most {limit} devices is laid out (each one is listed), got "
                "{value}")
    value: int
    limit: int


def _ordinal_devices(processes: int, per_process: int) -> tuple[Device, ...]:
    """Every device of the program in ``jax.devices()`` order, named by its position there."""
    return tuple(Device(i, "cpu", i // per_process) for i in range(processes * per_process))


@rule("PROC-12", mirrors="jax.make_mesh / jax.experimental.mesh_utils.create_device_mesh "
                         "(CPU devices)")
def process_mesh(axis_sizes: Any, axis_names: Any, processes: int, devices_per_process: int,
                 *, devices: Any = None, exact: bool = False) -> Mesh:
    """On CPU jax.make_mesh lays the devices given, by default every process's in process order and each process's in local order, row-major over the mesh, taking the first as many as it has positions.

    A device here is named by its position in ``jax.devices()``: device ``i`` belongs to
    process ``i // devices_per_process``. ``devices`` (positions, in the order given) stands
    for the ``devices=`` argument.

    (C1) More positions than devices are refused.
    (C2) ``mesh_utils.create_device_mesh`` (``exact=True``) needs exactly as many devices
    as positions.

    >>> mesh = process_mesh((2, 2), ("x", "y"), 2, 2)
    >>> mesh.devices.id_tuple(), [d.process_index for d in mesh.devices]
    ((0, 1, 2, 3), [0, 0, 1, 1])
    >>> process_mesh((3,), ("x",), 2, 2).devices.id_tuple()
    (0, 1, 2)
    >>> process_mesh((3,), ("x",), 2, 2, exact=True)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [PROC-12]: the number of devices, 4, is not the product of mesh_shape (3,), 3, which create_device_mesh needs exactly. Give a mesh shape whose product is the number of devices, or use jax.make_mesh.
    """
    sizes = tuple(check_dims(axis_sizes, what="a mesh's axis sizes"))
    (processes, per_process) = check_dims((processes, devices_per_process),
                                          what="a process count and devices per process")
    require(processes * per_process <= MAX_PROCESSES,
            lambda: TooManyDevices(processes * per_process, MAX_PROCESSES))
    every = _ordinal_devices(processes, per_process)
    if devices is None:
        chosen = every
    else:
        positions = check_dims(devices, what="device positions")
        outside = [p for p in positions if p >= len(every)]
        require(not outside, lambda: NotASharding(
            "a device position", f"below the {len(every)} devices of the program", outside[0]))
        chosen = tuple(every[p] for p in positions)
    count = math.prod(sizes)
    require(count <= len(chosen) and (count == len(chosen) or not exact),
            lambda: (NotAsManyDevices if exact else TooFewDevices)(sizes, count, len(chosen)))
    return Mesh(sizes, axis_names, DeviceList(chosen[:count]))


@dataclasses.dataclass(frozen=True)
class MeshPart:
    """The mesh coordinates a process addresses, and whether they form a block."""

    coordinates: tuple[tuple[int, ...], ...]
    block: bool


@rule("PROC-13", mirrors="jax.make_mesh's device order read per process "
                         "(Mesh.local_mesh, Sharding.addressable_devices)")
def make_mesh_part(axis_sizes: Any, processes: int, devices_per_process: int,
                   process_index: int) -> MeshPart:
    """Under jax.make_mesh on CPU process p addresses the mesh positions p·D to p·D+D−1 in row-major order; they form a block exactly when they span whole trailing axes and one run within the axis before.

    D is ``devices_per_process``. A process past the mesh's last position addresses none.

    >>> make_mesh_part((4, 2), 4, 2, 1)
    MeshPart(coordinates=((1, 0), (1, 1)), block=True)
    >>> make_mesh_part((2, 4), 4, 2, 1)
    MeshPart(coordinates=((0, 2), (0, 3)), block=True)
    >>> make_mesh_part((2, 3), 3, 2, 1).block
    False
    """
    sizes = tuple(check_dims(axis_sizes, what="a mesh's axis sizes"))
    process_index = check_process_index(process_index)
    (processes, per_process) = check_dims((processes, devices_per_process),
                                          what="a process count and devices per process")
    mesh = process_mesh(sizes, tuple(f"axis{i}" for i in range(len(sizes))), processes,
                        per_process)
    coordinates = tuple(c for c, d in zip(_coordinates(mesh), mesh.devices)
                        if d.process_index == process_index)
    return MeshPart(coordinates, bool(coordinates) and _spans_whole_trailing_axes(
        sizes, process_index * per_process, len(coordinates)))


def _spans_whole_trailing_axes(sizes: tuple[int, ...], start: int, count: int) -> bool:
    """Whether the row-major positions ``start .. start+count-1`` are a block: for some axis
    j they are ``m`` whole sub-meshes of the axes after j, a run of ``m`` within axis j."""
    trailing = 1
    for size in reversed((1, *sizes)):
        if count % trailing == 0 and start % trailing == 0:
            run = count // trailing
            first = (start // trailing) % size
            if first + run <= size:
                return True
        trailing *= size
    return False
