"""A value typed over another mesh than a shard_map's body, taken by a primitive inside it (SMAP-29).

Inside a ``jax.shard_map``'s body JAX types values over the body's mesh: the shard_map's
mesh, its manual axes typed Manual (``jax.sharding.get_abstract_mesh()``). A value the body
closes over (an argument of the enclosing jit, a value computed outside) keeps the type it
had outside, over the user's mesh. JAX 0.10.2 meets such a value where a primitive of the
body is bound to it:

* C1 — where every axis of the body's mesh is Manual or Auto, a value over a mesh of Auto
  axes only is resharded onto the body's mesh (the ``reshard`` JAX stages, no refusal),
  but a value over a mesh with Explicit axes is not: "Closing over inputs to shard_map
  where the input is sharded on `Explicit` axes is not implemented"
  (NotImplementedError), whatever its split;
* C2 — otherwise (the body's mesh keeps Explicit axes: a shard_map manual over some axes
  of an Explicit mesh; or the value's mesh has Manual axes, but no Explicit ones), a
  primitive typing its operands refuses one over another mesh: "For primitive add,
  context mesh ... should match the aval mesh ..." (ValueError).

A ``jit``, a ``reshard``, a control-flow call, a custom-derivative call or a nested
shard_map is bound without that check (JAX does not convert their operands): a value
closed over may pass through them, and be returned, untouched. Pass the value as an
argument of the shard_map (an in_spec for it) instead of closing over it.

Standard library only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, rule
from ..core.values import AbstractMesh, AxisType

__all__ = ["check_operand_mesh", "ClosedOverExplicit", "OperandOverAnotherMesh"]


@dataclasses.dataclass(frozen=True)
class ClosedOverExplicit(Failure, rule="SMAP-29", error=NotImplementedError):
    template = ("the {primitive} in the shard_map's body takes a value of type {value} typed "
                "over {mesh}, which has Explicit axes, where the body's mesh is {body}: "
                "Closing over inputs to shard_map where the input is sharded on `Explicit` "
                "axes is not implemented")
    hint = ("Pass the value to the shard_map as an argument (with an in_spec) rather than "
            "closing over it")
    primitive: str
    value: str
    mesh: Any
    body: Any


@dataclasses.dataclass(frozen=True)
class OperandOverAnotherMesh(Failure, rule="SMAP-29"):
    template = ("the {primitive} in the shard_map's body takes a value of type {value} typed "
                "over {mesh}: For primitive {primitive}, context mesh {body} should match "
                "the aval mesh {mesh}")
    hint = ("Pass the value to the shard_map as an argument (with an in_spec) rather than "
            "closing over it")
    primitive: str
    value: str
    mesh: Any
    body: Any


def _all(mesh: AbstractMesh, *types: AxisType) -> bool:
    return all(t in types for t in mesh.axis_types)


@rule("SMAP-29", mirrors="jax._src.core: Primitive.bind's canonicalization of its "
                         "arguments (C1) and check_avals_context_mesh (C2)")
def check_operand_mesh(primitive: str, value: str, mesh: AbstractMesh | None,
                       body: AbstractMesh, path: str = "") -> None:
    """Inside a shard_map's body a primitive takes values over the body's mesh, or over Auto axes only where the body's axes are all Manual or Auto; one over Explicit axes there is not implemented (NotImplementedError), others are refused (ValueError).

    ``value`` is the operand's type as words, ``mesh`` the mesh of its type (None: a value
    whose type names no mesh, never refused), ``body`` the body's mesh.

    >>> from shardlaw.spec.core.values import AbstractMesh
    >>> E, M, A = AxisType.Explicit, AxisType.Manual, AxisType.Auto
    >>> user = AbstractMesh((2, 4), ("x", "y"), (E, E))
    >>> check_operand_mesh("add", "f32[4, 16]", AbstractMesh((2, 4), ("x", "y"), (A, A)),
    ...                    AbstractMesh((2, 4), ("x", "y"), (M, M)))
    >>> check_operand_mesh("add", "f32[8, 16]", user, AbstractMesh((2, 4), ("x", "y"), (M, M)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNotImplementedError: [SMAP-29]: the add in the shard_map's body takes a value of type f32[8, 16] typed over AbstractMesh({'x': 2, 'y': 4}, types=('Explicit', 'Explicit')), which has Explicit axes, where the body's mesh is AbstractMesh({'x': 2, 'y': 4}, types=('Manual', 'Manual')): Closing over inputs to shard_map where the input is sharded on `Explicit` axes is not implemented. ...
    >>> check_operand_mesh("add", "f32[8, 16]", user, AbstractMesh((2, 4), ("x", "y"), (M, E)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [SMAP-29]: the add in the shard_map's body takes a value of type f32[8, 16] typed over AbstractMesh({'x': 2, 'y': 4}, types=('Explicit', 'Explicit')): For primitive add, context mesh AbstractMesh({'x': 2, 'y': 4}, types=('Manual', 'Explicit')) should match the aval mesh AbstractMesh({'x': 2, 'y': 4}, types=('Explicit', 'Explicit')). ...
    """
    if mesh is None or mesh.empty or mesh == body:
        return
    bindable = AxisType.Manual in body.axis_types and _all(body, AxisType.Manual, AxisType.Auto)
    if bindable and _all(mesh, AxisType.Auto):
        return   # C1: resharded onto the body's mesh
    if bindable and AxisType.Explicit in mesh.axis_types:
        # C1: a value over Explicit axes is not resharded onto the body's mesh
        raise reject(ClosedOverExplicit(primitive, value, mesh, body), path or None)
    # C2: the operand is typed over the body's mesh (JAX lets two meshes of Auto axes only
    # differ, but a body's mesh has a Manual axis)
    raise reject(OperandOverAnotherMesh(primitive, value, mesh, body), path or None)
