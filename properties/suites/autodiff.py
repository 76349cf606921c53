"""The AD rules against real JAX: the jit equations that jvp, linearize, vjp and grad stage.

``test_ad_equations_agree_with_jax`` draws jitted functions with shardings and donation
(:func:`grad_cases`), differentiates them in JAX and compares every ``jit`` equation JAX
stages with the spec's. The pinned examples below reach each rule's two outcomes on purpose,
on Auto and Explicit meshes; the engine's ``jit`` stands in for ``jax.jit`` in a gradient step
(the same equations, the same values); the coverage test at the end requires every AD rule
to have been seen on both sides against JAX.

Part of the ``transforms`` suite of ``shardlaw campaign``; ``tests/test_autodiff.py`` runs
it in the project's own ``pytest`` run.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import shardlaw.engine as engine
import shardlaw.spec as S
from shardlaw.properties.autodiff_harness import (
    NAME, GradCase, OutputPlan, ad_hit_counts, build_jitted, compare_case, grad_cases, hit,
    trace,
)
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples
from shardlaw.spec import UNSPECIFIED, Mesh, NamedSharding, P, Rejection
from shardlaw.spec.transforms.autodiff import (
    JitBody, JitEquation, jvp_equation, linearized_primal, linearized_tangent, nonzero_outputs,
    transposed_equation,
)
from shardlaw.spec.bridge.autodiff import equation_from_jax, jit_body_of, jit_equations

AD_RULES = [f"AD-{n}" for n in range(9)]

MLP_MESH = ((2, 4), ("data", "model"))


def _agree(case):
    problems = compare_case(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"


@checks(*AD_RULES)
@given(grad_cases())
def test_ad_equations_agree_with_jax(case):
    _agree(case)


@settings(max_examples=examples(25))
@given(grad_cases(("grad", "value_and_grad", "vjp", "jvp")))
def test_the_engine_s_jit_stages_what_the_spec_says(case):
    """shardlaw.engine.jit in place of jax.jit: the same equations (drawn cases)."""
    problems = compare_case(case, engine.jit)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"


# --------------------------------------------------------------------------- pinned examples

def _case(outputs, out_specs, transformation, differentiated, *, in_specs=None, used=None,
          donated=None, explicit=False):
    k = len(differentiated)
    return GradCase((2, 4), ("data", "model"), explicit, ("data", None),
                    in_specs or (("data", None),) * k, tuple(outputs), tuple(out_specs),
                    donated or (False,) * k, tuple(differentiated), transformation,
                    used or (True,) * len(outputs))


FORWARD_AND_SCALAR = [OutputPlan("scalar", (0,)), OutputPlan("forward", (1,))]


@checks("AD-2", "AD-1")
@pytest.mark.parametrize("explicit", [False, True])
def test_jvp_with_and_without_non_zero_tangents(explicit):
    outputs = [OutputPlan("product", (0,)), OutputPlan("constant", ())]
    _agree(_case(outputs, [None, None], "jvp", (True, False), donated=(True, True),
                 explicit=explicit))
    _agree(_case(outputs, [None, None], "jvp", (False, False), explicit=explicit))


@checks("AD-3")
@pytest.mark.parametrize("transformation", ["linearize", "vjp", "grad"])
def test_a_forwarded_output_leaves_the_primal_equation_unless_it_has_an_out_sharding(
        transformation):
    for out_spec in (None, (None, "model")):
        _agree(_case(FORWARD_AND_SCALAR, [(), out_spec], transformation, (True, True)))


@checks("AD-4")
def test_no_tangent_equation_without_a_non_zero_output():
    outputs = [OutputPlan("scalar", (1,))]
    _agree(_case(outputs, [()], "linearize", (True, False)))   # staged
    _agree(_case(outputs, [()], "linearize", (False, True)))   # output 0 ignores input 1: none


@checks("AD-5")
@pytest.mark.parametrize("explicit", [False, True])
def test_no_transposed_equation_without_a_used_non_zero_output(explicit):
    outputs = [OutputPlan("scalar", (0,)), OutputPlan("product", (1,))]
    for used in [(True, False), (False, True), (True, True)]:
        _agree(_case(outputs, [(), None], "grad", (True, False), used=used, explicit=explicit))


@checks("AD-4", "AD-5")
def test_donated_tangents_and_cotangents():
    """A donated input's tangent is donated too (JVP, tangent equation); cotangents never are."""
    outputs = [OutputPlan("matmul", (0, 1)), OutputPlan("scalar", (1,))]
    for transformation in ("jvp", "linearize", "vjp", "grad"):
        _agree(_case(outputs, [("data", "model"), ()], transformation, (True, True),
                     in_specs=(("data", None), (None, "model")), donated=(False, True)))


@checks("AD-6", "AD-7")
@pytest.mark.parametrize("explicit", [False, True])
def test_partial_evaluation_splits_known_from_unknown(explicit):
    """Nothing unknown (a forwarded output still leaves), everything unknown (an empty known
    equation is staged), and a mix with a residual."""
    outputs = [OutputPlan("scalar", (0,)), OutputPlan("product", (0, 1)),
               OutputPlan("forward", (1,))]
    for unknown in [(False, False), (True, True), (False, True), (True, False)]:
        _agree(_case(outputs, [(), None, None], "partial_eval", unknown, donated=(False, True),
                     explicit=explicit))
    # every output known and none forwarded: the known equation keeps them all
    _agree(_case(outputs[:2], [(), None], "partial_eval", (False, False), explicit=explicit))


@checks("AD-8")
def test_dead_code_elimination_keeps_used_outputs_and_the_inputs_they_need():
    outputs = [OutputPlan("scalar", (0,)), OutputPlan("product", (0, 1)),
               OutputPlan("constant", ())]
    for used in [(True, False, False), (False, True, True), (False, False, True),
                 (False, False, False)]:
        _agree(_case(outputs, [(), None, None], "dce", (False, False), used=used,
                     donated=(True, False)))


# --------------------------------------------------------------------------- AD-0

BAD = [
    (lambda: JitEquation((UNSPECIFIED, "x"), ()), TypeError, "in_shardings"),
    (lambda: JitEquation((UNSPECIFIED,), (), (1,)), TypeError, "donated_invars"),
    (lambda: JitEquation((UNSPECIFIED,), (), (True, False)), TypeError, "donated_invars"),
    (lambda: JitBody(-1, []), TypeError, "inputs"),
    (lambda: JitBody(1, [{0}], forwarded=[1]), TypeError, "forwarded"),
    (lambda: JitBody(2, [{0, 1}], forwarded=[0]), ValueError, "forwarded[0]"),
    (lambda: JitBody(1, [{0}], residuals=1, stored_residuals=2), TypeError, "stored_residuals"),
    (lambda: JitBody(1, [{0}], residuals=1, residual_uses=[{1}]), TypeError, "residual_uses[0]"),
    (lambda: nonzero_outputs(JitBody(1, [{0}]), (1,)), TypeError, "nonzero_tangents"),
    (lambda: jvp_equation(JitEquation((UNSPECIFIED,), ()), JitBody(2, []), (True, True)),
     ValueError, "jit_body"),
    (lambda: transposed_equation(JitEquation((UNSPECIFIED,), ()), JitBody(1, []), (True,),
                                 (True,)), TypeError, "cotangent_outputs"),
    (lambda: linearized_tangent("eqn", JitBody(1, []), (True,)), TypeError, "primal_equation"),
]


@checks("AD-0")
@pytest.mark.parametrize("make, error, parameter", BAD)
def test_ill_formed_descriptions_are_refused_naming_the_parameter(make, error, parameter):
    with pytest.raises(Rejection) as caught:
        make()
    assert caught.value.rule == "AD-0" and isinstance(caught.value, error)
    assert str(caught.value).startswith("[AD-0]: ") and parameter in str(caught.value)
    hit("AD-0", True)


# --------------------------------------------------------------------------- the engine

ENGINE_CASES = [
    _case(FORWARD_AND_SCALAR, [(), None], "grad", (True, True),
          in_specs=(("data", None), (None, "model"))),
    _case([OutputPlan("matmul", (0, 1)), OutputPlan("scalar", (0, 1))], [("data", "model"), ()],
          "grad", (True, False), in_specs=(("data", None), (None, "model")), used=(True, True)),
    _case([OutputPlan("scalar", (0,)), OutputPlan("product", (0, 1))], [(), ("data", None)],
          "vjp", (True, True), explicit=True),
]


def _values(case, jit):
    """Run the case's gradient (or vjp) step on real arrays through ``jit``."""
    mesh = case.mesh
    jitted = build_jitted(case, jit)
    rng = np.random.default_rng(0)
    xs = [jax.device_put(rng.standard_normal((8, 8), np.float32), jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(*(spec or case.arg_spec)))) for spec in case.in_specs]
    chosen = [i for i, d in enumerate(case.differentiated) if d]

    def loss(*diffed):
        full = list(xs)
        for i, value in zip(chosen, diffed):
            full[i] = value
        return sum(r.sum() for r in jitted(*full))
    step = jax.grad(loss, argnums=tuple(range(len(chosen))))
    if case.explicit:  # eager work on Explicit shardings needs the mesh in context
        with jax.set_mesh(mesh):
            grads = step(*[xs[i] for i in chosen])
    else:
        grads = step(*[xs[i] for i in chosen])
    return [(np.asarray(g), g.sharding) for g in grads]


@pytest.mark.parametrize("case", ENGINE_CASES)
def test_the_engine_stages_the_same_equations_and_gives_the_same_gradients(case):
    assert not compare_case(case, engine.jit)
    ours = [equation_from_jax(e) for e in jit_equations(trace(case, engine.jit)[1][0], NAME)]
    theirs = [equation_from_jax(e) for e in jit_equations(trace(case, jax.jit)[1][0], NAME)]
    assert ours == theirs
    case = dataclasses.replace(case, donated=(False,) * len(case.donated))
    for (mine, my_sharding), (real, real_sharding) in zip(_values(case, engine.jit),
                                                          _values(case, jax.jit)):
        np.testing.assert_allclose(mine, real, rtol=1e-5)
        assert my_sharding == real_sharding


def test_eager_grad_under_a_context_mesh_meets_the_out_sharding_in_the_backward_pass():
    """AD-5 seen from outside: the transposed call takes the cotangent in the out_sharding.

    Eagerly, under ``jax.set_mesh``, the cotangent of ``.sum()`` is a committed replicated
    array; the transposed jit asks for ``P('data', 'model')`` and refuses it, in JAX and in
    the engine alike (without the context mesh it is uncommitted, and moves).
    """
    case = ENGINE_CASES[1]
    for jit in (jax.jit, engine.jit):
        jitted = build_jitted(dataclasses.replace(case, outputs=case.outputs[:1],
                                                  out_specs=case.out_specs[:1]), jit)
        mesh = case.mesh
        a = jax.device_put(np.ones((8, 8), np.float32),
                           jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))
        b = jax.device_put(np.ones((8, 8), np.float32), jax.sharding.NamedSharding(
            mesh, jax.sharding.PartitionSpec(None, "model")))
        step = jax.grad(lambda x: jitted(x, b)[0].sum())
        assert step(a).sharding.spec == jax.sharding.PartitionSpec("data", None)
        with jax.set_mesh(mesh), pytest.raises(ValueError, match="does not match"):
            step(a)


@checks("AD-5")
@pytest.mark.parametrize("jit", [jax.jit, engine.jit], ids=["jax", "engine"])
def test_a_reduced_input_keeps_its_reduced_in_sharding_as_its_cotangent_out_sharding(jit):
    """Explicit mesh, ``w`` jitted with ``P(None, None, reduced={'data'})``: the transposed
    equation returns ``w``'s cotangent with that in_sharding verbatim (AD-5) although the
    cotangent's type is unreduced over ``data``. Under an outer jit the gradient comes back
    unreduced; eagerly, JAX refuses the reduced result (ValueError)."""
    mesh = jax.make_mesh(*MLP_MESH, axis_types=(jax.sharding.AxisType.Explicit,) * 2)

    def named(*spec, **reductions):
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec, **reductions))

    def loss(w, x):
        return (x @ w).sum()

    reduced = named(None, None, reduced={"data"})
    jitted = jit(loss, in_shardings=(reduced, named("data", None)))
    w = jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=reduced)
    x = jax.ShapeDtypeStruct((64, 16), jnp.float32, sharding=named("data", None))
    with jax.set_mesh(mesh):
        plain = jax.make_jaxpr(jitted)(w, x)
        staged = jax.make_jaxpr(jax.grad(jitted))(w, x)
    (eqn,) = jit_equations(plain, "loss")
    body = jit_body_of(eqn, (True, False), "vjp")
    primal = equation_from_jax(eqn)
    back = transposed_equation(primal, body, (True, False), (True,))
    found = jit_equations(staged, "loss")
    assert [equation_from_jax(e) for e in found] == [linearized_primal(primal, body, (True, False)),
                                                     back]
    assert back.out_shardings == (S.from_jax(reduced),)
    assert found[1].outvars[0].aval.sharding.spec.unreduced == frozenset({"data"})
    hit("AD-5", False)
    with jax.set_mesh(mesh):
        wv = jax.device_put(np.ones((16, 8), np.float32), reduced)
        xv = jax.device_put(np.ones((64, 16), np.float32), named("data", None))
        assert jax.jit(jax.grad(jitted))(wv, xv).sharding.spec.unreduced == frozenset({"data"})
        with pytest.raises(ValueError, match="cotangent"):
            jax.grad(jitted)(wv, xv)


# --------------------------------------------------------------------------- the MLP of the docs

def _mlp_step():
    """A 2-layer MLP loss, jitted with data-parallel inputs and model-parallel weights."""
    mesh = jax.make_mesh(*MLP_MESH, axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def named(*spec):
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))

    def mlp_loss(w1, w2, x, y):
        hidden = jnp.tanh(x @ w1)
        return ((hidden @ w2 - y) ** 2).mean()

    jitted = jax.jit(mlp_loss, in_shardings=(named(None, "model"), named("model", None),
                                             named("data", None), named("data", None)),
                     out_shardings=named(), donate_argnums=(0, 1))
    args = [jax.ShapeDtypeStruct(shape, jnp.float32)
            for shape in ((16, 32), (32, 8), (64, 16), (64, 8))]
    return mesh, jitted, args


@checks("AD-3", "AD-5")
def test_the_mlp_gradient_of_the_docs():
    _, jitted, args = _mlp_step()
    plain = jax.make_jaxpr(jitted)(*args)
    grads = jax.make_jaxpr(jax.grad(jitted, argnums=(0, 1)))(*args)
    (eqn,) = jit_equations(plain, "mlp_loss")
    nonzero = (True, True, False, False)
    body = jit_body_of(eqn, nonzero, "vjp")
    primal = equation_from_jax(eqn)
    want = [linearized_primal(primal, body, nonzero),
            transposed_equation(primal, body, nonzero, (True,))]
    assert [equation_from_jax(e) for e in jit_equations(grads, "mlp_loss")] == want
    mesh = Mesh.iota(*MLP_MESH)
    assert want[1].out_shardings == (NamedSharding(mesh, P(None, "model")),
                                     NamedSharding(mesh, P("model", None)))
    assert want[1].in_shardings[-1] == NamedSharding(mesh, P())
    assert set(want[1].in_shardings[:-1]) == {UNSPECIFIED}
    # the facts the page writes down
    assert body == JitBody(inputs=4, dependencies=[{0, 1, 2, 3}], residuals=5, stored_residuals=3)
    assert want[0].donated_invars == (True, True, False, False)


def test_the_example_function_of_the_docs():
    """``f(a, b) = (sin(a).sum(), cos(a) * b, b)``: the facts the page gives are JAX's, and so
    are the equations it derives from them."""
    mesh = jax.make_mesh(*MLP_MESH, axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def named(*spec):
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))

    def f(a, b):
        return jnp.sin(a).sum(), jnp.cos(a) * b, b

    jitted = jax.jit(f, in_shardings=(named("data"), named(None, "model")),
                     out_shardings=(named(), named(None, "model"), None), donate_argnums=1)
    arg = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    (eqn,) = jit_equations(jax.make_jaxpr(jitted)(arg, arg), "f")
    deps = dict(inputs=2, dependencies=[{0}, {0, 1}, {1}], forwarded=[None, None, 1])
    linear = JitBody(**deps, residuals=4, stored_residuals=3, residual_uses=[{0}, {1, 2, 3}, set()])
    assert jit_body_of(eqn, (True, True), "vjp") == linear
    assert jit_body_of(eqn, (True, True), "linearize") == linear
    partial = jit_body_of(eqn, (False, True), "partial_eval")
    assert (partial.residuals, partial.stored_residuals) == (1, 1)
    primal = equation_from_jax(eqn)
    for used in [(True, False, False), (False, True, False)]:
        staged = jax.make_jaxpr(jax.grad(
            lambda a, b: sum(r.sum() for r, u in zip(jitted(a, b), used) if u),
            argnums=(0, 1)))(arg, arg)
        want = [linearized_primal(primal, linear, (True, True)),
                transposed_equation(primal, linear, (True, True), used)]
        assert [equation_from_jax(e) for e in jit_equations(staged, "f")] == want


# --------------------------------------------------------------------------- coverage

def test_every_ad_rule_was_seen_on_both_sides_against_jax():
    """Runs after the tests above (file order): each rule's two outcomes were met."""
    hits = ad_hit_counts()
    print("AD hits [first outcome, second outcome]:", hits)
    missing = [(r, hits.get(r, (0, 0))) for r in AD_RULES if min(hits.get(r, (0, 0))) == 0]
    assert not missing, f"rules not seen on both sides: {missing} (hits: {hits})"
