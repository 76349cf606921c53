"""How the ``shardlaw`` command fails: its exit statuses and its one-line messages.

Every command says what went wrong through :func:`shardlaw.cli.main`; the commands
themselves (``cli_prove``, ``cli_vectors``) raise :class:`CommandExit` or let a rule's
rejection through, and import this module, never the entry point.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CommandExit", "one_line", "EXIT_BAD_INPUT", "EXIT_BROKEN_PIPE",
           "EXIT_INTERRUPTED", "EXIT_INTERNAL"]

EXIT_BAD_INPUT = 2
# A closed pipe ends the command as SIGPIPE ends other tools (128 + 13).
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130
# A bug in shardlaw (EX_SOFTWARE); SHARDLAW_TRACEBACK=1 shows its traceback.
EXIT_INTERNAL = 70


class CommandExit(Exception):
    """Stop the command with a one-line message and an exit status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def one_line(text: Any, limit: int = 2000) -> str:
    """``text`` on one line, cut to ``limit`` characters: what an error may print."""
    try:
        words = " ".join(str(text).split())
    except Exception:  # noqa: BLE001 - a message that cannot be shown is named by its type
        words = f"<a {type(text).__name__} that cannot be shown>"
    return words if len(words) <= limit else f"{words[:limit]} ... ({len(words)} characters)"
