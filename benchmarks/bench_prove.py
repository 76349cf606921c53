"""How long the prover takes to prove or refute placement-equivalence, by each method, against enumeration.

Part 1: for N = 8, 64, 4096, 65536 and 1048576 devices, four pairs of shardings of an
(N // 4, 4) mesh with axes ('x', 'y'):

* iota, equivalent: ``P('y', 'x')`` on the mesh and on its transpose (a (4, N // 4) mesh
  whose device order is ``iota(N).reshape(N // 4, 4).T``);
* iota, not equivalent: ``P('x', 'y')`` on the mesh and on the mesh over a perfect shuffle
  of the devices (``iota(N).reshape(2, N // 2).T``);
* arbitrary, equivalent: ``P('x', 'y')`` on the mesh over a random order of the devices,
  and the GSPMDSharding over devices 0..N-1 whose explicit tile assignment lists that order;
* arbitrary, not equivalent: the same with two entries of the tile assignment swapped.

Each is timed with ``prove_equivalent`` (the whole call: checks, reading the orders,
deciding) by each method: ``auto`` (the default, which picks: the direct pass for explicit
orders, enumeration for symbolic orders up to ``ENUMERATION_LIMIT`` devices, the solver
above), ``direct`` (the pass, symbolic orders written out; refused above ``TABLE_LIMIT``)
and ``solver`` (z3; explicit orders expanded into one instance per device); and with
brute force: ``devices_indices_map`` of both shardings, compared. A fast call is timed in
loops of at least 50 ms; the figure is the median per call over the repeats (the table
says how many). Brute force is skipped above ``--brute-limit`` devices, and says so.

Part 2: the measurement behind the solver's encoding. A transposed-mesh pair over N
devices is proved by the solver with the three encodings of ``prove_equivalent(...,
encoding=...)``: ``digits`` (the default), ``bitvector`` (the solver's own bvudiv/bvurem)
and ``integer`` (div/mod on integers), for N a power of two (2^16, 2^20) and not (15,015 =
3·5·7·11·13 and 459,459 = 3^3·7·11·13·17), each with a time limit (``--limit``, default
30 s).

Part 3: the measurement behind ``ENUMERATION_LIMIT``. The two iota pairs of part 1 at N
from 8 to 65,536, decided by writing the symbolic orders out (``method="direct"``) and by
the solver, timed in turn (median of loops of at least 50 ms); the last line names the
largest N at which enumeration was the faster for both pairs.

Part 4: the questions answered before any order is read: 2^40 devices (a symbolic mesh)
against 8, on a shape with a zero-size dimension (it took 31-32 s under ``timeout_s=5``
before the device counts were compared first).

Run: ``python benchmarks/bench_prove.py`` (``--quick`` for fewer repeats, brute force up to
4,096 devices and a 5 s limit in part 2).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from typing import Any, Callable

from shardlaw.spec import (
    DeviceList, GSPMDSharding, Iota, Mesh, NamedSharding, P, SingleDeviceSharding,
    devices_indices_map, tiled,
)
from shardlaw.spec.prove.smt import ENUMERATION_LIMIT, METHODS, prove_equivalent

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
    """The median milliseconds per call over ``repeats``; a call faster than 50 ms is run in
    a loop of at least 50 ms per repeat."""
    gc.collect()
    start = time.perf_counter()
    result = call()
    first = time.perf_counter() - start
    loops = 1 if first >= 0.05 else max(1, int(0.05 / max(first, 1e-7)))
    times = [first] if loops == 1 else []
    while len(times) < repeats:
        gc.collect()
        start = time.perf_counter()
        for _ in range(loops):
            result = call()
        times.append((time.perf_counter() - start) / loops)
    return statistics.median(times) * 1e3, result


def _brute_force(a: Any, b: Any, shape: tuple[int, ...]) -> bool:
    return devices_indices_map(a, shape) == devices_indices_map(b, shape) and \
        a.memory_kind == b.memory_kind


def _repeats(n: int, quick: bool) -> int:
    if n >= 65536:
        return 1 if quick or n >= 1048576 else 3
    return 3 if quick else 7


def _cell(ms: float | None, result: Any = None) -> str:
    if ms is None:
        return "-"
    if result is not None and result.equivalent is None:
        return f"unknown ({ms:.1f})"
    return f"{ms:.3f}" if ms < 1 else f"{ms:.1f}"


def part_one(quick: bool, brute_limit: int) -> None:
    print("Part 1: prove_equivalent by each method against enumeration (median ms per call; "
          "repeats in [])")
    rows = [["N devices", "pair", "verdict", "auto [method]", "direct", "solver",
             "enumeration", "enumeration / auto"]]
    # Iota pairs first: an expanded table leaves the solver's memory larger for a while.
    for kind in ("iota", "arbitrary"):
        for n in DEVICE_COUNTS:
            for label, (a, b, shape) in pairs(n).items():
                if not label.startswith(kind):
                    continue
                repeats = _repeats(n, quick)
                timed: dict[str, tuple[float, Any]] = {}
                for method in METHODS:
                    timed[method] = median_ms(
                        lambda: prove_equivalent(a, b, shape, timeout_s=300, method=method),
                        repeats)
                auto_ms, result = timed["auto"]
                for method, (_, answer) in timed.items():
                    assert answer.equivalent in (result.equivalent, None), (label, n, method)
                verdict = {True: "proved", False: "counterexample", None: "unknown"}[
                    result.equivalent]
                if n <= brute_limit:
                    brute_ms, truth = median_ms(lambda: _brute_force(a, b, shape),
                                                max(1, min(repeats, 3)))
                    assert truth == result.equivalent, (label, n, result)
                    brute, ratio = _cell(brute_ms), f"{brute_ms / auto_ms:.1f}x"
                else:
                    brute, ratio = f"skipped (N > {brute_limit})", "-"
                rows.append([str(n), label, verdict,
                             f"{_cell(auto_ms)} [{repeats}, {result.method}]",
                             _cell(*timed["direct"]), _cell(*timed["solver"]), brute, ratio])
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
    print(f"\nPart 2: the solver's encodings of the same proof (transposed mesh; median ms "
          f"[runs], time limit {limit:g} s)")
    rows = [["N devices", "digits", "bitvector", "integer"]]
    for label, dims in ENCODING_SIZES.items():
        a, b, shape = _transposed_pair(dims)
        row = [label]
        for encoding in ("digits", "bitvector", "integer"):
            prove_equivalent(*_transposed_pair((2, 4)), encoding=encoding,
                             method="solver")  # warm up
            times, result = [], None
            # Three runs (median) unless a run takes over two seconds.
            while len(times) < 3 and sum(times) < 2.0:
                gc.collect()
                start = time.perf_counter()
                result = prove_equivalent(a, b, shape, timeout_s=limit, encoding=encoding,
                                          method="solver")
                times.append(time.perf_counter() - start)
            ms = statistics.median(times) * 1e3
            row.append(f"{ms:.1f} [{len(times)}]" if result.equivalent
                       else f"unknown after {ms / 1e3:.0f} s")
        rows.append(row)
    _table(rows)


THRESHOLD_COUNTS = (8, 64, 512, 2048, 4096, 8192, 16384, 65536)


def part_three(quick: bool) -> None:
    print(f"\nPart 3: symbolic orders written out (enumeration) against the solver (median ms "
          f"per call; ENUMERATION_LIMIT = {ENUMERATION_LIMIT})")
    rows = [["N devices", "pair", "enumeration", "solver", "solver / enumeration"]]
    faster_up_to, still = 0, True
    for n in THRESHOLD_COUNTS:
        both_faster = True
        for label in ("iota, equivalent", "iota, not equivalent"):
            a, b, shape = pairs(n)[label]
            times: dict[str, list[float]] = {"direct": [], "solver": []}
            for _ in range(3 if quick else 7):  # in turn, so that both see the same load
                for method in times:
                    ms, _ = median_ms(lambda: prove_equivalent(a, b, shape, method=method), 1)
                    times[method].append(ms)
            enum_ms, solver_ms = (statistics.median(times[m]) for m in ("direct", "solver"))
            both_faster = both_faster and enum_ms < solver_ms
            rows.append([str(n), label, _cell(enum_ms), _cell(solver_ms),
                         f"{solver_ms / enum_ms:.2f}x"])
        still = still and both_faster
        if still:
            faster_up_to = n
    _table(rows)
    print(f"enumeration was the faster for both pairs at every N up to {faster_up_to} "
          f"in this run (0: not even at 8); ENUMERATION_LIMIT is {ENUMERATION_LIMIT}")


def part_four() -> None:
    print("\nPart 4: answered before any order is read (median ms per call, timeout_s=5)")
    huge = Mesh.iota((2**20, 2**20), ("x", "y"))
    rows = [["question", "answer", "ms"]]
    for label, (a, b, shape) in {
        "2^40 devices (iota) vs 8 (iota), shape (0,)": (
            NamedSharding(huge, P("x")), NamedSharding(Mesh.iota((8,), ("x",)), P("x")), (0,)),
        "2^40 devices (iota) vs 8 (explicit), shape (0,)": (
            NamedSharding(huge, P("x")),
            NamedSharding(Mesh((8,), ("x",), list(range(7, -1, -1))), P("x")), (0,)),
        "2^40 devices (iota) vs one device, shape (0, 8)": (
            NamedSharding(huge, P()), SingleDeviceSharding(3), (0, 8)),
        "2^40 devices, P('x', 'y') vs transposed P(), shape (0, 0)": (
            NamedSharding(huge, P("x", "y")),
            NamedSharding(Mesh((2**20, 2**20), ("y", "x"),
                               DeviceList(Iota((2**20, 2**20), (1, 0)))), P()), (0, 0)),
    }.items():
        ms, result = median_ms(lambda: prove_equivalent(a, b, shape, timeout_s=5), 5)
        rows.append([label, type(result).__name__, _cell(ms)])
    _table(rows)


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats, brute force up to 4096 devices, 5 s limit in part 2")
    parser.add_argument("--brute-limit", type=int, default=None,
                        help="skip brute force above this many devices (default 65536)")
    parser.add_argument("--limit", type=float, default=None, help="part 2 time limit, seconds")
    parser.add_argument("--parts", default="1234", help="which parts to run, e.g. 13")
    args = parser.parse_args()
    brute_limit = args.brute_limit if args.brute_limit is not None else (
        4096 if args.quick else 65536)
    if "1" in args.parts:
        part_one(args.quick, brute_limit)
    if "2" in args.parts:
        part_two(args.limit if args.limit is not None else (5.0 if args.quick else 30.0))
    if "3" in args.parts:
        part_three(args.quick)
    if "4" in args.parts:
        part_four()


if __name__ == "__main__":
    main()
