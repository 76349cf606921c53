"""vmap of a jit call (the BAT rules) against real JAX on 8 CPU devices, example for example.

The properties are the suite :mod:`shardlaw.properties.suites.batching` (``shardlaw campaign
--suite transforms``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.batching import *  # noqa: F401,F403
