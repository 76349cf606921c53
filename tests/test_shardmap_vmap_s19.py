"""A shard_map under a vmap whose batch is split over an Explicit mesh axis (issue 32, the
steps deep run of session 19), against JAX 0.10.2 on 8 CPU devices.

Under such a vmap JAX leaves the axes the batch is split over out of the mesh's axes when
it decides whether a shard_map makes every axis manual: one manual over all the others,
all Explicit, takes each argument as its type splits it (SMAP-17), checked on one
example's types while vmap traces. The spec's vmap traced the example without that
environment, so it let the shard_map pass, and where a refusal of the example came after it
(a sort of the result along a split dimension) it failed describing the batched body:
the batched shard_map typed its body's batched inputs without the batch's split over the
Explicit axis, which stays automatic inside and which JAX's types keep (``f32[8@y,4]``).
Each shape is now held to JAX on both sides: refused by SMAP-17 at the trace stage with
JAX's ValueError at the shard_map's in spec, or accepted alike (traced, compiled and run).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from shardlaw.properties import steps_harness
from shardlaw.properties.registry import checks
from shardlaw.properties.steps_strategies import FuzzCase
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.core.values import PartitionSpec

from test_steps_arguments import NS, P, held_to_jax

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _scatter_gather(a):
    return jax.lax.all_gather(jax.lax.psum_scatter(a, "x", tiled=True), "x", tiled=True)


SMAP = jax.shard_map(_scatter_gather, mesh=EXPLICIT, in_specs=P("x"), out_specs=P("x"),
                     axis_names={"x"})


def _sorted(h):
    return jax.numpy.sort(SMAP(h), -1)


def _on(spec):
    data = (np.arange(64, dtype=np.float32).reshape(8, 8) % 5) / 5.0
    return jax.device_put(data, NS(EXPLICIT, spec))


def _grad_each(fun):
    return jax.vmap(jax.grad(lambda h: fun(h).sum()))


def _all_axes(h):
    return jax.shard_map(lambda a: a * 2.0, mesh=EXPLICIT, in_specs=P("x"),
                         out_specs=P("x"), axis_names={"x", "y"})(h)


def _default_axes(h):
    return jax.shard_map(lambda a: a * 2.0, mesh=EXPLICIT, in_specs=P("x"),
                         out_specs=P("x"))(h)


# name: (the function, the arguments' spec, JAX's class, the rule, the path; None: both
# accept). Each refusal is at the trace stage but the one at lower (SMAP-23).
CASES = {
    # the batch split over y, the example unsplit: the in spec P('x') is not its type's
    "split-batch-then-sort": (jax.vmap(_sorted), P("y", None), "ValueError", "SMAP-17",
                              "body[0].shard_map.in_specs[0]"),
    "split-batch-alone": (jax.vmap(SMAP), P("y", None), "ValueError", "SMAP-17",
                          "body[0].shard_map.in_specs[0]"),
    "split-batch-then-sort-under-grad": (_grad_each(_sorted), P("y", None), "ValueError",
                                         "SMAP-17", "body[0].shard_map.in_specs[0]"),
    # the example split over x as the in spec says: the sort then refuses (PROG-14)
    "matching-example-then-sort": (jax.vmap(_sorted), P("y", "x"), "ShardingTypeError",
                                   "PROG-14", "body[1].jit.body[0]"),
    # the body's batched input keeps the split over y: its psum_scatter is refused at lower
    "matching-example-alone": (jax.vmap(SMAP), P("y", "x"), "AssertionError", "SMAP-23",
                               "body[0].shard_map.body[0]"),
    "matching-example-under-grad": (_grad_each(SMAP), P("y", "x"), None, None, None),
    # the batch unsplit: the shard_map leaves y automatic, nothing checked against types
    "unsplit-batch": (jax.vmap(SMAP), P(None, None), None, None, None),
    # axis_names is a subset of the mesh's axes less those the batch is split over (SMAP-1)
    "axis-names-naming-the-batch-axis": (jax.vmap(_all_axes), P("y", "x"), "ValueError",
                                         "SMAP-1", "body[0]"),
    "axis-names-naming-the-batch-axis-under-grad": (_grad_each(_all_axes), P("y", "x"),
                                                    "ValueError", "SMAP-1", "body[0]"),
    "batch-split-over-the-manual-axis": (jax.vmap(SMAP), P(("x", "y"), None), "ValueError",
                                         "SMAP-1", "body[0]"),
    "batch-split-over-the-manual-axis-alone": (jax.vmap(SMAP), P("x", None), "ValueError",
                                               "SMAP-1", "body[0]"),
    # left out, axis_names are those other axes: manual over x, the batch kept split over y
    "default-axis-names": (jax.vmap(_default_axes), P("y", "x"), None, None, None),
    "default-axis-names-under-grad": (_grad_each(_default_axes), P("y", "x"), None, None,
                                      None),
    # in_specs left out too (read off the types, SMAP-16), axis_names left out or naming y
    "inferred-default-axis-names": (jax.vmap(jax.shard_map(
        lambda a: a * 2.0, mesh=EXPLICIT, out_specs=P("x"))), P("y", "x"), None, None, None),
    "inferred-axis-names-naming-the-batch-axis": (jax.vmap(jax.shard_map(
        lambda a: a * 2.0, mesh=EXPLICIT, out_specs=P("x"), axis_names={"x", "y"})),
        P("y", "x"), "ValueError", "SMAP-1", "body[0]"),
    # the batch unsplit: every axis manual, the in spec checked against the type (SMAP-17)
    "default-axis-names-unsplit-batch": (jax.vmap(_default_axes), P(None, "x"), None, None,
                                         None),
    "default-axis-names-unsplit-batch-mismatch": (jax.vmap(_default_axes), P(None, None),
                                                  "ValueError", "SMAP-17",
                                                  "body[0].shard_map.in_specs[0]"),
}


@checks("SMAP-1", "SMAP-17", "SMAP-18", "SMAP-23", "PROG-14")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_shard_map_under_a_vmap_split_over_an_explicit_axis_is_held_to_jax(name):
    fun, spec, error, rule, path = CASES[name]
    x = _on(spec)
    if error is None or rule == "SMAP-23":   # JAX traces it: both staged to the end
        _, verdict, problems = held_to_jax(fun, x)
        assert not problems, problems
        assert verdict.accepted == (error is None)
        if error is not None:
            with pytest.raises(Exception) as refused:
                jax.jit(fun).trace(x).lower()
            assert type(refused.value).__name__ == error
            assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
                rule, "lower", path, error)
        return
    # refused while vmap traces: the spec's vmap refuses as it batches the description
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(x)
    assert type(refused.value).__name__ == error
    with pytest.raises(Rejection) as spec_refused:
        describe_program(fun, x)
    found = spec_refused.value
    assert (found.rule, found.stage, found.path, found.jax_error) == (
        rule, "trace", path, error)


def test_the_batched_body_keeps_the_batch_split_over_the_explicit_axis():
    """The batched shard_map's body input is typed as JAX types it: the batch dimension
    split over y, which stays automatic inside the shard_map (``f32[8@y,4]``)."""
    x = _on(P("y", "x"))
    program, verdict, problems = held_to_jax(_grad_each(SMAP), x)
    assert not problems and verdict.accepted
    program = describe_program(jax.vmap(SMAP), x)
    body = jax.make_jaxpr(jax.vmap(SMAP))(x).jaxpr.eqns[0].params["jaxpr"]
    assert str(body.invars[0].aval.sharding.spec) == "P('y', None)"
    (shard_map,) = [eq for eq in program.equations if hasattr(eq, "manual_axes")]
    given = shard_map.body.inputs[0]
    assert (given.shape, given.spec) == ((8, 4), PartitionSpec("y"))


@pytest.mark.parametrize("transform", ["vmap", "vmap_grad"])
@pytest.mark.parametrize("ops", [("smap_scatter_gather", "sort"),
                                 ("sort", "inner_jit", "scan_rows", "smap_scatter_gather",
                                  "sort")])
def test_the_deep_runs_draws_agree(ops, transform):
    """The draws the session's steps deep run found the spec failing to describe."""
    case = FuzzCase(ops=ops, transform=transform, grid=(2, 4), spec=("y", None),
                    explicit=True, committed=True)
    assert steps_harness.compare_fuzz(case) == []


def test_the_default_axis_names_are_fixed_at_the_first_call():
    """JAX's shard_map keeps the axis_names it defaulted at its first call: called first
    under a vmap split over y it stays manual over x alone when called plainly after, and
    the spec, which reads JAX's trace of the call, types it so too."""
    mapped = jax.shard_map(lambda a: a * 2.0, mesh=EXPLICIT, in_specs=P("x"),
                           out_specs=P("x"))
    _, verdict, problems = held_to_jax(jax.vmap(mapped), _on(P("y", "x")))
    assert not problems and verdict.accepted
    x = jax.device_put(np.ones((8, 4), np.float32), NS(EXPLICIT, P("x", "y")))
    program, verdict, problems = held_to_jax(mapped, x)
    assert not problems and verdict.accepted
    (shard_map,) = [eq for eq in program.equations if hasattr(eq, "manual_axes")]
    assert shard_map.manual_axes == frozenset({"x"})
    # a fresh one, called plainly, is manual over both and checks its in spec (SMAP-17)
    fresh = jax.shard_map(lambda a: a * 2.0, mesh=EXPLICIT, in_specs=P("x"),
                          out_specs=P("x"))
    with pytest.raises(ValueError):
        jax.jit(fresh).trace(x)
