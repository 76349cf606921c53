"""Argument placement: how jit puts numpy arrays, scalars and arrays on devices before a call (ARG rules).

``jax.device_put(v, s)`` and a call ``jax.jit(f, in_shardings=s)(v)`` both turn a value that
is not yet a ``jax.Array`` into one: a Python scalar, a numpy scalar, a 0-d or n-d numpy
array. The rules say which values are refused, what dtype and weak type the placed value
has (64-bit types canonicalised, as with ``jax_enable_x64`` off), and which device holds
which box of it:

* ARG-0 the description is well-formed (the spec's own input checks);
* ARG-1 masked arrays, text, bytes, objects and arrays of non-numeric dtypes are refused;
* ARG-2 the dtype and weak type of the placed value;
* ARG-3 a Python int must fit in int32;
* ARG-4 the value fits its sharding, and each device holds the box IDX-1 gives it;
* ARG-5 a sharding with UNCONSTRAINED dimensions places nothing.

A value is described by its kind (:data:`VALUE_KINDS`), shape and dtype name; a Python int
also by its value. The public question is :func:`place_argument`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.dims import check_dims
from ..core.hlo import Tiled
from ..placement.blocks import (
    Indivisible, TilesDoNotMatchRank, check_rank, devices_indices_map, shard_shape,
)
from ..core.rules import IllFormedParameter, Failure, Rejection, explain, reject, require, rule
from ..core.shardings import GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import UNCONSTRAINED, AxisType, Mesh, PartitionSpec
from ..jit.call import CANONICAL, SCALAR_DTYPES, placed_dtype

P = PartitionSpec  # the name the examples use

__all__ = ["Placement", "place_argument", "placed_dtype"]

Box = tuple[tuple[int, int], ...]

# What a user passes: Python scalars by their type, numpy values, and values JAX refuses.
# (ARG-2 and its tables live with the jit call's description: jit's tracing, device_put and
# a whole program's inputs type an argument by the one rule.)
PYTHON_SCALARS = SCALAR_DTYPES
VALUE_KINDS = (*PYTHON_SCALARS, "numpy_scalar", "numpy_array", "masked_array", "str", "bytes",
               "object")
# numpy dtype names JAX refuses as array types (``float128`` is numpy's longdouble).
NOT_NUMERIC = ("str", "bytes", "object", "datetime64", "timedelta64", "float128", "void")
NUMPY_KINDS = ("numpy_scalar", "numpy_array", "masked_array")
# numpy scalar types whose dtype JAX checks only after the sharding's rank (a numpy.str_ is
# a str, refused at once).
CHECKED_AFTER_PLACEMENT = ("datetime64", "timedelta64", "bytes")
VIAS = ("device_put", "jit")
# The dtype of a zero tangent (what grad gives an integer input): it has no bits to place.
FLOAT0 = "float0"
INT32 = (-(2**31), 2**31 - 1)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a placed value lives: its dtype and weak type, whether it is committed, and the
    box of the value each device holds (device id -> ((start, stop) per dimension))."""

    dtype: str
    weak_type: bool
    committed: bool
    shards: dict[int, Box]


# --------------------------------------------------------------------------- ARG-0

@dataclasses.dataclass(frozen=True)
class BadArgumentDescription(IllFormedParameter, rule="ARG-0"):
    pass


@rule("ARG-0", mirrors="(input checking of the spec's description; JAX has no such value)")
def check_argument_description(condition: bool, what: str, expected: str, value: Any) -> None:
    """A value's kind is one of VALUE_KINDS, a numpy value has a dtype name, a Python scalar has shape (), and a sharding is None or concrete, without unreduced or reduced axes.

    >>> check_argument_description(False, "value_kind", "one of VALUE_KINDS", "list")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [ARG-0]: value_kind must be one of VALUE_KINDS, got 'list'
    """
    require(condition, lambda: BadArgumentDescription(what, expected, value))


def _check_description(value_kind: Any, shape: Any, dtype: Any, sharding: Any, int_value: Any,
                       via: Any) -> tuple[int, ...]:
    check_argument_description(isinstance(value_kind, str) and value_kind in VALUE_KINDS,
                               "value_kind", f"one of {VALUE_KINDS}", value_kind)
    shape = check_dims(shape, what="the value's shape")
    if value_kind in PYTHON_SCALARS:
        check_argument_description(shape == (), "a Python scalar's shape", "()", shape)
    if value_kind in NUMPY_KINDS:
        known = (*CANONICAL, FLOAT0, *NOT_NUMERIC)
        check_argument_description(isinstance(dtype, str) and dtype in known,
                                   "a numpy value's dtype", f"one of {known}", dtype)
    if value_kind == "numpy_scalar":
        check_argument_description(shape == (), "a numpy scalar's shape", "()", shape)
        # Indexing a float0 array gives a numpy.void, which JAX reads as a void scalar.
        check_argument_description(dtype != FLOAT0, "a numpy scalar's dtype",
                                   "not float0 (a float0 scalar is a numpy.void; describe "
                                   "a 0-d float0 array as a numpy_array)", dtype)
    concrete = (SingleDeviceSharding, GSPMDSharding, NamedSharding)
    check_argument_description(sharding is None or isinstance(sharding, concrete)
                               and sharding.is_concrete, "the sharding",
                               "None or a sharding over concrete devices", sharding)
    # Placing a Python scalar on unreduced or reduced axes aborts JAX's process (a failed
    # check in Shardy); such shardings are left out of the description.
    check_argument_description(not isinstance(sharding, NamedSharding) or not (
        sharding.spec.unreduced or sharding.spec.reduced), "the sharding's spec",
        "free of unreduced and reduced axes", sharding)
    check_argument_description(type(int_value) is int, "int_value", "an int", int_value)
    check_argument_description(isinstance(via, str) and via in VIAS, "via", f"one of {VIAS}",
                               via)
    return shape


# --------------------------------------------------------------------------- ARG-1

@dataclasses.dataclass(frozen=True)
class MaskedArrayRefused(Failure, rule="ARG-1"):
    template = ("the argument is a numpy masked array of shape {shape}; JAX "
                "takes no masked arrays, mask and all")
    hint = "Pass arr.filled(...) (or arr.data, to drop the mask)."
    shape: tuple


@dataclasses.dataclass(frozen=True)
class NotAnArrayType(Failure, rule="ARG-1", error=TypeError):
    template = "the argument is {what}, which is not a JAX array type"
    what: str


@rule("ARG-1", mirrors="jax._src.api_util._check_arraylike / jax._src.dtypes.check_valid_dtype "
                       "/ jax._src.interpreters.pxla.shard_args")
def check_placeable_kind(value_kind: str, dtype: str | None, shape: tuple[int, ...]) -> None:
    """Masked arrays are refused (ValueError), as are text, bytes, other objects and numpy values of a non-numeric dtype (TypeError).

    A numpy scalar of datetime, timedelta or bytes type is refused only after its sharding
    is checked (ARG-4), a ``numpy.str_`` at once, as a str.

    >>> check_placeable_kind("numpy_array", "float64", (2,))
    >>> check_placeable_kind("masked_array", "float32", (2,))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [ARG-1]: the argument is a numpy masked array of shape (2,); JAX takes no masked arrays, mask and all. Pass arr.filled(...) (or arr.data, to drop the mask).
    >>> check_placeable_kind("numpy_array", "datetime64", (2,))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [ARG-1]: the argument is a numpy value of dtype datetime64, which is not a JAX array type
    """
    require(value_kind != "masked_array", lambda: MaskedArrayRefused(shape))
    require(value_kind not in ("str", "bytes", "object"),
            lambda: NotAnArrayType(f"a Python {value_kind}"))
    if value_kind in NUMPY_KINDS:
        require(dtype not in NOT_NUMERIC,
                lambda: NotAnArrayType(f"a numpy value of dtype {dtype}"))


# --------------------------------------------------------------------------- ARG-2

# ARG-2 (placed_dtype) is declared in spec/jit/call.py, below this layer, so that jit's own
# tracing (CACHE-4) and a whole program's inputs call the same rule.


# --------------------------------------------------------------------------- ARG-3

@dataclasses.dataclass(frozen=True)
class IntTooLarge(Failure, rule="ARG-3", error=OverflowError):
    template = ("the argument is the Python int {value}, outside int32's "
                "{low} .. {high}; with 64-bit types off it has no dtype")
    hint = "Pass numpy.int64(...) (wrapped to int32 silently) or enable jax_enable_x64."
    value: int
    low: int = INT32[0]
    high: int = INT32[1]


@rule("ARG-3", mirrors="jax._src.dtypes.coerce_to_array / _scalar_type_to_dtype (Python int "
                       "overflow check)")
def check_int_fits(value_kind: str, int_value: int) -> None:
    """A Python int argument lies in int32's range, -2**31 .. 2**31-1; a numpy int64 is not checked (its value wraps to int32).

    >>> check_int_fits("int", 2**31 - 1)
    >>> check_int_fits("int", 2**31)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionOverflowError: [ARG-3]: the argument is the Python int 2147483648, outside int32's -2147483648 .. 2147483647; with 64-bit types off it has no dtype. Pass numpy.int64(...) (wrapped to int32 silently) or enable jax_enable_x64.
    """
    if value_kind == "int":
        require(INT32[0] <= int_value <= INT32[1], lambda: IntTooLarge(int_value))


# --------------------------------------------------------------------------- ARG-4

@dataclasses.dataclass(frozen=True)
class ArgumentDoesNotFit(Failure, rule="ARG-4"):
    template = "a value of shape {shape} does not fit {sharding}: {reason}"
    shape: tuple
    sharding: Any
    reason: str


@dataclasses.dataclass(frozen=True)
class ArgumentDoesNotDivide(ArgumentDoesNotFit, jax_error="IndivisibleError"):
    pass


@dataclasses.dataclass(frozen=True)
class ArgumentTilesDoNotFit(ArgumentDoesNotFit, error=AssertionError):
    pass


def _explicit_past_rank(sharding: Any, rank: int) -> bool:
    """Whether a NamedSharding's spec names an Explicit mesh axis past the value's rank."""
    if not isinstance(sharding, NamedSharding):
        return False
    types = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_types))
    past = [a for entry in sharding.spec.partitions[rank:]
            for a in ((entry,) if isinstance(entry, str) else
                      entry if isinstance(entry, tuple) else ())]
    return any(types[a] is AxisType.Explicit for a in past)


def _one_device_tiles_mismatch(sharding: Any, rank: int) -> bool:
    """Whether a one-device GSPMDSharding cuts another number of dimensions than ``rank``."""
    return (isinstance(sharding, GSPMDSharding) and isinstance(sharding.hlo, Tiled)
            and sharding.hlo.num_devices == 1 and sharding.hlo.data_rank != rank)


def _explicit_split(sharding: Any, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """The first (dimension, size, ways) that Explicit mesh axes split unevenly, if any."""
    if not isinstance(sharding, NamedSharding):
        return None
    mesh = sharding.mesh
    if all(t is not AxisType.Explicit for t in mesh.axis_types):
        return None
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    for dim, (entry, size) in enumerate(zip(sharding.spec, shape)):
        names = (entry,) if isinstance(entry, str) else entry if isinstance(entry, tuple) else ()
        ways = 1
        for name in names:
            ways *= sizes[name] if types[name] is AxisType.Explicit else 1
        if size % ways:
            return dim, size, ways
    return None


@rule("ARG-4", mirrors="jax._src.api._device_put_sharding_impl / jax._src.pjit."
                       "pjit_check_aval_sharding; jax._src.core._check_divisibility")
def place_on_devices(sharding: Any, shape: tuple[int, ...], via: str, *,
                     boxes: bool = True) -> dict[int, Box]:
    """A placed value has the rank its sharding needs and divides evenly into its shards, and each device holds the box IDX-1 gives it.

    Without a sharding the value goes to the default device, device 0, whole. jit checks
    every axis at once (IndivisibleError). device_put types the value first: a spec naming
    an Explicit axis past the value's rank fails an assertion (AssertionError), a
    dimension split unevenly by Explicit axes is refused with a plain ValueError, and a
    one-device GSPMDSharding whose tiles have another rank is refused (ValueError).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> place_on_devices(NamedSharding(mesh, P("x")), (4,), "jit")[5]
    ((2, 4),)
    >>> place_on_devices(NamedSharding(mesh, P("y")), (6,), "jit")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [ARG-4]: a value of shape (6,) does not fit NamedSharding(Mesh({'x': 2, 'y': 4}), P('y')): [DIV-1]: dimension 0 of shape (6,) has size 6, which NamedSharding(Mesh({'x': 2, 'y': 4}), P('y')) splits 4 ways; 6 is not a multiple of 4 (ways per dimension: (4,)). Pad dimension 0 to a multiple of 4, or split it over fewer mesh axes.
    """
    if sharding is None:
        return {0: tuple((0, n) for n in shape)}
    if via == "device_put":
        require(not _explicit_past_rank(sharding, len(shape)), lambda: ArgumentTilesDoNotFit(
            shape, sharding, "its spec names an Explicit mesh axis past the value's rank"))
        require(not _one_device_tiles_mismatch(sharding, len(shape)), lambda: ArgumentDoesNotFit(
            shape, sharding, "its one device's tiles have another rank than the value"))
    try:
        check_rank(sharding, shape)
        uneven = _explicit_split(sharding, shape) if via == "device_put" else None
        require(uneven is None, lambda: ArgumentDoesNotFit(
            shape, sharding, "dimension {} of size {} is split {} ways over Explicit mesh "
                             "axes".format(*uneven)))  # type: ignore[misc]
        shard_shape(sharding, shape)
    except Rejection as error:
        failure = error.failure
        if failure.rule == "ARG-4":
            raise
        kind = (ArgumentDoesNotDivide if isinstance(failure, Indivisible) else
                ArgumentTilesDoNotFit if isinstance(failure, TilesDoNotMatchRank)
                or failure.error_type is AssertionError else ArgumentDoesNotFit)
        raise reject(kind(shape, sharding, explain(failure))) from None
    # boxes=False: the checks alone (a traced equation asks no device for its box, and
    # listing them would enumerate a mesh of any size)
    return devices_indices_map(sharding, shape) if boxes else {}


# --------------------------------------------------------------------------- ARG-5

@dataclasses.dataclass(frozen=True)
class UnconstrainedPlacement(Failure, rule="ARG-5"):
    template = ("{sharding} leaves dimensions {dims} UNCONSTRAINED, which can "
                "place nothing: a placed value has one layout on its devices")
    hint = "Use None for a dimension that is not split."
    sharding: Any
    dims: tuple


@dataclasses.dataclass(frozen=True)
class UnconstrainedPlacementLookup(UnconstrainedPlacement, error=KeyError):
    pass


@rule("ARG-5", mirrors="jax._src.pjit._check_unconstrained (in_shardings); jax._src.api."
                       "device_put (its mesh-axis lookup of each spec entry)")
def check_no_unconstrained(sharding: Any, via: str) -> None:
    """A sharding with an UNCONSTRAINED dimension places no value: jit refuses it before reading the value (ValueError), device_put after checking the value's type (KeyError).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> check_no_unconstrained(NamedSharding(mesh, P("x")), "jit")
    >>> check_no_unconstrained(NamedSharding(mesh, P(UNCONSTRAINED)), "jit")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [ARG-5]: NamedSharding(Mesh({'x': 2, 'y': 4}), P(UNCONSTRAINED)) leaves dimensions (0,) UNCONSTRAINED, which can place nothing: a placed value has one layout on its devices. Use None for a dimension that is not split.
    """
    if not isinstance(sharding, NamedSharding):
        return
    dims = tuple(i for i, e in enumerate(sharding.spec) if e is UNCONSTRAINED)
    kind = UnconstrainedPlacement if via == "jit" else UnconstrainedPlacementLookup
    require(not dims, lambda: kind(sharding, dims))


def place_argument(value_kind: str, shape: Any, dtype: str | None = None, sharding: Any = None,
                   *, int_value: int = 0, via: str = "device_put") -> Placement:
    """What ``jax.device_put(v, sharding)`` (``via="device_put"``) or a call
    ``jax.jit(f, in_shardings=sharding)(v)`` (``via="jit"``) makes of a value ``v`` that is
    not yet a jax.Array (ARG-0 .. ARG-4): its dtype, weak type, committedness and the box
    each device holds.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> p = place_argument("numpy_array", (8, 2), "float64", NamedSharding(mesh, P("x")))
    >>> p.dtype, p.weak_type, p.committed, p.shards[4]
    ('float32', False, True, ((4, 8), (0, 2)))
    >>> place_argument("int", (), int_value=7)
    Placement(dtype='int32', weak_type=True, committed=False, shards={0: ()})
    """
    shape = _check_description(value_kind, shape, dtype, sharding, int_value, via)
    if via == "jit":  # jit reads its in_shardings before the value
        check_no_unconstrained(sharding, via)
    if value_kind == "numpy_scalar" and dtype in CHECKED_AFTER_PLACEMENT:
        check_no_unconstrained(sharding, via)
        place_on_devices(sharding, shape, via)
    check_placeable_kind(value_kind, dtype, shape)
    if dtype == FLOAT0:
        return stays_on_host(value_kind, shape, sharding, via)
    dtype_out, weak = placed_dtype(value_kind, dtype)
    check_int_fits(value_kind, int_value)
    check_no_unconstrained(sharding, via)
    shards = place_on_devices(sharding, shape, via)
    return Placement(dtype_out, weak, sharding is not None, shards)


# --------------------------------------------------------------------------- ARG-6

@rule("ARG-6", mirrors="jax._src.api.device_put / jax._src.dispatch (float0 values are "
                       "kept as host arrays); jax._src.pjit (float0 arguments and results)")
def stays_on_host(value_kind: str, shape: tuple[int, ...], sharding: Any, via: str
                  ) -> Placement:
    """A numpy array of dtype float0 is checked against its sharding like any array of its shape, then stays on the host: it comes back as a float0 numpy array on no device, committed to none.

    float0 is the dtype of a zero tangent, what ``jax.grad`` gives an integer or boolean
    input. Nothing is transferred, so ``device_put`` does not read the tiles of a one-device
    GSPMDSharding (whose tiles' rank it checks for other values only when it sends the
    shard), though it does check the value's rank against the sharding's, as for any value.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> stays_on_host("numpy_array", (8, 4), NamedSharding(mesh, P("x")), "device_put")
    Placement(dtype='float0', weak_type=False, committed=False, shards={})
    >>> stays_on_host("numpy_array", (3,), NamedSharding(mesh, P("x")), "device_put")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [ARG-4]: ...
    """
    check_no_unconstrained(sharding, via)
    if via == "device_put" and isinstance(sharding, GSPMDSharding) \
            and len(sharding.devices) == 1:
        # device_put reads a one-device GSPMDSharding's tiles only when it transfers a
        # value; the value's rank it checks before, float0 or not (NS-5).
        try:
            check_rank(sharding, shape)
        except Rejection as error:
            raise reject(ArgumentDoesNotFit(shape, sharding, explain(error.failure))) from None
    else:
        place_on_devices(sharding, shape, via)
    return Placement(FLOAT0, False, False, {})
