"""The multi-controller rules held to JAX in 2 and 4 processes under jax.distributed.

The properties are the suite :mod:`shardlaw.properties.suites.processes` (``shardlaw
campaign --suite processes``); this file runs them in the project's own ``pytest`` run.
"""

from shardlaw.properties.suites.processes import *  # noqa: F401,F403
