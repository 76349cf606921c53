"""``shardlaw campaign``: the property suites on several processes, with a report.

A campaign is pytest with pytest-xdist on ``--workers`` processes, the worker plugin
:mod:`shardlaw.campaign_plugin` loaded into each, over the modules of the chosen suites:
the package's own (:data:`SUITES`, modules of :mod:`shardlaw.properties.suites`, so that an
installed shardlaw runs them from any directory), those other packages declare under the
entry point group ``shardlaw.campaign_suites`` (name -> module), and a user's own files or
folders (``--suite-path``, named by the file's stem). The runner hands the plugin one
configuration, a JSON file named by the plugin's option ``--shardlaw-campaign-config``
(:func:`write_config`). All workers share one Hypothesis example database (``--db``), so
what one finds the others (and the next campaign, and HypoFuzz) replay first. While it
runs, one line shows the examples so far, the examples per second, the disagreements and
the rules hit; at the end it prints the figures and writes them as JSON (``--report``)::

    {"workers": W, "seconds": s, "examples": n, "examples_per_second": r,
     "disagreements": d, "suites": {name: {"examples": n, "disagreements": d}},
     "rules": {"DA-1": {"accepted": a, "rejected": b}, ...}, "never_hit": [...]}

Every disagreement (a failing test: Hypothesis has shrunk its example) is saved beside the
report in ``<report>-disagreements/`` as a JSON file with the test, the falsifying example,
the blob that reproduces it and the database that holds it; ``shardlaw campaign --replay
FILE`` runs it again. The command exits 1 when there was a disagreement, 2 on bad input.

``--db redis://HOST:PORT`` shares the example database through a Redis server (Hypothesis'
``RedisExampleDatabase``) with a local folder in front of it (``--local-db``, Hypothesis'
``MultiplexedDatabase``: every find is saved to both, replays read both); ``--dask
ADDRESS`` spreads one campaign's workers over the machines of a Dask cluster
(:mod:`shardlaw.campaign_cluster`), ``--workers`` on each, and adds their figures together.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from shardlaw.cli_errors import EXIT_BAD_INPUT, CommandExit

__all__ = ["SUITES", "ENTRY_POINTS", "CONFIG_OPTION", "add_parser", "run", "known_suites",
           "suite_files", "write_config", "read_workers", "build_report", "write_charts",
           "is_redis", "example_database", "check_redis", "MAX_WORKERS", "usable_cpus",
           "capped_workers"]

# suite -> the modules that hold it (shardlaw.properties.suites; the laws are the module of
# shardlaw.properties that states them). A module that is not there is left out.
SUITES: dict[str, tuple[str, ...]] = {
    "placement": ("shardlaw.properties.suites.placement",),
    "jit": ("shardlaw.properties.suites.jit",),
    "engine": ("shardlaw.properties.suites.engine",),
    "cache": ("shardlaw.properties.suites.cache",),
    "transforms": ("shardlaw.properties.suites.batching", "shardlaw.properties.suites.autodiff",
                   "shardlaw.properties.suites.constraint",
                   "shardlaw.properties.suites.arguments",
                   "shardlaw.properties.suites.shardmap"),
    "fuzz": ("shardlaw.properties.suites.fuzz",),
    "laws": ("shardlaw.properties.laws",),
    "proofs": ("shardlaw.properties.suites.proofs",),
    "processes": ("shardlaw.properties.suites.processes",),
    "programs": ("shardlaw.properties.suites.programs",),
    "propagation": ("shardlaw.properties.suites.propagation",),
    "steps": ("shardlaw.properties.suites.steps",),
}

# The entry point group under which another package names its suites (name -> module).
ENTRY_POINTS = "shardlaw.campaign_suites"

# Suites whose properties hold the spec to itself (its laws, the prover, hostile input)
# rather than to JAX: their examples count, their rules are not in the report's hit table.
NOT_HELD_TO_JAX = ("fuzz", "laws", "proofs")

# What the campaign tells its workers' plugin (shardlaw.campaign_plugin): one JSON file,
# named on pytest's command line by the plugin's option (xdist hands it to every worker).
CONFIG_OPTION = "--shardlaw-campaign-config"
PROFILE = "shardlaw-campaign"                # the Hypothesis profile of the workers
CLEAR_EVERY = 1000                           # examples between jax.clear_caches()

DEFAULT_DB = Path(".shardlaw") / "examples"
DEFAULT_REPORT = Path(".shardlaw") / "campaign-report.json"
EXIT_DISAGREEMENT = 1
MAX_WORKERS = 1024   # per machine: far above any machine's CPUs, far below a fork storm


def add_parser(commands: Any) -> None:
    """Register ``shardlaw campaign`` with the command line's subcommands."""
    parser = commands.add_parser(
        "campaign", help="run the property suites against JAX on several processes "
                         "and report examples, disagreements and per-rule hits")
    parser.add_argument("--suite", action="append", choices=[*known_suites(), "all"],
                        help="which suites (repeatable; default: all)")
    parser.add_argument("--suite-path", action="append", default=[], metavar="FILE_OR_DIR",
                        help="a suite of your own: a test file or a folder of them, named by "
                             "the file's stem (repeatable)")
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
    parser.add_argument("--workers", type=_worker_count, default=1, metavar="W",
                        help="worker processes (pytest-xdist) on each machine, default 1; "
                             "at most the CPUs this machine may use (more run as many as "
                             f"there are, said on stderr), and never more than {MAX_WORKERS}")
    parser.add_argument("--db", default=str(DEFAULT_DB), metavar="DIR|redis://HOST:PORT",
                        help=f"the shared example database: a folder (default {DEFAULT_DB}) "
                             "or a Redis server shared by several machines")
    parser.add_argument("--local-db", default=str(DEFAULT_DB), metavar="DIR",
                        help="with --db redis://...: the local folder in front of the server "
                             f"(default {DEFAULT_DB}, on each machine)")
    parser.add_argument("--dask", metavar="ADDRESS|local:N",
                        help="spread the workers over a Dask cluster's machines (its "
                             "scheduler's address; local:N starts N worker processes here), "
                             "--workers on each")
    parser.add_argument("--report", default=str(DEFAULT_REPORT), metavar="FILE",
                        help=f"where the JSON report goes (default {DEFAULT_REPORT})")
    parser.add_argument("--clear-caches-every", type=_count, default=CLEAR_EVERY, metavar="N",
                        help=f"examples between jax.clear_caches() in a worker (default "
                             f"{CLEAR_EVERY:,}; 0: never)")
    parser.add_argument("--plant", metavar="RULE",
                        help="make rule RULE wrong (it refuses what it accepts): a campaign "
                             "that does not find it is not worth running")
    parser.set_defaults(handler=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if not 1 <= value <= 10 ** 9:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 10**9")
    return value


def _worker_count(text: str) -> int:
    """``--workers``: 1 to MAX_WORKERS (each worker is a JAX process of its own)."""
    value = _positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(
            f"at most {MAX_WORKERS} workers on one machine (each is a JAX process of its "
            f"own), got {value}; spread more over several machines with --dask")
    return value


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says, else all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def capped_workers(requested: int, stream: Any = None) -> int:
    """The workers a local campaign runs: as many as asked, but no more than the CPUs it
    may use (a worker more only waits for a CPU and holds a JAX process's memory); a cut
    is said on ``stream`` (default stderr)."""
    cpus = usable_cpus()
    if requested <= cpus:
        return requested
    (stream or sys.stderr).write(f"shardlaw campaign: --workers {requested} is more than the "
                                 f"{cpus} CPU(s) this machine lets it use; running {cpus} "
                                 "worker(s)\n")
    return cpus


def _count(text: str) -> int:
    return 0 if text.strip() == "0" else _positive_int(text)


_SUITE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _share(text: str) -> tuple[str, float]:
    """``SUITE=N`` (whether SUITE is among the suites run is checked when they are known)."""
    suite, equals, number = text.partition("=")
    if not equals or not _SUITE_NAME.match(suite):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not SUITE=N")
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


# --------------------------------------------------------------------------- which suites

def _entry_point_suites() -> dict[str, tuple[str, ...]]:
    """suite -> (module,) as installed packages declare them (``shardlaw.campaign_suites``)."""
    found: dict[str, tuple[str, ...]] = {}
    for point in importlib.metadata.entry_points(group=ENTRY_POINTS):
        found.setdefault(point.name, ())
        found[point.name] += (point.module,)
    return found


def known_suites() -> dict[str, tuple[str, ...]]:
    """suite -> its modules: the package's own, then the entry points' (which add to a
    suite of the same name)."""
    suites = {name: tuple(modules) for name, modules in SUITES.items()}
    for name, modules in _entry_point_suites().items():
        suites[name] = suites.get(name, ()) + modules
    return suites


def _module_path(module: str) -> Path | None:
    """Where ``module`` lives (a package: its folder), or None when it is not installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin) if spec.origin else None


def suite_files(names: list[str] | None, paths: list[str] | None = None
                ) -> dict[str, list[dict[str, Any]]]:
    """suite -> its parts, each ``{"module": name or None, "path": file or folder}``: the
    suites named (all of them when neither names nor paths are given; a module that is not
    installed is left out) and the files or folders of ``paths``, named by their stem."""
    paths = list(paths or [])
    suites = known_suites()
    if names and "all" not in names:
        chosen = list(dict.fromkeys(names))
    else:
        chosen = [] if paths and not names else list(suites)
    found: dict[str, list[dict[str, Any]]] = {}
    for name in chosen:
        parts = [{"module": m, "path": str(where)} for m in suites.get(name, ())
                 for where in [_module_path(m)] if where is not None]
        if parts:
            found[name] = parts
    for text in paths:
        where = Path(text).resolve()
        if not where.exists():
            raise CommandExit(EXIT_BAD_INPUT, f"--suite-path {text[:200]}: no such file or "
                                              f"folder")
        name = where.stem
        if name in found and all(part["module"] for part in found[name]):
            raise CommandExit(EXIT_BAD_INPUT, f"--suite-path {text[:200]}: a suite named "
                                              f"{name!r} runs already; rename the file")
        found.setdefault(name, []).append({"module": None, "path": str(where)})
    return found


def pytest_targets(files: dict[str, list[dict[str, Any]]], scratch: Path) -> list[dict[str, Any]]:
    """What pytest runs, one entry per part: a module's tests through a file in ``scratch``
    that imports them (``from MODULE import *``, as the project's tests/ do: the module is
    imported under its own name wherever it is installed); a path as it is."""
    targets, taken = [], set()
    for suite, parts in files.items():
        for part in parts:
            target = dict(part, suite=suite)
            if part["module"] and Path(part["path"]).suffix == ".py":
                stem = part["module"].rpartition(".")[2]
                name = next(f"{stem}_suite{n or ''}.py" for n in range(len(taken) + 1)
                            if f"{stem}_suite{n or ''}.py" not in taken)
                taken.add(name)
                (scratch / name).write_text(
                    f"from {part['module']} import *  # noqa: F401,F403\n")
                target["path"] = str(scratch / name)
            targets.append(target)
    return targets


# --------------------------------------------------------------------------- the run

def write_config(where: Path, *, suites: list[dict[str, Any]], database: str | None,
                 examples: int | None = None, end: float | None = None, shards: int = 1,
                 scratch: str | None = None, out: str | None = None,
                 shares: dict[str, float] | None = None, plant: str | None = None,
                 clear_every: int = CLEAR_EVERY, local_database: str | None = None,
                 part: int = 0, parts: int = 1) -> Path:
    """Write what the workers' plugin is to do, as JSON: ``suites`` (each ``{"suite",
    "module", "path"}``: what a test file or folder belongs to), the example ``database``
    (a folder or a Redis URL, with the folder ``local_database`` in front of a Redis one),
    the ``part`` of ``parts`` of the property shards this machine runs (a cluster campaign),
    the ``examples`` per property (all shards together; None: no limit), the time.time()
    ``end`` of a time budget, the ``shards`` per property, the ``scratch`` folder of the
    workers' counter files, the folder ``out`` of the disagreements, the suites' ``shares``
    of the time, the rule to ``plant`` wrong, and the examples between JAX cache clearings."""
    where.write_text(json.dumps({
        "suites": suites, "database": database, "examples": examples, "end": end,
        "shards": shards, "scratch": scratch, "out": out, "shares": shares or {},
        "plant": plant, "clear_every": clear_every, "local_database": local_database,
        "part": part, "parts": parts}, indent=2))
    return where


def pytest_command(workers: int, config: Path, targets: list[dict[str, Any]],
                   select: str | None) -> list[str]:
    """The pytest command line that runs ``targets`` with the campaign plugin on ``workers``."""
    paths = [t["path"] for t in targets]
    # -o shardlaw=true: the workers opt in to shardlaw's pytest plugin (JAX's CPU devices)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "shardlaw.campaign_plugin",
               CONFIG_OPTION, str(config), "-o", "shardlaw=true", "-p", "no:cacheprovider",
               "-p", "no:benchmark",
               "-n", str(workers), "--dist", "worksteal", "--rootdir", os.path.commonpath(
                   [str(Path(p).parent) for p in paths] + [str(config.parent)]),
               "-o", "addopts=", "--no-header", "-rN", *paths]
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


def _run_pytest(args: Any, files: dict[str, list[dict[str, Any]]], scratch: Path, out: Path,
                log: Path) -> tuple[int, float]:
    targets = pytest_targets(files, scratch)
    minutes = None if args.examples is not None else (args.minutes or 1.0)
    config = write_config(
        scratch / "campaign.json", suites=targets, database=database_of(args),
        local_database=local_database_of(args), examples=args.examples, end=None if minutes is None else time.time() + minutes * 60,
        shards=args.workers, scratch=str(scratch), out=str(out),
        shares=dict(getattr(args, "share", None) or []), plant=getattr(args, "plant", None),
        clear_every=getattr(args, "clear_caches_every", CLEAR_EVERY))
    start = time.monotonic()
    with open(log, "w") as sink:
        process = subprocess.Popen(pytest_command(args.workers, config, targets, args.select),
                                   cwd=scratch, stdout=sink, stderr=subprocess.STDOUT)
        try:
            status = _watch(process, scratch, start, sys.stderr)
        except KeyboardInterrupt:
            process.terminate()
            process.wait()
            raise
    return status, time.monotonic() - start


def _chosen(args: Any) -> dict[str, list[dict[str, Any]]]:
    """The suites to run, their shares and planted rule checked (exit 2 on a wrong one)."""
    files = suite_files(args.suite, getattr(args, "suite_path", None))
    if not files:
        raise CommandExit(EXIT_BAD_INPUT, "none of the suites asked for is installed here")
    unknown = sorted({suite for suite, _ in getattr(args, "share", None) or []} - set(files))
    if unknown:
        raise CommandExit(EXIT_BAD_INPUT, f"--share names {', '.join(unknown)}, not a suite "
                                          f"of this campaign ({', '.join(files)})")
    if getattr(args, "plant", None):
        from shardlaw.spec.core.rules import RULES
        if args.plant not in RULES:
            raise CommandExit(EXIT_BAD_INPUT, f"--plant {args.plant[:40]!r} names no rule")
    names = args.suite or ([] if getattr(args, "suite_path", None) else ["all"])
    running = {part["module"] for parts in files.values() for part in parts}
    for suite, modules in known_suites().items():
        for module in modules:
            if (suite in names or "all" in names) and module not in running:
                sys.stderr.write(f"campaign: {module} (suite {suite}) is not installed here; "
                                 f"left out\n")
    return files


def database_of(args: Any) -> str:
    """The example database a campaign shares: a Redis URL, or a folder's absolute path."""
    db = getattr(args, "db", None) or str(DEFAULT_DB)
    return db if is_redis(db) else str(Path(db).resolve())


def local_database_of(args: Any) -> str | None:
    """The folder of this machine's own examples beside a Redis database (None without Redis)."""
    if not is_redis(getattr(args, "db", None) or ""):
        return None
    return str(Path(getattr(args, "local_db", None) or DEFAULT_DB).resolve())


# What a campaign's workers import: pytest with pytest-xdist, Hypothesis and JAX.
_NEEDED = {"pytest": "pytest", "xdist": "pytest-xdist", "hypothesis": "hypothesis",
           "jax": "jax"}


def _check_installed() -> None:
    """Exit 2 naming what a campaign needs and this environment lacks (the dev extra has it)."""
    missing = [package for module, package in _NEEDED.items()
               if importlib.util.find_spec(module) is None]
    if missing:
        raise CommandExit(EXIT_BAD_INPUT, f"a campaign needs {', '.join(missing)}, not "
                                          "installed here; install shardlaw with the [dev] extra")


def run(args: Any) -> int:
    """``shardlaw campaign``: run, report, and exit 1 if anything disagreed."""
    _check_installed()
    if args.replay:
        return replay(Path(args.replay))
    files = _chosen(args)
    report_path = Path(args.report).resolve()
    out = report_path.with_name(report_path.stem + "-disagreements")
    if out.exists():
        shutil.rmtree(out)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    if is_redis(database_of(args)):
        check_redis(database_of(args))
    else:
        Path(database_of(args)).mkdir(parents=True, exist_ok=True)
    if getattr(args, "dask", None):
        from shardlaw.campaign_cluster import run_on_cluster

        return run_on_cluster(args, files, report_path, out)
    if local_database_of(args):
        Path(local_database_of(args)).mkdir(parents=True, exist_ok=True)
    args.workers = capped_workers(args.workers)
    scratch = Path(tempfile.mkdtemp(prefix="shardlaw-campaign-"))
    log = report_path.with_name(report_path.stem + "-pytest.log")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        status, seconds = _run_pytest(args, files, scratch, out, log)
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
    report["charts"] = write_charts(report, report_path)
    sys.stdout.write(summary(report, report_path))
    return EXIT_DISAGREEMENT if report["disagreements"] else 0


# --------------------------------------------------------------------------- databases

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def is_redis(db: str | None) -> bool:
    """Whether ``--db`` names a Redis server (a URL) rather than a folder."""
    return bool(db) and str(db).startswith(REDIS_SCHEMES)


def _redis_client(url: str) -> Any:
    try:
        import redis
    except ImportError:
        raise CommandExit(EXIT_BAD_INPUT, f"--db {url}: a Redis example database needs the "
                                          "redis package (pip install redis)") from None
    try:
        return redis.Redis.from_url(url, socket_connect_timeout=10)
    except ValueError as problem:
        raise CommandExit(EXIT_BAD_INPUT, f"--db {url[:200]}: not a Redis URL "
                                          f"({problem})") from None


def check_redis(url: str) -> None:
    """Refuse (exit 2) a Redis URL whose server does not answer, before any worker starts."""
    import redis

    try:
        _redis_client(url).ping()
    except redis.RedisError as problem:
        raise CommandExit(EXIT_BAD_INPUT, f"--db {url[:200]}: the Redis server does not "
                                          f"answer ({problem})") from None


def example_database(db: str | None, local: str | None = None) -> Any:
    """Hypothesis' example database for ``--db``: a folder's, or, for a Redis URL, the
    server's (Hypothesis' ``RedisExampleDatabase``) behind the folder ``local``
    (``MultiplexedDatabase``: a find is saved to both, a replay reads both, the local
    folder first). None for none."""
    if not db:
        return None
    from hypothesis.database import DirectoryBasedExampleDatabase, MultiplexedDatabase

    if not is_redis(db):
        return DirectoryBasedExampleDatabase(db)
    from hypothesis.extra.redis import RedisExampleDatabase

    shared = RedisExampleDatabase(_redis_client(db))
    return MultiplexedDatabase(DirectoryBasedExampleDatabase(local or str(DEFAULT_DB)), shared)


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


def write_charts(report: dict[str, Any], report_path: Path) -> list[str]:
    """The report drawn beside it: ``<report>-coverage.svg`` (each rule's accepted and
    rejected examples) and ``<report>-speed.svg`` (examples per second, per suite)."""
    from shardlaw.report_svg import report_svgs

    written = []
    for name, svg in report_svgs(report).items():
        path = report_path.with_name(f"{report_path.stem}-{name}.svg")
        path.write_text(svg)
        written.append(str(path))
    return written


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
    if report.get("charts"):
        lines.append("charts: " + ", ".join(report["charts"]))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- replay

def replay(path: Path) -> int:
    """Run a saved disagreement's test again on its database (and its planted rule)."""
    try:
        record = json.loads(path.read_text())
        test, database = str(record["test"]), record.get("database")
        where, separator, name = test.partition("::")
        if not separator or not where or not name:
            raise ValueError(f"test {test[:200]!r} is not MODULE_OR_FILE::NAME")
    except (ValueError, KeyError, TypeError) as problem:
        raise CommandExit(EXIT_BAD_INPUT, f"{path}: not a saved disagreement ({problem})") \
            from None
    module = None if Path(where).exists() else where
    part = {"suite": str(record.get("suite") or "replay"), "module": module,
            "path": where if module is None else str(_module_path(module) or "")}
    if module is not None and not part["path"]:
        raise CommandExit(EXIT_BAD_INPUT, f"{path}: its module {module[:200]} is not "
                                          f"installed here")
    scratch = Path(tempfile.mkdtemp(prefix="shardlaw-replay-"))
    try:
        target = pytest_targets({part["suite"]: [part]}, scratch)
        config = write_config(scratch / "campaign.json", suites=target, database=database,
                              examples=100, plant=record.get("planted"))
        command = [sys.executable, "-m", "pytest", "-q", "-p", "shardlaw.campaign_plugin",
                   CONFIG_OPTION, str(config), "-o", "shardlaw=true", "-p", "no:cacheprovider",
                   "-o", "addopts=",
                   "--rootdir", os.path.commonpath([str(Path(target[0]["path"]).parent),
                                                    str(scratch)]),
                   f"{target[0]['path']}::{name}"]
        status = subprocess.call(command, cwd=scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return EXIT_DISAGREEMENT if status == 1 else (0 if status == 0 else EXIT_BAD_INPUT)
