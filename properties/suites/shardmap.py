"""The shard_map rules (SMAP) against real ``jax.shard_map`` on 8 CPU devices.

``test_shard_map_agrees_with_jax`` draws whole shard_maps (:func:`smap_calls`), runs each
through ``jax.jit(jax.shard_map(...))`` (traced, then lowered) and through
:func:`shardlaw.spec.transforms.shardmap.check_shard_map`, and requires the same outcome: accepted or
not, the exception's type and stage, and for accepted calls the equation's specs, the
shard types inside (shapes and varying axes) and the shapes outside. The collective and
manual-sharding properties compare the device groups of a ``psum`` (the HLO's
``replica_groups``, and the devices that summed together when run) and the manual HLO
sharding. The examples pin what random draws reach rarely; the coverage test at the end
requires every SMAP rule to have been seen on both sides against JAX.

Part of the ``transforms`` suite of ``shardlaw campaign``; ``tests/test_shardmap.py`` runs
it in the project's own ``pytest`` run.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.properties import fuzz
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples
from shardlaw.properties.registry import PROGRAM_ONLY
from shardlaw.properties.shardmap_harness import (
    SmapCall, compare_shard_map, count_hit, smap_calls, smap_hit_counts, smap_meshes,
)
from shardlaw.spec import P
from shardlaw.spec.core.rules import RULES, Rejection, tracing
from shardlaw.spec.transforms.shardmap import Returned, Shaped, check_shard_map
from shardlaw.spec.bridge.shardmap import (
    COLLECTIVES, collective_in_jax, hlo_replica_groups, manual_sharding_in_jax,
)

# Every health check but nested_given (which HypoFuzz refuses to run tests that suppress).
ALL_BUT_NESTED = [check for check in HealthCheck if check is not HealthCheck.nested_given]

# The SMAP rules met only inside whole programs' shard_map bodies (SMAP-20..22: a body's
# collectives) are held to JAX by tests/test_program_shardmap.py, not by this suite.
SMAP_RULES = sorted((r for r in RULES if r.startswith("SMAP-") and r not in PROGRAM_ONLY),
                    key=lambda r: int(r[5:]))
# Rules that decide without refusing: their two sides are two outcomes of the decision
# (SMAP-9, SMAP-10: a dimension split or not; SMAP-14: devices together or apart;
# SMAP-15: a manual sharding, or none when the manual axes hold one device).
DECIDING = {"SMAP-9", "SMAP-10", "SMAP-14", "SMAP-15"}

MESH = S.Mesh.iota((2, 4), ("x", "y"))
X = (Shaped((8, 8)),)
EXPLICIT = S.Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Explicit,) * 2)
EXPLICIT_X = S.Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Auto, S.AxisType.Explicit))


def _agree(call: SmapCall) -> None:
    problems = compare_shard_map(call)
    assert not problems, "\n".join(problems) + f"\ncall: {call}"


def _call(in_specs, out_specs, operands=X, results=Returned(0), manual=frozenset(),
          check_vma=True, mesh=MESH) -> SmapCall:
    return SmapCall(mesh, in_specs, out_specs, operands, results, manual, check_vma)


def _rule_of(call: SmapCall) -> str | None:
    try:
        check_shard_map(call.mesh, call.in_specs, call.out_specs, call.operands, call.results,
                        call.manual_axes, call.check_vma)
    except Rejection as rejection:
        return rejection.rule
    return None


@checks(*[r for r in SMAP_RULES if r not in ("SMAP-14", "SMAP-15")])
@given(smap_calls())
def test_shard_map_agrees_with_jax(call):
    _agree(call)


# --------------------------------------------------------------------------- collectives

@st.composite
def collectives(draw):
    mesh = draw(smap_meshes())
    manual = frozenset(draw(st.sets(st.sampled_from(mesh.axis_names), min_size=1)))
    axes = draw(st.permutations(sorted(manual)))
    axes = tuple(axes[:draw(st.integers(1, len(axes)))])
    return mesh, manual, axes, draw(st.sampled_from(COLLECTIVES))


@checks("SMAP-14", "SMAP-13")
@given(collectives(), st.integers(0, 3))
def test_collective_groups_agree_with_jax(drawn, dice):
    """The HLO's replica groups (of a psum, pmax, pmin, all_gather, psum_scatter or
    all_to_all) are the spec's groups of mesh positions, in order; run (a psum, one draw in
    four, on fully manual meshes), each device sums exactly its spec group."""
    mesh, manual, axes, kind = drawn
    run = manual == frozenset(mesh.axis_names) and dice == 0
    hlo, together = collective_in_jax(mesh, axes, manual, run, kind)
    with tracing() as fired:
        positions = S.replica_groups(mesh, axes, manual)
        groups = S.collective_groups(mesh, axes, manual)
    assert "SMAP-14" in fired
    if hlo is None:  # JAX emitted no all_reduce: every group is one device
        assert all(len(g) == 1 for g in positions), (mesh, axes)
    else:
        assert hlo == positions, (kind, mesh, manual, axes, hlo, positions)
    if together is not None:
        assert together == {tuple(sorted(g)) for g in groups}, (mesh, axes, together, groups)
    count_hit("SMAP-14", True)
    if any(len(g) < mesh.size for g in groups):
        count_hit("SMAP-14", False)   # some devices apart: the other outcome of the decision


@checks("SMAP-14")
def test_psum_over_x_on_a_permuted_2x4_mesh():
    mesh = S.Mesh((2, 4), ("x", "y"), [3, 1, 0, 2, 7, 5, 6, 4])
    hlo, together = collective_in_jax(mesh, ("x",), frozenset({"x", "y"}), True)
    assert hlo == ((0, 4), (1, 5), (2, 6), (3, 7)) == S.replica_groups(mesh, "x")
    assert together == {(3, 7), (1, 5), (0, 6), (2, 4)}
    assert S.collective_groups(mesh, "x") == ((3, 7), (1, 5), (0, 6), (2, 4))
    # The order of the axes orders each group's members (the first axis major).
    hlo, _ = collective_in_jax(mesh, ("y", "x"), frozenset({"x", "y"}), False)
    assert hlo == ((0, 4, 1, 5, 2, 6, 3, 7),) == S.replica_groups(mesh, ("y", "x"))


@checks("SMAP-13")
def test_collective_axes_are_checked_as_jax_checks_them():
    cases = [
        # (in spec, summed, manual, check_vma, error JAX raises or None)
        (P("x", "y"), ("x",), set(), True, None),
        (P("x"), ("x", "y"), set(), True, ValueError),          # varying and invariant mixed
        (P(), ("x", "y"), set(), True, None),                   # both invariant: fine
        (P(), ("q",), set(), True, AssertionError),             # not a mesh axis
        (P(), ("y",), {"x"}, True, NameError),                  # automatic
        (P("x"), ("q",), {"x"}, False, NameError),              # not a mesh axis, no vma
        (P("x"), ("x", "x"), set(), True, ValueError),          # repeated: when lowered
    ]
    for spec, summed, manual, vma, error in cases:
        call = _call(spec, P(), results=Returned(0, summed), manual=manual, check_vma=vma)
        _agree(dataclass_replace_out(call))
        expected = None if error is None else "SMAP-13"
        assert _rule_of(dataclass_replace_out(call)) == expected, (spec, summed, manual)


def dataclass_replace_out(call: SmapCall) -> SmapCall:
    """The call with out specs that give back every axis the result may vary along."""
    names = tuple(a for a in call.mesh.axis_names
                  if a in (call.manual_axes or call.mesh.axis_names))
    return SmapCall(call.mesh, call.in_specs, P(None, names), call.operands, call.results,
                    call.manual_axes, call.check_vma)


# --------------------------------------------------------------------------- Explicit axes

@checks("SMAP-16", "SMAP-17", "SMAP-18", "SMAP-19")
def test_explicit_axes_in_specs_types_and_inference():
    """Over Explicit axes an argument's type carries its spec: with every axis manual the in
    spec must be that spec (SMAP-17), left out it is read off the type (SMAP-16), and the
    types inside and outside keep the Explicit axes (SMAP-18)."""
    typed = (Shaped((8, 8), P("x", "y")),)
    mixed = S.Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Explicit, S.AxisType.Auto))
    cases = [
        (_call(P("x", "y"), P("x", "y"), typed, mesh=EXPLICIT), None),
        (_call(P("y"), P("y"), typed, mesh=EXPLICIT), "SMAP-17"),
        (_call(P(), P(), (Shaped((8, 8)),), mesh=EXPLICIT), None),
        (_call(P("x"), P("x"), (Shaped((8, 8)),), mesh=EXPLICIT), "SMAP-17"),
        (_call(P(("x",), "y"), P("x", "y"), typed, mesh=EXPLICIT), None),
        (_call(S.INFER, P("x", "y"), typed, mesh=EXPLICIT), None),
        (_call(S.INFER, P("y"), (Shaped((8, 8), P("x")),), manual={"y"}, mesh=EXPLICIT),
         None),
        (_call(S.INFER, P(None, "y"), typed, manual={"y"}, mesh=EXPLICIT), None),
        (_call(S.INFER, P("x"), (Shaped((8,), P(("y", "x"))),), manual={"x"},
               mesh=EXPLICIT), "SMAP-16"),
        (_call(S.INFER, P("x", "y"), X), "SMAP-16"),
        (_call(S.INFER, P("x"), (Shaped((8, 8), P("x")),), mesh=mixed), "SMAP-16"),
        # Not every axis Explicit, or not every axis manual: the types are not checked.
        (_call(P("x", "y"), P("x", "y"), (Shaped((8, 8)),), mesh=mixed), None),
        (_call(P("y"), P("y"), (Shaped((8, 8), P("x")),), manual={"y"}, mesh=EXPLICIT),
         None),
        # The type kept inside must still split the shard: 4 // 4 = 1 is not split by x.
        (_call(P("y"), P(), (Shaped((4,), P("x")),), manual={"y"}, mesh=mixed), "SMAP-18"),
        (_call(P("y"), P("y"), (Shaped((8,), P("x")),), manual={"y"}, mesh=mixed), None),
        # Unreduced axes the argument's type does not hold (SMAP-4 lets them through on an
        # Explicit axis of a fully manual shard_map), and an out spec's with check_vma.
        (_call(P(unreduced={"x"}), P(), (Shaped(()),), mesh=mixed), "SMAP-19"),
        (_call(P(), P(unreduced={"x"}), (Shaped(()),), mesh=mixed), "SMAP-19"),
        (_call(P(), P(unreduced={"x"}), (Shaped(()),), mesh=mixed, check_vma=False),
         "SMAP-19"),  # when lowered
    ]
    for call, rule in cases:
        _agree(call)
        assert _rule_of(call) == rule, (call, rule)
    types = check_shard_map(EXPLICIT, P("y"), P("y"), (Shaped((8, 8), P("x")),),
                            Returned(0), {"y"})
    assert types.inner_types == (("x", None),) and types.out_types == ((("y", "x"), None),)
    assert check_shard_map(MESH, P("x"), P("x"), X, Returned(0)).out_types == ((None, None),)


# --------------------------------------------------------------------------- manual shardings

@checks("SMAP-15")
@settings(max_examples=examples(66))
@given(smap_meshes(), st.data(), st.integers(0, 2))
def test_manual_sharding_agrees_with_jax(mesh, data, rank):
    manual = frozenset(data.draw(st.sets(st.sampled_from(mesh.axis_names), min_size=1)))
    found = manual_sharding_in_jax(mesh, manual, rank)
    with tracing() as fired:
        mine = S.manual_sharding(mesh, manual, rank)
    assert "SMAP-15" in fired
    assert found == mine, (mesh, manual, rank, found, mine)
    count_hit("SMAP-15", mine is not None)


@checks("SMAP-15")
@pytest.mark.timeout(120)
def test_manual_sharding_of_the_largest_rank_answers():
    """Found by the campaign's fuzz suite: the tiles of a rank-28,639 shard took 10 s to build
    (a stride per dimension, each a product of the dimensions after it); now one pass."""
    from shardlaw.spec.core.dims import MAX_RANK
    assert S.manual_sharding(S.Mesh.iota((6,), ("x",)), set(), MAX_RANK) == S.Manual()
    tiled = S.manual_sharding(S.Mesh.iota((2, 2, 2), ("z", "y", "x")), {"y", "x"}, MAX_RANK)
    assert tiled.dims == (1,) * MAX_RANK + (4, 2)


@checks("SMAP-15")
def test_manual_sharding_orders_manual_axes_by_name_and_skips_one_device():
    mesh = S.Mesh.iota((2, 2, 2), ("z", "y", "x"))
    assert manual_sharding_in_jax(mesh, frozenset({"y", "x"}), 1) == \
        S.manual_sharding(mesh, {"y", "x"}, 1)
    assert S.hlo_text(S.manual_sharding(mesh, {"y", "x"}, 1)) == \
        "{devices=[1,4,2]<=[2,2,2]T(2,1,0) last_tile_dims={manual, replicated}}"
    lone = S.Mesh.iota((1, 8), ("x", "y"))
    assert manual_sharding_in_jax(lone, frozenset({"x"}), 2) is None
    assert S.manual_sharding(lone, {"x"}, 2) is None
    count_hit("SMAP-15", False)
    assert S.manual_sharding(MESH, set(), 0) == S.Manual()


# --------------------------------------------------------------------------- pinned examples

@checks("SMAP-0")
def test_the_mesh_must_be_a_mesh():
    with pytest.raises(TypeError):
        shard_map_in_jax_with_a_string_mesh()
    with pytest.raises(TypeError) as caught:
        check_shard_map("m", P(), P(), X, Returned(0))
    assert caught.value.rule == "SMAP-0"
    count_hit("SMAP-0", False)
    # check_vma is read by its truth value, as JAX reads it.
    _agree(_call(P("x"), P(), check_vma=0))
    _agree(_call(P("x"), P(), check_vma="yes"))
    # Spec-only refusals (JAX has no such parameter, or the spec stops there): a check_vma
    # without a truth value, results that name no argument, an argument type no value has
    # (over an Auto axis, an axis twice, indivisible), meshes with Manual axes.
    bad_types = [(Shaped((8, 8), P("x")),), (Shaped((8, 8), P("x", "x")),),
                 (Shaped((6,), P("y")),), (Shaped((8,), P(None, "x")),)]
    for bad in (dict(check_vma=np.ones(2)), dict(results=Returned(3)),
                *[dict(operands=o, mesh=EXPLICIT_X) for o in bad_types]):
        args = dict(mesh=MESH, in_specs=P(), out_specs=P(), operands=X, results=Returned(0))
        args.update(bad)
        with pytest.raises(Rejection) as caught:
            check_shard_map(**args)
        assert caught.value.rule == "SMAP-0", bad
    # A typed argument passed whole: closed over, JAX's paths are unfinished.
    with pytest.raises(NotImplementedError) as caught:
        check_shard_map(EXPLICIT, (None,), P(), (Shaped((8,), P("x")),), Returned(0))
    assert caught.value.rule == "SMAP-0"
    manual = S.Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Manual,) * 2)
    with pytest.raises(NotImplementedError):
        check_shard_map(manual, P(), P(), X, Returned(0))


def shard_map_in_jax_with_a_string_mesh():
    jax.shard_map(lambda a: a, mesh="m", in_specs=P(), out_specs=P())(np.ones(4))


@checks("SMAP-1", "SMAP-2", "SMAP-3", "SMAP-4", "SMAP-5", "SMAP-6", "SMAP-7", "SMAP-8",
        "SMAP-11", "SMAP-12")
def test_each_refusal_and_its_neighbour():
    two = (Shaped((8, 8)), Shaped((8, 8)))
    cases = [
        (_call(P("x"), P("x"), manual=["x"]), "SMAP-1"),
        (_call(P("x"), P("x"), manual={"x", "q"}), "SMAP-1"),
        (_call(P("x"), P("x"), manual={"x"}), None),
        (_call("x", P("x")), "SMAP-2"),
        (_call((P("x"),), P("x")), None),
        (_call((("x",),), P("x")), "SMAP-2"),                  # a tuple is a container
        (_call(P("y"), P("y"), manual={"x"}), "SMAP-3"),       # automatic axis
        (_call(P("q"), P("x")), "SMAP-3"),
        (_call(P(S.UNCONSTRAINED), P()), "SMAP-3"),
        (_call(P("x", unreduced={"y"}), P("x")), "SMAP-4"),    # Auto axes
        (_call(P("x", unreduced={"y"}), P("x"), manual={"x"}), "SMAP-4"),
        (_call(P("x"), P("x", reduced={"q"})), "SMAP-4"),       # KeyError: not a mesh axis
        (_call([P("x"), P("x")], P("x"), operands=two), "SMAP-5"),
        (_call((P("x"), P("x")), P("x"), operands=two), None),
        (_call((P("x"), None), P("x"), operands=two), None),   # args[1] passed whole
        (_call(None, P("x")), None),                            # every argument whole
        (_call(P(), P(), mesh=S.Mesh((), (), [3])), None),      # a mesh without axes
        (_call(P("x"), P("x"), mesh=MESH.abstract), None),
        (_call(P("x"), None), "SMAP-6"),
        (_call(P("x"), [P("x"), P()], results=(Returned(0), Returned(0))), "SMAP-6"),
        (_call(P("x", None, None), P("x")), "SMAP-7"),
        (_call(P("x"), P("x", None, None)), "SMAP-7"),
        (_call(P(("x", "y")), P(("x", "y")), operands=(Shaped((12,)),)), "SMAP-8"),
        (_call(P("x"), P()), "SMAP-11"),
        (_call(P("x"), P(), check_vma=False), None),
        (_call(P("x"), P(), results=Returned(0, "x")), None),
        (_call(P("x"), P("x", "x")), "SMAP-12"),                # out: refused when traced
        (_call(P("x", "x"), P("x")), "SMAP-12"),                # in: refused when lowered
        (_call((P("x"), P("x", "x")), P("x"), operands=two), None),  # unused: pruned first
    ]
    for call, rule in cases:
        _agree(call)
        assert _rule_of(call) == rule, (call, rule)


def test_size_one_axes_still_count_for_replication():
    lone = S.Mesh.iota((1, 8), ("x", "y"))
    call = _call(P("x"), P(), mesh=lone)
    _agree(call)
    assert _rule_of(call) == "SMAP-11"


def test_a_psum_over_an_invariant_value_keeps_it_invariant():
    """Summing a replicated value over x (JAX inserts pvary first) leaves it replicated."""
    call = _call(P(), P(), results=Returned(0, "x"))
    _agree(call)
    types = check_shard_map(MESH, P(), P(), X, Returned(0, "x"))
    assert types.result_varying == (frozenset(),)


def test_the_hlo_replica_groups_parser():
    text = ('%1 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 4], [1, 5]]> : '
            'tensor<2x2xi64>, use_global_device_ids}>')
    assert hlo_replica_groups(text) == [((0, 4), (1, 5))]
    splat = '"stablehlo.all_reduce"(%a) <{replica_groups = dense<0> : tensor<1x1xi64>}>'
    assert hlo_replica_groups(splat) == [((0,),)]


# --------------------------------------------------------------------------- bad input

@settings(max_examples=examples(600), deadline=None,
          suppress_health_check=ALL_BUT_NESTED)
@given(fuzz.spec_cases([t for t in fuzz.TARGETS if t.name in S.shardmap.__all__]))
def test_shard_map_functions_end_in_a_value_or_a_rule(case):
    outcome = fuzz.run_spec_case(case)
    assert not outcome.failed, f"{outcome.kind} ({outcome.detail}): {case!r}"


# --------------------------------------------------------------------------- coverage

def _smap_rules_missing_a_side() -> list[str]:
    """The SMAP rules this process has not yet seen JAX accept and refuse."""
    hits = smap_hit_counts()
    missing = [f"{r} {hits.get(r, (0, 0))}" for r in SMAP_RULES
               if not all(hits.get(r, (0, 0))) and r not in ("SMAP-9", "SMAP-10")]
    return missing + [r for r in ("SMAP-9", "SMAP-10") if not hits.get(r, (0, 0))[0]]


def test_every_smap_rule_was_seen_on_both_sides():
    """Run last in this module: every SMAP rule met JAX accepting and refusing."""
    if _smap_rules_missing_a_side():  # run on its own, or after other files' shard_maps only
        for name, value in list(globals().items()):
            if name.startswith("test_") and name != "test_every_smap_rule_was_seen_on_both_sides":
                value()
    print("\nshard_map rules, hits against JAX (accepted / rejected):")
    hits = smap_hit_counts()
    for rule_id in SMAP_RULES:
        accepted, rejected = hits.get(rule_id, (0, 0))
        print(f"  {rule_id:8s} {accepted:6d} {rejected:6d}")
    missing = _smap_rules_missing_a_side()
    assert not missing, "not hit on both sides against JAX: " + ", ".join(missing)
