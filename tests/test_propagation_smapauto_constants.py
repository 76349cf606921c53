"""Constants each use computes for itself (PROP-16: Shardy's constant-or-scalar splitter),
the literal's broadcast ``jnp.zeros`` read, and a cond whose branches disagree (one returns
``jnp.zeros``); also a concatenate of ``sin(a)`` with a value split along 'z' (the spec
keeps 'z', as JAX does). Each case compared with jax.jit on 8 CPU devices: the results'
shardings, and where the spec's list of collectives is complete, the compiled module's
(kind, replica groups, bytes per device)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

Auto = jax.sharding.AxisType.Auto
P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding


def _mesh(shape=(2, 4), names=("x", "y")):
    return jax.make_mesh(shape, names, axis_types=(Auto,) * len(shape))


def _held(f, mesh, *placed):
    """The spec's verdict on ``f`` held to the executable: the results' shardings, and the
    compiled collectives where the spec's list is complete; the verdict."""
    args = [jax.device_put(jnp.ones(shape), NS(mesh, spec)) for shape, spec in placed]
    jitted = f if hasattr(f, "lower") else jax.jit(f)
    out = jitted(*args)
    real = tuple(r.sharding for r in (out if isinstance(out, tuple) else (out,)))
    verdict = explain_program(describe_program(jitted, *args))
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    assert verdict.undetermined == ()
    text = jitted.lower(*args).compile().as_text()
    compiled = sorted((c.kind, tuple(sorted(map(tuple, c.replica_groups))),
                       c.bytes_per_device) for c in collectives_in_hlo(text))
    assert verdict.collectives.complete, verdict.collectives.undetermined
    predicted = sorted((c.kind, tuple(sorted(c.replica_groups.groups())),
                        c.bytes_per_device) for c in verdict.collectives)
    assert predicted == compiled
    return real, verdict


def _iota():
    return jax.lax.broadcasted_iota(jnp.float32, (8, 8), 0)


def _scalar(a):
    return jnp.broadcast_to(a.sum(), (8, 8))


# (name, function, inputs (shape, spec), the specs jax.jit returns)
COPIED = [
    ("zeros read by two values apart", lambda a, b: (
        lambda z: (a + z, b * z))(jnp.zeros((8, 8))),
     [((8, 8), P("x", None)), ((8, 8), P(None, "y"))], [P("x", None), P(None, "y")]),
    ("and returned as well, unsplit", lambda a, b: (
        lambda z: (a + z, b * z, z))(jnp.zeros((8, 8))),
     [((8, 8), P("x", None)), ((8, 8), P(None, "y"))], [P("x", None), P(None, "y"), P()]),
    ("an iota likewise", lambda a, b: (lambda z: (a + z, b * z, z))(_iota()),
     [((8, 8), P("x", None)), ((8, 8), P(None, "y"))], [P("x", None), P(None, "y"), P()]),
    ("a sin of zeros is a constant too", lambda a, b: (
        lambda z: (a + z, b * z))(jnp.sin(jnp.zeros((8, 8)))),
     [((8, 8), P("x", None)), ((8, 8), P(None, "y"))], [P("x", None), P(None, "y")]),
    ("an iota's cast likewise", lambda a, b: (lambda z: (a + z, b * z))(
        jax.lax.broadcasted_iota(jnp.int32, (8, 8), 0).astype(jnp.float32)),
     [((8, 8), P("x", None)), ((8, 8), P(None, "y"))], [P("x", None), P(None, "y")]),
    ("a broadcast of a computed scalar", lambda a, b, c: (lambda s: (b + s, c * s))(
        _scalar(a)), [((8, 8), P()), ((8, 8), P("x", None)), ((8, 8), P(None, "y"))],
     [P("x"), P(None, "y")]),
    ("returned beside its use", lambda a, b: (lambda s: (b + s, s))(_scalar(a)),
     [((8, 8), P()), ((8, 8), P("x", None))], [P("x"), P()]),
    ("a constant constrained and read apart", lambda a: (lambda z: (
        jax.lax.with_sharding_constraint(z, NS(_mesh(), P("x"))), a + z))(
        jnp.zeros((8, 8))), [((8, 8), P(None, "y"))], [P("x"), P(None, "y")]),
    ("ones read once", lambda a: jnp.sin(a) + jnp.ones((8, 8)),
     [((8, 8), P("x", "y"))], [P("x", "y")]),
]


@checks("PROP-16")
@pytest.mark.parametrize("name, f, placed, expected", COPIED, ids=[c[0] for c in COPIED])
def test_each_use_of_a_constant_reads_a_copy_of_its_own(name, f, placed, expected):
    real, _ = _held(f, _mesh(), *placed)
    assert [r.spec for r in real] == expected, name


def _branches(a):
    return jax.lax.cond(a.sum() > 0, lambda t: jnp.sin(t), lambda t: jnp.zeros((8, 8)), a)


def _zeros_first(a):
    return jax.lax.cond(a.sum() > 0, lambda t: jnp.zeros((8, 8)), lambda t: jnp.sin(t), a)


# (name, function of the mesh, the input's spec, the specs jax.jit returns, the compiled
# module's collective kinds)
BRANCHES = [
    ("the branches disagree", lambda m: _branches, P("x", "y"), [P("x", "y")],
     ["all-reduce", "all-reduce"]),
    ("under out shardings P()", lambda m: jax.jit(_branches, out_shardings=NS(m, P())),
     P("x", "y"), [P()], ["all-gather", "all-gather", "all-reduce", "all-reduce"]),
    ("one axis, under P()", lambda m: jax.jit(_branches, out_shardings=NS(m, P())),
     P("x"), [P()], ["all-gather", "all-reduce"]),
    ("a constraint to P() after it", lambda m: lambda a: jax.lax.with_sharding_constraint(
        _branches(a), NS(m, P())), P("x", "y"), [P()],
     ["all-gather", "all-gather", "all-reduce", "all-reduce"]),
    ("the zeros first, under P()", lambda m: jax.jit(_zeros_first, out_shardings=NS(m, P())),
     P("x", "y"), [P()], ["all-gather", "all-gather", "all-reduce", "all-reduce"]),
    ("unsplit input", lambda m: _branches, P(), [P()], []),
]


@checks("PROP-16", "COLL-4")
@pytest.mark.parametrize("name, make, spec, expected, kinds", BRANCHES,
                         ids=[c[0] for c in BRANCHES])
def test_a_cond_whose_branch_returns_zeros_is_answered_whole(name, make, spec, expected,
                                                             kinds):
    mesh = _mesh()
    real, verdict = _held(make(mesh), mesh, ((8, 8), spec))
    assert [r.spec for r in real] == expected, name
    assert sorted(c.kind for c in verdict.collectives) == kinds


# a concatenate of sin(a) (split over ('y', 'x') on its last dimension) with b split along
# 'z' on dimension 1: JAX keeps 'z' on the result, and so does the spec
CONCATS = [((8, 2, 16), 0), ((8, 2, 16), 2), ((4, 2, 8), 0), ((2, 2, 8), 0)]


@checks("PROP-2")
@pytest.mark.parametrize("shape, axis", CONCATS, ids=[f"{s}-{a}" for s, a in CONCATS])
def test_a_concatenate_with_a_value_split_along_z_keeps_z(shape, axis):
    mesh = _mesh((2, 2, 2), ("x", "y", "z"))
    args = [jax.device_put(jnp.ones(shape), NS(mesh, P(None, None, ("y", "x")))),
            jax.device_put(jnp.ones(shape), NS(mesh, P(None, "z", None)))]

    def f(a, b):
        s = jnp.sin(a)
        return jnp.concatenate([s, b], axis), s, jnp.concatenate(
            [jnp.expand_dims(s, 0), jnp.expand_dims(b, 0)], 0)
    real = jax.jit(f)(*args)
    assert [r.sharding.spec for r in real] == [
        P(None, "z", ("y", "x")), P(None, "z", ("y", "x")), P(None, None, "z", ("y", "x"))]
    verdict = explain_program(describe_program(f, *args))
    assert verdict.out_shardings == tuple(from_jax(r.sharding) for r in real)
