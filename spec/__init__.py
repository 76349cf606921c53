"""The shardlaw specification: what jax.jit (jax 0.10.2) does with shardings, as rules.

Importing this package imports the standard library only; :func:`from_jax` and
:func:`to_jax` load JAX on first use.
"""

from .rules import RULES, Rejection, Rule, explain, rule, tracing
from .iota import Iota
from .values import (
    AbstractMesh, AxisType, Device, DeviceList, Mesh, P, PartitionSpec, UNCONSTRAINED,
)
from .hlo import (
    HloSharding, Manual, Maximal, Replicated, SubgroupType, Tiled, Unreduced, hlo_text,
    iota_tile, parse_hlo, tiled,
)
from .shardings import AUTO, UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from .placement import (
    addressable_device_ids, box_of, check_rank, device_ids, devices_indices_map,
    is_fully_replicated, num_devices, replica_id, replica_ids, replication_factor, shard_shape,
    tiles_per_dimension, to_hlo,
)
from .equivalence import hlo_equal, jax_equivalent, placement_equivalent
from .layouts import AUTO_LAYOUT, Format, Layout
from .call import Arg, Call, JitOptions, Out, Static, Verdict
from .jit import jit_call
from .cache import CallSite, explain_cache, policy_classes
from .vectors import Vector, dump_vector, load_vector
# Shardings under transformations (each module's __all__ is its public part).
from . import arguments, autodiff, batching, constraint, shardmap
from .arguments import *  # noqa: F401,F403
from .autodiff import *  # noqa: F401,F403
from .batching import *  # noqa: F401,F403
from .constraint import *  # noqa: F401,F403
from .shardmap import *  # noqa: F401,F403
from .transformed import TransformedCall, TransformedVerdict, explain_transformed
from . import transform_vectors
from .transform_vectors import (
    TransformedVector, dump_transformed, load_transformed, transformed_differences,
    transformed_rules_hit,
)


def from_jax(obj):
    """The spec value for a JAX object (Mesh, AbstractMesh, PartitionSpec, shardings, HloSharding,
    Layout, Format)."""
    from .jax_bridge import from_jax as convert
    return convert(obj)


def describe_call(fun, *args, **options_and_kwargs):
    """The :class:`Call` for ``jax.jit(fun, ...)(*args, **kwargs)`` built from real JAX objects."""
    from .jax_bridge import describe_call as describe
    return describe(fun, *args, **options_and_kwargs)


def to_jax(value):
    """The JAX object for a spec value (needs JAX and enough devices)."""
    from .jax_bridge import to_jax as convert
    return convert(value)


# The solver's names live in .smt, which needs z3; they load on first use.
_SOLVER_NAMES = ("prove_equivalent", "prove_for_every_shape", "Proved", "Counterexample",
                 "Unknown")


def __getattr__(name):
    if name in _SOLVER_NAMES:
        from . import smt
        return getattr(smt, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RULES", "Rule", "Rejection", "explain", "rule", "tracing",
    "Iota", "AbstractMesh", "AxisType", "Device", "DeviceList", "Mesh", "P", "PartitionSpec",
    "UNCONSTRAINED", "HloSharding", "Manual", "Maximal", "Replicated", "SubgroupType", "Tiled",
    "Unreduced", "hlo_text", "iota_tile", "parse_hlo", "tiled", "AUTO", "UNSPECIFIED",
    "GSPMDSharding", "NamedSharding", "SingleDeviceSharding", "addressable_device_ids", "box_of",
    "check_rank", "device_ids", "devices_indices_map", "is_fully_replicated", "num_devices",
    "replica_id", "replica_ids", "replication_factor", "shard_shape", "tiles_per_dimension", "to_hlo",
    "hlo_equal", "jax_equivalent", "placement_equivalent", "from_jax", "to_jax",
    "Layout", "Format", "AUTO_LAYOUT",
    "Arg", "Call", "JitOptions", "Out", "Static", "Verdict", "jit_call", "describe_call",
    "CallSite", "explain_cache", "policy_classes",
    "Vector", "dump_vector", "load_vector",
]
__all__ += [*arguments.__all__, *autodiff.__all__, *batching.__all__, *constraint.__all__,
            *shardmap.__all__, "TransformedCall", "TransformedVerdict", "explain_transformed",
            "TransformedVector", "dump_transformed", "load_transformed",
            "transformed_differences", "transformed_rules_hit"]
