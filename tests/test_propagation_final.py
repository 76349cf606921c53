"""The disagreements of the propagation property's final deep run, replayed against
jax.jit on 8 CPU devices: each recipe's results as the spec predicts them, and the rule
each one found written small."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

from shardlaw.properties.propagation_harness import Recipe, compare_recipe
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding

# A broadcast (input 0 to (8, 2, 16)), an expand_dims (a broadcast_in_dim) and a squeeze of
# it, concatenated with input 1 split on 'z' at dimension 1: 'z' reaches the squeeze but
# not the first broadcast's result (StableHLO folds the two broadcasts into one).
_BROADCASTS = (('input', (), 0), ('broadcast', (0,), (0, (8, 2, 16))), ('squeeze', (1,), 1),
               ('input', (), 1), ('concat', (2, 3), 0), ('shard_map', (0,), (None, ('x', 'z'))),
               ('convert', (0,), None), ('reduce', (0,), ('max', 1)))
_INPUTS = (((2, 16), (None, ('y', 'x'))), ((8, 2, 16), (None, 'z', None)))
FOUND = [
    # a shard_map leaving 'y', 'z' automatic reads a dot's result through P(None, 'x', None):
    # JAX moves 'x' back onto the dot's result (P(None, 'x', ('y', 'z'))); left open
    Recipe(mesh=(2, 2, 2), reversed_devices=False, inputs=(
        ((2, 8, 8), ('z', None, ('x', 'y'))), ((2, 8, 4), ('x', None, ('y', 'z')))),
        steps=(('input', (), 0), ('input', (), 1), ('dot', (0, 1), None),
               ('shard_map_auto', (2,), ((None, 'x', None), ('x',), 'psum'))),
        outputs=(3, 2), devices=(6, 0, 7, 3, 1, 4, 5, 2), out_shardings=(), axis_types=''),
    Recipe(mesh=(2, 2, 2), reversed_devices=False, inputs=_INPUTS + (((16,), (None,)),),
           steps=_BROADCASTS + (('input', (), 2), ('broadcast_add', (4, 8), None)),
           outputs=(1, 2, 4), devices=(), out_shardings=(), axis_types=''),
    Recipe(mesh=(2, 2, 2), reversed_devices=False, inputs=_INPUTS + (((16,), (None,)),),
           steps=_BROADCASTS + (('input', (), 2), ('broadcast_add', (4, 8), None)),
           outputs=(1, 1, 4), devices=(), out_shardings=(), axis_types=''),
    Recipe(mesh=(2, 2, 2), reversed_devices=False, inputs=_INPUTS,
           steps=_BROADCASTS + (('shard_map', (4,), (None, None, None)),),
           outputs=(1, 4), devices=(), out_shardings=(), axis_types=''),
]


def test_the_final_deep_runs_recipes_agree_with_jax():
    for recipe in FOUND:
        outcome = compare_recipe(recipe)
        assert not outcome.disagreements, (recipe, outcome.disagreements)


def test_a_broadcast_of_a_broadcasts_result_reads_the_first_ones_operand():
    """'z' a use gives the second broadcast's result stays off the first's (PROP-4)."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    a = jax.device_put(jnp.ones((2, 16)), NS(mesh, P(None, ("y", "x"))))
    b = jax.device_put(jnp.ones((8, 1, 2, 16)), NS(mesh, P(None, None, "z", None)))

    def f(a, b):
        c = lax.broadcast_in_dim(a, (8, 2, 16), (1, 2))
        d = lax.broadcast_in_dim(c, (8, 1, 2, 16), (0, 2, 3))
        return c, d * b
    real = [tuple(r.sharding.spec) for r in jax.jit(f)(a, b)]
    spec = [tuple(s.spec) for s in explain_program(describe_program(jax.jit(f), a, b)
                                                    ).out_shardings]
    assert real == spec == [(None, None, ("y", "x")), (None, None, "z", ("y", "x"))]


def test_a_program_jax_refuses_when_run_is_held_to_the_spec_refusal():
    """Session 19's deep run: a constraint over an 8-device mesh of another shape leaves
    the compiler a placement of a result that mesh cannot spell (OUT-2, IndivisibleError
    when run); the property holds the spec's refusal to JAX's instead of stopping there."""
    recipe = Recipe(mesh=(2, 4), reversed_devices=False, inputs=(((4, 2, 8), ('y', None, None)),),
                    steps=(('input', (), 0), ('constrain_other', (0,), ((8,), (None, None, None))),
                           ('iota', (1,), 2), ('constrain', (2,), ('?', 'x', None))),
                    outputs=(2, 3), devices=(), out_shardings=(None, (None, None, ('y', 'x'))),
                    axis_types='')
    outcome = compare_recipe(recipe)
    assert outcome.refused == "IndivisibleError"
    assert outcome.disagreements == []
    # the same program without the other mesh's constraint runs, and agrees
    accepted = dataclasses.replace(recipe, steps=(
        ('input', (), 0), ('iota', (0,), 2), ('constrain', (1,), ('?', 'x', None))), outputs=(1, 2))
    outcome = compare_recipe(accepted)
    assert (outcome.refused, outcome.disagreements, outcome.abstained) == ("", [], False)
