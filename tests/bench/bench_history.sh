#!/usr/bin/env bash
# llmb-run status over a 100 MB history (make bench): the history is read as a stream, so the
# peak RSS stays under 100 MB (it was 0.96 GB when the file was read whole). Slurm is the test
# double of tests/helpers/slurmshims.py. Prints the figures and PASS/FAIL; exits 1 on FAIL.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${REPO}/.venv/bin/python"
exec "${PY}" "${REPO}/tests/bench/history_status.py" "$@"
