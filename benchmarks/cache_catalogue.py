"""What jax.jit traces, lowers and compiles for a catalogue of named workloads, against the
number of placement classes (the executables the shardlaw cache policy would compile).

Each workload (``shardlaw.properties.cache_workloads.WORKLOADS``) is run in real JAX on 8
CPU devices with fresh function objects, and counted with JAX's own counters: traces
(``count_jit_tracing_cache_miss``), modules lowered (``count_jit_and_pmap_lowerings``),
JAX's "compilation cache misses" (``count_jit_compilation_cache_miss``, which counts new
lowerings), XLA compilations (backend compile events); the last column is the spec's
``policy_classes``. The model's prediction (``explain_cache``) is checked against JAX for
every workload; a disagreement is printed and the script exits with status 1.

Run: ``python benchmarks/cache_catalogue.py`` (``--rst`` prints the table docs/cache.rst holds).
"""

from __future__ import annotations

import argparse
import sys

HEADERS = ("workload", "calls", "traces", "modules", "JAX compilation misses",
           "XLA compiles", "placement classes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rst", action="store_true", help="print the docs' list-table")
    options = parser.parse_args()

    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    from shardlaw.properties.cache_workloads import WORKLOADS, measure, predict

    rows, failed = [], []
    for workload in WORKLOADS:
        measured, predicted = measure(workload), predict(workload)
        if measured != predicted:
            failed.append(f"{workload.name}: JAX {measured.row()}, model {predicted.row()}")
        rows.append((workload.name, *measured.row()))
    print(rst_table(rows) if options.rst else text_table(rows))
    for line in failed:
        print("MODEL DISAGREES:", line, file=sys.stderr)
    return 1 if failed else 0


def text_table(rows: list[tuple]) -> str:
    widths = [max(len(str(r[i])) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
    lines = ["  ".join(f"{h:<{w}}" for h, w in zip(HEADERS, widths))]
    lines += ["  ".join(f"{str(c):<{w}}" for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def rst_table(rows: list[tuple]) -> str:
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in [HEADERS, *rows]:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
