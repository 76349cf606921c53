"""A value typed over another mesh than a shard_map's body, taken by a primitive inside it
(SMAP-29), against JAX 0.10.2 on 8 CPU devices (issue 32, items 4 and 5).

A ``jax.shard_map`` body that closes over a value keeps that value's type from outside.
Over an Explicit mesh, JAX refuses while tracing the first primitive of the body bound to
it: with every axis of the body's mesh Manual, "Closing over inputs to shard_map where the
input is sharded on `Explicit` axes is not implemented" (NotImplementedError, C1: a
slice, a ``pvary`` JAX puts before an elementwise operation, a primitive inside a jitted
``jnp`` helper); with some axes left Explicit (``axis_names``), "For primitive add,
context mesh ... should match the aval mesh ..." (ValueError, C2). describe_program
re-raised both; now it describes the program up to the refused primitive and the spec
refuses it by SMAP-29, at the trace stage, with JAX's class, at the primitive's path.
The accepting side: over an Auto mesh the value is resharded onto the body's mesh; over an
Explicit mesh a value passed through untouched, or passed as an argument, is accepted.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, held_to_jax

KINDS = jax.sharding.AxisType


def _mesh(kind):
    return jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(kind,) * 2)


EXPLICIT, AUTO = _mesh(KINDS.Explicit), _mesh(KINDS.Auto)


def _put(mesh, spec, shape=(8, 16)):
    return jax.device_put(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 5,
                          NS(mesh, spec))


def _over(mesh, body, in_specs=P("x"), out_specs=P("x"), **options):
    """``f(x, w)``: a shard_map of ``body(a, w)`` over ``mesh``, ``w`` closed over."""
    return lambda x, w: jax.shard_map(lambda a: body(a, w), mesh=mesh, in_specs=in_specs,
                                      out_specs=out_specs, **options)(x)


CONSTANT = _put(EXPLICIT, P(), (4, 16))   # a concrete array the body closes over

# name: (the function, its arguments' splits, JAX's class, the refused primitive's path)
REFUSED = {
    "slice-of-a-split-value": (_over(EXPLICIT, lambda a, w: a + lax.slice(w, (0, 0), (4, 16))),
                               "NotImplementedError", "body[0].shard_map.body[0]"),
    "jnp-helper": (_over(EXPLICIT, lambda a, w: a + jnp.sin(w)[:4]), "NotImplementedError",
                   "body[0].shard_map.body[0].jit.body[0]"),
    "pvary-of-a-constant": (_over(EXPLICIT, lambda a, w: lax.add(a, CONSTANT)),
                            "NotImplementedError", "body[0].shard_map.body[0]"),
    "through-an-inner-jit": (_over(EXPLICIT, lambda a, w: a + jax.jit(lambda v: v)(CONSTANT)),
                             "NotImplementedError", "body[0].shard_map.body[1].jit.body[0]"),
    "add-in-a-partly-manual-body": (
        _over(EXPLICIT, lambda a, w: lax.add(a, w), P(), P(), axis_names={"x"}),
        "ValueError", "body[0].shard_map.body[0]"),
    "sin-in-a-partly-manual-body": (
        _over(EXPLICIT, lambda a, w: jnp.sin(w), P(), P(), axis_names={"x"}),
        "ValueError", "body[0].shard_map.body[0].jit.body[0]"),
}


@checks("SMAP-29")
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_value_over_the_users_explicit_mesh_is_refused_as_jax_refuses_it(name):
    """JAX refuses while tracing with its class; the spec refuses the described primitive
    by SMAP-29 at the trace stage, with JAX's class, at its path, naming JAX's words."""
    fun, jax_error, path = REFUSED[name]
    args = (_put(EXPLICIT, P("x")), _put(EXPLICIT, P("x")))
    with pytest.raises(Exception) as raised:
        jax.jit(fun).trace(*args)
    assert type(raised.value).__name__ == jax_error
    _, verdict, problems = held_to_jax(fun, *args)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "SMAP-29", "trace", path, jax_error), verdict.message
    said = "Closing over inputs to shard_map" if jax_error == "NotImplementedError" else \
        "should match the aval mesh"
    assert said in verdict.message and said in str(raised.value)


# name: (the function of (x, w), the mesh, x's and w's splits)
ACCEPTED = {
    "resharded-onto-an-auto-body": (_over(AUTO, lambda a, w: a + lax.slice(w, (0, 0), (4, 16))),
                                    AUTO, P("x"), P("x")),
    "returned-untouched": (_over(EXPLICIT, lambda a, w: (a, w), out_specs=(P("x"), P())),
                           EXPLICIT, P("x"), P()),
    "passed-as-an-argument": (lambda x, w: jax.shard_map(
        lambda a, b: a + jnp.sin(b), mesh=EXPLICIT, in_specs=(P("x"), P("x")),
        out_specs=P("x"))(x, w), EXPLICIT, P("x"), P("x")),
    "argument-of-a-partly-manual-body": (lambda x, w: jax.shard_map(
        lambda a, b: lax.add(a, b), mesh=EXPLICIT, in_specs=(P(), P()), out_specs=P(),
        axis_names={"x"})(x, w), EXPLICIT, P(), P()),
}


@checks("SMAP-29")
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_a_value_typed_over_the_bodys_mesh_or_resharded_is_accepted_alike(name):
    """Traced, lowered, compiled and run by JAX; accepted by the spec with the same result
    shardings, committedness and types."""
    fun, mesh, x_split, w_split = ACCEPTED[name]
    _, verdict, problems = held_to_jax(fun, _put(mesh, x_split), _put(mesh, w_split))
    assert not problems and verdict.accepted, (problems, verdict.message)
