"""A primitive JAX refuses inside a body its gradient transposes: a jit's, a remat's, a
cond's, a scan's.

JAX's backward pass transposes an inner ``jax.jit``, a ``jax.checkpoint`` function, a
``lax.cond``'s branches and a ``lax.scan``'s body by tracing a new body (the transposed
jit, remat, branch or scan body), and
the primitives their transpose rules bind are typed there: a ``dot_general`` contracting
the cotangent with a residual over dimensions both split over Explicit axes, asked for the
transposed operand's type where that type is over no mesh, is refused while that body is
traced (PROG-7). Such a body is a level of :mod:`~shardlaw.spec.bridge.refusals`'s
description as a forward body is (:mod:`~shardlaw.spec.bridge.refused_bodies`): the
transposed body as JAX traced it so far (the recomputed primal half of a remat, then the
backward pass up to the refused primitive), then the call into the next level or the
refused primitive, described in the equation JAX would have made of it:

* a transposed jit is a :class:`~shardlaw.spec.program.description.Jit` over the residuals
  and the cotangents it receives, with the in_shardings JAX gives it (the jit's own for its
  residuals, its out_shardings for the cotangents), staged by the transpose (unchecked);
* a transposed remat is a :class:`~shardlaw.spec.program.control_flow.Remat` over its
  nonlinear operands and the cotangents it receives;
* a transposed cond is a :class:`~shardlaw.spec.program.control_flow.Cond` over its index,
  its residuals and its cotangents, the branch JAX was transposing its only branch;
* a transposed scan is a :class:`~shardlaw.spec.program.control_flow.Scan` run the other
  way, over its residuals not scanned, the cotangents it carries (the constants' and the
  carry's), then the stacked cotangents of the results and the scanned residuals, as JAX
  binds them; its body returned nothing yet, so the carried cotangents are read as
  constants and its results are the refused body's stacked, as for a forward scan's body
  (:mod:`~shardlaw.spec.bridge.refused_bodies`).

Values the body closes over are the equation's first operands, as JAX makes them.
"""

from __future__ import annotations

from typing import Any, Callable

from ..program.control_flow import Cond, Remat, Scan, stacked
from ..program.description import Equation, Jit, Program
from .refused_bodies import ended, primal

__all__ = ["transposed_construct", "transposed_call", "TRANSPOSED", "transposed_level"]

# the kinds of transposed body this module describes
TRANSPOSED = ("transposed_jit", "transposed_remat", "transposed_cond", "transposed_scan")
# a body's next call: (its operands' value numbers, its path) -> the equations added
Next = Callable[[tuple, str], tuple]
# where a transposed body is, after its equation's path, as explain_program names it
_WHERE = {"transposed_cond": "cond.body[0].jit", "transposed_scan": "scan"}


def transposed_construct(frame: Any) -> str | None:
    """The kind of transposed body whose tracing the JAX frame ``frame`` starts, or None."""
    from jax._src import ad_checkpoint, pjit
    from jax._src.lax.control_flow import conditionals, loops

    name, file = frame.f_code.co_name, frame.f_code.co_filename
    if file == pjit.__file__ and name == "_pjit_transpose_fancy":
        return "transposed_jit"
    if file == ad_checkpoint.__file__ and name == "remat_transpose":
        return "transposed_remat"
    if file == conditionals.__file__ and name == "_cond_transpose_fancy":
        return "transposed_cond"
    if file == loops.__file__ and name == "_scan_transpose_fancy":
        return "transposed_scan"
    return None


def transposed_level(frame: Any) -> tuple[Any, Any] | None:
    """(the trace, the debug info) of the body that ``frame`` traces where it is JAX's
    ``trace_to_jaxpr_dynamic`` (a transposed jit's body is traced so), else None."""
    local = frame.f_locals
    if frame.f_code.co_name != "trace_to_jaxpr_dynamic" or "trace" not in local:
        return None
    return local["trace"], local["fun"].debug_info


def _transposed_scan(local: dict, operands: tuple, body: Program, made: tuple) -> Scan:
    """The scan JAX binds for a scan's transpose, run the other way, its body traced up to
    the refused call: every operand before the stacked ones (the values the body closes
    over, the residuals not scanned, the carried cotangents) read as a constant."""
    length = int(local["length"])
    scanned = len(local["ext_avals"])
    return Scan(operands, tuple(stacked(v, length) for v in made), body=body, length=length,
                reverse=not bool(local["reverse"]), num_consts=len(operands) - scanned,
                num_carry=0)


def _operands(kind: str, local: dict) -> list:
    """The values of the enclosing body the transposed call takes (after those its body
    closes over): the residuals and the cotangents, as JAX binds them."""
    import jax

    if kind == "transposed_remat":
        return jax.tree_util.tree_leaves((local["args_"], local["out_cts"]))
    if kind == "transposed_scan":
        if any(local["lin_refs"]):   # (a ref's accumulator JAX unboxes: not described)
            raise TypeError("a transposed scan accumulating into a ref")
        return list(local["trans_in"])
    return list(local["in_flat"])


def _in_shardings(local: dict, closed: int) -> tuple:
    """A transposed jit's in_shardings as JAX gives them: unspecified for the values its
    body closes over, the jit's own for its residuals, its out_shardings for the
    cotangents it receives."""
    from jax._src.interpreters import ad

    from .program import read_sharding

    unspecified = [s for s in local["in_shardings"] if type(s).__name__ == "UnspecifiedValue"]
    own = [s for x, s in zip(local["args"], local["in_shardings"])
           if not isinstance(x, (ad.ValAccum, ad.NullAccum))] + \
        [s for x, s in zip(local["cts_in"], local["out_shardings"])
         if not isinstance(x, ad.Zero)]
    if closed and not unspecified:
        raise TypeError("a transposed jit closing over values, with no unspecified sharding")
    given = unspecified[:1] * closed + own
    return tuple(read_sharding(s, "in_shardings of a transposed jit") for s in given)


def transposed_call(level: Any, values: list, next_call: Next,
                    read_body: Callable[..., Program]) -> tuple[list, Next]:
    """(the values of the enclosing body the transposed call of ``level`` takes, a
    function making its equation from their numbers and its path): its body, traced so
    far and returning ``values``, read with the equations ``next_call`` adds at its end."""
    from jax._src.interpreters import partial_eval as pe

    from .program import read_type

    kind, local = level.construct
    traced, consts = level.returning([primal(v) for v in values])
    jaxpr, consts = pe.convert_constvars_jaxpr(traced), list(consts)
    own = _operands(kind, local)

    def make(operands: tuple, path: str) -> tuple[Equation, ...]:
        where = f"{path}.{_WHERE.get(kind, 'jit')}."
        inputs = tuple(read_type(v.aval, f"input {i} of {where[:-1]}")
                       for i, v in enumerate(jaxpr.invars))
        options = {"in_shardings": _in_shardings(local, len(consts))} \
            if kind == "transposed_jit" else {}
        body = read_body(jaxpr, [], inputs, where, **options)
        body = ended(body, next_call(body.outputs, f"{where}body[{len(body.equations)}]"))
        made = tuple(body.value_types[n] for n in body.outputs)
        if kind == "transposed_cond":
            return (Cond(operands, made, branches=(body,)),)
        if kind == "transposed_scan":
            return (_transposed_scan(local, operands, body, made),)
        if kind == "transposed_remat":
            return (Remat(operands, made, body=body, name="checkpoint", checked=False,
                          differentiated=True),)
        return (Jit(operands, made, body=body, name=str(local.get("name", "jit")),
                    checked=False),)
    index = [local["index"]] if kind == "transposed_cond" else []
    return index + consts + own, make
