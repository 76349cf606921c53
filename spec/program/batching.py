"""``jax.vmap`` of a whole program, as a rewrite of its :class:`~shardlaw.spec.program.description.Program` (issue 23; being built)."""
