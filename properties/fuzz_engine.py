"""The engine's side of the fuzz campaign: drawn calls through ``jax.jit`` and the engine.

Each case is a whole jit call drawn by :func:`~shardlaw.properties.call_strategies.calls`
(valid or refused, layouts included), run through a fresh ``jax.jit`` and a fresh
``shardlaw.engine.jit`` on the same inputs and held against the spec
(:func:`~shardlaw.properties.engine_harness.compare_engine`). An engine that crashes the
interpreter must not take the campaign with it, so the cases run in a child process that
reports one JSON line per case; when the child dies, the case it was running counts as a
crash and a new child goes on with the rest. The child gives JAX 8 CPU devices.

Outcomes: ``value`` (both accepted, nothing differs), ``rejected`` (both refused; the
detail is the engine's rule), ``disagreement`` (what differs, first line), ``harness``
(the comparison itself failed), ``hang`` (a case past its time limit) and ``crash``.

The child is :mod:`shardlaw.properties.fuzz_engine_child`; run alone,
``python -m shardlaw.properties.fuzz_engine_child --count 100 --seed 1`` prints the JSON lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from typing import Iterator

__all__ = ["engine_outcomes"]


def _child_command(count: int, seed: int) -> list[str]:
    return [sys.executable, "-m", "shardlaw.properties.fuzz_engine_child",
            "--count", str(count), "--seed", str(seed)]


def engine_outcomes(count: int, seed: int,
                    deadline: float) -> Iterator[tuple[str, str, float, str]]:
    """(kind, detail, seconds, case) for ``count`` engine cases, a new child after a crash,
    until the deadline (a ``time.monotonic()`` value)."""
    done = 0
    while done < count and time.monotonic() < deadline:
        with tempfile.TemporaryFile("w+") as errors:
            child = subprocess.Popen(_child_command(count - done, seed + done), text=True,
                                     stdout=subprocess.PIPE, stderr=errors)
            ran, running = 0, ""
            for line in child.stdout or ():
                record = json.loads(line)
                if "start" in record:
                    running = record["start"]
                    continue
                done, ran = done + 1, ran + 1
                yield record["kind"], record["detail"], record["seconds"], running
                if time.monotonic() >= deadline:
                    child.kill()
                    break
            status = child.wait()
            if time.monotonic() >= deadline:
                return
            if status != 0:
                errors.seek(0)
                last = (errors.read().strip().splitlines() or [""])[-1][:200]
                done += 1
                yield "crash", f"the child exited with {status}: {last}", 0.0, running
            elif ran == 0:
                return  # a child that runs nothing and exits cleanly has nothing left to run
