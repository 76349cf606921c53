"""Control-flow program vectors (vectors/programs-flow/): drawn bodies — constraints,
device_puts, elementwise operations, nested jits with their shardings — run inside
``lax.scan``, ``fori_loop``, ``while_loop``, ``cond``, ``switch``, ``jax.checkpoint``, a
``custom_jvp`` and a ``custom_vjp`` function, read off JAX's trace by ``describe_program``
and written where the spec's verdict is JAX's (trace, lower, compile, run).

Every stored vector replays under the spec to its expected verdict and is what the
generator writes today; those the replayer builds replay in real JAX from the program
alone; each kind holds an accepting and a refusing vector, its equation in the program.
JAX 0.10.2's dead-code elimination keeps every operand of a custom call (found by these
vectors): pinned here on both sides.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("hypothesis")

from shardlaw.properties.program_vectors_gen import (  # noqa: E402
    FLOW_EQUATION, FLOW_KINDS, NotReplayable, equation_kinds, generate_flow_vectors,
    replay_program_in_jax,
)
from shardlaw.spec import explain_program  # noqa: E402
from shardlaw.spec.vectors.program_vectors import (  # noqa: E402
    dump_program, load_program, program_differences, replay_program,
)

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "programs-flow"
FILES = sorted(VECTORS.rglob("*.json"))
REGENERATE = "shardlaw vectors generate vectors --programs --per-rule 2 --replace"

# The kinds whose programs hold an operation with a literal operand, which a description
# drops (fori_loop's counter step; switch's clamp of its index): not replayed in JAX.
NOT_REPLAYED = ("fori_loop", "switch")


def _load(path: Path):
    return load_program(path.read_text(encoding="utf-8"))


def _written_again(text: str) -> str:
    vector = load_program(text)
    again = dump_program(vector.program, replay_program(vector), name=vector.name,
                         rule=vector.rule, side=vector.side, description=vector.description)
    return json.dumps(again, indent=1) + "\n"


def test_every_kind_holds_an_accepting_and_a_refusing_vector_of_its_equation():
    assert {p.parent.name for p in FILES} == set(FLOW_KINDS)
    assert sum(p.stat().st_size for p in FILES) < 600_000   # small enough for the repo
    for kind in FLOW_KINDS:
        mine = [p for p in FILES if p.parent.name == kind]
        sides = {p.stem.split("-")[2] for p in mine}
        assert sides == {"accept", "reject"}, kind
        for path in mine:
            assert FLOW_EQUATION[kind] in equation_kinds(_load(path).program), path
    refused = {p.stem.rsplit("-", 2)[0] for p in FILES if "-reject-" in p.stem}
    assert {"DA-1", "FIT-1", "WSC-4", "ARG-4"} <= refused


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_flow_vector_replays_under_the_spec_and_is_written_today(path):
    vector = _load(path)
    assert vector.expect is not None
    assert program_differences(vector) == []
    text = path.read_text(encoding="utf-8")
    assert _written_again(text) == text, f"{path} is stale: regenerate with {REGENERATE}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_flow_vectors_replay_in_jax_from_the_program_alone(path):
    vector = _load(path)
    if path.parent.name in NOT_REPLAYED:
        try:
            problems = replay_program_in_jax(vector)
        except NotReplayable:
            return
        assert problems == []
        return
    assert replay_program_in_jax(vector) == []


def test_generating_a_small_flow_set_twice_is_byte_identical(tmp_path):
    import jax

    jax.config.update("jax_num_cpu_devices", 8)
    sets = []
    for run in ("first", "second"):
        written = generate_flow_vectors(tmp_path / run, seed=3, budget=8)
        files = sorted((tmp_path / run).rglob("*.json"))
        assert sum(written.values()) == len(files) > 0
        sets.append({str(p.relative_to(tmp_path / run)): p.read_bytes() for p in files})
    assert sets[0] == sets[1]
    for name, data in sets[0].items():
        assert _written_again(data.decode("utf-8")).encode("utf-8") == data, name


# --------------------------------------------------------------------------- custom calls

def _custom(kind: str):
    import jax
    import jax.numpy as jnp

    def body(a, b):
        return (jnp.sin(a),)   # b is dead in the body

    if kind == "custom_vjp":
        called = jax.custom_vjp(body)
        called.defvjp(lambda *p: (body(*p), p), lambda r, c: (c[0], c[0]))
    elif kind == "custom_jvp":
        called = jax.custom_jvp(body)
        called.defjvp(lambda p, t: jax.jvp(body, p, t))
    else:
        called = jax.checkpoint(body)
    return jax.jit(lambda a, b: called(a, b))


@pytest.mark.parametrize("kind,refused", [("custom_jvp", True), ("custom_vjp", True),
                                          ("checkpoint", False)])
def test_a_custom_call_keeps_its_dead_operand_in_the_device_assignment(kind, refused):
    import jax
    import jax.numpy as jnp

    from shardlaw.spec.bridge.program import describe_program

    jax.config.update("jax_num_cpu_devices", 8)
    a = jax.device_put(jnp.ones((8, 8)), jax.devices()[0])
    b = jax.device_put(jnp.ones((8, 8)), jax.devices()[1])
    jitted = _custom(kind)
    verdict = explain_program(describe_program(jitted, a, b))
    if refused:   # JAX keeps b (a custom call's operands are all live): two devices
        with pytest.raises(ValueError, match="incompatible devices"):
            jitted.lower(a, b)
        assert (verdict.accepted, verdict.rule, verdict.stage) == (False, "DA-1", "lower")
    else:         # a remat's dead operand goes, as a jit's does
        lowered = jitted.lower(a, b)
        assert lowered._lowering.compile_args["kept_var_idx"] == {0}
        assert verdict.accepted and verdict.kept_inputs == (0,)
