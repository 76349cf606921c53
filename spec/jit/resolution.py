"""Resolving each argument's sharding at lowering: the RES and KEEP rules.

For each flat input lowering takes the in_sharding jit was given, else the argument's own
(RES-1), checking a given one against the argument (RES-2..4); under ``device=``/``backend=``
the arguments are moved to the device when handed over, where RES-5 applies. The program
keeps the inputs the function uses (KEEP-1). Each rule's failure is written right above it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .assignment import devices_text
from .call import Arg
from ..placement.equivalence import hlo_equal
from ..placement.blocks import is_fully_replicated, num_devices, to_hlo
from ..core.rules import Failure, current_edition, reject, require, rule, varies
from ..core.shardings import UNSPECIFIED, NamedSharding, SingleDeviceSharding
from ..core.values import Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = ["Input", "sharding_from_argument", "check_host_array", "check_memory_kinds",
           "check_committed", "check_reused_replica", "resolve_input", "kept_inputs",
           "compared_first"]


@dataclasses.dataclass(frozen=True)
class Input:
    """One flat dynamic input as lowering sees it."""

    path: str
    arg: Arg
    jit_sharding: Any          # from in_shardings (UNSPECIFIED when left to jit)


def _arg_sharding(arg: Arg) -> tuple[Any, bool]:
    if arg.sharding is None:
        return UNSPECIFIED, False
    return arg.sharding, arg.is_committed


@dataclasses.dataclass(frozen=True)
class UncommittedOnManyDevices(Failure, rule="RES-1", error=NotImplementedError):
    template = ("the argument is an uncommitted array spread over {count} devices "
                "({sharding}); jit cannot decide where it belongs")
    hint = "Commit it with jax.device_put(x, sharding), or give an in_sharding."
    sharding: Any
    count: int


@rule("RES-1", mirrors="jax._src.pjit.finalize_arg_sharding")
def sharding_from_argument(arg: Arg) -> Any:
    """With no in_sharding, a committed argument brings its own sharding, an uncommitted one on one device leaves the choice to jit, and an uncommitted one on several devices is refused.

    >>> sharding_from_argument(Arg.uncommitted((4,)))
    UNSPECIFIED
    >>> sharding_from_argument(Arg.committed((4,), SingleDeviceSharding(3)))
    SingleDeviceSharding(Device(3))
    """
    held, committed = _arg_sharding(arg)
    if held is UNSPECIFIED or committed:
        return held
    count = num_devices(held)
    require(count == 1, lambda: UncommittedOnManyDevices(held, count))
    return UNSPECIFIED


@dataclasses.dataclass(frozen=True)
class HostArrayNotReplicated(Failure, rule="RES-2"):
    template = ("a numpy argument of shape {shape} meets the in_sharding "
                "{sharding}, which is not fully replicated, in a program of "
                "{processes} processes; each process holds only its own numpy data")
    hint = ("Build a global array first (jax.make_array_from_process_local_data), "
            "or give a replicated in_sharding.")
    shape: tuple
    sharding: Any
    processes: int


@rule("RES-2", mirrors="jax._src.pjit._resolve_in_shardings (numpy inputs, process_count > 1)")
def check_host_array(arg: Arg, wanted: Any, processes: int) -> None:
    """In a program of several processes a numpy argument may only meet a fully replicated in_sharding.

    >>> check_host_array(Arg.numpy((8,)), NamedSharding(Mesh.iota((2,), ("x",)), P("x")), 2)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [RES-2]: a numpy argument of shape (8,) meets the in_sharding NamedSharding(Mesh({'x': 2}), P('x')), which is not fully replicated, in a program of 2 processes; each process holds only its own numpy data. Build a global array first (jax.make_array_from_process_local_data), or give a replicated in_sharding.
    """
    if arg.kind == "numpy" and processes > 1:
        require(is_fully_replicated(wanted), lambda: HostArrayNotReplicated(
            arg.shape, wanted, processes))


@dataclasses.dataclass(frozen=True)
class MemoryKindMismatch(Failure, rule="RES-3"):
    template = ("the in_sharding puts the argument in memory kind {wanted!r}, but "
                "the argument lives in {held!r}; jit does not move between "
                "memory kinds")
    hint = "Move it first with jax.device_put(x, s.with_memory_kind({wanted!r}))."
    wanted: Any
    held: Any


@varies("0.4.13", "JAX 0.4.13 shardings have no memory kinds: CALL-1 refuses a call "
        "described with one.",
        absent=True)
@rule("RES-3", mirrors="jax._src.pjit._resolve_in_shardings (memory kinds)")
def check_memory_kinds(arg: Arg, wanted: Any) -> None:
    """An argument that has a concrete sharding, committed or not, must already be in the memory kind its in_sharding names.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> check_memory_kinds(Arg.uncommitted((4,)),
    ...                    NamedSharding(mesh, P(), memory_kind="pinned_host"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [RES-3]: the in_sharding puts the argument in memory kind 'pinned_host', but the argument lives in 'device'; jit does not move between memory kinds. Move it first with jax.device_put(x, s.with_memory_kind('pinned_host')).
    """
    held, _ = _arg_sharding(arg)
    if held is UNSPECIFIED or not held.is_concrete:
        return
    require(wanted.memory_kind == held.memory_kind, lambda: MemoryKindMismatch(
        wanted.memory_kind, held.memory_kind))


@dataclasses.dataclass(frozen=True)
class CommittedMismatch(Failure, rule="RES-4"):
    template = ("the argument is committed to {held} (HLO {held_hlo}), but the "
                "in_sharding is {wanted} (HLO {wanted_hlo}); jit does not reshard "
                "committed arguments")
    hint = ("Reshard it first with jax.device_put(x, in_sharding), or leave its "
            "in_sharding unspecified.")
    held: Any
    held_hlo: str
    wanted: Any
    wanted_hlo: str


@rule("RES-4", mirrors="jax._src.pjit._resolve_in_shardings (committed arguments)")
def check_committed(arg: Arg, wanted: Any) -> None:
    """A committed argument must lower to the same HLO sharding as its in_sharding; devices are not compared, so jit moves a committed argument whose blocks match onto the in_sharding's devices.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> check_committed(Arg.committed((4,), SingleDeviceSharding(5)), NamedSharding(mesh, P()))
    >>> check_committed(Arg.committed((4,), NamedSharding(mesh, P())), NamedSharding(mesh, P("x")))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [RES-4]: the argument is committed to NamedSharding(Mesh({'x': 2}), P()) (HLO {replicated}), but the in_sharding is NamedSharding(Mesh({'x': 2}), P('x')) (HLO {devices=[2]<=[2]}); jit does not reshard committed arguments. Reshard it first with jax.device_put(x, in_sharding), or leave its in_sharding unspecified.
    """
    held, committed = _arg_sharding(arg)
    if held is UNSPECIFIED or not held.is_concrete or not committed:
        return
    ndim = len(arg.shape)
    held_hlo, wanted_hlo = to_hlo(held, ndim), to_hlo(wanted, ndim)
    require(hlo_equal(held_hlo, wanted_hlo), lambda: CommittedMismatch(
        held, str(held_hlo), wanted, str(wanted_hlo)))


@dataclasses.dataclass(frozen=True)
class ReplicaInOtherMemory(Failure, rule="RES-5"):
    template = ("jit was given device={device}, and the argument is a replicated "
                "array on devices {devices} in memory kind {held!r}; JAX reuses its "
                "copy on device {device} as it is, and the program wants "
                "{wanted!r}")
    hint = ("Move it first: jax.device_put(x, jax.devices()[{device}]), or drop "
            "device= (deprecated).")
    device: int
    devices: str
    held: Any
    wanted: Any


@rule("RES-5", mirrors="jax._src.interpreters.pxla.shard_args (a replicated array's copy "
                      "is reused; xla::PjRtBuffers memory-kind check)")
def check_reused_replica(arg: Arg, target: SingleDeviceSharding) -> None:
    """Under ``device=``/``backend=`` jit moves each kept argument to the device without checking it, but uses a replicated array's copy on the device as it is.

    (C1) Under ``device=``/``backend=`` jit skips the argument checks (RES-1..4) and moves
    each kept argument to the device.
    (C2) An array replicated over several devices, one of them the target, is used as is, so
    it must already be in the target's memory kind.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> pinned = NamedSharding(mesh, P(), memory_kind="pinned_host")
    >>> check_reused_replica(Arg.committed((4,), pinned), SingleDeviceSharding(5))
    >>> check_reused_replica(Arg.committed((4,), pinned), SingleDeviceSharding(0))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [RES-5]: jit was given device=0, and the argument is a replicated array on devices [0, 1] in memory kind 'pinned_host'; JAX reuses its copy on device 0 as it is, and the program wants 'device'. Move it first: jax.device_put(x, jax.devices()[0]), or drop device= (deprecated).
    """
    held = arg.sharding
    if held is None or not held.is_concrete or held.memory_kind == target.memory_kind:
        return
    devices = held.device_list
    device = target.device.id
    if len(devices) > 1 and devices.position_of(device) is not None and \
            is_fully_replicated(held):
        raise reject(ReplicaInOtherMemory(device, devices_text(devices), held.memory_kind,
                                          target.memory_kind))


def resolve_input(item: Input, processes: int, device_or_backend: bool) -> Any:
    """The sharding lowering gets for one input (RES-1..4 in JAX's order)."""
    if device_or_backend:
        return item.jit_sharding
    if item.jit_sharding is UNSPECIFIED:
        return sharding_from_argument(item.arg)
    check_host_array(item.arg, item.jit_sharding, processes)
    check_memory_kinds(item.arg, item.jit_sharding)
    check_committed(item.arg, item.jit_sharding)
    return item.jit_sharding


@varies("0.4.13", "The compiled program keeps every input under keep_unused=True and "
        "otherwise only the inputs the function uses; the in_shardings given and the "
        "committed arguments, kept or dropped, must first all be on the same devices in the "
        "same order.")
@rule("KEEP-1", mirrors="jax._src.interpreters.pxla._dce_jaxpr")
def kept_inputs(uses: Sequence[bool], keep_unused: bool) -> tuple[int, ...]:
    """The compiled program keeps every input under ``keep_unused=True`` and otherwise only the inputs the function uses; dropped inputs take no part in the device assignment.

    >>> kept_inputs((True, False, True), keep_unused=False)
    (0, 2)
    >>> kept_inputs((True, False, True), keep_unused=True)
    (0, 1, 2)
    """
    return tuple(i for i, used in enumerate(uses) if used or keep_unused)



def compared_first(inputs: Sequence[Input], outs: Sequence[tuple[str, Any]] = (),
                   device_or_backend: bool = False) -> tuple[tuple[Any, str, str], ...]:
    """The shardings that must first share one device assignment, kept or not, each with
    where it comes from and its path, as KEEP-1 says in the edition held: none (JAX 0.10.2
    drops unused inputs before any device is compared); every in_sharding given, every
    committed argument's own sharding and every out_sharding given (``outs``: path and
    sharding per result; JAX 0.4.13 compares them before it drops the unused inputs, unless
    ``device=``/``backend=`` moves every argument to one device).

    >>> from shardlaw.spec.core.editions import holding
    >>> lone = Input("args[1]", Arg.committed((4,), SingleDeviceSharding(3)), UNSPECIFIED)
    >>> compared_first([lone])
    ()
    >>> with holding("0.4.13"):
    ...     compared_first([lone])
    ((SingleDeviceSharding(Device(3)), 'argument args[1] (committed)', 'args[1]'),)
    """
    if current_edition() != "0.4.13" or device_or_backend:
        return ()
    first = []
    for item in inputs:
        if item.jit_sharding is not UNSPECIFIED:
            first.append((item.jit_sharding, f"in_shardings for {item.path}", item.path))
        if item.arg.kind == "committed":
            first.append((item.arg.sharding, f"argument {item.path} (committed)", item.path))
    first += [(s, f"out_shardings for {path}", path) for path, s in outs
              if s is not UNSPECIFIED]
    return tuple(first)
