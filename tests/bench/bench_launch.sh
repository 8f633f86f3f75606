#!/usr/bin/env bash
# Launch start-up benchmark (make bench): DRY_RUN of a 2048-GPU job must take < 5 s, a request
# that fails validation < 1 s (validation never imports nemo-run). Best of 3 runs each, wall
# clock, through the real launch.sh. Prints the figures and PASS/FAIL; exits 1 on FAIL.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DRY_RUN_LIMIT=5.0
VALIDATION_LIMIT=1.0

# best_of N CMD...: the fastest wall time in seconds of N runs of CMD (output discarded).
best_of() {
    local n="$1" best="" i start end t
    shift
    for ((i = 0; i < n; i++)); do
        start=$(date +%s.%N)
        "$@" >/dev/null 2>&1 || true
        end=$(date +%s.%N)
        t=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }')
        if [[ -z "$best" ]] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then
            best="$t"
        fi
    done
    printf '%s' "$best"
}

main() {
    local rc=0
    BENCH_TMP="$(mktemp -d)"
    trap 'rm -rf "$BENCH_TMP"' EXIT
    local tmp="$BENCH_TMP"
    export PATH="$REPO/tests/shims:$REPO/.venv/bin:$PATH" VIRTUAL_ENV="$REPO/.venv"
    export LLMB_INSTALL="$tmp/install" SHIM_LOG="$tmp/shim.log"
    export SBATCH_ACCOUNT=acct SBATCH_PARTITION=batch HF_TOKEN=hf_bench
    unset STAGE_PATH LLMB_WORKLOAD

    # DRY_RUN must really work before it is timed.
    if ! env DRY_RUN=true JOB_TOTAL_GPUS=2048 MODEL_SIZE=405b "$REPO/llama3.1/launch.sh" \
        | grep -q '#SBATCH --nodes=256'; then
        echo "bench_launch: FAIL: DRY_RUN of llama3.1 405b at 2048 GPUs did not print the job"
        return 1
    fi
    local dry bad
    dry=$(best_of 3 env DRY_RUN=true JOB_TOTAL_GPUS=2048 MODEL_SIZE=405b "$REPO/llama3.1/launch.sh")
    bad=$(best_of 3 env JOB_TOTAL_GPUS=24 "$REPO/llama3.1/launch.sh")
    if [[ -e "$SHIM_LOG" ]]; then
        echo "bench_launch: FAIL: something was submitted"
        return 1
    fi
    report "DRY_RUN llama3.1 405b, 2048 GPUs" "$dry" "$DRY_RUN_LIMIT" || rc=1
    report "validation failure (JOB_TOTAL_GPUS=24)" "$bad" "$VALIDATION_LIMIT" || rc=1
    return "$rc"
}

# report LABEL SECONDS LIMIT: one line with PASS or FAIL; returns 1 on FAIL.
report() {
    local verdict=PASS status=0
    if ! awk -v t="$2" -v l="$3" 'BEGIN { exit !(t < l) }'; then
        verdict=FAIL
        status=1
    fi
    printf 'bench_launch: %-40s %6.2f s (limit %s s) %s\n' "$1" "$2" "$3" "$verdict"
    return "$status"
}

main "$@"
