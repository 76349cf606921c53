"""describe_program of a primitive JAX refuses to type over Explicit axes while tracing
(issue 32, item 4), against JAX 0.10.2 on 8 CPU devices.

The steps deep run left these refusals JAX's own ShardingTypeError (the spec never asked): a
matmul contracting a dimension split on both operands (``_dot_general_sharding_rule``), an
elementwise operation over operands splitting one dimension over different axes
(``broadcasting_sharding_rule``), a ``jnp.where`` whose cases are split differently
(``_select_sharding_rule``), at the top of the step or under ``jax.grad``. Each is now
described (spec/bridge/refused_primitives.py: the refused primitive as the equation JAX
would have made of it, over the user's values) and held to JAX on both sides: refused by
PROG-7 or PROG-8 at the trace stage, with JAX's class, at the equation's path; on operands
split so that JAX types the result, accepted by both (traced, compiled and run).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, held_to_jax

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _put(shape, spec):
    return jax.device_put(np.ones(shape, np.float32), NS(EXPLICIT, spec))


def matmul(a, b):
    return jnp.tanh(a) @ b


def grad_of_matmul(a, b):
    return jax.grad(lambda a: (jnp.tanh(a) @ b).sum())(a)


def added(a, b):
    return jnp.sin(a) + b.T


def grad_of_added(a, b):
    return jax.grad(lambda a: (jnp.sin(a) * b.T).sum())(a)


def where(a, b):
    return jnp.where(a > 0, a, b.T)


# name: (the function, its operands' splits refused, accepted, the rule, the path)
CASES = {
    "matmul": (matmul, (P("x", "y"), P("y", "x")), (P("x", "y"), P(None, "y")),
               "PROG-7", "body[1].jit.body[0]"),
    "grad-of-matmul": (grad_of_matmul, (P("x", "y"), P("y", "x")), (P("x", None), P("y")),
                       "PROG-7", "body[3].jit.body[0]"),
    "add": (added, (P("x", "y"), P("x", "y")), (P("x", "y"), P("y", "x")),
            "PROG-8", "body[2].jit.body[0]"),
    "grad-of-mul": (grad_of_added, (P("x", "y"), P("x", "y")), (P("x", "y"), P("y", "x")),
                    "PROG-8", "body[3].jit.body[0]"),
    "where": (where, (P("x", "y"), P("x")), (P("x", "y"), P("y", "x")),
              "PROG-8", "body[2].jit.body[0]"),
}


def _operands(name, refused):
    splits = CASES[name][1 if refused else 2]
    return _put((8, 16), splits[0]), _put((16, 8), splits[1])


@checks("PROG-7", "PROG-8")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_primitive_jax_cannot_type_is_described_and_refused_by_the_spec(name):
    """JAX refuses while tracing (ShardingTypeError); describe_program describes the
    program up to the refused primitive, and the spec refuses it by its typing rule, at the
    trace stage, with JAX's class, at the primitive's path."""
    fun, _, _, rule, path = CASES[name]
    with pytest.raises(Exception) as raised:
        jax.jit(fun).trace(*_operands(name, True))
    assert type(raised.value).__name__ == "ShardingTypeError"
    _, verdict, problems = held_to_jax(fun, *_operands(name, True))
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        rule, "trace", path, "ShardingTypeError"), verdict.message


@checks("PROG-7", "PROG-8")
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_step_over_splits_jax_types_is_accepted_by_both(name):
    """The accepting side: the same function over operands split so that JAX types each
    primitive's result, traced, compiled and run by JAX and accepted by the spec."""
    fun = CASES[name][0]
    _, verdict, problems = held_to_jax(fun, *_operands(name, False))
    assert not problems, problems
    assert verdict.accepted, verdict.message


@checks("PROG-8")
def test_a_dimension_split_on_one_operand_only_is_split_in_the_result():
    """Broadcasting's typing: a dimension one operand splits and another leaves unsplit is
    not a refusal (JAX splits the result over it), nor is a size-1 dimension unsplit."""
    a, b, c = _put((8, 16), P("x")), _put((8, 16), P(None, "y")), _put((1, 16), P(None, "y"))
    _, verdict, problems = held_to_jax(lambda a, b, c: a * b + c, a, b, c)
    assert not problems and verdict.accepted, problems
    traced = jax.jit(lambda a, b: a * b).trace(a, b).jaxpr.out_avals[0]
    assert tuple(traced.sharding.spec) == ("x", "y")



def weight_gradient(x, w):
    return jax.grad(lambda w: jnp.tanh(x @ w).sum())(w)


@checks("PROG-7")
def test_a_gradients_product_jax_cannot_type_is_described_and_refused_by_prog_7():
    """The product a gradient makes (``x.T @ dy`` for the weight, contracting ``x``'s
    batch split over 'x' on both sides) where the weight's type is over no mesh, so JAX asks
    for no out_sharding: JAX's ShardingTypeError while tracing the transpose; described up to
    it, refused by PROG-7 at the product's path. The weight placed over the mesh (JAX asks
    for its type): accepted by both."""
    x = _put((8, 16), P("x"))
    w = np.ones((16, 4), np.float32)
    with pytest.raises(Exception) as raised:
        jax.jit(weight_gradient).trace(x, w)
    assert type(raised.value).__name__ == "ShardingTypeError"
    _, verdict, problems = held_to_jax(weight_gradient, x, w)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "PROG-7", "trace", "body[10]", "ShardingTypeError"), verdict.message
    _, verdict, problems = held_to_jax(weight_gradient, x, _put((16, 4), P()))
    assert not problems and verdict.accepted, problems
