"""``jax.jvp``, ``jax.linearize`` and ``jax.vjp``/``jax.grad`` of a whole program, as rewrites of its :class:`~shardlaw.spec.program.description.Program` (issue 23; being built)."""
