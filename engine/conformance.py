"""The conformance run: JAX's own test files, under ``jax.jit`` and under the engine.

``python -m shardlaw.engine.conformance DIR`` runs each JAX test file in ``DIR`` twice, on
8 CPU devices, in fresh processes: once as JAX ships it, once with ``jax.jit`` replaced by
the engine before the tests import (:mod:`shardlaw.engine.conformance_plugin`). It prints,
per file, the tests that pass under ``jax.jit``, those that pass under the engine, and the
engine-only failures grouped by cause, and writes the same as JSON (``--report``).

An engine-only failure is a test that passes under ``jax.jit`` and fails (or errors, times
out, or crashes its worker) under the engine. A few tests read JAX-private state a drop-in
cannot honestly match; they are listed in :data:`KNOWN_DIFFERENCES` with the reason (and in
``docs/engine.rst``), counted apart, and do not fail the run.

Exit status: 0 when every engine-only failure is a known difference, 1 otherwise, 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

__all__ = ["KNOWN_DIFFERENCES", "FILES", "run_file", "main"]

# JAX 0.10.2's test files the engine is held to, in the order they run.
FILES = ("array_test.py", "layout_test.py", "memories_test.py", "pjit_test.py", "api_test.py")

# Tests a drop-in cannot pass honestly, by test id (file::class::name, parameters dropped):
# the reason is shown in the report and in docs/engine.rst.
KNOWN_DIFFERENCES: dict[str, str] = {
    "api_test.py::TracebackTest::test_jit_traceback":
        "counts the Python frames between a jitted call and the traced function (6 under "
        "jax.jit); the engine's decision of a new signature (its rules, then JAX's trace) "
        "runs in frames of its own, so the function is traced deeper in the stack",
    "pjit_test.py::ArrayPjitTest::test_jit_mul_sum_sharding_preserved":
        "asserts that a GSPMDSharding argument placed exactly as an earlier NamedSharding "
        "one compiles a second executable; the engine's placement-class cache reuses the "
        "first (one compile where jax.jit makes two), on purpose",
    "pjit_test.py::ArrayPjitTest::test_partial_sharded_prng_key_inp":
        "reads the spelling of a PRNG key array's physical sharding: jax.jit's own path "
        "writes P(None, 'y', 'x'), an executable compiled by JAX's ahead-of-time stages (as "
        "the engine compiles every one) P(None, 'y', 'x', None) for the same placement",
}

_PLUGIN = "shardlaw.engine.conformance_plugin"


@dataclasses.dataclass
class Outcome:
    """One test's outcome in one run: passed, failed, error, skipped (and the failure's words)."""

    status: str
    message: str = ""


def _known(test_id: str) -> str | None:
    base = re.sub(r"\[.*\]$", "", test_id)
    return KNOWN_DIFFERENCES.get(test_id) or KNOWN_DIFFERENCES.get(base)


def run_file(tests_dir: Path, name: str, mode: str, workers: int, timeout: int,
             extra: list[str] | None = None) -> dict[str, Outcome]:
    """Run one JAX test file in a fresh pytest process; the outcome of every test in it."""
    env = dict(os.environ)
    env["SHARDLAW_CONFORMANCE"] = mode
    env["JAX_NUM_CPU_DEVICES"] = "8"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        " --xla_force_host_platform_device_count=8").strip()
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark",
                   "-o", "addopts=", "-c", str(tests_dir / "pytest.ini"),
                   "--rootdir", str(tests_dir), "-p", _PLUGIN, f"--junitxml={junit}",
                   f"--timeout={timeout}", str(tests_dir / name)]
        if workers > 1:
            command[3:3] = ["-n", str(workers)]
        command += list(extra or [])
        finished = subprocess.run(command, cwd=tests_dir, env=env, capture_output=True,
                                  text=True, check=False)
        if not junit.exists():
            tail = (finished.stdout + finished.stderr)[-2000:]
            return {f"{name}::<run>": Outcome("error", f"pytest exited {finished.returncode} "
                                              f"without a report: {tail}")}
        return _read_junit(junit, name)


def _read_junit(path: Path, name: str) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "").rsplit(".", 1)[-1]
        test_id = f"{name}::{classname}::{case.get('name', '')}"
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed" if child.tag == "failure" else "error"
                message = child.get("message") or (child.text or "")[-500:]
                break
            if child.tag == "skipped":
                status = "skipped"
        outcomes[test_id] = Outcome(status, message)
    return outcomes


def cause(message: str) -> str:
    """A failure's message made into a group key: its first line, numbers and addresses blurred."""
    first = next((line for line in message.splitlines() if line.strip()), "(no message)")
    first = re.sub(r"0x[0-9a-f]+", "0x…", first)
    first = re.sub(r"\d+", "N", first)
    return first[:160]


def compare(baseline: dict[str, Outcome], engine: dict[str, Outcome]) -> dict:
    """The figures of one file: passing under each, and the engine-only failures by cause."""
    passing_jax = {t for t, o in baseline.items() if o.status == "passed"}
    passing_engine = {t for t, o in engine.items() if o.status == "passed"}
    # A run that produced no report at all (pytest could not start, or crashed outside a
    # worker) counts as a failure of its own: a broken run must never read as a clean one.
    broken = sorted(t for o in (baseline, engine) for t in o if t.endswith("::<run>"))
    only = sorted({t for t in passing_jax if t not in passing_engine} | set(broken))
    unexpected = [t for t in only if _known(t) is None]
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for t in unexpected:
        outcome = engine.get(t) or baseline.get(t) or Outcome("missing", "not run under the engine")
        groups[cause(f"{outcome.status}: {outcome.message}")].append(t)
    return {
        "tests": len(baseline),
        "passed_jax": len(passing_jax),
        "passed_engine": len(passing_engine),
        "engine_only_failures": len(unexpected),
        "known_differences": {t: _known(t) for t in only if _known(t) is not None},
        "engine_only_passes": sorted(passing_engine - passing_jax),
        "causes": dict(sorted(groups.items(), key=lambda kv: -len(kv[1]))),
        "messages": {t: engine[t].message[:2000] for t in unexpected if t in engine},
    }


def _print_table(report: dict, out=sys.stdout) -> None:
    rows = [("file", "jax.jit passes", "engine passes", "engine-only failures", "known")]
    for name, figures in report["files"].items():
        rows.append((name, str(figures["passed_jax"]), str(figures["passed_engine"]),
                     str(figures["engine_only_failures"]),
                     str(len(figures["known_differences"]))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)), file=out)
    for name, figures in report["files"].items():
        for key, tests in figures["causes"].items():
            print(f"\n{name}: {len(tests)} x {key}", file=out)
            for t in tests[:8]:
                print(f"    {t}", file=out)
            if len(tests) > 8:
                print(f"    ... and {len(tests) - 8} more", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shardlaw.engine.conformance",
        description="Run JAX's own test files under jax.jit and under the engine; "
                    "report the engine-only failures.")
    parser.add_argument("tests_dir", type=Path,
                        help="folder with JAX's test files (the tag's tests/ folder)")
    parser.add_argument("--files", nargs="+", default=None,
                        help=f"which files (default: those present of {', '.join(FILES)})")
    parser.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    parser.add_argument("--workers", type=int, default=2,
                        help="pytest-xdist workers per run (default 2; 1 runs in one process)")
    parser.add_argument("--timeout", type=int, default=600, help="per-test limit in seconds")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="reuse the jax.jit outcomes of an earlier --report")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    args = parser.parse_args(argv)
    args.tests_dir = args.tests_dir.resolve()
    if not (args.tests_dir / "pytest.ini").exists():
        print(f"conformance: {args.tests_dir} has no pytest.ini (expected JAX's tests/ "
              "folder with its pytest settings)", file=sys.stderr)
        return 2
    files = args.files or [f for f in FILES if (args.tests_dir / f).exists()]
    extra = ["-k", args.keyword] if args.keyword else []
    previous = json.loads(args.baseline.read_text()) if args.baseline else None
    report: dict = {"tests_dir": str(args.tests_dir), "files": {}, "outcomes": {}}
    start = time.monotonic()
    for name in files:
        if previous is not None and name in previous.get("outcomes", {}):
            baseline = {t: Outcome(**o) for t, o in previous["outcomes"][name]["jax"].items()}
        else:
            baseline = run_file(args.tests_dir, name, "jax", args.workers, args.timeout, extra)
        engine = run_file(args.tests_dir, name, "engine", args.workers, args.timeout, extra)
        report["files"][name] = compare(baseline, engine)
        report["outcomes"][name] = {
            "jax": {t: dataclasses.asdict(o) for t, o in baseline.items()},
            "engine": {t: dataclasses.asdict(o) for t, o in engine.items()}}
        if args.report:   # written after each file, so a long run can be read as it goes
            args.report.write_text(json.dumps(report, indent=1))
        figures = report["files"][name]
        print(f"{name}: jax.jit {figures['passed_jax']} passed, engine "
              f"{figures['passed_engine']} passed, {figures['engine_only_failures']} "
              f"engine-only failure(s) ({time.monotonic() - start:.0f} s)", flush=True)
    report["seconds"] = round(time.monotonic() - start, 1)
    report["engine_only_failures"] = sum(f["engine_only_failures"]
                                         for f in report["files"].values())
    print()
    _print_table(report)
    if args.report:
        args.report.write_text(json.dumps(report, indent=1))
    return 1 if report["engine_only_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
