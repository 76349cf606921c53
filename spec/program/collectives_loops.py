"""The collectives inside a loop's and a cond's body (issue 33): COLL-8 to COLL-10.

JAX 0.10.2 lowers a ``scan`` (a ``fori_loop`` of static bounds is one) to an HLO while loop
whose body is a computation of its own and whose trip count is the scan's length, a
``while_loop`` to a while loop whose trip count the data decide, a ``cond`` to a
conditional whose branches are computations, and inlines inner jits, ``remat`` and the
custom derivatives' calls. XLA's partitioner inserts each body's collectives inside its
computation, where propagation placed the body's values
(:mod:`~shardlaw.spec.program.propagation_flow`): the compiled module lists each once, and
one step runs a scan body's ``length`` times. So each :class:`Collective` keeps its bytes
per run and says how often one step runs it (``trips``: a scan body's length, times its
enclosing loops'; None where the data decide, a while loop's or a cond branch's) and in
which body (``computation``); ``Communication.bytes_per_device`` is the step's total, each
collective times its trips, where every trip count is known.

>>> from shardlaw.spec import Mesh, NamedSharding, P
>>> from shardlaw.spec.program.control_flow import Scan
>>> from shardlaw.spec.program.description import Opaque, Program, Value
>>> from shardlaw.spec.program.collectives import predicted_collectives
>>> mesh = Mesh.iota((2, 4), ("x", "y"))
>>> body = Program((Value.typed((8,)), Value.typed((8, 16))), (
...     Opaque((1,), (Value.typed((8,)),), primitive="reduce_sum", params=(("axes", (1,)),)),
...     Opaque((0, 2), (Value.typed((8,)),), primitive="add")), outputs=(3,))
>>> total = Value.placed((8,), NamedSharding(mesh, P()))
>>> xs = Value.placed((4, 8, 16), NamedSharding(mesh, P(None, None, "y")))
>>> scan = Scan((0, 1), (Value.typed((8,)),), body=body, length=4, num_carry=1)
>>> step = predicted_collectives(Program((total, xs), (scan,), outputs=(2,)))
>>> print(step)
1 collective(s) on cpu, 128 bytes per device
  all-reduce over ('y',) at body[0].scan.body[0]: float32[8], 32 bytes per device, 4 times
>>> step[0].trips, step[0].computation, step.bytes_per_run
(4, 'body[0].scan', 32)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import rule
from ..core.shardings import UNSPECIFIED
from .collectives import Collective, along_a_split, combined, equation_collectives, moved
from .collectives_boundaries import shares_reshard
from .primitives import entry_of
from .propagation import FLOW_KINDS, Undetermined, propagated, propagation_mesh
from .propagation_pins import implied_out_shardings

__all__ = ["flow_collectives", "body_collectives", "hoisted", "boundary_moves", "unread_remat",
           "Landing"]


@dataclasses.dataclass
class _Computation:
    """One HLO computation being read: its collectives in order, the all-reduces each is
    computed after (COLL-7's combiner reads them), the all-reduces each value is computed
    from, the (value, split) reshards made in it (XLA's CSE keeps one), how often one step
    runs it (None: the data decide), its name (the body's path; "": the step's own), the
    values a loop body reads unchanged (None: no loop's body), the computation around and
    the number of the step's collectives found before its first (``after``'s keys count
    from it)."""

    trips: int | None
    name: str
    done: set
    invariant: set | None = None
    outer: "_Computation | None" = None
    found: list = dataclasses.field(default_factory=list)
    after: dict = dataclasses.field(default_factory=dict)
    upstream: dict = dataclasses.field(default_factory=dict)
    base: int = 0

    def add(self, made: list, operands: tuple, results: tuple = ()) -> None:
        """``made``'s collectives, of an equation over ``operands`` making ``results``."""
        before = frozenset().union(*(self.upstream.get(n, frozenset()) for n in operands))
        own = set()
        for c in made:
            if c.kind == "all-reduce":
                at = self.base + len(self.found)
                self.after[at] = before if not c.computation else frozenset()
                own.add(at)
            self.found.append(c)
        for n in results:
            self.upstream[n] = before | own

    def close(self) -> list[Collective]:
        """Its collectives combined (COLL-7), each marked with its computation and runs."""
        return [c if c.computation else dataclasses.replace(
                    c, trips=self.trips, computation=self.name)
                for c in combined(self.found, self.after)]


@dataclasses.dataclass(frozen=True)
class _Walk:
    """The propagated program as the bodies are read: the flat program, its splits, the
    mesh, the operand and result ids of each equation by path, the joins and the steps of
    each control-flow equation by path, the equations' plans (shared) and the ids of the
    results an out sharding pins."""

    flat: Any
    splits: dict
    mesh: Any
    at: dict
    joins: dict
    steps: dict
    plans: dict
    pinned_out: frozenset = frozenset()

    @classmethod
    def of(cls, program: Any, plans: dict) -> "_Walk":
        flat, splits = propagated(program)   # (propagate answered: so does this)
        joins: dict = {}
        for sources, result, path in flat.edges:   # (led by a constraint or not)
            joins.setdefault(path, []).append((tuple(sources), result))
        steps: dict = {}
        for entry, _, every, _, path, _ in flat.steps:
            steps.setdefault(path, []).append((entry.name, every))
        mesh = propagation_mesh(program)
        pinned = frozenset(flat.ids[n] for n, given in zip(
            program.outputs, implied_out_shardings(program, mesh)) if given is not UNSPECIFIED)
        return cls(flat, splits, mesh,
                   {path: (ops, results) for path, _, ops, results in flat.equations},
                   joins, steps, plans, pinned)


def flow_collectives(program: Any, k: int, done: set, plans: dict,
                     upstream: dict | None = None, after: dict | None = None, base: int = 0
                     ) -> list[Collective] | Undetermined:
    """The collectives of control-flow equation (or inner jit) ``k`` of ``program``: those
    its computation makes around it, then its bodies' (COLL-8); ``done``: the step's own
    reshards made so far; ``upstream``: the all-reduces (numbered from 0, ``base`` found
    so far) each value of the step is computed from; ``after`` is given those each of its
    all-reduces hoisted into the step is computed from (COLL-7 combines it there)."""
    walk = program.derived_once("collectives walk", lambda: _Walk.of(program, plans))
    eq = program.equations[k]
    ids = walk.flat.ids
    top = _Computation(1, "", done, base=base, after={} if after is None else after,
                       upstream={ids[n]: upstream[n] for n in eq.operands
                                 if upstream and n in upstream and ids[n] is not None})
    made = _flow(walk, eq, f"body[{k}]", [ids[n] for n in eq.operands], top)
    return made if isinstance(made, Undetermined) else top.found


@rule("COLL-8", mirrors="xla: the while loop's and the conditional's computations "
      "(SpmdPartitioner)")
def body_collectives(kind: str, length: int | None, trips: int | None) -> int | None:
    """A loop's or a cond's body communicates what its equations need in a computation of
    its own, run a scan's length times per run of the one around it, or as the data
    decide.

    The compiled module lists each collective once; the step's bytes count it per run.

    >>> body_collectives("scan", 32, 1), body_collectives("scan", 4, None)
    (32, None)
    >>> print(body_collectives("while", None, 1), body_collectives("cond", None, 8))
    None None
    """
    if kind == "scan" and trips is not None:
        return trips * length
    if kind in ("scan", "while", "cond"):
        return None
    return trips


def unread_remat(program: Any, prefix: str = "") -> Undetermined | None:
    """A differentiated remat the spec made recomputing everything under a policy it does
    not read (``policy_unread``) leaves what the step communicates open (COLL-8); None:
    the step holds none."""
    for k, eq in enumerate(program.equations):
        path = f"{prefix}body[{k}]"
        if eq.kind == "remat2" and eq.policy_unread:
            # (a user's policy read into a table is named by its name alone here)
            named = (eq.policy or "").split(" saves ")[0]
            return Undetermined("COLL-8", f"a differentiated remat whose policy "
                                f"({named}) the spec does not read over its body (an "
                                f"offloading policy, an equation a user's policy was not "
                                f"asked about, a loop, cond or shard_map inside): it "
                                f"recomputes everything, as nothing_saveable", path)
        inner = getattr(eq, "body", None)
        found = None if inner is None else unread_remat(inner, f"{path}.{eq.kind}.")
        if found is not None:
            return found
    return None


def _flow(walk: _Walk, eq: Any, path: str, operands: list, comp: _Computation
          ) -> list | Undetermined:
    """The ids of a control-flow equation's results, its collectives added to ``comp``
    (those of its bodies closed and appended)."""
    if any(o is None for o in operands):
        return Undetermined("COLL-8", "an operand of a body comes from an equation lowering "
                            "folds away: not followed yet", path)
    if eq.kind in ("jit", "remat2", "custom_jvp_call", "custom_vjp_call"):
        if eq.kind == "jit" and any(s is not UNSPECIFIED for s in (
                *(eq.body.in_shardings or ()), *(eq.body.out_shardings or ()))):
            return Undetermined("COLL-4", "an inner jit's in or out shardings: the reshards "
                                "at its boundaries are not planned yet", path)
        inner = _read(walk, eq.body, operands, f"{path}.{eq.kind}.", comp)
        return inner if isinstance(inner, Undetermined) else [inner[n] for n in
                                                             eq.body.outputs]
    if eq.kind == "scan":
        return _scan(walk, eq, path, operands, comp)
    if eq.kind == "while":
        return _while(walk, eq, path, operands, comp)
    return _cond(walk, eq, path, operands, comp)


def _read(walk: _Walk, body: Any, inputs: list, prefix: str, comp: _Computation
          ) -> list | Undetermined:
    """The ids of ``body``'s values (None: folded away) given its inputs', each live
    equation's collectives added to ``comp`` or hoisted out of its loop (COLL-9)."""
    ids = list(inputs) + [None] * len(body.consts)
    for j, (eq, numbers) in enumerate(zip(body.equations, body.result_numbers())):
        path = f"{prefix}body[{j}]"
        if eq.kind in FLOW_KINDS or eq.kind == "jit":
            got = _flow(walk, eq, path, [ids[n] for n in eq.operands], comp)
            if isinstance(got, Undetermined):
                return got
            ids += got
            continue
        found = walk.at.get(path)
        if found is None:   # folded away by lowering, or dead
            ids += [None] * len(numbers)
            continue
        ops, results = found
        ids += list(results)
        if not walk.flat.live & set(results):
            continue
        if entry_of(eq).name == "iota" or walk.flat.constants & set(results):
            # computed in whatever split it is needed in (a constant's copies: PROP-16)
            comp.done.update(results)
            continue
        if along_a_split(eq, (walk.splits[ops[0]],)):
            return Undetermined("COLL-8", f"{entry_of(eq).name} of a split operand: XLA "
                                "gathers along its own dimension (seen) by a plan of its "
                                "own, not read yet", path)
        home = hoisted(comp, ops)
        if home is not comp:   # every operand unchanged by the loop: computed before it
            _mark_invariant(comp, home, results)
        made = equation_collectives(eq, tuple(ops) + tuple(results), walk.flat.types,
                                    walk.splits, walk.mesh, path, Landing(home, walk.splits),
                                    walk.plans)
        if isinstance(made, Undetermined):
            return made
        stays = [c for c in made if c.operand is None or hoisted(home, (ops[c.operand],))
                 is home]
        for c in made:
            if c not in stays:
                hoisted(home, (ops[c.operand],)).add([c], (ops[c.operand],))
        home.add(stays, tuple(ops), tuple(results))
    return ids


def _mark_invariant(comp: _Computation, home: _Computation, results: tuple) -> None:
    c = comp
    while c is not home:
        c.invariant.update(results)
        c = c.outer


class Landing:
    """The reshards made already where each of a body's reshards lands (COLL-9): one of a
    value the body reads unchanged that only moves its axes between dimensions (an
    all-to-all) is made once with the other reshards of that value to that split in the
    computation around the loop; any other stays the body's own, hoisted apart.

    Seen (JAX 0.10.2, 8 CPU devices, mesh ``(4, 2)``): ``b`` on ``P('y', None, None)`` read
    by a fori loop's body whose sum is constrained to ``P(None, None, 'y')``, beside a
    second such loop, a constraint of ``b`` to that split, or a fori loop whose carry starts
    at ``b`` and is multiplied by a value on that split: one all-to-all of 2,048 bytes,
    not two. But ``b`` on ``P(('x', 'y'))`` (mesh ``(2, 4)``) read by such a loop
    constrained to ``P()``, beside ``wsc(b, P())``: two all-gathers of 4,096 bytes.
    """

    def __init__(self, home: _Computation, splits: dict) -> None:
        self.home, self.splits = home, splits

    def _where(self, key: Any) -> set:
        if not isinstance(key, tuple):
            return self.home.done
        value, need = key
        have = self.splits.get(value)
        moves_only = have is not None and sorted(a for d in have for a in d) == sorted(
            a for d in need for a in d)
        return hoisted(self.home, (value,)).done if moves_only else self.home.done

    def __contains__(self, key: Any) -> bool:
        return key in self._where(key)

    def add(self, key: Any) -> None:
        self._where(key).add(key)


@rule("COLL-9", mirrors="xla: WhileLoopInvariantCodeMotion")
def hoisted(comp: Any, operands: tuple) -> Any:
    """A collective of values a loop's body reads unchanged (its constants, and what is
    computed from them alone) is moved out of the loop: it runs in the computation
    around it, once per run of that one.

    Seen: a constant of ``P('x', 'y')`` constrained to ``P(None, 'y')`` in a scan's body is
    all-gathered before the while loop; a slice of ``xs`` gathered the same way stays in
    the body (the loop's counter picks it).

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.control_flow import Scan
    >>> from shardlaw.spec.program.description import (
    ...     Opaque, Program, ShardingConstraint, Value)
    >>> from shardlaw.spec.program.collectives import predicted_collectives
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> rows = NamedSharding(mesh, P(None, "y"))
    >>> body = Program((Value.typed((8, 8)), Value.typed((8, 8))), (
    ...     ShardingConstraint((0,), sharding=rows),
    ...     Opaque((1, 2), (Value.typed((8, 8)),), primitive="mul"),
    ...     ShardingConstraint((3,), sharding=rows)), outputs=(4,))
    >>> w = Value.placed((8, 8), NamedSharding(mesh, P("x", "y")))
    >>> scan = Scan((0, 1), (Value.typed((8, 8)),), body=body, length=3, num_consts=1,
    ...             num_carry=1)
    >>> step = predicted_collectives(Program((w, Value.placed((8, 8), rows)), (scan,),
    ...                                      outputs=(2,)))
    >>> print(step)
    1 collective(s) on cpu, 64 bytes per device
      all-gather over ('x',) at body[0].scan.body[0] (operand 0): float32[8, 2], 64 bytes per device
    >>> step[0].trips, step[0].computation
    (1, '')
    """
    while comp.invariant is not None and comp.outer is not None and \
            all(n in comp.invariant for n in operands):
        comp = comp.outer
    return comp


@rule("COLL-10", mirrors="xla: SpmdPartitioner's while loop and conditional (operand and "
      "result shardings)")
def boundary_moves(have: tuple, need: tuple, where: str) -> str:
    """A loop's carries are brought to their split before the loop and at the body's end, a
    branch's results at its end, and ``xs`` split along the loop's dimension is gathered
    before it.

    The initial carry moves before the loop, the body's next one at its end; a slice of
    ``xs`` the body splits otherwise moves in the body. A cond's result that an out
    sharding pins keeps the split its branches' results agree on and moves after the
    conditional, once (seen: ``a - 1`` or ``a + s`` of ``a`` on ``P('y')``, returned
    under ``P()``, is all-gathered after the conditional, not in each branch).

    Gives where the reshard runs: "before" (an initial carry), "xs" (``xs`` gathered
    whole before the loop), "body" or "after" (the final carry), "" where nothing moves.

    >>> boundary_moves((("x",), ()), (("x",), ("y",)), "body")
    'body'
    >>> boundary_moves((("x",),), (("x",),), "before")
    ''
    """
    return "" if tuple(have) == tuple(need) else where


def _move(walk: _Walk, comp: _Computation, value: int, need: tuple, where: str, path: str,
          operand: int | None = None, have: tuple | None = None, to: int | None = None
          ) -> Undetermined | None:
    """Reshard ``value`` to ``need`` in ``comp`` (COLL-10), once per (value, split); not
    where the value it becomes (``to``) is dead (jit's dead-code elimination removes it)."""
    have = walk.splits[value] if have is None else have
    shared = shares_reshard(where)   # (a scan's xs is resharded on its own: COLL-15)
    if (to is not None and to not in walk.flat.live) or \
            not boundary_moves(have, need, where) or (shared and (value, need) in comp.done):
        return None
    if shared:
        comp.done.add((value, need))
    made = moved(walk.flat.types[value], have, need, walk.mesh, path, operand)
    if isinstance(made, Undetermined):
        return made
    hoisted(comp, (value,)).add(made, (value,))
    return None


def _body_of(comp: _Computation, name: str, length: int | None, kind: str,
             invariant: set | None) -> _Computation:
    return _Computation(body_collectives(kind, length, comp.trips), name, set(),
                        invariant, comp)


def _steps(walk: _Walk, path: str, name: str) -> list:
    return [every for entry, every in walk.steps.get(path, ()) if entry == name]


def _scan(walk: _Walk, eq: Any, path: str, operands: list, comp: _Computation
          ) -> list | Undetermined:
    """A scan: its initial carries and ``xs`` moved before the loop, its body read in a
    computation of its own (the next carries and ``ys`` moved at its end), its final
    carries after."""
    body, c, k = eq.body, eq.num_consts, eq.num_carry
    joins = walk.joins.get(path, [])
    carries, finals = [r for _, r in joins[:k]], [r for _, r in joins[k:2 * k]]
    inner = _body_of(comp, f"{path}.scan", eq.length, "scan", set(operands[:c]))
    for i in range(k):
        stopped = _move(walk, comp, operands[c + i], walk.splits[carries[i]], "before",
                        path, c + i, to=carries[i])
        if stopped:
            return stopped
    stopped = _slices(walk, comp, inner, path, operands, c + k)
    if stopped:
        return stopped
    ids = _read(walk, body, list(operands[:c]) + carries + _pieces(
        walk, operands[c + k:], path, len(body.inputs) - c - k), f"{path}.scan.", inner)
    if isinstance(ids, Undetermined):
        return ids
    outs = [ids[n] for n in body.outputs]
    stacked = []
    for piece in outs[k:]:
        found = [s for p, s in _steps(walk, path, "dynamic_update_slice") if p == piece]
        if not found:
            stacked.append(None)
            continue
        stack = found[0]
        if walk.splits[stack][0]:
            return Undetermined("COLL-10", "a ys stacked split along the loop's dimension: "
                                "how the partitioner writes each slice is not seen yet", path)
        stacked.append(stack)
    stopped = _ends(walk, inner, outs[:k], carries, path) or _ends(
        walk, inner, [p for p, s in zip(outs[k:], stacked) if s is not None],
        [s for s in stacked if s is not None], path, stacked=True)
    if stopped:
        return stopped
    comp.add(inner.close(), ())
    for carry, final in zip(carries, finals):
        stopped = _move(walk, comp, carry, walk.splits[final], "after", path, to=final)
        if stopped:
            return stopped
    return finals + stacked


def _slices(walk: _Walk, comp: _Computation, inner: _Computation, path: str,
            operands: list, first: int) -> Undetermined | None:
    """Each live slice of a scan's ``xs`` (operands from ``first``) brought to its piece's
    split: gathered whole before the loop where ``xs`` splits the loop's dimension, in the
    body otherwise (COLL-10)."""
    sliced = {}
    for xs, piece in _steps(walk, path, "dynamic_slice"):
        have = walk.splits[xs]
        if have[0]:   # split along the loop's dimension: gathered whole before the loop,
            # sliced first to the piece's split (seen: f32[2,4,8] of P('x') where the
            # body splits its piece's last dimension over 'z')
            need = walk.splits[piece]
            if any(tuple(n[:len(h)]) != tuple(h) for h, n in zip(have[1:], need)):
                return Undetermined("COLL-10", "xs split along the loop's dimension and its "
                                    "slice split otherwise too: where the partitioner "
                                    "gathers each is not seen yet", path)
            stopped = _move(walk, comp, xs, ((),) + tuple(need), "xs", path,
                            first + operands[first:].index(xs))
            if stopped:
                return stopped
            have = ((),) + tuple(need)
        sliced[piece] = tuple(have[1:])
    for piece in sliced:
        stopped = _move(walk, inner, piece, walk.splits[piece], "body", path,
                        have=sliced[piece])
        if stopped:
            return stopped
    return None


def _pieces(walk: _Walk, xs: list, path: str, count: int) -> list:
    """The ids of a scan body's slices of ``xs`` (None: dead, no step left)."""
    steps = list(_steps(walk, path, "dynamic_slice"))
    out = []
    for x in xs[:count]:
        match = next((s for s in steps if s[0] == x), None)
        if match is not None:
            steps.remove(match)
        out.append(None if match is None else match[1])
    return out


def _ends(walk: _Walk, inner: _Computation, outs: list, targets: list, path: str,
          stacked: bool = False, needs: list | None = None) -> Undetermined | None:
    """The body's results brought to the splits of the values they become (a carry, a
    stacked ``ys``'s slice, a cond's result; ``needs``: a split kept instead) at the
    body's end (COLL-10)."""
    for out, target, kept in zip(outs, targets, needs or [None] * len(targets)):
        if out is None or target is None:
            return Undetermined("COLL-8", "a body's result comes from an equation lowering "
                                "folds away: not followed yet", path)
        need = tuple(walk.splits[target][1:]) if stacked else walk.splits[target]
        need = need if kept is None else kept
        stopped = _move(walk, inner, out, need, "body", path, to=target)
        if stopped:
            return stopped
    return None


def _while(walk: _Walk, eq: Any, path: str, operands: list, comp: _Computation
           ) -> list | Undetermined:
    """A while loop: its carries as a scan's, its predicate and body read in computations
    of their own, run as often as the data decide."""
    cc, bc = eq.cond_consts, eq.body_consts
    k = len(eq.body_fun.inputs) - bc
    joins = walk.joins.get(path, [])
    carries, finals = [r for _, r in joins[:k]], [r for _, r in joins[k:2 * k]]
    for i in range(k):
        stopped = _move(walk, comp, operands[cc + bc + i], walk.splits[carries[i]], "before",
                        path, cc + bc + i, to=carries[i])
        if stopped:
            return stopped
    types = eq.cond.value_types
    if any(types[n].shape for e in eq.cond.equations for n in (*e.operands,)):
        return Undetermined("COLL-8", "a while loop's predicate reads arrays: its values "
                            "reach no result, so propagation does not place them", path)
    inner = _body_of(comp, f"{path}.while.body", None, "while",
                     set(operands[cc:cc + bc]))
    ids = _read(walk, eq.body_fun, list(operands[cc:cc + bc]) + carries,
                f"{path}.while.body.", inner)
    if isinstance(ids, Undetermined):
        return ids
    stopped = _ends(walk, inner, [ids[n] for n in eq.body_fun.outputs], carries, path)
    if stopped:
        return stopped
    comp.add(inner.close(), ())
    for carry, final in zip(carries, finals):
        stopped = _move(walk, comp, carry, walk.splits[final], "after", path, to=final)
        if stopped:
            return stopped
    return finals


def _cond(walk: _Walk, eq: Any, path: str, operands: list, comp: _Computation
          ) -> list | Undetermined:
    """A cond: each branch read in a computation of its own, its results brought to the
    cond's at its end; a branch runs as the data decide."""
    joins = walk.joins.get(path, [])
    results = [r for _, r in joins]
    kept = [_kept_out(walk, sources, r) for sources, r in joins]
    for b, branch in enumerate(eq.branches):
        inner = _body_of(comp, f"{path}.cond.branches[{b}]", None, "cond", None)
        ids = _read(walk, branch, list(operands[1:]), f"{path}.cond.branches[{b}].", inner)
        if isinstance(ids, Undetermined):
            return ids
        stopped = _ends(walk, inner, [ids[n] for n in branch.outputs], results, path,
                        needs=kept)
        if stopped:
            return stopped
        comp.add(inner.close(), ())
    for r, have in zip(results, kept):
        stopped = have is not None and _move(walk, comp, r, walk.splits[r], "after", path,
                                             have=have, to=r)
        if stopped:
            return stopped
    return results


def _kept_out(walk: _Walk, sources: tuple, result: int) -> tuple | None:
    """The split a cond's result keeps where an out sharding pins it to fewer axes (COLL-10)."""
    if result not in walk.pinned_out or result not in walk.flat.live or None in sources:
        return None
    splits = {tuple(walk.splits[s]) for s in sources}
    have = splits.pop() if len(splits) == 1 else None
    need = tuple(walk.splits[result])
    if have is None or have == need or any(tuple(h[:len(n)]) != tuple(n)
                                           for h, n in zip(have, need)):
        return None   # (seen: P('x', 'y') pinned to P('y', 'x') moves in each branch)
    return have
