"""The shard_map rules (SMAP) against real ``jax.shard_map`` on 8 CPU devices.

The properties are the suite :mod:`shardlaw.properties.suites.shardmap` (``shardlaw campaign
--suite transforms``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.shardmap import *  # noqa: F401,F403
