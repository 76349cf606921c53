"""Shardings as jit reads them: leaves (JIT-2, JIT-3, JIT-5), fit (FIT-1..3), sameness (EQ-1..3).

Every function takes JAX objects (``jax.sharding.NamedSharding``, ``SingleDeviceSharding``,
``GSPMDSharding``, ``PartitionSpec``, meshes) and decides one question of the jit-call
semantics. The answers that cost more than a few attribute reads (a placement class, an
HLO sharding) are cached per (sharding, shape), since shardings are immutable and hashable.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from . import internals
from .layouts import Format, Laid, Layout, check_order
from .rules import reject, rule

__all__ = [
    "UNSPECIFIED", "check_leaf", "context_mesh", "leaf_to_sharding", "check_fits",
    "check_typed_fit", "check_lowered_fit",
    "hlo_equal", "jax_equivalent", "placement_class", "is_fully_replicated", "devices_of",
    "is_abstract", "num_devices",
]

P = PartitionSpec
UNCONSTRAINED = PartitionSpec.UNCONSTRAINED


class _Unspecified:
    """A sharding left to jit (the option left out, or a None leaf under jit)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSPECIFIED"

    def __reduce__(self) -> str:
        return "UNSPECIFIED"


UNSPECIFIED = _Unspecified()


def is_abstract(sharding: Any) -> bool:
    return isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh)


def spec_entries(spec: PartitionSpec) -> tuple:
    """A PartitionSpec's per-dimension entries (its unreduced and reduced sets left out)."""
    return tuple(spec.partitions) if hasattr(spec, "partitions") else tuple(spec)


def is_partial(sharding: Any) -> bool:
    """Whether a sharding (or the sharding a type carries) has unreduced or reduced mesh axes."""
    spec = getattr(sharding, "spec", None)
    if spec is not None and (getattr(spec, "unreduced", None) or getattr(spec, "reduced", None)):
        return True
    h = getattr(sharding, "_hlo_sharding", None)
    return h is not None and "unreduced" in str(h)


# --------------------------------------------------------------------------- JIT-2

@rule("JIT-2")
def check_leaf(leaf: Any, which: str) -> None:
    """Every leaf of ``in_shardings``/``out_shardings`` is None, a PartitionSpec, a Sharding or a Format (whose sharding part is checked alike), never a bare Layout; a NamedSharding's mesh is not empty; neither holds UNCONSTRAINED; a PartitionSpec names each mesh axis once."""
    if leaf is None or leaf is UNSPECIFIED:
        return
    if isinstance(leaf, jax.sharding.Sharding):
        if not isinstance(leaf, NamedSharding):
            return
        if leaf.mesh.empty:
            raise reject("JIT-2", ValueError, f"{which} holds {leaf!r}, but its mesh is empty", which)
        spec = leaf.spec
    elif isinstance(leaf, PartitionSpec):
        spec = leaf
    elif isinstance(leaf, Format):
        # A Format is its sharding (checked as a leaf) plus a layout for the compiler.
        if isinstance(leaf.layout, Layout):
            check_order(leaf.layout, which)
        check_leaf(leaf.sharding, which)
        return
    elif isinstance(leaf, Layout) or leaf is Layout.AUTO:
        raise reject("JIT-2", ValueError,
                     f"{which} holds the bare layout {leaf!r}; jit takes a layout only inside "
                     "a Format. Pass Format(layout, sharding) instead.", which)
    else:
        raise reject("JIT-2", TypeError,
                     f"a leaf of {which} must be a Sharding, a PartitionSpec or None, got "
                     f"{leaf!r}. Wrap mesh axis names in P(...), or pass a NamedSharding.",
                     which)
    if any(entry is UNCONSTRAINED for entry in spec_entries(spec)):
        raise reject("JIT-2", ValueError,
                     f"{which} holds {leaf!r}, but jit does not take UNCONSTRAINED dimensions",
                     which)
    if isinstance(leaf, PartitionSpec):
        _check_axes_used_once(spec, which)


def _check_axes_used_once(spec: PartitionSpec, which: str) -> None:
    """A mesh axis splits at most one dimension, and only once."""
    seen: set = set()
    twice = []
    for entry in spec_entries(spec):
        if entry is None or entry is UNCONSTRAINED:
            continue
        for name in entry if isinstance(entry, tuple) else (entry,):
            if name in seen and name not in twice:
                twice.append(name)
            seen.add(name)
    if twice:
        raise reject("NS-2", Exception,
                     f"{which}: a PartitionSpec maps each mesh axis to at most one dimension, "
                     f"but {spec} uses {twice} more than once", which,
                     jax_error="DuplicateSpecError")


# --------------------------------------------------------------------------- JIT-5, JIT-3

@rule("JIT-5")
def context_mesh() -> Mesh | AbstractMesh | None:
    """jit sees the concrete mesh set with ``jax.set_mesh``, or an abstract context mesh only when one of its axes is Explicit."""
    concrete, abstract = internals.context_meshes()
    if concrete is not None:
        return concrete
    if abstract is not None and any(t == jax.sharding.AxisType.Explicit
                                    for t in abstract.axis_types):
        return abstract
    return None


@rule("JIT-3")
def leaf_to_sharding(leaf: Any, context: Any, which: str) -> Any:
    """Under jit a None leaf leaves the sharding to jit, a Sharding stands for itself, a PartitionSpec becomes a NamedSharding over the context mesh, which must be set, and a Format stands for its sharding part."""
    if leaf is None or leaf is UNSPECIFIED:
        return UNSPECIFIED
    if isinstance(leaf, Format):
        return Laid(leaf_to_sharding(leaf.sharding, context, which), leaf.layout)
    if not isinstance(leaf, PartitionSpec):
        return leaf
    if context is None:
        raise reject("JIT-3", RuntimeError,
                     f"{which} holds the PartitionSpec {leaf}, which names mesh axes, but no "
                     "mesh is set. Set one with jax.set_mesh(mesh), or pass "
                     "NamedSharding(mesh, spec) instead of the bare spec.")
    names = set(context.axis_names)
    for entry in spec_entries(leaf):
        if entry is None or entry is UNCONSTRAINED:
            continue
        for name in entry if isinstance(entry, tuple) else (entry,):
            if name not in names:
                raise reject("NS-1", ValueError,
                             f"the PartitionSpec {leaf} names the mesh axis {name!r}, which the "
                             f"context mesh (axes {tuple(context.axis_names)}) does not have",
                             which)
    try:
        return NamedSharding(context, leaf)
    except ValueError as error:
        # NS-4: unreduced and reduced axes are Explicit axes of the mesh (JAX's constructor
        # says so first; its class and words lead the engine's).
        raise reject("NS-4", ValueError,
                     f"the PartitionSpec {leaf} marks mesh axes unreduced or reduced "
                     f"({sorted(leaf.unreduced | leaf.reduced)}), which must be Explicit axes "
                     f"of the context mesh (axis types {tuple(context.axis_types)})",
                     which).as_jax(error) from None


# --------------------------------------------------------------------------- FIT-1

def _hlo_tiles(hlo: Any) -> tuple[int, ...] | None:
    """The tile counts of a tiled HLO sharding's data dimensions (None: it acts replicated)."""
    if hlo.is_replicated() or hlo.is_maximal() or not hlo.is_tiled():
        return None
    dims = list(hlo.tile_assignment_dimensions())
    extra = len(hlo.subgroup_types())
    if hlo.replicate_on_last_tile_dim():
        extra = max(extra, 1)
    return tuple(dims[:len(dims) - extra])


def _ways(sharding: Any, ndim: int) -> tuple[int, int, tuple[int, ...]]:
    """(rank the sharding needs, how its tiles compare with that rank, tiles per dimension).

    The second value is 0 when the tiles have exactly ``ndim`` dimensions.
    """
    if isinstance(sharding, NamedSharding):
        sizes = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_sizes))
        entries = spec_entries(sharding.spec)
        ways = []
        for d in range(ndim):
            entry = entries[d] if d < len(entries) else None
            if entry is None or entry is UNCONSTRAINED:
                ways.append(1)
                continue
            names = entry if isinstance(entry, tuple) else (entry,)
            ways.append(math.prod(sizes[n] for n in names))
        return len(entries), 0, tuple(ways)
    if isinstance(sharding, internals.GSPMDSharding):
        hlo = sharding._hlo_sharding
        tiles = _hlo_tiles(hlo)
        if tiles is None:
            return (1 if hlo.is_maximal() and not hlo.is_replicated() else 0), 0, (1,) * ndim
        return len(tiles), len(tiles) - ndim, tiles
    return 0, 0, (1,) * ndim


@rule("FIT-1")
def check_fits(sharding: Any, shape: tuple[int, ...], path: str) -> None:
    """Each argument and result given a sharding has at least the rank the sharding needs and divides evenly into its shards.

    The rank is NS-5's question, the division DIV-1's.
    """
    misfit = shape_misfit(sharding, shape, "its sharding")
    if misfit is not None:
        error_type, message, jax_error = misfit
        raise reject("FIT-1", error_type, message, path, jax_error=jax_error)


def shape_misfit(sharding: Any, shape: tuple[int, ...], what: str) -> tuple | None:
    """Why ``shape`` does not fit ``sharding`` (rank, then tile rank, then each dimension's
    split) as (the class JAX's own check raises, the words, JAX's class name), or None."""
    if sharding is UNSPECIFIED or isinstance(sharding, SingleDeviceSharding):
        return None
    head = f"a value of shape {tuple(shape)} does not fit {what}"
    if not isinstance(sharding, (NamedSharding, internals.GSPMDSharding)):
        try:
            sharding.shard_shape(tuple(shape))
        except ValueError as error:
            return ValueError, f"{head}: {error}", None
        return None
    needed, tile_rank_gap, ways = _ways(sharding, len(shape))
    if len(shape) < needed:
        hint = "; for a scalar the PartitionSpec is P()" if not shape else ""
        return (ValueError, f"{head}: {sharding} needs a value of rank at least {needed}, but "
                f"the value has rank {len(shape)}{hint}", None)
    if tile_rank_gap:
        return (AssertionError, f"{head}: its tile assignment has {needed} data dimensions, "
                f"the value {len(shape)}", "AssertionError")
    for dim, (size, n) in enumerate(zip(shape, ways)):
        # Every dimension divides evenly by the number of ways it is split
        if size % n:
            return (ValueError, f"{head}: dimension {dim} has size {size}, which {sharding} "
                    f"splits {n} ways (ways per dimension: {ways}). Pad dimension {dim} to a "
                    f"multiple of {n}, or split it over fewer mesh axes.", "IndivisibleError")
    return None


@rule("FIT-2")
def check_typed_fit(sharding: Any, shape: tuple[int, ...], path: str) -> None:
    """An abstract argument over a NamedSharding is typed by its sharding's Explicit mesh axes, which must divide each dimension evenly; Auto and Manual axes are left out of the type.

    jit types each argument first thing at the call, so neither ``in_shardings`` nor the
    argument going unused changes the answer.
    """
    if not isinstance(sharding, NamedSharding):
        return
    mesh = sharding.mesh
    explicit = {name: size for name, size, kind in zip(mesh.axis_names, mesh.axis_sizes,
                                                      mesh.axis_types)
                if kind == jax.sharding.AxisType.Explicit}
    for dim, (entry, size) in enumerate(zip(spec_entries(sharding.spec), shape)):
        names = entry if isinstance(entry, tuple) else () if entry in (None, UNCONSTRAINED) \
            else (entry,)
        axes = tuple(name for name in names if name in explicit)
        ways = math.prod(explicit[name] for name in axes)
        # Every dimension divides evenly by the Explicit axes that split it
        if size % ways:
            raise reject("FIT-2", ValueError,
                         f"the abstract argument's type, {tuple(shape)} over {sharding}, "
                         f"splits dimension {dim} of size {size} over the Explicit mesh axes "
                         f"{axes}, {ways} ways; {size} is not a multiple of {ways}. Pad "
                         f"dimension {dim} to a multiple of {ways}, or split it over fewer "
                         "Explicit axes.", path)


@rule("FIT-3")
def check_lowered_fit(sharding: Any, shape: tuple[int, ...], path: str) -> None:
    """Each input the program keeps, and each result, divides evenly into the shards of the sharding lowering hands it, a GSPMD tiling having the value's rank.

    Only an abstract argument's own sharding can fail here: an in_sharding and an
    out_sharding were checked at the call (FIT-1), and an array that exists fits its
    sharding (the engine's jit is never the call vmap binds unchecked).
    """
    misfit = shape_misfit(sharding, shape, "the sharding lowering hands it")
    if misfit is not None:
        error_type, message, jax_error = misfit
        raise reject("FIT-3", error_type, message, path, jax_error=jax_error)


# --------------------------------------------------------------------------- devices

def devices_of(sharding: Any) -> tuple:
    """The sharding's devices, in order."""
    return internals.device_list(sharding)


def num_devices(sharding: Any) -> int:
    if is_abstract(sharding):
        return sharding.mesh.size
    return len(devices_of(sharding))


def is_fully_replicated(sharding: Any) -> bool:
    """Every device holds the whole array (REP-1)."""
    if isinstance(sharding, SingleDeviceSharding):
        return True
    if isinstance(sharding, NamedSharding):
        sizes = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_sizes))
        for entry in spec_entries(sharding.spec):
            if entry is None or entry is UNCONSTRAINED:
                continue
            for name in entry if isinstance(entry, tuple) else (entry,):
                if sizes[name] != 1:
                    return False
        return not getattr(sharding.spec, "unreduced", None)
    if isinstance(sharding, internals.GSPMDSharding):
        tiles = _hlo_tiles(sharding._hlo_sharding)
        return tiles is None or all(t == 1 for t in tiles)
    return bool(sharding.is_fully_replicated)


# --------------------------------------------------------------------------- EQ-3, EQ-1, EQ-2

@functools.lru_cache(maxsize=8192)
def hlo(sharding: Any, ndim: int) -> Any:
    return internals.hlo_of(sharding, ndim)


def _acts_replicated(h: Any) -> bool:
    return h.is_replicated() or h.num_devices() == 1


@rule("EQ-3")
def hlo_equal(a: Any, b: Any) -> bool:
    """Two HLO shardings are equal when both act replicated (replicated, or over a single device position) or when they are identical in XLA's canonical form."""
    if a is b:
        return True
    if _acts_replicated(a) and _acts_replicated(b):
        return True
    return a == b


@rule("EQ-1")
def jax_equivalent(a: Any, b: Any, ndim: int) -> bool:
    """Two shardings are JAX-equivalent for rank ``ndim`` when they lower to equal HLO shardings, have the same memory kind, and list the same devices in the same order (device lists are not compared when both meshes are abstract)."""
    if a is b or a == b:
        return True
    if not hlo_equal(hlo(a, ndim), hlo(b, ndim)) or a.memory_kind != b.memory_kind:
        return False
    if is_abstract(a) and is_abstract(b):
        return True
    if is_abstract(a) or is_abstract(b):
        return False
    return devices_of(a) == devices_of(b)


@functools.lru_cache(maxsize=8192)
def placement_class(sharding: Any, shape: tuple[int, ...]) -> tuple:
    """A key equal for two shardings exactly when they are placement-equivalent for ``shape`` (and in the same memory kind): the box every device holds.

    Shardings over an abstract mesh place nothing; each is its own class.
    """
    if is_abstract(sharding):
        return ("abstract", sharding, shape)
    if is_partial(sharding):
        # Unreduced (partial sums) or reduced axes: the devices hold no boxes of the value
        # to compare, so only the same sharding, written the same way, is the same class.
        return ("partial", sharding, shape)
    boxes = []
    for device, index in sharding.devices_indices_map(tuple(shape)).items():
        box = tuple(_bounds(s, n) for s, n in zip(index, shape))
        boxes.append((device.id, box))
    boxes.sort()
    return (sharding.memory_kind, tuple(boxes))


def _bounds(piece: Any, size: int) -> tuple[int, int]:
    if isinstance(piece, slice):
        start, stop, _ = piece.indices(size)
        return start, max(start, stop)
    return int(piece), int(piece) + 1


def placement_equivalent(a: Any, b: Any, shape: tuple[int, ...]) -> bool:
    return a is b or placement_class(a, tuple(shape)) == placement_class(b, tuple(shape))
