"""Refusals that depend on where the compiler places a value, decided from the placement
propagation predicts (issue 33, item 3; :mod:`~shardlaw.spec.program.propagation`).

JAX makes some decisions before the compiler places the values it left open, and the
compiler's placement can then contradict them. A donated input whose sharding jit leaves to
the compiler (an uncommitted array given no ``in_shardings``) is aliased by JAX at its whole
shape (jax#25346): where the compiler then splits it, XLA refuses compiling (PROG-11).

>>> from shardlaw.spec import Mesh, NamedSharding, P, explain_program
>>> from shardlaw.spec.program.description import Opaque, Program, Value
>>> mesh = Mesh.iota((2, 4), ("x", "y"))
>>> m = Value.numpy((16, 16))   # uncommitted, donated
>>> x = Value.placed((16, 16), NamedSharding(mesh, P("x")))
>>> sin = Opaque((1,), primitive="sin", results=(Value.typed((16, 16)),))
>>> add = Opaque((0, 1), primitive="add", results=(Value.typed((16, 16)),))
>>> step = Program((m, x), (sin, add), outputs=(2, 3), donated=(True, False),
...                out_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("x"))))
>>> verdict = explain_program(step)
>>> verdict.rule, verdict.stage, verdict.error_type, verdict.path
('PROG-11', 'compile', 'RuntimeError', 'args[0]')
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.rules import Failure, Rejection, reject, remembering, rule, tracing
from ..core.shardings import UNCONSTRAINED, UNSPECIFIED, NamedSharding
from ..core.values import AxisType, Mesh, PartitionSpec
from ..placement.blocks import shard_shape, to_hlo
from .description import Program, ShardingConstraint
from .lowering import result_placer
from .propagation import Undetermined, propagate, propagation_mesh

__all__ = ["check_aliased_donations", "open_donations", "left_to_compiler",
           "compiler_placed_inputs", "AliasedSplit", "main_mesh", "crossmesh_split",
           "crossmesh_choices"]


# --------------------------------------------------------------------------- PROP-8

def _spans(mesh: Mesh) -> dict[str, tuple[int, int]]:
    """Each axis of size above 1 as the (stride, size) of the device positions it steps."""
    out, stride = {}, 1
    for name, size in reversed(tuple(zip(mesh.axis_names, mesh.axis_sizes))):
        if size > 1:
            out[name] = (stride, size)
        stride *= size
    return dict(reversed(list(out.items())))


def _pieces(span: tuple[int, int], bounds: list[int]) -> tuple[int, ...]:
    """The factors of the meshes' common refinement one axis is made of, major first (each
    named by its stride)."""
    stride, size = span
    return tuple(b for b in reversed(bounds) if stride <= b < stride * size)


def main_mesh(shardings: Any) -> Mesh | None:
    """The mesh Shardy places a several-mesh program over: among the NamedShardings'
    meshes, in the module's order, the first with the most axes of size above 1; None
    unless every sharding is a NamedSharding over a concrete mesh of Auto axes, all of one
    device list, and over two meshes of different shapes at least."""
    meshes = []
    for s in shardings:
        if s is UNSPECIFIED:
            continue
        if not (isinstance(s, NamedSharding) and isinstance(s.mesh, Mesh)
                and all(t is AxisType.Auto for t in s.mesh.axis_types)):
            return None
        meshes.append(s.mesh)
    if not meshes or any(m.devices != meshes[0].devices for m in meshes):
        return None
    if len({tuple(_spans(m).values()) for m in meshes}) < 2:
        return None
    most = max(len(_spans(m)) for m in meshes)
    return next(m for m in meshes if len(_spans(m)) == most)


@rule("PROP-8", mirrors="shardy: the meshes of a module over one device list, and the "
                        "sub-axes dropped from a function's result shardings")
def crossmesh_split(sharding: NamedSharding, main: Mesh, rank: int) -> tuple:
    """Over meshes of one device list, a result a constraint or an inner jit's out sharding places is split, per dimension, by the longest prefix of its axes making whole axes of the first mesh of most axes.

    ``sharding``: the placement the user wrote; ``main``: that mesh (:func:`main_mesh`).
    Where one mesh's axes refine the other's the placement is kept; else an axis made of
    parts of another mesh's axes ends the prefix (Shardy holds it as sub-axes, and a
    function's results drop them).

    >>> from shardlaw.spec import P
    >>> wide, tall = Mesh.iota((2, 4), ("x", "y")), Mesh.iota((4, 2), ("a", "b"))
    >>> crossmesh_split(NamedSharding(tall, P("a", "b")), wide, 2)   # 'a' is 'x' and half 'y'
    (('x',), ())
    >>> crossmesh_split(NamedSharding(tall, P(("a", "b"))), wide, 2)
    (('x', 'y'), ())
    """
    spans = _spans(sharding.mesh)
    whole = _spans(main)
    bounds = sorted({b for m in (spans, whole) for st, sz in m.values() for b in (st, st * sz)})
    axes_of = {name: _pieces(span, bounds) for name, span in whole.items()}
    out = []
    for entry in (tuple(sharding.spec.partitions) + (None,) * rank)[:rank]:
        names = () if entry is None else (entry,) if isinstance(entry, str) else entry
        pieces = [p for n in names if n in spans for p in _pieces(spans[n], bounds)]
        kept: list[str] = []
        while pieces:
            hit = next((n for n, f in axes_of.items() if tuple(pieces[:len(f)]) == f), None)
            if hit is None:
                break
            kept.append(hit)
            pieces = pieces[len(axes_of[hit]):]
        out.append(tuple(kept))
    return tuple(out)


def crossmesh_choices(program: Program, shardings: Any) -> tuple:
    """Per output, the HLO sharding PROP-8 predicts the compiler gives a result a
    constraint or an inner jit's out sharding places, in a program over several meshes of
    one device list (None: not such a result, or not such a program); ``shardings``: the
    device assignment's, in the module's order (kept inputs, out shardings, the body's).
    The rules it applies are the spec's reading of the partitioner: a jit's trace does not
    list them, and their answers are not remembered for the jit's own rules."""
    with tracing(), remembering():
        return _crossmesh_choices(program, shardings)


def _crossmesh_choices(program: Program, shardings: Any) -> tuple:
    main = main_mesh(shardings)
    outputs = len(program.outputs)
    if main is None:
        return (None,) * outputs
    out = []
    for j, given in enumerate(program.out_shardings or (UNSPECIFIED,) * outputs):
        found = result_placer(program, j, "") if given is UNSPECIFIED else None
        placer = found and (found[1].sharding if isinstance(found[1], ShardingConstraint)
                            else found[1])
        shape = found and found[2]
        if not (isinstance(placer, NamedSharding) and isinstance(placer.mesh, Mesh)
                and placer.mesh.devices == main.devices and _even(placer, shape)):
            out.append(None)
            continue
        split = crossmesh_split(placer, main, len(shape))
        out.append(to_hlo(NamedSharding(main, PartitionSpec(*(
            None if not a else a[0] if len(a) == 1 else a for a in split))), len(shape)))
    return tuple(out)


def _even(sharding: NamedSharding, shape: tuple) -> bool:
    try:
        shard_shape(sharding, shape)
    except Rejection:
        return False
    return True


# --------------------------------------------------------------------------- PROG-11

@dataclasses.dataclass(frozen=True)
class AliasedSplit(Failure, rule="PROG-11", error=RuntimeError, jax_error="JaxRuntimeError"):
    template = ("{path} is donated and its sharding is left to the compiler, so JAX aliases "
                "it at its whole shape {shape} to {result}, whose sharding gives each device "
                "{shape} too; the compiler then places {path} split {split}, {piece} per "
                "device, and XLA refuses an aliased input and output of different sizes")
    hint = ("Give the donated input a sharding (in_shardings, or commit it with "
            "jax.device_put), or leave that result's sharding to the compiler (jax#25346)")
    path: str
    shape: tuple
    result: str
    split: tuple
    piece: tuple


def left_to_compiler(program: Program) -> frozenset[int]:
    """The inputs whose sharding jit leaves to the compiler: no in sharding, and neither
    committed nor an abstract value with a sharding of its own."""
    given = program.in_shardings or (UNSPECIFIED,) * len(program.inputs)
    return frozenset(k for k, (value, s) in enumerate(zip(program.inputs, given))
                     if s is UNSPECIFIED and not (
                         (value.committed or value.abstract) and value.sharding is not None))


def _given(sharding: Any) -> bool:
    """Whether a result's sharding is given to lowering (JAX aliases only to those)."""
    return sharding is not UNSPECIFIED and sharding is not None and not (
        isinstance(sharding, NamedSharding) and any(e is UNCONSTRAINED
                                                     for e in sharding.spec))


def _piece(shape: tuple, sharding: Any, devices: int) -> tuple:
    """The shape lowering gives each device of a value on ``sharding`` (whole: left open;
    an UNCONSTRAINED dimension whole)."""
    if devices == 1 or sharding is UNSPECIFIED or sharding is None:
        return tuple(shape)
    if isinstance(sharding, NamedSharding) and UNCONSTRAINED in sharding.spec.partitions:
        sharding = NamedSharding(sharding.mesh, PartitionSpec(*(
            None if e is UNCONSTRAINED else e for e in sharding.spec.partitions)))
    return tuple(shard_shape(sharding, shape))


def _lowered_result(value: Any, sharding: Any) -> Any:
    """A result's sharding as lowering takes it: one left open but typed over a mesh with
    Explicit axes takes its type's (its unsplit dimensions UNCONSTRAINED beside Auto
    axes: JAX's ``_concretize_abstract_out_shardings``)."""
    mesh = value.mesh
    if sharding is not UNSPECIFIED or mesh is None or AxisType.Explicit not in mesh.axis_types:
        return sharding
    auto = AxisType.Auto in mesh.axis_types
    entries = tuple(value.spec or ()) + (None,) * len(value.shape)
    return NamedSharding(mesh, PartitionSpec(*(
        UNCONSTRAINED if e is None and auto else e for e in entries[:len(value.shape)])))


def _aliases(program: Program, results: tuple, devices: int, kept: tuple) -> list:
    """(input, result) of each donated input JAX aliases to a result whose sharding is
    given, paired as lowering pairs them: each result in order takes the first donated
    input left of its per-device shape and dtype."""
    given = program.in_shardings or (UNSPECIFIED,) * len(program.inputs)
    queues: dict = {}
    for i in kept:
        if program.donated[i]:
            value = program.inputs[i]
            s = given[i] if given[i] is not UNSPECIFIED else (
                value.sharding if i not in left_to_compiler(program) else UNSPECIFIED)
            key = (_piece(value.shape, s, devices), value.dtype)
            queues.setdefault(key, []).append(i)
    out = []
    for j, (value, s) in enumerate(results):
        s = _lowered_result(value, s)
        queue = queues.get((_piece(value.shape, s, devices), value.dtype))
        if queue:
            i = queue.pop(0)
            if _given(s):
                out.append((i, j))
    return out


def compiler_placed_inputs(program: Program) -> dict:
    """Each input whose sharding jit leaves to the compiler, by its index: the split
    propagation predicts the compiler gives it (:func:`left_to_compiler`; PROP-4), or the
    :class:`~shardlaw.spec.program.propagation.Undetermined` saying why not.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> x = Value.placed((16, 16), NamedSharding(mesh, P("x")))
    >>> add = Opaque((0, 1), primitive="add", results=(Value.typed((16, 16)),))
    >>> compiler_placed_inputs(Program((Value.numpy((16, 16)), x), (add,), outputs=(2,)))
    {0: (('x',), ())}
    """
    opened = left_to_compiler(program)
    if not opened:
        return {}
    with tracing(), remembering():   # (the spec's prediction: no step of JAX's jit)
        found = propagate(program, opened, contested=True)   # (an input out of reach kept)
    return {i: found if isinstance(found, Undetermined) else found[i] for i in sorted(opened)}


def _placements(program: Program, results: tuple, devices: int, kept: tuple):
    """Per aliased input left to the compiler: (input, result, its predicted split or the
    Undetermined why not, the mesh's axis sizes)."""
    if devices == 1 or any(program.refs) or not any(program.donated):
        return []
    opened = left_to_compiler(program)
    pairs = [(i, j) for i, j in _aliases(program, results, devices, kept) if i in opened]
    if not pairs:
        return []
    placed = compiler_placed_inputs(program)
    with tracing(), remembering():
        mesh = propagation_mesh(program, opened)
    sizes = {} if isinstance(mesh, Undetermined) else dict(zip(mesh.axis_names,
                                                               mesh.axis_sizes))
    return [(i, j, placed[i], sizes) for i, j in pairs]


@rule("PROG-11", mirrors="jax._src.interpreters.mlir._set_up_aliases (jax#25346); XLA's check "
                       "that an aliased input and output have the same size")
def check_aliased_donations(program: Program, results: tuple, devices: int,
                            kept: tuple) -> None:
    """A donated input whose sharding is left to the compiler is aliased at its whole shape to the first result of that shape whose sharding is given, and XLA refuses compiling where the compiler splits that input.

    ``results``: each result's (type, sharding as lowering takes it: UNSPECIFIED where left
    open); ``devices``: the device assignment's size; ``kept``: the inputs the program
    keeps. Where the compiler places the input is propagation's prediction (PROP-4); where
    that is left open the program is accepted, and :func:`open_donations` says so.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> m, x = Value.numpy((16, 16)), Value.placed((16, 16), NamedSharding(mesh, P("x")))
    >>> twice = Opaque((0,), primitive="mul", results=(Value.typed((16, 16)),))
    >>> whole, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(None, "y"))
    >>> def step(out):   # (x, m * 2), m donated and left to the compiler
    ...     program = Program((m, x), (twice,), outputs=(1, 2), donated=(True, False),
    ...                       out_shardings=(whole, out))
    ...     return program, ((x.type, whole), (m.type, out))
    >>> check_aliased_donations(*step(whole), 8, (0, 1))   # the compiler leaves m whole
    >>> check_aliased_donations(*step(split), 8, (0, 1))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [PROG-11] at args[0]: args[0] is donated and its sharding is left to the compiler, so JAX aliases it at its whole shape (16, 16) to result[0], whose sharding gives each device (16, 16) too; the compiler then places args[0] split ((), ('y',)), (16, 4) per device, and XLA refuses an aliased input and output of different sizes. Give the donated input a sharding (in_shardings, or commit it with jax.device_put), or leave that result's sharding to the compiler (jax#25346).
    """
    for i, j, split, sizes in _placements(program, results, devices, kept):
        if isinstance(split, Undetermined):
            continue
        value = program.inputs[i]
        ways = tuple(math.prod(sizes[a] for a in axes) for axes in split)
        if math.prod(ways) > 1:
            path = f"args[{i}]"
            piece = tuple(n // w for n, w in zip(value.shape, ways))
            raise reject(AliasedSplit(path, tuple(value.shape), f"result[{j}]", split, piece),
                         path)


def open_donations(program: Program, results: tuple, devices: int, kept: tuple) -> tuple:
    """(path, reason) of each donated input PROG-11 cannot decide: propagation leaves its
    placement open."""
    return tuple((f"args[{i}]", f"[PROG-11] args[{i}] is donated, left to the compiler and "
                  f"aliased to result[{j}] at its whole shape; XLA refuses compiling if the "
                  f"compiler splits it, and where it places it is left open: {split}")
                 for i, j, split, _ in _placements(program, results, devices, kept)
                 if isinstance(split, Undetermined))
