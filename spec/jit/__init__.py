"""Layer 3, a jit call: its description, the pipeline of stages that decides it, its caches.

* ``call`` — the description of a call (``Call``, ``Arg``, ``Out``, ``Verdict``; CALL-0);
* ``pipeline`` — ``jit_call``: the stages in JAX's order, each a short call of rules;
* the rule families of the stages, in pipeline order: ``options`` (JIT), ``matching``
  (TREE, FIT), ``resolution`` (RES, KEEP), ``assignment`` (DA, EXE), ``layouts`` (LAY and
  ``Format`` leaves), ``recovery`` (OUT), ``aot`` (AOT);
* ``inside`` — the shardings inside a whole program's body, as lowering and recovery read
  them (PROG-3);
* ``cache`` — jit's caches and the shardlaw cache policy (CACHE).

Standard library only; imports the core and placement. ``shardlaw.spec.jit`` was one
module before the spec was layered; its names are kept here.
"""

from .pipeline import *  # noqa: F401,F403
from .pipeline import __all__
