"""The ``shardlaw`` command: the demo, the rule list, the version, bad arguments."""

import re
import subprocess
import sys

import pytest

import shardlaw
from shardlaw.cli import main
from shardlaw.cli_text import plain_text
from shardlaw.spec import RULES


def run(capsys, *argv):
    status = main(list(argv))
    return status, capsys.readouterr().out


def test_demo_prints_the_blocks_the_hlo_and_both_verdicts(capsys):
    status, out = run(capsys, "demo")
    assert status == 0
    # the block table of P('x', 'y') on the 2x4 mesh: rows 0:4 on devices 0..3
    assert "cols 0:2  cols 2:4  cols 4:6  cols 6:8" in out
    assert "rows 0:4  0         1         2         3" in out
    assert "Per-device boxes" in out
    assert "{devices=[2,4]<=[8]}" in out and "{devices=[4,2]<=[2,4]T(1,0)}" in out
    assert "JAX-equivalent:       yes" in out and "JAX-equivalent:       no" in out
    assert "placement-equivalent: yes" in out and "placement-equivalent: no" in out
    # a pair where the two notions part, and why
    assert "=> the two notions part here." in out
    assert "the ordered device lists differ" in out


def test_demo_needs_no_jax():
    code = ("import sys; from shardlaw.cli import main; main(['demo']); "
            "assert not any(m == 'jax' or m.startswith('jax.') for m in sys.modules), 'jax loaded'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_rules_lists_every_rule(capsys):
    status, out = run(capsys, "rules")
    assert status == 0
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert listed == set(RULES)
    for rule in RULES.values():
        assert plain_text(rule.statement) in out


def test_rules_prints_plain_text_not_rest(capsys):
    """The statements are reST for the docs; the terminal gets their words."""
    marked = [r for r in RULES.values() if "``" in r.statement or ":`" in r.statement]
    assert len(marked) > 10   # the markup this test is about is there to remove
    _, out = run(capsys, "rules")
    assert "``" not in out and not re.search(r":[a-z]+:`", out)
    wsc = next(line for line in out.splitlines() if line.startswith("WSC-0 "))
    assert "a pytree of Arg leaves" in wsc


def test_plain_text_of_roles_and_literals():
    assert plain_text(":func:`~shardlaw.spec.jit_call` and :class:`Arg`") == "jit_call and Arg"
    assert plain_text(":py:class:`x.Mesh` ``P('x')``") == "x.Mesh P('x')"
    assert plain_text(":doc:`the cache <cache>` of 2**63 - 1") == "the cache of 2**63 - 1"


@pytest.mark.parametrize("asked, family", [(["--family", "EQ"], "EQ"),
                                           (["--family", "smap"], "SMAP")])
def test_rules_of_one_family(capsys, asked, family):
    status, out = run(capsys, "rules", *asked)
    assert status == 0
    listed = [line.split()[0] for line in out.splitlines()]
    assert listed == [r for r in RULES if r.rsplit("-", 1)[0] == family]
    status, out = run(capsys, "rules", "--family", "EQ", "--family", "DIV")
    assert {line.split()[0].split("-")[0] for line in out.splitlines()} == {"EQ", "DIV"}


def test_rules_of_an_unknown_family(capsys):
    assert main(["rules", "--family", "nope"]) == 2
    err = capsys.readouterr().err
    assert "argument --family: 'nope' is not a rule family; the families are VAL, " in err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert shardlaw.__version__ in capsys.readouterr().out


@pytest.mark.parametrize("argv, shows", [
    (["bogus"], "invalid choice: 'bogus'"),
    ([], "the following arguments are required: COMMAND"),
    (["demo", "--nope"], "unrecognized arguments: --nope"),
    (["prove", "a"], "shardlaw prove: error: the following arguments are required: B"),
    (["prove", "a", "b", "--timeout", "x"], "invalid float value: 'x'"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, argv, shows):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and shows in captured.err, captured.err
    assert captured.err.endswith("--help)\n") and "Traceback" not in captured.err


def test_module_entry_point():
    done = subprocess.run([sys.executable, "-m", "shardlaw.cli", "rules"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "EQ-2" in done.stdout
