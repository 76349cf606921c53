"""Hostile input: every public constructor and query of the spec, and the command line.

The promise checked here: whatever a user passes, the outcome is a value or a project error
that names a rule (a :class:`~shardlaw.spec.Rejection`, whose ``.rule`` is an ID such as
``VAL-1``); never another exception type, never a hang, never a crash. The command line's
promise is its own: exit 0, 1 or 3 with its report, or exit 2 with one line on stderr and
no traceback.

A *target* is one public name of :mod:`shardlaw.spec` (a constructor, a query, a method of
a value); its arguments are drawn by parameter name from :func:`plausible` (the values a
user means to pass, valid or nearly) and :func:`hostile` (wrong types, bools, floats, NaN
and inf, numpy scalars, Decimal, integers of 2^63 and more, negative and zero sizes,
duplicates, 2,000-deep nesting, mutated HLO text). A new public name is fuzzed as soon as
it is exported: :data:`EXEMPT` lists the few that are not, and why, and a test keeps the
two lists covering ``shardlaw.spec.__all__``.

Every rejection of a spec case is recorded with :func:`shardlaw.properties.hits.record`
(source ``"fuzz"``, a rule refusing hostile input: not held to JAX).

The ``ci`` slice is the suite :mod:`shardlaw.properties.suites.fuzz` (``tests/test_fuzz.py``
runs it); the deep campaign is a command::

    python -m shardlaw.properties.fuzz --inputs 1000000 --cli 100000

It prints the count of each outcome, the inputs per second and the rejections per rule ID,
and exits 1 if any input ended in a bare exception, a traceback, a hang or a crash.

The layer's rooms: ``fuzz_values.py`` (what a parameter is meant to take, and hostile
values and files), ``fuzz_spec.py`` (the targets and their cases), ``fuzz_cli.py`` (the
command line's cases), ``fuzz_outcomes.py`` (how an input ended), the families' plausible
values (``fuzz_arguments.py`` ...) and the engine's side (``fuzz_engine.py``); this module
runs the campaign.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import math
import random
import sys
import time
from typing import Any, Callable, Iterator

from hypothesis import HealthCheck, given, settings, seed as fixed_seed
from hypothesis import strategies as st

import shardlaw.spec as S

from .fuzz_cli import (
    CliCase, check_exit, cli_cases, run_cli_case, run_cli_executable, sharding_words,
    shardlaw_executable,
)
from .fuzz_engine import engine_outcomes
from .fuzz_outcomes import RULE_ID, SPEC_LIMIT_S, Outcome, classify, rooted_in
from .fuzz_spec import (
    EXEMPT, PROVER_GRACE_S, TARGETS, SpecCase, Target, build_case, recombined, run_spec_case,
    spec_case_for, spec_cases, targets,
)
from .fuzz_values import (
    ALWAYS_PLAUSIBLE, HUGE_INTS, argument, hlo_texts, hostile, mutated_file, plausible,
    vector_files,
)

__all__ = [
    "Outcome", "hostile", "plausible", "targets", "TARGETS", "EXEMPT", "spec_cases",
    "run_spec_case", "rooted_in", "cli_cases", "run_cli_case", "run_cli_executable",
    "Campaign", "main", "fresh_seed",
]

# Names that lived here before the layer was split, which the suites, the engine's child
# and the tests still take from this module.
_REEXPORTED = (
    CliCase, check_exit, sharding_words, shardlaw_executable, RULE_ID, SPEC_LIMIT_S,
    classify, PROVER_GRACE_S, SpecCase, Target, build_case, spec_case_for, ALWAYS_PLAUSIBLE,
    HUGE_INTS, mutated_file, argument, hlo_texts, vector_files,
)

# Over this, an input counts as slow (reported, not a failure).
SLOW_S = 1.0


@dataclasses.dataclass
class Campaign:
    """Counts of outcomes, the rejections per rule, and the first example of each failure."""

    outcomes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    rules: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    slow: int = 0
    seconds: float = 0.0

    def record(self, side: str, case: Any, outcome: Outcome) -> None:
        self.outcomes[(side, outcome.kind)] += 1
        if outcome.kind == "rejected":
            self.rules[(side, outcome.detail)] += 1
        elif outcome.detail.startswith("verdict "):
            self.rules[(f"{side} verdict", outcome.detail.split()[1])] += 1
        if outcome.seconds > SLOW_S:
            self.slow += 1
        if outcome.failed:
            key = f"{side} {outcome.kind}: {outcome.detail}"
            if key not in self.failures:
                self.failures[key] = repr(case)[:600]

    @property
    def inputs(self) -> int:
        return sum(self.outcomes.values())

    def report(self) -> str:
        lines = ["outcome counts:"]
        for (side, kind), n in sorted(self.outcomes.items()):
            lines.append(f"  {side:8} {kind:10} {n:>10,}")
        rate = self.inputs / self.seconds if self.seconds else 0.0
        lines.append(f"inputs: {self.inputs:,} in {self.seconds:,.0f} s ({rate:,.1f} inputs/s); "
                     f"slower than {SLOW_S:g} s: {self.slow:,}")
        failed = sum(n for (_, kind), n in self.outcomes.items() if kind in Outcome.FAILURES)
        lines.append(f"failures (bare exceptions, tracebacks, hangs, crashes, overruns, "
                     f"bad exits): {failed:,}")
        for key, example in self.failures.items():
            lines.append(f"  {key}\n      e.g. {example}")
        sides = sorted({side for side, _ in self.rules})
        lines.append("rejections per rule ID: " + "  ".join(f"{side:>10}" for side in sides))
        for rule in sorted({rule for _, rule in self.rules}, key=_rule_order):
            lines.append(f"  {rule:20}" + "  ".join(f"{self.rules[(side, rule)]:>10,}"
                                                    for side in sides))
        never = sorted(set(S.RULES) - {rule for _, rule in self.rules}, key=_rule_order)
        lines.append(f"rules never seen rejecting: {len(never)} ({' '.join(never)})")
        return "\n".join(lines)


def _rule_order(rule: str) -> tuple[str, int]:
    family, _, number = rule.rpartition("-")
    return (family, int(number)) if number.isdigit() else ("~", 0)


def drive(strategy: st.SearchStrategy[Any], count: int, seed: int,
           each: Callable[[Any], None], deadline: float,
           expand: Callable[[list[Any], Any], Iterator[Any]] | None = None,
           per_draw: int = 1) -> None:
    """Draw examples of ``strategy`` in batches and hand each to ``each``, with the cases
    ``expand(batch, rng)`` makes from a batch (``per_draw`` cases in all per drawn one),
    until ``count`` cases have run or the deadline has passed."""
    batch = 25
    done = [0]

    def run(examples: int, seed: int) -> None:
        @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
        @given(st.lists(strategy, min_size=batch, max_size=batch),
               st.randoms(use_true_random=False))
        def draw(cases: list[Any], rng: Any) -> None:
            # Built in full before any runs: what an example draws may not depend on how
            # many cases ran before it (Hypothesis calls that a flaky strategy).
            extra = list(expand(cases, rng)) if expand is not None else []
            for case in itertools.chain(cases, extra):
                if done[0] >= count or time.monotonic() > deadline:
                    return
                each(case)
                done[0] += 1

        fixed_seed(seed)(draw)()   # Hypothesis' public @seed

    while done[0] < count and time.monotonic() < deadline:
        run(max(1, math.ceil((count - done[0]) / (batch * per_draw))), seed)
        seed += 7919


def campaign(inputs: int, cli: int, executable: int, seed: int = 0,
             minutes: float | None = None, progress: Callable[[str], None] | None = None,
             recombine: int = 0, engine: int = 0) -> Campaign:
    """Run ``inputs`` spec inputs, ``cli`` in-process command lines, ``executable`` runs
    of the real command and ``engine`` jit calls held by the engine against ``jax.jit``
    (:mod:`.fuzz_engine`); stop early after ``minutes``. ``recombine``: spec calls built per
    drawn call from the values drawn (see :func:`recombined`)."""
    result = Campaign()
    started = time.monotonic()
    deadline = started + (minutes * 60 if minutes else 1e12)
    last = [started]

    def tick() -> None:
        if progress and time.monotonic() - last[0] > 60:
            last[0] = time.monotonic()
            progress(f"{result.inputs:,} inputs, {time.monotonic() - started:,.0f} s, "
                     f"{len(result.failures)} failure kinds")

    def note(side: str, case: Any, outcome: Outcome) -> None:
        known = len(result.failures)
        result.record(side, case, outcome)
        if progress and len(result.failures) > known:
            key, example = list(result.failures.items())[-1]
            progress(f"new failure: {key}\n    e.g. {example}")
        tick()

    def guarded(side: str, run: Callable[[Any], Outcome]) -> Callable[[Any], None]:
        def each(case: Any) -> None:
            try:
                outcome = run(case)
            except Exception as error:  # the harness's own failure: counted, not fatal
                outcome = Outcome("harness", f"{type(error).__name__}: {error}")
            note(side, case, outcome)
        return each

    spec = guarded("spec", run_spec_case)
    in_process = guarded("cli", run_cli_case)
    real = guarded("exe", run_cli_executable)

    # Interleave the three so that a time limit leaves a share of each.
    # (Each round starts Hypothesis afresh, whose first draws are the simplest: few rounds
    # for a small campaign.)
    rounds = max(1, min(20, (inputs + cli) // 20_000, engine // 50 if engine else 20))
    for k in range(rounds):
        share = lambda total: total // rounds + (1 if k < total % rounds else 0)  # noqa: E731
        drive(spec_cases(), share(inputs), seed + k, spec, deadline,
               expand=lambda cases, rng: recombined(cases, rng, recombine * len(cases)),
               per_draw=1 + recombine)
        drive(cli_cases(), share(cli), seed + 1000 + k, in_process, deadline)
        drive(cli_cases(), share(executable), seed + 2000 + k, real, deadline)
        engine_seed = seed + 3000 + 100_000 * k
        for kind, detail, seconds, case in engine_outcomes(share(engine), engine_seed, deadline):
            note("engine", case, Outcome(kind, detail, seconds))
        if time.monotonic() > deadline:
            break
    result.seconds = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m shardlaw.properties.fuzz``: the deep campaign."""
    parser = argparse.ArgumentParser(prog="python -m shardlaw.properties.fuzz",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="spec inputs")
    parser.add_argument("--cli", type=int, default=100_000,
                        help="command lines run in this process")
    parser.add_argument("--executable", type=int, default=500,
                        help="command lines run through the real shardlaw executable")
    parser.add_argument("--engine", type=int, default=0,
                        help="jit calls run through jax.jit and the engine, compared "
                             "(in a child process)")
    parser.add_argument("--seed", type=int,
                        help="replay a run's draws (default: a fresh seed, printed)")
    parser.add_argument("--minutes", type=float, help="stop after this long")
    parser.add_argument("--recombine", type=int, default=20, metavar="K",
                        help="spec calls recombined from each drawn one's values (default 20; "
                             "0: every call drawn by Hypothesis)")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    seed = fresh_seed() if args.seed is None else args.seed
    print(f"seed {seed} (--seed {seed} draws this run again)", file=sys.stderr, flush=True)
    result = campaign(args.inputs, args.cli, args.executable, seed, args.minutes,
                      progress=lambda line: print(line, file=sys.stderr, flush=True),
                      recombine=args.recombine, engine=args.engine)
    print(result.report())
    print(f"seed: {seed}")
    return 1 if result.failures else 0


def fresh_seed() -> int:
    """A seed no earlier run chose: each run of the deep campaign draws anew unless told."""
    return random.SystemRandom().randrange(2**32)


if __name__ == "__main__":
    sys.exit(main())
