"""Symbolic device orders: ``iota(N).reshape(dims).transpose(perm)``, never enumerated.

Mesh device orders and HLO tile assignments are both, very often, a permutation of
``0 .. N-1`` obtained by reshaping a range and transposing it. :class:`Iota` keeps that
description symbolic, so that "which value sits at position p" and "at which position is
value v" cost O(rank) whatever N is. XLA canonicalizes the same description (it drops
size-1 dimensions and merges dimensions that stay adjacent after the transpose); the
canonical form is what equality, hashing and printing use.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Iterable, Iterator

from .dims import check_count, check_dims, check_perm, is_int, suffix_products
from .rules import Failure, reject

__all__ = ["Iota", "ravel", "unravel", "iota_digits", "invert_digits", "split_digits",
           "compose_digits", "merge_digits", "iota_from_digits"]


def unravel(flat: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major coordinates of ``flat`` in an array of shape ``dims``."""
    coords = []
    for size in reversed(dims):
        flat, c = divmod(flat, size)
        coords.append(c)
    return tuple(reversed(coords))


def ravel(coords: tuple[int, ...], dims: tuple[int, ...]) -> int:
    """Row-major flat position of ``coords`` in an array of shape ``dims``."""
    flat = 0
    for c, size in zip(coords, dims):
        flat = flat * size + c
    return flat


def _canonical(dims: tuple[int, ...], perm: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if len(dims) == 1:
        return dims, (0,)
    if perm == tuple(range(len(dims))):
        return (math.prod(dims),), (0,)  # no transpose: one dimension
    # Drop size-1 dimensions: they move no element.
    keep = [d for d in range(len(dims)) if dims[d] != 1]
    renumber = {d: i for i, d in enumerate(keep)}
    dims = tuple(dims[d] for d in keep)
    perm = tuple(renumber[p] for p in perm if p in renumber)
    # Merge runs that stay adjacent and in order after the transpose: (.., a, a+1, ..).
    merged = True
    while merged:
        merged = False
        for i in range(len(perm) - 1):
            a, b = perm[i], perm[i + 1]
            if b == a + 1:
                new_dims = dims[:a] + (dims[a] * dims[b],) + dims[b + 1:]
                new_perm = tuple(p if p < b else p - 1 for k, p in enumerate(perm) if k != i + 1)
                dims, perm = new_dims, new_perm
                merged = True
                break
    if not dims:
        return (1,), (0,)
    return dims, perm


@dataclasses.dataclass(frozen=True)
class ValueNotInOrder(Failure, rule="VAL-2"):
    template = "{what} {number} is not in an iota order of {size} entries"
    what: str
    number: int
    size: int


@dataclasses.dataclass(frozen=True)
class PositionNotInOrder(ValueNotInOrder, error=IndexError):
    # Indexing past the end is an IndexError, as for any sequence.
    pass


def _whole(value: Any, what: str) -> int:
    if not is_int(value):
        return check_dims((value,), what=what)[0]  # refuses it, with VAL-1
    try:
        return operator.index(value)
    except Exception:  # a type that claims to be an integer but is not one
        return check_dims((value,), what=what)[0]


@dataclasses.dataclass(frozen=True, init=False, eq=False)
class Iota:
    """The order ``iota(N).reshape(reshape_dims).transpose(perm).flatten()``, kept symbolic."""

    reshape_dims: tuple[int, ...]
    perm: tuple[int, ...]
    size: int

    def __init__(self, reshape_dims: tuple[int, ...] | list[int],
                 perm: tuple[int, ...] | list[int] | None = None) -> None:
        dims = check_dims(reshape_dims, what="iota reshape dims")
        check_count(dims, "iota reshape dims")
        perm = tuple(range(len(dims))) if perm is None else check_perm(perm, len(dims))
        dims, perm = _canonical(dims, perm)
        object.__setattr__(self, "reshape_dims", dims)
        object.__setattr__(self, "perm", perm)
        object.__setattr__(self, "size", math.prod(dims))

    @classmethod
    def trusted(cls, reshape_dims: tuple[int, ...], perm: tuple[int, ...]) -> "Iota":
        """An iota from parts already known valid (internal fast path: no validation)."""
        self = object.__new__(cls)
        dims, perm = _canonical(reshape_dims, perm)
        object.__setattr__(self, "reshape_dims", dims)
        object.__setattr__(self, "perm", perm)
        object.__setattr__(self, "size", math.prod(dims))
        return self

    @classmethod
    def range(cls, n: int) -> "Iota":
        """``0, 1, .., n-1``."""
        return cls((n,))

    @property
    def is_range(self) -> bool:
        return len(self.reshape_dims) == 1

    @property
    def transposed_dims(self) -> tuple[int, ...]:
        return tuple(self.reshape_dims[p] for p in self.perm)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, position: int) -> int:
        """The value at ``position`` of the order."""
        position = _whole(position, "a position in an iota order")
        if not 0 <= position < self.size:
            raise reject(PositionNotInOrder("position", position, self.size))
        if self.is_range:
            return position
        coords = unravel(position, self.transposed_dims)
        original = [0] * len(coords)
        for k, p in enumerate(self.perm):
            original[p] = coords[k]
        return ravel(tuple(original), self.reshape_dims)

    def position_of(self, value: int) -> int:
        """The position at which ``value`` stands in the order."""
        value = _whole(value, "a value of an iota order")
        if not 0 <= value < self.size:
            raise reject(ValueNotInOrder("value", value, self.size))
        if self.is_range:
            return value
        original = unravel(value, self.reshape_dims)
        return ravel(tuple(original[p] for p in self.perm), self.transposed_dims)

    def __iter__(self) -> Iterator[int]:
        return iter(self.to_tuple())

    def to_tuple(self) -> tuple[int, ...]:
        """Every value in order: the transposed dimensions walked with their strides."""
        if self.is_range:
            return tuple(range(self.size))
        strides = [1] * len(self.reshape_dims)
        for i in range(len(self.reshape_dims) - 2, -1, -1):
            strides[i] = strides[i + 1] * self.reshape_dims[i + 1]
        values = [0]
        for p in self.perm:  # major to minor in the transposed order
            step, count = strides[p], self.reshape_dims[p]
            values = [v + k * step for v in values for k in range(count)]
        return tuple(values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Iota):
            return self.reshape_dims == other.reshape_dims and self.perm == other.perm
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.reshape_dims, self.perm))

    def text(self) -> str:
        """XLA's notation: ``<=[8]`` or ``<=[4,2]T(1,0)``."""
        dims = ",".join(map(str, self.reshape_dims))
        if self.is_range:
            return f"<=[{dims}]"
        return f"<=[{dims}]T({','.join(map(str, self.perm))})"

    def __repr__(self) -> str:
        return f"Iota{self.text()[2:]}"

    @classmethod
    def recognize(cls, values: tuple[int, ...]) -> "Iota | None":
        """The iota that enumerates ``values``, if ``values`` is ``0..n-1`` in order (else None)."""
        if all(v == i for i, v in enumerate(values)):
            return cls.range(len(values)) if values else None
        return None


# --------------------------------------------------------------------------- digit maps
#
#
# A bijection between 0..N-1 and 0..N-1 built from reshapes and transposes moves *digits*:
# write x in a mixed radix, and each digit of x lands, unchanged, at some place value of the
# result. An atom (radix, in_stride, out_stride) says: the digit (x // in_stride) % radix is
# added to the result times out_stride. Composition and comparison act on atoms only.

Atom = tuple[int, int, int]


def iota_digits(iota: Iota) -> list[Atom]:
    """position -> value of the iota order, as atoms."""
    dims, perm = iota.reshape_dims, iota.perm
    transposed = [dims[p] for p in perm]
    after, old = suffix_products(transposed), suffix_products(dims)
    atoms = [(transposed[k], after[k], old[p]) for k, p in enumerate(perm)]
    return [a for a in atoms if a[0] != 1]


def invert_digits(atoms: list[Atom]) -> list[Atom]:
    return [(r, o, i) for r, i, o in atoms]


def split_digits(atoms: list[Atom], cuts: Iterable[int], side: int) -> list[Atom] | None:
    """Refine atoms so that no atom straddles a cut on one side (1: in, 2: out)."""
    out = list(atoms)
    for cut in sorted(set(cuts)):
        refined = []
        for atom in out:
            r, stride = atom[0], atom[side]
            if stride < cut < stride * r:
                if cut % stride or (stride * r) % cut:
                    return None
                low = cut // stride
                high = r // low
                i, o = atom[1], atom[2]
                refined.append((low, i, o))
                refined.append((high, i * low, o * low))
            else:
                refined.append(atom)
        out = refined
    return out


def compose_digits(first: list[Atom], then: list[Atom]) -> list[Atom] | None:
    """x -> then(first(x))."""
    # Merged atoms carry no boundary that the map does not need.
    first = list(merge_digits(first))
    then = list(merge_digits(then))
    first = split_digits(first, [a[1] for a in then] + [a[1] * a[0] for a in then], 2)
    then_ = split_digits(then, [a[2] for a in (first or [])] + [a[2] * a[0] for a in (first or [])], 1)
    if first is None or then_ is None:
        return None
    by_in = {(r, i): o for r, i, o in then_}
    out = []
    for r, i, o in first:
        target = by_in.get((r, o))
        if target is None:
            return None
        out.append((r, i, target))
    return out


def merge_digits(atoms: list[Atom]) -> tuple[Atom, ...]:
    atoms = sorted(a for a in atoms if a[0] != 1)
    atoms.sort(key=lambda a: a[1])
    out: list[Atom] = []
    for r, i, o in atoms:
        if out:
            pr, pi, po = out[-1]
            if i == pi * pr and o == po * pr:
                out[-1] = (pr * r, pi, po)
                continue
        out.append((r, i, o))
    return tuple(out)



def iota_from_digits(atoms: list[Atom]) -> "Iota":
    """The iota whose position -> value map is ``atoms`` (which must cover both sides)."""
    atoms = [a for a in atoms if a[0] != 1]
    if not atoms:
        return Iota((1,))
    by_value = sorted(atoms, key=lambda a: -a[2])
    reshape = tuple(a[0] for a in by_value)
    index = {a: k for k, a in enumerate(by_value)}
    perm = tuple(index[a] for a in sorted(atoms, key=lambda a: -a[1]))
    return Iota(reshape, perm)
