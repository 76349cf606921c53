"""with_sharding_constraint in real JAX, read back as spec values (needs JAX).

Only the properties and tests import this module; :mod:`shardlaw.spec` never does.
:func:`constraint_equations` traces a function with ``jax.make_jaxpr`` and returns, for each
``sharding_constraint`` equation in it, the spec's :class:`~shardlaw.spec.transforms.constraint.Constraint`
fields JAX holds (the sharding and the dimensions left to the compiler).
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from .convert import from_jax, to_jax
from shardlaw.spec.core.shardings import GSPMDSharding, NamedSharding, SingleDeviceSharding
from shardlaw.spec.core.values import PartitionSpec

__all__ = ["constraint_equations", "shardings_to_jax", "normal_spec"]


def _equations(jaxpr: Any) -> list[Any]:
    """Every equation of a closed jaxpr, sub-jaxprs (a nested jit) included, in order."""
    found = []
    for eqn in jaxpr.eqns:
        found.append(eqn)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None and hasattr(inner, "eqns"):
                found.extend(_equations(inner))
    return found


def constraint_equations(fun: Callable[..., Any], *args: Any) -> list[tuple[Any, frozenset]]:
    """(spec sharding, unconstrained_dims) of each sharding_constraint equation of ``fun``."""
    closed = jax.make_jaxpr(fun)(*args)
    return [(from_jax(e.params["sharding"]), frozenset(e.params["unconstrained_dims"]))
            for e in _equations(closed.jaxpr) if e.primitive.name == "sharding_constraint"]


def shardings_to_jax(tree: Any) -> Any:
    """A shardings tree with each spec leaf replaced by JAX's (None and containers kept)."""
    if type(tree) in (tuple, list):
        return type(tree)(shardings_to_jax(t) for t in tree)
    if type(tree) is dict:
        return {k: shardings_to_jax(v) for k, v in tree.items()}
    if isinstance(tree, (NamedSharding, SingleDeviceSharding, GSPMDSharding, PartitionSpec)):
        return to_jax(tree)
    return tree


def normal_spec(spec: PartitionSpec) -> tuple:
    """A spec's entries without trailing Nones (P('x') and P('x', None) place alike)."""
    entries = list(spec)
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(entries)
