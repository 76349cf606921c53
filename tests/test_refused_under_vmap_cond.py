"""describe_program of a call JAX refuses in a cond's branch under a ``vmap`` called inside
the function that batches the cond's predicate (issue 32, item 4), against JAX 0.10.2 on
8 CPU devices.

JAX traces a cond's branches on one example when the function calls ``lax.cond`` (or
``lax.switch``), then vmap's batching rule turns a cond whose predicate it batches into
every branch run on the batched operands and a ``select_n`` of their results. A call JAX
refuses while tracing a branch (a matmul or an add it cannot type over Explicit axes, a
constraint, a device_put or an inner jit's in_shardings that do not fit the example) was
JAX's own error from describe_program: the spec batches the cond the same way (each branch
a jit before the select_n) and no path named the branch's equation there. It is now
described at the branch's jit, ``body[2].jit.body[1]`` for a constraint after a ``mul`` in a
branch (the description holds the refused branch only, as without vmap), and held to JAX on both sides: the neighbour JAX accepts is accepted alike
(traced, compiled and run), the refused one refused by the rule, at the trace stage, with
JAX's class, at that path. A constraint JAX checked on the example in a branch of a cond
whose predicate is not batched is batched with its check kept, as anywhere else.
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
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 5


def _signs(n=4):
    return np.array([1.0, -1.0] * (n // 2), np.float32)


def _first(step):
    """``step(u, v)`` in the first branch of a cond on ``p > 0``."""
    return lambda p, r, s: lax.cond(p > 0, step, lambda u, v: u, r, s)


def _second(step):
    """``step(u, v)`` in the second branch of a cond on ``p > 0``."""
    return lambda p, r, s: lax.cond(p > 0, lambda u, v: u * 2.0, step, r, s)


def _switched(step):
    """``step(u, v)`` in the last of three branches of a switch on ``p``'s sign."""
    return lambda p, r, s: lax.switch(jnp.sign(p).astype(jnp.int32) + 1, (
        lambda u, v: u, lambda u, v: u + 1.0, step), r, s)


def _vmapped(wrap, step, **kwargs):
    return lambda p, a, b: jax.vmap(wrap(step), **kwargs)(p, a, b)


def _twice(wrap, step):
    return lambda p, a, b: jax.vmap(jax.vmap(wrap(step)))(p, a, b)


def _in_scan(wrap, step):
    """The vmapped cond in a two-step scan's body, the carry ``a``."""
    def scanned(p, a, b):
        return lax.scan(lambda c, _: (jax.vmap(wrap(step))(p, c, b), None), a, None,
                        length=2)[0]
    return scanned


def _constrained(spec):
    return lambda u, v: lax.with_sharding_constraint(u * 2.0, NS(mesh(), spec))


def _put(spec):
    return lambda u, v: jax.device_put(u * 2.0, NS(mesh(), spec))


def _jit_in(spec):
    return lambda u, v: jax.jit(lambda r: r * 2.0, in_shardings=NS(mesh(), spec))(u)


def _split(a, b):
    return lambda: (_signs(), _on(a), _on(b))


def _unplaced():
    return (_signs(), _auto(), _auto())


# name: (the function, its arguments, JAX's class, the rule, the path; None: both accept)
CASES = {
    # PROG-7: jnp.matmul (a jit) of operands splitting the contraction apart
    "matmul": (_vmapped(_first, jnp.matmul), _split(P(None, None, "x"), P(None, "y")),
               "ShardingTypeError", "PROG-7", "body[2].jit.body[0].jit.body[0]"),
    "matmul-of-rows-split": (_vmapped(_first, jnp.matmul), _split(P(None, "x"), P()),
                             None, None, None),
    "matmul-in-the-second-branch": (_vmapped(_second, jnp.matmul),
                                    _split(P(None, None, "x"), P(None, "y")),
                                    "ShardingTypeError", "PROG-7",
                                    "body[2].jit.body[0].jit.body[0]"),
    "matmul-in-a-switch": (_vmapped(_switched, jnp.matmul),
                           _split(P(None, None, "x"), P(None, "y")),
                           "ShardingTypeError", "PROG-7",
                           "body[4].jit.body[0].jit.body[0]"),
    "matmul-of-rows-split-in-a-switch": (_vmapped(_switched, jnp.matmul),
                                         _split(P(None, "x"), P()), None, None, None),
    # PROG-8: jnp.add (a jit) of operands splitting one dimension over different axes
    "add": (_vmapped(_first, jnp.add), _split(P(None, "x"), P(None, "y")),
            "ShardingTypeError", "PROG-8", "body[2].jit.body[0].jit.body[0]"),
    "add-split-alike": (_vmapped(_first, jnp.add), _split(P(None, "x"), P(None, "x")),
                        None, None, None),
    "add-under-two-vmaps": (_twice(_first, jnp.add),
                            lambda: (_signs(2 * 4).reshape(2, 4),
                                     _on(P(None, None, "x"), (2, 4, 8, 8)),
                                     _on(P(None, None, "y"), (2, 4, 8, 8))),
                            "ShardingTypeError", "PROG-8",
                            "body[2].jit.body[0].jit.body[0]"),
    "add-in-a-scan-body": (_in_scan(_first, jnp.add), _split(P(None, "x"), P(None, "y")),
                           "ShardingTypeError", "PROG-8",
                           "body[0].scan.body[2].jit.body[0].jit.body[0]"),
    "add-split-alike-in-a-scan-body": (_in_scan(_first, jnp.add),
                                       _split(P(None, "x"), P(None, "x")), None, None, None),
    # WSC-4: a constraint of a rank the example does not have
    "constraint": (_vmapped(_first, _constrained(P(None, None, "x"))), _unplaced,
                   "ValueError", "WSC-4", "body[2].jit.body[1]"),
    "constraint-that-fits": (_vmapped(_first, _constrained(P(None, "x"))), _unplaced,
                             None, None, None),
    "constraint-with-spmd_axis_name": (
        _vmapped(_first, _constrained(P(None, None, "x")), spmd_axis_name="y"), _unplaced,
        "ValueError", "WSC-4", "body[2].jit.body[1]"),
    "constraint-with-spmd_axis_name-that-fits": (
        _vmapped(_first, _constrained(P(None, "x")), spmd_axis_name="y"), _unplaced,
        None, None, None),
    "constraint-predicate-not-batched": (
        _vmapped(_first, _constrained(P(None, None, "x")), in_axes=(None, 0, 0)),
        lambda: (np.float32(1.0), _auto(), _auto()), "ValueError", "WSC-4",
        "body[2].cond.body[0].jit.body[1]"),
    # ARG-4: a device_put whose target the example's rank does not take
    "device_put": (_vmapped(_first, _put(P(None, None, "x"))), _unplaced,
                   "ValueError", "ARG-4", "body[2].jit.body[1]"),
    "device_put-that-fits": (_vmapped(_first, _put(P("x"))), _unplaced, None, None, None),
    # FIT-1: an inner jit's in_shardings of a rank the example does not have
    "jit-in_shardings": (_vmapped(_first, _jit_in(P(None, None, "x"))), _unplaced,
                         "ValueError", "FIT-1",
                         "body[2].jit.body[0].jit.in_shardings[0]"),
    "jit-in_shardings-that-fit": (_vmapped(_first, _jit_in(P(None, "x"))), _unplaced,
                                  None, None, None),
}


@checks("PROG-7", "PROG-8", "WSC-4", "ARG-4", "FIT-1")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_call_in_a_branch_of_a_cond_vmap_batches_is_held_to_jax(name):
    assert_refusal_case(CASES[name])
