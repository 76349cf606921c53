"""Hypothesis strategies for whole jit calls (:class:`~shardlaw.spec.jit.call.Call`).

:func:`calls` draws a call around one *home* mesh over JAX's 8 CPU devices: arguments of
every kind (committed on the home mesh or elsewhere, uncommitted, numpy, scalars, static
values), ``in_shardings``/``out_shardings`` written as shardings, PartitionSpecs, None or
left out — and, on purpose and at a measured rate, the mistakes users make: a prefix of the
wrong length or container, a spec without a mesh, an indivisible shape, a committed argument
that disagrees with its in_sharding, shardings on different devices, a memory kind that
does not match, keyword arguments with in_shardings, device= with shardings, an AOT call
with other types or placements, or with committed arrays where the executable was compiled
from uncommitted, numpy or scalar arguments (inputs jit left open). Each rule of the
jit-call semantics is hit on both sides; :func:`shardlaw.properties.jit_harness.call_hit_counts`
shows how often.

With ``layouts=True`` the calls also hold layouts: arrays laid out otherwise than the
default, ``Format(layout, sharding)`` leaves (the argument's own layout, the default,
another order, ``Layout.AUTO``, none, now and then one of the wrong rank), bare layouts
where a sharding belongs, and AOT calls with arrays laid out otherwise (LAY-1..4, AOT-3).

The strategies are for users too: ``calls(max_devices=4)`` draws calls for a 4-device host.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from shardlaw.spec import (
    UNSPECIFIED, AxisType, GSPMDSharding, Mesh, NamedSharding, P, SingleDeviceSharding,
)
from shardlaw.spec.jit.call import Arg, Call, JitOptions, Out, Static, static_positions
from shardlaw.spec.jit.layouts import Format, Layout
from shardlaw.spec.placement.blocks import to_hlo
from shardlaw.spec.core.pytree import fill, leaves

from . import strategies as ST

__all__ = ["calls", "home_meshes", "argument_shardings", "layouts_for"]


@st.composite
def home_meshes(draw: Any, max_devices: int = 8) -> Mesh:
    """A concrete mesh with Auto axes over ``1 .. max_devices`` devices (any order)."""
    mesh = draw(ST.meshes(max_devices=max_devices, min_devices=1))
    return Mesh(mesh.axis_sizes, mesh.axis_names, mesh.devices,
                (AxisType.Auto,) * len(mesh.axis_names))


def _auto_spec(draw: Any, mesh: Mesh, max_rank: int = 3) -> Any:
    spec = draw(ST.partition_specs(mesh, max_rank=max_rank))
    return P(*[None if e is not None and not isinstance(e, (str, tuple)) else e for e in spec])


@st.composite
def argument_shardings(draw: Any, home: Mesh, max_devices: int = 8) -> Any:
    """A sharding an argument or a leaf might carry: mostly over the home mesh."""
    choice = draw(st.sampled_from(("home", "home", "home", "home", "gspmd", "single", "other",
                                   "renamed")))
    if choice == "home":
        return NamedSharding(home, _auto_spec(draw, home))
    if choice == "gspmd":
        base = NamedSharding(home, _auto_spec(draw, home))
        rank = len(base.spec)
        return GSPMDSharding(home.devices, to_hlo(base, rank))
    if choice == "single":
        ids = home.devices.id_tuple()
        device = draw(st.sampled_from(ids)) if draw(st.booleans()) else draw(
            st.integers(0, max_devices - 1))
        return SingleDeviceSharding(device)
    if choice == "renamed":
        names = tuple(n + "_" for n in home.axis_names)
        mesh = Mesh(home.axis_sizes, names, home.devices, home.axis_types)
        return NamedSharding(mesh, _auto_spec(draw, mesh))
    other = draw(home_meshes(max_devices))
    return NamedSharding(other, _auto_spec(draw, other))


@st.composite
def _shape_for(draw: Any, sharding: Any, divisible_bias: int = 9) -> tuple[int, ...]:
    divisible = divisible_bias < 0 or draw(st.integers(0, divisible_bias)) != 0
    return draw(ST.shapes_for(sharding, divisible=divisible, max_rank=3))


@st.composite
def layouts_for(draw: Any, rank: int, default_bias: int = 1) -> Layout:
    """A layout for an array of ``rank`` dimensions: the default about one time in
    ``default_bias + 1``, else any order of the dimensions."""
    if rank < 2 or draw(st.integers(0, default_bias)) == 0:
        return Layout.default(rank)
    return Layout(tuple(draw(st.permutations(range(rank)))))


def _laid_out(draw: Any, arg: Arg) -> Arg:
    """``arg``, sometimes in another layout than the default (jax.Array arguments only)."""
    if arg.kind not in ("committed", "uncommitted") or len(arg.shape) < 2 \
            or draw(st.integers(0, 3)) != 0:
        return arg
    return dataclasses.replace(arg, layout=draw(layouts_for(len(arg.shape), 0)))


@st.composite
def _format_leaf(draw: Any, leaf: Any, rank: int, own: Any) -> Any:
    """``leaf`` (a sharding tree leaf for a value of ``rank`` dimensions), sometimes given a
    layout: the value's own (``own``), the default, another order, AUTO, none, or now and
    then a layout of the wrong rank or a bare layout (which jit refuses)."""
    if isinstance(leaf, P) or draw(st.booleans()):
        return leaf
    how = draw(st.sampled_from(("own", "own", "default", "other", "auto", "auto", "none",
                                "rank", "bare")))
    if how == "bare":
        return draw(st.sampled_from((Layout.default(rank), Layout.AUTO)))
    if how == "none":
        return Format(None, leaf)
    if how == "auto" or leaf is None:
        return Format(Layout.AUTO, leaf)
    if how == "rank" and draw(st.booleans()):
        return Format(Layout.default(rank + draw(st.sampled_from((1, -1))) if rank else 1), leaf)
    layout = {"own": own if own is not None else Layout.default(rank),
              "default": Layout.default(rank)}.get(how) or draw(layouts_for(rank, 0))
    return Format(layout, leaf)


@st.composite
def _argument(draw: Any, home: Mesh, max_devices: int) -> tuple[Arg, Any]:
    """One argument leaf, and a sharding that fits it (for in_shardings to use)."""
    kind = draw(st.sampled_from(("committed", "committed", "committed", "uncommitted",
                                 "numpy", "numpy", "scalar")))
    if kind == "scalar":
        return Arg.scalar(draw(st.sampled_from(("float", "int", "bool")))), None
    sharding = draw(argument_shardings(home, max_devices))
    # An array that exists fits its sharding; a numpy array may not fit the one jit is given.
    shape = draw(_shape_for(sharding, -1 if kind != "numpy" else 9))
    dtype = draw(st.sampled_from(("float32", "float32", "int32", "bfloat16")))
    if kind == "committed":
        if draw(st.integers(0, 15)) == 0:
            sharding = _with_memory(sharding, "pinned_host")
        return Arg.committed(shape, sharding, dtype), sharding
    if kind == "uncommitted":
        if draw(st.integers(0, 9)) == 0:
            return Arg.uncommitted(shape, sharding, dtype), sharding
        device = draw(st.sampled_from(home.devices.id_tuple()))
        return Arg.uncommitted(shape, SingleDeviceSharding(device), dtype), sharding
    return Arg.numpy(shape, dtype), sharding


def _with_memory(sharding: Any, kind: str) -> Any:
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, sharding.spec, memory_kind=kind)
    if isinstance(sharding, SingleDeviceSharding):
        return SingleDeviceSharding(sharding.device, memory_kind=kind)
    return GSPMDSharding(sharding.devices, sharding.hlo, memory_kind=kind)


@st.composite
def _leaf_for(draw: Any, arg: Arg, fitting: Any, home: Mesh, context: Any,
              max_devices: int) -> Any:
    """An in_shardings leaf for one argument: left open, its own sharding, a spec, another."""
    choice = draw(st.sampled_from(("none", "none", "fit", "fit", "fit", "spec", "other",
                                   "respec", "respec", "abstract")))
    if choice == "none" or fitting is None and choice != "spec":
        return None
    if choice == "fit":
        if arg.kind == "committed" and draw(st.booleans()):
            return arg.sharding
        return fitting
    if choice == "abstract" and arg.kind in ("numpy", "scalar") and draw(st.booleans()):
        # A spec over an abstract mesh of some size: only its size takes part (DA-2).
        other = draw(home_meshes(max_devices)).abstract
        return NamedSharding(other, P())
    if choice in ("respec", "abstract") and isinstance(fitting, NamedSharding):
        # Another spec over the same mesh (or its abstract twin), when the shape allows it.
        mesh = fitting.mesh if choice == "respec" else fitting.mesh.abstract
        candidate = NamedSharding(mesh, _auto_spec(draw, fitting.mesh, max_rank=len(arg.shape)))
        return candidate if ST.fits(candidate, arg.shape) else fitting
    if choice == "spec":
        mesh = context if isinstance(context, Mesh) else home
        return _auto_spec(draw, mesh, max_rank=max(len(arg.shape), 0) or 0)
    return draw(argument_shardings(home, max_devices))


@st.composite
def _tree_of(draw: Any, leaves: list[Any]) -> Any:
    """Wrap one positional argument's leaves in a container (or keep a single leaf)."""
    if len(leaves) == 1 and draw(st.booleans()):
        return leaves[0]
    kind = draw(st.sampled_from(("tuple", "list", "dict")))
    if kind == "dict":
        return {f"k{i}": leaf for i, leaf in enumerate(leaves)}
    return tuple(leaves) if kind == "tuple" else list(leaves)


@st.composite
def _broken(draw: Any, tree: Any, count: int) -> Any:
    """A shardings tree that is not a prefix: wrong length, wrong container, wrong keys."""
    how = draw(st.sampled_from(("length", "container", "keys")))
    if how == "length" or not isinstance(tree, (tuple, list, dict)):
        return tuple([None] * (count + draw(st.sampled_from((-1, 1, 2)))))
    if how == "container" and isinstance(tree, (tuple, list)):
        # One argument's container swapped (a top-level list would be read as a tuple).
        entries: list[Any] = [None] * len(tree)
        for i, arg in enumerate(tree):
            if isinstance(arg, (tuple, list)):
                entries[i] = (list if isinstance(arg, tuple) else tuple)([None] * len(arg))
                return tuple(entries)
            if isinstance(arg, dict):
                entries[i] = [None] * len(arg)
                return tuple(entries)
        return tuple(entries) + (None,)
    return {"zz": None}


@st.composite
def calls(draw: Any, max_devices: int = 8, aot: bool = True, layouts: bool = False) -> Call:
    """A jit call over at most ``max_devices`` devices (see the module's description)."""
    home = draw(home_meshes(max_devices))
    context = home if draw(st.integers(0, 4)) == 0 else None
    positional, fits, static, kwargs = _draw_arguments(draw, home, max_devices, layouts)
    dynamic = [f for f in fits if f is not None]
    in_shardings = _draw_in_shardings(draw, dynamic, home, context, max_devices, layouts)
    flat_args = [a for f in dynamic for a, _ in f[1]] + ([kwargs["extra"]] if kwargs else [])
    outs, outputs = _draw_outputs(draw, flat_args, home, max_devices)
    out_shardings = _draw_out_shardings(draw, outs, outputs, home, max_devices, layouts)
    uses = tuple(draw(st.integers(0, 5)) != 0 for _ in flat_args)
    device = backend = None
    if draw(st.integers(0, 15)) == 0:
        device = draw(st.integers(0, max_devices - 1))
    options = JitOptions(in_shardings=in_shardings, out_shardings=out_shardings,
                         static_argnums=tuple(static), keep_unused=draw(st.integers(0, 4)) == 0,
                         device=device, backend=backend)
    default = draw(st.integers(0, max_devices - 1)) if draw(st.integers(0, 7)) == 0 else 0
    call = Call(args=tuple(positional), kwargs=kwargs, outputs=outputs, options=options,
                context_mesh=context, uses=uses, devices=max_devices, default_device=default)
    if aot and draw(st.integers(0, 2)) == 0:
        call = _with_aot(draw, call, home, max_devices, layouts)
    return call


def _draw_arguments(draw: Any, home: Mesh, max_devices: int, layouts: bool
                    ) -> tuple[list[Any], list[Any], list[int], dict[str, Any]]:
    """The positional arguments (trees of Args, or statics), each one's (tree, pairs) or
    None for a static, the static positions, and maybe a keyword argument."""
    count = draw(st.integers(0, 3))
    positional: list[Any] = []
    fits: list[Any] = []
    static: list[int] = []
    for position in range(count):
        if draw(st.integers(0, 9)) == 0:
            positional.append(Static(position))
            static.append(position)
            fits.append(None)
            continue
        width = draw(st.integers(1, 2))
        pairs = [draw(_argument(home, max_devices)) for _ in range(width)]
        if layouts:
            pairs = [(_laid_out(draw, a), f) for a, f in pairs]
        tree = draw(_tree_of([a for a, _ in pairs]))
        positional.append(tree)
        fits.append((tree, pairs))
    kwargs: dict[str, Any] = {}
    if draw(st.integers(0, 7)) == 0:
        kwargs["extra"] = draw(_argument(home, max_devices))[0]
    return positional, fits, static, kwargs


def _draw_in_shardings(draw: Any, dynamic: list[Any], home: Mesh, context: Any,
                       max_devices: int, layouts: bool) -> Any:
    in_mode = draw(st.sampled_from(("open", "open", "tuple", "tuple", "tuple", "leaf", "broken",
                                    "none")))
    if in_mode == "none":
        return None
    if in_mode == "leaf" and dynamic:
        return draw(argument_shardings(home, max_devices)) if draw(st.booleans()) else \
            _auto_spec(draw, context or home, max_rank=1)
    if in_mode == "tuple":
        entries = []
        for tree, pairs in dynamic:
            if draw(st.integers(0, 3)) == 0:
                leaf = draw(_leaf_for(pairs[0][0], pairs[0][1], home, context, max_devices))
                if layouts:  # one Format covering the whole argument
                    leaf = draw(_format_leaf(leaf, len(pairs[0][0].shape), pairs[0][0].layout))
                entries.append(leaf)
            else:
                leaves = [draw(_leaf_for(a, f, home, context, max_devices)) for a, f in pairs]
                if layouts:
                    leaves = [draw(_format_leaf(leaf, len(a.shape), a.layout))
                              for leaf, (a, _) in zip(leaves, pairs)]
                entries.append(fill(tree, leaves) if isinstance(tree, (tuple, list, dict))
                               else leaves[0])
        return tuple(entries) if draw(st.integers(0, 5)) else list(entries)
    if in_mode == "broken":
        return draw(_broken(tuple(t for t, _ in dynamic), len(dynamic)))
    return UNSPECIFIED


def _draw_outputs(draw: Any, flat_args: list[Any], home: Mesh, max_devices: int
                  ) -> tuple[list[Out], Any]:
    n_out = draw(st.integers(0, 2))
    outs = []
    for _ in range(n_out):
        if flat_args and draw(st.booleans()):
            source = draw(st.integers(0, len(flat_args) - 1))
            outs.append(Out(flat_args[source].shape, "float32", source))
        else:
            s = draw(argument_shardings(home, max_devices))
            outs.append(Out(draw(_shape_for(s)), "float32"))
    outputs: Any = tuple(outs) if n_out != 1 or draw(st.booleans()) else outs[0]
    return outs, outputs


def _draw_out_shardings(draw: Any, outs: list[Out], outputs: Any, home: Mesh,
                        max_devices: int, layouts: bool) -> Any:
    out_mode = draw(st.sampled_from(("open", "open", "open", "leaf", "tree", "broken")))
    out_shardings: Any = UNSPECIFIED
    if out_mode == "leaf":
        out_shardings = draw(argument_shardings(home, max_devices))
        if layouts and outs:
            out_shardings = draw(_format_leaf(out_shardings, len(outs[0].shape), None))
    elif out_mode == "tree" and isinstance(outputs, tuple):
        out_shardings = tuple(
            None if draw(st.booleans()) else draw(argument_shardings(home, max_devices))
            for _ in outputs)
        if layouts:
            out_shardings = tuple(draw(_format_leaf(s, len(o.shape), None))
                                  for s, o in zip(out_shardings, outputs))
    elif out_mode == "broken":
        out_shardings = [None] * (len(outs) + 1)
    return out_shardings


def _rename(entry: Any) -> Any:
    if isinstance(entry, str):
        return entry + "_"
    if isinstance(entry, tuple):
        return tuple(e + "_" for e in entry)
    return entry


def _aot_commit(draw: Any, arg: Arg, call: Call, home: Mesh, max_devices: int,
                held: list[Any]) -> Arg:
    """A committed array in place of an argument the executable was compiled from open."""
    if draw(st.integers(0, 5)) == 0:
        return arg
    candidates = [SingleDeviceSharding(call.default_device), NamedSharding(home, P()),
                  draw(argument_shardings(home, max_devices)), *held]
    if arg.kind == "uncommitted":
        candidates.append(arg.sharding)
    other = draw(st.sampled_from(candidates))
    if ST.fits(other, arg.shape):
        return Arg.committed(arg.shape, other, arg.dtype)
    return arg


def _aot_placement(draw: Any, arg: Arg, home: Mesh, max_devices: int) -> Arg:
    """A committed argument placed otherwise: reordered devices, renamed axes, other specs."""
    s = arg.sharding
    candidates = [draw(argument_shardings(home, max_devices))]
    if isinstance(s, NamedSharding):
        mesh = s.mesh
        reordered = Mesh(mesh.axis_sizes, mesh.axis_names,
                         list(reversed(mesh.devices.id_tuple())), mesh.axis_types)
        renamed = Mesh(mesh.axis_sizes, tuple(n + "_" for n in mesh.axis_names),
                       mesh.devices, mesh.axis_types)
        candidates += [NamedSharding(reordered, s.spec), NamedSharding(
            renamed, P(*[_rename(e) for e in s.spec]))]
        candidates += [NamedSharding(mesh, _auto_spec(draw, mesh, max_rank=len(arg.shape)))
                       for _ in range(3)]
    other = draw(st.sampled_from(candidates))
    if ST.fits(other, arg.shape):
        return Arg.committed(arg.shape, other, arg.dtype)
    return arg


def _with_aot(draw: Any, call: Call, home: Mesh, max_devices: int, layouts: bool = False
              ) -> Call:
    """The same call, then its compiled executable called with (maybe) changed arguments."""
    how = draw(st.sampled_from(("same", "same", "placement", "placement", "commit", "commit",
                                "commit", "type", "structure")
                               + (("layout", "layout") if layouts else ())))
    # Where the executable may take an input jit left open: the default device, the home
    # mesh replicated, the shardings of the call's committed arguments, or anywhere.
    held = [leaf.sharding for leaf in leaves((call.args, call.kwargs))
            if isinstance(leaf, Arg) and leaf.kind == "committed"]

    def change(arg: Any) -> Any:
        if not isinstance(arg, Arg):
            return arg
        if arg.kind in ("uncommitted", "numpy", "scalar") and how == "commit":
            return _aot_commit(draw, arg, call, home, max_devices, held)
        if arg.kind == "numpy" and how == "type":
            return Arg.numpy(arg.shape, "int32" if arg.dtype != "int32" else "float32")
        if arg.kind != "committed":
            return arg
        if how == "layout":
            if len(arg.shape) < 2:
                return arg
            return dataclasses.replace(arg, layout=draw(layouts_for(len(arg.shape))))
        if how == "placement":
            return _aot_placement(draw, arg, home, max_devices)
        if how == "type":
            return Arg.committed(arg.shape, arg.sharding,
                                 "int32" if arg.dtype != "int32" else "float32")
        return arg

    def walk(node: Any) -> Any:
        if type(node) in (tuple, list):
            return type(node)(walk(v) for v in node)
        if type(node) is dict:
            return {k: walk(v) for k, v in node.items()}
        return change(node)

    args = walk(call.args)
    # The executable takes the dynamic arguments only.
    static = static_positions(call.options, len(call.args))
    args = tuple(a for i, a in enumerate(args) if i not in static)
    if how == "structure":
        args = tuple(args) + (Arg.numpy((2,)),)
    return dataclasses.replace(call, aot_args=args, aot_kwargs=dict(call.kwargs))
