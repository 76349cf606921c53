"""Steps as the field's libraries hand them, read by describe_program (issue 32), against JAX.

An optax AdamW step over sharded parameters and its state, a flax NNX ``nnx.jit`` step
with a module and an ``nnx.Optimizer`` (``nnx.value_and_grad`` inside), an equinox
``eqx.filter_jit`` step over a module that holds functions: each is described as the user
holds it, every input named by its pytree path (``args[1][0].mu['w']``,
``args[0].kernel.value``, ``args[0].layers[1].weight``), and its verdict is the one
``jax.jit`` gives the library's function — traced, lowered, compiled and run — accepting,
and refusing where the state is placed on other devices than the parameters.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from shardlaw.properties.program_harness import JaxOutcome, stage_in_jax
from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import NS, P, held_to_jax, mesh, with_compiler_choices

X = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(8, 8)


def held_as_compiled(fun, staged, *args):
    """(the program, its verdict) for a library's step, whose program is the one jit the
    library calls: accepted as JAX runs it, its results placed as that jit's executable
    places them (the library's own results beside the user's: NNX's new state)."""
    staged = staged or fun
    outcome = JaxOutcome()
    program = describe_program(fun, *args)
    stage_in_jax(staged, args, outcome)
    assert outcome.error is None, outcome.error
    compiled = staged.trace(*args).lower().compile()
    compiled = getattr(compiled, "compiled", compiled)   # equinox's wraps JAX's
    verdict = explain_program(with_compiler_choices(program, outcome))
    assert verdict.accepted, verdict.message
    shardings = [from_jax(s) for s in jax.tree_util.tree_leaves(compiled.output_shardings)]
    assert list(verdict.out_shardings) == shardings
    return program, verdict


# --------------------------------------------------------------------------- optax

def _optax_step(tx):
    def loss(params, x):
        return jnp.sum(jnp.tanh(x @ params["w"] + params["b"]))

    @jax.jit
    def step(params, opt_state, x):
        grads = jax.grad(loss)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return step


def _params(where):
    return {"w": jax.device_put(X, NS(where, P("x"))),
            "b": jax.device_put(X[0], NS(where, P()))}


@checks("DA-1")
def test_an_optax_adamw_step_is_described_with_its_state_by_path():
    tx = optax.adamw(1e-3)
    params = _params(mesh())
    opt_state = tx.init(params)
    program, verdict, problems = held_to_jax(_optax_step(tx), params, opt_state, X)
    assert not problems, problems
    assert verdict.accepted
    assert "args[1][0].mu['w']" in program.input_paths
    assert program.input_paths[:2] == ("args[0]['b']", "args[0]['w']")


@checks("DA-1")
def test_an_optax_state_on_other_devices_is_refused_by_its_path():
    """The AdamW state placed over the devices in another order than the parameters:
    JAX refuses when lowering (DA-1, ValueError), and the verdict names the state's leaf."""
    tx = optax.adamw(1e-3)
    opt_state = tx.init(_params(mesh(backwards=True)))
    program, verdict, problems = held_to_jax(_optax_step(tx), _params(mesh()), opt_state, X)
    assert not problems, problems
    assert (verdict.rule, verdict.stage) == ("DA-1", "lower")
    assert "args[1][0]." in verdict.message


# --------------------------------------------------------------------------- flax NNX

def _nnx_train():
    @nnx.jit
    def train(model, optimizer, x):
        def loss(m):
            return jnp.sum(jnp.tanh(m(x)))

        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        return value

    return train


def _linear(where):
    model = nnx.Linear(8, 8, rngs=nnx.Rngs(0))
    model.kernel[...] = jax.device_put(model.kernel[...], NS(where, P(None, "y")))
    model.bias[...] = jax.device_put(model.bias[...], NS(where, P()))
    return model


def test_an_nnx_step_with_a_module_and_an_optimizer_is_described_by_path():
    """nnx.jit of a step that takes nnx.value_and_grad of the module and updates an
    nnx.Optimizer: described as the user calls it, its state named by path."""
    model = _linear(mesh())
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    program, verdict = held_as_compiled(_nnx_train(), None, model, optimizer, X)
    assert verdict.out_types[-1].shape == ()   # the new state, then the loss
    assert program.input_paths[:2] == ("args[0].bias.value", "args[0].kernel.value")
    assert "args[1].opt_state[0].mu['kernel'].value" in program.input_paths


@checks("DA-1")
def test_an_nnx_module_on_other_devices_than_its_input_is_refused_by_path():
    model = _linear(mesh(backwards=True))
    x = jax.device_put(X, NS(mesh(), P("x")))
    step = nnx.jit(lambda m, x: m(x))
    program, verdict, problems = held_to_jax(step, model, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage) == ("DA-1", "lower")
    assert "args[0]." in verdict.message and ".value" in verdict.message


# --------------------------------------------------------------------------- equinox

class _FilterJitStages:
    """equinox's filter_jit as the JAX harness stages a jit (it lowers, it does not trace):
    ``trace(*args).lower()`` is its ``lower(*args)``."""

    def __init__(self, fun):
        self.fun = fun

    def trace(self, *args):
        fun = self.fun
        return type("Traced", (), {"lower": lambda _: fun.lower(*args)})()

    def __call__(self, *args):
        return self.fun(*args)


def _mlp(where):
    model = eqx.nn.MLP(8, 8, 16, 2, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    return jax.tree_util.tree_map(
        lambda a: jax.device_put(a, NS(where, P())) if eqx.is_array(a) else a, model)


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "filter_grad"])
def test_an_equinox_filter_jit_step_over_a_module_holding_functions_is_described(grad):
    """The MLP holds its activation functions as fields: filter_jit makes them static, and
    so does describe_program; its arrays are the inputs, named by path."""
    def forward(model, x):
        return jnp.sum(jax.vmap(model)(x))

    body = (lambda m, x: eqx.filter_grad(forward)(m, x)) if grad else forward
    step = eqx.filter_jit(body)
    model = _mlp(mesh())
    program = describe_program(step, model, X)
    assert program.input_paths[:2] == ("args[0].layers[0].weight", "args[0].layers[0].bias")
    assert program.input_paths[-1] == "args[1]"
    held_as_compiled(step, _FilterJitStages(step), model, X)


@checks("DA-1")
def test_an_equinox_module_on_other_devices_than_its_input_is_refused_by_path():
    step = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))
    x = jax.device_put(X, NS(mesh(), P("x")))
    _, verdict, problems = held_to_jax(step, _mlp(mesh(backwards=True)), x,
                                      staged=_FilterJitStages(step))
    assert not problems, problems
    assert (verdict.rule, verdict.stage) == ("DA-1", "lower")
    assert "args[0].layers[" in verdict.message
