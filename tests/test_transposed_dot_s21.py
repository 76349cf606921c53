"""A gradient's transposed products propagate (issue 33, session 21): the spec's own
``grad_program`` of a program with a ``dot_general`` held to ``jax.jit(jax.grad(f))`` on 8
CPU devices, its results' shardings and its compiled module's collectives.

JAX transposes a ``dot_general`` into a ``dot_general`` of the cotangent and the other
operand, then a ``transpose`` back to the operand's dimensions; the spec's
``transposed_dot_general`` takes that product's factors whole
(:func:`~shardlaw.spec.program.sharding_factors.transposed_dot_general_factors`). Before,
every gradient result and every gradient step's collectives were left open
(``NotPropagated``, then AD's broadcast of its seed without parameters). Left open on
purpose, each beside a neighbour the rule predicts: a cotangent multiplied by AD's seed
(``mul(broadcast 1.0, w)``), which StableHLO folds to ``w`` before propagating (PROP-27),
a weight a product and a gradient's transposed product both gather, which XLA's dot
partitioning gathers twice (COLL-20), and a step where propagation meets one mesh axis on
two factors (PROP-4).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import grad_program, vjp_program
from shardlaw.spec.program.description import Opaque, Value
from shardlaw.spec.program.primitives import Factors, NotPropagated, entry_of_name
from shardlaw.spec.program.sharding_factors import (
    dot_general_factors, transposed_dot_general_factors,
)

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding
T = jax.sharding.AxisType


def mlp(w1, w2, x):
    return jnp.sum(jnp.tanh(x @ w1) @ w2)


def residual(w1, w2, x):
    return jnp.sum(jnp.sin(jnp.tanh(x @ w1) @ w2) * x)


def squares(w1, w2, x):
    return jnp.sum((x @ w1 @ w2) ** 2)


def nt(w1, w2, x):   # (x contracted with w2's second dimension: the rhs transposed)
    return jnp.sum(lax.dot_general(x, w2, (((1,), (1,)), ((), ()))) * w1)


def nt_scaled(w1, w2, x):
    return jnp.sum(lax.dot_general(x, w2, (((1,), (1,)), ((), ()))) * w1 * 3.0)


def batched(w1, w2, x):
    return jnp.sum(jnp.tanh(jnp.einsum("bsd,df->bsf", x, w1)) @ w2)


def per_batch(w1, w2, x):
    return jnp.sum(jnp.einsum("bsd,bdf->bsf", x, w1) * w2)


SHAPES = {batched: ((16, 32), (32, 16), (2, 8, 16)),
          per_batch: ((2, 16, 32), (2, 8, 32), (2, 8, 16))}


def _groups(groups):
    return tuple(sorted(tuple(g) for g in groups))


def held(f, mesh_shape, specs, argnums=(0, 1, 2), types=(T.Auto, T.Auto)):
    """(JAX's gradient shardings, the spec's (UNSPECIFIED: open) and its reasons; the
    compiled module's collectives, the spec's or why they are open)."""
    mesh = jax.make_mesh(mesh_shape, ("x", "y"), axis_types=types)
    shapes = SHAPES.get(f, ((16, 32), (32, 16), (16, 16)))
    args = [jax.device_put(jnp.ones(s), NS(mesh, p)) for s, p in zip(shapes, specs)]
    g = jax.jit(jax.grad(f, argnums=argnums))
    real = [r.sharding for r in g(*args)]
    text = g.lower(*args).compile().as_text()
    hlo = sorted((c.kind, _groups(c.replica_groups), c.bytes_per_device)
                 for c in collectives_in_hlo(text))
    verdict = explain_program(grad_program(describe_program(jax.jit(f), *args), argnums))
    step = verdict.collectives
    spec = step.undetermined if not step.complete else sorted(
        (c.kind, _groups(c.replica_groups.groups() if c.replica_groups else ()),
         c.bytes_per_device) for c in step)
    return real, verdict.out_shardings, verdict.undetermined, hlo, spec


def agrees(real, said):
    return all(s is not UNSPECIFIED and from_jax(r) == s for r, s in zip(real, said))


# --------------------------------------------------------------------------- the rule

def test_the_table_holds_a_rule_for_the_transposed_product():
    """The entry's sharding slot is a rule, no longer a NotPropagated."""
    rule = entry_of_name("transposed_dot_general").sharding
    assert callable(rule) and not isinstance(rule, NotPropagated)


@pytest.mark.parametrize("k", [0, 1])
def test_its_factors_are_the_primals_read_the_other_way(k):
    """The cotangent carries the primal result's factors, the other operand its own, the
    result the transposed operand's; the other operand's free factors are the reduced ones
    and the primal's contracted factor passes through (a batch dimension too)."""
    numbers = (((2,), (1,)), ((0,), (0,)))   # b×i×c @ b×c×j
    lhs, rhs, out = Value.typed((2, 4, 8)), Value.typed((2, 8, 6)), Value.typed((2, 4, 6))
    primal = dot_general_factors(Opaque((0, 1), primitive="dot_general", results=(out,),
                                        params=(("dimension_numbers", numbers),)), (lhs, rhs))
    made = Opaque((0, 1), primitive="transposed_dot_general",
                  results=((lhs, rhs)[k],), params=(("dimension_numbers", numbers),
                                                    ("transposed_operand", k)))
    rule = transposed_dot_general_factors(made, (out, (lhs, rhs)[1 - k]))
    assert rule == Factors((primal.results[0], primal.operands[1 - k]),
                           (primal.operands[k],), reduced=rule.reduced)
    free = {f for f in primal.operands[1 - k] if f not in primal.operands[k]}
    assert rule.reduced == free and "c0" in rule.passed_through and "b0" in rule.passed_through


def test_an_equation_without_its_operand_has_no_factors():
    """An equation a rewrite made without its parameters is named, not guessed."""
    made = Opaque((0,), primitive="transposed_dot_general", results=(Value.typed((4, 8)),))
    rule = entry_of_name("transposed_dot_general").sharding(made, (Value.typed((4, 6)),))
    assert isinstance(rule, NotPropagated)


# --------------------------------------------------------------------------- against JAX

AGREEING = {   # MLP, tensor-parallel, 2-D, batched and per-batch products' gradients
    "data parallel": (mlp, (2, 4), (P(), P(), P("x")), (0, 1)),
    "tensor parallel": (mlp, (2, 4), (P(None, "y"), P("y"), P("x")), (0, 1, 2)),
    "tensor parallel (4, 2)": (mlp, (4, 2), (P(None, "y"), P("y"), P("x")), (0, 1, 2)),
    "2-D weights": (mlp, (2, 4), (P("x", "y"), P("y", "x"), P("x")), (0, 1)),
    "residual": (residual, (2, 4), (P(None, "y"), P("y"), P("x")), (0, 1, 2)),
    "residual over both axes": (residual, (2, 4), (P(), P(), P(("x", "y"))), (0, 1, 2)),
    "squares": (squares, (2, 4), (P(None, "y"), P("y"), P("x")), (0, 1)),
    "rhs contracted on its second dimension": (nt, (2, 4), (P("x"), P(), P("x")), (0, 1, 2)),
    "batched activations": (batched, (2, 4), (P(None, "y"), P("y"), P("x")), (0, 1, 2)),
    "per-batch weights": (per_batch, (2, 4), (P("x"), P("x"), P("x")), (0, 1, 2)),
}


@pytest.mark.parametrize("name", sorted(AGREEING))
def test_a_gradients_results_and_collectives_are_predicted_as_jax_compiles_them(name):
    f, mesh, specs, argnums = AGREEING[name]
    real, said, why, hlo, spec = held(f, mesh, specs, argnums)
    assert agrees(real, said), (real, said, why)
    assert spec == hlo, (hlo, spec)


@pytest.mark.parametrize("types", [(T.Explicit, T.Explicit), (T.Explicit, T.Auto),
                                   (T.Auto, T.Explicit)])
def test_over_explicit_axes_too(types):
    """Data parallel over Explicit axes (the transposed products given out_sharding: the
    weights' types): predicted, with the weights' all-reduce."""
    real, said, _, hlo, spec = held(mlp, (2, 4), (P(), P(), P("x")), (0, 1, 2), types)
    assert agrees(real, said) and spec == hlo and any(k == "all-reduce" for k, _, _ in hlo)


def test_vjp_of_a_matmul_is_predicted_as_jax_compiles_it():
    """vjp_program's transposed products propagate as grad_program's: ``jax.vjp`` of a
    tensor-parallel layer applied to a cotangent on ``P('x')``, its input cotangents'
    shardings and its collectives as JAX compiles them."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(T.Auto,) * 2)
    w = jax.device_put(jnp.ones((16, 32)), NS(mesh, P(None, "y")))
    x = jax.device_put(jnp.ones((8, 16)), NS(mesh, P("x")))
    ct = jax.device_put(jnp.ones((8, 32)), NS(mesh, P("x")))

    def layer(w, x):
        return jnp.tanh(x @ w)
    applied = jax.jit(lambda w, x, ct: jax.vjp(layer, w, x)[1](ct))
    real = [r.sharding for r in applied(w, x, ct)]
    hlo = sorted((c.kind, _groups(c.replica_groups), c.bytes_per_device)
                 for c in collectives_in_hlo(applied.lower(w, x, ct).compile().as_text()))
    program = describe_program(jax.jit(layer), w, x)
    given = (Value.placed((8, 32), from_jax(ct.sharding)),)
    verdict = explain_program(vjp_program(program, given).applied)
    assert agrees(real, verdict.out_shardings), (real, verdict.out_shardings)
    spec = sorted((c.kind, _groups(c.replica_groups.groups() if c.replica_groups else ()),
                   c.bytes_per_device) for c in verdict.collectives)
    assert verdict.collectives.complete and spec == hlo, (hlo, spec)


# --------------------------------------------------------------------------- left open

def test_a_cotangent_multiplied_by_the_seed_is_left_open():
    """PROP-27: ``sum(h * w1)``'s cotangent of ``h`` is ``mul(broadcast 1.0, w1)``, which
    StableHLO folds to ``w1``; with ``x`` on ``P(('x', 'y'))`` JAX returns ``x``'s gradient
    on ``P()`` (the cotangent stands where ``w1`` is placed), where the product as written
    carries ``P(('x', 'y'))``; over (4, 2) the results agree but XLA gathers ``x``. The
    spec leaves both open; the neighbour, ``w1`` placed as the cotangent is propagated, is
    predicted."""
    real, said, why, _, spec = held(nt, (2, 4), (P(), P(), P(("x", "y"))))
    assert real[2].spec == P() and all(s is UNSPECIFIED for s in said)
    assert "[PROP-27]" in why[0][1] and spec.rule == "PROP-27"
    real, said, _, hlo, spec = held(nt, (4, 2), (P(None, "y"), P(), P("x")), (0, 1))
    assert [k for k, _, _ in hlo] == ["all-gather"] and spec.rule == "PROP-27"
    real, said, _, hlo, spec = held(nt, (2, 4), (P("x"), P(), P("x")))
    assert agrees(real, said) and spec == hlo


def test_a_product_by_another_literal_is_left_open_alike():
    """A product by 3.0 is not folded, but the description keeps no literal's value: the
    spec leaves it open as it does a product by one (an abstention, not a guess)."""
    _, said, why, _, _ = held(nt_scaled, (2, 4), (P(), P(), P(("x", "y"))))
    assert all(s is UNSPECIFIED for s in said) and "[PROP-" in why[0][1]


def test_an_axis_met_on_two_factors_is_left_open():
    """FSDP-style weights on P('x') beside a batch on P('x'): propagation meets 'x' on
    two factors of a transposed product, the order of visiting decides (PROP-4); on
    P(None, 'x') the results are predicted."""
    real, said, why, _, spec = held(mlp, (2, 4), (P("x"), P("x"), P("x")), (0, 1))
    assert all(s is UNSPECIFIED for s in said) and "[PROP-4]" in why[0][1]
    real, said, _, _, _ = held(mlp, (2, 4), (P(None, "x"), P("x"), P("x")), (0, 1))
    assert agrees(real, said)


def test_a_weight_two_dots_gather_is_left_open():
    """COLL-20: ``w2`` on P('y', 'x') read by the forward product and by the gradient's
    transposed product is gathered over 'x' twice (two all-gathers of 512 bytes), as by two
    forward products; the spec's one reshard per value would make one, so it leaves the
    step open. The neighbour, one product gathering it, is predicted."""
    real, said, _, hlo, spec = held(nt, (2, 4), (P("x", "y"), P("y", "x"), P("x", "y")))
    assert agrees(real, said)
    assert hlo.count(("all-gather", ((0, 4), (1, 5), (2, 6), (3, 7)), 512)) == 2
    assert spec.rule == "COLL-20"
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(T.Auto,) * 2)
    w1, w2, x = (jax.device_put(jnp.ones(s), NS(mesh, p)) for s, p in (
        ((16, 32), P("x", "y")), ((32, 16), P("y", "x")), ((16, 16), P("x", "y"))))

    def one(w1, w2, x):
        return lax.dot_general(x, w2, (((1,), (1,)), ((), ())))

    def two(w1, w2, x):
        return one(w1, w2, x), lax.dot_general(w1 * 2, w2, (((1,), (0,)), ((), ())))
    for f, rule in ((one, None), (two, "COLL-20")):
        text = jax.jit(f).lower(w1, w2, x).compile().as_text()
        hlo = sorted((c.kind, _groups(c.replica_groups), c.bytes_per_device)
                     for c in collectives_in_hlo(text))
        step = explain_program(describe_program(jax.jit(f), w1, w2, x)).collectives
        if rule is None:
            assert step.complete and hlo == sorted(
                (c.kind, _groups(c.replica_groups.groups()), c.bytes_per_device)
                for c in step)
        else:
            assert not step.complete and step.undetermined.rule == rule


SPLITS = (P(), P("x"), P(None, "x"), P("y"), P(None, "y"), P("x", "y"), P("y", "x"))


@checks("PROP-27", "COLL-20")
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(f=st.sampled_from((mlp, residual, squares, nt)), shape=st.sampled_from(((2, 4), (4, 2))),
       w1=st.sampled_from(SPLITS), w2=st.sampled_from(SPLITS),
       x=st.sampled_from((P(), P("x"), P("y"), P(("x", "y")), P("x", "y"))),
       argnums=st.sampled_from(((0, 1), (0, 1, 2))))
def test_drawn_gradients_never_disagree_with_jax(f, shape, w1, w2, x, argnums):
    """A drawn MLP gradient: each result the spec predicts is JAX's, and a complete list
    of collectives is the compiled module's; an open one names its rule."""
    real, said, why, hlo, spec = held(f, shape, (w1, w2, x), argnums)
    for r, s in zip(real, said):
        assert s is UNSPECIFIED or from_jax(r) == s, (r, s)
    if isinstance(spec, list):
        assert spec == hlo, (hlo, spec)
    else:
        assert spec.rule, spec   # (open, by a named rule)
