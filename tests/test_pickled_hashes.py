"""Spec objects that remember their hash forget it when pickled: another process (a campaign
worker, a multi-process harness) hashes strings differently, so a remembered hash would put
an unpickled value and an equal one built there in different buckets of a set or dict."""

from __future__ import annotations

import pickle
import subprocess
import sys

from shardlaw.spec import Mesh, NamedSharding, P
from shardlaw.spec.core.values import DeviceList
from shardlaw.spec.program.description import Program, Value

BUILD = """
from shardlaw.spec import Mesh, NamedSharding, P
from shardlaw.spec.core.values import DeviceList
from shardlaw.spec.program.description import Program, Value
mesh = Mesh.iota((2, 2), ("x", "y"))
value = Value.placed((8, 4), NamedSharding(mesh, P("x")))
built = (value, mesh, NamedSharding(mesh, P("x")), DeviceList.of_ids(range(4)),
         Program((value,), (), (0,)))
"""


def _built() -> tuple:
    space: dict = {}
    exec(BUILD, space)  # noqa: S102 - the same source here and in the other process
    return space["built"]


def test_nothing_pickled_keeps_a_hash():
    built = _built()
    for obj in built:
        hash(obj)
    for obj in built:
        assert "_hash" not in obj.__getstate__(), type(obj)
    for before, after in zip(built, pickle.loads(pickle.dumps(built))):
        assert after == before and hash(after) == hash(before)


def test_an_unpickled_value_is_found_among_equal_ones_built_in_another_process():
    built = _built()
    for obj in built:
        hash(obj)   # remembered here, under this process's string hashes
    code = BUILD + (
        "import pickle, sys\n"
        "theirs = pickle.loads(sys.stdin.buffer.read())\n"
        "print([t in {b} for t, b in zip(theirs, built)])\n")
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(built),
                              capture_output=True, env={"PYTHONHASHSEED": seed}, timeout=60)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert done.stdout.decode().strip() == str([True] * len(built))
