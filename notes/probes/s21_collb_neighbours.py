"""Neighbours of the s21 collb recipe (issue 33, COLL-9): drawn communicating recipes with
a loop step, held by properties/collectives_harness.py's compare_collectives twice: with a
body's hoisted reshards made once with the other reshards of the computation they land
in (collectives_loops.Landing) and with the body's own alone (as before); prints both
tallies and the recipes whose verdict changed (as replay_disagreements.py reads them).
usage: python notes/probes/s21_collb_neighbours.py N SEED [--shape]
(--shape: the recipe's shape: a value b on a drawn split read unchanged by a fori loop's
body constraining its carry to a drawn split, beside a second use of b: another such loop,
a constraint of b, or a fori loop whose carry starts at b and is multiplied by a value on
a drawn split; in either order)"""
import collections
import json
import sys

import jax
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as seed_
from hypothesis import strategies as st

jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties import collectives_harness as C  # noqa: E402
from shardlaw.spec.program import collectives_loops as L  # noqa: E402

KEEP = L.Landing


SPLITS = [(None, None, None), ("y", None, None), (None, None, "y"), ("x", None, None),
          (None, "x", "y"), (("x", "y"), None, None), (None, "y", None), ("y", None, "x")]


@st.composite
def shaped(draw):
    """Two uses of one value, one a loop body's read of it unchanged (the s21 shape)."""
    pick = st.sampled_from(SPLITS)
    mesh = draw(st.sampled_from([(4, 2), (2, 4)]))
    inputs = (((16, 16, 4), draw(pick)), ((16, 16, 4), draw(pick)),
              ((16, 16, 4), draw(pick)))
    first = ("loop", (0, 1), ("fori constrain", 2, draw(pick)))
    other = draw(st.sampled_from(["loop", "constrain", "carry"]))
    second = {"loop": ("loop", (0, 1), ("fori constrain", 2, draw(pick))),
              "constrain": ("constrain", (1,), draw(pick)),
              "carry": ("loop", (1, 2), ("fori const", 2, None))}[other]
    pair = [first, second] if draw(st.booleans()) else [second, first]
    steps = (("input", (), 0), ("input", (), 1), ("input", (), 2)) + tuple(pair)
    return C.Recipe(mesh=mesh, reversed_devices=False, inputs=inputs, steps=steps,
                    outputs=(3, 4), devices=(), out_shardings=(), axis_types="")


def verdict(recipe) -> str:
    try:
        found = C.compare_collectives(recipe)
    except Exception as error:  # noqa: BLE001  (counted, not raised)
        return f"bare {type(error).__name__}"
    return "disagree" if found.disagreements else "abstain" if found.why else "agree"


def main(n: int, seed: int) -> None:
    tally, changed = collections.Counter(), []
    drawn = shaped() if "--shape" in sys.argv else C.communicating_recipes(
        max_steps=7).filter(lambda r: any(kind == "loop" for kind, _, _ in r.steps))

    @settings(max_examples=n, database=None, derandomize=False, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(drawn)
    def run(recipe):
        L.Landing = KEEP
        now = verdict(recipe)
        L.Landing = lambda home, splits: home.done
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
