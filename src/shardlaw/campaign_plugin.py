"""The pytest plugin a ``shardlaw campaign`` loads into every worker (``-p``).

The campaign (:mod:`shardlaw.campaign`) starts pytest with pytest-xdist, this plugin and
its option ``--shardlaw-campaign-config FILE``: one JSON file (written by
:func:`shardlaw.campaign.write_config`; xdist hands the option to every worker) that says
what to do in each worker process:

* the Hypothesis profile ``shardlaw-campaign`` is registered and loaded before the suites
  are collected: the examples per property (per shard), the shared example database, no
  deadline, no explain phase; a property that runs more or fewer examples than the
  profile's count says so with :func:`shardlaw.properties.suites.examples`, in proportion;
* each property runs as ``shards`` items (``name[shard-k-of-n]``), each with its share of
  the examples, so that one property can keep several workers busy; the coverage tests,
  which read the hits of one process, are left out (the campaign's report adds up the
  hits of every worker instead);
* every example a property runs is counted (its ``.hypothesis.inner_test`` wrapped);
  under a time budget a property stops when its slice of the time is spent (and keeps
  going while Hypothesis shrinks a failure);
* the hits per rule (what the harnesses recorded with :mod:`shardlaw.properties.hits`:
  placement, jit calls, the transformations, the engine, the cache model, the fuzz layer's
  rejections), the whole jit calls made in real ``jax.jit`` and the examples are written to
  ``scratch/worker-<id>.json`` now and then and at the end, for the live progress line and
  the report; every failing test (a disagreement) is written to ``out/<name>.json`` with
  its falsifying example (read through Hypothesis' observability callbacks) and the blob
  that reproduces it;
* every ``clear_every`` examples (1,000; 0: never) JAX's caches are cleared, so that a
  worker's memory stays bounded;
* ``plant: "RULE-N"`` plants a wrong rule for the session, through the rule registry's
  :func:`~shardlaw.spec.core.rules.override`: the rule refuses every input it would
  accept. A campaign that does not find it is not worth running.

Loaded without the option, the plugin does nothing.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import os
import re
import time
import unittest
from pathlib import Path
from typing import Any, Callable

import jax
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import HypothesisException
from hypothesis.internal.observability import with_observability_callback

from shardlaw.campaign import CLEAR_EVERY as DEFAULT_CLEAR_EVERY
from shardlaw.campaign import CONFIG_OPTION, NOT_HELD_TO_JAX, PROFILE, example_database
from shardlaw.properties import hits
from shardlaw.spec.core.rules import RULES, Failure, override, reject

# Tests that check the hits of their own process: the report checks every worker's. By
# name, and by the suites' naming habit for such tests (a new suite's coverage test too).
COVERAGE_TESTS = frozenset({
    "test_zz_every_rule_seen_on_both_sides", "test_every_jit_rule_was_seen_on_both_sides",
    "test_every_rejecting_rule_refused_a_call_through_the_engine",
})
COVERAGE_NAMES = re.compile(r"^test_zz_|seen_on_both_sides|hit_on_both_sides")

UNLIMITED = 10 ** 9
_WRITE_EVERY_S = 1.0


class TimeUp(unittest.SkipTest):
    """A property's slice of the campaign's time is spent (Hypothesis lets it through)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """What the campaign asks of this worker (the file of ``--shardlaw-campaign-config``)."""

    suites: tuple[dict[str, Any], ...] = ()  # {"suite", "module", "path"}: what runs where
    database: str | None = None              # the shared example database (folder or Redis)
    local_database: str | None = None        # the folder in front of a Redis database
    part: int = 0                            # this machine's part of the property shards
    parts: int = 1                           # ... of so many (a campaign on a cluster)
    examples: int | None = None              # per property, all shards (None: no limit)
    end: float | None = None                 # time.time() at which the budget is spent
    shards: int = 1                          # items per property
    scratch: str | None = None               # the workers' counter files
    out: str | None = None                   # where disagreements are written
    shares: dict[str, float] = dataclasses.field(default_factory=dict)  # suite -> share
    plant: str | None = None                 # a rule to plant wrong
    clear_every: int = DEFAULT_CLEAR_EVERY   # examples between jax.clear_caches() (0: never)

    @classmethod
    def read(cls, path: str) -> "Config":
        try:
            data = json.loads(Path(path).read_text())
            known = {f.name for f in dataclasses.fields(cls)}
            config = cls(**{k: v for k, v in data.items() if k in known})
            return dataclasses.replace(config, suites=tuple(config.suites),
                                       shares=dict(config.shares or {}),
                                       shards=max(1, int(config.shards)))
        except (OSError, ValueError, TypeError) as problem:
            raise pytest.UsageError(f"{CONFIG_OPTION} {path}: {problem}") from None

    def examples_per_shard(self) -> int:
        total = UNLIMITED if self.examples is None else int(self.examples)
        return max(1, -(-total // self.shards))


CONFIG: Config | None = None


# --------------------------------------------------------------------------- counters

@dataclasses.dataclass
class _Worker:
    """This process's share of the campaign."""

    examples: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    seconds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    property_seconds: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)
    failed: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # whole jit calls made in real jax.jit and held against the spec (or the engine), per
    # suite, by the items that ended; the count (hits.jax_calls()) when the running one began
    jax_calls: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    calls_at_start: int | None = None
    scope: set[str] = dataclasses.field(default_factory=set)
    suite: str = "other"
    deadline: float | None = None
    failing: bool = False
    written: float = 0.0
    active: bool = True
    slices: dict[str, float] = dataclasses.field(default_factory=dict)
    # every property item's weight in the time plan (its suite's share over its items),
    # the items this worker has started, and the wall-clock end of the one it runs now
    weights: dict[str, float] = dataclasses.field(default_factory=dict)
    started: list[str] = dataclasses.field(default_factory=list)
    until: float | None = None
    # the last failing test case Hypothesis reported for the item now running (its
    # observability interface): after shrinking, the minimal failing example
    failure: dict[str, Any] | None = None


WORKER = _Worker()


def _observe(observation: Any) -> None:
    """Keep the last failing test case of the running item, as Hypothesis reports it."""
    if observation.type != "test_case" or observation.status != "failed":
        return
    WORKER.failure = {
        "representation": observation.representation,
        "arguments": {name: repr(value) for name, value in observation.arguments.items()},
        "how_generated": observation.how_generated,
        "reproduction_decorator": observation.metadata.reproduction_decorator,
    }


def _observe_the_failure(item: Any) -> None:
    """Run a failed property once more with Hypothesis' observability on: the database
    holds its shrunk example, which Hypothesis replays first, so :func:`_observe` sees the
    minimal failing test case. (On for the whole campaign, observability traces coverage
    per test case: the placement property ran 4x slower.)"""
    with with_observability_callback(_observe):
        try:
            item.runtest()
        except Exception:
            pass   # the failure itself is the one pytest already has


def _part_of(path: Any) -> dict[str, Any]:
    """The campaign's part (``{"suite", "module", "path"}``) a test file belongs to: the
    part of that file, or of the folder that holds it."""
    where = Path(str(path))
    for part in CONFIG.suites if CONFIG else ():
        named = Path(part["path"])
        if where == named or named in where.parents:
            return part
    return {"suite": "other", "module": None, "path": str(where)}


def _suite_of(path: Any) -> str:
    return str(_part_of(path)["suite"])


def _rule_hits() -> dict[str, list[int]]:
    """rule -> [accepted, rejected] over every harness that held a rule to JAX here."""
    return {rule_id: list(sides) for rule_id, sides in hits.rule_hits().items()}


def _fuzz_rejections() -> dict[str, int]:
    """rule -> how often it refused the fuzz layer's hostile input here."""
    return {rule_id: refused for rule_id, (_, refused) in hits.counts("fuzz").items()}


def _jax_calls() -> dict[str, int]:
    """suite -> the whole jit calls made in real jax.jit, the running item's included."""
    calls = collections.Counter(WORKER.jax_calls)
    if WORKER.calls_at_start is not None:
        calls[WORKER.suite] += hits.jax_calls() - WORKER.calls_at_start
    return dict(calls)


def _worker_name() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")   # set by pytest-xdist


def _write(final: bool = False, now: bool = False) -> None:
    where = CONFIG.scratch if CONFIG else None
    moment = time.monotonic()
    if not where or (not final and not now and moment - WORKER.written < _WRITE_EVERY_S):
        return
    WORKER.written = moment
    data = {"examples": dict(WORKER.examples), "seconds": dict(WORKER.seconds),
            "property_seconds": dict(WORKER.property_seconds),
            "failed": dict(WORKER.failed), "jax_calls": _jax_calls(),
            "rules": _rule_hits(), "fuzz": _fuzz_rejections(),
            "scope": sorted(WORKER.scope), "final": final,
            "started": WORKER.started, "until": WORKER.until}
    target = Path(where) / f"worker-{_worker_name()}.json"
    scratch = target.with_suffix(".tmp")
    scratch.write_text(json.dumps(data))
    os.replace(scratch, target)


# --------------------------------------------------------------------------- a planted rule

def planted(rule_id: str) -> contextlib.AbstractContextManager:
    """Rule ``rule_id`` made wrong while the block runs: it refuses every input it would
    accept (through the rule registry's :func:`~shardlaw.spec.core.rules.override`)."""
    if rule_id not in RULES:
        raise pytest.UsageError(f"the campaign plants {rule_id!r}, which names no rule")

    @dataclasses.dataclass(frozen=True)
    class Planted(Failure, rule=rule_id, error=ValueError):
        template = "planted by the campaign: this rule refuses what it accepts"

    def refuse(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        function(*args, **kwargs)   # what the rule refuses it still refuses
        raise reject(Planted())

    return override(rule_id, refuse)


# The blocks open for the whole session (the planted rule), closed at its end.
_SESSION = contextlib.ExitStack()


# --------------------------------------------------------------------------- hooks

def pytest_addoption(parser: Any) -> None:
    parser.addoption(CONFIG_OPTION, dest="shardlaw_campaign_config", metavar="FILE",
                     help="the JSON file a shardlaw campaign writes for its workers")


# No explain phase: it re-runs a failure under coverage tracing, slow with JAX underneath.
_PHASES = tuple(p for p in Phase if p is not Phase.explain)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: Any) -> None:
    """Read the campaign's file; load its Hypothesis profile (after every other plugin's
    choice, before the suites are collected); plant its rule."""
    global CONFIG, CLEAR_EVERY
    path = config.getoption("shardlaw_campaign_config", None)
    if not path:
        WORKER.active = False
        return
    CONFIG = Config.read(path)
    CLEAR_EVERY = CONFIG.clear_every
    # Under pytest-xdist the controller only relays: the workers count and write.
    WORKER.active = not (getattr(config.option, "numprocesses", None)
                         and not hasattr(config, "workerinput"))
    settings.register_profile(
        PROFILE, max_examples=CONFIG.examples_per_shard(), deadline=None, derandomize=False,
        print_blob=True, phases=_PHASES, suppress_health_check=list(HealthCheck),
        database=example_database(CONFIG.database, CONFIG.local_database))
    settings.load_profile(PROFILE)
    if CONFIG.plant:
        _SESSION.enter_context(planted(CONFIG.plant))


def pytest_unconfigure(config: Any) -> None:
    _SESSION.close()


def _count_examples(inner: Callable[..., Any]) -> Callable[..., Any]:
    """The property's body, counting its examples and stopping it when its time is spent.

    The stop comes after an example has run to its end, never before its draws (a test
    that draws inside, with ``st.data()``, would otherwise end where an earlier run with
    the same choices went on drawing, which Hypothesis calls a flaky strategy)."""
    @functools.wraps(inner)
    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            answer = inner(*args, **kwargs)
        except HypothesisException:
            raise      # Hypothesis' own signals (an assumption not met), not a failure
        except Exception:
            WORKER.failing = True  # let Hypothesis shrink it, whatever the time
            raise
        finally:
            WORKER.examples[WORKER.suite] += 1
            _clear_now_and_then()
            _write()
        if WORKER.deadline is not None and not WORKER.failing and \
                time.monotonic() > WORKER.deadline:
            raise TimeUp("the campaign's time for this property is spent")
        return answer
    return counted


# JAX keeps every executable a worker compiles (one per drawn call, thousands of them, up
# to its caches' limits): a jit-suite worker grew to 4.5 GB in a two-hour campaign.
# Clearing the caches between examples changes nothing an example checks: each one makes
# its own jit objects, and a cache sequence runs inside one example.
CLEAR_EVERY = DEFAULT_CLEAR_EVERY


def _clear_now_and_then() -> None:
    if CLEAR_EVERY > 0 and sum(WORKER.examples.values()) % CLEAR_EVERY == 0:
        jax.clear_caches()


def _is_property(item: Any) -> bool:
    return getattr(getattr(item, "obj", None), "is_hypothesis_test", False)


def _prepare(item: Any) -> None:
    """Count the property's examples (Hypothesis' ``.hypothesis.inner_test``, wrapped once);
    the number of them and the database are the loaded profile's."""
    test = item.obj
    if not getattr(test.hypothesis.inner_test, "campaign", False):
        test.hypothesis.inner_test = _count_examples(test.hypothesis.inner_test)
        test.hypothesis.inner_test.campaign = True


def _shards(item: Any, count: int) -> list[Any]:
    if count <= 1 or getattr(item, "callspec", None) is not None:
        return [item]
    return [pytest.Function.from_parent(item.parent, name=f"{item.name}[shard-{k}-of-{count}]",
                                        callobj=item.obj, originalname=item.originalname)
            for k in range(1, count + 1)]


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """Leave out the per-process coverage tests; split and prepare every property."""
    if CONFIG is None:
        return
    kept, dropped, rounds = [], [], collections.defaultdict(list)
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        if name in COVERAGE_TESTS or COVERAGE_NAMES.search(name):
            dropped.append(item)
            continue
        if not _is_property(item):
            kept.append(item)
            continue
        _prepare(item)
        if _suite_of(item.path) not in NOT_HELD_TO_JAX:
            WORKER.scope.update(getattr(item.obj, "rule_ids", ()))
        for k, shard in enumerate(_shards(item, CONFIG.shards)):
            rounds[k].append(shard)
    if CONFIG.parts > 1:   # a machine of a cluster: its part of the shards, and the
        kept, dropped, rounds = _this_part(kept, dropped, rounds)   # plain tests on one
    if dropped:
        config.hook.pytest_deselected(items=dropped)

    # The pinned examples first (the time plan of the properties then starts from what they
    # left); shard k of every property, then shard k+1...: each worker starts on other examples.
    items[:] = kept + [shard for k in sorted(rounds) for shard in rounds[k]]


def _this_part(kept: list[Any], dropped: list[Any], rounds: dict[int, list[Any]]
               ) -> tuple[list[Any], list[Any], dict[int, list[Any]]]:
    """This machine's part of the items: shard ``k`` of the ``j``-th property when
    ``(k + j) % parts == part`` (the collection is the same on every machine), so each
    machine runs ``shards / parts`` shards of every property and properties that are not
    split are dealt round; the plain tests on part 0."""
    ours: dict[int, list[Any]] = collections.defaultdict(list)
    for k in sorted(rounds):
        for j, shard in enumerate(rounds[k]):
            (ours[k] if (k + j) % CONFIG.parts == CONFIG.part else dropped).append(shard)
    if CONFIG.part != 0:
        dropped, kept = dropped + kept, []
    return kept, dropped, ours


def _worker_count() -> int:
    try:
        return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))  # pytest-xdist's
    except ValueError:
        return 1


def pytest_collection_finish(session: Any) -> None:
    """Under a time budget every suite gets an equal part of the workers' time, shared
    equally by its property items (those left after ``-k``): a suite of one slow property
    (whole jit calls) runs as long as a suite of sixteen quick ones."""
    if CONFIG is None:
        return
    per_suite = collections.Counter(_suite_of(item.path) for item in session.items
                                    if _is_property(item))
    left = (CONFIG.end or time.time()) - time.time()
    shares = _shares(per_suite)
    total = sum(shares.values()) or 1.0
    WORKER.slices = {suite: max(1.0, left * _worker_count() * shares[suite] / total / n)
                     for suite, n in per_suite.items()}
    WORKER.weights = {item.nodeid: shares[suite] / per_suite[suite]
                      for item in session.items if _is_property(item)
                      for suite in [_suite_of(item.path)]}


def plan_slice(item: str, weights: dict[str, float], started: set[str], left: float,
               workers: int, committed: float) -> float:
    """The seconds property ``item`` may run: the workers' time left (``left`` each, less
    the ``committed`` seconds the other workers' running items still hold), shared among
    the items not yet started, this one included, in proportion to their weights. An item
    that ends early (Hypothesis ran out of new examples) leaves its time to the rest, and
    the last items end with the campaign."""
    waiting = sum(w for name, w in weights.items() if name not in started or name == item)
    pool = max(0.0, left * workers - committed)
    return pool * weights.get(item, 0.0) / waiting if waiting > 0 else pool / workers


def _planned_slice(item: str) -> float | None:
    """``plan_slice`` for ``item`` from every worker's file (None: no plan to read)."""
    where, end = CONFIG.scratch if CONFIG else None, CONFIG.end if CONFIG else None
    if not where or not end or item not in WORKER.weights:
        return None
    now = time.time()
    started, committed = set(WORKER.started), 0.0
    me = Path(where) / f"worker-{_worker_name()}.json"
    for path in Path(where).glob("worker-*.json"):
        if path == me:
            continue
        try:
            other = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        started.update(other.get("started") or ())
        if other.get("until") and not other.get("final"):
            committed += max(0.0, min(float(other["until"]), end) - now)
    return plan_slice(item, WORKER.weights, started, end - now, _worker_count(), committed)


def _shares(per_suite: collections.Counter) -> dict[str, float]:
    """Each suite's share of the time (``--share SUITE=N``; 1 unless told)."""
    told = CONFIG.shares if CONFIG else {}
    return {suite: float(told.get(suite, 1.0)) for suite in per_suite}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    if CONFIG is None:
        return (yield)
    WORKER.suite = _suite_of(item.path)
    WORKER.failing = False
    WORKER.deadline = None
    WORKER.failure = None
    if _is_property(item) and CONFIG.end:
        planned = _planned_slice(item.nodeid)
        slice_s = planned if planned is not None else WORKER.slices.get(WORKER.suite, 60.0)
        budget = max(0.0, min(slice_s, CONFIG.end - time.time()))
        WORKER.deadline = time.monotonic() + budget
        WORKER.until = time.time() + budget
        WORKER.started.append(item.nodeid)
        _write(final=False, now=True)
    start = time.monotonic()
    WORKER.calls_at_start = hits.jax_calls()
    try:
        return (yield)
    except TimeUp:
        return None
    except Exception:
        if _is_property(item):
            _observe_the_failure(item)
        raise
    finally:
        WORKER.jax_calls[WORKER.suite] += hits.jax_calls() - WORKER.calls_at_start
        WORKER.calls_at_start = None
        WORKER.seconds[WORKER.suite] += time.monotonic() - start
        if _is_property(item):
            WORKER.property_seconds[WORKER.suite] += time.monotonic() - start
        WORKER.deadline = None
        WORKER.until = None
        _write()


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:120]


def _save_disagreement(item: Any, report: Any) -> None:
    part = _part_of(item.path)
    suite = str(part["suite"])
    WORKER.failed[suite] += 1
    if not CONFIG.out:
        return
    name = re.sub(r"\[shard-[0-9]+-of-[0-9]+\]$", "", item.name)
    # the test as pytest finds it: by module (pytest --pyargs) or by file
    test = f"{part['module'] or item.path}::{name}"
    failure = WORKER.failure or {}
    record = {
        "suite": suite, "test": test, "item": report.nodeid, "phase": report.when,
        "falsifying_example": failure.get("representation"),
        "arguments": failure.get("arguments"),
        "how_generated": failure.get("how_generated"),
        "reproduce_failure": failure.get("reproduction_decorator"),
        "database": CONFIG.database,
        "planted": CONFIG.plant,
        "replay": f"shardlaw campaign --replay <this file>   (or: python -m pytest -o "
                  f"shardlaw=true {'--pyargs ' if part['module'] else ''}'{test}' with the "
                  f"example database {CONFIG.database})",
        "report": str(report.longreprtext)[-20000:],
    }
    Path(CONFIG.out).mkdir(parents=True, exist_ok=True)
    file = f"{suite}-{_safe(name)}-{os.getpid()}-{int(time.time() * 1000)}.json"
    (Path(CONFIG.out) / file).write_text(json.dumps(record, indent=2))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    report = yield
    if CONFIG is not None and WORKER.active and report.failed:
        _save_disagreement(item, report)
    return report


def pytest_runtest_logreport(report: Any) -> None:
    if WORKER.active:
        _write()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: Any) -> None:
    if WORKER.active:
        _write(final=True)
