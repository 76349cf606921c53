"""What one ``jit(fun, ...)`` holds: the :class:`Engine` — its options, its signature cache, its counters.

A call goes through three levels:

1. **dispatch** — JAX's own C++ dispatcher, keyed by the exact argument signature (types,
   sharding objects, committed flags, static values, jit context). A known signature runs
   without any Python, as fast as ``jax.jit``. The engine hands the dispatcher a signature's
   executable only when running the arguments as they are is right: every committed array
   already sits where the executable wants it. Otherwise (a committed argument jit moves)
   every call of that signature comes back to Python (:meth:`Engine.cache_miss`), which
   moves it (never a buffer on the wrong device);
2. **signature** — the engine's decision for one signature (a
   :class:`~.dispatch_plan.DispatchPlan`), held here: the rules of the jit-call semantics
   applied in JAX's order (:mod:`.stages`), the executable to use, how to hand it the
   arguments (as they are, relabelled over the same buffers, or moved) and how to label the
   results. A refused signature keeps its rejection, raised again on each call;
3. **executable** — the process-wide :data:`~shardlaw.engine.cache.CACHE`: one compiled
   program per placement class. A signature that is placement-equal to one compiled
   before reuses its executable; its arguments are relabelled over their own buffers
   (zero copy) and its results are labelled as ``jax.jit`` would label them for this call.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import warnings
from typing import Any, Callable, Iterator

from . import internals, layouts
from .cache import CACHE, Entry, owner_token
from .call_arguments import NO_STATICS, CallArguments, foreign_argument, refused_leaf
from .decision import CallDecision, StageContext
from .dispatch_plan import DispatchPlan
from .execution import run
from .options import Options
from .rules import EngineRejection, LeftToJax, recording, reject
from .stages import (
    JaxTracing, compile_refusal, stage_call, stage_compile, stage_dispatch, stage_lower,
    stage_trace,
)
from .statistics import RECENT, CacheInfo, Counters, counting_calls, steps_taken

__all__ = ["Engine", "NewSignature", "SIGNATURE_CAPACITY"]

SIGNATURE_CAPACITY = 4096   # signatures (plans) one jitted function holds


class Engine:
    """Everything one ``jit(fun, ...)`` holds: options, plans, counters, the dispatcher."""

    def __init__(self, fun: Callable, options: Options, signature_capacity: int,
                 jax_api: Callable | None = None) -> None:
        self.fun = fun
        self.options = options
        self.token = owner_token(fun, self)
        self._lock = threading.RLock()
        self._plans: collections.OrderedDict[tuple, DispatchPlan] = collections.OrderedDict()
        self._capacity = signature_capacity
        self.counters = Counters()
        self.calls = itertools.count()   # every call of the jitted function (atomic step)
        # Whether the jitted function runs a frame in front of the dispatcher (and so counts
        # its calls): when asked to, and always with static arguments (for ENG-1).
        self.counted = counting_calls() or bool(options.names.static_nums
                                                or options.names.static_names)
        # ... and always when it donates (ENG-3, ENG-6 on every call): then that frame is
        # the API boundary, and the dispatcher's miss decides a new signature itself.
        self.framed = self.counted or bool(options.names.donate_nums
                                           or options.names.donate_names)
        self._generation = 0
        self.dispatcher_ref: Callable[[], Any] = lambda: None
        # What the stages read of this function: its options, JAX's own jit of it (jax.jit,
        # or pjit for the engine's pjit, whose refusals JAX words as pjit's and which reads
        # the legacy ``with mesh:``), its cache token and its counters.
        self.context = StageContext(fun, options, jax_api or internals.JAX_JIT, self.token,
                                    self.counters)
        self.inner = self.context.inner   # JAX's own jit, inside

    # ----------------------------------------------------------------- the dispatcher's miss

    def cache_miss(self, *args: Any, **kwargs: Any) -> tuple[Any, Any, bool]:
        """Called by the C++ dispatcher for a signature it cannot run on its own."""
        self.counters.count("python_calls")
        arguments = CallArguments(args, kwargs, self.options.names, abstract_ok=False)
        if arguments.tracers or not internals.trace_state_clean():
            # Inside another transformation (a tracer among the arguments, or one closed
            # over): jit as a primitive of the outer trace, as JAX's own jit does, the
            # function traced from this frame (as deep in the stack as under jax.jit).
            trace = internals.JaxTrace(self.inner, args, kwargs)
            params = trace.params or internals.trace_for_jit(*trace.call)
            return trace.bound(params, args, kwargs), None, False
        if arguments.foreign:
            return self.left_to_jax(arguments, run=True), None, False
        try:
            if self.framed:
                # Behind the frame in front of the dispatcher (the one frame more), a new
                # signature is decided and traced in this frame: as deep as under jax.jit.
                with self.deciding(arguments) as new:
                    if new.trace is not None:
                        new.traced(new.trace.params or internals.trace_for_jit(*new.trace.call))
                plan = new.plan
            else:   # decided one frame down: a new signature's trace is JAX's depth
                plan = self.decision_for(arguments)
        except LeftToJax as why:
            return self.run_left_to_jax(arguments, why), None, False
        if plan.rejection is not None:
            raise plan.rejection_again()
        internals.note_python_dispatch()
        outputs = run(plan, arguments.leaves, arguments.treedef, self.counters)
        return outputs, plan.fastpath, False

    def run_left_to_jax(self, arguments: CallArguments, why: LeftToJax) -> Any:
        """A call the rules leave to JAX (``why``), run by JAX's own jit; a compile refusal
        of a call decided up to compiling is named by the engine's rule."""
        if why.decision is None:
            return self.left_to_jax(arguments, run=True)
        try:   # decided up to compiling: JAX's jit compiles and runs it
            return self.left_to_jax(arguments, run=True)
        except ValueError as error:
            refusal = compile_refusal(error, why.decision)
            if refusal is error:
                raise
            raise refusal.as_jax(error) from None

    def unhashable_static(self, args: tuple, kwargs: dict) -> Exception:
        """ENG-1 for a call the C++ dispatcher refused because a static argument is unhashable."""
        self.counters.count("refused_in_dispatch")
        try:
            CallArguments(args, kwargs, self.options.names, abstract_ok=False)
        except EngineRejection as error:
            return error
        return reject("ENG-1", ValueError, "a static argument cannot be hashed")

    def left_to_jax(self, arguments: CallArguments, run: bool) -> Any:
        """A call the rules do not describe, decided by JAX's own jit: run (``run``) or traced.

        When JAX refuses one of the leaves the rules do not describe (it cannot type it, or
        jit takes no such argument in a call), the refusal is ENG-2 in JAX's class and words;
        anything else the call raises (the function's own errors included) is JAX's, unchanged.
        """
        bad = refused_leaf(arguments, for_call=run)
        try:
            if run:
                return self.inner(*arguments.args, **arguments.kwargs)
            return self.inner.trace(*arguments.args, **arguments.kwargs)
        except (TypeError, ValueError) as error:
            if bad is None:
                raise
            raise foreign_argument(arguments, bad).as_jax(error, any_class=True) from None

    def arguments(self, args: tuple, kwargs: dict, abstract_ok: bool,
                  statics: bool = True) -> CallArguments:
        """One call's arguments as this function sees them (``statics=False``: all dynamic,
        as an executable compiled ahead of time takes them)."""
        names = self.options.names if statics else NO_STATICS
        return CallArguments(args, kwargs, names, abstract_ok=abstract_ok)

    # ----------------------------------------------------------------- the signature cache

    def plan(self, arguments: CallArguments) -> DispatchPlan:
        """The plan for these arguments' signature (cached, or made and compiled now); raises its rejection."""
        plan = self.decision_for(arguments)
        if plan.rejection is not None:
            raise plan.rejection_again()
        return plan

    def decision_for(self, arguments: CallArguments) -> DispatchPlan:
        """The plan for these arguments' signature, accepted or not: cached, or made (and compiled) now.

        A new signature is decided here, stage by stage (:meth:`deciding`), and JAX traces
        the function from this very frame: under the dispatcher's miss the function runs as
        deep in the stack as under ``jax.jit``.
        """
        with self.deciding(arguments) as new:
            if new.trace is not None:
                new.traced(new.trace.params or internals.trace_for_jit(*new.trace.call))
        return new.plan

    @contextlib.contextmanager
    def deciding(self, arguments: CallArguments) -> Iterator[NewSignature]:
        """The plan for a signature, decided around JAX's trace, which the ``with`` block takes::

            with engine.deciding(arguments) as new:
                if new.trace is not None:
                    new.traced(new.trace.params or internals.trace_for_jit(*new.trace.call))
            plan = new.plan

        JAX's tracing is called from the block's own frame (:class:`~.stages.JaxTracing`),
        so the traced function runs as deep in the stack as the code holding the block
        places it. A known signature's plan is there before the block (``new.trace`` None);
        a new one is decided stage by stage in JAX's order, kept, and there after it.
        """
        new = NewSignature(self._known(arguments))
        if new.plan is not None:
            yield new
            return
        generation, yielded = self._generation, False
        ctx, d = self.context, CallDecision(arguments)
        with recording() as fired:
            try:
                stage_call(ctx, d)
                with JaxTracing(ctx, d) as trace:
                    new.trace, new.decision, yielded = trace, d, True
                    yield new
                new.trace = None
                stage_trace(ctx, d)
                stage_lower(ctx, d)
                plan = stage_compile(ctx, d)
                stage_dispatch(ctx, d)
            except EngineRejection as error:
                plan = DispatchPlan()
                plan.rejection = self.in_jax_words(error, arguments)
            except LeftToJax as why:
                why.fired = tuple(dict.fromkeys(fired))  # type: ignore[attr-defined]
                raise
        new.plan, new.trace = self._keep(arguments, plan, fired, generation), None
        if not yielded:   # refused before tracing: the block runs once, with nothing to trace
            yield new

    def _keep(self, arguments: CallArguments, plan: DispatchPlan, fired: list,
              generation: int) -> DispatchPlan:
        """``plan``, with the rules that fired, kept for its signature (unless the cache was
        cleared while it was decided)."""
        plan.fired = tuple(dict.fromkeys(fired))
        with self._lock:
            if generation == self._generation:
                self._plans[arguments.key] = plan
                while len(self._plans) > self._capacity:
                    self._plans.popitem(last=False)
            if plan.entry is not None:
                plan.entry.users.add(self)
        return plan

    def _known(self, arguments: CallArguments) -> DispatchPlan | None:
        """The plan kept for this signature (a signature hit), else None (a miss, counted
        with what makes the signature new)."""
        with self._lock:
            plan = self._plans.get(arguments.key)
            if plan is not None:
                self._plans.move_to_end(arguments.key)
                known: list[tuple] = []
            else:
                known = list(self._plans)[-RECENT:]
        if plan is not None:
            self.counters.count("signature_hits")
        else:
            self.counters.count("signature_misses",
                                miss=f"signature: {_why_new(known, arguments)}")
        return plan

    def in_jax_words(self, error: EngineRejection, arguments: CallArguments) -> EngineRejection:
        """``error`` as an instance of the class JAX raises for this call, with JAX's message first.

        Only on the refusal path: JAX's own jit is taken through the same call up to the
        stage where JAX refuses it (trace, lower or compile; nothing runs), and what it
        raises lends its class and words. Where JAX raises nothing there (the engine refuses
        earlier than JAX would, or JAX only fails when running), the engine's words stand.
        """
        stage = error.stage
        if stage not in ("trace", "lower", "compile") or arguments.tracers:
            return error
        if error.jax_error == "abort":   # JAX's own jit would end the process here
            return error
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traced = self.inner.trace(*arguments.args, **arguments.kwargs)
                if stage != "trace":
                    lowered = traced.lower()
                    if stage == "compile":
                        lowered.compile()
        except EngineRejection:
            return error
        except Exception as jax_error:  # noqa: BLE001 - JAX's refusal, whatever its class
            return error.as_jax(jax_error)
        return error

    # ----------------------------------------------------------------- cache control

    def forget(self, entry: Entry) -> None:
        """An executable left the cache: drop the plans that use it, and the C++ signatures."""
        with self._lock:
            gone = [k for k, p in self._plans.items() if p.entry is entry]
            for k in gone:
                del self._plans[k]
        dispatcher = self.dispatcher_ref()
        if dispatcher is not None:
            internals.clear_signatures(dispatcher)

    def clear_cache(self) -> None:
        """Drop this function's signatures, plans and executables (other functions keep theirs)."""
        with self._lock:
            self._generation += 1
            self._plans.clear()
        dispatcher = self.dispatcher_ref()
        if dispatcher is not None:
            internals.clear_signatures(dispatcher)
        CACHE.drop_owner(self.token)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                self.inner.clear_cache()
            except Exception:  # noqa: BLE001 - JAX's own caches are a courtesy
                pass

    def cache_info(self) -> CacheInfo:
        dispatcher = self.dispatcher_ref()
        counts = self.counters.snapshot()
        with self._lock:
            calls = steps_taken(self.calls) if self.counted else None
            signatures = len(self._plans)
        return CacheInfo(
            calls=calls,
            dispatch_hits=None if calls is None else max(
                0, calls - counts["python_calls"] - counts["refused_in_dispatch"]),
            dispatch_entries=dispatcher._cache_size() if dispatcher is not None else 0,
            python_calls=counts["python_calls"],
            refused_in_dispatch=counts["refused_in_dispatch"],
            signature_hits=counts["signature_hits"], signature_misses=counts["signature_misses"],
            signatures=signatures,
            executable_hits=counts["executable_hits"],
            executable_misses=counts["executable_misses"],
            compiles=counts["compiles"], executables=CACHE.count(self.token),
            executables_total=len(CACHE), capacity=CACHE.capacity,
            recent_misses=counts["recent_misses"], divergences=counts["divergences"])


class NewSignature:
    """What the block of :meth:`Engine.deciding` sees: the plan, or the trace to take first."""

    __slots__ = ("plan", "trace", "decision")

    def __init__(self, plan: DispatchPlan | None) -> None:
        self.plan = plan
        self.trace: internals.JaxTrace | None = None
        self.decision: CallDecision | None = None

    def traced(self, params: Any) -> None:
        """Hand the decision JAX's trace (``params``, what tracing for jit returned)."""
        assert self.trace is not None and self.decision is not None
        self.decision.traced = self.trace.traced(params)


def _why_new(known: list[tuple], arguments: CallArguments) -> str:
    """What makes this signature new: how it differs from the closest of the ``known`` ones."""
    if not known:
        return "first call"
    key = arguments.key
    names = ("argument structure", "static arguments", None, "jit context (config)",
             "context mesh", "abstract context mesh", "default device")
    best, best_count = None, None
    for other in known:
        count = sum(a != b for a, b in zip(other, key))
        if other[0] == key[0] and other[2] != key[2]:
            count = sum(a != b for a, b in zip(other[2], key[2]))
        if best_count is None or count < best_count:
            best, best_count = other, count
    assert best is not None
    for index, (a, b) in enumerate(zip(best, key)):
        if a == b:
            continue
        if index != 2 or best[0] != key[0]:
            return f"new {names[index] or 'argument types'}"
        paths = arguments.paths()
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"{paths[i]}: {_leaf_words(y)} (was {_leaf_words(x)})"
    return "a signature evicted before"


def _leaf_words(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 4 and hasattr(key[0], "shape"):
        aval, sharding, committed, layout = key
        return (f"{aval.str_short()} on {sharding}" + ("" if committed else " (uncommitted)")
                + ("" if layout is None else f" in {layouts.layout_text(layout)}"))
    return repr(key)
