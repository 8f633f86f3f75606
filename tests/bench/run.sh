#!/usr/bin/env bash
# `make bench`: run every tests/bench/bench_*.sh in name order; fail if any fails (all run).
set -euo pipefail

main() {
    local here bench failed=()
    here="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
    shopt -s nullglob
    local benches=("${here}"/bench_*.sh)
    if [[ ${#benches[@]} -eq 0 ]]; then
        echo "bench: no tests/bench/bench_*.sh found" >&2
        exit 1
    fi
    for bench in "${benches[@]}"; do
        if ! bash "${bench}"; then
            failed+=("$(basename -- "${bench}")")
        fi
        echo
    done
    if [[ ${#failed[@]} -gt 0 ]]; then
        echo "bench: FAIL: ${failed[*]}" >&2
        exit 1
    fi
    echo "bench: all ${#benches[@]} benchmark(s) passed"
}

main "$@"
