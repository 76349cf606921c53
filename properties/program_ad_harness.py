"""Whole programs under ``jax.grad``, ``jax.jvp``, ``jax.linearize`` and ``jax.vjp`` against real JAX.

An :class:`AdCase` is a drawn program recipe (:mod:`shardlaw.properties.program_harness`:
inner jits, constraints, device_puts, ``neg`` and ``sin``) and a transformation:

* ``grad`` — ``jax.jit(jax.grad(jitted_loss, argnums=all))``, the loss the sum of every
  output's ``jnp.sum``;
* ``jvp`` — ``jax.jit(lambda p, t: jax.jvp(jitted, p, t))``;
* ``linearize`` — ``jax.jit(lambda p, t: jax.linearize(jitted, *p)[1](*t))``;
* ``vjp`` — ``jax.jit(lambda p, c: jax.vjp(jitted, *p)[1](c))``;
* ``jvp_of_grad`` — ``jax.jit(lambda p, t: jax.jvp(jax.jit(jax.grad(jitted_loss)), p,
  t))``: two transformations stacked;
* ``jvp_of_vmap`` — ``jax.jit(lambda p, t: jax.jvp(jax.vmap(jitted), p, t))`` on a batch of
  two (:func:`~shardlaw.spec.program.batching.vmap_program`, then :func:`jvp_program`).

The spec's side is the rewrite of the recipe's Program (:mod:`shardlaw.spec.program.autodiff`),
never read from JAX's trace; :func:`compare_ad` asks
:func:`~shardlaw.spec.explain_program` about it and holds it to JAX: the same refusal
(stage and class), or the same results' shardings, committedness, types and device
assignment; and the rewritten equations against JAX's transformed function read back by
:func:`~shardlaw.spec.bridge.program.describe_program` (where the bridge reads it; else by
walking JAX's jaxpr), compared as their placing equations in order: every jit's in and out
shardings and donation, every constraint's and device_put's shardings, every shard_map's
specs and, inside its body, every collective with its axes and what it moves (other
opaque equations, whose names and parameters JAX chooses, are left out), and the types
(mesh and split over Explicit axes) of every value a placing equation makes and of every
jit's inputs and outputs. With ``ad_cases(explicit=True)`` the recipes are drawn over
Auto, Explicit and mixed meshes. Rules seen are recorded under :data:`SOURCE`.

A :class:`MapAdCase` is a drawn shard_map program
(:mod:`shardlaw.properties.program_shardmap_harness`: its body a chain of collectives,
casts, ``axis_index`` and elementwise steps, maybe in inner jits and nested shard_maps)
under ``grad`` (of its result's sum), ``jvp``, ``linearize`` or ``vjp``; the spec rewrites
``describe_program`` of the untransformed function (:func:`map_rewrite`) and
:func:`compare_map_ad` holds the rewrite to JAX as above, recording under
:data:`MAP_SOURCE`. A ``pmax`` or ``pmin`` is kept one draw in five (AD-12 refuses
them, as JAX does).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.properties.program_harness import (
    record_hits, with_choices,
    Case, JaxOutcome, arguments_of, function_of, outcome_problems, program_cases, program_of,
    stage_in_jax, top_options,
)
from shardlaw.properties.program_vmap_harness import (
    Vmap, VmapCase, batched_inputs, jax_vmapped, spec_vmapped,
)
from shardlaw.spec import P, Rejection, explain_program, from_jax
from shardlaw.spec.core.rules import tracing
from shardlaw.spec.program.autodiff import (
    grad_program, jvp_program, linearize_program, vjp_program,
)
from shardlaw.spec.program.description import (
    DevicePut, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap, Value,
)

__all__ = ["compare_ad_outcome", "AdCase", "ad_cases", "compare_ad", "rewrite", "run_transformed", "signature",
           "placing",
           "TRANSFORMS", "SOURCE", "ad_hit_counts", "run_function", "compare_rewrite",
           "MapAdCase", "map_ad_cases", "compare_map_ad", "map_rewrite", "map_transformed",
           "MAP_SOURCE", "MAP_TRANSFORMS", "map_ad_hit_counts", "StepGradCase",
           "step_grad_cases", "compare_step_grad", "step_grad_arguments", "STEP_SOURCE"]

SOURCE = "programs-ad"
TRANSFORMS = ("grad", "jvp", "linearize", "vjp", "jvp_of_grad", "jvp_of_vmap")


def ad_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting side, refusing side) over the transformed programs compared."""
    return hits.counts(SOURCE)


# How the tangents (jvp, linearize, jvp_of_grad) and cotangents (vjp) are passed: numpy
# arrays; jax.Arrays placed as their primals are (a cotangent as the first input: every
# recipe value has its shape); or committed replicated over their primal's mesh (on
# device 0 where the primal has no mesh).
PASSED = ("numpy", "primal", "replicated")


@dataclasses.dataclass(frozen=True)
class AdCase:
    """A drawn program, the transformation applied to it, and how its tangents or
    cotangents are passed (:data:`PASSED`)."""

    case: Case
    transform: str
    passed: str = "numpy"


@st.composite
def ad_cases(draw: Any, explicit: bool = False, bodies: bool = False) -> AdCase:
    """A program recipe and a transformation; with ``explicit``, over meshes with Explicit
    axes too (all of them, or mixed with Auto ones: values typed split, reshards); the
    tangents or cotangents numpy arrays or jax.Arrays (:data:`PASSED`); ``bodies``: scans,
    remats and relus among the steps (held to JAX by :func:`compare_ad_outcome`)."""
    return AdCase(draw(program_cases(explicit=explicit, bodies=bodies)),
                  draw(st.sampled_from(TRANSFORMS)), draw(st.sampled_from(PASSED)))


def passed_values(ad: AdCase, count: int | None = None) -> tuple[Value, ...] | None:
    """The tangents (one per input) or ``count`` cotangents as the spec's Values; None
    for numpy arrays (the rewrites' default)."""
    if ad.passed == "numpy" or ad.transform in ("grad", "jvp_of_vmap"):
        return None
    primals = ad.case.inputs if count is None else (ad.case.inputs[0],) * count
    return tuple(_passed(ad.passed, v) for v in primals)


def _passed(how: str, primal: Value) -> Value:
    from shardlaw.spec import NamedSharding, SingleDeviceSharding

    sharding = primal.sharding
    split = getattr(sharding, "spec", None)
    if primal.abstract or sharding is None or (split is not None and (
            split.reduced or split.unreduced)):
        return Value.numpy(primal.shape)   # (a reduced or abstract primal: left numpy)
    if how == "primal":
        return Value.placed(primal.shape, sharding, committed=primal.committed)
    if isinstance(sharding, NamedSharding):
        return Value.placed(primal.shape, NamedSharding(sharding.mesh, P()))
    return Value.placed(primal.shape, SingleDeviceSharding(0))


# --------------------------------------------------------------------------- the spec's side

def loss_program(case: Case) -> Program:
    """The recipe's Program summed to a scalar: the ``reduce_sum`` of each output it sums
    (:func:`summed_outputs`), added."""
    program = program_of(case)
    types = list(program.value_types)
    equations = list(program.equations)

    def emit(primitive: str, operands: tuple[int, ...], params: tuple = ()) -> int:
        # A result is typed over its operands' mesh where they agree (None where not),
        # reduced over the axes a reduced operand is (JAX's reduce_sum and add keep them).
        meshes = {types[n].mesh for n in operands} - {None}
        reduced = frozenset().union(*(types[n].spec.reduced for n in operands
                                      if types[n].spec is not None))
        mesh = meshes.pop() if len(meshes) == 1 else None
        scalar = Value.typed((), "float32", mesh)
        if mesh is not None and reduced:
            scalar = dataclasses.replace(scalar, spec=P(reduced=reduced))
        equations.append(Opaque(operands, (scalar,), primitive=primitive, params=params))
        types.append(scalar)
        return len(types) - 1

    outputs = [program.outputs[k] for k in summed_outputs(program)]
    total = emit("reduce_sum", (outputs[0],))
    for n in outputs[1:]:
        total = emit("add", (total, emit("reduce_sum", (n,))))
    return Program(program.inputs, tuple(equations), (total,), keep_unused=case.keep_unused)


def summed_outputs(program: Program) -> tuple[int, ...]:
    """The outputs the loss sums: each output whose sum JAX adds to the running total
    (it refuses at trace to add values typed over two meshes unless both are all Auto,
    where the sum is typed over no mesh: an output typed over another mesh is left out)."""
    kept, mesh = [], None
    for k, n in enumerate(program.outputs):
        other = program.value_types[n].mesh
        if mesh is None or other is None or other == mesh:
            mesh = mesh or other
        elif _all_auto(mesh) and _all_auto(other):
            mesh = None
        else:
            continue
        kept.append(k)
    return tuple(kept)


def _all_auto(mesh: Any) -> bool:
    return all(t.name == "Auto" for t in mesh.axis_types)


def rewrite(ad: AdCase) -> Program:
    """The spec's Program for the transformed call (tangents and cotangents as
    :func:`passed_values` gives them)."""
    if ad.transform == "grad":
        program = loss_program(ad.case)
        return grad_program(program, tuple(range(len(program.inputs))))
    program = program_of(ad.case)
    if ad.transform == "jvp":
        return jvp_program(program, passed_values(ad))
    if ad.transform == "linearize":
        return linearize_program(program, passed_values(ad)).applied
    if ad.transform == "vjp":
        return vjp_program(program, passed_values(ad, len(ad.case.body.outputs))).applied
    if ad.transform == "jvp_of_vmap":
        return jvp_program(spec_vmapped(_vmap_case(ad.case)))
    loss = loss_program(ad.case)
    return jvp_program(grad_program(loss, tuple(range(len(loss.inputs)))), passed_values(ad))


def _vmap_case(case: Case) -> VmapCase:
    return VmapCase(case, (Vmap(in_axes=(0,) * len(case.inputs), size=2),))


# --------------------------------------------------------------------------- JAX's side

def _loss_function(case: Case) -> Any:
    import jax
    import jax.numpy as jnp

    f = function_of(case)
    summed = summed_outputs(program_of(case))

    def loss(*args: Any) -> Any:
        every = f(*args)
        outs = [every[k] for k in summed]
        total = jnp.sum(outs[0])
        for o in outs[1:]:
            total = total + jnp.sum(o)
        return total
    options = {"keep_unused": True} if case.keep_unused else {}
    return jax.jit(loss, **options)


def transformed(ad: AdCase) -> tuple[Any, tuple]:
    """The real transformed function (jitted) and its arguments."""
    import jax
    import numpy as np

    if ad.transform == "jvp_of_vmap":
        vc = _vmap_case(ad.case)
        args = arguments_of(dataclasses.replace(ad.case, inputs=batched_inputs(vc)))
        ones = tuple(np.ones(a.shape, np.float32) for a in args)
        n, mapped = len(args), jax_vmapped(vc)
        return jax.jit(lambda *pt: jax.jvp(mapped, pt[:n], pt[n:])), args + ones
    args = arguments_of(ad.case)
    n = len(args)
    ones = _passed_arrays(ad, passed_values(ad)) or tuple(
        np.ones(a.shape, np.float32) for a in args)
    argnums = tuple(range(n))
    if ad.transform in ("grad", "jvp_of_grad"):
        grad = jax.jit(jax.grad(_loss_function(ad.case), argnums=argnums))
        if ad.transform == "grad":
            return grad, args
        return jax.jit(lambda *pt: jax.jvp(grad, pt[:n], pt[n:])), args + ones
    jitted = jax.jit(function_of(ad.case), **top_options(ad.case))
    if ad.transform == "jvp":
        return jax.jit(lambda *pt: jax.jvp(jitted, pt[:n], pt[n:])), args + ones
    if ad.transform == "linearize":
        return jax.jit(lambda *pt: jax.linearize(jitted, *pt[:n])[1](*pt[n:])), args + ones
    count = len(ad.case.body.outputs)
    shapes = [ad.case.inputs[0].shape] * count  # every recipe value has the inputs' shape
    cts = _passed_arrays(ad, passed_values(ad, count)) or tuple(
        np.ones(s, np.float32) for s in shapes)
    return jax.jit(lambda *pc: jax.vjp(jitted, *pc[:n])[1](tuple(pc[n:]))), args + cts


def _passed_arrays(ad: AdCase, values: tuple[Value, ...] | None) -> tuple | None:
    """The JAX arrays of :func:`passed_values` (None: numpy ones, made by the caller)."""
    if values is None:
        return None
    return arguments_of(dataclasses.replace(ad.case, inputs=values))


def run_transformed(ad: AdCase) -> JaxOutcome:
    """Trace, lower, compile and run the transformed function; its description."""
    return run_function(*transformed(ad))


def run_function(fn: Any, args: tuple) -> JaxOutcome:
    """Trace, lower, compile and run ``fn`` (jitted) on ``args``; its description."""
    import jax
    from shardlaw.spec.bridge.program import describe_program

    outcome = JaxOutcome()
    hits.record_jax_calls(1)
    if hits.jax_calls() % 200 == 0:
        jax.clear_caches()

    def described(stage: str, _: Any) -> None:
        if stage == "trace":
            outcome.described = _described(describe_program, fn, args)

    stage_in_jax(fn, args, outcome, after=described)
    return outcome


def _described(describe_program: Any, fn: Any, args: tuple) -> Any:
    """describe_program of the transformed function, or its placing equations read from
    the jaxpr where the bridge does not read it (grad's seed: a reshard of a literal)."""
    try:
        return describe_program(fn, *args)
    except TypeError:
        import jax
        return jaxpr_signature(jax.make_jaxpr(fn)(*args).jaxpr.eqns[0].params["jaxpr"].jaxpr)


# --------------------------------------------------------------------------- signatures

def placing(eq: Any) -> tuple | None:
    """A constraint's, a device_put's or a reshard's entry in :func:`signature`: its kind,
    its sharding (a device_put's targets) and the types it gives (None: another kind)."""
    if isinstance(eq, ShardingConstraint):
        return ("sharding_constraint", eq.sharding, typed(eq.results))
    if isinstance(eq, DevicePut):
        return ("device_put", eq.targets, typed(eq.results))
    if isinstance(eq, Reshard):
        return ("reshard", eq.sharding, typed(eq.results))
    return None


def signature(program: Program) -> tuple:
    """The placing equations of a program in order, bodies included: each jit's in and
    out shardings and donation, each constraint's sharding, each device_put's targets,
    each reshard's sharding; each entry ends with the types (mesh and split over Explicit
    axes, :func:`typed`) of the values it places: a jit's body's inputs and outputs, the
    others' results."""
    out: list = []
    for eq in program.equations:
        placed = placing(eq)
        if placed is not None:
            out.append(placed)
        elif isinstance(eq, Jit):
            body = eq.body
            out.append(("jit", body.in_shardings, body.out_shardings, body.donated,
                        signature(body), typed(body.inputs + tuple(
                            body.value_types[n] for n in body.outputs))))
        elif isinstance(eq, ShardMap):
            out.append(("shard_map", eq.in_specs, eq.out_specs, signature(eq.body),
                        typed(eq.results)))
        elif isinstance(eq, Opaque) and eq.primitive in COLLECTIVE_PARAMS:
            out.append(_collective_signature(eq.primitive, dict(eq.params)))
    return tuple(out)


def typed(values: Any) -> tuple:
    """Per value, the mesh its type carries and its split over Explicit axes (what
    ``jax.typeof(v).sharding`` says; None, None: a type over no mesh)."""
    return tuple((v.mesh, v.spec) for v in values)


# The collectives a signature holds (inside shard_map bodies), with the parameters that
# say what each moves: its axes, then these.
COLLECTIVE_PARAMS = {
    "psum": (), "psum_invariant": (), "pvary": (), "pmax": (), "pmin": (),
    "all_gather": ("all_gather_dimension", "tiled"),
    "reduce_scatter": ("scatter_dimension", "tiled"),
    "all_to_all": ("split_axis", "concat_axis"), "ppermute": ("perm",)}


def _collective_signature(primitive: str, params: dict) -> tuple:
    named = params.get("axes", params.get("axis_name", ()))
    axes = (named,) if isinstance(named, str) else tuple(named)
    extra = tuple(tuple(tuple(p) for p in params[k]) if k == "perm" else params[k]
                  for k in COLLECTIVE_PARAMS[primitive])
    return (primitive, axes) + extra


def _jax_sharding(s: Any) -> Any:
    from jax._src.named_sharding import UnspecifiedValue
    from shardlaw.spec import UNSPECIFIED
    return UNSPECIFIED if isinstance(s, UnspecifiedValue) else from_jax(s)


def jaxpr_signature(jaxpr: Any) -> tuple:
    """:func:`signature` read from a jaxpr."""
    import jax

    out: list = []
    for eqn in jaxpr.eqns:
        name, params = eqn.primitive.name, eqn.params
        results = _jaxpr_typed(eqn.outvars)
        if name in ("jit", "pjit"):
            body = params["jaxpr"].jaxpr
            out.append(("jit", tuple(_jax_sharding(s) for s in params["in_shardings"]),
                        tuple(_jax_sharding(s) for s in params["out_shardings"]),
                        tuple(bool(d) for d in params["donated_invars"]),
                        jaxpr_signature(body), _jaxpr_typed(body.invars + body.outvars)))
        elif name == "sharding_constraint":
            out.append((name, _jax_sharding(params["sharding"]), results))
        elif name == "device_put":
            out.append((name, tuple(None if d is None else d.id if isinstance(d, jax.Device)
                                    else _jax_sharding(d) for d in params["devices"]),
                        results))
        elif name == "shard_map":
            out.append((name, tuple(from_jax(p) for p in params["in_specs"]),
                        tuple(from_jax(p) for p in params["out_specs"]),
                        jaxpr_signature(params["jaxpr"]), results))
        elif name == "reshard":
            out.append((name, _jax_sharding(params["dst_sharding"]), results))
        elif name in COLLECTIVE_PARAMS:
            out.append(_collective_signature(name, params))
    return tuple(out)


def _jaxpr_typed(atoms: Any) -> tuple:
    """:func:`typed` read from a jaxpr's variables (and literals)."""
    from shardlaw.spec.bridge.program import value_type_of

    return typed(value_type_of(a.aval, "a value of the transformed function") for a in atoms)


# --------------------------------------------------------------------------- comparing

def compare_ad(ad: AdCase) -> list[str]:
    """Every disagreement between the spec's rewrite and JAX on ``ad`` (empty: agree)."""
    return compare_rewrite(lambda: rewrite(ad), run_transformed(ad))


def compare_ad_outcome(ad: AdCase) -> list[str]:
    """:func:`compare_ad` less the rewritten equations' comparison: the refusal (stage and
    class) or the results JAX gives. For the bodies of issue 32, whose rewrites differ
    from JAX's in equations that place nothing of their own (a custom_jvp's own rule is
    not read; a scan's residuals are all stacked, none hoisted)."""
    return compare_rewrite(lambda: rewrite(ad), run_transformed(ad), equations=False)


def compare_rewrite(rewritten: Any, outcome: JaxOutcome, source: str = SOURCE,
                    equations: bool = True) -> list[str]:
    """Every disagreement between the spec's rewrite (``rewritten()``) and JAX's outcome
    of the transformed function (``equations``: the rewritten equations too); the rules
    seen recorded under ``source``."""
    with tracing() as applied:   # the AD and WSC rules the rewrite applied
        try:
            program = rewritten()
        except Rejection as error:
            return _compare_refusal(error, outcome, source)
    problems = []
    described = outcome.described
    if described is not None and equations:
        theirs = signature(described) if isinstance(described, Program) else described
        if signature(program) != theirs:
            problems.append(f"rewritten equations: spec {signature(program)!r}, JAX "
                            f"{theirs!r}")
    verdict = explain_program(with_choices(program, outcome))
    problems += outcome_problems(verdict, outcome)
    if not problems:
        _record_ad(program, verdict, source)
        for rule_id in dict.fromkeys(r for r in applied if r.startswith("AD-")):
            hits.record(source, rule_id, refused=False)
    return problems


def _record_ad(program: Program, verdict: Any, source: str = SOURCE) -> None:
    """The rules seen, under this harness's source (the program harness's own recorder
    run, then its counts moved here)."""
    before = hits.counts("programs")
    record_hits(program, verdict)
    after = hits.counts("programs")
    for rule_id, (accepted, refused) in after.items():
        was = before.get(rule_id, (0, 0))
        if accepted > was[0]:
            hits.record(source, rule_id, refused=False, count=accepted - was[0])
        if refused > was[1]:
            hits.record(source, rule_id, refused=True, count=refused - was[1])


def _compare_refusal(error: Rejection, outcome: JaxOutcome, source: str = SOURCE
                     ) -> list[str]:
    """The spec refused while rewriting (what tracing the function refuses): JAX must
    refuse at the same stage with the same class."""
    failure = error.failure
    names = {cls.__name__ for cls in type(outcome.error).__mro__} if outcome.error else set()
    if outcome.error is None:
        return [f"JAX accepts; the spec's rewrite refuses: {error}"]
    if error.stage != outcome.stage or not ({failure.jax_error,
                                             failure.error_type.__name__} & names):
        return [f"JAX refused at {outcome.stage} with {type(outcome.error).__name__}: "
                f"{outcome.error}; the spec's rewrite at {error.stage}: {error}"]
    hits.record(source, failure.rule, refused=True)
    return []


# --------------------------------------------------------------------------- shard_maps

MAP_SOURCE = "programs-ad-shard_map"
MAP_TRANSFORMS = ("grad", "jvp", "linearize", "vjp")


def map_ad_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting side, refusing side) over the transformed shard_map programs."""
    return hits.counts(MAP_SOURCE)


@dataclasses.dataclass(frozen=True)
class MapAdCase:
    """A drawn program with a shard_map (:class:`~shardlaw.properties.program_shardmap_harness.MapCase`:
    collectives in its body) and the transformation applied to it."""

    case: Any
    transform: str


@st.composite
def map_ad_cases(draw: Any) -> MapAdCase:
    """A shard_map program and a transformation; a pmax or pmin (which have no derivative:
    AD-12 refuses them) is kept one time in five, else drawn again as a psum."""
    from shardlaw.properties.program_shardmap_harness import map_cases

    case = draw(map_cases())
    ops = tuple(op if op.kind not in ("pmax", "pmin") or draw(st.integers(0, 4)) == 0
                else dataclasses.replace(op, kind="psum") for op in case.ops)
    case = dataclasses.replace(case, ops=ops)
    if draw(st.integers(0, 3)) == 0:   # now and then over an all-Explicit mesh
        case = _explicit(case)
    return MapAdCase(case, draw(st.sampled_from(MAP_TRANSFORMS)))


def _explicit(case: Any) -> Any:
    """The case over the same meshes with every axis Explicit (its argument's type split
    as its sharding says: the in spec must then match it, SMAP-17)."""
    from shardlaw.spec import AxisType, NamedSharding as Named

    def moved(mesh: Any) -> Any:
        return None if mesh is None else type(mesh)(
            mesh.axis_sizes, mesh.axis_names, mesh.devices,
            (AxisType.Explicit,) * len(mesh.axis_names))

    def placed(sharding: Any) -> Any:
        return None if sharding is None else Named(moved(sharding.mesh), sharding.spec)

    argument = Value.placed(case.argument.shape, placed(case.argument.sharding))
    return dataclasses.replace(case, mesh=moved(case.mesh), argument=argument,
                               before=placed(case.before), after=placed(case.after),
                               map_mesh=moved(case.map_mesh))


def _map_functions(ad: MapAdCase) -> tuple[Any, Any]:
    """The case's function jitted, and its loss (the sum of its result) jitted."""
    import jax
    import jax.numpy as jnp
    from shardlaw.properties.program_shardmap_harness import function_of

    f = function_of(ad.case)
    return jax.jit(f), jax.jit(lambda x: jnp.sum(f(x)))


def map_transformed(ad: MapAdCase) -> tuple[Any, tuple]:
    """The real transformed function (jitted) and its arguments: tangents and cotangents
    are numpy ones."""
    import jax
    import numpy as np
    from shardlaw.properties.program_shardmap_harness import argument_of

    jitted, loss = _map_functions(ad)
    arg = argument_of(ad.case)
    ones = np.ones(arg.shape, np.float32)
    if ad.transform == "grad":
        return jax.jit(jax.grad(loss)), (arg,)
    if ad.transform == "jvp":
        return jax.jit(lambda p, t: jax.jvp(jitted, (p,), (t,))), (arg, ones)
    if ad.transform == "linearize":
        return jax.jit(lambda p, t: jax.linearize(jitted, p)[1](t)), (arg, ones)
    try:
        shape = jax.eval_shape(jitted, arg).shape
    except Exception:  # noqa: BLE001 - JAX refuses the function itself; so does the vjp
        shape = arg.shape
    return jax.jit(lambda p, c: jax.vjp(jitted, p)[1](c)), (arg, np.ones(shape, np.float32))


def map_rewrite(ad: MapAdCase) -> Program:
    """The spec's Program for the transformed call: the rewrite of the untransformed
    function's Program (``describe_program`` of it where JAX traces it, else the case's
    Program as its user writes it, which the rewrite refuses while tracing it)."""
    from shardlaw.properties.program_shardmap_harness import argument_of, program_of
    from shardlaw.spec.bridge.program import describe_program

    jitted, loss = _map_functions(ad)
    arg = argument_of(ad.case)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = describe_program(loss if ad.transform == "grad" else jitted, arg)
        if not explain_program(program, until="trace").accepted:   # described up to the
            raise ValueError("refused while tracing")              # shard_map JAX refuses
    except Exception:  # noqa: BLE001 - JAX does not trace it: the spec's own Program
        program = program_of(ad.case)
        if ad.transform == "grad":
            program = _summed(program)
    if ad.transform == "grad":
        return grad_program(program)
    if ad.transform == "jvp":
        return jvp_program(program)
    if ad.transform == "linearize":
        return linearize_program(program).applied
    return vjp_program(program).applied


def _summed(program: Program) -> Program:
    """A program's one output summed to a scalar (``reduce_sum``)."""
    out = program.value_types[program.outputs[0]]
    total = Opaque((program.outputs[0],), (Value.typed((), out.dtype, out.mesh),),
                   primitive="reduce_sum")
    return Program(program.inputs, program.equations + (total,),
                   (len(program.value_types),))


def compare_map_ad(ad: MapAdCase) -> list[str]:
    """Every disagreement between the spec's rewrite of a shard_map program and JAX's
    transformed function (empty: agree)."""
    return compare_rewrite(lambda: map_rewrite(ad), run_function(*map_transformed(ad)),
                           MAP_SOURCE)


# --------------------------------------------------------------------------- a real step's primitives

STEP_SOURCE = "programs-ad-steps"


@dataclasses.dataclass(frozen=True)
class StepGradCase:
    """A drawn step (:mod:`~shardlaw.properties.program_steps`) whose float results are
    summed into a loss, differentiated by ``argnums`` (float arguments), its arguments
    placed as ``placements`` say (``numpy``, ``replicated``, or split over ``x`` or
    ``y`` along their first dimension)."""

    step: Any
    argnums: tuple[int, ...]
    placements: tuple[str, ...]


@st.composite
def step_grad_cases(draw: Any) -> StepGradCase:
    """A step of a real model's primitives under grad, its float arguments placed."""
    from shardlaw.properties.program_steps import KEY, step_cases
    step = draw(step_cases())
    floats = [k for k, s in enumerate(step.shapes) if not (s and s[0] == KEY)]
    argnums = tuple(k for k in floats if draw(st.booleans())) or (floats[0],)
    committed = draw(st.booleans())   # (all placed, or none: see compare_step_grad)
    placements = []
    for shape in step.shapes:
        ways = ["replicated"] if committed else ["numpy"]
        if committed and shape and shape[0] != KEY:
            ways += [w for w, size in (("x", 2), ("y", 4)) if shape[0] % size == 0]
        placements.append("numpy" if shape and shape[0] == KEY else draw(st.sampled_from(ways)))
    return StepGradCase(step, argnums, tuple(placements))


def _step_loss(sc: StepGradCase) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(*args: Any) -> Any:
        outs = jax.tree_util.tree_leaves(sc.step.function(*args))
        return sum(jnp.sum(o) for o in outs if jnp.issubdtype(o.dtype, jnp.floating))
    return loss


def step_grad_arguments(sc: StepGradCase) -> tuple:
    import jax

    from shardlaw.properties.program_steps import examples_of
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    out = []
    for example, how in zip(examples_of(sc.step), sc.placements):
        if how == "numpy":
            out.append(example)
        else:
            spec = jax.P() if how == "replicated" else jax.P(how)
            out.append(jax.device_put(example, jax.sharding.NamedSharding(mesh, spec)))
    return tuple(out)


def compare_step_grad(sc: StepGradCase) -> list[str]:
    """How ``grad_program`` of the described step and ``jax.jit(jax.grad(...))`` part
    (empty: they agree): the refusal (same stage and class), or the results' shardings,
    committedness and types. Rule sides are recorded under ``"programs-ad-steps"``.

    The draws place every float argument or none: with a numpy argument beside committed
    ones, JAX reshards the gradient of the numpy one back to a type over no mesh (an
    ``add``'s transpose), which the spec's gradient does not yet do (its type stays over
    the mesh: issue 32, item 5)."""
    import jax

    from shardlaw.spec.bridge.program import describe_program
    loss, args = _step_loss(sc), step_grad_arguments(sc)
    outcome = JaxOutcome()
    stage_in_jax(jax.jit(jax.grad(loss, sc.argnums)), args, outcome)
    return compare_rewrite(lambda: grad_program(describe_program(loss, *args), sc.argnums),
                           outcome, STEP_SOURCE)
