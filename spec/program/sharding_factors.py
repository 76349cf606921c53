"""The primitives' sharding rules (issue 33): how each one's operand and result dimensions
map to factors, as the partitioner (Shardy, on by default in jax 0.10.2) declares an
``OpShardingRule`` per operation. Read by :mod:`~shardlaw.spec.program.propagation`.

A rule is a :class:`~shardlaw.spec.program.primitives.Factors` or a function of the
equation and its operands' types giving one (or a
:class:`~shardlaw.spec.program.primitives.NotPropagated` where the shapes admit none).
The module fills the table's ``sharding`` slots (:data:`SHARDING_RULES`, read at the end
of :mod:`~shardlaw.spec.program.primitives`); every entry it does not name keeps
``NOT_PROPAGATED_YET``. Standard library only.

>>> from shardlaw.spec.program.description import Opaque, Value
>>> dot = Opaque((0, 1), primitive="dot_general", results=(Value.typed((4, 16)),),
...              params=(("dimension_numbers", (((1,), (0,)), ((), ()))),))
>>> rule = dot_general_factors(dot, (Value.typed((4, 8)), Value.typed((8, 16))))
>>> rule.operands, rule.results, sorted(rule.reduced)
((('l0', 'c0'), ('c0', 'r1')), (('l0', 'r1'),), ['c0'])
>>> reshape_factors(Opaque((0,), primitive="reshape", results=(Value.typed((4, 128)),),
...     params=(("dimensions", None), ("new_sizes", (4, 128)))), (Value.typed((16, 32)),))
Factors(operands=(('f0*f1', 'f2'),), results=(('f0', 'f1*f2'),), reduced=frozenset(), replicated=frozenset(), sizes=(('f0', 4), ('f1', 4), ('f2', 32)))
"""

from __future__ import annotations

import math
from typing import Any

from .primitives import Factors, NotPropagated

__all__ = ["SHARDING_RULES", "elementwise_factors", "dot_general_factors",
           "reduction_factors", "transpose_factors", "broadcast_in_dim_factors",
           "reshape_factors"]


def _params(eq: Any) -> dict:
    return dict(getattr(eq, "params", ()))


def _dims(prefix: str, rank: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{d}" for d in range(rank))


def elementwise_factors(eq: Any, operands: tuple) -> Factors:
    """Each result dimension is one factor with the same dimension of every operand of the
    result's rank, unless that operand's is of size 1 broadcast to a larger size (then a
    factor of its own that stays unsplit); a rank-0 operand (a scalar literal) has none."""
    shape = eq.results[0].shape
    dims, replicated = _dims("f", len(shape)), set()
    tensors = []
    for k, v in enumerate(operands):
        if len(v.shape) != len(shape):
            tensors.append(())
            continue
        own = tuple(f if n == size else f"o{k}_{d}"
                    for d, (f, n, size) in enumerate(zip(dims, v.shape, shape)))
        replicated.update(f for f in own if f not in dims)
        tensors.append(own)
    return Factors(tuple(tensors), (dims,), replicated=frozenset(replicated))


def dot_general_factors(eq: Any, operands: tuple) -> Factors:
    """A batch dimension is one factor of both operands and the result, a contracting one a
    reduced factor of both operands, and a free dimension its own factor passed to the
    result (batch, then the left operand's free, then the right's)."""
    (lc, rc), (lb, rb) = _params(eq)["dimension_numbers"]
    lhs, rhs = (len(v.shape) for v in operands)
    left = [f"l{d}" for d in range(lhs)]
    right = [f"r{d}" for d in range(rhs)]
    for k, (a, b) in enumerate(zip(lb, rb)):
        left[a] = right[b] = f"b{k}"
    for k, (a, b) in enumerate(zip(lc, rc)):
        left[a] = right[b] = f"c{k}"
    free_left = [left[d] for d in range(lhs) if d not in lb and d not in lc]
    free_right = [right[d] for d in range(rhs) if d not in rb and d not in rc]
    result = tuple(f"b{k}" for k in range(len(lb))) + tuple(free_left + free_right)
    return Factors((tuple(left), tuple(right)), (result,),
                   reduced=frozenset(f"c{k}" for k in range(len(lc))))


def reduction_factors(eq: Any, operands: tuple) -> Factors:
    """An operand dimension named in ``axes`` is a reduced factor; every other passes to the
    result in order."""
    axes = set(_params(eq)["axes"])
    dims = _dims("f", len(operands[0].shape))
    return Factors((dims,), (tuple(f for d, f in enumerate(dims) if d not in axes),),
                   reduced=frozenset(dims[d] for d in axes))


def transpose_factors(eq: Any, operands: tuple) -> Factors:
    """Result dimension ``i`` is the factor of operand dimension ``permutation[i]``."""
    dims = _dims("f", len(operands[0].shape))
    return Factors((dims,), (tuple(dims[p] for p in _params(eq)["permutation"]),))


def broadcast_in_dim_factors(eq: Any, operands: tuple) -> Factors:
    """Operand dimension ``i`` is one factor with result dimension
    ``broadcast_dimensions[i]`` unless it is of size 1 broadcast to a larger size (then a
    factor of its own that stays unsplit); every other result dimension is a factor of the
    result alone."""
    params = _params(eq)
    shape, where = params["shape"], params["broadcast_dimensions"]
    result = list(_dims("r", len(shape)))
    operand, replicated = [], set()
    for i, size in enumerate(operands[0].shape):
        if size == 1 and shape[where[i]] != 1:
            operand.append(f"o{i}")
            replicated.add(f"o{i}")
        else:
            operand.append(result[where[i]])
    return Factors((tuple(operand),), (tuple(result),), replicated=frozenset(replicated))


def reshape_factors(eq: Any, operands: tuple) -> Factors | NotPropagated:
    """Operand and result shapes are cut into the coarsest common factors, major to minor,
    each dimension the product of its factors'; a reshape whose shapes admit no such cut
    (a size of one side divides none of the other's) has no rule."""
    params = _params(eq)
    if params.get("dimensions") is not None:
        return NotPropagated("a reshape that transposes first (dimensions) is not written")
    before, after = tuple(operands[0].shape), tuple(params["new_sizes"])
    cut = _common_factors(before, after)
    if cut is None:
        return NotPropagated(f"the reshape {list(before)} -> {list(after)} has no common "
                             f"factors the partitioner keeps a split through")
    operand_dims, result_dims, sizes = cut
    return Factors((tuple("*".join(fs) for fs in operand_dims),),
                   (tuple("*".join(fs) for fs in result_dims),),
                   sizes=tuple(sizes.items()))


def factors_of_dimension(name: str) -> tuple[str, ...]:
    """The factors a dimension's name joins, major first (a reshape's ``f0*f1``)."""
    return tuple(name.split("*"))


def _common_factors(before: tuple[int, ...], after: tuple[int, ...]):
    """The coarsest factors both shapes are products of, major to minor (None: none)."""
    if math.prod(before) != math.prod(after):
        return None
    i = j = 0
    left: list[list[str]] = [[] for _ in before]
    right: list[list[str]] = [[] for _ in after]
    rest_left = list(before)
    rest_right = list(after)
    sizes: dict[str, int] = {}
    count = 0
    while i < len(before) or j < len(after):
        if i < len(before) and rest_left[i] == 1:
            if before[i] == 1:
                name = f"f{count}"
                count += 1
                left[i].append(name)
                sizes[name] = 1
            i += 1
            continue
        if j < len(after) and rest_right[j] == 1:
            if after[j] == 1:
                name = f"f{count}"
                count += 1
                right[j].append(name)
                sizes[name] = 1
            j += 1
            continue
        if i >= len(before) or j >= len(after):
            return None
        a, b = rest_left[i], rest_right[j]
        size = min(a, b)
        if max(a, b) % size:
            return None
        name = f"f{count}"
        count += 1
        sizes[name] = size
        left[i].append(name)
        right[j].append(name)
        rest_left[i] //= size
        rest_right[j] //= size
    return [tuple(fs) for fs in left], [tuple(fs) for fs in right], sizes


ELEMENTWISE_NAMES = ("neg", "sin", "cos", "tan", "exp", "log", "tanh", "abs", "sign", "sqrt",
                     "rsqrt", "logistic", "floor", "ceil", "round", "copy", "copy_p",
                     "integer_pow", "square", "convert_element_type", "reduce_precision",
                     "add", "sub", "mul", "div", "max", "min", "pow", "add_any")

def _described(rule: Any, params: tuple[str, ...], operands: int | None) -> Any:
    """``rule`` where the equation holds ``params`` and ``operands`` operands (None: one or
    more) with one result, as JAX binds the primitive; an equation a rewrite made without
    them (AD's seeds) has no factors read from it."""
    def read(eq: Any, types: tuple) -> Factors | NotPropagated:
        given = _params(eq)
        count_ok = len(types) >= 1 if operands is None else len(types) == operands
        if not (count_ok and len(eq.results or ()) == 1 and all(p in given for p in params)):
            return NotPropagated(f"its equation lacks what its factors are read from "
                                 f"(parameters {list(params)}, operands, one result)")
        return rule(eq, types)
    read.__doc__, read.__name__ = rule.__doc__, rule.__name__
    return read


# primitive name -> its sharding rule (the table's ``sharding`` slot).
SHARDING_RULES: dict[str, Any] = {
    **{name: _described(elementwise_factors, (), None) for name in ELEMENTWISE_NAMES},
    "dot_general": _described(dot_general_factors, ("dimension_numbers",), 2),
    **{name: _described(reduction_factors, ("axes",), 1)
       for name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")},
    "transpose": _described(transpose_factors, ("permutation",), 1),
    "broadcast_in_dim": _described(broadcast_in_dim_factors,
                                   ("shape", "broadcast_dimensions"), 1),
    "reshape": _described(reshape_factors, ("new_sizes",), 1),
}
