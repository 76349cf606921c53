"""The AD rules' values read from real JAX: jit equations of a jaxpr and the facts of their bodies.

:func:`equation_from_jax` reads the sharding parameters of a ``jit`` equation;
:func:`jit_body_of` reads what differentiation needs to know of its body (which inputs
each output depends on, which outputs return an input, and the residuals JAX's own
linearization of the body saves and reads: ``ad.linearize_jaxpr`` and dead-code
elimination decide those, never a sharding); :func:`jit_equations` lists the ``jit``
equations of a jaxpr, nested ones included. Only the property suites import this module.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from jax._src import core
from jax._src.interpreters import ad
from jax._src.interpreters import partial_eval as pe
from jax._src.pjit import jit_p
from jax._src.sharding_impls import UnspecifiedValue

from ..transforms.autodiff import JitBody, JitEquation
from .convert import from_jax
from ..core.shardings import UNSPECIFIED

__all__ = ["equation_from_jax", "jit_body_of", "jit_equations", "MODES"]


def _sharding(value: Any) -> Any:
    return UNSPECIFIED if isinstance(value, UnspecifiedValue) else from_jax(value)


def equation_from_jax(eqn: core.JaxprEqn) -> JitEquation:
    """The sharding parameters of a JAX ``jit`` equation as a :class:`JitEquation`."""
    params = eqn.params
    return JitEquation(tuple(_sharding(s) for s in params["in_shardings"]),
                       tuple(_sharding(s) for s in params["out_shardings"]),
                       tuple(params["donated_invars"]))


def _sub_jaxprs(value: Any) -> Iterator[core.Jaxpr]:
    if isinstance(value, core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, core.Jaxpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _sub_jaxprs(item)


def jit_equations(jaxpr: core.ClosedJaxpr | core.Jaxpr, name: str | None = None
                  ) -> list[core.JaxprEqn]:
    """The ``jit`` equations of ``jaxpr`` in order, nested ones after their parent (only
    those of the jitted function ``name`` when given)."""
    found: list[core.JaxprEqn] = []
    pending = [jaxpr.jaxpr if isinstance(jaxpr, core.ClosedJaxpr) else jaxpr]
    while pending:
        current = pending.pop(0)
        inner: list[core.Jaxpr] = []
        for eqn in current.eqns:
            if eqn.primitive is jit_p and (name is None or eqn.params["name"] == name):
                found.append(eqn)
            for value in eqn.params.values():
                inner.extend(_sub_jaxprs(value))
        pending[:0] = inner
    return found


def _used_inputs(jaxpr: core.Jaxpr, output: int) -> list[bool]:
    used = [j == output for j in range(len(jaxpr.outvars))]
    return pe.dce_jaxpr(jaxpr, used)[1]


def _residual_facts(closed: core.ClosedJaxpr, nonzero: Sequence[bool], is_vjp: bool
                    ) -> tuple[int, int, list[set[int]]]:
    """How many residuals JAX's linearization of the body saves, how many of them the primal
    equation returns, and which residuals each output's tangent reads."""
    primal, num_res_out, nonzero_out, in_fwd_res, tangent = ad.linearize_jaxpr(
        closed, list(nonzero), is_vjp=is_vjp)
    residuals = len(in_fwd_res)
    outvars = primal.jaxpr.outvars
    primal_count = len(outvars) - num_res_out
    primal_ids = {id(v) for v in outvars[:primal_count]}
    stored = sum(1 for v in outvars[primal_count:] if id(v) not in primal_ids)
    uses: list[set[int]] = []
    position = 0
    for moving in nonzero_out:
        if not moving:
            uses.append(set())
            continue
        used = _used_inputs(tangent.jaxpr, position)
        uses.append({r for r in range(residuals) if used[r]})
        position += 1
    return residuals, stored, uses


def _partial_eval_facts(closed: core.ClosedJaxpr, unknown: Sequence[bool]) -> tuple[int, int]:
    """How many residuals partial evaluation of the body passes from the known part to the
    unknown one, and how many of them the known equation computes and returns."""
    known, _, _, res_avals, in_fwd_res = pe.partial_eval_jaxpr_nounits_fwd(
        closed, list(unknown), instantiate=False)
    outvars = known.jaxpr.outvars
    primal_ids = {id(v) for v in outvars[:len(outvars) - len(res_avals)]}
    stored = sum(1 for v in outvars[len(outvars) - len(res_avals):] if id(v) not in primal_ids)
    return len(in_fwd_res), stored


MODES = ("jvp", "linearize", "vjp", "partial_eval")


def jit_body_of(eqn: core.JaxprEqn, flags: Sequence[bool], mode: str) -> JitBody:
    """The facts of a ``jit`` equation's body that its transformation needs.

    ``flags``: per input, a non-zero tangent (or, for ``partial_eval``, an unknown value);
    ``mode``: ``jvp``, ``linearize`` (``jax.linearize``), ``vjp`` (``jax.vjp`` and
    ``jax.grad``, for which JAX may save other residuals) or ``partial_eval``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    closed: core.ClosedJaxpr = eqn.params["jaxpr"]
    jaxpr = closed.jaxpr
    dependencies = [{i for i, used in enumerate(_used_inputs(jaxpr, j)) if used}
                    for j in range(len(jaxpr.outvars))]
    forwarded = pe._jaxpr_forwarding(jaxpr)
    if mode == "partial_eval":
        residuals, stored = _partial_eval_facts(closed, flags)
        return JitBody(len(jaxpr.invars), dependencies, forwarded, residuals, stored)
    if mode == "jvp" or not any(flags):
        return JitBody(len(jaxpr.invars), dependencies, forwarded)
    residuals, stored, uses = _residual_facts(closed, flags, mode == "vjp")
    return JitBody(len(jaxpr.invars), dependencies, forwarded, residuals, stored, uses)
