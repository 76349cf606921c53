"""describe_program of a ``jax.shard_map`` JAX refuses for its own specs under a ``vmap``
called inside the function (issue 32, item 4), against JAX 0.10.2 on 8 CPU devices.

JAX refuses such a call in two places. At the call, before it traces the body, it checks
the user's specs against the mesh and one example's types (SMAP-3, SMAP-7 for an in spec,
SMAP-8): the spec batches the call with those checks kept (its batched specs, the batch
entry inserted, checked against the batched operands, which refuse where the example's
do). After vmap's batching rule has bound the batched call and JAX has traced its body,
it checks the batched body's results against the batched out specs (SMAP-7 for an out
spec, SMAP-11): the call is described as JAX staged it, its batched specs and body read
from that staging. Each was JAX's own error from describe_program; each is now held to
JAX on both sides: the neighbour JAX accepts is accepted alike (traced, compiled and run),
the refused one refused by the rule, at the trace stage, with JAX's class, at the
shard_map's spec.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, assert_refusal_case, held_to_jax, mesh

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _auto(shape=(4, 8, 8)):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 5


def _on(spec, shape=(4, 8, 8)):
    """An array of ``shape`` placed by ``spec`` on the (2, 4) mesh of Explicit axes."""
    return jax.device_put(_auto(shape), NS(EXPLICIT, spec))


def _smap(in_specs, out_specs, body=lambda x: x * 2.0, on=None, **kwargs):
    return jax.shard_map(body, mesh=on or mesh(), in_specs=in_specs, out_specs=out_specs,
                         **kwargs)


def _summed(x):
    return jax.lax.psum(x, "x")


def _vmapped(*args, **kwargs):
    return lambda a: jax.vmap(_smap(*args, **kwargs))(a)


def _twice(*args, **kwargs):
    return lambda a: jax.vmap(jax.vmap(_smap(*args, **kwargs)))(a)


def _spmd(*args, **kwargs):
    return lambda a: jax.vmap(_smap(*args, **kwargs), spmd_axis_name="y")(a)


def _in_jit(*args, **kwargs):
    """The shard_map under vmap in an inner jit, called after a sin."""
    return lambda a: jax.jit(lambda r: jax.vmap(_smap(*args, **kwargs))(r) + 1.0)(
        jax.numpy.sin(a))


def _after(*args, **kwargs):
    """The shard_map under vmap after a sin, the batch at axis 1."""
    return lambda a: jax.vmap(_smap(*args, **kwargs), in_axes=1)(jax.numpy.sin(a))


# name: (the function, its arguments, JAX's class, the rule, the path; None: both accept)
CASES = {
    # SMAP-7: an in spec longer than the example's rank
    "in-spec-too-long": (_vmapped(P(None, None, "x"), P(None, None, "x")),
                         lambda: (_auto(),), "ValueError", "SMAP-7",
                         "body[0].shard_map.in_specs[0]"),
    "in-spec-as-long-as-the-example": (_vmapped(P(None, "x"), P(None, "x")),
                                       lambda: (_auto(),), None, None, None),
    "in-spec-too-long-under-two-vmaps": (_twice(P(None, "x"), P(None, "x")),
                                         lambda: (_auto((2, 4, 8)),), "ValueError", "SMAP-7",
                                         "body[0].shard_map.in_specs[0]"),
    "in-spec-under-two-vmaps": (_twice(P("x"), P("x")), lambda: (_auto((2, 4, 8)),),
                                None, None, None),
    "in-spec-too-long-with-spmd_axis_name": (_spmd(P(None, None, "x"), P(None, None, "x")),
                                             lambda: (_auto(),), "ValueError", "SMAP-7",
                                             "body[0].shard_map.in_specs[0]"),
    "in-spec-with-spmd_axis_name": (_spmd(P(None, "x"), P(None, "x")), lambda: (_auto(),),
                                    None, None, None),
    "in-spec-too-long-in-a-jit": (_in_jit(P(None, None, "x"), P(None, None, "x")),
                                  lambda: (_auto(),), "ValueError", "SMAP-7",
                                  "body[1].jit.body[0].shard_map.in_specs[0]"),
    "in-spec-in-a-jit": (_in_jit(P(None, "x"), P(None, "x")), lambda: (_auto(),),
                         None, None, None),
    "in-spec-too-long-batched-at-axis-1": (_after(P(None, None, "x"), P(None, None, "x")),
                                           lambda: (_auto((8, 4, 8)),), "ValueError", "SMAP-7",
                                           "body[1].shard_map.in_specs[0]"),
    "in-spec-batched-at-axis-1": (_after(P(None, "x"), P(None, "x")),
                                  lambda: (_auto((8, 4, 8)),), None, None, None),
    # SMAP-8: an example dimension the spec's axes do not divide
    "indivisible": (_vmapped(P(("x", "y")), P(("x", "y"))), lambda: (_auto((4, 4, 8)),),
                    "ValueError", "SMAP-8", "body[0].shard_map.in_specs[0]"),
    "divisible": (_vmapped(P(("x", "y")), P(("x", "y"))), lambda: (_auto((4, 16, 8)),),
                  None, None, None),
    "indivisible-with-spmd_axis_name": (_spmd(P(None, "x"), P(None, "x")),
                                        lambda: (_auto((4, 8, 3)),), "ValueError", "SMAP-8",
                                        "body[0].shard_map.in_specs[0]"),
    # SMAP-3: a spec naming an axis the mesh lacks or leaves automatic
    "axis-not-in-the-mesh": (_vmapped(P("z"), P("z")), lambda: (_auto(),),
                             "ValueError", "SMAP-3", "body[0].shard_map.in_specs[0]"),
    "axis-left-automatic": (_vmapped(P("y"), P("y"), axis_names={"x"}), lambda: (_auto(),),
                            "ValueError", "SMAP-3", "body[0].shard_map.in_specs[0]"),
    "manual-axis": (_vmapped(P("x"), P("x"), axis_names={"x"}), lambda: (_auto(),),
                    None, None, None),
    "axis-left-automatic-over-explicit-axes": (
        _vmapped(P("y"), P("y"), on=EXPLICIT, axis_names={"x"}),
        lambda: (_on(P()),), "ValueError", "SMAP-3", "body[0].shard_map.in_specs[0]"),
    "manual-axis-over-explicit-axes": (_vmapped(P("x"), P("x"), on=EXPLICIT,
                                                axis_names={"x"}),
                                       lambda: (_on(P()),), None, None, None),
    # SMAP-11: a batched result varying along an axis its batched out spec leaves out
    "varying-result-out-spec-replicated": (_vmapped(P("x"), P()), lambda: (_auto(),),
                                           "ValueError", "SMAP-11",
                                           "body[0].shard_map.out_specs[0]"),
    "summed-result-out-spec-replicated": (_vmapped(P("x"), P(), body=_summed),
                                          lambda: (_auto(),), None, None, None),
    "varying-result-under-two-vmaps": (_twice(P("x"), P()), lambda: (_auto((2, 4, 8)),),
                                       "ValueError", "SMAP-11",
                                       "body[0].shard_map.out_specs[0]"),
    "varying-result-with-spmd_axis_name": (_spmd(P("x"), P()), lambda: (_auto(),),
                                           "ValueError", "SMAP-11",
                                           "body[0].shard_map.out_specs[0]"),
    "varying-result-in-a-jit": (_in_jit(P("x"), P()), lambda: (_auto(),), "ValueError",
                                "SMAP-11", "body[1].jit.body[0].shard_map.out_specs[0]"),
    "summed-result-in-a-jit": (_in_jit(P("x"), P(), body=_summed), lambda: (_auto(),),
                               None, None, None),
    # SMAP-7: an out spec longer than the batched body's result
    "out-spec-too-long": (_vmapped(P(), P(None, None, "x")), lambda: (_auto(),),
                          "ValueError", "SMAP-7", "body[0].shard_map.out_specs[0]"),
    # (without vmap: an out spec past the rank of a body traced over kept in specs)
    "in-and-out-specs-too-long-without-vmap": (
        lambda a: _smap(P(None, None, "x"), P(None, None, "x"))(a[0]), lambda: (_auto(),),
        "ValueError", "SMAP-7", "body[2].shard_map.in_specs[0]"),
    "out-spec-too-long-batched-at-axis-1": (_after(P(), P(None, None, "x")),
                                            lambda: (_auto((8, 4, 8)),), "ValueError",
                                            "SMAP-7", "body[1].shard_map.out_specs[0]"),
}


@checks("SMAP-3", "SMAP-7", "SMAP-8", "SMAP-11")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_shard_maps_specs_under_a_vmap_in_the_function_are_held_to_jax(name):
    assert_refusal_case(CASES[name])
