"""``jax.vmap`` of whole programs (``vmap_program``) against real JAX 0.10.2 on 8 CPU devices.

The pinned examples hold issue 23's gap class 2 (a batched constraint: its result read at
the batched rank, and its spec read back with no trailing None on a concrete mesh), the
batching of a shard_map with and without ``spmd_axis_name``, nested vmaps, and gap class 4
(a bare PartitionSpec under ``jax.set_mesh`` through the vmap bridge) to what JAX does.
``test_vmapped_programs_agree_with_jax`` draws programs (the program property's recipes)
under one or two vmaps and holds every one to JAX; the coverage test at the end requires
the rules it names to have been seen on both sides (PBAT-1's by the pinned shard_map tests).
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from hypothesis import example, given

from shardlaw.properties import hits
from shardlaw.properties.program_harness import Case, Recipe, Step
from shardlaw.properties.program_vmap_harness import (
    SOURCE, Vmap, VmapCase, compare_vmapped, run_vmapped, spec_vmapped, structure, vmap_cases,
    vmap_hit_counts,
)
from shardlaw.properties.registry import checks
from shardlaw.spec import (
    UNCONSTRAINED, Mesh, NamedSharding, P, Rejection, ShardingConstraint,
    SingleDeviceSharding, Value, explain_program, from_jax, vmap_program,
)
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.bridge.transforms import explain as explain_transformed_call

MESH = Mesh.iota((2, 4), ("x", "y"))
X = Value.placed((8, 8), NamedSharding(MESH, P("x")))
NEG = Recipe((Step("neg", 0),), (1,))


def _agree(vc: VmapCase):
    problems = compare_vmapped(vc)
    assert not problems, "\n".join(problems) + f"\ncase: {vc}"
    return run_vmapped(vc)


def _constrained(spec, inputs=(X,)) -> Case:
    return Case(inputs, Recipe((Step("constraint", 0, NamedSharding(MESH, spec)),), (1,)))


def _constraint_of(program):
    (eq,) = [e for e in program.equations if isinstance(e, ShardingConstraint)]
    return eq


def _jax_constraint(outcome):
    return _constraint_of(outcome.described)


# --------------------------------------------------------------------------- gap class 2

@checks("WSC-7", "BAT-3")
def test_a_batched_constraint_is_read_at_the_batched_rank():
    """Batched at its last axis and split over 'y', a constraint P(None, 'x') gains 'y'
    there: the result comes back P(None, 'x', 'y'), not the unbatched P(None, 'x', None)."""
    vc = VmapCase(_constrained(P(None, "x"), (Value.numpy((8, 8)),)),
                  (Vmap((2,), 2, 4, spmd="y"),))
    outcome = _agree(vc)
    batched = NamedSharding(MESH, P(None, "x", "y"))
    program = spec_vmapped(vc)
    assert _constraint_of(program).sharding == batched == _jax_constraint(outcome).sharding
    verdict = explain_program(program)
    assert verdict.out_shardings == (batched,) == tuple(outcome.out_shardings)
    assert outcome.out_types[0].shape == (8, 8, 4)


@checks("WSC-7")
def test_a_batched_constraint_on_a_concrete_mesh_holds_no_trailing_none():
    """JAX reads the batched spec back from its HLO sharding: P('x', None) batched over 'y'
    is P('y', 'x') in its equation, where WSC-7 alone writes P('y', 'x', None)."""
    vc = VmapCase(_constrained(P("x", None)), (Vmap((0,), 0, 4, spmd="y"),))
    outcome = _agree(vc)
    eq = _constraint_of(spec_vmapped(vc))
    assert eq.sharding.spec == P("y", "x") == _jax_constraint(outcome).sharding.spec
    assert eq.unconstrained_dims == frozenset()


@checks("WSC-7")
def test_without_spmd_axis_name_the_batch_dimension_is_left_to_the_compiler():
    vc = VmapCase(_constrained(P("x", None)), (Vmap((1,), 1, 4),))
    outcome = _agree(vc)
    eq = _constraint_of(spec_vmapped(vc))
    assert eq.sharding.spec == P("x", UNCONSTRAINED, None)
    assert eq == _jax_constraint(outcome)
    assert eq.unconstrained_dims == frozenset({1})


# --------------------------------------------------------------------------- refusals

@checks("WSC-7", "BAT-4")
def test_refusals_are_located_at_the_equation():
    inner = Step("jit", 0, body=NEG, in_sharding=NamedSharding(MESH, P(None, "y")))
    case = Case((X,), Recipe((Step("sin", 0), inner), (2,)))
    vc = VmapCase(case, (Vmap((0,), 0, 4, spmd="y"),))
    _agree(vc)
    with pytest.raises(Rejection) as refused:
        spec_vmapped(vc)
    assert (refused.value.rule, refused.value.path, refused.value.stage) == (
        "BAT-4", "body[1].jit.in_shardings[0]", "trace")
    vc = VmapCase(_constrained(P("x", None)), (Vmap((0,), 0, 4, spmd="x"),))
    outcome = _agree(vc)
    with pytest.raises(Rejection) as refused:
        spec_vmapped(vc)
    assert (refused.value.rule, refused.value.path) == ("WSC-7", "body[0]")
    assert outcome.stage == "trace" and type(outcome.error) is ValueError


@checks("BAT-0")
def test_a_mapped_result_with_out_axes_none_is_refused():
    vc = VmapCase(Case((X,), NEG), (Vmap((0,), None, 4),))
    outcome = _agree(vc)
    assert outcome.stage == "trace" and "out_axes" in str(outcome.error)
    with pytest.raises(Rejection) as refused:
        spec_vmapped(vc)
    assert refused.value.rule == "BAT-0"


# --------------------------------------------------------------------------- moves, nesting

def test_results_vmap_moves_after_the_call_are_transposes_and_broadcasts():
    case = Case((X, Value.numpy((8, 8))), Recipe((Step("sin", 0),), (2, 1)))
    vc = VmapCase(case, (Vmap((1, None), (0, 0), 4),))
    outcome = _agree(vc)
    program = spec_vmapped(vc)
    kinds = [getattr(eq, "primitive", eq.kind) for eq in program.equations]
    assert kinds == ["jit", "transpose", "broadcast_in_dim"] and not outcome.one_jit


def test_nested_vmaps_compose():
    inner = Step("jit", 1, body=Recipe((Step("constraint", 0, NamedSharding(MESH, P("x"))),),
                                       (1,)), out_sharding=NamedSharding(MESH, P(None, "x")))
    case = Case((X,), Recipe((Step("neg", 0), inner), (2,)))
    for vmaps in [(Vmap((0,), 0, 2), Vmap((1,), 0, 4, spmd="y")),
                  (Vmap((1,), (0,), 2), Vmap((0,), 1, 4))]:
        vc = VmapCase(case, vmaps)
        outcome = _agree(vc)
        assert structure(outcome.described) == structure(spec_vmapped(vc))


# --------------------------------------------------------------------------- shard_map

def _shard_map_program():
    jmesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))

    def f(a):
        return jax.shard_map(lambda b: jax.lax.psum(-b, "x"), mesh=jmesh,
                             in_specs=jax.P("x"), out_specs=jax.P())(a)
    return f, describe_program(jax.jit(f), np.zeros((8, 4), np.float32))


@checks("PBAT-1")
@pytest.mark.parametrize("options", [{}, {"spmd_axis_name": "y"}, {"in_axes": 1}])
def test_a_batched_shard_map_is_what_jax_builds(options):
    """Its specs gain the batch dimension (split over spmd_axis_name where given), its body
    is batched over the per-shard batch (4 // 4 = 1 over 'y'), its results' specs follow."""
    f, program = _shard_map_program()
    batched = np.zeros((8, 4, 4) if options.get("in_axes") == 1 else (4, 8, 4), np.float32)
    vmapped = jax.vmap(jax.jit(f), **options)
    spec = vmap_program(program, axis_size=4, **options)
    assert structure(spec) == structure(describe_program(vmapped, batched))
    verdict = explain_program(spec)
    assert verdict.accepted
    if "spmd_axis_name" in options:
        (eq,) = spec.equations
        assert eq.in_specs == (P("y", "x"),) and eq.out_specs == (P("y"),)
        assert eq.body.inputs[0].shape == (1, 4, 4)
    assert from_jax(vmapped(batched).sharding) is not None
    if "spmd_axis_name" in options:
        hits.record(SOURCE, "PBAT-1", refused=False)


@checks("PBAT-1")
def test_a_spmd_axis_a_shard_map_names_is_refused():
    f, program = _shard_map_program()
    with pytest.raises(ValueError, match="spmd_axis_name cannot appear in shard_map"):
        jax.make_jaxpr(jax.vmap(jax.jit(f), spmd_axis_name="x"))(np.zeros((4, 8, 4),
                                                                          np.float32))
    with pytest.raises(ValueError) as refused:
        vmap_program(program, axis_size=4, spmd_axis_name="x")
    assert refused.value.rule == "PBAT-1" and refused.value.path == "body[0].shard_map.in_specs"
    hits.record(SOURCE, "PBAT-1", refused=True)


# --------------------------------------------------------------------------- gap class 4

@checks("BAT-3")
def test_a_bare_partition_spec_under_set_mesh_is_resolved_through_the_vmap_bridge():
    jmesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    a = np.zeros((4, 8), np.float32)
    with jax.set_mesh(jmesh), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # the registry path retires
        verdict = explain_transformed_call("vmap", lambda v: -v, a, in_shardings=jax.P("x"),
                                           out_shardings=jax.P(None), spmd_axis_name="y")
        jitted = jax.jit(lambda v: -v, in_shardings=jax.P("x"), out_shardings=jax.P(None))
        closed = jax.make_jaxpr(jax.vmap(jitted, spmd_axis_name="y"))(a)
    assert verdict.accepted, verdict.message
    (eqn,) = closed.jaxpr.eqns
    mesh = from_jax(jmesh)
    assert verdict.result.in_shardings == (NamedSharding(mesh, P("y", "x")),) == tuple(
        from_jax(s) for s in eqn.params["in_shardings"])
    assert verdict.result.out_shardings == tuple(from_jax(s) for s in
                                                 eqn.params["out_shardings"])


# --------------------------------------------------------------------------- the property

SPMD_CLASH = VmapCase(_constrained(P("x", None)), (Vmap((0,), 0, 4, spmd="x"),))
UNKNOWN_AXIS = VmapCase(Case((X,), Recipe((Step("jit", 0, body=NEG,
                                                in_sharding=NamedSharding(MESH, P("x"))),),
                                          (1,))), (Vmap((0,), 0, 2, spmd="p"),))
AXIS_IN_USE = VmapCase(Case((X,), Recipe((Step("jit", 0, body=NEG,
                                               in_sharding=NamedSharding(MESH, P("y"))),),
                                         (1,))), (Vmap((0,), 0, 2, spmd="y"),))
OUT_AXES_NONE = VmapCase(Case((X,), NEG), (Vmap((0,), None, 4),))
# Moved after the call (jax.jit of the vmapped function), the batched jit's out_shardings
# split a batch of 3 over 4 devices: JAX does not check the batched equation when vmap
# binds it (found by a deep run).
UNEVEN_MOVED = VmapCase(
    Case((Value.placed((6, 8), SingleDeviceSharding(0), committed=False),),
         Recipe((Step("sin", 0), Step("neg", 1)), (2, 2)),
         (NamedSharding(Mesh.iota((4,), ("x",)), P(None, None)),) * 2, keep_unused=True),
    (Vmap((-1,), (0, 0), 3, spmd="x"),))
# FIT-1's refusing side, whatever the draws: the example's result does not divide by its
# out_sharding (6 rows over 4 devices), refused when the user's jit is traced (a ci run of
# the default size drew none once).
RESULT_DOES_NOT_FIT = VmapCase(
    Case((Value.numpy((6, 8)),), Recipe((Step("neg", 0),), (1,)),
         (NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("y")),), keep_unused=False),
    (Vmap((0,), 0, 2),))
COVERED = ("BAT-0", "BAT-4", "BAT-5", "WSC-7", "DA-1", "FIT-1")


@checks("BAT-0", "BAT-4", "BAT-5", "WSC-7", "DA-1", "FIT-1")
@given(vmap_cases())
@example(SPMD_CLASH)
@example(UNKNOWN_AXIS)
@example(AXIS_IN_USE)
@example(OUT_AXES_NONE)
@example(UNEVEN_MOVED)
@example(RESULT_DOES_NOT_FIT)
def test_vmapped_programs_agree_with_jax(vc):
    problems = compare_vmapped(vc)
    assert not problems, "\n".join(problems) + f"\ncase: {vc}"


def test_every_rule_the_vmap_property_names_was_seen_on_both_sides():
    """Runs last in this module: the rules the property names, accepted and refused."""
    counts = vmap_hit_counts()
    missing = [(rule_id, counts.get(rule_id, (0, 0))) for rule_id in (*COVERED, "PBAT-1")
               if not all(counts.get(rule_id, (0, 0)))]
    assert not missing, f"rules not seen on both sides against JAX: {missing}"
