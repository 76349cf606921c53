"""How a placement becomes a formula: the solver's encodings of device orders and boxes.

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
"""

from __future__ import annotations

import dataclasses
from typing import Any

import z3

from ..core.iota import Iota
from .orders import Placement

# The doors the prover's other modules use; the package's public names are smt.py's.
__all__ = ["BitVectors", "Integers", "Number", "Encoder", "position_in_order", "sigma",
           "box_terms", "boxes_differ", "Shapes", "shape_terms", "bit_width"]


# --------------------------------------------------------------------------- arithmetic

class BitVectors:
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


class Integers:
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
class Number:
    """A non-negative integer as the encoder holds it: a sum of digits times coefficients
    (``terms``: digit -> coefficient), or an opaque solver term."""

    terms: dict[int, int] | None = None
    term: Any = None


class Encoder:
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

    def free(self, radix: int, name: str) -> Number:
        """A free number ranging over ``0 .. radix-1``."""
        if not self.use_digits:
            term, bounds = self.arithmetic.variable(name, radix)
            self.constraints += bounds
            return Number(term=term)
        if radix == 1:
            return Number(terms={})
        self.radix.append(radix)
        return Number(terms={len(self.radix) - 1: 1})

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

    def term(self, x: Number) -> Any:
        if x.terms is None:
            return x.term
        total = self.arithmetic.const(0)
        for digit, coefficient in sorted(self._expanded(x.terms).items()):
            total = total + self._digit_term(digit) * self.arithmetic.const(coefficient)
        return z3.simplify(total) if self.use_digits else total

    def value(self, model: Any, x: Number) -> int:
        return model.eval(self.term(x), model_completion=True).as_long()

    # -- arithmetic on numbers

    def scale(self, x: Number, k: int) -> Number:
        if x.terms is not None:
            return Number(terms={d: c * k for d, c in x.terms.items()})
        return Number(term=x.term * self.arithmetic.const(k))

    def add(self, x: Number, y: Number) -> Number:
        if x.terms is not None and y.terms is not None:
            out = dict(x.terms)
            for d, c in y.terms.items():
                out[d] = out.get(d, 0) + c
            return Number(terms=out)
        return Number(term=self.term(x) + self.term(y))

    def divmod(self, x: Number, c: int) -> tuple[Number, Number]:
        """``(x // c, x % c)``: on digits when the boundary ``c`` falls between them."""
        if c == 1:
            return x, Number(terms={})
        if x.terms is not None:
            split = self._divmod_digits(x.terms, c)
            if split is not None:
                return split
        term = self.term(x)
        return (Number(term=self.arithmetic.div(term, c)),
                Number(term=self.arithmetic.mod(term, c)))

    def _divmod_digits(self, terms: dict[int, int], c: int) -> tuple[Number, Number] | None:
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
        return Number(terms={d: k // c for d, k in high_part.items()}), Number(terms=low_part)


def _unravel(x: Number, dims: tuple[int, ...], enc: Encoder) -> list[Number]:
    """Row-major coordinates of ``x`` in an array of shape ``dims`` (iota.unravel)."""
    coords = []
    for size in reversed(dims):
        x, c = enc.divmod(x, size)
        coords.append(c)
    return coords[::-1]


def _ravel(coords: list[Number], dims: tuple[int, ...], enc: Encoder) -> Number:
    """Row-major flat position of ``coords`` in an array of shape ``dims`` (iota.ravel)."""
    flat = Number(terms={})
    for c, size in zip(coords, dims):
        flat = enc.add(enc.scale(flat, size), c)
    return flat


def _value_at(order: Iota, position: Number, enc: Encoder) -> Number:
    """``order[position]``: unravel over the transposed dims, undo the transpose, ravel."""
    coords = _unravel(position, order.transposed_dims, enc)
    original: list[Number] = [Number(terms={})] * len(coords)
    for k, p in enumerate(order.perm):
        original[p] = coords[k]
    return _ravel(original, order.reshape_dims, enc)


def position_in_order(order: Iota, value: Number, enc: Encoder) -> Number:
    """Where ``value`` stands in ``order``: unravel over the reshape dims, transpose, ravel."""
    original = _unravel(value, order.reshape_dims, enc)
    return _ravel([original[p] for p in order.perm], order.transposed_dims, enc)


# --------------------------------------------------------------------------- devices and boxes

def sigma(kind: str, data: Any, p: Number, enc: Encoder) -> Number:
    """The position in the second device list of the device at position ``p`` of the first
    (``kind`` and ``data`` as ``solver._position_map`` reads them)."""
    if kind == "identity":
        return p
    if kind == "iotas":
        a_order, b_order = data
        return position_in_order(b_order, _value_at(a_order, p, enc), enc)
    return _value_at(data, p, enc)


def box_terms(placement: Placement, tile: Number | None, sizes: list[Any], pieces: list[Any],
              enc: Encoder) -> list[tuple[Any, Any]]:
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


def boxes_differ(boxes_a: list[tuple[Any, Any]], boxes_b: list[tuple[Any, Any]]) -> Any:
    """The formula that the two boxes differ along some dimension (false for rank 0)."""
    return z3.Or([z3.Or(sa != sb, ea != eb) for (sa, ea), (sb, eb) in zip(boxes_a, boxes_b)]
                 + [z3.BoolVal(False)])


@dataclasses.dataclass
class Shapes:
    """The shape as the solver sees it: constants, or variables within bounds."""

    sizes: list[Any]
    concrete: tuple[int, ...] | None
    variables: list[Any]

    def pieces(self, placement: Placement, arithmetic: Any) -> list[Any]:
        tiles = placement.tiles or (1,) * len(self.sizes)
        if self.concrete is not None:
            return [n // t for n, t in zip(self.concrete, tiles)]
        return [arithmetic.div(n, t) for n, t in zip(self.sizes, tiles)]


def shape_terms(shape: tuple[int, ...] | None, rank: int, max_dim: int, a: Placement,
                b: Placement, enc: Encoder) -> Shapes:
    """The shape asked (constants), or every shape of ``rank`` up to ``max_dim`` that both
    placements divide (variables, their bounds added to ``enc``)."""
    if shape is not None:
        return Shapes([enc.arithmetic.const(n) for n in shape], shape, [])
    sizes = []
    for j in range(rank):
        n, bounds = enc.arithmetic.variable(f"dim{j}", max_dim + 1, narrow=False)
        enc.constraints += bounds
        # Only the shapes both shardings divide (DIV-1) are in scope.
        for placement in (a, b):
            if placement.tiles is not None and placement.tiles[j] != 1:
                enc.constraints.append(enc.arithmetic.divides(placement.tiles[j], n))
        sizes.append(n)
    return Shapes(sizes, None, sizes)


def bit_width(n: int, shape: tuple[int, ...] | None, max_dim: int) -> int:
    """The bit-vector width that holds every value involved: ``n`` devices, the sizes."""
    largest = max([n, max_dim, *(shape or ())])
    bits = largest.bit_length() + 2
    return bits + (-bits) % 4  # a multiple of 4, for hexadecimal literals
