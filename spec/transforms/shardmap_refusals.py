"""What JAX refuses inside a shard_map's body beyond a collective's axes and shapes (SMAP-26 to SMAP-28).

* SMAP-26 — a collective over *axis index groups* (``axis_index_groups=`` on ``psum``,
  ``pmean``, ``pmax``, ``pmin``, ``all_gather``, ``psum_scatter``, ``all_to_all``): the
  groups cover the positions along its axes once each; under ``check_vma`` a ``psum``
  (so a ``pmean``) and an ``all_gather`` to other than varying values over groups are not
  implemented; the others reduce or move data within each group, a group's length their
  size (:func:`group_size`), and are lowered only where every group is a list of positions
  along the axes, all of them together, and an ``all_gather``'s groups are of one length;
* SMAP-27 — an ``all_gather`` to reduced values (``to='reduced'``) takes an operand that
  varies along an axis it gathers over (without ``check_vma`` nothing varies, so it is
  always refused);
* SMAP-28 — a constraint (``with_sharding_constraint``) or a ``reshard`` inside the body
  given a NamedSharding whose mesh types an axis its operand varies along as other than
  Manual (the user's concrete mesh, whose axes keep their types outside) is refused:
  JAX types the result over that mesh, which a manual axis must be.

The groups as JAX lowers them (:func:`grouped_replica_groups`): each of SMAP-14's groups,
read at the positions each index group lists.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, require, rule
from ..core.shardings import NamedSharding
from ..core.values import AbstractMesh, AxisType, Mesh  # noqa: F401 (the examples)

__all__ = ["check_index_groups", "group_size", "grouped_replica_groups",
           "check_lowered_index_groups", "check_gather_to_reduced", "check_placement_mesh"]


# --------------------------------------------------------------------------- SMAP-26

@dataclasses.dataclass(frozen=True)
class GroupsDoNotCover(Failure, rule="SMAP-26"):
    template = ("{primitive} over {axes} is given axis_index_groups {groups}, which do not "
                "cover the indices 0 to {last} exactly once (axis_index_groups must cover "
                "all indices exactly once)")
    primitive: str
    axes: tuple
    groups: tuple
    last: int


@dataclasses.dataclass(frozen=True)
class GroupsNotImplemented(Failure, rule="SMAP-26", error=NotImplementedError):
    template = ("{primitive} over {axes} is given axis_index_groups {groups}: under "
                "check_vma, JAX implements no {primitive} over index groups")
    hint = ("Pass check_vma=False to the shard_map, or sum over the whole axis (a "
            "sub-mesh axis for each group)")
    primitive: str
    axes: tuple
    groups: tuple


def _groups_tuple(groups: Any) -> tuple:
    return tuple(tuple(g) for g in groups)


@rule("SMAP-26", mirrors="jax._src.lax.parallel: _validate_reduce_axis_index_groups, "
                         "bind_psum_invariant, _all_gather_is_async; _replica_groups "
                         "and the compiler's verifier when lowered")
def check_index_groups(primitive: str, axes: tuple, groups: Any, check_vma: bool,
                       gathers_to: str = "varying") -> int:
    """A collective over axis index groups takes groups covering the indices below their total length once each (ValueError), and under check_vma is no psum (NotImplementedError); an all_gather over groups gathers to varying values (NotImplementedError).

    When lowered (:func:`check_lowered_index_groups`), its groups list positions along
    its axes (IndexError), all of them, and an all_gather's are of one length (ValueError).
    ``primitive`` is the user's function (``psum``, ``pmax``, ``all_gather``, ...);
    ``gathers_to`` an all_gather's ``to``. Returns the groups' size, the first group's
    length (:func:`group_size`).

    >>> check_index_groups("pmax", ("y",), [[0, 1], [2, 3]], True)
    2
    >>> check_index_groups("pmax", ("y",), [[0, 1], [2, 2]], False)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-26]: pmax over ('y',) is given axis_index_groups ((0, 1), (2, 2)), which do not cover the indices 0 to 3 exactly once (axis_index_groups must cover all indices exactly once)
    >>> check_index_groups("psum", ("y",), [[0, 1], [2, 3]], True)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNotImplementedError: [SMAP-26]: psum over ('y',) is given axis_index_groups ((0, 1), (2, 3)): under check_vma, JAX implements no psum over index groups. ...
    """
    groups = _groups_tuple(groups)
    # an all_gather to other than varying values refuses groups before it reads them
    require(gathers_to == "varying", lambda: GroupsNotImplemented(
        f"all_gather to {gathers_to!r}", tuple(axes), groups))
    # the groups cover 0 .. n-1, n their total length, each index once
    total = sum(len(g) for g in groups)
    listed = [i for g in groups for i in g]
    require(sorted(listed) == list(range(total)), lambda: GroupsDoNotCover(
        primitive, tuple(axes), groups, total - 1))
    # under check_vma, psum (psum_invariant, so pmean) is not implemented over groups
    require(not check_vma or primitive not in ("psum", "psum_invariant"),
            lambda: GroupsNotImplemented(primitive, tuple(axes), groups))
    return group_size(groups)


def group_size(groups: Any) -> int:
    """The size of a collective over index groups: its first group's length (what JAX
    gathers, scatters and exchanges over, and divides a pmean by)."""
    return len(_groups_tuple(groups)[0]) if groups else 0


@dataclasses.dataclass(frozen=True)
class GroupIndexOutOfRange(Failure, rule="SMAP-26", error=IndexError):
    template = ("{primitive} over {axes} is given axis_index_groups {groups}, whose index "
                "{index} is not a position along its axes ({size} devices): tuple index "
                "out of range when lowered")
    primitive: str
    axes: tuple
    groups: tuple
    index: int
    size: int


@dataclasses.dataclass(frozen=True)
class GroupsLeaveOut(Failure, rule="SMAP-26"):
    template = ("{primitive} over {axes} is given axis_index_groups {groups}, which leave "
                "out position {index} of its axes ({size} devices): the compiler's "
                "verifier refuses a replica id not seen in replica groups")
    primitive: str
    axes: tuple
    groups: tuple
    index: int
    size: int


@dataclasses.dataclass(frozen=True)
class GatherGroupsUneven(Failure, rule="SMAP-26"):
    template = ("all_gather over {axes} is given axis_index_groups {groups} of different "
                "lengths: JAX pads the shorter with -1, which the compiler's verifier "
                "refuses (invalid replica id -1)")
    hint = "Gather over groups of one length"
    axes: tuple
    groups: tuple


def check_lowered_index_groups(primitive: str, axes: tuple, groups: Any, size: int) -> None:
    """SMAP-26 as met when lowered: every index a position along the
    axes (``size`` devices: IndexError), every position listed (ValueError), an
    all_gather's groups of one length (ValueError)."""
    groups = _groups_tuple(groups)
    listed = [i for g in groups for i in g]
    for index in listed:
        require(index < size, lambda: GroupIndexOutOfRange(
            primitive, tuple(axes), groups, index, size))
    for index in range(size):
        require(index in listed, lambda: GroupsLeaveOut(
            primitive, tuple(axes), groups, index, size))
    require(primitive != "all_gather" or len({len(g) for g in groups}) <= 1,
            lambda: GatherGroupsUneven(tuple(axes), groups))


def grouped_replica_groups(groups: tuple, index_groups: Any) -> tuple:
    """The replica groups of a collective over index groups, as JAX lowers them: each of
    SMAP-14's groups (``groups``) read at the positions each index group lists.

    >>> grouped_replica_groups(((0, 1, 2, 3), (4, 5, 6, 7)), [[0, 3], [2, 1]])
    ((0, 3), (2, 1), (4, 7), (6, 5))
    """
    return tuple(tuple(group[i] for i in index_group) for group in groups
                 for index_group in _groups_tuple(index_groups))


# --------------------------------------------------------------------------- SMAP-27

@dataclasses.dataclass(frozen=True)
class GatherToReducedNotVarying(Failure, rule="SMAP-27"):
    template = ("all_gather over {axes} to reduced values takes an operand varying along "
                "{varying}; all_gather_reduced is a Varying -> Reduced collective, so its "
                "operand must vary along an axis it gathers over")
    hint = ("Gather to='varying' (the default), or, under check_vma, a value varying "
            "along {axes}")
    axes: tuple
    varying: tuple


@rule("SMAP-27", mirrors="jax._src.lax.parallel._all_gather_reduced_effectful_abstract_eval")
def check_gather_to_reduced(axes: tuple, varying: frozenset) -> None:
    """An all_gather to reduced values (``to='reduced'``) takes an operand varying along an axis it gathers over (ValueError; without check_vma nothing varies, so it is always refused).

    ``varying`` is the operand's varying axes (empty without check_vma).

    >>> check_gather_to_reduced(("y",), frozenset({"x", "y"}))
    >>> check_gather_to_reduced(("y",), frozenset({"x"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-27]: all_gather over ('y',) to reduced values takes an operand varying along ('x',); all_gather_reduced is a Varying -> Reduced collective, so its operand must vary along an axis it gathers over. ...
    """
    # the operand varies (JAX's first check), along one of the axes at least (its second)
    require(bool(set(varying) & set(axes)), lambda: GatherToReducedNotVarying(
        tuple(axes), tuple(sorted(varying))))


# --------------------------------------------------------------------------- SMAP-28

@dataclasses.dataclass(frozen=True)
class PlacedOverUnmanualAxis(Failure, rule="SMAP-28"):
    template = ("the {kind} at {path} places a value varying along the manual axis "
                "{axis!r} on {sharding}, whose mesh types {axis!r} {axis_type}: Axes "
                "mentioned in `manual_axis_type` field of ShapedArray should be of type "
                "`Manual`")
    hint = ("Inside a shard_map, constrain with a bare PartitionSpec (read over the "
            "body's mesh, its manual axes Manual) or a NamedSharding over "
            "jax.sharding.get_abstract_mesh()")
    kind: str
    path: str
    axis: str
    sharding: Any
    axis_type: str


@rule("SMAP-28", mirrors="jax._src.core.get_mat (met from "
                         "_sharding_constraint_abstract_eval and _reshard_abstract_eval)")
def check_placement_mesh(kind: str, sharding: Any, varying: frozenset, path: str) -> None:
    """A constraint or a reshard inside a shard_map's body given a NamedSharding whose mesh types an axis its operand varies along as other than Manual is refused (ValueError).

    The user's concrete mesh keeps its axes' types outside the body; an axis its mesh
    lacks is not checked.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> inner = AbstractMesh((2, 4), ("x", "y"), (AxisType.Manual, AxisType.Auto))
    >>> from shardlaw.spec.core.values import PartitionSpec as P
    >>> check_placement_mesh("sharding_constraint", NamedSharding(inner, P()), {"x"}, "b")
    >>> check_placement_mesh("sharding_constraint", NamedSharding(mesh, P()), {"x"}, "b")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-28]: the sharding_constraint at b places a value varying along the manual axis 'x' on NamedSharding(Mesh({'x': 2, 'y': 4}), P()), whose mesh types 'x' Auto: Axes mentioned in `manual_axis_type` field of ShapedArray should be of type `Manual`. ...
    """
    if not isinstance(sharding, NamedSharding):
        return
    types = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_types))
    for axis in sorted(varying):
        require(axis not in types or types[axis] is AxisType.Manual,
                lambda: PlacedOverUnmanualAxis(kind, path, axis, sharding,
                                               types[axis].name))
