"""Hostile input refused at its root, outside the value layer (issue 13).

The fuzz layer (``shardlaw.properties.fuzz``) found bare exceptions rooted in the placement
queries, the jit pipeline, the cache model and the vector reader. Each is pinned here with
the rule that now refuses it: the message starts with that rule's ID, names the argument,
and shows the value bounded, however deep or large it is.
"""

from __future__ import annotations

import pytest

import shardlaw.spec as S
from shardlaw.spec import (
    CallSite, Device, Mesh, NamedSharding, P, Rejection, SingleDeviceSharding, explain_cache,
    jit_call, load_vector,
)
from shardlaw.spec.core.dims import MAX_RANK
from shardlaw.spec.jit.cache import check_sequence, policy_classes
from shardlaw.spec.placement.blocks import tiles_per_dimension, to_hlo
from shardlaw.spec.core.rules import explain
from shardlaw.spec.vectors.jit_vectors import dump_vector, load_any
from shardlaw.spec.vectors.sequence_vectors import dump_sequence, load_sequence
from shardlaw.spec.vectors.vector_checks import MAX_DEPTH

SHARDING = NamedSharding(Mesh.iota((2, 2), ("x", "y")), P("x"))
CALL = S.Call(args=(S.Arg.numpy((4,)),), outputs=S.Out((4,)))


def _deep(depth: int, kind=list):
    value = 2
    for _ in range(depth):
        value = kind([value])
    return value


def _refused(build, rule: str, shows: str, error_type: type[Exception]) -> str:
    """The message of the refusal ``build()`` raises: by ``rule``, of ``error_type``, bounded,
    showing ``shows``."""
    with pytest.raises(Rejection) as caught:
        build()
    rejection = caught.value
    message = rejection.args[0]
    assert rejection.rule == rule, message
    assert isinstance(rejection, error_type), type(rejection).__mro__
    assert message == explain(rejection.failure, rejection.path)
    assert message.startswith(f"[{rule}]"), message
    assert shows in message, (shows, message)
    assert len(message) < 3000
    return message


# --------------------------------------------------------------------------- placement

def test_a_rank_is_checked_as_every_size_is():
    """replication_factor(s, 10**20) overflowed building (1,) * ndim; a rank is VAL-1's."""
    _refused(lambda: S.replication_factor(SHARDING, 10**20), "VAL-1", "2**63 - 1",
             OverflowError)
    _refused(lambda: to_hlo(SHARDING, 2**63), "VAL-1", "a rank must be at most", OverflowError)
    _refused(lambda: S.replication_factor(SHARDING, -1), "VAL-1", "-1", ValueError)
    _refused(lambda: tiles_per_dimension(SHARDING, "2"), "VAL-1", "'2'", TypeError)
    assert S.replication_factor(SHARDING, 2) == 2


@pytest.mark.parametrize("rank", [MAX_RANK + 1, 10**8, 2**33, 2**40, 2**63 - 1])
def test_a_rank_given_as_a_number_is_bounded(rank):
    """Ranks that passed VAL-1 as int64 values built one entry per dimension: 10**8 took
    seconds and gigabytes, 2**33 and more raised MemoryError. MAX_RANK bounds them."""
    for query in (S.replication_factor, tiles_per_dimension, to_hlo):
        _refused(lambda: query(SHARDING, rank), "VAL-1", f"at most {MAX_RANK:,}", OverflowError)
    assert len(S.tiles_per_dimension(SHARDING, MAX_RANK)) == 2


@pytest.mark.parametrize("query", [
    lambda x: S.placement_equivalent(x, SHARDING, (2,)),
    lambda x: S.placement_equivalent(SHARDING, x, (2,)),
    lambda x: S.addressable_device_ids(x, 0),
    lambda x: S.shard_shape(x, (2,)),
    lambda x: S.device_ids(x),
    lambda x: S.is_fully_replicated(x),
    lambda x: S.replication_factor(x, 1),
], ids=["placement_equivalent a", "placement_equivalent b", "addressable_device_ids",
        "shard_shape", "device_ids", "is_fully_replicated", "replication_factor"])
@pytest.mark.parametrize("value", [3, (), "x", P("x"), _deep(3000)],
                         ids=["int", "tuple", "str", "spec", "deep list"])
def test_a_placement_query_refuses_what_is_not_a_sharding(query, value):
    """They read .device_list of anything (AttributeError in _device_list); now VAL-8."""
    _refused(lambda: query(value), "VAL-8",
             "the sharding must be a NamedSharding, SingleDeviceSharding or GSPMDSharding",
             TypeError)


def test_placement_equivalent_refuses_a_shape_of_the_wrong_type():
    """The fuzz's example: a single-device sharding against () for the shape ()."""
    lone = SingleDeviceSharding(Device(3))
    _refused(lambda: S.placement_equivalent(lone, (), ()), "VAL-8", "got ()", TypeError)
    assert S.placement_equivalent(lone, SingleDeviceSharding(3), ())


def test_a_lowered_sharding_given_by_the_caller_is_an_hlo_sharding():
    """tiles_per_dimension(..., lowered=-243) read .num_devices of an int (_acts_replicated)."""
    _refused(lambda: tiles_per_dimension(SHARDING, 1, lowered=-243), "VAL-8",
             "the lowered sharding must be an HloSharding, got -243", TypeError)
    _refused(lambda: tiles_per_dimension((), 1, lowered=to_hlo(SHARDING, 1)), "VAL-8",
             "got ()", TypeError)
    _refused(lambda: tiles_per_dimension((), {"*"}, lowered=-243), "VAL-1", "{'*'}", TypeError)
    _refused(lambda: S.shard_shape(SHARDING, (4,), lowered="{replicated}"), "VAL-8",
             "'{replicated}'", TypeError)
    assert tiles_per_dimension(SHARDING, 1, lowered=to_hlo(SHARDING, 1)) == ((2,), 2)


def test_a_process_index_is_an_integer():
    _refused(lambda: S.addressable_device_ids(SHARDING, "0"), "VAL-1", "'0'", TypeError)
    assert S.addressable_device_ids(SHARDING, 0) == (0, 1, 2, 3)


# --------------------------------------------------------------------------- jit_call

@pytest.mark.parametrize("value, shows", [
    (3, "got 3"), ({"a": {"b": [1]}}, "{'a': {'b': [1]}}"), ((), "got ()"),
    (_deep(3000, tuple), "nested deeper"), (CallSite(CALL), "<f via w>"),
], ids=["int", "nested dict", "empty tuple", "3,000-deep tuple", "a call site"])
def test_jit_call_refuses_what_is_not_a_call(value, shows):
    """jit_call read .normal of anything (AttributeError at jit.py); no call, no verdict."""
    message = _refused(lambda: jit_call(value), "CALL-0",
                       "the call jit_call is given must be a Call", ValueError)
    assert shows in message
    with pytest.raises(Rejection) as caught:
        jit_call(value)
    assert caught.value.stage == "description"
    assert jit_call(CALL).accepted


# --------------------------------------------------------------------------- the cache model

@pytest.mark.parametrize("model", [explain_cache, policy_classes], ids=["explain_cache",
                                                                         "policy_classes"])
@pytest.mark.parametrize("value, shows", [
    (7, "got 7 (int)"), (None, "got None (NoneType)"), ("ab", "'ab' (str)"),
    ({"a": 1}, "(dict)"), (3.5, "3.5 (float)"),
], ids=["int", "None", "str", "dict", "float"])
def test_a_call_sequence_is_an_iterable_of_call_sites(model, value, shows):
    """explain_cache(7) / policy_classes(7): TypeError iterating in _verdicts; now CACHE-0."""
    _refused(lambda: model(value), "CACHE-0",
             "a call sequence must be an iterable of CallSite values", TypeError)
    _refused(lambda: model(value), "CACHE-0", shows, TypeError)


@pytest.mark.parametrize("value", [7, None, 3.5])
def test_a_sequence_vector_is_written_from_an_iterable_of_call_sites(value):
    """dump_sequence(7) raised TypeError iterating; it reads its sites as explain_cache does."""
    _refused(lambda: dump_sequence(value), "CACHE-0", "an iterable of CallSite values", TypeError)
    assert len(dump_sequence(CallSite(CALL) for _ in range(2))["sequence"]) == 2


def test_a_sequence_that_fails_while_read_is_refused():
    def failing():
        yield CallSite(CALL)
        raise OSError("gone")
    _refused(lambda: explain_cache(failing()), "CACHE-0", "generator", TypeError)


def test_an_entry_that_is_not_a_call_site_is_shown_bounded():
    """A 3,000-deep tuple as an entry: RecursionError in its repr inside check_sequence."""
    _refused(lambda: explain_cache([CallSite(CALL), _deep(3000, tuple)]), "CACHE-0",
             "call 1: expected a CallSite, got ((((", TypeError)
    _refused(lambda: policy_classes([3]), "CACHE-0", "call 0: expected a CallSite, got 3",
             TypeError)


def test_a_sequence_is_refused_at_its_first_entry_that_is_not_a_call_site():
    """explain_cache(DeviceList of 2**20 ids) read every device before refusing the first
    (past the fuzzer's 10 s under load); it now stops at entry 0."""
    huge = S.DeviceList(S.Iota((1024, 1024), (1, 0)))
    _refused(lambda: explain_cache(huge), "CACHE-0", "call 0: expected a CallSite, got Device(0)",
             TypeError)

    def endless():
        while True:
            yield 5
    _refused(lambda: policy_classes(endless()), "CACHE-0", "call 0", TypeError)


def test_check_sequence_reads_a_generator_once():
    sites = check_sequence(CallSite(CALL) for _ in range(2))
    assert len(sites) == 2
    assert [row.outcome[0] for row in explain_cache(CallSite(CALL) for _ in range(2))] == [
        "miss", "hit"]


def test_a_call_site_holds_a_call_and_names():
    """A CallSite that exists can be run: its call is a Call (CALL-0), its names str (CACHE-0)."""
    _refused(lambda: CallSite(3), "CALL-0", "a call site's call must be a Call, got 3",
             ValueError)
    _refused(lambda: CallSite(CALL, ["f"]), "CACHE-0",
             "a call site's function must be a name (a str), got ['f'] (list)", TypeError)
    _refused(lambda: CallSite(CALL, "f", None), "CACHE-0", "wrapper must be a name", TypeError)
    assert CallSite(CALL, "g", "w2").wrapper == "w2"


# --------------------------------------------------------------------------- vectors

@pytest.mark.parametrize("read", [load_vector, load_sequence, load_any],
                         ids=["load_vector", "load_sequence", "load_any"])
@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "[" * 100_000,
                                  '{"a": ' * 2000 + "1" + "}" * 2000],
                         ids=["5,000-deep array", "100,000 opening brackets",
                              "2,000-deep object"])
def test_deep_json_text_is_refused_before_it_is_parsed(read, text):
    """json.loads raised RecursionError (it escaped load_vector); now VEC-1 names the depth."""
    message = _refused(lambda: read(text), "VEC-1",
                       f"JSON text nested at most {MAX_DEPTH} deep", ValueError)
    assert f"text that nests too deep: an array or object at depth {MAX_DEPTH + 1}" in message
    _refused(lambda: read(text.encode()), "VEC-1", f"at depth {MAX_DEPTH + 1}", ValueError)


def test_the_depth_counts_brackets_outside_strings_only():
    inside = '{"format": "' + "[" * 5000 + '"}'
    _refused(lambda: load_vector(inside), "VEC-1", "with the key", ValueError)
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    _refused(lambda: load_vector(at_limit), "VEC-1", "a vector (a JSON object)", ValueError)
    unterminated = '"' + "[" * 300
    _refused(lambda: load_vector(unterminated), "VEC-1", "Unterminated string", ValueError)


@pytest.mark.parametrize("read", [load_vector, load_sequence, load_any],
                         ids=["load_vector", "load_sequence", "load_any"])
def test_a_deep_json_value_is_refused_at_its_path(read):
    """A 999-deep list given as an object: RecursionError in _show's json.dumps."""
    message = _refused(lambda: read(_deep(999)), "VEC-1",
                       f"JSON nested at most {MAX_DEPTH} deep", ValueError)
    assert f"at {'[0]' * MAX_DEPTH}:" in message
    assert f"a list that nests too deep (more than {MAX_DEPTH} levels)" in message
    inner = {"format": "shardlaw-jit-call", "call": {"args": _deep(150)}}
    message = _refused(lambda: read(inner), "VEC-1", "at call.args[0][0]", ValueError)
    cycle: list = []
    cycle.append(cycle)
    _refused(lambda: read(cycle), "VEC-1", f"nested at most {MAX_DEPTH} deep", ValueError)


def test_a_key_that_is_not_a_string_is_shown_in_the_path():
    _refused(lambda: load_vector({(1, 2): 3}), "VEC-1", "at [[1, 2]]:", ValueError)


def test_a_call_nested_past_the_depth_is_not_written():
    """A call the reader would refuse for its depth is VEC-2: refused while it is written
    (the writers recursed once per level: a 3,000-deep static value was a RecursionError),
    or when it does not read back."""
    arg = S.Arg.numpy((4,))
    for too_deep in (S.Call(args=(_nest(arg, 60),), outputs=S.Out((4,))),
                     S.Call(args=(S.Static(_deep(3000, tuple)),), outputs=S.Out((4,)),
                            options=S.JitOptions(static_argnums=(0,)))):
        message = _refused(lambda: dump_vector(too_deep), "VEC-2",
                           f"it must be nested at most {MAX_DEPTH} deep", TypeError)
        assert "at call.args[0]" in message
    just_past = S.Call(args=(_nest(arg, 49),), outputs=S.Out((4,)))
    _refused(lambda: dump_vector(just_past), "VEC-2", "does not read back", ValueError)
    fits = S.Call(args=(_nest(arg, 40),), outputs=S.Out((4,)))
    assert load_vector(dump_vector(fits)).call == fits


def test_dump_vector_shows_what_is_not_a_call_bounded():
    """dump_vector of a 3,000-deep list: RecursionError in repr() of its argument."""
    _refused(lambda: dump_vector(_deep(3000)), "VEC-2",
             f"it must be a Call, got a list that nests too deep (more than {MAX_DEPTH} "
             "levels)", TypeError)
    _refused(lambda: dump_vector(CALL, _deep(3000)), "VEC-2", "it must be a Verdict or None",
             TypeError)


def _nest(leaf, depth: int):
    for _ in range(depth):
        leaf = (leaf,)
    return leaf


def test_hlo_equal_refuses_what_is_not_an_hlo_sharding():
    from shardlaw.spec import hlo_equal
    from shardlaw.spec.core.hlo import parse_hlo
    from shardlaw.spec.core.rules import Rejection
    for a, b in ((parse_hlo("{replicated}"), 3), (0.001, "x"), (None, parse_hlo("{replicated}"))):
        with pytest.raises(Rejection) as caught:
            hlo_equal(a, b)
        assert caught.value.failure.rule == "VAL-8" and "an HloSharding" in str(caught.value)


def test_a_call_nested_too_deep_is_refused_before_anything_walks_it():
    from shardlaw.spec import Arg, Call, Out, jit_call
    from shardlaw.spec.jit.call import MAX_NESTING
    from shardlaw.spec.core.rules import Rejection
    deep = Arg.numpy((2,))
    for _ in range(1500):
        deep = (deep,)
    with pytest.raises(Rejection) as caught:
        Call(args=(deep,), outputs=Out((2,)))
    assert caught.value.failure.rule == "CALL-0" and f"{MAX_NESTING} containers" in str(caught.value)
    shallow = Arg.numpy((2,))
    for _ in range(MAX_NESTING - 2):
        shallow = [shallow]
    assert jit_call(Call(args=(shallow,), outputs=Out((2,)))).accepted


@pytest.mark.parametrize("digits", [101, 5000])
def test_a_vector_with_an_integer_too_long_is_refused_before_it_is_converted(digits):
    """load_vector('9' * 5000): Python refuses to convert more than 4,300 digits
    (a bare ValueError in the deep fuzz run); every integer of a vector is an int64."""
    for text in ("9" * digits, '{"format": ' + "-" + "1" * digits + "}"):
        _refused(lambda: load_vector(text), "VEC-1", f"an integer of {digits:,} digits",
                 ValueError)
    # an int64 that is merely too large for its place is read, and refused for what it is
    with pytest.raises(Rejection, match="VEC-1"):
        load_vector('{"format": "shardlaw-jit-call", "version": ' + "9" * 60 + ', "jax": "0.10.2"}')


def test_a_sharding_in_json_with_an_integer_too_long_is_a_command_line_error():
    from shardlaw.sharding_text import ShardingTextError, parse_sharding
    with pytest.raises(ShardingTextError, match="cannot read JSON"):
        parse_sharding('{"type": "SingleDeviceSharding", "device": ' + "9" * 5000 + "}")


def test_a_tree_nested_in_dicts_is_written_in_linear_time():
    """show_tree wrote a dict's children twice: a 30-deep dict of dicts in a WSC-2 refusal
    took 2**30 steps (a hang in the fuzz ci slice)."""
    values = []
    for _ in range(150):
        values = {"a": values}
    message = _refused(lambda: S.with_sharding_constraint(values, ()), "WSC-2",
                       "must be a tree prefix of its values {'a': {'a':", ValueError)
    assert message.count("{'a'") <= 150


def test_mesh_axis_names_are_refused_at_their_first_bad_entry():
    """Mesh.iota(sizes, DeviceList of 2**20 ids): the names were all read (a million Device
    values) before the first was refused; past 10 s in the deep fuzz run."""
    huge = S.DeviceList(S.Iota((1024, 1024), (1, 0)))
    _refused(lambda: Mesh.iota((2,), huge), "VAL-3", "got Device(0)", TypeError)
    names = tuple(f"a{i}" for i in range(50_000))
    assert S.core.values.check_axis_names(names + ("z",)) == names + ("z",)  # linear, not quadratic
    _refused(lambda: S.core.values.check_axis_names(names + ("a7",)), "VAL-3",
             "'a7' appears twice", ValueError)


@pytest.mark.parametrize("devices", [S.DeviceList.of_ids([3, 1, 2]),
                                     S.DeviceList(S.Iota((3,))),
                                     S.DeviceList(S.Iota((1024, 1024), (1, 0)))])
def test_a_device_list_is_indexed_by_a_position_in_it(devices):
    """DeviceList[i] raised a bare IndexError or TypeError from the tuple it holds (11 inputs
    of the fresh-seed fuzz run, issue 25); VAL-5 (C2) refuses, naming the index and N."""
    n = len(devices)
    _refused(lambda: devices[n], "VAL-5", f"position {n} is outside a device list of {n} "
             "devices", IndexError)
    _refused(lambda: devices[-n - 1], "VAL-5", f"position {-n - 1} is outside", IndexError)
    _refused(lambda: devices[2**70], "VAL-5", "position 1180591620717411303424 is outside",
             IndexError)
    for index in (1.5, "0", None, (0,), [0]):
        _refused(lambda: devices[index], "VAL-5",
                 f"got {index!r}; the list holds {n} devices", TypeError)
    # What a Python sequence and JAX's DeviceList take still works.
    assert devices[-1] == devices[n - 1] and devices[True] == devices[1]
    assert devices[:2] == (devices[0], devices[1])
