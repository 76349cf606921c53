"""The cache model (spec/jit/cache.py) against real jax.jit's counters, call for call.

``test_cache_model_agrees_with_jax`` draws call sequences (:func:`call_sequences`), runs each
through fresh function objects and jit wrappers in JAX and through
:func:`shardlaw.spec.explain_cache`, and requires, for every call and every level, the
model's hit or miss to equal what JAX's counters did; where JAX explains a trace-cache miss
(``jax_explain_cache_misses``), the model's reason must agree with it. The catalogue of
named workloads is checked call for call too (``tests/test_cache_differential.py`` holds
the table docs/cache.rst prints against JAX).
The policy's laws (CACHE-11, CACHE-12) need no JAX.

Run time: every property takes the profile's example count (200 in ``ci``); the whole file
runs in about 20-50 s on two cores (most calls hit JAX's dispatch cache or are refused
before compiling), the deep profile's 5000 examples in a few minutes.

Part of the ``cache`` suite of ``shardlaw campaign``; ``tests/test_cache_differential.py``
runs it in the project's own ``pytest`` run.
"""

import pytest
from hypothesis import given

from shardlaw.properties.cache_harness import compare_sequence
from shardlaw.properties.cache_strategies import call_sequences
from shardlaw.properties.cache_workloads import WORKLOADS
from shardlaw.properties.registry import checks
from shardlaw.properties.strategies import sharding_pairs
from shardlaw.spec import placement_equivalent
from shardlaw.spec.jit.cache import (
    CallSite, check_sequence, explain_cache, placement_class, policy_classes,
)
from shardlaw.spec.core.rules import Rejection

MODEL_RULES = [f"CACHE-{n}" for n in range(11)]


@checks(*MODEL_RULES)
@given(call_sequences())
def test_cache_model_agrees_with_jax(sites):
    rows, observed, problems = compare_sequence(sites, explain=True)
    assert not problems, "\n".join(problems) + "\n" + str(explain_cache(sites))


@checks(*MODEL_RULES[1:])
@pytest.mark.parametrize("workload", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_catalogue_workload_agrees_with_jax(workload):
    rows, observed, problems = compare_sequence(list(workload.sites), explain=True)
    assert not problems, "\n".join(problems) + "\n" + str(explain_cache(workload.sites))


@checks("CACHE-0")
def test_a_wrapper_has_one_function_and_one_set_of_options():
    sites = list(WORKLOADS[0].sites)
    check_sequence(sites)
    other = CallSite(sites[0].call, "g", sites[0].wrapper)
    with pytest.raises(Rejection, match="CACHE-0"):
        check_sequence(sites + [other])


# --------------------------------------------------------------------------- the policy

@checks("CACHE-11")
@given(sharding_pairs())
def test_placement_classes_are_placement_equivalence(pair):
    a, b, shape = pair
    try:
        same_class = placement_class(a, shape) == placement_class(b, shape)
    except Rejection as error:
        # Unreduced and manual shardings place no boxes (IDX-1): they have no class.
        assert error.rule == "IDX-1", error
        return
    assert same_class == (placement_equivalent(a, b, shape)
                          and a.memory_kind == b.memory_kind)


@checks("CACHE-12")
@given(call_sequences())
def test_the_policy_reuses_whatever_jax_reuses(sites):
    """A call JAX serves without compiling reuses an executable under the policy too.

    The exception is JAX's own: wrappers that differ only in keep_unused share the dispatch
    cache (CACHE-1), so JAX reuses an executable the policy keeps apart (or refuses).
    """
    rows = explain_cache(sites)
    policy = policy_classes(sites)
    keep = {}
    for site in sites:
        keep.setdefault(site.function, set()).add(site.call.options.keep_unused)
    for row, chosen in zip(rows, policy):
        if row.rejected or row.at("compile") == "miss":
            continue
        if row.at("dispatch") == "hit" and len(keep[row.site.function]) > 1:
            continue
        assert chosen.cls is not None and not chosen.compiles, (
            f"call {row.index}: JAX reuses an executable, the policy compiles\n{rows}")
