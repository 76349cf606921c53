"""A campaign on several machines: the example database in Redis, the workers on a Dask cluster.

``shardlaw campaign --db redis://HOST:PORT --dask ADDRESS``: Hypothesis' example database
shared through a real Redis server (started here from the installed ``redis-server``; the
tests skip, saying so, where there is none) with a local folder in front of it, and the
workers of one campaign spread over the worker processes of a Dask ``LocalCluster``
(``--dask local:N``), their figures added together in one report.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardlaw import campaign

redis = pytest.importorskip("redis", reason="the redis package is not installed "
                                            "(pip install redis)")
REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS_SERVER is None,
                                reason="no redis-server binary on PATH (Debian: "
                                       "apt-get install redis-server)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("redis")
    port = _free_port()
    server = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", str(folder)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)
    else:
        server.kill()
        pytest.fail(f"redis-server did not answer on port {port} within 10 s")
    yield url
    server.terminate()
    server.wait(timeout=10)


def test_a_redis_db_is_shared_between_machines_with_a_local_folder_in_front(redis_url,
                                                                           tmp_path):
    from hypothesis.database import MultiplexedDatabase

    redis.Redis.from_url(redis_url).flushdb()
    first = campaign.example_database(redis_url, str(tmp_path / "machine-a"))
    second = campaign.example_database(redis_url, str(tmp_path / "machine-b"))
    assert isinstance(first, MultiplexedDatabase)
    first.save(b"the-test", b"a failing example")
    # Saved in the first machine's folder and in Redis; the second machine reads it.
    assert list((tmp_path / "machine-a").rglob("*")) != []
    assert redis.Redis.from_url(redis_url).dbsize() > 0
    assert list(second.fetch(b"the-test")) == [b"a failing example"]
    assert not (tmp_path / "machine-b").exists() or \
        not [p for p in (tmp_path / "machine-b").rglob("*") if p.is_file()]


def test_a_redis_url_whose_server_does_not_answer_is_refused_before_any_worker(tmp_path):
    answer = subprocess.run(
        [sys.executable, "-m", "shardlaw.cli", "campaign", "--examples", "5",
         "--suite", "laws", "--db", f"redis://127.0.0.1:{_free_port()}",
         "--report", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
    assert answer.returncode == 2
    assert "the Redis server does not answer" in answer.stderr


_SUITE = '''
from hypothesis import given, strategies as st


@given(st.integers(0, 10_000))
def test_holds(n):
    assert n * n >= 0


@given(st.integers(0, 10_000))
def test_breaks_above_a_thousand(n):
    assert n <= 1000
'''


def test_a_campaign_on_a_local_dask_cluster_adds_the_machines_figures(redis_url, tmp_path):
    redis.Redis.from_url(redis_url).flushdb()
    suite = tmp_path / "two_properties.py"
    suite.write_text(_SUITE)
    report_path = tmp_path / "cluster.json"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    answer = subprocess.run(
        [sys.executable, "-m", "shardlaw.cli", "campaign", "--suite-path", str(suite),
         "--examples", "60", "--workers", "1", "--db", redis_url,
         "--local-db", str(tmp_path / "local"), "--dask", "local:2",
         "--report", str(report_path)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert answer.returncode == 1, answer.stdout + answer.stderr   # one property breaks
    report = json.loads(report_path.read_text())
    machines = report["machines"]
    assert len(machines) == 2 and len({m["address"] for m in machines}) == 2
    assert report["workers"] == 2
    assert report["examples"] == sum(m["examples"] for m in machines) > 0
    assert all(m["examples"] > 0 for m in machines)       # each machine ran its part
    assert report["disagreements"] == sum(m["disagreements"] for m in machines) >= 1
    assert report["database"] == redis_url
    # The shrunk counterexample is in Redis (for every machine) and in the local folder.
    assert redis.Redis.from_url(redis_url).dbsize() > 0
    assert [p for p in (tmp_path / "local").rglob("*") if p.is_file()]
    saved = sorted((tmp_path / "cluster-disagreements").glob("*.json"))
    assert saved and all(json.loads(p.read_text())["database"] == redis_url for p in saved)
    # Another machine (an empty local folder in front of the same server) reads the
    # counterexample back: what one machine found, every machine replays first.
    record = json.loads(saved[0].read_text())
    # A counterexample of the breaking property (Hypothesis shrinks it towards n=1001, but
    # how far it gets within the campaign's time on a loaded machine varies: n=9760 once).
    found = re.search(r"n=(\d+)", record["falsifying_example"] or "")
    assert found and int(found.group(1)) > 1000, record["falsifying_example"]
    elsewhere = campaign.example_database(redis_url, str(tmp_path / "elsewhere"))
    prefix = b"hypothesis-example:"
    keys = [k[len(prefix):] for k in redis.Redis.from_url(redis_url).keys(prefix + b"*")]
    assert keys and any(list(elsewhere.fetch(key)) for key in keys)
