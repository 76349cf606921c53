"""Which properties check which rules.

A property (a Hypothesis test function) names the rule IDs it exercises with
:func:`checks`; the documentation lists, for every rule, the properties that check it, and
a test makes sure no rule goes unchecked.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["checks", "CHECKS", "properties_of"]

# rule ID -> qualified names of the properties that exercise it
CHECKS: dict[str, list[str]] = {}


def checks(*rule_ids: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a property as exercising ``rule_ids`` (both its accepting and rejecting side)."""

    def mark(prop: Callable[..., Any]) -> Callable[..., Any]:
        name = f"{prop.__module__}.{prop.__qualname__}"
        for rule_id in rule_ids:
            names = CHECKS.setdefault(rule_id, [])
            if name not in names:
                names.append(name)
        prop.rule_ids = tuple(rule_ids)  # type: ignore[attr-defined]
        return prop

    return mark


def properties_of(rule_id: str) -> list[str]:
    return list(CHECKS.get(rule_id, []))
