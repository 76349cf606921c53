"""Every primitive of a real step under grad (issue 32, items 2 and 5), against JAX 0.10.2.

* the transpose of an implicit broadcast (``x @ w + b``, a bias of shape ``(10,)`` read as
  ``(1, 10)``; a scalar times an array) sums the cotangent back to the operand's shape, as
  JAX's transpose of ``add``, ``sub`` and ``mul`` does: no false AD-13;
* an integer result (``argsort``'s indices, ``sort``'s second result) has no tangent (JAX's
  float0): grad of a step reading one differentiates where it once raised a bare TypeError;
* a shard_map's body passing a literal to a jitted helper holds it as a closed-over
  constant, which the shard_map's linearization and transpose carry.

Each case is asked of both, as ``tests/test_steps_grad.py`` does: ``jax.jit`` of JAX's
transformation traced, lowered, compiled and run, and the spec's rewrite of
``describe_program``'s program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from shardlaw.properties.program_ad_harness import compare_step_grad, step_grad_cases
from shardlaw.properties.registry import checks
from shardlaw.spec.program.autodiff import grad_program

from test_steps_arguments import NS, P, mesh
from test_steps_grad import held

W = np.linspace(-1.0, 1.0, 320, dtype=np.float32).reshape(32, 10)
B = np.linspace(-1.0, 1.0, 10, dtype=np.float32)
X = np.linspace(0.0, 1.0, 64 * 32, dtype=np.float32).reshape(64, 32)
V = np.linspace(-1.0, 1.0, 8, dtype=np.float32)


def explicit_mesh():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def mlp(w, b, x):
    return jnp.sum(jnp.tanh(x @ w + b))


def gelu_mlp(w, b, x):
    return jnp.mean(jax.nn.gelu(x @ w + b))


def scaled(s, x):
    return jnp.sum(jnp.sin(x * s - s))


def shifted(b, x):
    return jnp.sum((x - b) ** 2)


STEPS = {   # (function, arguments as numpy or a placement, argnums)
    "tanh-bias": (mlp, (W, B, X), (0, 1)),
    "gelu-bias": (gelu_mlp, (W, B, X), (0, 1)),
    "tanh-bias-placed": (mlp, (W, B, ("x", "x")), (0, 1)),
    "scalar-times-array": (scaled, (np.float32(0.5), X), (0, 1)),
    "bias-subtracted": (shifted, (B, np.ones((64, 10), np.float32)), 0),
    "argsort": (lambda v: jnp.sum(jnp.argsort(v) * v), (V,), 0),
    "sort": (lambda v: jnp.sum(jnp.sort(v) * jnp.arange(8.0)), (V,), 0),
    "cumsum-argmax": (lambda v: jnp.sum(jnp.cumsum(v)) + jnp.argmax(v), (V,), 0),
}


def _placed(args, where):
    out = []
    for a in args:
        if isinstance(a, tuple):   # X split over a mesh
            out.append(jax.device_put(X, NS(where, P(*a[:1]))))
        else:
            out.append(a)
    return tuple(out)


@checks("AD-13")
@pytest.mark.parametrize("name", sorted(STEPS))
def test_grad_of_a_step_with_broadcasts_and_integer_results_is_jaxs(name):
    fun, args, argnums = STEPS[name]
    args = _placed(args, mesh())
    answer, problems = held(jax.grad(fun, argnums), lambda p: grad_program(p, argnums),
                            fun, *args)
    assert not problems, problems
    assert answer.accepted


@checks("AD-13")
def test_the_bias_cotangent_is_summed_back_to_the_bias_shape():
    """The gradient's body reduces the (64, 10) cotangent over its first dimension and
    reshapes it to the broadcast operand's (1, 10) before broadcast_in_dim's transpose."""
    from shardlaw.spec.bridge.program import describe_program
    program = grad_program(describe_program(mlp, W, B, X), (0, 1))
    names = []

    def walk(p):
        for eq in p.equations:
            names.append((getattr(eq, "primitive", eq.kind),
                          tuple(tuple(r.shape) for r in eq.results)))
            if eq.body is not None:
                walk(eq.body)
    walk(program)
    assert ("reduce_sum", ((10,),)) in names and ("reshape", ((1, 10),)) in names
    assert program.value_types[program.outputs[1]].shape == (10,)


@checks("AD-13")
@pytest.mark.parametrize("bias_split", [None, "y"])
def test_a_bias_split_unlike_the_cotangent_on_an_explicit_mesh_is_still_checked(bias_split):
    """On an Explicit mesh the summed cotangent is typed as JAX types it; a step JAX
    differentiates is accepted, its gradient's shapes JAX's."""
    where = explicit_mesh()
    w = jax.device_put(np.ones((32, 16), np.float32), NS(where, P(None, bias_split)))
    b = jax.device_put(np.ones(16, np.float32), NS(where, P(bias_split)))
    x = jax.device_put(X, NS(where, P("x")))
    fun = lambda w, b, x: jnp.sum(jnp.tanh(x @ w + b))   # noqa: E731
    answer, problems = held(jax.grad(fun, (0, 1)), lambda p: grad_program(p, (0, 1)),
                            fun, w, b, x)
    assert not problems, problems


@jax.jit
def _helper(v, s):
    return jnp.tanh(v) * s


SHARD_BODIES = {
    "literal-to-a-jitted-helper": lambda a: _helper(a, 2.0),
    "integer-literal": lambda a: _helper(a, 2),
    "literal-first": lambda a: _helper(2.0, a),
    "where-with-a-literal": lambda a: jnp.where(a > 0, a, 0.0),
}


@checks("AD-10", "AD-11")
@pytest.mark.parametrize("name", sorted(SHARD_BODIES))
def test_grad_of_a_shard_map_passing_a_literal_to_a_jitted_helper_is_jaxs(name):
    where = mesh()
    body = SHARD_BODIES[name]

    def fun(x):
        return jnp.sum(jax.shard_map(body, mesh=where, in_specs=P("x"),
                                     out_specs=P("x"))(x))
    x = jax.device_put(X[:8, :4], NS(where, P("x")))
    answer, problems = held(jax.grad(fun), grad_program, fun, x)
    assert not problems, problems
    assert answer.accepted


@checks("AD-4")
def test_a_predicates_tangent_the_body_never_reads_is_no_input_of_the_tangent_jit():
    """grad with respect to ``where``'s predicate too: its tangent dies at the comparison
    (a zero tangent), so the tangent jit of ``where``'s jit reads the cases' only, as JAX's
    dead-code elimination leaves it (the spec once refused it by PROG-0)."""
    fun = lambda p, a, b: jnp.sum(jnp.where(p > 0, a, b))   # noqa: E731
    p = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    answer, problems = held(jax.grad(fun, (0, 2)), lambda q: grad_program(q, (0, 2)),
                            fun, p, p, p)
    assert not problems, problems
    assert answer.accepted


@checks("AD-0")
def test_grad_of_a_step_with_integer_results_only_is_refused_while_tracing():
    """A loss of argmax only: JAX's TypeError while tracing; AD-0 at stage trace."""
    fun = lambda x: jnp.argmax(x)   # noqa: E731
    answer, problems = held(jax.grad(fun), grad_program, fun, X)
    assert not problems, problems
    assert (answer.rule, answer.stage) == ("AD-0", "trace")


@checks("AD-13")
@settings(max_examples=15, deadline=None)
@given(step_grad_cases())
def test_drawn_steps_under_grad_are_jaxs(sc):
    """The AD harness's steps of a real model's primitives under grad, their float
    arguments numpy or placed over the mesh: held to ``jax.jit(jax.grad(...))`` traced,
    lowered, compiled and run."""
    problems = compare_step_grad(sc)
    assert not problems, "\n".join(problems) + f"\ncase: {sc}"
