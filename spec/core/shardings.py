"""Shardings, and the rules that make a NamedSharding valid against its mesh.

Three kinds of sharding place an array on devices:

* :class:`NamedSharding` — a mesh and a PartitionSpec naming, for each dimension, the mesh
  axes it is split over;
* :class:`SingleDeviceSharding` — one device holds the whole array;
* :class:`GSPMDSharding` — an HLO sharding over an explicit device list.

Two markers stand where a user leaves a sharding out: :data:`UNSPECIFIED` (jit decides)
and :data:`AUTO` (the compiler decides and reports back).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Union

from .dims import is_int
from .hlo import HloSharding, parse_hlo
from .rules import Failure, reject, require, rule, varies
from .values import (
    AbstractMesh, AxisType, Device, DeviceList, Mesh, PartitionSpec, UNCONSTRAINED,
    cached_hash, check_memory_kind, state_without_hash,
)

__all__ = [
    "NamedSharding", "SingleDeviceSharding", "GSPMDSharding", "Sharding", "UNSPECIFIED",
    "AUTO", "check_named_sharding",
]


# --------------------------------------------------------------------------- failures

@dataclasses.dataclass(frozen=True)
class UnknownAxis(Failure, rule="NS-1"):
    template = "{spec} names mesh axis {axis!r}, but the mesh has only {names}"
    spec: PartitionSpec
    axis: Any
    names: tuple


@dataclasses.dataclass(frozen=True)
class AxisUsedTwice(Failure, rule="NS-2", error=Exception, jax_error="DuplicateSpecError"):
    template = ("{spec} splits dimensions over mesh axis {axes} more than once; "
                "each mesh axis may split at most one dimension")
    spec: PartitionSpec
    axes: tuple


@dataclasses.dataclass(frozen=True)
class UnconstrainedWithoutAuto(Failure, rule="NS-3"):
    template = ("{spec} leaves a dimension UNCONSTRAINED, which needs at least one "
                "Auto mesh axis; the mesh's axis types are {types}")
    spec: PartitionSpec
    types: tuple


@dataclasses.dataclass(frozen=True)
class ReductionAxisInvalid(Failure, rule="NS-4"):
    template = ("{spec} lists {axis!r} as {kind}, but {problem}")
    spec: PartitionSpec
    axis: Any
    kind: str
    problem: str


@dataclasses.dataclass(frozen=True)
class NotASharding(Failure, rule="VAL-8", error=TypeError):
    template = "{what} must be {expected}, got {value!r}"
    what: str
    expected: str
    value: Any

    @property
    def hint(self) -> str:  # type: ignore[override]
        return "Wrap the entries in P(...)." if self.expected == "a PartitionSpec" else ""


# --------------------------------------------------------------------------- validity

@rule("VAL-8", mirrors="(input checking; JAX raises AttributeError deep inside for some of these)")
def check_part(value: Any, types: type | tuple[type, ...], what: str, expected: str) -> Any:
    """Each part of a sharding has the type its constructor takes: a mesh, a PartitionSpec, a device, an HLO sharding, a memory kind string.

    >>> NamedSharding(Mesh.iota((2,), ("x",)), ("x",))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [VAL-8]: a NamedSharding's spec must be a PartitionSpec, got ('x',). Wrap the entries in P(...).
    """
    if not isinstance(value, types) or isinstance(value, bool):
        raise reject(NotASharding(what, expected, value))
    return value


@rule("NS-1", mirrors="jax._src.named_sharding._check_mesh_resource_axis")
def check_axes_known(mesh: Mesh | AbstractMesh, spec: PartitionSpec) -> None:
    """Every mesh axis that a PartitionSpec entry names exists in the mesh.

    >>> check_axes_known(Mesh.iota((2, 4), ("x", "y")), PartitionSpec("z"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [NS-1]: P('z') names mesh axis 'z', but the mesh has only ('x', 'y')
    """
    for axis in spec.axes():
        require(axis in mesh.axis_names, lambda axis=axis: UnknownAxis(spec, axis, mesh.axis_names))


@rule("NS-2", mirrors="jax._src.named_sharding._check_unique_resources")
def check_axes_unique(spec: PartitionSpec) -> None:
    """A mesh axis splits at most one dimension of a PartitionSpec, and only once.

    >>> check_axes_unique(PartitionSpec("x", ("y", "x")))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [NS-2]: P('x', ('y', 'x')) splits dimensions over mesh axis ('x',) more than once; each mesh axis may split at most one dimension
    """
    seen: list[str] = []
    twice: list[str] = []
    for axis in spec.axes():
        if axis in seen and axis not in twice:
            twice.append(axis)
        seen.append(axis)
    require(not twice, lambda: AxisUsedTwice(spec, tuple(twice)))


@rule("NS-3", mirrors="jax._src.named_sharding._check_mesh_resource_axis")
def check_unconstrained(mesh: Mesh | AbstractMesh, spec: PartitionSpec) -> None:
    """UNCONSTRAINED may appear in a PartitionSpec only over a mesh with at least one Auto axis.

    >>> check_unconstrained(AbstractMesh((2,), ("x",), (AxisType.Explicit,)),
    ...                     PartitionSpec(UNCONSTRAINED))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [NS-3]: P(UNCONSTRAINED) leaves a dimension UNCONSTRAINED, which needs at least one Auto mesh axis; the mesh's axis types are ('Explicit',)
    """
    if any(p is UNCONSTRAINED for p in spec.partitions):
        require(AxisType.Auto in mesh.axis_types, lambda: UnconstrainedWithoutAuto(
            spec, tuple(t.value for t in mesh.axis_types)))


@varies("0.4.13", "JAX 0.4.13 has no reduced or unreduced axes: CALL-1 refuses a call "
        "described with them.",
        absent=True)
@rule("NS-4", mirrors="jax._src.named_sharding._check_mesh_unreduced")
def check_reductions(mesh: Mesh | AbstractMesh, spec: PartitionSpec) -> None:
    """Unreduced and reduced axes are Explicit axes of the mesh.

    >>> check_reductions(Mesh.iota((2,), ("x",)), PartitionSpec(unreduced={"x"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [NS-4]: P(unreduced={'x'}) lists 'x' as unreduced, but it is an Auto axis; only Explicit axes can be unreduced or reduced
    """
    for kind, axes in (("unreduced", spec.unreduced), ("reduced", spec.reduced)):
        for axis in sorted(axes, key=str):
            require(axis in mesh.axis_names, lambda axis=axis, kind=kind: ReductionAxisInvalid(
                spec, axis, kind, f"the mesh has only {mesh.axis_names}"))
            t = mesh.axis_type(axis)
            require(t is AxisType.Explicit, lambda axis=axis, kind=kind, t=t: ReductionAxisInvalid(
                spec, axis, kind, f"it is an {t.value} axis; only Explicit axes can be "
                                  "unreduced or reduced"))


def check_named_sharding(mesh: Mesh | AbstractMesh, spec: PartitionSpec) -> None:
    """All the rules a NamedSharding's spec obeys against its mesh, in JAX's order."""
    check_axes_unique(spec)
    check_axes_known(mesh, spec)
    check_unconstrained(mesh, spec)
    check_reductions(mesh, spec)


# --------------------------------------------------------------------------- shardings

class Sharding:
    """Base of the sharding values."""

    __slots__ = ()
    memory_kind: str | None

    @property
    def is_concrete(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True, init=False)
class NamedSharding(Sharding):
    """A mesh and a PartitionSpec (jax.sharding.NamedSharding)."""

    mesh: Mesh | AbstractMesh
    spec: PartitionSpec
    memory_kind: str | None

    def __init__(self, mesh: Mesh | AbstractMesh, spec: PartitionSpec | Any = PartitionSpec(),
                 *, memory_kind: str | None = None) -> None:
        check_part(mesh, (Mesh, AbstractMesh), "a NamedSharding's mesh", "a Mesh or AbstractMesh")
        check_part(spec, PartitionSpec, "a NamedSharding's spec", "a PartitionSpec")
        check_part(memory_kind, (str, type(None)), "a memory kind", "a string or None")
        check_named_sharding(mesh, spec)
        concrete = isinstance(mesh, Mesh)
        memory_kind = check_memory_kind(memory_kind, mesh.platform if concrete else "cpu",
                                        concrete=concrete)
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "memory_kind", memory_kind)

    @property
    def is_concrete(self) -> bool:
        return isinstance(self.mesh, Mesh)

    @property
    def device_list(self) -> DeviceList | None:
        return self.mesh.devices if isinstance(self.mesh, Mesh) else None

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    def __repr__(self) -> str:
        mem = _memory_repr(self.memory_kind)
        return f"NamedSharding({self.mesh!r}, {self.spec!r}{mem})"


@dataclasses.dataclass(frozen=True, init=False)
class SingleDeviceSharding(Sharding):
    """One device holds the whole array (jax.sharding.SingleDeviceSharding)."""

    device: Device
    memory_kind: str | None

    def __init__(self, device: Device | int, *, memory_kind: str | None = None) -> None:
        if is_int(device):
            device = Device(device)
        check_part(device, Device, "a SingleDeviceSharding's device", "a Device")
        check_part(memory_kind, (str, type(None)), "a memory kind", "a string or None")
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "memory_kind", check_memory_kind(memory_kind, device.platform))

    @property
    def device_list(self) -> DeviceList:
        return DeviceList((self.device,))

    def __repr__(self) -> str:
        mem = _memory_repr(self.memory_kind)
        return f"SingleDeviceSharding({self.device!r}{mem})"


@dataclasses.dataclass(frozen=True, init=False)
class GSPMDSharding(Sharding):
    """An HLO sharding over a device list (jax.sharding.GSPMDSharding).

    The HLO sharding's tile assignment holds positions in ``devices``.
    """

    devices: DeviceList
    hlo: HloSharding
    memory_kind: str | None

    def __init__(self, devices: DeviceList | Any, hlo: HloSharding | str, *,
                 memory_kind: str | None = None) -> None:
        if not isinstance(devices, DeviceList):
            devices = DeviceList.of_ids(devices)
        if isinstance(hlo, str):
            hlo = parse_hlo(hlo)
        check_part(hlo, HloSharding, "a GSPMDSharding's HLO sharding", "an HloSharding")
        check_part(memory_kind, (str, type(None)), "a memory kind", "a string or None")
        object.__setattr__(self, "devices", devices)
        object.__setattr__(self, "hlo", hlo)
        object.__setattr__(self, "memory_kind", check_memory_kind(memory_kind, devices.platform))

    @property
    def device_list(self) -> DeviceList:
        return self.devices

    def __repr__(self) -> str:
        mem = _memory_repr(self.memory_kind)
        return f"GSPMDSharding({self.hlo}, devices={self.devices!r}{mem})"


def _memory_repr(kind: str | None) -> str:
    # The default memory kind goes unsaid, as a reader would expect.
    return "" if kind is None or kind == "device" else f", memory_kind={kind!r}"


class Marker:
    """A named stand-in value (``UNSPECIFIED``, ``AUTO``, ``Layout.AUTO``): it shows and pickles
    by its name, and its docstring says what it stands for."""

    def __init__(self, name: str, doc: str) -> None:
        self._name = name
        self.__doc__ = doc

    def __repr__(self) -> str:
        return self._name

    def __reduce__(self) -> str:
        return self._name


UNSPECIFIED = Marker("UNSPECIFIED", "The user left the sharding out; jit decides.")
AUTO = Marker("AUTO", "The compiler chooses the sharding and reports it back.")

AnySharding = Union[NamedSharding, SingleDeviceSharding, GSPMDSharding]
