"""A call JAX refuses inside a ``custom_jvp``'s rule, which it traces only under AD (issue
32), against JAX 0.10.2 on 8 CPU devices.

JAX traces a custom_jvp's rule where ``jax.grad`` (or ``jvp``) reaches the call, over the
primals and AD's tangents, and refuses a call in it there: a constraint on a tangent that
does not fit it (WSC-4), an inner jit whose in_shardings do not fit a tangent (FIT-1), an
elementwise operation on tangents split apart or a matmul contracting dimensions split
differently over Explicit axes (PROG-8, PROG-7). ``describe_program`` re-raised JAX's own
error, and ``grad_program`` of the function's description differentiated the call by its
primal body (the rule, which JAX failed to trace, unread) and accepted. The bridge now
reads such a rule up to the refused call (``rule_refused``,
spec/bridge/refusals.py's ``describe_refused_rule``), and the spec's AD refuses it where
it calls the rule (spec/program/custom_rules.py's ``refuse_traced_rule``), at
``<the call's path>.custom_jvp.rule.body[k]``; ``describe_program`` of ``jax.grad`` (or of
``jax.jvp`` of a jit) refuses by that rewrite, as it refuses a cotangent's type (AD-13).
Each is held to JAX on both sides: the same rule over a split JAX accepts is accepted
alike.

And the rules AD calls as JAX calls them: a jit inside a rule, reading a primal and a
tangent, split in a known and a tangent jit; a rule, a ``fwd`` and a ``bwd`` closing over
an array inlined with its constant; a rule taking symbolic zeros read for the inputs
without a tangent (each was the primal body, or AD-0).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import grad_program, jvp_program

from test_steps_arguments import NS, P, held_to_jax, mesh

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def custom(tangent):
    """``sin`` as a custom_jvp function whose rule's tangent is ``tangent(x, t)``."""
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    @f.defjvp
    def rule(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), tangent(x, t)
    return f


def loss(tangent):
    return lambda x: custom(tangent)(x).sum()


def _constrained(spec):
    return lambda x, t: jax.lax.with_sharding_constraint(jnp.cos(x) * t, NS(mesh(), spec))


def _inner_jit(spec):
    return lambda x, t: jnp.cos(x) * jax.jit(lambda v: v * 2.0,
                                             in_shardings=NS(mesh(), spec))(t)


def _auto(spec):
    del spec
    return np.ones((8, 8), np.float32)


def _explicit(spec):
    return jax.device_put(np.ones((8, 8), np.float32), NS(EXPLICIT, spec))


# name: (the rule's tangent of a split, the input of a split, the split refused, the split
# accepted, JAX's class, the rule, the refused equation's path in grad_program's program)
CASES = {
    "constraint-on-a-tangent": (
        _constrained, _auto, P(None, None, None), P("x", "y"), "ValueError", "WSC-4",
        "body[0].jit.body[0].custom_jvp.rule.body[3]"),
    "inner-jit-in_shardings-on-a-tangent": (
        _inner_jit, _auto, P(None, None, None), P("x"), "ValueError", "FIT-1",
        "body[0].jit.body[0].custom_jvp.rule.body[2].jit.in_shardings[0]"),
    "tangents-added-split-apart": (
        lambda spec: lambda x, t: jnp.cos(x) * t + t.T, _explicit, P("x", "y"),
        P(None, None), "ShardingTypeError", "PROG-8",
        "body[0].jit.body[0].custom_jvp.rule.body[4].jit.body[0]"),
    "tangent-matmul-contracting-splits-that-differ": (
        lambda spec: lambda x, t: jnp.cos(x) * (t @ x), _explicit, P("x", "y"),
        P(None, None), "ShardingTypeError", "PROG-7",
        "body[0].jit.body[0].custom_jvp.rule.body[2].jit.body[0]"),
}


def _case(name, refused):
    tangent, put, bad, good, *_ = CASES[name]
    spec = bad if refused else good
    return loss(tangent(spec)), put(spec)


@checks("WSC-4", "FIT-1", "PROG-7", "PROG-8")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_call_jax_refuses_in_a_custom_jvp_rule_under_grad_is_refused_by_its_rule(name):
    """JAX refuses while tracing the rule under grad; describe_program of the gradient and
    grad_program of the loss's description refuse by the rule JAX's check is, at the trace
    stage, with JAX's class, at the refused equation inside the custom call's rule."""
    fun, x = _case(name, refused=True)
    error, rule, path = CASES[name][4:]
    with pytest.raises(Exception) as raised:
        jax.jit(jax.grad(fun)).trace(x)
    assert type(raised.value).__name__ == error
    with pytest.raises(Rejection) as refused:
        describe_program(jax.grad(fun), x)
    got = refused.value
    assert (got.failure.rule, got.stage, got.failure.jax_error) == (rule, "trace", error)
    with pytest.raises(Rejection) as refused:
        grad_program(describe_program(fun, x))
    got = refused.value
    assert (got.failure.rule, got.stage, got.path) == (rule, "trace", path), str(got)


@checks("WSC-4", "FIT-1", "PROG-7", "PROG-8")
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_rule_over_a_split_jax_accepts_is_accepted_alike(name):
    """The same rule over a split JAX accepts: the gradient traced, compiled and run by JAX
    and accepted alike; grad_program of the loss's description accepted too."""
    fun, x = _case(name, refused=False)
    _, verdict, problems = held_to_jax(jax.grad(fun), x)
    assert not problems, problems
    assert verdict.accepted
    assert explain_program(grad_program(describe_program(fun, x))).accepted


@checks("WSC-4")
def test_the_rule_is_read_up_to_the_refused_call_and_not_called_without_ad():
    """Called without AD, JAX never traces the rule: the function is accepted by both; its
    description holds the rule read up to the refused constraint, marked refused."""
    fun, x = _case("constraint-on-a-tangent", refused=True)
    program, verdict, problems = held_to_jax(fun, x)
    assert not problems and verdict.accepted, problems
    (call,) = [eq for eq in program.equations if eq.kind == "custom_jvp_call"]
    assert call.rule_refused
    assert call.rule.equations[-1].kind == "sharding_constraint"


# name: the refused equation's path in describe_program of jax.jvp (JAX runs the rule in
# the function's own trace, over its tangents: the program as JAX traced it)
JVP_PATHS = {"constraint-on-a-tangent": "body[3]",
             "tangents-added-split-apart": "body[4].jit.body[0]"}


@checks("WSC-4", "PROG-8")
@pytest.mark.parametrize("name", sorted(JVP_PATHS))
def test_jax_jvp_refuses_the_rule_as_grad_does(name):
    """jax.jvp traces the rule as grad does (JAX's class). Of the function, JAX runs the
    rule in the function's own trace: describe_program describes it as traced up to the
    refused equation, explain_program refuses there. Of a jit, JAX traces the rule in the
    jit's JVP: describe_program refuses by the spec's jvp_program of the jit's function,
    as jvp_program of the description does, at the rule's refused equation. The split JAX
    accepts is accepted alike."""
    fun, x = _case(name, refused=True)
    error, rule = CASES[name][4:6]
    for jvp in (lambda p: jax.jvp(fun, (p,), (p,))[1],
                lambda p: jax.jvp(jax.jit(fun), (p,), (p,))[1]):
        with pytest.raises(Exception) as raised:
            jax.jit(jvp).trace(x)
        assert type(raised.value).__name__ == error
    _, verdict, problems = held_to_jax(lambda p: jax.jvp(fun, (p,), (p,))[1], x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        rule, "trace", JVP_PATHS[name], error)
    with pytest.raises(Rejection) as refused:
        describe_program(lambda p: jax.jvp(jax.jit(fun), (p,), (p,))[1], x)
    got = refused.value
    assert (got.failure.rule, got.stage, got.failure.jax_error) == (rule, "trace", error)
    assert ".custom_jvp.rule.body[" in got.path
    with pytest.raises(Rejection) as refused:
        jvp_program(describe_program(fun, x))
    assert (refused.value.failure.rule, refused.value.stage) == (rule, "trace")
    fun, x = _case(name, refused=False)
    _, verdict, problems = held_to_jax(lambda p: jax.jvp(fun, (p,), (p,))[1], x)
    assert not problems and verdict.accepted, problems


@checks("WSC-4", "PROG-8")
@pytest.mark.parametrize("name", sorted(JVP_PATHS))
def test_grad_of_a_jit_and_grad_inside_a_function_refuse_the_rule_alike(name):
    """jax.grad of a jit, and jax.grad called inside the function: JAX refuses tracing the
    rule; describe_program refuses by grad_program of the differentiated function, at the
    rule's refused equation."""
    fun, x = _case(name, refused=True)
    error, rule = CASES[name][4:6]
    for outer in (jax.grad(jax.jit(fun)), lambda p: jax.grad(fun)(p) * 2.0):
        with pytest.raises(Exception) as raised:
            jax.jit(outer).trace(x)
        assert type(raised.value).__name__ == error
        with pytest.raises(Rejection) as refused:
            describe_program(outer, x)
        got = refused.value
        assert (got.failure.rule, got.stage, got.failure.jax_error) == (rule, "trace", error)
        assert ".custom_jvp.rule.body[" in got.path


# --------------------------------------------------------------------------- a jit in a rule

def _split_rule(x):
    """A custom_jvp whose rule calls a jit over a primal and a tangent: the jit constrains
    what it computes from the primal alone, then multiplies the tangent by it."""
    @jax.custom_jvp
    def f(v):
        return jnp.sin(v)

    @f.defjvp
    def rule(primals, tangents):
        (v,), (t,) = primals, tangents
        scale = jax.jit(lambda a, b: jax.lax.with_sharding_constraint(
            jnp.cos(a), NS(mesh(), P("x", "y"))) * b)
        return f(v), scale(v, t)
    return f(x * 2.0)


@checks("AD-6", "AD-7")
@pytest.mark.parametrize("transform", ["grad", "linearize", "vjp", "jvp"])
def test_a_jit_in_a_rule_reading_a_tangent_is_split_as_jax_splits_it(transform):
    """JAX's linearization of the rule splits the jit in a known jit (the constrained
    cosine, run with the primal) and a tangent jit (the product): the spec's rewrite holds
    the constraint where JAX's does (its placing equations in JAX's order), and is accepted
    alike."""
    from test_control_flow_ad import held

    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    fun = (lambda v: _split_rule(v).sum()) if transform == "grad" else _split_rule
    verdict = held(transform, fun, x)
    assert verdict.accepted


# --------------------------------------------------------------------------- closed-over arrays

WEIGHTS = np.arange(32, dtype=np.float32).reshape(8, 4) / 7


def _jvp_closing_over_an_array(x):
    """A custom_jvp whose rule closes over a numpy array and constrains its tangent."""
    @jax.custom_jvp
    def f(v):
        return jnp.sin(v)

    @f.defjvp
    def rule(primals, tangents):
        (v,), (t,) = primals, tangents
        return f(v), jax.lax.with_sharding_constraint(t * jnp.asarray(WEIGHTS),
                                                      NS(mesh(), P("x", "y")))
    return f(x * 2.0)


def _vjp_closing_over_an_array(x):
    """A custom_vjp whose fwd and bwd close over a numpy array; bwd constrains the
    cotangent."""
    @jax.custom_vjp
    def f(v):
        return jnp.sin(v) * jnp.asarray(WEIGHTS)

    f.defvjp(lambda v: (f(v), jnp.cos(v) * jnp.asarray(WEIGHTS)),
             lambda r, g: (jax.lax.with_sharding_constraint(
                 r * g * jnp.asarray(WEIGHTS), NS(mesh(), P("x", "y"))),))
    return f(x * 2.0)


CLOSING = {"custom_jvp": (_jvp_closing_over_an_array, ("grad", "jvp", "linearize", "vjp")),
           "custom_vjp": (_vjp_closing_over_an_array, ("grad", "vjp"))}


@checks("AD-2", "AD-3", "AD-5")
@pytest.mark.parametrize("name,transform", [(n, t) for n in sorted(CLOSING)
                                            for t in CLOSING[n][1]])
def test_a_rule_closing_over_an_array_is_inlined_with_its_constant(name, transform):
    """A rule (or fwd and bwd) closing over an array was differentiated by the call's
    primal body; its constant is now the enclosing body's, as JAX traces the rule inline:
    the rule's constraint is where JAX's is, and the rewrite is accepted alike."""
    from test_control_flow_ad import held

    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    body = CLOSING[name][0]
    program = describe_program(body, x)
    (call,) = [eq for eq in program.equations if eq.kind.startswith("custom_")]
    rules = (call.rule,) if name == "custom_jvp" else (call.fwd, call.bwd)
    assert all(rule.consts for rule in rules)
    fun = (lambda v: body(v).sum()) if transform == "grad" else body
    assert held(transform, fun, x).accepted


# --------------------------------------------------------------------------- symbolic zeros

def _symbolic(x, y):
    """A custom_jvp of two inputs whose rule takes symbolic zeros: the tangent of each
    input given, the first's constrained."""
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_jvp
    def f(a, b):
        return jnp.sin(a) * b

    def rule(primals, tangents):
        (a, b), (ta, tb) = primals, tangents
        parts = []
        if type(ta) is not SymbolicZero:
            parts.append(jax.lax.with_sharding_constraint(jnp.cos(a) * b * ta,
                                                          NS(mesh(), P("x", "y"))))
        if type(tb) is not SymbolicZero:
            parts.append(jnp.sin(a) * tb)
        return f(a, b), sum(parts[1:], parts[0])

    f.defjvp(rule, symbolic_zeros=True)
    return f(x * 2.0, y)


def _equinox(x, y):
    """equinox's filter_custom_jvp (a rule taking symbolic zeros: None for no tangent)."""
    import equinox as eqx

    @eqx.filter_custom_jvp
    def f(a, b):
        return jnp.sin(a) * b

    @f.def_jvp
    def rule(primals, tangents):
        (a, b), (ta, tb) = primals, tangents
        parts = [] if ta is None else [jax.lax.with_sharding_constraint(
            jnp.cos(a) * b * ta, NS(mesh(), P("x", "y")))]
        parts += [] if tb is None else [jnp.sin(a) * tb]
        return f(a, b), sum(parts[1:], parts[0])
    return f(x * 2.0, y)


@checks("AD-3", "AD-5")
@pytest.mark.parametrize("make", [_symbolic, _equinox], ids=["jax", "equinox"])
@pytest.mark.parametrize("argnums", [0, 1])
def test_a_rule_taking_symbolic_zeros_is_the_one_traced_for_the_inputs_differentiated(
        make, argnums):
    """grad with respect to one of two inputs: JAX calls the rule with a symbolic zero for
    the other; the spec reads the rule traced for each set of inputs without a tangent
    (it was refused, AD-0) and differentiates by the one for those: accepted alike, the
    constraint of the first input's tangent where JAX's is (or absent, as in JAX's)."""
    from test_control_flow_ad import held

    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    y = np.full((8, 4), 2.0, np.float32)
    program = describe_program(make, x, y)
    (call,) = [eq for eq in program.equations if eq.kind == "custom_jvp_call"]
    assert call.symbolic_zeros and all(
        call.zero_rule(zeros)[2] is False for zeros in ((False, True), (True, False)))
    verdict = held("grad", lambda a, b: make(a, b).sum(), x, y, argnums=argnums)
    assert verdict.accepted


WRAPS = {
    "scan": lambda body: lambda v: jax.lax.scan(lambda c, _: (body(c), None), v, None,
                                                length=2)[0],
    "cond": lambda body: lambda v: jax.lax.cond(v.sum() > 0, body, lambda c: c, v),
    "remat": jax.checkpoint,
}


@checks("AD-3", "AD-5")
@pytest.mark.parametrize("name", sorted(CLOSING))
@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_rule_closing_over_an_array_in_a_loop_cond_or_remat_body(name, wrap):
    """The same calls in a scan's, a cond's branch's or a remat's body, under grad: their
    constants are the body's as it is differentiated (a remat's recomputing body holds
    them, and its transpose reads them), accepted alike, the constraints where JAX's
    are."""
    from test_control_flow_ad import held

    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    fun = WRAPS[wrap](CLOSING[name][0])
    assert held("grad", lambda v: fun(v).sum(), x).accepted


@checks("AD-0")
def test_a_rule_jax_refuses_in_a_way_not_described_is_not_differentiated_by_the_primal_body():
    """A rule branching in Python on a traced value: JAX refuses tracing it under grad
    (ConcretizationTypeError), in a way the spec does not describe. The spec no longer
    differentiates the call by its primal body (an acceptance JAX does not make): its
    rewrite says it does not rewrite it (AD-0); without AD both accept."""
    @jax.custom_jvp
    def f(v):
        return jnp.sin(v)

    @f.defjvp
    def rule(primals, tangents):
        (v,), (t,) = primals, tangents
        return f(v), (t if v.sum() > 0 else -t)

    x = np.ones((8, 4), np.float32)
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(jax.grad(lambda v: f(v).sum())).trace(x)
    program, verdict, problems = held_to_jax(f, x)
    assert not problems and verdict.accepted, problems
    (call,) = [eq for eq in program.equations if eq.kind == "custom_jvp_call"]
    assert call.rule_refused and call.rule is None
    with pytest.raises(Rejection) as refused:
        grad_program(describe_program(lambda v: f(v).sum(), x))
    assert refused.value.failure.rule == "AD-0"
    assert "JAX refuses tracing its rule" in str(refused.value)
