"""The engine against jax.jit and the spec, call for call.

The properties are the suite :mod:`shardlaw.properties.suites.engine` (``shardlaw campaign
--suite engine``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.engine import *  # noqa: F401,F403
