"""The multi-process differential harness: N JAX processes under jax.distributed, one example
at a time.

A :class:`Pool` starts N processes of :mod:`shardlaw.properties.processes_worker` (CPU
devices, gloo collectives) once, then hands every process the same example, drawn here by
Hypothesis (:func:`process_examples`): a mesh over some of the program's devices in some order, a
partition spec, a global shape, and how each process shapes its local data. Each process
compares the spec's answer for itself with what JAX does in that process and answers with
its disagreements and the rule sides it saw; :meth:`Pool.compare` records the sides
(``shardlaw.properties.hits``, source ``"processes"``) and fails the example when any
process disagrees. A process that dies or does not answer in time ends the pool: the
others are stopped and the error names the process and the end of its output.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.spec.core.rules import overridden_rules

__all__ = ["Pool", "WorkerFailed", "process_examples", "pool", "close_pools", "RULES",
           "ANSWER_SECONDS"]

# The rules the harness holds to JAX in every process, each on both sides.
RULES = ("DEV-2", "PROC-1", "PROC-2", "PROC-3", "PROC-4", "PROC-5", "PROC-6", "PROC-7",
         "PROC-8", "PROC-9", "PROC-10", "PROC-11", "PROC-12", "PROC-13", "PROC-14", "PROC-15",
         "PROC-16", "PROC-17", "PROC-18", "RES-2")

PLANTED_ENV = "SHARDLAW_PROCESSES_PLANTED"
START_SECONDS = 180.0      # to import JAX and join the program
ANSWER_SECONDS = 60.0      # per example, per process


class WorkerFailed(RuntimeError):
    """A process of the pool died, crashed or did not answer in time."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pool:
    """N processes of ``per_process`` CPU devices each, joined by jax.distributed."""

    def __init__(self, processes: int, per_process: int = 2) -> None:
        self.processes, self.per_process = processes, per_process
        self.devices = processes * per_process
        port = _free_port()
        env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu")
        env.pop("XLA_FLAGS", None)
        # A rule planted wrong in this process (a campaign's --plant) is planted in each.
        env[PLANTED_ENV] = ",".join(overridden_rules())
        self._logs = [tempfile.TemporaryFile(mode="w+") for _ in range(processes)]
        # (process, line) from every process, None for a line when its output closed
        self._lines: queue.Queue = queue.Queue()
        self._procs = [subprocess.Popen(
            [sys.executable, "-m", "shardlaw.properties.processes_worker", str(i), str(port),
             str(processes), str(per_process)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._logs[i], text=True,
            env=env) for i in range(processes)]
        for i, proc in enumerate(self._procs):
            threading.Thread(target=self._read, args=(i, proc, self._lines),
                             daemon=True).start()
        try:
            self._collect("READY", START_SECONDS)
        except WorkerFailed:
            self.close()
            raise

    @staticmethod
    def _read(i: int, proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.put((i, line.rstrip("\n")))
        lines.put((i, None))  # the process closed its output: it ended

    def _log_tail(self, i: int) -> str:
        log = self._logs[i]
        log.seek(0)
        return log.read()[-2000:]

    def _collect(self, prefix: str, seconds: float) -> list[str]:
        """Every process's next line that starts with ``prefix``, in process order; the
        first process to end, or the time limit, fails them all at once."""
        end, got = time.monotonic() + seconds, {}
        while len(got) < self.processes:
            try:
                i, line = self._lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                silent = [i for i in range(self.processes) if i not in got]
                raise WorkerFailed(f"process(es) {silent} gave no {prefix} in {seconds:.0f} "
                                   f"s:\n{self._log_tail(silent[0])}") from None
            if line is None:
                code = self._procs[i].wait()
                raise WorkerFailed(f"process {i} ended (exit {code}) before {prefix}:\n"
                                   f"{self._log_tail(i)}")
            if line.startswith(prefix):
                got[i] = line[len(prefix):].strip()
        return [got[i] for i in range(self.processes)]

    def ask(self, example: dict) -> list[dict]:
        """Every process's answer to ``example``; a dead or silent process stops the pool."""
        text = json.dumps(example) + "\n"
        try:
            for proc in self._procs:
                proc.stdin.write(text)  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            return [_answer(i, line)
                    for i, line in enumerate(self._collect("ANSWER", ANSWER_SECONDS))]
        except (WorkerFailed, OSError) as error:
            self.close()
            raise WorkerFailed(f"{error}\nexample: {example}") from None

    def compare(self, example: dict) -> None:
        """Ask every process; record the rule sides; fail if any process disagrees."""
        answers = self.ask(example)
        for answer in answers:
            for rule_id, refused in answer["hits"]:
                hits.record("processes", rule_id, refused)
        problems = [f"process {i}: {p}" for i, a in enumerate(answers) for p in a["problems"]]
        assert not problems, "\n".join(problems) + f"\nexample: {example}"

    @property
    def alive(self) -> bool:
        return all(proc.poll() is None for proc in self._procs)

    def close(self) -> None:
        """Stop every process: STOP, a short wait, then kill what is left. When one has
        died already the others cannot leave the program cleanly: they are killed at once."""
        if not self.alive:
            for proc in self._procs:
                if proc.poll() is None:
                    proc.kill()
        for proc in self._procs:
            try:
                proc.stdin.write("STOP\n")  # type: ignore[union-attr]
                proc.stdin.close()  # type: ignore[union-attr]
            except (OSError, ValueError):   # its pipe is closed already
                pass
        end = time.monotonic() + 20
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self._logs:
            log.close()
        self._logs = []


def _answer(i: int, line: str) -> dict:
    try:
        return json.loads(line)
    except ValueError:
        raise WorkerFailed(f"process {i} answered with a line that is not one JSON object: "
                           f"{line[:300]!r}") from None


_POOLS: dict[tuple[int, int], Pool] = {}


def pool(processes: int, per_process: int = 2) -> Pool:
    """The running pool of this size (started on first use, restarted if it died; a pool of
    another size is stopped first)."""
    key = (processes, per_process)
    for other in [k for k in _POOLS if k != key]:
        _POOLS.pop(other).close()   # one program at a time: the cores are shared
    if key not in _POOLS or not _POOLS[key].alive:
        _POOLS[key] = Pool(processes, per_process)
    return _POOLS[key]


def close_pools() -> None:
    while _POOLS:
        _POOLS.popitem()[1].close()


# --------------------------------------------------------------------------- examples

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _factorization(draw: Any, n: int) -> list[int]:
    """1 to 3 axis sizes whose product is ``n``."""
    sizes = []
    for _ in range(draw(st.integers(0, 2))):
        size = draw(st.sampled_from(_divisors(n)))
        sizes.append(size)
        n //= size
    return [n, *sizes]


@st.composite
def process_examples(draw: Any, devices: int) -> dict:
    """One example for a program of ``devices`` devices (the same in every process)."""
    # Meshes over a divisor of the program's devices first, then over any other count: a
    # mesh of 3 of 2 x 2 devices gives the processes slices of different sizes (PROC-3).
    divisors = _divisors(devices)[::-1]
    count = draw(st.sampled_from(divisors + [n for n in range(devices, 0, -1)
                                             if n not in divisors]))
    order = draw(st.sampled_from(["ascending", "permuted"]))
    ids = list(range(devices))
    if order == "permuted":
        ids = draw(st.permutations(ids))
    else:
        start = draw(st.sampled_from(range(0, devices, count)))
        ids = ids[start:] + ids[:start]
    sizes = draw(_factorization(count))
    names = ["a", "b", "c"][:len(sizes)]
    rank = draw(st.integers(1, 3))
    unused = list(names)
    spec, ways = [], []
    for _ in range(rank):
        axes = draw(st.lists(st.sampled_from(unused), unique=True, max_size=2)) if unused else []
        unused = [a for a in unused if a not in axes]
        spec.append(axes or None)
        n = 1
        for a in axes:
            n *= sizes[names.index(a)]
        ways.append(n)
    shape = [n * draw(st.integers(1, 3)) for n in ways]
    given = draw(st.booleans())
    # Data of the wrong size is asked with the global shape given: inferred from it, the
    # global shape need not divide by the sharding, and DIV-1 would answer first.
    modes = ["own", "full", "wrong"] if given else ["own", "full"]
    local = draw(st.lists(st.sampled_from(modes), min_size=rank, max_size=rank))
    return {"devices": ids[:count], "axis_sizes": sizes, "axis_names": names, "spec": spec,
            "shape": shape, "local": local, "global_given": given,
            "single": draw(st.sampled_from(["exact", "missing", "twice", "misshapen"])),
            "rotate": draw(st.integers(0, 7)),
            # Compiling and running a call costs most of an example: a quarter of them do.
            "run": draw(st.sampled_from([False, True, False, False])),
            "tiled": draw(st.booleans()),
            "make_mesh": draw(_make_mesh_examples(devices)),
            "put": draw(_put_examples(devices, ids[:count], shape)),
            "donate": {"result": draw(st.sampled_from(DONATING_CALLS)),
                       "after": draw(st.sampled_from(AFTER_DONATION))}}


# What the donating call returns (processes_worker._donating_call; PROC-17).
DONATING_CALLS = ("same", "replicated", "sum", "cast", "narrow", "uint32", "bfloat16", "int8",
                  "expand", "flatten", "pair")
# What a process does with an array after donating it (PROC-18).
AFTER_DONATION = ("np.asarray", "addressable_shards", "jit", "device_put", "str",
                  "device_put to its own sharding")


@st.composite
def _make_mesh_examples(draw: Any, devices: int) -> dict:
    """jax.make_mesh (or create_device_mesh, ``exact``) of a shape over at most one device
    more than the program has (refused)."""
    count = draw(st.sampled_from([devices, devices, *range(1, devices + 2)]))
    return {"axis_sizes": draw(_factorization(count)), "exact": draw(st.booleans())}


@st.composite
def _put_examples(draw: Any, devices: int, source_devices: list[int], shape: list[int]
                  ) -> dict:
    """One device_put: of what (host data the same or not in every process — a numpy array,
    an uncommitted array or a Python float —, the global array, a single-device array), to what (a sharding over the same devices or any, the
    array's own sharding, one device, no target)."""
    source = draw(st.sampled_from(["host", "host-differ", "array", "single"]))
    to = draw(st.sampled_from(["sharding", "sharding", "device", "none"]))
    if draw(st.booleans()):
        ids = list(draw(st.permutations(source_devices)))
    else:
        count = draw(st.sampled_from(_divisors(devices)))
        ids = draw(st.permutations(range(devices)))[:count]
    sizes = draw(_factorization(len(ids)))
    names = ["p", "q", "r"][:len(sizes)]
    unused, spec = list(names), []
    for size in shape:
        axes = draw(st.lists(st.sampled_from(unused), unique=True, max_size=2)) if unused else []
        ways = 1
        for a in axes:
            ways *= sizes[names.index(a)]
        axes = axes if size % ways == 0 else []
        unused = [a for a in unused if a not in axes]
        spec.append(axes or None)
    return {"source": source, "to": to, "same": draw(st.sampled_from([False, False, True])),
            "host": draw(st.sampled_from(["numpy", "uncommitted", "scalar"])),
            "devices": ids, "axis_sizes": sizes, "axis_names": names, "spec": spec,
            "single_device": draw(st.integers(0, devices - 1)),
            "device": draw(st.integers(0, devices - 1))}
