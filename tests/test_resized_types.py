"""A slice, dynamic_slice, pad or split of a dimension split over Explicit axes (PROG-9), a
cumulative reduction along one (PROG-10), a reshape (PROG-12) and a gather (PROG-13) of an
operand split over them, against JAX 0.10.2 on 8 CPU devices.

JAX types each by its operand's split and refuses while tracing (ShardingTypeError) a
result whose resized dimension the split does not divide, or a scan along a split
dimension (notes/jax-facts.md section 24, "Resized and scanned dimensions over Explicit axes"); a
reshape or a gather JAX types only in the forms PROG-12 and PROG-13 state, and the spec's
result split is held to JAX's type over a grid of shapes and splits.
describe_program describes the refused primitive (spec/bridge/refused_primitives.py) and
the spec refuses it by its rule, at the trace stage, with JAX's class, at the primitive's
path; the accepting side is traced, compiled and run by JAX and accepted by the spec with
the same result types and shardings.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection
from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec
from shardlaw.spec.program.description import Value
from shardlaw.spec.program.structural_types import gathered_split, reshaped_split

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
    # (8, 16) merged: only a leading split is kept; split into (8, 2, 8): 'y' (4 devices)
    # does not divide the leading factor 2
    "reshape-merged": (lambda a: jnp.sin(a).reshape(128), P(None, "y"), P("x"), "PROG-12",
                       "body[1]"),
    "reshape-split": (lambda a: jnp.sin(a).reshape(8, 2, 8), P(None, "y"), P("x"), "PROG-12",
                      "body[1]"),
    "take": (lambda a: jnp.take(jnp.sin(a), jnp.array([0, 2, 5]), axis=0), P("x"),
             P(None, "y"), "PROG-13", "body[1].jit.body[4]"),
    "index-by-array": (lambda a: jnp.sin(a)[:, jnp.array([1, 3])], P(None, "y"), P("x"),
                       "PROG-13", "body[5]"),
}


@checks("PROG-9", "PROG-10", "PROG-12", "PROG-13")
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


@checks("PROG-9", "PROG-10", "PROG-12", "PROG-13")
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


# --------------------------------------------------------------------------- PROG-12, PROG-13

SPEC_MESH = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)


def _typed(shape, entries):
    """The spec's value of ``shape`` split by ``entries`` over SPEC_MESH."""
    return dataclasses.replace(Value.typed(shape, mesh=SPEC_MESH), spec=PartitionSpec(*entries))


def _entries(aval):
    """A JAX type's split, one entry per dimension (a one-axis tuple as its name)."""
    spec = tuple(aval.sharding.spec) + (None,) * (len(aval.shape) - len(aval.sharding.spec))
    return tuple(None if e in (None, ()) else e[0] if isinstance(e, tuple) and len(e) == 1
                 else e for e in spec)


def _jax_typed(fun, *args):
    """The result's split JAX types, or the class of its refusal."""
    try:
        return _entries(jax.jit(fun).trace(*args).jaxpr.out_avals[0])
    except Exception as error:   # (what JAX raises is the fact compared)
        return type(error).__name__


def _spec_typed(rule, *args):
    try:
        return rule(*args)
    except Rejection as rejection:
        return rejection.jax_error


def _abstract(shape, entries, dtype=np.float32):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NS(EXPLICIT, P(*entries)))


# (operand shape, its split, new sizes): each form PROG-12 states, both ways
RESHAPES = [
    ((8, 16), ("x", None), (128,)), ((8, 16), (None, "y"), (128,)),
    ((8, 16), ("x", "y"), (128,)), ((8, 16), (("x", "y"), None), (128,)),
    ((8, 16), ("x", None), (4, 32)), ((8, 16), (None, "y"), (8, 8, 2)),
    ((8, 16), (None, "y"), (8, 2, 8)), ((8, 16), (("y", "x"), None), (4, 2, 16)),
    ((8, 16), (("x", "y"), None), (4, 2, 16)), ((8, 16), ("x", None), (8, 1, 16)),
    ((8, 1, 16), ("x", None, "y"), (8, 16)), ((2, 4, 16), (None, "y", None), (8, 16)),
    ((2, 4, 16), ("x", "y", None), (8, 16)), ((2, 4, 16), ("x", None, "y"), (8, 16)),
    ((2, 4, 16), ("x", None, "y"), (2, 64)), ((8, 16), ("y", None), (2, 4, 16)),
    ((8, 16), ("y", None), (4, 2, 16)), ((8, 16), (None, None), (16, 8)),
]


@checks("PROG-12")
@pytest.mark.parametrize("shape, split, new", RESHAPES)
def test_a_reshape_is_typed_or_refused_as_jax_types_it(shape, split, new):
    """The result's split PROG-12 derives is JAX's type of the reshape, and it refuses
    (ShardingTypeError) where JAX does."""
    jax_side = _jax_typed(lambda a: a.reshape(new), _abstract(shape, split))
    assert _spec_typed(reshaped_split, _typed(shape, split), new) == jax_side


@checks("PROG-12")
def test_a_reshape_splitting_and_merging_at_once_is_refused():
    """``(8, 16)`` split ``('x', None)`` reshaped to ``(16, 8)``, ``(4, 32)`` or
    ``(4, 2, 4, 4)``: neither one split dimension nor one merge; JAX refuses, so does the
    spec, by PROG-12 at the reshape's path."""
    for new in ((16, 8), (4, 32), (4, 2, 4, 4)):
        fun = (lambda a: jnp.sin(a).reshape(new))
        assert _jax_typed(fun, _put(P("x"))) == "ShardingTypeError"
        _, verdict, problems = held_to_jax(fun, _put(P("x")))
        assert not problems and (verdict.rule, verdict.path) == ("PROG-12", "body[1]"), problems


# (a function of an f32[8, 16] and int32 indices, the indices' shape)
GATHERS = {
    "take-rows": (lambda a, i: jnp.take(a, i, axis=0), (4,)),
    "take-columns": (lambda a, i: jnp.take(a, i, axis=1), (8,)),
    "index": (lambda a, i: a[i], (8, 2)),
    "vmapped-rows": (lambda a, i: jax.vmap(lambda r, k: r[k])(a, i), (8,)),
}


def _gather(name):
    """The gather JAX makes of GATHERS[name]: its operand's and indices' shapes, its
    parameters."""
    from jax._src import core

    def equations(jaxpr):
        for eq in jaxpr.eqns:
            yield eq
            for inner in core.jaxprs_in_params(eq.params):
                yield from equations(inner)

    fun, ishape = GATHERS[name]
    jaxpr = jax.make_jaxpr(fun)(np.ones((8, 16), np.float32), np.zeros(ishape, np.int32))
    (eq,) = [e for e in equations(jaxpr.jaxpr) if e.primitive.name == "gather"]
    return eq.invars[0].aval.shape, eq.invars[1].aval.shape, eq.params


def _splits(shape):
    """Every split of ``shape`` over 'x' and 'y' that divides it, each axis used once."""
    for entries in itertools.product((None, "x", "y"), repeat=len(shape)):
        named = [e for e in entries if e]
        if len(set(named)) == len(named) and not any(
                e and shape[k] % EXPLICIT.shape[e] for k, e in enumerate(entries)):
            yield entries


@checks("PROG-13")
@pytest.mark.parametrize("name", sorted(GATHERS))
def test_a_gather_is_typed_or_refused_as_jax_types_it(name):
    """Each gather JAX makes of a take or an indexing, its operand and indices split every
    way over the mesh: the result's split PROG-13 derives is the type JAX's abstract
    evaluation gives, and it refuses (ShardingTypeError) where JAX does."""
    from jax._src import core

    shape, ishape, params = _gather(name)
    outcomes = set()
    for split in _splits(shape):
        for isplit in _splits(ishape):
            avals = [core.ShapedArray(shape, np.float32,
                                      sharding=NS(EXPLICIT.abstract_mesh, P(*split))),
                     core.ShapedArray(ishape, np.int32,
                                      sharding=NS(EXPLICIT.abstract_mesh, P(*isplit)))]
            try:
                with jax.set_mesh(EXPLICIT):
                    jax_side = _entries(lax.gather_p.abstract_eval(*avals, **params)[0])
            except Exception as error:   # (what JAX raises is the fact compared)
                jax_side = type(error).__name__
            spec_side = _spec_typed(gathered_split, _typed(shape, split),
                                    _typed(ishape, isplit), params["dimension_numbers"],
                                    params["slice_sizes"])
            assert spec_side == jax_side, (split, isplit)
            outcomes.add(jax_side if isinstance(jax_side, str) else "typed")
    assert outcomes == {"typed", "ShardingTypeError"}
