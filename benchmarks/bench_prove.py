"""How long the solver takes to prove or refute placement-equivalence, against enumeration.

Part 1: for N = 8, 64, 4096, 65536 and 1048576 devices, four pairs of shardings of an
(N // 4, 4) mesh with axes ('x', 'y'):

* iota, equivalent: ``P('y', 'x')`` on the mesh and on its transpose (a (4, N // 4) mesh
  whose device order is ``iota(N).reshape(N // 4, 4).T``);
* iota, not equivalent: ``P('x', 'y')`` on the mesh and on the mesh over a perfect shuffle
  of the devices (``iota(N).reshape(2, N // 2).T``);
* arbitrary, equivalent: ``P('x', 'y')`` on the mesh over a random order of the devices,
  and the GSPMDSharding over devices 0..N-1 whose explicit tile assignment lists that order;
* arbitrary, not equivalent: the same with two entries of the tile assignment swapped.

Each is timed with ``prove_equivalent`` (the whole call: checks, encoding and solving) and
with brute force: ``devices_indices_map`` of both shardings, compared. Medians of several
repeats (fewer at the largest sizes; the table says how many). Brute force is skipped above
``--brute-limit`` devices (default 65536), and says so.

Part 2: the measurement behind the encoding. A transposed-mesh pair over N devices is
proved with the three encodings of ``prove_equivalent(..., encoding=...)``: ``digits`` (the
default), ``bitvector`` (the solver's own bvudiv/bvurem) and ``integer`` (div/mod on
integers), for N a power of two (2^16, 2^20) and not (15,015 = 3·5·7·11·13 and
459,459 = 3^3·7·11·13·17), each with a time limit (``--limit``, default 30 s).

Run: ``python benchmarks/bench_prove.py`` (``--quick`` for fewer repeats and a 5 s limit).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from typing import Any, Callable

from shardlaw.spec import (
    DeviceList, GSPMDSharding, Iota, Mesh, NamedSharding, P, devices_indices_map, tiled,
)
from shardlaw.spec.prove.smt import prove_equivalent

DEVICE_COUNTS = (8, 64, 4096, 65536, 1048576)


def pairs(n: int) -> dict[str, tuple[Any, Any, tuple[int, ...]]]:
    """The four pairs of Part 1 over ``n`` devices (a multiple of 8)."""
    mesh = Mesh.iota((n // 4, 4), ("x", "y"))
    transposed = Mesh((4, n // 4), ("y", "x"), DeviceList(Iota((n // 4, 4), (1, 0))))
    shuffled = Mesh((n // 4, 4), ("x", "y"), DeviceList(Iota((2, n // 2), (1, 0))))
    order = list(range(n))
    random.Random(0).shuffle(order)
    scrambled = Mesh((n // 4, 4), ("x", "y"), order)
    swapped = list(order)
    swapped[1], swapped[n // 2] = swapped[n // 2], swapped[1]
    return {
        "iota, equivalent": (NamedSharding(mesh, P("y", "x")),
                             NamedSharding(transposed, P("y", "x")), (16, n)),
        "iota, not equivalent": (NamedSharding(mesh, P("x", "y")),
                                 NamedSharding(shuffled, P("x", "y")), (n, 16)),
        "arbitrary, equivalent": (NamedSharding(scrambled, P("x", "y")),
                                  GSPMDSharding(range(n), tiled((n // 4, 4), tuple(order))),
                                  (n, 16)),
        "arbitrary, not equivalent": (NamedSharding(scrambled, P("x", "y")),
                                      GSPMDSharding(range(n), tiled((n // 4, 4), tuple(swapped))),
                                      (n, 16)),
    }


def median_ms(call: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, result


def _brute_force(a: Any, b: Any, shape: tuple[int, ...]) -> bool:
    return devices_indices_map(a, shape) == devices_indices_map(b, shape)


def _repeats(n: int, arbitrary: bool, quick: bool) -> int:
    if quick:
        return 1 if n >= 65536 else 3
    if n >= 1048576:
        return 1 if arbitrary else 5
    return 3 if n >= 65536 and arbitrary else 7


def part_one(quick: bool, brute_limit: int) -> None:
    print("Part 1: prove_equivalent against enumeration (median ms per call; repeats in [])")
    rows = [["N devices", "pair", "verdict", "prove ms", "tables", "brute force ms", "speed-up"]]
    # Iota pairs first: an expanded table leaves the solver's memory larger for a while.
    for kind in ("iota", "arbitrary"):
        for n in DEVICE_COUNTS:
            for label, (a, b, shape) in pairs(n).items():
                if not label.startswith(kind):
                    continue
                repeats = _repeats(n, kind == "arbitrary", quick)
                prove_ms, result = median_ms(lambda: prove_equivalent(a, b, shape, timeout_s=300),
                                             repeats)
                verdict = {True: "proved", False: "counterexample", None: "unknown"}[
                    result.equivalent]
                if n <= brute_limit:
                    brute_ms, truth = median_ms(lambda: _brute_force(a, b, shape),
                                                max(1, min(repeats, 3)))
                    assert truth == result.equivalent, (label, n, result)
                    brute, speed = f"{brute_ms:.1f}", f"{brute_ms / prove_ms:.1f}x"
                else:
                    brute, speed = f"skipped (N > {brute_limit})", "-"
                rows.append([str(n), label, verdict, f"{prove_ms:.1f} [{repeats}]",
                             "yes" if result.tables else "no", brute, speed])
    _table(rows)


def _transposed_pair(dims: tuple[int, int]) -> tuple[Any, Any, tuple[int, ...]]:
    rows, cols = dims
    n = rows * cols
    mesh = Mesh.iota((rows, cols), ("x", "y"))
    transposed = Mesh((cols, rows), ("y", "x"), DeviceList(Iota((rows, cols), (1, 0))))
    return NamedSharding(mesh, P("y", "x")), NamedSharding(transposed, P("y", "x")), (cols, n)


ENCODING_SIZES = {
    "2^16 (256 x 256)": (256, 256),
    "2^20 (1024 x 1024)": (1024, 1024),
    "15,015 (105 x 143)": (105, 143),
    "459,459 (189 x 2,431)": (189, 2431),
}


def part_two(limit: float) -> None:
    print(f"\nPart 2: encodings of the same proof (transposed mesh; median ms [runs], "
          f"time limit {limit:g} s)")
    rows = [["N devices", "digits", "bitvector", "integer"]]
    for label, dims in ENCODING_SIZES.items():
        a, b, shape = _transposed_pair(dims)
        row = [label]
        for encoding in ("digits", "bitvector", "integer"):
            prove_equivalent(*_transposed_pair((2, 4)), encoding=encoding)  # warm up
            times, result = [], None
            # Three runs (median) unless a run takes over two seconds.
            while len(times) < 3 and sum(times) < 2.0:
                gc.collect()
                start = time.perf_counter()
                result = prove_equivalent(a, b, shape, timeout_s=limit, encoding=encoding)
                times.append(time.perf_counter() - start)
            ms = statistics.median(times) * 1e3
            row.append(f"{ms:.1f} [{len(times)}]" if result.equivalent
                       else f"unknown after {ms / 1e3:.0f} s")
        rows.append(row)
    _table(rows)


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, 5 s limit in part 2")
    parser.add_argument("--brute-limit", type=int, default=65536,
                        help="skip brute force above this many devices")
    parser.add_argument("--limit", type=float, default=None, help="part 2 time limit, seconds")
    args = parser.parse_args()
    part_one(args.quick, args.brute_limit)
    part_two(args.limit if args.limit is not None else (5.0 if args.quick else 30.0))


if __name__ == "__main__":
    main()
