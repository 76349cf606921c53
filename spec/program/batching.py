"""``jax.vmap`` of a whole program, as a rewrite of its :class:`~shardlaw.spec.program.description.Program`.

:func:`vmap_program` answers what ``jax.vmap(jax.jit(f, ...), in_axes, out_axes,
axis_size=..., spmd_axis_name=...)`` amounts to when called on batched arguments, as a
Program that :func:`~shardlaw.spec.program.explain.explain_program` answers. The program
given describes the jit call on one example: its inputs are the arguments of one example
(their shardings and committedness as the user holds them). The batched arguments are
those, each mapped input with a dimension of ``axis_size`` inserted at its axis, placed as
the example is with that dimension unsplit (a NamedSharding's spec gains ``None`` there; a
SingleDeviceSharding stays; a numpy array stays a numpy array). A value's type keeps its
split over Explicit axes (``Value.spec``) through the rewrite: unsplit along an inserted
batch dimension, permuted by a ``transpose``, as JAX's batched types are. ``axis_size`` is the batch
size and must be given: the description of one example does not hold it.

vmap traces the jit call on one example's types first (the rules :func:`trace_body`
applies, and the jit's shardings against the example's shapes, FIT-1), then batches its
body equation by equation, the way JAX 0.10.2's batching rules do:

* an equation none of whose operands is batched stays as it is (batchedness is tracked
  per value: an input mapped with ``None`` stays unbatched, and so does all that follows
  from it alone), except that vmap walks a jit's body and checks a shard_map's specs
  whatever their operands;
* ``jit``: its body batched first, then its ``in_shardings`` and ``out_shardings`` at the
  batch axis of each operand and result (:func:`~shardlaw.spec.batch_sharding`: BAT-1 to
  BAT-7); the batched equation is marked unchecked, for JAX checks a jit's shardings
  against its values (FIT-1) only when the jitted function is traced, so a batch that the
  spmd axes split unevenly passes;
* ``sharding_constraint``: the constraint batched (WSC-7); on a concrete mesh with
  ``spmd_axis_name`` and no dimension left to the compiler JAX reads the batched spec back
  from its HLO sharding, so it holds no trailing ``None``;
* ``device_put``: its targets unchanged, applied to the batched operand (which a target may
  now split along the batch dimension, unevenly too: JAX checks a target only when
  ``jax.device_put`` is called, so the batched equation is marked unchecked); a target
  split over Explicit axes types the batched value as it reads, and that split must divide
  it (ARG-4 while vmap traces);
* ``reshard``: ``None`` inserted in its spec at the batch axis;
* ``shard_map``: each batched operand's and result's spec gains the batch dimension
  (unsplit, or split over ``spmd_axis_name``, which its specs may not use: PBAT-1, and
  which under check_vma must be manual in it: PBAT-2); the body is batched over the
  per-shard batch (the batch size divided by the spmd axes' sizes, rounded down), and
  under check_vma a broadcasting operation's operands are cast to vary along the spmd
  axes, those of the vmaps this one is inside included (PBAT-3). The batched equation is
  marked unchecked (``ShardMap.checked``): JAX checks a shard_map's specs against its
  operands when the user calls it, not when vmap binds it, so a batch the spmd axes split
  unevenly is traced (its results put together from the rounded-down shards) and refused
  by the compiler at lower (SMAP-8);
* any other primitive (:class:`Opaque`): elementwise primitives and the reductions keep
  their operands' batch axis (an unbatched operand may be a scalar), their results typed
  from the batched operands' split (which a batched device_put may have put on the batch
  dimension), a reduction's less the reduced dimensions; ``all_gather``,
  ``psum_scatter`` and ``all_to_all`` move their dimension parameters past it; ``transpose`` and ``broadcast_in_dim`` put it first, a
  ``broadcast_in_dim`` moving it there with a ``transpose`` first. Others are refused
  (PROG-0): the spec does not know their batching.

After the call vmap moves each result's batch axis to ``out_axes``: a ``transpose`` for a
batched result whose axis differs, a ``broadcast_in_dim`` for an unbatched result (a
mapped result with ``out_axes`` None is refused, BAT-0). Then the vmapped function is not
one jit call: the answer is the program ``describe_program`` reads from it, ``jax.jit`` of
the function, whose body is the batched jit equation followed by those moves. A program of
that form (no options, one jit equation over its inputs followed by moves only) is read
back as the eager function it describes when vmapped again, so vmap_program composes.
JAX traces nested vmaps together, though: :func:`nested_vmap_program` batches the jit by
each vmap before any vmap's moves (a refusal of the jit under an outer vmap comes before
the inner ``out_axes``'s), and reads each vmap's moves from a result's type as that vmap
sees it (a broadcast is bound with that type, which the vmaps outside it keep, unsplit
along their batch dimensions).

The answer is marked unchecked (``Program.checked``): vmapped again, its example's checks
are not made again (JAX made them on the first example, and the batched shardings may now
split a batch unevenly, which only running the call refuses): ``explain_program`` checks
neither its options nor its shardings' fit at the call, and divides each kept input and
each result when it is lowered (FIT-3), as JAX does with the call its batching rule binds.

A refusal is the rule's :class:`~shardlaw.spec.core.rules.Rejection` at stage ``trace``,
located at the equation (``body[3]``, ``body[0].jit.body[1]``,
``body[0].jit.in_shardings[0]``; the top-level jit's own shardings at ``in_shardings[0]``,
``out_shardings[0]``). Arguments split over Explicit mesh axes (BAT-9) are not described.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.rules import located, require, staged
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding
from ..core.values import AbstractMesh, Mesh, PartitionSpec
from ..jit.matching import check_fits
from ..transforms.arguments import place_on_devices
from ..transforms.batching import (
    BadVmapParameter, BadVmapParameterType, batch_sharding, check_not_reduced_when_moved,
    check_vmap_parameters,
)
from ..transforms.constraint import Constraint, batch_constraint
from ..transforms.shardmap_bodies import collective_varying
from .description import (
    DevicePut, Equation, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap, Value,
    check_program, type_spec,
)
from .explain import trace_body
from .shardmap_batching import (
    _manual_inside, check_shard_map_spmd_axes, check_spmd_axes_manual,
    check_spmd_casts,
)
from .lowering import equation_path
from .refs import REF_ACCESS, batch_ref_access, with_refs, writes_ref
from .shardmap import collective_axes

P = PartitionSpec  # the name the examples use

__all__ = ["vmap_program", "nested_vmap_program", "batched_input", "KEEPS_AXIS", "MOVES"]

# Primitives whose batching keeps the operands' batch axis (all batched operands at one
# axis): elementwise ones, the casts between varying types, and the reductions over
# shard_map's axes (which are not the batch's).
KEEPS_AXIS = frozenset({
    "neg", "sin", "cos", "tan", "exp", "log", "tanh", "abs", "sign", "sqrt", "rsqrt",
    "logistic", "floor", "ceil", "round", "copy", "copy_p", "integer_pow", "square",
    "convert_element_type", "reduce_precision", "add", "sub", "mul", "div", "max", "min",
    "pow", "psum", "psum_invariant", "pmax", "pmin", "pvary", "pcast", "ppermute",
})



def _gathered(params: dict, d: int, key: str) -> tuple[dict, int]:
    """all_gather's and psum_scatter's batching: the dimension they gather or scatter moves
    past a batch axis before it; a batch axis after it moves by one unless tiled."""
    if d <= params[key]:
        return {**params, key: params[key] + 1}, d
    return params, d if params.get("tiled") else d + 1


def _all_to_all(params: dict, d: int) -> tuple[dict, int]:
    """all_to_all's batching: its split and concat axes move past the batch axis."""
    return {**params, "split_axis": params["split_axis"] + (d <= params["split_axis"]),
            "concat_axis": params["concat_axis"] + (d <= params["concat_axis"])}, d


def _reduced(params: dict, d: int) -> tuple[dict, int]:
    """A reduction's batching (JAX's reducer batcher): the reduced axes move past the batch
    axis; the result's batch axis is where the batch axis lands once they are gone."""
    axes = tuple(int(a) for a in params["axes"])
    return {**params, "axes": tuple(a + (a >= d) for a in axes)}, d - sum(a < d for a in axes)


# The primitives among them that JAX batches as broadcasting n-ary operations.
BROADCASTING = frozenset({"add", "sub", "mul", "div", "max", "min", "pow"})

# Primitives whose batching rewrites a dimension parameter (JAX's batchers in
# lax/parallel.py and lax.py's reducers): name -> (parameters, batch axis) -> (parameters,
# the result's axis).
SHIFTS = {
    "reduce_sum": _reduced, "reduce_max": _reduced, "reduce_min": _reduced,
    "reduce_prod": _reduced,
    "all_gather": lambda p, d: _gathered(p, d, "all_gather_dimension"),
    "all_gather_invariant": lambda p, d: _gathered(p, d, "all_gather_dimension"),
    "reduce_scatter": lambda p, d: _gathered(p, d, "scatter_dimension"),
    "all_to_all": _all_to_all,
}

# The primitives vmap stages after the call to move a result's batch axis.
MOVES = ("transpose", "broadcast_in_dim")


@dataclasses.dataclass(frozen=True)
class _Axis:
    """What one vmap batches over: the batch size as the values inside see it, the spmd
    axes (None: none), and the context mesh of the jit being batched."""

    size: int
    names: tuple[str, ...] | None
    context: Mesh | AbstractMesh | None
    varying: frozenset[str] = frozenset()   # inside a shard_map: the spmd axes
    outer: frozenset[str] = frozenset()     # the spmd axes of the vmaps this one is inside
    casts: frozenset[str] = frozenset()     # inside a check_vma shard_map: all of them


# --------------------------------------------------------------------------- values

def _inserted(items: tuple, axis: int, item: Any, pad: Any = None) -> tuple:
    items = tuple(items) + (pad,) * max(0, axis - len(items))
    return items[:axis] + (item,) + items[axis:]


def _batched_type(value: Value, axis: int | None, size: int,
                  varying: frozenset[str] = frozenset()) -> Value:
    """A traced value's type with the batch dimension at ``axis`` (None: unbatched); inside
    a shard_map batched over spmd axes, a batched value varies along them too. Its split
    over Explicit axes is kept, the batch dimension unsplit, as the batched argument is
    placed (:func:`batched_input`)."""
    if axis is None:
        return value.type
    return dataclasses.replace(value.type, shape=_inserted(value.shape, axis, size),
                               varying=value.varying | varying,
                               spec=_rearranged(value.spec, _inserted(
                                   tuple(range(len(value.shape))), axis, None)))


def _rearranged(spec: PartitionSpec | None, sources: tuple) -> PartitionSpec | None:
    """A type's split over Explicit axes after its dimensions are rearranged: dimension
    ``i`` takes the entry of dimension ``sources[i]`` (None: a new dimension, unsplit)."""
    if spec is None:
        return None
    # padded to the dimensions read (a dimension dropped leaves fewer sources than that)
    entries = tuple(spec) + (None,) * (1 + max((k for k in sources if k is not None),
                                               default=-1))
    return P(*(None if k is None else entries[k] for k in sources),
             unreduced=spec.unreduced, reduced=spec.reduced)


def batched_input(value: Value, axis: int | None, size: int) -> Value:
    """The batched argument a user passes for one example's argument ``value``: ``size``
    inserted in its shape at ``axis``, placed as the example is with that dimension
    unsplit (committedness kept).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> batched_input(Value.placed((8,), NamedSharding(mesh, P("x"))), 1, 3).sharding
    NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', None))
    >>> batched_input(Value.scalar("float"), 0, 3)
    <float32[3]>
    >>> batched_input(Value.shape_dtype((8,), sharding=NamedSharding(mesh.abstract, P("x"))), 0, 3)
    <float32[3x8] over AbstractMesh({'x': 2, 'y': 4}) abstract on NamedSharding(AbstractMesh({'x': 2, 'y': 4}), P(None, 'x'))>
    """
    if axis is None:
        return value
    shape = _inserted(value.shape, axis, size)
    s = value.sharding
    if s is None:
        return Value.shape_dtype(shape, value.dtype) if value.abstract else \
            Value.numpy(shape, value.dtype)
    if isinstance(s, NamedSharding):
        spec = s.spec
        s = NamedSharding(s.mesh, P(*_inserted(spec.partitions, axis, None),
                                    unreduced=spec.unreduced, reduced=spec.reduced),
                          memory_kind=s.memory_kind)
    elif isinstance(s, GSPMDSharding):
        from ..transforms.batching import _with_unit_dim
        s = GSPMDSharding(s.devices, _with_unit_dim(s.hlo, axis))
    if value.abstract:
        return Value.shape_dtype(shape, value.dtype, s)
    return Value.placed(shape, s, value.dtype, committed=value.committed)


# --------------------------------------------------------------------------- parameters

def _batch_size(axis_size: Any) -> int:
    require(type(axis_size) is int and axis_size >= 0, lambda: BadVmapParameterType(
        "axis_size", "must be the batch size (an int >= 0): the program describes one "
        "example, which does not hold it", axis_size))
    return axis_size


def _in_shapes(given: list, in_axes: Any, size: int) -> list:
    """The shapes ``given`` batched where in_axes reads as an axis per argument; unbatched
    elsewhere (BAT-0 then refuses in_axes as vmap does)."""
    entries = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(given)
    if len(entries) != len(given):
        return list(given)
    shapes = []
    for shape, axis in zip(given, entries):
        rank = len(shape)
        ok = type(axis) is int and -(rank + 1) <= axis <= rank
        shapes.append(_inserted(shape, axis % (rank + 1), size) if ok else shape)
    return shapes


def _out_axes(out_axes: Any, ranks: list[int]) -> tuple[int | None, ...]:
    """BAT-0 for out_axes: an int or None, or one per result, within each batched rank."""
    if isinstance(out_axes, list):
        out_axes = tuple(out_axes)
    if out_axes is None or type(out_axes) is int:
        out_axes = (out_axes,) * len(ranks)
    require(type(out_axes) is tuple and len(out_axes) == len(ranks), lambda: (
        BadVmapParameterType("out_axes", f"must be an int, None, or one entry per result "
                                         f"({len(ranks)})", out_axes)))
    out = []
    for k, (axis, rank) in enumerate(zip(out_axes, ranks)):
        with located(f"outputs[{k}]"):
            require(axis is None or type(axis) is int, lambda axis=axis: BadVmapParameterType(
                "out_axes", "must hold an int or None for each result", axis))
            require(axis is None or -(rank + 1) <= axis <= rank, lambda axis=axis, rank=rank:
                    BadVmapParameter("out_axes", f"must be an axis of the batched result, of "
                                                 f"rank {rank + 1}", axis))
        out.append(None if axis is None else axis % (rank + 1))
    return tuple(out)


# --------------------------------------------------------------------------- the body

class _Rewrite:
    """A body being rewritten: its equations so far, the new number and the batch axis of
    every value of the body given, and the count of values defined."""

    def __init__(self, program: Program, dims: tuple, axis: _Axis, prefix: str) -> None:
        self.program, self.axis, self.prefix = program, axis, prefix
        count = len(program.inputs) + len(program.consts)
        self.number = list(range(count))
        self.dims: list[int | None] = list(dims) + [None] * len(program.consts)
        self.types = [_batched_type(v, d, axis.size, axis.varying) for v, d in
                      zip(program.value_types[:count], self.dims)]
        self.equations: list[Equation] = []
        self.batched: dict = {}

    def once(self, key: tuple, batch: Any) -> tuple:
        """``batch()``, or what it gave for an equal ``key`` in this body before (a layer
        repeated: an equation of one form over operands batched alike is batched alike)."""
        if key not in self.batched:
            self.batched[key] = batch()
        return self.batched[key]

    def add(self, eq: Equation, dims: tuple) -> None:
        """Append ``eq`` (typed against the values so far) and its results' batch axes."""
        eq = _typed(eq, self.types)
        self.equations.append(eq)
        self.types.extend(eq.results)
        self.dims.extend(dims)

    def operand(self, old: int) -> tuple[int, int | None]:
        return self.number[old], self.dims_of(old)

    def dims_of(self, old: int) -> int | None:
        return self.dims[self.number[old]]

    def define(self, count: int) -> None:
        """The last ``count`` values added are the results of the equation being rewritten."""
        total = len(self.types)
        self.number.extend(range(total - count, total))


def _typed(eq: Equation, types: list[Value]) -> Equation:
    """``eq`` with its results typed by a body holding ``types`` (PROG-1's, where it types
    the kind; given otherwise)."""
    if eq.results is not None:
        return eq
    operands = tuple(types[n] for n in eq.operands)
    return eq.renumbered(eq.operands, eq.derived(operands))


def _rewrite_body(program: Program, dims: tuple, axis: _Axis, prefix: str) -> _Rewrite:
    """Every equation of ``program``'s body batched, in order."""
    rw = _Rewrite(program, dims, axis, prefix)
    for k, eq in enumerate(program.equations):
        _push(rw, eq, equation_path(prefix, k))
    return rw


def _push(rw: _Rewrite, eq: Equation, path: str) -> None:
    """One equation batched onto ``rw`` (left as it is where no operand is batched)."""
    operands = [rw.operand(n) for n in eq.operands]
    numbers = tuple(n for n, _ in operands)
    in_dims = tuple(d for _, d in operands)
    # (a ref's write is batched even when nothing is: JAX runs its rule, REF-4)
    if all(d is None for d in in_dims) and not isinstance(eq, (Jit, ShardMap)) \
            and not writes_ref(eq):
        rw.add(eq.renumbered(numbers), (None,) * len(eq.results))
    else:
        with located(path):
            _batch_equation(rw, eq, numbers, in_dims, path)
    rw.define(len(eq.results))


def _batch_equation(rw: _Rewrite, eq: Equation, numbers: tuple, dims: tuple, path: str
                    ) -> None:
    if isinstance(eq, Jit):
        new, out_dims = _batch_jit(eq, numbers, dims, rw.axis, path)
        rw.add(new, out_dims)
    elif isinstance(eq, ShardingConstraint):
        key = (eq.form, rw.types[numbers[0]].shape, dims)
        batched = rw.once(key, lambda: _batch_constraint(eq, numbers, dims[0], rw, path))
        rw.add(batched.renumbered(numbers), dims)
    elif isinstance(eq, DevicePut):
        mapped = {d for d in dims if d is not None}
        check_program(len(mapped) == 1, f"the operands of the device_put at {path}",
                      "batched at one axis (JAX's batching asserts it)", dims)
        rw.add(dataclasses.replace(eq, operands=numbers, results=None, checked=False), dims)
        _check_batched_split(eq.targets, [rw.types[n].shape for n in numbers])
    elif isinstance(eq, Reshard):
        s = eq.sharding
        spec = P(*_inserted(s.spec.partitions, min(dims[0], len(s.spec)), None),
                 unreduced=s.spec.unreduced, reduced=s.spec.reduced)
        rw.add(dataclasses.replace(eq, operands=numbers, results=None,
                                   sharding=NamedSharding(s.mesh, spec)), dims)
    elif isinstance(eq, ShardMap):
        new, out_dims = rw.once((eq.form, dims), lambda: _batch_shard_map(
            eq, numbers, dims, rw.axis, path))
        rw.add(new.renumbered(numbers), out_dims)
    elif eq.primitive in REF_ACCESS:   # a mutable ref read or written (REF-4, REF-5)
        batch_ref_access(rw, eq, numbers, dims, path)
    else:
        _batch_opaque(rw, eq, numbers, dims, path)


def _check_batched_split(targets: tuple, shapes: list) -> None:
    """JAX's batched device_put keeps its targets unchanged: a target split over Explicit
    axes types the batched value as it reads, dimension by dimension (the batch dimension
    included), and that split must divide it (ARG-4, while vmap traces; JAX's ValueError).
    The target's Auto axes are not checked here (``DevicePut.checked`` False)."""
    for target, shape in zip(targets, shapes):
        split = type_spec(target)
        if split is not None and getattr(target, "is_concrete", False):
            place_on_devices(NamedSharding(target.mesh, split), shape, "device_put",
                             boxes=False)


# --------------------------------------------------------------------------- equations

def _batch_jit(eq: Jit, numbers: tuple, dims: tuple, axis: _Axis, path: str
               ) -> tuple[Jit, tuple]:
    """The jit equation vmap builds: its body batched, then its shardings."""
    body = _batch_jit_body(eq.body, dims, axis, f"{path}.jit.", f"{path}.jit.")
    checked = eq.checked and all(d is None for d in dims)
    return Jit(numbers, body=body[0], name=eq.name, checked=checked), body[1]


def _batch_jit_body(body: Program, dims: tuple, axis: _Axis, prefix: str, where: str
                    ) -> tuple[Program, tuple]:
    """A jit's body and options batched (JAX's ``_pjit_batcher``): the body first, then
    ``in_shardings`` at each input's axis and ``out_shardings`` at each result's, over the
    jit's own context mesh. ``where`` prefixes the options' paths."""
    inner = dataclasses.replace(axis, context=body.context_mesh)
    rw = _rewrite_body(body, dims, inner, prefix)
    outputs = tuple(rw.number[n] for n in body.outputs)
    out_dims = tuple(rw.dims[n] for n in outputs)
    ins = _batch_shardings(body.in_shardings, dims, [v.shape for v in body.inputs], inner,
                           f"{where}in_shardings")
    outs = _batch_shardings(body.out_shardings, out_dims,
                            [body.value_types[n].shape for n in body.outputs], inner,
                            f"{where}out_shardings")
    inputs = tuple(rw.types[:len(body.inputs)])
    new = dataclasses.replace(body, inputs=inputs, equations=tuple(rw.equations),
                              outputs=outputs, in_shardings=ins, out_shardings=outs,
                              compiler=None, compiler_in=None)
    return new, out_dims


def _batch_shardings(shardings: tuple, dims: tuple, shapes: list, axis: _Axis, what: str
                     ) -> tuple:
    out = []
    for i, (s, d, shape) in enumerate(zip(shardings, dims, shapes)):
        with located(f"{what}[{i}]"):
            out.append(s if s is UNSPECIFIED else batch_sharding(
                s, d, len(shape), axis.names, axis.context))
    return tuple(out)


def _batch_constraint(eq: ShardingConstraint, numbers: tuple, dim: int, rw: _Rewrite,
                      path: str) -> ShardingConstraint:
    """WSC-7's batched constraint, its spec as JAX's equation holds it: read back from the
    HLO sharding (no trailing None) where no dimension is left to the compiler."""
    shape = rw.types[numbers[0]].shape
    unbatched = shape[:dim] + shape[dim + 1:]
    context = rw.axis.context if isinstance(rw.axis.context, Mesh) else None
    constraint = Constraint(path, unbatched, eq.sharding, eq.unconstrained_dims,
                            context_mesh=context)
    batched = batch_constraint(constraint, dim, rw.axis.names)
    s = batched.sharding
    if not batched.unconstrained_dims and isinstance(s, NamedSharding) and s.is_concrete:
        parts = list(s.spec.partitions)
        while parts and parts[-1] is None:
            parts.pop()
        s = NamedSharding(s.mesh, P(*parts, unreduced=s.spec.unreduced,
                                    reduced=s.spec.reduced), memory_kind=s.memory_kind)
    # bound by the batching rule: with_sharding_constraint's own checks are not made again
    return ShardingConstraint(numbers, sharding=s,
                              unconstrained_dims=batched.unconstrained_dims, checked=False)


def _spec_entry(names: tuple[str, ...] | None) -> Any:
    return None if names is None else names[0] if len(names) == 1 else names


def _batch_shard_map(eq: ShardMap, numbers: tuple, dims: tuple, axis: _Axis, path: str
                     ) -> tuple[ShardMap, tuple]:
    """shard_map under vmap (JAX's ``_shard_map_batch``): the batched operands' specs gain
    the batch dimension, the body is batched over the per-shard batch, then the results'
    specs gain it where the body put it."""
    names, entry = axis.names, _spec_entry(axis.names)
    sizes = eq.mesh.sizes_by_name if names is not None else {}
    if names is not None:
        with located(f"{path}.shard_map.in_specs"):
            check_shard_map_spmd_axes(eq.in_specs, names, "in_specs", eq.mesh)
        if eq.check_vma and any(d is not None for d in dims):
            with located(f"{path}.shard_map.in_specs"):
                check_spmd_axes_manual(names, _manual_inside(eq), eq.mesh)
    in_specs = tuple(sp if d is None else _batch_spec(sp, d, entry)
                     for sp, d in zip(eq.in_specs, dims))
    per_shard = axis.size // math.prod(sizes.get(n, 1) for n in (names or ()))
    own = frozenset(names or ())
    inner = _Axis(per_shard, names, axis.context, own if eq.check_vma else frozenset(),
                  axis.outer, own | axis.outer if eq.check_vma else frozenset())
    rw = _rewrite_body(eq.body, dims, inner, f"{path}.shard_map.")
    outputs = tuple(rw.number[n] for n in eq.body.outputs)
    out_dims = tuple(rw.dims[n] for n in outputs)
    if names is not None:
        with located(f"{path}.shard_map.out_specs"):
            check_shard_map_spmd_axes(eq.out_specs, names, "out_specs")
    out_specs = tuple(sp if d is None else _batch_spec(sp, d, entry)
                      for sp, d in zip(eq.out_specs, out_dims))
    if inner.casts - own:   # cast along an enclosing vmap's spmd axes
        with located(f"{path}.shard_map.out_specs"):
            check_spmd_casts((), eq.mesh, tuple(rw.types[n] for n in outputs), out_specs)
    body = dataclasses.replace(eq.body, inputs=tuple(rw.types[:len(eq.body.inputs)]),
                               equations=tuple(rw.equations), outputs=outputs)
    # JAX puts a result together from the body's: a batch the spmd axes split unevenly
    # comes back rounded down to a multiple of their sizes
    ways = math.prod(sizes.get(n, 1) for n in (names or ()))
    results = tuple(_batched_type(r, d, 0 if d is None else rw.types[n].shape[d] * ways)
                    for r, d, n in zip(eq.results, out_dims, outputs))
    checked = eq.checked and all(d is None for d in dims)
    new = dataclasses.replace(eq, operands=numbers, results=results, body=body,
                              in_specs=in_specs, out_specs=out_specs, checked=checked)
    return new, out_dims


def _batch_spec(spec: PartitionSpec, dim: int, entry: Any) -> PartitionSpec:
    """A spec with ``entry`` at ``dim``, padded with None up to it (JAX's ``batch_spec``)."""
    return P(*_inserted(spec.partitions, dim, entry), unreduced=spec.unreduced,
             reduced=spec.reduced)


def _batch_opaque(rw: _Rewrite, eq: Equation, numbers: tuple, dims: tuple, path: str
                  ) -> None:
    """Another primitive under vmap: the batch rules of the primitives the spec knows."""
    assert isinstance(eq, Opaque)
    # the batch as the operands hold it (a shard_map's result may hold fewer than vmap's)
    name, size = eq.primitive, next((rw.types[n].shape[d] for n, d in zip(numbers, dims)
                                     if d is not None), rw.axis.size)
    mapped = {d for d in dims if d is not None}
    scalars = all(d is not None or rw.types[n].shape == () for n, d in zip(numbers, dims))
    if name in KEEPS_AXIS and len(mapped) == 1 and scalars:
        d = mapped.pop()
        if name == "pvary" and rw.axis.casts:   # re-bound on a value now varying more
            collective_varying("pvary", collective_axes(name, dict(eq.params)),
                               rw.types[numbers[0]].varying, True)
        varying = rw.axis.varying | _carried(rw, eq, numbers)
        if name in BROADCASTING and rw.axis.casts:
            numbers = tuple(_varying_along(rw, n, d if dim is not None else None)
                            for n, dim in zip(numbers, dims))
            if len(numbers) == 1:   # the other operand a literal, written after it
                numbers += (_literal_varying(rw, numbers[0]),)
            varying = varying | rw.axis.casts
        results = tuple(_split_as_operands(_batched_type(r, d, size, varying),
                                           [rw.types[n] for n in numbers])
                        for r in eq.results)
        rw.add(eq.renumbered(numbers, results), (d,) * len(results))
        return
    if name in SHIFTS and len(dims) == 1:
        params, d = SHIFTS[name](dict(eq.params), dims[0])
        varying = rw.axis.varying | _carried(rw, eq, numbers)
        results = tuple(_batched_type(r, d, size, varying) for r in eq.results)
        if name in _REDUCTIONS:
            results = tuple(_reduced_split(r, rw.types[numbers[0]], params["axes"])
                            for r in results)
        rw.add(dataclasses.replace(eq, operands=numbers, results=results,
                                   params=tuple(sorted(params.items()))), (d,))
        return
    if name == "transpose" and len(dims) == 1:
        perm = tuple(_param(eq, "permutation"))
        d = dims[0]
        new_perm = (d,) + tuple(i if i < d else i + 1 for i in perm)
        rw.add(_transpose(numbers[0], rw.types[numbers[0]], new_perm), (0,))
        return
    if name == "broadcast_in_dim" and len(dims) == 1:
        operand = numbers[0]
        if dims[0] != 0:
            rw.add(_transpose(operand, rw.types[operand], _moved(len(rw.types[operand].shape),
                                                                dims[0], 0)), (0,))
            operand = len(rw.types) - 1
        (result,) = eq.results
        shape = (size,) + tuple(result.shape)
        kept = tuple(int(i) + 1 for i in _param(eq, "broadcast_dimensions"))
        typed = _param(eq, "sharding")   # JAX's batcher: the parameter, unsplit at 0
        typed = NamedSharding(typed.mesh, _batch_spec(typed.spec, 0, None)) if isinstance(
            typed, NamedSharding) else None
        rw.add(_broadcast(operand, rw.types[operand], shape, (0,) + kept, typed), (0,))
        return
    check_program(False, f"the primitive {name!r} at {path} under vmap",
                  f"one whose batching the spec knows ({sorted(KEEPS_AXIS)} with every "
                  f"operand batched at one axis, {sorted(SHIFTS)}, or {MOVES})", dims)


def _split_as_operands(result: Value, operands: list[Value]) -> Value:
    """An elementwise primitive's batched result, split over Explicit axes as JAX types it:
    from its batched operands, dimension by dimension the first entry that splits it
    (scalar operands aside), not from the example's result with the batch dimension
    inserted unsplit: a batched device_put's target may split the batch dimension, or
    another dimension than the example's. Unchanged where no operand of its rank is
    typed over a mesh."""
    rank = len(result.shape)
    typed = [v for v in operands if len(v.shape) == rank and v.mesh is not None]
    if not typed or result.mesh is None:
        return result
    entries = [None] * rank
    for v in typed:
        for i, entry in enumerate(tuple(v.spec or ())):
            entries[i] = entries[i] if entries[i] is not None else entry
    old = result.spec if result.spec is not None else P()   # P(reduced=...) is falsy
    spec = P(*entries, unreduced=old.unreduced, reduced=old.reduced)
    return dataclasses.replace(result, spec=spec)


_REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod"})


def _reduced_split(result: Value, operand: Value, axes: tuple) -> Value:
    """A reduction's batched result, split as its batched operand less the reduced
    dimensions (JAX's reduction typing), the batch dimension's split included."""
    if result.mesh is None or operand.mesh is None:
        return result
    entries = tuple(operand.spec or ()) + (None,) * len(operand.shape)
    kept = [entries[i] for i in range(len(operand.shape)) if i not in set(axes)]
    old = result.spec if result.spec is not None else P()   # P(reduced=...) is falsy
    return dataclasses.replace(result, spec=P(*kept, unreduced=old.unreduced,
                                              reduced=old.reduced))


# The collectives whose result no longer varies along the axes they name.
_REDUCING = frozenset({"psum", "psum_invariant", "pmax", "pmin", "all_gather_invariant"})


def _carried(rw: _Rewrite, eq: Opaque, numbers: tuple) -> frozenset[str]:
    """The enclosing vmaps' spmd axes an operand was cast along, which the result varies
    along too (less those a reducing collective names)."""
    outer = rw.axis.casts - rw.axis.varying
    if not outer:
        return frozenset()
    carried = frozenset().union(*(rw.types[n].varying for n in numbers)) & outer
    if eq.primitive in _REDUCING:
        carried -= set(collective_axes(eq.primitive, dict(eq.params)))
    return carried


def _varying_along(rw: _Rewrite, number: int, dim: int | None) -> int:
    """JAX's broadcasting batcher inside a shard_map under check_vma casts each operand to
    vary along the spmd axes (a ``pvary`` over those it lacks, in the mesh's order): the
    number of the value the operation then reads."""
    value = rw.types[number]
    missing = rw.axis.casts - value.varying
    if not missing:
        return number
    check_spmd_casts(tuple(sorted(missing)), value.mesh)
    axes = tuple(a for a in value.mesh.axis_names if a in missing)
    rw.add(Opaque((number,), (dataclasses.replace(value.type, varying=value.varying | missing),),
                  primitive="pvary", params=(("axes", axes),)), (dim,))
    return len(rw.types) - 1


def _literal_varying(rw: _Rewrite, number: int) -> int:
    """A literal operand (``x * 0.5``: the description holds no value for it) cast to vary
    along the spmd axes, as JAX's broadcasting batcher casts it: a ``pvary`` of no value
    the description holds, a scalar of the other operand's dtype."""
    value = rw.types[number]
    check_spmd_casts(tuple(sorted(rw.axis.casts)), value.mesh)
    axes = tuple(a for a in value.mesh.axis_names if a in rw.axis.casts)
    rw.add(Opaque((), (dataclasses.replace(value.type, shape=(), varying=rw.axis.casts),),
                  primitive="pvary", params=(("axes", axes),)), (None,))
    return len(rw.types) - 1


def _param(eq: Opaque, name: str) -> Any:
    return dict(eq.params).get(name, ())


def _moved(rank: int, source: int, target: int) -> tuple[int, ...]:
    """The permutation that moves axis ``source`` to ``target`` (JAX's moveaxis)."""
    perm = [i for i in range(rank) if i != source]
    perm.insert(target, source)
    return tuple(perm)


def _transpose(operand: int, value: Value, perm: tuple[int, ...]) -> Opaque:
    """A transpose by ``perm``; its result's split over Explicit axes is permuted alike."""
    shape = tuple(value.shape[i] for i in perm)
    result = dataclasses.replace(value.type, shape=shape, spec=_rearranged(value.spec, perm))
    return Opaque((operand,), (result,), primitive="transpose",
                  params=(("permutation", perm),))


def _broadcast(operand: int, value: Value, shape: tuple, kept: tuple,
               typed: NamedSharding | None = None) -> Opaque:
    """A broadcast_in_dim to ``shape``, the operand's dimensions at ``kept``: its result
    typed by its sharding parameter ``typed`` where bound with one, else the new
    dimensions unsplit and the kept ones split as the operand's."""
    sources = tuple(kept.index(i) if i in kept else None for i in range(len(shape)))
    spec = _rearranged(value.spec, sources) if typed is None else type_spec(typed)
    result = dataclasses.replace(value.type, shape=tuple(shape), spec=spec)
    return Opaque((operand,), (result,),
                  primitive="broadcast_in_dim",
                  params=(("broadcast_dimensions", kept), ("sharding", typed),
                          ("shape", tuple(shape))))


# --------------------------------------------------------------------------- the program

def _is_wrapper(program: Program) -> bool:
    """Whether ``program`` is what vmap_program gives when vmap moves results after the
    call: no options, one jit equation over the inputs in order, then one move or more (a
    jit written so by hand reads alike: vmapped, its moves then stay outside it)."""
    eqs = program.equations
    return (len(eqs) > 1 and isinstance(eqs[0], Jit) and not program.consts
            and eqs[0].operands == tuple(range(len(program.inputs)))
            and all(isinstance(eq, Opaque) and eq.primitive in MOVES for eq in eqs[1:])
            and all(s is UNSPECIFIED for s in program.in_shardings + program.out_shardings)
            and not any(program.donated) and not program.keep_unused
            and program.context_mesh is None)


def _check_example(program: Program) -> None:
    """What JAX checks tracing the jit call on one example's types, before batching: its
    shardings fit the example's shapes (FIT-1), and each equation's own checks."""
    with staged("trace"):
        for i, (s, value) in enumerate(zip(program.in_shardings, program.inputs)):
            check_fits(s, value.shape, f"in_shardings[{i}]")
        trace_body(program, program.context_mesh)
        for i, (s, n) in enumerate(zip(program.out_shardings, program.outputs)):
            check_fits(s, program.value_types[n].shape, f"out_shardings[{i}]")


def _check_mapped_types(inputs: tuple[Value, ...], axes: tuple) -> None:
    """BAT-10 for the arguments a vmap maps: vmap reads each one's type at the mapped
    dimension (the batch dimensions vmaps inside it insert keep the unreduced and reduced
    axes of the example's type, so the example's inputs answer for every vmap)."""
    for i, (value, axis) in enumerate(zip(inputs, axes)):
        if axis is not None:
            with located(f"args[{i}]"):
                check_not_reduced_when_moved(value.spec, f"args[{i}]", True)


def _moves(rw: _Rewrite, outputs: list[int], out_axes: tuple, views: list[Value]
           ) -> list[int]:
    """Each result moved to its out_axes (a transpose, or a broadcast_in_dim for an
    unbatched result), from its type as this vmap sees it (``views``: JAX binds the
    broadcast with that type, the new dimension unsplit, as its sharding parameter); the
    numbers of the results as vmap returns them."""
    moved = []
    for k, (n, target, value) in enumerate(zip(outputs, out_axes, views)):
        source = rw.dims[n]
        with located(f"outputs[{k}]"):
            require(not (source is not None and target is None), lambda: BadVmapParameter(
                "out_axes", "is None for a result that vmap batched (vmap has mapped output "
                "but out_axes is None)", None))
        if source == target or target is None:
            moved.append(n)
            continue
        if source is None:
            with located(f"outputs[{k}]"):   # BAT-10: broadcast from its type, read entry by entry
                check_not_reduced_when_moved(value.spec, f"outputs[{k}]", False)
            shape = _inserted(value.shape, target, rw.axis.size)
            kept = tuple(i for i in range(len(shape)) if i != target)
            typed = None if value.mesh is None else NamedSharding(value.mesh, P(*_inserted(
                tuple(value.spec or ()), target, None)))
            rw.add(_broadcast(n, value, shape, kept, typed), (target,))
        else:
            rw.add(_transpose(n, value, _moved(len(value.shape), source, target)), (target,))
        moved.append(len(rw.types) - 1)
    return moved


def vmap_program(program: Program, in_axes: Any = 0, out_axes: Any = 0, *,
                 axis_size: Any = None, spmd_axis_name: Any = None,
                 outer_spmd_axis_names: Any = ()) -> Program:
    """The Program that ``jax.vmap(jax.jit(f, ...), in_axes, out_axes,
    axis_size=axis_size, spmd_axis_name=spmd_axis_name)`` amounts to on batched arguments,
    ``program`` describing the jit call on one example (module docstring).

    For a vmap inside other vmaps, ``outer_spmd_axis_names`` names their spmd axes (JAX
    batches with them in its axis environment, and inside a check_vma shard_map casts
    along them too: PBAT-3), and the outer vmaps are then applied to the answer; to ask
    in JAX's order and types, give the whole nest to :func:`nested_vmap_program`.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> x = Value.placed((8, 8), NamedSharding(mesh, P("x")))
    >>> program = Program((x,), (ShardingConstraint((0,), sharding=NamedSharding(
    ...     mesh, P("x", None))),), outputs=(1,))
    >>> batched = vmap_program(program, axis_size=4, spmd_axis_name="y")
    >>> batched.inputs[0].shape, batched.equations[0].sharding.spec
    ((4, 8, 8), P('y', 'x'))
    >>> vmap_program(program, axis_size=4, spmd_axis_name="x")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [WSC-7] at body[0]: vmap's spmd_axis_name ('x',) also appears in the with_sharding_constraint spec P('x', None) of body[0]; a mesh axis cannot split both the batch and another dimension
    """
    check_program(isinstance(program, Program), "the program vmapped", "a Program", program)
    options = {"in_axes": in_axes, "out_axes": out_axes, "axis_size": axis_size,
               "spmd_axis_name": spmd_axis_name}
    with staged("trace"):
        outer = _names(outer_spmd_axis_names) if outer_spmd_axis_names != () else ()
        return _vmapped(program, (options,), outer or ())


_OPTIONS = frozenset({"in_axes", "out_axes", "axis_size", "spmd_axis_name"})


def nested_vmap_program(program: Program, vmaps: Any) -> Program:
    """The Program that nested vmaps of ``jax.jit(f, ...)`` amount to on batched arguments:
    ``vmaps`` holds each vmap's options as :func:`vmap_program` takes them (``in_axes``,
    ``out_axes``, ``axis_size``, ``spmd_axis_name``), innermost first.

    JAX traces the function once under all of them, in this order: each vmap's parameters,
    the outermost first (it is called first); the jit call on one example; the jit batched
    by each vmap in turn, innermost first; then each vmap's out_axes, innermost first, its
    moves batched by the vmaps outside it, and read from a result's type as that vmap
    sees it (its type once batched by all, less the batch dimensions of those outside).

    The inner vmap below leaves a batched result unmapped (out_axes None: BAT-0), and the
    outer one batches the inner jit's result over 'x', which its out_sharding uses: JAX
    refuses the jit first.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> x = Value.placed((8,), NamedSharding(mesh, P()))
    >>> inner = Program((x.type,), outputs=(0,), out_shardings=(NamedSharding(mesh, P("x")),))
    >>> step = Program((x,), (Jit((0,), body=inner),), outputs=(0, 1))
    >>> nested_vmap_program(step, [{"axis_size": 2, "out_axes": (None, 0)},
    ...                            {"axis_size": 2, "spmd_axis_name": "x"}])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [BAT-4] at body[0].jit.out_shardings[0]: spmd_axis_name ('x',) would split the batched value over mesh axis 'x' twice: the batched spec is P('x', None, 'x'). Pick a spmd_axis_name that the jit's shardings do not use.
    >>> nested_vmap_program(step, [{"axis_size": 2, "out_axes": (None, 0)},
    ...                            {"axis_size": 2}])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [BAT-0] at outputs[0]: out_axes is None for a result that vmap batched (vmap has mapped output but out_axes is None), got None
    """
    check_program(isinstance(program, Program), "the program vmapped", "a Program", program)
    with staged("trace"):
        require(isinstance(vmaps, (tuple, list)) and len(vmaps) > 0 and all(
            isinstance(v, dict) and set(v) <= _OPTIONS for v in vmaps),
            lambda: BadVmapParameterType("vmaps", f"must be a list of one dict or more of "
                                                  f"vmap_program's options "
                                                  f"{sorted(_OPTIONS)}, innermost first",
                                         vmaps))
        return _vmapped(program, tuple(vmaps), ())


def _vmapped(program: Program, vmaps: tuple[dict, ...], outer: tuple[str, ...]) -> Program:
    """``program`` under ``vmaps`` (innermost first), in JAX's order (nested_vmap_program)."""
    levels = _levels(program, vmaps, outer)
    wrapper = _is_wrapper(program)
    if not wrapper and program.checked:
        _check_example(program)
    first = levels[0]
    chain = [_rewrite_body(program, first.axes, first.axis, "") if wrapper
             else _as_one_jit(program, first.axes, first.axis)]
    for level in levels[1:]:
        given = Program(tuple(chain[-1].types[:len(level.axes)]))
        chain.append(_Rewrite(given, level.axes, level.axis, ""))
        _carry(chain, len(chain) - 2, 0, not wrapper)
    count = len(program.inputs)
    outputs = [chain[0].number[n] for n in program.outputs] if wrapper else \
        list(range(count, count + len(program.outputs)))
    for k, (level, rw) in enumerate(zip(levels, chain)):
        outputs = [rw.number[n] for n in outputs] if k else outputs
        ranks = [len(rw.types[n].shape) - (rw.dims[n] is not None) for n in outputs]
        out_axes = _out_axes(level.out_axes, ranks)
        start = len(rw.equations)
        outputs = _moves(rw, outputs, out_axes, _views(chain, k, outputs))
        _carry(chain, k, start, False)
    return with_refs(_answer(levels[-1].inputs, chain[-1], outputs), program)


@dataclasses.dataclass(frozen=True)
class _Level:
    """One vmap of a nest: the axis it maps of each argument it is given, the batched
    arguments it gives, what it batches over, and its out_axes as given."""

    axes: tuple
    inputs: tuple[Value, ...]
    axis: _Axis
    out_axes: Any


def _levels(program: Program, vmaps: tuple[dict, ...], outer: tuple[str, ...]
            ) -> list[_Level]:
    """Each vmap's parameters checked (BAT-0), the outermost first, on the shapes of the
    arguments it is given (those the vmaps inside it batch); then each one read."""
    shapes = [[v.shape for v in program.inputs]]
    for options in vmaps[:-1]:   # were the vmaps inside well-formed
        size = options.get("axis_size")
        shapes.append(_in_shapes(shapes[-1], options.get("in_axes", 0),
                                 size if type(size) is int and size >= 0 else 0))
    read = []
    for options, given in zip(reversed(vmaps), reversed(shapes)):
        size, in_axes = _batch_size(options.get("axis_size")), options.get("in_axes", 0)
        _, axes, _ = check_vmap_parameters(_in_shapes(given, in_axes, size), in_axes, size)
        _check_mapped_types(program.inputs, axes)
        read.insert(0, (axes, size, _names(options.get("spmd_axis_name"))))
    levels, inputs = [], program.inputs
    for k, ((axes, size, names), options) in enumerate(zip(read, vmaps)):
        inputs = tuple(batched_input(v, a, size) for v, a in zip(inputs, axes))
        around = frozenset(outer).union(*(n for _, _, n in read[k + 1:] if n))
        levels.append(_Level(axes, inputs, _Axis(size, names, program.context_mesh,
                                                  outer=around), options.get("out_axes", 0)))
    return levels


def _carry(chain: list[_Rewrite], k: int, start: int, one_jit: bool) -> None:
    """The equations of vmap ``k``'s rewrite from ``start`` on, each batched by the vmap
    outside it, what that gives by the next, and so on before the next equation (JAX binds
    an equation through every vmap at once). With ``one_jit`` the first is the jit call,
    its body's equations and options located as written (``body[3]``, ``in_shardings[0]``)."""
    if k + 1 == len(chain):
        return
    rw = chain[k + 1]
    for i, eq in enumerate(chain[k].equations[start:], start):
        before = len(rw.equations)
        if one_jit and i == 0:
            operands = [rw.operand(n) for n in eq.operands]
            body, out_dims = _batch_jit_body(eq.body, tuple(d for _, d in operands),
                                             rw.axis, "", "")
            rw.add(Jit(tuple(n for n, _ in operands), body=body, name=eq.name,
                       checked=False), out_dims)
            rw.define(len(eq.results))
        else:
            _push(rw, eq, equation_path("", i))
        _carry(chain, k + 1, before, one_jit)


def _views(chain: list[_Rewrite], k: int, outputs: list[int]) -> list[Value]:
    """Each of vmap ``k``'s results as that vmap sees it: its type once every vmap has
    batched it, less the batch dimensions of the vmaps outside ``k`` (JAX's mapped type)."""
    if k + 1 == len(chain):
        return [chain[k].types[n] for n in outputs]
    views = []
    for n in outputs:
        numbers = [n]
        for rw in chain[k + 1:]:
            numbers.append(rw.number[numbers[-1]])
        value = chain[-1].types[numbers[-1]]
        for rw, m in reversed(list(zip(chain[k + 1:], numbers[1:]))):
            d = rw.dims[m]
            if d is not None:
                kept = tuple(i for i in range(len(value.shape)) if i != d)
                value = dataclasses.replace(value, shape=value.shape[:d] + value.shape[d + 1:],
                                            spec=_rearranged(value.spec, kept))
        views.append(value)
    return views


def _names(spmd_axis_name: Any) -> tuple[str, ...] | None:
    if spmd_axis_name is None:
        return None
    names = spmd_axis_name if type(spmd_axis_name) is tuple else (spmd_axis_name,)
    require(len(names) > 0 and all(isinstance(n, str) for n in names),
            lambda: BadVmapParameterType("spmd_axis_name", "must be None, a mesh axis name "
                                                           "or a tuple of names",
                                         spmd_axis_name))
    return names


def _as_one_jit(program: Program, axes: tuple, axis: _Axis) -> _Rewrite:
    """The vmapped function's body as one jit equation over the inputs: the program's own
    jit batched (its equations at ``body[k]``, its options at ``in_shardings[i]``)."""
    body, out_dims = _batch_jit_body(_traced(program), axes, axis, "", "")
    outer = Program(tuple(v.type for v in program.inputs))
    rw = _Rewrite(outer, axes, axis, "")
    rw.add(Jit(tuple(range(len(program.inputs))), body=body, name="vmapped", checked=False),
           out_dims)
    return rw


def _traced(program: Program) -> Program:
    """``program`` as a jit equation's body: its inputs typed only, no compiler choices."""
    return dataclasses.replace(program, inputs=tuple(v.type for v in program.inputs),
                               compiler=None, compiler_in=None)


def _answer(inputs: tuple[Value, ...], rw: _Rewrite, outputs: list[int]) -> Program:
    """One jit call over the batched arguments where vmap moved nothing after it, else
    ``jax.jit`` of the vmapped function (the batched call, then the moves)."""
    first = rw.equations[0] if rw.equations else None
    count = len(inputs)
    if (len(rw.equations) == 1 and isinstance(first, Jit)
            and first.operands == tuple(range(count))
            and outputs == list(range(count, count + len(first.results)))):
        return dataclasses.replace(first.body, inputs=inputs, checked=False)
    return Program(inputs, tuple(rw.equations), tuple(outputs))
