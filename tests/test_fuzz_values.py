"""Where the deep fuzz campaign's draws come from.

Its hostile vector files (properties/fuzz_values.py): the repository's vectors when there are
some, said and replaced by the spec's own seed vectors when there are none (a wheel install
run from an empty folder), never an empty object alone. Its seed (properties/fuzz.py): a
fresh one each run, printed so that the run can be drawn again, unless ``--seed`` names one."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardlaw.properties import fuzz, fuzz_values
from shardlaw.spec.vectors import load_vector

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_checkout(tmp_path, monkeypatch):
    """As from a wheel: no vectors beside the package, none where the command runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(fuzz_values.VECTORS_VARIABLE, raising=False)
    monkeypatch.setattr(fuzz_values, "PACKAGE_VECTORS", tmp_path / "site-packages" / "vectors")
    fuzz_values.seed_files.cache_clear()
    yield tmp_path
    fuzz_values.seed_files.cache_clear()


def test_without_a_checkout_the_spec_seeds_are_fuzzed_and_that_is_said(no_checkout, capsys):
    assert fuzz_values.vectors_folder() is None
    seeds = fuzz_values.seed_files()
    assert "no vectors folder" in capsys.readouterr().err
    vectors = [load_vector(text) for _, text in seeds]
    assert len(vectors) >= 4
    assert {v.expect.accepted for v in vectors} == {True, False}


def test_the_checkout_s_vectors_are_found_from_where_the_command_runs(no_checkout, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert fuzz_values.vectors_folder() == ROOT / "vectors"
    names = [name for name, _ in fuzz_values.seed_files()]
    assert len(names) == 40 and not any(name.startswith("seed-") for name in names)


def test_the_environment_names_the_vectors_folder(no_checkout, monkeypatch):
    monkeypatch.setenv(fuzz_values.VECTORS_VARIABLE, str(ROOT / "vectors" / "jit"))
    assert fuzz_values.vectors_folder() == ROOT / "vectors" / "jit"


def _seed_said(capsys, argv):
    assert fuzz.main(["--inputs", "2", "--cli", "0", "--executable", "0", *argv]) == 0
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if line.startswith("seed ")]
    assert len(said) == 1 and f"seed: {said[0].split()[1]}" in captured.out.splitlines()
    return int(said[0].split()[1])


def test_a_campaign_without_a_seed_draws_a_fresh_one_and_prints_it(capsys):
    first, second = _seed_said(capsys, []), _seed_said(capsys, [])
    assert first != second   # 1 chance in 2**32 of a false alarm
    assert _seed_said(capsys, ["--seed", str(first)]) == first
