"""Test vectors: a data format any implementation can replay.

* ``jit_vectors`` — one jit call and its verdict (VEC rules);
* ``sequence_vectors`` — a sequence of calls against the caches;
* ``vector_checks`` — what every vector's JSON must be (VEC-1 in, VEC-2 out), and its versions;
* ``vector_writer``, ``vector_reader`` — spec values, calls and verdicts to JSON and back;
* ``program_vectors`` — whole programs, with ``value_json``, their values to JSON and back.

Standard library only; imports the layers below it. ``shardlaw.spec.vectors`` was one
module before the spec was layered; its names are kept here.
"""

from . import jit_vectors, sequence_vectors, vector_checks, vector_writer
from .jit_vectors import *  # noqa: F401,F403
from .sequence_vectors import *  # noqa: F401,F403
from .vector_checks import *  # noqa: F401,F403
from .vector_writer import *  # noqa: F401,F403

__all__ = list(dict.fromkeys([*jit_vectors.__all__, *sequence_vectors.__all__,
                              *vector_checks.__all__, *vector_writer.__all__]))
