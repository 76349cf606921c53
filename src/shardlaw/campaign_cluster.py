"""One campaign on several machines: ``shardlaw campaign --dask ADDRESS``.

Each worker of a Dask cluster (``dask.distributed``; one per machine, or ``local:N`` for N
worker processes on this one) runs one task, :func:`run_machine`: pytest with
``--workers`` xdist workers over its part of the property shards (the plugin keeps every
M-th shard, counted the same way on every machine, so that no two machines run the same
examples; the plain tests run on the first), with the example database the campaign names
(a Redis server, shared by all, with a local folder in front on each machine). The task
hands back its workers' counters, its disagreements (as JSON text, so that they reach the
machine that asked) and its own figures; :func:`run_on_cluster` adds them together into
one report, with a ``machines`` table.

Dask, not Ray: dask.distributed is pure Python from PyPI, starts a scheduler and workers as
plain processes (``dask scheduler`` / ``dask worker ADDRESS`` on each machine), and its
``LocalCluster`` gives tests a real multi-process cluster in a second; the campaign only
needs "run this function on that machine and return its JSON", which both do.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from shardlaw.cli_errors import EXIT_BAD_INPUT, CommandExit

__all__ = ["run_on_cluster", "run_machine", "connect", "machine_figures"]


def connect(address: str) -> tuple[Any, Any]:
    """A Dask client for ``address`` (a scheduler's, or ``local:N``: a local cluster of N
    worker processes, closed with the client); and the cluster it started, or None."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise CommandExit(EXIT_BAD_INPUT, "--dask needs dask.distributed "
                                          "(pip install 'dask[distributed]')") from None
    cluster = None
    if address.startswith("local:"):
        count = address.partition(":")[2]
        if not count.isdigit() or int(count) < 1:
            raise CommandExit(EXIT_BAD_INPUT, f"--dask {address[:60]!r}: local:N takes a "
                                              "number of worker processes, 1 or more")
        cluster = LocalCluster(n_workers=int(count), threads_per_worker=1, processes=True,
                               dashboard_address=None, memory_limit=0)
        address = cluster.scheduler_address
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError) as problem:
        if cluster is not None:
            cluster.close()
        raise CommandExit(EXIT_BAD_INPUT, f"--dask {address[:200]}: no Dask scheduler "
                                          f"answers there ({problem})") from None
    return client, cluster


def _job(args: Any, files: dict[str, list[dict[str, Any]]], part: int, parts: int
         ) -> dict[str, Any]:
    from shardlaw.campaign import database_of, local_database_of

    return {"files": files, "examples": args.examples, "minutes": args.minutes,
            "workers": args.workers, "select": args.select, "database": database_of(args),
            "local_database": local_database_of(args), "part": part, "parts": parts,
            "shares": dict(getattr(args, "share", None) or []),
            "plant": getattr(args, "plant", None),
            "clear_every": getattr(args, "clear_caches_every", None)}


def run_machine(job: dict[str, Any]) -> dict[str, Any]:
    """One machine's part of a campaign (run in a Dask worker): its figures, as JSON data."""
    from shardlaw import campaign

    scratch = Path(tempfile.mkdtemp(prefix="shardlaw-machine-"))
    out = scratch / "disagreements"
    try:
        targets = campaign.pytest_targets(job["files"], scratch)
        minutes = None if job["examples"] is not None else (job["minutes"] or 1.0)
        if job["local_database"]:
            Path(job["local_database"]).mkdir(parents=True, exist_ok=True)
        config = campaign.write_config(
            scratch / "campaign.json", suites=targets, database=job["database"],
            local_database=job["local_database"], examples=job["examples"],
            end=None if minutes is None else time.time() + minutes * 60,
            shards=job["workers"] * job["parts"], scratch=str(scratch), out=str(out),
            shares=job["shares"], plant=job["plant"],
            clear_every=campaign.CLEAR_EVERY if job["clear_every"] is None
            else job["clear_every"], part=job["part"], parts=job["parts"])
        command = campaign.pytest_command(job["workers"], config, targets, job["select"])
        if job["workers"] == 1:   # one worker: pytest runs the tests itself (no xdist child)
            command[command.index("-n") + 1] = "0"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        finished = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                                  check=False)
        seconds = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return {"part": job["part"], "host": socket.gethostname(), "pid": os.getpid(),
                "address": _worker_address(), "status": finished.returncode,
                "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
                "workers": campaign.read_workers(scratch),
                "disagreements": {p.name: p.read_text() for p in sorted(out.glob("*.json"))},
                "log_tail": (finished.stdout + finished.stderr)[-3000:]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _worker_address() -> str:
    try:
        from dask.distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return ""


def machine_figures(result: dict[str, Any]) -> dict[str, Any]:
    """One machine's line of the report's ``machines`` table."""
    examples = sum(sum(w["examples"].values()) for w in result["workers"])
    return {"part": result["part"], "host": result["host"], "address": result["address"],
            "workers": len(result["workers"]), "examples": examples,
            "disagreements": sum(sum(w["failed"].values()) for w in result["workers"]),
            "seconds": result["seconds"], "cpu_seconds": result["cpu_seconds"],
            "examples_per_second": round(examples / result["seconds"], 1)
            if result["seconds"] else 0.0}


def _gather(client: Any, jobs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    tag = uuid.uuid4().hex[:8]
    futures = [client.submit(run_machine, job, workers=[address], allow_other_workers=False,
                             pure=False, key=f"shardlaw-campaign-{tag}-{job['part']}")
               for address, job in jobs]
    return client.gather(futures)


def run_on_cluster(args: Any, files: dict[str, list[dict[str, Any]]], report_path: Path,
                   out: Path) -> int:
    """Run the campaign on every worker of the cluster ``args.dask``; write one report."""
    from shardlaw import campaign

    client, cluster = connect(args.dask)
    try:
        machines = sorted(client.scheduler_info()["workers"])
        if not machines:
            raise CommandExit(EXIT_BAD_INPUT, f"--dask {args.dask[:200]}: the cluster has "
                                              "no workers")
        start = time.monotonic()
        results = _gather(client, [(address, _job(args, files, part, len(machines)))
                                   for part, address in enumerate(machines)])
        seconds = time.monotonic() - start
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    for result in results:
        for name, text in result["disagreements"].items():
            out.mkdir(parents=True, exist_ok=True)
            (out / f"part{result['part']}-{name}").write_text(text)
    workers = [w for result in results for w in result["workers"]]
    report = campaign.build_report(workers, args.workers * len(machines), seconds,
                                   list(files), out)
    report["machines"] = [machine_figures(r) for r in results]
    report["database"] = campaign.database_of(args)
    report["cluster"] = args.dask
    cpu = sum(r["cpu_seconds"] for r in results)
    report["cpu_seconds"] = round(cpu, 1)
    report["examples_per_cpu_second"] = round(report["examples"] / cpu, 1) if cpu else 0.0
    for result in results:
        status = result["status"]
        if status not in (0, 1) or (status == 1 and not result["disagreements"]):
            raise CommandExit(EXIT_BAD_INPUT, f"machine {result['part']} ({result['host']} "
                                              f"{result['address']}): pytest ended with status "
                                              f"{status} without a disagreement:\n"
                                              f"{result['log_tail']}")
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    report["charts"] = campaign.write_charts(report, report_path)
    print(campaign.summary(report, report_path), end="")
    for line in report["machines"]:
        print(f"  machine {line['part']} {line['host']} {line['address']}: "
              f"{line['examples']:,} examples on {line['workers']} worker(s) in "
              f"{line['seconds']:,.0f} s, {line['disagreements']} disagreement(s)")
    return campaign.EXIT_DISAGREEMENT if report["disagreements"] else 0
