"""``jax.vmap`` of a whole program, as a rewrite of its :class:`~shardlaw.spec.program.description.Program`.

:func:`vmap_program` answers what ``jax.vmap(jax.jit(f, ...), in_axes, out_axes,
axis_size=..., spmd_axis_name=...)`` amounts to when called on batched arguments, as a
Program that :func:`~shardlaw.spec.program.explain.explain_program` answers. The program
given describes the jit call on one example: its inputs are the arguments of one example
(their shardings and committedness as the user holds them). The batched arguments are
those, each mapped input with a dimension of ``axis_size`` inserted at its axis, placed as
the example is with that dimension unsplit (a NamedSharding's spec gains ``None`` there; a
SingleDeviceSharding stays; a numpy array stays a numpy array). A value's type keeps its
split over Explicit axes (``Value.spec``) through the rewrite: unsplit along an inserted
batch dimension, permuted by a ``transpose``, as JAX's batched types are. ``axis_size`` is the batch
size and must be given: the description of one example does not hold it.

vmap traces the jit call on one example's types first (the rules :func:`trace_body`
applies, and the jit's shardings against the example's shapes, FIT-1), then batches its
body equation by equation, the way JAX 0.10.2's batching rules do. A Python function
vmapped without a jit (``jitted=False``: ``jax.vmap(f)``, ``f`` not one jit call) is not
traced on one example first: JAX traces it under vmap, each equation in program order, so
each top-level equation's own checks on the example's types (a body it traces, a
constraint's or an inner jit's shardings against the example) are made just before it is
batched, by every vmap of the nest, and the bodies of that equation (an inner jit's, a
loop's, a cond's branches) were traced whole on the example before. JAX types each
equation a batching rule binds as it binds it, so wherever batching meets a refusal, the
batched equations staged before it are checked first (:func:`check_staged`): a refusal is
the first in program order, whichever kind it is.

* an equation none of whose operands is batched stays as it is (batchedness is tracked
  per value: an input mapped with ``None`` stays unbatched, and so does all that follows
  from it alone), except that vmap walks a jit's body and checks a shard_map's specs
  whatever their operands;
* ``jit``: its body batched first, then its ``in_shardings`` and ``out_shardings`` at the
  batch axis of each operand and result (:func:`~shardlaw.spec.batch_sharding`: BAT-1 to
  BAT-7); the batched equation is marked unchecked, for JAX checks a jit's shardings
  against its values (FIT-1) only when the jitted function is traced, so a batch that the
  spmd axes split unevenly passes;
* ``sharding_constraint``: the constraint batched (WSC-7); on a concrete mesh with
  ``spmd_axis_name`` and no dimension left to the compiler JAX reads the batched spec back
  from its HLO sharding, so it holds no trailing ``None``;
* ``device_put``: its targets unchanged, applied to the batched operand (which a target may
  now split along the batch dimension, unevenly too: JAX checks a target only when
  ``jax.device_put`` is called, so the batched equation is marked unchecked); a target
  split over Explicit axes types the batched value as it reads, and that split must divide
  it (ARG-4 while vmap traces);
* ``reshard``: ``None`` inserted in its spec at the batch axis;
* ``shard_map``: each batched operand's and result's spec gains the batch dimension
  (unsplit, or split over ``spmd_axis_name``, which its specs may not use: PBAT-1, and
  which under check_vma must be manual in it: PBAT-2); the body is batched over the
  per-shard batch (the batch size divided by the spmd axes' sizes, rounded down), and
  under check_vma a broadcasting operation's operands are cast to vary along the spmd
  axes, those of the vmaps this one is inside included (PBAT-3). The batched equation is
  marked unchecked (``ShardMap.checked``): JAX checks a shard_map's specs against its
  operands when the user calls it, not when vmap binds it, so a batch the spmd axes split
  unevenly is traced (its results put together from the rounded-down shards) and refused
  by the compiler at lower (SMAP-8);
* any other primitive (:class:`Opaque`): elementwise primitives and the reductions keep
  their operands' batch axis (an unbatched operand may be a scalar), their results typed
  from the batched operands' split (which a batched device_put may have put on the batch
  dimension), a reduction's less the reduced dimensions; ``all_gather``,
  ``psum_scatter`` and ``all_to_all`` move their dimension parameters past it; ``transpose`` and ``broadcast_in_dim`` put it first, a
  ``broadcast_in_dim`` moving it there with a ``transpose`` first. Others are refused
  (PROG-0): the spec does not know their batching.

Each equation's rule is its entry's in the primitive table
(:mod:`~shardlaw.spec.program.primitives`), registered in
:mod:`~shardlaw.spec.program.batching_rules`.

After the call vmap moves each result's batch axis to ``out_axes``: a ``transpose`` for a
batched result whose axis differs, a ``broadcast_in_dim`` for an unbatched result (a
mapped result with ``out_axes`` None is refused, BAT-0). Then the vmapped function is not
one jit call: the answer is the program ``describe_program`` reads from it, ``jax.jit`` of
the function, whose body is the batched jit equation followed by those moves. A program of
that form (no options, one jit equation over its inputs followed by moves only) is read
back as the eager function it describes when vmapped again, so vmap_program composes.
JAX traces nested vmaps together, though: :func:`nested_vmap_program` batches the jit by
each vmap before any vmap's moves (a refusal of the jit under an outer vmap comes before
the inner ``out_axes``'s), and reads each vmap's moves from a result's type as that vmap
sees it (a broadcast is bound with that type, which the vmaps outside it keep, unsplit
along their batch dimensions).

The answer is marked unchecked (``Program.checked``): vmapped again, its example's checks
are not made again (JAX made them on the first example, and the batched shardings may now
split a batch unevenly, which only running the call refuses): ``explain_program`` checks
neither its options nor its shardings' fit at the call, and divides each kept input and
each result when it is lowered (FIT-3), as JAX does with the call its batching rule binds.

A refusal is the rule's :class:`~shardlaw.spec.core.rules.Rejection` at stage ``trace``,
located at the equation (``body[3]``, ``body[0].jit.body[1]``,
``body[0].jit.in_shardings[0]``; the top-level jit's own shardings at ``in_shardings[0]``,
``out_shardings[0]``).

A mapped dimension split over Explicit mesh axes is given by ``in_splits`` (one spec entry
or None per argument: how the user's batched argument is typed there). JAX reads those
splits from the arguments' types: they must agree and no unmapped argument may use those
axes (BAT-9, each vmap's checked the outermost first); batching then goes on without
spmd_axis_name (which may only name those axes). The batched arguments' types, and each
batched body's inputs, split the batch dimension over them (JAX's ``explicit_mesh_axis``),
as do a broadcast of an unbatched value to the batch where JAX's rule passes the axes and
a batched typed parameter (a reshard's, a reshape's, a reduction's ``out_sharding``);
other results are typed from their operands (a device_put keeps its target, which may
leave the batch dimension unsplit, and so what follows from it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import Any, Iterator

from ..core.rules import Rejection, located, require, staged
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding
from ..core.values import Mesh, PartitionSpec
from ..jit.matching import check_fits
from ..transforms.batching import (
    BadVmapParameter, BadVmapParameterType, check_not_reduced_when_moved,
    check_vmap_parameters, explicit_batch_axes,
)
from .batching_rules import (
    KEEPS_AXIS, MOVES, BatchAxis, BatchedBody, batch_body, batch_entry, batch_jit_body,
    batch_typed, check_staged,
    broadcast_equation, inserted, moved_axis, push_batched, rearranged, transpose_equation,
)
from .description import Jit, Program, ShardingConstraint, Value, check_program
from .explain import trace_body
from .lowering import equation_path
from .primitives import entry_of
from .refs import with_refs
from .shardmap import VMAPPED_EXPLICIT

P = PartitionSpec  # the name the examples use

__all__ = ["vmap_program", "nested_vmap_program", "batched_input", "KEEPS_AXIS", "MOVES"]

def batched_input(value: Value, axis: int | None, size: int, split: Any = None) -> Value:
    """The batched argument a user passes for one example's argument ``value``: ``size``
    inserted in its shape at ``axis``, placed as the example is with that dimension
    unsplit, or split over ``split`` (a NamedSharding's spec entry: the Explicit axes the
    user's batched argument is typed with there; committedness kept).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> batched_input(Value.placed((8,), NamedSharding(mesh, P("x"))), 1, 3).sharding
    NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', None))
    >>> batched_input(Value.scalar("float"), 0, 3)
    <float32[3]>
    >>> batched_input(Value.shape_dtype((8,), sharding=NamedSharding(mesh.abstract, P("x"))), 0, 3)
    <float32[3x8] over AbstractMesh({'x': 2, 'y': 4}) abstract on NamedSharding(AbstractMesh({'x': 2, 'y': 4}), P(None, 'x'))>
    """
    if axis is None:
        return value
    shape = inserted(value.shape, axis, size)
    s = value.sharding
    if s is None:
        return Value.shape_dtype(shape, value.dtype) if value.abstract else \
            Value.numpy(shape, value.dtype)
    if isinstance(s, NamedSharding):
        spec = s.spec
        s = NamedSharding(s.mesh, P(*inserted(spec.partitions, axis, split),
                                    unreduced=spec.unreduced, reduced=spec.reduced),
                          memory_kind=s.memory_kind)
    elif isinstance(s, GSPMDSharding):
        from ..transforms.batching import with_unit_dim
        s = GSPMDSharding(s.devices, with_unit_dim(s.hlo, axis))
    if value.abstract:
        return Value.shape_dtype(shape, value.dtype, s)
    return Value.placed(shape, s, value.dtype, committed=value.committed)


# --------------------------------------------------------------------------- parameters

def _batch_size(axis_size: Any) -> int:
    require(type(axis_size) is int and axis_size >= 0, lambda: BadVmapParameterType(
        "axis_size", "must be the batch size (an int >= 0): the program describes one "
        "example, which does not hold it", axis_size))
    return axis_size


def _in_shapes(given: list, in_axes: Any, size: int) -> list:
    """The shapes ``given`` batched where in_axes reads as an axis per argument; unbatched
    elsewhere (BAT-0 then refuses in_axes as vmap does)."""
    entries = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(given)
    if len(entries) != len(given):
        return list(given)
    shapes = []
    for shape, axis in zip(given, entries):
        rank = len(shape)
        ok = type(axis) is int and -(rank + 1) <= axis <= rank
        shapes.append(inserted(shape, axis % (rank + 1), size) if ok else shape)
    return shapes


def _out_axes(out_axes: Any, ranks: list[int]) -> tuple[int | None, ...]:
    """BAT-0 for out_axes: an int or None, or one per result, within each batched rank."""
    if isinstance(out_axes, list):
        out_axes = tuple(out_axes)
    if out_axes is None or type(out_axes) is int:
        out_axes = (out_axes,) * len(ranks)
    require(type(out_axes) is tuple and len(out_axes) == len(ranks), lambda: (
        BadVmapParameterType("out_axes", f"must be an int, None, or one entry per result "
                                         f"({len(ranks)})", out_axes)))
    out = []
    for k, (axis, rank) in enumerate(zip(out_axes, ranks)):
        with located(f"outputs[{k}]"):
            require(axis is None or type(axis) is int, lambda axis=axis: BadVmapParameterType(
                "out_axes", "must hold an int or None for each result", axis))
            require(axis is None or -(rank + 1) <= axis <= rank, lambda axis=axis, rank=rank:
                    BadVmapParameter("out_axes", f"must be an axis of the batched result, of "
                                                 f"rank {rank + 1}", axis))
        out.append(None if axis is None else axis % (rank + 1))
    return tuple(out)


# --------------------------------------------------------------------------- the program

def _is_wrapper(program: Program) -> bool:
    """Whether ``program`` is what vmap_program gives when vmap moves results after the
    call: no options, one jit equation over the inputs in order, then one move or more (a
    jit written so by hand reads alike: vmapped, its moves then stay outside it)."""
    eqs = program.equations
    return (len(eqs) > 1 and entry_of(eqs[0]).name == "jit" and not program.consts
            and eqs[0].operands == tuple(range(len(program.inputs)))
            and all(entry_of(eq).name in MOVES for eq in eqs[1:])
            and all(s is UNSPECIFIED for s in program.in_shardings + program.out_shardings)
            and not any(program.donated) and not program.keep_unused
            and program.context_mesh is None)


def _check_example(program: Program) -> None:
    """What JAX checks tracing the jit call on one example's types, before batching: its
    shardings fit the example's shapes (FIT-1), and each equation's own checks."""
    with staged("trace"):
        for i, (s, value) in enumerate(zip(program.in_shardings, program.inputs)):
            check_fits(s, value.shape, f"in_shardings[{i}]")
        trace_body(program, program.context_mesh)
        for i, (s, n) in enumerate(zip(program.out_shardings, program.outputs)):
            check_fits(s, program.value_types[n].shape, f"out_shardings[{i}]")


def _check_mapped_types(inputs: tuple[Value, ...], axes: tuple) -> None:
    """BAT-10 for the arguments a vmap maps: vmap reads each one's type at the mapped
    dimension (the batch dimensions vmaps inside it insert keep the unreduced and reduced
    axes of the example's type, so the example's inputs answer for every vmap)."""
    for i, (value, axis) in enumerate(zip(inputs, axes)):
        if axis is not None:
            with located(f"args[{i}]"):
                check_not_reduced_when_moved(value.spec, f"args[{i}]", True)


def _moves(rw: BatchedBody, outputs: list[int], out_axes: tuple, views: list[Value]
           ) -> list[int]:
    """Each result moved to its out_axes (a transpose, or a broadcast_in_dim for an
    unbatched result), from its type as this vmap sees it (``views``: JAX binds the
    broadcast with that type, the new dimension unsplit, as its sharding parameter); the
    numbers of the results as vmap returns them."""
    moved = []
    for k, (n, target, value) in enumerate(zip(outputs, out_axes, views)):
        source = rw.dims[n]
        with located(f"outputs[{k}]"):
            require(not (source is not None and target is None), lambda: BadVmapParameter(
                "out_axes", "is None for a result that vmap batched (vmap has mapped output "
                "but out_axes is None)", None))
        if source == target or target is None:
            moved.append(n)
            continue
        if source is None:
            with located(f"outputs[{k}]"):   # BAT-10: broadcast from its type, read entry by entry
                check_not_reduced_when_moved(value.spec, f"outputs[{k}]", False)
            shape = inserted(value.shape, target, rw.axis.size)
            kept = tuple(i for i in range(len(shape)) if i != target)
            typed = batch_typed(value, target, batch_entry(rw.axis))
            rw.add(broadcast_equation(n, value, shape, kept, typed), (target,))
        else:
            rw.add(transpose_equation(n, value, moved_axis(len(value.shape), source, target)), (target,))
        moved.append(len(rw.types) - 1)
    return moved


def vmap_program(program: Program, in_axes: Any = 0, out_axes: Any = 0, *,
                 axis_size: Any = None, spmd_axis_name: Any = None,
                 outer_spmd_axis_names: Any = (), in_splits: Any = None,
                 jitted: bool = True) -> Program:
    """The Program that ``jax.vmap(jax.jit(f, ...), in_axes, out_axes,
    axis_size=axis_size, spmd_axis_name=spmd_axis_name)`` amounts to on batched arguments,
    ``program`` describing the jit call on one example (module docstring).

    ``jitted`` False: ``program`` describes a Python function vmapped (not a jit call),
    whose equations JAX checks and batches one at a time (module docstring).

    For a vmap inside other vmaps, ``outer_spmd_axis_names`` names their spmd axes (JAX
    batches with them in its axis environment, and inside a check_vma shard_map casts
    along them too: PBAT-3), and the outer vmaps are then applied to the answer; to ask
    in JAX's order and types, give the whole nest to :func:`nested_vmap_program`.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> x = Value.placed((8, 8), NamedSharding(mesh, P("x")))
    >>> program = Program((x,), (ShardingConstraint((0,), sharding=NamedSharding(
    ...     mesh, P("x", None))),), outputs=(1,))
    >>> batched = vmap_program(program, axis_size=4, spmd_axis_name="y")
    >>> batched.inputs[0].shape, batched.equations[0].sharding.spec
    ((4, 8, 8), P('y', 'x'))
    >>> vmap_program(program, axis_size=4, spmd_axis_name="x")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-7] at body[0]: vmap's spmd_axis_name ('x',) also appears in the with_sharding_constraint spec P('x', None) of body[0]; a mesh axis cannot split both the batch and another dimension

    ``in_splits`` (None, or one spec entry or None per input) gives the Explicit axes each
    mapped argument's mapped dimension is split over (module docstring, BAT-9):

    >>> from shardlaw.spec import AxisType
    >>> from shardlaw.spec.program.description import Opaque
    >>> explicit = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> w = Value.placed((8,), NamedSharding(explicit, P()))
    >>> sin = Program((w,), (Opaque((0,), primitive="sin", results=(w.type,)),), (1,))
    >>> vmap_program(sin, axis_size=4, in_splits=("y",)).value_types[1].spec
    P('y')
    """
    check_program(isinstance(program, Program), "the program vmapped", "a Program", program)
    options = {"in_axes": in_axes, "out_axes": out_axes, "axis_size": axis_size,
               "spmd_axis_name": spmd_axis_name, "in_splits": in_splits}
    with staged("trace"), deep_enough(program):
        outer = _names(outer_spmd_axis_names) if outer_spmd_axis_names != () else ()
        return _vmapped(program, (options,), outer or (), jitted is not False)


_OPTIONS = frozenset({"in_axes", "out_axes", "axis_size", "spmd_axis_name", "in_splits"})


def nested_vmap_program(program: Program, vmaps: Any, *, jitted: bool = True) -> Program:
    """The Program that nested vmaps of ``jax.jit(f, ...)`` amount to on batched arguments:
    ``vmaps`` holds each vmap's options as :func:`vmap_program` takes them (``in_axes``,
    ``out_axes``, ``axis_size``, ``spmd_axis_name``), innermost first.

    JAX traces the function once under all of them, in this order: each vmap's parameters,
    the outermost first (it is called first); the jit call on one example; the jit batched
    by each vmap in turn, innermost first (``jitted`` False, a Python function: each
    equation checked on the example and batched by each vmap in turn before the next
    one); then each vmap's out_axes, innermost first, its
    moves batched by the vmaps outside it, and read from a result's type as that vmap
    sees it (its type once batched by all, less the batch dimensions of those outside).

    The inner vmap below leaves a batched result unmapped (out_axes None: BAT-0), and the
    outer one batches the inner jit's result over 'x', which its out_sharding uses: JAX
    refuses the jit first.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> x = Value.placed((8,), NamedSharding(mesh, P()))
    >>> inner = Program((x.type,), outputs=(0,), out_shardings=(NamedSharding(mesh, P("x")),))
    >>> step = Program((x,), (Jit((0,), body=inner),), outputs=(0, 1))
    >>> nested_vmap_program(step, [{"axis_size": 2, "out_axes": (None, 0)},
    ...                            {"axis_size": 2, "spmd_axis_name": "x"}])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [BAT-4] at body[0].jit.out_shardings[0]: spmd_axis_name ('x',) would split the batched value over mesh axis 'x' twice: the batched spec is P('x', None, 'x'). Pick a spmd_axis_name that the jit's shardings do not use.
    >>> nested_vmap_program(step, [{"axis_size": 2, "out_axes": (None, 0)},
    ...                            {"axis_size": 2}])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [BAT-0] at outputs[0]: out_axes is None for a result that vmap batched (vmap has mapped output but out_axes is None), got None
    """
    check_program(isinstance(program, Program), "the program vmapped", "a Program", program)
    with staged("trace"):
        require(isinstance(vmaps, (tuple, list)) and len(vmaps) > 0 and all(
            isinstance(v, dict) and set(v) <= _OPTIONS for v in vmaps),
            lambda: BadVmapParameterType("vmaps", f"must be a list of one dict or more of "
                                                  f"vmap_program's options "
                                                  f"{sorted(_OPTIONS)}, innermost first",
                                         vmaps))
        with deep_enough(program):
            return _vmapped(program, tuple(vmaps), (), jitted is not False)


# The Python frames batching one level of nested bodies takes, at most (a jit's body
# batched: its equation, its rule, the body, each equation).
_FRAMES_PER_LEVEL = 12


@contextlib.contextmanager
def deep_enough(program: Program) -> Iterator[None]:
    """Python's recursion limit raised, for the rewrite only, to what batching
    ``program``'s bodies takes: bodies nest up to PROG-0's limit (MAX_DEPTH), each level
    a few frames deeper, so a nest the description accepts is batched, never refused by a
    RecursionError."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(before + _FRAMES_PER_LEVEL * (program.depth + 1))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def _vmapped(program: Program, vmaps: tuple[dict, ...], outer: tuple[str, ...],
             jitted: bool = True) -> Program:
    """``program`` under ``vmaps`` (innermost first), in JAX's order (nested_vmap_program):
    a jit call's example checked whole before it is batched, a Python function's
    (``jitted`` False) one equation at a time (:func:`_in_program_order`)."""
    levels = _levels(program, vmaps, outer)
    wrapper = _is_wrapper(program)
    if not wrapper and program.checked and not jitted and _unoptioned(program):
        chain = _as_jits(program, levels, _in_program_order(program, levels))
    else:
        if not wrapper and program.checked:
            with _explicit_env(levels):
                _check_example(program)
        first = levels[0]
        chain = [batch_body(program, first.axes, first.axis, "") if wrapper
                 else _as_one_jit(program, first.axes, first.axis)]
        for level in levels[1:]:
            given = Program(tuple(chain[-1].types[:len(level.axes)]))
            chain.append(BatchedBody(given, level.axes, level.axis, ""))
            _carry(chain, len(chain) - 2, 0, not wrapper)
    count = len(program.inputs)
    outputs = [chain[0].number[n] for n in program.outputs] if wrapper else \
        list(range(count, count + len(program.outputs)))
    for k, (level, rw) in enumerate(zip(levels, chain)):
        outputs = [rw.number[n] for n in outputs] if k else outputs
        ranks = [len(rw.types[n].shape) - (rw.dims[n] is not None) for n in outputs]
        out_axes = _out_axes(level.out_axes, ranks)
        start = len(rw.equations)
        outputs = _moves(rw, outputs, out_axes, _views(chain, k, outputs))
        _carry(chain, k, start, False)
    return with_refs(_answer(levels[-1].inputs, chain[-1], outputs), program)


@dataclasses.dataclass(frozen=True)
class _Level:
    """One vmap of a nest: the axis it maps of each argument it is given, the batched
    arguments it gives, what it batches over, and its out_axes as given."""

    axes: tuple
    inputs: tuple[Value, ...]
    axis: BatchAxis
    out_axes: Any


def _levels(program: Program, vmaps: tuple[dict, ...], outer: tuple[str, ...]
            ) -> list[_Level]:
    """Each vmap's parameters checked (BAT-0), the outermost first, on the shapes of the
    arguments it is given (those the vmaps inside it batch); then each one read, its
    arguments' mapped dimensions split as ``in_splits`` says (BAT-9, the outermost first:
    the spmd axes batching goes on with, and the Explicit axes the batch is split over)."""
    shapes = [[v.shape for v in program.inputs]]
    for options in vmaps[:-1]:   # were the vmaps inside well-formed
        size = options.get("axis_size")
        shapes.append(_in_shapes(shapes[-1], options.get("in_axes", 0),
                                 size if type(size) is int and size >= 0 else 0))
    read = []
    for options, given in zip(reversed(vmaps), reversed(shapes)):
        size, in_axes = _batch_size(options.get("axis_size")), options.get("in_axes", 0)
        _, axes, _ = check_vmap_parameters(_in_shapes(given, in_axes, size), in_axes, size)
        _check_mapped_types(program.inputs, axes)
        splits = _in_splits(options.get("in_splits"), axes, program.inputs)
        read.insert(0, (axes, size, _names(options.get("spmd_axis_name")), splits))
    given, inputs = [], program.inputs
    for axes, size, _, splits in read:
        inputs = tuple(batched_input(v, a, size, e) for v, a, e in zip(inputs, axes, splits))
        given.append(inputs)
    batching = [None] * len(read)
    for k in reversed(range(len(read))):   # JAX's checks, the outermost vmap's first
        axes, _, names, _ = read[k]
        batching[k] = _explicit_axes(given[k], axes, names)
    levels = []
    for k, ((axes, size, _, _), options) in enumerate(zip(read, vmaps)):
        names, explicit = batching[k]
        around = frozenset(outer).union(*(n for n, _ in batching[k + 1:] if n))
        levels.append(_Level(axes, given[k], BatchAxis(size, names, program.context_mesh,
                                                       outer=around, explicit=explicit),
                             options.get("out_axes", 0)))
    return levels


def _in_splits(in_splits: Any, axes: tuple, inputs: tuple[Value, ...]) -> tuple:
    """BAT-0 for in_splits: None, or one entry per argument: None, or for a mapped argument
    on a NamedSharding the Explicit mesh axes (a name or a tuple of names) its batched type
    splits the mapped dimension over."""
    if in_splits is None:
        return (None,) * len(axes)
    require(isinstance(in_splits, tuple) and len(in_splits) == len(axes), lambda:
            BadVmapParameterType("in_splits", f"must be None or one entry per argument "
                                              f"({len(axes)})", in_splits))
    for i, (entry, axis, value) in enumerate(zip(in_splits, axes, inputs)):
        if entry is None:
            continue
        names = entry if isinstance(entry, tuple) else (entry,)
        mesh = value.sharding.mesh if isinstance(value.sharding, NamedSharding) else None
        explicit = () if mesh is None else tuple(
            n for n, t in zip(mesh.axis_names, mesh.axis_types) if t.value == "Explicit")
        with located(f"args[{i}]"):
            require(axis is not None and len(names) > 0 and all(
                isinstance(n, str) and n in explicit for n in names), lambda entry=entry:
                BadVmapParameter("in_splits", "must name, for a mapped argument on a "
                                              "NamedSharding, Explicit axes of its mesh",
                                 entry))
    return tuple(in_splits)


def _explicit_axes(given: tuple[Value, ...], axes: tuple, names: tuple[str, ...] | None
                   ) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """BAT-9 on the arguments one vmap is given (their types' splits): the spmd axes
    batching goes on with, and the Explicit axes the mapped dimension is split over."""
    parts = tuple(tuple(_axes(e) for e in tuple(v.spec or ()) + (None,) * (
        len(v.shape) - len(tuple(v.spec or ())))) for v in given)
    mapped = [p[a] for p, a in zip(parts, axes) if a is not None]
    if not any(mapped):   # (no mapped dimension split: BAT-9 holds, the batch unsplit)
        return names, None
    return explicit_batch_axes(parts, axes, names), (mapped[0] or None)


def _axes(entry: Any) -> tuple[str, ...]:
    """A spec entry as the mesh axes it names."""
    return () if entry is None else entry if isinstance(entry, tuple) else (entry,)


def _carry(chain: list[BatchedBody], k: int, start: int, one_jit: bool) -> None:
    """The equations of vmap ``k``'s rewrite from ``start`` on, each batched by the vmap
    outside it, what that gives by the next, and so on before the next equation (JAX binds
    an equation through every vmap at once). With ``one_jit`` the first is the jit call,
    its body's equations and options located as written (``body[3]``, ``in_shardings[0]``)."""
    if k + 1 == len(chain):
        return
    rw = chain[k + 1]
    for i, eq in enumerate(chain[k].equations[start:], start):
        before = len(rw.equations)
        if one_jit and i == 0:
            operands = [rw.operand(n) for n in eq.operands]
            body, out_dims = batch_jit_body(eq.body, tuple(d for _, d in operands),
                                             rw.axis, "", "")
            rw.add(Jit(tuple(n for n, _ in operands), body=body, name=eq.name,
                       checked=False), out_dims)
            rw.define(len(eq.results))
        else:
            push_batched(rw, eq, equation_path("", i))
        _carry(chain, k + 1, before, one_jit)


def _views(chain: list[BatchedBody], k: int, outputs: list[int]) -> list[Value]:
    """Each of vmap ``k``'s results as that vmap sees it: its type once every vmap has
    batched it, less the batch dimensions of the vmaps outside ``k`` (JAX's mapped type)."""
    if k + 1 == len(chain):
        return [chain[k].types[n] for n in outputs]
    views = []
    for n in outputs:
        numbers = [n]
        for rw in chain[k + 1:]:
            numbers.append(rw.number[numbers[-1]])
        value = chain[-1].types[numbers[-1]]
        for rw, m in reversed(list(zip(chain[k + 1:], numbers[1:]))):
            d = rw.dims[m]
            if d is not None:
                kept = tuple(i for i in range(len(value.shape)) if i != d)
                value = dataclasses.replace(value, shape=value.shape[:d] + value.shape[d + 1:],
                                            spec=rearranged(value.spec, kept))
        views.append(value)
    return views


def _names(spmd_axis_name: Any) -> tuple[str, ...] | None:
    if spmd_axis_name is None:
        return None
    names = spmd_axis_name if type(spmd_axis_name) is tuple else (spmd_axis_name,)
    require(len(names) > 0 and all(isinstance(n, str) for n in names),
            lambda: BadVmapParameterType("spmd_axis_name", "must be None, a mesh axis name "
                                                           "or a tuple of names",
                                         spmd_axis_name))
    return names


def _unoptioned(program: Program) -> bool:
    """Whether ``program`` is a Python function's, read as ``jax.jit`` of it: no shardings
    given, nothing donated."""
    return (all(s is UNSPECIFIED for s in program.in_shardings + program.out_shardings)
            and not any(program.donated))


def _in_program_order(program: Program, levels: list[_Level]) -> list[tuple[Program, tuple]]:
    """A Python function's body batched as JAX's vmap traces it (no jit around it to trace
    it first on one example): each equation's own checks on the example's types (what
    tracing its call checks: a body it traces, a constraint's fit), then the equation
    batched by every vmap, the innermost first, before the next equation; a refusal on the
    way comes after what tracing refuses of the equations staged before it. Each vmap's
    batched body and its results' batch axes, innermost first."""
    example = _traced(program)
    bodies, given = [], example
    for level in levels:
        axis = dataclasses.replace(level.axis, context=example.context_mesh)
        bodies.append(BatchedBody(given, level.axes, axis, ""))
        given = Program(tuple(bodies[-1].types[:len(example.inputs)]), consts=example.consts,
                        context_mesh=example.context_mesh)
    seen: dict = {}
    try:
        for k, eq in enumerate(example.equations):
            with _explicit_env(levels):
                trace_body(example, example.context_mesh, "", None, seen, k, k + 1)
            before = len(bodies[0].equations)
            push_batched(bodies[0], eq, equation_path("", k))
            _carry(bodies, 0, before, False)
    except Rejection:
        check_staged(bodies[-1])
        raise
    made, outputs = [], example.outputs
    for rw in bodies:
        outputs = tuple(rw.number[n] for n in outputs)
        body = dataclasses.replace(example, inputs=tuple(rw.types[:len(example.inputs)]),
                                   equations=tuple(rw.equations), outputs=outputs)
        made.append((body, tuple(rw.dims[n] for n in outputs)))
    return made


@contextlib.contextmanager
def _explicit_env(levels: list[_Level]) -> Iterator[None]:
    """The example traced as under the vmaps of ``levels``: SMAP-17 leaves out the
    Explicit axes they split their batch over (JAX's ``explicit_mesh_axis_names``)."""
    axes = frozenset(n for level in levels for n in (level.axis.explicit or ()))
    token = VMAPPED_EXPLICIT.set(VMAPPED_EXPLICIT.get() | axes)
    try:
        yield
    finally:
        VMAPPED_EXPLICIT.reset(token)


def _as_jits(program: Program, levels: list[_Level], made: list[tuple[Program, tuple]]
             ) -> list[BatchedBody]:
    """Each vmap's rewrite of the function as one jit equation over its inputs, its body
    the one :func:`_in_program_order` batched for that vmap."""
    chain: list[BatchedBody] = []
    count = len(program.inputs)
    for level, (body, out_dims) in zip(levels, made):
        given = Program(tuple(v.type for v in program.inputs) if not chain
                        else tuple(chain[-1].types[:count]))
        rw = BatchedBody(given, level.axes, level.axis, "")
        rw.add(Jit(tuple(range(count)), body=body, name="vmapped", checked=False), out_dims)
        if chain:
            rw.define(len(out_dims))
        chain.append(rw)
    return chain


def _as_one_jit(program: Program, axes: tuple, axis: BatchAxis) -> BatchedBody:
    """The vmapped function's body as one jit equation over the inputs: the program's own
    jit batched (its equations at ``body[k]``, its options at ``in_shardings[i]``)."""
    body, out_dims = batch_jit_body(_traced(program), axes, axis, "", "")
    outer = Program(tuple(v.type for v in program.inputs))
    rw = BatchedBody(outer, axes, axis, "")
    rw.add(Jit(tuple(range(len(program.inputs))), body=body, name="vmapped", checked=False),
           out_dims)
    return rw


def _traced(program: Program) -> Program:
    """``program`` as a jit equation's body: its inputs typed only, no compiler choices."""
    return dataclasses.replace(program, inputs=tuple(v.type for v in program.inputs),
                               compiler=None, compiler_in=None)


def _answer(inputs: tuple[Value, ...], rw: BatchedBody, outputs: list[int]) -> Program:
    """One jit call over the batched arguments where vmap moved nothing after it, else
    ``jax.jit`` of the vmapped function (the batched call, then the moves)."""
    first = rw.equations[0] if rw.equations else None
    count = len(inputs)
    if (len(rw.equations) == 1 and entry_of(first).name == "jit"
            and first.operands == tuple(range(count))
            and outputs == list(range(count, count + len(first.results)))):
        return dataclasses.replace(first.body, inputs=inputs, checked=False)
    return Program(inputs, tuple(rw.equations), tuple(outputs))
