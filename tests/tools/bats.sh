#!/usr/bin/env bash
# `make test-bats`: the bats suites in two groups side by side, the test cluster's own suite
# (slurm_cluster.bats: it starts, resizes and stops clusters, waiting on daemons most of the
# time) beside all the others (none of which touches a cluster); each group's output is printed
# whole, in turn, and the status is the first failure's.
#   bash tests/tools/bats.sh
set -euo pipefail

main() {
    local dir="tests/bats" status=0 cluster_status=0 pid
    local -a others=()
    local file
    for file in "${dir}"/*.bats; do
        [[ "${file}" == "${dir}/slurm_cluster.bats" ]] || others+=("${file}")
    done
    bats --print-output-on-failure "${dir}/slurm_cluster.bats" >"${OUT}/cluster" 2>&1 &
    pid=$!
    bats --print-output-on-failure "${others[@]}" || status=$?
    wait "${pid}" || cluster_status=$?
    cat "${OUT}/cluster"
    if [[ "${status}" -eq 0 ]]; then
        status="${cluster_status}"
    fi
    return "${status}"
}

OUT="$(mktemp -d)"
readonly OUT
trap 'rm -rf -- "${OUT}"' EXIT
main "$@"
