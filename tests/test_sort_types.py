"""A sort over Explicit axes (PROG-14), against JAX 0.10.2 on 8 CPU devices.

JAX types a ``sort`` by its operands: one typed over a mesh with Explicit axes must leave
the sorted dimension unsplit, and all such operands must be split alike, or JAX refuses
the call while tracing (ShardingTypeError; found by the steps property's fuzz layer,
where ``jnp.sort`` under ``vmap`` sorted a dimension the example's type split, and
describe_program re-raised JAX's error). describe_program describes the refused sort
(spec/bridge/refused_primitives.py) and the spec refuses it by PROG-14 at the trace
stage, with JAX's class, at the sort's path; under ``vmap`` the spec's vmap refuses the
example while tracing it, as JAX does. The accepting side is traced, compiled and run by
JAX and accepted by the spec with the same result types and shardings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import NS, P, held_to_jax

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _put(spec, shape=(8, 16)):
    return jax.device_put(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 7,
                          NS(EXPLICIT, spec))


def _sorted_pair(a):
    """lax.sort of keys and values typed alike (the values: the keys' cosine)."""
    return lax.sort((jnp.sin(a), jnp.cos(a)), dimension=1, num_keys=1)[1]


def _sorted_unlike(a):
    """lax.sort of keys split over 'x' and values resharded unsplit: split differently."""
    return lax.sort((jnp.sin(a), jax.sharding.reshard(a, NS(EXPLICIT, P()))), dimension=1,
                    num_keys=1)[1]


# name: (the function of an f32[8, 16], its operand's split refused, accepted, the sort's
# path)
CASES = {
    "sort-last": (lambda a: jnp.sort(jnp.sin(a), -1), P(None, "y"), P("x"),
                  "body[1].jit.body[0]"),
    "sort-first": (lambda a: jnp.sort(jnp.sin(a), 0), P("x"), P(None, "y"),
                   "body[1].jit.body[0]"),
    "argsort": (lambda a: jnp.argsort(jnp.sin(a), -1), P(None, "y"), P("x"),
                "body[1].jit.body[1]"),
    "lax-sort": (lambda a: lax.sort(jnp.sin(a), dimension=1), P(None, "y"), P("x"),
                 "body[1]"),
    "keys-and-values": (_sorted_pair, P(None, "y"), P("x"), "body[2]"),
}


@checks("PROG-14")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_sort_along_a_split_dimension_is_refused_as_jax_refuses_it(name):
    """JAX refuses while tracing (ShardingTypeError); the spec refuses the described sort
    by PROG-14 at the trace stage, with JAX's class, at its path."""
    fun, refused, _, path = CASES[name]
    with pytest.raises(Exception) as raised:
        jax.jit(fun).trace(_put(refused))
    assert type(raised.value).__name__ == "ShardingTypeError"
    assert "unsharded over the sorting dimension" in str(raised.value)
    _, verdict, problems = held_to_jax(fun, _put(refused))
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "PROG-14", "trace", path, "ShardingTypeError"), verdict.message


@checks("PROG-14")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_sort_along_an_unsplit_dimension_keeps_the_split(name):
    """The operand split along a dimension the sort keeps: accepted by both, the result
    keeping the operand's split (types and shardings compared by held_to_jax)."""
    fun, _, accepted, _ = CASES[name]
    _, verdict, problems = held_to_jax(fun, _put(accepted))
    assert not problems and verdict.accepted, (problems, verdict.message)
    out = jax.jit(fun).trace(_put(accepted)).jaxpr.out_avals[0]
    assert any(e is not None for e in out.sharding.spec)   # (the split is kept)


@checks("PROG-14")
def test_operands_split_differently_are_refused_as_jax_refuses_them():
    """Keys split over 'x' and values unsplit, sorted along the unsplit dimension 1: JAX
    refuses (the operands' shardings differ), and the spec by PROG-14's second check."""
    with pytest.raises(Exception) as raised:
        jax.jit(_sorted_unlike).trace(_put(P("x")))
    assert type(raised.value).__name__ == "ShardingTypeError"
    assert "equal shardings" in str(raised.value)
    _, verdict, problems = held_to_jax(_sorted_unlike, _put(P("x")))
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.jax_error) == (
        "PROG-14", "trace", "ShardingTypeError")
    assert "split differently" in verdict.message


@checks("PROG-14")
@pytest.mark.parametrize("spec, refused", [(P("x", "y"), True), (P("x"), False)])
def test_a_sort_under_vmap_is_typed_on_one_example_as_jax_types_it(spec, refused):
    """``jax.vmap(jnp.sort)`` over rows of an f32[8, 16]: JAX types the sort on one
    example, whose dimension 0 is the batched value's dimension 1. Split over 'y' there,
    JAX refuses while tracing and so does the spec's vmap, by PROG-14 with JAX's class;
    unsplit, both accept and type the result alike."""
    fun = jax.jit(jax.vmap(lambda r: jnp.sort(jnp.sin(r))))
    try:
        out = fun.trace(_put(spec)).jaxpr.out_avals[0]
        jax_error = None
    except Exception as error:  # noqa: BLE001 - compared
        jax_error = error
    assert (jax_error is not None) == refused
    if refused:
        assert type(jax_error).__name__ == "ShardingTypeError"
        with pytest.raises(Rejection) as raised:
            describe_program(fun, _put(spec))
        failure = raised.value.failure
        assert (failure.rule, raised.value.stage, failure.jax_error) == (
            "PROG-14", "trace", "ShardingTypeError")
        return
    _, verdict, problems = held_to_jax(fun, _put(spec))
    assert not problems and verdict.accepted, problems
    assert tuple(out.sharding.spec) == ("x", None)
