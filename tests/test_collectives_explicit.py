"""What a step communicates where XLA's own passes decide (COLL-7's combiner) and over
meshes with Explicit axes (inner jits, shard_maps, reshards: COLL-11, COLL-12; a reshard
beside Auto axes: PROP-9, PROP-10), held to the compiled CPU HLO on 8 devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from shardlaw.compiled_hlo import collectives_in_hlo as collectives_of
from shardlaw.properties.collectives_harness import compare_collectives
from shardlaw.properties.propagation_harness import Recipe, compare_recipe
from shardlaw.properties.registry import checks
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


def _mesh(types):
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=tuple(TYPES[t] for t in types))


@checks("COLL-11")
@pytest.mark.parametrize("types", ["AA", "EA"])
def test_an_inner_jit_s_shardings_are_boundaries_its_value_is_brought_to(types):
    """An inner jit's in sharding ``P('x', 'y')`` and out sharding ``P(None, 'y')``: its
    body computes on ``P('x', 'y')`` and its result is gathered over 'x', 64 bytes, over
    Auto axes and beside an Explicit 'x' alike (COLL-11)."""
    mesh = _mesh(types)

    def f(a):
        return (jax.jit(lambda t: jnp.sin(t) * 2.0,
                        in_shardings=jax.sharding.NamedSharding(mesh, P("x", "y")),
                        out_shardings=jax.sharding.NamedSharding(mesh, P(None, "y")))(-a),)
    real, said, verdict = _both(f, mesh, ((8, 8), P("x", None)))
    assert verdict.collectives.complete and said == real
    assert [(k, size) for k, _, size in real] == [("all-gather", 64)]


def test_an_inner_jit_s_in_sharding_gathers_an_input_placed_otherwise():
    """The module's example: an input on ``P('x', None)`` read by an inner jit of in
    sharding ``P()``: one all-gather of the whole value, 256 bytes."""
    mesh = _mesh("AA")

    def f(a):
        return (jax.jit(jnp.negative, in_shardings=jax.sharding.NamedSharding(mesh, P()))(a),
                a * 2.0)
    real, said, verdict = _both(f, mesh, ((8, 8), P("x", None)))
    assert verdict.collectives.complete and said == real == [
        ("all-gather", ((0, 4), (1, 5), (2, 6), (3, 7)), 256)]


@checks("COLL-11", "COLL-12")
@pytest.mark.parametrize("types", ["AA", "EA"])
def test_a_shard_map_s_specs_are_boundaries_and_its_body_communicates_nothing(types):
    """A shard_map over every axis, of in and out spec ``P(None, 'y')``, reading ``-a``
    of ``a`` on ``P('x', None)``: over Explicit 'x' the negation keeps 'x' (its type), so
    its value is gathered over 'x' to the in spec (64 bytes); the body of elementwise
    operations communicates nothing (COLL-11, COLL-12). Over Auto axes alone the in spec
    moves onto the negation, whose operand then loses 'x' and gains 'y': left open."""
    mesh = _mesh(types)

    def f(a):
        return (jax.shard_map(lambda t: jnp.cos(t) * 2.0, mesh=mesh, in_specs=P(None, "y"),
                              out_specs=P(None, "y"))(-a),)
    real, said, verdict = _both(f, mesh, ((8, 8), P("x", None)))
    if types == "AA":
        assert not verdict.collectives.complete
        assert verdict.collectives.undetermined.rule == "COLL-2"
    else:
        assert verdict.collectives.complete and said == real
        assert [(k, size) for k, _, size in real] == [("all-gather", 64)]


def test_a_shard_map_whose_body_communicates_is_left_open():
    """A psum in a shard_map's body is the body's own collective: not read yet (COLL-12)."""
    mesh = _mesh("AA")

    def f(a):
        return (jax.shard_map(lambda t: jax.lax.psum(t, "x"), mesh=mesh, in_specs=P("x"),
                              out_specs=P())(a),)
    _, _, verdict = _both(f, mesh, ((8, 8), P("x", None)))
    assert verdict.collectives.undetermined.rule == "COLL-12"


def test_a_reshard_over_explicit_axes_is_a_boundary():
    """``reshard`` of a value typed ``P('x', None)`` to ``P()`` over Explicit axes: one
    all-gather of the value, as a constraint to its type (COLL-11)."""
    mesh = _mesh("EE")

    def f(a):
        return (jax.sharding.reshard(jnp.sin(a), jax.sharding.NamedSharding(mesh, P())),)
    real, said, verdict = _both(f, mesh, ((8, 8), P("x", None)))
    assert verdict.collectives.complete and said == real
    assert [(k, size) for k, _, size in real] == [("all-gather", 256)]


def _resharded(types, placed, to, then=()):
    """``reshard(sin(a), to)`` (then ``then``'s unary steps) of ``a`` (8, 8) on ``placed``
    over a 2 x 4 mesh of axis types ``types``."""
    steps = [("input", (), 0), ("unary", (0,), "sin"), ("reshard", (1,), to)]
    steps += [("unary", (len(steps) - 1 + k,), op) for k, op in enumerate(then)]
    return Recipe(mesh=(2, 4), reversed_devices=False, inputs=(((8, 8), placed),),
                  steps=tuple(steps), outputs=(len(steps) - 1,), axis_types=types)


@checks("PROP-9")
@pytest.mark.parametrize("types, placed, to, back", [
    ("AE", ("x", None), (None, "y"), ("x", "y")),
    ("AE", (None, "x"), ("y", None), ("y", "x")),
    ("EA", (None, "y"), ("x", None), ("x", "y")),
    ("EA", ("y", None), (None, "x"), ("y", "x")),
])
@pytest.mark.parametrize("then", [(), ("cos",)])
def test_a_reshard_beside_auto_axes_does_not_carry_its_axis_back(types, placed, to, back,
                                                                  then):
    """A reshard onto an Explicit axis beside an Auto one: its operand, typed without that
    axis, is marked replicated over it and keeps its split; the reshard's result joins the
    operand's Auto axes with its own (PROP-9), with no collective. Was left open (PROP-4)."""
    recipe = _resharded(types, placed, to, then)
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements and not outcome.abstained
    assert tuple(outcome.jax[0].spec) == back
    said = compare_collectives(recipe)
    assert said.why is None and said.real == said.predicted == ()


@checks("PROP-10")
@pytest.mark.parametrize("types, placed, to", [
    ("AE", ("x", None), ("y", None)),
    ("EA", ("y", None), ("x", None)),
])
def test_a_reshard_in_conflict_with_an_auto_split_it_cannot_take_is_decided(types, placed,
                                                                            to):
    """A reshard onto an Explicit axis of a dimension its operand splits over an Auto one:
    the operand may not take the Explicit axis and the reshard holds it, so in either order
    of the partitioner's visits the result is the reshard's (PROP-10); the move between
    the two is the partitioner's own (a collective-permute, after a gather or not: COLL-2
    leaves it open). Was left open (PROP-4, the order)."""
    recipe = _resharded(types, placed, to)
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements and not outcome.abstained
    assert tuple(outcome.jax[0].spec) == to
    said = compare_collectives(recipe)
    assert said.why is not None and "COLL-2" in said.why
    assert "collective-permute" in [kind for kind, _, _ in said.real]
