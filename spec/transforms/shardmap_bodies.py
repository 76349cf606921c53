"""The collectives of a shard_map's body: their varying axes, shapes and permutations (SMAP-20 to SMAP-23).

Inside ``jax.shard_map`` each value has a per-shard shape and, with ``check_vma``, the set
of manual axes along which it differs from device to device (its *varying* axes, what
``jax.typeof(v).vma`` shows). A collective names manual axes (SMAP-13 says which) and:

* SMAP-20 — changes the varying axes: ``psum``, ``pmax`` and ``pmin`` drop theirs,
  ``pvary`` (``jax.lax.pcast(..., to='varying')``) adds them, ``axis_index`` varies along its
  axis, and the collectives that move data (``all_gather``, ``psum_scatter``, ``ppermute``,
  ``all_to_all``) keep them, taking only operands that vary along every axis they name;
* SMAP-21 — changes the per-shard shape: ``all_gather`` multiplies or inserts a dimension,
  ``psum_scatter`` divides or removes one, ``all_to_all`` splits one and concatenates
  another;
* SMAP-22 — ``ppermute``'s pairs are positions along its axes, each source and each
  target at most once (checked when the program is lowered);
* SMAP-23 — ``psum_scatter`` lowers only an operand whose type splits no dimension over
  the Explicit axes a shard_map leaves automatic (a mixed Explicit/Manual body);
* SMAP-24 — a collective's result keeps its operand's split over those automatic Explicit
  axes, entry by entry at the same positions, whatever it does to the shape, so a
  dimension it shrinks must still divide by the axes it is split over;
* SMAP-25 — an untiled ``all_gather`` lowers its operand with a dimension of 1 inserted,
  typed with the operand's split at the same positions, which must divide it too.

The primitives are named as ``jax.make_jaxpr`` shows them in jax 0.10.2: ``psum`` (without
check_vma) and ``psum_invariant`` (with it), ``pmax``, ``pmin``, ``all_gather``,
``reduce_scatter`` (``psum_scatter``), ``ppermute``, ``all_to_all``, ``axis_index`` and
``pvary``. The replica groups of each are SMAP-14's (:mod:`.shardmap_collectives`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, require, rule
from ..core.values import AbstractMesh, AxisType, Mesh  # noqa: F401 (AxisType: the examples)
from .shardmap_parameters import entry_ways

__all__ = ["REDUCING", "MOVING", "COLLECTIVES", "collective_varying", "collective_shape",
           "check_permutation", "check_scatter_operand_unsplit", "collective_split",
           "check_gather_broadcast_divides"]

# The collectives that reduce over their axes, those that move data between devices, and
# the casts and queries that move nothing.
REDUCING = ("psum", "psum_invariant", "pmax", "pmin")
MOVING = ("all_gather", "reduce_scatter", "ppermute", "all_to_all")
COLLECTIVES = REDUCING + MOVING + ("axis_index", "pvary")


# --------------------------------------------------------------------------- SMAP-20

@dataclasses.dataclass(frozen=True)
class NotVaryingAlong(Failure, rule="SMAP-20"):
    template = ("{primitive} over {axes} takes an operand that varies along every axis it "
                "names, but its operand varies along {varying} only")
    hint = "Cast it first with jax.lax.pcast(x, {missing}, to='varying')"
    primitive: str
    axes: tuple
    varying: tuple
    missing: tuple


@dataclasses.dataclass(frozen=True)
class ReducesNothingVarying(Failure, rule="SMAP-20"):
    template = ("{primitive} over {axes} turns a value that varies along those axes into one "
                "that does not, but its operand varies along none of them (it varies along "
                "{varying})")
    primitive: str
    axes: tuple
    varying: tuple


@dataclasses.dataclass(frozen=True)
class AlreadyVarying(Failure, rule="SMAP-20"):
    template = ("pvary over {axes} makes a value vary along axes it did not vary along, but "
                "its operand already varies along {already}")
    axes: tuple
    already: tuple


def _sorted(names: Any) -> tuple:
    return tuple(sorted(names))


@rule("SMAP-20", mirrors="jax._src.lax.parallel: collective_vma_rule, "
                         "_psum_invariant_abstract_eval, _pvary_abstract_eval, "
                         "_axis_index_effectful_abstract_eval")
def collective_varying(primitive: str, axes: tuple[str, ...], varying: frozenset[str],
                       check_vma: bool) -> frozenset[str]:
    """With check_vma, each collective takes an operand varying along the axes it needs and gives a result varying along the axes it leaves; without check_vma nothing varies.

    psum, pmax and pmin take an operand varying along some of their axes and return it
    varying along the others; pvary takes one varying along none of its axes and adds them;
    axis_index varies along its axis; all_gather, psum_scatter, ppermute and all_to_all take
    one varying along all their axes and keep its varying axes.

    >>> collective_varying("psum_invariant", ("y",), frozenset({"x", "y"}), True)
    frozenset({'x'})
    >>> collective_varying("axis_index", ("y",), frozenset(), True)
    frozenset({'y'})
    >>> collective_varying("all_gather", ("x",), frozenset({"y"}), True)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-20]: all_gather over ('x',) takes an operand that varies along every axis it names, but its operand varies along ('y',) only. Cast it first with jax.lax.pcast(x, ('x',), to='varying').
    """
    if not check_vma:
        return frozenset()
    named = frozenset(axes)
    if primitive == "axis_index":
        return named
    if primitive == "pvary":
        require(not named & varying, lambda: AlreadyVarying(axes, _sorted(named & varying)))
        return varying | named
    if primitive in REDUCING and primitive != "psum":
        require(bool(named & varying), lambda: ReducesNothingVarying(primitive, axes,
                                                                     _sorted(varying)))
        return varying - named
    if primitive == "psum":   # the primitive of psum without check_vma only
        return varying - named
    missing = tuple(a for a in axes if a not in varying)
    require(not missing, lambda: NotVaryingAlong(primitive, axes, _sorted(varying), missing))
    return varying


# --------------------------------------------------------------------------- SMAP-21

@dataclasses.dataclass(frozen=True)
class DimensionOutOfRange(Failure, rule="SMAP-21", error=IndexError):
    template = ("{primitive} names dimension {dim} as its {which}, but its operand has "
                "shape {shape} of rank {rank}")
    primitive: str
    which: str
    dim: Any
    shape: tuple
    rank: int


@dataclasses.dataclass(frozen=True)
class GatherDimensionOutOfRange(DimensionOutOfRange, error=ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class PiecesDoNotFit(Failure, rule="SMAP-21"):
    template = ("{primitive} over {axes} ({size} devices) {how} dimension {dim} of its "
                "operand of shape {shape}, but that dimension has size {length}")
    primitive: str
    axes: tuple
    size: int
    how: str
    dim: int
    shape: tuple
    length: int


def _dimension(primitive: str, which: str, dim: Any, rank: int, shape: tuple,
               error: type = DimensionOutOfRange) -> int:
    require(type(dim) is int and 0 <= dim < rank, lambda: error(
        primitive, which, dim, shape, len(shape)))
    return dim


@rule("SMAP-21", mirrors="jax._src.lax.parallel: _all_gather_effectful_abstract_eval, "
                         "_reduce_scatter_effectful_abstract_eval, "
                         "_all_to_all_effectful_abstract_eval (and the checks of all_to_all)")
def collective_shape(primitive: str, shape: tuple[int, ...], size: int,
                     params: dict[str, Any]) -> tuple[int, ...]:
    """A collective over axes of ``size`` devices in all gathers, scatters or exchanges one dimension by that size, which must divide what it splits; the others keep the shape, and axis_index is a scalar.

    all_gather multiplies its dimension by size (tiled) or inserts one of that size there;
    psum_scatter divides its scatter dimension by size (tiled: it must divide) or removes it
    (untiled: it must be size); all_to_all divides its split dimension by size and
    multiplies its concat dimension by it (the split dimension must divide; untiled, it
    must be size). Checked in JAX's order: the dimension scattered or split in range
    (IndexError; all_gather's, ValueError), then that it divides, then all_to_all's
    concat dimension in range (IndexError).

    >>> collective_shape("all_gather", (4, 2), 2, {"all_gather_dimension": 1, "tiled": True})
    (4, 4)
    >>> collective_shape("reduce_scatter", (4, 2), 4, {"scatter_dimension": 0, "tiled": False})
    (2,)
    >>> collective_shape("all_to_all", (6, 2), 4, {"split_axis": 0, "concat_axis": 1,
    ...                                            "tiled": True, "axes": ("y",)})
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-21]: all_to_all over ('y',) (4 devices) splits dimension 0 of its operand of shape (6, 2), but that dimension has size 6
    """
    axes = tuple(params.get("axes", ()))
    out = list(shape)
    tiled = bool(params.get("tiled", False))
    if primitive == "axis_index":
        return ()
    if primitive == "all_gather":
        rank = len(shape) + (0 if tiled else 1)
        dim = _dimension(primitive, "all_gather_dimension", params["all_gather_dimension"],
                         rank, shape, GatherDimensionOutOfRange)
        if tiled:
            out[dim] *= size
        else:
            out.insert(dim, size)
    elif primitive == "reduce_scatter":
        dim = _dimension(primitive, "scatter_dimension", params["scatter_dimension"],
                         len(shape), shape)
        fits = shape[dim] % size == 0 if tiled else shape[dim] == size
        require(fits, lambda: PiecesDoNotFit(primitive, axes, size, "scatters" if tiled else
                                             "scatters one piece per device along", dim,
                                             shape, shape[dim]))
        if tiled:
            out[dim] //= size
        else:
            del out[dim]
    elif primitive == "all_to_all":
        # JAX reads the split dimension and checks that it divides before the shape is
        # computed, and only then reads the concat dimension: a split that does not divide
        # is refused before a concat_axis out of range
        split = _dimension(primitive, "split_axis", params["split_axis"], len(shape), shape)
        fits = shape[split] % size == 0 if tiled else shape[split] == size
        require(fits, lambda: PiecesDoNotFit(primitive, axes, size, "splits" if tiled else
                                             "splits one piece per device along", split,
                                             shape, shape[split]))
        concat = _dimension(primitive, "concat_axis", params["concat_axis"], len(shape), shape)
        out[split] //= size
        out[concat] *= size
    return tuple(out)


# --------------------------------------------------------------------------- SMAP-22

@dataclasses.dataclass(frozen=True)
class PermutationOutOfRange(Failure, rule="SMAP-22", error=IndexError):
    template = ("ppermute over {axes} ({size} positions) moves {pair}, which names a "
                "position outside -{size} .. {last}")
    axes: tuple
    size: int
    pair: tuple
    last: int


@dataclasses.dataclass(frozen=True)
class PermutationRepeats(Failure, rule="SMAP-22"):
    template = ("ppermute over {axes} lists {which} {position} more than once in {perm} "
                "(positions count modulo {size}): each position sends at most once and "
                "receives at most once")
    axes: tuple
    which: str
    position: int
    perm: tuple
    size: int


@rule("SMAP-22", mirrors="jax._src.lax.parallel._pcollectives_lowering_common "
                         "(met when the program is lowered)")
def check_permutation(axes: tuple[str, ...], size: int, perm: Any) -> tuple:
    """A ppermute's pairs (source, target) name positions along its axes, counted from the end when negative: no position is a source twice or a target twice (ValueError), then each lies in -size to size - 1 (IndexError).

    Returns the pairs as positions 0 to size - 1. Position k of a group is its k-th
    device in the mesh's order, whatever the order its axes are named in.

    >>> check_permutation(("y",), 4, ((0, 1), (1, 2), (2, 3), (3, -4)))
    ((0, 1), (1, 2), (2, 3), (3, 0))
    >>> check_permutation(("y",), 4, ((0, 1), (4, 2)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-22]: ppermute over ('y',) lists source 0 more than once in ((0, 1), (4, 2)) (positions count modulo 4): each position sends at most once and receives at most once
    """
    pairs = tuple(tuple(p) for p in perm)
    for which, k in (("source", 0), ("target", 1)):
        seen: set[int] = set()
        for pair in pairs:
            position = pair[k] % size
            require(position not in seen, lambda: PermutationRepeats(
                axes, which, position, pairs, size))
            seen.add(position)
    for pair in pairs:
        require(all(-size <= p < size for p in pair),
                lambda: PermutationOutOfRange(axes, size, pair, size - 1))
    return tuple((s % size, t % size) for s, t in pairs)


# --------------------------------------------------------------------------- SMAP-23

@dataclasses.dataclass(frozen=True)
class ScatterOfASplitType(Failure, rule="SMAP-23", error=AssertionError):
    template = ("psum_scatter over {axes} takes a value whose type is split {split} over "
                "the Explicit axes the shard_map leaves automatic: JAX lowers a "
                "psum_scatter only of a value its type splits over none of them")
    hint = ("Reshard the argument so that its type splits no dimension over those axes "
            "(jax.reshard) before the shard_map, or make them manual too.")
    axes: tuple
    split: tuple


@rule("SMAP-23", mirrors="jax._src.lax.parallel._reduce_scatter_lowering (the operand's "
                         "type made a scalar keeps its split); jax._src.core._make_lengths_same")
def check_scatter_operand_unsplit(axes: tuple[str, ...], split: tuple) -> None:
    """A psum_scatter lowers only when its operand's type splits no dimension over an Explicit axis its shard_map leaves automatic (AssertionError, met when the program is lowered).

    ``split`` is the operand's type inside, one entry per dimension (None: unsplit), as
    SMAP-18 keeps it.

    >>> check_scatter_operand_unsplit(("y",), (None, None))
    >>> check_scatter_operand_unsplit(("y",), (None, "x"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionAssertionError: [SMAP-23]: psum_scatter over ('y',) takes a value whose type is split (None, 'x') over the Explicit axes the shard_map leaves automatic: ...
    """
    require(all(entry is None for entry in split), lambda: ScatterOfASplitType(
        tuple(axes), tuple(split)))


# --------------------------------------------------------------------------- SMAP-24

@dataclasses.dataclass(frozen=True)
class SplitDoesNotDivide(Failure, rule="SMAP-24"):
    template = ("{primitive} over {axes} gives a result of shape {shape} whose type keeps "
                "its operand's split {split} over the Explicit axes the shard_map leaves "
                "automatic, at the same positions: dimension {dim} of size {size} does not "
                "split {ways} ways")
    hint = ("Split or gather another dimension, or reshard the value (jax.reshard) so that "
            "its type does not split that dimension.")
    primitive: str
    axes: tuple
    shape: tuple
    split: tuple
    dim: int
    size: int
    ways: int


@dataclasses.dataclass(frozen=True)
class SplitEntryDropped(Failure, rule="SMAP-24", error=AssertionError):
    template = ("{primitive} over {axes} gives a result of rank {rank}, but its operand's "
                "split {split} over the Explicit axes the shard_map leaves automatic names "
                "axes past that rank: the result's type keeps the split at the same "
                "positions, cut to its rank")
    hint = ("Reshard the value (jax.reshard) so that its type leaves its last dimension "
            "unsplit, or make those axes manual too.")
    primitive: str
    axes: tuple
    rank: int
    split: tuple


def _divides(mesh: Mesh | AbstractMesh, shape: tuple, split: tuple) -> tuple | None:
    """The first (dimension, size, ways) that ``split`` does not divide (None: none)."""
    for dim, (size, entry) in enumerate(zip(shape, split)):
        ways = entry_ways(mesh, entry)
        if size % ways:
            return dim, size, ways
    return None


@rule("SMAP-24", mirrors="jax._src.lax.parallel: the abstract evals of the collectives "
                         "(x_aval.update keeps the operand's sharding); "
                         "jax._src.core.get_sharding, _make_lengths_same, _check_divisibility")
def collective_split(mesh: Mesh | AbstractMesh, primitive: str, axes: tuple[str, ...],
                     split: tuple, shape: tuple[int, ...]) -> tuple:
    """A collective's result keeps its operand's split over the automatic Explicit axes at the same positions, cut or padded to its rank (axis_index's is unsplit), and each dimension must divide by the axes splitting it.

    The automatic Explicit axes are those its shard_map leaves automatic. ``split`` is the
    operand's, one entry per dimension (None: unsplit), ``shape`` the result's; returns the
    result's split, one entry per dimension. A split cut to a
    shorter result must drop unsplit entries only (AssertionError); a dimension it does
    not divide is a ValueError.

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> collective_split(mesh, "all_gather", ("x",), (None, None, "y"), (2, 4, 4, 4))
    (None, None, 'y', None)
    >>> collective_split(mesh, "all_to_all", ("x",), (None, None, "y"), (8, 4, 1))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-24]: all_to_all over ('x',) gives a result of shape (8, 4, 1) whose type keeps its operand's split (None, None, 'y') over the Explicit axes the shard_map leaves automatic, at the same positions: dimension 2 of size 1 does not split 2 ways. ...
    """
    if primitive == "axis_index":
        return ()
    rank = len(shape)
    split = tuple(split)
    require(all(entry is None for entry in split[rank:]), lambda: SplitEntryDropped(
        primitive, tuple(axes), rank, split))
    kept = split[:rank] + (None,) * (rank - len(split))
    uneven = _divides(mesh, shape, kept)
    require(uneven is None, lambda: SplitDoesNotDivide(
        primitive, tuple(axes), tuple(shape), kept, *uneven))
    return kept


# --------------------------------------------------------------------------- SMAP-25

@dataclasses.dataclass(frozen=True)
class GatheredBroadcastDoesNotDivide(Failure, rule="SMAP-25"):
    template = ("the untiled all_gather over {axes} lowers its operand of shape {shape} "
                "with a dimension of 1 inserted at {dim}, typed with the operand's split "
                "{split} at the same positions: dimension {at} of size {size} does not "
                "split {ways} ways")
    hint = ("Gather with tiled=True, gather at another dimension, or reshard the value "
            "(jax.reshard) so that its type does not split the dimensions from {dim} on.")
    axes: tuple
    shape: tuple
    dim: int
    split: tuple
    at: int
    size: int
    ways: int


@rule("SMAP-25", mirrors="jax._src.lax.parallel._all_gather_lowering (x_aval.update with "
                         "the new shape keeps the operand's sharding; met when the program "
                         "is lowered)")
def check_gather_broadcast_divides(mesh: Mesh | AbstractMesh, axes: tuple[str, ...],
                                   split: tuple, shape: tuple[int, ...], dim: int) -> None:
    """An untiled all_gather lowers only when its operand, a dimension of 1 inserted at its gather dimension, divides by the operand's split over the automatic Explicit axes at the same positions (ValueError, met when lowered).

    ``split`` and ``shape`` are the operand's (one entry per dimension, None: unsplit).

    >>> mesh = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> check_gather_broadcast_divides(mesh, ("x",), (None, None, "y"), (4, 4, 4), 0)
    >>> check_gather_broadcast_divides(mesh, ("x",), (None, None, "y"), (4, 4, 4), 2)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-25]: the untiled all_gather over ('x',) lowers its operand of shape (4, 4, 4) with a dimension of 1 inserted at 2, typed with the operand's split (None, None, 'y') at the same positions: dimension 2 of size 1 does not split 2 ways. ...
    """
    broadcast = tuple(shape[:dim]) + (1,) + tuple(shape[dim:])
    kept = tuple(split) + (None,) * (len(broadcast) - len(split))
    uneven = _divides(mesh, broadcast, kept)
    require(uneven is None, lambda: GatheredBroadcastDoesNotDivide(
        tuple(axes), tuple(shape), dim, tuple(split), *uneven))
