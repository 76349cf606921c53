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
import re
from typing import Any

from .primitives import Factors, NotPropagated

__all__ = ["SHARDING_RULES", "SHARDING_ONLY", "elementwise_factors", "dot_general_factors",
           "transposed_dot_general_factors",
           "reduction_factors", "transpose_factors", "broadcast_in_dim_factors",
           "broadcast_factors",
           "reshape_factors", "ELEMENTWISE_NAMES", "SHARDING_ONLY_ELEMENTWISE",
           "same_dimensions_factors", "squeeze_factors",
           "expand_dims_factors", "iota_factors", "dynamic_slice_factors",
           "dynamic_update_slice_factors", "gather_factors", "scatter_factors",
           "dimension_numbers", "factors_of_dimension", "scalar_placement_factors", "sort_factors"]


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


def transposed_dot_general_factors(eq: Any, operands: tuple) -> Factors:
    """A gradient's product of the cotangent and the other operand, giving the operand it
    transposes (JAX's transpose: a dot_general then a transpose): the cotangent has the
    primal's result factors, the other operand its own, the result the transposed
    operand's; the other operand's free factors are reduced, the rest pass through."""
    k = _params(eq)["transposed_operand"]
    primal = (eq.results[0], operands[1])[::1 if k == 0 else -1]
    rule = dot_general_factors(eq, primal)
    kept, other = rule.operands[k], rule.operands[1 - k]
    return Factors((rule.results[0], other), (kept,),
                   reduced=frozenset(f for f in other if f not in kept))


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
    return broadcast_factors(tuple(operands[0].shape), tuple(params["shape"]),
                             tuple(params["broadcast_dimensions"]))


def broadcast_factors(before: tuple, shape: tuple, where: tuple) -> Factors:
    """A broadcast of ``before`` to ``shape``, operand dimension ``i`` at ``where[i]``: the
    factors :func:`broadcast_in_dim_factors` reads from its equation."""
    result = list(_dims("r", len(shape)))
    operand, replicated = [], set()
    for i, size in enumerate(before):
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
    shapes = (before, after)
    rests = (list(before), list(after))
    dims: tuple[list[list[str]], ...] = ([[] for _ in before], [[] for _ in after])
    at = [0, 0]
    sizes: dict[str, int] = {}
    while at[0] < len(before) or at[1] < len(after):
        # a dimension used up (or of size 1) on either side: a size-1 one is its own factor
        done = [s for s in (0, 1) if at[s] < len(shapes[s]) and rests[s][at[s]] == 1]
        if done:
            side, k = done[0], at[done[0]]
            if shapes[side][k] == 1:
                sizes[f"f{len(sizes)}"] = 1
                dims[side][k].append(f"f{len(sizes) - 1}")
            at[side] += 1
            continue
        if at[0] >= len(before) or at[1] >= len(after):
            return None
        a, b = rests[0][at[0]], rests[1][at[1]]
        size = min(a, b)
        if max(a, b) % size:
            return None
        name = f"f{len(sizes)}"
        sizes[name] = size
        for side in (0, 1):
            dims[side][at[side]].append(name)
            rests[side][at[side]] //= size
    return [tuple(fs) for fs in dims[0]], [tuple(fs) for fs in dims[1]], sizes


def same_dimensions_factors(eq: Any, operands: tuple) -> Factors:
    """Every operand and result of the result's rank has one factor per dimension, shared
    by all of them even where the sizes differ (concatenate's, slice's and pad's dimensions,
    a sort's or a cumulative operation's own dimension: seen passed through on 8 CPU
    devices); an operand of another rank (a scalar: a pad's value, an index) has none."""
    rank = len(eq.results[0].shape)
    dims = _dims("f", rank)
    tensors = tuple(dims if len(v.shape) == rank else () for v in operands)
    return Factors(tensors, tuple(dims for _ in eq.results))


def sort_factors(eq: Any, operands: tuple) -> Factors:
    """Every operand and result of a sort shares one factor per dimension but the sorted
    one, which stays unsplit and is named ``n…``: split anyway (a placed operand), the
    partitioner moves or gathers it by its own choice (seen: a rank-1 sort on 'x' comes
    back P(), a rank-2 one P('x', 'y')), which propagation leaves undetermined."""
    rank = len(eq.results[0].shape)
    dims = tuple("n0" if d == _params(eq)["dimension"] % rank else f"f{d}"
                 for d in range(rank))
    return Factors(tuple(dims for _ in operands), tuple(dims for _ in eq.results),
                   replicated=frozenset(("n0",)))


def squeeze_factors(eq: Any, operands: tuple) -> Factors:
    """A squeezed dimension (of size 1) is an operand factor that stays unsplit; every other
    passes to the result in order."""
    gone = {d % len(operands[0].shape) for d in _params(eq)["dimensions"]}
    dims = tuple(f"o{d}" if d in gone else f"f{d}" for d in range(len(operands[0].shape)))
    return Factors((dims,), (tuple(f for f in dims if f[0] == "f"),),
                   replicated=frozenset(f for f in dims if f[0] == "o"))


def expand_dims_factors(eq: Any, operands: tuple) -> Factors:
    """The operand's dimensions pass to the result's dimensions not named in
    ``dimensions``, in order; a new dimension is a result factor of its own."""
    rank = len(eq.results[0].shape)
    new = {d % rank for d in _params(eq)["dimensions"]}
    result = _dims("r", rank)
    kept = tuple(result[d] for d in range(rank) if d not in new)
    return Factors((kept,), (result,))


def iota_factors(eq: Any, operands: tuple) -> Factors:
    """An iota has no operand: each result dimension is a factor of its own."""
    return Factors((), (_dims("f", len(eq.results[0].shape)),))


def _kept_or_own(dims: tuple[str, ...], shape: tuple, full: tuple, prefix: str
                 ) -> tuple[tuple[str, ...], set]:
    """``dims`` where ``shape`` keeps the ``full`` size, else a factor of its own that
    stays unsplit."""
    out = tuple(f if n == m else f"{prefix}{d}"
                for d, (f, n, m) in enumerate(zip(dims, shape, full)))
    return out, {f for f in out if f not in dims}


def dynamic_slice_factors(eq: Any, operands: tuple) -> Factors:
    """A dimension sliced whole is one factor of the operand and the result; one sliced
    shorter is an unsplit factor of each (where the slice starts is a value); the start
    indices (scalars) have none."""
    shape = tuple(operands[0].shape)
    dims = _dims("f", len(shape))
    result, own = _kept_or_own(dims, tuple(_params(eq)["slice_sizes"]), shape, "r")
    operand = tuple(f if f in result else f"o{d}" for d, f in enumerate(dims))
    own |= {f for f in operand if f not in dims}
    return Factors((operand,) + ((),) * (len(operands) - 1), (result,),
                   replicated=frozenset(own))


def dynamic_update_slice_factors(eq: Any, operands: tuple) -> Factors:
    """The operand and the result share one factor per dimension; the update shares it
    where it is of the operand's size, else has an unsplit factor of its own; the start
    indices (scalars) have none."""
    shape = tuple(operands[0].shape)
    dims = _dims("f", len(shape))
    update, own = _kept_or_own(dims, tuple(operands[1].shape), shape, "u")
    return Factors((dims, update) + ((),) * (len(operands) - 2), (dims,),
                   replicated=frozenset(own))


def dimension_numbers(value: Any, fields: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """A gather's or scatter's dimension numbers, from the object or from its repr as a
    description holds it (``GatherDimensionNumbers(offset_dims=(1,), ...)``)."""
    if not isinstance(value, str):
        return {f: tuple(getattr(value, f)) for f in fields}
    value = re.sub(r"np\.\w+\((-?\d+)\)", r"\1", value)   # numpy 2 writes np.int64(0)
    found = dict(re.findall(r"(\w+)=\(([^)]*)\)", value))
    return {f: tuple(int(n) for n in found[f].replace(",", " ").split()) for f in fields}


_GATHER = ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
           "start_indices_batching_dims")


def gather_factors(eq: Any, operands: tuple) -> Factors:
    """A gather's operand dimension taken whole (an offset dimension) is one factor with its
    result dimension; an indexed or sliced-shorter dimension is an unsplit factor of the
    operand; the indices' batch dimensions are factors with the result's others (an operand
    batching dimension joins its indices one); the index vector stays unsplit."""
    params = _params(eq)
    n = dimension_numbers(params["dimension_numbers"], _GATHER)
    shape, indices = tuple(operands[0].shape), tuple(operands[1].shape)
    sizes = tuple(params["slice_sizes"])
    operand = [f"o{d}" if d in n["start_index_map"] or d in n["collapsed_slice_dims"]
               or sizes[d] != shape[d] else f"f{d}" for d in range(len(shape))]
    index = [f"i{d}" for d in range(len(indices) - 1)] + ["v"]
    for a, b in zip(n["operand_batching_dims"], n["start_indices_batching_dims"]):
        operand[a] = index[b]
    offsets = [operand[d] for d in range(len(shape)) if d not in n["collapsed_slice_dims"]
               and d not in n["operand_batching_dims"]]
    batch = iter(index[:-1])
    offset = iter(offsets)
    result = tuple(next(offset) if d in n["offset_dims"] else next(batch)
                   for d in range(len(eq.results[0].shape)))
    replicated = {f for f in operand if f[0] == "o"} | {"v"}
    return Factors((tuple(operand), tuple(index)), (result,),
                   replicated=frozenset(replicated))


_SCATTER = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
            "operand_batching_dims", "scatter_indices_batching_dims")


def scatter_factors(eq: Any, operands: tuple) -> Factors:
    """A scatter's operand and result share one factor per dimension; an update window
    dimension of the operand's size shares its operand dimension's (else an unsplit factor
    of its own); the update's scatter dimensions are the indices' batch dimensions; the
    index vector stays unsplit."""
    n = dimension_numbers(_params(eq)["dimension_numbers"], _SCATTER)
    shape, indices, updates = (tuple(v.shape) for v in operands[:3])
    dims = _dims("f", len(shape))
    index = [f"i{d}" for d in range(len(indices) - 1)] + ["v"]
    for a, b in zip(n["operand_batching_dims"], n["scatter_indices_batching_dims"]):
        index[b] = dims[a]
    windows = iter(d for d in range(len(shape)) if d not in n["inserted_window_dims"]
                   and d not in n["operand_batching_dims"])
    batch = iter(index[:-1])
    update = []
    for d, size in enumerate(updates):
        if d in n["update_window_dims"]:
            w = next(windows)
            update.append(dims[w] if size == shape[w] else f"u{d}")
        else:
            update.append(next(batch))
    replicated = {f for f in update if f[0] == "u"} | {"v"}
    return Factors((dims, tuple(index), tuple(update)), (dims,),
                   replicated=frozenset(replicated))


ELEMENTWISE_NAMES = ("neg", "sin", "cos", "tan", "exp", "log", "tanh", "abs", "sign", "sqrt",
                     "rsqrt", "logistic", "floor", "ceil", "round", "copy", "copy_p",
                     "integer_pow", "square", "convert_element_type", "reduce_precision",
                     "add", "sub", "mul", "div", "max", "min", "pow", "add_any")

# Elementwise primitives the table holds for their sharding rule only (comparisons,
# logical operations, select_n, clamp ...): every other rewrite treats them as opaque.
SHARDING_ONLY_ELEMENTWISE = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not", "xor",
                             "select_n", "clamp", "rem", "atan2", "log1p", "expm1",
                             "is_finite", "exp2", "asin", "acos", "atan", "sinh", "cosh",
                             "nextafter", "stop_gradient")

# The primitives of SHARDING_RULES the table declares for their sharding rule alone
# (primitives.py): the other rewrites treat them as a primitive without an entry.
SHARDING_ONLY = tuple(dict.fromkeys(
    list(SHARDING_ONLY_ELEMENTWISE)
    + ["concatenate", "slice", "pad", "sort", "cumsum", "cumprod", "cummax", "cummin",
       "cumlogsumexp", "argmax", "argmin", "iota", "dynamic_slice",
       "dynamic_update_slice", "gather", "scatter", "scatter-add", "scatter_add",
       "scatter-mul", "scatter_mul", "scatter-min", "scatter_min", "scatter-max",
       "scatter_max"]))


def _described(rule: Any, params: tuple[str, ...], operands: int | None,
               results: int | None = 1) -> Any:
    """``rule`` where the equation holds ``params`` and ``operands`` operands (None: one or
    more) with ``results`` results (None: one or more), as JAX binds the primitive; an
    equation a rewrite made without them (AD's seeds) has no factors read from it."""
    def read(eq: Any, types: tuple) -> Factors | NotPropagated:
        given = _params(eq)
        count_ok = len(types) >= 1 if operands is None else len(types) == operands
        made = len(eq.results or ())
        made_ok = made >= 1 if results is None else made == results
        if not (count_ok and made_ok and all(p in given for p in params)):
            return NotPropagated(f"its equation lacks what its factors are read from "
                                 f"(parameters {list(params)}, operands, one result)")
        return rule(eq, types)
    read.__doc__, read.__name__ = rule.__doc__, rule.__name__
    return read


def _or_a_literals(read: Any) -> Any:
    """``read``, or, for an equation of no operand and one result (a literal scalar
    broadcast, ``jnp.zeros``: the description keeps no literal), each result dimension a
    factor of its own, as an iota's (PROP-16 copies it for each use); alike for one of a
    scalar operand AD's transpose of a full sum makes without its parameters."""
    def either(eq: Any, types: tuple) -> Factors | NotPropagated:
        if not types and len(eq.results or ()) == 1:
            return iota_factors(eq, types)
        if len(types) == 1 and not types[0].shape and len(eq.results or ()) == 1:
            return Factors(((),), (_dims("r", len(eq.results[0].shape)),))
        return read(eq, types)
    either.__doc__, either.__name__ = read.__doc__, read.__name__
    return either


_BY_THE_PASS = NotPropagated("propagated by the program's pass itself, not by a rule of its "
                             "own (PROP-6: an inner jit's body is inlined, a constraint fixes "
                             "its value)")
_FLOW = NotPropagated("propagated by the program's pass through its bodies "
                      "(propagation_flow.py: a loop's carry, a scan's slices, a cond's "
                      "branches, a call inlined)")
_MANUAL = NotPropagated("a collective of a shard_map's body, over manual axes: the partitioner "
                        "does not propagate inside a shard_map, and the spec does not enter "
                        "its body")
def scalar_placement_factors(eq: Any, operands: tuple) -> Factors | NotPropagated:
    """A placement of scalars (AD's seed of a gradient, ``reshard 1.0``) has nothing to
    split; one of arrays is not propagated yet."""
    if any(v.shape for v in operands):
        return NotPropagated(f"a {eq.kind} of arrays inside jit is not propagated yet")
    return Factors(tuple(() for _ in operands), tuple(() for _ in operands))


_NOT_YET = {
    "shard_map": "propagated by the program's pass at its boundary (PROP-6, every axis "
                 "manual) or through its body (PROP-11, axes left automatic); the "
                 "collectives at and inside a shard_map are not predicted yet",
    "get": "a mutable ref's read is not propagated (refs are placed where they are made)",
    "swap": "a mutable ref's write is not propagated (refs are placed where they are made)",
    "addupdate": "a mutable ref's write is not propagated (refs are placed where they are "
                 "made)",
}

# primitive name -> its sharding rule (the table's ``sharding`` slot).
SHARDING_RULES: dict[str, Any] = {
    "jit": _BY_THE_PASS, "sharding_constraint": _BY_THE_PASS,
    **{name: _FLOW for name in ("scan", "while", "cond", "remat2", "custom_jvp_call",
                                "custom_vjp_call")},
    **{name: NotPropagated(why) for name, why in _NOT_YET.items()},
    "device_put": scalar_placement_factors, "reshard": scalar_placement_factors,
    **{name: _MANUAL for name in ("psum", "psum_invariant", "pmax", "pmin", "pvary",
                                  "axis_index", "all_gather", "reduce_scatter", "all_to_all",
                                  "ppermute", "pcast", "all_gather_invariant", "psum_scatter",
                                  "all_gather_reduced")},
    **{name: _described(elementwise_factors, (), None) for name in ELEMENTWISE_NAMES},
    # (checkpoint_name: lowering emits nothing, so propagation folds it to its operand)
    "name": _described(elementwise_factors, (), None),
    "dot_general": _described(dot_general_factors, ("dimension_numbers",), 2),
    "transposed_dot_general": _described(transposed_dot_general_factors,
                                         ("dimension_numbers", "transposed_operand"), 2),
    **{name: _described(reduction_factors, ("axes",), 1)
       for name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")},
    "transpose": _described(transpose_factors, ("permutation",), 1),
    "broadcast_in_dim": _or_a_literals(_described(broadcast_in_dim_factors,
                                                  ("shape", "broadcast_dimensions"), 1)),
    "reshape": _described(reshape_factors, ("new_sizes",), 1),
    **{name: _described(elementwise_factors, (), None) for name in SHARDING_ONLY_ELEMENTWISE},
    **{name: _described(same_dimensions_factors, (), None)
       for name in ("concatenate", "slice", "pad", "cumsum", "cumprod", "cummax",
                    "cummin", "cumlogsumexp")},
    "sort": _described(sort_factors, ("dimension",), None, results=None),
    **{name: _described(reduction_factors, ("axes",), 1) for name in ("argmax", "argmin")},
    "squeeze": _described(squeeze_factors, ("dimensions",), 1),
    "expand_dims": _described(expand_dims_factors, ("dimensions",), 1),
    "iota": _described(iota_factors, (), 0),
    "dynamic_slice": _described(dynamic_slice_factors, ("slice_sizes",), None),
    "dynamic_update_slice": _described(dynamic_update_slice_factors, (), None),
    "gather": _described(gather_factors, ("dimension_numbers", "slice_sizes"), 2),
    **{name: _described(scatter_factors, ("dimension_numbers",), 3)
       for name in ("scatter", "scatter-add", "scatter_add", "scatter-mul", "scatter_mul",
                    "scatter-min", "scatter_min", "scatter-max", "scatter_max")},
}
