"""Argument placement (the ARG rules) against real JAX on 8 CPU devices, value for value.

The properties are the suite :mod:`shardlaw.properties.suites.arguments` (``shardlaw
campaign --suite transforms``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.arguments import *  # noqa: F401,F403
