"""The prover's answers: a proof, the device where two placements part, or no answer.

:class:`Proved`, :class:`Counterexample` and :class:`Unknown` are what SMT-1 and SMT-2
(``smt.py``) answer, however the question was decided (their ``method``: a case decided
before any order is read, the direct pass, enumeration or the solver). :class:`Question` is
what was asked, and makes the proof that answers it. No z3 here.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from .clock import Clock

# Question is a door for the prover's other modules; the rest are the package's names too.
__all__ = ["Proved", "Counterexample", "Unknown", "Answer", "Box", "Question"]

Box = tuple[tuple[int, int], ...]


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


@dataclasses.dataclass(frozen=True)
class Question:
    """What is asked: one shape (SMT-1), or every shape of a rank up to max_dim (SMT-2).

    ``example`` is the one shape a direct answer looks at: the shape asked, or for SMT-2
    the shape in scope with the most dimensions of positive size
    (:func:`~shardlaw.spec.prove.direct.smallest_shape`).
    """

    shape: tuple[int, ...] | None
    rank: int
    max_dim: int
    example: tuple[int, ...]

    def proved(self, clock: Clock, method: str, tables: bool,
               solver_seconds: float = 0.0) -> Proved:
        if self.shape is not None:
            return Proved(self.shape, None, None, solver_seconds, clock.elapsed(), tables, method)
        return Proved(None, self.rank, self.max_dim, solver_seconds, clock.elapsed(), tables,
                      method)
