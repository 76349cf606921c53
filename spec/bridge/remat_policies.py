"""A remat's policy of the user's own (any function of a primitive and its operands) read
into a plain table: the equations JAX asks it about, each with what it answers
(:func:`policy_table`).

JAX 0.10.2 asks a remat's policy about every equation of the body's JVP whose operands are
all known (``partial_eval_jaxpr_custom``; an inner jit's by its rule, recursively): the
primal equations and what their tangents read of the primals. This module asks the
user's function about those same equations (the JVP JAX builds, every inexact input
with a tangent: what fewer tangents ask is among them) and writes what it answers as a
name the spec reads without JAX (``saved_by_policy`` in
:mod:`shardlaw.spec.program.partial_eval`)::

    <mine> saves cos(float32[16x8]) and recomputes sin(float32[16x8]) name[h](float32[8])

An equation is named by its primitive (a ``checkpoint_name``'s by its name too) and its
operands' dtypes and shapes (a literal operand left out where the description leaves it
out). Where one name is asked twice and answered apart, where the
function offloads (``Offloadable``) or raises, or where a name holds a character the
table spells with, nothing is read: the policy stays named only (``<mine>``), which the
spec does not read (COLL-8 leaves what the remat communicates open).
"""

from __future__ import annotations

from typing import Any

__all__ = ["policy_table", "equation_key"]

_SPELLING = set(" ()[]")


def equation_key(primitive: str, operands: tuple[tuple[str, tuple[int, ...]], ...],
                 name: str | None = None) -> str:
    """An equation's name in the table: ``dot_general(float32[16x8] float32[8x8])``,
    ``name[h](float32[8])``."""
    typed = " ".join(f"{dtype}[{'x'.join(str(d) for d in shape)}]" for dtype, shape in operands)
    return f"{primitive}{'' if name is None else f'[{name}]'}({typed})"


def _answer(policy: Any, eqn: Any) -> bool | None:
    """What ``policy`` answers of ``eqn`` as JAX asks it: saved (True), recomputed (False),
    or None (it offloads, answers otherwise or raises)."""
    from jax._src.interpreters import partial_eval as pe

    try:
        answer = pe.ensure_enum(policy(eqn.primitive, *[v.aval for v in eqn.invars],
                                       **eqn.params))
    except Exception:   # (a function of the user's own: what it raises is not read)
        return None
    if isinstance(answer, pe.SaveableType):
        return True
    return False if isinstance(answer, pe.RecomputeType) else None


def _key(eqn: Any) -> str | None:
    """``eqn``'s key as the spec's description spells it (a literal operand of a primitive
    it does not describe apart is left out, as the description leaves it out)."""
    from jax._src import core

    from ..program.description import DESCRIBED_PRIMITIVES

    name = eqn.params.get("name") if eqn.primitive.name == "name" else None
    if name is not None and (type(name) is not str or _SPELLING & set(name)):
        return None
    kept = eqn.primitive.name in DESCRIBED_PRIMITIVES
    return equation_key(eqn.primitive.name, tuple(
        (str(v.aval.dtype), tuple(v.aval.shape)) for v in eqn.invars
        if kept or not isinstance(v, core.Literal)), name)


def _asked(jaxpr: Any, unknown: list[bool], policy: Any, table: dict) -> list[bool] | None:
    """Ask ``policy`` about each equation of ``jaxpr`` whose operands are all known (an
    inner jit's, recursively), adding its answers to ``table``; which outputs are unknown
    (None: one answer could not be read)."""
    from jax._src import core

    state = dict(zip(jaxpr.invars, unknown))
    for eqn in jaxpr.eqns:
        flags = [state.get(v, False) if isinstance(v, core.Var) else False
                 for v in eqn.invars]
        if eqn.primitive.name == "jit":
            inner = _asked(eqn.params["jaxpr"].jaxpr, flags, policy, table)
            if inner is None:
                return None
            state.update(zip(eqn.outvars, inner))
            continue
        if not any(flags):
            key, answer = _key(eqn), _answer(policy, eqn)
            if key is None or answer is None or table.setdefault(key, answer) != answer:
                return None
        state.update((v, any(flags)) for v in eqn.outvars)
    return [state.get(v, False) if isinstance(v, core.Var) else False for v in jaxpr.outvars]


def policy_table(policy: Any, jaxpr: Any, named: str) -> str:
    """``named`` (a user's policy, ``<mine>``) with the table of what it answers of the
    equations JAX asks it about in the remat body ``jaxpr`` (open, as ``remat2`` holds
    it); ``named`` alone where that table cannot be read."""
    import numpy as np
    from jax._src.interpreters import ad
    from jax._src.interpreters import partial_eval as pe

    nonzero = [np.issubdtype(v.aval.dtype, np.inexact) for v in jaxpr.invars]
    try:
        jvp, _ = ad.jvp_jaxpr(pe.close_jaxpr(jaxpr), nonzero, False)
    except Exception:   # (a body JAX differentiates only later, or refuses to)
        return named
    table: dict[str, bool] = {}
    unknown = [False] * len(jaxpr.invars) + [True] * sum(nonzero)
    if _asked(jvp.jaxpr, unknown, policy, table) is None or not table:
        return named
    saves = " ".join(k for k, saved in table.items() if saved)
    recomputes = " ".join(k for k, saved in table.items() if not saved)
    return f"{named} saves {saves or 'nothing'} and recomputes {recomputes or 'nothing'}"
