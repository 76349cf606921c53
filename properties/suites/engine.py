"""The engine against jax.jit and the spec, call for call.

``test_engine_agrees_with_jax_and_the_spec`` draws whole calls (:func:`calls`), runs each
through a fresh ``jax.jit`` and a fresh ``shardlaw.engine.jit`` on the same inputs, and
requires: the same acceptance and built-in exception type as JAX, the spec's rule ID,
path, stage, JAX class and stated facts on every rejection (where the spec agrees with
JAX), and for accepted calls the same result sharding types, placements, meshes, memory
kinds, committed flags and values — and no difference between what the engine predicted
and what JAX compiled. The pinned examples
reach each rejecting rule on purpose; the last test requires that every rejecting rule
was seen refusing a call through the engine.

Part of the ``engine`` suite of ``shardlaw campaign``; ``tests/test_engine_differential.py``
runs it in the project's own ``pytest`` run.
"""

import collections
import dataclasses

from hypothesis import given, settings

import shardlaw.spec as S
from shardlaw.properties.call_strategies import calls
from shardlaw.properties.engine_harness import (compare_engine, refusal_differences,
                                                stated_values)
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples
from shardlaw.spec import Arg, Call, JitOptions, Out

# rule -> how often the engine refused a call by it / accepted calls
ENGINE_REFUSALS: collections.Counter = collections.Counter()
ACCEPTED = collections.Counter()

MESH = S.Mesh.iota((2, 4), ("x", "y"))
NS = S.NamedSharding(MESH, S.P("x", "y"))

# The rules the engine must have been seen refusing by (RES-2 needs several processes).
REJECTING = ("JIT-1", "JIT-2", "JIT-3", "JIT-4", "TREE-1", "TREE-2", "FIT-1", "RES-1",
             "RES-3", "RES-4", "RES-5", "DA-1", "DA-2", "DA-4", "OUT-2", "AOT-1", "AOT-2",
             "AOT-3", "LAY-1", "LAY-4", "LAY-5")


def _agree(call):
    verdict, theirs, mine, problems, spec_agrees = compare_engine(call)
    assert not problems, "\n".join(problems) + f"\ncall: {call}\nspec: {verdict}"
    error = mine.failure
    if error is not None:
        ENGINE_REFUSALS[error.rule] += 1
    else:
        ACCEPTED["calls"] += 1
    return verdict, mine


@checks("JIT-1", "JIT-2", "JIT-3", "JIT-4", "JIT-5", "TREE-1", "TREE-2", "FIT-1", "RES-1",
        "RES-3", "RES-4", "RES-5", "KEEP-1", "DA-1", "DA-2", "DA-3", "DA-4", "EXE-1", "EXE-2",
        "OUT-1", "OUT-2", "OUT-3", "AOT-1", "AOT-2", "AOT-3", "LAY-1", "LAY-2", "LAY-3",
        "LAY-4", "LAY-5")
@given(calls(layouts=True))
@settings(max_examples=examples(120))
def test_engine_agrees_with_jax_and_the_spec(call):
    _agree(call)


def _rule(call):
    _, mine = _agree(call)
    return None if mine.failure is None else mine.failure.rule


def _pinned_cases() -> list:
    """(call, the rule the engine refuses it by, or None) for each rejecting rule."""
    return _pinned_before_assignment() + _pinned_from_assignment()


def _pinned_before_assignment() -> list:
    """The options, the trees, the fit and the resolution (JIT, TREE, FIT, RES)."""
    x = (Arg.numpy((8, 8)),)
    pinned = S.NamedSharding(MESH, S.P("x"), memory_kind="pinned_host")
    return [
        (Call(args=x, outputs=Out((8, 8)), options=JitOptions(device=1, in_shardings=NS)), "JIT-1"),
        (Call(args=x, outputs=Out((8, 8)), options=JitOptions(in_shardings=("x",))), "JIT-2"),
        (Call(args=x, outputs=Out((8, 8)), options=JitOptions(in_shardings=S.P("x"))), "JIT-3"),
        (Call(args=x, kwargs={"k": Arg.numpy((2,))}, outputs=Out((8, 8)),
              options=JitOptions(in_shardings=(NS,))), "JIT-4"),
        (Call(args=x, outputs=Out((8, 8)), options=JitOptions(in_shardings=(None, None))),
         "TREE-1"),
        (Call(args=x, outputs=Out((8, 8)), options=JitOptions(out_shardings=(None, None))),
         "TREE-2"),
        (Call(args=x, outputs=Out((8, 8)), options=JitOptions(
            in_shardings=S.NamedSharding(S.Mesh.iota((3,), ("z",)), S.P("z")))), "FIT-1"),
        (Call(args=(Arg.uncommitted((8, 8), NS),), outputs=Out((8, 8))), "RES-1"),
        (Call(args=(Arg.committed((8, 8), pinned),), outputs=Out((8, 8)),
              options=JitOptions(in_shardings=S.NamedSharding(MESH, S.P("x")))), "RES-3"),
        (Call(args=(Arg.committed((8, 8), NS),), outputs=Out((8, 8)),
              options=JitOptions(in_shardings=S.NamedSharding(MESH, S.P("y", "x")))), "RES-4"),
        (Call(args=(Arg.committed((6,), S.NamedSharding(
            S.Mesh.iota((3,), ("a",)), S.P(), memory_kind="pinned_host")),),
              outputs=Out((6,)), options=JitOptions(device=0)), "RES-5"),
    ]


def _pinned_from_assignment() -> list:
    """The device assignment, the results, the compiled executable and the layouts (DA,
    OUT, AOT, LAY), and calls the engine accepts."""
    x = (Arg.numpy((8, 8)),)
    reversed_mesh = S.Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
    gspmd = S.GSPMDSharding(MESH.devices, "{devices=[2,4]<=[8]}")
    mesh42 = S.Mesh.iota((4, 2), ("x", "y"))
    small = S.NamedSharding(S.AbstractMesh((2,), ("x",)), S.P())
    big = S.NamedSharding(S.AbstractMesh((4,), ("x",)), S.P())
    four = S.NamedSharding(S.Mesh.iota((4,), ("x",)), S.P())
    base = Call(args=(Arg.committed((8, 8), NS),), outputs=Out((8, 8)))
    return [
        (Call(args=(Arg.committed((8, 8), NS), Arg.committed((8, 8), S.NamedSharding(
            reversed_mesh, S.P()))), outputs=Out((8, 8))), "DA-1"),
        (Call(args=(Arg.numpy((8,)), Arg.committed((8,), four)), outputs=Out((8,)),
              options=JitOptions(in_shardings=(small, None))), "DA-2"),
        (Call(args=(Arg.numpy((8,)), Arg.committed((8,), four)), outputs=Out((8,)),
              options=JitOptions(in_shardings=(big, None))), None),
        (Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), options=JitOptions(
            in_shardings=S.NamedSharding(S.AbstractMesh((2,), ("x",)), S.P("x")))), "DA-4"),
        (Call(args=(Arg.committed((8,), S.NamedSharding(mesh42, S.P("x"))),
                    Arg.committed((8, 8), gspmd)), outputs=Out((8, 8), source=1)), "OUT-2"),
        (dataclasses.replace(base, aot_args=(Arg.committed((8, 8), NS), Arg.numpy((2,)))),
         "AOT-1"),
        (dataclasses.replace(base, aot_args=(Arg.committed((8, 8), NS, "int32"),)), "AOT-2"),
        (dataclasses.replace(base, aot_args=(Arg.committed((8, 8), S.NamedSharding(
            reversed_mesh, S.P("x", "y"))),)), "AOT-3"),
        (Call(args=(Arg.committed((8, 8), NS),), outputs=Out((8, 8)), options=JitOptions(
            in_shardings=S.Format(S.Layout((1, 0)), NS))), "LAY-1"),
        (Call(args=(Arg.committed((8, 8), NS, layout=S.Layout((1, 0))),), outputs=Out((8, 8)),
              options=JitOptions(in_shardings=S.Format(S.Layout((1, 0)), NS))), None),
        (Call(args=x, outputs=Out((8, 8)), options=JitOptions(
            in_shardings=S.Format(S.Layout((0,)), NS))), "LAY-4"),
        (Call(args=x, outputs=Out((8, 8)), options=JitOptions(
            out_shardings=S.Format(S.Layout((1, 0)), NS))), None),
        (Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), options=JitOptions(
            in_shardings=S.Format(S.Layout((0,)), small))), "LAY-5"),
        (Call(args=(Arg.committed((8, 8), NS), Arg.scalar()),
              outputs=(Out((8, 8), source=0), Out(()))), None),
        (Call(args=(Arg.committed((8, 8), NS), Arg.committed((8,), S.SingleDeviceSharding(3))),
              outputs=Out((8, 8), source=0), uses=(True, False)), None),
        (Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8), source=0), context_mesh=MESH,
              options=JitOptions(in_shardings=S.P("x"))), None),
    ]


def test_pinned_calls_reach_every_rule():
    for call, rule_id in _pinned_cases():
        assert _rule(call) == rule_id, call


def test_the_refusals_facts_are_compared_not_only_their_rule():
    """The harness holds the engine's refusal to the spec's path, stage, JAX class and facts."""
    reversed_mesh = S.Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
    call = Call(args=(Arg.committed((8, 8), NS), Arg.committed((8, 8), S.NamedSharding(
        reversed_mesh, S.P()))), outputs=Out((8, 8)))
    verdict, _, mine, problems, spec_agrees = compare_engine(call)
    error = mine.failure
    assert (verdict.rule, error.rule, problems, spec_agrees) == ("DA-1", "DA-1", [], True)
    assert ("second_devices", (7, 6, 5, 4, 3, 2, 1, 0)) in stated_values(verdict.facts)
    assert refusal_differences(verdict, error) == []
    # The same refusal about another argument, or in words that leave out a device list.
    assert refusal_differences(verdict, error.at("args[0]")) == [
        "DA-1: path is 'args[1]' in the spec, 'args[0]' in the engine"]
    reworded = type(error)(error.rule, error.message.replace("[7, 6, 5, 4, 3, 2, 1, 0]",
                                                             "another order"), error.path)
    assert [p.split(":")[1] for p in refusal_differences(verdict, reworded)] == [
        " the engine's words do not state the fact second_devices = 7, 6, 5, 4, 3, 2, 1, 0"]


def test_every_rejecting_rule_refused_a_call_through_the_engine():
    """Run last: the random and pinned calls together reached every rejecting rule."""
    if not ENGINE_REFUSALS:
        test_pinned_calls_reach_every_rule()
    print("\nengine refusals by rule:", dict(sorted(ENGINE_REFUSALS.items())),
          f"accepted calls: {ACCEPTED['calls']}")
    missing = [r for r in REJECTING if ENGINE_REFUSALS[r] == 0]
    assert not missing, f"never refused through the engine: {missing}"
    assert ACCEPTED["calls"] > 0


def test_two_abstract_meshes_of_other_sizes_are_refused_at_the_second():
    """DA-2 named no path in the spec where the engine named the argument (a disagreement of
    the fuzz campaign's engine side): both refuse at the sharding that brings the second
    size in."""
    call = Call(args=({"k0": Arg.numpy((6,)), "k1": Arg.numpy((7,))},), outputs=(),
                options=JitOptions(keep_unused=True, in_shardings=(
                    {"k0": S.NamedSharding(S.AbstractMesh((3,), ("a",)), S.P()),
                     "k1": S.NamedSharding(S.AbstractMesh((1, 7), ("b", "d")), S.P())},)))
    verdict, mine = _agree(call)
    assert (verdict.rule, verdict.path) == ("DA-2", "args[0]['k1']")
    assert mine.failure.rule == "DA-2"
