"""What the prover reads of a sharding: its device list, its tile assignment, its layout.

:class:`Placement` is one sharding's placement of a shape, read after the spec's own checks
(DIV-1, NS-5, DEV-1, IDX-1). The functions below read device orders a digit at a time
rather than entry by entry (an iota's values, and where each value stands), and recognize an
explicit order that is in fact a reshape/transpose. The direct pass and the solver both read
them. No z3 here.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
from typing import Any

from ..core.hlo import Tiled
from ..core.iota import Iota, invert_digits, iota_digits, iota_from_digits
from ..core.shardings import SingleDeviceSharding
from ..core.values import DeviceList
from ..placement.blocks import (
    acts_replicated, box_at, box_of, box_of_tile, per_device_layout, shard_shape,
)
from .answers import Box
from .clock import look_at_clock

# The doors the prover's other modules use; the package's public names are smt.py's.
__all__ = ["Placement", "read_placement", "first_unshared_device", "order_values",
           "order_positions", "device_ids", "same_order", "recognize_iota"]

_PLATFORM = operator.attrgetter("platform")


@dataclasses.dataclass(frozen=True)
class Placement:
    """What the prover needs of one sharding: its device list and, unless every device
    holds the whole value, its tile assignment; and the layout IDX-1 read for ``shape``."""

    sharding: Any
    devices: DeviceList
    tiled: Tiled | None
    order: Iota | None  # the tile assignment as an iota order, when it is one
    shape: tuple[int, ...]
    hlo: Any = None  # the lowered HLO sharding (None: a SingleDeviceSharding)
    piece: tuple[int, ...] = ()

    @property
    def tiles(self) -> tuple[int, ...] | None:
        return None if self.tiled is None else self.tiled.tiles

    @functools.cached_property
    def platforms(self) -> frozenset[str]:
        """The platforms of its devices (one, unless an explicit list mixes them)."""
        if self.devices.iota is not None:
            return frozenset((self.devices.platform,))
        look_at_clock("reading the device platforms")
        return frozenset(map(_PLATFORM, self.devices))

    def box(self, shape: tuple[int, ...], device: int, platform: str | None,
            tile: int | None = None) -> Box | None:
        """The box ``device`` holds (IDX-1), or None when the sharding does not span it;
        with ``platform``, the device is that platform's (the same id elsewhere is another
        device). ``tile``, when known, is the tile that holds it (for a direct pass, which
        found it, so that no index of a long device list is built to find it again)."""
        if tile is not None and shape == self.shape:
            if self.tiled is None:
                return tuple((0, n) for n in shape)
            return box_of_tile(self.tiled, self.piece, tile)
        position = self.devices.position_of(device)
        if position is None or platform is not None and \
                self.devices[position].platform != platform:
            return None
        if shape != self.shape:
            return box_of(self.sharding, shape, device)
        if self.hlo is None:
            return tuple((0, n) for n in shape)
        return box_at(self.hlo, self.piece, shape, position)


def read_placement(sharding: Any, shape: tuple[int, ...]) -> Placement:
    """Run the spec's checks for ``shape`` (DIV-1, NS-5, DEV-1, IDX-1) and read the layout."""
    if isinstance(sharding, SingleDeviceSharding):
        shard_shape(sharding, shape)
        return Placement(sharding, sharding.device_list, None, None, shape)
    hlo, piece, devices = per_device_layout(sharding, shape)
    if acts_replicated(hlo):
        return Placement(sharding, devices, None, None, shape, hlo, piece)
    assignment = hlo.assignment
    order = assignment if isinstance(assignment, Iota) else recognize_iota(assignment)
    return Placement(sharding, devices, hlo, order, shape, hlo, piece)


def first_unshared_device(a: DeviceList, b: DeviceList) -> int | None:
    """The smallest device id in one list but not the other (None: same device set).

    A symbolic list holds the ids ``0 .. N-1``: against it, only the explicit list is read,
    so that a list of 2^40 devices costs no more than the 8 it is compared with.
    """
    if a.iota is not None and b.iota is not None:
        return None if len(a) == len(b) else min(len(a), len(b))
    if a.iota is not None or b.iota is not None:
        symbolic, explicit = (a, b) if a.iota is not None else (b, a)
        ids = set(device_ids(explicit))
        # The first id the explicit list lacks (at most len(ids) steps), and the first it
        # holds beyond the symbolic list's ids.
        missing = next(k for k in itertools.count() if k not in ids)
        beyond = [i for i in ids if i >= len(symbolic)]
        found = ([missing] if missing < len(symbolic) else []) + beyond
        return min(found) if found else None
    unshared = set(device_ids(a)) ^ set(device_ids(b))
    return min(unshared) if unshared else None


def _enumerate(atoms: list[tuple[int, int, int]]) -> list[int]:
    """The values of a digit map ``(radix, in_stride, out_stride)``, position by position.

    The digits must cover the positions without gaps (as an iota's do, either way round).
    """
    values = [0]
    for radix, _, weight in sorted(atoms, key=lambda atom: atom[1]):
        look_at_clock("writing out a symbolic order")
        if len(values) == 1:
            values = list(range(values[0], values[0] + radix * weight, weight))
        elif len(values) >= radix:  # copies of a long list, shifted (map runs in C)
            shifted: list[int] = []
            for k in range(radix):
                shifted.extend(map((k * weight).__add__, values))
            values = shifted
        else:
            values = [v + k * weight for k in range(radix) for v in values]
    return values


def order_values(order: Iota) -> list[int]:
    """``list(order)``, built a digit at a time rather than entry by entry."""
    if order.is_range:
        return list(range(len(order)))
    return _enumerate(iota_digits(order))


def order_positions(order: Iota) -> list[int]:
    """``[order.position_of(v) for v in range(len(order))]``, a digit at a time."""
    return _enumerate(invert_digits(iota_digits(order)))


def device_ids(devices: DeviceList) -> list[int]:
    """The ids of a device list, position by position."""
    look_at_clock("reading a device list")
    if devices.iota is not None:
        return order_values(devices.iota)
    return list(map(_ID, devices))


_ID = operator.attrgetter("id")


def same_order(a: DeviceList, b: DeviceList) -> bool:
    """Whether two device lists hold the same ids in the same order."""
    if a.iota is not None and b.iota is not None:
        return a.iota == b.iota
    return len(a) == len(b) and device_ids(a) == device_ids(b)


def recognize_iota(values: tuple[int, ...] | list[int]) -> Iota | None:
    """The reshape/transpose order that enumerates ``values`` (a permutation), if any.

    An iota order's digits are read off where they start: the value at position
    ``stride`` (every lower digit 0) is the next digit's weight, and the digit runs as long
    as the values keep stepping by that weight. The candidate is then checked in full.
    """
    n = len(values)
    if n == 0 or values[0] != 0:
        return None
    atoms = []
    stride = 1
    while stride < n:
        weight = values[stride]
        radix = 2
        while stride * radix < n and values[stride * radix] == radix * weight:
            radix += 1
        if n % (stride * radix):
            return None
        atoms.append((radix, stride, weight))
        stride *= radix
    if _enumerate(atoms) != list(values):
        return None
    return iota_from_digits(atoms)
