"""Whole programs against real JAX, program for program.

A :class:`Recipe` says what a drawn program does: its arguments (spec values), a top-level
``jax.jit`` with optional ``out_shardings``, and a body of :class:`Step` values — inner jits
(with their own in/out shardings and a body of steps), ``with_sharding_constraint``,
``jax.device_put``, the elementwise ``neg`` and ``sin``, and the bodies of issue 32 — a
``lax.scan`` over a body of steps (its carry the value, two iterations), a
``jax.checkpoint`` of one, and ``jax.nn.relu`` (a custom_jvp around a jit) — each taking an
earlier value.
From one recipe both sides are built: the real function (:func:`function_of`, with its
arguments, :func:`arguments_of`) and its :class:`~shardlaw.spec.Program`
(:func:`program_of`, the result types given by PROG-1). :func:`run_in_jax` traces, lowers,
compiles and runs the function under ``jax.jit`` and records the first stage that raised,
or the results' shardings, committedness and types, the device assignment, and the
compiler's own placement of each result before JAX re-reads it. :func:`compare_program`
asks :func:`~shardlaw.spec.explain_program`, checks that
:func:`~shardlaw.spec.bridge.program.describe_program` of the real function gives the
recipe's program, and lists every disagreement; it records each rule's sides with
:func:`shardlaw.properties.hits.record` (source ``"programs"``, read with
:func:`program_hit_counts`).

The recipes draw 1 to 8 devices, concrete meshes over Auto axes, and shardings over the
program's mesh or over a mesh that differs from it: the same devices in reverse order,
fewer devices, the same devices in another shape, the same shape under other axis names,
or one device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.spec import (
    UNCONSTRAINED, UNSPECIFIED, Mesh, NamedSharding, P, PartitionSpec, Rejection,
    SingleDeviceSharding, explain_program, from_jax, to_jax,
)
from shardlaw.spec.core.values import AxisType
from shardlaw.spec.program.description import (
    DevicePut, Jit, Opaque, Program, Reshard, ShardingConstraint, Value, result_types,
)
from shardlaw.spec.program.control_flow import CustomJvp, CustomVjp, Remat, Scan
from shardlaw.spec.program.lowering import live_parts

__all__ = ["Step", "Recipe", "Case", "program_of", "function_of", "arguments_of",
           "run_in_jax", "JaxOutcome", "compare_program", "outcome_problems", "program_cases", "SOURCE",
           "compare_traced", "abstract_program_cases",
           "program_hit_counts", "spec_verdict", "type_of_aval", "primal_only"]

# The source under which the programs compared record their rules (shardlaw.properties.hits).
SOURCE = "programs"

# JAX's caches are emptied every this many programs (a long run would otherwise keep every
# program's trace and executable).
CLEAR_EVERY = 500

# The PROG rules decide without refusing: each records its two outcomes as its sides.
DECIDING = ("PROG-1", "PROG-2", "PROG-3", "PROG-4")

# The elementwise primitives a recipe uses, with the parameters jax 0.10.2 gives them.
ELEMENTWISE = {"neg": (), "sin": (("accuracy", None),)}

# The steps that carry a body of issue 32 (``relu``'s is jax.nn.relu's own).
BODIED = ("scan", "remat", "relu")
SCAN_LENGTH = 2


def program_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting side, refusing side) over the programs compared so far."""
    return hits.counts(SOURCE)


# --------------------------------------------------------------------------- recipes

@dataclasses.dataclass(frozen=True)
class Step:
    """One equation of a recipe: ``kind`` is ``constraint``, ``device_put``, ``reshard``,
    ``neg``, ``sin``, ``jit``, ``scan``, ``remat`` or ``relu``; ``operand`` the number of
    the value it takes."""

    kind: str
    operand: int
    sharding: Any = None                 # a constraint's or reshard's sharding, a device_put's target
    body: "Recipe | None" = None         # an inner jit's, a scan's or a remat's body (one
                                         # input, one output)
    in_sharding: Any = UNSPECIFIED       # an inner jit's options
    out_sharding: Any = UNSPECIFIED


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A body: its steps and the numbers of the values it returns."""

    steps: tuple[Step, ...]
    outputs: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Case:
    """A drawn program: its arguments, its body, the top-level jit's options."""

    inputs: tuple[Value, ...]
    body: Recipe
    out_shardings: tuple = ()
    keep_unused: bool = False


def _body_program(recipe: Recipe, inputs: tuple[Value, ...], **options: Any) -> Program:
    types = [v.type for v in inputs]
    equations = []
    for step in recipe.steps:
        operand = types[step.operand]
        if step.kind == "constraint":
            eq: Any = ShardingConstraint((step.operand,), sharding=step.sharding)
        elif step.kind == "device_put":
            eq = DevicePut((step.operand,), targets=(step.sharding,))
        elif step.kind == "reshard":   # JAX's equation holds it over the abstract mesh,
            # one entry per dimension
            spec = step.sharding.spec
            eq = Reshard((step.operand,), sharding=NamedSharding(
                step.sharding.mesh.abstract, P(*spec, *(None,) * (len(operand.shape) - len(spec)),
                                               unreduced=spec.unreduced, reduced=spec.reduced)))
        elif step.kind in ELEMENTWISE:
            eq = Opaque((step.operand,), (operand,), primitive=step.kind,
                        params=ELEMENTWISE[step.kind])
        elif step.kind in BODIED:
            eq = _bodied(step, operand)
        else:
            assert step.body is not None
            body = _body_program(step.body, (operand,), in_shardings=(step.in_sharding,),
                                 out_shardings=(step.out_sharding,))
            eq = Jit((step.operand,), body=body, name="inner")
        if eq.results is None:
            eq = dataclasses.replace(eq, results=result_types(eq, (operand,)))
        equations.append(eq)
        types.extend(eq.results)
    return Program(inputs, tuple(equations), recipe.outputs, **options)


def _bodied(step: Step, operand: Value) -> Any:
    """The equation of a scan, remat or relu step, as ``describe_program`` reads JAX's."""
    if step.kind == "relu":
        inner = Program((operand,), (Opaque((0,), (operand,), primitive="max"),), (1,))
        body = Program((operand,), (Jit((0,), body=inner, name="relu"),), (1,))
        return CustomJvp((step.operand,), body=body, name="custom_jvp_call")
    assert step.body is not None
    body = _body_program(step.body, (operand,))
    if step.kind == "remat":
        return Remat((step.operand,), body=body, name="checkpoint")
    return Scan((step.operand,), body=body, length=SCAN_LENGTH, num_carry=1)


def primal_only(program: Program) -> Program:
    """``program`` with the rules of its custom-derivative calls left out, bodies included
    (a recipe states a relu's primal body; its rule, read from JAX, is held to JAX's
    derivatives in tests/test_control_flow_ad.py)."""
    def bare(eq: Any) -> Any:
        if isinstance(eq, CustomJvp) and eq.rule is not None:
            eq = dataclasses.replace(eq, rule=None, rule_zeros=())
        if isinstance(eq, CustomVjp) and (eq.fwd, eq.bwd) != (None, None):
            eq = dataclasses.replace(eq, fwd=None, forwarded=(), bwd=None, bwd_zeros=())
        if type(eq) in (Jit, CustomJvp, CustomVjp, Remat) or isinstance(eq, Scan):
            inner = eq.body
            stripped = primal_only(inner)
            if stripped is not inner:
                eq = dataclasses.replace(eq, body=stripped)
        return eq
    equations = tuple(bare(eq) for eq in program.equations)
    if all(a is b for a, b in zip(equations, program.equations)):
        return program
    return dataclasses.replace(program, equations=equations)


def program_of(case: Case) -> Program:
    """The recipe's Program: the types of constraints', device_puts' and jits' results
    given by PROG-1, the elementwise equations' by their operands."""
    return _body_program(case.body, case.inputs, out_shardings=case.out_shardings,
                         keep_unused=case.keep_unused)


def _jit_options(in_sharding: Any, out_sharding: Any) -> dict:
    options = {}
    if in_sharding is not UNSPECIFIED:
        options["in_shardings"] = to_jax(in_sharding)
    if out_sharding is not UNSPECIFIED:
        options["out_shardings"] = to_jax(out_sharding)
    return options


def run_body(recipe: Recipe, values: list[Any]) -> tuple:
    """The recipe's steps run in JAX on ``values``: the body of the function a case traces."""
    import jax
    import jax.numpy as jnp

    values = list(values)
    for step in recipe.steps:
        x = values[step.operand]
        if step.kind == "constraint":
            y = jax.lax.with_sharding_constraint(x, to_jax(step.sharding))
        elif step.kind == "device_put":
            target = step.sharding
            y = jax.device_put(x, jax.devices()[target] if type(target) is int
                               else to_jax(target))
        elif step.kind == "reshard":
            y = jax.sharding.reshard(x, to_jax(step.sharding))
        elif step.kind == "neg":
            y = jnp.negative(x)
        elif step.kind == "sin":
            y = jnp.sin(x)
        elif step.kind in BODIED:
            y = _run_bodied(step, x)
        else:
            (y,) = jax.jit(_inner(step.body), **_jit_options(step.in_sharding,
                                                               step.out_sharding))(x)
        values.append(y)
    return tuple(values[n] for n in recipe.outputs)


def _run_bodied(step: Step, x: Any) -> Any:
    """A scan, remat or relu step run in JAX."""
    import jax

    if step.kind == "relu":
        return jax.nn.relu(x)
    inner = _inner(step.body)
    if step.kind == "remat":
        return jax.checkpoint(inner)(x)[0]
    return jax.lax.scan(lambda c, _: (inner(c)[0], None), x, None, length=SCAN_LENGTH)[0]


def _inner(recipe: Recipe) -> Any:
    def inner(b: Any) -> tuple:
        return run_body(recipe, [b])
    return inner


def function_of(case: Case) -> Any:
    """The real function the recipe describes (not yet jitted)."""
    def program(*args: Any) -> tuple:
        return run_body(case.body, list(args))
    return program


def top_options(case: Case) -> dict:
    """The top-level jit's options."""
    options: dict[str, Any] = {"keep_unused": True} if case.keep_unused else {}
    if any(s is not UNSPECIFIED for s in case.out_shardings):
        options["out_shardings"] = tuple(None if s is UNSPECIFIED else to_jax(s)
                                         for s in case.out_shardings)
    return options


def arguments_of(case: Case) -> tuple:
    """Real arguments for the recipe's inputs: committed arrays placed with device_put,
    uncommitted ones made by jnp, numpy arrays."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    out = []
    for v in case.inputs:
        if v.abstract:   # a jax.ShapeDtypeStruct, over the mesh its sharding names
            sharding = v.sharding
            if isinstance(sharding, NamedSharding) and not sharding.is_concrete:
                sharding = jax.sharding.NamedSharding(_abstract_mesh(sharding.mesh),
                                                      to_jax(sharding.spec))
            elif sharding is not None:
                sharding = to_jax(sharding)
            out.append(jax.ShapeDtypeStruct(v.shape, jnp.float32, sharding=sharding))
            continue
        data = np.arange(int(np.prod(v.shape)), dtype=np.float32).reshape(v.shape)
        if v.sharding is None:
            out.append(data)
        elif v.committed:
            out.append(jax.device_put(data, to_jax(v.sharding)))
        else:
            out.append(jnp.asarray(data))
    return tuple(out)


def _abstract_mesh(mesh: Any) -> Any:
    """JAX's abstract mesh for a spec AbstractMesh, read off a concrete mesh of its shape
    (as users write it: it carries the devices' kind)."""
    concrete = Mesh.iota(mesh.axis_sizes, mesh.axis_names, mesh.axis_types)
    return to_jax(concrete).abstract_mesh


# --------------------------------------------------------------------------- running JAX

@dataclasses.dataclass
class JaxOutcome:
    """What real ``jax.jit`` did: the stage that raised and the exception, or the results."""

    stage: str | None = None            # trace, lower, compile, call (None: all passed)
    error: BaseException | None = None
    out_shardings: list[Any] = dataclasses.field(default_factory=list)
    out_committed: list[bool] = dataclasses.field(default_factory=list)
    out_types: list[Value] = dataclasses.field(default_factory=list)
    device_assignment: tuple[int, ...] | None = None
    compiler: list[Any] | None = None   # the compiler's placement of each result (spec HLO)
    compiler_in: list[Any] | None = None  # ... and of each kept input
    described: Program | None = None    # describe_program of the real function


@contextlib.contextmanager
def watch_compiler(outcome: JaxOutcome):
    """Record the compiler's placements of the kept inputs and of the results as the
    executable reports them, before JAX re-reads them (which can raise): the oracle for
    what the spec leaves to the compiler."""
    from jax._src.interpreters import pxla

    names = {"_get_in_shardings_from_xla": "compiler_in",
             "get_out_shardings_from_executable": "compiler"}
    originals = {name: getattr(pxla, name) for name in names}

    def watch(name: str) -> Any:
        def watched(*args: Any, **kwargs: Any) -> Any:
            result = originals[name](*args, **kwargs)
            if result is not None and getattr(outcome, names[name]) is None:
                setattr(outcome, names[name], [from_jax(s._hlo_sharding) for s in result])
            return result
        return watched

    for name in names:
        setattr(pxla, name, watch(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(pxla, name, original)


def type_of(result: Any) -> Value:
    """The spec's type of a JAX result: its shape, dtype, weak type and typed sharding."""
    import jax

    return type_of_aval(jax.typeof(result))


def type_of_aval(aval: Any) -> Value:
    """The spec's type of a JAX aval (what :func:`type_of` reads off a result)."""
    mesh = aval.sharding.mesh
    if mesh.empty:
        return Value.typed(tuple(aval.shape), str(aval.dtype), weak_type=bool(aval.weak_type))
    # its split over Explicit axes too (a spec with reduced axes is read, not iterated)
    return Value(tuple(aval.shape), str(aval.dtype), bool(aval.weak_type), from_jax(mesh),
                 spec=from_jax(aval.sharding.spec))


def stage_in_jax(jitted: Any, args: tuple, outcome: JaxOutcome,
                 after: Callable[[str, Any], Any] | None = None) -> BaseException | None:
    """Trace, lower, compile and call ``jitted`` on ``args``, warnings silenced and the
    compiler's choices watched, into ``outcome``: the stage and error of the first refusal
    (returned), else the results' shardings, committedness, types and device assignment.
    ``after(stage, what)`` runs after each stage that passes (what it gave)."""
    import jax

    steps = [("trace", lambda: jitted.trace(*args)),
             ("lower", lambda: jitted.trace(*args).lower()),
             ("compile", lambda: jitted.trace(*args).lower().compile()),
             ("call", lambda: jitted(*args))]
    results = None
    with warnings.catch_warnings(), watch_compiler(outcome):
        warnings.simplefilter("ignore")
        for stage, run in steps:
            try:
                results = run()
            except Exception as error:  # noqa: BLE001 - recorded and compared
                outcome.stage, outcome.error = stage, error
                return error
            if after is not None:
                after(stage, results)
    results = jax.tree_util.tree_leaves(results)
    outcome.out_shardings = [from_jax(r.sharding) for r in results]
    outcome.out_committed = [bool(r._committed) for r in results]
    outcome.out_types = [type_of(r) for r in results]
    if results:
        outcome.device_assignment = tuple(d.id for d in results[0].sharding._device_assignment)
    return None


def run_in_jax(case: Case) -> JaxOutcome:
    """Trace, lower, compile and run ``jax.jit`` of the recipe's function."""
    import jax
    from shardlaw.spec.bridge.program import describe_program

    outcome = JaxOutcome()
    hits.record_jax_calls(1)
    if hits.jax_calls() % CLEAR_EVERY == 0:
        jax.clear_caches()   # every program is a fresh function: its traces are never reused
    args = arguments_of(case)
    jitted = jax.jit(function_of(case), **top_options(case))

    def described(stage: str, _: Any) -> None:
        if stage == "trace":
            outcome.described = describe_program(jax.jit(function_of(case),
                                                         **top_options(case)), *args)

    stage_in_jax(jitted, args, outcome, after=described)
    return outcome


# --------------------------------------------------------------------------- comparing

def jax_class_agrees(verdict: Any, error: BaseException) -> bool:
    """Whether JAX's error is of the class the spec's refusal names (JAX's own or a built-in)."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return verdict.jax_error in names or verdict.error_type in names


def compare_program(case: Case) -> list[str]:
    """Every disagreement between the spec and JAX on ``case`` (empty: they agree)."""
    program = program_of(case)
    outcome = run_in_jax(case)
    program = with_choices(program, outcome)
    verdict = explain_program(program)
    problems = []
    recipe = dataclasses.replace(program, compiler=None, compiler_in=None)
    if outcome.described is not None and primal_only(outcome.described) != recipe:
        problems.append(f"describe_program gives {outcome.described!r}, the recipe "
                        f"{recipe!r}")
    problems += outcome_problems(verdict, outcome)
    problems += predicted_problems(explain_program(recipe), outcome)
    if not problems:
        record_hits(program, verdict)
    return problems


def predicted_problems(bare: Any, outcome: JaxOutcome) -> list[str]:
    """Where the spec's own verdict, without the compiler's choices (its predicted placements:
    PROP-5, PROP-8, PROG-11), parts from JAX: a refusal must be JAX's, and a verdict placing
    every result must be JAX's (one with a result open may spell the others over that
    result's mesh: OUT-1 reads the first placed value's, unknown to it)."""
    if not bare.accepted:
        return [f"without the compiler's choices: {p}" for p in outcome_problems(bare, outcome)]
    if any(s is UNSPECIFIED for s in bare.out_shardings) or bare.undetermined:
        return []
    return [f"without the compiler's choices: {p}" for p in outcome_problems(bare, outcome)]


def compare_traced(case: Case) -> list[str]:
    """Every disagreement between ``explain_program(..., until="trace")`` and
    ``jax.jit(f).trace(*args)`` on ``case`` (its inputs may be ``jax.ShapeDtypeStruct``
    values, over concrete or abstract meshes): the refusal's class, or the results' types
    and the description ``describe_program`` reads."""
    import jax
    from shardlaw.spec.bridge.program import describe_program

    program = program_of(case)
    verdict = explain_program(program, until="trace")
    hits.record_jax_calls(1)
    args = arguments_of(case)
    jitted = jax.jit(function_of(case), **top_options(case))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            traced = jitted.trace(*args)
        except Exception as error:  # noqa: BLE001 - compared
            if verdict.accepted:
                return outcome_problems(verdict, JaxOutcome("trace", error))
            if not (jax_class_agrees(verdict, error) and verdict.stage == "trace"):
                return [f"JAX refused at trace with {type(error).__name__}: {error}; the "
                        f"spec at {verdict.stage} with {verdict.jax_error}: "
                        f"{verdict.message}"]
            record_hits(program, verdict)   # a refusal both make: its rule's refusing side
            return []
        described = describe_program(jitted, *args)
    if not verdict.accepted:
        return [f"JAX traces it; the spec refuses: {verdict.message}"]
    problems = []
    if primal_only(described) != program:
        problems.append(f"describe_program gives {described!r}, the recipe {program!r}")
    types = tuple(type_of_aval(aval) for aval in traced.jaxpr.out_avals)
    if types != tuple(verdict.out_types):
        problems.append(f"result types: spec {verdict.out_types!r}, JAX {types!r}")
    if not problems:
        record_hits(program, verdict)
    return problems


def _same_refusal(verdict: Any, outcome: JaxOutcome) -> bool:
    return verdict.stage == outcome.stage and jax_class_agrees(verdict, outcome.error)


def outcome_problems(verdict: Any, outcome: JaxOutcome,
                     same_refusal: Callable[[Any, JaxOutcome], bool] = _same_refusal
                     ) -> list[str]:
    """How the spec's verdict and JAX's outcome part (empty: they agree): both refuse, at
    the same stage with JAX's class (``same_refusal``), or both accept with the same
    results (shardings, committedness, types, device assignment)."""
    if outcome.error is None:
        if not verdict.accepted:
            return [f"JAX accepts; the spec refuses: {verdict.message}"]
        return compare_results(verdict, outcome)
    said = f"JAX refused at {outcome.stage} with {type(outcome.error).__name__}: {outcome.error}"
    if verdict.accepted:
        return [f"{said}; the spec accepts"]
    if not same_refusal(verdict, outcome):
        return [f"{said}; the spec at {verdict.stage} with {verdict.jax_error}: "
                f"{verdict.message}"]
    return []


def spec_verdict(case: Case, outcome: JaxOutcome) -> Any:
    """:func:`~shardlaw.spec.explain_program` of the recipe's program, given the compiler's
    choices JAX made in ``outcome`` (as :func:`compare_program` asks it)."""
    return explain_program(with_choices(program_of(case), outcome))


def with_choices(program: Program, outcome: JaxOutcome) -> Program:
    """``program`` with the compiler's choices JAX made, where the spec leaves them to it
    (the inputs' are the kept ones', put at their positions; kept as KEEP-1 keeps them)."""
    changes: dict[str, Any] = {}
    if outcome.compiler is not None:
        changes["compiler"] = tuple(outcome.compiler)
    if outcome.compiler_in is not None:
        used = live_parts(program).inputs
        kept = [i for i, u in enumerate(used) if u or program.keep_unused]
        if len(kept) == len(outcome.compiler_in):
            choices: list[Any] = [None] * len(program.inputs)
            for i, choice in zip(kept, outcome.compiler_in):
                choices[i] = choice
            changes["compiler_in"] = tuple(choices)
    return dataclasses.replace(program, **changes)


def compare_results(verdict: Any, outcome: JaxOutcome) -> list[str]:
    """Where the spec's accepting verdict and JAX's outcome differ, one line per difference."""
    problems = []
    for what, spec, jax in (("result shardings", verdict.out_shardings, outcome.out_shardings),
                            ("committed", verdict.out_committed, outcome.out_committed),
                            ("result types", verdict.out_types, outcome.out_types)):
        if tuple(spec) != tuple(jax):
            problems.append(f"{what}: spec {tuple(spec)!r}, JAX {tuple(jax)!r}")
    if outcome.device_assignment is not None and \
            tuple(verdict.device_assignment) != outcome.device_assignment:
        problems.append(f"device assignment: spec {tuple(verdict.device_assignment)}, JAX "
                        f"{outcome.device_assignment}")
    return problems


def _typed_equations(program: Program) -> list[tuple[Value, Value]]:
    """(operand type, result type) of every equation PROG-1 types, bodies included."""
    out = []
    for eq in program.equations:
        if isinstance(eq, (ShardingConstraint, DevicePut)):
            out.append((program.value_types[eq.operands[0]], eq.results[0]))
        if isinstance(eq, Jit):
            out += _typed_equations(eq.body)
    return out


def record_hits(program: Program, verdict: Any) -> None:
    """The sides each rule was seen on, for an example the spec and JAX agree on."""
    for rule_id in verdict.trace:
        if rule_id not in DECIDING:   # their two outcomes are recorded below
            hits.record(SOURCE, rule_id,
                        refused=not verdict.accepted and rule_id == verdict.rule)
    for operand, result in _typed_equations(program):
        # PROG-1's two outcomes: the type kept, or moved to another mesh.
        hits.record(SOURCE, "PROG-1", refused=operand.mesh != result.mesh)
    body_refusal = not verdict.accepted and (verdict.path or "").startswith("body[")
    if verdict.accepted and verdict.inside or body_refusal and verdict.stage == "lower":
        hits.record(SOURCE, "PROG-2", refused=body_refusal)
    if not verdict.accepted:
        return
    for by in verdict.placed_by:
        hits.record(SOURCE, "PROG-4", refused=by is None)
    typed = any(isinstance(s, (NamedSharding, SingleDeviceSharding))
                for s in verdict.in_shardings)
    if verdict.inside and "PROG-3" in verdict.trace:
        hits.record(SOURCE, "PROG-3", refused=not typed)


# --------------------------------------------------------------------------- drawing

SHAPES = [(8, 8), (4, 8), (6, 8), (8,)]
FACTORS = {1: [(1,)], 2: [(2,)], 4: [(4,), (2, 2)], 8: [(8,), (2, 4), (4, 2), (2, 2, 2)]}
NAMES = ("x", "y", "z")
OTHER_NAMES = ("p", "q", "r")


@dataclasses.dataclass(frozen=True)
class Meshes:
    """The program's mesh and the meshes that differ from it."""

    main: Mesh
    variants: dict


def program_meshes(n: int, shape: tuple[int, ...], types: tuple = ()) -> Meshes:
    """The program's mesh (its axes of ``types``: all Auto when not given) and the variants;
    a variant of another shape takes the type of the main mesh's first axis."""
    names = NAMES[:len(shape)]
    types = types or (AxisType.Auto,) * len(shape)
    main = Mesh.iota(shape, names, types)
    variants: dict[str, Any] = {"same": main,
                                "renamed": Mesh.iota(shape, OTHER_NAMES[:len(shape)], types)}
    if n > 1:
        variants["reversed"] = Mesh(shape, names, range(n - 1, -1, -1), types)
        variants["fewer"] = Mesh.iota((n // 2,), ("x",), types[:1])
        others = [f for f in FACTORS[n] if f != shape]
        if others:
            variants["reshaped"] = Mesh.iota(others[0], NAMES[:len(others[0])],
                                             types[:1] * len(others[0]))
    return Meshes(main, variants)


def _explicit_axes(mesh: Mesh) -> list[str]:
    return [name for name, kind in zip(mesh.axis_names, mesh.axis_types)
            if kind is AxisType.Explicit]


@st.composite
def _spec(draw: Any, mesh: Mesh, rank: int, unconstrained: bool = False,
          axes: list[str] | None = None) -> PartitionSpec:
    """A spec over ``mesh`` (over ``axes`` of it when given) for a value of rank ``rank``
    (sometimes one entry too many)."""
    free = list(mesh.axis_names if axes is None else axes)
    entries: list[Any] = []
    length = rank + draw(st.sampled_from([0, 0, 0, 0, 0, 0, 0, 1]))
    for _ in range(length):
        choices: list[Any] = [None] + free
        if unconstrained:
            choices.append(UNCONSTRAINED)
        entry = draw(st.sampled_from(choices))
        if isinstance(entry, str):
            free.remove(entry)
        entries.append(entry)
    return P(*entries)


@st.composite
def sharding_on(draw: Any, meshes: Meshes, rank: int, unconstrained: bool = False) -> Any:
    """A sharding of a value of ``rank`` on the program's mesh, a variant of it, or one device."""
    kinds = ["same"] * 6 + sorted(k for k in meshes.variants if k != "same") + ["single"]
    kind = draw(st.sampled_from(kinds))
    if kind == "single":
        return SingleDeviceSharding(draw(st.integers(0, len(meshes.main.devices) - 1)))
    mesh = meshes.variants[kind]
    # UNCONSTRAINED needs an Auto axis (NS-3: JAX's NamedSharding refuses to exist)
    unconstrained = unconstrained and AxisType.Auto in mesh.axis_types
    return NamedSharding(mesh, draw(_spec(mesh, rank, unconstrained)))


@st.composite
def steps_on(draw: Any, meshes: Meshes, rank: int, first: int, count: int, depth: int,
             bodies: bool = True) -> tuple[Step, ...]:
    """``count`` steps of a recipe whose operands are earlier values (``first`` of them
    before the steps), inside ``depth`` nested jits (a jit step only while depth < 2);
    ``bodies``: scans, remats and relus among them."""
    steps = []
    for k in range(count):
        operand = draw(st.integers(0, first + k - 1))
        kinds = ["constraint", "constraint", "device_put", "neg", "sin"] + \
            (["relu"] if bodies else []) + (["jit", "jit"] if depth < 2 else []) + \
            (["scan", "remat"] if depth < 2 and bodies else []) + \
            (["reshard", "reshard"] if _explicit_axes(meshes.main) else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "reshard":   # over the program's mesh, its Explicit axes (sometimes reduced)
            steps.append(Step(kind, operand, NamedSharding(meshes.main, draw(
                _explicit_spec(meshes.main, rank)))))
        elif kind == "constraint":
            steps.append(Step(kind, operand, draw(sharding_on(meshes, rank, True))))
        elif kind == "device_put":
            steps.append(Step(kind, operand, draw(sharding_on(meshes, rank))))
        elif kind in ELEMENTWISE or kind == "relu":
            steps.append(Step(kind, operand))
        elif kind in ("scan", "remat"):
            inner = draw(steps_on(meshes, rank, 1, draw(st.integers(1, 2)), depth + 1, bodies))
            steps.append(Step(kind, operand, body=Recipe(inner, (len(inner),))))
        else:
            inner = draw(steps_on(meshes, rank, 1, draw(st.integers(1, 2)), depth + 1, bodies))
            ins, outs = (draw(st.one_of(st.just(UNSPECIFIED), sharding_on(meshes, rank)))
                         for _ in range(2))
            steps.append(Step(kind, operand, body=Recipe(inner, (len(inner),)),
                              in_sharding=ins, out_sharding=outs))
    return tuple(steps)


@st.composite
def _explicit_spec(draw: Any, mesh: Mesh, rank: int) -> PartitionSpec:
    """A spec over the Explicit axes of ``mesh``, those it leaves out sometimes reduced (on
    a mesh of Explicit axes only: over a mixed mesh JAX 0.10.2 fails on reduced types in
    ways the spec does not describe, an AssertionError when it lowers)."""
    explicit = _explicit_axes(mesh)
    spec = draw(_spec(mesh, rank, axes=explicit))
    spec = P(*spec[:rank])
    rest = sorted(set(explicit) - set(spec.axes()))
    if rest and len(explicit) == len(mesh.axis_names) and draw(st.integers(0, 3)) == 0:
        spec = P(*spec, reduced=draw(st.lists(st.sampled_from(rest), min_size=1,
                                               unique=True)))
    return spec


@st.composite
def input_on(draw: Any, meshes: Meshes, shape: tuple[int, ...]) -> Value:
    """An input of ``shape``: committed to a sharding on the meshes, uncommitted, or numpy."""
    kind = draw(st.sampled_from(["committed", "committed", "numpy", "uncommitted"]))
    if kind == "numpy":
        return Value.numpy(shape)
    if kind == "uncommitted":
        return Value.placed(shape, SingleDeviceSharding(0), committed=False)
    sharding = draw(sharding_on(meshes, len(shape)))
    if isinstance(sharding, NamedSharding) and len(sharding.spec) > len(shape):
        sharding = NamedSharding(sharding.mesh, P(*sharding.spec[:len(shape)]))
    if _explicit_axes(meshes.main) and draw(st.integers(0, 2)) == 0:
        # typed over the Explicit axes of the program's mesh, sometimes reduced
        sharding = NamedSharding(meshes.main, draw(_explicit_spec(meshes.main, len(shape))))
    try:
        return Value.placed(shape, sharding)
    except Rejection:  # an array that cannot exist (it does not divide): place it whole
        return Value.placed(shape, NamedSharding(meshes.main, P()))


AXIS_TYPES = (AxisType.Auto, AxisType.Explicit)


@st.composite
def abstract_program_cases(draw: Any) -> Case:
    """A drawn program over Auto and Explicit meshes whose committed arguments are
    ``jax.ShapeDtypeStruct`` values instead, on their sharding or on its mesh's abstract
    mesh (what ``.trace`` takes), now and then split over Explicit axes that may not
    divide them."""
    case = draw(program_cases(explicit=True))
    inputs = []
    for v in case.inputs:
        if v.committed and isinstance(v.sharding, NamedSharding):
            sharding = v.sharding
            if _explicit_axes(sharding.mesh) and draw(st.integers(0, 2)) == 0:
                # now and then split over Explicit axes whatever its shape: a description
                # may hold one that does not divide, which tracing refuses (FIT-2)
                sharding = NamedSharding(sharding.mesh,
                                         draw(_explicit_spec(sharding.mesh, len(v.shape))))
            if draw(st.booleans()):
                sharding = NamedSharding(sharding.mesh.abstract, sharding.spec)
            v = Value.shape_dtype(v.shape, v.dtype, sharding)
        inputs.append(v)
    return dataclasses.replace(case, inputs=tuple(inputs))


@st.composite
def program_cases(draw: Any, explicit: bool = False, bodies: bool = True) -> Case:
    """A drawn program: 1 to 8 devices, one or two arguments, 1 to 4 equations; with
    ``explicit``, the mesh's axes Auto or Explicit (all of one type, or mixed), arguments
    typed over its Explicit axes (reduced ones too) and reshards among the equations;
    ``bodies``: scans, remats and relus among them."""
    n = draw(st.sampled_from([1, 2, 4, 8]))
    grid = draw(st.sampled_from(FACTORS[n]))
    types = tuple(draw(st.sampled_from(AXIS_TYPES)) for _ in grid) if explicit else ()
    meshes = program_meshes(n, grid, types)
    shape = draw(st.sampled_from(SHAPES))
    inputs = tuple(draw(input_on(meshes, shape)) for _ in range(draw(st.integers(1, 2))))
    steps = draw(steps_on(meshes, len(shape), len(inputs), draw(st.integers(1, 4)), 0, bodies))
    last = len(inputs) + len(steps) - 1
    outputs = (last,) if draw(st.booleans()) else (last, draw(st.integers(0, last)))
    out_shardings: tuple = ()
    if draw(st.integers(0, 5)) == 0:
        out_shardings = tuple(draw(st.one_of(st.just(UNSPECIFIED),
                                             sharding_on(meshes, len(shape))))
                              for _ in outputs)
    return Case(inputs, Recipe(steps, outputs), out_shardings,
                keep_unused=draw(st.integers(0, 5)) == 0)

