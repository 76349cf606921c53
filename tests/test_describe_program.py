"""describe_program of a shard_map whose in_specs are left out (issue 23), against JAX 0.10.2.

The spec infers the in_specs from the arguments' types (SMAP-16) and describes the
shard_map given them; JAX infers them too, or refuses (TypeError where a manual axis is not
Explicit, ValueError where a type's entry names an automatic axis before a manual one).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.program_vmap_harness import structure
from shardlaw.properties.registry import checks
from shardlaw.spec import P, Rejection, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program, describe_trace

E, A = jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto

# (axis types, the argument's type, the manual axes (None: every axis), out_specs,
#  the in spec inferred or the exception JAX raises)
CASES = {
    "all-explicit-all-manual": ((E, E), jax.P("x", "y"), None, jax.P("x", "y"), P("x", "y")),
    "explicit-manual-y": ((E, E), jax.P(("y", "x")), {"y"}, jax.P("y"), P("y", None)),
    "mixed-manual-explicit-x": ((E, A), jax.P("x"), {"x"}, jax.P("x"), P("x", None)),
    "numpy-argument": ((E, E), None, None, jax.P(), P(None, None)),
    "automatic-axis-before-manual": ((E, E), jax.P(("x", "y")), {"y"}, jax.P("y"), ValueError),
    "auto-manual-axes": ((A, A), jax.P("x"), None, jax.P("x"), TypeError),
    "mixed-manual-auto-y": ((E, A), jax.P("x"), {"y"}, jax.P(), TypeError),
}


def _function(name: str, jitted: bool):
    types, typed, manual, out_specs, _ = CASES[name]
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=types)
    if typed is None:
        x = np.zeros((8, 8), np.float32)
    else:
        x = jax.ShapeDtypeStruct((8, 8), jnp.float32,
                                 sharding=jax.sharding.NamedSharding(mesh, typed))
    options = {} if manual is None else {"axis_names": manual}
    f = jax.shard_map(lambda a: a * 2, mesh=mesh, out_specs=out_specs, **options)
    return (jax.jit(f) if jitted else f), x


@checks("SMAP-16")
@pytest.mark.parametrize("jitted", [False, True], ids=["shard_map", "jit"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_shard_map_with_in_specs_left_out_is_described_as_jax_infers_them(name, jitted):
    """Accepted: the description holds the in spec the spec inferred, which is the one in
    JAX's trace, and explain_program accepts it as JAX compiles it. Refused: JAX refuses
    while tracing, and describe_program refuses by SMAP-16 with JAX's exception class."""
    fun, x = _function(name, jitted)
    outcome = CASES[name][-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(outcome, type):
            with pytest.raises(outcome):
                jax.make_jaxpr(fun)(x)
            with pytest.raises(Rejection) as refused:
                describe_program(fun, x)
            assert refused.value.rule == "SMAP-16" and isinstance(refused.value, outcome)
            return
        jax.jit(fun).trace(x).lower().compile()
        program = describe_program(fun, x)
        assert structure(program) == structure(describe_trace(fun, x))
    (eq,) = program.equations
    assert eq.in_specs == (outcome,)
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message


@checks("SMAP-16")
def test_the_users_jit_options_are_kept_around_the_inferred_shard_map():
    """jax.jit(shard_map(...), out_shardings=...) with in_specs left out: the program's jit
    options are the user's, read from JAX's trace of it."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(E, E))
    x = jax.ShapeDtypeStruct((8, 8), jnp.float32,
                             sharding=jax.sharding.NamedSharding(mesh, jax.P("x", "y")))
    out = jax.sharding.NamedSharding(mesh, jax.P("x", "y"))
    fun = jax.jit(jax.shard_map(lambda a: a * 2, mesh=mesh, out_specs=jax.P("x", "y")),
                  out_shardings=out)
    program = describe_program(fun, x)
    assert program.out_shardings == (from_jax(out),)
    assert program.equations[0].in_specs == (P("x", "y"),)
