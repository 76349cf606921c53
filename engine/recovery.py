"""The shardings results come back with (OUT-1..3).

The compiler places what jit left open and reports it as an HLO sharding over the device
assignment; jit then writes it back in the user's terms: over the mesh of the first
NamedSharding (or as the first SingleDeviceSharding) the user gave (OUT-1), reading the
tile assignment as a PartitionSpec (OUT-2), and on one device as a SingleDeviceSharding
(OUT-3). The engine needs this for every signature that reuses an executable compiled for
another, placement-equal one: the placements are the executable's, the words are this
call's.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from . import internals
from .rules import EngineRejection, note, reject, rule
from .shardings import UNSPECIFIED, devices_of, hlo, hlo_equal, is_abstract, jax_equivalent

__all__ = ["Value", "spec_from_hlo", "recover_shardings", "single_device_results",
           "compiled_results", "placed_by_type", "typed_result", "raw", "concrete_inputs", "concrete_mesh"]


class Value:
    """A value's type as recovery reads it: its rank and the abstract mesh it carries."""

    __slots__ = ("rank", "mesh")

    def __init__(self, rank: int, mesh: AbstractMesh | None) -> None:
        self.rank = rank
        self.mesh = mesh

    @classmethod
    def of_aval(cls, aval: Any) -> "Value":
        mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
        if mesh is None or mesh.empty:
            mesh = None
        return cls(len(aval.shape), mesh)


def raw(sharding: Any, rank: int) -> Any:
    """A sharding as the compiler reports it: its HLO sharding over its device list."""
    if isinstance(sharding, internals.GSPMDSharding):
        return sharding
    return _gspmd(devices_of(sharding), hlo(sharding, rank), sharding.memory_kind)


@functools.lru_cache(maxsize=4096)
def _gspmd(devices: tuple, h: Any, memory_kind: Any) -> Any:
    return internals.GSPMDSharding(devices, h, memory_kind=memory_kind)


class Unreadable(NamedTuple):
    """Why an HLO sharding cannot be read back as a PartitionSpec over a mesh (OUT-2): the
    built-in class of the refusal, the reason, and the class JAX raises for it."""

    error_type: type
    why: str
    jax_error: str

    def rejection(self, text: str, mesh: Any, path: str | None) -> EngineRejection:
        return reject("OUT-2", self.error_type,
                      f"the compiler placed the result with {text}, which cannot be written "
                      f"as a PartitionSpec over the mesh {mesh}: {self.why}", path,
                      jax_error=self.jax_error)


@rule("OUT-2")
def spec_from_hlo(h: Any, mesh: Mesh, memory_kind: Any = None,
                  path: str | None = None) -> NamedSharding:
    """An HLO sharding reads back as a PartitionSpec over a mesh when its tile assignment is the mesh's device order transposed: each tiled dimension takes, in that order, mesh axes whose sizes divide it.

    ``path`` is the argument or result a refusal is about.
    """
    read = _read_hlo(h, mesh, memory_kind)
    if isinstance(read, Unreadable):
        raise read.rejection(str(h), mesh, path)
    return read


@functools.lru_cache(maxsize=4096)
def _read_hlo(h: Any, mesh: Mesh, memory_kind: Any) -> NamedSharding | Unreadable:
    """:func:`spec_from_hlo`'s answer, or why there is none (both kept: the cache is keyed
    by HLO sharding and mesh, of which a program has few)."""
    if h.is_replicated() or (h.is_maximal() and mesh.size == 1):
        return NamedSharding(mesh, PartitionSpec(), memory_kind=memory_kind)
    if h.is_maximal():
        return Unreadable(AssertionError, "it is a maximal sharding", "AssertionError")
    if not h.is_tiled():
        return Unreadable(AssertionError, "it is neither tiled nor replicated", "AssertionError")
    axes = [(n, s) for n, s in zip(mesh.axis_names, mesh.axis_sizes) if s != 1]
    order = _walk_order(np.asarray(h.tile_assignment_devices(), dtype=np.int64), axes)
    if isinstance(order, Unreadable):
        return order
    taken = _axes_per_dimension(list(h.tile_assignment_dimensions()), order, dict(axes))
    if isinstance(taken, Unreadable):
        return taken
    kinds = [str(t).rsplit(".", 1)[-1] for t in h.subgroup_types()]
    if h.replicate_on_last_tile_dim() or kinds == ["REPLICATED"]:
        taken = taken[:-1]    # the last tile dimension replicates: no dimension of the value
    elif kinds:
        return Unreadable(NotImplementedError, "it has subgroups other than one replicated one",
                          "NotImplementedError")
    while taken and not taken[-1]:
        taken.pop()
    return NamedSharding(mesh, PartitionSpec(*(
        None if not names else names[0] if len(names) == 1 else names for names in taken)),
        memory_kind=memory_kind)


def _blocks(positions: np.ndarray) -> list[tuple[int, int]] | Unreadable:
    """How the tile assignment steps through the mesh's positions: (stride, length) blocks,
    the minor-most first.

    The minor-most block is the longest stretch from position 0 that advances by one
    stride; the positions where its repeats start, taken alone, make the next block, and
    so on until one block spans them all.
    """
    if positions[0] != 0:
        return Unreadable(NotImplementedError, "its tile assignment does not start at "
                          "position 0", "NotImplementedError")
    found: list[tuple[int, int]] = []
    period = 1
    while period < len(positions):
        starts = positions[::period]
        stride = int(starts[1])
        off = np.flatnonzero(starts != stride * np.arange(len(starts), dtype=np.int64))
        length = int(off[0]) if off.size else len(starts)
        found.append((stride, length))
        period *= length
    return found


def _walk_order(positions: np.ndarray, axes: list[tuple[str, int]]) -> list[str] | Unreadable:
    """The mesh axes (of size > 1, in mesh order) in the order the tile assignment walks
    them, major first: each block of the walk must be whole mesh axes that stand next to
    each other in the mesh, its stride the stride of the minor-most of them."""
    blocks = _blocks(positions)
    if isinstance(blocks, Unreadable):
        return blocks
    # Row-major strides of the axes, and for each axis (by its stride) the device counts of
    # the runs of neighbouring axes that end at it: length -> the axes, major first.
    stride_of = {}
    step = 1
    for name, size in reversed(axes):
        stride_of[name] = step
        step *= size
    spans: dict[int, dict[int, list[str]]] = {}
    for m, (minor, _) in enumerate(axes):
        count = 1
        runs = spans.setdefault(stride_of[minor], {})
        for j in range(m, -1, -1):
            count *= axes[j][1]
            runs[count] = [name for name, _ in axes[j:m + 1]]
    order: list[str] = []
    for stride, length in reversed(blocks):   # the major-most block first
        runs = spans.get(stride)
        if runs is None:
            return Unreadable(KeyError, f"no mesh axis has stride {stride}", "KeyError")
        if length not in runs:
            return _not_whole_axes(stride, length, runs, step)
        order += runs[length]
    return order


def _not_whole_axes(stride: int, length: int, runs: dict[int, list[str]],
                    total: int) -> Unreadable:
    """Why a block of ``length`` positions at ``stride`` is not a run of neighbouring mesh
    axes: it outgrows the mesh (a multiple of every axis from its own to the major-most),
    or it ends inside an axis."""
    widest = max(runs)
    if length % widest == 0:
        return Unreadable(KeyError, f"a block of {length} devices at stride {stride} "
                          f"outgrows the mesh: no mesh axis has stride {total}", "KeyError")
    return Unreadable(AssertionError, f"a block of {length} devices at stride {stride} "
                      "does not split into whole mesh axes", "AssertionError")


def _axes_per_dimension(tiles: list[int], order: list[str],
                        sizes: dict[str, int]) -> list[tuple[str, ...]] | Unreadable:
    """The mesh axes each tile dimension takes: the next ones in ``order``, up to where the
    running product of the axis sizes reaches the running product of the tile counts."""
    reach = [1]
    for name in order:
        reach.append(reach[-1] * sizes[name])
    taken: list[tuple[str, ...]] = []
    done = 0          # axes taken by the dimensions before
    needed = 1        # devices the dimensions so far span
    for dim, tile in enumerate(tiles):
        needed *= tile
        end = done
        while reach[end] < needed:
            if end == len(order):
                return Unreadable(AssertionError, "the mesh axes run out before the tiles do",
                                  "AssertionError")
            if needed % reach[end + 1]:
                left = needed // reach[end]
                return Unreadable(ValueError, f"tile dimension {dim} of size {left} is not a "
                                  f"multiple of mesh axis {order[end]!r} of size "
                                  f"{sizes[order[end]]}", "IndivisibleError")
            end += 1
        taken.append(tuple(order[done:end]))
        done = end
    return taken


@functools.lru_cache(maxsize=1024)
def concrete_mesh(abstract: AbstractMesh, devices: tuple) -> Mesh:
    array = np.empty(len(devices), dtype=object)
    array[:] = devices
    return Mesh(array.reshape(abstract.axis_sizes), abstract.axis_names,
                axis_types=abstract.axis_types)


def _mesh_for_result(value: Value, given: Mesh, placed: Any) -> Mesh | None:
    """The mesh a result is re-read over: its type's mesh made concrete, else the input's."""
    typed = value.mesh
    if typed is None or AxisType.Manual in typed.axis_types:
        return given
    devices = devices_of(placed)
    if typed.size != len(devices):
        return None
    return concrete_mesh(typed, tuple(devices))


@rule("OUT-1")
def recover_shardings(placed: Sequence[Any], values: Sequence[Value], given: Sequence[Any],
                      given_values: Sequence[Value], context: Any,
                      path: str | None = None) -> list[Any]:
    """A value the compiler placed (a GSPMDSharding) comes back in the type of a sharding the user gave, where there is one.

    The type is that of the first NamedSharding or SingleDeviceSharding the user gave (that
    sharding itself when JAX-equivalent, else re-read over its mesh), else of the first such
    among the placed values, else a NamedSharding over the context mesh; the value stays a
    GSPMDSharding when none applies or re-reading fails. ``path`` is the argument or result
    a refusal (OUT-2) is about.
    """
    compiler_placed = [isinstance(o, internals.GSPMDSharding) for o in placed]
    if not any(compiler_placed):
        return list(placed)
    typed = _user_type(given, given_values, placed)
    if typed is not None:
        user, user_value = typed
        return [_in_type_of(o, value, user, user_value, path) if mine else o
                for o, value, mine in zip(placed, values, compiler_placed)]
    if not isinstance(context, Mesh):
        return list(placed)
    return [spec_from_hlo(o._hlo_sharding, context, o.memory_kind, path) if mine else o
            for o, mine in zip(placed, compiler_placed)]


def _user_type(given: Sequence[Any], given_values: Sequence[Value],
               placed: Sequence[Any]) -> tuple[Any, Value | None] | None:
    """The sharding whose type the results take, with its value's type (None when the
    user did not give it): the first NamedSharding or SingleDeviceSharding given, else
    placed; None when there is none."""
    kinds = (NamedSharding, SingleDeviceSharding)
    for s, value in zip(given, given_values):
        if isinstance(s, kinds):
            return s, value
    return next(((s, None) for s in placed if isinstance(s, kinds)), None)


def _in_type_of(o: Any, value: Value, user: Any, user_value: Value | None,
                path: str | None) -> Any:
    """A compiler-placed sharding ``o`` in the type of the user's sharding ``user``."""
    if isinstance(user, SingleDeviceSharding):
        return SingleDeviceSharding(devices_of(o)[0], memory_kind=o.memory_kind)
    same_type = (user_value is not None and user_value.rank == value.rank
                 and value.mesh == user.mesh.abstract_mesh)
    if same_type and jax_equivalent(o, user, value.rank):
        return user
    mesh = _mesh_for_result(value, user.mesh, o)
    if mesh is None:
        return o     # the value's type has a mesh of another size: nothing to re-read over
    note("OUT-2")
    read = _read_hlo(o._hlo_sharding, mesh, o.memory_kind)
    if not isinstance(read, Unreadable):
        return read
    if read.jax_error == "IndivisibleError":     # JAX raises this one; the rest it passes over
        raise read.rejection(str(o._hlo_sharding), mesh, path)
    return o


@rule("OUT-3")
def single_device_results(outs: Sequence[Any], assignment: Sequence[Any]) -> list[Any]:
    """On a one-device program, a result still placed by an HLO sharding comes back as a SingleDeviceSharding on that device."""
    if len(assignment) != 1:
        return list(outs)
    return [SingleDeviceSharding(assignment[0], memory_kind=o.memory_kind)
            if isinstance(o, internals.GSPMDSharding) else o for o in outs]


def concrete_inputs(shardings: Sequence[Any], assignment: tuple) -> list[Any]:
    """Shardings over abstract meshes, made concrete over the device assignment."""
    out = []
    for s in shardings:
        if is_abstract(s):
            s = NamedSharding(concrete_mesh(s.mesh, tuple(assignment)), s.spec,
                              memory_kind=s.memory_kind)
        out.append(s)
    return out


def compiled_results(specified: Sequence[Any], chosen: Sequence[Any],
                     assignment: tuple, avals: Sequence[Any] | None = None) -> list[Any]:
    """What the executable reports before recovery: the given sharding, else the compiler's
    (a result its type places, given ``avals``, as :func:`typed_result` reads it: PROG-5)."""
    out = []
    for k, (s, choice) in enumerate(zip(specified, chosen)):
        if s is UNSPECIFIED and avals is not None and placed_by_type(avals[k], choice,
                                                                     assignment):
            out.append(typed_result(avals[k], choice, assignment))
        elif s is not UNSPECIFIED:
            out.extend(concrete_inputs([s], assignment))
        elif len(assignment) == 1:
            out.append(internals.GSPMDSharding.get_replicated(
                tuple(assignment), memory_kind=choice.memory_kind))
        else:
            out.append(choice)
    return out


def placed_by_type(aval: Any, choice: Any, assignment: tuple) -> bool:
    """Whether PROG-5 places a result left unspecified: its type's mesh has an Explicit axis
    and no Manual one and is of the device assignment's size, and the compiler reports an
    HLO sharding for it (a result whose type has unreduced or reduced axes comes back as
    the executable reports it, on its type already)."""
    mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
    if mesh is None or mesh.empty or not isinstance(choice, internals.GSPMDSharding):
        return False
    kinds = mesh.axis_types
    return AxisType.Explicit in kinds and AxisType.Manual not in kinds and \
        mesh.size == len(assignment)


@rule("PROG-5")
def typed_result(aval: Any, choice: Any, assignment: tuple) -> Any:
    """A result left unspecified whose type's mesh has an Explicit axis comes back on its type's split over that mesh made concrete on the device assignment.

    Over a mesh of Explicit axes only, that is where it comes back. Over a mesh with Auto
    axes too, jit leaves the dimensions the type does not split open for the compiler: the
    result comes back as its type writes it (every dimension) when the compiler placed it
    so, else the compiler's placement re-read over that mesh (OUT-2, trailing unsplit
    dimensions dropped), else the compiler's GSPMDSharding ``choice`` for OUT-1. Applies
    where :func:`placed_by_type` holds; a mesh of another size than the device assignment
    is refused before lowering (AD-9 over Explicit axes only,
    :func:`~.resolution.check_typed_result_mesh` over a mixed mesh).
    """
    typed = aval.sharding
    mesh = typed.mesh
    rank = len(aval.shape)
    written = NamedSharding(concrete_mesh(mesh, tuple(assignment)), typed.spec,
                            memory_kind=choice.memory_kind)
    if AxisType.Auto not in mesh.axis_types or hlo_equal(hlo(written, rank),
                                                         choice._hlo_sharding):
        return written
    note("OUT-2")
    read = _read_hlo(choice._hlo_sharding, written.mesh, choice.memory_kind)
    return choice if isinstance(read, Unreadable) else read
