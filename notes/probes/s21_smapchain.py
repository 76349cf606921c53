"""Neighbours of the s21 smapchain recipes: 1-3 shard_maps leaving axes automatic in a row
over mesh (2, 2, 2) (Auto), each manual over a drawn proper subset of the axes, its spec a
drawn split over those axes, its body cos, psum or transpose; the input's split drawn over
every axis. Compares each against jax.jit on 8 CPU devices and prints the tally (agree,
abstain, disagree) and the disagreeing recipes (prop lines for replay_disagreements.py).
usage: python notes/probes/s21_smapchain.py [COUNT [SEED]]"""
import collections
import random
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import propagation_harness as P  # noqa: E402

NAMES = ("x", "y", "z")
SHAPES = ((4, 2, 16), (8, 4, 16), (4, 8), (16, 4, 8))


def split_of(rng: random.Random, shape: tuple, axes: tuple) -> tuple:
    """Per dimension None, one axis or two of ``axes`` (each once) dividing it."""
    free, out = list(axes), []
    for dim in shape:
        fit = [a for a in free if dim % 2 == 0]
        pick = rng.choice(("none", "one", "two"))
        if pick == "one" and fit:
            a = rng.choice(fit)
            out.append(a)
            free.remove(a)
        elif pick == "two" and len(fit) >= 2 and dim % 4 == 0:
            a, b = rng.sample(fit, 2)
            out.append((a, b))
            free.remove(a)
            free.remove(b)
        else:
            out.append(None)
    return tuple(out)


def ways(entry) -> int:
    return 1 if entry is None else 2 if isinstance(entry, str) else 2 ** len(entry)


def recipe_of(rng: random.Random) -> P.Recipe:
    """A drawn chain of shard_maps leaving axes automatic over one input."""
    shape = rng.choice(SHAPES)
    inputs = ((shape, split_of(rng, shape, NAMES)),)
    steps = [("input", (), 0)]
    for _ in range(rng.choice((1, 2, 2, 3))):
        manual = tuple(sorted(rng.sample(NAMES, rng.choice((1, 2)))))
        split = split_of(rng, shape, manual)
        body = rng.choice(("cos", "psum", "transpose"))
        steps.append(("shard_map_auto", (len(steps) - 1,), (split, manual, body)))
        local = tuple(n // ways(e) for n, e in zip(shape, split))
        shape = shape[::-1] if body == "transpose" else local if body == "psum" else shape
    last = len(steps) - 1
    outputs = rng.choice(((last,), (1,), (1, last)) if last > 1 else ((last,),))
    return P.Recipe((2, 2, 2), False, inputs, tuple(steps), outputs)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    tally: collections.Counter = collections.Counter()
    for _ in range(count):
        recipe = recipe_of(rng)
        try:
            outcome = P.compare_recipe(recipe)
            verdict = "disagree" if outcome.disagreements else \
                "abstain" if outcome.abstained else "agree"
            why = "; ".join(outcome.disagreements)[:200]
        except Exception as error:  # noqa: BLE001
            verdict, why = "error", f"{type(error).__name__}: {str(error)[:200]}"
        tally[verdict] += 1
        if verdict in ("disagree", "error"):
            print(f"prop\t{recipe!r}\t# {verdict}: {why}", flush=True)
    print(dict(tally))


if __name__ == "__main__":
    main()
