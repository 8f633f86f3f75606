#!/usr/bin/env bats
# <recipe>/setup.sh -> common/setup.sh: layout, venv requirements, enroot import (through the
# enroot test double in tests/shims), idempotence, interruption, and every error line.
# Hostile values are literal text (SC2016); the table's helper runs `run` and reads its
# results in the same test (SC2030/SC2031 cannot see that).
# shellcheck disable=SC2016,SC2030,SC2031

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
    grep -q "^enroot import --output ${LLMB_INSTALL}/images/\.nvidia+nemo+25\.04\.01\.sqsh\.partial\.${HOSTNAME}\.[0-9]* docker://nvcr.io#nvidia/nemo:25.04.01$" "${ENROOT_SHIM_LOG}"
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

@test "an import killed by SIGKILL leaves a partial file; the next setup removes it" {
    export ENROOT_SHIM_DELAY=30
    # Its own process group, as a job step: SIGKILL reaches setup.sh and the import at once,
    # and no trap runs (what scancel --signal=KILL, the OOM killer or a dead node do).
    LLMB_SETUP_STEPS=image setsid bash "${REPO}/nemotronh/setup.sh" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        if compgen -G "${LLMB_INSTALL}/images/.*partial*" >/dev/null; then break; fi
        sleep 0.1
    done
    partial="$(compgen -G "${LLMB_INSTALL}/images/.*partial*")"
    [[ "${partial}" == *".partial.${HOSTNAME}.${pid}" ]]
    kill -KILL -- "-${pid}"
    killed=0
    wait "${pid}" || killed=$?
    [ "${killed}" -eq 137 ]
    [ -e "${partial}" ]  # no trap ran: it is left behind
    export ENROOT_SHIM_DELAY=0.1
    LLMB_SETUP_STEPS=image run --separate-stderr bash "${REPO}/nemotronh/setup.sh"
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"removed ${partial}: a partial import left by process ${pid}, which is gone"* ]]
    [ "$(ls -A "${LLMB_INSTALL}/images")" = "nvidia+nemo+25.04.01.sqsh" ]
}

@test "a partial file of a live setup or of another host is kept" {
    mkdir -p "${LLMB_INSTALL}/images"
    other="${LLMB_INSTALL}/images/.nvidia+nemo+25.04.01.sqsh.partial.node-b.cluster.1234"
    : >"${other}"
    # a live setup process on this host: a stand-in whose command line names setup.sh
    bash -c 'exec -a "bash common/setup.sh llama3.1" sleep 30' &
    live_pid=$!
    live="${LLMB_INSTALL}/images/.nvidia+nemo+25.04.01.sqsh.partial.${HOSTNAME}.${live_pid}"
    : >"${live}"
    LLMB_SETUP_STEPS=image run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    kill "${live_pid}"
    [ "${status}" -eq 0 ]
    [ -e "${other}" ] && [ -e "${live}" ]
    [[ "${stderr}" == *"${other} is a partial import by process 1234 on node-b.cluster; kept"* ]]
    [[ "${stderr}" == *"${live} is being written by setup process ${live_pid}; kept"* ]]
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

@test "runai: no image step, no enroot needed" {
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
    LLMB_IMAGE_SPACE_GB=999999 LLMB_SETUP_STEPS=image run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb: not enough disk space for the image in "*"999999 GB needed"* ]]
    [ ! -e "${ENROOT_SHIM_LOG}" ]
}

@test "error: bad CLUSTER_TYPE, bad step, bad GPU_TYPE" {
    CLUSTER_TYPE=k8s run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb: CLUSTER_TYPE=k8s is not supported; allowed: slurm, runai, local" ]]
    LLMB_SETUP_STEPS=venv,dataset run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == *"unknown step dataset; allowed: venv, sources, image" ]]
    GPU_TYPE=a100 LLMB_SETUP_STEPS=image run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 1 ]
    [ "${stderr}" = "llmb: GPU_TYPE: unknown GPU type a100; allowed: h100, b200, gb200, h200, b300, gb300" ]
}

# --- hostile input: one table, each row refused in one line naming the variable -----------------

# refused MESSAGE VAR=VALUE...: setup.sh (run from an empty directory) exits 1 with exactly one
# stderr line starting with "llmb: MESSAGE", creates nothing (no LLMB_INSTALL, nothing in the
# directory it ran from) and imports nothing.
refused() {
    local message="$1"
    shift
    mkdir -p "${BATS_TEST_TMPDIR}/cwd"
    cd "${BATS_TEST_TMPDIR}/cwd" || return 1
    run --separate-stderr env "$@" bash "${REPO}/llama3.1/setup.sh"
    echo "row: $(printf '%q ' "$@")-> status=${status} stderr=${stderr}" >&2
    [ "${status}" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == "llmb: ${message}"* ]]
    [ ! -e "${LLMB_INSTALL}" ]
    [ -z "$(ls -A "${BATS_TEST_TMPDIR}/cwd")" ]
    [ ! -e "${ENROOT_SHIM_LOG}" ]
    [ ! -e /x ]
}

@test "hostile values for setup.sh: refused in one line, nothing written or imported" {
    : >"${BATS_TEST_TMPDIR}/a-file"
    refused 'LLMB_INSTALL=/x/y$(touch pwned) contains $ ( a space ), which a job path cannot hold' \
        'LLMB_INSTALL=/x/y$(touch pwned)'
    refused "LLMB_INSTALL=/x/it's contains '" "LLMB_INSTALL=/x/it's"
    refused "LLMB_INSTALL=\$'/x/a\\nb' contains control character(s)" LLMB_INSTALL=$'/x/a\nb'
    refused "LLMB_INSTALL=${BATS_TEST_TMPDIR}/a-file is a file, not a directory" \
        LLMB_INSTALL="${BATS_TEST_TMPDIR}/a-file"
    refused "LLMB_INSTALL=/proc/llmb cannot be created: " LLMB_INSTALL=/proc/llmb
    refused "STAGE_PATH=\$'/old\\n' contains control character(s)" STAGE_PATH=$'/old\n'
    refused "CLUSTER_TYPE=\$'slurm\\E[2J' contains control character(s)" CLUSTER_TYPE=$'slurm\e[2J'
    refused "CLUSTER_TYPE=k8s is not supported" CLUSTER_TYPE=k8s
    refused "GPU_TYPE=\$'h100\\r' contains control character(s)" GPU_TYPE=$'h100\r'
    refused "LLMB_SETUP_STEPS=* has unknown step *; allowed: venv, sources, image" 'LLMB_SETUP_STEPS=*'
    refused "LLMB_SETUP_STEPS=\$'venv\\nimage' contains control character(s)" \
        LLMB_SETUP_STEPS=$'venv\nimage'
    refused "LLMB_REQUIREMENTS=\$'/a\\n/b' contains control character(s)" \
        LLMB_REQUIREMENTS=$'/a\n/b'
    refused "LLMB_PIP_ARGS=\$'--pre\\n--x' contains control character(s)" \
        LLMB_PIP_ARGS=$'--pre\n--x'
    refused "LLMB_SOURCES=\$'/src\\n' contains control character(s)" LLMB_SOURCES=$'/src\n'
    refused "HF_ENDPOINT=\$'http://hub\\E[2J' contains control character(s)" \
        HF_ENDPOINT=$'http://hub\e[2J'
}

@test "hostile values for the image step: refused before any import" {
    refused "LLMB_IMAGE_SPACE_GB=010 is not a whole number of GB" LLMB_SETUP_STEPS=image \
        LLMB_IMAGE_SPACE_GB=010
    refused "LLMB_IMAGE_SPACE_GB=99999999999999999999999 is not a whole number of GB" \
        LLMB_SETUP_STEPS=image LLMB_IMAGE_SPACE_GB=99999999999999999999999
    refused "LLMB_IMAGE_SPACE_GB=-1 is not a whole number" LLMB_SETUP_STEPS=image \
        LLMB_IMAGE_SPACE_GB=-1
}

@test "LLMB_PIP_ARGS words reach pip as they are, never glob-expanded" {
    mkdir -p "${BATS_TEST_TMPDIR}/cwd"
    touch "${BATS_TEST_TMPDIR}/cwd/--dry-run-trap"
    cd "${BATS_TEST_TMPDIR}/cwd" || return 1
    LLMB_SETUP_STEPS=venv LLMB_PIP_ARGS='--no-index --find-links ./-* --quiet' \
        run --separate-stderr bash "${REPO}/llama3.1/setup.sh"
    [ "${status}" -eq 0 ]
    [[ "${output}" != *dry-run-trap* && "${stderr}" != *dry-run-trap* ]]
}

# --- a Megatron-Bridge recipe: pinned repositories, with and without the network -------------
# The recipe (kept outside the repository: an absolute recipe folder) and the repositories its
# urls name are built by tests/helpers/sourcesworld.py; --clone-only: Megatron-Bridge alone
# (NeMo-Run's pip install and the Hugging Face configs run in tests/install/test_sources.py and
# test_hfcache.py, against a real venv and a local Hub).

bridge_world() {
    eval "$("${REPO}/.venv/bin/python" "${REPO}/tests/helpers/sourcesworld.py" \
        "${BATS_TEST_TMPDIR}/world" --clone-only)"
    export LLMB_PYTHON="${REPO}/.venv/bin/python"
    CHECKOUT="${LLMB_INSTALL}/workloads/pretrain_bridgetest/Megatron-Bridge"
}

@test "bridge: the sources step clones Megatron-Bridge at its commit; a rerun keeps it" {
    bridge_world
    LLMB_SETUP_STEPS=sources run --separate-stderr bash "${REPO}/common/setup.sh" "${RECIPE}"
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"Megatron-Bridge at ${MB_COMMIT}: cloned (${CHECKOUT})"* ]]
    [ "$(git -C "${CHECKOUT}" rev-parse HEAD)" = "${MB_COMMIT}" ]
    LLMB_SETUP_STEPS=sources run --separate-stderr bash "${REPO}/common/setup.sh" "${RECIPE}"
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"Megatron-Bridge at ${MB_COMMIT}: kept"* ]]
}

@test "bridge: GPU_TYPE's overrides choose the commit and the image" {
    bridge_world
    GPU_TYPE=b200 LLMB_SETUP_STEPS=sources,image run --separate-stderr bash "${REPO}/common/setup.sh" "${RECIPE}"
    [ "${status}" -eq 0 ]
    [ "$(git -C "${CHECKOUT}" rev-parse HEAD)" = "${B200_MB_COMMIT}" ]
    grep -q "docker://nvcr.io#nvidia/nemo:26.04.01$" "${ENROOT_SHIM_LOG}"
    [ "$(head -c 4 "${LLMB_INSTALL}/images/nvidia+nemo+26.04.01.sqsh")" = hsqs ]
}

@test "bridge: a checkout at another commit is refused in one line and left as it is" {
    bridge_world
    LLMB_SETUP_STEPS=sources bash "${REPO}/common/setup.sh" "${RECIPE}" >/dev/null
    git -C "${CHECKOUT}" checkout -q "${MB_NEWER}"
    LLMB_SETUP_STEPS=sources run --separate-stderr bash "${REPO}/common/setup.sh" "${RECIPE}"
    [ "${status}" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [ "${stderr}" = "llmb: ${CHECKOUT} is checked out at ${MB_NEWER}, not repositories.megatron_bridge.commit ${MB_COMMIT}; check out ${MB_COMMIT} there (git -C ${CHECKOUT} checkout ${MB_COMMIT}) or move it away and run setup again" ]
    [ "$(git -C "${CHECKOUT}" rev-parse HEAD)" = "${MB_NEWER}" ]
}

@test "bridge: --fetch-sources fills a folder; setup with LLMB_SOURCES needs no network" {
    bridge_world
    # a connected machine needs no install: LLMB_INSTALL unset
    run --separate-stderr env -u LLMB_INSTALL bash "${REPO}/common/setup.sh" --fetch-sources "${BATS_TEST_TMPDIR}/sources" "${RECIPE}"
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"sources ready in ${BATS_TEST_TMPDIR}/sources"* ]]
    [ "$(git --git-dir "${BATS_TEST_TMPDIR}/sources/Megatron-Bridge.git" rev-parse --is-bare-repository)" = true ]
    rm -rf "${UPSTREAM}"  # the recipe's urls lead nowhere now
    LLMB_SOURCES="${BATS_TEST_TMPDIR}/sources" GPU_TYPE=b200 LLMB_SETUP_STEPS=sources \
        run --separate-stderr bash "${REPO}/common/setup.sh" "${RECIPE}"
    [ "${status}" -eq 0 ]
    [ "$(git -C "${CHECKOUT}" rev-parse HEAD)" = "${B200_MB_COMMIT}" ]  # every GPU type's commit
}

@test "bridge: without the network or a sources folder, one line says what to do" {
    bridge_world
    rm -rf "${UPSTREAM}"
    LLMB_SETUP_STEPS=sources run --separate-stderr bash "${REPO}/common/setup.sh" "${RECIPE}"
    [ "${status}" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == "llmb: git clone ${UPSTREAM}/Megatron-Bridge.git failed: "* ]]
    [ ! -e "${CHECKOUT}" ]
    [ -z "$(find "${LLMB_INSTALL}/workloads" -name '.*partial*')" ]
    LLMB_SOURCES="${BATS_TEST_TMPDIR}/none" LLMB_SETUP_STEPS=sources run --separate-stderr bash "${REPO}/common/setup.sh" "${RECIPE}"
    [ "${status}" -eq 1 ]
    [[ "${stderr}" == "llmb: LLMB_SOURCES=${BATS_TEST_TMPDIR}/none does not exist; give the folder common/setup.sh --fetch-sources filled, or unset it to use the network" ]]
}

@test "--fetch-sources: usage and an unknown recipe are one line" {
    run --separate-stderr bash "${REPO}/common/setup.sh" --fetch-sources "${BATS_TEST_TMPDIR}/s"
    [ "${status}" -eq 1 ]
    [ "${stderr}" = "llmb: usage: common/setup.sh --fetch-sources DIR <recipe>... (e.g. bridge/llama3.1)" ]
    run --separate-stderr bash "${REPO}/common/setup.sh" --fetch-sources "${BATS_TEST_TMPDIR}/s" nosuch
    [ "${status}" -eq 1 ]
    [ "${stderr}" = "llmb: recipe=nosuch has no ${REPO}/nosuch/metadata.yaml" ]
    [ ! -e "${BATS_TEST_TMPDIR}/s" ]
    run --separate-stderr bash "${REPO}/common/setup.sh" --fetch-sources $'/tmp/s\n' llama3.1
    [ "${status}" -eq 1 ]
    [ "${stderr}" = "llmb: --fetch-sources DIR=\$'/tmp/s\\n' contains control character(s); give a plain folder path" ]
}
