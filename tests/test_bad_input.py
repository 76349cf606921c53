"""Invalid input is rejected by a rule, with the rule's ID and the offending value, never a crash.

A rejection is a :class:`~shardlaw.spec.core.rules.Rejection`; its message (``args[0]``, which is
``explain(failure, path)``) starts with ``[RULE-ID]`` and shows the value that broke the rule.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardlaw.properties.registry import checks
from shardlaw.properties.strategies import bad_values, invalid_partition_specs, meshes
from shardlaw.spec import (
    AbstractMesh, Arg, Call, DeviceList, Format, GSPMDSharding, Iota, JitOptions, Layout,
    Maximal, Mesh, NamedSharding, Out, P, Rejection, SingleDeviceSharding, Tiled, hlo_text,
    jit_call, parse_hlo, shard_shape, tiled,
)
from shardlaw.spec.core.dims import check_dims
from shardlaw.spec.core.rules import explain

# What a crash looks like: these escape only from a bug, never from a rule.
CRASHES = (AssertionError, IndexError, KeyError, AttributeError, ZeroDivisionError)


def _message(rejection: Rejection) -> str:
    # str() of a KeyError-derived rejection adds quotes; the message is the first argument.
    return rejection.args[0]


def _rejected(build, rule: str, shows: str) -> Rejection:
    try:
        value = build()
    except Rejection as rejection:
        message = _message(rejection)
        assert message == explain(rejection.failure, rejection.path)
        assert re.match(r"^\[[A-Z]+(-[A-Z]+)*-[0-9]+\]", message), message
        assert message.startswith(f"[{rejection.rule}]"), message
        assert rejection.rule.startswith(rule), (rule, message)
        assert shows in message, (shows, message)
        return rejection
    except CRASHES as crash:  # pragma: no cover - a failure of the spec
        raise AssertionError(f"crashed with {crash!r} instead of a rule's rejection") from crash
    raise AssertionError(f"accepted: {value!r}")


@checks("VAL-1", "VAL-2", "VAL-3", "VAL-4", "VAL-5", "VAL-6", "VAL-7", "VAL-8", "HLO-1",
        "HLO-2", "HLO-3", "NS-1", "NS-2", "NS-3", "NS-4", "NS-5", "DIV-1", "DEV-1", "IDX-1",
        "IDX-2")
@given(bad_values())
def test_bad_values_are_rejected_by_a_rule(bad):
    _rejected(bad.build, bad.rule, bad.shows)


@checks("NS-1", "NS-2", "NS-3", "NS-4")
@given(meshes(max_devices=8).flatmap(
    lambda mesh: invalid_partition_specs(mesh).map(lambda spec: (mesh, spec))))
def test_invalid_partition_specs_are_rejected(case):
    mesh, spec = case
    _rejected(lambda: NamedSharding(mesh, spec), "NS-", repr(spec))


@given(meshes(max_devices=8, abstract=True).flatmap(
    lambda mesh: invalid_partition_specs(mesh).map(lambda spec: (mesh, spec))))
def test_invalid_partition_specs_are_rejected_on_abstract_meshes(case):
    mesh, spec = case
    _rejected(lambda: NamedSharding(mesh, spec), "NS-", repr(spec))


_SHARDING = NamedSharding(Mesh.iota((2, 2), ("x", "y")), P("x"))

EXAMPLES = [
    ("duplicate axis names", lambda: Mesh((2, 2), ("x", "x"), range(4)), "VAL-3", "'x'"),
    ("7 devices for 8 positions", lambda: Mesh((2, 4), ("x", "y"), range(7)), "VAL-4", "7"),
    ("device 0 twice", lambda: Mesh((2,), ("x",), [0, 0]), "VAL-5", "device 0"),
    ("negative axis size", lambda: AbstractMesh((-1, 4), ("x", "y")), "VAL-1", "-1"),
    ("float axis size", lambda: Mesh((2.0,), ("x",), range(2)), "VAL-1", "2.0"),
    ("integer spec entry", lambda: P(3), "VAL-6", "3"),
    ("3 devices for 4 tiles", lambda: parse_hlo("{devices=[2,2]0,1,2}"), "HLO-2", "0,1,2"),
    ("iota of 3 for 4 tiles", lambda: parse_hlo("{devices=[2,2]<=[3]}"), "HLO-2", "<=[3]"),
    ("garbage", lambda: parse_hlo("garbage"), "HLO-2", "'garbage'"),
    ("None", lambda: parse_hlo(None), "HLO-2", "None"),
    ("a string as mesh", lambda: NamedSharding("mesh", P()), "VAL-8", "'mesh'"),
    ("negative dimension", lambda: shard_shape(_SHARDING, (-1, 2)), "VAL-1", "-1"),
    ("a string as shape", lambda: shard_shape(_SHARDING, "ab"), "VAL-1", "'ab'"),
]


@pytest.mark.parametrize("description, build, rule, shows", EXAMPLES,
                         ids=[e[0] for e in EXAMPLES])
def test_explicit_bad_input(description, build, rule, shows):
    rejection = _rejected(build, rule, shows)
    assert rejection.rule == rule


@checks("VAL-9", "VAL-10")
@given(order=st.lists(st.integers(-2, 5), max_size=5),
       layout=st.sampled_from(("layout", "auto", "none", "tuple", "int")),
       sharding=st.sampled_from(("sharding", "none", "spec", "string")))
def test_layouts_are_orders_and_formats_pair_a_layout_with_a_sharding(order, layout, sharding):
    """A Layout is a permutation of its dimensions (VAL-9); a Format takes a Layout, AUTO or
    None with a Sharding or None, and a concrete Layout only with a sharding (VAL-10)."""
    if sorted(order) != list(range(len(order))):
        _rejected(lambda: Layout(order), "VAL-9", str(tuple(order)))
        return
    given_layout = {"layout": Layout(order), "auto": Layout.AUTO, "none": None,
                    "tuple": tuple(order), "int": 3}[layout]
    given_sharding = {"sharding": _SHARDING, "none": None, "spec": P("x"),
                      "string": "x"}[sharding]
    refused = (layout in ("tuple", "int") or sharding in ("spec", "string")
               or (layout == "layout" and sharding == "none"))
    if refused:
        _rejected(lambda: Format(given_layout, given_sharding), "VAL-10", "Format")
    else:
        assert Format(given_layout, given_sharding).sharding is given_sharding


# --------------------------------------------------------------------------- issue 13
# One pinned test per class of hostile input the fuzz campaign found
# (shardlaw.properties.fuzz); each was a bare exception, a hang or a wrong acceptance.

class _BadIndex:
    """An integer-like value whose ``__index__`` raises."""

    def __index__(self):
        raise ValueError("no index")


def _deep(depth: int, kind=list):
    value = 2
    for _ in range(depth):
        value = kind([value])
    return value


HOSTILE = [
    ("tile dims of 0 (ZeroDivisionError in shard_shape)",
     lambda: parse_hlo("{devices=[0]<=[0]}"), "HLO-2", "between 1 and 2**63 - 1"),
    ("a GSPMD sharding over tile dims of 0",
     lambda: GSPMDSharding([], "{devices=[0]<=[0]}"), "HLO-2", "{devices=[0]<=[0]}"),
    ("an Arabic-Indic digit in a maximal sharding",
     lambda: parse_hlo("{maximal device=\u0663}"), "HLO-2", "maximal device="),
    ("a fullwidth digit in tile dims", lambda: parse_hlo("{devices=[\uff12]<=[\uff12]}"),
     "HLO-2", "devices="),
    ("a maximal device past int64", lambda: parse_hlo("{maximal device=" + "9" * 30 + "}"),
     "HLO-2", "2**63 - 1"),
    ("a 2,000-deep list as a spec entry (RecursionError in the message)",
     lambda: P(_deep(2000)), "VAL-6", "nested deeper"),
    ("a 2,000-deep tuple as a shape", lambda: shard_shape(_SHARDING, _deep(2000, tuple)),
     "VAL-1", "nested deeper"),
    ("unreduced= an integer", lambda: P(unreduced=5), "VAL-6", "unreduced axes"),
    ("reduced= one bare name", lambda: P(reduced="xy"), "VAL-6", "'xy'"),
    ("unreduced= holds a non-name", lambda: P(unreduced={3}), "VAL-6", "{3}"),
    ("axis_types=5", lambda: AbstractMesh((2,), ("x",), 5), "VAL-5", "axis types"),
    ("devices_per_process=0 (ZeroDivisionError)",
     lambda: DeviceList.of_ids([1, 0], devices_per_process=0), "VAL-5", "devices_per_process"),
    ("a position past the end of a device list (IndexError)",
     lambda: DeviceList.of_ids([1, 0]).id_at(5), "VAL-5", "position 5"),
    ("a string as a position", lambda: DeviceList.of_ids([1, 0]).position_of("x"), "VAL-5",
     "'x'"),
    ("a value outside an iota order", lambda: Iota((2, 4), (1, 0)).position_of(8), "VAL-2",
     "value 8"),
    ("an axis the mesh does not have", lambda: Mesh.iota((2,), ("x",)).axis_size("z"),
     "VAL-3", "'z'"),
    ("2**63 as an axis size (OverflowError)", lambda: AbstractMesh((2**63,), ("x",)), "VAL-1",
     "2**63 - 1"),
    ("a mesh of 2**80 devices (OverflowError in len)",
     lambda: Mesh.iota((2**40, 2**40), ("x", "y")), "VAL-1", "product of mesh axis sizes"),
    ("an integer of 4,301 digits (ValueError in its own repr)",
     lambda: AbstractMesh((10**4300,), ("x",)), "VAL-1", "an integer of"),
    ("the int class as a size", lambda: check_dims((int,)), "VAL-1", "type"),
    ("a subgroup kind that does not exist", lambda: tiled((2, 2), Iota.range(4), (5,)),
     "HLO-1", "subgroup kind"),
    ("a float as a tile assignment", lambda: tiled((2,), 1.5), "VAL-1", "1.5"),
    ("an unvalidated Tiled", lambda: Tiled(5, Iota.range(4)), "VAL-1", "5"),
    ("a negative maximal device", lambda: Maximal(-1), "VAL-1", "-1"),
    ("hlo_text of a deep list", lambda: hlo_text(_deep(2000)), "HLO-2", "nested deeper"),
    ("a device list of 2**20 devices as iota dims (a 10 s hang: read whole first)",
     lambda: Iota(DeviceList(Iota((1 << 20,)))), "VAL-1", "Device(0)"),
    ("a device list of 2**20 devices as reduced axes (a 10 s hang)",
     lambda: P(reduced=DeviceList(Iota((1024, 1024), (1, 0)))), "VAL-6", "reduced axes"),
    ("a subgroup kind whose __index__ raises (ValueError)",
     lambda: tiled((2, 2), Iota.range(4), (_BadIndex(),)), "HLO-1", "subgroup kind"),
    ("a Tiled of tile dims 0", lambda: Tiled((0, 9), (5, 5)), "HLO-1", "at least 1"),
    ("2**61 tiles for 4 entries (MemoryError building 0..n-1)",
     lambda: tiled((2**61,), (1, 0, 3, 2)), "HLO-1", "got 4 entries"),
]


def test_a_device_list_of_a_device_list_stays_symbolic():
    """DeviceList(DeviceList(iota of 2**20)) enumerated a million devices (a 10 s hang)."""
    import time
    started = time.perf_counter()
    inner = DeviceList(Iota((1024, 1024), (1, 0)))
    outer = DeviceList(inner)
    assert time.perf_counter() - started < 1.0
    assert outer == inner and outer.iota == inner.iota
    assert DeviceList(DeviceList.of_ids([3, 1])) == DeviceList.of_ids([3, 1])


@pytest.mark.parametrize("description, build, rule, shows", HOSTILE,
                         ids=[e[0] for e in HOSTILE])
def test_hostile_input_is_refused_by_a_rule(description, build, rule, shows):
    rejection = _rejected(build, rule, shows)
    assert len(rejection.args[0]) < 3000  # a bounded message, whatever the input's size


def test_numpy_integers_are_integers():
    np = pytest.importorskip("numpy")
    mesh = Mesh.iota((np.int64(2), np.int32(4)), ("x", "y"))
    assert mesh.axis_sizes == (2, 4) and all(type(s) is int for s in mesh.axis_sizes)
    assert SingleDeviceSharding(np.int64(3)).device == SingleDeviceSharding(3).device
    _rejected(lambda: Mesh.iota((np.bool_(True),), ("x",)), "VAL-1", "True")


def test_a_hint_holding_braces_is_not_a_template():
    """jit_call crashed with KeyError while wording a correct TREE-1 rejection: the hint,
    built from the user's tree, held braces and was formatted again."""
    mesh = Mesh.iota((2,), ("x",))
    s = NamedSharding(mesh, P())
    call = Call(args=({"a": Arg.uncommitted((4,))},), outputs=Out((4,)),
                options=JitOptions(in_shardings=({"a": s, "b": s},)))
    verdict = jit_call(call)
    assert not verdict.accepted and verdict.rule == "TREE-1"
    assert "['a', 'b']" in verdict.message


def test_a_message_is_bounded_and_never_fails():
    class NoRepr:
        def __repr__(self):
            raise RuntimeError("no repr")
    rejection = _rejected(lambda: P(NoRepr()), "VAL-6", "NoRepr whose repr() raises")
    assert "RuntimeError" in rejection.args[0]
    huge = _rejected(lambda: parse_hlo("{" + "x" * 1_000_000 + "}"), "HLO-2", "characters")
    assert len(huge.args[0]) < 3000


def test_the_prover_checks_its_time_limit_and_rank():
    pytest.importorskip("z3")
    from shardlaw.spec.prove.smt import prove_equivalent, prove_for_every_shape
    for bad, kind in ((float("inf"), ValueError), (float("nan"), ValueError), ("x", TypeError),
                      (-1, ValueError), (0, ValueError), (True, TypeError), (10**30, ValueError)):
        rejection = _rejected(lambda: prove_equivalent(_SHARDING, _SHARDING, (4, 4),
                                                       timeout_s=bad), "SMT-1", "timeout_s")
        assert isinstance(rejection, kind)
    _rejected(lambda: prove_for_every_shape(_SHARDING, _SHARDING, rank=10**9, max_dim=4),
              "SMT-2", "rank at most 256")
    _rejected(lambda: prove_for_every_shape(_SHARDING, _SHARDING, rank=2**64, max_dim=4),
              "VAL-1", "2**63 - 1")


def test_the_prover_keeps_to_its_time_limit_while_building_tables():
    """An explicit reversed list of 2**20 devices with timeout_s=5 took 56 s (the tables
    were built outside the limit); now the whole call answers within timeout_s + 1 s. The
    solver's tables do not fit in the limit; the direct pass (the default for an explicit
    order, issue 25) answers within it. The slack is 5 s: on the shared 2-core machine at
    load 12 to 19 a call at limit 0.5 took 1.7 to 2.4 s (session 20), far from the 56 s
    this pins."""
    pytest.importorskip("z3")
    import time
    from shardlaw.spec.prove.smt import prove_equivalent
    n = 2**20
    reversed_order = Mesh((n,), ("x",), DeviceList.of_ids(range(n - 1, -1, -1)))
    a = NamedSharding(reversed_order, P("x"))
    b = NamedSharding(Mesh.iota((n,), ("x",)), P("x"))
    for limit in (0.5, 3.0):
        started = time.perf_counter()
        answer = prove_equivalent(a, b, (n,), timeout_s=limit, method="solver")
        assert time.perf_counter() - started < limit + 5.0
        assert answer.equivalent is None and "time limit" in answer.reason
        started = time.perf_counter()
        answer = prove_equivalent(a, b, (n,), timeout_s=limit)
        assert time.perf_counter() - started < limit + 5.0
        assert answer.equivalent is False or "time limit" in answer.reason


# Classes the campaign found whose root is in a module the value layer does not own; each
# is pinned here, strictly expected to fail until its owner fixes the root (then the
# marker goes). The reasons name the module and what to check there.
_ELSEWHERE = [
    ("hlo_equal of a non-HLO value (AttributeError)",
     lambda: __import__("shardlaw.spec", fromlist=["hlo_equal"]).hlo_equal(_SHARDING, 3), None),
    ("addressable_device_ids of a non-sharding (AttributeError)",
     lambda: __import__("shardlaw.spec", fromlist=["x"]).addressable_device_ids(3, 0), None),
    ("placement_equivalent of a non-sharding (AttributeError)",
     lambda: __import__("shardlaw.spec", fromlist=["x"]).placement_equivalent(3, _SHARDING, (2,)),
     None),
    ("jit_call of a non-Call (AttributeError)", lambda: jit_call(3), None),
    ("replication_factor with ndim 10**20 (OverflowError)",
     lambda: __import__("shardlaw.spec", fromlist=["x"]).replication_factor(_SHARDING, 10**20),
     None),
    ("load_vector of 5,000-deep JSON (RecursionError)",
     lambda: __import__("shardlaw.spec", fromlist=["x"]).load_vector("[" * 5000 + "]" * 5000),
     None),
    ("explain_cache of an integer (TypeError)",
     lambda: __import__("shardlaw.spec", fromlist=["x"]).explain_cache(7), None),
]


@pytest.mark.parametrize("description, build, root", _ELSEWHERE,
                         ids=[e[0] for e in _ELSEWHERE])
def test_hostile_input_rooted_elsewhere(description, build, root, request):
    if root is not None:  # None: fixed at its root (its rule: tests/test_bad_input_roots.py)
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"open, root in {root}"))
    try:
        build()
    except Rejection:
        return
    except (RecursionError, Exception) as crash:
        raise AssertionError(f"crashed with {type(crash).__name__}") from crash
    raise AssertionError("accepted")
