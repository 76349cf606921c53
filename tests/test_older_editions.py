"""Editions: the spec answers for JAX 0.4.13 beside 0.10.2, chosen by the caller, never mixed.

The first tests need nothing but the spec. The last runs the jit-call property against a
real ``jax.jit`` of JAX 0.4.13 in its own environment (``properties/older_harness.py``),
and is skipped, saying why, where that environment is not installed (``.ci/older_leg``
builds one).
"""

import os

import pytest

import shardlaw.spec as S
from shardlaw.spec.core.editions import DEFAULT, EDITIONS, holding
from shardlaw.spec.core.rules import RULES, VARIANTS, Rejection, current_edition
from shardlaw.spec.jit.call import Arg, Call, JitOptions, Out
from shardlaw.spec.jit.pipeline import jit_call

MESH = S.Mesh.iota((2, 4), ("x", "y"))
X = S.NamedSharding(MESH, S.P("x"))


def _call(**fields):
    return Call(**fields)


def test_the_default_edition_is_the_version_of_record():
    v = jit_call(_call(args=(Arg.numpy((8,)),), outputs=Out((8,))))
    assert v.jax == DEFAULT == "0.10.2" and EDITIONS == ("0.10.2", "0.4.13")


def test_an_unknown_release_is_refused_by_name():
    with pytest.raises(Rejection) as raised:
        jit_call(_call(), jax="0.5.0")
    assert raised.value.rule == "CALL-0" and "0.5.0" in str(raised.value)


def test_an_indivisible_shape_is_a_plain_value_error_in_0_4_13():
    call = _call(args=(Arg.numpy((3, 8)),), outputs=Out((3, 8)),
                 options=JitOptions(in_shardings=X))
    new, old = jit_call(call), jit_call(call, jax="0.4.13")
    assert (new.rule, new.jax_error, new.error_type) == ("FIT-1", "IndivisibleError",
                                                         "ValueError")
    assert (old.rule, old.jax_error, old.error_type, old.jax) == ("FIT-1", "ValueError",
                                                                  "ValueError", "0.4.13")


def test_an_unused_committed_argument_on_other_devices_counts_in_0_4_13():
    other = Arg.committed((6,), S.NamedSharding(S.Mesh.iota((6,), ("d",)), S.P()))
    call = _call(args=(Arg.committed((8,), X), other), outputs=Out((8,), source=0),
                 uses=(True, False))
    assert jit_call(call).accepted
    old = jit_call(call, jax="0.4.13")
    assert (old.accepted, old.rule, old.error_type) == (False, "DA-1", "ValueError")


def test_one_device_results_come_back_single_in_0_4_13():
    lone = S.NamedSharding(S.Mesh.iota((1,), ("e",)), S.P())
    call = _call(args=(Arg.committed((6,), lone),), outputs=Out((6,), source=0))
    assert isinstance(jit_call(call).out_shardings[0], S.NamedSharding)
    assert jit_call(call, jax="0.4.13").out_shardings == (S.SingleDeviceSharding(0),)
    given = _call(args=(Arg.committed((6,), lone),), outputs=Out((6,), source=0),
                  options=JitOptions(out_shardings=lone))
    assert jit_call(given, jax="0.4.13").out_shardings == (lone,)


def test_aot_calls_compare_hlo_only_in_0_4_13():
    reversed_mesh = S.Mesh((8,), ("a",), tuple(range(7, -1, -1)))
    compiled_for = S.NamedSharding(S.Mesh.iota((8,), ("a",)), S.P("a"))
    call = _call(args=(Arg.numpy((8,)),), outputs=Out((8,), source=0),
                 options=JitOptions(in_shardings=compiled_for),
                 aot_args=(Arg.committed((8,), S.NamedSharding(reversed_mesh, S.P("a"))),))
    new, old = jit_call(call), jit_call(call, jax="0.4.13")
    assert (new.accepted, new.rule) == (False, "AOT-3")
    assert old.accepted


def test_the_edition_is_held_for_one_question_only():
    with holding("0.4.13"):
        assert current_edition() == "0.4.13"
    assert current_edition() == DEFAULT
    call = _call(args=(Arg.numpy((3, 8)),), outputs=Out((3, 8)),
                 options=JitOptions(in_shardings=X))
    jit_call(call, jax="0.4.13")
    assert current_edition() == DEFAULT and jit_call(call).jax_error == "IndivisibleError"


def test_every_variant_is_declared_on_a_registered_rule_with_a_statement():
    assert VARIANTS
    for rule_id, by_release in VARIANTS.items():
        assert rule_id in RULES
        for release, variant in by_release.items():
            assert release in EDITIONS and release != DEFAULT
            assert variant.statement.endswith(".") and variant.rule == rule_id
            assert RULES[rule_id].in_edition(release) is variant
            assert RULES[rule_id].in_edition(DEFAULT) is RULES[rule_id]


# --------------------------------------------------------------------------- real 0.4.13

def _older_env():
    from shardlaw.properties.older_harness import older_python
    return older_python()


@pytest.mark.skipif(_older_env() is None,
                    reason="no jax 0.4.13 environment (build one with .ci/older_leg, or set "
                           "SHARDLAW_JAX_0413 to its python)")
def test_jit_call_agrees_with_real_jax_0_4_13():
    from hypothesis import HealthCheck, settings

    from shardlaw.properties.older_suite import property_against_jax_0_4_13

    examples = int(os.environ.get("SHARDLAW_OLDER_EXAMPLES", "60"))
    run = settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                   suppress_health_check=list(HealthCheck))(property_against_jax_0_4_13())
    run()


def _bounded(examples):
    from hypothesis import HealthCheck, settings
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.mark.skipif(_older_env() is None,
                    reason="no jax 0.4.13 environment (build one with .ci/older_leg, or set "
                           "SHARDLAW_JAX_0413 to its python)")
def test_pjit_in_a_with_mesh_block_agrees_with_real_jax_0_4_13():
    from shardlaw.properties.older_suite import agrees_with_jax_0_4_13, property_in_blocks

    examples = max(1, int(os.environ.get("SHARDLAW_OLDER_EXAMPLES", "60")) // 2)
    _bounded(examples)(property_in_blocks(agrees_with_jax_0_4_13))()


@pytest.mark.skipif(_older_env() is None,
                    reason="no jax 0.4.13 environment (build one with .ci/older_leg, or set "
                           "SHARDLAW_JAX_0413 to its python)")
def test_the_lowering_cache_model_agrees_with_real_jax_0_4_13():
    from shardlaw.properties.older_suite import cache_property

    examples = max(1, int(os.environ.get("SHARDLAW_OLDER_EXAMPLES", "60")) // 3)
    _bounded(examples)(cache_property())()


@pytest.mark.skipif(_older_env() is None,
                    reason="no jax 0.4.13 environment (build one with .ci/older_leg, or set "
                           "SHARDLAW_JAX_0413 to its python)")
def test_placement_agrees_with_real_jax_0_4_13():
    from shardlaw.properties.older_suite import placement_property

    examples = int(os.environ.get("SHARDLAW_OLDER_EXAMPLES", "60"))
    _bounded(examples)(placement_property())()


def test_the_lowering_cache_key_in_0_4_13_holds_the_first_sharding_s_devices():
    from shardlaw.spec.jit.cache import CallSite, explain_cache
    lone = Arg.committed((8,), S.SingleDeviceSharding(3))
    calls = [_call(args=(lone,), outputs=Out((8,), source=0)),
             _call(args=(lone,), outputs=Out((8,), source=0), uses=(True,))]
    with holding("0.4.13"):
        table = explain_cache([CallSite(c) for c in calls])
        parts = [p.what for p in S.jit.cache_keys.lowering_key(CallSite(calls[0]))]
    assert "the device assignment" in parts
    assert [r.misses()["lowering"] for r in table] == [1, 0]


def test_pjit_in_a_with_mesh_block_agrees_with_real_jax_0_10_2():
    pytest.importorskip("jax")
    import jax
    if not jax.__version__.startswith("0.10"):
        pytest.skip(f"the version of record is 0.10.2; this environment has {jax.__version__}")
    from shardlaw.properties.older_suite import block_agrees_with_jax_0_10_2, property_in_blocks

    _bounded(30)(property_in_blocks(block_agrees_with_jax_0_10_2))()


BLOCK = S.Mesh.iota((2, 4), ("x", "y"))
REPLICATED = "{replicated}"


def _block_call(**options):
    from shardlaw.spec.core.hlo import parse_hlo
    return _call(args=(Arg.numpy((8, 4)),), outputs=Out((8, 4), source=0),
                 options=JitOptions(**options), resource_mesh=BLOCK,
                 compiler=(parse_hlo(REPLICATED),))


def test_pjit_in_a_block_reads_none_as_replicated_over_the_block_in_both_releases():
    for jax_release in EDITIONS:
        v = jit_call(_block_call(in_shardings=None, out_shardings=None), jax=jax_release)
        assert v.out_shardings == (S.NamedSharding(BLOCK, S.P()),) and "PJIT-2" in v.trace


def test_pjit_in_a_block_with_no_shardings_comes_back_gspmd_in_0_4_13_named_in_0_10_2():
    from shardlaw.spec.jit.upgrade import upgrade
    change = upgrade(_block_call())
    assert isinstance(change.before.out_shardings[0], S.GSPMDSharding)
    assert change.after.out_shardings[0] == S.NamedSharding(BLOCK, S.P())
    assert change.before.out_committed == change.after.out_committed == (True,)
    assert "PJIT-1" in change.varying and "PJIT-2" not in change.varying


def test_a_block_mesh_with_explicit_axes_is_refused_in_0_4_13_and_a_block_with_set_mesh_never():
    explicit = S.Mesh((2,), ("x",), (0, 1), (S.AxisType.Explicit,))
    call = _call(args=(Arg.numpy((8,)),), outputs=Out((8,)), resource_mesh=explicit)
    old = jit_call(call, jax="0.4.13")
    assert (old.rule, old.error_type) == ("CALL-1", "TypeError")
    with pytest.raises(Rejection) as raised:
        _call(args=(Arg.numpy((8,)),), outputs=Out((8,)), resource_mesh=BLOCK,
              context_mesh=BLOCK)
    assert raised.value.rule == "CALL-0" and "with mesh:" in str(raised.value)


def test_call_1_refuses_exactly_what_0_4_13_lacks():
    from hypothesis import HealthCheck, settings

    from shardlaw.properties.older_suite import test_call_1_refuses_exactly_what_0_4_13_lacks

    settings(max_examples=150, deadline=None, derandomize=True, database=None,
             suppress_health_check=list(HealthCheck))(
        test_call_1_refuses_exactly_what_0_4_13_lacks)()


# --------------------------------------------------------------------------- vectors, CLI

from pathlib import Path

from shardlaw.cli import main

ROOT = Path(__file__).resolve().parent.parent
OLDER_VECTORS = ROOT / "vectors" / "jit-0.4.13"


def test_the_0_4_13_vectors_replay_in_their_edition(capsys):
    assert sorted(p.name for p in OLDER_VECTORS.glob("*.json"))
    assert main(["vectors", "run", str(OLDER_VECTORS)]) == 0
    assert "10 vector(s) checked: 10 passed, 0 failed" in capsys.readouterr().out


def test_a_0_4_13_vector_is_not_compared_with_a_0_10_2_verdict(capsys):
    path = OLDER_VECTORS / "out-3-one-device-result-is-single.json"
    assert main(["check", str(path)]) == 0
    assert main(["check", "--jax", "0.10.2", str(path)]) == 1
    out = capsys.readouterr().out
    assert "answered for jax 0.10.2" in out and "the verdict is for jax 0.10.2" in out


def test_upgrade_runs_on_the_repository_vectors(capsys):
    assert main(["upgrade", str(ROOT / "vectors")]) == 1   # some calls change
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("175 jit call(s): ") and "change from jax 0.4.13 to 0.10.2" in last
    assert "vector(s) of other kinds left out" in last
    assert main(["upgrade", "--json", "--changed", str(OLDER_VECTORS)]) == 1
    report = __import__("json").loads(capsys.readouterr().out)
    assert report["calls"] == 10 and report["changed"] == len(report["rows"]) == 9
    varying = {r for row in report["rows"] for r in row["varying_rules"]}
    assert {"FIT-1", "KEEP-1", "OUT-1", "OUT-3", "AOT-3", "PJIT-1"} <= varying


@pytest.mark.skipif(_older_env() is None,
                    reason="no jax 0.4.13 environment (build one with .ci/older_leg, or set "
                           "SHARDLAW_JAX_0413 to its python)")
def test_the_0_4_13_vectors_hold_for_real_jax_0_4_13():
    from shardlaw.properties.older_harness import compare_older, expressible
    from shardlaw.spec.vectors.jit_vectors import load_vector

    held = 0
    for path in sorted(OLDER_VECTORS.glob("*.json")):
        vector = load_vector(path.read_text())
        assert vector.jax == "0.4.13"
        if expressible(vector.call):
            _, _, problems = compare_older(vector.call)
            assert not problems, (path.name, problems)
            held += 1
    assert held == 9


def test_pjit_in_a_block_compares_committed_arguments_with_the_block_before_resolving():
    """JAX 0.4.13 checks the committed arguments' devices against the block's mesh before it
    resolves any argument, so an argument on other devices is DA-1's ValueError even beside
    an unused uncommitted one spread over several devices (RES-1 in 0.10.2's order). Found
    by the older CI leg under Hypothesis 6.170.27."""
    committed = Arg.committed((), S.NamedSharding(S.Mesh.iota((2,), ("x",)), S.P()))
    spread = Arg("uncommitted", (), "float32",
                 S.NamedSharding(S.Mesh.iota((2,), ("y",)), S.P()))
    call = _call(args=(committed, spread), outputs=Out((), source=0), uses=(True, False),
                 resource_mesh=S.Mesh.iota((1,), ("x",)))
    old = jit_call(call, jax="0.4.13")
    assert (old.accepted, old.rule, old.error_type) == (False, "DA-1", "ValueError")
