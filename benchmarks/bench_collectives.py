"""How long the spec takes to say where the compiler places a step's values and what the
step communicates, against JAX compiling the same step (issue 33).

Three steps, over meshes of 8 devices (2 x 4) and of 2^16 (256 x 256, ``"data"`` x
``"model"``): concrete (symbolic ids 0 .. 2^16 - 1, asked through the run) and abstract
(``AbstractMesh``, asked until trace: PROP-7's placements and the collectives), nothing
enumerating devices:

- ``mlp``: 200 equations built by hand (:class:`~shardlaw.spec.Program` values of
  propagated primitives, no JAX), 40 blocks of ``tanh(x @ w1) @ w2 + x`` and a scale,
  activations rows over ``"data"``, ``w1`` columns and ``w2`` rows over ``"model"``
  (Megatron's MLP): ``explain_program`` with propagation and collectives, goal 10 ms;
- ``transformer``: 32 unrolled layers of attention and an MLP built by hand the same way:
  the communication report alone (:func:`predicted_collectives`), goal 100 ms;
- ``scanned``: the 32-layer scanned transformer of ``bench_steps.py`` (``lax.scan`` over
  stacked parameters, described from JAX by ``describe_program``), tensor-parallel over
  ``"model"`` and batch over ``"data"``: the communication report, goal 100 ms, complete —
  the loop body's collectives each run 32 times (COLL-8), the step's bytes counted so —
  and printed whole at 2^16 devices beside the compiled module's on 8, each collective
  with how often one step runs it; and with FSDP beside it (parameters split over
  ``"data"`` too): the weights gathered over ``"data"`` in the loop's body (PROP-14),
  against the compiled module's on 8.

The anchor is JAX 0.10.2 lowering and compiling the same step, as a function, on 8 CPU
devices (2 x 4): ``jax.jit(f).lower(*args).compile()``, timed once after a warm-up; ``x
JAX`` is the spec's median over it. The spec's figures are CPU milliseconds of a question
asked of a program built afresh each time (what a program keeps once worked out, its
propagation, is not reused), the 65,536-device ones with the listing of device ids refused.
Run: ``python benchmarks/bench_collectives.py`` (``--quick``: fewer repeats; ``--no-jax``:
no anchor).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import time
from typing import Any, Callable, Iterator

from shardlaw.spec import AbstractMesh, Mesh, NamedSharding, P, explain_program
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
        abstract = isinstance(sharding.mesh, AbstractMesh)   # (a ShapeDtypeStruct's)
        self.inputs.append(Value.shape_dtype(shape, sharding=sharding) if abstract
                           else Value.placed(shape, sharding))
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
    return body.program((x,), math.prod(mesh.axis_sizes))


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
    return body.program((x,), math.prod(mesh.axis_sizes))


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


def scanned_step(mesh: Any, plan: str = "TP") -> Program:
    """The 32-layer scanned step of ``bench_steps.py`` described from JAX over ``mesh`` (a
    JAX mesh; None: the abstract 256 x 256 one), its parameters split by ``plan``."""
    import jax
    import bench_steps
    from shardlaw.spec.bridge.program import describe_program
    loss, args, _ = bench_steps.step(32, True, mesh, getattr(bench_steps, plan))
    return describe_program(jax.jit(loss), *args)


def scanned_anchor(plan: str = "TP") -> tuple[float, tuple, str]:
    """Seconds JAX takes to lower and compile the scanned step on 8 CPU devices (2 x 4),
    its parameters split by ``plan``, the collectives of the module it compiled and its
    text."""
    import jax
    import bench_steps
    from shardlaw.compiled_hlo import collectives_in_hlo as collectives_of
    loss, args, _ = bench_steps.step(32, True, _eight(), getattr(bench_steps, plan))
    jax.jit(loss).lower(*args).compile()   # warm JAX up (a step of its own: not cached)
    loss, args, _ = bench_steps.step(32, True, _eight(), getattr(bench_steps, plan))
    start = time.perf_counter()
    compiled = jax.jit(loss).lower(*args).compile()
    seconds = time.perf_counter() - start
    text = compiled.as_text()
    return seconds, collectives_of(text), text


def _eight() -> Any:
    import jax
    return jax.make_mesh((2, 4), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)


def _count(program: Program) -> int:
    """The program's equations, its bodies' included (a scan's body once)."""
    return sum(1 + (_count(eq.body) if eq.body is not None else 0)
               for eq in program.equations)


def _summary(step: Any) -> str:
    if not step.complete:
        return f"open: {step.undetermined}"
    total = step.bytes_per_device
    return (f"{len(step)} ({', '.join(sorted({c.kind for c in step}))}), "
            f"{total:,}" + (" per step" if any(c.trips != 1 for c in step) else "")
            if total is not None else f"{step.bytes_per_run:,} each run once")


def _runs(real: tuple, text: str | None) -> list:
    """The compiled module's collectives as (kind, bytes, runs per step)."""
    from shardlaw.properties.collectives_harness import hlo_runs
    runs = hlo_runs(text) if text else {}
    return sorted(((c.kind, c.bytes_per_device, runs.get(c.name, 1)) for c in real),
                  key=repr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-jax", action="store_true")
    options = parser.parse_args()
    import jax
    jax.config.update("jax_num_cpu_devices", 8)   # (before any other use: the anchors)
    repeats = 5 if options.quick else 21
    names = ("data", "model")
    meshes = [("8", Mesh.iota((2, 4), names), "run"),
              ("2^16", Mesh.iota((256, 256), names), "run"),
              ("2^16 abstract", AbstractMesh((256, 256), names), "trace")]
    explain = ("explain_program (propagation + collectives)", 10.0)
    report = ("communication report", 100.0)
    print(f"CPU milliseconds, each question asked of a program built afresh ({repeats} "
          f"repeats); load: {os.getloadavg()[0]:.2f}; x JAX: the spec's median over JAX's "
          f"lower + compile on 8 devices")
    print(f"{'step':12} {'question':45} {'mesh':>13} {'eqns':>5} {'median ms':>10} "
          f"{'best':>7} {'goal':>5} {'x JAX':>7}  collectives, bytes/device")

    def row(kind: str, question: tuple, name: str, build: Callable[[], Program],
            ask: Callable[[Program], Any], anchor: float | None) -> Any:
        program = build()
        with nothing_enumerated() if name != "8" else contextlib.nullcontext():
            step = predicted_collectives(program)
            median, best = median_ms(build, ask, repeats)
        ratio = f"{median / (anchor * 1000):.3f}" if anchor else "-"
        print(f"{kind:12} {question[0]:45} {name:>13} {_count(program):5d} "
              f"{median:10.2f} {best:7.2f} {question[1]:5.0f} {ratio:>7}  {_summary(step)}")
        return step

    def anchor_row(kind: str, eqns: int, seconds: float, real: tuple, spec: Any,
                   text: str | None = None) -> None:
        compiled = _runs(real, text)
        mine = sorted(((c.kind, c.bytes_per_device, c.trips) for c in spec), key=repr)
        agree = ("the spec's list is open" if not spec.complete else
                 "the spec agrees" if mine == compiled else "THE SPEC DIFFERS")
        print(f"{kind:12} {'JAX 0.10.2 lower + compile (anchor)':45} {'8':>13} {eqns:5d} "
              f"{seconds * 1000:10.2f} {'':7} {'':5} {'':>7}  "
              f"{len(real)} ({', '.join(sorted({c.kind for c in real}))}), "
              f"{sum(size * (runs or 1) for _, size, runs in compiled):,}"
              f"{' per step' if any(r != 1 for *_, r in compiled) else ''} "
              f"(the compiled module's: {agree})")

    for kind, question, builder, ask in (
            ("mlp", explain, mlp_step, None),
            ("transformer", report, transformer_step, predicted_collectives)):
        anchor = None if options.no_jax else jax_anchor(kind, builder(meshes[0][1]))
        on_eight = None
        for name, mesh, until in meshes:
            asked = ask or (lambda p, until=until: explain_program(p, until=until))
            step = row(kind, question, name, lambda m=mesh: builder(m), asked,
                       anchor and anchor[0])
            on_eight = on_eight or step
        if anchor:
            anchor_row(kind, _count(builder(meshes[0][1])), *anchor, on_eight)
    anchor = None if options.no_jax else scanned_anchor()
    eight = row("scanned", report, "8", lambda: scanned_step(_eight()), predicted_collectives,
                anchor and anchor[0])
    pod = row("scanned", report, "2^16 abstract", lambda: scanned_step(None),
              predicted_collectives, anchor and anchor[0])
    fsdp_anchor = None if options.no_jax else scanned_anchor("FSDP_TP")
    fsdp_eight = row("scanned FSDP", report, "8", lambda: scanned_step(_eight(), "FSDP_TP"),
                     predicted_collectives, fsdp_anchor and fsdp_anchor[0])
    fsdp = row("scanned FSDP", report, "2^16 abstract", lambda: scanned_step(None, "FSDP_TP"),
               predicted_collectives, fsdp_anchor and fsdp_anchor[0])
    if anchor:
        anchor_row("scanned", _count(scanned_step(_eight())), anchor[0], anchor[1], eight,
                   anchor[2])
    if fsdp_anchor:
        anchor_row("scanned FSDP", _count(scanned_step(_eight(), "FSDP_TP")), fsdp_anchor[0],
                   fsdp_anchor[1], fsdp_eight, fsdp_anchor[2])
    print("\nThe scanned step's communication report at 2^16 devices (abstract mesh):")
    print("  " + str(pod).replace("\n", "\n  "))
    if anchor:
        print("The compiled module's on 8 devices (2 x 4), as (kind, bytes per device, runs "
              "per step):")
        for kind, size, runs in _runs(anchor[1], anchor[2]):
            print(f"  {kind}: {size:,} bytes, {runs} time(s)")
    print("\nWith FSDP beside it (PROP-14), at 2^16 devices (abstract mesh):")
    print("  " + str(fsdp).replace("\n", "\n  "))
    if fsdp_anchor:
        print("The compiled module's on 8 devices (2 x 4):")
        for kind, size, runs in _runs(fsdp_anchor[1], fsdp_anchor[2]):
            print(f"  {kind}: {size:,} bytes, {runs} time(s)")


if __name__ == "__main__":
    main()
