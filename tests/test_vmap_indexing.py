"""``vmap`` of indexing — gathers, scatters, dynamic slices and updates — and of top_k,
clamp, erf, split, and selects and pads with literal operands (issue 32, item 2), against
JAX 0.10.2 on 8 CPU devices.

Each step is described on one example and batched by the spec (``vmap_program``);
``jax.vmap`` of the same jitted step is read from JAX's own trace (``describe_trace``):
the two hold the same equations in order (a dynamic slice batched is the gather JAX makes
of it, its start indices gathered into one index vector), each with the same operands,
result shapes, dtypes and parameters (the dimension numbers' text), and the verdict
accepts with JAX's result types.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.program_vmap_harness import step_equations
from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program, vmap_program
from shardlaw.spec.bridge.program import describe_program, describe_trace
from shardlaw.spec.program.description import Program
from shardlaw.spec.program.primitives import BATCHING, entry_of_name

I32 = np.int32
X = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4)
IV = np.array([1, 3, 6], I32)
U = np.full((2, 4), 5.0, np.float32)


def _step(f, examples, axes, size=3):
    """The spec's rewrite and JAX's trace of ``jax.vmap(jax.jit(f))``."""
    batched = [e if a is None else np.stack([e * (k + 1) for k in range(size)], a)
               for e, a in zip(examples, axes)]
    vmapped = jax.vmap(jax.jit(f), in_axes=axes)
    program = vmap_program(describe_program(jax.jit(f), *examples), axes, axis_size=size)
    return program, describe_trace(vmapped, *batched), jax.jit(vmapped), batched


STEPS = {   # (step, examples, in_axes)
    "take-row-operand": (lambda x, i: x[i], [X, I32(2)], (0, None)),
    "take-row-index": (lambda x, i: x[i], [X, I32(2)], (None, 0)),
    "take-row-both": (lambda x, i: x[i], [X, I32(2)], (1, 0)),
    "take-rows-operand": (lambda x, i: x[i], [X, IV], (1, None)),
    "take-rows-indices": (lambda x, i: x[i], [X, IV], (None, 0)),
    "take-rows-both": (lambda x, i: x[i], [X, IV], (1, 0)),
    "take-along-axis": (lambda x, i: jnp.take_along_axis(x, i, 1),
                        [X, np.tile(np.array([[0, 3]], I32), (8, 1))], (0, 1)),
    "embedding-lookup": (lambda e, t: e[t] * 2.0, [X, np.array([[1, 2], [7, 0]], I32)],
                         (None, 0)),
    "dynamic-slice-operand": (lambda x, i: jax.lax.dynamic_slice(x, (i, i), (2, 3)),
                              [X, I32(1)], (1, None)),
    "dynamic-slice-index": (lambda x, i: jax.lax.dynamic_slice(x, (i, i), (2, 4)),
                            [X, I32(1)], (None, 0)),
    "dynamic-slice-both": (lambda x, i: jax.lax.dynamic_slice(x, (i, i), (2, 3)),
                           [X, I32(1)], (1, 0)),
    "dynamic-slice-literal-last": (lambda x, i: jax.lax.dynamic_slice(x, (i, 0), (2, 4)),
                                   [X, I32(1)], (1, 0)),
    "dynamic-slice-vector": (lambda v, i: jax.lax.dynamic_slice(v, (i,), (3,)),
                             [X[0], I32(2)], (0, None)),
    "update-slice-operand": (lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, i)),
                             [X, U, I32(1)], (1, None, None)),
    "update-slice-update": (lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, i)),
                            [X, U, I32(1)], (None, 0, None)),
    "update-slice-index": (lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, i)),
                           [X, U, I32(1)], (None, None, 0)),
    "update-slice-all": (lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, 0)),
                         [X, U, I32(1)], (1, 1, 0)),
    "scatter-add-operand": (lambda x, i: x.at[i].add(1.0), [X, IV], (0, None)),
    "scatter-add-indices": (lambda x, i: x.at[i].add(1.0), [X, IV], (None, 0)),
    "scatter-set-both": (lambda x, i, u: x.at[i].set(u), [X, IV, np.ones((3, 4),
                         np.float32)], (1, 0, None)),
    "scatter-mul-min-max": (lambda x, i: x.at[i].multiply(2.0).at[i].min(0.5).at[i].max(
        -0.5), [X, IV], (1, None)),
    "top-k": (lambda x: jax.lax.top_k(x, 2), [X], (1,)),
    "top-k-values-times": (lambda x: jax.lax.top_k(x * 2.0, 3)[0], [X], (0,)),
    "clamp-literal-bounds": (lambda x: jax.lax.clamp(-0.5, x, 0.5), [X], (1,)),
    "clamp-traced-bounds": (lambda lo, x, hi: jax.lax.clamp(lo, x, hi),
                            [np.float32(-0.5), X, np.float32(0.5)], (0, 1, None)),
    "clamp-array-bounds": (lambda lo, x, hi: jax.lax.clamp(lo, x, hi),
                           [X - 1.0, X, X + 1.0], (0, 1, None)),
    "clamp-scalar-operand": (lambda lo, x, hi: jax.lax.clamp(lo, x, hi),
                             [np.float32(-0.5), np.float32(0.1), np.float32(0.5)],
                             (0, None, None)),
    "erf-gelu-exact": (lambda x: jax.lax.erf(x) * x, [X], (1,)),
    "where-literal-cases": (lambda s: jnp.where(s > 0, 1.0, 0.0), [np.float32(0.5)], (0,)),
    "where-literal-case": (lambda s, t: jnp.where(s > 0, t, 0.0),
                           [np.float32(0.5), np.float32(2.0)], (None, 0)),
    "grad-of-logsumexp": (jax.grad(lambda h: jnp.sum(
        h - jax.scipy.special.logsumexp(h, -1, keepdims=True))), [X[0]], (0,)),
    "split": (lambda x: jnp.split(x, [1, 3], axis=1), [X], (0,)),
    "grad-of-concatenate-split": (jax.grad(lambda x: jnp.sum(jnp.concatenate(
        [x, x * 2.0], -1)[..., :6] ** 2)), [X], (1,)),
    "pad-literal-value": (lambda x: jax.lax.pad(x, 0.0, ((1, 2, 0), (0, 0, 1))), [X], (1,)),
}


@checks("PROG-0")
@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_vmapped_indexing_step_is_what_jax_traces(name):
    f, examples, axes = STEPS[name]
    program, traced, jitted, batched = _step(f, examples, axes)
    assert step_equations(program) == step_equations(traced)
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message
    assert not verdict.opaque
    assert verdict.out_types == tuple(traced.value_types[n] for n in traced.outputs)
    results = jax.tree_util.tree_leaves(jitted(*batched))
    assert [tuple(r.shape) for r in results] == [t.shape for t in verdict.out_types]


@checks("PROG-0")
def test_a_literal_start_index_first_is_typed_as_jax_but_broadcast_last():
    """A start index the description does not hold (a literal, here the first) is
    broadcast after the held ones: the two broadcasts come in the other order than JAX's
    (the description does not say where the literal stood), every other equation and the
    result types are JAX's."""
    f = lambda x, i: jax.lax.dynamic_slice(x, (0, i), (8, 2))   # noqa: E731
    program, traced, _, _ = _step(f, [X, I32(1)], (1, 0))
    ours, theirs = step_equations(program), step_equations(traced)
    spread = [k for k, e in enumerate(theirs) if e[0] == "broadcast_in_dim"]
    assert len(spread) == 2 and len(ours) == len(theirs)
    assert [e for k, e in enumerate(ours) if k not in spread] == \
        [e for k, e in enumerate(theirs) if k not in spread]
    assert [ours[k][3] for k in spread] == [theirs[k][3] for k in reversed(spread)]
    assert explain_program(program).out_types == tuple(
        traced.value_types[n] for n in traced.outputs)


def test_the_indexing_primitives_have_batching_rules():
    for name in ("gather", "dynamic_slice", "dynamic_update_slice", "scatter", "scatter-add",
                 "scatter-sub", "scatter-mul", "scatter-min", "scatter-max", "top_k",
                 "clamp", "erf", "split"):
        assert BATCHING.of(entry_of_name(name)) is not None, name
