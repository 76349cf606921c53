"""Hostile input, the ci slice of the fuzz layer (``shardlaw.properties.fuzz``).

Every public constructor and query of the spec, called with drawn arguments that are
mostly plausible and often hostile, ends in a value or in a rejection that names a rule;
the command line, run in this process and (a sample) as the real executable, exits 0, 1 or
3 with its report, or 2 with one line on stderr. The deep campaign is
``python -m shardlaw.properties.fuzz`` (docs/bad-input.rst).

Any bare exception, hang or bad exit fails the test that met it, wherever it is rooted.

Part of the ``fuzz`` suite of ``shardlaw campaign``; ``tests/test_fuzz.py`` runs it in the
project's own ``pytest`` run.
"""

from __future__ import annotations

import inspect
import sys

import pytest
from hypothesis import HealthCheck, given, settings

import shardlaw.spec as S
from shardlaw.properties import fuzz
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples

# Every health check but nested_given (which HypoFuzz refuses to run tests that suppress).
ALL_BUT_NESTED = [check for check in HealthCheck if check is not HealthCheck.nested_given]

def _judge(side: str, case, outcome) -> None:
    if outcome.failed:
        raise AssertionError(f"{side} input ended in {outcome.kind} ({outcome.detail}): "
                             f"{repr(case)[:600]}")


def test_every_public_name_is_fuzzed_or_exempt():
    fuzzed = {t.name for t in fuzz.TARGETS}
    for name in S.__all__:
        assert name in fuzzed or name in fuzz.EXEMPT, f"{name} is neither fuzzed nor exempt"
    assert not set(fuzz.EXEMPT) - set(S.__all__), "an exemption names nothing public"
    # The prover's parameters are fuzzed too (when z3 is there).
    pytest.importorskip("z3")
    assert {"prove_equivalent", "prove_for_every_shape"} <= fuzzed


@checks("VAL-1", "VAL-2", "VAL-3", "VAL-4", "VAL-5", "VAL-6", "VAL-7", "VAL-8", "HLO-1",
        "HLO-2", "HLO-3", "SMT-1", "SMT-2")
@settings(max_examples=examples(600), deadline=None, suppress_health_check=ALL_BUT_NESTED)
@given(fuzz.spec_cases(fuzz.targets(prover=False)))
def test_spec_inputs_end_in_a_value_or_a_rule(case):
    _judge("spec", case, fuzz.run_spec_case(case))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=ALL_BUT_NESTED)
@given(fuzz.spec_cases([t for t in fuzz.targets() if t.prover]))
def test_the_prover_checks_its_parameters_and_keeps_its_time_limit(case):
    pytest.importorskip("z3")
    _judge("spec", case, fuzz.run_spec_case(case))


@settings(max_examples=examples(120), deadline=None, suppress_health_check=ALL_BUT_NESTED)
@given(fuzz.cli_cases())
def test_command_lines_exit_cleanly_in_process(case):
    _judge("cli", case, fuzz.run_cli_case(case))


@settings(max_examples=examples(6), deadline=None, suppress_health_check=ALL_BUT_NESTED)
@given(fuzz.cli_cases())
def test_command_lines_exit_cleanly_as_the_real_executable(case):
    _judge("exe", case, fuzz.run_cli_executable(case))


def test_the_campaign_counts_outcomes_and_rules():
    result = fuzz.campaign(inputs=2000, cli=10, executable=0, seed=1, recombine=5)
    assert result.inputs == 2010
    report = result.report()
    assert "inputs/s" in report and "rejections per rule ID" in report
    rejected = result.outcomes[("spec", "rejected")]
    assert rejected > 0
    assert sum(n for (side, _), n in result.rules.items() if side == "spec") == rejected
    for line in ("outcome counts:", "rules never seen rejecting:"):
        assert line in report


def test_a_bare_exception_is_caught_and_located():
    def broken():
        return {}["missing"]
    outcome = fuzz.classify(broken)
    assert outcome.kind == "bare" and outcome.detail.startswith("KeyError at ")


def test_a_hang_is_cut_at_the_limit():
    def forever():
        while True:
            pass
    outcome = fuzz.classify(forever, limit_s=0.2)
    assert outcome.kind == "hang" and outcome.seconds < 2


def test_every_target_takes_its_drawn_arguments():
    # Guard against a signature the generic drawing cannot read (it would fuzz nothing).
    for target in fuzz.TARGETS:
        assert inspect.signature(target.function) is not None


def test_the_engine_side_holds_drawn_calls_against_jax():
    result = fuzz.campaign(inputs=0, cli=0, executable=0, seed=3, engine=8)
    engine = {kind: n for (side, kind), n in result.outcomes.items() if side == "engine"}
    assert sum(engine.values()) == 8, result.report()
    assert not result.failures, result.report()


def test_an_engine_child_that_crashes_is_counted_and_replaced(monkeypatch):
    """A child killed by a signal: its running case is a crash, and a new child goes on."""
    from shardlaw.properties import fuzz_engine

    script = ("import json, os, signal, sys\n"
              "count = int(sys.argv[1])\n"
              "print(json.dumps({'start': 'first'}), flush=True)\n"
              "print(json.dumps({'kind': 'value', 'detail': '', 'seconds': 0.1}), flush=True)\n"
              "if count > 2:\n"
              "    print(json.dumps({'start': 'the crashing one'}), flush=True)\n"
              "    os.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setattr(fuzz_engine, "_child_command",
                        lambda count, seed: [sys.executable, "-c", script, str(count)])
    outcomes = list(fuzz_engine.engine_outcomes(4, seed=0, deadline=float("inf")))
    kinds = [kind for kind, _, _, _ in outcomes]
    assert kinds == ["value", "crash", "value", "value"], outcomes
    assert outcomes[1][3] == "the crashing one" and "-11" in outcomes[1][1]
