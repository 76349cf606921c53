"""Plausible values for the fuzzer, by parameter name: vmap of a jit call (BAT).

:mod:`shardlaw.properties.fuzz` draws each argument of a public spec function from the
strategy registered here under the parameter's name (mostly), or from hostile values. This
module imports the standard library, Hypothesis and the spec only (no JAX).
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.spec import UNSPECIFIED, Mesh, NamedSharding, P, SingleDeviceSharding

__all__ = ["PLAUSIBLE"]

_MESH = Mesh.iota((2, 4), ("x", "y"))


def _leaves() -> st.SearchStrategy[Any]:
    return st.sampled_from([UNSPECIFIED, NamedSharding(_MESH, P("x")),
                            NamedSharding(_MESH, P(None, "y")), NamedSharding(_MESH, P()),
                            NamedSharding(_MESH.abstract, P("y")), SingleDeviceSharding(1)])


def _axis() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.integers(-3, 3))


# parameter name -> a function returning the strategy of values it is meant to take
PLAUSIBLE: dict[str, Callable[[], Any]] = {
    "batch_axis": _axis,
    "spmd_axis_name": lambda: st.one_of(st.none(), st.sampled_from(["x", "y", "w"]),
                                        st.lists(st.sampled_from(["x", "y"]), max_size=2)
                                        .map(tuple)),
    "context_mesh": lambda: st.sampled_from([None, _MESH, _MESH.abstract]),
    "arg_shardings": lambda: st.lists(_leaves(), min_size=1, max_size=3),
    "result_shardings": lambda: st.lists(_leaves(), min_size=1, max_size=2),
    "arg_shapes": lambda: st.lists(st.lists(st.sampled_from([4, 8]), max_size=3).map(tuple),
                                   min_size=1, max_size=3),
    "result_ranks": lambda: st.lists(st.integers(0, 3), min_size=1, max_size=2),
    "in_axes": lambda: st.one_of(_axis(), st.lists(_axis(), max_size=3).map(tuple)),
    "result_axes": lambda: st.one_of(_axis(), st.lists(_axis(), max_size=2).map(tuple)),
    "axis_size": lambda: st.sampled_from([None, 4, 8, 0]),
    "arg_specs": lambda: st.one_of(st.none(), st.lists(
        st.sampled_from([None, P(), P("y"), P(None, "x"), P(("x", "y"))]), min_size=1,
        max_size=3)),
}
