"""shard_map's description: the arguments, results and parameters it is given (SMAP-0).

The mapped function is described, not run: its arguments are :class:`Shaped` leaves and its
results :class:`Returned` leaves; :class:`ShardMapTypes` is what a shard_map that JAX
accepts does with their types. SMAP-0 holds the description well-formed. The spec-entry
helpers every other shard_map rule reads (the axes an entry names, the ways it splits) live
here too.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

from ..jit.call import nesting
from ..core.dims import MAX_RANK, check_dims, check_rank_count
from ..core.pytree import leaves_with_paths, show_path
from ..core.rules import IllFormedParameter, Failure, Rejection, reject, require, rule
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = ["Shaped", "Returned", "ShardMapTypes", "INFER", "check_parameters"]


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
        summed = tuple(bounded_items(summed, "Returned.summed"))
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


def bounded_items(items: Iterable[Any], what: str, limit: int = MAX_RANK) -> list[Any]:
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


# --------------------------------------------------------------------------- spec entries

def entry_axes(entry: Any) -> tuple:
    """The mesh axes one entry of a PartitionSpec names (None names none, a name names one)."""
    return entry if isinstance(entry, tuple) else () if entry is None else (entry,)


def spec_axes(spec: Any) -> frozenset[str]:
    """The mesh axes a PartitionSpec's entries name."""
    return frozenset(a for entry in spec for a in entry_axes(entry) if isinstance(a, str))


def entry_ways(mesh: Mesh | AbstractMesh, entry: Any) -> int:
    """How many pieces a spec entry cuts a dimension into (an axis named twice counts twice)."""
    return math.prod(mesh.axis_size(name) for name in entry_axes(entry))


def checked_mesh(mesh: Any) -> Mesh | AbstractMesh:
    """``mesh`` itself when it is a Mesh or an AbstractMesh, refused otherwise (SMAP-0)."""
    require(isinstance(mesh, (Mesh, AbstractMesh)), lambda: BadParameter(
        "mesh", "a Mesh or an AbstractMesh", mesh))
    return mesh


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
    names = [n for entry in spec for n in entry_axes(entry)]
    fits = (len(spec) <= len(leaf.shape) and not spec.unreduced and not spec.reduced
            and len(set(names)) == len(names) and set(names) <= explicit
            and all(size % entry_ways(mesh, entry) == 0 for size, entry in zip(leaf.shape, spec)))
    require(fits, lambda: BadParameter(
        where, "a spec over the mesh's Explicit axes, each named once, that splits the "
               "shape evenly", spec))


def _check_tree(tree: Any, parameter: str, leaf_type: type, what: str) -> None:
    require(nesting(tree, MAX_NESTING) <= MAX_NESTING, lambda: BadParameter(
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
        require(nesting(specs, MAX_NESTING) <= MAX_NESTING, lambda: BadParameter(
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
