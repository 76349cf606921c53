"""The four disagreements of session 19's deep run (seed 20263000, 12 processes), replayed
against jax.jit on 8 CPU devices, each beside a close neighbour on the other side of the
rule it found: PROP-18 (no sideways propagation past a result placed whole), PROP-19 (a
constraint's result is not barred from Explicit axes), COLL-15 (a loop's operand is
resharded on its own) and COLL-16 (over Explicit axes only a result is returned on its
type)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings
from jax import lax

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.collectives_harness import (
    communicating_recipes, compare_collectives, loop_recipes,
)
from shardlaw.properties.propagation_harness import Recipe, compare_recipe, recipes
from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding
T = jax.sharding.AxisType
U = P.UNCONSTRAINED

# A: convert of a pad's result beside a sub whose result a full-manual shard_map reads
# through P(None,): JAX P(None,), the spec said P('y').
A = Recipe(mesh=(2, 2, 2), reversed_devices=False, inputs=(((2,), (None,)), ((4,), ('y',))),
           steps=(('input', (), 0), ('pad', (0,), 0), ('input', (), 1),
                  ('binary', (1, 2), 'sub'), ('shard_map', (3,), (None,)),
                  ('convert', (1,), None), ('reshape', (3,), (2, 2))),
           outputs=(4, 5, 3), devices=(6, 4, 3, 0, 1, 2, 7, 5),
           out_shardings=(None, None, (None,)), axis_types='')
# B: a constraint with UNCONSTRAINED dimensions, later resharded to 'y' (Explicit): JAX
# P(None, 'y'), the spec said P(None, None, None).
B = Recipe(mesh=(2, 4), reversed_devices=False, inputs=(((2, 16, 4), (None, None, None)),),
           steps=(('input', (), 0), ('constrain', (0,), (None, '?', '?')),
                  ('reshard', (1,), (None, 'y', None)), ('unary', (2,), 'sin')),
           outputs=(1, 3), devices=(2, 4, 3, 1, 0, 5, 6, 7), out_shardings=(),
           axis_types='AE')
# C: a nested scan over xs and a constraint of the same xs to the same split: two
# all-to-alls in the HLO, the spec predicted one.
C = Recipe(mesh=(4, 2), reversed_devices=False, inputs=(
    ((4, 4), ('x', 'y')), ((4, 4, 4), (None, 'x', None)), ((2, 4, 4), ('y', None, None))),
    steps=(('input', (), 0), ('shard_map', (0,), ('x', 'y')), ('input', (), 1),
           ('flow', (1, 2), 'scan ys'), ('scalar', (3,), None), ('input', (), 2),
           ('loop', (0, 5), ('scan nested', 2, 0)), ('constrain', (5,), (None, None, 'y'))),
    outputs=(6, 7), devices=(), out_shardings=(), axis_types='')
# D: an inner jit's out sharding P('x', 'y') on a value typed P('x', None) over Explicit
# axes, returned: XLA all-gathers it over 'y', the spec predicted no gather.
D = Recipe(mesh=(2, 4), reversed_devices=True, inputs=(((4, 16), ('x', None)),),
           steps=(('input', (), 0), ('inner', (0,), (('x', None), ('x', 'y'))),
                  ('reshard', (1,), ('x', None)), ('unary', (2,), 'tanh'),
                  ('reduce', (0,), ('sum', 0))),
           outputs=(4, 1), devices=(), out_shardings=(), axis_types='EE')


def _specs(f, *args):
    """JAX's result specs of ``f`` (jitted here unless it is already) and the spec's."""
    f = f if hasattr(f, "lower") else jax.jit(f)
    real = [tuple(r.sharding.spec) for r in f(*args)]
    spec = [tuple(s.spec) for s in explain_program(describe_program(f, *args)).out_shardings]
    return real, spec


def _collectives(f, *args):
    """The compiled module's collectives of ``f`` and the spec's, as sorted keys."""
    text = jax.jit(f).lower(*args).compile().as_text()
    real = sorted((c.kind, c.replica_groups, c.bytes_per_device)
                  for c in collectives_in_hlo(text))
    step = explain_program(describe_program(jax.jit(f), *args)).collectives
    assert step.complete, step.undetermined
    return real, sorted((c.kind, c.replica_groups.groups(), c.bytes_per_device) for c in step)


def _placed(mesh, shape, spec):
    return jax.device_put(jnp.ones(shape), NS(mesh, spec))


def test_the_deep_runs_propagation_recipes_agree_with_jax():
    for recipe in (A, B):
        outcome = compare_recipe(recipe)
        assert not outcome.refused and not outcome.disagreements, (recipe, outcome)


def test_the_deep_runs_collectives_recipes_agree_with_the_compiled_module():
    for recipe in (C, D):
        outcome = compare_collectives(recipe)
        assert outcome.why is None and not outcome.disagreements, (recipe, outcome)


def test_a_result_placed_whole_cuts_what_an_operand_takes_from_the_other():
    """PROP-18: ``d = c - b`` placed whole on P(None) leaves ``c`` unsplit, on
    P(('y', 'x')) gives it both axes, on P('x') beside ``b`` on P(('x', 'y'))  'x' alone;
    left open (UNCONSTRAINED), returned under an out sharding, or placed whole as an
    operand instead, it lets 'y' through."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(T.Auto,) * 3)
    a, b = _placed(mesh, (4,), P(None)), _placed(mesh, (4,), P("y"))
    bxy = _placed(mesh, (4,), P(("x", "y")))

    def put(v, *spec):
        return lax.with_sharding_constraint(v, NS(mesh, P(*spec)))

    def sub_placed(*spec):
        def f(a, b):
            c = jnp.sin(a)
            return c, put(c - b, *spec)
        return f
    assert _specs(sub_placed(None), a, b) == ([(None,), (None,)],) * 2
    assert _specs(sub_placed(("y", "x")), a, b) == ([(("y", "x"),), (("y", "x"),)],) * 2
    assert _specs(sub_placed("x"), a, bxy) == ([("x",), ("x",)],) * 2
    # the neighbours: an open result, an out sharding, an operand placed whole
    assert _specs(sub_placed(U), a, b) == ([("y",), ("y",)],) * 2

    def sub_returned(a, b):
        c = jnp.sin(a)
        return c, c - b
    returned = jax.jit(sub_returned, out_shardings=(None, NS(mesh, P(None))))
    assert _specs(returned, a, b) == ([("y",), (None,)],) * 2

    def operand_placed(a, b):
        s = put(jnp.sin(a), None)
        return s, s + b, jnp.cos(s)
    assert _specs(operand_placed, a, b) == ([(None,), ("y",), (None,)],) * 2


def test_a_full_manual_shard_map_or_an_inner_jit_places_its_operand_whole_alike():
    """PROP-18 through a shard_map's in spec and an inner jit's in sharding (recipe A
    without its pad): the sub's other operand stays unsplit."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(T.Auto,) * 3)
    a, b = _placed(mesh, (4,), P(None)), _placed(mesh, (4,), P("y"))
    smap = jax.shard_map(lambda t: jnp.cos(t) * 2.0, mesh=mesh, in_specs=P(None),
                         out_specs=P(None))
    inner = jax.jit(lambda t: jnp.sin(t) * 2.0, in_shardings=NS(mesh, P(None)))
    for boundary in (smap, inner):
        def f(a, b, boundary=boundary):
            c = jnp.sin(a)
            return c.astype(jnp.bfloat16), boundary(c - b)
        assert _specs(f, a, b) == ([(None,), (None,)],) * 2


def test_a_constraints_result_takes_an_explicit_axis_a_reshards_does_not():
    """PROP-19: ``wsc(cos(a), P(UNCONSTRAINED, UNCONSTRAINED))`` of ``a`` typed P() takes
    'x' and 'y' (Explicit) from a later reshard to P('x', 'y'); a reshard's result typed
    P('x', None) takes no 'y' from the same reshard (lowered with ``replicated={"y"}``)."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"),
                         axis_types=(T.Explicit, T.Explicit, T.Auto))
    a = _placed(mesh, (8, 8), P(None, None))

    def r(v, *spec):
        return jax.sharding.reshard(v, NS(mesh, P(*spec)))

    def then_resharded(first):
        def f(a):
            v = first(jnp.cos(a))
            return v, jnp.sin(r(v, "x", "y"))
        return f
    constrained = then_resharded(lambda v: lax.with_sharding_constraint(v, NS(mesh, P(U, U))))
    assert _specs(constrained, a) == ([("x", "y"), ("x", "y")],) * 2
    resharded = then_resharded(lambda v: r(v, "x", None))
    assert _specs(resharded, a) == ([("x", None), ("x", "y")],) * 2


def _scan_max(c, xs):
    return lax.scan(lambda d, u: (d * u.max(0, keepdims=True), None), c, xs)[0]


def test_a_loops_operand_is_resharded_apart_from_the_values_other_reshards():
    """COLL-15: a scan's ``xs`` brought before the loop to the split a constraint of it
    also asks: two all-to-alls, in either order, and two scans over one ``xs`` two; one
    value gathered alike for two equations outside a loop stays one reshard."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(T.Auto,) * 2)
    c, xs = _placed(mesh, (4, 4), P("x", "y")), _placed(mesh, (2, 4, 4), P("y", None, None))

    def put(v):
        return lax.with_sharding_constraint(v, NS(mesh, P(None, None, "y")))
    a2a = ("all-to-all", ((0, 1), (2, 3), (4, 5), (6, 7)), 64)
    for f in (lambda c, xs: (_scan_max(c, xs), put(xs)),
              lambda c, xs: (put(xs), _scan_max(c, xs)),
              lambda c, xs: (_scan_max(c, xs), _scan_max(c * 2.0, xs))):
        assert _collectives(f, c, xs) == ([a2a, a2a],) * 2
    # the neighbours: the scan alone, the constraint alone, two constraints of one split
    for f in (lambda c, xs: (_scan_max(c, xs),), lambda c, xs: (put(xs),),
              lambda c, xs: (put(jnp.sin(xs)), put(xs))):
        assert _collectives(f, c, xs) == ([a2a],) * 2


def test_over_explicit_axes_only_a_result_is_returned_on_its_type():
    """COLL-16: over a mesh of Explicit axes only, the inner jit's out sharding P('x', 'y')
    on a value typed P('x', None) is gathered back over 'y' at the return (recipe D without
    its dead reshard); over Auto axes the result stays where the jit put it, and an out
    sharding the type already holds moves nothing."""
    def jitted(out):
        return jax.jit(lambda t: jnp.sin(t) * 2.0, out_shardings=out)
    for types, gathered in (((T.Explicit,) * 2, True), ((T.Auto,) * 2, False)):
        mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=types)
        a = _placed(mesh, (4, 16), P("x", None))
        real, spec = _collectives(lambda a: (jitted(NS(mesh, P("x", "y")))(a),), a)
        assert real == spec == ([("all-gather", ((0, 1, 2, 3), (4, 5, 6, 7)), 128)]
                                if gathered else [])
        assert _collectives(lambda a: (jitted(NS(mesh, P("x", None)))(a),), a) == ([], [])
    # recipe D over Auto axes, its reshard (refused there) and tanh left out: no gather
    neighbour = dataclasses.replace(D, axis_types='', outputs=(2, 1), steps=D.steps[:2] + (
        ('reduce', (0,), ('sum', 0)),))
    outcome = compare_collectives(neighbour)
    assert outcome.why is None and not outcome.disagreements, outcome


@checks("PROP-18", "PROP-19")
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(recipes(explicit=True))
def test_drawn_programs_beside_explicit_axes_agree_with_jax(recipe):
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements, (recipe, outcome.disagreements)


@checks("COLL-15", "COLL-16")
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(loop_recipes() | communicating_recipes(explicit=True))
def test_drawn_loops_and_explicit_steps_communicate_as_compiled(recipe):
    outcome = compare_collectives(recipe)
    assert not outcome.disagreements, (recipe, outcome.disagreements)
