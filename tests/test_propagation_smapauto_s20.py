"""Session 20's shard_maps leaving mesh axes automatic (issue 33; PROP-11, PROP-20,
PROP-21): the six recipes of the last deep run's propagation disagreements of that shape
(/work/wt/recipes/smapauto2.tsv) and two of its second list, replayed, each beside a
neighbour on the other side of its rule. Every case is compared with what jax.jit returns
on 8 CPU devices (JAX 0.10.2, Shardy)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from shardlaw.properties.propagation_harness import Recipe, compare_recipe
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

Auto = jax.sharding.AxisType.Auto
P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding


def _mesh(shape=(2, 4), names=("x", "y"), reverse=False):
    devices = jax.devices()[:8]
    return jax.make_mesh(shape, names, axis_types=(Auto,) * len(shape),
                         devices=devices[::-1] if reverse else devices)


def _compare(f, mesh, *placed, **jit_options):
    """jax.jit's result specs of ``f`` and the spec's verdict on the same program."""
    args = [jax.device_put(jnp.ones(shape), NS(mesh, spec)) for shape, spec in placed]
    jitted = jax.jit(f, **jit_options)
    out = jitted(*args)
    return [r.sharding for r in out], explain_program(describe_program(jitted, *args))


def _agrees(real, verdict):
    assert verdict.undetermined == ()
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def _open_by(verdict, rule_id, *results):
    """The verdict leaves ``results`` open (every one when none is named) by ``rule_id``."""
    chosen = results or range(len(verdict.out_shardings))
    assert all(verdict.out_shardings[k] is UNSPECIFIED for k in chosen)
    assert verdict.undetermined and all(rule_id in why for _, why in verdict.undetermined)


def _auto(mesh, t, spec, names, body=lambda t: jnp.cos(t) * 2.0):
    return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec,
                         axis_names=set(names))(t)


# --------------------------------------------------------------------------- the recipes

BROADCAST = Recipe(mesh=(2, 1, 4), reversed_devices=False, inputs=(((8,), ("x",)),), steps=(
    ("input", (), 0), ("convert", (0,), None), ("broadcast", (1,), (0, (16, 8))),
    ("convert", (1,), None), ("convert", (3,), None),
    ("shard_map_auto", (3,), ((None,), ("x", "z"), "cos"))), outputs=(5, 2, 2))
PSUMS = Recipe(mesh=(2, 1, 4), reversed_devices=False,
               inputs=(((16, 16, 8), ("x", "z", "y")),), steps=(
    ("input", (), 0), ("argmax", (0,), 1), ("unary", (0,), "exp"),
    ("shard_map_auto", (0,), ((None, None, None), ("x",), "psum")),
    ("shard_map_auto", (2,), (("x", None, "z"), ("x", "z"), "psum"))), outputs=(2, 4, 2))
BESIDE_FULL = Recipe(mesh=(2, 4), reversed_devices=True, inputs=(((4, 4), ("y", None)),),
                     steps=(("input", (), 0), ("convert", (0,), None),
                            ("shard_map_auto", (1,), ((None, None), ("x",), "cos")),
                            ("shard_map", (1,), (None, "y")), ("unary", (3,), "sin"),
                            ("broadcast", (3,), (2, (4, 4, 8)))), outputs=(2, 3, 3))
OUT_SHARDED = Recipe(mesh=(2, 4), reversed_devices=True, inputs=(((4,), (None,)),), steps=(
    ("input", (), 0), ("shard_map_auto", (0,), ((None,), ("y",), "psum")),
    ("reshape", (1,), (2, 2)), ("convert", (1,), None), ("dot", (2, 2), None),
    ("binary", (3, 1), "sub"), ("argmax", (3,), 0)), outputs=(1, 5, 6),
    out_shardings=(("x",), None, None))
TRANSPOSED = Recipe(mesh=(1, 8), reversed_devices=True, inputs=(
    ((8, 8), (("y", "x"), None)), ((4, 8, 8), (None, "x", "y")), ((8,), (None,))), steps=(
    ("input", (), 0), ("transpose", (0,), (1, 0)),
    ("shard_map_auto", (1,), (("y", None), ("y",), "transpose")), ("input", (), 1),
    ("flow", (0, 3), "scan carry"), ("shard_map", (1,), ("x", "y")), ("input", (), 2),
    ("broadcast_add", (2, 6), None)), outputs=(2, 1, 7), out_shardings=(None, None, None))
CARRY_READ = Recipe(mesh=(2, 4), reversed_devices=False, inputs=(
    ((16,), ("y",)), ((4, 16), ("y", "x"))), steps=(
    ("input", (), 0), ("input", (), 1), ("flow", (0, 1), "scan carry"),
    ("shard_map_auto", (2,), (("y",), ("y",), "psum")), ("sort", (0,), 0),
    ("inner", (2,), (None, (("y", "x"),))), ("convert", (2,), None)), outputs=(3, 5, 3),
    devices=(5, 4, 2, 3, 6, 7, 0, 1))


@checks("PROP-11", "PROP-20")
@pytest.mark.parametrize("recipe", [BROADCAST, PSUMS, BESIDE_FULL, TRANSPOSED],
                         ids=["broadcast beside a size-1 free axis",
                              "two psums beside a size-1 free axis",
                              "beside a full shard_map", "a transpose read"])
def test_the_recipes_now_agree(recipe):
    outcome = compare_recipe(recipe)
    assert outcome.disagreements == []
    assert not outcome.abstained


@checks("PROP-6", "PROP-21")
@pytest.mark.parametrize("recipe, rule_id", [(OUT_SHARDED, "PROP-6"), (CARRY_READ, "PROP-21")],
                         ids=["an out sharding on a held result with other uses",
                              "a scan carry read"])
def test_the_recipes_now_left_open(recipe, rule_id):
    outcome = compare_recipe(recipe)
    assert outcome.disagreements == []
    assert outcome.abstained
    assert all(rule_id in why for _, why in outcome.undetermined)


# ------------------------------------------- PROP-11: a free axis of size 1 is still free

@checks("PROP-11")
def test_a_free_axis_of_size_one_leaves_the_boundary_open():
    # manual {'x', 'z'} of (2, 1, 4): lowered [{?}], sin(a) keeps a's 'x'
    mesh = _mesh((2, 1, 4), ("x", "y", "z"))
    real, verdict = _compare(lambda a: (lambda s: (_auto(mesh, s, P(None), "xz"), s))(
        jnp.sin(a)), mesh, ((8,), P("x")))
    assert [r.spec for r in real] == [P(), P("x")]
    _agrees(real, verdict)


@checks("PROP-6", "PROP-11")
def test_over_explicit_axes_a_free_axis_of_size_one_is_seen_from_outside():
    # 'y' (size 1) Explicit: lowered [{?}], replicated={"y"}; every value typed first
    mesh = jax.make_mesh((2, 1, 4), ("x", "y", "z"), axis_types=(
        Auto, jax.sharding.AxisType.Explicit, Auto))
    real, verdict = _compare(lambda a: (lambda s: (_auto(mesh, s, P(None), "xz"), s))(
        jnp.sin(a)), mesh, ((8,), P("x")))
    assert [r.spec for r in real] == [P(None), P("x")]
    _agrees(real, verdict)


@checks("PROP-6")
def test_every_axis_manual_places_the_operand():
    # manual {'x', 'y', 'z'}: lowered closed [{}], moved onto sin(a)
    mesh = _mesh((2, 1, 4), ("x", "y", "z"))
    real, verdict = _compare(lambda a: (lambda s: (_auto(mesh, s, P(None), "xyz"), s))(
        jnp.sin(a)), mesh, ((8,), P("x")))
    assert [r.spec for r in real] == [P(), P()]
    _agrees(real, verdict)


# ------------------------ PROP-20: an open in sharding keeps other placements off an operand

def _full(mesh, t):
    return jax.shard_map(lambda u: jnp.cos(u) * 2, mesh=mesh, in_specs=P(None, "y"),
                         out_specs=P(None, "y"))(t)


def _constrain(mesh, t):
    return lax.with_sharding_constraint(t, NS(mesh, P(None, "y")))


@checks("PROP-6")
@pytest.mark.parametrize("use", [_full, _constrain], ids=["a full shard_map", "a constraint"])
def test_a_closed_use_alone_is_moved_onto_its_operand(use):
    mesh = _mesh(reverse=True)
    real, verdict = _compare(lambda a: (lambda s: (use(mesh, s), s))(jnp.sin(a)), mesh,
                             ((4, 4), P("y", None)))
    assert [r.spec for r in real] == [P(None, "y"), P(None, "y")]
    _agrees(real, verdict)


@checks("PROP-20")
def test_beside_a_shard_map_leaving_axes_automatic_a_full_one_is_not():
    # the operand keeps the split its producer gives (a's 'y' on dimension 0): Shardy
    # visits sin first, and each shard_map's link is led by its operand
    mesh = _mesh(reverse=True)
    real, verdict = _compare(lambda a: (lambda s: (
        _full(mesh, s), _auto(mesh, s, P(None, None), "x"), s))(jnp.sin(a)), mesh,
        ((4, 4), P("y", None)))
    assert [r.spec for r in real] == [P(None, "y"), P("y", None), P("y", None)]
    _agrees(real, verdict)


@checks("PROP-20")
def test_nor_a_constraint_whose_link_is_left_to_the_order():
    # JAX as above; a constraint's link is not a shard_map's: which of its split and the
    # producer's reaches sin(a) first is the partitioner's order (PROP-4)
    mesh = _mesh(reverse=True)
    real, verdict = _compare(lambda a: (lambda s: (
        _constrain(mesh, s), _auto(mesh, s, P(None, None), "x"), s))(jnp.sin(a)), mesh,
        ((4, 4), P("y", None)))
    assert [r.spec for r in real] == [P(None, "y"), P("y", None), P("y", None)]
    _open_by(verdict, "PROP-4", 1, 2)


@checks("PROP-20")
def test_a_producer_of_a_later_pass_yields_to_the_manual_axis():
    # a dot propagates after the first pass, where the shard_map's link already brought
    # its manual 'x' (dimension 1) to the dot's result: JAX P(None, 'x'), not a's 'x' rows
    mesh = _mesh()
    real, verdict = _compare(lambda a, w: (lambda s: (
        s, _auto(mesh, s, P(None, "x"), "x")))(a @ w), mesh, ((8, 8), P("x", None)),
        ((8, 8), P()))
    assert [r.spec for r in real] == [P(None, "x"), P(None, "x")]
    _agrees(real, verdict)


# --------------------- PROP-11/PROP-6: an out sharding on a held result with other uses

@checks("PROP-6")
def test_an_out_sharding_that_could_reach_a_held_result_is_left_open():
    mesh = _mesh(reverse=True)
    real, verdict = _compare(lambda a: (lambda s: (s, s * 2))(_auto(mesh, a, P(None), "y")),
                             mesh, ((4,), P(None)),
                             out_shardings=(NS(mesh, P("x")), None))
    assert [r.spec for r in real] == [P("x"), P("x")]
    _open_by(verdict, "PROP-6", 1)


@checks("PROP-11")
def test_an_out_sharding_over_the_manual_axis_moves_nothing():
    mesh = _mesh(reverse=True)
    real, verdict = _compare(lambda a: (lambda s: (s, s * 2))(_auto(mesh, a, P(None), "x")),
                             mesh, ((4,), P(None)),
                             out_shardings=(NS(mesh, P("x")), None))
    assert [r.spec for r in real] == [P("x"), P(None)]
    _agrees(real, verdict)


# ------------------------------------- PROP-21: a loop's result read over a manual axis

def _carry(a, w):
    return lax.scan(lambda c, t: (jnp.sin(c) + t, c * 2.0), a, w)[0]


def _psum(mesh, t):
    return jax.shard_map(lambda u: lax.psum(jnp.cos(u), "y"), mesh=mesh, in_specs=P("y"),
                         out_specs=P(), axis_names={"y"})(t)


@checks("PROP-21")
def test_a_carry_whose_body_brings_a_split_is_left_open():
    # JAX: the carry takes the xs' 'x', not the manual 'y'
    mesh = _mesh()
    real, verdict = _compare(lambda a, w: (lambda c: (_psum(mesh, c), c))(_carry(a, w)),
                             mesh, ((16,), P()), ((4, 16), P(None, "x")))
    assert [r.spec for r in real] == [P(), P("x")]
    _open_by(verdict, "PROP-21")


@checks("PROP-11")
def test_a_carry_in_a_program_placing_nothing_takes_the_manual_axis():
    mesh = _mesh()
    real, verdict = _compare(lambda a, w: (lambda c: (_psum(mesh, c), c))(_carry(a, w)),
                             mesh, ((16,), P()), ((4, 16), P()))
    assert [r.spec for r in real] == [P(), P("y")]
    _agrees(real, verdict)
