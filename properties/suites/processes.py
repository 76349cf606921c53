"""The multi-controller rules against JAX in several processes under jax.distributed.

``test_two_processes_agree_with_jax`` and ``test_four_processes_agree_with_jax`` run each
drawn example in a program of 2 and of 4 JAX processes (2 CPU devices each, gloo
collectives; :mod:`shardlaw.properties.processes_harness` starts them once per property and
keeps them for every example): each process compares the spec's answer for itself with
what JAX does there — the devices it addresses (DEV-2, PROC-1), the shards it holds
(PROC-2), the global shape and rows of its local data (PROC-3, PROC-4), whether it may fetch
the value (PROC-5) or close over it in jit (PROC-10), its local mesh and
host_local_array_to_global_array and back (PROC-6 to PROC-8),
make_array_from_single_device_arrays (PROC-9), jit with a numpy argument (RES-2), and, in a
quarter of the examples, the shards of a jit call's result and process_allgather (PROC-11)
— and one process that disagrees
fails the example. The coverage test requires every rule on both sides.

Part of the ``processes`` suite of ``shardlaw campaign``; ``tests/test_processes_differential.py``
runs it in the project's own ``pytest`` run.
"""

import atexit
import time

import pytest
from hypothesis import example, given, settings

from shardlaw.properties import hits
from shardlaw.properties.processes_harness import (
    ANSWER_SECONDS, RULES, WorkerFailed, close_pools, pool, process_examples,
)
from shardlaw.properties.suites import examples
from shardlaw.properties.registry import checks

atexit.register(close_pools)

# Examples every run holds, whatever is drawn: a numpy argument split over the processes
# (RES-2 refuses), and a mesh whose processes hold crossed columns (PROC-3 cannot tell
# the global shape, PROC-4 refuses without it).
SPLIT_NUMPY = {"devices": [0, 1, 2, 3], "axis_sizes": [4], "axis_names": ["a"],
               "spec": [["a"]], "shape": [4], "local": ["wrong"], "global_given": True}
CROSSED = {"devices": [0, 1, 2, 3, 4, 6, 5, 7], "axis_sizes": [2, 4], "axis_names": ["a", "b"],
           "spec": [["a"], ["b"]], "shape": [4, 8], "local": ["own", "own"],
           "global_given": False}


@pytest.fixture(scope="module", autouse=True)
def _stop_pools_after_module():
    yield
    close_pools()


@checks(*RULES)
@settings(max_examples=examples(40), deadline=None)
@example(case=SPLIT_NUMPY)
@example(case=dict(SPLIT_NUMPY, tiled=False))   # PROC-11 refuses to stack a global array
@given(case=process_examples(devices=4))
def test_two_processes_agree_with_jax(case):
    """In a program of 2 processes, each answers like JAX in that process."""
    pool(2).compare(case)


def test_a_process_that_dies_fails_the_example_and_ends_the_pool():
    """A process killed between examples fails the next one at once (not at the time limit),
    and the pool stops the others."""
    running = pool(2)
    running._procs[1].kill()
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="process 1 ended"):
        running.compare(dict(SPLIT_NUMPY, run=True))   # process 0 would wait for it
    assert time.monotonic() - start < ANSWER_SECONDS
    assert all(proc.poll() is not None for proc in running._procs)


@checks(*RULES)
@example(case=SPLIT_NUMPY)
@example(case=CROSSED)
@settings(max_examples=examples(30), deadline=None)
@given(case=process_examples(devices=8))
def test_four_processes_agree_with_jax(case):
    """In a program of 4 processes, each answers like JAX in that process."""
    pool(4).compare(case)


def test_every_rule_seen_on_both_sides():
    """Each rule was seen accepting and refusing in real JAX processes."""
    seen = hits.counts("processes")
    missing = {r: seen.get(r, (0, 0)) for r in RULES if 0 in seen.get(r, (0, 0))}
    assert not missing, f"rules not seen on both sides (accepted, refused): {missing}"
