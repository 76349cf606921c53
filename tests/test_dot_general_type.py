"""dot_general's result type over Explicit axes (PROG-7) against JAX 0.10.2 on 8 CPU
devices: a product contracting a dimension split over the same Explicit axes on both
operands is refused while tracing (ShardingTypeError) unless given ``out_sharding``; a
gradient's product (``x.T @ dy`` for the weight of ``x @ w``, ``x`` split over its batch)
is refused alike where the weight's type is over no mesh and no mesh is set, and accepted
where JAX asks for the weight's type as ``out_sharding``."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program, from_jax, grad_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.contraction import transposed_dimensions
from shardlaw.spec.program.description import Opaque, Program, Value

MESH = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
X = jax.device_put(np.ones((8, 16), np.float32), NamedSharding(MESH, P("x")))


def _jax(f, *args, mesh=None):
    """JAX's outcome of tracing ``jax.jit(f)``: None (accepted) or its error's class name."""
    try:
        if mesh is None:
            jax.jit(f).trace(*args)
        else:
            with jax.set_mesh(mesh):
                jax.jit(f).trace(*args)
    except Exception as error:  # noqa: BLE001 - compared
        return type(error).__name__
    return None


def _spec(verdict):
    return None if verdict.accepted else (verdict.rule, verdict.stage, verdict.jax_error)


def _product(lhs_spec, rhs_spec, out_sharding=None):
    """x (8, 16) @ y (16, 4) contracted over 16, each typed split as given."""
    mesh = from_jax(MESH).abstract
    lhs = Value.typed((8, 16), mesh=mesh)
    rhs = Value.typed((16, 4), mesh=mesh)
    lhs, rhs = (dataclasses.replace(v, spec=spec) for v, spec in ((lhs, lhs_spec),
                                                                   (rhs, rhs_spec)))
    dot = Opaque((0, 1), (Value.typed((8, 4), mesh=mesh),), primitive="dot_general", params=(
        ("dimension_numbers", (((1,), (0,)), ((), ()))), ("out_sharding", out_sharding)))
    return Program((lhs.type, rhs.type), (dot,), (2,))


@checks("PROG-7")
@pytest.mark.parametrize("lhs,rhs,out,refused", [
    (P(None, "y"), P("y", None), None, True),
    (P(None, "y"), P("y", None), P(), False),
    (P("x", None), P(None, None), None, False),
    (P(None, None), P("y", None), None, False),
])
def test_a_product_contracting_a_dimension_split_on_both_sides(lhs, rhs, out, refused):
    a = jax.device_put(np.ones((8, 16), np.float32), NamedSharding(MESH, lhs))
    b = jax.device_put(np.ones((16, 4), np.float32), NamedSharding(MESH, rhs))
    given = None if out is None else NamedSharding(MESH, out)
    theirs = _jax(lambda a, b: jnp.matmul(a, b, out_sharding=given), a, b)
    assert (theirs == "ShardingTypeError") == refused
    spec_out = None if out is None else from_jax(given)
    program = _product(from_jax(lhs), from_jax(rhs), spec_out)
    verdict = explain_program(program, until="trace")
    if refused:
        assert _spec(verdict) == ("PROG-7", "trace", "ShardingTypeError"), verdict.message
    else:
        assert verdict.accepted, verdict.message


@checks("PROG-7")
@pytest.mark.parametrize("weight,mesh,refused", [
    ("numpy", None, True),            # the weight typed over no mesh: no out_sharding
    ("placed", None, False),          # the weight typed over the mesh: its type asked for
    ("numpy", MESH, False),           # a mesh set: the weight typed over it
])
def test_the_gradient_of_a_weight_contracts_the_split_batch(weight, mesh, refused):
    w = np.ones((16, 4), np.float32)
    if weight == "placed":
        w = jax.device_put(w, NamedSharding(MESH, P()))
    loss = lambda w, x: jnp.sum(jnp.tanh(x @ w))   # noqa: E731
    theirs = _jax(jax.grad(loss), w, X, mesh=mesh)
    assert (theirs == "ShardingTypeError") == refused
    if mesh is None:
        program = describe_program(jax.jit(loss), w, X)
    else:
        with jax.set_mesh(mesh):
            program = describe_program(jax.jit(loss), w, X)
    verdict = explain_program(grad_program(program, (0,)))
    if refused:
        assert _spec(verdict) == ("PROG-7", "trace", "ShardingTypeError"), verdict.message
        assert "('x',)" in verdict.message
    else:
        assert verdict.accepted, verdict.message


def test_a_transposed_product_contracts_the_kept_dimensions():
    """JAX's transpose of ``dot_general(x, w)`` for ``w`` contracts the cotangent with
    ``x`` over x's kept dimensions; for ``x`` over w's (the cotangent's last)."""
    numbers = (((2,), (0,)), ((), ()))   # x (8, 6, 16) @ w (16, 32)
    assert transposed_dimensions(numbers, (3, 2), 1) == (((0, 1), (0, 1)), ((), ()))
    assert transposed_dimensions(numbers, (3, 2), 0) == (((2,), (1,)), ((), ()))
    batched = (((2,), (1,)), ((0,), (0,)))   # b i j, b j k
    assert transposed_dimensions(batched, (3, 3), 0) == (((2,), (2,)), ((0,), (0,)))
    assert transposed_dimensions(batched, (3, 3), 1) == (((1,), (1,)), ((0,), (0,)))
