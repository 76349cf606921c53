"""The fuzz layer's values: what a parameter is meant to take, and what it should refuse.

:func:`plausible` draws by parameter name the values a user means to pass, valid or nearly
(the transformations' names come from their own modules, ``fuzz_arguments.py`` ...);
:func:`hostile` draws wrong types, bools, floats, NaN and inf, numpy scalars, Decimal,
integers of 2^63 and more, negative and zero sizes, duplicates, 2,000-deep nesting and
mutated HLO text; :func:`argument` mixes the two. :func:`vector_files` mutates the stored
test vectors as a hostile file would be, for the spec's readers and the command line alike.
"""

from __future__ import annotations

import decimal
import fractions
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.vectors import dump_vector, vector_text

from . import fuzz_arguments, fuzz_autodiff, fuzz_batching, fuzz_constraint, fuzz_shardmap
from .strategies import meshes, partition_specs, shardings

__all__ = ["hostile", "plausible", "argument", "hlo_texts", "vector_files", "vectors_folder",
           "seed_files", "ALWAYS_PLAUSIBLE", "HUGE_INTS"]

# Where the repository's vectors may be: named by the environment, the folder a command runs
# in (a checkout), beside the package (an editable install). A wheel has none of its own.
VECTORS_VARIABLE = "SHARDLAW_VECTORS"
PACKAGE_VECTORS = Path(__file__).resolve().parent.parent / "vectors"


# =========================================================================== hostile values

def _nested(depth: int, kind: str) -> Any:
    value: Any = 2
    for _ in range(depth):
        value = [value] if kind == "list" else (value,) if kind == "tuple" else {"k": value}
    return value


_DEEP = [_nested(2000, "list"), _nested(2000, "tuple"), _nested(2000, "dict"),
         _nested(60, "tuple")]

HUGE_INTS = [2**31, 2**31 - 1, 2**32, 2**63 - 1, 2**63, 2**64, 2**100, -(2**63), 10**400]


def _numpy_scalars() -> list[Any]:
    try:
        import numpy as np
    except ImportError:  # the spec core runs without numpy: the fuzz does too
        return []
    return [np.int64(2), np.int32(4), np.int8(-1), np.uint64(2**63), np.uint8(0),
            np.bool_(True), np.float32(2.0), np.float64("nan"), np.int64(2**62)]


class _BadRepr:
    """A value whose repr raises (a user's own class, badly written)."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class _BadIndex:
    """An integer-like value whose ``__index__`` raises."""

    def __index__(self) -> int:
        raise ValueError("no index")


class _LyingLen:
    """A sequence whose length lies."""

    def __len__(self) -> int:
        return 3

    def __iter__(self) -> Iterator[int]:
        return iter([0])


def _atoms() -> list[Any]:
    return ([True, False, None, 0, 1, -1, 2, 3, 4, 7, 8, -8, 0.0, 2.0, -0.0, 0.5,
             float("nan"), float("inf"), float("-inf"), 1e308, complex(2, 0),
             decimal.Decimal(2), decimal.Decimal("NaN"), decimal.Decimal("Infinity"),
             fractions.Fraction(4, 2), "", "x", "y", "z", "٣", "２", "x y", "{}", "{x}",
             "{replicated}", "{devices=[0]<=[0]}", "\x00", "é" * 3, b"x", bytearray(b"1"),
             object(), _BadRepr(), _BadIndex(), _LyingLen(), [], (), {}, set(), frozenset(),
             range(4), range(0), range(-3), S.UNSPECIFIED, S.AUTO, S.UNCONSTRAINED,
             S.AxisType.Auto, S.AxisType.Explicit, S.SubgroupType.MANUAL, Ellipsis,
             NotImplemented, int, str, print]
            + HUGE_INTS + _numpy_scalars())


_ATOMS = _atoms()


def hlo_texts() -> st.SearchStrategy[str]:
    """HLO sharding text, valid and mutated (cut, doubled, digits swapped, non-ASCII digits)."""
    valid = st.sampled_from([
        "{replicated}", "{manual}", "{unreduced}", "{maximal device=3}",
        "{devices=[2,4]<=[8]}", "{devices=[2,4]<=[4,2]T(1,0)}", "{devices=[2,2]0,2,1,3}",
        "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
        "{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}",
        "{devices=[0]<=[0]}", "{devices=[1]<=[1]}", "{devices=[4]<=[2,2]T(0,0)}",
        "{devices=[9223372036854775808]<=[9223372036854775808]}",
        "{devices=[1048576]<=[1048576]}", "{maximal device=٣}", "{devices=[٢]<=[٢]}",
        "{devices=[2]1,0}", "{devices=[2,2]<=[4] last_tile_dims={bogus}}",
        "{maximal device=99999999999999999999999}",
    ])

    def mutate(text: str, data: Any) -> str:
        how = data.draw(st.integers(0, 5))
        if how == 0 or not text:
            return text
        i = data.draw(st.integers(0, len(text)))
        if how == 1:
            return text[:i]
        if how == 2:
            return text[:i] + data.draw(st.sampled_from(list("{}[]<=,T()0123456789 ٣x-"))) + text[i:]
        if how == 3:
            return text[:i] + text[i + 1:]
        if how == 4:
            return text * 2
        return text.replace("2", data.draw(st.sampled_from(["0", "-2", "99", "2" * 30, "²"])))
    return st.builds(lambda t, d: mutate(t, d), valid, st.data())


@st.composite
def _deep_tree(draw: Any, leaves: st.SearchStrategy[Any]) -> Any:
    depth = draw(st.sampled_from([3, 30, 1200, 2100]))
    kind = draw(st.sampled_from([list, tuple, dict]))
    value = draw(leaves)
    for _ in range(depth):
        value = [value] if kind is list else (value,) if kind is tuple else {"a": value}
    return value


@functools.lru_cache(maxsize=None)
def hostile() -> st.SearchStrategy[Any]:
    """A value no parameter of the spec should take as it is, or should take only in part."""
    atoms = st.sampled_from(_ATOMS)
    numbers = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True,
                                                                allow_infinity=True))
    text = st.one_of(st.text(max_size=12), hlo_texts())
    leaf = st.one_of(atoms, numbers, text)
    small = st.one_of(
        leaf,
        st.lists(leaf, max_size=5), st.lists(leaf, max_size=5).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(-2, 3)), leaf, max_size=3),
        st.sets(st.one_of(st.text(max_size=3), st.integers(-2, 3)), max_size=3),
        st.sampled_from(_DEEP), _deep_tree(leaf),
        st.lists(st.integers(0, 9), max_size=6).map(lambda xs: tuple(xs) + tuple(xs[:1])),
    )
    return st.one_of(small, st.lists(small, max_size=3).map(tuple))


# =========================================================================== hostile files

def vectors_folder() -> Path | None:
    """The repository's ``vectors`` folder: ``$SHARDLAW_VECTORS``, else ``./vectors``, else
    the one beside the package (an editable install), whichever first holds a vector file."""
    for folder in (os.environ.get(VECTORS_VARIABLE), Path.cwd() / "vectors", PACKAGE_VECTORS):
        if folder and Path(folder).is_dir() and next(Path(folder).rglob("*.json"), None):
            return Path(folder)
    return None


@functools.lru_cache(maxsize=None)
def seed_files() -> tuple[tuple[str, str], ...]:
    """The vector files mutated: 40 of the repository's; where there is no repository (a
    wheel install), vectors the spec writes itself, said once on stderr."""
    folder = vectors_folder()
    if folder is not None:
        files = sorted(folder.rglob("*.json"))[:200]
        return tuple((f.name, f.read_text(encoding="utf-8")) for f in files[:40])
    print(f"shardlaw fuzz: no vectors folder (set {VECTORS_VARIABLE}, or run in a checkout); "
          "mutating the spec's own seed vectors instead", file=sys.stderr)
    return _spec_seeds()


def _spec_seeds() -> tuple[tuple[str, str], ...]:
    """A few vectors the spec writes: accepted and refused jit calls, placed and abstract."""
    mesh = S.Mesh.iota((2, 4), ("x", "y"))
    named = S.NamedSharding(mesh, S.P("x", "y"))
    calls = {
        "seed-numpy.json": S.Call(args=(S.Arg.numpy((4,)),), outputs=S.Out((4,))),
        "seed-committed.json": S.Call(args=(S.Arg.committed((8, 8), named),),
                                      outputs=S.Out((8, 8))),
        "seed-in-shardings.json": S.Call(
            args=(S.Arg.numpy((8, 8)),), outputs=S.Out((8, 8)),
            options=S.JitOptions(in_shardings=(named,))),
        "seed-refused.json": S.Call(   # a rank-1 value under a rank-2 spec
            args=(S.Arg.numpy((8,)),), outputs=S.Out((8,)),
            options=S.JitOptions(in_shardings=(named,))),
    }
    return tuple((name, vector_text(dump_vector(call, S.jit_call(call))))
                 for name, call in calls.items())


def vector_files() -> st.SearchStrategy[tuple[str, str]]:
    """(name, text) of a stored vector, mutated as a hostile file would be."""
    return st.tuples(st.sampled_from(seed_files()), st.data()).map(
        lambda pair: mutated_file(*pair))


def mutated_file(named: tuple[str, str], data: Any) -> tuple[str, str]:
    """A vector file ``(name, text)`` as drawn: unchanged, cut short, or changed in one of
    the ways a damaged or hostile file differs."""
    name, text = named
    how = data.draw(st.integers(0, 9))
    if how == 0:
        return name, text
    if how == 1:  # cut short
        return name, text[: data.draw(st.integers(0, len(text)))]
    if how == 2:  # nested past any parser's patience
        depth = data.draw(st.sampled_from([999, 1000, 5000, 100_000]))
        return name, "[" * depth + "]" * depth
    if how == 3:
        return name, data.draw(st.sampled_from(
            ["", "null", "1e999", "NaN", "-Infinity", "[]", "{}", '{"format": 1}', "\ufeff{}",
             '"' + "x" * 10_000 + '"', "9" * 5000, '{"a": ' * 2000 + "1" + "}" * 2000]))
    try:
        obj = json.loads(text)
    except ValueError:
        return name, text
    for _ in range(data.draw(st.integers(1, 3))):
        obj = _mutate_json(obj, data)
    try:
        return name, json.dumps(obj)
    except (ValueError, RecursionError):
        return name, text


_JSON_HOSTILE = [None, True, False, 0, -1, 2**63, 2**64, 10**30, -(2**63), 1.5, 1e308, "",
                 "x", "٣", "{replicated}", "{devices=[0]<=[0]}", [], {}, [[[[]]]],
                 {"type": "Mesh"}, [2**62] * 3, ["x", "x"], [-1, -1], list(range(70))]


def _mutate_json(obj: Any, data: Any) -> Any:
    """Replace one node of a JSON document (found by a random walk) with a hostile value."""
    if isinstance(obj, dict) and obj and data.draw(st.integers(0, 3)):
        key = data.draw(st.sampled_from(sorted(obj)))
        if data.draw(st.integers(0, 9)) == 0:
            return {k: v for k, v in obj.items() if k != key}
        return {**obj, key: _mutate_json(obj[key], data)}
    if isinstance(obj, list) and obj and data.draw(st.integers(0, 3)):
        i = data.draw(st.integers(0, len(obj) - 1))
        return obj[:i] + [_mutate_json(obj[i], data)] + obj[i + 1:]
    choice = data.draw(st.integers(0, len(_JSON_HOSTILE) + 1))
    if choice == len(_JSON_HOSTILE):
        return _nested(data.draw(st.sampled_from([50, 1500])), "list")
    if choice == len(_JSON_HOSTILE) + 1:
        return [obj, obj]
    return _JSON_HOSTILE[choice]


# =========================================================================== plausible values

def _shapes() -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.sampled_from([0, 1, 2, 3, 4, 6, 8, 16, 64, 2**40]), max_size=4).map(tuple)


def _small_ints() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(-2, 9), st.sampled_from([2**20, 2**63, 10**30]))


@st.composite
def _iotas(draw: Any) -> Any:
    dims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    perm = draw(st.permutations(range(len(dims))))
    return S.Iota(tuple(dims), tuple(perm))


def _device_lists() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(st.integers(0, 9), max_size=9).map(lambda ids: S.DeviceList.of_ids(
            list(dict.fromkeys(ids)))),
        _iotas().map(S.DeviceList),
        st.sampled_from([S.DeviceList(S.Iota((2**20,))),
                         S.DeviceList(S.Iota((1024, 1024), (1, 0)))]),
    )


def _calls() -> st.SearchStrategy[Any]:
    from .call_strategies import calls
    return calls(max_devices=8)


def _call_sites() -> st.SearchStrategy[Any]:
    return st.lists(_calls().map(lambda c: S.CallSite(c)), max_size=3)


def _vector_texts() -> st.SearchStrategy[Any]:
    return st.one_of(vector_files().map(lambda pair: pair[1]),
                     vector_files().map(lambda pair: _loads_or_text(pair[1])))


def _loads_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _anything() -> st.SearchStrategy[Any]:
    return st.one_of(shardings(max_devices=8), _shapes(), _small_ints(),
                     st.sampled_from(["x", "y", "cpu", None]))


def _by_name() -> dict[str, Callable[[], st.SearchStrategy[Any]]]:
    """The values a parameter of this name is meant to take (valid, or nearly)."""
    sharding = lambda: shardings(max_devices=8)  # noqa: E731
    either = lambda: st.one_of(  # noqa: E731
        shardings(max_devices=8), hlo_texts().map(_parsed_or_text))
    ints = _small_ints
    return {
        "mesh": lambda: st.one_of(meshes(max_devices=8), meshes(max_devices=8, abstract=True)),
        "spec": lambda: meshes(max_devices=8).flatmap(partition_specs),
        "sharding": sharding, "a": either, "b": either,
        "shape": _shapes, "dims": _shapes, "reshape_dims": _shapes, "axis_sizes": _shapes,
        "major_to_minor": lambda: st.permutations(range(3)).map(tuple),
        "perm": lambda: st.permutations(range(3)).map(tuple),
        "ndim": ints, "rank": ints, "max_dim": ints, "process_index": ints, "device_id": ints,
        "id": ints, "position": ints, "device": lambda: st.one_of(ints(), st.builds(S.Device,
                                                                                  st.integers(0, 9))),
        "devices": lambda: st.one_of(_device_lists(), st.lists(st.integers(0, 9), max_size=8),
                                     _iotas()),
        "ids": lambda: st.lists(st.integers(0, 9), max_size=8),
        "hlo": lambda: st.one_of(hlo_texts(), hlo_texts().map(_parsed_or_text)),
        "text": hlo_texts,
        "assignment": lambda: st.one_of(_iotas(), st.permutations(range(4)).map(tuple)),
        "subgroups": lambda: st.lists(st.sampled_from(list(S.SubgroupType)), max_size=2),
        "axis_names": lambda: st.lists(st.sampled_from(["x", "y", "z", "w"]),
                                       max_size=3).map(tuple),
        "axis_types": lambda: st.one_of(st.none(), st.lists(st.sampled_from(list(S.AxisType)),
                                                            max_size=3).map(tuple)),
        "memory_kind": lambda: st.sampled_from([None, "device", "pinned_host", "bogus", ""]),
        "platform": lambda: st.sampled_from(["cpu", "tpu", "gpu", ""]),
        "devices_per_process": lambda: st.sampled_from([None, 1, 2, 4, 0, -1]),
        "partitions": lambda: st.sampled_from([None, "x", ("x", "y"), S.UNCONSTRAINED, "z"]),
        "unreduced": lambda: st.sets(st.sampled_from(["x", "y"]), max_size=2),
        "reduced": lambda: st.sets(st.sampled_from(["x", "y"]), max_size=2),
        "call": _calls, "sites": _call_sites, "obj_or_text": _vector_texts,
        "whole_call": _calls, "whole_sites": _call_sites,
        # a vector's expected verdict and labels (dump_vector)
        "verdict": lambda: _calls().map(S.jit_call),
        "rule": lambda: st.sampled_from([None, "BAT-2", "SMAP-3", "NOPE-1"]),
        "side": lambda: st.sampled_from([None, "accept", "reject", "kept", "Bad Side"]),
        "description": lambda: st.sampled_from([None, "a sentence"]),
        "timeout_s": lambda: st.sampled_from([0.5, 1.0, 0.001]),
        "encoding": lambda: st.sampled_from(["digits", "bitvector", "integer"]),
        "method": lambda: st.sampled_from(["auto", "auto", "direct", "solver"]),
        "layout": lambda: st.one_of(st.none(), st.permutations(range(2)).map(
            lambda p: S.Layout(tuple(p)))),
        "kind": lambda: st.sampled_from(["committed", "uncommitted", "abstract", "numpy",
                                         "scalar"]),
        "dtype": lambda: st.sampled_from(["float32", "int8", "bfloat16"]),
        "value": _anything, "name": lambda: st.sampled_from(["x", "y", "z"]),
        "options": lambda: st.builds(S.JitOptions),
        "outputs": lambda: st.builds(S.Out, _shapes()),
        "args": lambda: st.lists(st.builds(S.Arg.uncommitted, _shapes()), max_size=2).map(tuple),
        **_transformation_names(),
    }


def _transformation_names() -> dict[str, Callable[[], st.SearchStrategy[Any]]]:
    """The parameter names of the rules under transformations (one module per family)."""
    merged: dict[str, Callable[[], st.SearchStrategy[Any]]] = {}
    for module in (fuzz_arguments, fuzz_autodiff, fuzz_batching, fuzz_constraint, fuzz_shardmap):
        merged.update(module.PLAUSIBLE)
    return merged


def _parsed_or_text(text: str) -> Any:
    try:
        return S.parse_hlo(text)
    except Rejection:
        return text


_BY_NAME = _by_name()


@functools.lru_cache(maxsize=None)
def plausible(name: str) -> st.SearchStrategy[Any]:
    """What a parameter called ``name`` is meant to take (anything, for a name not known)."""
    make = _BY_NAME.get(name)
    return make() if make is not None else _anything()


# Parameters drawn plausible only: whole calls, whose strategies discard many draws (so a
# mixture would end up mostly hostile), for the targets that walk jit's pipeline.
ALWAYS_PLAUSIBLE = ("whole_call", "whole_sites")


@functools.lru_cache(maxsize=None)
def argument(name: str) -> st.SearchStrategy[Any]:
    """Mostly plausible, often hostile."""
    if name in ALWAYS_PLAUSIBLE:
        return plausible(name)
    return st.one_of(plausible(name), plausible(name), hostile())
