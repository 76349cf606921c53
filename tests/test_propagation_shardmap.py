"""Where the compiler decides through a shard_map leaving mesh axes automatic (PROP-11)
and through a loop's or a cond's join a constraint leads (PROP-13), held to the compiled
executable on 8 CPU devices: the cases of notes/jax-facts.md section 20h, each compared
result for result with what jax.jit returns."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardlaw.properties.propagation_harness import compare_recipe, recipes
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

Auto = jax.sharding.AxisType.Auto
P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding
U = P.UNCONSTRAINED


def _mesh(shape=(2, 4), names=("x", "y")):
    return jax.make_mesh(shape, names, axis_types=(Auto,) * len(shape))


def _compare(f, mesh, *placed):
    """jax.jit's result shardings of ``f`` and the spec's verdict on the same program."""
    args = [jax.device_put(jnp.ones(shape), NS(mesh, spec)) for shape, spec in placed]
    out = jax.jit(f)(*args)
    real = tuple(r.sharding for r in (out if isinstance(out, tuple) else (out,)))
    return real, explain_program(describe_program(f, *args))


def _smap(mesh, body, ins, outs, manual):
    return jax.shard_map(body, mesh=mesh, in_specs=ins, out_specs=outs,
                         axis_names=set(manual))


def _cos(t):
    return jnp.cos(t) * 2.0


# (name, function of the mesh, inputs (shape, spec), the specs jax.jit returns)
PREDICTED = [
    ("a free axis crosses the body", lambda m: lambda a: jnp.sin(
        _smap(m, _cos, P("x", None), P("x", None), "x")(a)),
     [((8, 8), P(None, "y"))], [P("x", "y")]),
    ("a free axis that cannot follow the manual one is dropped", lambda m: lambda a: jnp.sin(
        _smap(m, _cos, P("x", None), P("x", None), "x")(a)),
     [((8, 8), P("y", None))], [P("x")]),
    ("a free axis major to nothing", lambda m: lambda a: _smap(
        m, _cos, P(None, "x"), P(None, "x"), "x")(a),
     [((8, 8), P("y", None))], [P("y", "x")]),
    ("the body's transpose carries the free axis", lambda m: lambda a: _smap(
        m, lambda t: t.T * 2, P("x", None), P("x", None), "x")(a),
     [((8, 8), P(None, "y"))], [P(("x", "y"))]),
    ("the body's matmul splits its result", lambda m: lambda a, w: _smap(
        m, lambda t, v: t @ v, (P("x", None), P()), P("x", None), "x")(a, w),
     [((8, 8), P()), ((8, 8), P(None, "y"))], [P("x", "y")]),
    ("a psum over the manual axis passes the free one", lambda m: lambda a: _smap(
        m, lambda t: jax.lax.psum(t, "x"), P("x", None), P(), "x")(a),
     [((8, 8), P(None, "y"))], [P(None, "y")]),
    ("a result's uses reach back into the body", lambda m: lambda a, b: (lambda o: (
        o[0] + b, o[1]))(_smap(m, lambda t: (jnp.cos(t), jnp.cos(t) * 2), P("x", None),
                               (P("x", None), P("x", None)), "x")(a)),
     [((8, 8), P()), ((8, 8), P(None, "y"))], [P("x", "y"), P("x", "y")]),
    ("a result and an operand apart meet at the prefix they share", lambda m: lambda a, b: (
        _smap(m, _cos, P("x", None), P("x", None), "x")(a) + b),
     [((8, 8), P()), ((8, 8), P("y", None))], [P()]),
]


@checks("PROP-11")
@pytest.mark.parametrize("name, make, placed, expected", PREDICTED,
                         ids=[c[0] for c in PREDICTED])
def test_a_shard_map_leaving_axes_automatic_places_its_results_as_jax_does(
        name, make, placed, expected):
    mesh = _mesh()
    real, verdict = _compare(make(mesh), mesh, *placed)
    assert [r.spec for r in real] == expected
    assert verdict.out_shardings == tuple(from_jax(r) for r in real), name
    assert verdict.undetermined == ()


@checks("PROP-11")
def test_an_operand_left_open_through_a_manual_axis_takes_the_held_split_back():
    # JAX moves the spec's 'x', and the 'y' the body takes from b, back onto sin(a), read by
    # the shard_map and returned (more cases: tests/test_propagation_smapauto.py)
    mesh = _mesh()

    def f(a, b):
        s = jnp.sin(a)
        return s, _smap(mesh, lambda t, w: t + w, (P("x", None), P("x", None)),
                        P("x", None), "x")(s, b)
    real, verdict = _compare(f, mesh, ((8, 8), P()), ((8, 8), P(None, "y")))
    assert [r.spec for r in real] == [P("x", "y"), P("x", "y")]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    assert verdict.undetermined == ()


@checks("PROP-11")
def test_two_manual_axes_of_three_leave_the_third_to_the_body():
    mesh = _mesh((2, 2, 2), ("x", "y", "z"))
    f = _smap(mesh, _cos, P("x", "y"), P("x", "y"), "xy")
    real, verdict = _compare(f, mesh, ((8, 8), P(None, "z")))
    assert real[0].spec == P("x", "y")   # 'z' cannot follow 'y' on dimension 1
    assert verdict.out_shardings == (from_jax(real[0]),)


@checks("PROP-11")
def test_a_manual_axis_an_operand_holds_elsewhere_goes_to_the_manual_dimension():
    # XLA moves 'x' to dimension 0 by an all-to-all: the result is P('x'); the manual
    # prefix's factor keeps 'x' and the free dimension's is cut (PROP-14)
    mesh = _mesh()
    f = _smap(mesh, _cos, P("x", None), P("x", None), "x")
    real, verdict = _compare(f, mesh, ((8, 8), P(None, "x")))
    assert real[0].spec == P("x")
    assert verdict.out_shardings == (from_jax(real[0]),)


@checks("PROP-11", "COLL-4")
def test_the_collectives_of_such_a_shard_map_are_read_from_its_body():
    # the body's sum over dimension 1, split over the free 'y': one all-reduce over 'y' of
    # each device's 4 rows (more cases: tests/test_collectives_smapauto.py)
    mesh = _mesh()
    f = _smap(mesh, lambda t: t.sum(1), P("x", None), P("x"), "x")
    real, verdict = _compare(f, mesh, ((8, 8), P(None, "y")))
    assert verdict.out_shardings == (from_jax(real[0]),)
    assert verdict.collectives.complete
    [c] = verdict.collectives
    assert (c.kind, c.axes, c.shape, c.replica_groups.groups()) == (
        "all-reduce", ("y",), (4,), ((0, 1, 2, 3), (4, 5, 6, 7)))


def _wsc(mesh, value, *spec):
    return jax.lax.with_sharding_constraint(value, NS(mesh, P(*spec)))


def _scan(mesh, spec):
    return lambda a, xs: jax.lax.scan(
        lambda c, t: (_wsc(mesh, jnp.sin(c) + t, *spec), None), a, xs)[0]


# (name, function of the mesh, inputs, the specs jax.jit returns)
LED = [
    ("a body's constraint apart from the initial carry wins", lambda m: _scan(m, ("y", None)),
     [((8, 8), P("x", None)), ((4, 8, 8), P())], [P("y")]),
    ("and the other way round", lambda m: _scan(m, ("x", None)),
     [((8, 8), P("y", None)), ((4, 8, 8), P())], [P("x")]),
    ("a body's constraint beside the initial carry joins it", lambda m: _scan(m, (None, "y")),
     [((8, 8), P("x", None)), ((4, 8, 8), P())], [P("x", "y")]),
    ("a while loop's likewise", lambda m: lambda a: jax.lax.while_loop(
        lambda s: s[1] < 3, lambda s: (_wsc(m, jnp.sin(s[0]), "y", None), s[1] + 1),
        (a, 0))[0], [((8, 8), P("x", None))], [P("y")]),
    ("the initial carry keeps its own", lambda m: lambda a, xs: (
        jnp.sin(a), _scan(m, ("y", None))(jnp.sin(a), xs)),
     [((8, 8), P("x", None)), ((4, 8, 8), P())], [P("x", None), P("y")]),
    ("a branch's constraint apart from the other's wins", lambda m: lambda a: jax.lax.cond(
        a.sum() > 0, lambda t: t * 2, lambda t: _wsc(m, jnp.sin(t), "x", None), a),
     [((8, 8), P("y", None))], [P("x")]),
    ("a branch's constraint the other's extends joins it", lambda m: lambda a: jax.lax.cond(
        a.sum() > 0, lambda t: _wsc(m, jnp.sin(t), "x", None), lambda t: t * 2, a),
     [((8, 8), P(("x", "y"), None))], [P(("x", "y"), None)]),
    ("a switch's one constrained branch", lambda m: lambda a: jax.lax.switch(
        jnp.int32(a.sum()) % 3, [lambda t: t * 2, lambda t: _wsc(m, jnp.sin(t), "y", None),
                                 lambda t: t + 1], a),
     [((8, 8), P("x", None))], [P("y")]),
]


@checks("PROP-13")
@pytest.mark.parametrize("name, make, placed, expected", LED, ids=[c[0] for c in LED])
def test_a_join_a_constraint_leads_takes_its_split_where_the_others_conflict(
        name, make, placed, expected):
    mesh = _mesh()
    real, verdict = _compare(make(mesh), mesh, *placed)
    assert [r.spec for r in real] == expected
    assert verdict.out_shardings == tuple(from_jax(r) for r in real), name


@checks("PROP-13")
def test_two_branches_apart_without_a_constraint_are_left_open():
    # XLA keeps the second branch's split here; the spec does not claim an order
    mesh = _mesh()

    def f(a, b):
        return jax.lax.cond(a.sum() > 0, lambda t, u: t * 2, lambda t, u: u * 2, a, b)
    real, verdict = _compare(f, mesh, ((8, 8), P("x", None)), ((8, 8), P("y", None)))
    assert real[0].spec == P("y")
    assert verdict.out_shardings == (UNSPECIFIED,)


@st.composite
def _auto_map_recipes(draw):
    """Recipes with a shard_map leaving axes automatic in them (over Auto meshes)."""
    recipe = draw(recipes(max_steps=5))
    kinds = {kind for kind, _, _ in recipe.steps}
    if "shard_map_auto" not in kinds:
        from hypothesis import reject
        reject()
    return recipe


@checks("PROP-11")
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(_auto_map_recipes())
def test_drawn_programs_with_such_shard_maps_agree_with_the_executable(recipe):
    outcome = compare_recipe(recipe)
    assert not outcome.disagreements, (recipe, outcome.disagreements)


def _other(mesh, shape, names):
    import numpy as np
    return jax.sharding.Mesh(np.array(list(mesh.devices.flat)).reshape(shape), names,
                             axis_types=(Auto,) * len(shape))


# (name, function of (the inputs' mesh, another of its devices), the specs jax.jit returns)
ACROSS = [
    ("a value computed from a constraint over a mesh of one axis", lambda m, o: lambda a:
     jnp.sin(_wsc(o, a, "k", None)), (8,), ("k",), [P("k")]),
    ("beside a value of the inputs' mesh", lambda m, o: lambda a:
     jnp.sin(_wsc(o, a, "k", None)) + jnp.sin(a), (8,), ("k",), [P(("x", "y"))]),
    ("over a mesh of as many axes, made of whole axes", lambda m, o: lambda a:
     jnp.sin(_wsc(o, a, ("a", "b"), None)), (4, 2), ("a", "b"), [P(("a", "b"))]),
    ("an inner jit's in sharding over another mesh", lambda m, o: lambda a: jax.jit(
        lambda t: t * 2, in_shardings=NS(o, P(("a", "b"))))(jnp.sin(a)), (4, 2), ("a", "b"),
     [P(("x", "y"))]),
]


@checks("PROP-12")
@pytest.mark.parametrize("name, make, shape, names, expected", ACROSS,
                         ids=[c[0] for c in ACROSS])
def test_a_placement_over_another_mesh_of_whole_axes_propagates(name, make, shape, names,
                                                                 expected):
    mesh = _mesh()
    real, verdict = _compare(make(mesh, _other(mesh, shape, names)), mesh, ((8, 8), P()))
    assert [r.spec for r in real] == expected
    assert verdict.out_shardings == tuple(from_jax(r) for r in real), name


@checks("PROP-12")
def test_a_mesh_of_more_axes_or_parts_of_axes_stays_open():
    mesh = _mesh()
    cube = _other(mesh, (2, 2, 2), ("p", "q", "r"))   # the mesh Shardy places the module over
    real, verdict = _compare(lambda a: jnp.sin(_wsc(cube, a, "p", None)), mesh, ((8, 8), P()))
    assert real[0].spec == P("p")
    assert verdict.out_shardings == (UNSPECIFIED,)
    tall = _other(mesh, (4, 2), ("a", "b"))   # 'b' is half of 'y': a sub-axis
    real, verdict = _compare(lambda a: jnp.sin(_wsc(tall, a, None, "b")), mesh, ((8, 8), P()))
    assert real[0].spec == P()
    assert verdict.out_shardings == (UNSPECIFIED,)
