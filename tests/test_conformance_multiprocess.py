"""The multiprocess conformance run: JAX's launcher, the engine in every process, crashes and hangs.

``python -m shardlaw.engine.conformance DIR --processes 4`` runs JAX's multiprocess test
files through JAX's own launcher (N processes over ``jax.distributed``, CPU devices, gloo).
Here: one small file of JAX's (``device_id_test.py``, from ``../shared/jax-tests``, beside
the clone) under the engine, and two files of our own that crash one process and hang, so
that a crash reads as a crash and a hang is killed at its limit, never as a clean run.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from shardlaw.engine import conformance

JAX_MULTIPROCESS = Path(__file__).resolve().parents[1].parent / "shared" / "jax-tests" / "multiprocess"

pytest.importorskip("absl", reason="JAX's multiprocess launcher needs absl-py")


@pytest.mark.skipif(not (JAX_MULTIPROCESS / "device_id_test.py").exists(),
                    reason=f"JAX 0.10.2's multiprocess tests are not at {JAX_MULTIPROCESS} "
                    "(the shared folder beside the clone)")
def test_a_jax_multiprocess_file_passes_under_the_engine_in_every_process():
    outcomes = conformance.run_multiprocess_file(JAX_MULTIPROCESS, "device_id_test.py",
                                                 "engine", processes=4,
                                                 devices_per_process=2, timeout=240)
    assert outcomes, "no test reported"
    assert all(o.status == "passed" for o in outcomes.values()), outcomes
    assert "multiprocess/device_id_test.py::DeviceIdTest::testJit" in outcomes


_OWN_FILE = '''
import os
import jax
from jax._src import test_multiprocess as jt_multiprocess


class OwnTest(jt_multiprocess.MultiProcessTest):

    def test_jit_is_the_modes(self):
        from shardlaw.engine import jit
        self.assertEqual(jax.jit is jit, os.environ["SHARDLAW_CONFORMANCE"] == "engine")

    def test_last(self):
        {body}


if __name__ == "__main__":
    jt_multiprocess.main()
'''


def _own(tmp_path: Path, name: str, body: str) -> Path:
    (tmp_path / name).write_text(_OWN_FILE.format(body=textwrap.dedent(body).strip()))
    return tmp_path


def test_a_process_that_dies_is_reported_as_a_crash(tmp_path):
    folder = _own(tmp_path, "crash_test.py",
                  "if jax.process_index() == 1: os._exit(3)")
    outcomes = conformance.run_multiprocess_file(folder, "crash_test.py", "engine",
                                                 processes=2, devices_per_process=1,
                                                 timeout=120)
    crash = outcomes["multiprocess/crash_test.py::<process 1>"]
    assert crash.status == "crash" and "process 1 wrote no test report" in crash.message
    # What the other process saw is kept; the run as a whole is broken, never clean.
    figures = conformance.compare({"x::T::t": conformance.Outcome("passed")}, outcomes)
    assert "multiprocess/crash_test.py::<process 1>" in sum(figures["causes"].values(), [])


def test_a_file_past_its_limit_is_killed_with_its_workers(tmp_path):
    folder = _own(tmp_path, "hang_test.py", "import time; time.sleep(600)")
    began = time.monotonic()
    outcomes = conformance.run_multiprocess_file(folder, "hang_test.py", "jax",
                                                 processes=2, devices_per_process=1,
                                                 timeout=6)
    assert time.monotonic() - began < 30
    timeout = outcomes["multiprocess/hang_test.py::<run>"]
    assert timeout.status == "timeout" and "limit of 6 s" in timeout.message
