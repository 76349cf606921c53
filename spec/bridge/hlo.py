"""The collectives of a compiled executable, read from its HLO text (issue 33).

``jax.jit(f).lower(*args).compile().as_text()`` is the partitioned module XLA runs. This
module reads the collective instructions out of it — ``all-gather``, ``all-reduce``,
``reduce-scatter``, ``all-to-all``, ``collective-permute`` (and their ``-start`` forms) —
as frozen :class:`HloCollective` records: the kind, the replica groups (device ids, each
group in the order the instruction lists it), the result's shape and dtype on one device
and its bytes. It reads text only (no JAX); the spec's prediction
(:mod:`shardlaw.spec.program.collectives`) and the engine's ``explain()`` both hold
themselves to what it reads.

XLA spells replica groups three ways, all read here: a list (``{{0,1},{2,3}}``), an iota
tile (``[2,4]<=[8]``, ``[4,2]<=[2,4]T(1,0)``) and a mesh with the axes a group varies
along (``mesh['axis_0'=2,'axis_1'=4] {'axis_1'}``, with ``device_ids=([2,4]T(1,0))`` when
the devices are not in order).

>>> text = '''ENTRY %main (p: f32[4,8]) -> f32[8,8] {
...   %all-gather = f32[8,8]{1,0} all-gather(%p), channel_id=1, replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, dimensions={0}
... }'''
>>> (c,) = collectives_of(text)
>>> c.kind, c.replica_groups, c.shape, c.dtype, c.bytes_per_device
('all-gather', ((0, 4), (1, 5), (2, 6), (3, 7)), (8, 8), 'f32', 256)
"""

from __future__ import annotations

import dataclasses
import math
import re

__all__ = ["HloCollective", "collectives_of", "replica_groups_of", "KINDS", "HLO_BYTES"]

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")

# bytes of one element of each HLO element type
HLO_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
             "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
             "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "s4": 1, "u4": 1}


@dataclasses.dataclass(frozen=True)
class HloCollective:
    """One collective instruction of a compiled module: its kind (without ``-start``), its
    replica groups (empty for a collective-permute, which has ``pairs``), its result's
    shape and dtype on one device (a tuple result: the first element's, with
    ``bytes_per_device`` the sum) and the computation it is in."""

    kind: str
    replica_groups: tuple[tuple[int, ...], ...]
    shape: tuple[int, ...]
    dtype: str
    bytes_per_device: int
    name: str = ""
    computation: str = ""
    pairs: tuple[tuple[int, int], ...] = ()


_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>\(.*?\)|[\w]+\[[^\]]*\](?:\{[^}]*\})?)"
    r"\s+(?P<op>[\w\-]+)\(")
_ARRAY = re.compile(r"(\w+)\[([^\]]*)\]")
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


def collectives_of(text: str) -> tuple[HloCollective, ...]:
    """Every collective instruction of an HLO module's text, in the order it lists them."""
    out, computation = [], ""
    for line in text.splitlines():
        head = _COMPUTATION.match(line)
        if head and "=" not in line.split("{")[0]:
            computation = head.group(1)
            continue
        found = _INSTRUCTION.match(line)
        if not found:
            continue
        op = found.group("op")
        kind = op[:-len("-start")] if op.endswith("-start") else op
        if kind not in KINDS:
            continue
        arrays = _ARRAY.findall(found.group("shape"))
        dims = [tuple(int(d) for d in a[1].split(",") if d.strip()) for a in arrays]
        size = sum(math.prod(d) * HLO_BYTES.get(t, 4) for (t, _), d in zip(arrays, dims))
        if op.endswith("-start") and kind in ("all-gather", "collective-permute") and len(arrays) > 1:
            # an async start's tuple holds the operand and the result: the result is last
            size = math.prod(dims[-1]) * HLO_BYTES.get(arrays[-1][0], 4)
            arrays, dims = arrays[-1:], dims[-1:]
        out.append(HloCollective(
            kind, replica_groups_of(line), dims[0] if dims else (), arrays[0][0] if arrays else "",
            size, found.group("name"), computation, _pairs(line)))
    return tuple(out)


def _pairs(line: str) -> tuple[tuple[int, int], ...]:
    found = re.search(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", line)
    if not found:
        return ()
    return tuple((int(a), int(b)) for a, b in re.findall(r"\{(\d+),(\d+)\}", found.group(1)))


def replica_groups_of(line: str) -> tuple[tuple[int, ...], ...]:
    """The replica groups an instruction's text names, as device ids (empty: none named).

    >>> replica_groups_of("all-reduce(%a), replica_groups=[2,4]<=[8], to_apply=%add")
    ((0, 1, 2, 3), (4, 5, 6, 7))
    >>> replica_groups_of("x, replica_groups=[4,2]<=[2,4]T(1,0), y")
    ((0, 4), (1, 5), (2, 6), (3, 7))
    >>> replica_groups_of("x, replica_groups={{0,2},{1,3}}, y")
    ((0, 2), (1, 3))
    """
    listed = re.search(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}", line)
    if listed:
        return tuple(tuple(int(d) for d in g.split(",") if d)
                     for g in re.findall(r"\{([\d,]*)\}", listed.group(1)))
    tiled = re.search(r"replica_groups=\[([\d,]+)\]<=(\[[\d,]+\](?:T\([\d,]+\))?)", line)
    if tiled:
        shape = _ints(tiled.group(1))
        ids = _iota(tiled.group(2))
        width = shape[-1]
        return tuple(tuple(ids[k:k + width]) for k in range(0, len(ids), width))
    meshed = re.search(r"replica_groups=mesh\[([^\]]*)\]"
                       r"(?:,\s*device_ids=\((\[[\d,]+\](?:T\([\d,]+\))?)\))?\s*\{([^}]*)\}", line)
    if meshed:
        sizes = [int(s) for _, s in re.findall(r"'([^']*)'=(\d+)", meshed.group(1))]
        names = [n for n, _ in re.findall(r"'([^']*)'=(\d+)", meshed.group(1))]
        ids = _iota(meshed.group(2)) if meshed.group(2) else list(range(math.prod(sizes)))
        varying = [names.index(n) for n in re.findall(r"'([^']*)'", meshed.group(3))]
        return _groups_along(ids, sizes, varying)
    return ()


def _ints(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d]


def _iota(text: str) -> list[int]:
    """The device ids an iota spells: ``[2,4]`` or ``[2,4]T(1,0)`` (reshaped, transposed,
    flattened)."""
    found = re.fullmatch(r"\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    shape = _ints(found.group(1))
    perm = _ints(found.group(2)) if found.group(2) else list(range(len(shape)))
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    out_shape = [shape[p] for p in perm]
    ids = []
    for flat in range(math.prod(shape)):
        index, rest = [], flat
        for size in reversed(out_shape):
            index.append(rest % size)
            rest //= size
        index.reverse()
        ids.append(sum(i * strides[p] for i, p in zip(index, perm)))
    return ids


def _groups_along(ids: list[int], sizes: list[int], varying: list[int]
                  ) -> tuple[tuple[int, ...], ...]:
    """The groups of a mesh of ``ids`` (row-major over ``sizes``) whose members vary along
    the ``varying`` axes (major first), one group per position of the other axes."""
    fixed = [k for k in range(len(sizes)) if k not in varying]
    strides = [math.prod(sizes[k + 1:]) for k in range(len(sizes))]

    def positions(axes: list[int]) -> list[int]:
        out = [0]
        for k in axes:
            out = [o + i * strides[k] for o in out for i in range(sizes[k])]
        return out

    return tuple(tuple(ids[base + offset] for offset in positions(varying))
                 for base in positions(fixed))
