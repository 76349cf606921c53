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
import re
from typing import Any

from hypothesis import strategies as st

from .propagation_harness import (
    MESHES, NAMES, Recipe, arguments_of, counted_run, function_of, recipes,
)

__all__ = ["CollectivesOutcome", "compare_collectives", "communicating_recipes", "TALLY",
           "loop_recipes", "hlo_runs", "loop_function_of", "compiled_runs"]

# Over the run: outcomes ("agree", "abstain", "disagree"), per kind of the collectives
# compared on complete programs ("kind: all-gather") and the abstentions' reasons.
TALLY: collections.Counter = collections.Counter()
# The source under which the rules held are recorded (shardlaw.properties.hits).
SOURCE = "collectives"


@dataclasses.dataclass(frozen=True)
class CollectivesOutcome:
    """What one recipe gave: the compiled module's collectives and the spec's, each as a
    sorted tuple of (kind, groups, bytes per device); ``why``: the reason the spec's list
    is incomplete (None: complete); ``real_runs`` and ``predicted_runs``: the same with how
    often one step runs each (the HLO's: 1 outside loops, a while loop's known trip count
    in its body, None in a conditional's branch; the spec's trips, None where the data
    decide, which matches any repeated run)."""

    real: tuple
    predicted: tuple
    why: str | None
    real_runs: tuple = ()
    predicted_runs: tuple = ()

    @property
    def disagreements(self) -> list[str]:
        if self.why is not None:
            return []
        if self.real != self.predicted:
            return _differences(self.real, self.predicted)
        missing = collections.Counter(self.real_runs) - collections.Counter(self.predicted_runs)
        extra = collections.Counter(self.predicted_runs) - collections.Counter(self.real_runs)
        for key in sorted((k for k in extra if k[3] is None), key=repr):
            # (runs the data decide: any repeated run of the same collective in the HLO)
            for other in sorted((k for k in missing if k[:3] == key[:3] and k[3] != 1),
                                key=repr):
                while extra[key] and missing[other]:
                    extra[key] -= 1
                    missing[other] -= 1
        return _differences(tuple((+missing).elements()), tuple((+extra).elements()),
                            " (with their runs)") if +missing or +extra else []


def _differences(real: tuple, predicted: tuple, what: str = "") -> list[str]:
    missing = collections.Counter(real) - collections.Counter(predicted)
    extra = collections.Counter(predicted) - collections.Counter(real)
    return [f"in the HLO, not predicted{what}: {sorted(missing, key=repr)}",
            f"predicted, not in the HLO{what}: {sorted(extra, key=repr)}"]


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
        kind = draw(st.sampled_from(STEPS))
        if kind == "move" and base.axis_types and "A" not in base.axis_types:
            kind = "reduce"   # (no Auto axis to constrain over: a reduction communicates)
        if kind == "reshard" and "E" not in base.axis_types:
            kind = "move"     # (a reshard names Explicit axes only)
        if kind == "reshard":
            steps.append(("reshard", (v,), _one_axis(draw, shape, base.mesh, "".join(
                "A" if t == "E" else "B" for t in base.axis_types))))
        elif kind == "loop":
            step, shape = _loop_step(draw, v, shape, base.mesh, fresh)
            steps.append(step)
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


# The steps appended (a loop twice as often: most of its draws communicate nothing).
STEPS = ("reduce", "binary", "dot", "move", "reshard", "loop", "loop")
LOOPS = ("scan dot", "scan reduce", "fori const", "fori constrain", "cond dot",
         "cond reduce", "while const", "scan nested", "fori reduced const")


def _loop_step(draw: Any, v: int, shape: tuple[int, ...], mesh: tuple[int, ...],
               fresh: Any) -> tuple:
    """A control-flow step over ``v`` whose body communicates (and the shape of its
    result): a scan over stacked weights (``c @ w``, its ``ys`` a reduction), a scan
    reducing each slice of ``xs``, a fori_loop over a constant split otherwise, summing a
    constant (moved out of the loop) or constraining its carry, a cond whose branch multiplies or reduces, a while loop, a
    scan inside a scan; ``xs`` and the constants fresh inputs on drawn splits."""
    which = draw(st.sampled_from(LOOPS))
    length = draw(st.sampled_from((2, 3)))
    if which in ("scan dot", "cond dot") and len(shape) == 2:
        n = shape[-1]
        stacked = (length, n, n) if which == "scan dot" else (n, n)
        w = fresh(stacked, _one_axis(draw, stacked, mesh) if draw(st.integers(0, 3))
                  else (None,) * len(stacked))
        return ("loop", (v, w), (which, length, None)), shape
    if which in ("scan reduce", "scan nested", "cond reduce"):
        lead = 1 if which != "cond reduce" else 0
        stacked = ((length,) if lead else ()) + shape
        split = _one_axis(draw, stacked, mesh)
        at = [d - lead for d, e in enumerate(split) if e is not None and d >= lead]
        # (mostly over the dimension the slice splits: the body all-reduces it)
        axis = at[0] if at and draw(st.integers(0, 3)) else draw(
            st.integers(0, len(shape) - 1))
        w = fresh(stacked, split)
        return ("loop", (v, w), (which, length, axis)), shape
    if which == "fori reduced const":   # (summed where it stands: moved out of the loop)
        split = _one_axis(draw, shape, mesh)
        at = [d for d, e in enumerate(split) if e is not None]
        axis = at[0] if at and draw(st.integers(0, 3)) else draw(
            st.integers(0, len(shape) - 1))
        return ("loop", (v, fresh(shape, split)), (which, length, axis)), shape
    w = fresh(shape, _one_axis(draw, shape, mesh))
    split = _one_axis(draw, shape, mesh) if which == "fori constrain" else None
    return ("loop", (v, w), (which if which != "scan dot" and which != "cond dot"
                             else "fori const", length, split)), shape


def loop_body(param: tuple, args: list, mesh: Any) -> Any:
    """The real value of a drawn loop step (:func:`_loop_step`) over ``args``."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    which, length, extra = param
    x, w = args
    if which == "scan dot":
        return lax.scan(lambda c, t: (jnp.tanh(c @ t), (c @ t).sum(0)), x, w)[0]
    if which == "scan reduce":
        return lax.scan(lambda c, t: (c + jnp.sin(t).sum(extra, keepdims=True), None),
                        x, w)[0]
    if which == "scan nested":
        def outer(c: Any, t: Any) -> tuple:
            inner = lax.scan(lambda d, u: (d * u.max(extra, keepdims=True), None), c,
                             jnp.broadcast_to(t, (2, *t.shape)))[0]
            return inner, None
        return lax.scan(outer, x, w)[0]
    if which == "fori const":
        return lax.fori_loop(0, length, lambda i, c: jnp.sin(c) * w, x)
    if which == "fori reduced const":
        return lax.fori_loop(0, length, lambda i, c: jnp.sin(c) * w.sum(extra, keepdims=True),
                             x)
    if which == "fori constrain":
        from .propagation_harness import spec_of
        put = jax.sharding.NamedSharding(mesh, spec_of(extra))
        return lax.fori_loop(0, length, lambda i, c: lax.with_sharding_constraint(
            jnp.sin(c) + w, put), x)
    if which == "while const":
        return lax.while_loop(lambda s: s[1] < length, lambda s: (
            jnp.cos(s[0]) * w, s[1] + 1), (x, 0))[0]
    if which == "cond dot":
        return lax.cond(x.sum() > 0, lambda a, u: jnp.tanh(a @ u), lambda a, u: a * 2.0,
                        x, w)
    return lax.cond(x.sum() > 0, lambda a, u: a + u.sum(extra, keepdims=True),
                    lambda a, u: a - 1.0, x, w)


def loop_function_of(recipe: Recipe) -> Any:
    """The recipe's real function (:func:`function_of`), its loop steps made here."""
    if not any(kind == "loop" for kind, _, _ in recipe.steps):
        return function_of(recipe)
    mesh = arguments_of(recipe)[0].sharding.mesh

    def one(kind: str, operands: list, param: Any) -> Any:
        if kind == "loop":
            return loop_body(param, operands, mesh)
        alone = dataclasses.replace(recipe, steps=tuple(
            ("input", (), i) for i in range(len(operands))) + (
            (kind, tuple(range(len(operands))), param),), outputs=(len(operands),),
            out_shardings=())
        return function_of(alone, mesh)(*operands)[0]

    def f(*inputs: Any) -> Any:
        values: list = []
        for kind, operands, param in recipe.steps:
            values.append(inputs[param] if kind == "input" else
                          one(kind, [values[k] for k in operands], param))
        return tuple(values[k] for k in recipe.outputs)
    return f


def _key(kind: str, groups: Any, size: int, runs: int | None = 1) -> tuple:
    """A collective as compared: each group in its order, the groups in any order, and how
    often one step runs it (None: the data decide)."""
    return (kind, tuple(sorted(tuple(g) for g in groups)), size, runs)


_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) \(", re.M)
_CALLS = re.compile(r"%([\w.\-]+) = .*? (while|conditional)\((.*)$", re.M)


def hlo_runs(text: str) -> dict[str, int | None]:
    """Per instruction of compiled HLO ``text``, how often one run of the module runs it:
    1 in the entry computation, times a while loop's known trip count in its body, None
    in a conditional's branch, a while loop's condition or a loop of unknown count."""
    owner: dict[str, str] = {}
    computation = ""
    for line in text.splitlines():
        found = _COMPUTATION.match(line)
        if found:
            computation = found.group(1) if not line.startswith("ENTRY") else ""
        name = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = ", line)
        if name:
            owner[name.group(1)] = computation
    called: dict[str, tuple[str, Any]] = {}   # computation -> (caller's computation, times)
    for m in _CALLS.finditer(text):
        rest, at = m.group(3), owner.get(m.group(1), "")
        if m.group(2) == "while":
            trips = re.search(r'known_trip_count":\{"n":"(\d+)"', rest)
            body = re.search(r"body=%([\w.\-]+)", rest)
            cond = re.search(r"condition=%([\w.\-]+)", rest)
            if body:
                called[body.group(1)] = (at, int(trips.group(1)) if trips else None)
            if cond:
                called[cond.group(1)] = (at, None)
        else:
            for branch in re.findall(r"%([\w.\-]+)", re.sub(r"^.*?\)", "", rest)):
                if branch in {c for c in _COMPUTATION.findall(text)}:
                    called[branch] = (at, None)

    def runs(comp: str) -> int | None:
        if not comp:
            return 1
        if comp not in called:
            return 1
        at, times = called[comp]
        outer = runs(at)
        return None if times is None or outer is None else outer * times
    return {name: runs(comp) for name, comp in owner.items()}


def compiled_collectives(recipe: Recipe) -> tuple:
    """The collectives of the recipe's compiled executable, as keys (without runs)."""
    return tuple(sorted(key[:3] for key in compiled_runs(recipe)))


def compiled_runs(recipe: Recipe) -> tuple:
    """The collectives of the recipe's compiled executable, as keys with their runs."""
    import jax
    from shardlaw.compiled_hlo import collectives_in_hlo as collectives_of
    f = loop_function_of(recipe)
    text = jax.jit(f).lower(*arguments_of(recipe)).compile().as_text()
    runs = hlo_runs(text)
    return tuple(sorted((_key(c.kind, c.replica_groups, c.bytes_per_device,
                               runs.get(c.name, 1)) for c in collectives_of(text)), key=repr))


def _record_held(real: tuple, inlined: set = frozenset(), step: Any = (),
                 loops: frozenset = frozenset()) -> None:
    """The rules a complete, agreeing prediction held to the compiled module (hits)."""
    from shardlaw.properties import hits
    kinds = {kind for kind, _, _ in real}
    held = ["COLL-1", "COLL-4", "COLL-5", "COLL-6"]
    held += ["COLL-8"] if any(c.computation for c in step) else []
    held += ["COLL-9"] if any(not c.computation and ".body[" in c.path for c in step) else []
    held += ["COLL-10"] if any(c.path in loops for c in step) else []   # (at a loop's edge)
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
    f = loop_function_of(recipe)
    args = arguments_of(recipe)
    try:
        real_runs = compiled_runs(recipe)
    except Exception as error:   # (over Explicit axes: a type rule of JAX refuses it)
        if "E" not in recipe.axis_types:
            raise
        TALLY["refused by JAX"] += 1
        return CollectivesOutcome((), (), f"refused by JAX: {type(error).__name__}")
    program = describe_program(f, *args)
    verdict = explain_program(program)
    assert verdict.accepted, verdict.message
    step = verdict.collectives
    why = None if step.complete else str(step.undetermined)
    predicted_runs = tuple(sorted((_key(c.kind, () if c.replica_groups is None else
                                        c.replica_groups.groups(), c.bytes_per_device,
                                        c.trips) for c in step), key=repr))
    real = tuple(sorted(key[:3] for key in real_runs))
    outcome = CollectivesOutcome(real, tuple(sorted(key[:3] for key in predicted_runs)), why,
                                 real_runs, predicted_runs)
    said = "disagree" if outcome.disagreements else "abstain" if why is not None else "agree"
    TALLY[said] += 1
    for feature in _inlined(recipe):
        TALLY[f"{feature} over {_mesh_kind(recipe)} axes: {said}"] += 1
    if any(kind == "loop" for kind, _, _ in recipe.steps):
        TALLY["loop programs: " + said] += 1
    if why is None and not outcome.disagreements:
        TALLY[f"agree over {_mesh_kind(recipe)} axes"] += 1
        for kind, _, _ in real:
            TALLY[f"kind: {kind}"] += 1
        if any(r != 1 for *_, r in real_runs):
            TALLY["loop programs agreeing, communicating in a body"] += 1
        _record_held(real, _inlined(recipe), step, frozenset(
            f"body[{k}]" for k, eq in enumerate(program.equations)
            if eq.kind in ("scan", "while", "cond")))
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


@st.composite
def loop_recipes(draw: Any, max_steps: int = 4, explicit: bool = False) -> Recipe:
    """:func:`communicating_recipes` with at least one loop or cond whose body
    communicates (the others rejected)."""
    from hypothesis import reject
    recipe = draw(communicating_recipes(max_steps=max_steps, explicit=explicit))
    if not any(kind == "loop" for kind, _, _ in recipe.steps):
        reject()
    return recipe


def deep_run(examples: int, seed: int, max_steps: int = 7, report: Any = None,
             explicit: bool = True, only_explicit: bool = False, loops: bool = False
             ) -> dict:
    """A deep run of the property: ``examples`` drawn programs from ``seed`` (``explicit``:
    some over meshes with Explicit axes; ``only_explicit``: all of them; ``loops``: each
    with a loop or cond whose body communicates); the tally (outcomes, the kinds of the
    collectives matched, the reasons a list was left open) and the recipes that disagreed,
    written to the file ``report`` (if given) after every 50 programs as well."""
    drawn = loop_recipes(max_steps=4) if loops else communicating_recipes(
        max_steps=max_steps, explicit=explicit)
    if only_explicit:
        drawn = drawn.filter(lambda r: "E" in r.axis_types)
    return counted_run(drawn, compare_collectives, TALLY,
                       ("agree", "abstain", "disagree", "refused by JAX"), examples, seed,
                       report)


if __name__ == "__main__":
    # python -m shardlaw.properties.collectives_harness N SEED [REPORT [explicit]] [--loops]
    import json
    import sys

    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    given = [a for a in sys.argv[1:] if a != "--loops"]
    print(json.dumps(deep_run(int(given[0]), int(given[1]),
                              report=given[2] if len(given) > 2 else None,
                              only_explicit=given[3:4] == ["explicit"],
                              loops="--loops" in sys.argv)))
