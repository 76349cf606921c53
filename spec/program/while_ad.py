"""A while loop (``lax.while_loop``, a ``fori_loop`` of dynamic bounds) under forward-mode
AD (issue 32): its JVP, and its linearization, as JAX gives them.

* JVP: one while loop over the predicate's constants, the body's constants and their
  nonzero tangents, the carry and its nonzero tangents; a carry whose tangent the body
  makes nonzero has one from the start (zeros where none is given), found by iterating
  to a fixed point as JAX's ``_while_loop_jvp`` does; the body is the JVP of the body
  (inputs the constants, their tangents, the carry, its tangents; a tangent the body
  makes none of returned as zeros), the predicate reads the carry and not its tangents.
* Linearization: a while stores no residual per iteration. JAX linearizes it by partial
  evaluation of its JVP (``_while_partial_eval``): the known loop, its body the primal
  half of the body's linearization returning the carry only (the residuals it computes
  left in, unreturned), runs in the primal body; the whole JVP loop runs again in the
  tangent body, every primal operand a residual.
* Reverse mode (``grad``, ``vjp``) through a while is refused as JAX refuses it (LOOP-2,
  :func:`~shardlaw.spec.program.control_flow_ad.check_while_not_transposed`).
"""

from __future__ import annotations

from typing import Any

from .ad_bodies import BodyBuilder, differentiable
from .autodiff import jvp_body, linearize_body
from .cond_ad import emit_zeros, instantiated, rebuilt
from .control_flow import While
from .control_flow_ad import REVERSE, check_while_not_transposed
from .description import Program
from .primitives import JVP_BODIES, LINEARIZE_BODIES

__all__ = ["jvp_while", "linearize_while", "carry_tangents"]


def carry_tangents(eq: While, moving: list, path: str) -> tuple[list[bool], Program,
                                                                tuple[bool, ...]]:
    """The nonzero flags of the body's inputs (its constants', then the carry's), every
    carry whose tangent the body makes nonzero made nonzero from the start (a fixed
    point), and the body's JVP and output flags for them."""
    cc, bc = eq.cond_consts, eq.body_consts
    body = eq.body_fun
    nonzero = [t is not None for t in moving[cc:]]
    while True:
        types = tuple(v.type for v, nz in zip(body.inputs, nonzero) if nz)
        jvp, flags = jvp_body(body, tuple(nonzero), f"{path}.while.body[1].jit.", types)
        grown = [a or (b and differentiable(body.inputs[bc + i]))
                 for i, (a, b) in enumerate(zip(nonzero[bc:], flags))]
        if grown == nonzero[bc:]:
            return nonzero, jvp, flags
        nonzero[bc:] = grown


def _jvp_loop(eq: While, nonzero: list[bool], jvp: Program, flags: tuple[bool, ...]
              ) -> tuple[Program, Program, int]:
    """The JVP loop's predicate and body, and its count of body constants: the body takes
    (constants, their nonzero tangents, the carry, its nonzero tangents) and returns (the
    carry, its nonzero tangents: zeros where the body makes none)."""
    cc, bc = eq.cond_consts, eq.body_consts
    body = eq.body_fun
    carry = list(body.inputs[bc:])
    count = len(body.inputs)
    at = {}   # the JVP body's input of each nonzero tangent: after the primals
    for i, nz in enumerate(nonzero):
        if nz:
            at[i] = count + len(at)
    const_t = [i for i in range(bc) if nonzero[i]]
    carry_t = [i for i in range(bc, count) if nonzero[i]]
    order = list(range(bc)) + [at[i] for i in const_t] + list(range(bc, count)) + \
        [at[i] for i in carry_t]
    inputs = [jvp.inputs[j] for j in order]
    take = [order.index(j) for j in range(len(jvp.inputs))]
    types = [v.type for v in carry]
    new_body = rebuilt(jvp, tuple(inputs), take, len(carry),
                       instantiated(flags, nonzero[bc:], len(carry), types))
    cond = eq.cond
    cond_inputs = tuple(cond.inputs) + tuple(body.inputs[i].type for i in carry_t)
    new_cond = rebuilt(cond, cond_inputs, list(range(len(cond.inputs))), 1, [])
    return new_cond, new_body, bc + len(const_t)


def _tangent_operands(eq: While, nonzero: list[bool], moving: list, zeros: Any) -> tuple:
    """(the body constants' nonzero tangents, the carry's), zeros (``zeros(value)``)
    where a carry made nonzero is given none."""
    cc, bc = eq.cond_consts, eq.body_consts
    body = eq.body_fun
    const_t = tuple(moving[cc + i] for i in range(bc) if nonzero[i])
    carry_t = tuple(moving[cc + i] if moving[cc + i] is not None else zeros(body.inputs[i])
                    for i in range(bc, len(body.inputs)) if nonzero[i])
    return const_t, carry_t


@JVP_BODIES.register("while")
def jvp_while(eq: While, body: BodyBuilder, operands: tuple[int, ...], moving: list,
              path: str) -> tuple[tuple[int, ...], list]:
    """A while loop's JVP (module docstring)."""
    cc, bc = eq.cond_consts, eq.body_consts
    if all(t is None for t in moving[cc:]):
        return body.emit(eq.renumbered(operands)), [None] * len(eq.results)
    nonzero, jvp, flags = carry_tangents(eq, moving, path)
    cond, loop, consts = _jvp_loop(eq, nonzero, jvp, flags)
    const_t, carry_t = _tangent_operands(eq, nonzero, moving,
                                         lambda v: emit_zeros(body, v.type))
    ops = operands[:cc + bc] + const_t + operands[cc + bc:] + carry_t
    results = body.emit(While(ops, cond=cond, body_fun=loop, cond_consts=cc,
                              body_consts=consts))
    k = len(eq.results)
    tangents = iter(results[k:])
    return results[:k], [next(tangents) if nz else None for nz in nonzero[bc:]]


@LINEARIZE_BODIES.register("while")
def linearize_while(eq: While, tape: Any, operands: tuple[int, ...], moving: list, path: str,
                    transform: str) -> tuple[tuple[int, ...], list]:
    """A while loop linearized (module docstring): the known loop into the primal body,
    the whole JVP loop onto the tape."""
    cc, bc = eq.cond_consts, eq.body_consts
    if all(t is None for t in moving[cc:]):
        return tape.primal.emit(eq.renumbered(operands)), [None] * len(eq.results)
    if transform in REVERSE:
        check_while_not_transposed(transform, path)   # LOOP-2
    nonzero, jvp, flags = carry_tangents(eq, moving, path)
    lin = linearize_body(eq.body_fun, tuple(nonzero), f"{path}.while.body[1].jit.",
                         transform)
    k = len(eq.results)
    known_body = Program(lin.primal.inputs, lin.primal.equations, lin.primal.outputs[:k],
                         lin.primal.consts)
    primal = tape.primal.emit(While(operands, cond=eq.cond, body_fun=known_body,
                                    cond_consts=cc, body_consts=bc))
    cond, loop, consts = _jvp_loop(eq, nonzero, jvp, flags)
    const_t, carry_t = _tangent_operands(
        eq, nonzero, moving,
        lambda v: tape.residual(emit_zeros(tape.primal, v.type)))
    refs = tuple(tape.residual(n) for n in operands[:cc + bc]) + const_t + \
        tuple(tape.residual(n) for n in operands[cc + bc:]) + carry_t
    results = tape.emit(While(tuple(range(len(refs))), cond=cond, body_fun=loop,
                              cond_consts=cc, body_consts=consts), refs)
    tangents = iter(results[k:])
    return primal, [next(tangents) if nz else None for nz in nonzero[bc:]]

