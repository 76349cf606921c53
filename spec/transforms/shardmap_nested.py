"""A shard_map nested in another's body, and a value typed reduced inside a body (SMAP-30 to SMAP-32).

* SMAP-30 — inside a ``jax.shard_map``'s body the context mesh is the body's mesh: the
  shard_map's mesh with its manual axes typed Manual (``jax.sharding.get_abstract_mesh()``);
  under ``jax.set_mesh`` it is that mesh. A shard_map called where a context mesh is set
  must be given it (or none: ``mesh=None`` reads it); given another (inside a body, the
  user's mesh, whose axes are not Manual), JAX 0.10.2 refuses the call before it traces
  its body: "The context mesh ... should match the mesh passed to shard_map"
  (ValueError). Given the body's mesh, the nested shard_map makes manual the axes its
  ``axis_names`` add (all of them already manual: none, and its out specs are checked
  against none, SMAP-11).
* SMAP-31 — an ``all_gather`` to reduced values (``to='reduced'``) types its result
  reduced along the axes it gathers over (and no longer varying along them). A collective
  over an axis along which its operand is typed reduced is refused (ValueError): a ``psum``,
  ``pmax``, ``pmin``, ``all_gather`` (to any values), ``psum_scatter``, ``all_to_all``,
  ``ppermute``, and the ``pvary`` JAX inserts where an out spec or an elementwise operation
  needs the value varying along that axis ("pvary cannot accept args which are reduced").
* SMAP-32 — in a body whose axes are all manual, an elementwise operation taking an
  operand reduced along some axes is reduced along them, and its other operands must be
  reduced along the same axes: one reduced along others, one neither varying nor reduced
  along them (replicated there: a constant, a value summed over them), or one varying
  along them is refused (ShardingTypeError). (JAX casts a value reduced along exactly the
  axes the operation needs it varying along, ``reduced_vary_cast``, before the check.) In
  a body that leaves some axes automatic JAX 0.10.2 implements no elementwise operation of
  a value typed reduced along manual axes (a bare AssertionError, unary ones included).

Standard library only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, rule
from ..core.values import AbstractMesh, Mesh

__all__ = ["check_context_mesh", "check_not_reduced", "check_reduced_operands",
           "ContextMeshNotGiven", "CollectiveOfReduced", "ReducedOperandsDiffer",
           "ReducedInPartlyManualBody"]


# --------------------------------------------------------------------------- SMAP-30

@dataclasses.dataclass(frozen=True)
class ContextMeshNotGiven(Failure, rule="SMAP-30"):
    template = ("a shard_map is given {given}, but the context mesh (a body's it is called in, "
                "or the one jax.set_mesh set) is {context}: The context mesh {context} "
                "should match the mesh passed to shard_map {given}")
    hint = ("Pass the context mesh (mesh=jax.sharding.get_abstract_mesh()), or leave the "
            "mesh out")
    given: Any
    context: Any


@rule("SMAP-30", mirrors="jax._src.shard_map._shmap_checks (its context-mesh check)")
def check_context_mesh(given: Mesh | AbstractMesh, context: Mesh | AbstractMesh | None,
                       path: str = "") -> None:
    """A shard_map called where a context mesh is set (inside another's body, the body's mesh, its manual axes typed Manual; else the one ``jax.set_mesh`` set) is given that mesh; given another, it is refused (ValueError).

    ``context`` is the context mesh (None: none is set).

    >>> from shardlaw.spec.core.values import AxisType
    >>> E, M = AxisType.Explicit, AxisType.Manual
    >>> body = AbstractMesh((2, 4), ("x", "y"), (M, E))
    >>> check_context_mesh(body, body)
    >>> check_context_mesh(Mesh.iota((2, 4), ("x", "y"), (E, E)), None)
    >>> check_context_mesh(Mesh.iota((2, 4), ("x", "y"), (E, E)), body)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-30]: a shard_map is given Mesh({'x': 2, 'y': 4}, types=('Explicit', 'Explicit')), but the context mesh (a body's it is called in, or the one jax.set_mesh set) is AbstractMesh({'x': 2, 'y': 4}, types=('Manual', 'Explicit')): The context mesh AbstractMesh({'x': 2, 'y': 4}, types=('Manual', 'Explicit')) should match the mesh passed to shard_map Mesh({'x': 2, 'y': 4}, types=('Explicit', 'Explicit')). ...
    """
    if context is None or context.empty or given.abstract == context.abstract:
        return
    raise reject(ContextMeshNotGiven(given, context), path or None)


# --------------------------------------------------------------------------- SMAP-31

@dataclasses.dataclass(frozen=True)
class CollectiveOfReduced(Failure, rule="SMAP-31"):
    template = ("{primitive} over {axes} takes an operand of type {value} reduced along "
                "{reduced}: {primitive} cannot accept args which are reduced")
    hint = ("A value an all_gather to reduced values gave is the same along those axes: "
            "return it with an out spec naming them reduced, or gather to='varying'")
    primitive: str
    axes: tuple
    value: str
    reduced: tuple


@rule("SMAP-31", mirrors="jax._src.core.check_unreduced_args (its reduced check), met in "
                         "the abstract evaluation of psum, pmax, pmin, ppermute, all_gather, "
                         "psum_scatter, all_to_all and pvary")
def check_not_reduced(primitive: str, axes: tuple, value: str, reduced: frozenset[str],
                      path: str = "") -> None:
    """A collective or cast inside a shard_map's body takes no operand typed reduced along an axis it names (ValueError).

    ``value`` is the operand's type as words, ``reduced`` the manual axes it is reduced
    along (an ``all_gather`` to reduced values gives them).

    >>> check_not_reduced("psum", ("x",), "f32[4, 16]", frozenset({"y"}))
    >>> check_not_reduced("pvary", ("y",), "f32[4, 16]", frozenset({"y"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-31]: pvary over ('y',) takes an operand of type f32[4, 16] reduced along ('y',): pvary cannot accept args which are reduced. ...
    """
    over = tuple(a for a in axes if a in reduced)
    if over:
        raise reject(CollectiveOfReduced(primitive, tuple(axes), value, over), path or None)


# --------------------------------------------------------------------------- SMAP-32

@dataclasses.dataclass(frozen=True)
class ReducedOperandsDiffer(Failure, rule="SMAP-32", error=Exception,
                            jax_error="ShardingTypeError"):
    template = ("the {primitive} takes operand {k} {how} along {axes}, where another operand "
                "is reduced along {reduced}: {said}")
    hint = ("Give every operand the same reduced axes (gather them all to='reduced'), or "
            "gather the reduced one to='varying'")
    primitive: str
    k: int
    how: str
    axes: tuple
    reduced: tuple
    said: str


@dataclasses.dataclass(frozen=True)
class ReducedInPartlyManualBody(Failure, rule="SMAP-32", error=AssertionError):
    template = ("the {primitive} takes an operand reduced along {reduced} in a shard_map body "
                "that leaves axes automatic: JAX 0.10.2 types no elementwise operation of a "
                "value reduced along manual axes there (it fails a bare assertion)")
    hint = "Make every axis manual (leave axis_names out), or gather to='varying'"
    primitive: str
    reduced: tuple


@rule("SMAP-32", mirrors="jax._src.lax.lax.default_nary_reduced_rule (core.getr reads the "
                         "manual axis type in a body whose axes are all manual, and asserts "
                         "none is reduced in one partly manual)")
def check_reduced_operands(primitive: str, operands: tuple, path: str = "",
                           all_manual: bool = True) -> frozenset:
    """An elementwise operation in a shard_map body is reduced along its operands' reduced axes, which must be the same for each operand, none replicated or varying along them (ShardingTypeError); in a body leaving axes automatic, none may be reduced (AssertionError).

    ``operands`` holds each operand's (varying axes, reduced axes); ``all_manual``: the
    body is manual over every axis. Returns the result's reduced axes.

    >>> R, V = frozenset({"y"}), frozenset({"x"})
    >>> sorted(check_reduced_operands("mul", ((V, R), (V, R))))
    ['y']
    >>> check_reduced_operands("mul", ((V, R), (V, frozenset())))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [SMAP-32]: the mul takes operand 1 replicated along ('y',), where another operand is reduced along ('y',): Inputs cannot be replicated on the same axes that another input is reduced on. ...
    """
    sets = {reduced for _, reduced in operands if reduced}
    if not sets:
        return frozenset()
    first = min(sets, key=sorted)
    if not all_manual:
        raise reject(ReducedInPartlyManualBody(primitive, tuple(sorted(first))), path or None)
    for k, (varying, reduced) in enumerate(operands):
        if len(sets) > 1 and reduced and reduced != first:
            raise reject(ReducedOperandsDiffer(
                primitive, k, "reduced", tuple(sorted(reduced)), tuple(sorted(first)),
                "All inputs should be reduced across the same mesh axes"), path or None)
    for k, (varying, reduced) in enumerate(operands):
        replicated = first - varying - reduced
        if replicated:
            raise reject(ReducedOperandsDiffer(
                primitive, k, "replicated", tuple(sorted(replicated)), tuple(sorted(first)),
                "Inputs cannot be replicated on the same axes that another input is "
                "reduced on"), path or None)
        if varying & first:
            raise reject(ReducedOperandsDiffer(
                primitive, k, "varying", tuple(sorted(varying & first)),
                tuple(sorted(first)), "Inputs cannot be sharded/varying on the same axes "
                "that another input is reduced on"), path or None)
    return first
