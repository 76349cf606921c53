"""Shardings written as text: the compact form ``shardlaw prove`` reads, and the JSON form.

The text form is one of::

    mesh=2x4:x,y spec=x,y                      NamedSharding over devices 0..7 in order
    mesh=2x4:x,y devices=7,6,5,4,3,2,1,0 spec=(x,y),_
    mesh=4x2:y,x devices=<=[2,4]T(1,0) spec=y
    gspmd:{devices=[2,4]<=[8]}                 GSPMDSharding over devices 0..7
    gspmd:{replicated} devices=3,1             (a device list is needed when the HLO
                                                sharding names no device count)
    single:3                                   SingleDeviceSharding on device 3

``spec=`` lists one entry per dimension, separated by commas: an axis name, ``_`` (or
``None``) for a dimension that is not split, or several axes in parentheses. Left out, the
spec is ``P()``. ``devices=`` is a list of device ids, or XLA's iota notation
``<=[dims]T(perm)``; left out, the devices are 0..N-1 in order. Optional on every form:
``memory=KIND``; on a mesh, ``types=auto,explicit,...``. Numbers are ASCII digits.

The JSON form is the sharding object of the jit-call test vectors
(:mod:`shardlaw.spec.vectors.jit_vectors`). The command line and the model check both read and write
shardings through this module; neither imports the other.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["parse_sharding", "sharding_text", "sharding_to_json", "sharding_from_json",
           "ShardingTextError"]


_DIGITS = re.compile(r"[0-9]+")


def _cut(text: str, limit: int = 200) -> str:
    """``repr(text)``, cut to ``limit`` characters for a one-line message."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(text)} characters)"


class ShardingTextError(ValueError):
    """A sharding written in the text or JSON form could not be read."""


# --------------------------------------------------------------------------- reading

def _split_outside_brackets(text: str, is_separator: Any) -> list[str]:
    """Split ``text`` at the characters ``is_separator`` accepts, outside (), [] and {}."""
    parts, depth, current = [], 0, []
    for ch in text:
        depth += (ch in "([{") - (ch in ")]}")
        if depth < 0:
            raise ShardingTextError(f"unbalanced brackets in {_cut(text)}")
        if depth == 0 and is_separator(ch):
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if depth:
        raise ShardingTextError(f"unbalanced brackets in {_cut(text)}")
    return parts + ["".join(current).strip()]


def _words(text: str) -> list[str]:
    return [w for w in _split_outside_brackets(text, str.isspace) if w]


def _entries(text: str) -> list[str]:
    return _split_outside_brackets(text, lambda ch: ch == ",")


def parse_ints(text: str, what: str) -> list[int]:
    """Integers separated by commas (ASCII digits only), or an error naming ``what``."""
    numbers = [x.strip() for x in text.split(",") if x.strip()]
    # ASCII digits only: int() would also read "٣", "1_000" and "+2".
    if not all(_DIGITS.fullmatch(x) for x in numbers):
        raise ShardingTextError(f"{what} must be integers (ASCII digits) separated by commas, "
                                f"got {_cut(text)}")
    return [int(x) for x in numbers]


def _devices(text: str) -> Any:
    """A device list from ids separated by commas, or XLA's iota notation ``<=[dims]T(perm)``."""
    from shardlaw.spec import DeviceList, Iota
    m = re.fullmatch(r"<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?", text.strip())
    if m:
        dims = parse_ints(m[1], "iota dims")
        perm = parse_ints(m[2], "iota perm") if m[2] else None
        return DeviceList(Iota(dims, perm))
    return DeviceList.of_ids(parse_ints(text, "devices"))


def _spec_entry(text: str) -> Any:
    text = text.strip()
    if text in ("_", "None", ""):
        return None
    if text.startswith("(") and text.endswith(")"):
        names = [n.strip() for n in text[1:-1].split(",") if n.strip()]
        return tuple(names)
    if not re.fullmatch(r"[A-Za-z_][\w.-]*", text):
        raise ShardingTextError(f"a spec entry is an axis name, _ or (names, ...); got {_cut(text)}")
    return text


def _named_from_text(fields: dict[str, str]) -> Any:
    """``mesh=2x4:x,y [devices=..] [spec=..] [types=..] [memory=..]``."""
    from shardlaw.spec import AxisType, Mesh, NamedSharding, P
    m = re.fullmatch(r"([0-9x]+):(.+)", fields["mesh"])
    if not m:
        raise ShardingTextError(f"mesh= is SIZESxSIZES:NAMES,NAMES (like 2x4:x,y), got "
                                f"{fields['mesh']!r}")
    sizes = parse_ints(m[1].replace("x", ","), "mesh sizes")
    names = [n.strip() for n in m[2].split(",")]
    in_order = f"<=[{math.prod(sizes)}]"
    devices = _devices(fields.get("devices", in_order))
    types = None
    if "types" in fields:
        words = [t.strip().capitalize() for t in fields["types"].split(",")]
        if any(w not in AxisType.__members__ for w in words):
            raise ShardingTextError(f"types= lists auto, explicit or manual, got "
                                    f"{fields['types']!r}")
        types = tuple(AxisType[w] for w in words)
    spec = P(*(_spec_entry(e) for e in _entries(fields["spec"]))) \
        if fields.get("spec", "").strip() else P()
    return NamedSharding(Mesh(sizes, names, devices, types), spec,
                         memory_kind=fields.get("memory"))


def _fields(tokens: list[str], allowed: set[str], form: str) -> dict[str, str]:
    fields = {}
    for token in tokens:
        key, eq, value = token.partition("=")
        if not eq or key not in allowed:
            raise ShardingTextError(f"{form} takes {', '.join(sorted(allowed))}=...; "
                                    f"cannot read {token!r}")
        fields[key] = value
    return fields


def parse_sharding(text: str) -> Any:
    """The sharding written in the compact text form or as JSON (see the module docstring)."""
    from shardlaw.spec import GSPMDSharding, SingleDeviceSharding, parse_hlo
    text = text.strip()
    if text.startswith("{") and not text.startswith("{devices") and '"' in text:
        try:
            obj = json.loads(text)
        except ValueError as error:  # malformed, or an integer too long to convert
            raise ShardingTextError(f"cannot read JSON {_cut(text)}: {error}") from None
        except RecursionError:
            raise ShardingTextError(f"cannot read JSON {_cut(text)}: it nests too deep") \
                from None
        return sharding_from_json(obj)
    tokens = _words(text)
    if not tokens:
        raise ShardingTextError("an empty sharding")
    head = tokens[0]
    if head.startswith("gspmd:"):
        fields = _fields(tokens[1:], {"devices", "memory"}, "gspmd:")
        hlo = parse_hlo(head[len("gspmd:"):])
        if "devices" in fields:
            devices = _devices(fields["devices"])
        elif hlo.num_devices:
            devices = _devices(f"<=[{hlo.num_devices}]")
        else:
            raise ShardingTextError(f"{head} names no device count; add devices=0,1,...")
        return GSPMDSharding(devices, hlo, memory_kind=fields.get("memory"))
    if head.startswith("single:"):
        fields = _fields(tokens[1:], {"memory"}, "single:")
        ids = parse_ints(head[len("single:"):], "the device id")
        if len(ids) != 1:
            raise ShardingTextError(f"single: takes one device id, got {head!r}")
        return SingleDeviceSharding(ids[0], memory_kind=fields.get("memory"))
    if head.startswith("mesh="):
        fields = _fields(tokens, {"mesh", "devices", "spec", "types", "memory"}, "a mesh form")
        return _named_from_text(fields)
    raise ShardingTextError(f"a sharding starts with mesh=, gspmd: or single:, or is JSON; "
                            f"got {_cut(text)}")


def sharding_from_json(obj: Any) -> Any:
    """The sharding a JSON object describes: the sharding objects of the jit-call vectors
    (:mod:`shardlaw.spec.vectors.jit_vectors`), whose reader refuses what is malformed with VEC-1."""
    from shardlaw.spec.vectors.vector_reader import CallPartsReader
    any_device = 1 << 62  # a lone sharding names no call whose devices would bound its ids
    return CallPartsReader(any_device, any_device).sharding(obj, (), CallPartsReader.SHARDINGS)


# --------------------------------------------------------------------------- writing

def sharding_to_json(sharding: Any) -> dict[str, Any]:
    """The JSON object for a sharding, as the jit-call vectors write it
    (:mod:`shardlaw.spec.vectors.jit_vectors`); read back by :func:`sharding_from_json`."""
    from shardlaw.spec.vectors.vector_writer import sharding_json
    return sharding_json(sharding, ())


def sharding_text(sharding: Any) -> str:
    """The compact text form of a sharding (read back by :func:`parse_sharding`)."""
    from shardlaw.spec import AxisType, GSPMDSharding, NamedSharding, hlo_text
    memory = "" if sharding.memory_kind in (None, "device") else f" memory={sharding.memory_kind}"
    if isinstance(sharding, NamedSharding):
        mesh = sharding.mesh
        words = [f"mesh={'x'.join(map(str, mesh.axis_sizes))}:{','.join(mesh.axis_names)}"]
        if not (mesh.devices.iota is not None and mesh.devices.iota.is_range):
            words.append(f"devices={_devices_text(mesh.devices)}")
        entries = []
        for e in sharding.spec.partitions:
            entries.append("_" if e is None else f"({','.join(e)})" if isinstance(e, tuple)
                           else str(e))
        if entries:
            words.append("spec=" + ",".join(entries))
        if any(t is not AxisType.Auto for t in mesh.axis_types):
            words.append("types=" + ",".join(t.value.lower() for t in mesh.axis_types))
        return " ".join(words) + memory
    if isinstance(sharding, GSPMDSharding):
        devices = sharding.devices
        plain = devices.iota is not None and devices.iota.is_range and \
            len(devices) == sharding.hlo.num_devices
        return f"gspmd:{hlo_text(sharding.hlo)}" + \
            ("" if plain else f" devices={_devices_text(devices)}") + memory
    return f"single:{sharding.device.id}" + memory


def _devices_text(devices: Any) -> str:
    if devices.iota is not None and not devices.iota.is_range:
        return devices.iota.text()
    return ",".join(map(str, devices.ids()))


