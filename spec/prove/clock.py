"""The prover's time limit: one per call, for reading the orders, building the formula and
solving it.

Past the limit a call answers :class:`~shardlaw.spec.prove.answers.Unknown`. The loops over
explicit orders, wherever they run, read the clock of the call in progress between their
steps (:func:`look_at_clock`, :func:`ticking`); :func:`running` makes a call's clock the one in
progress. No z3 here.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import time
from typing import Any, Iterator

# The doors the prover's other modules use; the package's public names are smt.py's.
__all__ = ["OutOfTime", "Clock", "running", "ticking", "look_at_clock"]


class OutOfTime(Exception):
    """The time limit ran out before the formula was built (answered as Unknown)."""

    def __init__(self, doing: str) -> None:
        super().__init__(doing)
        self.doing = doing


class Clock:
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
            raise OutOfTime(doing)

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
                raise OutOfTime(f"{doing} (about {per_piece * total:.1f} s in all)")


# The clock of the call in progress, read by the loops over explicit tables.
_CLOCK: contextvars.ContextVar[Clock | None] = contextvars.ContextVar("shardlaw_smt_clock",
                                                                     default=None)


@contextlib.contextmanager
def running(clock: Clock) -> Iterator[Clock]:
    """Within the block, ``clock`` is the clock of the call in progress."""
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


def ticking(items: Any, doing: str) -> Any:
    """``items``, the clock of the call in progress (if any) read between chunks of them."""
    clock = _CLOCK.get()
    return items if clock is None else clock.ticking(items, doing)


def look_at_clock(doing: str) -> None:
    """Between the steps of a long pass: past the building share of the limit, give up."""
    clock = _CLOCK.get()
    if clock is not None:
        clock.check(doing)
