"""Plausible values for the fuzzer, by parameter name: shard_map (SMAP).

:mod:`shardlaw.properties.fuzz` draws each argument of a public spec function from the
strategy registered here under the parameter's name (mostly), or from hostile values. This
module imports the standard library, Hypothesis and the spec only (no JAX).
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.spec.transforms.shardmap import INFER, Returned, Shaped
from shardlaw.spec.core.values import PartitionSpec as P

__all__ = ["PLAUSIBLE", "smap_specs", "smap_manual_axes"]

NAMES = ["x", "y", "z"]


def _entries() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.sampled_from(NAMES),
                     st.lists(st.sampled_from(NAMES), min_size=2, max_size=2).map(tuple))


def smap_specs() -> st.SearchStrategy[Any]:
    """A PartitionSpec over the names x, y, z (repeats included), sometimes a tree of them."""
    one = st.lists(_entries(), max_size=3).map(lambda e: P(*e))
    return st.one_of(one, st.lists(one, max_size=2).map(tuple), st.none(),
                     st.dictionaries(st.sampled_from(["a", "b"]), one, max_size=2))


def smap_manual_axes() -> st.SearchStrategy[Any]:
    return st.one_of(st.sets(st.sampled_from(NAMES), max_size=2),
                     st.frozensets(st.sampled_from(NAMES + ["q"]), max_size=2),
                     st.lists(st.sampled_from(NAMES), max_size=2))


def _shaped() -> st.SearchStrategy[Any]:
    typed = st.one_of(st.none(), st.lists(st.sampled_from([None, *NAMES, "q"]),
                                          max_size=3).map(lambda e: P(*e)))
    return st.builds(lambda s, t: Shaped(tuple(s), t),
                     st.lists(st.sampled_from([1, 2, 3, 4, 8, 16]), max_size=3), typed)


def _operands() -> st.SearchStrategy[Any]:
    return st.lists(st.one_of(_shaped(), st.lists(_shaped(), max_size=2).map(tuple)),
                    max_size=3).map(tuple)


def _summed() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(NAMES),
                     st.lists(st.sampled_from(NAMES + ["q"]), max_size=2).map(tuple))


def _results() -> st.SearchStrategy[Any]:
    one = st.builds(Returned, st.integers(0, 3), _summed())
    return st.one_of(one, st.lists(one, max_size=3).map(tuple))


# parameter name -> a function returning the strategy of values it is meant to take
PLAUSIBLE: dict[str, Callable[[], Any]] = {
    "in_specs": lambda: st.one_of(smap_specs(), st.just(INFER)), "out_specs": smap_specs, "manual_axes": smap_manual_axes,
    "operands": _operands, "results": _results, "check_vma": lambda: st.booleans(),
    "collective_axes": _summed, "summed": _summed, "operand": lambda: st.integers(-1, 4),
}
