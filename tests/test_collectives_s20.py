"""The four collectives disagreements of session 19's final deep run (issue 33), replayed
against jax.jit on 8 CPU devices, each rule they found pinned beside a close neighbour on
the other side: COLL-17 (a dynamic slice of literal starts is a windowed slice: left
open), COLL-18 (a reduction computes where its operand stands and moves its result),
COLL-15 (a loop's initial carry shares the value's other reshards; a scan's ``xs`` does
not) and a batched dot grouped by XLA through an idle mesh axis (left open, COLL-2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.collectives_harness import compare_collectives
from shardlaw.properties.propagation_harness import Recipe
from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding
T = jax.sharding.AxisType

# (a) a dynamic slice of a reshape's result split over ('x', 'y'): seven collective-permutes
A = Recipe(mesh=(2, 4), reversed_devices=True, inputs=(
    ((8, 16), (('x', 'y'), None)), ((8, 16), (('y', 'x'), None)),
    ((2, 8, 16), (None, ('y', 'x'), None))), steps=(
    ('input', (), 0), ('reshape', (0,), (128,)), ('dynamic_slice', (1,), (0, 8)),
    ('input', (), 1), ('binary', (0, 3), 'add'), ('input', (), 2),
    ('loop', (3, 5), ('scan reduce', 2, 0))), outputs=(4, 6, 2), axis_types='')
# (b) a batched dot, the left operand alone splitting the batch: two collective-permutes
B = Recipe(mesh=(2, 2, 2), reversed_devices=True, inputs=(
    ((4, 2, 4), ('y', None, 'z')), ((4, 4, 4), (None, 'z', None))), steps=(
    ('input', (), 0), ('unary', (0,), 'neg'), ('reduce', (0,), ('sum', 0)),
    ('input', (), 1), ('dot', (0, 3), None)), outputs=(2, 4), axis_types='')
# (c) a fori loop's initial carry moved as an elementwise operation's operand is: one all-to-all
C = Recipe(mesh=(2, 4), reversed_devices=True, inputs=(
    ((4, 4, 2), (None, 'y', None)), ((4, 4, 2), ('y', None, None)),
    ((4, 4, 2), (None, 'y', None)), ((4, 4, 2), (None, 'y', None))), steps=(
    ('input', (), 0), ('transpose', (0,), (1, 0, 2)), ('scalar', (0,), None),
    ('shard_map_auto', (0,), ((None, 'y', None), ('y',), 'psum')), ('input', (), 1),
    ('binary', (0, 4), 'max'), ('inner', (4,), ((None, None, None), None)),
    ('reduce', (3,), ('sum', 0)), ('input', (), 2), ('loop', (4, 8), ('fori const', 3, None)),
    ('constrain', (4,), ('y', None, None)), ('input', (), 3),
    ('loop', (0, 11), ('fori const', 3, None))), outputs=(9, 10, 12, 5), axis_types='')
# (d) a sum whose operand splits a kept dimension otherwise than its result: the sums move
D = Recipe(mesh=(2, 4), reversed_devices=False, inputs=(
    ((8, 4, 2), ('x', None, None)), ((4, 8, 4, 2), ('x', None, None, None)),
    ((8, 2), (None, 'x'))), steps=(
    ('input', (), 0), ('input', (), 1), ('flow', (0, 1), 'scan ys'), ('unary', (2,), 'neg'),
    ('inner', (2,), (None, ('x', None, None, None))), ('reshard', (3,), ('y', None, None, None)),
    ('unary', (5,), 'tanh'), ('reduce', (0,), ('sum', 1)), ('reduce', (7,), ('max', 1)),
    ('input', (), 2), ('binary', (7, 9), 'add')), outputs=(7, 8, 10), axis_types='AE')


def _real(f, *args):
    """The compiled module's collectives of ``f``, as sorted (kind, groups, bytes)."""
    text = jax.jit(f).lower(*args).compile().as_text()
    return sorted((c.kind, _groups(c.replica_groups), c.bytes_per_device)
                  for c in collectives_in_hlo(text))


def _spec(f, *args):
    """The spec's step: its collectives as sorted (kind, groups, bytes), or the reason it
    is incomplete."""
    step = explain_program(describe_program(jax.jit(f), *args)).collectives
    if not step.complete:
        return step.undetermined
    return sorted((c.kind, _groups(c.replica_groups.groups() if c.replica_groups else ()),
                   c.bytes_per_device) for c in step)


def _groups(groups):
    """Replica groups as compared: each in its order, the groups in any order."""
    return tuple(sorted(tuple(g) for g in groups))


def _placed(mesh, shape, spec):
    return jax.device_put(jnp.ones(shape), NS(mesh, spec))


def _kinds(found):
    return sorted(kind for kind, _, _ in found)


def test_the_deep_runs_collectives_recipes_no_longer_disagree():
    """(a) and (b) are left open by the rule they met, (c) and (d) list the compiled
    module's collectives."""
    for recipe, rule in ((A, "COLL-17"), (B, "COLL-2")):
        outcome = compare_collectives(recipe)
        assert outcome.why is not None and f"[{rule}]" in outcome.why, (recipe, outcome)
    for recipe in (C, D):
        outcome = compare_collectives(recipe)
        assert outcome.why is None and not outcome.disagreements, (recipe, outcome)


def test_a_dynamic_slice_of_literal_starts_along_a_split_dimension_is_left_open():
    """COLL-17: f32[128] on P(('x', 'y')) sliced from a literal start is seven
    collective-permutes of 4 bytes, open in the spec; along an unsplit dimension nothing
    moves; a start the data give is one all-gather of the operand, predicted."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(T.Auto,) * 2)
    x = _placed(mesh, (128,), P(("x", "y")))

    def literal(v):
        return lax.dynamic_slice_in_dim(v, 1, 8)
    assert _kinds(_real(literal, x)) == ["collective-permute"] * 7
    assert _spec(literal, x).rule == "COLL-17"
    # the neighbours: a split dimension kept whole, a start index the data give
    y = _placed(mesh, (8, 16), P("x", None))
    assert _real(lambda v: lax.dynamic_slice_in_dim(v, 1, 8, axis=1), y) == \
        _spec(lambda v: lax.dynamic_slice_in_dim(v, 1, 8, axis=1), y) == []
    i = jax.device_put(jnp.int32(1), NS(mesh, P()))
    given = (lambda v, k: lax.dynamic_slice_in_dim(v, k, 8))
    gathered = [("all-gather", ((0, 1, 2, 3, 4, 5, 6, 7),), 512)]
    assert _real(given, x, i) == _spec(given, x, i) == gathered


def test_a_reduction_computes_where_its_operand_stands_and_moves_its_result():
    """COLL-18: ``a.sum(1)`` (or ``max``) of f32[8, 4, 2] on P('x', None, None) read on
    P(None, 'x') is one all-to-all of the 32-byte sums, Auto or beside an Explicit axis;
    an elementwise operation's operand moves whole (128 bytes)."""
    for types in ((T.Auto, T.Auto), (T.Auto, T.Explicit)):
        mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=types)
        a, b = _placed(mesh, (8, 4, 2), P("x", None, None)), _placed(mesh, (8, 2), P(None, "x"))
        a2a = ("all-to-all", ((0, 4), (1, 5), (2, 6), (3, 7)))
        for f in (lambda a, b: a.sum(1) + b, lambda a, b: a.max(1) + b):
            assert _real(f, a, b) == _spec(f, a, b) == [(*a2a, 32)]
        wide = _placed(mesh, (8, 4, 8), P("x", None, None)), _placed(mesh, (8, 8), P(None, "x"))
        assert _real(lambda a, b: a.sum(1) + b, *wide) == \
            _spec(lambda a, b: a.sum(1) + b, *wide) == [(*a2a, 128)]
        # the neighbour: an elementwise operand moves, not its result
        c = _placed(mesh, (8, 4, 2), P(None, None, "x"))
        assert _real(lambda a, c: -a + c, a, c) == _spec(lambda a, c: -a + c, a, c) == \
            [(*a2a, 128)]


def test_a_loops_initial_carry_shares_the_values_other_reshards():
    """COLL-15: a fori (or while) loop's initial carry on P('y', None, None) needed on
    P(None, 'y', None), beside ``max`` of it or a constraint of it to that split, in either
    order: one all-to-all of 32 bytes; a scan's ``xs`` gathered whole beside a constraint
    of it stays two (tests/test_deep_run_s19.py)."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(T.Auto,) * 2)
    a = _placed(mesh, (4, 4, 2), P(None, "y", None))
    c, w = _placed(mesh, (4, 4, 2), P("y", None, None)), _placed(mesh, (4, 4, 2),
                                                                   P(None, "y", None))

    def fori(c, w):
        return lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) * w, c)

    def while_(c, w):
        return lax.while_loop(lambda s: s[1] < 3, lambda s: (jnp.cos(s[0]) * w, s[1] + 1),
                              (c, 0))[0]

    def put(v):
        return lax.with_sharding_constraint(v, NS(mesh, P(None, "y", None)))
    one = [("all-to-all", ((0, 1, 2, 3), (4, 5, 6, 7)), 32)]
    for f in (lambda a, c, w: (fori(c, w), jnp.maximum(a, c)),
              lambda a, c, w: (jnp.maximum(a, c), fori(c, w)),
              lambda a, c, w: (put(c), fori(c, w)),
              lambda a, c, w: (while_(c, w), jnp.maximum(a, c)),
              lambda a, c, w: (fori(c, w),)):
        assert _real(f, a, c, w) == _spec(f, a, c, w) == one
    # the neighbour: a scan's xs, gathered whole in its body and hoisted, stays apart
    mesh42 = jax.make_mesh((4, 2), ("x", "y"), axis_types=(T.Auto,) * 2)
    s, xs = _placed(mesh42, (4, 4), P("x", "y")), _placed(mesh42, (2, 4, 4), P("y", None, None))

    def scanned(s, xs):
        out = lax.scan(lambda d, u: (d * u.max(0, keepdims=True), None), s, xs)[0]
        return out, lax.with_sharding_constraint(xs, NS(mesh42, P(None, None, "y")))
    two = [("all-to-all", ((0, 1), (2, 3), (4, 5), (6, 7)), 64)] * 2
    assert _real(scanned, s, xs) == _spec(scanned, s, xs) == two


def test_a_batched_dot_grouped_through_an_idle_axis_is_left_open():
    """A dot whose left operand alone splits its batch (both split the contracted
    dimension), with a mesh axis neither splits ahead of the batch's and the contracted
    axes: XLA permutes the left operand and the result (left open, COLL-2), in either
    device order; with the batch or the contracted dimension on the leading axis, or the
    right operand splitting the batch too, the all-reduce alone (predicted)."""
    def dot(a, b):
        return jnp.matmul(a, b)
    for reverse in (False, True):
        devices = jax.devices()[::-1] if reverse else jax.devices()
        mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(T.Auto,) * 3,
                             devices=devices)
        for batch, summed in (("y", "z"), ("z", "y")):
            a = _placed(mesh, (4, 2, 4), P(batch, None, summed))
            b = _placed(mesh, (4, 4, 4), P(None, summed, None))
            assert _kinds(_real(dot, a, b)) == ["all-reduce"] + ["collective-permute"] * 2
            assert _spec(dot, a, b).rule == "COLL-2"
        for left, right in ((P("x", None, "z"), P(None, "z", None)),
                            (P("y", None, "x"), P(None, "x", None)),
                            (P("z", None, "x"), P(None, "x", None)),
                            (P("x", None, "y"), P(None, "y", None)),
                            (P("y", None, "z"), P("y", "z", None)),
                            (P(None, None, "z"), P("y", "z", None))):
            a, b = _placed(mesh, (4, 2, 4), left), _placed(mesh, (4, 4, 4), right)
            real = _real(dot, a, b)
            assert _kinds(real) == ["all-reduce"] and _spec(dot, a, b) == real


@checks("COLL-17", "COLL-18")
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(shape=st.sampled_from(((2, 4), (4, 2))), axis=st.sampled_from(("x", "y")),
       reduce=st.sampled_from(("sum", "max")), last=st.sampled_from((4, 8)),
       start=st.integers(0, 7), size=st.sampled_from((8, 16, 64)))
def test_drawn_reductions_and_literal_slices_communicate_as_compiled(shape, axis, reduce, last,
                                                                    start, size):
    """COLL-18 on drawn meshes, axes, reductions and sizes: the sums move, as compiled;
    COLL-17: a literal-start slice of a split f32[128] is collective-permutes only, open."""
    mesh = jax.make_mesh(shape, ("x", "y"), axis_types=(T.Auto,) * 2)
    a = _placed(mesh, (8, 4, last), P(axis, None, None))

    def f(a):
        r = a.sum(1) if reduce == "sum" else a.max(1)
        return lax.with_sharding_constraint(r, NS(mesh, P(None, axis)))
    assert _real(f, a) == _spec(f, a)
    x = _placed(mesh, (128,), P(("x", "y")))
    real = _real(lambda v: lax.dynamic_slice_in_dim(v, start, size), x)
    assert real and set(_kinds(real)) == {"collective-permute"}
    assert _spec(lambda v: lax.dynamic_slice_in_dim(v, start, size), x).rule == "COLL-17"
