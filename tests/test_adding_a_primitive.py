"""Adding a primitive touches the places docs/adding-a-primitive.rst names, and nothing else.

A throwaway primitive gets one entry in the primitive table; every rewrite then takes it by
its family's rules — typed, batched, differentiated, transposed and checked inside a
shard_map's body — and the table test holds its entry. A throwaway entry naming a rule of a
new family is held to register that rule.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from shardlaw.spec import Mesh, NamedSharding, P, Rejection, explain_program
from shardlaw.spec.program import grad_program, jvp_program, vmap_program
from shardlaw.spec.program import primitives
from shardlaw.spec.program.description import Opaque, Program, ShardMap, Value
from shardlaw.spec.program.primitives import BATCHING, TABLE, Entry, Kind, entry_of_name

ROOT = Path(__file__).resolve().parents[1]
X = Value.numpy((8,))
NAME = "throwaway_erf"


@pytest.fixture
def throwaway():
    added: list[str] = []
    rules: list[tuple[primitives.Rules, str]] = []

    def add(entry: Entry, register: tuple = ()) -> Entry:
        primitives.declare(entry)
        added.append(entry.name)
        for where, name, function in register:
            where.register(name)(function)
            rules.append((where, name))
        return entry

    yield add
    for name in added:
        del TABLE[name]
    for where, name in rules:
        del where.rules[name]


def _program() -> Program:
    return Program((X,), (Opaque((0,), (X.type,), primitive=NAME),), (1,))


def _loss() -> Program:
    scalar = Value.typed(())
    return Program((X,), (Opaque((0,), (X.type,), primitive=NAME),
                          Opaque((1,), (scalar,), primitive="reduce_sum")), (2,))


def _primitives(program: Program) -> list[str]:
    """Every primitive of a program, bodies included, in order."""
    out = []
    for eq in program.equations:
        if eq.kind == "opaque":
            out.append(eq.primitive)
        if eq.body is not None:
            out += _primitives(eq.body)
    return out


def test_without_an_entry_a_primitive_is_opaque_to_every_rewrite():
    assert NAME not in TABLE and entry_of_name(NAME).kind is Kind.OPAQUE
    verdict = explain_program(_program())   # nothing of its own is checked: the verdict says so
    assert verdict.accepted and verdict.opaque == (("body[0]", NAME),)
    assert f"opaque body[0]: {NAME} (not in the primitive table" in str(verdict)
    with pytest.raises(Rejection, match=f"the primitive '{NAME}' at body\\[0\\] under vmap"):
        vmap_program(_program(), axis_size=4)
    assert f"linearized_{NAME}" in _primitives(jvp_program(_program()))
    assert f"transposed_linearized_{NAME}" in _primitives(grad_program(_loss()))


def test_an_elementwise_primitive_needs_its_entry_and_nothing_else(throwaway):
    throwaway(Entry(NAME, Kind.ELEMENTWISE, batching="keeps_axis", jvp="linear",
                    transpose="same", in_shard_map="elementwise"))
    assert explain_program(_program()).opaque == ()
    batched = vmap_program(_program(), axis_size=4)
    assert explain_program(batched).accepted
    (eq,) = [e for e in batched.equations[0].body.equations if e.kind == "opaque"] \
        if batched.equations and batched.equations[0].kind == "jit" else \
        [e for e in batched.equations if e.kind == "opaque"]
    assert (eq.primitive, eq.results[0].shape) == (NAME, (4, 8))
    # linear: its tangent is the primitive applied to the tangent, its transpose likewise
    assert _primitives(jvp_program(_program())).count(NAME) == 2
    grad = _primitives(grad_program(_loss()))
    assert f"transposed_{NAME}" not in grad and grad.count(NAME) == 2
    # inside a shard_map's body its result's split is held to its operands' (PROG-0)
    mesh = Mesh.iota((2, 4), ("x", "y"))
    shard = Value.typed((4,), mesh=mesh.abstract, varying={"x"})
    body = Program((shard,), (Opaque((0,), (shard,), primitive=NAME),), (1,))
    mapped = Program((Value.placed((8,), NamedSharding(mesh, P("x"))),), (ShardMap(
        (0,), (Value.typed((8,), mesh=mesh.abstract),), body=body, mesh=mesh,
        in_specs=(P("x"),), out_specs=(P("x"),), manual_axes=frozenset({"x", "y"})),), (1,))
    assert explain_program(mapped).accepted
    table = importlib.import_module("test_primitive_table")
    for rules in primitives.REWRITES:
        table.test_every_entry_names_a_rule_of_every_rewrite_or_says_why_not(rules)


def test_an_entry_of_a_new_family_is_held_to_its_rule(throwaway):
    throwaway(Entry(NAME, Kind.CONTROL_FLOW, batching="throwaway_family", jvp="opaque",
                    transpose="opaque"))
    table = importlib.import_module("test_primitive_table")
    with pytest.raises(AssertionError, match="throwaway_family"):
        table.test_every_entry_names_a_rule_of_every_rewrite_or_says_why_not(BATCHING)


def test_a_rule_of_a_new_family_is_found_through_the_entry(throwaway):
    calls = []

    def batch(rw, eq, numbers, dims, path):
        calls.append(path)
        rw.add(eq.renumbered(numbers, tuple(Value.typed((4, 8)) for _ in eq.results)),
               (0,) * len(eq.results))

    throwaway(Entry(NAME, Kind.CONTROL_FLOW, batching="throwaway_family", jvp="opaque",
                    transpose="opaque"), register=((BATCHING, "throwaway_family", batch),))
    vmap_program(_program(), axis_size=4)
    assert calls == ["body[0]"]


def test_the_throwaways_leave_no_trace():
    assert NAME not in TABLE and "throwaway_family" not in BATCHING.rules


def test_the_page_lists_at_most_three_places():
    text = (ROOT / "docs" / "adding-a-primitive.rst").read_text()
    section = text.split("The places a new primitive touches", 1)[1].split(
        "\nWhat follows", 1)[0]
    places = re.findall(r"^[0-9]+\. \*\*", section, re.M)
    assert 1 <= len(places) <= 3, places
    assert "adding-a-primitive" in (ROOT / "docs" / "index.rst").read_text()
