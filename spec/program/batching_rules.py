"""How ``vmap`` batches each equation: the primitive table's :data:`~shardlaw.spec.program.primitives.BATCHING` rules.

:func:`~shardlaw.spec.program.batching.vmap_program` rewrites a program body by body; this
module holds a body being batched (:class:`BatchedBody`: every value's new number and batch
axis) and the rule of each kind of equation and family of primitives, registered under the
name its entry in the primitive table gives (``@BATCHING.register("keeps_axis")``):

* ``jit``: its body batched first, then its ``in_shardings`` and ``out_shardings`` at the
  batch axis of each operand and result (BAT-1 to BAT-7), the batched equation unchecked;
* ``sharding_constraint`` (WSC-7), ``device_put`` (its targets unchanged), ``reshard``
  (``None`` inserted in its spec at the batch axis);
* ``shard_map``: its specs and its body over the per-shard batch (PBAT-1 to PBAT-3);
* ``ref_access`` (:mod:`~shardlaw.spec.program.refs`: REF-4, REF-5);
* the primitives' families: ``keeps_axis`` (elementwise primitives, the casts between
  varying types, the reductions over a shard_map's axes), ``reduction``, ``gathered``,
  ``scattered`` and ``all_to_all`` (a dimension parameter moved past the batch axis),
  ``transpose`` and ``broadcast_in_dim`` (the batch axis put first).

An equation whose entry names no batching rule (:class:`~shardlaw.spec.program.primitives.Absent`,
a primitive without an entry) is refused (PROG-0): the spec does not know its batching.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import re
from typing import Any

from ..core.rules import Rejection, located
from ..core.shardings import UNSPECIFIED, NamedSharding
from ..core.values import UNCONSTRAINED, AbstractMesh, AxisType, Mesh, PartitionSpec
from ..transforms.arguments import place_on_devices
from ..transforms.batching import batch_sharding
from ..transforms.constraint import Constraint, batch_constraint
from ..transforms.shardmap_bodies import collective_varying
from .description import (
    DevicePut, Equation, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap, Value,
    check_program, type_spec,
)
from .lowering import equation_path
from .primitives import BATCHING, entry_of, names_where
from .refs import writes_ref
from .shardmap import collective_axes
from .shardmap_batching import (
    batch_split_inside, batched_result, example_checked,
    manual_inside, check_shard_map_spmd_axes, check_spmd_axes_manual, check_spmd_casts,
)

P = PartitionSpec  # the name the examples use

__all__ = ["BatchAxis", "BatchedBody", "split_batch", "split_at", "operands_batch_split", "batch_entry", "batch_body", "check_staged", "PLACES", "KEPT", "kept", "described_path", "with_batch_entry", "push_batched", "batch_jit_body",
           "batched_type", "inserted", "rearranged", "moved_axis", "transpose_equation",
           "broadcast_equation", "unit_typed", "batch_typed", "batched_parameter", "typed_like", "KEEPS_AXIS", "SHIFTS", "MOVES"]

# The names of the primitives of each batching family as the table declares them on import
# (the PROG-0 refusal of an equation vmap cannot batch reads the table when it refuses);
# MOVES: the primitives vmap stages after the call to move a result's batch axis.
KEEPS_AXIS = frozenset(names_where(batching="keeps_axis"))
SHIFTS = names_where(batching=("reduction", "gathered", "scattered", "all_to_all"))
MOVES = names_where(batching=("transpose", "broadcast_in_dim"))


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


@dataclasses.dataclass(frozen=True)
class BatchAxis:
    """What one vmap batches over: the batch size as the values inside see it, the spmd
    axes (None: none), the context mesh of the jit being batched, and the Explicit mesh
    axes the mapped arguments' types split the mapped dimension over (None: none; BAT-9)."""

    size: int
    names: tuple[str, ...] | None
    context: Mesh | AbstractMesh | None
    varying: frozenset[str] = frozenset()   # inside a shard_map: the spmd axes
    outer: frozenset[str] = frozenset()     # the spmd axes of the vmaps this one is inside
    casts: frozenset[str] = frozenset()     # inside a check_vma shard_map: all of them
    explicit: tuple[str, ...] | None = None  # JAX's explicit_mesh_axis


def split_batch(value: Value, d: int | None, axis: BatchAxis) -> Value:
    """A batched body's input as JAX's vmap over Explicit axes types it (``unmapped_aval``
    with the ``explicit_mesh_axis``): its batch dimension ``d`` split over the mapped
    arguments' Explicit axes; unchanged where vmap maps no such split, the value is
    unbatched or its type is over no mesh."""
    return split_at(value, d, batch_entry(axis))


def split_at(value: Value, d: int | None, entry: Any) -> Value:
    """``value``'s type with dimension ``d`` split over ``entry`` (unchanged where ``d`` or
    ``entry`` is None, or the type is over no mesh)."""
    if d is None or entry is None or value.mesh is None:
        return value
    old = value.spec if value.spec is not None else P()   # P(reduced=...) is falsy
    parts = list(old) + [None] * (len(value.shape) - len(old))
    parts[d] = entry
    return dataclasses.replace(value, spec=P(*parts, unreduced=old.unreduced,
                                             reduced=old.reduced))


def operands_batch_split(rw: "BatchedBody", numbers: tuple) -> Any:
    """The split of the first batched operand's batch dimension (JAX types a result's batch
    dimension from its operands': the mapped axes, or unsplit after a device_put to a
    target that leaves it so); None where none is split."""
    for n in numbers:
        d, value = rw.dims[n], rw.types[n]
        if d is not None:
            entries = tuple(value.spec or ()) if value.mesh is not None else ()
            return entries[d] if d < len(entries) else None
    return None


# --------------------------------------------------------------------------- values

def inserted(items: tuple, axis: int, item: Any, pad: Any = None) -> tuple:
    items = tuple(items) + (pad,) * max(0, axis - len(items))
    return items[:axis] + (item,) + items[axis:]


def batched_type(value: Value, axis: int | None, size: int,
                  varying: frozenset[str] = frozenset()) -> Value:
    """A traced value's type with the batch dimension at ``axis`` (None: unbatched); inside
    a shard_map batched over spmd axes, a batched value varies along them too. Its split
    over Explicit axes is kept, the batch dimension unsplit, as the batched argument is
    placed (:func:`batched_input`)."""
    if axis is None:
        return value.type
    return dataclasses.replace(value.type, shape=inserted(value.shape, axis, size),
                               varying=value.varying | varying,
                               spec=rearranged(value.spec, inserted(
                                   tuple(range(len(value.shape))), axis, None)))


def rearranged(spec: PartitionSpec | None, sources: tuple) -> PartitionSpec | None:
    """A type's split over Explicit axes after its dimensions are rearranged: dimension
    ``i`` takes the entry of dimension ``sources[i]`` (None: a new dimension, unsplit)."""
    if spec is None:
        return None
    # padded to the dimensions read (a dimension dropped leaves fewer sources than that)
    entries = tuple(spec) + (None,) * (1 + max((k for k in sources if k is not None),
                                               default=-1))
    return P(*(None if k is None else entries[k] for k in sources),
             unreduced=spec.unreduced, reduced=spec.reduced)


# --------------------------------------------------------------------------- the body

# Where set (a dict), each equation's path in the body given, mapped by batch_body to the
# index of the last equation its batching adds to the batched body (what a description of
# a call under a vmap inside a function reads its refused equation's batched path from).
PLACES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("PLACES", default=None)
# The paths of the equations JAX refused on one example while a vmap traced them (a call
# under a vmap inside a function, as the bridge describes it): batched with the checks JAX
# made of them on the example kept (:func:`with_batch_entry`).
KEPT: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("KEPT",
                                                                      default=frozenset())

# The kinds of body a batching path names that explain_program walks as a jit's, and a
# cond's branch, which it walks as ``cond.body[i].jit``.
_WALKED = re.compile(r"\.(remat2|custom_jvp_call|custom_vjp_call)\.")
_BRANCH = re.compile(r"\.cond\.branches\[(\d+)\]\.")


def described_path(path: str) -> str:
    """An equation's path as batching names it, as explain_program names it."""
    return _BRANCH.sub(r".cond.body[\1].jit.", _WALKED.sub(".jit.", path))


def kept(path: str) -> bool:
    """Whether the equation batching meets at ``path`` is one of :data:`KEPT`."""
    paths = KEPT.get()
    return bool(paths) and described_path(path) in paths


class BatchedBody:
    """A body being rewritten: its equations so far, the new number and the batch axis of
    every value of the body given, and the count of values defined."""

    def __init__(self, program: Program, dims: tuple, axis: BatchAxis, prefix: str) -> None:
        self.program, self.axis, self.prefix = program, axis, prefix
        count = len(program.inputs) + len(program.consts)
        self.number = list(range(count))
        self.dims: list[int | None] = list(dims) + [None] * len(program.consts)
        self.types = [split_batch(batched_type(v, d, axis.size, axis.varying), d, axis)
                      for v, d in zip(program.value_types[:count], self.dims)]
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


def batch_body(program: Program, dims: tuple, axis: BatchAxis, prefix: str) -> BatchedBody:
    """Every equation of ``program``'s body batched, in order; a refusal while batching one
    comes after what tracing refuses of those batched before it (:func:`check_staged`)."""
    rw = BatchedBody(program, dims, axis, prefix)
    places = PLACES.get()
    try:
        for k, eq in enumerate(program.equations):
            path = equation_path(prefix, k)
            push_batched(rw, eq, path)
            if places is not None:
                places[path] = len(rw.equations) - 1
    except Rejection:
        check_staged(rw)
        raise
    return rw


def check_staged(rw: BatchedBody) -> None:
    """Tracing's checks of the equations ``rw`` holds so far, at their batched types: JAX
    types each equation its batching rule binds as it binds it, so a refusal of one comes
    before any refusal met batching a later one (the equations' paths are their places in
    the batched body)."""
    from .explain import trace_body

    body = rw.program
    count = len(body.inputs)
    so_far = dataclasses.replace(body, inputs=tuple(rw.types[:count]),
                                 equations=tuple(rw.equations), outputs=(), out_shardings=(),
                                 compiler=None, compiler_in=None)
    trace_body(so_far, rw.axis.context, rw.prefix)


def push_batched(rw: BatchedBody, eq: Equation, path: str) -> None:
    """One equation batched onto ``rw`` by its rule in the primitive table (left as it is
    where no operand is batched)."""
    operands = [rw.operand(n) for n in eq.operands]
    numbers = tuple(n for n, _ in operands)
    in_dims = tuple(d for _, d in operands)
    entry = entry_of(eq)
    # (vmap walks a body whatever its operands; a ref's write is batched even when nothing
    # is: JAX runs its rule, REF-4)
    if all(d is None for d in in_dims) and not entry.bodies and not writes_ref(eq):
        rw.add(eq.renumbered(numbers), (None,) * len(eq.results))
    else:
        with located(path):
            batch = BATCHING.of(entry)
            if batch is None:
                _not_batched(eq, in_dims, path)
            batch(rw, eq, numbers, in_dims, path)
    rw.define(len(eq.results))


def _not_batched(eq: Equation, dims: tuple, path: str) -> None:
    """PROG-0: the spec does not know how vmap batches ``eq`` (its entry names no batching
    rule, or its rule's family does not take operands batched so)."""
    check_program(False, f"the primitive {eq.primitive!r} at {path} under vmap",
                  f"one whose batching the spec knows ({sorted(_keeps_axis())} with every "
                  f"operand batched at one axis, {sorted(_shifts())}, or {_moves()})", dims)


def _keeps_axis() -> tuple[str, ...]:
    return names_where(batching="keeps_axis")


def _shifts() -> tuple[str, ...]:
    return names_where(batching=("reduction", "gathered", "scattered", "all_to_all"))


def _moves() -> tuple[str, ...]:
    return names_where(batching=("transpose", "broadcast_in_dim"))


@BATCHING.register("jit")
def _batch_jit_equation(rw: BatchedBody, eq: Jit, numbers: tuple, dims: tuple, path: str
                        ) -> None:
    new, out_dims = _batch_jit(eq, numbers, dims, rw.axis, path)
    rw.add(new, out_dims)


@BATCHING.register("sharding_constraint")
def _batch_constraint_equation(rw: BatchedBody, eq: ShardingConstraint, numbers: tuple,
                               dims: tuple, path: str) -> None:
    if kept(path):   # its fit to the example checked as the batched value's
        sharding, loose = with_batch_entry(eq.sharding, dims[0], rw.axis,
                                           eq.unconstrained_dims or frozenset())
        rw.add(ShardingConstraint(numbers, sharding=sharding, unconstrained_dims=loose), dims)
        return
    key = (eq.form, rw.types[numbers[0]].shape, dims)
    batched = rw.once(key, lambda: _batch_constraint(eq, numbers, dims[0], rw, path))
    rw.add(batched.renumbered(numbers), dims)


@BATCHING.register("device_put")
def _batch_device_put(rw: BatchedBody, eq: DevicePut, numbers: tuple, dims: tuple, path: str
                      ) -> None:
    mapped = {d for d in dims if d is not None}
    check_program(len(mapped) == 1, f"the operands of the device_put at {path}",
                  "batched at one axis (JAX's batching asserts it)", dims)
    if kept(path):   # its targets' fit to the example checked as the batched value's
        rw.add(DevicePut(numbers, targets=tuple(
            t if d is None else with_batch_entry(t, d, rw.axis, None)[0]
            for t, d in zip(eq.targets, dims))), dims)
        return
    rw.add(dataclasses.replace(eq, operands=numbers, results=None, checked=False), dims)
    _check_batched_split(eq.targets, [rw.types[n].shape for n in numbers])


@BATCHING.register("reshard")
def _batch_reshard(rw: BatchedBody, eq: Reshard, numbers: tuple, dims: tuple, path: str
                   ) -> None:
    s = eq.sharding   # the batch dimension split as vmap maps it (JAX's get_sharding_for_vmap)
    spec = P(*inserted(s.spec.partitions, min(dims[0], len(s.spec)), batch_entry(rw.axis)),
             unreduced=s.spec.unreduced, reduced=s.spec.reduced)
    rw.add(dataclasses.replace(eq, operands=numbers, results=None,
                               sharding=NamedSharding(s.mesh, spec)), dims)


@BATCHING.register("shard_map")
def _batch_shard_map_equation(rw: BatchedBody, eq: ShardMap, numbers: tuple, dims: tuple,
                              path: str) -> None:
    new, out_dims = rw.once((eq.form, dims), lambda: _batch_shard_map(
        eq, numbers, dims, rw.axis, path))
    rw.add(new.renumbered(numbers), out_dims)


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

def _batch_jit(eq: Jit, numbers: tuple, dims: tuple, axis: BatchAxis, path: str
               ) -> tuple[Jit, tuple]:
    """The jit equation vmap builds: its body batched, then its shardings."""
    body = batch_jit_body(eq.body, dims, axis, f"{path}.jit.", f"{path}.jit.")
    checked = eq.checked and (all(d is None for d in dims) or kept(path))
    return Jit(numbers, body=body[0], name=eq.name, checked=checked), body[1]


def batch_jit_body(body: Program, dims: tuple, axis: BatchAxis, prefix: str, where: str
                    ) -> tuple[Program, tuple]:
    """A jit's body and options batched (JAX's ``_pjit_batcher``): the body first, then
    ``in_shardings`` at each input's axis and ``out_shardings`` at each result's, over the
    jit's own context mesh. ``where`` prefixes the options' paths."""
    inner = dataclasses.replace(axis, context=body.context_mesh)
    rw = batch_body(body, dims, inner, prefix)
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


def _batch_shardings(shardings: tuple, dims: tuple, shapes: list, axis: BatchAxis, what: str
                     ) -> tuple:
    out = []
    for i, (s, d, shape) in enumerate(zip(shardings, dims, shapes)):
        with located(f"{what}[{i}]"):
            out.append(s if s is UNSPECIFIED else batch_sharding(
                s, d, len(shape), axis.names, axis.context))
    return tuple(out)


def _batch_constraint(eq: ShardingConstraint, numbers: tuple, dim: int, rw: BatchedBody,
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


def with_batch_entry(sharding: Any, d: int, axis: BatchAxis, loose: frozenset[int] | None
                     ) -> tuple[Any, frozenset[int]]:
    """A NamedSharding given the batch dimension at ``d``, every entry of its spec kept (a
    call JAX checked on one example, :data:`KEPT`): split over the spmd axes, else left to
    the compiler (``loose`` not None: a constraint's, as vmap batches one) or unsplit; the
    dimensions left to the compiler moved past it. Other shardings as they are."""
    if not isinstance(sharding, NamedSharding):
        return sharding, frozenset() if loose is None else loose
    names = axis.names
    # (left to the compiler only over a mesh with an Auto axis, which UNCONSTRAINED needs:
    # over Explicit axes alone the example's refusal, WSC-5, is what the check meets)
    open_batch = loose is not None and not names and \
        AxisType.Auto in tuple(sharding.mesh.axis_types)
    entry = _spec_entry(names) if names else UNCONSTRAINED if open_batch else None
    spec = sharding.spec
    moved = frozenset() if loose is None else frozenset(u + (d <= u) for u in loose) | (
        frozenset({d}) if open_batch else frozenset())
    return NamedSharding(sharding.mesh, P(*inserted(spec.partitions, d, entry),
                                          unreduced=spec.unreduced, reduced=spec.reduced),
                         memory_kind=sharding.memory_kind), moved


def _spec_entry(names: tuple[str, ...] | None) -> Any:
    return None if names is None else names[0] if len(names) == 1 else names


def batch_entry(axis: BatchAxis) -> Any:
    """The spec entry JAX writes for a batch dimension it makes (``get_sharding_for_vmap``):
    the Explicit axes vmap maps over, else None (unsplit)."""
    return _spec_entry(axis.explicit)


def _batch_shard_map(eq: ShardMap, numbers: tuple, dims: tuple, axis: BatchAxis, path: str
                     ) -> tuple[ShardMap, tuple]:
    """shard_map under vmap (JAX's ``_shard_map_batch``): the batched operands' specs gain
    the batch dimension, the body is batched over the per-shard batch, then the results'
    specs gain it where the body put it; unchecked against its operands, but where JAX
    checked the call on one example (:data:`KEPT`)."""
    names, entry = axis.names, _spec_entry(axis.names)
    sizes = eq.mesh.sizes_by_name if names is not None else {}
    if names is not None:
        with located(f"{path}.shard_map.in_specs"):
            check_shard_map_spmd_axes(eq.in_specs, names, "in_specs", eq.mesh)
        if eq.check_vma and any(d is not None for d in dims):
            with located(f"{path}.shard_map.in_specs"):
                check_spmd_axes_manual(names, manual_inside(eq), eq.mesh)
    in_specs = tuple(sp if d is None else _batch_spec(sp, d, entry)
                     for sp, d in zip(eq.in_specs, dims))
    per_shard = axis.size // math.prod(sizes.get(n, 1) for n in (names or ()))
    own = frozenset(names or ())
    # (the Explicit axes the batch is split over stay automatic inside: the body's batched
    # inputs keep that split, as JAX types them)
    kept_split = batch_split_inside(axis.explicit, eq.manual_axes)
    inner = BatchAxis(per_shard, names, axis.context, own if eq.check_vma else frozenset(),
                      axis.outer, own | axis.outer if eq.check_vma else frozenset(),
                      explicit=kept_split)
    rw = batch_body(eq.body, dims, inner, f"{path}.shard_map.")
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
    results = tuple(batched_type(r, d, 0) if d is None else batched_result(eq, batched_type(
        r, d, rw.types[n].shape[d] * ways), s, rw.types[n])
                    for r, d, n, s in zip(eq.results, out_dims, outputs, out_specs))
    kept_here = kept(path)
    checked = eq.checked and (all(d is None for d in dims) or kept_here)
    # (JAX checked the call on one example, under this vmap's Explicit axes: so are they)
    example = example_checked(eq, dims, axis.explicit, kept_here) if checked else {}
    new = dataclasses.replace(eq, operands=numbers, results=results, body=body,
                              in_specs=in_specs, out_specs=out_specs, checked=checked,
                              **example)
    return new, out_dims


def _batch_spec(spec: PartitionSpec, dim: int, entry: Any) -> PartitionSpec:
    """A spec with ``entry`` at ``dim``, padded with None up to it (JAX's ``batch_spec``)."""
    return P(*inserted(spec.partitions, dim, entry), unreduced=spec.unreduced,
             reduced=spec.reduced)


def _batch_size_held(rw: BatchedBody, numbers: tuple, dims: tuple) -> int:
    """The batch as the operands hold it (a shard_map's result may hold fewer than vmap's)."""
    return next((rw.types[n].shape[d] for n, d in zip(numbers, dims) if d is not None),
                rw.axis.size)


@BATCHING.register("keeps_axis")
def _batch_keeping_axis(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                        ) -> None:
    """An elementwise primitive, a cast between varying types or a reduction over a
    shard_map's axes: its operands batched at one axis (an unbatched one a scalar), its
    results batched there too, typed from the batched operands' split; a broadcasting one
    inside a check_vma shard_map casts its operands along the spmd axes (PBAT-3)."""
    name, size = eq.primitive, _batch_size_held(rw, numbers, dims)
    mapped = {d for d in dims if d is not None}
    shapes = {rw.types[n].shape for n in numbers if rw.types[n].shape != ()}
    scalars = all(d is not None or rw.types[n].shape == () for n, d in zip(numbers, dims))
    if not (len(mapped) == 1 and scalars and len(shapes) <= 1):
        if not entry_of(eq).broadcasting:
            _not_batched(eq, dims, path)
        numbers = aligned_operands(rw, numbers, dims)
        dims, mapped = tuple(None if d is None else 0 for d in dims), {0}
    d = mapped.pop()
    if name == "pvary" and rw.axis.casts:   # re-bound on a value now varying more
        collective_varying("pvary", collective_axes(name, dict(eq.params)),
                           rw.types[numbers[0]].varying, True)
    varying = rw.axis.varying | _carried(rw, eq, numbers)
    if entry_of(eq).broadcasting and rw.axis.casts:
        numbers = tuple(_varying_along(rw, n, d if dim is not None else None)
                        for n, dim in zip(numbers, dims))
        if len(numbers) == 1:   # the other operand a literal, written after it
            numbers += (_literal_varying(rw, numbers[0]),)
        varying = varying | rw.axis.casts
    results = tuple(_split_as_operands(batched_type(r, d, size, varying),
                                       [rw.types[n] for n in numbers])
                    for r in eq.results)
    if name == "convert_element_type" and _param(eq, "sharding"):   # its typed parameter
        params = {**dict(eq.params), "sharding": batched_parameter(_param(eq, "sharding"),
                                                                   d, rw.axis)}
        eq = dataclasses.replace(eq, params=tuple(sorted(params.items())))
    rw.add(eq.renumbered(numbers, results), (d,) * len(results))


def aligned_operands(rw: BatchedBody, numbers: tuple, dims: tuple) -> tuple[int, ...]:
    """A broadcasting primitive's operands where they are not batched alike (JAX's
    broadcasting batcher): each batched one's batch axis moved first (a transpose), each
    unbatched one of rank one or more given a leading dimension of 1 (a broadcast_in_dim),
    then a batched scalar given trailing dimensions of 1 up to the highest rank; unbatched
    scalars as they are. The primitive then broadcasts them, batched at 0."""
    moved = []
    for n, d in zip(numbers, dims):
        value = rw.types[n]
        if value.shape == () or d == 0:
            moved.append(n)
            continue
        if d is None:   # (over a mesh, bound with the type's sharding, unsplit at 0)
            shape = (1,) + tuple(value.shape)
            rw.add(broadcast_equation(n, value, shape, tuple(range(1, len(shape))),
                                      unit_typed(value, 0)), (None,))
        else:
            rw.add(transpose_equation(n, value, moved_axis(len(value.shape), d, 0)), (0,))
        moved.append(len(rw.types) - 1)
    rank = max(len(rw.types[n].shape) for n in moved)
    out = []
    for n, d in zip(moved, dims):
        value = rw.types[n]
        if d is not None and len(value.shape) < rank:
            shape = tuple(value.shape) + (1,) * (rank - len(value.shape))
            rw.add(broadcast_equation(n, value, shape, tuple(range(len(value.shape)))), (0,))
            n = len(rw.types) - 1
        out.append(n)
    return tuple(out)


@BATCHING.register("gathered")
def _batch_gathered(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                    ) -> None:
    """all_gather (and all_gather_invariant) under vmap: its gathered dimension moves past
    the batch axis (JAX's batchers in lax/parallel.py)."""
    _shifted(rw, eq, numbers, dims, path,
             lambda p, d: _gathered(p, d, "all_gather_dimension"))


@BATCHING.register("scattered")
def _batch_scattered(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                     ) -> None:
    """psum_scatter (``reduce_scatter``) under vmap: its scattered dimension moves past the
    batch axis."""
    _shifted(rw, eq, numbers, dims, path,
             lambda p, d: _gathered(p, d, "scatter_dimension"))


@BATCHING.register("all_to_all")
def _batch_all_to_all(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                      ) -> None:
    """all_to_all under vmap: its split and concat axes move past the batch axis."""
    _shifted(rw, eq, numbers, dims, path, lambda p, d: ({
        **p, "split_axis": p["split_axis"] + (d <= p["split_axis"]),
        "concat_axis": p["concat_axis"] + (d <= p["concat_axis"])}, d))


@BATCHING.register("reduction")
def _batch_reduction(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                     ) -> None:
    """A reduction under vmap: its reduced axes move past the batch axis, its result split
    as its batched operand less the reduced dimensions."""
    def shift(params: dict, d: int) -> tuple[dict, int]:
        params, out = _reduced(params, d)
        if params.get("out_sharding") is not None:   # its typed parameter, at the result's axis
            params = {**params, "out_sharding": batched_parameter(params["out_sharding"], out,
                                                                  rw.axis)}
        return params, out
    _shifted(rw, eq, numbers, dims, path, shift,
             lambda r, params: _reduced_split(r, rw.types[numbers[0]], params["axes"]))


def _shifted(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str, shift: Any,
             resplit: Any = None) -> None:
    """A primitive of one operand whose batching rewrites a dimension parameter: ``shift``
    takes (parameters, batch axis) to (parameters, the result's axis); ``resplit`` (a
    result, the parameters) types a batched result's split anew."""
    if len(dims) != 1:
        _not_batched(eq, dims, path)
    params, d = shift(dict(eq.params), dims[0])
    varying = rw.axis.varying | _carried(rw, eq, numbers)
    entry = operands_batch_split(rw, numbers)
    results = tuple(split_at(batched_type(r, d, _batch_size_held(rw, numbers, dims), varying),
                             d, entry) for r in eq.results)
    if resplit is not None:
        results = tuple(resplit(r, params) for r in results)
    rw.add(dataclasses.replace(eq, operands=numbers, results=results,
                               params=tuple(sorted(params.items()))), (d,))


@BATCHING.register("transpose")
def _batch_transpose(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                     ) -> None:
    """A transpose under vmap: the batch axis first, the permutation moved past it."""
    if len(dims) != 1:
        _not_batched(eq, dims, path)
    perm = tuple(_param(eq, "permutation"))
    d = dims[0]
    new_perm = (d,) + tuple(i if i < d else i + 1 for i in perm)
    rw.add(transpose_equation(numbers[0], rw.types[numbers[0]], new_perm), (0,))


@BATCHING.register("broadcast_in_dim")
def _batch_broadcast(rw: BatchedBody, eq: Opaque, numbers: tuple, dims: tuple, path: str
                     ) -> None:
    """A broadcast_in_dim under vmap: its operand's batch axis moved first (a transpose),
    then broadcast with the batch dimension first, typed by its sharding parameter unsplit
    there (JAX's batcher)."""
    if len(dims) != 1:
        _not_batched(eq, dims, path)
    operand = numbers[0]
    if dims[0] != 0:
        rw.add(transpose_equation(operand, rw.types[operand], moved_axis(len(rw.types[operand].shape),
                                                            dims[0], 0)), (0,))
        operand = len(rw.types) - 1
    (result,) = eq.results
    shape = (_batch_size_held(rw, numbers, dims),) + tuple(result.shape)
    kept = tuple(int(i) + 1 for i in _param(eq, "broadcast_dimensions"))
    typed = _param(eq, "sharding")   # JAX's batcher: the parameter, the batch entry at 0
    typed = NamedSharding(typed.mesh, _batch_spec(typed.spec, 0, batch_entry(rw.axis))) if isinstance(
        typed, NamedSharding) else None
    rw.add(broadcast_equation(operand, rw.types[operand], shape, (0,) + kept, typed), (0,))


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


def _carried(rw: BatchedBody, eq: Opaque, numbers: tuple) -> frozenset[str]:
    """The enclosing vmaps' spmd axes an operand was cast along, which the result varies
    along too (less those a reducing collective names)."""
    outer = rw.axis.casts - rw.axis.varying
    if not outer:
        return frozenset()
    carried = frozenset().union(*(rw.types[n].varying for n in numbers)) & outer
    if entry_of(eq).drops_varying:   # a collective whose result no longer varies along them
        carried -= set(collective_axes(eq.primitive, dict(eq.params)))
    return carried


def _varying_along(rw: BatchedBody, number: int, dim: int | None) -> int:
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


def _literal_varying(rw: BatchedBody, number: int) -> int:
    """A literal operand (``x * 0.5``: the description holds no value for it) cast to vary
    along the spmd axes, as JAX's broadcasting batcher casts it: a ``pvary`` of no value
    the description holds, a scalar of the other operand's dtype."""
    value = rw.types[number]
    check_spmd_casts(tuple(sorted(rw.axis.casts)), value.mesh)
    axes = tuple(a for a in value.mesh.axis_names if a in rw.axis.casts)
    rw.add(Opaque((), (dataclasses.replace(value.type, shape=(), varying=rw.axis.casts),),
                  primitive="pvary", params=(("axes", axes),)), (None,))
    return len(rw.types) - 1


def batch_typed(value: Value, axis: int, entry: Any) -> NamedSharding | None:
    """The sharding JAX's batching binds a broadcast of ``value`` with where it inserts a
    dimension at ``axis`` split over ``entry`` (``batching.broadcast``: the type's spec
    written out to its rank, ``entry`` inserted there; ``entry`` the Explicit axes vmap
    maps over, or None for a dimension of 1); none where the type is over no mesh."""
    if value.mesh is None:
        return None
    spec = value.spec if value.spec is not None else P()
    entries = tuple(spec) + (None,) * (len(value.shape) - len(tuple(spec)))
    return NamedSharding(value.mesh, P(*inserted(entries, axis, entry),
                                       unreduced=spec.unreduced, reduced=spec.reduced))


def batched_parameter(sharding: Any, axis: int, batch: BatchAxis) -> Any:
    """A primitive's sharding parameter as its batching rule binds it (JAX's
    ``get_sharding_for_vmap``): the batch dimension's entry (:func:`batch_entry`) inserted
    in its spec at ``axis``; anything else (None) as it is."""
    if not isinstance(sharding, NamedSharding):
        return sharding
    spec = sharding.spec
    return NamedSharding(sharding.mesh, P(*inserted(spec.partitions, axis, batch_entry(batch)),
                                          unreduced=spec.unreduced, reduced=spec.reduced),
                         memory_kind=sharding.memory_kind)


def unit_typed(value: Value, axis: int) -> NamedSharding | None:
    """:func:`batch_typed` for a dimension of 1 (JAX's broadcasting batcher), unsplit."""
    return batch_typed(value, axis, None)


def typed_like(value: Value) -> NamedSharding | None:
    """A broadcast to ``value``'s shape bound with its type's sharding (the spec written
    out to its rank), as JAX's sort and select batching rules bind one; none where the
    type is over no mesh."""
    if value.mesh is None:
        return None
    spec = value.spec if value.spec is not None else P()
    entries = tuple(spec) + (None,) * (len(value.shape) - len(tuple(spec)))
    return NamedSharding(value.mesh, P(*entries, unreduced=spec.unreduced,
                                       reduced=spec.reduced))


def _param(eq: Opaque, name: str) -> Any:
    return dict(eq.params).get(name, ())


def moved_axis(rank: int, source: int, target: int) -> tuple[int, ...]:
    """The permutation that moves axis ``source`` to ``target`` (JAX's moveaxis)."""
    perm = [i for i in range(rank) if i != source]
    perm.insert(target, source)
    return tuple(perm)


def transpose_equation(operand: int, value: Value, perm: tuple[int, ...]) -> Opaque:
    """A transpose by ``perm``; its result's split over Explicit axes is permuted alike."""
    shape = tuple(value.shape[i] for i in perm)
    result = dataclasses.replace(value.type, shape=shape, spec=rearranged(value.spec, perm))
    return Opaque((operand,), (result,), primitive="transpose",
                  params=(("permutation", perm),))


def broadcast_equation(operand: int, value: Value, shape: tuple, kept: tuple,
               typed: NamedSharding | None = None) -> Opaque:
    """A broadcast_in_dim to ``shape``, the operand's dimensions at ``kept``: its result
    typed by its sharding parameter ``typed`` where bound with one, else the new
    dimensions unsplit and the kept ones split as the operand's."""
    sources = tuple(kept.index(i) if i in kept else None for i in range(len(shape)))
    spec = rearranged(value.spec, sources) if typed is None else type_spec(typed)
    mesh = value.mesh
    if typed is not None and spec is not None and mesh is None:   # (typed over its mesh)
        mesh = typed.mesh.abstract if isinstance(typed.mesh, Mesh) else typed.mesh
    result = dataclasses.replace(value.type, shape=tuple(shape), spec=spec, mesh=mesh)
    return Opaque((operand,), (result,),
                  primitive="broadcast_in_dim",
                  params=(("broadcast_dimensions", kept), ("sharding", typed),
                          ("shape", tuple(shape))))

