"""Call-sequence vectors: written, read back, explained by shardlaw check, held to JAX."""

import json
from pathlib import Path

import pytest

import shardlaw.spec as S
from shardlaw.cli import main
from shardlaw.properties.registry import checks
from shardlaw.spec.jit.cache import CallSite, explain_cache
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.vectors.sequence_vectors import cache_differences, dump_sequence, load_sequence

SEQUENCES = sorted((Path(__file__).resolve().parent.parent / "vectors" / "cache").glob("*.json"))
MESH = S.Mesh.iota((2, 4), ("x", "y"))


def _sites():
    def call(spec):
        return S.Call(args=(S.Arg.committed((8, 8), S.NamedSharding(MESH, spec)),),
                      outputs=S.Out((8, 8)))
    return [CallSite(call(S.P("x"))), CallSite(call(S.P("x"))), CallSite(call(S.P("y")), "g", "w2")]


@checks("VEC-1")
def test_sequences_round_trip_and_refuse_bad_input():
    sites = _sites()
    vector = dump_sequence(sites, expect=explain_cache(sites), name="three")
    back = load_sequence(json.dumps(vector))
    assert back.sites == tuple(sites) and back.name == "three"
    assert cache_differences(back, explain_cache(sites)) == []
    broken = json.loads(json.dumps(vector))
    broken["expect_cache"][1]["dispatch"] = "sometimes"
    with pytest.raises(Rejection, match=r"expect_cache\[1\]\.dispatch"):
        load_sequence(broken)
    broken = json.loads(json.dumps(vector))
    broken["sequence"][0]["call"]["devices"] = 0
    with pytest.raises(Rejection, match=r"sequence\[0\]\.call\.devices"):
        load_sequence(broken)


def test_committed_sequences_are_there():
    assert SEQUENCES


@pytest.mark.parametrize("path", SEQUENCES, ids=lambda p: p.stem)
def test_check_prints_the_cache_table(path, capsys):
    assert main(["check", str(path)]) == 0
    text = capsys.readouterr().out
    assert "dispatch" in text and "the model matches" in text
    assert main(["check", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["matches"] is True


@pytest.mark.parametrize("path", SEQUENCES, ids=lambda p: p.stem)
def test_committed_sequences_agree_with_jax_counters(path):
    from shardlaw.properties.cache_harness import compare_sequence

    vector = load_sequence(path.read_text(encoding="utf-8"))
    rows, _, problems = compare_sequence(vector.sites)
    assert not problems, "\n".join(problems)
    assert cache_differences(vector, rows) == []
