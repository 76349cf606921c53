"""grad's own input checks on the program path (issue 32), against JAX 0.10.2.

* AD-19: grad and value_and_grad refuse an integer or bool input among argnums with JAX's
  TypeError, before anything is traced (a Python int is int32 and a Python bool bool, as
  jit types them: ARG-2);
* AD-20: jvp, linearize, vjp and grad refuse a program in which a ``pure_callback`` or an
  ``io_callback`` takes a value that carries a tangent, with JAX's ValueError; a callback
  whose operands carry none (a constant, another argument, ``stop_gradient``, an integer)
  is differentiated as JAX differentiates it.

Every case is asked of both: ``jax.jit`` of JAX's transformation, traced, lowered,
compiled and run, and the spec's rewrite of ``describe_program``'s program; they refuse
at the same stage with JAX's class, or accept alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from shardlaw.properties.program_harness import JaxOutcome, outcome_problems, stage_in_jax
from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import (
    grad_program, jvp_program, linearize_program, value_and_grad_program, vjp_program,
)

from test_steps_arguments import NS, P, mesh, with_compiler_choices


def callback(x):
    return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def io(x):
    return io_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def held(transformed, rewrite, fun, *args):
    """(the spec's refusal or verdict, the problems): JAX's ``jax.jit(transformed)`` staged
    to the end against ``rewrite(describe_program(fun, *args))``."""
    outcome = JaxOutcome()
    stage_in_jax(jax.jit(transformed), args, outcome)
    try:
        program = rewrite(describe_program(fun, *args))
    except Rejection as refused:
        if outcome.error is None:
            return refused, [f"JAX accepts; the spec refuses: {refused}"]
        same = refused.stage == outcome.stage and isinstance(refused, type(outcome.error))
        return refused, [] if same else [
            f"JAX refused at {outcome.stage} with {type(outcome.error).__name__}: "
            f"{outcome.error}; the spec at {refused.stage} with {type(refused).__name__}"]
    verdict = explain_program(with_compiler_choices(program, outcome))
    return verdict, outcome_problems(verdict, outcome)


X = np.linspace(0.0, 1.0, 32, dtype=np.float32).reshape(8, 4)


def placed():
    return jax.device_put(X, NS(mesh(), P("x")))


# --------------------------------------------------------------------------- AD-19

GRAD_INPUTS = {   # (function, arguments, argnums, refused)
    "int-array": (lambda x: x.sum().astype(jnp.float32), (np.ones((8, 4), np.int32),), 0,
                  True),
    "python-int": (lambda x: x * 1.0, (3,), 0, True),
    "python-bool": (lambda x: 1.0, (True,), 0, True),
    "int64-numpy": (lambda x: x.sum().astype(jnp.float32), (np.ones(4, np.int64),), 0, True),
    "int-second-argnum": (lambda x, n: (x * n).sum(), (X, 3), 1, True),
    "int-in-a-tuple-of-argnums": (lambda x, n: (x * n).sum(), (X, 3), (0, 1), True),
    "int-not-differentiated": (lambda x, n: (x * n).sum(), (X, 3), 0, False),
    "float64-numpy": (lambda x: jnp.sin(x).sum(), (X.astype(np.float64),), 0, False),
    "placed-float": (lambda x: jnp.sin(x).sum(), ("placed",), 0, False),
}


@checks("AD-19")
@pytest.mark.parametrize("value_and", [False, True], ids=["grad", "value_and_grad"])
@pytest.mark.parametrize("name", sorted(GRAD_INPUTS))
def test_grad_refuses_integer_and_bool_inputs_as_jax_does(name, value_and):
    fun, args, argnums, refused = GRAD_INPUTS[name]
    args = tuple(placed() if isinstance(a, str) else a for a in args)
    transform = jax.value_and_grad if value_and else jax.grad
    rewrite = value_and_grad_program if value_and else grad_program
    answer, problems = held(transform(fun, argnums), lambda p: rewrite(p, argnums), fun,
                            *args)
    assert not problems, problems
    if refused:
        assert (answer.rule, answer.stage, type(answer).__mro__[2]) == (
            "AD-19", "trace", TypeError)
        assert "real- or complex-valued inputs" in str(answer)
    else:
        assert answer.accepted


def test_the_refused_input_is_named_by_its_pytree_path():
    """The refusal names the integer leaf where the user holds it."""
    params = {"w": X, "steps": 3}
    with pytest.raises(Rejection) as refused:
        grad_program(describe_program(lambda p: (p["w"] * p["steps"]).sum(), params))
    assert (refused.value.rule, refused.value.path) == ("AD-19", "args[0]['steps']")
    with pytest.raises(TypeError):
        jax.jit(jax.grad(lambda p: (p["w"] * p["steps"]).sum())).trace(params)


# --------------------------------------------------------------------------- AD-20

CALLBACKS = {   # (function, arguments, refused)
    "on-the-input": (lambda x: callback(x).sum(), (X,), True),
    "io-callback": (lambda x: io(x).sum(), (X,), True),
    "inside-an-inner-jit": (lambda x: jax.jit(lambda y: callback(y).sum())(x * 2.0), (X,),
                            True),
    "after-a-constraint": (lambda x: callback(jax.lax.with_sharding_constraint(
        x, NS(mesh(), P(None, "y")))).sum(), ("placed",), True),
    "on-a-constant": (lambda x: (callback(jnp.ones((8, 4))) * x).sum(), (X,), False),
    "on-another-argument": (lambda x, y: (callback(y) * x).sum(), (X, X), False),
    "on-a-stopped-gradient": (lambda x: (callback(jax.lax.stop_gradient(x)) * x).sum(),
                              (X,), False),
    "on-an-integer": (lambda x: (callback(jnp.argmax(x).astype(jnp.float32)[None]) * x)
                      .sum(), (X,), False),
}


@checks("AD-20")
@pytest.mark.parametrize("name", sorted(CALLBACKS))
def test_grad_through_a_callback_is_refused_as_jax_refuses_it(name):
    fun, args, refused = CALLBACKS[name]
    args = tuple(placed() if isinstance(a, str) else a for a in args)
    answer, problems = held(jax.grad(fun), grad_program, fun, *args)
    assert not problems, problems
    if refused:
        assert (answer.rule, answer.stage, type(answer).__mro__[2]) == (
            "AD-20", "trace", ValueError)
        assert "callback" in str(answer) and "do not support JVP" in str(answer)
    else:
        assert answer.accepted


@checks("AD-20")
@pytest.mark.parametrize("transform", ["jvp", "linearize", "vjp"])
def test_every_derivative_of_a_callback_is_refused(transform):
    """jvp, linearize and vjp meet the callback's JVP as grad does: JAX's ValueError while
    tracing, AD-20 in the spec."""
    fun = lambda x: callback(x) * 2.0   # noqa: E731
    jaxs = {"jvp": lambda x: jax.jvp(fun, (x,), (x,)),
            "linearize": lambda x: jax.linearize(fun, x)[1](x),
            "vjp": lambda x: jax.vjp(fun, x)[1](x)}
    with pytest.raises(ValueError, match="do not support JVP"):
        jax.jit(jaxs[transform]).trace(X)
    rewrite = {"jvp": jvp_program, "linearize": linearize_program, "vjp": vjp_program}
    with pytest.raises(Rejection) as refused:
        rewrite[transform](describe_program(fun, X))
    assert (refused.value.rule, refused.value.stage, refused.value.path) == (
        "AD-20", "trace", "body[0]")
    assert isinstance(refused.value, ValueError)


@checks("DA-1")
def test_the_gradients_verdict_names_inputs_by_path():
    """grad_program keeps the inputs' paths: JAX refuses the gradient of a step whose
    parameters are on the devices in two orders when lowering (DA-1, ValueError), and the
    verdict names both leaves."""
    params = {"w": jax.device_put(X, NS(mesh(), P("x"))),
              "b": jax.device_put(X, NS(mesh(backwards=True), P()))}
    loss = lambda p: jnp.sum(jnp.tanh(p["w"] * p["b"]))   # noqa: E731
    answer, problems = held(jax.grad(loss), grad_program, loss, params)
    assert not problems, problems
    assert (answer.rule, answer.stage) == ("DA-1", "lower")
    assert "args[0]['b']" in answer.message and "args[0]['w']" in answer.message
