"""The 0.4.13 edition's properties: CALL-1 read twice, and every jit call held to jax 0.4.13.

``test_call_1_refuses_exactly_what_0_4_13_lacks`` draws the main suite's calls (layouts,
context meshes, memory kinds and Explicit axes included) and requires the spec's 0.4.13
edition to refuse by CALL-1 exactly the calls that use what JAX 0.4.13 does not have, read
a second time by :func:`~shardlaw.properties.older_harness.lacks_in_0_4_13`; and the
version of record never to refuse by CALL-1.

``agrees_with_jax_0_4_13`` is the jit-call property against a real ``jax.jit`` of JAX
0.4.13, in its own environment (:mod:`shardlaw.properties.older_harness`): the outcome, the
exception's class, the device assignment, each result's sharding type, placement, mesh and
committed flag. It needs that environment; ``tests/test_older_editions.py`` runs it
bounded when it is there, ``.ci/older_leg`` builds one and runs it, and
``python -m shardlaw.properties.older_campaign`` runs it long. About half its calls are
made through pjit inside a ``with mesh:`` block (PJIT-1, PJIT-2).

``block_agrees_with_jax_0_10_2`` holds the same pjit calls inside a ``with mesh:`` block to
JAX 0.10.2 (the version of record, in this environment), so that both sides of ``shardlaw
upgrade`` on such a call are held to the release they answer for.

``lowering_cache_agrees_with_jax_0_4_13`` holds the cache model's 0.4.13 edition to jax
0.4.13 where that release exposes a count: per call of a sequence through one wrapper, the
misses of jit's lowering cache (``_pjit_lower_cached``, keyed by
``SameDeviceAssignmentTuple``: CACHE-7's variant), and whether jit refused.
``placement_agrees_with_jax_0_4_13`` holds the placement rules in the 0.4.13 edition to
it: the HLO sharding, the shard shape or the class of its refusal, each device's box, the
replica ids and full replication of the shardings 0.4.13 can write.
"""

from hypothesis import given

from shardlaw.properties.call_strategies import calls
from shardlaw.properties.older_harness import (
    block_calls, cache_sequences, compare_cache_older, compare_older, compare_placement_older,
    lacks_in_0_4_13, older_calls, older_placements,
)
from shardlaw.properties.registry import checks
from shardlaw.spec.jit.pipeline import jit_call

__all__ = ["test_call_1_refuses_exactly_what_0_4_13_lacks", "agrees_with_jax_0_4_13",
           "OLDER_CHECKS", "block_agrees_with_jax_0_10_2", "property_in_blocks",
           "lowering_cache_agrees_with_jax_0_4_13", "cache_property",
           "placement_agrees_with_jax_0_4_13", "placement_property"]

# The rules the property against jax 0.4.13 decides calls by, both sides (the hit table
# of a long run shows how often: notes/older-jax-facts.md).
OLDER_CHECKS = ("JIT-1", "JIT-2", "JIT-3", "JIT-4", "TREE-1", "TREE-2", "FIT-1", "RES-1",
                "RES-4", "KEEP-1", "DA-1", "DA-3", "DA-4", "EXE-1", "EXE-2", "OUT-1", "OUT-3",
                "AOT-1", "AOT-2", "AOT-3", "PJIT-1", "PJIT-2")


@checks("CALL-1")
@given(calls(layouts=True))
def test_call_1_refuses_exactly_what_0_4_13_lacks(call):
    old = jit_call(call, jax="0.4.13")
    assert (old.rule == "CALL-1") == lacks_in_0_4_13(call), (old.message, call)
    assert old.jax == "0.4.13"
    assert jit_call(call).rule != "CALL-1"


@checks(*OLDER_CHECKS)
def agrees_with_jax_0_4_13(call):
    """One drawn call agrees with jax 0.4.13 (the body of the property; see the module)."""
    verdict, answer, problems = compare_older(call)
    assert not problems, "\n".join(problems) + f"\ncall: {call}\nanswer: {answer}"
    assert verdict.jax == "0.4.13"


def property_against_jax_0_4_13():
    """The property as a Hypothesis test over :func:`older_calls` (settings: the caller's)."""
    return given(older_calls())(agrees_with_jax_0_4_13)


@checks("PJIT-1", "PJIT-2")
def block_agrees_with_jax_0_10_2(call):
    """One pjit call inside a ``with mesh:`` block agrees with JAX 0.10.2."""
    from shardlaw.properties.jit_harness import compare_call

    verdict, _, problems = compare_call(call)
    assert not problems, "\n".join(problems) + f"\ncall: {call}"
    assert verdict.jax == "0.10.2"


def property_in_blocks(body):
    """``body`` as a Hypothesis test over :func:`block_calls` (settings: the caller's)."""
    return given(block_calls())(body)


@checks("CACHE-7")
def lowering_cache_agrees_with_jax_0_4_13(calls):
    """One sequence of calls misses jax 0.4.13's lowering cache where the model says."""
    _, problems = compare_cache_older(calls)
    assert not problems, "\n".join(problems) + f"\ncalls: {calls}"


def cache_property():
    """The cache property as a Hypothesis test over :func:`cache_sequences`."""
    return given(cache_sequences())(lowering_cache_agrees_with_jax_0_4_13)


@checks("LOW-1", "DIV-1", "IDX-1", "IDX-2", "REP-1")
def placement_agrees_with_jax_0_4_13(pair):
    """One sharding and shape are placed as jax 0.4.13 places them."""
    problems = compare_placement_older(*pair)
    assert not problems, "\n".join(problems)


def placement_property():
    """The placement property as a Hypothesis test over :func:`older_placements`."""
    return given(older_placements())(placement_agrees_with_jax_0_4_13)
