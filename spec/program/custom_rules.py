"""Custom derivatives differentiated by their own rules (issue 32), as JAX uses them.

* A ``custom_jvp`` call (``jax.nn.relu``) under ``jvp``: its rule run inline on the
  primals and a tangent of each input (zeros where none is given: JAX instantiates them
  unless the rule takes symbolic zeros); under ``linearize``/``grad``: the rule split by
  partial evaluation, as JAX's ``linearize_from_jvp`` splits it: what reads no tangent
  runs in the primal body (the primal results among it), what reads one goes onto the
  tangent body, the primal values it reads stored as residuals; a tangent the rule
  computes from primals alone is a zero.
* A ``custom_vjp`` call under ``jvp``/``linearize``: its ``fwd`` run inline in the primal
  body (its residuals, then the primal results), then one ``custom_lin`` equation
  (:class:`~shardlaw.spec.program.control_flow.CustomLin`) over the residuals and the
  nonzero tangents. Transposed (``grad``, ``vjp``), the ``custom_lin`` is its ``bwd`` run
  inline on the residuals and the cotangents (zeros where none is given). Left in a
  program it does not lower, and vmap does not batch it (LOOP-3).

A call whose rules were not read (a rule JAX failed to trace; a custom_vjp call whose
``fwd`` or ``bwd`` vmap could not batch as JAX does) is differentiated as a jit without
options is: its primal body. vmap batches a custom_vjp's ``fwd`` and ``bwd`` with its body
(:func:`~shardlaw.spec.program.control_flow_batching.batched_vjp_rules`).
"""

from __future__ import annotations

from typing import Any

from ..core.rules import reject
from .ad_bodies import NotRewritten, cotangent_type, differentiable, inline_body
from .cond_ad import emit_zeros
from .control_flow import (
    CustomJvp, CustomLin, CustomVjp, check_bwd_cotangent, check_custom_lin_transposed,
)
from .description import Program
from .primitives import BATCHING, JVP_BODIES, LINEARIZE_BODIES, TRANSPOSES

__all__ = ["jvp_custom_jvp", "linearize_custom_jvp", "jvp_custom_vjp",
           "linearize_custom_vjp", "transpose_custom_lin", "usable_rule"]


def usable_rule(eq: CustomJvp) -> Program | None:
    """``eq``'s rule where it fits its body (inputs: the non-constant primals and their
    tangents; outputs: the primal results, then the tangents ``rule_zeros`` leaves) and
    holds no closed-over constant; else None."""
    rule, body = eq.rule, eq.body
    if rule is None or rule.consts:
        return None
    ins = tuple(v.type for v in body.inputs[eq.num_consts:])
    outs = len(body.outputs)
    fits = (len(eq.rule_zeros) == outs and tuple(v.type for v in rule.inputs) == ins + ins
            and len(rule.outputs) == outs + eq.rule_zeros.count(False))
    return rule if fits else None


def _refuse(eq: Any, path: str, transform: str, why: str) -> None:
    raise reject(NotRewritten(f"a {eq.kind} equation", path, transform, why))


def _check_zeros(eq: Any, moving: list, path: str, transform: str) -> None:
    if eq.symbolic_zeros and any(t is None for t in moving[eq.num_consts:]):
        _refuse(eq, path, transform, "a rule taking symbolic zeros is read for every input "
                "differentiated only")


def _tangents_of(rule_outputs: list, eq: Any, results: tuple) -> list:
    """The tangent of each result: the rule's next one unless ``rule_zeros`` marks it a
    zero (None where the result has no tangent, an integer's)."""
    given = iter(rule_outputs)
    out = [None if zero else next(given) for zero in eq.rule_zeros]
    return [t if differentiable(r) else None for t, r in zip(out, results)]


# --------------------------------------------------------------------------- custom_jvp

@JVP_BODIES.register("custom_jvp")
def jvp_custom_jvp(eq: CustomJvp, body: Any, operands: tuple[int, ...], moving: list,
                   path: str) -> tuple[tuple[int, ...], list]:
    """A custom_jvp call's JVP: its rule inline (module docstring)."""
    rule = usable_rule(eq)
    if rule is None or all(t is None for t in moving):
        return JVP_BODIES.rules["jit"](eq, body, operands, moving, path)
    _check_zeros(eq, moving, path, "jvp")
    nc, inputs = eq.num_consts, eq.body.inputs
    tangents = tuple(t if t is not None else emit_zeros(body, inputs[i].type)
                     for i, t in enumerate(moving) if i >= nc)
    outs = inline_body(body, rule, tuple(operands[nc:]) + tangents)
    count = len(eq.body.outputs)
    results = [eq.body.value_types[n] for n in eq.body.outputs]
    return outs[:count], _tangents_of(list(outs[count:]), eq, results)


@LINEARIZE_BODIES.register("custom_jvp")
def linearize_custom_jvp(eq: CustomJvp, tape: Any, operands: tuple[int, ...], moving: list,
                         path: str, transform: str) -> tuple[tuple[int, ...], list]:
    """A custom_jvp call linearized: its rule split by partial evaluation (module
    docstring)."""
    rule = usable_rule(eq)
    if rule is None or all(t is None for t in moving):
        return LINEARIZE_BODIES.rules["jit"](eq, tape, operands, moving, path, transform)
    _check_zeros(eq, moving, path, transform)
    nc, inputs = eq.num_consts, eq.body.inputs
    count = len(inputs) - nc
    known: dict[int, int] = dict(enumerate(operands[nc:]))   # rule value -> primal number
    unknown: dict[int, Any] = {}                             # rule value -> tangent ref
    for j, t in enumerate(moving[nc:]):
        if t is None:
            known[count + j] = emit_zeros(tape.primal, inputs[nc + j].type)
        else:
            unknown[count + j] = t
    for eq_in, made in zip(rule.equations, rule.result_numbers()):
        if any(n in unknown for n in eq_in.operands):
            refs = tuple(unknown[n] if n in unknown else tape.residual(known[n])
                         for n in eq_in.operands)
            unknown.update(zip(made, tape.emit(eq_in, refs)))
        else:
            outs = tape.primal.emit(eq_in.renumbered(tuple(known[n] for n in eq_in.operands)))
            known.update(zip(made, outs))
    results = len(eq.body.outputs)
    primal = rule.outputs[:results]
    if any(n not in known for n in primal):
        _refuse(eq, path, transform, "its rule computes a primal result from a tangent")
    tangents = [unknown.get(n) for n in rule.outputs[results:]]   # (a known one: a zero)
    types = [eq.body.value_types[n] for n in eq.body.outputs]
    return tuple(known[n] for n in primal), _tangents_of(tangents, eq, types)


# --------------------------------------------------------------------------- custom_vjp

def _forward(eq: CustomVjp, into: Any, operands: tuple[int, ...], path: str, transform: str
             ) -> tuple[list[int], tuple[int, ...]]:
    """``fwd`` run inline in ``into``: (the residuals ``bwd`` takes, the primal results)."""
    nc = eq.num_consts
    outs = inline_body(into, eq.fwd, tuple(operands[nc:]))
    made = len(outs) - len(eq.body.outputs)
    fresh = iter(outs[:made])
    residuals = [operands[nc + f] if f is not None else next(fresh) for f in eq.forwarded]
    return residuals, outs[made:]


def _custom_lin(eq: CustomVjp, residuals: int, moving: list) -> CustomLin:
    nc = eq.num_consts
    given = [t for t in moving[nc:] if t is not None]
    results = tuple(eq.body.value_types[n].type for n in eq.body.outputs)
    return CustomLin(tuple(range(residuals + len(given))), results, bwd=eq.bwd,
                     bwd_zeros=eq.bwd_zeros, num_res=residuals,
                     in_zeros=tuple(t is None for t in moving[nc:]), name=eq.name,
                     in_types=tuple(v.type for v in eq.body.inputs[nc:]))


def _usable(eq: CustomVjp, moving: list, path: str, transform: str) -> bool:
    if eq.fwd is None or eq.bwd is None or eq.fwd.consts or all(t is None for t in moving):
        return False
    if any(t is not None for t in moving[:eq.num_consts]):
        _refuse(eq, path, transform, "a closed-over value of a custom_vjp function is "
                "differentiated (JAX refuses it: pass it as an argument)")
    _check_zeros(eq, moving, path, transform)
    return True


@JVP_BODIES.register("custom_vjp")
def jvp_custom_vjp(eq: CustomVjp, body: Any, operands: tuple[int, ...], moving: list,
                   path: str) -> tuple[tuple[int, ...], list]:
    """A custom_vjp call's JVP: ``fwd`` inline, then a ``custom_lin`` (module docstring)."""
    if not _usable(eq, moving, path, "jvp"):
        return JVP_BODIES.rules["jit"](eq, body, operands, moving, path)
    residuals, primal = _forward(eq, body, operands, path, "jvp")
    lin = _custom_lin(eq, len(residuals), moving)
    given = tuple(t for t in moving[eq.num_consts:] if t is not None)
    touts = body.emit(lin.renumbered(tuple(residuals) + given))
    return primal, [t if differentiable(r) else None for t, r in zip(touts, lin.results)]


@LINEARIZE_BODIES.register("custom_vjp")
def linearize_custom_vjp(eq: CustomVjp, tape: Any, operands: tuple[int, ...], moving: list,
                         path: str, transform: str) -> tuple[tuple[int, ...], list]:
    """A custom_vjp call linearized: ``fwd`` into the primal body, a ``custom_lin`` onto
    the tape (module docstring)."""
    if not _usable(eq, moving, path, transform):
        return LINEARIZE_BODIES.rules["jit"](eq, tape, operands, moving, path, transform)
    residuals, primal = _forward(eq, tape.primal, operands, path, transform)
    lin = _custom_lin(eq, len(residuals), moving)
    refs = tuple(tape.residual(n) for n in residuals) + tuple(
        t for t in moving[eq.num_consts:] if t is not None)
    touts = tape.emit(lin, refs)
    return primal, [t if differentiable(r) else None for t, r in zip(touts, lin.results)]


@TRANSPOSES.register("custom_lin")
def transpose_custom_lin(eq: CustomLin, body: Any, incoming: list, flags: list[bool],
                         number: dict[int, int], path: str, types: tuple
                         ) -> list[tuple[int, int]]:
    """A ``custom_lin`` transposed: its ``bwd`` inline on the residuals and the cotangents
    (zeros where none is given), each nonzero input's cotangent out."""
    if eq.bwd.consts:
        _refuse(eq, path, "transpose", "a bwd holding closed-over constants is not inlined")
    residuals = tuple(number[n] for n in eq.operands[:eq.num_res])
    cts = tuple(ct if ct is not None else emit_zeros(body, cotangent_type(r))
                for ct, r in zip(incoming, eq.results))
    made = iter(inline_body(body, eq.bwd, residuals + cts))
    linear = iter(eq.operands[eq.num_res:])
    out = []
    for k, (in_zero, bwd_zero) in enumerate(zip(eq.in_zeros, eq.bwd_zeros)):
        ct = None if bwd_zero else next(made)
        if ct is not None and k < len(eq.in_types):   # LOOP-4, as JAX checks bwd's results
            check_bwd_cotangent(cotangent_type(eq.in_types[k]), body.types[ct], eq.name, k,
                                path)
        operand = None if in_zero else next(linear)
        if operand is not None and ct is not None:
            out.append((operand, ct))
    return out


@BATCHING.register("custom_lin")
def batch_custom_lin(rw: Any, eq: CustomLin, numbers: tuple, dims: tuple, path: str) -> None:
    """vmap of a ``custom_lin``: refused while tracing (LOOP-3), as JAX's batching rule
    for it refuses."""
    check_custom_lin_transposed(eq.name, path, "trace")
