"""What a step communicates (COLL-1 to COLL-7), held to the compiled CPU HLO on 8 devices:
drawn programs (properties/collectives_harness.py), the cases of notes/jax-facts.md
section 20, the HLO reader (shardlaw.compiled_hlo, shared with the engine's explain()) and the ``propagation`` campaign suite."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings

from shardlaw.properties.collectives_harness import (
    TALLY, communicating_recipes, compare_collectives,
)
from shardlaw.properties.propagation_harness import Recipe
from shardlaw.properties.registry import checks
from shardlaw.spec import Mesh, explain_program
from shardlaw.compiled_hlo import collectives_in_hlo as collectives_of
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.collectives import replica_groups

Auto = jax.sharding.AxisType.Auto
P = jax.sharding.PartitionSpec


@checks("COLL-1", "COLL-2", "COLL-3", "COLL-4", "COLL-5", "COLL-6", "COLL-7")
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(communicating_recipes())
def test_the_predicted_collectives_are_those_of_the_compiled_module(recipe):
    outcome = compare_collectives(recipe)
    assert not outcome.disagreements, (recipe, outcome.disagreements)


def _both(f, *placed, devices=None):
    """The compiled module's collectives and the spec's verdict of ``f`` on a 2 x 4 mesh."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto), devices=devices)
    args = [jax.device_put(jnp.ones(shape, dtype), jax.sharding.NamedSharding(mesh, spec))
            for shape, spec, dtype in ((*p, jnp.float32)[:3] for p in placed)]
    text = jax.jit(f).lower(*args).compile().as_text()
    return collectives_of(text), explain_program(describe_program(f, *args))


def _keys(real, predicted):
    return (sorted((c.kind, c.replica_groups, c.bytes_per_device) for c in real),
            sorted((c.kind, c.replica_groups.groups(), c.bytes_per_device) for c in predicted))


def test_the_issue_s_example_communicates_two_all_reduces():
    def f(a, b):
        h = jnp.tanh(a @ b)
        return h.sum(0), h.T, h.reshape(4, -1)
    real, verdict = _both(f, ((16, 32), P("x", "y")), ((32, 64), P("y", None)))
    step = verdict.collectives
    assert step.complete and step.backend == "cpu"
    assert [(c.kind, c.axes, c.path) for c in step] == [
        ("all-reduce", ("y",), "body[0]"), ("all-reduce", ("x",), "body[2]")]
    assert step.bytes_per_device == 8 * 64 * 4 + 64 * 4
    real_keys, predicted_keys = _keys(real, step)
    assert real_keys == predicted_keys


def test_conflicting_operands_are_gathered():
    real, verdict = _both(lambda a, b: (a + b,), ((8, 8), P("x", None)), ((8, 8), P("y", None)))
    assert [c.kind for c in verdict.collectives] == ["all-gather", "all-gather"]
    assert _keys(real, verdict.collectives)[0] == _keys(real, verdict.collectives)[1]


def test_an_axis_moved_between_dimensions_is_the_all_to_all_xla_makes():
    # one axis wanted by two factors of the add: the first operand's keeps it (PROP-14),
    # and the second operand's axis moves to the other dimension
    real, verdict = _both(lambda a, b: (a + b,), ((8, 8), P("x", None)), ((8, 8), P(None, "x")))
    assert [c.kind for c in real] == ["all-to-all"]
    assert [c.kind for c in verdict.collectives] == ["all-to-all"]
    real_keys, predicted_keys = _keys(real, verdict.collectives)
    assert real_keys == predicted_keys


def test_the_cpu_backend_keeps_an_all_reduce_and_a_slice_where_others_reduce_scatter():
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    out = jax.sharding.NamedSharding(mesh, P("y", None))

    def f(a, b):
        return jax.lax.with_sharding_constraint(a @ b, out)
    args = [jax.ShapeDtypeStruct(s, jnp.float32, sharding=jax.sharding.NamedSharding(mesh, p))
            for s, p in (((8, 16), P(None, "y")), ((16, 8), P("y", None)))]
    text = jax.jit(f).lower(*args).compile().as_text()
    assert [c.kind for c in collectives_of(text)] == ["all-reduce"]
    assert "reduce-scatter" not in text and "dynamic-slice" in text


def test_a_bfloat16_value_is_gathered_as_float32_on_cpu():
    def f(a):
        return (a.astype(jnp.bfloat16).reshape(4, 16),)
    real, verdict = _both(f, ((4, 4, 4), P("x", None, "y")))
    (c,) = verdict.collectives
    assert (c.kind, c.dtype, c.bytes_per_device) == ("all-gather", "float32", 2 * 4 * 4 * 4)
    assert _keys(real, verdict.collectives)[0] == _keys(real, verdict.collectives)[1]


def test_replica_groups_are_positions_in_the_device_assignment():
    reversed_devices = jax.devices()[::-1]
    real, verdict = _both(lambda a: (a.sum(0),), ((8, 8), P("x", "y")),
                          devices=reversed_devices)
    (c,) = verdict.collectives
    assert c.replica_groups.groups() == ((0, 4), (1, 5), (2, 6), (3, 7)) == real[0].replica_groups
    assert c.replica_groups.device_ids() == ((7, 3), (6, 2), (5, 1), (4, 0))


def test_one_value_gathered_alike_for_two_equations_is_gathered_once():
    real, verdict = _both(lambda a, b, c: (a * b, a * c),
                          ((8, 8), P(("x", "y"), None)), ((8, 8), P("y", None)),
                          ((8, 8), P("y", None)))
    assert len(real) == len(verdict.collectives)
    assert _keys(real, verdict.collectives)[0] == _keys(real, verdict.collectives)[1]


def test_a_choice_the_partitioner_makes_by_cost_is_named_not_guessed():
    # the contracted dimension split in one operand only: XLA gathers it here, and slices
    # the other operand elsewhere (notes/jax-facts.md section 20)
    _, verdict = _both(lambda a, b: (a @ b,), ((8, 16), P(None, "y")), ((16, 8), P()))
    assert not verdict.collectives.complete
    assert verdict.collectives.undetermined.rule == "COLL-1"
    assert "incomplete: [COLL-1]" in str(verdict.collectives)


def test_a_recipe_without_communication_has_none():
    recipe = Recipe((8,), False, (((8,), ("x",)),), (("input", (), 0),
                                                     ("unary", (0,), "neg")), (1,))
    outcome = compare_collectives(recipe)
    assert outcome.real == outcome.predicted == () and outcome.why is None
    assert TALLY["agree"] >= 1


def test_replica_groups_on_a_large_mesh_are_not_enumerated_until_asked():
    mesh = Mesh.iota((256, 256), ("data", "model"))
    groups = replica_groups(Mesh.iota((2, 2, 2), ("a", "b", "c")), ("c", "a"))
    assert groups == ((0, 4, 1, 5), (2, 6, 3, 7))
    assert len(mesh.devices) == 65536 and mesh.devices.iota is not None


def test_the_hlo_reader_reads_the_three_spellings_of_replica_groups():
    text = ("%collective-permute = f32[8,2]{0,1} collective-permute(%b), channel_id=1, "
            "source_target_pairs={{0,1},{1,0}}\n"
            "%all-to-all.1 = (f32[1,4,4]{2,1,0}, f32[1,4,4]{2,1,0}) all-to-all(%a, %b), "
            "channel_id=2, replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_0'}\n"
            "%all-gather = bf16[8]{0} all-gather(%c), replica_groups=mesh['axis_0'=4,"
            "'axis_1'=2], device_ids=([2,4]T(1,0)) {'axis_1'}, dimensions={0}\n")
    permute, to_all, gather = collectives_of(text)
    assert permute.source_target_pairs == ((0, 1), (1, 0)) and permute.replica_groups == ()
    assert to_all.bytes_per_device == 2 * 16 * 4 and to_all.shape == (1, 4, 4)
    assert gather.replica_groups == ((0, 4), (1, 5), (2, 6), (3, 7)) and gather.dtype == "bfloat16"
    assert gather.bytes_per_device == 16


def test_the_propagation_suite_runs_in_a_campaign(tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "shardlaw.cli", "campaign", "--suite", "propagation",
         "--examples", "3", "--workers", "1", "--db", str(tmp_path / "db"),
         "--report", str(report)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(report.read_text())
    assert figures["disagreements"] == 0
    assert figures["suites"]["propagation"]["examples"] >= 2   # both properties ran
    assert figures["rules"]["COLL-4"]["accepted"] > 0


def _issue_program():
    from shardlaw.spec import NamedSharding as Named, P as SpecP
    from shardlaw.spec.program.description import Opaque, Program, Value
    mesh = Mesh.iota((2, 4), ("x", "y"))
    a = Value.placed((16, 32), Named(mesh, SpecP("x", "y")))
    b = Value.placed((32, 64), Named(mesh, SpecP("y", None)))
    h = Value.typed((16, 64))
    return Program((a, b), (
        Opaque((0, 1), (h,), primitive="dot_general",
               params=(("dimension_numbers", (((1,), (0,)), ((), ()))),)),
        Opaque((2,), (h,), primitive="tanh"),
        Opaque((3,), (Value.typed((64,)),), primitive="reduce_sum", params=(("axes", (0,)),)),
        Opaque((3,), (Value.typed((64, 16)),), primitive="transpose",
               params=(("permutation", (1, 0)),)),
        Opaque((3,), (Value.typed((4, 256)),), primitive="reshape",
               params=(("dimensions", None), ("new_sizes", (4, 256))))), outputs=(4, 5, 6))


def test_shardlaw_check_shows_what_a_program_vector_communicates(tmp_path):
    from shardlaw.spec.vectors.program_vectors import dump_program
    path = tmp_path / "issue.json"
    path.write_text(json.dumps(dump_program(_issue_program())))
    done = subprocess.run([sys.executable, "-m", "shardlaw.cli", "check", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "The step communicates (on the cpu backend" in done.stdout
    assert "all-reduce over ('y',) at body[0]: float32[8, 64], 2048 bytes per device, " \
           "groups [[0, 1, 2, 3], [4, 5, 6, 7]]" in done.stdout
    assert "2304 bytes per device in all" in done.stdout
    done = subprocess.run([sys.executable, "-m", "shardlaw.cli", "check", "--json", str(path)],
                          capture_output=True, text=True, timeout=120)
    step = json.loads(done.stdout)["collectives"]
    assert step["complete"] and step["bytes_per_device"] == 2304
    assert [[c["kind"], c["axes"], c["path"]] for c in step["collectives"]] == [
        ["all-reduce", ["y"], "body[0]"], ["all-reduce", ["x"], "body[2]"]]


def _constrained(mesh_shape, names, have, need):
    """The compiled module's collectives and the spec's verdict of a constraint moving an
    (8, 8) input from ``have`` to ``need``."""
    mesh = jax.make_mesh(mesh_shape, names, axis_types=(Auto,) * len(names))
    x = jax.device_put(jnp.ones((8, 8)), jax.sharding.NamedSharding(mesh, have))

    def f(x):
        return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(mesh, need))
    text = jax.jit(f).lower(x).compile().as_text()
    return collectives_of(text), explain_program(describe_program(f, x)).collectives


@pytest.mark.parametrize("mesh_shape, names, have, need, kinds", [
    ((2, 4), ("x", "y"), P("x", None), P(None, "x"), ["all-to-all"]),
    ((2, 4), ("x", "y"), P("x", "y"), P(("x", "y"), None), ["all-to-all"]),
    ((8,), ("x",), P("x"), P(None, "x"), ["all-to-all"]),   # an 8-array tuple in the HLO
    ((2, 2, 2), ("x", "y", "z"), P("x"), P("y"), ["collective-permute"]),
    ((2, 2, 2), ("x", "y", "z"), P("x", "y"), P("z", "y"), ["collective-permute"]),
    ((2, 4), ("x", "y"), P(("x", "y")), P(("y", "x")), ["collective-permute"]),
    ((2, 4), ("x", "y"), P("x", "y"), P(), ["all-gather", "all-gather"]),
])
def test_a_constraint_moving_a_value_communicates_as_xla_does(mesh_shape, names, have, need,
                                                             kinds):
    real, step = _constrained(mesh_shape, names, have, need)
    assert step.complete and [c.kind for c in step] == kinds == [c.kind for c in real]
    assert sorted(c.bytes_per_device for c in step) == sorted(c.bytes_per_device for c in real)
    assert [c.replica_groups.groups() for c in step if c.replica_groups is not None] == [
        c.replica_groups for c in real if c.kind != "collective-permute"]


def test_a_move_the_partitioner_plans_its_own_way_is_left_open():
    # one dimension loses 'x' and gains 'y' (pieces of two sizes): XLA permutes, then gathers
    real, step = _constrained((2, 4), ("x", "y"), P("y"), P("x"))
    assert [c.kind for c in real] == ["collective-permute", "all-gather"]
    assert step.undetermined.rule == "COLL-2" and len(step) == 0


def test_an_argmax_over_a_split_dimension_is_left_open():
    real, verdict = _both(lambda a: (jnp.argmax(a, 0).astype(jnp.float32),), ((16,), P("x")))
    assert {c.kind for c in real} == {"all-gather"}   # each shard's winners, not a sum
    assert verdict.collectives.undetermined.rule == "COLL-3"


def test_an_iota_is_computed_in_the_split_it_is_needed_in():
    real, verdict = _both(lambda a: (a + jnp.arange(8.0),), ((8,), P("x")))
    assert real == [] and verdict.collectives.complete and len(verdict.collectives) == 0


def test_the_hlo_reader_reads_a_tuple_whose_elements_are_numbered_in_comments():
    arrays = ", ".join(("/*index=5*/" if k == 5 else "") + "f32[1,1]{1,0}" for k in range(8))
    text = (f"%all-to-all.1 = ({arrays}) all-to-all(%a, %b), channel_id=1, "
            "replica_groups={{0,1,2,3,4,5,6,7}}\n")
    (c,) = collectives_of(text)
    assert c.kind == "all-to-all" and c.bytes_per_device == 8 * 4


@checks("COLL-4", "COLL-7")
def test_a_reshape_round_trip_between_layers_communicates_nothing():
    """A reshape back to the shape before a reshape is folded away by StableHLO: nothing is
    gathered for it, and the all-reduces on either side of it are computed one from the
    other, so they stay apart (a scanned-free transformer's layers end and start so)."""
    def f(x, up, down):
        for _ in range(2):
            flat = x.reshape(32, 8)
            x = (jnp.tanh(flat @ up) @ down + flat).reshape(4, 8, 8)
        return x
    real, verdict = _both(f, ((4, 8, 8), P("x", None, None)), ((8, 32), P(None, "y")),
                          ((32, 8), P("y", None)))
    step = verdict.collectives
    assert step.complete and [c.kind for c in step] == ["all-reduce", "all-reduce"]
    real_keys, predicted_keys = _keys(real, step)
    assert real_keys == predicted_keys


def test_an_unconstrained_dimension_takes_a_later_constraint_s_axis_through_an_all_to_all():
    """The last deep run's one disagreement (notes/jax-facts.md section 20d): a constraint's
    UNCONSTRAINED dimension is open to propagation from a later constraint on its result,
    whatever the result's other uses (here a dead ``max`` and, in the second program, a
    returned ``sin``): the value moves 'x' from its minor dimension to its major one in one
    all-to-all, and the later constraint communicates nothing."""
    recipe = Recipe(mesh=(8,), reversed_devices=True, inputs=(((8, 8), (None, "x")),),
                    steps=(("input", (), 0), ("constrain", (0,), ("?", None)),
                           ("constrain", (0,), ("?", "x")), ("binary", (1, 1), "max"),
                           ("constrain", (1,), ("x", None)), ("reduce", (0,), ("sum", 0))),
                    outputs=(5, 4))
    outcome = compare_collectives(recipe)
    assert outcome.why is None and not outcome.disagreements
    assert [kind for kind, _, _ in outcome.real] == ["all-to-all"]

    def f(a):
        b = jax.lax.with_sharding_constraint(a, jax.sharding.NamedSharding(mesh, P(U, None)))
        return jax.lax.with_sharding_constraint(
            b, jax.sharding.NamedSharding(mesh, P("x", None))), jnp.sin(b)
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    real, verdict = _both(f, ((8, 8), P(None, "x")))
    assert [c.kind for c in real] == ["all-to-all"]
    assert verdict.collectives.complete
    expected, said = _keys(real, verdict.collectives)
    assert said == expected
    assert [(c.kind, c.path) for c in verdict.collectives] == [("all-to-all", "body[0]")]


U = P.UNCONSTRAINED


@pytest.mark.parametrize("how", ["out_shardings", "constraint"])
def test_a_reduction_split_beyond_its_result_gathers_the_result(how):
    """XLA reduces the operand where it stands and gathers the smaller result: the f32[1]
    sums, 16 bytes per device, not the f32[1, 8] operand (128); an elementwise operation so
    placed gathers its operand instead."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(Auto, Auto))
    to_x = jax.sharding.NamedSharding(mesh, P("x"))
    if how == "out_shardings":
        f = jax.jit(lambda a: (jnp.sin(a).sum(1),), out_shardings=(to_x,))
    else:
        def f(a):
            return (jax.lax.with_sharding_constraint(jnp.sin(a).sum(1), to_x),)
    real, verdict = _both(f, ((8, 8), P(("x", "y"), None)))
    expected, said = _keys(real, verdict.collectives)
    assert verdict.collectives.complete and said == expected
    assert [(c.kind, c.bytes_per_device, c.operand) for c in verdict.collectives] == [
        ("all-gather", 16, None)]
    real, verdict = _both(lambda a: (jax.lax.with_sharding_constraint(-jnp.sin(a), to_x),),
                          ((8, 8), P(("x", "y"), None)))
    assert [(c.kind, c.bytes_per_device) for c in verdict.collectives] == [
        ("all-gather", 128)] == [(c.kind, c.bytes_per_device) for c in real]


def test_operands_split_alike_beyond_their_result_are_left_open():
    """``mul(a, c)`` of two values split ``('y', 'x')`` whose product a constraint brings to
    ``('y',)``: XLA multiplies where they stand and gathers the product once; the list is
    left open (COLL-1) rather than predicting a gather of each operand (seen in the deep
    run of 5,040 programs on the merged main)."""
    recipe = Recipe(mesh=(2, 4), reversed_devices=False, inputs=(
        ((16,), (("y", "x"),)), ((16,), (None,)), ((16,), (("y", "x"),)), ((16,), ("y",))),
        steps=(("input", (), 0), ("convert", (0,), None), ("scalar", (0,), None),
               ("input", (), 1), ("binary", (1, 3), "max"), ("input", (), 2),
               ("binary", (0, 5), "mul"), ("constrain", (6,), ("y",)), ("input", (), 3),
               ("binary", (5, 8), "add")), outputs=(6, 7, 9, 4), devices=(),
        out_shardings=(), axis_types="")
    outcome = compare_collectives(recipe)
    assert [kind for kind, _, _ in outcome.real] == ["all-gather"]
    assert not outcome.disagreements and "split alike beyond" in outcome.why


def test_a_value_read_by_two_returned_elementwise_results_over_explicit_axes():
    """``b`` typed ``P('y')`` over Explicit 'y' and placed ``P(('y', 'x'))``, read by
    ``max(a, b)`` and ``mul(b, c)`` whose results are typed ``P('y')`` and returned on it:
    XLA computes each where ``b`` stands and gathers each result at the return (two
    all-gathers, seen in the deep run of 5,040 programs on the merged main), as COLL-19
    says (the type's out sharding is kept on the return; session 20 left it open)."""
    recipe = Recipe(mesh=(4, 2), reversed_devices=True, inputs=(
        ((16,), (None,)), ((16,), (("y", "x"),)), ((16,), ("y",))),
        steps=(("input", (), 0), ("iota", (0,), 0), ("convert", (1,), None),
               ("input", (), 1), ("binary", (0, 3), "max"), ("input", (), 2),
               ("binary", (3, 5), "mul")), outputs=(4, 6, 2), devices=(),
        out_shardings=(), axis_types="AE")
    outcome = compare_collectives(recipe)
    assert [kind for kind, _, _ in outcome.real] == ["all-gather", "all-gather"]
    assert outcome.why is None and outcome.real == outcome.predicted
