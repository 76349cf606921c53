"""Plausible values for the fuzzer, by parameter name: argument placement (ARG).

:mod:`shardlaw.properties.fuzz` draws each argument of a public spec function from the
strategy registered here under the parameter's name (mostly), or from hostile values. This
module imports the standard library, Hypothesis and the spec only (no JAX).
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.spec.transforms.arguments import VALUE_KINDS, VIAS

__all__ = ["PLAUSIBLE"]

# parameter name -> a function returning the strategy of values it is meant to take
PLAUSIBLE: dict[str, Callable[[], Any]] = {
    "value_kind": lambda: st.sampled_from(VALUE_KINDS),
    "int_value": lambda: st.one_of(st.integers(-9, 9), st.sampled_from(
        [2**31 - 1, 2**31, -(2**31) - 1, 2**63, -(2**100)])),
    "via": lambda: st.sampled_from(VIAS),
}
