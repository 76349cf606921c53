"""The fuzz layer's command lines: ``shardlaw`` run with valid, odd and hostile arguments.

The command line's promise is its own: exit 0, 1 or 3 with its report, or exit 2 with one
line on stderr and no traceback. A case runs in this process (``cli.main(argv)``) or through
the real executable, in a subprocess.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from .fuzz_outcomes import Outcome, classify
from .fuzz_values import vector_files
from .strategies import shardings

__all__ = ["CliCase", "cli_cases", "sharding_words", "run_cli_case", "run_cli_executable",
           "shardlaw_executable"]


def sharding_words() -> st.SearchStrategy[str]:
    """Shardings as ``shardlaw prove`` reads them, valid and mutated."""
    from shardlaw.sharding_text import sharding_text
    valid = shardings(max_devices=8).filter(lambda s: s.is_concrete).map(sharding_text)
    fixed = st.sampled_from([
        "mesh=2x4:x,y spec=x,y", "gspmd:{devices=[2,4]<=[8]}", "single:3",
        "mesh=1048576:x spec=x", "mesh=1024x1024:x,y devices=<=[1024,1024]T(1,0) spec=x,y",
        "mesh=99999999999999999999x2:x,y", "mesh=0:x", "mesh=-2:x", "mesh=2:x,x",
        "mesh=٣:x", "single:-1", "single:99999999999999999999999", "gspmd:{maximal device=٣}",
        "gspmd:{devices=[0]<=[0]}", "gspmd:{replicated} devices=3,1",
        "gspmd:{replicated}", "mesh=2:x devices=1,1", "mesh=2x2:x,y spec=(x,y,z)",
        '{"type": "NamedSharding"}', "{" * 3000, '{"a": ' * 1500 + "1" + "}" * 1500,
        "mesh=2:x memory=bogus", "mesh=2:x types=weird", "mesh=", "", " ", "\x00",
        "mesh=2:x devices=<=[2]T(0,0)", "mesh=4:x devices=<=[2,2]T(1)",
    ])

    def mutate(text: str, data: Any) -> str:
        if not data.draw(st.integers(0, 2)) or not text:
            return text
        i = data.draw(st.integers(0, len(text)))
        return text[:i] + data.draw(st.sampled_from(list(" =:,x()_{}٣-9"))) + text[i + 1:]
    return st.builds(mutate, st.one_of(valid, fixed), st.data())


@dataclasses.dataclass
class CliCase:
    """One run of the command line: its argv, and the files it names (path -> bytes)."""

    argv: list[str]
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        files = {k: (v[:80] + b"..." if len(v) > 80 else v) for k, v in self.files.items()}
        return f"shardlaw {' '.join(a[:100] for a in self.argv)}  files={files}"


_ODD_ARGS = ["", "-", "--", "-x", "--nope", "\x00", "٣", "x" * 5000, "--json", "-h",
             "--version", "inf", "nan", "-1", "1e999", "99999999999999999999999"]


@st.composite
def cli_cases(draw: Any) -> CliCase:
    """argv for ``shardlaw``: each command with valid, odd and hostile arguments and files."""
    command = draw(st.sampled_from(["rules", "check", "check", "vectors", "prove", "prove",
                                    "prove", "odd", "demo"]))
    if command == "odd":
        return CliCase(draw(st.lists(st.sampled_from(_ODD_ARGS + ["rules", "check", "prove",
                                                                  "vectors", "run"]),
                                     max_size=4)))
    if command in ("rules", "demo"):
        return CliCase([command] + draw(st.lists(st.sampled_from(_ODD_ARGS), max_size=1)))
    if command in ("check", "vectors"):
        name, text = draw(vector_files())
        where = draw(st.sampled_from(["FILE", "FILE", "FILE", "MISSING", "DIR", "BINARY"]))
        files: dict[str, bytes] = {}
        if where == "FILE":
            files["FILE"] = text.encode("utf-8")
            path = "FILE"
        elif where == "BINARY":
            files["FILE"] = b"\xff\xfe\x00{" + os.urandom(8)
            path = "FILE"
        elif where == "DIR":
            path = "DIR"
        else:
            path = "MISSING/none.json"
        argv = ["check", path] if command == "check" else ["vectors", "run", path]
        if command == "check" and draw(st.booleans()):
            argv.append("--json")
        if draw(st.integers(0, 5)) == 0:
            argv.append(draw(st.sampled_from(_ODD_ARGS + ["--against", "--against=spec"])))
        return CliCase(argv, files)
    a, b = draw(sharding_words()), draw(sharding_words())
    argv = ["prove", a, b]
    if draw(st.integers(0, 4)):
        argv += ["--shape", draw(st.one_of(
            st.lists(st.sampled_from(["0", "1", "2", "4", "8", "16"]), max_size=3).map(",".join),
            st.sampled_from(["8,8", "x", "-1", "٣", "99999999999999999999", "2" * 50, "",
                             "8,,8", "1e3"])))]
    else:
        argv += ["--rank", draw(st.sampled_from(["1", "2", "0", "-1", "x", "999999999",
                                                 "99999999999999999999", "1e3"])),
                 "--max-dim", draw(st.sampled_from(["8", "64", "0", "-4", "y",
                                                    "99999999999999999999"]))]
    argv += ["--timeout", draw(st.sampled_from(["0.5", "1", "0.2", "inf", "nan", "-1", "0",
                                                "1e308", "x", "-inf"]))]
    if draw(st.integers(0, 5)) == 0:
        argv += ["--svg", draw(st.sampled_from(["OUT.svg", "MISSING/out.svg", "DIR", "/"]))]
    if draw(st.booleans()):
        argv.append("--json")
    return CliCase(argv)


def _materialize(case: CliCase, root: Path) -> list[str]:
    """Write the case's files under ``root``; argv with FILE, DIR, ... made paths there."""
    (root / "DIR").mkdir(exist_ok=True)
    for name, content in case.files.items():
        (root / name).write_bytes(content)
    out = []
    for a in case.argv:
        for token in ("MISSING/", "FILE", "DIR", "OUT.svg"):
            if a.startswith(token):
                a = str(root / a)
                break
        out.append(a)
    return out


_SAID_RULE = re.compile(r"\[([A-Z]+(?:-[A-Z]+)*-[0-9]+)\]")


def check_exit(status: Any, err: str, out: str) -> Outcome:
    """The command line's promise: 0, 1 or 3 with a report, or 2 with one line on stderr."""
    if "Traceback" in err or "Traceback" in out:
        return Outcome("traceback", err.strip().splitlines()[-1][:200] if err.strip() else "")
    if status == 70:  # shardlaw.cli's internal error: a bare exception, said on one line
        return Outcome("bare", err.strip()[:300])
    if status not in (0, 1, 2, 3):
        return Outcome("bad-exit", f"exit status {status!r}")
    lines = [line for line in err.splitlines() if line.strip()]
    if status == 2 and len(lines) != 1:
        return Outcome("bad-exit", f"exit 2 with {len(lines)} lines on stderr: {err[:200]!r}")
    if status == 2:
        said = _SAID_RULE.search(lines[0])
        return Outcome("rejected", said[1] if said else "(usage)")
    return Outcome("value", f"exit {status}")


def run_cli_case(case: CliCase, limit_s: float = 30.0) -> Outcome:
    """``shardlaw.cli.main(argv)`` in this process, its output captured."""
    from shardlaw import cli
    with tempfile.TemporaryDirectory() as root:
        argv = _materialize(case, Path(root))
        out, err = io.StringIO(), io.StringIO()
        status: list[Any] = [None]

        def run() -> None:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    status[0] = cli.main(argv)
                except SystemExit as stop:  # argparse's own exits (--help, --version)
                    status[0] = stop.code if stop.code is not None else 0
        outcome = classify(run, limit_s)
        if outcome.kind != "value":
            return outcome
        checked = check_exit(status[0], err.getvalue(), out.getvalue())
        return dataclasses.replace(checked, seconds=outcome.seconds)


def shardlaw_executable() -> list[str]:
    """How to start the installed command (the script next to this Python, or the module)."""
    script = Path(sys.executable).parent / "shardlaw"
    return [str(script)] if script.exists() else [sys.executable, "-m", "shardlaw.cli"]


def run_cli_executable(case: CliCase, limit_s: float = 60.0) -> Outcome:
    """The same case through the real ``shardlaw`` executable, in a subprocess."""
    with tempfile.TemporaryDirectory() as root:
        # An argument reaches a real process as a C string: it ends at its first NUL.
        argv = [a.split("\x00")[0] for a in _materialize(case, Path(root))]
        start = time.perf_counter()
        try:
            done = subprocess.run(shardlaw_executable() + argv, capture_output=True,
                                  timeout=limit_s, cwd=root)
        except subprocess.TimeoutExpired:
            return Outcome("hang", f"more than {limit_s:g} s", time.perf_counter() - start)
        seconds = time.perf_counter() - start
        if done.returncode < 0:
            return Outcome("crash", f"signal {-done.returncode}", seconds)
        err = done.stderr.decode("utf-8", "replace")
        out = done.stdout.decode("utf-8", "replace")
        return dataclasses.replace(check_exit(done.returncode, err, out), seconds=seconds)
