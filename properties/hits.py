"""The rule hits the property harnesses see, recorded through one call.

A harness that holds a rule to JAX records each outcome it saw with :func:`record`: which
harness saw it (``source``: ``"jit"``, ``"batching"``, ``"engine"`` ...), the rule, and
whether the example was on the rule's refusing side. A rule that decides without refusing
records its second outcome as the refusing side (a sharding batched rather than kept, a
result weakly typed or not); a harness may record such an outcome under a key of its own,
the rule ID and a word (``"ARG-2 weak"``), which :func:`rule_hits` leaves out.

The readers: :func:`counts` (one harness, what its coverage test checks), :func:`rule_hits`
(every harness that holds rules to JAX, what a campaign reports) and :func:`jax_calls`
(the whole jit calls the harnesses made in real ``jax.jit``). The counts are per process;
:func:`kept` restores them after work that must leave them alone (writing vectors).

>>> with kept():
...     record("example", "DIV-1", refused=False)
...     record("example", "DIV-1", refused=True)
...     counts("example")
{'DIV-1': (1, 1)}
>>> counts("example")
{}
"""

from __future__ import annotations

import contextlib
import copy
import re
from typing import Iterator

__all__ = ["record", "counts", "rule_hits", "clear", "kept", "record_jax_calls", "jax_calls",
           "NOT_HELD_TO_JAX"]

# Harnesses whose outcomes are not held to JAX: the fuzz layer records the rules that refused
# hostile input (a campaign lists them apart from the rules' hits).
NOT_HELD_TO_JAX = frozenset({"fuzz"})

# source -> key (a rule ID, or a rule ID and a word) -> [accepted, refused]
_HITS: dict[str, dict[str, list[int]]] = {}
# the whole jit calls made in real jax.jit and held to the spec or the engine
_JAX_CALLS = [0]

_RULE_ID = re.compile(r"^[A-Z]+(?:-[A-Z]+)*-[0-9]+$")


def record(source: str, rule_id: str, refused: bool, count: int = 1) -> None:
    """``source`` saw rule ``rule_id`` accept (``refused`` False) or refuse ``count`` times
    (``count=0`` only makes the rule known to the source)."""
    _HITS.setdefault(source, {}).setdefault(rule_id, [0, 0])[1 if refused else 0] += count


def counts(source: str) -> dict[str, tuple[int, int]]:
    """key -> (accepted, refused) as ``source`` recorded them, by key."""
    return {key: (sides[0], sides[1]) for key, sides in sorted(_HITS.get(source, {}).items())}


def rule_hits() -> dict[str, tuple[int, int]]:
    """rule -> (accepted, refused) over every harness that holds rules to JAX (rule IDs only)."""
    total: dict[str, list[int]] = {}
    for source, table in _HITS.items():
        if source in NOT_HELD_TO_JAX:
            continue
        for key, (accepted, refused) in table.items():
            if _RULE_ID.match(key):
                sides = total.setdefault(key, [0, 0])
                sides[0] += accepted
                sides[1] += refused
    return {key: (sides[0], sides[1]) for key, sides in sorted(total.items())}


def clear(source: str | None = None) -> None:
    """Forget what ``source`` recorded (every source's hits when None)."""
    if source is None:
        _HITS.clear()
    else:
        _HITS.pop(source, None)


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Inside the block record as usual; after it, the hits and calls are as they were."""
    hits, calls = copy.deepcopy(_HITS), _JAX_CALLS[0]
    try:
        yield
    finally:
        _HITS.clear()
        _HITS.update(hits)
        _JAX_CALLS[0] = calls


def record_jax_calls(count: int) -> None:
    """A harness made ``count`` whole jit calls in real ``jax.jit``."""
    _JAX_CALLS[0] += count


def jax_calls() -> int:
    """The whole jit calls made in real ``jax.jit`` in this process so far."""
    return _JAX_CALLS[0]
