"""How many times a ``jax.lax.scan`` runs, read from the user's call (LOOP-5).

A scan's :class:`~shardlaw.spec.program.control_flow.Scan` equation holds its ``length``.
JAX reads it from the call before it traces the body: the ``length`` argument, or the
leading dimension its ``xs`` share, and it refuses a call that gives neither, whose
``xs`` disagree, or whose ``xs`` split their leading dimension in their type (over
Explicit axes). The bridge applies :func:`scan_length` to a scan call JAX refused so
(:mod:`~shardlaw.spec.bridge.refused_bodies`).
"""

from __future__ import annotations

import dataclasses

from ..core.rules import Failure, reject, rule
from .description import Value

__all__ = ["scan_length", "ScanLengthUnknown"]


@dataclasses.dataclass(frozen=True)
class ScanLengthUnknown(Failure, rule="LOOP-5", error=ValueError):
    template = "a scan cannot run: {why}"
    hint = ("Give the scan values to scan over (xs with a common, unsplit leading "
            "dimension) or its length (jax.lax.scan(f, init, None, length=n)).")
    why: str


def _split(value: Value) -> bool:
    spec = value.spec
    return spec is not None and len(spec.partitions) > 0 and spec.partitions[0] is not None


@rule("LOOP-5", mirrors="jax._src.lax.control_flow.loops._infer_scan_length")
def scan_length(xs: tuple[Value, ...], length: int | None) -> int:
    """A scan runs ``length`` times, given or else its ``xs``' common leading dimension, which every ``xs`` has, unsplit in its type (ValueError at trace).

    So a scan with neither ``xs`` nor ``length`` is refused, and so are an ``xs`` of rank
    0, one whose leading dimension is split in its type (over Explicit axes), and ``xs``
    whose leading dimensions differ from each other or from ``length``.

    >>> scan_length((Value((3, 4)), Value((3,))), None)
    3
    >>> scan_length((), 5)
    5
    >>> scan_length((), None)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [LOOP-5]: a scan cannot run: it is given no xs to scan over and no length. Give the scan values to scan over (xs with a common, unsplit leading dimension) or its length (jax.lax.scan(f, init, None, length=n)).
    >>> scan_length((Value((3, 4)),), 2)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [LOOP-5]: a scan cannot run: its length 2 disagrees with its xs' leading dimensions [3]. Give the scan values to scan over (xs with a common, unsplit leading dimension) or its length (jax.lax.scan(f, init, None, length=n)).
    """
    if any(len(v.shape) == 0 for v in xs):
        raise reject(ScanLengthUnknown("an xs of rank 0 has no leading dimension"))
    if any(_split(v) for v in xs):
        raise reject(ScanLengthUnknown("the leading dimension of an xs is split in its "
                                           f"type ({[str(v.spec) for v in xs]})"))
    leading = [v.shape[0] for v in xs]
    if length is not None:
        if any(n != length for n in leading):
            raise reject(ScanLengthUnknown(f"its length {length} disagrees with its xs' "
                                               f"leading dimensions {leading}"))
        return length
    if not leading:
        raise reject(ScanLengthUnknown("it is given no xs to scan over and no length"))
    if len(set(leading)) > 1:
        raise reject(ScanLengthUnknown(f"its xs' leading dimensions differ: {leading}"))
    return leading[0]
