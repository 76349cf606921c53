"""The collectives inside a loop's and a cond's body (COLL-8 to COLL-10), held to the
compiled CPU HLO on 8 devices: where each runs (the loop's body, before the loop, a
branch), how often one step runs it, and the scanned transformer step of the benchmarks."""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import pytest
import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings

from shardlaw.compiled_hlo import collectives_in_hlo as collectives_of
from shardlaw.properties.collectives_harness import (
    compare_collectives, hlo_runs, loop_recipes,
)
from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.collectives import predicted_collectives

Auto = jax.sharding.AxisType.Auto
P = jax.sharding.PartitionSpec
U = P.UNCONSTRAINED


def _mesh():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))


def _put(mesh, shape, *spec):
    return jax.device_put(jnp.ones(shape), jax.sharding.NamedSharding(mesh, P(*spec)))


def _both(f, *args):
    """The compiled module's collectives as (kind, groups, bytes, runs), and the spec's
    verdict's collectives."""
    text = jax.jit(f).lower(*args).compile().as_text()
    runs = hlo_runs(text)
    real = sorted(((c.kind, c.replica_groups, c.bytes_per_device, runs[c.name])
                   for c in collectives_of(text)), key=repr)
    return real, explain_program(describe_program(f, *args)).collectives


def _keys(step):
    return sorted(((c.kind, () if c.replica_groups is None else c.replica_groups.groups(),
                    c.bytes_per_device, c.trips) for c in step), key=repr)


@checks("COLL-8")
def test_a_scan_s_body_communicates_its_length_times():
    """A reduction over a dimension the body's slice splits over 'y': one all-reduce in the
    while loop's body, run once per iteration, the step's bytes its length times."""
    mesh = _mesh()

    def f(total, xs):
        return jax.lax.scan(lambda c, t: (c + jnp.sin(t).sum(1), None), total, xs)[0]
    real, step = _both(f, _put(mesh, (8,)), _put(mesh, (5, 8, 16), None, None, "y"))
    assert step.complete and _keys(step) == real == [
        ("all-reduce", ((0, 1, 2, 3), (4, 5, 6, 7)), 32, 5)]
    assert [(c.path, c.computation, c.trips) for c in step] == [
        ("body[0].scan.body[1]", "body[0].scan", 5)]
    assert step.bytes_per_run == 32 and step.bytes_per_device == 160


@checks("COLL-9")
def test_a_constant_the_body_gathers_is_gathered_once_before_the_loop():
    """A constant of the loop on P('x', 'y') constrained to P(None, 'y') inside the body:
    XLA's loop-invariant code motion moves the all-gather out of the while loop."""
    mesh = _mesh()
    rows = jax.sharding.NamedSharding(mesh, P(None, "y"))

    def f(c, w):
        def body(c, _):
            return jax.lax.with_sharding_constraint(
                c * jax.lax.with_sharding_constraint(w, rows), rows), None
        return jax.lax.scan(body, c, None, length=3)[0]
    real, step = _both(f, _put(mesh, (8, 8), None, "y"), _put(mesh, (8, 8), "x", "y"))
    assert step.complete and _keys(step) == real == [
        ("all-gather", ((0, 4), (1, 5), (2, 6), (3, 7)), 64, 1)]
    assert step[0].computation == "" and step[0].path == "body[0].scan.body[0]"


@checks("COLL-10")
def test_xs_split_along_the_loop_s_dimension_is_gathered_whole_before_the_loop():
    mesh = _mesh()

    def f(c, xs):
        return jax.lax.scan(lambda c, t: (c + t, None), c, xs)[0]
    real, step = _both(f, _put(mesh, (8, 8)), _put(mesh, (4, 8, 8), "x"))
    assert step.complete and _keys(step) == real == [
        ("all-gather", ((0, 4), (1, 5), (2, 6), (3, 7)), 1024, 1)]
    assert (step[0].path, step[0].operand) == ("body[0]", 1)


@checks("COLL-8", "COLL-10")
def test_a_cond_s_branch_communicates_as_often_as_the_data_decide():
    """The branch's all-reduce is in the conditional's computation: listed once, its runs
    left to the data, so the step's total is not given; the predicate's sum is computed
    (and all-reduced) before the cond."""
    mesh = _mesh()

    def f(a, w):
        return jax.lax.cond(a.sum() > 0, lambda a, w: a + w.sum(0), lambda a, w: a - 1.0,
                            a, w)
    real, step = _both(f, _put(mesh, (16,), "x"), _put(mesh, (4, 16), "y", "x"))
    assert step.complete
    assert _keys(step) == real == [
        ("all-reduce", ((0, 1, 2, 3), (4, 5, 6, 7)), 32, None),
        ("all-reduce", ((0, 4), (1, 5), (2, 6), (3, 7)), 4, 1)]
    assert step.bytes_per_device is None and step.bytes_per_run == 36
    assert "as often as the data decide" in str(step)


def test_a_while_loop_whose_predicate_reads_an_array_is_left_open():
    mesh = _mesh()

    def f(a):
        return jax.lax.while_loop(lambda a: a.sum() < 100.0, lambda a: a * 2.0, a)
    step = explain_program(describe_program(f, _put(mesh, (16,), "x"))).collectives
    assert not step.complete and step.undetermined.rule == "COLL-8"
    assert "predicate" in step.undetermined.why


def _bench_steps():
    path = pathlib.Path(__file__).parents[1] / "benchmarks" / "bench_steps.py"
    spec = importlib.util.spec_from_file_location("bench_steps", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@checks("COLL-8", "COLL-7")
def test_the_scanned_tensor_parallel_step_communicates_as_compiled():
    """The benchmarks' scanned transformer (attention, layernorm, a SwiGLU MLP, an
    activation constraint per layer) under Megatron's plan, small: per layer an all-reduce
    of the attention scores, of the attention's output and of the MLP's, run once per
    layer, and the loss's sum over 'data' once."""
    bench = _bench_steps()
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(Auto, Auto))
    loss, args, _ = bench.step(3, True, mesh, bench.TP, sizes=(64, 128, 16, 8))
    real, step = _both(loss, *args)
    assert step.complete and _keys(step) == real
    assert [(c.kind, c.axes, c.trips) for c in step] == [
        ("all-reduce", ("model",), 3)] * 3 + [("all-reduce", ("data",), 1)]
    assert step.bytes_per_device == 3 * sum(c.bytes_per_device for c in step[:3]) + 4


def test_the_scanned_step_at_65536_devices_is_reported_whole_without_devices():
    bench = _bench_steps()
    loss, args, _ = bench.step(32, True, None, bench.TP)
    program = describe_program(jax.jit(loss), *args)
    step = predicted_collectives(program)
    assert step.complete and [c.trips for c in step] == [32, 32, 32, 1]
    assert all(c.replica_groups is None for c in step)
    assert step.bytes_per_device == 32 * sum(c.bytes_per_device for c in step[:3]) + 4


@checks("COLL-8", "COLL-9", "COLL-10")
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(loop_recipes(max_steps=3))
def test_drawn_loops_communicate_as_compiled(recipe):
    outcome = compare_collectives(recipe)
    assert not outcome.disagreements, (recipe, outcome.disagreements)


@checks("COLL-3")
def test_a_reduction_over_several_split_dimensions_all_reduces_once_per_dimension():
    """Surfaced by a cond's predicate (``a.sum() > 0``, computed before the cond): XLA sums
    the dimensions one by one, the minor first, where the spec had made one all-reduce
    over every axis; a dimension split over two axes is summed over both at once."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(Auto,) * 3)
    for spec, axes in (((("x", "z"), "y"), [("y",), ("x", "z")]),
                       (("y", None, "x"), [("x",), ("y",)])):
        a = _put(mesh, (8, 8, 8)[:len(spec)], *spec)
        real, step = _both(lambda a: a.sum(), a)
        assert step.complete and _keys(step) == real
        assert [c.axes for c in step] == axes


@checks("COLL-9", "COLL-7")
def test_an_all_reduce_of_a_constant_moves_out_of_the_loop_and_is_combined_there():
    """``w.sum(0)`` of a loop's constant split over 'y' is summed once before the loop, and
    XLA's combiner joins it with the step's own all-reduce over 'y' (64 bytes, one
    collective); the body's all-reduce of its carry stays in the body."""
    mesh = _mesh()
    w, u = _put(mesh, (8, 8), "y"), _put(mesh, (8, 8), "y")

    def f(c, w, u):
        return jax.lax.scan(lambda c, _: (c * w.sum(0), None), c, None, length=3)[0], \
            u.sum(0)
    real, step = _both(f, _put(mesh, (8,)), w, u)
    assert step.complete and _keys(step) == real == [
        ("all-reduce", ((0, 1, 2, 3), (4, 5, 6, 7)), 64, 1)]

    def g(c, w):
        return jax.lax.scan(lambda c, _: (c.sum(0) * w.sum(0) + c, None), c, None,
                            length=3)[0]
    real, step = _both(g, _put(mesh, (8, 8), "y"), w)
    assert step.complete and _keys(step) == real == [
        ("all-reduce", ((0, 1, 2, 3), (4, 5, 6, 7)), 32, 1),
        ("all-reduce", ((0, 1, 2, 3), (4, 5, 6, 7)), 32, 3)]


@checks("COLL-10")
def test_a_dead_final_carry_is_moved_nowhere():
    """A scan whose ``ys`` alone is returned: its final carry is dead code, so nothing
    reshards it (it keeps the unsplit split of a value propagation never reaches)."""
    mesh = _mesh()

    def f(c, xs):
        return jax.lax.scan(lambda c, t: (jnp.sin(c) + t, c * 2.0), c, xs)[1]
    real, step = _both(f, _put(mesh, (2, 4, 16), "x"), _put(mesh, (4, 2, 4, 16), None, "x"))
    assert step.complete and _keys(step) == real == []


@checks("COLL-4")
@pytest.mark.parametrize("spec, axis, along", [
    (("x", None), 0, True), (("x", None), 1, False), ((None, "y"), 1, True),
    (("x", "y"), 0, True), ((("x", "y"),), 0, True), ((None, "y"), 0, False)])
def test_a_cumulative_sum_along_a_split_dimension_is_left_open_where_xla_gathers(
        spec, axis, along):
    """XLA gathers a cumsum's operand along its own dimension where that dimension is split
    (its plan not read yet: left open); split elsewhere, nothing is communicated."""
    mesh = _mesh()

    def f(a):
        return jax.lax.cumsum(a, axis=axis)
    real, step = _both(f, _put(mesh, (16, 32), *spec))
    if along:
        assert [kind for kind, *_ in real] == ["all-gather"]
        assert not step.complete and step.undetermined.rule == "COLL-4"
    else:
        assert real == [] and step.complete and _keys(step) == []


def test_a_scanned_step_whose_cond_a_constraint_leads_is_read_through():
    """A scanned step whose cond's branch returns a constraint (PROP-13 leads that join):
    the loop's collectives read every join, led or not (the deep run's bare IndexError),
    and the step agrees with JAX."""
    from shardlaw.properties import steps_harness
    from shardlaw.properties.steps_strategies import StepCase
    case = StepCase(layers=("bias",), depth=1, scan=True, remat=False, cond=True,
                    transform="forward", optimizer="adamw", mesh="auto", grid=(8, 1),
                    plan="tp", constraint="model", out=None, donate=True, given=False,
                    refused=None)
    assert steps_harness.compare_step(case) == []


@checks("COLL-10")
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("out", [(), ("x",)])
def test_a_cond_result_an_out_sharding_gathers_is_gathered_once_after_the_conditional(
        explicit, out):
    """A cond of ``a`` on ``P(('x', 'y'))`` returned under ``P()`` or ``P('x')`` (or, 'x'
    Explicit, left open: its type's ``P('x')``): the conditional's result keeps the
    branches' split over 'y' and is all-gathered once after it, not at each branch's end
    (the deep run's case, seed 778: two all-gathers predicted where XLA has one)."""
    types = (jax.sharding.AxisType.Explicit if explicit else Auto, Auto)
    mesh = jax.make_mesh((1, 8), ("x", "y"), axis_types=types)
    put = jax.sharding.NamedSharding(mesh, P(*out))

    def f(a, w):
        return jax.lax.cond(a.sum() > 0, lambda a, u: a + u.sum(0, keepdims=True),
                            lambda a, u: a - 1.0, a, w)
    g = jax.jit(f) if explicit and out == ("x",) else jax.jit(f, out_shardings=put)
    args = (_put(mesh, (16,), ("x", "y")), _put(mesh, (16,), ("x", "y")))
    real, step = _both(g, *args)
    assert ("all-gather", ((0, 1, 2, 3, 4, 5, 6, 7),), 64, 1) in real
    assert step.complete and _keys(step) == real
