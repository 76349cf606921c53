"""Layer 4, transformations: shardings under device_put, vmap, AD, constraints, shard_map.

* ``arguments`` — putting values on devices before a call (ARG);
* ``batching`` — vmap of a jit call (BAT);
* ``autodiff`` — differentiating through a jit call (AD);
* ``constraint`` — with_sharding_constraint (WSC);
* ``shardmap`` — shard_map (SMAP).

Each is asked one equation at a time; whole programs under these transformations are
rewritten by ``shardlaw.spec.program`` (which calls these rules).

Standard library only; imports the layers below it.
"""
