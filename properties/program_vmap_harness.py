"""``jax.vmap`` of whole programs against real JAX, program for program.

A :class:`VmapCase` is a drawn program (:func:`~shardlaw.properties.program_harness.program_cases`,
its arguments those of one example) under one or two nested vmaps (:class:`Vmap`: in_axes
per input, ``None`` included, out_axes, the batch size, whether it is passed to vmap as
``axis_size``, and ``spmd_axis_name`` or None). Both sides start from the same batched
arguments: each example's argument with the batch dimension inserted, placed as the example
is with that dimension unsplit (:func:`~shardlaw.spec.program.batching.batched_input`).

JAX's side (:func:`run_vmapped`): ``jax.make_jaxpr`` of ``jax.vmap(...(jax.jit(f)))``
(a refusal there is stage ``trace``), ``describe_trace`` of it (JAX's trace read as it
is: ``describe_program`` would apply the vmaps by the spec), then the run: where the
vmapped function's trace is one jit call, the vmapped function is called as it is (a refusal
is stage ``run``, which holds the batched call's own stages: its shardings against the
batched arguments, lowering, compiling, handing the arguments over); where vmap moves
results after the call, ``jax.jit`` of the vmapped function is traced, lowered, compiled
and called, as ``describe_trace`` reads it. The spec's side:
``explain_program(vmap_program(...))`` — the spec's rewrite, never read from JAX's trace,
only compared with it (:func:`compare_vmapped`): the refusal (same class, same stage), or the
results' shardings, committedness and types, and the equations of the rewritten program
against ``describe_trace`` of the vmapped function (their kinds, the constraints' and
device_puts' shardings, every jit's shardings, opaque primitives and result shapes, the
inputs). Rule sides are recorded under ``"programs-vmap"``.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.properties.program_harness import (
    Case, JaxOutcome, Recipe, jax_class_agrees, type_of, watch_compiler,
    with_choices, arguments_of, function_of, outcome_problems, program_cases, program_of,
    top_options,
)
from shardlaw.spec.program.control_flow import Cond, Scan, While
from shardlaw.spec import Rejection, explain_program, from_jax, tracing
from shardlaw.spec.program.batching import (
    batched_input, nested_vmap_program, vmap_program,
)
from shardlaw.spec.program.description import (
    DevicePut, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap,
)

__all__ = ["Vmap", "VmapCase", "vmap_cases", "run_vmapped", "compare_vmapped", "SOURCE",
           "vmap_hit_counts", "spec_vmapped", "structure", "MapVmapCase", "map_vmap_cases",
           "compare_mapped_vmapped", "StepVmapCase", "step_vmap_cases", "compare_step_vmapped",
           "step_equations"]

SOURCE = "programs-vmap"
CLEAR_EVERY = 500
SPMD_NAMES = ("x", "y", "z", "p")   # the recipes' mesh axes, and one no mesh has
_EMPTY = Recipe((), (0,))          # a body that returns its argument (for arguments_of)


def vmap_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting side, refusing side) over the vmapped programs compared."""
    return hits.counts(SOURCE)


@dataclasses.dataclass(frozen=True)
class Vmap:
    """One ``jax.vmap``: ``in_axes`` (one entry per input), ``out_axes``, the batch size,
    whether vmap is given it as ``axis_size``, ``spmd_axis_name``, and the Explicit mesh
    axes each batched argument's mapped dimension is split over (``splits``: None, or one
    spec entry or None per input: the arguments as the user places them)."""

    in_axes: tuple
    out_axes: Any = 0
    size: int = 2
    pass_size: bool = False
    spmd: Any = None
    splits: Any = None

    @property
    def jax_options(self) -> dict:
        return dict(in_axes=self.in_axes, out_axes=self.out_axes, spmd_axis_name=self.spmd,
                    axis_size=self.size if self.pass_size else None)


@dataclasses.dataclass(frozen=True)
class VmapCase:
    """A drawn program under vmaps, innermost first."""

    case: Case
    vmaps: tuple[Vmap, ...]


def batched_inputs(vc: VmapCase) -> tuple:
    """The case's inputs with each vmap's batch dimension added (innermost vmap first)."""
    inputs = vc.case.inputs
    for v in vc.vmaps:
        ranks = [len(x.shape) for x in inputs]
        axes = [None if a is None else a % (r + 1) for a, r in zip(v.in_axes, ranks)]
        splits = v.splits or (None,) * len(inputs)
        inputs = tuple(batched_input(x, a, v.size, e) for x, a, e in zip(inputs, axes, splits))
    return inputs


def spec_vmapped(vc: VmapCase) -> Program:
    """The spec's rewrite of the vmaps (innermost first), as JAX traces them together."""
    return _vmapped_by_spec(program_of(vc.case), vc.vmaps)


def _vmapped_by_spec(program: Program, vmaps: tuple[Vmap, ...]) -> Program:
    """``nested_vmap_program`` of the vmaps, innermost first (one vmap: ``vmap_program``)."""
    if len(vmaps) == 1:
        (v,) = vmaps
        return vmap_program(program, v.in_axes, v.out_axes, axis_size=v.size,
                            spmd_axis_name=v.spmd, in_splits=v.splits)
    return nested_vmap_program(program, [
        dict(in_axes=v.in_axes, out_axes=v.out_axes, axis_size=v.size, spmd_axis_name=v.spmd,
             in_splits=v.splits)
        for v in vmaps])


# --------------------------------------------------------------------------- running JAX

@dataclasses.dataclass
class VmapOutcome(JaxOutcome):
    """What JAX did; ``stage`` is ``trace``, ``run`` (the vmapped call), or a stage of
    ``jax.jit`` of the vmapped function where vmap moved results after the call."""

    one_jit: bool = True


def jax_vmapped(vc: VmapCase) -> Any:
    """The case's function under jax.jit, wrapped in each of its ``jax.vmap`` s, innermost first."""
    import jax

    fun = jax.jit(function_of(vc.case), **top_options(vc.case))
    for v in vc.vmaps:
        fun = jax.vmap(fun, **v.jax_options)
    return fun


def run_vmapped(vc: VmapCase) -> VmapOutcome:
    """Trace, describe and run the vmapped function on the batched arguments."""
    args = arguments_of(dataclasses.replace(vc.case, inputs=batched_inputs(vc)))
    return _run_vmapped(jax_vmapped(vc), args)


def _run_vmapped(fun: Any, args: tuple) -> VmapOutcome:
    import jax
    from shardlaw.spec.bridge.program import is_one_jit, describe_trace

    outcome = VmapOutcome()
    hits.record_jax_calls(1)
    if hits.jax_calls() % CLEAR_EVERY == 0:
        jax.clear_caches()
    with warnings.catch_warnings(), watch_compiler(outcome):
        warnings.simplefilter("ignore")
        try:
            closed = jax.make_jaxpr(fun)(*args)
        except Exception as error:  # noqa: BLE001 - recorded and compared
            outcome.stage, outcome.error = "trace", error
            return outcome
        outcome.described = describe_trace(fun, *args)
        outcome.one_jit = is_one_jit(closed)
        results = _run(outcome, fun, args)
    if results is None:
        return outcome
    results = results if isinstance(results, (tuple, list)) else (results,)
    outcome.out_shardings = [from_jax(r.sharding) for r in results]
    outcome.out_committed = [bool(r._committed) for r in results]
    outcome.out_types = [type_of(r) for r in results]
    if results:
        outcome.device_assignment = tuple(d.id for d in results[0].sharding._device_assignment)
    return outcome


def _run(outcome: VmapOutcome, fun: Any, args: tuple) -> Any:
    import jax

    if outcome.one_jit:
        steps = [("run", lambda: fun(*args))]
    else:
        jitted = jax.jit(fun)
        steps = [("trace", lambda: jitted.trace(*args)),
                 ("lower", lambda: jitted.trace(*args).lower()),
                 ("compile", lambda: jitted.trace(*args).lower().compile()),
                 ("call", lambda: jitted(*args))]
    results = None
    for stage, step in steps:
        try:
            results = step()
        except Exception as error:  # noqa: BLE001 - recorded and compared
            outcome.stage, outcome.error = stage, error
            return None
    return results


# --------------------------------------------------------------------------- comparing

def structure(program: Program) -> tuple:
    """What is compared of two programs: the inputs, the top jit's options, and per
    equation its kind, operands and what it decides (bodies included); opaque equations by
    primitive and result shapes (their parameters are read by text)."""
    return (program.inputs, program.in_shardings, program.out_shardings, program.outputs,
            program.keep_unused, tuple(_equation(eq) for eq in program.equations))


def _body(program: Program) -> tuple:
    return (program.inputs, program.in_shardings,
            program.out_shardings, program.outputs,
            tuple(_equation(eq) for eq in program.equations))


def _equation(eq: Any) -> tuple:
    shapes = tuple(r.shape for r in eq.results)
    if isinstance(eq, Jit):
        return ("jit", eq.operands, _body(eq.body))
    if isinstance(eq, ShardingConstraint):
        return ("constraint", eq.operands, eq.sharding, eq.unconstrained_dims)
    if isinstance(eq, (DevicePut, Reshard)):
        return (eq.kind, eq.operands, getattr(eq, "targets", getattr(eq, "sharding", None)),
                shapes)
    if isinstance(eq, ShardMap):
        return ("shard_map", eq.operands, eq.in_specs, eq.out_specs, shapes, _body(eq.body))
    if isinstance(eq, (Scan, While, Cond)):   # (their bodies, as one Program each)
        return (eq.kind, eq.operands, shapes, _body(eq.body))
    assert isinstance(eq, Opaque)
    return (eq.primitive, eq.operands, shapes)


def _refusal_agrees(stage: str | None, outcome: VmapOutcome, verdict: Any) -> bool:
    """The spec's refusal at ``stage`` is JAX's: the same class, at the stage JAX's run
    holds it (``run``: the batched call's own stages; ``trace``: vmap's trace)."""
    if not jax_class_agrees(verdict, outcome.error):
        return False
    if outcome.stage == "run":   # the batched call's own stages, all run by the call
        return stage in ("trace", "call", "lower", "compile")
    if outcome.stage == "trace":
        return stage in ("jit", "trace")
    return stage == outcome.stage


def compare_vmapped(vc: VmapCase) -> list[str]:
    """Every disagreement between the spec and JAX on ``vc`` (empty: they agree)."""
    return _compare(run_vmapped(vc), lambda: spec_vmapped(vc))


def _compare(outcome: VmapOutcome, rewrite: Any) -> list[str]:
    """The spec's rewrite (``rewrite()``, a Program or a refusal) against JAX's outcome."""
    with tracing() as fired:
        try:
            program = rewrite()
        except Rejection as refusal:
            return _compare_refusal(outcome, refusal, list(fired))
    verdict = explain_program(with_choices(program, outcome))
    problems = []
    if outcome.described is not None and structure(outcome.described) != structure(program):
        problems.append(f"describe_trace of the vmapped function gives "
                        f"{outcome.described!r}; the spec's rewrite {program!r}")
    problems += outcome_problems(
        verdict, outcome, lambda v, o: _refusal_agrees(v.stage, o, v))
    if not problems:
        _record(list(fired), None)
        _record(list(verdict.trace), verdict)
    return problems


def _compare_refusal(outcome: VmapOutcome, refusal: Rejection, fired: list[str]
                     ) -> list[str]:
    failure = refusal.failure
    if outcome.error is None:
        return [f"JAX accepts; the spec's vmap refuses: {refusal}"]
    names = {cls.__name__ for cls in type(outcome.error).__mro__}
    same = failure.jax_error in names or failure.error_type.__name__ in names
    if outcome.stage != "trace" or not same:
        return [f"JAX refused at {outcome.stage} with {type(outcome.error).__name__}: "
                f"{outcome.error}; the spec's vmap at {refusal.stage} with "
                f"{failure.error_type.__name__}: {refusal}"]
    for rule_id in dict.fromkeys(fired):
        hits.record(SOURCE, rule_id, refused=rule_id == failure.rule)
    return []


def _record(fired: list[str], verdict: Any) -> None:
    refusing = None if verdict is None or verdict.accepted else verdict.rule
    for rule_id in dict.fromkeys(fired):
        hits.record(SOURCE, rule_id, refused=rule_id == refusing)


# --------------------------------------------------------------------------- drawing

@st.composite
def _vmap(draw: Any, ranks: list[int], outputs: int, spmd: bool = True) -> Vmap:
    in_axes = []
    for rank in ranks:
        choices = [0, 0, 0, None, -1] + ([1] if rank >= 1 else [])
        in_axes.append(draw(st.sampled_from(choices)))
    size = draw(st.sampled_from([2, 3, 4, 8]))
    pass_size = all(a is None for a in in_axes) or draw(st.integers(0, 4)) == 0
    if draw(st.integers(0, 3)) == 0:
        out_axes: Any = tuple(draw(st.sampled_from([0, 0, 1, -1, None]))
                              for _ in range(outputs))
    else:
        out_axes = 0
    name = draw(st.sampled_from([None, None] + list(SPMD_NAMES))) if spmd else None
    return Vmap(tuple(in_axes), out_axes, size, pass_size, name)


@st.composite
def vmap_cases(draw: Any, explicit: bool = False) -> VmapCase:
    """A drawn program under one vmap, or (one time in four) two nested vmaps; with
    ``explicit``, over Auto, Explicit and mixed meshes, its arguments typed over the
    Explicit axes, reduced ones too, and reshards to them (``program_cases(explicit=True)``:
    vmap refuses mapping or broadcasting such a type, BAT-10)."""
    case = draw(program_cases(explicit=explicit))
    if draw(st.integers(0, 5)) == 0:
        case = draw(_abstract_outs(case))
    ranks = [len(v.shape) for v in case.inputs]
    outputs = len(case.body.outputs)
    vmaps = [draw(_vmap(ranks, outputs))]
    if draw(st.integers(0, 3)) == 0:
        ranks = [r + (a is not None) for r, a in zip(ranks, vmaps[0].in_axes)]
        vmaps.append(draw(_vmap(ranks, outputs)))
    if explicit:
        vmaps = draw(_split_batches(case, vmaps))
    return VmapCase(case, tuple(vmaps))


@st.composite
def _split_batches(draw: Any, case: Case, vmaps: list[Vmap]) -> list[Vmap]:
    """The vmaps (innermost first), each three times in four mapping dimensions split over an
    Explicit mesh axis (BAT-9: JAX types the batch dimension with it): one axis of a
    mapped argument's mesh its type does not use (mostly one every mapped argument can
    take; the batch size then a multiple of it), given to every mapped argument it fits
    (the outermost vmap mostly leaves the others unmapped, and mostly names no other spmd
    axis); one time in six one of them left unsplit (split unlike the others, which vmap
    refuses)."""
    inputs, out = case.inputs, []
    for k, v in enumerate(vmaps):
        ranks = [len(x.shape) for x in inputs]
        axes = [None if a is None else a % (r + 1) for a, r in zip(v.in_axes, ranks)]
        mapped = [x for x, a in zip(inputs, axes) if a is not None]
        names = sorted({n for x in mapped for n in _free_explicit(x)})
        if names and draw(st.integers(0, 3)):
            alike = [n for n in names if all(n in _free_explicit(x) for x in mapped)]
            name = draw(st.sampled_from(alike if alike and draw(st.integers(0, 3)) else names))
            ways = next(x.sharding.mesh.axis_size(name) for x in mapped
                        if name in _free_explicit(x))
            if v.size % ways:
                v = dataclasses.replace(v, size=ways * draw(st.sampled_from([1, 2])))
            fits = [a is not None and name in _free_explicit(x, v.size)
                    for x, a in zip(inputs, axes)]
            if k == len(vmaps) - 1 and draw(st.integers(0, 5)):   # (the outermost: its in_axes
                # read by no vmap after it) mostly those it does not fit left unmapped
                v = dataclasses.replace(v, in_axes=tuple(
                    a if f else None for a, f in zip(v.in_axes, fits)))
                axes = [None if a is None else a % (r + 1) for a, r in zip(v.in_axes, ranks)]
            if v.spmd is not None and draw(st.integers(0, 2)):   # mostly none, or the axis
                v = dataclasses.replace(v, spmd=draw(st.sampled_from([None, name])))
            splits = [name if f and a is not None else None for f, a in zip(fits, axes)]
            split_at = [k for k, e in enumerate(splits) if e is not None]
            if len(split_at) > 1 and draw(st.integers(0, 5)) == 0:
                splits[draw(st.sampled_from(split_at))] = None
            v = dataclasses.replace(v, splits=tuple(splits),
                                    pass_size=v.pass_size or not split_at)
        out.append(v)
        splits = v.splits or (None,) * len(inputs)
        inputs = tuple(batched_input(x, a, v.size, e) for x, a, e in zip(inputs, axes, splits))
    return out


def _free_explicit(x: Any, size: int | None = None) -> list[str]:
    """The Explicit axes of the mesh of ``x``'s NamedSharding its spec does not use (none
    for another sharding), those that divide ``size`` where given."""
    from shardlaw.spec import AxisType, NamedSharding
    s = x.sharding
    if not isinstance(s, NamedSharding):
        return []
    used = set(s.spec.axes()) | s.spec.reduced | s.spec.unreduced
    return [n for n in s.mesh.axis_names if s.mesh.axis_type(n) is AxisType.Explicit
            and n not in used and (size is None or size % s.mesh.axis_size(n) == 0)]


@st.composite
def _abstract_outs(draw: Any, case: Case) -> Case:
    """``case`` with out_shardings over the abstract mesh of an argument's concrete mesh of
    Auto axes: replicated, or the result's first dimension split over one mesh axis where
    that divides it. Batched without spmd_axis_name they gain an UNCONSTRAINED batch
    dimension (BAT-2), which the compiler places (PROG-6; over a mesh with Explicit axes
    too, not held to JAX yet)."""
    from shardlaw.spec import AxisType, Mesh, NamedSharding, P
    meshes = [v.sharding.mesh for v in case.inputs
              if isinstance(v.sharding, NamedSharding) and isinstance(v.sharding.mesh, Mesh)
              and AxisType.Explicit not in v.sharding.mesh.axis_types]
    if not meshes:
        return case
    mesh = draw(st.sampled_from(meshes)).abstract
    types = program_of(case).value_types
    outs = []
    for n in case.body.outputs:
        shape = types[n].shape
        axes = [a for a in mesh.axis_names
                if shape and shape[0] % mesh.axis_sizes[mesh.axis_names.index(a)] == 0]
        spec = draw(st.sampled_from([P()] + [P(a) for a in axes]))
        outs.append(NamedSharding(mesh, spec))
    return dataclasses.replace(case, out_shardings=tuple(outs))


# --------------------------------------------------------------------------- shard_maps

@dataclasses.dataclass(frozen=True)
class MapVmapCase:
    """A drawn shard_map program (:func:`~shardlaw.properties.program_shardmap_harness.map_cases`)
    under one vmap or two nested vmaps, innermost first."""

    case: Any
    vmaps: tuple[Vmap, ...]


def compare_mapped_vmapped(mc: MapVmapCase) -> list[str]:
    """The shard_map harness's program — its jitted function read on one example with
    ``describe_program``, untransformed — vmapped by the spec (``vmap_program`` once per
    vmap), against ``jax.vmap`` of the jitted function (nested as drawn) on the batched
    argument. An example JAX refuses to trace is held to JAX's refusal of the vmapped
    function while it traces.

    The batched shard_map is the one JAX's batching rule binds: its specs are not checked
    against its mesh and operands again (``ShardMap.checked``), so a batch the spmd axes
    split unevenly is traced, typed rounded down, and refused by the compiler at lower
    (SMAP-8), as is a spec naming an automatic axis without check_vma (SMAP-3)."""
    import jax
    from shardlaw.spec.bridge.program import describe_program
    from shardlaw.properties import program_shardmap_harness as maps

    batched = mc.case.argument
    fun = jax.jit(maps.function_of(mc.case))
    for v in mc.vmaps:
        axis = None if v.in_axes[0] is None else v.in_axes[0] % (len(batched.shape) + 1)
        batched = batched_input(batched, axis, v.size)
        fun = jax.vmap(fun, **v.jax_options)
    args = arguments_of(Case((batched,), _EMPTY))
    outcome = _run_vmapped(fun, args)
    try:
        example = describe_program(jax.jit(maps.function_of(mc.case)),
                                   maps.argument_of(mc.case))
    except Exception as error:  # noqa: BLE001 - JAX refuses the example itself
        return [] if outcome.stage == "trace" else [
            f"JAX refuses to trace the example ({error}) but traces its vmap"]

    def rewrite() -> Program:
        return _vmapped_by_spec(example, mc.vmaps)
    return _compare(outcome, rewrite)


MAP_SPMD_NAMES = ("x", "y", ("x", "y"), ("y", "x"), "p")


@st.composite
def _map_vmap(draw: Any, rank: int, free: list) -> Vmap:
    in_axis = draw(st.sampled_from([0, 0, 1, -1, None] if rank >= 1 else [0, None]))
    # mostly none or a mesh axis the shard_map's specs leave free (so that vmap batches it
    # and goes on), else any name: one the specs use (PBAT-1), one no mesh has
    spmd = draw(st.sampled_from([None, None] + free * 2 + list(MAP_SPMD_NAMES)))
    return Vmap((in_axis,), draw(st.sampled_from([0, 0, -1])),
                draw(st.sampled_from([2, 3, 4, 6, 8])), in_axis is None, spmd)


@st.composite
def map_vmap_cases(draw: Any) -> MapVmapCase:
    """A shard_map program under one vmap of its one argument, or (one time in four) two
    nested vmaps; batch sizes the spmd axes may split unevenly, spmd axes the shard_map
    names, makes manual or not, or its mesh lacks."""
    from shardlaw.properties.program_shardmap_harness import map_cases
    from shardlaw.spec.transforms.shardmap_parameters import spec_axes

    case = draw(map_cases())
    used = spec_axes(case.in_spec) | spec_axes(case.out_spec)
    free = [a for a in case.mesh.axis_names if a not in used]
    rank = len(case.argument.shape)
    vmaps = [draw(_map_vmap(rank, free))]
    if draw(st.integers(0, 3)) == 0:
        vmaps.append(draw(_map_vmap(rank + (vmaps[0].in_axes[0] is not None), free)))
    return MapVmapCase(case, tuple(vmaps))


# --------------------------------------------------------------------------- a real step's primitives

@dataclasses.dataclass(frozen=True)
class StepVmapCase:
    """A drawn step (:mod:`~shardlaw.properties.program_steps`) under one vmap: in_axes
    per argument (None included, one mapped at least) and the batch size."""

    step: Any
    in_axes: tuple
    size: int


@st.composite
def step_vmap_cases(draw: Any) -> StepVmapCase:
    """A step of a real model's primitives under vmap, its arguments mapped at drawn
    axes (a key array at its first)."""
    from shardlaw.properties.program_steps import KEY, VMAP_STEP_NAMES, step_cases
    step = draw(step_cases(VMAP_STEP_NAMES))
    axes = []
    for shape in step.shapes:
        rank = 0 if shape and shape[0] == KEY else len(shape)
        choices = [None, 0] if rank == 0 and shape and shape[0] == KEY else \
            [None] + list(range(rank + 1))
        axes.append(draw(st.sampled_from(choices)))
    if all(a is None for a in axes):
        axes[-1] = 0
    return StepVmapCase(step, tuple(axes), draw(st.sampled_from([2, 3, 4])))


def _batched_step_arguments(sc: StepVmapCase) -> list:
    import jax
    import numpy as np

    from shardlaw.properties.program_steps import examples_of
    out = []
    for example, axis in zip(examples_of(sc.step), sc.in_axes):
        if axis is None:
            out.append(example)
        elif jax.dtypes.issubdtype(example.dtype, jax.dtypes.prng_key):
            out.append(jax.random.split(example, sc.size))
        else:
            out.append(np.stack([example * (k + 1) for k in range(sc.size)], axis))
    return out


def _params_read(value: Any) -> Any:
    """A parameter as both descriptions hold it (JAX's trace keeps numpy integers, read
    back as their text)."""
    if isinstance(value, tuple):
        return tuple(_params_read(v) for v in value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if isinstance(value, str):   # a gather's dimension numbers: numpy 2 writes np.int64(1)
        return re.sub(r"np\.\w+\((-?\d+)\)", r"\1", value)
    return value


def step_equations(program: Program, out: list | None = None) -> list:
    """Every equation of ``program``, bodies included, in order: its primitive or kind,
    operands, result shapes and dtypes, and an opaque equation's parameters."""
    out = [] if out is None else out
    for eq in program.equations:
        params = {k: _params_read(v) for k, v in eq.params} if isinstance(eq, Opaque) else {}
        out.append((getattr(eq, "primitive", eq.kind), eq.operands,
                    tuple((r.shape, r.dtype) for r in eq.results), params))
        if eq.body is not None:
            step_equations(eq.body, out)
    return out


def compare_step_vmapped(sc: StepVmapCase) -> list[str]:
    """How the spec's vmap of the step and JAX's part (empty: they agree): the spec's
    rewrite of ``describe_program`` of the jitted step on one example against
    ``describe_trace`` of ``jax.vmap`` of it, equation for equation (parameters included),
    then the verdict accepted with JAX's result types. Rule sides are recorded."""
    import jax

    from shardlaw.properties.program_steps import examples_of
    from shardlaw.spec.bridge.program import describe_program, describe_trace
    jitted = jax.jit(sc.step.function)
    traced = describe_trace(jax.vmap(jitted, in_axes=sc.in_axes),
                            *_batched_step_arguments(sc))
    try:
        program = vmap_program(describe_program(jitted, *examples_of(sc.step)), sc.in_axes,
                               axis_size=sc.size)
    except Rejection as refused:
        return [f"JAX batches the step; the spec refuses: {refused}"]
    problems = []
    ours, theirs = step_equations(program), step_equations(traced)
    if ours != theirs:
        first = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                     min(len(ours), len(theirs)))
        problems.append(f"equation {first} differs: the spec's "
                        f"{ours[first] if first < len(ours) else None} against JAX's "
                        f"{theirs[first] if first < len(theirs) else None}")
    verdict = explain_program(program)
    _record([], verdict)
    if not verdict.accepted:
        problems.append(f"JAX batches the step; the spec refuses: {verdict.message}")
    elif verdict.opaque:
        problems.append(f"the verdict leaves {verdict.opaque} opaque")
    elif verdict.out_types != tuple(traced.value_types[n] for n in traced.outputs):
        problems.append(f"result types {verdict.out_types} against JAX's "
                        f"{tuple(traced.value_types[n] for n in traced.outputs)}")
    return problems
