"""Session 21's scan ys read by a shard_map leaving mesh axes automatic under an out
sharding (issue 33; PROP-26): the deep run's recipe (/work/wt/recipes/s21_scanysmap.tsv)
replayed, and its neighbours on both sides of the rule. Every case is compared with what
jax.jit returns on 8 CPU devices (JAX 0.10.2, Shardy).

Seen: an out sharding on the result of ``shard_map(..., axis_names={'x'})`` is pushed
through its body onto its operand before any operation is visited; a scan's ``ys``, a
cond's result, a dot's or a reduction's result read by it take its free axes, while a
first-pass operation's result over placed values (``sin(a)``, ``a.T``) keeps its own."""

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

RECIPE = Recipe(mesh=(4, 2), reversed_devices=True, inputs=(
    ((2, 2, 8), (None, "y", "x")), ((4, 2, 2, 8), (None, None, "y", "x")), ((8,), (None,))),
    steps=(("input", (), 0), ("unary", (0,), "tanh"), ("input", (), 1),
           ("flow", (1, 2), "scan ys"), ("input", (), 2), ("broadcast_add", (3, 4), None),
           ("shard_map", (3,), (None, None, "y", "x")),
           ("shard_map_auto", (3,), ((None, None, None, None), ("x",), "cos")),
           ("binary", (0, 1), "sub"), ("inner_other", (8,), ((8,), (None, None, None)))),
    outputs=(3, 9, 7), out_shardings=(None, ("y", None, None), ("y", None, None, "x")))


def _mesh(shape=(4, 2), reverse=True):
    devices = jax.devices()[:8]
    return jax.make_mesh(shape, ("x", "y"), axis_types=(Auto,) * len(shape),
                         devices=devices[::-1] if reverse else devices)


def _compare(f, mesh, placed, outs):
    """jax.jit's result specs of ``f`` under out shardings ``outs`` (specs) and the spec's
    verdict on the same program."""
    args = [jax.device_put(jnp.ones(shape), NS(mesh, spec)) for shape, spec in placed]
    given = tuple(None if s is None else NS(mesh, s) for s in outs) if outs else None
    jitted = jax.jit(f, out_shardings=given) if given else jax.jit(f)
    real = [r.sharding for r in jitted(*args)]
    return real, explain_program(describe_program(jitted, *args))


def _agrees(real, verdict):
    assert verdict.undetermined == (), verdict.undetermined
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def _auto(mesh, t, names=("x",)):
    return jax.shard_map(lambda u: jnp.cos(u) * 2.0, mesh=mesh, in_specs=P(), out_specs=P(),
                         axis_names=set(names))(t)


def _ys(a, w):
    return lax.scan(lambda c, t: ((jnp.sin(c) + t).astype(c.dtype), c * 2.0), a, w)[1]


SCAN = (((2, 2, 8), P(None, "y", "x")), ((4, 2, 2, 8), P(None, None, "y", "x")))


@checks("PROP-26")
def test_the_deep_runs_recipe_is_left_open():
    outcome = compare_recipe(RECIPE)
    assert not outcome.disagreements, outcome.disagreements
    assert outcome.spec[0] is UNSPECIFIED
    assert any("[PROP-26]" in why for _, why in outcome.undetermined), outcome.undetermined


@checks("PROP-26")
@pytest.mark.parametrize("reverse", [True, False])
@pytest.mark.parametrize("out, ys", [
    (P("y", None, None, "x"), P("y", None, None, "x")),
    (P(None, "y"), P(None, "y", None, "x")),
])
def test_scan_ys_under_an_out_sharding_through_the_shard_map_are_left_open(reverse, out, ys):
    """JAX: the out sharding's free 'y' reaches the ys back through the shard_map's body
    before the loop's body does; the spec leaves them open."""
    mesh = _mesh(reverse=reverse)
    real, verdict = _compare(lambda a, w: (lambda v: (v, _auto(mesh, v)))(_ys(a, w)), mesh,
                             SCAN, (None, out))
    assert [r.spec for r in real] == [ys, out]
    assert verdict.out_shardings[0] is UNSPECIFIED
    assert any("[PROP-26]" in why for _, why in verdict.undetermined), verdict.undetermined


@checks("PROP-11")
@pytest.mark.parametrize("out", [
    None,                          # no out sharding: the loop's body splits the ys
    P(None, None, "y", "x"),       # the out sharding brings nothing the body does not give
    P("x"),                        # only a manual axis: it does not enter the body
])
def test_scan_ys_whose_shard_map_result_brings_nothing_new_are_answered(out):
    mesh = _mesh()
    real, verdict = _compare(lambda a, w: (lambda v: (v, _auto(mesh, v)))(_ys(a, w)), mesh,
                             SCAN, (None, out) if out is not None else ())
    assert real[0].spec == P(None, None, "y", "x")
    _agrees(real, verdict)


@checks("PROP-4")
def test_scan_ys_read_by_an_elementwise_operation_under_that_out_sharding_are_not_its():
    # (no shard_map: the body's split reaches the ys first, the cos keeps the out sharding;
    # the spec leaves the ys open by PROP-4's conflict in a pass, not by PROP-26)
    mesh = _mesh()
    real, verdict = _compare(lambda a, w: (lambda v: (v, jnp.cos(v)))(_ys(a, w)), mesh,
                             SCAN, (None, P("y", None, None, "x")))
    assert [r.spec for r in real] == [P(None, None, "y", "x"), P("y", None, None, "x")]
    assert not any("[PROP-26]" in why for _, why in verdict.undetermined)
    assert verdict.out_shardings[1] == from_jax(real[1])
    assert verdict.out_shardings[0] in (UNSPECIFIED, from_jax(real[0]))


PAIR = (((8, 8), P("y", None)), ((8, 8), P()))


@checks("PROP-26")
@pytest.mark.parametrize("name, make", [
    ("dot", lambda a, w: a @ w),
    ("cond", lambda a, w: lax.cond(a.sum() > 0, jnp.sin, jnp.cos, a)),
])
def test_a_later_operand_takes_the_out_shardings_axis_and_is_left_open(name, make):
    mesh = _mesh()
    real, verdict = _compare(lambda a, w: (lambda u: (u, _auto(mesh, u)))(make(a, w)), mesh,
                             PAIR, (None, P(None, "y")))
    assert [r.spec for r in real] == [P(None, "y"), P(None, "y")], name
    assert verdict.out_shardings[0] is UNSPECIFIED, name
    assert any("[PROP-26]" in why for _, why in verdict.undetermined), name


@checks("PROP-26")
@pytest.mark.parametrize("name, make, out, operand", [
    ("sin", lambda a, w: jnp.sin(a), P(None, "y"), P("y", None)),
    ("transpose", lambda a, w: a.T, P("y"), P(None, "y")),
])
def test_a_first_pass_operand_holding_the_axis_keeps_its_split(name, make, out, operand):
    mesh = _mesh()
    real, verdict = _compare(lambda a, w: (lambda u: (u, _auto(mesh, u)))(make(a, w)), mesh,
                             PAIR, (None, out))
    assert real[0].spec == operand, name
    _agrees(real, verdict)
