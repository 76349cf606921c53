"""Where one mesh axis would split two factors of an equation (PROP-14), conflicts between
values that reach their reader in program order (PROP-15), and the scanned FSDP step they
decide: held to the compiled executable on 8 CPU devices (issue 33)."""

from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.collectives_harness import hlo_runs
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program

Auto = jax.sharding.AxisType.Auto
P = jax.sharding.PartitionSpec
BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def _mesh(grid, names=("x", "y")):
    return jax.make_mesh(grid, names, axis_types=(Auto,) * len(grid))


def _compiled(f, args):
    """The compiled module's collectives as (kind, groups, bytes per device, runs)."""
    text = jax.jit(f).lower(*args).compile().as_text()
    runs = hlo_runs(text)
    return sorted((c.kind, tuple(sorted(tuple(g) for g in c.replica_groups)),
                   c.bytes_per_device, runs.get(c.name, 1)) for c in collectives_in_hlo(text))


def _predicted(step):
    return sorted((c.kind, tuple(sorted(tuple(g) for g in c.replica_groups.groups())),
                   c.bytes_per_device, c.trips) for c in step)


def _placed(grid, *placed, names=("x", "y")):
    mesh = _mesh(grid, names)
    return [jax.device_put(jnp.ones(shape), jax.sharding.NamedSharding(mesh, spec))
            for shape, spec in placed]


def _both(f, args):
    real = tuple(r.sharding for r in jax.jit(f)(*args))
    return real, explain_program(describe_program(f, *args))


# ---------------------------------------------------------------- PROP-14: factors in turn

@checks("PROP-14")
@pytest.mark.parametrize("f, left, right, expected", [
    # of one size: the first operand's factor comes first
    (lambda a, b: (a @ b,), ((8, 8), P("x", None)), ((8, 8), P(None, "x")), P("x", None)),
    # the larger source tensor's factor first, in either place
    (lambda a, b: (a @ b,), ((8, 16), P("x", None)), ((16, 32), P(None, "x")), P(None, "x")),
    (lambda a, b: (a @ b,), ((32, 16), P("x", None)), ((16, 8), P(None, "x")), P("x", None)),
    # elementwise: the operand that comes first keeps the axis
    (lambda a, b: (a * b,), ((8, 8), P("x", None)), ((8, 8), P(None, "x")), P("x", None)),
    (lambda a, b: (a * b,), ((8, 8), P(None, "x")), ((8, 8), P("x", None)), P(None, "x")),
    # a split the result already holds cuts the other factor's (the projection of FSDP)
    (lambda a, b: (jnp.einsum("bqk,kn->bqn", a, b) + a,), ((8, 4, 16), P("x", None, "y")),
     ((16, 16), P("y", "x")), P("x", None, "y")),
    (lambda a, b: ((a @ b) + a,), ((8, 8), P("x", None)), ((8, 8), P(None, "x")),
     P("x", None)),
])
def test_one_axis_wanted_by_two_factors_goes_to_the_factor_shardy_visits_first(
        f, left, right, expected):
    real, verdict = _both(f, _placed((2, 4), left, right))
    assert real[0].spec == expected
    assert verdict.out_shardings == (from_jax(real[0]),)
    assert verdict.undetermined == ()


@checks("PROP-14")
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("shape", [(16, 2, 16), (16, 16, 16)])
def test_in_an_elementwise_operation_the_split_of_more_pieces_comes_first(swap, shape):
    # of the propagation property's seed 20261902 (two disagreements of a first version
    # that ordered by the source tensor alone): the batch's ('x', 'y') wins over 'y'
    left, right = ((shape, P("x", "y", None)), (shape, P(("x", "y"), None, None)))
    args = _placed((4, 2), *((right, left) if swap else (left, right)))
    real, verdict = _both(lambda a, b: (jnp.maximum(a, b),), args)
    assert tuple(real[0].spec)[0] == ("x", "y") and not any(tuple(real[0].spec)[1:])
    assert verdict.out_shardings == (from_jax(real[0]),)
    assert _predicted(verdict.collectives) == _compiled(lambda a, b: (jnp.maximum(a, b),), args)


@checks("PROP-14")
def test_a_weight_split_over_the_batch_s_axis_is_gathered_where_nothing_is_left_idle():
    # the output projection of attention under FSDP: 'x' would split the batch (from the
    # larger operand, first) and the weight's output features; the weight holds every
    # axis, so it is gathered over 'x', and the contracted 'y' summed
    args = _placed((2, 4), ((8, 4, 16), P("x", None, "y")), ((16, 16), P("y", "x")))
    f = lambda a, b: (jnp.einsum("bqk,kn->bqn", a, b),)   # noqa: E731
    verdict = explain_program(describe_program(f, *args))
    assert verdict.collectives.complete
    assert _predicted(verdict.collectives) == _compiled(f, args)
    assert {c.kind for c in verdict.collectives} == {"all-gather", "all-reduce"}


@checks("PROP-14")
def test_an_operand_replicated_over_an_idle_axis_is_left_to_the_partitioner():
    # XLA routes b's gather through 'y' (a collective-permute, then an all-gather over 'y')
    args = _placed((2, 4), ((8, 8), P("x", None)), ((8, 8), P(None, "x")))
    f = lambda a, b: (a @ b,)   # noqa: E731
    real, verdict = _both(f, args)
    assert real[0].spec == P("x", None)
    assert verdict.out_shardings == (from_jax(real[0]),)
    assert not verdict.collectives.complete
    assert verdict.collectives.undetermined.rule == "COLL-2"
    assert {kind for kind, *_ in _compiled(f, args)} == {"all-gather", "collective-permute"}


@checks("PROP-14")
def test_a_cut_a_value_grown_elsewhere_in_the_pass_decides_is_left_open():
    # a.T reaches the product in the same pass: which factor keeps 'x' is the order's
    args = _placed((2, 4), ((8, 8), P(None, "x")), ((8, 8), P(None, "x")))
    real, verdict = _both(lambda a, b: (a.T * b,), args)
    assert verdict.out_shardings == (UNSPECIFIED,)
    assert "order of visiting" in verdict.undetermined[0][1]


# ---------------------------------------------------------- PROP-15: chains come first

@checks("PROP-15")
@pytest.mark.parametrize("f, left, right, expected", [
    (lambda a, b: (jnp.sin(a) + jnp.cos(b),), P("y"), P("z"), P()),
    (lambda a, b: (jnp.cos(b) + jnp.sin(a),), P("y"), P("z"), P()),
    (lambda a, b: (jnp.sin(a) + b,), P("y"), P("z"), P()),
    (lambda a, b: (a + jnp.sin(b),), P("y"), P("z"), P()),
    (lambda a, b: (jnp.sin(jnp.sin(a)) * jnp.cos(b),), P("y"), P("z"), P()),
    (lambda a, b: (a.astype(jnp.bfloat16).astype(jnp.float32) * b,), P(("x", "y")),
     P(("z", "y")), P()),
    (lambda a, b: (b * a.astype(jnp.bfloat16).astype(jnp.float32),), P(("x", "y")),
     P(("z", "y")), P()),
    (lambda a, b: (jnp.sin(a) + jnp.cos(b),), P(("x", "y")), P(("x", "z")), P("x")),
    (lambda a, b: (jnp.cos(b) - jnp.sin(a),), P(("x", "y")), P(("x", "z")), P("x")),
])
def test_values_growing_in_program_order_before_their_reader_keep_their_common_prefix(
        f, left, right, expected):
    args = _placed((2, 2, 2), ((8,), left), ((8,), right), names=("x", "y", "z"))
    real, verdict = _both(f, args)
    assert real[0].spec == expected
    assert verdict.out_shardings == (from_jax(real[0]),)
    assert verdict.undetermined == ()


@checks("PROP-15")
def test_a_value_read_twice_is_no_chain_and_its_conflict_stays_open():
    # s = sin(a) is read by the add and returned through a mul with c: the mul may grow it
    # before the add is visited, so the add's conflict is the partitioner's order's
    args = _placed((2, 2, 2), ((8,), P("y")), ((8,), P("z")), ((8,), P(("y", "x"))),
                   names=("x", "y", "z"))

    def f(a, b, c):
        s = jnp.sin(a)
        return s + jnp.cos(b), s * c
    real, verdict = _both(f, args)
    assert verdict.out_shardings[0] is UNSPECIFIED
    assert "order of visiting" in verdict.undetermined[0][1]


@checks("PROP-14", "PROP-15")
def test_a_chain_decides_a_cut_between_two_factors():
    args = _placed((2, 4), ((8, 8), P("x", None)), ((8, 8), P(None, "x")))
    real, verdict = _both(lambda a, b: (jnp.sin(a) * jnp.cos(b),), args)
    assert real[0].spec == P("x", None)
    assert verdict.out_shardings == (from_jax(real[0]),)


# ------------------------------------------------------------- the scanned FSDP step

def _fsdp_step(grid, layers=2):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_steps
    finally:
        sys.path.remove(str(BENCHMARKS))
    mesh = _mesh(grid, ("data", "model"))
    return bench_steps.step(layers, True, mesh, bench_steps.FSDP_TP, (16, 32, 4, 8))[:2]


@checks("PROP-14", "PROP-5")
@pytest.mark.parametrize("grid", [(2, 4), (4, 2)])
def test_the_scanned_fsdp_step_communicates_as_its_compiled_module(grid):
    loss, args = _fsdp_step(grid)
    verdict = explain_program(describe_program(jax.jit(loss), *args))
    step = verdict.collectives
    assert step.complete, step.undetermined
    assert _predicted(step) == _compiled(loss, args)
    # FSDP's gather of each of the seven weights over 'data', once per layer, beside the
    # three all-reduces over 'model' in the loop's body and the loss's over 'data'
    gathers = [c for c in step if c.kind == "all-gather"]
    assert len(gathers) == 7 and all(c.axes == ("data",) and c.trips == 2 for c in gathers)
    assert sorted((c.axes, c.trips) for c in step if c.kind == "all-reduce") == [
        (("data",), 1)] + [(("model",), 2)] * 3


# ---------------------------------------------------- a slice of one concatenated operand

@checks("PROP-6")
@pytest.mark.parametrize("start, taken", [(0, 0), (4, 1)])
@pytest.mark.parametrize("first, second", [(P(None), P("y")), (P("y"), P(None))])
def test_a_slice_of_one_concatenated_operand_folds_to_it(start, taken, first, second):
    # of the propagation property's seed 20261903 (present before PROP-14): StableHLO folds
    # the slice to the operand whose range it takes, which keeps its own placement
    args = _placed((2, 4), ((4,), first), ((4,), second))
    real, verdict = _both(lambda a, b: (jnp.concatenate([a, b])[start:start + 4],), args)
    assert [p for p in real[0].spec if p] == [p for p in (first, second)[taken] if p]
    assert verdict.out_shardings == (from_jax(real[0]),)
