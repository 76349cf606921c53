"""Hypothesis strategies for sequences of jit calls (:class:`~shardlaw.spec.jit.cache.CallSite`).

:func:`call_sequences` draws a short sequence of calls of one or two function objects
through one to three jit wrappers, around one *home* mesh. Each argument slot has a pool of
shardings: one drawn sharding, rewrites of it that keep the placement or nearly do
(:func:`~shardlaw.properties.strategies.near_equivalents`: renamed axes, a trailing None,
an added size-1 axis, the GSPMDSharding of the same HLO, the device order reversed, ...)
and an unrelated one. A call repeats an earlier call (the same arrays again), or draws each
slot afresh: committed on a pool sharding, uncommitted, a numpy array (float32, or float64
that JAX narrows), a Python scalar or a 0-d numpy array, another shape or dtype, a static
value of another type, a keyword argument, under the home mesh or another default device.
Wrappers differ in keep_unused, donation, in_shardings (None, or pool shardings) and
out_shardings. Calls the jit-call semantics reject before lowering are left out (the cache
model does not follow them), and so are calls that would move an argument (a second such
call can crash JAX, notes/jit-facts.md section 9, and moving an uncommitted array runs a
jitted copy of JAX's own that JAX's counters count too).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from shardlaw.spec import AxisType, Mesh, NamedSharding, P, SingleDeviceSharding
from shardlaw.spec.jit.cache_keys import traced_dtype
from shardlaw.spec.jit.cache_sites import CallSite
from shardlaw.spec.jit.call import Arg, Call, JitOptions, Out, Static, flat_arguments
from shardlaw.spec.core.hlo import Tiled
from shardlaw.spec.core.iota import Iota
from shardlaw.spec.jit.pipeline import jit_call

from . import strategies as ST
from .call_strategies import argument_shardings, home_meshes

__all__ = ["call_sequences", "outputs_for"]

STATIC_VALUES = (1, True, 1.0, 2)


def outputs_for(args: tuple, kwargs: dict, static: tuple[int, ...], ignored: frozenset[int]
                ) -> tuple:
    """The results of the harness function: ``x * x`` for every flat dynamic input kept."""
    from shardlaw.spec.core.pytree import leaves_with_paths

    dynamic = tuple(a for i, a in enumerate(args) if i not in static)
    flat = [leaf for _, leaf in leaves_with_paths((dynamic, kwargs))]
    return tuple(Out(a.shape, traced_dtype(a)) for i, a in enumerate(flat) if i not in ignored)


@st.composite
def _slot(draw: Any, home: Any, max_devices: int) -> tuple[tuple[int, ...], list[Any]]:
    """An argument slot: a base shape and a pool of shardings that fit it."""
    base = draw(argument_shardings(home, max_devices))
    shape = draw(ST.shapes_for(base, divisible=True, max_rank=2))
    pool = [base, draw(ST.near_equivalents(base, shape)), draw(ST.near_equivalents(base, shape)),
            draw(argument_shardings(home, max_devices))]
    if isinstance(base, NamedSharding) and isinstance(base.mesh, Mesh):
        # Two rewrites that keep the trace: a trailing None, and the device order reversed.
        mesh = base.mesh
        flipped = Mesh(mesh.axis_sizes, mesh.axis_names, list(reversed(mesh.devices.id_tuple())),
                       mesh.axis_types)
        pool += [NamedSharding(mesh, P(*base.spec.partitions, None)),
                 NamedSharding(flipped, base.spec)]
    pool = [s for s in pool if ST.fits(s, shape) and not _explicit_gspmd(s)]
    return shape, pool or [NamedSharding(home, P())]


def _explicit_axes(sharding: Any) -> bool:
    mesh = getattr(sharding, "mesh", None)
    return mesh is not None and AxisType.Explicit in mesh.axis_types


def _explicit_gspmd(sharding: Any) -> bool:
    """A GSPMDSharding whose tile assignment is written out device by device.

    JAX cannot write it as a Shardy sharding (TypeError when lowered); worse, JAX's cache of
    in_shardings (``pjit._process_in_axis_resources``) returns it for a later, equal iota
    form, so it breaks later sequences too (notes/cache-facts.md).
    """
    hlo = getattr(sharding, "hlo", None)
    return isinstance(hlo, Tiled) and not isinstance(hlo.assignment, Iota)


@st.composite
def _arg(draw: Any, shape: tuple[int, ...], pool: list[Any], max_devices: int) -> Arg:
    kind = draw(st.sampled_from(("committed", "committed", "committed", "committed", "numpy",
                                 "uncommitted", "scalar", "reshaped", "retyped")))
    sharding = draw(st.sampled_from(pool[:1] * 2 + pool))
    if kind == "committed":
        return Arg.committed(shape, sharding)
    if kind == "numpy":
        return Arg.numpy(shape, draw(st.sampled_from(("float32", "float32", "float64"))))
    if kind == "uncommitted":
        return Arg.uncommitted(shape, SingleDeviceSharding(draw(st.sampled_from(
            (0, 0, max_devices - 1)))))
    if kind == "scalar":
        if shape != ():
            return Arg.numpy(shape)
        if draw(st.booleans()):
            return Arg.scalar(draw(st.sampled_from(("float", "float", "int", "bool"))))
        return Arg.numpy((), draw(st.sampled_from(("float32", "bool"))))
    if kind == "reshaped":
        bigger = (shape[0] * 2,) + shape[1:] if shape else (2,)
        if ST.fits(sharding, bigger):
            return Arg.committed(bigger, sharding)
        return Arg.numpy(bigger)
    return Arg.committed(shape, sharding, "int32")


@st.composite
def _variant(draw: Any, arg: Arg, pool: list[Any]) -> Arg:
    """The same value held another way: another pool sharding, numpy or not, weak or not."""
    if arg.kind == "committed":
        return Arg.committed(arg.shape, draw(st.sampled_from(pool)), arg.dtype)
    if arg.kind == "numpy" and arg.shape != ():
        if draw(st.booleans()):
            return Arg.uncommitted(arg.shape, SingleDeviceSharding(0), traced_dtype(arg))
        return Arg.numpy(arg.shape, "float64" if arg.dtype == "float32" else "float32")
    if arg.kind == "uncommitted":
        return Arg.numpy(arg.shape, arg.dtype)
    if arg.kind == "scalar":
        return Arg.numpy((), arg.dtype)
    return Arg.scalar({"bool": "bool", "int32": "int"}.get(arg.dtype, "float"))


@dataclasses.dataclass(frozen=True)
class _Wrapper:
    name: str
    function: str
    options: JitOptions


@st.composite
def _wrapper(draw: Any, name: str, function: str, slots: list, static: tuple[int, ...]
             ) -> _Wrapper:
    how = draw(st.sampled_from(("plain", "plain", "keep_unused", "donate", "in", "in",
                                "in_none", "out")))
    options: dict[str, Any] = {"static_argnums": static}
    if how == "keep_unused":
        options["keep_unused"] = True
    elif how == "donate":
        options["donate_argnums"] = (0,)
    elif how == "in":
        leaves = [None if draw(st.integers(0, 3)) == 0 else draw(st.sampled_from(pool))
                  for _, pool in slots]
        options["in_shardings"] = tuple(leaves)
    elif how == "in_none":
        options["in_shardings"] = None
    elif how == "out":
        options["out_shardings"] = draw(st.sampled_from(slots[0][1]))
    return _Wrapper(name, function, JitOptions(**options))


def _usable(call: Call) -> bool:
    # Under a context mesh, an argument typed over an Explicit mesh makes the function's own
    # operations fail (sharding in types); the jit-call semantics do not model that.
    if call.context_mesh is not None and any(
            _explicit_axes(leaf.sharding) for _, leaf in _flat_paths(call)):
        return False
    verdict = jit_call(call)
    if not verdict.accepted:
        # Calls refused while lowering stay: the entries they leave behind are modelled.
        return verdict.stage == "lower" and verdict.rule != "RES-1"
    # A committed argument that jit moves may crash JAX on its second call (jit-facts §9),
    # and moving an uncommitted one runs a jitted copy program of JAX's own, whose traces
    # and compilations JAX's counters count too (once per process, so not per sequence).
    if verdict.transfers:
        return False
    return not any(leaf.kind == "uncommitted" and leaf.sharding.device_list.id_tuple()
                   != verdict.device_assignment for _, leaf in _flat_paths(call))


def _flat_paths(call: Call) -> list[tuple[str, Arg]]:
    static = set(call.options.static_argnums)
    flat, _ = flat_arguments(call.args, call.kwargs, static, set())
    return flat


@dataclasses.dataclass(frozen=True)
class _Draft:
    """A call before it is checked: the wrapper, the argument slots, the context."""

    wrapper: _Wrapper
    args: tuple
    static: Any
    keyword: bool
    context: Any
    default: int


def _call_of(draft: _Draft, static: tuple[int, ...], ignored: dict, max_devices: int) -> Call:
    args = list(draft.args)
    kwargs: dict[str, Any] = {}
    if draft.keyword and len(args) == 2 and not static:
        kwargs["k"] = args.pop()
    if static:
        args.append(Static(draft.static))
    skip = ignored[draft.wrapper.function]
    outputs = outputs_for(tuple(args), kwargs, static, skip)
    n_flat = len(_flat_paths(Call(args=tuple(args), kwargs=kwargs,
                                  options=JitOptions(static_argnums=static))))
    return Call(args=tuple(args), kwargs=kwargs, outputs=outputs, options=draft.wrapper.options,
                context_mesh=draft.context, uses=tuple(i not in skip for i in range(n_flat)),
                devices=max_devices, default_device=draft.default)


@st.composite
def call_sequences(draw: Any, max_calls: int = 6, max_devices: int = 8) -> list[CallSite]:
    """A sequence of 1 .. ``max_calls`` calls (see the module's description).

    A call repeats an earlier one (one in four), changes one thing about an earlier one
    (half: another wrapper, one argument slot redrawn, the static value, the context), or
    is drawn afresh.
    """
    home = draw(home_meshes(max_devices))
    slots = [draw(_slot(home, max_devices)) for _ in range(draw(st.integers(1, 2)))]
    static = (len(slots),) if draw(st.integers(0, 3)) == 0 else ()
    functions = ["f", "g"][: draw(st.sampled_from((1, 1, 2)))]
    # "g" ignores its second input, when it has one (dead-code elimination, keep_unused).
    ignored = {"f": frozenset(), "g": frozenset({1})}
    wrappers = [draw(_wrapper(f"w{i}", functions[i % len(functions)] if i < 2 else
                              draw(st.sampled_from(functions)), slots, static))
                for i in range(draw(st.sampled_from((1, 2, 2, 3))))]

    def fresh_slot(i: int) -> Arg:
        return draw(_arg(slots[i][0], slots[i][1], max_devices))

    drafts: list[_Draft] = []
    sites: list[CallSite] = []
    for _ in range(draw(st.sampled_from(range(2, max_calls + 1))) if max_calls > 1 else 1):
        how = draw(st.sampled_from(("repeat", "change", "change", "fresh"))) if drafts else "fresh"
        if how == "repeat":
            earlier = draw(st.sampled_from(sites))
            sites.append(CallSite(earlier.call, earlier.function, earlier.wrapper))
            continue
        if how == "change":
            draft = draw(st.sampled_from(drafts))
            what = draw(st.sampled_from(("wrapper", "slot", "slot", "static", "context")))
            if what == "wrapper":
                # Mostly another wrapper of the same function: they share traces.
                same = [w for w in wrappers if w.function == draft.wrapper.function]
                draft = dataclasses.replace(draft, wrapper=draw(st.sampled_from(
                    same if draw(st.integers(0, 3)) else wrappers)))
            elif what == "slot":
                i = draw(st.integers(0, len(slots) - 1))
                args = list(draft.args)
                args[i] = (draw(_variant(args[i], slots[i][1])) if draw(st.booleans())
                           else fresh_slot(i))
                draft = dataclasses.replace(draft, args=tuple(args))
            elif what == "static":
                draft = dataclasses.replace(draft, static=draw(st.sampled_from(STATIC_VALUES)))
            else:
                draft = dataclasses.replace(
                    draft, context=None if draft.context is not None else home,
                    default=draw(st.sampled_from((0, max_devices - 1))))
        else:
            draft = _Draft(draw(st.sampled_from(wrappers)),
                           tuple(fresh_slot(i) for i in range(len(slots))),
                           draw(st.sampled_from(STATIC_VALUES)), draw(st.integers(0, 7)) == 0,
                           home if draw(st.integers(0, 9)) == 0 else None,
                           (max_devices - 1) if draw(st.integers(0, 9)) == 0 else 0)
        call = _call_of(draft, static, ignored, max_devices)
        if _usable(call):
            drafts.append(draft)
            sites.append(CallSite(call, draft.wrapper.function, draft.wrapper.name))
    assume(sites)
    return sites
