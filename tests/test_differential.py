"""The spec against JAX 0.10.2, example for example (properties/differential.py).

The properties are the suite :mod:`shardlaw.properties.suites.placement` (``shardlaw
campaign --suite placement``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.placement import *  # noqa: F401,F403
