"""The JSON of a vector read back as spec values, calls and verdicts (the reading half).

Every field is checked as it is read: what is not of the documented form is refused with
VEC-1 (:func:`check_vector`) at its JSON path, and a value the spec itself refuses is
refused with VEC-1 naming the spec's reason. :class:`CallPartsReader` reads the values a
call is made of (devices, meshes, specs, layouts, shardings, arguments); :class:`CallReader`
reads a whole call and its verdict.
"""

from __future__ import annotations

import builtins
import json
from typing import Any, Callable

from shardlaw.rule_index import STAGES
from ..core.hlo import parse_hlo
from ..core.iota import Iota
from ..core.rules import RULES
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import (
    UNCONSTRAINED, AbstractMesh, AxisType, Device, DeviceList, Mesh, PartitionSpec,
)
from ..jit.call import Arg, Call, JitOptions, Out, Static, Verdict
from ..jit.layouts import AUTO_LAYOUT, Format, Layout
from .vector_checks import building, check_vector

__all__: list[str] = []   # the readers are the format's own; load_vector is their front door


# =========================================================================== fields

def as_object(value: Any, path: tuple, what: str, required: tuple = (),
              optional: tuple = ()) -> dict:
    """``value`` when it is a JSON object with every ``required`` key and no key outside
    ``required`` and ``optional``; VEC-1 at ``path`` otherwise."""
    check_vector(isinstance(value, dict), path, what, value)
    known = (*required, *optional)
    for key in value:
        check_vector(key in known, path + (key,), f"a key of {what} ({', '.join(known)})",
                     key)
    for key in required:
        check_vector(key in value, path, f"{what} with the key {json.dumps(key)}",
                     value)
    return value


def as_int(value: Any, path: tuple, what: str = "an integer", least: int | None = None) -> int:
    """``value`` when it is an integer (not a bool) of at least ``least``; VEC-1 otherwise."""
    check_vector(isinstance(value, int) and not isinstance(value, bool)
                 and (least is None or value >= least), path, what, value)
    return value


def as_str(value: Any, path: tuple, what: str = "a string") -> str:
    """``value`` when it is a string; VEC-1 at ``path`` otherwise."""
    check_vector(isinstance(value, str), path, what, value)
    return value


def _bool(value: Any, path: tuple, what: str = "true or false") -> bool:
    check_vector(isinstance(value, bool), path, what, value)
    return value


def as_list(value: Any, path: tuple, what: str) -> list:
    """``value`` when it is a JSON list; VEC-1 at ``path`` otherwise."""
    check_vector(isinstance(value, list), path, what, value)
    return value


def _each(value: Any, path: tuple, what: str, read: Callable[[Any, tuple], Any]) -> tuple:
    return tuple(read(v, path + (i,)) for i, v in enumerate(as_list(value, path, what)))


def maybe(read: Callable[[Any, tuple], Any]) -> Callable[[Any, tuple], Any]:
    """A reader like ``read`` that also accepts null (read as None)."""
    return lambda value, path: None if value is None else read(value, path)


def _ints(value: Any, path: tuple, what: str, least: int | None = None) -> tuple[int, ...]:
    return _each(value, path, what, lambda v, p: as_int(v, p, "an integer" if least is None
                                                       else f"an integer of at least {least}",
                                                       least))


def _strs(value: Any, path: tuple, what: str) -> tuple[str, ...]:
    return _each(value, path, what, as_str)


def _static(value: Any, path: tuple) -> Any:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    container = _container(value, path, "a static value: null, a boolean, a number, a string, "
                                         "or a {\"tuple\": [...]}, {\"list\": [...]} or "
                                         "{\"dict\": {...}} of these")
    kind, inner = container
    if kind == "dict":
        return {k: _static(v, path + ("dict", k)) for k, v in inner.items()}
    items = [_static(v, path + (kind, i)) for i, v in enumerate(inner)]
    return tuple(items) if kind == "tuple" else items


def _container(value: Any, path: tuple, what: str) -> tuple[str, Any]:
    check_vector(isinstance(value, dict) and len(value) == 1
                 and next(iter(value)) in ("tuple", "list", "dict"), path, what, value)
    (kind, inner), = value.items()
    if kind == "dict":
        check_vector(isinstance(inner, dict), path + ("dict",), "a JSON object", inner)
    else:
        check_vector(isinstance(inner, list), path + (kind,), "a JSON array", inner)
    return kind, inner


# =========================================================================== a call's parts

class CallPartsReader:
    """Reads the parts of one call (its values), knowing how many devices the call has."""

    def __init__(self, device_limit: int, device_count: int) -> None:
        self.limit = device_limit
        self.count = device_count

    # ------------------------------------------------------------------ devices
    def device_id(self, value: Any, path: tuple) -> int:
        as_int(value, path, "a device id (a non-negative integer)", 0)
        check_vector(value < self.limit, path, f"a device id below {self.limit} (the call has "
                     f"{self._devices_said()})", value)
        return value

    def _devices_said(self) -> str:
        if self.limit == self.count:
            return f"{self.count} devices"
        return f"{self.limit} devices: {self.limit // self.count} processes of {self.count}"

    def device(self, value: Any, path: tuple) -> Device:
        if not isinstance(value, dict):
            return Device(self.device_id(value, path))
        fields = as_object(value, path, "a device", ("id",), ("platform", "process_index"))
        ident = self.device_id(fields["id"], path + ("id",))
        platform = as_str(fields.get("platform", "cpu"), path + ("platform",))
        process = as_int(fields.get("process_index", 0), path + ("process_index",),
                         "a process index (a non-negative integer)", 0)
        with building(path, "the device"):
            return Device(ident, platform, process)

    def device_list(self, value: Any, path: tuple) -> DeviceList:
        if isinstance(value, dict):
            return self._iota_list(value, path)
        devices = _each(value, path, "a list of devices, or {\"iota\": [...], ...}", self.device)
        with building(path, "the device list"):
            if all(isinstance(v, int) for v in value):  # plain ids: symbolic when they can be
                return DeviceList.of_ids([d.id for d in devices])
            return DeviceList(devices)

    def _iota_list(self, value: Any, path: tuple) -> DeviceList:
        fields = as_object(value, path, "a symbolic device list", ("iota",),
                           ("perm", "platform", "devices_per_process"))
        dims = _ints(fields["iota"], path + ("iota",), "the iota's reshape dims", 0)
        perm = fields.get("perm")
        perm = None if perm is None else _ints(perm, path + ("perm",), "a permutation", 0)
        platform = as_str(fields.get("platform", "cpu"), path + ("platform",))
        per = maybe(lambda v, p: as_int(v, p, "a positive integer", 1))(
            fields.get("devices_per_process"), path + ("devices_per_process",))
        with building(path + ("iota",), "the iota"):
            iota = Iota(dims, perm)
        check_vector(len(iota) <= self.limit, path + ("iota",), f"at most {self.limit} devices "
                     f"(the call has {self._devices_said()})", list(dims))
        with building(path, "the device list"):
            return DeviceList(iota, platform=platform, devices_per_process=per)

    # ------------------------------------------------------------------ meshes and specs
    def mesh(self, value: Any, path: tuple, abstract_only: bool = False) -> Mesh | AbstractMesh:
        kinds = ("AbstractMesh",) if abstract_only else ("Mesh", "AbstractMesh")
        what = "an abstract mesh" if abstract_only else "a mesh"
        check_vector(isinstance(value, dict) and value.get("type") in kinds, path,
                     f"{what}: an object with \"type\" {' or '.join(map(json.dumps, kinds))}",
                     value)
        concrete = value["type"] == "Mesh"
        fields = as_object(value, path, what, ("type", "axis_sizes", "axis_names")
                           + (("devices",) if concrete else ()), ("axis_types",))
        sizes = _ints(fields["axis_sizes"], path + ("axis_sizes",), "a list of axis sizes", 1)
        names = _strs(fields["axis_names"], path + ("axis_names",), "a list of axis names")
        types = fields.get("axis_types")
        if types is not None:
            types = _each(types, path + ("axis_types",), "a list of axis types", self._axis_type)
        with building(path, f"the {value['type']}"):
            if concrete:
                devices = self.device_list(fields["devices"], path + ("devices",))
                return Mesh(sizes, names, devices, types)
            return AbstractMesh(sizes, names, types)

    @staticmethod
    def _axis_type(value: Any, path: tuple) -> AxisType:
        names = [t.value for t in AxisType]
        check_vector(value in names, path, f"an axis type ({', '.join(names)})", value)
        return AxisType(value)

    def spec(self, value: Any, path: tuple) -> PartitionSpec:
        fields = as_object(value, path, "a PartitionSpec", ("type", "partitions"),
                           ("unreduced", "reduced"))
        check_vector(fields["type"] == "PartitionSpec", path + ("type",), '"PartitionSpec"',
                     fields["type"])
        entries = _each(fields["partitions"], path + ("partitions",), "a list of entries",
                        self._entry)
        unreduced = _strs(fields.get("unreduced", []), path + ("unreduced",), "a list of axis names")
        reduced = _strs(fields.get("reduced", []), path + ("reduced",), "a list of axis names")
        with building(path, "the PartitionSpec"):
            return PartitionSpec(*entries, unreduced=unreduced, reduced=reduced)

    @staticmethod
    def _entry(value: Any, path: tuple) -> Any:
        if value == {"type": "UNCONSTRAINED"}:
            return UNCONSTRAINED
        if value is None or isinstance(value, str):
            return value
        return _strs(value, path, 'a PartitionSpec entry: null, an axis name, a list of axis '
                                  'names or {"type": "UNCONSTRAINED"}')

    # ------------------------------------------------------------------ shardings
    SHARDINGS = ("NamedSharding", "SingleDeviceSharding", "GSPMDSharding")
    LAYOUTS = ("Layout", "Layout.AUTO")
    LEAVES = SHARDINGS + ("PartitionSpec", "UNSPECIFIED", "Arg", "python", "Format") + LAYOUTS

    def layout(self, value: Any, path: tuple, allowed: tuple = LAYOUTS) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        check_vector(kind in allowed, path, "a layout: an object with \"type\" "
                     + " or ".join(map(json.dumps, allowed)), value)
        if kind == "Layout.AUTO":
            as_object(value, path, "the Layout.AUTO marker", ("type",))
            return AUTO_LAYOUT
        fields = as_object(value, path, "a Layout", ("type", "major_to_minor"))
        order = _ints(fields["major_to_minor"], path + ("major_to_minor",),
                      "a list of dimensions", 0)
        with building(path, "the Layout"):
            return Layout(order)

    def sharding(self, value: Any, path: tuple, allowed: tuple = LEAVES) -> Any:
        if value is None:
            return None
        kind = value.get("type") if isinstance(value, dict) else None
        check_vector(kind in allowed, path, "null or an object with \"type\" one of "
                     + ", ".join(allowed), value)
        if kind == "PartitionSpec":
            return self.spec(value, path)
        if kind == "UNSPECIFIED":
            as_object(value, path, "the UNSPECIFIED marker", ("type",))
            return UNSPECIFIED
        if kind in self.LAYOUTS:
            return self.layout(value, path)
        if kind == "Format":
            fields = as_object(value, path, "a Format", ("type",), ("layout", "sharding"))
            layout = maybe(self.layout)(fields.get("layout"), path + ("layout",))
            sharding = self.sharding(fields.get("sharding"), path + ("sharding",),
                                     self.SHARDINGS)
            with building(path, "the Format"):
                return Format(layout, sharding)
        if kind == "Arg":
            return self.input(value, path)
        if kind == "python":
            fields = as_object(value, path, "a plain Python leaf", ("type", "value"))
            leaf = fields["value"]
            check_vector(isinstance(leaf, (str, int, float)), path + ("value",),
                         "a string, a number or a boolean", leaf)
            return leaf
        parts = {"NamedSharding": ("mesh", "spec"), "SingleDeviceSharding": ("device",),
                 "GSPMDSharding": ("devices", "hlo")}[kind]
        fields = as_object(value, path, f"a {kind}", ("type", *parts), ("memory_kind",))
        memory = maybe(as_str)(fields.get("memory_kind"), path + ("memory_kind",))
        with building(path, f"the {kind}"):
            if kind == "NamedSharding":
                return NamedSharding(self.mesh(fields["mesh"], path + ("mesh",)),
                                     self.spec(fields["spec"], path + ("spec",)),
                                     memory_kind=memory)
            if kind == "SingleDeviceSharding":
                return SingleDeviceSharding(self.device(fields["device"], path + ("device",)),
                                            memory_kind=memory)
            devices = self.device_list(fields["devices"], path + ("devices",))
            hlo = self.hlo(fields["hlo"], path + ("hlo",))
            return GSPMDSharding(devices, hlo, memory_kind=memory)

    @staticmethod
    def hlo(value: Any, path: tuple) -> Any:
        as_str(value, path, "HLO sharding text such as \"{devices=[2,4]<=[8]}\"")
        with building(path, "the HLO sharding text"):
            return parse_hlo(value)

    def shardings_tree(self, value: Any, path: tuple) -> Any:
        if isinstance(value, dict) and value.get("type") == "UNSPECIFIED":
            return self.sharding(value, path)
        return self.tree(value, path, self.sharding)

    # ------------------------------------------------------------------ pytrees and leaves
    def tree(self, value: Any, path: tuple, leaf: Callable[[Any, tuple], Any]) -> Any:
        if value is None:
            return None
        if isinstance(value, dict) and "type" in value:
            return leaf(value, path)
        kind, inner = _container(value, path, 'a pytree node: null, {"tuple": [...]}, '
                                              '{"list": [...]}, {"dict": {...}} or a leaf '
                                              'object with a "type"')
        if kind == "dict":
            return {k: self.tree(v, path + ("dict", k), leaf) for k, v in inner.items()}
        items = [self.tree(v, path + (kind, i), leaf) for i, v in enumerate(inner)]
        return tuple(items) if kind == "tuple" else items

    def input(self, value: Any, path: tuple) -> Arg | Static:
        kind = value.get("type")
        check_vector(kind in ("Arg", "Static"), path + ("type",), '"Arg" or "Static"', kind)
        if kind == "Static":
            fields = as_object(value, path, "a Static", ("type", "value"))
            return Static(_static(fields["value"], path + ("value",)))
        fields = as_object(value, path, "an Arg", ("type", "kind", "shape"),
                           ("dtype", "sharding", "layout"))
        arg_kind = as_str(fields["kind"], path + ("kind",))
        shape = _ints(fields["shape"], path + ("shape",), "a shape (a list of sizes)", 0)
        dtype = as_str(fields.get("dtype", "float32"), path + ("dtype",))
        sharding = self.sharding(fields.get("sharding"), path + ("sharding",), self.SHARDINGS)
        layout = maybe(lambda v, p: self.layout(v, p, ("Layout",)))(
            fields.get("layout"), path + ("layout",))
        with building(path, "the Arg"):
            return Arg(arg_kind, shape, dtype, sharding, layout)


# =========================================================================== calls and verdicts

class CallReader(CallPartsReader):
    """Reads one call and its verdict, knowing how many devices the call has."""

    def output(self, value: Any, path: tuple) -> Out:
        fields = as_object(value, path, "an Out", ("type", "shape"), ("dtype", "source", "mesh"))
        check_vector(fields["type"] == "Out", path + ("type",), '"Out"', fields["type"])
        shape = _ints(fields["shape"], path + ("shape",), "a shape (a list of sizes)", 0)
        dtype = as_str(fields.get("dtype", "float32"), path + ("dtype",))
        source = maybe(lambda v, p: as_int(v, p, "a flat input index", 0))(
            fields.get("source"), path + ("source",))
        mesh = maybe(lambda v, p: self.mesh(v, p, abstract_only=True))(
            fields.get("mesh"), path + ("mesh",))
        with building(path, "the Out"):
            return Out(shape, dtype, source, mesh)

    def inputs(self, args: Any, kwargs: Any, path: tuple, names: tuple[str, str]
               ) -> tuple[tuple, dict]:
        positional = _each(args, path + (names[0],), "a list of argument trees",
                           lambda v, p: self.tree(v, p, self.input))
        check_vector(isinstance(kwargs, dict), path + (names[1],),
                     "an object of keyword argument trees", kwargs)
        return positional, {k: self.tree(v, path + (names[1], k), self.input)
                            for k, v in kwargs.items()}

    # ------------------------------------------------------------------ options and call
    def options(self, value: Any, path: tuple) -> JitOptions:
        fields = as_object(value, path, "the jit options", (), _OPTION_KEYS)
        get = lambda key, default: fields.get(key, default)  # noqa: E731
        at = lambda key: path + (key,)  # noqa: E731
        with building(path, "the jit options"):
            return JitOptions(
                in_shardings=self.shardings_tree(get("in_shardings", {"type": "UNSPECIFIED"}),
                                                 at("in_shardings")),
                out_shardings=self.shardings_tree(get("out_shardings", {"type": "UNSPECIFIED"}),
                                                  at("out_shardings")),
                static_argnums=_ints(get("static_argnums", []), at("static_argnums"),
                                     "a list of positions"),
                static_argnames=_strs(get("static_argnames", []), at("static_argnames"),
                                      "a list of names"),
                donate_argnums=_ints(get("donate_argnums", []), at("donate_argnums"),
                                     "a list of positions"),
                donate_argnames=_strs(get("donate_argnames", []), at("donate_argnames"),
                                      "a list of names"),
                keep_unused=_bool(get("keep_unused", False), at("keep_unused")),
                device=maybe(self.device_id)(get("device", None), at("device")),
                backend=maybe(as_str)(get("backend", None), at("backend")))

    def call(self, fields: dict, path: tuple) -> Call:
        get = lambda key, default: fields.get(key, default)  # noqa: E731
        at = lambda key: path + (key,)  # noqa: E731
        args, kwargs = self.inputs(get("args", []), get("kwargs", {}), path, ("args", "kwargs"))
        aot = get("aot_args", None), get("aot_kwargs", None)
        aot_args = aot_kwargs = None
        if aot != (None, None):
            aot_args, aot_kwargs = self.inputs(aot[0] if aot[0] is not None else [],
                                               aot[1] if aot[1] is not None else {}, path,
                                               ("aot_args", "aot_kwargs"))
        with building(path, "the call"):
            return Call(
                args=args, kwargs=kwargs,
                outputs=self.tree(get("outputs", {"tuple": []}), at("outputs"), self.output),
                options=self.options(get("options", {}), at("options")),
                context_mesh=maybe(self.mesh)(get("context_mesh", None), at("context_mesh")),
                resource_mesh=maybe(self.mesh)(get("resource_mesh", None), at("resource_mesh")),
                uses=maybe(lambda v, p: _each(v, p, "a list of booleans", _bool))(
                    get("uses", None), at("uses")),
                compiler=maybe(lambda v, p: _each(v, p, "a list of HLO sharding texts or null",
                                                  maybe(self.hlo)))(
                    get("compiler", None), at("compiler")),
                compiler_memory=maybe(lambda v, p: _each(
                    v, p, "a list of memory kinds or null", maybe(as_str)))(
                    get("compiler_memory", None), at("compiler_memory")),
                devices=self.count,
                default_device=self.device_id(get("default_device", 0), at("default_device")),
                process_count=self.limit // self.count,
                aot_args=aot_args, aot_kwargs=aot_kwargs,
                compiler_layouts=self._choices(get("compiler_layouts", None),
                                               at("compiler_layouts")),
                compiler_in_layouts=self._choices(get("compiler_in_layouts", None),
                                                  at("compiler_in_layouts")),
                compiler_in=maybe(lambda v, p: _each(v, p, "a list of HLO sharding texts or null",
                                                     maybe(self.hlo)))(
                    get("compiler_in", None), at("compiler_in")))

    def _choices(self, value: Any, path: tuple) -> Any:
        """The compiler's layout choices: a list of layouts or null, or null."""
        return maybe(lambda v, p: _each(v, p, "a list of layouts or null", maybe(
            lambda w, q: self.layout(w, q, ("Layout",)))))(value, path)

    # ------------------------------------------------------------------ the verdict
    def verdict(self, value: Any, path: tuple) -> Verdict:
        check_vector(isinstance(value, dict) and isinstance(value.get("accepted"), bool), path,
                     'a verdict: an object with "accepted": true or false', value)
        trace = _each(value.get("trace", []), path + ("trace",), "a list of rule IDs", as_rule_id)
        if not value["accepted"]:
            fields = as_object(value, path, "a rejecting verdict",
                               ("accepted", "rule", "error_type"),
                               ("jax_error", "stage", "path", "message", "trace"))
            error_type = as_str(fields["error_type"], path + ("error_type",))
            known = getattr(builtins, error_type, None)
            check_vector(isinstance(known, type) and issubclass(known, BaseException),
                         path + ("error_type",), "the name of a built-in exception type",
                         error_type)
            stages = list(STAGES)
            stage = maybe(as_str)(fields.get("stage"), path + ("stage",))
            check_vector(stage is None or stage in stages, path + ("stage",),
                         f"null or a stage ({', '.join(stages)})", stage)
            return Verdict(False, trace, rule=as_rule_id(fields["rule"], path + ("rule",)),
                           error_type=error_type,
                           jax_error=maybe(as_str)(fields.get("jax_error"), path + ("jax_error",)),
                           message=maybe(as_str)(fields.get("message"), path + ("message",)),
                           path=maybe(as_str)(fields.get("path"), path + ("path",)), stage=stage)
        fields = as_object(value, path, "an accepting verdict", ("accepted", "num_devices"),
                           ("device_assignment", "inputs", "outputs", "kept_inputs", "transfers",
                            "trace"))
        inputs = _each(fields.get("inputs", []), path + ("inputs",), "a list of inputs",
                       lambda v, p: self._placed(v, p, ("path", "sharding")))
        outputs = _each(fields.get("outputs", []), path + ("outputs",), "a list of results",
                        lambda v, p: self._placed(v, p, ("path", "sharding", "committed")))
        in_layouts = tuple(found[-1] for found in inputs)
        out_layouts = tuple(found[-1] for found in outputs)
        assignment = maybe(lambda v, p: _each(v, p, "a list of device ids", self.device_id))(
            fields.get("device_assignment"), path + ("device_assignment",))
        return Verdict(
            True, trace, in_paths=tuple(p for p, _, _ in inputs),
            in_shardings=tuple(s for _, s, _ in inputs),
            out_paths=tuple(p for p, _, _, _ in outputs),
            out_shardings=tuple(s for _, s, _, _ in outputs),
            device_assignment=assignment,
            num_devices=as_int(fields["num_devices"], path + ("num_devices",),
                               "a device count", 0),
            kept_inputs=_ints(fields.get("kept_inputs", []), path + ("kept_inputs",),
                              "a list of flat input indices", 0),
            out_committed=tuple(c for _, _, c, _ in outputs),
            transfers=_strs(fields.get("transfers", []), path + ("transfers",),
                            "a list of input paths"),
            in_layouts=in_layouts, out_layouts=out_layouts)

    def _placed(self, value: Any, path: tuple, keys: tuple) -> tuple:
        """(path, sharding[, committed], layout) of an input or result; the layout is None
        (the default) where the key is absent."""
        fields = as_object(value, path, "an object", keys, ("layout",))
        sharding = self.sharding(fields["sharding"], path + ("sharding",),
                                 self.SHARDINGS + ("UNSPECIFIED",))
        check_vector(sharding is not None, path + ("sharding",), "a sharding or UNSPECIFIED",
                     None)
        found = (as_str(fields["path"], path + ("path",)), sharding)
        if "committed" in keys:
            found += (_bool(fields["committed"], path + ("committed",)),)
        return found + (maybe(self.layout)(fields.get("layout"), path + ("layout",)),)


_OPTION_KEYS = ("in_shardings", "out_shardings", "static_argnums", "static_argnames",
                "donate_argnums", "donate_argnames", "keep_unused", "device", "backend")
CALL_KEYS = ("args", "kwargs", "outputs", "options", "context_mesh", "uses", "compiler",
              "compiler_memory", "devices", "default_device", "process_count", "aot_args",
              "aot_kwargs", "compiler_layouts", "compiler_in_layouts", "compiler_in",
              "resource_mesh")


def as_rule_id(value: Any, path: tuple) -> str:
    """``value`` when it is the ID of a registered rule; VEC-1 at ``path`` otherwise."""
    check_vector(isinstance(value, str) and value in RULES, path, "a registered rule ID", value)
    return value
