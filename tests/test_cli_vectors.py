"""``shardlaw check`` and ``shardlaw vectors``: the explanations a JAX user reads, the JSON for
machines, conformance reports, and bad input answered with a message and a status, never a
traceback."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardlaw.cli import main
from shardlaw.cli_text import plain_text
from shardlaw.spec import RULES

ROOT = Path(__file__).resolve().parents[1]
HAND = ROOT / "vectors" / "jit" / "hand"
DA_1 = HAND / "da-1-argument-on-another-device.json"
INDIVISIBLE = HAND / "fit-1-indivisible-argument.json"
ACCEPTED = HAND / "res-4-silent-move-equal-hlo.json"


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _plain(statement):
    return " ".join(plain_text(statement).split())


def _unwrapped(text):
    return " ".join(text.split())


def test_check_explains_a_device_assignment_mismatch(capsys):
    status, out, _ = run(capsys, "check", DA_1)
    assert status == 0, out
    flat = _unwrapped(out)
    assert "Verdict: REJECTED by DA-1 - JAX raises ValueError when the traced call is lowered" in out
    assert "where: args[1]" in out
    # the message names both sources with their paths and device ids
    assert ("the argument args[0] (committed) is on devices [0, 1, 2, 3, 4, 5, 6, 7] and the "
            "argument args[1] (committed) is on devices [3]") in flat
    assert "committed jax.Array float32[8] on SingleDeviceSharding(Device(3))" in out
    # the rule's statement, and the trace of rules with theirs, the rejecting one marked
    assert _plain(RULES["DA-1"].statement) in flat
    assert _plain(RULES["KEEP-1"].statement) in flat
    assert "<- rejects the call" in out
    assert "Expected by the vector: rejected by DA-1 (ValueError). The spec matches." in out


def test_check_explains_an_indivisible_argument(capsys):
    status, out, _ = run(capsys, "check", INDIVISIBLE)
    assert status == 0, out
    flat = _unwrapped(out)
    assert ("REJECTED by FIT-1 - JAX raises ValueError (JAX's class: IndivisibleError, a "
            "ValueError) when the call is traced") in out
    assert "where: args[0]" in out
    assert "6 is not a multiple of 4" in flat and "Pad dimension 0 to a multiple of 4" in flat
    assert "The spec matches." in out


def test_check_explains_an_accepted_call(capsys):
    status, out, _ = run(capsys, "check", ACCEPTED)
    assert status == 0, out
    assert "Verdict: ACCEPTED - the program runs on 8 device(s), in this order: " \
           "[0, 1, 2, 3, 4, 5, 6, 7]" in out
    assert "Inputs, as the compiled program receives them" in out
    assert "(committed)" in out
    assert "Transfers: jit moves args[0]" in out


def test_check_json_is_for_machines(capsys):
    status, out, _ = run(capsys, "check", DA_1, "--json")
    assert status == 0
    found = json.loads(out)
    assert found["verdict"]["rule"] == "DA-1" and found["verdict"]["error_type"] == "ValueError"
    assert found["verdict"]["path"] == "args[1]" and found["verdict"]["stage"] == "lower"
    assert found["statements"]["DA-1"] == RULES["DA-1"].statement
    assert found["matches"] is True and found["differences"] == []
    assert found["expected"] == found["verdict"]


def test_check_says_when_the_spec_does_not_match(tmp_path, capsys):
    vector = json.loads(DA_1.read_text())
    vector["expect"] = {"accepted": False, "rule": "RES-4", "error_type": "ValueError"}
    del vector["rule"], vector["side"]
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(vector))
    status, out, _ = run(capsys, "check", path)
    assert status == 1
    assert "The spec DOES NOT match" in out and "rule: expected RES-4, got DA-1" in out


@pytest.mark.parametrize("text,words", [
    ("{not json", "[VEC-1] at (the vector): expected JSON text"),
    ('{"format": "shardlaw-jit-call", "version": 7, "jax": "0.10.2", "call": {}}',
     "[VEC-1] at version: expected a format version this shardlaw reads (1, 2), got 7"),
])
def test_check_refuses_bad_files_without_a_traceback(tmp_path, capsys, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    status, out, err = run(capsys, "check", path)
    assert status == 2 and out == ""
    assert "is not a valid test vector" in err and words in err
    assert "Traceback" not in err


def test_check_of_a_missing_file(capsys):
    status, _, err = run(capsys, "check", "no/such/vector.json")
    assert status == 2 and "no such file" in err


def test_check_needs_no_jax():
    code = ("import sys; from shardlaw.cli import main; "
            f"assert main(['check', {str(DA_1)!r}]) == 0; "
            "assert not any(m == 'jax' or m.startswith('jax.') for m in sys.modules), 'jax loaded'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_vectors_run_reports_failures_per_rule(tmp_path, capsys):
    good = json.loads(DA_1.read_text())
    wrong = dict(good, expect={"accepted": False, "rule": "RES-4", "error_type": "ValueError",
                               "trace": ["RES-4"]})
    del wrong["rule"], wrong["side"]
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    (tmp_path / "broken.json").write_text('{"format": "shardlaw-jit-call"}')
    status, out, _ = run(capsys, "vectors", "run", tmp_path)
    assert status == 1
    assert "3 vector(s) checked: 1 passed, 2 failed (33.3 % conform)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  DA-1")
            or line.startswith("  RES-4")}
    assert rows["DA-1"][1:5] == ["0", "1", "1", "0"]
    assert rows["RES-4"][1:5] == ["0", "1", "0", "1"]
    assert "not a valid vector: [VEC-1]" in out and "rule: expected RES-4, got DA-1" in out


def test_vectors_run_against_no_engine(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "shardlaw.properties.engine_harness", None)
    status, out, err = run(capsys, "vectors", "run", HAND, "--against", "engine")
    assert status == 2 and out == ""
    assert "there is no engine yet" in err and "Traceback" not in err


def test_vectors_run_of_a_missing_directory(capsys):
    status, _, err = run(capsys, "vectors", "run", "no/such/dir")
    assert status == 2 and "no such directory" in err


def test_vectors_generate_writes_a_set_that_conforms(tmp_path, capsys):
    pytest.importorskip("jax")
    status, out, err = run(capsys, "vectors", "generate", tmp_path / "set", "--per-rule", "1",
                           "--budget", "20")
    assert status == 0, out
    # The progress line on stderr: the first state at once, the last when done.
    progress = [line for line in err.splitlines() if line.startswith("vectors generate: ")]
    assert len(progress) >= 2, err
    assert "1 of at most 20 calls drawn" in progress[0]
    assert "of at most 20 calls drawn" in progress[-1] and "rule sides have 1 vector(s)" in \
        progress[-1]
    assert "Wrote " in out and (tmp_path / "set" / "hand").is_dir()
    status, out, _ = run(capsys, "vectors", "run", tmp_path / "set")
    assert status == 0 and "(100.0 % conform)" in out, out
    status, _, err = run(capsys, "vectors", "generate", tmp_path / "set", "--budget", "1")
    assert status == 2 and "already holds" in err


def test_vectors_run_replays_every_committed_folder(capsys):
    """The repository's own vectors, every format (jit calls, programs, call sequences,
    divergence pairs), replay against the spec with nothing failed."""
    status, out, _ = run(capsys, "vectors", "run", ROOT / "vectors")
    assert status == 0, out[-3000:]
    assert " 0 failed (100.0 % conform)" in out
    for rule_id in ("CACHE-3", "EQ-1", "EQ-2", "IDX-1"):
        assert any(line.split()[:1] == [rule_id] for line in out.splitlines()), rule_id


PAIR = ROOT / "vectors" / "equivalence" / "reshaped-mesh.json"
SEQUENCE = ROOT / "vectors" / "cache" / "placement-equal-rewrites.json"


def test_vectors_run_holds_pairs_and_sequences_to_the_spec(tmp_path, capsys):
    pair = json.loads(PAIR.read_text())
    wrong = dict(pair, expect=dict(pair["expect"], jax_equivalent=False))
    broken = dict(pair, shape=[-1])
    sequence = json.loads(SEQUENCE.read_text())
    wrong_sequence = json.loads(SEQUENCE.read_text())
    wrong_sequence["expect_cache"][1]["dispatch"] = "miss"
    for name, data in (("pair", pair), ("wrong", wrong), ("broken", broken),
                       ("sequence", sequence), ("wrong-sequence", wrong_sequence)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    status, out, _ = run(capsys, "vectors", "run", tmp_path)
    assert status == 1
    assert "5 vector(s) checked: 2 passed, 3 failed" in out
    failures = _unwrapped(out.split("Failures")[1])
    assert "wrong.json - jax_equivalent: expected False, the spec says True" in failures
    assert "broken.json - not a valid vector: [VEC-1] at shape" in failures
    assert "wrong-sequence.json" in failures and "pair.json" not in failures.replace(
        "wrong.json", "").replace("broken.json", "")


def test_vectors_run_skips_pairs_and_sequences_in_the_engine(capsys):
    pytest.importorskip("jax")
    status, out, _ = run(capsys, "vectors", "run", SEQUENCE, "--against", "engine")
    assert status == 0 and "1 skipped" in out
    assert "the engine replays jit-call vectors only" in out


def test_check_explains_a_divergence_pair(capsys):
    status, out, _ = run(capsys, "check", PAIR)
    assert status == 0
    assert "mesh=4:x spec=x" in out and "mesh=2x2:x,y spec=(x,y)" in out
    assert "the spec matches" in out
    status, out, _ = run(capsys, "check", PAIR, "--json")
    assert status == 0 and json.loads(out)["matches"] is True


@pytest.mark.parametrize("option, value", [("--budget", "0"), ("--per-rule", "0"),
                                           ("--budget", "-3"), ("--budget", "many")])
def test_vectors_generate_refuses_a_count_below_one_and_leaves_nothing(tmp_path, capsys, option,
                                                                        value):
    target = tmp_path / "out"
    status, out, err = run(capsys, "vectors", "generate", target, option, value)
    assert status == 2 and out == ""
    assert f"argument {option}:" in err and "Traceback" not in err and "internal error" not in err
    assert not target.exists()


def test_vectors_generate_removes_the_directory_it_made_when_it_fails(tmp_path, capsys,
                                                                       monkeypatch):
    pytest.importorskip("jax")
    import shardlaw.properties.vectors_gen as gen

    def broken(directory, *args, **kwargs):
        Path(directory, "hand").mkdir(parents=True)
        raise RuntimeError("a bug")

    monkeypatch.setattr(gen, "generate", broken)
    target = tmp_path / "out"
    status, _, err = run(capsys, "vectors", "generate", target)
    assert status == 70 and "internal error" in err
    assert not target.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    status, _, _ = run(capsys, "vectors", "generate", kept)
    assert status == 70 and kept.is_dir()  # a directory the user made stays


def test_progress_rewrites_one_line_on_a_terminal_and_writes_lines_into_a_log():
    import io

    from shardlaw.cli_progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    now = [0.0]
    log = io.StringIO()
    progress = Progress("work", log, clock=lambda: now[0])
    for step in range(40):
        now[0] = step * 1.0
        progress.update(f"step {step}")
    progress.done("finished")
    lines = log.getvalue().splitlines()
    assert lines == ["work: step 0 (0m00s)", "work: step 15 (0m15s)", "work: step 30 (0m30s)",
                     "work: finished (0m39s)"]
    terminal = Terminal()
    now[0] = 0.0
    progress = Progress("work", terminal, clock=lambda: now[0])
    progress.update("a long state")
    now[0] = 1.0
    progress.update("short")
    progress.done("end")
    assert terminal.getvalue() == ("\rwork: a long state (0m00s)\rwork: short (0m01s)"
                                   + " " * 7 + "\rwork: end (0m01s)  \n")
