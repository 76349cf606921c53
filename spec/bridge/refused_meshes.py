"""A primitive JAX refuses to bind inside a shard_map's body to a value it closed over.

JAX 0.10.2 canonicalizes a primitive's arguments where it binds it (``Primitive.bind``),
before its abstract evaluation: inside a shard_map's body whose mesh has Manual and Auto
axes only, a value typed over a mesh with Explicit axes (one the body closes over) is
refused there, with a NotImplementedError (SMAP-29, C1). No trace has staged the
primitive yet, so :func:`bind_frame` reads the refused call from the ``bind`` frame itself
(the primitive, its arguments, its parameters), in the form
:func:`~shardlaw.spec.bridge.refused_primitives.refused_primitive` describes, so that
:mod:`~shardlaw.spec.bridge.refusals` describes it as it describes a primitive refused
while its result is typed (C2 is met there: JAX's abstract evaluation).
"""

from __future__ import annotations

from typing import Any

__all__ = ["bind_frame"]


def bind_frame(frame: Any, traces: list) -> dict | None:
    """The refused call (``primitive``, ``tracers``, ``params``) where ``frame``, the frame
    the error was raised in, is JAX's ``Primitive.bind`` refusing its arguments, each traced
    value among them of one of the bodies being traced (``traces``): the enclosing bodies'
    values the innermost closes over. None otherwise (a value of a transformation's trace:
    a vmap's, a gradient's)."""
    from jax._src import core

    local = frame.f_locals
    if frame.f_code.co_filename != core.__file__ or \
            frame.f_code.co_name != "bind" or not isinstance(local.get("self"), core.Primitive):
        return None
    args = list(local.get("args", ()))
    primitive = local["self"]
    if primitive.multiple_results or list(core.jaxprs_in_params(local.get("params") or {})):
        return None
    for value in args:
        if isinstance(value, core.Tracer) and not any(value._trace is t for t in traces):
            return None
    return {"primitive": primitive, "tracers": args, "params": dict(local.get("params") or {})}
