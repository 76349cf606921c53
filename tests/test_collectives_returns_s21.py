"""The collectives disagreement of session 21's collexp recipe (issue 33), replayed against
jax.jit on 8 CPU devices, and the rule it found pinned beside its neighbours: COLL-19 (a
value the function returns under an out sharding grows beyond it from its operands, and
the return gathers it), where a constraint or an inner jit's out sharding holds the value
and its operand is gathered once; a value growing through a broadcast is left open."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.collectives_harness import compare_collectives
from shardlaw.properties.propagation_harness import Recipe
from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding
T = jax.sharding.AxisType

# a full shard_map and an inner jit (both dead), a reshard to P('z') returned and read by a
# max: two all-gathers over 'x' of 8 bytes, where the spec predicted one
RECIPE = Recipe(mesh=(2, 1, 4), reversed_devices=False, inputs=(
    ((8,), (('z', 'x'),)), ((8,), ('y',))), steps=(
    ('input', (), 0), ('shard_map', (0,), (None,)), ('binary', (0, 0), 'sub'),
    ('inner', (1,), (('y',), ('z',))), ('iota', (0,), 0), ('convert', (1,), None),
    ('reshard', (0,), ('z',)), ('input', (), 1), ('binary', (6, 7), 'max')),
    outputs=(6, 8), devices=(), out_shardings=(), axis_types='AAE')

GATHER_X = ("all-gather", ((0, 4), (1, 5), (2, 6), (3, 7)), 8)


def _real(jitted, *args):
    """The compiled module's collectives, as sorted (kind, groups, bytes)."""
    text = jitted.lower(*args).compile().as_text()
    return sorted((c.kind, _groups(c.replica_groups), c.bytes_per_device)
                  for c in collectives_in_hlo(text))


def _spec(jitted, *args):
    """The spec's collectives, as sorted (kind, groups, bytes), or why it is incomplete."""
    step = explain_program(describe_program(jitted, *args)).collectives
    if not step.complete:
        return step.undetermined
    return sorted((c.kind, _groups(c.replica_groups.groups() if c.replica_groups else ()),
                   c.bytes_per_device) for c in step)


def _groups(groups):
    return tuple(sorted(tuple(g) for g in groups))


def _mesh(types):
    import numpy as np
    return jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 1, 4), ("x", "y", "z"),
                             axis_types=tuple(T.Auto if t == "A" else T.Explicit
                                              for t in types))


def _placed(mesh, shape, spec):
    return jax.device_put(jnp.ones(shape), NS(mesh, spec))


def test_the_recipe_lists_the_compiled_modules_collectives():
    outcome = compare_collectives(RECIPE)
    assert outcome.why is None and not outcome.disagreements, outcome
    assert outcome.real == (GATHER_X, GATHER_X)


def test_a_reshard_returned_and_read_by_a_max_is_gathered_at_each_return():
    """The recipe minimised: over 'z' Explicit beside Auto 'x', ``reshard(a, P('z'))`` of
    ``a`` on ``P(('z', 'x'))``, returned and read by ``max`` whose result is returned on
    its type ``P('z')``: the max is computed on the f32[1] pieces and each result
    gathered over 'x'; the max alone returned: one gather."""
    mesh = _mesh("AAE")
    a, b = _placed(mesh, (8,), P(("z", "x"))), _placed(mesh, (8,), P("y"))

    def both(a, b):
        i = jax.sharding.reshard(a, NS(mesh, P("z")))
        return i, jnp.maximum(i, b)

    def alone(a, b):
        return jnp.maximum(jax.sharding.reshard(a, NS(mesh, P("z"))), b)
    assert _real(jax.jit(both), a, b) == _spec(jax.jit(both), a, b) == [GATHER_X] * 2
    assert _real(jax.jit(alone), a, b) == _spec(jax.jit(alone), a, b) == [GATHER_X]


def test_an_out_sharding_is_kept_on_the_return_where_a_constraint_holds_its_value():
    """Over Auto axes: ``(a, max(a, b))`` returned under ``P('z')`` twice is two gathers
    (the max computed where ``a`` stands); the max's result under a constraint to
    ``P('z')`` instead, or under an inner jit's out sharding, or ``a`` returned where it
    stands: ``a`` gathered once (the spec held the out sharding on the value before)."""
    mesh = _mesh("AAA")
    a, b = _placed(mesh, (8,), P(("z", "x"))), _placed(mesh, (8,), P("y"))
    z = NS(mesh, P("z"))

    def f(a, b):
        return a, jnp.maximum(a, b)
    returned = jax.jit(f, out_shardings=(z, z))
    assert _real(returned, a, b) == _spec(returned, a, b) == [GATHER_X] * 2

    def held(a, b):
        return a, jax.lax.with_sharding_constraint(jnp.maximum(a, b), z)
    inner = jax.jit(jnp.maximum, out_shardings=z)

    def called(a, b):
        return a, inner(a, b)
    for neighbour in (jax.jit(held, out_shardings=(z, None)),
                      jax.jit(called, out_shardings=(z, None)),
                      jax.jit(f, out_shardings=(None, z))):
        assert _real(neighbour, a, b) == _spec(neighbour, a, b) == [GATHER_X]


def test_two_returned_results_of_one_operand_are_each_gathered():
    """``(a * 2, a * 3)`` under ``P('z')`` twice, Auto or 'z' Explicit: two gathers of the
    products (not one of ``a``)."""
    for types in ("AAA", "AAE"):
        mesh = _mesh(types)
        a = _placed(mesh, (8,), P(("z", "x")))
        z = NS(mesh, P("z"))
        jitted = jax.jit(lambda a: (a * 2, a * 3), out_shardings=(z, z))
        assert _real(jitted, a) == _spec(jitted, a) == [GATHER_X] * 2


def test_a_returned_broadcast_growing_beyond_its_out_sharding_is_left_open():
    """A broadcast of ``a`` on ``P(('z', 'x'))`` returned under ``P('z')``: XLA gathers the
    f32[2, 4] broadcast (32 bytes), not the f32[2] operand; which it moves is not read
    (COLL-19, open; the spec predicted nothing before)."""
    mesh = _mesh("AAA")
    a = _placed(mesh, (8,), P(("z", "x")))
    jitted = jax.jit(lambda a: jnp.broadcast_to(a[:, None], (8, 4)),
                     out_shardings=NS(mesh, P("z")))
    assert _real(jitted, a) == [(GATHER_X[0], GATHER_X[1], 32)]
    assert _spec(jitted, a).rule == "COLL-19"


@checks("COLL-19")
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(types=st.sampled_from(("AAA", "AAE")), op=st.sampled_from(("max", "add", "mul")),
       also=st.booleans(), unary=st.booleans())
def test_drawn_returned_elementwise_results_communicate_as_compiled(types, op, also, unary):
    """COLL-19 on drawn meshes, operations, the operand returned beside the result or not,
    and a unary step between them: the compiled collectives, listed."""
    mesh = _mesh(types)
    a, b = _placed(mesh, (8,), P(("z", "x"))), _placed(mesh, (8,), P("y"))
    z = NS(mesh, P("z"))
    binary = {"max": jnp.maximum, "add": jnp.add, "mul": jnp.multiply}[op]

    def f(a, b):
        v = binary(jnp.sin(a) if unary else a, b)
        return (a, v) if also else v
    jitted = jax.jit(f, out_shardings=(z, z) if also else z)
    real = _real(jitted, a, b)
    assert real == [GATHER_X] * (2 if also else 1)
    assert _spec(jitted, a, b) == real
