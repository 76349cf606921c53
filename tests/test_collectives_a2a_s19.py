"""A loop's constant against its carry (issue 33, session 19's a2a): where the two
conflict over a mesh axis, XLA keeps the constant's split (the carry moves) when the loop
alone reads the constant, and the carry's (the constant moves) when the constant is read
outside the loop too. The spec describes the first and leaves the second open (PROP-4).
Each case compiled by JAX 0.10.2 on 8 CPU devices."""

from __future__ import annotations

import jax
import pytest

from shardlaw.properties.collectives_harness import Recipe, compare_collectives, \
    loop_function_of
from shardlaw.properties.propagation_harness import arguments_of
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
GROUPS = ((0, 4), (1, 5), (2, 6), (3, 7))   # (over 'x' of the reversed (2, 1, 4) mesh)
INPUTS = (((8, 2, 16), ("x", None, "z")), ((8, 2, 16), (None, ("y", "x"), None)))
LOOP = ("loop", (0, 1), ("fori const", 2, None))   # fori_loop(sin(c) * w) of c=a, w=b


def _recipe(steps: tuple, outputs: tuple) -> Recipe:
    return Recipe(mesh=(2, 1, 4), reversed_devices=True, inputs=INPUTS, steps=steps,
                  outputs=outputs, devices=(), out_shardings=(), axis_types="")


def _loop(extra: tuple, outputs: tuple) -> Recipe:
    return _recipe((("input", (), 0), ("input", (), 1), LOOP) + extra, outputs)


# The draw of `collectives_harness 300 20263102` that disagreed before: the spec gave the
# carry's all-to-all (128 bytes) where XLA moves the constant (512 bytes).
FOUND = _recipe((
    ("input", (), 0), ("shard_map_auto", (0,), (("x", None, None), ("x",), "transpose")),
    ("convert", (0,), None), ("input", (), 1), ("loop", (0, 3), ("fori const", 2, None)),
    ("constrain", (3,), (None, ("y", "x"), None)), ("reduce", (5,), ("sum", 1))),
    (4, 5, 6))

OPEN = "gives up mesh axes ['x'] that a constant of the loop, read outside it too"


def _results(recipe: Recipe) -> tuple:
    """The real results' specs and the spec's verdict."""
    f, args = loop_function_of(recipe), arguments_of(recipe)
    real = tuple(out.sharding.spec for out in jax.jit(f)(*args))
    return real, explain_program(describe_program(f, *args))


@pytest.mark.parametrize("recipe", [
    FOUND,
    _loop((), (2, 1)),                                              # w returned
    _loop((("convert", (1,), None),), (2, 3)),                      # w converted, returned
    _loop((("constrain", (1,), (None, ("y", "x"), None)),), (2, 3)),  # w constrained
], ids=["found", "returned", "converted", "constrained"])
def test_constant_read_outside_the_loop_is_left_open(recipe):
    outcome = compare_collectives(recipe)
    assert ("all-to-all", GROUPS, 512) in outcome.real   # (XLA moves w, whole along 16)
    assert outcome.why is not None and "PROP-4" in outcome.why and OPEN in outcome.why
    real, verdict = _results(recipe)
    assert real[0] == P("x", None, "z")   # (the loop runs on the carry's split)
    assert verdict.undetermined and OPEN in str(verdict.undetermined)


@pytest.mark.parametrize("recipe", [
    _loop((), (2,)),                                                 # the loop alone
    _loop((), (2, 0)),                                               # a returned too
    _loop((("constrain", (0,), ("x", None, "z")),), (2, 3)),         # a constrained
    _recipe(FOUND.steps, (4,)),                                      # the find, w dead
], ids=["alone", "carry-returned", "carry-constrained", "found-loop-only"])
def test_constant_read_by_the_loop_alone_leads(recipe):
    outcome = compare_collectives(recipe)
    assert outcome.why is None, outcome.why
    assert outcome.disagreements == []
    assert ("all-to-all", GROUPS, 128) in outcome.real   # (the carry moves, sliced first)
    real, verdict = _results(recipe)
    assert real[0] == P(None, "x", "z")
    assert tuple(verdict.out_shardings[0].spec) == tuple(real[0])
