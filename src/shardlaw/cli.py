"""The ``shardlaw`` command: a worked example, the list of rules, the version.

Every command fails the same way (:func:`main`): exit status 2 and one line on stderr for
bad input (arguments, files, shardings, a rule's rejection), never a traceback; a closed
pipe (``shardlaw rules | head``) ends the command quietly, as other command-line tools do.

``shardlaw demo`` uses the specification alone (no JAX): it places an (8, 8) array on a
2x4 mesh with several shardings, prints which device holds which block and the HLO text
of each, and compares pairs with the two notions of "the same sharding" that shardlaw
keeps apart: JAX-equivalence (what ``Sharding.is_equivalent_to`` answers) and
placement-equivalence (every device holds the same block).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn, Sequence, TextIO

from shardlaw import __version__
from shardlaw.cli_errors import (
    EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, CommandExit, one_line,
)

__all__ = ["main"]

Box = tuple[tuple[int, int], ...]

SHAPE = (8, 8)


# --------------------------------------------------------------------------- the demo

def _demo_shardings() -> dict[str, tuple[Any, str]]:
    """Label -> (sharding, how it is written), all over 8 devices."""
    from shardlaw.spec import GSPMDSharding, Mesh, NamedSharding, P

    mesh = Mesh.iota((2, 4), ("x", "y"))
    renamed = Mesh.iota((2, 4), ("a", "b"))
    # The transpose of the 2x4 mesh: position (j, i) holds the device at (i, j) of `mesh`.
    transposed = Mesh((4, 2), ("y", "x"), [0, 4, 1, 5, 2, 6, 3, 7])
    reversed_order = Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
    return {
        "A": (NamedSharding(mesh, P("x", "y")), "NamedSharding(mesh, P('x', 'y'))"),
        "B": (NamedSharding(mesh, P(("x", "y"))), "NamedSharding(mesh, P(('x', 'y')))"),
        "C": (NamedSharding(renamed, P("a", "b")),
              "NamedSharding(Mesh 2x4 with axes renamed 'a','b', P('a', 'b'))"),
        "D": (GSPMDSharding(mesh.devices, "{devices=[2,4]<=[8]}"),
              "GSPMDSharding(devices 0..7, '{devices=[2,4]<=[8]}')"),
        "E": (NamedSharding(mesh, P("y", "x")), "NamedSharding(mesh, P('y', 'x'))"),
        "F": (NamedSharding(transposed, P("y", "x")),
              "NamedSharding(Mesh 4x2 ('y','x') over devices [0,4,1,5,2,6,3,7], P('y', 'x'))"),
        "R": (NamedSharding(mesh, P()), "NamedSharding(mesh, P())"),
        "S": (NamedSharding(reversed_order, P()),
              "NamedSharding(Mesh 2x4 ('x','y') over devices [7,6,...,0], P())"),
    }


# Pairs to compare, with a sentence on what the pair shows.
_PAIRS = [
    ("A", "D", "a NamedSharding and its GSPMD rewrite"),
    ("A", "C", "the same mesh with its axes renamed"),
    ("A", "B", "two different placements"),
    ("E", "F", "the same blocks on the same devices, device lists in different orders"),
    ("R", "S", "fully replicated, device lists in different orders"),
]


def _show_box(box: Box) -> str:
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"


def _block_grid(boxes: dict[int, Box]) -> list[list[str]]:
    """Rows and columns of distinct blocks of a 2-D array, each cell the devices holding it."""
    rows = sorted({box[0] for box in boxes.values()})
    cols = sorted({box[1] for box in boxes.values()})
    holders: dict[Box, list[int]] = {}
    for device, box in boxes.items():
        holders.setdefault(box, []).append(device)
    header = [""] + [f"cols {lo}:{hi}" for lo, hi in cols]
    grid = [header]
    for r in rows:
        line = [f"rows {r[0]}:{r[1]}"]
        for c in cols:
            line.append(",".join(str(d) for d in sorted(holders.get((r, c), []))) or "-")
        grid.append(line)
    return grid


def _table(rows: list[list[str]], out: TextIO, indent: str = "  ") -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write(indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n")


def _jax_reason(a: Any, b: Any, ndim: int) -> str:
    from shardlaw.spec import hlo_equal, to_hlo

    ha, hb = to_hlo(a, ndim), to_hlo(b, ndim)
    differences = []
    if not hlo_equal(ha, hb):
        differences.append(f"the HLO shardings differ ({ha} vs {hb})")
    if a.memory_kind != b.memory_kind:
        differences.append(f"the memory kinds differ ({a.memory_kind} vs {b.memory_kind})")
    ia, ib = list(a.device_list.ids()), list(b.device_list.ids())
    if ia != ib:
        differences.append(f"the ordered device lists differ ({ia} vs {ib})")
    if not differences:
        return "equal HLO shardings, same memory kind, same device list in the same order"
    return "; ".join(differences)


def _placement_reason(a: Any, b: Any, shape: tuple[int, ...]) -> str:
    from shardlaw.spec import devices_indices_map

    ma, mb = devices_indices_map(a, shape), devices_indices_map(b, shape)
    if set(ma) != set(mb):
        return f"they span different devices ({sorted(ma)} vs {sorted(mb)})"
    for device in sorted(ma):
        if ma[device] != mb[device]:
            return (f"device {device} holds {_show_box(ma[device])} under one and "
                    f"{_show_box(mb[device])} under the other")
    return f"each of the {len(ma)} devices holds the same block under both"


def demo(out: TextIO) -> None:
    """Print the worked example."""
    from shardlaw.spec import devices_indices_map

    shardings = _demo_shardings()
    out.write("shardlaw demo: an array of shape (8, 8) on a 2x4 mesh of 8 devices\n")
    out.write("mesh = Mesh.iota((2, 4), ('x', 'y'))   # devices 0..7, row-major\n\n")
    out.write("Shardings\n=========\n")
    for label, (_, how) in shardings.items():
        out.write(f"  {label} = {how}\n")
    maps = {label: devices_indices_map(s, SHAPE) for label, (s, _) in shardings.items()}
    _demo_blocks(shardings, maps, out)
    _demo_verdicts(shardings, out)
    _demo_jit_calls(out)


def _demo_blocks(shardings: dict, maps: dict, out: TextIO) -> None:
    """Which device holds which block, device by device, and the HLO text."""
    from shardlaw.spec import to_hlo

    w = out.write
    w("\nWhich device holds which block (device ids per block)\n")
    w("======================================================\n")
    for label in ("A", "B", "E", "F", "R"):
        w(f"{label}: {shardings[label][1]}\n")
        _table(_block_grid(maps[label]), out)
        w("\n")
    w("(C and D place exactly like A, and S like R: every device holds the whole array.)\n\n")

    w("Per-device boxes\n================\n")
    labels = list(shardings)
    rows = [["device"] + labels]
    for device in range(8):
        rows.append([str(device)] + [_show_box(maps[lab][device]) for lab in labels])
    _table(rows, out)

    w("\nHLO text (rank 2)\n=================\n")
    for label, (s, _) in shardings.items():
        w(f"  {label}: {to_hlo(s, len(SHAPE))}\n")


def _demo_verdicts(shardings: dict, out: TextIO) -> None:
    """The two equivalences on each pair, and why they part."""
    from shardlaw.spec import jax_equivalent, placement_equivalent

    ndim = len(SHAPE)
    w = out.write
    w("\nEquivalence verdicts\n====================\n")
    w("JAX-equivalent (EQ-1, like a.is_equivalent_to(b, 2)): equal HLO shardings, same memory\n"
      "kind, same device list in the same order.\n"
      "Placement-equivalent (EQ-2): same devices, and every device holds the same block.\n\n")
    for x, y, what in _PAIRS:
        a, b = shardings[x][0], shardings[y][0]
        jax_eq = jax_equivalent(a, b, ndim)
        place_eq = placement_equivalent(a, b, SHAPE)
        w(f"{x} vs {y} ({what}):\n")
        w(f"  JAX-equivalent:       {'yes' if jax_eq else 'no '}  - {_jax_reason(a, b, ndim)}\n")
        w(f"  placement-equivalent: {'yes' if place_eq else 'no '}  - "
          f"{_placement_reason(a, b, SHAPE)}\n")
        if jax_eq != place_eq:
            w("  => the two notions part here.\n")
        w("\n")
    w(_WHY_THEY_PART)


_WHY_THEY_PART = (
    "Why they part\n=============\n"
    "An HLO sharding's tile assignment holds *positions* in the sharding's device list, not\n"
    "device ids. F's mesh lists the devices as [0,4,1,5,2,6,3,7], so the same blocks on the\n"
    "same devices are written with a different tile assignment ({devices=[4,2]<=[8]} instead\n"
    "of {devices=[4,2]<=[2,4]T(1,0)}), and JAX also compares the device lists in order. JAX\n"
    "therefore says E and F differ, although every device holds the same block under both.\n"
    "For R and S the HLO is {replicated} for both, but the device lists are in opposite\n"
    "orders, so JAX says they differ, while every device holds the whole array under both.\n"
    "The converse was never seen: no JAX-equivalent pair that places differently has been\n"
    "found (notes/jax-facts.md, section 7).\n")


def _demo_jit_calls(out: TextIO) -> None:
    """Three jit calls decided by the spec: accepted, moved silently, refused."""
    from shardlaw.spec import (
        Arg, Call, JitOptions, Mesh, NamedSharding, Out, P, Replicated, SingleDeviceSharding,
        jit_call, to_hlo,
    )

    mesh = Mesh.iota((2, 4), ("x", "y"))
    x = Arg.committed((8, 8), NamedSharding(mesh, P("x", "y")))
    on3 = Arg.committed((8,), SingleDeviceSharding(3))
    calls = [
        # ``compiler``: what XLA chose for the result (the spec takes it as given).
        ("jit(f)(x)  with x committed to NamedSharding(mesh, P('x', 'y'))",
         Call(args=(x,), outputs=Out((8, 8), source=0), compiler=(to_hlo(x.sharding, 2),))),
        ("jit(f, in_shardings=NamedSharding(mesh, P()))(y)  with y committed to device 3",
         Call(args=(Arg.committed((8, 8), SingleDeviceSharding(3)),), outputs=Out((8, 8)),
              options=JitOptions(in_shardings=NamedSharding(mesh, P())),
              compiler=(Replicated(),))),
        ("jit(f)(x, z)  with z committed to device 3",
         Call(args=(x, on3), outputs=Out((8, 8)))),
    ]
    out.write("\nWhole jit calls\n===============\n")
    for how, call in calls:
        verdict = jit_call(call)
        out.write(f"{how}\n")
        for line in str(verdict).splitlines():
            out.write(f"  {line}\n")
        if verdict.accepted and verdict.transfers:
            out.write(f"  jit moves {', '.join(verdict.transfers)} to the in_sharding's devices "
                      "without a word (RES-4 compares HLO shardings, not devices)\n")
        out.write(f"  rules: {' '.join(verdict.trace)}\n\n")


# --------------------------------------------------------------------------- rules

def list_rules(out: TextIO, families: Sequence[str] | None = None) -> None:
    """Print every rule ID and its statement as plain text (the statements are written in
    reST for the docs); with ``families``, only the rules of those families."""
    from shardlaw.cli_text import plain_text
    from shardlaw.rule_index import family_id
    from shardlaw.spec import RULES

    for rule in RULES.values():
        if families and family_id(rule.id) not in families:
            continue
        out.write(f"{rule.id:8} {plain_text(rule.statement)}\n")
        for jax, variant in rule.variants.items():   # how an older JAX reads it
            out.write(f"{rule.id:8} [jax {jax}{', absent' if variant.absent else ''}] "
                      f"{plain_text(variant.statement)}\n")


def _family(text: str) -> str:
    """``--family``: a declared rule family, in any case (``smap`` is ``SMAP``)."""
    from shardlaw.rule_index import FAMILIES
    family = text.strip().upper()
    if family not in FAMILIES:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a rule family; the families are {', '.join(FAMILIES)}")
    return family


# --------------------------------------------------------------------------- entry point

class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the usage is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {one_line(message)} "
                                  f"(see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="shardlaw",
        description="What will jax.jit do with these shardings, and why.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser("demo", help="a worked example of placement and the two equivalences "
                                     "(specification only, no JAX needed)")
    rules = commands.add_parser("rules", help="list every rule ID and its statement")
    rules.add_argument("--family", action="append", type=_family, metavar="FAMILY",
                       help="only the rules of FAMILY (SMAP, EQ, ...; repeatable)")
    from shardlaw import cli_prove
    cli_prove.add_parser(commands)
    from shardlaw import cli_vectors
    cli_vectors.add_parsers(commands)
    from shardlaw import campaign
    campaign.add_parser(commands)
    from shardlaw import cli_upgrade
    cli_upgrade.add_parser(commands)
    return parser


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as done:  # --help, --version, or argparse's one-line error: said
        return done.code if isinstance(done.code, int) else EXIT_BAD_INPUT
    if args.command == "demo":
        demo(sys.stdout)
    elif args.command == "rules":
        list_rules(sys.stdout, args.family)
    elif args.command in ("prove", "check", "vectors", "campaign", "upgrade"):
        return args.handler(args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0: done (for ``prove``: proved), 1: a difference found (not equivalent, or a vector
    not matched), 3: ``prove`` could not decide, 2: bad input, with one line on stderr.
    """
    from shardlaw.sharding_text import ShardingTextError
    from shardlaw.spec.core.rules import Rejection

    def fail(status: int, message: str) -> int:
        sys.stderr.write(f"shardlaw: {one_line(message)}\n")
        return status

    try:
        status = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here, inside the one error path
        return status
    except BrokenPipeError:
        # The reader stopped reading (| head): say nothing more, and let the interpreter's
        # last flush write to nowhere instead of failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return fail(EXIT_INTERRUPTED, "interrupted")
    except CommandExit as stop:
        return fail(stop.status, str(stop))
    except (Rejection, ShardingTextError) as problem:
        return fail(EXIT_BAD_INPUT, problem.args[0] if problem.args else str(problem))
    except OSError as problem:
        where = f"{problem.filename}: " if problem.filename else ""
        return fail(EXIT_BAD_INPUT, f"{where}{problem.strerror or problem}")
    except RecursionError:
        return fail(EXIT_BAD_INPUT, "the input nests too deep to read")
    except MemoryError:
        return fail(EXIT_BAD_INPUT, "the input is too large to hold in memory")
    except Exception as bug:  # noqa: BLE001 - the one place a bug becomes one line
        if os.environ.get("SHARDLAW_TRACEBACK"):
            raise
        return fail(EXIT_INTERNAL, f"internal error, a bug in shardlaw (please report it; "
                                   f"SHARDLAW_TRACEBACK=1 shows where): "
                                   f"{type(bug).__name__}: {bug}")


if __name__ == "__main__":
    sys.exit(main())
