"""The semantics of a whole jit call: from a :class:`~shardlaw.spec.jit.call.Call` to a Verdict.

``jax.jit(f, in_shardings=..., out_shardings=...)(*args, **kwargs)`` decides shardings in
stages, and :func:`jit_call` reads as those stages, named as the engine names them. Each
stage is a short function of rule calls that returns a small frozen record; the rules
live with their failures in one module per family:

0. the call's description is read once (:class:`~shardlaw.spec.jit.call.NormalCall`, CALL-0);
1. :func:`stage_jit`, at ``jax.jit(...)``: device options and sharding leaves
   (:mod:`~shardlaw.spec.jit.options`: JIT-1, JIT-2);
2. :func:`stage_call`, at the call: the context mesh, the abstract arguments' types, the
   call's form, each leaf's meaning (JIT-5, FIT-2, JIT-4, JIT-3), in_shardings matched and
   fitted (:mod:`~shardlaw.spec.jit.matching`: TREE-1, FIT-1; LAY-4);
3. :func:`stage_trace`, after tracing: out_shardings matched and fitted (TREE-2, FIT-1,
   LAY-4);
4. :func:`stage_lower`: each input's sharding (:mod:`~shardlaw.spec.jit.resolution`: RES-1..4)
   and layout (LAY-1, LAY-5, LAY-3), the kept inputs (KEEP-1), the device assignment and
   what the program receives (:mod:`~shardlaw.spec.jit.assignment`: DA-1..4, EXE-1, FIT-3,
   EXE-2..4);
5. :func:`stage_compile`: the shardings and layouts read back from the executable
   (:mod:`~shardlaw.spec.jit.recovery`: OUT-1..3; LAY-2);
6. :func:`stage_dispatch`, handing the arguments over (RES-5), or :func:`stage_aot`,
   calling the compiled executable ahead of time (:mod:`~shardlaw.spec.jit.aot`: AOT-1..3).

A rejection is born at the argument's pytree path (:func:`~shardlaw.spec.core.rules.located`),
and the stage it is raised at is its rule's, declared once in :mod:`shardlaw.rule_index`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from .aot import check_aot_shardings, check_aot_structure, check_aot_types
from .assignment import (
    Source, all_explicit, check_has_devices, check_iota_tiles, check_result_mesh,
    check_tile_count, device_assignment, replicate_scalars, results_committed,
)
from .call import (
    Arg, Call, DeviceIds, JitOptions, NormalCall, Out, Verdict, check_call, flat_arguments,
)
from ..placement.equivalence import hlo_equal
from .layouts import (
    check_argument_layout, check_layout_devices, check_layout_rank, executable_input_layouts,
    given_in_layouts, given_out_layouts, is_layout, result_layouts,
)
from .matching import (
    check_fits, check_lowered_fit, check_typed_fit, match_in_shardings, match_out_shardings,
)
from .options import (
    check_call_form, check_device_options, check_leaf, convert_leaves, device_option_sharding,
    leaf_paths,
)
from ..placement.blocks import to_hlo
from .recovery import (
    check_typed_result_mesh, compiled_inputs, compiled_results, concrete_inputs,
    explicit_typed, input_types, leaves_open, lowered_types, open_result, recover_shardings,
    single_device_results, type_sources, typed_result,
)
from .inside import recovery_origin
from .older import block_leaves, call_context, check_expressible
from .resolution import (
    Input, check_reused_replica, compared_first, kept_inputs, resolve_input,
)
from ..core.editions import edition, holding
from ..core.rules import Rejection, located, remembering, staged, tracing
from ..core.shardings import UNSPECIFIED, NamedSharding, SingleDeviceSharding
from ..core.values import DeviceList, Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = ["jit_call", "stage_jit", "stage_call", "stage_trace", "stage_lower",
           "stage_compile", "stage_dispatch", "stage_aot", "jit_shardings"]


def jit_call(call: Call, jax: str | None = None) -> Verdict:
    """What ``jax.jit`` (jax 0.10.2, or the release ``jax`` names: one of
    :data:`~shardlaw.spec.core.editions.EDITIONS`) does with ``call``: a :class:`Verdict`
    with its trace, which says the release it holds for.

    >>> from shardlaw.spec.jit.call import Arg, Out
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> x = Arg.committed((8, 8), NamedSharding(mesh, P("x", "y")))
    >>> v = jit_call(Call(args=(x,), outputs=Out((8, 8))))
    >>> v.accepted, v.num_devices, v.device_assignment
    (True, 8, (0, 1, 2, 3, 4, 5, 6, 7))
    >>> other = Arg.committed((8,), SingleDeviceSharding(3))
    >>> print(jit_call(Call(args=(x, other), outputs=Out((8, 8)))).message)
    [DA-1] at args[1]: jit needs one device assignment for the whole program, but the argument args[0] (committed) is on devices [0, 1, 2, 3, 4, 5, 6, 7] and the argument args[1] (committed) is on devices [3]. Put both on the same devices in the same order (jax.device_put), or build both shardings from one mesh.

    What is not a Call describes no call, so it gets no verdict: CALL-0 refuses it.

    The same call for JAX 0.4.13 (:doc:`/upgrading`): the same devices, another class.

    >>> bad = Arg.numpy((3, 8))
    >>> in_x = JitOptions(in_shardings=NamedSharding(mesh, P("x")))
    >>> new, old = (jit_call(Call(args=(bad,), outputs=Out((3, 8)), options=in_x), jax=v)
    ...             for v in ("0.10.2", "0.4.13"))
    >>> (new.rule, new.jax_error, new.jax), (old.rule, old.jax_error, old.jax)
    (('FIT-1', 'IndivisibleError', '0.10.2'), ('FIT-1', 'ValueError', '0.4.13'))
    """
    # The description is a Call (CALL-0) before any part of it is read
    check_call(isinstance(call, Call), "the call jit_call is given", "a Call", call)
    with holding(edition(jax)) as held, tracing() as trace, remembering():
        return _decided(call, held, trace)


def _decided(call: Call, held: str, trace: list[str]) -> Verdict:
    """The stages, in order, for the release ``held``; the verdict says which release."""
    try:
        check_expressible(call)   # CALL-1: only what the release held has (0.4.13)
        n = call.normal
        stage_jit(n)
        called = stage_call(n)
        traced = stage_trace(n, called)
        lowered = stage_lower(n, called, traced)
        compiled = stage_compile(n, called, traced, lowered)
        dispatched = stage_dispatch(n, called, lowered, compiled)
    except Rejection as error:
        return _refused(error, trace)
    return dataclasses.replace(_accepted(n, lowered, compiled, dispatched, trace), jax=held)


# =========================================================================== the records

@dataclasses.dataclass(frozen=True)
class Called:
    """What jit knows at the call, before tracing."""

    context: Any                 # the context mesh jit sees (JIT-5), or None
    target: SingleDeviceSharding | None   # where device=/backend= put the program
    inputs: tuple[Input, ...]    # each flat input with the sharding in_shardings gives it
    in_layouts: tuple            # the layout a Format gives each flat input (None: none)
    out_tree: Any                # out_shardings as shardings (JIT-3), still a tree


@dataclasses.dataclass(frozen=True)
class Traced:
    """What tracing adds: each flat result's given sharding and layout."""

    out_shardings: tuple         # UNSPECIFIED where jit leaves the result to the compiler
    out_layouts: tuple


@dataclasses.dataclass(frozen=True)
class Lowered:
    """What lowering decides."""

    resolved: tuple              # each input's sharding as lowering gets it (RES-1..4)
    kept: tuple[int, ...]        # the inputs the program keeps (KEEP-1)
    assignment: DeviceList       # the device assignment (DA-1..3)
    count: int                   # the program's device count
    final: tuple                 # the inputs' shardings, open scalars replicated (EXE-1)
    committed: bool              # the results come back committed (EXE-2)
    in_layouts: tuple            # the layout the program takes each input in (LAY-3)
    layouts_in_play: bool        # some layout is given or held: the layout rules apply


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What compiling adds: the shardings and layouts the executable reports."""

    executable_inputs: tuple     # the shardings the executable takes its inputs in
    out_shardings: tuple         # the results' shardings, recovered (OUT-1..3)
    out_layouts: tuple           # the results' layouts (LAY-2)


@dataclasses.dataclass(frozen=True)
class Dispatched:
    """What handing the arguments over does."""

    transfers: tuple[str, ...]   # the inputs jit moves to other devices or shardings first


def stage(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A stage of the pipeline: the rules it applies run in the jit call's stage ``name``."""
    def wrap(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def run(*args: Any) -> Any:
            with staged(name):
                return function(*args)
        return run
    return wrap


# =========================================================================== the stages

@stage("jit")
def stage_jit(n: NormalCall) -> None:
    """At ``jax.jit(...)``: the device options (JIT-1), then each leaf of the shardings trees
    (JIT-2), the bare layouts first: JAX splits layouts off both trees before the rest."""
    options = n.call.options
    check_device_options(options)
    leaves = (leaf_paths(options.in_shardings, "in_shardings")
              + leaf_paths(options.out_shardings, "out_shardings"))
    leaves.sort(key=lambda item: not is_layout(item[1]))
    for which, leaf in leaves:
        with located(which):
            check_leaf(leaf, which)


@stage("trace")
def stage_call(n: NormalCall) -> Called:
    """At the call, before tracing: JIT-5, the abstract arguments' types (FIT-2), JIT-4,
    JIT-3, TREE-1, FIT-1 and LAY-4 (inputs)."""
    context = call_context(n.call)   # JIT-5, or a `with mesh:` block around pjit (PJIT-1)
    for path, arg in n.flat_in:
        if arg.kind == "abstract" and arg.sharding is not None:
            check_typed_fit(arg.sharding, arg.shape, path)
    check_call_form(n.call, context)
    target, jit_in, out_tree = jit_shardings(n, context)
    in_layouts = given_in_layouts(n)
    for (path, arg), s in zip(n.flat_in, jit_in):
        check_fits(s, arg.shape, path)
    for (path, arg), laid in zip(n.flat_in, in_layouts):
        if laid is not None:
            with located(path):
                check_layout_rank(laid, arg.shape, "argument")
    inputs = tuple(Input(path, arg, s) for (path, arg), s in zip(n.flat_in, jit_in))
    return Called(context, target, inputs, in_layouts, out_tree)


def jit_shardings(n: NormalCall, context: Any) -> tuple[Any, list[Any], Any]:
    """Where ``device=``/``backend=`` put the program (None: not given), the sharding jit's
    options give each flat input (UNSPECIFIED: none), and out_shardings as a tree of
    shardings: each leaf read under the context mesh (JIT-3), in_shardings matched to the
    positional arguments (TREE-1)."""
    count = len(n.flat_in)
    if n.device_or_backend:
        target = device_option_sharding(n.call.options)
        return target, [target] * count, target
    block = n.call.resource_mesh   # pjit inside `with mesh:` reads leaves by PJIT-2
    convert = convert_leaves if block is None else block_leaves
    in_tree = convert(n.in_tree, context, "in_shardings")
    out_tree = convert(n.out_tree, context, "out_shardings")
    # With keyword arguments in_shardings is left out (JIT-4).
    jit_in = ([UNSPECIFIED] * count if n.call.kwargs
              else match_in_shardings(in_tree, n.positional))
    return None, [UNSPECIFIED if s is None else s for s in jit_in], out_tree


@stage("trace")
def stage_trace(n: NormalCall, called: Called) -> Traced:
    """After tracing: out_shardings matched to the results (TREE-2), which fit (FIT-1, LAY-4)."""
    out_shardings = match_out_shardings(called.out_tree, n.results)
    out_shardings = [UNSPECIFIED if s is None else s for s in out_shardings]
    out_layouts = given_out_layouts(n)
    for (path, out), s in zip(n.flat_out, out_shardings):
        check_fits(s, out.shape, path)
    for (path, out), laid in zip(n.flat_out, out_layouts):
        if laid is not None:
            with located(path):
                check_layout_rank(laid, out.shape, "result")
    return Traced(tuple(out_shardings), out_layouts)


@stage("lower")
def stage_lower(n: NormalCall, called: Called, traced: Traced,
                listing: Callable[[], None] | None = None) -> Lowered:
    """Lowering: RES-1..4, the layouts (LAY-1, LAY-5, LAY-3), KEEP-1, DA-1..4, EXE-1, the
    kept abstract inputs' fit (FIT-3), EXE-2..4. ``listing``: what a whole program's body
    checks as its shardings are listed for the device assignment (SMAP-12), run just
    before it."""
    call, inputs = n.call, called.inputs
    first = compared_first(inputs, list(zip(n.out_paths, traced.out_shardings)),
                           n.device_or_backend)   # JAX 0.4.13 (KEEP-1)
    if first:   # inside a `with mesh:` block, against the block's devices too (PJIT-1)
        block = called.context if call.resource_mesh is not None else None
        device_assignment([Source(*found) for found in first], block, call.default_device)
    resolved = []
    for item in inputs:
        with located(item.path):
            resolved.append(resolve_input(item, call.process_count, n.device_or_backend))
    in_layouts, in_play = _input_layouts(n, called, traced)
    kept = kept_inputs(call.uses or (True,) * len(inputs), call.options.keep_unused)
    sources = [Source(resolved[i], _source_name(inputs[i]), inputs[i].path) for i in kept]
    sources += [Source(s, f"out_shardings for {path}", path)
                for path, s in zip(n.out_paths, traced.out_shardings)]
    sources += call.inside  # the shardings inside the body come last (PROG-2)
    if listing is not None:
        listing()
    assignment, count = device_assignment(sources, called.context, call.default_device)
    check_has_devices(assignment, called.context)
    assert assignment is not None
    final = replicate_scalars(resolved, [len(item.arg.shape) for item in inputs], assignment)
    for (path, out), s in zip(n.flat_out, traced.out_shardings):
        if all_explicit(out.mesh):   # a result typed over an all-Explicit mesh (AD-9)
            with located(path):
                check_result_mesh(out.mesh, count, path)
        elif s is UNSPECIFIED:   # a result its type places, over a mixed mesh (PROG-5)
            with located(path):
                check_typed_result_mesh(out, count, path)
    for i in kept:  # only an abstract argument's own sharding may not fit yet (FIT-3)
        if inputs[i].arg.kind == "abstract":
            check_lowered_fit(final[i], inputs[i].arg.shape, inputs[i].path)
    for path, s in [*((inputs[i].path, final[i]) for i in kept),
                    *zip(n.out_paths, traced.out_shardings)]:
        with located(path):
            check_tile_count(s)
            check_iota_tiles(s)
    committed = results_committed(called.context, count, [resolved[i] for i in kept],
                                  [*traced.out_shardings, *(s.sharding for s in call.inside)])
    return Lowered(tuple(resolved), kept, assignment, count, tuple(final), committed,
                   in_layouts, in_play)


def _input_layouts(n: NormalCall, called: Called, traced: Traced) -> tuple[tuple, bool]:
    """LAY-1 and LAY-5 input by input, kept or not, then LAY-5 for the results (JAX resolves
    layouts after every sharding); then the layout the program takes each input in (LAY-3).
    The layout rules take part only where a layout is given or held."""
    for item, laid in zip(called.inputs, called.in_layouts):
        if laid is not None:
            with located(item.path):
                check_argument_layout(item.arg, laid)
                check_layout_devices(laid, item.jit_sharding)
    for path, laid, s in zip(n.out_paths, traced.out_layouts, traced.out_shardings):
        if laid is not None:
            with located(path):
                check_layout_devices(laid, s)
    in_play = (any(laid is not None for laid in called.in_layouts + traced.out_layouts)
               or any(arg.layout is not None for arg in n.args))
    if not in_play:
        return (None,) * len(n.flat_in), False
    return executable_input_layouts(n.args, called.in_layouts,
                                    n.call.compiler_in_layouts), True


@stage("compile")
def stage_compile(n: NormalCall, called: Called, traced: Traced, lowered: Lowered) -> Compiled:
    """After compiling: the shardings the executable reports, recovered (OUT-1..3), first the
    inputs' and then the results' (a result left unspecified but typed over Explicit axes
    comes back on its type, PROG-5; one whose out sharding vmap left UNCONSTRAINED as the
    compiler placed it, PROG-6); the results' layouts (LAY-2)."""
    call, kept, assignment = n.call, lowered.kept, lowered.assignment
    results = len(n.flat_out)
    choices = call.compiler or (None,) * results
    specified = list(traced.out_shardings)
    for k, ((path, out), s) in enumerate(zip(n.flat_out, specified)):
        if s is UNSPECIFIED and explicit_typed(out, assignment):   # its type places it
            with located(path):
                specified[k] = typed_result(out, assignment, choices[k])
        elif leaves_open(s):   # vmap left a dimension UNCONSTRAINED: the compiler places it
            with located(path):
                specified[k] = open_result(out, s, assignment, choices[k])
    outs = compiled_results(specified, choices, assignment,
                            call.compiler_memory or (None,) * results)
    compiler_in = call.compiler_in or (None,) * len(n.flat_in)
    kept_values = input_types([called.inputs[i].arg for i in kept])
    with located(called.inputs[kept[0]].path if kept else None):
        concrete = concrete_inputs([lowered.final[i] for i in kept], assignment)
        taken = compiled_inputs(concrete, [compiler_in[i] for i in kept], assignment)
        recovered = recover_shardings(taken, kept_values, concrete, kept_values, None)
    with located(n.out_paths[0] if results else "result"):
        # typed as lowering types them: over a NamedSharding out sharding's mesh (PROG-6)
        typed = lowered_types([out for _, out in n.flat_out], traced.out_shardings)
        given = type_sources(recovered, [lowered.final[i] for i in kept])
        given_values = kept_values
        if call.inside:  # a whole program: a sharding inside the body may give the type
            given, given_values, typed = recovery_origin(given, given_values, typed,
                                                         call.inside)
        outs = recover_shardings(outs, typed, given, given_values, called.context)
    outs = single_device_results(outs, assignment,
                                 [s is not UNSPECIFIED for s in traced.out_shardings])
    out_layouts = (result_layouts(traced.out_layouts, call.compiler_layouts)
                   if lowered.layouts_in_play else (None,) * results)
    executable_inputs = list(lowered.final)
    for i, s in zip(kept, single_device_results(recovered, assignment)):
        executable_inputs[i] = s
    return Compiled(tuple(executable_inputs), tuple(outs), out_layouts)


@stage("call")
def stage_dispatch(n: NormalCall, called: Called, lowered: Lowered,
                   compiled: Compiled) -> Dispatched:
    """Handing the arguments over: the inputs jit moves first, and under
    ``device=``/``backend=`` RES-5 (kept inputs only); or, when the call is made ahead of
    time, calling the compiled executable (:func:`stage_aot`)."""
    transfers = tuple(item.path for item, s in zip(called.inputs, lowered.final)
                      if item.arg.kind in ("committed", "uncommitted") and s is not UNSPECIFIED
                      and _moves(item.arg, s))
    if n.call.aot_args is not None:
        stage_aot(n, lowered, compiled)
    elif called.target is not None:
        _check_replicas([(called.inputs[i].path, called.inputs[i].arg) for i in lowered.kept],
                        called.target)
    return Dispatched(transfers)


@stage("aot")
def stage_aot(n: NormalCall, lowered: Lowered, compiled: Compiled) -> None:
    """Calling the executable compiled ahead of time with ``aot_args``: AOT-1..3, and RES-5
    under ``device=``/``backend=``. The executable takes the dynamic arguments only."""
    call, kept = n.call, lowered.kept
    flat_called, called_tree = flat_arguments(call.aot_args or (), call.aot_kwargs or {},
                                              set(), set())
    check_aot_structure(n.dynamic, called_tree)
    called = [arg for _, arg in flat_called]
    check_aot_types(n.flat_in, called, kept)
    check_aot_shardings([(n.in_paths[i], compiled.executable_inputs[i]) for i in kept],
                        [called[i] for i in kept], n.device_or_backend,
                        [lowered.in_layouts[i] for i in kept])
    if n.device_or_backend and kept:
        _check_replicas([(flat_called[i][0], called[i]) for i in kept],
                        compiled.executable_inputs[kept[0]])


def _check_replicas(kept: list[tuple[str, Arg]], target: Any) -> None:
    """RES-5 over the inputs handed to the program (under ``device=``/``backend=``), by a
    call or by an AOT call: handing arguments over is the ``call`` stage of both."""
    if not isinstance(target, SingleDeviceSharding):
        return
    with staged("call"):
        for path, arg in kept:
            with located(path):
                check_reused_replica(arg, target)


# =========================================================================== the verdict

def _refused(error: Rejection, trace: list[str]) -> Verdict:
    failure = error.failure
    built_in = next(c for c in type(error).__mro__ if c.__module__ == "builtins")
    return Verdict(False, tuple(dict.fromkeys(trace)), rule=failure.rule,
                   error_type=built_in.__name__, jax_error=error.jax_error,
                   message=str(error), path=error.path, stage=error.stage,
                   facts=tuple(failure.facts().items()), jax=error.jax)


def _accepted(n: NormalCall, lowered: Lowered, compiled: Compiled, dispatched: Dispatched,
              trace: list[str]) -> Verdict:
    return Verdict(
        True, tuple(dict.fromkeys(trace)), in_paths=n.in_paths, in_shardings=lowered.final,
        out_paths=n.out_paths, out_shardings=compiled.out_shardings,
        device_assignment=DeviceIds(lowered.assignment), num_devices=lowered.count,
        kept_inputs=lowered.kept, out_committed=(lowered.committed,) * len(n.flat_out),
        transfers=dispatched.transfers, in_layouts=lowered.in_layouts,
        out_layouts=compiled.out_layouts)


def _source_name(item: Input) -> str:
    if item.jit_sharding is not UNSPECIFIED:
        return f"in_shardings for {item.path}"
    return f"argument {item.path} ({'committed' if item.arg.is_committed else 'uncommitted'})"


def _moves(arg: Arg, s: Any) -> bool:
    """Whether jit moves ``arg`` before the call: its devices or its blocks differ from ``s``."""
    held = arg.sharding
    if held is None or not held.is_concrete or not getattr(s, "is_concrete", False):
        return False
    return held.device_list != s.device_list or not hlo_equal(
        to_hlo(held, len(arg.shape)), to_hlo(s, len(arg.shape)))
