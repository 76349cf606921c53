"""Deep run of the multi-process property: N examples in a program of P processes x D devices.

python notes/probes/processes_deep_run.py PROCESSES PER_PROCESS EXAMPLES SEED OUT.json
(the runs of notes/processes-2026-12-04.md: 2 2 2000 2411, 4 2 2000 2412, 2 4 2000 2413)
Disagreements are counted and written, not raised (the run goes on); the explicit examples
of the suite run first. Writes the per-rule table (accepted, refused; summed over processes).
"""
import json, sys, time, traceback
from hypothesis import given, settings, HealthCheck, seed as hseed
from shardlaw.properties import hits
from shardlaw.properties.processes_harness import pool, process_examples, close_pools, WorkerFailed
from shardlaw.properties.suites import processes as suite

procs, per, n, sd, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
devices = procs * per
state = {"examples": 0, "disagreements": [], "crashes": [], "start": time.time()}

def dump():
    state["seconds"] = round(time.time() - state["start"], 1)
    state["hits"] = hits.counts("processes")
    state["config"] = {"processes": procs, "per_process": per, "examples": n, "seed": sd}
    json.dump(state, open(out, "w"), indent=1, default=str)

def one(case):
    state["examples"] += 1
    try:
        pool(procs, per).compare(case)
    except AssertionError as e:
        state["disagreements"].append(str(e)[-3000:])
    except WorkerFailed as e:
        state["crashes"].append(str(e)[-3000:])
    if state["examples"] % 100 == 0:
        dump()
        print(state["examples"], round(time.time() - state["start"]), len(state["disagreements"]),
              len(state["crashes"]), flush=True)

explicit = [suite.SPLIT_NUMPY, dict(suite.SPLIT_NUMPY, tiled=False), suite.RESHARDED, suite.ELSEWHERE,
            suite.DIFFERING, suite.ACROSS] if devices == 4 else [suite.SPLIT_NUMPY, suite.CROSSED, suite.NO_BLOCK]
if per == 4:
    explicit.append(suite.WIDE_NO_BLOCK)
for case in explicit:
    one(case)

@hseed(sd)
@settings(max_examples=n, derandomize=False, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(case=process_examples(devices=devices))
def run(case):
    one(case)

run()
dump()
close_pools()
print("done", state["examples"], "examples", len(state["disagreements"]), "disagreements",
      len(state["crashes"]), "crashes", round(time.time() - state["start"]), "s")
