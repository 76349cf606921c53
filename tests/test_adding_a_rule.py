"""Adding a rule touches the places docs/adding-a-rule.rst names, and nothing else.

A throwaway rule is registered in an existing family; its family, title and stage come from
the rule index, its docs entry is generated, and the spec-engine link asks for its engine
twin exactly when its stage is one of jit's.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

import shardlaw.spec as S
from shardlaw import rule_index
from shardlaw.spec.core.rules import rule

ROOT = Path(__file__).resolve().parents[1]


def _docs_generator():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        return importlib.import_module("shardlaw_rules")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))


@pytest.fixture
def throwaway():
    added: list[str] = []

    def add(rule_id: str, statement: str):
        def decide(x: int) -> int:
            return x
        decide.__doc__ = f"{statement}\n\n>>> decide(1)\n1\n"
        decide.__name__ = decide.__qualname__ = f"decide_{rule_id.replace('-', '_').lower()}"
        rule(rule_id, mirrors="nothing.at_all")(decide)
        added.append(rule_id)
        return S.RULES[rule_id]

    yield add
    for rule_id in added:
        del S.RULES[rule_id]


def test_a_rule_of_an_existing_family_needs_no_line_in_the_index(throwaway):
    new = throwaway("DIV-99", "A made-up rule of dividing dimensions.")
    assert (new.family, new.family_title, new.stage) == ("DIV", "Dividing dimensions", None)
    assert "DIV-99" not in rule_index.STAGE_EXCEPTIONS
    docs = _docs_generator()
    entry = docs.rule_entry(new, {})
    assert "DIV-99" in entry and "A made-up rule of dividing dimensions." in entry
    assert ("Placement", ["DIV"]) in docs.pipeline_order(["DIV"])


def test_a_jit_stage_rule_is_owed_its_engine_twin_and_nothing_else(throwaway):
    new = throwaway("FIT-99", "A made-up rule of fitting arguments.")
    assert new.stage == "trace"
    link = importlib.import_module("test_spec_engine_link")
    assert "FIT-99" in link._jit_rules()
    with pytest.raises(AssertionError, match="FIT-99 .* has no engine counterpart"):
        link.test_every_jit_rule_has_an_engine_counterpart_or_is_left_to_jax("FIT-99")


def test_the_throwaway_rules_leave_no_trace():
    assert not {"DIV-99", "FIT-99"} & set(S.RULES)


def test_a_rule_of_an_undeclared_family_is_refused():
    with pytest.raises(ValueError, match="'ZZZ' of rule ZZZ-1 is not declared in "
                                         "shardlaw.rule_index.FAMILIES"):
        rule("ZZZ-1", mirrors="nothing")(lambda: None)
    assert "ZZZ-1" not in S.RULES


def test_every_family_and_exception_of_the_index_is_used():
    importlib.import_module("shardlaw.spec.prove.smt")   # its SMT rules load on first use
    families = {r.family for r in S.RULES.values()} | {"ENG"}
    assert set(rule_index.FAMILIES) == families
    engine_own = {r for r in rule_index.STAGE_EXCEPTIONS if r.startswith("ENG-")}
    assert set(rule_index.STAGE_EXCEPTIONS) - engine_own <= set(S.RULES)
    assert set(rule_index.ENGINE_EXCEPTIONS) <= set(S.RULES)
    # An exception that restates its family's stage is no exception.
    for rule_id, stage in rule_index.STAGE_EXCEPTIONS.items():
        assert stage != rule_index.FAMILIES[rule_index.family_id(rule_id)].stage, rule_id


def test_the_page_lists_at_most_three_places():
    text = (ROOT / "docs" / "adding-a-rule.rst").read_text()
    section = text.split("The places a new rule touches", 1)[1].split("\nWhat follows", 1)[0]
    places = re.findall(r"^[0-9]+\. \*\*", section, re.M)
    assert 1 <= len(places) <= 3, places
