"""Placement-equivalence proved: a proof, or the device where two placements part.

The prover's entry points, :func:`prove_equivalent` (SMT-1) and
:func:`prove_for_every_shape` (SMT-2), with their failures and the choice of which way
decides a question. It needs z3 (``pip install 'shardlaw[z3]'``), which only the solver's
modules import; ``shardlaw.spec`` loads this module on first use of :func:`prove_equivalent`.

Which way decides
-----------------
The question is EQ-2's: the same devices, each holding the same box, in the same memory
kind. What is cheap is answered first, before any device order is read: device counts
that differ (a symbolic list of 2^40 devices against 8 costs what the 8 cost), memory
kinds or platforms that differ, shapes of size 0 in every dimension. Then:

* an *explicit* device list or tile assignment is data the size of the mesh, and the
  direct pass reads it: a few passes in C over the devices (``benchmarks/bench_prove.py``
  part 1: 2^16 devices in milliseconds, 2^20 in a few hundred), where a solver given one
  ground instance per device took 0.6 s and 16 s;
* *symbolic* (iota) orders go to the solver, whose formula does not grow with the device
  count: a pair over 2^20 devices is proved in milliseconds. Below ``ENUMERATION_LIMIT``
  devices, writing the orders out and passing over them is faster than building and
  solving the formula (part 3), and is what is done;
* ``prove_for_every_shape`` (SMT-2) takes the shape as unknowns in the solver. The direct
  pass needs only one shape: which devices differ depends on which dimensions have
  positive size, and one shape in scope has the most.

``method="direct"`` or ``method="solver"`` forces one way for every question; the tests
hold the two, and the default, to enumeration of EQ-2.

The prover's rooms
------------------
``answers.py`` (:class:`Proved`, :class:`Counterexample`, :class:`Unknown`), ``clock.py`` (the
one time limit of a call), ``orders.py`` (what is read of a sharding: its placement, its
device orders), ``direct.py`` (the cases decided early and the direct pass, without z3),
``encoding.py`` (device orders and boxes as solver terms) and ``solver.py`` (the formula,
and the device read back from a solution).

Answers are :class:`Proved`, :class:`Counterexample` or :class:`Unknown` (the time limit ran
out, or an order was too large to expand); input that the spec rejects raises the spec's
:class:`~shardlaw.spec.Rejection`, never a solver error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.dims import is_int
from ..core.rules import Failure, reject, rule
from ..core.shardings import GSPMDSharding, NamedSharding
from ..core.values import Mesh, P, check_dims
from .answers import Answer, Counterexample, Proved, Question, Unknown
from .clock import Clock, OutOfTime, running
from .direct import decided_early, direct_pass, smallest_shape
from .orders import Placement, read_placement
from .solver import solver_answer

__all__ = [
    "prove_equivalent", "prove_for_every_shape", "Proved", "Counterexample", "Unknown",
    "ENCODINGS", "METHODS", "DEFAULT_TIMEOUT_S", "TABLE_LIMIT", "ENUMERATION_LIMIT",
]

# Names the docstring examples use (the docs run them with this module's namespace).
_EXAMPLE_NAMES = (GSPMDSharding, Mesh, NamedSharding, P)

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

# How orders become arithmetic: digits (the default), or the literal division of the
# solver's bit-vectors or integers (kept for the measurements that chose the default).
ENCODINGS = ("digits", "bitvector", "integer")

# How a question is decided: "auto" (the default: explicit orders by a direct pass, symbolic
# ones by enumeration up to ENUMERATION_LIMIT devices and by the solver above), or one way
# for every question ("direct" writes symbolic orders out too; "solver" expands explicit
# ones into solver instances), kept for the measurements and the tests that hold them equal.
METHODS = ("auto", "direct", "solver")


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


# --------------------------------------------------------------------------- which way decides

def _decide(a: Any, b: Any, shape: tuple[int, ...] | None, rank: int, max_dim: int,
            timeout_s: float, encoding: str, method: str) -> Answer:
    """The common body of SMT-1 and SMT-2: the whole call keeps to ``timeout_s``."""
    clock = Clock(timeout_s)
    check_shape = shape if shape is not None else (0,) * rank
    pa, pb = read_placement(a, check_shape), read_placement(b, check_shape)
    example = shape if shape is not None else smallest_shape(pa, pb, rank, max_dim)
    question = Question(shape, rank, max_dim, example)
    try:
        with running(clock):
            early = decided_early(a, b, pa, pb, question, clock)
            if early is not None:
                return early
            return _choose(a, b, pa, pb, question, encoding, method, clock)
    except OutOfTime as late:
        return Unknown(f"the time limit of {timeout_s:g} s ran out while {late.doing}", 0.0,
                       clock.elapsed())


def _symbolic(pa: Placement, pb: Placement) -> bool:
    """Whether every order is an iota: both device lists and both tile assignments."""
    return all(p.devices.iota is not None and (p.tiled is None or p.order is not None)
               for p in (pa, pb))


def _choose(a: Any, b: Any, pa: Placement, pb: Placement, question: Question,
            encoding: str, method: str, clock: Clock) -> Answer:
    """The direct pass where an order is explicit data, or the mesh is small, or the shape
    is empty; the solver for large symbolic orders (or where it is asked for)."""
    n = len(pa.devices)
    symbolic = _symbolic(pa, pb)
    by_device = len(pa.platforms | pb.platforms) > 1
    empty = not any(question.example)
    if method == "auto":
        method = "solver" if symbolic and n > ENUMERATION_LIMIT else "direct"
    if method == "solver" and not by_device and not empty:
        return solver_answer(a, b, pa, pb, question, encoding, clock, TABLE_LIMIT)
    if symbolic and n > TABLE_LIMIT:
        return Unknown(f"writing out symbolic orders of {n} devices for a direct pass: more "
                       f"than the {TABLE_LIMIT} it writes out", 0.0, clock.elapsed())
    return direct_pass(pa, pb, question, by_device, "enumeration" if symbolic else "direct", clock)


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
