"""A bounded deep run of the steps property and its fuzz layer on main (counts disagreements
rather than stopping at the first)."""
import sys, collections, time
import jax
jax.config.update("jax_num_cpu_devices", 8)
from hypothesis import given, settings, HealthCheck, Phase
from shardlaw.properties import steps_harness as h
from shardlaw.properties.steps_strategies import step_cases, fuzz_programs
N, SEED = int(sys.argv[1]), int(sys.argv[2])
bad = collections.Counter(); examples = []; unread = []
def run(strategy, compare, label):
    @settings(max_examples=N, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=False)
    @given(strategy())
    def t(case):
        before = h.TALLY["not described"]
        try:
            problems = compare(case)
        except Exception as e:  # noqa: BLE001
            problems = [f"bare {type(e).__name__}: {e}"]
        if h.TALLY["not described"] > before and len(unread) < 15:
            unread.append((label, case))
        if problems:
            bad[label] += 1
            examples.append((label, case, problems[:2]))
    t = __import__("hypothesis").seed(SEED)(t)
    t()
t0 = time.time()
import os
if os.environ.get("ONLY") != "fuzz": run(step_cases, h.compare_step, "steps")
if os.environ.get("ONLY") != "steps": run(fuzz_programs, h.compare_fuzz, "fuzz")
print("seconds", round(time.time() - t0), "disagreements", dict(bad))
for line in h.tally_lines():
    print(line)
for label, case in unread:
    print("--- not described", label, case)
for label, case, p in examples[:15]:
    print("---", label, case); print("   ", "\n    ".join(x[:300] for x in p))
