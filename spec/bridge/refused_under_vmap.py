"""A call JAX refuses while tracing it under a ``vmap`` called inside the function.

vmap traces the function it is given on one example's types, each call as it is made: a
jit's body (a ``jnp`` function is one), a loop's body or a cond's branches are traced whole
on the example, a constraint's, a ``device_put``'s or an inner jit's shardings checked
against the example; then the call's batching rule stages the batched equation in the
enclosing body. :func:`under_vmap` describes a call JAX refused there as vmap's batching
would have staged it: the call's equations described on the example's types (as
:mod:`~shardlaw.spec.bridge.refusals` describes any refused call), then batched by the
spec's own rules (:func:`~shardlaw.spec.program.batching_rules.push_batched`), one vmap at
a time, the innermost first, each with its batch size, its ``spmd_axis_name`` and the
Explicit axes its batch is split over, over the values vmap batched as the enclosing body
holds them. ``explain_program`` then refuses the batched equation by the rule JAX's refusal
of the example is (the batch dimension, which the call does not split, leaves the
example's conflict as it was), at the path the batching puts it: ``body[2]`` for a
constraint, ``body[1].jit.body[0]`` for the ``add`` of a ``jnp.add`` (a jit) under vmap.

A ``jax.shard_map`` JAX refused at the call for its specs (SMAP-3, SMAP-7, SMAP-8, checked
against the example) is batched with them kept: its batched specs, the batch entry
inserted, checked against the batched operands, which refuse where the example's do. One
refused after its body (SMAP-7 of an out spec, SMAP-11) was refused as vmap's batching rule
staged it, and is described from that staging, batched already
(:mod:`~shardlaw.spec.bridge.refused_shard_map`).

Where batching gives one equation it is staged in the body as it is; several (an operand
moved to the batch axis first) are staged as one jit of them, ``body[2].jit.body[1]``. A
call in a cond's branch whose predicate vmap batches is placed in the jit the branch
becomes before the ``select_n``, ``body[2].jit.body[1]`` for a constraint after a ``mul``.

JAX also refuses in vmap's batching rule for a call, after the call passed its checks on
the example (:func:`in_batching_rule`): the rule's own checks (a constraint's or an inner
jit's shardings naming the spmd axis, WSC-7, BAT-4, BAT-5; a shard_map's specs, PBAT-1),
or the typing of what the rule stages (the ``select_n`` a cond with a batched predicate
becomes, PROG-8). The call is then batched without its checks kept; one vmap was
batching when JAX refused inside its rule, a jit, cond, scan, while loop or remat, is read
from that primitive's parameters as JAX staged it on the example (:func:`bound_call`).
Where the spec's batching refuses such a call with JAX's class, describe_program raises
that refusal (rule, stage, path), as it does where the spec's vmap of a whole function
refuses; where it does not refuse one JAX refused on the example, or refuses otherwise,
there is no description and JAX's error stands.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
from typing import Any, Callable

from ..core.rules import staged
from ..program.batching_rules import (
    KEPT, PLACES, BatchAxis, BatchedBody, described_path, push_batched,
)
from ..program.description import Jit, Program

__all__ = ["under_vmap", "in_batching_rule", "batched_out_specs", "bound_call_frame",
           "bound_call"]

# a body's next call: (its operands' value numbers, its path) -> the equations added
Next = Callable[[tuple, str], tuple]
_INDEX = re.compile(r"body\[(\d+)\]")


def under_vmap(values: list, make: Next, placed: list[str], enclosing: Any,
               own: bool = False) -> tuple[list, Next]:
    """(``values`` as the enclosing body holds them, a ``make`` staging the call as vmap's
    batching would) where some of ``values`` are batched by a vmap called inside the body;
    else ``values`` and ``make`` as they are (a vmap around the whole body leaves the call
    a value it closes over). ``enclosing``: the body's trace. ``placed``: the refused
    call's paths, which the batching moves to where it stages the refused equation.
    ``own``: the refused call
    is one whose checks JAX made on the example when it was called (a constraint, a
    device_put, an inner jit's in_shardings), batched with them kept
    (:data:`~shardlaw.spec.program.batching_rules.KEPT`)."""
    from jax._src.interpreters import batching

    traces = _vmaps(values, enclosing)
    if not traces:
        return values, make
    held, levels = list(values), []
    types = [_type(v, i) for i, v in enumerate(held)]
    for k, trace in enumerate(traces):   # the innermost first
        dims = []
        for i, v in enumerate(held):
            mapped = isinstance(v, batching.BatchTracer) and v._trace is trace
            dims.append(_dim(v.batch_dim) if mapped else None)
            held[i] = v.val if mapped else v
        around = frozenset(n for t in traces[k + 1:] for n in (t.axis_data.spmd_name or ()))
        levels.append((tuple(dims), _axis(trace.axis_data, around)))

    def staged(numbers: tuple, path: str) -> tuple:
        return _batched(make, numbers, path, types, levels, placed, own)
    return held, staged


def _vmaps(values: list, enclosing: Any) -> list[Any]:
    """The traces of the vmaps called inside the body traced by ``enclosing`` that batch
    ``values``, the innermost first."""
    from jax._src.interpreters import batching

    def inside(trace: Any) -> bool:
        while isinstance(trace, batching.BatchTrace):
            trace = trace.parent_trace
        return trace is enclosing

    found: list[Any] = []
    for v in values:
        while isinstance(v, batching.BatchTracer) and inside(v._trace):
            if all(t is not v._trace for t in found):
                found.append(v._trace)
            v = v.val

    def depth(trace: Any) -> int:
        count, parent = 0, trace.parent_trace
        while isinstance(parent, batching.BatchTrace):
            count, parent = count + 1, parent.parent_trace
        return count
    return sorted(found, key=depth, reverse=True)


def _dim(batch_dim: Any) -> int | None:
    """The dimension vmap batches a value along (None: not batched)."""
    if batch_dim is None or isinstance(batch_dim, int):
        return batch_dim
    raise TypeError(f"a value vmap batches along {batch_dim!r} (not a dimension)")


def _type(value: Any, i: int) -> Any:
    """A value's type as the vmapped function sees it (a batched value's, its example's)."""
    import jax

    from .program import read_type

    return read_type(jax.typeof(value), f"operand {i} of a call under vmap")


def _axis(data: Any, around: frozenset[str]) -> BatchAxis:
    """What JAX's vmap batches over, read from its axis data."""
    names = data.spmd_name
    return BatchAxis(int(data.size), None if names is None else tuple(names), None,
                     outer=around, explicit=data.explicit_mesh_axis)


def _batched(make: Next, numbers: tuple, path: str, types: list, levels: list,
             placed: list[str], own: bool) -> tuple:
    """The call ``make`` describes, over the example's ``types``, batched by each vmap of
    ``levels`` in turn, as equations over the enclosing body's values ``numbers``."""
    prefix, first = path.rsplit("body[", 1)
    start, count = int(first.rstrip("]")), len(numbers)
    before = len(placed)
    body = Program(tuple(types), tuple(make(tuple(range(count)), path)))
    body = dataclasses.replace(body, outputs=tuple(range(count, len(body.value_types))))
    for dims, axis in levels:
        rw = BatchedBody(body, dims, axis, prefix)
        places: dict[str, int] = {}
        tokens = PLACES.set(places), KEPT.set(frozenset(placed[before:] if own else ()))
        try:   # (a refusal of vmap's batching rule for the call: tracing's, as JAX's is)
            for j, eq in enumerate(body.equations):
                where = f"{prefix}body[{start + j}]"
                with staged("trace"):
                    push_batched(rw, eq, where)
                places[where] = start + len(rw.equations) - 1
                for i in range(len(getattr(eq, "branches", ()))):   # (a select's jits)
                    branch = f"{where}.cond.branches[{i}]"
                    if branch in places:
                        places[branch] += start
        finally:
            PLACES.reset(tokens[0])
            KEPT.reset(tokens[1])
        placed[before:] = [_moved(p, places, prefix) for p in placed[before:]]
        body = dataclasses.replace(body, inputs=tuple(rw.types[:count]),
                                   equations=tuple(rw.equations),
                                   outputs=tuple(rw.number[n] for n in body.outputs))
    only = body.equations[0] if len(body.equations) == 1 else None
    if only is not None and all(n < count for n in only.operands):
        return (only.renumbered(tuple(numbers[n] for n in only.operands)),)
    placed[before:] = [_nested(p, prefix, start) for p in placed[before:]]
    return (Jit(tuple(numbers), body=body, name="vmap", checked=False),)


def _moved(path: str, places: dict[str, int], prefix: str) -> str:
    """An equation's path in the body batched (the body at ``prefix``), from its path in
    the body described: each ``body[i]`` after the prefix where the batching put it (a
    path it did not batch: one no refusal meets); a cond's branch that a batched index
    turned into a jit before a ``select_n`` is that jit."""
    if not path.startswith(prefix):
        return path
    # (the batching names a remat's or a custom function's body by its kind and a cond's
    # branch by its number, explain_program each by the jit it is walked as)
    named = {described_path(key): index for key, index in places.items()}
    out, last = [prefix], len(prefix)
    for match in _INDEX.finditer(path, len(prefix)):
        before = path[:match.start()]
        index = named.get(path[:match.end()])
        selected = places.get(f"{before}branches[{match.group(1)}]") \
            if before.endswith("cond.") else None
        if selected is not None:   # the branch's jit, in place of the cond
            out[-1] = f"{out[-1].rpartition('body[')[0]}body[{selected}]"
            last = match.end()
            continue
        if index is None and before.endswith(("while.", "cond.")):
            index = int(match.group(1))   # a while's predicate or body, a cond's branch
        if index is None:
            return "(not placed by the batching)"
        out.append(f"{path[last:match.start()]}body[{index}]")
        last = match.end()
    return "".join(out) + path[last:]


def _nested(path: str, prefix: str, start: int) -> str:
    """A path among the batched equations staged as one jit at ``body[start]``."""
    head = f"{prefix}body["
    if not path.startswith(head):
        return path
    index, _, rest = path[len(head):].partition("]")
    if not index.isdigit():
        return path
    return f"{prefix}body[{start}].jit.body[{int(index) - start}]{rest}"



def in_batching_rule(error: BaseException) -> bool:
    """Whether JAX raised ``error`` in vmap's batching rule for a call, past the checks it
    made of the call on one example: a batching rule's frame (a primitive a vmap batches,
    a shard_map it batches) after the last of the user's frames."""
    import os

    import jax
    from jax._src import shard_map
    from jax._src.interpreters import batching

    ours = os.path.dirname(jax.__file__)
    rules = {(batching.__file__, "process_primitive"), (shard_map.__file__, "_shard_map_batch")}
    inside = False
    for frame, _ in traceback.walk_tb(error.__traceback__):
        code = frame.f_code
        if not code.co_filename.startswith(ours):
            inside = False   # (the user's code: a rule before it batched something else)
        elif (code.co_filename, code.co_name) in rules and \
                isinstance(frame.f_locals.get("self", frame.f_locals.get("trace")),
                           batching.BatchTrace):
            inside = True
    return inside


def batched_out_specs(error: BaseException) -> bool:
    """Whether JAX raised ``error`` batching a shard_map's out specs (vmap's rule for the
    call, after the body: the call's own refusal, not its body's)."""
    from jax._src import shard_map

    last = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        last = frame.f_code
    return last is not None and (last.co_filename, last.co_name) == (
        shard_map.__file__, "_batch_out_specs")


def bound_call_frame(frame: Any, levels: list) -> bool:
    """Whether ``frame`` is the batching, by a vmap called inside the innermost body of
    ``levels`` (the bodies JAX was tracing), of an inner jit, a cond, a scan, a while loop
    or a remat (its primitive), whose body or branches JAX traced on one example before,
    or of a pure_callback or an io_callback (BAT-11, BAT-12) or a generic reduce_window
    (BAT-13)."""
    from jax._src import ad_checkpoint, callback, pjit
    from jax._src.lax import windowed_reductions
    from jax._src.interpreters import batching
    from jax._src.lax.control_flow import conditionals, loops

    local = frame.f_locals
    trace = local.get("self")
    if not levels or not isinstance(trace, batching.BatchTrace) or "tracers" not in local \
            or local.get("p") not in (pjit.jit_p, conditionals.cond_p, loops.scan_p,
                                      loops.while_p, ad_checkpoint.remat_p,
                                      callback.pure_callback_p,
                                      callback.io_callback_p,
                                      windowed_reductions.reduce_window_p):
        return False
    enclosing = levels[-1].trace
    while isinstance(trace, batching.BatchTrace):
        trace = trace.parent_trace
    return trace is enclosing


def bound_call(call: dict, path: str, read_body: Callable[..., Program]) -> Any:
    """The jit, cond, scan, while or remat equation vmap was batching (``call``: the locals of its
    frame), as JAX staged it on the example: its bodies and options read from the
    primitive's parameters, over the example's values numbered from 0."""
    import jax

    primitive, params = call["p"], dict(call["params"])
    examples = [_example(jax.typeof(t)) for t in call["tracers"]]
    closed = jax.make_jaxpr(lambda *xs: primitive.bind(*xs, **params))(*examples)
    types = tuple(_type(t, i) for i, t in enumerate(call["tracers"]))
    program = read_body(closed.jaxpr, list(closed.consts), types, f"{path}.bound.")
    if len(program.equations) != 1 or \
            program.equations[0].operands != tuple(range(len(types))):
        raise TypeError("a batched call not read as one equation over its operands")
    return program.equations[0]


def _example(aval: Any) -> Any:
    """A value of the example as a ShapeDtypeStruct of its type."""
    import jax

    sharding = None if aval.sharding.mesh.empty else aval.sharding
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding,
                                weak_type=aval.weak_type)
