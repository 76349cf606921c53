"""A custom_vjp's ``bwd`` over the cotangent given (issue 32), against JAX 0.10.2 on 8 CPU
devices.

JAX traces a custom_vjp's ``bwd`` when it transposes the call, over the cotangents it is
given: ``jax.vjp``'s pullback given a numpy cotangent (typed over no mesh) computes a
cotangent that reads only it and a closed-over row (``sin(ROW) * g``) over no mesh. The
spec reads ``bwd`` once, over cotangents typed as the call's results (over the mesh of the
input they are computed from), and inlined it as read: that cotangent came out typed
over the mesh, so ``vjp_program`` (after ``vmap_program`` too) typed a result over the
mesh where JAX's is over none, and over an all-Explicit mesh refused it (AD-9: a result
typed over 8 devices on a program placed on one) where JAX runs it. Now a primitive of
``bwd`` reading a value whose type the given cotangent changed has its results typed over
its operands, as the transposes type theirs (``custom_rules._inline_over``).

Before: 4 of the 24 cases below disagreed (2 result types, 2 false AD-9 refusals); after:
none. The neighbours: the cotangent placed on the mesh (bwd typed over it, as read), and
the cotangent of the input ``bwd`` multiplies by its residual (over the mesh either way).

The results' ``P(None)`` where JAX's were ``P()`` in ``tests/test_vmap_refusals_s20.py``
was that test's: it passed JAX the batch placed on ``P()`` where ``vmap_program`` places
it on ``P(None)`` (the example's ``P()`` with the batch dimension unsplit, documented in
``batched_input``), and JAX spells a replicated result after its argument; placed alike,
they agree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.program_ad_harness import compare_rewrite, run_function
from shardlaw.properties.registry import checks
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import vjp_program
from shardlaw.spec.program.batching import vmap_program

from test_steps_arguments import NS, P, mesh

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)
ROW = np.linspace(0.5, 1.5, 4, dtype=np.float32)
ROWS = np.stack([ROW * (k + 1) for k in range(8)])


def _product():
    """``sin(a) * b`` as a custom_vjp: ``bwd`` gives ``cos(a) * b * g`` and ``sin(a) * g``."""
    @jax.custom_vjp
    def f(a, b):
        return jnp.sin(a) * b

    def fwd(a, b):
        return f(a, b), (jnp.cos(a), a, b)

    def bwd(res, g):
        c, a, b = res
        return c * b * g, jnp.sin(a) * g

    f.defvjp(fwd, bwd)
    return f


FUNCTIONS = {
    # a closed over: b's cotangent reads the cotangent and the row alone
    "b-alone": lambda b: _product()(ROW, b),
    # b closed over: a's cotangent reads a's residual b, a row too
    "a-alone": lambda a: _product()(a, ROW),
    "both": lambda a, b: _product()(a, b),
}


def _vjp_case(name: str, batched: bool, placed: bool, explicit: bool):
    """(JAX's outcome, the spec's rewrite) of ``jax.vjp`` of the function (of
    ``jax.vmap`` of it where ``batched``), given a numpy cotangent, or one placed on the
    mesh replicated (``placed``)."""
    g = FUNCTIONS[name]
    n = g.__code__.co_argcount
    on = EXPLICIT if explicit else mesh()

    def put(value, spec):
        return jax.device_put(value, NS(on, spec))
    program = describe_program(g, *([put(ROW, P())] * n))
    shape = (8, 4) if batched else (4,)
    spec = P(None) if batched else P()   # (as vmap_program places the batch)
    args = (put(ROWS, spec) if batched else put(ROW, spec),) * n
    ct = put(np.ones(shape, np.float32), spec) if placed else np.ones(shape, np.float32)
    inner = jax.vmap(jax.jit(g)) if batched else jax.jit(g)
    outcome = run_function(jax.jit(lambda *pc: jax.vjp(inner, *pc[:n])[1](pc[n])),
                           args + (ct,))
    given = (describe_program(lambda c: c, ct).inputs[0],) if placed else None

    def rewritten():
        source = vmap_program(program, axis_size=8) if batched else program
        return vjp_program(source, given).applied
    return outcome, rewritten


GRID = [(name, batched, placed, explicit) for name in sorted(FUNCTIONS)
        for batched in (False, True) for placed in (False, True) for explicit in (False, True)]


@checks("AD-5", "AD-9")
@pytest.mark.parametrize("name,batched,placed,explicit", GRID,
                         ids=["-".join([c[0], "vmapped" if c[1] else "row",
                                        "placed" if c[2] else "numpy",
                                        "explicit" if c[3] else "auto"]) for c in GRID])
def test_bwd_is_typed_over_the_cotangent_given(name, batched, placed, explicit):
    outcome, rewritten = _vjp_case(name, batched, placed, explicit)
    assert outcome.error is None, outcome   # JAX runs every one
    problems = compare_rewrite(rewritten, outcome, equations=False)
    assert not problems, problems


def test_a_numpy_cotangent_gives_a_result_over_no_mesh():
    """The case that disagreed, by its type: over no mesh, as JAX's, where the cotangent
    placed on the mesh gives one over it (JAX's and the spec's alike)."""
    batch = jax.device_put(ROWS, NS(mesh(), P(None)))
    pullback = jax.vjp(jax.vmap(jax.jit(FUNCTIONS["b-alone"])), batch)[1]
    for placed in (False, True):
        ct = np.ones((8, 4), np.float32)
        ct = jax.device_put(ct, NS(mesh(), P(None))) if placed else ct
        (theirs,) = pullback(ct)
        _, rewritten = _vjp_case("b-alone", True, placed, False)
        program = rewritten()
        (ours,) = [program.value_types[k] for k in program.outputs]
        assert jax.typeof(theirs).sharding.mesh.empty == (not placed)
        assert (ours.mesh is None) == (not placed), ours
