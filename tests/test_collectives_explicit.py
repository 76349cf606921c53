"""What a step communicates where XLA's own passes decide (COLL-7's combiner) and over
meshes with Explicit axes (inner jits, shard_maps, reshards: COLL-11, COLL-12; a reshard
beside Auto axes: PROP-9, PROP-10), held to the compiled CPU HLO on 8 devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from shardlaw.compiled_hlo import collectives_in_hlo as collectives_of
from shardlaw.properties.collectives_harness import compare_collectives
from shardlaw.properties.propagation_harness import Recipe
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
TYPES = {"A": jax.sharding.AxisType.Auto, "E": jax.sharding.AxisType.Explicit}


def _cube(types):
    return jax.make_mesh((2, 2, 2), ("x", "y", "z"),
                         axis_types=tuple(TYPES[t] for t in types))


def _both(f, mesh, *placed):
    """The compiled module's collectives of ``f`` and the spec's, each as sorted
    (kind, groups, bytes per device), and the spec's verdict."""
    args = [jax.device_put(jnp.ones(shape), jax.sharding.NamedSharding(mesh, spec))
            for shape, spec in placed]
    real = collectives_of(jax.jit(f).lower(*args).compile().as_text())
    verdict = explain_program(describe_program(f, *args))
    return (sorted((c.kind, tuple(sorted(map(tuple, c.replica_groups))), c.bytes_per_device)
                   for c in real),
            sorted((c.kind, tuple(sorted(c.replica_groups.groups())), c.bytes_per_device)
                   for c in verdict.collectives), verdict)


# two sums over 'y', each of its own operand: combined where XLA lists the groups alike
COMBINED = [
    (("y", "z"), ("y", None), 2),   # the groups listed (z, x) and (x, z): two
    (("y", "x"), ("y", None), 1),   # (x, z) both: one
    (("y", None), ("y", None), 1),
    (("z", None), ("z", "y"), 2),   # (x, y) and (y, x)
    (("z", "x"), ("z", None), 1),
    ((("y", "z"), None), (("z", "y"), None), 2),   # the members of each group reordered
]


@pytest.mark.parametrize("types", ["AAA", "EAA"])
@pytest.mark.parametrize("first, second, count", COMBINED)
def test_all_reduces_combine_where_xla_lists_their_groups_alike(types, first, second, count):
    """XLA's CPU all-reduce combiner keys on the replica groups in the order it lists them,
    whatever the mesh axes' types: the same groups in another order stay apart (COLL-7)."""
    real, said, verdict = _both(lambda a, b: (a.sum(0), b.sum(0)), _cube(types),
                                ((4, 4), P(*first)), ((4, 4), P(*second)))
    assert verdict.collectives.complete
    assert [k for k, _, _ in real] == ["all-reduce"] * count
    assert said == real


def test_a_matmul_s_all_reduce_joins_a_sum_listed_alike():
    """A matmul contracting 'y' whose result is split over 'z' lists its groups (z, x), as
    the sum of ``P('y', 'z')`` does: one all-reduce; beside a sum of ``P('y')``, two."""
    mesh = _cube("AAA")
    for other, count in ((("y", "z"), 1), (("y", None), 2)):
        real, said, _ = _both(lambda a, b, c: (a @ b, c.sum(0)), mesh, ((4, 4), P("z", "y")),
                              ((4, 4), P("y", None)), ((4, 4), P(*other)))
        assert len(real) == count and said == real


def test_the_deep_run_s_combiner_disagreement_agrees():
    """The open disagreement of the second deep run (notes/deep-runs-2026-12-06.md): sums
    of ``P('y', 'z')`` and ``P('y', None)`` over a mesh with Explicit 'x', after an MLP's
    gradient: two all-reduces (8 and 16 bytes), as XLA keeps them."""
    recipe = Recipe(mesh=(2, 2, 2), reversed_devices=False, inputs=(
        ((4, 4), ("y", "z")), ((4, 4), ("y", None)), ((4, 4), ("z", None))),
        steps=(("input", (), 0), ("input", (), 1), ("input", (), 2),
               ("block", (0, 1, 2), "mlp_grad"), ("unary", (3,), "exp"),
               ("reduce", (0,), ("sum", 0)), ("reduce", (1,), ("sum", 0))),
        outputs=(5, 6), axis_types="EAA")
    outcome = compare_collectives(recipe)
    assert outcome.why is None and not outcome.disagreements
    assert sorted(size for kind, _, size in outcome.real if kind == "all-reduce") == [8, 16]
