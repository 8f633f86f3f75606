#!/usr/bin/env bats
# installer/install.sh (the bash front): its own errors and the hand-off to llmb.installer.
bats_require_minimum_version 1.5.0

REPO="$(cd "${BATS_TEST_DIRNAME}/../.." && pwd)"

setup() {
    export LLMB_PYTHON="${REPO}/.venv/bin/python"
    unset LLMB_INSTALL HF_TOKEN
}

@test "no terminal and no --config: one clear line" {
    run --separate-stderr bash "${REPO}/installer/install.sh" </dev/null
    [ "${status}" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == "llmb-install: stdin is not a terminal"*"--config FILE"* ]]
}

@test "a Python without PyYAML: one clear line" {
    LLMB_PYTHON=/bin/false run --separate-stderr bash "${REPO}/installer/install.sh" --config x
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb-install: LLMB_PYTHON=/bin/false cannot import yaml"* ]]
}

@test "--dry-run of a headless config prints the plan and creates nothing" {
    cat >"${BATS_TEST_TMPDIR}/c.yaml" <<YAML
install_path: ${BATS_TEST_TMPDIR}/inst
workloads: [pretrain_nemotronh]
slurm: {account: a, partition: p}
YAML
    run --separate-stderr bash "${REPO}/installer/install.sh" --config "${BATS_TEST_TMPDIR}/c.yaml" --dry-run
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"Dry run: nothing will be changed"* ]]
    [[ "${output}" == *"setup:pretrain_nemotronh"* ]]
    [ ! -e "${BATS_TEST_TMPDIR}/inst" ]
}
