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

With ``--processes N`` the folder holds JAX's *multiprocess* test files
(``tests/multiprocess/``): each runs through JAX's own launcher (``jax._src.test_multiprocess``,
N processes joined by ``jax.distributed``, ``--devices-per-process`` CPU devices each,
collectives over gloo), every process running :mod:`shardlaw.engine.conformance_worker`,
which installs the engine (or not, for the baseline) and then runs the test file as
``__main__``. A test passes when it passes in every process; a file gets a time limit of its
own (``--file-timeout``), after which the launcher and all its workers are killed as one
process group and the run is reported as timed out; a process that dies before writing its
report is reported as a crash, with the end of its log.

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
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

__all__ = ["KNOWN_DIFFERENCES", "FILES", "MULTIPROCESS_FILES", "run_file",
           "run_multiprocess_file", "main"]

# JAX 0.10.2's test files the engine is held to, in the order they run.
FILES = ("array_test.py", "layout_test.py", "memories_test.py", "pjit_test.py", "api_test.py")
# Its multiprocess test files (tests/multiprocess/ at the tag), smallest first.
MULTIPROCESS_FILES = ("device_id_test.py", "axis_index_test.py", "all_gather_test.py",
                      "all_reduce_test.py", "pjit_test.py", "multihost_utils_test.py",
                      "array_test.py")

# Tests a drop-in cannot pass honestly, by test id (file::class::name, parameters dropped):
# the reason is shown in the report and in docs/engine.rst.
KNOWN_DIFFERENCES: dict[str, str] = {
    "pjit_test.py::ArrayPjitTest::test_jit_mul_sum_sharding_preserved":
        "asserts that a GSPMDSharding argument placed exactly as an earlier NamedSharding "
        "one compiles a second executable; the engine's placement-class cache reuses the "
        "first (one compile where jax.jit makes two), on purpose",
    "pjit_test.py::ArrayPjitTest::test_cache_hit_pjit_lower_with_cpp_cache_miss":
        "asserts two lowerings for a committed array and a numpy array of the same type "
        "under the same in_shardings (jax.jit traces each anew); the placement-class cache "
        "lowers once and serves both, on purpose",
    "pjit_test.py::ArrayPjitTest::test_pjit_single_device_sharding_add":
        "reads the hits and misses of JAX's private lowering cache (_pjit_lower): jax.jit "
        "lowers anew for a committed single-device argument where an uncommitted one was "
        "lowered; the engine reuses that executable without asking JAX's cache, on purpose",
}

# Under the bare patch (``jax.jit = shardlaw.engine.jit`` by hand, ``--patch bare``) only,
# beyond KNOWN_DIFFERENCES: none. (``jax.eval_shape`` asks a function for its own trace only
# when it is exactly JAX's jitted type; an engine function without a frame in front of its
# dispatcher is of that type, so the two eval_shape tests once listed here pass.)
BARE_PATCH_DIFFERENCES: dict[str, str] = {}

_PLUGIN = "shardlaw.engine.conformance_plugin"


@dataclasses.dataclass
class Outcome:
    """One test's outcome in one run: passed, failed, error, skipped (and the failure's words)."""

    status: str
    message: str = ""


def _known(test_id: str, mode: str = "engine") -> str | None:
    base = re.sub(r"\[.*\]$", "", test_id)
    known = KNOWN_DIFFERENCES if mode != "bare" else {**KNOWN_DIFFERENCES,
                                                       **BARE_PATCH_DIFFERENCES}
    return known.get(test_id) or known.get(base)


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


def run_multiprocess_file(tests_dir: Path, name: str, mode: str, processes: int,
                          devices_per_process: int, timeout: int) -> dict[str, Outcome]:
    """Run one multiprocess JAX test file through JAX's launcher; the outcome of every test.

    A test's outcome is its worst over the processes (each writes its own report); a
    process without a report adds ``NAME::<process I>`` (a crash, with its log's end), and a
    file past ``timeout`` seconds adds ``NAME::<run>`` (its process group is killed).
    """
    from . import conformance_worker

    with tempfile.TemporaryDirectory(prefix="shardlaw-mp-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "XML_OUTPUT_FILE")}
        env.update(SHARDLAW_CONFORMANCE=mode, SHARDLAW_CONFORMANCE_FILE=str(tests_dir / name),
                   SHARDLAW_CONFORMANCE_RESULTS=tmp, TEST_UNDECLARED_OUTPUTS_DIR=tmp,
                   JAX_NUM_CPU_DEVICES=str(devices_per_process), JAX_PLATFORMS="cpu")
        command = [sys.executable, conformance_worker.__file__, f"--num_processes={processes}",
                   "--cpu_collectives_implementation=gloo"]
        launcher = subprocess.Popen(command, cwd=tmp, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            launcher.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)   # the launcher and every worker
            launcher.communicate()
            timed_out = True
        # Test ids say "multiprocess/": the folder's file names repeat those of tests/.
        outcomes = _read_worker_reports(Path(tmp), f"multiprocess/{name}", processes, mode)
        ENGINE_WORK[name] = _engine_work(Path(tmp), processes) if mode == "engine" else {}
        if timed_out:
            outcomes[f"multiprocess/{name}::<run>"] = Outcome(
                "timeout", f"the file ran past its limit of {timeout} s; its launcher and "
                f"workers were killed ({_log_tail(Path(tmp), processes)})")
        return outcomes


# What reached the engine in each process of a file's last engine run (read by the report).
ENGINE_WORK: dict[str, dict[str, list[int]]] = {}


def _engine_work(folder: Path, processes: int) -> dict[str, list[int]]:
    """Per count (executable lookups, pjit functions made), its value in each process."""
    work: dict[str, list[int]] = {}
    for i in range(processes):
        path = folder / f"worker_{i}.engine.json"
        counts = json.loads(path.read_text()) if path.exists() else {}
        for key in ("executable_lookups", "pjit_functions"):
            work.setdefault(key, []).append(int(counts.get(key, 0)))
    return work


def _log_tail(folder: Path, processes: int, size: int = 600) -> str:
    tails = []
    for i in range(processes):
        log = folder / f"jax_{i}_stderr.log"
        text = log.read_text(errors="replace") if log.exists() else "(no log)"
        tails.append(f"process {i}: ...{text[-size:]}")
    return "; ".join(tails)


_STATUS_ORDER = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _read_worker_reports(folder: Path, name: str, processes: int,
                         mode: str) -> dict[str, Outcome]:
    """Each process's absltest XML, merged: a test's worst outcome, with the process named."""
    merged: dict[str, Outcome] = {}
    for i in range(processes):
        said = folder / f"worker_{i}.jit"
        if said.exists() and said.read_text() != mode:
            merged[f"{name}::<process {i}>"] = Outcome(
                "error", f"process {i} ran its tests with the {said.read_text()}'s jit in a "
                f"run under {mode}")
            continue
        report = folder / f"worker_{i}.xml"
        try:
            cases = _read_absl_xml(report, name) if report.exists() else None
        except ElementTree.ParseError:
            cases = None
        if cases is None:
            log = folder / f"jax_{i}_stderr.log"
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
            merged[f"{name}::<process {i}>"] = Outcome(
                "crash", f"process {i} wrote no test report (it crashed or was killed): {tail}")
            continue
        for test_id, outcome in cases.items():
            held = merged.get(test_id)
            if held is None or _STATUS_ORDER[outcome.status] > _STATUS_ORDER[held.status]:
                message = f"process {i}: {outcome.message}" if outcome.message else ""
                merged[test_id] = Outcome(outcome.status, message)
    return merged


def _read_absl_xml(path: Path, name: str) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "").rsplit(".", 1)[-1]
        test_id = f"{name}::{classname}::{case.get('name', '')}"
        status, message = ("skipped" if case.get("status") == "notrun" else "passed"), ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or "") + "\n" + (child.text or "")[-1500:]
                break
        outcomes[test_id] = Outcome(status, message.strip())
    return outcomes


def cause(message: str) -> str:
    """A failure's message made into a group key: its first line, numbers and addresses blurred."""
    first = next((line for line in message.splitlines() if line.strip()), "(no message)")
    first = re.sub(r"0x[0-9a-f]+", "0x…", first)
    first = re.sub(r"\d+", "N", first)
    return first[:160]


def compare(baseline: dict[str, Outcome], engine: dict[str, Outcome],
            mode: str = "engine") -> dict:
    """The figures of one file: passing under each, and the engine-only failures by cause."""
    passing_jax = {t for t, o in baseline.items() if o.status == "passed"}
    passing_engine = {t for t, o in engine.items() if o.status == "passed"}
    # A run that produced no report at all (pytest could not start, or crashed outside a
    # worker) counts as a failure of its own: a broken run must never read as a clean one.
    # (A multiprocess run adds ``::<process I>`` for a process that left no report.)
    broken = sorted(t for o in (baseline, engine) for t in o if "::<" in t)
    only = sorted({t for t in passing_jax if t not in passing_engine} | set(broken))
    unexpected = [t for t in only if _known(t, mode) is None]
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for t in unexpected:
        outcome = engine.get(t) or baseline.get(t) or Outcome("missing", "not run under the engine")
        groups[cause(f"{outcome.status}: {outcome.message}")].append(t)
    return {
        "tests": len(baseline),
        "passed_jax": len(passing_jax),
        "passed_engine": len(passing_engine),
        "engine_only_failures": len(unexpected),
        "known_differences": {t: _known(t, mode) for t in only
                              if _known(t, mode) is not None},
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
    parser.add_argument("--patch", choices=("install", "bare"), default="install",
                        help="how the engine takes jax.jit's place: install() (default), or "
                        "the bare patch, jax.jit = shardlaw.engine.jit")
    parser.add_argument("--processes", type=int, default=0,
                        help="the folder holds JAX's multiprocess tests: run each file in this "
                        "many processes through JAX's launcher (4 as JAX runs them)")
    parser.add_argument("--devices-per-process", type=int, default=2,
                        help="CPU devices of each process with --processes (default 2)")
    parser.add_argument("--file-timeout", type=int, default=600,
                        help="with --processes: a file's limit in seconds, after which its "
                        "launcher and workers are killed (default 600)")
    args = parser.parse_args(argv)
    args.tests_dir = args.tests_dir.resolve()
    if args.processes:
        return _main_multiprocess(args)
    if not (args.tests_dir / "pytest.ini").exists():
        print(f"conformance: {args.tests_dir} has no pytest.ini (expected JAX's tests/ "
              "folder with its pytest settings)", file=sys.stderr)
        return 2
    files = args.files or [f for f in FILES if (args.tests_dir / f).exists()]
    extra = ["-k", args.keyword] if args.keyword else []

    engine_mode = "engine" if args.patch == "install" else "bare"

    def run(name: str, mode: str) -> dict[str, Outcome]:
        return run_file(args.tests_dir, name, engine_mode if mode == "engine" else mode,
                        args.workers, args.timeout, extra)
    return _run_files(args, files, run, {"patch": args.patch})


def _main_multiprocess(args: argparse.Namespace) -> int:
    if args.processes < 2 or args.devices_per_process < 1:
        print("conformance: --processes takes 2 or more, --devices-per-process 1 or more",
              file=sys.stderr)
        return 2
    files = args.files or [f for f in MULTIPROCESS_FILES if (args.tests_dir / f).exists()]
    if not files:
        print(f"conformance: {args.tests_dir} holds none of JAX's multiprocess test files "
              f"({', '.join(MULTIPROCESS_FILES)})", file=sys.stderr)
        return 2

    def run(name: str, mode: str) -> dict[str, Outcome]:
        return run_multiprocess_file(args.tests_dir, name, mode, args.processes,
                                     args.devices_per_process, args.file_timeout)
    return _run_files(args, files, run, {"processes": args.processes,
                                         "devices_per_process": args.devices_per_process,
                                         "collectives": "gloo"})


def _run_files(args: argparse.Namespace, files: list[str], run: Any, setting: dict) -> int:
    """Each file under jax.jit (or the earlier report's outcomes) and under the engine."""
    previous = json.loads(args.baseline.read_text()) if args.baseline else None
    report: dict = {"tests_dir": str(args.tests_dir), **setting, "files": {}, "outcomes": {},
                    "file_seconds": {}}
    start = time.monotonic()
    for name in files:
        began = time.monotonic()
        if previous is not None and name in previous.get("outcomes", {}):
            baseline = {t: Outcome(**o) for t, o in previous["outcomes"][name]["jax"].items()}
        else:
            baseline = run(name, "jax")
        middle = time.monotonic()
        engine = run(name, "engine")
        report["file_seconds"][name] = {"jax": round(middle - began, 1),
                                        "engine": round(time.monotonic() - middle, 1)}
        report["files"][name] = compare(baseline, engine,
                                        "bare" if setting.get("patch") == "bare" else "engine")
        if ENGINE_WORK.get(name):
            report["files"][name]["engine_work"] = ENGINE_WORK[name]
        report["outcomes"][name] = {
            "jax": {t: dataclasses.asdict(o) for t, o in baseline.items()},
            "engine": {t: dataclasses.asdict(o) for t, o in engine.items()}}
        if args.report:   # written after each file, so a long run can be read as it goes
            args.report.write_text(json.dumps(report, indent=1))
        figures = report["files"][name]
        print(f"{name}: jax.jit {figures['passed_jax']} passed, engine "
              f"{figures['passed_engine']} passed, {figures['engine_only_failures']} "
              f"engine-only failure(s) ({time.monotonic() - start:.0f} s)"
              + (f"; through the engine, per process: {figures['engine_work']}"
                 if figures.get("engine_work") else ""), flush=True)
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
