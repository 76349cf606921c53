"""A scan and a cond under vmap (issue 32), as JAX's batching rules for them rewrite them.

* A scan: its batched constants moved to axis 0, its carry batched at axis 0 wherever the
  body makes it batched (an unbatched initial carry broadcast to the batch; found to a
  fixed point, as JAX does), its batched ``xs`` at axis 1 (the body's slice at 0); its body
  batched once, each carry and batched slice of ``ys`` it returns moved to axis 0; its
  results the carry at 0 and the batched ``ys`` at 1.
* A cond whose index is not batched: one cond over the batched operands, each branch
  batched alike, every result batched (at axis 0) where one branch's is.
* A cond whose index is batched: every branch run on the batched operands (each a jit
  without options here, inlined by JAX: the same shardings), then one ``select_n`` per
  result by the index, as JAX turns it into select.

* A remat: its body batched where its operands are, each batched result moved to axis 0
  in it (JAX's ``remat_vmap``; a jit's, and a custom-derivative call's, results stay
  where the body leaves them).

* A while loop (JAX's ``_while_loop_batching_rule``): its carry batched wherever the
  body makes it batched (an unbatched initial carry broadcast; a fixed point); then the
  predicate batched on that carry. A batched predicate batches every carry at axis 0, the
  predicate giving one bool per example (JAX's lowering runs the loop while any is true
  and selects, in the body, the examples whose predicate holds); an unbatched one leaves
  the carry batched after the predicate's own dimensions. Constants stay where they are
  batched.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Rejection
from .batching_rules import (
    PLACES, BatchedBody, batch_body, batch_entry, batch_jit_body, batch_typed, broadcast_equation,
    inserted, moved_axis, rearranged, transpose_equation,
)
from .control_flow import Cond, CustomJvp, CustomVjp, Scan, While
from .description import Jit, Opaque, Program
from .primitives import BATCHING

__all__ = ["batch_scan", "batch_cond", "batch_call_at_front", "batch_while",
           "batch_custom_call", "batched_vjp_rules"]


def _moved_to(rw: BatchedBody, n: int, source: int | None, target: int) -> int:
    """Value ``n`` (a new number) batched at ``target``: moved from ``source``, or
    broadcast to the batch where it is not batched; its new number."""
    if source == target:
        return n
    value = rw.types[n]
    if source is None:
        shape = inserted(value.shape, target, rw.axis.size)
        kept = tuple(i for i in range(len(shape)) if i != target)
        typed = batch_typed(value, target, batch_entry(rw.axis))   # JAX's batching.broadcast
        rw.add(broadcast_equation(n, value, shape, kept, typed), (target,))
    else:
        rw.add(transpose_equation(n, value, moved_axis(len(value.shape), source, target)),
               (target,))
    return len(rw.types) - 1


def _inner_body(eq: Any, body: Program, dims: list, rw: BatchedBody, prefix: str,
                out_targets: list) -> tuple[Program, list]:
    """``body`` batched with its inputs at ``dims``, each output moved to its target
    (None: left where it is); the new body and the outputs' batch axes."""
    inner = batch_body(body, tuple(dims), rw.axis, prefix)
    outputs = []
    for n, target in zip(body.outputs, out_targets):
        new = inner.number[n]
        source = inner.dims[new]
        outputs.append(new if target is None else _moved_to(inner, new, source, target))
    count = len(body.inputs)
    program = Program(tuple(inner.types[:count]), tuple(inner.equations), tuple(outputs),
                      body.consts)
    return program, [inner.dims[n] for n in outputs]


def _body_dims(body: Program, dims: list, rw: BatchedBody, prefix: str) -> list:
    """Where ``body``'s outputs are batched, its inputs batched at ``dims``."""
    inner = batch_body(body, tuple(dims), rw.axis, prefix)
    return [inner.dims[inner.number[n]] for n in body.outputs]


@BATCHING.register("scan")
def batch_scan(rw: BatchedBody, eq: Scan, numbers: tuple, dims: tuple, path: str) -> None:
    """A scan under vmap (module docstring)."""
    c, k, count = eq.num_consts, eq.num_carry, len(eq.body.inputs)
    prefix = f"{path}.scan."
    carry = [d is not None for d in dims[c:c + k]]
    while True:
        inside = [0 if d is not None else None for d in dims[:c]] + \
            [0 if b else None for b in carry] + \
            [0 if d is not None else None for d in dims[c + k:]]
        try:
            made = _body_dims(eq.body, inside, rw, prefix)
        except Rejection:
            if all(carry):
                raise
            # (an equation the spec batches only with all its operands batched, where
            # JAX broadcasts: the carry taken batched, as the body then makes it)
            carry = [True] * k
            continue
        grown = [b or made[i] is not None for i, b in enumerate(carry)]
        if grown == carry:
            break
        carry = grown
    ys = [d is not None for d in made[k:]]
    targets = [0 if b else None for b in carry] + [0 if b else None for b in ys]
    body, _ = _inner_body(eq, eq.body, inside, rw, prefix, targets)
    operands = []
    for i, (n, d) in enumerate(zip(numbers, dims)):
        target = 1 if i >= c + k else 0
        batched = carry[i - c] if c <= i < c + k else d is not None
        operands.append(_moved_to(rw, n, d, target) if batched else n)
    new = Scan(tuple(operands), body=body, length=eq.length, reverse=eq.reverse,
               num_consts=c, num_carry=k)
    rw.add(new, tuple(0 if b else None for b in carry) + tuple(1 if b else None for b in ys))


@BATCHING.register("cond")
def batch_cond(rw: BatchedBody, eq: Cond, numbers: tuple, dims: tuple, path: str) -> None:
    """A cond under vmap (module docstring)."""
    ops, op_dims = numbers[1:], dims[1:]
    inside = [0 if d is not None else None for d in op_dims]
    moved = [_moved_to(rw, n, d, 0) if d is not None else n for n, d in zip(ops, op_dims)]
    prefix = f"{path}.cond."
    if dims[0] is not None:
        _as_select(rw, eq, numbers[0], dims[0], moved, inside, prefix)
        return
    outs = [_body_dims(b, inside, rw, f"{prefix}branches[{i}].")
            for i, b in enumerate(eq.branches)]
    batched = [any(o[j] is not None for o in outs) for j in range(len(outs[0]))]
    targets = [0 if b else None for b in batched]
    branches = tuple(_inner_body(eq, b, inside, rw, f"{prefix}branches[{i}].", targets)[0]
                     for i, b in enumerate(eq.branches))
    rw.add(Cond((numbers[0], *moved), branches=branches), tuple(targets))


def _as_select(rw: BatchedBody, eq: Cond, index: int, dim: int, moved: list, inside: list,
               prefix: str) -> None:
    """A cond whose index is batched: every branch on the operands, then a select_n of
    each result by the index (batched at axis 0); a cond of one branch (what a description
    of a call refused in a branch holds) its branch's results."""
    results = len(eq.results)
    index = _moved_to(rw, index, dim, 0)
    outs = []
    for i, branch in enumerate(eq.branches):
        body, _ = _inner_body(eq, branch, inside, rw, f"{prefix}branches[{i}].",
                              [0] * results)
        rw.add(Jit(tuple(moved), body=body, name=f"branches[{i}]", checked=False),
               (0,) * results)
        places = PLACES.get()
        if places is not None:   # (where the branch now is: a jit of its own)
            places[f"{prefix}branches[{i}]"] = len(rw.equations) - 1
        outs.append(list(range(len(rw.types) - results, len(rw.types))))
    if len(outs) == 1:   # (a cond of one branch, the refused one described: its results)
        return
    for j in range(results):
        cases = [o[j] for o in outs]
        # (typed as select_n's rule types it: as the first case typed over a mesh)
        value = next((rw.types[c] for c in cases if rw.types[c].mesh is not None),
                     rw.types[cases[0]])
        which = index
        if len(rw.types[index].shape) != len(value.shape):   # the index broadcast to it
            rw.add(broadcast_equation(index, rw.types[index], value.shape, (0,)), (0,))
            which = len(rw.types) - 1
        rw.add(Opaque((which, *cases), (value.type,), primitive="select_n"), (0,))
    # (the cond's results are the select_n's: the last ``results`` values)


@BATCHING.register("at_front")
def batch_call_at_front(rw: BatchedBody, eq: Jit, numbers: tuple, dims: tuple, path: str
                        ) -> None:
    """A remat under vmap (module docstring)."""
    made = _body_dims(eq.body, list(dims), rw, f"{path}.{eq.kind}.")
    targets = [0 if d is not None else None for d in made]
    body, _ = _inner_body(eq, eq.body, list(dims), rw, f"{path}.{eq.kind}.", targets)
    rw.add(dataclasses.replace(eq, operands=tuple(numbers), results=None, body=body),
           tuple(targets))


@BATCHING.register("while")
def batch_while(rw: BatchedBody, eq: While, numbers: tuple, dims: tuple, path: str) -> None:
    """A while loop under vmap (module docstring)."""
    cc, bc = eq.cond_consts, eq.body_consts
    cond_dims, body_dims, init_dims = dims[:cc], dims[cc:cc + bc], dims[cc + bc:]
    prefix = f"{path}.while."
    carry = [d is not None for d in init_dims]
    while True:
        made = _body_dims(eq.body_fun, list(body_dims) + [0 if b else None for b in carry],
                          rw, f"{prefix}body[1].jit.")
        grown = [b or m is not None for b, m in zip(carry, made)]
        if grown == carry:
            break
        carry = grown
    (pred,) = _body_dims(eq.cond, list(cond_dims) + [0 if b else None for b in carry], rw,
                         f"{prefix}body[0].jit.")
    if pred is not None:
        at = [0] * len(carry)
        pred_target = 0
    else:
        rank = len(eq.cond.value_types[eq.cond.outputs[0]].shape)
        at = [rank if b else None for b in carry]
        pred_target = None
    body, _ = _inner_body(eq, eq.body_fun, list(body_dims) + at, rw, f"{prefix}body[1].jit.",
                          at)
    cond, _ = _inner_body(eq, eq.cond, list(cond_dims) + at, rw, f"{prefix}body[0].jit.",
                          [pred_target])
    init = [n if target is None else _moved_to(rw, n, d, target)
            for n, d, target in zip(numbers[cc + bc:], init_dims, at)]
    rw.add(While(tuple(numbers[:cc + bc]) + tuple(init), cond=cond, body_fun=body,
                 cond_consts=cc, body_consts=bc), tuple(at))


@BATCHING.register("custom_call")
def batch_custom_call(rw: BatchedBody, eq: Jit, numbers: tuple, dims: tuple, path: str
                      ) -> None:
    """A custom-derivative call under vmap: its body batched as a jit's is; a custom_jvp's
    rule batched with each tangent where its primal is, its results moved where the
    body's are (JAX's ``batch_custom_jvp_subtrace``); a custom_vjp's ``fwd`` batched
    with its body, its ``bwd`` with the residuals where ``fwd`` batched them and each
    cotangent where its result is, each input's cotangent moved where the input is
    (summed over the batch for an unbatched input: JAX's ``process_custom_vjp_call``)."""
    prefix = f"{path}.{eq.kind}."
    body, out_dims = batch_jit_body(eq.body, dims, rw.axis, prefix, prefix)
    checked = eq.checked and all(d is None for d in dims)
    if isinstance(eq, CustomJvp):
        rules = {"rule": _batched_rule(rw, eq, dims, out_dims, f"{prefix}rule.")}
    else:
        rules = batched_vjp_rules(rw, eq, dims, out_dims, prefix)
    rw.add(dataclasses.replace(eq, operands=tuple(numbers), results=None, body=body,
                               checked=checked, **rules), tuple(out_dims))


def _batched_rule(rw: BatchedBody, eq: CustomJvp, dims: tuple, out_dims: tuple,
                  prefix: str) -> Program | None:
    """A custom_jvp's rule batched (None where it is not read, or batches otherwise than
    its body)."""
    if eq.rule is None or len(eq.rule_zeros) != len(out_dims):
        return None
    own = list(dims[eq.num_consts:])
    targets = list(out_dims) + [d for d, zero in zip(out_dims, eq.rule_zeros) if not zero]
    try:
        rule, made = _inner_body(eq, eq.rule, own + own, rw, prefix, targets)
    except Rejection:   # (a primitive of the rule the spec does not batch)
        return None
    return rule if list(made) == targets else None


def batched_vjp_rules(rw: BatchedBody, eq: CustomVjp, dims: tuple, out_dims: tuple,
                      prefix: str) -> dict:
    """A custom_vjp's ``fwd`` and ``bwd`` batched (None, None where they are not read, or
    where the spec cannot batch them as JAX does: differentiated, the call is then by its
    primal body). ``fwd``'s primal results must come out where the body's do."""
    none = {"fwd": None, "bwd": None}
    if eq.fwd is None or eq.bwd is None:
        return none
    own = list(dims[eq.num_consts:])
    made = len(eq.fwd.outputs) - len(eq.body.outputs)
    try:
        fwd, fwd_dims = _inner_body(eq, eq.fwd, own, rw, f"{prefix}fwd.",
                                    [None] * made + list(out_dims))
        if list(fwd_dims[made:]) != list(out_dims):
            return none
        fresh = iter(fwd_dims[:made])
        residuals = [own[f] if f is not None else next(fresh) for f in eq.forwarded]
        targets = [d for d, zero in zip(own, eq.bwd_zeros) if not zero]
        bwd = _matched_body(eq.bwd, residuals + list(out_dims), targets, rw, f"{prefix}bwd.")
    except Rejection:   # (a primitive of a rule the spec does not batch)
        return none
    return {"fwd": fwd, "bwd": bwd}


def _matched_body(body: Program, dims: list, targets: list, rw: BatchedBody, prefix: str
                  ) -> Program:
    """``body`` batched with its inputs at ``dims``, each output moved to its target, or
    summed over the batch where its target is None (JAX's ``_match_axes_and_sum``)."""
    inner = batch_body(body, tuple(dims), rw.axis, prefix)
    outputs = []
    for n, target in zip(body.outputs, targets):
        new = inner.number[n]
        source = inner.dims[new]
        if source is not None and target is None:
            new = _summed(inner, new, source)
        elif target is not None:
            new = _moved_to(inner, new, source, target)
        outputs.append(new)
    return Program(tuple(inner.types[:len(body.inputs)]), tuple(inner.equations),
                   tuple(outputs), body.consts)


def _summed(rw: BatchedBody, n: int, d: int) -> int:
    """A reduce_sum of value ``n`` over its batch axis ``d``: its new number."""
    value = rw.types[n]
    kept = tuple(i for i in range(len(value.shape)) if i != d)
    result = dataclasses.replace(value.type, shape=tuple(value.shape[i] for i in kept),
                                 spec=rearranged(value.spec, kept))
    rw.add(Opaque((n,), (result,), primitive="reduce_sum",
                  params=(("axes", (d,)), ("out_sharding", None))), (None,))
    return len(rw.types) - 1
