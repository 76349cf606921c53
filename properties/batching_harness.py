"""vmap of a jit call, in real JAX and in the spec (the BAT properties' oracle).

A :class:`VmapCase` describes a jit call (a mesh, one sharding per argument and per
result, each result a copy of an argument or a constant) and one or two vmaps around it
(in_axes, out_axes, axis_size, spmd_axis_name) under an optional context mesh.
:func:`run_in_jax` traces ``jax.vmap(jax.jit(f, ...), ...)`` with ``jax.make_jaxpr`` and
reads the shardings of the jit equation it builds; :func:`spec_answer` asks
:func:`shardlaw.spec.vmap_jit` (twice for a nested vmap); :func:`compare_case` says where
the two differ and counts, for every BAT rule, the examples it accepted and refused on
which the two agreed (recorded with :func:`shardlaw.properties.hits.record`; read with
:func:`bat_hit_counts`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.spec import (
    AUTO_LAYOUT, UNSPECIFIED, AxisType, Format, Layout, GSPMDSharding, Mesh, NamedSharding, P, Rejection,
    SingleDeviceSharding, to_hlo, to_jax, tracing, vmap_jit,
)
from shardlaw.spec.transforms.batching import check_vmap_parameters, keeps_sharding

__all__ = ["Vmap", "VmapCase", "JaxAnswer", "SpecAnswer", "run_in_jax", "run_values",
           "spec_answer", "compare_case", "vmap_cases", "SOURCE", "bat_hit_counts", "SIZE"]

# Every unbatched dimension has this size: any split over the 8 devices divides it.
SIZE = 8

# The source under which the examples compared record their rules (shardlaw.properties.hits).
SOURCE = "batching"


def bat_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting hits, rejecting hits) over the examples on which JAX and the
    spec agreed."""
    return hits.counts(SOURCE)


@dataclasses.dataclass(frozen=True)
class Vmap:
    """One vmap: its in_axes (one per argument), out_axes, axis_size and spmd_axis_name."""

    in_axes: tuple[int | None, ...]
    out_axes: int = 0
    axis_size: int | None = None
    spmd_axis_name: Any = None


@dataclasses.dataclass(frozen=True)
class VmapCase:
    """A jit call and the vmaps around it (``outer`` wraps ``inner`` when given).

    ``ranks`` are the ranks of the arguments jit sees; ``sources`` says, per result, which
    argument it doubles (None: a constant of rank ``const_rank``).
    """

    ranks: tuple[int, ...]
    arg_shardings: tuple[Any, ...]
    sources: tuple[int | None, ...]
    result_shardings: tuple[Any, ...]
    inner: Vmap
    batch: int = 4
    outer: Vmap | None = None
    outer_batch: int = 2
    context_mesh: Mesh | None = None
    const_rank: int = 1
    # the specs the arguments' types carry (on the case's Explicit mesh), over the shapes
    # given to the outermost vmap; None: plain arrays
    arg_types: tuple[Any, ...] | None = None
    mesh: Mesh | None = None

    @property
    def result_ranks(self) -> tuple[int, ...]:
        return tuple(self.const_rank if s is None else self.ranks[s] for s in self.sources)


def _shapes(shapes: tuple[tuple[int, ...], ...], axes: tuple[int | None, ...], batch: int,
            ) -> tuple[tuple[int, ...], ...]:
    """Each shape with the batch dimension inserted at its axis (where the axis is valid:
    vmap refuses one out of range whatever the shape)."""
    out = []
    for shape, axis in zip(shapes, axes):
        rank, shape = len(shape), list(shape)
        if axis is not None and -(rank + 1) <= axis <= rank:
            shape.insert(axis % (rank + 1), batch)
        out.append(tuple(shape))
    return tuple(out)


def inner_shapes(case: VmapCase) -> tuple[tuple[int, ...], ...]:
    return _shapes(tuple((SIZE,) * r for r in case.ranks), case.inner.in_axes, case.batch)


def outer_shapes(case: VmapCase) -> tuple[tuple[int, ...], ...]:
    assert case.outer is not None
    inner = inner_shapes(case)
    return _shapes(inner, case.outer.in_axes, case.outer_batch)


def _without(spec: Any, axis: int | None, rank: int) -> Any:
    """A type's spec once vmap maps ``axis`` away (padded to ``rank`` first, as types are)."""
    if spec is None or axis is None:
        return spec
    parts = list(spec.partitions) + [None] * (rank - len(spec))
    return P(*(parts[:axis % rank] + parts[axis % rank + 1:]), unreduced=spec.unreduced,
             reduced=spec.reduced)


def type_specs(case: VmapCase) -> tuple[Any, Any]:
    """(the inner vmap's argument type specs, the outer vmap's), None where none."""
    if case.arg_types is None:
        return None, None
    if case.outer is None:
        return case.arg_types, None
    full = outer_shapes(case)
    inner = tuple(_without(spec, axis, len(shape)) if -len(shape) <= (axis or 0) < len(shape)
                  else spec for spec, axis, shape in zip(case.arg_types, case.outer.in_axes, full))
    return inner, case.arg_types


# --------------------------------------------------------------------------- the spec

@dataclasses.dataclass
class SpecAnswer:
    shardings: tuple[tuple[Any, ...], tuple[Any, ...]] | None
    error: Rejection | None
    trace: list[str]
    kept: int = 0        # BAT-1's outcomes: shardings kept, shardings batched
    rewritten: int = 0


def _keeps(case: VmapCase) -> tuple[int, int]:
    """BAT-1's outcomes on the inner vmap's shardings: (kept, batched)."""
    shapes, axes = inner_shapes(case), case.inner.in_axes
    pairs = list(zip(case.arg_shardings, axes))
    pairs += zip(case.result_shardings, _result_axes(case.sources, axes, shapes))
    kept = sum(keeps_sharding(s, a) for s, a in pairs)
    return kept, len(pairs) - kept


def _result_axes(sources: tuple[int | None, ...], axes: tuple[int | None, ...],
                 shapes: tuple[tuple[int, ...], ...]) -> tuple[int | None, ...]:
    """Where batching puts each result's batch axis: a copy of an argument keeps the
    argument's (counted from the front), a constant is not batched."""
    def axis(s: int | None) -> int | None:
        if s is None or axes[s] is None:
            return None
        rank = len(shapes[s])
        # an axis out of range is vmap's refusal (BAT-0), made before results matter
        return axes[s] % rank if -rank <= axes[s] < rank else axes[s]
    return tuple(map(axis, sources))


def spec_answer(case: VmapCase) -> SpecAnswer:
    """What the spec says vmap's jit equation gets (the outer parameters checked first, as
    the outer vmap runs first)."""
    inner_types, outer_types = type_specs(case)
    with tracing() as trace:
        try:
            if case.outer is not None:  # the outer vmap checks its parameters first
                o = case.outer
                vmap_jit([UNSPECIFIED] * len(case.ranks), [], outer_shapes(case), [],
                         o.in_axes, (), o.axis_size, o.spmd_axis_name, None, outer_types)
            shapes, v = inner_shapes(case), case.inner
            batched = vmap_jit(case.arg_shardings, case.result_shardings, shapes,
                               case.result_ranks, v.in_axes,
                               _result_axes(case.sources, v.in_axes, shapes), v.axis_size,
                               v.spmd_axis_name, case.context_mesh, inner_types)
            if case.outer is not None:
                batched = _outer(case, batched, shapes)
        except Rejection as error:
            return SpecAnswer(None, error, list(trace))
    return SpecAnswer((batched.in_shardings, batched.out_shardings), None, list(trace),
                      *_keeps(case))


def _outer(case: VmapCase, batched: Any, shapes: tuple[tuple[int, ...], ...]) -> Any:
    """The outer vmap applied to the inner vmap's equation."""
    assert case.outer is not None
    full, o, inner_axes = outer_shapes(case), case.outer, case.inner.in_axes
    inner_ranks = tuple(r + (s is not None and inner_axes[s] is not None)
                        for r, s in zip(case.result_ranks, case.sources))
    # a result's rank under the outer vmap: as the inner batched equation gives it
    return vmap_jit(batched.in_shardings, batched.out_shardings, full, inner_ranks,
                    o.in_axes, _result_axes(case.sources, o.in_axes, full), o.axis_size,
                    o.spmd_axis_name, case.context_mesh, type_specs(case)[1])


# --------------------------------------------------------------------------- JAX

@dataclasses.dataclass
class JaxAnswer:
    shardings: tuple[tuple[Any, ...], tuple[Any, ...]] | None
    error: BaseException | None


def _function(case: VmapCase) -> Callable[..., Any]:
    import jax.numpy as jnp

    def f(*args: Any) -> tuple[Any, ...]:
        return tuple(jnp.zeros((SIZE,) * case.const_rank, jnp.float32) if s is None
                     else args[s] * 2 for s in case.sources)
    return f


def _jitted(case: VmapCase, jit: Callable[..., Any]) -> Callable[..., Any]:
    from jax._src.sharding_impls import UNSPECIFIED as JAX_UNSPECIFIED

    def leaf(s: Any) -> Any:
        return JAX_UNSPECIFIED if s is UNSPECIFIED else to_jax(s)
    return jit(_function(case), in_shardings=tuple(map(leaf, case.arg_shardings)),
               out_shardings=tuple(map(leaf, case.result_shardings)))


def _vmapped(case: VmapCase, jit: Callable[..., Any]) -> tuple[Callable[..., Any], tuple]:
    import jax

    v = case.inner
    fun = jax.vmap(_jitted(case, jit), in_axes=v.in_axes, out_axes=v.out_axes,
                   axis_size=v.axis_size, spmd_axis_name=v.spmd_axis_name)
    shapes = inner_shapes(case)
    if case.outer is not None:
        o = case.outer
        fun = jax.vmap(fun, in_axes=o.in_axes, out_axes=o.out_axes, axis_size=o.axis_size,
                       spmd_axis_name=o.spmd_axis_name)
        shapes = outer_shapes(case)
    return fun, shapes


def _context(case: VmapCase) -> Any:
    import jax

    if case.context_mesh is None:
        return contextlib.nullcontext()
    return jax.set_mesh(to_jax(case.context_mesh))


def run_in_jax(case: VmapCase, jit: Callable[..., Any] | None = None) -> JaxAnswer:
    """Trace the vmapped jit call in JAX (``jit``: jax.jit, or a drop-in) and read the
    shardings of its (innermost) jit equation."""
    import jax

    from shardlaw.spec.bridge.batching import jit_equations

    fun, shapes = _vmapped(case, jit or jax.jit)
    types = case.arg_types or (None,) * len(shapes)
    args = [jax.ShapeDtypeStruct(s, "float32", sharding=None if t is None else
                                 to_jax(NamedSharding(case.mesh, t)))
            for s, t in zip(shapes, types)]
    with warnings.catch_warnings(), _context(case):
        warnings.simplefilter("ignore")
        try:
            traced = jax.make_jaxpr(fun)(*args)
        except Exception as error:  # noqa: BLE001 - the outcome compared with the spec
            return JaxAnswer(None, error)
    found = jit_equations(traced)
    return JaxAnswer(found[-1] if found else None, None)


# --------------------------------------------------------------------------- comparing

def _same_error(spec_error: Rejection, jax_error: BaseException) -> bool:
    """The spec refuses with JAX's exception type: the built-in base it declares, and the
    class name where JAX raises a class of its own (DuplicateSpecError)."""
    failure = spec_error.failure
    if not isinstance(jax_error, failure.error_type):
        return False
    return failure.jax_error in {c.__name__ for c in type(jax_error).__mro__}


def compare_case(case: VmapCase, jit: Callable[..., Any] | None = None) -> list[str]:
    """The disagreements between JAX and the spec on ``case`` (empty when they agree)."""
    theirs, mine = run_in_jax(case, jit), spec_answer(case)
    problems: list[str] = []
    if mine.error is None and theirs.error is not None:
        problems.append(f"spec accepts, JAX raised {type(theirs.error).__name__}: "
                        f"{str(theirs.error)[:300]}")
    elif mine.error is not None and theirs.error is None:
        problems.append(f"spec refuses ({mine.error}), JAX accepted: {theirs.shardings}")
    elif mine.error is not None and theirs.error is not None:
        if not _same_error(mine.error, theirs.error):
            problems.append(f"spec refuses as {mine.error.failure.jax_error} ({mine.error}), "
                            f"JAX raised {type(theirs.error).__name__}: {str(theirs.error)[:300]}")
    elif mine.shardings != theirs.shardings:
        problems.append(f"spec says {mine.shardings}, JAX built {theirs.shardings}")
    if not problems:
        _count(mine)
    return problems


def _count(answer: SpecAnswer) -> None:
    """Count the rules the spec applied on an example JAX agreed with. BAT-1 never refuses:
    its two sides are its two outcomes, a sharding kept and a sharding rewritten."""
    refused = answer.error.rule if answer.error is not None else None
    hits.record(SOURCE, "BAT-1", refused=False, count=answer.kept)
    hits.record(SOURCE, "BAT-1", refused=True, count=answer.rewritten)
    for rule_id in dict.fromkeys(answer.trace):
        if not rule_id.startswith("BAT-") or rule_id == "BAT-1":
            continue
        hits.record(SOURCE, rule_id, refused=rule_id == refused)
    if refused is not None and refused.startswith("BAT-") and refused not in answer.trace:
        hits.record(SOURCE, refused, refused=True)


# --------------------------------------------------------------------------- strategies

MESHES = (((2, 4), ("x", "y")), ((8,), ("x",)), ((2, 2, 2), ("x", "y", "z")),
          ((2, 4, 1), ("x", "y", "one")))


@st.composite
def _mesh(draw: Any) -> Mesh:
    sizes, names = draw(st.sampled_from(MESHES))
    kind = draw(st.sampled_from([AxisType.Auto, AxisType.Explicit]))
    order = draw(st.sampled_from(["iota", "reversed"]))
    devices = list(range(8)) if order == "iota" else list(range(7, -1, -1))
    return Mesh(sizes, names, devices, (kind,) * len(names))


@st.composite
def _spec(draw: Any, mesh: Mesh, rank: int) -> P:
    free = list(mesh.axis_names)
    draw(st.randoms()).shuffle(free)
    entries = []
    for _ in range(draw(st.integers(0, rank))):
        take = draw(st.integers(0, min(2, len(free))))
        axes, free = free[:take], free[take:]
        entries.append(None if not axes else axes[0] if take == 1 else tuple(axes))
    if mesh.axis_types[0] is not AxisType.Explicit or not draw(st.integers(0, 3)) == 0:
        return P(*entries)
    # Explicit axes may also be unreduced or reduced: a partial sum, or one already summed.
    unreduced = draw(st.lists(st.sampled_from(free), unique=True)) if free else []
    rest = [a for a in free if a not in unreduced]
    reduced = draw(st.lists(st.sampled_from(rest), unique=True, max_size=1)) if rest else []
    return P(*entries, unreduced=set(unreduced), reduced=set(reduced))


@st.composite
def _sharding(draw: Any, mesh: Mesh, rank: int) -> Any:
    """A jit shardings leaf for a value of rank ``rank``; now and then a Format."""
    leaf = draw(_plain_sharding(mesh, rank))
    if draw(st.integers(0, 9)) < 9:
        return leaf
    plain = None if leaf is UNSPECIFIED else leaf
    concrete = [Layout.default(rank), Layout(tuple(range(rank))[::-1])] if plain else []
    layout = draw(st.sampled_from([None, AUTO_LAYOUT, *concrete]))
    return Format(layout, plain)


@st.composite
def _plain_sharding(draw: Any, mesh: Mesh, rank: int) -> Any:
    kind = draw(st.sampled_from(["named", "named", "named", "unspecified", "single", "gspmd",
                                 "abstract", "foreign"]))
    if kind == "unspecified":
        return UNSPECIFIED
    if kind == "single":
        return SingleDeviceSharding(draw(st.integers(0, 7)))
    if kind == "foreign":  # a GSPMD sharding made on another mesh of the same devices
        other = draw(_mesh())
        return GSPMDSharding(other.devices, to_hlo(NamedSharding(other, draw(_spec(other, rank))),
                                                   rank))
    spec = draw(_spec(mesh, rank))
    if kind == "abstract":
        return NamedSharding(mesh.abstract, spec)
    memory = draw(st.sampled_from([None, None, "pinned_host"]))
    named = NamedSharding(mesh, spec, memory_kind=memory)
    if kind == "gspmd":
        return GSPMDSharding(mesh.devices, to_hlo(named, rank))
    return named


def _axis(rank: int) -> Any:
    """An in_axes entry: mostly in range, sometimes negative, now and then out of range."""
    return st.integers(0, 23).flatmap(
        lambda n: st.integers(-(rank + 1), rank) if n < 20 else
        st.integers(rank + 1, rank + 2) if n == 23 else st.none())


def _spmd(mesh: Mesh) -> Any:
    names = list(mesh.axis_names)
    return st.one_of(st.none(), st.none(), st.sampled_from(names + ["w"]),
                     st.lists(st.sampled_from(names), min_size=1, max_size=2).map(tuple))


@st.composite
def _vmap(draw: Any, mesh: Mesh, ranks: tuple[int, ...], batch: int) -> Vmap:
    axes = tuple(draw(_axis(r)) for r in ranks)
    size = draw(st.integers(0, 13).map(lambda n: batch if n == 12 else batch + 1 if n == 13
                                       else None))
    return Vmap(axes, draw(st.sampled_from([0, -1])), size, draw(_spmd(mesh)))


@st.composite
def vmap_cases(draw: Any, nested: bool | None = None) -> VmapCase:
    """A jit call of 1 to 3 arguments with 1 or 2 results, under one or two vmaps."""
    mesh = draw(_mesh())
    ranks = tuple(draw(st.lists(st.integers(0, 2), min_size=1, max_size=3)))
    sources = tuple(draw(st.lists(st.one_of(st.none(), st.integers(0, len(ranks) - 1)),
                                  min_size=1, max_size=2)))
    const_rank = draw(st.integers(0, 2))
    result_ranks = [const_rank if s is None else ranks[s] for s in sources]
    inner = draw(_vmap(mesh, ranks, 4))
    two = draw(st.booleans()) if nested is None else nested
    outer = draw(_vmap(mesh, tuple(r + (a is not None) for r, a in zip(ranks, inner.in_axes)),
                       2)) if two else None
    case = VmapCase(
        ranks, tuple(draw(_sharding(mesh, r)) for r in ranks), sources,
        tuple(draw(_sharding(mesh, r)) for r in result_ranks), inner,
        batch=4, outer=outer, outer_batch=2,
        context_mesh=draw(st.sampled_from([None, mesh])), const_rank=const_rank, mesh=mesh)
    if mesh.axis_types[0] is not AxisType.Explicit or draw(st.booleans()):
        return case
    shapes = outer_shapes(case) if outer is not None else inner_shapes(case)
    mapped = [a is not None or (outer is not None and outer.in_axes[i] is not None)
              for i, a in enumerate(inner.in_axes)]
    return dataclasses.replace(case, arg_types=tuple(
        draw(_type_spec(mesh, s, m)) for s, m in zip(shapes, mapped)))


@st.composite
def _type_spec(draw: Any, mesh: Mesh, shape: tuple[int, ...], mapped: bool = False) -> Any:
    """The spec of an array's type on an Explicit mesh: each dimension split over unused mesh
    axes whose sizes multiply to a divisor of it (now and then, not at all). Now and then an
    argument some vmap maps has unreduced or reduced axes too, which that vmap refuses to
    read (BAT-10); an unmapped one is not drawn so, as the jit's copy of it would be a
    result vmap broadcasts, whose type vmap_jit is not told."""
    if draw(st.integers(0, 3)) == 0:
        return None
    free = list(mesh.axis_names)
    entries = []
    for size in shape:
        axes: list[str] = []
        for axis in draw(st.permutations(free)):
            if draw(st.booleans()) and size % (mesh.axis_size(axis) * _product(mesh, axes)) == 0:
                axes.append(axis)
        free = [a for a in free if a not in axes]
        entries.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    if not free or not mapped or draw(st.integers(0, 5)) != 0:
        return P(*entries)
    unreduced = draw(st.lists(st.sampled_from(free), unique=True, max_size=1))
    rest = [a for a in free if a not in unreduced]
    reduced = draw(st.lists(st.sampled_from(rest), unique=True, max_size=1)) if rest else []
    return P(*entries, unreduced=set(unreduced), reduced=set(reduced))


def _product(mesh: Mesh, axes: list[str]) -> int:
    out = 1
    for a in axes:
        out *= mesh.axis_size(a)
    return out


def run_values(case: VmapCase, jit: Callable[..., Any] | None = None) -> list[tuple[Any, Any]]:
    """Run the vmapped jit call on real arrays (``jit``: jax.jit, or a drop-in): each
    result's value (a numpy array) and sharding (a spec value)."""
    import jax
    import numpy as np

    from shardlaw.spec import from_jax

    fun, shapes = _vmapped(case, jit or jax.jit)
    args = [np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) for s in shapes]
    with warnings.catch_warnings(), _context(case):
        warnings.simplefilter("ignore")
        results = jax.tree_util.tree_leaves(fun(*args))
    return [(np.asarray(r), from_jax(r.sharding)) for r in results]
