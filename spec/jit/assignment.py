"""The one device assignment of a program, and what the compiled program receives: the DA
and EXE rules.

At lowering every concrete sharding of the kept inputs and the results must list the same
devices (DA-1; abstract meshes by size, DA-2), else the default device (DA-3); a call with
no concrete device cannot run (DA-4). Open scalars are replicated (EXE-1), what the compiler
gets is checked (EXE-3, EXE-4) and the results' committedness decided (EXE-2). Each rule's
failure is written right above it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

from ..core.hlo import Replicated, Tiled
from ..core.iota import Iota
from ..core.rules import Failure, IllFormedParameter, reject, require, rule
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import AbstractMesh, AxisType, DeviceList, Mesh

__all__ = ["Source", "device_assignment", "check_abstract_size", "default_assignment",
           "check_has_devices", "replicate_scalars", "check_tile_count", "check_iota_tiles",
           "results_committed", "devices_text", "check_result_mesh", "all_explicit"]


def devices_text(devices: DeviceList) -> str:
    """A device list for messages: its ids, the first eight of a long one."""
    if len(devices) > 12:
        shown = ", ".join(str(devices.id_at(i)) for i in range(8))
        return f"[{shown}, ... ({len(devices)} devices)]"
    return str(list(devices.ids()))


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a sharding that takes part in the device assignment comes from."""

    sharding: Any
    what: str            # "argument args[0] (committed)", "in_shardings for args[1]", ...
    path: str | None = None


def _ids(sharding: Any) -> DeviceList:
    return sharding.device_list


@dataclasses.dataclass(frozen=True)
class DeviceAssignmentMismatch(Failure, rule="DA-1"):
    template = ("jit needs one device assignment for the whole program, but the "
                "{first} is on devices {first_devices} and the {second} is on "
                "devices {second_devices}")
    hint = ("Put both on the same devices in the same order (jax.device_put), or "
            "build both shardings from one mesh.")
    first: str
    first_devices: str
    second: str
    second_devices: str


@rule("DA-1", mirrors="jax._src.interpreters.pxla._get_and_check_device_assignment")
def device_assignment(sources: Sequence[Source], context: Mesh | AbstractMesh | None,
                      default_device: int) -> tuple[DeviceList | None, int]:
    """Every concrete sharding of the kept inputs and of the results lists the same devices in the same order — the context mesh's when one is set; that list is the device assignment.

    >>> a = Source(SingleDeviceSharding(0), "argument args[0]")
    >>> b = Source(SingleDeviceSharding(1), "argument args[1]")
    >>> devices, count = device_assignment([a, a], None, 0)
    >>> devices.id_tuple(), count
    ((0,), 1)
    >>> device_assignment([a, b], None, 0)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [DA-1]: jit needs one device assignment for the whole program, but the argument args[0] is on devices [0] and the argument args[1] is on devices [1]. Put both on the same devices in the same order (jax.device_put), or build both shardings from one mesh.
    """
    abstract = context if isinstance(context, AbstractMesh) else None
    abstract_what = "context mesh"
    any_concrete = isinstance(context, Mesh)
    first: tuple[DeviceList, str] | None = None
    for source in sources:
        s = source.sharding
        if s is UNSPECIFIED:
            continue
        if isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh):
            check_abstract_size(abstract, abstract_what, s.mesh.size, source.what, source.path)
            abstract, abstract_what = s.mesh, source.what
            continue
        any_concrete = True
        ids = _ids(s)
        if first is None:
            first = (ids, source.what)
        _check_same_devices(ids, source, first, context)
    if first is None and isinstance(context, Mesh):
        assignment = context.devices
    elif first is None:
        assignment = DeviceList.of_ids(default_assignment(default_device))
    else:
        assignment = first[0]
    if any_concrete and abstract is not None:
        check_abstract_size(abstract, abstract_what, len(assignment), "device assignment")
    if any_concrete or abstract is None:
        return assignment, len(assignment)
    return None, abstract.size


def _check_same_devices(ids: DeviceList, source: Source, first: tuple[DeviceList, str],
                        context: Mesh | AbstractMesh | None) -> None:
    """DA-1 for one sharding: its devices are the context mesh's, else the first's."""
    if context is None:
        same = first[0] == ids
    elif isinstance(context, AbstractMesh):
        same = context.size == len(ids)
    else:
        same = context.devices == ids
    if same:
        return
    if context is None:
        other, other_devices = first[1], devices_text(first[0])
    elif isinstance(context, AbstractMesh):
        other, other_devices = "context mesh", f"(any {context.size})"
    else:
        other, other_devices = "context mesh", devices_text(context.devices)
    raise reject(DeviceAssignmentMismatch(other, other_devices, source.what, devices_text(ids)),
                 source.path)


@dataclasses.dataclass(frozen=True)
class AbstractSizeMismatch(Failure, rule="DA-2"):
    template = ("the {first} spans {first_size} devices but the {second} spans "
                "{second_size}; abstract meshes must match the program's size")
    first: str
    first_size: int
    second: str
    second_size: int


@rule("DA-2", mirrors="jax._src.interpreters.pxla._get_and_check_device_assignment "
                      "(abstract meshes)")
def check_abstract_size(abstract: AbstractMesh | None, what: str, size: int, other: str,
                        path: str | None = None) -> None:
    """Shardings over abstract meshes are compared by size only: every abstract mesh of a call, and the device assignment, span the same number of devices.

    >>> check_abstract_size(AbstractMesh((2, 4), ("x", "y")), "in_shardings for args[0]", 4,
    ...                     "device assignment")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [DA-2]: the in_shardings for args[0] spans 8 devices but the device assignment spans 4; abstract meshes must match the program's size
    """
    if abstract is not None and abstract.size != size:
        # refused at the sharding that brings the second size in (its path, when it has one)
        raise reject(AbstractSizeMismatch(what, abstract.size, other, size), path)


@rule("DA-3", mirrors="jax._src.interpreters.pxla.get_default_device")
def default_assignment(default_device: int) -> tuple[int, ...]:
    """With no sharding and no context mesh, the program runs on the default device alone (``jax.default_device``, else the first local device).

    >>> default_assignment(0)
    (0,)
    """
    return (default_device,)


@dataclasses.dataclass(frozen=True)
class NoConcreteDevices(Failure, rule="DA-4"):
    template = ("every sharding of the call is over an abstract mesh ({mesh}), so "
                "the call has no devices to run on")
    hint = ("Use a concrete Mesh for at least one sharding or the context mesh, or "
            "lower with jit(f).trace(...).lower(lowering_platforms=...).")
    mesh: Any


@rule("DA-4", mirrors="jax._src.interpreters.pxla.lower_sharding_computation "
                      "(device_assignment is None)")
def check_has_devices(assignment: DeviceList | None, context: Any) -> None:
    """A call whose shardings are all over abstract meshes has no devices, so jit cannot run it.

    >>> check_has_devices(None, AbstractMesh((2,), ("x",), (AxisType.Explicit,)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [DA-4]: every sharding of the call is over an abstract mesh (AbstractMesh({'x': 2}, types=('Explicit',))), so the call has no devices to run on. Use a concrete Mesh for at least one sharding or the context mesh, or lower with jit(f).trace(...).lower(lowering_platforms=...).
    """
    require(assignment is not None, lambda: NoConcreteDevices(context))


@rule("EXE-1", mirrors="jax._src.interpreters.pxla.lower_sharding_computation (ndim == 0)")
def replicate_scalars(shardings: Sequence[Any], ranks: Sequence[int],
                      assignment: DeviceList | None) -> list[Any]:
    """On more than one device, a 0-d input whose sharding jit left open is replicated over the device assignment.

    >>> replicate_scalars([UNSPECIFIED, UNSPECIFIED], [0, 1], DeviceList.of_ids([0, 1]))
    [GSPMDSharding({replicated}, devices=DeviceList(Iota[2])), UNSPECIFIED]
    """
    if assignment is None or len(assignment) <= 1:
        return list(shardings)
    replicated = GSPMDSharding(assignment, Replicated())
    return [replicated if s is UNSPECIFIED and rank == 0 else s
            for s, rank in zip(shardings, ranks)]


@dataclasses.dataclass(frozen=True)
class TileCountMismatch(Failure, rule="EXE-3", error=RuntimeError, jax_error="JaxRuntimeError"):
    template = ("the sharding {sharding} names {named} device positions but "
                "lists {held} devices; XLA's verifier refuses the program")
    hint = "Make the tile assignment cover exactly the GSPMDSharding's devices."
    sharding: Any
    named: int
    held: int


@rule("EXE-3", mirrors="XLA's HLO verifier, reached through UnloadedMeshExecutable.from_hlo")
def check_tile_count(sharding: Any) -> None:
    """A GSPMDSharding handed to the compiler names exactly as many device positions as its device list holds.

    >>> check_tile_count(GSPMDSharding([0, 1], "{devices=[4]<=[4]}"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [EXE-3]: the sharding GSPMDSharding({devices=[4]<=[4]}, devices=DeviceList(Iota[2])) names 4 device positions but lists 2 devices; XLA's verifier refuses the program. Make the tile assignment cover exactly the GSPMDSharding's devices.
    """
    if isinstance(sharding, GSPMDSharding) and isinstance(sharding.hlo, Tiled):
        named, held = sharding.hlo.num_devices, len(sharding.devices)
        require(named == held, lambda: TileCountMismatch(sharding, named, held))


@dataclasses.dataclass(frozen=True)
class ListedTiles(Failure, rule="EXE-4", error=TypeError):
    template = ("the sharding {sharding} lists its tile assignment device by "
                "device; JAX lowers GSPMD tilings only when written as an iota "
                "order")
    hint = ("Write the tiles as an iota order (e.g. {{devices=[4,1]<=[4]}}), or "
            "use a NamedSharding over a Mesh in that device order.")
    sharding: Any


@rule("EXE-4", mirrors="GSPMDSharding._to_sdy_sharding (lowering to Shardy)")
def check_iota_tiles(sharding: Any) -> None:
    """A tiled GSPMDSharding handed to the compiler has its tile assignment written as an iota order, not as a list of device positions.

    JAX caches the conversion by sharding equality, so within one process a listed
    tiling that equals an iota tiling converted earlier slips through; the rule states what a
    fresh process does.

    >>> check_iota_tiles(GSPMDSharding([0, 1, 2, 3], "{devices=[4,1]<=[4]}"))
    >>> check_iota_tiles(GSPMDSharding([0, 1, 2, 3], "{devices=[4,1]1,0,2,3}"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [EXE-4]: the sharding GSPMDSharding({devices=[4,1]1,0,2,3}, devices=DeviceList(Iota[4])) lists its tile assignment device by device; JAX lowers GSPMD tilings only when written as an iota order. Write the tiles as an iota order (e.g. {devices=[4,1]<=[4]}), or use a NamedSharding over a Mesh in that device order.
    """
    if isinstance(sharding, GSPMDSharding) and isinstance(sharding.hlo, Tiled):
        require(isinstance(sharding.hlo.assignment, Iota), lambda: ListedTiles(sharding))


@rule("EXE-2", mirrors="jax._src.interpreters.pxla.lower_sharding_computation (committed)")
def results_committed(context: Any, count: int, kept_shardings: Iterable[Any],
                      out_shardings: Iterable[Any]) -> bool:
    """The results come back committed when a context mesh is set, the program spans more than one device, or any kept input or result has a sharding jit did not leave open.

    >>> results_committed(None, 1, [UNSPECIFIED], [UNSPECIFIED])
    False
    >>> results_committed(None, 1, [SingleDeviceSharding(0)], [UNSPECIFIED])
    True
    """
    return bool(context is not None or count > 1
                or any(s is not UNSPECIFIED for s in kept_shardings)
                or any(s is not UNSPECIFIED for s in out_shardings))


# --------------------------------------------------------------------------- AD-9

@dataclasses.dataclass(frozen=True)
class _ResultMeshParameter(IllFormedParameter, rule="AD-0"):
    pass


@dataclasses.dataclass(frozen=True)
class MeshOfOtherSize(Failure, rule="AD-9", error=ValueError):
    template = ("{path} is typed over {mesh!r}, a mesh of {size} devices whose axes are "
                "all Explicit, but the program runs on {count} device(s): no kept input "
                "and no sharding inside places it (Length of device assignment {count} is "
                "not equal to the size of the mesh {size})")
    hint = ("A gradient of an input its loss does not read (a sum, a reduced input's "
            "cotangent) keeps no input, and device= places the program on one device: "
            "pass keep_unused=True, leave device= out, or run under jax.set_mesh.")
    path: str
    mesh: Any
    size: int
    count: int


@rule("AD-9", mirrors="jax._src.interpreters.pxla.lower_sharding_computation (the check of "
                      "out avals' meshes against the device assignment)")
def check_result_mesh(mesh: Any, count: int, path: str) -> None:
    """A result typed over a mesh whose axes are all Explicit is computed on that mesh: lowering refuses it when the program's device assignment holds another number of devices.

    Any jit call meets it when it lowers (an AD rule by its ID: a gradient found it). The
    gradient of an input placed on a reduced sharding meets it: its cotangent is typed
    over the input's mesh (unreduced where the input was reduced), and when the loss does
    not read the input's value (a sum) the backward pass keeps no input, so the program
    runs on one device; so does a jit given ``device=``.

    >>> explicit = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> check_result_mesh(explicit, 8, "out[0]")
    >>> check_result_mesh(explicit, 1, "out[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [AD-9]: out[0] is typed over AbstractMesh({'x': 2, 'y': 4}, types=('Explicit', 'Explicit')), a mesh of 8 devices whose axes are all Explicit, but the program runs on 1 device(s): no kept input and no sharding inside places it (Length of device assignment 1 is not equal to the size of the mesh 8). A gradient of an input its loss does not read (a sum, a reduced input's cotangent) keeps no input, and device= places the program on one device: pass keep_unused=True, leave device= out, or run under jax.set_mesh.
    """
    require(type(count) is int and 0 <= count <= 1 << 62,
            lambda: _ResultMeshParameter("count", f"an integer from 0 to {1 << 62}", count))
    require(isinstance(path, str), lambda: _ResultMeshParameter("path", "a string", path))
    if not all_explicit(mesh):
        return
    size = 1
    for n in mesh.axis_sizes:
        size *= n
    if count != size:
        raise reject(MeshOfOtherSize(path, mesh, size, count))


def all_explicit(mesh: Any) -> bool:
    """Whether a type's mesh has axes and all of them are Explicit (AD-9 applies)."""
    require(mesh is None or isinstance(mesh, (AbstractMesh, Mesh)),
            lambda: _ResultMeshParameter("mesh", "None or a mesh (a type's)", mesh))
    return mesh is not None and bool(mesh.axis_types) and all(
        t is AxisType.Explicit for t in mesh.axis_types)
