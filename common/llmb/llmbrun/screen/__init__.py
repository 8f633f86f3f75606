"""llmb-run screen: one short job that finds the slow GPU, node or link (README: Screen a
cluster)."""
