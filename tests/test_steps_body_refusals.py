"""describe_program of what JAX refuses while tracing a loop's, a cond's or a remat's body,
or under grad (issue 32, item 4), against JAX 0.10.2.

The steps deep run left these refusals JAX's own errors (the spec never asked): a
constraint that does not fit its operand inside a ``lax.scan`` body, a ``jax.checkpoint``
body or a ``lax.cond`` branch (WSC-4, ValueError from ``pjit_check_aval_sharding``), and
so inside a jit under ``jax.grad``; an inner jit under ``jax.grad`` whose in_shardings do
not divide its operand (FIT-1, IndivisibleError); a scan whose body returns its carry, or
a cond whose branches return results, split otherwise over Explicit axes (LOOP-1,
TypeError from ``_check_carry_type`` and ``_check_branch_outputs``). Each is now described
(spec/bridge/refused_bodies.py) and held to JAX on both sides: the same function on values
the call fits is accepted by both, and the refused one is refused by the rule at the
equation's path, with JAX's class, at the trace stage (held_to_jax compares both).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import NS, P, held_to_jax, mesh


def held_or_refused_alike(fun, x, error, rule, path):
    """``fun`` on ``x`` held to JAX (``held_to_jax``): accepted by both where ``error`` is
    None, else refused by JAX while tracing with the class ``error`` and by the spec by
    ``rule`` at ``path``, the trace stage, with JAX's class."""
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    if error is None:
        assert verdict.accepted
        return
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(x)
    assert type(refused.value).__name__ == error
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        rule, "trace", path, error)

EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def constrained(spec):
    """A constraint of ``spec`` over the (2, 4) mesh of Auto axes."""
    return lambda h: jax.lax.with_sharding_constraint(h, NS(mesh(), spec))


def scan_carry(spec):
    return lambda x, xs: jax.lax.scan(
        lambda c, r: (constrained(spec)(jnp.sin(c)) * r, None), x, xs)[0]


def scan_ys(spec):
    return lambda x, xs: jax.lax.scan(lambda c, r: (c, constrained(spec)(c * r)), x, xs)[1]


def remat(spec):
    return lambda x, xs: jnp.cos(jax.checkpoint(
        lambda h: constrained(spec)(jnp.sin(h)))(x)) + xs[0]


def cond_true(spec):
    return lambda x, xs: jax.lax.cond(x.sum() > 0, lambda h: constrained(spec)(jnp.sin(h)),
                                      lambda h: h, x)


def cond_false(spec):
    return lambda x, xs: jax.lax.cond(x.sum() > 0, lambda h: h,
                                      lambda h: constrained(spec)(jnp.sin(h)), x)


def grad_of_a_jitted_scan(spec):
    return jax.grad(jax.jit(lambda x, xs: scan_carry(spec)(x, xs).sum()))


def scan_in_remat(spec):
    return lambda x, xs: jax.checkpoint(scan_carry(spec))(x, xs)


# name: (the function of a spec, the rule, the refused equation's path)
IN_BODIES = {
    "scan-carry": (scan_carry, "WSC-4", "body[0].scan.body[1]"),
    "scan-ys": (scan_ys, "WSC-4", "body[0].scan.body[1]"),
    "remat": (remat, "WSC-4", "body[0].jit.body[1]"),
    "cond-true-branch": (cond_true, "WSC-4", "body[3].cond.body[0].jit.body[1]"),
    "cond-false-branch": (cond_false, "WSC-4", "body[3].cond.body[0].jit.body[1]"),
    "grad-of-a-jitted-scan": (grad_of_a_jitted_scan, "WSC-4",
                              "body[0].jit.body[0].scan.body[1]"),
    "scan-in-remat": (scan_in_remat, "WSC-4", "body[0].jit.body[0].scan.body[1]"),
}


def _values(rows):
    return np.ones((rows, 4), np.float32), np.ones((3, rows, 4), np.float32)


@checks("WSC-4")
@pytest.mark.parametrize("name", sorted(IN_BODIES))
def test_a_constraint_refused_inside_a_body_is_described_at_its_path(name):
    """A constraint of rank 3 on a rank-2 value inside the body: JAX refuses while
    tracing (ValueError); the spec refuses by WSC-4 at the trace stage, at the path of the
    constraint inside the scan's, remat's or cond's body."""
    make, rule, path = IN_BODIES[name]
    fun = make(P(None, None, None))
    with pytest.raises(ValueError):
        jax.jit(fun).trace(*_values(8))
    _, verdict, problems = held_to_jax(fun, *_values(8))
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.error_type) == (
        rule, "trace", path, "ValueError")


@checks("WSC-4")
@pytest.mark.parametrize("name", sorted(IN_BODIES))
def test_the_same_bodies_with_a_constraint_that_fits_are_accepted_as_jax_accepts_them(name):
    """The accepting side: the same body, its constraint splitting both dimensions of the
    (8, 4) value (it divides them), traced, compiled and run by JAX and accepted alike."""
    fun = IN_BODIES[name][0](P("x", "y"))
    _, verdict, problems = held_to_jax(fun, *_values(8))
    assert not problems, problems
    assert verdict.accepted


@checks("WSC-4")
def test_an_uneven_constraint_in_a_scan_body_is_accepted_as_jax_accepts_it():
    """A split of 6 rows over the 4-way axis inside the scan's body: a constraint may
    split unevenly (JAX pads), so JAX traces, compiles and runs it and the spec accepts."""
    fun = scan_carry(P("y"))
    _, verdict, problems = held_to_jax(fun, *_values(6))
    assert not problems, problems
    assert verdict.accepted


def inner_jit_under_grad(rows):
    fun = jax.grad(jax.jit(lambda x: jnp.sin(x).sum(), in_shardings=NS(mesh(), P("y"))))
    return fun, np.ones((rows, 4), np.float32)


@checks("FIT-1")
def test_an_inner_jit_under_grad_whose_in_shardings_do_not_divide_is_fit_1():
    """jax.grad of a jit whose in_shardings split 6 rows 4 ways: JAX's IndivisibleError
    while tracing (the jit is traced over the primal values); the spec's FIT-1 at the
    inner jit's in_shardings, a ValueError as IndivisibleError is; on 8 rows both accept."""
    fun, x = inner_jit_under_grad(6)
    with pytest.raises(ValueError) as refused:
        jax.jit(fun).trace(x)
    assert type(refused.value).__name__ == "IndivisibleError"
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path) == ("FIT-1", "trace",
                                                           "body[0].jit.in_shardings[0]")
    fun, x = inner_jit_under_grad(8)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems and verdict.accepted, problems


def _explicit_rows():
    return jax.device_put(np.ones((8, 4), np.float32), NS(EXPLICIT, P("x")))


def carried(spec):
    return lambda x, xs: jax.lax.scan(
        lambda c, r: (jax.sharding.reshard(c * r, NS(EXPLICIT, spec)), None), x, xs)[0]


def branched(spec):
    return lambda x, xs: jax.lax.cond(
        x.sum() > 0, lambda h: jax.sharding.reshard(h, NS(EXPLICIT, spec)), lambda h: h, x)


@checks("LOOP-1")
@pytest.mark.parametrize("make,path", [(carried, "body[0]"), (branched, "body[3]")],
                         ids=["scan-carry", "cond-branches"])
def test_a_carry_or_branches_of_another_explicit_split_are_loop_1(make, path):
    """A scan body that reshards its carry, or a cond branch that reshards its result, to
    another split over Explicit axes: JAX's TypeError after tracing the bodies; the whole
    loop or cond described as JAX traced it, refused by LOOP-1 at its path; resharded to
    the split it came with, both accept."""
    xs = np.ones((3, 8, 4), np.float32)
    with pytest.raises(TypeError):
        jax.jit(make(P(None, "y"))).trace(_explicit_rows(), xs)
    _, verdict, problems = held_to_jax(make(P(None, "y")), _explicit_rows(), xs)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.error_type) == (
        "LOOP-1", "trace", path, "TypeError")
    _, verdict, problems = held_to_jax(make(P("x")), _explicit_rows(), xs)
    assert not problems and verdict.accepted, problems


@checks("LOOP-1")
@pytest.mark.parametrize("spec,refused", [(P(None, "y"), True), (P("x"), False)],
                         ids=["other-split", "same-split"])
def test_a_cond_of_branches_of_another_split_in_a_scan_under_grad_is_loop_1(spec, refused):
    """The same cond inside a scan's body, under jax.grad: JAX traces the scan's body
    over the primal values and refuses the cond (TypeError); the spec refuses by LOOP-1
    at the cond's path inside the scan's body; with the split it came with, both accept."""
    fun = jax.grad(lambda x, xs: jax.lax.scan(
        lambda c, r: (branched(spec)(c * r, None), None), x, xs)[0].sum())
    _, verdict, problems = held_to_jax(fun, _explicit_rows(), np.ones((3, 8, 4), np.float32))
    assert not problems, problems
    assert verdict.accepted is not refused
    if refused:
        assert (verdict.rule, verdict.stage, verdict.path) == ("LOOP-1", "trace",
                                                               "body[0].scan.body[4]")


@checks("WSC-4")
def test_a_constraint_refused_in_a_scan_body_under_vmap_is_the_specs_refusal():
    """jax.jit(jax.vmap(f)) with f's scan body constraining a rank-2 value to rank 3: JAX's
    ValueError while tracing; describe_program describes f on one example (its refusal
    described in the scan's body) and the spec's vmap of it refuses by WSC-4 at the trace
    stage, JAX's class; the constraint that fits is accepted by both."""
    from shardlaw.spec import Rejection

    xs = np.ones((3, 8, 4), np.float32)
    rows = np.ones((2, 8, 4), np.float32)
    fun = jax.jit(jax.vmap(scan_carry(P(None, None, None)), in_axes=(0, None)))
    with pytest.raises(ValueError):
        fun.trace(rows, xs)
    with pytest.raises(Rejection) as raised:
        describe_program(fun, rows, xs)
    failure = raised.value.failure
    assert (failure.rule, raised.value.stage, failure.jax_error) == ("WSC-4", "trace",
                                                                     "ValueError")
    assert isinstance(raised.value, ValueError)
    _, verdict, problems = held_to_jax(
        jax.jit(jax.vmap(scan_carry(P("x", "y")), in_axes=(0, None))), rows, xs)
    assert not problems and verdict.accepted, problems


def _scanned(xs, length=None):
    """A scan of the function's argument as its carry over ``xs`` (a function of the
    argument: its own xs when ``xs`` is "arg")."""
    def step(c, r):
        return c * 2.0 + sum(jnp.sum(leaf) for leaf in jax.tree_util.tree_leaves(r)), None

    return lambda x, ys: jax.lax.scan(step, x, ys if xs == "arg" else xs, length=length)[0]


# name: (the scan, its xs argument, JAX refuses it)
LENGTHS = {
    "no-xs-no-length": (_scanned({}), None, True),
    "length-disagrees": (_scanned("arg", length=2), np.ones((3, 4), np.float32), True),
    "xs-differ": (_scanned("arg"), (np.ones((3, 4), np.float32),
                                     np.ones((2, 4), np.float32)), True),
    "xs-split-over-explicit-axes": (_scanned("arg"), "explicit-rows", True),
    "length-alone": (_scanned(None, length=3), None, False),
    "length-agrees": (_scanned("arg", length=3), np.ones((3, 4), np.float32), False),
    "xs-alike": (_scanned("arg"), (np.ones((3, 4), np.float32),
                                    np.ones((3,), np.float32)), False),
}


@checks("LOOP-5")
@pytest.mark.parametrize("name", sorted(LENGTHS))
def test_a_scan_whose_length_jax_cannot_read_is_loop_5(name):
    """A scan given neither xs nor length (a scanned model with no parameters), a length
    its xs disagree with, xs of different lengths, or xs split along their leading
    dimension over Explicit axes: JAX's ValueError while tracing, before the body; the
    spec refuses by LOOP-5 while describing the call, at the trace stage, at the scan's
    path. The scans JAX runs are described and accepted alike."""
    from shardlaw.spec import Rejection

    fun, ys, refused = LENGTHS[name]
    if isinstance(ys, str):
        ys = _explicit_rows()
    x = np.float32(1.0)
    if not refused:
        _, verdict, problems = held_to_jax(fun, x, ys)
        assert not problems and verdict.accepted, problems
        return
    with pytest.raises(ValueError):
        jax.jit(fun).trace(x, ys)
    with pytest.raises(Rejection) as raised:
        describe_program(fun, x, ys)
    assert isinstance(raised.value, ValueError)
    assert (raised.value.failure.rule, raised.value.stage, raised.value.path) == (
        "LOOP-5", "trace", "body[0]")


def _explicit(shape, spec):
    return jax.device_put(np.ones(shape, np.float32), NS(EXPLICIT, spec))


# name: (function, its arguments' makers, the rule, the path; None: both accept)
CALLS = {
    "reshard-indivisible": (lambda x: jax.sharding.reshard(x * 2, NS(EXPLICIT, P("y"))),
                            lambda: (_explicit((6, 4), P()),), "ARG-4", "body[1]"),
    "reshard-divides": (lambda x: jax.sharding.reshard(x * 2, NS(EXPLICIT, P("y"))),
                        lambda: (_explicit((8, 4), P()),), None, None),
    "reshard-in-a-scan-body": (lambda x, xs: jax.lax.scan(lambda c, r: (
        jax.sharding.reshard(c * r, NS(EXPLICIT, P("y"))), None), x, xs)[0],
        lambda: (_explicit((6, 4), P()), np.ones((3, 6, 4), np.float32)), "ARG-4",
        "body[0].scan.body[1]"),
    "switch-branch-constraint": (lambda x: jax.lax.switch(1, [lambda h: h, lambda h: (
        constrained(P(None, None, None))(h))], x), lambda: (np.ones((8, 4), np.float32),),
        "WSC-4", "body[1].cond.body[0].jit.body[0]"),
    "switch-branches-of-another-split": (lambda x: jax.lax.switch(1, [lambda h: h, lambda h: (
        jax.sharding.reshard(h, NS(EXPLICIT, P(None, "y"))))], x),
        lambda: (_explicit((8, 4), P("x")),), "LOOP-1", "body[1]"),
    "switch-branches-alike": (lambda x: jax.lax.switch(1, [lambda h: h, lambda h: (
        jax.sharding.reshard(h, NS(EXPLICIT, P("x"))))], x),
        lambda: (_explicit((8, 4), P("x")),), None, None),
}


@checks("ARG-4", "WSC-4", "LOOP-1")
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_reshard_and_a_switch_refused_while_tracing_are_described(name):
    """jax.sharding.reshard to a split that does not divide the value (JAX's ValueError
    from the reshard's abstract evaluation), at the top of the body or inside a scan's;
    a switch branch whose constraint does not fit, or whose result is of another split
    over Explicit axes: the spec refuses by the rule at the path, JAX's class, the trace
    stage; the same calls that fit are accepted by both."""
    fun, make, rule, path = CALLS[name]
    _, verdict, problems = held_to_jax(fun, *make())
    assert not problems, problems
    if rule is None:
        assert verdict.accepted
        return
    with pytest.raises(Exception):
        jax.jit(fun).trace(*make())
    assert (verdict.rule, verdict.stage, verdict.path) == (rule, "trace", path)


def _mapped(body, axis_names=None, out_specs=P("x")):
    return jax.shard_map(body, mesh=mesh(), in_specs=P("x"), out_specs=out_specs,
                         axis_names=axis_names or {"x", "y"})


# name: (function, JAX's class, the path; None: both accept)
COLLECTIVES = {
    "psum-over-an-axis-left-automatic": (_mapped(
        lambda a: jax.lax.psum(jnp.sin(a), "y"), {"x"}), "NameError",
        "body[0].shard_map.body[1]"),
    "psum-over-an-axis-the-mesh-lacks": (_mapped(lambda a: jax.lax.psum(a, "z")),
                                         "AssertionError", "body[0].shard_map.body[0]"),
    "pmax-over-an-axis-left-automatic": (_mapped(
        lambda a: jax.lax.pmax(a, ("x", "y")), {"x"}), "NameError",
        "body[0].shard_map.body[0]"),
    "pmean-in-a-shard-map-called-in-the-body": (lambda v: jnp.cos(_mapped(
        lambda a: jax.lax.pmean(a * 2, "y"), {"x"})(v)), "NameError",
        "body[0].shard_map.body[2]"),
    "psum-of-a-closed-over-value": (lambda v: _mapped(
        lambda a: jax.lax.psum(a * v[0, 0], "y"), {"x"})(v), "NameError",
        "body[0].shard_map.body[4]"),
    "psum-over-a-manual-axis": (_mapped(lambda a: jax.lax.psum(a, "x"), out_specs=P()),
                                None, None),
    "pmax-over-manual-axes": (_mapped(lambda a: jax.lax.pmax(a, ("x", "y"))), None, None),
}


@checks("SMAP-13")
@pytest.mark.parametrize("name", sorted(COLLECTIVES))
def test_a_collective_refused_in_a_shard_map_body_is_smap_13(name):
    """A psum, pmax or pmean in a shard_map's body over an axis the body may not use (left
    automatic: JAX's NameError; not the mesh's: its AssertionError) while JAX traces it:
    describe_program describes the shard_map with its body up to the collective, and the
    spec refuses by SMAP-13 at the collective's path, with JAX's class, at the trace
    stage; over manual axes both accept."""
    fun, error, path = COLLECTIVES[name]
    x = np.ones((8, 4), np.float32)
    held_or_refused_alike(fun, x, error, "SMAP-13", path)


@checks("FIT-1")
@pytest.mark.parametrize("rows,refused", [(6, True), (8, False)], ids=["indivisible", "fits"])
def test_a_jit_of_a_vmapped_function_whose_in_shardings_do_not_divide_is_fit_1(rows, refused):
    """jax.jit(jax.vmap(f), in_shardings=...) splitting a mapped argument's 6 rows over the
    4-way axis: JAX's IndivisibleError while tracing, before the vmapped body; the spec
    reads the jit as any jit whose in_shardings it refuses, FIT-1 at the argument, JAX's
    class at the trace stage; on 8 rows both accept the batched call alike."""
    fun = jax.jit(jax.vmap(lambda r: jnp.sin(r) * 2.0),
                  in_shardings=NS(mesh(), P(None, "y")))
    x = np.ones((2, rows, 4), np.float32)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert verdict.accepted is not refused
    if refused:
        assert (verdict.rule, verdict.stage, verdict.path) == ("FIT-1", "trace", "args[0]")
