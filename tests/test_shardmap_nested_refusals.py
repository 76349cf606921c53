"""A shard_map nested in a body given another mesh than the body's (SMAP-30), and a
collective of a value an all_gather typed reduced (SMAP-31), against JAX 0.10.2 on 8 CPU
devices (issue 32, item 4).

describe_program re-raised both of JAX's ValueErrors: "The context mesh ... should match
the mesh passed to shard_map" where a shard_map inside a body that is manual over some (or
all) axes of the user's mesh is given that mesh; "pvary cannot accept args which are
reduced" where JAX's auto-cast makes a value an ``all_gather(..., to='reduced')`` gave
varying along an axis it is reduced along (the description did not hold the gathered
value's reduced axes, so the spec could not meet it). Now each is described and refused by
the spec at the trace stage with JAX's class at the refused equation's path, and the
accepting neighbours (the body's mesh given; a reduced value returned reduced, or used
where JAX casts it) are accepted alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, held_to_jax

KINDS = jax.sharding.AxisType


def _mesh(kind):
    return jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(kind,) * 2)


EXPLICIT, AUTO = _mesh(KINDS.Explicit), _mesh(KINDS.Auto)
MESHES = {"explicit": EXPLICIT, "auto": AUTO}


def _put(mesh, spec, shape=(8, 16)):
    return jax.device_put(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 5,
                          NS(mesh, spec))


def _body_mesh():
    return jax.sharding.get_abstract_mesh()


def _nested(mesh, inner_mesh, inner_in, inner_out, outer_axes, through_jit=False):
    """``f(x)``: a shard_map over ``mesh`` manual over ``outer_axes`` (all: None) whose body
    calls a shard_map given ``inner_mesh(mesh)`` (the user's mesh, or the body's)."""
    def body(a):
        inner = jax.shard_map(lambda b: b * 2, mesh=inner_mesh(mesh), in_specs=inner_in,
                              out_specs=inner_out)
        return jax.jit(inner)(a) if through_jit else inner(a)
    options = {} if outer_axes is None else {"axis_names": outer_axes}
    return lambda x: jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                   **options)(x)


def _users(mesh):
    return mesh


def _bodys(mesh):
    return _body_mesh()


# name: (the manual axes of the outer body, the inner specs, through an inner jit)
NESTINGS = {
    "partly-manual-body": ({"x"}, P("y"), False),
    "fully-manual-body": (None, P(), False),
    "partly-manual-body-through-a-jit": ({"x"}, P("y"), True),
}


@checks("SMAP-30")
@pytest.mark.parametrize("kind", sorted(MESHES))
@pytest.mark.parametrize("name", sorted(NESTINGS))
def test_a_nested_shard_map_given_the_users_mesh_is_refused_as_jax_refuses_it(name, kind):
    """JAX's ValueError while tracing; the spec refuses the nested shard_map by SMAP-30 at
    the trace stage, with JAX's class, at its path, in JAX's words."""
    axes, spec, through_jit = NESTINGS[name]
    mesh = MESHES[kind]
    fun = _nested(mesh, _users, spec, spec, axes, through_jit)
    x = _put(mesh, P("x"))
    with pytest.raises(ValueError) as raised:
        jax.jit(fun).trace(x)
    assert "should match the mesh passed to shard_map" in str(raised.value)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    path = "body[0].shard_map.body[0].jit.body[0]" if through_jit else \
        "body[0].shard_map.body[0]"
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "SMAP-30", "trace", path, "ValueError"), verdict.message
    assert "should match the mesh passed to shard_map" in verdict.message


@checks("SMAP-30", "SMAP-11")
@pytest.mark.parametrize("kind", sorted(MESHES))
@pytest.mark.parametrize("name", sorted(NESTINGS))
def test_a_nested_shard_map_given_the_bodys_mesh_is_accepted_alike(name, kind):
    """Given the body's mesh, JAX traces, lowers, compiles and runs it; the spec accepts
    it with the same result shardings. In a fully manual body it makes no axis manual, so
    its out spec P() is not checked against the enclosing body's varying axes (SMAP-11:
    the spec refused it before)."""
    axes, spec, through_jit = NESTINGS[name]
    mesh = MESHES[kind]
    fun = _nested(mesh, _bodys, spec, spec, axes, through_jit)
    _, verdict, problems = held_to_jax(fun, _put(mesh, P("x")))
    assert not problems and verdict.accepted, (problems, verdict.message)


# --------------------------------------------------------------------------- SMAP-31

def _gathered(a):
    """``a`` gathered along 'y' to reduced values: f32[4, 16] varying along 'x', reduced
    along 'y'."""
    return lax.all_gather(a, "y", axis=1, tiled=True, to="reduced")


def _over(body, out_specs):
    return lambda x: jax.shard_map(body, mesh=EXPLICIT, in_specs=P("x", "y"),
                                   out_specs=out_specs)(x)


# name: (the function of x split P('x', 'y'), JAX's class, the spec's rule, its path)
REFUSED = {
    # the pvary JAX puts before the result, to make it vary along the out spec's 'y'
    "returned-varying": (_over(_gathered, P("x", "y")), "SMAP-31", "body[0].shard_map.body[1]"),
    "psum-over-its-reduced-axis": (_over(lambda a: lax.psum(_gathered(a), "y"), P("x")),
                                   "SMAP-31", "body[0].shard_map.body[1]"),
    "all-gather-over-its-reduced-axis": (
        _over(lambda a: lax.all_gather(_gathered(a), "y", axis=0, tiled=True),
              P("x", None, reduced={"y"})), "SMAP-31", "body[0].shard_map.body[1]"),
    # summed over 'x', it is reduced along 'y' only; the add needs it varying along 'x'
    # and 'y': a pvary over both (inside the jit jnp.add is)
    "added-to-a-value-varying-along-more": (
        _over(lambda a: lax.psum(_gathered(a), "x") + jnp.tile(a, (1, 4)), P("x", "y")),
        "SMAP-31", "body[0].shard_map.body[3].jit.body[0]"),
    # the out spec leaves out 'y', along which the result is reduced
    "returned-unnamed": (_over(_gathered, P("x")), "SMAP-11",
                         "body[0].shard_map.out_specs[0]"),
}


@checks("SMAP-31")
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_collective_of_a_value_typed_reduced_is_refused_as_jax_refuses_it(name):
    """JAX's ValueError while tracing; the spec, typing the gathered value reduced along
    'y', refuses at the trace stage with JAX's class at the equation's path."""
    fun, rule_id, path = REFUSED[name]
    x = _put(EXPLICIT, P("x", "y"))
    with pytest.raises(ValueError) as raised:
        jax.jit(fun).trace(x)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        rule_id, "trace", path, "ValueError"), verdict.message
    if rule_id == "SMAP-31":
        said = "cannot accept args which are reduced"
        assert said in verdict.message and said in str(raised.value)


ACCEPTED = {
    "returned-reduced": _over(_gathered, P("x", None, reduced={"y"})),
    "sin-returned-reduced": _over(lambda a: jnp.sin(_gathered(a)), P("x", None, reduced={"y"})),
    "psum-over-another-axis": _over(lambda a: lax.psum(_gathered(a), "x"),
                                    P(None, None, reduced={"y"})),
    # the add needs it varying along 'y', along which it is reduced: JAX casts it
    # (reduced_vary_cast), no pvary
    "added-to-a-value-varying-along-its-reduced-axis": _over(
        lambda a: _gathered(a) + jnp.tile(a, (1, 4)), P("x", "y")),
    # pcast to varying of a value reduced along the axes: JAX's reduced_vary_cast
    "cast-to-varying": _over(lambda a: lax.pcast(_gathered(a), "y", to="varying"),
                             P("x", "y")),
    "untiled": _over(lambda a: lax.all_gather(a, "y", axis=0, to="reduced"),
                     P(None, "x", None, reduced={"y"})),
}


@checks("SMAP-31")
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_a_value_gathered_to_reduced_values_is_typed_and_accepted_alike(name):
    """JAX traces, lowers, compiles and runs it; the spec types the all_gather's result
    as JAX does (varying along 'x' only, reduced along 'y': PROG-0 otherwise) and accepts
    with the same result shardings."""
    program, verdict, problems = held_to_jax(ACCEPTED[name], _put(EXPLICIT, P("x", "y")))
    assert not problems and verdict.accepted, (problems, verdict.message)
    gathered = program.equations[0].body.equations[0].results[0]
    assert (gathered.varying, gathered.reduced) == ({"x"}, {"y"})


def test_a_gathered_value_typed_otherwise_than_jax_types_it_is_not_a_description():
    """The all_gather's result must be reduced along its axes: a description that drops
    them is refused (PROG-0), not accepted."""
    import dataclasses

    from shardlaw.spec import explain_program
    from shardlaw.spec.core.rules import Rejection

    program, verdict, _ = held_to_jax(ACCEPTED["returned-reduced"], _put(EXPLICIT, P("x", "y")))
    assert verdict.accepted
    eq = program.equations[0]
    gather = eq.body.equations[0]
    wrong = dataclasses.replace(gather.results[0], reduced=frozenset())
    body = dataclasses.replace(eq.body, equations=(dataclasses.replace(
        gather, results=(wrong,)),))
    bad = dataclasses.replace(program, equations=(dataclasses.replace(eq, body=body),))
    try:
        refused = explain_program(bad)
    except Rejection as refusal:
        assert refusal.failure.rule == "PROG-0", refusal
    else:
        assert not refused.accepted and refused.rule in ("PROG-0", "SMAP-19"), refused.message


# --------------------------------------------------------------------------- SMAP-32

# name: (the function of x split P('x', 'y'), the refused operation's path, JAX's words)
MIXED = {
    # 2.0 is cast varying along 'x' only: replicated along 'y'
    "times-a-constant": (_over(lambda a: _gathered(a) * 2.0, P("x", None, reduced={"y"})),
                         "body[0].shard_map.body[1].jit.body[2]", "cannot be replicated"),
    "in-an-inner-jit": (_over(lambda a: jax.jit(lambda v: v * 2)(_gathered(a)),
                              P("x", None, reduced={"y"})),
                        "body[0].shard_map.body[1].jit.body[0].jit.body[2]",
                        "cannot be replicated"),
}


@checks("SMAP-32")
@pytest.mark.parametrize("name", sorted(MIXED))
def test_an_elementwise_operation_mixing_reduced_and_replicated_is_refused_as_jax_does(name):
    """JAX's ShardingTypeError while tracing; the spec refuses by SMAP-32 at the trace
    stage with JAX's class at the operation's path, in JAX's words."""
    fun, path, said = MIXED[name]
    x = _put(EXPLICIT, P("x", "y"))
    with pytest.raises(Exception) as raised:
        jax.jit(fun).trace(x)
    assert type(raised.value).__name__ == "ShardingTypeError"
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "SMAP-32", "trace", path, "ShardingTypeError"), verdict.message
    assert said in verdict.message and said in str(raised.value)


@checks("SMAP-32")
@pytest.mark.parametrize("name", ["times-itself", "sum"])
def test_an_elementwise_operation_of_values_reduced_alike_is_reduced_and_accepted(name):
    """Operands reduced along the same axes: the result is reduced along them, as JAX
    types it; accepted alike."""
    body = {"times-itself": lambda a: _gathered(a) * _gathered(a),
            "sum": lambda a: _gathered(a).sum(axis=1, keepdims=True)}[name]
    program, verdict, problems = held_to_jax(_over(body, P("x", None, reduced={"y"})),
                                             _put(EXPLICIT, P("x", "y")))
    assert not problems and verdict.accepted, (problems, verdict.message)
    last = program.equations[0].body
    assert last.value_types[last.outputs[0]].reduced == {"y"}


# --------------------------------------------------------------------------- at the top

OTHER = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"),
                          axis_types=(KINDS.Explicit,) * 2)


def _doubled(mesh):
    return lambda x: jax.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("x", "y"),
                                   out_specs=P("x", "y"))(x)


@checks("SMAP-30")
@pytest.mark.parametrize("given", ["users-mesh", "context-mesh", "no-mesh"])
def test_a_shard_map_under_another_set_mesh_is_refused_as_jax_refuses_it(given):
    """Under ``jax.set_mesh`` of a mesh of another shape, a shard_map given the user's mesh
    is refused (JAX's ValueError; the spec's SMAP-30 at its path); given the set mesh, or
    none, it is accepted alike."""
    fun = {"users-mesh": _doubled(EXPLICIT), "context-mesh": _doubled(OTHER),
           "no-mesh": lambda x: jax.shard_map(lambda a: a * 2, in_specs=P("x", "y"),
                                              out_specs=P("x", "y"))(x)}[given]
    mesh = OTHER if given != "users-mesh" else EXPLICIT
    x = _put(mesh, P("x", "y"))
    with jax.set_mesh(OTHER):
        _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    if given == "users-mesh":
        assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
            "SMAP-30", "trace", "body[0]", "ValueError"), verdict.message
    else:
        assert verdict.accepted, verdict.message


def test_an_out_spec_naming_reduced_axes_a_product_dropped_is_refused_as_jax_refuses_it():
    """A product of a value typed reduced along 'y' is not reduced (JAX types it so): an
    out spec naming 'y' reduced is refused after the body is traced (JAX's ValueError;
    the spec's SMAP-19 at the out spec, the body described as JAX traced it)."""
    fun = _over(lambda a: _gathered(a) @ jnp.ones((16, 4)), P("x", None, reduced={"y"}))
    x = _put(EXPLICIT, P("x", "y"))
    with pytest.raises(ValueError):
        jax.jit(fun).trace(x)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path) == (
        "SMAP-19", "trace", "body[0].shard_map.out_specs[0]"), verdict.message


@checks("SMAP-32")
@pytest.mark.parametrize("name", ["sin", "times-a-constant", "returned"])
def test_a_value_typed_reduced_in_a_partly_manual_body_is_held_to_jax(name):
    """In a body manual over 'x' only, a value gathered along 'x' to reduced values: JAX
    types no elementwise operation of it (its bare AssertionError, a unary one too; the
    spec's SMAP-32 at the trace stage at its path); returned, it is refused by its out
    spec P() as JAX refuses it (SMAP-11)."""
    def gathered(a):
        return lax.all_gather(a, "x", axis=0, tiled=True, to="reduced")
    body = {"sin": lambda a: jnp.sin(gathered(a)), "times-a-constant": lambda a: gathered(a) * 2.0,
            "returned": gathered}[name]
    fun = lambda x: jax.shard_map(body, mesh=EXPLICIT, in_specs=P("x"), out_specs=P(),  # noqa: E731
                                  axis_names={"x"})(x)
    x = _put(EXPLICIT, P("x", "y"))
    with pytest.raises(Exception) as raised:
        jax.jit(fun).trace(x)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    if name == "returned":
        assert (verdict.rule, verdict.stage, verdict.jax_error) == (
            "SMAP-11", "trace", "ValueError"), verdict.message
        return
    assert type(raised.value).__name__ == "AssertionError"
    assert (verdict.rule, verdict.stage, verdict.jax_error) == (
        "SMAP-32", "trace", "AssertionError"), verdict.message
    assert verdict.path.startswith("body[0].shard_map.body[1].jit.body["), verdict.path
