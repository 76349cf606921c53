"""The stored program vectors are what the generator writes today, byte for byte.

``vectors/programs/`` is written by the command docs/vectors.rst and the README give
(``shardlaw vectors generate vectors --programs --per-rule 2 --replace``). Which programs
are drawn depends on Hypothesis (its version, the seed); what is written for a program
depends only on the spec and the writer. So: every stored vector is written again from its
own program and the spec's verdict now, and must come out byte-identical (a rule that fires
anew, or no longer, makes the stored set stale); and two generations of a small set write
the same bytes (the generator is deterministic).

``vectors/programs-migrated/`` (the retired transformed-call questions, written with
``vector_text``) are held alike: each is what the writer writes today for its program, its
transformations and the spec's verdict, whose trace holds the rules the transformations
fired, accepted or refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("hypothesis")

import shardlaw.spec as S  # noqa: E402
from shardlaw.spec import tracing  # noqa: E402
from shardlaw.spec.vectors.jit_vectors import vector_text  # noqa: E402
from shardlaw.spec.vectors.program_vectors import (  # noqa: E402
    dump_program, load_program, replay_program,
)

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "programs"
FILES = sorted(VECTORS.rglob("*.json"))
REGENERATE = "shardlaw vectors generate vectors --programs --per-rule 2 --replace"
MIGRATED = sorted((VECTORS.parent / "programs-migrated").rglob("*.json"))
TRANSFORMED = [p for p in MIGRATED if load_program(p.read_text(encoding="utf-8")).transforms]


def _written_again(text: str) -> str:
    """The vector the generator writes for the program stored in ``text``."""
    vector = load_program(text)
    again = dump_program(vector.program, replay_program(vector), transforms=vector.transforms,
                         until=vector.until, name=vector.name, rule=vector.rule,
                         side=vector.side, description=vector.description)
    return json.dumps(again, indent=1) + "\n"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_stored_vector_is_what_the_generator_writes_today(path):
    text = path.read_text(encoding="utf-8")
    assert _written_again(text) == text, f"{path} is stale: regenerate with {REGENERATE}"


def test_regenerating_a_small_set_is_byte_identical(tmp_path):
    import jax

    from shardlaw.properties.program_vectors_gen import generate_program_vectors

    jax.config.update("jax_num_cpu_devices", 8)
    sets = []
    for run in ("first", "second"):
        written = generate_program_vectors(tmp_path / run, per_rule=1, seed=0, budget=12)
        files = sorted((tmp_path / run).rglob("*.json"))
        assert sum(written.values()) == len(files) > 0
        sets.append({str(p.relative_to(tmp_path / run)): p.read_bytes() for p in files})
    assert sets[0] == sets[1]
    for name, data in sets[0].items():  # and each reads back to itself
        assert _written_again(data.decode("utf-8")).encode("utf-8") == data, name


def _migrated_again(text: str) -> str:
    vector = load_program(text)
    return vector_text(dump_program(vector.program, replay_program(vector),
                                    transforms=vector.transforms, until=vector.until,
                                    name=vector.name, rule=vector.rule, side=vector.side,
                                    description=vector.description))


@pytest.mark.parametrize("path", MIGRATED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_migrated_vector_is_what_the_writer_writes_today(path):
    text = path.read_text(encoding="utf-8")
    assert _migrated_again(text) == text, f"{path} is stale: write it again from replay_program"


@pytest.mark.parametrize("path", TRANSFORMED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_transformed_vector_records_the_rules_its_transformations_fired(path):
    """Accepted or refused, the stored trace holds each rule the spec's vmap, grad ...
    fired while rewriting the program (before, an accepted one recorded none of them)."""
    vector = load_program(path.read_text(encoding="utf-8"))
    transformations = vector.transformations()
    with tracing() as fired:
        try:
            program = vector.program
            for function, arguments in transformations:
                program = function(program, **arguments)
        except S.Rejection:
            pass
    assert fired and set(fired) <= set(vector.expect["trace"]), (fired, vector.expect["trace"])
    assert "VEC-1" not in vector.expect["trace"]   # the reader's check is not the program's
