"""The engine under jax.distributed: two local CPU processes of four devices each, gloo collectives.

The test starts both processes itself (tests/engine_process_worker.py) and gives them a
time limit. Each checks, against jax.jit: results over all eight devices, an argument
placement-equal to an earlier one reusing its executable across processes, a
cross-process reduction, the multi-process rule RES-2 (a numpy argument meets only a
replicated in_sharding), programs on non-addressable devices (inputs or results only
on the other process's devices: run, with no local shard, as jax.jit runs them), and
donation (the donated array deleted or kept as jax.jit leaves it, PROC-17).
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from shardlaw.properties.registry import checks

WORKER = Path(__file__).resolve().parent / "engine_process_worker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@checks("RES-2", "PROC-17")
def test_two_processes_under_jax_distributed():
    port = _free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    processes = [subprocess.Popen([sys.executable, str(WORKER), str(i), str(port)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env) for i in range(2)]
    outputs = []
    try:
        for p in processes:
            out, err = p.communicate(timeout=240)
            outputs.append((p.returncode, out, err))
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
    for i, (code, out, err) in enumerate(outputs):
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert lines, f"process {i} (rc {code}) printed no result:\n{err[-3000:]}"
        checks = json.loads(lines[-1][len("RESULT "):])
        failed = {k: v for k, v in checks.items() if v is not True}
        assert not failed, f"process {i}: {failed}"
        assert len(checks) >= 27
