"""Session 21's shard_maps leaving mesh axes automatic in a row (issue 33; PROP-23, PROP-11):
the deep run's recipes (/work/wt/recipes/s21_smapchain.tsv) and their neighbours.

* A value such a shard_map holds on its manual axes takes a free axis its operand holds
  after them even where a manual axis splits another dimension of the operand (PROP-23):
  ``a`` on ``P(('y', 'x'), 'z', None)`` read through ``P('y', None, 'z')`` over
  ``{'y', 'z'}`` brings ``'x'`` into the body. A manual axis after the held ones still
  cuts what it takes.
* A psum or pmax of the body is an all-reduce, not elementwise to Shardy's schedule: it
  propagates from the second pass on (PROP-11), after the next shard_map's in spec has
  reached the first one's result. So ``s = shard_map(psum, out_specs=P())(a)`` read by a
  second shard_map of in spec ``P('x', None, None)`` over ``{'x'}`` comes back ``P('x')``,
  not the free axes of its body (``P(('z', 'x'))``); a body without one keeps them.

Every case is compared with what jax.jit returns on 8 CPU devices (JAX 0.10.2, Shardy)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.propagation_harness import Recipe, compare_recipe
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding


def _recipe(split, steps, shape=(4, 2, 16), outputs=(1,)):
    return Recipe(mesh=(2, 2, 2), reversed_devices=False, inputs=((shape, split),),
                  steps=(("input", (), 0),) + steps, outputs=outputs)


# The deep run's two recipes: the first shard_map's result returned, a second one reading it.
FIRST = ("shard_map_auto", (0,), (("y", None, "z"), ("y", "z"), "psum"))
RECIPES = [
    _recipe((("y", "x"), "z", None), (FIRST, ("shard_map_auto", (1,), (
        (None, None, None), ("y",), "cos")))),
    _recipe((("y", "x"), "z", None), (FIRST, ("shard_map_auto", (1,), (
        (None, "y", None), ("y",), "cos")))),
]


@checks("PROP-23")
@pytest.mark.parametrize("recipe", RECIPES, ids=["second over P()", "second over P(None, 'y')"])
def test_the_deep_run_s_recipes_agree(recipe):
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements, outcome.disagreements
    assert outcome.jax[0].spec == P("x")   # (the free 'x' its operand holds after 'y')


def _mesh():
    return jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(jax.sharding.AxisType.Auto,) * 3)


def _smap(fn, ins, outs, names):
    return jax.shard_map(fn, mesh=_mesh(), in_specs=ins, out_specs=outs, axis_names=set(names))


def _compare(f, shape, spec):
    a = jax.device_put(np.ones(shape, np.float32), NS(_mesh(), spec))
    real = tuple(r.sharding for r in jax.jit(f)(a))
    return real, explain_program(describe_program(f, a))


def _agrees(real, verdict):
    assert verdict.undetermined == ()
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def _cos(t):
    return jnp.cos(t) * 2.0


def _psum(axes):
    return lambda t: jax.lax.psum(jnp.cos(t), axes)


def _pmax(axes):
    return lambda t: jax.lax.pmax(jnp.cos(t), axes)


# ------------------------------------------------------------ PROP-23: the held prefix

HELD = [  # (input split, the shard_map's spec over {'y', 'z'}, JAX's result)
    (P(("y", "x"), "z", None), P("y", None, "z"), P(("y", "x"), None, "z")),
    (P(("y", "x", "z"), None, None), P("y", "z", None), P(("y", "x"), "z")),
]


@checks("PROP-23")
@pytest.mark.parametrize("placed, spec, expected", HELD, ids=["x after y", "x after y, z cut"])
def test_a_held_value_takes_the_free_axis_after_its_manual_prefix(placed, spec, expected):
    shape = (8, 2, 16)
    real, verdict = _compare(lambda a: (_smap(_cos, spec, spec, "yz")(a),), shape, placed)
    assert real[0].spec == expected
    _agrees(real, verdict)


@checks("PROP-23")
def test_a_manual_axis_right_after_the_held_prefix_cuts_the_free_one_behind_it():
    spec = P("y", "z", None)   # ('z' is manual: 'x' after it does not enter the body)
    real, verdict = _compare(lambda a: (_smap(_cos, spec, spec, "yz")(a),), (8, 2, 16),
                             P(("y", "z", "x"), None, None))
    assert real[0].spec == P("y", "z")
    _agrees(real, verdict)


@checks("PROP-11")
def test_a_held_prefix_with_no_other_manual_axis_in_the_operand_was_and_is_answered():
    spec = P("y", None, None)
    real, verdict = _compare(lambda a: (_smap(_cos, spec, spec, "yz")(a),), (8, 2, 16),
                             P(("y", "x"), None, None))
    assert real[0].spec == P(("y", "x"), None, None)
    _agrees(real, verdict)


# ------------------------------------------------------------ PROP-11: a body's all-reduce

def _chain(first, outs, ins=P(None, "y", None)):
    """``s`` of a shard_map over ``{'y'}`` returned and read by one over ``{'x'}`` whose
    in spec names 'x' on the dimension ``s``'s body splits over ('z', 'x')."""
    def f(a):
        s = _smap(first, ins, outs, "y")(a)
        return s, _smap(_psum("x"), P("x", None, None), P(), "x")(s)
    return f


PLACED = ((8, 4, 16), P(("z", "x"), None, None))


@checks("PROP-11")
@pytest.mark.parametrize("first", [_psum("y"), _pmax("y")], ids=["psum", "pmax"])
def test_a_body_s_all_reduce_comes_after_the_next_shard_map_s_in_spec(first):
    real, verdict = _compare(_chain(first, P()), *PLACED)
    assert real[0].spec == P("x")   # (the second's manual 'x', not the body's ('z', 'x'))
    _agrees(real, verdict)


@checks("PROP-11")
def test_a_body_without_a_collective_keeps_its_free_axes_on_a_replicated_out_spec():
    real, verdict = _compare(_chain(jnp.cos, P(), ins=P()), *PLACED)
    assert real[0].spec == P(("z", "x"), None, None)
    _agrees(real, verdict)


@checks("PROP-11")
def test_a_body_without_a_collective_keeps_its_free_axes_after_its_manual_prefix():
    real, verdict = _compare(_chain(jnp.cos, P(None, "y", None)), *PLACED)
    assert real[0].spec == P(("z", "x"), "y")
    _agrees(real, verdict)


@checks("PROP-11")
def test_a_pcast_to_varying_is_no_all_reduce():
    def first(t):
        return jax.lax.pcast(jnp.cos(t), "y", to="varying")
    real, verdict = _compare(_chain(first, P("y"), ins=P()), *PLACED)
    assert real[0].spec == P(("y", "z", "x"))
    _agrees(real, verdict)


@checks("PROP-11")
def test_a_psum_s_result_read_by_a_shard_map_alone_brings_no_free_axis_into_it():
    def f(a):
        s = _smap(_psum("y"), P(None, "y", None), P(), "y")(a)
        return (_smap(_cos, P("x", None, None), P("x", None, None), "x")(s),)
    real, verdict = _compare(f, *PLACED)
    assert real[0].spec == P("x")
    _agrees(real, verdict)


@checks("PROP-4", "PROP-11")
def test_three_in_a_row_where_the_middle_one_s_all_reduce_decides_is_left_open():
    def f(a):
        s = _smap(_psum("y"), P(None, "y", None), P(), "y")(a)
        s2 = _smap(_psum("z"), P(None, None, "z"), P(), "z")(s)
        return s, s2, _smap(_psum("x"), P("x", None, None), P(), "x")(s2)
    real, verdict = _compare(f, *PLACED)
    assert real[0].spec == P("x", None, "z")   # (the third's 'x', through the second's body)
    assert all(s is UNSPECIFIED for s in verdict.out_shardings)
    assert all("PROP-4" in why for _, why in verdict.undetermined)


# Drawn by notes/probes/s21_smapchain.py (seed 2): two that disagreed before.
DRAWN = [
    _recipe(("z", "y", None), (("shard_map_auto", (0,), (("z", None, None), ("z",), "psum")),
                               ("shard_map_auto", (1,), ((None, ("x", "y"), None), ("x", "y"),
                                                         "transpose"))),
            shape=(8, 4, 16), outputs=(1, 2)),
    _recipe((("z", "y"), None, None), (("shard_map_auto", (0,), ((None, None, "x"), ("x",),
                                                                 "psum")),
                                       ("shard_map_auto", (1,), ((None, "z", None), ("z",),
                                                                 "cos"))),
            outputs=(1, 2)),
]


@checks("PROP-11")
@pytest.mark.parametrize("recipe", DRAWN, ids=["psum then transpose", "psum then cos"])
def test_drawn_chains_agree(recipe):
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements, outcome.disagreements
    assert not outcome.undetermined
