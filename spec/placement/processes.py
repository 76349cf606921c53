"""Several processes: which devices and shards a process addresses (issue 24; being built)."""
