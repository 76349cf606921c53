"""The engine in place of jax.jit around with_sharding_constraint, shard_map and non-array
arguments: the same jaxpr, the same results' shardings and the same values.

(vmap and differentiation of the engine's jit are held to jax.jit in test_batching.py and
test_autodiff.py.) Each program is traced and run twice, once with ``jax.jit`` and once
with ``shardlaw.engine.jit``; a refusal must be one on both sides, of the same type.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from shardlaw.engine import jit as engine_jit  # noqa: E402

MESH = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
X = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)


def _constrained(spec):
    def f(x):
        return jax.lax.with_sharding_constraint(x * 2, NamedSharding(MESH, spec)) + 1
    return f


def _psum_over(axes, in_spec, out_spec):
    def body(x):
        return jax.lax.psum(x, axes)
    return jax.shard_map(body, mesh=MESH, in_specs=in_spec, out_specs=out_spec)


PROGRAMS = {
    "constraint, even": (_constrained(P("x", "y")), (X,)),
    "constraint, uneven (accepted)": (_constrained(P("y", "x")), (X[:6, :6],)),
    "constraint, unconstrained dim": (_constrained(P(P.UNCONSTRAINED, "y")), (X,)),
    "constraint, rank too long": (_constrained(P("x", None, "y")), (X,)),
    "shard_map psum over x": (_psum_over("x", P("x", "y"), P(None, "y")), (X,)),
    "shard_map psum over both": (_psum_over(("x", "y"), P("x", "y"), P()), (X,)),
    "shard_map indivisible": (_psum_over("x", P("y"), P()), (X[:6],)),
    "shard_map out_specs claims replication": (
        jax.shard_map(lambda x: x, mesh=MESH, in_specs=P("x"), out_specs=P()), (X,)),
    "python and numpy scalars": (lambda a, b, c: a * b + c, (2.5, np.float32(3), np.int32(4))),
    "0-d array and a list": (lambda a, b: a + b[0], (np.array(2.0, np.float32), [X])),
    "masked array (refused)": (lambda a: a + 1, (np.ma.masked_array(X, mask=X > 50),)),
}


def _run(jit, fun, args):
    """(jaxpr text, result shardings, values) or the exception."""
    try:
        jitted = jit(fun)
        jaxpr = str(jax.make_jaxpr(jitted)(*args))
        out = jitted(*args)
        leaves = jax.tree.leaves(out)
        return jaxpr, [leaf.sharding for leaf in leaves], [np.asarray(leaf) for leaf in leaves]
    except Exception as error:  # the refusal is compared, type for type
        return error


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_engine_runs_the_program_as_jax_jit_does(name):
    fun, args = PROGRAMS[name]
    theirs = _run(jax.jit, fun, args)
    mine = _run(engine_jit, fun, args)
    if isinstance(theirs, Exception):
        assert isinstance(mine, Exception), f"{name}: JAX refused ({theirs!r}), the engine ran"
        assert isinstance(mine, type(theirs)), (type(mine).__mro__, type(theirs))
        return
    assert not isinstance(mine, Exception), f"{name}: the engine refused: {mine}"
    jaxpr, shardings, values = theirs
    my_jaxpr, my_shardings, my_values = mine
    assert my_jaxpr == jaxpr
    for a, b in zip(my_shardings, shardings, strict=True):
        assert a.is_equivalent_to(b, 2) and a == b, (a, b)
    for a, b in zip(my_values, values, strict=True):
        np.testing.assert_array_equal(a, b)


def test_both_sides_are_reached():
    """The pinned programs include accepted ones and refused ones for JAX itself."""
    outcomes = {name: isinstance(_run(jax.jit, *PROGRAMS[name]), Exception) for name in PROGRAMS}
    assert any(outcomes.values()) and not all(outcomes.values()), outcomes
