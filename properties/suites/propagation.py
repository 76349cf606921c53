"""Where the compiler decides, against real XLA: the results the partitioner places and the
collectives it inserts (issue 33).

``test_results_are_where_the_executable_returns_them`` holds the spec's predicted result
shardings (PROP-1 to PROP-7) to the compiled executable's on
:mod:`~shardlaw.properties.propagation_harness`'s drawn programs — over Auto, Explicit and
mixed meshes, and over the same mesh made abstract;
``test_collectives_are_those_of_the_compiled_module`` holds ``verdict.collectives``
(COLL-1 to COLL-10) to the collectives of the compiled CPU HLO, kind, replica groups,
bytes per device and runs (inside loops), on
:mod:`~shardlaw.properties.collectives_harness`'s programs (the same draws with steps that
communicate appended, loops and conds among them). A prediction the spec leaves open (a result
UNSPECIFIED, an incomplete list of collectives) is an abstention with its reason, never a
guess.

The ``propagation`` suite of ``shardlaw campaign``; ``tests/test_propagation.py`` and
``tests/test_collectives.py`` run bounded versions in the project's own ``pytest``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from shardlaw.properties.collectives_harness import communicating_recipes, compare_collectives
from shardlaw.properties.propagation_harness import compare_recipe, recipes
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples

__all__ = ["test_results_are_where_the_executable_returns_them",
           "test_collectives_are_those_of_the_compiled_module"]

_QUIET = list(HealthCheck)


@checks("PROP-1", "PROP-2", "PROP-3", "PROP-4", "PROP-5", "PROP-6", "PROP-7")
@settings(max_examples=examples(100), deadline=None, suppress_health_check=_QUIET)
@given(recipes(max_steps=7, explicit=True))
def test_results_are_where_the_executable_returns_them(recipe):
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements, (recipe, outcome.disagreements)


@checks("COLL-1", "COLL-2", "COLL-3", "COLL-4", "COLL-5", "COLL-6", "COLL-7", "COLL-8",
        "COLL-9", "COLL-10")
@settings(max_examples=examples(100), deadline=None, suppress_health_check=_QUIET)
@given(communicating_recipes(max_steps=5))
def test_collectives_are_those_of_the_compiled_module(recipe):
    outcome = compare_collectives(recipe)
    assert not outcome.disagreements, (recipe, outcome.disagreements)
