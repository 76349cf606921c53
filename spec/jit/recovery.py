"""The shardings read back after compiling: the OUT rules.

The executable reports each result's sharding — the one given, else the compiler's choice
(:func:`compiled_results`), and likewise each input's (:func:`compiled_inputs`); jit then
recovers the user's sharding types (OUT-1), re-reading an HLO sharding over a mesh (OUT-2),
and gives one-device results a SingleDeviceSharding (OUT-3). The failures of OUT-2 are
written right above it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .call import Arg, Out
from ..placement.blocks import to_hlo
from ..placement.equivalence import hlo_equal, jax_equivalent
from ..core.hlo import HloSharding, Maximal, Replicated, SubgroupType, Tiled
from ..core.iota import Iota
from ..core.rules import Failure, Rejection, current_edition, reject, require, rule, varies
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import (
    UNCONSTRAINED, AbstractMesh, AxisType, DeviceList, Mesh, PartitionSpec,
)

P = PartitionSpec  # the name the examples use

__all__ = ["spec_from_hlo", "recover_shardings", "single_device_results", "compiled_results",
           "open_result", "leaves_open", "lowered_types", "compiled_inputs", "concrete_inputs",
           "input_types"]


def _superdims(assignment: tuple[int, ...] | Iota, hlo: str, mesh: Any) -> list[tuple[int, int]]:
    """(size, stride) pairs, minor first, that generate the tile assignment's positions."""
    if isinstance(assignment, Iota):
        dims, perm = assignment.reshape_dims, assignment.perm
        strides = [1] * len(dims)
        for i in range(len(dims) - 2, -1, -1):
            strides[i] = strides[i + 1] * dims[i + 1]
        found: list[tuple[int, int]] = []
        for axis in reversed(perm):
            size, stride = dims[axis], strides[axis]
            if size == 1:
                continue
            if found and found[-1][0] * found[-1][1] == stride:
                found[-1] = (found[-1][0] * size, found[-1][1])
            else:
                found.append((size, stride))
        return found
    flat = list(assignment)
    require(flat[0] == 0, lambda: RecoveryNotImplemented(
        hlo, mesh, "its tile assignment does not start at position 0"))
    found = []
    while len(flat) > 1:
        stride = flat[1]
        size = 1
        while size < len(flat) and flat[size] == size * stride:
            size += 1
        found.append((size, stride))
        flat = flat[::size]
    return found


@dataclasses.dataclass(frozen=True)
class RecoveryFailed(Failure, rule="OUT-2"):
    template = ("the compiler placed the result with {hlo}, which cannot be "
                "written as a PartitionSpec over the mesh {mesh}: {why}")
    hlo: str
    mesh: Any
    why: str


@dataclasses.dataclass(frozen=True)
class RecoveryIndivisible(RecoveryFailed, jax_error="IndivisibleError"):
    pass


@dataclasses.dataclass(frozen=True)
class RecoveryNotImplemented(RecoveryFailed, error=NotImplementedError):
    pass


@dataclasses.dataclass(frozen=True)
class RecoveryLookup(RecoveryFailed, error=KeyError):
    pass


@dataclasses.dataclass(frozen=True)
class RecoveryAssertion(RecoveryFailed, error=AssertionError):
    pass


def _axis_order(hlo: Tiled, mesh: Any, sizes: dict[str, int], text: str) -> list[str]:
    """The mesh axes, in the order the tile assignment's runs of devices take them."""
    strides = {}
    acc = 1
    for name in reversed(list(sizes)):
        strides[name] = acc
        acc *= sizes[name]
    size_at_stride = {strides[n]: sizes[n] for n in sizes}
    name_of = {(sizes[n], strides[n]): n for n in sizes}
    order: list[str] = []
    for size, stride in reversed(_superdims(hlo.assignment, text, mesh)):
        pieces = []
        target = size_at_stride.get(stride)
        require(target is not None, lambda: RecoveryLookup(
            text, mesh, f"no mesh axis has stride {stride}"))
        while size > target:
            require(target > 1 and size % target == 0, lambda: RecoveryAssertion(
                text, mesh, f"a run of {size} devices does not split into mesh axes"))
            pieces.append((target, stride))
            size //= target
            stride *= target
            target = size_at_stride.get(stride)
            require(target is not None, lambda: RecoveryLookup(
                text, mesh, f"no mesh axis has stride {stride}"))
        require(size == target, lambda: RecoveryAssertion(
            text, mesh, f"a run of {size} devices does not match a mesh axis"))
        pieces.append((size, stride))
        for piece in reversed(pieces):
            require(piece in name_of, lambda piece=piece: RecoveryLookup(
                text, mesh, f"no mesh axis has size {piece[0]} at stride {piece[1]}"))
            order.append(name_of[piece])
    return order


def _partitions(hlo: Tiled, mesh: Any, sizes: dict[str, int], order: list[str], text: str
                ) -> list[tuple[str, ...]]:
    """Each tiled dimension's mesh axes, taken in ``order`` until they make its tile count."""
    partitions: list[tuple[str, ...]] = []
    axes = iter(order)
    for dim, tile in enumerate(hlo.dims):
        taken: list[str] = []
        while tile > 1:
            axis = next(axes, None)
            require(axis is not None, lambda: RecoveryAssertion(
                text, mesh, "the mesh axes run out before the tiles do"))
            require(tile % sizes[axis] == 0, lambda: RecoveryIndivisible(
                text, mesh, f"tile dimension {dim} of size {tile} is not a multiple of mesh "
                            f"axis {axis!r} of size {sizes[axis]}"))
            tile //= sizes[axis]
            taken.append(axis)
        partitions.append(tuple(taken))
    return partitions


@rule("OUT-2", mirrors="jax._src.sharding_impls.parse_flatten_op_sharding; unflatten_array")
def spec_from_hlo(hlo: HloSharding, mesh: Mesh | AbstractMesh, memory_kind: Any = None
                  ) -> NamedSharding:
    """An HLO sharding reads back as a PartitionSpec over a mesh when its tile assignment is the mesh's device order transposed: each tiled dimension takes, in that order, mesh axes whose sizes divide it.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> from shardlaw.spec.core.hlo import parse_hlo
    >>> spec_from_hlo(parse_hlo("{devices=[4,2]<=[2,4]T(1,0)}"), mesh)
    NamedSharding(Mesh({'x': 2, 'y': 4}), P('y', 'x'))
    >>> spec_from_hlo(parse_hlo("{devices=[2,4]<=[8]}"), Mesh.iota((4, 2), ("x", "y")))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [OUT-2]: the compiler placed the result with {devices=[2,4]<=[8]}, which cannot be written as a PartitionSpec over the mesh Mesh({'x': 4, 'y': 2}): tile dimension 0 of size 2 is not a multiple of mesh axis 'x' of size 4
    """
    text = str(hlo)

    def done(*partitions: Any) -> NamedSharding:
        return NamedSharding(mesh, PartitionSpec(*partitions), memory_kind=memory_kind)

    if isinstance(hlo, Replicated):
        return done()
    if isinstance(hlo, Maximal):
        require(mesh.size == 1, lambda: RecoveryAssertion(text, mesh, "it is a maximal sharding"))
        return done()
    if not isinstance(hlo, Tiled):
        raise reject(RecoveryAssertion(text, mesh, f"it is a {type(hlo).__name__} sharding"))
    sizes = {n: s for n, s in zip(mesh.axis_names, mesh.axis_sizes) if s != 1}
    order = _axis_order(hlo, mesh, sizes, text)
    partitions = _partitions(hlo, mesh, sizes, order, text)
    require(len(hlo.subgroups) <= 1, lambda: RecoveryNotImplemented(
        text, mesh, "it has more than one kind of subgroup"))
    if hlo.subgroups == (SubgroupType.REPLICATED,):
        partitions = partitions[:-1]
    while partitions and partitions[-1] == ():
        partitions.pop()
    return done(*partitions)


def type_sources(recovered: Sequence[Any], resolved: Sequence[Any]) -> Sequence[Any]:
    """The shardings of the kept inputs that may give a result its type (OUT-1), as the
    edition held reads them: as the executable takes them, recovered (JAX 0.10.2); as jit
    resolved them before compiling (JAX 0.4.13 looks for the first NamedSharding among the
    resolved shardings of the inputs the program kept; an input it dropped gives none).

    >>> from shardlaw.spec.core.editions import holding
    >>> type_sources(["recovered"], ["resolved"])
    ['recovered']
    >>> with holding("0.4.13"):
    ...     type_sources(["recovered"], ["resolved"])
    ['resolved']
    """
    if current_edition() == "0.4.13":
        return resolved
    return recovered


def _read_back_0_4(function: Any, placed: list[Any], values: Sequence[Any],
                   given: Sequence[Any], given_values: Sequence[Any],
                   context: Mesh | AbstractMesh | None) -> list[Any]:
    """OUT-1 in JAX 0.4.13: once any value is the compiler's, every value is read back from
    the executable (a GSPMDSharding, given ones too), and takes the type of the first
    NamedSharding among the kept inputs as jit resolved them only: a SingleDeviceSharding
    or the placed values give none, and there is no context mesh."""
    if not any(isinstance(o, GSPMDSharding) for o in placed):
        return list(placed)
    read = [o if isinstance(o, GSPMDSharding) or o is UNSPECIFIED
            else GSPMDSharding(o.device_list, to_hlo(o, len(value.shape)))
            for o, value in zip(placed, values)]
    named = [s if isinstance(s, NamedSharding) else UNSPECIFIED for s in given]
    if not any(isinstance(s, NamedSharding) for s in named):
        return read
    # 0.4.13's types carry no mesh: a result is re-read over the input's mesh, never over
    # the mesh of its own out_sharding (0.10.2's PROG-6 typing).
    untyped = [dataclasses.replace(v, mesh=None, spec=None) if isinstance(v, Out) else v
               for v in values]
    return function(read, untyped, named, given_values, None)


@varies("0.4.13", "A value the compiler placed comes back in the type of the first "
        "NamedSharding among the kept inputs as jit resolved them, else as a GSPMDSharding; "
        "once any result is the compiler's, the results given an out_sharding are read back "
        "from the executable with the rest.", decide=_read_back_0_4,
        clauses=("(C1) Once any value is the compiler's, every value is read back from the "
                 "executable as a GSPMDSharding, the given ones too.",
                 "(C2) Each takes the type of the first NamedSharding among the inputs the "
                 "program kept, as jit resolved them (an argument's own, or its in_sharding), "
                 "as OUT-1 (C1) says; an input the program dropped, a SingleDeviceSharding, "
                 "the placed values and a context mesh give no type."))
@rule("OUT-1", mirrors="jax._src.interpreters.pxla.maybe_recover_user_shardings; "
                       "_get_out_sharding_from_orig_sharding")
def recover_shardings(placed: list[Any], values: Sequence[Any], given: Sequence[Any],
                      given_values: Sequence[Any], context: Mesh | AbstractMesh | None
                      ) -> list[Any]:
    """A value the compiler placed (a GSPMDSharding) comes back in the type of a sharding the user gave, where there is one.

    (C1) It takes the type of the first NamedSharding or SingleDeviceSharding the user gave:
    that sharding itself when JAX-equivalent, else re-read over its mesh (or on its one
    device).
    (C2) With none given, it takes the type of the first such sharding among the placed
    values.
    (C3) With none there either, it is re-read over the context mesh when a concrete one is
    set.
    (C4) It stays a GSPMDSharding when none of these applies or re-reading fails, except
    that a dimension the mesh axes do not divide is refused (OUT-2).

    JAX applies this to the executable's inputs (``given``: the shardings jit resolved)
    and then to its results (``given``: the inputs so recovered). ``values`` and
    ``given_values`` are the values' types (:class:`~shardlaw.spec.jit.call.Out`: rank and mesh).

    >>> from shardlaw.spec.jit.call import Out
    >>> mesh = Mesh.iota((2,), ("x",))
    >>> named = NamedSharding(mesh, P("x"))
    >>> compiler = GSPMDSharding(mesh.devices, "{devices=[2]<=[2]}")
    >>> recover_shardings([compiler], [Out((4,))], [named], [Out((4,))], None)
    [NamedSharding(Mesh({'x': 2}), P('x'))]
    >>> recover_shardings([compiler], [Out((4,))], [], [], None)
    [GSPMDSharding({devices=[2]<=[2]}, devices=DeviceList(Iota[2]))]
    """
    if not any(isinstance(o, GSPMDSharding) for o in placed):
        return list(placed)
    origin: tuple[Any, Any] | None = None
    for s, value in [*zip(given, given_values), *((s, None) for s in placed)]:
        if isinstance(s, (NamedSharding, SingleDeviceSharding)):
            origin = (s, value)
            break
    if origin is None:
        if isinstance(context, Mesh):
            return [spec_from_hlo(o.hlo, context, o.memory_kind) if isinstance(o, GSPMDSharding)
                    else o for o in placed]
        return list(placed)
    user, user_value = origin
    return [_recover(o, value, user, user_value) for o, value in zip(placed, values)]


def _recover(placed: Any, value: Any, user: Any, user_value: Any) -> Any:
    """One placed value in the type of ``user`` (OUT-1's first two clauses)."""
    rank = len(value.shape)
    if not isinstance(placed, GSPMDSharding):
        return placed
    if isinstance(user, NamedSharding) and not isinstance(user.mesh, Mesh):
        return placed   # a sharding inside the body over an abstract mesh: JAX's assertion fails
    if isinstance(user, SingleDeviceSharding):
        return SingleDeviceSharding(placed.devices.id_at(0), memory_kind=placed.memory_kind)
    if (user_value is not None and len(user_value.shape) == rank
            and value.mesh == user.mesh.abstract and jax_equivalent(placed, user, rank)):
        return user
    mesh = _mesh_for_result(value, user.mesh, placed)
    try:
        if mesh is None:
            raise reject(RecoveryAssertion(str(placed.hlo), value.mesh, "mesh size differs"))
        return spec_from_hlo(placed.hlo, mesh, placed.memory_kind)
    except Rejection as error:
        if error.failure.jax_error == "IndivisibleError":
            raise
        return placed


def input_types(args: Sequence[Arg]) -> list[Out]:
    """Each input's type as tracing sees it: a committed NamedSharding carries its mesh (as an
    abstract mesh, made once per mesh)."""
    abstract: dict[int, AbstractMesh] = {}
    types = []
    for arg in args:
        mesh = None
        if arg.is_committed and isinstance(arg.sharding, NamedSharding):
            concrete = arg.sharding.mesh
            if id(concrete) not in abstract:
                abstract[id(concrete)] = concrete.abstract
            mesh = abstract[id(concrete)]
        types.append(Out(arg.shape, arg.dtype, None, mesh))
    return types


def concrete_inputs(shardings: Sequence[Any], assignment: DeviceList) -> list[Any]:
    """Input shardings over abstract meshes, made concrete over the device assignment."""
    out = []
    for s in shardings:
        if isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh):
            s = NamedSharding(Mesh(s.mesh.axis_sizes, s.mesh.axis_names, assignment,
                                   s.mesh.axis_types), s.spec, memory_kind=s.memory_kind)
        out.append(s)
    return out


def _mesh_for_result(out: Any, given: Mesh, placed: GSPMDSharding) -> Mesh | None:
    """The mesh a result is re-read over: its type's mesh made concrete, else the input's."""
    typed = out.mesh
    if typed is None or AxisType.Manual in typed.axis_types:
        return given
    if typed.size != len(placed.devices):
        return None
    return Mesh(typed.axis_sizes, typed.axis_names, placed.devices, typed.axis_types)


def _single_device_results_0_4(function: Any, outs: Sequence[Any], assignment: DeviceList,
                                given: Sequence[bool] | None = None) -> list[Any]:
    """OUT-3 in JAX 0.4.13: on a one-device program every result out_shardings does not give
    comes back as a SingleDeviceSharding, whatever sharding it was recovered as."""
    if len(assignment) != 1:
        return list(outs)
    given = given if given is not None else (False,) * len(outs)
    return [o if g else SingleDeviceSharding(assignment.id_at(0)) for o, g in zip(outs, given)]


@varies("0.4.13", "On a one-device program, every result that out_shardings does not give "
        "comes back as a SingleDeviceSharding on that device, even one recovered as a "
        "NamedSharding over a one-device mesh.", decide=_single_device_results_0_4)
@rule("OUT-3", mirrors="jax._src.interpreters.pxla.finalize_shardings")
def single_device_results(outs: Sequence[Any], assignment: DeviceList,
                          given: Sequence[bool] | None = None) -> list[Any]:
    """On a one-device program, a result still placed by an HLO sharding comes back as a SingleDeviceSharding on that device.

    ``given`` says, per result, whether out_shardings gave it (read by the 0.4.13 variant).

    >>> single_device_results([GSPMDSharding([3], "{replicated}")], DeviceList.of_ids([3]))
    [SingleDeviceSharding(Device(3))]
    """
    if len(assignment) != 1:
        return list(outs)
    return [SingleDeviceSharding(assignment.id_at(0), memory_kind=o.memory_kind)
            if isinstance(o, GSPMDSharding) else o for o in outs]


@varies("0.4.13", "JAX 0.4.13 has no mesh axis types, so no Explicit axes: CALL-1 "
        "refuses a call described with them.",
        absent=True)
@rule("PROG-5", mirrors="jax._src.interpreters.pxla._concretize_abstract_out_shardings; "
                       "_maybe_get_and_check_out_shardings")
def typed_result(out: Out, assignment: DeviceList, choice: HloSharding | None) -> Any:
    """A result left unspecified whose type's mesh has an Explicit axis comes back on its type's split over that mesh made concrete on the device assignment.

    (C1) Over a mesh of Explicit axes only, that is where it comes back.
    (C2) Over a mesh with Auto axes too, the dimensions the type leaves whole are the
    compiler's: the result comes back on its type when the compiler placed it so, else as
    the compiler placed it, re-read over that mesh (a GSPMDSharding where that fails).
    (C3) The device assignment must be of the mesh's size: lowering refuses another
    (ValueError; over Explicit axes only, AD-9 refuses it first).

    ``choice`` is the compiler's HLO sharding for it (None: not known, UNSPECIFIED).

    >>> from shardlaw.spec.core.values import AxisType as T
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (T.Explicit, T.Explicit))
    >>> typed_result(Out((8, 8), mesh=mesh, spec=P("y")), DeviceList.of_ids(range(8)), None)
    NamedSharding(Mesh({'x': 2, 'y': 4}, types=('Explicit', 'Explicit')), P('y', None))
    """
    require(explicit_typed(out, assignment), lambda: RecoveryAssertion(
        "(a result typed over Explicit axes)", out.mesh,
        "no split given, or a mesh of another size than the device assignment's"))
    mesh = out.mesh
    rank = len(out.shape)
    spec = out.spec
    spec = PartitionSpec(*spec, *(None,) * (rank - len(spec)), unreduced=spec.unreduced,
                         reduced=spec.reduced)
    typed = NamedSharding(Mesh(mesh.axis_sizes, mesh.axis_names, assignment,
                               mesh.axis_types), spec)
    if AxisType.Auto not in mesh.axis_types:
        return typed
    if choice is None:
        return UNSPECIFIED
    if hlo_equal(choice, to_hlo(typed, rank)):
        return typed
    try:
        return spec_from_hlo(choice, typed.mesh)
    except Rejection:
        return GSPMDSharding(assignment, choice)


def leaves_open(sharding: Any) -> bool:
    """Whether an out sharding leaves a dimension UNCONSTRAINED (only vmap's batching rule
    binds one: jax.jit refuses it, JIT-2)."""
    return isinstance(sharding, NamedSharding) and UNCONSTRAINED in sharding.spec.partitions


@rule("PROG-6", mirrors="jax._src.interpreters.pxla._maybe_get_and_check_out_shardings "
                       "(contains_unconstrained); _gspmd_to_named_sharding")
def open_result(out: Out, given: NamedSharding, assignment: DeviceList,
                choice: HloSharding | None) -> Any:
    """A result whose out sharding leaves a dimension UNCONSTRAINED comes back as the compiler placed the whole of it: on its type where placed so, else re-read over the out sharding's mesh.

    jit types the result over the out sharding's mesh, made concrete on the device
    assignment, every dimension written out; a placement that does not read over the mesh
    stays a GSPMDSharding, and OUT-1 re-reads it on that type too
    (:func:`lowered_types`), not over the mesh the body typed the value over. ``choice`` is the compiler's HLO sharding for it (None: not
    known, UNSPECIFIED). On its type the spec is written in full; re-read, its trailing
    unsplit dimensions are dropped (OUT-2). Over a mesh with an Explicit axis too JAX tells
    the two apart the same way, its type keeping the out sharding's Explicit axes (notes/
    jax-facts.md section 18); the vmap property holds this rule to JAX over meshes of Auto
    axes only.

    >>> mesh = AbstractMesh((2, 4), ("x", "y"))
    >>> given = NamedSharding(mesh, PartitionSpec(UNCONSTRAINED, "x"))
    >>> open_result(Out((4, 8)), given, DeviceList.of_ids(range(8)), Replicated())
    NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, None))
    >>> open_result(Out((4, 8)), given, DeviceList.of_ids(range(8)), Tiled((1, 2, 4), Iota((8,)), (SubgroupType.REPLICATED,)))
    NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, 'x'))
    """
    if choice is None:
        return UNSPECIFIED
    over = given.mesh
    mesh = Mesh(over.axis_sizes, over.axis_names, assignment, over.axis_types)
    rank = len(out.shape)
    spec = out.spec if out.spec is not None and out.mesh == over.abstract else PartitionSpec()
    typed = NamedSharding(mesh, PartitionSpec(
        *spec.partitions, *(None,) * (rank - len(spec.partitions)),
        unreduced=spec.unreduced, reduced=spec.reduced))
    if hlo_equal(choice, to_hlo(typed, rank)):
        return typed
    try:
        return spec_from_hlo(choice, mesh)
    except Rejection:
        return GSPMDSharding(assignment, choice)


def lowered_types(results: Sequence[Out], out_shardings: Sequence[Any]) -> list[Out]:
    """Each result's type as lowering has it (JAX's ``update_aval_with_sharding``): over the
    mesh of its out sharding where that is a NamedSharding, whatever mesh the body typed it
    over (PROG-6: a result the compiler placed is re-read on this type, OUT-1, and comes
    back typed so); as traced otherwise."""
    typed = []
    for out, s in zip(results, out_shardings):
        if isinstance(s, NamedSharding) and s.mesh.abstract != out.mesh:
            out = Out(out.shape, out.dtype, out.source, s.mesh.abstract)
        typed.append(out)
    return typed


@dataclasses.dataclass(frozen=True)
class TypedMeshOfOtherSize(Failure, rule="PROG-5"):
    template = ("{path} is left to its type, over {mesh!r}, a mesh of {size} devices with "
                "Explicit and Auto axes, but the program runs on {count} device(s): JAX "
                "cannot make that mesh concrete (cannot reshape array of size {count} into "
                "shape {shape})")
    hint = "Give the result an out_sharding, or place the program on the mesh's devices."
    path: str
    mesh: Any
    size: int
    count: int
    shape: str   # as numpy writes it


def check_typed_result_mesh(out: Out, count: int, path: str) -> None:
    """PROG-5 when lowering: a result it places over a mesh with Auto axes too needs a device
    assignment of that mesh's size (over Explicit axes only, AD-9 refuses first)."""
    mesh = out.mesh
    if out.spec is None or mesh is None or AxisType.Explicit not in mesh.axis_types:
        return
    if mesh.size != count:
        raise reject(TypedMeshOfOtherSize(path, mesh, mesh.size, count,
                                          "(" + ",".join(map(str, mesh.axis_sizes)) + ")"))


def explicit_typed(out: Out, assignment: DeviceList) -> bool:
    """Whether PROG-5 places ``out`` when it is left unspecified: its type's mesh has an
    Explicit axis, the description gives its split, and the device assignment is of the
    mesh's size (over a mesh of Explicit axes only AD-9 holds that; over a mixed one JAX
    fails to make the mesh concrete, which the spec does not describe)."""
    return out.spec is not None and out.mesh is not None and \
        AxisType.Explicit in out.mesh.axis_types and out.mesh.size == len(assignment)


def compiled_results(specified: Sequence[Any], compiler: Sequence[HloSharding | None],
                     assignment: DeviceList, memory: Sequence[str | None]) -> list[Any]:
    """What the executable reports before recovery: the given sharding, else the compiler's."""
    outs = []
    for s, choice, kind in zip(specified, compiler, memory):
        if isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh):
            s = NamedSharding(Mesh(s.mesh.axis_sizes, s.mesh.axis_names, assignment,
                                   s.mesh.axis_types), s.spec, memory_kind=s.memory_kind)
        if s is not UNSPECIFIED:
            outs.append(s)
        elif len(assignment) == 1:
            outs.append(GSPMDSharding(assignment, Replicated(), memory_kind=kind))
        elif choice is None:
            outs.append(UNSPECIFIED)
        else:
            outs.append(GSPMDSharding(assignment, choice, memory_kind=kind))
    return outs


def compiled_inputs(resolved: Sequence[Any], compiler: Sequence[HloSharding | None],
                    assignment: DeviceList) -> list[Any]:
    """What the executable is compiled to take, before recovery: the resolved sharding, else
    (jit left the input open) the compiler's choice — replicated on a one-device program,
    where no partitioner runs — else UNSPECIFIED (the choice is not known)."""
    taken = []
    for s, choice in zip(resolved, compiler):
        if s is not UNSPECIFIED:
            taken.append(s)
        elif len(assignment) == 1:
            taken.append(GSPMDSharding(assignment, Replicated()))
        elif choice is None:
            taken.append(UNSPECIFIED)
        else:
            taken.append(GSPMDSharding(assignment, choice))
    return taken
