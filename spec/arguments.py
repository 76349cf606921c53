"""Argument placement: how jit puts numpy arrays, scalars and arrays on devices before a call (ARG rules).

Work in progress: the rules land here one by one.
"""

from __future__ import annotations

__all__: list[str] = []
