"""shard_map calls drawn at random, and their comparison with real JAX (SMAP rules).

:func:`smap_calls` draws whole shard_map descriptions over the 8 CPU devices: meshes of
shapes 8, 2x4, 4x2, 2x2x2 and 1x8 with their axis names and device order permuted, manual
axes (all, some, or not a set), arguments in small pytrees, specs that mostly fit (and
often do not: unknown or automatic axes, repeats, too long, indivisible, trees that do not
match), and results that return an argument, summed or not. :func:`compare_shard_map`
runs one through :func:`shardlaw.spec.transforms.shardmap.check_shard_map` and through ``jax.jit`` of
``jax.shard_map`` and lists the disagreements; :func:`count_hit` records, per rule, how
often JAX was seen accepting and refusing where the rule decided (with
:func:`shardlaw.properties.hits.record`; read with :func:`smap_hit_counts`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.spec.core.rules import Rejection, tracing
from shardlaw.spec.transforms.shardmap import INFER, Returned, Shaped, check_shard_map
from shardlaw.spec.bridge.shardmap import shard_map_in_jax
from shardlaw.spec.core.values import AbstractMesh, AxisType, Mesh, PartitionSpec as P

__all__ = ["SmapCall", "smap_meshes", "smap_calls", "compare_shard_map", "SOURCE",
           "count_hit", "smap_hit_counts"]

# The source under which the calls compared record their rules (shardlaw.properties.hits).
SOURCE = "shardmap"

SHAPES = [(8,), (2, 4), (4, 2), (2, 2, 2), (1, 8)]


def count_hit(rule_id: str, accepted: bool) -> None:
    """JAX was seen on the accepting (or refusing) side where rule ``rule_id`` decided."""
    hits.record(SOURCE, rule_id, refused=not accepted)


def smap_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepted, rejected): how often JAX was seen on each side where the rule
    decided."""
    return hits.counts(SOURCE)


@dataclasses.dataclass(frozen=True)
class SmapCall:
    """One drawn shard_map: the arguments of check_shard_map."""

    mesh: Mesh | AbstractMesh
    in_specs: Any
    out_specs: Any
    operands: tuple
    results: Any
    manual_axes: Any
    check_vma: bool


def _rarely(draw: Any, n: int) -> bool:
    """True one draw in ``n`` (shrinking towards False, the common case)."""
    return draw(st.sampled_from([False] * (n - 1) + [True]))


@st.composite
def smap_meshes(draw: Any, explicit: bool = False) -> Mesh:
    """A mesh over the 8 devices: a shape, its axis names in some order, the devices in some
    order (the identity half the time); with ``explicit``, some or all axes Explicit one
    time in two."""
    shape = draw(st.sampled_from(SHAPES))
    names = draw(st.permutations(["x", "y", "z"][:len(shape)]))
    ids = list(range(8)) if draw(st.booleans()) else draw(st.permutations(range(8)))
    kind = draw(st.sampled_from(["auto", "explicit", "mixed"] if explicit else ["auto"]))
    types = [AxisType.Auto] * len(shape)
    if kind == "explicit" or (kind == "mixed" and len(shape) == 1):
        types = [AxisType.Explicit] * len(shape)
    elif kind == "mixed":
        types = [draw(st.sampled_from([AxisType.Auto, AxisType.Explicit])) for _ in shape]
    return Mesh(shape, tuple(names), ids, tuple(types))


def _fits(mesh: Mesh, spec: Any, shape: tuple, explicit: frozenset) -> bool:
    """Whether ``spec`` is the spec of a type: Explicit axes, each once, splitting evenly."""
    if spec is None or spec.unreduced or spec.reduced or len(spec) > len(shape):
        return False
    names = [n for e in spec for n in (() if e is None else e if isinstance(e, tuple) else (e,))]
    if len(set(names)) != len(names) or not set(names) <= explicit:
        return False
    return all(size % math.prod(mesh.axis_size(n) for n in (
        () if e is None else e if isinstance(e, tuple) else (e,))) == 0
        for size, e in zip(shape, spec))


@st.composite
def _type_spec(draw: Any, mesh: Mesh, spec: Any, shape: tuple) -> Any:
    """The spec an argument's type carries over the mesh's Explicit axes: often its in spec
    (which every-axis-manual Explicit meshes require), else drawn, else none."""
    explicit = frozenset(n for n, t in zip(mesh.axis_names, mesh.axis_types)
                         if t is AxisType.Explicit)
    if not explicit:
        return None
    if _fits(mesh, spec, shape, explicit) and draw(st.integers(0, 2)):
        return spec
    entries, free = [], sorted(explicit)
    for size in shape:
        pool = [n for n in free if size % mesh.axis_size(n) == 0]
        name = draw(st.sampled_from([None, *pool])) if pool else None
        if name is not None:
            free.remove(name)
        entries.append(name)
    return P(*entries) if draw(st.integers(0, 3)) else None


@st.composite
def _manual(draw: Any, mesh: Mesh) -> Any:
    kind = draw(st.sampled_from(["all"] * 9 + ["some"] * 9 + ["list", "unknown"]))
    if kind == "all":
        return draw(st.sampled_from([set(), frozenset(mesh.axis_names)]))
    some = draw(st.sets(st.sampled_from(mesh.axis_names), min_size=1))
    if kind == "list":
        return sorted(some)
    return some | {"q"} if kind == "unknown" else some


@st.composite
def _entry_names(draw: Any, mesh: Mesh, manual: frozenset, used: set) -> Any:
    """An entry of a spec: mostly manual axes not used yet, sometimes any name or a repeat."""
    pick = draw(st.sampled_from(range(20)))
    pool = (sorted(manual - used) if pick < 15 else sorted(used) if pick < 17
            else list(mesh.axis_names) + ["q"])
    if not pool or draw(st.integers(0, 2)) == 0:
        return None
    names = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True))
    used.update(names)
    return names[0] if len(names) == 1 else tuple(names)


@st.composite
def _spec_and_shape(draw: Any, mesh: Mesh, manual: frozenset) -> tuple[P, tuple]:
    rank = draw(st.integers(0, 3))
    used: set = set()
    entries = [draw(_entry_names(mesh, manual, used)) for _ in range(draw(st.integers(0, rank)))]
    if _rarely(draw, 15):
        entries.append(None)                          # one entry too many
    shape = []
    for i in range(rank):
        names = entries[i] if i < len(entries) else None
        names = () if names is None else names if isinstance(names, tuple) else (names,)
        ways = 1
        for n in names:
            ways *= mesh.axis_size(n) if n in mesh.axis_names else 1
        off = draw(st.integers(1, ways - 1)) if ways > 1 and _rarely(draw, 10) else 0
        shape.append(ways * draw(st.sampled_from([1, 1, 2])) + off)
    free = [a for a in mesh.axis_names if a not in used]
    if free and _rarely(draw, 25):
        return P(*entries, unreduced={draw(st.sampled_from(free))}), tuple(shape)
    return P(*entries), tuple(shape)


def _as_out_spec(spec: P, summed: tuple, rank: int) -> P:
    """The out spec that gives back what the in spec split, less the axes summed over."""
    entries = []
    for entry in list(spec)[:rank]:
        names = () if entry is None else entry if isinstance(entry, tuple) else (entry,)
        kept = tuple(n for n in names if n not in summed)
        entries.append(kept[0] if len(kept) == 1 else kept or None)
    return P(*entries)


@st.composite
def _results(draw: Any, mesh: Mesh, manual: frozenset, leaves: list) -> tuple[list, list]:
    results, outs = [], []
    for _ in range(draw(st.integers(1, 2))):
        k = draw(st.integers(0, len(leaves) - 1))
        spec, shape = leaves[k]
        pool = sorted(manual) if not _rarely(draw, 8) else list(mesh.axis_names) + ["q"]
        # An argument passed whole is a constant, which psum multiplies without a collective.
        summed = () if spec is None else tuple(draw(st.lists(st.sampled_from(pool), max_size=2)))
        results.append(Returned(k, summed))
        made = _as_out_spec(spec if spec is not None else P(), summed, len(shape))
        outs.append(made if not _rarely(draw, 5) else P(*draw(
            st.lists(st.sampled_from([None, *mesh.axis_names]), max_size=len(shape) + 1))))
    return results, outs


def _tree(draw: Any, flat: list, groups: list[int], kind: str) -> Any:
    """The flat specs arranged as ``kind`` says: per leaf, per argument, one for all, or wrong."""
    if kind == "one":
        return flat[0]
    per_arg, i = [], 0
    for n in groups:
        per_arg.append(flat[i] if n == 0 else tuple(flat[i:i + n]) if n > 1 else flat[i])
        i += max(n, 1)
    if kind == "list":
        return list(per_arg)
    if kind == "short":
        return tuple(per_arg[:-1])
    return tuple(per_arg)


@st.composite
def smap_calls(draw: Any) -> SmapCall:
    mesh = draw(smap_meshes(explicit=True))
    manual_given = draw(_manual(mesh))
    manual = frozenset(a for a in manual_given if a in mesh.axis_names) or frozenset(mesh.axis_names)
    groups = draw(st.lists(st.sampled_from([1, 1, 2]), min_size=1, max_size=3))
    leaves = [draw(_spec_and_shape(mesh, manual)) for _ in range(sum(groups))]
    static = _rarely(draw, 10)
    if static:
        leaves[-1] = (None, leaves[-1][1])
    operands, i = [], 0
    for n in groups:
        # A value passed whole (a None in spec) is untyped: typed, JAX's paths are unfinished.
        shaped = [Shaped(shape, None if spec is None else draw(_type_spec(mesh, spec, shape)))
                  for spec, shape in leaves[i:i + n]]
        operands.append(shaped[0] if n == 1 else tuple(shaped))
        i += n
    results, outs = draw(_results(mesh, manual, leaves))
    kind = draw(st.sampled_from(["leaf"] * 14 + ["one"] * 4 + ["list", "short"]))
    in_specs = _tree(draw, [s for s, _ in leaves], groups, kind if not static else "leaf")
    if _rarely(draw, 30):
        in_specs = "x" if draw(st.booleans()) else (("x",),) * len(groups)
    elif _rarely(draw, 6 if AxisType.Explicit in mesh.axis_types else 40):
        in_specs = INFER  # left out: read off the arguments' types (Explicit axes)
    out_specs = outs[0] if len(outs) == 1 else tuple(outs)
    if _rarely(draw, 30):
        out_specs = draw(st.sampled_from([None, "x", list(outs), (out_specs,)]))
    if _rarely(draw, 8) and AxisType.Explicit not in mesh.axis_types:
        mesh = mesh.abstract  # jit traces and lowers a shard_map over an AbstractMesh too
    return SmapCall(mesh, in_specs, out_specs, tuple(operands),
                    results[0] if len(results) == 1 else tuple(results), manual_given,
                    draw(st.booleans()))


def _spec_side(call: SmapCall) -> tuple[Any, list[str], BaseException | None]:
    with tracing() as fired:
        try:
            return check_shard_map(call.mesh, call.in_specs, call.out_specs, call.operands,
                                   call.results, call.manual_axes, call.check_vma), fired, None
        except Rejection as rejection:
            return None, fired, rejection


def _same_error(rejection: Rejection, error: BaseException) -> bool:
    failure = rejection.failure
    if not isinstance(error, failure.error_type):
        return False
    return failure.error_type is not Exception or type(error).__name__ == failure.jax_error


def compare_shard_map(call: SmapCall) -> list[str]:
    """The disagreements between the spec and JAX on one call (empty: they agree)."""
    types, fired, rejection = _spec_side(call)
    jax = shard_map_in_jax(call.mesh, call.in_specs, call.out_specs, call.operands,
                           call.results, call.manual_axes, call.check_vma)
    if rejection is not None:
        if jax.error is None:
            return [f"spec refuses ({rejection}) but JAX accepts"]
        stage = "lower" if rejection.raised_in == "lower" else "trace"
        problems = [] if _same_error(rejection, jax.error) else [
            f"spec refuses with {rejection.failure.error_type.__name__} ({rejection}) but JAX "
            f"raises {type(jax.error).__name__}: {str(jax.error)[:300]}"]
        if stage != jax.stage:
            problems.append(f"spec refuses at {stage}, JAX at {jax.stage}")
        if not problems:
            _count(fired, rejection.rule)
        return problems
    if jax.error is not None:
        return [f"spec accepts but JAX raises {type(jax.error).__name__} at {jax.stage}: "
                f"{str(jax.error)[:300]}"]
    problems = _compare_types(types, jax)
    if not problems:
        _count(fired, None)
    return problems


def _count(fired: list[str], refused_by: str | None) -> None:
    for rule_id in dict.fromkeys(fired):
        count_hit(rule_id, rule_id != refused_by)


def _compare_types(types: Any, jax: Any) -> list[str]:
    mapped = [i for i, s in enumerate(types.in_specs) if s is not None]
    pairs = [
        ("in specs", tuple(types.in_specs[i] for i in mapped), jax.in_specs),
        ("inner shapes", tuple(types.inner_shapes[i] for i in mapped), jax.inner_shapes),
        ("inner varying", tuple(types.inner_varying[i] for i in mapped), jax.inner_varying),
        ("out specs", types.out_specs, jax.out_specs),
        ("result shapes", types.result_shapes, jax.result_shapes),
        ("result varying", types.result_varying, jax.result_varying),
        ("out shapes", types.out_shapes, jax.out_shapes),
        ("inner types", tuple(types.inner_types[i] for i in mapped), jax.inner_types),
        ("out types", types.out_types, jax.out_types),
    ]
    return [f"{what}: spec {mine} but JAX {theirs}" for what, mine, theirs in pairs
            if tuple(mine) != tuple(theirs)]

