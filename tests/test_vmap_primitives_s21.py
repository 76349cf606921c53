"""``vmap`` of the primitives of a real step the spec refused as not described (PROG-0),
session 21 (issue 32 item 2), against JAX 0.10.2 on 8 CPU devices: a convolution, a
generic ``reduce_window``, ``triangular_solve``, ``tridiagonal_solve``, ``approx_top_k``,
a ``pure_callback`` batched ``sequential`` and an unordered ``io_callback``.

* Each step is described on one example and batched by the spec (``vmap_program``);
  ``jax.vmap`` of the jitted step is read from JAX's own trace (``describe_trace``): the
  two hold the same equations in order (the reshapes folding the batch into a
  convolution's or a solve's dimension, the scan a callback is mapped by), each with the
  same operands, result shapes, dtypes and parameters, and the verdict accepts with JAX's
  result types.
* ``jax.vmap`` of the step over a batch split over ``'y'`` (an Auto mesh and an Explicit
  one), through ``describe_program`` and ``explain_program``, against ``jax.jit`` staged
  to the end: accepted alike with JAX's result shardings and types, or refused at the
  same stage with JAX's class where JAX refuses (a reshape of the split batch folded into
  a solve's columns, PROG-12; a callback scanned over a split batch, LOOP-5; a
  reduce_window given a batched initial value, BAT-13).
* Where JAX's refusal is its primitive's sharding rule, which the spec does not state (a
  convolution whose rhs is split over an Explicit axis), the case is left open: the
  batching refuses as not described (PROG-0), never accepts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from shardlaw.properties.program_vmap_harness import step_equations
from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program, vmap_program
from shardlaw.spec.bridge.program import describe_program, describe_trace
from shardlaw.spec.program.primitives import BATCHING, entry_of_name

from test_steps_arguments import NS, P, held_to_jax

lax = jax.lax
AXES = {"A": jax.sharding.AxisType.Auto, "E": jax.sharding.AxisType.Explicit}


def _mesh(kind):
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(AXES[kind],) * 2)


def _rows(shape, seed=0):
    return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * (seed + 3) % 7
            / 7 + 0.5)


W = _rows((2, 1, 3), 1)   # a convolution's kernel: 2 output features, 1 input, width 3


def _conv_lhs(r):
    return lax.conv_general_dilated(r[None, None], W, (1,), "SAME")[0]


def _conv_rhs(w):
    return lax.conv_general_dilated(jnp.ones((1, 1, 8)), w[:, None, :], (1,), "SAME")[0]


def _conv_both(r, w):
    return lax.conv_general_dilated(r[None, None], w[:, None, :], (1,), "VALID")[0]


def _conv_nhwc(r):   # 2-d, channels last, strided, dilated
    return lax.conv_general_dilated(r[None, :, :, None], jnp.ones((2, 2, 1, 3)), (1, 2),
                                    "SAME", rhs_dilation=(2, 1),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))[0]


def _conv_grouped_rhs(w):   # feature groups: an rhs batched alone, folded in each group
    return lax.conv_general_dilated(jnp.ones((1, 2, 8)), w, (1,), "SAME",
                                    feature_group_count=2)[0]


def _conv_batch_groups(r):   # batch groups: an lhs batched alone, folded in each group
    return lax.conv_general_dilated(r, jnp.ones((2, 1, 3)), (1,), "VALID",
                                    batch_group_count=2)


def _product(a, b):
    return lax.reduce_window(a, 1.0, lambda x, y: x * y, (2,), (1,), "SAME")


def _pair(a):   # a variadic generic reduce_window: two operands, two initial values
    return lax.reduce_window((a, a * 2.0), (0.0, 1.0),
                             lambda x, y: (x[0] + y[0], x[1] * y[1]), (3,), (2,), "VALID")


def _tri(a, b, **kw):
    return lax.linalg.triangular_solve(jnp.tril(a) + 8.0 * jnp.eye(8), b, **kw)


def _callback(method):
    def f(r, s):
        return jax.pure_callback(lambda z, t: np.asarray(z) * np.asarray(t),
                                 jax.ShapeDtypeStruct(r.shape, r.dtype), r, s,
                                 vmap_method=method)
    return f


def _unordered(r, s):
    return io_callback(lambda z, t: np.asarray(z) + np.asarray(t),
                       jax.ShapeDtypeStruct(r.shape, r.dtype), r, s, ordered=False)


V8, M8, S = _rows((8,)), _rows((8, 8)), np.float32(2.0)
STEPS = {   # name: (step, examples, in_axes)
    "conv-lhs": (_conv_lhs, [V8], (0,)),
    "conv-rhs": (_conv_rhs, [_rows((2, 3))], (1,)),
    "conv-both": (_conv_both, [V8, _rows((2, 3))], (0, 1)),
    "conv-nhwc-2d": (_conv_nhwc, [_rows((6, 4))], (1,)),
    "conv-grouped-rhs": (_conv_grouped_rhs, [_rows((4, 1, 3))], (2,)),
    "conv-batch-groups": (_conv_batch_groups, [_rows((4, 1, 8))], (1,)),
    "reduce-window-product": (_product, [V8, V8], (0, None)),
    "reduce-window-pair": (lambda a: _pair(a), [V8], (1,)),
    "triangular-solve-b-left": (lambda a, b: _tri(a, b, left_side=True, lower=True),
                                [M8, _rows((8, 3))], (None, 1)),
    "triangular-solve-b-right": (lambda a, b: _tri(a, b, left_side=False, lower=True),
                                 [M8, _rows((3, 8))], (None, 0)),
    "triangular-solve-a": (lambda a, b: _tri(a, b, left_side=True, transpose_a=True),
                           [M8, _rows((8, 3))], (0, None)),
    "triangular-solve-both": (lambda a, b: _tri(a, b, left_side=True, lower=True),
                              [M8, _rows((8, 3))], (1, 0)),
    "tridiagonal-solve-b": (lambda d, b: lax.linalg.tridiagonal_solve(
        d * 0.0 + 0.5, d + 4.0, d * 0.0 + 0.25, b), [V8, _rows((8, 2))], (None, 1)),
    "tridiagonal-solve-diagonals": (lambda d, b: lax.linalg.tridiagonal_solve(
        d * 0.1, d + 4.0, d * 0.2, b), [V8, _rows((8, 2))], (0, None)),
    "approx-max-k": (lambda x: lax.approx_max_k(x, 3), [M8], (1,)),
    "approx-min-k-rows": (lambda x: lax.approx_min_k(x, 2, reduction_dimension=0)[0],
                          [M8], (0,)),
    "callback-sequential": (_callback("sequential"), [V8, V8], (0, None)),
    "callback-sequential-unrolled": (_callback("sequential_unrolled"), [V8, V8], (1, 0)),
    "io-callback-unordered": (_unordered, [V8, V8], (None, 0)),
    # a reshape given dimensions (a transposing reshape: JAX 0.10.2's rule prefixes the
    # batch; the spec refused it, PROG-0), alone and as a convolution's fold leaves it
    "reshape-dimensions": (lambda x: lax.reshape(x, (32,), (1, 0)), [_rows((8, 4))], (1,)),
    "reshape-dimensions-unsplit-batch": (lambda x: lax.reshape(x * 2.0, (4, 8), (1, 0)),
                                         [_rows((8, 4))], (0,)),
}


def _batched(examples, axes, size=4):
    return [e if a is None else np.stack([e * (k + 1) for k in range(size)], a)
            for e, a in zip(examples, axes)]


@checks("PROG-0")
@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_vmapped_step_is_what_jax_traces(name):
    """The spec's batching of the step, equation for equation, is JAX's trace of
    ``jax.vmap`` of it; accepted with JAX's result types; JAX runs it to those shapes."""
    f, examples, axes = STEPS[name]
    batched = _batched(examples, axes)
    vmapped = jax.vmap(jax.jit(f), in_axes=axes)
    program = vmap_program(describe_program(jax.jit(f), *examples), axes, axis_size=4)
    traced = describe_trace(vmapped, *batched)
    assert step_equations(program) == step_equations(traced)
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message
    assert verdict.out_types == tuple(traced.value_types[n] for n in traced.outputs)
    results = jax.tree_util.tree_leaves(jax.jit(vmapped)(*batched))
    assert [tuple(r.shape) for r in results] == [t.shape for t in verdict.out_types]


def test_the_primitives_have_batching_rules():
    for name in ("conv_general_dilated", "reduce_window", "triangular_solve",
                 "tridiagonal_solve", "approx_top_k"):
        assert BATCHING.of(entry_of_name(name)) is not None, name


# --------------------------------------------------------------------------- over meshes

def _split(shape, kind, spec=P("y")):
    return lambda: (jax.device_put(_rows(shape), NS(_mesh(kind), spec)),)


# name: (the row function, the batch's shape); vmapped over a batch of 4 split over 'y'
ROWS = {
    "conv-lhs": (_conv_lhs, (4, 8)),
    "conv-nhwc-2d": (_conv_nhwc, (4, 6, 4)),
    "reduce-window-product": (lambda r: _product(r, None), (4, 8)),
    "reduce-window-pair": (lambda r: _pair(r)[1], (4, 8)),
    "triangular-solve-a": (lambda m: _tri(m, jnp.ones((8, 3)), left_side=True), (4, 8, 8)),
    "triangular-solve-a-right": (lambda m: _tri(m, m[:3] * 2.0, left_side=False), (4, 8, 8)),
    "triangular-solve-both": (lambda m: _tri(m, m[:, :3], left_side=True), (4, 8, 8)),
    "tridiagonal-solve-all": (lambda r: lax.linalg.tridiagonal_solve(
        r[0] * 0.1, r[1] + 4.0, r[2] * 0.1, r[3:].T), (4, 4, 8)),
    "approx-max-k": (lambda r: lax.approx_max_k(r, 3)[0], (4, 8)),
    "approx-min-k-indices": (lambda r: lax.approx_min_k(r, 2)[1], (4, 8)),
}


@checks("PROG-0", "PROG-12")
@pytest.mark.parametrize("name,kind", [(name, kind) for name in sorted(ROWS) for kind in "AE"
                                       if (name, kind) != ("triangular-solve-a", "E")])
def test_vmap_of_the_step_over_a_split_batch_is_held_to_jax(name, kind):
    """vmap of the row function (the spec's vmap of the function) over a batch split over
    'y': accepted alike, with JAX's result shardings and types, over Auto and Explicit
    axes (one Explicit case left open, below)."""
    g, shape = ROWS[name]
    _, verdict, problems = held_to_jax(jax.vmap(g), *_split(shape, kind)())
    assert not problems, problems
    assert verdict.accepted, verdict.message


def _refused_alike(fun, args, rule, error):
    """JAX refuses ``fun`` while tracing with ``error``; so does the spec, by ``rule``
    (where describe_program applies the spec's vmap: from describe_program, as JAX's
    batching rule refuses inside it; else the verdict)."""
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(*args)
    assert type(refused.value).__name__ == error
    try:
        _, verdict, problems = held_to_jax(fun, *args)
    except Rejection as raised:
        assert raised.failure.rule == rule and isinstance(raised, type(refused.value))
        assert raised.stage == "trace"
        return
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.jax_error) == (rule, "trace", error)


REFUSED = {   # name: (the function, its arguments, the rule, JAX's class)
    # b alone batched: the batch moved last and folded into b's columns; split over an
    # Explicit axis, that reshape is refused (JAX's reshape sharding rule)
    "triangular-solve-b-folded-split": (
        jax.vmap(lambda b: _tri(M8, b, left_side=True)), _split((4, 8, 3), "E"),
        "PROG-12", "ShardingTypeError"),
    "triangular-solve-b-folded-split-in-axes": (
        jax.vmap(lambda b: _tri(M8, b, left_side=True), in_axes=2),
        _split((8, 8, 4), "E", P(None, None, "y")), "PROG-12", "ShardingTypeError"),
    # the batch scanned over is the callback's xs: their leading dimension split over an
    # Explicit axis is refused (a scan's, LOOP-5)
    "callback-sequential-split": (jax.vmap(lambda r: _callback("sequential")(r, r)),
                                  _split((4, 8), "E"), "LOOP-5", "ValueError"),
    "io-callback-unordered-split": (jax.vmap(lambda r: _unordered(r, r)),
                                    _split((4, 8), "E"), "LOOP-5", "ValueError"),
    # a reduce_window whose initial value is batched (BAT-13)
    "reduce-window-batched-init": (
        jax.vmap(lambda r: lax.reduce_window(r, r[0], lambda x, y: x * y, (2,), (1,),
                                             "SAME")),
        lambda: (_rows((4, 8)),), "BAT-13", "NotImplementedError"),
    "reduce-window-batched-init-split": (
        jax.vmap(lambda r: lax.reduce_window(r, r[0], lambda x, y: x * y, (2,), (1,),
                                             "SAME")),
        _split((4, 8), "A"), "BAT-13", "NotImplementedError"),
}


@checks("PROG-12", "LOOP-5", "BAT-13")
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_jax_refuses_under_vmap_the_spec_refuses_alike(name):
    fun, arguments, rule, error = REFUSED[name]
    _refused_alike(fun, arguments(), rule, error)


# the neighbours the refusals must not touch: accepted alike
NEIGHBOURS = {
    # the same solve with the batch unsplit (its reshape keeps nothing split)
    "triangular-solve-b-folded-unsplit": (
        jax.vmap(lambda b: _tri(M8, b, left_side=True)), _split((8, 8, 4), "E", P()),),
    # over Auto axes the folded reshape types nothing: accepted
    "triangular-solve-b-folded-auto": (
        jax.vmap(lambda b: _tri(M8, b, left_side=True)), _split((8, 8, 4), "A",
                                                                P(None, None, "y"))),
    # the callbacks over a batch unsplit, or split over Auto axes only
    "callback-sequential-unsplit": (jax.vmap(lambda r: _callback("sequential")(r, r)),
                                    _split((4, 8), "E", P(None, "y"))),
    "callback-sequential-auto": (jax.vmap(lambda r: _callback("sequential")(r, r)),
                                 _split((4, 8), "A")),
    "io-callback-unordered-auto": (jax.vmap(lambda r: _unordered(r, r)),
                                   _split((4, 8), "A")),
    # a reduce_window whose initial value is a constant, its operand batched
    "reduce-window-constant-init": (
        jax.vmap(lambda r: lax.reduce_window(r, 2.0, lambda x, y: x * y, (2,), (1,),
                                             "SAME")), _split((4, 8), "E")),
    # a batched initial value of a monoid's window (reduce_window_max): another rule
    "reduce-window-max-batched-init": (
        jax.vmap(lambda r: lax.reduce_window(r, -jnp.inf, lax.max, (2,), (1,), "SAME")),
        _split((4, 8), "A")),
}


@checks("PROG-12", "LOOP-5", "BAT-13")
@pytest.mark.parametrize("name", sorted(NEIGHBOURS))
def test_the_refusals_near_neighbours_are_accepted_alike(name):
    fun, arguments = NEIGHBOURS[name]
    _, verdict, problems = held_to_jax(fun, *arguments())
    assert not problems, problems
    assert verdict.accepted, verdict.message


# --------------------------------------------------------------------------- left open

OPEN = {   # JAX refuses by the primitive's sharding rule (ShardingTypeError)
    # an rhs batched alone, its batch split over an Explicit axis, folded into its output
    # features: the rhs is split, so JAX's rule asks for out_sharding
    "conv-rhs-split": (jax.vmap(_conv_rhs), _split((4, 2, 3), "E")),
    # both batched: the lhs's feature dimension takes the split batch
    "conv-both-split": (jax.vmap(lambda r: _conv_both(r, r[:6].reshape(2, 3))),
                        _split((4, 8), "E")),
    # (the linear-algebra sharding rule alike) a solve's a batched, split over 'y', its b
    # unbatched and over no mesh, broadcast unsplit: the batch splits differ
    "triangular-solve-a-split": (
        jax.vmap(lambda m: _tri(m, jnp.ones((8, 3)), left_side=True)), _split((4, 8, 8), "E")),
}


@checks("PROG-0")
@pytest.mark.parametrize("name", sorted(OPEN))
def test_a_refusal_of_a_primitives_sharding_rule_is_left_open(name):
    """JAX refuses (ShardingTypeError, the convolution's or the solve's sharding rule, which
    the spec does not state); the spec's batching abstains (PROG-0, named), never
    accepts."""
    fun, arguments = OPEN[name]
    args = arguments()
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(*args)
    assert type(refused.value).__name__ == "ShardingTypeError"
    with pytest.raises(Rejection) as raised:
        describe_program(fun, *args)
    assert raised.value.failure.rule == "PROG-0"
    assert "sharding rule" in str(raised.value)


@checks("PROG-0")
@pytest.mark.parametrize("kind", ["A", "E"])
def test_the_open_cases_neighbour_an_lhs_batched_alone_is_accepted(kind):
    """The neighbour: the lhs batched alone, split over 'y', folded into the lhs's batch
    dimension (JAX's rule types the result as the lhs): accepted alike."""
    _, verdict, problems = held_to_jax(jax.vmap(_conv_lhs), *_split((4, 8), kind)())
    assert not problems, problems
    assert verdict.accepted, verdict.message


# --------------------------------------------------------------------------- under a vmap inside

def _inside(g):
    return lambda a: jax.vmap(g)(a) * 2.0


INSIDE = {   # name: (the function, its arguments, the rule, JAX's class)
    "reduce-window-batched-init": (
        _inside(lambda r: lax.reduce_window(r, r[0], lambda x, y: x * y, (2,), (1,),
                                            "SAME")), lambda: (_rows((4, 8)),),
        "BAT-13", "NotImplementedError"),
    "callback-sequential-split": (_inside(lambda r: _callback("sequential")(r, r)),
                                  _split((4, 8), "E"), "LOOP-5", "ValueError"),
    "io-callback-unordered-split": (_inside(lambda r: _unordered(r, r)),
                                    _split((4, 8), "E"), "LOOP-5", "ValueError"),
}


@checks("BAT-13", "LOOP-5")
@pytest.mark.parametrize("name", sorted(INSIDE))
def test_a_refusal_inside_the_batching_rule_under_a_vmap_inside_is_the_specs(name):
    """JAX refuses inside vmap's batching rule for the primitive, under a vmap called
    inside the function (describe_program raised JAX's own error before); now the
    primitive is described on the example and batched by the spec's rule, which refuses
    as JAX, at the trace stage, an instance of JAX's class."""
    fun, arguments, rule, error = INSIDE[name]
    _refused_alike(fun, arguments(), rule, error)


@checks("BAT-13", "LOOP-5")
@pytest.mark.parametrize("name", ["reduce-window-constant-init", "callback-sequential-auto"])
def test_their_neighbours_under_a_vmap_inside_are_accepted_alike(name):
    g = {"reduce-window-constant-init": lambda r: lax.reduce_window(
        r, 2.0, lambda x, y: x * y, (2,), (1,), "SAME"),
        "callback-sequential-auto": lambda r: _callback("sequential")(r, r)}[name]
    _, verdict, problems = held_to_jax(_inside(g), *_split((4, 8), "A")())
    assert not problems, problems
    assert verdict.accepted, verdict.message


# the row functions, each followed in an inner jit by a constraint of the wrong rank
AFTER = {name: ROWS[name] for name in ("conv-lhs", "reduce-window-product",
                                       "triangular-solve-both", "tridiagonal-solve-all",
                                       "approx-max-k")} | {
    "callback-sequential": (lambda r: _callback("sequential")(r, r), (4, 8)),
    "io-callback-unordered": (lambda r: _unordered(r, r), (4, 8))}


@checks("PROG-0", "WSC-4")
@pytest.mark.parametrize("name", sorted(AFTER))
def test_a_refusal_after_the_primitive_under_a_vmap_inside_is_described(name):
    """A constraint of the wrong rank after the primitive, in an inner jit under a vmap
    called inside the function: JAX refuses it on the example (ValueError); the spec
    batches the jit's body, the primitive included (PROG-0 at it before, so JAX's own
    error), and refuses by WSC-4 at the constraint, last in the batched body."""
    g, shape = AFTER[name]
    mesh = _mesh("A")
    # the row's result's rank plus one: the wrong rank
    rank = len(jax.eval_shape(g, jax.ShapeDtypeStruct(shape[1:], np.float32)).shape) + 1
    after = jax.jit(lambda r: lax.with_sharding_constraint(
        g(r), NS(mesh, P(*([None] * rank)))))
    fun = lambda a: jax.vmap(after)(a)   # noqa: E731
    args = _split(shape, "A")()
    with pytest.raises(ValueError):
        jax.jit(fun).trace(*args)
    program, verdict, problems = held_to_jax(fun, *args)
    assert not problems, problems
    last = len(program.equations[0].body.equations) - 1
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "WSC-4", "trace", f"body[0].jit.body[{last}]", "ValueError")


# --------------------------------------------------------------------------- two vmaps

# name: (the row function, the rows' shape, the mesh's kind, the rule both refuse by or
# None); vmapped twice over a (2, 4, ...) batch whose inner dimension is split over 'y'
NESTED = {
    # both batched: the inner fold's reshape is given dimensions (the lhs's batch moved
    # into its feature dimension), which the outer vmap batches (PROG-0 before)
    "conv-both": (lambda r: _conv_both(r, r[:6].reshape(2, 3)), (8,), "A", None),
    "conv-lhs": (_conv_lhs, (8,), "A", None),
    # over Explicit axes the outer fold merges the split inner batch as its minor part
    "conv-lhs-explicit": (_conv_lhs, (8,), "E", "PROG-12"),
    "triangular-solve-b": (lambda b: _tri(M8, b, left_side=True), (8, 3), "A", None),
    "triangular-solve-b-explicit": (lambda b: _tri(M8, b, left_side=True), (8, 3), "E",
                                    "PROG-12"),
    "tridiagonal-solve-all-explicit": (ROWS["tridiagonal-solve-all"][0], (4, 8), "E", None),
    "approx-max-k-explicit": (ROWS["approx-max-k"][0], (8,), "E", None),
    "callback-sequential": (lambda r: _callback("sequential")(r, r), (8,), "A", None),
    "io-callback-unordered-explicit": (lambda r: _unordered(r, r), (8,), "E", "LOOP-5"),
}


@checks("PROG-0", "PROG-12", "LOOP-5")
@pytest.mark.parametrize("name", sorted(NESTED))
def test_two_vmaps_of_the_step_are_held_to_jax(name):
    """vmap of vmap of the row function (the spec applies both): accepted alike with JAX's
    result shardings and types, or refused alike while tracing."""
    g, shape, kind, rule = NESTED[name]
    args = _split((2, 4) + shape, kind, P(None, "y"))()
    fun = jax.vmap(jax.vmap(g))
    if rule is None:
        _, verdict, problems = held_to_jax(fun, *args)
        assert not problems, problems
        assert verdict.accepted, verdict.message
        return
    error = {"PROG-12": "ShardingTypeError", "LOOP-5": "ValueError"}[rule]
    _refused_alike(fun, args, rule, error)
