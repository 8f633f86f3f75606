"""llmb-run (installer/llmb-run): a small core (the command line, the cluster config, what to
run, submission, history, status, rerun, preflight, the analyzer client and the report) and one
folder per feature (screen, suite, archive). The module map: docs/architecture.md."""
