"""with_sharding_constraint: the WSC rules against real JAX, case for case.

A :class:`ConstraintCase` is a pytree of values (:class:`~shardlaw.spec.jit.call.Arg` leaves,
built as numpy arrays of ones), a shardings tree, an optional context mesh (entered with
``jax.set_mesh``) and, for a single value, an optional ``vmap`` (the batch dimension and
``spmd_axis_name``). :func:`run_in_jax` traces ``lambda x: with_sharding_constraint(x, s)``
with ``jax.make_jaxpr`` (reading each ``sharding_constraint`` equation's sharding and
``unconstrained_dims``) and runs it under ``jax.jit``; :func:`compare_constraint` asks the
spec (:func:`~shardlaw.spec.with_sharding_constraint`, then
:func:`~shardlaw.spec.batch_constraint`) and lists the disagreements: acceptance, the
exception's class, the equations. It records each rule's accepting and rejecting side
over the cases compared with :func:`shardlaw.properties.hits.record` (read with
:func:`wsc_hit_counts`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import jax
import numpy as np
from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.spec import from_jax, to_jax
from shardlaw.spec.jit.call import Arg
from shardlaw.spec.transforms.constraint import (
    Constraint, batch_constraint, constrained_result, lower_constraints,
    with_sharding_constraint,
)
from shardlaw.spec.placement.equivalence import placement_equivalent
from shardlaw.spec.bridge.constraint import constraint_equations, normal_spec, shardings_to_jax
from shardlaw.spec.core.pytree import map_leaves
from shardlaw.spec.core.rules import Rejection, tracing
from shardlaw.spec.core.shardings import NamedSharding
from shardlaw.spec.core.values import AxisType, Mesh, P

from .strategies import gspmd_shardings, meshes, partition_specs, single_device_shardings

__all__ = ["ConstraintCase", "run_in_jax", "compare_constraint", "SOURCE", "wsc_hit_counts",
           "constraint_cases"]

# The source under which the cases compared record their rules (shardlaw.properties.hits).
SOURCE = "constraint"

BATCH = 2  # the size of the vmapped batch


def wsc_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting hits, rejecting hits) over the cases compared so far (WSC-6's
    decision as ``"WSC-6 dims"``, WSC-9's as ``"WSC-9 result"``)."""
    return hits.counts(SOURCE)


@dataclasses.dataclass(frozen=True)
class ConstraintCase:
    values: Any
    shardings: Any
    context_mesh: Mesh | None = None
    batch_dim: int | None = None              # None: no vmap
    spmd_axis_name: Any = None


@dataclasses.dataclass
class JaxConstraintOutcome:
    error: BaseException | None = None
    traced: bool = False          # make_jaxpr finished (the error, if any, came from jit)
    equations: list[tuple[Any, frozenset]] = dataclasses.field(default_factory=list)
    results: list[Any] = dataclasses.field(default_factory=list)   # spec shardings


def _host(case: ConstraintCase) -> Any:
    def build(arg: Arg) -> Any:
        shape = arg.shape
        if case.batch_dim is not None:
            shape = shape[:case.batch_dim] + (BATCH,) + shape[case.batch_dim:]
        return np.ones(shape, np.float32)
    return map_leaves(build, case.values)


def _function(case: ConstraintCase) -> Any:
    shardings = shardings_to_jax(case.shardings)

    def constrain(x: Any) -> Any:
        return jax.lax.with_sharding_constraint(x, shardings)
    if case.batch_dim is None:
        return constrain
    return jax.vmap(constrain, in_axes=case.batch_dim, spmd_axis_name=case.spmd_axis_name)


def run_in_jax(case: ConstraintCase, run: bool = True) -> JaxConstraintOutcome:
    """Trace (reading the equations) and, with ``run``, run the constraint in real JAX."""
    context = (contextlib.nullcontext() if case.context_mesh is None
               else jax.set_mesh(to_jax(case.context_mesh)))
    outcome = JaxConstraintOutcome()
    try:
        fun, host = _function(case), _host(case)
        with context:
            outcome.equations = constraint_equations(fun, host)
            outcome.traced = True
            if not run:
                return outcome
            out = jax.block_until_ready(jax.jit(fun)(host))
            outcome.results = [from_jax(leaf.sharding) for leaf in jax.tree.leaves(out)]
    except Exception as error:  # what JAX raised is the outcome
        outcome.error = error
    return outcome


def spec_outcome(case: ConstraintCase) -> tuple[list[Constraint] | None, Rejection | None, list]:
    """The spec's constraints (batched when the case is vmapped) or its rejection, and the
    rules that fired."""
    with tracing() as fired:
        try:
            found = with_sharding_constraint(case.values, case.shardings, case.context_mesh)
            if case.batch_dim is not None:
                found = [batch_constraint(c, case.batch_dim, case.spmd_axis_name)
                         if c.equation else c for c in found]
            lower_constraints(found)
            return found, None, list(fired)
        except Rejection as rejection:
            return None, rejection, list(fired)


def _same_sharding(spec: Any, seen: Any) -> bool:
    if isinstance(spec, NamedSharding) and isinstance(seen, NamedSharding):
        return (spec.mesh == seen.mesh and normal_spec(spec.spec) == normal_spec(seen.spec)
                and spec.memory_kind in (None, seen.memory_kind))
    return spec == seen


def _count(fired: list[str], rejected: str | None, constraints: list[Constraint] | None) -> None:
    for rule_id in dict.fromkeys(fired):
        hits.record(SOURCE, rule_id, refused=rule_id == rejected)
    if rejected is not None:
        hits.record(SOURCE, rejected, refused=True, count=0)
    # WSC-6 decides without refusing: its "sides" are constraints with and without
    # dimensions left to the compiler.
    for c in constraints or ():
        hits.record(SOURCE, "WSC-6 dims", refused=not c.unconstrained_dims)


def compare_constraint(case: ConstraintCase) -> list[str]:
    """The disagreements between the spec and JAX on ``case`` (empty: they agree)."""
    constraints, rejection, fired = spec_outcome(case)
    _count(fired, rejection.rule if rejection else None, constraints)
    if rejection is not None and rejection.failure.jax_error == "abort":
        # JAX would end this process lowering it: trace only, which must succeed.
        traced = run_in_jax(case, run=False)
        return [] if traced.error is None else [f"JAX refused ({traced.error!r}) to trace a "
                                                f"case the spec says it aborts lowering"]
    jax_out = run_in_jax(case)
    if rejection is not None or jax_out.error is not None:
        if rejection is None:
            return [f"JAX refused ({type(jax_out.error).__name__}: {jax_out.error}) but the "
                    f"spec accepted: {constraints}"]
        if jax_out.error is None:
            return [f"the spec refused ({rejection}) but JAX accepted: {jax_out.equations}"]
        if type(jax_out.error).__name__ != rejection.failure.jax_error:
            return [f"JAX raised {type(jax_out.error).__name__} ({jax_out.error}), the spec "
                    f"{rejection.failure.jax_error} ({rejection})"]
        return []
    expected = [c for c in constraints if c.equation]
    if len(expected) != len(jax_out.equations):
        return [f"JAX left {len(jax_out.equations)} equations, the spec {len(expected)}: "
                f"{jax_out.equations} vs {expected}"]
    problems = []
    for c, (sharding, dims) in zip(expected, jax_out.equations):
        if not _same_sharding(c.sharding, sharding) or c.unconstrained_dims != dims:
            problems.append(f"{c.path}: JAX's equation holds {sharding!r} with unconstrained "
                            f"dims {sorted(dims)}, the spec {c.sharding!r} with "
                            f"{sorted(c.unconstrained_dims)}")
    if case.batch_dim is None:
        problems += _compare_results(constraints, jax_out.results)
    return problems


def _compare_results(constraints: list[Constraint], results: list[Any]) -> list[str]:
    """WSC-9: where the spec says how the result comes back, JAX places it so."""
    problems = []
    for c, seen in zip(constraints, results):
        with tracing() as fired:
            expected = constrained_result(c)
        if expected is None:
            continue
        hits.record(SOURCE, "WSC-9 result", refused=not _same_sharding(expected, c.sharding))
        for rule_id in dict.fromkeys(fired):
            hits.record(SOURCE, rule_id, refused=False)
        if not placement_equivalent(expected, seen, c.shape):
            problems.append(f"{c.path}: the result came back on {seen!r}, the spec says "
                            f"{expected!r}")
    return problems


# --------------------------------------------------------------------------- strategies

_DIMS = (1, 2, 3, 4, 6, 8, 0)


def _values_shapes() -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.sampled_from(_DIMS), max_size=3).map(tuple)


@st.composite
def _leaf_sharding(draw: Any, mesh: Mesh, rank: int) -> Any:
    """A shardings leaf for a value of ``rank``: mostly fitting, sometimes not."""
    longer = draw(st.integers(0, 9)) == 0
    spec = draw(partition_specs(mesh, max_rank=rank + 1 if longer else rank))
    kind = draw(st.sampled_from(["named", "named", "bare", "bare", "none", "single", "gspmd",
                                 "unknown", "text"]))
    if kind == "named":
        return NamedSharding(mesh, spec)
    if kind == "bare":
        return spec
    if kind == "none":
        return None
    if kind == "single":
        return draw(single_device_shardings(8))
    if kind == "gspmd":
        return draw(gspmd_shardings(8))
    if kind == "unknown":
        return P("unknown_axis")
    return draw(st.sampled_from(["x", 0]))


@st.composite
def constraint_cases(draw: Any) -> ConstraintCase:
    """A with_sharding_constraint call, vmapped now and then (WSC-0 .. WSC-7)."""
    # Manual axes exist inside shard_map (the SMAP family); here they stay out.
    mesh = draw(meshes(max_devices=8).filter(lambda m: AxisType.Manual not in m.axis_types))
    shapes = draw(st.lists(_values_shapes(), min_size=1, max_size=3))
    form = draw(st.sampled_from(["leaf", "leaf", "tuple", "dict"])) if len(shapes) > 1 else "leaf"
    args = [Arg.numpy(s) for s in shapes]
    leaves = [draw(_leaf_sharding(mesh, len(s))) for s in shapes]
    if form == "leaf" or len(shapes) == 1:
        values: Any = args[0] if len(shapes) == 1 else tuple(args)
        shardings: Any = leaves[0]
    elif form == "tuple":
        values, shardings = tuple(args), tuple(leaves)
        if draw(st.integers(0, 5)) == 0:
            shardings = shardings[:-1] if draw(st.booleans()) else list(shardings)
    else:
        values = {f"k{i}": a for i, a in enumerate(args)}
        shardings = {f"k{i}": s for i, s in enumerate(leaves)}
        if draw(st.integers(0, 5)) == 0:
            shardings.pop("k0")
    context = draw(st.sampled_from([None, mesh, mesh, "other"]))
    if context == "other":
        context = draw(meshes(max_devices=8))
    if context is not None and AxisType.Manual in context.axis_types:
        context = None  # jax.set_mesh refuses such a mesh (and WSC-0 too)
    case = ConstraintCase(values, shardings, context)
    if isinstance(values, Arg) and draw(st.booleans()):
        names = list(mesh.axis_names)
        spmd = draw(st.one_of(st.none(), st.none(), st.sampled_from(names),
                              st.permutations(names).map(lambda n: tuple(n[:2]))))
        case = dataclasses.replace(case, batch_dim=draw(st.integers(0, len(values.shape))),
                                   spmd_axis_name=spmd)
    return case
