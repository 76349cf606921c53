"""``shardlaw check`` and ``shardlaw vectors run`` for transformed-call vectors
(``"format": "shardlaw-transformed-call"``, docs/vectors.rst): the verdict of the spec
function the vector names, its trace with each rule's statement, and whether it matches
the expected verdict; replay against the spec or, through the families' harnesses, against
real JAX. Exit codes as for jit-call vectors.
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from typing import Any, TextIO

__all__ = ["is_transformed_text", "load_piece", "check_transformed", "replay_transformed",
           "hits_of", "generate_transformed", "migrate_transformed"]

_FORMAT = re.compile(r'"format"\s*:\s*"shardlaw-transformed-call"')


def is_transformed_text(text: str) -> bool:
    """Whether JSON text says it is a transformed-call vector."""
    return _FORMAT.search(text) is not None


def load_piece(text: str) -> Any:
    """The vector in ``text``: a program vector, a transformed-call vector or a jit-call
    vector (VEC-1)."""
    from shardlaw.cli_program_vectors import is_program_text
    from shardlaw.spec.vectors.jit_vectors import load_vector
    from shardlaw.spec.vectors.program_vectors import load_program
    from shardlaw.spec.vectors.transformed_vectors import load_transformed
    if is_program_text(text):
        return load_program(text)
    return load_transformed(text) if is_transformed_text(text) else load_vector(text)


def _statement(rule_id: str) -> str:
    from shardlaw.spec import RULES
    rule = RULES.get(rule_id)
    return rule.statement.replace("``", "") if rule is not None else "(not a registered rule)"


def _differences(vector: Any, verdict: Any) -> list[str] | None:
    from shardlaw.spec.vectors.transformed_vectors import transformed_differences
    from shardlaw.spec.vectors.vector_checks import JAX_VERSION
    if vector.expect is None:
        return None
    if vector.jax != JAX_VERSION:
        return [f"the vector describes jax {vector.jax}; the spec describes jax {JAX_VERSION}"]
    return transformed_differences(vector.expect, verdict)


def _short(value: Any, width: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 20] + f" ... ({len(text)} characters)"


def _fill(text: str, indent: str, hang: str | None = None) -> str:
    return textwrap.fill(text, 100, initial_indent=indent,
                         subsequent_indent=hang if hang is not None else indent,
                         break_long_words=False, break_on_hyphens=False)


def _explain(file: str, vector: Any, verdict: Any, differences: list[str] | None,
             out: TextIO) -> None:
    w = out.write
    call = vector.call
    w(f"{file}: the transformed call {call.transform}(...)"
      + (f" ({vector.name})" if vector.name else "") + "\n")
    for name, value in call.arguments:
        w(_fill(f"{name} = {_short(value)}", "  ", "      ") + "\n")
    if vector.compared_with:
        w(_fill(f"Compared with real JAX: {vector.compared_with}.", "  ") + "\n")
    w("\n")
    if verdict.accepted:
        w("The spec answers:\n" + _fill(_short(verdict.result, 2000), "  ") + "\n")
    else:
        w(_fill(f"Refused by {verdict.rule}: {_statement(verdict.rule)}", "", "  ") + "\n")
        w(f"  JAX raises {verdict.error_type} ({verdict.jax_error})"
          + (f" at {verdict.path}" if verdict.path else "") + ".\n")
        w(_fill(verdict.message or "", "  ") + "\n")
    w("\nThe rules that fired, in order:\n")
    for rule_id in verdict.trace:
        w(_fill(f"{rule_id}  {_statement(rule_id)}", "  ", " " * (4 + len(rule_id))) + "\n")
    if differences is not None:
        w("\nExpected by the vector: " + ("the spec matches." if not differences else
                                          "the spec differs:\n  " + "\n  ".join(differences))
          + "\n")


def check_transformed(args: argparse.Namespace, vector: Any, out: TextIO) -> int:
    """``shardlaw check FILE`` of a transformed-call vector (0 matches, 1 differs)."""
    from shardlaw.spec.vectors.transformed_vectors import _verdict_json
    from shardlaw.spec.transforms.transformed import explain_transformed
    verdict = explain_transformed(vector.call)
    differences = _differences(vector, verdict)
    if args.json:
        fired = list(dict.fromkeys([*verdict.trace, *([verdict.rule] if verdict.rule else [])]))
        json.dump({
            "file": args.file,
            "vector": {"name": vector.name, "rule": vector.rule, "side": vector.side,
                       "jax": vector.jax, "description": vector.description,
                       "transform": vector.call.transform},
            "verdict": _verdict_json(verdict),
            "statements": {r: _statement(r) for r in fired},
            "expected": None if vector.expect is None else _verdict_json(vector.expect),
            "matches": None if differences is None else not differences,
            "differences": differences or [],
        }, out, indent=2)
        out.write("\n")
    else:
        _explain(args.file, vector, verdict, differences, out)
    return 1 if differences else 0


def replay_transformed(against: str, vector: Any) -> list[str] | None:
    """The differences of a transformed-call vector replayed against the spec or JAX
    (``engine``: the engine replays jit calls only; the caller skips it)."""
    from shardlaw.spec.transforms.transformed import explain_transformed
    if against == "spec":
        return _differences(vector, explain_transformed(vector.call))
    from shardlaw.properties.transform_vectors_gen import replay_in_jax
    return replay_in_jax(vector)


def hits_of(vector: Any) -> list[tuple[str, str]]:
    from shardlaw.spec.vectors.transformed_vectors import transformed_rules_hit
    return transformed_rules_hit(vector)


def generate_transformed(args: argparse.Namespace, out: TextIO) -> int:
    """``shardlaw vectors generate DIR --transformed``: the transformed-call vectors of
    :mod:`shardlaw.properties.transform_vectors_gen` (0 written, 1 JAX and the spec
    disagreed on a case, 2 bad input)."""
    from pathlib import Path

    from shardlaw.cli_errors import CommandExit
    try:
        import jax
        from shardlaw.properties.transform_vectors_gen import FAMILIES, generate
    except ImportError as error:
        raise CommandExit(2, f"generating vectors needs JAX and Hypothesis ({error}); install "
                             "shardlaw with the [dev] extra") from None
    budget = 1000 if args.budget is None else args.budget
    if budget < 1:
        raise CommandExit(2, "--budget must be at least 1")
    old = sorted(p for f in FAMILIES for p in Path(args.directory).glob(f"{f}/*.json"))
    if old and not args.replace:
        raise CommandExit(2, f"{args.directory} already holds {len(old)} transformed-call "
                             "vectors (use --replace)")
    for path in old:
        path.unlink()
    jax.config.update("jax_num_cpu_devices", 8)
    report = generate(args.directory, args.per_rule, budget)
    out.write(f"Wrote {sum(report.written.values())} transformed-call vector(s) into "
              f"{args.directory} ({report.cases} cases run in JAX)\n")
    for (family, rule_id, side), n in sorted(report.written.items()):
        out.write(f"  {family:<10} {rule_id:<8} {side:<14} {n}\n")
    if report.disagreements:
        out.write(f"\nJAX and the spec disagreed on {len(report.disagreements)} case(s) "
                  "(not written):\n")
        for line in report.disagreements[:10]:
            out.write(_fill(line[:600], "  - ", "    ") + "\n")
    return 1 if report.disagreements else 0


def migrate_transformed(args: argparse.Namespace, out: TextIO) -> int:
    """``shardlaw vectors migrate SRC DST``: each transformed-call vector under SRC whose
    question has a whole-program form written as a program vector under DST/<family>/ (its
    expected verdict the program path's) when the program path, asked the question, gives
    the old vector's expected answer; the ones it answers otherwise listed as disagreements
    (not written); the others counted per transform with the reason they stay
    per-equation (0 none differ, 1 some differ, 2 bad input)."""
    import collections
    from pathlib import Path

    from shardlaw.cli_errors import CommandExit
    from shardlaw.spec.core.rules import Rejection
    from shardlaw.spec.vectors.jit_vectors import vector_text
    from shardlaw.spec.vectors.transformed_migration import (
        NoProgramForm, ask_program, migrate_vector, old_differences,
    )
    from shardlaw.spec.vectors.transformed_vectors import load_transformed
    source, target = Path(args.source), Path(args.target)
    files = sorted(source.rglob("*.json")) if source.is_dir() else [source]
    vectors = [(p, load_transformed(p.read_text())) for p in files
               if is_transformed_text(p.read_text())]
    if not vectors:
        raise CommandExit(2, f"{source} holds no transformed-call vectors")
    old = sorted(target.rglob("*.json")) if target.is_dir() else []
    if old and not args.replace:
        raise CommandExit(2, f"{target} already holds {len(old)} vector(s) (use --replace)")
    for path in old:
        path.unlink()
    written, kept, differ = 0, collections.Counter(), []
    for path, vector in vectors:
        try:
            document = migrate_vector(vector)
        except (NoProgramForm, Rejection) as why:
            kept[vector.call.transform, str(why)] += 1
            continue
        try:
            answer = None if vector.expect is None else ask_program(vector.call)
        except NoProgramForm as why:  # an answer the program form cannot read back
            kept[vector.call.transform, str(why)] += 1
            continue
        if answer is not None:
            problems = old_differences(vector.expect, answer)
            if problems:  # not written: the program path's answer is not the old one
                differ.append(f"{vector.name}: " + "; ".join(problems))
                continue
        where = target / path.parent.name / path.name
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(vector_text(document))
        written += 1
    out.write(f"Migrated {written} of {len(vectors)} transformed-call vector(s) into "
              f"{target}; {sum(kept.values())} have no program to migrate (below, why); "
              f"{len(differ)} "
              f"disagreement(s) with their old expectations (not written)\n")
    for (transform, why), n in sorted(kept.items()):
        out.write(_fill(f"{transform} ({n}): {why}", "  ", "    ") + "\n")
    for line in differ[:20]:
        out.write(_fill(line[:600], "  - ", "    ") + "\n")
    return 1 if differ else 0
