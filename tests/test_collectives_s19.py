"""The collectives harness's disagreements of session 19 (``collectives_harness 300
20261903``), replayed against jax.jit on 8 CPU devices with a close neighbour each: an
all-reduce a loop hoists is combined with one before the loop unless computed from it
(COLL-7, COLL-9), and a dot's operand moving one axis between its dimensions is an
all-to-all only where the axis splits more devices than the value is replicated over
(COLL-2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.collectives_harness import Recipe, compare_collectives
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding

# A sum over 'x' read as a fori_loop's carry, the loop's body summing a constant split
# over 'x' (moved out of the loop), and a max: XLA combines the two sums (64 + 4 bytes).
HOISTED = Recipe(
    mesh=(8,), reversed_devices=False,
    inputs=(((8, 16), ('x', None)), ((16, 16), (None, 'x')), ((16,), (None,)),
            ((16,), ('x',))),
    steps=(('input', (), 0), ('shard_map', (0,), ('x', None)), ('input', (), 1),
           ('dot', (0, 2), None), ('shard_map', (0,), (None, None)), ('input', (), 2),
           ('broadcast_add', (4, 5), None), ('reduce', (2,), ('sum', 1)), ('input', (), 3),
           ('loop', (7, 8), ('fori reduced const', 3, 0)), ('reduce', (0,), ('max', 0))),
    outputs=(7, 9, 10), devices=(), out_shardings=(), axis_types='')

# A batched dot whose second operand holds 'x' (of (2, 4)) on its contracted dimension
# and moves it to the batch dimension: XLA slices, permutes and gathers it.
SWAPPED = Recipe(
    mesh=(2, 4), reversed_devices=True,
    inputs=(((4, 8, 4), ('x', None, None)), ((4,), ('x',)), ((4, 4, 16), (None, 'x', None))),
    steps=(('input', (), 0), ('scalar', (0,), None), ('input', (), 1),
           ('broadcast_add', (1, 2), None), ('convert', (0,), None),
           ('shard_map', (3,), (None, 'x', 'y')), ('pad', (0,), 1),
           ('reshape', (6,), (4, 40)), ('shard_map', (4,), (None, None, 'x')),
           ('input', (), 2), ('dot', (0, 9), None)),
    outputs=(10,), devices=(), out_shardings=(), axis_types='')

ALL_REDUCE = ('all-reduce', ((0, 1, 2, 3, 4, 5, 6, 7),))


def _both(f, *args) -> tuple:
    """The compiled module's collectives and the spec's, as sorted (kind, bytes)."""
    real = collectives_in_hlo(jax.jit(f).lower(*args).compile().as_text())
    step = explain_program(describe_program(jax.jit(f), *args)).collectives
    assert step.complete, step.undetermined
    return (sorted((c.kind, c.bytes_per_device) for c in real),
            sorted((c.kind, c.bytes_per_device) for c in step))


def test_a_hoisted_sum_joins_the_sum_the_loops_carry_reads():
    outcome = compare_collectives(HOISTED)
    assert outcome.why is None and not outcome.disagreements, outcome.disagreements
    assert outcome.predicted == (ALL_REDUCE + (64,), ALL_REDUCE + (68,))


def test_a_hoisted_sum_of_a_constant_computed_from_the_sum_stays_apart():
    """The neighbour: the loop's constant is computed from the sum before the loop, so the
    hoisted all-reduce comes after it (XLA keeps two of 64 bytes, not one of 128)."""
    mesh = jax.make_mesh((8,), ('x',), axis_types=(jax.sharding.AxisType.Auto,))
    b = jax.device_put(jnp.ones((16, 16)), NS(mesh, P(None, 'x')))

    def f(b):
        n = b.sum(1)
        w = jnp.sin(n)[:, None] * b
        return n, lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) * w.sum(1), n)
    real, spec = _both(f, b)
    assert real == spec == [('all-reduce', 64), ('all-reduce', 64)]


def test_a_dots_operand_swapping_a_small_axis_is_left_open():
    outcome = compare_collectives(SWAPPED)
    assert outcome.why is not None and "operand 1 of a dot moves one axis" in outcome.why
    assert outcome.real == (('all-gather', ((0, 2), (1, 3), (4, 6), (5, 7)), 512),
                            ('collective-permute', (), 256))


def test_a_dots_operand_swapping_an_axis_that_splits_more_is_one_all_to_all():
    """The neighbour: over 'x' of (4, 2) the operand moves by one all-to-all (1,024 bytes
    of f32[8, 2, 16]); over 'y' of (4, 2) it is sliced, permuted and gathered, left open."""
    mesh = jax.make_mesh((4, 2), ('x', 'y'), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def dot(a, c):
        return lax.dot_general(a, c, (([2], [1]), ([0], [0])))
    a = jax.device_put(jnp.ones((8, 8, 8)), NS(mesh, P('x')))
    c = jax.device_put(jnp.ones((8, 8, 16)), NS(mesh, P(None, 'x')))
    real, spec = _both(dot, a, c)
    assert real == spec == [('all-to-all', 1024)]
    a = jax.device_put(a, NS(mesh, P('y')))
    c = jax.device_put(c, NS(mesh, P(None, 'y')))
    step = explain_program(describe_program(jax.jit(dot), a, c)).collectives
    assert not step.complete and step.undetermined.rule == "COLL-2"
