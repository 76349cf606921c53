"""Spec values, calls and verdicts as the JSON of a vector (the writing half of the format).

Pytrees keep their containers apart (``{"tuple": [...]}``, ``{"list": [...]}``,
``{"dict": {...}}``, ``null``); every other value is an object whose ``"type"`` names it.
What JSON cannot carry back exactly is refused with VEC-2 (:func:`check_writable`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from ..core.hlo import HloSharding, Tiled, hlo_text
from ..core.iota import Iota
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import UNCONSTRAINED, AbstractMesh, Device, DeviceList, Mesh, PartitionSpec
from ..jit.call import Arg, Call, JitOptions, Out, Static, Verdict
from ..jit.layouts import AUTO_LAYOUT, Format, Layout
from .vector_checks import MAX_DEPTH, check_writable

__all__ = ["verdict_json"]

# A list of device ids longer than this is written symbolically when it is an iota.
_LONGEST_ID_LIST = 64


def _device_json(device: Device) -> Any:
    if device.platform == "cpu" and device.process_index == 0:
        return device.id
    return {"id": device.id, "platform": device.platform, "process_index": device.process_index}


def _device_list_json(devices: DeviceList) -> Any:
    iota = devices.iota
    if iota is not None and len(devices) > _LONGEST_ID_LIST:
        return {"iota": list(iota.reshape_dims), "perm": list(iota.perm),
                "platform": devices.platform, "devices_per_process": devices.devices_per_process}
    return [_device_json(d) for d in devices]


def _axes_json(mesh: Mesh | AbstractMesh) -> dict:
    return {"axis_sizes": list(mesh.axis_sizes), "axis_names": list(mesh.axis_names),
            "axis_types": [t.value for t in mesh.axis_types]}


def mesh_json(mesh: Mesh | AbstractMesh) -> dict:
    """A mesh as a vector writes it (its axes, and a concrete mesh's devices)."""
    if isinstance(mesh, AbstractMesh):
        return {"type": "AbstractMesh", **_axes_json(mesh)}
    return {"type": "Mesh", **_axes_json(mesh), "devices": _device_list_json(mesh.devices)}


def _entry_json(entry: Any) -> Any:
    if entry is UNCONSTRAINED:
        return {"type": "UNCONSTRAINED"}
    return list(entry) if isinstance(entry, tuple) else entry


def _spec_json(spec: PartitionSpec) -> dict:
    out: dict[str, Any] = {"type": "PartitionSpec",
                           "partitions": [_entry_json(e) for e in spec.partitions]}
    if spec.unreduced:
        out["unreduced"] = sorted(spec.unreduced)
    if spec.reduced:
        out["reduced"] = sorted(spec.reduced)
    return out


def hlo_json(hlo: HloSharding) -> str:
    """An HLO sharding as a vector writes it: text that XLA's parser and parse_hlo both read."""
    # hlo_text writes a one-device explicit tile assignment as a list ("{devices=[1]0}"),
    # which XLA's parser and parse_hlo refuse; "<=[1]" reads back as the same value.
    if isinstance(hlo, Tiled) and not isinstance(hlo.assignment, Iota) \
            and len(hlo.assignment) == 1:
        return hlo_text(Tiled(hlo.dims, Iota((1,)), hlo.subgroups))
    return hlo_text(hlo)


def _layout_json(value: Any) -> Any:
    """A layout: ``{"type": "Layout", "major_to_minor": [...]}`` or ``{"type": "Layout.AUTO"}``."""
    if value is AUTO_LAYOUT:
        return {"type": "Layout.AUTO"}
    return {"type": "Layout", "major_to_minor": list(value.major_to_minor)}


def sharding_json(value: Any, path: tuple) -> Any:
    """A leaf of a shardings tree: a sharding, a PartitionSpec, a Format, a layout,
    UNSPECIFIED or a plain value."""
    if value is None:
        return None
    if value is UNSPECIFIED:
        return {"type": "UNSPECIFIED"}
    if value is AUTO_LAYOUT or isinstance(value, Layout):  # bare: JIT-2 refuses it
        return _layout_json(value)
    if isinstance(value, Format):
        return {"type": "Format",
                "layout": None if value.layout is None else _layout_json(value.layout),
                "sharding": sharding_json(value.sharding, path + ("sharding",))}
    if isinstance(value, PartitionSpec):
        return _spec_json(value)
    if isinstance(value, NamedSharding):
        return {"type": "NamedSharding", "mesh": mesh_json(value.mesh),
                "spec": _spec_json(value.spec), "memory_kind": value.memory_kind}
    if isinstance(value, SingleDeviceSharding):
        return {"type": "SingleDeviceSharding", "device": _device_json(value.device),
                "memory_kind": value.memory_kind}
    if isinstance(value, GSPMDSharding):
        return {"type": "GSPMDSharding", "devices": _device_list_json(value.devices),
                "hlo": hlo_json(value.hlo), "memory_kind": value.memory_kind}
    if isinstance(value, Arg):  # an array passed where a sharding belongs (JIT-2 refuses it)
        return input_json(value, path)
    check_writable(type(value) in (str, int, bool) or (
        type(value) is float and math.isfinite(value)), path, "a leaf of a shardings tree",
        "a sharding, a PartitionSpec, a Format, a Layout, None, UNSPECIFIED, an Arg or a "
        "string, integer, boolean or finite float", value)
    return {"type": "python", "value": value}


def _static_json(value: Any, path: tuple) -> Any:
    """A static value: JSON scalars as themselves, containers tagged like pytrees."""
    if value is None or type(value) in (str, int, bool):
        return value
    if type(value) is float:
        check_writable(math.isfinite(value), path, "a static value", "a finite number", value)
        return value
    if type(value) in (tuple, list, dict):
        _check_shallow(value, path)
    if type(value) in (tuple, list):
        return {type(value).__name__: [_static_json(v, path + (i,)) for i, v in enumerate(value)]}
    if type(value) is dict:
        return {"dict": {_key(k, path): _static_json(v, path + (k,)) for k, v in value.items()}}
    check_writable(False, path, "a static value", "None, a boolean, a number, a string, or a "
                   "tuple, list or dict of these", value)


def _check_shallow(container: Any, path: tuple) -> None:
    """A container is written only where the vector it is written in still reads back: its
    path, each step of which is a level of JSON, stays within :data:`MAX_DEPTH` (VEC-2)."""
    check_writable(len(path) < MAX_DEPTH, path, "a value",
                   f"nested at most {MAX_DEPTH} deep (JSON arrays and objects)", container)


def _key(key: Any, path: tuple) -> str:
    check_writable(isinstance(key, str), path, "a dict key", "a string", key)
    return key


def _tree_json(tree: Any, path: tuple, leaf: Callable[[Any, tuple], Any]) -> Any:
    if tree is None:
        return None
    if type(tree) in (tuple, list, dict):
        _check_shallow(tree, path)
    if type(tree) in (tuple, list):
        kind = type(tree).__name__
        return {kind: [_tree_json(v, path + (kind, i), leaf) for i, v in enumerate(tree)]}
    if type(tree) is dict:
        return {"dict": {_key(k, path): _tree_json(v, path + ("dict", k), leaf)
                         for k, v in tree.items()}}
    return leaf(tree, path)


def input_json(value: Any, path: tuple) -> Any:
    """One input of a call (an Arg or a Static) as a vector writes it."""
    if isinstance(value, Static):
        return {"type": "Static", "value": _static_json(value.value, path + ("value",))}
    check_writable(isinstance(value, Arg), path, "an argument", "an Arg or a Static", value)
    out = {"type": "Arg", "kind": value.kind, "shape": list(value.shape), "dtype": value.dtype,
           "sharding": sharding_json(value.sharding, path + ("sharding",))}
    if value.layout is not None:  # absent: the default layout
        out["layout"] = _layout_json(value.layout)
    return out


def _out_json(value: Any, path: tuple) -> Any:
    check_writable(isinstance(value, Out), path, "a result", "an Out", value)
    return {"type": "Out", "shape": list(value.shape), "dtype": value.dtype,
            "source": value.source, "mesh": None if value.mesh is None else mesh_json(value.mesh)}


def _shardings_tree_json(tree: Any, path: tuple) -> Any:
    if tree is UNSPECIFIED:
        return {"type": "UNSPECIFIED"}
    return _tree_json(tree, path, sharding_json)


def _options_json(options: JitOptions, path: tuple) -> dict:
    return {
        "in_shardings": _shardings_tree_json(options.in_shardings, path + ("in_shardings",)),
        "out_shardings": _shardings_tree_json(options.out_shardings, path + ("out_shardings",)),
        "static_argnums": list(options.static_argnums),
        "static_argnames": list(options.static_argnames),
        "donate_argnums": list(options.donate_argnums),
        "donate_argnames": list(options.donate_argnames),
        "keep_unused": options.keep_unused, "device": options.device, "backend": options.backend,
    }


def _inputs_json(args: tuple | None, kwargs: dict | None, path: tuple) -> tuple[Any, Any]:
    if args is None:
        return None, None
    return ([_tree_json(a, path + ("args", i), input_json) for i, a in enumerate(args)],
            {_key(k, path + ("kwargs",)): _tree_json(v, path + ("kwargs", k), input_json)
             for k, v in (kwargs or {}).items()})


def call_json(call: Call) -> dict:
    """A jit call (its inputs, options, meshes and compiler choices) as a vector writes it."""
    path = ("call",)
    args, kwargs = _inputs_json(call.args, call.kwargs, path)
    aot_args, aot_kwargs = _inputs_json(call.aot_args, call.aot_kwargs, path + ("aot",))
    return {
        "args": args, "kwargs": kwargs,
        "outputs": _tree_json(call.outputs, path + ("outputs",), _out_json),
        "options": _options_json(call.options, path + ("options",)),
        "context_mesh": None if call.context_mesh is None else mesh_json(call.context_mesh),
        "uses": None if call.uses is None else list(call.uses),
        "compiler": None if call.compiler is None else [
            None if c is None else hlo_json(c) for c in call.compiler],
        "compiler_memory": None if call.compiler_memory is None else list(call.compiler_memory),
        "devices": call.devices, "default_device": call.default_device,
        "process_count": call.process_count,
        "aot_args": aot_args, "aot_kwargs": aot_kwargs,
        # Written only when given, so that vectors without them read as before.
        **{name: [None if c is None else _layout_json(c) for c in getattr(call, name)]
           for name in ("compiler_layouts", "compiler_in_layouts")
           if getattr(call, name) is not None},
        **({} if call.compiler_in is None else {"compiler_in": [
            None if c is None else hlo_json(c) for c in call.compiler_in]}),
        **({} if call.resource_mesh is None else {
            "resource_mesh": mesh_json(call.resource_mesh)}),
    }


def verdict_json(verdict: Verdict) -> dict:
    """A verdict as the ``"expect"`` object of a vector."""
    trace = list(verdict.trace)
    if not verdict.accepted:
        return {"accepted": False, "rule": verdict.rule, "error_type": verdict.error_type,
                "jax_error": verdict.jax_error, "stage": verdict.stage, "path": verdict.path,
                "message": verdict.message, "trace": trace}
    path = ("expect",)

    def laid(entry: dict, layouts: tuple, i: int) -> dict:
        # A "layout" is written where it is not the default one (absent: the default).
        if i < len(layouts) and layouts[i] is not None:
            entry["layout"] = _layout_json(layouts[i])
        return entry

    return {
        "accepted": True,
        "device_assignment": None if verdict.device_assignment is None
        else list(verdict.device_assignment),
        "num_devices": verdict.num_devices,
        "inputs": [laid({"path": p, "sharding": sharding_json(s, path + ("inputs", i, "sharding"))},
                        verdict.in_layouts, i)
                   for i, (p, s) in enumerate(zip(verdict.in_paths, verdict.in_shardings))],
        "outputs": [laid({"path": p,
                          "sharding": sharding_json(s, path + ("outputs", i, "sharding")),
                          "committed": c}, verdict.out_layouts, i) for i, (p, s, c) in enumerate(
                         zip(verdict.out_paths, verdict.out_shardings, verdict.out_committed))],
        "kept_inputs": list(verdict.kept_inputs), "transfers": list(verdict.transfers),
        "trace": trace,
    }
