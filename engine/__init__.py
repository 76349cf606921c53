"""shardlaw's engine: a production ``jit`` that obeys the jit-call semantics.

``from shardlaw.engine import jit`` is a drop-in for ``jax.jit``: the same arguments, the
same results, the same shardings and committed flags. It rejects a bad call before
running anything, with the rule of the jit-call semantics that refuses it (``err.rule``)
and the argument's pytree path; it keeps one executable per placement class, so shardings
that are written differently but place every block on the same device never recompile;
and it never hands XLA a buffer on the wrong device. The jitted function also has
``.explain(*args)``, ``.cache_info()`` and ``.clear_cache()``.

The engine is an independent implementation of the rules: it never imports
``shardlaw.spec``. The property suites hold the two against each other and against JAX.
"""

from .adopt import install, installed, pjit, uninstall
from .aot import Compiled, Lowered, Traced
from .cache import CACHE, set_capacity
from .explanation import Explanation
from .jit import JittedFunction, is_engine_function, jit
from .rules import EngineRejection
from .statistics import CacheInfo, count_calls
from .verdict import verdict_for_call

__all__ = ["jit", "JittedFunction", "is_engine_function", "EngineRejection", "Explanation", "CacheInfo", "Traced", "Lowered",
           "Compiled", "set_capacity", "count_calls", "CACHE", "verdict_for_call", "install", "uninstall", "installed",
           "pjit"]
