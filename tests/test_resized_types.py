"""A slice, dynamic_slice, pad or split of a dimension split over Explicit axes (PROG-9) and
a cumulative reduction along one (PROG-10), against JAX 0.10.2 on 8 CPU devices.

JAX types each by its operand's split and refuses while tracing (ShardingTypeError) a
result whose resized dimension the split does not divide, or a scan along a split
dimension (notes/jax-facts.md section 24, "Resized and scanned dimensions over Explicit axes").
describe_program describes the refused primitive (spec/bridge/refused_primitives.py) and
the spec refuses it by its rule, at the trace stage, with JAX's class, at the primitive's
path; the accepting side is traced, compiled and run by JAX and accepted by the spec with
the same result types and shardings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, held_to_jax

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _put(spec):
    return jax.device_put(np.ones((8, 16), np.float32), NS(EXPLICIT, spec))


# name: (the function of an f32[8, 16], its operand's split refused, accepted, the rule,
# the refused primitive's path)
CASES = {
    "slice": (lambda a: jnp.sin(a)[0:3], P("x"), P(None, "y"), "PROG-9", "body[1]"),
    "slice-of-both-axes": (lambda a: jnp.sin(a)[:, 0:4], P(None, ("x", "y")), P(None, "y"),
                           "PROG-9", "body[1]"),
    "index": (lambda a: jnp.sin(a)[0], P("x"), P(None, "y"), "PROG-9", "body[1]"),
    "dynamic_slice": (lambda a: lax.dynamic_slice_in_dim(jnp.sin(a), 2, 3, 0), P("x"),
                      P(None, "y"), "PROG-9", "body[1]"),
    "pad": (lambda a: jnp.pad(jnp.sin(a), ((0, 1), (0, 0))), P("x"), P(None, "y"),
            "PROG-9", "body[1].jit.body[1]"),
    "split": (lambda a: jnp.split(jnp.sin(a), [3], axis=0)[0], P("x"), P(None, "y"),
              "PROG-9", "body[1]"),
    "cumsum": (lambda a: jnp.cumsum(jnp.sin(a), axis=0), P("x"), P(None, "y"), "PROG-10",
               "body[1].jit.body[0]"),
    "cummax": (lambda a: lax.cummax(jnp.sin(a), axis=0), P("x"), P(None, "y"), "PROG-10",
               "body[1]"),
    "cumlogsumexp": (lambda a: lax.cumlogsumexp(jnp.sin(a), axis=1), P(None, "y"), P("x"),
                     "PROG-10", "body[1]"),
}


@checks("PROG-9", "PROG-10")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_resized_or_scanned_split_dimension_is_refused_as_jax_refuses_it(name):
    """JAX refuses while tracing (ShardingTypeError); the spec refuses the described
    primitive by its rule at the trace stage, with JAX's class, at its path."""
    fun, refused, _, rule, path = CASES[name]
    with pytest.raises(Exception) as raised:
        jax.jit(fun).trace(_put(refused))
    assert type(raised.value).__name__ == "ShardingTypeError"
    _, verdict, problems = held_to_jax(fun, _put(refused))
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        rule, "trace", path, "ShardingTypeError"), verdict.message


@checks("PROG-9", "PROG-10")
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_primitive_over_another_split_is_typed_as_jax_types_it(name):
    """The operand split over a dimension the primitive keeps whole: accepted by both, the
    result keeping the operand's split (types and shardings compared by held_to_jax)."""
    fun, _, accepted, _, _ = CASES[name]
    _, verdict, problems = held_to_jax(fun, _put(accepted))
    assert not problems and verdict.accepted, (problems, verdict.message)
    out = jax.jit(fun).trace(_put(accepted)).jaxpr.out_avals[0]
    assert any(e is not None for e in out.sharding.spec)   # (the split is kept)


@checks("PROG-9")
def test_a_slice_of_a_split_dimension_that_stays_divisible_keeps_its_split():
    """``a[1:5]`` of an ``f32[8@x, 16]``: a resized dimension 'x' (2 devices) still divides
    is typed ``f32[4@x, 16]`` by JAX, and the spec accepts it alike; ``a[0:8:2]`` too."""
    for fun in (lambda a: jnp.sin(a)[1:5], lambda a: jnp.sin(a)[0:8:2]):
        out = jax.jit(fun).trace(_put(P("x"))).jaxpr.out_avals[0]
        assert (out.shape, tuple(out.sharding.spec)) == ((4, 16), ("x", None))
        _, verdict, problems = held_to_jax(fun, _put(P("x")))
        assert not problems and verdict.accepted, problems
