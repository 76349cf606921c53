"""What a step with inner jits, shard_maps or reshards communicates (issue 33), over any
mesh — Auto axes, Explicit ones, or both.

:func:`~shardlaw.spec.program.collectives.predicted_collectives` reads a body equation by
equation; an inner jit, a full-manual shard_map and a reshard of arrays are not equations
with a sharding rule of their own: propagation inlines the jit's body between its in and
out shardings, meets the shard_map at its specs and reads a reshard as a constraint to its
type (PROP-6). This module reads the collectives off that inlined program, step by step in
program order (COLL-11): each equation of the jit's body as at top level (COLL-1
to COLL-3), each boundary — an in or out sharding, an in or out spec, a reshard or a
constraint — bringing its value from the split propagation gives it to the one the
boundary fixes (COLL-2), and a shard_map's body, over manual axes, communicating nothing
where it holds no collective (COLL-12).

>>> from shardlaw.spec import Mesh, NamedSharding, P
>>> from shardlaw.spec.program.description import Jit, Opaque, Program, Value
>>> mesh = Mesh.iota((2, 4), ("x", "y"))
>>> a = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
>>> inner = Program((Value.typed((8, 8)),), (Opaque((0,), primitive="sin",
...                 results=(Value.typed((8, 8)),)),), outputs=(1,),
...                 out_shardings=(NamedSharding(mesh, P()),))
>>> step = Program((a,), (Jit((0,), results=(Value.typed((8, 8)),), body=inner),),
...                outputs=(1,))
>>> print(inlined_collectives(step))   # (the out sharding moved onto sin's value: PROP-18)
1 collective(s) on cpu, 256 bytes per device
  all-gather over ('x',) at body[0].jit.body[0] (operand 0): float32[8, 8], 256 bytes per device
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.rules import rule
from ..core.values import Mesh
from .collectives import (
    DTYPE_BYTES, MANUAL_REDUCTIONS, Collective, Communication, ReplicaGroups, combined,
    constraint_plan, group_order, live_equations, plan_equation, read_after_a_chain,
    returned_reshards, wire_dtype,
)
from .collectives_boundaries import with_grown_returns
from .description import Program
from .primitives import entry_of
from .propagation import COPY, FLOW_KINDS, Undetermined, propagated, propagation_mesh
from .propagation_shardmap import LOCAL_ELEMENTWISE

__all__ = ["inlined_collectives", "manual_body_communicates", "has_inlined",
           "manual_reduction"]

# The primitives of a shard_map's body that communicate over its manual axes.
_MANUAL_COLLECTIVES = frozenset(("psum", "psum_invariant", "pmax", "pmin", "all_gather",
                                 "reduce_scatter", "all_to_all", "ppermute",
                                 "all_gather_invariant", "psum_scatter"))


def has_inlined(program: Program, live: tuple) -> bool:
    """Whether a live equation of ``program`` is an inner jit, a shard_map or a reshard of
    arrays (and none is control flow: its bodies are read elsewhere)."""
    kinds = {eq.kind for eq, alive in zip(program.equations, live) if alive}
    arrays = any(eq.kind == "reshard" and any(program.value_types[n].shape
                                              for n in eq.operands)
                 for eq, alive in zip(program.equations, live) if alive)
    return not kinds & FLOW_KINDS and bool(kinds & {"jit", "shard_map"} or arrays)


@rule("COLL-12", mirrors="xla: SpmdPartitioner (a manual computation's body is not partitioned)")
def manual_body_communicates(body: Program) -> bool:
    """A shard_map's body over manual axes communicates only through its own collectives
    (psum, all_gather, ppermute ...): the partitioner inserts none inside it.

    >>> from shardlaw.spec.program.description import Opaque, Program, Value
    >>> cos = Opaque((0,), primitive="cos", results=(Value.typed((4,)),))
    >>> manual_body_communicates(Program((Value.typed((4,)),), (cos,), outputs=(1,)))
    False
    """
    for eq in body.equations:
        name = getattr(eq, "primitive", "") or eq.kind
        if name in _MANUAL_COLLECTIVES:
            return True
        inner = getattr(eq, "body", None)
        if isinstance(inner, Program) and manual_body_communicates(inner):
            return True
    return False


def _equation_at(program: Program, path: str) -> Any:
    """The equation at ``path`` (``body[1].jit.body[0]``) of ``program``."""
    eq = None
    for part in path.split("."):
        if part.startswith("body["):
            eq = program.equations[int(part[5:-1])]
        else:   # (the nested body's kind: ``jit``, ``shard_map``)
            program = eq.body
    return eq


def _collective_at(program: Program, path: str) -> Any:
    """The body collective over manual axes at ``path`` (None: the equation there is none),
    through any body: a jit's, a shard_map's, a loop's, a cond's branches."""
    eq = None
    for part in path.split("."):
        if part.startswith("body["):
            eq = program.equations[int(part[5:-1])]
        elif part.startswith("branches["):
            program = eq.branches[int(part[9:-1])]
        elif eq.kind == "while" and part in ("cond", "body"):
            program = eq.cond if part == "cond" else eq.body_fun
        elif part == eq.kind and part not in ("cond", "while"):
            program = eq.body
    return eq if eq is not None and entry_of(eq).name in LOCAL_ELEMENTWISE else None


@rule("COLL-11", mirrors="shardy + xla: the collectives of a module with inlined calls")
def inlined_collectives(program: Program) -> Communication:
    """A step with inner jits, shard_maps or reshards communicates, in program order, its
    inlined equations' collectives and each boundary's reshard of its value to the split
    the boundary fixes.

    The boundaries are an inner jit's in and out shardings, a shard_map's in and out specs,
    a reshard (a constraint to its type) and a constraint; each is planned as COLL-2 plans
    a constraint, from the split propagation gives the value it holds.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Jit, Opaque, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> rows = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
    >>> body = Program((Value.typed((8, 8)),), (Opaque((0,), primitive="neg",
    ...                results=(Value.typed((8, 8)),)),), outputs=(1,),
    ...                in_shardings=(NamedSharding(mesh, P()),))
    >>> step = Program((rows,), (Jit((0,), results=(Value.typed((8, 8)),), body=body),),
    ...                outputs=(1,))
    >>> print(inlined_collectives(step))
    1 collective(s) on cpu, 256 bytes per device
      all-gather over ('x',) at body[0] (operand 0): float32[8, 8], 256 bytes per device
    """
    found = propagated(program)
    if isinstance(found, Undetermined):
        return Communication(undetermined=found)
    stopped = read_after_a_chain(program, live_equations(program))
    flat, splits = found
    splits = stopped or with_grown_returns(program, splits, by_id=True)   # (COLL-19)
    if isinstance(splits, Undetermined):
        return Communication(undetermined=splits)
    mesh = propagation_mesh(program)
    out, done, upstream, after, plans = [], set(), {}, {}, {}
    for (entry, rule_, every, typed, path, count) in _in_program_order(flat):
        results = every[count:]
        if entry is COPY or entry.name == "shard_map":
            made = _boundary(program, (entry, rule_), every, typed, path, splits, mesh, done)
        else:
            eq = _equation_at(program, path)
            if entry.name == "iota" or flat.constants & set(results):
                done.update(results)   # (computed where it is read: PROP-16)
            made = plan_equation(eq, every, flat.types, splits, mesh, path, done, plans)
        if isinstance(made, Undetermined):
            return Communication(tuple(out), undetermined=made)
        before = frozenset().union(*(upstream.get(n, frozenset()) for n in every[:count]))
        own = set()
        for c in made:
            if c.kind == "all-reduce":
                after[len(out)] = before
                own.add(len(out))
            out.append(c)
        for n in results:
            upstream[n] = before | own
    # the results, numbered as the program numbers them: a reshard made inside is reused
    number = {i: n for n, i in enumerate(flat.ids)}
    returned = returned_reshards(program, {n: splits[i] for n, i in enumerate(flat.ids)},
                                 mesh, {(number[i], s) for i, s in _pairs(done)
                                        if i in number})
    if isinstance(returned, Undetermined):
        return Communication(tuple(out), undetermined=returned)
    return Communication(combined(out + returned, after))


def _pairs(done: set) -> list:
    """The (value, split) reshards of ``done`` (its bare values are iotas')."""
    return [d for d in done if isinstance(d, tuple)]


def _in_program_order(flat: Any) -> list:
    """The live steps of the inlined program in program order: by the first value each
    makes (values are numbered as they are made), a shard_map after its in specs' links
    (made after its results)."""
    steps = [s for s in flat.steps if flat.live & set(s[2][s[5]:])]
    return sorted(steps, key=lambda s: max(s[2]) if s[0].name == "shard_map" else
                  min(s[2][s[5]:]))


def _boundary(program: Program, step: tuple, every: tuple, typed: tuple, path: str,
              splits: dict, mesh: Any, done: set) -> list | Undetermined:
    """The reshard a boundary makes of its value (a link of propagation: an inner jit's
    sharding, a constraint, a reshard, a shard_map's in spec leaving axes automatic), or a
    shard_map's body's (COLL-12), or a collective of a body leaving axes automatic
    (COLL-14); a held value and its body's local one are one value (PROP-11)."""
    entry, rule_ = step
    if entry is COPY and ".shard_map." in path:
        eq = _collective_at(program, path)
        if eq is not None:
            return manual_reduction(eq, every, typed, splits, mesh, path)
    if entry is COPY and rule_.sizes:   # (a held value and its local one: PROP-11)
        return []
    if entry is not COPY:
        eq = _equation_at(program, path)
        if manual_body_communicates(eq.body):
            return Undetermined("COLL-12", "a shard_map's body communicates over its manual "
                                "axes: its collectives are not read yet", path)
        return []
    operand, result = every
    need = splits[result]
    if splits[operand] == need or (operand, need) in done:
        return []
    done.add((operand, need))
    ((_, _, made),), _ = constraint_plan(typed, (splits[operand], need), mesh)
    if isinstance(made, Undetermined):
        return Undetermined(made.rule, made.why, path)
    return [_placed(c, path) for c in made]


@rule("COLL-14", mirrors="xla: SpmdPartitioner (a manual computation's collectives over its "
                         "manual axes, partitioned along the free ones)")
def manual_reduction(eq: Any, every: tuple, typed: tuple, splits: dict, mesh: Any, path: str
                     ) -> list | Undetermined:
    """A psum, pmax or pmin in the body of a shard_map leaving mesh axes automatic is one all-reduce over its manual axes of the body's value as the free axes split it; a pvary moves nothing.

    >>> from shardlaw.spec import Mesh
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> t = Value.typed((4, 8))
    >>> psum = Opaque((0,), primitive="psum_invariant", results=(t,), params=(("axes", ("x",)),))
    >>> [c] = manual_reduction(psum, (0, 1), (t, t), {0: ((), ("y",)), 1: ((), ("y",))},
    ...                        mesh, "body[0].shard_map.body[0]")
    >>> print(c); c.replica_groups.groups()
    all-reduce over ('x',) at body[0].shard_map.body[0]: float32[4, 2], 32 bytes per device
    ((0, 4), (1, 5), (2, 6), (3, 7))
    """
    name = entry_of(eq).name
    if name not in MANUAL_REDUCTIONS:
        return []
    if len(every) != 2:
        return Undetermined("COLL-14", f"a {name} of several operands in a shard_map's body "
                            "leaving mesh axes automatic: not read yet", path)
    named = dict(getattr(eq, "params", ())).get("axes", ())
    named = (named,) if isinstance(named, str) else tuple(named)
    axes = tuple(a for a in mesh.axis_names if a in named and mesh.axis_size(a) > 1)
    if not axes:
        return []
    split = splits[every[0]]
    shape = tuple(n // math.prod(mesh.axis_size(a) for a in d)
                  for n, d in zip(typed[0].shape, split))
    dtype = wire_dtype(str(typed[0].dtype))
    return [Collective("all-reduce", axes, path, None, shape, dtype,
                       math.prod(shape) * DTYPE_BYTES.get(dtype, 4),
                       ReplicaGroups(mesh, axes) if isinstance(mesh, Mesh) else None,
                       {"pmax": "max", "pmin": "min"}.get(name, "add"),
                       group_order(mesh, split, axes))]


def _placed(c: Any, path: str) -> Any:
    return dataclasses.replace(c, path=path)
