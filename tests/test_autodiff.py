"""The AD rules against real JAX: the jit equations that jvp, linearize, vjp and grad stage.

The properties are the suite :mod:`shardlaw.properties.suites.autodiff` (``shardlaw campaign
--suite transforms``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.autodiff import *  # noqa: F401,F403
