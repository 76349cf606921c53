"""``shardlaw campaign``, its worker plugin, HypoFuzz on the suites, and the pytest plugin.

The campaigns here are small (a few properties, a few dozen examples) but real: pytest with
pytest-xdist in fresh processes, JAX on eight CPU devices in each worker, one example
database, started in an empty folder (the suites are modules of the installed package).
One of them plants a wrong rule and must find it, save it and replay it; one runs a user's
own suite, given by its path.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from shardlaw import campaign
from shardlaw.campaign import build_report, suite_files

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"workers", "seconds", "examples", "examples_per_second", "disagreements", "suites",
        "rules", "never_hit", "jax_calls"}
TWO_PROPERTIES = "test_placement_agrees_with_jax or test_iota_tile_agrees_with_xla"


def _campaign(tmp_path: Path, *argv: str, env: dict[str, str] | None = None
              ) -> tuple[subprocess.CompletedProcess, Path]:
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "shardlaw.cli", "campaign", "--db", str(tmp_path / "db"),
               "--report", str(report), *argv]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env={**os.environ, **(env or {})})
    return done, report


def test_a_short_campaign_writes_the_report_the_issue_asks_for(tmp_path):
    done, report = _campaign(tmp_path, "--suite", "placement", "-k", TWO_PROPERTIES,
                             "--examples", "10", "--workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(report.read_text())
    assert KEYS <= set(figures) and figures["workers"] == 2
    assert figures["disagreements"] == 0 and figures["suites"]["placement"]["disagreements"] == 0
    assert figures["examples"] >= 2 * 10   # two properties, each split over two workers
    assert figures["examples"] == figures["suites"]["placement"]["examples"]
    assert figures["rules"]["DIV-1"]["accepted"] > 0
    assert all(set(hits) == {"accepted", "rejected"} for hits in figures["rules"].values())
    assert "examples/s" in done.stdout and "rules hit" in done.stderr  # the progress line
    assert (tmp_path / "db").is_dir()   # the shared database (Hypothesis keeps failures there)
    # The report drawn beside it: rule coverage and examples per second.
    for chart in ("coverage", "speed"):
        svg = ElementTree.parse(tmp_path / f"report-{chart}.svg").getroot()
        assert svg.tag.endswith("svg") and f"report-{chart}.svg" in done.stdout
    assert "DIV-1" in (tmp_path / "report-coverage.svg").read_text()
    assert "placement" in (tmp_path / "report-speed.svg").read_text()


def test_a_planted_wrong_rule_is_found_saved_and_replayed(tmp_path):
    done, report = _campaign(tmp_path, "--suite", "placement", "-k",
                             "test_placement_agrees_with_jax", "--examples", "10",
                             "--workers", "1", "--plant", "DIV-1")
    assert done.returncode == 1, done.stdout + done.stderr
    figures = json.loads(report.read_text())
    assert figures["disagreements"] >= 1
    assert figures["suites"]["placement"]["disagreements"] == figures["disagreements"]
    saved = [json.loads(Path(p).read_text()) for p in figures["disagreement_files"]]
    assert saved and all(Path(p).parent == tmp_path / "report-disagreements"
                         for p in figures["disagreement_files"])
    first = saved[0]
    assert first["test"] == \
        "shardlaw.properties.suites.placement::test_placement_agrees_with_jax"
    assert first["planted"] == "DIV-1" and "[DIV-1]" in first["report"]
    # Read through Hypothesis' observability interface, not its printed words.
    assert first["falsifying_example"].startswith("test_placement_agrees_with_jax(")
    assert first["arguments"] and first["how_generated"]
    assert first["reproduce_failure"].startswith("@reproduce_failure(")
    # The saved example replays from the database: the test fails again, at once.
    replay = subprocess.run([sys.executable, "-m", "shardlaw.cli", "campaign", "--replay",
                             figures["disagreement_files"][0]], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert replay.returncode == 1, replay.stdout[-2000:] + replay.stderr[-2000:]


def test_a_users_own_suite_joins_by_its_path(tmp_path):
    """A file outside the package, named by its stem; its harness records through the
    one recording API, and the report counts what it recorded."""
    (tmp_path / "my_suite.py").write_text(textwrap.dedent("""
        from hypothesis import given, strategies as st

        from shardlaw.properties import hits
        from shardlaw.properties.registry import checks
        from shardlaw.spec import Mesh, NamedSharding, P, Rejection, shard_shape

        @checks("DIV-1")
        @given(st.integers(1, 1000))
        def test_rows_split_over_two_devices(rows):
            sharding = NamedSharding(Mesh.iota((2,), ("x",)), P("x"))
            for n in (rows, rows + 1):   # one even, one odd: both sides in each example
                try:
                    shard_shape(sharding, (n,))
                    hits.record("my_harness", "DIV-1", refused=False)
                except Rejection:
                    hits.record("my_harness", "DIV-1", refused=True)
    """))
    done, report = _campaign(tmp_path, "--suite-path", str(tmp_path / "my_suite.py"),
                             "--examples", "12")
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(report.read_text())
    assert list(figures["suites"]) == ["my_suite"] and figures["examples"] == 12
    div = figures["rules"]["DIV-1"]
    assert div["accepted"] == div["rejected"] == 12


def test_bad_campaign_arguments_end_in_one_line():
    for argv in (["campaign"], ["campaign", "--examples", "0"],
                 ["campaign", "--examples", "5", "--minutes", "1"],
                 ["campaign", "--suite", "nope", "--examples", "5"],
                 ["campaign", "--share", "nope=2", "--examples", "5"],
                 ["campaign", "--plant", "NOPE-1", "--examples", "5"],
                 ["campaign", "--suite-path", "/no/such/suite.py", "--examples", "5"]):
        done = subprocess.run([sys.executable, "-m", "shardlaw.cli", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, argv


def test_suites_are_modules_of_the_package_and_missing_ones_are_left_out(monkeypatch):
    assert set(suite_files(["all"])) >= {"placement", "jit", "engine", "cache", "transforms",
                                          "fuzz", "laws"}
    placement = suite_files(["placement"])["placement"]
    assert [part["module"] for part in placement] == ["shardlaw.properties.suites.placement"]
    assert Path(placement[0]["path"]).is_file()
    monkeypatch.setattr(campaign, "SUITES", {
        "laws": ("shardlaw.properties.laws",),
        "later": ("shardlaw.properties.suites.not_written_yet",),
        "transforms": ("shardlaw.properties.suites.batching",
                       "shardlaw.properties.suites.not_written_yet")})
    found = suite_files(None)
    assert {name: [p["module"] for p in parts] for name, parts in found.items()} == {
        "laws": ["shardlaw.properties.laws"],
        "transforms": ["shardlaw.properties.suites.batching"]}
    assert suite_files(["later"]) == {}


def test_other_packages_add_suites_by_entry_point(monkeypatch):
    import importlib.metadata

    points = [importlib.metadata.EntryPoint("mine", "shardlaw.properties.laws",
                                            campaign.ENTRY_POINTS)]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: points if group == campaign.ENTRY_POINTS else [])
    assert campaign.known_suites()["mine"] == ("shardlaw.properties.laws",)
    assert [p["module"] for p in suite_files(["mine"])["mine"]] == ["shardlaw.properties.laws"]


def test_shares_split_the_time_among_the_suites(monkeypatch):
    from shardlaw import campaign, campaign_plugin
    monkeypatch.setattr(campaign_plugin, "CONFIG", campaign_plugin.Config(shares={"jit": 3}))
    per_suite = collections.Counter({"jit": 1, "placement": 16})
    assert campaign_plugin._shares(per_suite) == {"jit": 3.0, "placement": 1.0}
    assert campaign._share("jit=2.5") == ("jit", 2.5)
    for bad in ("jit", "=2", "jit=0", "jit=-1", "jit=x", "jit=1e9"):
        with pytest.raises(argparse.ArgumentTypeError):
            campaign._share(bad)


def test_time_left_by_an_early_end_goes_to_the_items_still_waiting():
    from shardlaw.campaign_plugin import plan_slice
    weights = {"a": 1.0, "b": 1.0, "c": 2.0}
    # nothing started: 100 s on each of 2 workers, shared 1:1:2
    assert plan_slice("a", weights, set(), 100.0, 2, 0.0) == 50.0
    # "a" ended early, "b" runs on the other worker with 30 s to go: "c" gets what is left
    assert plan_slice("c", weights, {"a", "b"}, 80.0, 2, 30.0) == 130.0
    # the last item runs to the campaign's end on its worker
    assert plan_slice("b", weights, {"a", "c"}, 40.0, 2, 40.0) == 40.0
    # an item outside the plan, or no time: nothing
    assert plan_slice("z", weights, set(), 100.0, 2, 0.0) == 0.0
    assert plan_slice("a", weights, set(), 10.0, 2, 50.0) == 0.0


def test_jax_caches_are_cleared_every_so_many_examples(monkeypatch):
    from shardlaw import campaign_plugin
    cleared = []
    monkeypatch.setattr(campaign_plugin.jax, "clear_caches", lambda: cleared.append(1))
    monkeypatch.setattr(campaign_plugin, "WORKER", campaign_plugin._Worker(active=False))
    monkeypatch.setattr(campaign_plugin, "CLEAR_EVERY", 3)
    counted = campaign_plugin._count_examples(lambda: None)
    for _ in range(7):
        counted()
    assert len(cleared) == 2
    monkeypatch.setattr(campaign_plugin, "CLEAR_EVERY", 0)
    for _ in range(7):
        counted()
    assert len(cleared) == 2


def test_the_report_adds_up_the_workers(tmp_path):
    worker = {"examples": {"jit": 5}, "failed": {}, "rules": {"DA-1": [3, 1], "DA-3": [2, 0]},
              "scope": ["DA-1", "DA-3", "DA-4"], "fuzz": {}, "jax_calls": {"jit": 6}}
    other = {"examples": {"jit": 7, "placement": 1}, "failed": {"jit": 1},
             "rules": {"DA-1": [1, 0]}, "scope": ["DA-1"], "fuzz": {}, "jax_calls": {"jit": 7}}
    report = build_report([worker, other], 2, 4.0, ["jit", "placement"], tmp_path / "none")
    assert set(report) == KEYS
    assert report["examples"] == 13 and report["examples_per_second"] == 3.2
    assert {name: (f["examples"], f["disagreements"]) for name, f in report["suites"].items()} \
        == {"jit": (12, 1), "placement": (1, 0)}
    assert report["jax_calls"] == 13 and report["suites"]["jit"]["jax_calls"] == 13
    assert report["suites"]["placement"]["jax_calls"] == 0
    assert report["rules"]["DA-1"] == {"accepted": 4, "rejected": 1}
    assert report["never_hit"] == ["DA-3 rejected", "DA-4 accepted", "DA-4 rejected"]


# --------------------------------------------------------------------------- HypoFuzz

def test_hypofuzz_fuzzes_a_suite_into_the_shared_database(tmp_path):
    pytest.importorskip("hypofuzz", reason="hypofuzz is in the dev extra; install it")
    database = tmp_path / "db"
    # tests/ defaults to the derandomized ci profile, which HypoFuzz does not fuzz
    env = {**os.environ, "SHARDLAW_EXAMPLES_DB": str(database), "HYPOTHESIS_PROFILE": "fresh"}
    command = ["hypothesis", "fuzz", "-n", "1", "--no-dashboard", "--",
               "tests/test_differential.py", "-k", "test_iota_tile_agrees_with_xla"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            if database.is_dir() and sum(1 for p in database.rglob("*") if p.is_file()) > 20:
                break
            time.sleep(0.5)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:  # a fuzzing process may outlive the interrupt
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate(timeout=20)
    assert "fuzz 1 test" in output, output[-3000:]
    assert sum(1 for p in database.rglob("*") if p.is_file()) > 20, output[-3000:]


# --------------------------------------------------------------------------- the command

def test_the_campaign_parser_is_registered():
    assert "campaign" in campaign.__all__ or campaign.add_parser
    done = subprocess.run([sys.executable, "-m", "shardlaw.cli", "campaign", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--examples" in done.stdout and "--workers" in done.stdout


def test_a_time_budget_stops_properties_after_whole_examples(tmp_path):
    """--minutes: each property stops when its share of the time is spent, after an
    example has drawn all it draws (a test drawing with st.data() too), and passes."""
    (tmp_path / "test_endless.py").write_text(textwrap.dedent("""
        from hypothesis import given, strategies as st

        @given(st.data())
        def test_draws_inside(data):
            assert data.draw(st.integers()) == data.draw(st.integers()) or True

        @given(st.lists(st.integers()))
        def test_draws_before(xs):
            assert len(xs) >= 0
    """))
    config = campaign.write_config(
        tmp_path / "campaign.json", database=None, end=time.time() + 15,
        scratch=str(tmp_path), suites=[{"suite": "placement", "module": None,
                                        "path": str(tmp_path / "test_endless.py")}])
    env = dict(os.environ)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):  # when run under -n
        env.pop(name, None)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "shardlaw.campaign_plugin",
                           campaign.CONFIG_OPTION, str(config), "-p", "no:cacheprovider",
                           str(tmp_path / "test_endless.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:]
    assert time.monotonic() - start < 90
    counted = json.loads((tmp_path / "worker-main.json").read_text())
    # Each property went on past its first example until the time was spent (how many it
    # ran depends on the machine's load: the start of pytest can take most of the budget).
    assert counted["examples"]["placement"] >= 4 and counted["final"]
