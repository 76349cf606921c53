"""Custom derivatives read further (issue 32), against JAX 0.10.2 on 8 CPU devices.

* A call JAX refuses inside a ``custom_jvp``'s rule under ``jax.vjp`` or ``jax.linearize``
  called by the user: ``describe_program`` re-raised JAX's own error (the spec was never
  asked); it now refuses by the spec's ``vjp_program`` or ``linearize_program`` of the
  function JAX differentiates, as it does under ``jax.grad`` and ``jax.jvp``
  (tests/test_custom_jvp_ad.py): the rule, the trace stage, JAX's class, the refused
  equation's path inside the custom call's rule. The same rule over a split JAX accepts
  is accepted alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import grad_program, linearize_program, vjp_program

from test_custom_jvp_ad import CASES, _case
from test_steps_arguments import NS, P, held_to_jax, mesh

# how the user calls each transformation inside the function, over its argument p
CALLS = {
    "vjp": lambda fun: lambda p: jax.vjp(fun, p)[1](1.0)[0],
    "vjp-of-a-jit": lambda fun: lambda p: jax.vjp(jax.jit(fun), p)[1](1.0)[0],
    "vjp-with-aux": lambda fun: lambda p: jax.vjp(lambda v: (fun(v), v), p,
                                                  has_aux=True)[1](1.0)[0],
    "linearize": lambda fun: lambda p: jax.linearize(fun, p)[1](p),
    "linearize-of-a-jit": lambda fun: lambda p: jax.linearize(jax.jit(fun), p)[1](p),
}
REWRITES = {"vjp": vjp_program, "linearize": linearize_program}


@checks("WSC-4", "FIT-1", "PROG-7", "PROG-8")
@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_call_jax_refuses_in_a_custom_jvp_rule_under_vjp_or_linearize(name, call):
    """JAX refuses while tracing the rule under the user's vjp or linearize (its class);
    describe_program refuses by the rule JAX's check is, at the trace stage, with JAX's
    class, at the refused equation inside the custom call's rule (it was JAX's own error),
    as the spec's rewrite of the function's description refuses."""
    fun, x = _case(name, refused=True)
    error, rule, path = CASES[name][4:]
    outer = CALLS[call](fun)
    with pytest.raises(Exception) as raised:
        jax.jit(outer).trace(x)
    assert type(raised.value).__name__ == error
    with pytest.raises(Rejection) as refused:
        describe_program(outer, x)
    got = refused.value
    assert (got.failure.rule, got.stage, got.failure.jax_error, got.path) == (
        rule, "trace", error, path), str(got)
    with pytest.raises(Rejection) as refused:
        REWRITES[call.split("-")[0]](describe_program(fun, x))
    assert (refused.value.failure.rule, refused.value.path) == (rule, path)


@checks("WSC-4", "FIT-1", "PROG-7", "PROG-8")
@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_rule_over_a_split_jax_accepts_under_vjp_or_linearize(name, call):
    """The split JAX accepts: traced, compiled and run by JAX, and accepted alike."""
    fun, x = _case(name, refused=False)
    _, verdict, problems = held_to_jax(CALLS[call](fun), x)
    assert not problems, problems
    assert verdict.accepted


# --------------------------------------------------------------------------- symbolic zeros

SIX = "abcdef"


def _six_inputs(spec, traced):
    """A custom_jvp of six inputs whose rule takes symbolic zeros (recording in ``traced``
    which inputs each trace of it had no tangent for), constraining the first input's
    tangent term to ``spec`` where it has one."""
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_jvp
    def f(a, b, c, d, e, g):
        return jnp.sin(a) * b + c * d + e * g

    def rule(primals, tangents):
        a, b, c, d, e, g = primals
        zero = tuple(type(t) is SymbolicZero for t in tangents)
        traced.append(zero)
        partials = (jnp.cos(a) * b, jnp.sin(a), d, c, g, e)
        parts = [p * t for p, t, z in zip(partials, tangents, zero) if not z]
        if not zero[0]:
            parts[0] = jax.lax.with_sharding_constraint(parts[0], NS(mesh(), spec))
        return f(*primals), sum(parts[1:], parts[0])

    f.defjvp(rule, symbolic_zeros=True)
    return f


SIX_BAD, SIX_GOOD = P(None, None, None), P("x", "y")


@checks("AD-3", "AD-5", "WSC-4")
@pytest.mark.parametrize("argnums", [0, 1, (1, 4), (0, 5)])
@pytest.mark.parametrize("refused", [False, True], ids=["fits", "misfits"])
def test_a_six_input_rule_taking_symbolic_zeros_is_read_for_the_inputs_differentiated(
        argnums, refused):
    """grad of a six-input custom_jvp taking symbolic zeros with respect to some inputs:
    JAX traces the rule with a symbolic zero for each other input (it was AD-0 with more
    than four inputs); the spec reads the rule traced for those inputs alone, when AD asks
    (one trace with symbolic zeros: the set differentiated; not 2 ** 6 - 2), held to JAX
    on both sides: the first input's tangent constrained where JAX's is, a constraint of
    the wrong rank refused (WSC-4) only where the first input is differentiated, as JAX."""
    from test_control_flow_ad import held

    traced = []
    f = _six_inputs(SIX_BAD if refused else SIX_GOOD, traced)
    args = [jax.device_put(np.full((8, 4), 1.0 + k, np.float32), NS(mesh(), P("x")))
            for k in range(6)]
    verdict = held("grad", lambda *v: f(*v).sum(), *args, argnums=argnums)
    first = 0 in ((argnums,) if isinstance(argnums, int) else argnums)
    if refused and first:
        assert (verdict.failure.rule, verdict.stage) == ("WSC-4", "trace"), verdict
        assert ".custom_jvp.rule.body[" in verdict.path
    else:
        assert verdict.accepted, verdict
    traced.clear()
    program = describe_program(lambda *v: f(*v).sum(), *args)
    try:
        grad_program(program, argnums)
    except Rejection:
        pass
    wanted = tuple(k not in ((argnums,) if isinstance(argnums, int) else argnums)
                   for k in range(6))
    # (that set alone; twice where JAX refuses it: traced again with its frames kept)
    assert [z for z in traced if any(z)] == [wanted] * (1 + (refused and first)), traced


@checks("AD-3", "AD-5")
@pytest.mark.parametrize("transform", ["grad", "jvp", "linearize", "vjp"])
def test_inputs_without_a_tangent_by_what_they_read_are_symbolic_zeros(transform):
    """The six-input call given the differentiated input once and a value that reads no
    input five times: under each transformation JAX's rule sees five symbolic zeros; the
    spec's rewrite reads the rule for them and is held to JAX, constraint where JAX's is."""
    from test_control_flow_ad import held

    f = _six_inputs(SIX_GOOD, [])
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))

    def g(v):
        w = jnp.full((8, 4), 3.0, np.float32)
        return f(v * 2.0, w, w, w, w, w).sum()
    assert held(transform, g, x).accepted


# --------------------------------------------------------------------------- custom_vjp

def _other_devices():
    """A mesh of the last four devices: a constraint there, on values placed on all
    eight, is refused when lowering (DA-1)."""
    return jax.sharding.Mesh(np.array(jax.devices()[4:]).reshape(2, 2), ("x", "y"))


def _vjp_taking_symbolic_zeros(seen):
    """``(sin(a) * b, a + b)`` as a custom_vjp taking symbolic zeros: ``fwd`` records which
    inputs are perturbed; ``bwd`` (recording which cotangents are symbolic zeros) gives
    ``b`` a zero where the first result's cotangent is one, and constrains the second
    result's cotangent onto other devices where it is given."""
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_vjp
    def f(a, b):
        return jnp.sin(a) * b, a + b

    def fwd(a, b):
        seen.append(("fwd", a.perturbed, b.perturbed))
        return f(a.value, b.value), (jnp.cos(a.value), a.value, b.value)

    def bwd(res, cts):
        c, a, b = res
        g0, g1 = cts
        seen.append(("bwd", type(g0) is SymbolicZero, type(g1) is SymbolicZero))
        ga = jnp.zeros_like(a) if type(g0) is SymbolicZero else c * b * g0
        gb = None if type(g0) is SymbolicZero else jnp.sin(a) * g0
        if type(g1) is not SymbolicZero:
            ga = ga + jax.lax.with_sharding_constraint(g1, NS(_other_devices(), P("x")))
            gb = g1 if gb is None else gb + g1
        return ga, gb

    f.defvjp(fwd, bwd, symbolic_zeros=True)
    return f


def _equinox_vjp(seen):
    """The same through equinox's filter_custom_vjp (``perturbed`` flags in ``fwd``, None
    for a cotangent not given in ``bwd``)."""
    import equinox as eqx

    @eqx.filter_custom_vjp
    def f(ab):
        a, b = ab
        return jnp.sin(a) * b, a + b

    @f.def_fwd
    def fwd(perturbed, ab):
        seen.append(("fwd",) + tuple(perturbed))
        return f(ab), jnp.cos(ab[0])

    @f.def_bwd
    def bwd(c, cts, perturbed, ab):
        (a, b), (g0, g1) = ab, cts
        seen.append(("bwd", g0 is None, g1 is None))
        ga = jnp.zeros_like(a) if g0 is None else c * b * g0
        gb = None if g0 is None else jnp.sin(a) * g0
        if g1 is not None:
            ga = ga + jax.lax.with_sharding_constraint(g1, NS(_other_devices(), P("x")))
            gb = g1 if gb is None else gb + g1
        return ga, gb

    return lambda a, b: f((a, b))


# which result the loss reads: (the loss, the cotangents JAX gives bwd as symbolic zeros)
LOSSES = {"first": (lambda out: out[0].sum(), (False, True)),
          "second": (lambda out: out[1].sum(), (True, False)),
          "both": (lambda out: out[0].sum() + out[1].sum(), (False, False))}


@checks("AD-3", "AD-5", "DA-1")
@pytest.mark.parametrize("make", [_vjp_taking_symbolic_zeros, _equinox_vjp],
                         ids=["jax", "equinox"])
@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
@pytest.mark.parametrize("reads", sorted(LOSSES))
def test_a_custom_vjp_taking_symbolic_zeros_is_read_as_jax_calls_it(make, argnums, reads):
    """grad of a custom_vjp taking symbolic zeros (it was AD-0 unless every input was
    differentiated, and then its bwd took every cotangent): the spec reads ``fwd`` for the
    inputs JAX perturbs and ``bwd`` for the cotangents JAX gives (a result the loss does
    not read gives a symbolic zero), so bwd's constraint onto other devices is there, and
    refused when lowering (DA-1), exactly where JAX's is (where it is live and the gradient
    reads an input); held to JAX on both sides."""
    from test_control_flow_ad import held

    seen = []
    f = make(seen)
    loss, ct_zeros = LOSSES[reads]
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    y = jax.device_put(np.full((8, 4), 2.0, np.float32), NS(mesh(), P("x")))
    verdict = held("grad", lambda a, b: loss(f(a, b)), x, y, argnums=argnums)
    wanted = tuple(k in ((argnums,) if isinstance(argnums, int) else argnums)
                   for k in range(2))
    # refused where the constraint is live (a's cotangent returned) and the gradient reads
    # an input (the first result's cotangent given: else every input is pruned, as JAX's)
    if ct_zeros != (False, False) or not wanted[0]:
        assert verdict.accepted, verdict
    else:
        assert (verdict.rule, verdict.stage) == ("DA-1", "lower"), verdict
    seen.clear()
    try:
        grad_program(describe_program(lambda a, b: loss(f(a, b)), x, y), argnums)
    except Rejection:
        pass
    assert ("fwd",) + wanted in seen and ("bwd",) + ct_zeros in seen, seen


# --------------------------------------------------------------------------- closed-over arrays

WEIGHTS = np.arange(32, dtype=np.float32).reshape(8, 4) / 7


def _zeros_rule_closing_over_an_array(a, b):
    """A two-input custom_jvp taking symbolic zeros whose rule closes over a numpy array
    and constrains the first input's tangent term onto other devices where it is given."""
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_jvp
    def f(u, v):
        return jnp.sin(u) * v

    def rule(primals, tangents):
        (u, v), (tu, tv) = primals, tangents
        parts = [] if type(tu) is SymbolicZero else [jax.lax.with_sharding_constraint(
            jnp.cos(u) * v * tu * jnp.asarray(WEIGHTS), NS(_other_devices(), P("x")))]
        parts += [] if type(tv) is SymbolicZero else [jnp.sin(u) * tv]
        return f(u, v), sum(parts[1:], parts[0])

    f.defjvp(rule, symbolic_zeros=True)
    return f(a * 2.0, b)


@checks("AD-3", "AD-5", "DA-1")
@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_a_rule_taking_symbolic_zeros_closing_over_an_array_is_inlined(argnums):
    """The rule JAX traces for the inputs differentiated closes over an array: it was
    differentiated by the call's primal body (its constant not held by the body built),
    accepting a constraint onto other devices JAX refuses when lowering; its constant is
    now the one the body holds alike, so the constraint is where JAX's is (DA-1 where the
    first input is differentiated), held to JAX on both sides."""
    from test_control_flow_ad import held

    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    y = jax.device_put(np.full((8, 4), 2.0, np.float32), NS(mesh(), P("x")))
    verdict = held("grad", lambda a, b: _zeros_rule_closing_over_an_array(a, b).sum(), x, y,
                   argnums=argnums)
    if argnums == 1:
        assert verdict.accepted, verdict
    else:
        assert (verdict.rule, verdict.stage) == ("DA-1", "lower"), verdict


@checks("AD-3", "AD-5", "DA-1")
@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
@pytest.mark.parametrize("reads", ["first", "both"])
def test_a_custom_vjp_taking_symbolic_zeros_under_a_vmap_called_inside(argnums, reads):
    """The same call under a vmap called inside the function (JAX batches its fwd and bwd
    and traces them for the inputs perturbed and the cotangents given, which the spec
    reads from JAX's batched call): held to JAX, bwd's constraint where JAX's is."""
    from test_control_flow_ad import held

    f = _vjp_taking_symbolic_zeros([])
    loss = LOSSES[reads][0]
    per_row = jax.vmap(lambda a, b: loss(f(a, b)))
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    verdict = held("grad", lambda a, b: per_row(a, b).sum(), x, x, argnums=argnums)
    first = argnums != 1
    assert verdict.accepted == (reads == "first" or not first), verdict


@checks("AD-3", "AD-5")
def test_the_spec_s_own_vmap_of_a_custom_vjp_taking_symbolic_zeros_batches_its_rules():
    """vmap_program of the call batches its fwd and bwd read for every input, and those
    read on demand when AD asks (session 20; it refused vjp with an input given no
    tangent, AD-0): vjp of it with one input given no tangent is differentiated by the
    rules read for that input and batched, as with a tangent for each input (held to JAX
    in tests/test_vmap_refusals_s20.py)."""
    from shardlaw.spec import explain_program
    from shardlaw.spec.program.batching import vmap_program

    f = _vjp_taking_symbolic_zeros([])
    row = np.ones((4,), np.float32)
    one_given = describe_program(lambda a: f(a, jnp.ones((4,), np.float32))[0], row)
    assert explain_program(vjp_program(vmap_program(one_given, axis_size=8)).applied
                           ).accepted
    both_given = describe_program(f, row, row)   # (and a cotangent for each result)
    assert explain_program(vjp_program(vmap_program(both_given, axis_size=8)).applied
                           ).accepted


# --------------------------------------------------------------------------- deeper rules

@jax.custom_jvp
def _sin(x):
    """``sin`` as a custom_jvp whose rule calls it again (``cos x = sin(x + pi/2)``) and
    constrains the tangent it gives, so each order of derivative holds more constraints."""
    return jnp.sin(x)


@_sin.defjvp
def _sin_rule(primals, tangents):
    (x,), (t,) = primals, tangents
    return _sin(x), jax.lax.with_sharding_constraint(_sin(x + np.pi / 2) * t,
                                                     NS(mesh(), P("x", "y")))


def _jvp_of(f):
    return lambda *pt: jax.jvp(f, pt[:len(pt) // 2], pt[len(pt) // 2:])


@checks("AD-2")
@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("fun", [_sin, jax.nn.relu], ids=["self-calling-sin", "relu"])
def test_a_rule_calling_its_own_function_is_read_as_deep_as_ad_asks(fun, order):
    """jvp_program applied ``order`` times, as jax.jvp nested: the bridge reads a rule
    calling its own function two deep up front and deeper calls' rules when AD asks (the
    third and fourth derivatives were by the innermost call's primal body: 8 of JAX's 12
    constraints at the third); the spec's program places values where JAX's does, and is
    accepted alike, compiled and run by JAX."""
    from jaxpr_walk import jax_placing, spec_placing
    from shardlaw.spec import explain_program
    from shardlaw.spec.program.autodiff import jvp_program

    x = jax.device_put(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4),
                       NS(mesh(), P("x")))
    program, theirs = describe_program(fun, x), fun
    for _ in range(order):
        program, theirs = jvp_program(program), _jvp_of(theirs)
    args = [x] * 2 ** order
    jitted = jax.jit(theirs)
    assert spec_placing(program) == jax_placing(jax.make_jaxpr(jitted)(*args).jaxpr)
    jitted(*args)   # (JAX compiles and runs it)
    assert explain_program(program).accepted


def test_rules_read_on_demand_pickle_as_not_read():
    """A program holding rules read on demand (closures over JAX's functions) pickles, as
    programs sent to another process do: there they are not read (None); a copy keeps
    them."""
    import copy
    import pickle

    f = _six_inputs(SIX_GOOD, [])
    x = np.ones((8, 4), np.float32)
    program = describe_program(lambda v: f(v, x, x, x, x, x), x)
    (call,) = [eq for eq in program.equations if eq.kind == "custom_jvp_call"]
    assert call.zero_rule is not None
    (back,) = [eq for eq in pickle.loads(pickle.dumps(program)).equations
               if eq.kind == "custom_jvp_call"]
    assert back.zero_rule is None and back.rule is not None
    assert copy.deepcopy(call).zero_rule is call.zero_rule
