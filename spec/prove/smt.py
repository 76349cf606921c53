"""Placement-equivalence proved: a proof, or the device where two placements part.

The one spec module that imports z3 (``pip install 'shardlaw[z3]'``); ``shardlaw.spec`` loads
it on first use of :func:`prove_equivalent`.

Which tool decides
------------------
The question is EQ-2's: the same devices, each holding the same box, in the same memory
kind. What is cheap is answered first, before any device order is read: device counts
that differ (a symbolic list of 2^40 devices against 8 costs what the 8 cost), memory
kinds or platforms that differ, shapes of size 0 in every dimension. Then:

* an *explicit* device list or tile assignment is data the size of the mesh, and the
  direct pass (:func:`_direct`) reads it: it lists, tile by tile, the device that holds
  the tile and the number of its block, and compares the two lists; only the devices at
  the tiles where they part are looked up in the other sharding. A few passes in C over
  the devices (``benchmarks/bench_prove.py`` part 1: 2^16 devices in milliseconds, 2^20 in
  a few hundred), where a solver given one ground instance per device took 0.6 s and 16 s;
* *symbolic* (iota) orders go to the solver, whose formula (below) does not grow with the
  device count: a pair over 2^20 devices is proved in milliseconds. Below
  ``ENUMERATION_LIMIT`` devices, writing the orders out and passing over them is faster
  than building and solving the formula (part 3), and is what is done;
* ``prove_for_every_shape`` (SMT-2) takes the shape as unknowns in the solver. The direct
  pass needs only one shape: which devices differ depends on which dimensions have
  positive size, and one shape in scope has the most (:func:`_smallest_shape`).

``method="direct"`` or ``method="solver"`` forces one way for every question; the tests
hold the two, and the default, to enumeration of EQ-2.

How a placement becomes a formula
---------------------------------
A sharding places a value through three maps (IDX-1): a device's *position* in the device
list; the flat index of the *tile* that holds that position (the inverse of the tile
assignment); the tile's coordinates, which cut each dimension into equal pieces: the box
``[c * piece, (c + 1) * piece)``. The free variable of the formula is a position ``p`` in
the first sharding's device list. The same device stands at position ``sigma(p)`` of the
second list, and the formula asks for a ``p`` at which the two boxes differ: *unsat* is the
proof that there is none, *sat* names one.

Reshapes and transposes (:class:`~shardlaw.spec.Iota` orders, for device lists and for
tile assignments alike) are encoded literally, as the unravel / transpose / ravel that
defines them. Their divisions and remainders are by constants, and the encoder does them
on *digits*: the free variable is written in mixed radix, one bounded variable per digit,
and a division whose boundary falls inside a digit splits that digit in two. Where the
boundaries of two orders do not nest (a 2x3 order read as 3x2), the encoder emits the
solver's own division instead. Everything is a bit-vector.

The choice was measured (``benchmarks/bench_prove.py``, part 2: one transposed-mesh proof at
2^16, 2^20, 15,015 and 459,459 devices; z3 5.4.1; three runs on two busy CPU cores). Integer
``div``/``mod`` was erratic: the same proof took from 30 ms to more than the 30 s limit, and
4 of its 12 measurements ended *unknown*. Bit-vector ``bvudiv``/``bvurem`` took 2 to 12 ms at
2^20 (z3 turns divisions by powers of two into bit extraction), but 7 to 9 s at 15,015
devices and ended *unknown* at 459,459. Digits took 1 to 47 ms at every size, powers of two
or not (the larger figures on a first, cold call).

When the solver is asked for explicit orders (``method="solver"``), the encoder first
cancels what it can: equal device lists need no map at all, and a list that is in fact a
reshape/transpose is recognized as one. What remains is a table: the encoder reads, for
each of the N positions, the tile index each sharding gives it (as the spec's own
enumeration does), and the solver receives one ground instance per position and checks
their boxes. That costs time in proportion to N, and more per device than the direct pass.

Answers are :class:`Proved`, :class:`Counterexample` or :class:`Unknown` (the time limit ran
out, or an order was too large to expand); input that the spec rejects raises the spec's
:class:`~shardlaw.spec.Rejection`, never a solver error.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import itertools
import math
import operator
import time
from typing import Any, Callable, ClassVar, Sequence

import z3

from ..core.hlo import Tiled
from ..core.iota import Iota, invert_digits, iota_digits, iota_from_digits
from ..placement.blocks import (
    _acts_replicated, _box_at, _box_of_tile, _layout, box_of, shard_shape,
)
from ..core.rules import Failure, reject, rule
from ..core.shardings import GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.dims import is_int
from ..core.values import Device, DeviceList, Mesh, P, check_dims

__all__ = [
    "prove_equivalent", "prove_for_every_shape", "Proved", "Counterexample", "Unknown",
    "ENCODINGS", "METHODS", "DEFAULT_TIMEOUT_S", "TABLE_LIMIT", "ENUMERATION_LIMIT",
]

# Names the docstring examples use (the docs run them with this module's namespace).
_EXAMPLE_NAMES = (GSPMDSharding, Mesh, NamedSharding, P)

Box = tuple[tuple[int, int], ...]

DEFAULT_TIMEOUT_S = 10.0

# The largest explicit table expanded into ground instances (one per device position), and
# the largest symbolic order written out for a direct pass when one is asked for.
TABLE_LIMIT = 1 << 20

# Up to this many devices, symbolic (iota) orders are decided by writing them out and
# passing over them (enumeration); above it, by the solver, whose time does not grow with
# the device count. Measured in benchmarks/bench_prove.py (part 3): at 4,096 devices the
# pass took 0.4-0.5 ms and the solver 0.6-2.1 ms; at 16,384, 1.6-2.0 ms against 0.6-2.0.
ENUMERATION_LIMIT = 4096

# The longest time limit z3 takes (its timeout is an unsigned 32-bit count of milliseconds),
# and the highest rank the prover encodes.
MAX_TIMEOUT_S = 4_000_000.0
MAX_RANK = 256

# Table instances are written and read by the solver this many at a time, so that the time
# limit is looked at between pieces.
TABLE_PIECE = 16_384

# How orders become arithmetic: digits (the default), or the literal division of the
# solver's bit-vectors or integers (kept for the measurements that chose the default).
ENCODINGS = ("digits", "bitvector", "integer")

# How a question is decided: "auto" (the default: explicit orders by a direct pass, symbolic
# ones by enumeration up to ENUMERATION_LIMIT devices and by the solver above), or one way
# for every question ("direct" writes symbolic orders out too; "solver" expands explicit
# ones into solver instances), kept for the measurements and the tests that hold them equal.
METHODS = ("auto", "direct", "solver")


# --------------------------------------------------------------------------- answers

@dataclasses.dataclass(frozen=True)
class Proved:
    """Every device holds the same box under both shardings, in the same memory kind.

    ``shape`` is the shape proved for, or None when the proof covers every shape of
    ``rank`` with dimensions up to ``max_dim`` that both shardings divide. ``method`` says
    how it was decided (see :data:`METHODS`): ``"direct"``, a pass over explicit device
    orders, or a case decided before any order is read; ``"enumeration"``, a small mesh's
    symbolic orders written out and passed over; ``"solver"``, z3. ``tables`` tells
    whether an order was read entry by entry (a pass, or one solver instance per device).
    """

    shape: tuple[int, ...] | None = None
    rank: int | None = None
    max_dim: int | None = None
    solver_seconds: float = dataclasses.field(default=0.0, compare=False)
    seconds: float = dataclasses.field(default=0.0, compare=False)
    tables: bool = dataclasses.field(default=False, compare=False)
    method: str = dataclasses.field(default="solver", compare=False)

    equivalent: ClassVar[bool] = True

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        if self.shape is not None:
            return f"Proved(shape={self.shape})"
        return f"Proved(rank={self.rank}, max_dim={self.max_dim})"


@dataclasses.dataclass(frozen=True)
class Counterexample:
    """A device that holds different boxes under the two shardings, or holds its box in
    another memory kind, for ``shape``.

    A box is None when the device holds nothing under that sharding (it is not among its
    devices). Boxes are as :func:`~shardlaw.spec.box_of` gives them. ``memory_kind_a`` and
    ``memory_kind_b`` name the two memory kinds when they differ (None when they agree):
    then every device holds its box in another memory, and the device named may hold the
    same box under both (``device`` is None when neither sharding has a device to name).
    ``method`` and ``tables`` are as for :class:`Proved`.
    """

    device: int | None  # None only where neither sharding spans a device
    box_a: Box | None
    box_b: Box | None
    shape: tuple[int, ...]
    solver_seconds: float = dataclasses.field(default=0.0, compare=False, repr=False)
    seconds: float = dataclasses.field(default=0.0, compare=False, repr=False)
    tables: bool = dataclasses.field(default=False, compare=False, repr=False)
    method: str = dataclasses.field(default="solver", compare=False, repr=False)
    memory_kind_a: str | None = None
    memory_kind_b: str | None = None

    equivalent: ClassVar[bool] = False

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        kinds = ("" if self.memory_kind_a is None and self.memory_kind_b is None else
                 f", memory_kind_a={self.memory_kind_a!r}, memory_kind_b={self.memory_kind_b!r}")
        return (f"Counterexample(device={self.device}, box_a={self.box_a}, box_b={self.box_b}, "
                f"shape={self.shape}{kinds})")


@dataclasses.dataclass(frozen=True)
class Unknown:
    """No answer: the time limit ran out, or an order was too large to expand."""

    reason: str
    solver_seconds: float = dataclasses.field(default=0.0, compare=False, repr=False)
    seconds: float = dataclasses.field(default=0.0, compare=False, repr=False)

    equivalent: ClassVar[None] = None

    def __bool__(self) -> bool:
        raise TypeError(f"an Unknown answer is neither true nor false ({self.reason}); "
                        "test `.equivalent`, which is None")


Answer = Proved | Counterexample | Unknown


# --------------------------------------------------------------------------- failures

@dataclasses.dataclass(frozen=True)
class NothingToProve(Failure, rule="SMT-1", error=TypeError,
                     jax_error="(none: JAX has no such function)"):
    template = ("prove_equivalent needs either a shape, or a rank and max_dim "
                "(to prove for every shape up to max_dim); got shape={shape!r}, "
                "rank={rank!r}, max_dim={max_dim!r}")
    hint = "Pass shape=(8, 8), or rank=2, max_dim=64."
    shape: Any
    rank: Any
    max_dim: Any


@dataclasses.dataclass(frozen=True)
class BadTimeLimit(Failure, rule="SMT-1", error=TypeError,
                   jax_error="(none: JAX has no such function)"):
    template = ("timeout_s is a number of seconds above 0 and at most "
                "{most:g} (z3's limit), got {value!r}")
    value: Any
    most: float


@dataclasses.dataclass(frozen=True)
class TimeLimitOutOfRange(BadTimeLimit, error=ValueError,
                          jax_error="(none: JAX has no such function)"):
    pass


@dataclasses.dataclass(frozen=True)
class RankTooHigh(Failure, rule="SMT-2"):
    template = "the prover encodes values of rank at most {most}, got {what} {rank}"
    what: str
    rank: int
    most: int


@dataclasses.dataclass(frozen=True)
class UnknownEncoding(Failure, rule="SMT-1", error=TypeError,
                      jax_error="(none: JAX has no such function)"):
    template = "encoding must be one of {known}, got {encoding!r}"
    encoding: Any
    known: tuple


@dataclasses.dataclass(frozen=True)
class UnknownMethod(Failure, rule="SMT-1", error=TypeError,
                    jax_error="(none: JAX has no such function)"):
    template = "method must be one of {known}, got {method!r}"
    method: Any
    known: tuple


# --------------------------------------------------------------------------- arithmetic

class _BitVectors:
    """Solver terms as bit-vectors of one width (wide enough for every value involved)."""

    def __init__(self, width: int) -> None:
        self.width = width

    def variable(self, name: str, radix: int, *, narrow: bool = True) -> tuple[Any, list[Any]]:
        """A variable ranging over ``0 .. radix-1``, and the constraints that bound it.

        A narrow variable has just the bits it needs and is zero-extended to the width.
        """
        bits = max(1, (radix - 1).bit_length()) if narrow else self.width
        v = z3.BitVec(name, bits)
        bounds = [] if radix == 1 << bits else [z3.ULT(v, radix)]
        return (z3.ZeroExt(self.width - bits, v) if self.width > bits else v), bounds

    def const(self, value: int) -> Any:
        return z3.BitVecVal(value, self.width)

    def div(self, term: Any, c: int) -> Any:
        return z3.UDiv(term, self.const(c))

    def mod(self, term: Any, c: int) -> Any:
        return z3.URem(term, self.const(c))

    def divides(self, c: int, term: Any) -> Any:
        return self.mod(term, c) == self.const(0)


class _Integers:
    """Solver terms as mathematical integers (measured slower; see the module docstring)."""

    def variable(self, name: str, radix: int, *, narrow: bool = True) -> tuple[Any, list[Any]]:
        v = z3.Int(name)
        return v, [v >= 0, v < radix]

    def const(self, value: int) -> Any:
        return z3.IntVal(value)

    def div(self, term: Any, c: int) -> Any:
        return term / c

    def mod(self, term: Any, c: int) -> Any:
        return term % c

    def divides(self, c: int, term: Any) -> Any:
        return term % c == 0


@dataclasses.dataclass
class _Number:
    """A non-negative integer as the encoder holds it: a sum of digits times coefficients
    (``terms``: digit -> coefficient), or an opaque solver term."""

    terms: dict[int, int] | None = None
    term: Any = None


class _Encoder:
    """The free variable's digits, the solver terms built from them, and their bounds.

    Digit k takes the values ``0 .. radix[k]-1``. A division whose boundary falls inside a
    digit splits it into a low and a high digit (``digit = low + m * high``); forms that
    name the old digit are rewritten when they are next used.
    """

    def __init__(self, arithmetic: Any, use_digits: bool = True) -> None:
        self.arithmetic = arithmetic
        self.use_digits = use_digits
        self.radix: list[int] = []
        self.parts: dict[int, tuple[int, int, int]] = {}  # split digit -> (low, high, m)
        self.variables: dict[int, Any] = {}
        self.constraints: list[Any] = []

    # -- digits

    def free(self, radix: int, name: str) -> _Number:
        """A free number ranging over ``0 .. radix-1``."""
        if not self.use_digits:
            term, bounds = self.arithmetic.variable(name, radix)
            self.constraints += bounds
            return _Number(term=term)
        if radix == 1:
            return _Number(terms={})
        self.radix.append(radix)
        return _Number(terms={len(self.radix) - 1: 1})

    def _new_digit(self, radix: int) -> int:
        self.radix.append(radix)
        return len(self.radix) - 1

    def _split(self, digit: int, m: int) -> tuple[int, int]:
        low, high = self._new_digit(m), self._new_digit(self.radix[digit] // m)
        self.parts[digit] = (low, high, m)
        if digit in self.variables:  # a solver term already names the whole digit
            self.constraints.append(
                self.variables[digit] == self._digit_term(low)
                + self._digit_term(high) * self.arithmetic.const(m))
        return low, high

    def _expanded(self, terms: dict[int, int]) -> dict[int, int]:
        out: dict[int, int] = {}
        stack = list(terms.items())
        while stack:
            digit, coefficient = stack.pop()
            if digit in self.parts:
                low, high, m = self.parts[digit]
                stack += [(low, coefficient), (high, coefficient * m)]
            elif self.radix[digit] != 1:
                out[digit] = out.get(digit, 0) + coefficient
        return out

    # -- solver terms

    def _digit_term(self, digit: int) -> Any:
        if digit not in self.variables:
            term, bounds = self.arithmetic.variable(f"digit{digit}", self.radix[digit])
            self.variables[digit] = term
            self.constraints += bounds
        return self.variables[digit]

    def term(self, x: _Number) -> Any:
        if x.terms is None:
            return x.term
        total = self.arithmetic.const(0)
        for digit, coefficient in sorted(self._expanded(x.terms).items()):
            total = total + self._digit_term(digit) * self.arithmetic.const(coefficient)
        return z3.simplify(total) if self.use_digits else total

    def value(self, model: Any, x: _Number) -> int:
        return model.eval(self.term(x), model_completion=True).as_long()

    # -- arithmetic on numbers

    def scale(self, x: _Number, k: int) -> _Number:
        if x.terms is not None:
            return _Number(terms={d: c * k for d, c in x.terms.items()})
        return _Number(term=x.term * self.arithmetic.const(k))

    def add(self, x: _Number, y: _Number) -> _Number:
        if x.terms is not None and y.terms is not None:
            out = dict(x.terms)
            for d, c in y.terms.items():
                out[d] = out.get(d, 0) + c
            return _Number(terms=out)
        return _Number(term=self.term(x) + self.term(y))

    def divmod(self, x: _Number, c: int) -> tuple[_Number, _Number]:
        """``(x // c, x % c)``: on digits when the boundary ``c`` falls between them."""
        if c == 1:
            return x, _Number(terms={})
        if x.terms is not None:
            split = self._divmod_digits(x.terms, c)
            if split is not None:
                return split
        term = self.term(x)
        return (_Number(term=self.arithmetic.div(term, c)),
                _Number(term=self.arithmetic.mod(term, c)))

    def _divmod_digits(self, terms: dict[int, int], c: int) -> tuple[_Number, _Number] | None:
        terms = self._expanded(terms)
        for digit, coefficient in list(terms.items()):
            radix = self.radix[digit]
            if coefficient < c < coefficient * radix:  # the boundary cuts this digit
                if c % coefficient or radix % (c // coefficient):
                    return None
                low, high = self._split(digit, c // coefficient)
                del terms[digit]
                terms[low] = terms.get(low, 0) + coefficient
                terms[high] = terms.get(high, 0) + c
        low_part = {d: k for d, k in terms.items() if k < c}
        high_part = {d: k for d, k in terms.items() if k >= c}
        # x = c * (high part / c) + low part, with 0 <= low part < c
        if any(k % c for k in high_part.values()):
            return None
        if sum((self.radix[d] - 1) * k for d, k in low_part.items()) >= c:
            return None
        return _Number(terms={d: k // c for d, k in high_part.items()}), _Number(terms=low_part)


def _unravel(x: _Number, dims: tuple[int, ...], enc: _Encoder) -> list[_Number]:
    """Row-major coordinates of ``x`` in an array of shape ``dims`` (iota.unravel)."""
    coords = []
    for size in reversed(dims):
        x, c = enc.divmod(x, size)
        coords.append(c)
    return coords[::-1]


def _ravel(coords: list[_Number], dims: tuple[int, ...], enc: _Encoder) -> _Number:
    """Row-major flat position of ``coords`` in an array of shape ``dims`` (iota.ravel)."""
    flat = _Number(terms={})
    for c, size in zip(coords, dims):
        flat = enc.add(enc.scale(flat, size), c)
    return flat


def _value_at(order: Iota, position: _Number, enc: _Encoder) -> _Number:
    """``order[position]``: unravel over the transposed dims, undo the transpose, ravel."""
    coords = _unravel(position, order.transposed_dims, enc)
    original: list[_Number] = [_Number(terms={})] * len(coords)
    for k, p in enumerate(order.perm):
        original[p] = coords[k]
    return _ravel(original, order.reshape_dims, enc)


def _position_of(order: Iota, value: _Number, enc: _Encoder) -> _Number:
    """Where ``value`` stands in ``order``: unravel over the reshape dims, transpose, ravel."""
    original = _unravel(value, order.reshape_dims, enc)
    return _ravel([original[p] for p in order.perm], order.transposed_dims, enc)


# --------------------------------------------------------------------------- placements

@dataclasses.dataclass(frozen=True)
class _Placement:
    """What the prover needs of one sharding: its device list and, unless every device
    holds the whole value, its tile assignment; and the layout IDX-1 read for ``shape``."""

    sharding: Any
    devices: DeviceList
    tiled: Tiled | None
    order: Iota | None  # the tile assignment as an iota order, when it is one
    shape: tuple[int, ...]
    hlo: Any = None  # the lowered HLO sharding (None: a SingleDeviceSharding)
    piece: tuple[int, ...] = ()

    @property
    def tiles(self) -> tuple[int, ...] | None:
        return None if self.tiled is None else self.tiled.tiles

    @functools.cached_property
    def platforms(self) -> frozenset[str]:
        """The platforms of its devices (one, unless an explicit list mixes them)."""
        if self.devices.iota is not None:
            return frozenset((self.devices.platform,))
        _look_at_clock("reading the device platforms")
        return frozenset(map(_PLATFORM, self.devices))

    def box(self, shape: tuple[int, ...], device: int, platform: str | None,
            tile: int | None = None) -> Box | None:
        """The box ``device`` holds (IDX-1), or None when the sharding does not span it;
        with ``platform``, the device is that platform's (the same id elsewhere is another
        device). ``tile``, when known, is the tile that holds it (for a direct pass, which
        found it, so that no index of a long device list is built to find it again)."""
        if tile is not None and shape == self.shape:
            if self.tiled is None:
                return tuple((0, n) for n in shape)
            return _box_of_tile(self.tiled, self.piece, tile)
        position = self.devices.position_of(device)
        if position is None or platform is not None and \
                self.devices[position].platform != platform:
            return None
        if shape != self.shape:
            return box_of(self.sharding, shape, device)
        if self.hlo is None:
            return tuple((0, n) for n in shape)
        return _box_at(self.hlo, self.piece, shape, position)


def _placement(sharding: Any, shape: tuple[int, ...]) -> _Placement:
    """Run the spec's checks for ``shape`` (DIV-1, NS-5, DEV-1, IDX-1) and read the layout."""
    if isinstance(sharding, SingleDeviceSharding):
        shard_shape(sharding, shape)
        return _Placement(sharding, sharding.device_list, None, None, shape)
    hlo, piece, devices = _layout(sharding, shape)
    if _acts_replicated(hlo):
        return _Placement(sharding, devices, None, None, shape, hlo, piece)
    assignment = hlo.assignment
    order = assignment if isinstance(assignment, Iota) else _recognize_iota(assignment)
    return _Placement(sharding, devices, hlo, order, shape, hlo, piece)


def _first_unshared_device(a: DeviceList, b: DeviceList) -> int | None:
    """The smallest device id in one list but not the other (None: same device set).

    A symbolic list holds the ids ``0 .. N-1``: against it, only the explicit list is read,
    so that a list of 2^40 devices costs no more than the 8 it is compared with.
    """
    if a.iota is not None and b.iota is not None:
        return None if len(a) == len(b) else min(len(a), len(b))
    if a.iota is not None or b.iota is not None:
        symbolic, explicit = (a, b) if a.iota is not None else (b, a)
        ids = set(_device_ids(explicit))
        # The first id the explicit list lacks (at most len(ids) steps), and the first it
        # holds beyond the symbolic list's ids.
        missing = next(k for k in itertools.count() if k not in ids)
        beyond = [i for i in ids if i >= len(symbolic)]
        found = ([missing] if missing < len(symbolic) else []) + beyond
        return min(found) if found else None
    unshared = set(_device_ids(a)) ^ set(_device_ids(b))
    return min(unshared) if unshared else None


def _enumerate(atoms: list[tuple[int, int, int]]) -> list[int]:
    """The values of a digit map ``(radix, in_stride, out_stride)``, position by position.

    The digits must cover the positions without gaps (as an iota's do, either way round).
    """
    values = [0]
    for radix, _, weight in sorted(atoms, key=lambda atom: atom[1]):
        _look_at_clock("writing out a symbolic order")
        if len(values) == 1:
            values = list(range(values[0], values[0] + radix * weight, weight))
        elif len(values) >= radix:  # copies of a long list, shifted (map runs in C)
            shifted: list[int] = []
            for k in range(radix):
                shifted.extend(map((k * weight).__add__, values))
            values = shifted
        else:
            values = [v + k * weight for k in range(radix) for v in values]
    return values


def _order_values(order: Iota) -> list[int]:
    """``list(order)``, built a digit at a time rather than entry by entry."""
    if order.is_range:
        return list(range(len(order)))
    return _enumerate(iota_digits(order))


def _order_positions(order: Iota) -> list[int]:
    """``[order.position_of(v) for v in range(len(order))]``, a digit at a time."""
    return _enumerate(invert_digits(iota_digits(order)))


def _device_ids(devices: DeviceList) -> list[int]:
    """The ids of a device list, position by position."""
    _look_at_clock("reading a device list")
    if devices.iota is not None:
        return _order_values(devices.iota)
    return list(map(_ID, devices))


_ID = operator.attrgetter("id")


def _same_order(a: DeviceList, b: DeviceList) -> bool:
    """Whether two device lists hold the same ids in the same order."""
    if a.iota is not None and b.iota is not None:
        return a.iota == b.iota
    return len(a) == len(b) and _device_ids(a) == _device_ids(b)


def _recognize_iota(values: tuple[int, ...] | list[int]) -> Iota | None:
    """The reshape/transpose order that enumerates ``values`` (a permutation), if any.

    An iota order's digits are read off where they start: the value at position
    ``stride`` (every lower digit 0) is the next digit's weight, and the digit runs as long
    as the values keep stepping by that weight. The candidate is then checked in full.
    """
    n = len(values)
    if n == 0 or values[0] != 0:
        return None
    atoms = []
    stride = 1
    while stride < n:
        weight = values[stride]
        radix = 2
        while stride * radix < n and values[stride * radix] == radix * weight:
            radix += 1
        if n % (stride * radix):
            return None
        atoms.append((radix, stride, weight))
        stride *= radix
    if _enumerate(atoms) != list(values):
        return None
    return iota_from_digits(atoms)


# --------------------------------------------------------------------------- the query

def _position_map(a: DeviceList, b: DeviceList) -> tuple[str, Any]:
    """How a position in ``a`` becomes the position of the same device in ``b``.

    ``("identity", None)``, ``("iotas", (a_iota, b_iota))`` (b's inverse after a),
    ``("iota", order)`` (a table recognized as a reshape/transpose) or ``("table", values)``.
    """
    if _same_order(a, b):
        return "identity", None
    if a.iota is not None and b.iota is not None:
        return "iotas", (a.iota, b.iota)
    where_in_b: Any
    if b.iota is not None:
        where_in_b = _order_positions(b.iota)
    else:
        where_in_b = {device: p for p, device in
                      enumerate(_ticking(b.ids(), "matching the device orders"))}
    table = tuple(where_in_b[device] for device in
                  _ticking(_device_ids(a), "matching the device orders"))
    order = _recognize_iota(table)
    return ("iota", order) if order is not None else ("table", table)


def _sigma(kind: str, data: Any, p: _Number, enc: _Encoder) -> _Number:
    if kind == "identity":
        return p
    if kind == "iotas":
        a_order, b_order = data
        return _position_of(b_order, _value_at(a_order, p, enc), enc)
    return _value_at(data, p, enc)


def _boxes(placement: _Placement, tile: _Number | None, sizes: list[Any], pieces: list[Any],
           enc: _Encoder) -> list[tuple[Any, Any]]:
    """The box a device holds, as solver terms: ``(start, stop)`` per dimension."""
    zero = enc.arithmetic.const(0)
    if placement.tiled is None:
        return [(zero, size) for size in sizes]
    assert tile is not None
    coords = _unravel(tile, placement.tiled.dims, enc)[: placement.tiled.data_rank]
    out = []
    for c, piece in zip(coords, pieces):
        if isinstance(piece, int):
            start = enc.term(enc.scale(c, piece))
            out.append((start, start + enc.arithmetic.const(piece)))
        else:
            start = enc.term(c) * piece
            out.append((start, start + piece))
    return out


def _differs(boxes_a: list[tuple[Any, Any]], boxes_b: list[tuple[Any, Any]]) -> Any:
    return z3.Or([z3.Or(sa != sb, ea != eb) for (sa, ea), (sb, eb) in zip(boxes_a, boxes_b)]
                 + [z3.BoolVal(False)])


@dataclasses.dataclass
class _Shapes:
    """The shape as the solver sees it: constants, or variables within bounds."""

    sizes: list[Any]
    concrete: tuple[int, ...] | None
    variables: list[Any]

    def pieces(self, placement: _Placement, arithmetic: Any) -> list[Any]:
        tiles = placement.tiles or (1,) * len(self.sizes)
        if self.concrete is not None:
            return [n // t for n, t in zip(self.concrete, tiles)]
        return [arithmetic.div(n, t) for n, t in zip(self.sizes, tiles)]


def _shapes(shape: tuple[int, ...] | None, rank: int, max_dim: int, a: _Placement,
            b: _Placement, enc: _Encoder) -> _Shapes:
    if shape is not None:
        return _Shapes([enc.arithmetic.const(n) for n in shape], shape, [])
    sizes = []
    for j in range(rank):
        n, bounds = enc.arithmetic.variable(f"dim{j}", max_dim + 1, narrow=False)
        enc.constraints += bounds
        # Only the shapes both shardings divide (DIV-1) are in scope.
        for placement in (a, b):
            if placement.tiles is not None and placement.tiles[j] != 1:
                enc.constraints.append(enc.arithmetic.divides(placement.tiles[j], n))
        sizes.append(n)
    return _Shapes(sizes, None, sizes)


def _width(n: int, shape: tuple[int, ...] | None, max_dim: int) -> int:
    largest = max([n, max_dim, *(shape or ())])
    bits = largest.bit_length() + 2
    return bits + (-bits) % 4  # a multiple of 4, for hexadecimal literals


# --------------------------------------------------------------------------- the time limit

class _OutOfTime(Exception):
    """The time limit ran out before the formula was built (answered as Unknown)."""

    def __init__(self, doing: str) -> None:
        super().__init__(doing)
        self.doing = doing


class _Clock:
    """The one time limit of a whole call: building the formula and solving it.

    Building stops once it has used ``BUILD_SHARE`` of the limit (the rest is the solver's,
    and freeing what was built also takes time), or when the pieces still to build would
    not fit in it at the pace measured so far.
    """

    BUILD_SHARE = 0.7

    def __init__(self, timeout_s: float) -> None:
        self.started = time.perf_counter()
        self.limit = timeout_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return self.limit - self.elapsed()

    def check(self, doing: str) -> None:
        if self.elapsed() > self.limit * self.BUILD_SHARE:
            raise _OutOfTime(doing)

    def ticking(self, items: Any, doing: str, every: int = 1 << 16) -> Any:
        """``items``, the clock read every ``every`` of them (for the O(N) table loops)."""
        rest = iter(items)
        while True:
            self.check(doing)
            chunk = list(itertools.islice(rest, every))
            if not chunk:
                return
            yield from chunk

    def pace(self, doing: str, done: int, total: int, since: float) -> None:
        """Give up early when ``total - done`` more pieces at the pace since ``since`` would
        run past the building share of the limit."""
        self.check(doing)
        if done:
            per_piece = (time.perf_counter() - since) / done
            if self.elapsed() + per_piece * (total - done) > self.limit * self.BUILD_SHARE:
                raise _OutOfTime(f"{doing} (about {per_piece * total:.1f} s in all)")


# The clock of the call in progress, read by the loops over explicit tables.
_CLOCK: contextvars.ContextVar[_Clock | None] = contextvars.ContextVar("shardlaw_smt_clock",
                                                                      default=None)


def _ticking(items: Any, doing: str) -> Any:
    clock = _CLOCK.get()
    return items if clock is None else clock.ticking(items, doing)


def _look_at_clock(doing: str) -> None:
    """Between the steps of a long pass: past the building share of the limit, give up."""
    clock = _CLOCK.get()
    if clock is not None:
        clock.check(doing)


# --------------------------------------------------------------------------- the direct pass

def _direct(pa: _Placement, pb: _Placement, question: _Question, by_device: bool, method: str,
            clock: _Clock) -> Answer:
    """Decide by reading the orders once: which block of the array each device holds.

    Two boxes of one dimension of positive size are equal exactly when both shardings cut
    it into as many pieces and the device holds the same piece; a dimension of size 0 is
    the empty range under both. So the pass checks the counts of pieces, then lists, tile
    by tile, the device that holds the tile and the number of its block (its coordinates
    along the dimensions of positive size). Where the two lists agree tile by tile, those
    devices hold the same block under both; only the devices at the tiles where they part
    are looked up in the other sharding. The loops run in C (``operator.itemgetter``,
    ``map``, list comparison): a few passes over the devices, and none when the two
    shardings list their tiles alike.
    """
    shape = question.example
    n = len(pa.devices)
    kept = [j for j, size in enumerate(shape) if size > 0]
    tiles_a = pa.tiles or (1,) * len(shape)
    tiles_b = pb.tiles or (1,) * len(shape)
    if any(tiles_a[j] != tiles_b[j] for j in kept):
        # Pieces of other lengths along a dimension: no device holds the same box under both.
        first = pa.devices[0]
        return _counterexample(pa, pb, shape, first.id, first.platform, (None, None), method,
                               clock, True)
    holder_a, holder_b = _devices_by_tile(pa, by_device), _devices_by_tile(pb, by_device)
    blocks_a, blocks_b = _block_numbers(pa, kept, n), _block_numbers(pb, kept, n)
    if isinstance(blocks_a, range) != isinstance(blocks_b, range):
        blocks_a, blocks_b = list(blocks_a), list(blocks_b)
    _look_at_clock("comparing the blocks tile by tile")
    parting = _parting(holder_a, holder_b)
    if blocks_a != blocks_b:
        parting = sorted(set(parting).union(_parting(blocks_a, blocks_b)))
    if not parting:
        return question.proved(clock, method, True)
    _look_at_clock("looking up the devices where the tiles part")
    # A device at a tile where the lists part is, in the other list, at such a tile too
    # (the tiles where they agree hold other devices), or not there at all.
    devices = _gather(holder_a, parting)
    tile_under_b = dict(zip(_gather(holder_b, parting), parting))
    try:
        others = _gather(tile_under_b, devices)
    except KeyError:  # not under b: name the first device only one of them spans
        unshared = min(set(holder_a) ^ set(holder_b))
        return _counterexample_at(pa, pb, shape, unshared, (None, None), method, clock)
    _look_at_clock("comparing the blocks of the devices where the tiles part")
    differing = _parting(_gather(blocks_a, parting), _gather(blocks_b, others))
    if not differing:
        return question.proved(clock, method, True)
    k = differing[0]
    return _counterexample_at(pa, pb, shape, devices[k], (parting[k], others[k]), method, clock)


def _gather(items: Any, indices: list[Any]) -> list[Any]:
    """``[items[i] for i in indices]``, the loop run in C (operator.itemgetter)."""
    if len(indices) < 2:
        return [items[i] for i in indices]
    return list(operator.itemgetter(*indices)(items))


def _parting(x: list[Any], y: list[Any]) -> list[int]:
    """The indices where two lists of one length differ, found a slice at a time (a slice
    compares in C; only slices that differ are looked into)."""
    step, out = 4096, []
    for start in range(0, len(x), step):
        xs, ys = x[start:start + step], y[start:start + step]
        if xs != ys:
            out.extend(itertools.compress(range(start, start + len(xs)),
                                          map(operator.ne, xs, ys)))
    return out


def _counterexample_at(pa: _Placement, pb: _Placement, shape: tuple[int, ...], key: Any,
                       tiles: tuple[int | None, int | None], method: str,
                       clock: _Clock) -> Answer:
    """The counterexample of a direct pass at a device key (an id, or a Device)."""
    device, platform = (key.id, key.platform) if isinstance(key, Device) else (key, None)
    return _counterexample(pa, pb, shape, device, platform, (None, None), method, clock, True,
                           tiles)


def _device_keys(devices: DeviceList, by_device: bool) -> list[Any]:
    """Each position's device: its id, or the Device itself where the lists span more than
    one platform (the same id on two platforms is two devices)."""
    if by_device:
        _look_at_clock("reading a device list")
        return list(devices)
    return _device_ids(devices)


def _devices_by_tile(placement: _Placement, by_device: bool) -> list[Any]:
    """The device that holds each tile, tile by tile (for a sharding under which every
    device holds the whole value: every device, in list order)."""
    devices, tiled = placement.devices, placement.tiled
    if tiled is None or placement.order is not None and placement.order.is_range:
        return _device_keys(devices, by_device)
    _look_at_clock("reading a tile assignment")
    positions = (tiled.assignment if placement.order is None
                 else _order_values(placement.order))
    if not by_device and devices.iota is not None and devices.iota.is_range:
        return list(positions)  # device i stands at position i
    keys = _device_keys(devices, by_device)
    _look_at_clock("reading a tile assignment")
    return _gather(keys, positions)


def _block_numbers(placement: _Placement, kept: list[int], n: int) -> Sequence[int]:
    """Each tile's block: its coordinates along the dimensions ``kept`` (those of positive
    size), numbered row-major. Both shardings cut those dimensions alike, so the numbers
    name the same blocks under both."""
    tiled = placement.tiled
    if tiled is None or not any(tiled.dims[j] > 1 for j in kept):
        return [0] * n
    _look_at_clock("numbering the blocks")
    dims, rank = tiled.dims, tiled.data_rank
    if all(dims[j] == 1 for j in range(rank) if j not in kept):
        copies = math.prod(dims[rank:])  # the tiles of one block are neighbours
        if copies == 1:
            return range(n)  # type: ignore[return-value]  # compared in O(1) with another
        return list(map(copies.__rfloordiv__, range(n)))
    # A dimension of size 0 is cut too: its coordinate is left out of the number, which is
    # summed a dimension at a time (each step a few maps, run in C).
    numbers: list[int] = [0] * n
    for j in kept:
        stride, weight = math.prod(dims[j + 1:]), math.prod(dims[k] for k in kept if k > j)
        _look_at_clock("numbering the blocks")
        coordinate = map(dims[j].__rmod__, map(stride.__rfloordiv__, range(n)))
        numbers = list(map(operator.add, numbers, map(weight.__mul__, coordinate)))
    return numbers


# --------------------------------------------------------------------------- solving

def _check(solver: Any, timeout_s: float) -> tuple[Any, float, str]:
    """Run the solver; ``(result, seconds, reason)`` with result None on failure."""
    solver.set("timeout", max(1, int(timeout_s * 1000)))
    start = time.perf_counter()
    try:
        result = solver.check()
    except z3.Z3Exception as error:  # the solver's own failure is an honest unknown
        return None, time.perf_counter() - start, f"the solver failed: {error}"
    seconds = time.perf_counter() - start
    if result == z3.unknown:
        return None, seconds, f"the solver gave up: {solver.reason_unknown()}"
    return result, seconds, ""


_TACTIC: list[Any] = []


def _bit_vector_solver() -> Any:
    """Simplify (multiplications by powers of two become bit shifts), solve the digits'
    equations, and hand the rest to a SAT solver: measured fastest on these formulas."""
    if not _TACTIC:  # built once: building it costs as much as a small proof
        _TACTIC.append(z3.Then(z3.With("simplify", mul2concat=True), "propagate-values",
                               "solve-eqs", "bit-blast", "sat"))
    return _TACTIC[0].solver()


def _symbolic_solver(a: _Placement, b: _Placement, shape: tuple[int, ...] | None, rank: int,
                     max_dim: int, encoding: str, position: tuple[str, Any]
                     ) -> tuple[Any, Callable[[Any], tuple[int, tuple[int, ...]] | None]]:
    """The formula when every order is an iota: no table, independent of the device count."""
    n = len(a.devices)
    width = _width(n, shape, max_dim)
    arithmetic = _Integers() if encoding == "integer" else _BitVectors(width)
    enc = _Encoder(arithmetic, use_digits=encoding == "digits")
    p = enc.free(n, "position")
    shapes = _shapes(shape, rank, max_dim, a, b, enc)
    q = _sigma(*position, p, enc)
    tile_a = None if a.tiled is None else _position_of(a.order, p, enc)
    tile_b = None if b.tiled is None else _position_of(b.order, q, enc)
    differs = _differs(_boxes(a, tile_a, shapes.sizes, shapes.pieces(a, arithmetic), enc),
                       _boxes(b, tile_b, shapes.sizes, shapes.pieces(b, arithmetic), enc))
    solver = _bit_vector_solver() if encoding != "integer" else z3.Solver()
    solver.add(*enc.constraints, differs)

    def witness(model: Any) -> tuple[int, tuple[int, ...]]:
        found = shape if shape is not None else tuple(
            model.eval(v, model_completion=True).as_long() for v in shapes.variables)
        return enc.value(model, p), found

    return solver, witness


def _tile_table(placement: _Placement, positions: list[int]) -> list[int]:
    """The tile index of each position listed (read from the tile assignment)."""
    tiled = placement.tiled
    if tiled is None:
        return [0] * len(positions)
    if placement.order is not None:
        tile_of = _order_positions(placement.order)
    else:
        tile_of = [0] * len(tiled.assignment)
        for t, q in enumerate(_ticking(tiled.assignment, "reading a tile assignment")):
            tile_of[q] = t
    return [tile_of[q] for q in _ticking(positions, "reading a tile table")]


def _table_solver(a: _Placement, b: _Placement, shape: tuple[int, ...] | None, rank: int,
                  max_dim: int, position: tuple[str, Any], clock: _Clock
                  ) -> tuple[Any, Callable[[Any], tuple[int, tuple[int, ...]] | None]]:
    """The formula when a device order or a tile assignment is an explicit table.

    One ground instance per position of the first device list: the tile index each
    sharding gives that position (read from the tables), and the solver checks that the
    two tiles give the same box. The instances come in blocks of about sqrt(N) positions,
    and a solution names only the block; a second, small formula over that block's
    positions names the device.
    """
    n = len(a.devices)
    width = _width(n, shape, max_dim)
    arithmetic = _BitVectors(width)
    enc = _Encoder(arithmetic, use_digits=False)
    shapes = _shapes(shape, rank, max_dim, a, b, enc)
    tile_a, tile_b = z3.BitVec("tile_a", width), z3.BitVec("tile_b", width)
    differs = _differs(
        _boxes(a, _Number(term=tile_a), shapes.sizes, shapes.pieces(a, arithmetic), enc),
        _boxes(b, _Number(term=tile_b), shapes.sizes, shapes.pieces(b, arithmetic), enc))
    clock.check("reading the first sharding's tile table")
    tiles_a = _tile_table(a, list(range(n)))
    clock.check("reading the second sharding's tile table")
    tiles_b = _tile_table(b, _positions_in_b(position, n))
    clock.check("writing the table instances")
    text = _TableText(differs, tiles_a, tiles_b, width, shapes.variables)
    pieces = _table_pieces(text, clock)
    solver = z3.SolverFor("QF_BV")
    solver.add(*enc.constraints)
    solver.add(z3.Or(pieces))

    def witness(model: Any) -> tuple[int, tuple[int, ...]] | None:
        return _position_in_block(model, text, shape, shapes, enc, clock)

    return solver, witness


class _TableText:
    """The ground instances of a table as SMT-LIB text, a block of positions to a term
    guarded by the block's number (the number is all a first solution names)."""

    def __init__(self, differs: Any, tiles_a: list[int], tiles_b: list[int], width: int,
                 shape_variables: list[Any]) -> None:
        self.tiles_a, self.tiles_b = tiles_a, tiles_b
        self.n = len(tiles_a)
        self.block = max(1, math.isqrt(self.n))
        self.count = -(-self.n // self.block)
        self.hex_digits = width // 4
        sort = f"(_ BitVec {width})"
        self.known = {str(v): v for v in shape_variables}
        self.known["block"] = z3.BitVec("block", width)
        self.known["position"] = z3.BitVec("position", width)
        # Declared once as a function, so each instance is a short call, not the whole box
        # comparison written out again.
        self.prelude = (f"(define-fun differs ((tile_a {sort}) (tile_b {sort})) Bool "
                        f"{z3.simplify(differs, mul2concat=True).sexpr()})")

    def literal(self, value: int) -> str:
        return f"#x{value:0{self.hex_digits}x}"

    def instances(self, first: int, last: int, guarded: bool) -> str:
        """Positions ``first`` to ``last - 1``; ``guarded`` ties each to its ``position``,
        for the second formula that names the device."""
        literal, tiles_a, tiles_b = self.literal, self.tiles_a, self.tiles_b
        if guarded:
            return "".join(f" (and (= position {literal(i)}) (differs {literal(tiles_a[i])} "
                           f"{literal(tiles_b[i])}))" for i in range(first, last))
        return "".join(f" (differs {literal(tiles_a[i])} {literal(tiles_b[i])})"
                       for i in range(first, last))

    def blocks(self, first_block: int, last_block: int) -> str:
        size = self.block
        return "".join(
            f" (and (= block {self.literal(k)}) "
            f"(or false{self.instances(k * size, min((k + 1) * size, self.n), False)}))"
            for k in range(first_block, min(last_block, self.count)))

    def parse(self, disjuncts: str) -> Any:
        return z3.parse_smt2_string(f"{self.prelude}(assert (or false{disjuncts}))",
                                    decls=self.known)


def _table_pieces(text: _TableText, clock: _Clock) -> list[Any]:
    """The blocks' terms, for a solver to take as one disjunction."""
    # Written and parsed a piece at a time, so that the clock is read between pieces.
    step = max(1, TABLE_PIECE // text.block)
    pieces = []
    since = time.perf_counter()
    for done, first_block in enumerate(range(0, text.count, step)):
        clock.pace("writing the table instances", done, -(-text.count // step), since)
        pieces.extend(text.parse(text.blocks(first_block, first_block + step)))
    return pieces


def _position_in_block(model: Any, text: _TableText, shape: tuple[int, ...] | None,
                       shapes: _Shapes, enc: _Encoder, clock: _Clock
                       ) -> tuple[int, tuple[int, ...]] | None:
    """The position, in the block a solution names, where the placements differ for the
    shape the solution found; None when the second look finds none."""
    found = shape if shape is not None else tuple(
        model.eval(v, model_completion=True).as_long() for v in shapes.variables)
    first = model.eval(text.known["block"], model_completion=True).as_long() * text.block
    inner = z3.SolverFor("QF_BV")
    inner.add(*enc.constraints, *[v == enc.arithmetic.const(k)
                                  for v, k in zip(shapes.variables, found)])
    inner.add(text.parse(text.instances(first, min(first + text.block, text.n), True)))
    result, _, _ = _check(inner, max(0.001, clock.left()))
    if result != z3.sat:
        return None
    return inner.model().eval(text.known["position"], model_completion=True).as_long(), found


def _positions_in_b(position: tuple[str, Any], n: int) -> list[int]:
    """Where each position of the first device list stands in the second, as a list."""
    kind, data = position
    if kind == "identity":
        return list(range(n))
    if kind == "table":
        return list(data)
    if kind == "iota":
        return _order_values(data)
    a_order, b_order = data
    where_in_b = _order_positions(b_order)
    return [where_in_b[v] for v in _ticking(_order_values(a_order), "matching the device orders")]


def _needs_tables(a: _Placement, b: _Placement, position: tuple[str, Any]) -> bool:
    if position[0] == "table":
        return True
    return any(p.tiled is not None and p.order is None for p in (a, b))


@dataclasses.dataclass(frozen=True)
class _Question:
    """What is asked: one shape (SMT-1), or every shape of a rank up to max_dim (SMT-2).

    ``example`` is the one shape a direct answer looks at: the shape asked, or for SMT-2
    the shape in scope with the most dimensions of positive size (see :func:`_smallest_shape`).
    """

    shape: tuple[int, ...] | None
    rank: int
    max_dim: int
    example: tuple[int, ...]

    def proved(self, clock: _Clock, method: str, tables: bool,
               solver_seconds: float = 0.0) -> Proved:
        if self.shape is not None:
            return Proved(self.shape, None, None, solver_seconds, clock.elapsed(), tables, method)
        return Proved(None, self.rank, self.max_dim, solver_seconds, clock.elapsed(), tables,
                      method)


def _decide(a: Any, b: Any, shape: tuple[int, ...] | None, rank: int, max_dim: int,
            timeout_s: float, encoding: str, method: str) -> Answer:
    """The common body of SMT-1 and SMT-2: the whole call keeps to ``timeout_s``."""
    clock = _Clock(timeout_s)
    check_shape = shape if shape is not None else (0,) * rank
    pa, pb = _placement(a, check_shape), _placement(b, check_shape)
    example = shape if shape is not None else _smallest_shape(pa, pb, rank, max_dim)
    question = _Question(shape, rank, max_dim, example)
    token = _CLOCK.set(clock)
    try:
        early = _decided_early(a, b, pa, pb, question, clock)
        if early is not None:
            return early
        return _choose(a, b, pa, pb, question, encoding, method, clock)
    except _OutOfTime as late:
        return Unknown(f"the time limit of {timeout_s:g} s ran out while {late.doing}", 0.0,
                       clock.elapsed())
    finally:
        _CLOCK.reset(token)


def _decided_early(a: Any, b: Any, pa: _Placement, pb: _Placement, question: _Question,
                   clock: _Clock) -> Answer | None:
    """The answers that need no order read: device counts, memory kinds, platforms.

    These come before any work in proportion to the devices, so that a list of 2^40
    devices against one of 8 is answered at once.
    """
    example = question.example
    kinds = (None, None) if a.memory_kind == b.memory_kind else (a.memory_kind, b.memory_kind)
    if len(pa.devices) != len(pb.devices):
        device = _first_unshared_device(pa.devices, pb.devices)
        assert device is not None  # lists of other lengths never hold the same devices
        return _counterexample(pa, pb, example, device, None, kinds, "direct", clock)
    if not pa.devices:  # no device holds anything: only the memory kinds can differ
        if kinds == (None, None):
            return question.proved(clock, "direct", False)
        return Counterexample(None, None, None, example, 0.0, clock.elapsed(), False, "direct",
                              *kinds)
    if kinds != (None, None):
        # EQ-2: in another memory, every device's box is placed otherwise; name the first.
        first = pa.devices[0]
        return _counterexample(pa, pb, example, first.id, first.platform, kinds, "direct", clock)
    if len(pa.platforms) == len(pb.platforms) == 1 and pa.platforms != pb.platforms:
        # The same ids on another platform are other devices: b holds none of a's.
        first = pa.devices[0]
        return _counterexample(pa, pb, example, first.id, first.platform, kinds, "direct", clock)
    if not any(example) and pa.devices.iota is not None and pb.devices.iota is not None:
        # Every device holds the empty box (or the scalar): the same devices, the same boxes.
        return question.proved(clock, "direct", False)
    return None


_PLATFORM = operator.attrgetter("platform")


def _symbolic(pa: _Placement, pb: _Placement) -> bool:
    """Whether every order is an iota: both device lists and both tile assignments."""
    return all(p.devices.iota is not None and (p.tiled is None or p.order is not None)
               for p in (pa, pb))


def _choose(a: Any, b: Any, pa: _Placement, pb: _Placement, question: _Question,
            encoding: str, method: str, clock: _Clock) -> Answer:
    """The direct pass where an order is explicit data, or the mesh is small, or the shape
    is empty; the solver for large symbolic orders (or where it is asked for)."""
    n = len(pa.devices)
    symbolic = _symbolic(pa, pb)
    by_device = len(pa.platforms | pb.platforms) > 1
    empty = not any(question.example)
    if method == "auto":
        method = "solver" if symbolic and n > ENUMERATION_LIMIT else "direct"
    if method == "solver" and not by_device and not empty:
        return _solve(a, b, pa, pb, question, encoding, clock)
    if symbolic and n > TABLE_LIMIT:
        return Unknown(f"writing out symbolic orders of {n} devices for a direct pass: more "
                       f"than the {TABLE_LIMIT} it writes out", 0.0, clock.elapsed())
    return _direct(pa, pb, question, by_device, "enumeration" if symbolic else "direct", clock)


def _solve(a: Any, b: Any, pa: _Placement, pb: _Placement, question: _Question,
           encoding: str, clock: _Clock) -> Answer:
    elapsed = clock.elapsed
    shape, rank, max_dim = question.shape, question.rank, question.max_dim
    clock.check("comparing the device sets")

    # Devices held by one sharding only: no solver needed to name one.
    unshared = _first_unshared_device(pa.devices, pb.devices)
    if unshared is not None:
        return _counterexample(pa, pb, question.example, unshared, None, (None, None), "solver",
                               clock)
    clock.check("matching the device orders")
    position = _position_map(pa.devices, pb.devices)
    clock.check("matching the device orders")
    tables = _needs_tables(pa, pb, position)
    if tables and len(pa.devices) > TABLE_LIMIT:
        return Unknown(f"an explicit device order or tile assignment of {len(pa.devices)} "
                       f"entries is larger than the {TABLE_LIMIT} the encoder expands",
                       0.0, elapsed())
    if tables:
        solver, witness = _table_solver(pa, pb, shape, rank, max_dim, position, clock)
    else:
        solver, witness = _symbolic_solver(pa, pb, shape, rank, max_dim, encoding, position)
    clock.check("building the formula")
    result, solver_seconds, reason = _check(solver, max(0.001, clock.left()))
    if result is None:
        return Unknown(reason, solver_seconds, elapsed())
    if result == z3.unsat:
        return question.proved(clock, "solver", tables, solver_seconds)
    found = witness(solver.model())
    if found is None:
        return Unknown("the solver found a block of positions where the placements differ, "
                       "but no position in it on a second look", solver_seconds, elapsed())
    p, found_shape = found
    device = pa.devices.id_at(p)
    box_a, box_b = box_of(a, found_shape, device), box_of(b, found_shape, device)
    if box_a == box_b:  # the formula and IDX-1 disagree: an encoding bug, said as such
        return Unknown(f"internal: the solver named device {device} for shape {found_shape}, "
                       f"but box_of gives it {box_a} under both", solver_seconds, elapsed())
    return Counterexample(device, box_a, box_b, found_shape, solver_seconds, elapsed(), tables,
                          "solver")


def _counterexample(pa: _Placement, pb: _Placement, shape: tuple[int, ...], device: int,
                    platform: str | None, kinds: tuple[str | None, str | None], method: str,
                    clock: _Clock, tables: bool = False,
                    tiles: tuple[int | None, int | None] = (None, None)) -> Answer:
    """The answer naming ``device`` (on ``platform``; None: the lists' own), its box under
    each sharding (IDX-1; ``tiles``: the tiles that hold it, where known) and the memory
    kinds when they differ."""
    box_a = pa.box(shape, device, platform, tiles[0])
    box_b = pb.box(shape, device, platform, tiles[1])
    if box_a == box_b and kinds == (None, None):  # the pass and IDX-1 disagree: a bug
        return Unknown(f"internal: the {method} pass named device {device} for shape {shape}, "
                       f"but box_of gives it {box_a} under both", 0.0, clock.elapsed())
    return Counterexample(device, box_a, box_b, shape, 0.0, clock.elapsed(), tables, method,
                          *kinds)


def _smallest_shape(a: _Placement, b: _Placement, rank: int, max_dim: int) -> tuple[int, ...]:
    """The shape in scope of SMT-2 with the most dimensions of positive size: the least
    positive size both divide along each dimension, or 0 when that exceeds ``max_dim``.

    Which devices hold different boxes depends only on which dimensions have positive size
    (see :func:`_direct`), and a dimension that is positive in some shape in scope is
    positive in this one: the placements differ at some shape in scope exactly when they
    differ at this one. A direct answer to SMT-2 looks at this shape alone.
    """
    out = []
    for j in range(rank):
        least = math.lcm((a.tiles or (1,) * rank)[j], (b.tiles or (1,) * rank)[j])
        out.append(least if least <= max_dim else 0)
    return tuple(out)


def _check_time_limit(timeout_s: Any) -> float:
    """SMT-1's limit: a real number of seconds, above 0 and at most z3's longest limit."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) and not (
            is_int(timeout_s) or type(timeout_s).__name__ in ("float32", "float64")):
        raise reject(BadTimeLimit(timeout_s, MAX_TIMEOUT_S))
    try:
        seconds = float(timeout_s)
    except (OverflowError, ValueError):  # an integer too large for a float
        raise reject(TimeLimitOutOfRange(timeout_s, MAX_TIMEOUT_S)) from None
    if not (0 < seconds <= MAX_TIMEOUT_S):  # NaN fails this too
        raise reject(TimeLimitOutOfRange(timeout_s, MAX_TIMEOUT_S))
    return seconds


def _check_rank(rank: int, what: str) -> int:
    if rank > MAX_RANK:
        raise reject(RankTooHigh(what, rank, MAX_RANK))
    return rank


def _check_encoding(encoding: Any) -> str:
    if encoding not in ENCODINGS:
        raise reject(UnknownEncoding(encoding, ENCODINGS))
    return encoding


def _check_method(method: Any) -> str:
    if not isinstance(method, str) or method not in METHODS:
        raise reject(UnknownMethod(method, METHODS))
    return method


# --------------------------------------------------------------------------- the rules

@rule("SMT-1", mirrors="(none: JAX has no such notion; EQ-2 decided by proof, "
                       "where one compares devices_indices_map by hand)")
def prove_equivalent(a: Any, b: Any, shape: Any = None, *, rank: Any = None,
                     max_dim: Any = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                     encoding: str = "digits", method: str = "auto") -> Answer:
    """Two shardings place a value of a shape alike exactly when they hold it in the same memory kind and no device holds a different box under one than under the other; otherwise the answer names such a device.

    This is EQ-2, decided with a proof. The answer is :class:`Proved`, a
    :class:`Counterexample` (a device and its two boxes, a box None for a device that only
    one sharding spans, and the two memory kinds when they differ) or :class:`Unknown`.
    Without a shape, give ``rank`` and ``max_dim`` to prove for every shape at once (SMT-2).
    Input the spec rejects (a shape that does not divide, a rank too small, an abstract
    mesh) raises the spec's rejection, as does a ``timeout_s`` that is not a number of
    seconds above 0, or a ``method`` not in :data:`METHODS`. The time limit covers the
    whole call, whatever the device counts: past it the answer is :class:`Unknown`.

    How it is decided (``method="auto"``): device counts, memory kinds or platforms that
    differ, and shapes of size 0 in every dimension, are answered before any device order
    is read. An explicit device list or tile assignment is data the size of the mesh, read
    in one direct pass. Symbolic (iota) orders go to the solver, whose formula does not
    grow with the device count, except on meshes of at most :data:`ENUMERATION_LIMIT`
    devices, which are written out and passed over (faster there, as measured).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> transposed = Mesh((4, 2), ("y", "x"), [0, 4, 1, 5, 2, 6, 3, 7])
    >>> prove_equivalent(NamedSharding(mesh, P("y", "x")),
    ...                  NamedSharding(transposed, P("y", "x")), (8, 8))
    Proved(shape=(8, 8))
    >>> found = prove_equivalent(NamedSharding(mesh, P("x")), NamedSharding(mesh, P("y")), (8,))
    >>> found.equivalent, found.box_a != found.box_b
    (False, True)
    >>> prove_equivalent(NamedSharding(mesh, P("x")), GSPMDSharding(range(4), "{replicated}"), (8,))
    Counterexample(device=4, box_a=((4, 8),), box_b=None, shape=(8,))
    >>> pinned = NamedSharding(mesh, P("x"), memory_kind="pinned_host")
    >>> prove_equivalent(NamedSharding(mesh, P("x")), pinned, (8,))
    Counterexample(device=0, box_a=((0, 4),), box_b=((0, 4),), shape=(8,), memory_kind_a='device', memory_kind_b='pinned_host')
    """
    encoding = _check_encoding(encoding)
    method = _check_method(method)
    timeout_s = _check_time_limit(timeout_s)
    if shape is None:
        if rank is None or max_dim is None:
            raise reject(NothingToProve(shape, rank, max_dim))
        return prove_for_every_shape(a, b, rank=rank, max_dim=max_dim, timeout_s=timeout_s,
                                     encoding=encoding, method=method)
    if rank is not None or max_dim is not None:
        raise reject(NothingToProve(shape, rank, max_dim))
    shape = check_dims(shape, what="array dimensions")
    _check_rank(len(shape), "a shape of rank")
    return _decide(a, b, shape, len(shape), 0, timeout_s, encoding, method)


@rule("SMT-2", mirrors="(none: JAX places one shape at a time)")
def prove_for_every_shape(a: Any, b: Any, *, rank: Any, max_dim: Any,
                          timeout_s: float = DEFAULT_TIMEOUT_S,
                          encoding: str = "digits", method: str = "auto") -> Answer:
    """Two shardings place alike every value of a given rank exactly when they hold values in the same memory kind and no shape in scope and no device make their boxes differ.

    (C1) A shape is in scope when it has ``rank`` dimensions, each from 0 to ``max_dim``,
    that both shardings divide evenly (DIV-1); a zero-size dimension divides everything.
    (C2) A shape out of scope is never a counterexample, however the two place it.
    (C3) Where they differ, the answer names a shape in scope and a device, with the
    device's box under each sharding (None under one that does not span it), and the two
    memory kinds when they differ.

    Which devices differ depends only on which dimensions have positive size, so a direct
    pass (explicit orders, small meshes) looks at one shape: the one in scope with the most
    dimensions of positive size. The solver takes the shape as unknowns.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> flat = Mesh.iota((8,), ("z",))
    >>> prove_for_every_shape(NamedSharding(mesh, P(("x", "y"))), NamedSharding(flat, P("z")),
    ...                       rank=1, max_dim=1024)
    Proved(rank=1, max_dim=1024)
    >>> found = prove_for_every_shape(NamedSharding(mesh, P("x")), NamedSharding(mesh, P()),
    ...                               rank=1, max_dim=1024)
    >>> found.equivalent, found.shape[0] > 0
    (False, True)
    """
    encoding = _check_encoding(encoding)
    method = _check_method(method)
    timeout_s = _check_time_limit(timeout_s)
    (rank, max_dim) = check_dims((rank, max_dim), what="the rank and max_dim")
    _check_rank(rank, "rank")
    return _decide(a, b, None, rank, max_dim, timeout_s, encoding, method)
