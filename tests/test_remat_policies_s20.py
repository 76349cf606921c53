"""A remat's policy linearized as JAX 0.10.2 linearizes it (AD-21, AD-22; issue 32).

Under ``jax.grad`` JAX partially evaluates a remat's JVP by its policy
(``remat_partial_eval``): the values the policy saves (every one under
``everything_saveable``; a ``dot_general``'s under ``dots_saveable``, one without batch
dimensions under ``dots_with_no_batch_dims_saveable``; a ``checkpoint_name``'s under
``save_only_these_names`` / ``save_any_names_but_these``) are computed with the primal and
stored, each one the primal reads again pinned by a ``reduce_precision``; the backward
pass's remat (``differentiated``) takes them, then the inputs and cotangents it reads, and
recomputes everything else its tangents need. Pinned on both sides against real JAX on 8
CPU devices over an Explicit mesh: what is stored (the differentiated remat's operands,
shape and sharding, in ``jax.make_jaxpr(jax.grad(f))``; the residual arrays
``jax.linearize`` of the jitted function holds, as the compiled program placed them) and
what is recomputed (the primitives in the differentiated remat's body); and what the
differentiated remat communicates (COLL-8) answered for them.
"""

from __future__ import annotations

from collections import Counter

import pytest

jax = pytest.importorskip("jax")

from shardlaw.compiled_hlo import collectives_in_hlo  # noqa: E402
from shardlaw.properties.collectives_harness import hlo_runs  # noqa: E402
from shardlaw.properties.registry import checks  # noqa: E402
from shardlaw.spec import explain_program  # noqa: E402
from shardlaw.spec.bridge.program import describe_program  # noqa: E402
from shardlaw.spec.program.autodiff import (  # noqa: E402
    grad_program, linearize_program, vjp_program,
)
from shardlaw.spec.program.control_flow import Remat  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.ad_checkpoint import checkpoint_name  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

POLICIES = jax.checkpoint_policies
POLICY_CASES = {
    "default": None,
    "nothing_saveable": POLICIES.nothing_saveable,
    "everything_saveable": POLICIES.everything_saveable,
    "dots_saveable": POLICIES.dots_saveable,
    "dots_with_no_batch_dims_saveable": POLICIES.dots_with_no_batch_dims_saveable,
    "save_only_these_names(h)": POLICIES.save_only_these_names("h"),
    "save_only_these_names(g, h)": POLICIES.save_only_these_names("g", "h"),
    "save_any_names_but_these(h)": POLICIES.save_any_names_but_these("h"),
    "save_any_names_but_these(z)": POLICIES.save_any_names_but_these("z"),
}
# What the primal computes that the backward pass may recompute (its transposed products
# the spec names transposed_dot_general, so products are counted together).
RECOMPUTED = ("sin", "cos", "tanh", "exp", "name", "reduce_precision", "reshard",
              "dot_general")


def _mesh():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _mlp(mesh):
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P(None, "y")))

    def body(x, w):
        h = checkpoint_name(jnp.sin(x @ w), "h")
        return jnp.sum(jnp.tanh(h @ w))
    return body, (x, w)


def _batched(mesh):
    x = jax.device_put(jnp.ones((4, 8, 8)), NamedSharding(mesh, P("x", None, None)))
    w = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P(None, "y")))

    def body(x, w):
        g = checkpoint_name(jnp.exp(jnp.einsum("bij,bjk->bik", x, x)), "g")
        h = checkpoint_name(jnp.cos(g @ w), "h")
        return jnp.sum(jnp.sin(h) * g)
    return body, (x, w)


def _resharded(mesh):
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P(None, "y")))

    def body(x, w):
        h = checkpoint_name(jnp.tanh(x @ w), "h")
        h = jax.sharding.reshard(h, NamedSharding(mesh, P("y", None)))
        return jnp.sum(jnp.sin(h @ w.T))
    return body, (x, w)


BODIES = {"mlp": _mlp, "batched": _batched, "resharded": _resharded}


def _case(body_name, policy_name):
    body, args = BODIES[body_name](_mesh())
    return jax.checkpoint(body, policy=POLICY_CASES[policy_name]), args


def _typed(shape, spec):
    entries = tuple(spec) + (None,) * (len(shape) - len(tuple(spec)))
    return tuple(shape), tuple(e if e is None or isinstance(e, str) else tuple(e)
                               for e in entries[:len(shape)])


def _jax_remats(jaxpr):
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "remat2" and eqn.params["differentiated"]:
            found.append(eqn)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                found += _jax_remats(inner)
    return found


def _jax_counts(jaxpr):
    counted = Counter()
    for eqn in jaxpr.eqns:
        counted[eqn.primitive.name] += 1
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                counted += _jax_counts(inner)
    return counted


def _spec_remats(program):
    found = []
    for eq in program.equations:
        if isinstance(eq, Remat) and eq.differentiated:
            found.append(eq)
        if eq.body is not None:
            found += _spec_remats(eq.body)
    return found


def _spec_counts(program):
    counted = Counter()
    for eq in program.equations:
        name = getattr(eq, "primitive", None) or eq.kind
        counted[name.replace("transposed_", "")] += 1
        if eq.body is not None:
            counted += _spec_counts(eq.body)
    return counted


def _picked(counted):
    return {name: counted[name] for name in RECOMPUTED}


def _jax_side(f, args):
    closed = jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(*args)
    (remat,) = _jax_remats(closed.jaxpr)
    stored = Counter(_typed(v.aval.shape, v.aval.sharding.spec) for v in remat.invars)
    return stored, _picked(_jax_counts(remat.params["jaxpr"])), _picked(_jax_counts(closed.jaxpr))


def _spec_side(f, args):
    gradient = grad_program(describe_program(f, *args), argnums=(0, 1))
    (remat,) = _spec_remats(gradient)
    types = _spec_value_types(gradient, remat)
    stored = Counter(_typed(t.shape, t.spec or ()) for t in types)
    return stored, _picked(_spec_counts(remat.body)), _picked(_spec_counts(gradient)), remat


def _spec_value_types(program, remat):
    for eq, numbers in zip(program.equations, program.result_numbers()):
        if eq is remat:
            return [program.value_types[n] for n in eq.operands]
        if eq.body is not None:
            found = _spec_value_types(eq.body, remat)
            if found is not None:
                return found
    return None


PAIRS = [(b, p) for b in BODIES for p in POLICY_CASES]


@checks("AD-21", "AD-22")
@pytest.mark.parametrize("body_name,policy_name", PAIRS, ids=[f"{b}-{p}" for b, p in PAIRS])
def test_what_the_backward_pass_stores_and_recomputes_is_jax_s(body_name, policy_name):
    f, args = _case(body_name, policy_name)
    jax_stored, jax_recomputed, jax_all = _jax_side(f, args)
    spec_stored, spec_recomputed, spec_all, remat = _spec_side(f, args)
    # stored: the differentiated remat's operands (stored values, inputs, cotangents) typed alike
    assert spec_stored == jax_stored
    # recomputed: the same primal primitives in the backward pass's remat
    assert spec_recomputed == jax_recomputed
    # and in the whole gradient (the reduce_precision pins of the stored values included)
    assert spec_all == jax_all
    assert remat.policy_unread is False


def _residual_types(f, args):
    """JAX's: the residual arrays ``jax.linearize`` of the jitted function holds (placed as
    the compiled program placed them); the spec's: those its linearized primal returns."""
    _, linear = jax.linearize(jax.jit(f), *args)
    held = Counter(_typed(a.shape, a.sharding.spec)
                   for a in jax.tree_util.tree_leaves(linear) if hasattr(a, "sharding"))
    primal = linearize_program(describe_program(jax.jit(f), *args)).primal
    types = primal.value_types
    count = len(primal.outputs) - sum(1 for _ in jax.tree_util.tree_leaves(
        jax.eval_shape(f, *args)))
    made = Counter(_typed(types[n].shape, types[n].spec or ())
                   for n in primal.outputs[len(primal.outputs) - count:])
    return held, made


@checks("AD-21", "AD-22")
@pytest.mark.parametrize("body_name,policy_name", PAIRS, ids=[f"{b}-{p}" for b, p in PAIRS])
def test_the_stored_residuals_are_placed_as_the_compiled_program_places_them(body_name,
                                                                            policy_name):
    f, args = _case(body_name, policy_name)
    held, made = _residual_types(f, args)
    assert made == held


def _elementwise_step(policy):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("y", None)))
    cotangent = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", "y")))

    def body(x, w):
        h = checkpoint_name(jnp.cos(x * 2.0), "h")
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(None, "y")))
        return jnp.sin(h) * w
    return jax.checkpoint(body, policy=policy), (x, w), cotangent


def _compiled_collectives(f, args, cotangent):
    text = jax.jit(lambda x, w, ct: jax.vjp(f, x, w)[1](ct)).lower(
        *args, cotangent).compile().as_text()
    runs = hlo_runs(text)
    return sorted(((c.kind, c.replica_groups, c.bytes_per_device, runs[c.name])
                   for c in collectives_in_hlo(text)), key=repr)


def _spec_collectives(f, args, cotangent):
    (typed,) = describe_program(lambda v: v, cotangent).inputs
    return explain_program(vjp_program(describe_program(f, *args), cotangents=(typed,))
                           .applied).collectives


def _keys(step):
    return sorted(((c.kind, () if c.replica_groups is None else c.replica_groups.groups(),
                    c.bytes_per_device, c.trips) for c in step), key=repr)


@checks("AD-22", "COLL-8")
@pytest.mark.parametrize("policy_name", list(POLICY_CASES))
def test_what_the_differentiated_remat_communicates_is_the_compiled_program_s(policy_name):
    f, args, cotangent = _elementwise_step(POLICY_CASES[policy_name])
    step = _spec_collectives(f, args, cotangent)
    assert step.complete, step.undetermined
    assert _keys(step) == _compiled_collectives(f, args, cotangent)


@checks("COLL-8")
def test_a_policy_the_spec_does_not_read_leaves_the_communication_open():
    """A policy the spec does not read (session 20 took ``save_from_both_policies`` here,
    read since session 21, then a function of the user's own, read into a table since
    then; an offloading one still is not): the spec recomputes everything, as
    ``nothing_saveable``, where JAX offloads what the function saves."""
    from jax._src.interpreters.partial_eval import Offloadable

    def mine(prim, *_, **__):
        return Offloadable("device", "pinned_host") if prim.name == "cos" else False
    f, args, cotangent = _elementwise_step(mine)
    (remat,) = _spec_remats(vjp_program(describe_program(f, *args)).applied)
    assert (remat.policy, remat.policy_unread) == ("<mine>", True)
    step = _spec_collectives(f, args, cotangent)
    assert step.undetermined is not None and step.undetermined.rule == "COLL-8"
    assert "(<mine>) the spec does not read" in str(step.undetermined)

    # (JAX's own gradient read back holds JAX's body: planned, whatever the policy)
    def cosines(prim, *_, **__):
        return prim.name == "cos"
    f, args, cotangent = _elementwise_step(cosines)
    jax_remats = _spec_remats(describe_program(
        lambda x, w, ct: jax.vjp(f, x, w)[1](ct), *args, cotangent))
    assert jax_remats and not any(r.policy_unread for r in jax_remats)


@checks("AD-22")
def test_a_body_holding_an_inner_jit_is_split_by_a_saving_policy():
    """JAX splits an inner jit of a remat's body by the policy too (its partial-evaluation
    rule for jit); so does the spec since session 21 (``tests/test_remat_s21.py`` pins it
    body by body): what it stores is JAX's."""
    mesh = _mesh()
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P(None, "y")))
    inner = jax.jit(lambda a, b: jnp.sin(a @ b))

    def body(x, w):
        return jnp.sum(jnp.tanh(inner(x, w) @ w))
    saving = jax.checkpoint(body, policy=POLICIES.dots_saveable)
    jax_stored, _, _ = _jax_side(saving, (x, w))
    default_stored, _, _ = _jax_side(jax.checkpoint(body), (x, w))
    assert jax_stored != default_stored   # JAX stores the products
    spec_stored, _, _, remat = _spec_side(saving, (x, w))
    assert remat.policy == "dots_saveable" and not remat.policy_unread
    assert spec_stored == jax_stored
