"""Reverse-mode AD of scans and remat, as users write them (issue 32), against JAX 0.10.2.

``grad_program`` of a step with ``lax.scan`` over layers or ``jax.checkpoint`` gives the
gradient ``jax.jit(jax.grad(...))`` stages:

* a scan linearized as ``_scan_linearize``: a residual that is a constant or an ``xs`` of
  the body is forwarded, not stacked; what the body computes from its constants alone
  (grad's literal one resharded to the mesh, the known half of an inner jit) runs once
  before the loop (``_scan_known_hoisting``), its residuals taken whole by the tangent scan;
* a remat linearized as ``remat_partial_eval`` leaves it: its primal in line, nothing
  stored but its operands; a differentiated remat recomputes what the tangents need, and
  transposed it is a remat again;
* ``add``'s tangent of a broadcast operand brought to the result's type
  (``_maybe_broadcast``): a bias under remat;
* grad of an argument holding no array (``argnums=()`` over the flat inputs), and grad's
  seed made whether or not the loss reads argnums.

Each case is held to JAX: the same verdict and results (types, shardings, committedness)
as JAX's traced, lowered, compiled and run gradient, the same placing equations (every
constraint and reshard, jits' bodies flattened, as the steps property compares them),
and, where the two linearize alike, the same scans and remats.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from shardlaw.properties.program_ad_harness import signature
from shardlaw.properties.program_harness import JaxOutcome, outcome_problems, stage_in_jax
from shardlaw.properties.steps_harness import placing
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import grad_program
from shardlaw.spec.program.control_flow import Remat, Scan
from shardlaw.spec.program.description import Jit, Opaque

from test_steps_arguments import NS, P, with_compiler_choices

KINDS = jax.sharding.AxisType


def _mesh(kind=KINDS.Auto):
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(kind,) * 2)


def _held(loss, argnums, *args):
    """The spec's gradient of ``jax.jit(loss)`` (with respect to the leaves of argument
    ``argnums``) and JAX's own, described: the verdicts
    agree with JAX's outcome (results, shardings, committedness), and their placing
    equations are the same, in order."""
    jitted = jax.jit(loss)
    theirs = jax.jit(jax.grad(jitted, argnums))
    outcome = JaxOutcome()
    stage_in_jax(theirs, args, outcome)
    assert outcome.error is None, outcome.error
    starts = np.cumsum([0] + [len(jax.tree_util.tree_leaves(a)) for a in args])
    flat = tuple(range(starts[argnums], starts[argnums + 1]))   # the argument's leaves
    ours = grad_program(describe_program(jitted, *args), tuple(int(i) for i in flat))
    verdict = explain_program(with_compiler_choices(ours, outcome))
    assert not outcome_problems(verdict, outcome), outcome_problems(verdict, outcome)
    described = describe_program(theirs, *args)
    assert placing(signature(ours)) == placing(signature(described))
    return ours, described


def _calls(program, kind):
    """The equations of ``kind`` in ``program``, jits' bodies walked (not loops')."""
    found = []
    for eq in program.equations:
        if isinstance(eq, kind):
            found.append(eq)
        if isinstance(eq, Jit):
            found += _calls(eq.body, kind)
    return found


def _scans(program):
    """Per scan, what its partial evaluation decided: direction, constants, carry,
    operands and results."""
    return [(s.reverse, s.num_consts, s.num_carry, len(s.operands), len(s.results))
            for s in _calls(program, Scan)]


# --------------------------------------------------------------------------- scans

def _scanned_tanh(mesh):
    def loss(w, x):
        def layer(h, wi):
            return jnp.tanh(h @ wi), None
        return jnp.mean(lax.scan(layer, x, w)[0] ** 2)
    w = jax.device_put(np.full((3, 4, 4), 0.1, np.float32), NS(mesh, P(None, "x")))
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh, P("x")))
    return loss, w, x


@pytest.mark.parametrize("kind", [KINDS.Auto, KINDS.Explicit], ids=["auto", "explicit"])
def test_grad_of_scanned_layers_hoists_the_one_and_forwards_xs_as_jax_does(kind):
    loss, w, x = _scanned_tanh(_mesh(kind))
    ours, theirs = _held(loss, 0, w, x)
    # the known scan takes the reshard of tanh's one as a constant, computed before it,
    # stacks the carry, tanh and one minus tanh, and forwards the weights (an xs); the
    # transposed scan takes the weights and the three stacked residuals
    assert _scans(ours) == _scans(theirs) == [(False, 1, 1, 3, 4), (True, 0, 1, 5, 2)]
    assert [e[0] for e in placing(signature(ours))] == ["reshard", "reshard"]


def test_an_inner_jit_in_a_scan_body_is_split_its_known_half_hoisted_as_jax_does():
    mesh = _mesh()
    scale = jax.jit(lambda h: h * 3.0)
    squash = jax.jit(jnp.tanh)

    def loss(w, x):
        return jnp.mean(lax.scan(lambda h, p: (squash(scale(h @ p)), None), x, w)[0] ** 2)
    _, w, x = _scanned_tanh(mesh)
    ours, theirs = _held(loss, 0, w, x)
    assert _scans(ours) == _scans(theirs)
    # before the loop, in the primal: one jit, squash's known half (the reshard of its one)
    def before(program):
        return [[e[0] for e in placing(signature(j.body))]
                for j in program.equations[0].body.equations if isinstance(j, Jit)]
    assert before(ours) == before(theirs) == [["reshard"]]


def test_grad_of_a_scanned_transformer_block_places_what_jax_places():
    """A scanned block of a SwiGLU MLP and a layernorm under activation constraints
    (FSDP): silu's jit split, its known half hoisted."""
    mesh = _mesh()

    def block(h, p):
        gate = jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])
        h = lax.with_sharding_constraint(h + gate @ p["w2"], NS(mesh, P("x")))
        mean = h.mean(-1, keepdims=True)
        return (h - mean) * lax.rsqrt(((h - mean) ** 2).mean(-1, keepdims=True) + 1e-5), None

    def loss(params, x):
        return jnp.mean(lax.scan(block, x, params)[0] ** 2)
    params = {n: jax.device_put(np.full(s, 0.1, np.float32), NS(mesh, P(None, "x")))
              for n, s in (("w1", (2, 16, 32)), ("w2", (2, 32, 16)), ("w3", (2, 16, 32)))}
    x = jax.device_put(np.ones((8, 6, 16), np.float32), NS(mesh, P("x")))
    _held(loss, 0, params, x)


# --------------------------------------------------------------------------- remat

def test_grad_of_a_remat_recomputes_its_primal_in_a_remat_as_jax_does():
    mesh = _mesh()

    def block(w, h):
        return lax.with_sharding_constraint(jnp.tanh(h @ w), NS(mesh, P("x")))

    def loss(w, x):
        return jnp.mean(jax.checkpoint(block)(w, x) ** 2)
    w = jax.device_put(np.full((4, 4), 0.1, np.float32), NS(mesh, P("x")))
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh, P("x")))
    ours, theirs = _held(loss, 0, w, x)
    primal, backward = [eq for eq in ours.equations if isinstance(eq, Jit)]
    jax_primal, jax_backward = [eq for eq in theirs.equations if isinstance(eq, Jit)]
    # the primal runs in line: no remat, and tanh's one is not made there
    assert not _calls(primal.body, Remat) and not _calls(jax_primal.body, Remat)
    # the backward pass is one differentiated remat recomputing tanh and its one
    (remat,) = _calls(backward.body, Remat)
    (jaxs,) = _calls(jax_backward.body, Remat)
    assert remat.differentiated and jaxs.differentiated
    assert len(remat.operands) == len(jaxs.operands) == 3
    assert [e[0] for e in placing(signature(ours))] == [
        "sharding_constraint", "reshard", "reshard", "sharding_constraint"]


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("committed", [True, False], ids=["placed", "in_shardings"])
def test_a_bias_under_remat_and_grad_is_broadcast_and_summed_back_as_jax_does(depth,
                                                                              committed):
    """``h + b`` in a checkpointed block: the bias's tangent broadcast to the result's
    type inside the remat (JAX's ``_maybe_broadcast``), its cotangent summed back there;
    two blocks pass a full-shaped tangent from one remat to the next."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(KINDS.Auto,) * 2)
    block = jax.checkpoint(lambda b, h: h + b)

    def loss(bs, x):
        for b in bs:
            x = block(b, x)
        return jnp.mean(x ** 2)
    b = np.arange(16, dtype=np.float32) / 16
    x = np.ones((8, 6, 16), np.float32)
    if committed:
        bs = tuple(jax.device_put(b, NS(mesh, P())) for _ in range(depth))
        _held(loss, 0, bs, jax.device_put(x, NS(mesh, P("x"))))
    else:   # the shardings given to jit, numpy arguments
        shardings = (tuple(NS(mesh, P()) for _ in range(depth)), NS(mesh, P("x")))
        jitted = jax.jit(loss, in_shardings=shardings)
        bs = tuple(b for _ in range(depth))
        outcome = JaxOutcome()
        stage_in_jax(jax.jit(jax.grad(jitted)), (bs, x), outcome)
        ours = grad_program(describe_program(jitted, bs, x), tuple(range(depth)))
        verdict = explain_program(with_compiler_choices(ours, outcome))
        assert outcome.error is None and not outcome_problems(verdict, outcome)


# --------------------------------------------------------------------------- argnums

def test_grad_of_an_argument_holding_no_array_is_no_gradient_as_jax_gives():
    """``jax.grad`` of a loss whose parameters are an empty dict (a softmax-only model):
    no gradient, the loss traced and grad's seed made all the same."""
    mesh = _mesh()
    x = jax.device_put(np.ones((8, 16), np.float32), NS(mesh, P("x")))

    def loss(params, x):
        return jnp.mean(jax.nn.softmax(x, -1) ** 2)
    ours, theirs = _held(loss, 0, {}, x)
    assert ours.outputs == () and [e[0] for e in placing(signature(ours))] == ["reshard"]


def test_grad_seed_is_made_when_the_loss_does_not_read_argnums():
    mesh = _mesh()
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh, P("x")))
    ours, _ = _held(lambda unused, x: jnp.sum(x), 0, x, x)
    assert [e[0] for e in placing(signature(ours))] == ["reshard"]


# --------------------------------------------------------------------------- add's transpose

@pytest.mark.parametrize("moving", ["one", "both"])
def test_an_addend_typed_apart_from_the_sum_gets_its_own_type_back_as_jax_gives(moving):
    """Over Explicit axes, ``h + tanh(x @ w)`` with ``h`` split and the other addend not.
    Where only the second addend carries a tangent, add's JVP reshards it to the sum's
    type (``_maybe_broadcast``) and the transpose reshards the cotangent back; where both
    do, add's transpose reshapes the cotangent to each addend's own sharding type
    (``_unbroadcast``) rather than handing it the split one (which AD-13 would refuse)."""
    mesh = _mesh(KINDS.Explicit)

    def loss(w, x):
        first = x @ w if moving == "both" else x
        h = jax.sharding.reshard(first, NS(mesh, P(None, "y")))
        return jnp.mean((h + jnp.tanh(x @ w)) ** 2)
    w = jax.device_put(np.full((16, 16), 0.1, np.float32), NS(mesh, P()))
    x = jax.device_put(np.ones((8, 16), np.float32), NS(mesh, P()))
    ours, theirs = _held(loss, 0, w, x)

    def reshapes(program):   # each one's result split over no axis
        return [not any(eq.results[0].spec or ()) for eq in _calls(program, Opaque)
                if eq.primitive == "reshape"]
    assert reshapes(ours) == reshapes(theirs) == ([True] if moving == "both" else [])


def test_a_numpy_addend_beside_a_committed_one_gets_a_gradient_over_no_mesh_as_jax_gives():
    """``a + b``, ``a`` a numpy array and ``b`` committed: add's JVP reshards ``a``'s
    tangent to the sum's type, and the transpose reshards its cotangent back, so ``a``'s
    gradient is typed over no mesh, as JAX's is."""
    mesh = _mesh()
    b = jax.device_put(np.ones((1, 8), np.float32), NS(mesh, P()))
    a = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    ours, theirs = _held(lambda a, b: jnp.sum(a + b), 0, a, b)
    assert explain_program(ours).out_types[0].mesh is None
    assert [e[0] for e in placing(signature(ours))] == ["reshard"] * 2   # seed, back


def test_over_no_mesh_the_literal_one_stays_a_literal_in_the_loop_as_jax_writes_it():
    """Numpy arguments: tanh's one is a literal, not resharded, so nothing is hoisted and
    the known scan takes no constant (JAX writes the literal where it is read)."""
    loss, _, _ = _scanned_tanh(_mesh())
    w = np.full((3, 4, 4), 0.1, np.float32)
    ours, theirs = _held(loss, 0, w, np.ones((8, 4), np.float32))
    assert _scans(ours) == _scans(theirs) == [(False, 0, 1, 2, 4), (True, 0, 1, 5, 2)]


def _remat_of_scan(sharding):
    """A loss checkpointing a whole scan over layers whose body constrains its carry:
    JAX's gradient leaves the remat's known half as a ``closed_call`` holding the scan."""
    def body(h, w):
        return jax.lax.with_sharding_constraint(jnp.tanh(h @ w), sharding), None

    def loss(ws, x):
        scanned = jax.checkpoint(lambda ws, x: lax.scan(body, x, ws)[0])
        return jnp.sum(scanned(ws, x))
    return loss


def test_a_checkpointed_scan_under_grad_is_described_through_its_closed_call():
    mesh = _mesh()
    ws = jax.device_put(np.ones((3, 16, 16), np.float32),
                        jax.sharding.NamedSharding(mesh, P(None, None, "y")))
    x = jax.device_put(np.ones((8, 16), np.float32), jax.sharding.NamedSharding(mesh, P("x")))
    ours, described = _held(_remat_of_scan(jax.sharding.NamedSharding(mesh, P("x"))), 0, ws, x)
    assert "closed_call" in repr(described)   # (read as a call, its scan's constraint kept)


def test_a_closed_calls_body_is_checked_as_a_jits():
    """The constraint inside on the same devices in another order: refused when lowering
    (the devices of the call's body part from the arguments'), as JAX refuses it."""
    mesh = _mesh()
    other = jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"),
                              axis_types=(KINDS.Auto,) * 2)
    ws = jax.device_put(np.ones((3, 16, 16), np.float32), jax.sharding.NamedSharding(mesh, P()))
    x = jax.device_put(np.ones((8, 16), np.float32), jax.sharding.NamedSharding(mesh, P("x")))
    theirs = jax.jit(jax.grad(jax.jit(_remat_of_scan(jax.sharding.NamedSharding(other, P("x"))))))
    outcome = JaxOutcome()
    stage_in_jax(theirs, (ws, x), outcome)
    assert outcome.error is not None
    verdict = explain_program(describe_program(theirs, ws, x))
    assert not outcome_problems(verdict, outcome), outcome_problems(verdict, outcome)
