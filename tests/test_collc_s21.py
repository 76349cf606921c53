"""The collectives disagreement of session 21's collc recipe (issue 33), replayed against
jax.jit on 8 CPU devices: a broadcast of a broadcast's result is folded by StableHLO into
one broadcast of the first one's operand, so that operand is brought from where it stands
(collectives_plans.py's through_folded_broadcasts), not from the first result's split,
which no operation computes. The spec read the first result, unsplit, and predicted no
collective; it now reads the operand, and gathers it or leaves the move open (COLL-2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.collectives_harness import compare_collectives
from shardlaw.properties.propagation_harness import Recipe
from shardlaw.spec import Mesh as SpecMesh, NamedSharding as SpecSharding, P as SpecP
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.collectives_plans import through_folded_broadcasts
from shardlaw.spec.program.description import Opaque, Program, Value

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding

# broadcasts, a reduce, a convert, a full shard_map, a constraint to P(None, ('y', 'x'),
# None) of a broadcast of a broadcast of an input on P('x'), a while loop, a max: the
# compiled module holds a collective-permute of 8 bytes the spec did not predict
RECIPE = Recipe(mesh=(4, 2), reversed_devices=False, inputs=(
    ((16,), ('x',)), ((16,), (('x', 'y'),)), ((16,), (('y', 'x'),))), steps=(
    ('input', (), 0), ('broadcast', (0,), (0, (16, 16))), ('reduce', (1,), ('sum', 1)),
    ('broadcast', (1,), (2, (16, 16, 4))), ('convert', (2,), None),
    ('shard_map', (3,), (('y', 'x'), None, None)), ('constrain', (3,), (None, ('y', 'x'), None)),
    ('input', (), 1), ('loop', (0, 7), ('while const', 2, None)), ('input', (), 2),
    ('binary', (7, 9), 'max')), outputs=(8, 10, 6), devices=(), out_shardings=(),
    axis_types='')
PERMUTE = ("collective-permute", (), 8)


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))


def _real(jitted, *args):
    """The compiled module's collectives, as sorted (kind, groups, bytes)."""
    text = jitted.lower(*args).compile().as_text()
    return sorted((c.kind, _groups(c.replica_groups), c.bytes_per_device)
                  for c in collectives_in_hlo(text))


def _spec(jitted, *args):
    """The spec's collectives, as sorted (kind, groups, bytes), or why it is incomplete."""
    step = explain_program(describe_program(jitted, *args)).collectives
    if not step.complete:
        return step.undetermined
    return sorted((c.kind, _groups(c.replica_groups.groups() if c.replica_groups else ()),
                   c.bytes_per_device) for c in step)


def _groups(groups):
    return tuple(sorted(tuple(g) for g in groups))


def _twice(mesh, put):
    """``x`` (16,) broadcast to (16, 16) along dimension 1, then to (16, 16, 4), maybe
    constrained to ``put``."""
    def f(x):
        y = jax.lax.broadcast_in_dim(jax.lax.broadcast_in_dim(x, (16, 16), (1,)),
                                     (16, 16, 4), (0, 1))
        return y if put is None else jax.lax.with_sharding_constraint(y, NS(mesh, put))
    return jax.jit(f)


def test_the_recipe_is_left_open_where_it_disagreed():
    outcome = compare_collectives(RECIPE)
    assert not outcome.disagreements, outcome
    assert PERMUTE in outcome.real
    assert outcome.why is not None and "[COLL-2]" in outcome.why
    assert "loses ('x',) and gains ('y', 'x')" in outcome.why


def test_a_folded_broadcast_slices_and_permutes_its_operand_left_open():
    """The recipe minimised: ``x`` on ``P('x')`` broadcast twice and constrained to
    ``P(None, ('y', 'x'), None)``: XLA slices ``x``'s f32[4] piece to ``('x', 'y')``'s
    f32[2] and permutes it to ``('y', 'x')``'s device (8 bytes); the move is the
    partitioner's choice (COLL-2, open), where the spec predicted nothing before."""
    mesh = _mesh()
    x = jax.device_put(jnp.ones(16), NS(mesh, P("x")))
    jitted = _twice(mesh, P(None, ("y", "x"), None))
    assert _real(jitted, x) == [PERMUTE]
    why = _spec(jitted, x)
    assert why.rule == "COLL-2" and why.path.startswith("body[1]")


def test_a_folded_broadcast_gathers_its_operand_where_it_stands():
    """``x`` on ``P('x')`` broadcast twice and constrained unsplit: the f32[16] operand is
    gathered over 'x' (64 bytes), not the never computed f32[16, 16]; on ``P('y')`` or
    ``P('x')`` constrained to a split that starts with its axis: sliced, no collective."""
    mesh = _mesh()
    gather_x = ("all-gather", ((0, 2, 4, 6), (1, 3, 5, 7)), 64)
    on_x = jax.device_put(jnp.ones(16), NS(mesh, P("x")))
    on_y = jax.device_put(jnp.ones(16), NS(mesh, P("y")))
    unsplit = _twice(mesh, P(None, None, None))
    assert _real(unsplit, on_x) == _spec(unsplit, on_x) == [gather_x]
    for x, put in ((on_y, P(None, ("y", "x"), None)), (on_x, P(None, ("x", "y"), None)),
                   (on_x, None)):
        jitted = _twice(mesh, put)
        assert _real(jitted, x) == _spec(jitted, x) == []


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from((P("x"), P("y"), P(("x", "y")), P(("y", "x")), P(None))),
       st.sampled_from((None, P(None, None, None), P(None, "x", None), P(None, "y", None),
                        P(None, ("y", "x"), None), P("x", None, None),
                        P(None, None, "y"))))
def test_a_folded_broadcast_agrees_or_is_left_open(split, put):
    """Any split of ``x`` and constraint of the folded broadcast: the spec's collectives
    are the compiled module's, or it says why not."""
    mesh = _mesh()
    x = jax.device_put(jnp.ones(16), NS(mesh, split))
    jitted = _twice(mesh, put)
    spec = _spec(jitted, x)
    assert not isinstance(spec, list) or spec == _real(jitted, x), (split, put, spec)


def test_the_folded_broadcast_reads_the_first_ones_operand():
    """Spec alone: ``broadcast_in_dim(broadcast_in_dim(a, (8, 8), (1,)), (8, 8, 2), (0, 1))``
    is read as one broadcast of ``a`` along dimension 1; a broadcast of an input is kept."""
    mesh = SpecMesh.iota((4, 2), ("x", "y"))
    a = Value.placed((8,), SpecSharding(mesh, SpecP("x")))
    first = Opaque((0,), primitive="broadcast_in_dim", results=(Value.typed((8, 8)),),
                   params=(("broadcast_dimensions", (1,)), ("shape", (8, 8))))
    second = Opaque((1,), primitive="broadcast_in_dim", results=(Value.typed((8, 8, 2)),),
                    params=(("broadcast_dimensions", (0, 1)), ("shape", (8, 8, 2))))
    program = Program((a,), (first, second), outputs=(2,))
    eq, every = through_folded_broadcasts(program, 1, (1, 2))
    assert every == (0, 2) and eq.operands == (0,)
    assert dict(eq.params)["broadcast_dimensions"] == (1,)
    assert through_folded_broadcasts(program, 0, (0, 1)) == (first, (0, 1))
