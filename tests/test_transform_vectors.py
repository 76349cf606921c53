"""Transformed-call vectors (vectors/transforms/): the format, the stored set and its replay.

Every stored vector replays under the spec to exactly its expected verdict (result and
trace); every side of every ARG, BAT, AD, WSC and SMAP rule has a vector; a sample replays
against real JAX through its family's harness; the format round-trips every value the
transforms take and give; bad JSON is refused with VEC-1 (unreadable) or VEC-2 (not
writable), naming the JSON path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.cli import main
from shardlaw.properties import (
    arguments_harness, batching_harness, constraint_harness, fuzz, fuzz_autodiff,
    shardmap_harness,
)
from shardlaw.properties.fuzz_transform_vectors import PLAUSIBLE
from shardlaw.properties.transform_vectors_gen import (
    SPEC_ONLY_REASON, rebuild_case, replay_in_jax, steps, wanted,
)
from shardlaw.spec.transforms.autodiff import JitBody, JitEquation
from shardlaw.spec.jit.layouts import AUTO_LAYOUT
from shardlaw.spec.vectors import transformed_vectors as transform_vectors
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.vectors.transformed_vectors import (
    TransformedVector, dump_transformed, load_transformed, transformed_differences,
    transformed_rules_hit,
)
from shardlaw.spec.transforms.transformed import TransformedCall, TransformedVerdict, explain_transformed
from shardlaw.spec.vectors.jit_vectors import vector_text

ROOT = Path(__file__).resolve().parent.parent / "vectors" / "transforms"
FILES = sorted(ROOT.glob("*/*.json"))


def _load(path: Path) -> TransformedVector:
    return load_transformed(path.read_text())


# --------------------------------------------------------------------------- the stored set

def test_the_stored_set_exists():
    assert len(FILES) >= 100, FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_stored_vector_replays_under_the_spec(path):
    vector = _load(path)
    assert vector.expect is not None and vector.rule is not None
    assert path.stem == vector.name and vector.name.startswith(f"{vector.rule}-{vector.side}-")
    actual = explain_transformed(vector.call)
    assert transformed_differences(vector.expect, actual) == []
    # written back, it is the same text: the files are in the writer's own form (the
    # message is the stored one: its words may list a set's members in another order)
    again = dump_transformed(vector.call,
                             dataclasses.replace(actual, message=vector.expect.message),
                             name=vector.name, rule=vector.rule,
                             side=vector.side, description=vector.description,
                             compared_with=vector.compared_with,
                             origin=None if vector.origin is None else rebuild_case(vector.origin),
                             origin_harness=None if vector.origin is None
                             else vector.origin.harness)
    assert vector_text(again) == path.read_text()


def test_every_side_of_every_rule_has_a_vector():
    have = {(p.parent.name, v.rule, v.side) for p in FILES for v in [_load(p)]}
    missing = [w for w in wanted() if w not in have]
    assert not missing, f"rule sides without a vector: {missing}"
    assert not have - set(wanted()), sorted(have - set(wanted()))


def test_the_rules_only_programs_meet_are_held_to_jax_by_a_program_property():
    """AD-9 and SMAP-20..22 have no transformed-call vector: a program property checks each."""
    from shardlaw.properties.transform_vectors_gen import PROGRAM_ONLY
    tests = Path(__file__).resolve().parent
    text = "".join(f.read_text(encoding="utf-8") for f in tests.glob("test_program*.py"))
    for rule_id in PROGRAM_ONLY:
        assert f'"{rule_id}"' in text, rule_id


def test_only_description_refusals_are_spec_only():
    """A vector without a JAX origin is a *-0 refusal (a description JAX has no value for)."""
    for path in FILES:
        vector = _load(path)
        if vector.origin is None:
            assert vector.rule.endswith("-0") and vector.side == "reject", path
            assert vector.description == SPEC_ONLY_REASON
        else:
            assert vector.compared_with and vector.origin.harness == path.parent.name


def test_each_vectors_call_is_a_step_of_its_case():
    """The call a vector stores is one the harness makes for the case it was compared on."""
    for path in FILES:
        vector = _load(path)
        if vector.origin is not None and vector.origin.harness != "autodiff":  # AD: traces JAX
            assert vector.call in steps(vector.origin.harness, rebuild_case(vector.origin)), path


# The vectors with a harness case (the spec-only description refusals have none: JAX has no
# such value; test_only_description_refusals_are_spec_only checks those).
JAX_FILES = [p for p in FILES if _load(p).origin is not None]


@pytest.mark.parametrize("path", JAX_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_vector_replays_against_real_jax(path):
    """Through the family's harness: JAX and the spec agree on the vector's case, the case
    still shows the vector's rule on its side, and the call is one of its steps."""
    assert replay_in_jax(_load(path)) == []


def test_replay_against_jax_sees_a_wrong_label():
    path = next(p for p in FILES if p.parent.name == "batching" and "-reject-" in p.stem)
    vector = _load(path)
    wrong = dataclasses.replace(vector, side="accept" if vector.side == "reject" else "reject")
    assert any("no longer shows" in line for line in replay_in_jax(wrong))


# --------------------------------------------------------------------------- round trips

def _round_trip(call: TransformedCall) -> None:
    verdict = explain_transformed(call)
    back = load_transformed(vector_text(dump_transformed(call, verdict)))
    assert back.call == call and back.expect == verdict
    assert [type(v) for _, v in back.call.arguments] == [type(v) for _, v in call.arguments]


@settings(max_examples=max(settings().max_examples // 4, 60), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.one_of(
    st.tuples(st.just("arguments"), arguments_harness.argument_cases()),
    st.tuples(st.just("batching"), batching_harness.vmap_cases()),
    st.tuples(st.just("constraint"), constraint_harness.constraint_cases()),
    st.tuples(st.just("shardmap"), shardmap_harness.smap_calls())))
def test_drawn_calls_round_trip_exactly(drawn):
    family, case = drawn
    for call in steps(family, case):
        _round_trip(call)
    origin = load_transformed(dump_transformed(call, origin=case, origin_harness=family,
                                               compared_with="x")).origin
    assert rebuild_case(origin) == case


@settings(max_examples=max(settings().max_examples // 5, 40), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_autodiff_calls_round_trip_exactly(data):
    plausible = fuzz_autodiff.PLAUSIBLE
    transform = data.draw(st.sampled_from(["jvp_equation", "transposed_equation",
                                           "partially_evaluated", "pruned_equation",
                                           "linearized_equations", "nonzero_outputs"]))
    names = [n for n, p in inspect.signature(
        S.transforms.transformed.TRANSFORMS[transform]).parameters.items()]
    call = TransformedCall.of(transform, **{n: data.draw(plausible[n]()) for n in names})
    _round_trip(call)


def test_every_kind_of_value_round_trips():
    mesh = S.Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Explicit, S.AxisType.Auto))
    values = [
        mesh, mesh.abstract, S.P("x", S.UNCONSTRAINED, None, reduced={"y"}), S.P(("x", "y"), None),
        S.NamedSharding(mesh, S.P(None, "y"), memory_kind="pinned_host"),
        S.SingleDeviceSharding(3), S.GSPMDSharding(mesh.devices, "{devices=[2,1,4]<=[8] "
                                                                "last_tile_dim_replicate}"),
        S.parse_hlo("{manual}"), S.UNSPECIFIED, S.AUTO, S.UNCONSTRAINED,
        S.Format(S.Layout((1, 0)), S.SingleDeviceSharding(2)), S.Format(AUTO_LAYOUT, None),
        AUTO_LAYOUT, None,
        JitEquation((S.UNSPECIFIED,), (), (False,)),
        JitBody(inputs=2, dependencies=[{0}, {0, 1}, {1}], forwarded=[None, None, 1], residuals=4,
                stored_residuals=3, residual_uses=[{0}, {1, 2, 3}, set()]),
        S.Arg.committed((8,), S.NamedSharding(mesh, S.P("x"))),
        (1, [2, None], {"a": "b"}, {1: (2, 3)}, frozenset({"x"}), {4}, 1.5, True, -2 ** 62),
        S.AxisType.Manual,
    ]
    for value in values:
        vector = dump_transformed(TransformedCall.of("constrained_result", constraint=value))
        back = load_transformed(json.loads(json.dumps(vector))).call.keywords["constraint"]
        assert back == value and type(back) is type(value), value


# --------------------------------------------------------------------------- bad input

GOOD = {"format": "shardlaw-transformed-call", "version": 1, "jax": "0.10.2",
        "call": {"transform": "manual_axes_of", "arguments": {
            "mesh": {"type": "AbstractMesh", "axis_sizes": [2, 4], "axis_names": ["x", "y"]},
            "manual_axes": {"frozenset": ["x"]}}}}


def _with(path: tuple, value: object) -> dict:
    doc = json.loads(json.dumps(GOOD))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize("path, value, where", [
    (("format",), "shardlaw-jit-call", "at format"),
    (("version",), 2, "at version"),
    (("call", "transform"), "vmap", "at call.transform"),
    (("call", "arguments", "manual_axes"), {"frozenset": [["x"]]}, "manual_axes.frozenset[0]"),
    (("call", "arguments", "manual_axes"), {"bag": []}, "at call.arguments.manual_axes"),
    (("call", "arguments", "mesh"), {"type": "Mesh", "axis_sizes": [2], "axis_names": ["x"],
                                     "devices": [0, 9]}, "call.arguments.mesh.devices[1]"),
    (("call", "arguments", "mesh"), {"type": "Jaxpr"}, "call.arguments.mesh.type"),
    (("call", "arguments", "rank"), 3, "at call.arguments"),
    (("call", "arguments", "manual_axes"), {"type": "JitBody", "inputs": 1},
     "at call.arguments.manual_axes"),
    (("expect",), {"accepted": False, "rule": "NOPE-1", "error_type": "ValueError"},
     "at expect.rule"),
    (("expect",), {"accepted": False, "rule": "BAT-4", "error_type": "NotAType"},
     "at expect.error_type"),
    (("origin",), {"harness": "batching", "case": {"type": "Case", "class": "os.system",
                                                  "fields": {}}}, "at origin.case.class"),
    (("side",), "Sideways!", "at side"),
    (("extra",), 1, "at extra"),
])
def test_bad_vectors_are_refused_with_vec_1_at_their_path(path, value, where):
    with pytest.raises(Rejection) as refused:
        load_transformed(_with(path, value))
    assert refused.value.rule == "VEC-1" and where in str(refused.value), str(refused.value)


@pytest.mark.parametrize("text", ["", "[", "{" * 500 + "}" * 500, '{"a": NaN}',
                                  "1" * 200, b"\xff\xfe\x00", '{"format": 1, "format": 2}'])
def test_unreadable_text_is_refused_with_vec_1(text):
    with pytest.raises(Rejection) as refused:
        load_transformed(text)
    assert refused.value.rule == "VEC-1"


@pytest.mark.parametrize("value, where", [
    (float("nan"), "call.arguments.constraint"),
    (object(), "call.arguments.constraint"),
    ([[[[]]]] * 1, None),
    (10 ** 200, "call.arguments.constraint"),
    ({(1, 2): [3], "a": 1}, None),
])
def test_values_the_format_cannot_carry_are_refused_with_vec_2(value, where):
    call = TransformedCall.of("constrained_result", constraint=value)
    if where is None:  # these it can carry
        assert load_transformed(dump_transformed(call)).call == call
        return
    with pytest.raises(Rejection) as refused:
        dump_transformed(call)
    assert refused.value.rule == "VEC-2" and where in str(refused.value)


def test_too_deep_values_are_refused_with_vec_2():
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(Rejection) as refused:
        dump_transformed(TransformedCall.of("constrained_result", constraint=deep))
    assert refused.value.rule == "VEC-2"
    loop: list = []
    loop.append(loop)
    with pytest.raises(Rejection) as refused:
        dump_transformed(TransformedCall.of("constrained_result", constraint=loop))
    assert refused.value.rule == "VEC-2"


@pytest.mark.parametrize("bad", [None, 3, "call", S.Call()])
def test_public_functions_refuse_what_they_do_not_take(bad):
    for make in (lambda: dump_transformed(bad), lambda: transformed_differences(bad, bad),
                 lambda: transformed_rules_hit(bad),
                 lambda: dump_transformed(TransformedCall.of("manual_axes_of", mesh=None,
                                                             manual_axes=()), verdict=bad)):
        try:
            make()
        except Rejection as refused:
            assert refused.rule in ("VEC-1", "VEC-2")


def test_differences_name_the_facts():
    ok = TransformedVerdict(True, ("SMAP-1",), result=frozenset({"x"}))
    assert transformed_differences(ok, ok) == []
    other = TransformedVerdict(True, ("SMAP-1",), result=frozenset({"y"}))
    assert transformed_differences(ok, other) == [
        "result: expected frozenset({'x'}), got frozenset({'y'})"]
    assert transformed_rules_hit(_load(FILES[0]))[0][0] == _load(FILES[0]).rule


# --------------------------------------------------------------------------- fuzzing

def _fuzz_targets() -> list:
    return [fuzz.Target(name, getattr(transform_vectors, name))
            for name in transform_vectors.__all__
            if callable(getattr(transform_vectors, name))
            and not isinstance(getattr(transform_vectors, name), type)]


@st.composite
def _fuzzed(draw):
    """A call of a public function of spec.transform_vectors, its arguments drawn as
    tests/test_fuzz.py draws them, with this module's plausible values by parameter name
    (properties/fuzz_transform_vectors.py; the lead adds it to fuzz.py's merge)."""
    target = draw(st.sampled_from(_fuzz_targets()))

    def pick(what, name):
        if what == "omit":
            return draw(st.integers(0, 2)) == 0
        if what == "values":
            return []
        mine = PLAUSIBLE.get(name)
        return draw(st.one_of(mine(), mine(), fuzz.hostile()) if mine else fuzz.argument(name))
    return fuzz.build_case(target, pick)


@settings(max_examples=max(settings().max_examples, 300), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(_fuzzed())
def test_hostile_input_ends_in_a_value_or_a_rule(case):
    outcome = fuzz.run_spec_case(case)
    assert not outcome.failed, f"{outcome.kind} ({outcome.detail}): {repr(case)[:600]}"


# --------------------------------------------------------------------------- the command line

def _cli(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_check_explains_a_transformed_vector(capsys):
    path = ROOT / "batching" / "BAT-4-reject-1.json"
    status, out, _ = _cli(capsys, "check", path)
    assert status == 0 and "Refused by BAT-4" in out and "the spec matches" in out
    assert "BAT-0  vmap's parameters are well-formed" in out
    status, out, _ = _cli(capsys, "check", "--json", path)
    report = json.loads(out)
    assert status == 0 and report["matches"] is True and report["verdict"]["rule"] == "BAT-4"


def test_check_exit_codes_of_transformed_vectors(capsys, tmp_path):
    vector = json.loads((ROOT / "shardmap" / "SMAP-3-reject-1.json").read_text())
    vector["expect"]["rule"] = "SMAP-8"
    vector.pop("rule"), vector.pop("side")
    (tmp_path / "differs.json").write_text(json.dumps(vector))
    status, out, _ = _cli(capsys, "check", tmp_path / "differs.json")
    assert status == 1 and "the spec differs" in out
    vector["call"]["transform"] = "no_such_transform"
    (tmp_path / "bad.json").write_text(json.dumps(vector))
    status, _, err = _cli(capsys, "check", tmp_path / "bad.json")
    assert status == 2 and "VEC-1" in err and "call.transform" in err


def test_vectors_run_replays_the_transformed_set(capsys):
    status, out, _ = _cli(capsys, "vectors", "run", ROOT / "arguments", "--against", "spec")
    assert status == 0 and "0 failed (100.0 % conform)" in out and "ARG-4" in out
    status, out, _ = _cli(capsys, "vectors", "run", ROOT / "arguments", "--against", "jax")
    assert status == 0 and "0 failed" in out and "spec-only vector" in out


def test_vectors_generate_writes_transformed_vectors(capsys, tmp_path):
    status, out, _ = _cli(capsys, "vectors", "generate", tmp_path, "--transformed",
                          "--per-rule", "1", "--budget", "3")
    assert status == 0 and "transformed-call vector(s)" in out, out
    written = sorted(tmp_path.glob("*/*.json"))
    assert written and all(_load(p).expect is not None for p in written)
    status, _, err = _cli(capsys, "vectors", "generate", tmp_path, "--transformed")
    assert status == 2 and "--replace" in err


@st.composite
def _mutated_vectors(draw):
    path = draw(st.sampled_from(FILES[::5]))
    return fuzz.mutated_file((path.name, path.read_text()), draw(st.data()))


@settings(max_examples=max(settings().max_examples // 2, 100), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(_mutated_vectors(), st.booleans())
def test_check_of_a_mutated_transformed_vector_exits_cleanly(named, as_json):
    """A hostile file: 0 or 1 with a report, or 2 with one line naming VEC-1."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / named[0]
        path.write_text(named[1], encoding="utf-8", errors="surrogatepass")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["check", *(["--json"] if as_json else []), str(path)])
    outcome = fuzz.check_exit(status, err.getvalue(), out.getvalue())
    assert not outcome.failed, (outcome, named[1][:300], err.getvalue()[:300])
