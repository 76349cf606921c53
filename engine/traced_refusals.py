"""Refusals JAX makes while it traces a jit's body, named by the rule (issue 23, item 8).

A with_sharding_constraint, device_put, reshard, inner jit or shard_map inside the jitted
function, or a collective inside a shard_map's body, refuses its operands while JAX traces
the function: the error comes out of JAX's own code, from under the user's. The engine
locates the call JAX was tracing from the frames the error passed through
(:func:`~.internals.traced_calls`): the body it is in and the equation it would have been,
``body[3]``, ``body[0].shard_map.body[2]``, as :mod:`.program_body` numbers the traced body.
It then asks its own implementation of the rule that governs that call, on the call's own
operands and shardings, whether it refuses them:

* a constraint: WSC-6, WSC-4, WSC-5, leaf by leaf, at ``body[k]``;
* a device_put or a reshard to a sharding: ARG-4, at ``body[k]``;
* an inner jit: FIT-1, at ``body[k].jit.in_shardings[i]`` (before its body is traced) or
  ``body[k].jit.out_shardings[i]`` (after);
* a shard_map: SMAP-3 at ``body[k].shard_map.in_specs[i]`` (``out_specs[i]``), then
  SMAP-7 and SMAP-8 for its operands;
* a collective inside a shard_map's body: SMAP-13 for an axis that is not manual.

Where the rule refuses, JAX's error is an instance of the class the rule says and, for a
constraint, JAX raised it from the check that rule mirrors (its rank check, its axes check,
not its layout check), the user
gets an exception of JAX's very class whose message is JAX's followed by ``[RULE] at PATH:
explanation``. Where the rule does not refuse, JAX refused for a reason the engine does not
model, or the call could not be located (under a vmap or a grad inside the body, inside a
scan), JAX's error stands unchanged. Nothing here runs unless JAX has already refused: an
accepted call, and every cache hit, never come here.
"""

from __future__ import annotations

import math
from typing import Any

from jax.sharding import AxisType, NamedSharding, PartitionSpec, Sharding

from . import internals
from .rules import EngineRejection, reject, rejection_class
from .shardings import UNCONSTRAINED, shape_misfit, check_fits, spec_entries

__all__ = ["name_trace_refusal"]


def name_trace_refusal(error: BaseException) -> BaseException:
    """``error``, which JAX raised while tracing a jit's body, as the rule that refuses it
    (JAX's class and words, then the rule), or ``error`` itself where no rule can say."""
    if isinstance(error, EngineRejection) or error.__traceback__ is None:
        return error
    try:
        located = internals.traced_calls(error.__traceback__)
        ours = _decide(located) if located is not None else None
    except Exception:  # noqa: BLE001 - naming the rule must never hide JAX's refusal
        return error
    if ours is None or not isinstance(error, ours.error_type):
        return error
    # a constraint's checks are told apart by the JAX function that refused, too
    if ours.rule in _RAISED_IN and not _RAISED_IN[ours.rule] & located.raised_in:
        return error
    words = str(error).strip() or None
    named = rejection_class(type(error))(ours.rule, ours.message, ours.path, type(error).__name__,
                                         words, "trace")
    return named


# The functions of JAX that make a constraint's checks, by the rule each is.
_RAISED_IN = {"WSC-6": frozenset({"get_unconstrained_dims"}),
              "WSC-4": frozenset({"pjit_check_aval_sharding"}),
              "WSC-5": frozenset({"check_shardings_are_auto", "assert_shardings_equal"})}


def _decide(located: "internals.TracedCall") -> EngineRejection | None:
    """The engine's rejection of the located call, or None where its rule accepts it."""
    checks = {"constraint": _constraint, "device_put": _device_put, "reshard": _reshard,
              "jit_in": _jit_in, "jit_out": _jit_out, "shard_map_specs": _shard_map_specs,
              "shard_map_args": _shard_map_args, "collective": _collective}
    check = checks.get(located.kind)
    if check is None:
        return None
    try:
        check(located)
    except EngineRejection as rejection:
        return rejection
    return None


def _path(located: "internals.TracedCall", offset: int = 0) -> str:
    return f"{located.prefix}body[{located.index + offset}]"


# --------------------------------------------------------------------------- constraints

def _constraint(located: "internals.TracedCall") -> None:
    """WSC-6, WSC-4 and WSC-5 for each leaf, as with_sharding_constraint checks them: every
    leaf's dimensions left to the compiler, then every leaf's rank, then every leaf's axes.
    Each leaf becomes an equation of its own, numbered from the call's."""
    found = located.frame
    shardings, avals = found.get("shardings_flat"), found.get("x_avals_flat")
    if shardings is None or avals is None:
        return
    pairs = list(zip(shardings, avals))
    for i, (s, _) in enumerate(pairs):
        if isinstance(s, NamedSharding) and (s.spec.unreduced or s.spec.reduced):
            raise reject("WSC-6", ValueError,
                         f"the sharding of {_path(located, i)}, {s}, has unreduced or reduced "
                         "mesh axes; a constraint's spec is read entry by entry, which such a "
                         "spec refuses. Constrain with a spec without unreduced= or reduced= "
                         "axes.", _path(located, i), stage="trace")
    for i, (s, aval) in enumerate(pairs):
        misfit = _rank_misfit(s, tuple(aval.shape))
        if misfit is not None:
            error_type, message = misfit
            raise reject("WSC-4", error_type, f"the constraint at {_path(located, i)}: "
                         f"{message}", _path(located, i), stage="trace")
    context = found.get("context_mesh")
    for i, (s, aval) in enumerate(pairs):
        _check_constraint_axes(s, aval, context, _path(located, i))


def _rank_misfit(sharding: Any, shape: tuple[int, ...]) -> tuple | None:
    """The rank (or the tiles' rank) ``shape`` lacks for ``sharding``, as (class, words);
    a constraint's dimensions need not divide."""
    if not isinstance(sharding, Sharding):
        return None
    misfit = shape_misfit(sharding, shape, "its sharding")
    if misfit is None or misfit[2] == "IndivisibleError":
        return None
    return misfit[0], misfit[1]


def _axes_named(spec: PartitionSpec) -> list[str]:
    return [name for entry in spec_entries(spec)
            for name in ((entry,) if isinstance(entry, str) else
                         entry if isinstance(entry, tuple) else ())]


def _check_constraint_axes(s: Any, aval: Any, context: Any, path: str) -> None:
    """WSC-5: a NamedSharding constraint names Auto axes only; under a context mesh whose
    axes are all Explicit it asserts the value's split instead."""
    if not isinstance(s, NamedSharding):
        return
    if context is not None and not getattr(context, "empty", True) and all(
            t == AxisType.Explicit for t in context.axis_types):
        ndim = len(aval.shape)
        want = tuple(spec_entries(s.spec)) + (None,) * (ndim - len(s.spec))
        typed = getattr(getattr(aval, "sharding", None), "spec", PartitionSpec())
        have = tuple(spec_entries(typed)) + (None,) * (ndim - len(typed))
        for w, h in zip(want, have):
            if w is not UNCONSTRAINED and _entry(w) != _entry(h):
                raise reject("WSC-5", AssertionError,
                             f"under a context mesh whose axes are all Explicit the constraint "
                             f"on {path} only checks the value's sharding: the value is split "
                             f"{have}, the sharding asks {want}. Use jax.sharding.reshard to "
                             "change the sharding of the value.", path, stage="trace")
        return
    types = dict(zip(s.mesh.axis_names, s.mesh.axis_types))
    others = tuple(a for a in _axes_named(s.spec) if types.get(a) != AxisType.Auto)
    if others:
        raise reject("WSC-5", ValueError,
                     f"the sharding of {path}, {s}, names mesh axes {others} that are not "
                     "Auto; with_sharding_constraint constrains Auto axes only. Use "
                     "jax.sharding.reshard to move a value over Explicit axes.", path,
                     stage="trace")


def _entry(entry: Any) -> tuple:
    """A spec entry as the tuple of axes it names."""
    if entry is None or entry is UNCONSTRAINED:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


# --------------------------------------------------------------------------- placing

def _device_put(located: "internals.TracedCall") -> None:
    """ARG-4 for each value device_put places on a sharding (one equation for all)."""
    found = located.frame
    avals, targets = found.get("x_avals"), found.get("device_flat")
    if avals is None or targets is None:
        return
    for aval, target in zip(avals, targets):
        if isinstance(target, Sharding):
            _check_placed(target, tuple(aval.shape), _path(located))


def _reshard(located: "internals.TracedCall") -> None:
    """ARG-4 for the value reshard is placing (an equation per value, bound in order)."""
    found = located.frame
    aval, s = found.get("x_aval"), found.get("ds")
    if aval is None or s is None:
        return
    # over an abstract mesh: its axes' sizes and types divide alike
    _check_placed(s, tuple(aval.shape), _path(located))


def _check_placed(s: Any, shape: tuple[int, ...], path: str) -> None:
    """ARG-4: a placed value has the rank its sharding needs and divides into its shards;
    a value typed over Explicit axes is divided by those axes only."""
    explicit = _explicit_sizes(s)
    if explicit:
        for dim, entry in enumerate(spec_entries(s.spec)):
            if dim >= len(shape) and any(n in explicit for n in _entry(entry)):
                raise _placed(AssertionError, shape, s, "its spec names an Explicit mesh axis "
                              "past the value's rank", path)
        misfit = _rank_misfit(s, shape)
        if misfit is not None:
            raise _placed(misfit[0], shape, s, misfit[1], path)
        for dim, (entry, size) in enumerate(zip(spec_entries(s.spec), shape)):
            ways = math.prod(explicit.get(n, 1) for n in _entry(entry))
            if size % ways:
                raise _placed(ValueError, shape, s, f"dimension {dim} of size {size} is split "
                              f"{ways} ways over Explicit mesh axes", path)
        return
    misfit = shape_misfit(s, shape, "its sharding")
    if misfit is not None:
        raise _placed(misfit[0], shape, s, misfit[1], path)


def _explicit_sizes(s: Any) -> dict[str, int]:
    if not isinstance(s, NamedSharding):
        return {}
    mesh = s.mesh
    return {n: k for n, k, t in zip(mesh.axis_names, mesh.axis_sizes, mesh.axis_types)
            if t == AxisType.Explicit}


def _placed(error_type: type, shape: tuple, s: Any, why: str, path: str) -> EngineRejection:
    why = why if why.startswith("a value of shape") else (
        f"a value of shape {shape} does not fit {s}: {why}")
    return reject("ARG-4", error_type, f"placed at {path}, {why}", path, stage="trace")


# --------------------------------------------------------------------------- inner jits

def _jit_in(located: "internals.TracedCall") -> None:
    """FIT-1 for each of an inner jit's in_shardings, before its body is traced."""
    found = located.frame
    _fits(found.get("in_shardings_flat"), found.get("in_avals"), located, "in_shardings")


def _jit_out(located: "internals.TracedCall") -> None:
    """FIT-1 for each of an inner jit's out_shardings, once its body is traced."""
    found = located.frame
    _fits(found.get("out_shardings_flat"), found.get("out_avals"), located, "out_shardings")


def _fits(shardings: Any, avals: Any, located: "internals.TracedCall", which: str) -> None:
    if shardings is None or avals is None:
        return
    for i, (s, aval) in enumerate(zip(shardings, avals)):
        if isinstance(s, Sharding) and hasattr(aval, "shape"):
            check_fits(s, tuple(aval.shape), f"{_path(located)}.jit.{which}[{i}]")


# --------------------------------------------------------------------------- shard_maps

def _shard_map_specs(located: "internals.TracedCall") -> None:
    """SMAP-3: a spec names manual axes only (an axis the mesh lacks, one left automatic
    and UNCONSTRAINED alike); numbered per operand where the specs are one per operand."""
    found = located.frame
    specs, manual, kind = found.get("specs"), found.get("manual_axes"), found.get("error_type")
    if manual is None or kind is None:
        return
    which = "in_specs" if getattr(kind, "name", "") == "input" else "out_specs"
    flat = [specs] if isinstance(specs, PartitionSpec) else (
        list(specs) if isinstance(specs, (tuple, list))
        and all(isinstance(p, PartitionSpec) for p in specs) else None)
    if flat is None:
        return
    for i, spec in enumerate(flat):
        for entry in spec_entries(spec):
            for name in ((entry,) if not isinstance(entry, tuple) else entry):
                if name is not None and name not in manual:
                    path = f"{_path(located)}.shard_map.{which}[{i}]"
                    raise reject("SMAP-3", ValueError,
                                 f"{which}[{i}] is {spec}, which names {name!r}; a spec names "
                                 f"manual axes only ({tuple(sorted(manual))})", path,
                                 stage="trace")


def _shard_map_args(located: "internals.TracedCall") -> None:
    """SMAP-7 for every operand, then SMAP-8 for every operand."""
    found = located.frame
    mesh, specs, xs = found.get("mesh"), found.get("in_specs_flat"), found.get("xs")
    if mesh is None or specs is None or xs is None:
        return
    shapes = [tuple(internals.shape_of(x)) for x in xs]
    at = [f"{_path(located)}.shard_map.in_specs[{i}]" for i in range(len(shapes))]
    for i, (spec, shape) in enumerate(zip(specs, shapes)):
        if isinstance(spec, PartitionSpec) and len(spec) > len(shape):
            raise reject("SMAP-7", ValueError,
                         f"in_specs[{i}] is {spec}, longer than the rank {len(shape)} of "
                         f"operand {i} (shape {shape})", at[i], stage="trace")
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    for i, (spec, shape) in enumerate(zip(specs, shapes)):
        if not isinstance(spec, PartitionSpec):
            continue
        for dim, (entry, size) in enumerate(zip(spec_entries(spec), shape)):
            ways = math.prod(sizes[n] for n in _entry(entry))
            if size % ways:
                raise reject("SMAP-8", ValueError,
                             f"in_specs[{i}] is {spec}: dimension {dim} of operand {i} has "
                             f"size {size}, which its axes split {ways} ways; {size} is not "
                             f"a multiple of {ways}", at[i], stage="trace")


def _collective(located: "internals.TracedCall") -> None:
    """SMAP-13: a collective names manual axes of the shard_maps it is inside (NameError;
    AssertionError under check_vma for a name that is no axis of the mesh)."""
    found, inside = located.frame, located.shard_map
    if inside is None:
        return
    named = found.get("axis_name")
    axes = (named,) if not isinstance(named, (tuple, list)) else tuple(named)
    mesh, manual, check_vma = inside
    for name in axes:
        if name not in manual:
            unknown = check_vma and name not in mesh.axis_names
            raise reject("SMAP-13", AssertionError if unknown else NameError,
                         f"a collective over {axes} names {name!r}, which is not a manual "
                         f"axis; collectives run over the manual axes {tuple(sorted(manual))}",
                         _path(located), stage="trace")
