"""``vmap`` of the primitives of a real step (issue 32, item 2), against JAX 0.10.2.

Each step is described on one example and batched by the spec (``vmap_program``), and
``jax.vmap`` of the same jitted step is read from JAX's own trace (``describe_trace``): the
two programs hold the same equations, in order, each with the same operands, result shapes
and parameters (dot_general's dimension numbers, a reduction's axes, a cumulative
primitive's axis, a sort's dimension, the transposes and broadcasts JAX's batchers stage
to move a batch axis or broadcast an unbatched operand). Both are then explained and run.
A primitive the spec does not batch is refused by PROG-0, naming it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from shardlaw.properties.program_vmap_harness import compare_step_vmapped, step_vmap_cases
from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program, from_jax, vmap_program
from shardlaw.spec.bridge.program import describe_program, describe_trace
from shardlaw.spec.program.description import Opaque


def _plain(value):
    """A parameter as both descriptions hold it (JAX's trace keeps numpy integers, read
    back as their text)."""
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def equations(program, out=None):
    """Every equation of ``program``, bodies included, in order: (primitive or kind,
    operands, result shapes, parameters)."""
    out = [] if out is None else out
    for eq in program.equations:
        params = dict((k, _plain(v)) for k, v in eq.params) if isinstance(eq, Opaque) else {}
        out.append((getattr(eq, "primitive", eq.kind), eq.operands,
                    tuple(r.shape for r in eq.results), params))
        if eq.body is not None:
            equations(eq.body, out)
    return out


STEPS = {   # (step, example shapes, in_axes)
    "matvec": (lambda w, x: x @ w, ((8, 4), (8,)), (None, 0)),
    "matmul-both-batched": (lambda w, x: x @ w, ((8, 4), (6, 8)), (0, 1)),
    "matmul-lhs-batched": (lambda w, x: x @ w, ((8, 4), (6, 8)), (None, 1)),
    "matmul-rhs-batched": (lambda w, x: x @ w, ((8, 4), (6, 8)), (1, None)),
    "einsum-with-batch-dims": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
                               ((2, 3, 4), (2, 4, 5)), (2, 0)),
    "bias-unbatched": (lambda b, x: x + b, ((8,), (4, 8)), (None, 0)),
    "bias-at-axis-1": (lambda b, x: jnp.tanh(x * b), ((8,), (4, 8)), (None, 1)),
    "operands-at-different-axes": (lambda a, b: a - b, ((4, 8), (4, 8)), (0, 1)),
    "batched-scalar": (lambda s, x: x * s, ((), (4, 8)), (0, None)),
    "reductions-argmax": (lambda x: (jnp.max(x, 0), jnp.argmax(x, 1), jnp.sum(x)),
                          ((4, 8),), (1,)),
    "cumsum-cumprod": (lambda x: jnp.cumsum(x, axis=1) + jnp.cumprod(x, 0), ((4, 8),), (1,)),
    "sort": (lambda x: jnp.sort(x, axis=0), ((4, 8),), (1,)),
    "argsort-iota-broadcast": (lambda x: jnp.argsort(x, axis=1), ((4, 8),), (0,)),
    "select-n": (lambda p, a, b: jnp.where(p > 0, a, b), ((4, 8),) * 3, (0, 1, None)),
    "select-n-scalar-predicate": (lambda p, a, b: jnp.where(p > 0, a, b),
                                  ((), (4, 8), (4, 8)), (0, None, None)),
    "iota-integer-pow-convert": (lambda x: (x ** 3 + jnp.arange(8.0)).astype(jnp.int32),
                                 ((8,),), (0,)),
    "reshape": (lambda x: jnp.reshape(x, (2, 16)), ((4, 8),), (1,)),
    "slice-squeeze": (lambda x: jnp.squeeze(x[1:3, ::2][:, :1], 1), ((4, 8),), (1,)),
    "rev-concatenate": (lambda x, y: jnp.concatenate([jnp.flip(x, 0), y], 1),
                        ((4, 8), (4, 2)), (1, None)),
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), ((4, 8),), (0,)),
    "layernorm": (lambda x, g: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(
        x.var(-1, keepdims=True) + 1e-5) * g, ((4, 8), (8,)), (0, None)),
    "tanh-mlp": (lambda w, b, x: jnp.tanh(x @ w + b), ((8, 4), (4,), (8,)), (None, None, 0)),
}


def _example(shape):
    return np.linspace(-1.0, 1.0, max(1, int(np.prod(shape))), dtype=np.float32).reshape(shape)


def _both(step, shapes, axes, size=3):
    examples = [_example(s) for s in shapes]
    batched = [e if a is None else np.stack([e] * size, a) for e, a in zip(examples, axes)]
    vmapped = jax.vmap(jax.jit(step), in_axes=axes)
    program = vmap_program(describe_program(jax.jit(step), *examples), axes, axis_size=size)
    return program, describe_trace(vmapped, *batched), vmapped, batched


@checks("PROG-0")
@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_vmapped_step_is_what_jax_traces(name):
    program, traced, vmapped, batched = _both(*STEPS[name])
    assert equations(program) == equations(traced)
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message
    results = jax.tree_util.tree_leaves(jax.jit(vmapped)(*batched))
    assert verdict.out_types == tuple(traced.value_types[n] for n in traced.outputs)
    assert [tuple(r.shape) for r in results] == [t.shape for t in verdict.out_types]


@checks("PROG-0")
def test_a_primitive_whose_batching_is_not_known_is_refused_by_name():
    """regularized_incomplete_beta (``jax.scipy.special.betainc``) is not batched by the
    spec: PROG-0 names it where JAX batches it (triangular_solve, the example before, is
    batched since session 21)."""
    step = lambda x, i: jax.scipy.special.betainc(2.0, 3.0, x[i])   # noqa: E731
    jax.jit(jax.vmap(step, in_axes=(0, None))).trace(np.ones((3, 2, 4), np.float32) / 2, 1)
    with pytest.raises(Rejection) as refused:
        vmap_program(describe_program(jax.jit(step), np.ones((2, 4), np.float32) / 2, 1),
                     (0, None), axis_size=3)
    assert refused.value.rule == "PROG-0"
    assert "'regularized_incomplete_beta'" in str(refused.value)


MORE = {
    "pad": (lambda x: jnp.pad(x, ((1, 2),)), ((4,),), (0,)),
    "pad-at-axis-1": (lambda x: jnp.pad(x, ((1, 0), (0, 2))), ((4, 8),), (1,)),
    "erfc-gelu": (lambda x: jax.nn.gelu(x, approximate=False), ((4, 8),), (0,)),
    "grad-of-a-bias-step": (jax.grad(lambda w, b, x: jnp.sum(jnp.tanh(x @ w + b)), (0, 1)),
                            ((8, 4), (4,), (6, 8)), (None, None, 0)),
    "grad-of-softmax": (jax.grad(lambda x: jnp.sum(jax.nn.softmax(x) ** 2)), ((4, 8),), (1,)),
}


@checks("PROG-0")
@pytest.mark.parametrize("name", sorted(MORE))
def test_a_vmapped_pad_gelu_or_gradient_is_what_jax_traces(name):
    """pad, erfc and add_any (a gradient's sum of cotangents, vmapped per example)."""
    program, traced, vmapped, batched = _both(*MORE[name])
    assert equations(program) == equations(traced)
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message
    assert verdict.out_types == tuple(traced.value_types[n] for n in traced.outputs)


def _nest(depth):
    """``depth`` jits, one inside the other, around ``sin`` then a sum."""
    from shardlaw.spec import Value
    from shardlaw.spec.program.description import Jit, Program
    vector = Value.typed((8,))
    body = Program((vector,), (Opaque((0,), (vector,), primitive="sin"),), (1,))
    for _ in range(depth - 1):
        body = Program((vector,), (Jit((0,), body=body),), (1,))
    return Program((Value.numpy((8,)),), (Jit((0,), body=body),), (1,))


@checks("PROG-0")
def test_a_deep_nest_of_jits_is_batched_not_a_recursion_error():
    """vmap_program batches a nest as deep as PROG-0 lets a description be (200 bodies
    with the batched call's own), where it once raised RecursionError; the interpreter's
    recursion limit is as it was after. A nest JAX itself traces (40 deep) is batched as
    JAX traces it."""
    import sys
    before = sys.getrecursionlimit()
    program = vmap_program(_nest(199), axis_size=3)
    assert sys.getrecursionlimit() == before
    assert program.depth == 200 and explain_program(program).accepted
    twice = vmap_program(vmap_program(_nest(199), axis_size=3), axis_size=2)
    assert twice.value_types[twice.outputs[0]].shape == (2, 3, 8)

    def step(x):
        return jnp.sin(x)
    for _ in range(39):
        step = (lambda inner: jax.jit(lambda x: inner(x)))(step)
    example = np.ones(8, np.float32)
    spec = vmap_program(describe_program(jax.jit(step), example), axis_size=3)
    traced = describe_trace(jax.vmap(jax.jit(step)), np.ones((3, 8), np.float32))
    assert equations(spec) == equations(traced)


@checks("PROG-0")
@pytest.mark.parametrize("spec", [jax.P("x"), jax.P(("x", "y")), jax.P("x", None, "y")])
def test_a_sharded_ensemble_under_vmap_is_jaxs(spec):
    """vmap over a mapped dimension split over Auto axes (an ensemble of members, one per
    shard): described, batched and placed as JAX places it, the verdict JAX's."""
    from test_steps_arguments import held_to_jax
    where = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    members = jax.device_put(_example((8, 16, 4)), jax.sharding.NamedSharding(where, spec))
    x = _example((4, 16))
    step = jax.jit(jax.vmap(lambda w, x: jnp.tanh(x @ w), in_axes=(0, None)))
    program, verdict, problems = held_to_jax(step, members, x)
    assert not problems, problems
    assert verdict.accepted and program.inputs[0].sharding.spec == from_jax(spec)


@checks("BAT-9")
def test_an_ensemble_split_over_explicit_axes_is_held_to_jax():
    """Over Explicit axes the batch dimension's split is in the batched types (JAX's
    explicit_mesh_axis): the spec's vmap writes it there, the results typed and placed as
    JAX's, the verdict JAX's."""
    from test_steps_arguments import held_to_jax
    where = jax.make_mesh((2, 4), ("x", "y"),
                          axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    members = jax.device_put(_example((8, 16, 4)), jax.sharding.NamedSharding(
        where, jax.P("x")))
    step = jax.jit(jax.vmap(lambda w: jnp.tanh(w)))
    program, verdict, problems = held_to_jax(step, members)
    assert not problems, problems
    assert verdict.accepted and program.inputs[0].spec == from_jax(jax.P("x"))


@checks("PROG-0")
@settings(max_examples=30, deadline=None)
@given(step_vmap_cases())
def test_drawn_steps_under_vmap_are_what_jax_traces(sc):
    """The vmap harness's steps of a real model's primitives (matmuls, a bias, einsums,
    broadcasting arithmetic, reductions, cumulative ops, sorts, where, reshapes and
    slices, pads, softmax and layer norm, powers and casts, keys drawing noise), each
    mapped at drawn axes: the spec's rewrite is JAX's trace, equation for equation."""
    problems = compare_step_vmapped(sc)
    assert not problems, "\n".join(problems) + f"\ncase: {sc}"
