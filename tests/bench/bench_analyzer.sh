#!/usr/bin/env bash
# Analyzer speed and memory: generate (once) the synthetic experiments trees under
# ${LLMB_BENCH_DIR:-/tmp/llmb-bench} (with and without a 1 GB NCCL trace), then time
# parse_train_timing.sh against `grep -rc train_step_timing` over each (medians of 5 runs).
# Targets on each: within 3x grep's wall time, peak RSS < 150 MB.
set -euo pipefail

main() {
    local repo python tree
    repo="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)"
    python="${LLMB_PYTHON:-}"
    if [[ -z "${python}" ]]; then
        if [[ -x "${repo}/.venv/bin/python" ]]; then
            python="${repo}/.venv/bin/python"
        else
            python=python3
        fi
    fi
    tree="${LLMB_BENCH_DIR:-/tmp/llmb-bench}/experiments"
    echo "== analyzer: parse_train_timing.sh vs grep -rc"
    "${python}" "${repo}/tests/bench/make_tree.py" "${tree}"
    LLMB_PYTHON="${python}" "${python}" "${repo}/tests/bench/measure.py" "${tree}"
}

main "$@"
