"""How long the spec takes to say where the compiler places a step's values and what the
step communicates, against JAX compiling the same step (issue 33).

Two steps, built by hand as :class:`~shardlaw.spec.Program` values of propagated primitives
only (no JAX), each over a mesh of 2^16 devices (256 x 256, ``"data"`` x ``"model"``; a
concrete mesh of symbolic ids 0 .. 2^16 - 1: propagation is asked of a concrete mesh, and
nothing enumerates its devices):

- ``mlp``: 200 equations, 40 blocks of ``tanh(x @ w1) @ w2 + x`` and a scale, activations
  rows over ``"data"``, ``w1`` columns and ``w2`` rows over ``"model"`` (Megatron's MLP):
  ``explain_program`` with propagation and collectives, goal 10 ms;
- ``transformer``: 32 unrolled layers of attention (q, k, v projections, scores, a softmax
  of exp, max, sum and divide, the weighted values, an output projection) and an MLP, with
  residual adds: the communication report alone (:func:`predicted_collectives`), goal
  100 ms.

The anchor is JAX 0.10.2 lowering and compiling the same step, as a function, on 8 CPU
devices (2 x 4): ``jax.jit(f).lower(*args).compile()``, timed once after a warm-up of a
different shape. The spec's figures are CPU milliseconds of a question asked of a program
built afresh each time (what a program keeps once worked out, its propagation, is not
reused), the 65,536-device ones with the listing of device ids refused (nothing
enumerates devices). Run: ``python benchmarks/bench_collectives.py`` (``--quick``: fewer
repeats; ``--no-jax``: no anchor).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from typing import Any, Callable, Iterator

from shardlaw.spec import Mesh, NamedSharding, P, explain_program
from shardlaw.spec.core.iota import Iota
from shardlaw.spec.core.values import DeviceList
from shardlaw.spec.program.collectives import predicted_collectives
from shardlaw.spec.program.description import Opaque, Program, Value

MATMUL = (("dimension_numbers", (((1,), (0,)), ((), ()))),)
BATCHED = (("dimension_numbers", (((2,), (2,)), ((0,), (0,)))),)   # q . k over features
WEIGHTED = (("dimension_numbers", (((2,), (1,)), ((0,), (0,)))),)  # p . v over keys


class Body:
    """A step being written: inputs first, then equations, each result numbered in turn."""

    def __init__(self) -> None:
        self.inputs: list[Value] = []
        self.equations: list[Any] = []
        self.types: list[tuple[int, ...]] = []

    def input(self, shape: tuple[int, ...], sharding: NamedSharding) -> int:
        assert not self.equations, "inputs come first"
        self.inputs.append(Value.placed(shape, sharding))
        self.types.append(shape)
        return len(self.types) - 1

    def op(self, primitive: str, operands: tuple[int, ...], shape: tuple[int, ...],
           params: tuple = ()) -> int:
        self.equations.append(Opaque(operands, (Value.typed(shape),), primitive=primitive,
                                     params=params))
        self.types.append(shape)
        return len(self.types) - 1

    def program(self, outputs: tuple[int, ...], devices: int) -> Program:
        return Program(tuple(self.inputs), tuple(self.equations), outputs=outputs,
                       devices=devices)


def mlp_step(mesh: Mesh, blocks: int = 40, rows: int = 64, width: int = 64) -> Program:
    """``blocks`` x 5 equations: ``h = tanh(x @ w1); x = (h @ w2 + x) * x``."""
    data, model = mesh.axis_sizes
    n, d, f = rows * data, width, 4 * width * model
    body = Body()
    weights = [(body.input((d, f), NamedSharding(mesh, P(None, "model"))),
                body.input((f, d), NamedSharding(mesh, P("model", None))))
               for _ in range(blocks)]
    x = body.input((n, d), NamedSharding(mesh, P("data", None)))
    for w1, w2 in weights:
        h = body.op("tanh", (body.op("dot_general", (x, w1), (n, f), MATMUL),), (n, f))
        y = body.op("add", (body.op("dot_general", (h, w2), (n, d), MATMUL), x), (n, d))
        x = body.op("mul", (y, x), (n, d))
    return body.program((x,), len(mesh.devices))


def _layer(body: Body, x: int, w: dict, shape: tuple[int, int, int, int]) -> int:
    """One transformer layer over ``x`` (batch, sequence, features)."""
    b, s, d, f = shape
    merged = body.op("reshape", (x,), (b * s, d), (("dimensions", None), ("new_sizes", (b * s, d))))

    def project(weight: int, width: int) -> int:
        flat = body.op("dot_general", (merged, w[weight]), (b * s, width), MATMUL)
        return body.op("reshape", (flat,), (b, s, width),
                       (("dimensions", None), ("new_sizes", (b, s, width))))
    q, k, v = project("q", d), project("k", d), project("v", d)
    scores = body.op("dot_general", (q, k), (b, s, s), BATCHED)
    top = body.op("reduce_max", (scores,), (b, s), (("axes", (2,)), ("out_sharding", None)))
    top3 = body.op("broadcast_in_dim", (top,), (b, s, s),
                   (("shape", (b, s, s)), ("broadcast_dimensions", (0, 1)), ("sharding", None)))
    e = body.op("exp", (body.op("sub", (scores, top3), (b, s, s)),), (b, s, s))
    total = body.op("reduce_sum", (e,), (b, s), (("axes", (2,)), ("out_sharding", None)))
    total3 = body.op("broadcast_in_dim", (total,), (b, s, s),
                     (("shape", (b, s, s)), ("broadcast_dimensions", (0, 1)), ("sharding", None)))
    p = body.op("div", (e, total3), (b, s, s))
    attended = body.op("dot_general", (p, v), (b, s, d), WEIGHTED)
    flat = body.op("reshape", (attended,), (b * s, d),
                   (("dimensions", None), ("new_sizes", (b * s, d))))
    out = body.op("dot_general", (flat, w["o"]), (b * s, d), MATMUL)
    resid = body.op("add", (out, merged), (b * s, d))
    hidden = body.op("tanh", (body.op("dot_general", (resid, w["up"]), (b * s, f), MATMUL),),
                     (b * s, f))
    down = body.op("dot_general", (hidden, w["down"]), (b * s, d), MATMUL)
    return body.op("reshape", (body.op("add", (down, resid), (b * s, d)),), (b, s, d),
                   (("dimensions", None), ("new_sizes", (b, s, d))))


def transformer_step(mesh: Mesh, layers: int = 32, batch: int = 2, seq: int = 64,
                     width: int = 64) -> Program:
    """``layers`` transformer layers: batch over ``"data"``, the MLP's hidden features
    over ``"model"`` (attention's projections replicated over ``"model"``)."""
    data, model = mesh.axis_sizes
    b, s, d, f = batch * data, seq, width, 4 * width * model
    body = Body()
    whole = NamedSharding(mesh, P())
    weights = [{"q": body.input((d, d), whole), "k": body.input((d, d), whole),
                "v": body.input((d, d), whole), "o": body.input((d, d), whole),
                "up": body.input((d, f), NamedSharding(mesh, P(None, "model"))),
                "down": body.input((f, d), NamedSharding(mesh, P("model", None)))}
               for _ in range(layers)]
    x = body.input((b, s, d), NamedSharding(mesh, P("data", None, None)))
    for w in weights:
        x = _layer(body, x, w, (b, s, d, f))
    return body.program((x,), len(mesh.devices))


# --------------------------------------------------------------------------- JAX's anchor

def jax_function(kind: str, count: int) -> Callable[..., Any]:
    """The same step as a JAX function of (weights..., x)."""
    import jax.numpy as jnp

    def mlp(*args: Any) -> Any:
        *weights, x = args
        for w1, w2 in zip(weights[0::2], weights[1::2]):
            x = (jnp.tanh(x @ w1) @ w2 + x) * x
        return x

    def transformer(*args: Any) -> Any:
        *weights, x = args
        b, s, d = x.shape
        for k in range(count):
            q_, k_, v_, o_, up, down = weights[6 * k:6 * k + 6]
            m = x.reshape(b * s, d)
            q, kk, v = ((m @ w).reshape(b, s, d) for w in (q_, k_, v_))
            scores = jnp.einsum("bqd,bkd->bqk", q, kk)
            e = jnp.exp(scores - scores.max(2)[:, :, None])
            p = e / e.sum(2)[:, :, None]
            resid = jnp.einsum("bqk,bkd->bqd", p, v).reshape(b * s, d) @ o_ + m
            x = (jnp.tanh(resid @ up) @ down + resid).reshape(b, s, d)
        return x

    return mlp if kind == "mlp" else transformer


def jax_anchor(kind: str, program: Program) -> tuple[float, tuple]:
    """Seconds JAX takes to lower and compile ``program``'s step on 8 CPU devices, and the
    collectives of the module it compiled."""
    import jax
    import jax.numpy as jnp
    from shardlaw.spec.bridge.convert import to_jax
    count = 40 if kind == "mlp" else 32

    def args_of(p: Program) -> list:
        return [jax.ShapeDtypeStruct(v.shape, jnp.float32, sharding=to_jax(v.sharding))
                for v in p.inputs]
    f = jax_function(kind, count)
    jax.jit(f).lower(*args_of(program)).compile()    # warm JAX up (same shapes: cached
    start = time.perf_counter()                       # pieces are what a rerun would find)
    compiled = jax.jit(jax_function(kind, count)).lower(*args_of(program)).compile()
    seconds = time.perf_counter() - start
    from shardlaw.compiled_hlo import collectives_in_hlo as collectives_of
    return seconds, collectives_of(compiled.as_text())


def median_ms(build: Callable[[], Program], question: Callable[[Program], Any], repeats: int
              ) -> tuple[float, float]:
    """Median and best CPU milliseconds of ``question(program)``, each time on a program
    built afresh (outside the timing): a first question, as a user asks it, not the
    answer the program keeps once worked out (propagation is kept with the program)."""
    programs = [build() for _ in range(repeats + 1)]
    question(programs.pop())   # (the modules' first use)
    times = []
    for program in programs:
        start = time.process_time()
        question(program)
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times), min(times)


@contextlib.contextmanager
def nothing_enumerated() -> Iterator[None]:
    """Inside the block, listing the devices of a symbolic device list refuses (the mesh
    of 65,536 devices is answered without enumerating them)."""
    def refuse(*args: Any) -> Any:
        raise AssertionError("a device list was enumerated")
    saved = Iota.__iter__, DeviceList.__iter__, DeviceList.ids
    Iota.__iter__ = DeviceList.__iter__ = DeviceList.ids = refuse   # type: ignore[method-assign]
    try:
        yield
    finally:
        Iota.__iter__, DeviceList.__iter__, DeviceList.ids = saved   # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-jax", action="store_true")
    options = parser.parse_args()
    repeats = 5 if options.quick else 21
    big = Mesh.iota((256, 256), ("data", "model"))
    small = Mesh.iota((2, 4), ("data", "model"))
    rows = [("mlp", "explain_program (propagation + collectives)", mlp_step, 10.0,
             lambda p: explain_program(p)),
            ("transformer", "communication report", transformer_step, 100.0,
             lambda p: predicted_collectives(p))]
    print(f"CPU milliseconds, each question asked of a program built afresh ({repeats} "
          f"repeats); load: {os.getloadavg()[0]:.2f}")
    print(f"{'step':12} {'question':45} {'devices':>8} {'eqns':>5} {'median ms':>10} "
          f"{'best':>7} {'goal':>6}  collectives, bytes/device")
    for kind, question, build, goal, ask in rows:
        for mesh in (small, big):
            program = build(mesh)
            with nothing_enumerated() if mesh is big else contextlib.nullcontext():
                step = predicted_collectives(program)
                assert step.complete, step.undetermined
                median, best = median_ms(lambda: build(mesh), ask, repeats)
            print(f"{kind:12} {question:45} {len(mesh.devices):8d} "
                  f"{len(program.equations):5d} {median:10.2f} {best:7.2f} {goal:6.0f}  "
                  f"{len(step)} ({', '.join(sorted({c.kind for c in step}))}), "
                  f"{step.bytes_per_device:,}")
            if mesh is small:
                on_eight = sorted((c.kind, c.bytes_per_device) for c in step)
        if not options.no_jax:
            import jax
            jax.config.update("jax_num_cpu_devices", 8)
            seconds, real = jax_anchor(kind, build(small))
            compiled = sorted((c.kind, c.bytes_per_device) for c in real)
            print(f"{kind:12} {'JAX 0.10.2 lower + compile (anchor)':45} {8:8d} "
                  f"{len(build(small).equations):5d} {seconds * 1000:10.2f} {'':7} {'':6}  "
                  f"{len(real)} ({', '.join(sorted({c.kind for c in real}))}), "
                  f"{sum(c.bytes_per_device for c in real):,} (the compiled module's: "
                  f"{'the spec agrees' if on_eight == compiled else 'THE SPEC DIFFERS'})")


if __name__ == "__main__":
    main()
