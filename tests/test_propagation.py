"""Where the compiler decides (PROP-1 to PROP-5), held to the compiled executable on 8 CPU
devices: drawn programs of the propagated primitives (properties/propagation_harness.py)
and the cases of notes/jax-facts.md section 19."""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings

from shardlaw.properties.propagation_harness import (
    TALLY, Recipe, compare_recipe, recipes,
)
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.primitives import TABLE, Factors, NotPropagated
from shardlaw.spec.program.propagation import Undetermined, predicted_results

Auto = jax.sharding.AxisType.Auto


@checks("PROP-1", "PROP-2", "PROP-3", "PROP-4", "PROP-5", "PROP-6", "PROP-7")
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(recipes(explicit=True))
def test_every_result_the_spec_places_is_where_the_executable_returns_it(recipe):
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements, (recipe, outcome.disagreements)
    # an abstention names its reason, never a silent UNSPECIFIED
    opened = sum(s is UNSPECIFIED for s in outcome.spec)
    assert len(outcome.undetermined) == opened


def _run(f, *placed):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    args = [jax.device_put(jnp.ones(shape), jax.sharding.NamedSharding(mesh, spec))
            for shape, spec in placed]
    real = tuple(r.sharding for r in jax.jit(f)(*args))
    verdict = explain_program(describe_program(f, *args))
    return real, verdict


P = jax.sharding.PartitionSpec


def test_the_issue_s_example_is_answered_as_jax_returns_it():
    def f(a, b):
        h = jnp.tanh(a @ b)
        return h.sum(0), h.T, h.reshape(4, -1)
    real, verdict = _run(f, ((16, 32), P("x", "y")), ((32, 64), P("y", None)))
    assert [r.spec for r in real] == [P(), P(None, "x"), P("x")]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    assert verdict.undetermined == ()


@pytest.mark.parametrize("left, right, expected", [
    (P("x", "y"), P("x", "y"), P("x", "y")),      # the same split
    (P("x", None), P("y", None), P()),            # a conflict: the prefix shared
    (P("x", None), P(None, "y"), P("x", "y")),    # each factor from the operand that has it
    (P("x", None), P(), P("x", None)),            # an unsplit input does not block
])
def test_conflicts_keep_the_prefix_the_operands_share(left, right, expected):
    real, verdict = _run(lambda a, b: (a + b,), ((8, 8), left), ((8, 8), right))
    assert real[0].spec == expected
    assert verdict.out_shardings == (from_jax(real[0]),)


def test_an_intermediate_takes_the_larger_operand_s_split_before_a_broadcast_s():
    # elementwise operations propagate first (Shardy's op priority): the broadcast's result
    # is split as ``a`` before the broadcast's own operand is read
    real, verdict = _run(lambda a, b: (a + b,), ((16, 4), P(None, "y")), ((4,), P("x")))
    assert real[0].spec == P(None, "y")
    assert verdict.out_shardings == (from_jax(real[0]),)


def test_one_axis_wanted_by_two_factors_goes_to_the_first_operand_s_of_one_size():
    # PROP-14 (more in tests/test_propagation_fsdp.py): the factors grow in turn
    real, verdict = _run(lambda a, b: (a @ b,), ((8, 8), P("x", None)), ((8, 8), P(None, "x")))
    assert real[0].spec == P("x", None)
    assert verdict.out_shardings == (from_jax(real[0]),) and verdict.undetermined == ()


def test_a_reshape_needing_a_sub_axis_is_left_open():
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    arg = jax.device_put(jnp.ones(64), jax.sharding.NamedSharding(mesh, P("y")))
    found = predicted_results(describe_program(lambda a: a.reshape(2, 32), arg))
    assert isinstance(found, Undetermined) and found.rule == "PROP-3"


def test_every_entry_holds_a_sharding_rule_or_says_why_not():
    for name, entry in TABLE.items():
        rule = entry.sharding
        assert isinstance(rule, (Factors, NotPropagated)) or callable(rule), name
    propagated = {n for n, e in TABLE.items() if not isinstance(e.sharding, NotPropagated)}
    assert {"add", "tanh", "convert_element_type", "dot_general", "reduce_sum",
            "transpose", "broadcast_in_dim", "reshape"} <= propagated


def test_a_recipe_is_its_own_small_program():
    recipe = Recipe((8,), False, (((8,), ("x",)),), (("input", (), 0),
                                                     ("unary", (0,), "neg")), (1,))
    outcome = compare_recipe(recipe)
    assert outcome.spec == tuple(from_jax(r) for r in outcome.jax)
    assert TALLY["agree"] >= 1


def _explained(f, placed, **options):
    """JAX's result shardings and the spec's verdict for ``jax.jit(f, **options)``."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    args = [jax.device_put(jnp.ones(shape), jax.sharding.NamedSharding(mesh, spec))
            for shape, spec in placed]
    jitted = jax.jit(f, **{k: tuple(None if v is None else jax.sharding.NamedSharding(mesh, v)
                                    for v in vs) for k, vs in options.items()})
    real = tuple(r.sharding for r in jitted(*args))
    return real, explain_program(describe_program(jitted, *args)), mesh


_MESH = [jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))]


def _wsc(x, mesh, *spec):
    return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(mesh, P(*spec)))


def test_a_constraint_on_a_value_of_one_use_places_it_and_propagates_backward():
    # Shardy moves the constraint onto the value it constrains when that is its only use:
    # ``cos`` then carries it back to ``g``, which is returned on it
    def f(a):
        g = jnp.sin(a)
        return g, _wsc(jnp.cos(g), _MESH[0], None, "y")
    real, verdict, _ = _explained(f, [((8, 8), P())])
    assert [r.spec for r in real] == [P(None, "y"), P(None, "y")]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def test_an_out_sharding_of_a_value_of_one_use_propagates_backward():
    def f(a):
        g = jnp.sin(a)
        return g, jnp.cos(g)
    real, verdict, _ = _explained(f, [((8, 8), P())], out_shardings=(None, P(None, "y")))
    assert [r.spec for r in real] == [P(None, "y"), P(None, "y")]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    assert verdict.undetermined == ()


def test_a_constraint_on_a_value_with_other_uses_is_moved_onto_it():
    # Shardy's import moves a closed constraint onto its operand whatever the operand's other
    # uses (only another constraint of another split keeps it off): ``g * 3`` is on 'x'
    def f(a):
        g = jnp.sin(a)
        return g * 3, _wsc(g, _MESH[0], "x") * 2
    real, verdict, _ = _explained(f, [((8,), P("y"))])
    assert [r.spec for r in real] == [P("x"), P("x")]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


U = P.UNCONSTRAINED


@pytest.mark.parametrize("name, f, spec, expected", [
    # a constraint's open dimension grows from a later constraint through it, whatever the
    # value's other uses; its closed ones stay as written
    ("open dimension, later constraint", lambda a: (
        (lambda b: (_wsc(b, _MESH[0], "x", None), jnp.sin(b)))(_wsc(a, _MESH[0], U, None))),
     P(None, "x"), [P("x"), P("x")]),
    ("closed dimension, later constraint", lambda a: (
        (lambda b: (jnp.sin(b), _wsc(b, _MESH[0], "x", None)))(_wsc(a, _MESH[0], None, U))),
     P(), [P(), P("x")]),
    # a value under two constraints of different splits takes each through propagation
    ("two constraints", lambda a: (lambda g: (_wsc(g, _MESH[0], "x", None),
                                             _wsc(g, _MESH[0], None, "y"), g * 2))(jnp.sin(a)),
     P(), [P("x"), P(None, "y"), P("x", "y")]),
    # a chain of constraints: the uses after its last read its last (the return does not)
    ("a chain's later use", lambda a: (lambda g: (lambda z: (z, jnp.cos(g)))(
        _wsc(_wsc(g, _MESH[0], "x", None), _MESH[0], None, "y")))(jnp.sin(a)),
     P(), [P(None, "y"), P(None, "y")]),
    ("a chain's operand returned", lambda a: (lambda g: (lambda z: (z, g))(
        _wsc(_wsc(g, _MESH[0], "x", None), _MESH[0], None, "y")))(jnp.sin(a)),
     P(), [P(None, "y"), P("x")]),
])
def test_constraints_are_imported_and_propagated_as_the_partitioner_does(name, f, spec,
                                                                         expected):
    real, verdict, _ = _explained(f, [((8, 8), spec)])
    assert [r.spec for r in real] == expected
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    assert verdict.undetermined == ()


@pytest.mark.parametrize("name, f, shapes", [
    ("slice", lambda a: (a[:8], a[2:10:2]), [((16, 8), P("x", "y"))]),
    ("concatenate", lambda a, b: (jnp.concatenate([a, b], 0),),
     [((16, 8), P(None, "y")), ((16, 8), P("x", "y"))]),
    ("pad (in an inner jit)", lambda a: (jnp.pad(a, ((1, 1), (0, 0))),), [((16, 8), P("x", "y"))]),
    ("dynamic_slice", lambda a: (jax.lax.dynamic_slice(a, (1, 0), (4, 8)),),
     [((16, 8), P("x", "y"))]),
    ("argmax", lambda a: (jnp.argmax(a, 0),), [((16, 8), P("x", "y"))]),
    ("cumsum (in an inner jit)", lambda a: (jnp.cumsum(a, 0),), [((16, 8), P("x", "y"))]),
    ("sort (in an inner jit)", lambda a: (jnp.sort(a, 1),), [((16, 8), P("x", None))]),
    ("iota", lambda a: (a + jax.lax.broadcasted_iota(jnp.float32, (16, 8), 0),),
     [((16, 8), P("x", "y"))]),
    ("where", lambda a, b: (jnp.where(a > b, a, b),),
     [((16, 8), P("x")), ((16, 8), P(None, "y"))]),
    ("squeeze", lambda a: (jax.lax.squeeze(a[:, None], (1,)),), [((16, 8), P("x", "y"))]),
    ("take (a gather in an inner jit)", lambda a: (jnp.take(a, jnp.arange(4), axis=0),),
     [((16, 8), P(None, "y"))]),
])
def test_the_further_primitives_propagate_as_the_executable_places(name, f, shapes):
    real, verdict, _ = _explained(f, shapes)
    assert verdict.undetermined == (), name
    assert verdict.out_shardings == tuple(from_jax(r) for r in real), name


def test_every_equation_s_splits_are_public_inner_jits_inlined():
    from shardlaw.spec.program.propagation import equation_splits
    mesh = _MESH[0]
    a = jax.device_put(jnp.ones((16, 8)), jax.sharding.NamedSharding(mesh, P("x", "y")))
    found = equation_splits(describe_program(lambda a: (jnp.cumsum(jnp.sin(a), 0),), a))
    assert [(path, name) for path, name, _, _ in found] == [
        ("body[0]", "sin"), ("body[1].jit.body[0]", "cumsum")]
    assert found[1][3] == ((("x",), ("y",)),)


def test_no_entry_is_left_without_a_reason():
    from shardlaw.spec.program.primitives import NOT_PROPAGATED_YET
    assert [n for n, e in TABLE.items() if e.sharding is NOT_PROPAGATED_YET] == []
    for name in ("concatenate", "slice", "pad", "gather", "dynamic_slice", "select_n",
                 "iota", "cumsum", "argmax", "sort", "squeeze", "expand_dims", "lt"):
        assert not isinstance(TABLE[name].sharding, NotPropagated), name


def test_a_sort_along_a_split_dimension_is_left_open():
    # a rank-1 sort on 'x' comes back P(), a rank-2 one on P('x', 'y') keeps it: the
    # partitioner's choice, not propagation's
    real, verdict, _ = _explained(lambda a: (jnp.sort(a, 0),), [((8,), P("x"))])
    assert real[0].spec == P()
    assert verdict.out_shardings == (UNSPECIFIED,)
    assert "needs unsplit" in verdict.undetermined[0][1]


def test_a_conflict_keeps_the_shared_prefix_though_the_result_is_not_split_yet():
    # the deep run's disagreement: the batch factor's ('z','x') and ('z','y') share 'z'
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(Auto,) * 3)
    a = jax.device_put(jnp.ones((8, 4, 16)), jax.sharding.NamedSharding(mesh, P(("z", "x"), "y")))
    b = jax.device_put(jnp.ones((8, 16, 4)), jax.sharding.NamedSharding(mesh, P(("z", "y"))))
    f = lambda a, b: (jnp.matmul(a, b),)
    real = jax.jit(f)(a, b)[0].sharding
    assert real.spec == P("z", "y")
    assert explain_program(describe_program(f, a, b)).out_shardings == (from_jax(real),)


def test_dimension_numbers_read_numpy_2_scalars_in_a_described_repr():
    """A gather's dimension numbers as a description holds them, written by numpy 2 (the steps
    fuzz layer's sort under grad met ``np.int64(0)`` and raised a bare ValueError)."""
    from shardlaw.spec.program.sharding_factors import dimension_numbers
    text = "GatherDimensionNumbers(offset_dims=(np.int64(0), 2), collapsed_slice_dims=(1,))"
    assert dimension_numbers(text, ("offset_dims", "collapsed_slice_dims")) == {
        "offset_dims": (0, 2), "collapsed_slice_dims": (1,)}


# --------------------------------------------------------------------------- abstract, Explicit

from shardlaw.spec import AbstractMesh as SpecAbstractMesh  # noqa: E402
from shardlaw.spec.program.propagation_spelling import predicted_out_shardings  # noqa: E402


def _issue_step(a, b):
    h = jnp.tanh(a @ b)
    return h.sum(0), h.T, h.reshape(4, -1)


def test_the_issue_s_example_over_an_abstract_mesh_is_spelled_as_on_a_concrete_one():
    abstract = jax.sharding.AbstractMesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    args = [jax.ShapeDtypeStruct(shape, jnp.float32,
                                 sharding=jax.sharding.NamedSharding(abstract, spec))
            for shape, spec in (((16, 32), P("x", "y")), ((32, 64), P("y", None)))]
    found = predicted_out_shardings(describe_program(jax.jit(_issue_step), *args))
    real, _ = _run(_issue_step, ((16, 32), P("x", "y")), ((32, 64), P("y", None)))
    mesh = SpecAbstractMesh((2, 4), ("x", "y"))
    assert [(s.mesh, s.spec) for s in found] == [(mesh, from_jax(r).spec) for r in real]


def test_an_abstract_mesh_of_65536_devices_is_propagated_without_devices():
    from shardlaw.spec import NamedSharding as N
    from shardlaw.spec import P as SP
    from shardlaw.spec.program.description import Opaque, Program, Value
    mesh = SpecAbstractMesh((256, 256), ("data", "model"))
    a = Value.shape_dtype((1024, 4096), sharding=N(mesh, SP("data", "model")))
    b = Value.shape_dtype((4096, 512), sharding=N(mesh, SP("model", None)))
    dot = Opaque((0, 1), primitive="dot_general", results=(Value.typed((1024, 512)),),
                 params=(("dimension_numbers", (((1,), (0,)), ((), ()))),))
    flip = Opaque((2,), primitive="transpose", results=(Value.typed((512, 1024)),),
                  params=(("permutation", (1, 0)),))
    found = predicted_out_shardings(Program((a, b), (dot, flip), outputs=(2, 3)))
    assert [s.spec for s in found] == [SP("data"), SP(None, "data")]
    assert all(s.mesh == mesh for s in found)


def test_a_mixed_mesh_propagates_its_auto_axes_beside_the_explicit_types():
    # seen: 'x' Explicit, 'y' Auto; the types hold 'x', propagation brings 'y'
    E = jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(E, Auto))
    a = jax.device_put(jnp.ones((16, 32)), jax.sharding.NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(jnp.ones((32, 64)), jax.sharding.NamedSharding(mesh, P(None, "y")))

    def f(a, b):
        return jnp.sin(a), (a * 2).sum(1), (jnp.cos(a) + 1.0).sum(0) * b[0, :32]
    real = tuple(r.sharding for r in jax.jit(f)(a, b))
    assert [r.spec for r in real] == [P("x", "y"), P("x"), P("y")]
    program = describe_program(f, a, b)
    assert explain_program(program).out_shardings == tuple(from_jax(r) for r in real)
    assert predicted_out_shardings(program) == tuple(from_jax(r) for r in real)


def test_a_constraint_s_unconstrained_dimensions_are_open_to_propagation():
    def f(a):
        g = jnp.sin(a)
        return (_wsc(g, _MESH[0], P.UNCONSTRAINED, "y"),)
    real, verdict, _ = _explained(f, [((8, 8), P("x", None))])
    assert real[0].spec == P("x", "y")
    assert verdict.out_shardings == (from_jax(real[0]),)


def test_an_inner_jit_s_shardings_are_fixed_points_of_propagation():
    def f(a):
        inner = jax.jit(lambda t: jnp.sin(t) * 2.0,
                        in_shardings=jax.sharding.NamedSharding(_MESH[0], P(None, "y")),
                        out_shardings=jax.sharding.NamedSharding(_MESH[0], P("x")))
        c = jnp.cos(a)
        return c, jnp.exp(inner(c))
    real, verdict, _ = _explained(f, [((8, 8), P())])
    assert [r.spec for r in real] == [P(None, "y"), P("x")]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def test_a_shard_map_s_specs_place_its_operands_and_results():
    # its in spec is moved onto the operand (sin's value loses the 'y' it had from ``a``),
    # its out spec places its result; the body is not entered
    def f(a):
        s = jnp.sin(a)
        inner = jax.shard_map(lambda t: jnp.cos(t) * 2.0, mesh=_MESH[0], in_specs=P("x"),
                              out_specs=P("x"))
        return s, jnp.exp(inner(s))
    real, verdict, _ = _explained(f, [((8, 8), P(None, "y"))])
    assert [r.spec for r in real] == [P("x"), P("x")]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def test_a_result_typed_split_in_every_dimension_keeps_its_type_on_a_mixed_mesh():
    # JAX's out sharding of a result whose type splits every dimension is the type's: the
    # Auto 'y' a rank-2 result keeps after the Explicit 'x' is not kept at rank 1
    E = jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(E, Auto))
    v = jax.device_put(jnp.ones((8,)), jax.sharding.NamedSharding(mesh, P(("x", "y"))))
    m = jax.device_put(jnp.ones((8, 16)), jax.sharding.NamedSharding(mesh, P(("x", "y"))))
    f = lambda v, m: (jnp.sin(v), jnp.sin(m))
    real = tuple(r.sharding for r in jax.jit(f)(v, m))
    assert [r.spec for r in real] == [P("x"), P(("x", "y"))]
    program = describe_program(f, v, m)
    assert explain_program(program).out_shardings == tuple(from_jax(r) for r in real)
    assert predicted_out_shardings(program) == tuple(from_jax(r) for r in real)


@pytest.mark.parametrize("name, f, shapes, expected", [
    # a carry joins its initial split and the body's next one; ys stack along a new dimension
    ("scan", lambda c, xs: jax.lax.scan(lambda c, x: (jnp.sin(c) + x, c * 2.0), c, xs),
     [((8, 8), P("x")), ((4, 8, 8), P(None, None, "y"))], [P("x", "y"), P(None, "x", "y")]),
    # the scanned dimension's split does not reach the body
    ("scan over a split dimension", lambda c, xs: jax.lax.scan(
        lambda c, x: (c, jnp.sin(x)), c, xs)[1].sum(0),
     [((8, 8), P()), ((4, 8, 8), P("x"))], [P()]),
    ("cond", lambda a, b: (jax.lax.cond(a.sum() > 0, lambda t, u: jnp.sin(t) + u,
                                        lambda t, u: t * u, a, b),),
     [((8, 8), P("x")), ((8, 8), P(None, "y"))], [P("x", "y")]),
    ("while", lambda a, b: (jax.lax.while_loop(lambda s: s[1] < 3, lambda s: (
        jnp.sin(s[0]) * b, s[1] + 1), (a, 0))[0],),
     [((8, 8), P(None, "y")), ((8, 8), P("x", None))], [P("x", "y")]),
    ("remat", lambda a, b: (jax.checkpoint(lambda t, u: jnp.sin(t) * u)(a, b),),
     [((8, 8), P("x")), ((8, 8), P(None, "y"))], [P("x", "y")]),
])
def test_control_flow_bodies_propagate(name, f, shapes, expected):
    real, verdict, _ = _explained(lambda *a: tuple(jax.tree.leaves(f(*a))), shapes)
    assert [r.spec for r in real] == expected, name
    assert verdict.undetermined == (), name
    assert verdict.out_shardings == tuple(from_jax(r) for r in real), name


def test_a_cond_whose_branches_split_apart_is_left_open():
    # JAX returns P('y'): which branch's split the partitioner met first decides
    f = lambda a, b: (jax.lax.cond(a.sum() > 0, lambda t, u: jnp.sin(t), lambda t, u: u, a, b),)
    real, verdict, _ = _explained(f, [((8, 8), P("x")), ((8, 8), P("y"))])
    assert real[0].spec == P("y")
    assert verdict.out_shardings == (UNSPECIFIED,)
    assert "PROP-4" in verdict.undetermined[0][1]


def test_a_whole_slice_is_folded_away_before_an_in_spec_is_moved():
    # the deep run's disagreement (seed 32): a slice of every element is the argument
    # itself to the partitioner, and a shard_map's in spec is not moved onto it
    def f(a):
        whole = jax.lax.slice_in_dim(a, 0, 8, axis=0)
        inner = jax.shard_map(lambda t: jnp.cos(t) * 2.0, mesh=_MESH[0], in_specs=P(),
                              out_specs=P())
        return whole, inner(whole)
    real, verdict, _ = _explained(f, [((8, 8), P(None, "y"))])
    assert [r.spec for r in real] == [P(None, "y"), P()]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def _mixed(types, placed, f):
    """The executable's result shardings, its collectives, and the spec's verdict of ``f``
    over a 2 x 4 mesh of axis types ``types`` ('x', 'y')."""
    from shardlaw.compiled_hlo import collectives_in_hlo
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"),
                             axis_types=types)
    args = [jax.device_put(jnp.ones(shape), jax.sharding.NamedSharding(mesh, spec))
            for shape, spec in placed]
    compiled = jax.jit(f(mesh)).lower(*args).compile()
    real = tuple(r.sharding for r in jax.jit(f(mesh))(*args))
    made = sorted((c.kind, c.replica_groups, c.bytes_per_device)
                  for c in collectives_in_hlo(compiled.as_text()))
    return real, made, explain_program(describe_program(f(mesh), *args))


def _said(verdict):
    return sorted((c.kind, c.replica_groups.groups(), c.bytes_per_device)
                  for c in verdict.collectives)


@pytest.mark.parametrize("types, spec, constraint, expected", [
    # the constraint joined with the type: its Explicit axes, then the constraint's
    ("AE", P(None, "y"), P(None, "x"), P(None, ("y", "x"))),
    ("AE", P("y", None), P("x", None), P(("y", "x"),)),
    # where the type holds an Explicit axis, an UNCONSTRAINED dimension is closed
    ("AE", P(None, "y"), P(P.UNCONSTRAINED, "x"), P(None, ("y", "x"))),
    ("AE", P(None, "y"), P(P.UNCONSTRAINED, P.UNCONSTRAINED), P(None, "y")),
    # a type without Explicit axes leaves it open: the value keeps its Auto 'x'
    ("AE", P("x", None), P("x", P.UNCONSTRAINED), P("x",)),
    ("EA", P("x", None), P(None, "y"), P("x", "y")),
])
def test_a_constraint_over_explicit_axes_is_joined_with_the_type(types, spec, constraint,
                                                                  expected):
    kinds = {"A": Auto, "E": jax.sharding.AxisType.Explicit}

    def f(mesh):
        return lambda a: (jnp.cos(jax.lax.with_sharding_constraint(
            jnp.sin(a), jax.sharding.NamedSharding(mesh, constraint))),)
    real, made, verdict = _mixed(tuple(kinds[t] for t in types), [((8, 8), spec)], f)
    assert [r.spec for r in real] == [expected]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    assert verdict.collectives.complete and _said(verdict) == made


@pytest.mark.parametrize("ins, outs, expected", [
    (P("x", None), None, P("x", "y")),             # in the callee as written, not joined
    (None, P(None, ("y", "x")), P(None, ("y", "x"))),
    (P("x", "y"), None, P("x", "y")),
])
def test_an_inner_jit_s_shardings_over_explicit_axes_stay_as_written(ins, outs, expected):
    """Over a mesh with Explicit axes an inner jit's shardings are constraints in its callee
    as written (``[{"x"}, {}]`` on a value typed ``P(None, 'y')``), its operand constrained
    to its type before: propagated through, not moved onto the operand."""
    def f(mesh):
        inner = jax.jit(lambda t: jnp.sin(t) * 2.0,
                        in_shardings=None if ins is None else jax.sharding.NamedSharding(
                            mesh, ins),
                        out_shardings=None if outs is None else jax.sharding.NamedSharding(
                            mesh, outs))
        return lambda a: (jnp.cos(inner(jnp.cos(a))),)
    real, made, verdict = _mixed((Auto, jax.sharding.AxisType.Explicit),
                                 [((8, 8), P(None, "y"))], f)
    assert [r.spec for r in real] == [expected]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    # (an inner jit's collectives, read off the inlined program: COLL-11)
    assert verdict.collectives.complete and _said(verdict) == made


@pytest.mark.parametrize("spec", [P("x", None), P(None, "y"), P("x", "y")])
def test_a_shard_map_s_specs_over_explicit_axes_place_its_results(spec):
    def f(mesh):
        body = jax.shard_map(lambda t: jnp.cos(t) * 2.0, mesh=mesh, in_specs=spec,
                             out_specs=spec)
        return lambda a: (jnp.sin(body(jnp.cos(a))),)
    real, made, verdict = _mixed((Auto, jax.sharding.AxisType.Explicit),
                                 [((8, 8), P(None, "y"))], f)
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    # (a shard_map's collectives, its specs boundaries: COLL-11, COLL-12)
    assert verdict.collectives.complete and _said(verdict) == made


def _inner(mesh, spec):
    return jax.jit(lambda t: jnp.cos(t) * 2.0,
                   in_shardings=jax.sharding.NamedSharding(mesh, spec))


def _manual(mesh, spec):
    return jax.shard_map(lambda t: jnp.cos(t) * 2.0, mesh=mesh, in_specs=spec, out_specs=spec)


@pytest.mark.parametrize("name, f, expected", [
    # two placements apart: neither is moved onto the value, propagation brings it both
    ("two inner jits", lambda m: lambda g: (g * 2, _inner(m, P("x", None))(g),
                                            _inner(m, P(None, "y"))(g)),
     [P("x", "y"), P("x"), P(None, "y")]),
    ("two shard_maps", lambda m: lambda g: (g * 2, _manual(m, P("x", None))(g),
                                            _manual(m, P(None, "y"))(g)),
     [P("x", "y"), P("x"), P(None, "y")]),
    ("an inner jit and a constraint", lambda m: lambda g: (
        g * 2, _inner(m, P("x", None))(g),
        jax.lax.with_sharding_constraint(g, jax.sharding.NamedSharding(m, P(None, "y")))),
     [P("x", "y"), P("x"), P(None, "y")]),
    # two placements alike: moved onto the value
    ("two inner jits alike", lambda m: lambda g: (g * 2, _inner(m, P("x", None))(g),
                                                  _inner(m, P("x", None))(g)),
     [P("x"), P("x"), P("x")]),
])
def test_a_value_passed_to_two_placements_is_placed_as_the_partitioner_does(name, f,
                                                                           expected):
    def g(mesh):
        return lambda a: f(mesh)(jnp.sin(a))
    real, _, verdict = _mixed((Auto, Auto), [((8, 8), P())], g)
    assert [r.spec for r in real] == expected
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)


def test_a_value_passed_to_two_placements_of_one_dimension_apart_is_left_open():
    # 'x' and 'y' both want the rows: the one propagation meets first wins (here 'x')
    def g(mesh):
        return lambda a: (lambda v: (v * 2, _inner(mesh, P("x", None))(v),
                                     _inner(mesh, P("y", None))(v)))(jnp.sin(a))
    real, _, verdict = _mixed((Auto, Auto), [((8, 8), P())], g)
    assert [r.spec for r in real] == [P("x"), P("x"), P("y")]
    assert verdict.out_shardings[0] is UNSPECIFIED
    assert verdict.undetermined[0][1].startswith("[PROP-4]")


@pytest.mark.parametrize("types, spec, target, expected", [
    # over Explicit axes alone a reshard lowers as a closed constraint to its type
    ("EE", P("x", None), P("y", None), P("y", None)),
    ("EE", P("x", None), P(None, "x"), P(None, "x")),
    ("EE", P("x", "y"), P(), P(None, None)),
    # over Auto axes alone it lowers to nothing: the value keeps its operand's split
    ("AA", P(None, "y"), P(), P(None, "y")),
    # the same Explicit axes beside an Auto one: the type's 'x', and 'y' grown beside it
    ("EA", P("x", "y"), P("x", None), P("x", "y")),
])
def test_a_reshard_propagates_as_jax_lowers_it(types, spec, target, expected):
    kinds = {"A": Auto, "E": jax.sharding.AxisType.Explicit}

    def f(mesh):
        return lambda a: (jnp.cos(jax.sharding.reshard(
            jnp.sin(a), jax.sharding.NamedSharding(mesh, target))) * 2.0,)
    real, made, verdict = _mixed(tuple(kinds[t] for t in types), [((8, 8), spec)], f)
    assert [r.spec for r in real] == [expected]
    assert not verdict.undetermined
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    # (what a reshard of arrays communicates is COLL-4's to read: named, never guessed)
    assert not verdict.collectives.collectives or _said(verdict) == made


def test_a_reshard_moving_explicit_axes_beside_auto_ones_keeps_its_operand_s_split():
    # seen: 'x' Explicit, 'y' Auto; sin(a) typed P(None, None) reshards to P('x'): JAX
    # returns P('x', 'y') ('y' from the input); the constraint's 'x' does not reach back to
    # the operand, whose type holds it replicated over 'x' (PROP-9; was left open)
    E = jax.sharding.AxisType.Explicit

    def f(mesh):
        return lambda a: (jnp.cos(jax.sharding.reshard(
            jnp.sin(a), jax.sharding.NamedSharding(mesh, P("x")))) * 2.0,)
    real, made, verdict = _mixed((E, Auto), [((8, 8), P(None, "y"))], f)
    assert [r.spec for r in real] == [P("x", "y")]
    assert not verdict.undetermined
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    assert verdict.collectives.complete and _said(verdict) == made == []


def test_a_squeeze_of_a_unit_broadcast_folds_back_to_its_operand():
    """``squeeze(broadcast_in_dim(a))`` to a's shape: StableHLO reads both as reshapes and
    folds them back to ``a``, so the result is returned on a's placement (``P(None)``),
    not on the split an ``add`` with a split value brings to it (seen in the deep run of
    5,040 programs on the merged main, and on main at the session's start)."""
    recipe = Recipe(mesh=(2, 2, 2), reversed_devices=True, inputs=(
        ((2,), (None,)), ((2,), ("x",))), steps=(
        ("input", (), 0), ("squeeze", (0,), 0), ("input", (), 1), ("binary", (1, 2), "add"),
        ("unary", (0,), "neg"), ("scalar", (2,), None), ("unary", (3,), "exp"),
        ("squeeze", (3,), 0)), outputs=(1, 6), devices=(), out_shardings=(), axis_types="")
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements, outcome.disagreements
    assert outcome.spec == tuple(from_jax(r) for r in outcome.jax)
