"""What explain_program remembers within one answer never hides a refusal.

A step repeats its layers, so ``explain_program`` checks an equation of a form it has
checked already, over operands alike, only once: tracing remembers each form's records
(``trace_body``), lowering each shard_map's checks (``lower_shard_maps``, keyed by its
form, its operands' shapes and splits, what of its body lives and the manual axes around
it). These tests give two layers of one form that differ in exactly one of the things the
checks read — the operand's shape, which of the body's inputs live — so that only the
second is refused: it must be, at its own path, as when it stands alone. A shard_map that
a transformation bound (``checked=False``, as vmap and grad bind them) is checked when
lowered (SMAP-8: its operands divide); the rule itself is held to JAX in
test_program_vmap.py.
"""

from __future__ import annotations

import pytest

from shardlaw.spec import Mesh, NamedSharding, Opaque, P, Program, ShardMap, Value, explain_program

MESH = Mesh.iota((2, 4), ("x", "y"))
SHARD = Value.typed((4, 8), mesh=MESH.abstract, varying={"x"})
WHOLE = Value.typed((8, 8), mesh=MESH.abstract)


def _shard_map(operands: tuple[int, ...]) -> ShardMap:
    """A bound shard_map over ``x``, each operand's shard through ``sin`` (one form)."""
    count = len(operands)
    body = Program((SHARD,) * count,
                   tuple(Opaque((i,), primitive="sin", results=(SHARD,)) for i in range(count)),
                   outputs=tuple(range(count, 2 * count)))
    return ShardMap(operands, (WHOLE,) * count, body=body, mesh=MESH,
                    in_specs=(P("x"),) * count, out_specs=(P("x"),) * count,
                    manual_axes={"x", "y"}, checked=False)


def _layers(*shapes: tuple[int, int]) -> Program:
    """One shard_map per input, in order (a batch of 9 rows splits its shard to 4 rows,
    rounded down, as JAX types a bound shard_map; the compiler refuses it)."""
    inputs = tuple(Value.placed(shape, NamedSharding(MESH, P())) for shape in shapes)
    count = len(shapes)
    return Program(inputs, tuple(_shard_map((i,)) for i in range(count)),
                   outputs=tuple(range(count, 2 * count)))


def _refusal(verdict) -> tuple:
    return verdict.accepted, verdict.rule, verdict.stage, verdict.path


def test_a_layer_checked_before_does_not_hide_the_next_ones_operand_shape():
    assert explain_program(_layers((8, 8), (8, 8))).accepted
    alone = explain_program(_layers((9, 8)))
    assert _refusal(alone) == (False, "SMAP-8", "lower", "body[0].shard_map.in_specs[0]")
    after = explain_program(_layers((8, 8), (9, 8)))
    assert _refusal(after) == (False, "SMAP-8", "lower", "body[1].shard_map.in_specs[0]")
    assert after.message == alone.message.replace("body[0]", "body[1]")


def _two_results(first: int, second: int) -> Program:
    """Two shard_maps of one form over a (8, 8) and a (9, 8) operand; the program returns
    result ``first`` of the first and result ``second`` of the second, so each body keeps
    the input that result reads (dead-code elimination) and SMAP-8 checks only that one."""
    inputs = (Value.placed((8, 8), NamedSharding(MESH, P())),
              Value.placed((9, 8), NamedSharding(MESH, P())))
    return Program(inputs, (_shard_map((0, 1)), _shard_map((0, 1))),
                   outputs=(2 + first, 4 + second))


@pytest.mark.parametrize("first, second, refused_at", [
    (0, 0, None),
    (0, 1, "body[1].shard_map.in_specs[1]"),
    (1, 0, "body[0].shard_map.in_specs[1]"),
    (1, 1, "body[0].shard_map.in_specs[1]"),
])
def test_a_layer_checked_before_does_not_hide_what_lives_in_the_next(first, second, refused_at):
    verdict = explain_program(_two_results(first, second))
    if refused_at is None:
        assert verdict.accepted
    else:
        assert _refusal(verdict) == (False, "SMAP-8", "lower", refused_at)


def test_remembered_layers_leave_the_trace_of_one():
    """The rules that fired, in order, are those of the first layer: remembering drops
    repeats only."""
    one, three = explain_program(_layers((8, 8))), explain_program(_layers(*[(8, 8)] * 3))
    assert one.trace == three.trace
    assert [path for path, _ in three.decided] == [
        f"body[{k}]{rest}" for k in range(3) for path, _ in one.decided
        for rest in [path[len("body[0]"):]]]
