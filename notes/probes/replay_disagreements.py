"""Replay the recipes of a deep run's disagreements (notes/probes/*.tsv: "prop" or "coll",
a tab, the Recipe's repr) against jax.jit on 8 CPU devices and print what still differs.
usage: python notes/probes/replay_disagreements.py notes/probes/s19_final_disagreements.tsv"""
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import collectives_harness as C  # noqa: E402
from shardlaw.properties import propagation_harness as P  # noqa: E402

for number, line in enumerate(open(sys.argv[1])):
    kind, text = line.rstrip("\n").split("\t", 1)
    harness = P if kind == "prop" else C
    recipe = eval(text, {"Recipe": harness.Recipe})
    compare = P.compare_recipe if kind == "prop" else C.compare_collectives
    try:
        found = compare(recipe).disagreements
    except Exception as error:  # noqa: BLE001
        found = [f"bare {type(error).__name__}: {error}"]
    print(number, kind, "agrees" if not found else "DISAGREES: " + "; ".join(found)[:300])
