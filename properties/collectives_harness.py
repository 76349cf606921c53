"""What a step communicates, held to real XLA: the collectives the spec predicts (COLL-1 to
COLL-5) against those of the compiled executable's HLO, on 8 CPU devices.

The programs are :mod:`~shardlaw.properties.propagation_harness`'s drawn recipes (the same
draws, the same real function and arguments). :func:`compare_collectives` compiles the
function, reads the collectives of ``compile().as_text()`` with
:func:`~shardlaw.compiled_hlo.collectives_in_hlo`, asks
:func:`~shardlaw.spec.explain_program` for ``verdict.collectives`` and, where the spec's
list is complete, compares the two as multisets of (kind, replica groups, bytes per
device): each group's device positions in order, the groups in any order (XLA lists them
in an order of its own). A list the spec leaves
incomplete is an abstention (counted with its reason); any other difference is a
disagreement.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any

from hypothesis import strategies as st

from .propagation_harness import (
    MESHES, NAMES, Recipe, arguments_of, counted_run, function_of, recipes,
)

__all__ = ["CollectivesOutcome", "compare_collectives", "communicating_recipes", "TALLY"]

# Over the run: outcomes ("agree", "abstain", "disagree"), per kind of the collectives
# compared on complete programs ("kind: all-gather") and the abstentions' reasons.
TALLY: collections.Counter = collections.Counter()
# The source under which the rules held are recorded (shardlaw.properties.hits).
SOURCE = "collectives"


@dataclasses.dataclass(frozen=True)
class CollectivesOutcome:
    """What one recipe gave: the compiled module's collectives and the spec's, each as a
    sorted tuple of (kind, groups, bytes per device); ``why``: the reason the spec's list
    is incomplete (None: complete)."""

    real: tuple
    predicted: tuple
    why: str | None

    @property
    def disagreements(self) -> list[str]:
        if self.why is not None or self.real == self.predicted:
            return []
        missing = collections.Counter(self.real) - collections.Counter(self.predicted)
        extra = collections.Counter(self.predicted) - collections.Counter(self.real)
        return [f"in the HLO, not predicted: {sorted(missing)}",
                f"predicted, not in the HLO: {sorted(extra)}"]


def _one_axis(draw: Any, shape: tuple[int, ...], mesh: tuple[int, ...], only: str = "") -> tuple:
    """A split of ``shape`` over one mesh axis (or two, on one dimension) dividing it
    (``only``: per mesh axis whether it may be drawn, "A" or "E"; "": every axis)."""
    sizes = {a: n for a, n, t in zip(NAMES, mesh, only or "A" * len(mesh)) if t == "A"}
    d = draw(st.integers(0, len(shape) - 1))
    fit = [a for a in sizes if shape[d] % sizes[a] == 0]
    if not fit:
        return (None,) * len(shape)
    axes = tuple(draw(st.permutations(fit)))[:draw(st.integers(1, min(2, len(fit))))]
    if shape[d] % (sizes[axes[0]] * (sizes[axes[-1]] if len(axes) > 1 else 1)):
        axes = axes[:1]
    return tuple((axes[0] if len(axes) == 1 else axes) if k == d else None
                 for k in range(len(shape)))


def _moved(draw: Any, v: int, shape: tuple[int, ...], mesh: tuple[int, ...], inputs: list,
           steps: list, types: str = "") -> tuple:
    """A split to constrain value ``v`` to that moves its axes: an input's split with its
    dimensions' axes reversed or rotated where they divide (an all-to-all, a
    collective-permute), else one over one or two axes; over a mesh with Explicit axes
    (``types``), Auto axes only (JAX refuses a constraint naming an Explicit one)."""
    if "E" in types:
        return _one_axis(draw, shape, mesh, types)
    split = inputs[steps[v][2]][1] if steps[v][0] == "input" else None
    sizes = dict(zip(NAMES, mesh))
    if split is not None and len(split) > 1 and draw(st.booleans()):
        moved = tuple(reversed(split)) if draw(st.booleans()) else split[1:] + split[:1]
        ways = [1 if e is None else math.prod(sizes[a] for a in ((e,) if isinstance(e, str)
                                                                  else e)) for e in moved]
        if all(n % w == 0 for n, w in zip(shape, ways)):
            return moved
    return _one_axis(draw, shape, mesh)


@st.composite
def communicating_recipes(draw: Any, max_steps: int = 5, explicit: bool = False) -> Recipe:
    """A drawn recipe (:func:`~shardlaw.properties.propagation_harness.recipes`) with one
    to three steps appended that make the step communicate: a reduction over an input's
    split dimension, an elementwise operation or a matmul with a fresh input split over
    another axis or the same one (conflicts, moved axes, contracted splits), a constraint
    that moves a value's axes between its dimensions or onto others, and over a mesh with
    Explicit axes a reshard onto them; ``explicit``: some over meshes with Explicit axes
    (all of them, or beside Auto ones)."""
    base = draw(recipes(max_steps=max_steps, explicit=explicit))
    inputs, steps = list(base.inputs), list(base.steps)
    shapes = {k: base.inputs[p][0] for k, (kind, _, p) in enumerate(steps) if kind == "input"}

    def fresh(shape: tuple[int, ...], split: tuple) -> int:
        inputs.append((shape, split))
        steps.append(("input", (), len(inputs) - 1))
        shapes[len(steps) - 1] = shape
        return len(steps) - 1

    made = []
    for _ in range(draw(st.integers(1, 3))):
        v = draw(st.sampled_from(sorted(shapes)))
        shape = shapes[v]
        kind = draw(st.sampled_from(("reduce", "binary", "dot", "move", "reshard")))
        if kind == "move" and base.axis_types and "A" not in base.axis_types:
            kind = "reduce"   # (no Auto axis to constrain over: a reduction communicates)
        if kind == "reshard" and "E" not in base.axis_types:
            kind = "move"     # (a reshard names Explicit axes only)
        if kind == "reshard":
            steps.append(("reshard", (v,), _one_axis(draw, shape, base.mesh, "".join(
                "A" if t == "E" else "B" for t in base.axis_types))))
        elif kind == "move":
            steps.append(("constrain", (v,), _moved(draw, v, shape, base.mesh, inputs, steps,
                                                    base.axis_types)))
        elif kind == "reduce" and len(shape) >= 2:
            axis = draw(st.integers(0, len(shape) - 1))
            steps.append(("reduce", (v,), (draw(st.sampled_from(("sum", "max"))), axis)))
            shape = shape[:axis] + shape[axis + 1:]
        elif kind == "dot" and len(shape) in (2, 3):
            n = draw(st.sampled_from((4, 8, 16)))
            other = (*shape[:-2], shape[-1], n)
            split = dict(enumerate(inputs[steps[v][2]][1])).get(len(shape) - 1) \
                if steps[v][0] == "input" else None
            same = draw(st.booleans()) and split is not None
            w = fresh(other, tuple(split if same and k == len(other) - 2 else None
                                   for k in range(len(other))) if same
                      else _one_axis(draw, other, base.mesh))
            steps.append(("dot", (v, w), None))
            shape = (*shape[:-1], n)
        else:
            w = fresh(shape, _one_axis(draw, shape, base.mesh))
            steps.append(("binary", (v, w), draw(st.sampled_from(("add", "mul", "max")))))
        made.append(len(steps) - 1)
        shapes[len(steps) - 1] = shape
    outputs = tuple(dict.fromkeys(made + list(draw(st.lists(
        st.sampled_from(base.outputs), max_size=1)))))
    return Recipe(base.mesh, base.reversed_devices, tuple(inputs), tuple(steps), outputs,
                  axis_types=base.axis_types)


def _key(kind: str, groups: Any, size: int) -> tuple:
    """A collective as compared: each group in its order, the groups in any order."""
    return (kind, tuple(sorted(tuple(g) for g in groups)), size)


def compiled_collectives(recipe: Recipe) -> tuple:
    """The collectives of the recipe's compiled executable, as keys."""
    import jax
    from shardlaw.compiled_hlo import collectives_in_hlo as collectives_of
    text = jax.jit(function_of(recipe)).lower(*arguments_of(recipe)).compile().as_text()
    return tuple(sorted(_key(c.kind, c.replica_groups, c.bytes_per_device)
                        for c in collectives_of(text)))


def _record_held(real: tuple, inlined: set = frozenset()) -> None:
    """The rules a complete, agreeing prediction held to the compiled module (hits)."""
    from shardlaw.properties import hits
    kinds = {kind for kind, _, _ in real}
    held = ["COLL-1", "COLL-4", "COLL-5", "COLL-6"]
    held += ["COLL-2"] if kinds & {"all-gather", "all-to-all"} else []
    held += ["COLL-3", "COLL-7"] if "all-reduce" in kinds else []
    held += ["COLL-11"] if inlined else []
    held += ["COLL-12"] if "with a shard_map" in inlined else []
    for rule_id in held:
        hits.record(SOURCE, rule_id, refused=False)
    hits.record_jax_calls(1)


def compare_collectives(recipe: Recipe) -> CollectivesOutcome:
    """Compile the recipe and ask the spec what its step communicates."""
    from shardlaw.spec import explain_program
    from shardlaw.spec.bridge.program import describe_program
    f = function_of(recipe)
    args = arguments_of(recipe)
    try:
        real = compiled_collectives(recipe)
    except Exception as error:   # (over Explicit axes: a type rule of JAX refuses it)
        if "E" not in recipe.axis_types:
            raise
        TALLY["refused by JAX"] += 1
        return CollectivesOutcome((), (), f"refused by JAX: {type(error).__name__}")
    verdict = explain_program(describe_program(f, *args))
    assert verdict.accepted, verdict.message
    step = verdict.collectives
    why = None if step.complete else str(step.undetermined)
    predicted = tuple(sorted(_key(c.kind, () if c.replica_groups is None else
                                  c.replica_groups.groups(), c.bytes_per_device)
                             for c in step))
    outcome = CollectivesOutcome(real, predicted, why)
    said = "disagree" if outcome.disagreements else "abstain" if why is not None else "agree"
    TALLY[said] += 1
    for feature in _inlined(recipe):
        TALLY[f"{feature} over {_mesh_kind(recipe)} axes: {said}"] += 1
    if why is None and not outcome.disagreements:
        TALLY[f"agree over {_mesh_kind(recipe)} axes"] += 1
        for kind, _, _ in real:
            TALLY[f"kind: {kind}"] += 1
        _record_held(real, _inlined(recipe))
        TALLY["programs without collectives" if not real else "programs with collectives"] += 1
    elif why is not None:
        TALLY[f"why: {why.split(': ', 1)[-1][:70]}"] += 1
    return outcome


def _inlined(recipe: Recipe) -> set:
    """The steps of the recipe whose collectives COLL-11 reads off the inlined program."""
    names = {"inner": "with an inner jit", "shard_map": "with a shard_map",
             "reshard": "with a reshard"}
    return {names[kind] for kind, _, _ in recipe.steps if kind in names}


def _mesh_kind(recipe: Recipe) -> str:
    """"Auto", "Explicit" or "mixed": the recipe's mesh axes' types."""
    types = set(recipe.axis_types or "A")
    return "mixed" if len(types) > 1 else "Explicit" if types == {"E"} else "Auto"


def deep_run(examples: int, seed: int, max_steps: int = 7, report: Any = None,
             explicit: bool = True, only_explicit: bool = False) -> dict:
    """A deep run of the property: ``examples`` drawn programs from ``seed`` (``explicit``:
    some over meshes with Explicit axes; ``only_explicit``: all of them); the tally
    (outcomes, the kinds of the collectives matched, the reasons a list was left open) and
    the recipes that disagreed, written to the file ``report`` (if given) after every 50
    programs as well."""
    drawn = communicating_recipes(max_steps=max_steps, explicit=explicit)
    if only_explicit:
        drawn = drawn.filter(lambda r: "E" in r.axis_types)
    return counted_run(drawn, compare_collectives, TALLY,
                       ("agree", "abstain", "disagree", "refused by JAX"), examples, seed,
                       report)


if __name__ == "__main__":   # ... collectives_harness N SEED [REPORT [explicit]]
    import json
    import sys

    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    print(json.dumps(deep_run(int(sys.argv[1]), int(sys.argv[2]),
                              report=sys.argv[3] if len(sys.argv) > 3 else None,
                              only_explicit=sys.argv[4:5] == ["explicit"])))
