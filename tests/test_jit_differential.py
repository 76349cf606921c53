"""The jit-call semantics against real jax.jit on 8 CPU devices, call for call.

The properties are the suite :mod:`shardlaw.properties.suites.jit` (``shardlaw campaign
--suite jit``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.jit import *  # noqa: F401,F403
