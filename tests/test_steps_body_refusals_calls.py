"""describe_program of what JAX refuses while tracing a shard_map's collectives, a
while_loop's body or predicate (fori_loop's too), and the other bodies issue 32 item 4
named (issue 32), against JAX 0.10.2.

Each refusal was JAX's own error from describe_program (the spec never asked). Each is
now described (spec/bridge/refused_collectives.py, spec/bridge/refused_bodies.py) and
held to JAX on both sides as tests/test_steps_body_refusals.py holds the others: the
neighbour JAX accepts is accepted alike (traced, compiled and run), and the refused one is
refused by the rule, with JAX's class, at the trace stage, at the refused equation's path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, held_to_jax, mesh
from test_steps_body_refusals import held_or_refused_alike

lax = jax.lax


def _mapped(body, manual=("x", "y"), out_specs=P("x", "y")):
    return jax.shard_map(body, mesh=mesh(), in_specs=P("x"), out_specs=out_specs,
                         axis_names=set(manual))


def _left_automatic(body):
    """``body`` in a shard_map whose body may use the axis x only (y left automatic)."""
    return _mapped(body, ("x",), P("x"))


# name: (function, JAX's class, the rule, the path; None: both accept)
COLLECTIVES = {
    "all_gather-over-an-axis-left-automatic": (_left_automatic(
        lambda a: lax.all_gather(jnp.sin(a), "y", tiled=True)), "NameError", "SMAP-13",
        "body[0].shard_map.body[1]"),
    "all_gather-over-an-axis-the-mesh-lacks": (_mapped(
        lambda a: lax.all_gather(a, "z", axis=1, tiled=True)), "NameError", "SMAP-13",
        "body[0].shard_map.body[0]"),
    "all_gather-over-a-manual-axis": (_mapped(
        lambda a: lax.all_gather(a, "y", axis=1, tiled=True)), None, None, None),
    "ppermute-over-an-axis-left-automatic": (_left_automatic(
        lambda a: lax.ppermute(a * 2, "y", [(0, 1), (1, 0)])), "NameError", "SMAP-13",
        "body[0].shard_map.body[2]"),
    "ppermute-over-a-manual-axis": (_mapped(
        lambda a: lax.ppermute(a * 2, "y", [(0, 1), (1, 2), (2, 3), (3, 0)])),
        None, None, None),
    "psum_scatter-over-an-axis-left-automatic": (_left_automatic(
        lambda a: lax.psum_scatter(a, "y", tiled=True)), "NameError", "SMAP-13",
        "body[0].shard_map.body[0]"),
    "psum_scatter-that-does-not-divide": (_mapped(
        lambda a: lax.psum_scatter(a[:3], "y", tiled=True)), "ValueError", "SMAP-21",
        "body[0].shard_map.body[2]"),
    "psum_scatter-that-divides": (_mapped(
        lambda a: lax.psum_scatter(a, "y", tiled=True)), None, None, None),
    "all_to_all-over-an-axis-left-automatic": (_left_automatic(
        lambda a: lax.all_to_all(a, "y", 0, 1, tiled=True)), "NameError", "SMAP-13",
        "body[0].shard_map.body[0]"),
    "all_to_all-that-does-not-divide": (_mapped(
        lambda a: lax.all_to_all(a[:3], "y", 0, 1, tiled=True)), "ValueError", "SMAP-21",
        "body[0].shard_map.body[1]"),
    "all_to_all-that-divides": (_mapped(
        lambda a: lax.all_to_all(a, "y", 0, 1, tiled=True)), None, None, None),
    "axis_index-of-an-axis-left-automatic": (_left_automatic(
        lambda a: a + lax.axis_index("y")), "NameError", "SMAP-13",
        "body[0].shard_map.body[0]"),
    "axis_index-of-an-axis-the-mesh-lacks": (_mapped(
        lambda a: jnp.cos(a) + lax.axis_index("z")), "NameError", "SMAP-13",
        "body[0].shard_map.body[1]"),
    "axis_index-of-a-manual-axis": (_mapped(lambda a: a + lax.axis_index("y")),
                                    None, None, None),
    "all_gather-of-a-dimension-out-of-range": (_mapped(
        lambda a: lax.all_gather(a, "y", axis=3, tiled=True)), "ValueError", "SMAP-21",
        "body[0].shard_map.body[1]"),
    "psum_scatter-of-a-dimension-out-of-range": (_mapped(
        lambda a: lax.psum_scatter(a, "y", scatter_dimension=3, tiled=True)), "IndexError",
        "SMAP-21", "body[0].shard_map.body[1]"),
    "all_to_all-concatenating-out-of-range": (_mapped(
        lambda a: lax.all_to_all(a, "y", 0, 5, tiled=True)), "IndexError", "SMAP-21",
        "body[0].shard_map.body[1]"),
    "all_gather-in-a-shard_map-called-in-a-scan-body": (lambda v: lax.scan(
        lambda c, r: (c + _left_automatic(lambda a: lax.all_gather(a, "y", tiled=True)[:4])(
            r), None), v[0], v[None])[0], "NameError", "SMAP-13",
        "body[3].scan.body[0].shard_map.body[0]"),
}


@checks("SMAP-13", "SMAP-21")
@pytest.mark.parametrize("name", sorted(COLLECTIVES))
def test_a_collective_refused_in_a_shard_map_body_is_described(name):
    """An all_gather, ppermute, psum_scatter, all_to_all or axis_index in a shard_map's
    body over an axis the body may not use (left automatic, or not the mesh's: JAX's
    NameError), a psum_scatter or all_to_all whose operand the axis's size does not
    divide (JAX's ValueError), or a dimension out of range (ValueError, IndexError) while
    JAX traces it: described as the equation JAX would
    have staged, refused by SMAP-13 or SMAP-21 at its path, JAX's class, the trace stage;
    over manual axes, on operands they divide, both accept."""
    fun, error, rule, path = COLLECTIVES[name]
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    held_or_refused_alike(fun, x, error, rule, path)


def constrained(spec):
    """A constraint of ``spec`` over the (2, 4) mesh of Auto axes."""
    return lambda h: lax.with_sharding_constraint(h, NS(mesh(), spec))


def while_body(spec):
    return lambda x: lax.while_loop(lambda c: c[0] < 2, lambda c: (
        c[0] + 1, constrained(spec)(jnp.sin(c[1]))), (0, x))[1]


def while_predicate(spec):
    return lambda x: lax.while_loop(lambda c: constrained(spec)(c[1]).sum() < 2.0 * c[0],
                                    lambda c: (c[0] + 1, c[1] * 0.5), (1, x))[1]


def fori_static(spec):
    return lambda x: lax.fori_loop(0, 2, lambda i, v: constrained(spec)(v * 1.5), x)


def fori_traced(spec):
    return lambda x: lax.fori_loop(0, jnp.int32(x.shape[0]) // 4,
                                   lambda i, v: constrained(spec)(v * 1.5), x)


def while_in_a_scan_under_jvp(spec):
    scanned = lambda x: lax.scan(lambda c, r: (while_body(spec)(c * r), None), x,  # noqa: E731
                                 jnp.ones((2,) + x.shape))[0]
    return lambda x: jax.jvp(scanned, (x,), (x,))[1]


def while_in_a_jit(spec):
    return lambda x: jnp.cos(jax.jit(while_body(spec))(x * 2.0))


# name: (the function of a spec, the refused equation's path)
LOOPS = {
    "while-body": (while_body, "body[0].while.body[1].jit.body[2]"),
    "while-predicate": (while_predicate, "body[0].while.body[0].jit.body[0]"),
    "fori_loop-of-static-bounds": (fori_static, "body[0].scan.body[2]"),
    "fori_loop-of-traced-bounds": (fori_traced, "body[1].while.body[1].jit.body[2]"),
    "while-in-a-scan-under-jvp": (while_in_a_scan_under_jvp,
                                   "body[1].scan.body[1].while.body[1].jit.body[2]"),
    "while-in-an-inner-jit": (while_in_a_jit, "body[1].jit.body[0].while.body[1].jit.body[2]"),
}


@checks("WSC-4")
@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_constraint_refused_in_a_while_loop_is_described_at_its_path(name):
    """A constraint of rank 3 on a rank-2 value inside a while_loop's body or predicate, or
    a fori_loop's body (a scan where its bounds are static, else a while loop): JAX's
    ValueError while tracing; the spec refuses by WSC-4 at the trace stage at the
    constraint's path inside the loop's body (``while.body[1]``) or predicate
    (``while.body[0]``)."""
    make, path = LOOPS[name]
    fun = make(P(None, None, None))
    x = np.ones((8, 4), np.float32)
    with pytest.raises(ValueError):
        jax.jit(fun).trace(x)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.error_type) == (
        "WSC-4", "trace", path, "ValueError")


@checks("WSC-4")
@pytest.mark.parametrize("name", sorted(LOOPS))
def test_the_same_loops_with_a_constraint_that_fits_are_accepted_as_jax_accepts_them(name):
    """The accepting side: the same loops, their constraint splitting both dimensions of
    the (8, 4) value, traced, compiled and run by JAX and accepted alike."""
    fun = LOOPS[name][0](P("x", "y"))
    _, verdict, problems = held_to_jax(fun, np.ones((8, 4), np.float32))
    assert not problems, problems
    assert verdict.accepted


def _custom_jvp(spec):
    @jax.custom_jvp
    def f(x):
        return constrained(spec)(jnp.sin(x))

    f.defjvp(lambda primals, tangents: (f(primals[0]), jnp.cos(primals[0]) * tangents[0]))
    return f


def _custom_vjp(spec):
    @jax.custom_vjp
    def f(x):
        return constrained(spec)(jnp.sin(x))

    f.defvjp(lambda x: (f(x), jnp.cos(x)), lambda c, g: (c * g,))
    return f


# name: (the function of a spec, the refused equation's path)
CUSTOM = {
    "custom_jvp": (lambda spec: lambda x: jnp.cos(_custom_jvp(spec)(x)),
                   "body[0].jit.body[1]"),
    "custom_vjp": (lambda spec: lambda x: jnp.cos(_custom_vjp(spec)(x)),
                   "body[0].jit.body[1]"),
    "custom_jvp-under-grad": (lambda spec: jax.grad(lambda x: _custom_jvp(spec)(x).sum()),
                              "body[0].jit.body[1]"),
    "custom_vjp-under-grad": (lambda spec: jax.grad(lambda x: _custom_vjp(spec)(x).sum()),
                              "body[0].jit.body[1]"),
    "custom_jvp-in-a-scan-body": (lambda spec: lambda x: lax.scan(
        lambda c, r: (_custom_jvp(spec)(c * r), None), x, jnp.ones((2,) + x.shape))[0],
        "body[1].scan.body[1].jit.body[1]"),
    "custom_vjp-in-an-inner-jit": (lambda spec: lambda x: jnp.cos(
        jax.jit(_custom_vjp(spec))(x * 2.0)), "body[1].jit.body[0].jit.body[1]"),
}


@checks("WSC-4")
@pytest.mark.parametrize("name", sorted(CUSTOM))
def test_a_constraint_refused_in_a_custom_functions_body_is_described(name):
    """A constraint of rank 3 on a rank-2 value inside a custom_jvp or custom_vjp function's
    body, called as it is, under grad, in a scan's body or an inner jit: JAX's ValueError
    while tracing the body; the function described as a custom call whose body ends with the
    constraint (called as a jit is), refused by WSC-4 at its path, the trace stage; the
    constraint that fits is accepted by both."""
    make, path = CUSTOM[name]
    x = np.ones((8, 4), np.float32)
    with pytest.raises(ValueError):
        jax.jit(make(P(None, None, None))).trace(x)
    _, verdict, problems = held_to_jax(make(P(None, None, None)), x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.error_type) == (
        "WSC-4", "trace", path, "ValueError")
    _, verdict, problems = held_to_jax(make(P("x", "y")), x)
    assert not problems and verdict.accepted, problems


def _spec_constraint(spec):
    """A constraint by a bare spec, read over the shard_map body's mesh."""
    return lambda h: lax.with_sharding_constraint(h, spec)


def _inner_jit(**shardings):
    return lambda h: jax.jit(lambda v: jnp.sin(v) * 2.0, **shardings)(h)


# name: (the body of the shard_map, its manual axes, JAX's class, the rule, the path; None:
# both accept)
IN_SHARD_MAP = {
    "constraint-of-a-rank-the-shard-lacks": (
        lambda a: _spec_constraint(P(None, None, None))(jnp.sin(a)), ("x", "y"), "ValueError",
        "WSC-4", "body[0].shard_map.body[1]"),
    "named-constraint-of-a-rank-the-shard-lacks": (
        lambda a: constrained(P(None, None, None))(jnp.sin(a)), ("x", "y"), "ValueError",
        "WSC-4", "body[0].shard_map.body[1]"),
    "constraint-naming-a-manual-axis": (
        lambda a: _spec_constraint(P("x"))(jnp.sin(a)), ("x", "y"), "ValueError", "WSC-5",
        "body[0].shard_map.body[1]"),
    "constraint-over-an-axis-left-automatic": (
        lambda a: _spec_constraint(P(None, "y"))(jnp.sin(a)), ("x",), None, None, None),
    "constraint-in-a-scan-in-the-body": (lambda a: lax.scan(lambda c, r: (
        _spec_constraint(P(None, None, None))(c * r), None), a, a[None])[0], ("x", "y"),
        "ValueError", "WSC-4", "body[0].shard_map.body[1].scan.body[1]"),
    "inner-jit-whose-in_shardings-the-shard-lacks": (
        _inner_jit(in_shardings=NS(mesh(), P(None, None, None))), ("x", "y"), "ValueError",
        "FIT-1", "body[0].shard_map.body[0].jit.in_shardings[0]"),
    "inner-jit-whose-in_shardings-do-not-divide-the-shard": (
        lambda a: _inner_jit(in_shardings=NS(mesh(), P(None, "y")))(a[:, :3]), ("x",),
        "IndivisibleError", "FIT-1", "body[0].shard_map.body[1].jit.in_shardings[0]"),
    "inner-jit-whose-out_shardings-the-shard-lacks": (
        _inner_jit(out_shardings=NS(mesh(), P(None, None, None))), ("x", "y"), "ValueError",
        "FIT-1", "body[0].shard_map.body[0].jit.out_shardings[0]"),
    "inner-jit-whose-in_shardings-fit": (
        _inner_jit(in_shardings=NS(mesh(), P(None, "y"))), ("x",), None, None, None),
}


@checks("WSC-4", "WSC-5", "FIT-1")
@pytest.mark.parametrize("name", sorted(IN_SHARD_MAP))
def test_a_constraint_or_an_inner_jit_refused_in_a_shard_map_body_is_described(name):
    """A constraint inside a shard_map's body of a rank the shard lacks (WSC-4), or naming
    a manual axis (WSC-5), an inner jit there whose in_shardings or out_shardings do not fit
    the shard (FIT-1): JAX refuses while tracing the body; the spec checks the body's
    constraints and inner jits on the per-shard values as JAX does, and refuses at the
    equation's path with JAX's class, the trace stage; over an axis left automatic, or
    shardings that fit, both accept."""
    body, manual, error, rule, path = IN_SHARD_MAP[name]
    fun = _mapped(body, manual, P(*manual) if manual == ("x",) else P("x"))
    x = np.ones((8, 4), np.float32)
    held_or_refused_alike(fun, x, error, rule, path)


# name: (the function of a constraint, the refused equation's rule and path)
UNDER_VMAP = {
    "vmap-in-the-body": (lambda c: lambda x: jnp.cos(jax.vmap(
        lambda r: c(jnp.sin(r)))(x)), "WSC-4", "body[1]"),
    "vmap-along-axis-1": (lambda c: lambda x: jnp.cos(jax.vmap(
        lambda r: c(jnp.sin(r)), in_axes=1, out_axes=1)(x)), "WSC-4", "body[1]"),
    "vmap-in-a-scan-body": (lambda c: lambda x: lax.scan(lambda h, r: (jax.vmap(
        lambda q: c(q * 2.0))(h * r), None), x, jnp.ones((2,) + x.shape))[0], "WSC-4",
        "body[1].scan.body[2]"),
    "vmap-in-an-inner-jit": (lambda c: lambda x: jnp.cos(jax.jit(jax.vmap(
        lambda r: c(jnp.sin(r))))(x * 2.0)), "WSC-4", "body[1].jit.body[1]"),
}


@checks("WSC-4")
@pytest.mark.parametrize("name", sorted(UNDER_VMAP))
def test_a_constraint_refused_under_a_vmap_called_in_the_body_is_described(name):
    """A constraint of rank 3 on a rank-1 example under a vmap called inside the function
    (at its top, in a scan's body, in an inner jit; batched along axis 0 or 1): JAX's
    ValueError while tracing the example; described as vmap's batching would stage it (its
    spec with the batch dimension inserted, unconstrained), refused by WSC-4 at its path,
    JAX's class, the trace stage; a constraint of rank 1 is accepted by both."""
    make, rule, path = UNDER_VMAP[name]
    x = np.ones((8, 4), np.float32)
    fun = make(constrained(P(None, None, None)))
    with pytest.raises(ValueError):
        jax.jit(fun).trace(x)
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.error_type) == (
        rule, "trace", path, "ValueError")
    _, verdict, problems = held_to_jax(make(constrained(P("y"))), x)
    assert not problems and verdict.accepted, problems
