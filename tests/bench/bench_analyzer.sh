#!/usr/bin/env bash
# Analyzer speed and memory: generate (once) the synthetic trees under
# ${LLMB_BENCH_DIR:-/tmp/llmb-bench} (NeMo runs with and without a 1 GB NCCL trace,
# Megatron-Bridge runs, logs with 2 MB of noise each, 20,000 logs in one directory, 100,000
# empty logs, logs with corrupted lines of 100,000 characters), then time parse_train_timing.sh against `grep -rc` over each (medians of 5 runs),
# and against NVIDIA llmb-run's own parser where LLMB_BENCH_NVIDIA_PARSER names its
# pretrain_log_parser.py (not in this repository; without it that column is skipped, saying so),
# and on the two trees of many small logs against python_floor.py (the least a Python reader
# does per log: a yardstick, not a target).
# Targets on each: within 3x grep's wall time (the corrupted lines: within 20 s), ahead of
# NVIDIA's parser, peak RSS < 150 MB.
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
    echo "== analyzer: parse_train_timing.sh vs grep -rc and NVIDIA's parser"
    "${python}" "${repo}/tests/bench/make_tree.py" "${tree}"
    "${python}" "${repo}/tests/bench/make_shapes.py" "$(dirname -- "${tree}")"
    LLMB_PYTHON="${python}" "${python}" "${repo}/tests/bench/measure.py" "${tree}"
}

main "$@"
