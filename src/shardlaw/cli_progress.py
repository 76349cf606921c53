"""A progress line on stderr for the command line's long runs (``vectors generate``).

On a terminal the line is rewritten in place at most every half second; into a file or a
pipe a whole line is written at most every 15 seconds, so that a log shows the run moving
without filling up. ``done`` ends the line. Standard library only: the spec's commands run
without extras.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

__all__ = ["Progress"]


class Progress:
    """Say how far a long run is: ``update(text)`` as often as wanted; the line is written
    only when enough time has passed since the last one."""

    def __init__(self, what: str, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self.started = clock()
        self.last: float | None = None
        self.width = 0
        try:
            self.live = self.stream.isatty()
        except (AttributeError, ValueError):
            self.live = False
        self.every = 0.5 if self.live else 15.0

    def elapsed(self) -> str:
        """The time since the start, as ``1m05s``."""
        seconds = int(self.clock() - self.started)
        return f"{seconds // 60}m{seconds % 60:02d}s"

    def update(self, text: str, *, force: bool = False) -> None:
        """Show ``text`` (the run's state) if the last line is old enough, or ``force``."""
        now = self.clock()
        if not force and self.last is not None and now - self.last < self.every:
            return
        self.last = now
        line = f"{self.what}: {text} ({self.elapsed()})"
        if self.live:
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self, text: str) -> None:
        """The last state, on a line of its own."""
        self.update(text, force=True)
        if self.live:
            self.stream.write("\n")
            self.stream.flush()
