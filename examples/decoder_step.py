"""A decoder's training step, checked whole on every mesh it may run on, before the chips exist.

A pure-JAX decoder (token embedding, one attention block and one MLP block per layer) is
trained with a step that holds what real steps hold: activation constraints
(``jax.lax.with_sharding_constraint``) on the residual stream, a tensor-parallel MLP
written as a ``jax.shard_map`` with a ``psum`` over the ``model`` axis, and ``jax.grad``
of the loss. The job may get anything from 8 to 65,536 chips, laid out as a
``(data, model)`` mesh.

For each mesh the loss is read once into a :class:`~shardlaw.spec.Program` with
:func:`~shardlaw.spec.bridge.program.describe_program` — the arguments are
``jax.ShapeDtypeStruct``\\ s over an *abstract* mesh, so no device is needed — and the
step is the spec's own gradient of it (:func:`~shardlaw.spec.grad_program`: the
constraints' cotangents constrained alike, the shard_map'd block linearized and
transposed, its ``psum`` transposed by AD-12), never JAX's trace of ``jax.grad``. The
spec says what ``jax.jit(step).trace(params, batch)`` decides
(:func:`~shardlaw.spec.explain_program` with ``until="trace"``): the step is accepted and
its results' types, or the rule that refuses it and where in the body. Each answer is
held to JAX's own ``.trace()`` of the same step on the same abstract mesh: the same
acceptance, or a refusal of the same class.

Run it::

    python examples/decoder_step.py
"""

from __future__ import annotations

import dataclasses
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import dataclasses as dc  # noqa: E402

from shardlaw.spec import (  # noqa: E402
    Mesh as SpecMesh, NamedSharding as SpecNamed, explain_program, grad_program,
)
from shardlaw.spec.bridge.program import describe_program  # noqa: E402
from shardlaw.spec.program.description import (  # noqa: E402
    Const, Equation, Program, ShardMap, Value,
)

# The mesh sizes the job may get: (data, model), from 8 to 65,536 chips.
MESHES = ((2, 4), (8, 8), (64, 8), (256, 16), (1024, 64), (256, 256), (4096, 16))


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The model's and the batch's sizes."""

    batch: int = 4096
    seq: int = 128
    vocab: int = 32768
    width: int = 1024
    hidden: int = 4096
    layers: int = 2


def mesh_of(data: int, model: int) -> AbstractMesh:
    return AbstractMesh((data, model), ("data", "model"),
                        axis_types=(AxisType.Auto, AxisType.Auto))


def plan(mesh: AbstractMesh, sizes: Sizes) -> tuple[dict, jax.ShapeDtypeStruct]:
    """The parameters and the batch as ShapeDtypeStructs, sharded as the plan says."""
    def sds(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
    w, h, v = sizes.width, sizes.hidden, sizes.vocab
    layer = {"qkv": sds((w, 3 * w), P(None, "model")), "out": sds((w, w), P("model", None)),
             "up": sds((w, h), P(None, "model")), "down": sds((h, w), P("model", None))}
    params = {"embed": sds((v, w), P("model", None)),
              "layers": [dict(layer) for _ in range(sizes.layers)]}
    tokens = jax.ShapeDtypeStruct((sizes.batch, sizes.seq), jnp.int32,
                                  sharding=NamedSharding(mesh, P("data", None)))
    return params, tokens


def step_of(mesh: AbstractMesh, sizes: Sizes):
    """The training step: the gradient of the (jitted) next-token loss, for this mesh."""
    return jax.grad(loss_of(mesh, sizes))


def loss_of(mesh: AbstractMesh, sizes: Sizes):
    """The next-token loss of the parameters and the tokens, jitted, for this mesh."""
    residual = NamedSharding(mesh, P("data", None, None))

    def attention(x, layer):
        q, k, v = jnp.split(x @ layer["qkv"], 3, axis=-1)
        scores = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(q.shape[-1])
        return jax.nn.softmax(scores, axis=-1) @ v @ layer["out"]

    def mlp_block(x, up, down):  # per shard: the hidden dimension is split over "model"
        return jax.lax.psum(jax.nn.gelu(x @ up) @ down, "model")

    mlp = jax.shard_map(mlp_block, mesh=mesh,
                        in_specs=(P("data", None, None), P(None, "model"), P("model", None)),
                        out_specs=P("data", None, None))

    def loss(params, tokens):
        x = params["embed"][tokens]
        for layer in params["layers"]:
            x = jax.lax.with_sharding_constraint(x + attention(x, layer), residual)
            x = jax.lax.with_sharding_constraint(x + mlp(x, layer["up"], layer["down"]),
                                                 residual)
        logits = x @ params["embed"].T
        return -jnp.mean(jax.nn.log_softmax(logits)[..., 0])

    return jax.jit(loss)


def on_devices(value, mesh: SpecMesh):
    """``value`` (a Program, or any part of one) with every sharding over ``mesh``'s
    abstract mesh put over ``mesh`` itself: the step as it would be on chips with ids
    ``0 .. mesh.size - 1``, which the spec follows through lowering without them. (The
    types keep their abstract mesh, as JAX's do.)"""
    if isinstance(value, SpecNamed):
        return dc.replace(value, mesh=mesh) if value.mesh == mesh.abstract else value
    if isinstance(value, tuple):
        return tuple(on_devices(v, mesh) for v in value)
    if not isinstance(value, (Program, Equation, Const, Value)):
        return value
    changes = {}
    for field in dc.fields(value):
        given = getattr(value, field.name)
        if not field.init:
            continue
        if field.name == "mesh":  # a type's mesh stays abstract; a shard_map's is placed
            if isinstance(value, ShardMap) and given == mesh.abstract:
                changes["mesh"] = mesh
            continue
        changes[field.name] = on_devices(given, mesh)
    return dc.replace(value, **changes)


def jax_traces(step, params, tokens) -> tuple[bool, str | None]:
    """Whether JAX's own ``jax.jit(step).trace`` accepts the step; its error's class."""
    try:
        jax.jit(step).trace(params, tokens)
    except Exception as error:  # the class is what is compared
        return False, type(error).__name__
    return True, None


def jax_compiles(step, params, tokens) -> tuple[bool, str | None, tuple]:
    """Whether JAX lowers and compiles the step on real chips; its error's class, or the
    device ids of its compiled program."""
    try:
        compiled = jax.jit(step).trace(params, tokens).lower().compile()
    except Exception as error:  # the class is what is compared
        return False, type(error).__name__, ()
    shardings = jax.tree_util.tree_leaves(compiled.output_shardings)
    return True, None, tuple(d.id for d in shardings[0]._device_assignment)


def check(data: int, model: int, sizes: Sizes = Sizes()) -> dict:
    """The spec's answers and JAX's for the step on a (data, model) mesh: traced over the
    abstract mesh (held to JAX's ``.trace``), then placed on chips (``on_devices``: held
    to JAX's ``.lower().compile()`` where this machine has the chips)."""
    mesh = mesh_of(data, model)
    params, tokens = plan(mesh, sizes)
    step = step_of(mesh, sizes)
    started = time.perf_counter()
    loss = describe_program(loss_of(mesh, sizes), params, tokens)
    described = time.perf_counter() - started
    started = time.perf_counter()
    # the gradient of every parameter (the inputs before the tokens), rewritten by the spec
    program = grad_program(loss, tuple(range(len(jax.tree_util.tree_leaves(params)))))
    rewritten = time.perf_counter() - started
    started = time.perf_counter()
    traced = explain_program(program, until="trace")
    asked = time.perf_counter() - started
    accepted, error = jax_traces(step, params, tokens)
    agree = traced.accepted == accepted and (accepted or error in (traced.error_type,
                                                                   traced.jax_error))
    if accepted:   # the gradients' shapes are JAX's
        shapes = [tuple(g.shape) for g in jax.tree_util.tree_leaves(
            jax.eval_shape(step, params, tokens))]
        agree = agree and shapes == [program.value_types[n].shape for n in program.outputs]
    chips = SpecMesh.iota((data, model), ("data", "model"))
    placed = explain_program(dc.replace(on_devices(program, chips), devices=chips.size))
    if chips.size <= jax.device_count():
        import numpy as np
        concrete = jax.sharding.Mesh(np.array(jax.devices()[:chips.size]).reshape(data, model),
                                     ("data", "model"),
                                     axis_types=(AxisType.Auto, AxisType.Auto))
        real = jax.tree_util.tree_map(
            lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=NamedSharding(
                concrete, s.sharding.spec)), (params, tokens))
        ok, error, devices = jax_compiles(step_of(concrete, sizes), *real)
        agree = agree and placed.accepted == ok and (
            not ok or tuple(placed.device_assignment) == devices)
    return {"mesh": (data, model), "devices": data * model, "equations": count(program),
            "traced": traced, "placed": placed, "agree": agree,
            "describe_s": described, "grad_s": rewritten, "explain_s": asked}


def count(program) -> int:
    """Equations in the program, its nested bodies' included."""
    return sum(1 + (count(eq.body) if eq.body is not None else 0)
               for eq in program.equations)


def _said(verdict) -> str:
    return "accepted" if verdict.accepted else f"{verdict.rule} at {verdict.path}"


def main() -> int:
    disagreements = 0
    for data, model in MESHES:
        row = check(data, model)
        print(f"{data:>5} x {model:<4} ({row['devices']:>6} chips, {row['equations']} "
              f"equations): traced {_said(row['traced'])}, on chips {_said(row['placed'])}; "
              f"{'agrees with JAX' if row['agree'] else 'DISAGREES with JAX'}; "
              f"explain {row['explain_s'] * 1e3:.1f} ms")
        disagreements += not row["agree"]
    print(f"{disagreements} disagreement(s)")
    return 1 if disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
