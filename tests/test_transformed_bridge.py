"""Transformed calls described from real JAX objects (spec/bridge/transforms.py), held to JAX.

Each property draws a real program with the family's own strategy (the BAT, AD, WSC, SMAP
and ARG harnesses), describes it with the bridge (``describe_vmap``, ``describe_grad`` ...,
through :func:`explain`) and requires the verdict of
:func:`~shardlaw.spec.transforms.transformed.explain_transformed` to be what real JAX does: the jit
equation(s) in ``jax.make_jaxpr`` of the transformed program (read with the families'
bridges), or a refusal of the same exception type, by the rule the family harness names,
with that rule last in the trace. :data:`HITS` counts, per kind of transformation and per
rule, the examples accepted and refused on which the two agreed.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from jax.sharding import NamedSharding as JaxNamed, PartitionSpec as JaxP

from shardlaw.properties import arguments_harness as arg_h
from shardlaw.properties import autodiff_harness as ad_h
from shardlaw.properties import batching_harness as bat_h
from shardlaw.properties import constraint_harness as wsc_h
from shardlaw.properties import shardmap_harness as smap_h
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, NamedSharding, from_jax, to_jax
from shardlaw.spec.transforms.autodiff import JitEquation, Linearized
from shardlaw.spec.bridge.autodiff import equation_from_jax, jit_equations
from shardlaw.spec.bridge.batching import jit_equations as bat_jit_equations
from shardlaw.spec.bridge.constraint import constraint_equations, shardings_to_jax
from shardlaw.spec.bridge.shardmap import _jax_specs, shard_map_in_jax
from shardlaw.spec.bridge.transforms import (
    DESCRIBERS, describe_grad, describe_shard_map, describe_vmap, explain,
)
from shardlaw.spec.core.pytree import fill, leaves, map_leaves
from shardlaw.spec.transforms.shardmap import Shaped
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.transforms.transformed import TransformedVerdict, explain_transformed

# Examples per property: a fifth of the profile's (40 under ``ci``, 1,000 under ``deep``).
EXAMPLES = int(os.environ.get("TBRIDGE_EXAMPLES", max(30, settings.default.max_examples // 5)))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=list(HealthCheck))

# kind -> [accepted, refused]; (kind, rule) -> [seen accepting, seen refusing]
HITS: dict[Any, list[int]] = {}
# refusals whose refusing rule is not / is the last rule of the trace
LAST = [0, 0]


# The rules that decide an accepted answer of each kind: always entered on acceptance.
DECIDING = {
    # grad: AD-5 for the backward stage, AD-3 for the forward one (checked in its property)
    "vmap": {"BAT-0", "BAT-9", "BAT-8"}, "grad": set(), "vjp": {"AD-5"},
    "jvp": {"AD-2"}, "linearize": {"AD-3", "AD-4"},
    "with_sharding_constraint": {"WSC-0", "WSC-1", "WSC-2"},
    "shard_map": {"SMAP-0", "SMAP-1"}, "device_put": {"ARG-0", "ARG-1"},
}


def _count(kind: str, verdict: TransformedVerdict) -> None:
    if verdict.accepted:
        assert DECIDING[kind] <= set(verdict.trace), (kind, verdict.trace)
    HITS.setdefault(kind, [0, 0])[0 if verdict.accepted else 1] += 1
    for rule_id in dict.fromkeys(verdict.trace):
        side = 1 if rule_id == verdict.rule else 0
        HITS.setdefault((kind, rule_id), [0, 0])[side] += 1


def _same_type(verdict: TransformedVerdict, error: BaseException) -> bool:
    builtin = getattr(builtins, verdict.error_type or "", None)
    names = {c.__name__ for c in type(error).__mro__}
    return (builtin is not None and isinstance(error, builtin)) and (
        verdict.jax_error in names or verdict.jax_error == verdict.error_type)


def _agree_on_refusal(kind: str, verdict: TransformedVerdict, error: BaseException | None,
                      family_rule: str | None) -> None:
    """Both refuse: same exception type, the family's rule, that rule in the trace. A
    refusal as NotImplementedError is the spec saying where it stops: not compared."""
    if not verdict.accepted and verdict.error_type == "NotImplementedError":
        HITS.setdefault("outside the specification", [0, 0])[1] += 1
        return
    assert not verdict.accepted, f"spec accepts, JAX raised {type(error).__name__}: {error}"
    assert error is not None, f"spec refuses ({verdict.message}), JAX accepts"
    assert _same_type(verdict, error), (
        f"spec refuses as {verdict.jax_error} ({verdict.message}), JAX raised "
        f"{type(error).__name__}: {str(error)[:300]}")
    if family_rule is not None:
        assert verdict.rule == family_rule, (verdict.rule, family_rule, verdict.message)
    # The trace lists rules as they are entered: the refusing rule is last unless it asked
    # other rules (an HLO or NamedSharding rule) before refusing.
    assert verdict.rule in verdict.trace, verdict.trace
    LAST[verdict.trace[-1] == verdict.rule] += 1
    _count(kind, verdict)


def _quiet() -> Any:
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def _mesh_context(mesh: Any) -> Any:
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(to_jax(mesh))


# --------------------------------------------------------------------------- vmap

def _jax_leaf(sharding: Any) -> Any:
    return None if sharding is UNSPECIFIED else to_jax(sharding)


def _vmap_verdict(case: bat_h.VmapCase) -> TransformedVerdict:
    shapes = bat_h.inner_shapes(case)
    types = case.arg_types or (None,) * len(shapes)
    args = [jax.ShapeDtypeStruct(s, "float32", sharding=None if t is None else
                                 to_jax(NamedSharding(case.mesh, t)))
            for s, t in zip(shapes, types)]
    v = case.inner
    with _quiet(), _mesh_context(case.context_mesh):
        return explain("vmap", bat_h._function(case), *args, in_axes=v.in_axes,
                       axis_size=v.axis_size, spmd_axis_name=v.spmd_axis_name,
                       in_shardings=tuple(map(_jax_leaf, case.arg_shardings)),
                       out_shardings=tuple(map(_jax_leaf, case.result_shardings)))


@checks("BAT-0", "BAT-1", "BAT-2", "BAT-3", "BAT-4", "BAT-5", "BAT-6", "BAT-7", "BAT-8",
        "BAT-9", "BAT-10")
@SETTINGS
@given(bat_h.vmap_cases(nested=False))
def test_describe_vmap_agrees_with_jax(case):
    """vmap(jit(f)) of drawn real programs: the verdict is the jit equation JAX builds."""
    verdict = _vmap_verdict(case)
    theirs = bat_h.run_in_jax(case)
    if theirs.error is None and verdict.accepted:
        mine = (verdict.result.in_shardings, verdict.result.out_shardings)
        assert mine == theirs.shardings, (mine, theirs.shardings)
        _count("vmap", verdict)
        return
    family = bat_h.spec_answer(case).error
    _agree_on_refusal("vmap", verdict, theirs.error,
                      None if family is None else family.failure.rule)


# Bodies whose results put the batch axis elsewhere than the arguments, or drop a dimension.
_BODIES = {
    "double": lambda v: v * 2,
    "transpose": lambda v: v.T,
    "sum_last": lambda v: v.sum(-1),
    "flip": lambda v: jnp.flip(v, 0),
}
_TREE_MESH = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


@st.composite
def _tree_vmaps(draw: Any) -> dict:
    """vmap(jit(f)) of a pytree argument ({"a": .., "b": ..}, c): in_axes as prefix trees
    (now and then not a prefix), shardings as prefixes, bodies that move or drop axes."""
    ranks = {k: draw(st.integers(1, 2)) for k in ("a", "b", "c")}
    axes = {k: draw(st.one_of(st.none(), st.integers(-ranks[k] - 1, ranks[k])))
            for k in ("a", "b", "c")}
    form = draw(st.sampled_from(["per_leaf", "per_arg", "int", "wrong_len", "wrong_tree"]))
    in_axes: Any = {"per_leaf": ({"a": axes["a"], "b": axes["b"]}, axes["c"]),
                    "per_arg": (axes["a"], axes["c"]), "int": axes["a"],
                    "wrong_len": (axes["a"],), "wrong_tree": ([axes["a"], axes["b"]], axes["c"])
                    }[form]
    def batched(k: str, axis: Any) -> Any:
        shape = [8] * ranks[k]
        if axis is not None and -len(shape) - 1 <= axis <= len(shape):
            shape.insert(axis % (len(shape) + 1), 4)
        return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)
    leaf_axes = {"per_leaf": axes, "per_arg": {"a": axes["a"], "b": axes["a"], "c": axes["c"]},
                 "int": {k: axes["a"] for k in axes}}.get(form, axes)
    args = ({"a": batched("a", leaf_axes["a"]), "b": batched("b", leaf_axes["b"])},
            batched("c", leaf_axes["c"]))
    spec = draw(st.sampled_from([JaxP(), JaxP("x"), JaxP(None, "y"), JaxP("y")]))
    sharding = JaxNamed(_TREE_MESH, spec)
    in_shardings = draw(st.sampled_from([None, sharding, (sharding, None),
                                         ({"a": sharding, "b": None}, sharding), (sharding,)]))
    out_shardings = draw(st.sampled_from([None, JaxNamed(_TREE_MESH, JaxP())]))
    return dict(body=draw(st.sampled_from(sorted(_BODIES))), args=args, in_axes=in_axes,
                in_shardings=in_shardings, out_shardings=out_shardings,
                spmd_axis_name=draw(st.sampled_from([None, "x", "y", "w"])))


@checks("BAT-0", "BAT-1", "BAT-2", "BAT-3", "BAT-4", "BAT-5", "BAT-7")
@SETTINGS
@given(_tree_vmaps())
def test_describe_vmap_of_pytrees_and_bodies_agrees_with_jax(drawn):
    """Pytree arguments, in_axes and shardings as prefix trees, bodies that transpose, flip
    or reduce: the verdict is the jit equation JAX builds, or both refuse alike."""
    body = _BODIES[drawn["body"]]

    def fun(tree: Any, c: Any) -> Any:
        return jax.tree.map(body, tree), c * 2
    options = dict(in_shardings=drawn["in_shardings"], out_shardings=drawn["out_shardings"])
    options = {k: v for k, v in options.items() if v is not None}
    with _quiet():
        verdict = explain("vmap", fun, *drawn["args"], in_axes=drawn["in_axes"],
                          spmd_axis_name=drawn["spmd_axis_name"], **options)
        try:
            found = bat_jit_equations(jax.make_jaxpr(jax.vmap(
                jax.jit(fun, **options), in_axes=drawn["in_axes"],
                spmd_axis_name=drawn["spmd_axis_name"]))(*drawn["args"]))
            error = None
        except Exception as raised:  # noqa: BLE001 - JAX's refusal is compared
            found, error = None, raised
    if error is None and verdict.accepted:
        mine = (verdict.result.in_shardings, verdict.result.out_shardings)
        assert mine == found[0], (mine, found[0])  # the outermost: bodies nest jits (flip)
        _count("vmap", verdict)
        return
    _agree_on_refusal("vmap", verdict, error, None)


@checks("BAT-0", "BAT-1")
def test_the_jit_under_vmap_is_asked_first():
    """vmap(jit(f, in_shardings=P(None, 'y')))(x) with x of shape (4, 8) mapped at 0: the
    jit sees rank 1, and JAX refuses before batching (ValueError); so does explain, by jit's
    own rules (FIT-1, NS-5), which vmap_jit alone does not ask."""
    x = jax.ShapeDtypeStruct((4, 8), jnp.float32)
    wide = JaxNamed(_TREE_MESH, JaxP(None, "y"))
    with pytest.raises(ValueError), _quiet():
        jax.make_jaxpr(jax.vmap(jax.jit(lambda a: a * 2, in_shardings=wide)))(x)
    refused = explain("vmap", lambda a: a * 2, x, in_shardings=wide)
    assert (refused.accepted, refused.rule, refused.error_type) == (False, "FIT-1", "ValueError")
    assert refused.trace[-2:] == ("FIT-1", "NS-5")
    alone = explain_transformed(describe_vmap(lambda a: a * 2, x, in_shardings=wide))
    assert alone.accepted  # the batching question alone: BAT-7 checks the batched rank only


@checks("BAT-10")
@pytest.mark.parametrize("kind", ["sds", "array"])
def test_describe_vmap_reads_a_mapped_arguments_reduced_axes(kind):
    """vmap(jit(f)) of an argument typed P(None, reduced={'x'}) over an Explicit mesh (a
    ShapeDtypeStruct or an array): mapped, JAX refuses while tracing (ValueError), and
    describe_vmap keeps the reduced axes in the type it reads, so the spec refuses by
    BAT-10; unmapped and not returned, both accept."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    typed = JaxNamed(mesh, JaxP(None, reduced={"x"}))
    if kind == "sds":
        x = jax.ShapeDtypeStruct((4, 8), jnp.float32, sharding=typed)
    else:
        x = jax.reshard(jnp.zeros((4, 8), jnp.float32), JaxNamed(mesh, JaxP()))
        x = jax.jit(lambda a: jax.reshard(a, typed))(x)
    other = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError), _quiet():
        jax.make_jaxpr(jax.vmap(jax.jit(lambda a, b: b * 2)))(x, other)
    with _quiet():
        refused = explain_transformed(describe_vmap(lambda a, b: b * 2, x, other))
    assert (refused.accepted, refused.rule, refused.path) == (False, "BAT-10", "args[0]")
    assert refused.error_type == "ValueError"
    with _quiet():
        jax.make_jaxpr(jax.vmap(jax.jit(lambda a, b: b * 2), in_axes=(None, 0)))(x, other)
        accepted = explain_transformed(describe_vmap(lambda a, b: b * 2, x, other,
                                                     in_axes=(None, 0)))
    assert accepted.accepted, accepted.message


# --------------------------------------------------------------------------- AD

def _captured(case: ad_h.GradCase) -> tuple[Any, dict]:
    """The case's jitted function and its jit options (build_jitted with jit recorded)."""
    return ad_h.build_jitted(case, jit=lambda f, **kw: (f, kw))


def _ad_jaxpr(case: ad_h.GradCase, program: Any, args: tuple) -> Any:
    with _quiet(), jax.set_mesh(case.mesh):
        return jax.make_jaxpr(program)(*args)


def _described(case: ad_h.GradCase, kind: str, fun: Any, args: tuple, **kw: Any
               ) -> TransformedVerdict:
    with _quiet(), jax.set_mesh(case.mesh):
        return explain(kind, fun, *args, **kw)


def _grad_equations(case: ad_h.GradCase) -> tuple[list[JitEquation], TransformedVerdict,
                                                  TransformedVerdict]:
    """grad(jit(loss)) of the case's outputs (summed as the loss uses them), in JAX and
    described: JAX's equations, the backward and the forward verdicts."""
    target, kw = _captured(case)

    def ad_loss(*xs: Any) -> Any:
        results = target(*xs)
        return sum((r.sum() for r, u in zip(results, case.used) if u), jnp.float32(0))
    out = None if case.out_specs[0] is None else JaxNamed(case.mesh, JaxP())
    options = dict(in_shardings=kw["in_shardings"], out_shardings=out,
                   donate_argnums=kw["donate_argnums"])
    argnums = tuple(i for i, d in enumerate(case.differentiated) if d) or (0,)
    args = ad_h._arguments(case)[1:]
    grad = jax.grad(jax.jit(ad_loss, **options), argnums=argnums)

    def step(*xs: Any) -> Any:  # named apart: grad keeps the name of what it differentiates
        return grad(*xs)
    jaxpr = _ad_jaxpr(case, jax.jit(step) if case.outer_jit else step, args)
    found = [equation_from_jax(e) for e in jit_equations(jaxpr, "ad_loss")]
    back = _described(case, "grad", ad_loss, args, argnums=argnums, **options)
    forward = _described(case, "grad", ad_loss, args, argnums=argnums, stage="forward",
                         **options)
    return found, back, forward


def _jvp_like(case: ad_h.GradCase) -> tuple[list[JitEquation], list[Any], TransformedVerdict]:
    """jvp, linearize or vjp of jit(f) with every input differentiated: JAX's equations,
    the spec's (from the verdict), the verdict."""
    target, kw = _captured(case)
    jitted = jax.jit(target, **kw)
    args = ad_h._arguments(case)[1:]
    kind = case.transformation

    def program(*xs: Any) -> Any:
        if kind == "jvp":
            return jax.jvp(jitted, xs, xs)
        if kind == "linearize":
            return jax.linearize(jitted, *xs)[1](*xs)
        out, back = jax.vjp(jitted, *xs)
        return back(out)
    outer = jax.jit(program) if case.outer_jit else program  # a training step
    found = [equation_from_jax(e) for e in jit_equations(_ad_jaxpr(case, outer, args),
                                                          ad_h.NAME)]
    verdict = _described(case, kind, target, args, **kw)
    if kind == "vjp":
        forward = _described(case, kind, target, args, stage="forward", **kw)
        said = [forward.result] + ([verdict.result] if verdict.result is not None else [])
    elif kind == "linearize":
        both: Linearized = verdict.result
        said = [both.primal] + ([both.tangent] if both.tangent is not None else [])
    else:
        said = [verdict.result]
    return found, said, verdict


@checks("AD-0", "AD-1", "AD-2", "AD-3", "AD-4", "AD-5")
@SETTINGS
@given(ad_h.grad_cases(transformations=("grad", "vjp", "jvp", "linearize")))
def test_describe_autodiff_agrees_with_jax(case):
    """grad/vjp/jvp/linearize of jit(f): the described equations are the ones JAX stages."""
    if case.transformation == "grad":
        found, back, forward = _grad_equations(case)
        assert back.accepted and forward.accepted, (back.message, forward.message)
        assert "AD-5" in back.trace and "AD-3" in forward.trace, (back.trace, forward.trace)
        said = [forward.result] + ([back.result] if back.result is not None else [])
        verdicts = [back, forward]
    else:
        found, said, verdict = _jvp_like(case)
        assert verdict.accepted, verdict.message
        verdicts = [verdict]
    assert found == said, f"JAX {found}\nspec {said}"
    for verdict in verdicts:
        _count(case.transformation, verdict)


def _loss(a: Any) -> Any:
    return jnp.sin(a).sum()


_F32 = np.ones((8, 8), np.float32)
# What JAX refuses when differentiating: (name, kind, fun, args, keywords, JAX's program).
_BAD_AD = [
    ("not callable", "grad", 3, (_F32,), {}, lambda: jax.grad(3)),
    ("argnums out of range", "grad", _loss, (_F32,), {"argnums": 3},
     lambda: jax.make_jaxpr(jax.grad(jax.jit(_loss), argnums=3))(_F32)),
    ("argnums of text", "grad", _loss, (_F32,), {"argnums": "a"},
     lambda: jax.make_jaxpr(jax.grad(jax.jit(_loss), argnums="a"))(_F32)),
    ("non-scalar result", "grad", jnp.sin, (_F32,), {},
     lambda: jax.make_jaxpr(jax.grad(jax.jit(jnp.sin)))(_F32)),
    ("integer input", "grad", _loss, (np.ones(4, np.int32),), {},
     lambda: jax.make_jaxpr(jax.grad(jax.jit(_loss)))(np.ones(4, np.int32))),
    ("vjp of no function", "vjp", None, (_F32,), {}, lambda: jax.vjp(None, _F32)),
]


@checks("AD-0")
@SETTINGS
@given(st.sampled_from(_BAD_AD))
def test_describe_autodiff_refuses_as_jax(bad):
    """What JAX refuses to differentiate, the description refuses: AD-0, TypeError."""
    _, kind, fun, args, kw, program = bad
    try:
        program()
    except Exception as error:  # noqa: BLE001 - JAX's refusal is compared
        seen: BaseException | None = error
    else:
        seen = None
    _agree_on_refusal(kind, explain(kind, fun, *args, **kw), seen, "AD-0")


# --------------------------------------------------------------------------- constraints

@checks("WSC-0", "WSC-1", "WSC-2", "WSC-3", "WSC-4", "WSC-5", "WSC-6")
@SETTINGS
@given(wsc_h.constraint_cases().filter(lambda c: c.batch_dim is None))
def test_describe_sharding_constraint_agrees_with_jax(case):
    """with_sharding_constraint of real values and shardings: the verdict's equations are
    the sharding_constraint equations of JAX's jaxpr, or both refuse alike."""
    host = wsc_h._host(case)
    shardings = shardings_to_jax(case.shardings)
    with _quiet(), _mesh_context(case.context_mesh):
        verdict = explain("with_sharding_constraint", host, shardings)
        try:
            seen = constraint_equations(
                lambda v: jax.lax.with_sharding_constraint(v, shardings), host)
            error = None
        except Exception as raised:  # noqa: BLE001 - JAX's refusal is compared
            seen, error = None, raised
    if error is None and verdict.accepted:
        expected = [c for c in verdict.result if c.equation]
        assert len(expected) == len(seen), (expected, seen)
        for c, (sharding, dims) in zip(expected, seen):
            assert wsc_h._same_sharding(c.sharding, sharding), (c.sharding, sharding)
            assert c.unconstrained_dims == dims, (c.unconstrained_dims, dims)
        _count("with_sharding_constraint", verdict)
        return
    _, family, _ = wsc_h.spec_outcome(case)
    _agree_on_refusal("with_sharding_constraint", verdict, error,
                      None if family is None else family.failure.rule)


# --------------------------------------------------------------------------- shard_map

def _operands(mesh: Any, operands: tuple) -> tuple:
    """Real arguments for the drawn Shaped leaves: ones, or a ShapeDtypeStruct whose type
    carries the leaf's spec (Explicit axes)."""
    def value(leaf: Any) -> Any:
        if not isinstance(leaf, Shaped):
            return leaf
        spec = getattr(leaf, "spec", None)
        if spec is None:
            return np.ones(leaf.shape, np.float32)
        return jax.ShapeDtypeStruct(leaf.shape, np.float32,
                                    sharding=JaxNamed(to_jax(mesh), to_jax(spec)))
    return map_leaves(value, operands)


def _mapped(results: Any) -> Any:
    """A real shard_map body for the drawn results: each returns its flat argument, psummed
    over the axes it names."""
    def mapped(*args: Any) -> Any:
        flat = jax.tree_util.tree_leaves(args)
        return fill(results, [flat[r.operand] if not r.summed else
                              jax.lax.psum(flat[r.operand], r.summed) for r in leaves(results)])
    return mapped

@checks("SMAP-0", "SMAP-1", "SMAP-2", "SMAP-3", "SMAP-4", "SMAP-5", "SMAP-6", "SMAP-7",
        "SMAP-8", "SMAP-9", "SMAP-10", "SMAP-11", "SMAP-12", "SMAP-13")
@SETTINGS
@given(smap_h.smap_calls())
def test_describe_shard_map_agrees_with_jax(call):
    """jit(shard_map(f)) of a real body and real arrays: the verdict's types are JAX's, or
    both refuse alike."""
    with _quiet():
        verdict = explain("shard_map", _mapped(call.results), *_operands(call.mesh, call.operands),
                          mesh=to_jax(call.mesh), in_specs=_jax_specs(call.in_specs),
                          out_specs=_jax_specs(call.out_specs), axis_names=call.manual_axes,
                          check_vma=call.check_vma)
        theirs = shard_map_in_jax(call.mesh, call.in_specs, call.out_specs, call.operands,
                                  call.results, call.manual_axes, call.check_vma)
    types, _, family = smap_h._spec_side(call)
    if smap_h.compare_shard_map(call):
        # The family itself disagrees with JAX on this call (its own property says so):
        # the bridge must then give the family's answer.
        HITS.setdefault("shard_map: the family disagrees with JAX", [0, 0])[0] += 1
        assert verdict.accepted == (family is None), (verdict.message, family)
        assert family is None or verdict.rule == family.failure.rule
        assert family is not None or verdict.result == types
        return
    if theirs.error is None and verdict.accepted:
        assert smap_h._compare_types(verdict.result, theirs) == []
        _count("shard_map", verdict)
        return
    _agree_on_refusal("shard_map", verdict, theirs.error,
                      None if family is None else family.failure.rule)


# --------------------------------------------------------------------------- device_put

@checks("ARG-0", "ARG-1", "ARG-2", "ARG-3", "ARG-4")
@SETTINGS
@given(arg_h.argument_cases())
def test_describe_device_put_agrees_with_jax(case):
    """device_put (or a jit argument) of a real Python or numpy value: the verdict is where
    JAX puts it, or both refuse alike."""
    value = arg_h.build_value(case)
    sharding = None if case.sharding is None else to_jax(case.sharding)
    with _quiet():
        verdict = explain("device_put", value, sharding, via=case.via)
        seen = arg_h.run_in_jax(case)
    if seen.error is None and verdict.accepted:
        mine, theirs = verdict.result, seen.placement
        if case.via == "jit" and 0 in case.shape:  # as compare_argument: no boxes to read
            mine, theirs = mine.__class__(mine.dtype, mine.weak_type, mine.committed, {}), \
                theirs.__class__(theirs.dtype, theirs.weak_type, theirs.committed, {})
        assert mine == theirs, (mine, theirs)
        _count("device_put", verdict)
        return
    _, family, _ = arg_h.spec_outcome(case)
    _agree_on_refusal("device_put", verdict, seen.error,
                      None if family is None else family.failure.rule)


# --------------------------------------------------------------------------- pinned

def _mlp_loss(w1, b1, w2, b2, x, y):
    hidden = jax.nn.relu(x @ w1 + b1)
    return jnp.mean((hidden @ w2 + b2 - y) ** 2)


@checks("AD-1", "AD-3", "AD-5")
def test_pinned_grad_of_a_data_and_model_parallel_mlp():
    """jit(grad(loss)) of a 2x4 data+model-parallel MLP: each gradient gets its parameter's
    in_sharding (AD-5), the batch's inputs get no gradient; as JAX stages it."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    specs = [JaxP(None, "model"), JaxP("model"), JaxP("model", None), JaxP(),
             JaxP("data", None), JaxP("data", None)]
    shardings = tuple(JaxNamed(mesh, s) for s in specs)
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in
            [(16, 32), (32,), (32, 8), (8,), (64, 16), (64, 8)]]
    step = jax.jit(jax.grad(jax.jit(_mlp_loss, in_shardings=shardings), argnums=(0, 1, 2, 3)))
    with _quiet():
        staged = [equation_from_jax(e) for e in
                  jit_equations(jax.make_jaxpr(step)(*args), "_mlp_loss")]
        back = explain_transformed(describe_grad(_mlp_loss, *args, argnums=(0, 1, 2, 3),
                                                 in_shardings=shardings))
    assert back.accepted and back.result == staged[-1]
    assert back.result.out_shardings == tuple(from_jax(s) for s in shardings[:4])
    assert [str(s.spec) for s in back.result.out_shardings] == [
        "P(None, 'model')", "P('model')", "P('model', None)", "P()"]
    assert {"AD-0", "AD-1", "AD-5"} <= set(back.trace)


@checks("BAT-3", "BAT-4")
def test_pinned_vmap_with_spmd_axis_name():
    """vmap(jit(f), spmd_axis_name='data') splits the batch dimension over 'data' (BAT-3);
    naming 'model', which the sharding uses already, is refused as JAX refuses it (BAT-4)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jax.ShapeDtypeStruct((6, 8), jnp.float32)
    sharded = JaxNamed(mesh, JaxP("model"))
    ok = explain_transformed(describe_vmap(lambda a: a * 2, x, spmd_axis_name="data",
                                           in_shardings=sharded, out_shardings=sharded))
    assert ok.accepted and str(ok.result.in_shardings[0].spec) == "P('data', 'model')"
    assert "BAT-3" in ok.trace
    # The body decides where a result's batch axis lands (the transpose keeps it in front).
    def layer(a):
        return jnp.tanh(a).T
    on = (JaxNamed(mesh, JaxP(None, "model")), JaxNamed(mesh, JaxP("model")))
    x3 = jax.ShapeDtypeStruct((16, 8, 32), jnp.float32)
    mine = explain_transformed(describe_vmap(layer, x3, spmd_axis_name="data",
                                             in_shardings=on[0], out_shardings=on[1]))
    with _quiet():
        (theirs,) = bat_jit_equations(jax.make_jaxpr(jax.vmap(
            jax.jit(layer, in_shardings=on[0], out_shardings=on[1]), spmd_axis_name="data"))(x3))
    assert (mine.result.in_shardings, mine.result.out_shardings) == theirs
    assert str(mine.result.out_shardings[0].spec) == "P('data', 'model')"
    refused = explain_transformed(describe_vmap(lambda a: a * 2, x, spmd_axis_name="model",
                                                in_shardings=sharded))
    with pytest.raises(Exception) as raised, _quiet():
        jax.make_jaxpr(jax.vmap(jax.jit(lambda a: a * 2, in_shardings=sharded),
                                spmd_axis_name="model"))(x)
    assert type(raised.value).__name__ == refused.jax_error == "DuplicateSpecError"
    assert (refused.accepted, refused.rule) == (False, "BAT-4")


@checks("SMAP-11", "SMAP-13")
def test_pinned_shard_map_psum():
    """shard_map of a psum over 'model': the result is unvarying over 'model' (SMAP-13);
    returning the unsummed shard with out_specs P() is refused (SMAP-11)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    a = np.ones((8, 8), np.float32)
    summed = explain_transformed(describe_shard_map(
        lambda v: jax.lax.psum(v, "model"), a, mesh=mesh, in_specs=JaxP("data", "model"),
        out_specs=JaxP("data")))
    assert summed.accepted and summed.result.out_shapes == ((8, 2),)
    assert summed.result.result_varying == (frozenset({"data"}),)
    refused = explain_transformed(describe_shard_map(
        lambda v: v, a, mesh=mesh, in_specs=JaxP("data"), out_specs=JaxP()))
    assert (refused.accepted, refused.rule) == (False, "SMAP-11")


@checks("ARG-2", "ARG-4")
def test_pinned_device_put_on_a_device():
    """device_put(value, a Device) is read as that device's SingleDeviceSharding: the whole
    value on device 3, committed, as JAX places it."""
    value = np.arange(6, dtype=np.int64).reshape(2, 3)
    placed = explain("device_put", value, jax.devices()[3])
    real = jax.device_put(value, jax.devices()[3])
    assert placed.accepted and placed.result.shards == {3: ((0, 2), (0, 3))}
    assert (placed.result.dtype, placed.result.committed) == (str(real.dtype), real.committed)
    assert {s.device.id for s in real.addressable_shards} == {3}


# --------------------------------------------------------------------------- hostile input

def _deep(n: int) -> Any:
    tree: Any = 0
    for _ in range(n):
        tree = (tree,)
    return tree


_HOSTILE = st.one_of(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                  st.text(max_size=3), st.binary(max_size=3), st.just(JaxP("x")),
                  st.just(object()), st.just(np.ones((2, 0)))),
        lambda inner: st.one_of(st.lists(inner, max_size=3),
                                st.lists(inner, max_size=3).map(tuple),
                                st.dictionaries(st.text(max_size=2), inner, max_size=2)),
        max_leaves=8),
    st.integers(150, 3000).map(_deep))

_X = np.ones((4, 8), np.float32)
_MESH = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
# kind -> (positional arguments, keywords, the names a hostile value may replace)
_PLAIN = {
    "vmap": ((jnp.sin, _X), {}, ("fun", "arg", "in_axes", "axis_size", "spmd_axis_name",
                                 "in_shardings", "out_shardings")),
    "grad": ((_loss, _X), {}, ("fun", "arg", "argnums", "in_shardings", "out_shardings",
                               "stage")),
    "vjp": ((jnp.sin, _X), {}, ("fun", "arg", "in_shardings", "stage")),
    "jvp": ((jnp.sin, _X), {}, ("fun", "arg", "out_shardings")),
    "linearize": ((jnp.sin, _X), {}, ("fun", "arg", "in_shardings")),
    "with_sharding_constraint": ((_X, JaxP("x")), {}, ("fun", "arg")),
    "shard_map": ((lambda a: a, _X), {"mesh": _MESH, "in_specs": JaxP("x"),
                                      "out_specs": JaxP("x")},
                  ("fun", "arg", "mesh", "in_specs", "out_specs", "axis_names", "check_vma")),
    "device_put": ((_X, None), {}, ("fun", "arg", "via")),
}


@checks("BAT-0", "AD-0", "WSC-0", "SMAP-0", "ARG-0")
@settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(_PLAIN)), st.data())
def test_hostile_input_ends_in_a_rule_id(kind, data):
    """Any value in any parameter of a describer: a verdict, or a refusal with a rule ID
    (the family's *-0 rule, CALL-0 or the rule that judged it), never a bare exception."""
    args, kwargs, names = _PLAIN[kind]
    args, kwargs = list(args), dict(kwargs)
    name = data.draw(st.sampled_from(names))
    value = data.draw(_HOSTILE)
    if name in ("fun", "arg"):
        args[0 if name == "fun" else 1] = value
    else:
        kwargs[name] = value
    with _quiet():
        verdict = explain(kind, *args, **kwargs)
    assert isinstance(verdict, TransformedVerdict)
    assert verdict.accepted or re.fullmatch(r"[A-Z]+-\d+", verdict.rule or ""), verdict


# --------------------------------------------------------------------------- coverage

@checks("BAT-0", "AD-0", "WSC-0", "SMAP-0", "ARG-0")
def test_each_transformation_seen_on_both_sides_against_jax():
    """After the properties above (same process): every transformation was seen accepted
    and refused in agreement with JAX (AD: accepted by the programs, refused by the bad
    differentiations); prints the per-rule table."""
    kinds = [k for k in HITS if isinstance(k, str)]
    if not kinds:
        pytest.skip("the properties did not run in this process")
    for key in sorted(HITS, key=str):
        print(key, HITS[key])
    print("refusing rule last in the trace:", LAST[1], "of", sum(LAST))
    sides = {k: HITS[k] for k in kinds}
    ad = [sum(HITS.get(k, [0, 0])[i] for k in ("grad", "vjp", "jvp", "linearize"))
          for i in (0, 1)]
    for kind in ("vmap", "with_sharding_constraint", "shard_map", "device_put"):
        if kind in sides:
            assert all(sides[kind]), (kind, sides[kind])
    if any(ad):
        assert all(ad), ad
