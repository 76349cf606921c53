"""What the documentation needs from the rule registry, and that no rule goes unchecked.

The rule pages are generated from :data:`shardlaw.spec.RULES`: every rule must have a
statement, a note of the JAX function it mirrors, and at least one example (which the
doctest build runs). :func:`test_every_rule_is_checked_by_a_property` imports the property
modules itself, so it holds whatever order the test files run in.
"""

import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import pytest

from shardlaw.spec import RULES

ROOT = Path(__file__).resolve().parents[1]


def _doc(rule):
    function = getattr(rule.function, "__wrapped__", rule.function)
    return inspect.getdoc(function) or ""


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_has_statement_mirrors_and_example(rule_id):
    rule = RULES[rule_id]
    assert rule.statement.strip(), f"{rule_id} has no statement"
    assert rule.statement.rstrip().endswith((".", ")")), f"{rule_id}: {rule.statement!r}"
    assert rule.mirrors.strip(), f"{rule_id} does not say which JAX function it mirrors"
    assert ">>>" in _doc(rule), f"{rule_id} ({rule.function.__qualname__}) has no example"


def _generator():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        return importlib.import_module("shardlaw_rules")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))


def test_rule_pages_show_every_rule_with_executed_examples():
    pytest.importorskip("sphinx")
    generator = _generator()
    families = {}
    for rule in RULES.values():
        families.setdefault(rule.family, []).append(rule)
    for family, rules in families.items():
        page = generator.family_page(family, rules, {})
        for rule in rules:
            assert f".. _rule-{rule.id}:" in page
            assert f".. doctest:: {rule.id}" in page
            assert rule.mirrors in page


# The modules that register properties with shardlaw.properties.registry.checks.
PROPERTY_MODULES = ["shardlaw.properties.laws", "shardlaw.properties.differential",
                    "test_laws", "test_differential"]


def _import_property_modules():
    """Import every module that may register properties; return those that are absent."""
    import shardlaw.properties

    names = list(PROPERTY_MODULES)
    names += [m.name for m in pkgutil.iter_modules(shardlaw.properties.__path__,
                                                   "shardlaw.properties.")]
    names += sorted(p.stem for p in (ROOT / "tests").glob("test_*.py"))
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    absent = []
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            absent.append(name)
    return absent


def test_every_rule_is_checked_by_a_property():
    absent = _import_property_modules()
    from shardlaw.properties.registry import CHECKS

    unchecked = sorted(rule_id for rule_id in RULES if not CHECKS.get(rule_id))
    assert not unchecked, (f"no property checks {', '.join(unchecked)}"
                           + (f" (modules not found: {', '.join(absent)})" if absent else ""))


def test_each_transformation_rule_is_met_per_equation_or_listed_as_program_only():
    """A rule of AD, BAT, SMAP or WSC is held to JAX either by its family's per-equation suite
    (properties/suites/) or by the program properties, and then listed in PROGRAM_ONLY with
    what only a whole program meets (BAT-10 is met both ways); none falls between the two."""
    from shardlaw.properties.registry import PROGRAM_ONLY
    from shardlaw.properties.suites import autodiff, batching, constraint, shardmap

    suites = {"AD": autodiff.AD_RULES, "BAT": batching.BAT_RULES, "SMAP": shardmap.SMAP_RULES,
              "WSC": constraint.WSC_RULES}
    assert set(PROGRAM_ONLY) <= set(RULES)
    for family, per_equation in suites.items():
        rules = {r for r in RULES if r.startswith(family + "-")}
        only = {r for r in PROGRAM_ONLY if r.startswith(family + "-")}
        assert set(per_equation) & only <= {"BAT-10"}, family
        assert rules - set(per_equation) - only == set(), (
            f"{family} rules neither in its suite nor in PROGRAM_ONLY: "
            f"{sorted(rules - set(per_equation) - only)}")


def test_checks_name_only_registered_rules():
    _import_property_modules()
    from shardlaw.properties.registry import CHECKS

    unknown = sorted(set(CHECKS) - set(RULES))
    assert not unknown, f"properties claim to check rules that do not exist: {unknown}"


def test_every_rejection_cites_a_registered_rule():
    """A rejection says ``[RULE-ID]``; that ID must have a rule (and so a docs entry)."""
    import shardlaw.spec
    from shardlaw.spec.core.rules import Failure

    cited: dict[str, list[str]] = {}
    # Every module of every layer (the bridge and the prover too: JAX and z3 are installed).
    for info in pkgutil.walk_packages(shardlaw.spec.__path__, "shardlaw.spec."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            # (a base that sets no rule of its own, as Failure itself, cites none)
            if (inspect.isclass(value) and issubclass(value, Failure) and value.rule != Failure.rule
                    and value.__module__ == module.__name__):
                cited.setdefault(value.rule, []).append(f"{info.name}.{name}")
    # The walk reaches the failures (one that finds none would pass).
    assert sum(len(where) for where in cited.values()) > 150, sum(map(len, cited.values()))
    uncited = {rule_id: where for rule_id, where in sorted(cited.items()) if rule_id not in RULES}
    assert not uncited, f"failures cite rules that are not registered: {uncited}"
