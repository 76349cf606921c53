"""The collectives of a compiled program, read from its HLO text.

:func:`collectives_in_hlo` takes the text a compiled executable prints
(``jax.jit(f).lower(...).compile().as_text()`` in JAX 0.10.2, after XLA's partitioner) and
returns one :class:`Collective` per all-gather, all-reduce, reduce-scatter, all-to-all and
collective-permute in it, in the order they are printed: its kind, the groups of devices
that take part together, the shape and element type of its result on one device, and the
bytes of that result. It is the one reader of compiled HLO text in shardlaw: the engine's
``explain()`` shows what it finds beside the executable it ran, and the spec's prediction of
collectives is compared with it.

The replica groups are written in three forms, each turned into explicit device ids
(the ids of ``use_global_device_ids``, positions among the program's devices)::

    replica_groups={{0,1,2,3},{4,5,6,7}}          explicit ({} is every device in one group)
    replica_groups=[2,4]<=[4,2]T(1,0)              iota: ids 0..7 reshaped, transposed, cut
    replica_groups=mesh['a'=2,'b'=4] {'b'}         the groups along mesh axes ('b:(2)2' is a
                                                   sub-axis: pre-size 2, size 2), the mesh's
                                                   devices in order or as device_ids=(...)

A collective-permute has no groups; its ``source_target_pairs`` say who sends to whom. An
asynchronous collective (``all-gather-start`` ... ``all-gather-done``) is read at its start,
as the kind without the suffix. Data and the standard library only: the engine and the
spec both read it, and neither imports the other.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Iterator

__all__ = ["Collective", "KINDS", "collectives_in_hlo", "total_bytes_per_device"]

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")

Groups = tuple[tuple[int, ...], ...]


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective of a compiled program, as its HLO prints it.

    ``kind`` is one of :data:`KINDS`; ``replica_groups`` the device ids that take part
    together (empty for a collective-permute, whose ``source_target_pairs`` say who sends to
    whom); ``shape`` and ``dtype`` the result on one device (its first array, when the
    collective moves several, as XLA's tuple form of all-to-all does); ``bytes_per_device``
    the bytes of its whole result on one device; ``operand_shapes`` and ``result_shapes``
    every array in and out on one device; ``dimensions`` the dimension(s) it gathers,
    scatters or exchanges along; ``name`` the HLO instruction and ``op_name`` the JAX
    operation it was made for (from the metadata; empty when none is printed).
    """

    kind: str
    replica_groups: Groups
    shape: tuple[int, ...]
    dtype: str
    bytes_per_device: int
    operand_shapes: tuple[tuple[int, ...], ...] = ()
    result_shapes: tuple[tuple[int, ...], ...] = ()
    source_target_pairs: tuple[tuple[int, int], ...] = ()
    dimensions: tuple[int, ...] = ()
    name: str = ""
    op_name: str = ""


def collectives_in_hlo(text: str) -> list[Collective]:
    """Every collective in compiled HLO ``text``, in the order printed (see the module's words)."""
    if not isinstance(text, str):
        raise TypeError(f"collectives_in_hlo takes HLO text (a str), not {type(text).__name__}")
    # (a long tuple type numbers its elements in comments: "/*index=5*/f32[1,1]")
    text = _COMMENT.sub("", text)
    devices = _device_count(text)
    types = {m["name"]: m["type"] for m in _INSTRUCTION.finditer(text)}
    found = []
    for m in _INSTRUCTION.finditer(text):
        kind = _kind(m["opcode"])
        if kind is None:
            continue
        arrays = _arrays(m["type"])
        if m["opcode"].endswith("-start"):
            arrays = _started_results(kind, arrays, len(_operand_names(m["rest"])))
        operands = tuple(a for name in _operand_names(m["rest"])
                         for a in _arrays(types.get(name, "")))
        attributes = m["rest"]
        dtype, shape = arrays[0] if arrays else ("", ())
        found.append(Collective(
            kind=kind,
            replica_groups=() if kind == "collective-permute" else
            _replica_groups(attributes, devices, m["name"]),
            shape=shape, dtype=dtype, bytes_per_device=sum(_bytes(d, s) for d, s in arrays),
            operand_shapes=tuple(s for _, s in operands),
            result_shapes=tuple(s for _, s in arrays),
            source_target_pairs=_pairs(attributes),
            dimensions=_ints(_attribute(attributes, r"dimensions=\{([^}]*)\}")),
            name=m["name"], op_name=_attribute(attributes, r'op_name="([^"]*)"')))
    return found


def total_bytes_per_device(collectives: list[Collective]) -> int:
    """The bytes every collective of a program leaves on one device, added up."""
    return sum(c.bytes_per_device for c in collectives)


# ------------------------------------------------------------------ instructions and shapes

# One instruction: "%name = TYPE opcode(operands), attributes" (ROOT before it, maybe).
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>\([^=]*?\)|[\w]+\[[^\]]*\](?:\{[^}]*\})?)"
    r"\s+(?P<opcode>[\w\-]+)\((?P<rest>.*)$", re.M)
_COMMENT = re.compile(r"/\*.*?\*/")
_ARRAY = re.compile(r"(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")


def _kind(opcode: str) -> str | None:
    """The collective an opcode is (its asynchronous start included), else None."""
    base = opcode[:-len("-start")] if opcode.endswith("-start") else opcode
    return base if base in KINDS else None


def _arrays(type_text: str) -> list[tuple[str, tuple[int, ...]]]:
    """(element type, per-device shape) of every array in an HLO type (tuples flattened)."""
    out = []
    for m in _ARRAY.finditer(type_text):
        if m["dtype"] in ("token",):
            continue
        dims = tuple(int(d) for d in re.findall(r"\d+", m["dims"]))
        out.append((_DTYPES.get(m["dtype"], m["dtype"]), dims))
    return out


def _started_results(kind: str, arrays: list, operands: int) -> list:
    """The results of an asynchronous collective's start, whose type also holds its operands
    (and, for a collective-permute, two context words)."""
    if kind == "all-reduce" or len(arrays) <= operands:
        return arrays
    if kind == "collective-permute":
        return arrays[1:2]
    return arrays[operands:2 * operands]


def _operand_names(rest: str) -> list[str]:
    """The names of an instruction's operands (the text up to its closing parenthesis)."""
    depth, end = 1, 0
    for end, char in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            break
    return re.findall(r"%([\w.\-]+)", rest[:end])


# Element types in numpy's names; bits per element follow from the names.
_DTYPES = {"pred": "bool", "bf16": "bfloat16", "c64": "complex64", "c128": "complex128",
           **{f"s{b}": f"int{b}" for b in (2, 4, 8, 16, 32, 64)},
           **{f"u{b}": f"uint{b}" for b in (2, 4, 8, 16, 32, 64)},
           **{f"f{b}": f"float{b}" for b in (16, 32, 64)}}


def _bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """The bytes an array of ``shape`` takes (sub-byte types packed)."""
    bits = 8 if dtype == "bool" else int((re.search(r"\d+", dtype) or [8])[0])
    return math.ceil(math.prod(shape) * bits / 8)


def _attribute(rest: str, pattern: str) -> str:
    m = re.search(pattern, rest)
    return m[1] if m else ""


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"-?\d+", text))


def _pairs(rest: str) -> tuple[tuple[int, int], ...]:
    text = _attribute(rest, r"source_target_pairs=\{((?:\{[^}]*\},?)*)\}")
    return tuple((a, b) for a, b in (_ints(p) for p in re.findall(r"\{([^}]*)\}", text)))


def _device_count(text: str) -> int:
    """How many devices the program runs on (its module's partitions times replicas)."""
    partitions = re.search(r"num_partitions=(\d+)", text)
    replicas = re.search(r"replica_count=(\d+)", text)
    return (int(partitions[1]) if partitions else 1) * (int(replicas[1]) if replicas else 1)


# ------------------------------------------------------------------------ replica groups

def _replica_groups(rest: str, devices: int, name: str) -> Groups:
    """The device ids of each group, from whichever of the three forms the HLO prints."""
    explicit = re.search(r"replica_groups=\{((?:\{[^}]*\},?)*)\}", rest)
    if explicit:
        groups = tuple(_ints(g) for g in re.findall(r"\{([^}]*)\}", explicit[1]))
        return groups or (tuple(range(devices)),)
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", rest)
    if iota:
        ids = _iota(_ints(iota[3]), _ints(iota[4] or ""))
        size = int(iota[2])
        return tuple(tuple(ids[i:i + size]) for i in range(0, len(ids), size))
    mesh = _MESH_GROUPS.search(rest)
    if mesh:
        return _mesh_groups(mesh)
    raise ValueError(f"collective {name}: replica groups in a form not read: {rest[:200]}")


def _iota(reshape: tuple[int, ...], perm: tuple[int, ...]) -> list[int]:
    """0..n-1 laid out over ``reshape`` and read in the order of the transposition ``perm``."""
    perm = perm or tuple(range(len(reshape)))
    strides = [math.prod(reshape[i + 1:]) for i in range(len(reshape))]
    return [sum(index[k] * strides[perm[k]] for k in range(len(perm)))
            for index in _indices(tuple(reshape[p] for p in perm))]


def _indices(dims: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Every index of an array of ``dims``, in row-major order."""
    if not dims:
        yield ()
        return
    for head in range(dims[0]):
        for tail in _indices(dims[1:]):
            yield (head, *tail)


_MESH_GROUPS = re.compile(
    r"replica_groups=mesh\[(?P<axes>[^\]]*)\]"
    r"(?:,\s*device_ids=\((?P<ids>\[[\d,]+\](?:T\([\d,]+\))?|[\d,\s]+)\))?"
    r"\s*\{(?P<grouped>[^}]*)\}")


def _mesh_groups(m: re.Match[str]) -> Groups:
    """The groups along some mesh axes (or sub-axes): the mesh's devices with the grouped
    factors moved last, cut into groups of their size."""
    names = [n for n, _ in re.findall(r"'([^']*)'=(\d+)", m["axes"])]
    sizes = [int(s) for _, s in re.findall(r"'([^']*)'=(\d+)", m["axes"])]
    ids = _device_ids(m["ids"], sizes)
    refs = [(names.index(a), int(pre) if pre else None, int(size) if size else None)
            for a, pre, size in re.findall(r"'([^']*)'(?::\((\d+)\)(\d+))?", m["grouped"])]
    factors: list[int] = []     # each mesh axis cut into the factors its references name
    grouped: dict[int, int] = {}    # reference (in the printed order) -> factor position
    for axis, size in enumerate(sizes):
        here = sorted((pre or 1, k) for k, (a, pre, _) in enumerate(refs) if a == axis)
        done = 1
        for pre, k in here:
            ref_size = refs[k][2] or size
            if pre > done:
                factors.append(pre // done)
                done = pre
            grouped[k] = len(factors)
            factors.append(ref_size)
            done *= ref_size
        if done < size or not here:
            factors.append(size // done)
    order = [f for f in range(len(factors)) if f not in grouped.values()]
    order += [grouped[k] for k in range(len(refs))]
    laid = [ids[i] for i in _iota(tuple(factors), tuple(order))]
    per_group = math.prod(factors[grouped[k]] for k in range(len(refs)))
    return tuple(tuple(laid[i:i + per_group]) for i in range(0, len(laid), per_group))


def _device_ids(text: str | None, sizes: list[int]) -> list[int]:
    """The mesh's device ids in row-major order: 0..n-1, an iota, or a list."""
    count = math.prod(sizes)
    if not text:
        return list(range(count))
    iota = re.fullmatch(r"\[([\d,]+)\](?:T\(([\d,]+)\))?", text.strip())
    if iota:
        return _iota(_ints(iota[1]), _ints(iota[2] or ""))
    return list(_ints(text))
