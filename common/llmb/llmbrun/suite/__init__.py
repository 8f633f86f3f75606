"""llmb-run suite: every published configuration of an install in one pass (README: Accept a
cluster)."""
