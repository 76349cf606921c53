"""The CPU backend's answer for a shard_map leaving mesh axes automatic: a bfloat16
reduction in its body aborts XLA's CPU compiler (COLL-13, notes/jax-facts.md §26). Each
case compiled by JAX 0.10.2 on 8 CPU devices in a process of its own (the abort kills the
process: no exception to catch), its fate set beside the spec's caveat."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from jax import lax  # noqa: F401  (the bodies' source names it)

from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.collectives import compile_aborts

Auto = jax.sharding.AxisType.Auto
P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding

BODIES = {
    "psum": ("lambda t: lax.psum(jnp.cos(t), AX)", "P()"),
    "pmax": ("lambda t: lax.pmax(t, AX)", "P()"),
    "pmin": ("lambda t: lax.pmin(t, AX)", "P()"),
    "psum_scatter": ("lambda t: lax.psum_scatter(t, AX, tiled=True)", "P(AX)"),
    "all_gather": ("lambda t: lax.all_gather(t, AX, tiled=True)[:t.shape[0]]", "P(AX)"),
    "cos": ("lambda t: jnp.cos(t)", "P(AX)"),
    "cond_psum": ("lambda t: lax.cond(True, lambda u: lax.psum(u, AX), "
                  "lambda u: lax.psum(u * 2, AX), t)", "P()"),
}

SCRIPT = """
import jax
jax.config.update('jax_num_cpu_devices', 8)
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding as NS, AxisType
mesh = jax.make_mesh({shape}, {names}, axis_types=(AxisType.Auto,) * {rank})
AX = {axis!r}
f = jax.shard_map({body}, mesh=mesh, in_specs=P(AX), out_specs={out},
                  axis_names={manual!r})
x = jax.device_put(jnp.ones((16,), jnp.{dtype}), NS(mesh, P(AX)))
jax.jit(f).lower(x).compile()
print("compiled")
"""

# (body, mesh shape, axis names, manual axes, dtype, whether XLA's CPU compiler aborts)
CASES = [
    ("psum", (4, 2), ("x", "y"), {"y"}, "bfloat16", True),
    ("psum", (4, 2), ("x", "y"), {"x"}, "bfloat16", True),
    ("pmax", (4, 2), ("x", "y"), {"y"}, "bfloat16", True),
    ("pmin", (4, 2), ("x", "y"), {"y"}, "bfloat16", True),
    ("psum_scatter", (4, 2), ("x", "y"), {"y"}, "bfloat16", True),
    ("psum", (8, 1), ("x", "y"), {"x"}, "bfloat16", True),   # the free axis of size 1 too
    ("psum", (2, 2, 2), ("x", "y", "z"), {"x", "y"}, "bfloat16", True),
    ("cond_psum", (4, 2), ("x", "y"), {"y"}, "bfloat16", True),
    ("psum", (4, 2), ("x", "y"), {"y"}, "float32", False),
    ("psum", (4, 2), ("x", "y"), {"y"}, "float16", False),
    ("psum", (4, 2), ("x", "y"), {"x", "y"}, "bfloat16", False),   # every axis manual
    ("all_gather", (4, 2), ("x", "y"), {"y"}, "bfloat16", False),
    ("cos", (4, 2), ("x", "y"), {"y"}, "bfloat16", False),
]


def _program(body, shape, names, manual, dtype):
    mesh = jax.make_mesh(shape, names, axis_types=(Auto,) * len(shape))
    axis = sorted(manual)[0]
    source, out = BODIES[body]
    f = jax.shard_map(eval(source.replace("AX", repr(axis))), mesh=mesh, in_specs=P(axis),
                      out_specs=eval(out.replace("AX", repr(axis))), axis_names=manual)
    return describe_program(jax.jit(f), jax.device_put(jnp.ones((16,), getattr(jnp, dtype)),
                                                        NS(mesh, P(axis))))


def _compiles(body, shape, names, manual, dtype) -> int:
    source, out = BODIES[body]
    script = SCRIPT.format(shape=shape, names=names, rank=len(shape), axis=sorted(manual)[0],
                           body=source, out=out, manual=manual, dtype=dtype)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, -signal.SIGABRT), done.stderr[-2000:]
    return done.returncode


@checks("COLL-13")
@pytest.mark.parametrize("body, shape, names, manual, dtype, aborts", CASES,
                         ids=[f"{c[0]}-{c[1]}-{''.join(sorted(c[3]))}-{c[4]}" for c in CASES])
def test_the_cpu_compiler_aborts_where_the_spec_says(body, shape, names, manual, dtype,
                                                      aborts):
    rc = _compiles(body, shape, names, manual, dtype)
    assert (rc == -signal.SIGABRT) == aborts
    verdict = explain_program(_program(body, shape, names, manual, dtype))
    assert verdict.accepted   # JAX raises nothing: the process dies compiling
    caveat = verdict.collectives.caveat
    assert (caveat is not None) == aborts
    if aborts:
        assert caveat.rule == "COLL-13" and ".shard_map.body[" in caveat.path
        assert not verdict.collectives.complete and "aborts" in str(verdict.collectives)


@checks("COLL-13")
def test_the_caveat_holds_for_the_cpu_backend_only():
    program = _program("psum", (4, 2), ("x", "y"), {"y"}, "bfloat16")
    assert compile_aborts(program).rule == "COLL-13"
    assert compile_aborts(program, backend="tpu") is None


def _held(f, mesh, *placed):
    """The spec's collectives of ``f`` held to the compiled module's (kind, replica groups,
    bytes per device), and its results' shardings to jax.jit's; the verdict."""
    from shardlaw.compiled_hlo import collectives_in_hlo
    from shardlaw.spec import from_jax
    args = [jax.device_put(jnp.ones(shape), NS(mesh, spec)) for shape, spec in placed]
    out = jax.jit(f)(*args)
    real = tuple(r.sharding for r in (out if isinstance(out, tuple) else (out,)))
    verdict = explain_program(describe_program(f, *args))
    assert verdict.out_shardings == tuple(from_jax(r) for r in real)
    text = jax.jit(f).lower(*args).compile().as_text()
    compiled = sorted((c.kind, tuple(sorted(map(tuple, c.replica_groups))),
                       c.bytes_per_device) for c in collectives_in_hlo(text))
    assert verdict.collectives.complete, verdict.collectives.undetermined
    predicted = sorted((c.kind, tuple(sorted(c.replica_groups.groups())),
                        c.bytes_per_device) for c in verdict.collectives)
    assert predicted == compiled
    return compiled, verdict


def _smap(mesh, body, ins, outs, manual="x"):
    return jax.shard_map(body, mesh=mesh, in_specs=ins, out_specs=outs,
                         axis_names=set(manual))


ROWS = P("x", None)
# (name, mesh shape and names, function of the mesh, inputs, the compiled collectives'
# kinds)
PARTLY_MANUAL = [
    ("an elementwise body communicates nothing", ((2, 4), "xy"), lambda m: _smap(
        m, jnp.cos, ROWS, ROWS), [((8, 8), P(None, "y"))], []),
    ("an unsplit operand is sliced", ((2, 4), "xy"), lambda m: _smap(
        m, jnp.cos, ROWS, ROWS), [((8, 8), P())], []),
    ("a psum over the manual axis, of the free axis's shard", ((2, 4), "xy"), lambda m: _smap(
        m, lambda t: lax.psum(t, "x"), ROWS, P()), [((8, 8), P(None, "y"))], ["all-reduce"]),
    ("a psum of an unsplit shard", ((2, 4), "xy"), lambda m: _smap(
        m, lambda t: lax.psum(t, "x"), ROWS, P()), [((8, 8), P())], ["all-reduce"]),
    ("a psum of a value split on its manual and free axes", ((2, 4), "xy"), lambda m: _smap(
        m, lambda t: lax.psum(t, "x"), ROWS, P()), [((8, 8), P(("x", "y"), None))],
     ["all-reduce"]),
    ("a pmax", ((2, 4), "xy"), lambda m: _smap(
        m, lambda t: lax.pmax(t, "x"), ROWS, P()), [((8, 8), P(None, "y"))], ["all-reduce"]),
    ("the body's sum along a free split", ((2, 4), "xy"), lambda m: _smap(
        m, lambda t: t.sum(1), ROWS, P("x")), [((8, 8), P(None, "y"))], ["all-reduce"]),
    ("the body's transpose carries the free axis", ((2, 4), "xy"), lambda m: _smap(
        m, lambda t: t.T * 2, ROWS, ROWS), [((8, 8), P(None, "y"))], []),
    ("a psum read on after the shard_map", ((2, 4), "xy"), lambda m: lambda a: jnp.sin(_smap(
        m, lambda t: lax.psum(t, "x"), ROWS, P())(a)), [((8, 8), P(None, "y"))],
     ["all-reduce"]),
    ("two manual axes of three", ((2, 2, 2), "xyz"), lambda m: _smap(
        m, lambda t: lax.psum(t, ("x", "y")), P(("x", "y"), None), P(), "xy"),
     [((8, 8), P(None, "z"))], ["all-reduce"]),
    ("a psum over one of two manual axes", ((2, 2, 2), "xyz"), lambda m: _smap(
        m, lambda t: lax.psum(t, "y"), P("x", "y"), P("x"), "xy"),
     [((8, 8), P(None, None))], ["all-reduce"]),
]


@checks("COLL-14", "COLL-11")
@pytest.mark.parametrize("name, grid, make, placed, kinds", PARTLY_MANUAL,
                         ids=[c[0] for c in PARTLY_MANUAL])
def test_a_partly_manual_shard_maps_collectives_are_the_compiled_modules(
        name, grid, make, placed, kinds):
    shape, names = grid
    mesh = jax.make_mesh(shape, tuple(names), axis_types=(Auto,) * len(shape))
    compiled, verdict = _held(make(mesh), mesh, *placed)
    assert sorted(kind for kind, _, _ in compiled) == kinds, name


@checks("COLL-2")
def test_an_operand_moving_its_free_axis_to_the_manual_ones_is_left_open():
    # sin of P('y', None) read through P('x', None): XLA moves it by a collective-permute
    # and an all-gather, a plan of its own (COLL-2 names it)
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    f = _smap(mesh, jnp.cos, ROWS, ROWS)
    a = jax.device_put(jnp.ones((8, 8)), NS(mesh, P("y", None)))
    verdict = explain_program(describe_program(f, a))
    assert not verdict.collectives.complete
    assert verdict.collectives.undetermined.rule == "COLL-2"
