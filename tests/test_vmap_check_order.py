"""Which refusal comes first under ``vmap``: the spec's order is JAX 0.10.2's (issue 32).

JAX's vmap of a Python function traces it under vmap, equation by equation: a call's own
checks on one example's types (a loop's body traced, a constraint's fit), then its batching
and the typing of each equation the batching rule binds, before the next call. vmap of a
jit (``jax.vmap(jax.jit(f))``) traces ``f`` whole on the example first, then batches its
body equation by equation, typing each batched equation as it binds it. So a refusal only
the example meets (a constraint of rank 2 in a while loop's body, on a rank-1 example)
comes before a refusal only batching meets (a cond whose batched predicate is unsplit and
whose cases are split over Explicit axes: select_n's ShardingTypeError; a constraint using
vmap's spmd_axis_name: WSC-7) when it is earlier in the program, or whenever the function
is a jit; after it otherwise. Each pair is held to JAX both ways round: JAX's class and
its message say which refusal JAX made, and the spec refuses by that one's rule.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.program.explain import explain_program

lax = jax.lax
NS, P = jax.sharding.NamedSharding, jax.sharding.PartitionSpec
AUTO, EXPLICIT = jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit


def _mesh(*kinds):
    return jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=kinds)


def _rows(mesh):
    """A while loop whose body constrains its carry to rank 2 (a rank-1 example: WSC-4)."""
    rows = lambda h: lax.with_sharding_constraint(h, NS(mesh, P(None, "x")))
    return lambda h: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, rows(
        c[1] * 1.5)), (0, h))[1]


def _cond(h):
    """A cond on a predicate vmap batches: a select_n whose cases keep h's split."""
    return lax.cond(h.sum() > 0, lambda v: -v, lambda v: v, h)


def _on_x(mesh):
    """A constraint over x (WSC-7 under vmap with spmd_axis_name 'x')."""
    return lambda h: lax.with_sharding_constraint(h, NS(mesh, P("x")))


def _chain(*ops):
    def f(h):
        for op in ops:
            h = op(h)
        return h
    return f


def _placed(mesh, shape=(4, 8)):
    spec = (None,) * (len(shape) - 1) + ("y",)
    return jax.device_put(np.ones(shape, np.float32), NS(mesh, P(*spec)))


SELECT = ("ShardingTypeError", "PROG-8", "select `which`")
RANK = ("ValueError", "WSC-4", "incompatible with its sharding annotation")
SPMD = ("ValueError", "WSC-7", "spmd_axis_name")


def _cases():
    explicit, auto, mixed = _mesh(EXPLICIT, EXPLICIT), _mesh(AUTO, AUTO), _mesh(AUTO, EXPLICIT)
    return {
        # a Python function: the first in program order
        "batched-cond-then-example-loop": (
            jax.vmap(_chain(_cond, _rows(explicit))), _placed(explicit), SELECT),
        "example-loop-then-batched-cond": (
            jax.vmap(_chain(_rows(explicit), _cond)), _placed(explicit), RANK),
        "two-vmaps-batched-cond-then-example-loop": (
            jax.vmap(jax.vmap(_chain(_cond, _rows(explicit)))),
            _placed(explicit, (2, 4, 8)), SELECT),
        "spmd-constraint-then-example-loop": (
            jax.vmap(_chain(_on_x(auto), _rows(auto)), spmd_axis_name="x"), _placed(auto),
            SPMD),
        "example-loop-then-spmd-constraint": (
            jax.vmap(_chain(_rows(auto), _on_x(auto)), spmd_axis_name="x"), _placed(auto),
            RANK),
        "batched-cond-then-spmd-constraint": (
            jax.vmap(_chain(_cond, _on_x(mixed)), spmd_axis_name="x"), _placed(mixed),
            SELECT),
        # a jit: its example traced whole first, then its body batched in order
        "jit-batched-cond-then-example-loop": (
            jax.vmap(jax.jit(_chain(_cond, _rows(explicit)))), _placed(explicit), RANK),
        "jit-spmd-constraint-then-example-loop": (
            jax.vmap(jax.jit(_chain(_on_x(auto), _rows(auto))), spmd_axis_name="x"),
            _placed(auto), RANK),
        "jit-batched-cond-then-spmd-constraint": (
            jax.vmap(jax.jit(_chain(_cond, _on_x(mixed))), spmd_axis_name="x"),
            _placed(mixed), SELECT),
        "jit-spmd-constraint-then-batched-cond": (
            jax.vmap(jax.jit(_chain(_on_x(mixed), _cond)), spmd_axis_name="x"),
            _placed(mixed), SPMD),
    }


def _spec_refusal(fun, x):
    """(rule, stage, JAX's class) of the spec's refusal: raised while describing (the
    spec's vmap) or explain_program's verdict."""
    try:
        verdict = explain_program(describe_program(fun, x))
    except Rejection as refusal:
        return refusal.rule, refusal.stage, refusal.jax_error
    assert not verdict.accepted
    return verdict.rule, verdict.stage, verdict.jax_error


@checks("PROG-8", "WSC-4", "WSC-7")
@pytest.mark.parametrize("name", sorted(_cases()))
def test_the_first_refusal_under_vmap_is_jaxs(name):
    fun, x, (error, rule, words) = _cases()[name]
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(x)
    assert type(refused.value).__name__ == error and words in str(refused.value)
    assert _spec_refusal(fun, x) == (rule, "trace", error)


def test_each_refusal_of_a_pair_is_refused_alone_and_its_neighbour_accepted():
    """Each refusal of the pairs above is one JAX makes alone too (the order tests compare
    two refusals), and a vmapped function with neither is accepted by both."""
    explicit = _mesh(EXPLICIT, EXPLICIT)
    x = _placed(explicit)
    for alone, (error, rule, _) in ((_cond, SELECT), (_rows(explicit), RANK)):
        with pytest.raises(Exception) as refused:
            jax.jit(jax.vmap(alone)).trace(x)
        assert type(refused.value).__name__ == error
        assert _spec_refusal(jax.vmap(alone), x) == (rule, "trace", error)
    accepted = jax.vmap(_chain(lambda h: -h, _rows(_mesh(AUTO, AUTO))))
    y = _placed(_mesh(AUTO, AUTO), (4, 8, 8))
    jax.jit(accepted).trace(y)
    assert explain_program(describe_program(accepted, y)).accepted
