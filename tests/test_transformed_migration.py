"""The transformed-call registry retires onto whole programs (issue 23, items 3 and 6).

Every stored transformed-call vector (vectors/transforms/) either has a whole-program form
— asked through the program path, it gives the old vector's expected answer (result; or
rule, exception types and path) — or stays a per-equation question with a reason. The
migrated set (vectors/programs-migrated/) is what ``shardlaw vectors migrate`` writes from
it, and each of its program vectors replays under the spec to its expected verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import example, given, settings

from shardlaw.cli import main
from shardlaw.properties import hits
from shardlaw.properties.autodiff_harness import GradCase, OutputPlan, grad_cases
from shardlaw.properties.suites import examples
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.transforms.transformed import TRANSFORMS, TransformedCall, explain_transformed
from shardlaw.spec.vectors.jit_vectors import vector_text
from shardlaw.spec.vectors.program_vectors import load_program, program_differences
from shardlaw.spec.vectors.transformed_migration import (
    PER_EQUATION, PROGRAM_FUNCTIONS, NoProgramForm, ask_program, migrate_vector,
    old_differences, program_form,
)
from shardlaw.spec.vectors.transformed_vectors import load_transformed

ROOT = Path(__file__).resolve().parent.parent / "vectors"
OLD = sorted((ROOT / "transforms").glob("*/*.json"))
MIGRATED = sorted((ROOT / "programs-migrated").glob("*/*.json"))

# Where the program rewrites' property records the outcomes it saw (properties.hits)
REWRITES = "program_rewrites"

def _old(path: Path):
    return load_transformed(path.read_text())


def _outcome(vector) -> tuple[str, str]:
    """("migrated", "") or ("per-equation", why)."""
    try:
        program_form(vector.call)
    except (NoProgramForm, Rejection) as why:
        return "per-equation", str(why)
    return "migrated", ""


def test_every_question_has_a_program_form_or_a_reason():
    assert set(PROGRAM_FUNCTIONS) | set(PER_EQUATION) == set(TRANSFORMS)
    assert not set(PROGRAM_FUNCTIONS) & set(PER_EQUATION)
    assert all(why.strip() for why in PER_EQUATION.values())


@pytest.mark.parametrize("path", OLD, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_old_vector_migrates_to_its_answer_or_is_listed(path):
    vector = _old(path)
    outcome, why = _outcome(vector)
    if outcome == "per-equation":
        assert why, vector.name
        if vector.call.transform not in PROGRAM_FUNCTIONS:
            assert why == PER_EQUATION[vector.call.transform]
        return
    answer = ask_program(vector.call)
    stored = ROOT / "programs-migrated" / path.parent.name / path.name
    assert old_differences(vector.expect, answer) == [], vector.name
    assert stored.exists(), f"{stored} is not in the migrated set"


@pytest.mark.parametrize("path", MIGRATED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_migrated_vector_replays_through_the_program_path(path):
    vector = load_program(path.read_text())
    assert vector.expect is not None
    assert program_differences(vector) == []
    old = _old(ROOT / "transforms" / path.parent.name / path.name)
    # what the command writes now, but the trace: a replay does not compare it, and it
    # names every rule the program path fires, which grows as the path does
    # (shardlaw vectors migrate ... --replace writes it afresh)
    assert _untraced(json.loads(vector_text(migrate_vector(old)))) == \
        _untraced(json.loads(path.read_text()))


def _untraced(document: dict) -> dict:
    return {**document, "expect": {k: v for k, v in document["expect"].items()
                                   if k != "trace"}}


def test_the_migrated_set_is_what_the_command_writes():
    with tempfile.TemporaryDirectory() as target:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["vectors", "migrate", str(ROOT / "transforms"), target])
        written = sorted(Path(target).glob("*/*.json"))
        text = out.getvalue()
        assert code == 0, text   # no disagreement
        assert [p.relative_to(target) for p in written] == \
            [p.relative_to(ROOT / "programs-migrated") for p in MIGRATED]
        assert f"Migrated {len(MIGRATED)} of {len(OLD)}" in text
        assert "0 disagreement(s)" in text
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["vectors", "migrate", str(ROOT / "transforms"), target]) == 2


def test_explain_transformed_is_deprecated_and_names_the_program_function():
    from shardlaw.spec import Mesh, NamedSharding, P
    mesh = Mesh.iota((2, 4), ("x", "y"))
    call = TransformedCall.of("vmap_jit", arg_shardings=[NamedSharding(mesh, P("y"))],
                              result_shardings=[], arg_shapes=[(4, 8)], result_ranks=[],
                              spmd_axis_name="x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verdict = explain_transformed(call)
    assert any(issubclass(w.category, DeprecationWarning)
               and "vmap_program" in str(w.message) for w in caught)
    assert old_differences(verdict, ask_program(call)) == []


def test_the_forms_written_are_the_forms_announced():
    from shardlaw.spec.vectors import transformed_migration
    assert set(transformed_migration._FORMS) == set(PROGRAM_FUNCTIONS)
    assert not set(PROGRAM_FUNCTIONS) & set(PER_EQUATION)


@pytest.mark.parametrize("name", ["SMAP-17-reject-1", "SMAP-17-reject-2"])
def test_smap_17_refuses_in_the_program_path_as_in_real_jax(name):
    # these two once disagreed: the program path's shard_map refused with SMAP-19 (the
    # unreduced axes) where real JAX refuses first with SMAP-17's check (the in spec
    # against the operand's type, every axis manual and Explicit); real JAX is held here
    from shardlaw.properties.transform_vectors_gen import replay_in_jax
    vector = _old(ROOT / "transforms" / "shardmap" / f"{name}.json")
    assert replay_in_jax(vector) == []
    answer = ask_program(vector.call)
    assert (answer.rule, answer.path) == ("SMAP-17", None)
    assert (ROOT / "programs-migrated" / "shardmap" / f"{name}.json").exists()


def test_an_operand_typed_over_explicit_axes_migrates_as_in_real_jax():
    # an operand whose type is split over the (manual, Explicit) mesh axes is a
    # jax.ShapeDtypeStruct on that split in the program (Value.spec); one typed over
    # Explicit axes the shard_map leaves automatic is not described (SMAP-18 inside)
    from shardlaw.properties.transform_vectors_gen import replay_in_jax
    vector = _old(ROOT / "transforms" / "shardmap" / "SMAP-12-reject-2.json")
    assert replay_in_jax(vector) == []
    form = program_form(vector.call)
    assert form.program.inputs[0].spec is not None
    answer = ask_program(vector.call)
    assert (answer.rule, answer.path) == ("SMAP-12", None)
    assert old_differences(vector.expect, answer) == []
    assert (ROOT / "programs-migrated" / "shardmap" / "SMAP-12-reject-2.json").exists()
    for name in ("SMAP-18-reject-1", "SMAP-18-reject-2"):
        with pytest.raises(NoProgramForm, match="SMAP-18"):
            program_form(_old(ROOT / "transforms" / "shardmap" / f"{name}.json").call)


def _fact_calls():
    """The shard_map facts asked of one shard_map program, over meshes in and out of
    order, abstract, with axes that are not the mesh's: accepting and refusing sides."""
    from shardlaw.spec import Mesh, P
    from shardlaw.spec.core.values import AbstractMesh
    meshes = (Mesh.iota((2, 4), ("x", "y")), Mesh((2, 4), ("x", "y"), [3, 1, 0, 2, 7, 5, 6, 4]),
              Mesh.iota((2, 2, 2), ("z", "y", "x")), AbstractMesh((2, 4), ("x", "y")))
    for mesh in meshes:
        for manual in (frozenset(), frozenset({"x"}), frozenset({"q"})):
            yield TransformedCall.of("manual_axes_of", mesh=mesh, manual_axes=manual)
            for axes in (("x",), ("y", "x"), ("q",)):
                for kind in ("replica_groups", "collective_groups"):
                    if kind == "collective_groups" and isinstance(mesh, AbstractMesh):
                        continue
                    yield TransformedCall.of(kind, mesh=mesh, collective_axes=axes,
                                             manual_axes=manual)
            for spec, shape in ((P("x"), (8, 3)), (P(None, ("y", "x")), (3, 16)),
                                (P("y"), (6,)), (P("x", "x"), (8, 8)), (P("q"), (8,)),
                                (P(), ())):
                for kind in ("per_shard_shape", "unshard_shape"):
                    yield TransformedCall.of(kind, mesh=mesh, spec=spec, shape=shape,
                                             manual_axes=manual)


def test_the_shard_map_facts_read_from_a_program_are_the_per_equation_answers():
    sides = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for call in _fact_calls():
            old = explain_transformed(call)
            new = ask_program(call)
            assert old_differences(old, new) == [], call
            sides.add((call.transform, old.accepted))
    assert {side for _, side in sides} == {True, False}
    assert len(sides) == 10, sorted(sides)


def _accepted_shard_maps():
    from shardlaw.spec import Mesh, P
    from shardlaw.spec.transforms.shardmap import Returned, Shaped
    mesh = Mesh.iota((2, 4), ("x", "y"))
    yield TransformedCall.of(
        "check_shard_map", mesh=mesh, in_specs=(P("x"), P(None, "y")),
        out_specs=(P(), P(None, "y")), operands=(Shaped((8, 4)), Shaped((4, 8))),
        results=(Returned(0, ("x",)), Returned(1)), manual_axes=frozenset({"x", "y"}))
    yield TransformedCall.of(
        "check_shard_map", mesh=mesh, in_specs=P("x"), out_specs=P("x"),
        operands=(Shaped((8,)),), results=Returned(0), manual_axes=frozenset({"x"}),
        check_vma=False)
    yield TransformedCall.of(
        "check_shard_map", mesh=mesh, in_specs=(P("x"),), out_specs=P(),
        operands=(Shaped((8,)),), results=Returned(0, ("x",)),
        manual_axes=frozenset({"x", "y"}))


@pytest.mark.parametrize("call", list(_accepted_shard_maps()))
def test_an_accepted_shard_map_reads_back_its_types(call):
    # the stored shard_map vectors are all refusals: the types read back are held here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = explain_transformed(call)
    assert old.accepted
    assert old_differences(old, ask_program(call)) == []


def _ad_calls():
    from shardlaw.spec import Mesh, NamedSharding, P
    from shardlaw.spec.core.shardings import UNSPECIFIED
    from shardlaw.spec.transforms.autodiff import JitBody, JitEquation
    mesh = Mesh.iota((2, 4), ("data", "model"))
    body = JitBody(inputs=2, dependencies=[{0, 1}, {1}, set()], forwarded=[None, 1, None],
                   residuals=0, stored_residuals=0)
    equation = JitEquation((NamedSharding(mesh, P("data")), UNSPECIFIED),
                           (NamedSharding(mesh, P()), UNSPECIFIED,
                            NamedSharding(mesh, P(None, "model"))), (False, True))
    for nonzero in ((True, False), (False, True), (True, True), (False, False)):
        yield TransformedCall.of("nonzero_outputs", jit_body=body, nonzero_tangents=nonzero)
        yield TransformedCall.of("jvp_equation", primal_equation=equation, jit_body=body,
                                 nonzero_tangents=nonzero)


@pytest.mark.parametrize("call", list(_ad_calls()))
def test_a_jvp_with_several_outputs_reads_back_its_equation(call):
    # the stored AD-1/AD-2 vectors have one input each: several, forwarded and constant
    # outputs, some tangents zero, are held here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = explain_transformed(call)
    assert old.accepted
    assert old_differences(old, ask_program(call)) == []


def _dce_cases(count: int = 40):
    """Small jitted functions (inputs, each output forwarded, a sum of inputs or a
    constant; shardings and donation), each with the outputs a caller uses."""
    import random
    rng = random.Random(23)
    for _ in range(count):
        inputs = rng.randint(1, 3)
        outputs = []
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(["forward", "sum", "sum", "constant"])
            if kind == "forward":
                outputs.append(("forward", rng.randrange(inputs)))
            elif kind == "sum":
                outputs.append(("sum", tuple(sorted(rng.sample(range(inputs),
                                                              rng.randint(1, inputs))))))
            else:
                outputs.append(("constant", None))
        ins = tuple(rng.choice([None, "x", "y"]) for _ in range(inputs))
        outs = tuple(rng.choice([None, None, "x"]) for _ in outputs)
        donated = tuple(rng.random() < 0.4 for _ in range(inputs))
        used = tuple(rng.random() < 0.6 for _ in outputs)
        yield inputs, tuple(outputs), ins, outs, donated, used


def _jax_pruned(inputs, outputs, ins, outs, donated, used):
    """The jit equation real JAX's dead-code elimination leaves of the function, as
    (in specs, out specs, donated) — a spec None where the sharding is unspecified — or
    None where the equation goes."""
    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import partial_eval as pe
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def sharding(axis):
        return None if axis is None else jax.NamedSharding(mesh, jax.P(axis))

    def body(*xs):
        out = []
        for kind, what in outputs:
            if kind == "forward":
                out.append(xs[what])
            elif kind == "sum":
                total = xs[what[0]]
                for i in what[1:]:
                    total = total + xs[i]
                out.append(total * 2)
            else:
                out.append(jnp.zeros((8,), jnp.float32))
        return tuple(out)

    inner = jax.jit(body, in_shardings=tuple(map(sharding, ins)),
                    out_shardings=tuple(map(sharding, outs)),
                    donate_argnums=tuple(i for i, d in enumerate(donated) if d))
    args = [jax.ShapeDtypeStruct((8,), jnp.float32)] * inputs
    closed = jax.make_jaxpr(lambda *xs: inner(*xs))(*args)
    pruned, _ = pe.dce_jaxpr(closed.jaxpr, list(used))
    found = [e for e in pruned.eqns if e.primitive.name in ("jit", "pjit")]
    if not found:
        return None

    def spec(s):
        return tuple(s.spec) if isinstance(s, jax.NamedSharding) else None

    params = found[0].params
    return (tuple(map(spec, params["in_shardings"])), tuple(map(spec, params["out_shardings"])),
            tuple(params["donated_invars"]))


def _spec_pruned(inputs, outputs, ins, outs, donated, used):
    from shardlaw.spec import Mesh, NamedSharding, P
    from shardlaw.spec.core.shardings import UNSPECIFIED
    from shardlaw.spec.transforms.autodiff import JitBody, JitEquation
    mesh = Mesh.iota((2, 4), ("x", "y"))

    def sharding(axis):
        return UNSPECIFIED if axis is None else NamedSharding(mesh, P(axis))

    deps = [frozenset({w}) if k == "forward" else frozenset(w) if k == "sum" else frozenset()
            for k, w in outputs]
    forwarded = [w if k == "forward" else None for k, w in outputs]
    equation = JitEquation(tuple(map(sharding, ins)), tuple(map(sharding, outs)), donated)
    call = TransformedCall.of("pruned_equation", primal_equation=equation,
                              jit_body=JitBody(inputs, deps, forwarded), used_outputs=used)
    answer = ask_program(call)
    assert answer.accepted, answer.message
    if answer.result is None:
        return None

    def spec(s):
        return tuple(s.spec) if isinstance(s, NamedSharding) else None

    eq = answer.result
    return (tuple(map(spec, eq.in_shardings)), tuple(map(spec, eq.out_shardings)),
            tuple(eq.donated_invars))


def test_dce_program_prunes_a_jit_as_real_jax_does():
    # AD-8 through the program path (dce_program of the jit's program) against
    # pe.dce_jaxpr of real JAX 0.10.2, function for function
    gone = kept = 0
    for case in _dce_cases():
        expected = _jax_pruned(*case)
        assert _spec_pruned(*case) == expected, case
        gone += expected is None
        kept += expected is not None
    assert gone and kept


def _described(case):
    """The case's jitted function as a Program (describe_program: its real body)."""
    import jax
    import jax.numpy as jnp
    from shardlaw.properties.autodiff_harness import SIDE, build_jitted
    from shardlaw.spec.bridge.program import describe_program
    sharding = (jax.NamedSharding(case.mesh, jax.P(*case.arg_spec)) if case.explicit
                else None)
    arg = jax.ShapeDtypeStruct((SIDE, SIDE), jnp.float32, sharding=sharding)
    with jax.set_mesh(case.mesh):
        return describe_program(build_jitted(case), *([arg] * len(case.in_specs)))


def _signature(program):
    from shardlaw.spec.transforms.autodiff import JitEquation
    return JitEquation(program.in_shardings, program.out_shardings, program.donated)


# an input returned twice, once sharded and once unsharded (partial evaluation forwards the
# unsharded one): the staged known jit has two outputs, not three (a CI run drew it)
_TWICE = GradCase((2, 4), ("data", "model"), True, (None, None), (None,),
                  (OutputPlan("forward", (0,)), OutputPlan("forward", (0,)),
                   OutputPlan("product", (0,))),
                  ((None, None), None, (None, None)), (False,), (False,), "partial_eval",
                  (False, False, False), False, (), ())

# each outcome the coverage test below asks for, whatever the draws: an unknown jit staged
# (the product of a differentiated input; _TWICE stages none), a pruned jit staged (one
# output used) and gone (none used)
_UNKNOWN = dataclasses.replace(_TWICE, differentiated=(True,))
_PRUNED = dataclasses.replace(_TWICE, transformation="dce", used=(False, False, True))
_GONE = dataclasses.replace(_PRUNED, used=(False, False, False))


@settings(max_examples=examples(25), deadline=None)
@given(grad_cases(("partial_eval", "dce")))
@example(case=_TWICE)
@example(case=_UNKNOWN)
@example(case=_PRUNED)
@example(case=_GONE)
def test_the_program_rewrites_stage_what_real_jax_stages(case):
    # dce_program and partial_eval_program of the jitted function's real body (sines,
    # products, matmuls, sums, constants; Auto and Explicit meshes; donation) against
    # pe.dce_jaxpr and pe.partial_eval_jaxpr_nounits of JAX 0.10.2; and the program form
    # of partially_evaluated (a stand-in body with the JitBody's residuals) against both
    from shardlaw.properties.autodiff_harness import NAME, trace
    from shardlaw.spec.bridge.autodiff import equation_from_jax, jit_body_of, jit_equations
    from shardlaw.spec.program.partial_eval import dce_program, partial_eval_program
    eqn, transformed = trace(case)
    found = [equation_from_jax(e) for jaxpr in transformed for e in jit_equations(jaxpr, NAME)]
    program = _described(case)
    if case.transformation == "dce":
        pruned, _ = dce_program(program, case.used)
        assert found == ([] if pruned is None else [_signature(pruned)])
        hits.record(REWRITES, "AD-8", refused=not found)   # the jit staged, or gone
        return
    split = partial_eval_program(program, case.differentiated)
    assert found == [_signature(split.known)] + (
        [] if split.unknown is None else [_signature(split.unknown)])
    primal, body = equation_from_jax(eqn), jit_body_of(eqn, case.differentiated, "partial_eval")
    call = TransformedCall.of("partially_evaluated", primal_equation=primal, jit_body=body,
                              unknown_inputs=case.differentiated)
    answer = ask_program(call).result
    assert found == [answer.known] + ([] if answer.unknown is None else [answer.unknown])
    # AD-6: outputs left out of the known jit (unknown, or an input forwarded unsharded), or
    # every output kept; AD-7: an unknown jit staged, or none (as JAX staged them)
    hits.record(REWRITES, "AD-6", refused=len(found[0].out_shardings) - body.stored_residuals
                == len(primal.out_shardings))
    hits.record(REWRITES, "AD-7", refused=len(found) < 2)


def test_every_rule_of_the_program_rewrites_was_seen_on_both_sides():
    """Runs after the property above: each outcome of AD-6 (outputs left out of the known
    jit, or none), AD-7 (an unknown jit staged, or none) and AD-8 (the pruned jit staged,
    or gone), seen from dce_program and partial_eval_program against real JAX."""
    counts = hits.counts(REWRITES)
    missing = [(rule_id, counts.get(rule_id, (0, 0))) for rule_id in ("AD-6", "AD-7", "AD-8")
               if not all(counts.get(rule_id, (0, 0)))]
    assert not missing, f"rule outcomes not seen against JAX: {missing}"


@settings(max_examples=examples(25), deadline=None)
@given(grad_cases(("linearize", "vjp", "grad", "value_and_grad")))
def test_the_linearized_and_transposed_forms_stage_what_real_jax_stages(case):
    # the program forms of linearized_equations, linearized_primal and transposed_equation
    # (a stand-in body saving the JitBody's residuals, under linearize_program or
    # vjp_program) against the jit equations real JAX stages, and against the old answers
    from shardlaw.properties.autodiff_harness import GRADS, NAME, _mode, trace
    from shardlaw.spec.bridge.autodiff import equation_from_jax, jit_body_of, jit_equations
    eqn, transformed = trace(case)
    found = [equation_from_jax(e) for jaxpr in transformed for e in jit_equations(jaxpr, NAME)]
    facts = dict(primal_equation=equation_from_jax(eqn), nonzero_tangents=case.differentiated,
                 jit_body=jit_body_of(eqn, case.differentiated, _mode(case)))
    if case.transformation == "linearize":
        calls = [TransformedCall.of("linearized_equations", **facts)]
    else:
        used = case.used if case.transformation in GRADS else (True,) * len(case.outputs)
        calls = [TransformedCall.of("linearized_primal", **facts),
                 TransformedCall.of("transposed_equation", cotangent_outputs=used, **facts)]
    answers = []
    for call in calls:
        try:
            answer = ask_program(call)
        except NoProgramForm as why:   # a residual passed on that is a moving input
            assert "residuals passed on" in str(why)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert old_differences(explain_transformed(call), answer) == []
        answers.append(answer.result)
    if case.transformation == "linearize":
        staged = [answers[0].primal, answers[0].tangent]
    else:
        staged = answers
    assert found == [e for e in staged if e is not None]


def test_explain_transformed_answers_through_the_program_path(monkeypatch):
    # a thin layer: where a question has a program form (all of them: ANSWERED_PER_EQUATION
    # is empty)
    # and its arguments pass the function's checks, the answer is the program path's; the
    # trace stays the per-equation rules' (what the stored transformed-call vectors record)
    from shardlaw.spec import Mesh
    from shardlaw.spec.transforms import transformed
    from shardlaw.spec.transforms.transformed import ANSWERED_PER_EQUATION, TransformedVerdict
    call = TransformedCall.of("collective_groups", mesh=Mesh.iota((2, 4), ("x", "y")),
                              collective_axes=("y",), manual_axes=frozenset())
    asked = []

    def program_path(question):
        asked.append(question)
        return TransformedVerdict(True, ("PROG-1",), result="from the program path")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        real = explain_transformed(call)
        assert real.result == ask_program(call).result == ((0, 1, 2, 3), (4, 5, 6, 7))
        monkeypatch.setattr(transformed, "PROGRAM_PATH", [program_path])
        thin = explain_transformed(call)
        assert (thin.result, thin.trace) == ("from the program path", real.trace)
        assert "SMAP-14" in thin.trace and asked == [call]
        refused = TransformedCall.of("collective_groups", mesh=Mesh.iota((2, 4), ("x", "y")),
                                     collective_axes=("q",), manual_axes=frozenset())
        assert explain_transformed(refused).rule == ask_program(refused).rule == "SMAP-13"
        assert asked == [call]   # a call its function refuses is answered by the refusal
        explain_transformed(TransformedCall.of(
            "place_argument", value_kind="int", shape=(), int_value=7))
        assert asked == [call]   # no program form: its function answers
    assert set(ANSWERED_PER_EQUATION) <= set(PROGRAM_FUNCTIONS)
    assert not ANSWERED_PER_EQUATION   # vmap_jit too answers through the program path


# --------------------------------------------------------------------------- vmap_jit

def _vmap_question(shardings, results, shapes, ranks, v, result_axes, context):
    return TransformedCall.of(
        "vmap_jit", arg_shardings=list(shardings), result_shardings=list(results),
        arg_shapes=list(shapes), result_ranks=list(ranks), in_axes=v.in_axes,
        result_axes=result_axes, axis_size=v.axis_size, spmd_axis_name=v.spmd_axis_name,
        context_mesh=context)


def _program_path_vmap(case):
    """The batched jit equation the program path gives for the BAT harness's case (the
    inner vmap's question, then the outer one's on its answer, as the harness asks
    vmap_jit), or its refusal."""
    from shardlaw.properties import batching_harness as bat_h
    shapes, v = bat_h.inner_shapes(case), case.inner
    answer = ask_program(_vmap_question(
        case.arg_shardings, case.result_shardings, shapes, case.result_ranks, v,
        bat_h._result_axes(case.sources, v.in_axes, shapes), case.context_mesh))
    if case.outer is None or not answer.accepted:
        return answer
    full, o = bat_h.outer_shapes(case), case.outer
    ranks = tuple(r + (s is not None and v.in_axes[s] is not None)
                  for r, s in zip(case.result_ranks, case.sources))
    return ask_program(_vmap_question(
        answer.result.in_shardings, answer.result.out_shardings, full, ranks, o,
        bat_h._result_axes(case.sources, o.in_axes, full), case.context_mesh))


def _vmap_cases():
    from shardlaw.properties.batching_harness import Vmap, VmapCase
    from shardlaw.spec import AxisType, Mesh, NamedSharding, P
    explicit = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    auto = Mesh.iota((8,), ("x",))
    whole = NamedSharding(explicit, P())
    return {
        # a nested vmap of a jit over an Explicit mesh, the inner batch of 3 split over
        # 'x' (2 ways) unevenly: JAX binds the batched jit unchecked
        "nested-explicit-uneven": VmapCase((0,), (whole,), (0,), (whole,),
                                           Vmap((0,), 0, None, "x"), batch=3,
                                           outer=Vmap((0,), 0, None)),
        # a sharding of more dimensions than the example (the question alone)
        "explicit-uneven": VmapCase((1,), (NamedSharding(explicit, P("y")),), (0,),
                                    (UNSPEC,), Vmap((0,), 0, None, "x"), batch=3),
        # an abstract mesh's batch dimension left UNCONSTRAINED (BAT-2)
        "abstract-unconstrained": VmapCase((1,), (NamedSharding(auto.abstract, P("x")),),
                                           (None,), (UNSPEC,), Vmap((0,), 0, None)),
        # the refusing side: the spmd axis already splits the argument (BAT-4)
        "spmd-axis-in-use": VmapCase((1,), (NamedSharding(explicit, P("x")),), (0,),
                                     (UNSPEC,), Vmap((0,), 0, None, "x"),
                                     outer=Vmap((0,), 0, None)),
    }


from shardlaw.spec import UNSPECIFIED as UNSPEC  # noqa: E402 - the cases' unspecified leaf


@pytest.mark.parametrize("name", sorted(_vmap_cases()))
def test_vmap_jit_through_the_program_path_is_what_real_jax_binds(name):
    """vmap_jit answered by the program path (explain_transformed's thin layer): the
    batched jit equation JAX's jaxpr holds, or JAX's refusal, also where the batched
    shardings are not ones jax.jit would take for the batched values (an uneven batch
    over the spmd axes, nested over an Explicit mesh; BAT-2's UNCONSTRAINED), which the
    program's own call would refuse (FIT-1, JIT-2)."""
    from shardlaw.properties import batching_harness as bat_h
    case = _vmap_cases()[name]
    theirs = bat_h.run_in_jax(case)
    answer = _program_path_vmap(case)
    old = bat_h.spec_answer(case)
    if theirs.error is None:
        assert answer.accepted, answer.message
        assert (answer.result.in_shardings, answer.result.out_shardings) == theirs.shardings
        assert old.shardings == theirs.shardings
    else:
        assert not answer.accepted and answer.rule == old.error.failure.rule == "BAT-4"
        assert answer.jax_error in {c.__name__ for c in type(theirs.error).__mro__}
    assert name == "spmd-axis-in-use" or theirs.error is None
