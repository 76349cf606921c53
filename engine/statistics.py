"""What one jitted function's caches did: :class:`CacheInfo` (what ``cache_info()`` returns),
the counters behind it, and :func:`count_calls` (whether functions count every call)."""

from __future__ import annotations

import collections
import itertools
import os
import threading
from typing import Any, Iterable

__all__ = ["CacheInfo", "Counters", "count_calls", "counting_calls", "steps_taken"]

RECENT = 16   # how many recent misses a function remembers, and signatures _why_new compares

# Whether functions jitted from now on count their calls (one Python frame per call).
_COUNT_CALLS = [os.environ.get("SHARDLAW_ENGINE_COUNT_CALLS", "0") not in ("", "0")]


def count_calls(enabled: bool = True) -> None:
    """Whether functions jitted from now on count every call (off by default; also
    ``SHARDLAW_ENGINE_COUNT_CALLS=1``).

    Counting runs one Python frame in front of JAX's C++ dispatcher (about 0.2–0.4 µs a
    call), and ``cache_info()`` then reports dispatch hits exactly. Without it a known
    signature runs with nothing in front of the dispatcher, as ``jax.jit``'s does, and
    ``cache_info()`` reports the calls that reached Python but not the C++ hits. A function
    with static arguments always has the frame (and counts): it turns the dispatcher's own
    refusal of an unhashable static argument into ENG-1 with the argument's path.
    """
    _COUNT_CALLS[0] = bool(enabled)


def counting_calls() -> bool:
    """Whether functions jitted now count their calls (:func:`count_calls`)."""
    return _COUNT_CALLS[0]


def steps_taken(counter: itertools.count) -> int:
    """How many steps ``counter`` has taken (itertools.count shows it only in its repr)."""
    return int(repr(counter)[len("count("):-1])


class Counters:
    """The counts behind one function's :class:`CacheInfo`, the reasons of its recent
    misses and any divergence from JAX; safe to update from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.python_calls = 0
        self.refused_in_dispatch = 0
        self.signature_hits = 0
        self.signature_misses = 0
        self.executable_hits = 0
        self.executable_misses = 0
        self.compiles = 0
        self.recent: collections.deque[str] = collections.deque(maxlen=RECENT)
        self.divergences: collections.deque[str] = collections.deque(maxlen=64)

    def count(self, *names: str, miss: str | None = None) -> None:
        """One more of each of ``names``; ``miss``: why it missed, for ``recent_misses``."""
        with self._lock:
            for name in names:
                setattr(self, name, getattr(self, name) + 1)
            if miss is not None:
                self.recent.append(miss)

    def diverged(self, problems: Iterable[str]) -> None:
        """Places where JAX's compiled program differed from the engine's prediction."""
        with self._lock:
            self.divergences.extend(problems)

    def snapshot(self) -> dict[str, Any]:
        """The counts and lists, as :class:`CacheInfo` fields."""
        with self._lock:
            return dict(
                python_calls=self.python_calls, refused_in_dispatch=self.refused_in_dispatch,
                signature_hits=self.signature_hits, signature_misses=self.signature_misses,
                executable_hits=self.executable_hits, executable_misses=self.executable_misses,
                compiles=self.compiles, recent_misses=list(self.recent),
                divergences=list(self.divergences))


class CacheInfo:
    """What the engine's caches hold for one jitted function, and how they were used.

    ``calls`` counts every call and ``dispatch_hits`` the calls JAX's C++ dispatcher ran on
    its own (a known signature whose arguments go as they are) — both None unless the
    function counts its calls (:func:`count_calls`, or static arguments); ``python_calls`` the calls
    that reached the engine (new signatures, signatures whose arguments must move, calls
    inside another transformation); ``refused_in_dispatch`` calls the dispatcher refused
    before the engine saw them (an unhashable static argument, ENG-1). Signatures:
    ``signature_hits``/``signature_misses``/``signatures`` (held). Executables:
    ``executable_hits`` (a placement-equal signature reused one), ``executable_misses`` and
    ``compiles``, ``executables`` (held for this function), ``executables_total`` and
    ``capacity`` (the process-wide cache). ``recent_misses`` says why each recent miss
    missed; ``divergences`` lists any place where JAX's compiled program differed from the
    engine's own prediction (empty when the engine and JAX agree).
    """

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()
                          if k not in ("recent_misses", "divergences"))
        return f"CacheInfo({parts})"

    def __str__(self) -> str:
        off = "not counted (shardlaw.engine.count_calls(True) counts them)"
        hits = ("hits not counted" if self.dispatch_hits is None
                else f"{self.dispatch_hits} hit(s) run without Python")
        lines = [
            f"calls: {off if self.calls is None else self.calls}",
            f"dispatch (C++): {hits}, "
            f"{self.python_calls} call(s) reached Python (new signatures, signatures whose "
            f"arguments must move, calls inside other transformations), "
            f"{self.refused_in_dispatch} refused by the dispatcher; "
            f"{self.dispatch_entries} signature(s) held",
            f"signature: {self.signature_hits} hit(s), {self.signature_misses} miss(es), "
            f"{self.signatures} held",
            f"executable: {self.executable_hits} hit(s), {self.executable_misses} miss(es) "
            f"({self.compiles} compile(s)), {self.executables} held "
            f"({self.executables_total}/{self.capacity} in the process)",
        ]
        if self.recent_misses:
            lines.append("recent misses:")
            lines += [f"  {m}" for m in self.recent_misses]
        if self.divergences:
            lines.append("divergences from JAX:")
            lines += [f"  {d}" for d in self.divergences]
        return "\n".join(lines)
