"""A remat's policy read where session 20 left it unread (issue 32 item 1; AD-21, AD-22).

JAX 0.10.2's partial evaluation of a remat (``remat_partial_eval``, by
``partial_eval_jaxpr_custom``) splits an inner jit of the body by the policy too (jit's
rule for it): the known jit returns its outputs, then the values the policy saves inside
it (a saved value it returns already is not returned again), and the backward pass's
remat recomputes the rest inside a jit taking those saved values, then the inputs it
reads. The spec splits it alike (:func:`~shardlaw.spec.program.partial_eval.split_by_policy`
recursing into inner jits), where session 20 recomputed everything and left the
communication open (COLL-8). Pinned on both sides against real JAX on 8 CPU devices over
an Explicit mesh: the differentiated remat's operands (what is stored: shape and
sharding, in ``jax.make_jaxpr(jax.grad(f))``), the primal primitives it recomputes and
those of the whole gradient, the residual arrays ``jax.linearize`` holds as the compiled
program placed them, and the compiled backward pass's collectives; the near neighbours
(a loop, a cond or a shard_map in the body) are still left open, as named.
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
from shardlaw.spec.program.collectives_loops import unread_remat  # noqa: E402
from shardlaw.spec.program.control_flow import Remat  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.ad_checkpoint import checkpoint_name  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

POLICIES = jax.checkpoint_policies


def cos_and_dots(prim, *_, **__):
    """a user's own policy: by the primitive alone"""
    return prim.name in ("cos", "dot_general")


def wide_sines(prim, *avals, **__):
    """a user's own policy: by the primitive and its operand's shape"""
    return prim.name in ("sin", "exp") and avals[0].shape == (16, 8)


POLICY_CASES = {
    "default": None,
    "everything_saveable": POLICIES.everything_saveable,
    "dots_saveable": POLICIES.dots_saveable,
    "dots_with_no_batch_dims_saveable": POLICIES.dots_with_no_batch_dims_saveable,
    "save_only_these_names(h)": POLICIES.save_only_these_names("h"),
    "save_any_names_but_these(h)": POLICIES.save_any_names_but_these("h"),
    "save_from_both_policies(dots_saveable, save_only_these_names(h))":
        POLICIES.save_from_both_policies(POLICIES.dots_saveable,
                                         POLICIES.save_only_these_names("h")),
    "save_from_both_policies(nothing_saveable, save_any_names_but_these(h))":
        POLICIES.save_from_both_policies(POLICIES.nothing_saveable,
                                         POLICIES.save_any_names_but_these("h")),
    "<cos_and_dots>": cos_and_dots,
    "<wide_sines>": wide_sines,
}
RECOMPUTED = ("sin", "cos", "tanh", "exp", "name", "reduce_precision", "reshard",
              "dot_general")


def _mesh():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _arrays(mesh):
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P(None, "y")))
    return x, w


def _inner_jit(mesh):
    inner = jax.jit(lambda a, b: jnp.sin(a @ b))

    def body(x, w):
        return jnp.sum(jnp.tanh(inner(x, w) @ w))
    return body


def _named_inside(mesh):
    inner = jax.jit(lambda a, b: checkpoint_name(jnp.cos(a @ b), "h") * 2.0)

    def body(x, w):
        return jnp.sum(jnp.sin(inner(x, w)) * x)
    return body


def _product_returned(mesh):
    """the inner jit returns its product (a saved value it returns: not returned twice)"""
    inner = jax.jit(lambda a, b: (a @ b, jnp.exp(a)))

    def body(x, w):
        p, e = inner(x, w)
        return jnp.sum(jnp.tanh(p) * e)
    return body


def _nested(mesh):
    """a jit inside a jit, with its own out_sharding"""
    deep = jax.jit(lambda a, b: jnp.tanh(a @ b), out_shardings=NamedSharding(mesh, P("x", "y")))
    inner = jax.jit(lambda a, b: checkpoint_name(jnp.sin(deep(a, b)), "h") @ b)

    def body(x, w):
        return jnp.sum(jnp.cos(inner(x, w)))
    return body


def _two_calls(mesh):
    """one jitted helper called twice, the second on the first's result"""
    inner = jax.jit(lambda a, b: jnp.sin(a @ b))

    def body(x, w):
        return jnp.sum(jnp.exp(inner(inner(x, w), w)))
    return body


def _flat(mesh):
    """no inner jit: ``save_from_both_policies`` read on the body's own equations"""
    def body(x, w):
        h = checkpoint_name(jnp.sin(x @ w), "h")
        return jnp.sum(jnp.tanh(h @ w) * jnp.exp(h))
    return body


def _literal_operand(mesh):
    """a literal operand of the inner jit (a constant of the remat's body, as read)"""
    inner = jax.jit(lambda a, b, s: jnp.sin(a @ b) * s)

    def body(x, w):
        return jnp.sum(jnp.tanh(inner(x, w, 3.0) @ w))
    return body


BODIES = {"flat": _flat, "literal_operand": _literal_operand, "inner_jit": _inner_jit, "named_inside": _named_inside,
          "product_returned": _product_returned, "nested": _nested, "two_calls": _two_calls}
PAIRS = [(b, p) for b in BODIES for p in POLICY_CASES]


def _case(body_name, policy_name):
    mesh = _mesh()
    return jax.checkpoint(BODIES[body_name](mesh), policy=POLICY_CASES[policy_name]), \
        _arrays(mesh)


def _typed(shape, spec):
    entries = tuple(spec) + (None,) * (len(shape) - len(tuple(spec)))
    return tuple(shape), tuple(e if e is None or isinstance(e, str) else tuple(e)
                               for e in entries[:len(shape)])


def _inner_jaxprs(eqn):
    for value in eqn.params.values():
        for item in value if isinstance(value, tuple) else (value,):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns"):
                yield inner


def _jax_remats(jaxpr):
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "remat2" and eqn.params["differentiated"]:
            found.append(eqn)
        for inner in _inner_jaxprs(eqn):
            found += _jax_remats(inner)
    return found


def _jax_counts(jaxpr):
    counted = Counter()
    for eqn in jaxpr.eqns:
        counted[eqn.primitive.name] += 1
        for inner in _inner_jaxprs(eqn):
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


def _spec_operand_types(program, remat):
    for eq in program.equations:
        if eq is remat:
            return [program.value_types[n] for n in eq.operands]
        if eq.body is not None:
            found = _spec_operand_types(eq.body, remat)
            if found is not None:
                return found
    return None


def jax_side(f, args):
    closed = jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(*args)
    (remat,) = _jax_remats(closed.jaxpr)
    stored = Counter(_typed(v.aval.shape, v.aval.sharding.spec) for v in remat.invars)
    return stored, _picked(_jax_counts(remat.params["jaxpr"])), _picked(_jax_counts(closed.jaxpr))


def spec_side(f, args):
    gradient = grad_program(describe_program(f, *args), argnums=(0, 1))
    (remat,) = _spec_remats(gradient)
    stored = Counter(_typed(t.shape, t.spec or ()) for t in _spec_operand_types(gradient, remat))
    return stored, _picked(_spec_counts(remat.body)), _picked(_spec_counts(gradient)), remat


@checks("AD-21", "AD-22")
@pytest.mark.parametrize("body_name,policy_name", PAIRS, ids=[f"{b}-{p}" for b, p in PAIRS])
def test_an_inner_jit_is_split_by_the_policy_as_jax_splits_it(body_name, policy_name):
    f, args = _case(body_name, policy_name)
    jax_stored, jax_recomputed, jax_all = jax_side(f, args)
    spec_stored, spec_recomputed, spec_all, remat = spec_side(f, args)
    assert spec_stored == jax_stored
    assert spec_recomputed == jax_recomputed
    assert spec_all == jax_all
    assert remat.policy_unread is False


def _residual_types(f, args):
    _, linear = jax.linearize(jax.jit(f), *args)
    held = Counter(_typed(a.shape, a.sharding.spec)
                   for a in jax.tree_util.tree_leaves(linear) if hasattr(a, "sharding"))
    primal = linearize_program(describe_program(jax.jit(f), *args)).primal
    types = primal.value_types
    count = len(primal.outputs) - len(jax.tree_util.tree_leaves(jax.eval_shape(f, *args)))
    made = Counter(_typed(types[n].shape, types[n].spec or ())
                   for n in primal.outputs[len(primal.outputs) - count:])
    return held, made


@checks("AD-21", "AD-22")
@pytest.mark.parametrize("body_name,policy_name", PAIRS, ids=[f"{b}-{p}" for b, p in PAIRS])
def test_the_residuals_of_a_split_inner_jit_are_placed_as_compiled(body_name, policy_name):
    f, args = _case(body_name, policy_name)
    held, made = _residual_types(f, args)
    assert made == held


@checks("AD-21", "AD-22")
@pytest.mark.parametrize("policy_name", ["default"])
def test_a_body_closing_over_a_literal_loop_bound_is_differentiated(policy_name):
    """A ``fori_loop`` in the body: its literal bound is a constant of the body as read,
    written again as a literal where the remat is inlined (session 20's rewrites refused
    it, PROG-0, where JAX differentiates it); stored and recomputed as JAX's."""
    mesh = _mesh()
    x, w = _arrays(mesh)
    v = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P()))

    def body(x, w):
        h = jax.lax.fori_loop(0, 2, lambda i, h: jnp.sin(h @ w), x)
        return jnp.sum(jnp.tanh(h))
    f = jax.checkpoint(body, policy=POLICY_CASES[policy_name])
    jax_stored, jax_recomputed, jax_all = jax_side(f, (x, v))
    spec_stored, spec_recomputed, spec_all, remat = spec_side(f, (x, v))
    assert spec_stored == jax_stored
    assert spec_recomputed == jax_recomputed
    assert not remat.policy_unread


@checks("AD-22", "COLL-8")
def test_a_scan_in_the_body_under_everything_saveable_is_left_open():
    """Session 20 stored a loop's results whole under ``everything_saveable``; JAX's scan
    rule stores what its body saves, per iteration (a value more here): the spec now
    recomputes everything there, marked ``policy_unread``, rather than answer otherwise."""
    mesh = _mesh()
    x, _ = _arrays(mesh)
    xs = jax.device_put(jnp.ones((3, 16, 8)), NamedSharding(mesh, P(None, "x", None)))

    def body(x, xs):
        h, _ = jax.lax.scan(lambda h, a: (jnp.sin(h * a), None), x, xs)
        return jnp.sum(jnp.tanh(h))
    f = jax.checkpoint(body, policy=POLICIES.everything_saveable)
    jax_stored, _, _ = jax_side(f, (x, xs))
    default_stored, _, _ = jax_side(jax.checkpoint(body), (x, xs))
    assert jax_stored != default_stored
    *_, remat = spec_side(f, (x, xs))
    assert remat.policy == "everything_saveable" and remat.policy_unread


def offloads_dots(prim, *_, **__):
    from jax._src.interpreters.partial_eval import Offloadable
    return Offloadable("device", "pinned_host") if prim.name == "dot_general" else False


@checks("AD-21", "COLL-8")
@pytest.mark.parametrize("policy", [offloads_dots], ids=["offloads"])
def test_a_user_policy_the_bridge_cannot_tabulate_is_left_open(policy):
    """The other side of a user's policy read into a table: one that offloads (memory
    kinds the spec does not read) is named only, so the spec recomputes everything, marks
    the remat ``policy_unread`` and COLL-8 leaves its communication open."""
    mesh = _mesh()
    x, w = _arrays(mesh)
    f = jax.checkpoint(_flat(mesh), policy=policy)
    (remat,) = describe_program(f, x, w).equations
    assert remat.policy == f"<{policy.__name__}>"
    applied = vjp_program(describe_program(f, x, w)).applied
    assert _spec_remats(applied)[0].policy_unread
    left = unread_remat(applied)
    assert left is not None and left.rule == "COLL-8"


def test_a_user_policy_s_table_names_what_it_saves():
    mesh = _mesh()
    x, w = _arrays(mesh)
    (remat,) = describe_program(jax.checkpoint(_flat(mesh), policy=cos_and_dots),
                                x, w).equations
    assert remat.policy.startswith("<cos_and_dots> saves dot_general(float32[16x8] "
                                   "float32[8x8]) cos(float32[16x8]) and recomputes ")
    assert "name[h](float32[16x8])" in remat.policy


def _communicating_step(policy):
    """An Auto mesh, an inner jit constraining a named value inside the remat: the
    backward pass's remat recomputes (or reads, stored) it as the policy says."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("y", None)))
    cotangent = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", "y")))

    @jax.jit
    def inner(a):
        h = checkpoint_name(jnp.cos(a * 2.0), "h")
        return jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(None, "y")))

    def body(x, w):
        return jnp.sin(inner(x)) * w
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
def test_what_a_remat_splitting_an_inner_jit_communicates_is_the_compiled_program_s(
        policy_name):
    f, args, cotangent = _communicating_step(POLICY_CASES[policy_name])
    step = _spec_collectives(f, args, cotangent)
    assert step.complete, step.undetermined
    assert _keys(step) == _compiled_collectives(f, args, cotangent)


def _loop_body(mesh):
    def body(x, w):
        h = jax.lax.fori_loop(0, 2, lambda i, h: checkpoint_name(jnp.sin(h), "h") * 2.0, x)
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(None, "y")))
        return jnp.cos(h) * w
    return body


def _cond_body(mesh):
    def body(x, w):
        h = jax.lax.cond(x[0, 0] > 0, lambda a: checkpoint_name(jnp.sin(a), "h"),
                         lambda a: jnp.cos(a), x)
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(None, "y")))
        return jnp.tanh(h) * w
    return body


NEIGHBOURS = {"fori_loop": _loop_body, "cond": _cond_body}


def _open_step(body_name, policy):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("y", None)))
    cotangent = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x", "y")))
    return jax.checkpoint(NEIGHBOURS[body_name](mesh), policy=policy), (x, w), cotangent


def _jax_operands(f, args, cotangent):
    closed = jax.make_jaxpr(lambda x, w, ct: jax.vjp(f, x, w)[1](ct))(*args, cotangent)
    (remat,) = _jax_remats(closed.jaxpr)
    return Counter((v.aval.shape, str(v.aval.dtype)) for v in remat.invars)


@checks("AD-22", "COLL-8")
@pytest.mark.parametrize("body_name", list(NEIGHBOURS))
def test_a_loop_or_cond_in_the_body_is_still_left_open_under_a_saving_policy(body_name):
    """The near neighbour: JAX splits a loop's or a cond's body by the policy too (their
    own partial-evaluation rules), which the spec does not write: it recomputes everything,
    marks the remat ``policy_unread`` and leaves the communication open (COLL-8) rather than
    guess; under JAX's default it is read."""
    saving = POLICIES.save_only_these_names("h")
    f, args, cotangent = _open_step(body_name, saving)
    plain, _, _ = _open_step(body_name, None)
    assert _jax_operands(f, args, cotangent) != _jax_operands(plain, args, cotangent)
    applied = vjp_program(describe_program(f, *args)).applied
    (remat,) = _spec_remats(applied)
    assert remat.policy == "save_only_these_names(h)" and remat.policy_unread
    left = unread_remat(applied)
    assert left is not None and left.rule == "COLL-8"
    assert not _spec_collectives(f, args, cotangent).complete
    read = vjp_program(describe_program(plain, *args)).applied
    assert not _spec_remats(read)[0].policy_unread and unread_remat(read) is None
