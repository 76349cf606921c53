"""The engine's decision for one call signature: a :class:`DispatchPlan`, and how it is made from a compiled executable.

A plan says which executable runs the signature, how each argument is handed to it (as it
is, relabelled over the same buffers, or moved) and how each result is labelled, so that
the results come back with the shardings and committed flags ``jax.jit`` would give this
call, even when the executable was compiled for another, placement-equal signature.
A refused signature's plan holds its rejection instead.
"""

from __future__ import annotations

from typing import Any

from jax.sharding import NamedSharding

from . import internals
from .cache import Entry
from .decision import CallDecision, StageContext
from .recovery import (
    Value, compiled_results, concrete_inputs, raw, recover_shardings, single_device_results,
)
from .program_body import recovery_origin
from .resolution import ARRAY, moves
from .rules import EngineRejection
from .shardings import (
    UNSPECIFIED, devices_of, is_partial, jax_equivalent, num_devices, placement_equivalent,
)
from .trees import donated_leaves

__all__ = ["DispatchPlan", "make_plan", "conversion", "reorder"]


class DispatchPlan:
    """The engine's record of its decision for one call signature, and how to run it."""

    __slots__ = (
        "rejection", "fired", "in_paths", "in_shardings", "out_paths", "out_shardings",
        "device_assignment", "num_devices", "kept", "out_committed", "transfers", "entry",
        "compiled_here", "conversions", "out_labels", "out_tree", "fastpath", "fast_ok",
        "donated", "exe_inputs", "num_inputs", "empty_results", "inside", "held", "__weakref__")

    def __init__(self) -> None:
        self.rejection: EngineRejection | None = None
        self.fired: tuple[str, ...] = ()
        self.in_paths: tuple[str, ...] = ()
        self.in_shardings: tuple = ()
        self.out_paths: tuple[str, ...] = ()
        self.out_shardings: tuple = ()
        self.device_assignment: tuple = ()
        self.num_devices = 0
        self.kept: tuple[int, ...] = ()
        self.out_committed: tuple[bool, ...] = ()
        self.transfers: tuple[str, ...] = ()
        self.entry: Entry | None = None
        self.compiled_here = False
        self.conversions: list[Any] = []
        self.out_labels: list[Any] = []
        self.out_tree: Any = None
        self.fastpath: Any = None
        self.fast_ok = False
        self.donated: tuple[bool, ...] = ()
        self.exe_inputs: tuple = ()
        self.num_inputs = 0
        self.empty_results: tuple[int, ...] = ()
        self.inside: tuple[tuple[str, Any], ...] = ()   # (path, sharding) inside the body
        # (path, sharding, what) of the closed-over refs and hoisted constants it takes in
        self.held: tuple[tuple[str, Any, str], ...] = ()

    @property
    def accepted(self) -> bool:
        return self.rejection is None

    def rejection_again(self) -> EngineRejection:
        """The cached rejection, fresh, with the rules that fired on the way to it."""
        assert self.rejection is not None
        error = self.rejection.again()
        error.fired = self.fired  # type: ignore[attr-defined]
        return error


def make_plan(ctx: StageContext, d: CallDecision, entry: Entry,
              compiled_here: bool) -> DispatchPlan:
    """The plan for a decided call whose executable is ``entry`` (compiled for it, or shared)."""
    arguments = d.arguments
    plan = DispatchPlan()
    n = len(arguments.leaves)
    plan.num_inputs = n
    plan.in_paths = tuple(arguments.paths()) if n else ()
    plan.in_shardings = tuple(d.final)
    plan.out_paths = tuple(d.out_paths)
    plan.device_assignment = d.assignment
    plan.num_devices = d.count
    plan.kept = d.kept
    plan.out_committed = (d.committed,) * len(d.out_paths)
    plan.inside = tuple((s.path, s.sharding) for s in d.inside)
    plan.held = held_inputs(d)
    plan.transfers = tuple(item.path for item, s in zip(d.inputs, d.final) if moves(item, s))
    plan.donated = donated_leaves(arguments.positions, ctx.options.names,
                                  arguments.dyn_args, arguments.dyn_kwargs)
    plan.entry = entry
    plan.compiled_here = compiled_here
    plan.out_tree = d.traced.out_tree
    facts = entry.facts
    exe_inputs, outs = _recover(d, facts)
    plan.exe_inputs = tuple(exe_inputs)
    if compiled_here:
        theirs = list(facts.out_shardings)
        ctx.counters.diverged(_differences(d, outs, theirs, facts))
        outs = theirs
    plan.out_shardings = tuple(outs)
    plan.conversions = _conversions(d, facts)
    plan.out_labels = [None] * len(outs) if compiled_here else \
        _out_labels(d, facts, outs, plan.out_committed)
    # jax 0.10.2 hands back a zero-size result split by its sharding with unsplit
    # per-device buffers (np.asarray of it fails); the engine makes such results anew,
    # empty and split as their sharding says, on the Python path.
    plan.empty_results = tuple(
        j for j, (s, aval) in enumerate(zip(outs, d.out_avals))
        if 0 in tuple(aval.shape) and tuple(s.shard_shape(tuple(aval.shape)))
        != tuple(aval.shape))
    plan.fast_ok = facts.fast and not plan.empty_results and all(
        c is None or c[2] for c in plan.conversions)
    return plan


def _recover(d: CallDecision, facts: Any) -> tuple[list[Any], list[Any]]:
    """This call's input and result shardings, over the executable's placements."""
    kept_values = [Value.of_aval(d.in_avals[i]) for i in d.kept]
    kept_final = concrete_inputs([d.final[i] for i in d.kept], d.assignment)
    placed_in = []
    for i, s in zip(d.kept, kept_final):
        if s is UNSPECIFIED:
            chosen = facts.input_sharding(i)
            s = raw(chosen, len(d.arguments.shape(i))) if chosen is not None else UNSPECIFIED
        placed_in.append(s)
    in_path = d.inputs[d.kept[0]].path if d.kept else None
    # the hoisted constants are the executable's first inputs, on their own shardings or
    # where the compiler placed them (CONST-2)
    hoisted = d.constants if len(d.constants) == facts.num_consts else ()
    const_final = concrete_inputs([c.sharding for c in hoisted], d.assignment)
    const_placed = [raw(facts.in_shardings[k], c.value.rank) if s is UNSPECIFIED else s
                    for k, (c, s) in enumerate(zip(hoisted, const_final))]
    const_values = [c.value for c in hoisted]
    recovered = recover_shardings(const_placed + placed_in, const_values + kept_values,
                                  const_final + kept_final, const_values + kept_values, None,
                                  in_path)
    kept_values = const_values + kept_values
    # A result whose type has unreduced or reduced axes comes back as its type says,
    # which is what JAX's executable reports: nothing to re-read.
    chosen_out = [s if is_partial(getattr(a, "sharding", None)) else raw(s, len(a.shape))
                  for s, a in zip(facts.out_shardings, d.out_avals)]
    placed_out = compiled_results(d.out_flat, chosen_out, d.assignment, d.out_avals)
    out_values = [Value.of_aval(a) for a in d.out_avals]
    given, given_values, out_values = recovery_origin(recovered, kept_values, out_values,
                                                      d.inside)
    outs = recover_shardings(placed_out, out_values, given, given_values, d.context,
                             d.out_paths[0] if d.out_paths else "result")
    outs = single_device_results(outs, d.assignment)
    exe_inputs: list[Any] = [None] * len(d.arguments.leaves)
    for i, s in zip(d.kept, single_device_results(recovered[len(hoisted):], d.assignment)):
        exe_inputs[i] = s
    return exe_inputs, outs


def _differences(d: CallDecision, mine: list[Any], theirs: list[Any],
                 facts: Any) -> list[str]:
    """Where the engine's own prediction differs from what JAX compiled."""
    problems = []
    for path, a, b, aval in zip(d.out_paths, mine, theirs, d.out_avals):
        shape = tuple(aval.shape)
        if type(a) is not type(b) or not placement_equivalent(a, b, shape) or (
                isinstance(a, NamedSharding) and (a.mesh.axis_names, a.mesh.axis_sizes)
                != (b.mesh.axis_names, b.mesh.axis_sizes)):
            problems.append(f"{path}: engine {a}, JAX {b}")
    kept = sorted(i - facts.num_consts for i in facts.kept if i >= facts.num_consts)
    if tuple(kept) != d.kept:
        problems.append(f"kept inputs: engine {d.kept}, JAX {tuple(kept)}")
    if theirs:
        assignment = devices_of(theirs[0])
        if tuple(assignment) != d.assignment:
            problems.append(f"device assignment: engine {[x.id for x in d.assignment]}, "
                            f"JAX {[x.id for x in assignment]}")
    return problems


def _conversions(d: CallDecision, facts: Any) -> list[Any]:
    """For each flat input: None (as it is) or (how, sharding, fast path keeps it right, aval, order)."""
    arguments = d.arguments
    out: list[Any] = [None] * len(arguments.leaves)
    for i in d.kept:
        if arguments.kinds[i] == ARRAY and d.inputs[i].committed:
            out[i] = conversion(arguments.leaves[i], facts, i)
    return out


def _out_labels(d: CallDecision, facts: Any, outs: list[Any],
                committed: tuple[bool, ...]) -> list[Any]:
    """For each result: None (as the executable labels it) or (sharding, aval, order)."""
    labels: list[Any] = []
    for j, (mine, aval) in enumerate(zip(outs, d.out_avals)):
        theirs = facts.out_shardings[j] if j < len(facts.out_shardings) else None
        if theirs is not None and mine == theirs and aval == facts.out_avals[j]:
            labels.append(None)
            continue
        order = reorder(internals.addressable_devices(theirs),
                        internals.addressable_devices(mine)) if theirs is not None else None
        labels.append((mine, aval, order, committed[j] if j < len(committed) else True))
    return labels


def conversion(leaf: Any, facts: Any, i: int) -> Any:
    """How to hand a committed array to the executable: None (as it is), relabelled, or moved.

    The tuple says how, to which sharding, whether the C++ fast path (which hands over the
    buffers positionally, or moves arrays on another number of devices) stays right for
    it, the executable's input type, and the buffer order.
    """
    want = facts.input_sharding(i)
    if want is None:
        return None
    held, shape = leaf.sharding, tuple(leaf.shape)
    if jax_equivalent(held, want, len(shape)):
        return None
    if placement_equivalent(held, want, shape):
        same_order = devices_of(held) == devices_of(want)
        order = reorder(internals.addressable_devices(held), internals.addressable_devices(want))
        return ("relabel", want, same_order, facts.input_aval(i), order)
    fast = num_devices(held) != num_devices(want) or num_devices(want) == 1
    return ("move", want, fast, None, None)


def reorder(have: tuple, want: tuple) -> list[int] | None:
    """Indices that put buffers ordered by ``have`` in the order of ``want`` (None: same)."""
    if have == want:
        return None
    position = {d: k for k, d in enumerate(have)}
    return [position[d] for d in want]


def held_inputs(d: CallDecision) -> tuple[tuple[str, Any, str], ...]:
    """(path, sharding, what) of each closed-over value the program takes in after the
    arguments: the refs that take part (REF-1; their new values written back in place,
    REF-2) and the constants JAX hoists (CONST-1; each on its sharding or left open,
    CONST-2)."""
    return (*((s.path, s.sharding, "ref, written back in place") for s in d.refs),
            *((s.path, s.sharding, "hoisted constant") for s in d.constants))
