"""with_sharding_constraint: what it accepts and how it batches (WSC rules).

Work in progress: the rules land here one by one.
"""

from __future__ import annotations

__all__: list[str] = []
