"""HLO shardings: the compiler's own description of a placement, and its text form.

An HLO sharding says, for each *tile* of an array, which position of a device list holds
it. It is one of: replicated (every device holds everything), maximal (one device holds
everything), manual, unreduced, or tiled. A tiled sharding has a tile assignment: an array
of device-list positions whose first dimensions cut the array's dimensions into equal
tiles and whose trailing *subgroup* dimensions (replicated, manual, unreduced) hold copies.

The text form is the one ``str(HloSharding)`` prints in jaxlib 0.10.2::

    {replicated}   {manual}   {unreduced}   {maximal device=3}
    {devices=[2,4]<=[8]}                       (iota tile assignment)
    {devices=[2,4]<=[4,2]T(1,0)}               (iota, reshaped and transposed)
    {devices=[2,2]0,2,1,3}                     (explicit tile assignment)
    {devices=[2,1,4]<=[8] last_tile_dim_replicate}
    {devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}

Values are kept canonical the way XLA keeps them (size-1 subgroups dropped, subgroups in
XLA's order, a lone replicated subgroup written ``last_tile_dim_replicate``, shardings
without data tiling collapsed), so structural equality is XLA's equality.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import operator
import re
from typing import Any, Iterable, Union

from .iota import (
    Iota, compose_digits, iota_digits, iota_from_digits, split_digits, unravel,
)
from .dims import LIMIT, check_count, check_dims, check_perm, is_int, suffix_products
from .rules import Failure, bounded_text, reject, require, rule

__all__ = [
    "SubgroupType", "HloSharding", "Replicated", "Maximal", "Manual", "Unreduced", "Tiled",
    "parse_hlo", "hlo_text", "iota_tile", "tiled",
]


class SubgroupType(enum.IntEnum):
    """The kinds of trailing tile dimensions (xla OpSharding.Type numbering)."""

    REPLICATED = 0
    MANUAL = 4
    UNREDUCED = 6

    @property
    def word(self) -> str:
        return self.name.lower()


# XLA orders subgroup dimensions manual, unreduced, then replicated.
_SUBGROUP_ORDER = {SubgroupType.MANUAL: 0, SubgroupType.UNREDUCED: 1, SubgroupType.REPLICATED: 2}


@dataclasses.dataclass(frozen=True)
class MalformedHlo(Failure, rule="HLO-2"):
    template = "cannot read HLO sharding {text!r}: {problem}"
    text: str
    problem: str


@dataclasses.dataclass(frozen=True)
class NotHloInput(MalformedHlo, error=TypeError):
    # XLA's bindings (HloSharding.from_string, HloSharding.__repr__) refuse an argument of
    # the wrong type with TypeError, before reading anything.
    template = "{problem}, got {text!r} ({kind})"
    kind: str = ""


@dataclasses.dataclass(frozen=True)
class BadTileAssignment(Failure, rule="HLO-1"):
    template = "tile assignment of shape {dims} is invalid: {problem}"
    dims: tuple
    problem: str


class HloSharding:
    """Base of the HLO sharding values."""

    __slots__ = ()

    def text(self) -> str:
        return hlo_text(self)

    def __str__(self) -> str:
        return hlo_text(self)

    @property
    def num_devices(self) -> int:
        """How many device-list positions the tile assignment names (XLA's ``num_devices()``:
        0 for replicated, manual and unreduced, 1 for maximal)."""
        return 0


@dataclasses.dataclass(frozen=True)
class Replicated(HloSharding):
    """Every device holds the whole array."""


@dataclasses.dataclass(frozen=True)
class Manual(HloSharding):
    """The array is managed by the user's program on every device (shard_map)."""


@dataclasses.dataclass(frozen=True)
class Unreduced(HloSharding):
    """Every device holds a partial value of the whole array, still to be summed."""


@dataclasses.dataclass(frozen=True)
class Maximal(HloSharding):
    """One device (a position in the device list) holds the whole array."""

    device: int

    def __post_init__(self) -> None:
        (device,) = check_dims((self.device,), what="a maximal sharding's device position")
        object.__setattr__(self, "device", device)

    @property
    def num_devices(self) -> int:
        return 1


Assignment = Union[Iota, tuple[int, ...]]

_PLAIN = {SubgroupType.REPLICATED: Replicated, SubgroupType.MANUAL: Manual,
          SubgroupType.UNREDUCED: Unreduced}


@dataclasses.dataclass(frozen=True, eq=False, init=False)
class Tiled(HloSharding):
    """A tile assignment of device-list positions; trailing ``subgroups`` dims hold copies.

    Build values with :func:`tiled`, which canonicalizes as XLA does; this constructor only
    checks that the parts fit together.
    """

    dims: tuple[int, ...]
    assignment: Assignment
    subgroups: tuple[SubgroupType, ...]

    def __init__(self, dims: tuple[int, ...], assignment: Assignment,
                 subgroups: tuple[SubgroupType, ...] = ()) -> None:
        dims = check_dims(dims, what="tile assignment dimensions")
        check_count(dims, "tile assignment dimensions")
        # HLO-1: a tile assignment cuts every dimension into at least one tile.
        require(len(dims) > 0 and all(d >= 1 for d in dims), lambda: BadTileAssignment(
            dims, "every tile assignment dimension is at least 1"))
        if not isinstance(assignment, Iota):
            assignment = check_dims(assignment, what="tile assignment entries")
        subgroups = _subgroup_kinds(subgroups, dims)
        self._set(dims, assignment, subgroups)

    @classmethod
    def trusted(cls, dims: tuple[int, ...], assignment: Assignment,
                subgroups: tuple[SubgroupType, ...]) -> "Tiled":
        """A value from parts :func:`tiled` has already checked (no validation again)."""
        self = object.__new__(cls)
        self._set(dims, assignment, subgroups)
        return self

    def _set(self, dims: tuple[int, ...], assignment: Assignment,
             subgroups: tuple[SubgroupType, ...]) -> None:
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "assignment", assignment)
        object.__setattr__(self, "subgroups", subgroups)

    @property
    def data_rank(self) -> int:
        return len(self.dims) - len(self.subgroups)

    @property
    def tiles(self) -> tuple[int, ...]:
        """How many ways each data dimension is cut."""
        return self.dims[: self.data_rank]

    def subgroup_size(self, kind: SubgroupType) -> int:
        return math.prod(d for d, k in zip(self.dims[self.data_rank:], self.subgroups) if k == kind)

    @property
    def num_devices(self) -> int:
        return math.prod(self.dims)

    @property
    def replicate_on_last_tile_dim(self) -> bool:
        return self.subgroups == (SubgroupType.REPLICATED,)

    def position_at(self, tile: int) -> int:
        """The device-list position at flat index ``tile`` of the tile assignment."""
        return self.assignment[tile]

    def tile_of(self, position: int) -> int:
        """The flat index in the tile assignment that holds device-list ``position``."""
        if isinstance(self.assignment, Iota):
            return self.assignment.position_of(position)
        return _explicit_index(self.assignment)[position]

    def tile_coords(self, position: int) -> tuple[int, ...]:
        return unravel(self.tile_of(position), self.dims)

    def assignment_tuple(self) -> tuple[int, ...]:
        a = self.assignment
        return a.to_tuple() if isinstance(a, Iota) else a

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tiled):
            return NotImplemented if not isinstance(other, HloSharding) else False
        if self.dims != other.dims or self.subgroups != other.subgroups:
            return False
        a, b = self.assignment, other.assignment
        if isinstance(a, Iota) and isinstance(b, Iota):
            return a == b
        return self.assignment_tuple() == other.assignment_tuple()

    def __hash__(self) -> int:
        return hash((self.dims, self.subgroups))

    def __repr__(self) -> str:
        return f"Tiled({hlo_text(self)})"


_INDEX_CACHE: dict[tuple[int, ...], dict[int, int]] = {}


def _explicit_index(values: tuple[int, ...]) -> dict[int, int]:
    index = _INDEX_CACHE.get(values)
    if index is None:
        index = {v: i for i, v in enumerate(values)}
        if len(_INDEX_CACHE) > 256:
            _INDEX_CACHE.clear()
        _INDEX_CACHE[values] = index
    return index


# --------------------------------------------------------------------------- building

def _subgroup_kinds(subgroups: Any, dims: tuple[int, ...]) -> tuple[SubgroupType, ...]:
    """HLO-1: subgroup kinds are SubgroupType values (or their numbers), no more than dims."""
    if isinstance(subgroups, (str, bytes)) or not isinstance(subgroups, Iterable):
        raise reject(BadTileAssignment(dims, f"subgroups must be a sequence of SubgroupType, "
                                             f"got {_cut(subgroups)}"))
    kinds = []
    for s in subgroups:
        if isinstance(s, SubgroupType):
            kinds.append(s)
            continue
        number = _number(s)
        require(number in SubgroupType._value2member_map_,  # type: ignore[attr-defined]
                lambda s=s: BadTileAssignment(dims, f"a subgroup kind is one of "
                                                    f"{[k.name for k in SubgroupType]}, "
                                                    f"got {_cut(s)}"))
        kinds.append(SubgroupType(number))
    require(len(kinds) <= len(dims), lambda: BadTileAssignment(
        dims, f"{len(kinds)} subgroups for {len(dims)} dims"))
    return tuple(kinds)


def _number(value: Any) -> int | None:
    """The integer ``value`` stands for (None: not an integer, or one that fails to say)."""
    if not is_int(value) or isinstance(value, enum.Enum):
        return None
    try:
        return operator.index(value)
    except Exception:  # a type that claims to be an integer but is not one
        return None


def _cut(value: Any) -> str:
    return bounded_text(value, repr)


def _transpose_explicit(values: tuple[int, ...], dims: tuple[int, ...],
                        perm: tuple[int, ...]) -> tuple[int, ...]:
    new_dims = tuple(dims[p] for p in perm)
    out = []
    strides = suffix_products(dims)
    for flat in range(len(values)):
        c = unravel(flat, new_dims)
        out.append(values[sum(c[k] * strides[perm[k]] for k in range(len(perm)))])
    return tuple(out)


@rule("HLO-1", mirrors="xla::HloSharding::Subgroup / PartialTile / IotaTile (canonical forms)")
def tiled(dims: Any, assignment: Assignment | Any,
          subgroups: Any = ()) -> HloSharding:
    """A tile assignment is canonical: size-1 subgroups dropped, subgroups ordered manual, unreduced, replicated with equal kinds merged, each replicated group's devices in ascending order, and no data tiling collapses to replicated, manual or unreduced.

    >>> print(tiled((2, 4, 1), Iota.range(8), (SubgroupType.REPLICATED,)))
    {devices=[2,4]<=[8]}
    >>> print(tiled((1, 8), Iota.range(8), (SubgroupType.REPLICATED,)))
    {replicated}
    >>> print(tiled((2, 4), Iota((2, 4), (1, 0)), (SubgroupType.REPLICATED,)))
    {devices=[2,4]<=[2,2,2]T(1,0,2) last_tile_dim_replicate}
    """
    dims = check_dims(dims, what="tile assignment dimensions")
    subgroups = _subgroup_kinds(subgroups, dims)
    n = check_count(dims, "tile assignment dimensions")
    # A tile assignment cuts every dimension into at least one tile.
    require(len(dims) > 0 and all(d >= 1 for d in dims), lambda: BadTileAssignment(
        dims, "every tile assignment dimension is at least 1"))
    if not isinstance(assignment, Iota):
        assignment = check_dims(assignment, what="tile assignment entries")
        require(len(assignment) == n and sorted(assignment) == list(range(n)),
                lambda: BadTileAssignment(dims, f"entries must be each of 0..{n - 1} once, got "
                                                f"{len(assignment)} entries"))
    require(len(assignment) == n, lambda: BadTileAssignment(
        dims, f"it names {n} devices but the assignment holds {len(assignment)}"))
    return canonical_tiled(dims, assignment, subgroups)


def canonical_tiled(dims: tuple[int, ...], assignment: Assignment,
                    subgroups: tuple[SubgroupType, ...], *, groups_sorted: bool = False
                    ) -> HloSharding:
    """The canonical form of parts already checked by :func:`tiled` (the HLO-1 rule's body).

    ``groups_sorted`` tells that every replica group already lists its positions in
    ascending order (true of every NamedSharding, whose unused axes follow in mesh order).
    """
    if not subgroups and isinstance(assignment, Iota):
        return Tiled.trusted(dims, assignment, ())  # plain tiling: already canonical
    data_rank = len(dims) - len(subgroups)
    data = dims[:data_rank]
    no_data_tiling = all(d == 1 for d in data)
    groups = list(zip(dims[data_rank:], subgroups))
    # Order the subgroups as XLA does (manual, unreduced, replicated); reordering transposes
    # the assignment.
    order = sorted(range(len(groups)), key=lambda i: _SUBGROUP_ORDER[groups[i][1]])
    if order != list(range(len(groups))):
        full = data + tuple(d for d, _ in groups)
        perm = tuple(range(data_rank)) + tuple(data_rank + i for i in order)
        assignment = _transpose(assignment, full, perm)
        groups = [groups[i] for i in order]
    # Adjacent subgroups of one kind are one subgroup.
    merged: list[tuple[int, SubgroupType]] = []
    for d, kind in groups:
        if merged and merged[-1][1] == kind:
            merged[-1] = (merged[-1][0] * d, kind)
        else:
            merged.append((d, kind))
    # A lone subgroup without data tiling is the plain kind.
    if len(merged) == 1 and no_data_tiling:
        return _PLAIN[merged[0][1]]()
    # Drop subgroup dimensions of size 1: they hold no copy.
    merged = [(d, k) for d, k in merged if d != 1]
    kinds = tuple(k for _, k in merged)
    if kinds == (SubgroupType.MANUAL,) and no_data_tiling:
        return Manual()
    if kinds and kinds[-1] is SubgroupType.REPLICATED:
        if kinds == (SubgroupType.REPLICATED,) and no_data_tiling:
            return Replicated()
        if not groups_sorted:
            assignment = _sort_groups(assignment, merged[-1][0])
    return Tiled.trusted(data + tuple(d for d, _ in merged), assignment, kinds)


def _transpose(assignment: Assignment, dims: tuple[int, ...], perm: tuple[int, ...]) -> Assignment:
    """The assignment of the tile array ``dims`` transposed by ``perm``."""
    new_dims = tuple(dims[p] for p in perm)
    if isinstance(assignment, Iota):
        # new flat tile index -> old flat tile index, then old tile -> position (strides as
        # suffix products, once: ranks run to tens of thousands)
        new_strides, old_strides = suffix_products(new_dims), suffix_products(dims)
        moves = [(new_dims[k], new_strides[k], old_strides[p]) for k, p in enumerate(perm)]
        atoms = compose_digits(moves, iota_digits(assignment))
        if atoms is not None:
            return iota_from_digits(atoms)
        assignment = assignment.to_tuple()
    strides = suffix_products(dims)
    return tuple(assignment[sum(c * strides[p] for c, p in zip(unravel(flat, new_dims), perm))]
                 for flat in range(len(assignment)))


def _sort_groups(assignment: Assignment, group: int) -> Assignment:
    """Each run of ``group`` consecutive entries (one replica group) in ascending order."""
    if isinstance(assignment, Iota):
        atoms = split_digits(iota_digits(assignment), [group], 1)
        if atoms is not None:
            inner = sorted((a for a in atoms if a[1] < group), key=lambda a: a[2])
            stride, placed = 1, []
            for r, _, o in inner:
                placed.append((r, stride, o))
                stride *= r
            return iota_from_digits([a for a in atoms if a[1] >= group] + placed)
        assignment = assignment.to_tuple()
    out: list[int] = []
    for start in range(0, len(assignment), group):
        out.extend(sorted(assignment[start:start + group]))
    return tuple(out)


def iota_tile(dims: Any, reshape_dims: Any = None, perm: Any = None,
              subgroups: Any = ()) -> HloSharding:
    """``xc.HloSharding.iota_tile``: tiles filled by ``iota(N).reshape(..).transpose(..)``."""
    dims = check_dims(dims, what="tile assignment dimensions")
    n = check_count(dims, "tile assignment dimensions")
    reshape = (n,) if reshape_dims is None else check_dims(reshape_dims, what="iota reshape dims")
    require(math.prod(reshape) == n, lambda: BadTileAssignment(
        dims, f"reshape dims {reshape} hold {math.prod(reshape)} devices, tiles need {n}"))
    perm = tuple(range(len(reshape))) if perm is None else check_perm(perm, len(reshape))
    return tiled(dims, Iota(reshape, perm), subgroups)


# --------------------------------------------------------------------------- text

@rule("HLO-3", mirrors="xla::HloSharding::ToString")
def hlo_text(sharding: HloSharding) -> str:
    """An HLO sharding prints as jaxlib's ``str(HloSharding)`` does.

    >>> hlo_text(iota_tile((2, 4), (4, 2), (1, 0)))
    '{devices=[2,4]<=[4,2]T(1,0)}'
    >>> hlo_text(Maximal(3))
    '{maximal device=3}'
    """
    if isinstance(sharding, Replicated):
        return "{replicated}"
    if isinstance(sharding, Manual):
        return "{manual}"
    if isinstance(sharding, Unreduced):
        return "{unreduced}"
    if isinstance(sharding, Maximal):
        return f"{{maximal device={sharding.device}}}"
    if isinstance(sharding, Tiled):
        a = sharding.assignment
        body = a.text() if isinstance(a, Iota) else ",".join(map(str, a))
        tail = ""
        if sharding.replicate_on_last_tile_dim:
            tail = " last_tile_dim_replicate"
        elif sharding.subgroups:
            tail = " last_tile_dims={" + ", ".join(s.word for s in sharding.subgroups) + "}"
        return f"{{devices=[{','.join(map(str, sharding.dims))}]{body}{tail}}}"
    raise reject(NotHloInput(sharding, "hlo_text prints an HLO sharding value (Replicated, "
                                       "Maximal, Manual, Unreduced or Tiled)",
                             type(sharding).__name__))


# ASCII digits only: \d would also read "٣" (and int() would take it).
_INTS = r"[0-9]+(?:,[0-9]+)*"
_TILED = re.compile(
    r"^devices=\[(?P<dims>(?:" + _INTS + r")?)\]"
    r"(?:<=\[(?P<reshape>" + _INTS + r")\](?:T\((?P<perm>" + _INTS + r")\))?"
    r"|(?P<list>" + _INTS + r"))"
    r"(?P<last> last_tile_dim_replicate| last_tile_dims=\{(?P<kinds>[a-z]+(?:, ?[a-z]+)*)\})?$")
_MAXIMAL = re.compile(r"^maximal device=(?P<device>[0-9]+)$")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",")) if text else ()


@rule("HLO-2", mirrors="xla::ParseSharding (HloSharding::FromString)")
def parse_hlo(text: str) -> HloSharding:
    """HLO sharding text is read back to the value that prints it.

    >>> parse_hlo("{devices=[2,1,4]<=[8] last_tile_dim_replicate}").tiles
    (2, 1)
    >>> parse_hlo("{devices=[2,2]0,2,1,3}").assignment
    (0, 2, 1, 3)
    """
    if not isinstance(text, str):
        raise reject(NotHloInput(text, "HLO sharding text is a string", type(text).__name__))
    body = text.strip()
    require(body.startswith("{") and body.endswith("}"),
            lambda: MalformedHlo(text, "an HLO sharding is written between braces"))
    body = body[1:-1].strip()
    simple = {"replicated": Replicated, "manual": Manual, "unreduced": Unreduced}
    if body in simple:
        return simple[body]()
    m = _MAXIMAL.match(body)
    if m:
        return _parse_maximal(text, m)
    m = _TILED.match(body)
    require(m is not None, lambda: MalformedHlo(text, "expected {replicated}, {manual}, "
                                                      "{unreduced}, {maximal device=N} or "
                                                      "{devices=[..]..}"))
    assert m is not None
    return _parse_tiled(text, m)


def _parse_maximal(text: str, m: re.Match[str]) -> Maximal:
    device = int(m["device"])
    require(device <= LIMIT, lambda: MalformedHlo(text, "the device position is above "
                                                        "2**63 - 1"))
    return Maximal(device)


def _parse_tiled(text: str, m: re.Match[str]) -> HloSharding:
    """``{devices=[..]..}``: tile dims, a device list or an iota, and subgroup kinds."""
    dims = _ints(m["dims"])
    require(all(1 <= d <= LIMIT for d in dims) and math.prod(dims) <= LIMIT,
            lambda: MalformedHlo(text, "tile dimensions are between 1 and 2**63 - 1, and so is "
                                       "their product"))
    assignment: Assignment = (_parse_device_list(text, m, dims) if m["list"] is not None
                              else _parse_iota(text, m, dims))
    kinds = _parse_subgroup_kinds(text, m)
    require(len(kinds) <= len(dims), lambda: MalformedHlo(
        text, "there are more subgroup kinds than tile dimensions"))
    require(len(dims) > 0, lambda: MalformedHlo(text, "a tile assignment has at least one dimension"))
    if isinstance(assignment, tuple):
        require(len(assignment) > 1, lambda: MalformedHlo(
            text, "a tile assignment over one device is written <=[1], not as a list"))
        require(sorted(assignment) == list(range(len(assignment))), lambda: MalformedHlo(
            text, f"the device list must hold each of 0..{len(assignment) - 1} once"))
    return canonical_tiled(dims, assignment, kinds)


def _parse_device_list(text: str, m: re.Match[str], dims: tuple[int, ...]) -> tuple[int, ...]:
    devices = _ints(m["list"])
    require(len(devices) == math.prod(dims), lambda: MalformedHlo(
        text, f"tile dims {list(dims)} need {math.prod(dims)} devices, "
              f"the list has {len(devices)}"))
    return devices


def _parse_iota(text: str, m: re.Match[str], dims: tuple[int, ...]) -> Iota:
    reshape = _ints(m["reshape"])
    require(all(d <= LIMIT for d in reshape), lambda: MalformedHlo(
        text, "iota reshape dims are at most 2**63 - 1"))
    require(math.prod(reshape) == math.prod(dims), lambda: MalformedHlo(
        text, f"iota <=[{m['reshape']}] has {math.prod(reshape)} devices, "
              f"tile dims {list(dims)} need {math.prod(dims)}"))
    perm = _ints(m["perm"]) if m["perm"] else tuple(range(len(reshape)))
    require(sorted(perm) == list(range(len(reshape))), lambda: MalformedHlo(
        text, f"T({m['perm']}) is not a permutation of the {len(reshape)} reshape dims"))
    return Iota(reshape, perm)


def _parse_subgroup_kinds(text: str, m: re.Match[str]) -> tuple[SubgroupType, ...]:
    # last_tile_dim_replicate is the short form of last_tile_dims={replicated}.
    if m["last"] and "replicate" in m["last"] and m["kinds"] is None:
        return (SubgroupType.REPLICATED,)
    if not m["kinds"]:
        return ()
    names = [n.strip() for n in m["kinds"].split(",")]
    known = {s.word: s for s in SubgroupType}
    for name in names:
        require(name in known, lambda name=name: MalformedHlo(
            text, f"unknown subgroup kind {name!r} (known: {sorted(known)})"))
    return tuple(known[n] for n in names)
