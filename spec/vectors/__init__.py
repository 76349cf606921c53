"""Test vectors: a data format any implementation can replay.

* ``jit_vectors`` — one jit call, or a sequence of calls against the caches (VEC rules);
* ``transformed_vectors`` — transformed calls.

Standard library only; imports the layers below it. ``shardlaw.spec.vectors`` was one
module before the spec was layered; its names are kept here.
"""

from .jit_vectors import *  # noqa: F401,F403
from .jit_vectors import __all__
