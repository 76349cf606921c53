"""Integers, dimensions and permutations: the checks every value type starts with.

Meshes, device lists, iota orders, tile assignments and shapes are all built from
sequences of non-negative integers; the two rules here (``VAL-1``, ``VAL-2``) say which
sequences are valid, once, for all of them. They import nothing of the spec but the rule
registry, so that :mod:`.iota` and :mod:`.values` can both use them without importing
each other.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Iterable

from .rules import Failure, Rejection, reject, require, rule

__all__ = ["check_dims", "check_perm", "check_count", "check_rank_count", "is_int", "LIMIT",
           "MAX_RANK", "NotAnInteger", "NegativeSize", "TooLarge", "RankTooLarge",
           "NotAPermutation", "suffix_products"]

# Sizes, ids and element counts are int64 in XLA and JAX: at most 2**63 - 1.
LIMIT = 2**63 - 1

# The largest rank the spec describes when a query is given a rank as a number (not a
# shape): the answer has one entry per dimension, so a rank of 2**40 would be built as a
# tuple of 2**40 entries. Far above any array JAX can hold (numpy stops at 64 dimensions).
MAX_RANK = 65_536


@dataclasses.dataclass(frozen=True)
class NotAnInteger(Failure, rule="VAL-1", error=TypeError):
    template = "{what} must be integers, got {value!r} ({kind})"
    what: str
    value: Any
    kind: str


@dataclasses.dataclass(frozen=True)
class NegativeSize(Failure, rule="VAL-1"):
    @property
    def least(self) -> str:
        return "positive" if self.what == "mesh axis sizes" else "non-negative"

    template = "{what} must be {least}, got {value} in {dims}"
    what: str
    value: int
    dims: tuple


@dataclasses.dataclass(frozen=True)
class TooLarge(Failure, rule="VAL-1", error=OverflowError):
    template = "{what} must be at most 2**63 - 1 (XLA's int64), got {value} in {dims}"
    what: str
    value: int
    dims: tuple


@dataclasses.dataclass(frozen=True)
class RankTooLarge(Failure, rule="VAL-1", error=OverflowError):
    template = ("{what} must be at most {limit:,} (the largest rank the spec "
                "describes), got {value:,}")
    what: str
    value: int
    limit: int


@dataclasses.dataclass(frozen=True)
class NotAPermutation(Failure, rule="VAL-2"):
    template = "{perm} is not a permutation of 0..{last}"
    perm: tuple
    last: int


def is_int(x: Any) -> bool:
    """Whether ``x`` is an integer: an int, or a value whose type says it is one
    (``__index__``, as numpy's integers); bools, numpy bools and classes are not."""
    if isinstance(x, bool) or isinstance(x, type):
        return False
    if isinstance(x, int):
        return True
    kind = type(x)
    return hasattr(kind, "__index__") and kind.__name__ not in ("bool_", "bool")


def _index(x: Any, what: str) -> int:
    if not is_int(x):
        raise reject(NotAnInteger(what, x, type(x).__name__))
    try:
        value = operator.index(x)
    except Exception:  # a type that claims to be an integer but is not one
        raise reject(NotAnInteger(what, x, type(x).__name__)) from None
    if not isinstance(value, int):
        raise reject(NotAnInteger(what, x, type(x).__name__))
    return value


@rule("VAL-1", mirrors="(input checking; JAX often accepts these and fails later)")
def check_dims(dims: Any, *, what: str = "dimensions") -> tuple[int, ...]:
    """Dimensions, sizes and ids are a sequence of integers from 0 to 2**63 - 1 (bools are not integers).

    >>> check_dims((2, 4))
    (2, 4)
    >>> check_dims((2, -1), what="array dimensions")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-1]: array dimensions must be non-negative, got -1 in (2, -1)
    """
    # A tuple of plain ints in range is already what is returned (the common case)
    if type(dims) is tuple and all(type(d) is int and 0 <= d <= LIMIT for d in dims):
        return dims
    if isinstance(dims, (str, bytes, bytearray, dict)) or not isinstance(dims, Iterable):
        raise reject(NotAnInteger(what, dims, type(dims).__name__))
    out = []
    try:
        # Read one entry at a time: a long iterable of the wrong things (a device list of a
        # million devices) is refused at its first entry, not after it was all built.
        for d in dims:
            out.append(_index(d, what))
    except Exception as error:  # an iterable that fails while it is read
        if isinstance(error, Rejection):
            raise
        raise reject(NotAnInteger(what, dims, type(dims).__name__)) from None
    items = tuple(out)
    for d in items:
        if d < 0:
            raise reject(NegativeSize(what, d, items))
        if d > LIMIT:
            raise reject(TooLarge(what, d, items))
    return items


def suffix_products(dims: tuple[int, ...] | list[int]) -> list[int]:
    """The product of the dimensions after each one: the row-major strides of ``dims``,
    in one pass (ranks run to tens of thousands).

    >>> suffix_products((2, 3, 4))
    [12, 4, 1]
    """
    out = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        out[i] = out[i + 1] * dims[i + 1]
    return out


def check_count(dims: tuple[int, ...], what: str) -> int:
    """The product of checked ``dims`` (VAL-1 again: a count of devices or tiles is int64)."""
    total = math.prod(dims)
    require(total <= LIMIT, lambda: TooLarge(f"the product of {what}", total, dims))
    return total


def check_rank_count(rank: Any, what: str = "a rank") -> int:
    """A rank given as a number: a size (VAL-1) no larger than :data:`MAX_RANK`."""
    (rank,) = check_dims((rank,), what=what)
    require(rank <= MAX_RANK, lambda: RankTooLarge(what, rank, MAX_RANK))
    return rank


@rule("VAL-2", mirrors="(input checking of xc.HloSharding.iota_tile's transpose_perm)")
def check_perm(perm: Any, rank: int) -> tuple[int, ...]:
    """A permutation holds each of ``0`` to ``rank - 1`` once.

    >>> check_perm((1, 0), 2)
    (1, 0)
    >>> check_perm((0, 0), 2)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-2]: (0, 0) is not a permutation of 0..1
    """
    perm = check_dims(perm, what="permutation entries")
    require(sorted(perm) == list(range(rank)), lambda: NotAPermutation(perm, rank - 1))
    return perm
