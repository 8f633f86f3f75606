#!/usr/bin/env bats
# installer/llmb-run (the bash front): errors without a config, --help.
bats_require_minimum_version 1.5.0

REPO="$(cd "${BATS_TEST_DIRNAME}/../.." && pwd)"

setup() {
    export LLMB_PYTHON="${REPO}/.venv/bin/python"
    unset LLMB_INSTALL
    cd "${BATS_TEST_TMPDIR}" || return 1
}

@test "no cluster_config.yaml: one clear line" {
    run --separate-stderr bash "${REPO}/installer/llmb-run" list
    [ "${status}" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == "llmb-run: no cluster_config.yaml found"*"installer/install.sh" ]]
}

@test "--help lists the subcommands" {
    run bash "${REPO}/installer/llmb-run" --help
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"list"*"single"*"bulk"*"status"* ]]
}

@test "works through a symlink (e.g. ~/bin/llmb-run)" {
    ln -s "${REPO}/installer/llmb-run" "${BATS_TEST_TMPDIR}/llmb-run"
    run bash "${BATS_TEST_TMPDIR}/llmb-run" --help
    [ "${status}" -eq 0 ]
}

@test "a Python without PyYAML: one clear line" {
    LLMB_PYTHON=/bin/false run --separate-stderr bash "${REPO}/installer/llmb-run" list
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb-run: LLMB_PYTHON=/bin/false cannot import yaml"* ]]
}
