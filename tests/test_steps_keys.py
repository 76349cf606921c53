"""Typed PRNG keys in a step (issue 32, item 2), against JAX 0.10.2 on 8 CPU devices.

A key array (``jax.random.key``: dtype ``key<fry>``) of shape S is described, typed and
placed by S (its key data, ``jax.random.key_data``, is uint32 S + (2,), the trailing
dimension never split); ``random_split``, ``random_bits``, ``random_fold_in``,
``random_wrap`` and ``random_unwrap`` are in the primitive table, batched as JAX batches
them and given no tangent (a key's is float0). So sharded model initialisation reads:
``jax.random.split`` of a sharded key, ``normal(key, shape)`` under out_shardings, per-key
initialisation under vmap, and a gradient of a step that draws noise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program, from_jax, vmap_program
from shardlaw.spec.bridge.program import describe_program, describe_trace
from shardlaw.spec.program.autodiff import grad_program

from test_steps_arguments import NS, P, held_to_jax, mesh
from test_steps_grad import held
from test_steps_vmap import equations


def key():
    return jax.random.key(0)


def init(k):
    k1, k2 = jax.random.split(k)
    return jax.random.normal(k1, (16, 8)), jax.random.uniform(k2, (8,))


@checks("PROG-1", "DA-1")
@pytest.mark.parametrize("spec, refused", [
    ((P("x"), P()), False),
    ((P("x", "y"), P("y")), False),
    ((P("y", "x"), P(("x", "y"))), False),
    ((P("x"), P()), True),   # the second result on the devices in another order
])
def test_sharded_initialisation_from_a_key_is_jaxs(spec, refused):
    """``jax.jit(init, out_shardings=...)(key)``: the key described as JAX types it, the
    initialisers' random_split and random_bits read, each result placed as asked; a
    result placed on the devices in another order than the key's is refused when lowered
    (DA-1), as JAX refuses it."""
    meshes = (mesh(), mesh(backwards=refused))
    fun = jax.jit(init, out_shardings=tuple(NS(m, s) for m, s in zip(meshes, spec)))
    k = jax.device_put(key(), NS(mesh(), P()))
    program, verdict, problems = held_to_jax(fun, k)
    assert not problems, problems
    assert program.inputs[0].dtype == "key<fry>" and program.inputs[0].shape == ()
    assert verdict.accepted != refused
    assert not verdict.opaque or not verdict.accepted
    if refused:
        assert (verdict.rule, verdict.stage) == ("DA-1", "lower")


@checks("PROG-1")
@pytest.mark.parametrize("count, spec", [(8, P("x")), (8, P("y")), (16, P(("x", "y"))),
                                          (6, P("x"))])
def test_a_split_key_placed_over_the_mesh_is_jaxs(count, spec):
    """``jax.random.split`` of a key, the keys placed split over the mesh (their key data
    split alike, its trailing dimension unsplit), each key drawing its layer's weights."""
    where = mesh()
    fun = jax.jit(lambda k: jax.random.split(k, count), out_shardings=NS(where, spec))
    program, verdict, problems = held_to_jax(fun, key())
    assert not problems, problems
    assert verdict.accepted and not verdict.opaque
    keys = fun(key())
    data = jax.random.key_data(keys)
    assert data.shape == (count, 2) and tuple(data.sharding.spec)[1:] in ((), (None,))
    assert verdict.out_shardings == (from_jax(keys.sharding),)
    assert verdict.out_types[0].shape == (count,) == keys.shape
    assert verdict.out_types[0].dtype == str(keys.dtype)


def _draws(k):
    return jax.random.normal(k, (4,)) + jax.random.uniform(jax.random.fold_in(k, 3), (4,))


def _rewrapped(k):
    data = jax.random.key_data(k)
    return jax.random.bits(jax.random.wrap_key_data(data + jnp.uint32(1)), (2,))


@checks("PROG-0")
@pytest.mark.parametrize("step", [_draws, _rewrapped, lambda k: jax.random.split(k, 3)],
                         ids=["normal-fold-in", "key-data-wrap", "split"])
def test_per_key_draws_under_vmap_are_what_jax_traces(step):
    """vmap over an array of keys (an ensemble's initialisation): random_bits,
    random_fold_in, random_unwrap, random_wrap and random_split batched as JAX batches
    them, equation for equation."""
    keys = jax.random.split(key(), 6)
    program = vmap_program(describe_program(jax.jit(step), key()), axis_size=6)
    traced = describe_trace(jax.vmap(jax.jit(step)), keys)
    assert equations(program) == equations(traced)
    verdict = explain_program(program)
    assert verdict.accepted and not verdict.opaque
    assert verdict.out_types == tuple(traced.value_types[n] for n in traced.outputs)


@checks("PROG-0")
def test_a_sharded_ensemble_of_keys_under_vmap_is_jaxs():
    """Keys split over 'x', each drawing its member's weights under vmap."""
    keys = jax.device_put(jax.random.split(key(), 8), NS(mesh(), P("x")))
    fun = jax.jit(jax.vmap(lambda k: jax.random.normal(k, (4, 8))))
    program, verdict, problems = held_to_jax(fun, keys)
    assert not problems, problems
    assert verdict.accepted


@checks("AD-19")
def test_grad_of_a_step_drawing_noise_from_a_key_is_jaxs():
    """The key is an argument grad does not differentiate (its tangent is float0): the
    noise's random_bits carries none, and the gradient is JAX's."""
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    fun = lambda x, k: jnp.sum(jnp.tanh(x + 0.1 * jax.random.normal(k, x.shape)))  # noqa
    answer, problems = held(jax.grad(fun), grad_program, fun, x, key())
    assert not problems, problems
    assert answer.accepted
    answer, problems = held(jax.grad(fun, 1), lambda p: grad_program(p, 1), fun, x, key())
    assert not problems, problems
    assert isinstance(answer, Rejection) and answer.rule == "AD-19", answer
