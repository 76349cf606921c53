"""The engine against jax.jit, side by side in one run: dispatch, first call, compile counts.

    python benchmarks/bench_engine.py            # about a minute on 2 cores
    python benchmarks/bench_engine.py --quick    # fewer repeats

Prints one table: cache-hit dispatch (1 device and 1 array, with call counting off — the
default — and on; a 10-array pytree; an array sharded over 8 devices), the first call (trace + lower + compile + run, on a sharded MLP
training step, and on 200 small fresh functions one after another, as a library's layer
tests jit them), and the number of compilations on a workload of placement-equal but
differently written shardings, with the goals of issues 6 and 11 beside each ratio (a
row through ``install()``, and a donating MLP step whose donation check runs on every call). Timings
alternate between the two implementations and keep the best of several rounds, so that
the noise of a shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable

os.environ.setdefault("XLA_FLAGS", "")
if "--xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    import jax
    jax.config.update("jax_num_cpu_devices", 8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from shardlaw.engine import count_calls, install, is_engine_function, jit as engine_jit  # noqa: E402
from shardlaw.engine.internals import JAX_JIT  # noqa: E402
from shardlaw.properties.engine_workloads import (  # noqa: E402
    count_compiles, mlp, placement_equal_workload,
)


def per_call(fn: Callable, args: tuple, calls: int) -> float:
    """Seconds per call over ``calls`` calls (results waited for at the end)."""
    out = None
    start = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def dispatch(f: Callable, args: tuple, calls: int, rounds: int,
             counting: bool = False, installed: bool = False,
             **options: Any) -> tuple[float, float]:
    """Best per-call time of jax.jit(f) and engine jit(f) on a cache hit, alternating rounds.

    ``counting=True`` measures the engine with call counting on (a Python frame in front
    of the C++ dispatcher; :func:`shardlaw.engine.count_calls`); ``installed=True`` makes
    the engine's function by calling ``jax.jit`` under :func:`shardlaw.engine.install`.
    """
    count_calls(counting)
    try:
        theirs = JAX_JIT(f, **options)
        if installed:
            with install():
                mine = jax.jit(f, **options)
            assert is_engine_function(mine)
        else:
            mine = engine_jit(f, **options)
    finally:
        count_calls(False)
    for fn in (theirs, mine):
        jax.block_until_ready(fn(*args))
        per_call(fn, args, max(calls // 10, 10))
    best = {id(theirs): float("inf"), id(mine): float("inf")}
    for r in range(rounds):
        for fn in ((theirs, mine) if r % 2 else (mine, theirs)):
            best[id(fn)] = min(best[id(fn)], per_call(fn, args, calls))
    return best[id(theirs)], best[id(mine)]


def first_calls(rounds: int) -> tuple[float, float]:
    """Median time of a first call (trace, lower, compile, run) of fresh MLP steps.

    The two go first in turn: whichever runs second finds the machine warmer.
    """
    make, step, x, y = mlp()
    theirs, mine = [], []
    for r in range(rounds):
        pair = [(jax.jit, theirs), (engine_jit, mine)]
        for jit_fn, times in (pair if r % 2 else pair[::-1]):
            params = make()
            fresh = _fresh(step)
            start = time.perf_counter()
            jax.block_until_ready(jit_fn(fresh)(params, x, y))
            times.append(time.perf_counter() - start)
    return statistics.median(theirs), statistics.median(mine)


def donating_steps(rounds: int, steps: int) -> tuple[float, float]:
    """Best per-step time of a sharded MLP step that donates its parameters.

    A donating function has the engine's donation check (ENG-3, ENG-6) in front of the
    dispatcher on every call; this row shows what that costs on a real step.
    """
    make, step, x, y = mlp()
    fns = {"jax": JAX_JIT(step, donate_argnums=0), "engine": engine_jit(step, donate_argnums=0)}
    best = {name: float("inf") for name in fns}
    for r in range(rounds):
        for name in (("jax", "engine") if r % 2 else ("engine", "jax")):
            params = make()
            params, _ = fns[name](params, x, y)        # compiled, and a known signature
            start = time.perf_counter()
            for _ in range(steps):
                # Waiting for each step, as a loop that reads its loss does: thousands of
                # collective programs queued at once can starve XLA's CPU thread pool.
                params, loss = fns[name](params, x, y)
                jax.block_until_ready(loss)
            best[name] = min(best[name], (time.perf_counter() - start) / steps)
    return best["jax"], best["engine"]


def small_programs(count: int) -> list[tuple[Callable, tuple]]:
    """``count`` small programs of different shapes, as a library's layer tests jit them:
    einsums, batched einsums, elementwise chains and dense layers over a parameter dict."""
    def matmul(a, b):
        return jnp.einsum("ij,jk->ik", a, b)

    def batched(a, b):
        return jnp.einsum("bij,bjk->bik", a, b).sum(0)

    def elementwise(a, b):
        return jnp.tanh(a) * b + jnp.exp(-a)

    def dense(params, x):
        return jax.nn.relu(x @ params["kernel"] + params["bias"]) * params["scale"]

    def ones(*shape: int) -> np.ndarray:
        return np.ones(shape, np.float32)

    programs = []
    for i in range(count):
        n, m = 4 + (i % 25) * 4, 3 + (i // 25) * 2
        programs.append([
            (matmul, (ones(n, m), ones(m, n))),
            (batched, (ones(2, n, m), ones(2, m, n))),
            (elementwise, (ones(n, m), ones(n, m))),
            (dense, ({"kernel": ones(m, n), "bias": ones(n), "scale": ones()}, ones(4, m))),
        ][i % 4])
    return programs


def many_first_calls(count: int, rounds: int) -> tuple[float, float]:
    """Median over rounds of the total time of ``count`` first calls of small fresh functions.

    Every function is new (no cache knows it): its first call traces, lowers, compiles and
    runs. Each program runs under both in turn, whichever goes first alternating, so that
    what the first warms (JAX's own jitted helpers, the machine) favours neither.
    """
    programs = small_programs(count)
    totals: dict[str, list[float]] = {"jax": [], "engine": []}
    for r in range(rounds):
        spent = {"jax": 0.0, "engine": 0.0}
        for i, (body, args) in enumerate(programs):
            pair = [("jax", JAX_JIT), ("engine", engine_jit)]
            for name, jit_fn in (pair if (i + r) % 2 else pair[::-1]):
                f = jit_fn(_fresh(body))
                start = time.perf_counter()
                jax.block_until_ready(f(*args))
                spent[name] += time.perf_counter() - start
        for name in spent:
            totals[name].append(spent[name])
    return statistics.median(totals["jax"]), statistics.median(totals["engine"])


def _fresh(fun: Callable) -> Callable:
    """A new function object with ``fun``'s behaviour (no cache knows it yet)."""
    def fresh(*args: Any) -> Any:
        return fun(*args)
    return fresh


def compile_counts() -> tuple[int, int, int, int]:
    """(variants, placement classes, jax.jit's compilations, the engine's) on the workload."""
    shape, workload = placement_equal_workload()
    host = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    arrays = [jax.device_put(host, s) for _, _, s in workload]
    counts = []
    for jit_fn in (jax.jit, engine_jit):
        jax.clear_caches()
        f = jit_fn(_fresh(lambda a: a * 2 + 1))
        with count_compiles() as counter:
            for a in arrays:
                jax.block_until_ready(f(a))
                jax.block_until_ready(f(a))
        counts.append(counter.count)
    classes = len({placement for _, placement, _ in workload})
    return len(workload), classes, counts[0], counts[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    options = parser.parse_args(argv)
    rounds = 3 if options.quick else 11
    scale = 1 if options.quick else 3

    one = jnp.ones((8,), jnp.float32)
    tree = {f"a{i}": jnp.full((8,), float(i), jnp.float32) for i in range(10)}
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
    sharded = jax.device_put(jnp.ones((512, 512), jnp.float32), NamedSharding(mesh, P("x", "y")))

    rows = []
    t, m = dispatch(lambda a: a + 1, (one,), 2000 * scale, rounds)
    rows.append(("cache-hit dispatch, 1 device, 1 array", t, m, 1.10, "us"))
    t, m = dispatch(lambda a: a + 1, (one,), 2000 * scale, rounds, counting=True)
    rows.append(("  the same, call counting on (opt-in)", t, m, None, "us"))
    t, m = dispatch(lambda a: a + 1, (one,), 2000 * scale, rounds, installed=True)
    rows.append(("  the same, jax.jit under install()", t, m, 1.10, "us"))
    t, m = dispatch(lambda d: sum(d.values()), (tree,), 1000 * scale, rounds)
    rows.append(("cache-hit dispatch, 10-array pytree", t, m, 1.20, "us"))
    t, m = dispatch(lambda a: a * 2, (sharded,), 200 * scale, rounds)
    rows.append(("cache-hit dispatch, 8-device sharded array", t, m, 1.05, "us"))
    t, m = donating_steps(rounds, 50 * scale)
    rows.append(("MLP training step, donating its parameters", t, m, None, "us"))
    t, m = first_calls(2 * rounds)
    rows.append(("first call (trace+lower+compile), MLP step", t, m, 1.05, "ms"))
    t, m = many_first_calls(200, 1 if options.quick else 3)
    rows.append(("first calls of 200 small fresh functions", t, m, 1.05, "s"))

    print(f"jax {jax.__version__}, {len(jax.devices())} {jax.devices()[0].platform} devices, "
          f"{os.cpu_count()} cores, python {sys.version.split()[0]}\n")
    print(f"{'':46s} {'jax.jit':>10s} {'engine':>10s} {'ratio':>7s} {'goal':>6s}")
    for name, theirs, mine, goal, unit in rows:
        k = {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
        ratio = mine / theirs
        if goal is None:   # an opt-in mode, shown for what it costs
            print(f"{name:46s} {theirs * k:8.2f}{unit} {mine * k:8.2f}{unit} {ratio:6.2f}x "
                  f"{'-':>6s}")
            continue
        mark = "ok" if ratio <= goal else "MISSED"
        print(f"{name:46s} {theirs * k:8.2f}{unit} {mine * k:8.2f}{unit} {ratio:6.2f}x "
              f"{goal:5.2f}x {mark}")
    variants, classes, theirs_count, mine_count = compile_counts()
    mark = "ok" if mine_count == classes else "MISSED"
    print(f"\ncompilations on {variants} placement-equal variants ({classes} placement classes, "
          f"each called twice): jax.jit {theirs_count}, engine {mine_count} "
          f"(goal: {classes}) {mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
