"""``shardlaw check``, ``shardlaw vectors run`` and ``shardlaw vectors generate --programs``
for program vectors (``"format": "shardlaw-program"``, docs/vectors.rst): the spec's verdict
on the whole program (after the transformations the vector asks the spec to apply), the
rules that fired with their statements, and whether it matches the expected verdict;
replay against the spec or, for a program as written, against real JAX. Exit codes as for
jit-call vectors.
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from typing import Any, TextIO

__all__ = ["is_program_text", "is_program_vector", "check_program_vector",
           "communication_json", "communication_text",
           "replay_program_vector", "program_hits", "generate_programs"]

_FORMAT = re.compile(r'"format"\s*:\s*"shardlaw-program"')


def is_program_text(text: str) -> bool:
    """Whether JSON text says it is a program vector."""
    return _FORMAT.search(text) is not None


def is_program_vector(vector: Any) -> bool:
    from shardlaw.spec.vectors.program_vectors import ProgramVector
    return isinstance(vector, ProgramVector)


def _statement(rule_id: str) -> str:
    from shardlaw.cli_text import plain_text
    from shardlaw.spec import RULES
    rule = RULES.get(rule_id)
    return plain_text(rule.statement) if rule is not None else "(not a registered rule)"


def _fill(text: str, indent: str, hang: str | None = None) -> str:
    return textwrap.fill(text, 100, initial_indent=indent,
                         subsequent_indent=hang if hang is not None else indent,
                         break_long_words=False, break_on_hyphens=False)


def _differences(vector: Any, verdict: Any) -> list[str] | None:
    from shardlaw.spec.vectors.program_vectors import program_differences
    from shardlaw.spec.vectors.vector_checks import JAX_VERSION
    if vector.expect is None:
        return None
    if vector.jax != JAX_VERSION:
        return [f"the vector describes jax {vector.jax}; the spec describes jax {JAX_VERSION}"]
    return program_differences(vector, verdict)


def communication_json(step: Any) -> dict | None:
    """What a step communicates (``verdict.collectives``), as JSON (None: not asked)."""
    if step is None:
        return None
    return {"backend": step.backend, "complete": step.complete,
            "why": None if step.complete else str(step.undetermined),
            "bytes_per_device": step.bytes_per_device, "bytes_per_run": step.bytes_per_run,
            "collectives": [{"kind": c.kind, "axes": list(c.axes), "path": c.path,
                             "operand": c.operand, "shape": list(c.shape), "dtype": c.dtype,
                             "bytes_per_device": c.bytes_per_device, "trips": c.trips,
                             "replica_groups": None if c.replica_groups is None or
                             len(c.replica_groups.mesh.devices) > 64 else
                             [list(g) for g in c.replica_groups.groups()]}
                            for c in step]}


def communication_text(step: Any) -> str:
    """What a step communicates, for the terminal: each collective, the total per device,
    and why the list is incomplete where it is (COLL-1 to COLL-10)."""
    if step is None:
        return ""
    lines = [f"\nThe step communicates (on the {step.backend} backend; COLL-1 to COLL-10):"]
    for c in step:
        groups = "" if c.replica_groups is None or len(c.replica_groups.mesh.devices) > 64 \
            else f", groups {[list(g) for g in c.replica_groups.groups()]}"
        lines.append(f"  {c}{groups}")
    total = step.bytes_per_device
    lines.append((f"  {total} bytes per device in all" if total is not None else
                  f"  {step.bytes_per_run} bytes per device, each collective run once (the "
                  f"data decide how often a loop's or a branch's runs)")
                 + ("" if step.complete else " so far"))
    if not step.complete:
        lines.append(_fill(f"incomplete: {step.undetermined}", "  ", "    "))
    return "\n".join(lines) + "\n"


def check_program_vector(args: argparse.Namespace, vector: Any, out: TextIO) -> int:
    """``shardlaw check FILE`` of a program vector (0 matches, 1 differs)."""
    from shardlaw.spec.vectors.program_vectors import replay_program
    verdict = replay_program(vector)
    differences = _differences(vector, verdict)
    fired = list(dict.fromkeys([*verdict.trace, *([verdict.rule] if verdict.rule else [])]))
    if args.json:
        json.dump({
            "file": args.file,
            "vector": {"name": vector.name, "rule": vector.rule, "side": vector.side,
                       "jax": vector.jax, "description": vector.description,
                       "transforms": [name for name, _ in vector.transforms],
                       "until": vector.until},
            "verdict": {"accepted": verdict.accepted, "rule": verdict.rule,
                        "stage": verdict.stage, "path": verdict.path,
                        "message": verdict.message, "text": str(verdict),
                        "trace": list(verdict.trace)},
            "collectives": communication_json(verdict.collectives),
            "statements": {r: _statement(r) for r in fired},
            "matches": None if differences is None else not differences,
            "differences": differences or [],
        }, out, indent=2)
        out.write("\n")
        return 1 if differences else 0
    w = out.write
    program = vector.program
    w(f"{args.file}: a program of {len(program.inputs)} input(s) and "
      f"{len(program.equations)} equation(s)" + (f" ({vector.name})" if vector.name else "")
      + "\n")
    for name, arguments in vector.transforms:
        w(_fill(f"under {name}({', '.join(f'{k}={v!r}' for k, v in arguments)})", "  ") + "\n")
    w(f"  asked until: {vector.until}\n\nThe spec answers:\n")
    w("\n".join("  " + line for line in str(verdict).splitlines()) + "\n")
    w(communication_text(verdict.collectives))
    w("\nThe rules that fired, in order:\n")
    for rule_id in fired:
        w(_fill(f"{rule_id}  {_statement(rule_id)}", "  ", " " * (4 + len(rule_id))) + "\n")
    if differences is not None:
        w("\nExpected by the vector: " + ("the spec matches." if not differences else
                                          "the spec differs:\n  " + "\n  ".join(differences))
          + "\n")
    return 1 if differences else 0


def replay_program_vector(against: str, vector: Any) -> list[str] | None:
    """The differences of a program vector replayed against the spec or real JAX (the
    engine is not asked about programs by vectors yet: the caller skips it)."""
    if against == "spec":
        return _differences(vector, None) if vector.expect is None else \
            _differences(vector, _replayed(vector))
    from shardlaw.properties.program_vectors_gen import replay_program_in_jax
    return replay_program_in_jax(vector)


def _replayed(vector: Any) -> Any:
    from shardlaw.spec.vectors.program_vectors import replay_program
    return replay_program(vector)


def program_hits(vector: Any) -> list[tuple[str, str]]:
    """The (rule, side) pairs a program vector's expected verdict holds."""
    expect = vector.expect
    if expect is None:
        return []
    pairs = [(r, "accept") for r in expect.get("trace", ()) if r != expect.get("rule")]
    if not expect["accepted"]:
        pairs.append((expect["rule"], "reject"))
    return pairs


def generate_programs(args: argparse.Namespace, out: TextIO) -> int:
    """``shardlaw vectors generate DIR --programs``: program vectors drawn and held to
    real JAX, under DIR/programs/RULE/ and, their bodies run inside control flow, remat or a
    custom-derivative function, under DIR/programs-flow/KIND/ (one a side of each rule a
    kind reaches, from 700 drawn whatever ``--budget`` says) (0 written, 2 bad input)."""
    from pathlib import Path

    from shardlaw.cli_errors import CommandExit
    try:
        import jax
        from shardlaw.properties.program_vectors_gen import (
            FLOW_DIRECTORY, PROGRAM_DIRECTORY, generate_flow_vectors, generate_program_vectors,
        )
    except ImportError as error:
        raise CommandExit(2, f"generating vectors needs JAX and Hypothesis ({error}); install "
                             "shardlaw with the [dev] extra") from None
    budget = 300 if args.budget is None else args.budget
    if budget < 1:
        raise CommandExit(2, "--budget must be at least 1")
    old = [path for folder in (PROGRAM_DIRECTORY, FLOW_DIRECTORY)
           for path in sorted((Path(args.directory) / folder).rglob("*.json"))]
    if old and not args.replace:
        raise CommandExit(2, f"{args.directory} already holds {len(old)} program vectors "
                             "(use --replace)")
    for path in old:
        path.unlink()
    jax.config.update("jax_num_cpu_devices", 8)
    written = generate_program_vectors(args.directory, args.per_rule, seed=args.seed,
                                       budget=budget)
    out.write(f"Wrote {sum(written.values())} program vector(s) into "
              f"{Path(args.directory) / PROGRAM_DIRECTORY}\n")
    for (rule_id, side), n in sorted(written.items()):
        out.write(f"  {rule_id:<8} {side:<7} {n}\n")
    flows = generate_flow_vectors(args.directory, seed=args.seed)   # (700 drawn, always)
    out.write(f"Wrote {sum(flows.values())} control-flow program vector(s) into "
              f"{Path(args.directory) / FLOW_DIRECTORY}\n")
    for (kind, rule_id, side), n in sorted(flows.items()):
        out.write(f"  {kind:<11} {rule_id:<8} {side:<7} {n}\n")
    return 0
