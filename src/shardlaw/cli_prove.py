"""``shardlaw prove A B``: prove two shardings place alike, or show where they part.

Shardings are written on the command line in the compact text form, or as JSON (the form
the test vectors under ``vectors/equivalence/`` use); both are described, and read, in
:mod:`shardlaw.sharding_text`. For example ``mesh=2x4:x,y spec=x,y`` or
``gspmd:{devices=[2,4]<=[8]}``.

The verdict comes from :func:`shardlaw.spec.prove_equivalent` (a direct pass over explicit
device orders, or z3 for symbolic ones; both compare memory kinds too). For a counterexample
the command draws both placements as a grid of device ids per block (the first two
dimensions of the array), with the device that differs in brackets; ``--svg FILE`` writes
the same picture as SVG. Exit status: 0 proved, 1 not equivalent, 3 unknown, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from shardlaw.cli_errors import one_line
from shardlaw.sharding_text import (
    ShardingTextError, parse_ints, parse_sharding, sharding_from_json, sharding_text, sharding_to_json,
)

__all__ = [
    "add_parser", "run", "parse_sharding", "sharding_text", "sharding_to_json",
    "sharding_from_json", "ShardingTextError", "placement_grid", "placement_svg",
]

Box = tuple[tuple[int, int], ...]

# The largest device count whose placements the command draws.
MAX_PICTURE_DEVICES = 256

EXIT_PROVED, EXIT_DIFFERENT, EXIT_BAD_INPUT, EXIT_UNKNOWN = 0, 1, 2, 3


# --------------------------------------------------------------------------- pictures

def _ranges(boxes: dict[int, Box], dim: int) -> list[tuple[int, int]]:
    return sorted({box[dim] for box in boxes.values()}) if boxes and len(next(iter(
        boxes.values()))) > dim else [(0, 0)]


def _cells(sharding: Any, shape: tuple[int, ...]) -> tuple[list, list, dict]:
    """Row ranges, column ranges (dimensions 0 and 1), and the devices in each cell."""
    from shardlaw.spec import devices_indices_map
    boxes = devices_indices_map(sharding, shape)
    rows, cols = _ranges(boxes, 0), _ranges(boxes, 1)
    held: dict[tuple, list[int]] = {}
    for device, box in boxes.items():
        row = box[0] if len(box) > 0 else (0, 0)
        col = box[1] if len(box) > 1 else (0, 0)
        held.setdefault((row, col), []).append(device)
    return rows, cols, held


def _cell_text(devices: list[int], highlight: int | None) -> str:
    return ",".join(f"[{d}]" if d == highlight else str(d) for d in sorted(devices)) or "-"


def placement_grid(sharding: Any, shape: tuple[int, ...], highlight: int | None = None
                   ) -> list[str]:
    """Lines of a grid of device ids per block of the first two dimensions of ``shape``
    (``highlight`` in brackets); a note in their place above MAX_PICTURE_DEVICES devices."""
    count = len(sharding.device_list)
    if count > MAX_PICTURE_DEVICES:
        return [f"(not drawn: {count} devices)"]
    rows, cols, held = _cells(sharding, shape)
    table = [[""] + [f"{lo}:{hi}" for lo, hi in cols] if len(shape) > 1 else [""]]
    if len(shape) <= 1:
        table = [[""] + [f"{lo}:{hi}" for lo, hi in rows]]
        table.append(["dim 0"] + [_cell_text(held.get((r, (0, 0)), []), highlight) for r in rows])
        if not shape:
            table = [["scalar", _cell_text(held.get(((0, 0), (0, 0)), []), highlight)]]
    else:
        for r in rows:
            table.append([f"{r[0]}:{r[1]}"] + [_cell_text(held.get((r, c), []), highlight)
                                               for c in cols])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    if len(shape) > 2:
        lines.append(f"(dimensions 2..{len(shape) - 1} are not drawn)")
    return lines


def placement_svg(a: Any, b: Any, shape: tuple[int, ...], highlight: int | None,
                  title: str) -> str:
    """Both placements side by side as SVG (:func:`shardlaw.grid_svg.grid_svg`): one
    rectangle per block, labelled with the devices that hold it; blocks of ``highlight``
    outlined in red."""
    from shardlaw.grid_svg import grid_svg
    return grid_svg([("A", a), ("B", b)], shape, title=title, highlight=highlight)


# --------------------------------------------------------------------------- the command

def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``prove`` to the ``shardlaw`` command's subcommands."""
    parser = subparsers.add_parser(
        "prove", help="prove two shardings place alike (z3), or show the device where they part",
        description="Prove that two shardings place every block of an array on the same "
                    "devices, or show a device where they differ. Shardings: "
                    "'mesh=2x4:x,y spec=x,y', 'gspmd:{devices=[2,4]<=[8]}', 'single:0', or JSON.")
    parser.add_argument("a", metavar="A", help="the first sharding")
    parser.add_argument("b", metavar="B", help="the second sharding")
    parser.add_argument("--shape", help="the array shape, like 8,8 (0 for an empty dimension)")
    parser.add_argument("--rank", type=int, help="with --max-dim instead of --shape: prove for "
                                                 "every shape of this rank")
    parser.add_argument("--max-dim", type=int, help="the largest dimension size for --rank")
    parser.add_argument("--timeout", type=float, default=10.0, help="solver time limit, seconds")
    parser.add_argument("--svg", metavar="FILE", help="write both placements as SVG")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``shardlaw prove``; returns the exit status."""
    from shardlaw.spec import Rejection
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if args.svg:
            _check_svg_path(args.svg)
        a, b = _read(args.a, "A"), _read(args.b, "B")
        shape = None if args.shape is None else tuple(parse_ints(args.shape, "--shape"))
        if shape is None and (args.rank is None or args.max_dim is None):
            raise ShardingTextError("give --shape, or --rank and --max-dim")
        from shardlaw.spec import prove_equivalent
        result = prove_equivalent(a, b, shape, rank=args.rank, max_dim=args.max_dim,
                                  timeout_s=args.timeout)
    except (ShardingTextError, Rejection) as problem:
        err.write(f"shardlaw prove: {one_line(problem.args[0] if problem.args else problem)}\n")
        return EXIT_BAD_INPUT
    except ImportError as missing:
        err.write(f"shardlaw prove needs z3 (pip install 'shardlaw[z3]'): "
                  f"{one_line(missing)}\n")
        return EXIT_BAD_INPUT
    if args.json:
        out.write(json.dumps(_verdict_json(result)) + "\n")
    else:
        _report(a, b, shape, args, result, out)
    if args.svg:
        try:
            _write_svg(args.svg, a, b, shape, result, err)
        except OSError as problem:
            err.write(f"shardlaw prove: cannot write --svg {one_line(args.svg)}: "
                      f"{problem.strerror or problem}\n")
            return EXIT_BAD_INPUT
    return {True: EXIT_PROVED, False: EXIT_DIFFERENT, None: EXIT_UNKNOWN}[result.equivalent]


def _write_svg(path: str, a: Any, b: Any, shape: tuple[int, ...] | None, result: Any,
               err: TextIO) -> None:
    if result.equivalent is False:
        title = (f"device {result.device}: {_show_box(result.box_a)} under A, "
                 f"{_show_box(result.box_b)} under B, shape {result.shape}")
        if result.memory_kind_a != result.memory_kind_b:
            title += f" (memory: {result.memory_kind_a} under A, {result.memory_kind_b} under B)"
        picture = placement_svg(a, b, result.shape, result.device, title)
    elif result.equivalent and shape is not None:
        picture = placement_svg(a, b, shape, None, f"the same placement, shape {shape}")
    else:
        err.write("shardlaw prove: no SVG written: there is no single shape to draw\n")
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(picture)


def _check_svg_path(path: str) -> None:
    """Refuse an --svg path that cannot be written before any work is done."""
    from pathlib import Path
    target = Path(path)
    if target.is_dir():
        raise ShardingTextError(f"--svg {one_line(path)} is a directory; give a file name")
    if not (target.parent if str(target.parent) else Path(".")).is_dir():
        raise ShardingTextError(f"--svg {one_line(path)}: no such directory "
                                f"{one_line(target.parent)}")


def _read(text: str, label: str) -> Any:
    try:
        return parse_sharding(text)
    except ShardingTextError as problem:
        raise ShardingTextError(f"cannot read {label}: {problem}") from None


def _show_box(box: Box | None) -> str:
    if box is None:
        return "nothing"
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"


def _verdict_json(result: Any) -> dict[str, Any]:
    if result.equivalent is None:
        return {"verdict": "unknown", "reason": result.reason}
    if result.equivalent:
        return {"verdict": "proved", "shape": result.shape, "rank": result.rank,
                "max_dim": result.max_dim, "solver_seconds": result.solver_seconds}
    return {"verdict": "counterexample", "device": result.device, "box_a": result.box_a,
            "box_b": result.box_b, "shape": result.shape,
            "memory_kind_a": result.memory_kind_a, "memory_kind_b": result.memory_kind_b}


# How each method is named in the verdict line.
_HOW = {"direct": "a direct pass over the device orders", "solver": "z3",
        "enumeration": "enumeration of a small mesh's symbolic orders"}


def _report(a: Any, b: Any, shape: tuple[int, ...] | None, args: argparse.Namespace,
            result: Any, out: TextIO) -> None:
    from shardlaw.spec import Rejection, jax_equivalent
    w = out.write
    w(f"A: {a!r}\nB: {b!r}\n")
    scope = f"shape {shape}" if shape is not None else \
        f"every shape of rank {args.rank} with dimensions up to {args.max_dim} that both divide"
    if result.equivalent is None:
        w(f"unknown for {scope}: {result.reason}\n")
        return
    if result.equivalent:
        how = _HOW.get(result.method, result.method)
        if result.method == "solver":
            orders = "tables of explicit orders" if result.tables else "symbolic orders"
            how = f"z3, {result.solver_seconds * 1e3:.1f} ms, {orders}"
        w(f"proved: every device holds the same block under A and B, in the same memory "
          f"kind, for {scope} ({how}; {result.seconds * 1e3:.1f} ms in all)\n")
    elif result.memory_kind_a != result.memory_kind_b:
        w(f"not equivalent: A holds its blocks in {result.memory_kind_a} memory and B in "
          f"{result.memory_kind_b} memory; device {result.device} holds {_show_box(result.box_a)} "
          f"under A and {_show_box(result.box_b)} under B, for shape {result.shape}\n")
    else:
        w(f"not equivalent: device {result.device} holds {_show_box(result.box_a)} under A "
          f"and {_show_box(result.box_b)} under B, for shape {result.shape}\n")
    ndim = len(shape) if shape is not None else args.rank
    try:
        verdict = "yes" if jax_equivalent(a, b, ndim) else "no"
    except Rejection as problem:
        verdict = f"not decided ({problem.args[0]})"
    w(f"JAX-equivalent (EQ-1, Sharding.is_equivalent_to): {verdict}\n")
    if result.equivalent is False:
        for label, sharding in (("A", a), ("B", b)):
            w(f"\n{label}: device ids per block (rows: dimension 0, columns: dimension 1)\n")
            for line in placement_grid(sharding, result.shape, result.device):
                w("  " + line + "\n")
