"""The stages of deciding one call, in JAX's order: call, trace, lower, compile, dispatch.

Each stage applies the rules of the jit-call semantics that JAX applies at that point and
writes what it found into the call's :class:`~.decision.CallDecision`; it reads of the
jitted function only its :class:`~.decision.StageContext`. A call of a jitted function runs
all five (``Engine`` in :mod:`.function_engine`); the AOT stages (:mod:`.aot`: ``trace``,
``lower``, ``compile``) run them one at a time, and stop where JAX's do.

* :func:`stage_call` — before tracing: JIT-5, FIT-2, JIT-4, JIT-3, TREE-1, FIT-1 (inputs);
* :class:`JaxTracing` — JAX's trace, taken in the deciding frame itself (so the function
  runs as deep in the stack as under ``jax.jit``), its refusals named by rule;
  :func:`stage_trace` — after it, TREE-2 and FIT-1 (results);
* :func:`stage_lower` — before lowering: RES-1..5, KEEP-1, the shardings inside the body
  (PROG-2, :mod:`.program_body`), DA-1..4, EXE-1, EXE-2, LAY;
* :func:`stage_compile` — the executable, from the process-wide cache or compiled, keyed
  by the call's placement class (:func:`executable_key`); OUT-1..3; the
  :class:`~.dispatch_plan.DispatchPlan`;
* :func:`stage_dispatch` — handing the arguments over: RES-5 under ``device=``/``backend=``.
"""

from __future__ import annotations

import functools
import hashlib
import time
from typing import Any

import jax
from jax.sharding import SingleDeviceSharding

from . import internals, layouts
from .cache import CACHE, Entry
from .call_arguments import CallArguments
from .decision import CallDecision, StageContext
from .dispatch_plan import DispatchPlan, make_plan
from .options import check_call_form
from .program_body import (
    check_body_lowers, check_listed_specs, check_refs_not_donated, constant_sharding,
    inside_shardings, ref_inputs, walked,
)
from .recovery import Value, concrete_inputs, recover_shardings
from .resolution import (
    ABSTRACT, ARRAY, Input, Source, check_has_devices, check_iota_tiles, check_result_mesh,
    check_reused_replica, check_tile_count, check_typed_result_mesh, device_assignment,
    distinct_sources, input_source, kept_inputs, replicate_scalars, resolve_input,
    results_committed, typed_over_explicit_mesh,
)
from .rules import EngineRejection, LeftToJax, reject
from .traced_refusals import name_trace_refusal
from .shardings import (
    UNSPECIFIED, check_fits, check_lowered_fit, check_typed_fit, context_mesh, leaf_to_sharding,
    placement_class,
)
from .trees import (
    convert_tree, donated_leaves, match_in_shardings, match_out_shardings, result_paths,
)

__all__ = ["CallDecision", "StageContext", "stage_call", "JaxTracing", "stage_trace",
           "stage_lower", "stage_compile", "stage_dispatch", "executable_key", "compile_refusal"]


# --------------------------------------------------------------------------- call

def stage_call(ctx: StageContext, d: CallDecision) -> None:
    """At the call, before tracing: JIT-5, FIT-2, JIT-4, JIT-3, TREE-1, FIT-1 (inputs)."""
    o, arguments = ctx.options, d.arguments
    d.context = context_mesh()
    _check_abstract_types(arguments)
    check_call_form(arguments.kwargs, o.in_shardings, d.context, o.device_or_backend)
    n = len(arguments.leaves)
    if o.device_or_backend:
        d.target = o.target_device()
        target = SingleDeviceSharding(d.target)
        d.jit_in = [target] * n
        d.out_tree_shardings = target
    else:
        convert = functools.partial(_leaf_to_sharding, context=d.context)
        in_tree = convert_tree(o.in_shardings, convert, "in_shardings")
        d.out_tree_shardings = convert_tree(o.out_shardings, convert, "out_shardings")
        if arguments.kwargs:
            d.jit_in = [UNSPECIFIED] * n   # JIT-4: in_shardings is left out here
        else:
            d.jit_in = match_in_shardings(in_tree, arguments.dyn_args)
        d.jit_in, d.in_layouts = layouts.split(d.jit_in)
        d.jit_in = [UNSPECIFIED if s is None else s for s in d.jit_in]
    paths = arguments.paths() if n else []
    for i, s in enumerate(d.jit_in):
        if s is not UNSPECIFIED:
            check_fits(s, arguments.shape(i), paths[i])
    for i, given in enumerate(d.in_layouts):
        layouts.check_rank(paths[i], given, arguments.shape(i), "argument")


def _check_abstract_types(arguments: CallArguments) -> None:
    """Each abstract argument's type divides over its sharding's Explicit axes (FIT-2)."""
    for i, kind in enumerate(arguments.kinds):
        if kind == ABSTRACT:
            held = arguments.key[2][i][3]
            if held is not None:
                check_typed_fit(held, arguments.shape(i), arguments.paths()[i])


def _leaf_to_sharding(leaf: Any, which: str, context: Any) -> Any:
    return leaf_to_sharding(leaf, context, which)


# --------------------------------------------------------------------------- trace

class JaxTracing:
    """JAX's trace of the call, taken in the frame of the code that decides it::

        with JaxTracing(ctx, d) as trace:
            d.traced = trace.traced(trace.params or internals.trace_for_jit(*trace.call))
        stage_trace(ctx, d)

    JAX's tracing is called from that frame itself, not from a function of the engine's, so
    the traced function runs as deep in the stack as under ``jax.jit`` (JAX's own
    ``test_jit_traceback`` counts the frames; the engine adds none). What JAX raises while
    tracing leaves the block named by the engine's rule where it has one (a call inside the
    body JAX refused, :func:`~.traced_refusals.name_trace_refusal`; out_shardings the
    results do not fit, TREE-2 and FIT-1), else as JAX raised it.
    """

    __slots__ = ("_ctx", "_d")

    def __init__(self, ctx: StageContext, d: CallDecision) -> None:
        self._ctx, self._d = ctx, d

    def __enter__(self) -> internals.JaxTrace:
        arguments = self._d.arguments
        return internals.JaxTrace(self._ctx.inner, arguments.args, arguments.kwargs)

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        if error is None or isinstance(error, EngineRejection) or \
                not isinstance(error, Exception):
            return False
        named = name_trace_refusal(error)   # a call inside the body JAX refused (its rule)
        if named is not error:
            raise named.with_traceback(traceback) from None
        if self._ctx.options.out_shardings is UNSPECIFIED:
            return False
        # JAX refused while tracing. If the function traces without out_shardings, the
        # engine's own rules say what is wrong with them (and raise); else JAX's error stands.
        arguments = self._d.arguments
        try:
            plain = self._ctx.jax_jit_without_out_shardings().trace(*arguments.args,
                                                                     **arguments.kwargs)
        except Exception:  # noqa: BLE001 - the function itself fails: JAX's error stands
            return False
        _result_shardings(self._d, plain.out_tree, list(plain.jaxpr.out_avals))
        return False


def stage_trace(ctx: StageContext, d: CallDecision) -> None:
    """After JAX's trace (:class:`JaxTracing`): TREE-2 and FIT-1 (results)."""
    if internals.trace_state_clean():
        internals.check_no_escaped_tracers(d.traced)
    if internals.hoisted_constants(d.traced):
        # A mutable closed-over value with a type of its own (a hijax Box, a flax NNX
        # Variable made with hijax=True): JAX makes every closed-over value an input of
        # the program, places it among the arguments and traces again when its type
        # changes. The jit-call rules describe the call's own arguments only.
        raise LeftToJax("the function closes over a mutable value JAX makes an input")
    d.in_avals = internals.argument_avals(d.traced)
    d.out_avals = list(d.traced.jaxpr.out_avals)
    if not all(isinstance(a, internals.ShapedArray) for a in d.out_avals):
        raise LeftToJax("a result is not an array (a token, say)")
    out_tree = d.traced.out_tree
    d.out_paths = result_paths(out_tree)
    d.out_flat = _result_shardings(d, out_tree, d.out_avals)


def _result_shardings(d: CallDecision, out_tree: Any, out_avals: list[Any]) -> list[Any]:
    """out_shardings matched to the results (TREE-2), split from their layouts, checked (FIT-1)."""
    flat = match_out_shardings(d.out_tree_shardings, out_tree)
    flat, d.out_layouts = layouts.split(flat)
    flat = [UNSPECIFIED if s is None else s for s in flat]
    paths = result_paths(out_tree)
    for s, aval, path in zip(flat, out_avals, paths):
        if s is not UNSPECIFIED:
            check_fits(s, tuple(aval.shape), path)
    for given, aval, path in zip(d.out_layouts, out_avals, paths):
        layouts.check_rank(path, given, tuple(aval.shape), "result")
    return flat


# --------------------------------------------------------------------------- lower

def stage_lower(ctx: StageContext, d: CallDecision) -> None:
    """Before lowering: RES-1..5, KEEP-1, the shardings inside the body (PROG-2; as they are
    listed, SMAP-12 for the in specs of shard_maps over concrete meshes), DA-1..4,
    EXE-1, what lowering checks inside the body (WSC-8; SMAP-12, SMAP-13, SMAP-22 in its
    shard_maps), EXE-2."""
    o, arguments = ctx.options, d.arguments
    n = len(arguments.leaves)
    d.inputs = [arguments.input(i, d.jit_in[i]) for i in range(n)]
    processes = jax.process_count()
    d.resolved = [resolve_input(item, processes, o.device_or_backend) for item in d.inputs]
    _check_layouts(d)
    used = internals.used_inputs(d.traced)
    if used is None or len(used) != n:
        used = [True] * n
    d.kept = kept_inputs(used, o.keep_unused)
    d.inside = inside_shardings(d.traced.jaxpr, bool(o.keep_unused))
    body = walked(d.traced.jaxpr, bool(o.keep_unused))
    # closed-over refs are inputs right after the arguments (REF-1)
    refs = d.refs = ref_inputs(d.traced.jaxpr, bool(o.keep_unused)) if (
        body.refs or arguments.refs) else ()
    # hoisted committed constants after them (CONST-2)
    constants = d.constants = constant_sharding(d.traced.jaxpr, bool(o.keep_unused)) if (
        body.constants) else ()
    sources = distinct_sources(
        [*(input_source(d.inputs[i], d.resolved[i]) for i in d.kept), *refs], constants,
        [Source(s, f"out_shardings for {p}", p) for s, p in zip(d.out_flat, d.out_paths)],
        d.inside)
    check_listed_specs(body)   # SMAP-12, as JAX lists the shardings inside
    assignment, d.count = device_assignment(sources, d.context)
    check_has_devices(assignment, d.context)
    assert assignment is not None
    d.assignment = tuple(assignment)
    d.final = replicate_scalars(d.resolved, [len(i.shape) for i in d.inputs], d.assignment)
    for aval, s, path in zip(d.out_avals, d.out_flat, d.out_paths):
        if typed_over_explicit_mesh(aval):   # a result typed over an all-Explicit mesh
            check_result_mesh(aval, d.count, path)
        elif s is UNSPECIFIED:   # a result its type places, over a mixed mesh (PROG-5)
            check_typed_result_mesh(aval, d.count, path)
    for i in d.kept:  # only an abstract argument's own sharding may not fit yet (FIT-3)
        if d.inputs[i].kind == ABSTRACT:
            check_lowered_fit(d.final[i], d.inputs[i].shape, d.inputs[i].path)
    for path, s in [*((d.inputs[i].path, d.final[i]) for i in d.kept),
                    *zip(d.out_paths, d.out_flat)]:
        check_tile_count(s, path)
        check_iota_tiles(s, path)
    check_body_lowers(body)
    d.committed = results_committed(d.context, d.count,
                                    [*(d.resolved[i] for i in d.kept),
                                     *(s.sharding for s in (*refs, *constants))],
                                    [*d.out_flat, *(s.sharding for s in d.inside)])


def _check_layouts(d: CallDecision) -> None:
    """Layouts, after every sharding: argument by argument (LAY-1, LAY-5), then results."""
    arguments = d.arguments
    for i, given in enumerate(d.in_layouts):
        if given is not None:
            item = d.inputs[i]
            layouts.check_argument(item.path, given, arguments.layout(i),
                                   item.committed and arguments.kinds[i] == ARRAY,
                                   len(item.shape), d.jit_in[i])
    for given, s, path in zip(d.out_layouts, d.out_flat, d.out_paths):
        layouts.check_layout_devices(path, given, s)


# --------------------------------------------------------------------------- compile

def stage_compile(ctx: StageContext, d: CallDecision) -> DispatchPlan:
    """The executable (from the cache, or compiled), the results' shardings (OUT-1..3), how to run.

    A call with mutable refs that take part (passed or closed over) is decided up to here
    (a donated ref argument is refused, REF-3); JAX's jit compiles and runs it, writing the
    refs' new values back and reading the results' shardings over the refs' as it does."""
    arguments = d.arguments
    if arguments.refs or d.refs:
        check_refs_not_donated(
            arguments.paths(), arguments.refs, d.kept, donated_leaves(
                arguments.positions, ctx.options.names, arguments.dyn_args,
                arguments.dyn_kwargs),
            [(x.shape, x.dtype, f) for x, f in zip(d.inputs, d.final)],
            [(a.shape, a.dtype, s) for a, s in zip(d.out_avals, d.out_flat)], d.count)
        raise LeftToJax("mutable refs among its inputs", d)
    _check_input_recovery(d)
    key = executable_key(ctx, d)
    entry, compiled_here = CACHE.get_or_compile(
        ctx.token, key, functools.partial(_compile, ctx, d, key))
    if compiled_here:
        ctx.counters.count("executable_misses", "compiles",
                              miss=f"executable: {_why_compiled(ctx.token, key)}")
    else:
        ctx.counters.count("executable_hits")
    return make_plan(ctx, d, entry, compiled_here)


def executable_key(ctx: StageContext, d: CallDecision) -> tuple:
    """The placement class of this call: what the executable depends on."""
    arguments = d.arguments
    # Every argument as the program types it: shape, dtype, weak type, memory space, and
    # the type's sharding where its mesh has Explicit axes (the program can see those).
    avals = tuple((tuple(a.shape), a.dtype, bool(getattr(a, "weak_type", False)),
                   str(getattr(a, "memory_space", "")), _explicit_type(a))
                  for a in d.in_avals)
    kept_classes = tuple(_input_class(d.resolved[i], d.final[i], arguments.shape(i),
                                      d.assignment) for i in d.kept)
    out_classes = tuple(
        "open" if s is UNSPECIFIED else placement_class(s, tuple(a.shape))
        for s, a in zip(d.out_flat, d.out_avals))
    # The program itself stands for everything that shapes it (config, context mesh);
    # where it runs is the device assignment.
    program = ProgramText(d.traced.jaxpr)
    return (arguments.treedef, arguments.key[1], avals, internals.program_context(), program,
            ctx.options.key, d.kept, kept_classes, out_classes,
            tuple(dev.id for dev in d.assignment), _layout_key(d),
            tuple(sorted((d.compiler_options or {}).items())))


class ProgramText:
    """A traced program in the executable key: equal to another when their texts are equal.

    The text is written only when a key is compared with one equal in every other part (a
    placement-equal signature of the same function, or a recompile's reasons), never on
    the first compile of a function, where printing a large program would cost its first
    call time for nothing. Its hash is constant; the other parts of the key spread entries.
    """

    __slots__ = ("_jaxpr", "_digest")

    def __init__(self, closed_jaxpr: Any) -> None:
        self._jaxpr: Any = closed_jaxpr
        self._digest: str | None = None

    def digest(self) -> str:
        if self._digest is None:
            text = internals.program_text(self._jaxpr)
            self._digest = hashlib.sha1(text.encode()).hexdigest()
            self._jaxpr = None
        return self._digest

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, ProgramText)
                                 and self.digest() == other.digest())

    def __repr__(self) -> str:
        return f"ProgramText({self.digest()[:12]})"


def _layout_key(d: CallDecision) -> Any:
    """The layouts the executable depends on: those jit's options give, and the committed
    arguments' own (JAX compiles a committed argument in a non-default layout into an
    executable of its own); None when every one is the default."""
    arguments = d.arguments
    n = len(arguments.leaves)
    given_in = [layouts.layout_key(x, len(arguments.shape(i)))
                for i, x in enumerate(d.in_layouts)] if d.in_layouts else []
    held = [arguments.layout(i) if d.inputs[i].committed else None for i in range(n)]
    given_out = [layouts.layout_key(x, len(a.shape))
                 for x, a in zip(d.out_layouts, d.out_avals)] if d.out_layouts else []
    if not any(given_in) and not any(held) and not any(given_out):
        return None
    return (tuple(given_in), tuple(held), tuple(given_out))


def _input_class(resolved: Any, final: Any, shape: tuple[int, ...], assignment: tuple) -> Any:
    """An input's placement class in the executable key (CACHE-12 C3): an input left open
    that jit places itself is in the class of where it goes — the device of a one-device
    program, or replicated over the devices for a scalar (EXE-1, ``final``)."""
    if resolved is UNSPECIFIED and len(assignment) == 1:
        resolved = SingleDeviceSharding(assignment[0])
    elif resolved is UNSPECIFIED and len(shape) == 0:
        resolved = final
    return "open" if resolved is UNSPECIFIED else placement_class(resolved, shape)


def _explicit_type(aval: Any) -> Any:
    """The sharding an argument's type carries when its mesh has Explicit axes, else None."""
    typed = getattr(aval, "sharding", None)
    mesh = getattr(typed, "mesh", None)
    if mesh is None or jax.sharding.AxisType.Explicit not in getattr(mesh, "axis_types", ()):
        return None
    return typed


def _check_input_recovery(d: CallDecision) -> None:
    """OUT-2 on the inputs: a given GSPMDSharding that cannot be re-read over the first
    given mesh fails JAX after compiling; the engine refuses before compiling."""
    kept_values = [Value.of_aval(d.in_avals[i]) for i in d.kept]
    kept_final = concrete_inputs([d.final[i] for i in d.kept], d.assignment)
    path = d.inputs[d.kept[0]].path if d.kept else None
    recover_shardings(kept_final, kept_values, kept_final, kept_values, None, path)


def _why_compiled(token: Any, key: tuple) -> str:
    """What makes this executable key new: how it differs from the closest one compiled."""
    others = [e.key for e in CACHE.entries(token) if e.key != key]
    if not others:
        return "first compile of this function"
    names = ("argument structure", "static arguments", "argument types", "jit config",
             "traced program", "options", "kept inputs", "input placements",
             "result placements", "device assignment", "layouts",
             "compiler options")
    closest = min(others, key=lambda k: sum(a != b for a, b in zip(k, key)))
    differing = [names[i] for i, (a, b) in enumerate(zip(closest, key)) if a != b]
    return "new " + ", ".join(differing)


def _compile(ctx: StageContext, d: CallDecision, key: tuple) -> Entry:
    start = time.perf_counter()
    try:
        lowered = d.traced.lower()
    except EngineRejection:
        raise
    except ValueError as error:
        if "incompatible devices" in str(error):
            raise reject("DA-1", ValueError, f"{error}") from None
        raise
    try:
        compiled = lowered.compile(d.compiler_options)
    except ValueError as error:
        raise compile_refusal(error, d) from None
    facts = internals.executable_facts(compiled)
    return Entry(key, ctx.token, facts, time.perf_counter() - start, d.context is not None)


def compile_refusal(error: BaseException, d: CallDecision) -> BaseException:
    """What JAX raised compiling a decided call, as the engine's rule where it has one: a
    result the compiler placed that cannot be read back over the first given mesh (OUT-2,
    JAX's IndivisibleError), else JAX's error as it is."""
    if type(error).__name__ != "IndivisibleError":
        return error
    return reject("OUT-2", ValueError, str(error), d.out_paths[0] if d.out_paths else "result",
                  jax_error="IndivisibleError")


# --------------------------------------------------------------------------- dispatch

def stage_dispatch(ctx: StageContext, d: CallDecision, inputs: list[Input] | None = None) -> None:
    """Handing the arguments over: RES-5 under device=/backend= (kept inputs only)."""
    if not ctx.options.device_or_backend:
        return
    inputs = d.inputs if inputs is None else inputs
    for i in d.kept:
        check_reused_replica(inputs[i], d.target)
