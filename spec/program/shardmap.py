"""``shard_map`` equations inside a whole program: their SMAP rules, their bodies' collectives, and what each equation decides.

:func:`trace_shard_map` applies the SMAP rules to one :class:`ShardMap` equation where
``jax.jit`` of the program meets them, tracing (stage ``trace``): the manual axes (SMAP-1),
the specs' axes and reductions (SMAP-3, SMAP-4; in_specs, then out_specs), the operands
against the in specs (SMAP-7, SMAP-8, SMAP-19), their shards (SMAP-9) and the shards' types
(SMAP-18), then the body,
equation by equation — each collective's axes (SMAP-13), shape (SMAP-21), varying axes
(SMAP-20) and split over the Explicit axes left automatic (SMAP-24), inner jits and nested
shard_maps walked the same way — and last the body's results against the out specs
(SMAP-7, SMAP-11, SMAP-19, SMAP-12, SMAP-10).
:func:`lower_shard_maps` applies what lowering checks (stage ``lower``): the in specs of the
operands the body uses (SMAP-12), each live collective's axes named once (SMAP-13),
ppermute's pairs (SMAP-22), psum_scatter's operand unsplit over Explicit axes (SMAP-23)
and an untiled all_gather's operand, a dimension of 1 inserted, divided by its split
(SMAP-25).

Each equation walked leaves a small frozen record of what it decided, by path
(:class:`ShardMapDecision`, :class:`CollectiveDecision`, :class:`ShardingsDecision`), which
:func:`~shardlaw.spec.program.explain.explain_program` puts in its verdict.

A body's values are typed per shard, split over the Explicit axes left automatic. The
description gives every equation's result types; a collective's must be those SMAP-20,
SMAP-21 and SMAP-24 decide, an elementwise result split as its operands of its shape, a
shard_map body's inputs the shards SMAP-9 and SMAP-18 decide (with, under check_vma, the
varying axes of their in specs) and its results split as SMAP-18 puts them together, else
the description is refused (PROG-0): ``describe_program`` of a real function gives them as JAX
typed them, so a difference is a disagreement with JAX.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from typing import Any

from ..core.rules import located, staged
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec
from ..transforms.shardmap_meshes import check_operand_mesh
from ..transforms.shardmap_nested import (
    check_context_mesh, check_not_reduced, check_reduced_operands,
)
from ..transforms.shardmap_bodies import (
    check_gather_broadcast_divides, check_permutation,
    check_scatter_operand_unsplit, collective_shape, collective_split, collective_varying,
)
from ..transforms.shardmap_collectives import (
    check_collective_axes, collective_groups, manual_sharding,
)
from ..transforms.shardmap_parameters import Shaped, entry_ways, spec_axes
from ..transforms.shardmap_refusals import (
    check_gather_to_reduced, check_index_groups, check_lowered_index_groups,
    check_placement_mesh, group_size, grouped_replica_groups,
)
from ..transforms.shardmap_specs import (
    check_divisible, check_no_repeated_axes, check_replication, check_spec_axes,
    check_spec_rank, check_spec_reductions, manual_axes_of,
)
from ..transforms.shardmap_types import (
    check_reductions_held, check_specs_match_types, explicit_types, per_shard_shape,
    type_inside, unshard_shape,
)
from .description import (
    DevicePut, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap, Value,
    check_program,
)
from .primitives import IN_SHARD_MAP, RECORDS, Kind, entry_of

P = PartitionSpec  # the name the examples use

__all__ = ["ShardMapDecision", "CollectiveDecision", "ShardingsDecision", "Manual",
           "trace_shard_map", "lower_shard_maps", "check_listed_in_specs",
           "GROUPS_LISTED_UP_TO", "VMAPPED_EXPLICIT", "canonical_split"]

# The Explicit mesh axes the vmaps an example is traced under split their batch over (JAX's
# axis environment's explicit_mesh_axis_names), which SMAP-17 leaves out of the mesh's axes.
VMAPPED_EXPLICIT: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "VMAPPED_EXPLICIT", default=frozenset())

# Replica groups are listed for meshes of at most this many devices (None above: nothing
# enumerates the devices of a large mesh).
GROUPS_LISTED_UP_TO = 4096


# --------------------------------------------------------------------------- records

@dataclasses.dataclass(frozen=True)
class ShardMapDecision:
    """What a shard_map equation decided: its manual axes, the per-shard type of each
    body input and of each body result as the out specs take it (varying along their axes
    too, under check_vma) and, for a shard_map not inside another, the HLO sharding that
    marks each body input manual when lowered without Shardy (SMAP-15; None: no sharding
    ops, the manual axes hold one device)."""

    manual_axes: tuple[str, ...]
    in_types: tuple[Value, ...]
    out_types: tuple[Value, ...]
    manual_shardings: tuple = ()

    def __str__(self) -> str:
        return (f"shard_map manual {list(self.manual_axes)}: in {list(self.in_types)}, "
                f"out {list(self.out_types)}")


@dataclasses.dataclass(frozen=True)
class CollectiveDecision:
    """What a collective inside a shard_map's body decided: its axes, its per-shard result
    type, its replica groups (device ids over a concrete mesh, mesh positions over an
    abstract one; None for pvary, which moves nothing, and above
    :data:`GROUPS_LISTED_UP_TO` devices) and, for ppermute, the (source, target) devices
    of every group (its pairs' positions read in the mesh's order of the group)."""

    primitive: str
    axes: tuple[str, ...]
    result: Value
    groups: tuple[tuple[int, ...], ...] | None = None
    pairs: tuple[tuple[int, int], ...] | None = None

    def __str__(self) -> str:
        text = f"{self.primitive} over {list(self.axes)} -> {self.result!r}"
        if self.groups is not None:
            text += f", groups {[list(g) for g in self.groups]}"
        if self.pairs is not None:
            text += f", pairs {list(self.pairs)}"
        return text


@dataclasses.dataclass(frozen=True)
class ShardingsDecision:
    """The shardings a constraint, device_put, reshard or inner jit names (a jit's
    in_shardings, then its out_shardings; UNSPECIFIED where not given)."""

    kind: str
    shardings: tuple
    out_shardings: tuple = ()

    def __str__(self) -> str:
        text = f"{self.kind} {list(self.shardings)}"
        return text + (f" -> {list(self.out_shardings)}" if self.out_shardings else "")


def shardings_decision(eq: Any) -> ShardingsDecision | None:
    """The record of a constraint, device_put, reshard or jit equation (None: another), by
    its rule in the primitive table (:data:`RECORDS`)."""
    record = RECORDS.of(entry_of(eq))
    return None if record is None else record(eq)


@RECORDS.register("placement")
def _placement_record(eq: ShardingConstraint | Reshard) -> ShardingsDecision:
    return ShardingsDecision(eq.kind, (eq.sharding,))


@RECORDS.register("device_put")
def _device_put_record(eq: DevicePut) -> ShardingsDecision:
    return ShardingsDecision(eq.kind, eq.targets)


@RECORDS.register("jit")
def _jit_record(eq: Jit) -> ShardingsDecision:
    return ShardingsDecision(eq.kind, eq.body.in_shardings, eq.body.out_shardings)


# --------------------------------------------------------------------------- context

# The inner meshes made so far, by the mesh's identity and the manual axes (a program
# repeats its shard_map's mesh; building an AbstractMesh checks its axes each time).
_INNER_MESHES: dict = {}


def _typed(like: Value | None, shape: tuple, dtype: str, mesh: AbstractMesh, *,
           weak_type: bool = False, varying: frozenset[str] = frozenset(),
           split: tuple = (), reduced: frozenset[str] = frozenset()) -> Value:
    """A per-shard type, split over the automatic Explicit axes as ``split`` says (one entry
    per dimension, None: unsplit); ``like`` itself when it is already that type (as the
    description gives it: shape, dtype, varying axes and split), which spares building a
    Value again."""
    spec = canonical_split(split)
    if like is not None and (like.shape, like.dtype, like.varying, like.spec, like.reduced
                             ) == (shape, dtype, varying, spec, reduced):
        return like
    return Value(shape, dtype, weak_type, mesh, varying, spec=spec, reduced=reduced)


def canonical_split(split: tuple) -> PartitionSpec | None:
    """A split as a value's type holds it: without its trailing unsplit entries, None when
    nothing is split (so two types compare by their ``spec``)."""
    entries = list(split)
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries) if entries else None


@dataclasses.dataclass(frozen=True)
class Manual:
    """The manual context a body is traced in: the shard_map's mesh, every axis manual
    there (the enclosing shard_maps' too) and check_vma."""

    mesh: Mesh | AbstractMesh
    manual: frozenset[str]
    check_vma: bool

    @property
    def inner_mesh(self) -> AbstractMesh:
        """The abstract mesh a value's type carries inside: the manual axes typed Manual."""
        key = (id(self.mesh), self.manual)
        found = _INNER_MESHES.get(key)
        if found is not None and found[0] is self.mesh:
            return found[1]
        types = tuple(AxisType.Manual if n in self.manual else t
                      for n, t in zip(self.mesh.axis_names, self.mesh.axis_types))
        inner = AbstractMesh(self.mesh.axis_sizes, self.mesh.axis_names, types)
        if len(_INNER_MESHES) > 256:
            _INNER_MESHES.clear()
        _INNER_MESHES[key] = (self.mesh, inner)
        return inner

    def size(self, axes: tuple[str, ...]) -> int:
        return math.prod(self.mesh.axis_size(a) for a in axes)


def _same_type(given: Value, decided: Value, what: str) -> None:
    """A described type is the decided one: shape, dtype, varying axes and split over the
    automatic Explicit axes (PROG-0)."""
    # a value's spec is canonical (None where nothing is split), so specs compare as splits
    if given is decided or (given.shape, given.dtype, given.varying, given.spec,
                            given.reduced) == (decided.shape, decided.dtype, decided.varying,
                                               decided.spec, decided.reduced):
        return
    split = "" if decided.spec is None else f" split {_split_of(decided)}"
    reduced = f" reduced along {sorted(decided.reduced)}" if decided.reduced else ""
    check_program(False, what, f"of type {decided.dtype}{list(decided.shape)} varying along "
                  f"{sorted(decided.varying)}{reduced}{split} (as the SMAP rules type it)",
                  given)


# --------------------------------------------------------------------------- tracing

def trace_shard_map(eq: ShardMap, operands: tuple[Value, ...], path: str,
                    decided: list | None = None, outer: Manual | None = None) -> None:
    """The SMAP rules of one shard_map equation at ``path``, where tracing meets them: its
    specs, its operands, its body and its results (stage ``trace``); appends
    ``(path, record)`` for it and every equation of its body to ``decided``."""
    decided = [] if decided is None else decided
    with staged("trace"):
        with located(path):
            if outer is not None and eq.checked:   # JAX checks the mesh first (SMAP-30)
                check_context_mesh(eq.mesh, outer.inner_mesh, path)
            manual = manual_axes_of(eq.mesh, set(eq.manual_axes), VMAPPED_EXPLICIT.get()
                                    | eq.vmapped if eq.checked else frozenset())
        if eq.checked:
            _check_specs(eq, manual, path)
        in_types = _map_operands(eq, operands, manual, path)
        context = Manual(eq.mesh, manual | (outer.manual if outer else frozenset()),
                         eq.check_vma)
        for k, (given, wanted) in enumerate(zip(eq.body.inputs, in_types)):
            _same_type(given, wanted, f"input {k} of the shard_map's body at {path}")
        at = len(decided)   # the shard_map's record comes before its body's
        walk_body(eq.body, context, f"{path}.shard_map.", decided)
        out_types = _map_results(eq, manual, path)
    marks = () if outer is not None else tuple(
        manual_sharding(eq.mesh, manual, len(t.shape)) for t in in_types)
    decided.insert(at, (path, ShardMapDecision(tuple(sorted(manual)), in_types, out_types,
                                               marks)))


def _closed_over(given: Value, operand: Value, spec: Any, inner: AbstractMesh) -> bool:
    """Whether a body input is a value the body closes over, as JAX lifts one: its operand
    passed whole (an in_spec splitting nothing), typed inside as it was outside, over
    another mesh than the body's, ``inner`` (SMAP-29 meets it where a primitive takes it)."""
    return given.mesh is not None and given.mesh != inner and \
        not spec_axes(spec) and not given.varying and (
            given.shape, given.dtype, given.spec, given.mesh) == (
            operand.shape, operand.dtype, operand.spec, operand.mesh)


def _check_specs(eq: ShardMap, manual: frozenset[str], path: str) -> None:
    """SMAP-3 and SMAP-4 for every in spec, then every out spec."""
    for which, specs in (("in_specs", eq.in_specs), ("out_specs", eq.out_specs)):
        for i, spec in enumerate(specs):
            with located(f"{path}.shard_map.{which}[{i}]"):
                check_spec_axes(spec, f"{which}[{i}]", manual)
                check_spec_reductions(spec, f"{which}[{i}]", eq.mesh, manual)


def _type_spec(value: Value) -> Any:
    """The spec an operand's type carries (``jax.typeof(x).sharding.spec``): none for a value
    whose type names no mesh, else its split over Explicit axes (``Value.spec``; unsplit:
    ``P()``), an argument's and a traced value's alike."""
    if value.mesh is None:
        return None
    return _UNSPLIT if value.spec is None else value.spec


_UNSPLIT = PartitionSpec()   # built once: a spec is immutable, and building one checks it


def _example(spec: PartitionSpec, value: Value, dims: tuple[int, ...]
             ) -> tuple[PartitionSpec, Shaped]:
    """An operand's in spec and type as JAX checked them on one example (SMAP-17): without
    the dimensions ``dims`` that the batches of the vmaps called inside the function take
    (the batched spec's and type's entries there dropped); as given where none."""
    typed = _type_spec(value)
    if not dims:
        return spec, Shaped(value.shape, typed)
    rank = len(value.shape)

    def dropped(entries: tuple) -> tuple:
        padded = tuple(entries)[:rank] + (None,) * (rank - len(entries))
        return tuple(e for k, e in enumerate(padded) if k not in dims)
    example = PartitionSpec(*dropped(tuple(spec)), unreduced=spec.unreduced,
                            reduced=spec.reduced)
    if typed is not None:
        typed = PartitionSpec(*dropped(tuple(typed)), unreduced=typed.unreduced,
                              reduced=typed.reduced)
    return example, Shaped(tuple(n for k, n in enumerate(value.shape) if k not in dims), typed)


def _map_operands(eq: ShardMap, operands: tuple[Value, ...], manual: frozenset[str],
                  path: str) -> tuple[Value, ...]:
    """SMAP-7 for every operand, SMAP-8 for every operand, SMAP-17 against the operand's type
    (an argument's or a traced value's split), then SMAP-19, SMAP-9 and SMAP-18 (the shard's
    type keeps the Explicit axes left automatic, which must split it): the type of each
    body input. A shard_map a
    batching rule bound (``eq.checked`` False) is not checked against its operands (JAX
    checks them when the user calls shard_map): each dimension is divided by its ways,
    rounded down, as JAX types it; the compiler refuses what does not divide, at lower."""
    at = [f"{path}.shard_map.in_specs[{i}]" for i in range(len(operands))]
    for i, (where, spec, value) in enumerate(zip(at, eq.in_specs, operands)
                                             if eq.checked else ()):
        with located(where):
            check_spec_rank(spec, value.shape, f"in_specs[{i}]", f"operand {i}")
    for i, (where, spec, value) in enumerate(zip(at, eq.in_specs, operands)
                                             if eq.checked else ()):
        with located(where):
            check_divisible(eq.mesh, spec, value.shape, f"in_specs[{i}]", f"operand {i}")
    inner = Manual(eq.mesh, manual, eq.check_vma).inner_mesh
    # a value the body closes over is lifted whole, typed as outside, its type unchecked
    closed = {i for i, (given, spec, value) in enumerate(zip(eq.body.inputs, eq.in_specs,
                                                             operands))
              if _closed_over(given, value, spec, inner)}
    for i, (where, spec, value) in enumerate(zip(at, eq.in_specs, operands)
                                             if eq.checked else ()):
        example = _example(spec, value, eq.batch_dims[i] if eq.batch_dims else ())
        with located(where):
            if i not in closed:
                check_specs_match_types(eq.mesh, manual, [example[0]], (example[1],),
                                        VMAPPED_EXPLICIT.get() | eq.vmapped)
    types = []
    for i, (where, spec, value) in enumerate(zip(at, eq.in_specs, operands)):
        if i in closed:
            types.append(eq.body.inputs[i])
            continue
        with located(where):
            typed = _type_spec(value)   # (reduced where a reshard made it so)
            typed = _UNSPLIT if typed is None else typed
            check_reductions_held(spec, f"in_specs[{i}]", f"operand {i}",
                                  frozenset(typed.unreduced), frozenset(typed.reduced))
            shape = (per_shard_shape(eq.mesh, spec, value.shape, manual) if eq.checked
                     else _divided(eq.mesh, spec, value.shape))
            # the shard's type keeps the Explicit axes left automatic (SMAP-18), which
            # must split it (checked where JAX checks the operands)
            split = (explicit_types(eq.mesh, manual, _type_spec(value), None, shape,
                                    f"operand {i}")[0] if eq.checked else
                     type_inside(eq.mesh, manual, _type_spec(value), len(shape)))
        varying = spec_axes(spec) if eq.check_vma else frozenset()
        given = eq.body.inputs[i] if i < len(eq.body.inputs) else None
        # (under check_vma, reduced inside along the in spec's reduced axes, SMAP-19's)
        types.append(_typed(given, shape, value.dtype, inner, weak_type=value.weak_type,
                            varying=varying | value.varying, split=split,
                            reduced=frozenset(spec.reduced) if eq.check_vma else frozenset()))
    return tuple(types)


def _map_results(eq: ShardMap, manual: frozenset[str], path: str) -> tuple[Value, ...]:
    """SMAP-7 for every non-empty out spec, SMAP-11 for every result (check_vma), then
    SMAP-19, SMAP-12 and SMAP-10 for each: the per-shard type of each result as the out
    specs take it; the equation's result shapes must be SMAP-10's (PROG-0)."""
    body = eq.body
    results = [body.value_types[n] for n in body.outputs]
    at = [f"{path}.shard_map.out_specs[{j}]" for j in range(len(results))]
    for j, (where, spec, value) in enumerate(zip(at, eq.out_specs, results)):
        if len(spec):
            with located(where):
                check_spec_rank(spec, value.shape, f"out_specs[{j}]", f"the body's result {j}")
    if eq.check_vma:
        # the axes this shard_map makes manual (an enclosing one's stay varying, and so do
        # the axes Manual in the mesh it is given: nested, all its axes manual already)
        newly = manual - _manual_in(eq.mesh)
        for j, (where, spec, value) in enumerate(zip(at, eq.out_specs, results)):
            with located(where):
                # (reduced along an axis, a result is not the same along it either)
                check_replication(eq.mesh, spec, (value.varying | value.reduced) & newly,
                                  f"out_specs[{j}]")
    out = []
    for j, (where, spec, value) in enumerate(zip(at, eq.out_specs, results)):
        with located(where):
            if eq.check_vma:
                check_reductions_held(spec, f"out_specs[{j}]", "the result",
                                      reduced=value.reduced)
            check_no_repeated_axes(spec, f"out_specs[{j}]")
            shape = (unshard_shape(eq.mesh, spec, value.shape, manual) if eq.checked
                     else _divided(eq.mesh, spec, value.shape, times=True))
        check_program(shape == eq.results[j].shape, f"result {j} of the shard_map at {path}",
                      f"of shape {shape} (its body's result put together by its out spec)",
                      eq.results[j])
        if eq.checked and eq.results[j].mesh is not None and AxisType.Explicit in \
                eq.mesh.axis_types:   # (over no Explicit axis no type is split)
            # typed over a mesh, the result is split as SMAP-18 puts its type together
            outside = explicit_types(eq.mesh, manual, _type_spec(value), spec, value.shape,
                                     f"the body's result {j}")[1]
            check_program(_split_of(eq.results[j]) == _fitted(outside, len(shape)),
                          f"result {j} of the shard_map at {path}",
                          f"split {outside} (its body's result's split put together with "
                          f"its out spec's Explicit axes)", eq.results[j])
        varying = value.varying | (spec_axes(spec) if eq.check_vma else frozenset())
        out.append(value if varying == value.varying else
                   dataclasses.replace(value, varying=varying))
    return tuple(out)


def _manual_in(mesh: Mesh | AbstractMesh) -> frozenset[str]:
    """The axes typed Manual in a mesh a shard_map is given (a nested one's body mesh)."""
    return frozenset(n for n, t in zip(mesh.axis_names, mesh.axis_types)
                     if t is AxisType.Manual)


def _divided(mesh: Mesh | AbstractMesh, spec: PartitionSpec, shape: tuple[int, ...],
             times: bool = False) -> tuple[int, ...]:
    """Each dimension divided (or, ``times``, multiplied) by the ways its spec entry splits
    it, rounded down: the types JAX gives an unchecked shard_map's body and results."""
    ways = [entry_ways(mesh, entry) for entry in spec] + [1] * (len(shape) - len(spec))
    return tuple(size * n if times else size // n for size, n in zip(shape, ways))


def walk_body(program: Program, context: Manual, prefix: str, decided: list) -> None:
    """Every equation of a body traced in ``context``, in order: collectives decided, inner
    jits and nested shard_maps walked, the others' shardings recorded."""
    for k, eq in enumerate(program.equations):
        path = f"{prefix}body[{k}]"
        operands = tuple(program.value_types[n] for n in eq.operands)
        if isinstance(eq, Opaque):   # its operands typed over the body's mesh (SMAP-29)
            for value in operands:
                check_operand_mesh(eq.primitive, _words(value), value.mesh,
                                   context.inner_mesh, path)
        inside = IN_SHARD_MAP.of(entry_of(eq))
        if inside is not None:
            inside(eq, operands, context, path, decided)
        elif shardings_decision(eq) is not None:
            decided.append((path, shardings_decision(eq)))


def _words(value: Value) -> str:
    split = "" if value.spec is None else f" split {tuple(value.spec)}"
    return f"{value.dtype}{list(value.shape)}{split}"


@IN_SHARD_MAP.register("collective")
def _walk_collective(eq: Opaque, operands: tuple[Value, ...], context: Manual, path: str,
                     decided: list) -> None:
    decided.append((path, _collective(eq, operands, context, path)))


@IN_SHARD_MAP.register("shard_map")
def _walk_shard_map(eq: ShardMap, operands: tuple[Value, ...], context: Manual, path: str,
                    decided: list) -> None:
    trace_shard_map(eq, operands, path, decided, context)


@IN_SHARD_MAP.register("jit")
def _walk_jit(eq: Jit, operands: tuple[Value, ...], context: Manual, path: str,
              decided: list) -> None:
    from ..jit.matching import check_fits

    decided.append((path, shardings_decision(eq)))
    body = eq.body
    for i, (s, value) in enumerate(zip(body.in_shardings, operands)):
        if eq.checked:   # (FIT-1 of the per-shard operands, as JAX checks them)
            check_fits(s, value.shape, f"{path}.jit.in_shardings[{i}]")
    walk_body(body, context, f"{path}.jit.", decided)
    for i, (s, value) in enumerate(zip(body.out_shardings, eq.results or ())):
        if eq.checked:
            check_fits(s, value.shape, f"{path}.jit.out_shardings[{i}]")


@IN_SHARD_MAP.register("sharding_constraint")
def _walk_constraint(eq: ShardingConstraint, operands: tuple[Value, ...], context: Manual,
                     path: str, decided: list) -> None:
    """A constraint inside a body, as with_sharding_constraint checks it while JAX traces
    the body: its sharding of a rank the per-shard value has (WSC-4), naming no manual
    axis (WSC-5: a bare spec is read over the body's mesh, its manual axes Manual)."""
    from ..jit.call import Arg
    from ..transforms.constraint import check_constraint_axes, check_constraint_fits

    decided.append((path, shardings_decision(eq)))
    if eq.checked:
        value = Arg.numpy(operands[0].shape)
        with located(path):
            check_constraint_fits(eq.sharding, value, path)
            check_constraint_axes(eq.sharding, value, None, path)
            check_placement_mesh(eq.kind, eq.sharding, operands[0].varying, path)


@IN_SHARD_MAP.register("reshard")
def _walk_reshard(eq: Reshard, operands: tuple[Value, ...], context: Manual, path: str,
                  decided: list) -> None:
    """A reshard inside a body: its result is typed over its sharding's mesh, which must
    type the manual axes its operand varies along Manual (SMAP-28)."""
    decided.append((path, shardings_decision(eq)))
    with located(path):
        check_placement_mesh(eq.kind, eq.sharding, operands[0].varying, path)


@IN_SHARD_MAP.register("gathered_to")
def _walk_gathered_to(eq: Opaque, operands: tuple[Value, ...], context: Manual, path: str,
                      decided: list) -> None:
    """An all_gather to invariant or reduced values (``all_gather_invariant``,
    ``all_gather_reduced``): over no index groups (SMAP-26), over manual axes (SMAP-13),
    to reduced values of an operand varying along one of them (SMAP-27), of an operand not
    reduced along them (SMAP-31); to reduced values, its result is typed as SMAP-21 gathers
    it, no longer varying along its axes but reduced along them (SMAP-31; PROG-0 where the
    description types it otherwise), to invariant values left as described."""
    params = dict(eq.params)
    axes = collective_axes(eq.primitive, params)
    to = "reduced" if eq.primitive == "all_gather_reduced" else "invarying"
    operand = operands[0] if operands else None
    with located(path):
        if params.get("axis_index_groups") is not None:
            check_index_groups("all_gather", axes, params["axis_index_groups"],
                               context.check_vma, gathers_to=to)
        check_collective_axes(context.mesh, axes, context.manual, None, lowering=False)
        if to == "reduced":
            check_gather_to_reduced(axes, operand.varying if operand else frozenset())
        if operand is not None:
            check_not_reduced(eq.primitive, axes, _words(operand), operand.reduced)
    if to == "reduced" and operand is not None and eq.results and len(eq.results) == 1:
        _gathered_to_reduced(eq, operand, axes, params, context, path)


def _gathered_to_reduced(eq: Opaque, operand: Value, axes: tuple, params: dict,
                         context: Manual, path: str) -> None:
    """An all_gather to reduced values types its result as an all_gather of its operand
    (SMAP-21, SMAP-24), no longer varying along its axes but reduced along them."""
    with located(path):
        shape = collective_shape("all_gather", operand.shape, context.size(axes),
                                 {**params, "axes": axes})
        split = collective_split(context.mesh, "all_gather", axes, _split_of(operand), shape)
    result = _typed(eq.results[0], shape, operand.dtype, context.inner_mesh,
                    weak_type=operand.weak_type, varying=operand.varying - set(axes),
                    split=split, reduced=operand.reduced | set(axes))
    _same_type(eq.results[0], result, f"the result of the {eq.primitive} at {path}")


@IN_SHARD_MAP.register("elementwise")
def _elementwise(eq: Opaque, operands: tuple[Value, ...], context: Manual, path: str,
                 decided: list) -> None:
    """An elementwise result inside a body is split over the automatic Explicit axes as
    its operands of its shape are, where they agree (PROG-0: else the description is
    not JAX's typing); reduced along its operands' reduced axes (SMAP-32, which refuses
    operands reduced otherwise, and any in a body leaving axes automatic)."""
    if any(v.reduced for v in operands):
        with located(path):
            reduced = check_reduced_operands(eq.primitive, tuple(
                (v.varying, v.reduced) for v in operands), all_manual=all(
                    t is AxisType.Manual for t in context.inner_mesh.axis_types))
        for result in eq.results:
            check_program(result.reduced == reduced, f"the result of the {eq.primitive} at "
                          f"{path}", f"reduced along {sorted(reduced)} as its operands are",
                          result)
    shape = eq.results[0].shape if len(eq.results) == 1 else None
    specs = {v.spec for v in operands if v.shape == shape}   # canonical: compared as splits
    if len(specs) != 1:
        return   # nothing of its shape to follow, or operands that disagree: left as given
    (spec,) = specs
    check_program(eq.results[0].spec == spec, f"the result of the {eq.primitive} at {path}",
                  f"split {spec} as its operands of its shape are", eq.results[0])


# --------------------------------------------------------------------------- collectives

def collective_axes(primitive: str, params: dict[str, Any]) -> tuple:
    """The axes a collective equation names, as a tuple (its ``axes`` or ``axis_name``):
    axis names (PROG-0)."""
    named = params.get("axes", params.get("axis_name", ()))
    axes = (named,) if isinstance(named, str) else named
    check_program(type(axes) is tuple and all(isinstance(a, str) for a in axes),
                  f"the axes of a {primitive}", "an axis name or a tuple of axis names", named)
    return axes




def _pair(value: Any) -> bool:
    return type(value) is tuple and len(value) == 2 and all(type(v) is int for v in value)


def _check_params(eq: Opaque, path: str) -> dict[str, Any]:
    """A collective equation holds its parameters (PROG-0): the axes it names, its
    dimensions as ints, ppermute's pairs of ints; ``operands``: one (axis_index: none)."""
    params = dict(eq.params)
    for name in entry_of(eq).params:   # (as jax.make_jaxpr shows them)
        check_program(name in params, f"the {eq.primitive} at {path}",
                      f"an equation with the parameter {name!r}", eq.params)
    for name in ("all_gather_dimension", "scatter_dimension", "split_axis", "concat_axis"):
        if name in params:
            check_program(type(params[name]) is int, f"{name} of the {eq.primitive} at "
                          f"{path}", "an int", params[name])
    if eq.primitive == "ppermute":
        perm = params["perm"]
        check_program(type(perm) is tuple and all(_pair(p) for p in perm),
                      f"perm of the ppermute at {path}", "a tuple of (source, target) int "
                      "pairs", perm)
    # A literal operand is not described (a constant JAX casts, as in ``x * 0.5``): only
    # the collectives that keep the shape may leave theirs out.
    counts = (0,) if eq.primitive == "axis_index" else (0, 1) if eq.primitive in (
        "pvary", "psum", "psum_invariant", "pmax", "pmin", "ppermute") else (1,)
    check_program(len(eq.operands) in counts, f"the operands of the {eq.primitive} at {path}",
                  f"{' or '.join(map(str, counts))} value(s)", eq.operands)
    return params


def _collective(eq: Opaque, operands: tuple[Value, ...], context: Manual, path: str
                ) -> CollectiveDecision:
    """SMAP-13, SMAP-21, SMAP-20 and SMAP-24 for one collective equation; its result type
    must be the one they decide (PROG-0)."""
    with located(path):
        params = _check_params(eq, path)
        axes = collective_axes(eq.primitive, params)
    prim, mesh, vma = eq.primitive, context.mesh, context.check_vma
    if operands:
        operand = operands[0]
    elif prim == "axis_index":
        operand = Value.typed((), "int32", context.inner_mesh)
    else:   # a literal: a constant, the same on every device, of the result's shape
        given = eq.results[0] if eq.results else Value.typed(())
        operand = Value.typed(given.shape, given.dtype, context.inner_mesh,
                              weak_type=given.weak_type)
    along = [a in operand.varying for a in axes]
    index_groups = params.get("axis_index_groups")
    with located(path):
        if index_groups is not None:   # read before the axes, as JAX validates them first
            check_index_groups(prim, axes, index_groups, vma)
        if prim in ("pvary", "psum_invariant") or (
                vma and prim == "reduce_scatter" and any(along) and not all(along)):
            # as the casts, psum and psum_scatter read their operand first (mixed axes:
            # ValueError; a name unknown while none varies: AssertionError); pmax and
            # pmin cast the axes it does not vary along, mixed or not
            check_collective_axes(mesh, axes, context.manual, operand.varying,
                                  lowering=False)
        else:
            check_collective_axes(mesh, axes, context.manual, None, lowering=False)
        check_not_reduced(prim, axes, _words(operand), operand.reduced)
        size = context.size(axes)   # an axis named twice counts twice, as in JAX
        if index_groups is not None:   # moved within each group (SMAP-26)
            size = group_size(index_groups)
        shape = collective_shape(prim, operand.shape, size, {**params, "axes": axes})
        varying = collective_varying(prim, axes, operand.varying, vma)
        split = collective_split(mesh, prim, axes, _split_of(operand), shape)
    dtype = "int32" if prim == "axis_index" else operand.dtype
    weak = operand.weak_type and prim not in ("all_to_all", "axis_index")
    result = _typed(eq.results[0] if eq.results else None, shape, dtype,
                    context.inner_mesh, weak_type=weak, varying=varying, split=split,
                    reduced=operand.reduced)
    check_program(eq.results is not None and len(eq.results) == 1,
                  f"the results of the {prim} at {path}", "one result", eq.results)
    _same_type(eq.results[0], result, f"the result of the {prim} at {path}")
    groups = _groups(mesh, axes, context.manual) if prim != "pvary" else None
    if index_groups is not None and groups is not None:
        # (groups naming a position past the axes are refused when lowered, SMAP-26)
        fits = all(i < context.size(axes) for g in index_groups for i in g)
        groups = grouped_replica_groups(groups, index_groups) if fits else None
    pairs = None
    if prim == "ppermute" and groups is not None and len(set(axes)) == len(axes):
        moves = _moves(axes, size, params.get("perm", ()))
        pairs = None if moves is None else _pairs(mesh, axes, context.manual, moves)
    return CollectiveDecision(prim, axes, result, groups, pairs)


def _pairs(mesh: Mesh | AbstractMesh, axes: tuple, manual: frozenset[str], moves: tuple
           ) -> tuple[tuple[int, int], ...]:
    """ppermute's (source, target) devices, group by group: position k of a group is its
    k-th device in the mesh's order (over several axes, not the order they are named in:
    JAX sorts the group's mesh positions before it reads the pairs)."""
    from ..transforms.shardmap_collectives import replica_groups
    device = mesh.devices.id_at if isinstance(mesh, Mesh) else (lambda p: p)
    out = []
    for group in replica_groups(mesh, axes, manual):
        ordered = sorted(group)
        out += [(device(ordered[s]), device(ordered[t])) for s, t in moves]
    return tuple(out)


def _groups(mesh: Mesh | AbstractMesh, axes: tuple, manual: frozenset[str]
            ) -> tuple[tuple[int, ...], ...] | None:
    """SMAP-14's replica groups, when they can be listed (distinct axes, a mesh of at most
    GROUPS_LISTED_UP_TO devices)."""
    if len(set(axes)) != len(axes) or mesh.size > GROUPS_LISTED_UP_TO:
        return None
    if isinstance(mesh, Mesh):
        return collective_groups(mesh, axes, manual)
    from ..transforms.shardmap_collectives import replica_groups
    return replica_groups(mesh, axes, manual)


def _moves(axes: tuple, size: int, perm: Any) -> tuple | None:
    """ppermute's pairs as positions, when SMAP-22 accepts them (it is checked again, and
    refuses, when the program is lowered)."""
    from ..core.rules import Rejection
    try:
        return check_permutation(axes, size, perm)
    except Rejection:
        return None


# --------------------------------------------------------------------------- lowering

def check_listed_in_specs(program: Program, live: Any, prefix: str = "") -> None:
    """SMAP-12 as lowering lists the shardings inside the body, before the device
    assignment (DA-1): JAX makes a sharding of each in spec of every live shard_map over a
    concrete mesh, for the operands its body uses, in PROG-2's order (a body's own
    equations, then the bodies nested in them), so a spec naming an axis twice is refused
    there; a shard_map over an abstract mesh is checked later, in :func:`lower_shard_maps`."""
    with staged("lower"):
        # each spec once: SMAP-12 reads nothing else, and a step repeats its specs
        _listed_in_specs(program, live, prefix, set())


def _listed_in_specs(program: Program, live: Any, prefix: str, passed: set) -> None:
    """:func:`check_listed_in_specs` of one body; ``passed``: the specs found to name each
    axis once so far."""
    for k, eq in enumerate(program.equations):
        if live.equations[k] and entry_of(eq).bodies.per_shard and isinstance(eq.mesh, Mesh):
            _check_used_in_specs(eq, live.bodies[k], f"{prefix}body[{k}]", passed)
    for k, eq in enumerate(program.equations):
        # a body without bodies of its own (depth 1) holds no shard_map
        if live.equations[k] and eq.body is not None and eq.body.depth > 1:
            _listed_in_specs(eq.body, live.bodies[k], f"{prefix}body[{k}].{eq.kind}.", passed)


def _check_used_in_specs(eq: ShardMap, live: Any, path: str, passed: set) -> None:
    """SMAP-12 for the in specs of the operands a shard_map's body uses (``live``: what
    lives of its body) that are not in ``passed``, which gains them."""
    for i, (spec, used) in enumerate(zip(eq.in_specs, live.inputs)):
        if used and spec not in passed:
            with located(f"{path}.shard_map.in_specs[{i}]"):
                check_no_repeated_axes(spec, f"in_specs[{i}]")
            passed.add(spec)


def lower_shard_maps(program: Program, live: Any, prefix: str = "") -> None:
    """What lowering checks in every live shard_map, in the order of the body (stage
    ``lower``): the in specs of the operands its body uses (SMAP-12 over an abstract mesh;
    over a concrete one :func:`check_listed_in_specs`, before the device assignment; for a
    shard_map a batching rule bound, which nothing checked at trace, also their axes
    manual, SMAP-3, and dividing the operands, SMAP-8: the compiler's verifier refuses
    them), then each live collective's axes named once (SMAP-13), ppermute's pairs
    (SMAP-22), psum_scatter's operand split over no Explicit axis left automatic
    (SMAP-23) and an untiled all_gather's operand, a dimension of 1 inserted, divided by
    its split (SMAP-25)."""
    with staged("lower"):
        _lower(program, live, prefix, None, passed=set())




def _split_of(value: Value) -> tuple:
    """A value's split over Explicit axes, one entry per dimension (None: unsplit)."""
    spec = _type_spec(value)
    entries = [] if spec is None else list(spec)
    return tuple(entries + [None] * (len(value.shape) - len(entries)))[:len(value.shape)]


def _fitted(split: tuple | None, rank: int) -> tuple | None:
    """A split kept position by position for a value of ``rank`` (None: not known, as when
    a split entry would be dropped)."""
    if split is None or any(e is not None for e in split[rank:]):
        return None
    return tuple(split[:rank]) + (None,) * (rank - len(split))


def _body_splits(program: Program, inputs: tuple) -> list:
    """Each value's split over the Explicit axes a shard_map leaves automatic, by value
    index (None: not known): an input's as given (SMAP-18's type inside), a value whose
    description gives its split that one, a collective's result its operand's dimension
    by dimension (axis_index's: unsplit), an elementwise result that of an operand of its
    shape, an inner jit's results those of its body."""
    splits: list = list(inputs) + [_split_of(c.value.type) for c in program.consts]
    for eq in program.equations:
        operands = [splits[n] for n in eq.operands]
        inside = entry_of(eq).in_shard_map
        if inside == "jit":
            inner = _body_splits(eq.body, tuple(operands))
            derived = [inner[n] for n in eq.body.outputs]
        elif inside == "collective":
            derived = [() if not operands else operands[0]]
        elif inside == "elementwise":
            same = [s for n, s in zip(eq.operands, operands)
                    if s is not None and program.value_types[n].shape == eq.results[0].shape]
            derived = [same[0] if same else None] * len(eq.results)
        else:
            derived = [None] * len(eq.results)
        for result, split in zip(eq.results, derived):
            given = result.spec if result.mesh is not None else None
            splits.append(_split_of(result) if given is not None
                          else _fitted(split, len(result.shape)))
    return splits


def _split_known(program: Program, splits: list | None, n: int) -> tuple | None:
    """Value ``n``'s split: as the walk derived it inside a shard_map (None: not known),
    else (outside any) as its type carries it."""
    if splits is not None:
        return splits[n]
    return _split_of(program.value_types[n])


def _lowering_key(eq: ShardMap, program: Program, live: Any, outside: tuple,
                  context: Manual | None) -> tuple:
    """All that lowering's checks of a shard_map read: its form (all but its operands'
    numbers), its operands' shapes, what of its body lives, the splits its operands come
    with and the manual axes around it."""
    shapes = tuple(program.value_types[n].shape for n in eq.operands)
    return (eq.form, shapes, live.signature, outside,
            None if context is None else context.manual)


def _lower(program: Program, live: Any, prefix: str, context: Manual | None,
           splits: list | None = None, passed: set | None = None) -> None:
    """Lowering's checks of a body; ``passed``: the keys (:func:`_lowering_key`) of the
    shard_maps this walk has checked already, which a layer repeated need not check again
    (their checks read nothing else, and each rule fired the first time)."""
    passed = set() if passed is None else passed
    for k, eq in enumerate(program.equations):
        inside = entry_of(eq).in_shard_map
        collective = context is not None and inside == "collective"
        if not live.equations[k] or not (collective or inside in ("shard_map", "jit")):
            continue   # lowering checks nothing else of an equation
        path = f"{prefix}body[{k}]"
        if inside == "shard_map":
            outside = tuple(_split_known(program, splits, n) for n in eq.operands)
            try:
                key = _lowering_key(eq, program, live.bodies[k], outside, context)
                if key in passed:
                    continue
            except TypeError:   # a parameter that cannot be hashed: checked every time
                key = None
            used = live.bodies[k].inputs
            manual = manual_axes_of(eq.mesh, set(eq.manual_axes))
            listed = isinstance(eq.mesh, Mesh)   # checked when listed (check_listed_in_specs)
            for i, (spec, u, n) in enumerate(zip(eq.in_specs, used, eq.operands)):
                if u:
                    with located(f"{path}.shard_map.in_specs[{i}]"):
                        if not listed:
                            check_no_repeated_axes(spec, f"in_specs[{i}]")
                        if not eq.checked:
                            _verified(eq, spec, program.value_types[n].shape, manual,
                                      f"in_specs[{i}]", f"operand {i}")
            inner = Manual(eq.mesh, manual | (context.manual if context else frozenset()),
                           eq.check_vma)
            inside = tuple(None if split is None else type_inside(
                eq.mesh, manual, PartitionSpec(*split), len(split)) for split in outside)
            _lower(eq.body, live.bodies[k], f"{path}.shard_map.", inner,
                   _body_splits(eq.body, inside), passed)
            if key is not None:
                passed.add(key)
        elif inside == "jit":
            _lower(eq.body, live.bodies[k], f"{path}.jit.", context,
                   None if splits is None else _body_splits(
                       eq.body, tuple(splits[n] for n in eq.operands)), passed)
        elif collective:
            with located(path):
                _lower_collective(eq, program, splits, context)


def _lower_collective(eq: Opaque, program: Program, splits: list | None, context: Manual
                      ) -> None:
    """What lowering checks of one collective, in JAX's order: psum_scatter's operand
    unsplit (SMAP-23), an untiled all_gather's operand with its new dimension (SMAP-25),
    the axes named once (SMAP-13), ppermute's pairs (SMAP-22)."""
    params = dict(eq.params)
    axes = collective_axes(eq.primitive, params)
    split = _split_known(program, splits, eq.operands[0]) if eq.operands else None
    if eq.primitive == "reduce_scatter" and split is not None:
        check_scatter_operand_unsplit(axes, split)
    if eq.primitive == "all_gather" and not params.get("tiled") and split is not None:
        check_gather_broadcast_divides(context.mesh, axes, split,
                                       program.value_types[eq.operands[0]].shape,
                                       params["all_gather_dimension"])
    check_collective_axes(context.mesh, axes, context.manual)
    if params.get("axis_index_groups") is not None:
        check_lowered_index_groups(eq.primitive, axes, params["axis_index_groups"],
                                   context.size(axes))
    if eq.primitive == "ppermute":
        check_permutation(axes, context.size(axes), params.get("perm", ()))


def _verified(eq: ShardMap, spec: PartitionSpec, shape: tuple[int, ...],
              manual: frozenset[str], where: str, value: str) -> None:
    """What the compiler's verifier holds an operand of a shard_map that no trace checked
    to: its spec names manual axes only (SMAP-3) and divides it (SMAP-8)."""
    check_spec_axes(spec, where, manual)
    check_divisible(eq.mesh, spec, shape, where, value)


def decided_shardings(program: Program, prefix: str = "") -> list:
    """``(path, record)`` of the constraints, device_puts, reshards and jits of a body
    outside any shard_map (inner jits' bodies included), for a program's verdict."""
    out = []
    for k, eq in enumerate(program.equations):
        path = f"{prefix}body[{k}]"
        record = shardings_decision(eq)
        if record is not None:
            out.append((path, record))
        if entry_of(eq).kind is Kind.CALL:
            out += decided_shardings(eq.body, f"{path}.jit.")
    return out

