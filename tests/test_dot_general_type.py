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
from shardlaw.spec import Rejection, explain_program, from_jax, grad_program
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


def _grad_types(loss, args, argnums):
    """(JAX's outcome of ``jax.grad(jax.jit(loss))``, the spec's for grad_program of the
    description), no mesh set: the results' types where it lowers, else the stage and the
    class of the error."""
    from shardlaw.properties.program_harness import type_of_aval

    stage = "trace"
    try:
        traced = jax.jit(jax.grad(jax.jit(loss), argnums)).trace(*args)
        stage = "lower"
        traced.lower()
    except Exception as error:  # noqa: BLE001 - compared
        theirs = (stage, type(error).__name__)
    else:
        theirs = tuple(type_of_aval(a) for a in traced.jaxpr.out_avals)
    try:
        verdict = explain_program(grad_program(describe_program(jax.jit(loss), *args),
                                               argnums))
    except Rejection as error:   # refused while grad traces the function
        return theirs, (error.stage, error.jax_error)
    ours = tuple(verdict.out_types) if verdict.accepted else (verdict.stage, verdict.jax_error)
    return theirs, ours


W = np.ones((16, 32), np.float32)   # a weight JAX types over no mesh: a numpy array
H = np.ones((8, 6, 16), np.float32)


@checks("PROG-7")
@pytest.mark.parametrize("split,einsum", [
    (P(None, None, "y"), "bsd,dh->bsh"),   # the weight's gradient split as x's features
    (P("x", None, "y"), "bsd,dh->bsh"),    # the batch contracted, split on one side
    (P(None, "x", "y"), "bsd,dh->bsh"),
    (P(None, None, None), "bsd,dh->bsh"),  # nothing split: over the mesh, unsplit
    (P("x", None, "y"), "bsd,bdh->bsh"),   # a batch dimension kept
    (P(None, "y", None), "bsd,hd->bsh"),   # the weight contracted on its last dimension
])
def test_the_gradient_of_an_unplaced_weight_is_typed_by_the_product(split, einsum):
    """A weight typed over no mesh (a numpy array, no mesh set): JAX's transpose asks for
    no out_sharding, so the weight's gradient is split as the cotangent and the split
    activations' product is, transposed back to the weight's dimensions (not the
    weight's own type). Its gradient then typed over the mesh, with no input placing the
    program, JAX refuses it when lowering (AD-9): the activations are given placed where
    the case is not that one."""
    sharding = NamedSharding(MESH, split)
    w = W if einsum == "bsd,dh->bsh" else (
        np.ones((8, 16, 32), np.float32) if einsum.startswith("bsd,bdh") else W.T.copy())

    def loss(w, x):
        h = jax.sharding.reshard(x, sharding)
        return jnp.sum(jnp.sin(jnp.einsum(einsum, h, w)))
    x = H if split == P(None, None, None) else jax.device_put(H, NamedSharding(MESH, P()))
    theirs, ours = _grad_types(loss, (w, x), (0,))
    assert ours == theirs
    theirs, ours = _grad_types(loss, (w, H), (0,))   # no input placed
    assert ours == theirs


@checks("PROG-7")
def test_the_gradient_of_unplaced_activations_is_typed_by_the_product():
    """The other side: activations typed over no mesh, a weight split over 'y' on the
    dimension they contract (their gradient split as the weight is there); split on its
    free dimension, the cotangent and the weight both split what the gradient contracts
    (ShardingTypeError while tracing, both sides)."""
    w = jax.device_put(W, NamedSharding(MESH, P(None, "y")))
    theirs, ours = _grad_types(lambda x, w: jnp.sum(jnp.sin(x @ w)), (H, w), (0,))
    assert ours == theirs == ("trace", "ShardingTypeError")
    w = jax.device_put(W, NamedSharding(MESH, P("y", None)))
    theirs, ours = _grad_types(lambda x, w: jnp.sum(jnp.sin(x @ w)), (H, w), (0,))
    assert ours == theirs
    assert "split" in repr(theirs[0])   # (JAX splits it: not the activations' type)
