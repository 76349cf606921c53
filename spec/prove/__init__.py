"""The prover: placement equivalence decided by z3 (SMT rules), the only part that imports z3.

* ``smt`` — ``prove_equivalent``, ``prove_for_every_shape``.

Imports the core and placement; ``shardlaw.spec`` loads it on first use.
"""
