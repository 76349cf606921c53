"""Programs with shard_maps against real JAX, program for program (the SMAP rules inside
whole programs).

A :class:`MapCase` is a drawn program: one argument placed on the program's mesh (its
axes Auto; one program in three Explicit, all of them or one of two, the shard_map then
mostly making one of two axes manual and the argument mostly split over the other, so its
type and its body's values' are split over an Explicit axis left automatic), maybe
constrained, passed to a ``jax.shard_map`` (its mesh — now and then the same devices in
reverse order —, one in spec and one out spec, the
manual axes ``axis_names``, ``check_vma``), maybe inside an inner ``jax.jit``, whose result
is maybe constrained again. The mapped body chains :class:`Op` steps: the collectives
``psum``, ``pmax``, ``pmin``, ``all_gather``, ``psum_scatter``, ``ppermute``,
``all_to_all``, the cast ``pcast(..., to='varying')``, ``x + axis_index(axis)`` and the
elementwise ``neg``, ``sin`` and ``x * 0.5`` (a constant JAX casts); any step may sit in an
inner jit of its own.

From a case both sides are built. :func:`run_case` traces, lowers, compiles and runs the
real function under ``jax.jit``, recording the first stage that raised, or the results'
shardings, committedness and types, the device assignment, the compiler's placements and
the replica groups of the lowered collectives; and ``describe_program`` of the real
function (JAX's own jaxpr: the per-shard type of every collective as JAX typed it).
:func:`program_of` builds the case's Program as the spec's user would write it, inserting
the varying-axes casts JAX's collectives insert under check_vma. :func:`compare_case` holds
:func:`~shardlaw.spec.explain_program` to JAX: a refusal at the same stage with the same
class (the built Program; the described one too when JAX traced it), or the answer — the
described Program accepted with JAX's result shardings, types and device assignment (its
collectives typed as the SMAP rules type them, else PROG-0 refuses it; and each type the
spec decides in the body — every collective's result and every body input — JAX's, shape
and split over the automatic Explicit axes, :func:`_types_agree`), every
collective's replica groups those of the lowered module, and — where the result stays
placed by the out spec and every body equation is one this harness runs — each device's
shard of the result the one the body gives when run device by device with the spec's
decided groups and ppermute pairs; and the built Program accepted too. Each rule's sides are recorded under ``"programs-shard_map"``.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.properties.program_harness import (
    FACTORS, JaxOutcome, compare_results, jax_class_agrees, type_of, watch_compiler,
    with_choices,
)
from shardlaw.spec import (
    AxisType, Mesh, NamedSharding, P, PartitionSpec, Rejection, explain_program, from_jax,
    to_jax,
)
from shardlaw.spec.program.description import (
    Jit, Opaque, Program, ShardingConstraint, ShardMap, Value, result_types,
)
from shardlaw.spec.program.shardmap import CollectiveDecision, ShardMapDecision
from shardlaw.spec.transforms.shardmap_bodies import (
    collective_shape, collective_split, collective_varying,
)
from shardlaw.spec.transforms.shardmap_types import explicit_types, type_inside

__all__ = ["Op", "MapCase", "program_of", "function_of", "run_case", "compare_case",
           "map_cases", "SOURCE", "map_hit_counts"]

SOURCE = "programs-shard_map"
CLEAR_EVERY = 300
NAMES = ("x", "y")
SHAPES = [(8, 8), (8, 16), (6, 8), (8,), (4, 8, 2)]
KINDS = ("psum", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute", "all_to_all",
         "pcast", "axis_index", "neg", "sin", "half")


def map_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting side, refusing side) over the cases compared so far."""
    return hits.counts(SOURCE)


# --------------------------------------------------------------------------- cases

@dataclasses.dataclass(frozen=True)
class Op:
    """One step of the mapped body: ``kind`` over ``axes``; ``dim`` is all_gather's axis,
    psum_scatter's scatter dimension or all_to_all's split axis, ``dim2`` all_to_all's
    concat axis; ``perm`` ppermute's pairs; ``in_jit``: inside an inner jit of its own."""

    kind: str
    axes: tuple[str, ...] = ()
    dim: int = 0
    dim2: int = 0
    tiled: bool = True
    perm: tuple = ()
    in_jit: bool = False
    # "nested": a jit of a shard_map over the automatic axis ``axes[0]`` (the context's
    # mesh), its in spec splitting dimension 0 over it or not (``tiled``), its out spec
    # too (``dim2``: 1) or not, its body a psum over it (``dim``: 1) or a neg


@dataclasses.dataclass(frozen=True)
class MapCase:
    mesh: Mesh
    argument: Value
    in_spec: PartitionSpec
    out_spec: PartitionSpec
    manual: frozenset[str]
    check_vma: bool
    ops: tuple[Op, ...]
    before: Any = None          # a constraint's sharding on the argument (None: none)
    after: Any = None           # ... on the shard_map's result
    outer_jit: bool = False     # the shard_map inside an inner jax.jit
    map_mesh: Mesh | None = None  # the shard_map's mesh, when not the argument's

    @property
    def shard_map_mesh(self) -> Mesh:
        return self.map_mesh if self.map_mesh is not None else self.mesh


# --------------------------------------------------------------------------- the function

def _nested(op: Op, a: Any, check_vma: bool) -> Any:
    """A jit of a shard_map over the automatic axis ``op.axes[0]``, inside the body."""
    import jax

    axis = op.axes[0]
    spec = jax.sharding.PartitionSpec
    mapped = jax.shard_map(lambda c: jax.lax.psum(c, axis) if op.dim else -c,
                           in_specs=spec(axis) if op.tiled else spec(),
                           out_specs=spec(axis) if op.dim2 else spec(), axis_names={axis},
                           check_vma=check_vma)
    return jax.jit(mapped)(a)


def apply_op(op: Op, a: Any, check_vma: bool = True) -> Any:
    """What one drawn collective or step ``op`` computes on ``a`` in JAX, inside the shard_map."""
    import jax
    import jax.numpy as jnp

    lax, axes = jax.lax, op.axes
    if op.kind == "nested":
        return _nested(op, a, check_vma)
    if op.kind in ("psum", "pmax", "pmin"):
        return getattr(lax, op.kind)(a, axes)
    if op.kind == "all_gather":
        return lax.all_gather(a, axes, axis=op.dim, tiled=op.tiled)
    if op.kind == "psum_scatter":
        return lax.psum_scatter(a, axes, scatter_dimension=op.dim, tiled=op.tiled)
    if op.kind == "ppermute":
        return lax.ppermute(a, axes, perm=op.perm)
    if op.kind == "all_to_all":
        return lax.all_to_all(a, axes, op.dim, op.dim2, tiled=True)
    if op.kind == "pcast":
        return lax.pcast(a, axes, to="varying")
    if op.kind == "axis_index":
        return a + lax.axis_index(axes[0]).astype(a.dtype)
    if op.kind == "half":   # a constant JAX casts to vary as ``a`` does (a literal operand)
        return a * 0.5
    return jnp.negative(a) if op.kind == "neg" else jnp.sin(a)


def function_of(case: MapCase) -> Any:
    """The real function the case describes (not yet jitted)."""
    import jax

    def body(a: Any) -> Any:
        for op in case.ops:
            a = (jax.jit(lambda b, op=op: apply_op(op, b, case.check_vma))(a) if op.in_jit
                 else apply_op(op, a, case.check_vma))
        return a

    mapped = jax.shard_map(body, mesh=to_jax(case.shard_map_mesh),
                           in_specs=to_jax(case.in_spec),
                           out_specs=to_jax(case.out_spec), axis_names=set(case.manual),
                           check_vma=case.check_vma)

    def program(x: Any) -> Any:
        if case.before is not None:
            x = jax.lax.with_sharding_constraint(x, to_jax(case.before))
        y = jax.jit(mapped)(x) if case.outer_jit else mapped(x)
        if case.after is not None:
            y = jax.lax.with_sharding_constraint(y, to_jax(case.after))
        return y

    return program


def argument_of(case: MapCase) -> Any:
    import jax
    import numpy as np

    shape = case.argument.shape
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return jax.device_put(data, to_jax(case.argument.sharding))


# --------------------------------------------------------------------------- the Program

class _Body:
    """A shard_map body's equations as the spec's user writes them (the casts JAX's
    collectives insert under check_vma included)."""

    def __init__(self, case: MapCase, inner_mesh: Any, first: Value) -> None:
        self.case, self.inner_mesh = case, inner_mesh
        self.types, self.equations = [first], []
        self.manual = case.manual or frozenset(case.mesh.axis_names)

    def add(self, eq: Any) -> None:
        self.equations.append(eq)
        self.types.extend(eq.results)

    def typed(self, shape: tuple, dtype: str, varying: frozenset, split: Any = None
              ) -> Value:
        """A body value's type; ``split``: its split over the automatic Explicit axes, one
        entry per dimension (None: unsplit)."""
        varying = varying & frozenset(self.case.mesh.axis_names)
        return Value(shape, dtype, False, self.inner_mesh, varying, spec=_spec_of(split))

    def cast(self, axes: tuple) -> None:
        """pvary of the last value along ``axes`` it does not vary along (as JAX casts)."""
        last = self.types[-1]
        missing = tuple(a for a in self.case.mesh.axis_names + ("q",) if a in axes
                        and a not in last.varying)
        if not self.case.check_vma:
            if all(a in self.manual for a in axes):
                return
            missing = tuple(axes)
        if missing:
            self.add(Opaque((len(self.types) - 1,), (self.typed(
                last.shape, last.dtype, last.varying | frozenset(missing), _split(last)),),
                primitive="pvary", params=(("axes", missing),)))


def _split(value: Value) -> tuple:
    """A value's split over Explicit axes, one entry per dimension (None: unsplit)."""
    entries = list(value.spec or ())
    return tuple(entries + [None] * (len(value.shape) - len(entries)))


def _spec_of(split: Any) -> PartitionSpec | None:
    return P(*split) if split and any(e is not None for e in split) else None


def _collective(body: _Body, primitive: str, axes: tuple, params: tuple) -> None:
    """One collective on the last value, its result typed by the SMAP rules (or left as its
    operand where they refuse it: the spec refuses there first)."""
    last = body.types[-1]
    size = 1
    for a in axes:
        size *= body.case.mesh.shape.get(a, 1)
    try:
        shape = collective_shape(primitive, last.shape, size, {**dict(params), "axes": axes})
        varying = collective_varying(primitive, axes, last.varying, body.case.check_vma)
    except Rejection:
        shape, varying = last.shape, last.varying
    try:   # the split its operand's type keeps (SMAP-24)
        split = collective_split(body.case.mesh, primitive, axes, _split(last), shape)
    except Rejection:
        split = _split(last)[:len(shape)]
    dtype = "int32" if primitive == "axis_index" else last.dtype
    operands = () if primitive == "axis_index" else (len(body.types) - 1,)
    body.add(Opaque(operands, (body.typed(shape, dtype, varying, split),),
                    primitive=primitive, params=params))


def _index_added(body: _Body, axis: str) -> None:
    """``a + axis_index(axis).astype(a.dtype)`` as JAX traces it: the index, its cast to
    ``a``'s dtype, then under check_vma each operand of the sum cast to vary along the axes
    only the other varies along (``a`` first), then the sum."""
    operands = [len(body.types) - 1]
    last = body.types[-1]
    _collective(body, "axis_index", (axis,), (("axis_name", axis),))
    index = body.types[-1]
    if index.dtype != last.dtype:
        body.add(Opaque((len(body.types) - 1,), (body.typed((), last.dtype, index.varying),),
                        primitive="convert_element_type",
                        params=(("new_dtype", last.dtype), ("weak_type", False))))
    operands.append(len(body.types) - 1)
    if body.case.check_vma:
        for k, other in ((0, index), (1, last)):
            value = body.types[operands[k]]
            missing = tuple(a for a in body.case.mesh.axis_names
                            if a in other.varying and a not in value.varying)
            if missing:
                body.add(Opaque((operands[k],), (body.typed(
                    value.shape, value.dtype, value.varying | frozenset(missing),
                    _split(value)),), primitive="pvary", params=(("axes", missing),)))
                operands[k] = len(body.types) - 1
    body.add(Opaque(tuple(operands), (body.typed(
        last.shape, last.dtype, last.varying | index.varying, _split(last)),),
        primitive="add"))


def _op_equations(body: _Body, op: Op) -> None:
    """The equations of one step, appended to ``body``."""
    axes, vma = op.axes, body.case.check_vma
    last = body.types[-1]
    if op.kind in ("psum", "pmax", "pmin"):
        mixed = len({a in last.varying for a in axes}) > 1
        if vma and not (op.kind == "psum" and mixed):   # psum refuses mixed axes first
            body.cast(axes)
        name = "psum_invariant" if (vma and op.kind == "psum") else op.kind
        params = (("axes", axes),) if name == "psum_invariant" else (
            ("axes", axes), ("axis_index_groups", None))
        _collective(body, name, axes, params)
    elif op.kind in ("all_gather", "psum_scatter", "ppermute", "all_to_all"):
        # all_gather, psum_scatter and all_to_all look their axes' size up before they
        # cast (an axis that is not manual: NameError there); psum_scatter reads its
        # operand's varying axes first (mixed: refused as they are)
        # all_to_all checks its split dimension, in range and dividing, before it casts
        known = all(a in body.manual for a in axes)
        mixed = len({a in last.varying for a in axes}) > 1
        splits = op.kind != "all_to_all" or _splits_evenly(op, body, last.shape)
        if vma and (op.kind == "ppermute" or known and splits and not (
                op.kind == "psum_scatter" and mixed)):
            body.cast(axes)
        _collective(body, *_moving(op, body))
    elif op.kind == "pcast":
        body.cast(axes) if not (vma and any(a in last.varying for a in axes)) else \
            body.add(Opaque((len(body.types) - 1,), (last,), primitive="pvary",
                            params=(("axes", axes),)))
    elif op.kind == "nested":
        _nested_equations(body, op)
    elif op.kind == "axis_index":
        _index_added(body, axes[0])
    elif op.kind == "half" and vma and last.varying:
        # the literal 0.5, cast to vary as ``a`` does, then the product
        operand = len(body.types) - 1
        axes_cast = tuple(a for a in body.case.mesh.axis_names if a in last.varying)
        body.add(Opaque((), (body.typed((), last.dtype, last.varying),), primitive="pvary",
                        params=(("axes", axes_cast),)))
        body.add(Opaque((operand, len(body.types) - 1), (last,), primitive="mul"))
    else:
        primitive = "mul" if op.kind == "half" else op.kind
        body.add(Opaque((len(body.types) - 1,), (last,), primitive=primitive))


def _splits_evenly(op: Op, body: _Body, shape: tuple) -> bool:
    """Whether an all_to_all's split dimension lies in its operand's shape and divides
    by the size of its axes (an axis named twice counts twice)."""
    size = 1
    for a in op.axes:
        size *= body.case.mesh.shape.get(a, 1)
    return 0 <= op.dim < len(shape) and shape[op.dim] % size == 0


def _nested_equations(body: _Body, op: Op) -> None:
    """A jit of a shard_map over the automatic axis ``op.axes[0]``: its body's input is the
    operand's shard (varying along that axis too, under check_vma), its result the body's
    put together, varying along what the body's result varies along but that axis."""
    from shardlaw.spec.program.shardmap import Manual

    case, last, axis = body.case, body.types[-1], op.axes[0]
    size = case.mesh.shape[axis]
    manual = body.manual | {axis}
    mesh = Manual(case.mesh, manual, case.check_vma).inner_mesh
    shape = list(last.shape)
    if op.tiled and shape and shape[0] % size == 0:
        shape[0] //= size
    split = frozenset({axis}) if op.tiled and case.check_vma else frozenset()
    # the shard's type keeps the Explicit axes still automatic (SMAP-18)
    kept = type_inside(body.inner_mesh, frozenset({axis}), _spec_of(_split(last)),
                       len(shape))
    inner = _Body(case, mesh, Value(tuple(shape), last.dtype, False, mesh,
                                    last.varying | split, spec=_spec_of(kept)))
    inner.manual = manual
    _op_equations(inner, Op("psum", (axis,)) if op.dim else Op("neg"))
    out = inner.types[-1]
    shape = list(out.shape)
    if op.dim2 and shape:
        shape[0] *= size
    out_spec = P(axis) if op.dim2 else P()
    try:   # the result's type: the out spec's Explicit axes, then the shard's (SMAP-18)
        outside = explicit_types(body.inner_mesh, frozenset({axis}), out.spec, out_spec,
                                 out.shape)[1]
    except Rejection:
        outside = None
    result = body.typed(tuple(shape), out.dtype, out.varying - {axis}, outside)
    shard_map = ShardMap((0,), (result,), body=Program(
        (inner.types[0],), tuple(inner.equations), (len(inner.types) - 1,)),
        mesh=body.inner_mesh, in_specs=(P(axis) if op.tiled else P(),),
        out_specs=(out_spec,), manual_axes={axis},
        check_vma=case.check_vma)
    jit = Jit((len(body.types) - 1,), body=Program((last,), (shard_map,), (1,)),
              name="shard_map")
    body.add(dataclasses.replace(jit, results=result_types(jit, (last,))))


def _moving(op: Op, body: _Body) -> tuple:
    size = 1
    for a in op.axes:
        size *= body.case.mesh.shape.get(a, 1)
    if op.kind == "all_gather":
        return "all_gather", op.axes, (("all_gather_dimension", op.dim), (
            "axis_index_groups", None), ("axis_name", op.axes), ("axis_size", size),
            ("tiled", op.tiled))
    if op.kind == "psum_scatter":
        return "reduce_scatter", op.axes, (("axis_index_groups", None), ("axis_name", op.axes),
                                           ("axis_size", size), ("scatter_dimension", op.dim),
                                           ("tiled", op.tiled))
    if op.kind == "ppermute":
        return "ppermute", op.axes, (("axis_name", op.axes), ("perm", op.perm))
    return "all_to_all", op.axes, (("axis_index_groups", None), ("axis_name", op.axes),
                                   ("concat_axis", op.dim2), ("split_axis", op.dim),
                                   ("tiled", True))


def _body_program(case: MapCase, inner_mesh: Any, first: Value) -> Program:
    body = _Body(case, inner_mesh, first)
    for op in case.ops:
        if not op.in_jit:
            _op_equations(body, op)
            continue
        inner = _Body(case, inner_mesh, body.types[-1])
        _op_equations(inner, op)
        jit = Program((body.types[-1],), tuple(inner.equations), (len(inner.types) - 1,))
        eq = Jit((len(body.types) - 1,), body=jit, name="<lambda>")
        body.add(dataclasses.replace(eq, results=result_types(eq, (body.types[-1],))))
    return Program((first,), tuple(body.equations), (len(body.types) - 1,))


def program_of(case: MapCase) -> Program:
    """The case's Program as its user writes it (the body's types given by the SMAP
    rules where they accept, its operand's where they refuse)."""
    from shardlaw.spec.program.shardmap import Manual
    from shardlaw.spec.transforms.shardmap_specs import manual_axes_of

    arg = case.argument
    try:
        manual = manual_axes_of(case.mesh, set(case.manual))
    except Rejection:
        manual = frozenset(case.mesh.axis_names)
    inner_mesh = Manual(case.mesh, manual, case.check_vma).inner_mesh
    first = _inner_input(case, inner_mesh)
    body = _body_program(case, inner_mesh, first)
    out = body.value_types[body.outputs[0]].shape
    ways = [1] * len(out)
    for d, entry in enumerate(case.out_spec[:len(out)]):
        for name in (entry if isinstance(entry, tuple) else (entry,) if entry else ()):
            ways[d] *= case.mesh.shape.get(name, 1)
    result = Value.typed(tuple(s * w for s, w in zip(out, ways)), arg.dtype)
    shard_map = ShardMap((0,), (result,), body=body, mesh=case.shard_map_mesh,
                         in_specs=(case.in_spec,),
                         out_specs=(case.out_spec,), manual_axes=case.manual,
                         check_vma=case.check_vma)
    equations: list[Any] = []
    if case.before is not None:
        equations.append(ShardingConstraint((0,), sharding=case.before))
    operand = len(equations)
    if case.outer_jit:
        inner = Program((arg.type,), (dataclasses.replace(shard_map, operands=(0,)),), (1,))
        equations.append(Jit((operand,), body=inner, name="shard_map"))
    else:
        equations.append(dataclasses.replace(shard_map, operands=(operand,)))
    if case.after is not None:
        equations.append(ShardingConstraint((len(equations),), sharding=case.after))
    return Program((arg,), tuple(equations), (len(equations),))


def _inner_input(case: MapCase, inner_mesh: Any) -> Value:
    """The body's input: the argument's shard (its type as SMAP-9 gives it where the spec
    fits; the whole argument where it does not: the spec refuses first)."""
    shape = list(case.argument.shape)
    fits = len(case.in_spec) <= len(shape)
    for d, entry in enumerate(case.in_spec[:len(shape)]):
        for name in (entry if isinstance(entry, tuple) else (entry,) if entry else ()):
            size = case.mesh.shape.get(name, 1)
            fits = fits and shape[d] % size == 0
            shape[d] = shape[d] // size if fits else shape[d]
    names = {n for e in case.in_spec for n in (e if isinstance(e, tuple) else (e,)) if n}
    varying = frozenset(names) & frozenset(case.mesh.axis_names) if case.check_vma else ()
    shape = tuple(shape) if fits else case.argument.shape
    manual = frozenset(a for a in inner_mesh.axis_names
                       if inner_mesh.axis_types[inner_mesh.axis_names.index(a)].name == "Manual")
    # its type keeps the argument's split over the Explicit axes left automatic (SMAP-18)
    split = type_inside(case.mesh, manual, case.argument.spec, len(shape))
    return Value(shape, "float32", False, inner_mesh, frozenset(varying),
                 spec=_spec_of(split))


# --------------------------------------------------------------------------- running JAX

@dataclasses.dataclass
class MapOutcome(JaxOutcome):
    """What real ``jax.jit`` did, and the replica groups of the lowered collectives."""

    groups: list = dataclasses.field(default_factory=list)
    blocks: dict | None = None     # device id -> the block of the argument its body sees
    shards: dict | None = None     # device id -> its shard of the result
    result_sharding: Any = None


_GROUPS = re.compile(r"replica_groups = dense<(\[\[[0-9, \[\]]*\]\])>")


def lowered_groups(text: str) -> list:
    """The replica groups of every collective in a lowered module's text, in order."""
    import ast
    return [tuple(tuple(g) for g in ast.literal_eval(m)) for m in _GROUPS.findall(text)]


def run_case(case: MapCase) -> MapOutcome:
    """Trace, lower, compile and run ``jax.jit`` of the case's function."""
    import jax
    import numpy as np
    from shardlaw.spec.bridge.program import describe_program

    outcome = MapOutcome()
    hits.record_jax_calls(1)
    if hits.jax_calls() % CLEAR_EVERY == 0:
        jax.clear_caches()
    arg = argument_of(case)
    jitted = jax.jit(function_of(case))
    stages = [("trace", lambda: jitted.trace(arg)), ("lower", lambda: jitted.trace(arg).lower()),
              ("compile", lambda: jitted.trace(arg).lower().compile()),
              ("call", lambda: jitted(arg))]
    result = None
    with warnings.catch_warnings(), watch_compiler(outcome):
        warnings.simplefilter("ignore")
        for stage, run in stages:
            try:
                result = run()
            except Exception as error:  # noqa: BLE001 - recorded and compared
                outcome.stage, outcome.error = stage, error
                return outcome
            if stage == "trace":
                outcome.described = describe_program(jax.jit(function_of(case)), arg)
            if stage == "lower":
                outcome.groups = lowered_groups(result.as_text())
    outcome.blocks = _blocks(case, arg)
    outcome.shards = {s.device.id: np.asarray(s.data) for s in result.addressable_shards}
    outcome.result_sharding = from_jax(result.sharding)
    outcome.out_shardings = [from_jax(result.sharding)]
    outcome.out_committed = [bool(result._committed)]
    outcome.out_types = [type_of(result)]
    outcome.device_assignment = tuple(d.id for d in result.sharding._device_assignment)
    return outcome


# --------------------------------------------------------------------------- comparing

def _refusals_agree(verdict: Any, outcome: MapOutcome, which: str) -> list[str]:
    if verdict.accepted:
        return [f"JAX refused at {outcome.stage} with {type(outcome.error).__name__}: "
                f"{outcome.error}; the spec accepts the {which} program"]
    if verdict.stage != outcome.stage or not jax_class_agrees(verdict, outcome.error):
        return [f"JAX refused at {outcome.stage} with {type(outcome.error).__name__}: "
                f"{outcome.error}; the spec refuses the {which} program at {verdict.stage} "
                f"with {verdict.jax_error}: {verdict.message}"]
    return []


def _spec_groups(verdict: Any) -> list:
    """The replica groups the spec decides for the collectives that lower to a grouped
    HLO collective (axis_index and ppermute lower otherwise; pvary to nothing)."""
    out = []
    for _, record in verdict.decided:
        if isinstance(record, CollectiveDecision) and record.groups is not None and \
                record.primitive not in ("axis_index", "ppermute"):
            out.append(tuple(tuple(g) for g in record.groups))
    return out


def _nontrivial(groups: list) -> list:
    """The groups of the collectives that join devices (a group of one moves nothing)."""
    return sorted(g for g in groups if any(len(group) > 1 for group in g))


def _equation_at(program: Program, path: str) -> Any:
    """The equation at a verdict's path (``body[0].shard_map.body[2]``)."""
    eq = None
    for part in path.split("."):
        if part.startswith("body["):
            eq = program.equations[int(part[5:-1])]
        else:
            program = eq.body
    return eq


def _split_entries(value: Value) -> tuple:
    entries = list(value.spec or ())
    return tuple(entries + [None] * (len(value.shape) - len(entries)))


def _types_agree(described: Program, verdict: Any) -> list[str]:
    """Each type the spec decides inside a shard_map body is JAX's, shape and split over
    the automatic Explicit axes: every collective's result and every body input."""
    problems = []
    for path, record in verdict.decided:
        if isinstance(record, CollectiveDecision):
            pairs = [(record.result, _equation_at(described, path).results[0], path)]
        elif isinstance(record, ShardMapDecision):
            body = _equation_at(described, path).body
            pairs = [(d, g, f"{path} input {k}") for k, (d, g) in enumerate(
                zip(record.in_types, body.inputs))]
        else:
            continue
        for decided, given, where in pairs:
            if (decided.shape, _split_entries(decided)) != (given.shape,
                                                            _split_entries(given)):
                problems.append(f"type at {where}: spec {decided.shape} split "
                                f"{_split_entries(decided)}, JAX {given.shape} split "
                                f"{_split_entries(given)}")
    return problems


def _accepted_agree(described: Program, built: Any, outcome: MapOutcome) -> list[str]:
    verdict = explain_program(with_choices(described, outcome))
    if not verdict.accepted:
        return [f"JAX accepts; the spec refuses the described program: {verdict.message}"]
    problems = compare_results(verdict, outcome) + _types_agree(described, verdict)
    spec_groups, lowered = _nontrivial(_spec_groups(verdict)), _nontrivial(outcome.groups)
    if spec_groups != lowered:
        problems.append(f"replica groups: spec {spec_groups}, lowered {lowered}")
    if not built.accepted:
        problems.append(f"JAX accepts; the spec refuses the built program: {built.message}")
    return problems + _values_agree(described, verdict, outcome)


def compare_case(case: MapCase) -> list[str]:
    """Every disagreement between the spec and JAX on ``case`` (empty: they agree)."""
    outcome = run_case(case)
    built = explain_program(program_of(case))
    if outcome.error is not None:
        problems = _refusals_agree(built, outcome, "built")
        if outcome.described is not None:
            problems += _refusals_agree(explain_program(outcome.described), outcome,
                                        "described")
    else:
        problems = _accepted_agree(outcome.described, built, outcome)
    if not problems:
        _record(built)
    return problems


def _record(verdict: Any) -> None:
    for rule_id in verdict.trace:
        hits.record(SOURCE, rule_id, refused=not verdict.accepted and rule_id == verdict.rule)


# --------------------------------------------------------------------------- drawing

def _mesh_names(mesh: Mesh) -> list[str]:
    return list(mesh.axis_names)


@st.composite
def _axes(draw: Any, mesh: Mesh, manual: frozenset[str], one: bool = False) -> tuple:
    """Axes a collective names: mostly manual ones, sometimes an automatic one, an unknown
    name or a manual one twice."""
    pool = sorted(manual)
    roll = draw(st.integers(0, 19))
    if roll == 0:
        return ("q",)
    if roll == 1 and set(mesh.axis_names) - manual:
        return (draw(st.sampled_from(sorted(set(mesh.axis_names) - manual))),)
    if roll == 2 and not one:   # an axis named twice (refused when lowered)
        return (draw(st.sampled_from(pool)),) * 2
    if one or len(pool) == 1:
        return (draw(st.sampled_from(pool)),)
    return tuple(draw(st.permutations(pool))[:draw(st.integers(1, len(pool)))])


@st.composite
def _spec(draw: Any, mesh: Mesh, manual: frozenset[str], rank: int,
          repeat: bool = False) -> PartitionSpec:
    """A spec over the manual axes (sometimes an automatic axis, or one entry too many;
    with ``repeat``, now and then one that may name an axis twice: SMAP-12)."""
    free = sorted(manual)
    if draw(st.integers(0, 11)) == 0:
        free = list(mesh.axis_names)
    twice = repeat and draw(st.integers(0, 11)) == 0
    entries: list[Any] = []
    for _ in range(rank + (draw(st.integers(0, 11)) == 0)):
        # a spec that may repeat an axis names one in each of its first two entries
        entry = draw(st.sampled_from(free if twice and len(entries) < 2 else [None, None] + free))
        if entry is not None and not twice:
            free.remove(entry)
        entries.append(entry)
    while entries and entries[-1] is None and draw(st.booleans()):
        entries.pop()
    return P(*entries)


@st.composite
def _op(draw: Any, mesh: Mesh, manual: frozenset[str], rank: int) -> Op:
    automatic = sorted(set(mesh.axis_names) - manual)
    kind = draw(st.sampled_from(KINDS + (("nested",) * 4 if automatic else ())))
    in_jit = draw(st.integers(0, 9)) == 0
    if kind in ("neg", "sin", "half"):
        return Op(kind, in_jit=in_jit)
    if kind == "nested":   # a shard_map inside a jit inside the shard_map
        return Op(kind, (draw(st.sampled_from(automatic)),), draw(st.integers(0, 1)),
                  draw(st.integers(0, 1)), tiled=draw(st.booleans()))
    axes = draw(_axes(mesh, manual, one=kind == "axis_index"))
    dim = draw(st.integers(0, max(rank - 1, 0) + (draw(st.integers(0, 9)) == 0)))
    if kind == "all_to_all":
        dim = min(dim, rank - 1) if rank else 0
        return Op(kind, axes, dim, draw(st.integers(0, max(rank - 1, 0))), in_jit=in_jit)
    if kind == "ppermute":
        size = 1
        for a in axes:
            size *= mesh.shape.get(a, 1)
        targets = draw(st.permutations(range(size)))
        perm = tuple((i, t) for i, t in enumerate(targets))
        if draw(st.integers(0, 9)) == 0:
            perm = perm + ((0, size),) if draw(st.booleans()) else perm + perm[:1]
        return Op(kind, axes, perm=perm, in_jit=in_jit)
    tiled = kind not in ("all_gather", "psum_scatter") or draw(st.integers(0, 3)) > 0
    if kind == "psum_scatter" and not tiled:
        dim = min(dim, max(rank - 1, 0))
    return Op(kind, axes, dim, tiled=tiled, in_jit=in_jit)


@st.composite
def map_cases(draw: Any, repeated_axes: bool = False) -> MapCase:
    """A drawn program: 1 to 8 devices over 1 or 2 mesh axes (Auto, or Explicit: every
    axis or one of two), a shard_map over all or some of them, with or without check_vma,
    a body of 1 to 4 steps; with ``repeated_axes``, an in or out spec now and then names an
    axis twice (the draws are otherwise the same)."""
    # mostly Auto axes; one program in three over Explicit ones (every axis, or one of
    # two), mostly two axes of which the shard_map makes one manual, so the argument's
    # type, and its body's values', are split over an Explicit axis left automatic
    explicit = draw(st.integers(0, 2)) == 0
    n = draw(st.sampled_from([4, 8, 8, 1, 2] if explicit else [1, 2, 4, 8]))
    two = explicit and n >= 4   # over Explicit axes, two axes where the mesh has them
    shape = draw(st.sampled_from([f for f in FACTORS[n] if len(f) == 2 or not two and
                                  len(f) < 2]))
    axis_types = (AxisType.Explicit if explicit else AxisType.Auto,) * len(shape)
    if explicit and len(shape) == 2 and draw(st.integers(0, 2)) == 0:
        axis_types = tuple(draw(st.permutations((AxisType.Explicit, AxisType.Auto))))
    mesh = Mesh.iota(shape, NAMES[:len(shape)], axis_types)
    names = list(mesh.axis_names)
    partial = explicit and len(names) == 2 and draw(st.integers(0, 3)) > 0
    manual = frozenset({draw(st.sampled_from(names))}) if partial else frozenset() if \
        draw(st.booleans()) else frozenset(
            draw(st.permutations(names))[:draw(st.integers(1, len(names)))])
    effective = manual or frozenset(names)
    value_shape = draw(st.sampled_from(SHAPES))
    rank = len(value_shape)
    placed = draw(_spec(mesh, frozenset(names), rank))
    if partial and draw(st.integers(0, 3)) > 0:
        # mostly split over the axis left automatic, somewhere, maybe over the manual one too
        (automatic,) = set(names) - manual
        entries: list[Any] = [None] * rank
        entries[draw(st.integers(0, rank - 1))] = automatic
        free = [d for d in range(rank) if entries[d] is None]
        if free and draw(st.booleans()):
            entries[draw(st.sampled_from(free))] = next(iter(manual))
        placed = P(*entries)
    try:
        argument = Value.placed(value_shape, NamedSharding(mesh, P(*placed[:rank])))
    except Rejection:
        argument = Value.placed(value_shape, NamedSharding(mesh, P()))
    in_spec = draw(_spec(mesh, effective, rank, repeated_axes))
    ops = tuple(draw(_op(mesh, effective, rank)) for _ in range(draw(st.integers(1, 4))))
    out_spec = draw(_spec(mesh, effective, rank, repeated_axes))
    # constraints name Auto axes only (WSC-5): none around a shard_map over Explicit ones
    around = [None, None, None] + ([] if explicit else [NamedSharding(mesh, P(*draw(_spec(
        mesh, frozenset(names), rank))[:rank]))])
    # now and then over the same devices in reverse order (DA-1 refuses it when lowering)
    reverse = n > 1 and draw(st.integers(0, 11)) == 0
    return MapCase(mesh, argument, in_spec, out_spec, manual, draw(st.booleans()), ops,
                   before=draw(st.sampled_from(around)), after=draw(st.sampled_from(around)),
                   outer_jit=draw(st.integers(0, 3)) == 0,
                   map_mesh=Mesh(shape, mesh.axis_names, range(n - 1, -1, -1),
                                 mesh.axis_types) if reverse else None)


# --------------------------------------------------------------------------- values

# How many programs' results were compared device by device (a count for deep runs).
VALUES_COMPARED = [0]


def _blocks(case: MapCase, arg: Any) -> dict:
    """device id -> the block of the argument the body sees there (as the in spec cuts it)."""
    import jax
    import numpy as np

    placed = jax.device_put(np.asarray(arg), jax.sharding.NamedSharding(
        to_jax(case.shard_map_mesh), to_jax(case.in_spec)))
    return {s.device.id: np.asarray(s.data) for s in placed.addressable_shards}


def _shard_map_at(program: Program) -> tuple[str, Any] | None:
    """(path, equation) of the program's shard_map, at the top or inside a top-level jit."""
    for k, eq in enumerate(program.equations):
        if isinstance(eq, ShardMap):
            return f"body[{k}]", eq
        if isinstance(eq, Jit):
            for j, inner in enumerate(eq.body.equations):
                if isinstance(inner, ShardMap):
                    return f"body[{k}].jit.body[{j}]", inner
    return None


def _values_agree(described: Program, verdict: Any, outcome: MapOutcome) -> list[str]:
    """The result each device holds is the one the spec's decided groups and pairs give,
    running the body's equations device by device (where every equation is one this
    harness can run and the result is placed by the out spec; else nothing is said)."""
    import numpy as np

    found = _shard_map_at(described)
    if found is None or outcome.blocks is None:
        return []
    from shardlaw.spec.placement.equivalence import placement_equivalent

    path, eq = found
    out_type = outcome.out_types[0] if outcome.out_types else None
    if out_type is None or not isinstance(eq.mesh, Mesh) or not placement_equivalent(
            outcome.result_sharding, NamedSharding(eq.mesh, eq.out_specs[0]), out_type.shape):
        return []   # the result was placed otherwise after the shard_map
    named = {n for entry in eq.out_specs[0] for n in (
        entry if isinstance(entry, tuple) else (entry,)) if n}
    manual = eq.manual_axes or frozenset(eq.mesh.axis_names)
    if not eq.check_vma and manual - named:
        return []   # unchecked, the copies along an axis the out spec leaves out may differ,
        #             and which one a later resharding reads is XLA's choice
    records = dict(verdict.decided)
    env = {0: dict(outcome.blocks)}
    if not _run_body(eq.body, env, records, f"{path}.shard_map."):
        return []
    expected = env[eq.body.outputs[0]]
    VALUES_COMPARED[0] += 1
    for device, shard in sorted(outcome.shards.items()):
        mine = expected.get(device)
        if mine is None or mine.shape != shard.shape or not np.allclose(mine, shard,
                                                                        rtol=1e-5):
            return [f"values: device {device} holds {shard.tolist()}, the spec's groups and "
                    f"pairs give {None if mine is None else mine.tolist()}"]
    return []


def _run_body(body: Program, env: dict, records: dict, prefix: str) -> bool:
    """Every equation of ``body`` run on every device (env: value number -> device ->
    array); False where one is not runnable here."""
    numbers = body.result_numbers()
    for k, eq in enumerate(body.equations):
        args = [env.get(n) for n in eq.operands]
        if any(a is None for a in args):
            return False
        if isinstance(eq, Jit):
            inner = {i: a for i, a in enumerate(args)}
            if not _run_body(eq.body, inner, records, f"{prefix}body[{k}].jit."):
                return False
            env[numbers[k][0]] = inner[eq.body.outputs[0]]
            continue
        if not isinstance(eq, Opaque):
            return False
        devices = sorted(next(iter(env.values())))
        out = _run_equation(eq, args, devices, records.get(f"{prefix}body[{k}]"))
        if out is None:
            return False
        env[numbers[k][0]] = out
    return True


def _group_of(record: Any, device: int) -> tuple | None:
    for group in record.groups or ():
        if device in group:
            return group
    return None


def _run_equation(eq: Opaque, args: list, devices: list, record: Any) -> dict | None:
    import numpy as np

    prim, params = eq.primitive, dict(eq.params)
    local = {"neg": np.negative, "sin": np.sin, "pvary": lambda x: x,
             "mul": lambda x: x * np.float32(0.5)}
    if prim in local and len(args) == 1:
        return {d: local[prim](args[0][d]) for d in devices}
    if prim == "pvary" and not args:   # the literal 0.5 of x * 0.5, cast
        return {d: np.full(eq.results[0].shape, 0.5, eq.results[0].dtype) for d in devices}
    if prim == "mul" and len(args) == 2:
        return {d: args[0][d] * args[1][d] for d in devices}
    if prim == "convert_element_type":
        return {d: args[0][d].astype(params["new_dtype"]) for d in devices}
    if prim == "add" and len(args) == 2:
        return {d: args[0][d] + args[1][d] for d in devices}
    if prim == "broadcast_in_dim" and params.get("broadcast_dimensions") == ():
        return {d: np.broadcast_to(args[0][d], params["shape"]) for d in devices}
    if record is None or record.groups is None or (prim != "axis_index" and not args):
        return None
    return _run_collective(prim, params, args[0] if args else None, devices, record)


def _run_collective(prim: str, params: dict, x: dict | None, devices: list, record: Any
                    ) -> dict | None:
    import numpy as np

    out = {}
    for d in devices:
        group = _group_of(record, d)
        if group is None:
            return None
        members = [x[m] for m in group] if x is not None else []
        if prim == "axis_index":
            out[d] = np.int32(group.index(d))
        elif prim in ("psum", "psum_invariant"):
            out[d] = sum(members[1:], members[0])
        elif prim in ("pmax", "pmin"):
            out[d] = (np.maximum if prim == "pmax" else np.minimum).reduce(members)
        elif prim == "all_gather":
            dim = params["all_gather_dimension"]
            out[d] = (np.concatenate(members, dim) if params.get("tiled")
                      else np.stack(members, dim))
        elif prim == "ppermute":
            sources = {t: s for s, t in record.pairs or ()}
            out[d] = x[sources[d]] if d in sources else np.zeros_like(x[d])
        else:
            return None   # reduce_scatter, all_to_all: not run here
    return out
