"""The bridge between the shard_map rules (SMAP) and real JAX: build, run, read back.

:func:`shard_map_in_jax` builds the call a :func:`~shardlaw.spec.transforms.shardmap.check_shard_map`
description stands for (numpy arguments of the :class:`~shardlaw.spec.transforms.shardmap.Shaped`
shapes, a body that returns the :class:`~shardlaw.spec.transforms.shardmap.Returned` results, the
mesh with its device order, the specs as JAX's PartitionSpecs), traces it with ``jax.jit``
and lowers it, and reads back what JAX did: the exception and the stage that raised it, or
the shard_map equation's specs and the body's types. :func:`collective_in_jax` lowers and
runs a ``psum`` and reads which devices summed together; :func:`manual_sharding_in_jax`
reads the manual HLO sharding of a lowering with the Shardy partitioner off.

This module imports JAX at its top; the spec package never imports it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import numpy as np
from jax._src import config as jax_config

from ..core.hlo import HloSharding, parse_hlo
from .convert import from_jax, to_jax
from ..core.pytree import broadcast_prefix, fill, leaves, map_leaves, structure
from ..transforms.shardmap import INFER, Shaped
from ..core.values import Mesh, PartitionSpec

__all__ = ["JaxShardMap", "shard_map_in_jax", "collective_in_jax", "manual_sharding_in_jax",
           "hlo_replica_groups", "COLLECTIVES"]


@dataclasses.dataclass
class JaxShardMap:
    """What ``jax.jit(jax.shard_map(...))`` did: an error and its stage, or the types."""

    error: BaseException | None = None
    stage: str | None = None                      # "trace" or "lower"
    in_specs: tuple = ()                          # spec values, one per dynamic argument
    inner_shapes: tuple = ()
    inner_varying: tuple = ()
    out_specs: tuple = ()
    result_shapes: tuple = ()
    result_varying: tuple = ()
    out_shapes: tuple = ()
    inner_types: tuple = ()                       # per dimension: the Explicit axes inside
    out_types: tuple = ()                         # and outside


def _jax_specs(specs: Any) -> Any:
    """A tree of specs with each spec PartitionSpec made JAX's (other leaves kept)."""
    return map_leaves(lambda leaf: to_jax(leaf) if isinstance(leaf, PartitionSpec) else leaf,
                      specs)


def _body(results: Any):
    """The mapped function: the flat argument each result names, summed as it says."""
    def body(*args):
        flat = jax.tree_util.tree_leaves(args)
        values = [jax.lax.psum(flat[r.operand], r.summed) if r.summed else flat[r.operand]
                  for r in leaves(results)]
        return fill(results, values)
    return body


def _arguments(mesh: Mesh, operands: tuple) -> tuple:
    """A value per Shaped leaf: ones, or a ShapeDtypeStruct whose type the leaf's spec splits."""
    def value(leaf: Any) -> Any:
        if not isinstance(leaf, Shaped):
            return leaf
        if leaf.spec is None:
            return np.ones(leaf.shape, np.float32)
        sharding = jax.sharding.NamedSharding(to_jax(mesh), to_jax(leaf.spec))
        return jax.ShapeDtypeStruct(leaf.shape, np.float32, sharding=sharding)
    return map_leaves(value, operands)


def _per_dimension(spec: Any, rank: int) -> tuple:
    """A JAX type's spec as one entry per dimension: None, an axis name or a tuple of them."""
    entries = []
    for entry in list(spec)[:rank]:
        names = () if entry is None else entry if isinstance(entry, tuple) else (entry,)
        entries.append(None if not names else names[0] if len(names) == 1 else tuple(names))
    return tuple(entries + [None] * (rank - len(entries)))


def _type_of(var: Any) -> tuple:
    return _per_dimension(var.aval.sharding.spec, len(var.aval.shape))


def shard_map_in_jax(mesh: Mesh, in_specs: Any, out_specs: Any, operands: tuple, results: Any,
                     manual_axes: Any = frozenset(), check_vma: bool = True) -> JaxShardMap:
    """Trace and lower ``jax.jit`` of the described shard_map; record what JAX did."""
    # in_specs left out (INFER): shard_map reads them off the arguments' types.
    given = {} if in_specs is INFER else {"in_specs": _jax_specs(in_specs)}
    mapped = jax.shard_map(_body(results), mesh=to_jax(mesh), out_specs=_jax_specs(out_specs),
                           axis_names=manual_axes, check_vma=check_vma, **given)
    args = _arguments(mesh, tuple(operands))
    try:
        traced = jax.jit(mapped).trace(*args)
    except Exception as error:  # what JAX refuses while tracing is the outcome compared
        return JaxShardMap(error=error, stage="trace")
    try:
        traced.lower()
    except Exception as error:  # likewise for lowering
        return JaxShardMap(error=error, stage="lower")
    dynamic = (len(leaves(tuple(operands))) if in_specs is INFER else
               sum(1 for s in broadcast_prefix(in_specs, structure(tuple(operands)))
                   if s is not None))
    return _read_jaxpr(traced.jaxpr, dynamic)


def _read_jaxpr(closed: Any, dynamic: int) -> JaxShardMap:
    """The shard_map equation's specs and types; its last ``dynamic`` inputs are the mapped
    arguments (constants the body closed over, such as arguments passed whole, come first)."""
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "shard_map"]
    body = eqn.params["jaxpr"]
    invars = body.invars[len(body.invars) - dynamic:]
    in_specs = eqn.params["in_specs"]
    return JaxShardMap(
        in_specs=tuple(from_jax(s) for s in in_specs[len(in_specs) - dynamic:]),
        inner_shapes=tuple(tuple(v.aval.shape) for v in invars),
        inner_varying=tuple(frozenset(v.aval.mat.varying) for v in invars),
        out_specs=tuple(from_jax(s) for s in eqn.params["out_specs"]),
        result_shapes=tuple(tuple(v.aval.shape) for v in body.outvars),
        result_varying=tuple(frozenset(v.aval.mat.varying) for v in body.outvars),
        out_shapes=tuple(tuple(v.aval.shape) for v in eqn.outvars),
        inner_types=tuple(_type_of(v) for v in invars),
        out_types=tuple(_type_of(v) for v in eqn.outvars))


# --------------------------------------------------------------------------- collectives

_GROUPS = re.compile(r"(?:all_reduce|all_gather|reduce_scatter|all_to_all)\b.*?"
                     r"replica_groups = dense<(.*?)> : tensor<(\d+)x(\d+)xi64>")

# The collectives over mesh axes whose device groups SMAP-14 gives; each as shard_map's body
# over a block of shape (rows, mesh size): dimension 1 is whole on every device, so it
# gathers, scatters or splits evenly over any group.
COLLECTIVES = ("psum", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all")


def _collective_body(kind: str, axes: tuple[str, ...]) -> Any:
    lax = jax.lax
    return {
        "psum": lambda a: lax.psum(a, axes),
        "pmax": lambda a: lax.pmax(a, axes),
        "pmin": lambda a: lax.pmin(a, axes),
        "all_gather": lambda a: lax.all_gather(a, axes, axis=1, tiled=True),
        "psum_scatter": lambda a: lax.psum_scatter(a, axes, scatter_dimension=1, tiled=True),
        "all_to_all": lambda a: lax.all_to_all(a, axes, 1, 1, tiled=True),
    }[kind]


def hlo_replica_groups(text: str) -> list[tuple[tuple[int, ...], ...]]:
    """The replica groups of every all_reduce, all_gather, reduce_scatter and all_to_all in
    lowered StableHLO text, in order."""
    found = []
    for m in _GROUPS.finditer(text):
        body, rows, cols = m[1], int(m[2]), int(m[3])
        numbers = [int(n) for n in re.findall(r"-?\d+", body)]
        if len(numbers) == 1:  # a splat: every entry the same number
            numbers = numbers * (rows * cols)
        found.append(tuple(tuple(numbers[r * cols:(r + 1) * cols]) for r in range(rows)))
    return found


def collective_in_jax(mesh: Mesh, collective_axes: tuple[str, ...],
                      manual_axes: frozenset[str], run: bool, kind: str = "psum"
                      ) -> tuple[Any, Any]:
    """(the replica groups the lowered HLO prints, the device groups that summed together).

    ``kind`` is one of :data:`COLLECTIVES`. For a psum each device contributes ``2**id``;
    after it each holds the bitmask of its group. Running needs a psum and every mesh axis
    manual (``run``), so that each device holds its own value; else the device groups are
    None. An error JAX raises is returned in place of the pair.
    """
    names = tuple(a for a in mesh.axis_names if a in manual_axes)
    spec = jax.sharding.PartitionSpec(names if names else None)
    mapped = jax.shard_map(_collective_body(kind, collective_axes), mesh=to_jax(mesh), in_specs=spec,
                           out_specs=spec, axis_names=set(manual_axes),
                           check_vma=kind == "psum")
    ids = mesh.devices.id_tuple()
    x = np.array([[1 << i] * mesh.size for i in ids], dtype=np.int32)
    try:
        text = jax.jit(mapped).lower(x).as_text()
    except Exception as error:  # the refusal is the outcome compared
        return error, None
    groups = hlo_replica_groups(text)
    hlo = groups[0] if groups else None
    if not run or kind != "psum":
        return hlo, None
    summed = np.asarray(jax.jit(mapped)(x))[:, 0]
    together = {tuple(i for i in sorted(ids) if int(mask) >> i & 1) for mask in summed}
    return hlo, together


def manual_sharding_in_jax(mesh: Mesh, manual_axes: frozenset[str], rank: int
                           ) -> HloSharding | None | BaseException:
    """The manual HLO sharding the GSPMD lowering gives the body's first argument (None when
    it adds no sharding ops), read from ``@SPMDFullToShardShape`` in the lowered text."""
    spec = jax.sharding.PartitionSpec()
    mapped = jax.shard_map(lambda a: a, mesh=to_jax(mesh), in_specs=spec, out_specs=spec,
                           axis_names=set(manual_axes), check_vma=False)
    x = np.ones((2,) * rank, np.float32)
    with jax_config.use_shardy_partitioner(False):
        try:
            text = jax.jit(mapped).lower(x).as_text()
        except Exception as error:  # the refusal is the outcome compared
            return error
    m = re.search(r'@SPMDFullToShardShape\(.*?mhlo\.sharding = "(\{.*?\})"', text)
    return None if m is None else parse_hlo(m[1])
