"""The child process of the engine's fuzz side (:mod:`shardlaw.properties.fuzz_engine`).

It draws whole jit calls, holds each through ``jax.jit`` and ``shardlaw.engine.jit`` against
the spec (:func:`~shardlaw.properties.engine_harness.compare_engine`) and prints, per case,
a JSON line ``{"start": call}`` before it and ``{"kind", "detail", "seconds"}`` after it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import jax

from . import fuzz
from .call_strategies import calls
from .engine_harness import compare_engine

__all__ = ["CASE_LIMIT_S", "judge", "main"]

# The most seconds one engine case (two compilations and runs) may take.
CASE_LIMIT_S = 120.0
# Caches are cleared this often, so that a long campaign's memory stays flat.
CLEAR_EVERY = 250


def judge(call: Any) -> tuple[str, str]:
    """(kind, detail) of one call held by the engine against JAX and the spec."""
    _, _, mine, problems, _ = compare_engine(call)
    if problems:
        return "disagreement", problems[0].splitlines()[0][:300]
    if mine.failure is not None:
        return "rejected", str(getattr(mine.failure, "rule", None) or type(mine.failure).__name__)
    return "value", ""


def run_cases(count: int, seed: int) -> None:
    """Draw ``count`` calls from ``seed`` and print each one's outcome."""
    ran = [0]
    result: list[tuple[str, str]] = []

    def each(call: Any) -> None:
        print(json.dumps({"start": repr(call)[:600]}), flush=True)
        start = time.perf_counter()
        outcome = fuzz.classify(lambda: result.append(judge(call)), limit_s=CASE_LIMIT_S)
        seconds = time.perf_counter() - start
        if outcome.kind == "value":
            kind, detail = result.pop()
        else:  # a hang, or the comparison itself raised
            kind = "hang" if outcome.kind == "hang" else "harness"
            detail = outcome.detail
        print(json.dumps({"kind": kind, "detail": detail, "seconds": seconds}), flush=True)
        ran[0] += 1
        if ran[0] % CLEAR_EVERY == 0:
            jax.clear_caches()

    fuzz.drive(calls(layouts=True), count, seed, each, deadline=float("inf"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardlaw.properties.fuzz_engine_child",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    jax.config.update("jax_num_cpu_devices", 8)
    run_cases(args.count, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
