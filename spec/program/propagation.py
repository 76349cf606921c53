"""Where the compiler decides: sharding propagation over a program's body (issue 33).

JAX 0.10.2 hands a result it does not place itself to the partitioner (Shardy): each
operation has a sharding rule over the factors of its dimensions (the primitive table's
``sharding`` slot, :mod:`~shardlaw.spec.program.sharding_factors`), and propagation moves
the inputs' splits forward and backward through the body until nothing changes. This
module does the same over a body whose every equation has a rule, on one concrete mesh of
Auto axes, and gives each result's split — or, where the program does not determine it
(an equation without a rule, a placement the user wrote in the body or the out
shardings, a split the partitioner resolves by its own order), an :class:`Undetermined`
naming the rule and the reason. It never guesses: every case it answers is held to the
compiled executable by ``properties/propagation_harness.py``.

A split is one tuple of mesh axes per dimension (major first).

>>> from shardlaw.spec import Mesh, NamedSharding, P
>>> from shardlaw.spec.program.description import Opaque, Program, Value
>>> mesh = Mesh.iota((2, 4), ("x", "y"))
>>> a = Value.placed((16, 32), NamedSharding(mesh, P("x", "y")))
>>> b = Value.placed((32, 64), NamedSharding(mesh, P("y", None)))
>>> dot = Opaque((0, 1), primitive="dot_general", results=(Value.typed((16, 64)),),
...              params=(("dimension_numbers", (((1,), (0,)), ((), ()))),))
>>> tanh = Opaque((2,), primitive="tanh", results=(Value.typed((16, 64)),))
>>> total = Opaque((3,), primitive="reduce_sum", results=(Value.typed((64,)),),
...                params=(("axes", (0,)),))
>>> flip = Opaque((3,), primitive="transpose", results=(Value.typed((64, 16)),),
...               params=(("permutation", (1, 0)),))
>>> fold = Opaque((3,), primitive="reshape", results=(Value.typed((4, 256)),),
...               params=(("dimensions", None), ("new_sizes", (4, 256))))
>>> program = Program((a, b), (dot, tanh, total, flip, fold), outputs=(4, 5, 6))
>>> predicted_results(program)
(((),), ((), ('x',)), (('x',), ()))
>>> from shardlaw.spec import explain_program
>>> explain_program(program).out_shardings   # as JAX 0.10.2 returns them
(NamedSharding(Mesh({'x': 2, 'y': 4}), P()), NamedSharding(Mesh({'x': 2, 'y': 4}), P(None, 'x')), NamedSharding(Mesh({'x': 2, 'y': 4}), P('x')))
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.rules import rule, tracing
from ..core.shardings import UNSPECIFIED, NamedSharding
from ..core.values import AxisType, Mesh, PartitionSpec
from ..placement.blocks import to_hlo
from .description import Program
from .lowering import live_parts
from .primitives import Factors, Kind, NotPropagated, entry_of
from .sharding_factors import factors_of_dimension

__all__ = ["Undetermined", "Split", "propagation_mesh", "factor_split", "dimension_splits",
           "propagate", "predicted_results", "predicted_sharding", "predicted_choices",
           "undetermined_results"]

Split = tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True)
class Undetermined:
    """Why propagation does not say where the compiler places a value: the rule and the
    reason, at the equation's path (empty: the whole program)."""

    rule: str
    why: str
    path: str = ""

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"[{self.rule}]{where}: {self.why}"


class _Stop(Exception):
    def __init__(self, undetermined: Undetermined) -> None:
        super().__init__(str(undetermined))
        self.undetermined = undetermined


def _stop(rule_id: str, why: str, path: str = "") -> None:
    raise _Stop(Undetermined(rule_id, why, path))


# --------------------------------------------------------------------------- the mesh

@rule("PROP-1", mirrors="jax._src.interpreters.pxla.lower_sharding_computation (Shardy)")
def propagation_mesh(program: Program) -> Mesh | Undetermined:
    """Propagation is predicted over one concrete mesh of Auto axes that every input is
    placed on, each by an in sharding or a committed NamedSharding with no unreduced axes,
    in a program without closed-over constants and without out shardings.

    >>> from shardlaw.spec import NamedSharding, P
    >>> from shardlaw.spec.program.description import Value
    >>> mesh = Mesh.iota((8,), ("x",))
    >>> propagation_mesh(Program((Value.placed((8,), NamedSharding(mesh, P("x"))),),
    ...                          outputs=(0,)))
    Mesh({'x': 8})
    >>> print(propagation_mesh(Program((Value.numpy((8,)),), outputs=(0,))))
    [PROP-1]: input 0 is not placed on a NamedSharding it is committed to (the compiler may choose its placement)
    """
    if program.consts:
        return Undetermined("PROP-1", "closed-over constants are not propagated yet")
    if any(s is not UNSPECIFIED for s in program.out_shardings):
        return Undetermined("PROP-1", "out shardings are propagated backward by priority, "
                            "which is not written yet")
    meshes = []
    for k, value in enumerate(program.inputs):
        given = program.in_shardings[k] if program.in_shardings else UNSPECIFIED
        sharding = given if given is not UNSPECIFIED else (
            value.sharding if (value.committed or value.abstract) else None)
        if not (isinstance(sharding, NamedSharding) and sharding.is_concrete):
            return Undetermined("PROP-1", f"input {k} is not placed on a NamedSharding it is "
                                f"committed to (the compiler may choose its placement)")
        if sharding.spec.unreduced or sharding.spec.reduced:
            return Undetermined("PROP-1", f"input {k} has unreduced or reduced axes")
        meshes.append(sharding.mesh)
    if not meshes or any(m != meshes[0] for m in meshes):
        return Undetermined("PROP-1", "the inputs are not all placed over one mesh")
    mesh = meshes[0]
    if any(t is not AxisType.Auto for t in mesh.axis_types):
        return Undetermined("PROP-1", "a mesh with Explicit or Manual axes is not propagated "
                            "yet")
    return mesh


def _input_split(program: Program, k: int) -> Split:
    given = program.in_shardings[k] if program.in_shardings else UNSPECIFIED
    sharding = given if given is not UNSPECIFIED else program.inputs[k].sharding
    rank = len(program.inputs[k].shape)
    parts = tuple(sharding.spec.partitions) + (None,) * rank
    return tuple(() if p is None else ((p,) if isinstance(p, str) else tuple(p))
                 for p in parts[:rank])


# --------------------------------------------------------------------------- one equation

@rule("PROP-2", mirrors="shardy: getCompatibleMajorShardingAxes (basic propagation)")
def factor_split(proposals: list[tuple[str, ...]]) -> tuple[str, ...]:
    """A factor's split is the longest of the splits its tensors give it when each is a
    prefix of that one; when two conflict (neither a prefix of the other), the longest
    prefix they all share.

    >>> factor_split([("x",), (), ("x", "y")])
    ('x', 'y')
    >>> factor_split([("x",), ("y",)])
    ()
    >>> factor_split([("x", "y"), ("x", "z"), ()])   # an unsplit tensor does not cut it
    ('x',)
    """
    proposals = [p for p in proposals if p]
    longest = max(proposals, key=len, default=())
    if all(longest[:len(p)] == p for p in proposals):
        return longest
    shared = 0
    while all(len(p) > shared and p[shared] == longest[shared] for p in proposals):
        shared += 1
    return longest[:shared]


def _sizes(rule_: Factors, tensors: tuple[tuple[int, ...], ...]) -> dict[str, int]:
    sizes = dict(rule_.sizes)
    for dims, shape in zip(rule_.operands + rule_.results, tensors):
        for name, size in zip(dims, shape):
            if "*" not in name:
                sizes.setdefault(name, size)
    return sizes


def _read(dim: str, axes: tuple[str, ...], sizes: dict, mesh: Mesh, path: str
          ) -> dict[str, tuple[str, ...]]:
    """The split each factor of a dimension gets from the dimension's axes, major first: a
    factor takes axes until it is split whole; an axis that does not divide what is left of
    its factor would be split across two (a sub-axis), which is not written."""
    out: dict[str, tuple[str, ...]] = {}
    factors, rest = factors_of_dimension(dim), list(axes)
    for f in factors:
        taken, ways = [], 1
        while rest and ways < sizes[f]:
            n = mesh.axis_size(rest[0])
            if sizes[f] % (ways * n):
                _stop("PROP-3", f"mesh axis {rest[0]!r} ({n}) does not divide what is left "
                      f"of a factor of size {sizes[f]}: the partitioner would split it into "
                      f"sub-axes", path)
            taken.append(rest.pop(0))
            ways *= n
        out[f] = tuple(taken)
        if rest and ways < sizes[f]:
            _stop("PROP-3", "a minor factor split while a major one is not split whole",
                  path)
    if rest:
        _stop("PROP-3", f"mesh axes {rest} split a dimension beyond its factors", path)
    return out


@rule("PROP-3", mirrors="shardy: the factor shardings projected onto a tensor")
def dimension_splits(dims: tuple[str, ...], factor_splits: dict, sizes: dict, mesh: Mesh
                     ) -> Split:
    """A dimension's split joins its factors' splits major to minor, a minor factor's only
    while every factor before it is split whole.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> dimension_splits(("f0*f1",), {"f0": ("x",), "f1": ("y",)}, {"f0": 8, "f1": 8}, mesh)
    (('x',),)
    >>> dimension_splits(("f0*f1",), {"f0": ("x", "y"), "f1": ()}, {"f0": 8, "f1": 8}, mesh)
    (('x', 'y'),)
    """
    out = []
    for dim in dims:
        axes: list[str] = []
        for f in factors_of_dimension(dim):
            split = factor_splits.get(f, ())
            axes += split
            if math.prod(mesh.axis_size(a) for a in split) != sizes[f]:
                break   # not split whole: a minor factor's split would not be contiguous
        out.append(tuple(axes))
    return tuple(out)


def _one_way(leading: list[tuple[str, ...]], following: list[tuple[str, ...]]
             ) -> tuple[str, ...]:
    """A factor's split propagated one way: the leading tensors' (PROP-2), cut where a
    following tensor's conflicts with it; the following ones never extend it."""
    split = factor_split(leading)
    for other in following:
        cut = 0
        while cut < min(len(split), len(other)) and split[cut] == other[cut]:
            cut += 1
        if cut < min(len(split), len(other)):
            split = split[:cut]
    return split


def _apply(rule_: Factors, numbers: tuple[int, ...], splits: dict, fixed: set,
           mesh: Mesh, types: tuple, path: str, directions: dict, grown: dict,
           priority: int) -> bool:
    """One equation's propagation step (PROP-2, PROP-3) along the factors ``directions``
    names (``both``, ``backward``): returns whether a value grew. ``grown``: the pass in
    which each value last grew."""
    tensors = rule_.operands + rule_.results
    count = len(rule_.operands)
    sizes = _sizes(rule_, tuple(tuple(t.shape) for t in types))
    current = []
    for dims, number in zip(tensors, numbers):
        read: dict[str, tuple[str, ...]] = {}
        for dim, axes in zip(dims, splits[number]):
            read.update(_read(dim, axes, sizes, mesh, path))
        current.append(read)
    chosen: dict[str, tuple[str, ...]] = {}
    for f, direction in directions.items():
        if f in rule_.replicated:
            continue
        operands = [t[f] for t in current[:count] if f in t]
        results = [t[f] for t in current[count:] if f in t]
        chosen[f] = factor_split(operands + results) if direction == "both" else \
            _one_way(results, operands)
        # Two splits of one factor in conflict, one of them grown in this very pass: which
        # the partitioner met first decides, and the order it visits operations in is its
        # own (a chain of converts reaching a multiply after, or before, an input's split).
        given = [(t[f], n) for t, n in zip(current, numbers) if f in t and t[f]]
        longest = max((g for g, _ in given), key=len, default=())
        if any(longest[:len(g)] != g for g, _ in given) and any(
                grown.get(n) == priority for _, n in given):
            _stop("PROP-4", "two splits of one factor conflict while one of them is still "
                  "growing: the partitioner's order of visiting operations decides", path)
    # An axis another factor holds, or would take, in a tensor of this factor: Shardy
    # cuts the split there, and what the partitioner then makes of the value is its own.
    for f, split in chosen.items():
        for t in current:
            if f not in t:
                continue
            for g, axes in t.items():
                if g != f and set(split) & (set(axes) | set(chosen.get(g, ()))):
                    _stop("PROP-4", f"a mesh axis of {sorted(set(split) & (set(axes) | set(chosen.get(g, ()))))} "
                          f"would split two factors of one equation; Shardy cuts the split "
                          f"and the partitioner places the rest by its own order", path)
    grew = False
    for k, (dims, number) in enumerate(zip(tensors, numbers)):
        if number in fixed:
            continue
        merged = dict(current[k])
        for f, split in chosen.items():
            if f in merged and split[:len(merged[f])] == merged[f]:
                merged[f] = split
        new = dimension_splits(dims, merged, sizes, mesh)
        old = splits[number]
        if new != old and all(n[:len(o)] == o for n, o in zip(new, old)):
            splits[number] = new
            grown[number] = priority
            grew = True
    return grew


# The partitioner's schedule (Shardy's op-priority propagation): each pass runs to a fixed
# point over the operations and factors it admits, and the next admits more.
PASSES = ("elementwise, reshape and transpose", "every factor passed through",
          "every factor")


def _directions(entry_name: str, kind: Any, rule_: Factors, priority: int) -> dict:
    """Per factor of an equation, the way it propagates in pass ``priority`` (absent: not
    in that pass)."""
    every = {f for dims in rule_.operands + rule_.results for dim in dims
             for f in factors_of_dimension(dim)}
    if kind is Kind.ELEMENTWISE or entry_name in ("reshape", "transpose"):
        return {f: "both" for f in every}
    if priority == 0:
        return {}
    passed = {f for f in every if f not in rule_.reduced and f not in rule_.replicated}
    if priority == 1:
        way = "backward" if entry_name == "broadcast_in_dim" else "both"
        return {f: way for f in passed}
    return {f: "both" for f in every}


# --------------------------------------------------------------------------- the program

@rule("PROP-4", mirrors="shardy: the propagation pass over a module (forward and backward)")
def propagate(program: Program) -> dict[int, Split] | Undetermined:
    """Each value's split is what the inputs' fixed splits leave after moving through every
    live equation's sharding rule, forward then backward, pass by pass of the partitioner's
    schedule, until nothing grows.

    A value's split only grows and an input's never changes; every live equation needs a
    sharding rule.

    >>> from shardlaw.spec import NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
    >>> b = Value.placed((8, 8), NamedSharding(mesh, P(None, "y")))
    >>> add = Opaque((0, 1), primitive="add", results=(Value.typed((8, 8)),))
    >>> propagate(Program((a, b), (add,), outputs=(2,)))[2]
    (('x',), ('y',))
    """
    mesh = propagation_mesh(program)
    if isinstance(mesh, Undetermined):
        return mesh
    types = program.value_types
    splits: dict[int, Split] = {k: _input_split(program, k) for k in range(len(program.inputs))}
    fixed = set(splits)
    steps = []
    live = live_parts(program).equations   # what JAX lowers: dead equations propagate nothing
    if program.keep_unused and not all(live):
        return Undetermined("PROP-4", "a jit that keeps unused inputs lowers its dead "
                            "equations too; whether they propagate is not written")
    for k, (eq, numbers) in enumerate(zip(program.equations, program.result_numbers())):
        path = f"body[{k}]"
        if not live[k]:
            continue
        sharding = entry_of(eq).sharding
        if isinstance(sharding, NotPropagated):
            return Undetermined("PROP-4", f"{_name(eq)}: {sharding.why}", path)
        operands = tuple(types[n] for n in eq.operands)
        rule_ = sharding(eq, operands) if callable(sharding) else sharding
        if isinstance(rule_, NotPropagated):
            return Undetermined("PROP-4", f"{_name(eq)}: {rule_.why}", path)
        for n in numbers:
            splits[n] = ((),) * len(types[n].shape)
        every = tuple(eq.operands) + tuple(numbers)
        steps.append((entry_of(eq), rule_, every, tuple(types[n] for n in every), path))
    grown: dict[int, int] = {}
    try:
        for priority in range(len(PASSES)):
            if not _settle(steps, splits, fixed, mesh, priority, grown):
                return Undetermined("PROP-4", f"propagation did not settle ({PASSES[priority]})")
    except _Stop as stopped:
        return stopped.undetermined
    return splits


def _settle(steps: list, splits: dict, fixed: set, mesh: Mesh, priority: int,
            grown: dict) -> bool:
    """One pass of the schedule, forward then backward until nothing grows."""
    for _ in range(2 * len(steps) + 2):
        grew = False
        for entry, rule_, every, typed, path in steps + steps[::-1]:
            directions = _directions(entry.name, entry.kind, rule_, priority)
            if directions:
                grew |= _apply(rule_, every, splits, fixed, mesh, typed, path, directions,
                               grown, priority)
        if not grew:
            return True
    return False


def _name(eq: Any) -> str:
    return getattr(eq, "primitive", "") or eq.kind


@rule("PROP-5", mirrors="jax._src.interpreters.pxla: the executable's output shardings")
def predicted_results(program: Program) -> tuple[Split, ...] | Undetermined:
    """A result the compiler places is on its value's propagated split, where propagation
    determines it.

    >>> from shardlaw.spec import NamedSharding, P
    >>> from shardlaw.spec.program.description import Value
    >>> mesh = Mesh.iota((8,), ("x",))
    >>> predicted_results(Program((Value.placed((8,), NamedSharding(mesh, P("x"))),),
    ...                           outputs=(0,)))
    ((('x',),),)
    """
    splits = propagate(program)
    if isinstance(splits, Undetermined):
        return splits
    return tuple(splits[n] for n in program.outputs)


def predicted_sharding(program: Program, split: Split) -> NamedSharding:
    """The NamedSharding a predicted split is over the propagation's mesh."""
    mesh = propagation_mesh(program)
    return NamedSharding(mesh, PartitionSpec(*(
        None if not axes else (axes[0] if len(axes) == 1 else axes) for axes in split)))


def predicted_choices(program: Program) -> tuple:
    """Per output, the HLO sharding PROP-5 predicts the compiler gives it (None where
    propagation does not determine it): what explain reads for a result left to the
    compiler (OUT-1, OUT-2). The rules it applies to build them are the spec's, not
    JAX's: a jit's trace does not list them."""
    with tracing():
        found = predicted_results(program)
        if isinstance(found, Undetermined):
            return (None,) * len(program.outputs)
        types = program.value_types
        return tuple(to_hlo(predicted_sharding(program, split), len(types[n].shape))
                     for split, n in zip(found, program.outputs))


def undetermined_results(program: Program, paths: tuple, shardings: tuple) -> tuple:
    """(path, reason) of each result still UNSPECIFIED: the reason propagation gives."""
    open_ = [p for p, s in zip(paths, shardings) if s is UNSPECIFIED]
    if not open_:
        return ()
    with tracing():
        found = predicted_results(program)
    why = str(found) if isinstance(found, Undetermined) else "propagation left it open"
    return tuple((p, why) for p in open_)


def tensor_factor_splits(rule_: Factors, types: tuple, index: int, split: Split,
                         mesh: Mesh) -> dict[str, tuple[str, ...]]:
    """Each factor's split as tensor ``index`` of an equation's operands and results
    (``types``, in that order) gives it when the tensor is split ``split`` (PROP-3's
    reading, for the collectives read off a propagated program)."""
    sizes = _sizes(rule_, tuple(tuple(t.shape) for t in types))
    out: dict[str, tuple[str, ...]] = {}
    for dim, axes in zip((rule_.operands + rule_.results)[index], split):
        out.update(_read(dim, axes, sizes, mesh, ""))
    return out


def factor_sizes(rule_: Factors, types: tuple) -> dict[str, int]:
    """Each factor's size in an equation of operand and result ``types``."""
    return _sizes(rule_, tuple(tuple(t.shape) for t in types))
