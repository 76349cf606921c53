"""Hostile input, the ci slice of the fuzz layer (``shardlaw.properties.fuzz``).

The properties are the suite :mod:`shardlaw.properties.suites.fuzz` (``shardlaw campaign
--suite fuzz``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.fuzz import *  # noqa: F401,F403
