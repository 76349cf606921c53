"""A cond whose predicate vmap batches becomes a select_n of its branches' results (JAX's
cond batching rule); select_n types its result as the first case typed over a mesh
(``_select_sharding_rule``), so a branch that reshards over an Explicit mesh types the
result over that mesh even where the first branch returns an argument typed over none.
Held against JAX 0.10.2 on 8 CPU devices: the result's type and the sharding jit gives it
(spelled in full where typed over the mesh, ``P()`` where the compiler placed it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from shardlaw.properties.program_harness import type_of_aval
from shardlaw.spec import explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

MESH = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)


def _step(moved_first: bool, spec: P):
    def moved(h):
        return jax.sharding.reshard(h + 1.0, NamedSharding(MESH, spec))

    def kept(h):
        return h

    def one(h, anchor):   # (anchor, placed on the mesh, places the program there)
        branches = (moved, kept) if moved_first else (kept, moved)
        return jax.lax.cond(jnp.sum(h) > 0, *branches, h), anchor
    return jax.jit(jax.vmap(one, in_axes=(0, None)))


@pytest.mark.parametrize("moved_first", [True, False])
@pytest.mark.parametrize("spec", [P(), P(None, "y")])
def test_a_batched_cond_is_typed_as_its_select_n(moved_first, spec):
    f = _step(moved_first, spec)
    x = np.ones((8, 6, 16), np.float32)   # typed over no mesh
    anchor = jax.device_put(np.ones(4, np.float32), NamedSharding(MESH, P()))
    out = f(x, anchor)[0]
    theirs = type_of_aval(f.trace(x, anchor).jaxpr.out_avals[0])
    verdict = explain_program(describe_program(f, x, anchor))
    assert verdict.accepted, verdict.message
    assert verdict.out_types[0] == theirs
    assert verdict.out_shardings[0] == from_jax(out.sharding)
    assert theirs.mesh is not None   # (over the mesh whichever branch comes first)
