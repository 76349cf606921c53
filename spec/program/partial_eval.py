"""Dead-code elimination and partial evaluation as rewrites of a whole program (AD-6 .. AD-8).

Differentiation stages its jit equations through two rewrites of JAX's jaxprs:
dead-code elimination (``pe.dce_jaxpr`` with jit's rule, ``dce_jaxpr_pjit_rule``) and partial
evaluation (``pe.partial_eval_jaxpr_nounits`` with jit's rule, ``_pjit_partial_eval``). A
:class:`~shardlaw.spec.program.description.Program` is what one jit holds, so each rewrite
here takes a Program as jit's rule takes its equation:

* :func:`dce_program` — the used outputs and the inputs they need, each with its sharding
  and donation; the body pruned the same way, equation by equation from the last (an
  equation none of whose results is used goes; an inner jit is pruned by this rule; any
  other equation is kept whole once one of its results is used); no used output: no
  program (None).
* :func:`partial_eval_program` — the known program (the known inputs with their shardings
  and donation; the known outputs but those that return an input unchanged with no
  out_sharding, then the residuals it computes, UNSPECIFIED) and the unknown program (the
  unknown inputs with their shardings and donation, then every residual, neither sharded
  nor donated; the unknown outputs with their shardings), None where no output is unknown.
  A value is unknown when an unknown input reaches it; a residual is a known value an
  unknown equation reads.

Each rule is registered here, on the rewrite itself, so a program's trace records it:
AD-8 on :func:`dce_program` (the AD rewrites prune inner jits with it), AD-6 on
:func:`known_program` and AD-7 on :func:`unknown_program`, the two halves
:func:`partial_eval_program` stages. ``tests/test_program_rewrites.py`` holds them to real
JAX 0.10.2 (the jit equations ``pe.dce_jaxpr`` and ``pe.partial_eval_jaxpr_nounits`` leave
of the same functions), on both sides of each rule.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from ..core.rules import rule
from ..core.shardings import UNSPECIFIED
from .description import Jit, Opaque, Program, ShardMap, Value, check_program  # noqa: F401
from .primitives import PRUNING, entry_of
from .refs import writes_ref

__all__ = ["dce_program", "partial_eval_program", "known_program", "unknown_program",
           "policy_read", "saved_by_policy", "split_by_policy", "PolicySplit",
           "known_by_policy", "recompute_by_policy", "stored_type", "policy_decides",
           "table_key",
           "with_reduced_precision",
           "split_known", "KnownSplit",
           "PartiallyEvaluatedProgram"]


def _flags(value: Any, count: int, what: str) -> tuple[bool, ...]:
    check_program(type(value) in (tuple, list) and len(value) == count
                  and all(type(v) is bool for v in value), what,
                  f"a tuple of {count} bools, one per output", value)
    return tuple(value)


def _keep(items: tuple, flags: tuple[bool, ...]) -> tuple:
    return tuple(x for x, keep in zip(items, flags) if keep)


# --------------------------------------------------------------------------- DCE

def _pruned_body(program: Program, used: tuple[bool, ...]
                 ) -> tuple[tuple, tuple, tuple[bool, ...]]:
    """(equations, outputs, used inputs) of ``program``'s body with only the ``used``
    outputs, renumbered."""
    needed = {n for n, u in zip(program.outputs, used) if u}
    numbers = program.result_numbers()
    kept: list[tuple[int, Any, tuple[bool, ...]]] = []   # (index, equation, kept results)
    for k in reversed(range(len(program.equations))):
        eq = program.equations[k]
        results = tuple(n in needed for n in numbers[k])
        if not any(results) and not writes_ref(eq):   # a ref's write is an effect: kept
            continue
        eq, results = PRUNING.of(entry_of(eq))(eq, results, k)
        needed |= set(eq.operands)
        kept.append((k, eq, results))
    kept.reverse()
    inputs = len(program.inputs)
    used_inputs = tuple(n in needed for n in range(inputs))
    renumber: dict[int, int] = {}
    for n in range(inputs):
        if used_inputs[n]:
            renumber[n] = len(renumber)
    for c in range(len(program.consts)):
        renumber[inputs + c] = len(renumber)
    equations = []
    for k, eq, results in kept:
        for n, keep in zip(numbers[k], results):
            if keep:
                renumber[n] = len(renumber)
        equations.append(dataclasses.replace(
            eq, operands=tuple(renumber[n] for n in eq.operands)))
    outputs = tuple(renumber[n] for n, u in zip(program.outputs, used) if u)
    return tuple(equations), outputs, used_inputs


@PRUNING.register("jit")
def _pruned_jit(eq: Jit, results: tuple[bool, ...], k: int) -> tuple[Jit, tuple[bool, ...]]:
    """An inner jit keeps its used results and the inputs they read (AD-8)."""
    body, used_in = dce_program(eq.body, results)
    if not all(results):
        return dataclasses.replace(eq, operands=_keep(eq.operands, used_in),
                                   results=_keep(eq.results or (), results), body=body), results
    return dataclasses.replace(eq, operands=_keep(eq.operands, used_in), body=body), results


@PRUNING.register("shard_map")
def _pruned_shard_map(eq: ShardMap, results: tuple[bool, ...], k: int
                      ) -> tuple[ShardMap, tuple[bool, ...]]:
    """A shard_map is kept whole, all of its results used (pruning its body is not
    written)."""
    check_program(all(results), f"the shard_map at body[{k}] under dead-code elimination",
                  "an equation all of whose results are used (pruning a "
                  "shard_map's body is not written)", results)
    return eq, (True,) * len(results)


@PRUNING.register("whole")
def _kept_whole(eq: Any, results: tuple[bool, ...], k: int) -> tuple[Any, tuple[bool, ...]]:
    """Any other equation lives whole once one of its results is used."""
    return eq, (True,) * len(results)


@rule("AD-8", mirrors="jax._src.pjit.dce_jaxpr_pjit_rule")
def dce_program(program: Program, used_outputs: Any
                ) -> tuple[Program | None, tuple[bool, ...]]:
    """Dead-code elimination keeps a jit's used outputs and the inputs they depend on, each with its sharding and donation; a jit with no used output (and no ref written) goes.

    Returns the pruned program (None: it went) and which inputs it keeps. Differentiation
    relies on it: the inner jits of the tangent and transposed bodies are pruned so.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque
    >>> rows = NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("x"))
    >>> program = Program((Value.numpy((8,)), Value.numpy((8,))),
    ...     (Opaque((1,), (Value.typed((8,)),), primitive="neg"),), outputs=(0, 2),
    ...     in_shardings=(rows, rows), donated=(False, True))
    >>> pruned, used = dce_program(program, (False, True))
    >>> used, pruned.donated, pruned.outputs
    ((False, True), (True,), (1,))
    >>> dce_program(program, (False, False))
    (None, (False, False))
    """
    check_program(isinstance(program, Program), "the program", "a Program", program)
    used = _flags(used_outputs, len(program.outputs), "used_outputs")
    if not any(used) and not any(writes_ref(eq) for eq in program.equations):
        return None, (False,) * len(program.inputs)
    equations, outputs, used_inputs = _pruned_body(program, used)
    pruned = dataclasses.replace(
        program, inputs=_keep(program.inputs, used_inputs), equations=equations,
        outputs=outputs, in_shardings=_keep(program.in_shardings, used_inputs),
        out_shardings=_keep(program.out_shardings, used),
        donated=_keep(program.donated, used_inputs),
        refs=_keep(program.refs, used_inputs),
        compiler=None if program.compiler is None else _keep(program.compiler, used),
        compiler_in=None if program.compiler_in is None
        else _keep(program.compiler_in, used_inputs))
    return pruned, used_inputs


# --------------------------------------------------------------------------- partial eval

@dataclasses.dataclass(frozen=True)
class PartiallyEvaluatedProgram:
    """What partial evaluation of a jit stages: the ``known`` program (always), the
    ``unknown`` one (None when no output is unknown), which outputs are unknown, and the
    residuals (value numbers of the original program, in the order the unknown program
    takes them)."""

    known: Program
    unknown: Program | None
    unknown_outputs: tuple[bool, ...]
    residuals: tuple[int, ...]


def _unknown_values(program: Program, unknown: tuple[bool, ...]) -> set[int]:
    """The values an unknown input reaches: every result of an equation with an unknown
    operand (an inner jit or shard_map reached so is refused: splitting it is not
    written)."""
    reached = {n for n, u in enumerate(unknown) if u}
    for k, (eq, numbers) in enumerate(zip(program.equations, program.result_numbers())):
        if any(n in reached for n in eq.operands):
            check_program(eq.body is None, f"the {eq.kind} at body[{k}] under partial "
                          "evaluation", "an equation without a body (splitting an inner "
                          "jit or shard_map reached by an unknown input is not written)",
                          eq.kind)
            reached |= set(numbers)
    return reached


def _residuals(program: Program, reached: set[int]) -> tuple[int, ...]:
    """The known values the unknown equations read, each once, in the order they are
    first read."""
    out: dict[int, None] = {}
    for eq, numbers in zip(program.equations, program.result_numbers()):
        if any(n in reached for n in numbers):
            out.update((n, None) for n in eq.operands if n not in reached)
    return tuple(out)


def _sub_program(program: Program, inputs: tuple[int, ...], equations: list[int],
                 outputs: tuple[int, ...], **options: Any) -> Program:
    """The program of ``program``'s values ``inputs`` (as inputs, typed), its constants,
    the ``equations`` (indices, in order) and ``outputs`` (value numbers), renumbered."""
    renumber = {n: k for k, n in enumerate(inputs)}
    for c in range(len(program.consts)):
        renumber[len(program.inputs) + c] = len(renumber)
    numbers = program.result_numbers()
    kept = []
    for k in equations:
        eq = program.equations[k]
        kept.append(dataclasses.replace(eq, operands=tuple(renumber[n] for n in eq.operands)))
        for n in numbers[k]:
            renumber[n] = len(renumber)
    types = program.value_types
    return Program(tuple(types[n] if n >= len(program.inputs) else program.inputs[n]
                         for n in inputs), tuple(kept), tuple(renumber[n] for n in outputs),
                   program.consts, keep_unused=program.keep_unused,
                   context_mesh=program.context_mesh, devices=program.devices,
                   checked=program.checked, **options)


@rule("AD-6", mirrors="jax._src.pjit._pjit_partial_eval")
def known_program(program: Program, unknown: tuple[bool, ...], reached: set[int],
                  residuals: tuple[int, ...]) -> Program:
    """Partial evaluation stages a known jit with the known inputs' shardings and donation, returning the known outputs (but those that return an input and have no out_sharding), then one UNSPECIFIED output per residual it computes.

    It is staged even when nothing is known (a jit without inputs). ``reached`` holds the
    values an unknown input reaches, ``residuals`` the known values the unknown equations
    read (an input among them is passed on as it is, a known output not returned twice).

    >>> from shardlaw.spec.program.description import Opaque
    >>> program = Program((Value.numpy((8,)), Value.numpy((8,))),
    ...     (Opaque((0,), (Value.typed((8,)),), primitive="sin"),
    ...      Opaque((1, 2), (Value.typed((8,)),), primitive="mul")), outputs=(0, 3),
    ...     donated=(True, True))
    >>> known = known_program(program, (False, True), reached={1, 3}, residuals=(2,))
    >>> known.donated, known.outputs, known.out_shardings   # input 0 forwarded unsharded: left out
    ((True,), (1,), (UNSPECIFIED,))
    """
    count = len(program.inputs)
    known_in = tuple(not u for u in unknown)
    unknown_out = tuple(n in reached for n in program.outputs)
    # the known outputs, but an input returned as it is with no out_sharding
    kept = tuple(not u and not (n < count and s is UNSPECIFIED)
                 for u, n, s in zip(unknown_out, program.outputs, program.out_shardings))
    primal = tuple(n for n, k in zip(program.outputs, kept) if k)
    stored = tuple(n for n in residuals if n >= count and n not in primal)
    known_eqs = [k for k, numbers in enumerate(program.result_numbers())
                 if not any(n in reached for n in numbers)]
    return _sub_program(
        program, tuple(n for n in range(count) if known_in[n]), known_eqs, primal + stored,
        in_shardings=_keep(program.in_shardings, known_in),
        out_shardings=_keep(program.out_shardings, kept) + (UNSPECIFIED,) * len(stored),
        donated=_keep(program.donated, known_in), refs=_keep(program.refs, known_in))


@rule("AD-7", mirrors="jax._src.pjit._pjit_partial_eval")
def unknown_program(program: Program, unknown: tuple[bool, ...], reached: set[int],
                    residuals: tuple[int, ...]) -> Program | None:
    """Partial evaluation stages an unknown jit taking the unknown inputs with their shardings and donation, then every residual (UNSPECIFIED, not donated), and returning the unknown outputs with their shardings; with no unknown output there is none.

    >>> from shardlaw.spec.program.description import Opaque
    >>> program = Program((Value.numpy((8,)), Value.numpy((8,))),
    ...     (Opaque((0,), (Value.typed((8,)),), primitive="sin"),
    ...      Opaque((1, 2), (Value.typed((8,)),), primitive="mul")), outputs=(0, 3),
    ...     donated=(True, True))
    >>> unknown = unknown_program(program, (False, True), reached={1, 3}, residuals=(2,))
    >>> unknown.donated, unknown.in_shardings
    ((True, False), (UNSPECIFIED, UNSPECIFIED))
    >>> print(unknown_program(program, (False, False), reached=set(), residuals=()))
    None
    """
    unknown_out = tuple(n in reached for n in program.outputs)
    if not any(unknown_out):
        return None
    count = len(program.inputs)
    unknown_eqs = [k for k, numbers in enumerate(program.result_numbers())
                   if any(n in reached for n in numbers)]
    taken = tuple(n for n in range(count) if unknown[n]) + residuals
    return _sub_program(
        program, taken, unknown_eqs,
        tuple(n for n, u in zip(program.outputs, unknown_out) if u),
        in_shardings=_keep(program.in_shardings, unknown) + (UNSPECIFIED,) * len(residuals),
        out_shardings=_keep(program.out_shardings, unknown_out),
        donated=_keep(program.donated, unknown) + (False,) * len(residuals))


def partial_eval_program(program: Program, unknown_inputs: Any) -> PartiallyEvaluatedProgram:
    """Partial evaluation splits a jit into a known jit (AD-6) and an unknown jit (AD-7).

    A value is unknown when an unknown input reaches it; a residual is a known value an
    unknown equation reads.

    >>> from shardlaw.spec.program.description import Opaque
    >>> program = Program((Value.numpy((8,)), Value.numpy((8,))),
    ...     (Opaque((0,), (Value.typed((8,)),), primitive="sin"),
    ...      Opaque((1, 2), (Value.typed((8,)),), primitive="mul")), outputs=(0, 3),
    ...     donated=(True, True))
    >>> split = partial_eval_program(program, (False, True))
    >>> split.unknown_outputs, split.residuals, len(split.known.outputs)
    ((False, True), (2,), 1)
    >>> split.unknown.donated, len(split.unknown.inputs)
    ((True, False), 2)
    """
    check_program(isinstance(program, Program), "the program", "a Program", program)
    count = len(program.inputs)
    check_program(type(unknown_inputs) in (tuple, list) and len(unknown_inputs) == count
                  and all(type(v) is bool for v in unknown_inputs), "unknown_inputs",
                  f"a tuple of {count} bools, one per input", unknown_inputs)
    unknown = tuple(unknown_inputs)
    reached = _unknown_values(program, unknown)
    residuals = _residuals(program, reached)
    unknown_out = tuple(n in reached for n in program.outputs)
    return PartiallyEvaluatedProgram(known_program(program, unknown, reached, residuals),
                                     unknown_program(program, unknown, reached, residuals),
                                     unknown_out, residuals)


# --------------------------------------------------------------------------- hoisting

@dataclasses.dataclass(frozen=True)
class KnownSplit:
    """A body split by what can be computed from its known inputs (``known_inputs``)
    alone (:func:`split_known`).

    ``known`` computes it from the known inputs it reads (``known_reads``, per known
    input), None where it computes nothing anyone needs; ``unknown`` is the rest, taking
    the residuals and the unknown inputs (the residuals first where asked). Per output of
    the body, ``outputs`` says where it comes from: ``("known", j)`` output ``j`` of
    ``known``, ``("in", i)`` known input ``i`` unchanged, ``("unknown", m)`` output ``m``
    of ``unknown``; per residual ``unknown`` takes, ``residuals`` says which known value
    it is (``("known", j)`` or ``("in", i)``)."""

    known: Program | None
    known_inputs: tuple[bool, ...]
    known_reads: tuple[bool, ...]
    unknown: Program
    outputs: tuple[tuple[str, int], ...]
    residuals: tuple[tuple[str, int], ...]


def _expanded(options: tuple, count: int, default: Any) -> tuple:
    """A jit's per-input or per-output options, ``()`` spelled out."""
    return tuple(options) if options else (default,) * count


def _classified(program: Program, known_in: tuple[bool, ...]) -> tuple[list, set]:
    """Per equation, how partial evaluation meets it: None (every operand known: it runs
    before, whole), a :class:`KnownSplit` (an inner jit, split in two as JAX's jit rule
    splits it) or False (it waits for the unknown inputs; a body of another kind, or a
    write to a ref); and the known values."""
    known = {i for i, k in enumerate(known_in) if k}
    plan: list = []
    for eq, numbers in zip(program.equations, program.result_numbers()):
        reads = tuple(n in known for n in eq.operands)
        if writes_ref(eq):   # (an effect stays where it is)
            plan.append(False)
        elif all(reads):
            plan.append(None)
            known.update(numbers)
        elif type(eq) is Jit:
            sub = split_known(eq.body, reads, residuals_first=False)
            plan.append(sub)
            known.update(n for n, (where, _) in zip(numbers, sub.outputs)
                         if where != "unknown")
        else:
            plan.append(False)
    return plan, known


def _literal(eq: Any) -> bool:
    """Whether ``eq`` is a scalar literal as a description spells it (a ``broadcast_in_dim``
    of nothing, typed over no mesh): JAX writes the literal where it is read, in the
    unknown part too, never as a residual."""
    return type(eq) is Opaque and eq.primitive == "broadcast_in_dim" and not eq.operands \
        and len(eq.results) == 1 and eq.results[0].shape == () and eq.results[0].mesh is None


def _residual_keys(program: Program, plan: list, known: set, returned: list[int]
                   ) -> tuple[list, set]:
    """The known values the unknown part reads (a value number, or ``(k, j)``: output
    ``j`` of the known jit of the jit at ``k``), each once, in the order first read; then
    the known outputs it returns (``returned``). A literal it reads is no residual: the
    literals it reads, apart."""
    literals = {n for eq, numbers in zip(program.equations, program.result_numbers())
                if _literal(eq) for n in numbers}
    keys: dict = {}
    for k, (eq, how) in enumerate(zip(program.equations, plan)):
        if how is False:
            keys.update((n, None) for n in eq.operands if n in known)
        elif how is not None and any(where == "unknown" for where, _ in how.outputs):
            for where, j in how.residuals:
                keys[eq.operands[j] if where == "in" else (k, j)] = None
    keys.update((n, None) for n in returned)
    return [key for key in keys if key not in literals], literals & set(keys)


def split_known(program: Program, known_inputs: tuple[bool, ...],
                instantiate: tuple[bool, ...] | None = None,
                residuals_first: bool = True) -> KnownSplit:
    """``program`` split as JAX's partial evaluation splits it given which inputs are known
    (``pe.trace_to_jaxpr_nounits``; an inner jit by ``_pjit_partial_eval``): every
    equation whose operands are all known goes to the known part, an inner jit is split
    in two (its known jit returns its known outputs, then the residuals it computes), the
    rest waits in the unknown part. A known output is returned by the unknown part where
    ``instantiate`` says so (read from a residual), else by the known part. The known
    part keeps what its outputs need (dead-code elimination, AD-8)."""
    from .ad_bodies import BodyBuilder

    count = len(program.inputs)
    instantiate = instantiate or (False,) * len(program.outputs)
    plan, known = _classified(program, known_inputs)
    returned = [n for n, inst in zip(program.outputs, instantiate) if inst and n in known]
    keys, literals = _residual_keys(program, plan, known, returned)
    kin = [i for i in range(count) if known_inputs[i]]
    kb = BodyBuilder(tuple(program.inputs[i] for i in kin), program.consts)
    kmap: dict = {i: j for j, i in enumerate(kin)}
    kmap.update((count + c, len(kin) + c) for c in range(len(program.consts)))
    numbers = program.result_numbers()
    for k, (eq, how) in enumerate(zip(program.equations, plan)):
        if how is None:
            kmap.update(zip(numbers[k], kb.emit(eq.renumbered(tuple(
                kmap[n] for n in eq.operands)))))
        elif how is not False:
            _emit_known_jit(eq, how, kb, kmap, numbers[k], k)
    # the known part returns the known outputs the unknown part does not, then the
    # residuals that are not known inputs, each once
    made = dict.fromkeys(n for n, inst in zip(program.outputs, instantiate)
                         if n in known and not inst and not n < count)
    made.update((key, None) for key in keys if not (type(key) is int and key < count))
    made_keys = list(made)
    body = kb.program(tuple(kmap[key] for key in made_keys))
    pruned, reads = dce_program(body, (True,) * len(made_keys))
    where = {key: ("known", j) for j, key in enumerate(made_keys)}
    where.update((i, ("in", i)) for i in kin)
    unknown = _unknown_part(program, plan, known, (keys, literals), known_inputs,
                            instantiate, residuals_first)
    position = iter(range(len(unknown.outputs)))
    outputs = tuple(where[n] if n in known and not inst else ("unknown", next(position))
                    for n, inst in zip(program.outputs, instantiate))
    return KnownSplit(pruned, tuple(known_inputs), reads, unknown, outputs,
                      tuple(where[key] for key in keys))


def _emit_known_jit(eq: Jit, split: KnownSplit, kb: Any, kmap: dict, numbers: range,
                    k: int) -> None:
    """The known jit of an inner jit split in two, into the known part (where it computes
    anything), with its known inputs' shardings and donation; its known outputs, and its
    outputs as ``(k, j)``, numbered there."""
    inner = eq.body
    made: tuple = ()
    if split.known is not None:
        count = len(inner.inputs)
        known_in = [i for i, known in enumerate(split.known_inputs) if known]
        used = [i for i, r in zip(known_in, split.known_reads) if r]
        outs = [m for m, (where, _) in enumerate(split.outputs) if where == "known"]
        stored = len(split.known.outputs) - len(outs)
        in_shardings = _expanded(inner.in_shardings, count, UNSPECIFIED)
        out_shardings = _expanded(inner.out_shardings, len(inner.outputs), UNSPECIFIED)
        donated = _expanded(inner.donated, count, False)
        body = dataclasses.replace(
            split.known, in_shardings=tuple(in_shardings[i] for i in used),
            out_shardings=tuple(out_shardings[m] for m in outs) + (UNSPECIFIED,) * stored,
            donated=tuple(donated[i] for i in used), keep_unused=inner.keep_unused,
            context_mesh=inner.context_mesh)
        made = kb.emit(Jit(tuple(kmap[eq.operands[i]] for i in used), body=body,
                           name=eq.name, checked=False))
        kmap.update(((k, j), n) for j, n in enumerate(made))
    for m, (where, j) in enumerate(split.outputs):
        if where == "known":
            kmap[numbers[m]] = made[j]
        elif where == "in":
            kmap[numbers[m]] = kmap[eq.operands[j]]


def _unknown_part(program: Program, plan: list, known: set, read: tuple[list, set],
                  known_inputs: tuple[bool, ...], instantiate: tuple[bool, ...],
                  residuals_first: bool) -> Program:
    """The unknown part of a split: taking the residuals and the unknown inputs (in the
    order asked), the literals it reads written again, every equation that waits, an
    inner jit split in two as its unknown jit; returning the unknown outputs and the known
    ones instantiated."""
    from .ad_bodies import BodyBuilder

    keys, literals = read
    count = len(program.inputs)
    types, numbers = program.value_types, program.result_numbers()
    key_types = [types[key] if type(key) is int else _stored_type(plan[key[0]], key[1])
                 for key in keys]
    uin = [i for i in range(count) if not known_inputs[i]]
    given = [program.inputs[i] for i in uin]
    ub = BodyBuilder(tuple(key_types + given if residuals_first else given + key_types),
                     program.consts)
    first, start = (0, len(keys)) if residuals_first else (len(uin), 0)
    umap: dict = {key: first + j for j, key in enumerate(keys)}
    umap.update((i, start + j) for j, i in enumerate(uin))
    umap.update((count + c, len(ub.inputs) + c) for c in range(len(program.consts)))
    for k, (eq, how) in enumerate(zip(program.equations, plan)):
        if how is False or how is None and literals.intersection(numbers[k]):
            umap.update(zip(numbers[k], ub.emit(eq.renumbered(tuple(
                umap[n] for n in eq.operands)))))
        elif how is not None:
            _emit_unknown_jit(eq, how, ub, umap, numbers[k], k)
    return ub.program(tuple(umap[n] for n, inst in zip(program.outputs, instantiate)
                            if n not in known or inst))


def _stored_type(split: KnownSplit, j: int) -> Value:
    """The type of output ``j`` of a split jit's known jit."""
    return split.known.value_types[split.known.outputs[j]]


def _emit_unknown_jit(eq: Jit, split: KnownSplit, ub: Any, umap: dict, numbers: range,
                      k: int) -> None:
    """The unknown jit of an inner jit split in two (where it returns anything): its
    unknown inputs with their shardings and donation, then its residuals (UNSPECIFIED,
    not donated); its unknown outputs with their shardings."""
    inner = eq.body
    outs = [m for m, (where, _) in enumerate(split.outputs) if where == "unknown"]
    if not outs:
        return
    count = len(inner.inputs)
    uin = [i for i, known in enumerate(split.known_inputs) if not known]
    res = [eq.operands[j] if where == "in" else (k, j) for where, j in split.residuals]
    in_shardings = _expanded(inner.in_shardings, count, UNSPECIFIED)
    out_shardings = _expanded(inner.out_shardings, len(inner.outputs), UNSPECIFIED)
    donated = _expanded(inner.donated, count, False)
    body = dataclasses.replace(
        split.unknown,
        in_shardings=tuple(in_shardings[i] for i in uin) + (UNSPECIFIED,) * len(res),
        out_shardings=tuple(out_shardings[m] for m in outs),
        donated=tuple(donated[i] for i in uin) + (False,) * len(res),
        keep_unused=inner.keep_unused, context_mesh=inner.context_mesh)
    made = ub.emit(Jit(tuple(umap[eq.operands[i]] for i in uin) + tuple(
        umap[key] for key in res), body=body, name=eq.name, checked=False))
    umap.update(zip([numbers[m] for m in outs], made))


# --------------------------------------------------------------------------- remat policies

# The policies the linearization of a remat reads (None: JAX's default, nothing saved); the
# offloading ones and a user's own (named in angle brackets) are named, not read.
_PLAIN_POLICIES = ("everything_saveable", "nothing_saveable", "dots_saveable",
                   "dots_with_no_batch_dims_saveable")
_EITHER = "save_from_both_policies("
_NAME_POLICIES = ("save_only_these_names", "save_any_names_but_these")
_DOTS = ("dot_general", "conv_general_dilated", "scaled_matmul_wrapper")


def policy_read(policy: str | None) -> bool:
    """Whether the spec reads a remat's ``policy`` (:func:`saved_by_policy`): JAX's
    default, the plain policies, the two that save named values and
    ``save_from_both_policies`` of two it reads."""
    if policy is None or policy in _PLAIN_POLICIES or _named_policy(policy) is not None \
            or _policy_table(policy) is not None:
        return True
    both = _both_policies(policy)
    return both is not None and all(policy_read(p) for p in both)


_TABLE_KEY = re.compile(r"[^\s(]+\([^)]*\)")


@functools.lru_cache(maxsize=64)
def _policy_table(policy: str) -> dict[str, bool] | None:
    """A user's policy read into a table by the bridge (``<mine> saves cos(float32[8])
    and recomputes sin(float32[8])``): per equation's key, whether it saves it."""
    head, sep, rest = policy.partition(" saves ")
    saves, sep2, recomputes = rest.partition(" and recomputes ")
    if not (head.startswith("<") and head.endswith(">") and sep and sep2):
        return None
    table = {key: True for key in _TABLE_KEY.findall(saves)}
    table.update((key, False) for key in _TABLE_KEY.findall(recomputes))
    return table


def table_key(eq: Any, operands: tuple[Value, ...]) -> str:
    """An equation's key in a policy's table: its primitive (a ``name``'s with its name),
    then its operands' dtypes and shapes, ``dot_general(float32[16x8] float32[8x8])``."""
    primitive = entry_of(eq).name
    name = dict(getattr(eq, "params", ())).get("name") if primitive == "name" else None
    typed = " ".join(f"{v.dtype}[{'x'.join(str(d) for d in v.shape)}]" for v in operands)
    return f"{primitive}{'' if name is None else f'[{name}]'}({typed})"


def policy_decides(policy: str | None, program: Program) -> bool:
    """Whether a read ``policy`` answers for every equation of ``program`` (and of its inner
    jits): a table of the user's policy holds each one's key (a literal's aside); any
    other read policy does."""
    table = None if policy is None else _policy_table(policy)
    if table is None:
        return True
    types = program.value_types
    # (a literal is no equation JAX asks about: written where it is read, recomputed)
    return all(policy_decides(policy, eq.body) if type(eq) is Jit else _literal(eq) or
               table_key(eq, tuple(types[n] for n in eq.operands)) in table
               for eq in program.equations)


def _both_policies(policy: str) -> tuple[str, str] | None:
    """``("dots_saveable", "save_only_these_names(h)")`` for
    ``"save_from_both_policies(dots_saveable, save_only_these_names(h))"``."""
    if not (policy.startswith(_EITHER) and policy.endswith(")")):
        return None
    inner, depth = policy[len(_EITHER):-1], 0
    for k, c in enumerate(inner):
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0 and inner[k + 1:k + 2] == " ":
            return inner[:k], inner[k + 2:]
    return None


def _named_policy(policy: str) -> tuple[str, frozenset[str]] | None:
    """``("save_only_these_names", {"a", "h"})`` for ``"save_only_these_names(a, h)"``."""
    for kind in _NAME_POLICIES:
        if policy.startswith(kind + "(") and policy.endswith(")"):
            inner = policy[len(kind) + 1:-1]
            return kind, frozenset(n for n in inner.split(", ") if n)
    return None


def _batch_dims(eq: Any) -> tuple:
    """A dot_general's batch dimensions (both operands'), from its parameters."""
    numbers = dict(getattr(eq, "params", ())).get("dimension_numbers")
    check_program(numbers is not None and len(numbers) == 2, "a dot_general's parameters",
                  "ones holding its dimension_numbers", getattr(eq, "params", None))
    return tuple(numbers[1][0]) + tuple(numbers[1][1])


@rule("AD-21", mirrors="jax._src.ad_checkpoint: everything_saveable, DotsSaveable, "
      "SaveOnlyTheseNames, SaveAnyNamesButThese")
def saved_by_policy(policy: str | None, eq: Any, operands: tuple[Value, ...] = ()) -> bool:
    """A remat's policy saves an equation's results: all under everything_saveable, a dot's under dots_saveable, a dot_general's without batch dimensions under dots_with_no_batch_dims_saveable, and a checkpoint_name's whose name the policy lets through.

    Anything else is recomputed in the backward pass, every equation under JAX's default
    (None, as ``nothing_saveable``). A dot is ``dot_general``, ``conv_general_dilated``
    or ``scaled_matmul_wrapper`` (saved without batch dimensions when its first
    operand's leading dimension is 1). ``save_only_these_names`` lets its names through,
    ``save_any_names_but_these`` every other name; ``save_from_both_policies`` what
    either of its two saves; a user's own, read by the bridge into a table, what the
    table says it saves; an unread policy saves nothing here.

    >>> from shardlaw.spec.program.description import Opaque
    >>> dot = Opaque((0, 1), (Value.typed((8, 8)),), primitive="dot_general",
    ...              params=(("dimension_numbers", (((1,), (0,)), ((), ()))),))
    >>> batched = Opaque((0, 1), (Value.typed((2, 8, 8)),), primitive="dot_general",
    ...                  params=(("dimension_numbers", (((2,), (1,)), ((0,), (0,)))),))
    >>> named = Opaque((0,), (Value.typed((8,)),), primitive="name", params=(("name", "h"),))
    >>> [saved_by_policy("dots_saveable", e) for e in (dot, batched, named)]
    [True, True, False]
    >>> [saved_by_policy("dots_with_no_batch_dims_saveable", e) for e in (dot, batched)]
    [True, False]
    >>> [saved_by_policy(p, named) for p in ("save_only_these_names(h)",
    ...  "save_any_names_but_these(h)", "save_any_names_but_these(a)", None)]
    [True, False, True, False]
    >>> either = "save_from_both_policies(dots_saveable, save_only_these_names(h))"
    >>> [saved_by_policy(either, e) for e in (dot, batched, named)]
    [True, True, True]
    """
    if policy == "everything_saveable":
        return True
    both = None if policy is None else _both_policies(policy)
    if both is not None:
        return any(saved_by_policy(p, eq, operands) for p in both)
    table = None if policy is None else _policy_table(policy)
    if table is not None:
        return table.get(table_key(eq, operands), False)
    primitive = entry_of(eq).name
    if policy == "dots_saveable":
        return primitive in _DOTS
    if policy == "dots_with_no_batch_dims_saveable":
        if primitive == "scaled_matmul_wrapper":
            return bool(operands) and operands[0].shape[:1] == (1,)
        return primitive == "dot_general" and not _batch_dims(eq)
    named = None if policy is None else _named_policy(policy)
    if named is None or primitive != "name":
        return False
    kind, names = named
    return (dict(eq.params).get("name") in names) == (kind == "save_only_these_names")


@dataclasses.dataclass(frozen=True)
class PolicySplit:
    """A linearized remat body's primal split by its policy (AD-22): the values it
    ``stored`` (in the order they are made: a value's number in that primal, or ``(k,
    key)``, value ``key`` of the inner jit at ``k``'s own split), the equations the
    backward pass ``recomputed`` (their indices, in order), the inner jits split so
    (``inner``: per jit, its index, the positions of its results needed and its split)
    and the inputs and constants it ``reads`` (their numbers)."""

    stored: tuple
    recomputed: tuple[int, ...]
    inner: tuple = ()
    reads: tuple[int, ...] = ()


def _jit_reads(eq: Any, made: range, need: set, policy: Any) -> tuple[tuple, PolicySplit]:
    """The positions of an inner jit's results ``need`` holds and its body split by the
    policy for them."""
    wanted = tuple(m for m, n in enumerate(made) if n in need)
    return wanted, split_by_policy(eq.body, tuple(eq.body.outputs[m] for m in wanted), policy)


@rule("AD-22", mirrors="jax._src.ad_checkpoint.remat_partial_eval; "
      "jax._src.interpreters.partial_eval.partial_eval_jaxpr_custom")
def split_by_policy(primal: Program, residuals: tuple[int, ...], policy: str | None
                    ) -> PolicySplit:
    """A differentiated remat stores each value its policy saves that its tangents or its recomputation read, and recomputes from its inputs and those every other equation they need, an inner jit's body split alike.

    ``primal`` is the remat's body linearized (its primal, then what its tangents read,
    ``residuals``); an equation with an effect (a ref's write) is never recomputed. The
    values stored are residuals of the differentiated remat, typed as made.

    >>> from shardlaw.spec.program.description import Opaque
    >>> dot = (("dimension_numbers", (((1,), (0,)), ((), ()))),)
    >>> body = Program((Value.numpy((8, 8)), Value.numpy((8, 8))),
    ...     (Opaque((0, 1), (Value.typed((8, 8)),), primitive="dot_general", params=dot),
    ...      Opaque((2,), (Value.typed((8, 8)),), primitive="sin"),
    ...      Opaque((2,), (Value.typed((8, 8)),), primitive="cos")), outputs=(3, 4, 1))
    >>> split = split_by_policy(body, (4, 1), "dots_saveable")   # the product stored
    >>> split.stored, split.recomputed, split.reads
    ((2,), (2,), (1,))
    >>> split_by_policy(body, (4, 1), None).recomputed
    (0, 2)
    """
    types, numbers = primal.value_types, primal.result_numbers()
    need, stored, inner, recomputed = set(residuals), set(), {}, []
    for k in reversed(range(len(primal.equations))):
        eq, made = primal.equations[k], numbers[k]
        if need.isdisjoint(made):
            continue
        if type(eq) is Jit and not writes_ref(eq):   # (JAX splits it by the policy too)
            wanted, sub = _jit_reads(eq, made, need, policy)
            inner[k] = (k, wanted, sub)
            recomputed.append(k)
            need.update(eq.operands[i] for i in sub.reads if i < len(eq.operands))
        elif writes_ref(eq) or saved_by_policy(policy, eq,
                                                tuple(types[n] for n in eq.operands)):
            stored.update(n for n in made if n in need)
        else:
            recomputed.append(k)
            need.update(eq.operands)
    order: list = []
    for k, made in enumerate(numbers):
        order += [(k, key) for key in inner[k][2].stored] if k in inner else \
            [n for n in made if n in stored]
    first = len(primal.inputs) + len(primal.consts)
    return PolicySplit(tuple(order), tuple(reversed(recomputed)),
                       tuple(inner[k] for k in sorted(inner)),
                       tuple(sorted(n for n in need if n < first)))


def stored_type(program: Program, key: Any) -> Value:
    """The type of a value a split by the policy stores (:class:`PolicySplit`'s key)."""
    if type(key) is int:
        return program.value_types[key]
    return stored_type(program.equations[key[0]].body, key[1])


def known_by_policy(program: Program, split: PolicySplit, forwarded: bool = False
                    ) -> tuple[Program, tuple[int, ...]]:
    """``program`` returning its outputs, then the values ``split`` stores (an inner jit
    split returning its own, after its outputs, UNSPECIFIED), as JAX's partial evaluation
    of a remat leaves its known part; per stored value, its output's position.
    ``forwarded``: a stored value the program returns already is not returned again (an
    inner jit's known part, as JAX's forwards it)."""
    from .ad_bodies import BodyBuilder

    body = BodyBuilder(tuple(program.inputs), program.consts)
    number = list(range(len(program.inputs) + len(program.consts)))
    subs = {k: sub for k, _, sub in split.inner}
    where: dict = {}
    for k, eq in enumerate(program.equations):
        operands = tuple(number[n] for n in eq.operands)
        sub = subs.get(k)
        if sub is None or not sub.stored:
            number.extend(body.emit(eq.renumbered(operands)))
            continue
        known, places = known_by_policy(eq.body, sub, forwarded=True)
        count = len(eq.body.outputs)
        shardings = eq.body.out_shardings or (UNSPECIFIED,) * count
        known = dataclasses.replace(known, in_shardings=eq.body.in_shardings,
                                    out_shardings=tuple(shardings) + (UNSPECIFIED,) * (
                                        len(known.outputs) - count),
                                    donated=eq.body.donated, keep_unused=eq.body.keep_unused,
                                    context_mesh=eq.body.context_mesh)
        outs = body.emit(Jit(operands, body=known, name=eq.name, checked=False))
        number.extend(outs[:count])
        where.update(((k, key), outs[p]) for key, p in zip(sub.stored, places))
    where.update((key, number[key]) for key in split.stored if type(key) is int)
    outputs = [number[n] for n in program.outputs]
    places = []
    for key in split.stored:
        if not (forwarded and where[key] in outputs):
            outputs.append(where[key])
        places.append(outputs.index(where[key]) if forwarded else len(outputs) - 1)
    return body.program(tuple(outputs)), tuple(places)


def recompute_by_policy(program: Program, split: PolicySplit, into: Any, number: dict
                        ) -> None:
    """The equations ``split`` recomputes emitted into ``into`` (``number``: the numbers
    there of the values they read, the stored ones by key; each value made added), an
    inner jit split as a jit taking the values its split stores (UNSPECIFIED), then the
    inputs it reads, and returning the results needed, as JAX's transposition of the
    differentiated remat stages the known part of that jit."""
    from .ad_bodies import BodyBuilder

    subs = {k: (wanted, sub) for k, wanted, sub in split.inner}
    numbers = program.result_numbers()
    for k in split.recomputed:
        eq = program.equations[k]
        if k not in subs:
            number.update(zip(numbers[k], into.emit(eq.renumbered(tuple(
                number[n] for n in eq.operands)))))
            continue
        wanted, sub = subs[k]
        inner, count = eq.body, len(eq.body.inputs)
        read = [i for i in sub.reads if i < count]
        if not sub.recomputed:   # (nothing to recompute: its stored values and inputs)
            given = {key: number[(k, key)] for key in sub.stored}
            given.update((i, number[eq.operands[i]]) for i in read)
            number.update((numbers[k][m], given[inner.outputs[m]]) for m in wanted)
            continue
        again = BodyBuilder(tuple(stored_type(inner, key) for key in sub.stored) + tuple(
            inner.inputs[i] for i in read), inner.consts)
        local: dict = {key: j for j, key in enumerate(sub.stored)}
        local.update((i, len(sub.stored) + j) for j, i in enumerate(read))
        local.update((count + c, len(again.inputs) + c) for c in range(len(inner.consts)))
        recompute_by_policy(inner, sub, again, local)
        shardings = inner.out_shardings or (UNSPECIFIED,) * len(inner.outputs)
        ins = inner.in_shardings or (UNSPECIFIED,) * count
        donated = inner.donated or (False,) * count
        staged = again.program(tuple(local[inner.outputs[m]] for m in wanted),
                               in_shardings=(UNSPECIFIED,) * len(sub.stored) + tuple(
                                   ins[i] for i in read),
                               out_shardings=tuple(shardings[m] for m in wanted),
                               donated=(False,) * len(sub.stored) + tuple(
                                   donated[i] for i in read),
                               keep_unused=inner.keep_unused, context_mesh=inner.context_mesh)
        outs = into.emit(Jit(tuple(number[(k, key)] for key in sub.stored) + tuple(
            number[eq.operands[i]] for i in read), body=staged, name=eq.name, checked=False))
        number.update((numbers[k][m], o) for m, o in zip(wanted, outs))


# (jax.numpy.finfo's exponent and mantissa bits, per inexact dtype)
_PRECISION = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23),
              "float64": (11, 52), "complex64": (8, 23), "complex128": (11, 52)}


def with_reduced_precision(known: Program, stored: int) -> Program:
    """The known part of a remat split by its policy (its primal outputs, then the
    ``stored`` values) as JAX evaluates it: a ``reduce_precision`` to its own dtype's
    precision after each stored inexact value another equation there reads (JAX pins the
    stored value against excess precision), read in its place from then on."""
    from .ad_bodies import BodyBuilder

    first = len(known.inputs) + len(known.consts)
    used = {n for eq in known.equations for n in eq.operands}
    numbers, types = known.result_numbers(), known.value_types
    pinned = {n for n in known.outputs[len(known.outputs) - stored:]
              if n >= first and n in used and types[n].dtype in _PRECISION}
    if not pinned:
        return known
    body = BodyBuilder(tuple(known.inputs), known.consts)
    number = list(range(first))
    for eq, made in zip(known.equations, numbers):
        outs = body.emit(eq.renumbered(tuple(number[n] for n in eq.operands)))
        for n, out in zip(made, outs):
            bits = _PRECISION.get(types[n].dtype)
            again = getattr(eq, "primitive", None) == "reduce_precision" and \
                dict(eq.params) == dict(zip(("exponent_bits", "mantissa_bits"), bits or ()))
            if n in pinned and not again:
                (out,) = body.opaque("reduce_precision", (out,), (types[n],), params=(
                    ("exponent_bits", bits[0]), ("mantissa_bits", bits[1])))
            number.append(out)
    return body.program(tuple(number[n] for n in known.outputs))
