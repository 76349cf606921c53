"""vmap of a jit call: how batching rewrites a call's shardings (BAT rules).

``jax.vmap(jax.jit(f, in_shardings=..., out_shardings=...))`` does not run the jit call
once per example: batching rewrites the call's equation into one call on the batched
values, and each sharding of the equation gains the batch dimension. The argument (or
result) keeps its sharding when it is not batched (BAT-1); without ``spmd_axis_name`` the
batch dimension is inserted unsplit (BAT-2); with it, the batch dimension is split over
the named mesh axes (BAT-3), which must not split the value already (BAT-4), must be axes
of the mesh (BAT-5), and need a mesh to be read on (BAT-6). An inner vmap can make a spec
longer than the value, which the outer one refuses (BAT-7), and a jit call given layouts is
not batched at all (BAT-8). Arrays whose types already split the mapped dimension over
Explicit mesh axes make vmap batch over those axes, with the jit's batch dimension unsplit
(BAT-9); vmap neither maps an argument nor broadcasts an unbatched result whose type has
unreduced or reduced axes (BAT-10: :func:`vmap_jit` reads the mapped arguments' types, a
whole program's vmap its results' too). BAT-0 checks the parameters.

Two public functions: :func:`batch_sharding` answers for one sharding, :func:`vmap_jit`
for a whole call, as JAX 0.10.2 builds the batched equation
(``jax._src.pjit._pjit_batcher``). A nested vmap applies :func:`vmap_jit` again, to the
shardings the inner vmap gave.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.dims import check_dims, check_rank_count, is_int
from ..core.hlo import Maximal, Replicated, Tiled
from ..jit.layouts import Format
from ..placement.blocks import to_hlo
from ..core.rules import Failure, located, reject, require, rule
from ..core.shardings import AUTO, UNSPECIFIED, GSPMDSharding, NamedSharding, Sharding, \
    SingleDeviceSharding
from ..core.values import UNCONSTRAINED, AbstractMesh, AxisType, Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = ["batch_sharding", "vmap_jit", "BatchedJit"]


@dataclasses.dataclass(frozen=True)
class BatchedJit:
    """The jit equation that vmap builds: its shardings per argument and per result (flat, in order) and the batch size."""

    in_shardings: tuple
    out_shardings: tuple
    axis_size: int


# --------------------------------------------------------------------------- BAT-0

@dataclasses.dataclass(frozen=True)
class BadVmapParameter(Failure, rule="BAT-0"):
    template = "{parameter} {problem}, got {value!r}"
    parameter: str
    problem: str
    value: Any


@dataclasses.dataclass(frozen=True)
class BadVmapParameterType(BadVmapParameter, error=TypeError):
    pass


def _in_axes(in_axes: Any, count: int) -> tuple[int | None, ...]:
    """vmap's in_axes as one entry per argument (a list is read as a tuple, as vmap does)."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if in_axes is None or type(in_axes) is int:
        return (in_axes,) * count
    if type(in_axes) is not tuple:
        raise reject(BadVmapParameterType(
            "in_axes", "must be an int, None, or a tuple with one entry per argument", in_axes))
    for entry in in_axes:
        if isinstance(entry, (tuple, list, dict)):
            raise reject(BadVmapParameter(
                "in_axes", "must hold an int or None for each array argument", in_axes))
        require(entry is None or type(entry) is int, lambda: BadVmapParameterType(
            "in_axes", "must hold an int or None for each argument", in_axes))
    require(len(in_axes) == count, lambda: BadVmapParameter(
        "in_axes", f"must have one entry per argument ({count})", in_axes))
    return in_axes


@rule("BAT-0", mirrors="jax._src.api.vmap; jax._src.api._mapped_axis_size")
def check_vmap_parameters(arg_shapes: Any, in_axes: Any, axis_size: Any
                          ) -> tuple[tuple[tuple[int, ...], ...], tuple[int | None, ...], int]:
    """vmap's parameters are well-formed: in_axes holds an int or None per argument, each mapped axis lies within its argument's rank, and every mapped axis has the batch size (axis_size where given).

    The answer is the shapes, the mapped axes counted from the front, and the batch size.

    >>> check_vmap_parameters([(4, 8), (8, 4)], (0, 1), None)
    (((4, 8), (8, 4)), (0, 1), 4)
    >>> check_vmap_parameters([(4, 8)], 2, None)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [BAT-0] at args[0]: in_axes maps axis 2 of an argument of shape (4, 8), whose rank should be at least 3, got 2
    """
    if isinstance(arg_shapes, (str, bytes, dict)) or not isinstance(arg_shapes, (tuple, list)):
        raise reject(BadVmapParameterType("arg_shapes", "must be a list of shapes", arg_shapes))
    shapes = tuple(check_dims(shape, what="an argument's shape") for shape in arg_shapes)
    axes = _in_axes(in_axes, len(shapes))
    canonical: list[int | None] = []
    for i, (shape, axis) in enumerate(zip(shapes, axes)):
        if axis is not None:
            least = axis + 1 if axis >= 0 else -axis
            with located(f"args[{i}]"):
                require(-len(shape) <= axis < len(shape), lambda: BadVmapParameter(
                    "in_axes", f"maps axis {axis} of an argument of shape {shape}, whose rank "
                               f"should be at least {least}", axis))
            axis %= len(shape)
        canonical.append(axis)
    sizes = {shape[a] for shape, a in zip(shapes, canonical) if a is not None}
    if axis_size is not None:
        require(is_int(axis_size) and type(axis_size) is int and axis_size >= 0,
                lambda: BadVmapParameterType("axis_size", "must be None or a size", axis_size))
        sizes.add(axis_size)
    require(len(sizes) <= 1, lambda: BadVmapParameter(
        "the mapped axes", "must all have one size (and axis_size, where given)",
        tuple(sorted(sizes))))
    require(len(sizes) == 1, lambda: BadVmapParameter(
        "in_axes", "must map at least one argument, or axis_size be given", in_axes))
    return shapes, tuple(canonical), sizes.pop()


def _spmd_names(spmd_axis_name: Any) -> tuple[str, ...] | None:
    """BAT-0 for spmd_axis_name: None, one mesh axis name, or a tuple of them."""
    if spmd_axis_name is None:
        return None
    names = spmd_axis_name if type(spmd_axis_name) is tuple else (spmd_axis_name,)
    for name in names:
        require(isinstance(name, str), lambda: BadVmapParameterType(
            "spmd_axis_name", "must be None, a mesh axis name or a tuple of names",
            spmd_axis_name))
    return names


def _leaves(shardings: Any, count: int, parameter: str) -> tuple[Any, ...]:
    """BAT-0 for a list of jit shardings: one per argument (or result), each a sharding,
    UNSPECIFIED or AUTO."""
    if not isinstance(shardings, (tuple, list)):
        raise reject(BadVmapParameterType(parameter, "must be a list of shardings", shardings))
    require(len(shardings) == count, lambda: BadVmapParameter(
        parameter, f"must hold one sharding for each of the {count} values", shardings))
    for leaf in shardings:
        require(isinstance(leaf, (Sharding, Format)) or leaf is UNSPECIFIED or leaf is AUTO,
                lambda leaf=leaf: BadVmapParameterType(
                    parameter, "must hold shardings, Formats, UNSPECIFIED or AUTO", leaf))
    return tuple(shardings)


def _sharding_part(leaf: Any) -> Any:
    """The sharding of a jit shardings leaf (a Format's, UNSPECIFIED where it has none)."""
    if isinstance(leaf, Format):
        return UNSPECIFIED if leaf.sharding is None else leaf.sharding
    return leaf


def _batch_axis(batch_axis: Any, rank: int, parameter: str) -> int | None:
    """BAT-0 for a batch axis: None, or an axis of the batched value (rank ``rank + 1``),
    counted from the front."""
    if batch_axis is None:
        return None
    require(type(batch_axis) is int, lambda: BadVmapParameterType(
        parameter, "must be None or an int", batch_axis))
    require(-(rank + 1) <= batch_axis <= rank, lambda: BadVmapParameter(
        parameter, f"must be an axis of the batched value, of rank {rank + 1}", batch_axis))
    return batch_axis % (rank + 1)


def _context(context_mesh: Any) -> Mesh | AbstractMesh | None:
    """BAT-0 for the context mesh (jax.set_mesh): None or a mesh."""
    require(context_mesh is None or isinstance(context_mesh, (Mesh, AbstractMesh)),
            lambda: BadVmapParameterType("context_mesh", "must be None or a Mesh", context_mesh))
    return context_mesh


# --------------------------------------------------------------------------- BAT-1

@rule("BAT-1", mirrors="jax._src.pjit._pjit_batcher; jax._src.pjit._pjit_batcher_for_sharding")
def keeps_sharding(sharding: Any, batch_axis: int | None) -> bool:
    """A value that vmap does not batch keeps its jit sharding, and so does a value whose sharding jit leaves open (UNSPECIFIED, or AUTO as older JAX had it).

    >>> keeps_sharding(UNSPECIFIED, 0), keeps_sharding(SingleDeviceSharding(0), None)
    (True, True)
    >>> keeps_sharding(SingleDeviceSharding(0), 0)
    False
    """
    return batch_axis is None or sharding is UNSPECIFIED or sharding is AUTO


# --------------------------------------------------------------------------- reading tiles

def _axes_of(entry: Any) -> tuple[str, ...]:
    if isinstance(entry, tuple):
        return entry
    return (entry,) if isinstance(entry, str) else ()


def _entry(axes: tuple[str, ...]) -> Any:
    """A PartitionSpec entry for the axes that split one dimension (none: None)."""
    return None if not axes else axes[0] if len(axes) == 1 else axes


def _trimmed(parts: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    while parts and not parts[-1]:
        parts.pop()
    return parts


@dataclasses.dataclass(frozen=True)
class _Tiles:
    """What JAX reads back from a NamedSharding's tiles at some rank (its HLO sharding, read
    as a spec on the same mesh): the axes per tile dimension, or why there are none."""

    parts: list[tuple[str, ...]]
    kind: str   # "replicated", "tiled", "untiled" (no tiles, unreduced copies), "mixed" (two kinds)


def _read_named(sharding: NamedSharding, ndim: int) -> _Tiles:
    """The tiles of a NamedSharding at rank ``ndim``, without enumerating devices: mesh axes
    of size 1 vanish, reduced axes are not in the tiles, and a subgroup of unreduced copies
    reads as one more dimension (JAX reads only replicated copies as copies)."""
    mesh, spec = sharding.mesh, sharding.spec
    size = mesh.sizes_by_name
    parts = [tuple(a for a in _axes_of(e) if size[a] != 1) for e in spec.partitions]
    parts += [()] * (ndim - len(parts))
    split = {a for axes in parts for a in axes}
    unreduced = tuple(a for a in mesh.axis_names if a in spec.unreduced and size[a] != 1)
    copied = [a for a in mesh.nontrivial_axes if a not in split and a not in spec.unreduced]
    if not split and not unreduced:
        return _Tiles([], "replicated")
    if unreduced and copied:
        return _Tiles([], "mixed")
    if unreduced and not split:
        return _Tiles([], "untiled")
    return _Tiles(_trimmed(parts + [unreduced]), "tiled")


def with_unit_dim(hlo: Any, batch_axis: int) -> Any:
    """The HLO sharding with a tile dimension of 1 inserted at ``batch_axis`` (an HLO
    sharding without tiles stays as it is)."""
    if not isinstance(hlo, Tiled):
        return hlo
    dims = hlo.dims[:batch_axis] + (1,) + hlo.dims[batch_axis:]
    return Tiled.trusted(dims, hlo.assignment, hlo.subgroups)


def _replicates(sharding: Any, ndim: int) -> bool:
    """Whether the sharding's HLO at rank ``ndim`` is replicated or over one device."""
    if isinstance(sharding, NamedSharding):
        return _read_named(sharding, ndim).kind == "replicated"
    if isinstance(sharding, SingleDeviceSharding):
        return True
    hlo = sharding.hlo
    return isinstance(hlo, Replicated) or hlo.num_devices == 1


def _inserted(parts: list[Any], batch_axis: int, entry: Any) -> list[Any]:
    """``entry`` at ``batch_axis``, the spec padded with empty entries up to it first."""
    parts = list(parts) + [()] * (batch_axis - len(parts))
    return parts[:batch_axis] + [entry] + parts[batch_axis:]


# --------------------------------------------------------------------------- BAT-2

@dataclasses.dataclass(frozen=True)
class CannotBatch(Failure, rule="BAT-2"):
    template = "{sharding} cannot gain a batch dimension at axis {axis}: {reason}"
    sharding: Any
    axis: int
    reason: str


@dataclasses.dataclass(frozen=True)
class NoWayBack(CannotBatch, error=KeyError):
    pass


@rule("BAT-2", mirrors="jax._src.pjit._pjit_batcher_for_sharding (spmd_axis_name None)")
def batch_unsplit(sharding: Any, batch_axis: int, rank: int) -> Any:
    """Without spmd_axis_name the batch dimension is inserted unsplit at the batch axis.

    A sharding that replicates the value is kept as it is, memory kind included.

    On an abstract mesh UNCONSTRAINED is inserted in the spec; the mesh needs an Auto
    axis and the spec no unreduced or reduced axes.

    On a concrete mesh the spec read back from the tiles gets None inserted: axes of
    size 1 and reduced axes vanish, trailing Nones go, the memory kind becomes the default;
    tiles holding two kinds of copies, or only unreduced ones, stay a GSPMDSharding.

    A GSPMDSharding that does not replicate the value is refused (KeyError).

    >>> mesh = Mesh.iota((2, 4, 1), ("x", "y", "one"))
    >>> batch_unsplit(NamedSharding(mesh, P("x", "one")), 0, 2)
    NamedSharding(Mesh({'x': 2, 'y': 4, 'one': 1}), P(None, 'x'))
    >>> batch_unsplit(NamedSharding(mesh, P("one")), 0, 2)
    NamedSharding(Mesh({'x': 2, 'y': 4, 'one': 1}), P('one'))
    >>> batch_unsplit(NamedSharding(mesh.abstract, P("y")), 1, 1)
    NamedSharding(AbstractMesh({'x': 2, 'y': 4, 'one': 1}), P('y', UNCONSTRAINED))
    """
    ndim = rank + 1
    if _replicates(sharding, ndim):
        return sharding
    if isinstance(sharding, GSPMDSharding):
        raise reject(NoWayBack(sharding, batch_axis, "JAX reads a batched GSPMDSharding back "
                               "only when it replicates the value"))
    mesh, spec = sharding.mesh, sharding.spec
    if isinstance(mesh, AbstractMesh):
        _require_plain_spec(sharding, batch_axis, CannotBatch)
        require(AxisType.Auto in mesh.axis_types, lambda: CannotBatch(
            sharding, batch_axis, "the batch dimension would be UNCONSTRAINED, which needs an "
                                  "Auto mesh axis"))
        return NamedSharding(mesh, P(*_inserted(list(spec.partitions), batch_axis,
                                                UNCONSTRAINED)))
    tiles = _read_named(sharding, ndim)
    if tiles.kind != "tiled":
        hlo = with_unit_dim(to_hlo(sharding, ndim), batch_axis)
        return GSPMDSharding(mesh.devices, hlo)
    parts = _trimmed(_inserted(tiles.parts, batch_axis, ()))
    return NamedSharding(mesh, P(*map(_entry, parts)))


def _require_plain_spec(sharding: NamedSharding, batch_axis: int, kind: type) -> None:
    """A spec on an abstract mesh is padded and indexed as it stands, which JAX refuses for
    a spec with unreduced or reduced axes (padding it is a TypeError, indexing it a
    ValueError)."""
    spec = sharding.spec
    if not spec.unreduced and not spec.reduced:
        return
    padded = batch_axis > len(spec)
    failure = kind if not padded else _padding_failure(kind)
    raise reject(failure(sharding, batch_axis, "its spec carries unreduced or reduced axes, "
                         "which JAX will not " + ("pad" if padded else "index entry by entry")))


def _padding_failure(kind: type) -> type:
    return CannotPadSplit if kind is CannotSplit else CannotPad


@dataclasses.dataclass(frozen=True)
class CannotPad(CannotBatch, error=TypeError):
    pass


# --------------------------------------------------------------------------- BAT-3

@dataclasses.dataclass(frozen=True)
class CannotSplit(CannotBatch, rule="BAT-3"):
    pass


@dataclasses.dataclass(frozen=True)
class CannotPadSplit(CannotSplit, error=TypeError):
    pass


@dataclasses.dataclass(frozen=True)
class TwoKindsOfCopies(CannotSplit, error=NotImplementedError):
    pass


@dataclasses.dataclass(frozen=True)
class NoTiles(CannotSplit, error=AssertionError):
    pass


@rule("BAT-3", mirrors="jax._src.pjit._pjit_batcher_for_sharding (spmd_axis_name given); "
                       "jax._src.interpreters.pxla.batch_spec")
def batch_split(sharding: Any, batch_axis: int, rank: int, names: tuple[str, ...],
                context_mesh: Mesh | AbstractMesh | None) -> NamedSharding:
    """With spmd_axis_name the batch dimension is split over the named mesh axes: they are inserted at the batch axis in the sharding's spec, padded with None up to it.

    On an abstract mesh the spec is the sharding's own, UNCONSTRAINED entries kept (an
    inner vmap without spmd_axis_name put one there); it may not carry unreduced or
    reduced axes.

    On a concrete mesh (BAT-6) the spec is read back from the tiles as BAT-2 reads it;
    tiles holding two kinds of copies (NotImplementedError), or no tiles but unreduced
    copies (AssertionError), are refused.

    A GSPMD sharding is read on the context mesh: the runs of its device order are split
    into whole mesh axes, which fill its tile dimensions in turn; where they do not, JAX's
    own exception is the refusal (AssertionError, KeyError, NotImplementedError,
    IndivisibleError).

    The result is a NamedSharding on that mesh in the default memory kind, replicated
    ones included; BAT-4 and BAT-5 check its axes.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> batch_split(NamedSharding(mesh, P(None, "y")), 0, 2, ("x",), None)
    NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', None, 'y'))
    >>> batch_split(SingleDeviceSharding(3), 2, 2, ("y", "x"), mesh)
    NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, None, ('y', 'x')))
    """
    entry = _entry(names)
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh):
        _require_plain_spec(sharding, batch_axis, CannotSplit)
        written = list(sharding.spec.partitions)
        parts = _inserted([_axes_of(e) for e in written], batch_axis, names)
        split = _checked(sharding.mesh, parts, names, entry, batch_axis)
        return NamedSharding(sharding.mesh, P(*_unconstrained_kept(
            list(split.spec.partitions), written, batch_axis)))
    mesh = mesh_for_split(sharding, context_mesh)
    tiles = (_read_named(sharding, rank + 1) if isinstance(sharding, NamedSharding)
             else _read_hlo(to_hlo(sharding, rank + 1), mesh))
    require(tiles.kind != "mixed", lambda: TwoKindsOfCopies(
        sharding, batch_axis, "its tiles hold copies of two kinds (unreduced and replicated), "
                              "which JAX does not read back as a spec"))
    require(tiles.kind != "untiled", lambda: NoTiles(
        sharding, batch_axis, "it has no tiles to read back as a spec (all its copies are "
                              "unreduced, or one device of several holds the value)"))
    return _checked(mesh, _inserted(tiles.parts, batch_axis, names), names, entry, batch_axis)


def _unconstrained_kept(parts: list[Any], written: list[Any], batch_axis: int) -> list[Any]:
    """The batched entries with every UNCONSTRAINED entry of the spec as written back in
    place (after the batch axis, one dimension further on)."""
    for i, e in enumerate(written):
        if e is UNCONSTRAINED:
            parts[i if i < batch_axis else i + 1] = UNCONSTRAINED
    return parts


def _checked(mesh: Mesh | AbstractMesh, parts: list[tuple[str, ...]], names: tuple[str, ...],
             entry: Any, batch_axis: int) -> NamedSharding:
    check_spmd_axes_unused(parts, names)
    check_spmd_axes_known(mesh, names)
    return NamedSharding(mesh, P(*(entry if i == batch_axis else _entry(axes)
                                   for i, axes in enumerate(parts))))


def _read_hlo(hlo: Any, mesh: Mesh) -> _Tiles:
    """What JAX reads back from an HLO sharding on a mesh: the mesh axes, in the order the
    tile assignment transposes them, fill each tile dimension in turn; copies of two kinds
    are found only after that."""
    if isinstance(hlo, Replicated) or (isinstance(hlo, Maximal) and mesh.size == 1):
        return _Tiles([], "tiled")
    if not isinstance(hlo, Tiled):
        return _Tiles([], "untiled")
    order = iter(_axis_order(hlo, mesh))
    parts: list[tuple[str, ...]] = []
    for size in hlo.dims:
        axes: list[str] = []
        while size > 1:
            axis = next(order, None)
            require(axis is not None and size % mesh.axis_size(axis) == 0,
                    lambda: TilesIndivisible(hlo, mesh, "its tile dimensions do not divide "
                                                        "into whole mesh axes, read in order"))
            size //= mesh.axis_size(axis)
            axes.append(axis)
        parts.append(tuple(axes))
    if len(set(hlo.subgroups)) > 1:
        return _Tiles([], "mixed")
    if hlo.replicate_on_last_tile_dim:
        parts.pop()
    return _Tiles(_trimmed(parts), "tiled")


@dataclasses.dataclass(frozen=True)
class CannotRead(Failure, rule="BAT-3", error=AssertionError):
    template = "JAX cannot read the tiles {hlo} on the mesh {mesh}: {reason}"
    hlo: Any
    mesh: Any
    reason: str


@dataclasses.dataclass(frozen=True)
class TilesIndivisible(CannotRead, error=ValueError, jax_error="IndivisibleError"):
    pass


@dataclasses.dataclass(frozen=True)
class NoSuchStride(CannotRead, error=KeyError):
    pass


@dataclasses.dataclass(frozen=True)
class NotFromZero(CannotRead, error=NotImplementedError):
    pass


# The most devices whose order the spec reads one by one (JAX reads them all; no machine
# has this many, and a hostile description must not make the spec walk 2**40 of them).
READ_LIMIT = 1 << 20


@dataclasses.dataclass(frozen=True)
class TooManyToRead(CannotRead, error=ValueError):
    template = ("the tiles {hlo} are not read on the mesh {mesh}: {reason}; "
                "JAX would list every device")


def _superdims(hlo: Tiled, mesh: Mesh) -> list[tuple[int, int]]:
    """The tile assignment as (size, stride) runs of the device order, minor run first
    (JAX's unflatten_superdims)."""
    require(hlo.num_devices <= READ_LIMIT, lambda: TooManyToRead(
        hlo, mesh, f"the spec reads the order of at most {READ_LIMIT} devices"))
    flat = list(hlo.assignment_tuple())
    require(flat[0] == 0, lambda: NotFromZero(hlo, mesh, "its device order does not start "
                                                         "at the mesh's first device"))
    runs = []
    while len(flat) > 1:
        stride, size = flat[1], 0
        while size < len(flat) and flat[size] == size * stride:
            size += 1
        require(size > 1, lambda: CannotRead(hlo, mesh, "its device order has no stride"))
        runs.append((size, stride))
        flat = flat[::size]
    return runs


def _axis_order(hlo: Tiled, mesh: Mesh) -> tuple[str, ...]:
    """The mesh's axes of size above 1 in the order the tile assignment transposes them
    (JAX's unflatten_array: each run of the device order split into whole mesh axes)."""
    names = mesh.nontrivial_axes
    sizes = [mesh.axis_size(n) for n in names]
    strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    size_at = dict(zip(strides, sizes))
    name_at = {(size, stride): n for size, stride, n in zip(sizes, strides, names)}
    order: list[tuple[int, int]] = []
    for size, stride in reversed(_superdims(hlo, mesh)):
        split: list[tuple[int, int]] = []
        while True:
            require(stride in size_at, lambda stride=stride: NoSuchStride(
                hlo, mesh, f"no mesh axis has stride {stride}"))
            target = size_at[stride]
            if size <= target:
                break
            require(target > 1 and size % target == 0, lambda: CannotRead(
                hlo, mesh, "a run of its device order is not whole mesh axes"))
            split.append((target, stride))
            size, stride = size // target, stride * target
        require(size == target, lambda: CannotRead(
            hlo, mesh, "a run of its device order is not whole mesh axes"))
        order += reversed(split + [(size, stride)])
    return tuple(name_at[d] for d in order)


# --------------------------------------------------------------------------- BAT-4, 5, 6

@dataclasses.dataclass(frozen=True)
class SpmdAxisInUse(Failure, rule="BAT-4", error=Exception, jax_error="DuplicateSpecError"):
    template = ("spmd_axis_name {names} would split the batched value over mesh "
                "axis {axis!r} twice: the batched spec is {spec}")
    names: tuple
    axis: str
    spec: str

    @property
    def hint(self) -> str:  # type: ignore[override]
        return "Pick a spmd_axis_name that the jit's shardings do not use."


@rule("BAT-4", mirrors="jax._src.named_sharding._check_unique_resources (on the batched spec)")
def check_spmd_axes_unused(parts: list[tuple[str, ...]], names: tuple[str, ...]) -> None:
    """The batched spec names each mesh axis at most once: a spmd axis may not split the value already, nor be named twice.

    >>> check_spmd_axes_unused([("y",), ("x",), (), ("y",)], ("y",))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [BAT-4]: spmd_axis_name ('y',) would split the batched value over mesh axis 'y' twice: the batched spec is P('y', 'x', None, 'y'). Pick a spmd_axis_name that the jit's shardings do not use.
    """
    seen: set[str] = set()
    for axis in (a for axes in parts for a in axes):
        require(axis not in seen, lambda axis=axis: SpmdAxisInUse(
            names, axis, repr(P(*map(_entry, parts)))))
        seen.add(axis)


@dataclasses.dataclass(frozen=True)
class SpmdAxisUnknown(Failure, rule="BAT-5"):
    template = "spmd_axis_name names {axis!r}, which is not an axis of the mesh {mesh}"
    axis: str
    mesh: Any


@rule("BAT-5", mirrors="jax._src.named_sharding._check_mesh_resource_axis (on the batched spec)")
def check_spmd_axes_known(mesh: Mesh | AbstractMesh, names: tuple[str, ...]) -> None:
    """Every spmd axis name is an axis of the mesh the batched sharding lives on.

    >>> check_spmd_axes_known(Mesh.iota((2, 4), ("x", "y")), ("x", "z"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [BAT-5]: spmd_axis_name names 'z', which is not an axis of the mesh Mesh({'x': 2, 'y': 4})
    """
    for name in names:
        require(name in mesh.axis_names, lambda name=name: SpmdAxisUnknown(name, mesh))


@dataclasses.dataclass(frozen=True)
class NoMeshToSplit(Failure, rule="BAT-6"):
    template = ("{sharding} has no mesh of its own to split the batch dimension "
                "over, and no mesh is set (jax.set_mesh)")
    hint = "Call the vmapped function under jax.set_mesh(mesh), or give jit a NamedSharding"
    sharding: Any


@rule("BAT-6", mirrors="jax._src.pjit._pjit_batcher_for_sharding (the mesh for spmd_axis_name)")
def mesh_for_split(sharding: Any, context_mesh: Mesh | AbstractMesh | None) -> Mesh:
    """A sharding without a mesh of its own is split over spmd axes on the concrete mesh set by jax.set_mesh, and there must be one.

    >>> mesh_for_split(SingleDeviceSharding(0), Mesh.iota((2,), ("x",)))
    Mesh({'x': 2})
    >>> mesh_for_split(SingleDeviceSharding(0), None)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [BAT-6]: SingleDeviceSharding(Device(0)) has no mesh of its own to split the batch dimension over, and no mesh is set (jax.set_mesh). Call the vmapped function under jax.set_mesh(mesh), or give jit a NamedSharding.
    """
    mesh = sharding.mesh if isinstance(sharding, NamedSharding) else context_mesh
    require(isinstance(mesh, Mesh) and not mesh.empty, lambda: NoMeshToSplit(sharding))
    return mesh  # type: ignore[return-value]


# --------------------------------------------------------------------------- BAT-7

@dataclasses.dataclass(frozen=True)
class SpecTooLong(Failure, rule="BAT-7", error=IndexError):
    template = ("{sharding} has {length} spec entries, more than the batched "
                "value's rank {ndim}, so it has no HLO sharding to batch")
    sharding: Any
    length: int
    ndim: int


@rule("BAT-7", mirrors="jax._src.pjit._pjit_batcher_for_sharding (s._to_xla_hlo_sharding(ndim))")
def lowers_at_batched_rank(sharding: Any, ndim: int) -> None:
    """A sharding is batched through its HLO sharding at the batched rank, so a NamedSharding's spec is no longer than that rank.

    jit checked the spec against the unbatched value; only a spec an inner vmap made longer
    (its read-back of unreduced tiles, BAT-2) can fail here, in the outer vmap.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> lowers_at_batched_rank(NamedSharding(mesh, P(None, "x", None, "y")), 4)
    >>> lowers_at_batched_rank(NamedSharding(mesh, P(None, "x", None, None, "y")), 4)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionIndexError: [BAT-7]: NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, 'x', None, None, 'y')) has 5 spec entries, more than the batched value's rank 4, so it has no HLO sharding to batch
    """
    if isinstance(sharding, NamedSharding):
        length = len(sharding.spec)
        require(length <= ndim, lambda: SpecTooLong(sharding, length, ndim))


# --------------------------------------------------------------------------- BAT-8

@dataclasses.dataclass(frozen=True)
class LayoutsNotBatched(Failure, rule="BAT-8", error=NotImplementedError):
    template = "vmap cannot batch a jit call given layouts, and {where} holds {leaf!r}"
    hint = "Leave the layouts out of the jit call that vmap batches"
    where: str
    leaf: Any


@rule("BAT-8", mirrors="jax._src.pjit._pjit_batcher (layouts)")
def check_no_layouts(leaves: tuple[Any, ...], parameter: str) -> None:
    """vmap does not batch a jit call given layouts: no argument or result has a Format with a layout, Layout.AUTO included.

    JAX checks this after it has batched every sharding, so a sharding's refusal comes
    first; it checks it even when vmap batches none of the call's values.

    >>> from shardlaw.spec import Layout
    >>> mesh = Mesh.iota((2,), ("x",))
    >>> check_no_layouts((Format(None, NamedSharding(mesh, P("x"))),), "arg_shardings")
    >>> check_no_layouts((Format(Layout.AUTO),), "arg_shardings")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNotImplementedError: [BAT-8]: vmap cannot batch a jit call given layouts, and arg_shardings[0] holds Format(Layout.AUTO, None). Leave the layouts out of the jit call that vmap batches.
    """
    for i, leaf in enumerate(leaves):
        require(not isinstance(leaf, Format) or leaf.layout is None,
                lambda i=i, leaf=leaf: LayoutsNotBatched(f"{parameter}[{i}]", leaf))


# --------------------------------------------------------------------------- BAT-9

@dataclasses.dataclass(frozen=True)
class ExplicitBatchConflict(Failure, rule="BAT-9"):
    template = "{problem}"
    problem: str


def _arg_specs(arg_specs: Any, shapes: tuple[tuple[int, ...], ...]
               ) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """BAT-0 for arg_specs: None, or one PartitionSpec (or None) per argument, no longer
    than its rank; each as the axes per dimension, padded to the rank as types are."""
    if arg_specs is None:
        return tuple(((),) * len(shape) for shape in shapes)
    if not isinstance(arg_specs, (tuple, list)) or len(arg_specs) != len(shapes):
        raise reject(BadVmapParameterType(
            "arg_specs", f"must be None or one PartitionSpec or None per argument "
                         f"({len(shapes)})", arg_specs))
    out = []
    for spec, shape in zip(arg_specs, shapes):
        spec = P() if spec is None else spec
        require(isinstance(spec, PartitionSpec) and len(spec) <= len(shape),
                lambda spec=spec, shape=shape: BadVmapParameter(
                    "arg_specs", f"must hold a PartitionSpec that fits shape {shape}", spec))
        parts = [_axes_of(e) for e in spec.partitions]
        out.append(tuple(parts + [()] * (len(shape) - len(parts))))
    return tuple(out)


@rule("BAT-9", mirrors="jax._src.api.vmap (_mapped_axis_spec, _check_ema_unmapped_args, "
                       "spmd_axis_name against explicit_mesh_axis)")
def explicit_batch_axes(arg_specs: tuple[tuple[tuple[str, ...], ...], ...],
                        axes: tuple[int | None, ...], names: tuple[str, ...] | None
                        ) -> tuple[str, ...] | None:
    """Arguments whose types split their mapped dimension over Explicit mesh axes are all split there alike, no unmapped argument is split over those axes, and spmd_axis_name is left out or names exactly them.

    The answer is the spmd axes batching goes on with: spmd_axis_name, or None where it names
    the arguments' axes, for the jit's shardings then keep the batch dimension unsplit.
    ``arg_specs`` are the argument types' specs (only Explicit axes appear in types).

    >>> split = ((("y",), (), ()),)
    >>> explicit_batch_axes(split, (0,), ("y",)) is None
    True
    >>> explicit_batch_axes(split, (0,), ("x",))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [BAT-9]: spmd_axis_name ('x',) must be left out or name the Explicit mesh axes ('y',) that the mapped arguments are split over
    """
    mapped = [(i, spec[axis]) for i, (spec, axis) in enumerate(zip(arg_specs, axes))
              if axis is not None]
    first = mapped[0][1] if mapped else ()
    for i, entry in mapped:
        with located(f"args[{i}]"):
            require(entry == first, lambda entry=entry: ExplicitBatchConflict(
                f"the mapped dimensions of the arguments must be split alike over Explicit "
                f"mesh axes, but one is split over {first} and this one over {entry}"))
    if not first:
        return names
    for i, (spec, axis) in enumerate(zip(arg_specs, axes)):
        used = [a for entry in spec for a in entry if a in first]
        with located(f"args[{i}]"):
            require(axis is not None or not used, lambda used=used: ExplicitBatchConflict(
                f"an unmapped argument may not be split over the mesh axes vmap maps over "
                f"{first}, but this one is split over {tuple(used)}"))
    require(names is None or names == first, lambda: ExplicitBatchConflict(
        f"spmd_axis_name {names} must be left out or name the Explicit mesh axes {first} "
        f"that the mapped arguments are split over"))
    return None


# --------------------------------------------------------------------------- BAT-10

@dataclasses.dataclass(frozen=True)
class ReducedTypeMoved(Failure, rule="BAT-10"):
    template = ("{what} is typed {split!r}, with unreduced or reduced axes, and vmap {does}: "
                "it reads that type's split dimension by dimension, which JAX refuses for "
                "such a type (using pspec[...] is dangerous when PartitionSpec has non-empty "
                "unreduced/reduced set)")
    hint = ("Reshard the value to a type without unreduced or reduced axes first, or {fix}")
    what: str
    split: Any
    does: str
    fix: str


@rule("BAT-10", mirrors="jax._src.api._mapped_axis_spec; jax._src.interpreters.batching."
                        "broadcast (a result's type read entry by entry)")
def check_not_reduced_when_moved(split: Any, what: str, mapped: bool) -> None:
    """vmap maps no argument, and broadcasts to its out_axes no unbatched result, whose type has unreduced or reduced axes: it reads that type's split entry by entry, which JAX refuses while tracing (ValueError).

    ``split`` is the type's split over Explicit axes (None: unsplit); ``mapped``: an
    argument vmap maps (else an unbatched result it broadcasts). A batched value so typed
    is kept, and moved by a transpose.

    >>> check_not_reduced_when_moved(P("x"), "args[0]", True)
    >>> check_not_reduced_when_moved(P(None, reduced={"x"}), "args[0]", True)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [BAT-10]: args[0] is typed P(None, reduced={'x'}), with unreduced or reduced axes, and vmap maps it: it reads that type's split dimension by dimension, which JAX refuses for such a type (using pspec[...] is dangerous when PartitionSpec has non-empty unreduced/reduced set). Reshard the value to a type without unreduced or reduced axes first, or leave the argument unmapped (in_axes None).
    """
    require(split is None or isinstance(split, PartitionSpec), lambda: BadVmapParameterType(
        "the type's split", "must be None or a PartitionSpec", split))
    require(split is None or not (split.unreduced or split.reduced), lambda: ReducedTypeMoved(
        what, split, "maps it" if mapped else "broadcasts it to its out_axes",
        "leave the argument unmapped (in_axes None)" if mapped
        else "leave the result where it is (out_axes None)"))


def _check_mapped_types(arg_specs: Any, parts: tuple[tuple[tuple[str, ...], ...], ...],
                        axes: tuple[int | None, ...]) -> None:
    """BAT-10 for the arguments vmap maps, in order: vmap reads each one's type at its
    mapped dimension, then compares that entry with the first mapped argument's (BAT-9),
    so the first argument split unlike the first is refused by BAT-9, no later one read."""
    if arg_specs is None:
        return
    first = None
    for i, (spec, split, axis) in enumerate(zip(arg_specs, parts, axes)):
        if axis is None:
            continue
        if spec is not None:   # an argument with no type over Explicit axes has none
            with located(f"args[{i}]"):
                check_not_reduced_when_moved(spec, f"args[{i}]", True)
        first = split[axis] if first is None else first
        if split[axis] != first:
            return


# --------------------------------------------------------------------------- the answers

def _batch_leaf(sharding: Any, batch_axis: int | None, rank: int,
                names: tuple[str, ...] | None, context_mesh: Any) -> Any:
    if keeps_sharding(sharding, batch_axis):
        return sharding
    assert batch_axis is not None
    lowers_at_batched_rank(sharding, rank + 1)
    if names is None:
        return batch_unsplit(sharding, batch_axis, rank)
    return batch_split(sharding, batch_axis, rank, names, context_mesh)


def batch_sharding(sharding: Any, batch_axis: int | None, rank: int,
                   spmd_axis_name: Any = None, context_mesh: Any = None) -> Any:
    """The sharding one jit argument or result gets when vmap batches it at ``batch_axis``.

    ``rank`` is the rank of the value jit sees unbatched; ``batch_axis`` is an axis of the
    batched value (rank ``rank + 1``; negative counts from the end), or None when vmap does
    not batch it (BAT-1, BAT-2, BAT-3; BAT-0 checks the parameters).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> batch_sharding(NamedSharding(mesh, P("x")), 0, 1)
    NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, 'x'))
    >>> batch_sharding(NamedSharding(mesh, P("x")), -1, 1, spmd_axis_name="y")
    NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', 'y'))
    >>> batch_sharding(NamedSharding(mesh, P("x")), 0, 1, spmd_axis_name="x")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [BAT-4]: spmd_axis_name ('x',) would split the batched value over mesh axis 'x' twice: the batched spec is P('x', 'x'). Pick a spmd_axis_name that the jit's shardings do not use.
    """
    names = _spmd_names(spmd_axis_name)
    rank = check_rank_count(rank)
    axis = _batch_axis(batch_axis, rank, "batch_axis")
    (leaf,) = _leaves((sharding,), 1, "sharding")
    batched = _batch_leaf(_sharding_part(leaf), axis, rank, names, _context(context_mesh))
    check_no_layouts((leaf,), "sharding")
    return batched


def vmap_jit(arg_shardings: Any, result_shardings: Any, arg_shapes: Any, result_ranks: Any,
             in_axes: Any = 0, result_axes: Any = 0, axis_size: Any = None,
             spmd_axis_name: Any = None, context_mesh: Any = None,
             arg_specs: Any = None) -> BatchedJit:
    """The jit equation ``vmap(jit(f, ...), in_axes, axis_size=..., spmd_axis_name=...)`` builds.

    ``arg_shardings`` and ``result_shardings`` are the jit's shardings, one per (flat)
    argument and result; ``arg_shapes`` the shapes of the arguments given to vmap (batched
    where mapped); ``result_ranks`` the ranks of f's results; ``result_axes`` where batching
    put each result's batch axis (None: not batched), which the function decides — vmap's
    own out_axes move the results after the call and do not reach its shardings.
    ``arg_specs`` are the specs the arguments' types carry (arrays split over Explicit mesh
    axes, their unreduced and reduced axes too: BAT-10; None: none). A nested vmap is :func:`vmap_jit` applied again to the answer's
    shardings.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> batched = vmap_jit([NamedSharding(mesh, P("y")), UNSPECIFIED],
    ...                    [NamedSharding(mesh, P(None, "y"))], [(8, 3), (4,)], [2],
    ...                    in_axes=(1, None), result_axes=[2], spmd_axis_name="x")
    >>> batched.in_shardings
    (NamedSharding(Mesh({'x': 2, 'y': 4}), P('y', 'x')), UNSPECIFIED)
    >>> batched.out_shardings, batched.axis_size
    ((NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, 'y', 'x')),), 3)
    """
    shapes, axes, size = check_vmap_parameters(arg_shapes, in_axes, axis_size)
    names = _spmd_names(spmd_axis_name)
    parts = _arg_specs(arg_specs, shapes)
    _check_mapped_types(arg_specs, parts, axes)
    names = explicit_batch_axes(parts, axes, names)
    if isinstance(result_ranks, (str, bytes, dict)) or not isinstance(result_ranks, (tuple, list)):
        raise reject(BadVmapParameterType("result_ranks", "must be a list of ranks", result_ranks))
    ranks = tuple(check_rank_count(r, "a result's rank") for r in result_ranks)
    ins = _leaves(arg_shardings, len(shapes), "arg_shardings")
    outs = _leaves(result_shardings, len(ranks), "result_shardings")
    return _batched(ins, outs, shapes, axes, ranks, _result_axes(result_axes, ranks), size,
                    names, _context(context_mesh))


def _batched(ins: tuple[Any, ...], outs: tuple[Any, ...], shapes: tuple[tuple[int, ...], ...],
             axes: tuple[int | None, ...], ranks: tuple[int, ...],
             out_axes: tuple[int | None, ...], size: int, names: tuple[str, ...] | None,
             context: Any) -> BatchedJit:
    """Every sharding of the call batched, in order (arguments, then results), then BAT-8."""
    batched_in = []
    for i, (s, shape, axis) in enumerate(zip(ins, shapes, axes)):
        with located(f"arg_shardings[{i}]"):
            batched_in.append(_batch_leaf(_sharding_part(s), axis,
                                          len(shape) - (axis is not None), names, context))
    batched_out = []
    for i, (s, rank, axis) in enumerate(zip(outs, ranks, out_axes)):
        with located(f"result_shardings[{i}]"):
            batched_out.append(_batch_leaf(_sharding_part(s), axis, rank, names, context))
    check_no_layouts(ins, "arg_shardings")
    check_no_layouts(outs, "result_shardings")
    return BatchedJit(tuple(batched_in), tuple(batched_out), size)


def _result_axes(result_axes: Any, ranks: tuple[int, ...]) -> tuple[int | None, ...]:
    """BAT-0 for result_axes: an int or None for every result, or a list of them."""
    if isinstance(result_axes, list):
        result_axes = tuple(result_axes)
    if result_axes is None or type(result_axes) is int:
        result_axes = (result_axes,) * len(ranks)
    require(type(result_axes) is tuple and len(result_axes) == len(ranks),
            lambda: BadVmapParameterType(
                "result_axes", f"must be an int, None, or one entry per result ({len(ranks)})",
                result_axes))
    return tuple(_batch_axis(a, r, "result_axes") for a, r in zip(result_axes, ranks))
