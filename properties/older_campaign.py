"""A long run of the jit-call property against real jax 0.4.13, with a per-rule table.

``python -m shardlaw.properties.older_campaign --examples 5000 --report FILE.json`` draws
that many calls (:func:`~shardlaw.properties.older_harness.older_calls`, at random unless
``--seed`` is given), compares each with the spec's 0.4.13 edition
(:func:`~shardlaw.properties.older_harness.compare_older`), and writes what it found: the
versions, the count of calls, the disagreements (each with the call and the problems),
and per rule how often it decided a call that agreed, accepting and refusing. It prints
the same table. The exit status is 1 when any call disagreed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["main", "run"]


def run(examples: int, seed: int | None = None) -> dict[str, Any]:
    """Compare ``examples`` drawn calls with jax 0.4.13; the report as a dict."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    from shardlaw.properties.older_harness import (
        OlderJax, compare_older, older_calls, older_hit_counts,
    )

    worker = OlderJax.shared()
    found: dict[str, Any] = {"calls": 0, "accepted": 0, "refused": 0, "disagreements": []}

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(older_calls())
    def compare(call):
        verdict, _, problems = compare_older(call, worker)
        found["calls"] += 1
        found["accepted" if verdict.accepted else "refused"] += 1
        if problems:
            found["disagreements"].append({"call": repr(call), "problems": problems})

    if seed is not None:
        compare = with_seed(seed)(compare)
    started = time.time()
    compare()
    found["seconds"] = round(time.time() - started, 1)
    found["versions"] = worker.versions
    found["rules"] = {rule: {"accepting": a, "refusing": r}
                      for rule, (a, r) in sorted(older_hit_counts().items())}
    return found


def _table(report: dict[str, Any]) -> str:
    lines = [f"jax {report['versions']['jax']} (jaxlib {report['versions']['jaxlib']}, numpy "
             f"{report['versions']['numpy']}): {report['calls']} calls, {report['accepted']} "
             f"accepted, {report['refused']} refused, {len(report['disagreements'])} "
             f"disagreements, {report['seconds']} s",
             f"{'rule':8} {'accepting':>10} {'refusing':>9}"]
    for rule, counts in report["rules"].items():
        lines.append(f"{rule:8} {counts['accepting']:>10} {counts['refusing']:>9}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--report", default=None, help="write the report here (JSON)")
    options = parser.parse_args(argv)
    report = run(options.examples, options.seed)
    if options.report:
        with open(options.report, "w") as out:
            json.dump(report, out, indent=1)
    print(_table(report))
    for item in report["disagreements"][:10]:
        print("\n".join(item["problems"]), "\n  call:", item["call"][:600])
    return 1 if report["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
