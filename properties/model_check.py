"""Bounded model checking of placement-equivalence: every sharding of a small space, every pair.

Where the property suites sample, this module enumerates. A :class:`Space` lists every
concrete sharding over up to ``max_devices`` devices for values of rank up to
``max_rank``: NamedShardings over every mesh shape of up to ``max_axes`` axes (size-1 axes
included), every device order and every PartitionSpec (each axis on one dimension or on
none, several axes on a dimension in every order, with and without trailing Nones);
GSPMDShardings with every tile assignment (an explicit one over the devices in order, a
plain one over every device order); a SingleDeviceSharding on every device. For every
shape in :meth:`Space.shapes` and every pair ``(a, b)`` that both accept it, :func:`check`
asks three things:

1. does the spec's fast ``placement_equivalent`` (EQ-2) agree with the solver's
   ``prove_equivalent`` (SMT-1), and both with enumerating ``devices_indices_map`` (IDX-1)?
2. does JAX-equivalence (EQ-1) imply placement-equivalence? A pair where it does not is a
   *finding*;
3. which placement-equivalent pairs are written differently, and why: :func:`classify`
   names the class of each (the divergence classes of ``docs/divergences.rst``).

Pairs are reduced by symmetry: relabeling device ids consistently on both sides changes
neither equivalence, so the first sharding of a pair always lists its devices in order.

Run the full check with ``python -m shardlaw.properties.model_check`` (``--help`` for the
bounds); ``tests/test_model_check.py`` runs a small space in the ``ci`` profile and the
default space in ``deep``. :func:`jax_costs` measures, with real JAX, what a pair costs a
JAX user; :func:`write_vectors` writes one test vector per class.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from shardlaw.spec import (
    DeviceList, GSPMDSharding, Iota, Maximal, Mesh, NamedSharding, P, Rejection, Replicated,
    SingleDeviceSharding, SubgroupType, devices_indices_map, hlo_equal, is_fully_replicated,
    jax_equivalent, placement_equivalent, tiled, to_hlo,
)

__all__ = [
    "Space", "Report", "Finding", "CLASSES", "classify", "check", "jax_costs", "cost_line",
    "vector", "write_vectors", "read_vector", "main",
]

Box = tuple[tuple[int, int], ...]
Placement = tuple[tuple[int, Box], ...]

ALPHABETS = (("x", "y", "z"), ("a", "b", "c"))


# --------------------------------------------------------------------------- the space

def _factorizations(n: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every ordered way to write ``n`` as a product of ``parts`` positive integers."""
    if parts == 1:
        yield (n,)
        return
    for first in range(1, n + 1):
        if n % first == 0:
            for rest in _factorizations(n // first, parts - 1):
                yield (first,) + rest


def _specs(axes: tuple[str, ...], rank: int) -> Iterator[P]:
    """Every PartitionSpec of up to ``rank`` entries over ``axes``: each axis on one
    dimension or on none, several on a dimension in every order; trailing Nones both
    written and left out."""
    seen = set()
    for slots in itertools.product(range(-1, rank), repeat=len(axes)):
        per_dim = [[a for a, s in zip(axes, slots) if s == d] for d in range(rank)]
        for orders in itertools.product(*(itertools.permutations(g) for g in per_dim)):
            entries = [None if not g else g[0] if len(g) == 1 else tuple(g) for g in orders]
            while True:
                key = tuple(entries)
                if key not in seen:
                    seen.add(key)
                    yield P(*entries)
                if not entries or entries[-1] is not None:
                    break
                entries = entries[:-1]


@dataclasses.dataclass(frozen=True)
class Space:
    """The bounds of the enumeration.

    ``max_devices``: meshes of 1 .. max_devices devices (ids 0 .. n-1, every order).
    ``max_rank``: values of rank 0 .. max_rank. ``max_axes``: mesh axes per mesh.
    ``renamed``: also every mesh (in device order) with its axes named from a second
    alphabet. ``zero_sizes``: also shapes with a zero-size dimension.
    """

    max_devices: int = 4
    max_rank: int = 2
    max_axes: int = 2
    renamed: bool = True
    zero_sizes: bool = True

    @property
    def size(self) -> int:
        """The one positive dimension size used: every tile count divides it."""
        return math.lcm(*range(1, self.max_devices + 1))

    def shapes(self, rank: int) -> list[tuple[int, ...]]:
        full = (self.size,) * rank
        out = [full]
        if self.zero_sizes:
            out += [full[:j] + (0,) + full[j + 1:] for j in range(rank)]
        return out

    def orders(self, n: int) -> list[tuple[int, ...]]:
        return list(itertools.permutations(range(n)))

    def meshes(self, n: int, ordered_only: bool = False) -> Iterator[Mesh]:
        for count in range(1, self.max_axes + 1):
            for sizes in _factorizations(n, count):
                for order in (self.orders(n) if not ordered_only else [tuple(range(n))]):
                    in_order = order == tuple(range(n))
                    alphabets = ALPHABETS if (self.renamed and in_order) else ALPHABETS[:1]
                    for alphabet in alphabets:
                        yield Mesh(sizes, alphabet[:count], DeviceList.of_ids(order))

    def named(self, rank: int, ordered_only: bool = False) -> Iterator[NamedSharding]:
        for n in range(1, self.max_devices + 1):
            for mesh in self.meshes(n, ordered_only):
                for spec in _specs(mesh.axis_names, rank):
                    yield NamedSharding(mesh, spec)

    def gspmd(self, rank: int, ordered_only: bool = False) -> Iterator[GSPMDSharding]:
        for n in range(1, self.max_devices + 1):
            in_order = DeviceList.of_ids(range(n))
            yield GSPMDSharding(in_order, Replicated())
            for k in range(n):
                yield GSPMDSharding(in_order, Maximal(k))
            for dims in _tile_dims(n, rank):
                subgroups = (SubgroupType.REPLICATED,) if len(dims) > rank else ()
                seen = set()
                # The assignment in device order as an iota, as users write it, first.
                for assignment in [Iota.range(n), *itertools.permutations(range(n))]:
                    hlo = tiled(dims, assignment, subgroups)
                    if hlo not in seen:
                        seen.add(hlo)
                        yield GSPMDSharding(in_order, hlo)
                if not ordered_only:
                    plain = tiled(dims, Iota.range(n), subgroups)
                    for order in self.orders(n)[1:]:
                        yield GSPMDSharding(DeviceList.of_ids(order), plain)

    def single(self, ordered_only: bool = False) -> Iterator[SingleDeviceSharding]:
        for d in range(1 if ordered_only else self.max_devices):
            yield SingleDeviceSharding(d)

    def shardings(self, rank: int, ordered_only: bool = False) -> list[Any]:
        """Every sharding of the space for values of ``rank`` (``ordered_only``: those that
        list their devices in order, the first of each pair)."""
        out: list[Any] = []
        out += self.named(rank, ordered_only)
        out += self.gspmd(rank, ordered_only)
        out += self.single(ordered_only)
        return out


def _tile_dims(n: int, rank: int) -> Iterator[tuple[int, ...]]:
    """Tile assignment dims that cut a rank-``rank`` value over ``n`` devices: the data
    tiles, then a replicated subgroup when the tiles use fewer than ``n`` devices."""
    if rank == 0:
        return
    for used in range(2, n + 1):
        if n % used:
            continue
        for data in _factorizations(used, rank):
            yield data if used == n else data + (n // used,)


# --------------------------------------------------------------------------- classes

# Class slug -> (title, the JAX notion that parts from placement: is_equivalent_to, or only
# equality of the sharding objects, which jit's caches key on). In the order classify
# tests them; docs/divergences.rst has one entry per class.
CLASSES: dict[str, tuple[str, str]] = {
    "zero-size-dimension": ("A zero-size dimension hides the difference", "is_equivalent_to"),
    "replicated-on-different-orders": ("Replicated over devices listed in different orders",
                                       "is_equivalent_to"),
    "copies-listed-in-another-order": ("The copies of a tile listed in another order",
                                       "is_equivalent_to"),
    "compensated-device-order": ("A device order compensated by the tile assignment",
                                 "is_equivalent_to"),
    "same-devices-different-hlo": ("The same device list with another HLO sharding",
                                   "is_equivalent_to"),
    "sharding-type": ("Different sharding types, the same HLO sharding", "=="),
    "hlo-spelling": ("HLO shardings that JAX counts as equal", "=="),
    "renamed-axes": ("Mesh axes renamed", "=="),
    "size-one-axes": ("Mesh axes of size 1 added or removed", "=="),
    "spec-spelling": ("PartitionSpecs that differ only in what splits nothing", "=="),
    "reshaped-mesh": ("Mesh shapes that flatten to the same device order", "=="),
    "several-rewrites": ("Several of the rewrites above at once", "=="),
    "unclassified": ("Written differently in a way no class above names", "=="),
}


def _spelled(s: NamedSharding) -> tuple[tuple[Any, ...], ...]:
    """A NamedSharding's spec with each axis written as its place among the mesh axes of
    size above 1 (a size-1 axis as its place among all axes, marked): the spelling,
    without the names."""
    kept = s.mesh.nontrivial_axes
    out = []
    for entry in s.spec.partitions:
        names = entry if isinstance(entry, tuple) else (entry,) if isinstance(entry, str) else ()
        out.append(tuple(kept.index(n) if n in kept else ("size 1", s.mesh.axis_names.index(n))
                         for n in names))
    return tuple(out)


def _rewrites(a: NamedSharding, b: NamedSharding) -> list[str]:
    """Which rewrites turn one NamedSharding into the other (over the same devices)."""
    found = []
    sizes_a = tuple(a.mesh.axis_sizes[a.mesh.axis_names.index(n)] for n in a.mesh.nontrivial_axes)
    sizes_b = tuple(b.mesh.axis_sizes[b.mesh.axis_names.index(n)] for n in b.mesh.nontrivial_axes)
    if sizes_a != sizes_b:
        return ["reshaped-mesh"]
    if a.mesh.axis_sizes != b.mesh.axis_sizes:
        found.append("size-one-axes")
        if a.mesh.nontrivial_axes != b.mesh.nontrivial_axes:
            found.append("renamed-axes")
    elif a.mesh.axis_names != b.mesh.axis_names:
        found.append("renamed-axes")
    if _spelled(a) != _spelled(b):
        found.append("spec-spelling")
    return found


def classify(a: Any, b: Any, shape: tuple[int, ...]) -> str:
    """The divergence class of a placement-equivalent pair written differently.

    Pairs that JAX calls different (``is_equivalent_to`` false) are classed by why their
    placements still agree; pairs that JAX calls equivalent by how they are written.
    """
    ndim = len(shape)
    if not jax_equivalent(a, b, ndim):
        if 0 in shape and not _placement_equal(a, b, _without_zeros(shape, a, b)):
            return "zero-size-dimension"
        if is_fully_replicated(a) and is_fully_replicated(b):
            return "replicated-on-different-orders"
        if list(a.device_list.ids()) == list(b.device_list.ids()):
            return "same-devices-different-hlo"
        if hlo_equal(to_hlo(a, ndim), to_hlo(b, ndim)):
            return "copies-listed-in-another-order"
        return "compensated-device-order"
    if type(a) is not type(b):
        return "sharding-type"
    if not isinstance(a, NamedSharding):
        return "hlo-spelling"
    found = _rewrites(a, b)
    if not found:
        return "unclassified"
    return found[0] if len(found) == 1 else "several-rewrites"


def _without_zeros(shape: tuple[int, ...], a: Any, b: Any) -> tuple[int, ...]:
    """The shape with each zero-size dimension replaced by a size both shardings divide."""
    ways = [1] * len(shape)
    for s in (a, b):
        hlo = to_hlo(s, len(shape))
        tiles = getattr(hlo, "tiles", None)
        if tiles is not None and hlo.num_devices > 1:
            ways = [math.lcm(w, t) for w, t in zip(ways, tiles)]
    return tuple(n if n else w for n, w in zip(shape, ways))


def _placement_equal(a: Any, b: Any, shape: tuple[int, ...]) -> bool:
    return devices_indices_map(a, shape) == devices_indices_map(b, shape)


# --------------------------------------------------------------------------- the check

@dataclasses.dataclass
class Finding:
    """A pair on which two deciders disagree, or JAX-equivalence without placement-equivalence."""

    what: str
    a: Any
    b: Any
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.what}: {self.a!r} vs {self.b!r} for shape {self.shape}"


@dataclasses.dataclass
class Report:
    """What a bounded check saw: counts, findings, and the smallest example of each class."""

    space: Space
    shardings: int = 0
    pairs: int = 0
    solver_pairs: int = 0
    placement_equivalent: int = 0
    jax_equivalent: int = 0
    classes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    examples: dict[str, tuple[Any, Any, tuple[int, ...]]] = dataclasses.field(default_factory=dict)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    unknown: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        s = self.space
        lines = [f"bounded model check: up to {s.max_devices} devices, rank up to {s.max_rank}, "
                 f"up to {s.max_axes} mesh axes, renamed axes {'on' if s.renamed else 'off'}, "
                 f"zero-size dimensions {'on' if s.zero_sizes else 'off'}",
                 f"  shardings enumerated (summed over ranks): {self.shardings}",
                 f"  pairs checked: {self.pairs}; distinct (device list, HLO) pairs given to "
                 f"the solver: {self.solver_pairs}; "
                 f"placement-equivalent: {self.placement_equivalent}; "
                 f"JAX-equivalent (EQ-1): {self.jax_equivalent}",
                 f"  solver unknown: {self.unknown}; findings: {len(self.findings)}",
                 f"  placement-equivalent pairs written differently, by class "
                 f"({sum(self.classes.values())}):"]
        for slug in CLASSES:
            if self.classes[slug]:
                a, b, shape = self.examples[slug]
                lines.append(f"    {slug:34} {self.classes[slug]:8}  e.g. {a!r} vs {b!r}, "
                             f"shape {shape}")
        lines.append(f"  time: {self.seconds:.1f} s")
        for finding in self.findings[:20]:
            lines.append(f"  FINDING {finding}")
        return "\n".join(lines)


def _key(sharding: Any, rank: int) -> tuple[tuple[int, ...], Any]:
    """What placement depends on: the ordered device ids and the lowered HLO sharding."""
    return tuple(sharding.device_list.ids()), to_hlo(sharding, rank)


def _placements(keys: set[Any], shardings: dict[Any, Any], shape: tuple[int, ...]
                ) -> dict[Any, Placement]:
    """Each key's device -> box map for ``shape`` (absent: the spec rejects the shape)."""
    out = {}
    for key in keys:
        try:
            out[key] = tuple(sorted(devices_indices_map(shardings[key], shape).items()))
        except Rejection:
            pass
    return out


def _smaller(example: tuple[Any, Any, tuple[int, ...]] | None, a: Any, b: Any,
             shape: tuple[int, ...]) -> bool:
    """Whether (a, b, shape) is a better example than the one kept: on more than one
    device, not a scalar, not fully replicated (these show less), fewer GSPMDShardings
    (users write NamedShardings), then fewer devices, shorter to write, lower rank."""
    if example is None:
        return True

    def weight(x: Any, y: Any, s: tuple[int, ...]) -> tuple[Any, ...]:
        n = max(len(x.device_list), len(y.device_list))
        replicated = is_fully_replicated(x) and is_fully_replicated(y)
        gspmd = isinstance(x, GSPMDSharding) + isinstance(y, GSPMDSharding)
        return (n == 1, len(s) == 0, replicated, gspmd, n, len(repr(x)) + len(repr(y)), len(s))
    return weight(a, b, shape) < weight(*example)


def check(space: Space = Space(), *, solver: bool = True, timeout_s: float = 10.0,
          progress: Any = None) -> Report:
    """Run the bounded model check over ``space``.

    The fast rule (EQ-2) and JAX-equivalence (EQ-1) are asked about every pair. Placement
    depends only on each sharding's device list and lowered HLO sharding (LOW-1), so
    enumeration (IDX-1) and the solver (SMT-1, unless ``solver`` is false) are asked once
    per distinct pair of those.
    """
    from shardlaw.spec.prove.smt import prove_equivalent

    report = Report(space)
    started = time.perf_counter()
    for rank in range(space.max_rank + 1):
        firsts = space.shardings(rank, ordered_only=True)
        seconds = space.shardings(rank)
        report.shardings += len(seconds)
        first_keys = [_key(s, rank) for s in firsts]
        second_keys = [_key(s, rank) for s in seconds]
        by_key = dict(zip(first_keys, firsts)) | dict(zip(second_keys, seconds))
        for shape in space.shapes(rank):
            maps = _placements(set(by_key), by_key, shape)
            verdicts: dict[tuple[Any, Any], bool | None] = {}
            for a, key_a in zip(firsts, first_keys):
                if key_a not in maps:
                    continue
                for b, key_b in zip(seconds, second_keys):
                    if key_b not in maps:
                        continue
                    truth = maps[key_a] == maps[key_b]
                    if solver and (key_a, key_b) not in verdicts:
                        verdicts[key_a, key_b] = _solve(report, a, b, shape, truth,
                                                        prove_equivalent, timeout_s)
                    _check_pair(report, a, b, shape, truth)
            if progress is not None:
                progress(f"rank {rank} shape {shape}: {report.pairs} pairs, "
                         f"{report.solver_pairs} solver calls, "
                         f"{time.perf_counter() - started:.0f} s")
    report.seconds = time.perf_counter() - started
    return report


def _solve(report: Report, a: Any, b: Any, shape: tuple[int, ...], truth: bool, prove: Any,
           timeout_s: float) -> bool | None:
    report.solver_pairs += 1
    verdict = prove(a, b, shape, timeout_s=timeout_s).equivalent
    if verdict is None:
        report.unknown += 1
    elif verdict != truth:
        report.findings.append(
            Finding(f"SMT-1 says {verdict}, enumeration says {truth}", a, b, shape))
    return verdict


def _check_pair(report: Report, a: Any, b: Any, shape: tuple[int, ...], truth: bool) -> None:
    report.pairs += 1
    fast = placement_equivalent(a, b, shape)
    if fast != truth:
        report.findings.append(Finding(f"EQ-2 says {fast}, enumeration says {truth}", a, b, shape))
    jax_eq = jax_equivalent(a, b, len(shape))
    report.jax_equivalent += jax_eq
    if jax_eq and not truth:
        report.findings.append(Finding("JAX-equivalent (EQ-1) but placed differently", a, b, shape))
    if not truth:
        return
    report.placement_equivalent += 1
    if a == b:
        return
    slug = classify(a, b, shape)
    report.classes[slug] += 1
    if _smaller(report.examples.get(slug), a, b, shape):
        report.examples[slug] = (a, b, shape)


# --------------------------------------------------------------------------- JAX's costs

# What JAX's errors say, as the words a cost table uses.
_ERRORS = {
    "Received incompatible devices": "incompatible-devices",
    "Computation was compiled for input shardings that disagree": "aot-sharding-mismatch",
    "Sharding passed to jit does not match": "jit-sharding-mismatch",
    "Memory kinds passed to jax.jit does not match": "jit-memory-kind-mismatch",
    "memory_space of all inputs passed to": "memory-space-mismatch",
    "into SdyArray": "no-shardy-form",
}

_COMPILES = [0, 0]  # backend compilations seen; measurements made
_LISTENING = [False]


def _count_compiles() -> None:
    import jax.monitoring

    def listen(event: str, duration: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            _COMPILES[0] += 1
    if not _LISTENING[0]:
        jax.monitoring.register_event_duration_secs_listener(listen)
        _LISTENING[0] = True


def _outcome(call: Any) -> str:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - what JAX raises is the measurement
        text = str(error)
        for start, word in _ERRORS.items():
            if start in text:
                return word
        return f"{type(error).__name__}: {text.splitlines()[0][:80] if text else ''}"
    return "ok"


def jax_costs(a: Any, b: Any, shape: tuple[int, ...]) -> dict[str, Any]:
    """What it costs a JAX user that an argument arrives placed by ``b`` where ``a`` was
    used, measured with real JAX (needs as many devices as the shardings name).

    ``is_equivalent_to`` and ``equal`` (``==``) of the two JAX shardings; ``recompiles``:
    how many backend compilations a jitted function, called first with an array placed
    by ``a``, makes when called with one placed by ``b``; ``mixed_arguments``: a jitted
    function of both arrays; ``aot_call``: the executable compiled for ``a``'s array
    called with ``b``'s; ``in_shardings``: ``jit(f, in_shardings=a)`` called with ``b``'s
    array. Each outcome is ``ok`` or a word for JAX's error.
    """
    import jax
    import numpy as np

    from shardlaw.spec import to_jax
    _count_compiles()
    ja, jb = to_jax(a), to_jax(b)
    values = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    x, y = jax.device_put(values, ja), jax.device_put(values, jb)
    # A constant of its own keeps every measurement's programs apart from earlier ones.
    _COMPILES[1] += 1
    fresh = float(_COMPILES[1])
    twice = jax.jit(lambda v: v * 2 + fresh)
    first = _outcome(lambda: twice(x).block_until_ready())
    before = _COMPILES[0]
    second = _outcome(lambda: twice(y).block_until_ready())
    recompiles: Any = _COMPILES[0] - before
    if first != "ok" or second != "ok":
        recompiles = f"not measured: jit fails ({first if first != 'ok' else second})"
    return {
        "is_equivalent_to": bool(ja.is_equivalent_to(jb, len(shape))),
        "equal": bool(ja == jb),
        "recompiles": recompiles,
        "mixed_arguments": _outcome(lambda: jax.jit(lambda u, v: u + v + fresh)(x, y)),
        "aot_call": _outcome(lambda: jax.jit(lambda v: v * 3 + fresh).lower(x).compile()(y)),
        "in_shardings": _outcome(lambda: jax.jit(lambda v: v * 4 + fresh, in_shardings=ja)(y)),
    }


def cost_line(costs: dict[str, Any]) -> str:
    """The costs of a pair as the docs page writes them (one line, reStructuredText)."""
    return (f"``is_equivalent_to``: {costs['is_equivalent_to']}; ``==``: {costs['equal']}; "
            f"recompiles: {costs['recompiles']}; both in one call: "
            f"{costs['mixed_arguments']}; AOT call: {costs['aot_call']}; "
            f"``in_shardings``: {costs['in_shardings']}")


# --------------------------------------------------------------------------- vectors

VECTOR_FORMAT = "shardlaw-equivalence"
VECTOR_VERSION = 1


def vector(slug: str, a: Any, b: Any, shape: tuple[int, ...],
           costs: dict[str, Any] | None) -> dict[str, Any]:
    """The test vector of one divergence class (the format of ``vectors/equivalence/``)."""
    from shardlaw.sharding_text import sharding_text, sharding_to_json
    from shardlaw.spec.vectors.jit_vectors import JAX_VERSION
    title, parts_from = CLASSES[slug]
    boxes = devices_indices_map(a, shape)
    return {
        "format": VECTOR_FORMAT, "version": VECTOR_VERSION, "jax": JAX_VERSION,
        "class": slug, "title": title, "jax_notion_that_differs": parts_from,
        "shape": list(shape),
        "a": sharding_to_json(a), "b": sharding_to_json(b),
        "a_text": sharding_text(a), "b_text": sharding_text(b),
        "expect": {
            "placement_equivalent": True,
            "jax_equivalent": jax_equivalent(a, b, len(shape)),
            "placement": [[device, [list(r) for r in box]]
                          for device, box in sorted(boxes.items())],
        },
        "jax_costs": costs,
    }


def write_vectors(report: Report, directory: str | Path, *, measure: bool = True) -> list[Path]:
    """Write one vector per class seen in ``report`` to ``directory/<class>.json``; with
    ``measure``, JAX's costs are measured for each."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for slug in CLASSES:
        if slug not in report.examples:
            continue
        a, b, shape = report.examples[slug]
        costs = jax_costs(a, b, shape) if measure else None
        path = directory / f"{slug}.json"
        path.write_text(json.dumps(vector(slug, a, b, shape, costs), indent=1) + "\n",
                        encoding="utf-8")
        written.append(path)
    return written


def read_vector(path: str | Path) -> tuple[dict[str, Any], Any, Any, tuple[int, ...]]:
    """A vector and its two shardings and shape, read back."""
    from shardlaw.sharding_text import sharding_from_json
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data, sharding_from_json(data["a"]), sharding_from_json(data["b"]), \
        tuple(data["shape"])


# --------------------------------------------------------------------------- entry point

def main(argv: list[str] | None = None) -> int:
    """``python -m shardlaw.properties.model_check``: run the check, print the summary."""
    parser = argparse.ArgumentParser(prog="python -m shardlaw.properties.model_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-devices", type=int, default=4)
    parser.add_argument("--max-rank", type=int, default=2)
    parser.add_argument("--max-axes", type=int, default=2)
    parser.add_argument("--no-renamed", action="store_true", help="leave out renamed meshes")
    parser.add_argument("--no-zero-sizes", action="store_true",
                        help="leave out shapes with a zero-size dimension")
    parser.add_argument("--no-solver", action="store_true", help="do not ask the solver")
    parser.add_argument("--write-vectors", metavar="DIR",
                        help="write a vector per class, with JAX's costs measured (needs JAX)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.write_vectors:
        _prepare_jax()
    space = Space(args.max_devices, args.max_rank, args.max_axes, not args.no_renamed,
                  not args.no_zero_sizes)
    report = check(space, solver=not args.no_solver,
                   progress=None if args.quiet else lambda line: print(line, file=sys.stderr))
    print(report.summary())
    if args.write_vectors:
        for path in write_vectors(report, args.write_vectors):
            print(f"wrote {path}")
    return 1 if report.findings else 0


def _prepare_jax(devices: int = 8) -> None:
    import jax
    jax.config.update("jax_num_cpu_devices", devices)


if __name__ == "__main__":
    sys.exit(main())
