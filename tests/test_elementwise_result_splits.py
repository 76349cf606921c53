"""PROG-8's (and PROG-7's) result check held to JAX 0.10.2 on 8 CPU devices: an elementwise
operation (or a product) whose result would split two dimensions over one mesh axis.

JAX types an n-ary elementwise primitive's result dimension by dimension from its operands'
(``broadcasting_sharding_rule``): a dimension one operand splits and another leaves unsplit
is split in the result. So ``f32[8@x,8] + f32[8,8@x]`` would be typed ``f32[8@x,8@x]``,
which no type may be; JAX refuses it while tracing ("produces an illegally sharded result",
a ShardingTypeError). The spec accepted it (it compared only the operands' splits of each
dimension), at the top of a program and in bodies, and ``describe_program`` re-raised JAX's
error. Each case below is held to JAX on both sides (traced, compiled and run where JAX
accepts): refused by PROG-8 at the trace stage, with JAX's class, at the operation's path;
splits over different axes on different dimensions, a ``clamp`` (typed as its operand
whatever its bounds) and a ``select_n`` (typed as its cases) accepted alike.

A ``dot_general`` given no ``out_sharding`` is refused by the same check of JAX's (its result
the batch dimensions, then each operand's free ones, as the operands split them:
``f32[8@y,8] @ f32[8,8@y]``); PROG-7 states it too, held to JAX at the end of the file.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, held_to_jax

lax = jax.lax
EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)
MIXED = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                          axis_types=(jax.sharding.AxisType.Explicit,
                                      jax.sharding.AxisType.Auto))


def _put(spec, shape=(8, 8), mesh=EXPLICIT):
    return jax.device_put(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 3,
                          NS(mesh, spec))


def _rows_and_columns(mesh=EXPLICIT):
    return _put(P("x", None), mesh=mesh), _put(P(None, "x"), mesh=mesh)


def _in_scan(a, b):
    return lax.scan(lambda c, _: (c + b, None), a, None, length=2)[0]


def _in_fori(a, b):
    return lax.fori_loop(0, 2, lambda i, c: c * b, a)


def _in_cond(a, b):
    return lax.cond(a.sum() > 0, lambda: a - b, lambda: a)


def _under_grad(a, b):
    return jax.grad(lambda a: (jnp.sin(a) * b).sum())(a)


# name: (the function, its arguments, the path of the refused operation)
REFUSED = {
    "add": (lambda a, b: a + b, _rows_and_columns, "body[0]"),
    "lax.mul": (lax.mul, _rows_and_columns, "body[0]"),
    "comparison": (lambda a, b: a > b, _rows_and_columns, "body[0]"),
    "atan2": (lax.atan2, _rows_and_columns, "body[0]"),
    "in-a-jit": (jax.jit(lambda a, b: a - b), _rows_and_columns, "body[0].jit.body[0]"),
    "then-a-scalar": (lambda a, b: (a + b) * 2.0, _rows_and_columns, "body[0]"),
    "jnp.clip-max": (lambda a, b: jnp.clip(b, a, a + 1), _rows_and_columns,
                     "body[1].jit.body[0].jit.body[0]"),
    # jnp broadcasts a lower-rank operand to f32[1,8@x] (its leading dimension unsplit)
    "broadcast-vector": (lambda a, b: a + b, lambda: (_put(P("x", None)), _put(P("x"), (8,))),
                         "body[1]"),
    # a size-1 dimension of one operand: the other's split of it stands
    "size-1-dimension": (lambda a, b: a + b,
                         lambda: (_put(P("x", None), (8, 1)), _put(P(None, "x"))), "body[0]"),
    "tuple-of-axes": (lambda a, b: a + b, lambda: (_put(P(("x", "y"), None)), _put(P(None, "x"))),
                      "body[0]"),
    "rank-3": (lambda a, b: a + b, lambda: (_put(P("x", None, None), (8, 4, 8)),
                                            _put(P(None, None, ("y", "x")), (8, 4, 8))),
               "body[0]"),
    "mixed-mesh": (lambda a, b: a + b, lambda: _rows_and_columns(MIXED), "body[0]"),
    "in-a-scan": (_in_scan, _rows_and_columns, "body[0].scan.body[0].jit.body[0]"),
    "in-a-fori_loop": (_in_fori, _rows_and_columns, "body[0].scan.body[1].jit.body[0]"),
    "in-a-cond-branch": (_in_cond, _rows_and_columns,
                         "body[3].cond.body[0].jit.body[0].jit.body[0]"),
    "under-grad": (_under_grad, _rows_and_columns, "body[2].jit.body[0]"),
    "under-a-vmap-in-the-function": (
        lambda a, b: jax.vmap(jnp.add)(a, b),
        lambda: (_put(P(None, "x", None), (4, 8, 8)), _put(P(None, None, "x"), (4, 8, 8))),
        "body[0].jit.body[0]"),
}

# name: (the function, its arguments): typed by JAX, accepted by both
ACCEPTED = {
    "different-axes-on-different-dimensions": (
        lambda a, b: a + b, lambda: (_put(P("x", None)), _put(P(None, "y")))),
    "broadcast-vector-over-another-axis": (
        lambda a, b: a * b, lambda: (_put(P("x", None)), _put(P("y"), (8,)))),
    "one-entry-tuple-and-name": (lambda a, b: a + b,
                                 lambda: (_put(P(("x",), None)), _put(P("x", None)))),
    # y is Auto: not in the types, so the result names x once
    "mixed-mesh-auto-axis": (lambda a, b: a + b,
                             lambda: (_put(P("x", None), mesh=MIXED),
                                      _put(P(None, "y"), mesh=MIXED))),
    # clamp is typed as its operand whatever its bounds' splits
    "clamp": (lax.clamp, lambda: (_put(P("x", None)), _put(P(None, "x")), _put(P("y", None)))),
    # (the carry keeps its type: LOOP-1 otherwise, as JAX)
    "in-a-scan-over-different-axes": (_in_scan, lambda: (_put(P("x", "y")), _put(P(None, "y")))),
}


def _refused_as_jax(fun, args, path, rule, over):
    """JAX refuses ``fun`` while tracing (an illegally sharded result), and the spec by
    ``rule`` at its path, stage and class, naming the axis split twice."""
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(*args)
    assert type(refused.value).__name__ == "ShardingTypeError"
    assert "illegally sharded result" in str(refused.value)
    _, verdict, problems = held_to_jax(fun, *args)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        rule, "trace", path, "ShardingTypeError"), verdict.message
    assert f"would split two dimensions of its result {over}" in verdict.message


@checks("PROG-8")
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_result_splitting_two_dimensions_over_one_axis_is_refused_as_jax_refuses_it(name):
    fun, arguments, path = REFUSED[name]
    _refused_as_jax(fun, arguments(), path, "PROG-8", "over 'x'")


@checks("PROG-8")
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_splits_jax_types_are_accepted_by_both(name):
    fun, arguments = ACCEPTED[name]
    _, verdict, problems = held_to_jax(fun, *arguments())
    assert not problems, problems
    assert verdict.accepted, verdict.message


@checks("PROG-8")
def test_the_result_of_splits_over_different_axes_is_typed_as_jax_types_it():
    """``P('x', None) + P(None, 'y')`` is typed ``P('x', 'y')`` by JAX and by the
    description the spec reads (so no axis is named twice, and nothing is refused)."""
    from shardlaw.spec.bridge.program import describe_program
    a, b = _put(P("x", None)), _put(P(None, "y"))
    traced = jax.jit(lambda a, b: a + b).trace(a, b).jaxpr.out_avals[0]
    assert tuple(traced.sharding.spec) == ("x", "y")
    program = describe_program(lambda a, b: a + b, a, b)
    assert tuple(program.equations[0].results[0].spec) == ("x", "y")


# --------------------------------------------------------------------------- PROG-7's twin

def _scanned_matmul(a, b):
    return lax.scan(lambda c, _: (c @ b, None), a, None, length=2)[0]


# name: (the function, its arguments, the path of the refused product); a dot_general's
# result is typed as its batch dimensions, then the lhs's free ones, then the rhs's
PRODUCTS = {
    "matmul": (jnp.matmul, lambda: (_put(P("y", None)), _put(P(None, "y"))), "body[0]"),
    "lax.dot_general": (lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))),
                        lambda: (_put(P("y", None)), _put(P(None, "y"))), "body[0]"),
    "einsum-over-a-tuple": (lambda a, b: jnp.einsum("ij,jk->ik", a, b),
                            lambda: (_put(P(("x", "y"), None)), _put(P(None, "x"))),
                            "body[0]"),
    "in-a-scan": (_scanned_matmul, lambda: (_put(P("y", None)), _put(P(None, "y"))),
                  "body[0].scan.body[0].jit.body[0]"),
}
PRODUCTS_ACCEPTED = {
    "other-axes": (jnp.matmul, lambda: (_put(P("x", None)), _put(P(None, "y")))),
    "given-out_sharding": (
        lambda a, b: jnp.matmul(a, b, out_sharding=NS(EXPLICIT, P("y", None))),
        lambda: (_put(P("y", None)), _put(P(None, "y")))),
}


@checks("PROG-7")
@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_a_product_splitting_two_dimensions_over_one_axis_is_refused_as_jax_refuses_it(name):
    fun, arguments, path = PRODUCTS[name]
    _refused_as_jax(fun, arguments(), path, "PROG-7", "over")


@checks("PROG-7")
@pytest.mark.parametrize("name", sorted(PRODUCTS_ACCEPTED))
def test_a_product_jax_types_is_accepted_by_both(name):
    fun, arguments = PRODUCTS_ACCEPTED[name]
    _, verdict, problems = held_to_jax(fun, *arguments())
    assert not problems, problems
    assert verdict.accepted, verdict.message
