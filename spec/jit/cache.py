"""When ``jax.jit`` (jax 0.10.2) traces, lowers and compiles again, and the shardlaw cache policy.

A call of a jitted function is answered by the first of six caches that holds it; each
cache is keyed by an equivalence written here as a rule (``CACHE-n``):

======== ============================================ ===================================
level    JAX's cache                                  JAX's counter (``test_util``)
======== ============================================ ===================================
dispatch the C++ fast path (``PjitFunctionCache``)    ``count_pjit_cpp_cache_miss``
params   ``pjit._infer_params_cached`` (per wrapper)  (none; ``cache_info()``)
trace    ``partial_eval.trace_to_jaxpr``              ``count_jit_tracing_cache_miss``
lowering ``pjit._pjit_lower``                         ``count_jit_compilation_cache_miss``
module   ``pxla._cached_lowering_to_hlo``             ``count_jit_and_pmap_lowerings``
compile  ``pxla._cached_compilation`` (XLA)           (backend compile events)
======== ============================================ ===================================

A dispatch hit ends the call; otherwise the params cache is asked, and only its miss asks
the trace cache; every dispatch miss asks the lowering cache, and only a lowering miss asks
the module and compile caches. JAX's counter names mislead twice: the "compilation cache
miss" counter counts lowering misses (a new ``MeshComputation``, compiled once), and the
"lowerings" counter counts module misses.

:func:`explain_cache` runs a sequence of :class:`CallSite` values (a call description, the
function object and the jit wrapper it goes through) through the model and returns, per
call, which levels hit and which missed, and for each miss the key difference against the
closest earlier entry. :func:`policy_classes` says what shardlaw's policy (CACHE-12) would
compile instead: one executable per placement class.

This module is the model: the levels, the walk of a call through them, the reasons and the
table. The call sites and CACHE-0 are in ``cache_sites.py``, the keys of the six caches
(CACHE-1 to CACHE-10) in ``cache_keys.py``, and the shardlaw policy (CACHE-11, CACHE-12) in
``cache_policy.py``.

Calls that the jit-call semantics reject are shown and leave the caches as they were (JAX
keeps a fall-back entry on its dispatch path; the model does not follow errors). The model
covers calls of concrete arguments; ``.lower()``/``.trace()`` and AOT calls are not modelled.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from .call import Verdict
from ..placement.equivalence import hlo_equal, jax_equivalent, placement_equivalent
from ..placement.blocks import to_hlo
from ..core.rules import Rejection
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from .cache_keys import (
    GONE, Aval, compile_key, differences, dispatch_cache, dispatch_signature, lowering_key,
    module_key, params_key, trace_key,
)
from .cache_sites import CallSite, Key, Part, Placed, site_verdicts
# Moved to rooms of their own and still imported from here: the call sites (by
# ``shardlaw.spec``, docs/cache.rst and the property suites) and the shardlaw policy (by
# ``shardlaw.spec`` and the property suites).
from .cache_sites import check_sequence
from .cache_policy import placement_class, policy_classes

__all__ = [
    "LEVELS", "COUNTERS", "CacheRow", "CacheTable", "explain_cache", "describe_cache_table",
    "CallSite", "check_sequence", "placement_class", "policy_classes",
]

LEVELS = ("dispatch", "params", "trace", "lowering", "module", "compile")

# The JAX counter (jax._src.test_util) or event that counts each level's misses.
COUNTERS = {
    "dispatch": "count_pjit_cpp_cache_miss",
    "params": "pjit._infer_params_cached.cache_info().misses",
    "trace": "count_jit_tracing_cache_miss",
    "lowering": "count_jit_compilation_cache_miss",
    "module": "count_jit_and_pmap_lowerings",
    "compile": "/jax/core/compile/backend_compile_duration events",
}


# =========================================================================== the model

@dataclasses.dataclass
class _Level:
    """One cache: buckets of (key, entry id)."""

    buckets: dict = dataclasses.field(default_factory=dict)
    next_id: int = 0
    traces: dict = dataclasses.field(default_factory=dict)   # params entry -> trace entry
    fallback: set = dataclasses.field(default_factory=set)   # entries of calls that failed

    def lookup(self, bucket: Any, key: Key) -> tuple[int | None, list]:
        entries = self.buckets.setdefault(bucket, [])
        for k, entry in entries:
            if k == key:
                return entry, entries
        return None, entries

    def insert(self, entries: list, key: Key) -> int:
        self.next_id += 1
        entries.append((key, self.next_id))
        return self.next_id


@dataclasses.dataclass(frozen=True)
class CacheRow:
    """One call of a sequence: per level "hit", "miss" or "" (not asked), and why each missed."""

    index: int
    site: CallSite
    outcome: tuple[str, ...]
    reasons: tuple[str, ...]
    rejected: str | None = None
    note: str | None = None

    def at(self, level: str) -> str:
        return self.outcome[LEVELS.index(level)]

    def why(self, level: str) -> str:
        return self.reasons[LEVELS.index(level)]

    def misses(self) -> dict[str, int]:
        """Per level, 1 when it missed (what JAX's counters add for this call)."""
        return {level: int(o == "miss") for level, o in zip(LEVELS, self.outcome)}

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "function": self.site.function,
                "wrapper": self.site.wrapper, "rejected": self.rejected, "note": self.note,
                "outcome": dict(zip(LEVELS, self.outcome)),
                "reasons": {lv: r for lv, r in zip(LEVELS, self.reasons) if r}}


class CacheTable(tuple):
    """The rows of :func:`explain_cache`; ``str()`` gives the table."""

    def __str__(self) -> str:
        return describe_cache_table(self)

    def totals(self) -> dict[str, int]:
        """Per level, the number of misses over the sequence."""
        return {level: sum(r.misses()[level] for r in self) for level in LEVELS}


def explain_cache(sites: Iterable[CallSite]) -> CacheTable:
    """Per call of ``sites``: which of jit's caches hit and which missed, and why (CACHE-0..10).

    >>> from shardlaw.spec import Arg, Call, Mesh, NamedSharding, Out, P
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> def call(spec):
    ...     return Call(args=(Arg.committed((8, 8), NamedSharding(m, spec)),), outputs=Out((8, 8)))
    >>> table = explain_cache([CallSite(call(P("x"))), CallSite(call(P("x"))),
    ...                        CallSite(call(P("x", None)))])
    >>> [row.outcome for row in table]
    [('miss', 'miss', 'miss', 'miss', 'miss', 'miss'), ('hit', '', '', '', '', ''), ('miss', 'hit', '', 'miss', 'hit', 'hit')]
    >>> print(table[2].why("dispatch"))
    args[0] sharding: NamedSharding(Mesh({'x': 2, 'y': 4}), P('x')) -> NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', None)) (written differently, JAX-equivalent)
    """
    state = {level: _Level() for level in LEVELS}
    return CacheTable(_one_call(index, site, verdict, state) if verdict.accepted
                      else _rejected(index, site, verdict, state)
                      for index, site, verdict in site_verdicts(sites))



def _rejected(index: int, site: CallSite, verdict: Verdict, state: dict) -> CacheRow:
    """A call jit would reject: the dispatch fast path still answers it if it can.

    The fast path looks the signature up before any check runs, so a call that differs from
    a cached one only in what its key leaves out (keep_unused, CACHE-1) runs the cached
    executable instead of being refused. Otherwise JAX raises, and leaves a dispatch entry
    that sends every later call with that signature to the Python path; a call refused
    while lowering or later also leaves its trace. (Entries that calls refused during
    tracing leave are not modelled.)
    """
    rejection = f"{verdict.rule}: {verdict.message}"
    blank = ("",) * len(LEVELS)
    if verdict.stage in ("jit", "trace", "description"):
        return CacheRow(index, site, blank, blank, rejection)
    try:
        return _one_call(index, site, verdict, state, rejection)
    except Rejection:
        return CacheRow(index, site, blank, blank, rejection)


def _one_call(index: int, site: CallSite, verdict: Verdict, state: dict,
              rejection: str | None = None) -> CacheRow:
    outcome = dict.fromkeys(LEVELS, "")
    reasons = dict.fromkeys(LEVELS, "")

    def ask(level: str, bucket: Any, key: Key, first: str) -> int:
        entry, entries = state[level].lookup(bucket, key)
        if entry is not None:
            outcome[level] = "hit"
            return entry
        outcome[level] = "miss"
        reasons[level] = _why(key, [k for k, _ in entries], first)
        return state[level].insert(entries, key)

    def row(note: str | None = None) -> CacheRow:
        return CacheRow(index, site, tuple(outcome.values()), tuple(reasons.values()),
                        None if note else rejection, note)

    facts = site.facts
    fallback = state["dispatch"].fallback
    entry = ask("dispatch", dispatch_cache(site), dispatch_signature(site),
                f"first call of {site.function} through a dispatch cache with these jit options")
    if entry in fallback and (rejection is None or outcome["dispatch"] == "hit"):
        outcome["dispatch"] = "miss"
        reasons["dispatch"] = ("an earlier call with this signature failed; the fast path "
                               "sends it to Python every time")
    elif outcome["dispatch"] == "hit":
        return row(None if rejection is None else
                   f"served by the fast path although jit would refuse it ({rejection})")
    elif rejection is not None:
        fallback.add(entry)
    # A params entry remembers the trace it found; only a params miss asks the trace cache.
    found = state["params"].traces
    params = ask("params", site.wrapper, params_key(site), f"first call through {site.wrapper}")
    if outcome["params"] == "miss":
        found[params] = ask("trace", (site.function, facts.static_positions), trace_key(site),
                            f"first trace of {site.function}")
    if rejection is not None:
        return row()
    trace = found[params]
    ask("lowering", trace, lowering_key(site), "first lowering of this trace")
    if outcome["lowering"] == "hit":
        return row()
    # The module cache is keyed by the pruned trace, which keep_unused and donation make.
    pruned = (trace, site.call.options.keep_unused, facts.donated)
    module = ask("module", pruned, module_key(site, verdict), "first module of this trace")
    ask("compile", module, compile_key(site, verdict), "first compilation of this module")
    return row()


# =========================================================================== reasons

def _why(key: Key, earlier: list[Key], first: str) -> str:
    if not earlier:
        return first
    # The closest earlier entry: fewest differing parts, the latest among equals.
    best = min(reversed(earlier), key=lambda old: len(differences(key, old)))
    before = {p.what: p for p in best}
    return "; ".join(_describe(before.get(p.what), p) for p in differences(key, best))


def _text(part: Part) -> str:
    if isinstance(part.shown, str):
        return part.shown
    return str(part.value) if isinstance(part.value, Aval) else repr(part.value)


def _describe(old: Part | None, new: Part) -> str:
    if old is None:
        return f"{new.what}: new ({_text(new)})"
    if new.value is GONE:
        return f"{new.what}: gone (was {_text(old)})"
    if isinstance(old.shown, Placed) and isinstance(new.shown, Placed):
        a, b = old.shown.sharding, new.shown.sharding
        return f"{new.what}: {_show(a)} -> {_show(b)}" + _how(a, b, new.shown.shape)
    return f"{new.what}: {_text(old)} -> {_text(new)}"


def _show(sharding: Any) -> str:
    if sharding is None:
        return "no sharding"
    if sharding is UNSPECIFIED:
        return "open"
    return repr(sharding)


def _how(a: Any, b: Any, shape: tuple[int, ...]) -> str:
    """How two shardings differ, in the words of the equivalence rules."""
    concrete = (NamedSharding, SingleDeviceSharding, GSPMDSharding)
    if not (isinstance(a, concrete) and isinstance(b, concrete)):
        return ""
    ndim = len(shape)
    try:
        if jax_equivalent(a, b, ndim):
            return " (written differently, JAX-equivalent)"
        same_memory = a.memory_kind == b.memory_kind
        if not same_memory:
            return " (memory kind differs)"
        same_hlo = hlo_equal(to_hlo(a, ndim), to_hlo(b, ndim))
        if placement_equivalent(a, b, shape):
            return " (placement-equal, not JAX-equivalent)"
        if same_hlo and sorted(a.device_list.ids()) == sorted(b.device_list.ids()):
            return " (same HLO, device order differs)"
        if same_hlo:
            return " (same HLO, other devices)"
        return " (HLO differs)"
    except Rejection:
        return ""


# =========================================================================== the table

def describe_cache_table(rows: Iterable[Any]) -> str:
    """The per-call table of :func:`explain_cache` rows (or their ``as_dict()`` forms) as text.

    >>> from shardlaw.spec import Arg, Call, Out
    >>> call = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)))
    >>> print(describe_cache_table(explain_cache([CallSite(call), CallSite(call)])))
    call  site    dispatch params trace lowering module compile
       0  f via w miss     miss   miss  miss     miss   miss
                  dispatch: first call of f through a dispatch cache with these jit options
       1  f via w hit      .      .     .        .      .
    misses        1        1      1     1        1      1
    """
    dicts = [r.as_dict() if isinstance(r, CacheRow) else r for r in rows]
    sites = [f"{d['function']} via {d['wrapper']}" for d in dicts]
    site_width = max([len("site")] + [len(s) for s in sites])
    widths = [max(len(level), 4) for level in LEVELS]
    head = f"call  {'site':<{site_width}} " + " ".join(
        f"{level:<{w}}" for level, w in zip(LEVELS, widths))
    lines = [head.rstrip()]
    totals = dict.fromkeys(LEVELS, 0)
    for d, site in zip(dicts, sites):
        cells = []
        for level, w in zip(LEVELS, widths):
            cell = d["outcome"].get(level) or "."
            totals[level] += cell == "miss"
            cells.append(f"{cell:<{w}}")
        lines.append(f"{d['index']:>4}  {site:<{site_width}} " + " ".join(cells).rstrip())
        for key in ("rejected", "note"):
            if d.get(key):
                lines.append(f"{'':>6}{'':<{site_width}} {key}: {d[key]}")
        first_reason = next(((lv, d["reasons"][lv]) for lv in LEVELS
                             if d["reasons"].get(lv)), None)
        for level in LEVELS:
            reason = d["reasons"].get(level)
            if reason and (level, reason) == first_reason or (
                    reason and not reason.startswith("first")):
                lines.append(f"{'':>6}{'':<{site_width}} {level}: {reason}")
    lines.append(f"misses{'':<{site_width}} " + " ".join(
        f"{totals[level]:<{w}}" for level, w in zip(LEVELS, widths)).rstrip())
    return "\n".join(lines)
