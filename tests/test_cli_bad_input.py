"""The command line's one error path (issue 13): exit 2 and one line on stderr for bad
input, never a traceback; a closed pipe ends the command quietly; a bug says so on one line.
Each test pins a class the fuzz campaign found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardlaw.cli import main

ROOT = Path(__file__).resolve().parents[1]
DA_1 = ROOT / "vectors" / "jit" / "hand" / "da-1-argument-on-another-device.json"
MESH = "mesh=2x4:x,y"


def _one_line_exit_2(capsys, *argv, shows: str = "") -> str:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert status == 2, (status, captured.err)
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.strip(), captured.err
    assert "Traceback" not in captured.err
    assert shows in captured.err, captured.err
    return captured.err


@pytest.mark.parametrize("depth", [1000, 100_000])
@pytest.mark.parametrize("command", [["check"], ["check", "--json"], ["vectors", "run"]])
def test_deeply_nested_json(tmp_path, capsys, depth, command):
    path = tmp_path / "deep.json"
    path.write_text("[" * depth + "]" * depth)
    if command[0] == "vectors":
        status = main(["vectors", "run", str(path)])
        captured = capsys.readouterr()
        # vectors run reports the file as not valid, in its table, and fails the run
        assert status == 1 and "nests too deep" in captured.out and not captured.err
    else:
        _one_line_exit_2(capsys, command[0], path, *command[1:], shows="nests too deep")


def test_a_deep_sharding_in_prove(capsys):
    deep = '{"a": ' * 2000 + "1" + "}" * 2000
    _one_line_exit_2(capsys, "prove", deep, f"{MESH} spec=x", "--shape", "8",
                     shows="nests too deep")


def test_a_number_of_5000_digits_in_a_vector(tmp_path, capsys):
    path = tmp_path / "digits.json"
    path.write_text("9" * 5000)
    # refused by the vector reader before Python converts it (more than 4,300 digits raise)
    _one_line_exit_2(capsys, "check", path, shows="[VEC-1] at (the vector): expected JSON "
                                                  "integers of at most 100 digits")


def test_unreadable_files(tmp_path, capsys):
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00{garbage")
    _one_line_exit_2(capsys, "check", binary, shows="cannot read it")
    _one_line_exit_2(capsys, "check", tmp_path, shows="no such file")
    _one_line_exit_2(capsys, "vectors", "run", tmp_path / "missing", shows="no such directory")


@pytest.mark.parametrize("argv, shows", [
    (["mesh=99999999999999999999x2:x,y", f"{MESH} spec=x", "--shape", "8"], "[VAL-1]"),
    (["mesh=1099511627776x1099511627776:x,y", f"{MESH} spec=x", "--shape", "8"],
     "[VAL-1]"),
    (["mesh=\u0663:x", f"{MESH} spec=x", "--shape", "8"], "cannot read A"),
    (["gspmd:{maximal device=\u0663}", f"{MESH} spec=x", "--shape", "8"], "[HLO-2]"),
    ([f"{MESH} spec=x", f"{MESH} spec=x", "--shape", "8", "--timeout", "inf"], "[SMT-1]"),
    ([f"{MESH} spec=x", f"{MESH} spec=x", "--shape", "8", "--timeout", "nan"], "[SMT-1]"),
    ([f"{MESH} spec=x", f"{MESH} spec=x", "--shape", "8", "--timeout", "-1"], "[SMT-1]"),
    ([f"{MESH} spec=x", f"{MESH} spec=x", "--rank", "999999999", "--max-dim", "8"], "[SMT-2]"),
    ([f"{MESH} spec=x", f"{MESH} spec=x", "--rank", "99999999999999999999", "--max-dim", "8"],
     "[VAL-1]"),
    ([f"{MESH} spec=x", f"{MESH} spec=x", "--shape", "8", "--svg", "no/such/dir/out.svg"],
     "no such directory"),
    ([f"{MESH} spec=x", f"{MESH} spec=x", "--shape", "8", "--svg", "."], "is a directory"),
])
def test_prove_refuses_on_one_line(capsys, argv, shows):
    pytest.importorskip("z3")
    _one_line_exit_2(capsys, "prove", *argv, shows=shows)


def _closed_pipe(*argv: str) -> subprocess.CompletedProcess:
    """Run the command with stdout a pipe nobody reads any more (``| head`` once done)."""
    read, write = os.pipe()
    os.close(read)  # every write now fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "shardlaw.cli", *argv], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    return done


@pytest.mark.parametrize("argv", [["rules"], ["demo"], ["check", str(DA_1)]])
def test_a_closed_pipe_ends_the_command_quietly(argv):
    done = _closed_pipe(*argv)
    assert done.stderr == "", done.stderr  # no BrokenPipeError, no traceback
    assert done.returncode == 141  # as a tool that SIGPIPE ends


def test_a_bug_is_one_line_with_status_70(capsys, monkeypatch):
    import shardlaw.cli as cli

    def broken(*arguments):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(cli, "list_rules", broken)
    assert main(["rules"]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" in err and "ZeroDivisionError" in err
    monkeypatch.setenv("SHARDLAW_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        main(["rules"])


def test_the_installed_command_imports_no_test_tools():
    """A plain install (no extras) runs rules and check: the CLI loads neither Hypothesis,
    pytest, the property suites nor JAX for them (issue 12, item 6)."""
    code = ("import sys; from shardlaw.cli import main; "
            f"assert main(['rules']) == 0; assert main(['check', {str(DA_1)!r}]) == 0; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('hypothesis', 'pytest', 'jax', 'z3') or m.startswith('shardlaw.properties')]; "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


# The fuzz harness runs the command line in-process (cli.main(argv)): it tests the CLI.
CLI_TESTERS = {"properties/fuzz_cli.py"}


def test_no_module_imports_the_command_line():
    """The CLI imports the library; nothing in the library imports the CLI back."""
    import re
    imports_cli = re.compile(r"^\s*(from shardlaw(\.cli\w*)? import .*\bcli|"
                             r"from shardlaw\.cli\w* import|import shardlaw\.cli)", re.M)
    for folder in ("spec", "engine", "properties"):
        for path in (ROOT / folder).rglob("*.py"):
            name = str(path.relative_to(ROOT))
            found = imports_cli.search(path.read_text(encoding="utf-8"))
            assert (found is None) or name in CLI_TESTERS, f"{name} imports the CLI: {found[0]}"
