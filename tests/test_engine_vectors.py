"""The engine against the test vectors (vectors/jit): the same verdict the vectors expect.

Each vector is a jit call and the verdict jax 0.10.2 gives it; the engine runs the call
for real and must reach the same verdict — the rule, error type, JAX's class, path and
stage of a rejection, and words that state the numbers and names of the spec's facts for
the same call; the device assignment, input and result shardings, kept inputs, committed
flags and moved inputs of an accepted call. Vectors of several processes are skipped (the
replay runs one).
"""

from pathlib import Path

import pytest

from shardlaw.properties.engine_harness import replay_in_engine
from shardlaw.properties.vectors_gen import NotReplayable
from shardlaw.spec.vectors.jit_vectors import load_vector

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "jit"
ALL = sorted(VECTORS.rglob("*.json")) if VECTORS.is_dir() else []


def _processes(path):
    return load_vector(path.read_text(encoding="utf-8")).call.process_count


# The replay runs one JAX process; calls of several processes (RES-2) are held to the
# engine and to JAX by tests/test_engine_processes.py, which starts two.
FILES = [p for p in ALL if _processes(p) == 1]
SEVERAL = [p for p in ALL if _processes(p) > 1]


def test_vectors_are_there():
    assert FILES, f"no vectors under {VECTORS}"


def test_vectors_of_several_processes_are_the_multi_process_rule_and_refuse_replay():
    assert all("res-2" in p.name or p.parent.name == "RES-2" for p in SEVERAL), SEVERAL
    for path in SEVERAL:
        with pytest.raises(NotReplayable):
            replay_in_engine(load_vector(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(VECTORS)))
def test_engine_reaches_the_vector_verdict(path):
    vector = load_vector(path.read_text(encoding="utf-8"))
    differences = replay_in_engine(vector)
    assert not differences, "\n".join(differences)
