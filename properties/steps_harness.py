"""Real-shaped steps against real JAX, step for step (issue 32, item 6).

A :class:`~shardlaw.properties.steps_strategies.StepCase` is built into the step a user
writes (:func:`build`): a model of blocks of layers (a bias, relu and gelu MLPs,
layernorm, softmax, attention, SwiGLU), scanned over stacked parameters, rematerialised
or under a ``lax.cond``, taken forward, under ``jax.grad`` of its loss, under
``jax.vmap`` over examples, or as an optax training step with its optimizer state; its
parameters and batch placed by a sharding plan (replicated, data-parallel, FSDP,
tensor-parallel; activation constraints, ``out_shardings``, donation, shardings given as
``in_shardings``) over an Auto, Explicit or abstract mesh.

:func:`compare_step` holds the spec to ``jax.jit`` as the program properties do
(:mod:`shardlaw.properties.program_harness`, whose comparisons it calls): JAX traces,
lowers, compiles and runs the step (on an abstract mesh it traces it); the spec describes
it (:func:`~shardlaw.spec.bridge.program.describe_program`) and
:func:`~shardlaw.spec.explain_program` answers: the same refusal (stage and JAX's class)
or the same results (shardings, committedness, types, device assignment). Under
``grad`` the spec answers twice, the second time by its own rewrite
(:func:`~shardlaw.spec.program.autodiff.grad_program` of the loss's description, held by
:func:`~shardlaw.properties.program_ad_harness.compare_rewrite`, and its placing
equations against JAX's, less the residuals its jits pass: :func:`placing`).

Where the spec cannot describe a construct yet (``describe_program`` says so with its
TypeError, or re-raises what JAX refused while tracing), the example is **not
described**: it never counts as agreement; :data:`NOT_DESCRIBED` counts it by the
construct the message names. Any other exception the spec raises is a problem (a bare
exception). :data:`TALLY` counts every example's outcome; rules seen on agreeing
examples are recorded under :data:`SOURCE` (:func:`steps_hit_counts`).

:func:`compare_fuzz` is the fuzz layer: a chain of operations of a wide vocabulary under a
transformation (:func:`~shardlaw.properties.steps_strategies.fuzz_programs`), every
verdict's acceptance held to JAX's and no bare exception.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import warnings
from typing import Any, Callable

from shardlaw.properties import hits
from shardlaw.properties.program_ad_harness import compare_rewrite, signature
from shardlaw.properties.program_harness import (
    JaxOutcome, jax_class_agrees, outcome_problems, stage_in_jax, type_of_aval, with_choices,
)
from shardlaw.properties.steps_strategies import FuzzCase, StepCase
from shardlaw.spec import Rejection, explain_program
from shardlaw.spec.program.autodiff import grad_program
from shardlaw.spec.program.description import Program

__all__ = ["SOURCE", "FUZZ_SOURCE", "TALLY", "NOT_DESCRIBED", "Built", "build", "compare_step",
           "compare_fuzz", "steps_hit_counts", "construct_of", "NotDescribed", "tally_lines",
           "fuzz_function", "settle", "placing", "D", "H", "S", "B"]

SOURCE = "steps"
FUZZ_SOURCE = "steps-fuzz"
# outcome -> examples: "agree", "not described", "disagree"
TALLY: collections.Counter = collections.Counter()
# construct -> examples the spec could not describe
NOT_DESCRIBED: collections.Counter = collections.Counter()
# The model's sizes: width, hidden width, sequence (6: split over 4 or 8 it does not divide),
# batch.
D, H, S, B = 16, 32, 6, 8
CLEAR_EVERY = 100


def steps_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting side, refusing side) over the steps compared so far."""
    return hits.counts(SOURCE)


def tally_lines() -> list[str]:
    """The outcomes counted so far, per construct the examples not described, and per rule
    the agreeing examples on its accepting and refusing sides (both harnesses' sources)."""
    lines = [f"{k}: {v}" for k, v in sorted(TALLY.items())]
    lines += [f"not described, {k}: {v}" for k, v in NOT_DESCRIBED.most_common()]
    for source in (SOURCE, FUZZ_SOURCE):
        lines += [f"{source} {rule}: accepted {a}, refused {r}"
                  for rule, (a, r) in sorted(hits.counts(source).items())]
    return lines


# --------------------------------------------------------------------------- the model

def _layer(kind: str, p: dict, h: Any) -> Any:
    """One layer of ``kind`` on activations ``h`` (..., S, D), its parameters in ``p``."""
    import jax
    import jax.numpy as jnp

    if kind == "bias":
        return h + p["bias_b"]
    if kind in ("relu", "gelu"):
        act = jax.nn.relu if kind == "relu" else jax.nn.gelu
        return h + act(h @ p[f"{kind}_w1"] + p[f"{kind}_b1"]) @ p[f"{kind}_w2"]
    if kind == "layernorm":
        mean = h.mean(-1, keepdims=True)
        var = ((h - mean) ** 2).mean(-1, keepdims=True)
        return (h - mean) * jax.lax.rsqrt(var + 1e-5) * p["layernorm_g"]
    if kind == "softmax":
        return jax.nn.softmax(h, axis=-1)
    if kind == "attention":
        q, k, v = (h @ p[f"attention_{n}"] for n in ("q", "k", "v"))
        scores = jnp.einsum("...qd,...kd->...qk", q, k) / 4.0
        return h + jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(scores, -1), v) \
            @ p["attention_o"]
    gate = jax.nn.silu(h @ p["swiglu_w1"]) * (h @ p["swiglu_w3"])
    return h + gate @ p["swiglu_w2"]


# parameter -> (shape, its split under fsdp, under tp): "x" the data axis, "y" the model axis
PARAMS = {
    "bias_b": ((D,), (None,), (None,)),
    "relu_w1": ((D, H), ("x", None), (None, "y")), "relu_b1": ((H,), (None,), ("y",)),
    "relu_w2": ((H, D), ("x", None), ("y", None)),
    "gelu_w1": ((D, H), ("x", None), (None, "y")), "gelu_b1": ((H,), (None,), ("y",)),
    "gelu_w2": ((H, D), ("x", None), ("y", None)),
    "layernorm_g": ((D,), (None,), (None,)),
    "attention_q": ((D, D), ("x", None), (None, "y")),
    "attention_k": ((D, D), ("x", None), (None, "y")),
    "attention_v": ((D, D), ("x", None), (None, "y")),
    "attention_o": ((D, D), ("x", None), ("y", None)),
    "swiglu_w1": ((D, H), ("x", None), (None, "y")), "swiglu_w3": ((D, H), ("x", None), (None, "y")),
    "swiglu_w2": ((H, D), ("x", None), ("y", None)),
}


def _names(case: StepCase) -> list[str]:
    return [name for name in PARAMS if name.split("_")[0] in case.layers]


def _constrained(case: StepCase, mesh: Any, h: Any) -> Any:
    """``h`` under the case's activation constraint (its spec read from ``h``'s rank): a
    ``with_sharding_constraint``, a ``reshard`` over an Explicit mesh."""
    import jax

    P = jax.sharding.PartitionSpec
    if case.constraint is None:
        return h
    spec = {"batch": P("x") if h.ndim == 3 else P(),
            "model": P(*(None,) * (h.ndim - 1), "y"),
            "rank": P(*(None,) * (h.ndim + 1))}[case.constraint]
    sharding = jax.sharding.NamedSharding(mesh, spec)
    if case.mesh == "explicit" and case.constraint != "rank":   # as users move a value
        return jax.sharding.reshard(h, sharding)                # over Explicit axes
    return jax.lax.with_sharding_constraint(h, sharding)


def forward_of(case: StepCase, mesh: Any) -> Callable[[Any, Any], Any]:
    """The model's forward pass ``(params, x) -> activations``."""
    import jax
    import jax.numpy as jnp

    def block(p: dict, h: Any) -> Any:
        for kind in case.layers:
            h = _constrained(case, mesh, _layer(kind, p, h))
        return h

    body = jax.checkpoint(block) if case.remat else block
    if case.cond:
        inner = body

        def body(p: dict, h: Any) -> Any:   # noqa: F811 - the block under a cond
            return jax.lax.cond(jnp.sum(h) > 0, inner, lambda p, h: h, p, h)

    def forward(params: Any, x: Any) -> Any:
        if case.scan:
            return jax.lax.scan(lambda h, p: (body(p, h), None), x, params)[0]
        for p in params:
            x = body(p, x)
        return x
    return forward


def loss_of(forward: Callable) -> Callable:
    import jax.numpy as jnp

    def loss(params: Any, x: Any) -> Any:
        return jnp.mean(forward(params, x) ** 2)
    return loss


def _optimizer(case: StepCase) -> Any:
    import optax
    return optax.sgd(1e-2) if case.optimizer == "sgd" else optax.adamw(1e-3)


def train_of(case: StepCase, loss: Callable) -> Callable:
    """An optax training step ``(params, opt_state, x) -> (params, opt_state, loss)``."""
    import jax
    import optax

    tx = _optimizer(case)

    def train(params: Any, opt_state: Any, x: Any) -> tuple:
        value, grads = jax.value_and_grad(loss)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value
    return train


# --------------------------------------------------------------------------- meshes and plans

def mesh_of(case: StepCase, backwards: bool = False) -> Any:
    """The case's mesh: (data ``x``, model ``y``) axes, Auto or Explicit, or abstract."""
    import jax
    import numpy as np

    kinds = jax.sharding.AxisType
    if case.mesh == "abstract":
        return jax.sharding.AbstractMesh(case.grid, ("x", "y"), axis_types=(kinds.Auto,) * 2)
    kind = kinds.Explicit if case.mesh == "explicit" else kinds.Auto
    devices = jax.devices()[::-1] if backwards else jax.devices()
    return jax.sharding.Mesh(np.array(devices).reshape(case.grid), ("x", "y"),
                             axis_types=(kind,) * 2)


def _param_spec(case: StepCase, name: str) -> tuple:
    _, fsdp, tp = PARAMS[name]
    split = {"fsdp": fsdp, "tp": tp}.get(case.plan, (None,) * len(fsdp))
    return ((None,) if case.scan else ()) + split


def _batch_spec(case: StepCase) -> tuple:
    data = None if case.plan == "replicated" else "x"
    return (data, "y", None) if case.refused == "indivisible" else (data,)


def _shardings(case: StepCase, mesh: Any, params_mesh: Any) -> tuple[Any, Any]:
    """(the parameters' shardings, in the model's tree; the batch's sharding)."""
    import jax

    NS, P = jax.sharding.NamedSharding, jax.sharding.PartitionSpec
    one = {n: NS(params_mesh, P(*_param_spec(case, n))) for n in _names(case)}
    tree = one if case.scan else tuple(dict(one) for _ in range(case.depth))
    return tree, NS(mesh, P(*_batch_spec(case)))


def _shapes(case: StepCase) -> tuple[Any, tuple]:
    """(the parameters' shapes, in the model's tree; the batch's shape)."""
    one = {n: ((case.depth,) if case.scan else ()) + PARAMS[n][0] for n in _names(case)}
    tree = one if case.scan else tuple(dict(one) for _ in range(case.depth))
    return tree, (B, S, D)


# --------------------------------------------------------------------------- building

@dataclasses.dataclass
class Built:
    """The step JAX runs (``jitted``), a fresh set of its arguments each call of
    ``arguments``, and, under ``grad``, the jitted loss whose description the spec's own
    rewrite differentiates."""

    jitted: Any
    arguments: Callable[[], tuple]
    loss: Any = None
    abstract: bool = False


def build(case: StepCase) -> Built:
    """The case as the user writes it: the function, jitted, and its arguments."""
    import jax

    mesh = mesh_of(case)
    params_mesh = mesh_of(case, backwards=True) if case.refused == "devices" else mesh
    forward = forward_of(case, mesh)
    loss = loss_of(forward)
    p_shard, x_shard = _shardings(case, mesh, params_mesh)
    options: dict[str, Any] = {}
    if case.out and case.transform in ("forward", "vmap"):
        spec = {"batch": ("x",), "sequence": (None, "y")}[case.out]
        options["out_shardings"] = jax.sharding.NamedSharding(mesh,
                                                              jax.sharding.PartitionSpec(*spec))
    # a split that does not divide is given as in_shardings (an array cannot hold it)
    given = case.mesh != "abstract" and (case.given or case.refused == "indivisible")
    if given:
        options["in_shardings"] = (p_shard, None, x_shard) if case.transform == "train" \
            else (p_shard, x_shard)
    if case.donate:
        options["donate_argnums"] = (0, 1) if case.transform == "train" else (1,)
    fun = {"forward": forward, "vmap": jax.vmap(forward, in_axes=(None, 0)),
           "train": train_of(case, loss)}.get(case.transform)
    jitted_loss = None
    if fun is None:   # grad: of the loss jitted with the plan's options, as users write it
        jitted_loss = jax.jit(loss, **options)
        jitted = jax.jit(jax.grad(jitted_loss))
    else:
        jitted = jax.jit(fun, **options)
    return Built(jitted, lambda: _arguments(case, p_shard, x_shard, given), jitted_loss,
                 case.mesh == "abstract")


def _arguments(case: StepCase, p_shard: Any, x_shard: Any, given: bool) -> tuple:
    """Parameters, the optimizer's state (a training step) and a batch: placed by the plan,
    numpy arrays (shardings given as in_shardings) or ShapeDtypeStructs (an abstract mesh)."""
    import jax
    import numpy as np

    p_shapes, x_shape = _shapes(case)

    def make(shape: tuple, sharding: Any) -> Any:
        if case.mesh == "abstract":
            return jax.ShapeDtypeStruct(shape, np.float32, sharding=sharding)
        data = (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 7) / 7.0
        return data if given else jax.device_put(data, sharding)

    one = p_shard if case.scan else p_shard[0]
    blocks = [{n: make(shape, one[n]) for n, shape in (p_shapes if case.scan else p_shapes[0]).items()}
              for _ in range(1 if case.scan else case.depth)]
    params = blocks[0] if case.scan else tuple(blocks)
    x = make(x_shape, x_shard)
    if case.transform != "train":
        return params, x
    tx = _optimizer(case)
    state = jax.eval_shape(tx.init, params) if case.mesh == "abstract" else tx.init(params)
    return params, state, x


# --------------------------------------------------------------------------- not described

class NotDescribed(Exception):
    """The spec cannot describe a construct of the step yet (``construct`` names it)."""

    def __init__(self, construct: str, message: str) -> None:
        super().__init__(message)
        self.construct = construct


# message keyword -> the construct it names
_CONSTRUCTS = (("custom_jvp", "custom_jvp (jax.nn.relu, ...)"), ("custom_vjp", "custom_vjp"),
               ("scan", "scan body"), ("while", "while/fori_loop body"),
               ("cond", "cond branches"), ("checkpoint", "remat body"),
               ("remat", "remat body"), ("key<", "typed keys"), ("vmap", "vmap (batching)"),
               ("layout", "layouts"))


def construct_of(error: BaseException) -> str:
    """The construct an error of describe_program or a rewrite names (else its class)."""
    message = str(error)
    for word, construct in _CONSTRUCTS:
        if re.search(re.escape(word), message):
            return construct
    return f"other ({type(error).__name__}: {message[:60]})"


# PROG-0 refusals that say the spec does not describe something yet: (pattern, construct)
_UNDESCRIBED = ((r"the primitive '(\w+)' .* whose batching the spec knows",
                 "vmap of {} (batching)"),
                (r"a value's dtype must be one of .* got '(key<\w+>)'", "typed keys ({})"))


def _refused_as_undescribed(error: Rejection) -> str | None:
    """The construct a refusal says the spec cannot describe yet (PROG-0: a primitive vmap
    does not batch, a typed key; any rule: a rewrite "not written" yet), or None: a
    refusal of the spec's rules."""
    return _undescribed(error.failure.rule, str(error))


def _undescribed(rule: str | None, message: str) -> str | None:
    if "not written" in message:
        said = re.sub(r"^[\s:]*(at \S+:)?\s*", "", message[message.find("]") + 1:])
        return f"{rule}: {re.sub(r' at [^ :]+', '', said)[:70]}"
    if rule != "PROG-0":
        return None
    for pattern, construct in _UNDESCRIBED:
        found = re.search(pattern, message)
        if found:
            return construct.format(found.group(1))
    return None


def _spec_unread(error: BaseException) -> bool:
    """Whether ``error`` is the spec saying it cannot describe something (its TypeError)."""
    return isinstance(error, TypeError) and not isinstance(error, Rejection) and \
        type(error).__module__.startswith("shardlaw")


def _described(fun: Any, args: tuple, outcome: JaxOutcome) -> Program:
    """describe_program of ``fun``; NotDescribed where the spec cannot describe it, or
    where it re-raises the refusal JAX made while tracing (JAX's error stands)."""
    from shardlaw.spec.bridge.program import describe_program

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return describe_program(fun, *args)
        except Rejection:
            raise
        except Exception as error:  # noqa: BLE001 - classified
            if _spec_unread(error):
                raise NotDescribed(construct_of(error), str(error)) from error
            if outcome.stage == "trace" and type(error) is type(outcome.error):
                raise NotDescribed(f"refused while tracing, JAX's {type(error).__name__} "
                                   f"stands", str(error)) from error
            raise


# --------------------------------------------------------------------------- comparing

def _run(built: Built) -> JaxOutcome:
    """JAX's outcome: traced, lowered, compiled and run (traced only on an abstract mesh)."""
    import jax

    outcome = JaxOutcome()
    hits.record_jax_calls(1)
    if hits.jax_calls() % CLEAR_EVERY == 0:
        jax.clear_caches()
    args = built.arguments()
    if not built.abstract:
        stage_in_jax(built.jitted, args, outcome)
        return outcome
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            traced = built.jitted.trace(*args)
        except Exception as error:  # noqa: BLE001 - compared
            outcome.stage, outcome.error = "trace", error
            return outcome
    outcome.out_types = [type_of_aval(a) for a in traced.jaxpr.out_avals]
    return outcome


def _traced_problems(verdict: Any, outcome: JaxOutcome) -> list[str]:
    """The spec's verdict until trace against JAX's trace (an abstract mesh)."""
    if outcome.error is not None:
        if verdict.accepted:
            return [f"JAX refused at trace with {type(outcome.error).__name__}: "
                    f"{outcome.error}; the spec accepts"]
        if verdict.stage != "trace" or not jax_class_agrees(verdict, outcome.error):
            return [f"JAX refused at trace with {type(outcome.error).__name__}; the spec at "
                    f"{verdict.stage} with {verdict.jax_error}: {verdict.message}"]
        return []
    if not verdict.accepted:
        return [f"JAX traces it; the spec refuses: {verdict.message}"]
    if tuple(verdict.out_types) != tuple(outcome.out_types):
        return [f"result types: spec {tuple(verdict.out_types)!r}, JAX "
                f"{tuple(outcome.out_types)!r}"]
    return []


def _refusal_problems(error: Rejection, outcome: JaxOutcome) -> list[str]:
    """The spec refused while describing: JAX must refuse at that stage with that class."""
    failure = error.failure
    if outcome.error is None:
        return [f"JAX accepts; the spec refuses while describing: {error}"]
    names = {c.__name__ for c in type(outcome.error).__mro__}
    if error.stage != outcome.stage or not ({failure.jax_error,
                                             failure.error_type.__name__} & names):
        return [f"JAX refused at {outcome.stage} with {type(outcome.error).__name__}; the "
                f"spec at {error.stage}: {error}"]
    return []


def _verdict_problems(program: Program, outcome: JaxOutcome, abstract: bool
                      ) -> tuple[Any, list[str]]:
    """The spec's verdict on the described program, and how it parts from JAX's outcome
    (NotDescribed where the verdict says a rule is not written yet)."""
    verdict = explain_program(program, until="trace") if abstract else \
        explain_program(with_choices(program, outcome))
    construct = None if verdict.accepted else _undescribed(verdict.rule, verdict.message)
    if construct is not None:
        raise NotDescribed(construct, verdict.message)
    problems = _traced_problems(verdict, outcome) if abstract else \
        outcome_problems(verdict, outcome)
    return verdict, problems


def _record(verdict: Any, source: str) -> None:
    for rule_id in dict.fromkeys(verdict.trace):
        hits.record(source, rule_id, refused=not verdict.accepted and rule_id == verdict.rule)


def settle(answer: Callable[[], list[str]], outcome: JaxOutcome, source: str) -> list[str]:
    """One answer of the spec, tallied: its problems, or none where not described (a
    refusal raised while describing held to JAX's ``outcome``)."""
    try:
        problems = answer()
    except NotDescribed as unread:
        TALLY["not described"] += 1
        NOT_DESCRIBED[unread.construct] += 1
        return []
    except Rejection as error:
        construct = _refused_as_undescribed(error)
        if construct is not None:
            TALLY["not described"] += 1
            NOT_DESCRIBED[construct] += 1
            return []
        problems = _refusal_problems(error, outcome)
        if not problems:
            hits.record(source, error.failure.rule, refused=True)
    TALLY["disagree" if problems else "agree"] += 1
    return problems


def compare_step(case: StepCase) -> list[str]:
    """Every disagreement between the spec and JAX on the step (empty: they agree, or the
    spec cannot describe it: counted in :data:`NOT_DESCRIBED`, never as agreement)."""
    built = build(case)
    outcome = _run(built)

    def described() -> list[str]:
        program = _described(built.jitted, built.arguments(), outcome)
        verdict, problems = _verdict_problems(program, outcome, built.abstract)
        if not problems:
            _record(verdict, SOURCE)
        return problems

    problems = settle(described, outcome, SOURCE)
    if built.loss is not None and not built.abstract:
        problems += settle(lambda: _rewritten(built, outcome), outcome, SOURCE)
    return problems


def _rewritten(built: Built, outcome: JaxOutcome) -> list[str]:
    """The spec's own gradient (grad_program of the loss's description, with respect to
    every parameter) against JAX's."""
    import jax

    args = built.arguments()
    loss = _described(built.loss, args, outcome)
    refused = explain_program(loss, until="trace")
    if not refused.accepted:   # the loss refused while tracing: the gradient is too
        return _traced_problems(refused, outcome)
    opaque = _opaque_bodies(loss)
    if opaque:   # its residuals are the body's: the rewrite cannot list JAX's equations
        raise NotDescribed(f"{opaque[0]} body under grad_program", "read opaque")
    try:
        theirs = _described(built.jitted, args, outcome)
    except (NotDescribed, Rejection):
        theirs = None   # its placing equations are then not compared
    params = tuple(range(len(jax.tree_util.tree_leaves(args[0]))))
    try:
        grad_program(loss, params)
    except Rejection as error:   # a rewrite not written yet is not described
        construct = _refused_as_undescribed(error)
        if construct is not None:
            raise NotDescribed(construct, str(error)) from error
    outcome.described = None   # compared below, less what depends on the residuals
    try:
        problems = compare_rewrite(lambda: grad_program(loss, params), outcome, SOURCE)
        if theirs is None or problems or outcome.error is not None:
            return problems   # (a program JAX refused is described up to the refusal)
        ours = placing(signature(grad_program(loss, params)))
    except TypeError as error:
        if _spec_unread(error):
            raise NotDescribed(construct_of(error), str(error)) from error
        raise
    if ours != placing(signature(theirs)):
        return [f"the gradient's placing equations: spec {ours!r}, JAX "
                f"{placing(signature(theirs))!r}"]
    return []


def placing(entries: tuple) -> list:
    """The placing equations of a signature (:func:`~shardlaw.properties.program_ad_harness.
    signature`) in order, jits' bodies flattened into it: every constraint, device_put,
    reshard, shard_map and collective with its shardings and types. A jit's own in and out
    shardings and types are left out: the jits a gradient makes take and return the
    residuals JAX chooses to save (the spec linearizes the primitives it knows in its own
    way), and the user's jit options are held by the verdict's results."""
    out: list = []
    for entry in entries:
        if entry[0] == "jit":
            out += placing(entry[4])
        else:
            out.append(entry)
    return out


# Primitives with bodies the spec reads as one opaque equation (its rewrites cannot say
# what JAX saves of their bodies or how it transposes them).
BODIES = ("cond", "scan", "while", "checkpoint", "remat", "custom_jvp_call", "custom_vjp_call",
          "custom_vjp_call_jaxpr", "closed_call", "core_call")


def _opaque_bodies(program: Program) -> list[str]:
    """The primitives with bodies ``program`` holds as opaque equations, inner jits' too."""
    from shardlaw.spec.program.description import Jit, Opaque

    found = []
    for eq in program.equations:
        if isinstance(eq, Opaque) and eq.primitive in BODIES:
            found.append(eq.primitive)
        elif isinstance(eq, Jit):
            found += _opaque_bodies(eq.body)
    return found


# --------------------------------------------------------------------------- the fuzz layer

def _fuzz_op(name: str, mesh: Any) -> Callable[[Any], Any]:
    """One operation of the fuzz vocabulary, in JAX, on a value of any rank >= 1."""
    import jax
    import jax.numpy as jnp

    lax, nn = jax.lax, jax.nn
    ops: dict[str, Callable[[Any], Any]] = {
        "add_bias": lambda h: h + jnp.arange(h.shape[-1], dtype=h.dtype),
        "mul": lambda h: h * h, "tanh": jnp.tanh, "exp": lambda h: jnp.exp(jnp.tanh(h)),
        "relu": nn.relu, "gelu": nn.gelu, "erf": jax.scipy.special.erf,
        "logsumexp": lambda h: h - jax.scipy.special.logsumexp(h, -1, keepdims=True),
        "sum_keep": lambda h: h - h.sum(-1, keepdims=True),
        "max_keep": lambda h: h - h.max(-1, keepdims=True),
        "transpose": lambda h: h.T, "reshape": lambda h: h.reshape(-1).reshape(h.shape),
        "matmul": lambda h: h @ jnp.ones((h.shape[-1], h.shape[-1]), h.dtype),
        "concat_split": lambda h: jnp.concatenate([h, h], -1)[..., :h.shape[-1]],
        "cumsum": lambda h: jnp.cumsum(h, -1), "sort": lambda h: jnp.sort(h, -1),
        "argmax_onehot": lambda h: h + nn.one_hot(jnp.argmax(h, -1), h.shape[-1]),
        "where": lambda h: jnp.where(h > 0, h, 0.5 * h),
        "iota_add": lambda h: h + lax.broadcasted_iota(h.dtype, h.shape, h.ndim - 1),
        "square": lambda h: h ** 2,
        "astype": lambda h: h.astype(jnp.bfloat16).astype(h.dtype),
        "take": lambda h: jnp.take(h, jnp.arange(h.shape[-1])[::-1], axis=-1),
        "clip": lambda h: jnp.clip(h, -1.0, 1.0),
        "broadcast": lambda h: h + jnp.broadcast_to(h[..., :1], h.shape),
        "softmax": lambda h: nn.softmax(h, -1),
        "remat_tanh": jax.checkpoint(jnp.tanh),
        "cond_neg": lambda h: lax.cond(h.sum() > 0, lambda v: -v, lambda v: v, h),
        "scan_rows": lambda h: lax.scan(lambda c, r: (c + r, c * r), jnp.zeros_like(h[0]),
                                        h)[1],
        "fori_double": lambda h: lax.fori_loop(0, 2, lambda i, v: v * 1.5, h),
        "constraint": lambda h: lax.with_sharding_constraint(
            h, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())),
        "inner_jit": jax.jit(lambda v: v * 2.0 + 1.0),
        "stop_gradient": lax.stop_gradient, "custom_vjp_clip": _clip_gradient(),
        "rng_bits": lambda h: h + jax.random.uniform(jax.random.key(0), h.shape, h.dtype),
        **_refusable_bodies(mesh),
    }
    return ops[name]


def _refusable_bodies(mesh: Any) -> dict[str, Callable[[Any], Any]]:
    """The fuzz operations whose bodies JAX refuses on some draws while tracing them."""
    import jax

    lax, P = jax.lax, jax.sharding.PartitionSpec

    def rows(h: Any) -> Any:   # a constraint of rank 2: the rows split over x
        return lax.with_sharding_constraint(h, jax.sharding.NamedSharding(mesh, P(None, "x")))

    @jax.custom_jvp
    def constrained(h: Any) -> Any:
        return rows(jax.numpy.sin(h))

    constrained.defjvp(lambda p, t: (constrained(p[0]), jax.numpy.cos(p[0]) * t[0]))
    scattered = jax.shard_map(
        lambda a: lax.all_gather(lax.psum_scatter(a, "x", tiled=True), "x", tiled=True),
        mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
    return {"while_constraint": lambda h: lax.while_loop(
                lambda c: c[0] < 2, lambda c: (c[0] + 1, rows(c[1] * 1.5)), (0, h))[1],
            "custom_jvp_constraint": constrained, "smap_scatter_gather": scattered}


def _clip_gradient() -> Callable[[Any], Any]:
    import jax

    @jax.custom_vjp
    def clip(x: Any) -> Any:
        return x

    clip.defvjp(lambda x: (x, None), lambda _, g: (jax.numpy.clip(g, -1.0, 1.0),))
    return clip


def fuzz_function(case: FuzzCase, mesh: Any) -> tuple[Any, tuple[int, ...]]:
    """The fuzz case's function (not yet jitted) and how many copies of the value it takes."""
    import jax

    chain = [_fuzz_op(name, mesh) for name in case.ops]

    def f(h: Any) -> Any:
        for op in chain:
            h = op(h)
        return h

    def total(h: Any) -> Any:
        return f(h).sum()
    return {"none": (f, (0,)), "grad": (jax.grad(total), (0,)), "vmap": (jax.vmap(f), (0,)),
            "jvp": (lambda p, t: jax.jvp(f, (p,), (t,)), (0, 0)),
            "vmap_grad": (jax.vmap(jax.grad(total)), (0,))}[case.transform]


def compare_fuzz(case: FuzzCase) -> list[str]:
    """The fuzz layer: the spec's acceptance of the case equals JAX's, and the spec raises
    nothing but a refusal or its TypeError saying what it cannot describe."""
    import jax
    import numpy as np

    kind = jax.sharding.AxisType.Explicit if case.explicit else jax.sharding.AxisType.Auto
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(case.grid), ("x", "y"),
                             axis_types=(kind,) * 2)
    fun, copies = fuzz_function(case, mesh)
    data = (np.arange(64, dtype=np.float32).reshape(8, 8) % 5) / 5.0
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*case.spec))

    def arguments() -> tuple:
        return tuple(jax.device_put(data, sharding) if case.committed else data
                     for _ in copies)
    built = Built(jax.jit(fun), arguments)
    outcome = _run(built)

    def accepted_alike() -> list[str]:
        program = _described(built.jitted, built.arguments(), outcome)
        verdict = explain_program(with_choices(program, outcome))
        if verdict.accepted != (outcome.error is None):
            said = "accepts" if verdict.accepted else f"refuses ({verdict.message})"
            return [f"JAX {'refused: ' + repr(outcome.error) if outcome.error else 'accepts'};"
                    f" the spec {said}"]
        _record(verdict, FUZZ_SOURCE)
        return []
    return settle(accepted_alike, outcome, FUZZ_SOURCE)
