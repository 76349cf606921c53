"""Neighbours of the s21 collexp recipe (issue 33, COLL-19): drawn communicating recipes over
meshes with Explicit axes (most beside Auto ones), inner jits with in and out shardings,
reshards, held by properties/collectives_harness.py's compare_collectives; prints the tally
and the disagreeing recipes (as replay_disagreements.py reads them).
usage: python notes/probes/s21_collexp_neighbours.py N SEED [--near]
(--near: only recipes with an inner jit, a reshard or a shard_map step)"""
import json
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import collectives_harness as C  # noqa: E402
from shardlaw.properties.propagation_harness import counted_run  # noqa: E402

NEAR = {"inner", "reshard", "shard_map"}


def wanted(recipe) -> bool:
    if "E" not in recipe.axis_types:
        return False
    return "--near" not in sys.argv or any(kind in NEAR for kind, _, _ in recipe.steps)


def compare(recipe):
    try:
        return C.compare_collectives(recipe)
    except Exception as error:  # noqa: BLE001  (counted, not raised)
        C.TALLY[f"bare {type(error).__name__}"] += 1
        return C.CollectivesOutcome((), (), None, (("bare", str(error)[:200]),), ())


if __name__ == "__main__":
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    drawn = C.communicating_recipes(max_steps=7, explicit=True).filter(wanted)
    found = counted_run(drawn, compare, C.TALLY, ("agree", "abstain", "disagree",
                                                  "refused by JAX"), n, seed)
    tally = found["tally"]
    print(json.dumps({k: tally[k] for k in sorted(tally)}, indent=1))
    for line in found["disagreements"]:
        print("DISAGREES", line[:400])
