"""COLL-9 over a value a loop's body reads unchanged (session 21's second device deep run,
issue 33): the body's reshard of it that only moves its axes between dimensions (an
all-to-all) is hoisted out of the loop and made once with the other reshards of that value
to that split in the computation around it (another such loop's, a constraint's, a loop's
initial carry); a gather stays apart. The spec counted the body's all-to-all apart: two of
2,048 bytes where XLA makes one. Held to the compiled module on 8 CPU devices."""

from __future__ import annotations

import pytest

from shardlaw.properties.collectives_harness import Recipe, compare_collectives

A2A_Y = ("all-to-all", ((0, 1), (2, 3), (4, 5), (6, 7)), 2048)
CONSTRAIN = ("fori constrain", 2, (None, None, "y"))   # wsc(sin(c) + b, P(None, None, 'y'))
CONST = ("fori const", 2, None)                        # sin(c) * e
INPUTS = (((16, 16, 4), (None, None, None)), ((16, 16, 4), ("y", None, None)),
          ((16, 16, 4), (None, None, "y")))


def _recipe(steps, inputs=INPUTS, outputs=None):
    outputs = outputs or tuple(k for k, (kind, _, _) in enumerate(steps)
                               if kind in ("loop", "constrain"))
    return Recipe(mesh=(4, 2), reversed_devices=False, inputs=inputs, steps=steps,
                  outputs=outputs, devices=(), out_shardings=(), axis_types="")


DEEP_RUN = Recipe(mesh=(4, 2), reversed_devices=False, inputs=(
    ((16, 16, 4), (("x", "y"), None, None)), ((16, 4, 16), (None, "y", None)),
    ((16, 16, 4), (None, None, None)), ((16, 16, 4), ("y", None, None)),
    ((16, 16, 4), (None, None, "y"))), steps=(
    ("input", (), 0), ("convert", (0,), None), ("reduce", (0,), ("sum", 2)),
    ("input", (), 1), ("dot", (0, 3), None), ("transpose", (1,), (2, 0, 1)),
    ("transpose", (0,), (1, 0, 2)), ("unary", (0,), "neg"), ("input", (), 2),
    ("binary", (0, 8), "mul"), ("input", (), 3), ("loop", (8, 10), CONSTRAIN),
    ("input", (), 4), ("loop", (10, 12), CONST), ("constrain", (0,), (("x", "y"), None, None))),
    outputs=(11, 13, 14), devices=(), out_shardings=(), axis_types="")

NEIGHBOURS = {
    # b read by the first loop's body, the second loop's carry starting at b
    "minimised": (("input", (), 0), ("input", (), 1), ("loop", (0, 1), CONSTRAIN),
                  ("input", (), 2), ("loop", (1, 3), CONST)),
    "reversed": (("input", (), 0), ("input", (), 1), ("input", (), 2),
                 ("loop", (1, 2), CONST), ("loop", (0, 1), CONSTRAIN)),
    "two loops reading b": (("input", (), 0), ("input", (), 1), ("loop", (0, 1), CONSTRAIN),
                            ("loop", (2, 1), CONSTRAIN)),
    "a loop and a constraint of b": (("input", (), 0), ("input", (), 1),
                                     ("loop", (0, 1), CONSTRAIN),
                                     ("constrain", (1,), (None, None, "y"))),
}


def test_the_deep_runs_recipe_agrees():
    """The drawn recipe: one all-to-all of b over 'y', spec and compiled module alike."""
    found = compare_collectives(DEEP_RUN)
    assert found.disagreements == [] and found.why is None
    assert found.real == (A2A_Y,)


@pytest.mark.parametrize("name", sorted(NEIGHBOURS))
def test_a_hoisted_reshard_is_made_once_with_the_values_other_reshards(name):
    """Each neighbour holds one all-to-all of b (the spec counted two before)."""
    found = compare_collectives(_recipe(NEIGHBOURS[name]))
    assert found.why is None
    assert found.real == found.predicted == (A2A_Y,)


@pytest.mark.parametrize("steps", [
    (("input", (), 0), ("input", (), 1), ("loop", (0, 1), CONSTRAIN)),
    (("input", (), 1), ("input", (), 2), ("loop", (0, 1), CONST)),
])
def test_one_loop_alone_stays_predicted(steps):
    """Either loop alone: its one all-to-all of b, predicted as before."""
    found = compare_collectives(_recipe(steps))
    assert found.why is None
    assert found.real == found.predicted == (A2A_Y,)


def test_a_loop_beside_a_move_of_another_value_keeps_both():
    """The second loop's carry starting at b resharded to another split (P(None, 'y',
    None), from ``e`` on it): the hoisted all-to-all and the carry's differ, both made."""
    inputs = INPUTS[:2] + (((16, 16, 4), (None, "y", None)),)
    found = compare_collectives(_recipe(NEIGHBOURS["minimised"], inputs))
    assert found.why is None and found.disagreements == []
    assert len(found.real) == 2


def test_a_hoisted_gather_stays_apart_from_the_values_other_gather():
    """``b`` on ``P(('x', 'y'))`` (mesh ``(2, 4)``) read by a loop constrained to ``P()``,
    beside ``wsc(b, P())``: XLA makes two all-gathers of 4,096 bytes (the body's gather is
    hoisted apart), and so does the spec."""
    gather = ("all-gather", ((0, 1, 2, 3, 4, 5, 6, 7),), 4096)
    inputs = (((16, 16, 4), (None, None, None)), ((16, 16, 4), (("x", "y"), None, None)))
    steps = (("input", (), 0), ("input", (), 1), ("loop", (0, 1), (
        "fori constrain", 2, (None, None, None))), ("constrain", (1,), (None, None, None)))
    recipe = Recipe(mesh=(2, 4), reversed_devices=False, inputs=inputs, steps=steps,
                    outputs=(2, 3), devices=(), out_shardings=(), axis_types="")
    found = compare_collectives(recipe)
    assert found.why is None
    assert found.real == found.predicted == (gather, gather)
