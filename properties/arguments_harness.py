"""Argument placement (the ARG rules) against real JAX, value for value.

An :class:`ArgumentCase` describes a value that is not yet a ``jax.Array`` (a Python
scalar, a numpy scalar, a 0-d or n-d numpy array, a masked array, text, bytes, an object)
and a sharding (or None). :func:`run_in_jax` builds the value and places it with
``jax.device_put(v, s)`` (recording each shard's device and box, the dtype, weak type and
committed flag) or passes it to ``jax.jit(lambda a: a, in_shardings=s)`` (recording the
argument's aval from ``jax.make_jaxpr`` and where the identity's result lies); :func:`compare_argument` asks the spec
(:func:`~shardlaw.spec.place_argument`) and lists the disagreements; it records each rule's
accepting and rejecting side with :func:`shardlaw.properties.hits.record` (read with
:func:`arg_hit_counts`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.spec import to_jax
from shardlaw.spec.transforms.arguments import CANONICAL, FLOAT0, NOT_NUMERIC, Placement, place_argument
from shardlaw.spec.bridge.convert import jax_box
from shardlaw.spec.core.rules import Rejection, tracing
from shardlaw.spec.core.hlo import Maximal
from shardlaw.spec.core.shardings import GSPMDSharding, NamedSharding
from shardlaw.spec.core.values import AxisType

from .strategies import gspmd_shardings, named_shardings, single_device_shardings

__all__ = ["ArgumentCase", "run_in_jax", "compare_argument", "SOURCE", "arg_hit_counts",
           "argument_cases"]

# The source under which the cases compared record their rules (shardlaw.properties.hits).
SOURCE = "arguments"


def arg_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting hits, rejecting hits) over the cases compared so far (ARG-2,
    which decides without refusing, as ``"ARG-2 weak"``: weak and not weak)."""
    return hits.counts(SOURCE)


@dataclasses.dataclass(frozen=True)
class ArgumentCase:
    value_kind: str
    shape: tuple[int, ...] = ()
    dtype: str | None = None
    sharding: Any = None
    int_value: int = 0
    via: str = "device_put"


@dataclasses.dataclass
class JaxPlacement:
    error: BaseException | None = None
    placement: Placement | None = None


_ODD_DTYPES = {"str": "U1", "bytes": "S1", "object": object, "datetime64": "datetime64[D]",
               "timedelta64": "timedelta64[D]", "float128": np.longdouble, "void": "V4"}


def _numpy_dtype(name: str) -> Any:
    if name == "float0":
        return jax.dtypes.float0
    if name == "bfloat16":
        return jax.numpy.bfloat16
    return _ODD_DTYPES.get(name, name)


def build_value(case: ArgumentCase) -> Any:
    """The Python or numpy value the case describes."""
    kind = case.value_kind
    python = {"bool": True, "int": case.int_value, "float": 1.5, "complex": 1 + 2j,
              "str": "abc", "bytes": b"ab"}
    if kind in python:
        return python[kind]
    if kind == "object":
        return object()
    array = np.zeros(case.shape, dtype=_numpy_dtype(case.dtype or "float32"))
    if kind == "masked_array":
        return np.ma.array(array, mask=False)
    if kind == "numpy_scalar":
        return array[()]
    return array


def _on_host(value: Any) -> Placement | None:
    """A value JAX kept on the host (a float0 array is no jax.Array): no shards, committed
    to nothing; None for a jax.Array."""
    if isinstance(value, jax.Array):
        return None
    dtype = FLOAT0 if value.dtype == jax.dtypes.float0 else str(value.dtype)
    return Placement(dtype, False, False, {})


def run_in_jax(case: ArgumentCase) -> JaxPlacement:
    """Place the value with device_put, or pass it to an identity jit."""
    out = JaxPlacement()
    sharding = None if case.sharding is None else to_jax(case.sharding)
    if isinstance(case.sharding, GSPMDSharding) and len(case.sharding.devices) == 1:
        # JAX caches device_put's check of a value's rank against its sharding by sharding
        # equality, and a one-device tiled GSPMDSharding ({devices=[1]<=[1]}) equals the
        # replicated one: after a replicated check on the same type, the tiled sharding's
        # rank is not checked at all. Each case here gets its own check, as a fresh
        # process does (notes/jax-facts.md, "device_put's sharding check is cached").
        jax.clear_caches()
    try:
        value = build_value(case)
        if case.via == "device_put":
            placed = jax.device_put(value, sharding) if sharding is not None else \
                jax.device_put(value)
            out.placement = _on_host(placed) or Placement(
                str(placed.dtype), placed.weak_type, placed.committed,
                {s.device.id: jax_box(s.index, case.shape) for s in placed.addressable_shards})
        else:
            fun = jax.jit(lambda a: a, **({} if sharding is None else
                                          {"in_shardings": sharding}))
            result = jax.block_until_ready(fun(value))
            out.placement = _on_host(result)
            if out.placement is not None:
                return out
            (aval,) = jax.make_jaxpr(fun)(value).in_avals
            # The identity returns the argument where jit placed it.
            shards = {s.device.id: jax_box(s.index, case.shape) for s in result.addressable_shards}
            out.placement = Placement(str(aval.dtype), aval.weak_type, sharding is not None,
                                      shards)
    except Exception as error:  # what JAX raised is the outcome
        out.error = error
    return out


def spec_outcome(case: ArgumentCase) -> tuple[Placement | None, Rejection | None, list[str]]:
    with tracing() as fired:
        try:
            return (place_argument(case.value_kind, case.shape, case.dtype, case.sharding,
                                   int_value=case.int_value, via=case.via), None, list(fired))
        except Rejection as rejection:
            return None, rejection, list(fired)


def _count(fired: list[str], rejected: str | None, placement: Placement | None) -> None:
    for rule_id in dict.fromkeys(fired):
        # ARG-6 checks a float0 value's sharding with ARG-4/ARG-5 before keeping it on the
        # host: their refusal there is ARG-6's other side.
        hits.record(SOURCE, rule_id, refused=rule_id == rejected
                    or (rule_id == "ARG-6" and rejected is not None))
    if rejected is not None:
        hits.record(SOURCE, rejected, refused=True, count=0)
    # ARG-2 decides without refusing: its sides are weak and not weak.
    if placement is not None:
        hits.record(SOURCE, "ARG-2 weak", refused=not placement.weak_type)


def compare_argument(case: ArgumentCase) -> list[str]:
    """The disagreements between the spec and JAX on ``case`` (empty: they agree)."""
    seen = run_in_jax(case)
    placement, rejection, fired = spec_outcome(case)
    _count(fired, rejection.rule if rejection else None, placement)
    if rejection is not None or seen.error is not None:
        if rejection is None:
            return [f"JAX refused ({type(seen.error).__name__}: {seen.error}) but the spec "
                    f"placed it: {placement}"]
        if seen.error is None:
            return [f"the spec refused ({rejection}) but JAX placed it: {seen.placement}"]
        if type(seen.error).__name__ != rejection.failure.jax_error:
            return [f"JAX raised {type(seen.error).__name__} ({seen.error}), the spec "
                    f"{rejection.failure.jax_error} ({rejection})"]
        return []
    assert seen.placement is not None and placement is not None
    mine, theirs = placement, seen.placement
    if case.via == "jit" and 0 in case.shape:
        # An empty result comes back replicated whatever the argument's placement (the
        # compiler's choice): the argument's boxes cannot be read through it.
        mine, theirs = dataclasses.replace(mine, shards={}), dataclasses.replace(theirs, shards={})
    if mine != theirs:
        return [f"JAX placed {theirs}, the spec {mine}"]
    return []


# --------------------------------------------------------------------------- strategies

_DIMS = (1, 2, 3, 4, 6, 8, 0)


@st.composite
def argument_cases(draw: Any) -> ArgumentCase:
    """A value to place and a sharding (or None), through device_put or jit (ARG-1 .. ARG-4)."""
    kind = draw(st.sampled_from(["numpy_array"] * 6 + ["numpy_scalar"] * 2 +
                                ["bool", "int", "int", "float", "complex", "masked_array",
                                 "str", "bytes", "object"]))
    shape: tuple[int, ...] = ()
    dtype = None
    if kind in ("numpy_array", "masked_array"):
        shape = tuple(draw(st.lists(st.sampled_from(_DIMS), max_size=3)))
    if kind in ("numpy_array", "masked_array", "numpy_scalar"):
        # numpy scalars of object, void or longdouble type are left out: JAX checks a
        # sharding's rank before their dtype on some paths and not on others.
        odd = [d for d in NOT_NUMERIC
               if kind != "numpy_scalar" or d not in ("object", "void", "float128")]
        # float0 (a zero tangent) as a numpy array: indexing one gives a numpy.void.
        dice = draw(st.integers(0, 5))
        dtype = (draw(st.sampled_from(odd)) if dice == 0 else
                 FLOAT0 if dice == 1 and kind != "numpy_scalar" else
                 draw(st.sampled_from(sorted(CANONICAL))))
    int_value = draw(st.one_of(st.integers(-9, 9), st.sampled_from(
        [2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**40, -(2**63)]))) if kind == "int" else 0
    concrete = st.one_of(named_shardings(max_devices=8, max_rank=len(shape) + 1),
                         single_device_shardings(8), gspmd_shardings(8))
    via = draw(st.sampled_from(["device_put", "jit"]))
    if via == "jit":  # a GSPMDSharding in in_shardings is the jit family's (EXE-3, EXE-4)
        concrete = st.one_of(named_shardings(max_devices=8, max_rank=len(shape) + 1),
                             single_device_shardings(8))
    sharding = draw(st.one_of(st.none(), concrete, concrete))
    if isinstance(sharding, NamedSharding) and (sharding.spec.unreduced or
                                                sharding.spec.reduced):
        # Placing a value on unreduced axes can abort the process in Shardy (a failed
        # check, not an exception): ARG-0 leaves such shardings out of the description.
        sharding = None
    if isinstance(sharding, GSPMDSharding) and isinstance(sharding.hlo, Maximal):
        # A maximal GSPMDSharding on a scalar: JAX checks its rank for numpy scalars and
        # not for Python scalars; left out of the description.
        sharding = None
    if sharding is not None and hasattr(sharding, "mesh") and \
            AxisType.Manual in sharding.mesh.axis_types:
        sharding = None  # Manual axes exist inside shard_map only
    return ArgumentCase(kind, shape, dtype, sharding, int_value, via)
