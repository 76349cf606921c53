"""The prover: placement equivalence decided by proof (SMT rules); only the solver imports z3.

* ``smt`` — ``prove_equivalent``, ``prove_for_every_shape``: the entry points, their failures,
  and which way decides a question.
* ``answers`` — ``Proved``, ``Counterexample``, ``Unknown``.
* ``clock`` — the one time limit of a call.
* ``orders`` — what is read of a sharding: its placement, its device orders.
* ``direct`` — the cases decided before any order is read, and the direct pass (no z3).
* ``encoding`` and ``solver`` — the formula z3 is asked, and its answer read back.

Imports the core and placement; ``shardlaw.spec`` loads ``smt`` on first use.
"""
