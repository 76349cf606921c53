"""A shard_map under vmap: the spmd axes its batching rule reads (PBAT-1 to PBAT-3).

:func:`~shardlaw.spec.program.batching.vmap_program` applies these rules where it batches a
shard_map equation: the spmd axes may not appear in its specs and must be axes of its mesh
(PBAT-1), under check_vma must be manual in it (PBAT-2), and its body's broadcasting
operands are cast along them and the enclosing vmaps' spmd axes (PBAT-3).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, require, rule
from ..core.values import AxisType, PartitionSpec
from ..transforms.batching import BadVmapParameterType
from ..transforms.shardmap_parameters import spec_axes
from ..transforms.shardmap_specs import manual_axes_of
from ..transforms.shardmap_types import explicit_types
from .description import ShardMap, Value
from .shardmap import canonical_split

P = PartitionSpec  # the name the examples use

__all__ = ["check_shard_map_spmd_axes", "check_spmd_axes_manual", "check_spmd_casts",
           "batched_result", "example_checked", "batch_split_inside"]


# --------------------------------------------------------------------------- PBAT-1

@dataclasses.dataclass(frozen=True)
class SpmdAxisInShardMap(Failure, rule="PBAT-1"):
    template = ("vmap's spmd_axis_name {names} splits the batch over mesh axes that the "
                "shard_map's {which} already use ({used}), so a mesh axis would split "
                "two dimensions")
    hint = "Pick a spmd_axis_name that the shard_map's specs do not name"
    names: tuple
    which: str
    used: tuple


@dataclasses.dataclass(frozen=True)
class SpmdAxisNotInShardMapMesh(Failure, rule="PBAT-1", error=KeyError):
    template = ("vmap's spmd_axis_name {names} names {axis!r}, which is not an axis of the "
                "shard_map's mesh {mesh}: JAX looks its size up there")
    names: tuple
    axis: str
    mesh: Any


@rule("PBAT-1", mirrors="jax._src.shard_map._shard_map_batch; "
                        "jax._src.shard_map._batch_out_specs")
def check_shard_map_spmd_axes(specs: Any, names: tuple[str, ...], which: str,
                              mesh: Any = None) -> None:
    """Under vmap with spmd_axis_name a shard_map's in_specs, and its out_specs once its body is batched, name none of the spmd axes, and the spmd axes are axes of its mesh.

    JAX checks this of every shard_map vmap meets, its operands batched or not (KeyError
    for an axis its mesh lacks, looked up after the in_specs are checked). Without
    spmd_axis_name nothing is checked: the batch dimension is inserted unsplit.

    >>> check_shard_map_spmd_axes((P("x"), P()), ("y",), "in_specs")
    >>> check_shard_map_spmd_axes((P("x"), P(None, "y")), ("y",), "out_specs")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [PBAT-1]: vmap's spmd_axis_name ('y',) splits the batch over mesh axes that the shard_map's out_specs already use (('y',)), so a mesh axis would split two dimensions. Pick a spmd_axis_name that the shard_map's specs do not name.
    """
    if not isinstance(specs, (tuple, list)) or not all(isinstance(s, PartitionSpec)
                                                       for s in specs):
        raise reject(BadVmapParameterType(which, "must be a list of PartitionSpecs", specs))
    used = set().union(*map(spec_axes, specs)) if specs else set()
    clash = tuple(sorted(set(names) & used))
    require(not clash, lambda: SpmdAxisInShardMap(tuple(names), which, clash))
    for name in names if mesh is not None else ():
        require(name in mesh.axis_names, lambda name=name: SpmdAxisNotInShardMapMesh(
            tuple(names), name, mesh))


# --------------------------------------------------------------------------- PBAT-2

@dataclasses.dataclass(frozen=True)
class SpmdAxisNotManual(Failure, rule="PBAT-2"):
    template = ("vmap's spmd_axis_name {names} names {axis!r}, which the shard_map does not "
                "make manual (its manual axes: {manual}); under check_vma the batched body's "
                "values would vary along {axis!r}, and a value varies only along manual axes")
    hint = ("Add {axis!r} to the shard_map's axis_names, pass check_vma=False, or pick a "
            "manual axis as spmd_axis_name")
    names: tuple
    axis: str
    manual: tuple


def manual_inside(eq: ShardMap) -> frozenset[str]:
    """The axes typed Manual inside a shard_map: those it makes manual and those an
    enclosing shard_map made manual (typed so on its mesh)."""
    already = {n for n, t in zip(eq.mesh.axis_names, eq.mesh.axis_types)
               if t is AxisType.Manual}
    return frozenset(manual_axes_of(eq.mesh, set(eq.manual_axes))) | already


@rule("PBAT-2", mirrors="jax._src.shard_map._shard_map_batch; "
                        "jax._src.shard_map._shard_shaped_array; core.ShapedArray")
def check_spmd_axes_manual(names: tuple[str, ...], manual: frozenset[str], mesh: Any) -> None:
    """Under vmap with spmd_axis_name, a shard_map with check_vma and a batched operand makes every spmd axis manual: its body's batched inputs vary along them, and a value varies only along manual axes.

    JAX refuses it while vmap traces (ValueError). Without check_vma nothing is refused
    there, and the compiler refuses the spec naming an automatic axis when the program is
    lowered (SMAP-3).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> check_spmd_axes_manual(("y",), frozenset({"x", "y"}), mesh)
    >>> check_spmd_axes_manual(("y",), frozenset({"x"}), mesh)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [PBAT-2]: vmap's spmd_axis_name ('y',) names 'y', which the shard_map does not make manual (its manual axes: ('x',)); under check_vma the batched body's values would vary along 'y', and a value varies only along manual axes. Add 'y' to the shard_map's axis_names, pass check_vma=False, or pick a manual axis as spmd_axis_name.
    """
    for name in names:
        require(name in manual, lambda name=name: SpmdAxisNotManual(
            tuple(names), name, tuple(sorted(manual))))


# --------------------------------------------------------------------------- PBAT-3

@dataclasses.dataclass(frozen=True)
class CastAlongUnknownAxis(Failure, rule="PBAT-3", error=AssertionError):
    template = ("inside a check_vma shard_map vmap casts an operand to vary along the spmd "
                "axes {axes}, and {axis!r} is not an axis of the shard_map's mesh {mesh} "
                "(JAX's cast asserts it is)")
    hint = "Pick spmd_axis_name among the shard_map's mesh axes"
    axes: tuple
    axis: str
    mesh: Any


@dataclasses.dataclass(frozen=True)
class CastAlongAutomaticAxis(Failure, rule="PBAT-3", error=NameError):
    template = ("inside a check_vma shard_map vmap casts an operand to vary along the spmd "
                "axes {axes}, and {axis!r} is not manual there (an unbound axis name)")
    hint = "Make {axis!r} manual in the shard_map (axis_names), or pass check_vma=False"
    axes: tuple
    axis: str


@dataclasses.dataclass(frozen=True)
class SpmdVaryingResult(Failure, rule="PBAT-3", error=Exception, jax_error="_RepError"):
    template = ("the batched shard_map's result {index} varies along {axes}, which its out "
                "spec {spec!r} does not name: vmap cast its body's values along the spmd "
                "axes of an enclosing vmap, and this out spec is batched only by the "
                "inner one")
    hint = ("Give the inner vmap the spmd_axis_name too, or pass check_vma=False to the "
            "shard_map")
    index: int
    axes: tuple
    spec: Any


@rule("PBAT-3", mirrors="jax._src.interpreters.batching.spmd_names_insert_pvary; "
                        "jax._src.core.pvary; jax._src.shard_map._check_mats")
def check_spmd_casts(axes: tuple[str, ...], mesh: Any, results: tuple = (),
                     out_specs: tuple = ()) -> None:
    """Under check_vma, vmap casts a shard_map body's broadcasting operands to vary along the spmd axes of every vmap it is inside, which must be manual there; a result varying along one needs an out spec naming it.

    An axis cast along that is not an axis of the shard_map's mesh is refused with
    AssertionError (JAX's cast asserts it), one that is not manual there with NameError.
    Once the body is batched, a result varying along a mesh axis that its batched out spec
    leaves out, and that no enclosing shard_map made manual, is refused as JAX refuses it
    while vmap traces (its internal ``_RepError``, which no front door turns into a
    ValueError here).

    The casts JAX's broadcasting batcher makes read the spmd axes of the whole axis
    environment: a vmap inside another vmap with spmd_axis_name casts along the outer
    one's axes too, though it does not add them to the out specs.

    >>> mesh = Mesh.iota((2, 4), ("x", "y")).abstract
    >>> check_spmd_casts(("y",), mesh)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNameError: [PBAT-3]: inside a check_vma shard_map vmap casts an operand to vary along the spmd axes ('y',), and 'y' is not manual there (an unbound axis name). Make 'y' manual in the shard_map (axis_names), or pass check_vma=False.
    """
    names = tuple(mesh.axis_names) if mesh is not None else ()
    manual = {n for n, t in zip(names, mesh.axis_types if mesh is not None else ())
              if t is AxisType.Manual}
    for axis in axes:
        require(axis in names, lambda axis=axis: CastAlongUnknownAxis(axes, axis, mesh))
        require(axis in manual, lambda axis=axis: CastAlongAutomaticAxis(axes, axis))
    for j, (value, spec) in enumerate(zip(results, out_specs)):
        left = value.varying - spec_axes(spec) - manual
        require(not left, lambda j=j, spec=spec, left=left: SpmdVaryingResult(
            j, tuple(a for a in names if a in left), spec))


# --------------------------------------------------------------------------- results

def batched_result(eq: ShardMap, result: Value, out_spec: PartitionSpec, inside: Value
                   ) -> Value:
    """A batched shard_map's result (``result``: typed with the batch dimension unsplit)
    split as SMAP-18 puts it together from its batched body's result ``inside`` and its
    batched ``out_spec``: under a vmap whose batch is split over Explicit axes the shard_map
    leaves automatic, the body's batched result keeps that split, and so does the result
    (JAX's ``f32[8@y,8@x]`` from a body's ``f32[8@y,4]`` and ``P(None, 'x')``)."""
    if result.mesh is None or AxisType.Explicit not in tuple(eq.mesh.axis_types):
        return result
    _, outside = explicit_types(eq.mesh, manual_inside(eq), inside.spec, out_spec,
                                inside.shape)
    split = canonical_split(outside)
    if out_spec.unreduced or out_spec.reduced:   # (the out spec's, as JAX's unshard_aval)
        split = PartitionSpec(*(split or ()), unreduced=out_spec.unreduced,
                              reduced=out_spec.reduced)
    return result if split == result.spec else dataclasses.replace(result, spec=split)


# --------------------------------------------------------------------------- the example

def example_checked(eq: ShardMap, dims: tuple, explicit: tuple[str, ...] | None,
                    kept: bool) -> dict[str, Any]:
    """The fields of a batched shard_map that JAX checked on one example (``kept``: under
    a vmap called inside the function, its checks kept; else one whose operands this vmap
    does not batch, checked as it was called): the vmap's Explicit axes added to those its
    call was checked under (SMAP-1, SMAP-17) and, where kept, each batched operand's batch
    dimension ``dims`` added to those its example leaves out (SMAP-17). Nothing for a
    call neither checked nor kept, nor where nothing changes.

    >>> eq = ShardMap((0,), (Value.typed((8,)),), body=Program((Value.typed((4,)),),
    ...               outputs=(0,)), mesh=Mesh.iota((2, 4), ("x", "y")), in_specs=(P("x"),),
    ...               out_specs=(P("x"),), manual_axes=frozenset({"x"}))
    >>> example_checked(eq, (0,), ("y",), True)
    {'vmapped': frozenset({'y'}), 'batch_dims': ((0,),)}
    """
    axes = frozenset(explicit or ())
    if not kept and not axes - eq.vmapped:
        return {}
    fields: dict[str, Any] = {"vmapped": eq.vmapped | axes}
    if kept:
        before = eq.batch_dims or ((),) * len(dims)
        fields["batch_dims"] = tuple(
            was if d is None else tuple(sorted({k + (d <= k) for k in was} | {d}))
            for was, d in zip(before, dims))
    return fields


def batch_split_inside(explicit: tuple[str, ...] | None, manual: frozenset[str]
                       ) -> tuple[str, ...] | None:
    """The split a batched shard_map's body keeps on its inputs' batch dimension: the
    Explicit axes vmap splits the batch over that the shard_map leaves automatic (SMAP-18's
    type inside keeps those), None where it makes every one manual."""
    kept = tuple(a for a in explicit or () if a not in manual)
    return kept or None
