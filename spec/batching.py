"""vmap of a jit call: how batching rewrites a call's shardings (BAT rules).

Work in progress: the rules land here one by one.
"""

from __future__ import annotations

__all__: list[str] = []
