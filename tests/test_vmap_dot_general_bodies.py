"""A matmul (dot_general) in a loop's or a cond's body under ``jax.vmap``, batched by the spec
as JAX 0.10.2 batches it, against JAX's trace on 8 CPU devices.

A helper reported a vmapped scan whose body does ``h @ w`` (the carry batched, ``w`` closed
over or in ``xs``) batched to a 4x8x4x8 result, as if the batch dimension were a free one.
On this tree it does not reproduce (every case below agreed before these tests were added,
and 244 operand/placement/body combinations and 50 gradients-then-vmap agreed in the probe);
these tests pin it. ``describe_program`` of a vmapped function describes one example and
batches it by the spec's own rules (``nested_vmap_program``), so each case compares every
dot_general the spec's batched program holds, in bodies too, with JAX's trace of the same
vmap: its dimension numbers and its result's type (shape and split), and the scan's body's
inputs, outputs and results. Operands batched both (a new batch dimension, first), the lhs
or the rhs alone (the batch axis stays a free dimension, where JAX's rule puts it), at
different positions (``in_axes`` 0, 1, 2; an einsum with batch dimensions of its own), in a
scan, a fori_loop, a while loop, a cond whose predicate is not batched and at the top of the
function (a body's operands are moved to axis 0 first, so only there does the free
dimension's position show: dropping the new batch dimension fails 112 of these cases,
misplacing the lhs's or the rhs's free batch axis 4 and 3); a gradient of
each loop vmapped (its transposed scan's products over stacked residuals); over an Explicit
mesh whose batch or feature dimension is split.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import NS, P, held_to_jax

lax = jax.lax
EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)

# the operation of the carry ``c`` and the weight ``w``, one example's shapes of each
OPERATIONS = {
    "matmul": (lambda c, w: c @ w, (8, 8), (8, 8)),
    "weight-on-the-left": (lambda c, w: w @ c, (8, 8), (8, 8)),
    "vector": (lambda c, w: c @ w, (8,), (8, 8)),
    "batched-einsum": (lambda c, w: jnp.einsum("bij,bjk->bik", c, w), (2, 8, 8), (2, 8, 8)),
    "einsum-batch-last": (lambda c, w: jnp.einsum("ijb,jkb->ikb", c, w), (8, 8, 2), (8, 8, 2)),
}


def _scan(op):
    return lambda h, w: lax.scan(lambda c, _: (jnp.tanh(op(c, w)), None), h, None,
                                 length=2)[0]


def _scan_xs(op):
    return lambda h, ws: lax.scan(lambda c, w: (op(c, w), None), h, ws)[0]


def _fori(op):
    return lambda h, w: lax.fori_loop(0, 2, lambda i, c: op(c, w), h)


def _while(op):
    return lambda h, w: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, op(c[1], w)),
                                       (0, h))[1]


def _cond(op):
    return lambda h, w: lax.cond(jnp.bool_(True), lambda a: op(a, w), lambda a: a, h)


BODIES = {"scan": _scan, "fori_loop": _fori, "while_loop": _while, "cond": _cond,
          # (at the top, an operand stays batched where in_axes puts it: a body's are
          # moved first, so only here does the free dimension's position matter)
          "top": lambda op: op}
# (the carry's in_axes, the weight's): both batched, one, the other, at other positions
IN_AXES = ((0, 0), (0, None), (None, 0), (1, 0), (0, 2), (2, 1), (1, None), (None, 1), (None, 2))


def _stacked(x, axis, size=4):
    return x if axis is None else np.stack([x] * size, axis=axis)


def _jax_products(jaxpr, out):
    """(dimension numbers, result type) of every dot_general in JAX's trace, bodies too."""
    for e in jaxpr.eqns:
        if e.primitive.name == "dot_general":
            (lc, rc), (lb, rb) = e.params["dimension_numbers"]
            numbers = tuple(tuple(int(a) for a in t) for t in (lc, rc, lb, rb))
            aval = e.outvars[0].aval
            out.append((numbers, tuple(aval.shape), _jax_split(aval)))
        for key in ("jaxpr", "body_jaxpr", "cond_jaxpr", "branches"):
            if key in e.params:
                for body in (e.params[key] if key == "branches" else [e.params[key]]):
                    _jax_products(getattr(body, "jaxpr", body), out)
    return out


def _jax_split(aval):
    spec = tuple(aval.sharding.spec) if aval.sharding.mesh.axis_names else ()
    return tuple((spec[d] if d < len(spec) else None) for d in range(len(aval.shape)))


def _spec_products(program, out):
    """The same of every dot_general the spec's program holds, bodies too."""
    for eq in program.equations:
        if getattr(eq, "primitive", "") == "dot_general":
            (lc, rc), (lb, rb) = dict(eq.params)["dimension_numbers"]
            numbers = tuple(tuple(int(a) for a in t) for t in (lc, rc, lb, rb))
            result = eq.results[0]
            out.append((numbers, tuple(result.shape), _spec_split(result)))
        for body in _bodies(eq):
            _spec_products(body, out)
    return out


def _bodies(eq):
    """The bodies an equation holds, each once (a cond's and a while loop's ``body`` call
    their branches, or their predicate and loop body)."""
    if getattr(eq, "branches", None):
        return eq.branches
    if getattr(eq, "body_fun", None) is not None:
        return (eq.cond, eq.body_fun)
    body = getattr(eq, "body", None)
    return (body,) if hasattr(body, "equations") else ()


def _spec_split(value):
    spec = tuple(value.spec or ()) if value.mesh is not None else ()
    return tuple((spec[d] if d < len(spec) else None) for d in range(len(value.shape)))


def _held(fun, in_axes, args):
    """The products of JAX's trace of ``jax.vmap(fun, in_axes)`` and of the spec's."""
    vmapped = jax.vmap(fun, in_axes=in_axes)
    ours = _spec_products(describe_program(vmapped, *args), [])
    theirs = _jax_products(jax.make_jaxpr(vmapped)(*args).jaxpr, [])
    return ours, theirs


CASES = [(o, b, a) for o, b, a in itertools.product(OPERATIONS, BODIES, IN_AXES)
         if all(x is None or x <= len(OPERATIONS[o][i + 1]) for i, x in enumerate(a))]


@checks("PROG-7")
@pytest.mark.parametrize("operation,body,in_axes", CASES)
def test_a_product_in_a_body_is_batched_as_jax_batches_it(operation, body, in_axes):
    op, carry, weight = OPERATIONS[operation]
    args = tuple(_stacked(np.ones(s, np.float32), a) for s, a in zip((carry, weight), in_axes))
    ours, theirs = _held(BODIES[body](op), in_axes, args)
    assert theirs, "JAX's trace holds no dot_general"
    assert ours == theirs


@checks("PROG-7")
@pytest.mark.parametrize("in_axes", [(0, None), (0, 0), (None, 0), (1, 1)])
@pytest.mark.parametrize("carry", [(8, 8), (8,)])
def test_a_scan_over_stacked_weights_under_vmap_types_its_body_as_jax(carry, in_axes):
    """The scan over layers (``w`` in ``xs``): the batched scan's body's inputs, outputs and
    results typed as JAX's, and every product in it."""
    fun = _scan_xs(lambda c, w: c @ w)
    args = (_stacked(np.ones(carry, np.float32), in_axes[0]),
            _stacked(np.ones((3, 8, 8), np.float32), in_axes[1]))
    vmapped = jax.vmap(fun, in_axes=in_axes)
    program = describe_program(vmapped, *args)
    traced = jax.make_jaxpr(vmapped)(*args).jaxpr
    (scan,) = [eq for eq in program.equations if type(eq).__name__ == "Scan"]
    (jax_scan,) = [e for e in traced.eqns if e.primitive.name == "scan"]
    body, jax_body = scan.body, jax_scan.params["jaxpr"].jaxpr
    values = list(body.inputs) + [r for eq in body.equations for r in eq.results]
    assert [v.shape for v in body.inputs] == [v.aval.shape for v in jax_body.invars]
    assert [values[n].shape for n in body.outputs] == [v.aval.shape for v in jax_body.outvars]
    assert [r.shape for r in scan.results] == [v.aval.shape for v in jax_scan.outvars]
    assert _spec_products(program, []) == _jax_products(traced, [])
    assert (4,) + carry in [r.shape for r in scan.results]


@checks("PROG-7")
@pytest.mark.parametrize("body", ["scan", "fori_loop"])
@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0)])
@pytest.mark.parametrize("argnum", [0, 1])
def test_a_loops_gradient_vmapped_batches_its_products_as_jax(body, in_axes, argnum):
    """jax.vmap of jax.grad of a loop of products: the transposed scan's products (over
    residuals stacked along the loop) batched as JAX batches them."""
    loop = BODIES[body](lambda c, w: c @ w)
    grad = jax.grad(lambda h, w: loop(h, w).sum(), argnums=argnum)
    args = tuple(_stacked(np.ones((8, 8), np.float32), a) for a in in_axes)
    ours, theirs = _held(grad, in_axes, args)
    assert len(theirs) >= 2   # the forward product and at least one of the backward pass
    assert sorted(ours) == sorted(theirs)


def _put(spec, shape):
    return jax.device_put(np.ones(shape, np.float32), NS(EXPLICIT, spec))


# (the carry's placement, the weight's, in_axes): a split batch, a split feature dimension
SPLITS = {
    "batch-split-both": (P("x"), P("x"), (0, 0)),
    "batch-split-carry": (P("x"), P(), (0, None)),
    "feature-split": (P(None, "y"), P(), (0, None)),
    "feature-split-both": (P(None, "y"), P(None, "y"), (0, 0)),
}


@checks("PROG-7")
@pytest.mark.parametrize("body", ["scan", "fori_loop", "while_loop"])
@pytest.mark.parametrize("split", sorted(SPLITS))
def test_a_product_in_a_body_over_explicit_splits_is_typed_as_jax(split, body):
    """Over Explicit axes the products' result types (their splits) are JAX's too, and the
    whole step is held to jax.jit (traced, compiled and run, or refused alike)."""
    carry, weight, in_axes = SPLITS[split]
    args = (_put(carry, (4, 8, 8)), _put(weight, (4, 8, 8) if in_axes[1] == 0 else (8, 8)))
    fun = BODIES[body](lambda c, w: c @ w)
    ours, theirs = _held(fun, in_axes, args)
    assert ours == theirs
    _, verdict, problems = held_to_jax(lambda *a: jax.vmap(fun, in_axes=in_axes)(*a), *args)
    assert not problems, problems
