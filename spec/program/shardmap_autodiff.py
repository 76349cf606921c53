"""A ``shard_map`` under ``jax.linearize``, ``jax.vjp`` and ``jax.grad``: the specs its linearization and its transpose stage, each collective's transpose, and the cotangents' types (AD-10 to AD-16).

JAX 0.10.2 linearizes a shard_map (``shard_map._shard_map_linearize``) into two shard_maps
over the same mesh: the *known* one runs the body's primal half and returns, before the
primal outputs, every residual the tangent half reads that is neither a body input nor a
primal output, each split by AD-10's spec; the *tangent* one takes those residuals (a
forwarded one with its input's or output's spec), then each non-zero tangent with its
primal's spec. Transposing the tangent shard_map (``_shard_map_transpose``) stages one
more shard_map whose specs AD-11 gives, its body the tangent body transposed equation by
equation, each collective by AD-12. :mod:`shardlaw.spec.program.autodiff` builds the
programs; the functions here decide the specs and the transposes. Over Explicit axes, a
cotangent any equation hands back while transposing must be typed as its primal's
cotangent (AD-13), as JAX's backward pass checks, and two cotangents summed at one value
must be typed alike (AD-14); a cotangent typed unreduced (a reduced value's) goes through
no unary elementwise primitive (AD-15), and a product's transpose hands back no
cotangent typed unreduced that it must reshape to (AD-16).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.rules import Failure, reject, rule
from ..core.values import AbstractMesh, AxisType, PartitionSpec
from .primitives import entry_of_name, names_where

P = PartitionSpec  # the name the examples use

__all__ = ["residual_spec", "cotangent_spec", "unmentioned_axes", "transposed_collective",
           "divisor", "check_cotangent_type", "check_summed_types", "check_unreduced_operand",
           "check_product_cotangent", "NoDerivative", "CotangentType", "SummedTypes",
           "UnreducedOperand", "ReshapedToUnreduced", "NO_DERIVATIVE", "UNARY",
           "check_literal_product", "LiteralProduct"]

# The collectives JAX gives no differentiation rule (a non-zero tangent reaching one is
# refused while the transformed function is traced): read from the primitive table.
NO_DERIVATIVE = names_where(jvp="no_derivative")


def _spec_names(spec: PartitionSpec) -> frozenset[str]:
    return frozenset(n for entry in spec for n in (
        entry if isinstance(entry, tuple) else (entry,) if entry else ()))


@rule("AD-10", mirrors="jax._src.shard_map._shard_map_linearize; jax._src.core.ShapedArray.nospec")
def residual_spec(axis_names: tuple[str, ...], manual_axes: frozenset[str], check_vma: bool,
                  varying: frozenset[str]) -> PartitionSpec:
    """A residual a linearized shard_map stores is returned split along its first dimension over the axes it varies along (check_vma) or every manual axis (check_vma off), in mesh order; a scalar residual gets a first dimension of 1.

    ``axis_names`` is the mesh's axes in order; ``manual_axes`` the axes this shard_map
    makes manual. The residual is typed per shard, so its global first dimension is its
    shard's times the product of those axes' sizes.

    >>> residual_spec(("x", "y"), frozenset({"x", "y"}), True, frozenset({"y"}))
    P('y')
    >>> residual_spec(("x", "y"), frozenset({"y", "x"}), False, frozenset())
    P(('x', 'y'))
    >>> residual_spec(("x", "y"), frozenset({"x"}), True, frozenset())
    P()
    """
    chosen = varying if check_vma else manual_axes
    names = tuple(n for n in axis_names if n in chosen)
    return P(names) if names else P()


def cotangent_spec(spec: PartitionSpec) -> PartitionSpec:
    """A cotangent's spec: its primal's, with unreduced and reduced axes swapped (JAX's
    ``to_ct_spec``)."""
    if not spec.reduced and not spec.unreduced:
        return spec
    return P(*spec, unreduced=spec.reduced, reduced=spec.unreduced)


@rule("AD-11", mirrors="jax._src.shard_map._shard_map_transpose; jax._src.shard_map._unmentioned2")
def unmentioned_axes(axis_names: tuple[str, ...], manual_axes: frozenset[str],
                     spec: PartitionSpec) -> tuple[str, ...]:
    """A transposed shard_map takes the non-zero cotangents with their outputs' specs, then the residuals, and returns reached inputs' cotangents with their in specs; without check_vma, cotangents are divided by the manual axes a spec omits, then summed over them.

    Returns those axes (in mesh order): the manual axes the spec names neither as a split
    nor as unreduced. With check_vma on, the varying types already say where a cotangent is
    replicated, and nothing is divided or summed.

    >>> unmentioned_axes(("x", "y"), frozenset({"x", "y"}), P("x"))
    ('y',)
    >>> unmentioned_axes(("x", "y"), frozenset({"x"}), P())
    ('x',)
    >>> math.prod({"x": 2, "y": 4}[a] for a in unmentioned_axes(("x", "y"), frozenset({"x", "y"}), P(None)))
    8
    """
    named = _spec_names(spec) | spec.unreduced
    return tuple(n for n in axis_names if n in manual_axes and n not in named)


@dataclasses.dataclass(frozen=True)
class NoDerivative(Failure, rule="AD-12", error=NotImplementedError):
    template = ("Differentiation rule for '{primitive}' not implemented: a non-zero tangent "
                "reaches the {primitive} at {path}")
    hint = "Differentiate a psum-based expression instead, or stop the gradient before it."
    primitive: str
    path: str


# What each linear collective transposes to: the primitive, then how its parameters map.
_TRANSPOSES = {"psum_invariant": "pvary", "pvary": "psum_invariant", "psum": "psum",
               "all_gather": "reduce_scatter", "reduce_scatter": "all_gather",
               "ppermute": "ppermute", "all_to_all": "all_to_all"}


@rule("AD-12", mirrors="jax._src.lax.parallel: the transpose rules of psum, psum_invariant, "
                       "pvary, all_gather, reduce_scatter, ppermute and all_to_all")
def transposed_collective(primitive: str, params: dict[str, Any], path: str = "",
                          axis_order: tuple[str, ...] | None = None) -> tuple:
    """A collective's cotangent is its transpose: psum_invariant and pvary swap, psum stays psum, all_gather and psum_scatter swap, ppermute inverts its pairs, all_to_all swaps its split and concat axes; pmax and pmin have none (NotImplementedError).

    Returns the transposed primitive and its parameters (sorted by name, as a described
    equation holds them). psum_invariant's pvary names each of its axes once, in the
    mesh's order (``axis_order``), as ``jax.lax.pvary`` casts.

    >>> transposed_collective("ppermute", {"axis_name": ("x",), "perm": ((0, 1), (1, 0))})
    ('ppermute', (('axis_name', ('x',)), ('perm', ((1, 0), (0, 1)))))
    >>> transposed_collective("all_to_all", {"axis_name": ("x",), "split_axis": 0, "concat_axis": 1, "axis_index_groups": None, "tiled": True})[1][2:4]
    (('concat_axis', 0), ('split_axis', 1))
    >>> transposed_collective("pmax", {"axes": ("x",)}, "body[0].shard_map.body[2]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNotImplementedError: [AD-12]: Differentiation rule for 'pmax' not implemented: a non-zero tangent reaches the pmax at body[0].shard_map.body[2]. Differentiate a psum-based expression instead, or stop the gradient before it.
    """
    if entry_of_name(primitive).jvp == "no_derivative":
        raise reject(NoDerivative(primitive, path))
    name = _TRANSPOSES[primitive]
    p = dict(params)
    if primitive == "psum_invariant":
        order = p["axes"] if axis_order is None else axis_order
        out = {"axes": tuple(n for n in dict.fromkeys(order) if n in p["axes"])}
    elif primitive == "pvary":
        out = {"axes": p["axes"]}
    elif primitive == "psum":
        out = p
    elif primitive == "all_gather":
        out = {"axis_index_groups": p.get("axis_index_groups"), "axis_name": p["axis_name"],
               "axis_size": p["axis_size"], "scatter_dimension": p["all_gather_dimension"],
               "tiled": p["tiled"]}
    elif primitive == "reduce_scatter":
        out = {"all_gather_dimension": p["scatter_dimension"],
               "axis_index_groups": p.get("axis_index_groups"), "axis_name": p["axis_name"],
               "axis_size": p["axis_size"], "tiled": p["tiled"]}
    elif primitive == "ppermute":
        out = {"axis_name": p["axis_name"],
               "perm": tuple((t, s) for s, t in p["perm"])}
    else:
        out = dict(p, split_axis=p["concat_axis"], concat_axis=p["split_axis"])
    return name, tuple(sorted(out.items()))


@dataclasses.dataclass(frozen=True)
class CotangentType(Failure, rule="AD-13", error=ValueError):
    template = ("Expected cotangent type {expected} but got {got}: the cotangent reaching "
                "{path} is not typed as its primal")
    hint = ("Over Explicit axes a value's cotangent must be split as the value is: reshard "
            "the value (jax.sharding.reshard) or choose specs that keep its split.")
    expected: str
    got: str
    path: str


def _explicit(mesh: Any) -> bool:
    return mesh is not None and AxisType.Explicit in mesh.axis_types


def _short(value: Any) -> str:
    split = "" if value.spec is None else f" split {value.spec}"
    vary = f" varying {sorted(value.varying)}" if value.varying else ""
    return f"{value.dtype}{list(value.shape)}{split}{vary}"


@rule("AD-13", mirrors="jax._src.interpreters.ad.ct_check; jax._src.core.typematch")
def check_cotangent_type(expected: Any, got: Any, path: str = "") -> None:
    """A cotangent reaching a value while transposing has the value's shape and varying axes and, where both are typed over meshes one of which has an Explicit axis, its mesh and split; else ValueError at trace.

    ``expected`` is the value's cotangent type (its type with reduced and unreduced axes
    swapped, JAX's ``to_ct_aval``), ``got`` the cotangent's (program Values).

    >>> from shardlaw.spec.program.description import Value
    >>> mesh = AbstractMesh((4,), ("x",), (AxisType.Explicit,))
    >>> check_cotangent_type(Value((8,), mesh=mesh, spec=P("x")), Value((8,), mesh=mesh, spec=P("x")))
    >>> check_cotangent_type(Value((8,), mesh=mesh, spec=P("x")), Value((8,), mesh=mesh), "body[2]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [AD-13]: Expected cotangent type float32[8] split P('x') but got float32[8]: the cotangent reaching body[2] is not typed as its primal. Over Explicit axes a value's cotangent must be split as the value is: reshard the value (jax.sharding.reshard) or choose specs that keep its split.
    """
    same = expected.shape == got.shape and expected.varying == got.varying
    if same and expected.mesh is not None and got.mesh is not None and (
            _explicit(expected.mesh) or _explicit(got.mesh)):
        same = expected.mesh == got.mesh and expected.spec == got.spec
    if not same:
        raise reject(CotangentType(_short(expected), _short(got), path))


@dataclasses.dataclass(frozen=True)
class SummedTypes(Failure, rule="AD-14", error=AssertionError):
    template = ("two cotangents summed (add_any) at {path} are typed {first} and {second}: "
                "over Explicit axes JAX adds only cotangents of one type")
    hint = ("Keep the values the cotangents come back through typed alike: reshard one "
            "(jax.sharding.reshard) to the other's split, or place both on one mesh.")
    first: str
    second: str
    path: str


@rule("AD-14", mirrors="jax._src.ad_util.add_abstract; jax._src.core.typematch")
def check_summed_types(first: Any, second: Any, path: str = "") -> None:
    """Two cotangents summed at one value while transposing, both typed over meshes one of which has an Explicit axis, have the same mesh and split; else AssertionError at trace.

    ``first`` and ``second`` are the cotangents' types (program Values); a cotangent typed
    over no mesh is summed with any.

    >>> from shardlaw.spec.program.description import Value
    >>> mesh = AbstractMesh((4,), ("x",), (AxisType.Explicit,))
    >>> check_summed_types(Value((8,), mesh=mesh, spec=P("x")), Value((8,)))
    >>> check_summed_types(Value((8,), mesh=mesh, spec=P("x")), Value((8,), mesh=mesh), "body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionAssertionError: [AD-14]: two cotangents summed (add_any) at body[1] are typed float32[8] split P('x') and float32[8]: over Explicit axes JAX adds only cotangents of one type. Keep the values the cotangents come back through typed alike: reshard one (jax.sharding.reshard) to the other's split, or place both on one mesh.
    """
    if first.mesh is None or second.mesh is None or not (
            _explicit(first.mesh) or _explicit(second.mesh)):
        return
    if (first.mesh, first.spec) != (second.mesh, second.spec):
        raise reject(SummedTypes(_short(first), _short(second), path))


# The unary elementwise primitives (jax.lax's unop): none takes an unreduced operand; nor
# does div (a quotient by a literal, which the description leaves out of the operands,
# transposes to one).
UNARY = ("neg", "sin", "cos", "exp", "copy", "div")


@dataclasses.dataclass(frozen=True)
class UnreducedOperand(Failure, rule="AD-15", error=NotImplementedError):
    template = ("unreduced rule for {primitive} is not implemented: the cotangent the "
                "transpose at {path} applies {primitive} to is typed {value}")
    hint = ("Reshard the value typed reduced to a type without reduced axes "
            "(jax.sharding.reshard) before it is differentiated: its cotangent is unreduced.")
    primitive: str
    value: str
    path: str


@rule("AD-15", mirrors="jax._src.lax.lax.unop_ur_rule")
def check_unreduced_operand(primitive: str, operand: Any, path: str = "") -> None:
    """A unary elementwise primitive or a quotient a transpose applies to a cotangent typed with unreduced axes (the cotangent of a value typed reduced) is refused: NotImplementedError at trace.

    >>> from shardlaw.spec.program.description import Value
    >>> mesh = AbstractMesh((4,), ("x",), (AxisType.Explicit,))
    >>> check_unreduced_operand("neg", Value((8,), mesh=mesh, spec=P("x")))
    >>> check_unreduced_operand("neg", Value((8,), mesh=mesh, spec=P(unreduced={"x"})), "body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionNotImplementedError: [AD-15]: unreduced rule for neg is not implemented: the cotangent the transpose at body[1] applies neg to is typed float32[8] split P(unreduced={'x'}). Reshard the value typed reduced to a type without reduced axes (jax.sharding.reshard) before it is differentiated: its cotangent is unreduced.
    """
    if primitive in UNARY and operand.spec is not None and operand.spec.unreduced:
        raise reject(UnreducedOperand(primitive, _short(operand), path))


@dataclasses.dataclass(frozen=True)
class ReshapedToUnreduced(Failure, rule="AD-16", error=ValueError):
    template = ("out_sharding passed to `reshape` cannot contain unreduced axes: the "
                "product transposed at {path} is typed {product}, its operand's cotangent "
                "{expected}")
    hint = ("Reshard the value typed reduced to a type without reduced axes "
            "(jax.sharding.reshard) before it is multiplied, or pass a cotangent typed "
            "unreduced as its cotangent type says.")
    product: str
    expected: str
    path: str


@rule("AD-16", mirrors="jax._src.lax.lax._unbroadcast; jax._src.lax.lax._reshape_unreduced_rule")
def check_product_cotangent(product: Any, expected: Any, path: str = "") -> None:
    """A product's transpose whose result is not typed as its operand's cotangent, which has unreduced axes, is refused: JAX reshapes it to that type, and a reshape takes no unreduced type (ValueError at trace).

    ``product`` is the type of the cotangent times the other factor (split as the first of
    them typed over their mesh), ``expected`` the operand's cotangent type.

    >>> from shardlaw.spec.program.description import Value
    >>> mesh = AbstractMesh((2,), ("x",), (AxisType.Explicit,))
    >>> unreduced = Value((8,), mesh=mesh, spec=P(unreduced={"x"}))
    >>> check_product_cotangent(unreduced, unreduced)
    >>> check_product_cotangent(Value((8,), mesh=mesh, spec=P(reduced={"x"})), unreduced, "body[2]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [AD-16]: out_sharding passed to `reshape` cannot contain unreduced axes: the product transposed at body[2] is typed float32[8] split P(reduced={'x'}), its operand's cotangent float32[8] split P(unreduced={'x'}). Reshard the value typed reduced to a type without reduced axes (jax.sharding.reshard) before it is multiplied, or pass a cotangent typed unreduced as its cotangent type says.
    """
    if expected.spec is None or not expected.spec.unreduced:
        return
    if (product.mesh, product.spec) != (expected.mesh, expected.spec):
        raise reject(ReshapedToUnreduced(_short(product), _short(expected), path))


@dataclasses.dataclass(frozen=True)
class LiteralProduct(Failure, rule="AD-18", error=Exception, jax_error="ShardingTypeError"):
    template = ("the other factor should be reduced along the same axes the cotangent is "
                "unreduced on: the product transposed at {path} multiplies a cotangent "
                "typed {value} by {other}")
    hint = ("Reshard the value typed reduced to a type without reduced axes "
            "(jax.sharding.reshard) before it is multiplied or scaled.")
    value: str
    other: str
    path: str


@rule("AD-18", mirrors="jax._src.lax.lax._mul_ur_rule")
def check_literal_product(operand: Any, other: Any = None, path: str = "") -> None:
    """A product a transpose applies to a cotangent typed with unreduced axes is refused unless its other factor is reduced over exactly those axes (a literal is reduced over none): ShardingTypeError at trace.

    ``other`` is the other factor's type (None: a literal).

    >>> from shardlaw.spec.program.description import Value
    >>> mesh = AbstractMesh((4,), ("x",), (AxisType.Explicit,))
    >>> unreduced = Value((8,), mesh=mesh, spec=P(unreduced={"x"}))
    >>> check_literal_product(unreduced, Value((8,), mesh=mesh, spec=P(reduced={"x"})))
    >>> check_literal_product(unreduced, None, "body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionException: [AD-18]: the other factor should be reduced along the same axes the cotangent is unreduced on: the product transposed at body[1] multiplies a cotangent typed float32[8] split P(unreduced={'x'}) by a literal. Reshard the value typed reduced to a type without reduced axes (jax.sharding.reshard) before it is multiplied or scaled.
    """
    unreduced = operand.spec.unreduced if operand.spec is not None else frozenset()
    if not unreduced:
        return
    reduced = other.spec.reduced if other is not None and other.spec is not None else frozenset()
    if reduced != unreduced:
        raise reject(LiteralProduct(_short(operand), "a literal" if other is None
                                    else _short(other), path))


def divisor(sizes: dict[str, int], axes: tuple[str, ...]) -> int:
    """The product of the sizes of ``axes`` (what an unchecked cotangent is divided by)."""
    return math.prod(sizes[a] for a in axes)
