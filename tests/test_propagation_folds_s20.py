"""A slice taking every element over a mesh with Explicit axes (issue 33, session 20), held
to jax.jit on 8 CPU devices: StableHLO folds the slice away, but JAX lowers its result with
its type's constraint (the Explicit axes closed first, the rest open), which stays. Over
Auto axes only the fold leaves the operand's split, as before.

The first two recipes are a local deep run's (seed 20265117) disagreements: an operand
on ``P(('z', 'y'), 'x')``, 'z' Auto, sliced whole came back ``P('y', 'x', None)`` where the
spec kept ``P(('z', 'y'), 'x')``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from shardlaw.properties.propagation_harness import Recipe, compare_recipe
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.propagation_spelling import predicted_out_shardings

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding
AT = jax.sharding.AxisType


def _recipe(n: int, types: str) -> Recipe:
    return Recipe(mesh=(2, 2, 2), reversed_devices=False,
                  inputs=(((8, 2, n), (("z", "y"), "x", None)), ((n,), (None,))),
                  steps=(("input", (), 0), ("slice", (0,), (1, 2)), ("input", (), 1),
                         ("broadcast_add", (0, 2), None)),
                  outputs=(1,), devices=(), out_shardings=(None,), axis_types=types)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("types", ["EEA", "", "AEA"])
def test_the_deep_runs_whole_slices_agree(n, types):
    assert compare_recipe(_recipe(n, types)).disagreements == []


CASES = [
    (P(("z", "y"), "x", None), "slice"), (P(("z", "y"), "x", None), "dynamic_slice"),
    (P("z", "x", None), "slice"), (P(("y", "z"), None, None), "slice"),
    (P(("z", "y"), "x", None), "sin"),
]


@pytest.mark.parametrize("split,how", CASES)
def test_a_whole_slice_over_a_mixed_mesh_keeps_its_types_constraint(split, how):
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"),
                         axis_types=(AT.Explicit, AT.Explicit, AT.Auto))
    a = jax.device_put(jnp.ones((8, 2, 2)), NS(mesh, split))
    f = {"slice": lambda v: jax.lax.slice(v, (0, 0, 0), (8, 2, 2)),
         "dynamic_slice": lambda v: jax.lax.dynamic_slice(v, (0, 0, 0), (8, 2, 2)),
         "sin": jnp.sin}[how]
    with jax.set_mesh(mesh):
        real = jax.jit(f).lower(a).compile().output_shardings
        predicted, = predicted_out_shardings(describe_program(f, a))
    assert _entries(predicted.spec) == _entries(real.spec), (predicted, real)


def _entries(spec) -> tuple:
    """A spec's entries without trailing Nones (``P('z')`` is ``P('z', None)``)."""
    entries = tuple(spec)
    while entries and entries[-1] is None:
        entries = entries[:-1]
    return entries
