"""Differentiating through a jit call: JVP, partial evaluation and transpose (AD rules).

Work in progress: the rules land here one by one.
"""

from __future__ import annotations

__all__: list[str] = []
