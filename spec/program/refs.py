"""Mutable refs under the spec's rewrites and inside shard_map bodies (REF-4 .. REF-8).

What jax 0.10.2 does with a ``jax.Ref`` that a jitted function reads (``r[...]``: the
``get`` primitive) or writes (``r[...] = v``: ``swap``; ``addupdate``), established on 8
CPU devices (notes/jax-facts.md §16):

* under ``jax.vmap`` a ref mapped by ``in_axes`` is batched: its type gains the batch
  dimension at its axis, and a read gives a value batched there. A write is batched by a
  rule JAX runs even when nothing is batched, and it refuses a ref vmap leaves unbatched
  (closed over, or mapped with ``None``), whatever the value (REF-4); into a batched ref
  an unbatched value is broadcast along the ref's batch axis, a value batched at another
  axis is refused (REF-5);
* under ``jax.jvp``, ``jax.linearize``, ``jax.vjp`` and ``jax.grad`` a ref has no tangent
  (closed over, or an argument not differentiated): reading it gives a value with none,
  writing a value that has one is refused (REF-6); the write itself, an effect, stays in
  the primal program, so the ref still takes part and comes back aliased (REF-1, REF-2);
* inside a ``shard_map`` a ref passed as an operand is typed per shard as any operand (its
  in spec's block, varying along its axes under check_vma) and its writes reach its buffer;
  a ref the body closes over is refused while tracing (REF-7); under check_vma, a ref
  whose last write varies along a manual axis its in spec does not name is refused when
  lowering (REF-8).

The rewrites keep the flags of the inputs that are refs (``Program.refs``): a rewritten
program takes the same refs, so ``explain_program`` answers REF-1 .. REF-3 of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, located, reject, rule, staged
from ..core.shardings import SingleDeviceSharding
from ..core.values import PartitionSpec
from ..transforms.shardmap_parameters import spec_axes
from ..transforms.shardmap_specs import manual_axes_of
from .description import Const, Opaque, Program, ShardMap, Value, check_program
from .lowering import REF_WRITES, Live, writes_ref, equation_path
from .primitives import BATCHING, entry_of, names_where

P = PartitionSpec  # the name the examples use

__all__ = ["REF_READS", "REF_ACCESS", "writes_ref", "with_refs", "tangent_inputs",
           "batch_ref_access", "check_tangent_not_written", "check_no_closed_over_refs",
           "check_ref_writes_vary_as_specified", "UnbatchedRefWritten",
           "RefWrittenAtAnotherAxis", "TangentWrittenToRef", "RefClosedOverByShardMap",
           "RefWriteVariesMore"]

# The primitive that reads a whole ref (``r[...]``), and every primitive that reads or
# writes one: its first operand is the ref.
REF_READS = names_where(effect="reads ref")
REF_ACCESS = REF_READS + REF_WRITES


def with_refs(result: Program, given: Program) -> Program:
    """``result``, a rewrite of ``given`` whose inputs begin with ``given``'s, with
    ``given``'s refs flagged again (the rewrite passes them on; its own inputs, tangents
    or cotangents, are not refs) and, where its inputs are ``given``'s, their paths."""
    if given.input_paths and len(result.inputs) == len(given.inputs):
        result = dataclasses.replace(result, input_paths=given.input_paths)
    if not any(given.refs) or len(result.inputs) < len(given.inputs):
        return result
    extra = len(result.inputs) - len(given.inputs)
    return dataclasses.replace(result, refs=given.refs + (False,) * extra)


def tangent_inputs(program: Program, differentiable: Any) -> tuple[bool, ...]:
    """Which inputs take a tangent: the differentiable ones that are not refs (a ref is
    read as a value without one, REF-6)."""
    refs = program.refs or (False,) * len(program.inputs)
    return tuple(differentiable(v) and not ref for v, ref in zip(program.inputs, refs))


def _whole(eq: Opaque, operands: int, path: str) -> None:
    """A ref read or written whole (``r[...]``): no indexing operands."""
    check_program(len(eq.operands) == operands, f"the {eq.primitive} at {path}",
                  "a read or write of a whole ref (r[...]: no index operands)", eq.operands)


def _inserted(shape: tuple, axis: int, size: int) -> tuple:
    return tuple(shape[:axis]) + (size,) + tuple(shape[axis:])


# --------------------------------------------------------------------------- REF-4, REF-5

@dataclasses.dataclass(frozen=True)
class UnbatchedRefWritten(Failure, rule="REF-4", error=Exception):
    template = ("{path} writes a mutable ref that vmap does not batch ({ref}), and vmap "
                "writes a ref only along its batch axis, even a value it does not batch")
    hint = ("Pass the ref to the vmapped function and map it (in_axes), or write it "
            "outside vmap.")
    path: str
    ref: str


@dataclasses.dataclass(frozen=True)
class RefWrittenAtAnotherAxis(Failure, rule="REF-5", error=ValueError):
    template = ("{path} writes a value batched at axis {value_axis} into a mutable ref "
                "batched at axis {ref_axis}: vmap does not move the value, so its shape "
                "{value_shape} is not the ref's {ref_shape}")
    hint = "Map the ref and the value it is given at the same axis."
    path: str
    value_axis: int
    ref_axis: int
    value_shape: tuple
    ref_shape: tuple


def _ref_text(value: Value) -> str:
    return f"Ref{{{value.dtype}{list(value.shape)}}}"


@rule("REF-4", mirrors="jax._src.state.primitives._swap_vmap, _addupdate_vmap; "
                       "batching.BatchTrace.process_primitive (fancy_primitive_batchers)")
def check_ref_batched_for_write(eq: Opaque, ref: Value, ref_axis: int | None, path: str
                                ) -> None:
    """Under vmap a mutable ref is written only if vmap batches it: a ref closed over or mapped with in_axes None is refused when written, whatever the value; reading it is allowed.

    >>> ref = Value.typed((4,))
    >>> write = Opaque((0, 1), (ref,), primitive="swap")
    >>> check_ref_batched_for_write(write, ref, 0, "body[1]")
    >>> check_ref_batched_for_write(write, ref, None, "body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [REF-4] at body[1]: body[1] writes a mutable ref that vmap does not batch (Ref{float32[4]}), and vmap writes a ref only along its batch axis, even a value it does not batch. Pass the ref to the vmapped function and map it (in_axes), or write it outside vmap.
    """
    if ref_axis is None:
        with located(path), staged("trace"):   # vmap traces the function
            raise reject(UnbatchedRefWritten(path, _ref_text(ref)))


@rule("REF-5", mirrors="jax._src.state.primitives._swap_vmap (no indexers: the value is "
                       "broadcast at the ref's axis, never moved), swap's abstract evaluation")
def batched_write_axis(ref: Value, ref_axis: int, value: Value, value_axis: int | None,
                       path: str) -> bool:
    """Under vmap a batched ref takes an unbatched value broadcast along its batch axis, and a batched value as it is, never moved: a value batched at another axis is refused unless its shape is the ref's.

    Returns whether the value is broadcast first. ``ref`` and ``value`` are batched types.

    >>> ref = Value.typed((2, 8))
    >>> batched_write_axis(ref, 0, Value.typed((8,)), None, "body[2]")
    True
    >>> batched_write_axis(ref, 0, Value.typed((8, 2)), 1, "body[2]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [REF-5] at body[2]: body[2] writes a value batched at axis 1 into a mutable ref batched at axis 0: vmap does not move the value, so its shape (8, 2) is not the ref's (2, 8). Map the ref and the value it is given at the same axis.
    """
    if value_axis is None:
        return True
    if value_axis != ref_axis and tuple(value.shape) != tuple(ref.shape):
        with located(path), staged("trace"):   # vmap traces the function
            raise reject(RefWrittenAtAnotherAxis(path, value_axis, ref_axis,
                                                 tuple(value.shape), tuple(ref.shape)))
    return False


@BATCHING.register("ref_access")
def batch_ref_access(rw: Any, eq: Opaque, numbers: tuple, dims: tuple, path: str) -> None:
    """A ref read or written whole, batched onto ``rw`` (a body being batched: its
    ``types`` by number, ``add(equation, dims)``, ``axis.size``): a read of a batched ref
    is batched at the ref's axis (REF-4 lets any ref be read); a write needs a batched ref
    (REF-4) and a value at its axis or broadcast there (REF-5)."""
    ref, ref_axis = rw.types[numbers[0]], dims[0]
    if entry_of(eq).effect == "reads ref":
        _whole(eq, 1, path)
        rw.add(dataclasses.replace(eq, operands=numbers, results=(ref.type,)), (ref_axis,))
        return
    _whole(eq, 2, path)
    check_ref_batched_for_write(eq, ref, ref_axis, path)
    value, value_axis = rw.types[numbers[1]], dims[1]
    operand = numbers[1]
    if batched_write_axis(ref, ref_axis, value, value_axis, path):
        shape = _inserted(value.shape, ref_axis, rw.axis.size)
        kept = tuple(i for i in range(len(shape)) if i != ref_axis)
        spec = None if value.spec is None else P(*_inserted(tuple(value.spec), ref_axis, None))
        result = dataclasses.replace(value.type, shape=shape, spec=spec)
        rw.add(Opaque((operand,), (result,), primitive="broadcast_in_dim", params=(
            ("broadcast_dimensions", kept), ("sharding", None), ("shape", shape))),
            (ref_axis,))
        operand = len(rw.types) - 1
    results = (ref.type,) * len(eq.results)
    rw.add(dataclasses.replace(eq, operands=(numbers[0], operand), results=results),
           (ref_axis,) * len(results))


# --------------------------------------------------------------------------- REF-6

@dataclasses.dataclass(frozen=True)
class TangentWrittenToRef(Failure, rule="REF-6", error=Exception):
    template = ("{path} writes a value that carries a tangent into a mutable ref that "
                "carries none ({transform}): the ref is closed over or an argument not "
                "differentiated")
    hint = "Write the ref outside the differentiated function, or stop the gradient first."
    path: str
    transform: str


@rule("REF-6", mirrors="jax._src.state.primitives (swap's and addupdate's JVP rules: a "
                       "tangent written to a ref without one); ad.JVPTrace")
def check_tangent_not_written(eq: Any, moving: list, path: str, transform: str) -> None:
    """Under jvp, linearize, vjp or grad a mutable ref carries no tangent: it is read as a value without one, and writing a value that carries a tangent into it is refused.

    ``moving``: the tangent of each operand (None: a symbolic zero); a ref's is always None.

    >>> write = Opaque((0, 1), (Value.typed((4,)),), primitive="swap")
    >>> check_tangent_not_written(write, [None, None], "body[1]", "grad")
    >>> check_tangent_not_written(write, [None, 7], "body[1]", "grad")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [REF-6] at body[1]: body[1] writes a value that carries a tangent into a mutable ref that carries none (grad): the ref is closed over or an argument not differentiated. Write the ref outside the differentiated function, or stop the gradient first.
    """
    if entry_of(eq).effect == "writes ref" and any(
            t is not None for t in moving[1:]) and moving[0] is None:
        with located(path), staged("trace"):   # the transformation traces the function
            raise reject(TangentWrittenToRef(path, transform))


# --------------------------------------------------------------------------- REF-7

@dataclasses.dataclass(frozen=True)
class RefClosedOverByShardMap(Failure, rule="REF-7", error=AttributeError):
    template = ("the body of the shard_map at {path} closes over a mutable ref "
                "({where}): shard_map passes what a body closes over as an operand "
                "replicated over the mesh, which it cannot do for a ref")
    hint = "Pass the ref to the shard_map as an operand, with an in spec."
    path: str
    where: str


@rule("REF-7", mirrors="jax._src.shard_map (closed-over values become operands with "
                       "_repspec, which a ref's type lacks)")
def check_no_closed_over_refs(eq: ShardMap, path: str) -> None:
    """A shard_map body may not close over a mutable ref: it is refused while tracing, after the body; a ref passed as an operand is typed per shard like any operand.

    >>> from shardlaw.spec.core.values import Mesh
    >>> mesh = Mesh.iota((2,), ("x",))
    >>> ref = Value.placed((4,), SingleDeviceSharding(0))
    >>> shard = Value.typed((2,), mesh=mesh.abstract, varying={"x"})
    >>> read = Opaque((1,), (ref.type,), primitive="get")
    >>> body = Program((shard,), (read,), outputs=(0,), consts=(Const(ref, ref=True),))
    >>> check_no_closed_over_refs(ShardMap((0,), (Value.typed((4,)),), body=body, mesh=mesh,
    ...                                    in_specs=(P("x"),), out_specs=(P("x"),)), "body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionAttributeError: [REF-7] at body[0]: the body of the shard_map at body[0] closes over a mutable ref (body[0].shard_map.constants[0]): shard_map passes what a body closes over as an operand replicated over the mesh, which it cannot do for a ref. Pass the ref to the shard_map as an operand, with an in spec.
    """
    for k, const in enumerate(eq.body.consts):
        if const.ref:
            with located(path):
                raise reject(RefClosedOverByShardMap(
                    path, f"{path}.shard_map.constants[{k}]"))


# --------------------------------------------------------------------------- REF-8

@dataclasses.dataclass(frozen=True)
class RefWriteVariesMore(Failure, rule="REF-8", error=Exception, jax_error="_RepError"):
    template = ("the shard_map at {path} writes its operand {operand}, a mutable ref "
                "with in spec {spec}, last with a value varying along {axes} (check_vma): "
                "the ref's new value goes back on its in spec, which does not name them")
    hint = ("Give the ref an in spec that splits it over those axes, or write a value "
            "that does not vary along them (a psum or all_gather first).")
    path: str
    operand: int
    spec: Any
    axes: tuple


@rule("REF-8", mirrors="jax._src.shard_map._shard_map_discharge (a ref's new value is a "
                       "result on its in spec), _check_mats, _valid_repeats")
def check_ref_writes_vary_as_specified(eq: ShardMap, path: str) -> None:
    """Under check_vma, a mutable ref operand of a shard_map is refused when lowering if the value its body last writes into it varies along a manual axis that the ref's in spec does not name.

    >>> from shardlaw.spec.core.values import Mesh
    >>> mesh = Mesh.iota((2,), ("x",))
    >>> shard, whole = (Value.typed((2,), mesh=mesh.abstract, varying={"x"}),
    ...                 Value.typed((4,), mesh=mesh.abstract))
    >>> cast = Opaque((1,), (Value.typed((4,), mesh=mesh.abstract, varying={"x"}),),
    ...               primitive="pvary", params=(("axes", ("x",)),))
    >>> write = Opaque((1, 2), (whole,), primitive="swap")   # the ref, the value written
    >>> body = Program((shard, whole), (cast, write), outputs=(0,))
    >>> eq = ShardMap((0, 1), (Value.typed((4,)),), body=body, mesh=mesh,
    ...               in_specs=(P("x"), P()), out_specs=(P("x"),))
    >>> check_ref_writes_vary_as_specified(eq, "body[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [REF-8] at body[0]: the shard_map at body[0] writes its operand 1, a mutable ref with in spec P(), last with a value varying along ('x',) (check_vma): the ref's new value goes back on its in spec, which does not name them. Give the ref an in spec that splits it over those axes, or write a value that does not vary along them (a psum or all_gather first).
    >>> check_ref_writes_vary_as_specified(dataclasses.replace(eq, check_vma=False), "body[0]")
    """
    if not eq.check_vma:
        return
    body, last = eq.body, {}
    for k, inner in enumerate(body.equations):
        if entry_of(inner).name == "swap" and \
                inner.operands[0] < len(body.inputs):
            last[inner.operands[0]] = body.value_types[inner.operands[1]]
    manual = manual_axes_of(eq.mesh, set(eq.manual_axes))
    for k, value in sorted(last.items()):
        extra = (value.varying & manual) - spec_axes(eq.in_specs[k])
        if extra:
            with located(path):
                raise reject(RefWriteVariesMore(path, k, eq.in_specs[k],
                                                tuple(sorted(extra))))


def check_shard_map_ref_writes(program: Program, live: Live, prefix: str = "") -> None:
    """REF-8 for every live shard_map of ``program`` that writes a ref operand, in the
    bodies of live jits and shard_maps too, in program order (lowering discharges the refs
    of the whole program before anything else)."""
    for k, eq in enumerate(program.equations):
        if not live.equations[k] or eq.body is None or not writes_ref(eq):
            continue
        path = equation_path(prefix, k)
        if entry_of(eq).bodies.per_shard:
            check_ref_writes_vary_as_specified(eq, path)
        if k in live.bodies:
            check_shard_map_ref_writes(eq.body, live.bodies[k], f"{path}.{eq.kind}.")
