"""Where the compiler decides: sharding propagation over a program's body (issue 33).

JAX 0.10.2 hands a result it does not place itself to the partitioner (Shardy): each
operation has a sharding rule over the factors of its dimensions (the primitive table's
``sharding`` slot, :mod:`~shardlaw.spec.program.sharding_factors`), and propagation moves
the inputs' splits forward and backward through the body until nothing changes. This
module does the same over a body whose every equation has a rule (inner jits, control
flow and full-manual shard_maps entered or seen at their boundaries), over one mesh —
concrete or abstract, of any size: no device is read — of Auto axes, Explicit ones beside
them held by the values' types, and gives each result's split — or, where the program does
not determine it (an equation without a rule, a placement the user wrote the partitioner
may move or not, a split it resolves by its own order), an :class:`Undetermined` naming
the rule and the reason. It never guesses: every case it answers is held to the
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

import collections
import dataclasses
import functools
import math
from typing import Any

from ..core.rules import rule, tracing
from ..core.shardings import UNCONSTRAINED, UNSPECIFIED, NamedSharding
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec
from ..placement.blocks import to_hlo
from .description import Program
from .lowering import live_parts
from .primitives import Factors, Kind, NotPropagated, entry_of, entry_of_name
from .sharding_factors import (
    ELEMENTWISE_NAMES, SHARDING_ONLY_ELEMENTWISE, factors_of_dimension, same_dimensions_factors,
)

# The equations whose bodies propagation enters (propagation_flow.py).
FLOW_KINDS = frozenset(("scan", "while", "cond", "remat2", "custom_jvp_call", "custom_vjp_call"))

# A step linking two values dimension for dimension (a copy: elementwise).
COPY = _COPY = entry_of_name("copy")

# What the schedule's first pass admits besides the table's elementwise primitives.
ELEMENTWISE_FIRST = frozenset(("reshape", "transpose", *ELEMENTWISE_NAMES,
                               *SHARDING_ONLY_ELEMENTWISE))

__all__ = ["Undetermined", "Split", "propagation_mesh", "factor_split", "dimension_splits",
           "propagate", "predicted_results", "predicted_sharding", "predicted_choices",
           "undetermined_results", "equation_splits", "flatten", "Flat", "placed_pin",
           "inline_body", "stop", "FLOW_KINDS", "COPY", "ORDER_DECIDES"]

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
def propagation_mesh(program: Program, opened=frozenset()) -> Mesh | AbstractMesh | Undetermined:
    """Propagation is predicted over one mesh, concrete or abstract, of Auto and Explicit axes that every input is placed on and every out sharding is over; closed-over constants are scalars.

    An input is placed by an in sharding, a committed NamedSharding or a ShapeDtypeStruct's
    one, without unreduced axes or UNCONSTRAINED dimensions (``opened`` ones grow as any
    value: PROG-11). Nothing reads devices: an abstract mesh is propagated as a concrete one.

    >>> from shardlaw.spec import NamedSharding, P
    >>> from shardlaw.spec.program.description import Value
    >>> mesh = Mesh.iota((8,), ("x",))
    >>> propagation_mesh(Program((Value.placed((8,), NamedSharding(mesh, P("x"))),),
    ...                          outputs=(0,)))
    Mesh({'x': 8})
    >>> big = AbstractMesh((256, 256), ("data", "model"))
    >>> propagation_mesh(Program((Value.shape_dtype((512,), sharding=NamedSharding(
    ...     big, P("data"))),), outputs=(0,)))
    AbstractMesh({'data': 256, 'model': 256})
    >>> print(propagation_mesh(Program((Value.numpy((8,)),), outputs=(0,))))
    [PROP-1]: input 0 is not placed on a NamedSharding it is committed to (the compiler may choose its placement)
    """
    return program.derived_once(f"mesh {sorted(opened)}", lambda: _mesh_of(program, opened))


def _mesh_of(program: Program, opened: frozenset) -> Mesh | AbstractMesh | Undetermined:
    """PROP-1's answer, worked out once per program (explain asks it many times)."""
    if any(c.ref or c.value.shape for c in program.consts):
        return Undetermined("PROP-1", "closed-over constants other than scalars are not "
                            "propagated yet")
    meshes = []
    for k, value in ((k, v) for k, v in enumerate(program.inputs) if k not in opened):
        given = program.in_shardings[k] if program.in_shardings else UNSPECIFIED
        sharding = given if given is not UNSPECIFIED else (
            value.sharding if (value.committed or value.abstract) else None)
        if not isinstance(sharding, NamedSharding):
            return Undetermined("PROP-1", f"input {k} is not placed on a NamedSharding it is "
                                f"committed to (the compiler may choose its placement)")
        if sharding.spec.unreduced or sharding.spec.reduced:
            return Undetermined("PROP-1", f"input {k} has unreduced or reduced axes")
        if _placed_split(sharding, sharding.mesh, len(value.shape)) is None:
            return Undetermined("PROP-1", f"input {k}'s sharding leaves dimensions open")
        meshes.append(sharding.mesh)
    if not meshes or any(m != meshes[0] for m in meshes):
        return Undetermined("PROP-1", "the inputs are not all placed over one mesh")
    mesh = meshes[0]
    if any(t is AxisType.Manual for t in mesh.axis_types):
        return Undetermined("PROP-1", "a mesh with Manual axes is not propagated yet")
    for j, given in enumerate(program.out_shardings):
        if given is not UNSPECIFIED and placed_pin(given, mesh, 0) is None:
            return Undetermined("PROP-1", f"out sharding {j} is not a NamedSharding over the "
                                f"inputs' mesh without unreduced axes")
    return mesh


@functools.lru_cache(maxsize=1024)   # (a step's inputs share a few shardings)
def _placed_split(sharding: Any, mesh: Any, rank: int) -> Split | None:
    """The split a placement the user wrote gives a value of ``rank`` dimensions (None: not
    a NamedSharding over ``mesh``, or with dimensions left to the compiler)."""
    pin = placed_pin(sharding, mesh, rank)
    if pin is None or any(pin[1]):
        return None
    return pin[0]


def placed_pin(sharding: Any, mesh: Any, rank: int, loose: frozenset = frozenset()
               ) -> tuple[Split, tuple[bool, ...]] | None:
    """The split a placement the user wrote gives a value of ``rank`` dimensions and which
    of its dimensions are left open to propagation (UNCONSTRAINED, or named in ``loose``);
    None: not a NamedSharding over ``mesh`` (or its abstract mesh) without unreduced axes.

    >>> from shardlaw.spec import NamedSharding, P, UNCONSTRAINED
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> placed_pin(NamedSharding(mesh.abstract, P("x", UNCONSTRAINED)), mesh, 3)
    ((('x',), (), ()), (False, True, False))
    """
    if isinstance(sharding, NamedSharding) and sharding.mesh.abstract != mesh.abstract:
        sharding = _over_the_inputs_mesh(sharding, mesh, rank)   # (PROP-12)
    if not (isinstance(sharding, NamedSharding) and sharding.mesh.abstract == mesh.abstract):
        return None
    spec = sharding.spec
    if spec.unreduced or spec.reduced:
        return None
    parts = tuple(spec.partitions) + (None,) * rank
    opens = tuple(p is UNCONSTRAINED or d in loose for d, p in enumerate(parts[:rank]))
    # an axis of size 1 splits nothing: the partitioner places alike without it
    split = tuple(() if p is None or p is UNCONSTRAINED else tuple(
        a for a in ((p,) if isinstance(p, str) else p) if mesh.axis_size(a) != 1)
        for p in parts[:rank])
    return split, opens


def _input_split(program: Program, k: int) -> Split:
    given = program.in_shardings[k] if program.in_shardings else UNSPECIFIED
    sharding = given if given is not UNSPECIFIED else program.inputs[k].sharding
    return _placed_split(sharding, sharding.mesh, len(program.inputs[k].shape))


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
    >>> factor_split([("z", "x"), ("z", "y"), ()])
    ('z',)
    """
    proposals = [p for p in proposals if p]
    longest = max(proposals, key=len, default=())
    if all(longest[:len(p)] == p for p in proposals):
        return longest
    split = [p for p in proposals if p]   # an unsplit tensor does not shorten the prefix
    shared = 0
    while all(len(p) > shared and p[shared] == longest[shared] for p in split):
        shared += 1
    return longest[:shared]


def _sizes(rule_: Factors, tensors: tuple[tuple[int, ...], ...]) -> dict[str, int]:
    """Each factor's size: a reshape's as its rule gives them; a factor alone in its
    dimensions, the greatest size dividing them all (a slice's or a pad's differ)."""
    sizes = dict(rule_.sizes)
    found: dict[str, int] = {}
    for dims, shape in zip(rule_.operands + rule_.results, tensors):
        for name, size in zip(dims, shape):
            if "*" not in name and name not in sizes:
                found[name] = math.gcd(found.get(name, 0), size)
    return {**found, **sizes}


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
                      f"of a factor of size {sizes[f]} (the greatest dividing its "
                      f"dimensions): the partitioner would split it into sub-axes or "
                      f"unevenly", path)
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


def _apply(rule_: Factors, numbers: tuple[int, ...], splits: dict, fixed: "Limits",
           mesh: Mesh, step: "_StepMemo", path: str, directions: dict, grown: dict,
           priority: int) -> list[tuple[int, Split]]:
    """One equation's propagation step (PROP-2, PROP-3) along the factors ``directions``
    names: the (tensor, split) of each value that grew, in order (empty: none). ``grown``:
    the pass in which each value last grew; ``step``: what the equation's types fix and
    the reads met so far; ``fixed``: the values placed whole or in part, the barred axes."""
    form = step.form
    tensors, holders, read = form.tensors, form.holders, form.read
    current = [read(i, dims, splits[number], mesh, path)
               for i, (dims, number) in enumerate(zip(tensors, numbers))]
    chosen: dict[str, tuple[str, ...]] = {}
    for f, direction in directions.items():
        if f in rule_.replicated:
            continue
        at_operands, at_results = holders[f]
        operands = [current[i][f] for i in at_operands]
        results = [current[i][f] for i in at_results]
        given = [(current[i][f], numbers[i]) for i in at_operands + at_results
                 if current[i][f]]
        if not given:
            chosen[f] = ()   # (no tensor splits it: nothing to merge, nothing in conflict)
            continue
        if len(given) == 1 and direction == "both":
            chosen[f] = given[0][0]   # (one split alone: PROP-2 keeps it)
            continue
        if direction == "prefer":   # (a conflict with the leader is settled: PROP-13, 22)
            given = [(current[i][f], numbers[i]) for i in at_operands[1:] if current[i][f]
                     and not _conflict(current[i][f], current[at_operands[0]][f])]
        chosen[f] = _chosen(direction, operands, results)
        # Two splits of a factor in conflict, one grown in this pass: the partitioner's order
        # decides (converts before or after an input's split); ``fixed.contested``: go on.
        if len(given) > 1 and AxisType.Explicit in mesh.axis_types and any(
                _conflict(g, h) for g, _ in given for h, _ in given) and _may_grow(
                f, chosen[f], tensors, numbers, current, fixed, extend=True):
            _stop("PROP-4", "two splits of one factor conflict on a mesh with Explicit axes: "
                  "how the partitioner resolves it beside a type is not written", path)
        if len(given) > 1 and any(_conflict(g, _takes(h, fixed, n)) for g, n in given
                                  if grown.get(n) == priority and n not in fixed.chains
                                  for h, _ in given):   # (PROP-15: chains come first)
            if fixed.contested is None:
                _stop("PROP-4", ORDER_DECIDES, path)
            fixed.contested.append(numbers)
    targets = [chosen] * len(tensors)
    if _axes_apart({f: split for f, split in chosen.items()
                    if _may_grow(f, split, tensors, numbers, current, fixed)}, current):
        targets = _resolve_apart(form, current, chosen, directions, numbers, fixed, grown,
                                 priority, path, mesh)   # (PROP-14)
    targets = _sideways(targets, rule_, holders, current, numbers, fixed.held)   # (PROP-18)
    return _grow(form, numbers, current, targets, splits, fixed, mesh, path, grown, priority)


def _grow(form: "_StepForm", numbers: tuple, current: list, targets: list, splits: dict,
          fixed: "Limits", mesh: Mesh, path: str, grown: dict, priority: int) -> list:
    """Each tensor of a step grown to its target factor splits where they extend its own:
    the (tensor, split) of each value that grew, in order."""
    grew = []
    for k, (dims, number) in enumerate(zip(form.tensors, numbers)):
        if number in fixed.closed:
            continue
        read = current[k]
        longer = {f: split for f, split in targets[k].items() if f in read
                  and split != read[f] and split[:len(read[f])] == read[f]}
        if not longer:   # (a read projects back onto the split it was read from)
            continue
        merged = {**read, **longer}
        new = _grown(number, dimension_splits(dims, merged, form.sizes, mesh), splits, fixed,
                     path)
        if new is not None:
            splits[number] = new
            grown[number], fixed.by[number] = priority, numbers
            grew.append((k, new))
    return grew


@dataclasses.dataclass(frozen=True)
class Limits:
    """What propagation may not change: the values placed whole (``closed``), the open
    dimensions of each value placed in part (``open``: a constraint's UNCONSTRAINED
    dimensions, a type's Explicit axes beside Auto ones) and the axes each value may not
    take (``barred``: Explicit axes its type does not hold)."""

    closed: frozenset
    open: dict
    barred: dict
    contested: list | None = None   # the steps of such conflicts met (None: stop at one)
    by: dict = dataclasses.field(default_factory=dict)   # (the step each value last grew by)
    chains: frozenset = frozenset()   # (values settled before their reader: PROP-15)
    held: frozenset = frozenset()   # the closed values not placed by an out sharding (PROP-18)

    def state(self, number: int) -> tuple:
        """What of value ``number`` the limits fix (a step's outcome depends on it)."""
        return (number in self.closed, self.open.get(number), self.barred.get(number),
                number in self.held)


ORDER_DECIDES = ("two splits of one factor conflict while one of them is still growing: the "
                 "partitioner's order of visiting operations decides")


# --------------------------------------------------------------------------- the program

@rule("PROP-4", mirrors="shardy: the propagation pass over a module (forward and backward)")
def propagate(program: Program, opened=frozenset(), contested: bool = False
              ) -> dict[int, Split] | Undetermined:
    """Each value's split is what the placements the user wrote leave after moving through
    every live equation's sharding rule, forward then backward, pass by pass of the
    partitioner's schedule, until nothing grows.

    A value's split only grows and a placed one's never changes (PROP-6 says which are
    placed); every live equation needs a sharding rule; an inner jit's body is propagated
    as part of the program.

    >>> from shardlaw.spec import NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
    >>> b = Value.placed((8, 8), NamedSharding(mesh, P(None, "y")))
    >>> add = Opaque((0, 1), primitive="add", results=(Value.typed((8, 8)),))
    >>> propagate(Program((a, b), (add,), outputs=(2,)))[2]
    (('x',), ('y',))

    ``contested``: a conflict the partitioner's order of visiting decides leaves the values
    it may reach (their Undetermined) rather than the whole program undetermined.
    """
    found = _propagated(program, opened, contested)
    if isinstance(found, Undetermined):
        return found
    flat, splits = found
    return {n: flat.contested.get(i, splits[i]) for n, i in enumerate(flat.ids)}


def _propagated(program: Program, opened: frozenset = frozenset(), contested: bool = False):
    """(the flat program, each value's split by its id), or why not."""
    def make() -> Any:
        mesh = propagation_mesh(program, opened)
        if isinstance(mesh, Undetermined):
            return mesh
        live = program.derived_once("live parts", lambda: live_parts(program)).equations
        if program.keep_unused and not all(live):
            return Undetermined("PROP-4", "a jit that keeps unused inputs lowers its dead "
                                "equations too; whether they propagate is not written")
        flat = flatten(program, mesh, opened)
        if isinstance(flat, Undetermined):
            return flat
        try:
            splits = {i: flat.fixed.get(i, ((),) * len(t.shape))
                      for i, t in enumerate(flat.types)}
            grown: dict[int, int] = {}
            memo = _Memo(flat.steps)   # per step, across the passes (_settle)
            closed = frozenset(set(flat.fixed) - set(flat.open))
            limits = Limits(closed, flat.open, flat.barred, [] if contested else None,
                            chains=_chains(flat.steps, flat.equations, closed, flat.outputs),
                            held=closed - flat.returned)
            for priority in range(len(PASSES)):
                if not _settle(flat.steps, splits, limits, mesh, priority, grown, memo):
                    return Undetermined("PROP-4", f"propagation did not settle "
                                        f"({PASSES[priority]})")
            _check_unsplit(flat.steps, splits)
            _check_joins(flat, splits)
            _check_folded(flat, splits)   # (a literal's identity folded first: PROP-27)
        except _Stop as stopped:
            return stopped.undetermined
        flat.contested.update(_contested(flat, limits))
        return flat, splits
    key = f"propagation {sorted(opened)}" if opened else "propagation"
    return program.derived_once(key + " contested" * contested, make)


def _check_unsplit(steps: list, splits: dict) -> None:
    """A factor the partitioner needs unsplit (named ``n…``: a sort's dimension) that ends
    split in a tensor is resharded by the partitioner's own choice: undetermined."""
    named: dict[int, bool] = {}   # per rule: whether a dimension of it is named n…
    for _, rule_, every, _, path, _ in steps:
        found = named.get(id(rule_))
        if found is None:
            found = named[id(rule_)] = any(d.startswith("n") for dims in rule_.operands
                                           + rule_.results for d in dims)
        if not found:
            continue
        for dims, number in zip(rule_.operands + rule_.results, every):
            if any(axes and d.startswith("n") for d, axes in zip(dims, splits[number])):
                _stop("PROP-4", "a dimension the operation needs unsplit (a sort's) is "
                      "split: the partitioner moves or gathers it by its own choice", path)


@dataclasses.dataclass
class Flat:
    """A program with its inner jits' bodies inlined, over value ids: each value's type,
    the steps (equations with a sharding rule) that propagate, the splits the user placed
    (PROP-6), the id of each of the program's own values, and the path, operand ids and
    result ids of every equation propagated (inner ones and constraints included)."""

    types: list = dataclasses.field(default_factory=list)
    steps: list = dataclasses.field(default_factory=list)
    fixed: dict = dataclasses.field(default_factory=dict)
    ids: list = dataclasses.field(default_factory=list)
    equations: list = dataclasses.field(default_factory=list)
    live: set = dataclasses.field(default_factory=set)
    constants: set = dataclasses.field(default_factory=set)
    open: dict = dataclasses.field(default_factory=dict)
    barred: dict = dataclasses.field(default_factory=dict)
    bounded: set = dataclasses.field(default_factory=set)
    moves: list = dataclasses.field(default_factory=list)
    joins: list = dataclasses.field(default_factory=list)
    rules: dict = dataclasses.field(default_factory=dict, repr=False)
    reshaped: dict = dataclasses.field(default_factory=dict)
    broadcasts: dict = dataclasses.field(default_factory=dict)   # (result: operand, where)
    concats: dict = dataclasses.field(default_factory=dict)   # (result: operands, dimension)
    contested: dict = dataclasses.field(default_factory=dict)
    led: list = dataclasses.field(default_factory=list)   # (joins a constraint leads: PROP-13)
    edges: list = dataclasses.field(default_factory=list)  # (every join and led join, in order)
    returned: set = dataclasses.field(default_factory=set)  # (placed by an out sharding)
    written: set = dataclasses.field(default_factory=set)  # (a user constraint's results)
    loops: list = dataclasses.field(default_factory=list)  # (consts, initials, carries, path, ys)
    outputs: list = dataclasses.field(default_factory=list)  # (the program's results' ids)
    held_outs: list = dataclasses.field(default_factory=list)  # (left to PROP-26: an out sharding)

    def new(self, value: Any) -> int:
        self.types.append(value)
        return len(self.types) - 1

    def rule_of(self, read: Any, eq: Any, operands: tuple) -> Any:
        """``read(eq, operands)``: the sharding rule of an equation, read once per form of
        equation over operands of one type (a model's layers repeat them)."""
        try:
            key = (read, eq.form, operands)
            found = self.rules.get(key)
        except TypeError:   # (a parameter that is not hashable: read afresh)
            return read(eq, operands)
        if found is None:
            found = self.rules[key] = read(eq, operands)
        return found


@rule("PROP-6", mirrors="shardy's import of sharding constraints and result shardings")
def flatten(program: Program, mesh: Mesh, opened=frozenset()) -> Flat | Undetermined:
    """The user's placements are fixed splits: the inputs', a constraint's result, the
    value a closed constraint holds unless placed or held by a constraint of another split,
    and the value an out sharding holds where that is its only use.

    Shardy's import moves such a sharding onto the value it holds; a constraint is also a
    step its operand's and result's splits propagate through (a later constraint reaches
    an earlier one's UNCONSTRAINED dimensions so), and the uses after a chain of
    constraints read its last value. Inner jits without shardings of their own are inlined.

    Gives the reason instead where a live equation is not read: a constraint or an inner
    jit's shardings it does not propagate, an equation without a sharding rule.

    >>> from shardlaw.spec import NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, ShardingConstraint, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8, 8), NamedSharding(mesh, P()))
    >>> sin = Opaque((0,), primitive="sin", results=(Value.typed((8, 8)),))
    >>> cos = Opaque((1,), primitive="cos", results=(Value.typed((8, 8)),))
    >>> put = ShardingConstraint((2,), sharding=NamedSharding(mesh, P(None, "y")))
    >>> program = Program((a,), (sin, cos, put), outputs=(1, 3))
    >>> sorted(flatten(program, mesh).fixed.items())   # the constraint moved onto cos's value
    [(0, ((), ())), (2, ((), ('y',))), (3, ((), ('y',)))]
    >>> propagate(program)[1]                          # and carried back to sin's
    ((), ('y',))
    """
    flat = Flat()
    try:
        flat.types.extend(program.inputs)
        ids = list(range(len(program.inputs)))   # (an input ``opened`` grows as any value)
        flat.fixed.update({k: _input_split(program, k) for k in ids if k not in opened})
        for c in program.consts:
            ids.append(flat.new(c.value))
            flat.fixed[ids[-1]] = ()
            flat.constants.add(ids[-1])
        constraints: list = []
        flat.ids = _inline(program, ids, "", flat, mesh, constraints)
        outputs = flat.outputs = [flat.ids[n] for n in program.outputs]
        _prune(flat, constraints, outputs)
        _split_constants(flat, outputs, constraints)   # (propagation_constants.py: PROP-16)
        for step in flat.steps:
            if isinstance(step[1], Undetermined):
                raise _Stop(step[1])
    except _Stop as stopped:
        return stopped.undetermined
    placed = _place(flat, constraints, outputs, _out_shardings(program, mesh), mesh)
    if placed is None:
        placed = _typed(flat, mesh)
        _unbar(flat)
    return flat if placed is None else placed


def _place(flat: Flat, constraints: list, outputs: list, out_shardings: tuple, mesh: Mesh
           ) -> Undetermined | None:
    """PROP-6's fixed splits of the constraints' values and of the out shardings' (None:
    placed), or why not."""
    moved = _move(flat, mesh)
    if moved is not None:
        return moved
    uses = collections.Counter(outputs)
    for step in flat.steps:
        uses.update(step[2][:step[5]])
    uses.update(c[0] for c in constraints)
    constrained = _place_constraints(flat, constraints, outputs)
    if constrained is not None:
        return constrained
    placed = {n: given for n, given in zip(outputs, out_shardings)
              if given is not UNSPECIFIED}
    if any(n in placed for n, given in zip(outputs, out_shardings or
                                            (UNSPECIFIED,) * len(outputs))
           if given is UNSPECIFIED):
        return Undetermined("PROP-6", "a value returned twice, once under an out sharding "
                            "and once left open: where the open one is placed is the "
                            "compiler's choice")
    for n, given in zip(outputs, out_shardings):
        if given is not UNSPECIFIED and any(placed_pin(given, mesh, len(
                flat.types[n].shape))[1]):
            # (vmap's batching makes them; seen: P(UNCONSTRAINED, 'x') not kept at all)
            return Undetermined("PROP-6", "an out sharding with UNCONSTRAINED dimensions is "
                                "not propagated yet")
        if given is UNSPECIFIED or n in flat.fixed and not _open(flat, n, given, uses[n]):
            continue
        if uses[n] != 1:
            return Undetermined("PROP-6", "an out sharding on a value with other uses: "
                                "whether the partitioner moves it onto the value is not "
                                "determined by the spec yet")
        _pin(flat, n, *placed_pin(given, mesh, len(flat.types[n].shape)))
        flat.returned.add(n)   # (kept on the function's result: no sideways cut, PROP-18)
    return None


def _inline(program: Program, ids: list, prefix: str, flat: Flat, mesh: Mesh,
            constraints: list) -> list:
    """The ids of ``program``'s values, its equations added to ``flat`` (PROP-6)."""
    types = program.value_types
    for k, (eq, numbers) in enumerate(zip(program.equations, program.result_numbers())):
        path, name = f"{prefix}body[{k}]", _name(eq)
        operands = [ids[n] for n in eq.operands]
        if eq.kind == "jit":
            ids += _inline_jit(eq.body, operands, path, flat, mesh, constraints)
            continue
        if eq.kind in FLOW_KINDS:
            from .propagation_flow import inline_flow   # (it builds on this module)
            ids += inline_flow(eq, operands, [types[n] for n in numbers], path, flat,
                               mesh, constraints)
            continue
        folded = _folded(eq, operands, types[numbers[0]] if numbers else None, flat, path)
        if folded is not None:
            ids.append(folded)
            continue
        results = [flat.new(types[n]) for n in numbers]
        ids += results
        flat.equations.append((path, name, tuple(operands), tuple(results)))
        if eq.kind == "shard_map":   # (propagation_shardmap.py: PROP-11)
            _shard_map(flat, eq, operands, results, mesh, path, constraints)
            continue
        entry = entry_of(eq)
        if eq.kind == "sharding_constraint" or (eq.kind == "reshard" and types[
                numbers[0]].shape):   # (a reshard lowers as a constraint to its type)
            pin, why = _constraint_pin(eq, types[eq.operands[0]], types[numbers[0]], mesh)
            if pin is not None:
                constraints.append((operands[0], results[0], pin, path))
                if eq.kind == "sharding_constraint":
                    flat.written.add(results[0])   # (lowered as written: PROP-19)
                continue
            rule_ = Undetermined("PROP-6", why, path)
        else:
            rule_ = entry.sharding
            if name == "dynamic_slice" and all(
                    i in flat.constants for i in operands[1:]):
                # constant starts: lowered to a dynamic_slice StableHLO folds into a slice
                rule_ = same_dimensions_factors
            if callable(rule_):
                rule_ = flat.rule_of(rule_, eq, tuple([types[n] for n in eq.operands]))
            if entry.effect is not None:   # a ref's write lives whatever reads it
                _stop("PROP-4", f"{_name(eq)}: it reads or writes a mutable ref", path)
            if isinstance(rule_, NotPropagated):
                rule_ = Undetermined("PROP-4", f"{_name(eq)}: {rule_.why}", path)
        if name == "broadcast_in_dim" and not isinstance(rule_, Undetermined):
            operands, rule_ = _rebroadcast(flat, eq, operands, results[0], rule_)
        if is_reshape(name, flat.types[operands[0]] if operands else None,
                      flat.types[results[0]] if results else None):
            flat.reshaped[results[0]] = operands[0]
        if name == "concatenate":   # (a slice of one operand's range folds to it)
            flat.concats[results[0]] = (tuple(operands), dict(eq.params)["dimension"])
        every = tuple(operands + results)
        flat.steps.append((entry, rule_, every, tuple([flat.types[i] for i in every]), path,
                           len(operands)))
    return ids


def _inline_jit(body: Program, operands: list, path: str, flat: Flat, mesh: Any,
                constraints: list, prefix: str = "") -> list:
    """The ids of an inner jit's results, its body inlined between its in and out
    shardings (PROP-6); ``prefix``: its equations' paths' (``{path}.jit.``)."""
    if any(c.ref or c.value.shape for c in body.consts):
        _stop("PROP-6", "an inner jit's closed-over constants other than scalars are not "
              "propagated yet", path)
    given = body.in_shardings or (UNSPECIFIED,) * len(operands)
    inner = [_boundary(flat, n, s, body.value_types[i], mesh, path, into=True)
             for i, (n, s) in enumerate(zip(operands, given))]
    inner += [flat.new(c.value) for c in body.consts]
    flat.fixed.update((i, ()) for i in inner[len(operands):])
    flat.constants.update(inner[len(operands):])
    inner = _inline(body, inner, prefix or f"{path}.jit.", flat, mesh, constraints)
    given = body.out_shardings or (UNSPECIFIED,) * len(body.outputs)
    return [_boundary(flat, inner[n], s, body.value_types[n], mesh, path)
            for n, s in zip(body.outputs, given)]


def _prune(flat: Flat, constraints: list, outputs: list) -> None:
    """Only the live equations propagate: jit eliminates dead code before lowering."""
    live = set(outputs)
    grew = True
    while grew:   # (results before operands: a body's values reach back in one sweep)
        grew = False
        for step in reversed(flat.steps):
            every, count = step[2], step[5]
            if live & set(every[count:]) and not set(every[:count]) <= live:
                live |= set(every[:count])
                grew = True
        for operand, result, _, _ in constraints:
            if result in live and operand not in live:
                live.add(operand)
                grew = True
    flat.steps[:] = [s for s in flat.steps if live & set(s[2][s[5]:])]
    flat.live = live
    constraints[:] = [c for c in constraints if c[1] in live]


def equation_splits(program: Program) -> tuple | Undetermined:
    """Every live equation's operands' and results' splits as propagation decided them:
    ``(path, primitive, operand splits, result splits)`` per equation, inner jits' bodies
    inlined (their equations at ``body[k].jit.body[j]``), in program order.

    >>> from shardlaw.spec import NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
    >>> neg = Opaque((0,), primitive="neg", results=(Value.typed((8, 8)),))
    >>> equation_splits(Program((a,), (neg,), outputs=(1,)))
    (('body[0]', 'neg', ((('x',), ()),), ((('x',), ()),)),)
    """
    found = _propagated(program)
    if isinstance(found, Undetermined):
        return found
    flat, splits = found
    return tuple((path, name, tuple(splits[i] for i in operands),
                  tuple(splits[i] for i in results))
                 for path, name, operands, results in flat.equations
                 if flat.live & set(results))


def folded_equations(program: Program) -> frozenset[int] | Undetermined:
    """The positions of ``program``'s equations lowering folds away (a whole slice, a
    reshape back to the shape before a reshape) or that only folded ones read."""
    found = _propagated(program)
    if isinstance(found, Undetermined):
        return found
    kept = {p for p, _, _, results in found[0].equations if found[0].live & set(results)}
    return frozenset(k for k, eq in enumerate(program.equations) if eq.kind != "jit"
                     and eq.kind not in FLOW_KINDS and f"body[{k}]" not in kept)


def _settle(steps: list, splits: dict, fixed: "Limits", mesh: Mesh, priority: int,
            grown: dict, memo: "_Memo | None" = None) -> bool:
    """One pass of the schedule, forward then backward until nothing grows.

    ``memo``: what one propagation keeps across its passes (:class:`_Memo`): an equation
    none of whose values grew since it last left them unchanged, along the same directions,
    is not applied again (what it reads, and which of its values grew, are as they were)."""
    memo = _Memo(steps) if memo is None else memo
    order = list(range(len(steps)))
    order += order[::-1]
    memos = [memo.step(k) for k in range(len(steps))]
    for _ in range(2 * len(steps) + 2):
        grew = False
        for k in order:
            step = memos[k]
            directions = step.directions[priority]
            if not directions or (step.idle is directions and not step.dirty):
                continue
            step.dirty = False
            made = _applied(steps[k], step, splits, fixed, mesh, directions, grown, priority)
            if made:
                grew = True
                step.idle = None
                memo.touched(steps[k][2][t] for t, _ in made)
            else:
                step.idle = directions
        if not grew:
            return True
    return False


def _applied(at: tuple, step: "_StepMemo", splits: dict, fixed: "Limits", mesh: Mesh,
             directions: dict, grown: dict, priority: int) -> list[tuple[int, Split]]:
    """:func:`_apply` of one step, or what it did before where its form met the same
    splits, the same placed values and the same values grown in this pass."""
    _, rule_, every, _, path, _ = at
    if step.states is None:   # (the limits hold through one propagation)
        step.states = tuple([fixed.state(n) for n in every])
    key = (id(directions), tuple([splits[n] for n in every]), step.states,
           tuple([grown.get(n) == priority for n in every]),
           tuple([fixed.by.get(n) == every for n in every]))
    outcomes = step.form.outcomes
    found = outcomes.get(key)
    if found is None:
        met = len(fixed.contested or ())
        try:
            found = _apply(rule_, every, splits, fixed, mesh, step, path, directions, grown,
                           priority)
        except _Stop as stopped:
            outcomes[key] = stopped.undetermined
            raise
        outcomes[key] = (found,) if len(fixed.contested or ()) > met else found
        return found
    if isinstance(found, Undetermined):
        raise _Stop(dataclasses.replace(found, path=path))
    if isinstance(found, tuple):   # (a conflict the visiting order decides, met again)
        fixed.contested.append(every)
        found = found[0]
    for k, new in found:
        splits[every[k]] = new
        grown[every[k]], fixed.by[every[k]] = priority, every
    return found


class _Memo:
    """What one propagation keeps across its passes: per step its :class:`_StepMemo`, and
    per value the steps that read or write it (to wake them when it grows)."""

    def __init__(self, steps: list) -> None:
        self.steps = steps
        self.memos: list = [None] * len(steps)
        self.forms: dict = {}
        self.users: dict[int, list[int]] = collections.defaultdict(list)
        for k, step in enumerate(steps):
            for n in dict.fromkeys(step[2]):
                self.users[n].append(k)

    def step(self, k: int) -> "_StepMemo":
        found = self.memos[k]
        if found is None:   # equations of one form over one shape (a layer's; one rule
            entry, rule_, _, typed, _, _ = self.steps[k]   # object per form: Flat.rule_of)
            key = (entry.name, entry.kind, id(rule_), tuple([t.shape for t in typed]))
            form = self.forms.get(key)
            if form is None:
                form = self.forms[key] = _StepForm(entry, rule_, key[3])
            found = self.memos[k] = _StepMemo(form)
        return found

    def touched(self, grown: Any) -> None:
        """Values that grew: every step over them is applied again."""
        for n in grown:
            for k in self.users[n]:
                self.step(k).dirty = True


class _StepForm:
    """What an equation's rule and types fix, shared by the equations of one form over one
    shape (a model's layers): its factors' sizes, its directions in each pass (one object
    where two passes agree) and the factor splits read from each tensor's split."""

    def __init__(self, entry: Any, rule_: Factors, shapes: tuple) -> None:
        self.sizes = _sizes(rule_, shapes)
        ways: list[dict] = []
        for priority in range(len(PASSES)):
            found = _directions(entry.name, entry.kind, rule_, priority)
            ways.append(ways[-1] if ways and ways[-1] == found else found)
        self.directions = tuple(ways)
        self.reads: dict = {}
        self.outcomes: dict = {}   # what _apply did, by what it reads (_applied)
        self.tensors = rule_.operands + rule_.results
        self.name = entry.name
        self.count = count = len(rule_.operands)
        self.elementwise = entry.kind is Kind.ELEMENTWISE or entry.name in ELEMENTWISE_NAMES \
            or entry.name in SHARDING_ONLY_ELEMENTWISE   # (Shardy's isElementwise: PROP-14)
        # per factor, the operands and the results whose dimensions hold it, in order
        self.holders: dict[str, tuple[list[int], list[int]]] = {}
        for i, dims in enumerate(self.tensors):
            for f in dict.fromkeys(f for dim in dims for f in factors_of_dimension(dim)):
                self.holders.setdefault(f, ([], []))[i >= count].append(i)

    def read(self, index: int, dims: tuple[str, ...], split: Split, mesh: Mesh, path: str
             ) -> dict[str, tuple[str, ...]]:
        """The factor splits tensor ``index`` (of dimensions ``dims``) gives on ``split``."""
        found = self.reads.get((index, split))
        if found is None:
            found = {}
            for dim, axes in zip(dims, split):
                if axes:
                    found.update(_read(dim, axes, self.sizes, mesh, path))
                else:
                    found.update((f, ()) for f in factors_of_dimension(dim))
            self.reads[(index, split)] = found
        return found


class _StepMemo:
    """One equation's state in a propagation: its form (:class:`_StepForm`), the
    directions it last grew nothing along, and whether a value of it grew since."""

    def __init__(self, form: _StepForm) -> None:
        self.form = form
        self.directions = form.directions
        self.sizes = form.sizes
        self.read = form.read
        self.idle: dict | None = None
        self.dirty = False
        self.states: tuple | None = None   # its values' limits (_applied)


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
    mesh = propagation_mesh(program)
    return tuple(splits[n] if given is UNSPECIFIED or any(placed_pin(
                     given, mesh, len(program.value_types[n].shape))[1]) else
                 _placed_split(given, mesh, len(program.value_types[n].shape))
                 for n, given in zip(program.outputs, _out_shardings(program, mesh)))


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
                         mesh: Mesh) -> dict[str, tuple[str, ...]] | Undetermined:
    """Each factor's split as tensor ``index`` of an equation's operands then results
    (``types``) gives it on ``split`` (PROP-3's reading, for the collectives); an
    Undetermined where it does not read so (a control-flow equation's, one folded away)."""
    sizes = factor_sizes(rule_, types)
    out: dict[str, tuple[str, ...]] = {}
    try:
        for dim, axes in zip((rule_.operands + rule_.results)[index], split):
            out.update(_read(dim, axes, sizes, mesh, ""))
    except _Stop as stopped:
        return stopped.undetermined
    return out


def factor_sizes(rule_: Factors, types: tuple) -> dict[str, int]:
    """Each factor's size in an equation of operand and result ``types``."""
    return _sizes(rule_, tuple(tuple(t.shape) for t in types))


inline_body, stop = _inline_jit, _stop   # (the names propagation_flow.py builds on)
propagated = _propagated   # (the inlined program and its splits: collectives_explicit.py)

# What the user placed, at the boundaries (its own module for size; it builds on this one).
from .propagation_pins import (  # noqa: E402
    boundary as _boundary, folded as _folded, grown_split as _grown,
    rebroadcast as _rebroadcast, is_reshape, takes_of as _takes,
    implied_out_shardings as _out_shardings,
    axes_apart as _axes_apart, resolve_apart as _resolve_apart,
    constraint_pin as _constraint_pin,
    contested_values as _contested, may_grow as _may_grow, move_pins as _move, pin as _pin,
    place_constraints as _place_constraints,
    typed_pins as _typed,
)
from .propagation_shardmap import (  # noqa: E402
    held_result_open as _open, shard_map_boundary as _shard_map)
from .propagation_schedule import (  # noqa: E402
    PASSES, chosen as _chosen, conflict as _conflict, directions as _directions,
    forward_chains as _chains,
)
from .propagation_meshes import over_the_inputs_mesh as _over_the_inputs_mesh  # noqa: E402
from .propagation_flow import check_joins as _check_joins  # noqa: E402
from .propagation_constants import split_constants as _split_constants  # noqa: E402
from .propagation_constants import check_folded_constants as _check_folded  # noqa: E402
from .propagation_sideways import operand_splits as _sideways, unbar as _unbar  # noqa: E402
