"""A collective JAX refuses while tracing a ``jax.shard_map``'s body, described as JAX would
have staged it.

JAX refuses a collective of a shard_map's body before it is an equation: a ``psum``,
``pmax``, ``pmin`` (and ``pmean``, a psum), ``all_gather``, ``psum_scatter``,
``all_to_all``, ``ppermute`` or ``axis_index`` over an axis the body may not use (one left
automatic, NameError; one the mesh lacks, under ``check_vma`` AssertionError for the
reductions), or a ``psum_scatter`` or ``all_to_all`` whose operand the axes' size does not
divide (ValueError). :func:`refused_collective` makes the equation JAX would have made of
the call, from the locals of the frame of the user's call (``jax.lax.all_gather``'s ...):
the primitive JAX binds (``reduce_scatter`` for ``psum_scatter``, ``psum_invariant`` for
``psum``), its parameters as JAX gives them, one equation per leaf of the operand. The
spec's collective rules refuse it, SMAP-13 for its axes, SMAP-21 for its shape; its
result is the operand's type (the rules refuse before they read it).

A collective over axis index groups is described with its groups, and the spec refuses it
by SMAP-26 (groups that do not cover their indices, ValueError; a psum over groups under
``check_vma``, or an all_gather to other than varying values over groups,
NotImplementedError); an ``all_gather`` to reduced values of an operand not varying along
its axes (``all_gather_reduced``, ValueError) by SMAP-27.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..program.description import Equation, Opaque

__all__ = ["COLLECTIVE_CALLS", "collective_operands", "refused_collective"]

# The user-facing functions of jax.lax whose refusal is described.
COLLECTIVE_CALLS = ("psum", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all",
                    "ppermute", "axis_index")


def _axes(named: Any) -> tuple:
    return tuple(named) if isinstance(named, (tuple, list)) else (named,)


def _params(call: str, local: dict, rank: int) -> tuple[str, tuple]:
    """(the primitive JAX binds for the call ``call`` whose frame's locals are ``local``,
    its parameters past its operand, an array of ``rank``)."""
    groups = local.get("axis_index_groups")
    groups = None if groups is None else tuple(tuple(int(i) for i in g) for g in groups)
    axes = _axes(local["axis_name"])
    if call == "psum":   # (psum_invariant takes no groups: JAX refuses them first, SMAP-26)
        return "psum_invariant", (("axes", axes),) + (
            () if groups is None else (("axis_index_groups", groups),))
    if call in ("pmax", "pmin"):
        return call, (("axes", axes), ("axis_index_groups", groups))
    if call == "all_gather":
        tiled = bool(local["tiled"])
        axis = int(local["axis"])
        dimension = axis + (rank if tiled else rank + 1) if axis < 0 else axis
        to = local.get("to", "varying")
        primitive = {"varying": "all_gather", "invarying": "all_gather_invariant",
                     "reduced": "all_gather_reduced"}[to]
        return primitive, (("all_gather_dimension", dimension),
                           ("axis_index_groups", groups), ("axis_name", axes),
                           ("tiled", tiled))
    if call == "psum_scatter":
        return "reduce_scatter", (("axis_index_groups", groups), ("axis_name", axes),
                                  ("scatter_dimension", int(local["scatter_dimension"])),
                                  ("tiled", bool(local["tiled"])))
    if call == "all_to_all":
        return "all_to_all", (("axis_index_groups", groups), ("axis_name", local["axis_name"]),
                              ("concat_axis", int(local["concat_axis"])),
                              ("split_axis", int(local["split_axis"])),
                              ("tiled", bool(local["tiled"])))
    if call == "ppermute":
        return "ppermute", (("axis_name", axes),
                            ("perm", tuple(tuple(int(i) for i in p) for p in local["perm"])))
    raise TypeError(f"a refused {call}")


def collective_operands(local: dict) -> list:
    """The values a refused collective's call reads: the leaves of its operand (none for
    ``axis_index``)."""
    import jax

    return [] if local["called"] == "axis_index" else jax.tree_util.tree_leaves(local["x"])


def refused_collective(local: dict, operands: tuple) -> tuple[Equation, ...]:
    """The collective JAX refused inside a shard_map's body, one equation per value, over
    the values numbered ``operands``, as JAX would have staged it."""
    import jax

    from ..program.description import Value
    from .program import read_type

    if local["called"] == "axis_index":
        return (Opaque((), (Value.typed((), "int32"),), primitive="axis_index",
                       params=(("axis_name", local["axis_name"]),)),)
    out = []
    for number, leaf in zip(operands, collective_operands(local)):
        given = read_type(jax.typeof(leaf), "a collective's operand")
        primitive, params = _params(local["called"], local, len(given.shape))
        result = given
        if primitive in ("psum_invariant", "pmax", "pmin"):
            axes = dict(params)["axes"]
            result = dataclasses.replace(given, varying=frozenset(given.varying) - set(axes))
        out.append(Opaque((number,), (result,), primitive=primitive, params=params))
    return tuple(out)
