"""A shard_map leaving mesh axes automatic that reads a value propagation has not placed
(PROP-11): its boundary is a data-flow edge both ways, so the operand takes the spec's
manual axes, and the free axes the body gives, back. Each case compared result for result
with what jax.jit returns on 8 CPU devices (JAX 0.10.2, Shardy)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

Auto = jax.sharding.AxisType.Auto
P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding


def _mesh(shape=(2, 4), names=("x", "y")):
    return jax.make_mesh(shape, names, axis_types=(Auto,) * len(shape))


def _compare(f, mesh, *placed):
    """jax.jit's result shardings of ``f`` and the spec's verdict on the same program."""
    args = [jax.device_put(jnp.ones(shape), NS(mesh, spec)) for shape, spec in placed]
    out = jax.jit(f)(*args)
    real = tuple(r.sharding for r in (out if isinstance(out, tuple) else (out,)))
    return real, explain_program(describe_program(f, *args))


def _smap(mesh, body, ins, outs, manual="x"):
    return jax.shard_map(body, mesh=mesh, in_specs=ins, out_specs=outs,
                         axis_names=set(manual))


def _add(t, w):
    return t + w


def _rows(mesh, s):
    return _smap(mesh, jnp.cos, P("x", None), P("x", None))(s)


def _cols(mesh, s):
    return _smap(mesh, jnp.cos, P(None, "x"), P(None, "x"))(s)


# (name, function of the mesh, inputs (shape, spec), the specs jax.jit returns)
TAKEN_BACK = [
    ("a returned sin takes 'x' and the body's 'y'", lambda m: lambda a, b: (
        lambda s: (s, _smap(m, _add, (P("x", None), P("x", None)), P("x", None))(s, b)))(
        jnp.sin(a)), [((8, 8), P()), ((8, 8), P(None, "y"))], [P("x", "y"), P("x", "y")]),
    ("a sin read only by the shard_map", lambda m: lambda a, b: _smap(
        m, _add, (P("x", None), P("x", None)), P("x", None))(jnp.sin(a), b),
     [((8, 8), P()), ((8, 8), P(None, "y"))], [P("x", "y")]),
    ("the manual axis joins the operand's own free one", lambda m: lambda a: (
        lambda s: (s, _rows(m, s)))(jnp.sin(a)),
     [((8, 8), P(None, "y"))], [P("x", "y"), P("x", "y")]),
    ("the manual axis minor to the operand's own", lambda m: lambda a: (
        lambda s: (s, _cols(m, s)))(jnp.sin(a)),
     [((8, 8), P("y", None))], [P("y", "x"), P("y", "x")]),
    ("a dot's result takes the manual axis", lambda m: lambda a, w: (
        lambda s: (s, _cols(m, s)))(a @ w),
     [((8, 8), P("y", None)), ((8, 8), P())], [P("y", "x"), P("y", "x")]),
    ("and so do the value's other uses", lambda m: lambda a: (
        lambda s: (s, _rows(m, s), s * 2))(jnp.sin(a)),
     [((8, 8), P())], [P("x"), P("x"), P("x")]),
    ("an operand added to the shard_map's result", lambda m: lambda a: (
        lambda s: _rows(m, s) + s)(jnp.sin(a)), [((8, 8), P())], [P("x")]),
    ("over three axes, two left automatic", lambda m: lambda a: (
        lambda s: (s, _smap(m, jnp.cos, P(None, "x"), P(None, "x"))(s)))(jnp.sin(a)),
     [((8, 8), P("z", None))], [P("z", "x"), P("z", "x")]),
]


@checks("PROP-11")
@pytest.mark.parametrize("name, make, placed, expected", TAKEN_BACK,
                         ids=[c[0] for c in TAKEN_BACK])
def test_an_operand_left_open_takes_the_held_split_back(name, make, placed, expected):
    mesh = _mesh((2, 2, 2), ("x", "y", "z")) if "three" in name else _mesh()
    real, verdict = _compare(make(mesh), mesh, *placed)
    assert [r.spec for r in real] == expected
    assert verdict.out_shardings == tuple(from_jax(r) for r in real), name
    assert verdict.undetermined == ()


@checks("PROP-11", "PROP-20")
def test_an_operand_growing_apart_from_the_manual_axis_keeps_its_producer_s_split():
    # sin(a) takes 'y' from a on dimension 0 as the held value takes 'x' there: XLA keeps
    # 'y' on sin(a) (a collective-permute and an all-gather bring it to 'x'): Shardy visits
    # sin before the shard_map, whose link its operand leads (PROP-20)
    mesh = _mesh()
    real, verdict = _compare(lambda a: (lambda s: (s, _rows(mesh, s)))(jnp.sin(a)), mesh,
                             ((8, 8), P("y", None)))
    assert [r.spec for r in real] == [P("y", None), P("x")]
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    assert verdict.undetermined == ()
