"""The split a value's type carries over Explicit mesh axes (``jax.typeof(x).sharding.spec``).

A :class:`~shardlaw.spec.program.description.Value` typed over a mesh with Explicit axes
carries the split of those axes in its type: what a NamedSharding leaves of its spec on
them, kept canonical (no trailing unsplit dimensions; None where nothing is split).
"""

from __future__ import annotations

from typing import Any

from ..core.shardings import NamedSharding
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec  # noqa: F401 (Mesh: the examples)

P = PartitionSpec  # the name the examples use

__all__ = ["type_spec", "fitting", "splits_over", "canonical_type_spec"]


def type_spec(sharding: Any) -> PartitionSpec | None:
    """The split a value's type carries on ``sharding`` (``jax.typeof(x).sharding.spec``): a
    NamedSharding's entries and its unreduced and reduced axes, Explicit axes only (JAX's
    ``modify_spec_for_auto_manual``); None where none is left, or for another sharding.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit, AxisType.Auto))
    >>> type_spec(NamedSharding(mesh, P(None, ("x", "y"))))
    P(None, 'x')
    >>> print(type_spec(NamedSharding(mesh, P("y"))))
    None
    """
    if not isinstance(sharding, NamedSharding):
        return None
    mesh = sharding.mesh
    explicit = {name for name, kind in zip(mesh.axis_names, mesh.axis_types)
                if kind is AxisType.Explicit}
    if not explicit:   # (a mesh of Auto axes only: nothing is left)
        return None

    def kept(entry: Any) -> Any:
        if isinstance(entry, tuple):
            return tuple(name for name in entry if name in explicit)
        return entry if entry in explicit else None

    spec = sharding.spec
    return canonical_type_spec(PartitionSpec(
        *(kept(e) for e in spec), unreduced=spec.unreduced & explicit,
        reduced=spec.reduced & explicit))


def fitting(spec: PartitionSpec | None, rank: int) -> PartitionSpec | None:
    """A split cut to a value's rank: a longer one is refused where it is given (ARG-4,
    FIT-1), and the description of the program that gives it still holds."""
    if spec is None or len(spec) <= rank:
        return spec
    return canonical_type_spec(PartitionSpec(*tuple(spec)[:rank], unreduced=spec.unreduced,
                                              reduced=spec.reduced))


def splits_over(spec: PartitionSpec, mesh: AbstractMesh) -> bool:
    """Whether ``mesh`` has, as Explicit axes, every axis ``spec`` names."""
    explicit = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t is AxisType.Explicit}
    return {*spec.axes(), *spec.unreduced, *spec.reduced} <= explicit


def canonical_type_spec(spec: PartitionSpec) -> PartitionSpec | None:
    """A type's split without its trailing unsplit dimensions; None: no split at all."""
    entries = list(spec)
    while entries and entries[-1] is None:
        entries.pop()
    if not entries and not spec.unreduced and not spec.reduced:
        return None
    return PartitionSpec(*entries, unreduced=spec.unreduced, reduced=spec.reduced)
