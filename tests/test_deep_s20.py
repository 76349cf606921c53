"""Session 20's deep-run shapes (issue 33), each pinned against real JAX 0.10.2 on both
sides of its edge: PROP-24 (a cond's branches returning a result on different shardings
written before propagation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

A, E = AxisType.Auto, AxisType.Explicit


def _mesh(types: tuple, shape: tuple = (2, 4)) -> jax.sharding.Mesh:
    devices = np.array(jax.devices()[:8][::-1]).reshape(shape)
    return jax.sharding.Mesh(devices, ("x", "y"), axis_types=types)


def _held(f, *args):
    """JAX's outcome (the class of what it raised, or the result's spec) and the spec's
    verdict on the same program."""
    jitted = jax.jit(f)
    verdict = explain_program(describe_program(jitted, *args))
    try:
        real = jitted(*args).sharding
    except Exception as error:  # noqa: BLE001  (what JAX raises is the fact held)
        real = type(error).__name__
    return real, verdict


def _cond(mesh, first, second, size: int = 8, split: P = P()):
    """``cond(p, first, second, x, x)`` over ``mesh``; ``first`` and ``second`` take a
    ``put(value, spec)`` constraining over ``mesh`` and return a branch."""
    def put(v, spec):
        return lax.with_sharding_constraint(v, NamedSharding(mesh, spec))
    x = jax.device_put(jnp.ones((size,)), NamedSharding(mesh, split))

    def f(x, w):
        return lax.cond(x.sum() > 0, first(put), second(put), x, w)
    return f, x, x


def _constrained(spec):
    return lambda put: (lambda t, u: put(jnp.sin(t) + u, spec))


def _product(put):
    return lambda t, u: t * u


REFUSED = {
    # the product is written on its type (replicated), the constraint on P('x')
    "mixed mesh, one branch constrained": ((A, E), _constrained(P("x")), _product),
    # the Explicit axis first: the same
    "Explicit axis first": ((E, A), _constrained(P("y")), _product),
    # a type-writing operation of another kind in the other branch
    "the other branch's sin": ((A, E), _constrained(P("x")),
                               lambda put: (lambda t, u: jnp.sin(t))),
    # two constraints apart, over an all-Auto mesh too
    "two constraints apart, all Auto": ((A, A), _constrained(P("x")), _constrained(P())),
    "two constraints on other axes, all Auto": ((A, A), _constrained(P("x")),
                                                _constrained(P("y"))),
}

ACCEPTED = {
    # all Auto: the product carries no sharding into the module
    "all Auto, one branch constrained": ((A, A), _constrained(P("x")), _product, P("x")),
    "both constrained alike": ((A, E), _constrained(P("x")), _constrained(P("x")), P("x")),
    # the constraint replicated, or left open: the product's type is replicated too
    "the constraint P()": ((A, E), _constrained(P()), _product, P(None)),
    "the constraint UNCONSTRAINED": ((A, E), _constrained(P(P.UNCONSTRAINED)), _product,
                                     P(None)),
    # the other branch returns its input: nothing is written on it
    "the other branch returns its input": ((A, E), _constrained(P("x")),
                                           lambda put: (lambda t, u: t), P("x")),
}


@checks("PROP-24")
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_prop_24_a_cond_whose_branches_write_different_shardings_is_refused(case):
    types, first, second = REFUSED[case]
    real, verdict = _held(*_cond(_mesh(types), first, second))
    assert real == "JaxRuntimeError"
    assert (verdict.accepted, verdict.rule, verdict.stage) == (False, "PROP-24", "compile")
    assert verdict.jax_error == "JaxRuntimeError" and verdict.path == "body[3]"
    assert "Inconsistent conditional sharding" in verdict.message


@checks("PROP-24")
@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_prop_24_a_cond_whose_branches_write_one_sharding_or_none_compiles(case):
    types, first, second, spec = ACCEPTED[case]
    real, verdict = _held(*_cond(_mesh(types), first, second))
    assert real.spec == spec
    assert verdict.accepted and verdict.out_shardings[0] == from_jax(real)


def test_prop_24_a_size_one_axis_splits_nothing():
    """Mesh (1, 8): the constraint P('x') is replicated, as the product's type is."""
    real, verdict = _held(*_cond(_mesh((A, E), (1, 8)), _constrained(P("x")), _product))
    assert real.spec == P(None) and verdict.out_shardings[0] == from_jax(real)


def test_prop_24_a_loop_whose_body_returns_a_constraint_compiles():
    """Over the mixed mesh a scan's carry led by a constraint compiles (no conditional);
    propagation leaves its result open there (PROP-13 reads Auto meshes only)."""
    mesh = _mesh((A, E))
    x = jax.device_put(jnp.ones((2,)), NamedSharding(mesh, P()))

    def f(x, w):
        put = NamedSharding(mesh, P("x"))
        return lax.scan(lambda c, t: (lax.with_sharding_constraint(jnp.sin(c) + t, put),
                                      None), x, w)[0]
    real, verdict = _held(f, x, jnp.ones((3, 2)))
    assert real.spec == P("x")
    assert verdict.accepted and verdict.out_shardings[0] is UNSPECIFIED and verdict.undetermined


def test_prop_24_leaves_open_a_branch_whose_written_sharding_is_not_read():
    """An inner jit's result in the other branch: whether its call writes the type is not
    read here, so the cond's result is left open with PROP-24's reason (JAX refuses it)."""
    second = lambda put: (lambda t, u: jax.jit(lambda a, b: a * b)(t, u))  # noqa: E731
    real, verdict = _held(*_cond(_mesh((A, E)), _constrained(P("x")), second))
    assert verdict.accepted
    assert [why for _, why in verdict.undetermined if why.startswith("[PROP-24]")]
    assert real == "JaxRuntimeError"


def test_prop_24_a_dead_cond_is_never_compiled():
    """The refused cond's result unused: dead-code elimination drops it and JAX runs."""
    f, x, w = _cond(_mesh((A, E)), _constrained(P("x")), _product)
    real, verdict = _held(lambda x, w: (f(x, w), x * 2)[1], x, w)
    assert real.spec == P(None) and verdict.out_shardings[0] == from_jax(real)


# --------------------------------------------------------------------------- COLL-16

def _coll_recipe(outputs: tuple):
    """Mesh (2, 1, 4), all Explicit: an inner jit over P('x') to P(('y', 'x')) whose
    result is typed whole (``f32[2]``), then tanh of it, a max and a reshard."""
    from shardlaw.properties.collectives_harness import Recipe
    return Recipe(mesh=(2, 1, 4), reversed_devices=False,
                  inputs=(((2,), (None,)), ((2,), ("x",))),
                  steps=(("input", (), 0), ("inner", (0,), (("x",), (("y", "x"),))),
                         ("unary", (1,), "tanh"), ("input", (), 1), ("binary", (0, 3), "max"),
                         ("reshard", (3,), (("y", "x"),))),
                  outputs=outputs, devices=(), out_shardings=(), axis_types="EEE")


@checks("COLL-16")
@pytest.mark.parametrize("outputs, gathers", [((4, 5, 1), 2), ((4, 5, 2), 2), ((4, 5), 0)])
def test_coll_16_a_result_typed_whole_is_gathered_after_the_inner_jit_that_split_it(
        outputs, gathers):
    """Returned, the inner jit's result (split over 'x' by its out sharding, typed whole)
    is all-gathered over 'x' (8 bytes) after the inner jit's own all-gather of sin's
    operand; read by tanh instead, the gather is tanh's operand's; unused, the inner jit
    is dead and nothing moves."""
    from shardlaw.properties.collectives_harness import compare_collectives
    outcome = compare_collectives(_coll_recipe(outputs))
    assert outcome.disagreements == []
    assert [c[0] for c in outcome.real] == ["all-gather"] * gathers
    assert outcome.predicted == outcome.real


def test_coll_16_a_type_split_by_no_axis_is_returned_whole():
    from shardlaw.spec import AxisType as T
    from shardlaw.spec import Mesh
    from shardlaw.spec.program.collectives_boundaries import returned_split
    from shardlaw.spec.program.description import Value
    mesh = Mesh.iota((2, 4), ("x", "y"), (T.Explicit,) * 2)
    assert returned_split((("x",), ()), Value.typed((4, 16), mesh=mesh.abstract), mesh) == (
        (), ())


# --------------------------------------------------------------------------- PROP-25

def _squeezed(a):
    return jnp.squeeze(a[:, None, :], 1)   # (broadcast_in_dim, then squeeze: two reshapes)


@checks("PROP-25")
@pytest.mark.parametrize("types, split, returned", [
    # 'x' Explicit, 'y' Auto: the type's constraint [{"x", ?}, ...] between the two
    # reshapes keeps them apart, and the Auto axis before 'x' is given up, as sin(a) does
    ((E, A), P(("y", "x"), None), P("x", None)),
    # the Auto axis after the Explicit one is kept
    ((E, A), P(("x", "y"), None), P(("x", "y"),)),
    # all Auto: the pair folds back to ``a``, returned on its placement
    ((A, A), P(("y", "x"), None), P(("y", "x"), None)),
    # 'y' Explicit, 'x' Auto: ('y', 'x') is the type's 'y' grown by 'x'
    ((A, E), P(("y", "x"), None), P(("y", "x"),)),
    # all Explicit: the type is the placement
    ((E, E), P(("y", "x"), None), P(("y", "x"), None)),
])
def test_prop_25_a_reshape_of_a_reshape_is_not_folded_where_types_are_written(
        types, split, returned):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8][::-1]).reshape(4, 2), ("x", "y"),
                             axis_types=types)
    a = jax.device_put(jnp.ones((16, 2)), NamedSharding(mesh, split))
    real, verdict = _held(_squeezed, a)
    assert real.spec == returned
    assert verdict.out_shardings[0] == from_jax(real)


def test_prop_25_the_deep_run_recipe_agrees():
    """The recipe of the deep run: the squeezed value returned beside an argmax."""
    from shardlaw.properties.propagation_harness import Recipe, compare_recipe
    recipe = Recipe(mesh=(4, 2), reversed_devices=True,
                    inputs=(((16, 2), (("y", "x"), None)), ((2,), (None,))),
                    steps=(("input", (), 0), ("squeeze", (0,), 1), ("transpose", (0,), (1, 0)),
                           ("input", (), 1), ("broadcast_add", (1, 3), None),
                           ("argmax", (1,), 0), ("reduce", (0,), ("max", 1))),
                    outputs=(5, 1), devices=(), out_shardings=((None,), None),
                    axis_types="EA")
    outcome = compare_recipe(recipe)
    assert outcome.disagreements == [] and not outcome.abstained
