"""llmb-run archive and verify-archive: runs, analysis and facts packed to share, and checked
anywhere."""
