"""A concatenate whose operands split one dimension over different mesh axes (session 21's
device deep run, issue 33): Shardy computes it where one operand stands and moves the other
by an all-to-all and a collective-permute, where the spec gathered both; which operand's
split it takes is not read yet, so the step is left open (COLL-1,
``collectives_plans.concatenated_apart``). Held to the compiled module on 8 CPU devices:
the recipe is open and agrees, its neighbours stay predicted."""

from __future__ import annotations

import pytest

from shardlaw.properties.collectives_harness import (
    Recipe, compare_collectives, compiled_collectives,
)

YX, XY = ("y", "x", None), ("x", "y", None)


def _recipe(a, b, step=("concat", (0, 1), 2), mesh=(2, 4), reduced=True, shape=(4, 4, 4)):
    steps = (("input", (), 0), ("input", (), 1), step)
    steps += (("reduce", (0,), ("sum", 1)),) if reduced else ()
    return Recipe(mesh=mesh, reversed_devices=False, inputs=((shape, a), (shape, b)),
                  steps=steps, outputs=(3, 2) if reduced else (2,), devices=(),
                  out_shardings=(), axis_types="")


def test_the_deep_runs_recipe_is_left_open_by_the_concatenate_rule():
    """The s21 recipe: ``concatenate([a, b], 2)`` of ``P('y', 'x')`` and ``P('x', 'y')``
    and ``a.sum(1)``, both returned: open, naming the concatenate, no disagreement."""
    outcome = compare_collectives(_recipe(YX, XY))
    assert not outcome.disagreements
    assert outcome.why is not None and "COLL-1" in outcome.why
    assert "concatenate" in outcome.why


def test_xla_moves_one_operand_to_the_others_split():
    """Why it is open: XLA moves ``a`` by an all-to-all and a collective-permute of 32
    bytes each (its f32[1, 1, 4] pieces) and gathers the result, not both operands."""
    real = compiled_collectives(_recipe(YX, XY, reduced=False))
    kinds = sorted((kind, size) for kind, _, size in real)
    assert ("all-to-all", 32) in kinds and ("collective-permute", 32) in kinds
    assert ("all-gather", 512) in kinds


@pytest.mark.parametrize("a, b, step", [
    (YX, YX, ("concat", (0, 1), 2)),                  # split alike: computed there
    (YX, XY, ("binary", (0, 1), "add")),              # an elementwise operation: gathered
    (("x", None, None), (None, None, None), ("concat", (0, 1), 2)),   # one split, one not
])
def test_neighbours_stay_predicted(a, b, step):
    """Neighbours the abstention leaves alone: predicted whole and agreeing."""
    outcome = compare_collectives(_recipe(a, b, step, reduced=False))
    assert outcome.why is None, outcome.why
    assert not outcome.disagreements, outcome.disagreements
