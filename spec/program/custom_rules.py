"""Custom derivatives differentiated by their own rules (issue 32), as JAX uses them.

* A ``custom_jvp`` call (``jax.nn.relu``) under ``jvp``: its rule run inline on the
  primals and a tangent of each input (zeros where none is given: JAX instantiates them
  unless the rule takes symbolic zeros); under ``linearize``/``grad``: the rule split by
  partial evaluation, as JAX's ``linearize_from_jvp`` splits it (a rule taking symbolic
  zeros: the one JAX traces for the inputs without a tangent, read when AD asks for
  them): what reads no tangent runs in the primal body (the primal results among it),
  what reads one goes onto the tangent body, the primal values it reads stored as
  residuals; a tangent the rule computes from primals alone is a zero.
* A ``custom_vjp`` call under ``jvp``/``linearize``: its ``fwd`` run inline in the primal
  body (its residuals, then the primal results), then one ``custom_lin`` equation
  (:class:`~shardlaw.spec.program.control_flow.CustomLin`) over the residuals and the
  nonzero tangents. Transposed (``grad``, ``vjp``), the ``custom_lin`` is its ``bwd`` run
  inline on the residuals and the cotangents (zeros where none is given). Left in a
  program it does not lower, and vmap does not batch it (LOOP-3). Taking symbolic zeros
  (equinox's ``filter_custom_vjp``), its ``fwd`` is the one JAX traces for the inputs
  perturbed and its ``bwd`` the one for the cotangents given (a result nothing reads
  gives none: a symbolic zero, not a zero array).

Rules read on demand (symbolic zeros; a call nested deeper than the bridge reads up
front, ``rules_later``: :func:`rules_read`) are read where AD reaches the call; their
constants are the ones the body holds alike.

A custom_jvp call whose rule JAX refused while tracing it (``rule_refused``: a constraint
on a tangent that does not fit it, a ``dot_general`` of tangents whose types clash) is
refused where AD traces that rule (:func:`refuse_traced_rule`), as JAX refuses it: the
rule described up to the refused call is traced over the primals' and the tangents'
types, at ``<path>.custom_jvp.rule.body[k]``.

A call whose rules were not read (a rule JAX failed to trace; a custom_vjp call whose
``fwd`` or ``bwd`` vmap could not batch as JAX does) is differentiated as a jit without
options is: its primal body. vmap batches a custom_vjp's ``fwd`` and ``bwd`` with its body
(:func:`~shardlaw.spec.program.control_flow_batching.batched_vjp_rules`), and the rules
read on demand when they are read (:class:`~shardlaw.spec.program.control_flow_batching.ReadBatched`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import reject
from .ad_bodies import NotRewritten, cotangent_type, differentiable, inline_body
from .cond_ad import emit_zeros
from .control_flow import (
    CustomJvp, CustomLin, CustomVjp, check_bwd_cotangent, check_custom_lin_transposed,
)
from .description import Opaque, Program
from .partial_eval import split_known
from .primitives import BATCHING, JVP_BODIES, LINEARIZE_BODIES, TRANSPOSES

__all__ = ["jvp_custom_jvp", "linearize_custom_jvp", "jvp_custom_vjp",
           "linearize_custom_vjp", "transpose_custom_lin", "usable_rule", "refuse_traced_rule",
           "rule_consts", "rules_read"]


def rules_read(eq: Any) -> Any:
    """``eq`` with its rules, where the bridge left them to be read when AD asks for them
    (``rules_later``: a call nested deeper than it reads up front)."""
    if eq.rules_later is None:
        return eq
    return dataclasses.replace(eq, rules_later=None, **eq.rules_later())


def usable_rule(eq: CustomJvp) -> Program | None:
    """``eq``'s rule where it fits its body (inputs: the non-constant primals and their
    tangents; outputs: the primal results, then the tangents ``rule_zeros`` leaves) and
    JAX traced it; else None. A rule closing over constants is inlined only into a body
    built holding them (:func:`rule_consts`)."""
    if eq.rule is None or eq.rule_refused:
        return None
    count = len(eq.body.inputs) - eq.num_consts
    return eq.rule if _fits(eq, eq.rule, eq.rule_zeros, (False,) * count) else None


def _fits(eq: CustomJvp, rule: Program, rule_zeros: tuple, zeros: tuple) -> bool:
    """Whether ``rule`` fits ``eq``'s body given the inputs without a tangent (``zeros``):
    the primals, then the other tangents in; the primal results, then the tangents
    ``rule_zeros`` leaves out."""
    ins = tuple(v.type for v in eq.body.inputs[eq.num_consts:])
    outs = len(eq.body.outputs)
    tangents = tuple(t for t, zero in zip(ins, zeros) if not zero)
    return (len(rule_zeros) == outs and tuple(v.type for v in rule.inputs) == ins + tangents
            and len(rule.outputs) == outs + rule_zeros.count(False))


def _chosen_rule(eq: CustomJvp, moving: list, into: Any, path: str, transform: str
                 ) -> tuple | None:
    """(the rule AD calls for ``eq`` given the tangents ``moving``, its ``rule_zeros``,
    which inputs it takes no tangent of, its constants' numbers in the body ``into``), or
    None where the call is differentiated by its primal body. A rule taking symbolic
    zeros is the one JAX traces for the inputs without a tangent (``zero_rule``)."""
    if all(t is None for t in moving):
        return None
    zeros = tuple(t is None for t in moving[eq.num_consts:])
    rule, rule_zeros, taken = usable_rule(eq), eq.rule_zeros, (False,) * len(zeros)
    if eq.symbolic_zeros and any(zeros) and eq.zero_rule is not None:
        read = eq.zero_rule(zeros)   # (refused ones: refuse_traced_rule)
        if read is None or read[2] or not _fits(eq, read[0], read[1], zeros):
            _refuse(eq, path, transform, f"its rule taking symbolic zeros is not read for "
                    f"the inputs without a tangent {list(zeros)} (its trace for them does "
                    f"not fit the call)")
        rule, rule_zeros, taken = read[0], read[1], zeros
    elif eq.symbolic_zeros and any(zeros):
        return None   # (its rule is not read: by its primal body)
    consts = None if rule is None else _const_numbers(into, rule)
    if consts is None and any(taken):
        _refuse(eq, path, transform, "its rule taking symbolic zeros closes over an array "
                "its rule for every tangent does not")
    return None if consts is None else (rule, rule_zeros, taken, consts)


def rule_consts(program: Program) -> tuple:
    """The constants the rules of ``program``'s custom calls close over (a custom_jvp's
    rule, a custom_vjp's ``fwd``, a ``custom_lin``'s ``bwd``; each once): a body
    differentiated or transposed is built holding them after its own, so that the rules
    are inlined into it as JAX traces them, their constants the enclosing body's."""
    out: dict[int, Any] = {}
    for eq in program.equations:
        eq = rules_read(eq) if type(eq) in (CustomJvp, CustomVjp) else eq
        if type(eq) is CustomJvp:
            rules = (usable_rule(eq),)
        elif type(eq) is CustomVjp and eq.bwd is not None:
            rules = (eq.fwd,)
        elif type(eq) is CustomLin:
            rules = (eq.bwd,)
        else:
            rules = ()
        for rule in rules:
            out.update((id(c), c) for c in (rule.consts if rule is not None else ()))
    return tuple(out.values())


def _const_numbers(into: Any, rule: Program) -> tuple[int, ...] | None:
    """The numbers of ``rule``'s constants in the body ``into`` (built holding them), or
    None where it does not hold them all. A rule read on demand (symbolic zeros) holds
    constants of its own reading: each is the one held alike (its type and placement are
    all the spec reads of it), a ref only itself."""
    held = {id(c): len(into.inputs) + k for k, c in enumerate(into.consts)}
    alike = {c: len(into.inputs) + k for k, c in reversed(list(enumerate(into.consts)))
             if not c.ref}
    numbers = tuple(held.get(id(c), None if c.ref else alike.get(c)) for c in rule.consts)
    return None if None in numbers else numbers


def refuse_traced_rule(eq: CustomJvp, moving: list, path: str, transform: str) -> None:
    """Refuse, as JAX refuses tracing it, the rule of ``eq`` that JAX refused (its
    ``rule_refused``; a rule taking symbolic zeros: as traced for the inputs without a
    tangent) where AD calls it (a tangent given); its own checks at the trace stage, at
    ``<path>.custom_jvp.rule.body[k]`` (AD-0 where the refusal is not described: the call
    is not differentiated by its primal body, which JAX does not do)."""
    if all(t is None for t in moving):
        return
    rule, refused = eq.rule, eq.rule_refused
    zeros = tuple(t is None for t in moving[eq.num_consts:])
    if eq.symbolic_zeros and any(zeros) and eq.zero_rule is not None:
        read = eq.zero_rule(zeros)
        rule, refused = (None, True) if read is None else (read[0], read[2])
    if not refused:
        return
    if rule is None:
        _refuse(eq, path, transform, "JAX refuses tracing its rule in a way the spec does "
                "not describe")
    from .explain import trace_body

    trace_body(rule, rule.context_mesh, f"{path}.custom_jvp.rule.")
    _refuse(eq, path, transform, "JAX refuses tracing its rule where the spec's checks "
            "of it pass")


def _refuse(eq: Any, path: str, transform: str, why: str) -> None:
    raise reject(NotRewritten(f"a {eq.kind} equation", path, transform, why))


def _tangents_of(rule_outputs: list, rule_zeros: tuple, results: tuple) -> list:
    """The tangent of each result: the rule's next one unless ``rule_zeros`` marks it a
    zero (None where the result has no tangent, an integer's)."""
    given = iter(rule_outputs)
    out = [None if zero else next(given) for zero in rule_zeros]
    return [t if differentiable(r) else None for t, r in zip(out, results)]


# --------------------------------------------------------------------------- custom_jvp

@JVP_BODIES.register("custom_jvp")
def jvp_custom_jvp(eq: CustomJvp, body: Any, operands: tuple[int, ...], moving: list,
                   path: str) -> tuple[tuple[int, ...], list]:
    """A custom_jvp call's JVP: its rule inline (module docstring)."""
    eq = rules_read(eq)
    refuse_traced_rule(eq, moving, path, "jvp")
    chosen = _chosen_rule(eq, moving, body, path, "jvp")
    if chosen is None:
        return JVP_BODIES.rules["jit"](eq, body, operands, moving, path)
    rule, rule_zeros, taken, consts = chosen
    nc, inputs = eq.num_consts, eq.body.inputs
    tangents = tuple(t if t is not None else emit_zeros(body, inputs[nc + j].type)
                     for j, (t, zero) in enumerate(zip(moving[nc:], taken)) if not zero)
    outs = inline_body(body, rule, tuple(operands[nc:]) + tangents + consts)
    count = len(eq.body.outputs)
    results = [eq.body.value_types[n] for n in eq.body.outputs]
    return outs[:count], _tangents_of(list(outs[count:]), rule_zeros, results)


@LINEARIZE_BODIES.register("custom_jvp")
def linearize_custom_jvp(eq: CustomJvp, tape: Any, operands: tuple[int, ...], moving: list,
                         path: str, transform: str) -> tuple[tuple[int, ...], list]:
    """A custom_jvp call linearized: its rule split by partial evaluation (module
    docstring), as :func:`~shardlaw.spec.program.partial_eval.split_known` splits a body
    (an inner jit of the rule that reads a tangent split in a known and a tangent jit)."""
    eq = rules_read(eq)
    refuse_traced_rule(eq, moving, path, transform)
    chosen = _chosen_rule(eq, moving, tape.primal, path, transform)
    if chosen is None:
        return LINEARIZE_BODIES.rules["jit"](eq, tape, operands, moving, path, transform)
    rule, rule_zeros, taken, consts = chosen
    nc, inputs = eq.num_consts, eq.body.inputs
    # the rule's known inputs: the primals, and the zero tangents JAX instantiates
    given: list = list(operands[nc:]) + [
        emit_zeros(tape.primal, inputs[nc + j].type) if t is None else t
        for j, (t, zero) in enumerate(zip(moving[nc:], taken)) if not zero]
    split = split_known(rule, tuple(not isinstance(g, tuple) for g in given))
    known_in = [g for g in given if not isinstance(g, tuple)]
    made: tuple = ()
    if split.known is not None:
        made = inline_body(tape.primal, split.known, tuple(
            g for g, read in zip(known_in, split.known_reads) if read) + consts)
    ins = [i for i, g in enumerate(given) if not isinstance(g, tuple)]

    def known(where: str, j: int) -> int:
        return made[j] if where == "known" else given[j] if j in ins else None

    refs = [tape.residual(known(*r)) for r in split.residuals] + [
        g for g in given if isinstance(g, tuple)] + [tape.residual(c) for c in consts]
    outs = _tangent_part(tape, split.unknown, refs)
    results = len(eq.body.outputs)
    if any(where == "unknown" for where, _ in split.outputs[:results]):
        _refuse(eq, path, transform, "its rule computes a primal result from a tangent")
    primal = tuple(known(*o) for o in split.outputs[:results])
    tangents = [outs[j] if where == "unknown" else None   # (a known one: a zero)
                for where, j in split.outputs[results:]]
    types = [eq.body.value_types[n] for n in eq.body.outputs]
    return primal, _tangents_of(tangents, rule_zeros, types)


def _tangent_part(tape: Any, unknown: Program, refs: list) -> list:
    """``unknown``'s equations recorded onto ``tape`` with its inputs bound to ``refs``;
    the references its outputs get."""
    number = list(refs)
    for eq_in in unknown.equations:
        number.extend(tape.emit(eq_in, tuple(number[n] for n in eq_in.operands)))
    return [number[n] for n in unknown.outputs]


# --------------------------------------------------------------------------- custom_vjp

def _forward(eq: CustomVjp, rules: tuple, into: Any, operands: tuple[int, ...]
             ) -> tuple[list[int], tuple[int, ...]]:
    """``fwd`` (of the ``rules`` chosen) run inline in ``into``: (the residuals ``bwd``
    takes, the primal results)."""
    nc, (fwd, forwarded) = eq.num_consts, rules[:2]
    consts = _const_numbers(into, fwd) or ()
    outs = inline_body(into, fwd, tuple(operands[nc:]) + consts)
    made = len(outs) - len(eq.body.outputs)
    fresh = iter(outs[:made])
    residuals = [operands[nc + f] if f is not None else next(fresh) for f in forwarded]
    return residuals, outs[made:]


def _custom_lin(eq: CustomVjp, rules: tuple, residuals: int, moving: list) -> CustomLin:
    nc = eq.num_consts
    given = [t for t in moving[nc:] if t is not None]
    results = tuple(eq.body.value_types[n].type for n in eq.body.outputs)
    return CustomLin(tuple(range(residuals + len(given))), results, bwd=rules[2],
                     bwd_zeros=rules[3], num_res=residuals, zero_bwd=rules[4],
                     in_zeros=tuple(t is None for t in moving[nc:]), name=eq.name,
                     in_types=tuple(v.type for v in eq.body.inputs[nc:]))


def _vjp_rules(eq: CustomVjp, into: Any, moving: list, path: str, transform: str
               ) -> tuple | None:
    """(``fwd``, ``forwarded``, ``bwd``, ``bwd_zeros``, ``zero_bwd``) that AD runs for
    ``eq`` given the tangents ``moving`` (rules taking symbolic zeros: as JAX traces them
    for the inputs not perturbed), or None where the call is differentiated by its primal
    body."""
    if eq.fwd is None or eq.bwd is None or all(t is None for t in moving):
        return None
    if any(t is not None for t in moving[:eq.num_consts]):
        _refuse(eq, path, transform, "a closed-over value of a custom_vjp function is "
                "differentiated (JAX refuses it: pass it as an argument)")
    in_zeros = tuple(t is None for t in moving[eq.num_consts:])
    rules = (eq.fwd, eq.forwarded, eq.bwd, eq.bwd_zeros, None)
    if eq.symbolic_zeros:
        rules = _zero_vjp_rules(eq, in_zeros, path, transform)
    if tuple(v.type for v in rules[0].inputs) != tuple(
            v.type for v in eq.body.inputs[eq.num_consts:]):
        return None   # (rules read after vmap batched the call: not batched, so not used)
    if _const_numbers(into, rules[0]) is not None:
        return rules
    if eq.symbolic_zeros and any(in_zeros):
        _refuse(eq, path, transform, "a fwd taking symbolic zeros and closing over arrays "
                "is inlined only for every input perturbed")
    return None


def _zero_vjp_rules(eq: CustomVjp, in_zeros: tuple, path: str, transform: str) -> tuple:
    """The rules taking symbolic zeros that JAX traces for the inputs ``in_zeros`` marks
    not perturbed, every cotangent given (``zero_bwd`` reads ``bwd`` for fewer); a rule
    read on demand fits the call's body (one batched by vmap holds rules it batched: those
    read on demand are not)."""
    def read(ct_zeros: tuple) -> dict | None:
        got = None if eq.zero_rules is None else eq.zero_rules(in_zeros, ct_zeros)
        ins = tuple(v.type for v in eq.body.inputs[eq.num_consts:])
        return got if got is not None and tuple(
            v.type for v in got["fwd"].inputs) == ins else None

    def zero_bwd(ct_zeros: tuple) -> tuple | None:
        made = read(ct_zeros)
        return None if made is None else (made["bwd"], made["bwd_zeros"])

    if not any(in_zeros):   # (the rules read for every input, which built bodies hold)
        return eq.fwd, eq.forwarded, eq.bwd, eq.bwd_zeros, zero_bwd
    got = read((False,) * len(eq.body.outputs))
    if got is None:
        _refuse(eq, path, transform, f"its fwd and bwd taking symbolic zeros are not read "
                f"for the inputs not perturbed {list(in_zeros)}")
    return got["fwd"], got["forwarded"], got["bwd"], got["bwd_zeros"], zero_bwd


@JVP_BODIES.register("custom_vjp")
def jvp_custom_vjp(eq: CustomVjp, body: Any, operands: tuple[int, ...], moving: list,
                   path: str) -> tuple[tuple[int, ...], list]:
    """A custom_vjp call's JVP: ``fwd`` inline, then a ``custom_lin`` (module docstring)."""
    eq = rules_read(eq)
    rules = _vjp_rules(eq, body, moving, path, "jvp")
    if rules is None:
        return JVP_BODIES.rules["jit"](eq, body, operands, moving, path)
    residuals, primal = _forward(eq, rules, body, operands)
    lin = _custom_lin(eq, rules, len(residuals), moving)
    given = tuple(t for t in moving[eq.num_consts:] if t is not None)
    touts = body.emit(lin.renumbered(tuple(residuals) + given))
    return primal, [t if differentiable(r) else None for t, r in zip(touts, lin.results)]


@LINEARIZE_BODIES.register("custom_vjp")
def linearize_custom_vjp(eq: CustomVjp, tape: Any, operands: tuple[int, ...], moving: list,
                         path: str, transform: str) -> tuple[tuple[int, ...], list]:
    """A custom_vjp call linearized: ``fwd`` into the primal body, a ``custom_lin`` onto
    the tape (module docstring)."""
    eq = rules_read(eq)
    rules = _vjp_rules(eq, tape.primal, moving, path, transform)
    if rules is None:
        return LINEARIZE_BODIES.rules["jit"](eq, tape, operands, moving, path, transform)
    residuals, primal = _forward(eq, rules, tape.primal, operands)
    lin = _custom_lin(eq, rules, len(residuals), moving)
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
    bwd, bwd_zeros, cts = _bwd_for(eq, body, incoming, path)
    consts = _const_numbers(body, bwd)
    if consts is None:
        _refuse(eq, path, "transpose", "a bwd holding closed-over constants is inlined "
                "only into a body built holding them")
    residuals = tuple(number[n] for n in eq.operands[:eq.num_res])
    made = iter(_inline_over(body, bwd, residuals + cts + consts))
    linear = iter(eq.operands[eq.num_res:])
    out = []
    for k, (in_zero, bwd_zero) in enumerate(zip(eq.in_zeros, bwd_zeros)):
        ct = None if bwd_zero else next(made)
        if ct is not None and k < len(eq.in_types):   # LOOP-4, as JAX checks bwd's results
            check_bwd_cotangent(cotangent_type(eq.in_types[k]), body.types[ct], eq.name, k,
                                path)
        operand = None if in_zero else next(linear)
        if operand is not None and ct is not None:
            out.append((operand, ct))
    return out


def _inline_over(body: Any, bwd: Program, operands: tuple[int, ...]) -> tuple[int, ...]:
    """``bwd`` inlined over ``operands``, as JAX traces it over the cotangents given: read
    over cotangents typed as the call's results, where one given is typed otherwise (a
    numpy cotangent, over no mesh) each primitive reading a value so changed has its
    results typed over its operands (:meth:`~shardlaw.spec.program.ad_bodies.BodyBuilder.joined`,
    the transposes' rule); as :func:`inline_body` where none is."""
    given = [body.types[n] for n in operands]
    if all(v == w.type for v, w in zip(given, bwd.inputs)) or bwd.consts:
        return inline_body(body, bwd, operands)
    number, changed = list(operands), {k for k, (v, w) in enumerate(
        zip(given, bwd.inputs)) if v != w.type}
    for eq in bwd.equations:
        moved = eq.renumbered(tuple(number[n] for n in eq.operands))
        if isinstance(eq, Opaque) and changed & set(eq.operands):
            types = tuple(body.types[n] for n in moved.operands)
            moved = moved.renumbered(moved.operands, tuple(body.joined(r, types)
                                                           for r in eq.results))
            changed.update(range(len(number), len(number) + len(eq.results)))
        number.extend(body.emit(moved))
    return tuple(number[n] for n in bwd.outputs)


def _bwd_for(eq: CustomLin, body: Any, incoming: list, path: str) -> tuple:
    """(the ``bwd`` JAX runs given the cotangents ``incoming``, its ``bwd_zeros``, the
    cotangents it takes): one taking symbolic zeros is traced for those not given and
    takes the others; any other takes zeros where none is given."""
    ct_zeros = tuple(ct is None for ct in incoming)
    if eq.zero_bwd is None or not any(ct_zeros):
        return eq.bwd, eq.bwd_zeros, tuple(
            ct if ct is not None else emit_zeros(body, cotangent_type(r))
            for ct, r in zip(incoming, eq.results))
    read = eq.zero_bwd(ct_zeros)
    if read is None:
        _refuse(eq, path, "transpose", f"its bwd taking symbolic zeros is not read for the "
                f"cotangents that are zeros {list(ct_zeros)}")
    return read[0], read[1], tuple(ct for ct in incoming if ct is not None)


@BATCHING.register("custom_lin")
def batch_custom_lin(rw: Any, eq: CustomLin, numbers: tuple, dims: tuple, path: str) -> None:
    """vmap of a ``custom_lin``: refused while tracing (LOOP-3), as JAX's batching rule
    for it refuses."""
    check_custom_lin_transposed(eq.name, path, "trace")
