"""A transformed-call question written as a whole-program question (the registry's retirement path).

:class:`ProgramForm` is what :mod:`~shardlaw.spec.vectors.transformed_migration` and
:mod:`~shardlaw.spec.vectors.autodiff_forms` build for a
:class:`~shardlaw.spec.transforms.transformed.TransformedCall`; :class:`NoProgramForm` says
why a question has none.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..program.description import Program
from ..program.explain import ProgramVerdict

__all__ = ["NoProgramForm", "ProgramForm"]


class NoProgramForm(Exception):
    """This call's question has no whole-program form; ``str()`` says why."""


@dataclasses.dataclass(frozen=True)
class ProgramForm:
    """A transformed call as a program question: the program (one example), the
    transformations applied to it (``(name, ((keyword, value), ...))``, innermost first,
    as a program vector holds them), the last stage asked about, and ``read``: the old
    answer, from the rewritten program and the program path's verdict."""

    program: Program
    transforms: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    until: str
    read: Callable[[Program, ProgramVerdict], Any]
    paths: tuple[tuple[str, str | None], ...] = ()   # (program prefix, old; None: none)

    def old_path(self, path: str | None) -> str | None:
        """A program path's refusal location as the per-equation question names it."""
        for new, old in self.paths:
            if path is not None and path.startswith(new):
                return None if old is None else old + path[len(new):]
        return path
