"""Neighbours of the s21 collexp recipe (issue 33, COLL-19): drawn communicating recipes over
meshes with Explicit axes (most beside Auto ones), inner jits with in and out shardings,
reshards, held by properties/collectives_harness.py's compare_collectives; prints the tally
and the disagreeing recipes (as replay_disagreements.py reads them).
usage: python notes/probes/s21_collexp_neighbours.py N SEED [--near | --shape]
(--near: only recipes with an inner jit, a reshard or a shard_map step; --shape: a drawn
recipe over Explicit axes beside Auto ones, its steps kept or not, given the recipe's shape:
an input split over an Explicit axis then an Auto one, maybe resharded to the Explicit one
and maybe through a unary step, read by one or two elementwise operations with fresh
inputs, the results and maybe the value returned)"""
import json
import sys

import dataclasses

import jax
from hypothesis import reject
from hypothesis import strategies as st

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import collectives_harness as C  # noqa: E402
from shardlaw.properties.propagation_harness import (  # noqa: E402
    BINARY, NAMES, UNARY, counted_run,
)

NEAR = {"inner", "reshard", "shard_map"}


def wanted(recipe) -> bool:
    if "E" not in recipe.axis_types:
        return False
    return "--near" not in sys.argv or any(kind in NEAR for kind, _, _ in recipe.steps)


@st.composite
def shaped(draw):
    """A drawn recipe over Explicit axes beside Auto ones with the s21 shape appended."""
    base = draw(C.communicating_recipes(max_steps=4, explicit=True))
    names = NAMES[:len(base.mesh)]
    sizes = dict(zip(names, base.mesh))
    types = base.axis_types or "A" * len(names)
    explicit = [a for a, t in zip(names, types) if t == "E" and sizes[a] > 1]
    auto = [a for a, t in zip(names, types) if t == "A" and sizes[a] > 1]
    if not explicit or not auto:
        reject()
    e, a = draw(st.sampled_from(explicit)), draw(st.sampled_from(auto))
    rank = draw(st.sampled_from((1, 2)))
    shape, pad = (16,) + (4,) * (rank - 1), (None,) * (rank - 1)
    kept = draw(st.booleans())   # (the drawn steps kept, or the mesh alone: most refused)
    inputs, steps = (list(base.inputs), list(base.steps)) if kept else ([], [])

    def fresh(split):
        inputs.append((shape, split))
        steps.append(("input", (), len(inputs) - 1))
        return len(steps) - 1

    def step(kind, operands, param):
        steps.append((kind, operands, param))
        return len(steps) - 1
    v = fresh(((e, a),) + pad)
    if draw(st.booleans()):
        v = step("reshard", (v,), (e,) + pad)
    if draw(st.booleans()):
        v = step("unary", (v,), draw(st.sampled_from(UNARY)))
    made = []
    for _ in range(draw(st.integers(1, 2))):
        w = fresh(draw(st.sampled_from([(None,) + pad, (e,) + pad, ((e, a),) + pad])))
        made.append(step("binary", (v, w), draw(st.sampled_from(BINARY))))
    outputs = made + ([v] if draw(st.booleans()) else []) + list(base.outputs[:kept])
    return dataclasses.replace(base, inputs=tuple(inputs), steps=tuple(steps),
                               outputs=tuple(dict.fromkeys(outputs)))


def compare(recipe):
    try:
        return C.compare_collectives(recipe)
    except Exception as error:  # noqa: BLE001  (counted, not raised)
        C.TALLY[f"bare {type(error).__name__}"] += 1
        return C.CollectivesOutcome((), (), None, (("bare", str(error)[:200]),), ())


if __name__ == "__main__":
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    drawn = shaped() if "--shape" in sys.argv else C.communicating_recipes(
        max_steps=7, explicit=True).filter(wanted)
    found = counted_run(drawn, compare, C.TALLY, ("agree", "abstain", "disagree",
                                                  "refused by JAX"), n, seed)
    tally = found["tally"]
    print(json.dumps({k: tally[k] for k in sorted(tally)}, indent=1))
    for line in found["disagreements"]:
        print("DISAGREES", line[:400])
