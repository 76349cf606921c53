"""``explain_program(..., until="trace")`` over an abstract mesh (issue 33): a result the
jit's options leave to the compiler comes back as PROP-7 predicts a concrete mesh of that
shape returns it — held here to JAX 0.10.2 running the same function on such a mesh — with
the collectives predicted beside it, and a result propagation does not determine stays
UNSPECIFIED with its reason. Over a concrete mesh tracing still leaves it to lowering."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from shardlaw.properties.registry import checks
from shardlaw.spec import (
    UNCONSTRAINED, UNSPECIFIED, AbstractMesh, Mesh, NamedSharding, P, explain_program,
    from_jax,
)
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.collectives import predicted_collectives
from shardlaw.spec.program.description import Opaque, Program, Value
from shardlaw.spec.program.propagation import propagation_mesh
from shardlaw.spec.program.propagation_spelling import predicted_out_shardings

Auto = jax.sharding.AxisType.Auto


def _issue_example(a, b):
    h = jnp.tanh(a @ b)
    return h.sum(0), h.T, h.reshape(4, -1)


@checks("PROP-7", "COLL-4")
def test_an_abstract_mesh_traced_gives_what_a_concrete_mesh_of_its_shape_returns():
    concrete = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    placed = [(16, 32), ("x", "y")], [(32, 64), ("y", None)]
    args = [jax.device_put(jnp.ones(shape), jax.sharding.NamedSharding(concrete, jax.P(*spec)))
            for shape, spec in placed]
    returned = [from_jax(r.sharding).spec for r in jax.jit(_issue_example)(*args)]
    abstract = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=jax.sharding.NamedSharding(
        concrete.abstract_mesh, jax.P(*spec))) for shape, spec in placed]
    program = describe_program(_issue_example, *abstract)
    verdict = explain_program(program, until="trace")
    assert verdict.accepted and verdict.until == "trace"
    assert [s.spec for s in verdict.out_shardings] == returned == [P(), P(None, "x"), P("x")]
    assert all(s.mesh == AbstractMesh((2, 4), ("x", "y")) for s in verdict.out_shardings)
    assert verdict.out_shardings == predicted_out_shardings(program)
    assert verdict.undetermined == ()
    step = verdict.collectives
    assert step.complete and step == predicted_collectives(program)
    assert [(c.kind, c.axes, c.replica_groups) for c in step] == [
        ("all-reduce", ("y",), None), ("all-reduce", ("x",), None)]   # (no devices listed)


def _neg(mesh, spec, primitive="neg", shape=(512, 512)):
    x = Value.shape_dtype(shape, sharding=NamedSharding(mesh, spec))
    return Program((x,), (Opaque((0,), primitive=primitive, results=(Value.typed(shape),)),),
                   outputs=(1,))


def test_a_result_propagation_does_not_determine_stays_open_with_its_reason():
    pod = AbstractMesh((256, 256), ("data", "model"))
    verdict = explain_program(_neg(pod, P("data"), primitive="not_in_the_table"),
                              until="trace")
    assert verdict.accepted and verdict.out_shardings == (UNSPECIFIED,)
    ((path, why),) = verdict.undetermined
    assert path == verdict.out_paths[0]
    assert "PROP-4" in why and "not_in_the_table" in why
    assert not verdict.collectives.complete


def test_a_large_abstract_mesh_is_answered_until_trace_without_devices():
    pod = AbstractMesh((256, 256), ("data", "model"))
    verdict = explain_program(_neg(pod, P("data", "model")), until="trace")
    assert verdict.out_shardings == (NamedSharding(pod, P("data", "model")),)
    assert verdict.collectives.complete and len(verdict.collectives) == 0


def test_over_a_concrete_mesh_tracing_leaves_the_result_to_lowering():
    mesh = Mesh.iota((2, 4), ("x", "y"))
    program = _neg(mesh, P("x"))
    traced = explain_program(program, until="trace")
    assert traced.out_shardings == (UNSPECIFIED,) and traced.collectives is None
    assert explain_program(program).out_shardings == (NamedSharding(mesh, P("x")),)


def test_an_input_its_in_sharding_leaves_open_is_not_propagated():
    """(vmap without spmd_axis_name binds one: P(UNCONSTRAINED, 'x'), BAT-2; it was read
    as no split, and propagation failed on it with a TypeError.)"""
    mesh = AbstractMesh((2, 4), ("x", "y"))
    program = dataclasses.replace(_neg(mesh, P("x"), shape=(8, 8)), in_shardings=(
        NamedSharding(mesh, P(UNCONSTRAINED, "y")),))
    found = propagation_mesh(program)
    assert found.rule == "PROP-1" and "leaves dimensions open" in found.why
    assert predicted_out_shardings(program) == (UNSPECIFIED,)
