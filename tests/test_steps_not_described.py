"""The programs the steps property could not describe, described (issue 32, item 4).

A deep run of the steps property and its fuzz layer on main 8374d1a (3,000 + 3,000 draws,
seeds 20262000 + i) found 18 examples "not described": describe_program re-raised what
JAX refused while tracing. They fall into four kinds, each now described and refused by
the spec at the trace stage with JAX's class:

* ``jnp.sort`` along a dimension split over Explicit axes (here under ``vmap``, where the
  example's type splits it): ShardingTypeError, PROG-14 (tests/test_sort_types.py);
* a slice JAX cannot type (PROG-9: ``h[0]`` of an ``f32[8@x, 8]``, here the rows a
  ``lax.scan`` takes) under ``jax.grad``: linearize's partial evaluation hands the slice
  over known values on to the body's trace, which refuses it (ShardingTypeError); the
  bridge gave up at the handing frame, and now describes the slice where the body binds
  it;
* ``jax.jit(jax.vmap(jax.grad(f)))`` of a ``lax.cond`` whose predicate vmap batches: JAX
  batches the cond into a ``select_n`` whose predicate it leaves unsplit while the cases
  are split over Explicit axes, and refuses it (ShardingTypeError). There is no jit trace
  to read the options from; the jit holds none of its own, so the spec's batched program
  is the call (spec/bridge/refused_batching.py), refused by PROG-8 at the select_n;
* a training step whose ``in_shardings`` split the batch unevenly (IndivisibleError,
  FIT-1) and whose body JAX would refuse too (a ``lax.scan`` over parameters of layers that
  hold none: no values to scan over). JAX refuses the shardings before it traces the
  body; the body, which the bridge traced to describe the jit and could not, is now
  described as reached by nothing (no equation, no result) and FIT-1 refuses the call.

Each case is the very draw of the deep run, compared by the property's own comparison:
no disagreement, and not counted as "not described".
"""

from __future__ import annotations

import pytest

from shardlaw.properties import steps_harness as harness
from shardlaw.properties.registry import checks
from shardlaw.properties.steps_strategies import FuzzCase, StepCase

FUZZ = {
    "sort-under-vmap": FuzzCase(ops=("sort", "transpose", "exp", "astype", "gelu"),
                                transform="vmap", grid=(4, 2), spec=("x", "y"),
                                explicit=True, committed=True),
    "sort-under-vmap-of-grad": FuzzCase(ops=("sort",), transform="vmap_grad", grid=(8, 1),
                                        spec=("y", "x"), explicit=True, committed=True),
    "slice-under-grad": FuzzCase(
        ops=("cond_neg", "smap_scatter_gather", "rng_bits", "max_keep", "scan_rows"),
        transform="grad", grid=(2, 4), spec=(None, None), explicit=True, committed=False),
    "cond-under-vmap-of-grad": FuzzCase(
        ops=("where", "rng_bits", "sum_keep", "inner_jit", "cond_neg"),
        transform="vmap_grad", grid=(1, 8), spec=(None, "y"), explicit=True,
        committed=True),
}

STEPS = {
    "indivisible-batch-of-a-step-without-parameters": StepCase(
        layers=("softmax", "softmax"), depth=2, scan=True, remat=False, cond=True,
        transform="train", optimizer="adamw", mesh="auto", grid=(1, 8), plan="tp",
        constraint=None, out=None, donate=True, given=False, refused="indivisible"),
}


def _settled(compare, case) -> tuple[list, int, int]:
    """(the problems, the examples agreeing, those not described) of one comparison."""
    agree, unread = harness.TALLY["agree"], harness.TALLY["not described"]
    problems = compare(case)
    return (problems, harness.TALLY["agree"] - agree,
            harness.TALLY["not described"] - unread)


@checks("PROG-8", "PROG-9", "PROG-14")
@pytest.mark.parametrize("name", sorted(FUZZ))
def test_the_fuzz_draws_jax_refused_are_described_and_refused_alike(name):
    problems, agreed, unread = _settled(harness.compare_fuzz, FUZZ[name])
    assert not problems, problems
    assert (agreed, unread) == (1, 0)


@checks("FIT-1")
@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_steps_jax_refused_are_described_and_refused_alike(name):
    problems, agreed, unread = _settled(harness.compare_step, STEPS[name])
    assert not problems, problems
    assert (agreed, unread) == (1, 0)
