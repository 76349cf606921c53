"""Which specs shard_map takes (SMAP-1 to SMAP-8, SMAP-11, SMAP-12).

The manual axes (SMAP-1); the specs' leaves, axes and reductions (SMAP-2 to SMAP-4); how
they match the arguments and the results (SMAP-5, SMAP-6); their length and divisibility
(SMAP-7, SMAP-8); and what an out spec says of its result (SMAP-11, SMAP-12).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.pytree import broadcast_prefix, leaves_with_paths, prefix_mismatch, show_path, structure
from ..core.rules import Failure, require, rule
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec
from .shardmap_parameters import BadParameter, bounded_items, entry_axes, entry_ways
from .shardmap_parameters import Returned, Shaped  # noqa: F401 (the examples use them)

P = PartitionSpec  # the name the examples use

__all__ = ["manual_axes_of", "check_spec_leaves", "check_spec_axes", "check_spec_reductions",
           "match_in_specs", "match_out_specs", "check_spec_rank", "check_divisible",
           "check_replication", "check_no_repeated_axes"]


# --------------------------------------------------------------------------- SMAP-1

@dataclasses.dataclass(frozen=True)
class ManualAxesNotASet(Failure, rule="SMAP-1", error=TypeError):
    template = ("axis_names (the manual axes) must be a set or a frozenset of "
                "mesh axis names, got {value!r} of type {kind}")
    value: Any
    kind: str


@dataclasses.dataclass(frozen=True)
class ManualAxesNotInMesh(Failure, rule="SMAP-1"):
    template = ("axis_names (the manual axes) must be axes of the mesh: "
                "{extra} not among the mesh's axes {names}")
    extra: tuple
    names: tuple


@dataclasses.dataclass(frozen=True)
class ManualAxesBatched(Failure, rule="SMAP-1"):
    template = ("jax.shard_map requires axis_names to be a subset of mesh.axis_names less "
                "the Explicit axes {batched} that the enclosing vmaps split their batch "
                "over: {extra} not among {names}")
    hint = "Leave the vmapped Explicit axes out of axis_names (they stay automatic inside)"
    extra: tuple
    batched: tuple
    names: tuple


@rule("SMAP-1", mirrors="jax._src.shard_map._shmap_checks")
def manual_axes_of(mesh: Mesh | AbstractMesh, manual_axes: Any,
                   batched: frozenset[str] = frozenset()) -> frozenset[str]:
    """The manual axes (``axis_names``) are a set of the mesh's axis names but those enclosing vmaps split their batch over; the empty set means every one of those.

    ``batched``: the Explicit axes the vmaps the call is traced under split their batch
    dimension over (JAX's axis environment's ``explicit_mesh_axis_names``).

    >>> sorted(manual_axes_of(Mesh.iota((2, 4), ("x", "y")), set()))
    ['x', 'y']
    >>> manual_axes_of(Mesh.iota((2, 4), ("x", "y")), {"x", "q"})
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-1]: axis_names (the manual axes) must be axes of the mesh: ('q',) not among the mesh's axes ('x', 'y')
    >>> sorted(manual_axes_of(Mesh.iota((2, 4), ("x", "y")), set(), frozenset({"y"})))
    ['x']
    >>> manual_axes_of(Mesh.iota((2, 4), ("x", "y")), {"x", "y"}, frozenset({"y"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-1]: jax.shard_map requires axis_names to be a subset of mesh.axis_names less the Explicit axes ('y',) that the enclosing vmaps split their batch over: ('y',) not among ('x',). Leave the vmapped Explicit axes out of axis_names (they stay automatic inside).
    """
    require(isinstance(mesh, (Mesh, AbstractMesh)), lambda: BadParameter(
        "mesh", "a Mesh or an AbstractMesh", mesh))
    require(isinstance(manual_axes, (set, frozenset)),
            lambda: ManualAxesNotASet(manual_axes, type(manual_axes).__name__))
    require(isinstance(batched, (set, frozenset)), lambda: BadParameter(
        "batched", "a set of the vmapped Explicit axes' names", batched))
    names = tuple(n for n in mesh.axis_names if n not in batched)
    if not manual_axes:
        return frozenset(names)
    extra = [a for a in bounded_items(manual_axes, "axis_names") if a not in mesh.axis_names]
    require(not extra, lambda: ManualAxesNotInMesh(tuple(sorted(extra, key=repr)),
                                                   mesh.axis_names))
    extra = sorted(a for a in manual_axes if a not in names)
    require(not extra, lambda: ManualAxesBatched(tuple(extra), tuple(sorted(
        a for a in mesh.axis_names if a in batched)), names))
    return frozenset(manual_axes)


# --------------------------------------------------------------------------- SMAP-2 .. SMAP-4

@dataclasses.dataclass(frozen=True)
class NotASpec(Failure, rule="SMAP-2", error=TypeError):
    template = ("every leaf of {which} must be a PartitionSpec (or None), but "
                "{where} is {leaf!r} of type {kind}")
    which: str
    where: str
    leaf: Any
    kind: str


def _spec_leaves(specs: Any, which: str) -> list[tuple[str, Any]]:
    """(path, leaf) of a tree of specs; None is an empty subtree, as JAX reads it."""
    return [(show_path((which, *path)), leaf) for path, leaf in leaves_with_paths(specs)]


@rule("SMAP-2", mirrors="jax._src.shard_map._check_specs (its type check)")
def check_spec_leaves(specs: Any, which: str) -> None:
    """Every leaf of ``in_specs`` and of ``out_specs`` is a PartitionSpec; None stands for an empty subtree.

    >>> check_spec_leaves((P("x"), None), "in_specs")
    >>> check_spec_leaves((P("x"), "y"), "out_specs")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [SMAP-2]: every leaf of out_specs must be a PartitionSpec (or None), but out_specs[1] is 'y' of type str
    """
    for where, leaf in _spec_leaves(specs, which):
        require(isinstance(leaf, PartitionSpec),
                lambda: NotASpec(which, where, leaf, type(leaf).__name__))


@dataclasses.dataclass(frozen=True)
class NotManual(Failure, rule="SMAP-3"):
    template = ("{where} is {spec!r}, which names {name!r}; a spec may name "
                "only the manual axes {manual}")
    hint = "Name a manual axis, or add {name!r} to axis_names if it is an axis of the mesh"
    where: str
    spec: Any
    name: Any
    manual: tuple


@rule("SMAP-3", mirrors="jax._src.shard_map._check_specs (its axis check)")
def check_spec_axes(specs: Any, which: str, manual_axes: frozenset[str]) -> None:
    """A spec names manual axes only: an axis the mesh lacks, an axis left automatic by ``axis_names`` and UNCONSTRAINED are refused alike.

    >>> check_spec_axes(P("x", "y"), "in_specs", frozenset({"x"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-3]: in_specs is P('x', 'y'), which names 'y'; a spec may name only the manual axes ('x',). Name a manual axis, or add 'y' to axis_names if it is an axis of the mesh.
    """
    for where, spec in _spec_leaves(specs, which):
        for entry in spec:
            for name in entry_axes(entry):
                require(name in manual_axes, lambda: NotManual(
                    where, spec, name, tuple(sorted(manual_axes))))


@dataclasses.dataclass(frozen=True)
class ReductionOutsideFullManual(Failure, rule="SMAP-4", error=NotImplementedError):
    template = ("{where} is {spec!r}; unreduced and reduced axes are taken only "
                "when every mesh axis is manual (manual: {manual})")
    where: str
    spec: Any
    manual: tuple


@dataclasses.dataclass(frozen=True)
class ReductionOverAutoAxes(Failure, rule="SMAP-4"):
    template = ("{where} is {spec!r}; its {kind} axes {axes} must be Explicit "
                "axes of the mesh, and mesh {mesh} has none")
    where: str
    spec: Any
    kind: str
    axes: tuple
    mesh: Any


@dataclasses.dataclass(frozen=True)
class ReductionOverUnknownAxes(Failure, rule="SMAP-4", error=KeyError):
    template = "{where} is {spec!r}; its {kind} axes {axes} are not axes of the mesh {names}"
    where: str
    spec: Any
    kind: str
    axes: tuple
    names: tuple


@rule("SMAP-4", mirrors="jax._src.shard_map._check_unreduced")
def check_spec_reductions(specs: Any, which: str, mesh: Mesh | AbstractMesh,
                          manual_axes: frozenset[str]) -> None:
    """A spec with unreduced or reduced axes needs every mesh axis manual and those axes Explicit, which no Auto mesh has.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> check_spec_reductions(P("x", unreduced={"y"}), "in_specs", mesh, frozenset({"x"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNotImplementedError: [SMAP-4]: in_specs is P('x', unreduced={'y'}); unreduced and reduced axes are taken only when every mesh axis is manual (manual: ('x',))
    """
    full = frozenset(mesh.axis_names) == manual_axes
    for where, spec in _spec_leaves(specs, which):
        if not spec.unreduced and not spec.reduced:
            continue
        require(full, lambda: ReductionOutsideFullManual(where, spec, tuple(sorted(manual_axes))))
        for kind, axes in (("unreduced", spec.unreduced), ("reduced", spec.reduced)):
            # JAX reads the axes' types in set order: a set of unknown axes alone fails the
            # lookup (KeyError); beside a known Auto axis, which one JAX meets first decides.
            require(any(a in mesh.axis_names for a in axes) or not axes,
                    lambda: ReductionOverUnknownAxes(where, spec, kind, tuple(sorted(axes)),
                                                     mesh.axis_names))
            require(all(a in mesh.axis_names and mesh.axis_type(a) is AxisType.Explicit
                        for a in axes), lambda: ReductionOverAutoAxes(
                where, spec, kind, tuple(sorted(axes)), mesh))


# --------------------------------------------------------------------------- SMAP-5, SMAP-6

@dataclasses.dataclass(frozen=True)
class SpecsNotAPrefix(Failure, rule="SMAP-5"):
    template = "{which} must be a tree prefix of {against}: {detail}"
    which: str
    against: str
    detail: str


@rule("SMAP-5", mirrors="jax._src.shard_map._shard_map (broadcast_prefix of in_specs over the "
                        "arguments)")
def match_in_specs(in_specs: Any, operands: tuple) -> list[PartitionSpec | None]:
    """``in_specs`` is a tree prefix of the positional arguments, a tuple with one entry per argument (a list is not a tuple here); a None leaf passes its subtree whole.

    >>> match_in_specs((P("x"), None), (Shaped((4,)), (Shaped((2,)), Shaped((3,)))))
    [P('x'), None, None]
    >>> match_in_specs([P("x")], (Shaped((4,)),))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-5]: in_specs must be a tree prefix of the positional arguments: at the top level the shardings hold a list where the value holds a tuple of length 1
    """
    tree = structure(operands)
    found = prefix_mismatch(in_specs, tree, ())
    require(found is None, lambda: SpecsNotAPrefix("in_specs", "the positional arguments",
                                                   found or ""))
    return broadcast_prefix(in_specs, tree)


@dataclasses.dataclass(frozen=True)
class OutSpecsNotAPrefix(SpecsNotAPrefix, rule="SMAP-6"):
    pass


@rule("SMAP-6", mirrors="jax._src.shard_map._shard_map (broadcast_prefix of out_specs over "
                        "the function's result)")
def match_out_specs(out_specs: Any, results: Any) -> list[PartitionSpec]:
    """``out_specs`` is a tree prefix of the mapped function's result; a None in it is an empty subtree, which no array result matches.

    >>> match_out_specs((P("x"), P()), (Returned(0), Returned(1)))
    [P('x'), P()]
    >>> match_out_specs(None, Returned(0))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-6]: out_specs must be a tree prefix of the function's result: out_specs holds None where the result holds an array
    """
    tree = structure(results)
    found = prefix_mismatch(out_specs, tree, ())
    require(found is None, lambda: OutSpecsNotAPrefix("out_specs", "the function's result",
                                                      found or ""))
    for path, leaf in leaves_with_paths(out_specs, is_leaf=lambda v: v is None):
        where = show_path(("out_specs", *path))
        require(leaf is not None, lambda: OutSpecsNotAPrefix(
            "out_specs", "the function's result", f"{where} holds None where the result holds "
                                                  "an array"))
    return broadcast_prefix(out_specs, tree)


# --------------------------------------------------------------------------- SMAP-7, SMAP-8

@dataclasses.dataclass(frozen=True)
class SpecTooLong(Failure, rule="SMAP-7"):
    template = ("{where} is {spec!r}, {length} entries long, but {value} has "
                "shape {shape} of rank {rank}")
    where: str
    spec: Any
    length: int
    value: str
    shape: tuple
    rank: int

    @property
    def hint(self) -> str:  # type: ignore[override]
        return "Use P() for a scalar" if self.rank == 0 else "Shorten the spec"


@rule("SMAP-7", mirrors="jax._src.shard_map._check_specs_vs_args and _check_names")
def check_spec_rank(spec: PartitionSpec, shape: tuple[int, ...], where: str, value: str) -> None:
    """A spec is no longer than the rank of its value: an argument's spec at the call, a result's non-empty spec after tracing.

    >>> check_spec_rank(P("x", None), (8, 8), "in_specs[0]", "args[0]")
    >>> check_spec_rank(P(None), (), "out_specs", "the result")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-7]: out_specs is P(None), 1 entries long, but the result has shape () of rank 0. Use P() for a scalar.
    """
    require(len(spec) <= len(shape), lambda: SpecTooLong(
        where, spec, len(spec), value, tuple(shape), len(shape)))


@dataclasses.dataclass(frozen=True)
class NotDivisible(Failure, rule="SMAP-8"):
    template = ("{value} has shape {shape}; {where} is {spec!r}, which splits "
                "dimension {dim} (size {size}) over {axes}, {ways} ways, and "
                "{ways} does not divide {size}")
    hint = "Pad dimension {dim} to a multiple of {ways}, or split it over fewer axes"
    value: str
    shape: tuple
    where: str
    spec: Any
    dim: int
    size: int
    axes: tuple
    ways: int


@rule("SMAP-8", mirrors="jax._src.shard_map._check_specs_vs_args")
def check_divisible(mesh: Mesh | AbstractMesh, spec: PartitionSpec, shape: tuple[int, ...],
                    where: str, value: str) -> None:
    """Each argument dimension a spec splits is a multiple of the product of the sizes of the axes named for it.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> check_divisible(mesh, P(("x", "y")), (12,), "in_specs[0]", "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-8]: args[0] has shape (12,); in_specs[0] is P(('x', 'y')), which splits dimension 0 (size 12) over ('x', 'y'), 8 ways, and 8 does not divide 12. Pad dimension 0 to a multiple of 8, or split it over fewer axes.
    """
    for dim, entry in enumerate(spec):
        ways = entry_ways(mesh, entry)
        require(shape[dim] % ways == 0, lambda: NotDivisible(
            value, tuple(shape), where, spec, dim, shape[dim], entry_axes(entry), ways))


# --------------------------------------------------------------------------- SMAP-11, SMAP-12

@dataclasses.dataclass(frozen=True)
class NotReplicated(Failure, rule="SMAP-11"):
    template = ("{where} is {spec!r}, which says the result is the same on every "
                "device along {missing}, but the result varies along {varying}")
    hint = ("Name those axes in the spec, sum the result over them (psum), or "
            "pass check_vma=False if it is replicated anyway")
    where: str
    spec: Any
    missing: tuple
    varying: tuple


@rule("SMAP-11", mirrors="jax._src.shard_map._check_mats and _valid_repeats")
def check_replication(mesh: Mesh | AbstractMesh, spec: PartitionSpec, varying: frozenset[str],
                      where: str) -> None:
    """With ``check_vma``, an out spec names every mesh axis the result varies along; an argument varies along the axes of its in spec, and ``psum`` removes the axes it sums over.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> check_replication(mesh, P(None, "y"), frozenset({"y"}), "out_specs")
    >>> check_replication(mesh, P(), frozenset({"x"}), "out_specs")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-11]: out_specs is P(), which says the result is the same on every device along ('x',), but the result varies along ('x',). Name those axes in the spec, sum the result over them (psum), or pass check_vma=False if it is replicated anyway.
    """
    named = {n for entry in spec for n in entry_axes(entry)} | spec.unreduced | spec.reduced
    missing = tuple(a for a in mesh.axis_names if a not in named and a in varying)
    require(not missing, lambda: NotReplicated(
        where, spec, missing, tuple(a for a in mesh.axis_names if a in varying)))


@dataclasses.dataclass(frozen=True)
class RepeatedAxis(Failure, rule="SMAP-12", error=Exception, jax_error="DuplicateSpecError"):
    template = "{where} is {spec!r}, which names mesh axis {name!r} more than once"
    where: str
    spec: Any
    name: str


@rule("SMAP-12", mirrors="jax._src.named_sharding (DuplicateSpecError), met by _unshard_shaped_array "
                         "after tracing and by the lowering of the arguments")
def check_no_repeated_axes(spec: PartitionSpec, where: str) -> None:
    """A spec names each mesh axis at most once, checked for out specs when the results are put together and for in specs of used arguments when the program is lowered.

    >>> check_no_repeated_axes(P("x", "y"), "out_specs")
    >>> check_no_repeated_axes(P(("x", "y"), "x"), "in_specs[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [SMAP-12]: in_specs[0] is P(('x', 'y'), 'x'), which names mesh axis 'x' more than once
    """
    seen: set[str] = set()
    for entry in spec:
        for name in entry_axes(entry):
            require(name not in seen, lambda: RepeatedAxis(where, spec, name))
            seen.add(name)
