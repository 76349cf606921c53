"""The primitive table (``spec/program/primitives.py``): every primitive and kind of equation
has an entry, every entry a rule for every rewrite (or a declared, reasoned absence), and the
rewrites find their rules through it."""

from __future__ import annotations

import dataclasses

import pytest

import shardlaw.spec.program  # noqa: F401 - every rewrite registers its rules on import
from shardlaw.spec.core.rules import RULES
from shardlaw.spec.program import description, primitives
from shardlaw.spec.program.primitives import (
    REWRITES, TABLE, Absent, Entry, Factors, Kind, NotPropagated, entry_of, entry_of_name,
)



def _entries() -> list[Entry]:
    """The table's entries as they are now (a test may add a throwaway one)."""
    return list(TABLE.values())


def _needs(rules: primitives.Rules, entry: Entry) -> bool:
    """Whether ``rules`` must hold the rule ``entry`` names in its slot."""
    if rules.needed == "with bodies":
        return bool(entry.bodies)
    if rules.needed == "without bodies":
        return not entry.bodies
    return True


@pytest.mark.parametrize("rules", REWRITES, ids=lambda r: r.rewrite)
def test_every_entry_names_a_rule_of_every_rewrite_or_says_why_not(rules):
    for entry in _entries():
        named = getattr(entry, rules.slot)
        if not _needs(rules, entry) or named is None:
            continue
        if isinstance(named, Absent):
            assert named.why.strip(), f"{entry.name}: an absence must give its reason"
            continue
        assert named in rules.rules, (
            f"{entry.name}'s {rules.slot} slot names {named!r}, which {rules.rewrite} has "
            f"no rule for (it has {sorted(rules.rules)})")


@pytest.mark.parametrize("rules", REWRITES, ids=lambda r: r.rewrite)
def test_every_rule_a_rewrite_registers_serves_an_entry(rules):
    used = {getattr(e, rules.slot) for e in _entries() if _needs(rules, e)}
    used.add(getattr(primitives.unknown_entry("made_up"), rules.slot))
    assert set(rules.rules) <= used, sorted(set(rules.rules) - used)


def test_every_kind_of_equation_has_its_entry():
    kinds = [c for c in vars(description).values() if isinstance(c, type)
             and issubclass(c, description.Equation) and c is not description.Equation]
    for kind in kinds:
        if kind is description.Opaque:
            continue
        entry = TABLE[kind.kind]
        assert entry.equation == kind.__name__, (kind, entry)
    assert {e.name for e in _entries() if e.equation != "Opaque"} == {
        k.kind for k in kinds if k is not description.Opaque}


def test_every_slot_is_filled_or_declared_absent_in_every_entry():
    for entry in _entries():
        for slot in ("batching", "jvp", "transpose"):
            assert getattr(entry, slot) is not None, (entry.name, slot)
        assert isinstance(entry.kind, Kind)
        assert isinstance(entry.sharding, (Factors, NotPropagated)) or callable(entry.sharding)


def test_the_checks_an_entry_names_are_rules():
    for entry in _entries():
        for rule_id in entry.checks:
            assert rule_id in RULES, (entry.name, rule_id)


def test_a_primitive_without_an_entry_is_opaque_and_says_what_is_not_known():
    eq = description.Opaque((0,), (description.Value.typed((4,)),), primitive="my_op")
    entry = entry_of(eq)
    assert entry.kind is Kind.OPAQUE
    assert isinstance(entry.batching, Absent) and "my_op" in entry.batching.why
    assert isinstance(entry.sharding, NotPropagated) and "my_op" in entry.sharding.why
    assert (entry.jvp, entry.transpose) == ("opaque", "opaque")
    assert entry_of_name("my_op") is entry


def test_an_entry_refuses_what_is_not_a_slot_value():
    with pytest.raises(ValueError, match="batching slot of bad"):
        Entry("bad", Kind.ELEMENTWISE, batching=3)
    with pytest.raises(ValueError, match="sharding slot of bad"):
        Entry("bad", Kind.ELEMENTWISE, sharding="pass")
    with pytest.raises(ValueError, match="has an entry 'sin' already"):
        primitives.declare(dataclasses.replace(TABLE["sin"]))


def test_an_opaque_equation_may_not_name_a_kind_of_equation():
    assert description.DESCRIBED_PRIMITIVES == (
        "jit", "pjit", "sharding_constraint", "device_put", "shard_map", "reshard", "scan",
        "while", "cond", "remat2", "custom_jvp_call", "custom_vjp_call", "custom_lin")
