"""The bridge to JAX: the only part of the spec that imports JAX.

* ``convert`` — ``from_jax``, ``to_jax``, ``describe_call`` (a jit call from real objects);
* ``program`` — ``describe_program``, a whole program read from JAX's trace;
* ``autodiff``, ``batching``, ``constraint`` and ``shardmap`` — the equations JAX builds
  under each transformation, read for the per-equation property suites.

Nothing below imports it; ``shardlaw.spec`` loads ``convert`` on first use.
"""
