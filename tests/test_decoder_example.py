"""The whole-program example (examples/decoder_step.py) runs in the default test run: a
decoder's training step, read with describe_program over abstract meshes, answered by the
spec traced and placed on chips, held to JAX's own trace (and, on 8 chips, its compile)."""

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "decoder_step.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("decoder_step", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mesh", [(2, 4), (256, 256)])
def test_the_decoder_step_is_answered_as_jax_answers(example, mesh):
    row = example.check(*mesh)
    assert row["agree"], row
    assert row["traced"].accepted and row["placed"].accepted
    assert row["placed"].num_devices == mesh[0] * mesh[1]
    # the body's constraints and shard_maps joined the program's device assignment
    assert any(".shard_map." in path for path, _ in row["placed"].inside)



def test_a_plan_that_does_not_divide_is_refused_on_chips(example):
    """On a (2, 4) mesh with a vocabulary of 30, the embedding's rows do not divide over
    "model": tracing accepts the step (the axes are Auto), and the spec refuses it placed on
    chips when lowering (FIT-3), as JAX refuses to lower it."""
    row = example.check(2, 4, example.Sizes(vocab=30))
    assert row["traced"].accepted and row["agree"], row
    refused = row["placed"]
    assert (refused.rule, refused.stage, refused.jax_error) == ("FIT-3", "lower",
                                                                "IndivisibleError"), refused
