"""Hypothesis strategies for shardlaw values: meshes, specs, shardings, shapes, and bad input.

Users import these to test their own sharded code::

    from hypothesis import given
    from shardlaw.properties.strategies import named_shardings, shapes_for

Every strategy builds from small to large, so that a failing example shrinks to the
smallest mesh that still fails: device counts shrink toward the minimum, axis counts and
ranks toward 0 or 1, axis sizes toward 1, device orders toward ``0 .. n-1`` in order, and
sharding kinds toward a NamedSharding over Auto axes.

Standard library and Hypothesis only; no JAX.
"""

from __future__ import annotations

import math
import typing
from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.spec import (
    AbstractMesh, AxisType, Device, DeviceList, GSPMDSharding, Iota, Maximal, Mesh,
    NamedSharding, P, PartitionSpec, Rejection, Replicated, SingleDeviceSharding, SubgroupType,
    Tiled, UNCONSTRAINED, iota_tile, parse_hlo, tiled, tiles_per_dimension, to_hlo,
)

__all__ = [
    "devices", "device_lists", "iotas", "factorizations", "meshes", "partition_specs",
    "named_shardings", "single_device_shardings", "gspmd_shardings", "shardings",
    "hlo_shardings", "shapes_for", "rank_needed", "fits", "sharding_pairs", "sharding_triples",
    "near_equivalents", "invalid_partition_specs", "bad_values", "BadValue",
    "AXIS_ALPHABETS", "MAX_DIM",
]

# Mesh axis names come from small alphabets, so that two meshes of one shape often differ
# only by their names (the "renamed mesh" case of every equivalence).
AXIS_ALPHABETS: tuple[tuple[str, ...], ...] = (
    ("x", "y", "z", "w"),
    ("a", "b", "c", "d"),
    ("data", "model", "pipe", "expert"),
)

# Array dimensions stay small: the index-map laws enumerate elements.
MAX_DIM = 16


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# --------------------------------------------------------------------------- integers and orders

@st.composite
def factorizations(draw: Any, n: int, parts: int) -> tuple[int, ...]:
    """``parts`` positive integers whose product is ``n``; shrinks toward ``(1, .., 1, n)``."""
    out = []
    remaining = n
    for _ in range(parts - 1):
        d = draw(st.sampled_from(_divisors(remaining))) if remaining else 0
        out.append(d)
        remaining = remaining // d if d else 0
    out.append(remaining)
    return tuple(out)


@st.composite
def iotas(draw: Any, size: int, max_rank: int = 3) -> Iota:
    """A symbolic order ``iota(size).reshape(dims).transpose(perm)``; shrinks toward the range."""
    rank = draw(st.integers(1, max_rank))
    dims = draw(factorizations(size, rank))
    perm = draw(st.permutations(range(rank)))
    return Iota(dims, perm)


def devices(max_id: int = 7, platform: str = "cpu") -> st.SearchStrategy[Device]:
    """One device with an id in ``0 .. max_id``."""
    return st.builds(Device, st.integers(0, max_id), st.just(platform))


@st.composite
def device_lists(draw: Any, n: int, platform: str = "cpu", iota_bias: float = 0.5) -> DeviceList:
    """A list of the devices ``0 .. n-1`` in some order.

    With probability about ``iota_bias`` the order is symbolic (the range, or an iota
    reshaped and transposed); otherwise it is an explicit, shuffled tuple of devices. The
    ids are always a permutation of ``range(n)``, so they name real devices on an
    ``n``-device host. Shrinks toward the symbolic range.
    """
    symbolic = draw(st.integers(0, 99)) < round(iota_bias * 100)
    if symbolic:
        if n <= 1 or not draw(st.booleans()):
            return DeviceList(Iota.range(n), platform=platform)
        return DeviceList(draw(iotas(n)), platform=platform)
    ids = draw(st.permutations(range(n)))
    return DeviceList(tuple(Device(i, platform) for i in ids))


# --------------------------------------------------------------------------- meshes and specs

_AXIS_TYPE_MODES = ("auto", "auto", "auto", "explicit", "mixed")


@st.composite
def _axis_types(draw: Any, count: int) -> tuple[AxisType, ...]:
    mode = draw(st.sampled_from(_AXIS_TYPE_MODES))
    if mode == "auto":
        return (AxisType.Auto,) * count
    if mode == "explicit":
        return (AxisType.Explicit,) * count
    kinds = st.sampled_from((AxisType.Auto, AxisType.Explicit, AxisType.Manual))
    return tuple(draw(kinds) for _ in range(count))


@st.composite
def meshes(draw: Any, max_devices: int = 8, min_devices: int = 1, abstract: bool = False,
           device_orders: bool = True) -> Mesh | AbstractMesh:
    """A mesh of ``min_devices .. max_devices`` devices over 1 to 4 named axes.

    Size-1 axes are common; axis types are mostly Auto, sometimes all Explicit, sometimes a
    mix of Auto, Explicit and Manual. With ``abstract`` the mesh is an AbstractMesh. With
    ``device_orders`` the device order is drawn by :func:`device_lists`, else it is the range.
    """
    n = draw(st.integers(min_devices, max_devices))
    count = draw(st.integers(1, 4))
    sizes = draw(factorizations(n, count))
    alphabet = draw(st.sampled_from(AXIS_ALPHABETS))
    names = tuple(draw(st.permutations(alphabet))[:count])
    types = draw(_axis_types(count))
    if abstract:
        return AbstractMesh(sizes, names, types)
    if not device_orders:
        return Mesh.iota(sizes, names, types)
    return Mesh(sizes, names, draw(device_lists(n)), types)


@st.composite
def partition_specs(draw: Any, mesh: Mesh | AbstractMesh, max_rank: int = 4) -> PartitionSpec:
    """A PartitionSpec that is valid over ``mesh``.

    Each mesh axis splits at most one dimension; an entry is None, one axis, or a tuple of
    axes in drawn order; UNCONSTRAINED appears only if the mesh has an Auto axis; trailing
    Nones happen when the rank exceeds the dimensions used; unreduced and reduced axes are
    drawn from the Explicit axes that split nothing.
    """
    rank = draw(st.integers(0, max_rank))
    order = draw(st.permutations(mesh.axis_names))
    entries: list[list[str]] = [[] for _ in range(rank)]
    for name in order:
        slot = draw(st.sampled_from((None, *range(rank))))
        if slot is not None:
            entries[slot].append(name)
    # JAX lowers a Manual axis in a spec only when every axis of size above 1 is in it
    # (LOW-2); otherwise the Manual axes split nothing.
    nontrivial = [n for n, s in zip(mesh.axis_names, mesh.axis_sizes) if s != 1]
    placed = {n for names in entries for n in names}
    manual = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t is AxisType.Manual}
    if (manual & placed & set(nontrivial)) and not set(nontrivial) <= placed:
        entries = [[n for n in names if n not in manual or n not in nontrivial]
                   for names in entries]
    may_unconstrain = AxisType.Auto in mesh.axis_types
    parts: list[Any] = []
    for names in entries:
        if not names:
            unconstrained = may_unconstrain and draw(st.integers(0, 5)) == 5
            parts.append(UNCONSTRAINED if unconstrained else None)
        elif len(names) == 1:
            parts.append((names[0],) if draw(st.booleans()) else names[0])
        else:
            parts.append(tuple(names))
    used = {n for names in entries for n in names}
    free_explicit = [n for n, t in zip(mesh.axis_names, mesh.axis_types)
                     if t is AxisType.Explicit and n not in used]
    unreduced: list[str] = []
    reduced: list[str] = []
    if free_explicit and draw(st.integers(0, 3)) == 3:
        for name in draw(st.lists(st.sampled_from(free_explicit), unique=True, max_size=2)):
            (reduced if draw(st.booleans()) else unreduced).append(name)
    return P(*parts, unreduced=unreduced, reduced=reduced)


_MEMORY_KINDS = (None, None, None, None, "device", "pinned_host")


@st.composite
def named_shardings(draw: Any, max_devices: int = 8, abstract: bool = False,
                    min_devices: int = 1, max_rank: int = 4) -> NamedSharding:
    """A NamedSharding over a drawn mesh, with a valid spec and, rarely, a memory kind."""
    mesh = draw(meshes(max_devices=max_devices, min_devices=min_devices, abstract=abstract))
    spec = draw(partition_specs(mesh, max_rank=max_rank))
    kind = draw(st.sampled_from(_MEMORY_KINDS))
    return NamedSharding(mesh, spec, memory_kind=kind)


def single_device_shardings(max_devices: int = 8) -> st.SearchStrategy[SingleDeviceSharding]:
    """A SingleDeviceSharding on one of the devices ``0 .. max_devices-1``."""
    return st.builds(SingleDeviceSharding, devices(max_id=max_devices - 1))


@st.composite
def hlo_shardings(draw: Any, num_devices: int, max_rank: int = 3,
                  subgroup_kinds: tuple[SubgroupType, ...] = (SubgroupType.REPLICATED,)
                  ) -> Any:
    """An HLO sharding over ``num_devices`` device-list positions.

    Replicated, maximal, or tiled with up to ``max_rank`` data dimensions and up to two
    trailing subgroups of ``subgroup_kinds`` (replicated only by default; pass
    ``tuple(SubgroupType)`` to get manual and unreduced ones too), filled by an iota
    (:func:`~shardlaw.spec.iota_tile`) or by an explicit permutation
    (:func:`~shardlaw.spec.tiled`). Values are canonical, as XLA keeps them.
    """
    kind = draw(st.sampled_from(("replicated", "tiled", "tiled", "tiled", "maximal")))
    if kind == "replicated":
        return Replicated()
    if kind == "maximal":
        return Maximal(draw(st.integers(0, max(num_devices - 1, 0))))
    data_rank = draw(st.integers(1, max(max_rank, 1)))
    extra = draw(st.integers(0, 2)) if subgroup_kinds else 0
    dims = draw(factorizations(num_devices, data_rank + extra))
    subgroups = tuple(draw(st.sampled_from(subgroup_kinds)) for _ in range(extra))
    if draw(st.booleans()):
        return tiled(dims, tuple(draw(st.permutations(range(num_devices)))), subgroups)
    order = draw(iotas(num_devices))
    return iota_tile(dims, order.reshape_dims, order.perm, subgroups)


@st.composite
def gspmd_shardings(draw: Any, max_devices: int = 8, min_devices: int = 1,
                    subgroup_kinds: tuple[SubgroupType, ...] = (SubgroupType.REPLICATED,)
                    ) -> GSPMDSharding:
    """A GSPMDSharding: a drawn device list and an HLO sharding over its positions."""
    n = draw(st.integers(min_devices, max_devices))
    hlo = draw(hlo_shardings(n, subgroup_kinds=subgroup_kinds))
    return GSPMDSharding(draw(device_lists(n)), hlo)


def shardings(max_devices: int = 8) -> st.SearchStrategy[Any]:
    """A NamedSharding, a SingleDeviceSharding or a GSPMDSharding (shrinks to NamedSharding)."""
    return st.one_of(named_shardings(max_devices), single_device_shardings(max_devices),
                     gspmd_shardings(max_devices))


# --------------------------------------------------------------------------- shapes

def _acts_replicated(hlo: Any) -> bool:
    return isinstance(hlo, (Replicated, Maximal)) or hlo.num_devices == 1


def rank_needed(sharding: Any) -> tuple[int, bool]:
    """The least rank a value placed by ``sharding`` has, and whether it must be exactly that.

    A NamedSharding needs its spec's length; a GSPMDSharding that cuts its array needs
    exactly its tile rank (JAX's shard_shape compares them); a SingleDeviceSharding needs 0.
    """
    if isinstance(sharding, NamedSharding):
        return len(sharding.spec), False
    if isinstance(sharding, GSPMDSharding) and isinstance(sharding.hlo, Tiled):
        return sharding.hlo.data_rank, not _acts_replicated(sharding.hlo)
    return 0, False


def _tile_counts(sharding: Any, rank: int) -> tuple[int, ...]:
    try:
        return tuple(tiles_per_dimension(sharding, rank)[0])
    except Rejection:  # manual axes: the tiles still cut the array
        hlo = to_hlo(sharding, rank)
        return hlo.tiles if isinstance(hlo, Tiled) and not _acts_replicated(hlo) else (1,) * rank


def _dim(ways: int, divisible: bool) -> st.SearchStrategy[int]:
    if not divisible:
        return st.integers(0, MAX_DIM)
    most = max(1, MAX_DIM // ways)
    # Zero-size dimensions one time in eight; shrinking leaves them out.
    return st.tuples(st.integers(1, most), st.integers(0, 7)).map(
        lambda kz: 0 if kz[1] == 7 else kz[0] * ways)


@st.composite
def _shape_for_tiles(draw: Any, tiles: tuple[int, ...], divisible: bool | None) -> tuple[int, ...]:
    out = []
    for ways in tiles:
        div = (not draw(st.booleans())) if divisible is None else divisible
        out.append(draw(_dim(ways, div)))
    return tuple(out)


@st.composite
def shapes_for(draw: Any, sharding: Any, divisible: bool | None = None,
               max_rank: int | None = None) -> tuple[int, ...]:
    """A shape for a value placed by ``sharding``: rank at least what it needs, dims 0..16.

    With ``divisible=True`` every dimension is a multiple of its tile count
    (:func:`~shardlaw.spec.tiles_per_dimension`); with ``False`` dimensions are free (and
    may or may not divide); ``None`` mixes both, dimension by dimension. Zero-size
    dimensions occur. Ranks shrink toward the least the sharding accepts.
    """
    needed, exact = rank_needed(sharding)
    if exact:
        rank = needed
    else:
        top = max(needed, max_rank if max_rank is not None else min(needed + 2, 4))
        rank = draw(st.integers(needed, top))
    return draw(_shape_for_tiles(_tile_counts(sharding, rank), divisible))


def _common_shape(draw: Any, group: list[Any], divisible: bool | None = True
                  ) -> tuple[int, ...] | None:
    """A shape every sharding of ``group`` accepts (None when their ranks conflict)."""
    needs = [rank_needed(s) for s in group]
    exact = {r for r, e in needs if e}
    least = max(r for r, _ in needs)
    if len(exact) > 1 or (exact and min(exact) < least):
        return None
    rank = exact.pop() if exact else draw(st.integers(least, min(least + 1, 4) if least < 4
                                                       else least))
    counts = [_tile_counts(s, rank) for s in group]
    tiles = tuple(math.lcm(*ways) for ways in zip(*counts)) if rank else ()
    return draw(_shape_for_tiles(tiles, divisible))


# --------------------------------------------------------------------------- near-equivalent pairs

def _reorder_mesh(mesh: Mesh, perm: tuple[int, ...]) -> Mesh:
    """The same devices at the same named coordinates, with the mesh axes permuted."""
    sizes = tuple(mesh.axis_sizes[p] for p in perm)
    ids = []
    for flat in range(mesh.size):
        coords, rest = [], flat
        for s in reversed(sizes):
            rest, c = divmod(rest, s)
            coords.append(c)
        coords.reverse()
        old = [0] * len(perm)
        for k, p in enumerate(perm):
            old[p] = coords[k]
        position = 0
        for c, s in zip(old, mesh.axis_sizes):
            position = position * s + c
        ids.append(mesh.devices.id_at(position))
    return Mesh(sizes, tuple(mesh.axis_names[p] for p in perm),
                DeviceList.of_ids(ids, platform=mesh.platform),
                tuple(mesh.axis_types[p] for p in perm))


def _rename_spec(spec: PartitionSpec, rename: dict[str, str]) -> PartitionSpec:
    def entry(e: Any) -> Any:
        if isinstance(e, tuple):
            return tuple(rename[n] for n in e)
        if isinstance(e, str):
            return rename[e]
        return e
    return P(*(entry(e) for e in spec.partitions),
             unreduced={rename[n] for n in spec.unreduced},
             reduced={rename[n] for n in spec.reduced})


def _with_mesh(s: NamedSharding, mesh: Any, spec: PartitionSpec | None = None) -> NamedSharding:
    return NamedSharding(mesh, s.spec if spec is None else spec, memory_kind=s.memory_kind)


_NAMED_REWRITES = ("rename", "trailing_none", "size1_axis", "gspmd", "single", "reversed",
                   "reorder_tuple", "transpose_mesh", "retype")


@st.composite
def near_equivalents(draw: Any, sharding: Any, shape: tuple[int, ...]) -> Any:
    """A sharding written differently from ``sharding``, usable with ``shape``.

    Most rewrites keep the placement (renamed axes, a trailing None, an added size-1 axis,
    the GSPMDSharding of the same HLO over the same devices, a SingleDeviceSharding for a
    one-device mesh, a transposed mesh with the spec unchanged, Auto and Explicit swapped);
    some are near misses (the device order reversed, the axes of a tuple entry reordered).
    """
    if isinstance(sharding, SingleDeviceSharding):
        return _near_single_device(draw, sharding, shape)
    if isinstance(sharding, GSPMDSharding):
        return _near_gspmd(draw, sharding)
    assert isinstance(sharding, NamedSharding)
    how = draw(st.sampled_from(_NAMED_REWRITES))
    rewritten = _NAMED_REWRITE[how](draw, sharding, shape)
    # None: the rewrite does not apply; the same sharding, rebuilt
    return sharding if rewritten is None else rewritten


def _near_single_device(draw: Any, sharding: Any, shape: tuple[int, ...]) -> Any:
    d = sharding.device
    if draw(st.booleans()):
        return GSPMDSharding(DeviceList((d,)), Replicated(), memory_kind=sharding.memory_kind)
    count = draw(st.integers(1, 3))
    names = ("x", "y", "z")[:count]
    mesh = Mesh((1,) * count, names, DeviceList((d,)))
    used = draw(st.lists(st.sampled_from(names), unique=True))
    spec = P(*used[: len(shape)])
    return NamedSharding(mesh, spec, memory_kind=sharding.memory_kind)


def _near_gspmd(draw: Any, sharding: Any) -> Any:
    hlo, devs = sharding.hlo, sharding.devices
    choice = draw(st.sampled_from(("explicit", "text", "named", "single")))
    if choice == "single" and len(devs) == 1:
        return SingleDeviceSharding(devs[0], memory_kind=sharding.memory_kind)
    if choice == "named" and isinstance(hlo, Replicated):
        mesh = Mesh((len(devs),), ("x",), devs)
        return NamedSharding(mesh, P(), memory_kind=sharding.memory_kind)
    if choice == "explicit" and isinstance(hlo, Tiled) and hlo.num_devices > 1:
        hlo = Tiled(hlo.dims, hlo.assignment_tuple(), hlo.subgroups)
    elif choice == "text":
        try:
            hlo = parse_hlo(str(hlo))
        except Rejection:  # XLA cannot read its own '{devices=[1]0}'
            pass
    explicit = DeviceList(tuple(devs))
    return GSPMDSharding(explicit if draw(st.booleans()) else devs, hlo,
                         memory_kind=sharding.memory_kind)


def _rewrite_rename(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    mesh, spec = s.mesh, s.spec
    alphabet = draw(st.sampled_from(AXIS_ALPHABETS))
    fresh = draw(st.permutations(alphabet + tuple(n + "2" for n in alphabet)))
    rename = dict(zip(mesh.axis_names, fresh))
    new = type(mesh)(mesh.axis_sizes, tuple(rename[n] for n in mesh.axis_names),
                     *(() if isinstance(mesh, AbstractMesh) else (mesh.devices,)),
                     mesh.axis_types)
    return _with_mesh(s, new, _rename_spec(spec, rename))


def _rewrite_trailing_none(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    spec = s.spec
    if len(spec) < len(shape):
        return _with_mesh(s, s.mesh, P(*spec.partitions, None, unreduced=spec.unreduced,
                                       reduced=spec.reduced))
    return None


def _rewrite_size1_axis(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    mesh, spec = s.mesh, s.spec
    if len(mesh.axis_names) >= 6:
        return None
    name = next(n for n in ("one", "unit", "single", "solo", "mono", "only", "uno")
                if n not in mesh.axis_names)
    at = draw(st.integers(0, len(mesh.axis_names)))
    sizes = mesh.axis_sizes[:at] + (1,) + mesh.axis_sizes[at:]
    names = mesh.axis_names[:at] + (name,) + mesh.axis_names[at:]
    kind = draw(st.sampled_from((AxisType.Auto, AxisType.Explicit)))
    types = mesh.axis_types[:at] + (kind,) + mesh.axis_types[at:]
    new = (AbstractMesh(sizes, names, types) if isinstance(mesh, AbstractMesh)
           else Mesh(sizes, names, mesh.devices, types))
    parts = list(spec.partitions)
    free = [i for i, e in enumerate(parts) if e is None]
    if free and draw(st.booleans()):
        parts[draw(st.sampled_from(free))] = name
    return _with_mesh(s, new, P(*parts, unreduced=spec.unreduced, reduced=spec.reduced))


def _rewrite_gspmd(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(s.mesh, Mesh):
        return GSPMDSharding(s.mesh.devices, to_hlo(s, len(shape)), memory_kind=s.memory_kind)
    return None


def _rewrite_single(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(s.mesh, Mesh) and s.mesh.size == 1:
        return SingleDeviceSharding(s.mesh.devices[0], memory_kind=s.memory_kind)
    return None


def _rewrite_reversed(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    mesh = s.mesh
    if not isinstance(mesh, Mesh):
        return None
    flipped = DeviceList.of_ids(tuple(reversed(mesh.devices.id_tuple())),
                                platform=mesh.platform)
    keep = draw(st.booleans())
    new = Mesh(mesh.axis_sizes, mesh.axis_names, flipped, mesh.axis_types)
    return _with_mesh(s, new, None if keep else P())


def _rewrite_reorder_tuple(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    spec = s.spec
    parts = list(spec.partitions)
    tuples = [i for i, e in enumerate(parts) if isinstance(e, tuple)]
    if not tuples:
        return None
    i = draw(st.sampled_from(tuples))
    parts[i] = tuple(draw(st.permutations(parts[i])))
    return _with_mesh(s, s.mesh, P(*parts, unreduced=spec.unreduced, reduced=spec.reduced))


def _rewrite_transpose_mesh(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    if not isinstance(s.mesh, Mesh):
        return None
    perm = tuple(draw(st.permutations(range(len(s.mesh.axis_names)))))
    return _with_mesh(s, _reorder_mesh(s.mesh, perm))


def _rewrite_retype(draw: Any, s: Any, shape: tuple[int, ...]) -> Any:
    mesh, spec = s.mesh, s.spec
    pinned = spec.unreduced | spec.reduced
    types = []
    for n, t in zip(mesh.axis_names, mesh.axis_types):
        if t is AxisType.Manual or n in pinned:
            types.append(t)
        else:
            types.append(draw(st.sampled_from((AxisType.Auto, AxisType.Explicit))))
    if UNCONSTRAINED in spec.partitions and AxisType.Auto not in types:
        types = list(mesh.axis_types)
    new = (AbstractMesh(mesh.axis_sizes, mesh.axis_names, types)
           if isinstance(mesh, AbstractMesh)
           else Mesh(mesh.axis_sizes, mesh.axis_names, mesh.devices, types))
    return _with_mesh(s, new)


# Each of _NAMED_REWRITES: a rewrite of a NamedSharding, or None where it does not apply.
_NAMED_REWRITE = {
    "rename": _rewrite_rename, "trailing_none": _rewrite_trailing_none,
    "size1_axis": _rewrite_size1_axis, "gspmd": _rewrite_gspmd, "single": _rewrite_single,
    "reversed": _rewrite_reversed, "reorder_tuple": _rewrite_reorder_tuple,
    "transpose_mesh": _rewrite_transpose_mesh, "retype": _rewrite_retype,
}


@st.composite
def _concrete_shardings(draw: Any, max_devices: int) -> Any:
    return draw(st.one_of(named_shardings(max_devices), single_device_shardings(max_devices),
                          gspmd_shardings(max_devices)))


@st.composite
def _other_sharding(draw: Any, first: Any, shape: tuple[int, ...], max_devices: int) -> Any:
    """An unrelated sharding, usually over as many devices as ``first``, that fits ``shape``."""
    same_count = draw(st.integers(0, 3)) > 0
    n = len(first.device_list) if same_count else None
    for _ in range(3):
        if n is None:
            other = draw(_concrete_shardings(max_devices))
        elif n == 1 and draw(st.booleans()):
            other = draw(single_device_shardings(max_devices))
        elif draw(st.booleans()):
            other = draw(gspmd_shardings(n, min_devices=n))
        else:
            other = draw(named_shardings(n, min_devices=n, max_rank=len(shape)))
        if fits(other, shape):
            return other
    mesh = draw(meshes(max_devices=n or max_devices, min_devices=n or 1))
    return NamedSharding(mesh, P())


def fits(sharding: Any, shape: tuple[int, ...]) -> bool:
    """Whether a value of ``shape`` can be placed by ``sharding`` (rank and divisibility)."""
    from shardlaw.spec import check_rank, shard_shape
    needed, exact = rank_needed(sharding)
    if len(shape) < needed or (exact and len(shape) != needed):
        return False
    try:
        check_rank(sharding, shape)
        shard_shape(sharding, shape)
    except Rejection:
        return False
    return True


@st.composite
def sharding_pairs(draw: Any, max_devices: int = 8) -> tuple[Any, Any, tuple[int, ...]]:
    """``(a, b, shape)``: two concrete shardings and a shape both accept (dimensions divide).

    Three pairs in four are near-equivalent — ``b`` is ``a`` rewritten by
    :func:`near_equivalents` — and the rest are unrelated shardings, mostly over the same
    number of devices.
    """
    a = draw(_concrete_shardings(max_devices))
    shape = draw(shapes_for(a, divisible=True))
    if draw(st.integers(0, 3)) < 3:
        b = draw(near_equivalents(a, shape))
        if fits(b, shape):
            return a, b, shape
    return a, draw(_other_sharding(a, shape, max_devices)), shape


@st.composite
def sharding_triples(draw: Any, max_devices: int = 8) -> tuple[Any, Any, Any, tuple[int, ...]]:
    """``(a, b, c, shape)``: a pair from :func:`sharding_pairs` and a rewrite ``c`` of ``b``."""
    a, b, shape = draw(sharding_pairs(max_devices))
    c = draw(near_equivalents(b, shape))
    if not fits(c, shape):
        c = b
    return a, b, c, shape


# --------------------------------------------------------------------------- invalid input

_STRANGERS = ("q", "unknown", "X", "x2")


@st.composite
def invalid_partition_specs(draw: Any, mesh: Mesh | AbstractMesh) -> PartitionSpec:
    """A PartitionSpec that ``NamedSharding(mesh, spec)`` rejects.

    One of: an axis the mesh lacks (NS-1), an axis used twice (NS-2), UNCONSTRAINED over a
    mesh without Auto axes (NS-3), an unreduced or reduced axis that is not Explicit or not
    in the mesh (NS-4). Only the kinds that ``mesh`` makes possible are drawn.
    """
    names = mesh.axis_names
    kinds = ["unknown"]
    if names:
        kinds.append("twice")
    if AxisType.Auto not in mesh.axis_types:
        kinds.append("unconstrained")
    if any(t is not AxisType.Explicit for t in mesh.axis_types):
        kinds.append("reduction")
    kinds.append("reduction_unknown")
    kind = draw(st.sampled_from(kinds))
    stranger = draw(st.sampled_from([n for n in _STRANGERS if n not in names]))
    base = [None] * draw(st.integers(0, 2))
    if kind == "unknown":
        entry = stranger if not names or draw(st.booleans()) else (draw(st.sampled_from(names)),
                                                                   stranger)
        at = draw(st.integers(0, len(base)))
        return P(*base[:at], entry, *base[at:])
    if kind == "twice":
        axis = draw(st.sampled_from(names))
        if draw(st.booleans()):
            return P(*base, (axis, axis))
        return P(axis, *base, axis)
    if kind == "unconstrained":
        return P(*base, UNCONSTRAINED)
    if kind == "reduction":
        axis = draw(st.sampled_from([n for n, t in zip(names, mesh.axis_types)
                                     if t is not AxisType.Explicit]))
    else:
        axis = stranger
    return P(*base, **{draw(st.sampled_from(("unreduced", "reduced"))): {axis}})


class BadValue(typing.NamedTuple):
    """A recipe for an invalid value: ``build()`` must raise a Rejection of ``rule`` whose
    message shows ``shows`` (the offending value, as the message writes it)."""

    description: str
    build: Callable[[], Any]
    rule: str
    shows: str

    def __repr__(self) -> str:
        return f"BadValue({self.description!r}, rule={self.rule!r}, shows={self.shows!r})"


def _named(sizes: tuple[int, ...] = (2, 2), spec: PartitionSpec = P("x"),
           names: tuple[str, ...] = ("x", "y")) -> NamedSharding:
    return NamedSharding(Mesh.iota(sizes, names), spec)


def _fixed_bad_values() -> list[BadValue]:
    """Invalid values, one or more per refusing rule of the values and the placement core."""
    m22 = Mesh.iota((2, 2), ("x", "y"))
    s = NamedSharding(m22, P("x"))
    return (_bad_values(m22, s) + _bad_devices_and_specs(m22, s) + _bad_hlo_values()
            + _bad_placements(m22, s))


def _bad_values(m22: Any, s: Any) -> list[BadValue]:
    from shardlaw.spec import check_rank, shard_shape
    bv = BadValue
    return [
        # VAL-1: dimensions are non-negative integers
        bv("negative axis size", lambda: AbstractMesh((-1, 4), ("x", "y")), "VAL-1", "-1"),
        bv("float axis size", lambda: Mesh((2.0,), ("x",), range(2)), "VAL-1", "2.0"),
        bv("bool axis size", lambda: Mesh((True,), ("x",), range(1)), "VAL-1", "True"),
        bv("string axis sizes", lambda: AbstractMesh("ab", ("x",)), "VAL-1", "'ab'"),
        bv("None axis sizes", lambda: AbstractMesh(None, ("x",)), "VAL-1", "None"),
        bv("negative shape", lambda: shard_shape(s, (-1, 2)), "VAL-1", "-1"),
        bv("string shape", lambda: shard_shape(s, "ab"), "VAL-1", "'ab'"),
        bv("float in shape", lambda: shard_shape(s, (4, 2.5)), "VAL-1", "2.5"),
        bv("bool in shape", lambda: check_rank(s, (False,)), "VAL-1", "False"),
        bv("negative rank", lambda: to_hlo(s, -1), "VAL-1", "-1"),
        bv("float rank", lambda: to_hlo(s, 1.5), "VAL-1", "1.5"),
        bv("device ids as a string", lambda: Mesh((2,), ("x",), "ab"), "VAL-1", "'ab'"),
        bv("device ids None", lambda: Mesh((2,), ("x",), None), "VAL-1", "None"),
        bv("negative device id in ids", lambda: DeviceList.of_ids((0, -3)), "VAL-1", "-3"),
        bv("negative iota dims", lambda: Iota((-2,)), "VAL-1", "-2"),
        # VAL-2: permutations
        bv("iota perm repeats", lambda: Iota((2, 2), (0, 0)), "VAL-2", "(0, 0)"),
        bv("iota perm out of range", lambda: Iota((2,), (1,)), "VAL-2", "(1,)"),
        # VAL-3: axis names
        bv("duplicate axis names", lambda: Mesh((2, 2), ("x", "x"), range(4)), "VAL-3", "'x'"),
        bv("empty axis name", lambda: AbstractMesh((2,), ("",)), "VAL-3", "''"),
        bv("integer axis name", lambda: AbstractMesh((2,), (7,)), "VAL-3", "7"),
        bv("None axis name", lambda: AbstractMesh((2,), (None,)), "VAL-3", "None"),
        bv("axis names not iterable", lambda: AbstractMesh((2,), 5), "VAL-3", "5"),
        # VAL-4: one name per axis, one device per position
        bv("fewer names than sizes", lambda: Mesh((2, 2), ("x",), range(4)), "VAL-4", "('x',)"),
        bv("device list too short", lambda: Mesh((2, 4), ("x", "y"), range(7)), "VAL-4", "7"),
        bv("device list too long", lambda: Mesh((2,), ("x",), range(3)), "VAL-4", "3"),
        bv("too many axis types",
           lambda: AbstractMesh((2,), ("x",), (AxisType.Auto, AxisType.Auto)), "VAL-4", "('x',)"),
    ]


def _bad_devices_and_specs(m22: Any, s: Any) -> list[BadValue]:
    from shardlaw.spec import jax_equivalent, num_devices, shard_shape
    bv = BadValue
    return [
        # VAL-5: devices
        bv("duplicate device ids", lambda: Mesh((2,), ("x",), [0, 0]), "VAL-5", "0"),
        bv("duplicate devices", lambda: DeviceList([Device(1), Device(1)]), "VAL-5", "1"),
        bv("negative device id", lambda: Device(-1), "VAL-5", "-1"),
        bv("string device id", lambda: Device("0"), "VAL-5", "'0'"),
        bv("empty platform", lambda: Device(0, ""), "VAL-5", "''"),
        bv("ints as devices", lambda: DeviceList([0, 1]), "VAL-5", "0"),
        bv("device list from a string", lambda: DeviceList("ab"), "VAL-5", "'ab'"),
        bv("zero devices per process",
           lambda: DeviceList(Iota.range(4), devices_per_process=0), "VAL-5", "0"),
        bv("string axis type",
           lambda: AbstractMesh((2,), ("x",), ("Auto",)), "VAL-5", "'Auto'"),
        # VAL-6: partition spec entries
        bv("integer spec entry", lambda: P(3), "VAL-6", "3"),
        bv("integer in a tuple entry", lambda: P(("x", 3)), "VAL-6", "3"),
        bv("dict spec entry", lambda: P({"x": 1}), "VAL-6", "{'x': 1}"),
        bv("axis both split and unreduced", lambda: P("x", unreduced={"x"}), "VAL-6", "'x'"),
        bv("axis unreduced and reduced",
           lambda: P(unreduced={"x"}, reduced={"x"}), "VAL-6", "'x'"),
        # VAL-7: memory kinds
        bv("unknown memory kind", lambda: NamedSharding(m22, P(), memory_kind="hbm"),
           "VAL-7", "'hbm'"),
        # VAL-8: wrong types where a sharding or its parts belong
        bv("string mesh", lambda: NamedSharding("mesh", P()), "VAL-8", "'mesh'"),
        bv("tuple spec", lambda: NamedSharding(m22, ("x",)), "VAL-8", "('x',)"),
        bv("integer memory kind", lambda: NamedSharding(m22, P(), memory_kind=3), "VAL-8", "3"),
        bv("string device", lambda: SingleDeviceSharding("cpu:0"), "VAL-8", "'cpu:0'"),
        bv("bool device", lambda: SingleDeviceSharding(True), "VAL-8", "True"),
        bv("integer HLO sharding", lambda: GSPMDSharding(range(2), 42), "VAL-8", "42"),
        bv("lowering a non-sharding", lambda: to_hlo(object, 1), "VAL-8", "object"),
        bv("shard shape of a string", lambda: shard_shape("sharding", (2,)), "VAL-8",
           "'sharding'"),
        bv("device count of None", lambda: num_devices(None), "VAL-8", "None"),
        bv("equivalence with None", lambda: jax_equivalent(s, None, 1), "VAL-8", "None"),
    ]


def _bad_hlo_values() -> list[BadValue]:
    from shardlaw.spec import hlo_text
    bv = BadValue
    return [
        # HLO-1: tile assignments
        bv("assignment too short", lambda: tiled((2, 2), (0, 1, 2)), "HLO-1", "(2, 2)"),
        bv("assignment repeats", lambda: tiled((2,), (0, 0)), "HLO-1", "(2,)"),
        bv("iota reshape too small", lambda: iota_tile((2, 2), (3,)), "HLO-1", "(3,)"),
        # HLO-2: HLO text
        bv("explicit list too short", lambda: parse_hlo("{devices=[2,2]0,1,2}"), "HLO-2",
           "{devices=[2,2]0,1,2}"),
        bv("iota too small", lambda: parse_hlo("{devices=[2,2]<=[3]}"), "HLO-2",
           "{devices=[2,2]<=[3]}"),
        bv("garbage text", lambda: parse_hlo("garbage"), "HLO-2", "garbage"),
        bv("None text", lambda: parse_hlo(None), "HLO-2", "None"),
        bv("bytes text", lambda: parse_hlo(b"{replicated}"), "HLO-2", "b'{replicated}'"),
        bv("empty text", lambda: parse_hlo(""), "HLO-2", "''"),
        bv("bad transpose", lambda: parse_hlo("{devices=[2]<=[2]T(1)}"), "HLO-2", "T(1)"),
        bv("repeated transpose", lambda: parse_hlo("{devices=[2,2]<=[2,2]T(0,0)}"), "HLO-2",
           "T(0,0)"),
        bv("repeated device", lambda: parse_hlo("{devices=[2]0,0}"), "HLO-2",
           "{devices=[2]0,0}"),
        bv("device out of range", lambda: parse_hlo("{devices=[2]0,2}"), "HLO-2",
           "{devices=[2]0,2}"),
        bv("unknown subgroup kind",
           lambda: parse_hlo("{devices=[2,2]<=[4] last_tile_dims={bogus}}"), "HLO-2", "bogus"),
        bv("too many subgroup kinds",
           lambda: parse_hlo("{devices=[2]<=[2] last_tile_dims={manual, replicated}}"),
           "HLO-2", "last_tile_dims"),
        bv("maximal device not a number", lambda: parse_hlo("{maximal device=x}"), "HLO-2",
           "device=x"),
        bv("missing brace", lambda: parse_hlo("{replicated"), "HLO-2", "{replicated"),
        bv("unknown word", lambda: parse_hlo("{unknown}"), "HLO-2", "{unknown}"),
        bv("printing a non-HLO", lambda: hlo_text("{replicated}"), "HLO-2", "{replicated}"),
        bv("GSPMD from bad text", lambda: GSPMDSharding(range(2), "{devices=[2]0}"), "HLO-2",
           "{devices=[2]0}"),
    ]


def _bad_placements(m22: Any, s: Any) -> list[BadValue]:
    from shardlaw.spec import (
        box_of, check_rank, devices_indices_map, num_devices, placement_equivalent, replica_id,
        shard_shape,
    )
    abstract = NamedSharding(AbstractMesh((2, 2), ("x", "y")), P("x"))
    manual = NamedSharding(Mesh.iota((2, 2), ("x", "y"), (AxisType.Auto, AxisType.Manual)),
                           P("x"))
    bv = BadValue
    return [
        # NS-1 .. NS-5: a spec against its mesh, a sharding against a rank
        bv("unknown axis", lambda: NamedSharding(m22, P("z")), "NS-1", "'z'"),
        bv("axis used twice", lambda: NamedSharding(m22, P("x", "x")), "NS-2", "'x'"),
        bv("UNCONSTRAINED without Auto",
           lambda: NamedSharding(AbstractMesh((2,), ("x",), AxisType.Explicit),
                                 P(UNCONSTRAINED)), "NS-3", "UNCONSTRAINED"),
        bv("unreduced Auto axis", lambda: NamedSharding(m22, P(unreduced={"y"})), "NS-4", "'y'"),
        bv("rank too small", lambda: to_hlo(_named(spec=P(None, "x")), 1), "NS-5", "rank 1"),
        bv("rank too small for spec", lambda: check_rank(_named(spec=P("x", None)), (4,)),
           "NS-5", "rank 1"),
        # DIV-1: dimensions divide
        bv("indivisible dimension", lambda: shard_shape(s, (3, 2)), "DIV-1", "size 3"),
        bv("GSPMD tile rank differs",
           lambda: shard_shape(GSPMDSharding(range(2), "{devices=[2]<=[2]}"), (2, 2)),
           "DIV-1", "(2, 2)"),
        bv("indivisible placement",
           lambda: placement_equivalent(s, s, (5,)), "DIV-1", "size 5"),
        # DEV-1: device counts
        bv("tile assignment larger than device list",
           lambda: num_devices(GSPMDSharding(range(2), "{devices=[4]<=[4]}")), "DEV-1", "4"),
        bv("maximal device past the list",
           lambda: num_devices(GSPMDSharding(range(2), Maximal(5))), "DEV-1", "2"),
        bv("indices of an abstract mesh", lambda: devices_indices_map(abstract, (4,)), "DEV-1",
           "abstract"),
        bv("replica id on an abstract mesh", lambda: replica_id(abstract, (4,), 0), "DEV-1",
           "abstract"),
        # IDX-1: per-device questions
        bv("device not in the sharding", lambda: box_of(s, (4,), 99), "IDX-1", "99"),
        bv("replica id of a foreign device",
           lambda: replica_id(SingleDeviceSharding(3), (4,), 2), "IDX-1", "2"),
        bv("boxes of a manual sharding", lambda: devices_indices_map(manual, (4,)), "IDX-1",
           "manual"),
        bv("boxes of an unreduced sharding",
           lambda: devices_indices_map(
               NamedSharding(Mesh.iota((2,), ("x",), AxisType.Explicit), P(unreduced={"x"})),
               (4,)), "IDX-1", "unreduced"),
    ]


@st.composite
def _random_bad_values(draw: Any) -> BadValue:
    """Invalid values with drawn numbers, so that shrinking shows the smallest offender."""
    kind = draw(st.sampled_from(("negative", "non_int", "duplicate_name", "count",
                                 "duplicate_device", "hlo_count", "bad_spec")))
    if kind == "negative":
        sizes = list(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        bad = draw(st.integers(-5, -1))
        sizes[draw(st.integers(0, len(sizes) - 1))] = bad
        names = ("x", "y", "z")[: len(sizes)]
        return BadValue(f"axis sizes {sizes}", lambda: AbstractMesh(tuple(sizes), names),
                        "VAL-1", str(bad))
    if kind == "non_int":
        bad = draw(st.sampled_from((2.0, "2", None, 1.5, True, (2,), [1])))
        return BadValue(f"shape ({bad!r},)", lambda: _check_rank_of((bad,)), "VAL-1", repr(bad))
    if kind == "duplicate_name":
        name = draw(st.sampled_from(("x", "a", "data")))
        count = draw(st.integers(2, 4))
        return BadValue(f"axis names {(name,) * count}",
                        lambda: AbstractMesh((1,) * count, (name,) * count), "VAL-3", repr(name))
    if kind == "count":
        sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
        need = math.prod(sizes)
        given = draw(st.integers(0, 16).filter(lambda g: g != need))
        names = ("x", "y", "z")[: len(sizes)]
        return BadValue(f"mesh {sizes} over {given} devices",
                        lambda: Mesh(tuple(sizes), names, range(given)), "VAL-4", str(given))
    if kind == "duplicate_device":
        n = draw(st.integers(2, 8))
        ids = list(draw(st.permutations(range(n))))
        i, j = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        ids[j] = ids[i]
        return BadValue(f"device ids {ids}", lambda: Mesh((n,), ("x",), ids), "VAL-5",
                        str(ids[i]))
    if kind == "hlo_count":
        dims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
        need = math.prod(dims)
        given = draw(st.integers(1, 16).filter(lambda g: g != need))
        text = "{devices=[" + ",".join(map(str, dims)) + "]<=[" + str(given) + "]}"
        if draw(st.booleans()):
            text = "{devices=[" + ",".join(map(str, dims)) + "]" + ",".join(
                map(str, range(given))) + "}"
        return BadValue(f"HLO text {text}", lambda: parse_hlo(text), "HLO-2", text)
    mesh = draw(meshes(max_devices=4))
    spec = draw(invalid_partition_specs(mesh))
    return BadValue(f"{spec!r} over {mesh!r}", lambda: NamedSharding(mesh, spec), "NS-",
                    repr(spec))


def _check_rank_of(shape: Any) -> Any:
    from shardlaw.spec import check_rank
    return check_rank(_named(spec=P()), shape)


def bad_values() -> st.SearchStrategy[BadValue]:
    """Recipes for invalid values, each with the rule that must reject it.

    Every :class:`BadValue` has a ``build()`` that must raise a
    :class:`~shardlaw.spec.Rejection` whose rule starts with ``rule`` and whose message shows
    ``shows``: negative, non-integer and boolean dimensions, empty, non-string and duplicate
    axis names, duplicate device ids, device lists of the wrong length, malformed HLO text,
    wrong types passed to NamedSharding, Mesh, GSPMDSharding and the placement rules.
    """
    return st.one_of(st.sampled_from(_fixed_bad_values()), _random_bad_values())
