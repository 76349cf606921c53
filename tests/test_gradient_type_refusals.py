"""A gradient JAX 0.10.2 refuses in its backward pass for a cotangent's type (AD-13), against
JAX on 8 CPU devices: the steps deep run's last ValueError standing (fuzz case
``('broadcast', 'fori_double')`` under ``vmap_grad`` on an 8x1 Explicit mesh, split
``P(None, 'y')``).

Its root: ``h[..., :1]`` of a dimension split over 'y' (of size 1) is a size-1 dimension
*split* over 'y', and JAX's transpose of its ``broadcast_to`` sums the cotangent only over
the size-1 dimensions that are unsplit, so the cotangent keeps its broadcast size there
and JAX's backward pass refuses it ("Expected cotangent type float32[1@y] but got
float32[8@y]", ValueError while tracing). The spec's transpose of ``broadcast_in_dim`` now
sums as JAX does (spec/program/transpose.py, ``summed_shape``), so its own gradient is
refused by AD-13; and where JAX refuses a cotangent's type, describe_program refuses the
gradient by that rewrite (spec/bridge/refused_gradients.py) rather than re-raising JAX's
error.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import grad_program

from test_steps_arguments import NS, P, held_to_jax

# 'y' of size 1: a size-1 dimension can be split over it
TALL = jax.sharding.Mesh(np.array(jax.devices()).reshape(8, 1), ("x", "y"),
                         axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def total(h):
    return (h * h + jnp.broadcast_to(h[..., :1], h.shape)).sum()


def looped(h):
    return jax.lax.fori_loop(0, 2, lambda i, v: v * 1.5,
                             h * h + jnp.broadcast_to(h[..., :1], h.shape)).sum()


GRADIENTS = {
    "grad": jax.grad(total),
    "vmap-grad": jax.vmap(jax.grad(total)),
    "vmap-grad-fori": jax.vmap(jax.grad(looped)),
}


def _put(spec):
    return jax.device_put(np.ones((8, 8), np.float32), NS(TALL, spec))


@checks("AD-13")
@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_a_cotangent_jax_refuses_for_its_type_is_refused_by_ad_13(name):
    """JAX refuses while tracing with ValueError; describe_program refuses the gradient by
    the spec's rewrite of it: AD-13, at the trace stage, a ValueError with JAX's words."""
    fun = GRADIENTS[name]
    with pytest.raises(ValueError) as raised:
        jax.jit(fun).trace(_put(P(None, "y")))
    assert "Expected cotangent type" in str(raised.value)
    with pytest.raises(Rejection) as refused:
        describe_program(fun, _put(P(None, "y")))
    error = refused.value
    assert (error.failure.rule, error.stage) == ("AD-13", "trace"), str(error)
    assert isinstance(error, ValueError) and "Expected cotangent type" in str(error)


@checks("AD-13")
def test_the_spec_transposes_a_broadcast_of_a_split_size_1_dimension_as_jax_does():
    """grad_program of the described loss: the broadcast's cotangent is summed only over
    the unsplit size-1 dimensions, so a split one keeps its size and AD-13 refuses it; the
    same dimension unsplit is summed back (accepted)."""
    program = describe_program(total, _put(P(None, "y")))
    with pytest.raises(Rejection) as refused:
        grad_program(program, (0,))
    assert refused.value.failure.rule == "AD-13"
    grad_program(describe_program(total, _put(P("x"))), (0,))


@checks("AD-13")
@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_the_same_gradient_over_an_unsplit_size_1_dimension_is_accepted_by_both(name):
    """The operand over the mesh unsplit: the size-1 dimension is unsplit, JAX sums it back,
    and both accept (traced, compiled and run; result types and shardings compared)."""
    _, verdict, problems = held_to_jax(GRADIENTS[name], _put(P()))
    assert not problems and verdict.accepted, (problems, verdict.message)


def _while_loss(h, n):
    """A fori_loop of dynamic bounds is a while loop, which JAX cannot transpose."""
    return jax.lax.fori_loop(0, n, lambda i, v: v * 1.5, h).sum()


@checks("LOOP-2")
@pytest.mark.parametrize("transform", ["grad", "vmap-grad"])
def test_a_while_loop_jax_cannot_transpose_is_refused_by_loop_2(transform):
    """JAX's backward pass refuses a while loop while tracing (ValueError) with no equation
    to point at; describe_program refuses the gradient by the spec's rewrite: LOOP-2 at the
    trace stage, a ValueError with JAX's words. With static bounds (a scan) both accept."""
    grad = jax.grad(_while_loss)
    fun = jax.vmap(grad, in_axes=(0, None)) if transform == "vmap-grad" else grad
    with pytest.raises(ValueError) as raised:
        jax.jit(fun).trace(_put(P("x")), 3)
    assert "Reverse-mode differentiation does not work" in str(raised.value)
    with pytest.raises(Rejection) as refused:
        describe_program(fun, _put(P("x")), 3)
    error = refused.value
    assert (error.failure.rule, error.stage) == ("LOOP-2", "trace"), str(error)
    assert isinstance(error, ValueError) and "Reverse-mode" in str(error)
    static = jax.grad(lambda h: jax.lax.fori_loop(0, 3, lambda i, v: jnp.sin(v), h).sum())
    _, verdict, problems = held_to_jax(static, _put(P("x")))
    assert not problems and verdict.accepted, (problems, verdict.message)
