"""A shard_map called under a vmap inside the function, its batch split over Explicit axes
(issue 32), against JAX 0.10.2 on 8 CPU devices.

vmap traces the function on one example, in an axis environment that holds the Explicit
axes its batch is split over (``explicit_mesh_axis_names``). A shard_map called there
checks its call against that example: ``axis_names`` must leave those axes out (SMAP-1),
and where it is manual over every other axis of an Explicit mesh its in specs must be the
example's types (SMAP-17). The spec describes such a refused call batched, its checks kept
against the batched operands: it now holds the vmaps' Explicit axes and the dimensions
their batches take (``ShardMap.vmapped``, ``ShardMap.batch_dims``), and checks the example
as JAX did. Before (session 20): the first case below refused by SMAP-17 where JAX's is
SMAP-1; the others JAX's own error, undescribed.

Each refusal is held to JAX's (rule, stage, path, class), each neighbour JAX runs to its
results. Still open: a shard_map whose operands the vmap does not batch (all closed over)
is not batched by the spec's description, so JAX's SMAP-1 of it stands as JAX's error.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import NS, P, assert_refusal_case

MESH = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                         axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _data(spec, shape=(8, 8)):
    values = (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 5) / 5.0
    return lambda: jax.device_put(values, NS(MESH, spec))


def _doubled(t):
    return t * 2.0


def _scaled(s, t):
    return s * t.sum()


def _mapped(names, body=_doubled, in_specs=P("x"), out_specs=P("x")):
    return jax.shard_map(body, mesh=MESH, in_specs=in_specs, out_specs=out_specs,
                         axis_names=names)


def _inside(names, **options):
    """The shard_map under one vmap called inside the function."""
    return lambda a: jax.vmap(_mapped(names), **options)(a) * 1.0


def _inside_two(names):
    return lambda a: jax.vmap(jax.vmap(_mapped(names)))(a) * 1.0


def _inside_a_jit(names):
    return lambda a: jax.vmap(jax.jit(_mapped(names)))(a) * 1.0


def _closing_over(names):
    """The shard_map given the vmapped row and a value the vmapped function closes over."""
    both = _mapped(names, _scaled, (P("x"), P()), P("x"))
    return lambda a, c: jax.vmap(lambda r: both(r, c))(a)


SPLIT_Y = _data(P("y", "x"))
SPLIT_Y_ONLY = _data(P("y", None))


# name: (the function, the arguments, JAX's class, the rule, the path; None: both run it)
CASES = {
    # manual over the axes the batch leaves: JAX checks the example's type, P('x')
    "manual-x-batch-y": (_inside({"x"}), lambda: (SPLIT_Y(),), None, None, None),
    "default-axis-names-batch-y": (_inside(set()), lambda: (SPLIT_Y(),), None, None, None),
    "batch-unsplit-all-manual": (_inside({"x", "y"}), lambda: (_data(P(None, "x"))(),),
                                 None, None, None),
    "batch-at-dimension-1": (_inside({"x"}, in_axes=1), lambda: (_data(P("x", "y"))(),),
                             None, None, None),
    "two-vmaps-outer-split-y": (_inside_two({"x"}),
                                lambda: (_data(P("y", None, "x"), (8, 2, 8))(),),
                                None, None, None),
    "vmap-of-a-jit": (_inside_a_jit({"x"}), lambda: (SPLIT_Y(),), None, None, None),
    "closing-over-an-unsplit-value": (_closing_over({"x"}), lambda: (
        SPLIT_Y(), _data(P(), (8,))()), None, None, None),
    # axis_names naming an axis the batch is split over (SMAP-1, the call's path)
    "two-vmaps-axis-names-naming-y": (_inside_two({"x", "y"}),
                                      lambda: (_data(P("y", None, "x"), (8, 2, 8))(),),
                                      "ValueError", "SMAP-1", "body[0]"),
    "vmap-of-a-jit-axis-names-naming-y": (_inside_a_jit({"x", "y"}), lambda: (SPLIT_Y(),),
                                          "ValueError", "SMAP-1", "body[0].jit.body[0]"),
    # the in spec is not the example's type (SMAP-17), the batch dimension left out of both
    "two-vmaps-in-spec-not-the-type": (_inside_two({"x"}),
                                       lambda: (_data(P("y", None, None), (8, 2, 8))(),),
                                       "ValueError", "SMAP-17",
                                       "body[0].shard_map.in_specs[0]"),
    "batch-at-dimension-1-in-spec-not-the-type": (
        _inside({"x"}, in_axes=1), lambda: (_data(P(None, "y"))(),), "ValueError", "SMAP-17",
        "body[0].shard_map.in_specs[0]"),
    "batch-unsplit-in-spec-not-the-type": (_inside({"x", "y"}),
                                           lambda: (_data(P(None, None))(),),
                                           "ValueError", "SMAP-17",
                                           "body[0].shard_map.in_specs[0]"),
    "vmap-of-a-jit-in-spec-not-the-type": (_inside_a_jit({"x"}), lambda: (SPLIT_Y_ONLY(),),
                                           "ValueError", "SMAP-17",
                                           "body[0].jit.body[0].shard_map.in_specs[0]"),
    # a closed-over operand, unbatched, typed over the batch's axis: its type, P('y'), is
    # not its in spec P() (a batched operand's batch dimension is left out, this one's not)
    "closing-over-a-value-split-over-y": (_closing_over({"x"}), lambda: (
        SPLIT_Y(), _data(P("y"), (8,))()), "ValueError", "SMAP-17",
        "body[0].shard_map.in_specs[1]"),
}


@checks("SMAP-1", "SMAP-17")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_shard_map_under_a_vmap_inside_the_function_is_held_to_jax(name):
    assert_refusal_case(CASES[name])


def test_the_refusal_names_the_example():
    """The SMAP-17 refusal speaks of the example's spec and type, as JAX's does."""
    fun = _inside({"x"})
    with pytest.raises(ValueError, match=r"P\('x',\) does not match the specs of the "
                                         r"input: P\(None,\)"):
        jax.jit(fun).trace(SPLIT_Y_ONLY())
    from shardlaw.spec import explain_program
    verdict = explain_program(describe_program(fun, SPLIT_Y_ONLY()), until="trace")
    assert verdict.rule == "SMAP-17"
    assert "is P('x'), but its type is split by P(None)" in str(verdict)


def test_a_shard_map_of_closed_over_values_alone_is_left_open():
    """Open: every operand closed over, the vmap batches none, and the spec's description
    of the refused call does not see the vmap's Explicit axes (JAX checks axis_names
    against the mesh less y): JAX's SMAP-1 ValueError stands, undescribed."""
    closed = _data(P(), (8,))()
    only = _mapped({"x", "y"}, in_specs=P(), out_specs=P())

    def fun(a):
        return jax.vmap(lambda r: only(closed) + r)(a)
    with pytest.raises(ValueError, match="to be a subset of mesh.axis_names"):
        jax.jit(fun).trace(SPLIT_Y())
    with pytest.raises(ValueError, match="to be a subset of mesh.axis_names"):
        describe_program(fun, SPLIT_Y())
