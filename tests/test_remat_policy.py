"""A remat's ``policy`` (jax.checkpoint_policies), read and carried (issue 32).

What JAX 0.10.2 does with it, pinned: under grad, the default policy (as
``nothing_saveable``) recomputes the body's primal in the backward pass, where
``everything_saveable`` and ``dots_saveable`` store it (fewer products and sines in the
gradient's jaxpr, other collectives in the compiled module), the gradient's result placed
alike. The spec reads the policy into :class:`~shardlaw.spec.program.control_flow.Remat`
(from the user's checkpoint and from the differentiated remat of JAX's own gradient),
carries it through its rewrites, linearizes a saving remat as JAX does (stored, not
recomputed: the same sines, two products fewer, in both; AD-21, AD-22, pinned policy by
policy in ``test_remat_policies_s20.py``), and plans what a differentiated remat read from
JAX's own gradient communicates whatever its policy (its body is JAX's); the verdict is
JAX's, with any policy.
"""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

from shardlaw.spec import (  # noqa: E402
    UNSPECIFIED, explain_program, from_jax, placement_equivalent,
)
from shardlaw.spec.bridge.program import describe_program  # noqa: E402
from shardlaw.spec.program.autodiff import grad_program  # noqa: E402
from shardlaw.spec.program.control_flow import Remat  # noqa: E402
from shardlaw.spec.vectors.program_vectors import dump_program, load_program  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.ad_checkpoint import checkpoint_name  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

POLICIES = jax.checkpoint_policies
NAMED = [(None, None), (POLICIES.nothing_saveable, None),
         (POLICIES.everything_saveable, "everything_saveable"),
         (POLICIES.dots_saveable, "dots_saveable"),
         (POLICIES.dots_with_no_batch_dims_saveable, "dots_with_no_batch_dims_saveable"),
         (POLICIES.save_only_these_names("h", "a"), "save_only_these_names(a, h)")]


def _setup():
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("x")))
    w = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P(None, "y")))

    def loss(x, w):
        h = checkpoint_name(jnp.sin(x @ w), "h")
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P("y")))
        return jnp.sum(jnp.cos(h @ w))
    return loss, x, w


def _remats(program):
    out = []
    for eq in program.equations:
        if isinstance(eq, Remat):
            out.append(eq)
        if eq.body is not None:
            out += _remats(eq.body)
    return out


@pytest.mark.parametrize("policy,name", NAMED, ids=[n or "default" for _, n in NAMED[:1]]
                         + ["nothing_saveable"] + [n for _, n in NAMED[2:]])
def test_the_policy_is_read_from_the_checkpoint_and_from_jax_s_gradient(policy, name):
    loss, x, w = _setup()
    checkpointed = jax.checkpoint(loss, policy=policy)
    (remat,) = _remats(describe_program(checkpointed, x, w))
    assert (remat.policy, remat.differentiated) == (name, False)
    differentiated = [r for r in _remats(describe_program(jax.grad(checkpointed), x, w))
                      if r.differentiated]
    assert differentiated and all(r.policy == name for r in differentiated)
    program = describe_program(checkpointed, x, w)   # and a vector holds it
    assert load_program(dump_program(program)).program == program


def _counts(policy):
    loss, x, w = _setup()
    text = str(jax.make_jaxpr(jax.grad(jax.checkpoint(loss, policy=policy)))(x, w))
    return text.count("dot_general"), text.count(" sin ")


def test_jax_recomputes_under_the_default_policy_and_stores_under_the_saving_ones():
    assert _counts(None) == _counts(POLICIES.nothing_saveable) == (6, 3)
    assert _counts(POLICIES.everything_saveable) == _counts(POLICIES.dots_saveable) == (4, 2)


def _spec_counts(policy):
    loss, x, w = _setup()
    counted = {"dot_general": 0, "sin": 0}

    def walk(program):
        for eq in program.equations:
            primitive = getattr(eq, "primitive", None)
            if primitive in counted:
                counted[primitive] += 1
            if eq.body is not None:
                walk(eq.body)
    walk(grad_program(describe_program(jax.checkpoint(loss, policy=policy), x, w)))
    return counted["dot_general"], counted["sin"]


@pytest.mark.parametrize("policy", [POLICIES.everything_saveable, POLICIES.dots_saveable])
def test_under_a_saving_policy_the_spec_recomputes_what_jax_does_not(policy):
    # (the spec names a product's transpose otherwise: the products recomputed compare)
    jax_default, jax_saving = _counts(None), _counts(policy)
    spec_default, spec_saving = _spec_counts(None), _spec_counts(policy)
    assert (spec_default[1], spec_saving[1]) == (jax_default[1], jax_saving[1]) == (3, 2)
    assert spec_default[0] - spec_saving[0] == jax_default[0] - jax_saving[0] == 2


@pytest.mark.parametrize("policy", [None, POLICIES.everything_saveable,
                                    POLICIES.dots_saveable])
def test_the_spec_s_gradient_carries_the_policy(policy):
    loss, x, w = _setup()
    checkpointed = jax.checkpoint(loss, policy=policy)
    gradient = grad_program(describe_program(checkpointed, x, w))
    name = _remats(describe_program(checkpointed, x, w))[0].policy
    assert {r.policy for r in _remats(gradient) if r.differentiated} == {name}
    assert explain_program(gradient).accepted


@pytest.mark.parametrize("policy", [None, POLICIES.everything_saveable,
                                    POLICIES.dots_saveable,
                                    POLICIES.save_only_these_names("a")])
def test_what_a_differentiated_remat_of_jax_s_gradient_communicates_is_planned(policy):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("x")))
    checkpointed = jax.checkpoint(lambda v: jnp.sin(jnp.cos(v)), policy=policy)

    def pulled_back(v):
        return jax.vjp(checkpointed, v)[1](v)[0]
    verdict = explain_program(describe_program(pulled_back, x))
    result = jax.jit(pulled_back)(x)
    assert verdict.accepted
    predicted = verdict.out_shardings[0]   # (UNSPECIFIED: left to the compiler)
    assert predicted is UNSPECIFIED or placement_equivalent(
        predicted, from_jax(result.sharding), result.shape)
    communication = verdict.collectives   # (its body is JAX's: planned as JAX's, none here)
    text = jax.jit(pulled_back).lower(x).compile().as_text()
    assert not any(op in text for op in ("all-gather", "all-reduce", "all-to-all",
                                         "collective-permute"))
    assert communication.complete and communication.bytes_per_device == 0
