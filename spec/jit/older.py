"""What JAX 0.4.13 does not have: a call that uses it cannot be written for that release.

The 0.4.13 edition (:mod:`shardlaw.spec.core.editions`) answers only for calls that
release can express. :func:`check_expressible` (CALL-1) reads a call once, before any of
jit's rules, and refuses the first part of it that 0.4.13 lacks, with the class 0.4.13
raises where a user writes that part: ``jax.set_mesh`` and abstract meshes
(AttributeError), mesh axis types (TypeError: ``Mesh`` takes no ``axis_types``), memory
kinds (TypeError: the sharding constructors take none), reduced and unreduced axes
(TypeError: ``PartitionSpec`` takes neither), and layouts (ModuleNotFoundError: there is no
``jax.experimental.layout``). The rules whose subject this is are marked absent in 0.4.13
where they are declared (JIT-5, RES-3, LAY-1, NS-4, PROG-5).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from .call import Arg, Call
from .layouts import Format, is_layout
from .options import jit_context_mesh, leaf_to_sharding
from ..core.pytree import leaves_with_paths, map_leaves, show_path
from ..core.rules import Failure, current_edition, reject, rule, varies
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = ["check_expressible", "LACKING", "block_mesh", "call_context", "block_leaf",
           "block_leaves"]

@dataclasses.dataclass(frozen=True)
class Lacking(Failure, rule="CALL-1", error=AttributeError):
    template = "jax {jax} has no {feature}, which the call uses at {where}: {said}"
    hint = "Ask about this call for jax 0.10.2, or write it without the {feature}."
    jax: str
    feature: str
    where: str
    said: str


@dataclasses.dataclass(frozen=True)
class LackingKeyword(Lacking, error=TypeError):
    """A constructor of 0.4.13 that takes no such keyword."""


@dataclasses.dataclass(frozen=True)
class LackingModule(Lacking, error=ModuleNotFoundError):
    """A module 0.4.13 does not have."""


# What 0.4.13 lacks -> (the failure, raised as the class 0.4.13 raises; what it says).
LACKING: dict[str, tuple[type[Lacking], str]] = {
    "context mesh": (Lacking, "module 'jax' has no attribute 'set_mesh'"),
    "abstract mesh": (Lacking, "module 'jax.sharding' has no attribute 'AbstractMesh'"),
    "axis types": (LackingKeyword, "Mesh.__init__() got an unexpected keyword argument "
                                   "'axis_types'"),
    "memory kind": (LackingKeyword, "the sharding's __init__() takes no memory_kind"),
    "reduced axes": (LackingKeyword, "PartitionSpec.__new__() got an unexpected keyword "
                                     "argument 'unreduced'"),
    "layout": (LackingModule, "No module named 'jax.experimental.layout'"),
}


def _in_sharding(s: Any) -> Iterator[str]:
    """The features of one sharding (or spec, or Format) that 0.4.13 lacks."""
    if isinstance(s, Format) or is_layout(s):
        yield "layout"
        s = s.sharding if isinstance(s, Format) else None
    if isinstance(s, PartitionSpec):
        if s.reduced or s.unreduced:
            yield "reduced axes"
    elif isinstance(s, (NamedSharding, SingleDeviceSharding, GSPMDSharding)):
        if s.memory_kind not in (None, "device"):
            yield "memory kind"
        if isinstance(s, NamedSharding):
            if isinstance(s.mesh, AbstractMesh):
                yield "abstract mesh"
            elif any(t != AxisType.Auto for t in s.mesh.axis_types):
                yield "axis types"
            yield from _in_sharding(s.spec)


def _uses(call: Call) -> Iterator[tuple[str, str]]:
    """(feature, where) for each use, in the call, of what 0.4.13 lacks."""
    if call.context_mesh is not None:
        yield ("abstract mesh" if isinstance(call.context_mesh, AbstractMesh)
               else "context mesh"), "the context mesh"
    if call.resource_mesh is not None and any(
            t != AxisType.Auto for t in call.resource_mesh.axis_types):
        yield "axis types", "the mesh of the with-mesh block"
    for name in ("in_shardings", "out_shardings"):
        tree = getattr(call.options, name)
        if tree is UNSPECIFIED:
            continue
        for path, leaf in leaves_with_paths(tree, is_leaf=lambda x: x is None):
            for feature in _in_sharding(leaf):
                yield feature, show_path((name, *path))
    for what, tree in (("args", call.args), ("kwargs", call.kwargs),
                       ("aot_args", call.aot_args or ()), ("aot_kwargs", call.aot_kwargs or {})):
        for path, leaf in leaves_with_paths(tree):
            if isinstance(leaf, Arg):
                if leaf.layout is not None:
                    yield "layout", show_path((what, *path))
                for feature in _in_sharding(leaf.sharding):
                    yield feature, show_path((what, *path))


@rule("CALL-1", mirrors="(the JAX 0.4.13 API: what a user cannot write for that release)")
def check_expressible(call: Call) -> None:
    """For JAX 0.4.13 a call uses only what 0.4.13 has (no context mesh, abstract mesh, axis types, memory kinds, reduced axes or layouts); what it lacks is refused with the class 0.4.13 raises.

    Under the version of record (0.10.2) every call passes.

    >>> from shardlaw.spec.core.editions import holding
    >>> from shardlaw.spec.jit.call import Out
    >>> call = Call(args=(Arg.numpy((8,)),), outputs=Out((8,)),
    ...             context_mesh=Mesh.iota((8,), ("x",)))
    >>> check_expressible(call)
    >>> with holding("0.4.13"):
    ...     check_expressible(call)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionAttributeError: [CALL-1]: jax 0.4.13 has no context mesh, which the call uses at the context mesh: module 'jax' has no attribute 'set_mesh'. Ask about this call for jax 0.10.2, or write it without the context mesh.
    """
    jax = current_edition()
    if jax != "0.4.13":
        return
    for feature, where in _uses(call):
        failure, said = LACKING[feature]
        raise reject(failure(jax, feature, where, said))


@varies("0.4.13", "A call made through pjit inside a ``with mesh:`` block runs in the block's "
        "resource environment: pjit resolves its PartitionSpec and None leaves against the "
        "block's mesh (PJIT-2), and the mesh's devices are the program's devices.",
        clauses=("(C1) The block's mesh is pjit's resource environment; jax.jit reads no "
                 "such block, and there is no jax.set_mesh (CALL-1).",
                 "(C2) Every sharding the call gives or holds must be on exactly the mesh's "
                 "devices, in order (DA-1, ValueError), compared before unused inputs are "
                 "dropped (KEEP-1); a call that gives none runs on them, its results "
                 "committed.",
                 "(C3) A result the compiler placed takes no type from the block (OUT-1): "
                 "with no NamedSharding among the kept inputs it comes back a "
                 "GSPMDSharding."))
@rule("PJIT-1", mirrors="jax._src.pjit.pjit (resource_env: mesh_lib.thread_resources.env); "
                        "jax._src.mesh.Mesh.__enter__")
def block_mesh(mesh: Mesh) -> Mesh:
    """A call made through pjit inside a ``with mesh:`` block runs under the block's mesh as under ``jax.set_mesh(mesh)``: the block's mesh is the context mesh jit reads.

    (C1) Both pjit and the block are deprecated (DeprecationWarning); ``jax.jit`` inside
    the block does not read it.
    (C2) The mesh's devices are the program's devices (DA-1) and a result the compiler
    placed is typed over the mesh (OUT-1 (C3)), as for any context mesh.

    >>> block_mesh(Mesh.iota((2, 4), ("x", "y")))
    Mesh({'x': 2, 'y': 4})
    """
    return mesh


def call_context(call: Call) -> Mesh | AbstractMesh | None:
    """The mesh a call runs under: the mesh of its ``with mesh:`` block (PJIT-1), else its
    context mesh as jit reads it (JIT-5)."""
    if call.resource_mesh is not None:
        return block_mesh(call.resource_mesh)
    return jit_context_mesh(call.context_mesh)


@rule("PJIT-2", mirrors="jax._src.pjit._create_sharding_for_array (under a resource env)")
def block_leaf(leaf: Any, mesh: Mesh, which: str) -> Any:
    """Under pjit inside a ``with mesh:`` block, a None leaf of in_shardings or out_shardings (the whole tree's too) is the replicated NamedSharding over the block's mesh, and a PartitionSpec is resolved against that mesh.

    (C1) A None leaf is ``NamedSharding(mesh, P())``: pjit does not leave it to the
    compiler, where ``jax.jit`` without a block does (JIT-3). JAX 0.4.13 and 0.10.2 agree.
    (C2) A PartitionSpec becomes a NamedSharding over the block's mesh, its axes checked
    there (NS-1..3); a Sharding stands for itself (JIT-3).

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> block_leaf(None, mesh, "in_shardings[0]")
    NamedSharding(Mesh({'x': 2}), P())
    >>> block_leaf(P("x"), mesh, "in_shardings[0]")
    NamedSharding(Mesh({'x': 2}), P('x'))
    """
    if leaf is None:
        return NamedSharding(mesh, PartitionSpec())
    return leaf_to_sharding(leaf, mesh, which)


def block_leaves(tree: Any, mesh: Mesh, which: str) -> Any:
    """Each leaf of a shardings tree of a pjit call inside a ``with mesh:`` block, read by
    PJIT-2, keeping the tree."""
    if tree is UNSPECIFIED:
        return UNSPECIFIED
    return map_leaves(lambda path, leaf: block_leaf(leaf, mesh, show_path((which, *path))),
                      tree, none_is_leaf=True, with_path=True)
