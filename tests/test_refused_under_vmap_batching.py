"""describe_program of a call that vmap's batching rule refuses, under a ``vmap`` called
inside the function (issue 32, item 4), against JAX 0.10.2 on 8 CPU devices.

JAX checks a call on one example when the function makes it, then vmap's batching rule
stages it batched, and some refusals are the rule's own, made after the example passed:
a constraint whose spec names vmap's ``spmd_axis_name`` (WSC-7's ValueError) or an axis
the mesh lacks (NS-1); an inner jit whose batched in_shardings or out_shardings would name
the spmd axis twice (BAT-4, JAX's DuplicateSpecError) or an axis its mesh lacks (BAT-5);
a shard_map whose specs name the spmd axis (PBAT-1). Each was JAX's own error from
describe_program. The call is now described on the example and batched by the spec's
rule for it (an inner jit read from the parameters vmap was batching), which refuses it:
describe_program raises the spec's refusal, as it does where the spec's own vmap of a
whole function refuses, with the rule, at the trace stage, at the call's path in the
program, an instance of JAX's class. The neighbours JAX accepts (another spmd axis) are
described and accepted alike (traced, compiled and run).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import NS, P, held_to_jax, mesh

lax = jax.lax


def _auto(shape=(4, 8, 8)):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 5


def _constrained(spec):
    return lambda r: lax.with_sharding_constraint(r * 2.0, NS(mesh(), spec))


EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)
MIXED = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                          axis_types=(jax.sharding.AxisType.Explicit,
                                      jax.sharding.AxisType.Auto))


def _explicit_constraint(spec, on=EXPLICIT):
    return lambda r: lax.with_sharding_constraint(r * 2.0, NS(on, spec))


def _jit_in(spec):
    return jax.jit(lambda r: r * 2.0, in_shardings=NS(mesh(), spec))


def _jit_out(spec):
    return jax.jit(lambda r: r * 2.0, out_shardings=NS(mesh(), spec))


def _jit_around(step):
    """``step`` in an inner jit's body, after a sin."""
    return jax.jit(lambda r: step(jax.numpy.sin(r)))


def _smap(in_specs, out_specs, body=lambda x: x * 2.0, **kwargs):
    return jax.shard_map(body, mesh=mesh(), in_specs=in_specs, out_specs=out_specs, **kwargs)


def _spmd(f, axis="y"):
    return lambda a: jax.vmap(f, spmd_axis_name=axis)(a)


def _spmd_twice(f):
    """``f`` under two vmaps, the outer one with spmd_axis_name 'y'."""
    return lambda a: jax.vmap(jax.vmap(f), spmd_axis_name="y")(a)


def _after_sin(f):
    return lambda a: jax.vmap(f, spmd_axis_name="y")(jax.numpy.sin(a))


# name: (the function, its arguments' shape, JAX's class, the rule, the path; None: both
# accept)
CASES = {
    # WSC-7: a constraint naming the spmd axis
    "constraint": (_spmd(_constrained(P("y"))), (4, 8, 8), "ValueError", "WSC-7", "body[1]"),
    "constraint-naming-another-axis": (_spmd(_constrained(P("x"))), (4, 8, 8),
                                       None, None, None),
    "constraint-under-two-vmaps": (_spmd_twice(_constrained(P("y"))), (4, 2, 8),
                                   "ValueError", "WSC-7", "body[1]"),
    "constraint-under-two-vmaps-naming-another-axis": (_spmd_twice(_constrained(P("x"))),
                                                       (4, 2, 8), None, None, None),
    "constraint-after-a-sin": (_after_sin(_constrained(P(None, "y"))), (4, 8, 8),
                               "ValueError", "WSC-7", "body[2]"),
    "constraint-in-a-jit": (_spmd(_jit_around(_constrained(P("y")))), (4, 8, 8),
                            "ValueError", "WSC-7", "body[0].jit.body[2]"),
    "constraint-in-a-jit-naming-another-axis": (_spmd(_jit_around(_constrained(P("x")))),
                                                (4, 8, 8), None, None, None),
    # NS-3: vmap's batch dimension left to the compiler (UNCONSTRAINED) over Explicit axes
    "constraint-over-explicit-axes": (lambda a: jax.vmap(_explicit_constraint(P()))(a),
                                      (4, 8, 8), "ValueError", "NS-3", "body[1]"),
    # NS-1: the spmd axis is not an axis of the constraint's mesh
    "constraint-spmd-axis-not-in-the-mesh": (_spmd(_constrained(P("x")), "z"), (4, 8, 8),
                                             "ValueError", "NS-1", "body[1]"),
    # BAT-4: a jit's batched shardings name the spmd axis twice
    "jit-in_shardings": (_spmd(_jit_in(P("y"))), (4, 8, 8), "DuplicateSpecError", "BAT-4",
                         "body[0].jit.in_shardings[0]"),
    "jit-in_shardings-naming-another-axis": (_spmd(_jit_in(P("x"))), (4, 8, 8),
                                             None, None, None),
    "jit-out_shardings": (_spmd(_jit_out(P(None, "y"))), (4, 8, 8), "DuplicateSpecError",
                          "BAT-4", "body[0].jit.out_shardings[0]"),
    "jit-out_shardings-naming-another-axis": (_spmd(_jit_out(P(None, "x"))), (4, 8, 8),
                                              None, None, None),
    "jit-in_shardings-after-a-sin": (_after_sin(_jit_in(P("y"))), (4, 8, 8),
                                     "DuplicateSpecError", "BAT-4",
                                     "body[1].jit.in_shardings[0]"),
    "jit-in_shardings-under-two-vmaps": (_spmd_twice(_jit_in(P("y"))), (4, 2, 8),
                                         "DuplicateSpecError", "BAT-4",
                                         "body[0].jit.in_shardings[0]"),
    # BAT-5: the spmd axis is not an axis of the jit's mesh
    "jit-spmd-axis-not-in-the-mesh": (_spmd(_jit_in(P("x")), "z"), (4, 8, 8), "ValueError",
                                      "BAT-5", "body[0].jit.in_shardings[0]"),
    # PBAT-1: a shard_map's specs name the spmd axis
    "shard_map-in_specs": (_spmd(_smap(P("y"), P("y"))), (4, 8, 8), "ValueError", "PBAT-1",
                           "body[0].shard_map.in_specs"),
    "shard_map-out_specs": (_spmd(_smap(P(), P("y"), check_vma=False)), (4, 8, 8),
                            "ValueError", "PBAT-1", "body[0].shard_map.out_specs"),
    "shard_map-out_specs-naming-another-axis": (_spmd(_smap(P(), P("x"), check_vma=False)),
                                                (4, 8, 8), None, None, None),
    "shard_map-naming-another-axis": (_spmd(_smap(P("x"), P("x"))), (4, 8, 8),
                                      None, None, None),
}


@checks("WSC-7", "NS-1", "NS-3", "BAT-4", "BAT-5", "PBAT-1")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_refusal_of_vmaps_batching_rule_in_the_function_is_held_to_jax(name):
    fun, shape, error, rule, path = CASES[name]
    x = _auto(shape)
    if error is None:
        _, verdict, problems = held_to_jax(fun, x)
        assert not problems and verdict.accepted, problems
        return
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(x)
    assert type(refused.value).__name__ == error
    with pytest.raises(Rejection) as raised:
        describe_program(fun, x)
    failure = raised.value.failure
    assert error in (failure.jax_error, failure.error_type.__name__)
    assert isinstance(raised.value, failure.error_type)
    assert (failure.rule, raised.value.stage, raised.value.path) == (rule, "trace", path)


# (the batched body of a shard_map under vmap with spmd_axis_name varies along the spmd axis
# already: a pvary the example takes along it, the user's or the one JAX adds for an out
# spec naming it, is refused while JAX traces that body, a refusal of the batched call
# explain_program answers: SMAP-20 at the pvary)
PVARIES = {
    "pcast": (lambda x: lax.pcast(x, "y", to="varying"), "body[0].shard_map.body[0]"),
    "out-spec": (lambda x: x * 2.0, "body[0].shard_map.body[2]"),
}


@checks("SMAP-20")
@pytest.mark.parametrize("axis", ["y", "x"])
@pytest.mark.parametrize("name", sorted(PVARIES))
def test_a_pvary_along_the_spmd_axis_in_a_batched_shard_map_is_held_to_jax(name, axis):
    body, path = PVARIES[name]
    fun = _spmd(_smap(P(), P(axis), body=body if name == "out-spec" else
                      lambda x: lax.pcast(x, axis, to="varying")))
    _, verdict, problems = held_to_jax(fun, _auto())
    assert not problems, problems
    if axis == "x":
        assert verdict.accepted
        return
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "SMAP-20", "trace", path, "ValueError")


# (a constraint naming an Explicit axis is refused on the example, WSC-5: under vmap it is
# batched with that check kept, its batch dimension unsplit where no Auto axis can leave it
# to the compiler)
ON_EXPLICIT_AXES = {
    "explicit-mesh": (lambda a: jax.vmap(_explicit_constraint(P("x")))(a), "body[1]"),
    "explicit-mesh-batched-at-axis-1": (
        lambda a: jax.vmap(_explicit_constraint(P("x")), in_axes=1)(a), "body[1]"),
    "mixed-mesh": (lambda a: jax.vmap(_explicit_constraint(P(None, "x"), MIXED))(a),
                   "body[1]"),
    "mixed-mesh-naming-its-auto-axis": (
        lambda a: jax.vmap(_explicit_constraint(P(None, "y"), MIXED))(a), None),
}


@checks("WSC-5")
@pytest.mark.parametrize("name", sorted(ON_EXPLICIT_AXES))
def test_a_constraint_naming_an_explicit_axis_under_vmap_is_held_to_jax(name):
    fun, path = ON_EXPLICIT_AXES[name]
    x = _auto() if name.startswith("mixed") else jax.device_put(_auto(), NS(EXPLICIT, P()))
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    if path is None:
        assert verdict.accepted
        return
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "WSC-5", "trace", path, "ValueError")
