"""Hostile input: every public constructor and query of the spec, and the command line.

The promise checked here: whatever a user passes, the outcome is a value or a project error
that names a rule (a :class:`~shardlaw.spec.Rejection`, whose ``.rule`` is an ID such as
``VAL-1``); never another exception type, never a hang, never a crash. The command line's
promise is its own: exit 0, 1 or 3 with its report, or exit 2 with one line on stderr and
no traceback.

A *target* is one public name of :mod:`shardlaw.spec` (a constructor, a query, a method of
a value); its arguments are drawn by parameter name from :func:`plausible` (the values a
user means to pass, valid or nearly) and :func:`hostile` (wrong types, bools, floats, NaN
and inf, numpy scalars, Decimal, integers of 2^63 and more, negative and zero sizes,
duplicates, 2,000-deep nesting, mutated HLO text). A new public name is fuzzed as soon as
it is exported: :data:`EXEMPT` lists the few that are not, and why, and a test keeps the
two lists covering ``shardlaw.spec.__all__``.

Every rejection of a spec case is recorded with :func:`shardlaw.properties.hits.record`
(source ``"fuzz"``, a rule refusing hostile input: not held to JAX).

The ``ci`` slice is the suite :mod:`shardlaw.properties.suites.fuzz` (``tests/test_fuzz.py``
runs it); the deep campaign is a command::

    python -m shardlaw.properties.fuzz --inputs 1000000 --cli 100000

It prints the count of each outcome, the inputs per second and the rejections per rule ID,
and exits 1 if any input ended in a bare exception, a traceback, a hang or a crash.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import decimal
import fractions
import functools
import inspect
import io
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.vectors.jit_vectors import dump_sequence, load_sequence

from . import (
    hits, fuzz_arguments, fuzz_autodiff, fuzz_batching, fuzz_constraint, fuzz_shardmap,
    fuzz_transform_vectors,
)
from .fuzz_engine import engine_outcomes
from .strategies import meshes, partition_specs, shardings

__all__ = [
    "Outcome", "hostile", "plausible", "targets", "TARGETS", "EXEMPT", "spec_cases",
    "run_spec_case", "rooted_in", "cli_cases", "run_cli_case", "run_cli_executable",
    "Campaign", "main",
]

RULE_ID = re.compile(r"^[A-Z]+(-[A-Z]+)*-[0-9]+$")

# The most seconds one spec input may take before it counts as a hang.
SPEC_LIMIT_S = 10.0
# Over this, an input counts as slow (reported, not a failure).
SLOW_S = 1.0
# The prover answers within its timeout_s plus this.
PROVER_GRACE_S = 1.0

REPO = Path(__file__).resolve().parent.parent
VECTORS = REPO / "vectors"


# =========================================================================== outcomes

@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one input ended: ``kind`` is value, rejected, bare, hang, overrun (the prover
    past its time limit), traceback or crash (the command line); ``detail`` names the rule,
    or the exception type and where it was raised."""

    kind: str
    detail: str = ""
    seconds: float = 0.0

    FAILURES = ("bare", "hang", "overrun", "traceback", "crash", "bad-exit", "harness",
                "disagreement")

    @property
    def failed(self) -> bool:
        return self.kind in self.FAILURES


class _Hang(BaseException):
    """Raised by the alarm when an input runs past its limit (a BaseException, so that no
    ``except Exception`` in the code under test swallows it)."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise _Hang()
    previous = signal.signal(signal.SIGALRM, alarm)
    # The alarm repeats: one raised where Python ignores exceptions (a gc callback) is
    # followed by another a moment later.
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _where(error: BaseException) -> str:
    """The innermost frame of the project that the exception passed through."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if ("shardlaw" in f.filename or "/spec/" in f.filename
                                  or "/src/" in f.filename) and not f.filename.endswith("fuzz.py")]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"


def classify(run: Callable[[], Any], limit_s: float = SPEC_LIMIT_S) -> Outcome:
    """Run ``run`` under a time limit and say how it ended."""
    start = time.perf_counter()
    try:
        with _time_limit(limit_s):
            run()
    except _Hang:
        return Outcome("hang", f"more than {limit_s:g} s", time.perf_counter() - start)
    except Rejection as rejection:
        seconds = time.perf_counter() - start
        if seconds > limit_s:  # past the limit, though the alarm's exception was swallowed
            return Outcome("hang", f"more than {limit_s:g} s", seconds)
        rule = getattr(rejection, "rule", None)
        if not isinstance(rule, str) or not RULE_ID.match(rule):
            return Outcome("bare", f"Rejection without a rule ID ({rule!r})", seconds)
        try:
            message = rejection.args[0]
        except Exception as error:  # pragma: no cover - a failure of explain
            return Outcome("bare", f"unreadable message: {type(error).__name__}", seconds)
        if not isinstance(message, str) or not message.startswith(f"[{rule}]"):
            return Outcome("bare", f"{rule} message does not start with [{rule}]", seconds)
        return Outcome("rejected", rule, seconds)
    except RecursionError as error:
        return Outcome("bare", f"RecursionError at {_where(error)}", time.perf_counter() - start)
    except Exception as error:
        return Outcome("bare", f"{type(error).__name__} at {_where(error)}",
                       time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if seconds > limit_s:  # past the limit, though the alarm's exception was swallowed
        return Outcome("hang", f"more than {limit_s:g} s", seconds)
    return Outcome("value", "", seconds)


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
        "transform": lambda: st.sampled_from([*S.transforms.transformed.TRANSFORMS, "vmap", ""]),
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
    for module in (fuzz_arguments, fuzz_autodiff, fuzz_batching, fuzz_constraint, fuzz_shardmap,
                   fuzz_transform_vectors):
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


# =========================================================================== targets

@dataclasses.dataclass(frozen=True)
class Target:
    """One public callable of the spec, with the name its arguments are drawn for."""

    name: str
    function: Callable[..., Any]
    # Extra checks of an accepted result (for the prover: its time limit).
    prover: bool = False


def _jit_call_of(whole_call: Any) -> Any:
    """jit_call of a drawn call (its rules refuse with verdicts, counted in the coverage)."""
    return S.jit_call(whole_call)


def _explain_cache_of(whole_sites: Any) -> Any:
    """explain_cache of drawn call sites."""
    return S.explain_cache(whole_sites)


def _value_methods() -> list[Target]:
    """Queries on values a user holds: built valid, asked with hostile arguments."""
    mesh = S.Mesh.iota((2, 4), ("x", "y"))
    reversed_list = S.DeviceList.of_ids(range(7, -1, -1))
    iota = S.Iota((2, 4), (1, 0))
    return [
        Target("Mesh.axis_size", mesh.axis_size), Target("Mesh.axis_type", mesh.axis_type),
        Target("AbstractMesh.axis_size", mesh.abstract.axis_size),
        Target("DeviceList.id_at", reversed_list.id_at),
        Target("DeviceList.position_of", reversed_list.position_of),
        Target("DeviceList[position]", reversed_list.__getitem__),
        Target("DeviceList(iota)[position]", S.DeviceList(iota).__getitem__),
        Target("DeviceList(iota).position_of", S.DeviceList(iota).position_of),
        Target("Iota.position_of", iota.position_of),
        Target("Mesh.iota", S.Mesh.iota), Target("DeviceList.of_ids", S.DeviceList.of_ids),
        Target("Arg.committed", S.Arg.committed), Target("Arg.uncommitted", S.Arg.uncommitted),
        Target("Arg.abstract", S.Arg.abstract),
        Target("jit_call(drawn call)", _jit_call_of),
        Target("explain_cache(drawn sites)", _explain_cache_of),
        # Public in their module, not in shardlaw.spec: the sequence vectors.
        Target("dump_sequence", dump_sequence), Target("load_sequence", load_sequence),
    ]


# Public names that are not fuzzed, and why.
EXEMPT = {
    "RULES": "the rule registry, a dict (no input)",
    "Rule": "a registry record, built only by the @rule decorator",
    "Rejection": "the error type itself",
    "explain": "turns a Failure into words; takes the project's own Failure values only",
    "rule": "the decorator that registers rules (for the spec's authors)",
    "tracing": "a context manager without arguments",
    "from_jax": "needs JAX; the bridge is fuzzed with the engine",
    "to_jax": "needs JAX; the bridge is fuzzed with the engine",
    "describe_call": "needs JAX; the bridge is fuzzed with the engine",
    "HloSharding": "an abstract base with no fields",
    "AxisType": "an enum (its lookups are Python's)",
    "SubgroupType": "an enum (its lookups are Python's)",
    "UNCONSTRAINED": "a marker value, not callable",
    "AUTO": "a marker value, not callable",
    "UNSPECIFIED": "a marker value, not callable",
    "AUTO_LAYOUT": "a marker value, not callable",
    "INFER": "a marker value (shard_map's in_specs left out), not callable",
    "Verdict": "a result record the spec builds; users read it",
    "TransformedVerdict": "a result record the spec builds; users read it",
}


def targets(prover: bool = True) -> list[Target]:
    """Every fuzzed callable: the public names of shardlaw.spec not in EXEMPT, and methods."""
    out = [Target(name, getattr(S, name)) for name in S.__all__ if name not in EXEMPT]
    out += _value_methods()
    if prover:
        try:
            import z3  # noqa: F401
        except ImportError:  # the prover needs z3; without it the rest is fuzzed
            return out
        from shardlaw.spec.prove import smt
        out += [Target("prove_equivalent", smt.prove_equivalent, prover=True),
                Target("prove_for_every_shape", smt.prove_for_every_shape, prover=True)]
    return out


TARGETS = targets()


@dataclasses.dataclass
class SpecCase:
    target: Target
    args: tuple
    kwargs: dict

    def __repr__(self) -> str:
        from shardlaw.spec.core.rules import _bounded
        shown = ", ".join([_bounded(a, repr) for a in self.args]
                          + [f"{k}={_bounded(v, repr)}" for k, v in self.kwargs.items()])
        return f"{self.target.name}({shown})"


def _parameters(function: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return []


_PROVER_LIMITS = [0.2, 0.5, 1.0]
_HOSTILE_LIMITS = [float("inf"), float("nan"), -1.0, 0.0, 1e308, "1", None, True,
                   decimal.Decimal("0.5"), 2**63]


def _build_case(target: Target, pick: Callable[[str, str], Any]) -> SpecCase:
    """A call of ``target`` whose arguments come from ``pick(what, parameter name)``:
    ``what`` is "values" (a list, for ``*args``), "omit" (a bool: leave a default out),
    "value" or "timeout"."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in _parameters(target.function):
        if p.name == "self" or p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            args += pick("values", p.name)
        elif p.default is not p.empty and pick("omit", p.name):
            continue  # left out: the default
        elif p.kind is p.KEYWORD_ONLY or kwargs:
            kwargs[p.name] = pick("value", p.name)
        else:
            args.append(pick("value", p.name))
    if target.prover:
        # A short limit, or a hostile one: the prover must check it and keep to it.
        kwargs["timeout_s"] = pick("timeout", "timeout_s")
    return SpecCase(target, tuple(args), kwargs)


@st.composite
def spec_case_for(draw: Any, target: Target) -> SpecCase:
    """One call of ``target``, every argument drawn (shrinks to the smallest failing call)."""
    def pick(what: str, name: str) -> Any:
        if what == "values":
            return draw(st.lists(argument(name), max_size=4))
        if what == "omit":
            return draw(st.integers(0, 2)) == 0
        if what == "timeout":
            return draw(st.one_of(st.sampled_from(_PROVER_LIMITS),
                                  st.sampled_from(_HOSTILE_LIMITS)))
        return draw(argument(name))
    return _build_case(target, pick)


def recombined(cases: list[SpecCase], rng: Any, count: int) -> Iterator[SpecCase]:
    """``count`` more calls built from the values the drawn ``cases`` hold: a random target,
    each argument taken from those drawn for a parameter of the same name (mostly) or for
    any parameter. Cheap next to drawing, so the deep campaign runs many per draw."""
    pool: dict[str, list[Any]] = collections.defaultdict(list)
    every: list[Any] = []
    for case in cases:
        names = [p.name for p in _parameters(case.target.function)
                 if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        for name, value in list(zip(names, case.args)) + list(case.kwargs.items()):
            pool[name].append(value)
            every.append(value)
    if not every:
        return

    def pick(what: str, name: str) -> Any:
        if what == "values":
            return [rng.choice(pool.get(name) or every) for _ in range(rng.randrange(5))]
        if what == "omit":
            return rng.randrange(3) == 0
        if what == "timeout":
            return rng.choice(_PROVER_LIMITS + _HOSTILE_LIMITS)
        if pool.get(name) and rng.random() < 0.7:
            return rng.choice(pool[name])
        return rng.choice(every)
    for _ in range(count):
        yield _build_case(rng.choice(TARGETS), pick)


def spec_cases(only: list[Target] | None = None) -> st.SearchStrategy[SpecCase]:
    """One call of one target with drawn arguments."""
    return st.one_of([_case_strategy(t) for t in (only or TARGETS)])


@functools.lru_cache(maxsize=None)
def _case_strategy(target: Target) -> st.SearchStrategy[SpecCase]:
    return spec_case_for(target)


def run_spec_case(case: SpecCase, limit_s: float = SPEC_LIMIT_S) -> Outcome:
    """Call the target; a value, a rejection with a rule ID, or the failure. A rejected
    jit-call verdict is a value whose detail names its rule (``verdict JIT-2``), so that
    the rules jit_call refuses with count in the coverage too."""
    answer: list[Any] = []
    outcome = classify(lambda: answer.append(
        case.target.function(*case.args, **case.kwargs)), limit_s)
    if outcome.kind == "value" and answer and isinstance(answer[0], S.Verdict) \
            and not answer[0].accepted:
        outcome = dataclasses.replace(outcome, detail=f"verdict {answer[0].rule}")
    limit = case.kwargs.get("timeout_s")
    if case.target.prover and outcome.kind == "value" and isinstance(limit, (int, float)) \
            and not isinstance(limit, bool) and math.isfinite(limit) \
            and outcome.seconds > limit + PROVER_GRACE_S:
        return Outcome("overrun", f"{outcome.seconds:.1f} s for timeout_s={limit}",
                       outcome.seconds)
    if outcome.kind == "rejected":
        hits.record("fuzz", outcome.detail, refused=True)
    return outcome


# =========================================================================== where a failure is

def rooted_in(outcome: Outcome) -> str | None:
    """The file a bare exception was raised in (``TYPE at FILE:LINE name``), if it says."""
    m = re.search(r" at ([\w.]+\.py):", outcome.detail)
    return m[1] if m else None


# =========================================================================== the command line

def vector_files() -> st.SearchStrategy[tuple[str, str]]:
    """(name, text) of a stored vector, mutated as a hostile file would be."""
    files = sorted(VECTORS.rglob("*.json"))[:200] if VECTORS.is_dir() else []
    texts = [(f.name, f.read_text(encoding="utf-8")) for f in files[:40]]
    base = st.sampled_from(texts) if texts else st.just(("empty.json", "{}"))
    return st.tuples(base, st.data()).map(lambda pair: _mutated_file(*pair))


def _mutated_file(named: tuple[str, str], data: Any) -> tuple[str, str]:
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


def sharding_words() -> st.SearchStrategy[str]:
    """Shardings as ``shardlaw prove`` reads them, valid and mutated."""
    from shardlaw.sharding_text import sharding_text
    valid = shardings(max_devices=8).filter(lambda s: s.is_concrete).map(sharding_text)
    fixed = st.sampled_from([
        "mesh=2x4:x,y spec=x,y", "gspmd:{devices=[2,4]<=[8]}", "single:3",
        "mesh=1048576:x spec=x", "mesh=1024x1024:x,y devices=<=[1024,1024]T(1,0) spec=x,y",
        "mesh=99999999999999999999x2:x,y", "mesh=0:x", "mesh=-2:x", "mesh=2:x,x",
        "mesh=٣:x", "single:-1", "single:99999999999999999999999", "gspmd:{maximal device=٣}",
        "gspmd:{devices=[0]<=[0]}", "gspmd:{replicated} devices=3,1",
        "gspmd:{replicated}", "mesh=2:x devices=1,1", "mesh=2x2:x,y spec=(x,y,z)",
        '{"type": "NamedSharding"}', "{" * 3000, '{"a": ' * 1500 + "1" + "}" * 1500,
        "mesh=2:x memory=bogus", "mesh=2:x types=weird", "mesh=", "", " ", "\x00",
        "mesh=2:x devices=<=[2]T(0,0)", "mesh=4:x devices=<=[2,2]T(1)",
    ])

    def mutate(text: str, data: Any) -> str:
        if not data.draw(st.integers(0, 2)) or not text:
            return text
        i = data.draw(st.integers(0, len(text)))
        return text[:i] + data.draw(st.sampled_from(list(" =:,x()_{}٣-9"))) + text[i + 1:]
    return st.builds(mutate, st.one_of(valid, fixed), st.data())


@dataclasses.dataclass
class CliCase:
    """One run of the command line: its argv, and the files it names (path -> bytes)."""

    argv: list[str]
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        files = {k: (v[:80] + b"..." if len(v) > 80 else v) for k, v in self.files.items()}
        return f"shardlaw {' '.join(a[:100] for a in self.argv)}  files={files}"


_ODD_ARGS = ["", "-", "--", "-x", "--nope", "\x00", "٣", "x" * 5000, "--json", "-h",
             "--version", "inf", "nan", "-1", "1e999", "99999999999999999999999"]


@st.composite
def cli_cases(draw: Any) -> CliCase:
    """argv for ``shardlaw``: each command with valid, odd and hostile arguments and files."""
    command = draw(st.sampled_from(["rules", "check", "check", "vectors", "prove", "prove",
                                    "prove", "odd", "demo"]))
    if command == "odd":
        return CliCase(draw(st.lists(st.sampled_from(_ODD_ARGS + ["rules", "check", "prove",
                                                                  "vectors", "run"]),
                                     max_size=4)))
    if command in ("rules", "demo"):
        return CliCase([command] + draw(st.lists(st.sampled_from(_ODD_ARGS), max_size=1)))
    if command in ("check", "vectors"):
        name, text = draw(vector_files())
        where = draw(st.sampled_from(["FILE", "FILE", "FILE", "MISSING", "DIR", "BINARY"]))
        files: dict[str, bytes] = {}
        if where == "FILE":
            files["FILE"] = text.encode("utf-8")
            path = "FILE"
        elif where == "BINARY":
            files["FILE"] = b"\xff\xfe\x00{" + os.urandom(8)
            path = "FILE"
        elif where == "DIR":
            path = "DIR"
        else:
            path = "MISSING/none.json"
        argv = ["check", path] if command == "check" else ["vectors", "run", path]
        if command == "check" and draw(st.booleans()):
            argv.append("--json")
        if draw(st.integers(0, 5)) == 0:
            argv.append(draw(st.sampled_from(_ODD_ARGS + ["--against", "--against=spec"])))
        return CliCase(argv, files)
    a, b = draw(sharding_words()), draw(sharding_words())
    argv = ["prove", a, b]
    if draw(st.integers(0, 4)):
        argv += ["--shape", draw(st.one_of(
            st.lists(st.sampled_from(["0", "1", "2", "4", "8", "16"]), max_size=3).map(",".join),
            st.sampled_from(["8,8", "x", "-1", "٣", "99999999999999999999", "2" * 50, "",
                             "8,,8", "1e3"])))]
    else:
        argv += ["--rank", draw(st.sampled_from(["1", "2", "0", "-1", "x", "999999999",
                                                 "99999999999999999999", "1e3"])),
                 "--max-dim", draw(st.sampled_from(["8", "64", "0", "-4", "y",
                                                    "99999999999999999999"]))]
    argv += ["--timeout", draw(st.sampled_from(["0.5", "1", "0.2", "inf", "nan", "-1", "0",
                                                "1e308", "x", "-inf"]))]
    if draw(st.integers(0, 5)) == 0:
        argv += ["--svg", draw(st.sampled_from(["OUT.svg", "MISSING/out.svg", "DIR", "/"]))]
    if draw(st.booleans()):
        argv.append("--json")
    return CliCase(argv)


def _materialize(case: CliCase, root: Path) -> list[str]:
    """Write the case's files under ``root``; argv with FILE, DIR, ... made paths there."""
    (root / "DIR").mkdir(exist_ok=True)
    for name, content in case.files.items():
        (root / name).write_bytes(content)
    out = []
    for a in case.argv:
        for token in ("MISSING/", "FILE", "DIR", "OUT.svg"):
            if a.startswith(token):
                a = str(root / a)
                break
        out.append(a)
    return out


_SAID_RULE = re.compile(r"\[([A-Z]+(?:-[A-Z]+)*-[0-9]+)\]")


def _check_exit(status: Any, err: str, out: str) -> Outcome:
    """The command line's promise: 0, 1 or 3 with a report, or 2 with one line on stderr."""
    if "Traceback" in err or "Traceback" in out:
        return Outcome("traceback", err.strip().splitlines()[-1][:200] if err.strip() else "")
    if status == 70:  # shardlaw.cli's internal error: a bare exception, said on one line
        return Outcome("bare", err.strip()[:300])
    if status not in (0, 1, 2, 3):
        return Outcome("bad-exit", f"exit status {status!r}")
    lines = [line for line in err.splitlines() if line.strip()]
    if status == 2 and len(lines) != 1:
        return Outcome("bad-exit", f"exit 2 with {len(lines)} lines on stderr: {err[:200]!r}")
    if status == 2:
        said = _SAID_RULE.search(lines[0])
        return Outcome("rejected", said[1] if said else "(usage)")
    return Outcome("value", f"exit {status}")


def run_cli_case(case: CliCase, limit_s: float = 30.0) -> Outcome:
    """``shardlaw.cli.main(argv)`` in this process, its output captured."""
    from shardlaw import cli
    with tempfile.TemporaryDirectory() as root:
        argv = _materialize(case, Path(root))
        out, err = io.StringIO(), io.StringIO()
        status: list[Any] = [None]

        def run() -> None:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    status[0] = cli.main(argv)
                except SystemExit as stop:  # argparse's own exits (--help, --version)
                    status[0] = stop.code if stop.code is not None else 0
        outcome = classify(run, limit_s)
        if outcome.kind != "value":
            return outcome
        checked = _check_exit(status[0], err.getvalue(), out.getvalue())
        return dataclasses.replace(checked, seconds=outcome.seconds)


def shardlaw_executable() -> list[str]:
    """How to start the installed command (the script next to this Python, or the module)."""
    script = Path(sys.executable).parent / "shardlaw"
    return [str(script)] if script.exists() else [sys.executable, "-m", "shardlaw.cli"]


def run_cli_executable(case: CliCase, limit_s: float = 60.0) -> Outcome:
    """The same case through the real ``shardlaw`` executable, in a subprocess."""
    with tempfile.TemporaryDirectory() as root:
        # An argument reaches a real process as a C string: it ends at its first NUL.
        argv = [a.split("\x00")[0] for a in _materialize(case, Path(root))]
        start = time.perf_counter()
        try:
            done = subprocess.run(shardlaw_executable() + argv, capture_output=True,
                                  timeout=limit_s, cwd=root)
        except subprocess.TimeoutExpired:
            return Outcome("hang", f"more than {limit_s:g} s", time.perf_counter() - start)
        seconds = time.perf_counter() - start
        if done.returncode < 0:
            return Outcome("crash", f"signal {-done.returncode}", seconds)
        err = done.stderr.decode("utf-8", "replace")
        out = done.stdout.decode("utf-8", "replace")
        return dataclasses.replace(_check_exit(done.returncode, err, out), seconds=seconds)


# =========================================================================== the campaign

@dataclasses.dataclass
class Campaign:
    """Counts of outcomes, the rejections per rule, and the first example of each failure."""

    outcomes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    rules: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    slow: int = 0
    seconds: float = 0.0

    def record(self, side: str, case: Any, outcome: Outcome) -> None:
        self.outcomes[(side, outcome.kind)] += 1
        if outcome.kind == "rejected":
            self.rules[(side, outcome.detail)] += 1
        elif outcome.detail.startswith("verdict "):
            self.rules[(f"{side} verdict", outcome.detail.split()[1])] += 1
        if outcome.seconds > SLOW_S:
            self.slow += 1
        if outcome.failed:
            key = f"{side} {outcome.kind}: {outcome.detail}"
            if key not in self.failures:
                self.failures[key] = repr(case)[:600]

    @property
    def inputs(self) -> int:
        return sum(self.outcomes.values())

    def report(self) -> str:
        lines = ["outcome counts:"]
        for (side, kind), n in sorted(self.outcomes.items()):
            lines.append(f"  {side:8} {kind:10} {n:>10,}")
        rate = self.inputs / self.seconds if self.seconds else 0.0
        lines.append(f"inputs: {self.inputs:,} in {self.seconds:,.0f} s ({rate:,.1f} inputs/s); "
                     f"slower than {SLOW_S:g} s: {self.slow:,}")
        failed = sum(n for (_, kind), n in self.outcomes.items() if kind in Outcome.FAILURES)
        lines.append(f"failures (bare exceptions, tracebacks, hangs, crashes, overruns, "
                     f"bad exits): {failed:,}")
        for key, example in self.failures.items():
            lines.append(f"  {key}\n      e.g. {example}")
        sides = sorted({side for side, _ in self.rules})
        lines.append("rejections per rule ID: " + "  ".join(f"{side:>10}" for side in sides))
        for rule in sorted({rule for _, rule in self.rules}, key=_rule_order):
            lines.append(f"  {rule:20}" + "  ".join(f"{self.rules[(side, rule)]:>10,}"
                                                    for side in sides))
        never = sorted(set(S.RULES) - {rule for _, rule in self.rules}, key=_rule_order)
        lines.append(f"rules never seen rejecting: {len(never)} ({' '.join(never)})")
        return "\n".join(lines)


def _rule_order(rule: str) -> tuple[str, int]:
    family, _, number = rule.rpartition("-")
    return (family, int(number)) if number.isdigit() else ("~", 0)


def drive(strategy: st.SearchStrategy[Any], count: int, seed: int,
           each: Callable[[Any], None], deadline: float,
           expand: Callable[[list[Any], Any], Iterator[Any]] | None = None,
           per_draw: int = 1) -> None:
    """Draw examples of ``strategy`` in batches and hand each to ``each``, with the cases
    ``expand(batch, rng)`` makes from a batch (``per_draw`` cases in all per drawn one),
    until ``count`` cases have run or the deadline has passed."""
    batch = 25
    done = [0]

    def run(examples: int, seed: int) -> None:
        @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
        @given(st.lists(strategy, min_size=batch, max_size=batch),
               st.randoms(use_true_random=False))
        def draw(cases: list[Any], rng: Any) -> None:
            extra = expand(cases, rng) if expand is not None else iter(())
            for case in itertools.chain(cases, extra):
                if done[0] >= count or time.monotonic() > deadline:
                    return
                each(case)
                done[0] += 1

        draw._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
        draw()

    while done[0] < count and time.monotonic() < deadline:
        run(max(1, math.ceil((count - done[0]) / (batch * per_draw))), seed)
        seed += 7919


def campaign(inputs: int, cli: int, executable: int, seed: int = 0,
             minutes: float | None = None, progress: Callable[[str], None] | None = None,
             recombine: int = 0, engine: int = 0) -> Campaign:
    """Run ``inputs`` spec inputs, ``cli`` in-process command lines, ``executable`` runs
    of the real command and ``engine`` jit calls held by the engine against ``jax.jit``
    (:mod:`.fuzz_engine`); stop early after ``minutes``. ``recombine``: spec calls built per
    drawn call from the values drawn (see :func:`recombined`)."""
    result = Campaign()
    started = time.monotonic()
    deadline = started + (minutes * 60 if minutes else 1e12)
    last = [started]

    def tick() -> None:
        if progress and time.monotonic() - last[0] > 60:
            last[0] = time.monotonic()
            progress(f"{result.inputs:,} inputs, {time.monotonic() - started:,.0f} s, "
                     f"{len(result.failures)} failure kinds")

    def note(side: str, case: Any, outcome: Outcome) -> None:
        known = len(result.failures)
        result.record(side, case, outcome)
        if progress and len(result.failures) > known:
            key, example = list(result.failures.items())[-1]
            progress(f"new failure: {key}\n    e.g. {example}")
        tick()

    def guarded(side: str, run: Callable[[Any], Outcome]) -> Callable[[Any], None]:
        def each(case: Any) -> None:
            try:
                outcome = run(case)
            except Exception as error:  # the harness's own failure: counted, not fatal
                outcome = Outcome("harness", f"{type(error).__name__}: {error}")
            note(side, case, outcome)
        return each

    spec = guarded("spec", run_spec_case)
    in_process = guarded("cli", run_cli_case)
    real = guarded("exe", run_cli_executable)

    # Interleave the three so that a time limit leaves a share of each.
    # (Each round starts Hypothesis afresh, whose first draws are the simplest: few rounds
    # for a small campaign.)
    rounds = max(1, min(20, (inputs + cli) // 20_000, engine // 50 if engine else 20))
    for k in range(rounds):
        share = lambda total: total // rounds + (1 if k < total % rounds else 0)  # noqa: E731
        drive(spec_cases(), share(inputs), seed + k, spec, deadline,
               expand=lambda cases, rng: recombined(cases, rng, recombine * len(cases)),
               per_draw=1 + recombine)
        drive(cli_cases(), share(cli), seed + 1000 + k, in_process, deadline)
        drive(cli_cases(), share(executable), seed + 2000 + k, real, deadline)
        engine_seed = seed + 3000 + 100_000 * k
        for kind, detail, seconds, case in engine_outcomes(share(engine), engine_seed, deadline):
            note("engine", case, Outcome(kind, detail, seconds))
        if time.monotonic() > deadline:
            break
    result.seconds = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m shardlaw.properties.fuzz``: the deep campaign."""
    parser = argparse.ArgumentParser(prog="python -m shardlaw.properties.fuzz",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="spec inputs")
    parser.add_argument("--cli", type=int, default=100_000,
                        help="command lines run in this process")
    parser.add_argument("--executable", type=int, default=500,
                        help="command lines run through the real shardlaw executable")
    parser.add_argument("--engine", type=int, default=0,
                        help="jit calls run through jax.jit and the engine, compared "
                             "(in a child process)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, help="stop after this long")
    parser.add_argument("--recombine", type=int, default=20, metavar="K",
                        help="spec calls recombined from each drawn one's values (default 20; "
                             "0: every call drawn by Hypothesis)")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    result = campaign(args.inputs, args.cli, args.executable, args.seed, args.minutes,
                      progress=lambda line: print(line, file=sys.stderr, flush=True),
                      recombine=args.recombine, engine=args.engine)
    print(result.report())
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
