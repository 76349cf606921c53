"""describe_program of what JAX refuses while tracing (issue 32), against JAX 0.10.2.

JAX refuses a call inside the jitted function while tracing it; describe_program describes
the program up to that call (the equations traced before it, then the call from the
user's values), and explain_program answers with the rule, the trace stage, JAX's class
and the equation's path — at the top of the body, inside an inner jit, the function
jitted or not. Where the spec cannot describe the refusal (a constraint inside a
shard_map's body), JAX's error reaches the user unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import NS, P, held_to_jax, mesh

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def constrained(sharding):
    return lambda x: jax.lax.with_sharding_constraint(jnp.sin(x), sharding)


# name: (function of one (6, 4) argument, rule, path)
REFUSED = {
    "constraint-rank": (constrained(NS(mesh(), P("x", "y", None))), "WSC-4", "body[1]"),
    "constraint-explicit-axes": (lambda x: jax.lax.with_sharding_constraint(
        x, NS(EXPLICIT, P(None, "y"))), "WSC-5", "body[0]"),
    "device-put-indivisible": (lambda x: jax.device_put(x * 2, NS(mesh(), P("y"))), "ARG-4",
                               "body[1]"),
    "device-put-rank": (lambda x: jax.device_put(x * 2, NS(mesh(), P("y", None, None))),
                        "ARG-4", "body[1]"),
    "inner-jit-in-shardings": (lambda x: jnp.cos(x) + jax.jit(
        jnp.sin, in_shardings=NS(mesh(), P("y")))(x), "FIT-1", "body[1].jit.in_shardings[0]"),
    "inner-jit-out-shardings": (lambda x: jnp.cos(x) + jax.jit(
        jnp.sin, out_shardings=NS(mesh(), P("y")))(x), "FIT-1",
        "body[1].jit.out_shardings[0]"),
    "constraint-in-an-inner-jit": (lambda x: jnp.cos(x) + jax.jit(constrained(
        NS(mesh(), P("x", "y", None))))(x), "WSC-4", "body[1].jit.body[1]"),
    "device-put-two-jits-deep": (lambda x: jax.jit(lambda y: jnp.cos(y) + jax.jit(
        lambda z: jax.device_put(z, NS(mesh(), P("y"))))(y))(x), "ARG-4",
        "body[1].jit.body[0]"),
}


@checks("WSC-4", "WSC-5", "ARG-4", "FIT-1")
@pytest.mark.parametrize("jitted", [False, True], ids=["function", "jit"])
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_jax_refuses_while_tracing_is_described_up_to_the_refused_call(name, jitted):
    """JAX refuses while tracing (its class, the trace stage); describe_program gives a
    program, and explain_program refuses it by the rule at the equation's path, with
    JAX's class, at the trace stage (held_to_jax compares stage and class)."""
    fun, rule, path = REFUSED[name]
    x = np.ones((6, 4), np.float32)
    with pytest.raises(Exception):
        jax.jit(fun).trace(x)
    program, verdict, problems = held_to_jax(jax.jit(fun) if jitted else fun, x)
    assert not problems, problems
    if jitted and name == "device-put-two-jits-deep":
        path = "body[0].jit." + path   # a function that only calls a jit is that jit call
    assert (verdict.rule, verdict.stage, verdict.path) == (rule, "trace", path)
    if not jitted and name == "device-put-two-jits-deep":   # the same reading as JAX's trace
        y = np.ones((8, 4), np.float32)
        fits = describe_program(fun, y)   # read as the jit it calls: cos, the inner jit, add
        assert [eq.kind for eq in fits.equations[:2]] == [
            eq.kind for eq in program.equations] == ["opaque", "jit"]


@checks("WSC-4", "ARG-4", "FIT-1")
@pytest.mark.parametrize("name", ["constraint-rank", "device-put-indivisible",
                                  "inner-jit-in-shardings", "constraint-in-an-inner-jit"])
def test_the_same_calls_that_fit_are_accepted_as_jax_accepts_them(name):
    """The accepting side of each: the same steps on an (8, 8) argument, where the sharding
    fits, traced and described as JAX runs them (the rank case on a (8, 8, 8) argument)."""
    fun = REFUSED[name][0]
    x = np.ones((8, 8, 8) if name == "constraint-rank" or name ==
                "constraint-in-an-inner-jit" else (8, 8), np.float32)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert verdict.accepted


def test_the_program_holds_what_was_traced_before_the_refused_call():
    """The equations traced before the call are JAX's (their primitives, in order), the
    refused call comes last, and the program returns its result; the inputs keep their
    paths."""
    def step(params, x):
        h = jnp.tanh(x @ params["w"])
        return jax.lax.with_sharding_constraint(h, NS(mesh(), P("x", "y", None)))

    params = {"w": np.ones((4, 4), np.float32)}
    program = describe_program(step, params, np.ones((6, 4), np.float32))
    kinds = [getattr(eq, "primitive", eq.kind) for eq in program.equations]
    assert kinds == ["dot_general", "tanh", "sharding_constraint"]
    assert program.outputs == (len(program.value_types) - 1,)
    assert program.input_paths == ("args[0]['w']", "args[1]")
    verdict = explain_program(program)
    assert (verdict.rule, verdict.path, verdict.error_type) == ("WSC-4", "body[2]",
                                                                "ValueError")


def test_a_refusal_the_spec_does_not_describe_is_jaxs_own_error():
    """An inner jit whose in_shardings are of the wrong rank, under a vmap called in the
    function's body: JAX's ValueError, unchanged (the spec describes only a constraint
    under such a vmap yet: tests/test_steps_body_refusals_calls.py)."""
    def fun(v):
        return jnp.cos(jax.vmap(jax.jit(jnp.sin, in_shardings=NS(mesh(), P(None, None, None))))(
            v))

    x = np.ones((6, 4), np.float32)
    with pytest.raises(Exception) as jax_refusal:
        jax.jit(fun).trace(x)
    with pytest.raises(type(jax_refusal.value)) as raised:
        describe_program(fun, x)
    assert not hasattr(raised.value, "rule")


# name: (the function's own jit, its arguments, rule, path): JAX refuses the jit's options
# while tracing, before (in_shardings) or after (out_shardings) tracing its body
TOP = {
    "in-shardings": (lambda: jax.jit(lambda x, w: jnp.sin(x) @ w, in_shardings=(
        NS(mesh(), P("y")), None)), ((6, 8), (8, 8)), "FIT-1", "args[0]"),
    "out-shardings": (lambda: jax.jit(lambda x, w: jnp.sin(x) @ w, out_shardings=NS(
        mesh(), P("y"))), ((6, 8), (8, 8)), "FIT-1", "result[0]"),
    "in-shardings-rank": (lambda: jax.jit(lambda x, w: jnp.sin(x) @ w, in_shardings=(
        NS(mesh(), P(None, None, "x")), None)), ((6, 8), (8, 8)), "FIT-1", "args[0]"),
}


@checks("FIT-1")
@pytest.mark.parametrize("name", sorted(TOP))
def test_the_functions_own_jit_refused_for_its_shardings_is_described(name):
    """The jitted function's own in_shardings or out_shardings do not fit: JAX refuses
    while tracing; describe_program reads the jit's body with the options it was given,
    and the spec refuses by FIT-1 at the argument's or result's path, as JAX does; the
    same jit on arguments the shardings fit is accepted by both."""
    make, shapes, rule, path = TOP[name]
    args = tuple(np.ones(s, np.float32) for s in shapes)
    with pytest.raises(Exception):
        make().trace(*args)
    program, verdict, problems = held_to_jax(make(), *args)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path) == (rule, "trace", path)
    fits = tuple(np.ones((8,) + s[1:], np.float32) for s in shapes)
    if name != "in-shardings-rank":
        _, verdict, problems = held_to_jax(make(), *fits)
        assert not problems and verdict.accepted, problems
