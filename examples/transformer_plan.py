"""Check a transformer's sharding plan on every mesh it may run on, before getting the chips.

A team plans a 33-billion-parameter decoder (FSDP + tensor parallel, Adam) for a job of
anywhere from 8 to 65,536 chips. The plan says, for every parameter, optimizer state and
batch array, which mesh axes cut which dimension. This file checks, with Hypothesis, over
every 2-D ``(fsdp, model)`` and 3-D ``(data, fsdp, model)`` mesh the team may run on:

1. every array divides evenly by its sharding on that mesh (``shardlaw.spec.shard_shape``);
2. the parameters and the optimizer state fit in a chip's memory;
3. ``jax.jit`` accepts the training step and the forward step as planned
   (``shardlaw.spec.jit_call`` on a hand-built ``Call``): the arguments are
   ``ShapeDtypeStruct``\\ s sharded over an *abstract* mesh (the plan needs no devices), the
   job's mesh is the context mesh (``jax.set_mesh``), and the step's results come back in
   the plan's shardings (the new parameters and optimizer state where the old ones were);
4. the gradients come back where the parameters are: the step takes ``jax.grad`` of a loss
   jitted with the plan's shardings, and the transposed jit equation JAX stages
   (``shardlaw.spec.transforms.autodiff.transposed_equation``, rule AD-5) returns each parameter's
   cotangent with that parameter's sharding, so the optimizer's update moves no data.

No JAX and no devices are needed: only the specification. Run it::

    python examples/transformer_plan.py            # the properties, then a few meshes shown
    HYPOTHESIS_PROFILE=deep python examples/transformer_plan.py
"""

from __future__ import annotations

import dataclasses
import math
import sys

from hypothesis import find, given, settings
from hypothesis import strategies as st

from shardlaw.pytest_plugin import load_named_profile
from shardlaw.spec import (
    AbstractMesh, Arg, Call, JitOptions, Mesh, NamedSharding, Out, P, jit_call, shard_shape,
)
from shardlaw.spec.transforms.autodiff import JitBody, JitEquation, transposed_equation
from shardlaw.spec.core.pytree import leaves_with_paths
from shardlaw.spec.core.rules import Rejection

GiB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Model:
    """The model's sizes (a Llama-like decoder with stacked layers)."""

    vocab: int = 131072
    d_model: int = 8192
    heads: int = 64
    head_dim: int = 128
    d_ff: int = 28672
    layers: int = 32
    seq: int = 4096
    batch_per_replica: int = 1      # sequences per data-parallel shard
    hbm_bytes: int = 96 * GiB       # one chip's memory


MODEL = Model()

# The mesh family the job may run on: power-of-two axes, tensor parallel within a host
# (model <= 8), FSDP at most 1,024 ways, data parallel for the rest; up to 65,536 chips,
# and the parameters cut at least 8 ways (fsdp * model >= 8: else they do not fit in a
# chip), so 8 chips at least.
MAX_DEVICES = 65536
MAX_MODEL, MAX_FSDP = 8, 1024


def parameter_shapes(m: Model) -> dict[str, tuple[int, ...]]:
    inner = m.heads * m.head_dim
    return {
        "embed": (m.vocab, m.d_model),
        "attn_qkv": (m.layers, m.d_model, 3 * inner),
        "attn_out": (m.layers, inner, m.d_model),
        "mlp_in": (m.layers, m.d_model, 2 * m.d_ff),     # gate and up projections
        "mlp_out": (m.layers, m.d_ff, m.d_model),
        "norms": (m.layers, 2, m.d_model),
        "final_norm": (m.d_model,),
        "unembed": (m.d_model, m.vocab),
    }


# The plan: FSDP cuts the model dimension of every matrix, tensor parallelism the other.
PARAMETER_PLAN = {
    "embed": P("model", "fsdp"),
    "attn_qkv": P(None, "fsdp", "model"),
    "attn_out": P(None, "model", "fsdp"),
    "mlp_in": P(None, "fsdp", "model"),
    "mlp_out": P(None, "model", "fsdp"),
    "norms": P(),
    "final_norm": P(),
    "unembed": P("fsdp", "model"),
}


def batch_axes(mesh: AbstractMesh) -> tuple[str, ...]:
    """The batch is cut over every axis but the tensor-parallel one."""
    return tuple(name for name in mesh.axis_names if name != "model")


def global_batch(m: Model, mesh: AbstractMesh) -> int:
    return m.batch_per_replica * math.prod(mesh.axis_size(a) for a in batch_axes(mesh))


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every array of the step on one mesh: shape, dtype and PartitionSpec, by name."""

    mesh: AbstractMesh
    params: dict[str, tuple[tuple[int, ...], str, P]]
    opt_state: dict[str, dict[str, tuple[tuple[int, ...], str, P]]]
    batch: dict[str, tuple[tuple[int, ...], str, P]]

    def leaves(self) -> dict[str, tuple[tuple[int, ...], str, P]]:
        out = {f"params.{k}": v for k, v in self.params.items()}
        for moment, tree in self.opt_state.items():
            out.update({f"opt_state.{moment}.{k}": v for k, v in tree.items()})
        out.update({f"batch.{k}": v for k, v in self.batch.items()})
        return out


def plan_for(mesh: AbstractMesh, m: Model = MODEL) -> Plan:
    params = {k: (shape, "bfloat16", PARAMETER_PLAN[k])
              for k, shape in parameter_shapes(m).items()}
    moments = {k: (shape, "float32", spec) for k, (shape, _, spec) in params.items()}
    tokens = ((global_batch(m, mesh), m.seq), "int32", P(batch_axes(mesh), None))
    return Plan(mesh, params, {"mu": moments, "nu": dict(moments)},
                {"tokens": tokens, "targets": tokens})


# --------------------------------------------------------------------------- the meshes

@st.composite
def meshes(draw: st.DrawFn, max_fsdp: int = MAX_FSDP) -> AbstractMesh:
    """A 2-D (fsdp, model) or 3-D (data, fsdp, model) mesh of the family above."""
    model = draw(st.sampled_from([1, 2, 4, 8]))
    least = max(1, 8 // model)                      # the parameters cut 8 ways at least
    most = min(max_fsdp, MAX_DEVICES // model)
    fsdp = 2 ** draw(st.integers(least.bit_length() - 1, most.bit_length() - 1))
    if draw(st.booleans()):
        return AbstractMesh((fsdp, model), ("fsdp", "model"))
    room = MAX_DEVICES // (fsdp * model)
    data = 2 ** draw(st.integers(0, room.bit_length() - 1))
    return AbstractMesh((data, fsdp, model), ("data", "fsdp", "model"))


# --------------------------------------------------------------------------- the checks

def shard_bytes(plan: Plan) -> int:
    """Bytes one chip holds of the parameters and the optimizer state."""
    size = {"bfloat16": 2, "float32": 4, "int32": 4}
    total = 0
    for name, (shape, dtype, spec) in plan.leaves().items():
        if not name.startswith("batch."):
            total += math.prod(shard_shape(NamedSharding(plan.mesh, spec), shape)) * size[dtype]
    return total


def step_call(plan: Plan, job: Mesh) -> Call:
    """``jit(train_step, in_shardings=plan, out_shardings=plan, donate_argnums=(0, 1))``
    called with ShapeDtypeStructs under ``jax.set_mesh(job)``: (params, opt_state, batch)
    -> (params, opt_state, loss)."""
    def arg(leaf):
        shape, dtype, spec = leaf
        return Arg.abstract(shape, dtype, NamedSharding(plan.mesh, spec))

    def sharding(leaf):
        return NamedSharding(plan.mesh, leaf[2])

    def tree(f, d):
        return {k: tree(f, v) if isinstance(v, dict) else f(v) for k, v in d.items()}

    state = (plan.params, plan.opt_state)
    args = (tree(arg, plan.params), tree(arg, plan.opt_state), tree(arg, plan.batch))
    outs = (*(tree(lambda leaf: Out(leaf[0], leaf[1]), t) for t in state), Out((), "float32"))
    shardings = (*(tree(sharding, t) for t in state), NamedSharding(plan.mesh, P()))
    options = JitOptions(in_shardings=(*shardings[:2], tree(sharding, plan.batch)),
                         out_shardings=shardings, donate_argnums=(0, 1))
    return Call(args=args, outputs=outs, options=options, context_mesh=job, devices=job.size)


def forward_call(plan: Plan, job: Mesh, m: Model = MODEL) -> Call:
    """``jit(forward)(params, tokens)`` -> logits, the compiler left to place the result."""
    args = ({k: Arg.abstract(s, d, NamedSharding(plan.mesh, p))
             for k, (s, d, p) in plan.params.items()},
            Arg.abstract(*plan.batch["tokens"][:2], NamedSharding(plan.mesh,
                                                                  plan.batch["tokens"][2])))
    logits = Out((global_batch(m, plan.mesh), m.seq, m.vocab), "bfloat16")
    return Call(args=args, outputs=logits, context_mesh=job, devices=job.size)


def gradient_shardings(plan: Plan) -> tuple:
    """The out_shardings of the transposed equation ``jax.grad`` stages for
    ``jit(loss, in_shardings=(params, tokens, targets))``: one cotangent per parameter (the
    integer tokens and targets have none), and the loss replicated."""
    params = [NamedSharding(plan.mesh, spec) for _, _, spec in plan.params.values()]
    tokens = [NamedSharding(plan.mesh, plan.batch[k][2]) for k in ("tokens", "targets")]
    loss = JitEquation((*params, *tokens), (NamedSharding(plan.mesh, P()),))
    every_input = set(range(len(params) + 2))
    body = JitBody(inputs=len(every_input), dependencies=[every_input],
                   residuals=len(params), stored_residuals=len(params))
    back = transposed_equation(loss, body, (True,) * len(params) + (False, False), (True,))
    return back.out_shardings


def check_plan(mesh: AbstractMesh, m: Model = MODEL) -> dict[str, object]:
    """Every check above on one mesh; what was found (raises AssertionError on a failure)."""
    plan = plan_for(mesh, m)
    for name, (shape, _, spec) in plan.leaves().items():
        shard_shape(NamedSharding(mesh, spec), shape)   # a Rejection names the rule (DIV-1)
    held = shard_bytes(plan)
    assert held <= m.hbm_bytes, f"{mesh}: {held / GiB:.1f} GiB of state per chip"
    job = Mesh.iota(mesh.axis_sizes, mesh.axis_names)   # the job's chips, in order
    step = jit_call(step_call(plan, job))
    assert step.accepted, f"{mesh}: the training step is refused: {step.message}"
    # The results come back where the plan puts them, on the job's chips.
    planned = [leaf.spec for _, leaf in leaves_with_paths(step_call(plan, job).options.out_shardings)]
    for path, got, spec in zip(step.out_paths, step.out_shardings, planned, strict=True):
        assert isinstance(got, NamedSharding) and got.mesh == job and got.spec == spec, \
            f"{mesh}: {path} comes back as {got}, the plan says {spec}"
    forward = jit_call(forward_call(plan, job))
    assert forward.accepted, f"{mesh}: the forward step is refused: {forward.message}"
    for name, grad, (_, _, spec) in zip(plan.params, gradient_shardings(plan),
                                        plan.params.values(), strict=True):
        assert grad == NamedSharding(mesh, spec), \
            f"{mesh}: the gradient of {name} comes back as {grad}, the parameter is {spec}"
    return {"mesh": mesh, "devices": job.size, "GiB per chip": round(held / GiB, 1),
            "batch": global_batch(m, mesh)}


def refusal(mesh: AbstractMesh, m: Model = MODEL) -> str | None:
    """Why the plan does not fit ``mesh`` (None: it fits)."""
    try:
        check_plan(mesh, m)
    except (Rejection, AssertionError) as problem:
        return str(problem)
    return None


def breaking_mesh(max_fsdp: int, m: Model = MODEL) -> AbstractMesh:
    """The simplest mesh, FSDP up to ``max_fsdp`` ways, that the plan does not fit."""
    return find(meshes(max_fsdp=max_fsdp), lambda mesh: refusal(mesh, m) is not None,
                settings=settings(database=None, derandomize=True, max_examples=2000))


@settings(deadline=None)
@given(meshes())
def test_the_plan_fits_every_mesh(mesh):
    check_plan(mesh)


if __name__ == "__main__":
    try:   # ci, fresh, deep: shardlaw's profiles (shardlaw.pytest_plugin.SHORT_NAMES)
        profile = load_named_profile()
    except ValueError as error:
        sys.exit(str(error))
    print(f"Hypothesis profile {profile}: {settings.default.max_examples:,} examples")
    test_the_plan_fits_every_mesh()
    for sizes, names in [((8, 1), ("fsdp", "model")), ((128, 8), ("fsdp", "model")),
                         ((64, 128, 8), ("data", "fsdp", "model")),
                         ((8, 1024, 8), ("data", "fsdp", "model"))]:
        print(check_plan(AbstractMesh(sizes, names)))
    wider = breaking_mesh(MAX_DEVICES)
    print(f"with FSDP allowed up to {MAX_DEVICES:,} ways: {wider} breaks the plan:")
    print(" ", refusal(wider)[:300])
    sys.exit(0)
