"""Several processes: ``jax.device_put`` and donation across the processes of a multi-controller program.

The rules of :mod:`~shardlaw.spec.placement.processes` say what each process addresses and
holds; these say what moving data does there:

* ``jax.device_put`` across processes: of host data to a sharding (PROC-14), of a global
  array to another sharding (PROC-15), to one device (PROC-16);
* donation in a jit call across processes: which processes' arrays are deleted (PROC-17)
  and what a deleted array refuses (PROC-18).

The transfers between processes that the CPU backend lacks are refused as JAX 0.10.2
refuses them on CPU devices; other backends may transfer instead. The examples use a mesh
of 2 x 2 devices whose devices 0, 1 belong to process 0 and 2, 3 to process 1
(``devices_per_process=2``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .blocks import (
    SHARDINGS, addressable_device_ids, check_rank, device_ids, devices_of, is_fully_replicated,
    shard_shape, to_hlo,
)
from .processes import Shard, addressable_shards, check_process_index, is_fully_addressable
from ..core.rules import Failure, reject, require, rule
from ..core.shardings import (
    NamedSharding, NotASharding, SingleDeviceSharding, check_part,
)
from ..core.values import Device, DeviceList, Mesh, PartitionSpec, check_dims

P = PartitionSpec  # the name the examples use

__all__ = ["Placed", "put_host_value", "put_array", "put_on_device", "donated",
           "check_not_deleted"]

# --------------------------------------------------------------------------- device_put

@dataclasses.dataclass(frozen=True)
class Placed:
    """What ``jax.device_put`` gives one process: the shards it holds of the result (each
    holding its box of the value put), and whether the result is the argument itself."""

    shards: tuple[Shard, ...]
    same: bool = False


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise reject(NotASharding(what, "True or False", value))
    return value


def _process_set(sharding: Any) -> frozenset:
    return frozenset(d.process_index for d in devices_of(sharding, "which processes it spans"))


@dataclasses.dataclass(frozen=True)
class HostValuesDiffer(Failure, rule="PROC-14", error=AssertionError):
    template = ("device_put of host data of shape {shape} to {sharding}, whose devices belong "
                "to all {processes} processes, was given values that are not the same on "
                "each process")
    hint = ("Pass the same value in every process, or give each process's own rows to "
            "jax.make_array_from_process_local_data.")
    shape: tuple
    sharding: Any
    processes: int


@rule("PROC-14", mirrors="jax.device_put of a numpy array, a Python scalar or an uncommitted "
                         "array to a Sharding (jax._src.dispatch._device_put_sharding_impl)")
def put_host_value(sharding: Any, shape: Any, process_index: int, processes: int,
                   same_everywhere: bool = True) -> Placed:
    """device_put of host data (numpy, a Python scalar, an uncommitted array) to a sharding gives each device the process owns there its box of the process's own value; a sharding spanning every process needs equal values everywhere.

    Where the sharding leaves out some process, each process's value is taken as it is:
    processes that own devices of it may put different values there.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> put_host_value(NamedSharding(mesh, P("x")), (4,), 1, 2)
    Placed(shards=(Shard(device=2, box=((2, 4),), replica_id=0), Shard(device=3, box=((2, 4),), replica_id=1)), same=False)
    >>> put_host_value(NamedSharding(mesh, P("x")), (4,), 1, 2, same_everywhere=False)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionAssertionError: [PROC-14]: device_put of host data of shape (4,) to NamedSharding(Mesh({'x': 2, 'y': 2}), P('x')), whose devices belong to all 2 processes, was given values that are not the same on each process. Pass the same value in every process, or give each process's own rows to jax.make_array_from_process_local_data.
    """
    shape = tuple(check_dims(shape, what="a shape"))
    process_index = check_process_index(process_index)
    (processes,) = check_dims((processes,), what="a process count")
    _flag(same_everywhere, "whether every process passes the same value")
    spans_all = len(_process_set(sharding)) == processes
    require(same_everywhere or not spans_all,
            lambda: HostValuesDiffer(shape, sharding, processes))
    return Placed(addressable_shards(sharding, shape, process_index))


@dataclasses.dataclass(frozen=True)
class CrossHostTransfer(Failure, rule="PROC-15"):
    template = ("device_put of an array under {source} to {target}: both lower to {hlo}, but "
                "over devices of processes {source_processes} and {target_processes}, a "
                "cross-host transfer, which the CPU backend does not support")
    hint = "Reshard over the same devices, or gather the value (process_allgather) first."
    source: Any
    target: Any
    hlo: Any
    source_processes: tuple
    target_processes: tuple


@dataclasses.dataclass(frozen=True)
class CrossHostReshard(Failure, rule="PROC-15"):
    template = ("device_put in process {process} of an array on devices {source_ids} to a "
                "sharding on devices {target_ids}: {why}")
    hint = ("Reshard over the same set of devices, or build the new array from each "
            "process's own data (jax.make_array_from_process_local_data).")
    process: int
    source_ids: tuple
    target_ids: tuple
    why: str


@dataclasses.dataclass(frozen=True)
class ReorderNeedsNamed(Failure, rule="PROC-15", error=AssertionError):
    template = ("device_put in process {process} of an array under {source} to a sharding over "
                "the same devices, which this process does not address: JAX reorders the "
                "shards of a NamedSharding only")
    hint = "Give the array a NamedSharding over its device first."
    process: int
    source: Any


@dataclasses.dataclass(frozen=True)
class ReshardOutOfReach(Failure, rule="PROC-15", error=NotImplementedError):
    template = ("device_put in process {process} of an array on devices {source_ids}, some of "
                "them other processes', to a sharding on its own devices {target_ids}: it "
                "cannot reshard an input it does not fully address")
    hint = "Gather the value first (process_allgather), then put it on this process's devices."
    process: int
    source_ids: tuple
    target_ids: tuple


@rule("PROC-15", mirrors="jax.device_put of a committed jax.Array to a Sharding across "
                         "processes (jax._src.dispatch._device_put_sharding_impl)")
def put_array(source: Any, target: Any, shape: Any, process_index: int) -> Placed:
    """device_put of a committed array to a sharding reshards it when both use the same set of devices; otherwise a process is refused unless it fully addresses both.

    The checks run in order; the result's shards are PROC-2's of the target, each holding
    its box of the array's value.

    (C1) A target equal to the array's sharding gives the array itself.
    (C2) A target over the same set of devices reshards the array, in every process; one
    that does not fully address them needs the array's sharding to be a NamedSharding.
    (C3) Shardings that lower to the same HLO sharding over different sets of processes
    need a cross-host transfer, which CPU devices lack: refused.
    (C4) A target the process does not fully address is refused.
    (C5) A target it fully addresses is refused for an array it does not fully address;
    an array it does is copied.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> put_array(NamedSharding(mesh, P("x")), NamedSharding(mesh, P("y")), (4,), 0).shards
    (Shard(device=0, box=((0, 2),), replica_id=0), Shard(device=1, box=((2, 4),), replica_id=0))
    >>> half = Mesh((2,), ("x",), DeviceList.of_ids([0, 2], devices_per_process=2))
    >>> put_array(NamedSharding(mesh, P("x")), NamedSharding(half, P("x")), (4,), 0)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [PROC-15]: device_put in process 0 of an array on devices (0, 1, 2, 3) to a sharding on devices (0, 2): a cross-host reshard needs the same set of devices, and this process does not fully address the array. Reshard over the same set of devices, or build the new array from each process's own data (jax.make_array_from_process_local_data).
    """
    shape = tuple(check_dims(shape, what="a shape"))
    process_index = check_process_index(process_index)
    check_rank(source, shape)
    check_rank(target, shape)
    if source == target:
        return Placed(addressable_shards(source, shape, process_index), same=True)
    source_ids, target_ids = tuple(device_ids(source)), tuple(device_ids(target))
    if set(source_ids) == set(target_ids):
        require(isinstance(source, NamedSharding) or is_fully_addressable(source, process_index),
                lambda: ReorderNeedsNamed(process_index, source))
        return Placed(addressable_shards(target, shape, process_index))
    hlo = to_hlo(source, len(shape))
    require(hlo != to_hlo(target, len(shape)) or _process_set(source) == _process_set(target),
            lambda: CrossHostTransfer(source, target, hlo, tuple(sorted(_process_set(source))),
                                      tuple(sorted(_process_set(target)))))
    holds_all = is_fully_addressable(source, process_index)
    require(is_fully_addressable(target, process_index), lambda: CrossHostReshard(
        process_index, source_ids, target_ids,
        "this process fully addresses the array but not the sharding, which must be on "
        "devices it addresses" if holds_all else
        "a cross-host reshard needs the same set of devices, and this process does not "
        "fully address the array"))
    require(holds_all, lambda: ReshardOutOfReach(process_index, source_ids, target_ids))
    return Placed(addressable_shards(target, shape, process_index))


@dataclasses.dataclass(frozen=True)
class SpreadArrayToDevice(Failure, rule="PROC-16"):
    template = ("device_put in process {process} of an array on devices {source_ids}, some of "
                "them other processes', to {target}: an array put on one device must be "
                "fully addressable or on a single device")
    hint = "Gather the value first (process_allgather), then put it on the device."
    process: int
    source_ids: tuple
    target: str


@dataclasses.dataclass(frozen=True)
class CrossHostDeviceTransfer(Failure, rule="PROC-16", error=RuntimeError,
                              jax_error="JaxRuntimeError"):
    template = ("device_put of an array on device {source} (process {source_process}) to "
                "device {target} (process {target_process}) is a cross-host transfer, which "
                "the CPU backend does not support")
    hint = "Put the value on a device of the process that holds it."
    source: int
    source_process: int
    target: int
    target_process: int


@dataclasses.dataclass(frozen=True)
class SameDeviceOutOfReach(Failure, rule="PROC-16"):
    template = ("device_put in process {process} of an array on device {device} to that same "
                "device, which belongs to process {owner}: this process has no addressable "
                "output shard for the array it hands over")
    hint = "Leave the array as it is (device_put with no target), or put it there in process {owner} only."
    process: int
    device: int
    owner: int


@rule("PROC-16", mirrors="jax.device_put to a Device, or with no target, across processes "
                         "(jax._src.dispatch._device_put_sharding_impl)")
def put_on_device(source: Any, device: Any, shape: Any, process_index: int) -> Placed:
    """device_put to one device gives the device's owner the value there and other processes nothing, unless the array is spread over another process's devices or moves to another process's device.

    ``source`` is the committed array's sharding, or None for host data (numpy, a Python
    scalar, an uncommitted array: each process puts its own value). ``device`` None is
    device_put with no target, for a committed array.

    (C1) An array on several devices, not fully addressable by the process, is refused,
    with or without a device.
    (C2) An array on one device moved to a device of another process is refused, in
    every process.
    (C3) An array put on the one device it is on already is refused in each process that
    does not own that device.
    (C4) With no device an array is given back as it is.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> put_on_device(None, Device(3, "cpu", 1), (4,), 1).shards
    (Shard(device=3, box=((0, 4),), replica_id=0),)
    >>> put_on_device(SingleDeviceSharding(Device(0)), Device(3, "cpu", 1), (4,), 1)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [PROC-16]: device_put of an array on device 0 (process 0) to device 3 (process 1) is a cross-host transfer, which the CPU backend does not support. Put the value on a device of the process that holds it.
    """
    shape = tuple(check_dims(shape, what="a shape"))
    process_index = check_process_index(process_index)
    if device is None:
        check_part(source, SHARDINGS, "the array put with no target",
                   "the sharding of a committed array")
    else:
        check_part(device, Device, "the device put on", "a Device")
    if source is not None:
        check_rank(source, shape)
        owners = _list_owners(source)
        require(len(owners) == 1 or is_fully_addressable(source, process_index),
                lambda: SpreadArrayToDevice(process_index, tuple(device_ids(source)),
                                            "no device" if device is None else repr(device)))
        if device is None:
            return Placed(addressable_shards(source, shape, process_index), same=True)
        if len(owners) == 1:
            (only,) = owners
            require(only.process_index == device.process_index,
                    lambda: CrossHostDeviceTransfer(only.id, only.process_index, device.id,
                                                    device.process_index))
            require(only.id != device.id or only.process_index == process_index,
                    lambda: SameDeviceOutOfReach(process_index, only.id, only.process_index))
    return Placed(addressable_shards(SingleDeviceSharding(device), shape, process_index))


def _list_owners(sharding: Any) -> tuple[Device, ...]:
    return tuple(devices_of(sharding, "which devices hold it"))


# --------------------------------------------------------------------------- donation

@rule("PROC-17", mirrors="jit's donate_argnums across processes (jax._src.interpreters.mlir."
                         "_set_up_aliases; the runtime deletes each donated buffer)")
def donated(sharding: Any, shape: Any, dtype: str, results: Any, process_index: int) -> bool:
    """A donated argument is deleted, in each process holding a shard of it, when some result's per-device shard has as many elements, each as wide, as the argument's; otherwise every process keeps it.

    ``results`` are the call's results as (shape, dtype, sharding) triples; the answer is
    whether this process's array is deleted. JAX pairs the argument with a result of the
    same shard shape and dtype, or else of the same element count, and the compiler reuses
    the buffer where the bytes agree too; a result of another width leaves it unused (JAX
    warns). Shapes need not match: a reshaped or summed result may take the buffer.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> s = NamedSharding(mesh, P("x"))
    >>> donated(s, (4,), "float32", [((4,), "float32", s)], 1)
    True
    >>> donated(s, (4,), "float32", [((4,), "float32", NamedSharding(mesh, P()))], 1)
    False
    >>> donated(s, (4,), "float32", [((4,), "int32", s)], 1), donated(s, (4,), "float32", [((4,), "float16", s)], 1)
    (True, False)
    >>> mine = NamedSharding(Mesh((2,), ("x",), DeviceList.of_ids([0, 1], devices_per_process=2)), P("x"))
    >>> donated(mine, (4,), "float32", [((4,), "float32", mine)], 1)
    False
    """
    shape = tuple(check_dims(shape, what="a shape"))
    process_index = check_process_index(process_index)
    check_part(dtype, str, "the donated array's dtype", "a dtype name")
    check_part(results, (list, tuple), "the call's results", "(shape, dtype, sharding) triples")
    elements, width = math.prod(shard_shape(sharding, shape)), _dtype_bytes(dtype)
    usable = False
    for result in results:
        if not isinstance(result, (list, tuple)) or len(result) != 3:
            raise reject(NotASharding("a result", "a (shape, dtype, sharding) triple", result))
        result_shape = tuple(check_dims(result[0], what="a result's shape"))
        check_part(result[1], str, "a result's dtype", "a dtype name")
        usable |= (math.prod(shard_shape(result[2], result_shape)) == elements
                   and _dtype_bytes(result[1]) == width)
    return usable and bool(addressable_device_ids(sharding, process_index))


def _dtype_bytes(dtype: str) -> int:
    """The bytes of one element of a dtype named like ``float32`` (``bool``: one)."""
    digits = "".join(c for c in dtype if c.isdigit())
    return int(digits) // 8 if digits else 1


@dataclasses.dataclass(frozen=True)
class ArrayDeleted(Failure, rule="PROC-18", error=RuntimeError):
    template = ("{operation} reads an array of shape {shape} that was donated to a jit call "
                "and has been deleted")
    hint = "Use the call's result instead, or do not donate an array still needed."
    operation: str
    shape: tuple


# What a process may do with an array after donating it: these read its buffers,
READS = ("np.asarray", "addressable_shards", "jit", "device_put")
# this never does, and printing does where the process prints the value.
NO_READ = ("device_put to its own sharding",)
OPERATIONS = READS + NO_READ + ("str",)


@rule("PROC-18", mirrors="jax.Array's deletion checks (ArrayImpl._check_if_deleted; "
                         "ArrayImpl.__str__)")
def check_not_deleted(deleted: bool, sharding: Any, shape: Any, operation: str,
                      process_index: int) -> None:
    """An array deleted by donation (PROC-17) refuses, where deleted, every read: np.asarray, its shards, a jit call, device_put elsewhere, and printing where the process would print values (it fully addresses the array, or the array is fully replicated).

    Printing anywhere else shows only the shape and dtype, and device_put to the array's own
    sharding gives it back: neither reads it.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), devices_per_process=2)
    >>> check_not_deleted(True, NamedSharding(mesh, P("x")), (4,), "str", 0)
    >>> check_not_deleted(True, NamedSharding(mesh, P()), (4,), "str", 0)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [PROC-18]: str reads an array of shape (4,) that was donated to a jit call and has been deleted. Use the call's result instead, or do not donate an array still needed.
    """
    _flag(deleted, "whether the array was deleted")
    shape = tuple(check_dims(shape, what="a shape"))
    process_index = check_process_index(process_index)
    if operation not in OPERATIONS:
        raise reject(NotASharding("an operation on an array", f"one of {OPERATIONS}",
                                  operation))
    reads = operation in READS or (operation == "str" and _prints_value(sharding,
                                                                        process_index))
    require(not deleted or not reads, lambda: ArrayDeleted(operation, shape))


def _prints_value(sharding: Any, process_index: int) -> bool:
    """Whether str of an array shows its values in this process (else its shape only)."""
    return is_fully_addressable(sharding, process_index) or (
        is_fully_replicated(sharding) and bool(addressable_device_ids(sharding, process_index)))
