"""How long the spec takes to describe, differentiate and explain a real scanned step.

Issue 32's goal: :func:`~shardlaw.spec.bridge.program.describe_program` +
:func:`~shardlaw.spec.program.autodiff.grad_program` +
:func:`~shardlaw.spec.explain_program` of a 32-layer scanned transformer step (attention,
layernorm and a SwiGLU MLP per layer, ``lax.scan`` over stacked parameters, FSDP over
``data`` and tensor-parallel over ``model``, an activation constraint per layer) on a
65,536-device abstract mesh (256 x 256) in at most 50 ms; the loop body is read once, not
unrolled, and nothing enumerates devices. The same run times JAX's own
``jax.make_jaxpr`` of the step and of its gradient, the anchor: the spec's answer is
measured against what tracing the step costs JAX on the same machine.

The table gives, per part, the median CPU time of the process (and the best) over the
repeats, JAX's caches emptied before each trace and each description (describe_program
traces the step with JAX: a cold call, as a user's first). Run:
``python benchmarks/bench_steps.py`` (``--quick`` for fewer repeats, ``--layers N``,
``--no-constraint`` for a scanned body that places nothing).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

GOAL_MS = 50.0
GRID = (256, 256)          # 65,536 devices
D, H, S, B = 1024, 4096, 128, 512


# Per parameter, its spec after the stacked layers' dimension: FSDP over ``data`` and
# tensor-parallel over ``model`` (the default), or tensor-parallel alone (Megatron's).
FSDP_TP = {"q": ("data", "model"), "k": ("data", "model"), "v": ("data", "model"),
           "o": ("model", "data"), "g": (None,), "w1": ("data", "model"),
           "w3": ("data", "model"), "w2": ("model", "data")}
TP = {"q": (None, "model"), "k": (None, "model"), "v": (None, "model"),
      "o": ("model", None), "g": (None,), "w1": (None, "model"), "w3": (None, "model"),
      "w2": ("model", None)}


def step(layers: int, constrained: bool = True, mesh: Any = None, plan: dict = FSDP_TP,
         sizes: tuple = (D, H, S, B)) -> tuple[Callable, tuple, int]:
    """The loss of the scanned transformer, its abstract arguments and the number of
    parameter leaves (the gradient is taken with respect to each); ``mesh``: a JAX mesh of
    axes ``data`` and ``model`` (default: the abstract 256 x 256 one), ``plan``: each
    parameter's spec, ``sizes``: (features, hidden features, sequence, batch)."""
    import jax
    import jax.numpy as jnp

    mesh = mesh if mesh is not None else jax.sharding.AbstractMesh(
        GRID, ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    NS, P = jax.sharding.NamedSharding, jax.sharding.PartitionSpec
    d, h, s, b = sizes

    def sds(shape: tuple, *spec: Any) -> Any:
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NS(mesh, P(*spec)))

    shapes = {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "g": (d,),
              "w1": (d, h), "w3": (d, h), "w2": (h, d)}
    params = {name: sds((layers, *shape), None, *plan[name]) for name, shape in shapes.items()}
    x = sds((b, s, d), "data")
    activations = NS(mesh, P("data", None, None))

    def layer(h: Any, p: dict) -> tuple[Any, None]:
        mean = h.mean(-1, keepdims=True)
        n = (h - mean) * jax.lax.rsqrt(((h - mean) ** 2).mean(-1, keepdims=True) + 1e-5) \
            * p["g"]
        q, k, v = n @ p["q"], n @ p["k"], n @ p["v"]
        scores = jax.nn.softmax(jnp.einsum("bqd,bkd->bqk", q, k) / 32.0, -1)
        h = h + jnp.einsum("bqk,bkd->bqd", scores, v) @ p["o"]
        h = h + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]
        return (jax.lax.with_sharding_constraint(h, activations) if constrained else h), None

    def loss(params: dict, x: Any) -> Any:
        return jnp.mean(jax.lax.scan(layer, x, params)[0] ** 2)
    return loss, (params, x), len(params)


def timed(run: Callable[[], Any], repeats: int, cold: bool = False
          ) -> tuple[float, float, Any]:
    """(median ms, best ms, the last answer) of ``repeats`` calls of ``run``, in CPU time
    of this process (the machine's other work left out); ``cold``: JAX's caches emptied
    before each call (a trace of the step's functions is never reused)."""
    import jax

    times, answer = [], None
    for _ in range(repeats):
        if cold:
            jax.clear_caches()
        start = time.process_time()
        answer = run()
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times), min(times), answer


def measure(layers: int = 32, repeats: int = 20, constrained: bool = True
            ) -> dict[str, tuple[float, float]]:
    """part -> (median ms, best ms): the spec's three parts and their sum, and JAX's
    make_jaxpr of the step and of its gradient (the anchor)."""
    import jax

    from shardlaw.spec import explain_program
    from shardlaw.spec.bridge.program import describe_program
    from shardlaw.spec.program.autodiff import grad_program

    loss, args, leaves = step(layers, constrained)
    jitted = jax.jit(loss)
    rows: dict[str, tuple[float, float]] = {}
    rows["jax make_jaxpr (step)"] = timed(lambda: jax.make_jaxpr(jax.jit(loss))(*args),
                                          repeats, cold=True)[:2]
    rows["jax make_jaxpr (grad)"] = timed(
        lambda: jax.make_jaxpr(jax.jit(jax.grad(loss)))(*args), repeats, cold=True)[:2]
    m_d, b_d, program = timed(lambda: describe_program(jitted, *args), repeats, cold=True)
    m_g, b_g, grad = timed(lambda: grad_program(program, tuple(range(leaves))), repeats)
    m_e, b_e, verdict = timed(lambda: explain_program(grad, until="trace"), repeats)
    if not verdict.accepted:
        raise SystemExit(f"the spec refuses the step's gradient: {verdict.message}")
    rows["describe_program"] = (m_d, b_d)
    rows["grad_program"] = (m_g, b_g)
    rows["explain_program"] = (m_e, b_e)
    rows["spec, all three"] = timed(lambda: explain_program(grad_program(
        describe_program(jitted, *args), tuple(range(leaves))), until="trace"), repeats,
        cold=True)[:2]
    rows["equations (step, gradient)"] = (float(len(program.equations)),
                                          float(len(grad.equations)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repeats instead of 20")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--no-constraint", action="store_true",
                        help="leave out the activation constraint in the scanned body")
    options = parser.parse_args(argv)
    rows = measure(options.layers, 5 if options.quick else 20, not options.no_constraint)
    print(f"{options.layers}-layer scanned transformer step, {GRID[0] * GRID[1]:,} devices "
          f"(abstract mesh {GRID}); goal {GOAL_MS:.0f} ms for the spec's three parts")
    for name, (median, best) in rows.items():
        if name.startswith("equations"):
            print(f"  {name:<28} {int(median)} and {int(best)}")
        else:
            print(f"  {name:<28} {median:8.2f} ms  (best {best:.2f})")
    total = rows["spec, all three"][0]
    anchor = rows["jax make_jaxpr (step)"][0]
    print(f"  within goal: {total <= GOAL_MS}; {total / anchor:.2f} x JAX's make_jaxpr "
          f"of the step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
