"""A gather's collectives (COLL-4), held to the compiled CPU HLO on 8 devices: indexing a
split dimension XLA gathers on each shard, masks and all-reduces, which the spec leaves open;
indexing an unsplit one communicates nothing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec


@checks("COLL-4")
@pytest.mark.parametrize("spec, axis, indexed_split", [
    (("x", "y", None), 1, True), (("x", "y", None), 0, True), ((None, "y", None), 0, False),
    (("x", None, None), 2, False)])
def test_a_gather_indexing_a_split_dimension_is_left_open(spec, axis, indexed_split):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    a = jax.device_put(jnp.ones((4, 4, 8)), jax.sharding.NamedSharding(mesh, P(*spec)))

    i = jax.device_put(jnp.array([1, 2]), jax.sharding.NamedSharding(mesh, P()))

    def f(a, i):
        return jnp.take(a, i, axis=axis)
    real = [c.kind for c in collectives_in_hlo(jax.jit(f).lower(a, i).compile().as_text())]
    step = explain_program(describe_program(f, a, i)).collectives
    if indexed_split:
        assert "all-reduce" in real and "all-gather" not in real
        assert not step.complete and step.undetermined.rule == "COLL-4"
        assert "gather indexing a split dimension" in step.undetermined.why
    else:
        assert step.complete and real == [c.kind for c in step]
