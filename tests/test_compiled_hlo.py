"""``shardlaw.compiled_hlo``: the collectives of compiled HLO text, read from real programs.

Each program is compiled by JAX 0.10.2 on 8 CPU devices and its HLO text read back; what
the reader says is held to what the program's shardings mean (the devices that share a mesh
line, by their positions among the executable's devices), worked out here with numpy, not
with the reader. The three forms XLA writes replica groups in are each met: explicit lists
(a psum in a shard_map), the mesh-axes form (what the partitioner inserts for a matmul
whose contracted dimension is split, and for a resharding constraint) and the iota form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from shardlaw.compiled_hlo import (
    KINDS, Collective, collectives_in_hlo, total_bytes_per_device,
)

AUTO = (AxisType.Auto, AxisType.Auto)
MESH = jax.make_mesh((2, 4), ("x", "y"), axis_types=AUTO)
# positions 0..7 of the executable's devices, laid out as the mesh lays them
POSITIONS = np.arange(8).reshape(2, 4)


def _lines(positions: np.ndarray, axis: int) -> set[tuple[int, ...]]:
    """The groups of positions that differ only along mesh ``axis``."""
    return {tuple(line) for line in np.moveaxis(positions, axis, -1).reshape(-1, positions.shape[axis])}


def _compiled(f, *args) -> str:
    return jax.jit(f).lower(*args).compile().as_text()


def test_a_psum_in_a_shard_map_is_an_all_reduce_over_the_mesh_lines_it_names():
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(MESH, P("x", "y")))
    f = jax.shard_map(lambda b: jax.lax.psum(b, "y"), mesh=MESH, in_specs=P("x", "y"),
                      out_specs=P("x"))
    [c] = collectives_in_hlo(_compiled(f, x))
    assert c.kind == "all-reduce" and set(c.replica_groups) == _lines(POSITIONS, 1)
    assert (c.shape, c.dtype, c.bytes_per_device) == ((8, 8), "float32", 8 * 8 * 4)
    assert c.operand_shapes == ((8, 8),) and c.op_name.endswith("psum_invariant")


def test_a_matmul_with_its_contracted_dimension_split_sums_over_that_axis():
    a = jax.device_put(jnp.ones((16, 32)), NamedSharding(MESH, P("x", "y")))
    b = jax.device_put(jnp.ones((32, 64), jnp.bfloat16), NamedSharding(MESH, P("y", None)))
    found = collectives_in_hlo(_compiled(lambda a, b: a @ b, a, b))
    [c] = found
    # the partial products of each x-row's 4 devices are added where they meet
    assert c.kind == "all-reduce" and set(c.replica_groups) == _lines(POSITIONS, 1)
    assert (c.shape, c.dtype, c.bytes_per_device) == ((8, 64), "float32", 8 * 64 * 4)
    assert "dot_general" in c.op_name and total_bytes_per_device(found) == 2048


def test_a_resharding_constraint_gathers_over_a_mesh_whose_devices_are_reordered():
    order = [3, 1, 2, 0, 7, 5, 6, 4]
    mesh = jax.sharding.Mesh(np.array(jax.devices())[order].reshape(2, 4), ("x", "y"),
                             axis_types=AUTO)
    v = jax.device_put(jnp.arange(64.0).reshape(8, 8), NamedSharding(mesh, P(("y", "x"))))
    text = _compiled(lambda v: jax.lax.with_sharding_constraint(v, NamedSharding(mesh, P())), v)
    [c] = collectives_in_hlo(text)
    # rows are split y-major, x-minor: gathered in that order, over every device
    assert c.kind == "all-gather" and c.dimensions == (0,)
    assert c.replica_groups == (tuple(POSITIONS.T.reshape(-1)),)
    assert (c.operand_shapes, c.shape, c.bytes_per_device) == (((1, 8),), (8, 8), 256)


def test_a_constraint_that_swaps_the_axes_moves_blocks_between_named_devices():
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(MESH, P("x", "y")))
    g = lambda a: jax.lax.with_sharding_constraint(a * 2, NamedSharding(MESH, P("y", "x")))
    found = collectives_in_hlo(_compiled(g, x))
    assert {c.kind for c in found} <= set(KINDS) and found
    for c in found:
        if c.kind == "collective-permute":
            assert c.replica_groups == () and c.source_target_pairs
            assert sorted(s for s, _ in c.source_target_pairs) == list(range(8))
        else:   # every device in exactly one group, the groups of one size
            flat = sorted(d for g in c.replica_groups for d in g)
            assert flat == list(range(8)) and len({len(g) for g in c.replica_groups}) == 1
        assert c.bytes_per_device == sum(4 * int(np.prod(s)) for s in c.result_shapes)


def test_a_ppermute_is_a_collective_permute_with_its_pairs():
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(MESH, P("x", "y")))
    pairs = [(i, (i + 1) % 4) for i in range(4)]
    f = jax.shard_map(lambda b: jax.lax.ppermute(b, "y", pairs), mesh=MESH,
                      in_specs=P("x", "y"), out_specs=P("x", "y"))
    [c] = collectives_in_hlo(_compiled(f, x))
    row = {(int(POSITIONS[r, s]), int(POSITIONS[r, t])) for r in range(2) for s, t in pairs}
    assert c.kind == "collective-permute" and set(c.source_target_pairs) == row


def test_psum_scatter_and_all_to_all_keep_their_kinds_and_dimensions():
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(MESH, P("x", "y")))
    scatter = jax.shard_map(
        lambda b: jax.lax.psum_scatter(b, "x", scatter_dimension=0, tiled=True), mesh=MESH,
        in_specs=P(None, "y"), out_specs=P("x", "y"))
    kinds = {c.kind: c for c in collectives_in_hlo(_compiled(scatter, x))}
    assert set(kinds["reduce-scatter"].replica_groups) == _lines(POSITIONS, 0)
    assert kinds["reduce-scatter"].shape == (8, 8)
    exchange = jax.shard_map(lambda b: jax.lax.all_to_all(b, "y", 0, 0, tiled=True),
                             mesh=MESH, in_specs=P("x", "y"), out_specs=P("x", "y"))
    [c] = collectives_in_hlo(_compiled(exchange, x))
    assert c.kind == "all-to-all" and set(c.replica_groups) == _lines(POSITIONS, 1)
    assert c.bytes_per_device == 8 * 8 * 4 and len(c.result_shapes) in (1, 4)


@pytest.mark.parametrize("written, groups", [
    ("replica_groups={{0,2},{1,3}}", ((0, 2), (1, 3))),
    ("replica_groups={}", ((0, 1, 2, 3),)),
    ("replica_groups=[2,2]<=[4]", ((0, 1), (2, 3))),
    ("replica_groups=[2,2]<=[2,2]T(1,0)", ((0, 2), (1, 3))),
    ("replica_groups=mesh['a'=2,'b'=2] {'a'}", ((0, 2), (1, 3))),
    ("replica_groups=mesh['a'=2,'b'=2] {'b','a'}", ((0, 2, 1, 3),)),
    ("replica_groups=mesh['a'=4], device_ids=([2,2]T(1,0)) {'a':(2)2}", ((0, 2), (1, 3))),
])
def test_each_form_of_replica_groups_is_read_as_xla_defines_it(written, groups):
    text = ("HloModule m, num_partitions=4\n"
            "%p = f32[2]{0} parameter(0)\n"
            f"ROOT %r = f32[2]{{0}} all-reduce(%p), channel_id=1, {written}, "
            "use_global_device_ids=true, to_apply=%add\n")
    [c] = collectives_in_hlo(text)
    assert c.replica_groups == groups and c == Collective(
        "all-reduce", groups, (2,), "float32", 8, ((2,),), ((2,),), name="r")


def test_text_without_collectives_has_none_and_other_input_is_refused():
    assert collectives_in_hlo(_compiled(lambda a: a + 1, jnp.ones(4))) == []
    with pytest.raises(TypeError, match="HLO text"):
        collectives_in_hlo(b"HloModule")   # type: ignore[arg-type]
