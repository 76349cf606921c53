"""A ``jax.shard_map`` call JAX refuses while tracing, described from the user's values.

JAX refuses a shard_map call in two places. Before it traces the body, it checks the specs
against the mesh and the arguments: manual axes that are not the mesh's, or name an
Explicit axis an enclosing vmap splits its batch over (SMAP-1), in specs that are not the
arguments' types where every other axis is manual and Explicit (SMAP-17), a spec naming an
axis the mesh lacks or leaves automatic (SMAP-3), an in spec longer than its argument's
rank (SMAP-7), an argument dimension its in spec does not divide (SMAP-8), and first of
all a mesh other than the context mesh (SMAP-30: inside another shard_map's body, the
body's mesh; else the one ``jax.set_mesh`` set). After it has traced the body, it checks
the body's results against the out specs: an out spec longer than its result's rank
(SMAP-7), with ``check_vma`` an out spec that leaves out an axis the result varies along,
which would need a reduction (SMAP-11), or whose reduced axes are not the result's
(SMAP-19).

:func:`refused_shard_map` builds the :class:`~shardlaw.spec.program.description.ShardMap`
equation of such a call, with the user's mesh, specs, manual axes and ``check_vma``. Its
body is the one JAX traced where JAX got that far (read from the frame of JAX's shard_map
staging that refused it); where JAX refused before tracing, the body is the user's
function traced over specs with the refused entries left out (an entry naming an axis
that is not manual, or splitting a dimension it does not divide, or past the rank) and,
given another mesh than the context's, traced as given the context mesh (in the
enclosing body's context where it is a body's) or as under its own, so
the body holds what the function does (and the ``pvary`` JAX adds where the result does not
vary along an axis its out spec names), and the spec's rule refuses the specs first (traced
without the vmaps' axes in JAX's axis environment, its arguments typed as their in specs
where it is manual over its whole Explicit mesh). Under a
``vmap`` JAX refuses the results of the call its batching rule staged: that staging's
specs, the batch dimension in them, are the equation's (not checked against its operands,
as a call a batching rule binds).
:mod:`~shardlaw.spec.bridge.refusals` locates the call and places the equation in the
program; the program stands only where the spec refuses it as JAX does.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator

from ..program.description import Program, ShardMap, Value

__all__ = ["refused_shard_map", "in_vmaps"]


@contextlib.contextmanager
def in_vmaps(levels: list[dict]) -> Iterator[None]:
    """A vmapped function's example traced in the axis environment its vmaps trace it in
    (``levels``: each vmap's options, ``in_axes`` and ``in_splits`` one per argument leaf):
    the Explicit axes each splits its batch over, where its mapped arguments agree on them
    (JAX's ``explicit_mesh_axis_names``; where they do not, JAX refuses before tracing, BAT-9).
    A shard_map leaves them out of its mesh's axes where it defaults and checks
    ``axis_names`` (SMAP-1) and where it checks its in specs against the arguments' types
    (SMAP-17); the spec's rules read them too where they check the call JAX refused
    (:data:`~shardlaw.spec.program.shardmap.VMAPPED_EXPLICIT`)."""
    from jax._src import core

    from ..program.shardmap import VMAPPED_EXPLICIT

    axes: frozenset[str] = frozenset()
    for level in levels:
        entries = {entry for entry, axis in zip(level["in_splits"], level["in_axes"])
                   if axis is not None}
        if len(entries) == 1 and None not in entries:
            (entry,) = entries
            axes |= frozenset(entry if isinstance(entry, tuple) else (entry,))
    token = VMAPPED_EXPLICIT.set(VMAPPED_EXPLICIT.get() | axes)
    try:
        with core.add_explicit_mesh_axis_names(axes):
            yield
    finally:
        VMAPPED_EXPLICIT.reset(token)


def refused_shard_map(call: dict, staged: dict | None, operands: tuple, path: str,
                      read_body: Callable[..., Program]) -> ShardMap:
    """The shard_map equation JAX refused: ``call`` the locals of JAX's shard_map call (the
    user's function, mesh, specs and arguments), ``staged`` those of its staging where it
    traced the body before refusing (else None); over the values numbered ``operands``."""
    import jax

    from .convert import from_jax

    mesh = call["mesh"]
    if mesh is None or not hasattr(mesh, "axis_names"):
        raise TypeError("a shard_map whose mesh is the context's")
    manual = frozenset(call["axis_names"] or _unbatched(mesh.axis_names))
    flat_in = _flat_in_specs(call)
    enclosing = call.get("enclosing")
    if enclosing is not None and mesh.abstract_mesh != enclosing["inner_mesh"]:
        # given another mesh than the body's it is called in (SMAP-30): the body it would
        # have had given the body's mesh
        traced = _in_body_mesh(call, enclosing, path, read_body)
        return dataclasses.replace(traced, operands=tuple(operands), mesh=from_jax(mesh),
                                   in_specs=tuple(from_jax(s) for s in flat_in),
                                   manual_axes=manual)
    if staged is not None:
        body = _staged_body(staged, path, read_body)
        out_specs = tuple(staged["out_specs"])
        # (the specs JAX staged: a vmap's batching rule binds the call with the batch
        # dimension in them, its checks against the operands made on one example)
        in_specs = tuple(staged["in_specs"])
        results = tuple(_put_together(mesh, s, body.value_types[n])
                        for s, n in zip(out_specs, body.outputs))
        return ShardMap(tuple(operands), results, body=body, mesh=from_jax(mesh),
                        in_specs=tuple(from_jax(s) for s in in_specs),
                        out_specs=tuple(from_jax(s) for s in out_specs), manual_axes=manual,
                        check_vma=bool(call["check_vma"]),
                        checked=in_specs == tuple(flat_in))
    traced = _substitute(call, mesh, manual, flat_in, path, read_body)
    out_flat = jax.tree_util.tree_leaves(call["out_specs"], is_leaf=_is_spec)
    if len(out_flat) != len(traced.out_specs) or not all(_is_spec(s) for s in out_flat):
        raise TypeError("out_specs not one spec per result")
    return dataclasses.replace(traced, operands=tuple(operands),
                               in_specs=tuple(from_jax(s) for s in flat_in),
                               out_specs=tuple(from_jax(s) for s in out_flat))


def _is_spec(value: Any) -> bool:
    import jax
    return isinstance(value, jax.sharding.PartitionSpec)


def _flat_in_specs(call: dict) -> list:
    """The user's in specs, one per flat argument (every argument mapped)."""
    from jax._src.tree_util import broadcast_prefix

    flat = call.get("in_specs_flat")
    if flat is None:
        flat = broadcast_prefix(call["in_specs"], call["args"], is_leaf=lambda x: x is None)
    if not all(_is_spec(s) for s in flat):
        raise TypeError("an argument passed whole (a None in_specs leaf)")
    return list(flat)


def _staged_body(staged: dict, path: str, read_body: Callable[..., Program]) -> Program:
    """The body JAX traced before it refused the results (the staging frame's jaxpr)."""
    from .program import read_type

    traced = staged["jaxpr"]
    jaxpr, consts = (traced.jaxpr, list(traced.consts)) if hasattr(traced, "consts") \
        else (traced, [])
    if jaxpr.constvars and not consts:
        raise TypeError("a body whose constants JAX had not separated")
    inputs = tuple(read_type(v.aval, f"input {i} of {path}") for i, v in
                   enumerate(jaxpr.invars))
    return read_body(jaxpr, consts, inputs, f"{path}.shard_map.")


def _put_together(mesh: Any, spec: Any, value: Value) -> Value:
    """A result's type outside, as its out spec would put it together (its dimensions
    multiplied by the sizes of the axes named for them, as far as the rank goes)."""
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    shape = list(value.shape)
    for i, entry in enumerate(tuple(spec.partitions)[:len(shape)]):
        for axis in (entry if isinstance(entry, tuple) else (entry,) if entry else ()):
            shape[i] *= sizes.get(axis, 1)
    return Value.typed(tuple(shape), value.dtype, weak_type=value.weak_type)


def _kept(spec: Any, shape: tuple | None, mesh: Any, manual: frozenset,
          rank: int | None = None, full: bool = True) -> Any:
    """``spec`` with the entries JAX refuses left out (None): an axis not manual, a split
    that does not divide its dimension (``shape`` given), an entry past the rank (of
    ``shape``, or ``rank`` given); and its unreduced and reduced axes short of ``full``
    manual (SMAP-4)."""
    import jax

    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    entries = []
    rank = len(shape) if shape is not None else rank
    for i, entry in enumerate(tuple(spec.partitions)):
        if rank is not None and i >= rank:
            break
        axes = entry if isinstance(entry, tuple) else (entry,) if entry else ()
        ways = 1
        for axis in axes:
            ways *= sizes.get(axis, 1)
        fits = all(a in manual for a in axes) and (shape is None or shape[i] % ways == 0)
        entries.append(entry if fits else None)
    if not full:
        return jax.sharding.PartitionSpec(*entries)
    return jax.sharding.PartitionSpec(*entries, unreduced=spec.unreduced, reduced=spec.reduced)


def _substitute(call: dict, mesh: Any, manual: frozenset, flat_in: list, path: str,
                read_body: Callable[..., Program]) -> ShardMap:
    """The shard_map of the user's function over specs with the refused entries left out,
    traced by JAX and read: the body the refused call would have had."""
    import jax

    from .program import read_type

    leaves, tree = jax.tree_util.tree_flatten(call["args"])
    examples = [_example(v) for v in leaves]
    full = manual == frozenset(mesh.axis_names)
    kept = [_kept(s, tuple(jax.typeof(v).shape), mesh, manual, None, full)
            for s, v in zip(flat_in, leaves)]
    # (an argument's reductions taken as its in spec's, which the spec's SMAP-19 compares)
    examples = [_reductions_as(e, s) for e, s in zip(examples, kept)]
    in_specs = jax.tree_util.tree_unflatten(tree, kept)
    in_specs = tuple(in_specs) if isinstance(call["args"], tuple) else in_specs
    if full and all(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types):
        # (manual over a whole Explicit mesh JAX checks the in specs against the types,
        # SMAP-17: the examples typed as their specs, which the spec's rule checks first)
        examples = [jax.ShapeDtypeStruct(e.shape, e.dtype, weak_type=e.weak_type,
                                         sharding=jax.sharding.NamedSharding(mesh, s))
                    for e, s in zip(examples, kept)]
    given = jax.tree_util.tree_unflatten(tree, examples)
    context = jax.sharding.get_abstract_mesh()
    # (under another mesh jax.set_mesh set, SMAP-30: traced as given its own)
    with contextlib.nullcontext() if context.empty or context == mesh.abstract_mesh else \
            jax.sharding.use_abstract_mesh(mesh.abstract_mesh), _outside_vmaps():
        ranks = iter(_result_ranks(call, mesh, manual, in_specs, given))
        out_specs = jax.tree_util.tree_map(
            lambda s: _kept(s, None, mesh, manual, next(ranks), full), call["out_specs"],
            is_leaf=_is_spec)
        mapped = jax.shard_map(call["f"], mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                               axis_names=set(manual), check_vma=bool(call["check_vma"]))
        closed = jax.make_jaxpr(mapped)(*given)
    inputs = tuple(read_type(v.aval, f"operand {i} of {path}")
                   for i, v in enumerate(closed.jaxpr.invars))
    program = read_body(closed.jaxpr, list(closed.consts), inputs, f"{path}.substitute.")
    found = [eq for eq in program.equations if isinstance(eq, ShardMap)]
    if len(found) != 1:
        raise TypeError("the substitute call holds other than one shard_map")
    return found[0]


def _unbatched(names: tuple) -> tuple:
    """The mesh axes ``names`` less those the vmaps the call is traced under split their
    batch over (JAX's axis environment's ``explicit_mesh_axis_names``): a shard_map's
    default manual axes."""
    from jax._src import core

    batched = core.get_axis_env().explicit_mesh_axis_names
    return tuple(n for n in names if n not in batched)


def _outside_vmaps() -> Any:
    """The substitute traced without the vmaps' Explicit axes in the axis environment: its
    manual axes are given, and its in specs checked against its examples' types only where
    it is manual over the whole mesh (SMAP-17), as the refused call was not."""
    from jax._src import core

    return core.remove_explicit_mesh_axis_names(core.get_axis_env().explicit_mesh_axis_names)


def _reductions_as(example: Any, spec: Any) -> Any:
    """``example`` typed with the unreduced and reduced axes of ``spec``."""
    import jax

    s = example.sharding
    if not isinstance(s, jax.sharding.NamedSharding) or (
            s.spec.unreduced, s.spec.reduced) == (spec.unreduced, spec.reduced):
        return example
    typed = jax.sharding.PartitionSpec(*s.spec.partitions, unreduced=spec.unreduced,
                                       reduced=spec.reduced)
    return jax.ShapeDtypeStruct(example.shape, example.dtype, weak_type=example.weak_type,
                                sharding=jax.sharding.NamedSharding(s.mesh, typed))


def _result_ranks(call: dict, mesh: Any, manual: frozenset, in_specs: Any, given: Any
                  ) -> list:
    """The rank of each of the body's results, one per out spec leaf (an out spec past it
    is refused after the body, SMAP-7): the body traced with every result replicated and
    unchecked, which only its shapes are read from."""
    import jax

    out_flat = jax.tree_util.tree_leaves(call["out_specs"], is_leaf=_is_spec)
    replicated = jax.tree_util.tree_map(lambda _: jax.sharding.PartitionSpec(),
                                        call["out_specs"], is_leaf=_is_spec)
    probe = jax.shard_map(call["f"], mesh=mesh, in_specs=in_specs, out_specs=replicated,
                          axis_names=set(manual), check_vma=False)
    results = jax.tree_util.tree_leaves(jax.eval_shape(probe, *given))
    if len(results) != len(out_flat):
        raise TypeError("out_specs not one spec per result")
    return [len(r.shape) for r in results]


def _in_body_mesh(call: dict, enclosing: dict, path: str,
                  read_body: Callable[..., Program]) -> ShardMap:
    """The shard_map of the user's function given the mesh of the body it is called in
    (``enclosing``: the locals of that body's staging), traced by JAX in that body's
    context (its mesh, its manual axes) and read."""
    import jax
    from jax._src import config
    from jax._src import shard_map as staging

    from .program import read_type

    leaves, tree = jax.tree_util.tree_flatten(call["args"])
    examples = [_typed_example(v) for v in leaves]
    body_mesh = enclosing["inner_mesh"]
    with staging._extend_axis_env(enclosing["mesh"], enclosing["newly_manual_axes"]), \
            jax.sharding.use_abstract_mesh(body_mesh), \
            config._check_vma(bool(enclosing["check_vma"])):
        mapped = jax.shard_map(call["f"], mesh=body_mesh, in_specs=call["in_specs"],
                               out_specs=call["out_specs"], axis_names=set(call["axis_names"]),
                               check_vma=bool(call["check_vma"]))
        closed = jax.make_jaxpr(mapped)(*jax.tree_util.tree_unflatten(tree, examples))
    inputs = tuple(read_type(v.aval, f"operand {i} of {path}")
                   for i, v in enumerate(closed.jaxpr.invars))
    program = read_body(closed.jaxpr, list(closed.consts), inputs, f"{path}.in_body_mesh.")
    found = [eq for eq in program.equations if isinstance(eq, ShardMap)]
    if len(found) != 1 or len(program.equations) != 1:
        raise TypeError("the call given the body's mesh holds other than one shard_map")
    return found[0]


def _typed_example(value: Any) -> Any:
    """A value of a shard_map's body as a ShapeDtypeStruct of its whole type (its mesh and
    its manual axes' type: varying, reduced)."""
    import jax

    aval = jax.typeof(value)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=aval.sharding,
                                weak_type=aval.weak_type,
                                manual_axis_type=aval.manual_axis_type)


def _example(value: Any) -> Any:
    """A value of the call as a ShapeDtypeStruct of its type (its tracer is its trace's)."""
    import jax

    aval = jax.typeof(value)
    sharding = None if aval.sharding.mesh.empty else aval.sharding
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding,
                                weak_type=aval.weak_type)
