"""Plausible values for the fuzzer, by parameter name: with_sharding_constraint (WSC).

:mod:`shardlaw.properties.fuzz` draws each argument of a public spec function from the
strategy registered here under the parameter's name (mostly), or from hostile values. This
module imports the standard library, Hypothesis and the spec only (no JAX).
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.spec.core.rules import Rejection

from .strategies import meshes, partition_specs, shardings as any_shardings

__all__ = ["PLAUSIBLE"]


def _shapes() -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.sampled_from([0, 1, 2, 3, 4, 6, 8]), max_size=3).map(tuple)


def _values() -> st.SearchStrategy[Any]:
    leaf = _shapes().map(S.Arg.numpy)
    return st.one_of(leaf, st.lists(leaf, max_size=3).map(tuple),
                     st.dictionaries(st.sampled_from(["a", "b"]), leaf, max_size=2))


def _shardings() -> st.SearchStrategy[Any]:
    leaf = st.one_of(any_shardings(max_devices=8), st.none(),
                     meshes(max_devices=8).flatmap(lambda m: partition_specs(m, max_rank=3)))
    return st.one_of(leaf, st.lists(leaf, max_size=3).map(tuple))


def _constraints() -> st.SearchStrategy[Any]:
    """Constraints as with_sharding_constraint makes them (a refused draw gives a list)."""
    def made(values: Any, shardings: Any, mesh: Any) -> Any:
        try:
            return S.with_sharding_constraint(values, shardings, mesh)
        except Rejection:
            return []
    return st.builds(made, _values(), _shardings(), st.one_of(st.none(), meshes(max_devices=8)))


PLAUSIBLE: dict[str, Callable[[], Any]] = {
    "values": _values,
    "shardings": _shardings,
    "context_mesh": lambda: st.one_of(st.none(), meshes(max_devices=8)),
    "constraints": _constraints,
    "constraint": lambda: _constraints().map(lambda found: found[0] if found else None),
    "batch_dim": lambda: st.integers(-1, 4),
    "spmd_axis_name": lambda: st.one_of(st.none(), st.sampled_from(["x", "y", "a", "b"]),
                                        st.tuples(st.sampled_from(["x", "a"]),
                                                  st.sampled_from(["y", "b"]))),
}
