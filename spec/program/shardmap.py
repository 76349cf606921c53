"""``shard_map`` equations inside a whole program: their SMAP rules and their bodies' collectives (issue 23; being built)."""
