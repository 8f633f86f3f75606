#!/usr/bin/env bats
# installer/install.sh (the bash front): its own errors and the hand-off to llmb.install.cli.
# Hostile values are literal text (SC2016); the table's helper runs `run` and reads its
# results in the same test (SC2030/SC2031 cannot see that).
# shellcheck disable=SC2016,SC2030,SC2031
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

# --- hostile input: one table, each row refused in one line naming the key ------------------

# refused MESSAGE [--dry-run] < CONFIG: install.sh --config (the YAML on stdin, written to a file
# first) exits 1 with one stderr line "llmb-install: ...MESSAGE...", creates nothing (no
# install directory, nothing in the directory it ran from), imports and submits nothing.
refused() {
    local message="$1"
    shift
    cat >"${BATS_TEST_TMPDIR}/c.yaml"
    mkdir -p "${BATS_TEST_TMPDIR}/cwd"
    cd "${BATS_TEST_TMPDIR}/cwd" || return 1
    PATH="${REPO}/tests/shims:${PATH}" SHIM_LOG="${BATS_TEST_TMPDIR}/shim.log" \
        ENROOT_SHIM_LOG="${BATS_TEST_TMPDIR}/enroot.log" HF_TOKEN=hf_abcdefghijklmnop \
        run --separate-stderr bash "${REPO}/installer/install.sh" \
        --config "${BATS_TEST_TMPDIR}/c.yaml" "$@"
    echo "row: ${message} -> status=${status} stderr=${stderr}" >&2
    [ "${status}" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == "llmb-install: "*"${message}"* ]]
    [ ! -e "${BATS_TEST_TMPDIR}/inst" ]
    [ -z "$(ls -A "${BATS_TEST_TMPDIR}/cwd")" ]
    [ ! -e "${BATS_TEST_TMPDIR}/shim.log" ] && [ ! -e "${BATS_TEST_TMPDIR}/enroot.log" ]
    [ ! -e /x ]
}

# base [KEY: VALUE lines...]: a valid config with the given lines in place of its own lines of
# the same top-level keys (a key given twice is itself refused).
base() {
    local -A given=()
    local line
    for line in "$@"; do
        given["${line%%:*}"]=1
    done
    while IFS= read -r line; do
        [[ -n "${given["${line%%:*}"]:-}" ]] || printf '%s\n' "${line}"
    done < <(printf 'install_path: %s/inst\nworkloads: [pretrain_nemotron4]\nslurm: {account: a, partition: p}\nvenv: {reuse: %s/.venv}\n' \
        "${BATS_TEST_TMPDIR}" "${REPO}")
    printf '%s\n' "$@"
}

@test "hostile installer configs: refused in one line, nothing created, nothing submitted" {
    base 'install_path: "/x/y $(touch pwned)"' | refused 'install_path=/x/y $(touch pwned) contains a space $ ( ), which a job path cannot hold'
    base 'install_path: "/x/y $(touch pwned)"' | refused 'install_path=/x/y $(touch pwned) contains' --dry-run
    base 'install_path: /proc/llmb' | refused 'install_path=/proc/llmb cannot be used: /proc is not writable by'
    base 'install_path: /proc/llmb' | refused 'install_path=/proc/llmb cannot be used:' --dry-run
    : >"${BATS_TEST_TMPDIR}/a-file"
    base "install_path: ${BATS_TEST_TMPDIR}/a-file/llmb" | refused "${BATS_TEST_TMPDIR}/a-file is a file, not a directory" --dry-run
    base "install_path: ${BATS_TEST_TMPDIR}/$(printf 'x%.0s' {1..300})" | refused 'cannot be used: a name in it is longer than the file system allows (255 bytes)' --dry-run
    base 'slurm: {account: "a\n#SBATCH --wrap=id", partition: p}' | refused 'slurm.account=a\n#SBATCH --wrap=id contains control character(s) \n'
    base 'slurm: {account: a, partition: "p;id"}' | refused 'slurm.partition=p;id contains ;'
    base 'slurm: {account: a, partition: p, gres: "8"}' | refused 'slurm.gres=8 is not a GPU GRES request'
    base 'image: {method: srun, time_limit: forever}' | refused 'image.time_limit=forever is not a Slurm time'
    base "venv: {reuse: ${REPO}/.venv, pip_args: --no-index}" | refused 'venv.pip_args must be a list'
    base "venv: {reuse: ${REPO}/.venv, requirements: common/requirements/launch.txt}" | refused 'venv.requirements must be a list'
    base 'workloads: pretrain_nemotron4' | refused 'workloads must be a list'
    base 'env: {MY_PASSWD: hunter2hunter2}' | refused 'env.MY_PASSWD looks like a secret (by its name)'
    base 'env: {NGC_CREDENTIAL: abc}' | refused 'env.NGC_CREDENTIAL looks like a secret'
    base 'env: {EXTRA_ARGS: "--token hf_abcdefghijklmnop"}' | refused 'env.EXTRA_ARGS holds the value of a secret'
    [[ "${stderr}" != *hf_abcdefghijklmnop* ]]
    base 'env: {"A B": x}' | refused 'env: A B is not a variable name'
    base $'"co\\x1blour": x' | refused 'has 1 unknown key(s) (not shown: not the name of a setting)'
    printf 'true\n' >"${BATS_TEST_TMPDIR}/tok"
    chmod 600 "${BATS_TEST_TMPDIR}/tok"
    base 'workloads: [pretrain_llama3.1]' "hf_token_file: ${BATS_TEST_TMPDIR}/tok" | refused 'the token in hf_token_file is a yes/no word'
    printf 'install_path: /tmp/caf\xe9\n' | refused 'is not UTF-8 text (byte 0xe9 at offset 22); save it as UTF-8'
}
