"""dot_general's result type over Explicit axes (PROG-7), where JAX traces it and where a
gradient transposes it.

JAX 0.10.2 types a ``dot_general`` by its sharding rule: given ``out_sharding``, the result
is typed by it; otherwise its operands' splits over Explicit axes must agree on the batch
dimensions and on the contracted ones, and a contracted dimension split on both operands
is refused (a ShardingTypeError: the result would be a partial sum, and JAX does not guess
how it should be split), as is one whose result — its batch dimensions, then the lhs's free
ones, then the rhs's, each split as its operand splits it — would name one axis on two
dimensions (``f32[8@y,8] @ f32[8,8@y]``; JAX's "illegally sharded result"). The check applies

* to every ``dot_general`` of a program explained (the ``dot_general`` entry's ``tracing``
  rule), its ``out_sharding`` parameter as given;
* to the dot_general a gradient makes of one (the ``dot_general`` entry's ``transpose``
  rule, which then transposes it as any linear primitive): JAX's transpose contracts the
  cotangent with the other operand over the dimensions the transposed operand kept, and
  asks for the transposed operand's type as ``out_sharding`` — none where that type is
  over no mesh (an unplaced argument outside ``jax.set_mesh``), and then the cotangent and
  the other operand split alike over a contracted dimension (the batch of ``x`` in
  ``x.T @ dy``) are refused, and an accepted product is typed by the ordinary rule
  (:func:`transposed_type`: the gradient of an unplaced weight split as the activations
  it multiplies are).

Standard library only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, rule
from ..core.values import AxisType, PartitionSpec
from .primitives import TRACING, TRANSPOSES

__all__ = ["check_dot_general_type", "AmbiguousContraction", "explicit_split",
           "axis_named_twice", "transposed_dimensions", "transposed_type"]


@dataclasses.dataclass(frozen=True)
class AmbiguousContraction(Failure, rule="PROG-7", error=Exception,
                           jax_error="ShardingTypeError"):
    template = "the dot_general {why}: lhs {lhs} and rhs {rhs} (its dimension numbers {numbers})"
    hint = ("Pass out_sharding= to the matmul (jnp.matmul, jnp.einsum, lax.dot_general), "
            "or reshard an operand so that one side of the contraction is unsplit.")
    why: str
    lhs: str
    rhs: str
    numbers: Any
    path: str


def explicit_split(value: Any, dims: Any = None) -> tuple:
    """The split over Explicit axes of ``value``'s dimensions ``dims`` (every dimension when
    None), one entry each (None: unsplit)."""
    spec = tuple(value.spec or ()) if value.mesh is not None else ()
    dims = range(len(value.shape)) if dims is None else dims
    return tuple(spec[d] if d < len(spec) else None for d in dims)


def axis_named_twice(split: Any) -> str | None:
    """The first axis ``split`` (a result's split, one entry a dimension) names on two
    dimensions, or None: no type may (JAX's DuplicateSpecError, a ShardingTypeError while
    tracing the primitive)."""
    seen: set[str] = set()
    for entry in split:
        for axis in (entry,) if isinstance(entry, str) else entry or ():
            if axis in seen:
                return axis
            seen.add(axis)
    return None


@rule("PROG-7", mirrors="jax._src.lax.lax._dot_general_sharding_rule")
def check_dot_general_type(lhs: Any, rhs: Any, numbers: Any, out_sharding: Any = None,
                           path: str = "") -> None:
    """A dot_general given no out_sharding is refused where its operands' meshes differ, their batch or contracted dimensions are split differently, a contracted dimension is split on both, or its result would split two dimensions over one axis (ShardingTypeError).

    ``lhs`` and ``rhs`` are the operands' types; ``numbers`` the dimension numbers
    ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``. Operands over two
    meshes are refused whatever ``out_sharding``.

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> x = Value.typed((8, 16), mesh=mesh)
    >>> split = dataclasses.replace(x, spec=P("x"))
    >>> check_dot_general_type(split, Value.typed((8, 4), mesh=mesh), (((0,), (0,)), ((), ())))
    >>> check_dot_general_type(split, split, (((0,), (0,)), ((), ())), path="body[2]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [PROG-7] at body[2]: the dot_general contracts dimensions split on both operands, so how its result is split is ambiguous: lhs ('x',) and rhs ('x',) (its dimension numbers (((0,), (0,)), ((), ()))). Pass out_sharding= to the matmul (jnp.matmul, jnp.einsum, lax.dot_general), or reshard an operand so that one side of the contraction is unsplit.
    """
    def refuse(why: str, left: tuple, right: tuple) -> None:
        raise reject(AmbiguousContraction(why, repr(left), repr(right), numbers, path),
                     path or None)
    if lhs.mesh is not None and rhs.mesh is not None and lhs.mesh != rhs.mesh and any(
            t is AxisType.Explicit for m in (lhs.mesh, rhs.mesh) for t in m.axis_types):
        # (over Auto axes alone JAX reads no sharding rule: seen, a dot of a value
        # constrained over a 4x2 mesh and one over a 2x4 mesh of the same devices runs)
        refuse("holds operands over two meshes", (lhs.mesh,), (rhs.mesh,))
    if out_sharding is not None:
        return
    (lc, rc), (lb, rb) = numbers
    for what, left, right in (("batch", explicit_split(lhs, lb), explicit_split(rhs, rb)),
                              ("contracted", explicit_split(lhs, lc), explicit_split(rhs, rc))):
        if any(a is not None and b is not None and a != b for a, b in zip(left, right)):
            refuse(f"splits its {what} dimensions differently", left, right)
    left, right = explicit_split(lhs, lc), explicit_split(rhs, rc)
    if any(a is not None and b is not None for a, b in zip(left, right)):
        refuse("contracts dimensions split on both operands, so how its result is split "
               "is ambiguous", left, right)
    result = _product_split(lhs, rhs, numbers)
    twice = axis_named_twice(result)
    if twice is not None:
        refuse(f"would split two dimensions of its result over {twice!r} (typed "
               f"{result!r})", explicit_split(lhs), explicit_split(rhs))


@TRACING.register("dot_general")
def _trace_dot_general(eq: Any, operands: tuple, context: Any, path: str, decided: list,
                       seen: dict) -> None:
    """A dot_general's result type where JAX traces it (PROG-7)."""
    params = dict(eq.params)
    if len(operands) == 2 and "dimension_numbers" in params:
        check_dot_general_type(operands[0], operands[1], params["dimension_numbers"],
                               _given(params.get("out_sharding")), path)


def _given(sharding: Any) -> Any:
    """An out_sharding parameter as dot_general reads it: one over no mesh is none."""
    mesh = getattr(sharding, "mesh", None)
    return None if sharding is None or mesh is None or not tuple(
        getattr(mesh, "axis_names", ())) else sharding


def transposed_dimensions(numbers: Any, ranks: tuple[int, int], k: int) -> tuple:
    """The dimension numbers of the dot_general JAX's transpose of operand ``k`` makes: the
    cotangent contracted with the other operand over that operand's kept (free)
    dimensions, batched over the batch dimensions (``ranks``: the operands' ranks)."""
    (lc, rc), (lb, rb) = numbers
    if k == 1:   # the rhs: as the lhs of the swapped product, the answer's lhs part first
        lc, rc, lb, rb = rc, lc, rb, lb
        ranks = ranks[::-1]
    kept = [d for d in range(ranks[0]) if d not in lc and d not in lb]
    other = [d for d in range(ranks[1]) if d not in rc and d not in rb]
    start = len(lb) + (0 if k == 1 else len(kept))
    at = tuple(range(start, start + len(other)))
    return ((at, tuple(other)), (tuple(range(len(lb))), tuple(rb)))


def _product_split(lhs: Any, rhs: Any, numbers: Any) -> tuple:
    """The split a dot_general given no out_sharding types its result with (JAX's rule):
    the batch dimensions as the lhs splits them, then the lhs's free dimensions, then the
    rhs's, each as its operand splits it."""
    (lc, rc), (lb, rb) = numbers
    free_l = [d for d in range(len(lhs.shape)) if d not in lc and d not in lb]
    free_r = [d for d in range(len(rhs.shape)) if d not in rc and d not in rb]
    return explicit_split(lhs, lb) + explicit_split(lhs, free_l) + explicit_split(rhs, free_r)


def transposed_type(operand: Any, cotangent: Any, other: Any, numbers: Any, k: int) -> Any:
    """The type of the cotangent JAX's transpose gives operand ``k`` of a dot_general whose
    type is over no mesh (an unplaced argument outside ``jax.set_mesh``): dot_general then
    drops the out_sharding it is asked for, so the product of ``cotangent`` and ``other`` is
    split by the ordinary rule and transposed back to the operand's dimensions; ``operand``
    itself where neither factor is over a mesh.

    >>> from shardlaw.spec.program.description import Value
    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> h = dataclasses.replace(Value.typed((8, 16), mesh=mesh), spec=P(None, "y"))
    >>> dy = Value.typed((8, 32), mesh=mesh)
    >>> transposed_type(Value.typed((16, 32)), dy, h, (((1,), (0,)), ((), ())), 1)
    <float32[16x32] over AbstractMesh({'x': 2, 'y': 4}, types=('Explicit', 'Explicit')) split P('y')>
    """
    mesh = cotangent.mesh if cotangent.mesh is not None else other.mesh
    if operand.mesh is not None or mesh is None:
        return operand
    rank = len(operand.shape)
    ranks = (rank, len(other.shape)) if k == 0 else (len(other.shape), rank)
    split = _product_split(cotangent, other, transposed_dimensions(numbers, ranks, k))
    (lc, rc), (lb, rb) = numbers
    own, theirs, batch = (lc, rc, lb) if k == 0 else (rc, lc, rb)
    free = [d for d in range(rank) if d not in own and d not in batch]
    by_other = [own[i] for i in sorted(range(len(own)), key=lambda i: theirs[i])]
    order = list(batch) + free + by_other   # the product's dimensions, as the operand's
    entries = [split[order.index(d)] for d in range(rank)]
    return dataclasses.replace(operand, mesh=mesh, spec=PartitionSpec(*entries))


@TRANSPOSES.register("dot_general")
def _transpose_dot_general(eq: Any, body: Any, incoming: list, flags: list, number: dict,
                           path: str, types: tuple) -> list:
    """A dot_general transposed as any linear primitive (``transposed_dot_general``),
    each transposed product told which operand it transposes and whether that operand's
    type is over a mesh (then JAX asks for it as out_sharding): PROG-7 where traced."""
    first = len(body.equations)
    out = TRANSPOSES.rules["opaque"](eq, body, incoming, flags, number, path, types)
    linear = iter(out)
    numbers = dict(eq.params).get("dimension_numbers")
    for i in range(first, len(body.equations)):
        made = body.equations[i]
        if getattr(made, "primitive", "") == "transposed_dot_general":
            n, at = next(linear, (None, None))
            if n is None:
                break
            k = eq.operands.index(n)
            result = made.results[0]
            if numbers is not None and len(made.operands) == 2 and types[n].mesh is None:
                derived = transposed_type(types[n], *(body.types[m] for m in made.operands),
                                          numbers, k)
                if derived is not types[n]:
                    result = body.types[at] = dataclasses.replace(
                        derived, weak_type=result.weak_type, varying=result.varying)
            body.equations[i] = dataclasses.replace(made, results=(result,), params=tuple(
                made.params) + (("transposed_operand", k),
                                ("operand_typed", types[n].mesh is not None)))
    return out


@TRACING.register("transposed_dot_general")
def _trace_transposed_dot_general(eq: Any, operands: tuple, context: Any, path: str,
                                  decided: list, seen: dict) -> None:
    """The dot_general JAX's transpose makes, typed where traced (PROG-7): the cotangent
    and the other operand contracted over the transposed operand's kept dimensions, given
    an out_sharding where that operand is typed over a mesh or a context mesh is set."""
    params = dict(eq.params)
    k, numbers = params.get("transposed_operand"), params.get("dimension_numbers")
    if k is None or numbers is None or len(operands) != 2:
        return
    rank, other = len(eq.results[0].shape), len(operands[1].shape)
    ranks = (rank, other) if k == 0 else (other, rank)
    given = params.get("operand_typed") or context is not None
    check_dot_general_type(operands[0], operands[1], transposed_dimensions(numbers, ranks, k),
                           True if given else None, path)
