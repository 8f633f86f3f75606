"""llmb-run (installer/llmb-run): what to run, submitting it through launch.sh, the record
of it, and one module per command (status, rerun, preflight, report, archive,
verify-archive)."""
