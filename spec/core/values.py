"""Value types: devices, device lists, meshes, partition specs.

Every value is frozen and validated when it is built: a value that exists is a valid value.
Validation failures are rule failures (family ``VAL``) like any other, so bad input is
reported with a rule ID and the offending value, never with an internal traceback.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import operator
from typing import Any, Iterable, Iterator, Union

# The integer rules every value starts with (VAL-1, VAL-2); check_dims, check_perm and their
# failures are also read from here by the rule families.
from .dims import (  # noqa: F401
    LIMIT, NegativeSize, NotAnInteger, TooLarge, check_count, check_dims, check_perm, is_int,
)
from .iota import Iota
from .rules import Failure, Rejection, reject, require, rule

__all__ = [
    "Device", "DeviceList", "AxisType", "Mesh", "AbstractMesh", "PartitionSpec", "P",
    "UNCONSTRAINED", "MEMORY_KINDS", "default_memory_kind",
]


# --------------------------------------------------------------------------- failures

@dataclasses.dataclass(frozen=True)
class BadAxisName(Failure, rule="VAL-3", error=TypeError):
    template = "mesh axis names must be non-empty strings, got {name!r} in {names}"
    name: Any
    names: tuple


@dataclasses.dataclass(frozen=True)
class DuplicateAxisName(Failure, rule="VAL-3"):
    template = "mesh axis names must be distinct, {name!r} appears twice in {names}"
    name: str
    names: tuple


@dataclasses.dataclass(frozen=True)
class AxisCountMismatch(Failure, rule="VAL-4"):
    template = "a mesh needs one {what} per axis: {count} given for the {axes} axes {names}"
    what: str
    count: int
    axes: int
    names: tuple


@dataclasses.dataclass(frozen=True)
class DeviceCountMismatch(Failure, rule="VAL-4"):
    template = "a mesh of shape {shape} holds {needed} devices, but its device list has {given}"
    hint = "Give exactly one device per mesh position."
    shape: tuple
    needed: int
    given: int


@dataclasses.dataclass(frozen=True)
class DuplicateDevice(Failure, rule="VAL-5"):
    template = "a device list may hold each device once, device {device} appears twice"
    device: int


@dataclasses.dataclass(frozen=True)
class BadDevice(Failure, rule="VAL-5", error=TypeError):
    template = "{what} must be {expected}, got {value!r}"
    what: str
    expected: str
    value: Any


@dataclasses.dataclass(frozen=True)
class PositionOutside(Failure, rule="VAL-5", error=IndexError):
    template = "position {position} is outside a device list of {length} devices"
    position: int
    length: int


@dataclasses.dataclass(frozen=True)
class PositionNotAnIndex(Failure, rule="VAL-5", error=TypeError):
    template = ("a device list is indexed by an integer position or a slice, got {position!r}; "
                "the list holds {length} devices")
    position: Any
    length: int


@dataclasses.dataclass(frozen=True)
class NoSuchMeshAxis(Failure, rule="VAL-3", error=KeyError):
    template = "the mesh has no axis {name!r}; its axes are {names}"
    name: Any
    names: tuple


@dataclasses.dataclass(frozen=True)
class BadReductionAxes(Failure, rule="VAL-6", error=TypeError):
    template = "a PartitionSpec's {kind} axes are a set of axis names, got {value!r}"
    kind: str
    value: Any


@dataclasses.dataclass(frozen=True)
class BadPartitionEntry(Failure, rule="VAL-6", error=TypeError):
    template = ("a PartitionSpec entry is None, an axis name, a tuple of axis "
                "names or UNCONSTRAINED; entry {index} is {entry!r}")
    index: int
    entry: Any


@dataclasses.dataclass(frozen=True)
class OverlappingReduction(Failure, rule="VAL-6"):
    template = ("axis {axis!r} is both {first} and {second} in a PartitionSpec; "
                "an axis plays one part at a time")
    axis: str
    first: str
    second: str


@dataclasses.dataclass(frozen=True)
class UnknownMemoryKind(Failure, rule="VAL-7"):
    template = "memory kind {kind!r} does not exist on platform {platform!r}; it has {known}"
    kind: str
    platform: str
    known: tuple


# --------------------------------------------------------------------------- devices

# Memory kinds by platform, and the default (what ``device.default_memory().kind`` says).
MEMORY_KINDS: dict[str, tuple[str, ...]] = {
    "cpu": ("device", "pinned_host", "unpinned_host"),
    "gpu": ("device", "pinned_host", "unpinned_host"),
    "cuda": ("device", "pinned_host", "unpinned_host"),
    "rocm": ("device", "pinned_host", "unpinned_host"),
    "tpu": ("device", "pinned_host", "unpinned_host"),
}


def default_memory_kind(platform: str) -> str:
    return "device"


@rule("VAL-7", mirrors="the C++ memory-kind check of NamedSharding / SingleDeviceSharding / "
                       "GSPMDSharding construction")
def check_memory_kind(kind: str | None, platform: str, *, concrete: bool = True) -> str | None:
    """A memory kind, when given, is one the platform's devices have; a concrete sharding left without one takes the platform's default (an abstract one keeps None).

    >>> check_memory_kind(None, "cpu")
    'device'
    >>> check_memory_kind("bogus", "cpu")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-7]: memory kind 'bogus' does not exist on platform 'cpu'; it has ('device', 'pinned_host', 'unpinned_host')
    """
    if kind is None:
        return default_memory_kind(platform) if concrete else None
    known = MEMORY_KINDS.get(platform, ("device",))
    require(kind in known, lambda: UnknownMemoryKind(kind, platform, known))
    return kind


@dataclasses.dataclass(frozen=True, order=True)
class Device:
    """One device: its global id, its platform and the process that owns it."""

    id: int
    platform: str = "cpu"
    process_index: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", _device_number(self.id, "a device id"))
        object.__setattr__(self, "platform", _platform(self.platform))
        object.__setattr__(self, "process_index",
                           _device_number(self.process_index, "a process index"))

    def __repr__(self) -> str:
        extra = "" if self.process_index == 0 else f", process={self.process_index}"
        return f"Device({self.id}{'' if self.platform == 'cpu' else ', ' + self.platform}{extra})"


def _device_number(value: Any, what: str, *, least: int = 0) -> int:
    """A device id, process index or position: an int from ``least`` to 2**63 - 1 (VAL-5)."""
    expected = "a non-negative integer" if least == 0 else "a positive integer"
    if not is_int(value):
        raise reject(BadDevice(what, expected, value))
    try:
        number = operator.index(value)
    except Exception:  # a type that claims to be an integer but is not one
        raise reject(BadDevice(what, expected, value)) from None
    if not isinstance(number, int) or not least <= number <= LIMIT:
        raise reject(BadDevice(what, f"{expected} below 2**63", value))
    return number


def _platform(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise reject(BadDevice("a device platform", "a non-empty string", value))
    return value


@rule("VAL-5", mirrors="(input checking; jax.sharding.Mesh accepts a device twice and fails later)")
def check_device_list(devices: Any) -> tuple[Device, ...]:
    """A device list is a sequence of devices, each at most once, read by position as a Python sequence is.

    (C1) No device appears twice (a device is its id).
    (C2) A position is an integer from ``-N`` to ``N - 1`` in a list of N devices (a
    negative one counts from the end, as in JAX's ``DeviceList``), or a slice; another index
    is refused with a TypeError, and an integer outside with an IndexError, each naming the
    index and N.

    >>> check_device_list([Device(0), Device(1)])
    (Device(0), Device(1))
    >>> check_device_list([Device(0), Device(0)])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-5]: a device list may hold each device once, device 0 appears twice
    >>> DeviceList.of_ids([3, 1, 2])[-1]
    Device(2)
    >>> DeviceList.of_ids([3, 1, 2])[3]
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionIndexError: [VAL-5]: position 3 is outside a device list of 3 devices
    """
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Iterable):
        raise reject(BadDevice("a device list", "a sequence of Device", devices))
    try:
        devices = tuple(devices)
    except Exception:  # an iterable that fails while it is read
        raise reject(BadDevice("a device list", "a sequence of Device", devices)) from None
    seen: set[int] = set()
    for d in devices:
        if not isinstance(d, Device):
            raise reject(BadDevice("each entry of a device list", "a Device", d))
        require(d.id not in seen, lambda d=d: DuplicateDevice(d.id))
        seen.add(d.id)
    return devices


def _position_in(position: Any, length: int) -> int:
    """VAL-5 (C2): an index of a list of ``length`` devices, as a position from 0."""
    # What Python and JAX's DeviceList index with: an int, a bool, a numpy integer.
    if not (isinstance(position, bool) or is_int(position)):
        raise reject(PositionNotAnIndex(position, length))
    try:
        number = operator.index(position)
    except Exception:  # a type that claims to be an integer but is not one
        raise reject(PositionNotAnIndex(position, length)) from None
    if not isinstance(number, int):
        raise reject(PositionNotAnIndex(position, length))
    where = number + length if number < 0 else number
    require(0 <= where < length, lambda: PositionOutside(number, length))
    return where


class DeviceList:
    """An ordered list of distinct devices, possibly symbolic.

    Either an explicit tuple of :class:`Device`, or an :class:`Iota` of device ids on one
    platform whose process index is ``id // devices_per_process``. Equality is by content:
    an iota list equals the explicit list that enumerates it.
    """

    __slots__ = ("_iota", "_devices", "platform", "devices_per_process", "_hash", "_positions")

    def __init__(self, devices: Iterable[Device] | Iota, *, platform: str = "cpu",
                 devices_per_process: int | None = None) -> None:
        self._hash: int | None = None
        self._positions: dict[int, int] | None = None
        platform = _platform(platform)
        if devices_per_process is not None:
            devices_per_process = _device_number(devices_per_process, "devices_per_process",
                                                 least=1)
        if isinstance(devices, DeviceList):
            # A list of a list: the same list (a symbolic one stays symbolic, not enumerated).
            if devices.iota is not None:
                devices_per_process = devices_per_process or devices.devices_per_process
                platform = devices.platform
                devices = devices.iota
            else:
                devices = devices._devices  # type: ignore[assignment]
        if isinstance(devices, Iota):
            if devices_per_process is not None and devices_per_process >= len(devices):
                devices_per_process = None  # every device belongs to process 0
            self._iota: Iota | None = devices
            self._devices: tuple[Device, ...] | None = None
            self.platform = platform
            self.devices_per_process = devices_per_process
            return
        devices = check_device_list(devices)
        self._iota = None
        self._devices = devices
        self.platform = devices[0].platform if devices else platform
        self.devices_per_process = None

    @classmethod
    def of_ids(cls, ids: Iterable[int] | Iota, *, platform: str = "cpu",
               devices_per_process: int | None = None) -> "DeviceList":
        """A device list from ids alone (symbolic when ``ids`` is an :class:`Iota`)."""
        if isinstance(ids, Iota):
            return cls(ids, platform=platform, devices_per_process=devices_per_process)
        platform = _platform(platform)
        if devices_per_process is not None:
            devices_per_process = _device_number(devices_per_process, "devices_per_process",
                                                 least=1)
        ids = check_dims(ids, what="device ids")
        iota = Iota.recognize(ids)
        if iota is not None:
            return cls(iota, platform=platform, devices_per_process=devices_per_process)
        per = devices_per_process
        return cls(tuple(Device(i, platform, 0 if per is None else i // per) for i in ids))

    @property
    def iota(self) -> Iota | None:
        """The symbolic order of the ids, when the list is symbolic."""
        return self._iota

    def __len__(self) -> int:
        return len(self._iota) if self._iota is not None else len(self._devices)  # type: ignore[arg-type]

    def id_at(self, position: int) -> int:
        """The id of the device at ``position`` (VAL-5 refuses a position outside the list)."""
        position = _device_number(position, "a position in a device list")
        require(position < len(self), lambda: PositionOutside(position, len(self)))
        if self._iota is not None:
            return self._iota[position]
        return self._devices[position].id  # type: ignore[index]

    def __getitem__(self, position: int | slice) -> Any:
        """The device at ``position``, or a tuple of them for a slice (VAL-5 C2)."""
        if isinstance(position, slice):
            return tuple(self[p] for p in range(len(self))[position])
        position = _position_in(position, len(self))
        if self._iota is not None:
            i = self._iota[position]
            per = self.devices_per_process
            return Device(i, self.platform, 0 if per is None else i // per)
        return self._devices[position]  # type: ignore[index]

    def position_of(self, device_id: int) -> int | None:
        """Where device ``device_id`` stands in the list (None if absent)."""
        device_id = _device_number(device_id, "a device id")
        if self._iota is not None:
            return self._iota.position_of(device_id) if 0 <= device_id < len(self._iota) else None
        if self._positions is None:
            self._positions = {d.id: p for p, d in enumerate(self._devices)}  # type: ignore[union-attr]
        return self._positions.get(device_id)

    def ids(self) -> Iterator[int]:
        if self._iota is not None:
            return iter(self._iota)
        return (d.id for d in self._devices)  # type: ignore[union-attr]

    def __iter__(self) -> Iterator[Device]:
        if self._iota is None:
            return iter(self._devices)  # type: ignore[arg-type]
        platform, per = self.platform, self.devices_per_process
        return (Device(i, platform, 0 if per is None else i // per) for i in self._iota)

    def id_tuple(self) -> tuple[int, ...]:
        return tuple(self.ids())

    def process_of(self, position: int) -> int:
        return self[position].process_index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceList):
            return NotImplemented
        if self is other:
            return True
        if len(self) != len(other) or self.platform != other.platform:
            return False
        if self._iota is not None and other._iota is not None:
            return (self._iota == other._iota
                    and self.devices_per_process == other.devices_per_process)
        return tuple(self) == tuple(other)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((len(self), self.platform, self.id_at(0) if len(self) else -1,
                               self.id_at(len(self) - 1) if len(self) else -1))
        return self._hash

    def __getstate__(self) -> dict[str, Any]:
        # The hash and the positions are worked out again where the list is unpickled:
        # a platform's name hashes differently in another process.
        return {name: getattr(self, name) for name in self.__slots__
                if name not in ("_hash", "_positions")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self._hash = None
        self._positions = None

    def __repr__(self) -> str:
        if self._iota is not None:
            return f"DeviceList({self._iota!r})"
        return f"DeviceList({[d.id for d in self._devices]})"  # type: ignore[union-attr]


# --------------------------------------------------------------------------- hashing

# Meshes, specs and shardings are immutable and hashed often (a program's equations are
# remembered by their form, which holds them): each is hashed once, by its compared fields.
# The hash is left out of what is pickled: a string hashes differently in another process.

def cached_hash(value: Any) -> int:
    """The hash of a frozen dataclass by its compared fields, computed once."""
    cached = value.__dict__.get("_hash")
    if cached is None:
        cached = hash(tuple(getattr(value, name) for name in compared_fields(type(value))))
        value.__dict__["_hash"] = cached
    return cached


@functools.cache
def compared_fields(kind: type) -> tuple[str, ...]:
    """The names of a dataclass's compared fields, read once per class (a value is hashed
    by them)."""
    return tuple(f.name for f in dataclasses.fields(kind) if f.compare)


def state_without_hash(value: Any) -> dict[str, Any]:
    """What pickling keeps of a value whose hash is cached: all but the hash."""
    state = dict(value.__dict__)
    state.pop("_hash", None)
    return state


# --------------------------------------------------------------------------- meshes

class AxisType(enum.Enum):
    """How a mesh axis is treated by sharding-in-types (jax.sharding.AxisType)."""

    Auto = "Auto"
    Explicit = "Explicit"
    Manual = "Manual"

    def __repr__(self) -> str:
        return f"AxisType.{self.value}"


@rule("VAL-3", mirrors="(input checking; jax.sharding.Mesh accepts duplicate names and fails later)")
def check_axis_names(axis_names: Any) -> tuple[str, ...]:
    """Mesh axis names are distinct non-empty strings.

    >>> check_axis_names(("x", "y"))
    ('x', 'y')
    >>> check_axis_names(("x", "x"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-3]: mesh axis names must be distinct, 'x' appears twice in ('x', 'x')
    """
    if isinstance(axis_names, str):
        axis_names = (axis_names,)
    if not isinstance(axis_names, Iterable) or isinstance(axis_names, (bytes, bytearray)):
        raise reject(BadAxisName(axis_names, ()))
    read: list[str] = []
    seen: set[str] = set()
    iterator = iter(axis_names)
    while True:
        try:
            n = next(iterator)
        except StopIteration:
            return tuple(read)
        except Exception:  # an iterable that fails while it is read
            raise reject(BadAxisName(axis_names, ())) from None
        # Each name is checked as it is read: a device list of a million entries given as
        # the names is refused at its first entry, not after it was all built.
        require(isinstance(n, str) and n != "", lambda n=n: BadAxisName(n, (*read, n)))
        require(n not in seen, lambda n=n: DuplicateAxisName(n, (*read, n)))
        read.append(n)
        seen.add(n)


@rule("VAL-4", mirrors="jax.sharding.Mesh / AbstractMesh construction (their safe_zip checks)")
def check_axis_counts(sizes: tuple[int, ...], names: tuple[str, ...], axis_types: Any
                      ) -> tuple[AxisType, ...]:
    """A mesh has one size, one name and one axis type per axis (types default to Auto), and a concrete mesh one device per position.

    >>> check_axis_counts((2, 4), ("x", "y"), None)
    (AxisType.Auto, AxisType.Auto)
    >>> Mesh((2, 4), ("x", "y"), range(7))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-4]: a mesh of shape (2, 4) holds 8 devices, but its device list has 7. Give exactly one device per mesh position.
    """
    require(len(names) == len(sizes),
            lambda: AxisCountMismatch("name", len(names), len(sizes), names))
    if axis_types is None:
        types = (AxisType.Auto,) * len(names)
    else:
        if isinstance(axis_types, AxisType):
            axis_types = (axis_types,) * len(names)
        if isinstance(axis_types, (str, bytes)) or not isinstance(axis_types, Iterable):
            raise reject(BadDevice("a mesh's axis types", "an AxisType or a sequence of them",
                                   axis_types))
        try:
            types = tuple(axis_types)
        except Exception:  # an iterable that fails while it is read
            raise reject(BadDevice("a mesh's axis types", "an AxisType or a sequence of them",
                                   axis_types)) from None
        for t in types:
            if not isinstance(t, AxisType):
                raise reject(BadDevice("each axis type", "an AxisType", t))
        require(len(types) == len(names),
                lambda: AxisCountMismatch("axis type", len(types), len(names), names))
    return types


def _check_axes(axis_sizes: Any, axis_names: Any, axis_types: Any
                ) -> tuple[tuple[int, ...], tuple[str, ...], tuple[AxisType, ...]]:
    sizes = check_dims(axis_sizes, what="mesh axis sizes")
    for size in sizes:
        # A mesh axis holds at least one device.
        require(size >= 1, lambda: NegativeSize("mesh axis sizes", size, sizes))
    check_count(sizes, "mesh axis sizes")
    names = check_axis_names(axis_names)
    return sizes, names, check_axis_counts(sizes, names, axis_types)


@dataclasses.dataclass(frozen=True, init=False)
class AbstractMesh:
    """A mesh without devices: axis sizes, names and types (jax.sharding.AbstractMesh)."""

    axis_sizes: tuple[int, ...]
    axis_names: tuple[str, ...]
    axis_types: tuple[AxisType, ...]

    def __init__(self, axis_sizes: Any, axis_names: Any, axis_types: Any = None) -> None:
        sizes, names, types = _check_axes(axis_sizes, axis_names, axis_types)
        object.__setattr__(self, "axis_sizes", sizes)
        object.__setattr__(self, "axis_names", names)
        object.__setattr__(self, "axis_types", types)

    @property
    def size(self) -> int:
        return math.prod(self.axis_sizes)

    @property
    def shape(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.axis_sizes))

    def axis_size(self, name: str) -> int:
        return self.axis_sizes[self._axis(name)]

    def axis_type(self, name: str) -> AxisType:
        return self.axis_types[self._axis(name)]

    def _axis(self, name: Any) -> int:
        # VAL-3: a mesh axis is asked for by one of the mesh's names
        if not isinstance(name, str) or name not in self.axis_names:
            raise reject(NoSuchMeshAxis(name, self.axis_names))
        return self.axis_names.index(name)

    @functools.cached_property
    def sizes_by_name(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.axis_sizes))

    @functools.cached_property
    def nontrivial_axes(self) -> tuple[str, ...]:
        """The axes of size above 1, in mesh order: the only ones that cut or copy."""
        return tuple(n for n, s in zip(self.axis_names, self.axis_sizes) if s != 1)

    @property
    def empty(self) -> bool:
        return not self.axis_names

    @property
    def abstract(self) -> "AbstractMesh":
        return self

    @property
    def devices(self) -> None:
        return None

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    def __repr__(self) -> str:
        axes = ", ".join(f"{n!r}: {s}" for n, s in zip(self.axis_names, self.axis_sizes))
        types = "" if all(t is AxisType.Auto for t in self.axis_types) else \
            f", types={tuple(t.value for t in self.axis_types)}"
        return f"AbstractMesh({{{axes}}}{types})"


@dataclasses.dataclass(frozen=True, init=False)
class Mesh:
    """A concrete mesh: axis sizes, names and types, and the device at each position.

    ``devices`` lists the devices in row-major order of the mesh positions (what JAX calls
    ``mesh.devices.flat``); it may be symbolic (an iota of device ids).
    """

    axis_sizes: tuple[int, ...]
    axis_names: tuple[str, ...]
    devices: DeviceList
    axis_types: tuple[AxisType, ...]

    def __init__(self, axis_sizes: Any, axis_names: Any, devices: DeviceList | Iterable[int] | Iota,
                 axis_types: Any = None) -> None:
        sizes, names, types = _check_axes(axis_sizes, axis_names, axis_types)
        if not isinstance(devices, DeviceList):
            devices = DeviceList.of_ids(devices)  # type: ignore[arg-type]
        needed = math.prod(sizes)
        # VAL-4 again: one device per mesh position
        require(len(devices) == needed, lambda: DeviceCountMismatch(sizes, needed, len(devices)))
        object.__setattr__(self, "axis_sizes", sizes)
        object.__setattr__(self, "axis_names", names)
        object.__setattr__(self, "devices", devices)
        object.__setattr__(self, "axis_types", types)

    @classmethod
    def iota(cls, axis_sizes: Any, axis_names: Any, axis_types: Any = None, *,
             platform: str = "cpu", devices_per_process: int | None = None) -> "Mesh":
        """A mesh whose devices ``0 .. N-1`` fill the positions in row-major order."""
        sizes, _, _ = _check_axes(axis_sizes, axis_names, axis_types)
        return cls(sizes, axis_names, DeviceList(Iota.range(math.prod(sizes)), platform=platform,
                                                 devices_per_process=devices_per_process),
                   axis_types)

    size = AbstractMesh.size
    shape = AbstractMesh.shape
    axis_size = AbstractMesh.axis_size
    axis_type = AbstractMesh.axis_type
    _axis = AbstractMesh._axis
    empty = AbstractMesh.empty
    sizes_by_name = functools.cached_property(AbstractMesh.sizes_by_name.func)
    nontrivial_axes = functools.cached_property(AbstractMesh.nontrivial_axes.func)

    @functools.cached_property
    def abstract(self) -> AbstractMesh:
        return AbstractMesh(self.axis_sizes, self.axis_names, self.axis_types)

    @property
    def platform(self) -> str:
        return self.devices.platform

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    def __repr__(self) -> str:
        axes = ", ".join(f"{n!r}: {s}" for n, s in zip(self.axis_names, self.axis_sizes))
        types = "" if all(t is AxisType.Auto for t in self.axis_types) else \
            f", types={tuple(t.value for t in self.axis_types)}"
        order = "" if self.devices.iota is not None and self.devices.iota.is_range else \
            f", devices={self.devices!r}"
        return f"Mesh({{{axes}}}{order}{types})"


AnyMesh = Union[Mesh, AbstractMesh]


# --------------------------------------------------------------------------- partition specs

class _Unconstrained:
    """The PartitionSpec entry that leaves a dimension's sharding to the compiler."""

    _instance: "_Unconstrained | None" = None

    def __new__(cls) -> "_Unconstrained":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCONSTRAINED"

    def __reduce__(self) -> str:
        return "UNCONSTRAINED"


UNCONSTRAINED = _Unconstrained()

Entry = Union[None, str, tuple[str, ...], _Unconstrained]


@rule("VAL-6", mirrors="jax.sharding.PartitionSpec construction (canonicalize_partitions, _check)")
def canonical_entry(index: int, entry: Any) -> Entry:
    """A PartitionSpec entry is None, an axis name, a tuple of axis names or UNCONSTRAINED; a one-name tuple is the name, an empty tuple is None, and no axis is both split and (un)reduced.

    >>> P(("x",), (), ["y", "z"])
    P('x', None, ('y', 'z'))
    >>> P("x", unreduced={"x"})
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-6]: axis 'x' is both a partition and unreduced in a PartitionSpec; an axis plays one part at a time
    """
    if entry is None or entry is UNCONSTRAINED or isinstance(entry, str):
        return entry
    if isinstance(entry, (tuple, list)):
        names = tuple(entry)
        for n in names:
            require(isinstance(n, str), lambda: BadPartitionEntry(index, entry))
        if not names:
            return None
        return names[0] if len(names) == 1 else names
    raise reject(BadPartitionEntry(index, entry))


def _axis_set(value: Any, kind: str) -> frozenset[str]:
    """VAL-6 for ``unreduced=`` / ``reduced=``: an iterable of axis names (not one bare name)."""
    # A set of names already (a spec built from another one's): as it is
    if type(value) is frozenset and all(type(name) is str and name for name in value):
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise reject(BadReductionAxes(kind, value))
    names = set()
    try:
        # One entry at a time: a long iterable of non-names is refused at its first entry.
        for name in value:
            require(isinstance(name, str) and name != "", lambda: BadReductionAxes(kind, value))
            names.add(name)
    except Exception as error:  # an iterable that fails while it is read
        if isinstance(error, Rejection):
            raise
        raise reject(BadReductionAxes(kind, value)) from None
    return frozenset(names)


@dataclasses.dataclass(frozen=True, init=False)
class PartitionSpec:
    """For each array dimension, the mesh axes it is split over (jax.sharding.PartitionSpec).

    ``unreduced`` and ``reduced`` are the mesh axes over which the value is a partial sum
    still to be reduced, or already reduced, as JAX 0.10.2 carries them.
    """

    partitions: tuple[Entry, ...]
    unreduced: frozenset[str]
    reduced: frozenset[str]

    def __init__(self, *partitions: Any, unreduced: Iterable[str] = frozenset(),
                 reduced: Iterable[str] = frozenset()) -> None:
        parts = tuple(canonical_entry(i, e) for i, e in enumerate(partitions))
        unreduced, reduced = _axis_set(unreduced, "unreduced"), _axis_set(reduced, "reduced")
        if unreduced or reduced:   # (most specs have neither)
            for name in unreduced & reduced:
                raise reject(OverlappingReduction(name, "unreduced", "reduced"))
            for axis in self._axes_of(parts):
                for kind, group in (("unreduced", unreduced), ("reduced", reduced)):
                    require(axis not in group,
                            lambda: OverlappingReduction(axis, "a partition", kind))
        object.__setattr__(self, "partitions", parts)
        object.__setattr__(self, "unreduced", unreduced)
        object.__setattr__(self, "reduced", reduced)

    @staticmethod
    def _axes_of(parts: tuple[Entry, ...]) -> Iterator[str]:
        for e in parts:
            if isinstance(e, tuple):
                yield from e
            elif isinstance(e, str):
                yield e

    def axes(self) -> Iterator[str]:
        """Every mesh axis named by an entry, in order, repeats included."""
        return self._axes_of(self.partitions)

    def __len__(self) -> int:
        return len(self.partitions)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.partitions)

    def __getitem__(self, i: int) -> Entry:
        return self.partitions[i]

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    def __repr__(self) -> str:
        inner = ", ".join(repr(p) for p in self.partitions)
        extra = []
        if self.unreduced:
            extra.append(f"unreduced={set(sorted(self.unreduced))!r}")
        if self.reduced:
            extra.append(f"reduced={set(sorted(self.reduced))!r}")
        return f"P({', '.join(([inner] if inner else []) + extra)})"


P = PartitionSpec
