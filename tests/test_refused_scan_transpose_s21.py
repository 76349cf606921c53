"""describe_program of a product JAX cannot type inside the body its backward pass traces
for a ``lax.scan`` (issue 32, item 4), against JAX 0.10.2 on 8 CPU devices.

JAX transposes a scan under ``grad`` by tracing a new body, run the other way, over the
residuals, the carried cotangents and the stacked cotangents; a ``dot_general`` there
contracting dimensions split over Explicit axes on both sides, asked for no out_sharding
(the weight's slice typed over no mesh), is refused while that body is traced
(ShardingTypeError). The session 21 steps deep run left six such examples "not described".
Each is now described up to the refused product (spec/bridge/refused_transposes.py: a Scan
over the transposed body traced so far, then the product) and refused by PROG-7 at the
trace stage at the product's path; with the weight placed over the mesh both accept.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties import steps_harness
from shardlaw.properties.registry import checks
from shardlaw.properties.steps_strategies import StepCase
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.control_flow import Scan

from test_steps_arguments import NS, P, held_to_jax

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _put(shape, spec):
    return jax.device_put(np.ones(shape, np.float32), NS(EXPLICIT, spec))


def _scanned_loss(ws, x):
    """Each layer's product ``x @ w``, summed over the stacked weights by a scan."""
    def layer(total, w):
        return total + jnp.tanh(x @ w).sum(), None
    total, _ = jax.lax.scan(layer, jnp.float32(0), ws)
    return total


def grad_through_scan(ws, x):
    return jax.grad(_scanned_loss)(ws, x)


def _reversed_loss(ws, x):
    def layer(h, w):
        return jnp.tanh(h @ w), (h @ w).sum()
    h, ys = jax.lax.scan(layer, x, ws, reverse=True)
    return h.sum() + ys.sum()


def grad_through_reversed_scan(ws, x):
    return jax.grad(_reversed_loss)(ws, x)


def _closing_loss(ws, x):
    def layer(h, w):
        return jnp.tanh(h @ w) * x, None
    h, _ = jax.lax.scan(layer, x, ws)
    return h.sum()


def grad_of_a_scan_constant(ws, x):
    """Also differentiated by ``x``, which the body closes over: the transposed scan
    carries the constant's cotangent (from zeros) beside the carry's."""
    return jax.grad(_closing_loss, argnums=(0, 1))(ws, x)


# name: (the function, the number of stacked weights, the refused product's path)
SCANS = {
    "scan": (grad_through_scan, 3, "body[3].scan.body[4]"),
    "reversed-carrying-scan": (grad_through_reversed_scan, 2, "body[9].scan.body[1]"),
    "constant-cotangent": (grad_of_a_scan_constant, 3, "body[6].scan.body[6]"),
}


def _refused_scan(program, path):
    """The Scan equation the path of the refused product passes through."""
    head = path.split(".scan.")[0]
    body = program
    for step in head.split(".jit."):
        index = int(step.rsplit("body[", 1)[1].rstrip("]"))
        equation = body.equations[index]
        body = equation.body
    return equation


@checks("PROG-7")
@pytest.mark.parametrize("name", sorted(SCANS))
def test_a_product_jax_cannot_type_in_a_transposed_scan_is_refused_by_prog_7(name):
    """The weight's product the gradient makes inside the transposed scan's body, its
    weight slice over no mesh: JAX's ShardingTypeError while tracing that body; described
    up to it, refused by PROG-7 at the trace stage at the product's path inside a Scan run
    the other way over the residuals and cotangents."""
    fun, layers, path = SCANS[name]
    x, ws = _put((8, 16), P("x")), np.ones((layers, 16, 16), np.float32)
    with pytest.raises(Exception) as raised:
        jax.jit(fun).trace(ws, x)
    assert type(raised.value).__name__ == "ShardingTypeError"
    assert "Contracting dimensions are sharded" in str(raised.value)
    program, verdict, problems = held_to_jax(fun, ws, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "PROG-7", "trace", path, "ShardingTypeError"), verdict.message
    scan = _refused_scan(program, verdict.path)
    assert isinstance(scan, Scan) and scan.length == layers
    forward_reversed = name.startswith("reversed")
    assert scan.reverse is not forward_reversed   # run the other way


@checks("PROG-7")
@pytest.mark.parametrize("name", sorted(SCANS))
def test_the_weights_placed_over_the_mesh_make_the_transposed_scan_typed(name):
    """The stacked weights placed over the mesh: the transposed product is asked for the
    weight slice's type, and both accept (traced, compiled and run, alike)."""
    fun, layers, _ = SCANS[name]
    x, ws = _put((8, 16), P("x")), _put((layers, 16, 16), P())
    jax.jit(fun).trace(ws, x)
    _, verdict, problems = held_to_jax(fun, ws, x)
    assert not problems and verdict.accepted, problems


# the steps deep run's examples (session 21) JAX refuses in a transposed scan's body
_STEP = dict(depth=1, scan=True, remat=False, cond=False, optimizer="sgd", mesh="explicit",
             grid=(2, 4), constraint="batch", out=None, given=True, refused=None)
_TRAIN = StepCase(layers=("relu", "softmax", "swiglu"), transform="train",
                  plan="replicated", donate=False, **_STEP)
_GRAD = StepCase(layers=("softmax", "relu"), transform="grad", plan="dp", donate=True,
                 **_STEP)
# name: (the case, the refused product's path: in the transposed scan's body, or in the
# transposed remat or cond JAX's transpose of that body traces in turn)
STEPS = {
    "train-replicated": (_TRAIN, "body[13].scan.body[1]"),
    "grad-dp": (_GRAD, "body[2].jit.body[4].scan.body[1]"),
    "train-replicated-remat": (dataclasses.replace(_TRAIN, remat=True),
                               "body[12].scan.body[0].jit.body[25]"),
    "grad-dp-cond": (dataclasses.replace(_GRAD, cond=True),
                     "body[1].jit.body[4].scan.body[0].cond.body[0].jit.body[1]"),
}


@checks("PROG-7")
@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_steps_runs_refused_transposed_scans_are_described_and_agree(name):
    """The steps run's examples JAX refuses in a transposed scan's body (and the same with
    a remat or a cond in the scanned layer, whose transposes JAX traces inside it):
    described (not counted "not described") and agreeing with JAX; the description
    refuses by PROG-7 at the trace stage at the product's path inside the scan."""
    from shardlaw.spec.program.explain import explain_program

    case, path = STEPS[name]
    before = steps_harness.TALLY.copy(), steps_harness.NOT_DESCRIBED.copy()
    assert steps_harness.compare_step(case) == []
    counted = steps_harness.TALLY - before[0]
    assert counted["agree"] >= 1 and not counted["not described"], counted
    assert steps_harness.NOT_DESCRIBED == before[1]
    built = steps_harness.build(case)
    with pytest.raises(Exception) as raised:
        jax.jit(built.jitted).trace(*built.arguments())
    assert type(raised.value).__name__ == "ShardingTypeError"
    verdict = explain_program(describe_program(built.jitted, *built.arguments()),
                              until="trace")
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "PROG-7", "trace", path, "ShardingTypeError"), verdict.message


@checks("PROG-7")
@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_steps_runs_neighbours_without_the_batch_constraint_agree(name):
    """The same steps with no constraint splitting the batch over 'x' (so no product in the
    transposed scan contracts split dimensions): JAX accepts, and the spec describes and
    accepts them, agreeing."""
    from shardlaw.spec.program.explain import explain_program

    neighbour = dataclasses.replace(STEPS[name][0], constraint=None)
    built = steps_harness.build(neighbour)
    jax.jit(built.jitted).trace(*built.arguments())
    assert explain_program(describe_program(built.jitted, *built.arguments()),
                           until="trace").accepted
    before = steps_harness.TALLY.copy()
    assert steps_harness.compare_step(neighbour) == []
    counted = steps_harness.TALLY - before
    assert counted["agree"] >= 1 and not counted["not described"], counted
