"""Closed-over constants and mutable refs of a whole program (issue 23; being built)."""
