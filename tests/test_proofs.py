"""The prover's answers (spec/prove/smt.py, SMT-1 and SMT-2) against brute force, and its answers to bad input.

The properties are the suite :mod:`shardlaw.properties.suites.proofs` (``shardlaw campaign
--suite proofs``); importing its tests runs them here.
"""

# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.proofs import *  # noqa: F401,F403
