"""Argument placement (the ARG rules) against real JAX on 8 CPU devices, value for value.

``test_placement_agrees_with_jax`` draws values that are not yet jax.Arrays (Python and
numpy scalars, 0-d and n-d numpy arrays, masked arrays, text, bytes, objects) and shardings,
places each with ``jax.device_put`` or passes it to ``jax.jit(lambda a: a, in_shardings=s)``,
and requires the spec to agree: placed or refused, the exception's class, the dtype, weak
type, committed flag and (device_put) each device's box. Pinned examples reach the rare
sides; the coverage test requires every ARG rule on both sides against JAX.

Part of the ``transforms`` suite of ``shardlaw campaign``; ``tests/test_arguments.py`` runs
it in the project's own ``pytest`` run.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.properties.arguments_harness import (
    ArgumentCase, arg_hit_counts, argument_cases, compare_argument, spec_outcome,
)
from shardlaw.properties.registry import checks
from shardlaw.spec import Mesh, NamedSharding, P, UNCONSTRAINED
from shardlaw.spec.core.rules import RULES

MESH = Mesh.iota((2, 4), ("x", "y"))
EXPLICIT = Mesh.iota((2, 4), ("x", "y"), (S.AxisType.Explicit, S.AxisType.Auto))
ARG_RULES = sorted(r for r in RULES if r.startswith("ARG-"))
DESCRIPTION = {"ARG-0"}  # input checking of the description: JAX has no such value


def _agree(case: ArgumentCase):
    problems = compare_argument(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"
    placement, rejection, _ = spec_outcome(case)
    return placement, rejection


@checks(*[r for r in ARG_RULES if r not in DESCRIPTION])
@given(argument_cases())
def test_placement_agrees_with_jax(case):
    _agree(case)


# --------------------------------------------------------------------------- pinned examples

@checks("ARG-1")
def test_refused_kinds():
    for kind, dtype, error in (("masked_array", "float32", ValueError), ("str", None, TypeError),
                               ("object", None, TypeError),
                               ("numpy_array", "datetime64", TypeError),
                               ("numpy_scalar", "str", TypeError)):
        for via in ("device_put", "jit"):
            _, rejection = _agree(ArgumentCase(kind, (), dtype, via=via))
            assert rejection.rule == "ARG-1" and isinstance(rejection, error)


@checks("ARG-2")
def test_dtypes_and_weak_types():
    expected = {("int", None): ("int32", True), ("float", None): ("float32", True),
                ("bool", None): ("bool", False), ("complex", None): ("complex64", True),
                ("numpy_scalar", "float64"): ("float32", False),
                ("numpy_array", "int64"): ("int32", False),
                ("numpy_array", "uint64"): ("uint32", False),
                ("numpy_array", "bfloat16"): ("bfloat16", False)}
    for (kind, dtype), (out, weak) in expected.items():
        for via in ("device_put", "jit"):
            placement, _ = _agree(ArgumentCase(kind, (), dtype, via=via))
            assert (placement.dtype, placement.weak_type) == (out, weak)


@checks("ARG-3")
def test_python_ints_fit_int32():
    for value, fits in ((2**31 - 1, True), (2**31, False), (-(2**31), True),
                        (-(2**31) - 1, False)):
        for via in ("device_put", "jit"):
            _, rejection = _agree(ArgumentCase("int", int_value=value, via=via))
            assert (rejection is None) == fits
    # A numpy int64 is not checked: it wraps.
    assert _agree(ArgumentCase("numpy_scalar", (), "int64"))[1] is None


@checks("ARG-4")
def test_fit_and_boxes():
    placement, _ = _agree(ArgumentCase("numpy_array", (8, 2), "float32",
                                       NamedSharding(MESH, P("x"))))
    assert placement.shards[4] == ((4, 8), (0, 2)) and placement.committed
    uneven = NamedSharding(MESH, P("y"))
    for via in ("device_put", "jit"):
        _, rejection = _agree(ArgumentCase("numpy_array", (6,), "float32", uneven, via=via))
        assert rejection.failure.jax_error == "IndivisibleError"
    # device_put types the value first: Explicit axes refuse with a plain ValueError.
    explicit = NamedSharding(EXPLICIT, P("x"))
    _, rejection = _agree(ArgumentCase("numpy_array", (3,), "float32", explicit))
    assert rejection.rule == "ARG-4" and rejection.failure.jax_error == "ValueError"
    _, rejection = _agree(ArgumentCase("float", (), None, explicit))
    assert isinstance(rejection, AssertionError)
    placement, _ = _agree(ArgumentCase("int", int_value=3))
    assert placement.shards == {0: ()} and not placement.committed


@checks("ARG-5")
def test_unconstrained_places_nothing():
    loose = NamedSharding(MESH, P(UNCONSTRAINED))
    assert isinstance(_agree(ArgumentCase("numpy_array", (8,), "float32", loose,
                                          via="jit"))[1], ValueError)
    assert isinstance(_agree(ArgumentCase("numpy_array", (8,), "float32", loose))[1], KeyError)


@checks("ARG-6")
def test_float0_is_checked_then_stays_on_the_host():
    """A zero tangent (dtype float0) is checked against its sharding and then kept on the
    host, by device_put and by jit alike: no shards, committed to nothing."""
    host = S.Placement("float0", False, False, {})
    split = NamedSharding(MESH, P("x", "y"))
    cases = [((8, 4), None), ((8, 4), split), ((8, 4), S.SingleDeviceSharding(5)),
             ((), None), ((), NamedSharding(MESH, P())), ((0, 4), split)]
    for shape, sharding in cases:
        for via in ("device_put", "jit"):
            assert _agree(ArgumentCase("numpy_array", shape, "float0", sharding,
                                       via=via)) == (host, None), (shape, sharding, via)
    for via in ("device_put", "jit"):
        _, refused = _agree(ArgumentCase("numpy_array", (3,), "float0",
                                         NamedSharding(MESH, P("x")), via=via))
        assert refused.rule == "ARG-4"
        _, refused = _agree(ArgumentCase("numpy_array", (8,), "float0",
                                         NamedSharding(MESH, P(UNCONSTRAINED)), via=via))
        assert refused.rule == "ARG-5"
    # Nothing is transferred: device_put does not read a one-device GSPMDSharding's tiles,
    # whose rank it checks for other values when it sends the shard.
    lone = S.GSPMDSharding(S.DeviceList([S.Device(0)]), S.parse_hlo("{devices=[1]<=[1]}"))
    assert _agree(ArgumentCase("numpy_array", (1, 1), "float0", lone)) == (host, None)
    assert _agree(ArgumentCase("numpy_array", (1, 1), "float32", lone))[1].rule == "ARG-4"
    # Indexing a float0 array gives a numpy.void: the description takes 0-d arrays instead.
    with pytest.raises(S.Rejection, match=r"\[ARG-0\]"):
        S.place_argument("numpy_scalar", (), "float0")


@checks("ARG-0")
@given(st.sampled_from(["list", None, 3, "numpy"]))
def test_descriptions_that_are_not_values_are_refused_by_arg_0(kind):
    with pytest.raises(S.Rejection) as refused:
        S.place_argument(kind, (), "float32")
    assert refused.value.rule == "ARG-0"
    assert S.place_argument("numpy_array", (2,), "float32").dtype == "float32"


# --------------------------------------------------------------------------- coverage

def test_every_arg_rule_was_seen_on_both_sides_against_jax():
    """Runs last in this module: every ARG rule accepted and refused (ARG-2, which never
    refuses, with weak and not weak results)."""
    missing = []
    hits = arg_hit_counts()
    for rule_id in ARG_RULES:
        if rule_id in DESCRIPTION:
            continue
        sides = hits.get("ARG-2 weak" if rule_id == "ARG-2" else rule_id, (0, 0))
        if not (sides[0] and sides[1]):
            missing.append((rule_id, sides))
    assert not missing, f"rules not seen on both sides against JAX: {missing}"
