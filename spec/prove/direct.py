"""The prover without z3: the cases decided before any order is read, and the direct pass.

What is cheap is answered first (:func:`decided_early`): device counts that differ (a
symbolic list of 2^40 devices against 8 costs what the 8 cost), memory kinds or platforms
that differ, shapes of size 0 in every dimension.

An *explicit* device list or tile assignment is data the size of the mesh, and the direct
pass (:func:`direct_pass`) reads it: it lists, tile by tile, the device that holds the tile and
the number of its block, and compares the two lists; only the devices at the tiles where
they part are looked up in the other sharding. A few passes in C over the devices
(``benchmarks/bench_prove.py`` part 1: 2^16 devices in milliseconds, 2^20 in a few hundred),
where a solver given one ground instance per device took 0.6 s and 16 s. Symbolic (iota)
orders of small meshes are written out and passed over the same way (*enumeration*).

SMT-2 asks about every shape in scope, but the direct pass needs only one: which devices
differ depends on which dimensions have positive size, and one shape in scope has the most
(:func:`smallest_shape`).

Importing this module imports no z3.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import Any, Sequence

from ..core.values import Device, DeviceList
from .answers import Answer, Counterexample, Question, Unknown
from .clock import Clock, look_at_clock
from .orders import Placement, device_ids, first_unshared_device, order_values

# The doors the prover's other modules use; the package's public names are smt.py's.
__all__ = ["decided_early", "answer_naming", "smallest_shape", "direct_pass"]


# --------------------------------------------------------------------------- decided early

def decided_early(a: Any, b: Any, pa: Placement, pb: Placement, question: Question,
                  clock: Clock) -> Answer | None:
    """The answers that need no order read: device counts, memory kinds, platforms.

    These come before any work in proportion to the devices, so that a list of 2^40
    devices against one of 8 is answered at once.
    """
    example = question.example
    kinds = (None, None) if a.memory_kind == b.memory_kind else (a.memory_kind, b.memory_kind)
    if len(pa.devices) != len(pb.devices):
        device = first_unshared_device(pa.devices, pb.devices)
        assert device is not None  # lists of other lengths never hold the same devices
        return answer_naming(pa, pb, example, device, None, kinds, "direct", clock)
    if not pa.devices:  # no device holds anything: only the memory kinds can differ
        if kinds == (None, None):
            return question.proved(clock, "direct", False)
        return Counterexample(None, None, None, example, 0.0, clock.elapsed(), False, "direct",
                              *kinds)
    if kinds != (None, None):
        # EQ-2: in another memory, every device's box is placed otherwise; name the first.
        first = pa.devices[0]
        return answer_naming(pa, pb, example, first.id, first.platform, kinds, "direct", clock)
    if len(pa.platforms) == len(pb.platforms) == 1 and pa.platforms != pb.platforms:
        # The same ids on another platform are other devices: b holds none of a's.
        first = pa.devices[0]
        return answer_naming(pa, pb, example, first.id, first.platform, kinds, "direct", clock)
    if not any(example) and pa.devices.iota is not None and pb.devices.iota is not None:
        # Every device holds the empty box (or the scalar): the same devices, the same boxes.
        return question.proved(clock, "direct", False)
    return None


def answer_naming(pa: Placement, pb: Placement, shape: tuple[int, ...], device: int,
                  platform: str | None, kinds: tuple[str | None, str | None], method: str,
                  clock: Clock, tables: bool = False,
                  tiles: tuple[int | None, int | None] = (None, None)) -> Answer:
    """The answer naming ``device`` (on ``platform``; None: the lists' own), its box under
    each sharding (IDX-1; ``tiles``: the tiles that hold it, where known) and the memory
    kinds when they differ."""
    box_a = pa.box(shape, device, platform, tiles[0])
    box_b = pb.box(shape, device, platform, tiles[1])
    if box_a == box_b and kinds == (None, None):  # the pass and IDX-1 disagree: a bug
        return Unknown(f"internal: the {method} pass named device {device} for shape {shape}, "
                       f"but box_of gives it {box_a} under both", 0.0, clock.elapsed())
    return Counterexample(device, box_a, box_b, shape, 0.0, clock.elapsed(), tables, method,
                          *kinds)


def smallest_shape(a: Placement, b: Placement, rank: int, max_dim: int) -> tuple[int, ...]:
    """The shape in scope of SMT-2 with the most dimensions of positive size: the least
    positive size both divide along each dimension, or 0 when that exceeds ``max_dim``.

    Which devices hold different boxes depends only on which dimensions have positive size
    (see :func:`direct_pass`), and a dimension that is positive in some shape in scope is
    positive in this one: the placements differ at some shape in scope exactly when they
    differ at this one. A direct answer to SMT-2 looks at this shape alone.
    """
    out = []
    for j in range(rank):
        least = math.lcm((a.tiles or (1,) * rank)[j], (b.tiles or (1,) * rank)[j])
        out.append(least if least <= max_dim else 0)
    return tuple(out)


# --------------------------------------------------------------------------- the direct pass

def direct_pass(pa: Placement, pb: Placement, question: Question, by_device: bool, method: str,
                clock: Clock) -> Answer:
    """Decide by reading the orders once: which block of the array each device holds.

    Two boxes of one dimension of positive size are equal exactly when both shardings cut
    it into as many pieces and the device holds the same piece; a dimension of size 0 is
    the empty range under both. So the pass checks the counts of pieces, then lists, tile
    by tile, the device that holds the tile and the number of its block (its coordinates
    along the dimensions of positive size). Where the two lists agree tile by tile, those
    devices hold the same block under both; only the devices at the tiles where they part
    are looked up in the other sharding. The loops run in C (``operator.itemgetter``,
    ``map``, list comparison): a few passes over the devices, and none when the two
    shardings list their tiles alike.
    """
    shape = question.example
    n = len(pa.devices)
    kept = [j for j, size in enumerate(shape) if size > 0]
    tiles_a = pa.tiles or (1,) * len(shape)
    tiles_b = pb.tiles or (1,) * len(shape)
    if any(tiles_a[j] != tiles_b[j] for j in kept):
        # Pieces of other lengths along a dimension: no device holds the same box under both.
        first = pa.devices[0]
        return answer_naming(pa, pb, shape, first.id, first.platform, (None, None), method,
                             clock, True)
    holder_a, holder_b = _devices_by_tile(pa, by_device), _devices_by_tile(pb, by_device)
    blocks_a, blocks_b = _block_numbers(pa, kept, n), _block_numbers(pb, kept, n)
    if isinstance(blocks_a, range) != isinstance(blocks_b, range):
        blocks_a, blocks_b = list(blocks_a), list(blocks_b)
    look_at_clock("comparing the blocks tile by tile")
    parting = _parting(holder_a, holder_b)
    if blocks_a != blocks_b:
        parting = sorted(set(parting).union(_parting(blocks_a, blocks_b)))
    if not parting:
        return question.proved(clock, method, True)
    look_at_clock("looking up the devices where the tiles part")
    # A device at a tile where the lists part is, in the other list, at such a tile too
    # (the tiles where they agree hold other devices), or not there at all.
    devices = _gather(holder_a, parting)
    tile_under_b = dict(zip(_gather(holder_b, parting), parting))
    try:
        others = _gather(tile_under_b, devices)
    except KeyError:  # not under b: name the first device only one of them spans
        unshared = min(set(holder_a) ^ set(holder_b))
        return _counterexample_at(pa, pb, shape, unshared, (None, None), method, clock)
    look_at_clock("comparing the blocks of the devices where the tiles part")
    differing = _parting(_gather(blocks_a, parting), _gather(blocks_b, others))
    if not differing:
        return question.proved(clock, method, True)
    k = differing[0]
    return _counterexample_at(pa, pb, shape, devices[k], (parting[k], others[k]), method, clock)


def _gather(items: Any, indices: list[Any]) -> list[Any]:
    """``[items[i] for i in indices]``, the loop run in C (operator.itemgetter)."""
    if len(indices) < 2:
        return [items[i] for i in indices]
    return list(operator.itemgetter(*indices)(items))


def _parting(x: list[Any], y: list[Any]) -> list[int]:
    """The indices where two lists of one length differ, found a slice at a time (a slice
    compares in C; only slices that differ are looked into)."""
    step, out = 4096, []
    for start in range(0, len(x), step):
        xs, ys = x[start:start + step], y[start:start + step]
        if xs != ys:
            out.extend(itertools.compress(range(start, start + len(xs)),
                                          map(operator.ne, xs, ys)))
    return out


def _counterexample_at(pa: Placement, pb: Placement, shape: tuple[int, ...], key: Any,
                       tiles: tuple[int | None, int | None], method: str,
                       clock: Clock) -> Answer:
    """The counterexample of a direct pass at a device key (an id, or a Device)."""
    device, platform = (key.id, key.platform) if isinstance(key, Device) else (key, None)
    return answer_naming(pa, pb, shape, device, platform, (None, None), method, clock, True,
                         tiles)


def _device_keys(devices: DeviceList, by_device: bool) -> list[Any]:
    """Each position's device: its id, or the Device itself where the lists span more than
    one platform (the same id on two platforms is two devices)."""
    if by_device:
        look_at_clock("reading a device list")
        return list(devices)
    return device_ids(devices)


def _devices_by_tile(placement: Placement, by_device: bool) -> list[Any]:
    """The device that holds each tile, tile by tile (for a sharding under which every
    device holds the whole value: every device, in list order)."""
    devices, tiled = placement.devices, placement.tiled
    if tiled is None or placement.order is not None and placement.order.is_range:
        return _device_keys(devices, by_device)
    look_at_clock("reading a tile assignment")
    positions = (tiled.assignment if placement.order is None
                 else order_values(placement.order))
    if not by_device and devices.iota is not None and devices.iota.is_range:
        return list(positions)  # device i stands at position i
    keys = _device_keys(devices, by_device)
    look_at_clock("reading a tile assignment")
    return _gather(keys, positions)


def _block_numbers(placement: Placement, kept: list[int], n: int) -> Sequence[int]:
    """Each tile's block: its coordinates along the dimensions ``kept`` (those of positive
    size), numbered row-major. Both shardings cut those dimensions alike, so the numbers
    name the same blocks under both."""
    tiled = placement.tiled
    if tiled is None or not any(tiled.dims[j] > 1 for j in kept):
        return [0] * n
    look_at_clock("numbering the blocks")
    dims, rank = tiled.dims, tiled.data_rank
    if all(dims[j] == 1 for j in range(rank) if j not in kept):
        copies = math.prod(dims[rank:])  # the tiles of one block are neighbours
        if copies == 1:
            return range(n)  # type: ignore[return-value]  # compared in O(1) with another
        return list(map(copies.__rfloordiv__, range(n)))
    # A dimension of size 0 is cut too: its coordinate is left out of the number, which is
    # summed a dimension at a time (each step a few maps, run in C).
    numbers: list[int] = [0] * n
    for j in kept:
        stride, weight = math.prod(dims[j + 1:]), math.prod(dims[k] for k in kept if k > j)
        look_at_clock("numbering the blocks")
        coordinate = map(dims[j].__rmod__, map(stride.__rfloordiv__, range(n)))
        numbers = list(map(operator.add, numbers, map(weight.__mul__, coordinate)))
    return numbers
