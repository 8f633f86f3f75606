#!/usr/bin/env bash
# `make test`: run the tiers (make targets) in CI's order, stop at the first that fails, and
# print each tier's wall time at the end (also after a failure: what ran, and what did not).
#   bash tests/tools/tiers.sh lint test-unit test-e2e test-bats
set -euo pipefail

main() {
    local tier start status=0 i
    local -a names=() times=() results=()
    for tier in "$@"; do
        names+=("${tier}")
        if [[ "${status}" -ne 0 ]]; then
            times+=("-")
            results+=("not run")
            continue
        fi
        start="${SECONDS}"
        if make --no-print-directory "${tier}"; then
            results+=("ok")
        else
            status=$?
            results+=("FAILED")
        fi
        times+=("$(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s")
    done
    printf '\n%-12s %9s  %s\n' "tier" "wall time" "result"
    for i in "${!names[@]}"; do
        printf '%-12s %9s  %s\n' "${names[${i}]}" "${times[${i}]}" "${results[${i}]}"
    done
    return "${status}"
}

main "$@"
