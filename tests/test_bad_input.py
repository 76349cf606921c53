"""Invalid input is rejected by a rule, with the rule's ID and the offending value, never a crash.

A rejection is a :class:`~shardlaw.spec.rules.Rejection`; its message (``args[0]``, which is
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
    AbstractMesh, Format, Layout, Mesh, NamedSharding, P, Rejection, parse_hlo, shard_shape,
)
from shardlaw.spec.rules import explain

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
