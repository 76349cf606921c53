"""One question, one answer: what ``jax.jit`` does with a whole program.

:func:`explain_program` decides the program's top-level jit call with the jit pipeline's
own stages (:mod:`shardlaw.spec.jit.pipeline`), its :class:`~shardlaw.spec.Call` built from
the program (:func:`program_call`), and walks the body where JAX does:

1. at ``jax.jit(...)`` and at the call (``stage_jit``, ``stage_call``): jit's options, the
   arguments against ``in_shardings``;
2. tracing the body (:func:`trace_body`, stage ``trace``): each equation is checked as it
   is traced — an inner jit's shardings fit its operands and results (FIT-1, around its
   own body), a constraint fits its operand (WSC-6, WSC-4, WSC-5), a device_put's
   sharding places its operand (ARG-4); then ``stage_trace``: the results against
   ``out_shardings``;
3. lowering (``stage_lower``): dead equations dropped, every sharding left inside the body
   joins the kept inputs' and the results' in one device assignment (PROG-2, DA-1, DA-2)
   and the results' committedness (EXE-2) — closed-over refs (REF-1) and hoisted
   committed constants (CONST-1, CONST-2) first; a GSPMDSharding constraint must lower
   (WSC-8);
4. compiling (``stage_compile``): a donated ref is refused (REF-3); results a constraint
   or an inner jit placed come back so placed on a one-mesh program (PROG-4), read back
   in the type of an argument's sharding, else of the first sharding inside the body
   (PROG-3, OUT-1, OUT-2);
5. handing the arguments over (``stage_dispatch``).

A program vmap gave (``Program.checked`` False) is the batched jit that JAX's batching rule
binds on the batched arguments: its options and its shardings' fit are not checked at 1
and 2 (JIT-1, JIT-2, FIT-1); each kept input and each result is first divided by its
sharding at 3 (FIT-3), where JAX writes the bound call out.

A refusal is located at the equation: ``body[3]``, ``body[0].jit.body[1]``,
``body[0].jit.in_shardings[0]``. A program without shardings inside its body is decided
exactly as :func:`~shardlaw.spec.jit_call` decides its :func:`program_call`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from ..core.rules import Rejection, located, remembering, staged, tracing
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding
from ..core.values import AbstractMesh, Mesh, PartitionSpec
from ..jit.call import Arg, Call, DeviceIds, JitOptions, Out
from ..jit.matching import check_fits, check_lowered_fit, match_out_shardings
from ..jit.pipeline import (
    jit_shardings, stage_call, stage_compile, stage_dispatch, stage_jit, stage_lower,
    stage_trace,
)
from ..jit.assignment import check_tile_count
from ..placement.blocks import to_hlo
from ..transforms.arguments import place_on_devices
from ..transforms.shardmap_nested import check_context_mesh
from ..transforms.constraint import (
    check_constraint_axes, check_constraint_fits, check_constraint_lowers,
    check_operand_not_reduced, check_split_kept, merged_constraint_spec, unconstrained_dims,
)
from .constants import check_refs_not_donated, held_inputs
from .control_flow import check_custom_lin_transposed
from .description import (
    DevicePut, Jit, Program, Reshard, ShardingConstraint, ShardMap, Value,
    check_program, type_spec,
)
from .lowering import (
    Live, equation_path, inside_shardings, live_parts, lowered_live, placed_results,
)
from .primitives import TRACING, Kind, entry_of
from .collectives import predicted_collectives
from .propagation import predicted_choices, undetermined_results
from .placement_checks import (
    check_aliased_donations, crossmesh_choices, left_to_compiler, open_donations,
)
from .propagation_branches import check_branch_shardings, open_branch_shardings
from .propagation_spelling import traced_placements
from .refs import check_no_closed_over_refs, check_shard_map_ref_writes
from .shardmap import (
    check_listed_in_specs, lower_shard_maps, shardings_decision, trace_shard_map,
)

P = PartitionSpec  # the name the examples use

__all__ = ["explain_program", "ProgramVerdict", "program_call", "trace_body", "opaque_equations"]


@dataclasses.dataclass(frozen=True)
class ProgramVerdict:
    """What ``jax.jit`` does with a :class:`~shardlaw.spec.program.description.Program`.

    Accepted: as a jit call's :class:`~shardlaw.spec.Verdict` — ``in_shardings`` (one per
    input as the compiled program takes it), ``out_shardings`` (one per output as it comes
    back; UNSPECIFIED where the compiler chose and the description does not say what),
    ``out_committed``, ``device_assignment``, ``num_devices``, ``kept_inputs``,
    ``transfers`` — and ``out_types``, the type ``jax.typeof`` gives each result: its traced
    type, over the mesh of the NamedSharding it comes back on (None where its sharding is
    not known); ``inside``, the (path, sharding) of every sharding inside
    the body that joined the device assignment (PROG-2); ``placed_by``, per output, the
    path of the equation that placed it (PROG-4; None: the compiler); ``constants``, the
    (path, sharding) of each hoisted constant (CONST-1, CONST-2; UNSPECIFIED: left open);
    ``ref_updates``, the (path, sharding) of each ref whose new value comes back aliased
    to it (REF-1, REF-2); ``decided``, per equation walked, (path, record): a shard_map's
    manual axes and per-shard types, a collective's result type and replica groups, a
    constraint's or a jit's shardings (:mod:`shardlaw.spec.program.shardmap`); ``until``, the last
    stage asked about (``"trace"``: what ``jax.jit(f).trace(*args)`` decides — no device
    assignment, and ``out_shardings`` as the jit's options give them; over an abstract
    mesh, where no later stage can be asked, a result they leave open as PROP-7 predicts
    it, with ``undetermined`` and ``collectives``). Refused: ``rule``,
    ``error_type``, ``jax_error``, ``message``, ``path`` (an argument's, a result's, or an
    equation's: ``body[0].jit.body[1]``), ``stage`` and ``facts``. Both: ``trace``.
    Accepted, ``opaque`` lists the (path, primitive) of each equation whose primitive the
    primitive table has no entry for: nothing of its own was checked, and its sharding is
    not propagated; ``undetermined``, the (path, reason) of each result left to the
    compiler whose placement propagation does not determine (PROP-1 to PROP-5);
    ``collectives``, what the step communicates on the CPU backend (COLL-1 to COLL-5: a
    :class:`~shardlaw.spec.program.collectives.Communication`, its collectives and their
    bytes per device, incomplete where it says why).
    """

    accepted: bool
    trace: tuple[str, ...] = ()
    in_paths: tuple[str, ...] = ()
    in_shardings: tuple = ()
    out_paths: tuple[str, ...] = ()
    out_shardings: tuple = ()
    out_committed: tuple[bool, ...] = ()
    out_types: tuple = ()
    device_assignment: Any = None
    num_devices: int = 0
    kept_inputs: tuple[int, ...] = ()
    transfers: tuple[str, ...] = ()
    inside: tuple[tuple[str, Any], ...] = ()
    placed_by: tuple[str | None, ...] = ()
    constants: tuple[tuple[str, Any], ...] = ()
    ref_updates: tuple[tuple[str, Any], ...] = ()
    decided: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), compare=False)
    until: str = "run"
    rule: str | None = None
    error_type: str | None = None
    jax_error: str | None = None
    message: str | None = None
    path: str | None = None
    stage: str | None = None
    facts: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), compare=False, repr=False)
    opaque: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False,
                                                            repr=False)
    undetermined: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False,
                                                                  repr=False)
    collectives: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        if not self.accepted:
            return f"rejected by {self.rule} ({self.error_type}) at {self.stage}: {self.message}"
        lines = ["traced (no device assignment before lowering)" if self.until == "trace"
                 else f"accepted on {self.num_devices} device(s)"
                 + (f" {list(self.device_assignment)}" if self.device_assignment else "")]
        for path, s in zip(self.in_paths, self.in_shardings):
            lines.append(f"  in     {path}: {s!r}")
        for path, s in self.inside:
            lines.append(f"  inside {path}: {s!r}")
        for path, s in self.constants:
            lines.append(f"  const  {path}: {s!r} (hoisted)")
        for path, s in self.ref_updates:
            lines.append(f"  ref    {path}: {s!r} (updated in place)")
        for path, record in self.decided:
            lines.append(f"  eqn    {path}: {record}")
        for path, primitive in self.opaque:
            lines.append(f"  opaque {path}: {primitive} (not in the primitive table: "
                         f"nothing of its own checked)")
        count = len(self.out_paths)
        for path, s, c, by in zip(self.out_paths, self.out_shardings,
                                  self.out_committed or (True,) * count,
                                  self.placed_by or (None,) * count):
            lines.append(f"  out    {path}: {s!r}" + ("" if c else " (uncommitted)")
                         + (f", placed by {by}" if by else ""))
        for path, why in self.undetermined:
            lines.append(f"  open   {path}: {why}")
        for c in self.collectives or ():
            lines.append(f"  comm   {c}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- the top call

def _options_tree(shardings: tuple) -> Any:
    """A jit option's tree: UNSPECIFIED when nothing is given, else one leaf per entry."""
    if all(s is UNSPECIFIED for s in shardings):
        return UNSPECIFIED
    return tuple(None if s is UNSPECIFIED else s for s in shardings)


def program_call(program: Program, live: Live | None = None) -> Call:
    """The top-level jit call of ``program`` as a :class:`~shardlaw.spec.Call`: its inputs as
    the arguments (one positional argument each), its outputs as the results, its options,
    context mesh and compiler's choices, and the inputs its body uses (dead-code
    elimination, :func:`~shardlaw.spec.program.lowering.live_parts`).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> x = Value.placed((8, 8), NamedSharding(mesh, P("x")))
    >>> call = program_call(Program((x, Value.numpy((4,))), outputs=(0,)))
    >>> call.args, call.uses
    ((<committed float32[8x8] on NamedSharding(Mesh({'x': 2, 'y': 4}), P('x'))>, <numpy float32[4]>), (True, False))

    ``live``: ``live_parts(program)``, when the caller has it.
    """
    check_program(isinstance(program, Program), "the program asked about", "a Program",
                  program)
    types = program.value_types
    outputs = tuple(Out(types[n].shape, types[n].dtype, None, types[n].mesh,
                        None if types[n].mesh is None else
                        P() if types[n].spec is None else types[n].spec)
                    for n in program.outputs)
    options = JitOptions(
        in_shardings=_options_tree(program.in_shardings),
        out_shardings=_options_tree(program.out_shardings),
        donate_argnums=tuple(i for i, d in enumerate(program.donated) if d),
        keep_unused=program.keep_unused)
    uses = (live if live is not None else live_parts(program)).inputs
    return Call(args=tuple(v.as_arg() for v in program.inputs), outputs=outputs,
                options=options, context_mesh=program.context_mesh, uses=uses,
                devices=program.devices,
                compiler=program.compiler, compiler_in=program.compiler_in)


# --------------------------------------------------------------------------- a bound call

# A program vmap gave (``Program.checked`` False) is the batched jit equation that JAX's
# batching rule binds on the batched arguments: no ``jax.jit(...)`` and no call of a jitted
# function checks its options (JIT-1, JIT-2) or fits its shardings to the batched values
# (FIT-1); JAX divides each kept input and each result by its sharding first when it
# writes the program out (FIT-3), so a batch the spmd axes split unevenly is traced, and
# refused when lowered.

def _unbound(n: Any) -> Any:
    """The call without the shardings of jit's options, as the checks made at the call of
    a jitted function see a call that vmap binds: none of them."""
    options = dataclasses.replace(n.call.options, in_shardings=UNSPECIFIED,
                                  out_shardings=UNSPECIFIED)
    return dataclasses.replace(n.call, options=options).normal


def _stage_call(n: Any, checked: bool) -> Any:
    """``stage_call``; for a call vmap binds, without FIT-1: each input then takes the
    sharding jit's options give it (JIT-3, TREE-1) unfitted."""
    if checked:
        return stage_call(n)
    called = stage_call(_unbound(n))
    _, jit_in, out_tree = jit_shardings(n, called.context)
    inputs = tuple(dataclasses.replace(item, jit_sharding=s)
                   for item, s in zip(called.inputs, jit_in))
    return dataclasses.replace(called, inputs=inputs, out_tree=out_tree)


def _stage_trace(n: Any, called: Any, checked: bool) -> Any:
    """``stage_trace``; for a call vmap binds, without FIT-1: each result then takes the
    sharding jit's options give it (TREE-2) unfitted."""
    if checked:
        return stage_trace(n, called)
    traced = stage_trace(_unbound(n), dataclasses.replace(called, out_tree=UNSPECIFIED))
    given = match_out_shardings(called.out_tree, n.results)
    return dataclasses.replace(traced, out_shardings=tuple(
        UNSPECIFIED if s is None else s for s in given))


def _check_written_out(n: Any, called: Any, traced: Any, lowered: Any) -> None:
    """FIT-3 for a call vmap binds: each kept input, then each result, divides into the
    shards of the sharding lowering hands it (an abstract input's own was checked in
    ``stage_lower``)."""
    with staged("lower"):
        for i in lowered.kept:
            item = called.inputs[i]
            if item.arg.kind != "abstract":
                check_lowered_fit(lowered.final[i], item.arg.shape, item.path, "argument")
        for (path, out), s in zip(n.flat_out, traced.out_shardings):
            check_lowered_fit(s, out.shape, path, "result")


# --------------------------------------------------------------------------- tracing

def trace_body(program: Program, context: Any = None, prefix: str = "",
               decided: list | None = None, seen: dict | None = None, start: int = 0,
               stop: int | None = None) -> list:
    """Each equation's own checks, in the order JAX traces them (stage ``trace``): an inner
    jit's in_shardings fit its operands (FIT-1) before its body is traced and its
    out_shardings fit its results after; a constraint's dimensions left to the compiler,
    its rank and its axes (WSC-6, WSC-4, WSC-5); a device_put's sharding places its operand
    (ARG-4); a shard_map's SMAP rules and its body's collectives
    (:func:`~shardlaw.spec.program.shardmap.trace_shard_map`). Each equation's record of
    what it decided is appended to ``decided`` as (path, record); returns ``decided``.

    An equation's checks depend on its form (:attr:`Equation.form`: all but its operands'
    numbers), its operands' types and the context mesh alone: one like an equation already
    traced in this walk (``seen``; a layer repeated) passed them already, and its records
    are those of the first, at its path. ``start`` and ``stop`` bound the equations walked
    (vmap checks a function's equations one at a time, each before it batches it)."""
    context = context if isinstance(context, Mesh) else None
    decided = [] if decided is None else decided
    seen = {} if seen is None else seen
    with staged("trace"):
        for k, eq in enumerate(program.equations[start:stop], start):
            if entry_of(eq).tracing is None:   # a primitive outside a shard_map's body:
                continue                         # no checks of its own
            path = equation_path(prefix, k)
            operands = tuple(program.value_types[n] for n in eq.operands)
            _trace_once(seen, eq, operands, context, path, decided)
    return decided


def _trace_once(seen: dict, eq: Any, operands: tuple[Value, ...], context: Mesh | None,
                path: str, decided: list) -> None:
    """:func:`_trace_equation`, unless an equation of the same form
    (:attr:`Equation.form`: all but its operands' numbers) over operands of equal types was
    traced before in the same context: then its records again, at ``path``. Only the kinds
    with checks of their own are remembered; one that cannot be hashed (a parameter JAX
    would not hash either) is traced every time."""
    if entry_of(eq).tracing is None:
        _trace_equation(eq, operands, context, path, decided, seen)
        return
    key = (eq.form, operands, context)
    try:
        records = seen.get(key)
    except TypeError:
        _trace_equation(eq, operands, context, path, decided, seen)
        return
    if records is None:
        # the records are read back only when the form comes again: kept as where they
        # lie (later records are appended, or inserted after them, never among them)
        start = len(decided)
        _trace_equation(eq, operands, context, path, decided, seen)
        seen[key] = (decided, start, len(decided), len(path))
    else:
        first, start, end, cut = records
        decided.extend((path + where[cut:], record) for where, record in first[start:end])


def _trace_equation(eq: Any, operands: tuple[Value, ...], context: Mesh | None, path: str,
                    decided: list, seen: dict) -> None:
    """One equation's checks where tracing meets them (:func:`trace_body`)."""
    record = shardings_decision(eq)
    if record is not None:
        decided.append((path, record))
    trace = TRACING.of(entry_of(eq))
    if trace is not None:
        trace(eq, operands, context, path, decided, seen)


@TRACING.register("shard_map")
def _trace_shard_map(eq: ShardMap, operands: tuple[Value, ...], context: Mesh | None,
                     path: str, decided: list, seen: dict) -> None:
    """A shard_map's SMAP rules and its body's collectives, then what its body closed over
    (REF-7)."""
    if eq.checked and context is not None:   # the mesh it is given, first (SMAP-30)
        with staged("trace"), located(path):
            check_context_mesh(eq.mesh, context, path)
    trace_shard_map(eq, operands, path, decided)
    with staged("trace"):   # what the body closed over, after it is traced (REF-7)
        check_no_closed_over_refs(eq, path)


@TRACING.register("jit")
def _trace_jit(eq: Jit, operands: tuple[Value, ...], context: Mesh | None, path: str,
               decided: list, seen: dict) -> None:
    """An inner jit's in_shardings fit its operands (FIT-1) before its body is traced, its
    out_shardings its results after."""
    body = eq.body
    for i, (s, value) in enumerate(zip(body.in_shardings, operands)):
        if eq.checked:
            check_fits(s, value.shape, f"{path}.jit.in_shardings[{i}]")
    trace_body(body, body.context_mesh or context, f"{path}.jit.", decided, seen)
    for i, (s, value) in enumerate(zip(body.out_shardings, eq.results or ())):
        if eq.checked:
            check_fits(s, value.shape, f"{path}.jit.out_shardings[{i}]")


@TRACING.register("sharding_constraint")
def _trace_constraint_equation(eq: ShardingConstraint, operands: tuple[Value, ...],
                               context: Mesh | None, path: str, decided: list, seen: dict
                               ) -> None:
    _trace_constraint(eq, operands[0], context, path)


@TRACING.register("reshard")
def _trace_reshard_equation(eq: Reshard, operands: tuple[Value, ...], context: Mesh | None,
                            path: str, decided: list, seen: dict) -> None:
    _trace_reshard(eq, operands[0].shape, path)


@TRACING.register("device_put")
def _trace_device_put(eq: DevicePut, operands: tuple[Value, ...], context: Mesh | None,
                      path: str, decided: list, seen: dict) -> None:
    """A device_put's concrete targets place its operands (ARG-4); one a batching rule
    staged is not checked."""
    if not eq.checked:
        return
    for target, value in zip(eq.targets, operands):
        if getattr(target, "is_concrete", False):
            # a target split over Explicit axes types the value first, as device_put
            # does outside jit (ARG-4)
            via = "device_put" if type_spec(target) is not None else "jit"
            with located(path):
                place_on_devices(target, value.shape, via, boxes=False)


def _trace_constraint(eq: ShardingConstraint, operand: Value, context: Mesh | None,
                      path: str) -> None:
    value = Arg.numpy(operand.shape)
    with located(path):
        if eq.checked:   # with_sharding_constraint's own checks; a bound one skips them
            unconstrained_dims(eq.sharding, path)
            check_constraint_fits(eq.sharding, value, path)
            check_constraint_axes(eq.sharding, value, context, path)
        check_split_kept(eq.sharding, operand.spec, path, operand.shape)   # WSC-10


def _trace_reshard(eq: Reshard, shape: tuple[int, ...], path: str) -> None:
    """A reshard types its operand on its sharding as device_put does (ARG-4): the split
    divides it. The sharding is over an abstract mesh; a mesh of its shape over the first
    devices is divided alike. Entries past the operand's rank that split nothing are
    dropped first, as JAX's reshard reads its sharding for the operand's rank."""
    spec = eq.sharding.spec
    if len(spec) > len(shape) and all(e is None for e in tuple(spec)[len(shape):]):
        spec = PartitionSpec(*tuple(spec)[:len(shape)], unreduced=spec.unreduced,
                             reduced=spec.reduced)
    with located(path):
        place_on_devices(_concrete(eq.sharding.mesh, spec), shape, "device_put", boxes=False)


def _concrete(mesh: Any, spec: PartitionSpec) -> NamedSharding:
    """A NamedSharding of ``spec`` over ``mesh``, or over a mesh of its shape on the first
    devices when it is abstract (what divides and tiles alike)."""
    if isinstance(mesh, AbstractMesh):
        mesh = Mesh.iota(mesh.axis_sizes, mesh.axis_names, mesh.axis_types)
    return NamedSharding(mesh, spec)


def _lower_body(program: Program, assignment: Any, live: Live) -> None:
    """WSC-8 for every live GSPMDSharding constraint and WSC-11 for every live
    NamedSharding constraint on a reduced value, then what lowering checks in every live
    shard_map (stage ``lower``; each result's Explicit mesh against the device assignment,
    AD-9, is the jit pipeline's ``stage_lower``); then each live reshard's tiling against
    the ``assignment`` (EXE-3, which XLA's verifier decides when compiling). ``live``: what
    lowering keeps of the body (:func:`~shardlaw.spec.program.lowering.lowered_live`)."""
    for path, eq, _ in _live_constraints(program, live, "", ("custom_lin",)):
        with located(path):   # a custom_vjp's tangent has no lowering (LOOP-3)
            check_custom_lin_transposed(eq.name, path, "lower")
    found = _live_constraints(program, live, "", ("sharding_constraint", "reshard"))
    passed = set()   # the operands' splits WSC-11 passed: it reads nothing else
    with staged("lower"):
        for path, eq, operand in found:
            if entry_of(eq).name != "sharding_constraint" or (
                    isinstance(eq.sharding, NamedSharding) and operand.spec is None
                    and None in passed):
                continue   # nothing left to check: an unsplit operand WSC-11 passed
            with located(path):
                if isinstance(eq.sharding, GSPMDSharding):
                    check_constraint_lowers(eq.sharding, path)
                if isinstance(eq.sharding, NamedSharding) and operand.spec not in passed:
                    check_operand_not_reduced(operand.spec, path)
                    passed.add(operand.spec)
                if isinstance(eq.sharding, NamedSharding) and operand.spec is not None:
                    merged_constraint_spec(eq.sharding, operand.spec, path)   # WSC-12
    lower_shard_maps(program, live)
    verified = set()   # the (sharding, rank) of each reshard verified: a layer repeats them
    for path, eq, operand in found if len(assignment) > 1 else ():
        if entry_of(eq).name != "reshard" or (eq.sharding, len(operand.shape)) in verified:
            continue
        verified.add((eq.sharding, len(operand.shape)))
        # a reshard's sharding is handed to the compiler over the program's devices: XLA's
        # verifier refuses a tiling of another number of devices (EXE-3; a program on one
        # device keeps no sharding to verify)
        tiles = to_hlo(_concrete(eq.sharding.mesh, eq.sharding.spec), len(operand.shape))
        with located(path):
            check_tile_count(GSPMDSharding(assignment, tiles))


def _live_constraints(program: Program, live: Any, prefix: str,
                      kind: tuple[str, ...] = ("sharding_constraint",)
                      ) -> list[tuple[str, Any, Value]]:
    """(path, equation, its operand's type) of every live constraint (or equation whose
    entry in the primitive table is named in ``kind``), bodies included, in the order of
    the body."""
    out = []
    for k, eq in enumerate(program.equations):
        if not live.equations[k]:
            continue
        if eq.kind in kind:   # (a kind of equation, by its entry's name)
            out.append((equation_path(prefix, k), eq, program.value_types[eq.operands[0]]))
        elif eq.body is not None:
            out += _live_constraints(eq.body, live.bodies[k],
                                     f"{equation_path(prefix, k)}.{eq.kind}.", kind)
    return out


# --------------------------------------------------------------------------- the answer

UNTIL = ("trace", "run")


def explain_program(program: Program, *, until: str = "run") -> ProgramVerdict:
    """What ``jax.jit`` (jax 0.10.2) does with ``program``: a :class:`ProgramVerdict`;
    with ``until="trace"``, what tracing it decides (``jax.jit(f).trace(*args)``), which
    needs no devices: a program over abstract meshes, of any size, is answered so.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> x = Value.placed((8, 8), NamedSharding(mesh, P("x")))
    >>> def constrained(target):
    ...     return Program((x,), (ShardingConstraint((0,), sharding=target),), outputs=(1,))
    >>> verdict = explain_program(constrained(NamedSharding(mesh, P("y"))))
    >>> verdict.out_shardings, verdict.placed_by
    ((NamedSharding(Mesh({'x': 2, 'y': 4}), P('y')),), ('body[0]',))
    >>> reversed_mesh = Mesh((2, 4), ("x", "y"), range(7, -1, -1))
    >>> refused = explain_program(constrained(NamedSharding(reversed_mesh, P("y"))))
    >>> refused.rule, refused.stage, refused.path
    ('DA-1', 'lower', 'body[0]')
    """
    check_program(isinstance(program, Program), "the program asked about", "a Program",
                  program)
    check_program(until in UNTIL, "the last stage asked about (until)", f"one of {UNTIL}",
                  until)
    used = program.derived_once("live parts", lambda: live_parts(program))   # (shared)
    live = lowered_live(program) if program.keep_unused else used   # what DCE leaves
    try:  # the description, read before any of jit's rules (CALL-0; outside the trace)
        call = program_call(program, used)
    except Rejection as error:
        return _refused(error, [])
    held = _Held(program, call)
    with tracing() as trace, remembering():
        try:
            call = held.inputs_added()
            n = call.normal
            if program.checked:
                stage_jit(n)
            called = _stage_call(n, program.checked)
            decided = trace_body(program, program.context_mesh)
            inside = inside_shardings(program, live)
            n = dataclasses.replace(call, inside=inside).normal
            traced = _stage_trace(n, called, program.checked)
            if until == "trace":   # the held values are inputs from lowering on
                return _traced(program, held.call.normal, traced, inside, trace, decided)
            # SMAP-12 for the shard_maps' in specs as JAX lists the shardings inside
            listing = functools.partial(check_listed_in_specs, program, live)
            held.check_assignment(inside, listing)
            lowered = stage_lower(n, called, traced, listing)
            if not program.checked:
                _check_written_out(n, called, traced, lowered)
            _lower_body(program, lowered.assignment, live)
            _check_donations(program, held, traced, lowered)
            shardings = [*(lowered.resolved[i] for i in lowered.kept), *traced.out_shardings,
                         *(s.sharding for s in inside)]   # the module's, in its order
            placed = placed_results(program, shardings)
            n = dataclasses.replace(n.call, compiler=_choices(program, placed, shardings)).normal
            _verify_branches(program)
            compiled = stage_compile(n, called, traced, lowered)
            dispatched = stage_dispatch(n, called, lowered, compiled)
        except Rejection as error:
            return _refused(error, trace, held.labels)
    return _accepted(program, trace, n, (traced, lowered, compiled, dispatched), inside, placed,
                     held, decided)


def _verify_branches(program: Program) -> None:
    """XLA's verifier as compiling starts: a cond's branches on one written sharding
    (PROP-24), asked outside jit's trace as propagation's rules are."""
    with tracing():
        check_branch_shardings(program)


def _accepted(program: Program, trace: list[str], n: Any, stages: tuple, inside: tuple,
              placed: tuple, held: "_Held", decided: list) -> ProgramVerdict:
    """The verdict of a program every stage accepted."""
    traced, lowered, compiled, dispatched = stages
    out_types = tuple(_result_type(program.value_types[number], s, given) for number, s, given
                      in zip(program.outputs, compiled.out_shardings, traced.out_shardings))
    return ProgramVerdict(
        True, tuple(dict.fromkeys(trace)), in_paths=held.relabeled(n.in_paths),
        in_shardings=lowered.final, out_paths=n.out_paths,
        out_shardings=compiled.out_shardings,
        out_committed=(lowered.committed,) * len(n.flat_out), out_types=out_types,
        device_assignment=DeviceIds(lowered.assignment), num_devices=lowered.count,
        kept_inputs=lowered.kept, transfers=held.relabeled(dispatched.transfers),
        inside=tuple((s.path, s.sharding) for s in inside),
        placed_by=tuple(by for _, by in placed), constants=held.hoisted,
        ref_updates=held.updates, decided=tuple(decided), opaque=opaque_equations(program),
        undetermined=undetermined_results(program, n.out_paths, compiled.out_shardings)
        + open_donations(program, _donated_results(program, traced), lowered.count,
                         _kept(program)) + open_branch_shardings(program),
        collectives=_communication(program))


def _donated_results(program: Program, traced: Any) -> tuple:
    """Each result's (type, sharding as lowering takes it), as the donation rules read them."""
    return tuple(zip((program.value_types[o] for o in program.outputs), traced.out_shardings))


def _check_donations(program: Program, held: "_Held", traced: Any, lowered: Any) -> None:
    """REF-3 for donated refs, then PROG-11 for donated inputs left to the compiler."""
    results = _donated_results(program, traced)
    held.check_donation(results, lowered.count)
    if any(program.donated[i] for i in left_to_compiler(program)):
        check_aliased_donations(program, results, lowered.count, _kept(program))


def _kept(program: Program) -> tuple[int, ...]:
    """The inputs the executable keeps (all of them under keep_unused)."""
    used = live_parts(program, everything=program.keep_unused).inputs
    return tuple(i for i, u in enumerate(used) if u or program.keep_unused)


def _communication(program: Program) -> Any:
    """What the step communicates (COLL-4), outside the verdict's trace: the rules it
    applies are the spec's reading of the partitioner, not a step of JAX's jit."""
    with tracing():
        return predicted_collectives(program)


def _traced(program: Program, n: Any, traced: Any, inside: tuple,
            trace: list[str], decided: list) -> ProgramVerdict:
    """The answer of ``jax.jit(f).trace(*args)``: the results' types and the shardings the
    jit's options give them; no device assignment yet."""
    types = program.value_types
    with tracing():   # over an abstract mesh, what the compiler would place (PROP-7)
        predicted = traced_placements(program, traced.out_shardings, n.out_paths)
    out, open_ = predicted or (traced.out_shardings, ())
    return ProgramVerdict(
        True, tuple(dict.fromkeys(trace)), in_paths=n.in_paths,
        in_shardings=tuple(v.sharding for v in program.inputs), out_paths=n.out_paths,
        out_shardings=out, out_types=tuple(types[k] for k in program.outputs),
        inside=tuple((s.path, s.sharding) for s in inside), until="trace",
        decided=tuple(decided), opaque=opaque_equations(program), undetermined=open_,
        collectives=None if predicted is None else _communication(program))


def opaque_equations(program: Program, prefix: str = "", seen: dict | None = None
                     ) -> tuple[tuple[str, str], ...]:
    """(path, primitive) of every equation of ``program``, bodies included, whose primitive
    the primitive table has no entry for (:func:`~shardlaw.spec.program.primitives.entry_of`
    answers :attr:`~shardlaw.spec.program.primitives.Kind.OPAQUE`); ``seen``: what each body
    met so far holds, by its identity (a step's layers repeat one body)."""
    seen = {} if seen is None else seen
    known = seen.get(id(program))
    if known is not None and known[0] is program:
        return tuple((prefix + path, name) for path, name in known[1])
    out: list[tuple[str, str]] = []
    for k, eq in enumerate(program.equations):
        entry = entry_of(eq)
        if entry.kind is Kind.OPAQUE:
            out.append((equation_path("", k), entry.name))
        if entry.bodies:
            out += opaque_equations(eq.body, f"{equation_path('', k)}.{eq.kind}.", seen)
    seen[id(program)] = (program, tuple(out))
    return tuple((prefix + path, name) for path, name in out)


def _choices(program: Program, placed: tuple, shardings: list) -> tuple | None:
    """Per output: the placement PROG-4 decides, else the compiler's choice the description
    gives, else the one propagation predicts (PROP-5; over several meshes PROP-8; None: not
    known); ``shardings``: the device assignment's, in the module's order."""
    given = program.compiler or (None,) * len(program.outputs)
    predicted = predicted_choices(program)   # PROP-5, where propagation determines it
    crossed = crossmesh_choices(program, shardings)
    choices = tuple(hlo if hlo is not None else choice if choice is not None else
                    guessed if guessed is not None else across
                    for (hlo, _), choice, guessed, across in zip(placed, given, predicted,
                                                                 crossed))
    return None if all(c is None for c in choices) else choices


def _result_type(value: Value, sharding: Any, given: Any) -> Value | None:
    """The type ``jax.typeof`` gives a result: its traced type, over the mesh of the
    NamedSharding it comes back on (JAX's ``update_aval_with_sharding``); on another
    sharding, as lowering typed it: over the mesh of a NamedSharding out sharding ``given``
    (PROG-6's placements that do not read over that mesh)."""
    if sharding is UNSPECIFIED:
        return None
    if not isinstance(sharding, NamedSharding):
        if not isinstance(given, NamedSharding):
            return value
        sharding = given
    return Value(value.shape, value.dtype, value.weak_type, sharding.mesh.abstract,
                 spec=type_spec(sharding))


def _refused(error: Rejection, trace: list[str],
             labels: dict[int, tuple[str, str]] | None = None) -> ProgramVerdict:
    failure = error.failure
    return ProgramVerdict(False, tuple(dict.fromkeys(trace)), rule=failure.rule,
                          error_type=failure.error_type.__name__, jax_error=failure.jax_error,
                          message=_relabel(str(error), labels),
                          path=_relabel(error.path, labels), stage=error.stage,
                          facts=tuple(failure.facts().items()))


# --------------------------------------------------------------------------- held values

def _with_held(call: Call, front: tuple, back: tuple, chosen: tuple | None = None) -> Call:
    """The top-level call with held values as inputs, ``front`` before the arguments and
    ``back`` after them (CONST-1, REF-1): always used, never donated, their shardings
    open to jit's options; ``chosen``: the compiler's placements of the ``front`` ones."""
    if not front and not back:
        return call
    f, b = len(front), len(back)
    options = call.options
    in_shardings = options.in_shardings
    if in_shardings is not UNSPECIFIED:
        in_shardings = (*(None,) * f, *in_shardings, *(None,) * b)
    options = dataclasses.replace(options, in_shardings=in_shardings, donate_argnums=tuple(
        i + f for i in options.donate_argnums))
    args = (*(v.as_arg() for _, _, v in front), *call.args, *(v.as_arg() for _, _, v in back))
    return dataclasses.replace(
        call, args=args, options=options,
        uses=(*(True,) * f, *call.uses, *(True,) * b) if call.uses is not None else None,
        compiler_in=None if call.compiler_in is None and chosen is None else (
            *(chosen or (None,) * f)[:f], *((None,) * f)[len(chosen or ()):],
            *(call.compiler_in or (None,) * len(call.args)), *(None,) * b))


class _Held:
    """The closed-over values a program adds to its top-level call as inputs (CONST-1,
    REF-1), and the names its refusals and paths give them."""

    def __init__(self, program: Program, call: Call) -> None:
        self.program, self.call, self.labels = program, call, None
        self.front: tuple = ()
        self.back: tuple = ()
        self.hoisted: tuple = ()
        self.updates: tuple = ()

    def inputs_added(self) -> Call:
        """The call with the held values in the executable's order of inputs (the
        constants, the arguments, the refs)."""
        self.front, self.back, self.hoisted, self.updates = held_inputs(self.program)
        self.labels = _labels(self.program, self.front, self.back)
        return _with_held(self.call, self.front, self.back, self.program.compiler_consts)

    def check_assignment(self, inside: tuple, listing: Any = None) -> None:
        """DA-1 over the inputs in the order JAX checks them — the arguments, the
        closed-over refs, the hoisted constants — so a conflict is refused where JAX
        refuses it (only where a hoisted constant has a sharding of its own); ``listing``
        as :func:`~shardlaw.spec.jit.pipeline.stage_lower` takes it. Lowering discharges
        the refs before it: a shard_map's ref operands first (REF-8)."""
        if self.updates:
            with staged("lower"):
                check_shard_map_ref_writes(self.program, lowered_live(self.program))
        if all(s is UNSPECIFIED for _, s in self.hoisted):
            return
        held = (*self.back, *self.front)
        self.labels = _labels(self.program, (), held)
        n = dataclasses.replace(_with_held(self.call, (), held), inside=inside).normal
        called = _stage_call(n, self.program.checked)
        stage_lower(n, called, _stage_trace(n, called, self.program.checked), listing)
        self.labels = _labels(self.program, self.front, self.back)

    def check_donation(self, results: tuple, devices: int) -> None:
        """REF-3 for a program with ref arguments: ``results`` its results' types and
        shardings, ``devices`` the device assignment's size."""
        if any(self.program.refs):
            program = self.program
            used = live_parts(program, everything=program.keep_unused).inputs
            kept = tuple(i for i, u in enumerate(used) if u or program.keep_unused)
            check_refs_not_donated(program, self.updates, results, devices, kept)

    def relabeled(self, paths: tuple) -> tuple:
        return tuple(_relabel(p, self.labels) for p in paths)


def _labels(program: Program, front: tuple, back: tuple) -> dict[int, tuple[str, str]]:
    """The call's argument index -> the path and the words of the input it is."""
    first = len(front) + len(program.inputs)
    labels = {k: (path, what) for k, (path, what, _) in enumerate(front)}
    paths = program.input_paths or tuple(f"args[{i}]" for i in range(len(program.inputs)))
    labels.update({len(front) + i: (path, "") for i, path in enumerate(paths)})
    labels.update({first + k: (path, what) for k, (path, what, _) in enumerate(back)})
    return labels


_ARGUMENT = re.compile(r"(argument )?args\[(\d+)\]( \((?:un)?committed\))?")


def _relabel(text: str | None, labels: dict[int, tuple[str, str]] | None) -> str | None:
    """``text`` with each input named by its own path: a held value by ``constants[0]``
    and its words, an argument by its place among the program's inputs."""
    if not labels or text is None:
        return text

    def named(match: re.Match) -> str:
        path, what = labels.get(int(match.group(2)), (None, ""))
        if path is None:
            return match.group(0)
        if what and match.group(1):
            return f"{what} {path}"
        return f"{match.group(1) or ''}{path}{match.group(3) or ''}"

    return _ARGUMENT.sub(named, text)
