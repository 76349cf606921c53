"""Plausible values for the fuzzer, by parameter name: differentiating through a jit call (AD).

:mod:`shardlaw.properties.fuzz` draws each argument of a public spec function from the
strategy registered here under the parameter's name (mostly), or from hostile values. This
module imports the standard library, Hypothesis and the spec only (no JAX).
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.spec import UNSPECIFIED, Mesh, NamedSharding, P
from shardlaw.spec.transforms.autodiff import JitBody, JitEquation

__all__ = ["PLAUSIBLE"]

_MESH = Mesh.iota((2, 4), ("data", "model"))
_SHARDINGS = [UNSPECIFIED, NamedSharding(_MESH, P("data")), NamedSharding(_MESH, P()),
              NamedSharding(_MESH, P(None, "model"))]


# Mostly two operands, so that independently drawn equations, bodies and flags often match.
_SIZES = st.sampled_from([2, 2, 2, 1])


def _operands() -> st.SearchStrategy[tuple]:
    return _SIZES.flatmap(lambda n: st.lists(st.sampled_from(_SHARDINGS), min_size=n,
                                             max_size=n).map(tuple))


def _flags(size: int | None = None) -> st.SearchStrategy[tuple]:
    sizes = _SIZES if size is None else st.just(size)
    return sizes.flatmap(lambda n: st.lists(st.booleans(), min_size=n, max_size=n).map(tuple))


def _position_sets(count: int, outputs: int) -> st.SearchStrategy[tuple]:
    one = st.sets(st.integers(0, max(count - 1, 0)), max_size=count) if count else st.just(set())
    return st.lists(one, min_size=outputs, max_size=outputs).map(tuple)


@st.composite
def _bodies(draw: Any) -> JitBody:
    inputs, outputs = draw(_SIZES), draw(_SIZES)
    dependencies = draw(_position_sets(inputs, outputs))
    residuals = draw(st.integers(0, 3))
    return JitBody(inputs, dependencies, None, residuals, draw(st.integers(0, residuals)),
                   draw(_position_sets(residuals, outputs)))


@st.composite
def _equations(draw: Any) -> JitEquation:
    ins = draw(_operands())
    return JitEquation(ins, draw(_operands()), draw(_flags(len(ins))))


# parameter name -> a function returning the strategy of values it is meant to take
PLAUSIBLE: dict[str, Callable[[], Any]] = {
    # JitEquation(in_shardings, out_shardings, donated_invars)
    "in_shardings": _operands, "out_shardings": _operands, "donated_invars": _flags,
    # JitBody(inputs, dependencies, forwarded, residuals, stored_residuals, residual_uses)
    "inputs": lambda: _SIZES,
    "dependencies": lambda: _position_sets(2, 2),
    "forwarded": lambda: st.one_of(st.none(), st.lists(st.sampled_from([None, 0, 1]),
                                                       min_size=1, max_size=2).map(tuple)),
    "residuals": lambda: st.integers(0, 3),
    "stored_residuals": lambda: st.integers(0, 3),
    "residual_uses": lambda: st.one_of(st.none(), _position_sets(2, 2)),
    # the rules' questions
    "primal_equation": _equations, "jit_body": _bodies,
    "nonzero_tangents": _flags, "cotangent_outputs": _flags, "unknown_inputs": _flags,
    "used_outputs": _flags,
}
