"""Neighbours of the carrysq recipe (session 21, issue 33): a scan whose carry is a reshaped
(and sometimes converted) input and whose xs is another input, over meshes (2, 2, 2),
(2, 4), (4, 2), devices in order, reversed or drawn; the xs sometimes read again outside
the loop (a squeeze of it returned, sin of it returned, or itself returned). Each recipe is
held to jax.jit on 8 CPU devices by the propagation harness; prints the tally (agree,
abstain, disagree) and the disagreeing recipes.
usage: python notes/probes/carrysq_neighbours.py [N] [SEED]"""
import collections
import random
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import propagation_harness as P  # noqa: E402

MESHES = ((2, 2, 2), (2, 4), (4, 2))


def split_of(rng: random.Random, shape: tuple, mesh: tuple) -> tuple:
    """Per dimension None, one axis or two dividing it, each axis used once."""
    size = dict(zip(P.NAMES, mesh))
    free = list(P.NAMES[:len(mesh)])
    out = []
    for dim in shape:
        rng.shuffle(free)
        pick, ways = [], 1
        for a in list(free):
            if len(pick) < rng.choice((0, 1, 1, 2)) and dim % (ways * size[a]) == 0:
                pick.append(a)
                ways *= size[a]
                free.remove(a)
        out.append(None if not pick else pick[0] if len(pick) == 1 else tuple(pick))
    return tuple(out)


def recipe(rng: random.Random) -> P.Recipe:
    mesh = rng.choice(MESHES)
    a, b = rng.choice(((2, 2), (2, 4), (4, 2), (4, 4)))
    base = rng.choice(((4, a, b), (4, a * b)))
    carry = (4, a * b)
    xs = (rng.choice((2, 4)),) + carry
    steps = [("input", (), 0)]
    if rng.random() < 0.5:
        steps.append(("convert", (len(steps) - 1,), None))
    if base != carry:
        steps.append(("reshape", (len(steps) - 1,), carry))
    c = len(steps) - 1
    steps.append(("input", (), 1))
    x = len(steps) - 1
    steps.append(("flow", (c, x), "scan carry"))
    outputs = [len(steps) - 1]
    extra = rng.choice(("none", "none", "squeeze", "sin", "itself"))
    if extra == "squeeze":
        steps.append(("squeeze", (x,), 1))
        outputs.append(len(steps) - 1)
    elif extra == "sin":
        steps.append(("unary", (x,), "sin"))
        outputs.append(len(steps) - 1)
    elif extra == "itself":
        outputs.append(x)
    order = rng.choice(("in order", "reversed", "drawn"))
    devices = tuple(rng.sample(range(8), 8)) if order == "drawn" else ()
    return P.Recipe(mesh=mesh, reversed_devices=order == "reversed",
                    inputs=((base, split_of(rng, base, mesh)), (xs, split_of(rng, xs, mesh))),
                    steps=tuple(steps), outputs=tuple(outputs), devices=devices,
                    out_shardings=(None,) * len(outputs), axis_types="")


def main(n: int, seed: int) -> None:
    rng = random.Random(seed)
    tally: collections.Counter = collections.Counter()
    for _ in range(n):
        r = recipe(rng)
        xs_read = len(r.outputs) > 1
        try:
            outcome = P.compare_recipe(r)
        except Exception as error:  # noqa: BLE001
            tally["error"] += 1
            print("ERROR", type(error).__name__, error, r)
            continue
        kind = ("disagree" if outcome.disagreements else
                "abstain" if outcome.undetermined else "agree")
        tally[kind] += 1
        tally[(kind, "xs read again" if xs_read else "xs read by the scan alone")] += 1
        if kind == "disagree":
            print("prop\t" + repr(r))
    for key, count in sorted(tally.items(), key=str):
        print(key, count)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60, int(sys.argv[2]) if len(sys.argv) > 2 else 21)
