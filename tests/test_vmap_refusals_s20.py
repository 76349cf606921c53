"""vmap's refusals and the custom rules it batches, session 20 (issue 32), against JAX
0.10.2 on 8 CPU devices.

* Rules taking symbolic zeros batched by ``vmap_program``: a custom_jvp's rule read for
  the inputs without a tangent, a custom_vjp's ``fwd`` for the inputs perturbed and its
  ``bwd`` for the cotangents given, read when AD asks for them, are batched as the call
  holding them was (they were left unbatched, so AD of the batched call was refused,
  AD-0, unless every input had a tangent and every result a cotangent). Held to
  ``jax.vjp``/``jax.jvp`` of ``jax.vmap`` on both sides: a constraint onto other devices
  in the rule is met (DA-1 when lowering) exactly where JAX's rule calls it.
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

from test_steps_arguments import NS, P, mesh

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


# the result spellings vmap_program gives otherwise than JAX in each case (none: "")
SPELLED = {name: "" for name in ZEROS} | {
    "jvp-v-alone": "result shardings:", "vjp-a-alone-first-result": "result shardings:",
    "vjp-b-alone-first-result": "result types:"}


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
    args = (jax.device_put(ROWS, NS(mesh(), P())),) * n
    extra = (np.ones((8, 4), np.float32),) * (n if transform == "jvp" else 1)
    outcome = run_function(_jax_of(transform, g, n), args + extra)
    rewrite = jvp_program if transform == "jvp" else (lambda p: vjp_program(p).applied)

    def rewritten():
        return rewrite(vmap_program(program, axis_size=8))
    problems = compare_rewrite(rewritten, outcome, equations=False)
    # (the batched results' spelling where a closed-over row is broadcast to the batch,
    # P(None) for JAX's P() and a type over the mesh for one over none, differs alike for
    # rules not taking symbolic zeros: vmap_program's, not these rules')
    assert all(p.startswith(SPELLED[name]) for p in problems) and (
        bool(problems) == bool(SPELLED[name])), problems
    verdict = explain_program(rewritten())
    assert outcome.stage == ("lower" if refused else None), outcome
    if refused:
        assert (verdict.rule, verdict.stage) == ("DA-1", "lower"), verdict
    else:
        assert verdict.accepted, verdict
