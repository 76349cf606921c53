"""Loop and branch bodies the drawn control-flow programs found (issue 32, session 19):
1,000 drawn programs (``flow_cases`` at seed 11) held to JAX 0.10.2 on 8 CPU devices.

* A while loop whose predicate closes over a value of the enclosing body (a bound the
  function computes), its body refused while JAX traced it (a constraint, a device_put or
  an inner jit of the wrong rank): JAX's own ValueError came out of describe_program (20
  of the 1,000). The predicate's constants are now the loop's first operands, as JAX
  makes them, and the refusal is described at the equation's path.
* A cond or switch branch refused while traced: the generator called the body once
  outside the branch to count its results, so JAX refused it there and the program was
  described without its Cond (65 of the 1,000); it counts them from the recipe now.
* A scan whose body does not read its carry: JAX's dead-code elimination keeps the
  initial carry of every carry it makes (it instantiates them), and the spec dropped it.
  A kept input is what JAX spells a result on a size-1 mesh after (the first kept
  input's NamedSharding, ``P(None, 'x')`` or ``P()``), and what its device assignment
  holds (12 size-1 spellings and the ``fori_loop`` carried over a closed-over
  uncommitted value, of the 1,000).

Each is pinned on both sides against JAX: JAX's class, stage and result shardings, the
spec's rule, stage, class and path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.spec import P as SP
from test_steps_arguments import NS, P, held_to_jax, mesh
from test_steps_body_refusals import held_or_refused_alike

lax = jax.lax


def _bounded_while(step):
    """A while loop applying ``step`` to its carry until a counter reaches a bound the
    function computes from its argument (the predicate closes over it)."""
    def fun(x):
        s = jnp.sum(x)
        return lax.while_loop(lambda c: c[1] < s + s, lambda c: (step(c[0]), c[1] + s),
                              (x, s - s))[0]
    return fun


def _placed(x):
    return jax.device_put(x, NS(mesh(), P("x", "y")))


# name: (the loop body's step, JAX's class, the rule, the path; None: both accept)
WHILE_BODIES = {
    "constraint-of-rank-3": (
        lambda h: lax.with_sharding_constraint(jnp.sin(h), NS(mesh(), P(None, None, "x"))),
        "ValueError", "WSC-4", "body[2].while.body[1].jit.body[1]"),
    "device_put-of-rank-3": (
        lambda h: jax.device_put(jnp.sin(h), NS(mesh(), P(None, None, "y"))),
        "ValueError", "ARG-4", "body[2].while.body[1].jit.body[1]"),
    "inner-jit-of-rank-3": (
        lambda h: jax.jit(jnp.sin, in_shardings=NS(mesh(), P(None, None, "x")))(h),
        "ValueError", "FIT-1",
        "body[2].while.body[1].jit.body[0].jit.in_shardings[0]"),
    "constraint-that-fits": (
        lambda h: lax.with_sharding_constraint(jnp.sin(h), NS(mesh(), P(None, "x"))),
        None, None, None),
}


@pytest.mark.parametrize("name", sorted(WHILE_BODIES))
def test_a_while_body_refused_beside_a_predicate_closing_over_a_value_is_described(name):
    step, error, rule, path = WHILE_BODIES[name]
    held_or_refused_alike(_bounded_while(step), _placed(np.ones((8, 8), np.float32)), error,
                          rule, path)


# --------------------------------------------------------------------------- kept carries

def _size_one(spec):
    return NS(jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                            devices=jax.devices()[:1]), spec)


def _unread_carry(x, y):
    """A scan whose body does not read its carry: the next carry is made from ``y``."""
    return lax.scan(lambda c, _: (jnp.sin(y), jnp.cos(y)), x, None, length=2)


def test_a_scan_keeps_the_initial_carry_its_body_does_not_read():
    """JAX keeps ``x`` (its dead-code elimination instantiates the carry it makes) and
    spells the carry on a size-1 mesh as ``x``'s sharding, the first kept input's; the
    stacked ``ys`` (another rank) as read back, ``P()``."""
    x = jax.device_put(np.ones((8, 8), np.float32), _size_one(P(None, "x")))
    y = jax.device_put(np.ones((8, 8), np.float32), _size_one(P(None, None)))
    program, verdict, problems = held_to_jax(_unread_carry, x, y)   # (first: compiled once)
    assert not problems, problems
    lowered = jax.jit(_unread_carry).lower(x, y)
    assert lowered._lowering.compile_args["kept_var_idx"] == {0, 1}
    assert [r.sharding.spec for r in jax.jit(_unread_carry)(x, y)] == [P(None, "x"), P()]
    assert verdict.accepted and verdict.kept_inputs == (0, 1)
    assert [s.spec for s in verdict.out_shardings] == [SP(None, "x"), SP()]


def test_an_unread_initial_carry_joins_the_device_assignment():
    """Kept, the initial carry committed to another device than ``y``'s refuses the
    call as JAX refuses it (DA-1, at lowering); the spec accepted it with ``x`` dropped."""
    x = jax.device_put(np.ones((8, 8), np.float32), jax.devices()[1])
    y = jax.device_put(np.ones((8, 8), np.float32), NS(mesh(), P("x", "y")))
    with pytest.raises(ValueError, match="incompatible devices"):
        jax.jit(_unread_carry).lower(x, y)
    _, verdict, problems = held_to_jax(_unread_carry, x, y)
    assert not problems, problems
    assert (verdict.accepted, verdict.rule, verdict.stage) == (False, "DA-1", "lower")


def test_a_fori_carry_made_from_a_closed_over_uncommitted_value_keeps_its_placement():
    """On the (2, 2, 2) mesh, ``a`` committed ``P('z', 'y')`` carried through a fori_loop
    whose body makes the next carry from ``b`` (uncommitted on device 0) alone: JAX keeps
    ``a``, runs on all eight devices and returns the carry committed on ``a``'s
    sharding; the spec placed it on device 0 uncommitted, ``a`` dropped."""
    cube = jax.make_mesh((2, 2, 2), ("x", "y", "z"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    a = jax.device_put(np.ones((6, 8), np.float32), NS(cube, P("z", "y")))
    with jax.default_device(jax.devices()[0]):
        b = jnp.ones((6, 8), jnp.float32)

    def fun(a, b):
        return lax.fori_loop(0, 2, lambda i, c: jnp.sin(jnp.sin(jnp.sin(b))), a)

    _, verdict, problems = held_to_jax(jax.jit(fun), a, b)   # (first: compiled once)
    assert not problems, problems
    result = jax.jit(fun)(a, b)
    assert (result.sharding.spec, result.committed) == (P("z", "y"), True)
    assert verdict.accepted and verdict.kept_inputs == (0, 1)
    assert verdict.out_shardings[0].spec == SP("z", "y")


# --------------------------------------------------------------------------- drawn branches

@pytest.mark.parametrize("kind", ["cond", "switch"])
def test_a_drawn_branch_refused_while_traced_is_described_with_its_cond(kind):
    """The generator's branch is no longer called outside the cond to count its results:
    a device_put of rank 3 in it is refused inside the branch, as JAX refuses it, and the
    program is described with its Cond (ARG-4 at the branch's path)."""
    from shardlaw.properties.program_harness import Case, Recipe, Step, arguments_of
    from shardlaw.properties.program_vectors_gen import (
        FlowCase, compare_flow, equation_kinds, flow_function, flow_options,
    )
    from shardlaw.spec import explain_program, from_jax
    from shardlaw.spec.program.control_flow import Cond
    from shardlaw.spec.program.typed_values import Value

    sharding = from_jax(NS(mesh(), P("x", None)))
    bad = from_jax(NS(mesh(), P(None, None, "y")))
    recipe = Recipe((Step("sin", 0), Step("device_put", 2, sharding=bad)), outputs=(3,))
    flow = FlowCase(kind, Case((Value.placed((8, 8), sharding),) * 2, recipe))
    with pytest.raises(ValueError, match="rank at least 3"):
        jax.jit(flow_function(flow), **flow_options(flow)).trace(*arguments_of(flow.case))
    program, problems = compare_flow(flow)
    assert problems == [] and Cond in equation_kinds(program)
    verdict = explain_program(program)
    assert (verdict.rule, verdict.stage, verdict.jax_error) == ("ARG-4", "trace",
                                                               "ValueError")
    assert ".cond.body[0].jit.body[" in verdict.path


# --------------------------------------------------------------------------- while bodies kept

def test_a_dead_constraint_in_a_while_body_joins_the_device_assignment():
    """JAX has no dead-code elimination rule for a while loop: a constraint onto device 2
    the body does not use stays, and with a jit onto devices 0-3 beside it JAX refuses
    the call at lowering (found at seed 12 of the drawn programs); the spec pruned it and
    accepted. Now DA-1 at lowering on both sides."""
    four = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=jax.devices()[:4])

    def step(c):
        lax.with_sharding_constraint(c, jax.sharding.SingleDeviceSharding(jax.devices()[2]))
        return jax.jit(jnp.negative, out_shardings=NS(four, P(None, "x")))(c)

    fun = _bounded_while(step)
    x = np.ones((6, 8), np.float32)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    with pytest.raises(ValueError, match="incompatible devices"):
        jax.jit(fun).lower(x)
    assert (verdict.accepted, verdict.rule, verdict.stage) == (False, "DA-1", "lower")
