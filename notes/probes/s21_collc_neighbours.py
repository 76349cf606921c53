"""Neighbours of the s21 collc recipe (issue 33): a broadcast of a broadcast's result, which
StableHLO folds into one broadcast of the first one's operand (collectives_plans.py's
through_folded_broadcasts). Draws communicating recipes over Auto meshes with an input
(16,) on a drawn split broadcast twice, maybe constrained to a drawn split of the three
dimensions, maybe through a unary step, beside a drawn recipe's steps or alone; held by
properties/collectives_harness.py's compare_collectives; prints the tally and the
disagreeing recipes (as replay_disagreements.py reads them).
usage: python notes/probes/s21_collc_neighbours.py N SEED [--old] [--plain] [--log FILE]
(--old: the folded broadcast's operand read as the first result, as before; --plain:
communicating_recipes as drawn, without the appended shape; --log: each recipe's outcome
written to FILE, a line each, to set a run beside an --old one)"""
import dataclasses
import json
import sys

import jax
from hypothesis import strategies as st

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import collectives_harness as C  # noqa: E402
from shardlaw.properties.propagation_harness import NAMES, UNARY, counted_run  # noqa: E402

if "--old" in sys.argv:
    from shardlaw.spec.program import collectives as _collectives
    _collectives.through_folded_broadcasts = lambda program, k, every: (
        program.equations[k], every)


def _split(draw, names, rank):
    """A split of ``rank`` dimensions over some of ``names`` (each once)."""
    left, out = list(names), []
    for _ in range(rank):
        taken = draw(st.lists(st.sampled_from(left), unique=True, max_size=2)) if left else []
        left = [a for a in left if a not in taken]
        out.append(tuple(taken) if len(taken) > 1 else taken[0] if taken else None)
    return tuple(out)


@st.composite
def shaped(draw):
    """A drawn Auto recipe (kept or not) with the s21 collc shape appended."""
    base = draw(C.communicating_recipes(max_steps=3))
    names = [a for a, n in zip(NAMES, base.mesh) if n > 1]
    kept = draw(st.booleans())
    inputs, steps = (list(base.inputs), list(base.steps)) if kept else ([], [])
    inputs.append(((16,), _split(draw, names, 1)))
    steps.append(("input", (), len(inputs) - 1))
    first = draw(st.sampled_from(((0, (16, 16)), (1, (16, 16)))))
    steps.append(("broadcast", (len(steps) - 1,), first))
    where = draw(st.integers(0, 2))
    steps.append(("broadcast", (len(steps) - 1,), (where, (16, 16)[:where] + (4,)
                                                   + (16, 16)[where:])))
    if draw(st.booleans()):
        steps.append(("constrain", (len(steps) - 1,), _split(draw, names, 3)))
    if draw(st.booleans()):
        steps.append(("unary", (len(steps) - 1,), draw(st.sampled_from(UNARY))))
    outputs = [len(steps) - 1] + list(base.outputs[:kept])
    return dataclasses.replace(base, inputs=tuple(inputs), steps=tuple(steps),
                               outputs=tuple(dict.fromkeys(outputs)), axis_types="")


def compare(recipe):
    try:
        return C.compare_collectives(recipe)
    except Exception as error:  # noqa: BLE001  (counted, not raised)
        C.TALLY[f"bare {type(error).__name__}"] += 1
        return C.CollectivesOutcome((), (), None, (("bare", str(error)[:200]),), ())


def logged(recipe):
    outcome = compare(recipe)
    said = "disagree" if outcome.disagreements else "abstain" if outcome.why else "agree"
    with open(sys.argv[sys.argv.index("--log") + 1], "a") as out:
        out.write(f"{said}\t{recipe!r}\n")
    return outcome


if __name__ == "__main__":
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    drawn = C.communicating_recipes(max_steps=7) if "--plain" in sys.argv else shaped()
    found = counted_run(drawn, logged if "--log" in sys.argv else compare, C.TALLY, ("agree", "abstain", "disagree",
                                                  "refused by JAX"), n, seed)
    tally = found["tally"]
    print(json.dumps({k: tally.get(k, 0) for k in ("agree", "abstain", "disagree", "bare Exception")}, indent=1))
    for line in found["disagreements"]:
        print("DISAGREES", line[:400])
