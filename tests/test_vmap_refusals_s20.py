"""vmap's refusals and the custom rules it batches, session 20 (issue 32), against JAX
0.10.2 on 8 CPU devices.

* Rules taking symbolic zeros batched by ``vmap_program``: a custom_jvp's rule read for
  the inputs without a tangent, a custom_vjp's ``fwd`` for the inputs perturbed and its
  ``bwd`` for the cotangents given, read when AD asks for them, are batched as the call
  holding them was (they were left unbatched, so AD of the batched call was refused,
  AD-0, unless every input had a tangent and every result a cotangent). Held to
  ``jax.vjp``/``jax.jvp`` of ``jax.vmap`` on both sides: a constraint onto other devices
  in the rule is met (DA-1 when lowering) exactly where JAX's rule calls it.
* A refusal JAX makes inside vmap's batching rule for a ``pure_callback`` whose
  ``vmap_method`` is none of the four it batches (NotImplementedError, BAT-11), under a
  vmap called inside the function (alone, after a ``sin``, in an inner jit, under two
  vmaps, with ``spmd_axis_name``) or around it: JAX's own error from describe_program
  before; now the callback is described on the example and batched by the spec's rule for
  it, which refuses it with the rule, at the trace stage, at the callback's path. The
  neighbours JAX accepts (``expand_dims``, ``broadcast_all``, ``sequential``) are
  described and accepted alike (traced, compiled and run); ``expand_dims`` and
  ``broadcast_all`` batched by the spec too where a refusal after them needs it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.program_ad_harness import compare_rewrite, run_function
from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import jvp_program, vjp_program
from shardlaw.spec.program.batching import vmap_program

from test_steps_arguments import NS, P, assert_refusal_case, held_to_jax, mesh

lax = jax.lax


def _other_devices():
    """A mesh of the last four devices: a constraint there, on values placed on all eight
    by the compiler, is refused when lowering (DA-1)."""
    return jax.sharding.Mesh(np.array(jax.devices()[4:]).reshape(2, 2), ("x", "y"))


def _vjp_with_zeros():
    """``(sin(a) * b, a + b)`` as a custom_vjp taking symbolic zeros, whose ``bwd``
    constrains the second result's cotangent onto other devices where it is given."""
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_vjp
    def f(a, b):
        return jnp.sin(a) * b, a + b

    def fwd(a, b):
        return f(a.value, b.value), (jnp.cos(a.value), a.value, b.value)

    def bwd(res, cts):
        (c, a, b), (g0, g1) = res, cts
        ga = jnp.zeros_like(a) if type(g0) is SymbolicZero else c * b * g0
        gb = None if type(g0) is SymbolicZero else jnp.sin(a) * g0
        if type(g1) is not SymbolicZero:
            ga = ga + lax.with_sharding_constraint(g1, NS(_other_devices(), P("x")))
            gb = g1 if gb is None else gb + g1
        return ga, gb

    f.defvjp(fwd, bwd, symbolic_zeros=True)
    return f


def _jvp_with_zeros():
    """``sin(u) * v`` as a custom_jvp taking symbolic zeros, whose rule constrains the
    first input's tangent term onto other devices where it is given."""
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_jvp
    def f(u, v):
        return jnp.sin(u) * v

    def rule(primals, tangents):
        (u, v), (tu, tv) = primals, tangents
        parts = [] if type(tu) is SymbolicZero else [lax.with_sharding_constraint(
            jnp.cos(u) * v * tu, NS(_other_devices(), P("x")))]
        parts += [] if type(tv) is SymbolicZero else [jnp.sin(u) * tv]
        return f(u, v), sum(parts[1:], parts[0])

    f.defjvp(rule, symbolic_zeros=True)
    return f


ROW = np.linspace(0.5, 1.5, 4, dtype=np.float32)
ROWS = np.stack([ROW * (k + 1) for k in range(8)])
ONES = np.ones((4,), np.float32)

# name: (the row function, the row arguments, the transformation, DA-1 expected)
ZEROS = {
    # b closed over (no tangent); the first result alone read (the second's cotangent a
    # symbolic zero): bwd's constraint not called
    "vjp-a-alone-first-result": (lambda a: _vjp_with_zeros()(a, ONES)[0], 1, "vjp", False),
    # both results read: bwd's constraint called, onto other devices
    "vjp-a-alone-both-results": (lambda a: sum(_vjp_with_zeros()(a, ONES)), 1, "vjp", True),
    "vjp-b-alone-first-result": (lambda b: _vjp_with_zeros()(ROW, b)[0], 1, "vjp", False),
    # the second result alone: bwd's cotangents read no input (pruned, as JAX's), so the
    # constraint onto other devices decides the devices alone
    "vjp-both-inputs-second-result": (lambda a, b: _vjp_with_zeros()(a, b)[1], 2, "vjp",
                                      False),
    # u closed over (no tangent): the rule for v alone, without the constraint
    "jvp-v-alone": (lambda v: _jvp_with_zeros()(ROW, v), 1, "jvp", False),
    # v closed over: the rule for u alone, constrained onto other devices
    "jvp-u-alone": (lambda u: _jvp_with_zeros()(u, ONES), 1, "jvp", True),
    "jvp-both": (lambda u, v: _jvp_with_zeros()(u, v), 2, "jvp", True),
}


def _jax_of(transform, g, n):
    """JAX's transformation of ``jax.vmap(jax.jit(g))``, jitted: over the batched inputs,
    then the tangents (jvp) or the cotangent (vjp)."""
    batched = jax.vmap(jax.jit(g))
    if transform == "jvp":
        return jax.jit(lambda *pt: jax.jvp(batched, pt[:n], pt[n:]))
    return jax.jit(lambda *pc: jax.vjp(batched, *pc[:n])[1](pc[n]))


@checks("AD-3", "AD-5", "DA-1")
@pytest.mark.parametrize("name", sorted(ZEROS))
def test_vmap_program_batches_rules_taking_symbolic_zeros_read_on_demand(name):
    """vmap_program of a call whose rules take symbolic zeros, then jvp or vjp with an
    input given no tangent (or a result no cotangent): the rules JAX traces for them,
    batched (they were refused, AD-0), held to JAX on both sides: DA-1 when lowering
    exactly where JAX's rule calls its constraint onto other devices, accepted alike
    otherwise."""
    g, n, transform, refused = ZEROS[name]
    # (every input on all eight devices, replicated: a constraint onto four is refused)
    program = describe_program(g, *([jax.device_put(ROW, NS(mesh(), P()))] * n))
    # (the batch placed as vmap_program places it, the example's P() with the batch
    # dimension unsplit: P(None); JAX spells a replicated result after its argument)
    args = (jax.device_put(ROWS, NS(mesh(), P(None))),) * n
    extra = (np.ones((8, 4), np.float32),) * (n if transform == "jvp" else 1)
    outcome = run_function(_jax_of(transform, g, n), args + extra)
    rewrite = jvp_program if transform == "jvp" else (lambda p: vjp_program(p).applied)

    def rewritten():
        return rewrite(vmap_program(program, axis_size=8))
    # (bwd typed over the cotangent given, a numpy one over no mesh, as JAX traces it:
    # tests/test_custom_vjp_cotangents_s21.py)
    problems = compare_rewrite(rewritten, outcome, equations=False)
    assert not problems, problems
    verdict = explain_program(rewritten())
    assert outcome.stage == ("lower" if refused else None), outcome
    if refused:
        assert (verdict.rule, verdict.stage) == ("DA-1", "lower"), verdict
    else:
        assert verdict.accepted, verdict


@checks("AD-2")
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_rules_read_deeper_are_batched_when_read(order):
    """A custom_jvp whose rule calls its own function (read two deep up front, deeper when
    AD asks), batched by vmap_program, then jvp_program ``order`` times, as jax.jvp of
    jax.vmap nested: the rules read deeper are batched when read (they were not: from the
    third derivative on, the innermost call was differentiated by its primal body), so the
    spec's program places values where JAX's does, and is accepted alike, compiled and run
    by JAX."""
    from jaxpr_walk import jax_placing, spec_placing
    from test_custom_rules_more import _jvp_of, _sin

    row = jax.device_put(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4),
                         NS(mesh(), P("x")))
    batch = jax.device_put(np.stack([np.asarray(row)] * 2), NS(mesh(), P(None, "x")))
    program = vmap_program(describe_program(_sin, row), axis_size=2)
    theirs = jax.vmap(jax.jit(_sin))
    for _ in range(order):
        program, theirs = jvp_program(program), _jvp_of(theirs)
    args = [batch] * 2 ** order
    jitted = jax.jit(theirs)
    assert spec_placing(program) == jax_placing(jax.make_jaxpr(jitted)(*args).jaxpr)
    jitted(*args)   # (JAX compiles and runs it)
    assert explain_program(program).accepted


# --------------------------------------------------------------------------- BAT-11

def _callback(method="unset"):
    """A row function calling back into Python (``method``: its vmap_method; "unset": none
    given)."""
    def f(r):
        kwargs = {} if method == "unset" else {"vmap_method": method}
        return jax.pure_callback(lambda z: np.asarray(z) * 2.0,
                                 jax.ShapeDtypeStruct(r.shape, r.dtype), r, **kwargs)
    return f


def _batch(shape=(4, 8)):
    return lambda: (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 5,)


CALLBACKS = {
    # name: (the function, its arguments, JAX's class, the rule, the path; None: accepted)
    "vmap-inside": (lambda a: jax.vmap(_callback())(a), _batch(), "NotImplementedError",
                    "BAT-11", "body[0]"),
    "vmap-inside-after-a-sin": (lambda a: jax.vmap(lambda r: _callback()(jnp.sin(r)))(a),
                                _batch(), "NotImplementedError", "BAT-11", "body[1]"),
    "vmap-inside-in-an-inner-jit": (
        lambda a: jax.vmap(jax.jit(lambda r: _callback()(jnp.cos(r))))(a), _batch(),
        "NotImplementedError", "BAT-11", "body[0].jit.body[1]"),
    "two-vmaps-inside": (lambda a: jax.vmap(jax.vmap(_callback()))(a), _batch((2, 4, 8)),
                         "NotImplementedError", "BAT-11", "body[0]"),
    "vmap-inside-with-spmd_axis_name": (
        lambda a: jax.vmap(_callback(), spmd_axis_name="x")(a),
        lambda: (jax.device_put(_batch()()[0], NS(mesh(), P("x"))),),
        "NotImplementedError", "BAT-11", "body[0]"),
    "vmap-inside-vmap_method-None": (lambda a: jax.vmap(_callback(None))(a), _batch(),
                                     "NotImplementedError", "BAT-11", "body[0]"),
    "vmap-inside-expand_dims": (lambda a: jax.vmap(_callback("expand_dims"))(a), _batch(),
                                None, None, None),
    "vmap-inside-broadcast_all": (lambda a: jax.vmap(_callback("broadcast_all"))(a),
                                  _batch(), None, None, None),
    "vmap-inside-sequential": (lambda a: jax.vmap(_callback("sequential"))(a), _batch(),
                               None, None, None),
    "vmap-of-the-function": (jax.vmap(_callback()), _batch(), "NotImplementedError",
                             "BAT-11", "body[0]"),
    "vmap-of-the-function-expand_dims": (jax.vmap(_callback("expand_dims")), _batch(),
                                         None, None, None),
}


@checks("BAT-11")
@pytest.mark.parametrize("name", sorted(CALLBACKS))
def test_a_callback_vmap_does_not_batch_is_refused_as_jax_refuses_it(name):
    """JAX refuses in vmap's batching rule for the callback (NotImplementedError); the
    spec's batching of it refuses by BAT-11, at the trace stage, at the callback's path,
    an instance of JAX's class; the neighbours JAX accepts are accepted alike."""
    _raised_as_jax(CALLBACKS[name])


def _raised_as_jax(case):
    """``case`` as :func:`assert_refusal_case` takes it, where describe_program raises the
    spec's refusal of vmap's batching (as it does where JAX refuses inside a batching
    rule): JAX refuses with ``error``; describe_program raises an instance of it, by
    ``rule`` at the trace stage at ``path``."""
    fun, arguments, error, rule, path = case
    if error is None:
        assert_refusal_case(case)
        return
    args = arguments()
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(*args)
    assert type(refused.value).__name__ == error
    with pytest.raises(Rejection) as raised:
        describe_program(fun, *args)
    got = raised.value
    assert isinstance(got, type(refused.value))
    assert (got.failure.rule, got.stage, got.path, got.failure.jax_error) == (
        rule, "trace", path, error)


# a refusal after a callback the spec batches, in a jit under a vmap called inside the
# function (the jit's body described on the example, then batched by the spec's rules)
AFTER = {method: (lambda a, m=method: jax.vmap(jax.jit(lambda r: lax.with_sharding_constraint(
    _callback(m)(r), NS(mesh(), P(None, None, "x")))))(a), _batch(), "ValueError", "WSC-4",
    "body[0].jit.body[1]") for method in ("expand_dims", "broadcast_all")}


@checks("BAT-11", "WSC-4")
@pytest.mark.parametrize("method", sorted(AFTER))
def test_a_refusal_after_a_batched_callback_is_described(method):
    """A constraint of the wrong rank after the callback, in an inner jit under vmap: JAX
    refuses it on the example (ValueError); describe_program batches the jit's body,
    callback and all, and refuses by WSC-4 at the constraint (it was PROG-0 at the
    callback, so JAX's own error)."""
    assert_refusal_case(AFTER[method])


def _io_callback(ordered):
    from jax.experimental import io_callback

    return lambda r: io_callback(lambda z: np.asarray(z) * 2.0,
                                 jax.ShapeDtypeStruct(r.shape, r.dtype), r, ordered=ordered)


IO_CALLBACKS = {
    "vmap-inside-ordered": (lambda a: jax.vmap(_io_callback(True))(a), _batch(),
                            "ValueError", "BAT-12", "body[0]"),
    "vmap-inside-ordered-after-a-sin": (
        lambda a: jax.vmap(lambda r: _io_callback(True)(jnp.sin(r)))(a), _batch(),
        "ValueError", "BAT-12", "body[1]"),
    "vmap-of-the-function-ordered": (jax.vmap(_io_callback(True)), _batch(), "ValueError",
                                     "BAT-12", "body[0]"),
    # (JAX maps an unordered one over the batch by a scan: described as JAX staged it)
    "vmap-inside-unordered": (lambda a: jax.vmap(_io_callback(False))(a), _batch(),
                              None, None, None),
}


@checks("BAT-12")
@pytest.mark.parametrize("name", sorted(IO_CALLBACKS))
def test_an_ordered_io_callback_under_vmap_is_refused_as_jax_refuses_it(name):
    """JAX's batching rule for an ordered io_callback refuses it (ValueError); the spec's
    refuses it by BAT-12 at the callback's path, at the trace stage; an unordered one is
    accepted alike."""
    _raised_as_jax(IO_CALLBACKS[name])



# --------------------------------------------------------------------------- batched by the spec

# primitives whose batching the spec did not know (PROG-0 at them, so JAX's own error for a
# refusal after them in a body the spec batches): a special function, fft,
# optimization_barrier, linear algebra, a pure_callback batched by expand_dims or
# broadcast_all
SPECIAL = jax.scipy.special
ROW_FUNCTIONS = {
    "lgamma": lambda r: SPECIAL.gammaln(r + 1.0),
    "digamma": lambda r: SPECIAL.digamma(r + 1.0),
    "polygamma": lambda r: SPECIAL.polygamma(1, r + 1.0),
    "igamma": lambda r: SPECIAL.gammainc(r + 1.0, r + 2.0),
    "igammac": lambda r: SPECIAL.gammaincc(r + 1.0, r + 2.0),
    "zeta": lambda r: SPECIAL.zeta(r + 2.0, 1.5),
    "bessel_i0e": SPECIAL.i0e,
    "bessel_i1e": SPECIAL.i1e,
    "fft": lambda r: jnp.fft.fft(r).real,
    "optimization_barrier": lambda r: lax.optimization_barrier((r, r * 2.0))[1],
    "cholesky": lambda r: jnp.linalg.cholesky(r @ r.T + 8.0 * jnp.eye(8)),
    "eigh": lambda r: jnp.linalg.eigh(r @ r.T)[0][None, :] + r,
    "qr": lambda r: jnp.linalg.qr(r)[1],
    "svd": lambda r: jnp.linalg.svd(r)[1][None, :] + r,
    "lu": lambda r: jax.scipy.linalg.lu(r + 8.0 * jnp.eye(8))[2],
    "reduce_window_sum": lambda r: lax.reduce_window(r, 0.0, lax.add, (3,), (1,), "SAME"),
    "reduce_window_max": lambda r: lax.reduce_window(r, -jnp.inf, lax.max, (2,), (2,),
                                                     "VALID").repeat(2),
    "reduce_window_min-2d": lambda r: lax.reduce_window(r, jnp.inf, lax.min, (2, 2),
                                                        (1, 1), "SAME"),
    "pure_callback-expand_dims": _callback("expand_dims"),
    "pure_callback-broadcast_all": _callback("broadcast_all"),
}


def _split_batch():
    """A batch of 4 rows (of 8, or 8x8 for the linear algebra), split over 'y'."""
    return (jax.device_put(np.arange(32, dtype=np.float32).reshape(4, 8) % 5 / 5,
                           NS(mesh(), P("y"))),)


def _split_matrices():
    return (jax.device_put(np.arange(256, dtype=np.float32).reshape(4, 8, 8) % 7 / 7,
                           NS(mesh(), P("y"))),)


# the row functions taking an 8x8 matrix
MATRIX_ROWS = ("cholesky", "eigh", "qr", "svd", "lu", "reduce_window_min-2d")


@checks("PROG-0", "WSC-4")
@pytest.mark.parametrize("refused", [False, True], ids=["accepted", "refused-after-it"])
@pytest.mark.parametrize("name", sorted(ROW_FUNCTIONS))
def test_a_primitive_batched_by_the_spec_is_held_to_jax(name, refused):
    """vmap of the row function around it (the spec's vmap of the function, its batch
    split over 'y'): accepted alike, the results placed and typed as JAX's; a constraint
    of the wrong rank after it in an inner jit under a vmap called inside the function:
    refused by WSC-4 at the constraint (its body batched by the spec's rules), as JAX."""
    g = ROW_FUNCTIONS[name]
    batch = _split_matrices if name in MATRIX_ROWS else _split_batch
    if not refused:
        assert_refusal_case((jax.vmap(g), batch, None, None, None))
        return
    wrong = P(None, None, "x") if name in MATRIX_ROWS else P(None, "x")
    after = jax.jit(lambda r: lax.with_sharding_constraint(g(r), NS(mesh(), wrong)))
    fun = lambda a: jax.vmap(after)(a)   # noqa: E731
    with pytest.raises(ValueError):
        jax.jit(fun).trace(*batch())
    program, verdict, problems = held_to_jax(fun, *batch())
    assert not problems, problems
    # (the constraint, last in the batched jit's body, after the primitive batched)
    last = len(program.equations[0].body.equations) - 1
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "WSC-4", "trace", f"body[0].jit.body[{last}]", "ValueError")
