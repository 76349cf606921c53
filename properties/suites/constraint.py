"""with_sharding_constraint (the WSC rules) against real JAX on 8 CPU devices, case for case.

``test_constraint_agrees_with_jax`` draws values (uneven shapes included), meshes, shardings,
bare PartitionSpecs, context meshes and vmaps; each case is traced with ``jax.make_jaxpr``
(the ``sharding_constraint`` equations' sharding and ``unconstrained_dims``) and run under
``jax.jit``, and the spec must agree: accepted or not, the exception's class, the equations.
The pinned examples below reach the sides random cases reach rarely; the coverage test at
the end requires every WSC rule to have been seen on both sides against JAX.

Part of the ``transforms`` suite of ``shardlaw campaign``; ``tests/test_constraint.py`` runs
it in the project's own ``pytest`` run.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.properties.constraint_harness import (
    ConstraintCase, compare_constraint, constraint_cases, spec_outcome, wsc_hit_counts,
)
from shardlaw.properties.registry import checks
from shardlaw.properties.registry import PROGRAM_ONLY
from shardlaw.spec import Arg, Mesh, NamedSharding, P, UNCONSTRAINED
from shardlaw.spec.core.rules import RULES

MESH = Mesh.iota((2, 4), ("x", "y"))
M3 = Mesh.iota((2, 1, 4), ("x", "o", "y"))
EXPLICIT = Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Explicit,) * 2)
# The WSC rules met only by constraints inside whole programs (WSC-10, WSC-11: a value's
# split over Explicit axes in its type) are held to JAX by tests/test_programs.py.
WSC_RULES = sorted(r for r in RULES if r.startswith("WSC-") and r not in PROGRAM_ONLY)
# Input checking of the spec's own description: JAX has no such value to refuse.
DESCRIPTION = {"WSC-0"}
# Rules that decide without refusing; their two outcomes are counted under their own keys.
DECIDING = {"WSC-9"}


def _agree(case: ConstraintCase):
    problems = compare_constraint(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"
    found, rejection, _ = spec_outcome(case)
    return found, rejection


@checks(*[r for r in WSC_RULES if r not in DESCRIPTION])
@given(constraint_cases())
def test_constraint_agrees_with_jax(case):
    _agree(case)


# --------------------------------------------------------------------------- pinned examples

@checks("WSC-4")
def test_uneven_values_are_accepted_but_the_rank_must_fit():
    found, rejection = _agree(ConstraintCase(Arg.numpy((6, 3)), NamedSharding(MESH, P("y", "x"))))
    assert rejection is None and found[0].sharding.spec == P("y", "x")
    _, rejection = _agree(ConstraintCase(Arg.numpy((6, 3)),
                                         NamedSharding(MESH, P("y", "x", None))))
    assert rejection.rule == "WSC-4"


@checks("WSC-3")
def test_bare_specs_need_a_context_mesh():
    found, _ = _agree(ConstraintCase(Arg.numpy((8, 8)), P("x"), MESH))
    assert found[0].sharding == NamedSharding(MESH.abstract, P("x"))
    assert _agree(ConstraintCase(Arg.numpy((8, 8)), P("x")))[1].rule == "WSC-3"
    none, _ = _agree(ConstraintCase((Arg.numpy((8,)), Arg.numpy(())), (None, P())))
    # P() of the second leaf is refused at once (RuntimeError), before None (ValueError).
    assert spec_outcome(ConstraintCase((Arg.numpy((8,)), Arg.numpy(())), (None, P())))[1] \
        .failure.error_type is RuntimeError
    _, rejection = _agree(ConstraintCase(Arg.numpy((8,)), None))
    assert rejection.failure.error_type is ValueError
    assert _agree(ConstraintCase(Arg.numpy((8,)), P("z"), MESH))[1].rule == "NS-1"


@checks("WSC-1", "WSC-2")
def test_leaves_and_tree_prefix():
    assert _agree(ConstraintCase(Arg.numpy((8,)), "x", MESH))[1].rule == "WSC-1"
    pair = (Arg.numpy((8,)), Arg.numpy((8,)))
    assert _agree(ConstraintCase(pair, NamedSharding(MESH, P("x"))))[1] is None
    assert _agree(ConstraintCase(pair, (None,), MESH))[1].rule == "WSC-2"
    assert _agree(ConstraintCase(pair, [None, None], MESH))[1].rule == "WSC-2"


@checks("WSC-5", "WSC-6")
def test_auto_axes_explicit_assertion_and_unconstrained_dims():
    mixed = Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Auto, S.AxisType.Explicit))
    assert _agree(ConstraintCase(Arg.numpy((8,)), NamedSharding(mixed, P("y"))))[1].rule \
        == "WSC-5"
    found, _ = _agree(ConstraintCase(Arg.numpy((8, 8)), P(), EXPLICIT))
    assert not found[0].equation
    assert _agree(ConstraintCase(Arg.numpy((8, 8)), P("x"), EXPLICIT))[1].rule == "WSC-5"
    found, _ = _agree(ConstraintCase(Arg.numpy((8, 8)),
                                     NamedSharding(MESH, P(UNCONSTRAINED, "x"))))
    assert found[0].unconstrained_dims == frozenset({0})
    unreduced = NamedSharding(EXPLICIT, P(None, unreduced={"y"}))
    assert _agree(ConstraintCase(Arg.numpy((8, 8)), unreduced))[1].rule == "WSC-6"


@checks("WSC-7")
def test_vmap_inserts_the_batch_dimension():
    x = Arg.numpy((8, 8))
    cases = [
        (ConstraintCase(x, NamedSharding(MESH, P("x")), batch_dim=1), None),
        (ConstraintCase(x, NamedSharding(MESH, P(UNCONSTRAINED, "y")), batch_dim=1), None),
        (ConstraintCase(x, NamedSharding(M3, P(None, "o")), batch_dim=0), None),
        (ConstraintCase(x, NamedSharding(M3, P(("x", "o"), "y")), batch_dim=1), None),
        (ConstraintCase(x, NamedSharding(MESH, P("x")), batch_dim=1, spmd_axis_name="y"), None),
        (ConstraintCase(x, NamedSharding(M3, P(None, "x")), batch_dim=1,
                        spmd_axis_name=("y", "o")), None),
        (ConstraintCase(x, P(), MESH, batch_dim=1, spmd_axis_name="y"), None),
        (ConstraintCase(x, S.SingleDeviceSharding(2), batch_dim=1), None),
        (ConstraintCase(x, NamedSharding(MESH, P("x")), batch_dim=1, spmd_axis_name="x"),
         ValueError),
        (ConstraintCase(x, S.SingleDeviceSharding(2), batch_dim=1, spmd_axis_name="x"),
         ValueError),
        (ConstraintCase(x, S.SingleDeviceSharding(2), MESH, batch_dim=1, spmd_axis_name="x"),
         AttributeError),
        (ConstraintCase(Arg.numpy((1,)), NamedSharding(Mesh.iota((3,), ("x",)), P()),
                        Mesh.iota((1, 3), ("x", "y"), (S.AxisType.Auto, S.AxisType.Explicit)),
                        batch_dim=1), ValueError),
        (ConstraintCase(x, S.GSPMDSharding(MESH.devices,
                                           "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"),
                        batch_dim=1), KeyError),
    ]
    for case, refused in cases:
        _, rejection = _agree(case)
        if refused is None:
            assert rejection is None, case
        else:
            assert rejection.rule == "WSC-7" and isinstance(rejection, refused), case


@checks("WSC-9")
def test_results_come_back_as_constrained_but_unsplit_where_uneven():
    found, _ = _agree(ConstraintCase(Arg.numpy((6, 8)), NamedSharding(MESH, P("y", "x"))))
    assert S.constrained_result(found[0]).spec == P(None, "x")
    found, _ = _agree(ConstraintCase(Arg.numpy((8, 8)), P("y", "x"), MESH))
    assert S.constrained_result(found[0]) == NamedSharding(MESH, P("y", "x"))
    found, _ = _agree(ConstraintCase(Arg.numpy((0, 8)), NamedSharding(MESH, P("y", "x"))))
    assert S.constrained_result(found[0]).spec == P()
    # Of an uneven dimension's axes, the leading ones that still divide it stay.
    found, _ = _agree(ConstraintCase(Arg.numpy((4,)), NamedSharding(MESH, P(("x", "y")))))
    assert S.constrained_result(found[0]).spec == P("x")


@checks("WSC-8")
def test_under_jit_gspmd_constraints_lower_only_replicated_or_iota_tiled():
    x = Arg.numpy((8, 8))
    ok = S.GSPMDSharding(MESH.devices, "{devices=[2,4]<=[8]}")
    assert _agree(ConstraintCase(x, ok))[1] is None
    for hlo, devices in (("{maximal device=0}", [0]), ("{devices=[4,1]1,0,3,2}", [0, 1, 2, 3])):
        refused = S.GSPMDSharding(devices, hlo)
        assert _agree(ConstraintCase(x, refused))[1].rule == "WSC-8"
    # A tiling of one device: XLA aborts the process, so the harness only traces it.
    lone = S.GSPMDSharding([0], "{devices=[1,1]<=[1]}")
    assert _agree(ConstraintCase(x, lone))[1].failure.jax_error == "abort"


def test_under_jit_the_constraints_share_one_device_assignment():
    pair = (Arg.numpy((8,)), Arg.numpy((8,)))
    _, rejection = _agree(ConstraintCase(pair, (NamedSharding(MESH, P("x")),
                                                S.SingleDeviceSharding(0))))
    assert rejection.rule == "DA-1"
    _, rejection = _agree(ConstraintCase(Arg.numpy((8,)), S.SingleDeviceSharding(3), MESH))
    assert rejection.rule == "DA-1"


@checks("WSC-0")
@given(st.one_of(st.just("x"), st.integers(max_value=-1), st.integers(min_value=2),
                 st.just((1, 2)), st.just([[object()]])))
def test_descriptions_that_are_not_values_are_refused_by_wsc_0(hostile):
    """WSC-0 checks the description (JAX has no such value): values that are not Arg
    leaves, a context mesh that is not a Mesh, a batch dimension out of range."""
    good = Arg.numpy((8,))
    for call in (lambda: S.with_sharding_constraint(hostile, None, MESH),
                 lambda: S.with_sharding_constraint(good, None, hostile),
                 lambda: S.batch_constraint(S.with_sharding_constraint(good, None, MESH)[0],
                                            hostile)):
        with pytest.raises(S.Rejection) as refused:
            call()
        assert refused.value.rule == "WSC-0"
    assert S.with_sharding_constraint(good, None, MESH)[0].equation


# --------------------------------------------------------------------------- coverage

def test_every_wsc_rule_was_seen_on_both_sides_against_jax():
    """Runs last in this module: every WSC rule accepted and refused (and WSC-6's decision
    seen with and without dimensions left to the compiler, WSC-9's result placed as
    constrained and adjusted)."""
    missing = []
    hits = wsc_hit_counts()
    for rule_id in WSC_RULES:
        if rule_id in DESCRIPTION or rule_id in DECIDING:
            continue
        sides = hits.get(rule_id, (0, 0))
        if not (sides[0] and sides[1]):
            missing.append((rule_id, sides))
    dims = hits.get("WSC-6 dims", (0, 0))
    if not (dims[0] and dims[1]):
        missing.append(("WSC-6 with and without UNCONSTRAINED dims", dims))
    result = hits.get("WSC-9 result", (0, 0))
    if not (result[0] and result[1]):
        missing.append(("WSC-9 placed as constrained, and adjusted", result))
    assert not missing, f"rules not seen on both sides against JAX: {missing}"
