"""Each rule's stage is declared once (shardlaw.rule_index) and holds where the spec refuses."""

from pathlib import Path

import pytest

import shardlaw.spec as S
import shardlaw.spec.jit.pipeline as J
from shardlaw import rule_index
from shardlaw.spec import Arg, Call, JitOptions, Out, P
from shardlaw.spec.vectors.jit_vectors import JIT_FAMILIES, load_vector

ROOT = Path(__file__).resolve().parents[1]
VECTORS = sorted((ROOT / "vectors" / "jit").rglob("*.json"))
MESH = S.Mesh.iota((2, 4), ("x", "y"))


def test_every_declared_exception_is_a_rule_and_every_jit_rule_has_a_stage():
    declared = set(rule_index.STAGE_EXCEPTIONS) | set(rule_index.ENGINE_EXCEPTIONS)
    engine_only = {r for r in declared if r.startswith("ENG-")}
    assert declared - engine_only <= set(S.RULES)
    assert {rule.family for rule in S.RULES.values()} <= set(rule_index.FAMILIES)
    for rule in S.RULES.values():
        if rule.family in JIT_FAMILIES or rule.family == "CALL":
            assert rule.stage in rule_index.STAGES, rule.id


def test_a_spec_naming_an_axis_the_context_mesh_lacks_is_refused_at_the_call():
    call = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)), context_mesh=MESH,
                options=JitOptions(in_shardings=(P("z"),)))
    verdict = S.jit_call(call)
    assert (verdict.rule, verdict.stage, verdict.path) == ("NS-1", "trace", "in_shardings[0]")


def test_description_checks_run_first_and_stay_out_of_the_trace():
    # JIT-1 would refuse the options, but the description is read first.
    call = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)), uses=(True, False),
                options=JitOptions(device=0, in_shardings=P()))
    verdict = S.jit_call(call)
    assert (verdict.rule, verdict.stage, verdict.trace) == ("CALL-0", "description", ())
    accepted = S.jit_call(Call(args=(Arg.committed((8,), S.NamedSharding(MESH, P("x"))),),
                               outputs=Out((8,))))
    assert accepted.accepted and not any(rule_index.is_description(r) for r in accepted.trace)


@pytest.fixture
def refusals(monkeypatch):
    """Every rejection jit_call turns into a verdict, as raised."""
    seen = []
    refused = J._refused

    def record(error, trace):
        seen.append(error)
        return refused(error, trace)

    monkeypatch.setattr(J, "_refused", record)
    return seen


# EXE-3 is XLA's verifier (JAX raises it while compiling); the spec checks it with EXE-4,
# sharding by sharding, while lowering, so that the first sharding at fault decides.
CHECKED_EARLIER = {"EXE-3": "lower"}


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_the_declared_stage_is_the_stage_that_refuses(path, refusals):
    vector = load_vector(path.read_text())
    verdict = S.jit_call(vector.call)
    if verdict.accepted:
        assert not refusals
        return
    (error,) = refusals
    assert error.stage == verdict.stage == vector.expect.stage, path.name
    assert error.raised_in == CHECKED_EARLIER.get(error.rule, error.stage), path.name


def test_a_rejection_is_born_at_its_path_with_no_patching():
    with S.core.rules.located("args[3]"):
        with pytest.raises(S.Rejection) as caught:
            S.shard_shape(S.NamedSharding(MESH, P("x")), (3,))
    assert caught.value.path == "args[3]" and caught.value.rule == "DIV-1"
    assert "at args[3]" in str(caught.value)
