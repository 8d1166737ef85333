"""Local `evaluate` metric scripts (loaded by path with `evaluate.load`, never imported directly)."""
