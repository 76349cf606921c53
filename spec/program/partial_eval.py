"""Dead-code elimination as a rewrite of a whole program (AD-8).

Differentiation stages its jit equations through two rewrites of JAX's jaxprs:
dead-code elimination (``pe.dce_jaxpr`` with jit's rule, ``dce_jaxpr_pjit_rule``) and partial
evaluation (``pe.partial_eval_jaxpr_nounits`` with jit's rule, ``_pjit_partial_eval``). A
:class:`~shardlaw.spec.program.description.Program` is what one jit holds, so the rewrite
here takes a Program as jit's rule takes its equation:

* :func:`dce_program` — the used outputs and the inputs they need, each with its sharding
  and donation; the body pruned the same way, equation by equation from the last (an
  equation none of whose results is used goes; an inner jit is pruned by this rule; any
  other equation is kept whole once one of its results is used); no used output: no
  program (None).

Partial evaluation as a program rewrite (``partial_eval_program``: the known/unknown split
and its residuals) is not written yet; AD-6 and AD-7 answer it per equation.

``tests/test_transformed_migration.py`` holds it to real JAX 0.10.2 (the jit equation
``pe.dce_jaxpr`` leaves of the same function).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .description import Jit, Program, ShardMap, Value, check_program  # noqa: F401

__all__ = ["dce_program"]


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
        if not any(results):
            continue
        if isinstance(eq, Jit) and not all(results):
            body, used_in = dce_program(eq.body, results)
            eq = dataclasses.replace(eq, operands=_keep(eq.operands, used_in),
                                     results=_keep(eq.results or (), results), body=body)
            needed |= set(eq.operands)
        elif isinstance(eq, Jit):
            body, used_in = dce_program(eq.body, results)
            eq = dataclasses.replace(eq, operands=_keep(eq.operands, used_in), body=body)
            needed |= set(eq.operands)
        else:
            check_program(all(results) or not isinstance(eq, ShardMap),
                          f"the shard_map at body[{k}] under dead-code elimination",
                          "an equation all of whose results are used (pruning a "
                          "shard_map's body is not written)", results)
            results = (True,) * len(results)
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


def dce_program(program: Program, used_outputs: Any
                ) -> tuple[Program | None, tuple[bool, ...]]:
    """Dead-code elimination keeps a jit's used outputs and the inputs they depend on, each with its sharding and donation (AD-8); returns the pruned program (None: no output used) and which inputs it keeps.

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
    if not any(used):
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
