"""shard_map: specs, per-shard types, axis groups and manual shardings (SMAP rules).

``jax.shard_map(f, mesh=..., in_specs=..., out_specs=..., axis_names=..., check_vma=...)``
runs ``f`` once per device on the shard each device holds. This module says, as rules,
which specs it takes (SMAP-1 to SMAP-8, SMAP-11, SMAP-12), the types ``f`` sees inside
(SMAP-9) and the types the caller gets back (SMAP-10), which devices a collective inside
reduces together (SMAP-13, SMAP-14) and the HLO sharding that marks the body manual
(SMAP-15). :func:`check_shard_map` applies them in the order ``jax.jit`` of a shard_map
meets them: the checks of the call, the arguments, the body's results, then lowering.

The mapped function is described, not run: its arguments are :class:`Shaped` leaves (an
array of a global shape) and each of its results is a :class:`Returned` leaf (one
argument's shard, summed with ``psum`` over some axes, or not). Meshes are those whose axes
are all ``Auto`` (meshes with Explicit axes add rules this module does not state).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

from ..jit.call import _nesting
from ..core.dims import MAX_RANK, check_dims, check_rank_count
from ..core.hlo import HloSharding, SubgroupType, iota_tile
from ..core.pytree import broadcast_prefix, leaves_with_paths, prefix_mismatch, show_path, structure
from ..core.rules import IllFormedParameter, Failure, Rejection, located, reject, require, rule, staged
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = [
    "Shaped", "Returned", "INFER", "check_shard_map", "manual_axes_of",
    "per_shard_shape", "unshard_shape", "collective_groups", "replica_groups",
    "manual_sharding",
]

class _Infer:
    """The marker of ``in_specs`` left out: shard_map reads them off the arguments' types."""

    _made = None

    def __new__(cls) -> "_Infer":
        if cls._made is None:
            cls._made = super().__new__(cls)
        return cls._made

    def __repr__(self) -> str:
        return "INFER"

    def __reduce__(self) -> str:
        return "INFER"


INFER = _Infer()

# How deep the spec reads a tree of specs, arguments or results (deeper is refused first).
MAX_NESTING = 100
# The most devices whose groups the spec lists one by one.
MAX_LISTED_DEVICES = 1 << 16


# --------------------------------------------------------------------------- values

@dataclasses.dataclass(frozen=True)
class Shaped:
    """An argument of the mapped function: an array of this global shape (VAL-1 checks it)
    and, on a mesh with Explicit axes, the spec its type carries (None: split over none).

    >>> Shaped((8, 4))
    Shaped((8, 4))
    >>> Shaped((8, 4), P("x"))
    Shaped((8, 4), spec=P('x'))
    """

    shape: tuple[int, ...]
    spec: PartitionSpec | None = None

    def __post_init__(self) -> None:
        shape = check_dims(self.shape, what="a Shaped value's shape")
        check_rank_count(len(shape), "a Shaped value's rank")
        object.__setattr__(self, "shape", shape)
        require(self.spec is None or isinstance(self.spec, PartitionSpec),
                lambda: BadParameter("Shaped.spec", "a PartitionSpec or None", self.spec))

    def __repr__(self) -> str:
        return f"Shaped({self.shape}" + (")" if self.spec is None else f", spec={self.spec!r})")


@dataclasses.dataclass(frozen=True)
class Returned:
    """A result of the mapped function: the shard of flat argument ``operand``, summed
    with ``psum`` over the mesh axes ``summed`` (none: returned as it is).

    >>> Returned(0, "x")
    Returned(0, summed=('x',))
    """

    operand: int
    summed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        (operand,) = check_dims((self.operand,), what="a Returned value's operand index")
        summed = (self.summed,) if isinstance(self.summed, str) else self.summed
        if isinstance(summed, (bytes, dict)) or not isinstance(summed, Iterable):
            raise reject(BadParameter("Returned.summed", "a tuple of axis names", self.summed))
        summed = tuple(_bounded_items(summed, "Returned.summed"))
        for name in summed:
            require(isinstance(name, str), lambda: BadParameter(
                "Returned.summed", "a tuple of axis names", self.summed))
        object.__setattr__(self, "operand", operand)
        object.__setattr__(self, "summed", summed)

    def __repr__(self) -> str:
        return f"Returned({self.operand}" + (f", summed={self.summed!r})" if self.summed else ")")


@dataclasses.dataclass(frozen=True)
class ShardMapTypes:
    """What a shard_map that JAX accepts does with the types, flat in pytree order."""

    manual_axes: frozenset[str]
    in_specs: tuple[PartitionSpec | None, ...]     # per argument leaf (None: passed whole)
    inner_shapes: tuple[tuple[int, ...], ...]      # the shard each argument leaf is inside
    inner_varying: tuple[frozenset[str], ...]      # the axes each one varies along inside
    out_specs: tuple[PartitionSpec, ...]           # per result leaf
    result_shapes: tuple[tuple[int, ...], ...]     # each result's shard inside
    result_varying: tuple[frozenset[str], ...]     # cast to vary along their out spec too
    out_shapes: tuple[tuple[int, ...], ...]        # each result as the caller gets it
    # per argument leaf / result leaf, one entry per dimension: the Explicit axes that split
    # the value's type inside (the axes that stay automatic) and outside (SMAP-18)
    inner_types: tuple[tuple, ...] = ()
    out_types: tuple[tuple, ...] = ()


def _bounded_items(items: Iterable[Any], what: str, limit: int = MAX_RANK) -> list[Any]:
    """The entries of ``items``, read one at a time and refused past ``limit`` (SMAP-0)."""
    out: list[Any] = []
    try:
        for item in items:
            out.append(item)
            require(len(out) <= limit, lambda: BadParameter(what, f"at most {limit} entries",
                                                            f"more than {limit} entries"))
    except Rejection:
        raise
    except Exception:  # an iterable that fails while it is read
        raise reject(BadParameter(what, "an iterable that can be read", items)) from None
    return out


# --------------------------------------------------------------------------- SMAP-0

@dataclasses.dataclass(frozen=True)
class BadParameter(IllFormedParameter, rule="SMAP-0"):
    pass


@dataclasses.dataclass(frozen=True)
class NotAutoMesh(Failure, rule="SMAP-0", error=NotImplementedError,
                  jax_error="nothing (the specification stops at Manual axes)"):
    template = ("mesh {mesh} has axes of types {types}; this specification "
                "describes shard_map over meshes whose axes are Auto or "
                "Explicit (a Manual axis exists inside another shard_map)")
    mesh: Any
    types: tuple


@dataclasses.dataclass(frozen=True)
class AbstractExplicitMesh(NotAutoMesh):
    template = ("the AbstractMesh {mesh} has axes of types {types}; this "
                "specification describes shard_map over an AbstractMesh only "
                "when all its axes are Auto (Explicit axes need the devices "
                "of jax.set_mesh to lower)")


@dataclasses.dataclass(frozen=True)
class TypedArgumentPassedWhole(Failure, rule="SMAP-0", error=NotImplementedError,
                               jax_error="nothing (the specification stops here)"):
    template = ("{where} is passed whole (a None in spec) but its type is "
                "over the mesh {mesh}; this specification describes only "
                "untyped values passed whole (JAX's handling of closed-over "
                "values typed over Explicit axes is unfinished)")
    mesh: Any
    where: str


def _check_type_spec(mesh: Mesh | AbstractMesh, path: tuple, leaf: Shaped) -> None:
    """An argument's type spec names Explicit axes of the mesh, each once, and fits its
    shape: a value of such a type exists (device_put would refuse the others)."""
    spec, where = leaf.spec, show_path(("args", *path)) + ".spec"
    if spec is None:
        return
    explicit = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t is AxisType.Explicit}
    names = [n for entry in spec for n in _names(entry)]
    fits = (len(spec) <= len(leaf.shape) and not spec.unreduced and not spec.reduced
            and len(set(names)) == len(names) and set(names) <= explicit
            and all(size % _ways(mesh, entry) == 0 for size, entry in zip(leaf.shape, spec)))
    require(fits, lambda: BadParameter(
        where, "a spec over the mesh's Explicit axes, each named once, that splits the "
               "shape evenly", spec))


def _check_tree(tree: Any, parameter: str, leaf_type: type, what: str) -> None:
    require(_nesting(tree, MAX_NESTING) <= MAX_NESTING, lambda: BadParameter(
        parameter, f"a pytree at most {MAX_NESTING} containers deep", "a deeper tree"))
    for path, leaf in leaves_with_paths(tree):
        require(isinstance(leaf, leaf_type), lambda: BadParameter(
            show_path((parameter, *path)), what, leaf))


@rule("SMAP-0", mirrors="jax._src.shard_map._shmap_checks (the mesh's type); the rest is "
                        "input checking of the description")
def check_parameters(mesh: Any, in_specs: Any, out_specs: Any, operands: Any, results: Any,
                     check_vma: Any) -> tuple[tuple, bool]:
    """The parameters are well-formed: a mesh of Auto or Explicit axes (Auto only when abstract), a ``check_vma`` read by its truth value as JAX reads it, and trees of specs, :class:`Shaped` arguments whose types fit them and :class:`Returned` results.

    >>> check_parameters(Mesh.iota((2,), ("x",)), P("x"), P("x"), (Shaped((4,)),),
    ...                  Returned(0), check_vma="yes")
    ((Shaped((4,)),), True)
    >>> check_parameters(Mesh.iota((2,), ("x",)), P("x"), P("x"), (Shaped((4,)),),
    ...                  Returned(1), check_vma=True)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [SMAP-0]: results must be the index of one of the 1 argument leaves, got Returned(1)
    """
    require(isinstance(mesh, (Mesh, AbstractMesh)), lambda: BadParameter(
        "mesh", "a Mesh or an AbstractMesh", mesh))
    require(all(t in (AxisType.Auto, AxisType.Explicit) for t in mesh.axis_types),
            lambda: NotAutoMesh(mesh, tuple(t.value for t in mesh.axis_types)))
    # Over an AbstractMesh, Explicit axes put the mesh in the results' types and lowering
    # then needs the devices from elsewhere (jax.set_mesh): not described.
    require(isinstance(mesh, Mesh) or all(t is AxisType.Auto for t in mesh.axis_types),
            lambda: AbstractExplicitMesh(mesh, tuple(t.value for t in mesh.axis_types)))
    require(type(operands) in (tuple, list), lambda: BadParameter(
        "operands", "a tuple of the positional arguments", operands))
    operands = tuple(operands)
    _check_tree(operands, "args", Shaped, "a Shaped array")
    _check_tree(results, "results", Returned, "a Returned result")
    for path, leaf in leaves_with_paths(operands):
        _check_type_spec(mesh, path, leaf)
    for name, specs in (("in_specs", in_specs), ("out_specs", out_specs)):
        require(_nesting(specs, MAX_NESTING) <= MAX_NESTING, lambda: BadParameter(
            name, f"a pytree at most {MAX_NESTING} containers deep", "a deeper tree"))
    count = sum(1 for _ in leaves_with_paths(operands))
    for path, leaf in leaves_with_paths(results):
        require(leaf.operand < count, lambda: BadParameter(
            show_path(("results", *path)), f"the index of one of the {count} argument leaves",
            leaf))
    return operands, _truth(check_vma)


def _truth(check_vma: Any) -> bool:
    try:
        return bool(check_vma)
    except Exception:  # a value whose truth cannot be read (a numpy array of several values)
        raise reject(BadParameter("check_vma", "a value with a truth value", check_vma)) from None


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


@rule("SMAP-1", mirrors="jax._src.shard_map._shmap_checks")
def manual_axes_of(mesh: Mesh | AbstractMesh, manual_axes: Any) -> frozenset[str]:
    """The manual axes (``axis_names``) are a set of the mesh's axis names; the empty set means every mesh axis.

    >>> sorted(manual_axes_of(Mesh.iota((2, 4), ("x", "y")), set()))
    ['x', 'y']
    >>> manual_axes_of(Mesh.iota((2, 4), ("x", "y")), {"x", "q"})
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-1]: axis_names (the manual axes) must be axes of the mesh: ('q',) not among the mesh's axes ('x', 'y')
    """
    require(isinstance(mesh, (Mesh, AbstractMesh)), lambda: BadParameter(
        "mesh", "a Mesh or an AbstractMesh", mesh))
    require(isinstance(manual_axes, (set, frozenset)),
            lambda: ManualAxesNotASet(manual_axes, type(manual_axes).__name__))
    if not manual_axes:
        return frozenset(mesh.axis_names)
    extra = [a for a in _bounded_items(manual_axes, "axis_names") if a not in mesh.axis_names]
    require(not extra, lambda: ManualAxesNotInMesh(tuple(sorted(extra, key=repr)),
                                                   mesh.axis_names))
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


def _names(entry: Any) -> tuple:
    return entry if isinstance(entry, tuple) else () if entry is None else (entry,)


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
            for name in _names(entry):
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


def _ways(mesh: Mesh | AbstractMesh, entry: Any) -> int:
    """How many pieces a spec entry cuts a dimension into (an axis named twice counts twice)."""
    return math.prod(mesh.axis_size(name) for name in _names(entry))


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
        ways = _ways(mesh, entry)
        require(shape[dim] % ways == 0, lambda: NotDivisible(
            value, tuple(shape), where, spec, dim, shape[dim], _names(entry), ways))


# --------------------------------------------------------------------------- SMAP-9, SMAP-10

def _check_spec(spec: Any, parameter: str) -> PartitionSpec:
    require(isinstance(spec, PartitionSpec), lambda: NotASpec(
        parameter, parameter, spec, type(spec).__name__))
    return spec


def _check_mesh(mesh: Any) -> Mesh | AbstractMesh:
    require(isinstance(mesh, (Mesh, AbstractMesh)), lambda: BadParameter(
        "mesh", "a Mesh or an AbstractMesh", mesh))
    return mesh


@rule("SMAP-9", mirrors="jax._src.shard_map._shard_shaped_array; "
                        "jax._src.interpreters.pxla.tile_aval_nd")
def per_shard_shape(mesh: Mesh | AbstractMesh, spec: PartitionSpec, shape: tuple[int, ...],
                    manual_axes: Any = frozenset()) -> tuple[int, ...]:
    """Inside shard_map an argument is one shard: each dimension divided by the product of the sizes of the axes its spec names there.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> per_shard_shape(mesh, P("x", "y"), (8, 8))
    (4, 2)
    >>> per_shard_shape(mesh, P(("x", "y")), (8, 8))
    (1, 8)
    >>> per_shard_shape(mesh, P("x", "x"), (8, 8))
    (4, 4)
    """
    manual = manual_axes_of(_check_mesh(mesh), manual_axes)
    spec = _check_spec(spec, "spec")
    shape = check_dims(shape, what="a shape")
    check_spec_axes(spec, "spec", manual)
    check_spec_rank(spec, shape, "spec", "the argument")
    check_divisible(mesh, spec, shape, "spec", "the argument")
    ways = [_ways(mesh, entry) for entry in spec] + [1] * (len(shape) - len(spec))
    return tuple(size // n for size, n in zip(shape, ways))


@rule("SMAP-10", mirrors="jax._src.shard_map._unshard_shaped_array; "
                         "jax._src.interpreters.pxla.untile_aval_nd")
def unshard_shape(mesh: Mesh | AbstractMesh, spec: PartitionSpec, shape: tuple[int, ...],
                  manual_axes: Any = frozenset()) -> tuple[int, ...]:
    """Outside shard_map a result is its shards put together: each dimension multiplied by the product of the sizes of the axes its out spec names there.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> unshard_shape(mesh, P(None, ("y", "x")), (3, 5))
    (3, 40)
    >>> unshard_shape(mesh, P(), (3, 5))
    (3, 5)
    """
    manual = manual_axes_of(_check_mesh(mesh), manual_axes)
    spec = _check_spec(spec, "spec")
    shape = check_dims(shape, what="a shape")
    check_spec_axes(spec, "spec", manual)
    if len(spec):
        check_spec_rank(spec, shape, "spec", "the result")
    check_no_repeated_axes(spec, "spec")
    return _unshard(mesh, spec, shape)


def _unshard(mesh: Mesh | AbstractMesh, spec: PartitionSpec, shape: tuple[int, ...]
             ) -> tuple[int, ...]:
    ways = [_ways(mesh, entry) for entry in spec] + [1] * (len(shape) - len(spec))
    return tuple(size * n for size, n in zip(shape, ways))


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
    named = {n for entry in spec for n in _names(entry)} | spec.unreduced | spec.reduced
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
        for name in _names(entry):
            require(name not in seen, lambda: RepeatedAxis(where, spec, name))
            seen.add(name)


# --------------------------------------------------------------------------- SMAP-13, SMAP-14

@dataclasses.dataclass(frozen=True)
class CollectiveAxisUnknown(Failure, rule="SMAP-13", error=AssertionError):
    template = "a collective over {axes} names {name!r}, which is not an axis of the mesh {names}"
    axes: tuple
    name: Any
    names: tuple


@dataclasses.dataclass(frozen=True)
class CollectiveAxisNotManual(Failure, rule="SMAP-13", error=NameError):
    template = ("a collective over {axes} names {name!r}, which is not a manual "
                "axis; collectives run over the manual axes {manual}")
    axes: tuple
    name: Any
    manual: tuple


@dataclasses.dataclass(frozen=True)
class CollectiveAxesMixed(Failure, rule="SMAP-13"):
    template = ("a collective over {axes} mixes axes its operand varies along "
                "({varying}) with axes it does not vary along")
    hint = "Sum over the varying axes and the others in two separate collectives"
    axes: tuple
    varying: tuple


@dataclasses.dataclass(frozen=True)
class CollectiveAxisRepeated(Failure, rule="SMAP-13"):
    template = "a collective over {axes} names {name!r} more than once"
    axes: tuple
    name: str


def _axis_tuple(collective_axes: Any) -> tuple[str, ...]:
    axes = (collective_axes,) if isinstance(collective_axes, str) else collective_axes
    require(type(axes) in (tuple, list), lambda: BadParameter(
        "collective_axes", "an axis name or a tuple of axis names", collective_axes))
    axes = tuple(_bounded_items(axes, "collective_axes"))
    for name in axes:
        require(isinstance(name, str), lambda: BadParameter(
            "collective_axes", "an axis name or a tuple of axis names", collective_axes))
    return axes


@rule("SMAP-13", mirrors="jax._src.lax.parallel.psum (_get_from, pvary, _check_axis_names; "
                         "_axis_groups when lowered)")
def check_collective_axes(mesh: Mesh | AbstractMesh, collective_axes: Any,
                          manual_axes: frozenset[str], varying: frozenset[str] | None = None,
                          *, lowering: bool = True) -> tuple[str, ...]:
    """A collective's axes are manual axes (NameError; AssertionError for non-mesh names under check_vma), under check_vma all or none among its operand's varying axes (ValueError), and distinct (ValueError, when lowered).

    ``varying`` is None without check_vma.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> check_collective_axes(mesh, "x", frozenset({"x"}))
    ('x',)
    >>> check_collective_axes(mesh, ("x", "y"), frozenset({"x"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNameError: [SMAP-13]: a collective over ('x', 'y') names 'y', which is not a manual axis; collectives run over the manual axes ('x',)
    >>> check_collective_axes(mesh, ("x", "y"), frozenset({"x", "y"}), frozenset({"x"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-13]: a collective over ('x', 'y') mixes axes its operand varies along (('x',)) with axes it does not vary along. Sum over the varying axes and the others in two separate collectives.
    """
    axes = _axis_tuple(collective_axes)
    manual = tuple(sorted(manual_axes))
    if varying is not None:
        along = tuple(a for a in axes if a in varying)
        require(not along or len(along) == len(axes), lambda: CollectiveAxesMixed(
            axes, tuple(sorted(varying))))
        for name in axes:
            require(name in mesh.axis_names or along, lambda: CollectiveAxisUnknown(
                axes, name, mesh.axis_names))
    for name in axes:
        require(name in manual_axes, lambda: CollectiveAxisNotManual(axes, name, manual))
    for i, name in enumerate(axes):
        require(not lowering or name not in axes[:i], lambda: CollectiveAxisRepeated(axes, name))
    return axes


def replica_groups(mesh: Mesh | AbstractMesh, collective_axes: Any,
                   manual_axes: Any = frozenset()) -> tuple[tuple[int, ...], ...]:
    """The groups of a collective as mesh positions (row-major), as the HLO's ``replica_groups`` print them (SMAP-14).

    >>> replica_groups(Mesh.iota((2, 4), ("x", "y")), "x")
    ((0, 4), (1, 5), (2, 6), (3, 7))
    """
    manual = manual_axes_of(_check_mesh(mesh), manual_axes)
    axes = check_collective_axes(mesh, collective_axes, manual)
    require(mesh.size <= MAX_LISTED_DEVICES, lambda: BadParameter(
        "mesh", f"a mesh of at most {MAX_LISTED_DEVICES} devices to list its groups", mesh))
    sizes = mesh.axis_sizes
    strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    summed = [mesh.axis_names.index(a) for a in axes]
    kept = [i for i in range(len(sizes)) if i not in summed]
    return tuple(tuple(_offset(base, summed, sizes, strides))
                 for base in _offset(0, kept, sizes, strides))


def _offset(base: int, axes: list[int], sizes: tuple[int, ...], strides: list[int]) -> list[int]:
    """``base`` plus every combination of coordinates along ``axes``, the first axis major."""
    out = [base]
    for i in axes:
        out = [p + c * strides[i] for p in out for c in range(sizes[i])]
    return out


@rule("SMAP-14", mirrors="jax._src.interpreters.pxla.axis_groups (with the device order of "
                         "the mesh)")
def collective_groups(mesh: Mesh, collective_axes: Any,
                      manual_axes: Any = frozenset()) -> tuple[tuple[int, ...], ...]:
    """A collective over some axes (psum, pmax, pmin, all_gather, psum_scatter, all_to_all) groups the devices whose mesh positions differ only along those axes; each group lists them in the order of those axes, the first major.

    >>> order = Mesh((2, 4), ("x", "y"), [3, 1, 0, 2, 7, 5, 6, 4])
    >>> collective_groups(order, "x")
    ((3, 7), (1, 5), (0, 6), (2, 4))
    >>> collective_groups(order, ("y", "x"))
    ((3, 7, 1, 5, 0, 6, 2, 4),)
    """
    require(isinstance(mesh, Mesh), lambda: BadParameter(
        "mesh", "a Mesh with devices (an AbstractMesh has none)", mesh))
    return tuple(tuple(mesh.devices.id_at(p) for p in group)
                 for group in replica_groups(mesh, collective_axes, manual_axes))


# --------------------------------------------------------------------------- SMAP-15

@rule("SMAP-15", mirrors="jax._src.interpreters.pxla.manual_proto (met in _xla_shard / "
                         "_xla_unshard when the Shardy partitioner is off)")
def manual_sharding(mesh: Mesh | AbstractMesh, manual_axes: Any, rank: int) -> HloSharding | None:
    """A shard's HLO sharding tiles no dimension and groups the devices in a replicated subgroup of the automatic axes and a manual one of the manual axes, these ordered by name; none when they hold one device.

    >>> mesh = Mesh.iota((2, 2, 2), ("z", "y", "x"))
    >>> print(manual_sharding(mesh, {"y", "x"}, 1))   # manual devices in the order x, y
    {devices=[1,4,2]<=[2,2,2]T(2,1,0) last_tile_dims={manual, replicated}}
    >>> print(manual_sharding(mesh, set(), 2))
    {manual}
    >>> print(manual_sharding(Mesh.iota((1, 8), ("x", "y")), {"x"}, 2))
    None
    """
    manual = manual_axes_of(_check_mesh(mesh), manual_axes)
    rank = check_rank_count(rank)
    sizes = mesh.sizes_by_name
    if math.prod(sizes[a] for a in manual) == 1:
        return None  # JAX adds no sharding ops around the body
    automatic = [a for a in mesh.axis_names if a not in manual]
    in_order = sorted(manual, key=str)
    perm = [mesh.axis_names.index(a) for a in automatic + in_order]
    dims = (1,) * rank + (math.prod(sizes[a] for a in automatic),
                          math.prod(sizes[a] for a in in_order))
    return iota_tile(dims, mesh.axis_sizes, perm,
                     (SubgroupType.REPLICATED, SubgroupType.MANUAL))


# --------------------------------------------------------------------------- the whole call

# --------------------------------------------------------------------------- SMAP-16

def _explicit(mesh: Mesh | AbstractMesh) -> frozenset[str]:
    return frozenset(n for n, t in zip(mesh.axis_names, mesh.axis_types)
                     if t is AxisType.Explicit)


def _entry(names: tuple) -> Any:
    """A spec entry for ``names``: None for none, the name for one, else the tuple."""
    return None if not names else names[0] if len(names) == 1 else tuple(names)


def _padded(spec: PartitionSpec | None, rank: int) -> tuple:
    """A spec's entries, one per dimension of a value of ``rank`` (missing ones None)."""
    entries = [] if spec is None else [_entry(_names(e)) for e in spec]
    return tuple(entries + [None] * (rank - len(entries)))


@dataclasses.dataclass(frozen=True)
class InferOverAutoAxes(Failure, rule="SMAP-16", error=TypeError):
    template = ("in_specs were left out, but the manual axes {axes} are not "
                "all Explicit: only an Explicit axis shows in an argument's "
                "type, so shard_map cannot read the in specs off the arguments")
    hint = "Pass in_specs, or make the manual axes Explicit."
    axes: tuple


@dataclasses.dataclass(frozen=True)
class InferredSpecInvalid(Failure, rule="SMAP-16"):
    template = ("the type of {where} is split by {spec}, whose entry {entry} "
                "names the automatic axis {auto!r} before a manual one: kept "
                "to its manual axes the entry has a hole, so no in spec "
                "can be read off it")
    where: str
    spec: PartitionSpec
    entry: Any
    auto: str


@rule("SMAP-16", mirrors="jax._src.shard_map._shard_map (in_specs is Infer); "
                         "jax._src.shard_map._manual_spec")
def infer_in_specs(mesh: Mesh | AbstractMesh, manual_axes: frozenset[str], operands: tuple
                   ) -> tuple[PartitionSpec, ...]:
    """With in_specs left out, every manual axis must be Explicit and each argument's in spec is its type's spec kept to the manual axes; an entry naming an automatic axis before a manual one is invalid.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> infer_in_specs(mesh, frozenset({"y"}), (Shaped((8, 8), P(("y", "x"))),))
    (P('y', None),)
    >>> infer_in_specs(mesh, frozenset({"y"}), (Shaped((8,), P(("x", "y"))),))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-16]: the type of args[0] is split by P(('x', 'y')), ...
    """
    require(manual_axes <= _explicit(mesh), lambda: InferOverAutoAxes(
        tuple(sorted(manual_axes - _explicit(mesh)))))
    specs = []
    for path, leaf in leaves_with_paths(operands):
        entries = []
        for entry in _padded(leaf.spec, len(leaf.shape)):  # a type's spec has every dim
            kept = [n if n in manual_axes else None for n in _names(entry)]
            while kept and kept[-1] is None:
                kept.pop()
            hole = next((n for n, k in zip(_names(entry), kept) if k is None), None)
            require(hole is None, lambda: InferredSpecInvalid(
                show_path(("args", *path)), leaf.spec, entry, hole))
            entries.append(_entry(tuple(kept)))
        specs.append(PartitionSpec(*entries))
    return tuple(specs)


# --------------------------------------------------------------------------- SMAP-17

@dataclasses.dataclass(frozen=True)
class SpecNotTheType(Failure, rule="SMAP-17"):
    template = ("the in spec of {where} is {spec}, but its type is split by "
                "{typed}: over Explicit axes shard_map takes an argument as "
                "its type splits it")
    hint = ("Leave in_specs out to read them off the types, or reshard the "
            "argument (jax.reshard) first.")
    where: str
    spec: Any
    typed: Any


@rule("SMAP-17", mirrors="jax._src.shard_map._shard_map (every axis manual and Explicit: "
                         "in_specs against the arguments' types)")
def check_specs_match_types(mesh: Mesh | AbstractMesh, manual_axes: frozenset[str],
                            flat_in: list, operands: tuple) -> None:
    """When every mesh axis is manual and Explicit, each mapped argument's in spec, padded to its rank, equals the spec its type carries.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> everything = frozenset({"x", "y"})
    >>> check_specs_match_types(mesh, everything, [P("x")], (Shaped((8, 8), P("x", None)),))
    >>> check_specs_match_types(mesh, everything, [P("y")], (Shaped((8, 8), P("x")),))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-17]: the in spec of args[0] is P('y', None), but its type is split by P('x', None): ...
    """
    if manual_axes != frozenset(mesh.axis_names) or not manual_axes <= _explicit(mesh):
        return
    for (path, leaf), spec in zip(leaves_with_paths(operands), flat_in):
        if spec is None:
            continue
        given, typed = _padded(spec, len(leaf.shape)), _padded(leaf.spec, len(leaf.shape))
        require(given == typed and not spec.unreduced and not spec.reduced,
                lambda: SpecNotTheType(show_path(("args", *path)), PartitionSpec(
                    *given, unreduced=spec.unreduced, reduced=spec.reduced),
                    PartitionSpec(*typed)))


# --------------------------------------------------------------------------- SMAP-18

@dataclasses.dataclass(frozen=True)
class TypeDoesNotSplitShard(Failure, rule="SMAP-18"):
    template = ("inside shard_map {where} is a shard of shape {shape}, whose "
                "type keeps {entries} on the Explicit axes that stay "
                "automatic: dimension {dim} of size {size} does not split "
                "{ways} ways")
    hint = "Split that dimension over fewer manual axes, or reshard the argument first."
    where: str
    shape: tuple
    entries: tuple
    dim: int
    size: int
    ways: int


@rule("SMAP-18", mirrors="jax._src.shard_map._shard_shaped_array and _unshard_shaped_array "
                         "(the sharding of the types); jax._src.core.modify_spec_for_auto_manual")
def explicit_types(mesh: Mesh | AbstractMesh, manual_axes: frozenset[str],
                   type_spec: PartitionSpec | None, out_spec: PartitionSpec | None,
                   shape: tuple[int, ...], where: str = "the argument") -> tuple[tuple, tuple]:
    """Inside, a value's type keeps the Explicit axes that are not manual, which must split its shard evenly; outside, each dimension of a result's type names its out spec's Explicit axes, then those its type inside names there.

    Returns (the type inside, the type outside), one entry per dimension of ``shape``, the
    shard inside.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> explicit_types(mesh, frozenset({"y"}), P("x"), P("y"), (2, 8))
    (('x', None), (('y', 'x'), None))
    >>> explicit_types(mesh, frozenset({"y"}), P("x"), None, (1,), "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-18]: inside shard_map args[0] is a shard of shape (1,), whose type keeps ('x',) on the Explicit axes that stay automatic: dimension 0 of size 1 does not split 2 ways. ...
    """
    explicit = _explicit(mesh)
    inner = tuple(_entry(tuple(n for n in _names(e) if n in explicit - manual_axes))
                  for e in _padded(type_spec, len(shape)))
    for dim, (size, entry) in enumerate(zip(shape, inner)):
        ways = _ways(mesh, entry)
        require(size % ways == 0, lambda: TypeDoesNotSplitShard(
            where, tuple(shape), inner, dim, size, ways))
    outer = tuple(_entry(tuple(n for n in _names(o) if n in explicit) + _names(i))
                  for o, i in zip(_padded(out_spec, len(shape)), inner))
    return inner, outer


# --------------------------------------------------------------------------- SMAP-19

@dataclasses.dataclass(frozen=True)
class ReductionsNotTheValue(Failure, rule="SMAP-19"):
    template = ("{where} is {spec}, which calls {value} {kind} over "
                "{axes}, but {value} is {kind} over {held}: an in spec takes "
                "its argument's unreduced and reduced axes as its type has "
                "them, an out spec its result's")
    where: str
    spec: Any
    value: str
    kind: str
    axes: tuple
    held: tuple


@rule("SMAP-19", mirrors="jax._src.shard_map._shard_shaped_array and _unshard_shaped_array "
                         "(their unreduced and reduced checks)")
def check_reductions_held(spec: PartitionSpec, where: str, value: str,
                          unreduced: frozenset[str] = frozenset(),
                          reduced: frozenset[str] = frozenset()) -> None:
    """An in spec's unreduced and reduced axes are those its argument's type holds, and an out spec's are those its result holds inside (checked when traced with check_vma, else when lowered).

    The values described here hold none: an argument's type has no unreduced or reduced
    axes (SMAP-0), and the body makes none.

    >>> check_reductions_held(P("x"), "in_specs[0]", "args[0]")
    >>> check_reductions_held(P(unreduced={"x"}), "in_specs[0]", "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-19]: in_specs[0] is P(unreduced={'x'}), which calls args[0] unreduced over ('x',), but args[0] is unreduced over (): ...
    """
    for kind, named, held in (("unreduced", spec.unreduced, unreduced),
                              ("reduced", spec.reduced, reduced)):
        require(frozenset(named) == frozenset(held), lambda: ReductionsNotTheValue(
            where, spec, value, kind, tuple(sorted(named)), tuple(sorted(held))))


def check_shard_map(mesh: Any, in_specs: Any, out_specs: Any, operands: Any, results: Any,
                    manual_axes: Any = frozenset(), check_vma: Any = True) -> ShardMapTypes:
    """What ``jax.jit(jax.shard_map(f, ...))`` does with the types, or the first rule it breaks.

    The rules meet the call in JAX's order: the parameters (SMAP-0, SMAP-1), the specs
    (SMAP-2 to SMAP-4, in_specs then out_specs), the arguments (SMAP-5, SMAP-7, SMAP-8, then
    SMAP-9), the body's results (SMAP-13, SMAP-6, SMAP-7, SMAP-11, then SMAP-10 with SMAP-12),
    and last, when the program is lowered, SMAP-12 for the in specs.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> types = check_shard_map(mesh, P("x", "y"), P(None, "y"), (Shaped((8, 8)),),
    ...                         Returned(0, summed="x"))
    >>> types.inner_shapes, types.result_varying, types.out_shapes
    (((4, 2),), (frozenset({'y'}),), ((4, 8),))
    >>> check_shard_map(mesh, P("x"), P(), (Shaped((8, 8)),), Returned(0))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-11]: the out spec of results is P(), which says ...
    """
    operands, check_vma = check_parameters(mesh, in_specs, out_specs, operands, results,
                                           check_vma)
    manual = manual_axes_of(mesh, manual_axes)
    for which, specs in (("in_specs", in_specs), ("out_specs", out_specs)):
        if which == "in_specs" and specs is INFER:
            infer_in_specs(mesh, manual, ())  # the manual axes must show in the types
            continue
        if which == "in_specs" and specs is None:
            continue  # every argument passed whole
        check_spec_leaves(specs, which)
        check_spec_axes(specs, which, manual)
        check_spec_reductions(specs, which, mesh, manual)
    flat_in, inner_shapes = _map_arguments(mesh, in_specs, operands, manual)
    inner_varying = tuple(_varying(spec, check_vma) for spec in flat_in)
    shapes, varying = _trace_body(mesh, results, inner_shapes, inner_varying, manual, check_vma)
    flat_out, out_shapes = _map_results(mesh, out_specs, results, shapes, varying, manual,
                                        check_vma)
    # Lowering makes a NamedSharding of the spec of every argument the body uses (the
    # others are pruned first).
    used = {leaf.operand for _, leaf in leaves_with_paths(results)}
    with staged("lower"):
        for i, ((path, _), spec) in enumerate(zip(leaves_with_paths(operands), flat_in)):
            if spec is not None and i in used:
                check_no_repeated_axes(spec, f"the in spec of {show_path(('args', *path))}")
        for path, leaf in leaves_with_paths(results):  # the body's collectives, in order
            with located(show_path(("results", *path))):
                check_collective_axes(mesh, leaf.summed, manual)
        if not check_vma:  # unchecked while tracing, an out spec's reductions fail here
            for (path, _), spec in zip(leaves_with_paths(results), flat_out):
                check_reductions_held(spec, f"the out spec of {show_path(('results', *path))}",
                                      "the result")
    inner_types, out_types = _types(mesh, manual, operands, flat_in, inner_shapes, results,
                                    flat_out, shapes)
    return ShardMapTypes(manual, tuple(flat_in), inner_shapes, inner_varying, tuple(flat_out),
                         shapes, _cast_to_out_specs(varying, flat_out, check_vma), out_shapes,
                         inner_types, out_types)


def _types(mesh: Mesh | AbstractMesh, manual: frozenset[str], operands: tuple, flat_in: list,
           inner_shapes: tuple, results: Any, flat_out: list, shapes: tuple
           ) -> tuple[tuple, tuple]:
    """SMAP-18 for every argument inside and every result outside (an argument passed whole
    has no type over the mesh: SMAP-0)."""
    typed = [leaf.spec for _, leaf in leaves_with_paths(operands)]
    inner = tuple(explicit_types(mesh, manual, t, None, shape)[0]
                  for t, shape in zip(typed, inner_shapes))
    outer = tuple(explicit_types(mesh, manual, typed[leaf.operand], spec, shape)[1]
                  for (_, leaf), spec, shape in zip(leaves_with_paths(results), flat_out, shapes))
    return inner, outer


def _varying(spec: PartitionSpec | None, check_vma: bool) -> frozenset[str]:
    """The axes an argument varies along inside: its spec's axes (with check_vma; SMAP-11)."""
    if spec is None or not check_vma:
        return frozenset()
    return frozenset(n for entry in spec for n in _names(entry))


def _map_arguments(mesh: Mesh | AbstractMesh, in_specs: Any, operands: tuple,
                   manual: frozenset[str]) -> tuple[list, tuple]:
    """SMAP-5, then SMAP-7 for every argument, then SMAP-8 for every argument, then SMAP-9."""
    flat = (list(infer_in_specs(mesh, manual, operands)) if in_specs is INFER else
            match_in_specs(in_specs, operands))
    args = [(show_path(("args", *path)), leaf.shape) for path, leaf in leaves_with_paths(operands)]
    for (where, shape), spec in zip(args, flat):
        if spec is not None:
            check_spec_rank(spec, shape, f"the in spec of {where}", where)
    for (where, shape), spec in zip(args, flat):
        if spec is not None:
            check_divisible(mesh, spec, shape, f"the in spec of {where}", where)
    check_specs_match_types(mesh, manual, flat, operands)
    inner = []
    for (where, shape), spec, (_, leaf) in zip(args, flat, leaves_with_paths(operands)):
        if spec is None:
            # Closed over, a value typed over a mesh with Explicit axes meets unfinished
            # paths in JAX (NotImplementedError or not, by the manual axes): not described.
            require(leaf.spec is None, lambda: TypedArgumentPassedWhole(mesh, where))
            inner.append(shape)
            continue
        check_reductions_held(spec, f"the in spec of {where}", where)
        inner.append(per_shard_shape(mesh, spec, shape, manual))
        explicit_types(mesh, manual, leaf.spec, None, inner[-1], where)
    return flat, tuple(inner)


def _trace_body(mesh: Mesh | AbstractMesh, results: Any, inner_shapes: tuple,
                inner_varying: tuple, manual: frozenset[str], check_vma: bool) -> tuple:
    """Each result's shard: the shape of its argument's shard, varying along that argument's
    axes less those summed over (SMAP-13 checks the sums, in the order the body runs them)."""
    shapes, varying = [], []
    for path, leaf in leaves_with_paths(results):
        before = inner_varying[leaf.operand]
        if leaf.summed:
            with located(show_path(("results", *path))):
                check_collective_axes(mesh, leaf.summed, manual, before if check_vma else None,
                                      lowering=False)
        shapes.append(inner_shapes[leaf.operand])
        varying.append(before - frozenset(leaf.summed))
    return tuple(shapes), tuple(varying)


def _map_results(mesh: Mesh | AbstractMesh, out_specs: Any, results: Any, shapes: tuple,
                 varying: tuple, manual: frozenset[str], check_vma: bool) -> tuple[list, tuple]:
    """SMAP-6, then SMAP-7 for every result, SMAP-11 for every result, then SMAP-10."""
    flat = match_out_specs(out_specs, results)
    where = [f"the out spec of {show_path(('results', *path))}"
             for path, _ in leaves_with_paths(results)]
    for spec, shape, at in zip(flat, shapes, where):
        if len(spec):
            check_spec_rank(spec, shape, at, "the result")
    if check_vma:
        for spec, vary, at in zip(flat, varying, where):
            check_replication(mesh, spec, vary, at)
    out = []
    for spec, shape, at in zip(flat, shapes, where):
        if check_vma:
            check_reductions_held(spec, at, "the result")
        check_no_repeated_axes(spec, at)
        out.append(unshard_shape(mesh, spec, shape, manual))
    return flat, tuple(out)


def _cast_to_out_specs(varying: tuple, flat_out: list, check_vma: bool) -> tuple:
    """With check_vma the body's results are cast to vary along their out spec's axes too."""
    return tuple(vary | _varying(spec, check_vma) for vary, spec in zip(varying, flat_out))
