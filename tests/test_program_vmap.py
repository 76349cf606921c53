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

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import example, given, settings

from shardlaw.properties import hits
from shardlaw.properties.program_harness import Case, Recipe, Step, program_of
from shardlaw.properties.program_shardmap_harness import MapCase, Op
from shardlaw.properties.program_vmap_harness import (
    SOURCE, MapVmapCase, Vmap, VmapCase, compare_mapped_vmapped, compare_vmapped,
    map_vmap_cases, run_vmapped, spec_vmapped, structure, vmap_cases, vmap_hit_counts,
)
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples
from shardlaw.spec import (
    UNCONSTRAINED, UNSPECIFIED, AxisType, Mesh, NamedSharding, P, Rejection, ShardingConstraint,
    SingleDeviceSharding, Value, explain_program, from_jax, to_jax, vmap_program,
)
from shardlaw.spec.bridge.program import describe_program, describe_trace
from shardlaw.spec.program.description import Jit

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
    assert eq == dataclasses.replace(_jax_constraint(outcome), checked=False)   # vmap bound it
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
    assert structure(spec) == structure(describe_trace(vmapped, batched))
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


def _map_case(manual=("x", "y"), vma=True, ops=None, in_spec=P("x"), out_spec=P("x"),
              before=None, after=None):
    from shardlaw.properties.program_shardmap_harness import MapCase, Op
    ops = (Op("axis_index", ("x",)),) if ops is None else ops
    return MapCase(MESH, Value.placed((8, 4), NamedSharding(MESH, P())), in_spec, out_spec,
                   frozenset(manual), vma, ops, before=before, after=after)


def _mapped_agree(case, *vmaps):
    mc = MapVmapCase(case, tuple(vmaps))
    problems = compare_mapped_vmapped(mc)
    assert not problems, "\n".join(problems) + f"\ncase: {mc}"


@checks("SMAP-8")
def test_a_batch_the_spmd_axes_split_unevenly_is_typed_rounded_down_and_refused_at_lower():
    """JAX does not check again the shard_map its batching rule binds: a batch of 6 split
    over 'y' (4 ways) is traced, the body seeing 6 // 4 = 1 and the result holding 4, and
    the compiler refuses the operand at lower; the spec marks the equation unchecked."""
    f, program = _shard_map_program()
    batched = np.zeros((6, 8, 4), np.float32)
    vmapped = jax.vmap(jax.jit(f), spmd_axis_name="y", out_axes=-1)
    spec = vmap_program(program, axis_size=6, spmd_axis_name="y", out_axes=-1)
    assert structure(spec) == structure(describe_trace(vmapped, batched))
    (jit, move) = spec.equations
    (eq,) = jit.body.equations
    assert not eq.checked and eq.in_specs == (P("y", "x"),)
    assert eq.body.inputs[0].shape == (1, 4, 4) and eq.results[0].shape == (4, 4, 4)
    assert move.results[0].shape == (4, 4, 4)   # the batch of 6 comes back as 4, moved last
    traced = explain_program(spec, until="trace")
    assert traced.accepted, traced.message
    refused = explain_program(spec)
    assert (refused.rule, refused.stage, refused.path) == (
        "SMAP-8", "lower", "body[0].jit.body[0].shard_map.in_specs[0]")
    with pytest.raises(ValueError, match="not divisible"):
        jax.jit(vmapped).lower(batched)


@checks("SMAP-3", "SMAP-8", "PBAT-2")
def test_a_spmd_axis_a_shard_map_does_not_make_manual():
    """Under check_vma its batched body's inputs would vary along an automatic axis: JAX
    refuses while vmap traces (PBAT-2). Without check_vma the compiler refuses the spec at
    lower (SMAP-3)."""
    vmap = Vmap((0,), -1, 4, spmd="y")
    _mapped_agree(_map_case(manual=("x",)), vmap)
    _mapped_agree(_map_case(manual=("x",), vma=False), vmap)
    with pytest.raises(Rejection) as refused:
        vmap_program(_described(_map_case(manual=("x",))), axis_size=4, spmd_axis_name="y")
    assert (refused.value.rule, refused.value.path) == (
        "PBAT-2", "body[0].shard_map.in_specs")
    verdict = explain_program(vmap_program(_described(_map_case(manual=("x",), vma=False)),
                                           axis_size=4, spmd_axis_name="y"))
    assert (verdict.rule, verdict.stage) == ("SMAP-3", "lower")


def _described(case):
    from shardlaw.properties import program_shardmap_harness as maps
    return describe_program(jax.jit(maps.function_of(case)), maps.argument_of(case))


@checks("PBAT-3")
def test_a_broadcasting_operation_is_cast_along_the_spmd_axes():
    """x + axis_index('x') under vmap with spmd_axis_name 'y': JAX casts the unbatched
    index to vary along 'y' (a pvary) before the add, as the spec's rewrite does."""
    program = vmap_program(_described(_map_case()), axis_size=4, spmd_axis_name="y")
    (eq,) = program.equations
    kinds = [e.primitive for e in eq.body.equations]
    assert kinds == ["axis_index", "convert_element_type", "pvary", "add"]
    assert dict(eq.body.equations[2].params)["axes"] == ("y",)
    _mapped_agree(_map_case(), Vmap((0,), 0, 4, spmd="y"))
    # x * 0.5: the literal (no value of the description) is cast too, a pvary of nothing
    from shardlaw.properties.program_shardmap_harness import Op
    halved = _map_case(ops=(Op("half"),), in_spec=P(None))
    (eq,) = vmap_program(_described(halved), axis_size=4, spmd_axis_name="y").equations
    pvary, mul = eq.body.equations[:2]   # then the cast the out spec P("x") asks for
    assert (pvary.primitive, pvary.operands, mul.operands) == ("pvary", (), (0, 1))
    _mapped_agree(halved, Vmap((0,), 0, 4, spmd="y"))


@checks("PBAT-3", "SMAP-20")
@pytest.mark.parametrize("manual, out_spec, outer, rule, error", [
    (("x",), P("x"), "y", "PBAT-3", NameError),            # C2: 'y' automatic
    (("x", "y"), P("x"), "z", "PBAT-3", AssertionError),   # C1: no such axis
    (("x", "y"), P("x"), "y", "PBAT-3", Exception),        # C3: out spec leaves 'y' out
    # ... named: the example's own cast along 'y' (for its out spec) re-bound on a value
    # the inner vmap already cast along 'y'
    (("x", "y"), P("x", "y"), "y", "SMAP-20", ValueError),
])
def test_nested_vmaps_cast_along_the_outer_spmd_axes(manual, out_spec, outer, rule, error):
    """vmap inside vmap(spmd_axis_name=...): JAX batches the inner one first, in the
    outer one's axis environment, and casts the body's broadcasting operands along the
    outer spmd axes too (refused in four ways), before the outer vmap checks its specs."""
    case = _map_case(manual=manual, out_spec=out_spec)
    inner, outer_vmap = Vmap((0,), 0, 2), Vmap((0,), 0, 4, spmd=outer)
    _mapped_agree(case, inner, outer_vmap)
    with pytest.raises(error) as refused:
        vmap_program(_described(case), axis_size=2, outer_spmd_axis_names=(outer,))
    assert isinstance(refused.value, Rejection) and refused.value.rule == rule


@checks("WSC-7", "PBAT-1")
def test_spmd_vmap_over_constraints_and_a_shard_map_nested():
    """Constraints around a shard_map, under vmap(vmap(..., spmd_axis_name='y')) and
    vmap(vmap(...), spmd_axis_name='y'): both sides agree (the body casts along 'y')."""
    from shardlaw.properties.program_shardmap_harness import Op
    case = _map_case(ops=(Op("axis_index", ("x",)), Op("psum", ("x",))), out_spec=P(),
                     before=NamedSharding(MESH, P("x")), after=NamedSharding(MESH, P(None, "y")))
    _mapped_agree(case, Vmap((0,), 0, 4, spmd="y"))
    _mapped_agree(case, Vmap((1,), 0, 4, spmd="y"), Vmap((0,), -1, 2))
    _mapped_agree(case, Vmap((0,), 0, 2), Vmap((1,), 0, 4, spmd="y"))


# --------------------------------------------------------------------------- gap class 4

@checks("BAT-3")
def test_a_bare_partition_spec_under_set_mesh_is_resolved_and_batched_as_jax_binds_it():
    jmesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    a = np.zeros((4, 8), np.float32)
    with jax.set_mesh(jmesh):
        jitted = jax.jit(lambda v: -v, in_shardings=jax.P("x"), out_shardings=jax.P(None))
        closed = jax.make_jaxpr(jax.vmap(jitted, spmd_axis_name="y"))(a)
        program = describe_program(jitted, jax.ShapeDtypeStruct((8,), np.float32))
    batched = vmap_program(program, axis_size=4, spmd_axis_name="y")
    (eqn,) = closed.jaxpr.eqns
    mesh = from_jax(jmesh)
    assert batched.in_shardings == (NamedSharding(mesh, P("y", "x")),) == tuple(
        from_jax(s) for s in eqn.params["in_shardings"])
    assert batched.out_shardings == tuple(from_jax(s) for s in eqn.params["out_shardings"])
    assert explain_program(batched).accepted


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
# PROG-6: an out sharding over the abstract mesh {'x': 4} left UNCONSTRAINED by vmap, the
# value typed over the inner jit's mesh {'x': 2, 'y': 2}: the compiler's placement does not
# read over {'x': 4}, so JAX keeps the GSPMDSharding and types the result over {'x': 4},
# its out sharding's mesh, not the body's (deep run, seed 7).
_M4, _M22 = Mesh.iota((4,), ("x",)), Mesh.iota((2, 2), ("x", "y"))
OPEN_UNREAD = VmapCase(
    Case((Value.placed((8,), NamedSharding(_M4, P(None))),),
         Recipe((Step("jit", 0, body=Recipe((Step("device_put", 0, NamedSharding(_M22, P("y"))),),
                                            (1,)),
                      in_sharding=NamedSharding(_M22, P(None)),
                      out_sharding=NamedSharding(_M22, P("y"))),), (1, 1)),
         (NamedSharding(_M4.abstract, P("x")), NamedSharding(_M4.abstract, P())),
         keep_unused=True),
    (Vmap((0,), 0, 8, pass_size=True),))
COVERED = ("BAT-0", "BAT-4", "BAT-5", "WSC-7", "DA-1", "FIT-1")


@checks("BAT-0", "BAT-4", "BAT-5", "WSC-7", "DA-1", "FIT-1")
@given(vmap_cases())
@example(SPMD_CLASH)
@example(UNKNOWN_AXIS)
@example(AXIS_IN_USE)
@example(OUT_AXES_NONE)
@example(UNEVEN_MOVED)
@example(RESULT_DOES_NOT_FIT)
@example(OPEN_UNREAD)
def test_vmapped_programs_agree_with_jax(vc):
    problems = compare_vmapped(vc)
    assert not problems, "\n".join(problems) + f"\ncase: {vc}"


MAP_COVERED = ("PBAT-1", "PBAT-2", "PBAT-3", "SMAP-8")


@checks("PBAT-1", "PBAT-2", "PBAT-3", "SMAP-3", "SMAP-8", "SMAP-11")
@settings(max_examples=examples(90))
@given(map_vmap_cases())
# a batch of 6 split over 'y' (4 ways), moved after the call: refused at lower (SMAP-8)
@example(MapVmapCase(_map_case(), (Vmap((0,), -1, 6, spmd="y"),)))
# an automatic spmd axis: under check_vma at trace (PBAT-2), else at lower (SMAP-3)
@example(MapVmapCase(_map_case(manual=("x",)), (Vmap((0,), -1, 4, spmd="y"),)))
@example(MapVmapCase(_map_case(manual=("x",), vma=False), (Vmap((0,), -1, 4, spmd="y"),)))
# nested: the inner vmap casts along the outer one's axes (PBAT-3, each clause)
@example(MapVmapCase(_map_case(), (Vmap((0,), 0, 2), Vmap((0,), 0, 4, spmd="y"))))
@example(MapVmapCase(_map_case(manual=("x",)), (Vmap((0,), 0, 2), Vmap((0,), 0, 4, spmd="y"))))
@example(MapVmapCase(_map_case(), (Vmap((0,), 0, 2), Vmap((0,), 0, 4, spmd="z"))))
# accepted: the body cast along 'y', constraints around the shard_map, nested or not
@example(MapVmapCase(_map_case(out_spec=P("x", "y")), (Vmap((0,), -1, 4, spmd="y"),)))
@example(MapVmapCase(_map_case(after=NamedSharding(MESH, P(None, "y"))),
                     (Vmap((1,), 0, 4, spmd="y"), Vmap((0,), -1, 2))))
# found by a deep run: the inner vmap over 'x' re-binds a cast along 'x' on a value that
# now varies along 'x' (SMAP-20, before any cast along the outer 'y'); a nested shard_map's
# batch of 1 // 4 = 0 puts the outer result together from 0 rows, not the batch of 4
@example(MapVmapCase(MapCase(
    Mesh.iota((2,), ("x",)), Value.placed((4, 8, 2), NamedSharding(Mesh.iota((2,), ("x",)),
                                                                   P("x"))),
    P(None, None, None), P(None, None, "x"), frozenset({"x"}), True,
    (Op("axis_index", ("x",), 2),)), (Vmap((0,), 0, 6, spmd="x"),
                                      Vmap((0,), 0, 3, spmd=("y", "x")))))
@example(MapVmapCase(MapCase(
    MESH, Value.placed((6, 8), NamedSharding(MESH, P())), P(None, None), P(None),
    frozenset({"x"}), False, (Op("pcast", ("x",)), Op("half"), Op("nested", ("y",), 1, 0,
                                                                     tiled=False),
                              Op("axis_index", ("x",)))), (Vmap((0,), -1, 4, spmd="y"),)))
def test_vmapped_shard_map_programs_agree_with_jax(mc):
    """The shard_map property's drawn programs under one vmap or two nested vmaps (spmd
    axes free, used by the specs, automatic, or missing; batches split evenly or not)."""
    problems = compare_mapped_vmapped(mc)
    assert not problems, "\n".join(problems) + f"\ncase: {mc}"


def test_every_rule_the_vmap_property_names_was_seen_on_both_sides():
    """Runs last in this module: the rules the property names, accepted and refused."""
    counts = vmap_hit_counts()
    missing = [(rule_id, counts.get(rule_id, (0, 0))) for rule_id in (*COVERED, *MAP_COVERED)
               if not all(counts.get(rule_id, (0, 0)))]
    assert not missing, f"rules not seen on both sides against JAX: {missing}"


# --------------------------------------------------------------------------- the bound call

# vmap of a jit whose results vmap does not move is the batched jit equation, bound by JAX's
# batching rule on the batched arguments (``Program.checked`` False): neither jax.jit's
# checks of its options (JIT-2) nor the call's fit of its shardings (FIT-1) are made; the
# shardings are first divided when the call is lowered (FIT-3).

def _vmapped_both_ways(f, example, vmaps):
    """``jax.vmap`` of ``f`` as ``vmaps`` (innermost first), and the spec's rewrite of
    ``describe_program`` of ``f`` on ``example``, each vmap told the outer spmd axes."""
    vmapped, program = f, describe_program(f, example)
    for k, options in enumerate(vmaps):
        outer = tuple(o["spmd_axis_name"] for o in vmaps[k + 1:] if "spmd_axis_name" in o)
        vmapped = jax.vmap(vmapped, **options)
        program = vmap_program(program, axis_size=3, outer_spmd_axis_names=outer, **options)
    return vmapped, program


@checks("FIT-3")
@pytest.mark.parametrize("axis_type, vmaps", [
    ("Auto", [{"spmd_axis_name": "x"}]),                       # a batch of 3 over 'x' (2)
    ("Explicit", [{}, {"spmd_axis_name": "x"}]),               # nested, over an Explicit mesh
    ("Explicit", [{"spmd_axis_name": "x"}, {"spmd_axis_name": "y"}]),
])
def test_a_batch_the_spmd_axes_split_unevenly_is_bound_and_refused_when_lowered(
        axis_type, vmaps):
    """JAX traces the vmapped jit (make_jaxpr, and jax.jit of it lowers too); calling it
    refuses the batched shardings when the bound call is lowered. The spec: the program
    vmap gives is traced, and refused by FIT-3 at lower (FIT-1 no longer at trace)."""
    kind = getattr(jax.sharding.AxisType, axis_type)
    jmesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(kind, kind))
    whole = jax.sharding.NamedSharding(jmesh, jax.P(None))
    f = jax.jit(lambda a: -a, in_shardings=whole, out_shardings=whole)
    x = np.zeros((3,) * len(vmaps) + (8,), np.float32)
    vmapped, program = _vmapped_both_ways(f, np.zeros((8,), np.float32), vmaps)
    assert not program.checked
    # the accepting side: traced (make_jaxpr reads the same program), and lowered under jit
    assert structure(program) == structure(describe_trace(vmapped, x))
    jax.jit(vmapped).lower(x)
    traced = explain_program(program, until="trace")
    assert traced.accepted, traced.message
    assert traced.out_types == tuple(describe_trace(vmapped, x).value_types[-1:])
    # the refusing side: the call itself, its batched sharding split unevenly
    with pytest.raises(ValueError) as refused:
        vmapped(x)
    verdict = explain_program(program)
    assert (verdict.rule, verdict.stage, verdict.path) == ("FIT-3", "lower", "args[0]")
    assert verdict.error_type in {cls.__name__ for cls in type(refused.value).__mro__}


@checks("FIT-3")
@pytest.mark.parametrize("size", [3, 4])
def test_an_out_sharding_split_unevenly_is_refused_at_lower_by_the_property(size):
    """The vmap property's harness on the result side: out_shardings batched over 'x' split
    a batch of 3 unevenly (JAX's call refuses, FIT-3 at lower) and a batch of 4 evenly
    (both accept, with the same results)."""
    case = Case((Value.numpy((8, 8)),), NEG, (NamedSharding(MESH, P(None)),),
                keep_unused=False)
    vc = VmapCase(case, (Vmap((0,), 0, size, spmd="x"),))
    outcome = _agree(vc)
    verdict = explain_program(spec_vmapped(vc))
    if size == 3:
        assert outcome.stage == "run" and isinstance(outcome.error, ValueError)
        assert (verdict.rule, verdict.stage, verdict.path) == ("FIT-3", "lower", "result[0]")
    else:
        assert outcome.error is None and verdict.accepted
        assert verdict.out_shardings == (NamedSharding(MESH, P("x")),)


@checks("BAT-2", "DA-4")
@pytest.mark.parametrize("where", ["in_shardings", "out_shardings"])
def test_a_batch_dimension_left_unconstrained_on_an_abstract_mesh_is_bound_unchecked(where):
    """Without spmd_axis_name a sharding over an abstract mesh gains UNCONSTRAINED at the
    batch axis (BAT-2), which jax.jit's own options may not hold (JIT-2): JAX binds it
    anyway (make_jaxpr, jax.jit(...).trace accept), and with no concrete mesh lowering
    refuses it (ValueError; the spec's DA-4 at lower), not JIT-2 at jax.jit(...)."""
    jmesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    f = jax.jit(lambda a: -a, **{where: jax.sharding.NamedSharding(jmesh.abstract_mesh,
                                                                   jax.P("x"))})
    x = np.zeros((3, 8), np.float32)
    vmapped, program = _vmapped_both_ways(f, x[0], [{}])
    (batched,) = getattr(program, where)
    assert batched.spec == P(UNCONSTRAINED, "x")
    # the accepting side: traced
    assert structure(program) == structure(describe_trace(vmapped, x))
    jax.jit(vmapped).trace(x)
    traced = explain_program(program, until="trace")
    assert traced.accepted, traced.message
    # the refusing side: lowered with no concrete mesh, under jax.jit or called
    for attempt in (lambda: jax.jit(vmapped).lower(x), lambda: vmapped(x)):
        with pytest.raises(ValueError):
            attempt()
    verdict = explain_program(program)
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("DA-4", "lower", "ValueError")


# --------------------------------------------------------------------------- Explicit types

EXPLICIT = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit, AxisType.Explicit))
MIXED = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit, AxisType.Auto))


@checks("PROG-1", "WSC-10")
@pytest.mark.parametrize("mesh", [EXPLICIT, MIXED], ids=["explicit", "mixed"])
@pytest.mark.parametrize("in_axis, out_axis", [(0, 0), (1, 1), (1, 0), (-1, 0), (None, 1)])
def test_a_batched_value_keeps_its_split_over_explicit_axes(mesh, in_axis, out_axis):
    """A value typed over Explicit axes keeps its split under vmap, the batch dimension
    unsplit where it is inserted: the body's input, its result (over the mixed mesh through
    a constraint, which keeps its operand's split), the result moved by a transpose (its split permuted) or broadcast (unbatched)."""
    x = Value.placed((8, 8), NamedSharding(mesh, P(("x", "y") if mesh is MIXED else "y",
                                                   "x" if mesh is EXPLICIT else None)))
    # a constraint batched without spmd_axis_name leaves the batch dimension to the
    # compiler (UNCONSTRAINED), which needs an Auto axis: over the mixed mesh only
    last = Step("constraint", 1, NamedSharding(mesh, P())) if mesh is MIXED else Step("sin", 1)
    body = Recipe((Step("neg", 0), last), (2,))
    vc = VmapCase(Case((x,), body), (Vmap((in_axis,), out_axis, 4, pass_size=True),))
    outcome = _agree(vc)
    program = spec_vmapped(vc)
    described = outcome.described
    assert [eq.results for eq in program.equations] == \
        [eq.results for eq in described.equations]
    first = program.equations[0]
    inner = first.body if isinstance(first, Jit) else program   # vmap moved the result
    split = x.spec
    if in_axis is not None:
        entries = list(split) + [None] * (2 - len(split))
        entries.insert(in_axis % 3, None)
        while entries and entries[-1] is None:
            entries.pop()
        split = P(*entries)
    assert inner.value_types[0].spec == split == inner.value_types[-1].spec


@checks("BAT-0", "WSC-7", "DA-1", "FIT-1", "PROG-1", "WSC-10", "BAT-10")
@settings(max_examples=examples(25))
@given(vmap_cases(explicit=True))
def test_vmapped_programs_over_explicit_axes_agree_with_jax(vc):
    """The vmap property over Auto, Explicit and mixed meshes, its arguments typed over
    the Explicit axes (reduced ones too: BAT-10), constraints batched over Explicit spmd
    axes included (bound unchecked)."""
    problems = compare_vmapped(vc)
    assert not problems, "\n".join(problems) + f"\ncase: {vc}"


@checks("WSC-5", "WSC-7")
def test_a_constraint_batched_over_an_explicit_spmd_axis_is_bound_unchecked():
    """JAX: vmap with spmd_axis_name 'x' (Explicit) of a constraint P(None) binds the
    constraint P('x', None) (the batching rule, not with_sharding_constraint: no check that
    its axes are Auto) and runs it, the result's type unsplit. The spec's rewrite marks the
    batched constraint unchecked (``ShardingConstraint.checked``), and explain_program skips
    WSC-5 for it; the user's own constraint, and the one describe_trace reads from JAX's
    trace, stay checked."""
    mesh = Mesh.iota((2,), ("x",), (AxisType.Explicit,))
    case = Case((Value.numpy((8,)),),
                Recipe((Step("constraint", 0, NamedSharding(mesh, P(None))),), (1,)))
    vc = VmapCase(case, (Vmap((0,), 0, 2, spmd="x"),))
    outcome = _agree(vc)
    assert outcome.error is None
    assert _jax_constraint(outcome).sharding == NamedSharding(mesh, P("x"))
    assert _jax_constraint(outcome).checked and _constraint_of(program_of(case)).checked
    batched = _constraint_of(spec_vmapped(vc))
    assert batched.sharding == NamedSharding(mesh, P("x")) and not batched.checked
    # the same constraint checked, as with_sharding_constraint makes it: WSC-5 refuses
    checked = dataclasses.replace(spec_vmapped(vc), equations=(
        dataclasses.replace(batched, checked=True),))
    verdict = explain_program(checked)
    assert (verdict.rule, verdict.stage) == ("WSC-5", "trace")
    with pytest.raises(ValueError, match="Auto"):
        jax.jit(lambda a: jax.lax.with_sharding_constraint(a, to_jax(batched.sharding)))(
            np.zeros((2, 8), np.float32))


@checks("BAT-10")
def test_a_mapped_argument_typed_with_reduced_axes_is_refused_by_vmap():
    """Over an Explicit mesh, an argument typed P(None, reduced={'x'}) mapped by vmap: JAX
    refuses while tracing (ValueError: it reads the mapped dimension of the type); the
    spec's rewrite refuses by BAT-10 at the argument. Left unmapped it is accepted."""
    mesh = Mesh.iota((2,), ("x",), (AxisType.Explicit,))
    x = Value.placed((8,), NamedSharding(mesh, P(None, reduced={"x"})))
    vc = VmapCase(Case((x,), NEG), (Vmap((0,), 0, 2, pass_size=True),))
    outcome = _agree(vc)
    assert outcome.stage == "trace" and isinstance(outcome.error, ValueError)
    with pytest.raises(Rejection) as refused:
        spec_vmapped(vc)
    assert (refused.value.rule, refused.value.path, refused.value.stage) == (
        "BAT-10", "args[0]", "trace")
    # unmapped (in_axes None) and left where it is (out_axes None): nothing reads its type
    unmapped = VmapCase(Case((x, Value.numpy((8,))), Recipe((Step("neg", 1),), (0, 2)),
                             keep_unused=True),
                        (Vmap((None, 0), (None, 0), 2, pass_size=True),))
    assert _agree(unmapped).error is None
    assert spec_vmapped(unmapped).inputs[0].spec == P(reduced={"x"})   # canonical: no trailing None


@checks("ARG-4")
@pytest.mark.parametrize("size, in_axis", [(2, 0), (4, 0), (3, 1)])
def test_a_batched_device_put_types_the_batch_with_its_target_split(size, in_axis):
    """JAX's batched device_put keeps its target P('x', None) over an Explicit 'x' of 4: the
    batched value is typed P('x', None, None) whichever dimension the batch is; a batch of
    2 at dimension 0 is then split unevenly, refused while vmap traces (ARG-4)."""
    mesh = Mesh.iota((4,), ("x",), (AxisType.Explicit,))
    put = Step("device_put", 0, NamedSharding(mesh, P("x", None)))
    vc = VmapCase(Case((Value.numpy((8, 8)),), Recipe((put,), (1,)), (), keep_unused=True),
                  (Vmap((in_axis,), in_axis, size, pass_size=True),))
    outcome = _agree(vc)
    if size == 2:
        assert outcome.stage == "trace" and isinstance(outcome.error, ValueError)
        with pytest.raises(Rejection) as refused:
            spec_vmapped(vc)
        assert (refused.value.failure.rule, refused.value.stage) == ("ARG-4", "trace")
    else:
        assert outcome.error is None
        (eq,) = spec_vmapped(vc).equations
        assert eq.results[0].spec == P("x") == outcome.described.equations[0].results[0].spec


@checks("BAT-10")
@pytest.mark.parametrize("in_axes, out_axes, refused", [
    ((None, 0), (0,), True),       # unbatched, broadcast to out_axes 0: refused
    ((None, 0), (None,), False),   # unbatched, left where it is
    ((0, 0), (1,), False),         # batched: the reshard keeps the batch unsplit, a transpose moves it
])
def test_an_unbatched_result_resharded_to_reduced_axes_is_refused_when_vmap_moves_it(
        in_axes, out_axes, refused):
    """Over an all-Explicit mesh, an argument resharded to P(None, 'x', reduced={'y'}) and
    returned. Unbatched and broadcast by vmap to out_axes 0, JAX refuses while tracing
    (ValueError: the broadcast reads the type entry by entry), as the spec does by BAT-10 at
    the output; unbatched with out_axes None, or batched and moved by a transpose, both
    accept."""
    mesh = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit, AxisType.Explicit))
    x = Value.placed((8, 8), NamedSharding(mesh, P()))
    to = NamedSharding(mesh, P(None, "x", reduced={"y"}))
    vc = VmapCase(Case((x, x), Recipe((Step("reshard", 0, to),), (2,)), keep_unused=True),
                  (Vmap(in_axes, out_axes, 2, pass_size=True),))
    outcome = _agree(vc)
    if refused:
        assert outcome.stage == "trace" and isinstance(outcome.error, ValueError)
        with pytest.raises(Rejection) as refusal:
            spec_vmapped(vc)
        assert (refusal.value.rule, refusal.value.path) == ("BAT-10", "outputs[0]")
    else:
        assert outcome.error is None
        assert outcome.out_types[0].spec.reduced == frozenset({"y"})


# Nested vmaps, as JAX traces them: once under all of them, the jit batched by each in turn
# (innermost first) before any vmap's out_axes; each vmap's moves read a result's type as
# that vmap sees it (nested_vmap_program).

@checks("ARG-4", "PROG-1")
@pytest.mark.parametrize("target, split", [(P("x", None), None),
                                           (P(None, "x"), P(None, None, "x"))])
def test_nested_vmaps_of_a_device_put_over_an_explicit_axis_move_the_example_type(
        target, split):
    """Over an Explicit 'x' of 2, b (unmapped by the inner vmap, mapped by the outer one) is
    put on ``target`` and returned. The outer vmap's device_put types b's batch dimension
    by the target as it reads; the inner vmap broadcasts b to out_axes 0 from its type as
    the inner vmap sees it (the outer batch dimension dropped, its split with it), and the
    outer vmap batches that broadcast unsplit along its batch dimension: P('x', None) comes
    back unsplit, P(None, 'x') split at the example's first dimension."""
    mesh = Mesh.iota((2,), ("x",), (AxisType.Explicit,))
    put = Step("device_put", 1, NamedSharding(mesh, target))
    case = Case((Value.numpy((8, 8)),) * 2, Recipe((put,), (2,)), keep_unused=True)
    vc = VmapCase(case, (Vmap((0, None), 0, 2, pass_size=True),
                         Vmap((0, 0), 0, 2, pass_size=True)))
    outcome = _agree(vc)
    assert outcome.error is None and outcome.out_types[0].spec == split
    program = spec_vmapped(vc)
    (put_eq,) = program.equations[0].body.equations
    assert put_eq.results[0].spec == (P("x") if target == P("x", None) else target)
    assert program.equations[-1].primitive == "broadcast_in_dim"
    assert program.equations[-1].results[0].spec == split
    # three vmaps, the middle one moving its result last: the same, one level further out
    vc = VmapCase(case, (Vmap((0, None), 0, 2, pass_size=True),
                         Vmap((0, 0), 1, 2, pass_size=True), Vmap((1, 0), 2, 2, pass_size=True)))
    _agree(vc)


@checks("BAT-4", "BAT-0")
@pytest.mark.parametrize("outer", [("x",), (None,), (None, "x")], ids=["x", "none", "none-x"])
def test_nested_vmaps_check_the_jit_under_both_before_the_inner_out_axes(outer):
    """The inner vmap's out_axes None for a result it batched (BAT-0), the outer vmap's spmd
    axis 'x' used by the jit's out_sharding P('x', None), batched to P('x', None, 'x', None)
    (BAT-4). JAX batches the jit under every vmap before the inner vmap's out_axes: it
    refuses the jit (DuplicateSpecError), and so does the spec, at the jit's
    out_shardings; with no spmd axis, the inner out_axes (ValueError; BAT-0). An
    oldest-leg CI run drew the first (the spec rewrote the inner vmap whole, BAT-0 first)."""
    from shardlaw.spec import UNSPECIFIED
    mesh = Mesh.iota((2,), ("x",))
    case = Case((Value.numpy((8, 8)), Value.placed((8, 8), NamedSharding(mesh, P(None, None)))),
                Recipe((Step("neg", 0),), (2, 0)),
                out_shardings=(UNSPECIFIED, NamedSharding(mesh, P("x", None))),
                keep_unused=True)
    vc = VmapCase(case, (Vmap((0, 0), (0, None), 2, True, None),
                         *(Vmap((0, 0), (0, 0), 2, True, name) for name in outer)))
    outcome = _agree(vc)
    assert outcome.stage == "trace"
    with pytest.raises(Rejection) as refused:
        spec_vmapped(vc)
    if "x" in outer:
        assert type(outcome.error).__name__ == "DuplicateSpecError"
        assert (refused.value.rule, refused.value.path) == ("BAT-4", "out_shardings[1]")
    else:
        assert isinstance(outcome.error, ValueError) and "out_axes" in str(outcome.error)
        assert (refused.value.rule, refused.value.path) == ("BAT-0", "outputs[1]")


# --------------------------------------------------------------------------- issue 23: typed after a batched device_put

@checks("PROG-5", "ARG-4")
@pytest.mark.parametrize("types", [(AxisType.Explicit, AxisType.Auto),
                                   (AxisType.Explicit, AxisType.Explicit)],
                         ids=["mixed", "explicit"])
@pytest.mark.parametrize("axis", [0, 1])
def test_an_elementwise_result_after_a_batched_device_put_is_split_as_its_operand(types, axis):
    """A deep run's case (1 in 895): the batched device_put's target P('x') splits the batch
    dimension at axis 0; JAX types the neg after it from its operand, P('x', None), and
    the result comes back there (PROG-5). The spec typed it from the example's result, the
    batch inserted unsplit (P(None, 'x')), and over the mixed mesh read the compiler's
    choice back as P('x')."""
    mesh = Mesh.iota((2, 2), ("x", "y"), types)
    x1 = Value.placed((8,), NamedSharding(mesh, P(None)))
    body = Recipe((Step("device_put", 0, NamedSharding(mesh, P("x"))), Step("neg", 2)), (3, 0))
    vc = VmapCase(Case((Value.numpy((8,)), x1), body, keep_unused=True),
                  (Vmap((axis, 0), (axis, 0), 2, pass_size=True),))
    outcome = _agree(vc)

    def body(program):   # where vmap moved a result, the batched jit's body
        first = program.equations[0]
        return first.body if isinstance(first, Jit) else program
    put, neg = body(spec_vmapped(vc)).equations
    assert put.results + neg.results == tuple(
        eq.results[0] for eq in body(outcome.described).equations)
    assert neg.results[0].spec == P("x")   # dimension 0: the batch's, or the example's
    if axis == 0:
        assert neg.results[0].spec == P("x")
        assert outcome.out_shardings[0] == NamedSharding(mesh, P("x", None))


@checks("PROG-1")
@pytest.mark.parametrize("reduce", ["sum0", "max1", "scaled"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_a_result_after_a_batched_device_put_is_typed_from_the_batched_operands(reduce, axis):
    """Elementwise steps (sin, a product with a literal) and reductions after a batched
    device_put whose target splits the batch dimension or moves the split: every equation's
    result type in the spec's rewrite is JAX's (a reduction drops the reduced dimensions'
    entries from its batched operand's split)."""
    jmesh = jax.make_mesh((2, 2), ("x", "y"), devices=jax.devices()[:4],
                          axis_types=(jax.sharding.AxisType.Explicit,) * 2)

    def put(a, *spec):
        return jax.device_put(a, jax.sharding.NamedSharding(jmesh, jax.P(*spec)))
    f = jax.jit({"sum0": lambda a: put(a, None, "y").sum(axis=0),
                 "max1": lambda a: put(a, "x", "y").max(axis=1),
                 "scaled": lambda a: jax.numpy.sin(put(a, None, "x")) * 2.0}[reduce])
    batched = np.zeros(tuple(np.insert([4, 4], axis, 2)), np.float32)
    vmapped = jax.vmap(f, in_axes=axis, axis_size=2)
    program = vmap_program(describe_program(f, np.zeros((4, 4), np.float32)), axis,
                           axis_size=2)
    described = describe_trace(vmapped, batched)
    assert structure(program) == structure(described)
    assert [eq.results for eq in program.equations] == \
        [eq.results for eq in described.equations]


@checks("BAT-10", "PROG-1")
def test_a_batched_value_typed_with_reduced_axes_keeps_them_through_elementwise_steps():
    """A deep run's case (1 in 1,500, once the vmap property drew reduced types): a batched
    reshard to P(None, None, reduced={'x'}), then sin inside an inner jit: JAX's sin keeps
    the reduced axes, and the result comes back P(None, None, None, reduced={'x'}). The
    spec's batched sin lost them (an empty split with reduced axes read as no split)."""
    mesh = Mesh.iota((2,), ("x",), (AxisType.Explicit,))
    other = Mesh.iota((2,), ("p",), (AxisType.Explicit,))
    x = Value.placed((4, 8), NamedSharding(mesh, P("x", None)))
    inner = Step("jit", 1, body=Recipe((Step("sin", 0),), (1,)),
                 in_sharding=NamedSharding(other, P(None, "p")))
    reduced = NamedSharding(mesh, P(None, None, reduced={"x"}))
    case = Case((x,), Recipe((Step("reshard", 0, reduced), inner), (2, 0)), keep_unused=True)
    outcome = _agree(VmapCase(case, (Vmap((0,), (0, 0), 3),)))
    assert outcome.out_shardings[0] == NamedSharding(mesh, P(None, None, None,
                                                             reduced={"x"}))


@checks("WSC-12", "WSC-7")
@pytest.mark.parametrize("split", ["x", "y"])
def test_a_bound_constraint_is_lowered_with_its_operands_split_merged_in(split):
    """A deep run's case (2 in 2,000): a constraint P(None, None) batched over the Explicit
    spmd axis 'x' is bound P('x', None, None); its operand, typed split over ``split`` at
    the example's first dimension, is lowered with that split merged in. Over 'x' the
    merged spec names 'x' twice: JAX's call refuses (DuplicateSpecError), the spec by
    WSC-12 at lower; over 'y' both accept."""
    mesh = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit, AxisType.Explicit))
    x = Value.placed((6, 8), NamedSharding(mesh, P(split, None)))
    body = Recipe((Step("sin", 0), Step("constraint", 1, NamedSharding(mesh, P(None, None)))),
                  (2,))
    vc = VmapCase(Case((x,), body), (Vmap((0,), 0, 8, spmd="x"),))
    outcome = _agree(vc)
    verdict = explain_program(spec_vmapped(vc))
    if split == "x":
        assert type(outcome.error).__name__ == "DuplicateSpecError"
        assert (verdict.rule, verdict.stage, verdict.path) == ("WSC-12", "lower", "body[1]")
    else:
        assert outcome.error is None and verdict.accepted


# --------------------------------------------------------------------------- issue 23: describe_program of a vmapped function

def _jmesh(kind="Auto"):
    kind = getattr(jax.sharding.AxisType, kind)
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(kind, kind))


def _uneven_inner_jit():
    """A jit whose in_sharding P(None, 'y') fits one example (8, 8); vmapped over 'x' with
    a batch of 3, its batched sharding P('x', None, 'y') splits the batch unevenly."""
    jmesh = _jmesh()
    return jmesh, jax.jit(lambda a: a * 2,
                          in_shardings=jax.sharding.NamedSharding(jmesh, jax.P(None, "y")))


@checks("FIT-1", "BAT-3")
@pytest.mark.parametrize("out_axes", [0, 1])
def test_describe_program_of_a_jitted_vmap_applies_the_vmap_by_the_spec(out_axes):
    """jax.jit(jax.vmap(g, spmd_axis_name='x')) on a batch of 3: JAX binds g's jit batched,
    P('x', None, 'y'), without checking it again, and lowers and runs the whole; so does
    the spec, which describes g on one example and applies vmap_program (the batched jit
    unchecked) under the user's jit. Read from JAX's trace (describe_trace), that jit
    looks like one the user called, which FIT-1 refuses."""
    jmesh, g = _uneven_inner_jit()
    x = np.zeros((3, 8, 8), np.float32)
    fun = jax.jit(jax.vmap(g, spmd_axis_name="x", out_axes=out_axes))
    result = fun(x)
    described = describe_program(fun, x)
    expected = vmap_program(describe_program(g, x[0]), 0, out_axes, axis_size=3,
                            spmd_axis_name="x")
    (jit, *moves) = described.equations
    assert isinstance(jit, Jit) and not jit.checked
    assert jit.body.in_shardings == (NamedSharding(from_jax(jmesh), P("x", None, "y")),)
    assert [eq.primitive for eq in moves] == (["transpose"] if out_axes else [])
    assert structure(described) == structure(describe_trace(fun, x))
    if out_axes:
        assert described.equations == expected.equations
    verdict = explain_program(described)
    assert verdict.accepted, verdict.message
    assert result.shape == (3, 8, 8) if out_axes == 0 else (8, 3, 8)
    old = explain_program(describe_trace(fun, x))
    assert (old.rule, old.path) == ("FIT-1", "body[0].jit.in_shardings[0]")


@checks("PROG-1")
@pytest.mark.parametrize("spec", [jax.P(), jax.P(None, None, "y")], ids=["P()", "split"])
def test_describe_program_of_a_jitted_vmap_reads_committed_arguments(spec):
    """A committed argument on P() (its batch dimension not written out) or split after
    it: described as JAX traces it, the batched jit's input on the argument's sharding."""
    jmesh = _jmesh()
    x = jax.device_put(np.zeros((4, 8, 8), np.float32), jax.sharding.NamedSharding(jmesh, spec))
    fun = jax.jit(jax.vmap(jax.jit(lambda a: -a)))
    described = describe_program(fun, x)
    assert described.inputs[0].sharding == from_jax(x.sharding)
    assert structure(described) == structure(describe_trace(fun, x))
    assert explain_program(described).accepted


@checks("FIT-3")
def test_describe_program_of_a_vmapped_jit_is_refused_where_its_call_is():
    """jax.vmap(g, spmd_axis_name='x') called eagerly on a batch of 3: JAX traces it and
    refuses when the batched call runs (its sharding split unevenly); describe_program
    gives vmap_program's answer (unchecked), which FIT-3 refuses at lower."""
    _, g = _uneven_inner_jit()
    x = np.zeros((3, 8, 8), np.float32)
    fun = jax.vmap(g, spmd_axis_name="x")
    with pytest.raises(ValueError) as raised:
        fun(x)
    described = describe_program(fun, x)
    assert not described.checked
    verdict = explain_program(described)
    assert (verdict.rule, verdict.stage, verdict.path) == ("FIT-3", "lower", "args[0]")
    assert verdict.error_type in {c.__name__ for c in type(raised.value).__mro__}


@checks("BAT-10")
@pytest.mark.parametrize("jitted", [True, False])
def test_describe_program_of_a_vmap_jax_refuses_is_refused_by_the_spec(jitted):
    """jax.jit(jax.vmap(g)) (and jax.vmap(g)) of an argument typed P(None, reduced={'x'}):
    JAX refuses while tracing (ValueError); describe_program applies the vmap itself and
    refuses by BAT-10 at the argument, a ValueError too. Mapped at None it describes."""
    jmesh = _jmesh("Explicit")
    g = jax.jit(lambda a, b: b * 2)
    typed = jax.sharding.NamedSharding(jmesh, jax.P(None, None, reduced={"x"}))
    x = jax.ShapeDtypeStruct((3, 8, 8), np.float32, sharding=typed)
    y = np.zeros((3, 8, 8), np.float32)
    wrap = jax.jit if jitted else (lambda f: f)
    with pytest.raises(ValueError):
        jax.make_jaxpr(wrap(jax.vmap(g)))(x, y)
    with pytest.raises(Rejection) as refused:
        describe_program(wrap(jax.vmap(g)), x, y)
    assert isinstance(refused.value, ValueError)
    assert (refused.value.rule, refused.value.path) == ("BAT-10", "args[0]")
    unmapped = wrap(jax.vmap(g, in_axes=(None, 0)))
    jax.make_jaxpr(unmapped)(x, y)
    assert structure(describe_program(unmapped, x, y)) == \
        structure(describe_trace(unmapped, x, y))


@checks("BAT-2", "BAT-3")
def test_describe_program_of_nested_vmaps_under_jit_is_what_jax_traces():
    """jax.jit(jax.vmap(jax.vmap(g, spmd_axis_name='y'), in_axes=(1, None))) over pytree
    arguments: described by the spec (nested_vmap_program) as JAX traces it; both accept."""
    jmesh = _jmesh()
    g = jax.jit(lambda t, c: (t["a"] * 2, t["b"].sum(), -c),
                out_shardings=(jax.sharding.NamedSharding(jmesh, jax.P("x")), None, None))
    fun = jax.jit(jax.vmap(jax.vmap(g, spmd_axis_name="y"), in_axes=({"a": 1, "b": 1}, None),
                           out_axes=(0, 1, 0)))
    t = {"a": np.zeros((2, 4, 8), np.float32), "b": np.zeros((2, 4, 8), np.float32)}
    c = np.zeros((2, 8), np.float32)
    results = fun(t, c)
    described = describe_program(fun, t, c)
    assert structure(described) == structure(describe_trace(fun, t, c))
    verdict = explain_program(described)
    assert verdict.accepted, verdict.message
    assert [r.shape for r in results] == [(4, 2, 8), (2, 4), (4, 2, 8)]


@checks("PROG-6", "BAT-2")
@pytest.mark.parametrize("arg", [P(), P(None, "y")], ids=["replicated", "split"])
def test_an_unconstrained_out_sharding_in_an_eager_call_comes_back_as_the_compiler_chose(arg):
    """jax.vmap(jax.jit(neg, out_shardings=NamedSharding(abstract mesh, P('x')))) called on
    a committed argument of the concrete mesh: the batched jit's out sharding is
    P(UNCONSTRAINED, 'x') (BAT-2), and JAX (pxla's maybe_get_and_check_out_shardings,
    ``contains_unconstrained``) returns the compiler's choice for the whole result: on the
    value's type where the compiler placed it so, P(None, None, None) from a replicated
    argument, else re-read over the mesh, P(None, None, 'y') from one split over 'y'. The
    spec's compile stage gave the out sharding as written, UNCONSTRAINED included; by PROG-6
    it is the compiler's choice, read as JAX reads it (unknown: UNSPECIFIED)."""
    case = Case((Value.placed((8, 8), NamedSharding(MESH, arg)),), NEG,
                (NamedSharding(MESH.abstract, P("x")),))
    vc = VmapCase(case, (Vmap((0,), 0, 4),))
    outcome = _agree(vc)
    assert outcome.out_shardings == [NamedSharding(MESH, P(None, None, arg[-1] if arg else None))]
    verdict = explain_program(spec_vmapped(vc))
    assert verdict.accepted and "PROG-6" in verdict.trace
    assert verdict.out_shardings == (UNSPECIFIED,)   # the compiler's choice, not known
    hits.record(SOURCE, "PROG-6", refused=False)


@checks("PROG-6", "OUT-1")
def test_an_unconstrained_result_the_mesh_cannot_read_stays_placed_and_typed_over_its_mesh():
    """OPEN_UNREAD: the compiler places the first result {devices=[1,2,2]<=[2,2]T(1,0)
    last_tile_dim_replicate}, which does not read over the out sharding's mesh {'x': 4}:
    JAX returns that GSPMDSharding, typed over {'x': 4} (lowering types a result by its
    out sharding), and does not re-read it over {'x': 2, 'y': 2}, where the body typed the
    value (OUT-1 reads it on the lowered type). The second, replicated, reads over it."""
    outcome = _agree(OPEN_UNREAD)
    first, second = outcome.out_shardings
    assert type(first).__name__ == "GSPMDSharding"
    assert second == NamedSharding(_M4, P())
    assert [t.mesh for t in outcome.out_types] == [_M4.abstract] * 2
    verdict = explain_program(spec_vmapped(OPEN_UNREAD))
    assert "PROG-6" in verdict.trace


@checks("BAT-0")
@pytest.mark.parametrize("options, shapes, refused", [
    ({}, ((3, 4), (2, 4)), True),                         # mapped sizes differ
    ({"in_axes": (2, 0)}, ((3, 4), (3, 4)), True),        # an axis out of range
    ({"in_axes": None}, ((3, 4), (3, 4)), True),          # nothing mapped, no axis_size
    ({"in_axes": None, "axis_size": 5}, ((3, 4), (3, 4)), False),
])
def test_describe_program_of_a_vmap_checks_its_parameters_as_jax_does(options, shapes, refused):
    """describe_program of jax.jit(jax.vmap(g, ...)): vmap's parameters on the arguments
    it is given are the spec's BAT-0 (JAX's ValueError), or accepted as JAX traces them."""
    fun = jax.jit(jax.vmap(jax.jit(lambda a, b: a + b), **options))
    args = tuple(np.zeros(s, np.float32) for s in shapes)
    if refused:
        with pytest.raises(ValueError):
            jax.make_jaxpr(fun)(*args)
        with pytest.raises(Rejection) as refusal:
            describe_program(fun, *args)
        assert refusal.value.rule == "BAT-0" and isinstance(refusal.value, ValueError)
    else:
        assert structure(describe_program(fun, *args)) == structure(describe_trace(fun, *args))
