"""A convolution (PROG-15, with PROG-9) and a solve (PROG-16) over Explicit axes, session 21
(issue 32 item 5: false acceptances), against JAX 0.10.2 on 8 CPU devices.

JAX types a ``conv_general_dilated`` given no ``out_sharding`` by its sharding rule: its
kernel must be unsplit over Explicit axes and its lhs's input-feature dimension too, and a
resized dimension of the lhs's split must stay divisible; ``triangular_solve`` and
``tridiagonal_solve`` by linear-algebra rules: batch dimensions split alike, contracted
dimensions unsplit. Where they refuse (ShardingTypeError while tracing), the spec refused
as not described (PROG-0) under ``vmap`` and, written directly, re-raised JAX's error
(the refused equation was described but the spec accepted it). Now:

* written directly, over an Explicit mesh and a mixed one (``x`` Explicit, ``y`` Auto),
  the refused call is described and the spec refuses it by the rule at its path, at the
  trace stage, with JAX's class; its accepting neighbours are accepted with JAX's result
  types and shardings (held_to_jax compares them; the result's spec is asserted too);
* under ``vmap`` (vmapprims3's open cases) the spec's batching refuses by the same rule.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection
from shardlaw.spec.bridge.program import describe_program

from test_steps_arguments import NS, P, held_to_jax

lax = jax.lax
EXPLICIT, AUTO = jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto
MESHES = {"E": (EXPLICIT, EXPLICIT), "mixed": (EXPLICIT, AUTO)}


def _mesh(kind):
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=MESHES[kind])


def _put(shape, spec, kind="E"):
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 5 / 5 + 0.5
    return jax.device_put(values, NS(_mesh(kind), spec))


def _conv(lhs, rhs):
    return lax.conv_general_dilated(lhs, rhs, (1,), "SAME")


def _conv_valid(lhs, rhs):
    return lax.conv_general_dilated(lhs, rhs, (1,), "VALID")


def _conv_nhwc(lhs, rhs):   # channels last: the lhs's feature dimension is its last
    return lax.conv_general_dilated(lhs, rhs, (1,), "SAME",
                                    dimension_numbers=("NWC", "WIO", "NWC"))


def _tri(a, b, left_side=True, transpose_a=False):
    return lax.linalg.triangular_solve(a, b, left_side=left_side, transpose_a=transpose_a,
                                       lower=True)


def _tri_right(a, b):
    return _tri(a, b, left_side=False)


def _tri_transposed(a, b):
    return _tri(a, b, transpose_a=True)


def _trid(dl, d, du, b):
    return lax.linalg.tridiagonal_solve(dl, d, du, b)


def _diagonals(shape, spec, kind):
    return tuple(_put(shape, spec, kind) for _ in range(3))


# name: (the function, its arguments given the mesh's kind, the rule, the path); the
# lhs f32[4, 2, 8] (NCW), the kernel f32[4, 2, 3] (OIW)
REFUSED = {
    "conv-rhs-split": (_conv, lambda k: (_put((4, 2, 8), P(), k),
                                         _put((4, 2, 3), P("x"), k)), "PROG-15"),
    "conv-lhs-feature-split": (
        _conv, lambda k: (_put((4, 2, 8), P(None, "x"), k), _put((4, 2, 3), P(), k)),
        "PROG-15"),
    "conv-nwc-feature-split": (
        _conv_nhwc, lambda k: (_put((4, 8, 2), P(None, None, "x"), k),
                               _put((3, 2, 4), P(), k)), "PROG-15"),
    # the spatial dimension split over 'x' (2 ways) resized from 8 to 5: not divisible
    "conv-resized-indivisible": (
        _conv_valid, lambda k: (_put((4, 2, 8), P(None, None, "x"), k),
                                _put((4, 2, 4), P(), k)), "PROG-9"),
    # a split over 'x', b over no mesh: the batch dimensions split differently
    "triangular-batch-unlike": (
        _tri, lambda k: (_put((2, 8, 8), P("x"), k), jnp.ones((2, 8, 3))), "PROG-16"),
    "triangular-a-contracted": (
        _tri, lambda k: (_put((8, 8), P(None, "x"), k), _put((8, 3), P(), k)), "PROG-16"),
    "triangular-b-contracted": (
        _tri, lambda k: (_put((8, 8), P(), k), _put((8, 3), P("x"), k)), "PROG-16"),
    "triangular-right-a-contracted": (
        _tri_right, lambda k: (_put((8, 8), P("x"), k), _put((3, 8), P(), k)), "PROG-16"),
    "triangular-transposed-a-contracted": (
        _tri_transposed, lambda k: (_put((8, 8), P("x"), k), _put((8, 3), P(), k)),
        "PROG-16"),
    "tridiagonal-b-rows": (
        _trid, lambda k: (*_diagonals((8,), P(), k), _put((8, 4), P("x"), k)), "PROG-16"),
    "tridiagonal-b-columns": (
        _trid, lambda k: (*_diagonals((8,), P(), k), _put((8, 4), P(None, "x"), k)),
        "PROG-16"),
    "tridiagonal-batch-unlike": (
        _trid, lambda k: (*_diagonals((2, 8), P("x"), k), _put((2, 8, 4), P(), k)),
        "PROG-16"),
}

# name: (the function, its arguments given the mesh's kind, JAX's result spec over the
# Explicit mesh)
ACCEPTED = {
    "conv-lhs-batch-split": (
        _conv, lambda k: (_put((4, 2, 8), P("x"), k), _put((4, 2, 3), P(), k)),
        ("x", None, None)),
    # kept size (SAME) and a resized one (VALID, 10 to 8) the split divides
    "conv-lhs-spatial-split": (
        _conv, lambda k: (_put((4, 2, 8), P(None, None, "x"), k), _put((4, 2, 3), P(), k)),
        (None, None, "x")),
    "conv-resized-divisible": (
        _conv_valid, lambda k: (_put((4, 2, 10), P(None, None, "x"), k),
                                _put((4, 2, 3), P(), k)), (None, None, "x")),
    "conv-nwc-batch-split": (
        _conv_nhwc, lambda k: (_put((4, 8, 2), P("x"), k), _put((3, 2, 4), P(), k)),
        ("x", None, None)),
    "triangular-a-kept": (
        _tri, lambda k: (_put((8, 8), P("x"), k), _put((8, 3), P(), k)), ("x", None)),
    "triangular-b-columns": (
        _tri, lambda k: (_put((8, 8), P(), k), _put((8, 4), P(None, "x"), k)), (None, "x")),
    "triangular-batch-alike": (
        _tri, lambda k: (_put((2, 8, 8), P("x"), k), _put((2, 8, 3), P("x"), k)),
        ("x", None, None)),
    "triangular-right-a-kept": (
        _tri_right, lambda k: (_put((8, 8), P(None, "x"), k), _put((3, 8), P(), k)),
        (None, "x")),
    "tridiagonal-batch-alike": (
        _trid, lambda k: (*_diagonals((2, 8), P("x"), k), _put((2, 8, 4), P("x"), k)),
        ("x", None, None)),
}


@checks("PROG-15", "PROG-16", "PROG-9")
@pytest.mark.parametrize("kind", sorted(MESHES))
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_call_jaxs_sharding_rule_refuses_is_refused_by_the_rule(name, kind):
    """JAX refuses while tracing (ShardingTypeError); the spec describes the refused call
    and refuses it by the rule, at the trace stage, with JAX's class, at its path."""
    fun, arguments, rule = REFUSED[name]
    args = arguments(kind)
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(*args)
    assert type(refused.value).__name__ == "ShardingTypeError"
    _, verdict, problems = held_to_jax(fun, *args)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        rule, "trace", "body[0]", "ShardingTypeError"), verdict.message


@checks("PROG-15", "PROG-16", "PROG-9")
@pytest.mark.parametrize("kind", sorted(MESHES))
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_the_neighbours_are_accepted_with_jaxs_result_types(name, kind):
    """Split where JAX's rule allows: accepted alike, the result typed as JAX types it (over
    the mixed mesh only the Explicit axis 'x' is in the type)."""
    fun, arguments, spec = ACCEPTED[name]
    args = arguments(kind)
    _, verdict, problems = held_to_jax(fun, *args)
    assert not problems, problems
    assert verdict.accepted, verdict.message
    out = jax.jit(fun).trace(*args).jaxpr.out_avals[0]
    assert tuple(out.sharding.spec) == spec


@checks("PROG-15")
def test_a_kernel_split_over_an_auto_axis_is_accepted():
    """The mixed mesh's neighbour: the kernel split over the Auto axis 'y' (not in its
    type): JAX's rule sees it unsplit and accepts, and so does the spec."""
    args = (_put((4, 2, 8), P("x"), "mixed"), _put((4, 2, 3), P("y"), "mixed"))
    _, verdict, problems = held_to_jax(_conv, *args)
    assert not problems and verdict.accepted, (problems, verdict.message)


@checks("PROG-15")
def test_a_convolution_given_out_sharding_is_not_read_by_the_rule():
    """With ``out_sharding`` JAX types the result by it (the kernel split or not): the spec
    does not refuse by PROG-15, and accepts with JAX's result type."""
    mesh = _mesh("E")

    def fun(lhs, rhs):
        return lax.conv_general_dilated(lhs, rhs, (1,), "SAME",
                                        out_sharding=NS(mesh, P("x")))

    args = (_put((4, 2, 8), P()), _put((4, 2, 3), P("y")))
    _, verdict, problems = held_to_jax(fun, *args)
    assert not problems and verdict.accepted, (problems, verdict.message)
    assert tuple(jax.jit(fun).trace(*args).jaxpr.out_avals[0].sharding.spec)[0] == "x"


# --------------------------------------------------------------------------- factorizations

L = lax.linalg
# name: the factorization of a square matrix (its first result)
FACTORIZATIONS = {
    "cholesky": lambda a: L.cholesky(a, symmetrize_input=False),
    "qr": lambda a: L.qr(a)[1],
    "eigh": lambda a: L.eigh(a, symmetrize_input=False)[1],
    "svd": lambda a: L.svd(a, full_matrices=False)[1],
    "lu": lambda a: L.lu(a)[0],
    "schur": lambda a: L.schur(a)[0],
    "hessenberg": lambda a: L.hessenberg(a)[0],
    "tridiagonal": lambda a: L.tridiagonal(a)[0],
    "eig": lambda a: L.eig(a, compute_left_eigenvectors=False,
                           compute_right_eigenvectors=False)[0],
}


def _matrices(shape, spec, kind):
    values = np.broadcast_to(np.eye(8, dtype=np.float32) * 8 + 1, shape).copy()
    return jax.device_put(values, NS(_mesh(kind), spec))


@checks("PROG-16")
@pytest.mark.parametrize("kind", sorted(MESHES))
@pytest.mark.parametrize("name", sorted(FACTORIZATIONS))
def test_a_factorization_of_a_split_matrix_is_refused_as_jax_refuses_it(name, kind):
    """The matrix's rows split over 'x' (an f32[8, 8], or an f32[2, 8, 8] split on its
    batch and rows): JAX's linear-algebra rule refuses, the spec by PROG-16 at the trace
    stage with JAX's class, at the factorization's path."""
    fun = FACTORIZATIONS[name]
    for shape, spec in (((8, 8), P("x")), ((2, 8, 8), P(None, "x"))):
        args = (_matrices(shape, spec, kind),)
        with pytest.raises(Exception) as refused:
            jax.jit(fun).trace(*args)
        assert type(refused.value).__name__ == "ShardingTypeError"
        _, verdict, problems = held_to_jax(fun, *args)
        assert not problems, problems
        assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
            "PROG-16", "trace", "body[0]", "ShardingTypeError"), verdict.message


@checks("PROG-16")
@pytest.mark.parametrize("kind", sorted(MESHES))
@pytest.mark.parametrize("name", sorted(FACTORIZATIONS))
def test_a_factorization_of_matrices_split_on_their_batch_is_accepted_alike(name, kind):
    """The neighbour: an f32[2, 8, 8] split over 'x' on its batch alone (over the mixed
    mesh, its rows split over the Auto axis 'y' too, not in its type): accepted alike, the
    result's batch split as JAX types it."""
    fun = FACTORIZATIONS[name]
    spec = P("x") if kind == "E" else P("x", "y")
    args = (_matrices((2, 8, 8), spec, kind),)
    _, verdict, problems = held_to_jax(fun, *args)
    assert not problems, problems
    assert verdict.accepted, verdict.message
    assert tuple(jax.jit(fun).trace(*args).jaxpr.out_avals[0].sharding.spec)[0] == "x"


# --------------------------------------------------------------------------- under vmap

W = np.ones((2, 1, 3), np.float32)


def _conv_rhs(w):   # the kernel batched alone: its batch folded into its output features
    return lax.conv_general_dilated(jnp.ones((1, 1, 8)), w[:, None, :], (1,), "SAME")[0]


def _conv_both(r):   # both batched: the lhs's batch folded into its feature dimension
    return lax.conv_general_dilated(r[None, None], r[:6].reshape(2, 3)[:, None, :], (1,),
                                    "VALID")[0]


def _conv_lhs(r):   # the lhs batched alone: folded into its batch dimension
    return lax.conv_general_dilated(r[None, None], W, (1,), "SAME")[0]


def _tri_a(m):   # a batched (split), b unbatched over no mesh: broadcast unsplit
    return _tri(jnp.tril(m) + 8.0 * jnp.eye(8), jnp.ones((8, 3)))


def _tri_both(m):   # both batched alike
    return _tri(jnp.tril(m) + 8.0 * jnp.eye(8), m[:, :3])


# name: (the row function, the batch's shape, the rule or None: accepted); vmapped over a
# batch split over 'y' of an Explicit mesh
UNDER_VMAP = {
    "conv-rhs-split": (_conv_rhs, (4, 2, 3), "PROG-15"),
    "conv-both-split": (_conv_both, (4, 8), "PROG-15"),
    "conv-lhs-split": (_conv_lhs, (4, 8), None),
    "triangular-a-split": (_tri_a, (4, 8, 8), "PROG-16"),
    "triangular-both-split": (_tri_both, (4, 8, 8), None),
    # (the batch split over 'y' is the factorization's batch: JAX's rule allows it)
    "qr-batch-split": (FACTORIZATIONS["qr"], (4, 8, 8), None),
    "svd-batch-split": (FACTORIZATIONS["svd"], (4, 8, 8), None),
}


@checks("PROG-15", "PROG-16")
@pytest.mark.parametrize("name", sorted(UNDER_VMAP))
def test_under_vmap_the_batching_refuses_by_the_rule_or_accepts_alike(name):
    """vmapprims3's open cases (PROG-0 before): JAX's batched call refused by its sharding
    rule, the spec's batching refuses by the rule at the trace stage with JAX's class; the
    neighbours are accepted alike."""
    g, shape, rule = UNDER_VMAP[name]
    fun = jax.vmap(g)
    args = (_matrices(shape, P("y"), "E") if g in FACTORIZATIONS.values() else
            _put(shape, P("y")),)
    if rule is None:
        _, verdict, problems = held_to_jax(fun, *args)
        assert not problems and verdict.accepted, (problems, verdict.message)
        return
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(*args)
    assert type(refused.value).__name__ == "ShardingTypeError"
    with pytest.raises(Rejection) as raised:
        describe_program(fun, *args)
    failure = raised.value.failure
    assert (failure.rule, raised.value.stage, failure.jax_error) == (
        rule, "trace", "ShardingTypeError"), str(raised.value)
