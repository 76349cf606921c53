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
from typing import Any, Sequence

import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from . import internals
from .rules import EngineRejection, reject, rule
from .shardings import UNSPECIFIED, devices_of, hlo, is_abstract, jax_equivalent

__all__ = ["Value", "spec_from_hlo", "recover_shardings", "single_device_results",
           "compiled_results", "raw", "concrete_inputs", "concrete_mesh"]


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


def _unreadable(error_type: type, text: str, mesh: Any, why: str, jax_error: str) -> EngineRejection:
    return reject("OUT-2", error_type,
                  f"the compiler placed the result with {text}, which cannot be written as a "
                  f"PartitionSpec over the mesh {mesh}: {why}", jax_error=jax_error)


def _runs(flat: list[int], text: str, mesh: Any) -> list[tuple[int, int]]:
    """(size, stride) runs, minor first, that generate a tile assignment's positions."""
    if flat[0] != 0:
        raise _unreadable(NotImplementedError, text, mesh,
                          "its tile assignment does not start at position 0",
                          "NotImplementedError")
    runs = []
    while len(flat) > 1:
        stride = flat[1]
        size = 1
        while size < len(flat) and flat[size] == size * stride:
            size += 1
        runs.append((size, stride))
        flat = flat[::size]
    return runs


@rule("OUT-2")
def spec_from_hlo(h: Any, mesh: Mesh, memory_kind: Any = None) -> NamedSharding:
    """An HLO sharding reads back as a PartitionSpec over a mesh when its tile assignment is the mesh's device order transposed: each tiled dimension takes, in that order, mesh axes whose sizes divide it."""
    return _spec_from_hlo(h, mesh, memory_kind)


@functools.lru_cache(maxsize=4096)
def _spec_from_hlo(h: Any, mesh: Mesh, memory_kind: Any) -> NamedSharding:
    text = str(h)
    if h.is_replicated():
        return NamedSharding(mesh, PartitionSpec(), memory_kind=memory_kind)
    if h.is_maximal():
        if mesh.size != 1:
            raise _unreadable(AssertionError, text, mesh, "it is a maximal sharding",
                              "AssertionError")
        return NamedSharding(mesh, PartitionSpec(), memory_kind=memory_kind)
    if not h.is_tiled():
        raise _unreadable(AssertionError, text, mesh, "it is neither tiled nor replicated",
                          "AssertionError")
    sizes = {n: s for n, s in zip(mesh.axis_names, mesh.axis_sizes) if s != 1}
    order = _axis_order(h, mesh, sizes, text)
    partitions = _partitions(h, mesh, sizes, order, text)
    entries = [None if not p else p[0] if len(p) == 1 else p for p in partitions]
    return NamedSharding(mesh, PartitionSpec(*entries), memory_kind=memory_kind)


def _axis_order(h: Any, mesh: Mesh, sizes: dict[str, int], text: str) -> list[str]:
    """The mesh axes, in the order the tile assignment walks them (major first)."""
    strides: dict[str, int] = {}
    acc = 1
    for name in reversed(list(sizes)):
        strides[name] = acc
        acc *= sizes[name]
    size_at = {strides[n]: sizes[n] for n in sizes}
    name_of = {(sizes[n], strides[n]): n for n in sizes}

    def lookup(table: dict, key: Any, why: str) -> Any:
        if key not in table:
            raise _unreadable(KeyError, text, mesh, why, "KeyError")
        return table[key]

    order: list[str] = []
    for size, stride in reversed(_runs(list(h.tile_assignment_devices()), text, mesh)):
        # A run of devices may span several mesh axes: split it at each axis boundary
        pieces = []
        target = lookup(size_at, stride, f"no mesh axis has stride {stride}")
        while size > target:
            if not (target > 1 and size % target == 0):
                raise _unreadable(AssertionError, text, mesh,
                                  f"a run of {size} devices does not split into mesh axes",
                                  "AssertionError")
            pieces.append((target, stride))
            size //= target
            stride *= target
            target = lookup(size_at, stride, f"no mesh axis has stride {stride}")
        if size != target:
            raise _unreadable(AssertionError, text, mesh,
                              f"a run of {size} devices does not match a mesh axis",
                              "AssertionError")
        pieces.append((size, stride))
        for piece in reversed(pieces):
            order.append(lookup(name_of, piece, f"no mesh axis has size {piece[0]} at stride "
                                                f"{piece[1]}"))
    return order


def _partitions(h: Any, mesh: Mesh, sizes: dict[str, int], order: list[str],
                text: str) -> list[tuple[str, ...]]:
    """The mesh axes each tiled dimension takes (whole axes, in ``order``), trailing empties dropped."""
    partitions: list[tuple[str, ...]] = []
    axes = iter(order)
    for dim, tile in enumerate(h.tile_assignment_dimensions()):
        taken: list[str] = []
        while tile > 1:
            axis = next(axes, None)
            if axis is None:
                raise _unreadable(AssertionError, text, mesh,
                                  "the mesh axes run out before the tiles do", "AssertionError")
            # Each tile dimension takes whole mesh axes
            if tile % sizes[axis]:
                raise _unreadable(ValueError, text, mesh,
                                  f"tile dimension {dim} of size {tile} is not a multiple of "
                                  f"mesh axis {axis!r} of size {sizes[axis]}", "IndivisibleError")
            tile //= sizes[axis]
            taken.append(axis)
        partitions.append(tuple(taken))
    subgroups = list(h.subgroup_types())
    if h.replicate_on_last_tile_dim():
        partitions = partitions[:-1]
    elif subgroups:
        kinds = {str(t).rsplit(".", 1)[-1] for t in subgroups}
        if len(subgroups) > 1 or kinds != {"REPLICATED"}:
            raise _unreadable(NotImplementedError, text, mesh,
                              "it has subgroups other than one replicated one",
                              "NotImplementedError")
        partitions = partitions[:-1]
    while partitions and partitions[-1] == ():
        partitions.pop()
    return partitions


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
                      given_values: Sequence[Value], context: Any) -> list[Any]:
    """A value the compiler placed (a GSPMDSharding) comes back in the type of a sharding the user gave, where there is one.

    The type is that of the first NamedSharding or SingleDeviceSharding the user gave (that
    sharding itself when JAX-equivalent, else re-read over its mesh), else of the first such
    among the placed values, else a NamedSharding over the context mesh; the value stays a
    GSPMDSharding when none applies or re-reading fails.
    """
    if not any(isinstance(o, internals.GSPMDSharding) for o in placed):
        return list(placed)
    origin = None
    for s, value in [*zip(given, given_values), *((s, None) for s in placed)]:
        if isinstance(s, (NamedSharding, SingleDeviceSharding)):
            origin = (s, value)
            break
    if origin is None:
        if isinstance(context, Mesh):
            return [spec_from_hlo(o._hlo_sharding, context, o.memory_kind)
                    if isinstance(o, internals.GSPMDSharding) else o for o in placed]
        return list(placed)
    user, user_value = origin
    out = []
    for o, value in zip(placed, values):
        if not isinstance(o, internals.GSPMDSharding):
            out.append(o)
        elif isinstance(user, SingleDeviceSharding):
            out.append(SingleDeviceSharding(devices_of(o)[0], memory_kind=o.memory_kind))
        elif (user_value is not None and user_value.rank == value.rank
              and value.mesh == user.mesh.abstract_mesh
              and jax_equivalent(o, user, value.rank)):
            out.append(user)
        else:
            mesh = _mesh_for_result(value, user.mesh, o)
            try:
                if mesh is None:
                    raise _unreadable(AssertionError, str(o._hlo_sharding), value.mesh,
                                      "the mesh sizes differ", "AssertionError")
                out.append(spec_from_hlo(o._hlo_sharding, mesh, o.memory_kind))
            except EngineRejection as error:
                if error.jax_error == "IndivisibleError":
                    raise
                out.append(o)
    return out


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
                     assignment: tuple) -> list[Any]:
    """What the executable reports before recovery: the given sharding, else the compiler's."""
    out = []
    for s, choice in zip(specified, chosen):
        if s is not UNSPECIFIED:
            out.extend(concrete_inputs([s], assignment))
        elif len(assignment) == 1:
            out.append(internals.GSPMDSharding.get_replicated(
                tuple(assignment), memory_kind=choice.memory_kind))
        else:
            out.append(choice)
    return out
