"""Laws the specification obeys, as Hypothesis properties.

Each property names the rules it exercises with :func:`checks`; ``tests/test_laws.py``
imports them so that pytest runs them. Example counts come from the active Hypothesis
profile; only slow properties lower theirs.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shardlaw.properties.registry import checks
from shardlaw.properties.strategies import (
    hlo_shardings, iotas, named_shardings, rank_needed, shapes_for, sharding_pairs,
    sharding_triples, shardings,
)
from shardlaw.spec import (
    AxisType, Iota, Manual, Maximal, Mesh, NamedSharding, P, Rejection, SubgroupType, box_of, devices_indices_map,
    hlo_equal, hlo_text, jax_equivalent, num_devices, parse_hlo, placement_equivalent,
    Replicated, Tiled, Unreduced, replica_id, replication_factor, shard_shape, to_hlo, tracing,
)

__all__ = [
    "test_jax_equivalence_is_reflexive", "test_jax_equivalence_is_symmetric",
    "test_jax_equivalence_is_transitive", "test_jax_equivalence_is_reflexive_on_abstract_meshes",
    "test_placement_equivalence_is_reflexive",
    "test_placement_equivalence_is_symmetric", "test_placement_equivalence_is_transitive",
    "test_jax_equivalence_implies_placement_equivalence", "test_hlo_text_round_trips",
    "test_index_map_tiles_the_array", "test_manual_and_unreduced_are_not_replicated",
    "test_a_fully_manual_sharding_holds_no_boxes", "test_replica_id_with_an_empty_dimension_counts_equal_boxes", "test_symbolic_placement_agrees_with_enumeration",
    "test_box_of_is_one_entry_of_the_index_map", "test_iota_position_inverts_lookup",
    "test_iota_enumerates_reshape_transpose", "test_iota_equality_is_sequence_equality",
    "test_tracing_records_the_rules_that_fire",
]

# The largest array whose elements the index-map law counts one by one.
MAX_ELEMENTS = 512


def _placed(sharding: Any, shape: tuple[int, ...]) -> bool:
    """Whether devices hold boxes of ``shape`` under ``sharding`` (no manual, no unreduced)."""
    try:
        # A manual sharding holds no boxes (regression: the spec once placed it replicated).
        if isinstance(to_hlo(sharding, len(shape)), Manual):
            return False
        devices_indices_map(sharding, shape)
    except Rejection:
        return False
    return True


def _by_enumeration(a: Any, b: Any, shape: tuple[int, ...]) -> bool:
    """EQ-2 device by device, for shardings both placed: every device (its id on its
    platform) holds the same box under both, in the same memory kind."""
    platforms = {d.platform for s in (a, b) for d in s.device_list}
    same_boxes = len(platforms) == 1 and \
        devices_indices_map(a, shape) == devices_indices_map(b, shape)
    return same_boxes and a.memory_kind == b.memory_kind


def _rank(a: Any, b: Any = None) -> int:
    return max(rank_needed(s)[0] for s in (a, b) if s is not None)


# --------------------------------------------------------------------------- JAX-equivalence

@checks("EQ-1", "EQ-3", "LOW-1")
@given(shardings(), st.integers(0, 2))
def test_jax_equivalence_is_reflexive(s, extra):
    """Every sharding is JAX-equivalent to itself, for every rank it accepts."""
    needed, exact = rank_needed(s)
    assert jax_equivalent(s, s, needed + (0 if exact else extra))


@checks("EQ-1")
@given(named_shardings(abstract=True), st.integers(0, 1))
def test_jax_equivalence_is_reflexive_on_abstract_meshes(s, extra):
    """A sharding over an abstract mesh is JAX-equivalent to itself."""
    assert jax_equivalent(s, s, len(s.spec) + extra)


@checks("EQ-1", "EQ-3")
@given(sharding_pairs())
def test_jax_equivalence_is_symmetric(pair):
    a, b, shape = pair
    assert jax_equivalent(a, b, len(shape)) == jax_equivalent(b, a, len(shape))


@checks("EQ-1", "EQ-3")
@given(sharding_triples())
def test_jax_equivalence_is_transitive(triple):
    a, b, c, shape = triple
    n = len(shape)
    if jax_equivalent(a, b, n) and jax_equivalent(b, c, n):
        assert jax_equivalent(a, c, n)


# --------------------------------------------------------------------------- placement-equivalence

@checks("EQ-2", "IDX-1")
@given(shardings().flatmap(lambda s: st.tuples(st.just(s), shapes_for(s, divisible=True))))
def test_placement_equivalence_is_reflexive(case):
    s, shape = case
    assume(_placed(s, shape))
    assert placement_equivalent(s, s, shape)


@checks("EQ-2")
@given(sharding_pairs())
def test_placement_equivalence_is_symmetric(pair):
    a, b, shape = pair
    assume(_placed(a, shape) and _placed(b, shape))
    assert placement_equivalent(a, b, shape) == placement_equivalent(b, a, shape)


@checks("EQ-2")
@given(sharding_triples())
def test_placement_equivalence_is_transitive(triple):
    a, b, c, shape = triple
    assume(all(_placed(s, shape) for s in (a, b, c)))
    if placement_equivalent(a, b, shape) and placement_equivalent(b, c, shape):
        assert placement_equivalent(a, c, shape)


@checks("EQ-1", "EQ-2", "EQ-3", "LOW-1")
@given(sharding_pairs())
def test_jax_equivalence_implies_placement_equivalence(pair):
    """Equal HLO shardings over equal device lists place every box on the same device."""
    a, b, shape = pair
    assume(_placed(a, shape) and _placed(b, shape))
    if jax_equivalent(a, b, len(shape)):
        assert placement_equivalent(a, b, shape)


@checks("EQ-2", "IDX-1")
@given(sharding_pairs())
def test_symbolic_placement_agrees_with_enumeration(pair):
    """The symbolic decision of placement-equivalence is the device-by-device comparison."""
    a, b, shape = pair
    assume(_placed(a, shape) and _placed(b, shape))
    assert placement_equivalent(a, b, shape) == _by_enumeration(a, b, shape)


# --------------------------------------------------------------------------- HLO text

@checks("HLO-1", "HLO-2", "HLO-3", "EQ-3")
@given(st.integers(1, 16).flatmap(
    lambda n: hlo_shardings(n, max_rank=4, subgroup_kinds=tuple(SubgroupType))))
def test_hlo_text_round_trips(h):
    """Printing, reading back and printing again gives the same text and an equal value."""
    text = hlo_text(h)
    # XLA prints an explicit one-device assignment as {devices=[1]0} but cannot read it.
    assume(not (isinstance(h, Tiled) and h.num_devices == 1
                and not isinstance(h.assignment, Iota)))
    back = parse_hlo(text)
    # Read-back text is a fixed point of print-then-read.
    assert hlo_text(parse_hlo(hlo_text(back))) == hlo_text(back)
    # XLA itself prints a lone unreduced subgroup without data tiling as a tiled sharding
    # (iota_tile([1,1,2], [R, U])) but reads that text back as {unreduced}.
    lone_unreduced = (isinstance(h, Tiled) and all(n == 1 for n in h.tiles)
                      and h.subgroups == (SubgroupType.UNREDUCED,))
    if not lone_unreduced:
        assert hlo_text(back) == text
        assert back == h
        assert hlo_equal(back, h)


# --------------------------------------------------------------------------- index maps

def _contains(box: tuple, point: tuple[int, ...]) -> bool:
    return all(lo <= x < hi for (lo, hi), x in zip(box, point))


def _disjoint(a: tuple, b: tuple) -> bool:
    return any(ahi <= blo or bhi <= alo for (alo, ahi), (blo, bhi) in zip(a, b))


@checks("IDX-1", "IDX-2", "DIV-1", "DIV-2", "DEV-1")
@given(shardings().flatmap(lambda s: st.tuples(st.just(s), shapes_for(s, divisible=True))))
def test_index_map_tiles_the_array(case):
    """Devices hold equal boxes of shard_shape that tile the array, each held as often as the replication factor says, with replica ids 0..r-1 in device order."""
    s, shape = case
    assume(_placed(s, shape))
    boxes = devices_indices_map(s, shape)
    piece = shard_shape(s, shape)
    assert len(boxes) == num_devices(s)
    # Every box has the extent of shard_shape.
    for box in boxes.values():
        assert tuple(hi - lo for lo, hi in box) == piece
    # Boxes are disjoint or equal.
    distinct = list(dict.fromkeys(boxes.values()))
    for x, y in itertools.combinations(distinct, 2):
        assert _disjoint(x, y)
    # Every element is held by the same number of devices: the replication factor. (JAX
    # reports a factor of 1 for a maximal HLO sharding whose every device holds everything.)
    holders = {box: sum(1 for b in boxes.values() if b == box) for box in distinct}
    hlo_is_maximal = isinstance(getattr(s, "hlo", None), Maximal)
    expected = len(boxes) if hlo_is_maximal else replication_factor(s, len(shape))
    if math.prod(shape) <= MAX_ELEMENTS:
        for point in itertools.product(*map(range, shape)):
            held = sum(1 for box in boxes.values() if _contains(box, point))
            assert held == expected, (point, held, expected)
    if math.prod(shape):
        assert set(holders.values()) == {expected}
    # The copies of each box have replica ids 0..r-1, in device-list order.
    order = list(s.device_list.ids())
    for box in distinct:
        owners = [d for d in order if boxes[d] == box]
        assert [replica_id(s, shape, d) for d in owners] == list(range(len(owners)))


def test_replica_id_with_an_empty_dimension_counts_equal_boxes():
    """JAX 0.10.2: NamedSharding(Mesh((2,), ('x',)), P('x')) on shape (2, 0) has replica ids 0, 0."""
    s = NamedSharding(Mesh.iota((2,), ("x",)), P("x"))
    assert [replica_id(s, (2, 0), d) for d in range(2)] == [0, 0]


def test_manual_and_unreduced_are_not_replicated():
    """JAX 0.10.2: are_hlo_shardings_equal(manual, replicate) and (unreduced, replicate) are False."""
    assert not hlo_equal(Manual(), Replicated())
    assert not hlo_equal(Unreduced(), Replicated())


def test_a_fully_manual_sharding_holds_no_boxes():
    """JAX 0.10.2 refuses devices_indices_map for a fully manual NamedSharding (as the spec does
    for a partly manual one, with IDX-1)."""
    s = NamedSharding(Mesh.iota((2,), ("x",), (AxisType.Manual,)), P())
    with pytest.raises(Rejection):
        devices_indices_map(s, (2,))


@checks("IDX-1", "IDX-2")
@given(shardings().flatmap(lambda s: st.tuples(st.just(s), shapes_for(s, divisible=True))))
def test_box_of_is_one_entry_of_the_index_map(case):
    """box_of answers for one device what devices_indices_map answers for all."""
    s, shape = case
    assume(_placed(s, shape))
    boxes = devices_indices_map(s, shape)
    for d, box in boxes.items():
        assert box_of(s, shape, d) == box


# --------------------------------------------------------------------------- iota

def _brute_iota(dims: tuple[int, ...], perm: tuple[int, ...]) -> list[int]:
    """``arange(prod(dims)).reshape(dims).transpose(perm).flatten()``, by hand."""
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    new_dims = [dims[p] for p in perm]
    return [sum(c * strides[p] for c, p in zip(coords, perm))
            for coords in itertools.product(*map(range, new_dims))]


_iota_descriptions = st.lists(st.integers(1, 4), min_size=1, max_size=4).flatmap(
    lambda dims: st.tuples(st.just(tuple(dims)), st.permutations(range(len(dims)))))


@checks("VAL-1", "VAL-2")
@given(st.integers(1, 64).flatmap(iotas))
def test_iota_position_inverts_lookup(order):
    for position in range(len(order)):
        assert order.position_of(order[position]) == position


@checks("VAL-1", "VAL-2")
@given(_iota_descriptions)
def test_iota_enumerates_reshape_transpose(description):
    """The canonical form enumerates the sequence its description names."""
    dims, perm = description
    order = Iota(dims, tuple(perm))
    assert order.to_tuple() == tuple(_brute_iota(dims, tuple(perm)))
    assert len(order) == math.prod(dims)
    assert Iota(order.reshape_dims, order.perm) == order


@checks("VAL-1", "VAL-2")
@given(_iota_descriptions, _iota_descriptions)
def test_iota_equality_is_sequence_equality(first, second):
    a, b = Iota(first[0], tuple(first[1])), Iota(second[0], tuple(second[1]))
    assert (a == b) == (a.to_tuple() == b.to_tuple())


# --------------------------------------------------------------------------- tracing

@checks("DIV-1", "LOW-1", "EQ-1", "EQ-2", "NS-1", "NS-2", "NS-3", "NS-4")
@given(shardings().flatmap(lambda s: st.tuples(st.just(s), shapes_for(s, divisible=True))))
def test_tracing_records_the_rules_that_fire(case):
    s, shape = case
    with tracing() as trace:
        try:
            shard_shape(s, shape)
        except Rejection:  # manual or unreduced: the rules that fired are still recorded
            pass
    assert "DIV-1" in trace and "LOW-1" in trace
    with tracing() as trace:
        jax_equivalent(s, s, len(shape))
    assert "EQ-1" in trace and "EQ-3" in trace
    if isinstance(s, NamedSharding):
        with tracing() as trace:
            NamedSharding(s.mesh, s.spec)
        assert [r for r in trace if r.startswith("NS-")] == ["NS-2", "NS-1", "NS-3", "NS-4"]
    with tracing() as outer:
        with tracing() as inner:
            placement_equivalent(s, s, shape) if _placed(s, shape) else None
        assert outer == []
    if _placed(s, shape):
        assert "EQ-2" in inner
