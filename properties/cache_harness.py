"""Run a sequence of call sites through real ``jax.jit`` and read JAX's cache counters per call.

:func:`run_sequence` builds one fresh Python function object per function name and one
``jax.jit`` wrapper per wrapper name (with the options of the wrapper's calls), then makes
each call in order and records, per call, how much each of JAX's counters moved:

* ``dispatch`` — the test event ``jit_cpp_cache_miss`` (``count_pjit_cpp_cache_miss``);
* ``params`` — misses of ``pjit._infer_params_cached`` (its ``cache_info()``);
* ``trace`` — ``trace_to_jaxpr`` (``count_jit_tracing_cache_miss``);
* ``lowering`` — ``pxla_cached_compilation`` (``count_jit_compilation_cache_miss``);
* ``module`` — ``lower_jaxpr_to_module`` (``count_jit_and_pmap_lowerings``);
* ``compile`` — XLA backend compiles (the ``/jax/core/compile/backend_compile_duration``
  monitoring event).

``jax._src.test_util`` counts the same events but needs absl; the events are read here from
JAX's own hook (``jax._src.util.test_event_listener``), chained to any listener already set.

The functions use only ``jax.lax`` primitives, so no jitted helper inside them traces or
lowers on its own and the counts belong to the call alone. Fresh function objects per run
keep JAX's caches (all keyed by the function object or by what its trace made) from
carrying one run into the next. :func:`compare_sequence` runs a sequence through both the
model (:func:`shardlaw.spec.jit.cache.explain_cache`) and JAX and lists the disagreements;
on a sequence JAX agreed with it records the cache rules with
:func:`shardlaw.properties.hits.record` (source ``"cache"``): for the rule of each cache
level (:data:`LEVEL_RULES`) a hit as accepted and a miss as refused, the other cache rules
that fired as accepted, and the rule that refused a call as refused.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import re
import warnings
from typing import Any, Sequence

from shardlaw.properties import hits
from shardlaw.spec.core.rules import tracing
from shardlaw.spec.jit.cache import LEVELS, CacheRow, CallSite, explain_cache
from shardlaw.spec.jit.call import Call

from .jit_harness import build_values, mesh_context, default_device_context, jit_kwargs

__all__ = ["Observed", "run_sequence", "compare_sequence", "counting", "harness_function",
           "SOURCE", "LEVEL_RULES"]

# The source under which the sequences JAX agreed with record their rules.
SOURCE = "cache"
# The rule that decides each cache level's hit or miss (spec/jit/cache.py).
LEVEL_RULES = {"dispatch": "CACHE-3", "params": "CACHE-5", "trace": "CACHE-6",
               "lowering": "CACHE-7", "module": "CACHE-9", "compile": "CACHE-10"}
_CITED_RULE = re.compile(r"\[([A-Z]+(?:-[A-Z]+)*-[0-9]+)\]")

_EVENTS = {"jit_cpp_cache_miss": "dispatch", "trace_to_jaxpr": "trace",
           "pxla_cached_compilation": "lowering", "lower_jaxpr_to_module": "module"}
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_COUNTS: collections.Counter = collections.Counter()
_INSTALLED: list[bool] = []


def _install() -> None:
    """Listen to JAX's test events and compile events (once per process)."""
    if _INSTALLED:
        return
    from jax._src import monitoring, util

    previous = util.test_event_listener

    def listen(name: str, *args: Any) -> None:
        level = _EVENTS.get(name)
        if level is not None:
            _COUNTS[level] += 1
        if previous is not None:
            previous(name, *args)

    def compiled(event: str, duration: float, **_: Any) -> None:
        if event == _COMPILE_EVENT:
            _COUNTS["compile"] += 1

    util.test_event_listener = listen
    monitoring.register_event_duration_secs_listener(compiled)
    _INSTALLED.append(True)


def _params_misses() -> int:
    from jax._src import pjit
    return pjit._infer_params_cached.cache_info().misses


@contextlib.contextmanager
def counting():
    """Yield a function that returns, per level, how often JAX's counters moved so far."""
    _install()
    before = collections.Counter(_COUNTS)
    params = _params_misses()

    def read() -> dict[str, int]:
        moved = {level: _COUNTS[level] - before[level] for level in LEVELS if level != "params"}
        moved["params"] = _params_misses() - params
        return {level: moved[level] for level in LEVELS}

    yield read


@dataclasses.dataclass
class Observed:
    """What JAX did for one call: counter moves per level, an error, its explanations."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    error: BaseException | None = None
    explained: list[str] = dataclasses.field(default_factory=list)


def harness_function(ignored: frozenset[int] = frozenset()):
    """A fresh function that returns ``x * x`` for every flat dynamic input not in ``ignored``.

    It flattens ``(args, kwargs)`` as jit does (static values are hashable non-arrays and
    are skipped by type), so one function serves calls of any shapes and dtypes.
    """
    import jax
    from jax import lax

    def function(*args: Any, **kwargs: Any) -> tuple:
        flat = [x for x in jax.tree_util.tree_leaves((args, kwargs)) if _is_value(x)]
        out = []
        for i, x in enumerate(flat):
            if i in ignored:
                continue
            same = lax.bitwise_and if x.dtype == bool else lax.mul
            out.append(same(x, x))
        return tuple(out)

    return function


def _is_value(x: Any) -> bool:
    return hasattr(x, "dtype") and hasattr(x, "shape")


class _ExplainLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "TRACING CACHE MISS" in message:
            self.lines.append(message)


def ignored_of(call: Call) -> frozenset[int]:
    """The positions of the inputs the call's function leaves unused (``Call.uses``)."""
    uses = call.uses
    return frozenset() if uses is None else frozenset(i for i, u in enumerate(uses) if not u)


def run_sequence(sites: Sequence[CallSite], explain: bool = False) -> list[Observed]:
    """Make every call of ``sites`` in real jax.jit; what JAX's counters did per call."""
    import jax

    hits.record_jax_calls(len(sites))
    functions: dict[str, Any] = {}
    wrappers: dict[str, Any] = {}
    built: dict[int, tuple[Any, Any]] = {}
    observed: list[Observed] = []
    log = _ExplainLog()
    logger = logging.getLogger("jax._src.interpreters.partial_eval")
    was = jax.config.jax_explain_cache_misses
    if explain:
        logger.addHandler(log)
        jax.config.update("jax_explain_cache_misses", True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for site in sites:
                call = site.call
                fun = functions.setdefault(site.function, harness_function(ignored_of(call)))
                if site.wrapper not in wrappers:
                    wrappers[site.wrapper] = jax.jit(fun, **jit_kwargs(call))
                # The same Call object again means the same arrays again (unless donated).
                key = id(call)
                if key not in built or call.options.donate_argnums:
                    with default_device_context(call):
                        built[key] = (build_values(call.args), build_values(call.kwargs))
                args, kwargs = built[key]
                seen = Observed()
                start = len(log.lines)
                with mesh_context(call), default_device_context(call), counting() as read:
                    try:
                        jax.block_until_ready(wrappers[site.wrapper](*args, **kwargs))
                    except Exception as error:  # noqa: BLE001 - recorded and compared
                        seen.error = error
                    seen.counts = read()
                seen.explained = log.lines[start:]
                observed.append(seen)
    finally:
        if explain:
            logger.removeHandler(log)
            jax.config.update("jax_explain_cache_misses", was)
    return observed


def compare_sequence(sites: Sequence[CallSite], explain: bool = False
                     ) -> tuple[list[CacheRow], list[Observed], list[str]]:
    """The model's rows, JAX's observations, and every disagreement between them."""
    with tracing() as trace:
        rows, observed, problems = _compare_sequence(sites, explain)
    if not problems:
        _record(rows, trace)
    return rows, observed, problems


def _record(rows: list[CacheRow], trace: list[str]) -> None:
    levels = set(LEVEL_RULES.values())
    for rule_id in dict.fromkeys(trace):
        if rule_id.startswith("CACHE-") and rule_id not in levels:
            hits.record(SOURCE, rule_id, refused=False)
    for row in rows:
        for level, rule_id in LEVEL_RULES.items():
            said = row.at(level)
            if said in ("hit", "miss"):
                hits.record(SOURCE, rule_id, refused=said == "miss")
        refused = _CITED_RULE.search(str(row.rejected or ""))
        if refused:
            hits.record(SOURCE, refused[1], refused=True)


def _compare_sequence(sites: Sequence[CallSite], explain: bool
                      ) -> tuple[list[CacheRow], list[Observed], list[str]]:
    rows = list(explain_cache(sites))
    observed = run_sequence(sites, explain=explain)
    problems: list[str] = []
    for row, seen in zip(rows, observed):
        where = f"call {row.index} ({row.site.function} via {row.site.wrapper})"
        if row.rejected:
            if seen.error is None:
                problems.append(f"{where}: the model says rejected ({row.rejected}), JAX ran it")
                continue
            if not any(row.outcome):  # refused while tracing: its cache effects are not modelled
                continue
        elif seen.error is not None:
            problems.append(f"{where}: JAX raised {type(seen.error).__name__}: "
                            f"{str(seen.error)[:300]}")
            continue
        predicted = row.misses()
        if predicted != seen.counts:
            levels = [f"{lv} model {predicted[lv]} JAX {seen.counts[lv]}" for lv in LEVELS
                      if predicted[lv] != seen.counts[lv]]
            problems.append(f"{where}: " + ", ".join(levels))
        if explain:
            problems += _check_explanation(where, row, seen)
    return rows, observed, problems


def _check_explanation(where: str, row: CacheRow, seen: Observed) -> list[str]:
    """JAX's own explanation of a trace-cache miss agrees with the model's reason.

    JAX compares with the earlier key of least severity (a context difference beats a
    pytree difference, which beats a types difference), the model with the earlier key of
    fewest differing parts; so the two are compared where they must agree: a function never
    seen before, and — when JAX finds only type differences — how many inputs differ.
    """
    if not seen.explained:
        return []
    text = seen.explained[-1]
    reason = row.why("trace")
    if row.at("trace") != "miss":
        return [f"{where}: JAX explains a trace-cache miss, the model has none"]
    if "never seen function" in text:
        return [] if reason.startswith("first trace") else [
            f"{where}: JAX never saw the function before, the model says: {reason}"]
    if reason.startswith("first trace"):
        return [f"{where}: the model sees a first trace, JAX explains: {text[:300]}"]
    if "different input types" in text:
        named = [line for line in text.splitlines() if line.strip().startswith("* at ")]
        differing = [part for part in reason.split("; ") if " type: " in part]
        if len(named) != len(differing) or len(differing) != len(reason.split("; ")):
            return [f"{where}: JAX explains {len(named)} input type(s), the model's reason is: "
                    f"{reason}"]
    return []
