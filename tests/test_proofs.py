"""The solver's proofs (spec/prove/smt.py, SMT-1 and SMT-2) against brute force, and its answers to bad input.

Brute force is the spec's own enumeration: two shardings place alike when
``devices_indices_map`` (IDX-1) gives every device the same box under both.
"""

from __future__ import annotations

import doctest
import itertools
import math
import subprocess
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("z3")

from shardlaw.properties.registry import checks  # noqa: E402
from shardlaw.properties.strategies import iotas, sharding_pairs  # noqa: E402
from shardlaw.spec import (  # noqa: E402
    AbstractMesh, AxisType, DeviceList, GSPMDSharding, Iota, Mesh, NamedSharding, P, Rejection,
    SingleDeviceSharding, devices_indices_map, placement_equivalent, shard_shape, tiled,
)
from shardlaw.spec.prove import smt  # noqa: E402
from shardlaw.spec.prove.smt import (  # noqa: E402
    Counterexample, Proved, Unknown, prove_equivalent, prove_for_every_shape,
)


def _brute_force(a, b, shape):
    """(equivalent, map under a, map under b), or the rule that rejects the shape."""
    try:
        ma, mb = devices_indices_map(a, shape), devices_indices_map(b, shape)
    except Rejection as rejection:
        return rejection.rule
    return ma == mb, ma, mb


def _assert_answer_matches(result, truth):
    equivalent, ma, mb = truth
    assert not isinstance(result, Unknown), result
    assert result.equivalent == equivalent, (result, ma, mb)
    if not equivalent:
        assert result.box_a != result.box_b
        assert ma.get(result.device) == result.box_a
        assert mb.get(result.device) == result.box_b


# --------------------------------------------------------------------------- SMT-1

@checks("SMT-1", "EQ-2", "IDX-1")
@given(sharding_pairs())
def test_prove_agrees_with_brute_force(pair):
    """The solver proves exactly the pairs whose device -> box maps are equal, and names a
    device whose boxes differ otherwise; what the spec rejects, it rejects with the same rule."""
    a, b, shape = pair
    truth = _brute_force(a, b, shape)
    if isinstance(truth, str):
        with pytest.raises(Rejection) as rejected:
            prove_equivalent(a, b, shape)
        assert rejected.value.rule == truth
        return
    _assert_answer_matches(prove_equivalent(a, b, shape), truth)


@checks("SMT-1", "EQ-2")
@given(sharding_pairs(max_devices=6))
@settings(max_examples=40)
def test_the_literal_encodings_agree_with_digits(pair):
    """Bit-vector and integer division (the encodings measured against) give the same answers."""
    a, b, shape = pair
    truth = _brute_force(a, b, shape)
    assume(not isinstance(truth, str))
    for encoding in ("bitvector", "integer"):
        result = prove_equivalent(a, b, shape, encoding=encoding, timeout_s=20)
        _assert_answer_matches(result, truth)


@checks("SMT-1", "EQ-2")
@given(st.sampled_from([16, 64, 256]).flatmap(
    lambda n: st.tuples(st.just(n), iotas(n, max_rank=3), iotas(n, max_rank=3),
                        st.sampled_from([(n, 4), (4, n)]))))
@settings(max_examples=60)
def test_symbolic_orders_agree_with_the_fast_rule(case):
    """On meshes over reshaped and transposed device orders, the solver agrees with EQ-2."""
    n, order_a, order_b, shape = case
    a = NamedSharding(Mesh((n // 4, 4), ("x", "y"), DeviceList(order_a)), P("x", "y"))
    b = NamedSharding(Mesh((4, n // 4), ("y", "x"), DeviceList(order_b)), P("x", "y"))
    assume(all(d % t == 0 for d, t in zip(shape, (n // 4, 4))))
    result = prove_equivalent(a, b, shape)
    assert not result.tables
    assert result.equivalent == placement_equivalent(a, b, shape)


# --------------------------------------------------------------------------- SMT-2

MAX_DIM = 8


def _every_shape(a, b, rank, max_dim):
    """Brute force over shapes: the first shape both divide where the placements differ."""
    for shape in itertools.product(range(max_dim + 1), repeat=rank):
        try:
            shard_shape(a, shape), shard_shape(b, shape)
        except Rejection:
            continue
        if devices_indices_map(a, shape) != devices_indices_map(b, shape):
            return shape
    return None


@checks("SMT-2", "SMT-1", "DIV-1")
@given(sharding_pairs(max_devices=8))
@settings(max_examples=60)
def test_every_shape_agrees_with_enumerating_shapes(pair):
    """Proved for every shape up to a bound exactly when no shape both divide places the
    two differently; a counterexample's shape is in bounds, divides, and differs."""
    a, b, shape = pair
    rank = len(shape)
    assume(rank <= 2 and not isinstance(_brute_force(a, b, shape), str))
    differing = _every_shape(a, b, rank, MAX_DIM)
    result = prove_for_every_shape(a, b, rank=rank, max_dim=MAX_DIM)
    assert result.equivalent == (differing is None), (result, differing)
    if isinstance(result, Counterexample):
        assert len(result.shape) == rank and max(result.shape, default=0) <= MAX_DIM
        _assert_answer_matches(result, _brute_force(a, b, result.shape))


def test_every_shape_needs_no_enumeration_at_scale():
    """A million devices and dimensions up to 2^20: the proof does not enumerate."""
    n = 1 << 20
    mesh = Mesh.iota((n // 4, 4), ("x", "y"))
    flat = Mesh((n,), ("z",), DeviceList(Iota((n // 4, 4), (0, 1))))
    result = prove_for_every_shape(NamedSharding(mesh, P(("x", "y"))), NamedSharding(flat, P("z")),
                                   rank=2, max_dim=1 << 20)
    assert isinstance(result, Proved) and result.seconds < 5


# --------------------------------------------------------------------------- scale

def test_a_million_devices_is_symbolic():
    """The transposed-mesh pair at 2^20 devices is proved, and a perfect shuffle of the
    devices refuted, without tables."""
    n = 1 << 20
    mesh = Mesh.iota((n // 4, 4), ("x", "y"))
    transposed = Mesh((4, n // 4), ("y", "x"), DeviceList(Iota((n // 4, 4), (1, 0))))
    proved = prove_equivalent(NamedSharding(mesh, P("y", "x")),
                              NamedSharding(transposed, P("y", "x")), (16, n))
    assert isinstance(proved, Proved) and not proved.tables
    shuffled = Mesh((n // 4, 4), ("x", "y"), DeviceList(Iota((2, n // 2), (1, 0))))
    found = prove_equivalent(NamedSharding(mesh, P("x", "y")),
                             NamedSharding(shuffled, P("x", "y")), (n, 16))
    assert isinstance(found, Counterexample) and not found.tables
    assert found.box_a == _box(mesh, P("x", "y"), (n, 16), found.device)
    assert found.box_b == _box(shuffled, P("x", "y"), (n, 16), found.device)


def _box(mesh, spec, shape, device):
    from shardlaw.spec import box_of
    return box_of(NamedSharding(mesh, spec), shape, device)


def test_an_explicit_order_that_is_an_iota_is_recognized():
    """A device list written out, which is in fact a transpose, needs no table."""
    order = Iota((4, 16), (1, 0))
    explicit = Mesh((16, 4), ("x", "y"), list(order))
    symbolic = Mesh((16, 4), ("x", "y"), DeviceList(order))
    result = prove_equivalent(NamedSharding(explicit, P("x")), NamedSharding(symbolic, P("x")),
                              (32,))
    assert isinstance(result, Proved) and not result.tables


@given(st.integers(1, 48).flatmap(lambda n: iotas(n, max_rank=4)))
def test_recognize_iota_finds_every_iota(order):
    assert smt._recognize_iota(order.to_tuple()) == order


@given(st.integers(1, 7).flatmap(lambda n: st.permutations(range(n))))
def test_recognize_iota_refuses_what_is_no_iota(values):
    found = smt._recognize_iota(tuple(values))
    assert found is None or found.to_tuple() == tuple(values)


def test_random_orders_use_tables_and_agree():
    n = 4096
    rng = __import__("random").Random(7)
    order = list(range(n))
    rng.shuffle(order)
    a = NamedSharding(Mesh((n // 4, 4), ("x", "y"), order), P("x", "y"))
    same = GSPMDSharding(range(n), tiled((n // 4, 4), tuple(order)))
    proved = prove_equivalent(a, same, (n, 8))
    assert isinstance(proved, Proved) and proved.tables
    swapped = list(order)
    swapped[0], swapped[n - 1] = swapped[n - 1], swapped[0]
    found = prove_equivalent(a, GSPMDSharding(range(n), tiled((n // 4, 4), tuple(swapped))),
                             (n, 8))
    assert isinstance(found, Counterexample) and found.device in (order[0], order[n - 1])


# --------------------------------------------------------------------------- bad input

MESH = Mesh.iota((2, 4), ("x", "y"))


def test_devices_on_one_side_only_are_a_counterexample():
    a = NamedSharding(MESH, P("x"))
    four = NamedSharding(Mesh.iota((4,), ("x",)), P("x"))
    result = prove_equivalent(a, four, (8,))
    assert result == Counterexample(4, ((4, 8),), None, (8,))
    other_devices = SingleDeviceSharding(5)
    result = prove_equivalent(SingleDeviceSharding(3), other_devices, (2,))
    assert result == Counterexample(3, ((0, 2),), None, (2,))


def test_a_shape_one_side_does_not_divide_is_rejected_by_div_1():
    with pytest.raises(Rejection) as rejected:
        prove_equivalent(NamedSharding(MESH, P("x")), NamedSharding(MESH, P("y")), (6,))
    assert rejected.value.rule == "DIV-1"


def test_different_ranks_are_rejected_by_the_rank_rules():
    gspmd_rank_one = GSPMDSharding(range(8), "{devices=[8]<=[8]}")
    with pytest.raises(Rejection) as rejected:
        prove_equivalent(NamedSharding(MESH, P("x", "y")), gspmd_rank_one, (8, 8))
    assert rejected.value.rule == "DIV-1"
    with pytest.raises(Rejection) as rejected:
        prove_equivalent(NamedSharding(MESH, P("x", "y")), NamedSharding(MESH, P()), (8,))
    assert rejected.value.rule == "NS-5"


def test_abstract_and_manual_shardings_are_rejected():
    abstract = NamedSharding(AbstractMesh((2, 4), ("x", "y")), P("x"))
    with pytest.raises(Rejection) as rejected:
        prove_equivalent(abstract, abstract, (8,))
    assert rejected.value.rule == "DEV-1"
    manual = NamedSharding(Mesh.iota((2,), ("x",), (AxisType.Manual,)), P())
    with pytest.raises(Rejection) as rejected:
        prove_equivalent(manual, manual, (8,))
    assert rejected.value.rule == "IDX-1"


@checks("SMT-1", "SMT-2", "VAL-1")
@pytest.mark.parametrize("call, rule", [
    (lambda a: prove_equivalent(a, a), "SMT-1"),
    (lambda a: prove_equivalent(a, a, rank=1), "SMT-1"),
    (lambda a: prove_equivalent(a, a, (8,), rank=1, max_dim=8), "SMT-1"),
    (lambda a: prove_equivalent(a, a, (8,), encoding="floats"), "SMT-1"),
    (lambda a: prove_equivalent(a, a, (-8,)), "VAL-1"),
    (lambda a: prove_for_every_shape(a, a, rank=1, max_dim=-1), "VAL-1"),
    (lambda a: prove_for_every_shape(a, a, rank=None, max_dim=4), "VAL-1"),
])
def test_calls_without_a_question_are_rejected(call, rule):
    with pytest.raises(Rejection) as rejected:
        call(NamedSharding(MESH, P("x")))
    assert rejected.value.rule == rule


def test_running_out_of_time_is_unknown_not_an_error():
    # Orders whose digits do not nest (a 2x3 grid read as 3x2) at a size where the solver's
    # own division is slow, with almost no time.
    n = 2 * 3 * 5 * 7 * 11 * 13 * 4
    a = NamedSharding(Mesh((n // 6, 6), ("x", "y"), DeviceList(Iota((n // 6, 2, 3), (0, 2, 1)))),
                      P("x", "y"))
    b = NamedSharding(Mesh((n // 6, 6), ("x", "y"), DeviceList(Iota((n // 6, 3, 2), (0, 2, 1)))),
                      P("x", "y"))
    result = prove_equivalent(a, b, (n, 6), encoding="bitvector", timeout_s=0.001)
    assert isinstance(result, Unknown) and result.equivalent is None
    with pytest.raises(TypeError):
        bool(result)
    # The default encoding decides it.
    assert prove_equivalent(a, b, (n, 6)).equivalent == placement_equivalent(a, b, (n, 6))


def test_a_table_too_large_is_unknown(monkeypatch):
    monkeypatch.setattr(smt, "TABLE_LIMIT", 4)
    a = NamedSharding(Mesh((8,), ("x",), [1, 0, 2, 3, 4, 5, 6, 7]), P("x"))
    b = NamedSharding(Mesh((8,), ("x",), [0, 1, 2, 3, 4, 5, 7, 6]), P("x"))
    result = prove_equivalent(a, b, (8,))
    assert isinstance(result, Unknown) and "larger than" in result.reason


def test_answers_read_as_truth_values():
    a = NamedSharding(MESH, P("x"))
    assert prove_equivalent(a, a, (8,))
    assert not prove_equivalent(a, NamedSharding(MESH, P("y")), (8,))


# --------------------------------------------------------------------------- the module

def test_the_examples_in_the_solver_module_run():
    result = doctest.testmod(smt, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0


def test_importing_the_spec_does_not_import_z3():
    code = ("import sys, shardlaw.spec; from shardlaw.spec import *; "
            "assert 'z3' not in sys.modules, 'z3 loaded'; "
            "from shardlaw.spec import prove_equivalent, Proved, Counterexample, Unknown; "
            "assert 'z3' in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_time_spent_is_reported():
    result = prove_equivalent(NamedSharding(MESH, P("x")), NamedSharding(MESH, P("x")), (8,))
    assert 0 <= result.solver_seconds <= result.seconds < 10
    assert math.isfinite(result.seconds)
