"""``shardlaw check`` and ``shardlaw vectors``: explain one test vector, replay or write many.

``shardlaw check FILE.json`` reads a vector (docs/vectors.rst), asks the spec for the
verdict and explains it as a JAX user would want to read it: where the program runs and
how each input and result is placed, or which error JAX raises, at which stage, and the
rules that led there. ``shardlaw vectors run DIR --against spec|jax|engine`` replays every
vector under DIR and reports conformance per rule; ``shardlaw vectors generate DIR`` writes
a new set from Hypothesis calls checked against real JAX.

Exit status: 0 when everything conforms, 1 when a verdict differs from the expected one,
2 for bad input (a file that is not a valid vector, a missing directory, no engine), 3 when
the spec itself failed on a call (a bug in shardlaw).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator, TextIO

from shardlaw.cli_errors import CommandExit
from shardlaw.cli_more_vectors import (
    is_more_text, is_more_vector, load_more, more_hits, replay_more,
)
from shardlaw.cli_program_vectors import is_program_vector, program_hits, replay_program_vector

__all__ = ["add_parsers", "read_vectors"]

AGAINST = ("spec", "jax", "engine")

# What each stage of jit means to a user, for the words "JAX raises it ...".
STAGE_WORDS = {
    "description": "while reading the call's description",
    "jit": "at jax.jit(...), before any call",
    "trace": "when the call is traced",
    "lower": "when the traced call is lowered",
    "compile": "after compiling, when the results' shardings are read back",
    "aot": "when the compiled executable is called",
}

NO_ENGINE = ("there is no engine yet to replay the vectors against: shardlaw.engine (engine/) "
             "and its replay (shardlaw.properties.engine_harness.replay_in_engine) are not "
             "there. Use --against spec or --against jax.")


_Exit = CommandExit


def add_parsers(subparsers: Any) -> None:
    """Add ``check`` and ``vectors`` to the ``shardlaw`` command's subparsers."""
    check = subparsers.add_parser(
        "check", help="explain what jax.jit does with the call in a test vector (JSON)",
        description="Explain the spec's verdict on the call in a test vector, and say whether "
                    "it matches the vector's expected verdict.")
    check.add_argument("file", metavar="FILE.json", help="a test vector (docs/vectors.rst)")
    check.add_argument("--json", action="store_true", help="print a machine-readable object")
    check.add_argument("--jax", default=None, choices=("0.10.2", "0.4.13"),
                       help="the JAX release to answer for (default: the vector's own)")
    check.set_defaults(handler=_guarded(check_command))

    vectors = subparsers.add_parser("vectors", help="replay or generate test vectors")
    commands = vectors.add_subparsers(dest="vectors_command", metavar="COMMAND", required=True)
    run = commands.add_parser(
        "run", help="replay every vector under a directory and report conformance per rule")
    run.add_argument("directory", metavar="DIR", help="a directory of vectors (or one file)")
    run.add_argument("--against", choices=AGAINST, default="spec",
                     help="what to hold to the vectors: the spec (default), real JAX, or the "
                          "engine")
    run.set_defaults(handler=_guarded(run_command))
    generate = commands.add_parser(
        "generate", help="write vectors from Hypothesis calls checked against real JAX")
    generate.add_argument("directory", metavar="DIR", help="where to write (empty, or --replace)")
    generate.add_argument("--per-rule", type=_at_least_one, default=3, metavar="N",
                          help="vectors for each side of each jit-call rule (default 3)")
    generate.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    generate.add_argument("--budget", type=_at_least_one, default=None, metavar="CALLS",
                          help="the most calls to draw (default 4000)")
    generate.add_argument("--replace", action="store_true",
                          help="delete the .json files already under DIR first")
    generate.add_argument("--programs", action="store_true",
                          help="write program vectors (whole programs: their bodies' "
                               "equations) under DIR/programs/<rule>/, and bodies inside "
                               "control flow under DIR/programs-flow/<kind>/, instead")
    generate.set_defaults(handler=_guarded(generate_command))


def _at_least_one(text: str) -> int:
    """A count given on the command line: a whole number of at least 1 (argparse says
    which option and exits 2 otherwise)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _guarded(command: Any) -> Any:
    """Run a command on stdout; its planned exits (CommandExit), closed pipes and bad files
    are said by ``shardlaw.cli.main``, the command line's one error path."""
    def run(args: argparse.Namespace) -> int:
        return command(args, sys.stdout)
    return run


# =========================================================================== reading

@dataclasses.dataclass
class Entry:
    """One vector read from a file (``vector`` None: unreadable, ``error`` says why)."""

    where: str
    vector: Any = None
    error: str | None = None


def read_vectors(path: Path) -> Iterator[Entry]:
    """Every vector in a ``.json`` file, a ``.jsonl`` file (one a line), or a directory of them."""
    from shardlaw.cli_program_vectors import is_program_text
    from shardlaw.spec.core.rules import Rejection
    from shardlaw.spec.vectors.jit_vectors import load_vector
    from shardlaw.spec.vectors.program_vectors import load_program

    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl"))
    else:
        files = [path]
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            yield Entry(str(file), error=f"cannot read it: {error}")
            continue
        except MemoryError:
            yield Entry(str(file), error="cannot read it: too large to hold in memory")
            continue
        pieces = ([(f"{file}:{n}", line) for n, line in enumerate(text.splitlines(), 1)
                   if line.strip()] if file.suffix == ".jsonl" else [(str(file), text)])
        for where, piece in pieces:
            try:
                if is_more_text(piece):  # a call sequence or a divergence pair
                    yield Entry(where, load_more(piece))
                    continue
                yield Entry(where, load_program(piece) if is_program_text(piece)
                            else load_vector(piece))  # a program or a jit-call vector
            except Rejection as error:
                yield Entry(where, error=error.args[0])
            except RecursionError:  # JSON nested deeper than the reader follows
                yield Entry(where, error="it nests too deep to read")
            except ValueError as error:  # json's own refusals (a number of 5,000 digits)
                yield Entry(where, error=f"cannot read it: {error}")


def _is_jit(vector: Any) -> bool:
    """Whether a vector read is a jit-call vector (else a program vector)."""
    from shardlaw.spec.vectors.jit_vectors import Vector
    return isinstance(vector, Vector)


def _one_vector(name: str) -> Any:
    path = Path(name)
    if not path.is_file():
        raise _Exit(2, f"{name}: no such file")
    (entry, *more) = list(read_vectors(path)) or [Entry(name, error="the file holds no vector")]
    if entry.error is not None:
        raise _Exit(2, f"{entry.where} is not a valid test vector: {entry.error}")
    if more:
        raise _Exit(2, f"{name} holds {1 + len(more)} vectors; check reads one (use vectors run)")
    return entry.vector


def _judge(call: Any, jax: str | None = None) -> Any:
    # A spec that fails here is a bug: shardlaw.cli.main says so on one line (status 70).
    from shardlaw.spec import jit_call
    from shardlaw.spec.core.editions import EDITIONS
    return jit_call(call, jax=jax if jax in EDITIONS else None)


def _expectation(vector: Any, verdict: Any) -> list[str] | None:
    """Differences from the expected verdict (None: the vector expects nothing), which is
    compared only with a verdict for the JAX release the vector describes."""
    from shardlaw.spec.core.editions import EDITIONS
    from shardlaw.spec.vectors.jit_vectors import verdict_differences

    if vector.expect is None:
        return None
    if vector.jax not in EDITIONS:
        return [f"the vector describes jax {vector.jax}; the spec describes jax "
                f"{' and '.join(EDITIONS)}"]
    if vector.jax != verdict.jax:
        return [f"the vector describes jax {vector.jax}; the verdict is for jax {verdict.jax}"]
    return verdict_differences(vector.expect, verdict)


# =========================================================================== check

def _sequence_file(name: str) -> Any:
    """The sequence vector in ``name``, or None when the file holds call vectors."""
    from shardlaw.spec.core.rules import Rejection
    from shardlaw.spec.vectors.sequence_vectors import SEQUENCE_FORMAT, load_sequence

    path = Path(name)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError, OSError):
        return None  # not a sequence file: read again, and refused, as a call vector
    if not (isinstance(data, dict) and data.get("format") == SEQUENCE_FORMAT):
        return None
    try:
        return load_sequence(data)
    except Rejection as error:
        raise _Exit(2, f"{name} is not a valid sequence vector: {error.args[0]}") from None
    except RecursionError:
        raise _Exit(2, f"{name} is not a valid sequence vector: it nests too deep to read") \
            from None


def check_sequence_command(args: argparse.Namespace, vector: Any, out: TextIO) -> int:
    """The cache table of a call sequence: per call, which of jit's caches hit, and why."""
    from shardlaw.spec.jit.cache import describe_cache_table, explain_cache
    from shardlaw.spec.vectors.sequence_vectors import cache_differences

    rows = explain_cache(vector.sites)
    differences = cache_differences(vector, rows)
    if args.json:
        json.dump({"file": args.file, "name": vector.name, "jax": vector.jax,
                   "rows": [row.as_dict() for row in rows],
                   "matches": None if vector.expect is None else not differences,
                   "differences": differences}, out, indent=2)
        out.write("\n")
    else:
        out.write(f"{args.file}: a sequence of {len(rows)} jit calls"
                  + (f" ({vector.name})" if vector.name else "") + "\n")
        if vector.description:
            out.write(_wrap(vector.description, "  ") + "\n")
        out.write("\nWhich of jit's caches each call hits (jax " + vector.jax + "):\n")
        out.write(describe_cache_table(rows) + "\n")
        if vector.expect is not None:
            out.write("\nExpected by the vector: " + (
                "the model matches." if not differences else
                "the model differs:\n  " + "\n  ".join(differences)) + "\n")
    return 1 if differences else 0


def check_command(args: argparse.Namespace, out: TextIO) -> int:
    sequence = _sequence_file(args.file)
    if sequence is not None:
        return check_sequence_command(args, sequence, out)
    vector = _one_vector(args.file)
    if is_more_vector(vector):  # a divergence pair (sequences were read above)
        from shardlaw.cli_more_vectors import check_equivalence
        return check_equivalence(args.file, vector, args.json, out)
    if is_program_vector(vector):
        from shardlaw.cli_program_vectors import check_program_vector
        return check_program_vector(args, vector, out)
    verdict = _judge(vector.call, getattr(args, "jax", None) or vector.jax)
    differences = _expectation(vector, verdict)
    if args.json:
        json.dump(_check_json(args.file, vector, verdict, differences), out, indent=2)
        out.write("\n")
    else:
        _explain(args.file, vector, verdict, differences, out)
    return 1 if differences else 0


def _statement(rule_id: str) -> str:
    from shardlaw.cli_text import plain_text
    from shardlaw.spec import RULES
    rule = RULES.get(rule_id)
    # The statements are written for the docs; the terminal shows them without markup.
    return plain_text(rule.statement) if rule is not None else "(not a registered rule)"


def _check_json(file: str, vector: Any, verdict: Any, differences: list[str] | None) -> dict:
    from shardlaw.spec.vectors.vector_writer import verdict_json

    fired = list(verdict.trace) + ([verdict.rule] if verdict.rule not in verdict.trace
                                   and verdict.rule else [])
    return {
        "file": file,
        "vector": {"name": vector.name, "rule": vector.rule, "side": vector.side,
                   "jax": vector.jax, "description": vector.description},
        "verdict": verdict_json(verdict),
        "statements": {r: _statement(r) for r in fired},
        "expected": None if vector.expect is None else verdict_json(vector.expect),
        "matches": None if differences is None else not differences,
        "differences": differences or [],
    }


def _wrap(text: str, indent: str, hang: str | None = None, width: int = 100) -> str:
    return textwrap.fill(text, width, initial_indent=indent,
                         subsequent_indent=hang if hang is not None else indent,
                         break_long_words=False, break_on_hyphens=False)


def _leaf_words(leaf: Any) -> str:
    from shardlaw.spec import Static
    if isinstance(leaf, Static):
        return f"static {leaf.value!r}"
    where = "" if leaf.sharding is None else f" on {leaf.sharding!r}"
    shape = ",".join(map(str, leaf.shape))
    kind = {"committed": "committed jax.Array", "uncommitted": "uncommitted jax.Array",
            "numpy": "numpy array", "scalar": "Python scalar",
            "abstract": "jax.ShapeDtypeStruct"}[leaf.kind]
    return f"{kind} {leaf.dtype}[{shape}]{where}"


def _tree_words(tree: Any) -> str:
    from shardlaw.spec import UNSPECIFIED
    if tree is UNSPECIFIED:
        return "left out"
    return repr(tree)


def _describe_call(call: Any, out: TextIO) -> None:
    from shardlaw.spec.core.pytree import leaves_with_paths, show_path

    w = out.write
    w("The call\n")
    rows = [(show_path(("args", *p)), leaf) for p, leaf in leaves_with_paths(call.args)]
    rows += [(show_path(("kwargs", *p)), leaf) for p, leaf in leaves_with_paths(call.kwargs)]
    width = max([len(p) for p, _ in rows] + [13])
    for path, leaf in rows:
        w(f"  {path:<{width}}  {_leaf_words(leaf)}\n")
    if not rows:
        w("  (no arguments)\n")
    options = call.options
    w(f"  {'in_shardings':<{width}}  {_tree_words(options.in_shardings)}\n")
    w(f"  {'out_shardings':<{width}}  {_tree_words(options.out_shardings)}\n")
    extras = []
    for name in ("static_argnums", "static_argnames", "donate_argnums", "donate_argnames"):
        if getattr(options, name):
            extras.append(f"{name}={getattr(options, name)!r}")
    for name in ("keep_unused", "device", "backend"):
        if getattr(options, name) not in (None, False):
            extras.append(f"{name}={getattr(options, name)!r}")
    if extras:
        w(f"  {'other options':<{width}}  {', '.join(extras)}\n")
    w(f"  {'context mesh':<{width}}  "
      f"{'none' if call.context_mesh is None else repr(call.context_mesh)}\n")
    results = [(show_path(("result", *p)), o) for p, o in leaves_with_paths(call.outputs)]
    said = ", ".join(f"{p}: {o.dtype}[{','.join(map(str, o.shape))}]" for p, o in results)
    w(_wrap(said or "none", f"  {'results':<{width}}  ", " " * (width + 4)) + "\n")
    if call.process_count > 1 or call.default_device:
        w(f"  {'platform':<{width}}  {call.devices} devices per process, {call.process_count} "
          f"process(es), default device {call.default_device}\n")
    if call.aot_args is not None:
        called = [(show_path(("args", *p)), leaf) for p, leaf in leaves_with_paths(call.aot_args)]
        called += [(show_path(("kwargs", *p)), leaf)
                   for p, leaf in leaves_with_paths(call.aot_kwargs)]
        w("  then the compiled executable (jit(f).lower(...).compile()) is called with\n")
        for path, leaf in called:
            w(f"    {path:<{width}}  {_leaf_words(leaf)}\n")


def _devices_words(ids: Any) -> str:
    ids = list(ids)
    if len(ids) > 16:
        return "[" + ", ".join(map(str, ids[:8])) + f", ... {len(ids) - 8} more]"
    return str(ids)


def _explain(file: str, vector: Any, verdict: Any, differences: list[str] | None,
             out: TextIO) -> None:
    w = out.write
    label = vector.name or Path(file).stem
    if vector.rule:
        label += f" ({vector.rule}, {vector.side or 'accept'} side)"
    w(f"{file}\n  vector {label}, for jax {vector.jax}"
      + ("" if verdict.jax == vector.jax else f"; answered for jax {verdict.jax}") + "\n")
    if vector.description:
        w(_wrap(vector.description, "  ") + "\n")
    w("\n")
    _describe_call(vector.call, out)
    w("\n")
    (_explain_accepted if verdict.accepted else _explain_rejected)(verdict, out)
    w("\nWhy: the rules that fired, in order\n")
    width = max([len(r) for r in verdict.trace] + [4])
    for n, rule_id in enumerate(verdict.trace, 1):
        mark = "  <- rejects the call" if not verdict.accepted and rule_id == verdict.rule else ""
        w(_wrap(f"{n:>3}. {rule_id:<{width}}  {_statement(rule_id)}{mark}", "  ",
                " " * (width + 9)) + "\n")
    w("\n")
    if differences is None:
        w("The vector carries no expected verdict.\n")
    elif not differences:
        w(f"Expected by the vector: {_verdict_words(vector.expect)}. The spec matches.\n")
    else:
        w(f"Expected by the vector: {_verdict_words(vector.expect)}. The spec DOES NOT match:\n")
        for difference in differences:
            w(_wrap(difference, "  - ", "    ") + "\n")


def _explain_accepted(verdict: Any, out: TextIO) -> None:
    """Where an accepted call runs, what its inputs and results are, what moves."""
    from shardlaw.spec import UNSPECIFIED

    w = out.write
    where = ("the program has no concrete devices" if verdict.device_assignment is None
             else f"the program runs on {verdict.num_devices} device(s), in this order: "
                  f"{_devices_words(verdict.device_assignment)}")
    w(f"Verdict: ACCEPTED - {where}\n")
    w("\nInputs, as the compiled program receives them\n")
    width = max([len(p) for p in verdict.in_paths + verdict.out_paths] + [6])
    for i, (path, s) in enumerate(zip(verdict.in_paths, verdict.in_shardings)):
        if i not in verdict.kept_inputs:
            said = "dropped: the function does not use it (keep_unused=False)"
        elif s is UNSPECIFIED:
            said = "left to the compiler (no sharding decides it)"
        else:
            said = repr(s)
        w(f"  {path:<{width}}  {said}\n")
    if not verdict.in_paths:
        w("  (none)\n")
    w("\nResults, as they come back\n")
    for path, s, committed in zip(verdict.out_paths, verdict.out_shardings,
                                  verdict.out_committed):
        placed = "left to the compiler" if s is UNSPECIFIED else repr(s)
        w(f"  {path:<{width}}  {placed}  ({'committed' if committed else 'uncommitted'})\n")
    if not verdict.out_paths:
        w("  (none)\n")
    if verdict.transfers:
        w("\nTransfers: jit moves " + ", ".join(verdict.transfers)
          + " onto the shardings above before the call (no error: the blocks match).\n")
    else:
        w("\nTransfers: none; every committed argument stays where it is.\n")


def _explain_rejected(verdict: Any, out: TextIO) -> None:
    """Which rule refused the call, at which stage, where, in which words."""
    w = out.write
    error = verdict.error_type
    if verdict.jax_error and verdict.jax_error != verdict.error_type:
        error += f" (JAX's class: {verdict.jax_error}, a {verdict.error_type})"
    stage = STAGE_WORDS.get(verdict.stage or "", verdict.stage or "at an unknown stage")
    w(f"Verdict: REJECTED by {verdict.rule} - JAX raises {error} {stage}\n")
    w(_wrap(f"{verdict.rule}: {_statement(verdict.rule)}", "  ", "    ") + "\n")
    if verdict.path:
        w(f"  where: {verdict.path}\n")
    w(_wrap(f"message: {verdict.message}", "  ", "    ") + "\n")


def _verdict_words(verdict: Any) -> str:
    if verdict.accepted:
        return f"accepted on {verdict.num_devices} device(s)"
    return f"rejected by {verdict.rule} ({verdict.error_type})"


# =========================================================================== vectors run

@dataclasses.dataclass
class Replay:
    """One vector replayed: its hits (rule, side), and its differences (None: skipped)."""

    where: str
    hits: list[tuple[str, str]]
    differences: list[str] | None
    skipped: str | None = None


def _replayer(against: str, entries: list[Entry]) -> Any:
    """A function vector -> differences for ``against`` (raises _Exit when it cannot run)."""
    from shardlaw.spec import jit_call

    if against == "spec":
        return lambda vector: (_expectation(vector, _judge(vector.call, vector.jax))
                               if _is_jit(vector)
                               else replay_more("spec", vector)
                               if is_more_vector(vector)
                               else replay_program_vector("spec", vector))
    try:
        import jax  # noqa: F401
        from shardlaw.properties.vectors_gen import NotReplayable, prepare_jax, replay_in_jax
    except ImportError as error:
        raise _Exit(2, f"--against {against} needs JAX and the property suite ({error}); "
                       "install shardlaw with the [dev] extra") from None
    replay = replay_in_jax
    if against == "engine":
        try:
            from shardlaw.properties.engine_harness import replay_in_engine as replay
        except ImportError as error:
            raise _Exit(2, f"{NO_ENGINE} ({error})") from None
    needed = max([e.vector.call.devices for e in entries if _is_jit(e.vector)]
                 + [8])
    try:
        prepare_jax(needed)
    except NotReplayable as error:
        raise _Exit(2, str(error)) from None
    return lambda vector: (replay(vector) if _is_jit(vector)
                           else replay_more(against, vector, NotReplayable)
                           if is_more_vector(vector)
                           else _program_elsewhere(against, vector, NotReplayable))


def _program_elsewhere(against: str, vector: Any, skip: type[Exception]) -> Any:
    """A program vector against JAX (the program built from the vector alone); the engine
    is not held to program vectors yet."""
    from shardlaw.properties.program_vectors_gen import NotReplayable as CannotBuild
    if against == "engine":
        raise skip("the engine replays jit-call vectors only")
    try:
        return replay_program_vector(against, vector)
    except CannotBuild as reason:
        raise skip(str(reason)) from None


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    from shardlaw.spec.vectors.jit_vectors import rules_hit

    path = Path(args.directory)
    if not path.exists():
        raise _Exit(2, f"{path}: no such directory or file")
    entries = list(read_vectors(path))
    if not entries:
        raise _Exit(2, f"{path} holds no vectors (*.json, *.jsonl)")
    replay = _replayer(args.against, entries)
    skip_error = _skip_error(args.against)
    replays = []
    for entry in entries:
        if entry.vector is None:
            replays.append(Replay(entry.where, [], [f"not a valid vector: {entry.error}"]))
            continue
        hits = (rules_hit(entry.vector) if _is_jit(entry.vector)
                else more_hits(entry.vector) if is_more_vector(entry.vector)
                else program_hits(entry.vector))
        if entry.vector.expect is None:
            replays.append(Replay(entry.where, hits, None, "no expected verdict"))
            continue
        try:
            differences = replay(entry.vector)
        except skip_error as reason:
            replays.append(Replay(entry.where, hits, None, str(reason)))
            continue
        except Exception as error:  # noqa: BLE001 - one broken replay does not stop the run
            differences = [f"the replay failed: {type(error).__name__}: {error}"]
        replays.append(Replay(entry.where, hits, differences))
    _report(path, args.against, replays, out)
    return 1 if any(r.differences for r in replays) else 0


def _skip_error(against: str) -> type[Exception]:
    if against in ("jax", "engine"):
        from shardlaw.properties.vectors_gen import NotReplayable
        return NotReplayable
    return _NeverRaised


class _NeverRaised(Exception):
    pass


def _report(path: Path, against: str, replays: list[Replay], out: TextIO) -> None:
    from shardlaw.spec import RULES
    from shardlaw.spec.vectors.jit_vectors import jit_rules

    w = out.write
    what = {"spec": "the spec (shardlaw.spec.jit_call; explain_program for programs; "
                    "explain_cache for call sequences; placement_equivalent for divergence "
                    "pairs)",
            "jax": "real jax.jit (8 CPU devices)",
            "engine": "the engine (shardlaw.engine.jit)"}
    w(f"Replayed {len(replays)} vector(s) from {path} against {what[against]}\n\n")
    table: dict[str, list[int]] = {}  # rule -> [accept, reject, passed, failed]
    for replay in replays:
        if replay.differences is None:
            continue
        for rule_id in dict.fromkeys(r for r, _ in replay.hits):
            row = table.setdefault(rule_id, [0, 0, 0, 0])
            sides = {s for r, s in replay.hits if r == rule_id}
            row[1 if "reject" in sides else 0] += 1
            row[3 if replay.differences else 2] += 1
    jit = [r for r in jit_rules() if r in table]
    others = [r for r in RULES if r in table and r not in jit]
    others += sorted(r for r in table if r not in RULES and r not in jit)
    rows = [["rule", "accept", "reject", "passed", "failed", "conformance"]]
    for rule_id in jit + [""] + others:
        if not rule_id:
            rows.append(["(the rules they build on)"] + [""] * 5)
            continue
        accept, reject, passed, failed = table[rule_id]
        rows.append([rule_id, str(accept), str(reject), str(passed), str(failed),
                     f"{100.0 * passed / (passed + failed):.1f} %"])
    widths = [max(len(row[i]) for row in rows[:1] + [r for r in rows if r[1]])
              for i in range(len(rows[0]))]
    for row in rows:
        w("  " + "  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i])
                           for i, cell in enumerate(row)).rstrip() + "\n")
    checked = [r for r in replays if r.differences is not None]
    failed = [r for r in checked if r.differences]
    skipped = [r for r in replays if r.differences is None]
    percent = 100.0 * (len(checked) - len(failed)) / len(checked) if checked else 0.0
    w(f"\n{len(checked)} vector(s) checked: {len(checked) - len(failed)} passed, "
      f"{len(failed)} failed ({percent:.1f} % conform)")
    w(f"; {len(skipped)} skipped\n" if skipped else "\n")
    for replay in skipped:
        w(f"  skipped {replay.where}: {replay.skipped}\n")
    if failed:
        w("\nFailures\n")
        for replay in failed:
            w(f"  {replay.where}\n")
            for difference in replay.differences or []:
                w(_wrap(difference, "    - ", "      ") + "\n")


# =========================================================================== vectors generate

def generate_command(args: argparse.Namespace, out: TextIO) -> int:
    """``shardlaw vectors generate``; a directory it made is removed again when it fails, so
    that a refused or broken run leaves nothing behind."""
    directory = Path(args.directory)
    existed = directory.exists()
    try:
        return _generate(args, out)
    except BaseException:
        if not existed and directory.is_dir():
            import shutil
            shutil.rmtree(directory, ignore_errors=True)
        raise


def _generate(args: argparse.Namespace, out: TextIO) -> int:
    if args.programs:
        from shardlaw.cli_program_vectors import generate_programs
        return generate_programs(args, out)
    if args.budget is None:
        args.budget = 4000
    try:
        import hypothesis  # noqa: F401
        import jax  # noqa: F401
        from shardlaw.properties.vectors_gen import NotReplayable, generate, prepare_jax
    except ImportError as error:
        raise _Exit(2, f"generating vectors needs JAX and Hypothesis ({error}); install "
                       "shardlaw with the [dev] extra") from None
    from shardlaw.cli_progress import Progress
    progress = Progress("vectors generate")
    drawn = [0]

    def show(report: Any) -> None:
        drawn[0] += 1
        progress.update(_generation_state(report, args.per_rule, drawn[0], args.budget))

    try:
        prepare_jax(8)
        report = generate(args.directory, args.per_rule, seed=args.seed, budget=args.budget,
                          replace=args.replace, progress=show)
    except (NotReplayable, FileExistsError) as error:
        raise _Exit(2, str(error)) from None
    progress.done(_generation_state(report, args.per_rule, drawn[0], args.budget))
    w = out.write
    total = len({f for files in report.written.values() for f in files})
    w(f"Wrote {total} vector(s) into {args.directory} ({report.drawn} calls run in JAX)\n")
    for (rule_id, side), files in report.written.items():
        w(f"  {rule_id:<7} {side:<6} {len(files)}\n")
    missing = report.missing(args.per_rule)
    if missing:
        w("Fewer than --per-rule vectors (rare cases; raise --budget or add hand vectors): "
          + ", ".join(f"{r} {s} ({n})" for r, s, n in missing) + "\n")
    if report.disagreements:
        w(f"\nJAX and the spec disagreed on {len(report.disagreements)} call(s) (not written):\n")
        for judged in report.disagreements[:10]:
            w(_wrap("; ".join(judged.problems or ()), "  - ", "    ") + "\n")
            w(_wrap(f"the call: {judged.call}", "    ", "      ") + "\n")
    if report.unrunnable:
        w(f"\nThe harness could not build {len(report.unrunnable)} call(s): "
          + "; ".join(dict.fromkeys(report.unrunnable)) + "\n")
    return 0


def _generation_state(report: Any, per_rule: int, drawn: int, budget: int) -> str:
    """How far a generation is: calls drawn of the budget, calls run in JAX, rule sides
    filled."""
    full = sum(len(files) >= per_rule for files in report.written.values())
    return (f"{drawn} of at most {budget} calls drawn, {report.drawn} run in JAX, "
            f"{full} of {len(report.written)} rule sides have {per_rule} vector(s)")
