"""``shardlaw campaign --workers``: a count beyond reason is refused before anything starts,
and a local campaign runs no more workers than the CPUs it may use, saying so."""

from __future__ import annotations

import io
import os

import pytest

from shardlaw import campaign
from shardlaw.cli import main


@pytest.mark.parametrize("count", ["100000", str(campaign.MAX_WORKERS + 1)])
def test_more_workers_than_any_machine_holds_are_refused(count, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status = main(["campaign", "--examples", "1", "--workers", count])
    err = capsys.readouterr().err
    assert status == 2
    assert f"argument --workers: at most {campaign.MAX_WORKERS} workers on one machine" in err
    assert f"got {count}" in err and "Traceback" not in err
    assert not (tmp_path / ".shardlaw").exists()   # refused before anything was made


def test_a_local_campaign_runs_no_more_workers_than_its_cpus(monkeypatch):
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 3)
    said = io.StringIO()
    assert campaign.capped_workers(2, said) == 2 and said.getvalue() == ""
    assert campaign.capped_workers(3, said) == 3 and said.getvalue() == ""
    assert campaign.capped_workers(500, said) == 3
    assert said.getvalue() == ("shardlaw campaign: --workers 500 is more than the 3 CPU(s) "
                               "this machine lets it use; running 3 worker(s)\n")


def test_the_run_hands_pytest_the_capped_count(monkeypatch, tmp_path, capsys):
    """The cap is applied where the workers are started: pytest-xdist gets ``-n`` CPUs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 2)
    seen = []

    class Stop(Exception):
        """Nothing runs: the command pytest would get is all this test reads."""

    def stop(workers, *rest):
        seen.append(workers)
        raise Stop

    monkeypatch.setattr(campaign, "pytest_command", stop)
    main(["campaign", "--suite", "placement", "--examples", "1", "--workers", "64"])
    assert seen == [2]
    assert "--workers 64 is more than the 2 CPU(s)" in capsys.readouterr().err


def test_usable_cpus_is_what_the_process_may_use():
    expected = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count())
    assert campaign.usable_cpus() == max(1, expected or 1)
