"""The fuzz layer's judging: how one input ended, and where a failure was raised.

:func:`classify` runs one input under a time limit and answers an :class:`Outcome`: a value,
a rejection whose ``.rule`` is a rule ID and whose message starts with it, or a failure (a
bare exception, located at the innermost frame of the project it passed through; a hang).
:mod:`shardlaw.properties.fuzz` runs the campaign; the spec's cases and the command line's
are judged here alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from shardlaw.spec.core.rules import Rejection

__all__ = ["Outcome", "classify", "rooted_in", "RULE_ID", "SPEC_LIMIT_S"]

RULE_ID = re.compile(r"^[A-Z]+(-[A-Z]+)*-[0-9]+$")

# The most seconds one spec input may take before it counts as a hang.
SPEC_LIMIT_S = 10.0

# The harness's own files: a frame in them is where an input was run, not where it failed.
_HARNESS = ("fuzz.py", "fuzz_outcomes.py", "fuzz_spec.py", "fuzz_cli.py")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one input ended: ``kind`` is value, rejected, bare, hang, overrun (the prover
    past its time limit), traceback or crash (the command line); ``detail`` names the rule,
    or the exception type and where it was raised."""

    kind: str
    detail: str = ""
    seconds: float = 0.0

    FAILURES = ("bare", "hang", "overrun", "traceback", "crash", "bad-exit", "harness",
                "disagreement")

    @property
    def failed(self) -> bool:
        return self.kind in self.FAILURES


class _Hang(BaseException):
    """Raised by the alarm when an input runs past its limit (a BaseException, so that no
    ``except Exception`` in the code under test swallows it)."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise _Hang()
    previous = signal.signal(signal.SIGALRM, alarm)
    # The alarm repeats: one raised where Python ignores exceptions (a gc callback) is
    # followed by another a moment later.
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _where(error: BaseException) -> str:
    """The innermost frame of the project that the exception passed through."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if ("shardlaw" in f.filename or "/spec/" in f.filename
                                  or "/src/" in f.filename) and not f.filename.endswith(_HARNESS)]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"


def classify(run: Callable[[], Any], limit_s: float = SPEC_LIMIT_S) -> Outcome:
    """Run ``run`` under a time limit and say how it ended."""
    start = time.perf_counter()
    try:
        with _time_limit(limit_s):
            run()
    except _Hang:
        return Outcome("hang", f"more than {limit_s:g} s", time.perf_counter() - start)
    except Rejection as rejection:
        seconds = time.perf_counter() - start
        if seconds > limit_s:  # past the limit, though the alarm's exception was swallowed
            return Outcome("hang", f"more than {limit_s:g} s", seconds)
        rule = getattr(rejection, "rule", None)
        if not isinstance(rule, str) or not RULE_ID.match(rule):
            return Outcome("bare", f"Rejection without a rule ID ({rule!r})", seconds)
        try:
            message = rejection.args[0]
        except Exception as error:  # pragma: no cover - a failure of explain
            return Outcome("bare", f"unreadable message: {type(error).__name__}", seconds)
        if not isinstance(message, str) or not message.startswith(f"[{rule}]"):
            return Outcome("bare", f"{rule} message does not start with [{rule}]", seconds)
        return Outcome("rejected", rule, seconds)
    except RecursionError as error:
        return Outcome("bare", f"RecursionError at {_where(error)}", time.perf_counter() - start)
    except Exception as error:
        return Outcome("bare", f"{type(error).__name__} at {_where(error)}",
                       time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if seconds > limit_s:  # past the limit, though the alarm's exception was swallowed
        return Outcome("hang", f"more than {limit_s:g} s", seconds)
    return Outcome("value", "", seconds)


# =========================================================================== where a failure is

def rooted_in(outcome: Outcome) -> str | None:
    """The file a bare exception was raised in (``TYPE at FILE:LINE name``), if it says."""
    m = re.search(r" at ([\w.]+\.py):", outcome.detail)
    return m[1] if m else None
