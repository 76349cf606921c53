"""The shardlaw cache policy: one executable per placement class (CACHE-11, CACHE-12).

Where jit's caches (``cache.py``) compile again for a sharding only written differently,
the policy keys an executable by the placement class of each sharding: which device holds
which box, in which memory kind. :func:`policy_classes` says, per call of a sequence, the
class it falls in and whether the policy compiles for it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from .call import Arg, Call, Verdict
from .layouts import Layout
from .assignment import replicate_scalars
from .layouts import given_layouts
from ..placement.blocks import devices_indices_map
from ..core.rules import rule
from ..core.shardings import UNSPECIFIED, SingleDeviceSharding
from .cache_keys import abstract_value
from .cache_sites import (
    CallFacts, CallSite, Key, Part, site_verdicts, static_parts, structure_part,
)

__all__ = ["PlacementClass", "PolicyRow", "placement_class", "policy_key", "policy_classes"]


@dataclasses.dataclass(frozen=True)
class PlacementClass:
    """Which device holds which box of the array, and in which memory kind."""

    boxes: tuple
    memory_kind: str | None

    def __repr__(self) -> str:
        return f"<placement class over {len(self.boxes)} device(s), {self.memory_kind}>"


@rule("CACHE-11", mirrors="(none: the shardlaw policy's class of a sharding; EQ-2 made a key)")
def placement_class(sharding: Any, shape: Any) -> PlacementClass:
    """The placement class of a sharding for a shape is its set of (device, box) pairs with its memory kind; two shardings share a class exactly when they are placement-equivalent (EQ-2, which compares memory kinds).

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> reversed_order = Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
    >>> placement_class(NamedSharding(m, P()), (8,)) == placement_class(
    ...     NamedSharding(reversed_order, P()), (8,))
    True
    >>> placement_class(NamedSharding(m, P("x")), (8,)) == placement_class(
    ...     NamedSharding(m, P("y")), (8,))
    False

    A sharding whose devices hold no boxes (unreduced, manual) has no class: IDX-1 refuses it.
    """
    boxes = tuple(sorted(devices_indices_map(sharding, shape).items()))
    return PlacementClass(boxes, sharding.memory_kind)


def _class_or_open(sharding: Any, shape: tuple[int, ...]) -> Any:
    return "open" if sharding is UNSPECIFIED else placement_class(sharding, shape)


def _input_class(sharding: Any, shape: tuple[int, ...], verdict: Verdict) -> Any:
    """(C3) An input left open that jit places itself is in the class of where it goes: the
    one device of a one-device program; replicated over the devices, for a scalar (EXE-1)."""
    devices = verdict.device_assignment.devices
    if sharding is UNSPECIFIED and len(devices) == 1:
        sharding = SingleDeviceSharding(devices[0])
    elif sharding is UNSPECIFIED and len(shape) == 0:
        sharding = replicate_scalars([sharding], [0], devices)[0]
    return _class_or_open(sharding, shape)


@rule("CACHE-12", mirrors="(none: the shardlaw cache policy)")
def policy_key(site: CallSite, verdict: Verdict) -> Key:
    """Under the shardlaw policy a call reuses an executable when it calls the same function with the same program types, placement classes, devices and layouts.

    (C1) The static values, the argument structure and every argument's program type (shape,
    dtype, weak type, memory space, and the mesh and spec of a type on a mesh with Explicit
    axes) are the same.
    (C2) Every kept input and every output sharding has the same placement class (CACHE-11),
    or both are open.
    (C3) An input left open that jit places itself counts as placed there: on a one-device
    program on that device, and a scalar replicated over the devices (EXE-1); whether the
    results are committed is decided per call, not per executable.
    (C4) The device assignment, donation and keep_unused are the same.
    (C5) The layouts are the same: those jit's options give, and the committed arguments'
    own.

    >>> from shardlaw.spec import Arg, AxisType, Call, Layout, Mesh, NamedSharding, Out, P, jit_call
    >>> m, renamed = Mesh.iota((2, 4), ("x", "y")), Mesh.iota((2, 4), ("a", "b"))
    >>> def site(sharding, layout=None):
    ...     call = Call(args=(Arg.committed((8, 8), sharding, layout=layout),), outputs=Out((8, 8)))
    ...     return CallSite(call), jit_call(call)
    >>> policy_key(*site(NamedSharding(m, P("x")))) == policy_key(
    ...     *site(NamedSharding(renamed, P("a", None))))
    True

    Explicit mesh axes are part of an argument's type, which the function can read
    (``jax.typeof(x).sharding``): the same placement written over renamed Explicit axes is
    another program, and another class.

    >>> explicit = (AxisType.Explicit, AxisType.Explicit)
    >>> e = Mesh.iota((2, 4), ("x", "y"), axis_types=explicit)
    >>> e_renamed = Mesh.iota((2, 4), ("a", "b"), axis_types=explicit)
    >>> policy_key(*site(NamedSharding(e, P("x")))) == policy_key(
    ...     *site(NamedSharding(e_renamed, P("a"))))
    False

    A committed argument in another layout is compiled for on its own (LAY-3), and so is
    a layout jit's options give.

    >>> s = NamedSharding(m, P("x"))
    >>> policy_key(*site(s)) == policy_key(*site(s, Layout((0, 1))))
    True
    >>> policy_key(*site(s)) == policy_key(*site(s, Layout((1, 0))))
    False
    """
    facts = site.facts
    parts = [Part("the function", site.function), structure_part(facts),
             *static_parts(facts), *(Part(f"{path} value", _program_type(arg))
                                     for path, arg in facts.flat)]
    for i in verdict.kept_inputs:
        path, arg = facts.flat[i]
        parts.append(Part(f"{path} placement",
                          _input_class(facts.resolved[i], arg.shape, verdict)))
    parts += [Part(f"{path} placement", _class_or_open(s, out.shape))
              for path, out, s in facts.outs]
    parts += [Part("the device assignment", verdict.device_assignment),
              Part("donation", facts.donated),
              Part("keep_unused", site.call.options.keep_unused),
              Part("layouts", _layouts(site.call, facts))]
    return tuple(parts)


def _layouts(call: Call, facts: CallFacts) -> Any:
    """The layouts that shape the executable: those jit's options give (inputs, results) and
    the committed arguments' own (LAY-3); None when every one is the default."""
    given_in, given_out = given_layouts(call.normal)
    held = tuple(_canonical_layout(arg.layout) if arg.kind == "committed" else None
                 for _, arg in facts.flat)
    parts = (tuple(map(_canonical_layout, given_in)), held,
             tuple(map(_canonical_layout, given_out)))
    return None if not any(x is not None for part in parts for x in part) else parts


def _canonical_layout(layout: Any) -> Any:
    return None if isinstance(layout, Layout) and layout.is_default else layout


def _program_type(arg: Arg) -> tuple:
    """What the traced program sees of an argument beyond its placement (CACHE-4 less Auto meshes)."""
    aval = abstract_value(arg)
    explicit = (aval.mesh, aval.spec) if aval.spec is not None else None
    return (aval.shape, aval.dtype, aval.weak_type, aval.memory, explicit)


@dataclasses.dataclass(frozen=True)
class PolicyRow:
    """One call under the policy: its class, and whether the policy compiles for it."""

    index: int
    cls: int | None          # None: rejected
    compiles: bool
    representative: int | None


def policy_classes(sites: Iterable[CallSite]) -> list[PolicyRow]:
    """Per call: the policy class (CACHE-12) it falls in and whether the policy compiles.

    >>> from shardlaw.spec import Arg, Call, Mesh, NamedSharding, Out, P
    >>> m, renamed = Mesh.iota((2, 4), ("x", "y")), Mesh.iota((2, 4), ("a", "b"))
    >>> def site(sharding):
    ...     return CallSite(Call(args=(Arg.committed((8, 8), sharding),), outputs=Out((8, 8))))
    >>> rows = policy_classes([site(NamedSharding(m, P("x"))), site(NamedSharding(renamed, P("a"))),
    ...                        site(NamedSharding(m, P("y")))])
    >>> [(r.cls, r.compiles) for r in rows]
    [(0, True), (0, False), (1, True)]
    """
    seen: dict[Key, tuple[int, int]] = {}
    rows = []
    for index, site, verdict in site_verdicts(sites):
        if not verdict.accepted:
            rows.append(PolicyRow(index, None, False, None))
            continue
        key = policy_key(site, verdict)
        if key in seen:
            cls, first = seen[key]
            rows.append(PolicyRow(index, cls, False, first))
        else:
            seen[key] = (len(seen), index)
            rows.append(PolicyRow(index, len(seen) - 1, True, index))
    return rows
