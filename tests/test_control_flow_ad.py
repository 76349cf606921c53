"""Control flow under AD and vmap, and custom derivatives' own rules (issue 32), against JAX 0.10.2.

A ``lax.cond``/``switch`` under ``grad``, ``jvp``, ``linearize`` and ``vjp``; a
``while_loop``/``fori_loop`` under ``vmap`` and under ``jvp`` and ``linearize``; a
``custom_jvp`` function differentiated by its own rule, a ``custom_vjp`` function by its
``fwd`` and ``bwd``. Each case is the spec's rewrite of ``describe_program`` of the
untransformed function, held to JAX's transformed function: the same refusal (stage and
class) or the same results (shardings, committedness, types, device assignment:
:func:`~shardlaw.properties.program_ad_harness.compare_rewrite`), and the same placing
equations in order, the bodies of every jit, cond, loop and custom call flattened into
the list (each constraint's, device_put's and reshard's sharding and the types it gives).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax

from jaxpr_walk import jax_kinds, jax_placing, spec_bodies, spec_placing
from shardlaw.properties.program_ad_harness import compare_rewrite, run_function
from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program
from shardlaw.spec.bridge.program import describe_program, value_type_of
from shardlaw.spec.program import (
    grad_program, jvp_program, linearize_program, vjp_program,
)
from shardlaw.spec.program.control_flow import Cond, CustomLin, Scan, While
from shardlaw.spec.program.description import Program

AUTO = (jax.sharding.AxisType.Auto,) * 2
EXPLICIT_AXES = (jax.sharding.AxisType.Explicit,) * 2
MESH = jax.make_mesh((2, 4), ("x", "y"), axis_types=AUTO)
EXPLICIT = jax.make_mesh((2, 4), ("x", "y"), axis_types=EXPLICIT_AXES)
# a mesh over half the devices: a sharding on it conflicts with the arguments' assignment
HALF = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"),
                         axis_types=AUTO)


def _on(mesh, *spec):
    return jax.sharding.NamedSharding(mesh, jax.P(*spec))


X = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4) / 7, _on(MESH, "x"))
XE = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4) / 7, _on(EXPLICIT, "x"))


# --------------------------------------------------------------------------- holding to JAX

def _jax_function(transform, f, n, argnums=0):
    jitted = jax.jit(f)
    if transform == "grad":
        return jax.jit(jax.grad(jitted, argnums))
    if transform == "jvp":
        return jax.jit(lambda *pt: jax.jvp(jitted, pt[:n], pt[n:]))
    if transform == "linearize":
        return jax.jit(lambda *pt: jax.linearize(jitted, *pt[:n])[1](*pt[n:]))
    return jax.jit(lambda *pc: jax.vjp(jitted, *pc[:n])[1](pc[n]))


def _spec_rewrite(transform, program, argnums=0):
    if transform == "grad":
        return grad_program(program, argnums)
    if transform == "jvp":
        return jvp_program(program)
    if transform == "linearize":
        return linearize_program(program).applied
    return vjp_program(program).applied


def _extra(transform, f, args):
    """The tangents (numpy ones of the inputs' types) or the cotangent (of the output's)."""
    if transform == "grad":
        return ()
    if transform == "vjp":
        out = jax.eval_shape(f, *args)
        return (np.ones(out.shape, out.dtype),)
    return tuple(np.ones(a.shape, np.float32) for a in args)


def held(transform, f, *args, argnums=0, placing=True):
    """The spec's rewrite of ``f`` under ``transform``, held to JAX's; its verdict."""
    program = describe_program(f, *args)
    fn = _jax_function(transform, f, len(args), argnums)
    given = args + _extra(transform, f, args)
    outcome = run_function(fn, given)
    problems = compare_rewrite(lambda: _spec_rewrite(transform, program, argnums), outcome,
                               equations=False)
    assert not problems, problems
    try:
        rewritten = _spec_rewrite(transform, program, argnums)
    except Rejection as error:
        return error
    if placing and outcome.stage != "trace":   # (JAX's equations, where it traces them)
        theirs = jax_placing(jax.make_jaxpr(fn)(*given).jaxpr)
        assert spec_placing(rewritten) == theirs, (spec_placing(rewritten), theirs)
    return explain_program(rewritten)


TRANSFORMS = ("grad", "jvp", "linearize", "vjp")


# --------------------------------------------------------------------------- cond

def _cond_constrained(mesh):
    def f(x):
        return lax.cond(x[0, 0] > 0,
                        lambda v: lax.with_sharding_constraint(jnp.sin(v), _on(mesh, "y")),
                        lambda v: jnp.cos(v) * 2, x)
    return f


def _loss(f):
    return lambda *a: f(*a).sum()


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("mesh, accepted", [(MESH, True), (HALF, False)],
                         ids=["same-devices", "other-devices"])
def test_a_cond_under_ad_is_one_cond_of_differentiated_branches(transform, mesh, accepted):
    """A constraint in one branch of a cond: under each transformation it is in the
    JVP's branch, the known cond's and the tangent (or transposed) cond's, as in JAX's;
    on other devices the spec refuses where JAX does (held's compare_rewrite)."""
    f = _cond_constrained(mesh)
    verdict = held(transform, _loss(f) if transform == "grad" else f, X)
    assert verdict.accepted is accepted


def _kinds(program, out=None):
    out = [] if out is None else out
    for eq in program.equations:
        out.append(getattr(eq, "primitive", eq.kind))
        for body in spec_bodies(eq):
            _kinds(body, out)
    return out


def test_grad_of_a_cond_is_a_known_cond_then_a_transposed_cond():
    program = describe_program(_loss(_cond_constrained(MESH)), X)
    grad = grad_program(program)
    assert _kinds(grad).count("cond") == 2
    assert explain_program(grad).accepted


def test_a_switch_joins_the_residuals_of_its_branches_by_type():
    """Three branches storing residuals of different types: the known cond returns one
    slot per type (and per repeat), each branch filling the slots it does not store with
    zeros; the tangent cond reads each branch's own."""
    def f(x, w):
        return lax.switch(jnp.int32(x[0, 0] > 1) + jnp.int32(x[1, 0] > 1), [
            lambda v, u: jnp.sin(v) * u.sum(),
            lambda v, u: v * jnp.tanh(u).sum(),
            lambda v, u: lax.with_sharding_constraint(v * v, _on(MESH, None, "y")) + u[0]],
            x, w)
    w = jax.device_put(np.ones((4,), np.float32), _on(MESH, "y"))
    for transform in TRANSFORMS:
        verdict = held(transform, _loss(f) if transform == "grad" else f, X, w,
                       argnums=(0, 1))
        assert verdict.accepted, (transform, verdict)
    lin = linearize_program(describe_program(f, X, w))
    (known,) = [eq for eq in lin.primal.equations if isinstance(eq, Cond)] or [
        eq for eq in lin.primal.equations[0].body.equations if isinstance(eq, Cond)]
    assert len(known.branches) == 3


def test_a_branch_without_a_tangent_returns_zeros_where_another_has_one():
    """One branch returns a constant: its tangent is a zero, instantiated as zeros in that
    branch of the JVP (and of the tangent cond) since the other branch's is not."""
    def f(x):
        return lax.cond(x[0, 0] > 0, lambda v: jnp.zeros_like(v),
                        lambda v: lax.with_sharding_constraint(v * 3, _on(MESH, "y")), x)
    for transform in TRANSFORMS:
        verdict = held(transform, _loss(f) if transform == "grad" else f, X)
        assert verdict.accepted


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_cond_over_explicit_axes_reshards_its_tangents_as_jax_does(transform):
    def f(x):
        return lax.cond(x.sum() > 0,
                        lambda v: jax.sharding.reshard(jnp.sin(v), _on(EXPLICIT, "x")),
                        lambda v: v * 2, x)
    verdict = held(transform, _loss(f) if transform == "grad" else f, XE)
    assert verdict.accepted


# --------------------------------------------------------------------------- while

def _while_constrained(mesh):
    def f(x):
        return lax.while_loop(lambda c: c.sum() < 50,
                              lambda c: lax.with_sharding_constraint(c * 2 + 1, _on(mesh, "y")),
                              x)
    return f


def _vmap_held(f, *args):
    """``describe_program`` of a vmapped function (the spec's batching of it), held to
    JAX: results, stage and class, and placing equations."""
    program = describe_program(f, *args)
    outcome = run_function(jax.jit(f), args)
    problems = compare_rewrite(lambda: program, outcome, equations=False)
    assert not problems, problems
    if outcome.stage != "trace":
        assert spec_placing(program) == jax_placing(jax.make_jaxpr(jax.jit(f))(*args).jaxpr)
    return program, explain_program(program)


BATCH = jax.device_put(np.ones((2, 8, 4), np.float32), _on(MESH, None, "x"))


@pytest.mark.parametrize("mesh, accepted", [(MESH, True), (HALF, False)],
                         ids=["same-devices", "other-devices"])
def test_vmap_of_a_while_with_a_batched_predicate_batches_every_carry(mesh, accepted):
    """Each example's own predicate: the loop's predicate gives one bool per example and
    the whole carry is batched at axis 0 (JAX selects inside the body when lowering)."""
    program, verdict = _vmap_held(jax.vmap(_while_constrained(mesh)), BATCH)
    (loop,) = [eq for eq in _walk(program) if isinstance(eq, While)]
    assert loop.cond.value_types[loop.cond.outputs[0]].shape == (2,)
    assert loop.results[0].shape == (2, 8, 4)
    assert verdict.accepted is accepted


def test_vmap_of_a_fori_loop_of_dynamic_bounds_keeps_its_counter_unbatched():
    """An unbatched predicate (the counter against an unbatched bound): the counter stays
    unbatched, the batched carry batched at axis 0."""
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, c: lax.with_sharding_constraint(
            c * 1.5, _on(MESH, "x")), x)
    program, verdict = _vmap_held(jax.vmap(f, in_axes=(0, None)), BATCH, 3)
    (loop,) = [eq for eq in _walk(program) if isinstance(eq, While)]
    assert loop.cond.value_types[loop.cond.outputs[0]].shape == ()
    assert [r.shape for r in loop.results][-1] == (2, 8, 4)
    assert verdict.accepted


def test_vmap_of_a_while_whose_body_batches_an_unbatched_carry():
    """A carry the body makes batched (added to a batched constant) is batched from the
    start: its initial value broadcast, as JAX's fixed point does."""
    def f(x, y):
        def body(c):
            i, acc = c
            return i + 1, lax.with_sharding_constraint(acc + x, _on(MESH, "x"))
        return lax.while_loop(lambda c: c[0] < 3, body, (0, y))[1]
    y = jax.device_put(np.zeros((8, 4), np.float32), _on(MESH, "x"))
    program, verdict = _vmap_held(jax.vmap(f, in_axes=(0, None)), BATCH, y)
    assert verdict.accepted


def _walk(program):
    for eq in program.equations:
        yield eq
        for body in spec_bodies(eq):
            yield from _walk(body)


@pytest.mark.parametrize("transform", ["jvp", "linearize"])
@pytest.mark.parametrize("mesh, accepted", [(MESH, True), (HALF, False)],
                         ids=["same-devices", "other-devices"])
def test_a_while_under_jvp_and_linearize_is_a_while_over_primals_and_tangents(
        transform, mesh, accepted):
    """JVP: one while over the carry and its tangent, the constraint on both; linearized:
    the known loop in the primal jit, the whole JVP loop in the tangent jit."""
    verdict = held(transform, _while_constrained(mesh), X)
    assert verdict.accepted is accepted


def test_the_jvp_of_a_while_carries_a_tangent_the_body_makes_nonzero_from_the_start():
    """A carry given no tangent (an integer counter beside a float started from a constant)
    whose next value reads a differentiated constant: its tangent starts as zeros."""
    def f(x):
        def body(c):
            i, acc = c
            return i + 1, lax.with_sharding_constraint(acc + jnp.sin(x), _on(MESH, "y"))
        return lax.while_loop(lambda c: c[0] < 3, body, (0, jnp.zeros((8, 4))))[1]
    for transform in ("jvp", "linearize"):
        assert held(transform, f, X).accepted
    jvp = jvp_program(describe_program(f, X))
    (loop,) = [eq for eq in _walk(jvp) if isinstance(eq, While)]
    assert loop.body_consts == 2 and len(loop.results) == 3


@pytest.mark.parametrize("transform", ["grad", "vjp"])
def test_a_while_under_reverse_mode_is_refused_as_jax_refuses_it(transform):
    f = _while_constrained(MESH)
    refused = held(transform, _loss(f) if transform == "grad" else f, X)
    assert (refused.failure.rule, refused.stage) == ("LOOP-2", "trace")
    assert isinstance(refused, ValueError)


# --------------------------------------------------------------------------- custom rules

def _relu_layer(x):
    return jax.nn.relu(lax.with_sharding_constraint(x * 2, _on(MESH, "y")))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_relu_is_differentiated_by_its_own_rule(transform):
    """jax.nn.relu (a custom_jvp): its rule, not its primal body, gives the tangent: a
    select between the tangent and zeros where the input is positive."""
    verdict = held(transform, _loss(_relu_layer) if transform == "grad" else _relu_layer, X)
    assert verdict.accepted


def test_the_jvp_of_relu_holds_its_rule_s_equations_as_jax_s_does():
    """The JVP's equations, jits aside (the spec's jits are its own), are JAX's: the
    primal call, the comparison, the zeros and the select of the rule."""
    program = describe_program(_relu_layer, X)
    (call,) = [eq for eq in program.equations if eq.kind == "custom_jvp_call"]
    assert call.rule is not None and call.rule_zeros == (False,)
    ours = [k for k in _kinds(jvp_program(program)) if k != "jit"]
    fn = _jax_function("jvp", _relu_layer, 1)
    theirs = [k for k in jax_kinds(jax.make_jaxpr(fn)(X, np.ones((8, 4), np.float32)).jaxpr)
              if k not in ("jit", "pjit")]
    assert ours == theirs, (ours, theirs)
    assert "select_n" in ours and ours.count("custom_jvp_call") == 1


def test_relu_under_vmap_keeps_its_rule_batched_as_jax_batches_it():
    """vmap batches relu's rule with its body (each tangent where its primal is): the JVP
    of the vmapped function is the batched rule's, equation for equation."""
    vmapped = jax.vmap(_relu_layer)
    program = describe_program(vmapped, BATCH)
    (call,) = [eq for eq in _walk(program) if eq.kind == "custom_jvp_call"]
    assert call.rule is not None and call.rule.inputs[0].shape == (2, 8, 4)
    fn = jax.jit(lambda x, t: jax.jvp(vmapped, (x,), (t,)))
    ones = np.ones((2, 8, 4), np.float32)
    problems = compare_rewrite(lambda: jvp_program(program), run_function(fn, (BATCH, ones)),
                               equations=False)
    assert not problems, problems
    theirs = jax.make_jaxpr(fn)(BATCH, ones).jaxpr
    assert spec_placing(jvp_program(program)) == jax_placing(theirs)
    assert [k for k in _kinds(jvp_program(program)) if k != "jit"] == [
        k for k in jax_kinds(theirs) if k not in ("jit", "pjit")]


def _clip(mesh):
    @jax.custom_vjp
    def clip(v):
        return v * 2

    def fwd(v):
        return clip(v), jnp.sin(v)

    def bwd(r, g):
        return (lax.with_sharding_constraint(g * r, _on(mesh, "y")),)
    clip.defvjp(fwd, bwd)
    return clip


@pytest.mark.parametrize("transform", ["grad", "vjp"])
@pytest.mark.parametrize("mesh, accepted", [(MESH, True), (HALF, False)],
                         ids=["same-devices", "other-devices"])
def test_a_custom_vjp_is_differentiated_by_its_fwd_and_bwd(transform, mesh, accepted):
    """grad and vjp of a custom_vjp function: fwd in the forward pass, bwd (and the
    constraint it holds) in the backward pass; bwd's sharding on other devices is refused
    where JAX refuses it, though the primal body holds none."""
    clip = _clip(mesh)
    verdict = held(transform, _loss(clip) if transform == "grad" else clip, X)
    assert verdict.accepted is accepted
    assert explain_program(describe_program(clip, X)).accepted


@checks("LOOP-3")
@pytest.mark.parametrize("transform", ["jvp", "linearize"])
def test_loop_3_forward_mode_of_a_custom_vjp_is_refused_when_lowering(transform):
    """JAX traces jvp (and linearize) of a custom_vjp function, then refuses it when
    lowering, TypeError (its custom_lin has no lowering); the spec refuses by LOOP-3 at
    lower. Where the tangent is dead (the custom_vjp's result unused), both accept."""
    clip = _clip(MESH)
    fn = _jax_function(transform, clip, 1)
    assert fn.trace(X, np.ones((8, 4), np.float32)) is not None
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        fn.trace(X, np.ones((8, 4), np.float32)).lower()
    refused = held(transform, clip, X)
    assert (refused.rule, refused.stage, refused.error_type) == ("LOOP-3", "lower",
                                                                   "TypeError")
    unused = lambda x: (clip(x), x * 3)[1]   # noqa: E731
    assert held(transform, unused, X).accepted


@checks("LOOP-4")
@pytest.mark.parametrize("spec, accepted", [(("x",), True), ((), False)],
                         ids=["its-own-type", "another-split"])
def test_loop_4_a_bwd_cotangent_of_another_type_is_refused_as_jax_refuses_it(spec, accepted):
    """Over Explicit axes bwd must give each input a cotangent of its type: resharded to
    another split, JAX's ValueError while tracing the gradient, the spec's LOOP-4 at
    trace; the function itself (no bwd run) is accepted by both."""
    @jax.custom_vjp
    def scale(v):
        return v * 2
    scale.defvjp(lambda v: (scale(v), jnp.sin(v)),
                 lambda r, g: (jax.sharding.reshard(g * r, _on(EXPLICIT, *spec)),))
    result = held("grad", _loss(scale), XE)
    if accepted:
        assert result.accepted
    else:
        assert (result.failure.rule, result.stage) == ("LOOP-4", "trace")
        assert isinstance(result, ValueError)
    assert explain_program(describe_program(scale, XE)).accepted


@checks("LOOP-3")
def test_loop_3_vmap_of_the_jvp_of_a_custom_vjp_is_refused_while_tracing():
    from shardlaw.spec.program import vmap_program

    clip = _clip(MESH)
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        jax.jit(jax.vmap(lambda x, t: jax.jvp(clip, (x,), (t,)))).trace(BATCH, BATCH)
    jvp = jvp_program(describe_program(clip, X))
    with pytest.raises(Rejection) as refused:
        vmap_program(jvp, in_axes=(0, 0), axis_size=2)
    assert (refused.value.rule, refused.value.stage) == ("LOOP-3", "trace")
    assert isinstance(refused.value, TypeError)


# --------------------------------------------------------------------------- JAX's custom_lin

def _custom_lins(program) -> list:
    """The custom_lin equations of a spec Program, every body flattened in."""
    out = []
    for eq in program.equations:
        if isinstance(eq, CustomLin):
            out.append(eq)
        out += [lin for body in spec_bodies(eq) if isinstance(body, Program)
                for lin in _custom_lins(body)]
    return out


def _jax_custom_lins(jaxpr) -> list:
    from jax._src import core

    out = [e for e in jaxpr.eqns if e.primitive.name == "custom_lin"]
    for eqn in jaxpr.eqns:
        for inner in core.jaxprs_in_params(eqn.params):
            out += _jax_custom_lins(inner)
    return out


T = np.ones((8, 4), np.float32)


@checks("LOOP-3")
@pytest.mark.parametrize("transform", ["jvp", "linearize"])
def test_loop_3_jaxs_own_custom_lin_is_read_and_refused_when_lowering(transform):
    """A trace JAX's own jvp or linearize made holds its custom_lin: the bridge reads it
    into the spec's (its residual count and zero tangents as JAX's, its bwd a Program),
    and the spec refuses it by LOOP-3 at lower, TypeError, as JAX refuses lowering it."""
    fn = _jax_function(transform, _clip(MESH), 1)
    (jax_lin,) = _jax_custom_lins(fn.trace(X, T).jaxpr.jaxpr)
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        fn.trace(X, T).lower()
    program = describe_program(fn, X, T)
    (lin,) = _custom_lins(program)
    assert (lin.num_res, lin.in_zeros) == (jax_lin.params["num_res"],
                                           tuple(jax_lin.params["in_zeros"]))
    assert isinstance(lin.bwd, Program) and lin.bwd_zeros == (False,)
    assert lin.in_types == (value_type_of(X.aval, "x").type,)
    verdict = explain_program(program)
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("LOOP-3", "lower",
                                                                   "TypeError")


@checks("LOOP-3")
def test_loop_3_a_custom_lin_given_a_zero_tangent_or_left_unused():
    """JAX's custom_lin over an input given no tangent (a closed-over array) is read with
    that input marked zero and refused as JAX refuses it; one whose tangent is unused is
    dropped, and both accept and run it."""
    @jax.custom_vjp
    def scale(v, w):
        return v * w
    scale.defvjp(lambda v, w: (scale(v, w), (v, w)), lambda r, g: (g * r[1], g * r[0]))
    w = np.full((8, 4), 2.0, np.float32)
    used = jax.jit(lambda x, t: jax.jvp(lambda v: scale(v, w), (x,), (t,)))
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        used.trace(X, T).lower()
    (lin,) = _custom_lins(describe_program(used, X, T))
    (jax_lin,) = _jax_custom_lins(used.trace(X, T).jaxpr.jaxpr)
    assert lin.in_zeros == tuple(jax_lin.params["in_zeros"]) == (False, True)
    assert lin.num_res == jax_lin.params["num_res"] == 2
    assert explain_program(describe_program(used, X, T)).rule == "LOOP-3"
    unused = jax.jit(lambda x, t: jax.jvp(lambda v: (scale(v, w), v * 3)[1], (x,), (t,)))
    assert _jax_custom_lins(unused.trace(X, T).jaxpr.jaxpr)
    np.testing.assert_allclose(unused(X, T)[1], np.full((8, 4), 3.0))
    assert explain_program(describe_program(unused, X, T)).accepted


@checks("LOOP-3")
def test_loop_3_vmap_of_jaxs_own_custom_lin_is_refused_while_tracing():
    """vmap of a trace holding JAX's custom_lin: JAX's TypeError while tracing, the
    spec's LOOP-3 at trace on the program the bridge read."""
    from shardlaw.spec.program import vmap_program

    fn = _jax_function("jvp", _clip(MESH), 1)
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        jax.jit(jax.vmap(fn)).trace(BATCH, BATCH)
    with pytest.raises(Rejection) as refused:
        vmap_program(describe_program(fn, X, T), in_axes=(0, 0), axis_size=2)
    assert (refused.value.rule, refused.value.stage) == ("LOOP-3", "trace")
    assert isinstance(refused.value, TypeError)


# --------------------------------------------------------------------------- the property

CONSTRUCTS = ("cond", "switch", "while", "relu", "custom_vjp")


def _placed(mesh, spec, explicit):
    """A value moved as users move one: resharded over Explicit axes, else constrained."""
    sharding = _on(mesh, *spec)
    if explicit:
        return lambda v: jax.sharding.reshard(v, sharding)
    return lambda v: lax.with_sharding_constraint(v, sharding)


def _drawn_function(construct, place):
    if construct == "cond":
        return lambda x: lax.cond(x.sum() > 0, lambda v: place(jnp.sin(v)),
                                  lambda v: v * 2, x)
    if construct == "switch":   # (reductions: a slice of a split value is refused)
        return lambda x: lax.switch(jnp.int32(x.sum() > 1) + jnp.int32(x.max() > 1), [
            lambda v: jnp.tanh(v), lambda v: place(v * v), lambda v: jnp.cos(v) + 1], x)
    if construct == "while":
        return lambda x: lax.while_loop(lambda c: c.sum() < 50,
                                        lambda c: place(c * 2 + 1), x)
    if construct == "relu":
        return lambda x: jax.nn.relu(place(x * 2))

    @jax.custom_vjp
    def clip(v):
        return v * 2
    clip.defvjp(lambda v: (clip(v), jnp.sin(v)), lambda r, g: (place(g * r),))
    return clip


@st.composite
def control_flow_ad_cases(draw):
    construct = draw(st.sampled_from(CONSTRUCTS))
    transform = draw(st.sampled_from(TRANSFORMS + (("vmap",) if construct in (
        "cond", "while") else ())))
    meshes = draw(st.sampled_from(("auto", "other devices", "explicit")))
    spec = draw(st.sampled_from(((), ("x",), ("y",), (None, "y"), ("y", "x"))))
    return construct, transform, meshes, spec


@checks("LOOP-1", "LOOP-2", "LOOP-3", "LOOP-4")
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(control_flow_ad_cases())
def test_control_flow_under_ad_and_vmap_agrees_with_jax(drawn):
    """Drawn: a cond, a switch, a while loop, relu or a custom_vjp function, a placement
    inside it (a constraint, or a reshard over Explicit axes; on the arguments' devices or
    on others), under grad, jvp, linearize, vjp or (cond, while) vmap: the spec's rewrite
    is held to JAX's (refusal's stage and class, results, placing equations)."""
    construct, transform, meshes, spec = drawn
    explicit = meshes == "explicit"
    mesh = {"auto": MESH, "other devices": HALF, "explicit": EXPLICIT}[meshes]
    f = _drawn_function(construct, _placed(mesh, spec, explicit))
    x = XE if explicit else X
    try:
        verdict = explain_program(describe_program(f, x))
    except Exception as error:   # noqa: BLE001 - JAX refused while tracing (LOOP-1, ...):
        with pytest.raises(type(error)):   # its own error stands, nothing to rewrite
            jax.jit(f).trace(x)
        return
    if not verdict.accepted and verdict.stage == "trace":
        # described though JAX refuses while tracing (a branch typed apart: LOOP-1):
        # nothing to rewrite, the refusal is JAX's, class for class
        with pytest.raises(Exception) as refused:
            jax.jit(f).trace(x)
        assert type(refused.value).__name__ in (verdict.jax_error, verdict.error_type), (
            refused.value, verdict)
        return
    if transform == "vmap":
        batch = jax.device_put(np.ones((2, 8, 4), np.float32),
                               _on(EXPLICIT if explicit else MESH, None, "x"))
        _vmap_held(jax.vmap(f), batch)
        return
    held(transform, _loss(f) if transform == "grad" else f, x)


# --------------------------------------------------------------------------- dead code

def test_a_cond_result_nothing_uses_is_pruned_from_every_branch():
    """A constraint on other devices in a branch's result that nothing uses: JAX's
    dead-code elimination prunes every branch to the used results before lowering, so
    the constraint takes no part in the device assignment; used, it is refused."""
    def f(x, use):
        a, b = lax.cond(x.sum() > 0,
                        lambda v: (v * 2, lax.with_sharding_constraint(v, _on(HALF, "x"))),
                        lambda v: (v, v), x)
        return a + b if use else a
    for use, accepted in ((False, True), (True, False)):
        g = lambda x: f(x, use)   # noqa: E731
        _, verdict = _vmap_held(g, X)   # (no vmap: held to JAX as described)
        assert verdict.accepted is accepted
