"""Test vectors: the JSON format round-trips every call exactly, bad input is refused with
VEC-1 (naming the JSON path and the value), calls JSON cannot carry back are refused with
VEC-2, and the committed set under ``vectors/jit`` holds against the spec and real JAX."""

import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.properties import strategies as ST
from shardlaw.properties.call_strategies import calls
from shardlaw.properties.registry import checks
from shardlaw.spec import Arg, Call, JitOptions, Out, Static
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.vectors.jit_vectors import (
    dump_vector, jit_rules, load_vector, rules_hit, vector_text, verdict_differences,
)

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "vectors" / "jit"
MESH = S.Mesh.iota((2, 4), ("x", "y"))
NS = S.NamedSharding(MESH, S.P("x", "y"))


def round_trip(call, verdict=None, **labels):
    text = vector_text(dump_vector(call, verdict, **labels))
    back = load_vector(text)
    assert back.call == call
    assert back.expect == verdict
    # The text is canonical: writing what was read gives the same text again.
    assert vector_text(dump_vector(back.call, back.expect, **labels)) == text
    return back


# --------------------------------------------------------------------------- round trips

@checks("VEC-1", "VEC-2")
@given(calls(layouts=True))
def test_every_drawn_call_and_its_verdict_round_trip(call):
    verdict = S.jit_call(call)
    labels = ({"rule": verdict.rule, "side": "reject"} if not verdict.accepted
              else {"rule": verdict.trace[0], "side": "accept"} if verdict.trace else {})
    round_trip(call, verdict, name="drawn", **labels)


static_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.tuples(inner, inner) | st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)


@checks("VEC-1", "VEC-2")
@given(sharding=st.one_of(ST.shardings(), ST.named_shardings(abstract=True)),
       mesh=ST.meshes(abstract=True), hlo=ST.hlo_shardings(8), value=static_values)
def test_every_value_kind_round_trips(sharding, mesh, hlo, value):
    """Shardings of every kind (abstract meshes, axis types, UNCONSTRAINED, unreduced, memory
    kinds), abstract context meshes, HLO oracles and static values of every JSON shape."""
    call = Call(args=(Arg.numpy((4,)), Static(value)), outputs=Out((4,), mesh=mesh),
                options=JitOptions(in_shardings=(sharding, None), static_argnums=1),
                context_mesh=mesh, compiler=(hlo,), compiler_memory=("pinned_host",))
    round_trip(call)


EXOTIC = {
    "symbolic device list of 4096 devices": Call(
        args=(Arg.committed((4096,), S.NamedSharding(S.Mesh((64, 64), ("a", "b"), S.Iota(
            (64, 64), (1, 0))), S.P(("b", "a")))),), outputs=Out((4096,)), devices=4096),
    "devices of another platform and process": Call(
        args=(Arg.committed((2,), S.GSPMDSharding(S.DeviceList(
            (S.Device(1, "tpu", 0), S.Device(3, "tpu", 1))), "{devices=[2]<=[2]}")),),
        outputs=Out((2,)), devices=4, process_count=2),
    "kwargs, abstract values, AOT call, options": Call(
        args=({"w": Arg.abstract((8,), "bfloat16", S.NamedSharding(MESH, S.P("x"))), "b": [Arg.scalar("int")]},),
        kwargs={"extra key": Arg.uncommitted((4,), S.SingleDeviceSharding(2))},
        outputs={"out": (Out((8,), source=0), None)},
        options=JitOptions(static_argnames=("s",), donate_argnums=(0,), donate_argnames="b",
                           keep_unused=True),
        uses=(True, False, True), default_device=2,
        aot_args=({"w": Arg.numpy((8,)), "b": [Arg.scalar()]},), aot_kwargs={}),
    "device= and backend=": Call(args=(Arg.numpy((2,)),), outputs=Out((2,)),
                                 options=JitOptions(device=3, backend="cpu")),
    "explicit axes, unreduced spec, memory kinds": Call(
        args=(Arg.committed((8,), S.NamedSharding(
            S.Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Explicit, S.AxisType.Auto)),
            S.P("y", unreduced={"x"}), memory_kind="pinned_host")),),
        outputs=Out((8,)), options=JitOptions(
            in_shardings=[S.P(S.UNCONSTRAINED, ("x", "y"))], out_shardings=None)),
    "layouts: laid-out arrays, Format leaves, bare layouts, the compiler's choices": Call(
        args=(Arg.committed((8, 8), NS, layout=S.Layout((1, 0))),
              Arg.uncommitted((2, 3, 4), layout=S.Layout((2, 0, 1))), Arg.numpy((8,))),
        outputs=(Out((8, 8), source=0), Out((8,))),
        options=JitOptions(
            in_shardings=(S.Format(S.Layout((1, 0)), NS), S.Format(), S.Layout.AUTO),
            out_shardings=(S.Format(S.Layout.AUTO), S.Format(None, S.SingleDeviceSharding(1)))),
        compiler_layouts=(S.Layout((0, 1)), None),
        compiler_in_layouts=(None, None, S.Layout((0,)))),
    "the compiler's choices for inputs left open": Call(
        args=(Arg.numpy((8, 8)), Arg.scalar(), Arg.committed((8, 8), NS)), outputs=Out((8,)),
        compiler_in=(S.parse_hlo("{devices=[2,4]<=[8]}"), None, None),
        aot_args=(Arg.committed((8, 8), NS), Arg.scalar(), Arg.committed((8, 8), NS))),
    "shardings trees with plain and array leaves": Call(
        args=((Arg.numpy((2,)), Arg.numpy((2,))),), outputs=Out((2,)),
        options=JitOptions(in_shardings=({"a": "x", "b": 1.5},), out_shardings=[
            Arg.numpy((2,)), True, 3])),
}


@checks("VEC-1", "VEC-2")
@pytest.mark.parametrize("name", sorted(EXOTIC))
def test_exotic_calls_round_trip(name):
    round_trip(EXOTIC[name])


def test_long_iota_device_lists_are_written_symbolically():
    text = vector_text(dump_vector(EXOTIC["symbolic device list of 4096 devices"]))
    assert '"iota": [64, 64]' in text and '"perm": [1, 0]' in text
    assert len(text) < 4000


# --------------------------------------------------------------------------- bad input

def _good() -> dict:
    call = Call(args=(Arg.committed((8, 8), NS), Arg.numpy((8, 8))), outputs=Out((8, 8)),
                options=JitOptions(in_shardings=(None, S.GSPMDSharding(
                    MESH.devices, "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"))))
    return dump_vector(call, S.jit_call(call), name="good", rule="DA-1", side="accept")


def _set(path, value):
    def change(vector):
        node = vector
        for key in path[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return vector
    return change


_DELETE = object()
ARG0 = ("call", "args", 0)

BAD = [
    # (what, change to a good vector or raw text, the JSON path named, words in the message)
    ("not JSON", "{'format': 1", "(the vector)", "JSON text"),
    ("not an object", "[1, 2]", "(the vector)", "a vector (a JSON object)"),
    ("repeated key", '{"format": "x", "format": "y"}', "(the vector)", "repeated keys"),
    ("NaN", '{"format": NaN}', "(the vector)", "NaN"),
    ("other format", _set(("format",), "wasm"), "at format", '"wasm"'),
    ("unknown version", _set(("version",), 3), "at version", "reads (1, 2), got 3"),
    ("version as text", _set(("version",), "1"), "at version", '"1"'),
    ("no call", _set(("call",), _DELETE), "at (the vector)", 'the key "call"'),
    ("unknown top key", _set(("calls",), {}), "at calls", "a key of a vector"),
    ("unknown option", _set(("call", "options", "in_sharding"), None),
     "at call.options.in_sharding", "a key of the jit options"),
    ("unknown arg key", _set(ARG0 + ("committed",), True), "at call.args[0].committed",
     "a key of an Arg"),
    ("shape as text", _set(ARG0 + ("shape",), "8x8"), "at call.args[0].shape", '"8x8"'),
    ("bool as size", _set(ARG0 + ("shape",), [8, True]), "at call.args[0].shape[1]", "true"),
    ("unknown kind", _set(ARG0 + ("kind",), "borrowed"), "at call.args[0]", "borrowed"),
    ("missing device", _set(ARG0 + ("sharding", "mesh", "devices"), [0, 1, 2, 3, 4, 5, 6, 11]),
     "at call.args[0].sharding.mesh.devices[7]", "a device id below 8 (the call has 8 devices), "
     "got 11"),
    ("device twice", _set(ARG0 + ("sharding", "mesh", "devices"), [0, 1, 2, 3, 4, 5, 6, 6]),
     "at call.args[0].sharding.mesh.devices", "device 6 appears twice"),
    ("too few devices for the mesh", _set(ARG0 + ("sharding", "mesh", "devices"), [0, 1]),
     "at call.args[0].sharding.mesh", "holds 8 devices"),
    ("unknown mesh axis", _set(ARG0 + ("sharding", "spec", "partitions"), ["z"]),
     "at call.args[0].sharding", "names mesh axis 'z'"),
    ("unknown axis type", _set(ARG0 + ("sharding", "mesh", "axis_types"), ["Auto", "Magic"]),
     "at call.args[0].sharding.mesh.axis_types[1]", '"Magic"'),
    ("HLO that does not parse", _set(("call", "options", "in_shardings", "tuple", 1, "hlo"),
                                     "{devices=[2,4]<=[7]}"),
     "at call.options.in_shardings.tuple[1].hlo", "HLO-2"),
    ("HLO that is no text", _set(("call", "options", "in_shardings", "tuple", 1, "hlo"), 3),
     "at call.options.in_shardings.tuple[1].hlo", "HLO sharding text"),
    ("unknown sharding type", _set(ARG0 + ("sharding", "type"), "PositionalSharding"),
     "at call.args[0].sharding", "NamedSharding, SingleDeviceSharding, GSPMDSharding"),
    ("bare list as a tree", _set(("call", "outputs"), [{"type": "Out", "shape": [8, 8]}]),
     "at call.outputs", "a pytree node"),
    ("two container keys", _set(("call", "outputs"), {"tuple": [], "list": []}),
     "at call.outputs", "a pytree node"),
    ("device option out of range", _set(("call", "options", "device"), 8),
     "at call.options.device", "a device id below 8"),
    ("negative device count", _set(("call", "devices"), 0), "at call.devices",
     "a device count of at least 1"),
    ("uses of the wrong type", _set(("call", "uses"), [1, 0]), "at call.uses[0]",
     "true or false"),
    ("unknown rule label", _set(("rule",), "DA-99"), "at rule", "a registered rule ID"),
    ("label the verdict contradicts", _set(("side",), "reject"), "at expect.rule",
     "labelled as rejected by DA-1"),
    ("verdict of the wrong shape", _set(("expect", "accepted"), "yes"), "at expect",
     '"accepted": true or false'),
    ("unknown exception type", lambda v: {**v, "expect": {
        "accepted": False, "rule": "DA-1", "error_type": "Oops"}}, "at expect.error_type",
     "built-in exception type"),
    ("expected device out of range", _set(("expect", "device_assignment"), [0, 9]),
     "at expect.device_assignment[1]", "a device id below 8"),
]


@checks("VEC-1")
@pytest.mark.parametrize("what,change,path,words", BAD, ids=[b[0] for b in BAD])
def test_bad_vectors_are_refused_naming_the_path_and_value(what, change, path, words):
    given = change if isinstance(change, str) else change(copy.deepcopy(_good()))
    with pytest.raises(Rejection) as info:
        load_vector(given)
    message = str(info.value)
    assert info.value.rule == "VEC-1", message
    assert message.startswith(f"[VEC-1] {path}:") or (
        path == "(the vector)" and message.startswith("[VEC-1] at (the vector):")), message
    assert words in message, message


def test_the_good_vector_is_good():
    assert load_vector(_good()).call.args[0].sharding == NS


@checks("VEC-2")
@pytest.mark.parametrize("call,words", [
    (Call(args=({1: Arg.numpy((2,))},), outputs=Out((2,))), "a dict key"),
    (Call(args=(Static(object()),), outputs=Out(()), options=JitOptions(static_argnums=0)),
     "a static value"),
    (Call(args=(Static(math.inf),), outputs=Out(()), options=JitOptions(static_argnums=0)),
     "a finite number"),
    (Call(args=(Arg.numpy((2,)),), outputs=Out((2,)), options=JitOptions(in_shardings=S.AUTO)),
     "a leaf of a shardings tree"),
    (Call(args=(Arg.numpy((2,)),), outputs=Out((2,)), options=JitOptions(device=9)),
     "does not read back"),
])
def test_calls_json_cannot_carry_are_refused(call, words):
    with pytest.raises(Rejection) as info:
        dump_vector(call)
    assert info.value.rule == "VEC-2" and words in str(info.value), info.value


# --------------------------------------------------------------------------- comparing

def test_differences_name_the_fact_that_differs():
    call = Call(args=(Arg.committed((8, 8), NS),), outputs=Out((8, 8)))
    good = S.jit_call(call)
    assert verdict_differences(good, good) == []
    other = S.jit_call(Call(args=(Arg.committed((8, 8), S.SingleDeviceSharding(1)),),
                            outputs=Out((8, 8))))
    assert any(d.startswith("device_assignment: expected (0, 1, 2, 3, 4, 5, 6, 7), got (1,)")
               for d in verdict_differences(good, other))
    refused = S.jit_call(Call(args=(Arg.uncommitted((8, 8), NS),), outputs=Out((8, 8))))
    assert verdict_differences(good, refused) == [
        "expected the call to be accepted, it was rejected by RES-1"]


# --------------------------------------------------------------------------- the committed set

def _committed():
    files = sorted(COMMITTED.rglob("*.json"))
    assert files, f"no vectors under {COMMITTED}"
    return [(f, load_vector(f.read_text(encoding="utf-8"))) for f in files]


def test_committed_vectors_are_canonical_and_labelled():
    for path, vector in _committed():
        assert vector.rule and vector.side and vector.expect is not None, path
        text = vector_text(dump_vector(vector.call, vector.expect, name=vector.name,
                                       rule=vector.rule, side=vector.side,
                                       description=vector.description, jax=vector.jax))
        assert text == path.read_text(encoding="utf-8"), f"{path} is not in canonical form"


def test_committed_vectors_show_every_jit_rule_on_both_sides():
    from shardlaw.properties.vectors_gen import wanted_buckets

    seen = {hit for _, vector in _committed() for hit in rules_hit(vector)}
    labelled = {(v.rule, v.side) for _, v in _committed()}
    missing = [b for b in wanted_buckets() if b not in seen or b not in labelled]
    assert not missing, f"no committed vector shows {missing}"
    assert set(jit_rules()) <= {rule for rule, _ in seen}


def test_committed_vectors_conform_to_the_spec(capsys):
    from shardlaw.cli import main

    status = main(["vectors", "run", str(COMMITTED), "--against", "spec"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert " 0 failed (100.0 % conform)" in out, out


def test_committed_vectors_conform_to_jax(capsys):
    """Real jax.jit does what every committed vector expects (the multi-process ones are
    skipped, and said so: the harness runs one JAX process)."""
    pytest.importorskip("jax")
    from shardlaw.cli import main

    status = main(["vectors", "run", str(COMMITTED), "--against", "jax"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert " 0 failed (100.0 % conform)" in out, out
    skipped = [line for line in out.splitlines() if line.startswith("  skipped ")]
    assert all("2 JAX processes" in line for line in skipped), skipped


# --------------------------------------------------------------------------- the generator

def test_generator_writes_vectors_jax_agrees_with(tmp_path):
    pytest.importorskip("jax")
    from shardlaw.properties import jit_harness
    from shardlaw.properties.vectors_gen import generate, replay_in_jax

    hits = jit_harness.call_hit_counts()
    report = generate(tmp_path, per_rule=1, budget=25, hand=False)
    assert jit_harness.call_hit_counts() == hits, \
        "generate must leave the harness's hit counts alone"
    files = sorted(tmp_path.rglob("*.json"))
    assert files and report.drawn > 0
    for path in files:
        vector = load_vector(path.read_text(encoding="utf-8"))
        assert (vector.rule, vector.side) in rules_hit(vector), path
        assert verdict_differences(vector.expect, S.jit_call(vector.call)) == [], path
        assert replay_in_jax(vector) == [], path
    with pytest.raises(FileExistsError):
        generate(tmp_path, per_rule=1, budget=1, hand=False)


def test_vector_files_are_json(tmp_path):
    """What vector_text writes is plain JSON that any implementation reads."""
    vector = _good()
    assert json.loads(vector_text(vector)) == vector


@checks("VEC-1")
def test_layouts_need_version_two_and_vectors_without_them_stay_version_one():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "vectors" / "jit"
    laid = json.loads((root / "hand" / "lay-1-auto-matches-no-committed-array.json").read_text())
    assert laid["version"] == 2 and load_vector(laid).call.options.in_shardings is not None
    with pytest.raises(ValueError) as caught:
        load_vector(dict(laid, version=1))
    assert "version 2 for a vector with layouts" in str(caught.value)
    plain = dump_vector(Call(args=(Arg.numpy((4,)),), outputs=Out((4,))))
    assert plain["version"] == 1 and "compiler_in" not in plain["call"]


@checks("VEC-1")
def test_compiler_in_needs_version_two():
    """The compiler's choices for inputs jit left open came with version 2 of the format."""
    call = Call(args=(Arg.numpy((8,)), Arg.committed((8,), S.NamedSharding(MESH, S.P("x")))),
                outputs=Out((8,)), aot_args=(Arg.committed((8,), S.NamedSharding(MESH, S.P())),
                                             Arg.committed((8,), S.NamedSharding(MESH, S.P("x")))),
                compiler_in=(S.parse_hlo("{devices=[2,4]<=[8] last_tile_dim_replicate}"), None))
    vector = dump_vector(call, S.jit_call(call))
    assert vector["version"] == 2
    assert vector["call"]["compiler_in"] == ["{devices=[2,4]<=[8] last_tile_dim_replicate}", None]
    assert load_vector(vector).call == call and vector["expect"]["rule"] == "AOT-3"
    with pytest.raises(ValueError) as caught:
        load_vector(dict(vector, version=1))
    assert "compiler_in" in str(caught.value)
