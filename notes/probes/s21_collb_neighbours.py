"""Neighbours of the s21 collb recipe (issue 33, COLL-9): drawn communicating recipes with
a loop step, held by properties/collectives_harness.py's compare_collectives twice: with a
body's hoisted reshards made once with the other reshards of the computation they land
in (collectives_loops.Landing) and with the body's own alone (as before); prints both
tallies and the recipes whose verdict changed (as replay_disagreements.py reads them).
usage: python notes/probes/s21_collb_neighbours.py N SEED"""
import collections
import json
import sys

import jax
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as seed_

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import collectives_harness as C  # noqa: E402
from shardlaw.spec.program import collectives_loops as L  # noqa: E402

KEEP = L.Landing


def verdict(recipe) -> str:
    try:
        found = C.compare_collectives(recipe)
    except Exception as error:  # noqa: BLE001  (counted, not raised)
        return f"bare {type(error).__name__}"
    return "disagree" if found.disagreements else "abstain" if found.why else "agree"


def main(n: int, seed: int) -> None:
    tally, changed = collections.Counter(), []
    drawn = C.communicating_recipes(max_steps=7).filter(
        lambda r: sum(kind == "loop" for kind, _, _ in r.steps) >= 1)

    @settings(max_examples=n, database=None, derandomize=False, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(drawn)
    def run(recipe):
        L.Landing = KEEP
        now = verdict(recipe)
        L.Landing = lambda home: home.done
        before = verdict(recipe)
        L.Landing = KEEP
        tally[f"now {now}"] += 1
        tally[f"before {before}"] += 1
        if now != before:
            tally[f"{before} -> {now}"] += 1
            changed.append(f"coll\t{recipe!r}")
    seed_(seed)(run)()
    print(json.dumps(dict(sorted(tally.items())), indent=1))
    for line in changed:
        print("CHANGED", line)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
