"""The multi-controller rules against JAX in several processes under jax.distributed.

``test_two_processes_agree_with_jax`` and ``test_four_processes_agree_with_jax`` run each
drawn example in a program of 2 and of 4 JAX processes of 2 CPU devices each, and
``test_two_processes_of_four_devices_agree_with_jax`` in 2 processes of 4 (a process's part
of a mesh wider than 2 devices); gloo collectives.
:mod:`shardlaw.properties.processes_harness` starts them once per property and keeps them
for every example: each process compares the spec's answer for itself with what JAX does
there — the devices it addresses (DEV-2, PROC-1), the shards it holds (PROC-2), the global
shape and rows of its local data (PROC-3, PROC-4), whether it may fetch the value (PROC-5)
or close over it in jit (PROC-10), its local mesh and host_local_array_to_global_array and
back (PROC-6 to PROC-8), make_array_from_single_device_arrays (PROC-9), jit with a numpy
argument (RES-2), the device order of jax.make_mesh and the mesh coordinates it addresses
(PROC-12, PROC-13), jax.device_put of host data, of the global array and of a
single-device array to a sharding, to one device or with no target (PROC-14 to PROC-16),
and, in a quarter of the examples, the shards of a jit call's result, process_allgather
(PROC-11) and a jit call that donates a copy of the array (its result like the argument,
replicated, summed, cast to a dtype as wide or narrower, reshaped, or two results), with
one use of it afterwards (PROC-17, PROC-18) — and one process that disagrees fails the
example. The coverage test requires every rule on both sides.

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

# device_put, jax.make_mesh and donation, each side held whatever is drawn: an array split
# over both processes of a 2 x 2 mesh, put elsewhere, donated, then used.
SPLIT = {"devices": [0, 1, 2, 3], "axis_sizes": [2, 2], "axis_names": ["a", "b"],
         "spec": [["a"]], "shape": [4], "local": ["own"], "global_given": False,
         "single": "exact", "rotate": 0, "run": True, "tiled": True}


def _put(source, to, devices=(0, 1, 2, 3), axis_sizes=(2, 2), spec=(["q"],), same=False,
         single_device=0, device=0):
    """A drawn device_put (processes_harness._put_examples), its target's axes p, q, r."""
    return {"source": source, "to": to, "same": same, "devices": list(devices),
            "axis_sizes": list(axis_sizes), "axis_names": ["p", "q", "r"][:len(axis_sizes)],
            "spec": list(spec),
            "single_device": single_device, "device": device}


# Resharded over the same devices in another order (PROC-15 accepts), a mesh of exactly
# every device (PROC-12 accepts), donated to a result of its shard shape, then read.
RESHARDED = dict(SPLIT, put=_put("array", "sharding", devices=(3, 2, 1, 0)),
                 make_mesh={"axis_sizes": [2, 2], "exact": True},
                 donate={"result": "same", "after": "np.asarray"})
# Put on devices 0 and 2 only (PROC-15 refuses), a mesh of 5 positions (PROC-12 refuses),
# donated to a result of half the width (kept), then jitted again.
ELSEWHERE = dict(SPLIT, put=_put("array", "sharding", devices=(0, 2), axis_sizes=(2,),
                                 spec=(["p"],)),
                 make_mesh={"axis_sizes": [5], "exact": False},
                 donate={"result": "narrow", "after": "jit"})
# Host values that differ between the processes (PROC-14 refuses); a single-device array
# moved to another process's device (PROC-16 refuses).
DIFFERING = dict(SPLIT, put=_put("host-differ", "sharding", same=True),
                 donate={"result": "sum", "after": "str"})
ACROSS = dict(SPLIT, put=_put("single", "device", single_device=0, device=3))
# A 2 x 3 mesh of 4 processes: process 1 holds positions 2 and 3, no block (PROC-13).
NO_BLOCK = dict(SPLIT, make_mesh={"axis_sizes": [2, 3], "exact": False})


@pytest.fixture(scope="module", autouse=True)
def stop_pools_after_module():
    """The process pools close when a module's tests end (autouse: each importer has it)."""
    yield
    close_pools()


@checks(*RULES)
@settings(max_examples=examples(40), deadline=None)
@example(case=SPLIT_NUMPY)
@example(case=dict(SPLIT_NUMPY, tiled=False))   # PROC-11 refuses to stack a global array
@example(case=RESHARDED)
@example(case=ELSEWHERE)
@example(case=DIFFERING)
@example(case=ACROSS)
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
@example(case=NO_BLOCK)
@settings(max_examples=examples(30), deadline=None)
@given(case=process_examples(devices=8))
def test_four_processes_agree_with_jax(case):
    """In a program of 4 processes, each answers like JAX in that process."""
    pool(4).compare(case)


# A 2 x 3 mesh over 2 processes of 4 devices: process 0 holds positions (0, 0) to (1, 0),
# no block; process 1 the other two, a block (PROC-13 with more than 2 devices a process).
WIDE_NO_BLOCK = dict(SPLIT, make_mesh={"axis_sizes": [2, 3], "exact": False})


@checks(*RULES)
@example(case=WIDE_NO_BLOCK)
@settings(max_examples=examples(10), deadline=None)
@given(case=process_examples(devices=8))
def test_two_processes_of_four_devices_agree_with_jax(case):
    """In a program of 2 processes of 4 devices each, each answers like JAX in that process."""
    pool(2, 4).compare(case)


def test_every_rule_seen_on_both_sides():
    """Each rule was seen accepting and refusing in real JAX processes."""
    seen = hits.counts("processes")
    missing = {r: seen.get(r, (0, 0)) for r in RULES if 0 in seen.get(r, (0, 0))}
    assert not missing, f"rules not seen on both sides (accepted, refused): {missing}"
