"""What JAX refuses while tracing, described up to the refused call.

Where ``jax.jit`` refuses a call inside the body while it traces the function — a constraint
whose sharding does not fit its operand (WSC-4, WSC-5), a ``device_put`` or a
``jax.sharding.reshard`` whose sharding does not place its operand (ARG-4), an inner jit
whose shardings do not fit its operands or its results (FIT-1), a ``jax.shard_map`` whose
specs do not fit its mesh, its arguments or its body's results (SMAP-1, SMAP-3, SMAP-7,
SMAP-8, SMAP-11, SMAP-17; the call described by
:mod:`~shardlaw.spec.bridge.refused_shard_map`), a collective in a shard_map's body over
an axis the body may not use or that does not divide its operand (SMAP-13, SMAP-21;
described by
:mod:`~shardlaw.spec.bridge.refused_collectives`), a primitive JAX cannot type over Explicit axes (a ``dot_general``, PROG-7; an
elementwise operation or a ``select_n``, PROG-8; a resized or scanned split dimension,
PROG-9, PROG-10; a reshape or a gather, PROG-12, PROG-13; a sort, PROG-14; described by
:mod:`~shardlaw.spec.bridge.refused_primitives`), a primitive of a shard_map's body bound
to a value typed over another mesh than the body's (SMAP-29; one refused where JAX binds
it, before staging it, located by :mod:`~shardlaw.spec.bridge.refused_meshes`) —
:func:`describe_refused` still describes the program: the equations JAX traced before the
call, read from JAX's own trace as it stood when it refused, then the refused call described
from the user's values (its operands and the shardings it was given), its results the
program's. A call inside an inner jit's body is described inside that jit, whose body ends
with it, and one inside a scan's, a while loop's, a cond's, a remat's, a custom
function's or a shard_map's body inside that construct
(:mod:`~shardlaw.spec.bridge.refused_bodies`, which also describes a scan or a cond JAX
refuses for its carry's or its branches' types, LOOP-1), and one inside the body JAX's
backward pass traces for a jit, a remat, a cond or a scan inside that transposed construct
(:mod:`~shardlaw.spec.bridge.refused_transposes`). A gradient whose backward pass JAX
refuses for a cotangent's type is refused by the spec's own rewrite of it (AD-13,
:mod:`~shardlaw.spec.bridge.refused_gradients`). An inner jit JAX traced under
``grad`` or ``jvp`` is described over the primal values of its operands. Where the refused
jit is the function's own (its in_shardings or out_shardings do not fit the arguments or the
results: FIT-1 at ``args[0]``, ``result[0]``), the program is that jit's body, read with the
options it was given. ``explain_program`` of the program refuses by the spec's rule, at the
trace stage, at the equation's path (``body[2]``, ``body[1].jit.body[0]``,
``body[0].jit.in_shardings[0]``).

The call is located from the frames JAX's error passed through (its traceback unfiltered):
the jit, scan, while, cond, switch, remat, custom-function and shard_map bodies JAX was
tracing, outermost first, and the call in the innermost; a call under a ``vmap`` called
in a body (one, two, or one with ``spmd_axis_name``) is described as vmap's batching
would stage it (:mod:`~shardlaw.spec.bridge.refused_under_vmap`, which also locates a
call JAX refused inside vmap's batching rule for it). A call in a
``custom_jvp``'s rule, which JAX traces only under AD, is described inside the rule when
the bridge reads it (:func:`describe_refused_rule`), and the ``jax.grad`` or ``jax.jvp``
that traced it refused by the spec's rewrite
(:func:`~shardlaw.spec.bridge.refused_gradients.refuse_in_rule`). Where it cannot be
located (a refusal of another kind), or
the spec does not refuse the described program at the trace stage with JAX's class, there is
no description and JAX's error stands.
"""

from __future__ import annotations

import dataclasses
import traceback
from typing import Any, Callable

from ..core.values import UNCONSTRAINED
from ..program.description import DevicePut, Jit, Program, Reshard, ShardingConstraint
from .refused_bodies import ended, primal
from .refused_collectives import COLLECTIVE_CALLS, collective_operands, refused_collective
from .refused_gradients import gradient_frame, refuse_gradient, refuse_in_rule
from .refused_meshes import bind_frame
from .refused_primitives import (
    forwarded_frame, primitive_frame, primitive_operands, refused_primitive,
)
from .refused_transposes import (
    TRANSPOSED, transposed_call, transposed_construct, transposed_level,
)
from .refused_under_vmap import (
    batched_out_specs, bound_call, bound_call_frame, in_batching_rule,
)

__all__ = ["describe_refused", "describe_refused_rule", "calls_one_jit", "frame_options"]

# The kinds of refused call described, by the JAX function (file role, name) that makes it.
_CALLS = {("pjit", "with_sharding_constraint"): "constraint", ("api", "device_put"): "device_put",
          ("pjit", "reshard"): "reshard", ("pjit", "_process_in_axis_resources"): "jit_in",
          ("pjit", "_check_and_canonicalize_out_shardings"): "jit_out",
          **{("parallel", name): "collective" for name in COLLECTIVE_CALLS}}


# The checks JAX makes of a construct it traced (its carry, its length, its branches), by the
# JAX function that makes them: the kind of refused call each is described as.
_CONSTRUCT_CHECKS = {("loops", "_check_carry_type"): "scan_carry",
                     ("loops", "_infer_scan_length"): "scan_length",
                     ("conds", "_check_branch_outputs"): "cond_branches"}


def _files() -> dict[str, str]:
    """The JAX source files whose frames locate a refusal, by role."""
    from jax._src import api, core, pjit, shard_map
    from jax._src.interpreters import batching, partial_eval
    from jax._src.lax import parallel
    from jax._src.lax.control_flow import conditionals, loops

    import os

    import jax

    return {"pe": partial_eval.__file__, "pjit": pjit.__file__, "api": api.__file__,
            "smap": shard_map.__file__, "core": core.__file__,
            "loops": loops.__file__, "conds": conditionals.__file__,
            "parallel": parallel.__file__, "batching": batching.__file__,
            "jax": os.path.dirname(jax.__file__)}


@dataclasses.dataclass
class _Level:
    """A body JAX was tracing: its trace (the body so far), the names JAX gave it, and
    the locals of the jit frame that traced it (its options, its operands) or, for a
    scan's or a remat's body, the construct's kind and the locals of its frame."""

    trace: Any
    debug_info: Any
    jit: dict | None
    construct: tuple[str, dict] | None = None   # a loop's or remat's body: (kind, locals)

    def equations(self) -> int:
        return len(self.trace.frame.tracing_eqns)

    def returning(self, values: list) -> tuple[Any, list]:
        """(the body traced so far, returning ``values``; its constants)."""
        from jax._src import source_info_util
        from jax._src.lax.lax import asarray

        info = source_info_util.current()
        # (a Python scalar, a loop's initial carry, as the array JAX makes of it)
        outs = [self.trace.to_jaxpr_tracer(v if hasattr(v, "aval") else asarray(v), info)
                for v in values]
        names = self.debug_info._replace(result_paths=("",) * len(outs))
        return self.trace.to_jaxpr(outs, names, info)


@dataclasses.dataclass
class _Refused:
    """The refused call: its kind, the locals of the JAX frame that refused it and, for an
    inner jit, the locals of that jit's frame (for a shard_map, of its staging where JAX
    traced the body before refusing; else None)."""

    kind: str
    call: dict
    jit: dict | None
    placed: list[str] = dataclasses.field(default_factory=list)   # its equations' paths
    batched: bool = False   # refused by vmap's batching rule for it, past JAX's own checks

    def refuses_at(self, path: str | None) -> bool:
        """Whether a refusal at ``path`` is of the equations described for the call (or
        inside them), where it was placed in the program."""
        return path is not None and any(path == p or path.startswith((p + ".", p + "["))
                                        for p in self.placed)


def _locate(error: BaseException, rule: bool = False
            ) -> tuple[list[_Level], _Refused] | None:
    """The jit bodies JAX was tracing when it raised ``error`` (outermost first) and the
    call it refused; None where the call is not of a kind described or sits in a body of
    another kind (a shard_map's, a transformation's inside the body); ``rule``: raised
    tracing a custom_jvp's rule (its ``jvp_jaxpr_fun``), the outermost body."""
    from .refused_bodies import construct_locals

    files = _files()
    roles = {path: role for role, path in files.items() if role != "jax"}
    levels: list[_Level] = []
    pending: dict | None = None   # a jit frame whose body is not traced yet
    construct: tuple[str, dict] | None = None   # a scan's or remat's, likewise
    for frame, _ in traceback.walk_tb(error.__traceback__):
        where = (roles.get(frame.f_code.co_filename), frame.f_code.co_name)
        kind = _construct_kind(frame, where, rule) if pending is None else None
        dynamic = transposed_level(frame) if where == ("pe", "trace_to_jaxpr_dynamic") and \
            construct is not None and construct[0] == "transposed_jit" else None
        if dynamic is not None:   # a transposed jit's body
            levels.append(_Level(dynamic[0], dynamic[1], None, construct))
            construct = None
        elif where == ("pe", "trace_to_jaxpr"):
            if pending is None and construct is None:
                return None   # a body traced by something else than jit, scan or remat
            local = frame.f_locals
            levels.append(_Level(local["trace"], local["debug_info"], pending, construct))
            pending = construct = None
        elif where == ("pe", "trace_to_jaxpr_dynamic") and construct is not None and \
                construct[0] in ("custom_jvp", "custom_vjp", "custom_rule"):   # its body
            local = frame.f_locals
            levels.append(_Level(local["trace"], local["fun"].debug_info, None, construct))
            construct = None
        elif where == ("pjit", "_trace_for_jit"):
            pending = frame.f_locals
        elif where == ("batching", "process_primitive") and bound_call_frame(frame, levels):
            return levels, _Refused("batched_call", dict(frame.f_locals), None, batched=True)
        elif kind is not None:
            construct = (kind, construct_locals(kind, frame))
        elif where in _CONSTRUCT_CHECKS and construct is not None:   # a loop's, a cond's
            return (levels, _Refused(_CONSTRUCT_CHECKS[where], construct[1], None)) \
                if levels else None
        elif where == ("pe", "default_process_primitive") and not forwarded_frame(frame):
            if not levels or pending is not None or construct is not None or \
                    not primitive_frame(frame, levels[-1].trace):
                return None   # bound in a trace other than the body's (a transformation's)
            return levels, _Refused("primitive", dict(frame.f_locals), None)
        elif where in _CALLS:
            kind = _CALLS[where]
            inner = kind in ("jit_in", "jit_out")
            if not levels or (inner and pending is None):
                return None
            call = dict(frame.f_locals, called=frame.f_code.co_name)
            return levels, _Refused(kind, call, pending if inner else None)
        elif where == ("smap", "wrapped") and pending is None:
            if not _inside_body(error, frame, files["jax"]) or batched_out_specs(error):
                return _shard_map_call(error, frame, levels)
        elif (pending is not None or construct is not None) and \
                not frame.f_code.co_filename.startswith(files["jax"]):
            return None   # user code between a jit and its body: not a jit's trace
    return _bound(frame, where, levels, idle=pending is None and construct is None)


def _construct_kind(frame: Any, where: tuple, rule: bool) -> str | None:
    """The kind of body a construct's frame is about to trace (a custom_jvp's rule, where
    ``rule``: raised tracing one), else None."""
    from .refused_bodies import body_construct

    return body_construct(frame) or transposed_construct(frame) or (
        "custom_rule" if rule and where == ("pe", "jvp_jaxpr_thunk") else None)


def _bound(frame: Any, where: tuple, levels: list[_Level], idle: bool
           ) -> tuple[list[_Level], _Refused] | None:
    """The primitive JAX refused where it binds it (SMAP-29), ``frame`` the last of the
    error's (``where``: its role and name), as the refused call in the innermost of
    ``levels`` (``idle``: no jit or construct was about to trace a body); else None."""
    if where != ("core", "bind") or not idle or not levels:
        return None
    call = bind_frame(frame, [level.trace for level in levels])
    return None if call is None else (levels, _Refused("primitive", call, None))


def _inside_body(error: BaseException, call: Any, jax_files: str) -> bool:
    """Whether JAX refused inside the body of the shard_map call whose frame is ``call``:
    user code or a body trace below it in ``error``'s frames."""
    below = False
    for frame, _ in traceback.walk_tb(error.__traceback__):
        if frame is call:
            below = True
        elif below and (not frame.f_code.co_filename.startswith(jax_files)
                        or frame.f_code.co_name == "trace_to_jaxpr"):
            return True
    return False


def _shard_map_call(error: BaseException, call: Any, levels: list[_Level]
                    ) -> tuple[list[_Level], _Refused] | None:
    """The shard_map call whose frame is ``call`` as the refused one, where JAX refused it
    itself (not inside its body). The staging frame that traced the body, where the
    refusal came after (JAX re-raises it as its context), rides along as the call's
    ``jit``."""
    staged = None
    context = error.__context__
    if context is not None and type(context).__name__ in ("_RepError", "_SpecError"):
        for frame, _ in traceback.walk_tb(context.__traceback__):
            if frame.f_code.co_name == "_shard_map_staging":
                staged = frame.f_locals
    for frame, _ in traceback.walk_tb(error.__traceback__):   # refused putting results
        if frame.f_code.co_name == "_shard_map_staging" and "out_specs" in frame.f_locals:
            staged = frame.f_locals   # together (SMAP-19's reduced axes): its body traced
    if not levels:
        return None
    # the staging of the shard_map whose body holds the call, if one does (its mesh the context)
    enclosing = [level.construct[1] for level in levels
                 if level.construct is not None and level.construct[0] == "shard_map"]
    return levels, _Refused("shard_map", dict(call.f_locals, enclosing=(
        enclosing[-1] if enclosing else None)), staged)


def describe_refused(error: BaseException, inputs: tuple, options: dict, jitted: bool,
                     read_body: Callable[..., Program]) -> Program | None:
    """The program JAX refused with ``error`` while tracing it, described up to the refused
    call, or None (the module's docstring says where). ``inputs`` and ``options``: the
    program's inputs and the options the bridge gives every program it reads (devices,
    refs, hoisting, input paths); ``jitted``: whether the function is a jit, whose body is
    then the second JAX traced (the first, the call of it, holding nothing else);
    ``read_body(jaxpr, consts, inputs, where, **options)``: the bridge's reader of a body.
    A refusal in a custom_jvp's rule a gradient or a ``jax.jvp`` traced is theirs, refused
    by the spec's rewrite of it where it is not described otherwise."""
    names = {cls.__name__ for cls in type(error).__mro__}
    gradient = gradient_frame(error)
    if gradient is not None:   # a cotangent's type refused: the gradient by the spec's rewrite
        refuse_gradient(gradient, names)
        return None
    program = _described_refusal(error, inputs, options, jitted, read_body, names)
    if program is None:   # refused in a custom_jvp's rule: by the spec's rewrite of its AD
        refuse_in_rule(error, names)
    return program


def _described_refusal(error: BaseException, inputs: tuple, options: dict, jitted: bool,
                       read_body: Callable[..., Program], names: set[str]
                       ) -> Program | None:
    """:func:`describe_refused` of a refused call it locates in ``error``'s frames (JAX's
    classes ``names``), or None."""
    from ..core.rules import Rejection
    from ..program.explain import explain_program

    kind, refused = None, None
    try:
        located = _locate(error)
        if located is None:
            return None
        levels, refused = located
        kind = refused.kind
        refused.batched = refused.batched or in_batching_rule(error)
        top = 1 if jitted or _only_calls_a_jit(levels) else 0
        if any(level.equations() for level in levels[:top]):
            return None
        if len(levels) == top == 1 and refused.kind in ("jit_in", "jit_out"):
            program = _refused_top(refused, inputs, options, read_body)
        elif len(levels) <= top or levels[top].jit is None:
            return None
        else:
            program = _described(levels[top:], refused, inputs,
                                 {**options, **frame_options(levels[top].jit)}, "", read_body)
        verdict = explain_program(program, until="trace")
    except Rejection as refusal:   # a scan's length, or vmap's batching, refused while
        failure = refusal.failure   # describing the call
        batched = refused is not None and refused.batched
        if (kind != "scan_length" and not batched) or refusal.stage != "trace" or not (
                {failure.jax_error, failure.error_type.__name__} & names):
            return None
        raise refusal from None
    except Exception:  # noqa: BLE001 - where the spec cannot describe it, JAX's error stands
        return None
    return program if _refuses_as_jax(verdict, refused, names) else None


def _refuses_as_jax(verdict: Any, refused: _Refused, names: set[str]) -> bool:
    """Whether ``verdict`` refuses at the trace stage, with one of JAX's classes ``names``,
    at the refused call where it was placed."""
    if verdict.accepted or verdict.stage != "trace" or not (
            verdict.jax_error in names or verdict.error_type in names):
        return False
    # (refused elsewhere than at the call JAX refused: not its description)
    return not refused.placed or refused.refuses_at(verdict.path)


def describe_refused_rule(error: BaseException, read_body: Callable[..., Program]
                          ) -> Program | None:
    """A custom_jvp's rule JAX refused with ``error`` while tracing it (over its primals
    and a tangent of each), described up to the refused call as :func:`describe_refused`
    describes a body, its inputs the rule's; None where the spec does not refuse it at the
    trace stage at that call with JAX's class. ``read_body`` as for
    :func:`describe_refused`."""
    from ..program.explain import explain_program
    from .program import read_type

    names = {cls.__name__ for cls in type(error).__mro__}
    try:
        located = _locate(error, rule=True)
        if located is None or located[0][0].construct[0] != "custom_rule":
            return None
        levels, refused = located
        inputs = tuple(read_type(v.aval, f"input {i} of a custom_jvp's rule")
                       for i, v in enumerate(levels[0].trace.frame.invars))
        program = _described(levels, refused, inputs, {}, "", read_body)
        verdict = explain_program(program, until="trace")
    except Exception:  # noqa: BLE001 - where the spec cannot describe it, it stays unread
        return None
    return program if _refuses_as_jax(verdict, refused, names) else None


def calls_one_jit(error: BaseException) -> bool:
    """Whether the function JAX refused with ``error`` while tracing it (its frames kept)
    had called nothing but one jit over its arguments, inside which JAX refused."""
    try:
        located = _locate(error)
    except Exception:  # noqa: BLE001 - a refusal not located: read as a Python function's
        return False
    return located is not None and _only_calls_a_jit(located[0])


def _refused_top(refused: _Refused, inputs: tuple, options: dict,
                 read_body: Callable[..., Program]) -> Program:
    """The function's own jit refused for its in_shardings or out_shardings: its body (as
    :func:`_refused_jit` traces it) read as the program, over the user's values, with the
    options the refused jit was given."""
    jit = _refused_jit(refused, tuple(range(len(inputs))), "", read_body)
    body = jit.body
    if len(body.inputs) != len(inputs) or not refused.jit or refused.jit["kwargs"]:
        raise TypeError("a jit whose inputs are not the function's arguments")
    given = {name: getattr(body, name) for name in (
        "in_shardings", "out_shardings", "donated", "keep_unused")}
    ctx = refused.jit.get("ctx_mesh")
    return read_body(_retraced(refused), _retraced_consts(refused), inputs, "", **options,
                     **given, context_mesh=None if ctx is None or ctx.empty else
                     _from_jax(ctx))


def _retraced(refused: _Refused) -> Any:
    return _closed_body(refused).jaxpr


def _retraced_consts(refused: _Refused) -> list:
    return list(_closed_body(refused).consts)


def _closed_body(refused: _Refused) -> Any:
    """The refused jit's body as JAX traced it (out_shardings) or as traced here over its
    operands' types (in_shardings: JAX refused before tracing it)."""
    import jax

    jit = refused.jit
    assert jit is not None
    if refused.kind == "jit_out":
        return jit["jaxpr"]
    return _unshaped_body(jit)


def _from_jax(value: Any) -> Any:
    from .convert import from_jax
    return from_jax(value)


def _only_calls_a_jit(levels: list[_Level]) -> bool:
    """Whether the function's body so far is nothing but the call of a jit over its
    arguments, in order: describe_program reads such a function as that jit call."""
    if len(levels) < 2 or levels[0].equations() or levels[1].jit is None:
        return False
    operands = [getattr(v, "val", None) for v in levels[1].jit["args_ft"].vals]
    return operands == list(levels[0].trace.frame.invars)


def _described(levels: list[_Level], refused: _Refused, inputs: tuple, options: dict,
               where: str, read_body: Callable[..., Program]) -> Program:
    """The outermost body of ``levels`` as traced so far, then the call into the next one
    (an inner jit, a scan's or a remat's body, each so described) or, in the innermost,
    the refused call; the program returns what that last equation returns."""
    values, make = _next_call(levels[1:], refused, read_body, levels[0].trace)
    jaxpr, consts = levels[0].returning([primal(v) for v in values])
    body = read_body(jaxpr, list(consts), inputs, where, **options)
    return ended(body, make(body.outputs, f"{where}body[{len(body.equations)}]"))


def _next_call(rest: list[_Level], refused: _Refused, read_body: Callable[..., Program],
               enclosing: Any) -> tuple[list, Callable[[tuple, str], tuple]]:
    """(the values a body passes to its next call, a function making that call's
    equations from their numbers and its path): the call into the first of ``rest``, or
    the refused call where none is left."""
    from .refused_under_vmap import under_vmap

    values, make = _call_into(rest, refused, read_body)
    # (checked by JAX on the example: a shard_map's specs before its body, where no
    # staging of the body refused it)
    own = not refused.batched and (refused.kind in ("constraint", "device_put", "jit_in") or (
        refused.kind == "shard_map" and refused.jit is None))
    return under_vmap(values, make, refused.placed, enclosing, own)   # (a vmap in the body)


def _call_into(rest: list[_Level], refused: _Refused, read_body: Callable[..., Program]
               ) -> tuple[list, Callable[[tuple, str], tuple]]:
    """:func:`_next_call`, its values as the call was given them."""
    from .refused_bodies import body_call

    if not rest:
        return _flat_operands(refused.jit or refused.call, refused.kind), \
            lambda numbers, path: _placed(refused, path, _refused_equations(
                refused, numbers, path, read_body))
    if rest[0].jit is None:
        inner, make = _next_call(rest[1:], refused, read_body, rest[0].trace)
        called = transposed_call if rest[0].construct[0] in TRANSPOSED else body_call
        return called(rest[0], inner, make, read_body)
    return _flat_operands(rest[0].jit, "jit"), \
        lambda numbers, path: (_inner_jit(rest, refused, numbers, path, read_body),)


def _placed(refused: _Refused, path: str, equations: tuple) -> tuple:
    """``equations``, the refused call's, noted as placed from ``path`` on (``body[n]``,
    ``body[n + 1]`` ... in the body that ends with them)."""
    prefix, first = path.rsplit("body[", 1)
    start = int(first.rstrip("]"))
    refused.placed.extend(f"{prefix}body[{start + k}]" for k in range(len(equations)))
    if not equations:   # refused while described (LOOP-5): at the call's place
        refused.placed.append(path)
    return equations


def _flat_operands(frame: dict, kind: str) -> list:
    """The operands of the call a frame holds: a constraint's or a device_put's flat
    values, a jit's flat dynamic arguments."""
    if kind in ("constraint", "device_put", "reshard"):
        return list(frame["x_flat"])
    if kind == "shard_map":
        import jax
        return jax.tree_util.tree_leaves(frame["args"])
    if kind == "scan_carry":
        from .refused_bodies import carry_operands
        return carry_operands(frame)
    if kind == "cond_branches":
        from .refused_bodies import cond_operands
        return cond_operands(frame)
    if kind == "scan_length":
        return []
    if kind == "primitive":
        return primitive_operands(frame)
    if kind == "collective":
        return collective_operands(frame)
    if kind == "batched_call":
        return list(frame["tracers"])
    return list(frame["args_ft"].vals)


def frame_options(jit: dict) -> dict:
    """A jit's options as its frame holds them while its body is traced."""
    from .convert import from_jax
    from .program import read_sharding as _sharding

    count = len(jit["args_ft"].vals)
    flat = jit.get("in_shardings_flat")
    ctx = jit.get("ctx_mesh")
    return dict(
        in_shardings=() if flat is None else tuple(
            _sharding(s, "in_shardings of a jit") for s in flat),
        donated=tuple(bool(d) for d in jit.get("donated_invars", (False,) * count)),
        keep_unused=bool(jit["ji"].keep_unused),
        context_mesh=None if ctx is None or ctx.empty else from_jax(ctx))


def _inner_jit(levels: list[_Level], refused: _Refused, operands: tuple, path: str,
               read_body: Callable[..., Program]) -> Jit:
    """An inner jit whose body JAX was tracing when it refused: that body up to the
    refused call, with the jit's options."""
    from .program import read_type as _type

    level = levels[0]
    assert level.jit is not None
    types = tuple(_type(v.aval, f"input {i} of {path}")
                  for i, v in enumerate(level.trace.frame.invars))
    options = frame_options(level.jit)
    options.pop("context_mesh")
    body = _described(levels, refused, types, options, f"{path}.jit.", read_body)
    return Jit(tuple(operands), body=body, name=_name(level.jit))


def _name(jit: dict) -> str:
    return str(getattr(jit.get("fun"), "__name__", "jit"))


def _refused_equations(refused: _Refused, operands: tuple, path: str,
                       read_body: Callable[..., Program]) -> tuple:
    """The refused call, as equations over the values numbered ``operands``."""
    from .program import read_sharding as _sharding, read_target as _target

    call = refused.call
    if refused.kind == "constraint":
        out = []
        for number, s in zip(operands, call["shardings_flat"]):
            sharding = _sharding(s, path)
            spec = getattr(sharding, "spec", None)
            loose = frozenset() if spec is None else frozenset(
                i for i, e in enumerate(spec.partitions) if e is UNCONSTRAINED)
            out.append(ShardingConstraint((number,), sharding=sharding,
                                          unconstrained_dims=loose))
        return tuple(out)
    if refused.kind == "reshard":
        return tuple(Reshard((number,), sharding=_sharding(s, path))
                     for number, s in zip(operands, call["shardings_flat"]))
    if refused.kind == "device_put":
        return (DevicePut(tuple(operands), targets=tuple(
            _target(d, path) for d in call["device_flat"])),)
    if refused.kind == "shard_map":
        from .refused_shard_map import refused_shard_map
        return (refused_shard_map(call, refused.jit, operands, path, read_body),)
    if refused.kind == "scan_carry":
        from .refused_bodies import refused_carry
        return refused_carry(call, operands, path, read_body)
    if refused.kind == "cond_branches":
        from .refused_bodies import refused_branches
        return refused_branches(call, operands, path, read_body)
    if refused.kind == "collective":
        return refused_collective(call, operands)
    if refused.kind == "primitive":
        return refused_primitive(call, operands, path)
    if refused.kind == "scan_length":
        from .refused_bodies import refused_length
        return refused_length(call, path)
    if refused.kind == "batched_call":
        return bound_call(call, path, read_body).renumbered(operands),
    return (_refused_jit(refused, operands, path, read_body),)


def _refused_jit(refused: _Refused, operands: tuple, path: str,
                 read_body: Callable[..., Program]) -> Jit:
    """An inner jit refused for its in_shardings (before JAX traced its body: the body is
    traced here, over its operands' types) or its out_shardings (its body traced)."""
    import jax

    from .program import read_sharding as _sharding, read_type as _type

    jit = refused.jit
    assert jit is not None
    values = list(jit["args_ft"].vals)
    types = tuple(_type(jax.typeof(v), f"operand {i} of {path}") for i, v in enumerate(values))
    options = frame_options(jit)
    options.pop("context_mesh")
    if refused.kind == "jit_in":
        if jit["ji"].static_argnums or jit["ji"].static_argnames or jit["kwargs"]:
            raise TypeError("an inner jit with static or keyword arguments")
        options["in_shardings"] = tuple(_sharding(s, f"in_shardings of {path}")
                                        for s in refused.call["in_shardings_flat"])
        closed = _unshaped_body(jit)
    else:
        closed = jit["jaxpr"]
        options["out_shardings"] = tuple(_sharding(s, f"out_shardings of {path}")
                                         for s in refused.call["out_shardings_flat"])
    body = read_body(closed.jaxpr, list(closed.consts), types, f"{path}.jit.", **options)
    return Jit(tuple(operands), body=body, name=_name(jit))


def _unshaped_body(jit: dict) -> Any:
    """The body of a jit refused for its in_shardings, traced here over its operands' types;
    where JAX refuses that body too (it would trace it after the shardings), a body of no
    equation and no result: none of it is reached, the program ends at the refused jit."""
    import jax

    examples = jax.tree_util.tree_map(_example, jit["args"])
    try:
        return jax.make_jaxpr(jit["fun"])(*examples)
    except Exception:  # noqa: BLE001 - JAX's refusal of the body, after the one described
        return jax.make_jaxpr(lambda *args: ())(*examples)


def _example(value: Any) -> Any:
    """A value of an inner jit's call, as a ShapeDtypeStruct of its type (its tracer is
    its trace's)."""
    import jax

    aval = jax.typeof(value)
    sharding = None if aval.sharding.mesh.empty else aval.sharding
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding,
                                weak_type=aval.weak_type)
