#!/usr/bin/env bats
# common/parse_train_timing.sh: the bash front of llmb.analysis.cli. Formats, exit codes 0/1/2/3 with
# one-line errors, the default directory, other working directories, links, the message when
# the chosen python has no pyyaml, --check, --report and a whole install's experiments.

bats_require_minimum_version 1.5.0

REPO="$(cd "${BATS_TEST_DIRNAME}/../.." && pwd)"
SCRIPT="${REPO}/common/parse_train_timing.sh"
FIXTURES="${REPO}/tests/fixtures/logs/experiments"

setup() {
    if [[ -x "${REPO}/.venv/bin/python" ]]; then
        export LLMB_PYTHON="${REPO}/.venv/bin/python"
    fi
    unset PYTHONPATH
}

one_line() {
    [ "$(printf '%s\n' "$1" | wc -l)" -eq 1 ]
}

@test "table by default: the seed header, exit 0" {
    run --separate-stderr "${SCRIPT}" "${FIXTURES}"
    [ "${status}" -eq 0 ]
    [ "${lines[0]}" = "Train Step Timing and TFLOPS Analysis (iterations 11-44)" ]
    [[ "${lines[2]}" == "Experiment "*"Status  Time Mean (s) Time Std (s) TFLOPS_per_GPU Mean TFLOPS_per_GPU Std" ]]
    printf '%s\n' "${output}" | grep -Eq '^llama3\.1 8b bf16 16gpu +Success +12\.300 +0\.010 +455\.20 +0\.10$'
    [[ "${output}" == *"Summary: 9 log(s): 6 Success, 3 Failed"* ]]
    [ -z "${stderr}" ]
}

@test "csv: established columns first" {
    run --separate-stderr "${SCRIPT}" --format=csv "${FIXTURES}"
    [ "${status}" -eq 0 ]
    [[ "${lines[0]}" == "filename,status,time_mean,time_std_dev,tflops_per_gpu_mean,tflops_per_gpu_std_dev,max_iteration,experiment,"* ]]
    [ "${#lines[@]}" -eq 10 ]
}

@test "json: valid, with results, skipped and summary" {
    run --separate-stderr "${SCRIPT}" --format json "${FIXTURES}"
    [ "${status}" -eq 0 ]
    printf '%s' "${output}" | "${LLMB_PYTHON:-python3}" -c '
import json, sys
data = json.load(sys.stdin)
assert data["summary"]["success"] == 6, data["summary"]
assert {s["reason"] for s in data["skipped"]} == {"sbatch output", "NCCL trace"}
'
}

@test "--full-names labels rows with paths relative to DIR" {
    run --separate-stderr "${SCRIPT}" --full-names "${FIXTURES}"
    [ "${status}" -eq 0 ]
    printf '%s\n' "${output}" | grep -Eq '^custom-nemotron-run/custom-nemotron-run_1744413000/custom-nemotron-run/log-custom-nemotron-run_2201350_0\.out +Success +1\.979 '

}

@test "default DIR is ./experiments, from any working directory" {
    mkdir -p "${BATS_TEST_TMPDIR}/work"
    cp -r "${FIXTURES}" "${BATS_TEST_TMPDIR}/work/experiments"
    cd "${BATS_TEST_TMPDIR}/work"
    run --separate-stderr "${SCRIPT}" --format=csv
    [ "${status}" -eq 0 ]
    [ "${#lines[@]}" -eq 10 ]
    cd /
    run --separate-stderr "${SCRIPT}" --format=csv "${BATS_TEST_TMPDIR}/work/experiments"
    [ "${status}" -eq 0 ]
}

@test "works through a symbolic link to the script" {
    ln -s "${SCRIPT}" "${BATS_TEST_TMPDIR}/ptt"
    run --separate-stderr "${BATS_TEST_TMPDIR}/ptt" --format=json "${FIXTURES}"
    [ "${status}" -eq 0 ]
}

@test "--help prints usage, exit 0" {
    run --separate-stderr "${SCRIPT}" --help
    [ "${status}" -eq 0 ]
    [[ "${lines[0]}" == "usage: parse_train_timing.sh [--format=table|csv|json] [--full-names]"* ]]
}

@test "exit 1: DIR does not exist (one line, nothing on stdout)" {
    run --separate-stderr "${SCRIPT}" "${BATS_TEST_TMPDIR}/nope"
    [ "${status}" -eq 1 ]
    [ -z "${output}" ]
    one_line "${stderr}"
    [[ "${stderr}" == "parse_train_timing.sh: ${BATS_TEST_TMPDIR}/nope does not exist;"* ]]
}

@test "exit 1: no .out file" {
    mkdir -p "${BATS_TEST_TMPDIR}/empty/sub"
    run --separate-stderr "${SCRIPT}" "${BATS_TEST_TMPDIR}/empty"
    [ "${status}" -eq 1 ]
    one_line "${stderr}"
    [[ "${stderr}" == *"no .out log files under"* ]]
}

@test "exit 1: no run succeeded, the table is still printed" {
    mkdir -p "${BATS_TEST_TMPDIR}/failed"
    cp -r "${FIXTURES}/pretrain_llama3.1_8b_bf16_8" "${BATS_TEST_TMPDIR}/failed/"
    run --separate-stderr "${SCRIPT}" "${BATS_TEST_TMPDIR}/failed"
    [ "${status}" -eq 1 ]
    [[ "${output}" == *"llama3.1 8b bf16 8gpu"*"Failed"* ]]
    one_line "${stderr}"
    [[ "${stderr}" == *"no successful run among 1 log(s)"* ]]
}

@test "exit 2: bad options name the option and what is allowed" {
    run --separate-stderr "${SCRIPT}" --format=xml "${FIXTURES}"
    [ "${status}" -eq 2 ]
    one_line "${stderr}"
    [ "${stderr}" = "parse_train_timing.sh: --format=xml is not allowed; allowed: table, csv, json" ]
    run --separate-stderr "${SCRIPT}" --verbose "${FIXTURES}"
    [ "${status}" -eq 2 ]
    [[ "${stderr}" == *"unknown option --verbose; allowed: --format=table|csv|json"* ]]
    run --separate-stderr "${SCRIPT}" --gpu-type=a100 "${FIXTURES}"
    [ "${status}" -eq 2 ]
    [[ "${stderr}" == *"--gpu-type=a100 is not allowed; allowed: h100, b200, gb200, h200, b300, gb300"* ]]
}

@test "--gpu-type=gb200 applies to runs identified by name" {
    run --separate-stderr "${SCRIPT}" --gpu-type=GB200 "${FIXTURES}"
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"nemotron 340b fp8 128gb200"* ]]
}

@test "--gpu-type=b300: a Megatron-Bridge run on B300, its MFU on the B300 peak" {
    local corpus="${REPO}/tests/fixtures/logs/corpus/bridge-b300-glued"
    run --separate-stderr "${SCRIPT}" --gpu-type=b300 --format=csv "${corpus}"
    [ "${status}" -eq 0 ]
    [[ "${lines[1]}" == *",Success,4.1904,"*",llama3.1,8b,bf16,b300,8,128,"* ]]
    run --separate-stderr "${SCRIPT}" --gpu-type=b300 "${corpus}"
    [[ "${output}" == *"llama3.1 8b bf16 8b300"*"Success"* ]]
    [[ "${output}" == *" 80.51 "* ]]  # MFU %: 128 x 4.74e14 / 4.1904 s / 8 / 2250 TFLOPS
    [ -z "${stderr}" ]
}

@test "a python without pyyaml: one line saying how to fix it" {
    mkdir -p "${BATS_TEST_TMPDIR}/bin"
    # A real interpreter that cannot see any site-packages, so `import yaml` fails.
    printf '#!/usr/bin/env bash\nexec %s -S "$@"\n' "${LLMB_PYTHON:-python3}" >"${BATS_TEST_TMPDIR}/bin/python-noyaml"
    chmod +x "${BATS_TEST_TMPDIR}/bin/python-noyaml"
    LLMB_PYTHON="${BATS_TEST_TMPDIR}/bin/python-noyaml" run --separate-stderr "${SCRIPT}" "${FIXTURES}"
    [ "${status}" -eq 1 ]
    one_line "${stderr}"
    [[ "${stderr}" == *"cannot import yaml (pyyaml); activate the workload venv"* ]]
    # --help needs no pyyaml
    LLMB_PYTHON="${BATS_TEST_TMPDIR}/bin/python-noyaml" run --separate-stderr "${SCRIPT}" --help
    [ "${status}" -eq 0 ]
}

@test "LLMB_PYTHON that is not a program: one line" {
    LLMB_PYTHON=/nonexistent/python run --separate-stderr "${SCRIPT}" "${FIXTURES}"
    [ "${status}" -eq 1 ]
    one_line "${stderr}"
    [[ "${stderr}" == *"LLMB_PYTHON=/nonexistent/python is not an executable python"* ]]
}

@test "--check: exit 3 with one line when a configuration is below the tolerance" {
    run --separate-stderr "${SCRIPT}" --check "${REPO}/tests/fixtures/logs/verdicts"
    [ "${status}" -eq 3 ]
    one_line "${stderr}"
    [[ "${stderr}" == "parse_train_timing.sh: check failed: 1 configuration(s) below 95% of the reference"* ]]
    [[ "${output}" == *"llama3.1 8b bf16 16gpu"*"below"* ]]
    run --separate-stderr "${SCRIPT}" --check --tolerance=12 \
        "${REPO}/tests/fixtures/logs/verdicts/pretrain_llama3.1_8b_bf16_gpus16_tp1_pp1_cp2_vpNone_mbs1_gbs256"
    [ "${status}" -eq 0 ]
}

@test "exit 2: a bad --tolerance or --window names the value, nothing is written" {
    cd "${BATS_TEST_TMPDIR}"
    run --separate-stderr "${SCRIPT}" --tolerance=lots --report=out "${FIXTURES}"
    [ "${status}" -eq 2 ]
    one_line "${stderr}"
    [[ "${stderr}" == "parse_train_timing.sh: --tolerance=lots is not allowed;"* ]]
    run --separate-stderr "${SCRIPT}" --window=44-11 --report=out "${FIXTURES}"
    [ "${status}" -eq 2 ]
    [[ "${stderr}" == *"--window=44-11 is not allowed"* ]]
    [ ! -e out ]
}

@test "--report writes a self-contained page, the markdown and the plots" {
    run --separate-stderr "${SCRIPT}" --format=json --report="${BATS_TEST_TMPDIR}/r" "${FIXTURES}"
    [ "${status}" -eq 0 ]
    [ "${stderr}" = "parse_train_timing.sh: report written to ${BATS_TEST_TMPDIR}/r/index.html" ]
    [ -s "${BATS_TEST_TMPDIR}/r/index.html" ] && [ -s "${BATS_TEST_TMPDIR}/r/report.md" ]
    compgen -G "${BATS_TEST_TMPDIR}/r/plots/*.png" >/dev/null
    grep -q 'src="data:image/png;base64,' "${BATS_TEST_TMPDIR}/r/index.html"
    run grep -Eq 'https?://|<script' "${BATS_TEST_TMPDIR}/r/index.html"
    [ "${status}" -eq 1 ]
}

@test "a whole install: several experiments directories at once" {
    local w="${BATS_TEST_TMPDIR}/llmb/workloads"
    mkdir -p "${w}/pretrain_llama3.1/experiments" "${w}/pretrain_nemotron4/experiments"
    cp -r "${FIXTURES}/pretrain_llama3.1_8b_bf16_16" "${w}/pretrain_llama3.1/experiments/"
    cp -r "${FIXTURES}/pretrain_nemotron4_15b_bf16_16" "${w}/pretrain_nemotron4/experiments/"
    run --separate-stderr "${SCRIPT}" "${w}"/*/experiments
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"Summary: 2 log(s): 2 Success, 0 Failed"* ]]
}
