#!/usr/bin/env bash
# Analyze benchmark logs: step time, TFLOPS, tokens/s, MFU and % of the published reference.
# usage: parse_train_timing.sh [--format=table|csv|json] [--full-names] [--gpu-type=TYPE] [DIR]
# A thin front: the work is done by the Python module llmb.analysis.cli (standard library + pyyaml).
# LLMB_PYTHON picks the interpreter (default python3, e.g. the workload venv's).
set -euo pipefail

main() {
    local here python
    # The real location, even when called through a symbolic link (e.g. from ~/bin).
    here="$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")"
    python="${LLMB_PYTHON:-python3}"
    if ! command -v "$python" >/dev/null 2>&1; then
        echo "parse_train_timing.sh: LLMB_PYTHON=$python is not an executable python;" \
            "set LLMB_PYTHON to a python3 with pyyaml, or activate the workload venv" >&2
        exit 1
    fi
    # A python without pyyaml is reported by the module itself, in one line with the fix.
    export LLMB_ANALYZE_PROG="parse_train_timing.sh"
    PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m llmb.analysis.cli "$@"
}

main "$@"
