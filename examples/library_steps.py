"""Two training steps as the field's libraries hand them, checked on every mesh they may get.

* a flax NNX step: an MLP module (``nnx.Linear``, ``nnx.LayerNorm``, ``nnx.gelu``) and an
  ``nnx.Optimizer`` (AdamW), the step an ``nnx.jit`` function that takes
  ``nnx.value_and_grad`` of the loss and updates the optimizer in place;
* an optax step: a model of 8 layers scanned over stacked parameters (``lax.scan``; a
  layernorm and a SwiGLU MLP per layer), ``optax.adamw`` with its state placed as the
  parameters are, the step ``jax.jit`` with the parameters and state donated.

Both are sharded tensor-parallel over ``model`` and data-parallel over ``data``, on meshes
from 8 to 65,536 chips. On the 8 devices this machine has, the arguments are real arrays
placed on the mesh; on the larger meshes they are ``jax.ShapeDtypeStruct`` values over an
*abstract* mesh, so no chip is needed. Each step is read with
:func:`~shardlaw.spec.bridge.program.describe_program` as the user holds it (the module,
the optimizer, the optax state; every input named by its pytree path) and
:func:`~shardlaw.spec.explain_program` answers: on real arrays, what ``jax.jit`` decides
through compiling and running; on an abstract mesh, what its ``.trace()`` decides. Each
answer is held to JAX's own: the same acceptance (or refusal class) and the loss's type.

Run it::

    python examples/library_steps.py
"""

from __future__ import annotations

import time
from typing import Any

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from shardlaw.spec import explain_program  # noqa: E402
from shardlaw.spec.bridge.program import describe_program  # noqa: E402

# (data, model) meshes from 8 to 65,536 chips; those of 8 run on this machine's devices.
MESHES = ((2, 4), (4, 2), (8, 8), (64, 8), (256, 16), (1024, 64), (256, 256))
WIDTH, HIDDEN, BATCH, SEQ, LAYERS = 64, 256, 4096, 16, 8


def mesh_of(shape: tuple[int, int]) -> Any:
    """The real mesh on this machine's 8 devices, else an abstract one of that shape."""
    if shape[0] * shape[1] == len(jax.devices()):
        return jax.sharding.Mesh(np.array(jax.devices()).reshape(shape), ("data", "model"),
                                 axis_types=(AxisType.Auto,) * 2)
    return AbstractMesh(shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def placed(value: Any, mesh: Any, spec: P) -> Any:
    """``value`` on ``mesh`` by ``spec``: a real array placed there, or its ShapeDtypeStruct
    over the abstract mesh."""
    sharding = NamedSharding(mesh, spec)
    if isinstance(mesh, AbstractMesh):
        return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)
    return jax.device_put(value, sharding)


# --------------------------------------------------------------------------- flax NNX

class MLP(nnx.Module):
    """Up-projection, layernorm, gelu, down-projection."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.up = nnx.Linear(WIDTH, HIDDEN, rngs=rngs)
        self.norm = nnx.LayerNorm(HIDDEN, rngs=rngs)
        self.down = nnx.Linear(HIDDEN, WIDTH, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return self.down(nnx.gelu(self.norm(self.up(x))))


@nnx.jit
def nnx_train(model: MLP, optimizer: nnx.Optimizer, x: Any) -> Any:
    def loss(m: MLP) -> Any:
        return jnp.mean(m(x) ** 2)

    value, grads = nnx.value_and_grad(loss)(model)
    optimizer.update(model, grads)
    return value


def _nnx_spec(path: Any, leaf: Any) -> P:
    """Tensor-parallel: the up-projection's columns and the down-projection's rows over
    ``model``; the rest replicated."""
    where = jax.tree_util.keystr(path)
    if getattr(leaf, "ndim", 0) == 2:
        return P(None, "model") if ".up." in where or "['up']" in where else P("model", None)
    return P()


def nnx_arguments(mesh: Any) -> tuple:
    """The module, its optimizer and a batch, placed on ``mesh`` (abstract: every variable
    a ShapeDtypeStruct, the module made by nnx.eval_shape)."""
    def make() -> tuple:
        model = MLP(nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)

    model, optimizer = nnx.eval_shape(make) if isinstance(mesh, AbstractMesh) else make()
    for obj in (model, optimizer):
        state = nnx.state(obj)
        nnx.update(obj, jax.tree_util.tree_map_with_path(
            lambda path, leaf: placed(leaf, mesh, _nnx_spec(path, leaf)), state))
    x = placed(np.ones((BATCH, WIDTH), np.float32), mesh, P("data"))
    return model, optimizer, x


# --------------------------------------------------------------------------- optax, scanned

def _layer(h: Any, p: dict) -> tuple[Any, None]:
    mean = h.mean(-1, keepdims=True)
    n = (h - mean) * jax.lax.rsqrt(((h - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * p["g"]
    return h + (jax.nn.silu(n @ p["w1"]) * (n @ p["w3"])) @ p["w2"], None


def scanned_loss(params: dict, x: Any) -> Any:
    return jnp.mean(jax.lax.scan(_layer, x, params)[0] ** 2)


TX = optax.adamw(1e-3)


def optax_train(params: dict, opt_state: Any, x: Any) -> tuple:
    value, grads = jax.value_and_grad(scanned_loss)(params, x)
    updates, opt_state = TX.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


optax_step = jax.jit(optax_train, donate_argnums=(0, 1))

# parameter -> (shape, spec): stacked over the layers, tensor-parallel over "model"
PARAMS = {"g": ((LAYERS, WIDTH), P()), "w1": ((LAYERS, WIDTH, HIDDEN), P(None, None, "model")),
          "w3": ((LAYERS, WIDTH, HIDDEN), P(None, None, "model")),
          "w2": ((LAYERS, HIDDEN, WIDTH), P(None, "model", None))}


def optax_arguments(mesh: Any) -> tuple:
    """Stacked parameters, their AdamW state placed as they are, and a batch."""
    params = {name: placed(np.full(shape, 0.01, np.float32), mesh, spec)
              for name, (shape, spec) in PARAMS.items()}
    if isinstance(mesh, AbstractMesh):
        state = jax.eval_shape(TX.init, params)

        def like(path: Any, leaf: Any) -> Any:   # mu and nu placed as their parameter
            name = getattr(path[-1], "key", None)
            if name in PARAMS and leaf.shape == PARAMS[name][0]:
                return placed(leaf, mesh, PARAMS[name][1])
            return leaf
        state = jax.tree_util.tree_map_with_path(like, state)
    else:
        state = TX.init(params)
    x = placed(np.ones((BATCH, SEQ, WIDTH), np.float32), mesh, P("data"))
    return params, state, x


# --------------------------------------------------------------------------- checking

def jax_decides(step: Any, args: tuple, abstract: bool) -> tuple[str | None, Any]:
    """(the class of JAX's refusal or None, the loss's shape and dtype): ``.trace()`` on an
    abstract mesh, else traced, lowered, compiled (not run: the donated arguments stay)."""
    outer = jax.jit(lambda *a: step(*a))
    try:
        traced = outer.trace(*args)
        if not abstract:
            traced.lower().compile()
    except Exception as error:  # noqa: BLE001 - JAX's answer, compared
        return type(error).__name__, None
    loss = traced.jaxpr.out_avals[-1]
    return None, (tuple(loss.shape), str(loss.dtype))


def check(name: str, shape: tuple[int, int]) -> dict:
    """One step on one mesh: the spec's answer, JAX's, and whether they agree."""
    mesh = mesh_of(shape)
    abstract = isinstance(mesh, AbstractMesh)
    step, args = ((nnx_train, nnx_arguments(mesh)) if name == "nnx"
                  else (optax_step, optax_arguments(mesh)))
    start = time.perf_counter()
    program = describe_program(step, *args)
    verdict = explain_program(program, until="trace" if abstract else "run")
    spent = (time.perf_counter() - start) * 1000
    refused, loss = jax_decides(step, args, abstract)
    if verdict.accepted:
        out = program.value_types[program.outputs[-1]]   # the loss, as the spec types it
        agree = refused is None and (tuple(out.shape), out.dtype) == loss
    else:
        agree = refused in (verdict.jax_error, verdict.error_type)
    return {"step": name, "mesh": shape, "devices": shape[0] * shape[1], "abstract": abstract,
            "verdict": verdict, "program": program, "agree": agree, "ms": spent}


def main() -> int:
    print(f"{'step':<6} {'mesh':>12} {'devices':>8}  {'spec says':<40} {'JAX':>6} {'ms':>7}")
    failed = 0
    for name in ("nnx", "optax"):
        for shape in MESHES:
            row = check(name, shape)
            v = row["verdict"]
            said = "accepted" if v.accepted else f"{v.rule} at {v.path or 'the call'}"
            print(f"{name:<6} {str(shape):>12} {row['devices']:>8,}  {said:<40} "
                  f"{'agrees' if row['agree'] else 'DIFFERS':>6} {row['ms']:7.1f}")
            failed += not row["agree"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
