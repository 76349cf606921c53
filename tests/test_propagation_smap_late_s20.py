"""Session 20's last shard_map leaving mesh axes automatic (issue 33; PROP-20, PROP-4): the
final local deep run's recipe (/work/wt/recipes/s20_smap.tsv), where a transpose's result
read by such a shard_map takes the spec's manual axis, not its producer's split, once a
value it is made from has another use. Which order Shardy visits that chain in is not
written, so the spec leaves the shape open (``shared_chain_link``); its neighbours, one
use only or a spec agreeing with the producer, stay answered. Every case is compared
with what jax.jit returns on 8 CPU devices (JAX 0.10.2, Shardy)."""

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

# The deep run's recipe: mesh (4, 2), devices permuted; a dead slice, ``t = a.T``,
# ``a + b`` and a shard_map over ``{'y'}`` of in spec P('y', None) reading ``t``.
RECIPE = Recipe(mesh=(4, 2), reversed_devices=False, inputs=(((2, 2), ("y", None)),
                                                              ((2,), (None,))),
                steps=(("input", (), 0), ("slice", (0,), (1, 1)), ("transpose", (0,), (1, 0)),
                       ("input", (), 1), ("broadcast_add", (0, 3), None),
                       ("shard_map_auto", (2,), (("y", None), ("y",), "cos"))),
                outputs=(2, 4, 5), devices=(4, 7, 1, 6, 0, 3, 2, 5), out_shardings=(),
                axis_types="")


def _mesh():
    devices = np.array(jax.devices()[:8])[[4, 7, 1, 6, 0, 3, 2, 5]].reshape(4, 2)
    return jax.sharding.Mesh(devices, ("x", "y"))


def _auto(mesh, t, spec, names):
    return jax.shard_map(lambda u: jnp.cos(u) * 2.0, mesh=mesh, in_specs=spec,
                         out_specs=spec, axis_names=set(names))(t)


def _compare(f, mesh, spec=P("y", None)):
    args = [jax.device_put(jnp.ones((8, 8)), NS(mesh, spec)),
            jax.device_put(jnp.ones((8,)), NS(mesh, P()))]
    jitted = jax.jit(f)
    return [r.sharding for r in jitted(*args)], explain_program(describe_program(jitted, *args))


def _agrees(real, verdict):
    assert verdict.undetermined == ()
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def _open(verdict):
    assert all(s is UNSPECIFIED for s in verdict.out_shardings)
    assert verdict.undetermined and all(
        "PROP-4" in why and "shard_map leaving axes automatic reads a value made from one "
        "of more uses" in why for _, why in verdict.undetermined)


@checks("PROP-4", "PROP-20")
def test_the_deep_run_s_recipe_is_left_open_not_answered_with_the_producer_s_split():
    outcome = compare_recipe(RECIPE)
    assert not outcome.disagreements
    assert [s.spec for s in outcome.jax] == [P("y", None)] * 3   # (the transpose: P('y'))
    assert all(s is UNSPECIFIED for s in outcome.spec)
    assert any("one of more uses" in why for _, why in outcome.undetermined)


def _shared(use):
    """``t = a.T`` read by the shard_map and returned, beside ``use(a, b)``."""
    def f(a, b):
        t = a.T
        return t, use(a, b), _auto(_mesh(), t, P("y", None), "y")
    return f


@checks("PROP-4", "PROP-20")
@pytest.mark.parametrize("use", [lambda a, b: a + b, lambda a, b: a * 2.0,
                                 lambda a, b: jnp.sin(a), lambda a, b: a],
                         ids=["a+b", "a*2", "sin(a)", "a returned"])
def test_a_transpose_of_a_shared_value_takes_the_spec_s_axis_and_is_left_open(use):
    real, verdict = _compare(_shared(use), _mesh())
    assert real[0].spec == P("y", None)   # the spec's manual axis, not the transpose's
    _open(verdict)


@checks("PROP-4", "PROP-20")
def test_a_shared_value_further_up_the_chain_leaves_it_open_too():
    def f(x, b):
        t = jnp.sin(x).T
        return t, x * 2.0, _auto(_mesh(), t, P("y", None), "y")
    real, verdict = _compare(f, _mesh())
    assert real[0].spec == P("y", None)
    _open(verdict)


@checks("PROP-4", "PROP-20")
def test_a_sin_of_a_shared_value_read_through_another_dimension_is_left_open():
    def f(a, b):
        s = jnp.sin(a)
        return s, a + b, _auto(_mesh(), s, P(None, "y"), "y")
    real, verdict = _compare(f, _mesh())
    assert real[0].spec == P(None, "y")   # the spec's, not sin's P('y', None)
    _open(verdict)


# ------------------------------------------------------------ neighbours still answered

@checks("PROP-20")
def test_a_transpose_of_a_value_of_one_use_keeps_its_split():
    def f(a, b):
        t = a.T
        return t, _auto(_mesh(), t, P("y", None), "y")
    real, verdict = _compare(f, _mesh())
    assert real[0].spec == P(None, "y")
    _agrees(real, verdict)


@checks("PROP-20")
def test_a_sin_of_a_value_of_one_use_keeps_its_split_beside_another_input_s_use():
    def f(a, b):
        s = jnp.sin(a)
        return s, b * 2.0, _auto(_mesh(), s, P(None, "y"), "y")
    real, verdict = _compare(f, _mesh())
    assert real[0].spec == P("y", None)
    _agrees(real, verdict)


@checks("PROP-20")
def test_a_shared_value_whose_spec_agrees_with_the_producer_is_answered():
    def f(a, b):
        t = a.T
        return t, a + b, _auto(_mesh(), t, P("x", None), "x")
    real, verdict = _compare(f, _mesh())
    assert real[0].spec == P("x", "y")
    _agrees(real, verdict)
