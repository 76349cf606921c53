"""Real-shaped steps against real JAX: layers, optimizers, scan, remat, cond (issue 32).

``test_steps_agree_with_jax`` draws a step as users write it
(:func:`~shardlaw.properties.steps_strategies.step_cases`: a bias, relu and gelu MLPs,
layernorm, softmax, attention and SwiGLU blocks, scanned, rematerialised or under a cond,
taken forward, under ``grad``, under ``vmap`` or as an optax step with its state, over
Auto, Explicit and abstract meshes, under FSDP, tensor-parallel and data-parallel plans,
some of which JAX refuses) and holds the spec's verdict to ``jax.jit``
(:func:`~shardlaw.properties.steps_harness.compare_step`).
``test_fuzzed_steps_are_accepted_as_jax_accepts_them`` is the fuzz layer: chains of a
wider vocabulary under transformations, the spec's acceptance held to JAX's, no bare
exception (:func:`~shardlaw.properties.steps_harness.compare_fuzz`). A step the spec
cannot describe yet is counted as not described (by construct), never as agreement.

The ``steps`` suite of ``shardlaw campaign``; ``tests/test_steps_property.py`` runs it in
the project's own ``pytest``.
"""

from __future__ import annotations

from hypothesis import given, settings

from shardlaw.properties.registry import checks
from shardlaw.properties.steps_harness import compare_fuzz, compare_step
from shardlaw.properties.steps_strategies import fuzz_programs, step_cases
from shardlaw.properties.suites import examples

__all__ = ["test_steps_agree_with_jax", "test_fuzzed_steps_are_accepted_as_jax_accepts_them"]


@checks("DA-1", "PROG-4")
@settings(max_examples=examples(30), deadline=None)
@given(step_cases())
def test_steps_agree_with_jax(case):
    """The spec and jax.jit agree on every real-shaped step the spec describes."""
    problems = compare_step(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"


@checks("DA-1", "PROG-4")
@settings(max_examples=examples(30), deadline=None)
@given(fuzz_programs())
def test_fuzzed_steps_are_accepted_as_jax_accepts_them(case):
    """The spec accepts a fuzzed step exactly where jax.jit does, and raises nothing else."""
    problems = compare_fuzz(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"
