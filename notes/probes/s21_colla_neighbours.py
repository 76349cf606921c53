"""Neighbours of the s21 colla recipe (issue 33): drawn concatenates of two or three inputs
split over the mesh's axes (maybe differently), maybe summed after, held by
properties/collectives_harness.py's compare_collectives with the concatenate abstention
(collectives_plans.concatenated_apart) on and off; prints both tallies and the recipes whose
verdict differs or that disagree.
usage: python notes/probes/s21_colla_neighbours.py N SEED"""
import collections
import random
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import collectives_harness as C  # noqa: E402
from shardlaw.spec.program import collectives as K  # noqa: E402

MESHES = {(2, 4): ("x", "y"), (4, 2): ("x", "y"), (8,): ("x",), (2, 2, 2): ("x", "y", "z")}


def split(rng, names):
    free, out = list(names), []
    for _ in range(3):
        take = [a for a in free if rng.random() < 0.4]
        rng.shuffle(take)
        free = [a for a in free if a not in take]
        out.append(tuple(take) if len(take) > 1 else take[0] if take else None)
    return tuple(out)


def recipe(rng):
    mesh = rng.choice(list(MESHES))
    names = MESHES[mesh]
    n = rng.choice((2, 2, 3))
    inputs = tuple(((8, 8, 8), split(rng, names)) for _ in range(n))
    steps = [("input", (), i) for i in range(n)]
    steps.append(("concat", tuple(range(n)), rng.randrange(3)))
    outputs = [n]
    if rng.random() < 0.5:
        steps.append(("reduce", (rng.choice((0, n)),), ("sum", rng.randrange(3))))
        outputs = rng.choice(([n, n + 1], [n + 1]))
    return C.Recipe(mesh=mesh, reversed_devices=False, inputs=inputs, steps=tuple(steps),
                    outputs=tuple(outputs), devices=(), out_shardings=(), axis_types="")


def verdict(r):
    try:
        o = C.compare_collectives(r)
    except Exception as error:  # noqa: BLE001
        return f"bare {type(error).__name__}"
    return "disagree" if o.disagreements else "open" if o.why else "agree"


rng = random.Random(int(sys.argv[2]))
tallies = {"on": collections.Counter(), "off": collections.Counter()}
original = K.concatenated_apart
for _ in range(int(sys.argv[1])):
    r = recipe(rng)
    K.concatenated_apart = original
    on = verdict(r)
    K.concatenated_apart = lambda eq, held: None
    off = verdict(r)
    tallies["on"][on] += 1
    tallies["off"][off] += 1
    if on != off or on == "disagree":
        print(f"{off} -> {on}\t{r!r}")
K.concatenated_apart = original
print(dict(tallies["on"]), "(on)")
print(dict(tallies["off"]), "(off)")
