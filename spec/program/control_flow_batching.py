"""A scan, a cond, a while loop, a remat and a custom call under vmap (issue 32), as JAX's batching rules for them rewrite them.

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

* A custom_jvp's or custom_vjp's call: its body batched as a jit's, its rules with it;
  rules read on demand (taking symbolic zeros, or nested deeper than the bridge reads up
  front) batched as the call was when AD reads them (:class:`ReadBatched`).

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
           "batch_custom_call", "batched_vjp_rules", "ReadBatched"]


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
    (summed over the batch for an unbatched input: JAX's ``process_custom_vjp_call``).
    Rules read on demand (symbolic zeros, deeper calls) are batched alike when read."""
    prefix = f"{path}.{eq.kind}."
    body, out_dims = batch_jit_body(eq.body, dims, rw.axis, prefix, prefix)
    checked = eq.checked and all(d is None for d in dims)
    rules = _batched_rules(rw, eq, dims, out_dims, prefix)
    if eq.rules_later is not None:
        rules["rules_later"] = ReadBatched(lambda: _later(rw, eq, dims, out_dims, prefix))
    rw.add(dataclasses.replace(eq, operands=tuple(numbers), results=None, body=body,
                               checked=checked, **rules), tuple(out_dims))


class ReadBatched:
    """Rules read on demand (a reader the bridge made), batched as the call holding them
    was when they are read: called as the reader; a copy is itself, and pickled it is None
    (rules not read), as the reader it wraps is."""

    __slots__ = ("read",)

    def __init__(self, read: Any) -> None:
        self.read = read

    def __call__(self, *args: Any) -> Any:
        return self.read(*args)

    def __copy__(self) -> "ReadBatched":
        return self

    def __deepcopy__(self, memo: dict) -> "ReadBatched":
        return self

    def __reduce__(self) -> tuple:
        return (_unread, ())


def _unread() -> None:
    return None


def _later(rw: BatchedBody, eq: Any, dims: tuple, out_dims: tuple, prefix: str) -> dict:
    """The rule fields of custom call ``eq`` read on demand (``rules_later``), batched."""
    fields = eq.rules_later()
    read = dataclasses.replace(eq, rules_later=None, **fields)
    return {**fields, **_batched_rules(rw, read, dims, out_dims, prefix)}


def _batched_rules(rw: BatchedBody, eq: Any, dims: tuple, out_dims: tuple, prefix: str
                   ) -> dict:
    """The rule fields of custom call ``eq`` batched (its body's results at ``out_dims``),
    a reader of rules taking symbolic zeros batching what it reads."""
    own = list(dims[eq.num_consts:])
    if isinstance(eq, CustomJvp):
        rules = {"rule": _batched_rule(rw, eq.rule, eq.rule_zeros, own + own, out_dims,
                                       f"{prefix}rule.")}
        if eq.zero_rule is not None:
            rules["zero_rule"] = ReadBatched(lambda zeros: _batched_zero_rule(
                rw, eq.zero_rule(zeros), own, zeros, out_dims, prefix))
        return rules
    rules = batched_vjp_rules(rw, eq, dims, out_dims, prefix)
    if eq.zero_rules is not None:
        rules["zero_rules"] = ReadBatched(lambda in_zeros, ct_zeros: _batched_vjp(
            rw, eq.zero_rules(in_zeros, ct_zeros), own, out_dims, ct_zeros, prefix))
    return rules


def _batched_zero_rule(rw: BatchedBody, read: Any, own: list, zeros: tuple,
                       out_dims: tuple, prefix: str) -> Any:
    """A custom_jvp's rule taking symbolic zeros, as read for the inputs ``zeros`` marks
    without a tangent (``(rule, rule_zeros, refused)``), batched: each tangent given where
    its primal is; None where it is not read or not batched as JAX batches it."""
    if read is None or read[2]:
        return read   # (not read, or refused while traced: refused as read)
    tangents = [d for d, zero in zip(own, zeros) if not zero]
    rule = _batched_rule(rw, read[0], read[1], own + tangents, out_dims,
                         f"{prefix}rule{list(zeros)}.")
    return None if rule is None else (rule, read[1], False)


def _batched_rule(rw: BatchedBody, rule: Program | None, rule_zeros: tuple, in_dims: list,
                  out_dims: tuple, prefix: str) -> Program | None:
    """A custom_jvp's rule batched, its inputs at ``in_dims``, each primal result and
    tangent moved where the body's result is (None where it is not read, or the spec does
    not batch a primitive of it)."""
    if rule is None or len(rule_zeros) != len(out_dims):
        return None
    targets = list(out_dims) + [d for d, zero in zip(out_dims, rule_zeros) if not zero]
    try:
        batched, made = _inner_body(None, rule, in_dims, rw, prefix, targets)
    except Rejection:   # (a primitive of the rule the spec does not batch)
        return None
    return batched if list(made) == targets else None


def batched_vjp_rules(rw: BatchedBody, eq: CustomVjp, dims: tuple, out_dims: tuple,
                      prefix: str) -> dict:
    """A custom_vjp's ``fwd`` and ``bwd`` batched (None, None where they are not read, or
    where the spec cannot batch them as JAX does: differentiated, the call is then by its
    primal body). ``fwd``'s primal results must come out where the body's do."""
    none = {"fwd": None, "bwd": None}
    if eq.fwd is None or eq.bwd is None:
        return none
    read = {"fwd": eq.fwd, "forwarded": eq.forwarded, "bwd": eq.bwd,
            "bwd_zeros": eq.bwd_zeros}
    made = _batched_vjp(rw, read, list(dims[eq.num_consts:]), out_dims,
                        (False,) * len(out_dims), prefix)
    return none if made is None else {"fwd": made["fwd"], "bwd": made["bwd"]}


def _batched_vjp(rw: BatchedBody, read: dict | None, own: list, out_dims: tuple,
                 ct_zeros: tuple, prefix: str) -> dict | None:
    """A custom_vjp's rules as read (``fwd``, ``forwarded``, ``bwd`` over the residuals
    and the cotangents ``ct_zeros`` does not mark symbolic zeros, ``bwd_zeros``) batched:
    ``fwd`` with the inputs at ``own``, ``bwd`` as JAX's ``batch_custom_vjp_bwd``; None
    where they are not read or not batched as JAX batches them."""
    if read is None:
        return None
    made = len(read["fwd"].outputs) - len(out_dims)
    try:
        fwd, fwd_dims = _inner_body(None, read["fwd"], own, rw, f"{prefix}fwd.",
                                    [None] * made + list(out_dims))
        if list(fwd_dims[made:]) != list(out_dims):
            return None
        fresh = iter(fwd_dims[:made])
        residuals = [own[f] if f is not None else next(fresh) for f in read["forwarded"]]
        given = [d for d, zero in zip(out_dims, ct_zeros) if not zero]
        targets = [d for d, zero in zip(own, read["bwd_zeros"]) if not zero]
        bwd = _matched_body(read["bwd"], residuals + given, targets, rw, f"{prefix}bwd.")
    except Rejection:   # (a primitive of a rule the spec does not batch)
        return None
    return {**read, "fwd": fwd, "bwd": bwd}


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
