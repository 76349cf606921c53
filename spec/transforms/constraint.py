"""with_sharding_constraint: what it accepts and how it batches (WSC rules).

``jax.lax.with_sharding_constraint(x, shardings)`` traced inside ``jax.jit`` leaves one
``sharding_constraint`` equation per leaf of ``x``; each equation holds a sharding and the
dimensions left to the compiler (``unconstrained_dims``). The rules below say which calls JAX
accepts and what those two parameters hold:

* WSC-0 the parameters are well-formed (the spec's own input checks);
* WSC-1 each leaf of ``shardings`` is a sharding, a PartitionSpec or None;
* WSC-2 ``shardings`` is a tree prefix of ``x``;
* WSC-3 a PartitionSpec or None is resolved on the context mesh (``jax.set_mesh``);
* WSC-4 each value has the rank its sharding needs, but need not divide evenly;
* WSC-5 a NamedSharding names Auto mesh axes only (under an all-Explicit context mesh
  the constraint is an assertion instead);
* WSC-6 the dimensions marked UNCONSTRAINED are the equation's ``unconstrained_dims``;
* WSC-7 under ``vmap`` the batch dimension is inserted UNCONSTRAINED, or split over
  ``spmd_axis_name``;
* WSC-8 under ``jit`` a GSPMDSharding constraint lowers only if replicated or iota-tiled
  (with DA-1: every constraint is on the program's one device assignment).

Values are described by :class:`~shardlaw.spec.jit.call.Arg` leaves (only their shapes
matter); a context mesh is the concrete :class:`~shardlaw.spec.core.values.Mesh` given to
``jax.set_mesh`` (None: no context mesh).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..jit.assignment import Source, check_tile_count, device_assignment
from ..core.hlo import Replicated, Tiled
from ..core.iota import Iota
from ..jit.call import MAX_NESTING, Arg, nesting
from ..core.dims import check_dims
from ..placement.blocks import TilesDoNotMatchRank, check_rank, is_fully_replicated, shard_shape
from ..core.pytree import (
    broadcast_prefix, is_container, leaves_with_paths, prefix_mismatch, show_path, show_tree,
    structure,
)
from ..core.rules import IllFormedParameter, Failure, Rejection, explain, located, reject, require, rule
from ..core.shardings import GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import AxisType, Mesh, PartitionSpec, UNCONSTRAINED

P = PartitionSpec  # the name the examples use

__all__ = ["Constraint", "with_sharding_constraint", "batch_constraint", "lower_constraints",
           "constrained_result", "check_split_kept", "check_operand_not_reduced"]

SHARDINGS = (NamedSharding, SingleDeviceSharding, GSPMDSharding)


@dataclasses.dataclass(frozen=True)
class Constraint:
    """One ``sharding_constraint`` equation: the leaf's path, the sharding it holds and the
    dimensions left to the compiler. ``equation`` is False when JAX checks instead of
    constraining (an all-Explicit context mesh) and leaves no equation."""

    path: str
    shape: tuple[int, ...]
    sharding: Any
    unconstrained_dims: frozenset[int] = frozenset()
    equation: bool = True
    context_mesh: Mesh | None = None   # the mesh given to jax.set_mesh (None: none)

    def __post_init__(self) -> None:
        # A Constraint that exists is one with_sharding_constraint could have made (WSC-0).
        object.__setattr__(self, "shape", check_dims(self.shape, what="a constrained shape"))
        for ok, what, expected, value in (
                (isinstance(self.path, str), "a constraint's path", "a str", self.path),
                (isinstance(self.sharding, SHARDINGS), "a constraint's sharding",
                 "a NamedSharding, SingleDeviceSharding or GSPMDSharding", self.sharding),
                (isinstance(self.unconstrained_dims, frozenset) and all(
                    type(d) is int and 0 <= d <= len(self.shape)
                    for d in self.unconstrained_dims), "a constraint's unconstrained_dims",
                 "a frozenset of dimensions", self.unconstrained_dims),
                (type(self.equation) is bool, "a constraint's equation flag", "a bool",
                 self.equation),
                (self.context_mesh is None or isinstance(self.context_mesh, Mesh),
                 "a constraint's context mesh", "a Mesh or None", self.context_mesh)):
            check_constraint_call(ok, what, expected, value)


# --------------------------------------------------------------------------- WSC-0

@dataclasses.dataclass(frozen=True)
class BadConstraintCall(IllFormedParameter, rule="WSC-0"):
    pass


@rule("WSC-0", mirrors="(input checking of the spec's description; JAX has no such value)")
def check_constraint_call(condition: bool, what: str, expected: str, value: Any) -> None:
    """The values are a pytree of :class:`Arg` leaves, values and shardings nest at most 200 containers deep, and a context mesh is a concrete Mesh without Manual axes, or None.

    >>> check_constraint_call(False, "the context mesh", "a Mesh or None", "x")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [WSC-0]: the context mesh must be a Mesh or None, got 'x'
    """
    require(condition, lambda: BadConstraintCall(what, expected, value))


def _check_inputs(values: Any, shardings: Any, context_mesh: Any) -> None:
    deep = f"a pytree at most {MAX_NESTING} containers deep"
    check_constraint_call(nesting(values) <= MAX_NESTING, "the values", deep, "a deeper tree")
    check_constraint_call(nesting(shardings) <= MAX_NESTING, "the shardings", deep,
                          "a deeper tree")
    for path, leaf in leaves_with_paths(values):
        check_constraint_call(isinstance(leaf, Arg), f"the value at x{show_path(('', *path))}",
                              "an Arg", leaf)
    check_constraint_call(context_mesh is None or isinstance(context_mesh, Mesh) and
                          AxisType.Manual not in context_mesh.axis_types, "the context mesh",
                          "a concrete Mesh without Manual axes (as jax.set_mesh takes) or None",
                          context_mesh)


# --------------------------------------------------------------------------- WSC-1

@dataclasses.dataclass(frozen=True)
class NotAConstraintLeaf(Failure, rule="WSC-1", error=TypeError):
    template = ("the shardings leaf at shardings{path} is {value!r}; a leaf must be "
                "a Sharding, a PartitionSpec or None")
    path: str
    value: Any


@rule("WSC-1", mirrors="jax._src.pjit.prepare_axis_resources")
def check_constraint_leaves(shardings: Any) -> None:
    """Every leaf of the shardings tree is a sharding, a PartitionSpec or None.

    >>> check_constraint_leaves((P("x"), None))
    >>> check_constraint_leaves({"w": "x"})
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [WSC-1]: the shardings leaf at shardings['w'] is 'x'; a leaf must be a Sharding, a PartitionSpec or None
    """
    if shardings is None:
        return
    for path, leaf in leaves_with_paths(shardings):
        require(isinstance(leaf, (*SHARDINGS, PartitionSpec)),
                lambda: NotAConstraintLeaf(show_path(("", *path)), leaf))


# --------------------------------------------------------------------------- WSC-2

@dataclasses.dataclass(frozen=True)
class ConstraintNotAPrefix(Failure, rule="WSC-2"):
    template = ("with_sharding_constraint's shardings must be a tree prefix of "
                "its values {values}: {detail}")
    values: str
    detail: str


@rule("WSC-2", mirrors="jax._src.api_util.flatten_axes")
def match_constraint_tree(values: Any, shardings: Any) -> list[Any]:
    """The shardings tree is a prefix of the values tree: a leaf (a PartitionSpec and None included) covers a whole subtree, and containers match in type, length and dict keys.

    >>> match_constraint_tree((Arg.numpy((4,)), [Arg.numpy(())]), P("x"))
    [P('x'), P('x')]
    >>> match_constraint_tree((Arg.numpy((4,)),), (None, None))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-2]: with_sharding_constraint's shardings must be a tree prefix of its values (*,): at the top level the shardings hold a tuple of length 2 where the value's has length 1
    """
    node = structure(values)
    if shardings is None or not is_container(shardings):
        return [shardings] * node.num_leaves
    found = prefix_mismatch(shardings, node, ())
    require(found is None, lambda: ConstraintNotAPrefix(show_tree(node), found or ""))
    return broadcast_prefix(shardings, node)


# --------------------------------------------------------------------------- WSC-3

@dataclasses.dataclass(frozen=True)
class SpecWithoutMesh(Failure, rule="WSC-3", error=RuntimeError):
    template = ("the sharding of {path} is the bare {spec}, but there is no "
                "context mesh to resolve it on")
    hint = "Set a mesh with jax.set_mesh(mesh), or pass NamedSharding(mesh, {spec})."
    path: str
    spec: PartitionSpec


@dataclasses.dataclass(frozen=True)
class NoneWithoutMesh(Failure, rule="WSC-3"):
    template = "the sharding of {path} is None, which is not allowed without a context mesh"
    hint = "Pass a Sharding (NamedSharding(mesh, P()) replicates)."
    path: str


@rule("WSC-3", mirrors="jax._src.pjit._create_sharding_for_array (api_name "
                       "'with_sharding_constraint')")
def resolve_constraint(leaf: Any, context_mesh: Mesh | None, path: str) -> Any:
    """A PartitionSpec, or None read as ``P()``, becomes a NamedSharding over the context mesh's abstract mesh; without a context mesh both are refused.

    A sharding is taken as it is. Without a context mesh a PartitionSpec is refused at once
    (RuntimeError), None only after every leaf is resolved (ValueError).

    Returns None for a None leaf without a context mesh: the caller refuses it once every
    other leaf has been resolved, as JAX does.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> resolve_constraint(None, mesh, "x")
    NamedSharding(AbstractMesh({'x': 2, 'y': 4}), P())
    >>> resolve_constraint(P("y"), None, "x[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [WSC-3]: the sharding of x[1] is the bare P('y'), but there is no context mesh to resolve it on. Set a mesh with jax.set_mesh(mesh), or pass NamedSharding(mesh, P('y')).
    """
    if isinstance(leaf, SHARDINGS):
        return leaf
    if context_mesh is None:
        require(leaf is None, lambda: SpecWithoutMesh(path, leaf))
        return None
    # A spec naming an axis the mesh lacks, or one axis twice, is refused by NamedSharding
    # itself (NS-1, NS-2), as JAX's own NamedSharding does.
    return NamedSharding(context_mesh.abstract, PartitionSpec() if leaf is None else leaf)


def _resolved(values: Any, shardings: Any, context_mesh: Mesh | None) -> list[tuple[str, Arg, Any]]:
    """(path, value, sharding) per leaf, every leaf resolved before None is refused."""
    leaves = [(f"x{show_path(('', *p))}", v) for p, v in leaves_with_paths(values)]
    flat = match_constraint_tree(values, shardings)
    out = []
    for (path, value), leaf in zip(leaves, flat):
        with located(path):
            out.append((path, value, resolve_constraint(leaf, context_mesh, path)))
    for path, _, sharding in out:
        require(sharding is not None, lambda: NoneWithoutMesh(path))
    return out


# --------------------------------------------------------------------------- WSC-4

@dataclasses.dataclass(frozen=True)
class ConstraintRankMismatch(Failure, rule="WSC-4"):
    template = ("{path} of shape {shape} does not fit its sharding: {reason}")
    path: str
    shape: tuple
    reason: str


@dataclasses.dataclass(frozen=True)
class ConstraintTilesMismatch(ConstraintRankMismatch, error=AssertionError):
    pass


@rule("WSC-4", mirrors="jax._src.pjit.pjit_check_aval_sharding (allow_uneven_sharding=True)")
def check_constraint_fits(sharding: Any, value: Arg, path: str) -> None:
    """A constrained value has at least the rank its sharding needs, but unlike a jit argument its dimensions need not divide evenly into their shards.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> check_constraint_fits(NamedSharding(mesh, P("y", "x")), Arg.numpy((6, 3)), "x")
    >>> check_constraint_fits(NamedSharding(mesh, P("y", "x")), Arg.numpy((6,)), "x")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-4] at x: x of shape (6,) does not fit its sharding: [NS-5]: NamedSharding(Mesh({'x': 2, 'y': 4}), P('y', 'x')) needs a value of rank at least 2, but the value has rank 1
    """
    try:
        check_rank(sharding, value.shape)
    except Rejection as error:
        kind = (ConstraintTilesMismatch if isinstance(error.failure, TilesDoNotMatchRank)
                or error.failure.error_type is AssertionError else ConstraintRankMismatch)
        raise reject(kind(path, value.shape, explain(error.failure)), path) from None


# --------------------------------------------------------------------------- WSC-5

@dataclasses.dataclass(frozen=True)
class ConstraintNamesNonAutoAxis(Failure, rule="WSC-5"):
    template = ("the sharding of {path}, {sharding}, names mesh axes {axes} that "
                "are not Auto; with_sharding_constraint constrains Auto axes only")
    hint = "Use jax.sharding.reshard to move a value over Explicit axes."
    path: str
    sharding: Any
    axes: tuple


@dataclasses.dataclass(frozen=True)
class ConstraintAssertionFails(Failure, rule="WSC-5", error=AssertionError):
    template = ("under a context mesh whose axes are all Explicit the constraint "
                "on {path} only checks the value's sharding: the value is split "
                "{have}, the sharding asks {want}")
    hint = "Use jax.sharding.reshard to change the sharding of the value."
    path: str
    have: tuple
    want: tuple


def _axes_named(spec: PartitionSpec) -> list[str]:
    return [a for entry in spec for a in ((entry,) if isinstance(entry, str) else
                                          entry if isinstance(entry, tuple) else ())]


@rule("WSC-5", mirrors="jax._src.pjit.check_shardings_are_auto; "
                       "jax._src.pjit.assert_shardings_equal")
def check_constraint_axes(sharding: Any, value: Arg, context_mesh: Mesh | None, path: str
                          ) -> bool:
    """A NamedSharding constraint names Auto mesh axes only; under an all-Explicit context mesh it instead asserts that the value is split as its spec says, and leaves no equation.

    UNCONSTRAINED dimensions are not compared by the assertion.

    Returns whether the constraint leaves an equation. The values described here are not
    split in their type (numpy arrays, scalars, arrays on Auto axes), so the assertion holds
    exactly when every entry of the spec is None or UNCONSTRAINED.

    >>> mixed = Mesh.iota((2, 4), ("x", "y"), (AxisType.Auto, AxisType.Explicit))
    >>> check_constraint_axes(NamedSharding(mixed, P("x")), Arg.numpy((4,)), None, "x")
    True
    >>> check_constraint_axes(NamedSharding(mixed, P("y")), Arg.numpy((4,)), None, "x")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-5]: the sharding of x, NamedSharding(Mesh({'x': 2, 'y': 4}, types=('Auto', 'Explicit')), P('y')), names mesh axes ('y',) that are not Auto; with_sharding_constraint constrains Auto axes only. Use jax.sharding.reshard to move a value over Explicit axes.
    """
    if not isinstance(sharding, NamedSharding):
        return True
    if context_mesh is not None and all(t is AxisType.Explicit for t in context_mesh.axis_types):
        want = tuple(sharding.spec) + (None,) * (len(value.shape) - len(sharding.spec))
        have = (None,) * len(value.shape)
        require(all(w is None or w is UNCONSTRAINED for w in want),
                lambda: ConstraintAssertionFails(path, have, want))
        return False
    mesh = sharding.mesh
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    others = tuple(a for a in _axes_named(sharding.spec) if types.get(a) is not AxisType.Auto)
    require(not others, lambda: ConstraintNamesNonAutoAxis(path, sharding, others))
    return True


# --------------------------------------------------------------------------- WSC-6

@dataclasses.dataclass(frozen=True)
class ReducedAxesInConstraint(Failure, rule="WSC-6"):
    template = ("the sharding of {path}, {sharding}, has unreduced or reduced mesh "
                "axes; JAX reads a constraint's spec entry by entry, which such a "
                "spec refuses")
    hint = "Constrain with a spec without unreduced= or reduced= axes."
    path: str
    sharding: Any


@rule("WSC-6", mirrors="jax._src.pjit.get_unconstrained_dims")
def unconstrained_dims(sharding: Any, path: str = "x") -> frozenset[int]:
    """The dimensions left to the compiler are the positions of UNCONSTRAINED in a NamedSharding's spec, none for other shardings; a spec with unreduced or reduced axes is refused.

    Every other dimension is constrained, None meaning unsplit.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> sorted(unconstrained_dims(NamedSharding(mesh, P(UNCONSTRAINED, "x", UNCONSTRAINED))))
    [0, 2]
    >>> unconstrained_dims(NamedSharding(mesh, P("x")))
    frozenset()
    """
    if not isinstance(sharding, NamedSharding):
        return frozenset()
    spec = sharding.spec
    require(not spec.unreduced and not spec.reduced,
            lambda: ReducedAxesInConstraint(path, sharding))
    return frozenset(i for i, entry in enumerate(spec) if entry is UNCONSTRAINED)


def with_sharding_constraint(values: Any, shardings: Any, context_mesh: Mesh | None = None
                             ) -> list[Constraint]:
    """The ``sharding_constraint`` equations that ``jax.lax.with_sharding_constraint(values,
    shardings)`` leaves in a jaxpr, one per leaf in flattening order (WSC-0 .. WSC-6).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> [c] = with_sharding_constraint(Arg.numpy((6, 3)), P(UNCONSTRAINED, "x"), mesh)
    >>> c.sharding, sorted(c.unconstrained_dims)
    (NamedSharding(AbstractMesh({'x': 2, 'y': 4}), P(UNCONSTRAINED, 'x')), [0])
    """
    _check_inputs(values, shardings, context_mesh)
    check_constraint_leaves(shardings)
    resolved = _resolved(values, shardings, context_mesh)
    loose = []
    for path, _, sharding in resolved:
        with located(path):
            loose.append(unconstrained_dims(sharding, path))
    for path, value, sharding in resolved:
        with located(path):
            check_constraint_fits(sharding, value, path)
    out = []
    for (path, value, sharding), dims in zip(resolved, loose):
        with located(path):
            equation = check_constraint_axes(sharding, value, context_mesh, path)
        out.append(Constraint(path, value.shape, sharding, dims, equation, context_mesh))
    return out


# --------------------------------------------------------------------------- WSC-7

@dataclasses.dataclass(frozen=True)
class SpmdAxisInConstraint(Failure, rule="WSC-7"):
    template = ("vmap's spmd_axis_name {names} also appears in the "
                "with_sharding_constraint spec {spec} of {path}; a mesh axis "
                "cannot split both the batch and another dimension")
    names: tuple
    spec: PartitionSpec
    path: str


@dataclasses.dataclass(frozen=True)
class SpmdWithoutMesh(Failure, rule="WSC-7"):
    template = ("vmap's spmd_axis_name {names} needs a mesh to split the batch "
                "of {path} over, but its constraint {sharding} is not a "
                "NamedSharding and there is no context mesh")
    hint = "Constrain with a NamedSharding, or run under jax.set_mesh(mesh)."
    names: tuple
    sharding: Any
    path: str


@dataclasses.dataclass(frozen=True)
class SpmdOverAbstractContext(SpmdWithoutMesh, error=AttributeError):
    template = ("vmap's spmd_axis_name {names} splits the batch of {path} over "
                "the context mesh, but its constraint {sharding} is not a "
                "NamedSharding: JAX then asks the abstract context mesh for an "
                "attribute it lacks")
    hint = "Constrain with a NamedSharding."


def _check_batching(constraint: Any, batch_dim: Any, spmd_axis_name: Any
                    ) -> tuple[Constraint, int, tuple[str, ...] | None]:
    """WSC-0 for batch_constraint: a Constraint that left an equation, a batch dimension
    ``0 .. rank`` and an axis name, a tuple of them, or None."""
    check_constraint_call(isinstance(constraint, Constraint) and constraint.equation,
                          "the constraint to batch", "a Constraint that left an equation",
                          constraint)
    rank = len(constraint.shape)
    check_constraint_call(type(batch_dim) is int and 0 <= batch_dim <= rank,
                          "the batch dimension", f"an int in 0 .. {rank}", batch_dim)
    names = (spmd_axis_name,) if isinstance(spmd_axis_name, str) else spmd_axis_name
    check_constraint_call(names is None or (type(names) is tuple and 0 < len(names) <= 16 and
                                            all(isinstance(n, str) for n in names)),
                          "spmd_axis_name", "None, an axis name or a tuple of them",
                          spmd_axis_name)
    return constraint, batch_dim, names


@dataclasses.dataclass(frozen=True)
class TiledGspmdNotBatched(Failure, rule="WSC-7", error=KeyError):
    template = ("the constraint on {path} is {sharding}, a split GSPMDSharding; "
                "JAX cannot batch it (its batching looks the type up in a table "
                "of NamedSharding and SingleDeviceSharding only)")
    hint = "Constrain with a NamedSharding."
    sharding: Any
    path: str


@dataclasses.dataclass(frozen=True)
class BatchMovedOffContext(Failure, rule="WSC-7"):
    template = ("the batched constraint on {path} is over another mesh than the "
                "context mesh {context}, which has Explicit axes: vmap moves "
                "the batch dimension to the front with a transpose, whose "
                "value's type must be on the context mesh ({sharding})")
    hint = ("Build the constraint on the context mesh (a bare PartitionSpec), "
            "or vmap with in_axes=0.")
    path: str
    sharding: Any
    context: Any


def _moved_off_context(c: Constraint, dim: int) -> bool:
    """Whether vmap's transpose of the batched value meets a context mesh with some (not
    only) Explicit axes while the value's type is on another mesh."""
    mesh, s = c.context_mesh, c.sharding
    if dim == 0 or mesh is None or not isinstance(s, NamedSharding):
        return False
    types = set(mesh.axis_types)
    return AxisType.Explicit in types and types != {AxisType.Explicit} and \
        s.mesh.abstract != mesh.abstract


def _inserted(entries: tuple, dim: int, entry: Any) -> tuple:
    """``entries`` padded with None up to ``dim`` and ``entry`` put at ``dim``."""
    padded = tuple(entries) + (None,) * max(0, dim - len(entries))
    return padded[:dim] + (entry,) + padded[dim:]


def _without_unit_axes(sharding: NamedSharding) -> tuple:
    """The spec as JAX reads it back from the lowered sharding: size-1 axes and
    UNCONSTRAINED gone."""
    sizes = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_sizes))
    out = []
    for entry in sharding.spec:
        names = tuple(a for a in ((entry,) if isinstance(entry, str) else
                                  entry if isinstance(entry, tuple) else ()) if sizes[a] != 1)
        out.append(None if not names else names[0] if len(names) == 1 else names)
    return tuple(out)


def _batched_sharding(c: Constraint, dim: int, names: tuple[str, ...] | None) -> Any:
    """The constraint's sharding with the batch dimension ``dim`` inserted (before the
    UNCONSTRAINED dimensions are marked)."""
    s = c.sharding
    batch = UNCONSTRAINED if names is None else names
    if names is None and is_fully_replicated(s):
        return s  # kept as it is: its entries do not move (JAX's shortcut)
    if isinstance(s, NamedSharding) and not s.is_concrete:
        return NamedSharding(s.mesh, PartitionSpec(*_inserted(tuple(s.spec), dim, batch)))
    if isinstance(s, NamedSharding):
        entries = _without_unit_axes(s)
        return NamedSharding(s.mesh, PartitionSpec(*_inserted(entries, dim, batch)),
                             memory_kind=s.memory_kind)
    # JAX reads a tiled GSPMDSharding back through a table that has no entry for its type.
    require(names is not None, lambda: TiledGspmdNotBatched(s, c.path))
    # JAX asks the context mesh for the axes; an abstract one lacks what it asks for.
    raise reject(SpmdWithoutMesh(names, s, c.path) if c.context_mesh is None
                 else SpmdOverAbstractContext(names, s, c.path))


@rule("WSC-7", mirrors="jax._src.pjit._sharding_constraint_batcher; "
                       "jax._src.pjit._pjit_batcher_for_sharding")
def batch_constraint(constraint: Constraint, batch_dim: int,
                     spmd_axis_name: str | tuple[str, ...] | None = None) -> Constraint:
    """Under vmap a constraint gains the batch dimension at ``batch_dim``: UNCONSTRAINED, or split over ``spmd_axis_name`` (which the spec may not name); the dimensions left UNCONSTRAINED move past it.

    Without spmd_axis_name a replicated sharding is kept as it is, its entries unmoved,
    and the batch position marked UNCONSTRAINED; any other sharding gains an unsplit batch
    dimension, which is then marked UNCONSTRAINED. With spmd_axis_name a NamedSharding gains
    the batch dimension split over those axes; another sharding is refused (ValueError
    without a context mesh, AttributeError with one). Under a context mesh with some but not
    only Explicit axes, a batch dimension other than 0 is refused when the NamedSharding is
    over another mesh (vmap's transpose that moves it back to the front must be on the
    context mesh). A NamedSharding over a concrete mesh
    is read back from its lowered form first: size-1 mesh axes drop out of its spec. A
    split GSPMDSharding is refused without spmd_axis_name too (KeyError).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> [c] = with_sharding_constraint(Arg.numpy((8, 8)), NamedSharding(mesh, P("x")))
    >>> b = batch_constraint(c, 1)
    >>> b.sharding.spec, sorted(b.unconstrained_dims)
    (P('x', UNCONSTRAINED, None), [1])
    >>> batch_constraint(c, 0, "y").sharding.spec
    P('y', 'x')
    >>> batch_constraint(c, 0, "x")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-7] at x: vmap's spmd_axis_name ('x',) also appears in the with_sharding_constraint spec P('x') of x; a mesh axis cannot split both the batch and another dimension
    """
    c, dim, names = _check_batching(constraint, batch_dim, spmd_axis_name)
    s = c.sharding
    with located(c.path):
        if names is not None and isinstance(s, NamedSharding):
            clash = set(names) & set(_axes_named(s.spec))
            require(not clash, lambda: SpmdAxisInConstraint(names, s.spec, c.path))
        require(not _moved_off_context(c, dim), lambda: BatchMovedOffContext(
            c.path, s, c.context_mesh))
        batched = _batched_sharding(c, dim, names)
        loose = {u + (dim <= u) for u in c.unconstrained_dims} | (set() if names else {dim})
        if loose and isinstance(batched, NamedSharding):
            rank = len(c.shape) + 1
            entries = list(batched.spec) + [None] * (rank - len(batched.spec))
            for u in loose:
                entries[u] = UNCONSTRAINED
            batched = NamedSharding(batched.mesh, PartitionSpec(*entries),
                                    memory_kind=batched.memory_kind)
    return dataclasses.replace(c, sharding=batched, unconstrained_dims=frozenset(loose))


# --------------------------------------------------------------------------- under jit

def lower_constraints(constraints: Any) -> tuple[int, ...]:
    """The device ids a jit of the constrained function runs on: the constraints' shardings
    take part in the program's one device assignment (DA-1, DA-2, with the context mesh's
    devices when one is set) and reach the compiler as any sharding does (EXE-3, EXE-4).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> found = with_sharding_constraint((Arg.numpy((8,)), Arg.numpy((8,))),
    ...                                  (NamedSharding(mesh, P("x")), SingleDeviceSharding(0)))
    >>> lower_constraints(found)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [DA-1] at x[1]: jit needs one device assignment for the whole program, but the constraint on x[0] is on devices [0, 1, 2, 3, 4, 5, 6, 7] and the constraint on x[1] is on devices [0]. Put both on the same devices in the same order (jax.device_put), or build both shardings from one mesh.
    """
    check_constraint_call(isinstance(constraints, (list, tuple)) and len(constraints) <= 10_000
                          and all(isinstance(c, Constraint) for c in constraints),
                          "the constraints", "a list of Constraint values", constraints)
    kept = [c for c in constraints if c.equation]
    contexts = {c.context_mesh for c in constraints}
    check_constraint_call(len(contexts) <= 1, "the constraints' context meshes",
                          "one context mesh for the whole function", tuple(contexts))
    context = next(iter(contexts), None)
    sources = [Source(c.sharding, f"constraint on {c.path}", c.path) for c in kept]
    devices, _ = device_assignment(sources, context, 0)
    for c in kept:
        with located(c.path):
            check_tile_count(c.sharding)
            check_constraint_lowers(c.sharding, c.path)
    return devices.id_tuple() if devices is not None else ()


@dataclasses.dataclass(frozen=True)
class GspmdConstraintNotLowered(Failure, rule="WSC-8", error=TypeError):
    template = ("the constraint on {path} is {sharding}, which JAX cannot write "
                "as a Shardy sharding: only a replicated GSPMDSharding or one "
                "tiled in an iota order lowers")
    hint = ("Constrain with a NamedSharding, or write the tiles as an iota order "
            "(e.g. {{devices=[4,1]<=[4]}}).")
    sharding: Any
    path: str


@dataclasses.dataclass(frozen=True)
class GspmdConstraintAborts(GspmdConstraintNotLowered, error=RuntimeError,
                            jax_error="abort"):  # not an exception: the process ends
    template = ("the constraint on {path} is {sharding}, a tiling of one device; "
                "lowering it, XLA fails a check and aborts the process (JAX "
                "raises nothing)")
    hint = "Constrain with SingleDeviceSharding or a replicated sharding."


@rule("WSC-8", mirrors="GSPMDSharding._to_sdy_sharding (sharding_constraint lowering)")
def check_constraint_lowers(sharding: Any, path: str = "x") -> None:
    """Under jit a GSPMDSharding constraint lowers only when it is replicated or tiled in an iota order; a maximal, manual, unreduced or device-by-device tiling is refused (TypeError).

    A tiling of a single device is refused too: XLA aborts the process lowering it.

    >>> check_constraint_lowers(GSPMDSharding([0, 1], "{devices=[2]<=[2]}"))
    >>> check_constraint_lowers(GSPMDSharding([0], "{maximal device=0}"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [WSC-8]: the constraint on x is GSPMDSharding({maximal device=0}, devices=DeviceList(Iota[1])), which JAX cannot write as a Shardy sharding: only a replicated GSPMDSharding or one tiled in an iota order lowers. Constrain with a NamedSharding, or write the tiles as an iota order (e.g. {devices=[4,1]<=[4]}).
    """
    if not isinstance(sharding, GSPMDSharding):
        return
    hlo = sharding.hlo
    # XLA does not raise for a tiling of one device: a failed check ends the process.
    require(not (isinstance(hlo, Tiled) and hlo.num_devices == 1),
            lambda: GspmdConstraintAborts(sharding, path))
    lowers = isinstance(hlo, Replicated) or (isinstance(hlo, Tiled)
                                             and isinstance(hlo.assignment, Iota))
    require(lowers, lambda: GspmdConstraintNotLowered(sharding, path))


# --------------------------------------------------------------------------- WSC-9

def _splits_evenly(sharding: Any, shape: tuple[int, ...]) -> bool:
    try:
        shard_shape(sharding, shape)
    except Rejection:
        return False
    return True


@rule("WSC-9", mirrors="jax._src.interpreters.pxla (the result's sharding read back from "
                       "the compiled executable)")
def constrained_result(constraint: Constraint) -> Any:
    """A jitted function that returns a constrained value returns it placed as the constraint says, except that an uneven dimension keeps only its leading axes that divide it, UNCONSTRAINED ones come back unsplit and empty values replicated.

    The result of a NamedSharding over the context mesh's abstract mesh is over the context
    mesh itself. Returns None where the spec does not say (a GSPMDSharding or
    SingleDeviceSharding that does not split evenly, or a constraint that left no equation).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> [c] = with_sharding_constraint(Arg.numpy((6, 8)), NamedSharding(mesh, P("y", "x")))
    >>> constrained_result(c)
    NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, 'x'))
    """
    check_constraint_call(isinstance(constraint, Constraint), "the constraint",
                          "a Constraint", constraint)
    c, s = constraint, constraint.sharding
    if not c.equation:
        return None
    if not isinstance(s, NamedSharding):
        return s if _splits_evenly(s, c.shape) and 0 not in c.shape else None
    mesh = s.mesh if s.is_concrete else c.context_mesh
    if 0 in c.shape:
        return NamedSharding(mesh, PartitionSpec(), memory_kind=s.memory_kind)
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    entries = []
    for dim, entry in enumerate(s.spec):
        if entry is UNCONSTRAINED or entry is None or dim >= len(c.shape):
            entries.append(None)
            continue
        # The leading axes of the entry that still divide the dimension evenly stay.
        names = (entry,) if isinstance(entry, str) else entry
        kept: tuple[str, ...] = ()
        for name in names:
            if c.shape[dim] % (math.prod(sizes[a] for a in kept) * sizes[name]):
                break
            kept += (name,)
        entries.append(kept or None)
    return NamedSharding(mesh, PartitionSpec(*entries), memory_kind=s.memory_kind)


# --------------------------------------------------------------------------- WSC-10

@dataclasses.dataclass(frozen=True)
class SplitAxesNotInMesh(Failure, rule="WSC-10"):
    template = ("the value {path} constrains is split over the Explicit axes {split!r}; the "
                "constraint's result keeps that split over its mesh {mesh!r}, which has "
                "no axes {missing}")
    hint = "Constrain over the mesh the value is split over, or reshard it first."
    path: str
    split: Any
    mesh: Any
    missing: tuple


@dataclasses.dataclass(frozen=True)
class SplitDoesNotDivide(Failure, rule="WSC-10"):
    template = ("the value {path} constrains is split over the Explicit axes {split!r}; the "
                "constraint's result keeps that split over its mesh {mesh!r}, where "
                "dimension {dim} of size {size} does not split {ways} ways")
    hint = "Constrain over the mesh the value is split over, or reshard it first."
    path: str
    split: Any
    mesh: Any
    dim: int
    size: int
    ways: int


@rule("WSC-10", mirrors="jax._src.pjit._sharding_constraint_abstract_eval (the operand's "
                        "type moved onto the constraint's mesh); jax._src.core."
                        "_check_divisibility")
def check_split_kept(sharding: Any, split: PartitionSpec | None, path: str = "x",
                     shape: tuple[int, ...] | None = None) -> None:
    """A NamedSharding constraint keeps its operand's split over Explicit axes, moved onto the constraint's mesh: that mesh must have every axis the split names, and divide the value's ``shape`` as the split says.

    >>> auto = Mesh.iota((4,), ("x",))
    >>> check_split_kept(NamedSharding(auto, P()), P("x"), "x", (8,))
    >>> check_split_kept(NamedSharding(auto, P()), P("y", "x"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-10]: the value x constrains is split over the Explicit axes P('y', 'x'); the constraint's result keeps that split over its mesh Mesh({'x': 4}), which has no axes ('y',). Constrain over the mesh the value is split over, or reshard it first.
    >>> check_split_kept(NamedSharding(auto, P()), P("x"), "x", (6,))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-10]: the value x constrains is split over the Explicit axes P('x'); the constraint's result keeps that split over its mesh Mesh({'x': 4}), where dimension 0 of size 6 does not split 4 ways. Constrain over the mesh the value is split over, or reshard it first.
    """
    check_constraint_call(split is None or isinstance(split, PartitionSpec), "split",
                          "None or a PartitionSpec", split)
    check_constraint_call(shape is None or (type(shape) is tuple and all(
        type(n) is int and n >= 0 for n in shape)), "shape", "None or a shape", shape)
    if split is None or not isinstance(sharding, NamedSharding):
        return
    names = set(sharding.mesh.axis_names)
    missing = tuple(dict.fromkeys(a for a in (*split.axes(), *sorted(split.unreduced),
                                              *sorted(split.reduced)) if a not in names))
    require(not missing, lambda: SplitAxesNotInMesh(path, split, sharding.mesh, missing))
    sizes = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_sizes))
    for dim, (size, entry) in enumerate(zip(shape or (), split)):
        ways = math.prod(sizes[a] for a in ((entry,) if isinstance(entry, str)
                                            else entry or ()))
        require(size % ways == 0, lambda: SplitDoesNotDivide(path, split, sharding.mesh,
                                                             dim, size, ways))


# --------------------------------------------------------------------------- WSC-11

@dataclasses.dataclass(frozen=True)
class ReducedOperandNotLowered(Failure, rule="WSC-11"):
    template = ("the value {path} constrains is typed {split!r}, with unreduced or reduced "
                "axes; lowering the constraint reads that split entry by entry, which such "
                "a spec refuses")
    hint = "Constrain the value before it is reduced, or reshard it instead."
    path: str
    split: Any


@rule("WSC-11", mirrors="jax._src.pjit._sharding_constraint_hlo_lowering (the operand's "
                        "type read as a spec)")
def check_operand_not_reduced(split: PartitionSpec | None, path: str = "x") -> None:
    """A live NamedSharding constraint whose operand is typed with unreduced or reduced axes is refused when lowering (ValueError).

    >>> check_operand_not_reduced(P("x"))
    >>> check_operand_not_reduced(P("x", reduced={"y"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-11]: the value x constrains is typed P('x', reduced={'y'}), with unreduced or reduced axes; lowering the constraint reads that split entry by entry, which such a spec refuses. Constrain the value before it is reduced, or reshard it instead.
    """
    check_constraint_call(split is None or isinstance(split, PartitionSpec), "split",
                          "None or a PartitionSpec", split)
    require(split is None or not (split.unreduced or split.reduced),
            lambda: ReducedOperandNotLowered(path, split))


# --------------------------------------------------------------------------- WSC-12

@dataclasses.dataclass(frozen=True)
class MergedSpecRepeatsAxis(Failure, rule="WSC-12", error=Exception,
                            jax_error="DuplicateSpecError"):
    template = ("the constraint on {path} is lowered with its operand's split {split!r} "
                "merged into its spec {spec!r}, which gives {merged!r}: mesh axis {axis!r} "
                "would split two dimensions")
    hint = ("Do not name an axis the value is split over: under vmap, pick a spmd_axis_name "
            "the value's type does not split")
    path: str
    split: Any
    spec: Any
    merged: Any
    axis: str


@rule("WSC-12", mirrors="jax._src.pjit._sharding_constraint_hlo_lowering (the operand's "
                        "split merged into the spec); jax._src.named_sharding."
                        "_check_unique_resources")
def merged_constraint_spec(sharding: Any, split: PartitionSpec | None, path: str = "x"
                           ) -> PartitionSpec | None:
    """A NamedSharding constraint on a value typed split over Explicit axes is lowered with that split merged in, before its own axes dimension by dimension; the merged spec names each mesh axis once.

    JAX refuses a repeated axis when the program is lowered (DuplicateSpecError). A
    constraint the user writes names Auto axes only (WSC-5), so only one that vmap's
    batching rule bound over an Explicit spmd axis can repeat one. The answer is the
    merged spec (None: nothing merged, the operand unsplit).

    >>> explicit = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit, AxisType.Explicit))
    >>> merged_constraint_spec(NamedSharding(explicit, P("x")), P(None, "y"))
    P('x', 'y')
    >>> merged_constraint_spec(NamedSharding(explicit, P("x")), P(None, "x"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [WSC-12]: the constraint on x is lowered with its operand's split P(None, 'x') merged into its spec P('x'), which gives P('x', 'x'): mesh axis 'x' would split two dimensions. Do not name an axis the value is split over: under vmap, pick a spmd_axis_name the value's type does not split.
    """
    check_constraint_call(split is None or isinstance(split, PartitionSpec), "split",
                          "None or a PartitionSpec", split)
    if not isinstance(sharding, NamedSharding) or split is None or not any(
            entry is not None for entry in split.partitions):
        return None
    own = tuple(sharding.spec.partitions)
    width = max(len(own), len(split.partitions))
    own += (None,) * (width - len(own))
    typed = tuple(split.partitions) + (None,) * (width - len(split.partitions))
    merged = []
    for user, aval in zip(own, typed):
        if aval is None:
            merged.append(user)
            continue
        axes = aval if isinstance(aval, tuple) else (aval,)
        if user is None or user is UNCONSTRAINED:
            merged.append(axes if len(axes) > 1 else axes[0])
        else:
            merged.append(axes + (user if isinstance(user, tuple) else (user,)))
    answer = P(*merged)
    seen: set[str] = set()
    for entry in merged:
        for axis in (entry if isinstance(entry, tuple) else (entry,)):
            if isinstance(axis, str):
                require(axis not in seen, lambda axis=axis: MergedSpecRepeatsAxis(
                    path, split, sharding.spec, answer, axis))
                seen.add(axis)
    return answer
