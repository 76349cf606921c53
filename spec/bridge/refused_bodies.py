"""A call JAX refuses inside a loop's, a cond's, a remat's, a custom function's or a
shard_map's body, or a loop JAX refuses for its carry.

JAX traces the body of a ``jax.lax.scan`` and of a ``jax.checkpoint`` function as it
traces a jit's, and refuses a call inside it (a constraint that does not fit its operand,
an inner jit's shardings) before the loop or the remat is an equation. Such a body is a
level of :mod:`~shardlaw.spec.bridge.refusals`'s description as an inner jit's is: the
body as JAX traced it so far, then the call into the next level or the refused call,
described in the equation JAX would have made of it, so that ``explain_program`` walks
into it as it walks into any body and refuses at the equation's path
(``body[3].scan.body[2]``, ``body[0].remat2.body[1]``):

* a scan's body returned nothing yet, so its described equation is a
  :class:`~shardlaw.spec.program.control_flow.Scan` whose carry is read as constants (the
  loop's constants, its initial carry, then its stacked ``xs``), its results the refused
  body's stacked: the refusal inside it is checked, and no carry type is compared;
* a remat's body is a :class:`~shardlaw.spec.program.control_flow.Remat` over the
  function's arguments, its results the refused body's;
* a while loop's body is the body of a
  :class:`~shardlaw.spec.program.control_flow.While` returning the carry it was given (its
  predicate as JAX traced it, its constants the loop's first operands), a refused predicate that of a While whose predicate returns
  a bool of the description's after the refused call (its body, not traced yet, returns
  the carry); the refused one is walked first or alone, at ``while.body[1]`` or
  ``while.body[0]``;
* a ``custom_jvp`` or ``custom_vjp`` function's body is a
  :class:`~shardlaw.spec.program.control_flow.CustomJvp` or ``CustomVjp`` call of it
  (without its rules), walked as a jit;
* a cond's or a switch's branch is the only branch of a
  :class:`~shardlaw.spec.program.control_flow.Cond` over its index and operands;
* a shard_map's body is a :class:`~shardlaw.spec.program.description.ShardMap` with the
  user's mesh, manual axes and in specs, its results put out replicated (the body is
  checked before its out specs, and a description is kept only where the spec refuses at
  the refused call); a collective refused in it is described as JAX stages it
  (:mod:`~shardlaw.spec.bridge.refused_collectives`), refused by SMAP-13 or SMAP-21.

Values the body closes over (the enclosing body's values, constants) are the equation's
first operands, as JAX makes them. :func:`refused_carry` describes a whole scan JAX traced
and then refused because its body returns its carry of another type (LOOP-1).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..program.control_flow import Cond, CustomJvp, CustomVjp, Remat, Scan, While, stacked
from ..program.description import Equation, Program, ShardMap, Value

__all__ = ["body_construct", "construct_locals", "body_call", "refused_carry",
           "refused_branches", "primal", "ended", "carry_operands",
           "cond_operands", "refused_length"]

# a body's next call: (its operands' value numbers, its path) -> the equations added
Next = Callable[[tuple, str], tuple]
# where a construct's body is, after its equation's path, as explain_program names it (a
# remat's body is called as a jit is; a cond's branch as a jit in its body)
_WHERE = {"scan": "scan", "cond": "cond.body[0].jit", "switch": "cond.body[0].jit",
          "shard_map": "shard_map"}


def body_construct(frame: Any) -> str | None:
    """The kind of body whose tracing the JAX frame ``frame`` starts ("scan", "remat"),
    or None."""
    from jax._src import ad_checkpoint, shard_map
    from jax._src.interpreters import partial_eval
    from jax._src.lax.control_flow import conditionals, loops

    name, local = frame.f_code.co_name, frame.f_locals
    if frame.f_code.co_filename == conditionals.__file__ and name == "cond" and \
            "dbg_true" in local:
        return "cond"
    if frame.f_code.co_filename == conditionals.__file__ and name == "_switch_internal":
        return "switch"
    if frame.f_code.co_filename == shard_map.__file__ and name == "_shard_map_staging":
        return "shard_map"
    if frame.f_code.co_filename == loops.__file__ and name == "scan" and "xs_flat" in local:
        return "scan"
    if frame.f_code.co_filename == ad_checkpoint.__file__ and name == "fun_remat":
        return "remat"
    if frame.f_code.co_filename == partial_eval.__file__ and name in (
            "process_custom_jvp_call", "process_custom_vjp_call"):
        return name[len("process_"):-len("_call")]
    if frame.f_code.co_filename == loops.__file__ and name == "_create_jaxpr" and \
            frame.f_back is not None and frame.f_back.f_code.co_name == "while_loop":
        return "while"
    return None


def construct_locals(kind: str, frame: Any) -> dict:
    """What the frame of a construct's body (:func:`body_construct`) holds that its
    description reads: its locals, and for a while loop its initial carry, from the
    ``while_loop`` call above it."""
    local = dict(frame.f_locals)
    if kind == "while":
        local["init_val_flat"] = frame.f_back.f_locals["init_val_flat"]
    return local


def _opened(level: Any, values: list) -> tuple[Any, list]:
    """The body ``level`` traced so far, returning ``values``, its constants made its first
    inputs (a jaxpr without constants), and those constants."""
    from jax._src.interpreters import partial_eval as pe

    jaxpr, consts = level.returning([primal(v) for v in values])
    return pe.convert_constvars_jaxpr(jaxpr), list(consts)


def primal(value: Any) -> Any:
    """A value as the enclosing body holds it: an operand JAX's ``grad`` or ``jvp`` traces
    (a linearize or JVP tracer) by its primal value, over which JAX traces the call."""
    from jax._src.interpreters import ad

    while isinstance(value, (ad.JVPTracer, ad.LinearizeTracer)):
        value = value.primal
    return value


def _own_operands(kind: str, local: dict) -> list:
    """The operands the construct's call gives its body (after the closed-over ones)."""
    if kind == "scan":
        return [*local["init_flat"].vals, *local["xs_flat"].vals]
    if kind in ("cond", "switch"):
        return list(local["args"].vals)
    if kind == "shard_map":
        return list(local["args"])
    if kind == "while":
        return list(local["init_val_flat"].vals)
    if kind in ("custom_jvp", "custom_vjp"):
        return list(local["tracers"])
    return list(local["args_flat"])


def _index(pred: Any) -> Any:
    """A cond's predicate as the int32 index JAX's cond makes of it, in the predicate's
    own trace (the equation JAX adds before the cond)."""
    import numpy as np
    from jax import lax
    from jax._src import core

    trace = getattr(pred, "_trace", None)
    if trace is None:
        return np.int32(bool(pred))
    with core.set_current_trace(trace):
        return lax.convert_element_type(pred, np.int32)


def body_call(level: Any, values: list, next_call: Next, read_body: Callable[..., Program]
              ) -> tuple[list, Next]:
    """(the values of the enclosing body the construct of ``level`` takes, a function
    making its equation from their numbers and its path): its body, traced so far and
    returning ``values``, read with the equations ``next_call`` adds at its end."""
    from .program import read_type

    kind, local = level.construct
    predicate = kind == "while" and level.debug_info.traced_for == "while_cond"
    if predicate:   # (it must give a bool: the description's own, after the refused call)
        import numpy as np
        values = [*values, np.bool_(False)]
    jaxpr, consts = _opened(level, values)

    def make(operands: tuple, path: str) -> tuple[Equation, ...]:
        if kind == "while":
            return (_while(local, predicate, len(consts), operands, path, jaxpr, next_call,
                           read_body),)
        where = f"{path}.{_WHERE.get(kind, 'jit')}."
        inputs = tuple(read_type(v.aval, f"input {i} of {where[:-1]}")
                       for i, v in enumerate(jaxpr.invars))
        body = read_body(jaxpr, [], inputs, where)
        body = ended(body, next_call(body.outputs, f"{where}body[{len(body.equations)}]"))
        made = tuple(body.value_types[n] for n in body.outputs)
        if kind == "scan":
            length = int(local["length"])
            carried = len(consts) + len(local["init_flat"].vals)
            return (Scan(operands, tuple(stacked(v, length) for v in made), body=body,
                         length=length, reverse=bool(local["reverse"]), num_consts=carried,
                         num_carry=0),)
        if kind in ("cond", "switch"):
            return (Cond(operands, made, branches=(body,)),)
        if kind == "shard_map":
            return (_shard_map(local, len(consts), operands, body, made),)
        if kind in ("custom_jvp", "custom_vjp"):
            custom = CustomJvp if kind == "custom_jvp" else CustomVjp
            return (custom(operands, made, body=body, num_consts=len(consts),
                           name=str(level.debug_info.func_name)),)
        cse = local.get("prevent_cse", True)
        return (Remat(operands, made, body=body, name="checkpoint",
                      prevent_cse=cse if isinstance(cse, bool) else True),)
    index = [_index(local["pred"])] if kind == "cond" else [local["index"]] \
        if kind == "switch" else []
    return index + _predicate_consts(local, kind, predicate) + consts + \
        _own_operands(kind, local), make


def _predicate_consts(local: dict, kind: str, predicate: bool) -> list:
    """The constants of a while loop's predicate, traced before JAX refused its body: the
    loop's first operands, as JAX makes them (values of the enclosing body among them)."""
    if kind != "while" or predicate:
        return []
    return list(local["cond_jaxpr"].consts)


def _while(local: dict, predicate: bool, consts: int, operands: tuple, path: str,
           jaxpr: Any, next_call: Next, read_body: Callable[..., Program]) -> While:
    """The while loop whose predicate (``predicate``) or body JAX refused while tracing it,
    ``jaxpr`` that one as traced so far, its ``consts`` constants its first inputs: the
    refused one ends with the call into the next level, and returns what a while's must
    (its body the carry it was given, its predicate a bool of the description's); the
    other one as JAX traced it (the predicate) or not yet (the body: its carry as given)."""
    from jax._src.interpreters.partial_eval import convert_constvars_jaxpr

    from .program import read_type

    where = f"{path}.while.body[{0 if predicate else 1}].jit."
    inputs = tuple(read_type(v.aval, f"input {i} of {where[:-1]}")
                   for i, v in enumerate(jaxpr.invars))
    body = read_body(jaxpr, [], inputs, where)
    refused = ended(body, next_call(body.outputs[:-1] if predicate else body.outputs,
                                    f"{where}body[{len(body.equations)}]"))
    carry = inputs[consts:]
    if predicate:   # (its last result the bool it was given to return)
        refused = dataclasses.replace(refused, outputs=body.outputs[-1:], out_shardings=())
        other = Program(carry, (), tuple(range(len(carry))))
        return While(operands, carry, cond=refused, body_fun=other, cond_consts=consts,
                     body_consts=0)
    refused = dataclasses.replace(refused, outputs=tuple(range(consts, len(inputs))),
                                  out_shardings=())
    closed = local["cond_jaxpr"]   # (its constants its first inputs, the loop's operands)
    opened = convert_constvars_jaxpr(closed.jaxpr)
    cond = read_body(opened, [], tuple(
        read_type(v.aval, f"input {i} of {path}.while.body[0].jit")
        for i, v in enumerate(opened.invars)), f"{path}.while.body[0].jit.")
    return While(operands, carry, cond=cond, body_fun=refused,
                 cond_consts=len(closed.consts), body_consts=consts)


def ended(body: Program, added: tuple) -> Program:
    """``body`` with the equations ``added`` at its end, returning what the last returns."""
    import dataclasses

    grown = dataclasses.replace(body, equations=body.equations + tuple(added))
    results = tuple(range(len(body.value_types), len(grown.value_types)))
    return dataclasses.replace(grown, outputs=results, out_shardings=())


def carry_operands(local: dict) -> list:
    """The operands of a scan JAX traced and refused for its carry: its body's constants,
    its initial carry, its ``xs``."""
    return [*local["consts"], *local["init_flat"].vals, *local["xs_flat"].vals]


def refused_carry(local: dict, operands: tuple, path: str,
                  read_body: Callable[..., Program]) -> tuple[Equation, ...]:
    """The scan whose frame's locals are ``local``, its body as JAX traced it (its
    constants its first inputs), over the values numbered ``operands``: LOOP-1 refuses it
    where its body returns its carry of another type."""
    from .program import read_type

    opened = local["jaxpr"].jaxpr   # JAX's body, its constants already its first inputs
    where = f"{path}.scan."
    inputs = tuple(read_type(v.aval, f"input {i} of {path}.scan")
                   for i, v in enumerate(opened.invars))
    body = read_body(opened, list(local["jaxpr"].consts), inputs, where)
    length, carry = int(local["length"]), len(local["init_flat"].vals)
    made = [body.value_types[n] for n in body.outputs]
    results = tuple(made[:carry]) + tuple(stacked(v, length) for v in made[carry:])
    return (Scan(operands, results, body=body, length=length,
                 reverse=bool(local["reverse"]), num_consts=len(local["consts"]),
                 num_carry=carry),)


def cond_operands(local: dict) -> list:
    """The operands of a cond JAX traced and refused for its branches' types: its index,
    its branches' constants, its operands."""
    index = local["index"] if "jaxprs" in local else _index(local["pred"])
    return [index, *local["consts"], *local["args"].vals]


def refused_branches(local: dict, operands: tuple, path: str,
                     read_body: Callable[..., Program]) -> tuple[Equation, ...]:
    """The cond or switch whose frame's locals are ``local``, its branches as JAX traced them
    (``false_fun``'s first, as JAX orders them), over the values numbered ``operands``:
    LOOP-1 refuses it where they return results of other types."""
    from .program import read_type

    branches = []
    traced = local["jaxprs"] if "jaxprs" in local else (local["false_jaxpr"],
                                                         local["true_jaxpr"])
    for i, closed in enumerate(traced):
        where = f"{path}.cond.branches[{i}]."
        inputs = tuple(read_type(v.aval, f"input {k} of {where[:-1]}")
                       for k, v in enumerate(closed.jaxpr.invars))
        branches.append(read_body(closed.jaxpr, list(closed.consts), inputs, where))
    first = branches[0]
    return (Cond(operands, tuple(first.value_types[n] for n in first.outputs),
                 branches=tuple(branches)),)


def refused_length(local: dict, path: str) -> tuple[Equation, ...]:
    """The scan call whose frame's locals are ``local``, at ``path``, refused by LOOP-5
    where JAX cannot read its length (no ``xs`` and no ``length``, ``xs`` that disagree or
    split their leading dimension in their type); nothing where it can."""
    import jax

    from ..core.rules import located, staged
    from ..program.scan_length import scan_length
    from .program import read_type

    xs = tuple(read_type(jax.typeof(x), f"xs {i} of the scan at {path}")
               for i, x in enumerate(local["xs_flat"].vals))
    length = local["length"]
    with staged("trace"), located(path):
        scan_length(xs, None if length is None else int(length))
    return ()


def _shard_map(local: dict, consts: int, operands: tuple, body: Program, made: tuple
               ) -> ShardMap:
    """A shard_map whose body JAX refused while tracing it: its mesh, manual axes and in
    specs as the user gave them (the closed-over values first, replicated, as JAX stages
    them), each result of the refused body put out replicated (their out specs are not
    reached: the body is checked first)."""
    from ..core.values import PartitionSpec
    from .convert import from_jax

    outs = tuple(Value.typed(v.shape, v.dtype, weak_type=v.weak_type) for v in made)
    return ShardMap(operands, outs, body=body, mesh=from_jax(local["mesh"]),
                    in_specs=(PartitionSpec(),) * consts + tuple(
                        from_jax(s) for s in local["in_specs"]),
                    out_specs=(PartitionSpec(),) * len(made),
                    manual_axes=frozenset(local["newly_manual_axes"]),
                    check_vma=bool(local["check_vma"]))
