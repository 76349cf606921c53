"""What each input brings to the program, and where the program runs (RES, KEEP, DA, EXE).

After tracing, jit resolves every input's sharding from its in_sharding and the argument
itself (RES-1..5), drops the inputs the program does not use (KEEP-1), finds the one
ordered device list every kept input, every result and the context mesh agree on
(DA-1..4), replicates the scalars it was left to place (EXE-1) and decides whether the
results come back committed (EXE-2). Each function here is one of those rules, on JAX
objects.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import jax
from jax.sharding import AbstractMesh, Mesh

from . import internals
from .rules import reject, rule
from .shardings import (
    UNSPECIFIED, devices_of, hlo, hlo_equal, is_abstract, is_fully_replicated, num_devices,
)

__all__ = ["Input", "resolve_input", "kept_inputs", "check_reused_replica", "Source",
           "device_assignment", "check_has_devices", "replicate_scalars", "results_committed",
           "moves"]

# What a dynamic leaf is, as jit tells them apart.
ARRAY, NUMPY, NUMPY_SCALAR, SCALAR, ABSTRACT = "array", "numpy", "numpy-scalar", "scalar", "abstract"


class Input:
    """One flat dynamic input as resolution sees it."""

    __slots__ = ("path", "kind", "shape", "dtype", "held", "committed", "jit_sharding")

    def __init__(self, path: str, kind: str, shape: tuple, dtype: Any, held: Any,
                 committed: bool, jit_sharding: Any) -> None:
        self.path = path
        self.kind = kind
        self.shape = shape
        self.dtype = dtype
        self.held = held              # the value's own sharding (None: it has none)
        self.committed = committed    # committed as jit sees it
        self.jit_sharding = jit_sharding

    @property
    def concrete(self) -> bool:
        return self.held is not None and not is_abstract(self.held)


def _devices_text(devices: Sequence[Any]) -> str:
    ids = [d.id for d in devices]
    if len(ids) > 12:
        return f"[{', '.join(map(str, ids[:8]))}, ... ({len(ids)} devices)]"
    return str(ids)


# --------------------------------------------------------------------------- RES

@rule("RES-1")
def sharding_from_argument(item: Input) -> Any:
    """With no in_sharding, a committed argument brings its own sharding, an uncommitted one on one device leaves the choice to jit, and an uncommitted one on several devices is refused."""
    if item.held is None or item.committed:
        return UNSPECIFIED if item.held is None else item.held
    count = num_devices(item.held)
    if count != 1:
        raise reject("RES-1", NotImplementedError,
                     f"the argument is an uncommitted array spread over {count} devices "
                     f"({item.held}); jit cannot decide where it belongs. Commit it with "
                     "jax.device_put(x, sharding), or give an in_sharding.", item.path)
    return UNSPECIFIED


@rule("RES-2")
def check_host_array(item: Input, wanted: Any, processes: int) -> None:
    """In a program of several processes a numpy argument may only meet a fully replicated in_sharding."""
    if item.kind == NUMPY and processes > 1 and not is_fully_replicated(wanted):
        raise reject("RES-2", ValueError,
                     f"a numpy argument of shape {item.shape} meets the in_sharding {wanted}, "
                     f"which is not fully replicated, in a program of {processes} processes; "
                     "each process holds only its own numpy data. Build a global array first "
                     "(jax.make_array_from_process_local_data), or give a replicated "
                     "in_sharding.", item.path)


@rule("RES-3")
def check_memory_kind(item: Input, wanted: Any) -> None:
    """An argument that has a concrete sharding, committed or not, must already be in the memory kind its in_sharding names."""
    if not item.concrete:
        return
    if wanted.memory_kind != item.held.memory_kind:
        raise reject("RES-3", ValueError,
                     f"the in_sharding puts the argument in memory kind {wanted.memory_kind!r}, "
                     f"but the argument lives in {item.held.memory_kind!r}; jit does not move "
                     "between memory kinds. Move it first with jax.device_put(x, "
                     f"s.with_memory_kind({wanted.memory_kind!r})).", item.path)


@rule("RES-4")
def check_committed(item: Input, wanted: Any) -> None:
    """A committed argument must lower to the same HLO sharding as its in_sharding; devices are not compared, so jit moves a committed argument whose blocks match onto the in_sharding's devices."""
    if not item.concrete or not item.committed:
        return
    ndim = len(item.shape)
    held_hlo, wanted_hlo = hlo(item.held, ndim), hlo(wanted, ndim)
    if not hlo_equal(held_hlo, wanted_hlo):
        raise reject("RES-4", ValueError,
                     f"the argument is committed to {item.held} (HLO {held_hlo}), but the "
                     f"in_sharding is {wanted} (HLO {wanted_hlo}); jit does not reshard "
                     "committed arguments. Reshard it first with jax.device_put(x, "
                     "in_sharding), or leave its in_sharding unspecified.", item.path)


@rule("RES-5")
def check_reused_replica(item: Input, device: Any) -> None:
    """Under ``device=``/``backend=`` jit moves each kept argument to the device without checking it, but uses a replicated array's copy on the device as it is.

    An array replicated over several devices, one of them the target, is used as is, so it must
    already be in the target's memory kind.
    """
    held = item.held
    if not item.concrete or held.memory_kind == "device":
        return
    devices = devices_of(held)
    if len(devices) > 1 and device in devices and is_fully_replicated(held):
        raise reject("RES-5", ValueError,
                     f"jit was given device={device.id}, and the argument is a replicated array "
                     f"on devices {_devices_text(devices)} in memory kind {held.memory_kind!r}; "
                     f"JAX reuses its copy on device {device.id} as it is, and the program "
                     f"wants 'device'. Move it first: jax.device_put(x, jax.devices()"
                     f"[{device.id}]), or drop device= (deprecated).", item.path)


def resolve_input(item: Input, processes: int, device_or_backend: bool) -> Any:
    """The sharding lowering gets for one input (RES-1..4 in JAX's order)."""
    if device_or_backend:
        return item.jit_sharding
    wanted = item.jit_sharding
    if wanted is UNSPECIFIED:
        return sharding_from_argument(item)
    check_host_array(item, wanted, processes)
    check_memory_kind(item, wanted)
    check_committed(item, wanted)
    return wanted


@rule("KEEP-1")
def kept_inputs(used: Sequence[bool], keep_unused: bool) -> tuple[int, ...]:
    """The compiled program keeps every input under ``keep_unused=True`` and otherwise only the inputs the function uses; dropped inputs take no part in the device assignment."""
    return tuple(i for i, u in enumerate(used) if u or keep_unused)


# --------------------------------------------------------------------------- DA

class Source:
    """A sharding that takes part in the device assignment, and where it comes from."""

    __slots__ = ("sharding", "what", "path")

    def __init__(self, sharding: Any, what: str, path: str | None) -> None:
        self.sharding = sharding
        self.what = what
        self.path = path


def input_source(item: Input, resolved: Any) -> Source:
    if item.jit_sharding is not UNSPECIFIED:
        return Source(resolved, f"in_shardings for {item.path}", item.path)
    kind = "committed" if item.committed else "uncommitted"
    return Source(resolved, f"argument {item.path} ({kind})", item.path)


def distinct_sources(*groups: Sequence[Source]) -> list[Source]:
    """The first source of each distinct sharding of each group, the groups in order:
    inputs, then results, then the shardings inside the body."""
    out = []
    for group in groups:
        seen: set = set()
        for source in group:
            if source.sharding is UNSPECIFIED:
                continue
            try:
                if source.sharding in seen:
                    continue
                seen.add(source.sharding)
            except TypeError:
                pass
            out.append(source)
    return out


def _mismatch(first: str, first_devices: str, second: Source, second_devices: str) -> Exception:
    return reject("DA-1", ValueError,
                  f"jit needs one device assignment for the whole program, but the {first} is "
                  f"on devices {first_devices} and the {second.what} is on devices "
                  f"{second_devices}. Put both on the same devices in the same order "
                  "(jax.device_put), or build both shardings from one mesh.", second.path)


@rule("DA-2")
def check_abstract_size(abstract: AbstractMesh | None, what: str, size: int, other: str,
                        path: str | None) -> None:
    """Shardings over abstract meshes are compared by size only: every abstract mesh of a call, and the device assignment, span the same number of devices."""
    if abstract is not None and abstract.size != size:
        raise reject("DA-2", ValueError,
                     f"the {what} spans {abstract.size} devices but the {other} spans {size}; "
                     "abstract meshes must match the program's size", path)


@rule("DA-3")
def default_assignment() -> tuple:
    """With no sharding and no context mesh, the program runs on the default device alone (``jax.default_device``, else the first local device)."""
    device = internals.default_device()
    if device is None:
        return (jax.local_devices()[0],)
    if isinstance(device, str):
        return (jax.local_devices(backend=device)[0],)
    return (device,)


@rule("DA-1")
def device_assignment(sources: Sequence[Source], context: Any) -> tuple[tuple | None, int]:
    """Every concrete sharding of the kept inputs and of the results lists the same devices in the same order — the context mesh's when one is set; that list is the device assignment."""
    # What every concrete sharding is held to: the context mesh's devices; the context's
    # size when it is abstract; else the devices of the first concrete sharding.
    reference: tuple[str, Any] | None = None
    if isinstance(context, Mesh):
        reference = ("context mesh", tuple(context.devices.flat))
    elif isinstance(context, AbstractMesh):
        reference = ("context mesh", context.size)
    # The abstract mesh seen last (the context's at first), which the next one must match.
    sized: tuple[AbstractMesh, str] | None = (
        (context, "context mesh") if isinstance(context, AbstractMesh) else None)
    first_devices: tuple | None = None
    for source in sources:
        s = source.sharding
        if is_abstract(s):
            last, last_what = sized or (None, "")
            check_abstract_size(last, last_what, s.mesh.size, source.what, source.path)
            sized = (s.mesh, source.what)
            continue
        devices = devices_of(s)
        if first_devices is None:
            first_devices = devices
            reference = reference or (source.what, devices)
        _check_held_to(reference, devices, source)
    if first_devices is not None:
        assignment = first_devices
    elif isinstance(context, Mesh):
        assignment = reference[1]
    else:
        assignment = default_assignment()
        if sized is not None:
            return None, sized[0].size    # only abstract meshes: no devices yet
    if sized is not None:
        check_abstract_size(sized[0], sized[1], len(assignment), "device assignment", None)
    return assignment, len(assignment)


@rule("AD-9")
def check_result_mesh(aval: Any, count: int, path: str) -> None:
    """A result typed over a mesh whose axes are all Explicit is computed on that mesh: lowering refuses it when the program's device assignment holds another number of devices.

    ``aval``: the result's type; ``count``: the device assignment's size. A gradient of an
    input its loss does not read keeps no input, and ``device=`` places the program on
    one device: its cotangent typed over the input's mesh then meets this before lowering.
    """
    mesh = aval.sharding.mesh
    if count != mesh.size:
        raise reject("AD-9", ValueError,
                     f"{path} is typed over {mesh}, a mesh of {mesh.size} devices whose axes "
                     f"are all Explicit, but the program runs on {count} device(s): no kept "
                     "input and no sharding inside places it. Pass keep_unused=True, leave "
                     "device= out, or run under jax.set_mesh.", path)


def check_typed_result_mesh(aval: Any, count: int, path: str) -> None:
    """PROG-5 before lowering: a result left to its type, over a mesh with Explicit and Auto
    axes, needs a device assignment of that mesh's size (JAX cannot make the mesh concrete
    on another; over Explicit axes only AD-9 refuses first)."""
    mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
    if mesh is None or mesh.empty or jax.sharding.AxisType.Explicit not in mesh.axis_types:
        return
    if mesh.size != count:
        raise reject("PROG-5", ValueError,
                     f"{path} is left to its type, over {mesh}, a mesh of {mesh.size} devices "
                     f"with Explicit and Auto axes, but the program runs on {count} "
                     "device(s), on which that mesh cannot be made concrete. Give the result "
                     "an out_sharding, or place the program on the mesh's devices.", path)


def typed_over_explicit_mesh(aval: Any) -> bool:
    """Whether a value's type names a mesh with axes, all of them Explicit (AD-9 applies)."""
    types = getattr(getattr(getattr(aval, "sharding", None), "mesh", None), "axis_types", ())
    return bool(types) and all(t == jax.sharding.AxisType.Explicit for t in types)


def _check_held_to(reference: Any, devices: tuple, source: Source) -> None:
    """DA-1 for one concrete sharding against what the call's shardings are held to."""
    whose, want = reference
    if isinstance(want, int):
        if want != len(devices):
            raise _mismatch(whose, f"(any {want})", source, _devices_text(devices))
    elif want != devices:
        raise _mismatch(whose, _devices_text(want), source, _devices_text(devices))


@rule("DA-4")
def check_has_devices(assignment: tuple | None, context: Any) -> None:
    """A call whose shardings are all over abstract meshes has no devices, so jit cannot run it."""
    if assignment is None:
        raise reject("DA-4", ValueError,
                     f"every sharding of the call is over an abstract mesh ({context}), so the "
                     "call has no devices to run on. Use a concrete Mesh for at least one "
                     "sharding or the context mesh.")


# --------------------------------------------------------------------------- EXE

@rule("EXE-1")
def replicate_scalars(shardings: Sequence[Any], ranks: Sequence[int],
                      assignment: tuple) -> list[Any]:
    """On more than one device, a 0-d input whose sharding jit left open is replicated over the device assignment."""
    if len(assignment) <= 1:
        return list(shardings)
    replicated = None
    out = []
    for s, rank in zip(shardings, ranks):
        if s is UNSPECIFIED and rank == 0:
            if replicated is None:
                replicated = internals.GSPMDSharding.get_replicated(assignment)
            s = replicated
        out.append(s)
    return out


@rule("EXE-3")
def check_tile_count(sharding: Any, path: str) -> None:
    """A GSPMDSharding handed to the compiler names exactly as many device positions as its device list holds."""
    if not isinstance(sharding, internals.GSPMDSharding):
        return
    h = sharding._hlo_sharding
    if h.is_replicated() or h.is_maximal() or not h.is_tiled():
        return
    named, held = h.num_devices(), len(devices_of(sharding))
    if named != held:
        raise reject("EXE-3", RuntimeError,
                     f"the sharding {sharding} names {named} device positions but lists {held} "
                     "devices; XLA's verifier refuses the program. Make the tile assignment "
                     "cover exactly the GSPMDSharding's devices.", path,
                     jax_error="JaxRuntimeError")


@rule("EXE-4")
def check_iota_tiles(sharding: Any, path: str) -> None:
    """A tiled GSPMDSharding handed to the compiler has its tile assignment written as an iota order, not as a list of device positions."""
    if not isinstance(sharding, internals.GSPMDSharding):
        return
    h = sharding._hlo_sharding
    if h.is_tiled() and not h.is_tile_assignment_iota():
        raise reject("EXE-4", TypeError,
                     f"the sharding {sharding} lists its tile assignment device by device; JAX "
                     "lowers GSPMD tilings only when written as an iota order. Write the tiles "
                     "as an iota order, or use a NamedSharding over a Mesh in that device "
                     "order.", path, jax_error="TypeError")


@rule("EXE-2")
def results_committed(context: Any, count: int, kept_shardings: Sequence[Any],
                      out_shardings: Sequence[Any]) -> bool:
    """The results come back committed when a context mesh is set, the program spans more than one device, or any kept input or result has a sharding jit did not leave open."""
    if context is not None or count > 1:
        return True
    return any(s is not UNSPECIFIED for s in itertools.chain(kept_shardings, out_shardings))


def moves(item: Input, target: Any) -> bool:
    """Whether jit copies this input before running (its blocks or devices differ)."""
    held = item.held
    if item.kind != ARRAY or held is None or target is UNSPECIFIED or is_abstract(target):
        return False
    if devices_of(held) != devices_of(target):
        return True
    ndim = len(item.shape)
    return not hlo_equal(hlo(held, ndim), hlo(target, ndim))


__all__ += ["sharding_from_argument", "check_host_array", "check_memory_kind",
            "check_committed", "check_abstract_size", "default_assignment", "input_source",
            "distinct_sources", "ARRAY", "NUMPY", "NUMPY_SCALAR", "SCALAR", "ABSTRACT",
            "check_tile_count", "check_iota_tiles", "check_result_mesh",
            "check_typed_result_mesh", "typed_over_explicit_mesh"]
