"""Whole programs against real JAX: the spec's ``explain_program`` and the engine, program for program.

Each property draws whole programs — a top-level jit whose body holds inner jits,
constraints, device_puts, shard_maps, ... — from a harness of
:mod:`shardlaw.properties` and holds every one to what real ``jax.jit`` does with it. They
are listed in :data:`PROGRAM_PROPERTIES`, one line each: the harness module, its strategy
of cases, the function that compares one case and returns its disagreements, and the rules
it checks. A harness that lands joins the suite with one more line there.

``test_engine_agrees_on_programs`` and ``test_engine_agrees_on_shard_mapped_programs`` hold
:func:`shardlaw.engine.jit` to the programs of two harnesses (:func:`compare_engine_program`,
through an :class:`EngineHarness`): against JAX, the same refusal at the same stage in JAX's
class, or the same results' shardings, committed flags and values; against the spec, the
engine's rule and, for a refusal inside the body, its path equal the spec's, and ``explain``
lists the shardings inside the body the spec lists (PROG-2).
``test_engine_agrees_on_programs_with_refs`` does the same on programs holding
closed-over constants and mutable refs (:func:`held_values`, :func:`compare_engine_constants`):
a ref on other devices is refused by DA-1 at its path (REF-1), a donated ref by REF-3 before
compiling. A refusal JAX makes while it traces the body (a constraint that does not fit, an inner jit's sharding) reaches the
engine from JAX's own tracing, unchanged; it is counted as left to JAX.

The ``programs`` suite of ``shardlaw campaign``; ``tests/test_programs.py`` runs the spec's
property and ``tests/test_engine_programs.py`` the engine's in the project's own ``pytest``.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import importlib.util
import warnings
from typing import Any, Callable

import numpy as np
from hypothesis import given, settings

from shardlaw.properties import hits
from shardlaw.properties.program_harness import (
    arguments_of, function_of, program_cases, run_in_jax, spec_verdict, top_options,
)
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples

__all__ = ["PROGRAM_PROPERTIES", "program_property", "compare_engine_program",
           "EngineOutcome", "run_in_engine", "ENGINE_SOURCE", "LEFT_TO_JAX_SEEN",
           "test_engine_agrees_on_programs", "test_engine_agrees_on_shard_mapped_programs",
           "EngineHarness", "PROGRAMS", "shard_maps", "held_values", "compare_engine_constants",
           "constant_engine_cases", "test_engine_agrees_on_programs_with_refs"]

# The source under which the engine's outcomes on programs are recorded (properties.hits).
ENGINE_SOURCE = "engine-programs"
# The refusals the engine left to JAX's own tracing, by the spec's rule.
LEFT_TO_JAX_SEEN: collections.Counter = collections.Counter()


def program_property(harness: str, cases: str | tuple[str, dict], compare: str,
                     rules: tuple[str, ...], name: str, ci_examples: int = 200
                     ) -> Callable[..., Any] | None:
    """A property that draws ``harness.cases()`` and requires ``harness.compare(case)`` to
    find no disagreement; named ``name``, checking ``rules``. ``cases`` is the strategy's
    name, or its name and the keyword options it is drawn with. None when the harness module
    is not there (a harness not written yet is left out, as a campaign leaves out a suite
    module that is not installed); one that is there and fails to import raises."""
    module_name = f"shardlaw.properties.{harness}"
    if importlib.util.find_spec(module_name) is None:
        return None
    module = importlib.import_module(module_name)
    cases_name, options = (cases, {}) if isinstance(cases, str) else cases
    strategy, comparing = getattr(module, cases_name), getattr(module, compare)

    def holds(case: Any) -> None:
        problems = comparing(case)
        assert not problems, "\n".join(problems) + f"\ncase: {case}"

    holds.__name__ = holds.__qualname__ = name
    holds.__module__ = __name__
    holds.__doc__ = f"{harness}.{compare} finds no disagreement on {harness}.{cases}()."
    return checks(*rules)(settings(max_examples=examples(ci_examples))(
        given(strategy(**options))(holds)))


# The whole-program properties, one line each: harness module (of shardlaw.properties),
# its strategy of cases (or the strategy and its keyword options), its comparison (a case -> its disagreements), the rules it
# checks, the property's name; and, where a case costs more than most, its examples where
# the ``ci`` profile runs 200 (its size bound).
PROGRAM_PROPERTIES: tuple[tuple, ...] = (
    ("program_harness", "program_cases", "compare_program",
     ("PROG-1", "PROG-2", "PROG-3", "PROG-4", "DA-1"), "test_programs_agree_with_jax"),
    # over Auto, Explicit and mixed meshes: arguments typed over Explicit axes, reshards
    ("program_harness", ("program_cases", {"explicit": True}), "compare_program",
     ("PROG-1", "PROG-5", "AD-9", "WSC-10", "WSC-11", "DA-1", "FIT-1"),
     "test_programs_over_explicit_axes_agree_with_jax", 25),
    # the same, with abstract arguments (ShapeDtypeStructs) traced
    ("program_harness", "abstract_program_cases", "compare_traced",
     ("PROG-1", "WSC-10", "FIT-2"),
     "test_abstract_programs_over_explicit_axes_trace_as_jax_does", 25),
    ("program_vmap_harness", "vmap_cases", "compare_vmapped", ("WSC-7",),
     "test_vmapped_programs_agree_with_jax"),
    ("program_vmap_harness", ("vmap_cases", {"explicit": True}), "compare_vmapped",
     ("WSC-7", "PROG-1", "WSC-10"), "test_vmapped_programs_over_explicit_axes_agree_with_jax",
     25),
    ("program_ad_harness", "ad_cases", "compare_ad", (),
     "test_differentiated_programs_agree_with_jax"),
    # over Auto, Explicit and mixed meshes: every placed value's type held to JAX's
    ("program_ad_harness", ("ad_cases", {"explicit": True}), "compare_ad",
     ("AD-9", "AD-13", "AD-14"), "test_differentiated_programs_over_explicit_axes_agree_with_jax",
     25),
    ("program_ad_harness", "map_ad_cases", "compare_map_ad",
     ("AD-10", "AD-11", "AD-12", "AD-13"), "test_differentiated_shard_maps_agree_with_jax", 50),
    # in and out specs that may name an axis twice too (SMAP-12)
    ("program_shardmap_harness", ("map_cases", {"repeated_axes": True}), "compare_case", (),
     "test_shard_mapped_programs_agree_with_jax"),
    ("program_constants_harness", "constant_cases", "compare_constants", (),
     "test_programs_with_constants_agree_with_jax"),
)

for _harness, _cases, _compare, _rules, _name, *_size in PROGRAM_PROPERTIES:
    _property = program_property(_harness, _cases, _compare, _rules, _name, *_size)
    if _property is not None:
        globals()[_name] = _property
        __all__.append(_name)


# --------------------------------------------------------------------------- the engine

@dataclasses.dataclass(frozen=True)
class EngineHarness:
    """How the engine is held to one program harness: a case's function, its arguments
    and the top-level jit's options; JAX's outcome on it (a
    :class:`~shardlaw.properties.program_harness.JaxOutcome`: the stage and exception, or
    the results' shardings and committed flags); the spec's verdict given that outcome."""

    function: Callable[[Any], Callable[..., Any]]
    arguments: Callable[[Any], tuple]
    options: Callable[[Any], dict]
    run_jax: Callable[[Any], Any]
    spec: Callable[[Any, Any], Any]


# The drawn compositions of program_harness: inner jits, constraints, device_puts.
PROGRAMS = EngineHarness(function_of, arguments_of, top_options, run_in_jax, spec_verdict)


def shard_maps() -> EngineHarness:
    """The drawn shard_maps of program_shardmap_harness (collectives, constraints before and
    after, an inner jit), the spec's verdict on the program JAX traced (``describe_program``
    of its jaxpr, the one the engine walks: a refusal's path inside a body counts the casts
    JAX inserts, which the recipe's built program leaves out), or on the built program where
    JAX traced none."""
    from shardlaw.properties import program_shardmap_harness as harness
    from shardlaw.spec import explain_program

    def spec(case: Any, outcome: Any) -> Any:
        described = outcome.described
        return explain_program(harness.program_of(case) if described is None else described)

    return EngineHarness(harness.function_of, lambda case: (harness.argument_of(case),),
                         lambda case: {}, harness.run_case, spec)


class EngineOutcome:
    """What ``shardlaw.engine.jit`` did: the stage that raised and the exception, or the
    results and the explanation of the call."""

    def __init__(self) -> None:
        self.stage: str | None = None
        self.error: BaseException | None = None
        self.results: tuple = ()
        self.explanation: Any = None


def run_in_engine(case: Any, harness: EngineHarness = PROGRAMS) -> EngineOutcome:
    """Trace, lower, compile and run ``shardlaw.engine.jit`` of the case's function (the
    inner jits stay JAX's), then ask ``explain`` of the same call."""
    import jax
    from shardlaw.engine import jit

    outcome = EngineOutcome()
    args = harness.arguments(case)
    jitted = jit(harness.function(case), **harness.options(case))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome.stage, outcome.error, results = _stages(jitted, args)
        if outcome.error is not None:
            return outcome
        outcome.results = tuple(jax.tree_util.tree_leaves(results))
        outcome.explanation = jitted.explain(*args)
    return outcome


def _stages(jitted: Any, args: tuple) -> tuple[str | None, BaseException | None, Any]:
    """Trace, lower, compile and call ``jitted`` (JAX's or the engine's): the stage that
    raised and its exception, or the call's results."""
    steps = [("trace", lambda: jitted.trace(*args)),
             ("lower", lambda: jitted.trace(*args).lower()),
             ("compile", lambda: jitted.trace(*args).lower().compile()),
             ("call", lambda: jitted(*args))]
    results = None
    for stage, step in steps:
        try:
            results = step()
        except Exception as error:  # noqa: BLE001 - recorded and compared
            return stage, error, None
    return None, None, results


def _engine_refusal(verdict: Any, jax_stage: str, jax_error: BaseException,
                    mine: EngineOutcome) -> list[str]:
    """The engine refused where JAX did: the same stage, JAX's class, the spec's rule."""
    from shardlaw.engine import EngineRejection

    error = mine.error
    if error is None:
        return [f"JAX refused at {jax_stage} with {type(jax_error).__name__}: {jax_error}; "
                "the engine accepts"]
    if mine.stage != jax_stage or not isinstance(error, type(jax_error)):
        return [f"JAX refused at {jax_stage} with {type(jax_error).__name__}; the engine at "
                f"{mine.stage} with {type(error).__name__}: {error}"]
    if verdict.accepted or verdict.stage != jax_stage:
        return []   # the spec disagrees with JAX: compare_program reports it
    if not isinstance(error, EngineRejection):
        in_body = (verdict.path or "").startswith("body[")
        if jax_stage == "trace" and in_body:
            LEFT_TO_JAX_SEEN[verdict.rule] += 1
            return []
        return [f"the engine refused by JAX's own {type(error).__name__} with no rule; the "
                f"spec by {verdict.rule} at {verdict.path}: {error}"]
    problems = []
    if error.rule != verdict.rule:
        problems.append(f"the engine refused by {error.rule}, the spec by {verdict.rule}: "
                        f"{error}\nspec: {verdict.message}")
    elif (verdict.path or "").startswith("body[") and error.path != verdict.path:
        problems.append(f"the engine refused at {error.path}, the spec at {verdict.path}")
    if not problems:
        hits.record(ENGINE_SOURCE, error.rule, refused=True)
        if error.rule == "DA-1" and (error.path or "").startswith("body["):
            hits.record(ENGINE_SOURCE, "PROG-2", refused=True)
    return problems


def _engine_results(verdict: Any, jax_outcome: Any, mine: EngineOutcome) -> list[str]:
    """The engine accepted as JAX did: the same results, placed and committed alike, and
    the shardings inside the body the spec lists."""
    from shardlaw.spec import from_jax

    if mine.error is not None:
        return [f"JAX accepts; the engine refused at {mine.stage}: {mine.error}"]
    problems = []
    shardings = [from_jax(r.sharding) for r in mine.results]
    committed = [bool(r._committed) for r in mine.results]
    if shardings != list(jax_outcome.out_shardings):
        problems.append(f"result shardings: engine {shardings}, JAX "
                        f"{jax_outcome.out_shardings}")
    if committed != list(jax_outcome.out_committed):
        problems.append(f"committed: engine {committed}, JAX {jax_outcome.out_committed}")
    inside = tuple((path, from_jax(s)) for path, s in mine.explanation.inside)
    if verdict.accepted and inside != tuple(verdict.inside):
        problems.append(f"inside the body: engine {inside}, spec {verdict.inside}")
    if not problems:
        hits.record(ENGINE_SOURCE, "PROG-2", refused=False, count=int(bool(inside)))
    return problems


def _values_agree(case: Any, harness: EngineHarness, mine: EngineOutcome) -> list[str]:
    """The engine's results hold the values JAX's own jit computes."""
    import jax

    expected = jax.jit(harness.function(case), **harness.options(case))(
        *harness.arguments(case))
    for j, (a, b) in enumerate(zip(mine.results, jax.tree_util.tree_leaves(expected))):
        if not np.array_equal(np.asarray(a), np.asarray(b)):
            return [f"result[{j}]: the engine's values differ from jax.jit's"]
    return []


def compare_engine_program(case: Any, harness: EngineHarness = PROGRAMS) -> list[str]:
    """Every disagreement of the engine with JAX, or with the spec, on ``case``."""
    jax_outcome = harness.run_jax(case)
    verdict = harness.spec(case, jax_outcome)
    mine = run_in_engine(case, harness)
    if jax_outcome.error is not None:
        return _engine_refusal(verdict, jax_outcome.stage, jax_outcome.error, mine)
    problems = _engine_results(verdict, jax_outcome, mine)
    return problems or _values_agree(case, harness, mine)


# --------------------------------------------------------------------------- refs

def _constants_jax(cc: Any) -> Any:
    """What ``jax.jit`` does with a held-values case of program_constants_harness (every
    stage; the compiler's placements, which the spec's verdict is given)."""
    import jax
    from shardlaw.properties.program_constants_harness import constants_function_of
    from shardlaw.properties.program_harness import JaxOutcome, type_of, watch_compiler
    from shardlaw.spec import from_jax

    hits.record_jax_calls(1)
    outcome = JaxOutcome()
    fun, args, options = constants_function_of(cc)
    with warnings.catch_warnings(), watch_compiler(outcome):
        warnings.simplefilter("ignore")
        outcome.stage, outcome.error, results = _stages(jax.jit(fun, **options), args)
    if outcome.error is None:
        outcome.out_shardings = [from_jax(r.sharding) for r in results]
        outcome.out_committed = [bool(r._committed) for r in results]
        outcome.out_types = [type_of(r) for r in results]
    return outcome


def held_values() -> EngineHarness:
    """The drawn programs of program_constants_harness with closed-over constants and
    mutable refs, closed over or passed (constants embedded: the flag that hoists them is
    read when JAX is imported), the spec's verdict given the compiler's placements."""
    from shardlaw.properties import program_constants_harness as harness
    from shardlaw.spec import explain_program

    return EngineHarness(
        lambda cc: harness.constants_function_of(cc)[0],
        lambda cc: harness.constants_function_of(cc)[1],
        lambda cc: harness.constants_function_of(cc)[2], _constants_jax,
        lambda cc, outcome: explain_program(harness.with_compiler(
            harness.constants_program_of(cc), outcome)))


def _ref_paths(cc: Any) -> set[str]:
    """The paths the spec gives the case's refs: ``args[i]`` passed, ``constants[k]``
    closed over (the refs are the first constants)."""
    args, consts = cc.order()
    n_in = len(cc.case.inputs)
    return ({f"args[{n_in + i}]" for i in range(len(args))}
            | {f"constants[{k}]" for k, h in enumerate(consts) if cc.held[h].role == "ref"})


def _constant_paths(cc: Any, placed_only: bool = False) -> set[str]:
    """The paths the spec gives the case's closed-over constants (after the refs); with
    ``placed_only``, those of committed constants a live equation uses."""
    _, consts = cc.order()
    return {f"constants[{k}]" for k, h in enumerate(consts) if cc.held[h].role == "constant"
            and (not placed_only or (cc.held[h].source == "placed"
                                     and cc.held[h].use == "returned"))}


def compare_engine_constants(cc: Any) -> list[str]:
    """The engine's disagreements on a held-values case (:func:`compare_engine_program`
    through :func:`held_values`); on agreement, REF-1's sides (refused: DA-1 at a ref's
    path; accepted: a program with refs), REF-3's (refused: a donated ref; accepted: a
    program with ref arguments none of which is a donor) and, where JAX hoists constants,
    CONST-2's (refused: DA-1 at a constant's path; accepted: a program using a committed
    constant) are recorded."""
    harness = held_values()
    problems = compare_engine_program(cc, harness)
    if problems:
        return problems
    mine = run_in_engine(cc, harness)
    error, refs = mine.error, _ref_paths(cc)
    rule, path = getattr(error, "rule", None), getattr(error, "path", None)
    if refs:
        if error is None:
            hits.record(ENGINE_SOURCE, "REF-1", refused=False)
        elif rule == "DA-1" and path in refs:
            hits.record(ENGINE_SOURCE, "REF-1", refused=True)
    if cc.hoist:
        placed = _constant_paths(cc, placed_only=True)
        if rule == "DA-1" and path in _constant_paths(cc):
            hits.record(ENGINE_SOURCE, "CONST-2", refused=True)
        elif error is None and placed:
            hits.record(ENGINE_SOURCE, "CONST-2", refused=False)
    if any(h.role == "ref_arg" for h in cc.held):
        if rule == "REF-3":
            hits.record(ENGINE_SOURCE, "REF-3", refused=True)
        elif error is None:
            hits.record(ENGINE_SOURCE, "REF-3", refused=False)
    return []


def constant_engine_cases(hoist: bool = False) -> Any:
    """program_constants_harness's drawn cases; ``hoist``: constants hoisted as arguments
    (only in a process whose JAX was imported with the flag that hoists them on)."""
    from shardlaw.properties.program_constants_harness import constant_cases
    return constant_cases(hoist=hoist)


@checks("REF-1", "REF-3", "DA-1")
@given(constant_engine_cases())
@settings(max_examples=examples(20))
def test_engine_agrees_on_programs_with_refs(cc):
    problems = compare_engine_constants(cc)
    assert not problems, "\n".join(problems) + f"\ncase: {cc}"


@checks("PROG-2", "PROG-3", "DA-1")
@given(program_cases())
@settings(max_examples=examples(60))
def test_engine_agrees_on_programs(case):
    problems = compare_engine_program(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"


def _map_cases() -> Any:
    from shardlaw.properties.program_shardmap_harness import map_cases
    return map_cases(repeated_axes=True)


@checks("PROG-2", "DA-1")
@given(_map_cases())
@settings(max_examples=examples(20))
def test_engine_agrees_on_shard_mapped_programs(case):
    problems = compare_engine_program(case, shard_maps())
    assert not problems, "\n".join(problems) + f"\ncase: {case}"
