"""``shardlaw campaign``: the property suites on several processes, with a report.

A campaign is pytest with pytest-xdist on ``--workers`` processes, the worker plugin
:mod:`shardlaw.campaign_plugin` loaded into each, over the test files of the chosen
suites (see :data:`SUITES`). All workers share one Hypothesis example database (``--db``),
so what one finds the others (and the next campaign, and HypoFuzz) replay first. While it
runs, one line shows the examples so far, the examples per second, the disagreements and
the rules hit; at the end it prints the figures and writes them as JSON (``--report``)::

    {"workers": W, "seconds": s, "examples": n, "examples_per_second": r,
     "disagreements": d, "suites": {name: {"examples": n, "disagreements": d}},
     "rules": {"DA-1": {"accepted": a, "rejected": b}, ...}, "never_hit": [...]}

Every disagreement (a failing test: Hypothesis has shrunk its example) is saved beside the
report in ``<report>-disagreements/`` as a JSON file with the test, the falsifying example,
the blob that reproduces it and the database that holds it; ``shardlaw campaign --replay
FILE`` runs it again. The command exits 1 when there was a disagreement, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from shardlaw.cli_errors import EXIT_BAD_INPUT, CommandExit

__all__ = ["SUITES", "add_parser", "run", "suite_files", "read_workers", "build_report"]

# suite -> the test files that hold it (patterns under the project root; a suite whose
# files do not exist yet is left out with a note)
SUITES: dict[str, tuple[str, ...]] = {
    "placement": ("tests/test_differential.py",),
    "jit": ("tests/test_jit_differential.py",),
    "engine": ("tests/test_engine_differential.py",),
    "cache": ("tests/test_cache_differential.py",),
    "transforms": ("tests/test_batching.py", "tests/test_autodiff.py",
                   "tests/test_constraint.py", "tests/test_arguments.py",
                   "tests/test_shardmap.py"),
    "fuzz": ("tests/test_fuzz.py",),
    "laws": ("tests/test_laws.py",),
    "proofs": ("tests/test_proofs.py",),
}

# Suites whose properties hold the spec to itself (its laws, the prover, hostile input)
# rather than to JAX: their examples count, their rules are not in the report's hit table.
NOT_HELD_TO_JAX = ("fuzz", "laws", "proofs")

# What the campaign tells its workers' plugin (shardlaw.campaign_plugin), by environment.
PROFILE = "shardlaw-campaign"                # the Hypothesis profile of the workers
ENV_DIR = "SHARDLAW_CAMPAIGN_DIR"            # scratch: the workers' counter files
ENV_OUT = "SHARDLAW_CAMPAIGN_OUT"            # where disagreements are written
ENV_EXAMPLES = "SHARDLAW_CAMPAIGN_EXAMPLES"  # examples per property, all shards together
ENV_SHARDS = "SHARDLAW_CAMPAIGN_SHARDS"      # items per property
ENV_END = "SHARDLAW_CAMPAIGN_END"            # time.time() at which the budget is spent
ENV_SLICE = "SHARDLAW_CAMPAIGN_SLICE"        # seconds one property item may run (else shared)
ENV_DB = "SHARDLAW_CAMPAIGN_DB"              # the shared example database (a directory)
ENV_PLANT = "SHARDLAW_CAMPAIGN_PLANT"        # a rule ID to plant wrong
ENV_SUITES = "SHARDLAW_CAMPAIGN_SUITES"      # JSON: test file name -> suite name
ENV_SHARES = "SHARDLAW_CAMPAIGN_SHARES"      # JSON: suite name -> its share of the time
ENV_CLEAR = "SHARDLAW_CAMPAIGN_CLEAR_EVERY"  # examples between jax.clear_caches() (0: never)

DEFAULT_DB = Path(".shardlaw") / "examples"
DEFAULT_REPORT = Path(".shardlaw") / "campaign-report.json"
EXIT_DISAGREEMENT = 1


def add_parser(commands: Any) -> None:
    """Register ``shardlaw campaign`` with the command line's subcommands."""
    parser = commands.add_parser(
        "campaign", help="run the property suites against JAX on several processes "
                         "and report examples, disagreements and per-rule hits")
    parser.add_argument("--suite", action="append", choices=[*SUITES, "all"],
                        help="which suites (repeatable; default: all)")
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument("--examples", type=_positive_int, metavar="N",
                        help="examples per property (all workers together)")
    budget.add_argument("--minutes", type=_positive_float, metavar="M",
                        help="a time budget instead of a number of examples")
    budget.add_argument("--replay", metavar="FILE",
                        help="run one saved disagreement again (exit 1 if it still fails)")
    parser.add_argument("--share", action="append", type=_share, default=[],
                        metavar="SUITE=N",
                        help="under --minutes, give SUITE N shares of the workers' time "
                             "(repeatable; every suite has 1 share unless told)")
    parser.add_argument("-k", dest="select", metavar="EXPR",
                        help="only the tests whose names match EXPR (as pytest -k)")
    parser.add_argument("--workers", type=_positive_int, default=1, metavar="W",
                        help="worker processes (pytest-xdist), default 1")
    parser.add_argument("--db", default=str(DEFAULT_DB), metavar="DIR",
                        help=f"the shared example database (default {DEFAULT_DB})")
    parser.add_argument("--report", default=str(DEFAULT_REPORT), metavar="FILE",
                        help=f"where the JSON report goes (default {DEFAULT_REPORT})")
    parser.set_defaults(handler=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if not 1 <= value <= 10 ** 9:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 10**9")
    return value


def _share(text: str) -> tuple[str, float]:
    suite, equals, number = text.partition("=")
    if not equals or suite not in SUITES:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not SUITE=N with SUITE one of {', '.join(SUITES)}")
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{number[:40]!r} is not a number") from None
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError(f"a share must be above 0 and at most 1000, "
                                         f"got {number[:40]}")
    return suite, value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
    if not 0 < value <= 10 ** 6:
        raise argparse.ArgumentTypeError(f"{text[:40]} is not a time budget in minutes")
    return value


# --------------------------------------------------------------------------- where, what

def project_root() -> Path:
    """The checkout whose tests run: the working directory, else the one shardlaw came from."""
    for place in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (place / "tests" / "conftest.py").is_file():
            return place
    raise CommandExit(EXIT_BAD_INPUT, "a campaign runs the project's property suites: run it "
                                      "in a clone of shardlaw (no tests/conftest.py here)")


def suite_files(names: list[str] | None, root: Path) -> dict[str, list[str]]:
    """suite -> its test files that exist under ``root``, for the suites asked for."""
    chosen = list(SUITES) if not names or "all" in names else list(dict.fromkeys(names))
    found = {name: [f for f in SUITES[name] if (root / f).is_file()] for name in chosen}
    return {name: files for name, files in found.items() if files}


# --------------------------------------------------------------------------- the run

def _environment(args: Any, files: dict[str, list[str]], scratch: Path, out: Path
                 ) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "HYPOTHESIS_PROFILE": PROFILE,
        ENV_DIR: str(scratch),
        ENV_OUT: str(out),
        ENV_DB: str(Path(args.db).resolve()),
        ENV_SHARDS: str(args.workers),
        ENV_SUITES: json.dumps({Path(f).name: name for name, fs in files.items()
                                       for f in fs}),
        ENV_SHARES: json.dumps(dict(getattr(args, "share", None) or [])),
    })
    for name in (ENV_EXAMPLES, ENV_END):
        env.pop(name, None)
    if args.examples is not None:
        env[ENV_EXAMPLES] = str(args.examples)
    else:
        minutes = args.minutes if args.minutes is not None else 1.0
        env[ENV_END] = str(time.time() + minutes * 60)
    return env


def _pytest_command(workers: int, targets: list[str], select: str | None) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "shardlaw.campaign_plugin",
               "-p", "no:cacheprovider", "-p", "no:benchmark", "-n", str(workers),
               "--dist", "worksteal",
               "-o", "addopts=", "--no-header", "-rN", *targets]
    return command + (["-k", select] if select else [])


def read_workers(scratch: Path) -> list[dict[str, Any]]:
    """Every worker's latest counters (a file being replaced is read next time)."""
    found = []
    for path in sorted(scratch.glob("worker-*.json")):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def _progress(workers: list[dict[str, Any]], seconds: float) -> str:
    examples = sum(sum(w["examples"].values()) for w in workers)
    failed = sum(sum(w["failed"].values()) for w in workers)
    rules = _merged_rules(workers)
    both = sum(1 for a, b in rules.values() if a and b)
    rate = examples / seconds if seconds > 0 else 0.0
    return (f"campaign {seconds:6.0f} s  examples {examples:>10,}  ({rate:,.1f}/s)  "
            f"disagreements {failed}  rules hit {len(rules)} ({both} on both sides)")


def _watch(process: subprocess.Popen, scratch: Path, start: float, stream: TextIO) -> int:
    """Wait for pytest, showing the progress line; its exit status."""
    live = stream.isatty()
    shown = 0.0
    while process.poll() is None:
        time.sleep(0.5)
        now = time.monotonic()
        if live or now - shown >= 15:
            line = _progress(read_workers(scratch), now - start)
            stream.write(("\r" + line) if live else line + "\n")
            stream.flush()
            shown = now
    if live:
        stream.write("\n")
    return process.returncode


def _run_pytest(args: Any, files: dict[str, list[str]], root: Path, scratch: Path, out: Path,
                log: Path) -> tuple[int, float]:
    targets = [f for fs in files.values() for f in fs]
    env = _environment(args, files, scratch, out)
    start = time.monotonic()
    with open(log, "w") as sink:
        process = subprocess.Popen(_pytest_command(args.workers, targets, args.select), cwd=root, env=env,
                                   stdout=sink, stderr=subprocess.STDOUT)
        try:
            status = _watch(process, scratch, start, sys.stderr)
        except KeyboardInterrupt:
            process.terminate()
            process.wait()
            raise
    return status, time.monotonic() - start


def run(args: Any) -> int:
    """``shardlaw campaign``: run, report, and exit 1 if anything disagreed."""
    if args.replay:
        return replay(Path(args.replay))
    root = project_root()
    files = suite_files(args.suite, root)
    if not files:
        raise CommandExit(EXIT_BAD_INPUT, "none of the suites asked for has test files here")
    report_path = Path(args.report).resolve()
    out = report_path.with_name(report_path.stem + "-disagreements")
    if out.exists():
        shutil.rmtree(out)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    Path(args.db).resolve().mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="shardlaw-campaign-"))
    log = report_path.with_name(report_path.stem + "-pytest.log")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        status, seconds = _run_pytest(args, files, root, scratch, out, log)
        workers = read_workers(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = build_report(workers, args.workers, seconds, list(files), out)
    # The CPU the campaign's processes used (pytest and its workers): on a machine whose
    # cores are busy with other work, examples per CPU-second still compare W with W.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report["cpu_seconds"] = round(cpu, 1)
    report["examples_per_cpu_second"] = round(report["examples"] / cpu, 1) if cpu else 0.0
    if status not in (0, 1) or (status == 1 and not report["disagreements"]):
        raise CommandExit(EXIT_BAD_INPUT, f"pytest ended with status {status} without a "
                                          f"disagreement; its output is in {log}")
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    sys.stdout.write(summary(report, report_path))
    return EXIT_DISAGREEMENT if report["disagreements"] else 0


# --------------------------------------------------------------------------- the report

def _merged_rules(workers: list[dict[str, Any]]) -> dict[str, list[int]]:
    table: dict[str, list[int]] = {}
    for worker in workers:
        for rule_id, (accepted, rejected) in worker["rules"].items():
            hits = table.setdefault(rule_id, [0, 0])
            hits[0] += accepted
            hits[1] += rejected
    return table


def _rule_order(rule_id: str) -> tuple[str, int]:
    family, _, number = rule_id.rpartition("-")
    return (family, int(number)) if number.isdigit() else (rule_id, 0)


def _sum(workers: list[dict[str, Any]], key: str, suite: str) -> float:
    return sum(w.get(key, {}).get(suite, 0) for w in workers)


def _suite_figures(workers: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """A suite's examples and disagreements, and the seconds its properties ran (all
    workers together): examples per property-second is its throughput per worker."""
    seconds = _sum(workers, "property_seconds", name)
    examples = int(_sum(workers, "examples", name))
    return {"examples": examples, "disagreements": int(_sum(workers, "failed", name)),
            "jax_calls": int(_sum(workers, "jax_calls", name)),
            "property_seconds": round(seconds, 1),
            "examples_per_property_second": round(examples / seconds, 1) if seconds else 0.0}


def build_report(workers: list[dict[str, Any]], count: int, seconds: float,
                 suites: list[str], out: Path) -> dict[str, Any]:
    """The campaign's figures from its workers' counters (the issue's JSON shape)."""
    rules = _merged_rules(workers)
    scope = {r for w in workers for r in w["scope"]} | set(rules)
    examples = sum(sum(w["examples"].values()) for w in workers)
    failed = sum(sum(w["failed"].values()) for w in workers)
    report: dict[str, Any] = {
        "workers": count,
        "seconds": round(seconds, 1),
        "examples": examples,
        "examples_per_second": round(examples / seconds, 1) if seconds > 0 else 0.0,
        "disagreements": failed,
        "jax_calls": int(sum(_sum(workers, "jax_calls", name) for name in suites)),
        "suites": {name: _suite_figures(workers, name) for name in suites},
        "rules": {r: {"accepted": rules.get(r, [0, 0])[0], "rejected": rules.get(r, [0, 0])[1]}
                  for r in sorted(scope, key=_rule_order)},
        "never_hit": [f"{r} {side}" for r in sorted(scope, key=_rule_order)
                      for side, n in zip(("accepted", "rejected"), rules.get(r, [0, 0]))
                      if not n],
    }
    fuzz: dict[str, int] = {}
    for worker in workers:
        for rule_id, n in worker.get("fuzz", {}).items():
            fuzz[rule_id] = fuzz.get(rule_id, 0) + n
    if "fuzz" in suites:
        report["fuzz_rejections"] = dict(sorted(fuzz.items(), key=lambda kv: _rule_order(kv[0])))
    if out.is_dir():
        report["disagreement_files"] = sorted(str(p) for p in out.glob("*.json"))
    return report


def summary(report: dict[str, Any], where: Path) -> str:
    """The report as a few lines of text."""
    lines = [f"{report['examples']:,} examples in {report['seconds']:,.0f} s on "
             f"{report['workers']} worker(s): {report['examples_per_second']:,.1f} examples/s; "
             f"{report['disagreements']} disagreement(s); "
             f"{report.get('jax_calls', 0):,} whole jit calls held to real jax.jit"]
    for name, figures in report["suites"].items():
        calls = figures.get("jax_calls", 0)
        lines.append(f"  {name:11} {figures['examples']:>10,} examples  "
                     f"{figures['disagreements']} disagreement(s)"
                     + (f"  ({calls:,} jit calls in JAX)" if calls else ""))
    both = sum(1 for h in report["rules"].values() if h["accepted"] and h["rejected"])
    lines.append(f"rules: {len(report['rules'])} in scope, {both} hit on both sides; "
                 f"sides never hit: {len(report['never_hit'])}"
                 + (f" ({', '.join(report['never_hit'])})" if report["never_hit"] else ""))
    for path in report.get("disagreement_files", []):
        lines.append(f"disagreement: {path}")
    lines.append(f"report: {where}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- replay

def replay(path: Path) -> int:
    """Run a saved disagreement's test again on its database (and its planted rule)."""
    try:
        record = json.loads(path.read_text())
        test, database = str(record["test"]), record.get("database")
    except (ValueError, KeyError, TypeError) as problem:
        raise CommandExit(EXIT_BAD_INPUT, f"{path}: not a saved disagreement ({problem})") \
            from None
    env = dict(os.environ, HYPOTHESIS_PROFILE=PROFILE)
    env[ENV_EXAMPLES] = "100"
    if database:
        env[ENV_DB] = str(database)
    if record.get("planted"):
        env[ENV_PLANT] = str(record["planted"])
    for name in (ENV_DIR, ENV_OUT, ENV_END, ENV_SHARDS):
        env.pop(name, None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "shardlaw.campaign_plugin",
               "-p", "no:cacheprovider", "-o", "addopts=", test]
    status = subprocess.call(command, cwd=project_root(), env=env)
    return EXIT_DISAGREEMENT if status == 1 else (0 if status == 0 else EXIT_BAD_INPUT)
