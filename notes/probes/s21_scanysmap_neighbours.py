"""Neighbours of the s21_scanysmap recipe (PROP-26): a scan's stacked ys read by a shard_map
leaving axes automatic (and by a full one), with and without an out sharding on its result,
meshes (4, 2) and (2, 4), devices in order and reversed; each held to jax.jit on 8 CPU
devices. Prints the tally (agree / abstain / disagree) and every disagreement.
usage: .venv/bin/python notes/probes/s21_scanysmap_neighbours.py"""
import collections
import itertools

import jax

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties.propagation_harness import Recipe, compare_recipe  # noqa: E402

OUTS = (None, ("y", None, None, "x"), (None, "y", None, None), ("x", None, None, None),
        (None, None, "y", "x"), ("y", None, None, None))


def recipes():
    for mesh, reverse, manual, out, full in itertools.product(
            ((4, 2), (2, 4)), (True, False), (("x",), ("y",)), OUTS, (False, True)):
        carry, xs = ((None, "y", "x"), (None, None, "y", "x")) if mesh == (4, 2) else \
            ((None, "x", "y"), (None, None, "x", "y"))
        steps = [("input", (), 0), ("unary", (0,), "tanh"), ("input", (), 1),
                 ("flow", (1, 2), "scan ys"),
                 ("shard_map_auto", (3,), ((None,) * 4, manual, "cos"))]
        outputs, given = (3, 4), (None, out)
        if full:   # a full shard_map reading the ys too
            steps.append(("shard_map", (3,), xs))
            outputs, given = (3, 4, 5), (None, out, None)
        yield Recipe(mesh=mesh, reversed_devices=reverse,
                     inputs=(((2, 2, 8), carry), ((4, 2, 2, 8), xs)), steps=tuple(steps),
                     outputs=outputs, out_shardings=given if out else ())


def main() -> None:
    tally: collections.Counter = collections.Counter()
    for recipe in recipes():
        outcome = compare_recipe(recipe)
        verdict = "disagree" if outcome.disagreements else \
            "abstain" if outcome.abstained else "agree"
        tally[verdict] += 1
        if outcome.disagreements:
            print("DISAGREES", recipe, outcome.disagreements)
    print(dict(tally))


if __name__ == "__main__":
    main()
