"""Custom derivatives read further (issue 32), against JAX 0.10.2 on 8 CPU devices.

* A call JAX refuses inside a ``custom_jvp``'s rule under ``jax.vjp`` or ``jax.linearize``
  called by the user: ``describe_program`` re-raised JAX's own error (the spec was never
  asked); it now refuses by the spec's ``vjp_program`` or ``linearize_program`` of the
  function JAX differentiates, as it does under ``jax.grad`` and ``jax.jvp``
  (tests/test_custom_jvp_ad.py): the rule, the trace stage, JAX's class, the refused
  equation's path inside the custom call's rule. The same rule over a split JAX accepts
  is accepted alike.
"""

from __future__ import annotations

import jax
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.autodiff import linearize_program, vjp_program

from test_custom_jvp_ad import CASES, _case
from test_steps_arguments import held_to_jax

# how the user calls each transformation inside the function, over its argument p
CALLS = {
    "vjp": lambda fun: lambda p: jax.vjp(fun, p)[1](1.0)[0],
    "vjp-of-a-jit": lambda fun: lambda p: jax.vjp(jax.jit(fun), p)[1](1.0)[0],
    "vjp-with-aux": lambda fun: lambda p: jax.vjp(lambda v: (fun(v), v), p,
                                                  has_aux=True)[1](1.0)[0],
    "linearize": lambda fun: lambda p: jax.linearize(fun, p)[1](p),
    "linearize-of-a-jit": lambda fun: lambda p: jax.linearize(jax.jit(fun), p)[1](p),
}
REWRITES = {"vjp": vjp_program, "linearize": linearize_program}


@checks("WSC-4", "FIT-1", "PROG-7", "PROG-8")
@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_call_jax_refuses_in_a_custom_jvp_rule_under_vjp_or_linearize(name, call):
    """JAX refuses while tracing the rule under the user's vjp or linearize (its class);
    describe_program refuses by the rule JAX's check is, at the trace stage, with JAX's
    class, at the refused equation inside the custom call's rule (it was JAX's own error),
    as the spec's rewrite of the function's description refuses."""
    fun, x = _case(name, refused=True)
    error, rule, path = CASES[name][4:]
    outer = CALLS[call](fun)
    with pytest.raises(Exception) as raised:
        jax.jit(outer).trace(x)
    assert type(raised.value).__name__ == error
    with pytest.raises(Rejection) as refused:
        describe_program(outer, x)
    got = refused.value
    assert (got.failure.rule, got.stage, got.failure.jax_error, got.path) == (
        rule, "trace", error, path), str(got)
    with pytest.raises(Rejection) as refused:
        REWRITES[call.split("-")[0]](describe_program(fun, x))
    assert (refused.value.failure.rule, refused.value.path) == (rule, path)


@checks("WSC-4", "FIT-1", "PROG-7", "PROG-8")
@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_rule_over_a_split_jax_accepts_under_vjp_or_linearize(name, call):
    """The split JAX accepts: traced, compiled and run by JAX, and accepted alike."""
    fun, x = _case(name, refused=False)
    _, verdict, problems = held_to_jax(CALLS[call](fun), x)
    assert not problems, problems
    assert verdict.accepted
