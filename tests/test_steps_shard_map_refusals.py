"""describe_program of a ``jax.shard_map`` JAX refuses while tracing (issue 32, item 4).

JAX refuses a shard_map call before it traces the body (a spec naming an axis the mesh
lacks or leaves automatic: SMAP-3; an in spec longer than its argument: SMAP-7; an
argument its in spec does not divide: SMAP-8) or after (an out spec longer than the
result: SMAP-7; with check_vma, an out spec leaving out an axis the result varies along,
which would need a reduction: SMAP-11). describe_program still builds the program — the
equations before the call, then the shard_map from the user's mesh and specs, its body
JAX's trace where JAX got that far — and explain_program answers with the rule, the trace
stage, JAX's class (ValueError) and the spec's path, at the top of the body or inside an
inner jit. Each is held to JAX (held_to_jax: the same stage and class), and so is the same
call with specs that fit, accepted by both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import ShardMap, explain_program
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import P, held_to_jax, mesh


def mapped(body, in_specs, out_specs, **options):
    """sin, then a shard_map of ``body`` over the (2, 4) mesh."""
    return lambda x: jax.shard_map(body, mesh=mesh(), in_specs=in_specs,
                                   out_specs=out_specs, **options)(jnp.sin(x))


def double(a):
    return a * 2


# name: (the refused function of one (6, 8) argument, the same with specs that fit, rule,
# path)
REFUSED = {
    "axis-not-in-mesh": (mapped(double, P("z"), P("z")), mapped(double, P("x"), P("x")),
                         "SMAP-3", "body[1].shard_map.in_specs[0]"),
    "axis-left-automatic": (mapped(double, P("y"), P("y"), axis_names={"x"}),
                            mapped(double, P("x"), P("x"), axis_names={"x"}),
                            "SMAP-3", "body[1].shard_map.in_specs[0]"),
    "in-spec-indivisible": (mapped(double, P("y"), P("y")),
                            mapped(double, P(None, "y"), P(None, "y")),
                            "SMAP-8", "body[1].shard_map.in_specs[0]"),
    "in-spec-too-long": (mapped(double, P(None, None, "x"), P()),
                         mapped(double, P(None, None), P()),
                         "SMAP-7", "body[1].shard_map.in_specs[0]"),
    "out-spec-needs-a-reduction": (mapped(double, P(None, "y"), P()),
                                   mapped(double, P(None, "y"), P(None, "y")),
                                   "SMAP-11", "body[1].shard_map.out_specs[0]"),
    "psum-leaves-another-axis": (mapped(lambda a: jax.lax.psum(a, "x"), P("x", "y"), P()),
                                 mapped(lambda a: jax.lax.psum(a, ("x", "y")), P("x", "y"),
                                        P()),
                                 "SMAP-11", "body[1].shard_map.out_specs[0]"),
    "out-spec-too-long": (mapped(lambda a: a.sum(), P(None, "y"), P("y")),
                          mapped(lambda a: jax.lax.psum(a.sum(), "y"), P(None, "y"), P()),
                          "SMAP-7", "body[1].shard_map.out_specs[0]"),
    "in-an-inner-jit": (lambda x: jnp.cos(x) + jax.jit(mapped(double, P("y"), P("y")))(x),
                        lambda x: jnp.cos(x) + jax.jit(mapped(double, P("x"), P("x")))(x),
                        "SMAP-8", "body[1].jit.body[1].shard_map.in_specs[0]"),
}
X = np.linspace(-1.0, 1.0, 48, dtype=np.float32).reshape(6, 8)


@checks("SMAP-3", "SMAP-7", "SMAP-8", "SMAP-11")
@pytest.mark.parametrize("jitted", [False, True], ids=["function", "jit"])
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_shard_map_jax_refuses_while_tracing_is_described(name, jitted):
    """JAX refuses at trace with a ValueError; the program is described and the spec
    refuses it by the rule, at the trace stage, with JAX's class, at the spec's path."""
    fun, _, rule, path = REFUSED[name]
    with pytest.raises(ValueError):
        jax.jit(fun).trace(X)
    program, verdict, problems = held_to_jax(jax.jit(fun) if jitted else fun, X)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.jax_error, verdict.path) == (
        rule, "trace", "ValueError", path)


@checks("SMAP-3", "SMAP-7", "SMAP-8", "SMAP-11")
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_same_shard_map_with_specs_that_fit_is_accepted_as_jax_accepts_it(name):
    _, fits, _, _ = REFUSED[name]
    _, verdict, problems = held_to_jax(fits, X)
    assert not problems, problems
    assert verdict.accepted


def test_the_refused_shard_map_holds_the_users_specs_and_the_traced_body():
    """The described equation: the user's mesh axes, in and out specs and check_vma; where
    JAX traced the body before refusing (a reduction needed), the body is JAX's trace of
    it (the psum, JAX 0.10.2's psum_invariant), returned as the result the out spec could
    not take; where JAX refused before tracing, the user's function traced over the specs
    that fit (the multiplication, and the pvary JAX adds for an out spec its result does
    not vary along there)."""
    program = describe_program(REFUSED["psum-leaves-another-axis"][0], X)
    (smap,) = [eq for eq in program.equations if isinstance(eq, ShardMap)]
    assert [tuple(s) for s in smap.in_specs + smap.out_specs] == [("x", "y"), ()]
    assert smap.check_vma
    assert smap.manual_axes == frozenset({"x", "y"})
    assert [getattr(eq, "primitive", eq.kind) for eq in smap.body.equations] == ["psum_invariant"]
    before = describe_program(REFUSED["in-spec-indivisible"][0], X)
    (smap,) = [eq for eq in before.equations if isinstance(eq, ShardMap)]
    traced = [getattr(eq, "primitive", eq.kind) for eq in smap.body.equations]
    assert traced[0] == "mul" and set(traced[1:]) <= {"pvary"}, traced
    assert explain_program(before, until="trace").rule == "SMAP-8"
