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


def _shard_maps(signature: tuple) -> list:
    out = []
    for entry in signature:
        if entry[0] == "jit":
            out += _shard_maps(entry[4])
        elif entry[0] == "shard_map":
            out.append(entry)
    return out


def test_the_steps_gradient_is_the_specs_and_its_shard_maps_are_jaxs(example):
    """The step's gradient is rewritten by the spec from the loss (grad_program), never
    read from JAX's trace of jax.grad. Each MLP block becomes a known shard_map (its
    stored residuals split over ('data', 'model')) and a transposed one, whose specs and
    collectives (the psum's transpose a pvary) are those of JAX's own jaxpr of the step.
    How many residuals are stored differs: the spec linearizes the primitives it does not
    describe (gelu's, the matmuls') keeping their operands, where JAX keeps what each
    primitive's own rule keeps."""
    import jax

    from shardlaw.properties.program_ad_harness import jaxpr_signature, signature
    from shardlaw.spec import explain_program, grad_program
    from shardlaw.spec.bridge.program import describe_program

    mesh, sizes = example.mesh_of(2, 4), example.Sizes()
    params, tokens = example.plan(mesh, sizes)
    loss = describe_program(example.loss_of(mesh, sizes), params, tokens)
    program = grad_program(loss, tuple(range(len(jax.tree_util.tree_leaves(params)))))
    assert explain_program(program, until="trace").accepted
    jaxpr = jax.make_jaxpr(jax.jit(example.step_of(mesh, sizes)))(params, tokens).jaxpr
    mine = _shard_maps(signature(program))
    theirs = _shard_maps(jaxpr_signature(jaxpr.eqns[0].params["jaxpr"].jaxpr))
    assert len(mine) == len(theirs) == 2 * sizes.layers

    def specs(entry):   # the distinct in and out specs, in order
        return tuple(dict.fromkeys(entry[1])), tuple(dict.fromkeys(entry[2]))
    assert [specs(e) for e in mine] == [specs(e) for e in theirs]
    transposed = mine[sizes.layers:]
    assert [e[3] for e in transposed] == [e[3] for e in theirs[sizes.layers:]]
    assert ("pvary", ("model",)) in transposed[0][3]
