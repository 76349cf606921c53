"""The jitted function's stages — ``trace``, ``lower``, ``compile``, ``eval_shape`` — and ``explain``.

Each stage stops where JAX's does: ``.trace`` raises what JAX raises before and while
tracing (JIT-3/4, TREE-1/2, FIT-1), ``.lower`` what it raises while resolving arguments and
devices (RES, KEEP, DA, EXE), ``.compile`` what recovering result shardings raises (OUT),
and calling the compiled executable checks its arguments as JAX's ``Compiled`` does
(AOT-1: pytree structure, AOT-2: types, AOT-3: placements, JAX-equivalent to what it was
compiled for). Compiling goes through the engine's executable cache, so an AOT compile of a
placement class compiled before costs nothing.

``explain`` decides a call without running it and returns an :class:`Explanation`: the
verdict, the rules that fired, and every sharding (it compiles through the engine's cache,
so the compiler's choices are known and the call that follows does not compile again).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.stages
from jax import tree_util

from . import internals, layouts
from .decision import CallDecision
from .execution import run_aot
from .explanation import Explanation
from .rules import EngineRejection, LeftToJax, recording, reject, rule
from .shardings import UNSPECIFIED, jax_equivalent, placement_equivalent
from .stages import (
    JaxTracing, compile_refusal, stage_call, stage_compile, stage_dispatch, stage_lower,
    stage_trace,
)

__all__ = ["Methods", "Traced", "Lowered", "Compiled"]


# --------------------------------------------------------------------------- the stages

class Methods:
    """The methods a jitted function carries (bound to its engine)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def _arguments(self, args: tuple, kwargs: dict) -> Any:
        return self._engine.arguments(args, kwargs, abstract_ok=True)

    def trace(self, *args: Any, **kwargs: Any) -> "Traced":
        engine = self._engine
        arguments = self._arguments(args, kwargs)
        if arguments.foreign:
            # A leaf the rules do not describe (a token, say): JAX's own stages take it.
            return engine.left_to_jax(arguments, run=False)
        ctx, decision = engine.context, CallDecision(arguments)
        with recording() as fired:
            try:
                stage_call(ctx, decision)
                # JAX traces from this frame: under the jitted function's ``trace`` (an
                # API boundary) the function runs as deep as under jax.jit's
                with JaxTracing(ctx, decision) as trace:
                    decision.traced = trace.traced(
                        trace.params or internals.trace_for_jit(*trace.call))
                stage_trace(ctx, decision)
            except EngineRejection as error:
                raise engine.in_jax_words(error, arguments) from None
            except LeftToJax:
                return engine.left_to_jax(arguments, run=False)
        return Traced(engine, decision, fired)

    def explain(self, *args: Any, **kwargs: Any) -> Explanation:
        """The verdict on this call and the rules that decided it, without running it.

        An accepted call is compiled (through the engine's cache: the call that follows
        reuses the executable), so every result's sharding is known, those the compiler
        chooses included, and a rejection found only after compiling (OUT-2) is reported.
        Arguments may be arrays or ``jax.ShapeDtypeStruct``.
        """
        engine = self._engine
        arguments = self._arguments(args, kwargs)
        try:
            if arguments.foreign:
                raise LeftToJax("an argument the rules do not describe")
            return Explanation.of_plan(engine.decision_for(arguments))
        except LeftToJax as why:
            try:
                lowered = engine.left_to_jax(arguments, run=False).lower()
            except EngineRejection as error:
                return Explanation.of_rejection(error)
            if why.decision is not None:   # decided up to compiling: JAX compiles it
                fired = getattr(why, "fired", ())
                try:
                    compiled = lowered.compile()
                except ValueError as error:
                    refusal = compile_refusal(error, why.decision)
                    if refusal is error:
                        raise
                    return Explanation.of_rejection(refusal.as_jax(error), fired)
                return Explanation.of_decision(why.decision,
                                               internals.executable_facts(compiled), str(why),
                                               fired)
            return Explanation(True, executable=f"left to JAX's own jit: {why}")


class _Stage:
    """What every stage knows from the trace (as JAX's stage objects carry it).

    The engine's stages are instances of JAX's own classes (``jax.stages.Traced``,
    ``Lowered``, ``Compiled``), so that code which checks the type of a stage — equinox's
    ``filter_jit(...).lower()`` under runtime type checking — takes them. What the engine
    does not answer itself, JAX's stage object for the same call answers: the methods the
    engine inherits from JAX's classes read JAX's state through it.
    """

    _decision: Any

    def _jax_stage(self) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _OWN_STATE:
            raise AttributeError(name)
        return getattr(self._jax_stage(), name)

    @property
    def in_avals(self) -> Any:
        return self._decision.traced.in_avals

    @property
    def in_tree(self) -> Any:
        return self._decision.traced.in_tree

    @property
    def out_tree(self) -> Any:
        return self._decision.traced.out_tree

    @property
    def args_info(self) -> Any:
        return self._decision.traced.args_info

    @property
    def donate_argnums(self) -> Any:
        return self._decision.traced.donate_argnums


# What the engine's stages hold themselves: never looked up on JAX's stage objects.
_OWN_STATE = frozenset({"_engine", "_decision", "_fired", "_plan", "_lowered", "_jax",
                        "_platforms", "_jax_only", "_private", "_arguments"})


class Traced(_Stage, jax.stages.Traced):
    """A traced call: its program and result types, ready to lower."""

    def __init__(self, engine: Any, decision: Any, fired: list[str]) -> None:
        self._engine = engine
        self._decision = decision
        self._fired = fired

    def _jax_stage(self) -> Any:
        return self._decision.traced

    @property
    def jaxpr(self) -> Any:
        return self._decision.traced.jaxpr

    @property
    def out_info(self) -> Any:
        return self._decision.traced.out_info

    @property
    def out_avals(self) -> Any:
        return self._decision.traced.out_avals

    @property
    def fun_name(self) -> str:
        return self._decision.traced.fun_name

    def lower(self, *, lowering_platforms: tuple[str, ...] | None = None,
              _private_parameters: Any = None) -> "Lowered":
        """The rules of lowering (RES, KEEP, DA, EXE), then the program lowered.

        ``lowering_platforms`` lowers for other platforms too (for export: ``as_text``,
        ``compiler_ir``); such a lowering compiles only for the platform of its devices.
        ``_private_parameters`` (JAX's own lowering parameters, such as overridden lowering
        rules) are handed to JAX's lowering; the program they make is JAX's to compile.
        """
        platforms = None if lowering_platforms is None else tuple(lowering_platforms)
        with recording() as fired:
            try:
                stage_lower(self._engine.context, self._decision)
            except EngineRejection as error:
                if error.rule == "DA-4":
                    # Only abstract meshes: no device assignment exists for the rules to
                    # decide. JAX still lowers such a call ahead of time when it knows the
                    # platform (given here, or carried by the abstract mesh), to compile
                    # later on devices given then; its own lowering is then the answer.
                    lowered = self._abstract_lowering(error, platforms)
                    self._fired += fired
                    return lowered
                raise self._engine.in_jax_words(error, self._decision.arguments) from None
        self._fired += fired
        if _private_parameters is not None:
            return Lowered(self._engine, self._decision, self._fired, platforms,
                           jax_only=True, private=_private_parameters)
        return Lowered(self._engine, self._decision, self._fired, platforms)

    def _abstract_lowering(self, error: EngineRejection,
                           platforms: tuple[str, ...] | None) -> "Lowered":
        lowered = Lowered(self._engine, self._decision, self._fired, platforms, jax_only=True)
        try:
            lowered._jax_lowered()
        except Exception as jax_error:  # noqa: BLE001 - JAX's refusal, its class and words
            raise error.as_jax(jax_error) from None
        return lowered


class Lowered(_Stage, jax.stages.Lowered):
    """A lowered call: its StableHLO text, ready to compile (through the engine's cache)."""

    def __init__(self, engine: Any, decision: Any, fired: list[str],
                 platforms: tuple[str, ...] | None = None, jax_only: bool = False,
                 private: Any = None) -> None:
        self._engine = engine
        self._decision = decision
        self._fired = fired
        self._platforms = platforms
        # JAX's own lowering is the whole answer (abstract meshes only, or JAX's private
        # lowering parameters): compile() is JAX's too.
        self._jax_only = jax_only
        self._private = private
        self._jax: Any = None

    def _jax_lowered(self) -> Any:
        if self._jax is None:
            extra = {} if self._private is None else {"_private_parameters": self._private}
            self._jax = self._decision.traced.lower(lowering_platforms=self._platforms, **extra)
        return self._jax

    def _jax_stage(self) -> Any:
        return self._jax_lowered()

    def as_text(self, *args: Any, **kwargs: Any) -> str:
        return self._jax_lowered().as_text(*args, **kwargs)

    def compiler_ir(self, *args: Any, **kwargs: Any) -> Any:
        return self._jax_lowered().compiler_ir(*args, **kwargs)

    def cost_analysis(self) -> Any:
        return self._jax_lowered().cost_analysis()

    @property
    def out_info(self) -> Any:
        return self._jax_lowered().out_info

    @property
    def in_avals(self) -> Any:
        # Lowered, the arguments' types carry the in_shardings (traced, they do not).
        return self._jax_lowered().in_avals

    def compile(self, compiler_options: dict[str, Any] | None = None, *,
                device_assignment: Any = None) -> "Compiled":
        """Compile through the engine's executable cache (a placement class compiled before costs nothing)."""
        engine = self._engine
        if self._jax_only:
            # Lowered over abstract meshes only (the devices come with this call), or with
            # JAX's private parameters: JAX compiles it, and refuses in its own words what
            # does not fit.
            return self._jax_lowered().compile(compiler_options,
                                               device_assignment=device_assignment)
        try:
            check_compilable(self._platforms, self._decision.assignment, device_assignment)
        except EngineRejection as error:
            if device_assignment is not None:
                try:
                    self._jax_lowered().compile(compiler_options,
                                                device_assignment=device_assignment)
                except Exception as jax_error:  # noqa: BLE001 - JAX's refusal, its class
                    raise error.as_jax(jax_error) from None
            raise
        self._decision.compiler_options = compiler_options
        with recording() as fired:
            try:
                plan = stage_compile(engine.context, self._decision)
            except LeftToJax:
                # decided up to compiling (mutable refs among its inputs): JAX's own stages
                # compile and run it
                try:
                    return self._jax_lowered().compile(compiler_options)
                except ValueError as error:
                    refusal = compile_refusal(error, self._decision)
                    if refusal is error:
                        raise
                    raise refusal.as_jax(error) from None
            except EngineRejection as error:
                error = engine.in_jax_words(error, self._decision.arguments)
                error.fired = tuple(dict.fromkeys(self._fired + fired))  # type: ignore[attr-defined]
                raise error from None
        plan.fired = tuple(dict.fromkeys(self._fired + fired))
        return Compiled(engine, plan, self._decision, self)


@rule("ENG-5")
def check_compilable(platforms: tuple[str, ...] | None, assignment: tuple,
                     device_assignment: Any) -> None:
    """A lowered call compiles for the platform of its own devices, on the device assignment the rules chose."""
    if device_assignment is not None and tuple(device_assignment) != tuple(assignment):
        raise reject("ENG-5", ValueError,
                     f"compile(device_assignment=) was given the devices "
                     f"{[d.id for d in device_assignment]}, but the jit-call rules chose "
                     f"{[d.id for d in assignment]} for this call from its arguments and "
                     "out_shardings. Leave device_assignment out, or place the arguments on "
                     "the devices you want.")
    if platforms is None or not assignment:
        return
    here = assignment[0].platform
    if platforms != (here,):
        raise reject("ENG-5", ValueError,
                     f"this call was lowered for the platforms {platforms}; it can be compiled "
                     f"only for the platform of its devices ({here!r}). Use as_text() or "
                     "compiler_ir() for the other platforms, or lower again without "
                     "lowering_platforms.")


class Compiled(_Stage, jax.stages.Compiled):
    """A compiled call, to be called with arguments of the types and placements it was compiled for."""

    def __init__(self, engine: Any, plan: Any, decision: Any, lowered: Any = None) -> None:
        self._engine = engine
        self._lowered = lowered
        self._plan = plan
        self._arguments = decision.arguments
        self._decision = decision
        self._in_avals = [decision.arguments.aval(i) for i in range(len(decision.arguments.leaves))]
        self._out_avals = list(decision.out_avals)
        self._device_or_backend = engine.options.device_or_backend
        self._layouts: list[Any] | None = None
        self._called = False

    @property
    def in_avals(self) -> Any:
        # As lowered: the arguments' types carry the in_shardings.
        if self._lowered is not None:
            return self._lowered.in_avals
        return self._decision.traced.in_avals

    @property
    def _executable(self) -> Any:
        """JAX's executable this call runs (the one compiled for its placement class)."""
        return self._plan.entry.facts.compiled._executable

    def _in_jax_words(self, error: EngineRejection, args: tuple, kwargs: dict) -> EngineRejection:
        """An AOT refusal in the class and words of JAX's executable, which checks the
        arguments before it runs anything (skipped when the executable donates: a JAX that
        disagreed would consume the arguments)."""
        if any(self._plan.donated):
            return error
        try:
            self._plan.entry.facts.compiled(*args, **kwargs)
        except Exception as jax_error:  # noqa: BLE001 - JAX's refusal, its class and words
            return error.as_jax(jax_error)
        return error

    @property
    def explanation(self) -> Explanation:
        return Explanation.of_plan(self._plan)

    @property
    def input_formats(self) -> Any:
        """Each input's layout (as compiled) and sharding (as this call hands it over)."""
        flat = [layouts.Format(f.layout if f is not None else None, s)
                if s is not None else None
                for f, s in zip(self._flat_formats(self._jax.input_formats),
                                self._plan.exe_inputs)]
        return tree_util.tree_unflatten(self._arguments.treedef, flat)

    @property
    def output_formats(self) -> Any:
        """Each result's layout (as compiled) and sharding (as this call's results get it)."""
        flat = [layouts.Format(f.layout if f is not None else None, s)
                for f, s in zip(self._flat_formats(self._jax.output_formats),
                                self._plan.out_shardings)]
        return tree_util.tree_unflatten(self._plan.out_tree, flat)

    @staticmethod
    def _flat_formats(tree: Any) -> list[Any]:
        return tree_util.tree_leaves(
            tree, is_leaf=lambda x: x is None or isinstance(x, layouts.Format))

    @property
    def in_tree(self) -> Any:
        return self._arguments.treedef

    @property
    def out_tree(self) -> Any:
        return self._plan.out_tree

    @property
    def input_shardings(self) -> Any:
        return tree_util.tree_unflatten(self._arguments.treedef, list(self._plan.exe_inputs))

    @property
    def output_shardings(self) -> Any:
        return tree_util.tree_unflatten(self._plan.out_tree, list(self._plan.out_shardings))

    @property
    def out_info(self) -> Any:
        """The results' types and shardings, as ``jax.ShapeDtypeStruct``."""
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
                   for a, s in zip(self._out_avals, self._plan.out_shardings)]
        return tree_util.tree_unflatten(self._plan.out_tree, structs)

    def _in_layouts(self) -> list[Any]:
        """The layout the executable takes each flat input in (layout keys; None: default)."""
        if self._layouts is None:
            formats = tree_util.tree_leaves(self._jax.input_formats,
                                            is_leaf=lambda x: x is None or isinstance(x, layouts.Format))
            self._layouts = [
                layouts.layout_key(getattr(f, "layout", None), len(a.shape))
                if getattr(f, "layout", None) is not None else None
                for f, a in zip(formats, self._in_avals)]
        return self._layouts

    @property
    def _jax(self) -> Any:
        return self._plan.entry.facts.compiled

    def _jax_stage(self) -> Any:
        return self._jax

    def as_text(self) -> str | None:
        return self._jax.as_text()

    def cost_analysis(self) -> Any:
        return self._jax.cost_analysis()

    def memory_analysis(self) -> Any:
        return self._jax.memory_analysis()

    def runtime_executable(self) -> Any:
        return self._jax.runtime_executable()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, treedef = tree_util.tree_flatten((args, kwargs))
        if any(isinstance(leaf, internals.Tracer) for leaf in leaves):
            # Under a transformation: JAX's executable refuses it, in JAX's words.
            return self._plan.entry.facts.compiled(*args, **kwargs)
        plan = self._plan
        try:
            check_aot_structure(self._arguments.treedef, treedef)
            paths = self._arguments.paths() if leaves else []
            check_aot_types(paths, self._in_avals, leaves)
            if not self._device_or_backend:
                check_aot_shardings(paths, plan.exe_inputs, leaves, plan.kept,
                                    self._in_layouts())
        except EngineRejection as error:
            raise self._in_jax_words(error, args, kwargs) from None
        else:
            # The executable takes the dynamic arguments only: nothing here is static.
            called = self._engine.arguments(args, kwargs, abstract_ok=False, statics=False)
            stage_dispatch(self._engine.context, self._decision,
                           [called.input(i, None) for i in range(len(leaves))])
        if not self._called:
            self._called = True
            internals.note_aot_python_call()
        return run_aot(plan, leaves, treedef, self._engine.counters)


# --------------------------------------------------------------------------- AOT rules

@rule("AOT-1")
def check_aot_structure(compiled: Any, called: Any) -> None:
    """An executable compiled ahead of time takes arguments of exactly the pytree structure it was compiled for."""
    if compiled != called:
        raise reject("AOT-1", TypeError,
                     f"the executable was compiled for arguments shaped as {compiled}, but is "
                     f"called with {called}")


def _details(items: list[str]) -> str:
    shown = "the first 5" if len(items) > 5 else "they are"
    return f"{shown}: " + "; ".join(items[:5])


def _type_of(leaf: Any) -> tuple[tuple[int, ...], Any]:
    aval = jax.typeof(leaf)
    return tuple(aval.shape), aval.dtype


@rule("AOT-2")
def check_aot_types(paths: list[str], compiled: list[Any], called: list[Any]) -> None:
    """Each argument of an AOT call has the shape and dtype it was compiled for (every input, kept or not; at most five differences are listed)."""
    bad = []
    first = None
    for path, want, leaf in zip(paths, compiled, called):
        shape, dtype = _type_of(leaf)
        if (tuple(want.shape), want.dtype) != (shape, dtype):
            bad.append(f"{path} compiled for {want.str_short()}, called with "
                       f"{jax.core.ShapedArray(shape, dtype).str_short()}")
            first = first or path
    if bad:
        raise reject("AOT-2", TypeError,
                     f"{len(bad)} argument(s) differ from the types the executable was compiled "
                     f"for; {_details(bad)}. Lower and compile again for the new types, or cast "
                     "the arguments.", first)


@rule("AOT-3")
def check_aot_shardings(paths: list[str], expected: tuple, called: list[Any],
                        kept: tuple[int, ...], expected_layouts: list[Any] | None = None) -> None:
    """Each committed array passed to an executable compiled ahead of time must be placed and laid out as the executable takes it; other arguments are moved without a check.

    Placed as the executable takes it: JAX-equivalent (EQ-1) to the input sharding it was
    compiled with.
    """
    bad = []
    kinds = set()
    for i in kept:
        leaf, want = called[i], expected[i]
        if not isinstance(leaf, jax.Array) or not getattr(leaf, "_committed", True):
            continue   # moved and laid out as the executable wants, without a check
        if want is not None and want is not UNSPECIFIED and not jax_equivalent(
                leaf.sharding, want, leaf.ndim):
            kinds.add("placed")
            bad.append((paths[i], f"{paths[i]} passed {leaf.sharding}, compiled for {want}"))
        if expected_layouts is not None and i < len(expected_layouts):
            have = layouts.array_layout(leaf)
            if have != expected_layouts[i]:
                kinds.add("laid out")
                bad.append((paths[i], f"{paths[i]} passed in {layouts.layout_text(have)}, "
                                      f"compiled for {layouts.layout_text(expected_layouts[i])}"))
    if bad:
        how = " and ".join(sorted(kinds, reverse=True))
        fix = ("input_shardings", "these shardings") if kinds == {"placed"} else (
            "input_formats", "these shardings and layouts")
        raise reject("AOT-3", ValueError,
                     f"{len(bad)} committed argument(s) are {how} otherwise than the executable "
                     f"was compiled for; {_details([b for _, b in bad])}. jax.device_put each "
                     f"one to the executable's {fix[0]} first, or compile again for "
                     f"{fix[1]}.", bad[0][0])


__all__ += ["check_aot_structure", "check_aot_types", "check_aot_shardings",
            "placement_equivalent"]
