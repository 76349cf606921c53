"""Every numbered clause (C1, C2, ...) of a compound rule has a test of its own.

A rule whose statement needs "and ... unless ... then" states a short rule and lists its
parts as clauses (``Rule.clauses``); each test below is registered for one clause, and the
first test requires every clause of every rule to have one.
"""

import dataclasses

import pytest

import shardlaw.spec as S
from shardlaw.spec import (
    Arg, Call, GSPMDSharding, JitOptions, Layout, Mesh, NamedSharding, Out, P, Rejection,
    SingleDeviceSharding, Static, jit_call,
)
from shardlaw.spec.jit.aot import check_aot_shardings
from shardlaw.spec.jit.cache_keys import (
    abstract_value, differences, dispatch_equal, dispatch_signature, lowering_key, module_key,
)
from shardlaw.spec.jit.cache_policy import policy_key
from shardlaw.spec.jit.cache_sites import CallSite
from shardlaw.spec.core.hlo import parse_hlo
from shardlaw.spec.jit.layouts import check_argument_layout
from shardlaw.spec.jit.matching import match_in_shardings
from shardlaw.spec.core.pytree import structure
from shardlaw.spec.jit.recovery import recover_shardings
from shardlaw.spec.jit.resolution import check_reused_replica

MESH = Mesh.iota((2, 4), ("x", "y"))
M2 = Mesh.iota((2,), ("x",))
TESTED: dict[tuple[str, int], str] = {}


def clause(rule_id: str, number: int):
    def register(test):
        TESTED[(rule_id, number)] = test.__name__
        return test
    return register


def test_every_clause_has_a_test():
    tested = set(TESTED)
    try:
        import shardlaw.spec.prove.smt  # noqa: F401 - registers SMT-1 and SMT-2
    except ImportError:  # without z3 the SMT rules are not registered, nor their clauses
        tested = {(rule_id, n) for rule_id, n in tested if not rule_id.startswith("SMT-")}
    clauses = {(r.id, n) for r in S.RULES.values() for n in range(1, len(r.clauses) + 1)}
    assert clauses, "no rule has clauses"
    assert sorted(clauses - tested) == []
    assert sorted(tested - clauses) == []


def test_statements_are_whole_sentences_of_at_most_40_words():
    pytest.importorskip("z3")
    import shardlaw.spec.prove.smt  # noqa: F401 - registers SMT-1 and SMT-2

    for r in S.RULES.values():
        assert r.statement.endswith("."), r.id
        assert len(r.statement.split()) <= 40, (r.id, len(r.statement.split()))
        assert not r.statement.endswith(".."), r.id
    assert S.RULES["VAL-9"].statement.endswith("a permutation of ``0 .. rank-1``.")


def _site(call):
    return CallSite(call), jit_call(call)


def _diff(key, a, b):
    return [p.what for p in differences(key(*a) if isinstance(a, tuple) else key(a),
                                        key(*b) if isinstance(b, tuple) else key(b))]


# --------------------------------------------------------------------------- LOW-1

@clause("LOW-1", 1)
def test_low_1_size_one_axes_vanish():
    mesh = Mesh.iota((1, 8), ("one", "y"))
    assert str(S.to_hlo(NamedSharding(mesh, P("one", "y")), 2)) == "{devices=[1,8]<=[8]}"


@clause("LOW-1", 2)
def test_low_1_dimensions_tile_by_their_axes_in_spec_order():
    assert str(S.to_hlo(NamedSharding(MESH, P(("x", "y"))), 1)) == "{devices=[8]<=[8]}"
    assert str(S.to_hlo(NamedSharding(MESH, P(("y", "x"))), 1)) == "{devices=[8]<=[2,4]T(1,0)}"


@clause("LOW-1", 3)
def test_low_1_unused_axes_become_trailing_subgroups():
    hlo = S.to_hlo(NamedSharding(MESH, P("x")), 2)
    assert str(hlo) == "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"


# --------------------------------------------------------------------------- LAY-1

@clause("LAY-1", 1)
def test_lay_1_a_committed_array_is_in_exactly_the_layout():
    laid = Arg.committed((4, 4), SingleDeviceSharding(0), layout=Layout((1, 0)))
    check_argument_layout(laid, Layout((1, 0)))
    with pytest.raises(Rejection) as caught:
        check_argument_layout(Arg.committed((4, 4), SingleDeviceSharding(0)), Layout((1, 0)))
    assert caught.value.rule == "LAY-1"
    unused = Call(args=(Arg.committed((4, 4), SingleDeviceSharding(0)),), outputs=Out(()),
                  uses=(False,), options=JitOptions(in_shardings=(
                      S.Format(Layout((1, 0)), SingleDeviceSharding(0)),)))
    assert jit_call(unused).rule == "LAY-1"


@clause("LAY-1", 2)
def test_lay_1_auto_matches_no_committed_array():
    with pytest.raises(Rejection):
        check_argument_layout(Arg.committed((4, 4), SingleDeviceSharding(0)), S.AUTO_LAYOUT)


@clause("LAY-1", 3)
def test_lay_1_other_arguments_are_laid_out_as_asked():
    for arg in (Arg.numpy((4, 4)), Arg.uncommitted((4, 4)), Arg.abstract((4, 4))):
        check_argument_layout(arg, Layout((1, 0)))


# --------------------------------------------------------------------------- TREE-1

@clause("TREE-1", 1)
def test_tree_1_a_single_leaf_covers_every_argument():
    args = structure(((1, 2), {"a": 3}))
    assert match_in_shardings(P("x"), args) == [P("x")] * 3
    assert match_in_shardings(None, args) == [None] * 3


@clause("TREE-1", 2)
def test_tree_1_a_tuple_or_top_level_list_has_one_entry_per_argument():
    args = structure((1, 2))
    assert match_in_shardings((P("x"), None), args) == [P("x"), None]
    assert match_in_shardings([P("x"), None], args) == [P("x"), None]
    with pytest.raises(Rejection):
        match_in_shardings((P("x"),), args)


@clause("TREE-1", 3)
def test_tree_1_inside_an_entry_containers_match_type_length_and_keys():
    args = structure(((1, 2), {"a": 3}))
    assert match_in_shardings(((P("x"), None), P()), args) == [P("x"), None, P()]
    for wrong in (([P("x"), None], P()), ((P("x"),), P()), (P(), {"b": P()})):
        with pytest.raises(Rejection):
            match_in_shardings(wrong, args)


# --------------------------------------------------------------------------- OUT-1

COMPILER = GSPMDSharding(M2.devices, "{devices=[2]<=[2]}")


@clause("OUT-1", 1)
def test_out_1_the_first_user_sharding_gives_the_type():
    named = NamedSharding(M2, P("x"))
    assert recover_shardings([COMPILER], [Out((4,))], [named], [Out((4,))], None) == [named]
    other_rank = recover_shardings([COMPILER], [Out((4, 2))], [named], [Out((4,))], None)
    assert other_rank == [NamedSharding(M2, P("x"))]
    lone = SingleDeviceSharding(0)
    placed = GSPMDSharding([1], "{replicated}")
    assert recover_shardings([placed], [Out((4,))], [lone], [Out((4,))], None) == [
        SingleDeviceSharding(1)]


@clause("OUT-1", 2)
def test_out_1_else_the_first_such_placed_value():
    named = NamedSharding(M2, P())
    out = recover_shardings([COMPILER, named], [Out((4,)), Out((4,))], [], [], None)
    assert out == [NamedSharding(M2, P("x")), named]


@clause("OUT-1", 3)
def test_out_1_else_the_context_mesh():
    assert recover_shardings([COMPILER], [Out((4,))], [], [], M2) == [NamedSharding(M2, P("x"))]
    assert recover_shardings([COMPILER], [Out((4,))], [], [], None) == [COMPILER]


@clause("OUT-1", 4)
def test_out_1_stays_gspmd_when_rereading_fails_unless_indivisible():
    listed = GSPMDSharding([1, 0], "{devices=[2]1,0}")   # not the mesh's device order
    named = NamedSharding(Mesh((2,), ("x",), [1, 0]), P())
    assert recover_shardings([listed], [Out((4,))], [named], [Out((4, 2))], None) == [listed]
    mesh42 = Mesh.iota((4, 2), ("x", "y"))
    tiled = GSPMDSharding(mesh42.devices, parse_hlo("{devices=[2,4]<=[8]}"))
    with pytest.raises(Rejection) as caught:
        recover_shardings([tiled], [Out((8, 8))], [NamedSharding(mesh42, P())],
                          [Out((8,))], None)
    assert caught.value.rule == "OUT-2"


# --------------------------------------------------------------------------- RES-5

@clause("RES-5", 1)
def test_res_5_device_moves_arguments_without_checks():
    committed = Arg.committed((4,), NamedSharding(MESH, P("x")))
    verdict = jit_call(Call(args=(committed,), outputs=Out((4,)), options=JitOptions(device=3)))
    assert verdict.accepted and verdict.device_assignment == (3,)
    assert verdict.transfers == ("args[0]",)


@clause("RES-5", 2)
def test_res_5_a_replica_on_the_target_is_used_as_is():
    pinned = NamedSharding(M2, P(), memory_kind="pinned_host")
    check_reused_replica(Arg.committed((4,), pinned), SingleDeviceSharding(5))
    with pytest.raises(Rejection) as caught:
        check_reused_replica(Arg.committed((4,), pinned), SingleDeviceSharding(1))
    assert caught.value.rule == "RES-5"
    split = NamedSharding(M2, P("x"), memory_kind="pinned_host")
    check_reused_replica(Arg.committed((4,), split), SingleDeviceSharding(1))


# --------------------------------------------------------------------------- CACHE-2

@clause("CACHE-2", 1)
def test_cache_2_named_shardings_written_alike():
    assert dispatch_equal(NamedSharding(MESH, P("x")), NamedSharding(MESH, P("x")))
    assert not dispatch_equal(NamedSharding(MESH, P("x")), NamedSharding(MESH, P("x", None)))
    assert not dispatch_equal(NamedSharding(MESH, P("x")),
                              NamedSharding(MESH, P("x"), memory_kind="pinned_host"))


@clause("CACHE-2", 2)
def test_cache_2_single_device_shardings():
    assert dispatch_equal(SingleDeviceSharding(1), SingleDeviceSharding(1))
    assert not dispatch_equal(SingleDeviceSharding(1), SingleDeviceSharding(2))
    assert not dispatch_equal(SingleDeviceSharding(1),
                              SingleDeviceSharding(1, memory_kind="pinned_host"))


@clause("CACHE-2", 3)
def test_cache_2_gspmd_shardings():
    a = GSPMDSharding([0, 1], "{devices=[2]<=[2]}")
    assert dispatch_equal(a, GSPMDSharding([0, 1], "{devices=[2]<=[2]}"))
    assert not dispatch_equal(a, GSPMDSharding([1, 0], "{devices=[2]<=[2]}"))
    assert not dispatch_equal(a, GSPMDSharding([0, 1], "{replicated}"))
    assert not dispatch_equal(a, NamedSharding(M2, P("x")))


# --------------------------------------------------------------------------- CACHE-3

def _call(*args, **changes):
    return CallSite(Call(args=args, outputs=Out((4,)), **changes))


@clause("CACHE-3", 1)
def test_cache_3_structure_and_keyword_names():
    a = CallSite(Call(args=(Arg.numpy((4,)),), outputs=Out((4,))))
    b = CallSite(Call(args=((Arg.numpy((4,)),),), outputs=Out((4,))))
    c = CallSite(Call(kwargs={"y": Arg.numpy((4,))}, outputs=Out((4,))))
    d = CallSite(Call(kwargs={"z": Arg.numpy((4,))}, outputs=Out((4,))))
    assert dispatch_signature(a) != dispatch_signature(b)
    assert dispatch_signature(c) != dispatch_signature(d)


@clause("CACHE-3", 2)
def test_cache_3_static_values_same_type_and_equal():
    def site(value):
        return CallSite(Call(args=(Arg.numpy((4,)), Static(value)), outputs=Out((4,)),
                             options=JitOptions(static_argnums=1)))
    assert dispatch_signature(site(1)) == dispatch_signature(site(1))
    assert dispatch_signature(site(1)) != dispatch_signature(site(2))
    assert dispatch_signature(site(1)) != dispatch_signature(site(1.0))


@clause("CACHE-3", 3)
def test_cache_3_dtype_shape_and_python_scalars():
    assert dispatch_signature(_call(Arg.numpy((4,)))) != dispatch_signature(
        _call(Arg.numpy((4,), "int32")))
    assert dispatch_signature(_call(Arg.numpy((4,)))) != dispatch_signature(
        _call(Arg.numpy((8,))))
    assert _diff(dispatch_signature, _call(Arg.scalar("bool")),
                 _call(Arg.numpy((), "bool"))) == ["args[0] weak type"]


@clause("CACHE-3", 4)
def test_cache_3_sharding_and_committedness():
    one, other = SingleDeviceSharding(0), SingleDeviceSharding(1)
    assert "args[0] sharding" in _diff(dispatch_signature, _call(Arg.committed((4,), one)),
                                       _call(Arg.committed((4,), other)))
    assert _diff(dispatch_signature, _call(Arg.committed((4,), one)),
                 _call(Arg.uncommitted((4,), one))) == ["args[0] committed"]


@clause("CACHE-3", 5)
def test_cache_3_context_mesh_and_default_device():
    x = Arg.numpy((4,))
    assert _diff(dispatch_signature, _call(x), _call(x, context_mesh=MESH)) == [
        "the context mesh"]
    assert _diff(dispatch_signature, _call(x), _call(x, default_device=1)) == [
        "the default device"]


# --------------------------------------------------------------------------- CACHE-4

@clause("CACHE-4", 1)
def test_cache_4_shape_and_narrowed_dtype():
    aval = abstract_value(Arg.numpy((4, 2), "float64"))
    assert (aval.shape, aval.dtype) == ((4, 2), "float32")
    assert abstract_value(Arg.numpy((4,), "int64")).dtype == "int32"


@clause("CACHE-4", 2)
def test_cache_4_python_scalars_are_weak():
    assert abstract_value(Arg.scalar("int")).weak_type
    assert abstract_value(Arg.scalar("float")).weak_type
    assert not abstract_value(Arg.numpy(())).weak_type


@clause("CACHE-4", 3)
def test_cache_4_memory_space():
    pinned = NamedSharding(M2, P(), memory_kind="pinned_host")
    assert abstract_value(Arg.committed((4,), pinned)).memory == "host"
    assert abstract_value(Arg.committed((4,), NamedSharding(M2, P()))).memory == "device"


@clause("CACHE-4", 4)
def test_cache_4_the_mesh_and_an_explicit_spec():
    auto = abstract_value(Arg.committed((8, 8), NamedSharding(MESH, P("x"))))
    assert auto.mesh == MESH.abstract and auto.spec is None
    explicit = Mesh.iota((2, 4), ("x", "y"), axis_types=(S.AxisType.Explicit,) * 2)
    typed = abstract_value(Arg.committed((8, 8), NamedSharding(explicit, P("x"))))
    assert typed.mesh == explicit.abstract and typed.spec == P("x", None)
    assert abstract_value(Arg.committed((8,), SingleDeviceSharding(0))).mesh is None


# --------------------------------------------------------------------------- CACHE-7

def _given(spec, **changes):
    return CallSite(Call(args=(Arg.numpy((8,)),), outputs=Out((8,)),
                         options=JitOptions(in_shardings=(NamedSharding(MESH, spec),),
                                            **changes)))


@clause("CACHE-7", 1)
def test_cache_7_resolved_input_and_output_shardings():
    assert lowering_key(_given(P("x"))) == lowering_key(_given(P("x")))
    assert lowering_key(_given(P("x"))) != lowering_key(_given(P("y")))
    out = NamedSharding(MESH, P("x"))
    assert lowering_key(_given(P("x"))) != lowering_key(_given(P("x"), out_shardings=out))


@clause("CACHE-7", 2)
def test_cache_7_donation_keep_unused_and_context():
    plain = _given(P("x"))
    assert lowering_key(plain) != lowering_key(_given(P("x"), donate_argnums=0))
    assert lowering_key(plain) != lowering_key(_given(P("x"), keep_unused=True))
    under = CallSite(dataclasses.replace(plain.call, context_mesh=MESH))
    assert lowering_key(plain) != lowering_key(under)


@clause("CACHE-7", 3)
def test_cache_7_an_equivalent_sharding_written_differently_misses():
    assert S.placement_equivalent(NamedSharding(MESH, P("x")), NamedSharding(MESH, P("x", None)),
                                  (8, 8))
    two_d = [CallSite(Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8)),
                           options=JitOptions(in_shardings=(NamedSharding(MESH, spec),))))
             for spec in (P("x"), P("x", None))]
    assert lowering_key(two_d[0]) != lowering_key(two_d[1])


# --------------------------------------------------------------------------- CACHE-9

def _committed(sharding, shape=(8, 8), **changes):
    return _site(Call(args=(Arg.committed(shape, sharding),), outputs=Out(shape), **changes))


@clause("CACHE-9", 1)
def test_cache_9_kept_input_types_carry_the_mesh():
    renamed = Mesh.iota((2, 4), ("a", "b"))
    assert module_key(*_committed(NamedSharding(MESH, P("x")))) != module_key(
        *_committed(NamedSharding(renamed, P("a"))))


@clause("CACHE-9", 2)
def test_cache_9_semantically_equal_input_shardings():
    assert module_key(*_committed(NamedSharding(MESH, P("x")))) == module_key(
        *_committed(NamedSharding(MESH, P("x", None))))
    assert module_key(*_committed(NamedSharding(MESH, P("x")))) != module_key(
        *_committed(NamedSharding(MESH, P("y"))))
    # A 0-d input left open on several devices is replicated, as one given replicated is.
    open_scalar = Call(args=(Arg.numpy(()), Arg.committed((8,), NamedSharding(MESH, P("x")))),
                       outputs=Out(()))
    given = dataclasses.replace(open_scalar, options=JitOptions(
        in_shardings=(GSPMDSharding(MESH.devices, "{replicated}"), None)))
    assert module_key(*_site(open_scalar)) == module_key(*_site(given))


@clause("CACHE-9", 3)
def test_cache_9_semantically_equal_output_shardings():
    def out(spec):
        return _committed(NamedSharding(MESH, P("x")), options=JitOptions(
            out_shardings=NamedSharding(MESH, spec)))
    assert module_key(*out(P("x"))) == module_key(*out(P("x", None)))
    assert module_key(*out(P("x"))) != module_key(*out(P("y")))


@clause("CACHE-9", 4)
def test_cache_9_the_number_of_devices():
    one = _committed(SingleDeviceSharding(0), shape=(8,))
    two = _committed(NamedSharding(M2, P()), shape=(8,))
    assert "the number of devices" in _diff(module_key, one, two)


# --------------------------------------------------------------------------- CACHE-12

@clause("CACHE-12", 1)
def test_cache_12_statics_structure_and_program_types():
    def call(*args, **kw):
        return _site(Call(args=args, outputs=Out((8,)), **kw))
    x = Arg.committed((8,), NamedSharding(M2, P("x")))
    assert policy_key(*call(x)) == policy_key(*call(x))
    assert policy_key(*call(x)) != policy_key(*call((x,)))
    assert policy_key(*call(x)) != policy_key(*call(
        Arg.committed((8,), NamedSharding(M2, P("x")), dtype="int32")))
    with_static = [_site(Call(args=(x, Static(v)), outputs=Out((8,)),
                              options=JitOptions(static_argnums=1))) for v in (1, 2)]
    assert policy_key(*with_static[0]) != policy_key(*with_static[1])


@clause("CACHE-12", 2)
def test_cache_12_placement_classes():
    renamed = Mesh.iota((2, 4), ("a", "b"))
    assert policy_key(*_committed(NamedSharding(MESH, P("x")))) == policy_key(
        *_committed(NamedSharding(renamed, P("a", None))))
    assert policy_key(*_committed(NamedSharding(MESH, P("x")))) != policy_key(
        *_committed(NamedSharding(MESH, P("y"))))


@clause("CACHE-12", 3)
def test_cache_12_an_open_input_on_one_device_counts_as_placed_there():
    def one(arg):
        return policy_key(*_site(Call(args=(arg,), outputs=Out((8,)))))
    on_0 = one(Arg.committed((8,), SingleDeviceSharding(0)))
    assert one(Arg.uncommitted((8,))) == on_0           # the same executable serves both
    assert one(Arg.numpy((8,))) == on_0
    assert one(Arg.uncommitted((8,))) != one(Arg.committed((8,), SingleDeviceSharding(1)))
    # On several devices an open array is the compiler's to place: still its own class;
    # an open scalar is replicated (EXE-1), and shares the replicated class.
    split = Arg.committed((8,), NamedSharding(M2, P("x")))
    two = [_site(Call(args=(split, arg), outputs=Out((8,))))
           for arg in (Arg.uncommitted((8,)), Arg.committed((8,), NamedSharding(M2, P())))]
    assert policy_key(*two[0]) != policy_key(*two[1])
    scalars = [_site(Call(args=(split, arg), outputs=Out((8,))))
               for arg in (Arg.numpy(()), Arg.committed((), NamedSharding(M2, P())))]
    assert policy_key(*scalars[0]) == policy_key(*scalars[1])


@clause("CACHE-12", 4)
def test_cache_12_devices_donation_and_keep_unused():
    assert policy_key(*_committed(SingleDeviceSharding(0), (8,))) != policy_key(
        *_committed(SingleDeviceSharding(1), (8,)))
    s = NamedSharding(MESH, P("x"))
    assert policy_key(*_committed(s)) != policy_key(*_committed(
        s, options=JitOptions(donate_argnums=0)))
    assert policy_key(*_committed(s)) != policy_key(*_committed(
        s, options=JitOptions(keep_unused=True)))


@clause("CACHE-12", 5)
def test_cache_12_layouts_given_and_held():
    s = NamedSharding(MESH, P("x"))
    held = Arg.committed((8, 8), s, layout=Layout((1, 0)))
    assert policy_key(*_committed(s)) != policy_key(*_site(Call(args=(held,),
                                                                outputs=Out((8, 8)))))
    given = JitOptions(out_shardings=S.Format(Layout((1, 0)), s))
    assert policy_key(*_committed(s)) != policy_key(*_committed(s, options=given))


# --------------------------------------------------------------------------- AOT-3

def _aot(arg, aot_arg, **changes):
    return jit_call(Call(args=(arg,), outputs=Out((4,)), aot_args=(aot_arg,), **changes))


@clause("AOT-3", 1)
def test_aot_3_committed_arrays_are_jax_equivalent_not_merely_hlo_equal():
    split = NamedSharding(M2, P("x"))
    assert _aot(Arg.committed((4,), split), Arg.committed((4,), split)).accepted
    # The same HLO on other devices passes jit's RES-4, not the executable's check.
    moved = NamedSharding(Mesh((2,), ("x",), [1, 0]), P("x"))
    verdict = _aot(Arg.committed((4,), split), Arg.committed((4,), moved))
    assert verdict.rule == "AOT-3" and verdict.path == "args[0]"


@clause("AOT-3", 2)
def test_aot_3_inputs_left_open_take_the_compilers_choice():
    one_device = _aot(Arg.numpy((4,)), Arg.committed((4,), SingleDeviceSharding(3)))
    assert one_device.rule == "AOT-3"
    split = NamedSharding(M2, P("x"))
    call = Call(args=(Arg.numpy((4,)), Arg.committed((4,), split)), outputs=Out((4,)),
                aot_args=(Arg.committed((4,), NamedSharding(M2, P())),
                          Arg.committed((4,), split)))
    assert jit_call(call).accepted   # the oracle says nothing: nothing is compared
    chosen = dataclasses.replace(call, compiler_in=(parse_hlo("{devices=[2]<=[2]}"), None))
    assert jit_call(chosen).rule == "AOT-3"


@clause("AOT-3", 3)
def test_aot_3_committed_arrays_are_in_the_executables_layout():
    lone = SingleDeviceSharding(0)
    with pytest.raises(Rejection):
        check_aot_shardings([("args[0]", lone)], [Arg.committed((4, 4), lone)],
                            layouts=[Layout((1, 0))])
    check_aot_shardings([("args[0]", lone)], [Arg.committed((4, 4), lone)],
                        layouts=[S.AUTO_LAYOUT])


@clause("AOT-3", 4)
def test_aot_3_other_arguments_and_device_are_not_checked():
    split = NamedSharding(M2, P("x"))
    for other in (Arg.numpy((4,)), Arg.uncommitted((4,), SingleDeviceSharding(1))):
        check_aot_shardings([("args[0]", split)], [other])
    check_aot_shardings([("args[0]", split)], [Arg.committed((4,), SingleDeviceSharding(1))],
                        device_or_backend=True)


# --------------------------------------------------------------------------- VAL-5

@clause("VAL-5", 1)
def test_val_5_a_device_appears_once_by_its_id():
    with pytest.raises(Rejection, match=r"^\[VAL-5\]: .* device 3 appears twice"):
        S.DeviceList([S.Device(3), S.Device(1), S.Device(3, "tpu")])
    assert len(S.DeviceList.of_ids([3, 1])) == 2


@clause("VAL-5", 2)
def test_val_5_a_position_is_an_integer_in_range_or_a_slice():
    for devices in (S.DeviceList.of_ids([3, 1, 2]), S.DeviceList(S.Iota((3,)))):
        assert devices[-3] == devices[0] and devices[2] == devices[-1]
        assert devices[1:] == (devices[1], devices[2])
        with pytest.raises(IndexError, match=r"^\[VAL-5\]: position -4 is outside a device "
                                             r"list of 3 devices"):
            devices[-4]
        with pytest.raises(TypeError, match=r"^\[VAL-5\]: .* got 1\.0; the list holds 3"):
            devices[1.0]


# --------------------------------------------------------------------------- SMT-2

def _prove_for_every_shape(a, b, rank, max_dim):
    pytest.importorskip("z3")
    from shardlaw.spec.prove.smt import prove_for_every_shape

    return prove_for_every_shape(a, b, rank=rank, max_dim=max_dim)


@clause("SMT-2", 1)
def test_smt_2_shapes_in_scope_are_bounded_divided_and_may_be_empty():
    split, whole = NamedSharding(M2, P("x")), NamedSharding(M2, P())
    assert _prove_for_every_shape(split, whole, 1, 0).equivalent   # only (0,): both empty
    found = _prove_for_every_shape(split, whole, 1, 2)
    assert not found.equivalent and found.shape == (2,)
    # Dimension 0 is split 4 ways and at most 3 long: only its zero size is in scope, and
    # (0, 2) is still placed otherwise, along dimension 1.
    mesh = Mesh.iota((4, 2), ("x", "y"))
    found = _prove_for_every_shape(NamedSharding(mesh, P("x", "y")),
                                   NamedSharding(mesh, P("x", None)), 2, 3)
    assert not found.equivalent and found.shape == (0, 2)


@clause("SMT-2", 2)
def test_smt_2_shapes_out_of_scope_are_no_counterexample():
    # (1,) is placed otherwise (half a row against the whole), but P("x") does not divide it.
    proved = _prove_for_every_shape(NamedSharding(M2, P("x")), NamedSharding(M2, P()), 1, 1)
    assert proved.equivalent and (proved.rank, proved.max_dim) == (1, 1)


@clause("SMT-2", 3)
def test_smt_2_a_difference_names_the_shape_the_device_and_both_boxes():
    found = _prove_for_every_shape(NamedSharding(MESH, P("x")), NamedSharding(MESH, P("y")),
                                   1, 64)
    assert not found.equivalent and found.box_a != found.box_b
    assert found.box_a == S.box_of(NamedSharding(MESH, P("x")), found.shape, found.device)
    assert found.box_b == S.box_of(NamedSharding(MESH, P("y")), found.shape, found.device)
    one_side = _prove_for_every_shape(NamedSharding(M2, P("x")),
                                      GSPMDSharding(range(1), "{replicated}"), 1, 8)
    assert (one_side.device, one_side.box_b, one_side.shape) == (1, None, (2,))
    assert (found.memory_kind_a, found.memory_kind_b) == (None, None)
    pinned = NamedSharding(M2, P("x"), memory_kind="pinned_host")
    in_memory = _prove_for_every_shape(NamedSharding(M2, P("x")), pinned, 1, 8)
    assert (in_memory.memory_kind_a, in_memory.memory_kind_b) == ("device", "pinned_host")
    assert in_memory.box_a == in_memory.box_b == S.box_of(pinned, in_memory.shape,
                                                          in_memory.device)


# Several processes: a 2 x 4 mesh, devices 2p and 2p+1 owned by process p.
PROCS = Mesh.iota((2, 4), ("x", "y"), devices_per_process=2)
CROSSED = Mesh((2, 4), ("x", "y"),
               S.DeviceList.of_ids([0, 1, 2, 3, 4, 6, 5, 7], devices_per_process=2))


def _refused_by(rule_id, thunk):
    with pytest.raises(Rejection) as refused:
        thunk()
    assert refused.value.rule == rule_id
    return refused.value


@clause("PROC-4", 1)
def test_proc_4_with_no_global_shape_it_is_proc_3s_and_refused_where_unknown():
    s = NamedSharding(PROCS, P("x", "y"))
    assert S.process_local_slices(s, (3, 2), None, 1)[0] == S.global_shape_from_local(
        s, (3, 2), 1) == (6, 4)
    error = _refused_by("PROC-4", lambda: S.process_local_slices(
        NamedSharding(CROSSED, P("x", "y")), (2, 2), None, 0))
    assert isinstance(error, ValueError) and "dimension(s) (1,)" in str(error)


@clause("PROC-4", 2)
def test_proc_4_a_dimension_neither_global_nor_the_process_extent_is_refused():
    s = NamedSharding(PROCS, P(None, "y"))
    assert S.process_local_slices(s, (2, 4), (2, 8), 1)[1] == {
        2: ((0, 2), (0, 2)), 3: ((0, 2), (2, 4))}
    assert S.process_local_slices(s, (2, 8), (2, 8), 1)[1][3] == ((0, 2), (6, 8))
    error = _refused_by("PROC-4", lambda: S.process_local_slices(s, (2, 3), (2, 8), 1))
    assert "along dimension 1" in str(error) and "addresses 4" in str(error)


def _single(arrays, process=1):
    s = NamedSharding(PROCS, P("x", "y"))
    return S.place_single_device_arrays(s, (4, 8), arrays, process)


@clause("PROC-9", 1)
def test_proc_9_as_many_arrays_as_owned_devices():
    assert _single([(3, (2, 2)), (2, (2, 2))]) == {3: ((0, 2), (6, 8)), 2: ((0, 2), (4, 6))}
    assert "owns 2 device(s)" in str(_refused_by("PROC-9", lambda: _single([(2, (2, 2))])))


@clause("PROC-9", 2)
def test_proc_9_on_distinct_devices():
    error = _refused_by("PROC-9", lambda: _single([(2, (2, 2)), (2, (2, 2))]))
    assert "share a device" in str(error)


@clause("PROC-9", 3)
def test_proc_9_on_exactly_the_owned_devices():
    error = _refused_by("PROC-9", lambda: _single([(2, (2, 2)), (4, (2, 2))]))
    assert "not the devices it owns" in str(error)


@clause("PROC-9", 4)
def test_proc_9_each_of_the_shard_shape():
    error = _refused_by("PROC-9", lambda: _single([(2, (2, 2)), (3, (3, 2))]))
    assert "has shape (3, 2)" in str(error) and isinstance(error, ValueError)


@clause("PROC-11", 1)
def test_proc_11_an_array_not_fully_addressed_is_gathered_whole_and_only_tiled():
    s = NamedSharding(PROCS, P("x"))
    assert S.gathered((4, 2), 4, True, 0, s) == ((4, 2), None)
    error = _refused_by("PROC-11", lambda: S.gathered((4, 2), 4, False, 0, s))
    assert "tiled=True" in str(error) and isinstance(error, ValueError)
    mine = NamedSharding(Mesh((2,), ("x",), S.DeviceList.of_ids([0, 1], devices_per_process=2)),
                         P("x"))
    assert S.gathered((4,), 2, False, 0, mine) == ((2, 4), (((0, 1), (0, 4)), ((1, 2), (0, 4))))


@clause("PROC-11", 2)
def test_proc_11_tiled_host_data_is_concatenated_a_scalar_stacked():
    assert S.gathered((2, 3), 3, True, 1)[0] == (6, 3)
    assert S.gathered((2, 3), 3, True, 1)[1][2] == ((4, 6), (0, 3))
    assert S.gathered((), 3, True, 1) == ((3,), (((0, 1),), ((1, 2),), ((2, 3),)))


@clause("PROC-12", 1)
def test_proc_12_more_positions_than_devices_are_refused():
    assert S.process_mesh((3,), ("x",), 2, 2).devices.id_tuple() == (0, 1, 2)
    error = _refused_by("PROC-12", lambda: S.process_mesh((5,), ("x",), 2, 2))
    assert "devices, 4, is less than the product of mesh_shape (5,)" in str(error)
    assert isinstance(error, ValueError)


@clause("PROC-12", 2)
def test_proc_12_create_device_mesh_takes_exactly_as_many():
    assert S.process_mesh((2, 2), ("x", "y"), 2, 2, exact=True).axis_sizes == (2, 2)
    error = _refused_by("PROC-12", lambda: S.process_mesh((3,), ("x",), 2, 2, exact=True))
    assert "needs exactly" in str(error)


def _put(source, target, process=0, shape=(8,)):
    return S.put_array(source, target, shape, process)


def _on(ids, spec, shape=None):
    devices = S.DeviceList.of_ids(ids, devices_per_process=2)
    return NamedSharding(Mesh(shape or (len(ids),), ("x", "y")[:len(shape or (1,))], devices),
                         P(*spec))


@clause("PROC-15", 1)
def test_proc_15_its_own_sharding_gives_the_array_itself():
    s = NamedSharding(PROCS, P("x"))
    assert _put(s, NamedSharding(PROCS, P("x"))).same
    assert not _put(s, NamedSharding(PROCS, P("y"))).same


@clause("PROC-15", 2)
def test_proc_15_the_same_devices_reshard_a_named_sharding_anywhere():
    s = NamedSharding(PROCS, P("x"))
    moved = _put(s, _on([7, 6, 5, 4, 3, 2, 1, 0], ("x",)), process=3)
    assert [shard.device for shard in moved.shards] == [7, 6]
    single = S.SingleDeviceSharding(S.Device(1, "cpu", 0))
    assert _put(single, _on([1], ("x",)), process=0).shards[0].device == 1
    error = _refused_by("PROC-15", lambda: _put(single, _on([1], ("x",)), process=1))
    assert isinstance(error, AssertionError)


@clause("PROC-15", 3)
def test_proc_15_one_hlo_sharding_over_other_processes_needs_a_cross_host_transfer():
    mine, theirs = _on([0, 1], (None,)), _on([2, 3], (None,))
    error = _refused_by("PROC-15", lambda: _put(mine, theirs))
    assert "cross-host transfer" in str(error) and isinstance(error, ValueError)


@clause("PROC-15", 4)
def test_proc_15_a_target_the_process_does_not_fully_address_is_refused():
    whole, half = NamedSharding(PROCS, P("x")), _on([0, 2], ("x",))
    assert "does not fully address the array" in str(
        _refused_by("PROC-15", lambda: _put(whole, half)))
    mine = _on([0, 1], ("x",))
    error = _refused_by("PROC-15", lambda: _put(mine, _on([0, 2], (None,))))
    assert "devices it addresses" in str(error)


@clause("PROC-15", 5)
def test_proc_15_a_target_it_fully_addresses_needs_an_array_it_fully_addresses():
    assert _put(_on([0, 1], ("x",)), _on([0], (None,))).shards[0].box == ((0, 8),)
    error = _refused_by("PROC-15", lambda: _put(NamedSharding(PROCS, P("x")), _on([0, 1],
                                                                                  ("x",))))
    assert isinstance(error, NotImplementedError)


@clause("PROC-16", 1)
def test_proc_16_an_array_spread_over_other_processes_is_refused():
    spread = NamedSharding(PROCS, P("x"))
    for device in (S.Device(0), None):
        error = _refused_by("PROC-16", lambda: S.put_on_device(spread, device, (8,), 0))
        assert isinstance(error, ValueError)
    assert S.put_on_device(_on([0, 1], ("x",)), S.Device(3, "cpu", 1), (8,), 0).shards == ()


@clause("PROC-16", 2)
def test_proc_16_a_single_device_array_does_not_move_to_another_process():
    one = S.SingleDeviceSharding(S.Device(0))
    for process in (0, 1):
        error = _refused_by("PROC-16", lambda: S.put_on_device(one, S.Device(3, "cpu", 1),
                                                               (8,), process))
        assert type(error).__mro__[1] is RuntimeError or isinstance(error, RuntimeError)
    assert S.put_on_device(one, S.Device(1), (8,), 1).shards == ()


@clause("PROC-16", 3)
def test_proc_16_its_own_device_is_refused_where_not_owned():
    one = S.SingleDeviceSharding(S.Device(1))
    assert S.put_on_device(one, S.Device(1), (8,), 0).shards[0].device == 1
    _refused_by("PROC-16", lambda: S.put_on_device(one, S.Device(1), (8,), 1))


@clause("PROC-16", 4)
def test_proc_16_with_no_device_the_array_is_given_back():
    one = S.SingleDeviceSharding(S.Device(1))
    assert S.put_on_device(one, None, (8,), 1) == S.Placed((), same=True)
    assert S.put_on_device(_on([2, 3], ("x",)), None, (8,), 1).same


# --------------------------------------------------------------------------- PROG-5

def _typed_call(types, spec, args, compiler=None):
    """A call returning one (8, 8) result typed over a (2, 4) mesh of ``types``."""
    mesh = Mesh.iota((2, 4), ("x", "y"), types)
    out = Out((8, 8), mesh=mesh.abstract, spec=spec)
    return mesh, Call(args=args(mesh), outputs=out, compiler=compiler)


@clause("PROG-5", 1)
def test_prog5_a_result_over_explicit_axes_comes_back_on_its_type():
    from shardlaw.spec.core.values import AxisType
    explicit = (AxisType.Explicit, AxisType.Explicit)
    mesh, call = _typed_call(explicit, P("y"), lambda m: (
        Arg.committed((8, 8), NamedSharding(m, P("x"))),))
    verdict = jit_call(call)
    assert verdict.accepted and "PROG-5" in verdict.trace
    assert verdict.out_shardings == (NamedSharding(mesh, P("y", None)),)


@clause("PROG-5", 2)
def test_prog5_over_a_mixed_mesh_the_compiler_places_what_the_type_leaves_whole():
    from shardlaw.spec.core.values import AxisType
    from shardlaw.spec.jit.recovery import typed_result
    from shardlaw.spec.placement.blocks import to_hlo
    mixed = (AxisType.Explicit, AxisType.Auto)
    mesh = Mesh.iota((2, 4), ("x", "y"), mixed)
    out = Out((8, 8), mesh=mesh.abstract, spec=P("x"))
    typed = NamedSharding(mesh, P("x", None))
    assert typed_result(out, mesh.devices, to_hlo(typed, 2)) == typed
    chosen = NamedSharding(mesh, P("x", "y"))
    assert typed_result(out, mesh.devices, to_hlo(chosen, 2)) == chosen
    assert typed_result(out, mesh.devices, None) is S.UNSPECIFIED


@clause("PROG-5", 3)
def test_prog5_the_device_assignment_must_have_the_types_mesh_size():
    from shardlaw.spec.core.values import AxisType
    mixed = (AxisType.Explicit, AxisType.Auto)
    _, call = _typed_call(mixed, P(), lambda m: (Arg.numpy((8, 8)),))
    verdict = jit_call(call)
    assert (verdict.rule, verdict.stage, verdict.jax_error) == ("PROG-5", "lower", "ValueError")
    assert "cannot reshape array of size 1 into shape (2,4)" in verdict.message


def _block_call(**fields):
    fields.setdefault("args", (Arg.numpy((8, 4)),))
    fields.setdefault("outputs", Out((8, 4), source=0))
    return Call(resource_mesh=MESH, **fields)


@clause("PJIT-1", 1)
def test_pjit1_the_block_is_read_as_a_context_mesh_and_stays_a_block():
    # Read as jax.set_mesh: a result the compiler placed is typed over the block's mesh.
    call = _block_call(compiler=(parse_hlo("{replicated}"),))
    assert jit_call(call).out_shardings == (NamedSharding(MESH, P()),)
    # A block and a jax.set_mesh context on one call describe no call JAX can make.
    with pytest.raises(Rejection) as raised:
        Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), resource_mesh=MESH, context_mesh=MESH)
    assert raised.value.rule == "CALL-0"


@clause("PJIT-1", 2)
def test_pjit1_the_blocks_devices_are_the_programs():
    verdict = jit_call(_block_call())
    assert verdict.device_assignment == tuple(range(8)) and verdict.out_committed == (True,)
    lone = Arg.committed((8, 4), SingleDeviceSharding(3))
    refused = jit_call(_block_call(args=(lone,)))
    assert (refused.rule, refused.error_type) == ("DA-1", "ValueError")
    assert jit_call(_block_call(args=(lone,)), jax="0.4.13").rule == "DA-1"


@clause("PJIT-2", 1)
def test_pjit2_a_none_leaf_is_replicated_over_the_block():
    for options in (JitOptions(in_shardings=None), JitOptions(in_shardings=(None,))):
        for jax in ("0.10.2", "0.4.13"):
            verdict = jit_call(_block_call(options=options, compiler=(parse_hlo("{replicated}"),)),
                               jax=jax)
            assert verdict.out_shardings == (NamedSharding(MESH, P()),), (options, jax)
    # Outside a block a None leaf is left to jit: the result stays on one device.
    plain = jit_call(Call(args=(Arg.numpy((8, 4)),), outputs=Out((8, 4), source=0),
                          options=JitOptions(in_shardings=None)))
    assert plain.device_assignment == (0,)


@clause("PJIT-2", 2)
def test_pjit2_a_spec_is_resolved_against_the_block():
    verdict = jit_call(_block_call(options=JitOptions(out_shardings=P("y"))))
    assert verdict.out_shardings == (NamedSharding(MESH, P("y")),)
    unknown = jit_call(_block_call(options=JitOptions(in_shardings=P("z"))))
    assert not unknown.accepted and unknown.error_type == "ValueError"
    outside = jit_call(Call(args=(Arg.numpy((8, 4)),), outputs=Out((8, 4)),
                            options=JitOptions(in_shardings=P("x"))))
    assert (outside.rule, outside.error_type) == ("JIT-3", "RuntimeError")
