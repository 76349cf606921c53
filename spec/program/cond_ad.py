"""A cond (``lax.cond``, ``lax.switch``) under AD (issue 32): its JVP, its linearization
and the transpose of its tangent cond, each again one cond over the same index.

* JVP: one cond over the index, the operands and their nonzero tangents; each branch the
  JVP of the branch, returning the tangent of every result that some branch makes
  nonzero (zeros typed as the result where this branch makes none), as JAX's
  ``_cond_jvp`` instantiates them.
* Linearization: the known cond runs each branch's primal half and returns its results,
  then the residuals of every branch joined by type (a residual of one type that two
  branches store takes one slot; a branch fills the slots it does not store with zeros
  of their type); the tangent cond takes the index, the joined residuals and the nonzero
  tangents, each branch reading its own residuals among them (JAX's
  ``_merge_branch_residuals``, ``_join_cond_outputs``, ``_join_cond_pe_staged_jaxpr_inputs``).
* Transpose: one cond over the index, the nonlinear operands and the cotangents given,
  each branch the transpose of the branch, returning the cotangent of every linear operand
  some branch reaches (zeros where this branch reaches none).
"""

from __future__ import annotations

from typing import Any

from .ad_bodies import BodyBuilder, cotangent_type, inline_consts, type_sharding
from .autodiff import jvp_body, linearize_body
from .control_flow import Cond
from .description import Opaque, Program, Reshard, Value
from .primitives import JVP_BODIES, LINEARIZE_BODIES, TRANSPOSES
from .transpose import transpose_body

__all__ = ["jvp_cond", "linearize_cond", "transpose_cond", "joined_residuals", "emit_zeros",
           "rebuilt", "instantiated"]


def emit_zeros(body: BodyBuilder, value: Value) -> int:
    """Zeros of ``value``'s type emitted into ``body``, as JAX instantiates a symbolic zero
    (and fills a residual a branch does not store): a broadcast typed as ``value``; a
    scalar over a mesh is made over none, then resharded to its type (JAX's broadcast to
    a scalar of another sharding is a reshard)."""
    if value.shape or value.mesh is None:
        return body.emit(Opaque((), (value.type,), primitive="broadcast_in_dim"))[0]
    bare = Value.typed((), value.dtype)
    (scalar,) = body.emit(Opaque((), (bare,), primitive="broadcast_in_dim"))
    return body.emit(Reshard((scalar,), sharding=type_sharding(value)))[0]


def _branch_prefix(path: str, i: int) -> str:
    # (as the walkers of a cond's body name a branch: its i-th jit call)
    return f"{path}.cond.body[{i}].jit."


def rebuilt(program: Program, inputs: tuple[Value, ...], take: list[int], head: int,
            tail: list[tuple[int | None, Value]]) -> Program:
    """A body over ``inputs`` that runs ``program`` on its inputs ``take`` and returns
    ``program``'s first ``head`` outputs, then per ``tail`` slot (its source, its type)
    ``program``'s output at that source, or zeros of the slot's type where it has none."""
    body = BodyBuilder(tuple(v.type for v in inputs), program.consts)
    outs = inline_consts(body, program, tuple(take))
    tail_numbers = [outs[source] if source is not None else emit_zeros(body, value)
                    for source, value in tail]
    return body.program(tuple(outs[:head]) + tuple(tail_numbers))


def instantiated(flags: tuple[bool, ...], wanted: list[bool], head: int,
                 types: list[Value]) -> list[tuple[int | None, Value]]:
    """The tail of a body whose outputs after ``head`` are the values ``flags`` marks, made
    to return one per ``wanted`` slot (zeros of ``types[j]`` where ``flags[j]`` is False)."""
    tail, at = [], head
    for j, (want, has) in enumerate(zip(wanted, flags)):
        if want:
            tail.append((at if has else None, types[j]))
        at += has
    return tail


# --------------------------------------------------------------------------- JVP

@JVP_BODIES.register("cond")
def jvp_cond(eq: Cond, body: Any, operands: tuple[int, ...], moving: list, path: str
             ) -> tuple[tuple[int, ...], list]:
    """A cond's JVP (module docstring)."""
    ops_moving = moving[1:]
    if all(t is None for t in ops_moving):
        return body.emit(eq.renumbered(operands)), [None] * len(eq.results)
    first = eq.branches[0]
    nonzero = tuple(t is not None for t in ops_moving)
    tangent_types = tuple(v.type for v, nz in zip(first.inputs, nonzero) if nz)
    made = [jvp_body(b, nonzero, _branch_prefix(path, i), tangent_types)
            for i, b in enumerate(eq.branches)]
    outs = [first.value_types[n].type for n in first.outputs]
    out_nz = [any(flags[j] for _, flags in made) for j in range(len(outs))]
    branches = tuple(
        jvp if list(flags) == out_nz else rebuilt(
            jvp, jvp.inputs, list(range(len(jvp.inputs))), len(outs),
            instantiated(flags, out_nz, len(outs), outs))
        for jvp, flags in made)
    given = tuple(t for t in ops_moving if t is not None)
    results = body.emit(Cond(tuple(operands) + given, branches=branches))
    primal, tangents = results[:len(outs)], iter(results[len(outs):])
    return primal, [next(tangents) if nz else None for nz in out_nz]


# --------------------------------------------------------------------------- linearization

def joined_residuals(per_branch: list[list[Value]]) -> tuple[list[Value], list[list[int]]]:
    """The residuals of a cond's branches joined by type: the slots' types (each branch's
    k-th residual of a type takes that type's k-th slot, slots in the order first met) and,
    per branch, the slot of each of its residuals.

    >>> a, b = Value.typed((4,)), Value.typed((2,))
    >>> joined_residuals([[a], [b], [a, a]])
    ([<float32[4]>, <float32[2]>, <float32[4]>], [[0], [1], [0, 2]])
    """
    slots: dict[tuple, int] = {}
    types: list[Value] = []
    where = []
    for residuals in per_branch:
        seen: dict[Value, int] = {}
        mine = []
        for value in residuals:
            key = (value, seen.get(value, 0))
            seen[value] = key[1] + 1
            if key not in slots:
                slots[key] = len(types)
                types.append(value)
            mine.append(slots[key])
        where.append(mine)
    return types, where


@LINEARIZE_BODIES.register("cond")
def linearize_cond(eq: Cond, tape: Any, operands: tuple[int, ...], moving: list, path: str,
                   transform: str) -> tuple[tuple[int, ...], list]:
    """A cond linearized (module docstring): the known cond into the primal body, the
    tangent cond onto the tape."""
    ops_moving = moving[1:]
    if all(t is None for t in ops_moving):
        return tape.primal.emit(eq.renumbered(operands)), [None] * len(eq.results)
    first = eq.branches[0]
    nonzero = tuple(t is not None for t in ops_moving)
    lins = [linearize_body(b, nonzero, _branch_prefix(path, i), transform)
            for i, b in enumerate(eq.branches)]
    outs = [first.value_types[n].type for n in first.outputs]
    count = len(outs)
    out_nz = [any(lin.flags[j] for lin in lins) for j in range(count)]
    slots, where = joined_residuals([
        [lin.primal.value_types[n].type for n in lin.primal.outputs[count:]] for lin in lins])
    known, tangent = [], []
    moving_types = [v.type for v, nz in zip(first.inputs, nonzero) if nz]
    for lin, mine in zip(lins, where):
        source = {slot: count + q for q, slot in enumerate(mine)}
        known.append(rebuilt(lin.primal, first.inputs, list(range(len(first.inputs))),
                             count, [(source.get(k), v) for k, v in enumerate(slots)]))
        take = list(mine) + [len(slots) + j for j in range(len(moving_types))]
        tangent.append(rebuilt(lin.tangent, tuple(slots) + tuple(moving_types), take, 0,
                               instantiated(lin.flags, out_nz, 0, outs)))
    made = tape.primal.emit(Cond(operands, branches=tuple(known)))
    primal, stored = made[:count], made[count:]
    refs = (tape.residual(operands[0]),) + tuple(tape.residual(n) for n in stored) + \
        tuple(t for t in ops_moving if t is not None)
    touts = iter(tape.emit(Cond(tuple(range(len(refs))), branches=tuple(tangent)), refs))
    return tuple(primal), [next(touts) if nz else None for nz in out_nz]


# --------------------------------------------------------------------------- transpose

@TRANSPOSES.register("cond")
def transpose_cond(eq: Cond, body: Any, incoming: list, flags: list[bool],
                   number: dict[int, int], path: str, types: tuple[Value, ...]
                   ) -> list[tuple[int, int]]:
    """A linear cond transposed (module docstring)."""
    first = eq.branches[0]
    linear = tuple(flags[n] for n in eq.operands[1:])
    given = tuple(None if ct is None else body.types[ct] for ct in incoming)
    made = [transpose_body(b, linear, given, _branch_prefix(path, i))
            for i, b in enumerate(eq.branches)]
    lin_at = [i for i, lin in enumerate(linear) if lin]
    reached = [any(r[q] for _, r in made) for q in range(len(lin_at))]
    cts = [cotangent_type(first.inputs[i]) for i in lin_at]
    inputs = tuple(first.inputs[i].type for i, lin in enumerate(linear) if not lin) + \
        tuple(g for g in given if g is not None)
    branches = tuple(
        program if list(r) == reached else rebuilt(
            program, inputs, list(range(len(inputs))), 0,
            instantiated(r, reached, 0, cts))
        for program, r in made)
    operands = (number[eq.operands[0]],) + tuple(
        number[n] for n, lin in zip(eq.operands[1:], linear) if not lin) + tuple(
        ct for ct in incoming if ct is not None)
    results = iter(body.emit(Cond(operands, branches=branches)))
    return [(eq.operands[1 + i], next(results)) for i, r in zip(lin_at, reached) if r]
