"""A primitive JAX refuses to type while tracing, described as the equation it would be.

JAX types each primitive it binds (its abstract evaluation) and refuses, while tracing, one
whose operands' types it cannot type a result from over Explicit axes: a ``dot_general``
whose contracted or batch dimensions are split differently or on both operands (PROG-7), an
elementwise operation whose operands split one dimension over different axes (PROG-8), a
``select_n`` whose cases are split differently (PROG-8), a slice, pad or split resizing a
split dimension (PROG-9), a cumulative reduction along one (PROG-10), a reshape or a
gather it cannot type the result of (PROG-12, PROG-13). :func:`refused_primitive` describes
such a call as the :class:`~shardlaw.spec.program.description.Opaque` equation JAX would have
made of it, over the user's values, with its parameters, so that ``explain_program`` refuses
it by the spec's rule at its path. Its results are typed as JAX types them over operands
split nowhere (their shapes and dtypes; the spec refuses before reading them).

:func:`primitive_frame` says whether a JAX frame is such a binding, in the body JAX was
tracing (the frame's trace is that body's), so that
:mod:`~shardlaw.spec.bridge.refusals` locates it as it locates a refused constraint.
"""

from __future__ import annotations

from typing import Any

from ..program.description import Opaque

__all__ = ["primitive_frame", "refused_primitive", "primitive_operands", "forwarded_frame"]


def primitive_frame(frame: Any, trace: Any) -> bool:
    """Whether ``frame`` is JAX's staging of one primitive into the body traced by
    ``trace`` (its trace that body's, the primitive's parameters holding no body)."""
    from jax._src import core

    local = frame.f_locals
    if local.get("self") is not trace or "primitive" not in local or "tracers" not in local:
        return False
    params = local.get("params") or {}
    return not list(core.jaxprs_in_params(params))


def forwarded_frame(frame: Any) -> bool:
    """Whether ``frame`` is the partial evaluation ``jax.grad``'s linearize traces with
    handing a primitive on (its operands all known) to the trace below it: the body's, where
    a frame further down binds it."""
    from jax._src.interpreters import partial_eval as pe

    return isinstance(frame.f_locals.get("self"), pe.JaxprTrace)


def primitive_operands(call: dict) -> list:
    """The values the refused primitive was bound to, in order."""
    return list(call["tracers"])


def refused_primitive(call: dict, operands: tuple, path: str) -> tuple:
    """The refused primitive's equation over the values numbered ``operands``."""
    from .program import read_param, read_type

    primitive, params = call["primitive"], dict(call["params"])
    results = tuple(read_type(aval, f"result {i} of {path}")
                    for i, aval in enumerate(_unsplit_results(primitive, call["tracers"],
                                                              params)))
    return (Opaque(tuple(operands), results, primitive=primitive.name,
                   params=tuple((k, read_param(v)) for k, v in params.items())),)


def _unsplit_results(primitive: Any, tracers: list, params: dict) -> list:
    """The primitive's result types over operands of the same shapes and dtypes split
    nowhere (JAX's abstract evaluation of them)."""
    from jax._src import core

    avals = [core.ShapedArray(t.aval.shape, t.aval.dtype, weak_type=t.aval.weak_type)
             for t in tracers]
    if primitive.name == "pvary":   # (typed as its operand; its typing reads the body's axes)
        return avals
    if "out_sharding" in params:
        params = dict(params, out_sharding=None)
    out, _ = primitive.abstract_eval(*avals, **params)
    return list(out) if primitive.multiple_results else [out]
