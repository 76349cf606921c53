"""``shardlaw upgrade FILE.json``: what changes for each call when upgrading from JAX 0.4.13.

For every jit-call vector in a file (``.json``, ``.jsonl``) or a directory of them, the
spec's verdicts for JAX 0.4.13 and JAX 0.10.2 side by side (:func:`shardlaw.spec.jit.upgrade.upgrade`):
what a user sees change, and the rules of either trace whose variants differ between the
two releases, each with its statement in both. Vectors of other kinds (transformed calls,
whole programs, call sequences) are counted and left out: the 0.4.13 edition answers for
the jit call. Exit status: 0 when no call changes, 1 when some call does, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from shardlaw.cli_errors import CommandExit

__all__ = ["add_parser", "upgrade_command"]


def add_parser(subparsers: Any) -> None:
    """Add ``upgrade`` to the ``shardlaw`` command's subparsers."""
    upgrade = subparsers.add_parser(
        "upgrade", help="what changes for the calls of test vectors from JAX 0.4.13 to 0.10.2",
        description=__doc__.split("\n\n")[1])
    upgrade.add_argument("file", metavar="FILE.json",
                         help="a test vector, a .jsonl file of them, or a directory")
    upgrade.add_argument("--json", action="store_true", help="print a machine-readable object")
    upgrade.add_argument("--changed", action="store_true",
                         help="show only the calls whose verdict changes")
    upgrade.set_defaults(handler=lambda args: upgrade_command(args, sys.stdout))


def _calls(name: str) -> tuple[list[tuple[str, Any]], int, list[str]]:
    """The jit-call vectors' (where, vector), the count of other vectors, and the unreadable."""
    from shardlaw.cli_vectors import read_vectors
    from shardlaw.spec.vectors.jit_vectors import Vector

    path = Path(name)
    if not path.exists():
        raise CommandExit(2, f"{name}: no such file or directory")
    calls, others, bad = [], 0, []
    for entry in read_vectors(path):
        if entry.vector is None and _another_format(entry.where):
            others += 1   # a cache sequence, an equivalence vector: not a call
        elif entry.vector is None:
            bad.append(f"{entry.where}: {entry.error}")
        elif isinstance(entry.vector, Vector):
            calls.append((entry.where, entry.vector))
        else:
            others += 1
    return calls, others, bad


def _another_format(where: str) -> bool:
    """Whether the file at ``where`` is a vector of another format (its "format" names one
    that is not a call's)."""
    try:
        data = json.loads(Path(where).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and isinstance(data.get("format"), str) and \
        data["format"] not in ("shardlaw-jit-call",)


def _statement(rule_id: str, jax: str) -> str:
    from shardlaw.spec.core.rules import RULES
    return RULES[rule_id].in_edition(jax).statement.replace("``", "")


def upgrade_command(args: argparse.Namespace, out: TextIO) -> int:
    from shardlaw.spec.jit.upgrade import upgrade

    calls, others, bad = _calls(args.file)
    if not calls and bad:
        raise CommandExit(2, f"{args.file}: no readable jit-call vector ({bad[0]})")
    rows = []
    for where, vector in calls:
        change = upgrade(vector.call)
        if args.changed and not change.changed:
            continue
        rows.append((where, vector, change))
    changed = sum(1 for _, _, c in rows if c.changed)
    if args.json:
        json.dump({"file": args.file, "calls": len(calls), "changed": changed,
                   "other_vectors": others, "unreadable": bad,
                   "rows": [_row_json(where, change) for where, _, change in rows]}, out,
                  indent=2)
        out.write("\n")
    else:
        for where, _, change in rows:
            _explain(where, change, out)
        out.write(f"{len(calls)} jit call(s): {changed} change from jax 0.4.13 to 0.10.2"
                  + (f"; {others} vector(s) of other kinds left out" if others else "")
                  + (f"; {len(bad)} unreadable" if bad else "") + "\n")
    return 1 if changed else 0


def _said(verdict: Any) -> str:
    if not verdict.accepted:
        return f"refused by {verdict.rule} ({verdict.jax_error})"
    return f"accepted on {verdict.num_devices} device(s)"


def _explain(where: str, change: Any, out: TextIO) -> None:
    w = out.write
    w(f"{where}\n  jax 0.4.13: {_said(change.before)}\n  jax 0.10.2: {_said(change.after)}\n")
    for line in change.changes:
        w(f"  changes: {line}\n")
    if not change.changes:
        w("  nothing a user sees changes\n")
    if change.varying:
        w(f"  rules whose variants differ: {', '.join(change.varying)}\n")
    decided = [r for r in (change.before.rule, change.after.rule) if r in change.varying]
    for rule_id in dict.fromkeys(decided):   # the refusing rule's two statements
        w(f"  {rule_id} in 0.4.13: {_statement(rule_id, '0.4.13')}\n")
        w(f"  {' ' * len(rule_id)} in 0.10.2: {_statement(rule_id, '0.10.2')}\n")
    w("\n")


def _row_json(where: str, change: Any) -> dict:
    from shardlaw.spec.vectors.vector_writer import verdict_json
    return {"vector": where, "changed": change.changed, "changes": list(change.changes),
            "before": {"jax": change.before.jax, **verdict_json(change.before)},
            "after": {"jax": change.after.jax, **verdict_json(change.after)},
            "varying_rules": {r: {"0.4.13": _statement(r, "0.4.13"),
                                  "0.10.2": _statement(r, "0.10.2")}
                              for r in change.varying}}
