"""vmap of a jit call (the BAT rules) against real JAX on 8 CPU devices, example for example.

``test_vmap_of_jit_agrees_with_jax`` draws a jit call (shardings on a 2x4, 8, 2x2x2 or
2x4x1 mesh, concrete or abstract, Auto or Explicit axes; single-device and GSPMD shardings,
some made on another mesh; unreduced and reduced axes; Formats with layouts) under one or
two vmaps (in_axes in and out of range, out_axes, axis_size, spmd_axis_name, a context
mesh; arguments whose types are split over Explicit axes), traces it with
``jax.make_jaxpr`` and requires the jit equation
JAX builds to have exactly the shardings :func:`shardlaw.spec.vmap_jit` says, or both to
refuse with the same exception type. The pinned examples below reach the edges random
draws reach rarely; a few run the program with ``shardlaw.engine.jit`` in place of
``jax.jit``; the coverage test at the end requires every BAT rule to have been seen on both
sides against JAX.

Part of the ``transforms`` suite of ``shardlaw campaign``; ``tests/test_batching.py`` runs
it in the project's own ``pytest`` run.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given

from shardlaw.engine import jit as engine_jit
from shardlaw.properties.batching_harness import (
    Vmap, VmapCase, bat_hit_counts, compare_case, run_in_jax, run_values, spec_answer,
    vmap_cases,
)
from shardlaw.properties.registry import checks
from shardlaw.spec import (
    UNCONSTRAINED, UNSPECIFIED, AbstractMesh, AxisType, Format, GSPMDSharding, Iota, Layout,
    Mesh, NamedSharding, P, SingleDeviceSharding, batch_sharding, tiled, to_hlo, vmap_jit,
)
from shardlaw.spec.transforms.batching import READ_LIMIT
from shardlaw.spec.jit.matching import check_fits
from shardlaw.properties.registry import PROGRAM_ONLY
from shardlaw.spec.core.rules import RULES

# The BAT rules left to whole programs under vmap (held to JAX by tests/test_program_vmap.py)
# are not met here; BAT-10 is met here too (a mapped argument typed with
# unreduced or reduced axes), its broadcast results only by programs.
BAT_RULES = sorted(r for r in RULES if r.startswith("BAT-")
                   and (r not in PROGRAM_ONLY or r == "BAT-10"))

AUTO2x4 = Mesh.iota((2, 4), ("x", "y"))
EXPLICIT2x4 = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit, AxisType.Explicit))
EXPLICIT2x2x2 = Mesh.iota((2, 2, 2), ("x", "y", "z"), (AxisType.Explicit,) * 3)
WITH_ONE = Mesh.iota((2, 4, 1), ("x", "y", "one"))


def _agree(case):
    problems = compare_case(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"
    return spec_answer(case)


def _one(sharding, rank=2, axis=0, spmd=None, context=None, outer=None):
    """A jit of one argument of rank ``rank`` returning it doubled (unsharded result)."""
    inner = Vmap((axis,), spmd_axis_name=spmd)
    return VmapCase((rank,), (sharding,), (0,), (UNSPECIFIED,), inner, outer=outer,
                    context_mesh=context)


@checks(*BAT_RULES)
@given(vmap_cases())
def test_vmap_of_jit_agrees_with_jax(case):
    _agree(case)


@checks(*BAT_RULES)
@given(vmap_cases())
def test_vmap_of_the_engines_jit_builds_the_same_equation(case):
    """shardlaw.engine.jit is a drop-in under vmap: the equation it traces is the spec's."""
    problems = compare_case(case, engine_jit)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"


# --------------------------------------------------------------------------- pinned examples

def _refused_by(case, rule_id, error_type):
    answer = _agree(case)
    assert answer.error is not None and answer.error.rule == rule_id, answer
    assert isinstance(answer.error, error_type)
    return answer


def _batched_arg(case):
    answer = _agree(case)
    assert answer.error is None, answer.error
    return answer.shardings[0][0]


@checks("BAT-0")
def test_vmap_parameters():
    ns = NamedSharding(AUTO2x4, P("x"))
    _refused_by(_one(ns, axis=3), "BAT-0", ValueError)          # out of the rank
    _refused_by(_one(ns, axis=-4), "BAT-0", ValueError)
    sized = VmapCase((2,), (ns,), (0,), (UNSPECIFIED,), Vmap((0,), axis_size=3))
    _refused_by(sized, "BAT-0", ValueError)                     # sizes disagree
    unmapped = VmapCase((2,), (ns,), (0,), (UNSPECIFIED,), Vmap((None,)))
    _refused_by(unmapped, "BAT-0", ValueError)                  # nothing mapped, no size
    sized_only = VmapCase((2,), (ns,), (0,), (ns,), Vmap((None,), axis_size=3))
    assert _batched_arg(sized_only) == ns                       # nothing batched at all


@checks("BAT-1", "BAT-2")
def test_unsplit_batch_dimension():
    assert _batched_arg(_one(NamedSharding(AUTO2x4, P("x")))) == NamedSharding(
        AUTO2x4, P(None, "x"))
    assert _batched_arg(_one(NamedSharding(AUTO2x4, P(None, "y")), axis=2)) == NamedSharding(
        AUTO2x4, P(None, "y"))                                  # trailing None trimmed
    # axes of size 1 vanish from a batched spec, and a spec of them alone is kept as it is
    assert _batched_arg(_one(NamedSharding(WITH_ONE, P("x", "one")))) == NamedSharding(
        WITH_ONE, P(None, "x"))
    assert _batched_arg(_one(NamedSharding(WITH_ONE, P("one")))) == NamedSharding(
        WITH_ONE, P("one"))
    # the memory kind goes back to the default, except where the sharding is kept
    pinned = NamedSharding(AUTO2x4, P("x"), memory_kind="pinned_host")
    assert _batched_arg(_one(pinned)).memory_kind == "device"
    kept = NamedSharding(AUTO2x4, P(), memory_kind="pinned_host")
    assert _batched_arg(_one(kept)) == kept
    assert _batched_arg(_one(SingleDeviceSharding(3))) == SingleDeviceSharding(3)


@checks("BAT-2")
def test_unsplit_edges():
    abstract = NamedSharding(AUTO2x4.abstract, P("y"))
    assert _batched_arg(_one(abstract, axis=1)).spec == P("y", UNCONSTRAINED)
    _refused_by(_one(NamedSharding(EXPLICIT2x4.abstract, P("y"))), "BAT-2", ValueError)
    tiled = GSPMDSharding(AUTO2x4.devices, to_hlo(NamedSharding(AUTO2x4, P("x")), 2))
    _refused_by(_one(tiled), "BAT-2", KeyError)
    replicated = GSPMDSharding(AUTO2x4.devices, "{replicated}")
    assert _batched_arg(_one(replicated)) == replicated
    # unreduced copies read back as one more dimension; two kinds of copies stay GSPMD
    unreduced = NamedSharding(EXPLICIT2x4, P("x", unreduced={"y"}))
    assert _batched_arg(_one(unreduced)).spec == P(None, "x", None, None, "y")
    mixed = NamedSharding(EXPLICIT2x2x2, P("x", unreduced={"y"}))
    assert isinstance(_batched_arg(_one(mixed)), GSPMDSharding)
    only_unreduced = NamedSharding(EXPLICIT2x4, P(unreduced={"x", "y"}))
    assert isinstance(_batched_arg(_one(only_unreduced)), GSPMDSharding)
    # reduced axes are not in the tiles
    reduced = NamedSharding(EXPLICIT2x2x2, P("x", reduced={"y"}))
    assert _batched_arg(_one(reduced)).spec == P(None, "x")
    # on an abstract mesh a spec with unreduced axes is indexed (ValueError) or padded (TypeError)
    abstract_unreduced = NamedSharding(EXPLICIT2x4.abstract, P("x", unreduced={"y"}))
    _refused_by(_one(abstract_unreduced, axis=0), "BAT-2", ValueError)
    _refused_by(_one(abstract_unreduced, axis=2), "BAT-2", TypeError)


@checks("BAT-3", "BAT-4", "BAT-5", "BAT-6")
def test_split_batch_dimension():
    ns = NamedSharding(AUTO2x4, P(None, "y"))
    assert _batched_arg(_one(ns, spmd="x")) == NamedSharding(AUTO2x4, P("x", None, "y"))
    assert _batched_arg(_one(NamedSharding(AUTO2x4, P()), axis=2, spmd=("x", "y"))) == \
        NamedSharding(AUTO2x4, P(None, None, ("x", "y")))
    _refused_by(_one(ns, spmd="y"), "BAT-4", Exception)        # y splits the value already
    _refused_by(_one(ns, spmd=("x", "x")), "BAT-4", Exception)  # x named twice
    _refused_by(_one(ns, spmd="w"), "BAT-5", ValueError)
    # a size-1 axis read back from the tiles is gone, so splitting over it again is fine
    assert _batched_arg(_one(NamedSharding(WITH_ONE, P("one")), spmd="one")).spec == P("one")
    single = SingleDeviceSharding(5)
    _refused_by(_one(single, spmd="x"), "BAT-6", ValueError)
    assert _batched_arg(_one(single, spmd="x", context=AUTO2x4)) == NamedSharding(
        AUTO2x4, P("x"))
    tiled = GSPMDSharding(AUTO2x4.devices, to_hlo(NamedSharding(AUTO2x4, P("x")), 2))
    assert _batched_arg(_one(tiled, spmd="y", context=AUTO2x4)) == NamedSharding(
        AUTO2x4, P("y", "x"))


@checks("BAT-3")
def test_split_edges():
    abstract = NamedSharding(AUTO2x4.abstract, P("x", None))
    assert _batched_arg(_one(abstract, axis=1, spmd="y")).spec == P("x", "y", None)
    _refused_by(_one(NamedSharding(EXPLICIT2x2x2, P("x", unreduced={"y"})), spmd="z"),
                "BAT-3", NotImplementedError)
    _refused_by(_one(NamedSharding(EXPLICIT2x4, P(unreduced={"x", "y"})), spmd="x"),
                "BAT-3", AssertionError)
    unreduced = NamedSharding(EXPLICIT2x4.abstract, P("x", unreduced={"y"}))
    _refused_by(_one(unreduced, axis=0, spmd="y"), "BAT-3", ValueError)
    _refused_by(_one(unreduced, axis=2, spmd="y"), "BAT-3", TypeError)


@checks("BAT-3")
def test_gspmd_read_on_the_context_mesh():
    """A GSPMD sharding split over spmd axes is read on the context mesh as JAX reads it:
    the runs of its device order split into whole mesh axes, which fill the tiles in turn."""
    other = Mesh.iota((2, 2, 2), ("a", "b", "c"))

    def gspmd(mesh, spec):
        return GSPMDSharding(mesh.devices, to_hlo(NamedSharding(mesh, spec), 2))
    transposed = gspmd(AUTO2x4, P("y", "x"))
    assert _batched_arg(_one(transposed, spmd=(), context=AUTO2x4)) == NamedSharding(
        AUTO2x4, P(None, "y", "x"))
    _refused_by(_one(gspmd(other, P(("a", "b"), "c")), spmd="x", context=AUTO2x4),
                "BAT-3", ValueError)                            # IndivisibleError
    _refused_by(_one(gspmd(other, P("c", "a")), spmd="x", context=AUTO2x4),
                "BAT-3", AssertionError)                        # runs are not whole axes
    strided = GSPMDSharding(AUTO2x4.devices,
                            "{devices=[2,4]<=[2,2,2]T(1,0,2) last_tile_dim_replicate}")
    _refused_by(_one(strided, rank=1, axis=1, spmd="x", context=AUTO2x4), "BAT-3", KeyError)
    backwards = GSPMDSharding(AUTO2x4.devices, "{devices=[8,1]7,6,5,4,3,2,1,0}")
    _refused_by(_one(backwards, spmd="x", context=AUTO2x4), "BAT-3", NotImplementedError)
    one_device = GSPMDSharding([3], "{maximal device=0}")
    _refused_by(_one(one_device, spmd="x", context=AUTO2x4), "BAT-3", AssertionError)


@checks("BAT-0", "BAT-2")
def test_in_axes_as_a_list_and_no_spmd_names():
    ns = NamedSharding(AUTO2x4, P("y"))
    case = VmapCase((1, 1), (ns, ns), (0,), (UNSPECIFIED,), Vmap([1, None]))
    assert _agree(case).shardings[0] == (NamedSharding(AUTO2x4, P("y")), ns)
    # an empty tuple of spmd axes takes the split path with nothing to split over
    assert _batched_arg(_one(NamedSharding(AUTO2x4, P()), spmd=())) == NamedSharding(
        AUTO2x4, P(None))


@checks("BAT-7", "BAT-2", "BAT-3")
def test_nested_vmaps():
    ns = NamedSharding(AUTO2x4, P("y"))
    case = _one(ns, rank=1, axis=1, spmd="x", outer=Vmap((0,)))
    assert _batched_arg(case) == NamedSharding(AUTO2x4, P(None, "y", "x"))
    # on an abstract mesh the inner vmap's UNCONSTRAINED stays when the outer one splits
    # (campaign d found the spec writing None there)
    abstract = NamedSharding(AUTO2x4.abstract, P("y"))
    case = _one(abstract, rank=1, outer=Vmap((0,), spmd_axis_name="x"))
    case = dataclasses.replace(case, mesh=AUTO2x4)
    assert _batched_arg(case) == NamedSharding(AUTO2x4.abstract, P("x", UNCONSTRAINED, "y"))
    assert not compare_case(case, engine_jit)
    # an inner vmap that reads unreduced tiles back makes a spec longer than the value
    unreduced = NamedSharding(EXPLICIT2x4, P("x", unreduced={"y"}))
    _refused_by(_one(unreduced, rank=1, outer=Vmap((0,))), "BAT-7", IndexError)
    _refused_by(_one(unreduced, rank=1, outer=Vmap((0,), spmd_axis_name="x")), "BAT-7",
                IndexError)


@checks("BAT-8")
def test_layouts_are_not_batched():
    ns = NamedSharding(AUTO2x4, P("x"))
    _refused_by(_one(Format(Layout.default(2), ns)), "BAT-8", NotImplementedError)
    _refused_by(_one(Format(Layout.AUTO)), "BAT-8", NotImplementedError)
    assert _batched_arg(_one(Format(None, ns))) == NamedSharding(AUTO2x4, P(None, "x"))
    # even when vmap batches none of the call's values
    unbatched = VmapCase((2,), (Format(Layout.AUTO, ns),), (0,), (UNSPECIFIED,),
                         Vmap((None,), axis_size=3))
    _refused_by(unbatched, "BAT-8", NotImplementedError)
    # a sharding's refusal comes first
    _refused_by(_one(Format(Layout.AUTO, ns), spmd="x"), "BAT-4", Exception)
    in_result = VmapCase((2,), (ns,), (0,), (Format(Layout((1, 0)), ns),), Vmap((0,)))
    _refused_by(in_result, "BAT-8", NotImplementedError)


@checks("BAT-9")
def test_arguments_split_over_explicit_axes():
    """Arrays whose types split the mapped dimension over Explicit axes batch over them:
    the jit's shardings keep the batch dimension unsplit, and spmd_axis_name may only
    repeat those axes."""
    ns = NamedSharding(EXPLICIT2x4, P(None, "x"))

    def typed(types, in_axes=(0,), spmd=None, shardings=(ns,)):
        n = len(types)
        return VmapCase((2,) * n, tuple(shardings) * (n // len(shardings)), (0,),
                        (UNSPECIFIED,), Vmap(in_axes, spmd_axis_name=spmd),
                        arg_types=tuple(types), mesh=EXPLICIT2x4)
    unsplit = NamedSharding(EXPLICIT2x4, P(None, None, "x"))
    assert _batched_arg(typed([P("y")])) == unsplit
    assert _batched_arg(typed([P("y")], spmd="y")) == unsplit            # spmd dropped
    assert _batched_arg(typed([P("y")], in_axes=(-3,), spmd="y")) == unsplit
    _refused_by(typed([P("y")], spmd="x"), "BAT-9", ValueError)
    _refused_by(typed([P("y"), P()], in_axes=(0, 0)), "BAT-9", ValueError)   # not alike
    _refused_by(typed([P("y"), P(None, "y")], in_axes=(0, None)), "BAT-9", ValueError)
    assert _agree(typed([P("y"), P(None, "x")], in_axes=(0, None))).error is None
    # the jit may split its own dimensions over the axis the batch is split over
    same_axis = typed([P("y")], shardings=(NamedSharding(EXPLICIT2x4, P(None, "y")),))
    assert _batched_arg(same_axis) == NamedSharding(EXPLICIT2x4, P(None, None, "y"))


@checks("BAT-10", "BAT-9")
def test_a_mapped_argument_typed_with_reduced_axes_is_refused():
    """vmap reads a mapped argument's type at its mapped dimension, which JAX refuses for a
    type with unreduced or reduced axes (ValueError; BAT-10), an argument at a time: one
    split unlike the first mapped argument is refused first (BAT-9), and an unmapped one
    so typed is not read (its result is not returned, so vmap broadcasts nothing)."""
    ns = NamedSharding(EXPLICIT2x2x2, P())

    def typed(types, in_axes, sources=(0,)):
        n = len(types)
        return VmapCase((1,) * n, (ns,) * n, sources, (UNSPECIFIED,) * len(sources),
                        Vmap(in_axes), arg_types=tuple(types), mesh=EXPLICIT2x2x2)
    reduced, unreduced = P(None, reduced={"z"}), P("y", None, unreduced={"x"})
    for spec in (reduced, unreduced):
        answer = _refused_by(typed([spec], (0,)), "BAT-10", ValueError)
        assert answer.error.path == "args[0]"
        answer = _refused_by(typed([P("y"), P("y", reduced={"x"})], (0, 1)), "BAT-10",
                             ValueError)
        assert answer.error.path == "args[1]"
    # the second argument split unlike the first: refused there, the third not read
    answer = _refused_by(typed([P("y"), P("x"), reduced], (0, 0, 0)), "BAT-9", ValueError)
    assert answer.error.path == "args[1]"
    # unmapped, and no result copies it: accepted
    assert _agree(typed([reduced, P()], (None, 0), sources=(1,))).error is None
    # nested: unmapped by the outer vmap, mapped by the inner one, which refuses it
    nested = dataclasses.replace(typed([reduced, P()], (0, 0), sources=(1,)),
                                 outer=Vmap((None, 0)))
    _refused_by(nested, "BAT-10", ValueError)


def test_a_split_batch_that_does_not_divide_is_built_then_refused_when_run():
    """JAX builds the equation whatever the batch size; running it, jit refuses a batch of 3
    split 2 ways (IndivisibleError), as FIT-1 says of the batched sharding."""
    case = dataclasses.replace(_one(NamedSharding(AUTO2x4, P(None, "y")), spmd="x"), batch=3)
    batched = _batched_arg(case)
    with pytest.raises(ValueError, match="partitioned 2 times"):
        run_values(case)
    with pytest.raises(ValueError) as refused:
        check_fits(batched, (3, 8, 8), "args[0]")
    assert refused.value.rule == "FIT-1"


ENGINE_CASES = [
    _one(NamedSharding(AUTO2x4, P("x")), rank=1),
    _one(NamedSharding(AUTO2x4, P(None, "y")), axis=1, spmd="x"),
    _one(NamedSharding(AUTO2x4, P("y")), rank=1, axis=1, spmd="x", outer=Vmap((0,))),
    VmapCase((1, 2), (NamedSharding(AUTO2x4, P("x")), UNSPECIFIED), (1, None),
             (NamedSharding(AUTO2x4, P(None, "x")), NamedSharding(AUTO2x4, P())),
             Vmap((0, 2), out_axes=-1, spmd_axis_name="y")),
]


@pytest.mark.parametrize("case", ENGINE_CASES)
def test_engine_jit_builds_the_same_equation_and_values(case):
    assert compare_case(case, engine_jit) == []
    assert run_in_jax(case, engine_jit).shardings == run_in_jax(case).shardings
    ours, theirs = run_values(case, engine_jit), run_values(case)
    assert len(ours) == len(theirs)
    for (a, sa), (b, sb) in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
        assert sa == sb


def _ten_argument_call(mesh, spmd):
    shardings = [NamedSharding(mesh, (P("x"), P(None, "y"), P())[i % 3]) for i in range(10)]
    return vmap_jit(shardings, [NamedSharding(mesh, P("x")), UNSPECIFIED], [(16, 8, 8)] * 10,
                    [2, 2], in_axes=0, result_axes=0, spmd_axis_name=spmd)


def test_the_answer_never_enumerates_devices():
    """A 10-argument call on a mesh of 2**40 devices is answered (it would not be, were the
    devices walked). How long a whole program's answer takes is benchmarks/bench_program.py's."""
    huge = Mesh.iota((1 << 20, 1 << 20), ("x", "y"))
    assert _ten_argument_call(huge, None).in_shardings[0] == NamedSharding(huge, P(None, "x"))
    assert _ten_argument_call(huge, ()).axis_size == 16
    abstract = AbstractMesh((1 << 20, 1 << 10, 1 << 10), ("x", "y", "batch"))
    batched = _ten_argument_call(abstract, "batch").in_shardings[0]
    assert batched == NamedSharding(abstract, P("batch", "x"))


def test_reading_a_gspmd_sharding_is_bounded():
    """Reading a GSPMD sharding's device order walks it (as JAX does); above READ_LIMIT
    devices the spec refuses instead of walking 2**40 of them."""
    huge = Mesh.iota((1 << 20, 1 << 20), ("x", "y"))
    sharding = GSPMDSharding(huge.devices, tiled((1 << 20, 1 << 20), Iota.range(1 << 40)))
    with pytest.raises(ValueError, match=f"at most {READ_LIMIT}") as refused:
        batch_sharding(sharding, 0, 2, spmd_axis_name=(), context_mesh=huge)
    assert refused.value.rule == "BAT-3"


def test_every_bat_rule_was_seen_on_both_sides():
    """Run last in this module: every BAT rule met JAX accepting and refusing (BAT-1, which
    never refuses: keeping a sharding and batching one)."""
    if not bat_hit_counts():  # run on its own: gather the hits first
        test_vmap_of_jit_agrees_with_jax()
        for name, value in list(globals().items()):
            if name.startswith("test_") and callable(value) and name not in (
                    "test_every_bat_rule_was_seen_on_both_sides",
                    "test_vmap_of_jit_agrees_with_jax",
                    "test_vmap_of_the_engines_jit_builds_the_same_equation",
                    "test_engine_jit_builds_the_same_equation_and_values"):
                value()
    print("\nBAT rules, hits against JAX (accepted / refused; BAT-1: kept / batched):")
    hits = bat_hit_counts()
    for rule_id in BAT_RULES:
        accepted, refused = hits.get(rule_id, (0, 0))
        print(f"  {rule_id:6s} {accepted:6d} {refused:6d}")
    missing = [f"{r} {hits.get(r)}" for r in BAT_RULES if not all(hits.get(r, (0, 0)))]
    assert not missing, "not hit on both sides against JAX: " + ", ".join(missing)
