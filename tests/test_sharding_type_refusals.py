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


# --------------------------------------------------------------------------- transposed bodies

def _loss(w, x):
    return jnp.tanh(x @ w).sum()


def _other_loss(w, x):
    return (x @ w).sum()


def grad_through_jit(w, x):
    return jax.grad(jax.jit(_loss))(w, x)


def grad_through_remat(w, x):
    return jax.grad(jax.checkpoint(_loss))(w, x)


def grad_through_cond(w, x):
    return jax.grad(lambda w, x: jax.lax.cond(x.sum() > 0, _loss, _other_loss, w, x))(w, x)


# name: (the function, the path of the product JAX's transpose cannot type)
TRANSPOSED = {
    "jit": (grad_through_jit, "body[2].jit.body[4]"),
    "remat": (grad_through_remat, "body[4].jit.body[8]"),
    "cond": (grad_through_cond, "body[5].cond.body[0].jit.body[1]"),
}


@checks("PROG-7")
@pytest.mark.parametrize("name", sorted(TRANSPOSED))
def test_a_product_jax_cannot_type_in_a_transposed_body_is_refused_by_prog_7(name):
    """The weight's product a gradient makes (``x.T @ dy``, contracting ``x``'s batch split
    over 'x' on both sides) inside the body JAX's backward pass traces for an inner jit, a
    remat or a cond's branch, where the weight's type is over no mesh (JAX asks for no
    out_sharding): JAX's ShardingTypeError while tracing that body; described up to it (the
    transposed jit, remat or cond over the residuals and cotangents), refused by PROG-7 at
    the trace stage at the product's path inside the transposed body."""
    fun, path = TRANSPOSED[name]
    x, w = _put((8, 16), P("x")), np.ones((16, 4), np.float32)
    with pytest.raises(Exception) as raised:
        jax.jit(fun).trace(w, x)
    assert type(raised.value).__name__ == "ShardingTypeError"
    _, verdict, problems = held_to_jax(fun, w, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "PROG-7", "trace", path, "ShardingTypeError"), verdict.message


@checks("PROG-7")
@pytest.mark.parametrize("name", sorted(TRANSPOSED))
def test_the_weight_placed_over_the_mesh_makes_the_transposed_product_typed(name):
    """The weight placed over the mesh: JAX's transpose asks for its type as out_sharding,
    and both accept (traced, compiled and run; the gradient's sharding as JAX's)."""
    fun = TRANSPOSED[name][0]
    x, w = _put((8, 16), P("x")), _put((16, 4), P())
    _, verdict, problems = held_to_jax(fun, w, x)
    assert not problems and verdict.accepted, problems
