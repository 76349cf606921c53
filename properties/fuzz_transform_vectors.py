"""Plausible values for the fuzzer, by parameter name: transformed-call vectors.

:mod:`shardlaw.properties.fuzz` draws each argument of a public spec function from the
strategy registered under the parameter's name (mostly), or from hostile values. The
parameters of :mod:`shardlaw.spec.vectors.transformed_vectors` take transformed calls, their
verdicts and vectors. This module imports the standard library, Hypothesis and the spec
only (no JAX).
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.spec import Mesh, NamedSharding, P
from shardlaw.spec.vectors.transformed_vectors import dump_transformed, load_transformed
from shardlaw.spec.transforms.transformed import TransformedCall, explain_transformed
from shardlaw.spec.vectors.jit_vectors import vector_text

__all__ = ["PLAUSIBLE"]

_MESH = Mesh.iota((2, 4), ("x", "y"))


def _calls() -> st.SearchStrategy[TransformedCall]:
    sharding = st.sampled_from([NamedSharding(_MESH, P("x")), NamedSharding(_MESH, P(None, "y")),
                                NamedSharding(_MESH.abstract, P())])
    batch = st.builds(lambda s, axis, name: TransformedCall.of(
        "batch_sharding", sharding=s, batch_axis=axis, rank=2, spmd_axis_name=name),
        sharding, st.sampled_from([0, 1, None, 5]), st.sampled_from([None, "x", "y", ("x",)]))
    manual = st.builds(lambda axes: TransformedCall.of("manual_axes_of", mesh=_MESH,
                                                       manual_axes=frozenset(axes)),
                       st.sets(st.sampled_from(["x", "y", "w"])))
    place = st.builds(lambda kind, shape: TransformedCall.of(
        "place_argument", value_kind=kind, shape=shape, dtype="float32"),
        st.sampled_from(["numpy_array", "masked_array", "int"]),
        st.sampled_from([(), (8,), (2, 4)]))
    return st.one_of(batch, manual, place)


def _verdicts() -> st.SearchStrategy[Any]:
    return _calls().map(explain_transformed)


def _vectors() -> st.SearchStrategy[Any]:
    return _calls().map(lambda call: dump_transformed(call, explain_transformed(call)))


def _texts() -> st.SearchStrategy[Any]:
    return st.one_of(_vectors(), _vectors().map(vector_text))


# parameter name -> a function returning the strategy of values it is meant to take
PLAUSIBLE: dict[str, Callable[[], Any]] = {
    "transformed_call": _calls,
    "verdict": _verdicts, "expected": _verdicts, "actual": _verdicts,
    "transformed_json": _texts,
    "transformed_vector": lambda: _vectors().map(load_transformed),
    "rule": lambda: st.sampled_from([None, "BAT-2", "SMAP-3", "NOPE-1"]),
    "side": lambda: st.sampled_from([None, "accept", "reject", "kept", "Bad Side"]),
    "description": lambda: st.sampled_from([None, "a sentence"]),
    "compared_with": lambda: st.sampled_from([None, "jax.vmap of a jax.jit call"]),
    "origin": lambda: st.none(),
    "origin_harness": lambda: st.sampled_from([None, "batching", "nope"]),
}
