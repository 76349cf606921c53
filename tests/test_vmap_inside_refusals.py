"""describe_program of what JAX refuses while tracing a call under a ``vmap`` called inside
the function (issue 32), against JAX 0.10.2 on 8 CPU devices.

vmap traces the function it is given on one example's types, each call as it is made: a
jit's body (``jnp.matmul``, ``jnp.add`` and ``jnp.cumsum`` are jits), a scan's, a while
loop's or a remat's body and a cond's branch are traced on the example, and a
constraint's, a device_put's and an inner jit's shardings are checked against it. Each such refusal was JAX's own error from describe_program (only a constraint
under one vmap without ``spmd_axis_name`` was described). Each is now described as vmap's
batching stages the call (spec/bridge/refused_under_vmap.py) and held to JAX on both sides:
the neighbour JAX accepts is accepted alike (traced, compiled and run), the refused one is
refused by the rule, at the trace stage, with JAX's class, at the refused equation's path;
under one vmap, two, and one with ``spmd_axis_name``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, assert_refusal_case, held_to_jax, mesh

lax = jax.lax
EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _on(spec, shape=(4, 8, 8)):
    """An array of ``shape`` placed by ``spec`` on the (2, 4) mesh of Explicit axes."""
    return jax.device_put(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 3,
                          NS(EXPLICIT, spec))


def _auto(shape=(4, 8, 8)):
    return np.ones(shape, np.float32)


def _twice(f):
    return jax.vmap(jax.vmap(f))


def _in_scan(step):
    """``step`` of the carry and a closed-over value, in a two-step scan's body."""
    return lambda r, s: lax.scan(lambda c, _: (step(c, s), None), r, None, length=2)[0]


def _in_while(step):
    """``step`` of the carry and a closed-over value, in a while loop's body."""
    return lambda r, s: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, step(
        c[1], s)), (0, r))[1]


def _in_cond(step):
    """``step`` in a cond's branch, its predicate not batched (a Python bool)."""
    return lambda r, s: lax.cond(True, lambda u: step(u, s), lambda u: u, r)


def _jit_in(spec):
    return jax.jit(lambda r: r * 2.0, in_shardings=NS(mesh(), spec))


def _put(spec):
    return lambda r: jax.device_put(r * 2.0, NS(mesh(), spec))


def _constrained(spec):
    return lambda r: lax.with_sharding_constraint(r * 2.0, NS(mesh(), spec))


def _in_jit(spec):
    return jax.jit(lambda r: lax.with_sharding_constraint(jnp.sin(r), NS(mesh(), spec)))


# name: (the function, its arguments, JAX's class, the rule, the path; None: both accept)
CASES = {
    # PROG-7: jnp.matmul (a jit) of operands splitting the contraction apart
    "matmul": (lambda a, b: jax.vmap(jnp.matmul)(a, b),
               lambda: (_on(P(None, None, "x")), _on(P(None, "y"))),
               "ShardingTypeError", "PROG-7", "body[0].jit.body[0]"),
    "matmul-of-rows-split": (lambda a, b: jax.vmap(jnp.matmul)(a, b),
                             lambda: (_on(P(None, "x")), _on(P())), None, None, None),
    "matmul-in-a-scan-body": (lambda a, b: jax.vmap(_in_scan(jnp.matmul))(a, b),
                              lambda: (_on(P(None, None, "x")), _on(P(None, "y"))),
                              "ShardingTypeError", "PROG-7",
                              "body[0].scan.body[0].jit.body[0]"),
    "matmul-of-rows-split-in-a-scan-body": (
        lambda a, b: jax.vmap(_in_scan(jnp.matmul))(a, b),
        lambda: (_on(P(None, "x")), _on(P())), None, None, None),
    "matmul-in-a-while-body": (lambda a, b: jax.vmap(_in_while(jnp.matmul))(a, b),
                               lambda: (_on(P(None, None, "x")), _on(P(None, "y"))),
                               "ShardingTypeError", "PROG-7",
                               "body[0].while.body[1].jit.body[1].jit.body[0]"),
    "matmul-of-rows-split-in-a-while-body": (
        lambda a, b: jax.vmap(_in_while(jnp.matmul))(a, b),
        lambda: (_on(P(None, "x")), _on(P())), None, None, None),
    "matmul-in-a-remat": (lambda a, b: jax.vmap(jax.checkpoint(jnp.matmul))(a, b),
                          lambda: (_on(P(None, None, "x")), _on(P(None, "y"))),
                          "ShardingTypeError", "PROG-7", "body[0].jit.body[0].jit.body[0]"),
    "matmul-of-rows-split-in-a-remat": (
        lambda a, b: jax.vmap(jax.checkpoint(jnp.matmul))(a, b),
        lambda: (_on(P(None, "x")), _on(P())), None, None, None),
    "matmul-in-a-cond-branch": (lambda a, b: jax.vmap(_in_cond(jnp.matmul))(a, b),
                                lambda: (_on(P(None, None, "x")), _on(P(None, "y"))),
                                "ShardingTypeError", "PROG-7",
                                "body[0].cond.body[0].jit.body[0].jit.body[0]"),
    "matmul-of-rows-split-in-a-cond-branch": (
        lambda a, b: jax.vmap(_in_cond(jnp.matmul))(a, b),
        lambda: (_on(P(None, "x")), _on(P())), None, None, None),
    # PROG-8: jnp.add (a jit) of operands splitting one dimension over different axes
    "add": (lambda a, b: jax.vmap(jnp.add)(a, b),
            lambda: (_on(P(None, "x")), _on(P(None, "y"))),
            "ShardingTypeError", "PROG-8", "body[0].jit.body[0]"),
    "add-under-two-vmaps": (lambda a, b: _twice(jnp.add)(a, b),
                            lambda: (_on(P(None, None, "x"), (2, 4, 8, 8)),
                                     _on(P(None, None, "y"), (2, 4, 8, 8))),
                            "ShardingTypeError", "PROG-8", "body[0].jit.body[0]"),
    "add-under-two-vmaps-split-alike": (lambda a, b: _twice(jnp.add)(a, b),
                                        lambda: (_on(P(None, None, "x"), (2, 4, 8, 8)),
                                                 _on(P(None, None, "x"), (2, 4, 8, 8))),
                                        None, None, None),
    # PROG-10: jnp.cumsum (a jit) along a split dimension
    "cumsum-along-a-split-dimension": (lambda a: jax.vmap(lambda r: jnp.cumsum(r, 0))(a),
                                       lambda: (_on(P(None, "x")),),
                                       "ShardingTypeError", "PROG-10", "body[0].jit.body[0]"),
    "cumsum-along-an-unsplit-dimension": (lambda a: jax.vmap(lambda r: jnp.cumsum(r, 1))(a),
                                          lambda: (_on(P(None, "x")),), None, None, None),
    # FIT-1: an inner jit's in_shardings of a rank the example does not have
    "jit-in_shardings": (lambda a: jax.vmap(_jit_in(P(None, None, "x")))(a),
                         lambda: (_auto(),), "ValueError", "FIT-1",
                         "body[0].jit.in_shardings[0]"),
    "jit-in_shardings-with-spmd_axis_name": (
        lambda a: jax.vmap(_jit_in(P(None, None, "x")), spmd_axis_name="y")(a),
        lambda: (_auto(),), "ValueError", "FIT-1", "body[0].jit.in_shardings[0]"),
    "jit-in_shardings-that-fit": (lambda a: jax.vmap(_jit_in(P(None, "x")),
                                                     spmd_axis_name="y")(a),
                                  lambda: (_auto(),), None, None, None),
    # ARG-4: a device_put whose target the example's rank does not take
    "device_put": (lambda a: jax.vmap(_put(P(None, None, "x")))(a), lambda: (_auto(),),
                   "ValueError", "ARG-4", "body[1]"),
    "device_put-under-two-vmaps": (lambda a: _twice(_put(P(None, "x")))(a),
                                   lambda: (_auto(),), "ValueError", "ARG-4", "body[1]"),
    "device_put-that-fits": (lambda a: _twice(_put(P("x")))(a), lambda: (_auto(),),
                             None, None, None),
    # WSC-4: a constraint of a rank the example does not have
    "constraint-under-two-vmaps": (lambda a: _twice(_constrained(P(None, "x")))(a),
                                   lambda: (_auto(),), "ValueError", "WSC-4", "body[1]"),
    "constraint-with-spmd_axis_name": (
        lambda a: jax.vmap(_constrained(P(None, None, "x")), spmd_axis_name="y")(a),
        lambda: (_auto(),), "ValueError", "WSC-4", "body[1]"),
    "constraint-with-spmd_axis_name-that-fits": (
        lambda a: jax.vmap(_constrained(P(None, "x")), spmd_axis_name="y")(a),
        lambda: (_auto(),), None, None, None),
    "constraint-in-a-jit": (lambda a: jax.vmap(_in_jit(P(None, None, None)))(a),
                            lambda: (_auto(),), "ValueError", "WSC-4", "body[0].jit.body[1]"),
    "constraint-in-a-jit-that-fits": (lambda a: jax.vmap(_in_jit(P(None, "x")))(a),
                                      lambda: (_auto(),), None, None, None),
}


@checks("PROG-7", "PROG-8", "PROG-10", "FIT-1", "ARG-4", "WSC-4")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_call_under_a_vmap_in_the_function_is_held_to_jax(name):
    assert_refusal_case(CASES[name])
