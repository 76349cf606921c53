"""Editions of the specification: which JAX release a question is answered for.

The specification answers for JAX 0.10.2 (the version of record) and, on the jit call, for
JAX 0.4.13, the release of the older ``pjit.py`` the project was seeded with. An edition is
a value the caller passes (``jit_call(call, jax="0.4.13")``); the pipeline holds it for the
length of one question (:func:`holding`) and every verdict records it. A rule that reads
otherwise in an older release declares its variant where the rule is
(:func:`shardlaw.spec.core.rules.varies`): its statement, clauses and JAX's exception class
there, and how it decides when it decides otherwise.

>>> edition("0.4.13"), edition(None)
('0.4.13', '0.10.2')
>>> with holding("0.4.13"):
...     current_edition()
'0.4.13'
>>> current_edition()
'0.10.2'
>>> edition("0.5.0")
Traceback (most recent call last):
...
shardlaw.spec.core.rules.RejectionValueError: [CALL-0]: the JAX release a question is answered for must be one of ('0.10.2', '0.4.13'), got '0.5.0'
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

from .rules import DEFAULT_EDITION, Failure, current_edition, edition_held, reject

__all__ = ["EDITIONS", "DEFAULT", "OLDER", "edition", "holding", "current_edition",
           "is_default"]

DEFAULT = DEFAULT_EDITION   # the version of record
OLDER = "0.4.13"            # the JAX 0.4 line's older pjit.py
EDITIONS = (DEFAULT, OLDER)

@dataclasses.dataclass(frozen=True)
class UnknownEdition(Failure, rule="CALL-0"):
    template = "the JAX release a question is answered for must be one of {known}, got {given!r}"
    given: Any
    known: tuple


def edition(jax: Any) -> str:
    """The edition ``jax`` names (None: the default, 0.10.2); any other release is refused."""
    if jax is None:
        return DEFAULT
    if jax not in EDITIONS:
        raise reject(UnknownEdition(jax, EDITIONS))
    return jax


@contextlib.contextmanager
def holding(jax: str) -> Iterator[str]:
    """Rules applied inside the block answer for the edition ``jax``."""
    with edition_held(edition(jax)) as held:
        yield held


def is_default() -> bool:
    """Whether the rules applied now answer for the version of record."""
    return current_edition() == DEFAULT
