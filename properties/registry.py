"""Which properties check which rules.

A property (a Hypothesis test function) names the rule IDs it exercises with
:func:`checks`; the documentation lists, for every rule, the properties that check it, and
a test makes sure no rule goes unchecked.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["checks", "CHECKS", "properties_of", "PROGRAM_ONLY"]

# The rules of the transformation families (AD, BAT, SMAP, WSC) that only whole programs
# meet (explain_program walks the equations they decide; no per-equation question of
# spec/transforms/ reaches them): held to JAX by the program properties
# (tests/test_program_*.py), not by the per-equation suites of properties/suites/.
PROGRAM_ONLY = {
    "AD-9": "a result typed over an all-Explicit mesh against the program's device count",
    "AD-10": "the residuals a shard_map equation's linearization stores",
    "AD-11": "the specs of a transposed shard_map equation",
    "AD-12": "the transposes of the collectives inside a shard_map body",
    "AD-13": "the types of the cotangents equations hand back over Explicit axes",
    "AD-14": "two cotangents of different types over Explicit axes summed at one value",
    "AD-15": "a unary primitive a transpose applies to a cotangent typed unreduced",
    "AD-16": "a product's transpose reshaped to an operand's cotangent type unreduced",
    "AD-17": "a tangent or cotangent passed to linearize's or vjp's function, typed",
    "AD-18": "a product with a literal that a transpose applies to an unreduced cotangent",
    "AD-19": "grad's inputs among argnums, typed as jit traces the program's arguments",
    "AD-20": "a callback in a differentiated program's body that takes a tangent",
    "AD-21": "the equations of a remat's body its policy saves",
    "AD-22": "what a differentiated remat stores and recomputes under its policy",
    "BAT-10": "a program's value typed with reduced axes that vmap maps or broadcasts",
    "BAT-11": "a pure_callback vmap batches whose vmap_method JAX does not batch",
    "BAT-12": "an ordered io_callback vmap batches",
    "BAT-13": "a generic reduce_window vmap batches with a batched initial value",
    "SMAP-20": "the varying axes of a collective inside a shard_map body",
    "SMAP-21": "the shape of a collective's result inside a shard_map body",
    "SMAP-22": "ppermute's pairs, checked when a shard_map body is lowered",
    "SMAP-23": "a psum_scatter's operand typed split over Explicit axes, when lowered",
    "SMAP-24": "a collective's result keeping its operand's split over automatic Explicit axes",
    "SMAP-25": "an untiled all_gather's operand typed split over Explicit axes, when lowered",
    "SMAP-26": "a collective over axis index groups inside a shard_map body",
    "SMAP-27": "an all_gather to reduced values inside a shard_map body",
    "SMAP-28": "a constraint or reshard inside a shard_map body over the user's mesh",
    "SMAP-29": "a primitive inside a shard_map body taking a value typed over another mesh",
    "SMAP-30": "a shard_map nested in a body given another mesh than the body's",
    "SMAP-31": "a collective or cast inside a shard_map body of a value typed reduced",
    "SMAP-32": "an elementwise operation inside a shard_map body of values typed reduced",
    "WSC-10": "a constraint's operand's split over Explicit axes, read from its traced type",
    "WSC-11": "a constraint on a value typed with reduced axes, lowered in a jit's body",
    "WSC-12": "a bound constraint's spec merged with its operand's split, when lowered",
}


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
