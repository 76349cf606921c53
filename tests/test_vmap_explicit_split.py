"""vmap over a mapped dimension split over Explicit mesh axes (BAT-9), against JAX 0.10.2.

JAX reads the split of each mapped argument's mapped dimension from its type
(``_mapped_axis_spec``): the function vmapped is given values typed without it, and every
batched value's batch dimension is typed with it (``explicit_mesh_axis``), a broadcast of
an unbatched value to the batch and a batched typed parameter (a reshard's, a
broadcast_in_dim's) included. The spec's vmap (``in_splits``, which ``describe_program``
reads from the user's arguments) is held to JAX's trace equation for equation, type for
type, and to its run (result shardings); its refusals to JAX's class at JAX's stage.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.registry import checks
from shardlaw.spec import Rejection, explain_program, from_jax
from shardlaw.spec.bridge.program import describe_program, describe_trace
from shardlaw.spec.program.description import Opaque

from test_steps_vmap import MORE, STEPS

SIZE = 4   # the batch: split over 'y' (4 ways) or 'x' (2 ways)


def _mesh():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _plain(value):
    """A parameter as both descriptions hold it (numpy integers in JAX's trace read back as
    their text; a sharding parameter by its spec)."""
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if hasattr(value, "spec") and hasattr(value, "mesh"):
        return ("sharding", tuple(value.spec.partitions))
    return value


def typed_equations(program, out=None):
    """Every equation of ``program``, bodies included, in order: (primitive or kind,
    operands, each result's shape, dtype and split over Explicit axes, parameters)."""
    out = [] if out is None else out
    for eq in program.equations:
        params = {k: _plain(v) for k, v in eq.params} if isinstance(eq, Opaque) else {}
        out.append((getattr(eq, "primitive", eq.kind), eq.operands,
                    tuple((r.shape, r.dtype, _split(r)) for r in eq.results), params))
        if eq.body is not None:
            typed_equations(eq.body, out)
    return out


def _split(value):
    entries = list(value.spec.partitions) if value.spec is not None else []
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(entries)


def _example(shape):
    return np.linspace(-1.0, 1.0, max(1, int(np.prod(shape))), dtype=np.float32).reshape(shape)


def _batched(shapes, axes, split):
    """The batched arguments: each mapped one stacked SIZE times at its axis and split
    there over ``split``; the unmapped ones replicated."""
    mesh = _mesh()
    out = []
    for shape, axis in zip(shapes, axes):
        example = _example(shape)
        if axis is None:
            out.append(jax.device_put(example, jax.sharding.NamedSharding(mesh, jax.P())))
            continue
        stacked = np.stack([example * (k + 1) for k in range(SIZE)], axis)
        entries = [None] * stacked.ndim
        entries[axis] = split
        out.append(jax.device_put(stacked, jax.sharding.NamedSharding(mesh, jax.P(*entries))))
    return out


def _held(fun, args, equations=True):
    """The spec's description of ``fun`` (what describe_program gives: the vmaps applied
    by the spec) against JAX's trace of it and its run: equations and types alike (or,
    not ``equations``, the results' types only), the verdict accepted with JAX's result
    types and shardings."""
    with jax.set_mesh(_mesh()):
        program = describe_program(fun, *args)
        traced = describe_trace(fun, *args)
        results = jax.tree_util.tree_leaves(jax.jit(fun)(*args))
    if equations:
        assert typed_equations(program) == typed_equations(traced)
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message
    assert verdict.out_types == tuple(traced.value_types[n] for n in traced.outputs)
    assert [from_jax(r.sharding).spec for r in results] == [
        s.spec for s in verdict.out_shardings], (results, verdict.out_shardings)
    return program


# JAX refuses the batched reshape while tracing (its reshape typing over Explicit axes:
# "This reshape is not supported", ShardingTypeError): (4, 8) to (2, 16), the batch
# dimension split and first, neither splits one dimension nor merges several; the spec
# refuses it by PROG-12 at the reshape
_REFUSED_BY_JAX = {"reshape": ("PROG-12", "reshape")}


def _refused(fun, args, rule, primitive):
    """JAX refuses tracing ``fun`` (ShardingTypeError); the spec refuses the program
    describe_program gives by ``rule`` at the trace stage, with JAX's class, at an
    equation of ``primitive``."""
    with jax.set_mesh(_mesh()):
        with pytest.raises(Exception) as raised:
            jax.jit(fun).trace(*args)
        program = describe_program(fun, *args)
    assert type(raised.value).__name__ == "ShardingTypeError"
    verdict = explain_program(program)
    assert (verdict.rule, verdict.stage, verdict.jax_error) == (
        rule, "trace", "ShardingTypeError"), verdict.message
    at = int(verdict.path.removeprefix("body[").removesuffix("]"))
    assert program.equations[at].primitive == primitive, verdict.path


@checks("BAT-9", "PROG-7", "PROG-8", "PROG-12")
@pytest.mark.parametrize("split", ["x", "y"])
@pytest.mark.parametrize("name", sorted(STEPS) + sorted(MORE))
def test_a_step_vmapped_over_an_explicit_split_is_what_jax_traces(name, split):
    """Every step of the vmap steps' vocabulary (matmuls, broadcasting arithmetic,
    reductions, sorts, selects, slices, gradients ...), its mapped arguments' batch
    dimension split over an Explicit axis: each equation typed as JAX types it, or refused
    as JAX refuses it (a reshape JAX cannot type, PROG-12)."""
    step, shapes, axes = {**STEPS, **MORE}[name]
    fun, args = jax.vmap(jax.jit(step), in_axes=axes), _batched(shapes, axes, split)
    if name in _REFUSED_BY_JAX:
        _refused(fun, args, *_REFUSED_BY_JAX[name])
    else:
        _held(fun, args)


@checks("BAT-9")
@pytest.mark.parametrize("out_axes", [0, 1, -1])
def test_an_unbatched_result_is_broadcast_with_the_split(out_axes):
    """A result vmap did not batch is broadcast to out_axes, its batch dimension typed
    with the mapped arguments' Explicit axes (JAX's matchaxis)."""
    fun = jax.vmap(jax.jit(lambda a, c: (jnp.sin(a), c * 2)), in_axes=(0, None),
                   out_axes=out_axes)
    _held(fun, _batched(((8,), (8,)), (0, None), "y"))


@checks("BAT-9")
def test_nested_vmaps_over_two_explicit_axes_are_what_jax_traces():
    """Two vmaps, each over a dimension split over its own Explicit axis."""
    mesh = _mesh()
    z = jax.device_put(np.ones((2, 4, 8), np.float32), jax.sharding.NamedSharding(
        mesh, jax.P("x", "y")))
    w = jax.device_put(np.ones((8, 3), np.float32), jax.sharding.NamedSharding(mesh, jax.P()))
    fun = jax.vmap(jax.vmap(jax.jit(lambda a, w: jnp.tanh(a @ w).sum()), in_axes=(0, None)),
                   in_axes=(0, None))
    _held(fun, [z, w])


@checks("BAT-9")
def test_spmd_axis_name_naming_the_split_is_what_jax_traces():
    """spmd_axis_name naming the mapped arguments' Explicit axes: JAX drops it, the
    batching as without it."""
    fun = jax.vmap(jax.jit(lambda a: jnp.cumsum(a) * 2), spmd_axis_name="y")
    _held(fun, _batched(((8,),), (0,), "y"))


@checks("BAT-9")
def test_a_reshard_in_the_body_gains_the_split():
    """A reshard in the body is batched with the mapped axes at its batch dimension."""
    fun = jax.vmap(jax.jit(lambda a: jax.sharding.reshard(a, jax.P("x"))))
    _held(fun, _batched(((8,),), (0,), "y"))


def _refused_alike(fun, args):
    """JAX refuses ``fun(*args)`` while tracing; the spec refuses it with JAX's class, at
    stage trace."""
    with jax.set_mesh(_mesh()):
        with pytest.raises(Exception) as theirs:
            jax.jit(fun).trace(*args)
        with pytest.raises(Rejection) as ours:
            explain_program(describe_program(fun, *args))
    failure = ours.value.failure
    names = {c.__name__ for c in type(theirs.value).__mro__}
    assert failure.jax_error in names or failure.error_type.__name__ in names, (
        theirs.value, ours.value)
    assert ours.value.stage in ("trace", "jit")   # (a sharding's own checks: JAX's trace)
    return ours.value


@checks("BAT-9")
def test_mapped_arguments_split_unlike_are_refused_as_jax_refuses():
    """JAX: "Mapped away dimension of inputs passed to vmap should be sharded the same"
    (ValueError)."""
    mesh = _mesh()
    a = jax.device_put(np.ones((4, 8), np.float32), jax.sharding.NamedSharding(mesh, jax.P("y")))
    b = jax.device_put(np.ones((4, 8), np.float32), jax.sharding.NamedSharding(mesh, jax.P()))
    assert _refused_alike(jax.vmap(lambda a, b: a + b), [a, b]).rule == "BAT-9"


@checks("BAT-9")
def test_an_unmapped_argument_split_over_the_mapped_axis_is_refused_as_jax_refuses():
    """JAX: "Unmapped values passed to vmap cannot be sharded along the mesh axis you are
    vmapping over" (ValueError)."""
    mesh = _mesh()
    a = jax.device_put(np.ones((4, 8), np.float32), jax.sharding.NamedSharding(mesh, jax.P("y")))
    w = jax.device_put(np.ones((8, 4), np.float32),
                       jax.sharding.NamedSharding(mesh, jax.P(None, "y")))
    assert _refused_alike(jax.vmap(lambda a, w: a @ w, in_axes=(0, None)), [a, w]).rule == \
        "BAT-9"


@checks("BAT-9")
def test_spmd_axis_name_naming_another_axis_is_refused_as_jax_refuses():
    """JAX: "Only one of spmd_axis_name or arrays sharded on `Explicit` mesh axis type is
    allowed" (ValueError)."""
    args = _batched(((8,),), (0,), "y")
    assert _refused_alike(jax.vmap(jnp.sin, spmd_axis_name="x"), args).rule == "BAT-9"


@checks("NS-2")
def test_a_body_splitting_over_the_mapped_axis_is_refused_as_jax_refuses():
    """A reshard in the body over the axis vmap maps over: the batched spec names it twice
    (JAX's DuplicateSpecError)."""
    fun = jax.vmap(lambda a: jax.sharding.reshard(a, jax.P("y")))
    assert _refused_alike(fun, _batched(((8,),), (0,), "y")).rule == "NS-2"


CONTROL_FLOW = {   # (function, example shapes, in_axes)
    "cond-batched-predicate": (
        lambda p, a: jax.lax.cond(p > 0, lambda v: v * 2, lambda v: jnp.sin(v), a),
        ((), (8,)), (0, 0)),
    "cond-predicate-only-batched": (
        lambda p, a: jax.lax.cond(p > 0, lambda v: v * 2, lambda v: jnp.sin(v), a),
        ((), (8,)), (0, None)),
    "cond-unbatched-predicate": (
        lambda a: jax.lax.cond(a.sum() > 0, lambda v: v * 2, lambda v: v + 1, a),
        ((8,),), (0,)),
    "scan-unbatched-carry": (
        lambda c, xs: jax.lax.scan(lambda c, x: (c + x, c * x), c, xs),
        ((8,), (3, 8)), (None, 0)),
    "fori-loop": (lambda a: jax.lax.fori_loop(0, 3, lambda i, v: v * 2 + 1, a), ((8,),), (0,)),
}


@checks("BAT-9", "PROG-8")
@pytest.mark.parametrize("name", sorted(CONTROL_FLOW))
def test_control_flow_vmapped_over_an_explicit_split_is_what_jax_traces(name):
    """A cond (its predicate batched: a select_n of the branches), a scan and a loop
    under vmap over a mapped dimension split over an Explicit axis: typed as JAX types
    them, an unbatched carry or operand broadcast to the batch with the split (the spec
    writes a batched cond's branches as jits before the select_n, where JAX inlines
    them: the results' types and shardings are compared)."""
    fun, shapes, axes = CONTROL_FLOW[name]
    _held(jax.vmap(jax.jit(fun), in_axes=axes), _batched(shapes, axes, "y"),
          equations=not name.startswith("cond"))


# --------------------------------------------------------------------------- custom_vjp

def _scaled(place):
    """A custom_vjp of two inputs whose bwd places the first one's cotangent."""
    @jax.custom_vjp
    def scaled(w, v):
        return w * v

    def bwd(r, g):
        w, v = r
        return place(g * v), g * w
    scaled.defvjp(lambda w, v: (scaled(w, v), (w, v)), bwd)
    return scaled


@checks("LOOP-3", "DA-1")
@pytest.mark.parametrize("transform", ["vjp", "jvp", "linearize"])
@pytest.mark.parametrize("devices", ["same", "other"])
def test_a_custom_vjp_vmapped_then_differentiated_keeps_its_fwd_and_bwd(transform, devices):
    """vmap batches a custom_vjp's fwd and bwd with its body: differentiated after vmap,
    reverse mode runs the batched bwd (its constraint on other devices refused as JAX
    refuses it), forward mode leaves a custom_lin JAX refuses when lowering (LOOP-3)."""
    import test_control_flow_ad as cf
    clip = cf._clip(cf.MESH if devices == "same" else cf.HALF)
    verdict = cf.held(transform, jax.vmap(clip), cf.BATCH)
    if transform != "vjp":
        assert (verdict.rule, verdict.stage) == ("LOOP-3", "lower")
    else:
        assert verdict.accepted is (devices == "same")


@checks("DA-1")
@pytest.mark.parametrize("devices", ["same", "other"])
def test_an_unmapped_input_s_cotangent_from_a_batched_bwd_is_summed(devices):
    """An input vmap does not map: the batched bwd gives its cotangent per example, summed
    over the batch (JAX's _match_axes_and_sum), the constraint on it held to JAX."""
    import test_control_flow_ad as cf
    mesh = cf.MESH if devices == "same" else cf.HALF
    scaled = _scaled(lambda c: jax.lax.with_sharding_constraint(c, cf._on(mesh, None, "y")))
    w = jax.device_put(np.ones((8, 4), np.float32), cf._on(cf.MESH))
    fun = jax.vmap(scaled, in_axes=(None, 0))
    verdict = cf.held("vjp", fun, w, cf.BATCH)
    assert verdict.accepted is (devices == "same")
    (call,) = [eq for eq in cf._walk(describe_program(fun, w, cf.BATCH))
               if eq.kind == "custom_vjp_call"]
    assert "reduce_sum" in [getattr(eq, "primitive", None) for eq in call.bwd.equations]


@checks("LOOP-4")
def test_a_custom_vjp_vmapped_over_an_explicit_split_is_differentiated_as_jax_does():
    """The batch split over an Explicit axis: the batched bwd's cotangents typed with it,
    the unmapped input's summed over the batch (the cotangent given is typed as the
    result: JAX refuses a numpy one while tracing the batched bwd, which the spec does not
    state)."""
    import test_control_flow_ad as cf
    from shardlaw.properties.program_ad_harness import compare_rewrite, run_function
    from shardlaw.spec.program import vjp_program
    scaled = _scaled(lambda c: c)
    batch = jax.device_put(np.ones((2, 8, 4), np.float32), cf._on(cf.EXPLICIT, "x"))
    w = jax.device_put(np.ones((8, 4), np.float32), cf._on(cf.EXPLICIT))
    for fun, args in ((jax.vmap(scaled), (batch, batch)),
                      (jax.vmap(scaled, in_axes=(None, 0)), (w, batch))):
        program = describe_program(fun, *args)
        jitted = jax.jit(fun)
        vjp = jax.jit(lambda *pc: jax.vjp(jitted, *pc[:2])[1](pc[2]))
        outcome = run_function(vjp, args + (batch,))
        assert outcome.error is None, outcome.error
        assert not compare_rewrite(lambda: vjp_program(program).applied, outcome,
                                   equations=False)


@checks("DA-1")
@pytest.mark.parametrize("devices", ["same", "other"])
def test_a_custom_vjp_differentiated_then_vmapped_is_what_jax_traces(devices):
    """grad then vmap: the example's gradient (its bwd inline) batched as JAX batches it."""
    import test_control_flow_ad as cf
    clip = cf._clip(cf.MESH if devices == "same" else cf.HALF)
    _, verdict = cf._vmap_held(jax.vmap(jax.grad(cf._loss(clip))), cf.BATCH)
    assert verdict.accepted is (devices == "same")


# --------------------------------------------------------------------------- drawn cases

@checks("BAT-9")
@pytest.mark.parametrize("mixed", [False, True], ids=["explicit", "mixed"])
def test_a_device_put_leaves_the_batch_dimension_as_its_target_types_it(mixed):
    """A device_put in the body keeps its target under vmap (JAX's batching binds it as
    it is), so its result's batch dimension is typed by that target, unsplit, and what
    follows from it too (the vmap property drew both: the spec had typed them with the
    mapped axes)."""
    from shardlaw.properties.program_harness import Case, Recipe, Step
    from shardlaw.properties.program_vmap_harness import Vmap, VmapCase, compare_vmapped
    from shardlaw.spec import AxisType, Mesh, NamedSharding, P, Value
    if mixed:
        mesh = Mesh.iota((2, 2, 2), ("x", "y", "z"), (AxisType.Auto, AxisType.Auto,
                                                      AxisType.Explicit))
        x = Value.placed((6, 8), NamedSharding(mesh, P(None, None)))
        case = Case((x, Value.numpy((6, 8))), Recipe((Step(
            kind="device_put", operand=0, sharding=NamedSharding(mesh, P(None, None))),),
            (2, 1)))
        vmap = Vmap(in_axes=(0, None), size=2, spmd="z", splits=("z", None))
    else:
        mesh = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit,) * 2)
        x = Value.placed((4, 8), NamedSharding(mesh, P(None, None)))
        case = Case((x, x), Recipe((Step(kind="device_put", operand=1, sharding=NamedSharding(
            mesh, P(None, None))), Step(kind="neg", operand=2)), (3, 3)))
        vmap = Vmap(in_axes=(0, 0), size=8, splits=("x", "x"))
    assert not compare_vmapped(VmapCase(case, (vmap,)))


@checks("PROG-0")
@pytest.mark.parametrize("ops", [("argmax_onehot", "custom_vjp_clip", "broadcast", "sort"),
                                 ("broadcast", "broadcast", "broadcast", "sort")])
def test_a_sorted_operand_over_no_mesh_is_broadcast_onto_the_batched_one_s_mesh(ops):
    """The steps fuzz layer under vmap of grad over Explicit axes: sort's batching binds the
    broadcast of an operand typed over no mesh (an iota) with the batched operand's type,
    so the result is over that mesh (the spec had typed it split over no mesh, PROG-0)."""
    from shardlaw.properties import steps_harness
    from shardlaw.properties.steps_strategies import FuzzCase
    case = FuzzCase(ops=ops, transform="vmap_grad", grid=(8, 1), spec=("y", None),
                    explicit=True, committed=True)
    assert not steps_harness.compare_fuzz(case)
