"""The types inside and outside shard_map (SMAP-9, SMAP-10, SMAP-16 to SMAP-19).

The shard each device sees (SMAP-9) and a result put together from its shards (SMAP-10);
over Explicit axes, the in specs read off the arguments' types (SMAP-16), the specs held to
those types (SMAP-17), the types inside and outside (SMAP-18), and the reductions a spec
claims held to the value's (SMAP-19).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.dims import check_dims
from ..core.pytree import leaves_with_paths, show_path
from ..core.rules import Failure, require, rule
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec
from .shardmap_parameters import checked_mesh, entry_axes, entry_ways
from .shardmap_parameters import Shaped  # noqa: F401 (the examples use it)
from .shardmap_specs import (
    NotASpec, check_divisible, check_no_repeated_axes, check_spec_axes, check_spec_rank,
    manual_axes_of,
)

P = PartitionSpec  # the name the examples use

__all__ = ["per_shard_shape", "unshard_shape", "infer_in_specs", "check_specs_match_types",
           "explicit_types", "type_inside", "check_reductions_held"]


# --------------------------------------------------------------------------- SMAP-9, SMAP-10

def _check_spec(spec: Any, parameter: str) -> PartitionSpec:
    require(isinstance(spec, PartitionSpec), lambda: NotASpec(
        parameter, parameter, spec, type(spec).__name__))
    return spec


@rule("SMAP-9", mirrors="jax._src.shard_map._shard_shaped_array; "
                        "jax._src.interpreters.pxla.tile_aval_nd")
def per_shard_shape(mesh: Mesh | AbstractMesh, spec: PartitionSpec, shape: tuple[int, ...],
                    manual_axes: Any = frozenset()) -> tuple[int, ...]:
    """Inside shard_map an argument is one shard: each dimension divided by the product of the sizes of the axes its spec names there.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> per_shard_shape(mesh, P("x", "y"), (8, 8))
    (4, 2)
    >>> per_shard_shape(mesh, P(("x", "y")), (8, 8))
    (1, 8)
    >>> per_shard_shape(mesh, P("x", "x"), (8, 8))
    (4, 4)
    """
    manual = manual_axes_of(checked_mesh(mesh), manual_axes)
    spec = _check_spec(spec, "spec")
    shape = check_dims(shape, what="a shape")
    check_spec_axes(spec, "spec", manual)
    check_spec_rank(spec, shape, "spec", "the argument")
    check_divisible(mesh, spec, shape, "spec", "the argument")
    ways = [entry_ways(mesh, entry) for entry in spec] + [1] * (len(shape) - len(spec))
    return tuple(size // n for size, n in zip(shape, ways))


@rule("SMAP-10", mirrors="jax._src.shard_map._unshard_shaped_array; "
                         "jax._src.interpreters.pxla.untile_aval_nd")
def unshard_shape(mesh: Mesh | AbstractMesh, spec: PartitionSpec, shape: tuple[int, ...],
                  manual_axes: Any = frozenset()) -> tuple[int, ...]:
    """Outside shard_map a result is its shards put together: each dimension multiplied by the product of the sizes of the axes its out spec names there.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> unshard_shape(mesh, P(None, ("y", "x")), (3, 5))
    (3, 40)
    >>> unshard_shape(mesh, P(), (3, 5))
    (3, 5)
    """
    manual = manual_axes_of(checked_mesh(mesh), manual_axes)
    spec = _check_spec(spec, "spec")
    shape = check_dims(shape, what="a shape")
    check_spec_axes(spec, "spec", manual)
    if len(spec):
        check_spec_rank(spec, shape, "spec", "the result")
    check_no_repeated_axes(spec, "spec")
    return _unshard(mesh, spec, shape)


def _unshard(mesh: Mesh | AbstractMesh, spec: PartitionSpec, shape: tuple[int, ...]
             ) -> tuple[int, ...]:
    ways = [entry_ways(mesh, entry) for entry in spec] + [1] * (len(shape) - len(spec))
    return tuple(size * n for size, n in zip(shape, ways))


# --------------------------------------------------------------------------- SMAP-16

def _explicit(mesh: Mesh | AbstractMesh) -> frozenset[str]:
    return frozenset(n for n, t in zip(mesh.axis_names, mesh.axis_types)
                     if t is AxisType.Explicit)


def _entry(names: tuple) -> Any:
    """A spec entry for ``names``: None for none, the name for one, else the tuple."""
    return None if not names else names[0] if len(names) == 1 else tuple(names)


def _padded(spec: PartitionSpec | None, rank: int) -> tuple:
    """A spec's entries, one per dimension of a value of ``rank`` (missing ones None)."""
    entries = [] if spec is None else [_entry(entry_axes(e)) for e in spec]
    return tuple(entries + [None] * (rank - len(entries)))


@dataclasses.dataclass(frozen=True)
class InferOverAutoAxes(Failure, rule="SMAP-16", error=TypeError):
    template = ("in_specs were left out, but the manual axes {axes} are not "
                "all Explicit: only an Explicit axis shows in an argument's "
                "type, so shard_map cannot read the in specs off the arguments")
    hint = "Pass in_specs, or make the manual axes Explicit."
    axes: tuple


@dataclasses.dataclass(frozen=True)
class InferredSpecInvalid(Failure, rule="SMAP-16"):
    template = ("the type of {where} is split by {spec}, whose entry {entry} "
                "names the automatic axis {auto!r} before a manual one: kept "
                "to its manual axes the entry has a hole, so no in spec "
                "can be read off it")
    where: str
    spec: PartitionSpec
    entry: Any
    auto: str


@rule("SMAP-16", mirrors="jax._src.shard_map._shard_map (in_specs is Infer); "
                         "jax._src.shard_map._manual_spec")
def infer_in_specs(mesh: Mesh | AbstractMesh, manual_axes: frozenset[str], operands: tuple
                   ) -> tuple[PartitionSpec, ...]:
    """With in_specs left out, every manual axis must be Explicit and each argument's in spec is its type's spec kept to the manual axes; an entry naming an automatic axis before a manual one is invalid.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> infer_in_specs(mesh, frozenset({"y"}), (Shaped((8, 8), P(("y", "x"))),))
    (P('y', None),)
    >>> infer_in_specs(mesh, frozenset({"y"}), (Shaped((8,), P(("x", "y"))),))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-16]: the type of args[0] is split by P(('x', 'y')), ...
    """
    require(manual_axes <= _explicit(mesh), lambda: InferOverAutoAxes(
        tuple(sorted(manual_axes - _explicit(mesh)))))
    specs = []
    for path, leaf in leaves_with_paths(operands):
        entries = []
        for entry in _padded(leaf.spec, len(leaf.shape)):  # a type's spec has every dim
            kept = [n if n in manual_axes else None for n in entry_axes(entry)]
            while kept and kept[-1] is None:
                kept.pop()
            hole = next((n for n, k in zip(entry_axes(entry), kept) if k is None), None)
            require(hole is None, lambda: InferredSpecInvalid(
                show_path(("args", *path)), leaf.spec, entry, hole))
            entries.append(_entry(tuple(kept)))
        specs.append(PartitionSpec(*entries))
    return tuple(specs)


# --------------------------------------------------------------------------- SMAP-17

@dataclasses.dataclass(frozen=True)
class SpecNotTheType(Failure, rule="SMAP-17"):
    template = ("the in spec of {where} is {spec}, but its type is split by "
                "{typed}: over Explicit axes shard_map takes an argument as "
                "its type splits it")
    hint = ("Leave in_specs out to read them off the types, or reshard the "
            "argument (jax.reshard) first.")
    where: str
    spec: Any
    typed: Any


@rule("SMAP-17", mirrors="jax._src.shard_map._shard_map (every axis manual and Explicit: "
                         "in_specs against the arguments' types)")
def check_specs_match_types(mesh: Mesh | AbstractMesh, manual_axes: frozenset[str],
                            flat_in: list, operands: tuple,
                            batched: frozenset[str] = frozenset()) -> None:
    """When every mesh axis but those enclosing vmaps split their batch over is manual and Explicit, each mapped argument's in spec, padded to its rank, equals the spec its type carries, its unreduced and reduced axes too.

    ``batched``: the Explicit axes the vmaps the call is traced under split their batch
    dimension over (JAX's axis environment's ``explicit_mesh_axis_names``). Under such a
    vmap a shard_map manual over the other axes is checked on the example's types.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> everything = frozenset({"x", "y"})
    >>> check_specs_match_types(mesh, everything, [P("x")], (Shaped((8, 8), P("x", None)),))
    >>> check_specs_match_types(mesh, everything, [P("y")], (Shaped((8, 8), P("x")),))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-17]: the in spec of args[0] is P('y', None), but its type is split by P('x', None): ...
    >>> reduced = Shaped((8, 8), P("x", reduced={"y"}))   # jax.reshard to reduced axes
    >>> check_specs_match_types(mesh, everything, [P("x", reduced={"y"})], (reduced,))
    >>> check_specs_match_types(mesh, everything, [P("x")], (reduced,))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-17]: the in spec of args[0] is P('x', None), but its type is split by P('x', None, reduced={'y'}): ...
    >>> check_specs_match_types(mesh, frozenset({"x"}), [P("x")], (Shaped((8,), P()),))
    >>> check_specs_match_types(mesh, frozenset({"x"}), [P("x")], (Shaped((8,), P()),),
    ...                         batched=frozenset({"y"}))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-17]: the in spec of args[0] is P('x'), but its type is split by P(None): ...
    """
    if manual_axes != frozenset(mesh.axis_names) - batched or \
            not manual_axes <= _explicit(mesh):
        return
    for (path, leaf), spec in zip(leaves_with_paths(operands), flat_in):
        if spec is None:
            continue
        given, typed = _padded(spec, len(leaf.shape)), _padded(leaf.spec, len(leaf.shape))
        # (the reductions compared too: a value resharded to reduced axes is typed so)
        held = leaf.spec if leaf.spec is not None else PartitionSpec()
        require(given == typed and frozenset(spec.unreduced) == frozenset(held.unreduced)
                and frozenset(spec.reduced) == frozenset(held.reduced),
                lambda: SpecNotTheType(show_path(("args", *path)), PartitionSpec(
                    *given, unreduced=spec.unreduced, reduced=spec.reduced),
                    PartitionSpec(*typed, unreduced=held.unreduced, reduced=held.reduced)))


# --------------------------------------------------------------------------- SMAP-18

@dataclasses.dataclass(frozen=True)
class TypeDoesNotSplitShard(Failure, rule="SMAP-18"):
    template = ("inside shard_map {where} is a shard of shape {shape}, whose "
                "type keeps {entries} on the Explicit axes that stay "
                "automatic: dimension {dim} of size {size} does not split "
                "{ways} ways")
    hint = "Split that dimension over fewer manual axes, or reshard the argument first."
    where: str
    shape: tuple
    entries: tuple
    dim: int
    size: int
    ways: int


def type_inside(mesh: Mesh | AbstractMesh, manual_axes: frozenset[str],
                type_spec: PartitionSpec | None, rank: int) -> tuple:
    """The entries of a value's type inside a shard_map, one per dimension: those of its
    type outside kept to the Explicit axes the shard_map leaves automatic (SMAP-18)."""
    kept = _explicit(mesh) - manual_axes
    return tuple(_entry(tuple(n for n in entry_axes(e) if n in kept))
                 for e in _padded(type_spec, rank))


@rule("SMAP-18", mirrors="jax._src.shard_map._shard_shaped_array and _unshard_shaped_array "
                         "(the sharding of the types); jax._src.core.modify_spec_for_auto_manual")
def explicit_types(mesh: Mesh | AbstractMesh, manual_axes: frozenset[str],
                   type_spec: PartitionSpec | None, out_spec: PartitionSpec | None,
                   shape: tuple[int, ...], where: str = "the argument") -> tuple[tuple, tuple]:
    """Inside, a value's type keeps the Explicit axes that are not manual, which must split its shard evenly; outside, each dimension of a result's type names its out spec's Explicit axes, then those its type inside names there.

    Returns (the type inside, the type outside), one entry per dimension of ``shape``, the
    shard inside.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> explicit_types(mesh, frozenset({"y"}), P("x"), P("y"), (2, 8))
    (('x', None), (('y', 'x'), None))
    >>> explicit_types(mesh, frozenset({"y"}), P("x"), None, (1,), "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-18]: inside shard_map args[0] is a shard of shape (1,), whose type keeps ('x',) on the Explicit axes that stay automatic: dimension 0 of size 1 does not split 2 ways. ...
    """
    explicit = _explicit(mesh)
    inner = type_inside(mesh, manual_axes, type_spec, len(shape))
    for dim, (size, entry) in enumerate(zip(shape, inner)):
        ways = entry_ways(mesh, entry)
        require(size % ways == 0, lambda: TypeDoesNotSplitShard(
            where, tuple(shape), inner, dim, size, ways))
    outer = tuple(_entry(tuple(n for n in entry_axes(o) if n in explicit) + entry_axes(i))
                  for o, i in zip(_padded(out_spec, len(shape)), inner))
    return inner, outer


# --------------------------------------------------------------------------- SMAP-19

@dataclasses.dataclass(frozen=True)
class ReductionsNotTheValue(Failure, rule="SMAP-19"):
    template = ("{where} is {spec}, which calls {value} {kind} over "
                "{axes}, but {value} is {kind} over {held}: an in spec takes "
                "its argument's unreduced and reduced axes as its type has "
                "them, an out spec its result's")
    where: str
    spec: Any
    value: str
    kind: str
    axes: tuple
    held: tuple


@rule("SMAP-19", mirrors="jax._src.shard_map._shard_shaped_array and _unshard_shaped_array "
                         "(their unreduced and reduced checks)")
def check_reductions_held(spec: PartitionSpec, where: str, value: str,
                          unreduced: frozenset[str] = frozenset(),
                          reduced: frozenset[str] = frozenset()) -> None:
    """An in spec's unreduced and reduced axes are those its argument's type holds, and an out spec's are those its result holds inside (checked when traced with check_vma, else when lowered).

    An argument's type holds them where ``jax.reshard`` made them (``P('x', reduced={'y'})``).

    >>> check_reductions_held(P("x"), "in_specs[0]", "args[0]")
    >>> check_reductions_held(P(unreduced={"x"}), "in_specs[0]", "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-19]: in_specs[0] is P(unreduced={'x'}), which calls args[0] unreduced over ('x',), but args[0] is unreduced over (): ...
    """
    for kind, named, held in (("unreduced", spec.unreduced, unreduced),
                              ("reduced", spec.reduced, reduced)):
        require(frozenset(named) == frozenset(held), lambda: ReductionsNotTheValue(
            where, spec, value, kind, tuple(sorted(named)), tuple(sorted(held))))
