"""How long the spec takes to answer for a whole training step, against the device count.

Issue 23's goal: :func:`~shardlaw.spec.explain_program` of a 200-equation step (an inner
jit, activation constraints, a shard_map'd block with a ``psum``) on a 2^16-device mesh in
at most 10 ms; ``vmap`` or ``grad`` of it (the spec's rewrite, then its answer) in at most
twice that; and nothing enumerates devices (the time does not grow with the device count).

The step is built by hand as a :class:`~shardlaw.spec.Program` (no JAX): per layer a matmul,
a constraint, an elementwise op, a constraint and a shard_map'd block. Meshes: 8 devices,
2^16 (concrete, ids 0 .. 2^16 - 1, answered through the run; abstract, answered traced)
and 2^30 (abstract). The table gives, per question, the median CPU time and wall time of an
answer (and the best), its goal, the CPU time as a share of the goal ("of goal"), for a rewrite how many
times the plain answer's it takes ("x explain"), and whether it is within the goal (judged
on CPU time: :func:`median_ms`). Run: ``python benchmarks/bench_program.py`` (``--quick``
for fewer repeats).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from shardlaw.spec import AbstractMesh, Mesh, NamedSharding, P, Rejection, explain_program
from shardlaw.spec.program.description import (
    Jit, Opaque, Program, ShardingConstraint, ShardMap, Value,
)

GOAL_MS = 10.0
EQUATIONS = 200


class Body:
    """A body being written: its inputs, then equations, each result numbered in turn."""

    def __init__(self, inputs: tuple[Value, ...]) -> None:
        self.inputs, self.equations, self.next = inputs, [], len(inputs)

    def add(self, equation: Any) -> int:
        self.equations.append(equation)
        self.next += len(equation.results or (None,))
        return self.next - 1


def step(mesh: Any, devices: int) -> Program:
    """The 200-equation step over ``mesh`` (rows over "data", columns over "model")."""
    abstract = mesh if isinstance(mesh, AbstractMesh) else mesh.abstract
    rows, cols = 64 * mesh.axis_sizes[0], 64 * mesh.axis_sizes[1]
    typed = Value.typed((rows, cols), mesh=abstract)

    def arg(spec: Any) -> Value:
        sharding = NamedSharding(mesh, spec)
        if isinstance(mesh, AbstractMesh):
            return Value.shape_dtype((rows, cols), sharding=sharding)
        return Value.placed((rows, cols), sharding)

    # per shard, every mesh axis manual: a 64 x 64 block, varying over both axes
    per_shard = Value.typed((64, 64), mesh=abstract, varying={"data", "model"})
    summed = Value.typed((64, 64), mesh=abstract, varying={"data"})
    block = Program((per_shard,), (
        Opaque((0,), primitive="sin", results=(per_shard,)),
        Opaque((1,), primitive="psum_invariant", results=(summed,), params=(("axes", ("model",)),)),
        Opaque((2,), primitive="pvary", results=(per_shard,), params=(("axes", ("model",)),)),
    ), outputs=(3,))
    body = Body((typed, typed))
    h = 0
    while len(body.equations) < EQUATIONS - 10:
        a = body.add(Opaque((h, 1), primitive="mul", results=(typed,)))
        b = body.add(ShardingConstraint((a,), sharding=NamedSharding(mesh, P("data", "model"))))
        c = body.add(Opaque((b,), primitive="tanh", results=(typed,)))
        d = body.add(ShardMap((c,), (typed,), body=block, mesh=mesh,
                              in_specs=(P("data", "model"),), out_specs=(P("data", "model"),),
                              manual_axes={"data", "model"}))
        h = body.add(ShardingConstraint((d,), sharding=NamedSharding(mesh, P("data"))))
    inner = Program(tuple(body.inputs), tuple(body.equations), outputs=(h,))
    top = Body((arg(P("data")), arg(P(None, "model"))))
    out = top.add(Jit((0, 1), (typed,), body=inner, name="layers"))
    while len(top.equations) + len(inner.equations) < EQUATIONS - 1:
        out = top.add(Opaque((out,), primitive="neg", results=(typed,)))
    loss = top.add(Opaque((out,), primitive="reduce_sum", results=(Value.typed((), mesh=abstract),),
                          params=(("axes", (0, 1)), ("out_sharding", None))))
    return Program(top.inputs, tuple(top.equations), outputs=(loss,), devices=devices)


def meshes() -> list[tuple[str, Any, int, str]]:
    names = ("data", "model")
    return [("8, concrete", Mesh.iota((2, 4), names), 8, "run"),
            ("2^16, concrete", Mesh.iota((256, 256), names), 1 << 16, "run"),
            ("2^16, abstract", AbstractMesh((256, 256), names), 1 << 16, "trace"),
            ("2^30, abstract", AbstractMesh((1 << 15, 1 << 15), names), 1 << 30, "trace")]


def questions(program: Program, until: str) -> dict[str, Callable[[], Any]]:
    asked = {"explain": lambda: explain_program(program, until=until)}
    try:
        from shardlaw.spec.program.batching import vmap_program
        asked["vmap + explain"] = lambda: explain_program(
            vmap_program(program, axis_size=8), until=until)
    except ImportError:
        pass
    try:
        from shardlaw.spec.program.autodiff import grad_program
        asked["grad + explain"] = lambda: explain_program(grad_program(program), until=until)
    except ImportError:
        pass
    return asked


def median_ms(question: Callable[[], Any], repeats: int
              ) -> tuple[float, float, float, Any]:
    """The median CPU time, the best CPU time and the median wall time of one answer, in
    ms, and the answer.

    The goal is judged on CPU time (this process's, ``time.process_time``): on a machine
    shared with other work, wall time counts their turns too. Alone, the two agree. The
    best CPU time is what an answer takes when no other work breaks in (on a busy machine
    even CPU time grows: the other work's turns cool this process's caches)."""
    answer = question()
    cpu, wall = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        question()
        cpu.append((time.process_time() - started_cpu) * 1e3)
        wall.append((time.perf_counter() - started) * 1e3)
    return statistics.median(cpu), min(cpu), statistics.median(wall), answer


def jax_anchor(program: Program) -> float:
    """Seconds JAX 0.10.2 takes to lower and compile the same step (``program``, over 8
    devices) as a function on 8 CPU devices, timed once after a warm-up of its own."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding as JaxSharding
    from jax.sharding import PartitionSpec as JaxP

    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    inner = program.equations[0].body
    blocks = sum(eq.kind == "shard_map" for eq in inner.equations)
    negs = sum(getattr(eq, "primitive", "") == "neg" for eq in program.equations)

    def function() -> Any:
        def block(x: Any) -> Any:   # sin, psum_invariant, pvary as the spec's body
            return jax.lax.pcast(jax.lax.psum(jnp.sin(x), "model"), "model", to="varying")
        mapped = jax.shard_map(block, mesh=mesh, in_specs=JaxP("data", "model"),
                               out_specs=JaxP("data", "model"))

        @jax.jit
        def layers(h: Any, w: Any) -> Any:
            for _ in range(blocks):
                b = jax.lax.with_sharding_constraint(h * w, JaxSharding(mesh, JaxP("data", "model")))
                h = jax.lax.with_sharding_constraint(mapped(jnp.tanh(b)),
                                                     JaxSharding(mesh, JaxP("data")))
            return h

        def f(x: Any, w: Any) -> Any:
            out = layers(x, w)
            for _ in range(negs):
                out = -out
            return out.sum()
        return jax.jit(f)
    args = [jax.ShapeDtypeStruct(v.shape, jnp.float32, sharding=JaxSharding(mesh, JaxP(*spec)))
            for v, spec in zip(program.inputs, (("data",), (None, "model")))]
    function().lower(*args).compile()
    start = time.perf_counter()
    function().lower(*args).compile()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--no-jax", action="store_true", help="no anchor")
    options = parser.parse_args()
    repeats = 5 if options.quick else 30
    anchor = None
    if not options.no_jax:
        import jax
        jax.config.update("jax_num_cpu_devices", 8)
        anchor = jax_anchor(step(*meshes()[0][1:3]))
        print(f"anchor: JAX 0.10.2 lowers and compiles the step on 8 devices in "
              f"{anchor * 1e3:.1f} ms (x JAX: an answer's CPU time over it)")
    print(f"{'mesh':<16} {'question':<16} {'eqns':>5} {'cpu ms':>8} {'best':>6} "
          f"{'wall ms':>8} {'goal':>5} {'of goal':>7} {'x explain':>9} {'x JAX':>7}  verdict")
    for name, mesh, devices, until in meshes():
        program = step(mesh, devices)
        count = len(program.equations) + sum(len(eq.body.equations) for eq in program.equations
                                             if eq.body is not None)
        explained = None
        for question, ask in questions(program, until).items():
            try:
                cpu, best, wall, answer = median_ms(ask, repeats)
            except Rejection as refused:  # the rewrite itself refuses the program
                print(f"{name:<16} {question:<16} {count:>5} {'-':>8} {'-':>6} {'-':>8}  "
                      f"not rewritten: {refused.rule}: {str(refused)[:90]}")
                continue
            goal = GOAL_MS * (1 if question == "explain" else 2)
            explained = cpu if question == "explain" else explained
            times = "" if explained is None or question == "explain" else f"{cpu / explained:.1f}"
            status = "accepted" if answer.accepted else f"refused {answer.rule}"
            ratio = f"{cpu / (anchor * 1e3):.3f}" if anchor else "-"
            print(f"{name:<16} {question:<16} {count:>5} {cpu:>8.2f} {best:>6.2f} {wall:>8.2f} "
                  f"{goal:>5g} "
                  f"{cpu / goal:>7.2f} {times:>9} {ratio:>7}  "
                  f"{'ok' if cpu <= goal else 'OVER'} ({status})")


if __name__ == "__main__":
    main()
