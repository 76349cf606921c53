"""shard_map: specs, per-shard types, axis groups and manual shardings (SMAP rules).

``jax.shard_map(f, mesh=..., in_specs=..., out_specs=..., axis_names=..., check_vma=...)``
runs ``f`` once per device on the shard each device holds. The modules beside this one
say, as rules, what a shard_map is given (``shardmap_parameters.py``: SMAP-0), which specs
it takes (``shardmap_specs.py``: SMAP-1 to SMAP-8, SMAP-11, SMAP-12), the types ``f`` sees
inside (SMAP-9) and the types the caller gets back (SMAP-10; ``shardmap_types.py``, with
the types over Explicit axes, SMAP-16 to SMAP-19), which devices a collective inside
reduces together (SMAP-13, SMAP-14) and the HLO sharding that marks the body manual
(SMAP-15; ``shardmap_collectives.py``). :func:`check_shard_map`, here, applies them in the
order ``jax.jit`` of a shard_map meets them: the checks of the call, the arguments, the
body's results, then lowering; this module's names are all of shard_map's public ones.

The mapped function is described, not run: its arguments are :class:`Shaped` leaves (an
array of a global shape) and each of its results is a :class:`Returned` leaf (one
argument's shard, summed with ``psum`` over some axes, or not). Meshes are those whose axes
are all ``Auto`` (meshes with Explicit axes add rules this module does not state).
"""

from __future__ import annotations

from typing import Any

from ..core.pytree import leaves_with_paths, show_path
from ..core.rules import located, require, staged
from ..core.values import AbstractMesh, Mesh, PartitionSpec
from .shardmap_collectives import (
    check_collective_axes, collective_groups, manual_sharding, replica_groups,
)
from .shardmap_parameters import (
    INFER, Returned, Shaped, ShardMapTypes, TypedArgumentPassedWhole, entry_axes, check_parameters,
)
from .shardmap_specs import (
    check_divisible, check_no_repeated_axes, check_replication, check_spec_axes,
    check_spec_leaves, check_spec_rank, check_spec_reductions, manual_axes_of, match_in_specs,
    match_out_specs,
)
from .shardmap_types import (
    check_reductions_held, check_specs_match_types, explicit_types, infer_in_specs,
    per_shard_shape, unshard_shape,
)

P = PartitionSpec  # the name the examples use

__all__ = [
    "Shaped", "Returned", "INFER", "check_shard_map", "manual_axes_of",
    "per_shard_shape", "unshard_shape", "collective_groups", "replica_groups",
    "manual_sharding",
]


# --------------------------------------------------------------------------- the whole call

def check_shard_map(mesh: Any, in_specs: Any, out_specs: Any, operands: Any, results: Any,
                    manual_axes: Any = frozenset(), check_vma: Any = True) -> ShardMapTypes:
    """What ``jax.jit(jax.shard_map(f, ...))`` does with the types, or the first rule it breaks.

    The rules meet the call in JAX's order: the parameters (SMAP-0, SMAP-1), the specs
    (SMAP-2 to SMAP-4, in_specs then out_specs), the arguments (SMAP-5, SMAP-7, SMAP-8, then
    SMAP-9), the body's results (SMAP-13, SMAP-6, SMAP-7, SMAP-11, then SMAP-10 with SMAP-12),
    and last, when the program is lowered, SMAP-12 for the in specs.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> types = check_shard_map(mesh, P("x", "y"), P(None, "y"), (Shaped((8, 8)),),
    ...                         Returned(0, summed="x"))
    >>> types.inner_shapes, types.result_varying, types.out_shapes
    (((4, 2),), (frozenset({'y'}),), ((4, 8),))
    >>> check_shard_map(mesh, P("x"), P(), (Shaped((8, 8)),), Returned(0))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-11]: the out spec of results is P(), which says ...
    """
    operands, check_vma = check_parameters(mesh, in_specs, out_specs, operands, results,
                                           check_vma)
    manual = manual_axes_of(mesh, manual_axes)
    for which, specs in (("in_specs", in_specs), ("out_specs", out_specs)):
        if which == "in_specs" and specs is INFER:
            infer_in_specs(mesh, manual, ())  # the manual axes must show in the types
            continue
        if which == "in_specs" and specs is None:
            continue  # every argument passed whole
        check_spec_leaves(specs, which)
        check_spec_axes(specs, which, manual)
        check_spec_reductions(specs, which, mesh, manual)
    flat_in, inner_shapes = _map_arguments(mesh, in_specs, operands, manual)
    inner_varying = tuple(_varying(spec, check_vma) for spec in flat_in)
    shapes, varying = _trace_body(mesh, results, inner_shapes, inner_varying, manual, check_vma)
    flat_out, out_shapes = _map_results(mesh, out_specs, results, shapes, varying, manual,
                                        check_vma)
    # Lowering makes a NamedSharding of the spec of every argument the body uses (the
    # others are pruned first).
    used = {leaf.operand for _, leaf in leaves_with_paths(results)}
    with staged("lower"):
        for i, ((path, _), spec) in enumerate(zip(leaves_with_paths(operands), flat_in)):
            if spec is not None and i in used:
                check_no_repeated_axes(spec, f"the in spec of {show_path(('args', *path))}")
        for path, leaf in leaves_with_paths(results):  # the body's collectives, in order
            with located(show_path(("results", *path))):
                check_collective_axes(mesh, leaf.summed, manual)
        if not check_vma:  # unchecked while tracing, an out spec's reductions fail here
            for (path, _), spec in zip(leaves_with_paths(results), flat_out):
                check_reductions_held(spec, f"the out spec of {show_path(('results', *path))}",
                                      "the result")
    inner_types, out_types = _types(mesh, manual, operands, flat_in, inner_shapes, results,
                                    flat_out, shapes)
    return ShardMapTypes(manual, tuple(flat_in), inner_shapes, inner_varying, tuple(flat_out),
                         shapes, _cast_to_out_specs(varying, flat_out, check_vma), out_shapes,
                         inner_types, out_types)


def _types(mesh: Mesh | AbstractMesh, manual: frozenset[str], operands: tuple, flat_in: list,
           inner_shapes: tuple, results: Any, flat_out: list, shapes: tuple
           ) -> tuple[tuple, tuple]:
    """SMAP-18 for every argument inside and every result outside (an argument passed whole
    has no type over the mesh: SMAP-0)."""
    typed = [leaf.spec for _, leaf in leaves_with_paths(operands)]
    inner = tuple(explicit_types(mesh, manual, t, None, shape)[0]
                  for t, shape in zip(typed, inner_shapes))
    outer = tuple(explicit_types(mesh, manual, typed[leaf.operand], spec, shape)[1]
                  for (_, leaf), spec, shape in zip(leaves_with_paths(results), flat_out, shapes))
    return inner, outer


def _varying(spec: PartitionSpec | None, check_vma: bool) -> frozenset[str]:
    """The axes an argument varies along inside: its spec's axes (with check_vma; SMAP-11)."""
    if spec is None or not check_vma:
        return frozenset()
    return frozenset(n for entry in spec for n in entry_axes(entry))


def _map_arguments(mesh: Mesh | AbstractMesh, in_specs: Any, operands: tuple,
                   manual: frozenset[str]) -> tuple[list, tuple]:
    """SMAP-5, then SMAP-7 for every argument, then SMAP-8 for every argument, then SMAP-9."""
    flat = (list(infer_in_specs(mesh, manual, operands)) if in_specs is INFER else
            match_in_specs(in_specs, operands))
    args = [(show_path(("args", *path)), leaf.shape) for path, leaf in leaves_with_paths(operands)]
    for (where, shape), spec in zip(args, flat):
        if spec is not None:
            check_spec_rank(spec, shape, f"the in spec of {where}", where)
    for (where, shape), spec in zip(args, flat):
        if spec is not None:
            check_divisible(mesh, spec, shape, f"the in spec of {where}", where)
    check_specs_match_types(mesh, manual, flat, operands)
    inner = []
    for (where, shape), spec, (_, leaf) in zip(args, flat, leaves_with_paths(operands)):
        if spec is None:
            # Closed over, a value typed over a mesh with Explicit axes meets unfinished
            # paths in JAX (NotImplementedError or not, by the manual axes): not described.
            require(leaf.spec is None, lambda: TypedArgumentPassedWhole(mesh, where))
            inner.append(shape)
            continue
        check_reductions_held(spec, f"the in spec of {where}", where)
        inner.append(per_shard_shape(mesh, spec, shape, manual))
        explicit_types(mesh, manual, leaf.spec, None, inner[-1], where)
    return flat, tuple(inner)


def _trace_body(mesh: Mesh | AbstractMesh, results: Any, inner_shapes: tuple,
                inner_varying: tuple, manual: frozenset[str], check_vma: bool) -> tuple:
    """Each result's shard: the shape of its argument's shard, varying along that argument's
    axes less those summed over (SMAP-13 checks the sums, in the order the body runs them)."""
    shapes, varying = [], []
    for path, leaf in leaves_with_paths(results):
        before = inner_varying[leaf.operand]
        if leaf.summed:
            with located(show_path(("results", *path))):
                check_collective_axes(mesh, leaf.summed, manual, before if check_vma else None,
                                      lowering=False)
        shapes.append(inner_shapes[leaf.operand])
        varying.append(before - frozenset(leaf.summed))
    return tuple(shapes), tuple(varying)


def _map_results(mesh: Mesh | AbstractMesh, out_specs: Any, results: Any, shapes: tuple,
                 varying: tuple, manual: frozenset[str], check_vma: bool) -> tuple[list, tuple]:
    """SMAP-6, then SMAP-7 for every result, SMAP-11 for every result, then SMAP-10."""
    flat = match_out_specs(out_specs, results)
    where = [f"the out spec of {show_path(('results', *path))}"
             for path, _ in leaves_with_paths(results)]
    for spec, shape, at in zip(flat, shapes, where):
        if len(spec):
            check_spec_rank(spec, shape, at, "the result")
    if check_vma:
        for spec, vary, at in zip(flat, varying, where):
            check_replication(mesh, spec, vary, at)
    out = []
    for spec, shape, at in zip(flat, shapes, where):
        if check_vma:
            check_reductions_held(spec, at, "the result")
        check_no_repeated_axes(spec, at)
        out.append(unshard_shape(mesh, spec, shape, manual))
    return flat, tuple(out)


def _cast_to_out_specs(varying: tuple, flat_out: list, check_vma: bool) -> tuple:
    """With check_vma the body's results are cast to vary along their out spec's axes too."""
    return tuple(vary | _varying(spec, check_vma) for vary, spec in zip(varying, flat_out))
