"""How a result's PartitionSpec is written when jit left it open: in full or trimmed.

JAX 0.10.2 writes a result's spec in one of two ways. A result typed over a mesh with an
Explicit axis (and no Manual one) takes its out sharding from its type (PROG-5): over
Explicit axes only, the type's spec, every dimension written; over a mixed mesh the
dimensions the type leaves whole are open to the compiler, and the result is the type's
spec, written in full, when the compiler placed it so, else the compiler's placement read
back over the type's mesh (OUT-2), which drops trailing unsplit dimensions. A result over
a mesh of Auto axes only is recovered in the type of the first sharding given (OUT-1):
the user's own sharding, as the user wrote it, when it places alike. The engine's
recovery (``engine/recovery.py``) writes each as JAX does, on a first call and when it
reuses an executable compiled for another spelling; the deep-run cases of the shard_map
program property that it wrote in full are pinned here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as JaxP

import shardlaw.engine as engine
from shardlaw.properties.registry import checks
from shardlaw.properties.suites.programs import compare_engine_program, shard_maps
from shardlaw.spec import AxisType as SpecAxisType, P, Mesh, NamedSharding as SpecNamedSharding, Value

E, A = AxisType.Explicit, AxisType.Auto


def _mesh(types):
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=types)


def _spelling(sharding):
    """The spec as written: its entries, trailing Nones included."""
    return tuple(sharding.spec)


# (mesh types, argument spec, the spec JAX writes for x * 2); the rank is 3
CASES = [
    # mixed mesh, the compiler's placement is not the type's: read back, trimmed
    ((E, A), JaxP("y", None, None), ("y",)),
    ((E, A), JaxP(None, "y", None), (None, "y")),
    ((E, A), JaxP("x", "y", None), ("x", "y")),
    # mixed mesh, the compiler placed it as its type: the type's spec, in full
    ((E, A), JaxP("x", None, None), ("x", None, None)),
    ((E, A), JaxP(None, None, None), (None, None, None)),
    # Explicit axes only: the type's spec, in full
    ((E, E), JaxP("y", None, None), ("y", None, None)),
    ((E, E), JaxP(None, "y"), (None, "y", None)),
    # Auto axes only: the user's sharding kept as written (OUT-1), in full or not
    ((A, A), JaxP("y", None, None), ("y", None, None)),
    ((A, A), JaxP("y"), ("y",)),
]


@checks("PROG-5", "OUT-1", "OUT-2")
@pytest.mark.parametrize("types, spec, written", CASES,
                         ids=[f"{''.join(t.name[0] for t in c[0])}-{c[1]}" for c in CASES])
def test_a_results_spec_is_written_as_jax_writes_it(types, spec, written):
    mesh = _mesh(types)
    x = jax.device_put(jnp.arange(64.0, dtype=jnp.float32).reshape(4, 8, 2),
                       NamedSharding(mesh, spec))

    def double(v):
        return v * 2

    theirs = jax.jit(double)(x)
    mine = engine.jit(double)(x)
    assert _spelling(theirs.sharding) == written
    assert mine.sharding == theirs.sharding
    assert _spelling(mine.sharding) == written
    assert jax.typeof(mine) == jax.typeof(theirs)
    assert (mine == theirs).all()


@checks("PROG-5", "OUT-2")
def test_a_reused_executable_writes_each_calls_result_as_jax_does():
    """P('y', None, None) and P('y') place alike on the mixed mesh: one executable, and
    both calls' results written as JAX writes them (trimmed, read back over the type's
    mesh), not in the first call's words."""
    mesh = _mesh((E, A))
    f = engine.jit(lambda v: v + 1)
    for spec in (JaxP("y", None, None), JaxP("y"), JaxP("y", None)):
        x = jax.device_put(jnp.ones((4, 8, 2)), NamedSharding(mesh, spec))
        assert f(x).sharding == jax.jit(lambda v: v + 1)(x).sharding
        assert _spelling(f(x).sharding) == ("y",)
    info = f.cache_info()
    assert (info.compiles, info.executable_hits) == (1, 2)
    assert info.divergences == []


@checks("PROG-5", "OUT-2")
@pytest.mark.parametrize("within", ["jit", "eager"])
def test_a_shard_maps_result_on_a_mixed_mesh_is_written_as_jax_writes_it(within):
    """The shard_map deep run's case (seed 2626): pmin over the manual Explicit axis of an
    argument split over the Auto one; JAX writes the result P('y')."""
    mesh = _mesh((E, A))
    x = jax.device_put(jnp.arange(64.0, dtype=jnp.float32).reshape(4, 8, 2),
                       NamedSharding(mesh, JaxP("y", None, None)))
    mapped = jax.shard_map(lambda v: jax.lax.pmin(v, "x"), mesh=mesh,
                           in_specs=JaxP(None, None, None), out_specs=JaxP(None),
                           axis_names={"x"})
    f = (lambda v: mapped(v)) if within == "eager" else jax.jit(mapped)
    theirs = jax.jit(f)(x)
    mine = engine.jit(f)(x)
    assert _spelling(theirs.sharding) == ("y",)
    assert mine.sharding == theirs.sharding and _spelling(mine.sharding) == ("y",)


def _deep_run_case(sizes, manual, in_spec, out_spec, op, outer_jit):
    from shardlaw.properties.program_shardmap_harness import MapCase, Op

    mesh = Mesh.iota(sizes, ("x", "y"), (SpecAxisType.Explicit, SpecAxisType.Auto))
    argument = Value.placed((4, 8, 2), SpecNamedSharding(mesh, P("y", None, None)))
    return MapCase(mesh, argument, in_spec, out_spec, frozenset(manual), True,
                   (Op(*op),), outer_jit=outer_jit)


@checks("PROG-5", "OUT-2", "SMAP-1")
@pytest.mark.parametrize("case", [
    # seed 1313, 1 of 5,000
    lambda: _deep_run_case((2, 2), "y", P("y"), P("y"), ("all_to_all", ("y",), 1, 1), True),
    # seed 2626, 4 of 1,050
    lambda: _deep_run_case((4, 2), "x", P(None, None, None), P(None),
                           ("pmin", ("x",), 2, 0), False),
], ids=["seed-1313", "seed-2626"])
def test_the_shard_map_deep_run_cases_agree(case):
    """The engine wrote these results P('y', None, None), JAX P('y'); the engine, the spec
    and JAX agree now."""
    assert compare_engine_program(case(), shard_maps()) == []
