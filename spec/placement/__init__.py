"""Layer 2, placement: which device holds which block, and when two shardings are the same.

* ``blocks`` — lowering to HLO, dividing dimensions, devices, indices, replication
  (LOW, DIV, DEV, IDX, REP rules);
* ``equivalence`` — JAX's equivalence and placement equivalence (EQ rules);
* ``processes`` — several processes: what each addresses, holds and may fetch (PROC rules).

Standard library only; imports the core alone. ``shardlaw.spec.placement`` was one module
before the spec was layered; its names are kept here.
"""

from .blocks import *  # noqa: F401,F403
from .blocks import __all__
