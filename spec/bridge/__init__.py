"""The bridge to JAX: the only part of the spec that imports JAX.

* ``convert`` — ``from_jax``, ``to_jax``, ``describe_call`` (a jit call from real objects);
* ``transforms`` — transformed calls described from real JAX objects (``describe_vmap``,
  ``describe_grad``, ...), with ``autodiff``, ``batching``, ``constraint`` and
  ``shardmap`` reading the equations JAX builds for each.

Nothing below imports it; ``shardlaw.spec`` loads ``convert`` on first use.
"""
