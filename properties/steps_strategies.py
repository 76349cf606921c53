"""Real-shaped training steps, drawn: the cases of :mod:`shardlaw.properties.steps_harness`.

A :class:`StepCase` says which step a user wrote and how it is sharded: the layers of a
block (:data:`LAYERS`: a bias, relu and gelu MLPs, layernorm, softmax, attention, a SwiGLU
MLP), how many blocks and whether they are scanned (``lax.scan`` over stacked
parameters), rematerialised (``jax.checkpoint``) or taken under a ``lax.cond``; what is
asked of the step (:data:`TRANSFORMS`: the forward pass, ``jax.grad`` of its loss,
``jax.vmap`` over examples, or an optax training step with its optimizer state); the
mesh (:data:`MESH_KINDS`: concrete Auto or Explicit axes over 8 devices, or an abstract
mesh of up to 65,536 devices whose arguments are ``jax.ShapeDtypeStruct`` values); and
the sharding plan (:data:`PLANS`: replicated, data-parallel, FSDP, tensor-parallel) with
its options (activation constraints, ``out_shardings``, donation, shardings given as
``in_shardings`` instead of placed arguments). Some draws are plans JAX refuses
(:data:`REFUSED`): a sequence dimension of 6 split over an axis that does not divide it,
a constraint of the wrong rank, parameters on other devices than the batch.

:func:`fuzz_programs` draws the fuzz layer's programs: a chain of operations of a wider
vocabulary (:data:`VOCABULARY`) over one placed value, under a transformation.

This module imports the standard library and Hypothesis only; JAX is the harness's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

__all__ = ["LAYERS", "TRANSFORMS", "MESH_KINDS", "PLANS", "REFUSED", "GRIDS", "LARGE_GRIDS",
           "StepCase", "step_cases", "VOCABULARY", "FuzzCase", "fuzz_programs"]

LAYERS = ("bias", "relu", "gelu", "layernorm", "softmax", "attention", "swiglu")
TRANSFORMS = ("forward", "grad", "vmap", "train")
OPTIMIZERS = ("sgd", "adamw")
MESH_KINDS = ("auto", "explicit", "abstract")
PLANS = ("replicated", "dp", "fsdp", "tp")
# The ways a drawn plan goes wrong, each one JAX refuses on some meshes:
#   indivisible - the batch's sequence dimension (6) split over the model axis;
#   rank        - an activation constraint with one entry too many;
#   devices     - the parameters placed on the mesh's devices in reverse order;
#   out         - out_shardings splitting the result's sequence dimension over the model axis.
REFUSED = ("indivisible", "rank", "devices", "out")
# Meshes of 8 devices, (data, model) axes.
GRIDS = ((2, 4), (4, 2), (1, 8), (8, 1))
# Abstract meshes only: up to 65,536 devices.
LARGE_GRIDS = ((16, 64), (256, 256), (4, 16))


@dataclasses.dataclass(frozen=True)
class StepCase:
    """A drawn step: its model, what is asked of it, its mesh and its sharding plan."""

    layers: tuple[str, ...]
    depth: int = 1
    scan: bool = False
    remat: bool = False
    cond: bool = False
    transform: str = "forward"
    optimizer: str = "sgd"
    mesh: str = "auto"
    grid: tuple[int, int] = (2, 4)
    plan: str = "dp"
    constraint: str | None = None      # None, "batch", "model", "rank" (an activation spec)
    out: str | None = None             # None, "batch", "sequence" (out_shardings of the result)
    donate: bool = False
    given: bool = False                # shardings as jit in_shardings over numpy arguments
    refused: str | None = None         # one of REFUSED, or None

    def constructs(self) -> tuple[str, ...]:
        """The constructs the step holds, by name (what a count of "not described" names)."""
        named = [f"layer:{k}" for k in self.layers]
        named += [n for n, on in (("scan", self.scan), ("remat", self.remat),
                                  ("cond", self.cond)) if on]
        named.append(self.transform if self.transform != "train" else
                     f"optax:{self.optimizer}")
        return tuple(named)


@st.composite
def step_cases(draw: Any, kinds: tuple[str, ...] = MESH_KINDS) -> StepCase:
    """A step: 1 to 3 layers in a block, 1 or 2 blocks, scanned, rematerialised or under a
    cond now and then; a transformation; a mesh of ``kinds``; a plan, its options and, one
    draw in three, a way JAX may refuse it."""
    layers = tuple(draw(st.lists(st.sampled_from(LAYERS), min_size=1, max_size=3)))
    kind = draw(st.sampled_from(kinds))
    grids = GRIDS + (LARGE_GRIDS if kind == "abstract" else ())
    transform = draw(st.sampled_from(TRANSFORMS))
    refused = draw(st.sampled_from(REFUSED)) if draw(st.integers(0, 2)) == 0 else None
    if refused == "devices" and kind == "abstract":
        refused = None   # an abstract mesh holds no devices
    if refused == "out" and transform != "forward":
        refused = None
    constraint = draw(st.sampled_from([None, None, "batch", "model"]))
    return StepCase(
        layers=layers, depth=draw(st.integers(1, 2)), scan=draw(st.booleans()),
        remat=draw(st.integers(0, 3)) == 0, cond=draw(st.integers(0, 4)) == 0,
        transform=transform, optimizer=draw(st.sampled_from(OPTIMIZERS)), mesh=kind,
        grid=draw(st.sampled_from(grids)), plan=draw(st.sampled_from(PLANS)),
        constraint="rank" if refused == "rank" else constraint,
        out="sequence" if refused == "out" else draw(st.sampled_from([None, None, "batch"])),
        donate=draw(st.booleans()), given=kind != "abstract" and draw(st.integers(0, 3)) == 0,
        refused=refused)


# --------------------------------------------------------------------------- the fuzz layer

# The operations of the fuzz layer's programs, each of an (8, 8) float32 value to another
# (the harness says what each does in JAX).
VOCABULARY = ("add_bias", "mul", "tanh", "exp", "relu", "gelu", "logsumexp", "sum_keep",
              "transpose", "reshape", "matmul", "concat_split", "cumsum", "argmax_onehot",
              "sort", "where", "iota_add", "square", "astype", "take", "clip", "max_keep",
              "broadcast", "softmax", "remat_tanh", "cond_neg", "scan_rows", "fori_double",
              "constraint", "inner_jit", "stop_gradient", "erf", "custom_vjp_clip", "rng_bits",
              # bodies JAX refuses on some draws while tracing them (issue 32 item 4): a
              # constraint of rank 2 in a while loop's and a custom_jvp's body (a vmapped
              # example has rank 1; Explicit axes are not constrained), a psum_scatter in
              # a shard_map's body its shard's rows may not divide
              "while_constraint", "custom_jvp_constraint", "smap_scatter_gather")
FUZZ_TRANSFORMS = ("none", "grad", "vmap", "jvp", "vmap_grad")


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    """A chain of operations over one (8, 8) value placed by ``spec`` (axis names or None
    per dimension) on a mesh of ``grid``, under ``transform``."""

    ops: tuple[str, ...]
    transform: str
    grid: tuple[int, int]
    spec: tuple[Any, ...]
    explicit: bool = False
    committed: bool = True


@st.composite
def fuzz_programs(draw: Any) -> FuzzCase:
    """A chain of 1 to 5 operations of :data:`VOCABULARY` under one of the transforms."""
    ops = tuple(draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=5)))
    entry = st.sampled_from([None, "x", "y"])
    spec = (draw(entry), draw(entry))
    if spec[0] is not None and spec[0] == spec[1]:
        spec = (spec[0], None)
    return FuzzCase(ops, draw(st.sampled_from(FUZZ_TRANSFORMS)), draw(st.sampled_from(GRIDS)),
                    spec, explicit=draw(st.integers(0, 3)) == 0, committed=draw(st.booleans()))
