"""A gradient JAX refuses in its backward pass: a cotangent of another type than its value,
or a while loop it cannot transpose; or a gradient, a ``jax.jvp``, a ``jax.vjp`` or a
``jax.linearize`` refused in a custom_jvp's rule it traces (:func:`refuse_in_rule`).

JAX's backward pass checks each cotangent it hands to a value against the value's
cotangent type (``ad.ct_check``) and raises a ValueError ("Expected cotangent type
float32[1@y] but got float32[8@y]") while tracing, as it does transposing a while loop
("Reverse-mode differentiation does not work for lax.while_loop") — there is no equation
JAX refuses, so
:mod:`~shardlaw.spec.bridge.refusals` cannot describe the program up to one. The refused
call is then the ``jax.grad`` (or ``jax.value_and_grad``) whose backward pass refused:
:func:`refuse_gradient` describes the function it differentiates over the types of its
arguments (per example under ``vmap``) and differentiates it by the spec's own rewrite
(:func:`~shardlaw.spec.program.autodiff.grad_program`), whose transpose checks every
cotangent by AD-13 and refuses a while loop by LOOP-2, whose linearization refuses a
custom_jvp's rule JAX refused tracing it (the rule's checks, as
:func:`~shardlaw.spec.program.custom_rules.refuse_traced_rule` makes them), and raises the spec's refusal where it refuses at the trace stage with
JAX's class; elsewhere JAX's error stands.
"""

from __future__ import annotations

import traceback
from typing import Any

__all__ = ["gradient_frame", "refuse_gradient", "refuse_in_rule", "refuse_jvp",
           "refuse_linearized"]


def gradient_frame(error: BaseException) -> dict | None:
    """The locals of the innermost ``jax.value_and_grad`` call (``jax.grad`` calls one)
    JAX's ``error`` passed through, where JAX raised it checking a cotangent's type in
    that gradient's backward pass; else None."""
    from jax._src import api
    from jax._src.interpreters import ad
    from jax._src.lax.control_flow import loops

    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    refusing = {(ad.__file__, "ct_check"),   # (and a while loop's transpose: LOOP-2)
                (loops.__file__, "_while_transpose_error")}
    if not frames or (frames[-1].f_code.co_filename, frames[-1].f_code.co_name) \
            not in refusing:
        return None
    calls = [f.f_locals for f in frames
             if (f.f_code.co_filename, f.f_code.co_name) == (api.__file__, "value_and_grad_f")]
    return calls[-1] if calls else None


def refuse_in_rule(error: BaseException, names: set[str]) -> None:
    """Raise the spec's refusal of the ``jax.grad``, ``jax.jvp``, ``jax.vjp`` or
    ``jax.linearize`` (the innermost) whose tracing of a custom_jvp's rule JAX refused with
    ``error``, by the spec's rewrite of it (:func:`refuse_gradient`, :func:`refuse_jvp`,
    :func:`refuse_linearized`); return where there is none, or the spec does not refuse
    it so (JAX's error stands)."""
    from jax._src import api, traceback_util
    from jax._src.interpreters import ad

    # (a gradient's own vjp is the gradient's: the wrappers between them are not callers)
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)
              if frame.f_code.co_filename != traceback_util.__file__]
    places = [(f.f_code.co_filename, f.f_code.co_name) for f in frames]
    rules = [k for k, place in enumerate(places)
             if place == (ad.__file__, "process_custom_jvp_call")]
    callers = [k for k, place in enumerate(places[:rules[-1]] if rules else [])
               if place[0] == api.__file__ and place[1] in _REWRITES
               and not (place[1] == "vjp" and places[k - 1][1] == "value_and_grad_f")]
    if not callers:
        return
    local, name = frames[callers[-1]].f_locals, places[callers[-1]][1]
    _REWRITES[name](local, names)


def _example(value: Any) -> Any:
    """An argument as a ShapeDtypeStruct of its type (a traced one's, per example under
    vmap), its sharding where its type is over a mesh."""
    import jax

    aval = jax.typeof(value)
    sharding = None if aval.sharding.mesh.empty else aval.sharding
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding,
                                weak_type=aval.weak_type)


def refuse_gradient(local: dict, names: set[str]) -> None:
    """Raise the spec's refusal of the gradient whose call's locals are ``local`` (its
    function described over its arguments' types, differentiated by ``grad_program``),
    where it refuses at the trace stage with one of JAX's classes ``names``; return
    otherwise (JAX's error stands)."""
    import jax

    from ..core.rules import Rejection
    from ..program.autodiff import grad_program
    from .program import describe_program

    fun, args, argnums = local["fun"], local["args"], local["argnums"]
    if local.get("kwargs") or local.get("holomorphic") or local.get("allow_int"):
        return
    try:
        program = describe_program(fun, *jax.tree_util.tree_map(_example, args))
        flat = _flat_argnums(args, argnums)
        grad_program(program, flat, has_aux=bool(local.get("has_aux")))
    except Rejection as refusal:
        _raise_as_jax(refusal, names)
    except Exception:  # noqa: BLE001 - where the spec cannot describe it, JAX's error stands
        return


def _raise_as_jax(refusal: Any, names: set[str]) -> None:
    """Raise the spec's ``refusal`` where it refuses at the trace stage with one of JAX's
    classes ``names`` (JAX's error stands otherwise)."""
    failure = refusal.failure
    if refusal.stage == "trace" and {failure.jax_error, failure.error_type.__name__} & names:
        raise refusal from None


def refuse_jvp(local: dict, names: set[str]) -> None:
    """Raise the spec's refusal of the ``jax.jvp`` whose call's locals are ``local`` (its
    function described over its primals' types, differentiated by ``jvp_program`` with
    tangents of its tangents' types), where it refuses at the trace stage with one of
    JAX's classes ``names``; return otherwise (JAX's error stands)."""
    import jax

    from ..core.rules import Rejection
    from ..program.autodiff import jvp_program
    from .program import describe_program, value_type_of

    if local.get("has_aux"):
        return
    try:
        program = describe_program(local["fun"], *jax.tree_util.tree_map(
            _example, tuple(local["primals"])))
        jvp_program(program, tuple(value_type_of(jax.typeof(t), "a tangent of jax.jvp")
                                   for t in jax.tree_util.tree_leaves(local["tangents"])))
    except Rejection as refusal:
        _raise_as_jax(refusal, names)
    except Exception:  # noqa: BLE001 - where the spec cannot describe it, JAX's error stands
        return


def refuse_linearized(local: dict, names: set[str], transform: str = "linearize") -> None:
    """Raise the spec's refusal of the ``jax.linearize`` or ``jax.vjp`` (``transform``)
    whose call's locals are ``local`` (its function described over its primals' types,
    the aux result of ``has_aux`` left out, differentiated by ``linearize_program`` or
    ``vjp_program``), where it refuses at the trace stage with one of JAX's classes
    ``names``; return otherwise (JAX's error stands)."""
    import jax

    from ..core.rules import Rejection
    from ..program.autodiff import linearize_program, vjp_program
    from .program import describe_program

    fun = local["fun"]
    if local.get("has_aux"):
        fun = lambda *args: local["fun"](*args)[0]   # noqa: E731 - (aux: not differentiated)
    try:
        program = describe_program(fun, *jax.tree_util.tree_map(
            _example, tuple(local["primals"])))
        (vjp_program if transform == "vjp" else linearize_program)(program)
    except Rejection as refusal:
        _raise_as_jax(refusal, names)
    except Exception:  # noqa: BLE001 - where the spec cannot describe it, JAX's error stands
        return


# JAX's functions that trace a custom_jvp's rule called by the user, and the spec's
# rewrites that refuse it as they do
_REWRITES = {
    "value_and_grad_f": refuse_gradient,
    "_jvp": refuse_jvp,
    "linearize": refuse_linearized,
    "vjp": lambda local, names: refuse_linearized(local, names, "vjp"),
}


def _flat_argnums(args: tuple, argnums: Any) -> tuple[int, ...]:
    """The flat inputs of the described function that the gradient's ``argnums`` name
    (every leaf of each differentiated argument)."""
    import jax

    wanted = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    flat, at = [], 0
    for k, arg in enumerate(args):
        count = len(jax.tree_util.tree_leaves(arg))
        if k in wanted:
            flat.extend(range(at, at + count))
        at += count
    return tuple(flat)
