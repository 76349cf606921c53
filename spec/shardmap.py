"""shard_map: specs, per-shard types, axis groups and manual shardings (SMAP rules).

Work in progress: the rules land here one by one.
"""

from __future__ import annotations

__all__: list[str] = []
