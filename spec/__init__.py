"""The shardlaw specification: what jax.jit (jax 0.10.2) does with shardings, as rules.

The spec is layered (``spec/layers.py`` says so once): ``core`` (value types, the rule
registry), ``placement``, ``jit`` (a jit call, stage by stage, and its caches), ``prove``
(z3), ``transforms``, ``program`` (whole programs), ``vectors``, and ``bridge``, the only
part that imports JAX. This package re-exports the public names of all of them.

Importing this package imports the standard library only; :func:`from_jax`,
:func:`to_jax` and :func:`describe_call` load JAX on first use, and the prover's names load
z3 on first use.
"""

from .layers import MOVED, install_moved_names
from .core.rules import RULES, Rejection, Rule, explain, rule, tracing
from .core.iota import Iota
from .core.values import (
    AbstractMesh, AxisType, Device, DeviceList, Mesh, P, PartitionSpec, UNCONSTRAINED,
)
from .core.hlo import (
    HloSharding, Manual, Maximal, Replicated, SubgroupType, Tiled, Unreduced, hlo_text,
    iota_tile, parse_hlo, tiled,
)
from .core.shardings import (
    AUTO, UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding,
)
from .placement.blocks import (
    addressable_device_ids, box_of, check_rank, device_ids, devices_indices_map,
    is_fully_replicated, num_devices, replica_id, replica_ids, replication_factor, shard_shape,
    tiles_per_dimension, to_hlo,
)
from .placement.equivalence import hlo_equal, jax_equivalent, placement_equivalent
from .placement import processes
from .placement.processes import (
    Shard, addressable_shards, check_fetchable, global_shape_from_local, global_to_host_local,
    check_closed_over, host_local_to_global, is_fully_addressable, local_mesh,
    gathered, place_single_device_arrays, process_local_slices, process_mesh, MeshPart,
    make_mesh_part,
)
from .placement import process_transfers
from .placement.process_transfers import (
    Placed, put_host_value, put_array, put_on_device, donated, check_not_deleted,
)
from .jit.layouts import AUTO_LAYOUT, Format, Layout
from .jit.call import Arg, Call, JitOptions, Out, Static, Verdict
from .jit.pipeline import jit_call
from .jit.cache import CallSite, explain_cache, policy_classes
from .vectors.jit_vectors import Vector, dump_vector, load_vector
# Shardings under transformations (each module's __all__ is its public part).
from .transforms import arguments, autodiff, batching, constraint, shardmap
from .transforms.arguments import *  # noqa: F401,F403
from .transforms.autodiff import *  # noqa: F401,F403
from .transforms.batching import *  # noqa: F401,F403
from .transforms.constraint import *  # noqa: F401,F403
from .transforms.shardmap import *  # noqa: F401,F403
# Whole programs: a jit's body, equation by equation.
from .program.description import (
    Const, DevicePut, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap, Value,
)
from .program.explain import ProgramVerdict, explain_program
from .program.batching import nested_vmap_program, vmap_program
from .program.partial_eval import dce_program, partial_eval_program
from .program.autodiff import (
    LinearizedProgram, VjpProgram, grad_program, jvp_program, linearize_program,
    value_and_grad_program, vjp_program,
)

install_moved_names()


def from_jax(obj):
    """The spec value for a JAX object (Mesh, AbstractMesh, PartitionSpec, shardings, HloSharding,
    Layout, Format)."""
    from .bridge.convert import from_jax as convert
    return convert(obj)


def describe_call(fun, *args, **options_and_kwargs):
    """The :class:`Call` for ``jax.jit(fun, ...)(*args, **kwargs)`` built from real JAX objects."""
    from .bridge.convert import describe_call as describe
    return describe(fun, *args, **options_and_kwargs)


def to_jax(value):
    """The JAX object for a spec value (needs JAX and enough devices)."""
    from .bridge.convert import to_jax as convert
    return convert(value)


# The solver's names live in .prove.smt, which needs z3; they load on first use.
_SOLVER_NAMES = ("prove_equivalent", "prove_for_every_shape", "Proved", "Counterexample",
                 "Unknown")


# The transformed-call path's names, retired (issue 31): name -> what answers instead
# (docs/programs.rst, "What replaced the transformed-call path").
RETIRED = {
    "TransformedCall": "a Program (shardlaw.spec.Program) and the program rewrite of the "
                       "question (vmap_program, jvp_program, ..., dce_program)",
    "TransformedVerdict": "shardlaw.spec.ProgramVerdict",
    "explain_transformed": "shardlaw.spec.explain_program of the rewritten Program (or the "
                           "per-equation function of spec/transforms/ directly)",
    "TransformedVector": "a program vector (shardlaw.spec.vectors.program_vectors)",
    "dump_transformed": "shardlaw.spec.vectors.program_vectors.dump_program",
    "load_transformed": "shardlaw.spec.vectors.program_vectors.load_program",
    "transformed_differences": "shardlaw.spec.vectors.program_vectors.program_differences",
    "transformed_rules_hit": "a program vector's rule and side",
    "transform_vectors": "shardlaw.spec.vectors.program_vectors",
    **{name: f"shardlaw.spec.program.partial_eval ({where})"
       for name, where in (("known_equation", "known_program, AD-6"),
                           ("unknown_equation", "unknown_program, AD-7"),
                           ("partially_evaluated", "partial_eval_program"),
                           ("PartiallyEvaluated", "PartiallyEvaluatedProgram"),
                           ("pruned_equation", "dce_program, AD-8"))},
}


def __getattr__(name):
    if name in RETIRED:
        raise AttributeError(f"shardlaw.spec.{name} was retired with the transformed-call "
                             f"path (issue 31): use {RETIRED[name]} (docs/programs.rst)",
                             name=name, obj=None)
    if name in _SOLVER_NAMES:
        from .prove import smt
        return getattr(smt, name)
    if name in MOVED:   # an earlier module name, as an attribute (S.values, ...)
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RULES", "Rule", "Rejection", "explain", "rule", "tracing",
    "Iota", "AbstractMesh", "AxisType", "Device", "DeviceList", "Mesh", "P", "PartitionSpec",
    "UNCONSTRAINED", "HloSharding", "Manual", "Maximal", "Replicated", "SubgroupType", "Tiled",
    "Unreduced", "hlo_text", "iota_tile", "parse_hlo", "tiled", "AUTO", "UNSPECIFIED",
    "GSPMDSharding", "NamedSharding", "SingleDeviceSharding", "addressable_device_ids", "box_of",
    "check_rank", "device_ids", "devices_indices_map", "is_fully_replicated", "num_devices",
    "replica_id", "replica_ids", "replication_factor", "shard_shape", "tiles_per_dimension",
    "to_hlo", "hlo_equal", "jax_equivalent", "placement_equivalent", "from_jax", "to_jax",
    "Layout", "Format", "AUTO_LAYOUT",
    "Arg", "Call", "JitOptions", "Out", "Static", "Verdict", "jit_call", "describe_call",
    "CallSite", "explain_cache", "policy_classes",
    "Vector", "dump_vector", "load_vector",
]
__all__ += [*arguments.__all__, *autodiff.__all__, *batching.__all__, *constraint.__all__,
            *shardmap.__all__]
__all__ += ["Program", "Value", "Const", "Jit", "ShardingConstraint", "DevicePut", "ShardMap",
            "Reshard", "Opaque", "explain_program", "ProgramVerdict", "vmap_program",
            "nested_vmap_program",
            "jvp_program", "linearize_program", "vjp_program", "grad_program",
            "value_and_grad_program", "LinearizedProgram", "VjpProgram", "dce_program",
            "partial_eval_program"]
__all__ += [*processes.__all__, *process_transfers.__all__]
