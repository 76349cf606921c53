"""How long the spec's placement questions take, and how that depends on the device count.

Part 1 (specification only): on iota meshes of N = 8 .. 1,048,576 devices shaped
(N // 4, 4) with axes ('x', 'y'), the median time of ``jax_equivalent``,
``placement_equivalent`` (on a pair that places alike but is written differently: the
same mesh with its axes renamed; and on a pair that places differently), ``shard_shape``
and ``box_of``. Symbolic device orders make these independent of N.

Part 2 (needs JAX): on 8 real JAX CPU devices, ``jax_equivalent`` against JAX's
``a.is_equivalent_to(b, ndim)``, with fresh sharding objects built for every repetition on
both sides (only the comparison is timed). JAX memoizes the lowering
(``named_sharding_to_xla_hlo_sharding``) on the sharding's value, so fresh but equal
objects still hit that cache; the table therefore also shows JAX with the cache cleared
before every repetition.

Run: ``python benchmarks/bench_placement.py`` (``--quick`` for fewer repeats).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

from shardlaw import spec
from shardlaw.spec import Mesh, NamedSharding, P

DEVICE_COUNTS = (8, 4096, 65536, 1048576)


def median_us(call: Callable[[], Any], repeats: int, *, setup: Callable[[], Any] | None = None,
              ) -> float:
    """Median wall time of ``call`` in microseconds; ``setup``'s result is passed if given."""
    times = []
    for _ in range(repeats):
        if setup is None:
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        else:
            args = setup()
            start = time.perf_counter()
            call(*args)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def part_one(repeats: int) -> None:
    print("Part 1: specification only, iota meshes (N // 4, 4), axes ('x', 'y'); "
          "median microseconds per call")
    header = ["N devices", "jax_equivalent", "placement_eq (renamed, equal)",
              "placement_eq (not equal)", "shard_shape", "box_of"]
    rows = [header]
    for n in DEVICE_COUNTS:
        mesh = Mesh.iota((n // 4, 4), ("x", "y"))
        renamed = Mesh.iota((n // 4, 4), ("a", "b"))
        a = NamedSharding(mesh, P("x", "y"))
        same = NamedSharding(renamed, P("a", "b"))
        other = NamedSharding(mesh, P(("x", "y")))
        shape = (n, n)
        device = n // 2 + 1
        assert spec.jax_equivalent(a, same, 2)
        assert spec.placement_equivalent(a, same, shape)
        assert not spec.placement_equivalent(a, other, shape)
        timings = [
            median_us(lambda: spec.jax_equivalent(a, same, 2), repeats),
            median_us(lambda: spec.placement_equivalent(a, same, shape), repeats),
            median_us(lambda: spec.placement_equivalent(a, other, shape), repeats),
            median_us(lambda: spec.shard_shape(a, shape), repeats),
            median_us(lambda: spec.box_of(a, shape, device), repeats),
        ]
        rows.append([f"{n:,}"] + [f"{t:.1f}" for t in timings])
    print_table(rows)


def part_two(repeats: int) -> None:
    try:
        import jax
    except ImportError:
        print("\nPart 2 skipped: JAX is not installed (pip install -e '.[jax]').")
        return
    jax.config.update("jax_num_cpu_devices", 8)
    import numpy as np
    from jax._src import named_sharding as jax_named_sharding
    from jax.sharding import Mesh as JaxMesh, NamedSharding as JaxNamedSharding
    from jax.sharding import PartitionSpec as JaxP

    devices = np.array(jax.devices()[:8])
    if devices.size < 8:
        print(f"\nPart 2 skipped: JAX has {devices.size} devices, not 8.")
        return
    lowering_cache = jax_named_sharding.named_sharding_to_xla_hlo_sharding

    # (label, spec pair builder, JAX pair builder, ndim); every call builds fresh objects.
    cases: list[tuple[str, Callable[[], tuple], Callable[[], tuple], int]] = [
        ("renamed axes, equivalent",
         lambda: (NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("x", "y")),
                  NamedSharding(Mesh.iota((2, 4), ("a", "b")), P("a", "b"))),
         lambda: (JaxNamedSharding(JaxMesh(devices.reshape(2, 4), ("x", "y")), JaxP("x", "y")),
                  JaxNamedSharding(JaxMesh(devices.reshape(2, 4), ("a", "b")), JaxP("a", "b"))),
         2),
        ("P('x','y') vs P('y','x'), not",
         lambda: (NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("x", "y")),
                  NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("y", "x"))),
         lambda: (JaxNamedSharding(JaxMesh(devices.reshape(2, 4), ("x", "y")), JaxP("x", "y")),
                  JaxNamedSharding(JaxMesh(devices.reshape(2, 4), ("x", "y")), JaxP("y", "x"))),
         2),
        ("replicated, reversed devices",
         lambda: (NamedSharding(Mesh.iota((2, 4), ("x", "y")), P()),
                  NamedSharding(Mesh((2, 4), ("x", "y"), list(range(7, -1, -1))), P())),
         lambda: (JaxNamedSharding(JaxMesh(devices.reshape(2, 4), ("x", "y")), JaxP()),
                  JaxNamedSharding(JaxMesh(devices[::-1].reshape(2, 4), ("x", "y")), JaxP())),
         2),
    ]

    def cold(build: Callable[[], tuple]) -> Callable[[], tuple]:
        def setup() -> tuple:
            lowering_cache.cache_clear()
            return build()
        return setup

    print("\nPart 2: 8 JAX CPU devices, fresh sharding objects every repetition; "
          "median microseconds per equivalence call")
    rows = [["pair", "spec.jax_equivalent", "JAX is_equivalent_to", "spec/JAX",
             "JAX, lowering cache cleared", "spec/JAX (cleared)"]]
    for label, build_spec, build_jax, ndim in cases:
        sa, sb = build_spec()
        ja, jb = build_jax()
        assert spec.jax_equivalent(sa, sb, ndim) == ja.is_equivalent_to(jb, ndim), label
        t_spec = median_us(lambda a, b: spec.jax_equivalent(a, b, ndim), repeats,
                           setup=build_spec)
        t_jax = median_us(lambda a, b: a.is_equivalent_to(b, ndim), repeats, setup=build_jax)
        t_cold = median_us(lambda a, b: a.is_equivalent_to(b, ndim), repeats,
                           setup=cold(build_jax))
        rows.append([label, f"{t_spec:.1f}", f"{t_jax:.1f}", f"{t_spec / t_jax:.2f}",
                     f"{t_cold:.1f}", f"{t_spec / t_cold:.2f}"])
    print_table(rows)


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print("  ".join(cell.rjust(w) if k and i else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))))
        if k == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2000, help="repetitions per timing")
    parser.add_argument("--quick", action="store_true", help="200 repetitions per timing")
    parser.add_argument("--no-jax", action="store_true", help="run part 1 only")
    args = parser.parse_args(argv)
    repeats = 200 if args.quick else args.repeats
    part_one(repeats)
    if not args.no_jax:
        part_two(repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
