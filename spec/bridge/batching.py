"""The jit equations of a traced JAX program, in the spec's terms (for the BAT properties).

This module imports JAX at its top: properties and tests use it, ``shardlaw.spec`` never
imports it.
"""

from __future__ import annotations

from typing import Any, Iterator

from jax._src import core
from jax._src.sharding_impls import UnspecifiedValue

from .convert import from_jax
from ..core.shardings import UNSPECIFIED

__all__ = ["jit_equations", "sharding_from_jax"]

# The names the jit primitive has had (pjit before JAX 0.7, jit since).
_JIT_NAMES = ("jit", "pjit")


def sharding_from_jax(sharding: Any) -> Any:
    """A jit equation's sharding parameter as a spec value (UNSPECIFIED for JAX's marker)."""
    if isinstance(sharding, UnspecifiedValue):
        return UNSPECIFIED
    return from_jax(sharding)


def _equations(jaxpr: Any) -> Iterator[Any]:
    """Every equation of ``jaxpr`` and of the jaxprs nested in its equations, depth first."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in core.jaxprs_in_params(eqn.params):
            yield from _equations(sub)


def jit_equations(closed_jaxpr: Any) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """The (in_shardings, out_shardings) of every jit equation in a traced program, outermost
    first, as spec values."""
    found = []
    for eqn in _equations(closed_jaxpr.jaxpr):
        if eqn.primitive.name in _JIT_NAMES:
            found.append((tuple(map(sharding_from_jax, eqn.params["in_shardings"])),
                          tuple(map(sharding_from_jax, eqn.params["out_shardings"]))))
    return found

