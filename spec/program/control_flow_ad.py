"""A scan under AD (issue 32): its JVP, its linearization and the transpose of its tangent
scan, each again a scan whose body is read once.

* JVP: one scan over the primals and the nonzero tangents, its body the JVP of the body;
  a carry whose tangent the body makes nonzero has a nonzero tangent from the start (zeros
  where none is given), found by iterating to a fixed point as JAX does.
* Linearization (JAX's ``_scan_linearize``): the known scan runs the primal body and
  returns the residuals each iteration stores, stacked on a leading axis of ``length``
  as extra ``ys``, but a residual that is a constant or an ``xs`` of the body (forwarded:
  the scan's own operand) and one computed from the constants alone: what the body
  computes from its constants runs once before the loop (``_scan_known_hoisting``,
  :func:`~shardlaw.spec.program.partial_eval.split_known`). The tangent scan takes the
  residuals kept whole and the constants' tangents as its constants, the carry's
  tangents as its carry, and the tangents of ``xs`` then the stacked residuals as its
  ``xs``.
* Transpose: the tangent scan run the other way (``reverse`` flipped), carrying the
  cotangents of its linear constants (summed over the iterations) and of its carry, its
  ``xs`` the residuals' slices and the cotangents of ``ys``, its ``ys`` the cotangents of
  its linear ``xs``.

A cond's rules are in :mod:`~shardlaw.spec.program.cond_ad`, a while's in
:mod:`~shardlaw.spec.program.while_ad`; a while loop under ``grad`` or ``vjp`` is refused
as JAX refuses it (LOOP-2, here).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, rule, staged
from .ad_bodies import NotRewritten, cotangent_type, differentiable
from .autodiff import jvp_body, linearize_body
from .control_flow import Scan, unstacked
from .ad_bodies import inline_body
from .description import Jit, Opaque, Program, Value
from .partial_eval import split_known
from .primitives import JVP_BODIES, LINEARIZE_BODIES, TRANSPOSES
from .transpose import transpose_body

__all__ = ["carry_fixed_point", "check_while_not_transposed", "WhileTransposed"]


def _refuse(eq: Any, path: str, transform: str, why: str) -> None:
    raise reject(NotRewritten(f"a {eq.kind} equation", path, transform, why))


# The transformations that transpose what they linearize.
REVERSE = ("vjp", "grad")


@dataclasses.dataclass(frozen=True)
class WhileTransposed(Failure, rule="LOOP-2", error=ValueError):
    template = ("{transform} differentiates the while loop at {path} in reverse mode: "
                "Reverse-mode differentiation does not work for lax.while_loop or "
                "lax.fori_loop with dynamic start/stop values")
    hint = "Use lax.scan, or a fori_loop with static start and stop (a scan)."
    transform: str
    path: str


@rule("LOOP-2", mirrors="jax._src.lax.control_flow.loops._while_transpose_error")
def check_while_not_transposed(transform: str, path: str) -> None:
    """A while loop (a fori_loop of dynamic bounds) a tangent flows through is not differentiated in reverse mode, by ``grad`` or ``vjp``: ValueError at trace (its JVP and linearization are JAX's to give).

    >>> check_while_not_transposed("grad", "body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [LOOP-2]: grad differentiates the while loop at body[0] in reverse mode: Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with dynamic start/stop values. Use lax.scan, or a fori_loop with static start and stop (a scan).
    """
    with staged("trace"):
        raise reject(WhileTransposed(transform, path))


# --------------------------------------------------------------------------- helpers

def _zeros(value: Value) -> Opaque:
    """Zeros of ``value``'s type (JAX instantiates a symbolic zero so)."""
    return Opaque((), (value.type,), primitive="broadcast_in_dim")


def _called(inputs: tuple[Value, ...], order: list[int], inner: Program,
            out_order: list[int], name: str) -> Program:
    """A body over ``inputs`` that calls ``inner`` (as a jit without options) on its
    inputs ``order`` and returns ``inner``'s outputs ``out_order``."""
    call = Jit(tuple(order), body=inner, name=name, checked=False)
    start = len(inputs)
    return Program(tuple(v.type for v in inputs), (call,),
                   tuple(start + j for j in out_order))


def carry_fixed_point(eq: Scan, nonzero: list[bool], flags_of: Any) -> tuple[list, Any]:
    """The nonzero flags of a scan's inputs with every carry whose tangent the body makes
    nonzero made nonzero from the start, and what ``flags_of`` (the rewritten body and its
    output flags, of the inputs' flags) gives for them."""
    c, k = eq.num_consts, eq.num_carry
    nonzero = list(nonzero)
    while True:
        found = flags_of(tuple(nonzero))
        flags = found[-1]
        grown = [a or (b and differentiable(eq.body.inputs[c + i]))
                 for i, (a, b) in enumerate(zip(nonzero[c:c + k], flags[:k]))]
        if grown == nonzero[c:c + k]:
            return nonzero, found
        nonzero[c:c + k] = grown


def _tangent_types(eq: Scan, nonzero: tuple[bool, ...]) -> tuple[Value, ...]:
    return tuple(v.type for v, nz in zip(eq.body.inputs, nonzero) if nz)


def _check_carry(eq: Scan, nonzero: list[bool], flags: tuple, path: str, transform: str
                 ) -> None:
    c, k = eq.num_consts, eq.num_carry
    if any(nz and not f for nz, f in zip(nonzero[c:c + k], flags[:k])):
        _refuse(eq, path, transform, "a carry whose tangent the body makes zero "
                "(instantiating it in the body is not written)")


def _start_tangents(eq: Scan, emit: Any, moving: list, nonzero: list[bool]) -> list:
    """The tangent of each nonzero input: given, or zeros (a carry made nonzero)."""
    out = []
    for value, given, nz in zip(eq.body.inputs, moving, nonzero):
        if nz:
            out.append(given if given is not None else emit(_zeros(value))[0])
    return out


# --------------------------------------------------------------------------- JVP

@JVP_BODIES.register("scan")
def _jvp_scan(eq: Scan, body: Any, operands: tuple[int, ...], moving: list, path: str
              ) -> tuple[tuple[int, ...], list]:
    """A scan's JVP: one scan over the primals and the nonzero tangents."""
    if all(t is None for t in moving):
        return body.emit(eq.renumbered(operands)), [None] * len(eq.results)
    inner = eq.body
    nonzero, (jvp, flags) = carry_fixed_point(eq, [t is not None for t in moving], lambda nz:
                                              jvp_body(inner, nz, f"{path}.scan.",
                                                       _tangent_types(eq, nz)))
    _check_carry(eq, nonzero, flags, path, "jvp")
    tangents = _start_tangents(eq, body.emit, moving, nonzero)
    c, k, count = eq.num_consts, eq.num_carry, len(inner.inputs)
    groups = [range(0, c), range(c, c + k), range(c + k, count)]
    # the scan's inputs: each group's primals, then its nonzero tangents
    position, order, ops, types, t_index = {}, [], [], [], {}
    j = 0
    for i in range(count):
        if nonzero[i]:
            t_index[i] = j
            j += 1
    for group in groups:
        for i in group:
            position[("p", i)] = len(types)
            types.append(inner.inputs[i])
            ops.append(operands[i])
        for i in group:
            if nonzero[i]:
                position[("t", i)] = len(types)
                types.append(inner.inputs[i])
                ops.append(tangents[t_index[i]])
    order = [position[("p", i)] for i in range(count)] + \
        [position[("t", i)] for i in range(count) if nonzero[i]]
    outs, nk = len(inner.outputs), sum(nonzero[c:c + k])
    made = [j for j, f in enumerate(flags) if f]   # the tangents jvp returns, in order
    out_tangent = {o: outs + m for m, o in enumerate(made)}
    out_order = list(range(k)) + [out_tangent[o] for o in range(k) if nonzero[c + o]] + \
        list(range(k, outs)) + [out_tangent[o] for o in made if o >= k]
    wrapped = _called(tuple(types), order, jvp, out_order, "jvp")
    new = Scan(tuple(ops), body=wrapped, length=eq.length, reverse=eq.reverse,
               num_consts=c + sum(nonzero[:c]), num_carry=k + nk)
    results = body.emit(new)
    return _split_results(eq, results, nonzero, flags, nk)


def _split_results(eq: Scan, results: tuple, nonzero: list[bool], flags: tuple, nk: int
                   ) -> tuple[tuple[int, ...], list]:
    """(the primal results, the tangent of each) of a scan whose results are the carry,
    its nonzero tangents, the ``ys``, then their nonzero tangents."""
    c, k, outs = eq.num_consts, eq.num_carry, len(eq.body.outputs)
    primal = tuple(results[:k]) + tuple(results[k + nk:nk + outs])
    carry_t, ys_t = iter(results[k:k + nk]), iter(results[nk + outs:])
    tangent = [next(carry_t) if nonzero[c + i] else None for i in range(k)]
    tangent += [next(ys_t) if flags[o] else None for o in range(k, outs)]
    return primal, tangent


# --------------------------------------------------------------------------- linearization

@LINEARIZE_BODIES.register("scan")
def _linearize_scan(eq: Scan, tape: Any, operands: tuple[int, ...], moving: list, path: str,
                    transform: str) -> tuple[tuple[int, ...], list]:
    """A scan linearized as JAX's ``_scan_linearize`` does: the known scan into the primal
    body, what it computes from its constants alone hoisted before it (:func:`_hoisted`),
    and the tangent scan onto the tape."""
    if all(t is None for t in moving):
        return tape.primal.emit(eq.renumbered(operands)), [None] * len(eq.results)
    inner = eq.body

    def linearized(nz: tuple[bool, ...]) -> tuple:
        lin = linearize_body(inner, nz, f"{path}.scan.", transform)
        return lin, lin.flags
    nonzero, (lin, flags) = carry_fixed_point(eq, [t is not None for t in moving],
                                              linearized)
    _check_carry(eq, nonzero, flags, path, transform)
    c, k, outs = eq.num_consts, eq.num_carry, len(inner.outputs)
    primal, places = _hoisted(eq, lin, tape.primal, operands)
    tangents = _start_tangents(eq, lambda z: tape.emit(z, ()), moving, nonzero)
    touts = _tangent_scan(eq, lin, tape, places, tangents, nonzero, flags)
    nk = sum(nonzero[c:c + k])
    carry_t, ys_t = iter(touts[:nk]), iter(touts[nk:])
    tangent = [next(carry_t) if nonzero[c + i] else None for i in range(k)]
    tangent += [next(ys_t) if flags[o] else None for o in range(k, outs)]
    return tuple(primal), tangent


def _hoisted(eq: Scan, lin: Any, primal: Any, operands: tuple[int, ...]
             ) -> tuple[tuple[int, ...], list]:
    """The known scan, emitted into ``primal``: a residual that is a constant or an ``xs``
    of the body is not returned but forwarded (the scan's operand); what the body computes
    from its constants alone is computed once, before the scan (``_scan_known_hoisting``),
    and a residual so computed is not stacked. Its primal results, and per residual where
    the tangent scan takes it: ``("int", n)`` a constant, ``("ext", n)`` stacked or an
    ``xs``, ``n`` its number in ``primal``."""
    inner, body = eq.body, lin.primal
    c, k, count, outs = eq.num_consts, eq.num_carry, len(inner.inputs), len(inner.outputs)
    residuals = body.outputs[outs:]
    forwarded = [n < count and not c <= n < c + k for n in residuals]
    kept = tuple(n for n, f in zip(residuals, forwarded) if not f)
    body = dataclasses.replace(body, outputs=body.outputs[:outs] + kept, out_shardings=())
    if body.consts:   # (a body's closed-over constants are not hoisted)
        split = None
    else:
        split = split_known(body, (True,) * c + (False,) * (count - c),
                            instantiate=(True,) * outs + (False,) * len(kept))
    if split is None:
        loop, consts, where = body, operands[:c], [("unknown", j) for j in range(len(
            body.outputs))]
        before: list = []
    else:
        before = list(inline_body(primal, split.known, tuple(
            operands[i] for i, r in zip(range(c), split.known_reads) if r))) \
            if split.known is not None else []
        consts = tuple(operands[j] if w == "in" else before[j] for w, j in split.residuals)
        loop, where = split.unknown, list(split.outputs)
    results = primal.emit(Scan(consts + operands[c:], body=loop, length=eq.length,
                               reverse=eq.reverse, num_consts=len(consts), num_carry=k))
    made = [results[j] if w == "unknown" else operands[j] if w == "in" else before[j]
            for w, j in where]
    stored = iter(zip(made[outs:], where[outs:]))
    places = []
    for n, f in zip(residuals, forwarded):
        if f:
            places.append(("int" if n < c else "ext", operands[n]))
        else:
            number, (w, _) = next(stored)
            places.append(("ext" if w == "unknown" else "int", number))
    return tuple(made[:outs]), places


def _tangent_scan(eq: Scan, lin: Any, tape: Any, places: list, tangents: list,
                  nonzero: list[bool], flags: tuple) -> tuple:
    """The tangent scan onto the tape, as JAX binds it: its constants the residuals kept
    whole, then the constants' tangents; its carry the carry's tangents; its ``xs`` the
    tangents of ``xs``, then the stacked residuals. Its body calls the tangent body
    (residuals first, then tangents)."""
    c, k, count = eq.num_consts, eq.num_carry, len(eq.body.inputs)
    r = lin.residuals
    moving_at = [i for i in range(count) if nonzero[i]]
    whole = [q for q in range(r) if places[q][0] == "int"]
    stacked = [q for q in range(r) if places[q][0] == "ext"]
    types = [lin.tangent.inputs[q] for q in whole] + \
        [lin.tangent.inputs[r + j] for j in range(len(moving_at))] + \
        [lin.tangent.inputs[q] for q in stacked]
    position = {q: p for p, q in enumerate(whole)}
    position.update({q: len(whole) + len(moving_at) + p for p, q in enumerate(stacked)})
    order = [position[q] for q in range(r)] + \
        [len(whole) + j for j in range(len(moving_at))]
    made = [o for o, f in enumerate(flags) if f]
    out_order = [m for m, o in enumerate(made) if o < k and nonzero[c + o]] + \
        [m for m, o in enumerate(made) if o >= k]
    wrapped = _called(tuple(types), order, lin.tangent, out_order, "tangent")
    refs = tuple(tape.residual(places[q][1]) for q in whole) + tuple(tangents) + \
        tuple(tape.residual(places[q][1]) for q in stacked)
    return tape.emit(Scan(tuple(range(len(refs))), body=wrapped, length=eq.length,
                          reverse=eq.reverse,
                          num_consts=len(whole) + sum(nonzero[:c]),
                          num_carry=sum(nonzero[c:c + k])), refs)


# --------------------------------------------------------------------------- transpose

class _Built:
    """A small body built by hand: its input types, equations and every value's type."""

    def __init__(self, inputs: list[Value]) -> None:
        self.inputs, self.types, self.equations = tuple(inputs), list(inputs), []

    def emit(self, eq: Any, results: tuple[Value, ...]) -> tuple[int, ...]:
        start = len(self.types)
        self.equations.append(eq)
        self.types.extend(results)
        return tuple(range(start, len(self.types)))

    def program(self, outputs: list[int]) -> Program:
        return Program(self.inputs, tuple(self.equations), tuple(outputs))


@TRANSPOSES.register("scan")
def _transpose_scan(eq: Scan, body: Any, incoming: list, flags: list[bool],
                    number: dict[int, int], path: str, types: tuple[Value, ...]
                    ) -> list[tuple[int, int]]:
    """A linear scan transposed: a scan the other way carrying the cotangents of its linear
    constants and of its carry, over the residuals' slices and the cotangents of ``ys``."""
    inner = eq.body
    c, k, count, outs = eq.num_consts, eq.num_carry, len(inner.inputs), len(inner.outputs)
    # a carry starts from a tangent, or from zeros a carry made nonzero starts from
    # (computed from no linear input, and transposed as linear all the same)
    linear = tuple(flags[n] or c <= i < c + k for i, n in enumerate(eq.operands))
    given = tuple(cotangent_type(inner.value_types[n]) if j < k or incoming[j] is not None
                  else None for j, n in enumerate(inner.outputs))
    transposed, reached = transpose_body(inner, linear, given, f"{path}.scan.")
    lin_consts = [i for i in range(c) if linear[i]]
    res_consts = [i for i in range(c) if not linear[i]]
    lin_xs = [i for i in range(c + k, count) if linear[i]]
    res_xs = [i for i in range(c + k, count) if not linear[i]]
    ys_given = [j for j in range(k, outs) if given[j] is not None]
    cts = [cotangent_type(inner.inputs[i]) for i in lin_consts + list(range(c, c + k))]
    built = _Built([inner.inputs[i].type for i in res_consts] + cts +
                   [inner.inputs[i].type for i in res_xs] +
                   [given[j] for j in ys_given])
    a, b = len(res_consts), len(res_consts) + len(cts)
    carry_at = list(range(a + len(lin_consts), b))
    call = list(range(a)) + list(range(b, b + len(res_xs))) + carry_at + \
        list(range(b + len(res_xs), len(built.inputs)))
    made = iter(built.emit(Jit(tuple(call), body=transposed, name="transpose",
                               checked=False),
                           tuple(transposed.value_types[n] for n in transposed.outputs)))
    got = {i: next(made) for i, hit in zip([i for i in range(count) if linear[i]], reached)
           if hit}
    out = []
    for q, i in enumerate(lin_consts):   # summed over the iterations
        acc = a + q
        out.append(acc if i not in got else built.emit(
            Opaque((acc, got[i]), (cts[q],), primitive="add_any"), (cts[q],))[0])
    for i in list(range(c, c + k)) + lin_xs:
        value = cotangent_type(inner.inputs[i])
        out.append(got[i] if i in got else built.emit(_zeros(value), (value,))[0])
    backward = built.program(out)
    ops = [number[eq.operands[i]] for i in res_consts]
    ops += [body.emit(_zeros(cotangent_type(types[eq.operands[i]])))[0] for i in lin_consts]
    ops += [incoming[j] if incoming[j] is not None else
            body.emit(_zeros(cotangent_type(inner.inputs[c + j])))[0] for j in range(k)]
    ops += [number[eq.operands[i]] for i in res_xs] + [incoming[j] for j in ys_given]
    results = body.emit(Scan(tuple(ops), body=backward, length=eq.length,
                             reverse=not eq.reverse, num_consts=len(res_consts),
                             num_carry=len(cts)))
    targets = lin_consts + list(range(c, c + k)) + lin_xs
    return [(eq.operands[i], n) for i, n in zip(targets, results) if flags[eq.operands[i]]]
