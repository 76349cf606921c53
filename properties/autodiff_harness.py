"""Differentiate through a real ``jax.jit`` call and compare its jit equations with the AD rules.

A :class:`GradCase` describes a jitted function of ``k`` float32 (8, 8) arrays on a mesh of
the 8 CPU devices (2x4, 8 or 2x2x2; Auto or Explicit axes; device or pinned host memory):
what each output computes from which inputs (an input returned as is, products of sines,
matmuls, sums, a constant), the
jit's ``in_shardings`` / ``out_shardings`` / ``donate_argnums``, which inputs are
differentiated, and the transformation: ``jax.jvp``, ``jax.linearize`` (its linear
function applied), ``jax.vjp`` (its backward function applied), ``jax.grad`` or
``jax.value_and_grad`` of a loss that uses some of the outputs (these five traced as they
are or under an outer ``jax.jit``, as a training step is), partial evaluation with the
differentiated inputs unknown (JAX's ``pe.partial_eval_jaxpr_nounits``, which control flow
uses; no public API reaches the jit rule for it directly in 0.10.2), or dead-code
elimination keeping the outputs a loss would use (``pe.dce_jaxpr``).

:func:`compare_case` traces the transformation with ``jax.make_jaxpr``, reads every ``jit``
equation of the jitted function (nested ones too), and compares their ``in_shardings``,
``out_shardings`` and ``donated_invars`` with what the spec says they are, given the
undifferentiated equation and its body's facts (read from JAX by
:mod:`shardlaw.spec.bridge.autodiff`); for partial evaluation and dead-code elimination,
with what the program rewrites (:mod:`shardlaw.spec.program.partial_eval`, AD-6 to AD-8)
stage of the jitted function's program (described from JAX). It returns the disagreements, and counts each AD
rule's two outcomes with :func:`shardlaw.properties.hits.record` (read with
:func:`ad_hit_counts`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from hypothesis import strategies as st
from jax._src.interpreters import partial_eval as pe
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from shardlaw.properties import hits
from shardlaw.spec import UNSPECIFIED
from shardlaw.spec.transforms.autodiff import (
    JitEquation, jvp_equation, linearized_equations, linearized_primal, nonzero_outputs,
    transposed_equation,
)
from shardlaw.spec.bridge.autodiff import equation_from_jax, jit_body_of, jit_equations
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.program.partial_eval import dce_program, partial_eval_program

__all__ = ["OutputPlan", "GradCase", "grad_cases", "build_jitted", "trace", "expected",
           "compare_case", "described", "rewritten", "SOURCE", "hit", "ad_hit_counts",
           "TRANSFORMATIONS", "NAME"]

NAME = "ad_target"
TRANSFORMATIONS = ("jvp", "linearize", "vjp", "grad", "value_and_grad", "partial_eval", "dce")
GRADS = ("grad", "value_and_grad")
SIDE = 8  # every input is a float32 (SIDE, SIDE) array
MESHES = (((2, 4), ("data", "model")), ((8,), ("batch",)), ((2, 2, 2), ("x", "y", "z")))

# The source under which the cases compared record their rules (shardlaw.properties.hits).
SOURCE = "autodiff"


def hit(rule_id: str, second: bool) -> None:
    """Count one outcome of a rule against JAX: ``second`` False for its first outcome
    (accepted, non-zero, transformed, dropped, staged), True for the other."""
    hits.record(SOURCE, rule_id, refused=second)


def ad_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (first outcomes, second outcomes) over the cases compared (see hit())."""
    return hits.counts(SOURCE)


@dataclasses.dataclass(frozen=True)
class OutputPlan:
    """One output: ``forward`` (input ``deps[0]`` as is), ``product`` (sin of the first
    input times the others), ``matmul`` (the same with ``@``), ``scalar`` (a product,
    summed) or ``constant`` (no input)."""

    kind: str
    deps: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class GradCase:
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    explicit: bool
    arg_spec: tuple            # the arguments' PartitionSpec entries (Explicit meshes)
    in_specs: tuple            # per input: PartitionSpec entries, or None (unspecified)
    outputs: tuple[OutputPlan, ...]
    out_specs: tuple           # per output: PartitionSpec entries, or None (unspecified)
    donated: tuple[bool, ...]
    differentiated: tuple[bool, ...]
    transformation: str
    used: tuple[bool, ...]     # grad, value_and_grad, dce: the outputs the loss uses
    outer_jit: bool = False    # the transformation itself under jax.jit (a training step)
    in_memory: tuple = ()      # per input: a memory kind, or None (default); () all default
    out_memory: tuple = ()     # per output, the same

    @property
    def mesh(self) -> Any:
        kind = AxisType.Explicit if self.explicit else AxisType.Auto
        return jax.make_mesh(self.mesh_shape, self.axis_names,
                             axis_types=(kind,) * len(self.axis_names))


# --------------------------------------------------------------------------- strategies

@st.composite
def _specs_2d(draw: Any, names: tuple[str, ...]) -> tuple:
    """PartitionSpec entries for an (8, 8) array: each mesh axis splits at most one dim."""
    free = list(draw(st.permutations(names)))
    entries = []
    for _ in range(2):
        take = draw(st.integers(0, len(free)))
        chosen, free = free[:take], free[take:]
        entries.append(None if not chosen else chosen[0] if len(chosen) == 1 else tuple(chosen))
    return tuple(entries)


@st.composite
def _output_plan(draw: Any, k: int, explicit: bool) -> OutputPlan:
    kinds = ["forward", "product", "scalar", "constant"] + ([] if explicit else ["matmul"])
    kind = draw(st.sampled_from(kinds))
    if kind == "constant":
        return OutputPlan(kind, ())
    if kind == "forward":
        return OutputPlan(kind, (draw(st.integers(0, k - 1)),))
    deps = draw(st.lists(st.integers(0, k - 1), min_size=1, max_size=3, unique=True))
    return OutputPlan(kind, tuple(deps))


def _out_spec(draw: Any, plan: OutputPlan, case_arg: tuple, explicit: bool, names: tuple) -> Any:
    if draw(st.booleans()):
        return None
    if plan.kind == "scalar":
        return ()
    if explicit:  # an Explicit result's out_sharding is the sharding its type carries
        return (None, None) if plan.kind == "constant" else case_arg
    return draw(_specs_2d(names))


@st.composite
def grad_cases(draw: Any, transformations: tuple[str, ...] = TRANSFORMATIONS) -> GradCase:
    """A jitted function, its shardings and donation, and how it is differentiated."""
    shape, names = draw(st.sampled_from(MESHES))
    explicit = draw(st.booleans())
    k = draw(st.integers(1, 3))
    arg_spec = draw(_specs_2d(names))
    in_specs = tuple(draw(st.one_of(st.none(), st.just(arg_spec) if explicit else
                                    _specs_2d(names))) for _ in range(k))
    outputs = tuple(draw(st.lists(_output_plan(k, explicit), min_size=1, max_size=3)))
    out_specs = tuple(_out_spec(draw, p, arg_spec, explicit, names) for p in outputs)
    transformation = draw(st.sampled_from(transformations))
    differentiated = draw(st.lists(st.booleans(), min_size=k, max_size=k))
    if transformation in ("linearize", "vjp") and not any(differentiated):
        differentiated[draw(st.integers(0, k - 1))] = True  # they need a primal to differentiate
    differentiated = tuple(differentiated)
    return GradCase(shape, names, explicit, arg_spec, in_specs, outputs, out_specs,
                    tuple(draw(st.lists(st.booleans(), min_size=k, max_size=k))),
                    differentiated, transformation,
                    tuple(draw(st.lists(st.booleans(), min_size=len(outputs),
                                        max_size=len(outputs)))),
                    transformation not in ("partial_eval", "dce") and draw(st.booleans()),
                    draw(_memory_kinds(k)), draw(_memory_kinds(len(outputs))))


def _memory_kinds(count: int) -> st.SearchStrategy[tuple]:
    """Mostly the default memory; sometimes pinned host memory (an offloaded weight)."""
    kinds = st.lists(st.sampled_from([None, None, "device", "pinned_host"]), min_size=count,
                     max_size=count).map(tuple)
    return st.one_of(st.just(()), kinds)


# --------------------------------------------------------------------------- JAX

def _output(plan: OutputPlan, xs: tuple) -> Any:
    if plan.kind == "forward":
        return xs[plan.deps[0]]
    if plan.kind == "constant":
        return jnp.full((SIDE, SIDE), 2.0, jnp.float32)
    value = jnp.sin(xs[plan.deps[0]])
    for d in plan.deps[1:]:
        value = value @ xs[d] if plan.kind == "matmul" else value * xs[d]
    return value.sum() if plan.kind == "scalar" else value


def _named(mesh: Any, entries: Any, memory_kind: str | None = None) -> Any:
    if entries is None:
        return None
    return NamedSharding(mesh, PartitionSpec(*entries), memory_kind=memory_kind)


def _kinds(kinds: tuple, count: int) -> tuple:
    return kinds or (None,) * count


def build_jitted(case: GradCase, jit: Callable[..., Any] = jax.jit) -> Callable[..., Any]:
    """``jit`` (jax.jit, or a drop-in) of the case's function, with its shardings."""
    mesh = case.mesh

    def ad_target(*xs: Any) -> tuple:
        return tuple(_output(plan, xs) for plan in case.outputs)

    donate = tuple(i for i, d in enumerate(case.donated) if d)
    ins = zip(case.in_specs, _kinds(case.in_memory, len(case.in_specs)))
    outs = zip(case.out_specs, _kinds(case.out_memory, len(case.out_specs)))
    return jit(ad_target, in_shardings=tuple(_named(mesh, s, m) for s, m in ins),
               out_shardings=tuple(_named(mesh, s, m) for s, m in outs),
               donate_argnums=donate)


def _transformed(case: GradCase, jitted: Callable[..., Any]) -> Callable[..., Any]:
    """The outer function: the case's transformation of the jitted call."""
    chosen = [i for i, d in enumerate(case.differentiated) if d]

    def outer(seed: Any, *xs: Any) -> Any:
        def call(*diffed: Any) -> tuple:
            full = list(xs)
            for i, value in zip(chosen, diffed):
                full[i] = value
            return jitted(*full)
        diffed = [xs[i] for i in chosen]
        if case.transformation == "jvp":
            return jax.jvp(call, tuple(diffed), tuple(diffed))
        if case.transformation == "linearize":
            return jax.linearize(call, *diffed)[1](*diffed)
        if case.transformation == "vjp":
            out, back = jax.vjp(call, *diffed)
            return back(out)

        def loss(s: Any, *d: Any) -> Any:
            results = call(*d)
            return s * sum((r.sum() for r, u in zip(results, case.used) if u), jnp.float32(0))
        grad = jax.grad if case.transformation == "grad" else jax.value_and_grad
        return grad(loss, argnums=tuple(range(len(diffed) + 1)))(seed, *diffed)
    return outer


def _arguments(case: GradCase) -> tuple:
    sharding = NamedSharding(case.mesh, PartitionSpec(*case.arg_spec)) if case.explicit else None
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    arg = jax.ShapeDtypeStruct((SIDE, SIDE), jnp.float32, sharding=sharding)
    return (scalar,) + (arg,) * len(case.in_specs)


def trace(case: GradCase, jit: Callable[..., Any] = jax.jit) -> tuple[Any, list[Any]]:
    """The undifferentiated jit equation and the transformed jaxpr(s), traced by JAX.

    Partial evaluation (the differentiated inputs are the unknown ones) gives two jaxprs,
    the known and the unknown one: ``pe.partial_eval_jaxpr_nounits`` of the call.
    """
    jitted = build_jitted(case, jit)
    args = _arguments(case)
    with jax.set_mesh(case.mesh):
        plain = jax.make_jaxpr(lambda seed, *xs: jitted(*xs))(*args)
        if case.transformation == "partial_eval":
            known, unknown, _, _ = pe.partial_eval_jaxpr_nounits(
                plain, [False, *case.differentiated], instantiate=False)
            transformed = [known, unknown]
        elif case.transformation == "dce":
            transformed = [pe.dce_jaxpr(plain.jaxpr, list(case.used))[0]]
        else:
            outer = _transformed(case, jitted)
            transformed = [jax.make_jaxpr(jax.jit(outer) if case.outer_jit else outer)(*args)]
    (eqn,) = jit_equations(plain, NAME)
    return eqn, transformed


# --------------------------------------------------------------------------- the spec

def expected(case: GradCase, eqn: Any) -> list[JitEquation]:
    """The jit equations the spec says the transformation stages, in order."""
    if case.transformation in ("dce", "partial_eval"):
        return rewritten(case)
    primal = equation_from_jax(eqn)
    nonzero = case.differentiated
    body = jit_body_of(eqn, nonzero, _mode(case))
    if case.transformation == "jvp":
        return [jvp_equation(primal, body, nonzero)]
    if case.transformation == "linearize":
        both = linearized_equations(primal, body, nonzero)
        return [both.primal] + ([both.tangent] if both.tangent is not None else [])
    used = case.used if case.transformation in GRADS else (True,) * len(case.outputs)
    back = transposed_equation(primal, body, nonzero, used)
    return [linearized_primal(primal, body, nonzero)] + ([back] if back is not None else [])


def described(case: GradCase) -> Any:
    """The case's jitted function as a Program (its real body, described from JAX)."""
    sharding = (NamedSharding(case.mesh, PartitionSpec(*case.arg_spec)) if case.explicit
                else None)
    arg = jax.ShapeDtypeStruct((SIDE, SIDE), jnp.float32, sharding=sharding)
    with jax.set_mesh(case.mesh):
        return describe_program(build_jitted(case), *([arg] * len(case.in_specs)))


def _signature(program: Any) -> JitEquation:
    return JitEquation(program.in_shardings, program.out_shardings, program.donated)


def rewritten(case: GradCase) -> list[JitEquation]:
    """The jit equations the program rewrites stage for a ``dce`` or ``partial_eval``
    case: ``dce_program`` of the jitted function's program (AD-8; none when it goes), or
    the known then the unknown program of ``partial_eval_program`` (AD-6, AD-7)."""
    program = described(case)
    if case.transformation == "dce":
        pruned, _ = dce_program(program, case.used)
        return [] if pruned is None else [_signature(pruned)]
    split = partial_eval_program(program, case.differentiated)
    return [_signature(split.known)] + (
        [] if split.unknown is None else [_signature(split.unknown)])


def _mode(case: GradCase) -> str:
    return {"grad": "vjp", "value_and_grad": "vjp", "dce": "jvp"}.get(case.transformation,
                                                                      case.transformation)


def _count_hits(case: GradCase, eqn: Any, found: list[JitEquation]) -> None:
    primal = equation_from_jax(eqn)
    nonzero = case.differentiated
    body = jit_body_of(eqn, nonzero, _mode(case))
    hit("AD-0", False)
    if case.transformation == "dce":  # staged (pruned) or gone
        hit("AD-8", not found)
        return
    if case.transformation == "partial_eval":  # outputs dropped from the known equation or not
        hit("AD-6", len(found[0].out_shardings) - body.stored_residuals ==
            len(primal.out_shardings))
        hit("AD-7", len(found) < 2)
        return
    for moving in nonzero_outputs(body, nonzero):
        hit("AD-1", not moving)
    if case.transformation == "jvp":
        hit("AD-2", not any(nonzero))
    elif any(nonzero):
        for i, s in zip(body.forwarded, primal.out_shardings):
            if i is not None:  # dropped (no out_sharding) or kept
                hit("AD-3", s is not UNSPECIFIED)
        if case.transformation == "linearize":
            hit("AD-4", len(found) < 2)
        else:
            hit("AD-5", len(found) < 2)


def compare_case(case: GradCase, jit: Callable[..., Any] = jax.jit) -> list[str]:
    """The disagreements between JAX's jit equations for the case and the spec's."""
    eqn, transformed = trace(case, jit)
    found = [equation_from_jax(e) for jaxpr in transformed for e in jit_equations(jaxpr, NAME)]
    want = expected(case, eqn)
    problems = []
    if len(found) != len(want):
        problems.append(f"JAX staged {len(found)} jit equation(s), the spec {len(want)}")
    for n, (got, said) in enumerate(zip(found, want)):
        for field in ("in_shardings", "out_shardings", "donated_invars"):
            if getattr(got, field) != getattr(said, field):
                problems.append(f"equation {n} {field}: JAX {getattr(got, field)} "
                                f"spec {getattr(said, field)}")
    if not problems:
        _count_hits(case, eqn, found)
    return problems
