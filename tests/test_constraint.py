"""with_sharding_constraint (the WSC rules) against real JAX on 8 CPU devices, case for case.

The properties are the suite :mod:`shardlaw.properties.suites.constraint` (``shardlaw
campaign --suite transforms``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.constraint import *  # noqa: F401,F403
