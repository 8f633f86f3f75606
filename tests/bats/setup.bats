#!/usr/bin/env bats
# <recipe>/setup.sh -> common/setup.sh: layout, venv requirements, enroot import (through the
# enroot test double in tests/shims), idempotence, interruption, and every error line.

bats_require_minimum_version 1.5.0

REPO="$(cd "${BATS_TEST_DIRNAME}/../.." && pwd)"

setup() {
    export PATH="${REPO}/tests/shims:${PATH}"
    export LLMB_INSTALL="${BATS_TEST_TMPDIR}/install"
    export ENROOT_SHIM_DELAY=0.1
    export ENROOT_SHIM_LOG="${BATS_TEST_TMPDIR}/enroot.log"
    export LLMB_IMAGE_SPACE_GB=0
    # An empty requirements file: the pip step runs for real without the network.
    : >"${BATS_TEST_TMPDIR}/empty.txt"
    export LLMB_REQUIREMENTS="${BATS_TEST_TMPDIR}/empty.txt"
    export VIRTUAL_ENV="${REPO}/.venv"
    unset STAGE_PATH CLUSTER_TYPE GPU_TYPE LLMB_SETUP_STEPS CONDA_PREFIX LLMB_REPO
    IMAGE="${LLMB_INSTALL}/images/nvidia+nemo+25.04.01.sqsh"
}

@test "creates the layout and imports the image under its final name" {
    run --separate-stderr bash "${REPO}/nemotron/setup.sh"
    [ "${status}" -eq 0 ]
    for d in images datasets venvs workloads/pretrain_nemotron4; do
        [ -d "${LLMB_INSTALL}/${d}" ]
    done
    [ "$(head -c 4 "${IMAGE}")" = hsqs ]
    grep -q "^enroot import --output ${LLMB_INSTALL}/images/\.nvidia+nemo+25\.04\.01\.sqsh\.partial\.[0-9]* docker://nvcr.io#nvidia/nemo:25.04.01$" "${ENROOT_SHIM_LOG}"
    [ "$(find "${LLMB_INSTALL}/images" -type f | wc -l)" -eq 1 ]
}

@test "a second run keeps the existing image and imports nothing" {
    bash "${REPO}/llama3.1/setup.sh"
    before="$(stat -c %Y "${IMAGE}")"
    run bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"already present; kept"* ]]
    [ "$(grep -c '^enroot import' "${ENROOT_SHIM_LOG}")" -eq 1 ]
    [ "$(stat -c %Y "${IMAGE}")" = "${before}" ]
}

@test "gb200 imports the aarch64 image" {
    GPU_TYPE=gb200 LLMB_SETUP_STEPS=image run bash "${REPO}/nemotron/setup.sh"
    [ "${status}" -eq 0 ]
    grep -q -- '--arch aarch64' "${ENROOT_SHIM_LOG}"
}

@test "an interrupted import leaves no file that looks like an image" {
    export ENROOT_SHIM_DELAY=5
    LLMB_SETUP_STEPS=image bash "${REPO}/nemotronh/setup.sh" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do
        if compgen -G "${LLMB_INSTALL}/images/.*partial*" >/dev/null; then break; fi
        sleep 0.1
    done
    compgen -G "${LLMB_INSTALL}/images/.*partial*" >/dev/null
    # TERM, what scancel sends (a background job of a script ignores SIGINT; Ctrl-C in a
    # terminal takes the same path through the trap).
    kill -TERM "${pid}"
    # not `run wait`: run's subshell cannot wait for this shell's child and would not wait
    local rc=0
    wait "${pid}" || rc=$?
    [ "${rc}" -eq 143 ]
    [ ! -e "${IMAGE}" ]
    [ -z "$(ls -A "${LLMB_INSTALL}/images")" ]
}

@test "a failed import leaves no image and says so" {
    ENROOT_SHIM_FAIL=1 LLMB_SETUP_STEPS=image run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [[ "${stderr_lines[-1]}" == "llmb: enroot import docker://nvcr.io#nvidia/nemo:25.04.01 failed"* ]]
    [ -z "$(ls -A "${LLMB_INSTALL}/images")" ]
}

@test "a truncated image from an old run is replaced" {
    mkdir -p "${LLMB_INSTALL}/images"
    echo garbage >"${IMAGE}"
    LLMB_SETUP_STEPS=image run bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 0 ]
    [ "$(head -c 4 "${IMAGE}")" = hsqs ]
}

@test "runai: venv only, no enroot needed" {
    PATH="/usr/bin:/bin" CLUSTER_TYPE=runai run --separate-stderr bash "${REPO}/nemotron/setup.sh"
    [ "${status}" -eq 0 ]
    [ -d "${LLMB_INSTALL}/workloads/pretrain_nemotron4" ]
    [ -z "$(ls -A "${LLMB_INSTALL}/images")" ]
}

@test "runs from a spool copy under sbatch: finds the repo through SLURM_SUBMIT_DIR" {
    mkdir -p "${BATS_TEST_TMPDIR}/spool"
    cp "${REPO}/nemotron/setup.sh" "${BATS_TEST_TMPDIR}/spool/slurm_script"
    cd "${BATS_TEST_TMPDIR}"
    SLURM_SUBMIT_DIR="${REPO}/nemotron" LLMB_SETUP_STEPS=image run bash "${BATS_TEST_TMPDIR}/spool/slurm_script"
    [ "${status}" -eq 0 ]
    [ -f "${IMAGE}" ]
    SLURM_SUBMIT_DIR="${BATS_TEST_TMPDIR}" run --separate-stderr bash "${BATS_TEST_TMPDIR}/spool/slurm_script"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb: cannot find the llmb repository"*"set LLMB_REPO="* ]]
}

@test "carries its own #SBATCH directives" {
    run grep -c '^#SBATCH --\(job-name\|nodes=1\|time\|output\)' "${REPO}/llama3.1/setup.sh"
    [ "${output}" -eq 4 ]
}

# --- errors: one line on stderr, non-zero exit -------------------------------------------

@test "error: STAGE_PATH set" {
    STAGE_PATH=/old run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == "llmb: STAGE_PATH=/old is no longer used"*LLMB_INSTALL* ]]
}

@test "error: LLMB_INSTALL unset" {
    unset LLMB_INSTALL
    run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [ "${stderr}" = "llmb: LLMB_INSTALL is not set; export LLMB_INSTALL=/path/on/a/shared/filesystem" ]
}

@test "error: no venv active for the venv step" {
    unset VIRTUAL_ENV
    run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == "llmb: no Python venv is active"* ]]
}

@test "error: no enroot" {
    PATH="/usr/bin:/bin" LLMB_SETUP_STEPS=image run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb: enroot is not installed on "* ]]
}

@test "error: not enough disk space for the image" {
    LLMB_IMAGE_SPACE_GB=99999999 LLMB_SETUP_STEPS=image run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb: not enough disk space for the image in "*"99999999 GB needed"* ]]
    [ ! -e "${ENROOT_SHIM_LOG}" ]
}

@test "error: bad CLUSTER_TYPE, bad step, bad GPU_TYPE" {
    CLUSTER_TYPE=k8s run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb: CLUSTER_TYPE=k8s is not supported; allowed: slurm, runai, local" ]]
    LLMB_SETUP_STEPS=venv,dataset run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == *"unknown step dataset; allowed: venv, image" ]]
    GPU_TYPE=a100 LLMB_SETUP_STEPS=image run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [ "${stderr}" = "llmb: GPU_TYPE: unknown GPU type a100; allowed: h100, b200, gb200" ]
}
