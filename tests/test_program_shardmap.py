"""shard_map equations inside whole programs against real JAX 0.10.2 on 8 CPU devices.

Issue 23's gap class 3 pinned: bodies with all_gather, psum_scatter, ppermute, all_to_all
and axis_index, read from real functions with ``describe_program`` and answered by
``explain_program`` — each collective's per-shard type as JAX's jaxpr has it, its replica
groups as the lowered module has them, and, for all_gather and ppermute, the values each
device ends with read off the spec's groups and pairs. The refusals of the SMAP rules
inside a program, at their stage, in JAX's class, located in the body. Then the property:
drawn programs with shard_maps (1 to 8 devices, 1 or 2 mesh axes, Auto or Explicit — a
body's values then typed split over the Explicit axes left automatic, SMAP-24 and SMAP-25 —,
all or some axes manual, check_vma on and off, bodies chaining collectives, casts and
elementwise steps, inner jits and constraints around them) held to JAX, and the rules it
reaches seen on both sides.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings

from shardlaw.properties.program_shardmap_harness import (
    MapCase, Op, lowered_groups, compare_case, map_cases, map_hit_counts,
)
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples
from shardlaw.spec import (
    AxisType, Mesh, NamedSharding, Opaque, P, Program, ShardMap, Value, explain_program,
)
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.shardmap import CollectiveDecision, ShardMapDecision

JaxP = jax.sharding.PartitionSpec
ORDER = [3, 1, 0, 2, 7, 5, 6, 4]          # a mesh whose devices are not in id order


def _mesh(order=range(8), shape=(2, 4), names=("x", "y")):
    devices = np.array(jax.devices())[list(order)].reshape(shape)
    return jax.sharding.Mesh(devices, names)


def _argument(mesh, shape=(8, 16), spec=JaxP("x", "y")):
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return jax.device_put(data, jax.sharding.NamedSharding(mesh, spec))


def _collectives(verdict):
    return [(path, r) for path, r in verdict.decided if isinstance(r, CollectiveDecision)]


def _answer(fun, argument):
    """The spec's verdict on ``jax.jit(fun)(argument)``, JAX's jaxpr of the shard_map body
    and JAX's result; the verdict agrees with JAX on the result's sharding."""
    jitted = jax.jit(fun)
    program = describe_program(jitted, argument)
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message
    result = jitted(argument)
    groups = lowered_groups(jitted.lower(argument).as_text())
    return verdict, program, result, groups


def _shards(array):
    return {s.device.id: np.asarray(s.data) for s in array.addressable_shards}


def _body_types(program):
    """The per-shard result types of the shard_map body's equations, as JAX typed them."""
    (shard_map,) = [eq for eq in program.equations if isinstance(eq, ShardMap)]
    return {f"body[0].shard_map.body[{k}]": eq.results[0]
            for k, eq in enumerate(shard_map.body.equations) if isinstance(eq, Opaque)}


def _held_to_jaxpr(verdict, program):
    typed = _body_types(program)
    for path, record in _collectives(verdict):
        given = typed[path]
        assert (record.result.shape, record.result.dtype, record.result.varying) == (
            given.shape, given.dtype, given.varying), path


# --------------------------------------------------------------------------- gap class 3

@checks("SMAP-14", "SMAP-21")
def test_all_gather_groups_are_the_devices_whose_blocks_each_device_gathers():
    mesh = _mesh(ORDER)
    gather = jax.shard_map(lambda a: jax.lax.all_gather(a, "x", axis=0, tiled=True),
                           mesh=mesh, in_specs=JaxP("x", "y"), out_specs=JaxP("x", "y"))
    argument = _argument(mesh)
    verdict, program, result, lowered = _answer(gather, argument)
    _held_to_jaxpr(verdict, program)
    ((path, record),) = _collectives(verdict)
    assert path == "body[0].shard_map.body[0]" and record.result.shape == (8, 4)
    assert record.groups == ((3, 7), (1, 5), (0, 6), (2, 4))
    assert lowered == [((0, 4), (1, 5), (2, 6), (3, 7))]   # the same, by mesh position
    before, after = _shards(argument), _shards(result)
    for group in record.groups:
        gathered = np.concatenate([before[d] for d in group], axis=0)
        for device in group:
            np.testing.assert_array_equal(after[device], gathered)


@checks("SMAP-22")
def test_ppermute_pairs_say_which_device_each_block_moves_to():
    mesh = _mesh(ORDER)
    perm = [(0, 1), (1, 2), (2, 3), (3, 0)]
    shifted = jax.shard_map(lambda a: jax.lax.ppermute(a, "y", perm), mesh=mesh,
                            in_specs=JaxP("x", "y"), out_specs=JaxP("x", "y"))
    argument = _argument(mesh)
    verdict, program, result, _ = _answer(shifted, argument)
    _held_to_jaxpr(verdict, program)
    ((_, record),) = _collectives(verdict)
    assert record.groups == ((3, 1, 0, 2), (7, 5, 6, 4))
    assert record.pairs[:4] == ((3, 1), (1, 0), (0, 2), (2, 3))
    before, after = _shards(argument), _shards(result)
    for source, target in record.pairs:
        np.testing.assert_array_equal(after[target], before[source])


@checks("SMAP-20", "SMAP-21")
def test_psum_scatter_and_all_to_all_shapes_and_groups_are_jax_s():
    mesh = _mesh()

    def block(a):
        scattered = jax.lax.psum_scatter(a, "y", scatter_dimension=1, tiled=True)   # (4, 1)
        untiled = jax.lax.psum_scatter(a, "y", scatter_dimension=1, tiled=False)    # (4,)
        moved = jax.lax.all_to_all(a, "y", 0, 1, tiled=True)                        # (1, 16)
        swapped = jax.lax.all_to_all(a, "y", 0, 1, tiled=False)                     # (4, 4)
        return scattered, untiled[:, None], moved, swapped

    mapped = jax.shard_map(block, mesh=mesh, in_specs=JaxP("x", "y"),
                           out_specs=(JaxP("x", "y"),) * 4)
    verdict, program, results, lowered = _answer(mapped, _argument(mesh))
    _held_to_jaxpr(verdict, program)
    shapes = {r.primitive: [] for _, r in _collectives(verdict)}
    for _, record in _collectives(verdict):
        shapes[record.primitive].append(record.result.shape)
        assert record.result.varying == {"x", "y"}
    assert shapes["reduce_scatter"] == [(4, 1), (4,)]
    assert (1, 16) in shapes["all_to_all"]
    assert sorted(lowered) == sorted(r.groups for _, r in _collectives(verdict)
                                     if r.primitive in ("reduce_scatter", "all_to_all"))
    assert [r.shape for r in results] == [(8, 4), (8, 4), (2, 64), (8, 16)]


@checks("SMAP-20")
def test_axis_index_varies_along_its_axis_and_psum_drops_it():
    mesh = _mesh()

    def block(a):
        return jax.lax.psum(a + jax.lax.axis_index("y").astype(jnp.float32), "y")

    mapped = jax.shard_map(block, mesh=mesh, in_specs=JaxP("x"), out_specs=JaxP("x"))
    argument = _argument(mesh, spec=JaxP("x"))
    verdict, program, result, _ = _answer(mapped, argument)
    _held_to_jaxpr(verdict, program)
    records = dict((r.primitive, r) for _, r in _collectives(verdict))
    assert records["axis_index"].result == Value.typed(
        (), "int32", records["axis_index"].result.mesh, varying={"y"})
    assert records["psum_invariant"].result.varying == {"x"}
    expected = 4 * np.asarray(argument) + (0 + 1 + 2 + 3)
    np.testing.assert_array_equal(np.asarray(result), expected)
    (_, shard_map), = [(p, r) for p, r in verdict.decided if isinstance(r, ShardMapDecision)]
    assert shard_map.manual_axes == ("x", "y") and shard_map.in_types[0].shape == (4, 16)
    assert "eqn    body[0].shard_map.body[0]: axis_index over ['y']" in str(verdict)


def test_without_check_vma_nothing_varies_and_psum_keeps_its_name():
    mesh = _mesh()
    mapped = jax.shard_map(lambda a: jax.lax.psum(a, "y"), mesh=mesh, in_specs=JaxP("x", "y"),
                           out_specs=JaxP("x"), check_vma=False)
    verdict, program, _, _ = _answer(mapped, _argument(mesh))
    ((_, record),) = _collectives(verdict)
    assert record.primitive == "psum" and record.result.varying == frozenset()


def test_a_shard_map_inside_a_jit_inside_a_program_is_walked_at_its_path():
    mesh = _mesh()
    inner = jax.jit(jax.shard_map(lambda a: jax.lax.pmax(jnp.sin(a), "x"), mesh=mesh,
                                  in_specs=JaxP("x", "y"), out_specs=JaxP(None, "y")))
    verdict, program, _, _ = _answer(lambda a: inner(a) * 2, _argument(mesh))
    paths = [p for p, r in verdict.decided if isinstance(r, CollectiveDecision)]
    assert paths == ["body[0].jit.body[0].shard_map.body[1]"]


# --------------------------------------------------------------------------- refusals

MESH = Mesh.iota((2, 4), ("x", "y"))


def _refused(case: MapCase):
    problems = compare_case(case)
    assert not problems, "\n".join(problems)
    from shardlaw.properties.program_shardmap_harness import program_of
    return explain_program(program_of(case))


def _case(ops, in_spec=P("x", "y"), out_spec=P("x", "y"), manual=frozenset(), vma=True,
          shape=(8, 16), outer_jit=False):
    argument = Value.placed(shape, NamedSharding(MESH, P("x")))
    return MapCase(MESH, argument, in_spec, out_spec, manual, vma, tuple(ops),
                   outer_jit=outer_jit)


@checks("SMAP-13")
def test_a_collective_over_an_automatic_axis_is_refused_where_it_is():
    verdict = _refused(_case([Op("neg"), Op("psum", ("y",))], P("x"), P("x"), {"x"}))
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("SMAP-13", "trace",
                                                                 "NameError")
    assert verdict.path == "body[0].shard_map.body[1]"


@checks("SMAP-21")
def test_a_scatter_that_does_not_divide_is_refused_inside_a_nested_jit():
    verdict = _refused(_case([Op("psum_scatter", ("y",), 0)], P(None, "y"), P(None, "y"),
                             shape=(6, 16), outer_jit=True))
    assert (verdict.rule, verdict.stage) == ("SMAP-21", "trace")
    assert verdict.path == "body[0].jit.body[0].shard_map.body[0]"


@checks("SMAP-22")
def test_a_ppermute_that_sends_twice_is_refused_when_lowering():
    verdict = _refused(_case([Op("ppermute", ("y",), perm=((0, 1), (0, 2)))]))
    assert (verdict.rule, verdict.stage, verdict.path) == ("SMAP-22", "lower",
                                                           "body[0].shard_map.body[0]")


@checks("SMAP-12", "DA-1")
def test_an_in_spec_naming_an_axis_twice_is_refused_before_the_device_assignment():
    """JAX makes shardings of a concrete mesh's in specs while it lists the shardings
    inside the body, before it compares their devices: the axis named twice is refused,
    not the shard_map's mesh on the devices in reverse (a deep run drew it)."""
    reversed_mesh = Mesh((2, 4), ("x", "y"), range(7, -1, -1))
    case = dataclasses.replace(_case([Op("neg")], P("y", "y"), P(), vma=False),
                               map_mesh=reversed_mesh)
    verdict = _refused(case)
    assert (verdict.rule, verdict.stage, verdict.path) == (
        "SMAP-12", "lower", "body[0].shard_map.in_specs[0]")


@checks("SMAP-12", "DA-1")
def test_over_the_context_mesh_a_repeated_in_spec_is_refused_after_the_device_assignment():
    """A shard_map over the context mesh has an abstract mesh, of which JAX lists no
    sharding: its in specs are checked when the body is lowered, after DA-1 has refused a
    constraint on the devices in reverse."""
    mesh = _mesh()

    def step(a):
        a = jax.lax.with_sharding_constraint(a, jax.NamedSharding(_mesh(range(7, -1, -1)),
                                                                  JaxP()))
        return jax.shard_map(lambda b: -b, in_specs=JaxP("y", "y"), out_specs=JaxP(),
                             check_vma=False)(a)

    x = _argument(mesh, spec=JaxP("x"))
    with jax.set_mesh(mesh):
        verdict = explain_program(describe_program(jax.jit(step), x))
        with pytest.raises(ValueError, match="incompatible devices"):
            jax.jit(step).trace(x).lower()
    assert (verdict.rule, verdict.stage, verdict.path) == ("DA-1", "lower", "body[0]")


@checks("SMAP-11")
def test_an_out_spec_that_leaves_out_an_axis_the_result_varies_along_is_refused():
    verdict = _refused(_case([Op("all_gather", ("x",))], out_spec=P(None, "y")))
    assert (verdict.rule, verdict.stage, verdict.path) == (
        "SMAP-11", "trace", "body[0].shard_map.out_specs[0]")
    assert _refused(_case([Op("psum", ("x",))], out_spec=P(None, "y"))).accepted


@checks("SMAP-20")
def test_a_collective_written_over_an_axis_its_operand_does_not_vary_along_is_refused():
    body = Program((Value.typed((8, 4), mesh=MESH.abstract, varying={"y"}),), (
        Opaque((0,), (Value.typed((16, 4), mesh=MESH.abstract, varying={"y"}),),
               primitive="all_gather", params=(("all_gather_dimension", 0),
                                               ("axis_name", ("x",)), ("tiled", True))),),
        (1,))
    program = Program((Value.placed((8, 16), NamedSharding(MESH, P())),), (
        ShardMap((0,), (Value.typed((16, 16)),), body=body, mesh=MESH,
                 in_specs=(P(None, "y"),), out_specs=(P(None, "y"),)),), (1,))
    verdict = explain_program(program)
    assert (verdict.rule, verdict.error_type, verdict.path) == (
        "SMAP-20", "ValueError", "body[0].shard_map.body[0]")


def test_a_described_collective_typed_otherwise_than_the_rules_is_refused_by_prog_0():
    body = Program((Value.typed((4, 4), mesh=MESH.abstract, varying={"x", "y"}),), (
        Opaque((0,), (Value.typed((4, 4), mesh=MESH.abstract, varying={"x", "y"}),),
               primitive="psum_invariant", params=(("axes", ("y",)),)),), (1,))
    program = Program((Value.placed((8, 16), NamedSharding(MESH, P())),), (
        ShardMap((0,), (Value.typed((8, 16)),), body=body, mesh=MESH,
                 in_specs=(P("x", "y"),), out_specs=(P("x", "y"),)),), (1,))
    verdict = explain_program(program)
    assert verdict.rule == "PROG-0" and "varying along ['x']" in verdict.message


# --------------------------------------------------------------------------- the order of the shape checks

ONE_AXIS = Mesh.iota((2,), ("x",))


@checks("SMAP-13", "SMAP-21")
@pytest.mark.parametrize("op, shape, rule, error, says", [
    # all_to_all: the split dimension in range (IndexError), then that it divides
    # (ValueError), only then the concat dimension in range (IndexError)
    (Op("all_to_all", ("x", "x"), 0, 2), (2, 8), "SMAP-21", "ValueError", "splits dimension 0"),
    (Op("all_to_all", ("x", "y"), 0, 5), (2, 8), "SMAP-21", "ValueError", "(8 devices)"),
    (Op("all_to_all", ("x",), 0, 2), (2, 8), "SMAP-21", "IndexError", "concat_axis"),
    (Op("all_to_all", ("x", "x"), 1, 2), (2, 8), "SMAP-21", "IndexError", "concat_axis"),
    (Op("all_to_all", ("y",), 2, 5), (2, 8), "SMAP-21", "IndexError", "split_axis"),
    (Op("all_to_all", ("q",), 5, 5), (2, 8), "SMAP-13", "NameError", "'q'"),
    # psum_scatter: its dimension in range (IndexError), then that it divides (ValueError)
    (Op("psum_scatter", ("x", "x"), 2), (2, 8), "SMAP-21", "IndexError", "scatter_dimension"),
    (Op("psum_scatter", ("x", "y"), 0), (2, 8), "SMAP-21", "ValueError", "scatters"),
    (Op("psum_scatter", ("q",), 5), (2, 8), "SMAP-13", "NameError", "'q'"),
    # all_gather divides nothing: its dimension in range (ValueError), after the axes
    (Op("all_gather", ("x", "x"), 5), (2, 8), "SMAP-21", "ValueError", "all_gather_dimension"),
    (Op("all_gather", ("q",), 5), (2, 8), "SMAP-13", "NameError", "'q'"),
])
def test_a_collective_s_shape_is_checked_in_jax_s_order(op, shape, rule, error, says):
    """Each body holds one collective whose shape fails more than one check (or whose
    axes are unknown too): JAX's class at trace is the first check's, and so is the
    spec's rule, class and words (the AD deep run's 4 disagreements: an all_to_all over
    ('x', 'x') whose split dimension 4 does not divide, its concat_axis out of range)."""
    from shardlaw.properties.program_shardmap_harness import program_of, run_case
    case = _case([op], P(), P(), vma=False, shape=shape)
    outcome = run_case(case)
    verdict = explain_program(program_of(case))
    assert (outcome.stage, type(outcome.error).__name__) == ("trace", error), outcome.error
    assert (verdict.rule, verdict.stage, verdict.error_type) == (rule, "trace", error)
    assert verdict.path == "body[0].shard_map.body[0]" and says in verdict.message


def _traced_before_refusal(op, shape):
    """How many equations JAX traced into a check_vma body before ``op`` refused."""
    from shardlaw.properties.program_shardmap_harness import apply_op

    def body(a):
        with pytest.raises(Exception):
            apply_op(op, a)
        return a

    mapped = jax.shard_map(body, mesh=_mesh(), in_specs=JaxP(), out_specs=JaxP())
    jaxpr = jax.make_jaxpr(mapped)(np.zeros(shape, np.float32))
    return len(jaxpr.eqns[0].params["jaxpr"].eqns)


@checks("SMAP-21")
@pytest.mark.parametrize("op, shape, cast", [
    (Op("all_to_all", ("x", "x"), 0, 2), (2, 8), False),   # does not divide: before the cast
    (Op("all_to_all", ("y",), 2, 0), (2, 8), False),        # split_axis out of range: before
    (Op("all_to_all", ("x",), 1, 2), (2, 8), True),         # concat_axis out of range: after
    (Op("psum_scatter", ("x", "y"), 0), (2, 8), True),      # psum_scatter casts first
    (Op("all_gather", ("x",), 5), (2, 8), True),            # and so does all_gather
])
def test_a_refused_collective_is_located_after_the_cast_jax_traced_before_it(op, shape, cast):
    """Under check_vma, all_to_all refuses its split dimension before it casts its
    operand to vary along its axes, and its concat dimension after; psum_scatter and
    all_gather cast first: the refusal's path counts the equations JAX traced before it."""
    from shardlaw.properties.program_shardmap_harness import program_of
    verdict = explain_program(program_of(_case([op], P(), P(), shape=shape)))
    traced = _traced_before_refusal(op, shape)
    assert (verdict.rule, traced) == ("SMAP-21", int(cast))
    assert verdict.path == f"body[0].shard_map.body[{traced}]"


# --------------------------------------------------------------------------- mixed Explicit/Manual

EXPLICIT = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)


def _mixed(ops, typed=P(None, "x"), in_spec=P(), out_spec=P("y"), vma=True, shape=(8, 8),
           outer_jit=False):
    """A shard_map making only 'y' manual over an all-Explicit mesh, its argument's type
    split ``typed`` (over 'x', which stays automatic)."""
    argument = Value.placed(shape, NamedSharding(EXPLICIT, typed))
    return MapCase(EXPLICIT, argument, in_spec, out_spec, frozenset({"y"}), vma, tuple(ops),
                   outer_jit=outer_jit)


@checks("SMAP-23")
@pytest.mark.parametrize("ops, typed, vma, outer_jit", [
    ([Op("psum_scatter", ("y",), 1)], P(None, "x"), True, False),
    ([Op("neg"), Op("psum_scatter", ("y",), 0)], P("x"), False, False),
    ([Op("sin", in_jit=True), Op("psum_scatter", ("y",), 0, in_jit=True)], P(None, "x"),
     True, True),
    ([Op("all_gather", ("y",), 1), Op("psum_scatter", ("y",), 1)], P("x"), False, False),
])
def test_a_scatter_of_a_value_typed_split_over_an_automatic_explicit_axis_is_refused(
        ops, typed, vma, outer_jit):
    """JAX fails an assertion lowering a psum_scatter whose operand's type keeps a split
    over 'x' (its type made a scalar keeps the split): whichever dimension is scattered,
    through elementwise steps, collectives and inner jits."""
    verdict = _refused(_mixed(ops, typed, vma=vma, outer_jit=outer_jit))
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("SMAP-23", "lower",
                                                                 "AssertionError")
    assert verdict.path.startswith("body[0].") and ".shard_map." in verdict.path


@checks("SMAP-23")
@pytest.mark.parametrize("typed, in_spec", [(P(), P()), (P("y"), P("y"))])
def test_a_scatter_of_a_value_its_type_leaves_unsplit_over_explicit_axes_is_lowered(
        typed, in_spec):
    """The same scatter of a value whose type inside splits nothing (unsplit outside, or
    split over the manual 'y' only) lowers, compiles and runs as JAX does."""
    case = _mixed([Op("psum_scatter", ("y",), 1)], typed, in_spec, shape=(8, 16))
    problems = compare_case(case)
    assert not problems, "\n".join(problems)
    from shardlaw.properties.program_shardmap_harness import program_of
    assert explain_program(program_of(case)).accepted


@checks("SMAP-18")
def test_a_shard_whose_type_keeps_an_axis_that_does_not_split_it_is_refused_at_trace():
    """Splitting over 'y' a dimension the argument's type splits over 'x' leaves a shard of
    size 1 that 'x' must still split: refused at trace (ValueError), as JAX does; of size 2
    it is accepted."""
    verdict = _refused(_mixed([Op("neg")], P(None, "x"), P(None, "y"), P(None, "y"),
                              shape=(8, 4)))
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("SMAP-18", "trace",
                                                                 "ValueError")
    assert verdict.path == "body[0].shard_map.in_specs[0]"
    case = _mixed([Op("neg")], P(None, "x"), P(None, "y"), P(None, "y"), shape=(8, 16))
    assert not compare_case(case)


# --------------------------------------------------------------------------- splits kept by collectives

def _split_types(case):
    """(spec's decided type, JAX's type) of each collective of the case's body, as split
    over the automatic Explicit axes, from JAX's own jaxpr of the case's function."""
    from shardlaw.properties.program_shardmap_harness import argument_of, function_of
    program = describe_program(jax.jit(function_of(case)), argument_of(case))
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message
    typed = _body_types(program)
    return [(record.result, typed[path]) for path, record in _collectives(verdict)]


@checks("SMAP-24")
@pytest.mark.parametrize("ops, shape, out_spec, split", [
    ([Op("all_to_all", ("x",), 1, 0)], (4, 8, 2), P(None, "x"), P(None, None, "y")),
    ([Op("all_to_all", ("x",), 0, 2)], (4, 8, 4), P(None, "x"), P(None, None, "y")),
    # untiled, a new dimension inserted before the split one: the split stays at its place
    ([Op("all_gather", ("x",), 0, tiled=False)], (4, 8, 4), P(None, None, "x"),
     P(None, None, "y")),
    ([Op("all_gather", ("x",), 2)], (4, 8, 4), P(None, None, "x"), P(None, None, "y")),
    ([Op("psum", ("x",))], (4, 8, 4), P(), P(None, None, "y")),
    ([Op("pmax", ("x",))], (4, 8, 4), P(), P(None, None, "y")),
    ([Op("ppermute", ("x",), perm=((0, 1), (1, 0)))], (4, 8, 4), P(None, "x"),
     P(None, None, "y")),
])
def test_a_collective_keeps_its_operands_split_over_the_automatic_axes(ops, shape, out_spec,
                                                                      split):
    """Over an all-Explicit 2x2 mesh making only 'x' manual, the body's value is typed
    split over 'y' on its last dimension: each collective's result keeps that split at the
    same position, as JAX's jaxpr types it, and the program agrees with JAX throughout."""
    case = _split_case(ops, shape, out_spec=out_spec, vma=True)
    assert not compare_case(case)
    for decided, given in _split_types(case):
        assert decided.spec == given.spec == split
        assert decided.shape == given.shape


@checks("SMAP-24")
@pytest.mark.parametrize("ops, shape, error", [
    ([Op("all_to_all", ("x",), 2, 0)], (4, 8, 2), "ValueError"),
    ([Op("psum_scatter", ("x",), 2)], (4, 8, 2), "ValueError"),
    ([Op("neg"), Op("all_to_all", ("x",), 2, 1, in_jit=True)], (4, 8, 2), "ValueError"),
    # untiled, the last dimension's split has no place left in the result: cut, it must
    # be unsplit (JAX's assertion)
    ([Op("psum_scatter", ("x",), 0, tiled=False)], (2, 8, 4), "AssertionError"),
])
def test_a_collective_whose_result_its_operands_split_does_not_fit_is_refused_at_trace(
        ops, shape, error):
    verdict = _refused(_split_case(ops, shape))
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("SMAP-24", "trace", error)
    assert verdict.path.startswith("body[0].shard_map.body[")


@checks("SMAP-25")
def test_an_untiled_all_gather_at_a_split_dimension_is_refused_when_lowered():
    """JAX lowers an untiled all_gather by inserting a dimension of 1 into its operand,
    typed with the operand's split: 'y' on that dimension does not divide 1 (ValueError,
    when lowered); gathering at a dimension before it lowers."""
    verdict = _refused(_split_case([Op("all_gather", ("x",), 2, tiled=False)],
                                   out_spec=P(None, None, None, "x")))
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("SMAP-25", "lower",
                                                                 "ValueError")
    assert verdict.path == "body[0].shard_map.body[0]"
    assert not compare_case(_split_case([Op("all_gather", ("x",), 1, tiled=False)],
                                        out_spec=P(None, None, "x")))


# --------------------------------------------------------------------------- the property

REFUSING = ("SMAP-3", "SMAP-7", "SMAP-8", "SMAP-11", "SMAP-12", "SMAP-13", "SMAP-20",
            "SMAP-21", "SMAP-22", "SMAP-24", "SMAP-25")
EXPLICIT_22 = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit,) * 2)


def _split_case(ops, shape=(4, 8, 2), typed=P(None, "x", "y"), in_spec=P(None, "x"),
                out_spec=P(None, "x"), vma=False):
    """A shard_map making only 'x' manual over an all-Explicit 2x2 mesh, its argument's
    type split over the automatic 'y' too."""
    argument = Value.placed(shape, NamedSharding(EXPLICIT_22, typed))
    return MapCase(EXPLICIT_22, argument, in_spec, out_spec, frozenset({"x"}), vma,
                   tuple(ops))


@checks("SMAP-3", "SMAP-7", "SMAP-8", "SMAP-11", "SMAP-12", "SMAP-13", "SMAP-20", "SMAP-21",
        "SMAP-22", "SMAP-24", "SMAP-25", "SMAP-1", "SMAP-9", "SMAP-10", "SMAP-14")
@settings(max_examples=examples(150))
@given(map_cases(repeated_axes=True))
# A collective that shrinks a dimension typed split over the automatic 'y' below what 'y'
# divides (SMAP-24, at trace: the shard_map AD deep run's seed 303, refused untransformed),
# and an untiled all_gather whose operand, a dimension of 1 inserted, 'y' does not divide
# (SMAP-25, when lowered).
@example(_split_case([Op("all_to_all", ("x",), 2, 0), Op("all_to_all", ("x",), 0, 2)]))
@example(_split_case([Op("all_gather", ("x",), 2, tiled=False)],
                     out_spec=P(None, None, None, "x")))
# Refusing sides a short run may not draw: an in spec over an automatic axis (SMAP-3), an
# in spec naming an axis twice (SMAP-12, when lowered), ppermute out of range (SMAP-22), a
# cast along an axis the value already varies along (SMAP-20).
@example(_case([Op("neg")], P("x", "y"), P("x"), frozenset({"x"})))
@example(_case([Op("pcast", ("x",))]))
# ... and one of each other rule's refusing side, whatever a short run draws: an in spec
# longer than the rank (SMAP-7), one that does not divide (SMAP-8), an out spec leaving
# out a varying axis (SMAP-11), a collective over an unknown axis (SMAP-13), a scatter that
# does not divide (SMAP-21).
@example(_case([Op("neg")], P("x", "y", None), P("x", "y")))
@example(_case([Op("neg")], P("y"), P("y"), shape=(6, 16)))
@example(_case([Op("neg")], P("x", "y"), P()))
@example(_case([Op("psum", ("q",))], vma=False))
@example(_case([Op("psum_scatter", ("y",), 0)], P(None, "y"), P(None, "y"), shape=(6, 16)))
# Found by the values: ppermute over ('y', 'x') reads its pairs' positions in the mesh's
# order of each group, not the order the axes are named in (devices 6 and 7 swap here).
@example(_case([Op("ppermute", ("y", "x"), perm=((0, 0), (1, 1), (2, 2), (3, 3), (4, 4),
                                                 (5, 5), (6, 7), (7, 6)))], vma=False))
@example(_case([Op("neg")], P(("x", "y"), "x"), P("x", "y")))
@example(_case([Op("ppermute", ("y",), perm=((0, 4),))]))
# The shard_map AD deep run's disagreement (seed 2728), untransformed: an all_to_all over
# ('x', 'x') inside a jit whose split dimension (2) does not divide by 4 and whose
# concat_axis (2) is out of range after an untiled scatter: JAX refuses the split first.
@example(MapCase(ONE_AXIS, Value.placed((4, 8, 2), NamedSharding(ONE_AXIS, P("x", None))),
                 P("x", None, None), P(None, None), frozenset(), True, (
                     Op("psum_scatter", ("x",), 2, tiled=False), Op("psum", ("x",)),
                     Op("all_to_all", ("x", "x"), 0, 2, in_jit=True))))
def test_programs_with_shard_maps_agree_with_jax(case):
    problems = compare_case(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"


def test_every_smap_rule_the_property_reaches_was_seen_on_both_sides():
    """Runs last in this module."""
    counts = map_hit_counts()
    missing = [(r, counts.get(r, (0, 0))) for r in REFUSING if not all(counts.get(r, (0, 0)))]
    assert not missing, f"rules not seen on both sides against JAX: {missing}"
    assert all(counts.get(r, (0, 0))[0] for r in ("SMAP-1", "SMAP-9", "SMAP-10", "SMAP-14"))


@pytest.fixture(autouse=True, scope="module")
def _eight_devices():
    assert len(jax.devices()) == 8


# --------------------------------------------------------------------------- nested

def _nested(inner_out_spec):
    """A shard_map over x whose body calls a jit of a shard_map over y (the context's
    mesh), summing over y inside and taking the max over x outside."""
    mesh = _mesh()
    inner = jax.jit(jax.shard_map(lambda b: jax.lax.psum(b, "y"), in_specs=JaxP(None, "y"),
                                  out_specs=inner_out_spec, axis_names={"y"}))
    outer = jax.shard_map(lambda a: jax.lax.pmax(inner(a), "x"), mesh=mesh,
                          in_specs=JaxP("x"), out_specs=JaxP(), axis_names={"x"})
    return outer, _argument(mesh, spec=JaxP("x"))


def test_a_shard_map_inside_a_jit_inside_a_shard_map_is_walked_with_both_manual_axes():
    outer, argument = _nested(JaxP())
    verdict, program, result, lowered = _answer(outer, argument)
    collectives = {p: r for p, r in _collectives(verdict)}
    inner_sum = collectives["body[0].shard_map.body[0].jit.body[0].shard_map.body[0]"]
    assert inner_sum.primitive == "psum_invariant" and inner_sum.result.varying == {"x"}
    assert inner_sum.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert collectives["body[0].shard_map.body[1]"].groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert sorted(lowered) == sorted(r.groups for r in collectives.values())
    np.testing.assert_array_equal(np.asarray(result), np.asarray(jax.jit(outer)(argument)))


@checks("SMAP-11")
def test_an_inner_shard_map_s_out_spec_is_held_to_its_own_manual_axes_only():
    """The inner result still varies along x (the outer shard_map's axis): only y counts
    for its out spec. Returning the unsummed value instead is refused, as JAX refuses it."""
    outer, argument = _nested(JaxP())
    program = describe_program(jax.jit(outer), argument)
    (shard_map,) = program.equations
    (jit,) = [eq for eq in shard_map.body.equations if eq.kind == "jit"]
    (inner,) = jit.body.equations
    unsummed = dataclasses.replace(inner.body, outputs=(0,))
    inner = dataclasses.replace(inner, body=unsummed)
    jit = dataclasses.replace(jit, body=dataclasses.replace(jit.body, equations=(inner,)))
    body = dataclasses.replace(shard_map.body, equations=(jit, *shard_map.body.equations[1:]))
    refused = explain_program(dataclasses.replace(program, equations=(
        dataclasses.replace(shard_map, body=body),)))
    assert (refused.rule, refused.stage, refused.path) == (
        "SMAP-11", "trace", "body[0].shard_map.body[0].jit.body[0].shard_map.out_specs[0]")
    assert "along ('y',)" in refused.message
    mesh = _mesh()
    unsummed_jax = jax.jit(jax.shard_map(lambda b: b, in_specs=JaxP(None, "y"),
                                         out_specs=JaxP(), axis_names={"y"}))
    refusing = jax.shard_map(lambda a: jax.lax.pmax(unsummed_jax(a), "x"), mesh=mesh,
                             in_specs=JaxP("x"), out_specs=JaxP(), axis_names={"x"})
    with pytest.raises(ValueError, match="replicat"):
        jax.jit(refusing).trace(argument)


# --------------------------------------------------------------------------- bad input

def _one_collective(primitive, params, operands=(0,)):
    typed = Value.typed((4, 4), mesh=MESH.abstract, varying={"x", "y"})
    body = Program((typed,), (Opaque(operands, (typed,), primitive=primitive, params=params),),
                   (1,))
    return Program((Value.placed((8, 16), NamedSharding(MESH, P())),), (
        ShardMap((0,), (Value.typed((8, 16)),), body=body, mesh=MESH,
                 in_specs=(P("x", "y"),), out_specs=(P("x", "y"),)),), (1,))


@pytest.mark.parametrize("primitive, params, operands", [
    ("all_gather", (("axis_name", ("x",)),), (0,)),                      # no dimension
    ("all_gather", (("axis_name", ("x",)), ("all_gather_dimension", "0")), (0,)),
    ("ppermute", (("axis_name", ("y",)), ("perm", ((0, "1"),))), (0,)),
    ("ppermute", (("axis_name", ("y",)), ("perm", 3)), (0,)),
    ("psum_invariant", (("axes", (1,)),), (0,)),
    ("all_gather", (("axis_name", ("x",)), ("all_gather_dimension", 0)), ()),
    ("axis_index", (("axis_name", "y"),), (0,)),
])
def test_a_collective_without_what_it_needs_is_refused_by_prog_0(primitive, params, operands):
    verdict = explain_program(_one_collective(primitive, params, operands))
    assert not verdict.accepted and verdict.rule == "PROG-0", verdict.message
    assert "body[0].shard_map.body[0]" in verdict.message
