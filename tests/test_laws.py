"""The laws of shardlaw.properties.laws: equivalences, HLO text, index maps, iotas, tracing."""

from shardlaw.properties.laws import *  # noqa: F401,F403  (pytest collects the properties)
