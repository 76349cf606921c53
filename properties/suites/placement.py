"""The spec against JAX 0.10.2, example for example (properties/differential.py).

Every property builds an input in the spec's terms, asks the spec and JAX the same question
and fails on any disagreement. Each names the rules it exercises; the last test prints the
harness's per-rule hit counts (shown with ``pytest -s``) and checks that every named rule
was seen both accepting and rejecting, and that each rejecting side refused through
another rule's failure was held to JAX's behaviour on the same input. A fixed set of
examples runs first (``test_00_fixed_examples``), so that the check holds whatever order
or subset of the properties ran before it.

Part of the ``placement`` suite of ``shardlaw campaign``; ``tests/test_differential.py``
runs it in the project's own ``pytest`` run.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, strategies as st

jax = pytest.importorskip("jax")

from shardlaw.properties import differential as D  # noqa: E402
from shardlaw.properties.registry import checks  # noqa: E402
from shardlaw.spec import (  # noqa: E402
    UNCONSTRAINED, AbstractMesh, AxisType, GSPMDSharding, Manual, Maximal, Mesh, NamedSharding,
    P, SingleDeviceSharding, SubgroupType, Tiled, Unreduced, iota_tile, parse_hlo, shard_shape,
    to_hlo,
)
from shardlaw.spec.core.rules import Rejection  # noqa: E402
from shardlaw.spec.core.shardings import UNSPECIFIED  # noqa: E402

from shardlaw.properties import strategies as S  # noqa: E402

NUM_DEVICES = 8
R, M, U = SubgroupType.REPLICATED, SubgroupType.MANUAL, SubgroupType.UNREDUCED


def _agree(problems: list[str]) -> None:
    assert not problems, "the spec disagrees with JAX:\n" + "\n".join(problems)


# Regressions: disagreements these properties found, since fixed in the spec.

def test_regression_manual_and_unreduced_are_not_replicated():
    """{manual} and {unreduced} over two devices do not act replicated."""
    _agree(D.compare_placement(GSPMDSharding([0, 1], parse_hlo("{manual}")), (4,))
           + D.compare_placement(GSPMDSharding([0, 1], parse_hlo("{unreduced}")), (4,)))


def test_regression_gspmd_maximal_needs_rank_one():
    """A GSPMDSharding with a maximal HLO sharding needs a value of rank at least 1."""
    _agree(D.compare_placement(GSPMDSharding([0], parse_hlo("{maximal device=0}")), ()))


def test_regression_replica_ids_with_empty_dimension():
    """Devices holding different (empty) boxes are not replicas of each other."""
    _agree(D.compare_placement(NamedSharding(Mesh.iota((2,), ("x",)), P("x")), (2, 0)))


def test_regression_tiled_collapses_without_data_tiling():
    """Subgroups that merge to one kind, with no data tiling, collapse to the plain kind."""
    _agree(D.compare_iota_tile((1, 1), None, None, (R, R))
           + D.compare_iota_tile((1, 1, 2), None, None, (U, U)))


def test_regression_lone_unreduced_subgroup_collapses():
    """Unreduced plus a size-1 replicated subgroup, no data tiling, is {unreduced} in XLA."""
    _agree(D.compare_iota_tile((1, 2, 1), None, None, (U, R)))


def test_regression_single_device_explicit_list_text_is_refused():
    """XLA's parser refuses an explicit tile assignment over one device."""
    _agree(D.compare_hlo_text("{devices=[1]0}") + D.compare_hlo_text("{devices=[1,1]0}"))


def test_regression_abstract_mesh_checks_divisibility_first():
    """On an abstract mesh JAX reports an indivisible shape before the missing devices."""
    _agree(D.compare_placement(NamedSharding(AbstractMesh((2,), ("y",)), P("y")), (1,)))


def test_regression_abstract_mesh_checks_unreduced_first():
    """On an abstract mesh JAX reports unreduced axes before the missing devices."""
    mesh = AbstractMesh((2,), ("x",), (AxisType.Explicit,))
    _agree(D.compare_placement(NamedSharding(mesh, P(unreduced={"x"})), ()))


def test_regression_parse_hlo_text_xla_refuses_or_rewrites():
    """Text without tile dims is refused; non-canonical text reads to XLA's canonical form."""
    _agree(D.compare_hlo_text("{devices=[]<=[1]}")
           + D.compare_hlo_text("{devices=[2,2]<=[4] last_tile_dims={replicated, manual}}")
           + D.compare_hlo_text("{devices=[4]<=[2,2]T(1,0) last_tile_dim_replicate}"))


# --------------------------------------------------------------------------- inputs

@st.composite
def _shapes(draw, sharding):
    """A shape for ``sharding``, one time in six a rank too small (the rank rule's other side)."""
    shape = draw(S.shapes_for(sharding))
    if shape and draw(st.integers(0, 5)) == 0:
        return shape[:-1]
    return shape


@st.composite
def _axis_sizes(draw):
    return draw(S.factorizations(draw(st.sampled_from([1, 2, 4, 6, 8])), draw(st.integers(1, 3))))


# --------------------------------------------------------------------------- fixed examples
#
# Each rule's accepting and rejecting side, by a known example, so that the coverage check
# at the end does not depend on which properties ran or what they drew.

_m24 = Mesh.iota((2, 4), ("x", "y"))
_m24_permuted = Mesh((2, 4), ("x", "y"), [0, 2, 1, 3, 4, 6, 5, 7])
_m24_manual = Mesh.iota((2, 4), ("x", "y"), (AxisType.Manual, AxisType.Auto))
_m24_explicit = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit, AxisType.Explicit))

FIXED_PLACEMENT = [
    (NamedSharding(_m24, P("x", "y")), (8, 8)),
    (NamedSharding(_m24, P("x", "y")), (7, 8)),            # DIV-1 rejects
    (NamedSharding(_m24, P("x", "y")), (8,)),              # NS-5 rejects (JAX: IndexError)
    (NamedSharding(_m24, P("x", None, None)), (4, 4)),
    (NamedSharding(_m24_permuted, P("x")), (8,)),
    (NamedSharding(_m24, P()), (3,)),
    (NamedSharding(_m24_manual, P("x")), (8,)),            # LOW-2 rejects
    (NamedSharding(_m24_manual, P()), (8,)),               # IDX-1 rejects (manual)
    (NamedSharding(AbstractMesh((2, 4), ("x", "y")), P("x")), (8,)),
    (GSPMDSharding(range(8), iota_tile((4,))), (8,)),      # DEV-1 rejects
    (GSPMDSharding([0, 1], parse_hlo("{maximal device=1}")), (4,)),
    (SingleDeviceSharding(3), (2, 2)),
]

FIXED_EQUIVALENCE = [
    (NamedSharding(_m24, P("x", "y")), GSPMDSharding(range(8), iota_tile((2, 4))), 2),
    (NamedSharding(_m24, P()), NamedSharding(_m24_permuted, P()), 2),
    (NamedSharding(_m24, P("x")), NamedSharding(_m24, P("y")), 1),
]

FIXED_PLACEMENT_EQUIVALENCE = [
    (NamedSharding(_m24, P()), NamedSharding(_m24_permuted, P()), (4, 4)),
    (NamedSharding(_m24, P("x")), NamedSharding(_m24, P("y")), (8,)),
]

FIXED_NAMED = [
    (_m24, P("x")), (_m24, P("z")), (_m24, P("x", "x")), (_m24, P(UNCONSTRAINED)),
    (_m24_explicit, P(UNCONSTRAINED)), (_m24_explicit, P(unreduced={"x"})),
    (_m24, P(unreduced={"x"})),
]

FIXED_IOTA = [((2, 4), (4, 2), (1, 0), ()), ((2, 4), (3, 3), (1, 0), ()),
              ((2, 2, 2), (8,), (0,), (R, M))]

FIXED_HLO_TEXT = ["{devices=[2,4]<=[4,2]T(1,0)}", "{devices=[2,2]0,2,1,3}", "{replicated}",
                  "{devices=[2]0,1 last_tile_dims={bogus}}", "{maximal device=x}",
                  None, b"{replicated}"]  # not text: XLA's binding refuses with TypeError

# The rejecting sides of LOW-1, DIV-2, IDX-2 and HLO-3, each held to its Refusal.
FIXED_LOWERING = [(object(), 1), (P("x"), 1), (_m24, 2), (parse_hlo("{replicated}"), 0),
                  (NamedSharding(_m24, P("x")), 1)]
FIXED_TILES = [(NamedSharding(_m24_manual, P()), 1),                  # JAX: NotImplementedError
               (GSPMDSharding(range(8), parse_hlo("{manual}")), 1),   # JAX: AssertionError
               (NamedSharding(_m24, P("y")), 2)]
FIXED_REPLICA_IDS = [(SingleDeviceSharding(3), (4,), 2), (SingleDeviceSharding(3), (4,), 3),
                     (NamedSharding(Mesh.iota((2,), ("x",)), P("x")), (4,), 5),
                     (NamedSharding(_m24_permuted, P("x")), (8,), 2)]
FIXED_NOT_HLO = ["{replicated}", None, NamedSharding(_m24, P()), parse_hlo("{maximal device=3}")]


def _fixed_examples() -> list[str]:
    problems = []
    for s, shape in FIXED_PLACEMENT:
        problems += D.compare_placement(s, shape)
    for a, b, ndim in FIXED_EQUIVALENCE:
        problems += D.compare_equivalence(a, b, ndim)
    for a, b, shape in FIXED_PLACEMENT_EQUIVALENCE:
        problems += D.compare_placement_equivalence(a, b, shape)
    for mesh, spec in FIXED_NAMED:
        problems += D.compare_named_sharding(mesh, spec)
    problems += D.compare_named_sharding(_m24, P("x"), memory_kind="pinned_host")
    problems += D.compare_named_sharding(_m24, P("x"), memory_kind="bogus")
    for dims, reshape, perm, subgroups in FIXED_IOTA:
        problems += D.compare_iota_tile(dims, reshape, perm, subgroups)
    for text in FIXED_HLO_TEXT:
        problems += D.compare_hlo_text(text)
    for value, ndim in FIXED_LOWERING:
        problems += D.compare_lowering(value, ndim)
    for s, ndim in FIXED_TILES:
        problems += D.compare_tiles_per_dimension(s, ndim)
    for s, shape, device in FIXED_REPLICA_IDS:
        problems += D.compare_replica_id(s, shape, device)
    for value in FIXED_NOT_HLO:
        problems += D.compare_hlo_text_of(value)
    problems += D.compare_construction("Mesh with 1 name for 2 axes", lambda: Mesh.iota((2, 4), ("x",)),
                                       lambda: jax.sharding.Mesh(_jax_devices((2, 4)), ("x",)),
                                       validated_by=("VAL-4",))
    problems += D.compare_construction("Mesh", lambda: Mesh.iota((2, 4), ("x", "y")),
                                       lambda: jax.sharding.Mesh(_jax_devices((2, 4)), ("x", "y")),
                                       validated_by=("VAL-4",))
    problems += D.compare_construction("P('x', unreduced={'x'})", lambda: P("x", unreduced={"x"}),
                                       lambda: jax.sharding.PartitionSpec("x", unreduced={"x"}),
                                       validated_by=("VAL-6",))
    problems += D.compare_construction("P('x', unreduced={'y'})", lambda: P("x", unreduced={"y"}),
                                       lambda: jax.sharding.PartitionSpec("x", unreduced={"y"}),
                                       validated_by=("VAL-6",))
    return problems


def _jax_devices(sizes):
    import numpy as np
    return np.array(jax.devices()[: math.prod(sizes)]).reshape(sizes)


def test_00_fixed_examples():
    """Known examples of every rule's two sides agree with JAX."""
    _agree(_fixed_examples())


# --------------------------------------------------------------------------- the bridge

@given(st.one_of(S.shardings(max_devices=NUM_DEVICES),
                 S.named_shardings(max_devices=NUM_DEVICES, abstract=True)))
def test_bridge_round_trips(s):
    """from_jax(to_jax(s)) is s, for every sharding the spec can build (and its parts)."""
    from shardlaw.spec import from_jax, to_jax
    assert from_jax(to_jax(s)) == s
    if isinstance(s, NamedSharding):
        assert from_jax(to_jax(s.mesh)) == s.mesh
        assert from_jax(to_jax(s.spec)) == s.spec


# --------------------------------------------------------------------------- placement

@checks("LOW-1", "LOW-2", "NS-5", "DIV-1", "DIV-2", "IDX-1", "IDX-2", "REP-1", "DEV-1")
@given(st.data())
def test_placement_agrees_with_jax(data):
    """Lowering, shard shape, boxes, replica ids, replication and rank agree with JAX."""
    s = data.draw(S.shardings(max_devices=NUM_DEVICES), label="sharding")
    shape = data.draw(_shapes(s), label="shape")
    _agree(D.compare_placement(s, shape))


@checks("LOW-1", "LOW-2", "NS-5", "DIV-1", "DIV-2", "IDX-1", "IDX-2", "REP-1")
@given(st.data())
def test_named_placement_agrees_with_jax(data):
    """The same, for NamedShardings over meshes of every axis type and device order."""
    s = data.draw(S.named_shardings(max_devices=NUM_DEVICES, abstract=data.draw(
        st.integers(0, 7).map(lambda k: k == 0))), label="sharding")
    shape = data.draw(_shapes(s), label="shape")
    _agree(D.compare_placement(s, shape))


@checks("LOW-1", "DIV-1", "DIV-2", "IDX-1", "IDX-2", "REP-1", "DEV-1", "NS-5")
@given(st.data())
def test_gspmd_placement_agrees_with_jax(data):
    """The same, for GSPMDShardings over arbitrary HLO shardings and device lists."""
    s = data.draw(S.gspmd_shardings(max_devices=NUM_DEVICES, subgroup_kinds=tuple(SubgroupType)),
                  label="sharding")
    shape = data.draw(_shapes(s), label="shape")
    _agree(D.compare_placement(s, shape))


# --------------------------------------------------------------------------- equivalence

@checks("EQ-1", "EQ-3")
@given(S.sharding_pairs(max_devices=NUM_DEVICES), st.integers(-1, 1))
def test_jax_equivalence_agrees_with_jax(pair, rank_change):
    """jax_equivalent and hlo_equal answer as is_equivalent_to and are_hlo_shardings_equal."""
    a, b, shape = pair
    ndim = max(0, len(shape) + rank_change)
    _agree(D.compare_equivalence(a, b, ndim))


@checks("EQ-2")
@given(st.data())
def test_placement_equivalence_agrees_with_jax_boxes(data):
    """placement_equivalent is what comparing JAX's devices_indices_map of both shows."""
    a, b, shape = data.draw(S.sharding_pairs(max_devices=NUM_DEVICES), label="pair")
    _agree(D.compare_placement_equivalence(a, b, shape))


@checks("EQ-2")
def test_placement_equivalence_of_an_unreduced_sharding_on_other_devices():
    """Found by the property above: with device counts that differ, the spec answered False
    where JAX's devices_indices_map first refuses the unreduced sharding (IDX-1)."""
    one = NamedSharding(Mesh.iota((1,), ("x",)), P())
    unreduced = NamedSharding(Mesh.iota((2,), ("x",), axis_types=(AxisType.Explicit,)),
                              P(unreduced={"x"}))
    _agree(D.compare_placement_equivalence(one, unreduced, ()))
    _agree(D.compare_placement_equivalence(unreduced, one, (4,)))


# --------------------------------------------------------------------------- HLO shardings

@st.composite
def _iota_tile_inputs(draw):
    n = draw(st.sampled_from([1, 2, 4, 6, 8]))
    dims = draw(S.factorizations(n, draw(st.integers(1, 4))))
    kinds = tuple(draw(st.sampled_from([R, M, U])) for _ in range(draw(st.integers(0, 3))))
    assume(len(kinds) <= len(dims))
    if draw(st.integers(0, 5)) == 0:  # no reshape: the plain range
        return dims, None, None, kinds
    reshape = draw(S.factorizations(n, draw(st.integers(1, 3))))
    if draw(st.integers(0, 7)) == 0:  # a reshape that does not fit: both refuse it
        reshape = reshape + (draw(st.sampled_from([2, 3])),)
    perm = tuple(draw(st.permutations(range(len(reshape)))))
    return dims, reshape, perm, kinds


@checks("HLO-1")
@given(_iota_tile_inputs())
def test_iota_tile_agrees_with_xla(args):
    """iota_tile builds the canonical sharding xc.HloSharding.iota_tile builds."""
    _agree(D.compare_iota_tile(*args))


@checks("HLO-2", "HLO-3")
@given(st.data())
def test_hlo_text_agrees_with_xla(data):
    """A spec HLO sharding prints as XLA prints it, and its text reads back the same in both."""
    n = data.draw(st.sampled_from([1, 2, 4, 8]), label="devices")
    hlo = data.draw(S.hlo_shardings(n, subgroup_kinds=tuple(SubgroupType)), label="hlo")
    problems = D.compare_hlo_value(hlo)
    problems += D.compare_hlo_text(str(hlo))
    _agree(problems)


_BAD_TEXT = st.sampled_from([
    "replicated", "{replicated", "{devices=[2]0,1 last_tile_dims={bogus}}",
    "{maximal device=x}", "{devices=[2,2]<=[4]T(1,0)}", "{devices=[]<=[1]}", "{tiled}",
    "{devices=[2,2]0,1,2,3 last_tile_dims=}",
])


@checks("HLO-2")
@given(_BAD_TEXT)
def test_malformed_hlo_text_is_refused_by_both(text):
    """Text XLA cannot read, the spec refuses too."""
    _agree(D.compare_hlo_text(text))


# --------------------------------------------------------------------------- rejecting sides

def _plain_values():
    """Python values that are neither a sharding nor an HLO sharding."""
    return st.sampled_from([None, 0, 3, 1.5, True, "sharding", "{replicated}", b"{replicated}",
                            (), ("x",), [0, 1], {"x": 1}, object(), UNSPECIFIED])


def _spec_values_that_are_not_shardings():
    """Spec values that stand near a sharding but are none: meshes, specs, devices, HLO shardings."""
    return st.one_of(
        S.meshes(max_devices=NUM_DEVICES),
        S.meshes(max_devices=NUM_DEVICES, abstract=True),
        S.meshes(max_devices=NUM_DEVICES).flatmap(S.partition_specs),
        S.devices(max_id=NUM_DEVICES - 1),
        st.sampled_from([1, 2, 4, 8]).flatmap(
            lambda n: S.hlo_shardings(n, subgroup_kinds=tuple(SubgroupType))))


@checks("LOW-1")
@given(st.one_of(S.shardings(max_devices=NUM_DEVICES), _plain_values(),
                 _spec_values_that_are_not_shardings()), st.integers(0, 3))
def test_lowering_agrees_with_jax_on_any_value(value, ndim):
    """to_hlo lowers what JAX lowers; what JAX has no lowering for, the spec refuses (LOW-1 citing VAL-8)."""
    _agree(D.compare_lowering(value, ndim))


@checks("DIV-2", "IDX-2")
@given(st.data())
def test_tiles_and_replica_ids_agree_with_jax(data):
    """tiles_per_dimension and replica_id answer or refuse as JAX does, manual shardings and
    devices outside the sharding included."""
    s = data.draw(st.one_of(
        S.shardings(max_devices=NUM_DEVICES),
        S.gspmd_shardings(max_devices=NUM_DEVICES, subgroup_kinds=tuple(SubgroupType))),
        label="sharding")
    shape = data.draw(_shapes(s), label="shape")
    device = data.draw(st.integers(0, NUM_DEVICES - 1), label="device")
    _agree(D.compare_tiles_per_dimension(s, len(shape)) + D.compare_replica_id(s, shape, device))


@checks("HLO-3")
@given(st.one_of(st.sampled_from([1, 2, 4, 8]).flatmap(
                     lambda n: S.hlo_shardings(n, subgroup_kinds=tuple(SubgroupType))),
                 _plain_values(), S.shardings(max_devices=NUM_DEVICES),
                 S.meshes(max_devices=NUM_DEVICES)))
def test_hlo_text_agrees_with_xla_on_any_value(value):
    """hlo_text prints what XLA's printer prints, and refuses (TypeError) what it refuses."""
    _agree(D.compare_hlo_text_of(value))


# --------------------------------------------------------------------------- validity

@checks("NS-1", "NS-2", "NS-3", "NS-4")
@given(st.data())
def test_named_sharding_validity_agrees_with_jax(data):
    """NamedSharding(mesh, spec) is refused by the spec exactly when JAX refuses it, with the same exception class."""
    mesh = data.draw(S.meshes(max_devices=NUM_DEVICES, abstract=data.draw(st.booleans())),
                     label="mesh")
    spec = data.draw(st.one_of(S.partition_specs(mesh), S.invalid_partition_specs(mesh)),
                     label="spec")
    _agree(D.compare_named_sharding(mesh, spec))


@checks("VAL-7")
@given(st.data())
def test_memory_kinds_agree_with_jax(data):
    """A memory kind is accepted exactly when JAX's CPU devices have it."""
    mesh = data.draw(S.meshes(max_devices=NUM_DEVICES), label="mesh")
    kind = data.draw(st.sampled_from(["device", "pinned_host", "unpinned_host", "bogus",
                                      "DEVICE", None]), label="memory_kind")
    _agree(D.compare_named_sharding(mesh, P(), memory_kind=kind))


@checks("VAL-4")
@given(st.data())
def test_mesh_axis_counts_agree_with_jax(data):
    """A mesh has one name and one axis type per axis, in both."""
    sizes = data.draw(_axis_sizes(), label="sizes")
    names = ("x", "y", "z", "w")[: data.draw(st.integers(1, 4), label="name count")]
    types = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(list(AxisType)),
                                                     min_size=1, max_size=4)), label="types")
    types = None if types is None else tuple(types)
    n = math.prod(sizes)

    def by_jax():
        import numpy as np
        devices = np.array(jax.devices()[:n]).reshape(sizes)
        jtypes = None if types is None else tuple(
            getattr(jax.sharding.AxisType, t.value) for t in types)
        return jax.sharding.Mesh(devices, names, axis_types=jtypes)

    _agree(D.compare_construction(f"Mesh({sizes}, {names}, {types})",
                                  lambda: Mesh.iota(sizes, names, types), by_jax,
                                  validated_by=("VAL-4",)))


@checks("VAL-6")
@given(st.lists(st.sampled_from([None, "x", "y", ("x", "y")]), max_size=3),
       st.sets(st.sampled_from(["x", "y", "z"])), st.sets(st.sampled_from(["x", "y", "z"])))
def test_partition_spec_overlaps_agree_with_jax(entries, unreduced, reduced):
    """An axis is a partition, unreduced or reduced, never two of these, in both."""
    _agree(D.compare_construction(
        f"P(*{entries}, unreduced={unreduced}, reduced={reduced})",
        lambda: P(*entries, unreduced=unreduced, reduced=reduced),
        lambda: jax.sharding.PartitionSpec(*entries, unreduced=unreduced, reduced=reduced),
        validated_by=("VAL-6",)))


# --------------------------------------------------------------------------- coverage

# The rules each property names, which must have been seen on both sides.
BOTH_SIDES = ["LOW-1", "LOW-2", "NS-5", "DIV-1", "DIV-2", "IDX-1", "IDX-2", "REP-1", "DEV-1",
              "EQ-1", "EQ-2", "EQ-3", "HLO-1", "HLO-2", "HLO-3", "NS-1", "NS-2", "NS-3", "NS-4",
              "VAL-4", "VAL-6", "VAL-7"]
# Rejecting sides that are refused by another rule's failure, each of which must have been
# held against JAX's behaviour on the same input.
REFUSALS = [D.NOT_A_SHARDING, D.MANUAL_HAS_NO_TILES, D.NOT_ON_DEVICE, D.NOT_AN_HLO_VALUE]


def test_zz_every_rule_seen_on_both_sides():
    """Over this session's comparisons, every rule named above accepted and rejected.

    The per-rule table is printed first (``pytest -s`` shows it): it covers whatever ran in
    this session before this test. The fixed examples then run again, so the check holds
    whatever ran before it.
    """
    print("\n\nPer-rule hit counts of the differential comparisons in this session:\n"
          + D.hit_table())
    if D.INTERNAL_AGREEMENTS:
        print("\nJAX crashes matched by a spec rejection (JAX error, spec rule): "
              + ", ".join(f"{j} / {r}: {n}" for (j, r), n in sorted(D.INTERNAL_AGREEMENTS.items())))
    _fixed_examples()
    hits = D.hit_counts()
    missing = [f"{r} {side}" for r in BOTH_SIDES for side in ("accept", "reject")
               if not hits[(r, side)]]
    missing += [f"{r.by} refusing with {r.rule} (held to JAX)" for r in REFUSALS
                if not D.REFUSALS_COMPARED[(r.by, r.rule)]]
    assert not missing, f"never seen: {missing}; hits: {sorted(hits.items())}"
