"""How long the spec takes to decide a whole jit call, against the device and argument count.

A call of ``A`` committed arguments, each an (N, 64) array on an iota mesh of N devices
shaped (N // 8, 8) with axes ('data', 'model'), half of them with an in_sharding equal to
their own (so RES-4 compares the lowered HLO), two results (one with an out_sharding, one
left to the compiler, whose choice is given), is decided by :func:`shardlaw.spec.jit_call`.
A second call puts every in_sharding over the *abstract* mesh of N devices and passes numpy
arguments: jit decides it up to the device assignment and rejects it (DA-4), as JAX does
without devices. The table gives the median time per call and per argument, and the ratio
of the two calls' times: device assignments stay symbolic on concrete iota meshes as on
abstract ones, so neither grows with the device count.

Run: ``python benchmarks/bench_jit_call.py`` (``--quick`` for fewer repeats).
"""

from __future__ import annotations

import argparse
import statistics
import time

from shardlaw.spec import (
    AbstractMesh, Arg, Call, JitOptions, Mesh, NamedSharding, Out, P, jit_call,
)
from shardlaw.spec.placement.blocks import to_hlo

SPECS = (P("data"), P(None, "model"), P("data", "model"), P(("data", "model")), P())


def concrete_call(n: int, args: int) -> Call:
    mesh = Mesh.iota((n // 8, 8), ("data", "model"))
    arrays, given = [], []
    for i in range(args):
        sharding = NamedSharding(mesh, SPECS[i % len(SPECS)])
        arrays.append(Arg.committed((n, 64), sharding))
        given.append(sharding if i % 2 == 0 else None)
    out = NamedSharding(mesh, P("data"))
    return Call(args=tuple(arrays), outputs=(Out((n, 64), source=0), Out((n, 64))),
                options=JitOptions(in_shardings=tuple(given), out_shardings=(out, None)),
                compiler=(None, to_hlo(NamedSharding(mesh, P(None, "model")), 2)),
                devices=n)


def abstract_call(n: int, args: int) -> Call:
    mesh = AbstractMesh((n // 8, 8), ("data", "model"))
    given = tuple(NamedSharding(mesh, SPECS[i % len(SPECS)]) for i in range(args))
    return Call(args=tuple(Arg.numpy((n, 64)) for _ in range(args)), outputs=Out((n, 64)),
                options=JitOptions(in_shardings=given), devices=n)


def median_ms(call: Call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        verdict = jit_call(call)
        times.append(time.perf_counter() - start)
    assert verdict.accepted or verdict.rule == "DA-4", verdict
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    repeats = 5 if parser.parse_args().quick else 25
    print("A jit call decided by the spec (median of %d)" % repeats)
    print(f"{'devices':>9} {'args':>5} | {'concrete ms':>11} {'per arg ms':>10} | "
          f"{'abstract ms':>11} {'per arg ms':>10} | {'ratio':>5}")
    rows = [(n, 10) for n in (8, 64, 4096, 65536, 1048576)] + [(65536, a) for a in (1, 3, 30, 100)]
    for n, a in rows:
        c = median_ms(concrete_call(n, a), repeats)
        b = median_ms(abstract_call(n, a), repeats)
        print(f"{n:>9} {a:>5} | {c:>11.3f} {c / a:>10.3f} | {b:>11.3f} {b / a:>10.3f} | "
              f"{c / b:>5.2f}")


if __name__ == "__main__":
    main()
