"""The bridge between spec values and JAX objects: the one spec module that imports JAX.

:func:`from_jax` reads a JAX object (device, mesh, PartitionSpec, sharding, HLO sharding,
layout, ``Format``) into the spec value that describes it; :func:`to_jax` builds the JAX object for a spec
value. The two are inverse on everything the spec can describe, so that a property can
build an input once, in the spec's terms, and ask both implementations about it.

JAX and NumPy are imported when a function here is first called, never when
``shardlaw.spec`` is imported.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.hlo import HloSharding, SubgroupType, Tiled, hlo_text, parse_hlo, tiled
from ..core.iota import Iota
from ..jit.layouts import AUTO_LAYOUT, Format, Layout
from ..core.pytree import map_leaves
from ..core.shardings import GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import (
    UNCONSTRAINED, AbstractMesh, AxisType, Device, DeviceList, Mesh, PartitionSpec,
)

__all__ = ["from_jax", "to_jax", "jax_box", "describe_call"]


def _jax() -> Any:
    import jax
    return jax


# --------------------------------------------------------------------------- JAX -> spec

def _device_from_jax(device: Any) -> Device:
    return Device(device.id, device.platform, device.process_index)


def _device_list_from_jax(devices: Any) -> DeviceList:
    """Devices in the order given; symbolic when the ids are ``0..N-1`` on one process."""
    devices = list(devices)
    if devices and all(d.process_index == 0 for d in devices):
        return DeviceList.of_ids([d.id for d in devices], platform=devices[0].platform)
    return DeviceList(tuple(_device_from_jax(d) for d in devices))


def _axis_type_from_jax(axis_type: Any) -> AxisType:
    return AxisType[axis_type.name]


def _mesh_from_jax(mesh: Any) -> Mesh:
    return Mesh(tuple(mesh.axis_sizes), tuple(mesh.axis_names),
                _device_list_from_jax(mesh.devices.flat),
                tuple(_axis_type_from_jax(t) for t in mesh.axis_types))


def _abstract_mesh_from_jax(mesh: Any) -> AbstractMesh:
    return AbstractMesh(tuple(mesh.axis_sizes), tuple(mesh.axis_names),
                        tuple(_axis_type_from_jax(t) for t in mesh.axis_types))


def _spec_from_jax(spec: Any) -> PartitionSpec:
    jax = _jax()
    # Iterating a PartitionSpec that has unreduced or reduced axes raises; read its entries.
    entries = [UNCONSTRAINED if e is jax.sharding.PartitionSpec.UNCONSTRAINED else e
               for e in _partitions_of(spec)]
    return PartitionSpec(*entries, unreduced=spec.unreduced, reduced=spec.reduced)


def _partitions_of(spec: Any) -> tuple[Any, ...]:
    partitions = getattr(spec, "partitions", None)
    return tuple(spec._partitions if partitions is None else partitions)


def _hlo_from_jax(hlo: Any) -> HloSharding:
    # XLA prints an explicit tile assignment over one device ("{devices=[1,1]0}") that its
    # parser, and the spec's, refuse; read that one from its parts.
    if hlo.is_tiled() and hlo.num_devices() == 1 and not hlo.is_tile_assignment_iota():
        kinds = tuple(SubgroupType(int(t.value)) for t in hlo.subgroup_types())
        if hlo.replicate_on_last_tile_dim():
            kinds = (SubgroupType.REPLICATED,)
        return tiled(tuple(hlo.tile_assignment_dimensions()),
                     tuple(hlo.tile_assignment_devices()), kinds)
    return parse_hlo(str(hlo))


def layout_from_jax(layout: Any) -> Any:
    """The spec's layout for a JAX layout (None, AUTO or a concrete layout, as read)."""
    from jax.experimental import layout as jlayout

    if layout is None:
        return None
    if layout is jlayout.Layout.AUTO:
        return AUTO_LAYOUT
    # The spec models the order of dimensions only; XLA's tiling is not part of it.
    if layout.tiling or layout.sub_byte_element_size_in_bits:
        raise TypeError(f"from_jax reads layouts without tiling or sub-byte element sizes "
                        f"(the spec models major_to_minor only); got {layout!r}")
    return Layout(tuple(layout.major_to_minor))


def from_jax(obj: Any) -> Any:
    """The spec value that describes a JAX device, mesh, PartitionSpec, sharding, HloSharding,
    Layout (or ``Layout.AUTO``) or Format."""
    jax = _jax()
    from jax._src.lib import xla_client as xc
    from jax._src.sharding_impls import GSPMDSharding as JaxGSPMDSharding
    from jax.experimental import layout as jlayout

    js = jax.sharding
    if isinstance(obj, jlayout.Layout) or obj is jlayout.Layout.AUTO:
        return layout_from_jax(obj)
    if isinstance(obj, jlayout.Format):
        return Format(layout_from_jax(obj.layout),
                      None if obj.sharding is None else from_jax(obj.sharding))
    if isinstance(obj, xc.Device):
        return _device_from_jax(obj)
    if isinstance(obj, js.Mesh):
        return _mesh_from_jax(obj)
    if isinstance(obj, js.AbstractMesh):
        return _abstract_mesh_from_jax(obj)
    if isinstance(obj, js.PartitionSpec):
        return _spec_from_jax(obj)
    if isinstance(obj, js.NamedSharding):
        mesh = from_jax(obj.mesh)
        return NamedSharding(mesh, _spec_from_jax(obj.spec), memory_kind=obj.memory_kind)
    if isinstance(obj, js.SingleDeviceSharding):
        (device,) = obj._device_assignment
        return SingleDeviceSharding(_device_from_jax(device), memory_kind=obj.memory_kind)
    if isinstance(obj, JaxGSPMDSharding):
        return GSPMDSharding(_device_list_from_jax(obj._device_assignment),
                             _hlo_from_jax(obj._hlo_sharding), memory_kind=obj.memory_kind)
    if isinstance(obj, xc.HloSharding):
        return _hlo_from_jax(obj)
    raise TypeError(f"from_jax reads a jax Device, Mesh, AbstractMesh, PartitionSpec, "
                    f"NamedSharding, SingleDeviceSharding, GSPMDSharding, xc.HloSharding, "
                    f"Layout or Format; "
                    f"got {type(obj).__module__}.{type(obj).__qualname__}: {obj!r}")


# --------------------------------------------------------------------------- spec -> JAX

def _device_to_jax(device: Device) -> Any:
    jax = _jax()
    for d in jax.devices():
        if d.id == device.id:
            return d
    raise ValueError(f"JAX has no device with id {device.id} "
                     f"(it has {len(jax.devices())} devices)")


def _devices_to_jax(devices: DeviceList) -> list[Any]:
    by_id = {d.id: d for d in _jax().devices()}
    missing = [i for i in devices.ids() if i not in by_id]
    if missing:
        raise ValueError(f"JAX has no device with id {missing[0]} (it has {len(by_id)} devices)")
    return [by_id[i] for i in devices.ids()]


def _axis_types_to_jax(types: tuple[AxisType, ...]) -> tuple[Any, ...]:
    jax = _jax()
    return tuple(getattr(jax.sharding.AxisType, t.value) for t in types)


def _mesh_to_jax(mesh: Mesh) -> Any:
    import numpy as np
    jax = _jax()
    devices = np.empty(len(mesh.devices), dtype=object)
    devices[:] = _devices_to_jax(mesh.devices)
    return jax.sharding.Mesh(devices.reshape(mesh.axis_sizes), mesh.axis_names,
                             axis_types=_axis_types_to_jax(mesh.axis_types))


def _abstract_mesh_to_jax(mesh: AbstractMesh) -> Any:
    jax = _jax()
    return jax.sharding.AbstractMesh(mesh.axis_sizes, mesh.axis_names,
                                     axis_types=_axis_types_to_jax(mesh.axis_types))


def _spec_to_jax(spec: PartitionSpec) -> Any:
    P = _jax().sharding.PartitionSpec
    entries = [P.UNCONSTRAINED if e is UNCONSTRAINED else e for e in spec.partitions]
    return P(*entries, unreduced=set(spec.unreduced), reduced=set(spec.reduced))


def _hlo_to_jax(hlo: HloSharding) -> Any:
    """The same HLO sharding built by XLA's constructors (not its parser, which rewrites some
    forms that its constructors keep)."""
    import numpy as np
    from jax._src.lib import xla_client as xc
    if not isinstance(hlo, Tiled):
        return xc.HloSharding.from_string(hlo_text(hlo))
    kinds = [xc.OpSharding.Type(int(s)) for s in hlo.subgroups]
    dims = list(hlo.dims)
    if len(kinds) == 1 and all(t == 1 for t in hlo.tiles):
        # A lone subgroup without data tiling collapses when built as such; XLA keeps it
        # when a size-1 replicated subgroup came along and was dropped, so build it that way.
        dims.append(1)
        kinds.append(xc.OpSharding.Type.REPLICATED)
    if isinstance(hlo.assignment, Iota):
        return xc.HloSharding.iota_tile(dims, list(hlo.assignment.reshape_dims),
                                        list(hlo.assignment.perm), kinds)
    array = np.array(hlo.assignment, dtype=np.int64).reshape(dims)
    return xc.HloSharding.subgroup_with_device_ordering(array, subgroup_types=kinds)


def to_jax(value: Any) -> Any:
    """The JAX object for a spec value; devices are JAX's devices with the same ids."""
    jax = _jax()
    from jax._src.sharding_impls import GSPMDSharding as JaxGSPMDSharding
    from jax.experimental import layout as jlayout

    if value is AUTO_LAYOUT:
        return jlayout.Layout.AUTO
    if isinstance(value, Layout):
        return jlayout.Layout(value.major_to_minor)
    if isinstance(value, Format):
        return jlayout.Format(None if value.layout is None else to_jax(value.layout),
                              None if value.sharding is None else to_jax(value.sharding))
    if isinstance(value, Device):
        return _device_to_jax(value)
    if isinstance(value, Mesh):
        return _mesh_to_jax(value)
    if isinstance(value, AbstractMesh):
        return _abstract_mesh_to_jax(value)
    if isinstance(value, PartitionSpec):
        return _spec_to_jax(value)
    if isinstance(value, NamedSharding):
        return jax.sharding.NamedSharding(to_jax(value.mesh), _spec_to_jax(value.spec),
                                          memory_kind=value.memory_kind)
    if isinstance(value, SingleDeviceSharding):
        return jax.sharding.SingleDeviceSharding(_device_to_jax(value.device),
                                                 memory_kind=value.memory_kind)
    if isinstance(value, GSPMDSharding):
        return JaxGSPMDSharding(_devices_to_jax(value.devices), _hlo_to_jax(value.hlo),
                                memory_kind=value.memory_kind)
    if isinstance(value, HloSharding):
        return _hlo_to_jax(value)
    raise TypeError(f"to_jax builds JAX objects for a spec Device, Mesh, AbstractMesh, "
                    f"PartitionSpec, NamedSharding, SingleDeviceSharding, GSPMDSharding, "
                    f"HloSharding, Layout, Layout.AUTO or Format; got {type(value).__module__}.{type(value).__qualname__}: "
                    f"{value!r}")


# --------------------------------------------------------------------------- boxes

def jax_box(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The spec box ``((start, stop), ..)`` for JAX's per-device index (a tuple of slices).

    JAX writes a whole dimension as ``slice(None)`` and may give fewer slices than the
    shape has dimensions; the missing trailing dimensions are whole.
    """
    if not isinstance(index, tuple):
        raise TypeError(f"jax_box reads a tuple of slices, got {type(index).__name__}: {index!r}")
    box = []
    for dim, size in enumerate(shape):
        s = index[dim] if dim < len(index) else slice(None)
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise TypeError(f"jax_box reads slices without steps, got {s!r} for dimension {dim}")
        # Taken as written, not clamped, so that an out-of-range slice shows as one.
        box.append((0 if s.start is None else s.start, size if s.stop is None else s.stop))
    if len(index) > len(shape):
        raise TypeError(f"index {index!r} has more entries than shape {shape} has dimensions")
    return tuple(box)



# --------------------------------------------------------------------------- calls

def _arg_from_jax(value: Any) -> Any:
    """The :class:`~shardlaw.spec.jit.call.Arg` for one argument leaf a user passes to jit."""
    import numpy as np
    from ..jit.call import Arg

    jax = _jax()
    if type(value) in (bool, int, float, complex):
        return Arg.scalar(type(value).__name__)
    if isinstance(value, jax.ShapeDtypeStruct):
        if getattr(getattr(value, "format", None), "layout", None) is not None:
            raise TypeError(f"describe_call reads ShapeDtypeStructs without a layout (the spec "
                            f"lays out jax.Array arguments only); got {value!r}")
        sharding = None if value.sharding is None else from_jax(value.sharding)
        return Arg.abstract(tuple(value.shape), str(value.dtype), sharding)
    if isinstance(value, jax.Array):
        kind = "committed" if value._committed else "uncommitted"
        layout = layout_from_jax(getattr(value.format, "layout", None))
        return Arg(kind, tuple(value.shape), str(value.dtype), from_jax(value.sharding),
                   layout)
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return Arg.numpy(tuple(np.shape(value)), str(value.dtype))
    raise TypeError(f"describe_call reads jax.Array, numpy arrays, Python scalars and "
                    f"jax.ShapeDtypeStruct as arguments; got {type(value).__qualname__}: "
                    f"{value!r} (mark it static with static_argnums/static_argnames)")


def _arg_tree(tree: Any) -> Any:
    return map_leaves(_arg_from_jax, tree)


def _shardings_tree(tree: Any) -> Any:
    from ..core.shardings import UNSPECIFIED

    from jax.experimental import layout as jlayout

    jax = _jax()
    if tree is UNSPECIFIED:
        return tree
    known = (jax.sharding.Sharding, jax.sharding.PartitionSpec, jlayout.Format, jlayout.Layout)
    # Other leaves are left for the spec to reject (JIT-2).
    return map_leaves(lambda leaf: from_jax(leaf) if isinstance(leaf, known)
                      or leaf is jlayout.Layout.AUTO else leaf, tree)


def _context_mesh() -> Any:
    from jax._src import mesh as mesh_lib

    concrete = mesh_lib.get_concrete_mesh()
    if concrete is not None and not concrete.empty:
        return from_jax(concrete)
    abstract = mesh_lib.get_abstract_mesh()
    if abstract is not None and not abstract.empty:
        return from_jax(abstract)
    return None


def _traced(fun: Any, jit_kwargs: dict, args: tuple, kwargs: dict) -> tuple[Any, tuple[bool, ...]]:
    """The results' types and, per flat input, whether the function uses it (JAX's DCE)."""
    from jax._src.interpreters import partial_eval as pe

    jax = _jax()
    traced = jax.jit(fun, **jit_kwargs).trace(*args, **kwargs)
    jaxpr = traced.jaxpr.jaxpr
    _, used = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    return traced, tuple(bool(u) for u in used)


def _result_meshes(traced: Any) -> list[Any]:
    meshes = []
    for aval in traced.jaxpr.out_avals:
        mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
        meshes.append(None if mesh is None or mesh.empty else from_jax(mesh))
    return meshes


def describe_call(fun: Any, *args: Any, in_shardings: Any = None, out_shardings: Any = None,
                  static_argnums: Any = (), static_argnames: Any = (), donate_argnums: Any = (),
                  donate_argnames: Any = (), keep_unused: bool = False, device: Any = None,
                  backend: Any = None, context_mesh: Any = "current", compiler: Any = None,
                  compiler_in: Any = None, **kwargs: Any) -> Any:
    """The :class:`~shardlaw.spec.jit.call.Call` for ``jax.jit(fun, ...)(*args, **kwargs)``.

    Reads real JAX objects (arrays, numpy arrays, scalars, ShapeDtypeStructs, shardings,
    PartitionSpecs, the mesh set with ``jax.set_mesh``) and traces ``fun`` abstractly for
    its results and the inputs it uses; nothing runs on a device and nothing is compiled.
    ``in_shardings``/``out_shardings`` left as None mean "not given"; pass
    ``compiler=`` (HLO shardings per flat result) when the compiler's choice is known, and
    ``compiler_in=`` (HLO shardings per flat dynamic input, for the inputs jit leaves open:
    what ``jit(fun).lower(...).compile().input_shardings`` shows) likewise.
    """
    from ..jit.call import Call, JitOptions, Out, Static, static_positions
    from ..core.shardings import UNSPECIFIED

    jax = _jax()
    options = JitOptions(
        in_shardings=UNSPECIFIED if in_shardings is None else _shardings_tree(in_shardings),
        out_shardings=UNSPECIFIED if out_shardings is None else _shardings_tree(out_shardings),
        static_argnums=static_argnums, static_argnames=static_argnames,
        donate_argnums=donate_argnums, donate_argnames=donate_argnames,
        keep_unused=keep_unused, device=None if device is None else device.id, backend=backend)
    static = static_positions(options, len(args))
    static_names = set(options.static_argnames)
    options = dataclasses.replace(options, static_argnums=tuple(static),
                                  static_argnames=tuple(static_names))
    spec_args = tuple(Static(a) if i in static else _arg_tree(a) for i, a in enumerate(args))
    spec_kwargs = {k: Static(v) if k in static_names else _arg_tree(v) for k, v in kwargs.items()}
    jit_kwargs = dict(static_argnums=tuple(static), static_argnames=tuple(static_names))
    traced, uses = _traced(fun, jit_kwargs, args, kwargs)
    meshes = iter(_result_meshes(traced))
    outputs = jax.tree_util.tree_map(
        lambda s: Out(tuple(s.shape), str(s.dtype), None, next(meshes)), traced.out_info)
    mesh = _context_mesh() if context_mesh == "current" else (
        None if context_mesh is None else from_jax(context_mesh))
    default = jax.config.jax_default_device
    if isinstance(default, str) or default is None:
        default = jax.local_devices()[0]
    return Call(args=spec_args, kwargs=spec_kwargs, outputs=outputs,
                options=options, context_mesh=mesh,
                uses=uses,
                compiler=compiler, compiler_in=compiler_in,
                devices=jax.device_count() // max(jax.process_count(), 1),
                default_device=default.id, process_count=jax.process_count())

