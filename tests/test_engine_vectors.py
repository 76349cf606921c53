"""The engine against the test vectors (vectors/jit): the same verdict the vectors expect.

Each vector is a jit call and the verdict jax 0.10.2 gives it; the engine runs the call
for real and must reach the same verdict — the rule, error type, JAX's class and path of a
rejection; the device assignment, input and result shardings, kept inputs, committed flags
and moved inputs of an accepted call. Vectors of several processes are skipped (the
replay runs one).
"""

from pathlib import Path

import pytest

from shardlaw.properties.engine_harness import replay_in_engine
from shardlaw.properties.vectors_gen import NotReplayable
from shardlaw.spec.vectors import load_vector

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "jit"
FILES = sorted(VECTORS.rglob("*.json")) if VECTORS.is_dir() else []


def test_vectors_are_there():
    assert FILES, f"no vectors under {VECTORS}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(VECTORS)))
def test_engine_reaches_the_vector_verdict(path):
    vector = load_vector(path.read_text(encoding="utf-8"))
    try:
        differences = replay_in_engine(vector)
    except NotReplayable as reason:
        pytest.skip(str(reason))
    assert not differences, "\n".join(differences)
