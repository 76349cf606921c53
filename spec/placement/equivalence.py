"""Two notions of "the same sharding", kept apart and named.

*JAX-equivalence* (``EQ-1``) is what ``Sharding.is_equivalent_to(other, ndim)`` answers in
jax 0.10.2: equal HLO shardings (any two over a single device position count as equal),
equal memory kinds, and equal ordered device lists (unless both are over abstract meshes).

*Placement-equivalence* (``EQ-2``) is what a user means: for this shape, the two shardings
span the same devices, every device holds the same box of the array, and in the same memory
kind. :func:`blocks_equivalent` is the same question with memory kinds left out.

The two part ways in both directions on purpose; see the docs page "Where the two
equivalences part". Placement-equivalence is decided symbolically when both device lists
and both tile assignments are iotas (cost independent of the device count), and by
comparing every device's box otherwise.
"""

from __future__ import annotations

import math
from typing import Any

from ..core.hlo import HloSharding, Tiled
from ..core.iota import Atom, Iota, compose_digits, iota_digits, invert_digits, merge_digits, split_digits
from .blocks import (
    acts_replicated, check_places, check_shape, devices_indices_map, devices_of, num_devices,
    per_device_layout, to_hlo,
)
from ..core.rules import reject, rule
from ..core.shardings import NamedSharding, NotASharding, SingleDeviceSharding
from ..core.values import AbstractMesh

__all__ = ["hlo_equal", "jax_equivalent", "placement_equivalent", "blocks_equivalent"]


@rule("EQ-3", mirrors="jax._src.op_shardings.are_hlo_shardings_equal")
def hlo_equal(a: HloSharding, b: HloSharding) -> bool:
    """Two HLO shardings are equal when both act replicated (replicated, or over a single device position) or when they are identical in XLA's canonical form.

    >>> from shardlaw.spec.core.hlo import parse_hlo
    >>> hlo_equal(parse_hlo("{maximal device=0}"), parse_hlo("{replicated}"))
    True
    >>> hlo_equal(parse_hlo("{devices=[2,2]<=[4]}"), parse_hlo("{devices=[2,2]0,1,2,3}"))
    True
    >>> hlo_equal(parse_hlo("{devices=[2,2]<=[4]}"), parse_hlo("{devices=[2,2]<=[2,2]T(1,0)}"))
    False
    """
    # Both are HLO shardings (VAL-8): the comparison reads their device counts and tiles
    for which, value in (("the first HLO sharding", a), ("the second HLO sharding", b)):
        if not isinstance(value, HloSharding):
            raise reject(NotASharding(which, "an HloSharding", value))
    if a is b:
        return True
    if acts_replicated(a) and acts_replicated(b):
        return True
    return a == b


def _is_abstract(s: Any) -> bool:
    return isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh)


@rule("EQ-1", mirrors="jax._src.sharding.common_is_equivalent_to; NamedSharding.is_equivalent_to")
def jax_equivalent(a: Any, b: Any, ndim: int) -> bool:
    """Two shardings are JAX-equivalent for rank ``ndim`` when they lower to equal HLO shardings, have the same memory kind, and list the same devices in the same order (device lists are not compared when both meshes are abstract).

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> jax_equivalent(NamedSharding(m, P("x")), NamedSharding(m, P("x", None)), 2)
    True
    >>> reversed_order = Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
    >>> jax_equivalent(NamedSharding(m, P()), NamedSharding(reversed_order, P()), 2)
    False
    """
    same_hlo = hlo_equal(to_hlo(a, ndim), to_hlo(b, ndim))
    same_memory = a.memory_kind == b.memory_kind
    if _is_abstract(a) and _is_abstract(b):
        return same_hlo and same_memory
    return same_hlo and same_memory and a.device_list == b.device_list


def _symbolic_form(sharding: Any, shape: tuple[int, ...]) -> tuple | None:
    """Device id -> box, as per-dimension digit atoms; None when not iota-expressible."""
    hlo, piece, devices = per_device_layout(sharding, shape)
    if devices.iota is None:
        return None
    ndim = len(shape)
    if acts_replicated(hlo):
        return ((devices.platform, len(devices)),) + tuple(
            None if n == 0 else (1, ()) for n in shape)
    assert isinstance(hlo, Tiled)
    if not isinstance(hlo.assignment, Iota):
        return None
    # device id -> position -> flat tile index
    id_to_tile = compose_digits(invert_digits(iota_digits(devices.iota)),
                                invert_digits(iota_digits(hlo.assignment)))
    if id_to_tile is None:
        return None
    strides = [math.prod(hlo.dims[j + 1:]) for j in range(len(hlo.dims))]
    atoms = split_digits(id_to_tile, strides + [s * d for s, d in zip(strides, hlo.dims)], 2)
    if atoms is None:
        return None
    per_dim: list[list[Atom]] = [[] for _ in range(ndim)]
    for r, i, o in atoms:
        for j in range(ndim):
            if strides[j] <= o < strides[j] * hlo.dims[j]:
                per_dim[j].append((r, i, o // strides[j]))
    form = []
    for j in range(ndim):
        if shape[j] == 0:
            form.append(None)  # every device holds the empty range of this dimension
        else:
            form.append((hlo.dims[j], merge_digits(per_dim[j])))
    return ((devices.platform, len(devices)),) + tuple(form)


@rule("EQ-2", mirrors="(none: JAX has no such notion; it compares devices_indices_map by hand)")
def placement_equivalent(a: Any, b: Any, shape: Any) -> bool:
    """Two shardings are placement-equivalent for a shape when they span the same devices, every device holds the same box of the array, and both hold it in the same memory kind.

    A ``pinned_host`` sharding and the same blocks in device memory are not
    placement-equivalent: the data lives in another memory, and going from one to the other
    is a transfer (JAX calls them different too). :func:`blocks_equivalent` compares the
    blocks alone.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> renamed = Mesh.iota((2, 4), ("a", "b"))
    >>> placement_equivalent(NamedSharding(m, P("x")), NamedSharding(renamed, P("a")), (4, 4))
    True
    >>> placement_equivalent(NamedSharding(m, P("x")), NamedSharding(m, P("y")), (4, 4))
    False
    >>> pinned = NamedSharding(m, P("x"), memory_kind="pinned_host")
    >>> placement_equivalent(NamedSharding(m, P("x")), pinned, (4, 4))
    False
    >>> blocks_equivalent(NamedSharding(m, P("x")), pinned, (4, 4))
    True
    """
    # The blocks first: a sharding placement cannot accept is refused whatever its memory.
    same_blocks = blocks_equivalent(a, b, shape)
    return same_blocks and a.memory_kind == b.memory_kind


def blocks_equivalent(a: Any, b: Any, shape: Any) -> bool:
    """Whether two shardings put the same box of the array on the same devices, in whatever
    memory kinds (EQ-2 without the memory kind)."""
    shape = check_shape(shape)
    for s in (a, b):
        devices_of(s, "placement-equivalence")  # abstract meshes place nothing
    if isinstance(a, SingleDeviceSharding) or isinstance(b, SingleDeviceSharding):
        return _same_boxes(a, b, shape)
    if num_devices(a) != num_devices(b):
        check_places(a, shape), check_places(b, shape)  # still reject what IDX-1 rejects
        return False
    fa, fb = _symbolic_form(a, shape), _symbolic_form(b, shape)
    if fa is not None and fb is not None:
        return fa == fb
    return _same_boxes(a, b, shape)


def _same_boxes(a: Any, b: Any, shape: tuple[int, ...]) -> bool:
    # A device is its id on its platform: the same ids on two platforms are other devices.
    platforms = {d.platform for s in (a, b) for d in devices_of(s, "placement-equivalence")}
    if len(platforms) > 1:
        check_places(a, shape), check_places(b, shape)
        return False
    return devices_indices_map(a, shape) == devices_indices_map(b, shape)
