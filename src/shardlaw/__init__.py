"""shardlaw: what will jax.jit do with these shardings, and why."""

__version__ = "0.1.0"
