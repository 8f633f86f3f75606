#!/usr/bin/env bats
# Hostile input for llmb-run, one table: each row is refused with the exit code it states
# (2: a command line that cannot be used; 1: a refused request or file) and exactly one stderr
# line naming the flag, variable or field; nothing is written (no history, no workloads/, no
# preflight/ under the install, nothing in the directory it ran from) and nothing is submitted
# (the recording sbatch double is first on PATH and its log stays absent). No value runs a
# command. The table holds $(...) on purpose, in single quotes: values that must never run.
# shellcheck disable=SC2016

bats_require_minimum_version 1.5.0

REPO="$(cd "${BATS_TEST_DIRNAME}/../.." && pwd)"

setup() {
    export LLMB_PYTHON="${REPO}/.venv/bin/python"
    export SHIM_LOG="${BATS_TEST_TMPDIR}/submitted.log"
    export PATH="${REPO}/tests/shims:${PATH}"
    unset LLMB_INSTALL HF_TOKEN STAGE_PATH SMOKE_TEST
    INSTALL="${BATS_TEST_TMPDIR}/install"
    mkdir -p "${INSTALL}" "${BATS_TEST_TMPDIR}/cwd"
    write_config "h100" "acct"
    cd "${BATS_TEST_TMPDIR}/cwd" || return 1
}

# write_config GPU_TYPE ACCOUNT: cluster_config.yaml as the installer writes it.
write_config() {
    cat >"${INSTALL}/cluster_config.yaml" <<EOF
schema: 1
llmb: {repo: "${REPO}", install_path: "${INSTALL}"}
launcher:
  cluster_type: slurm
  gpu_type: $1
  slurm: {account: "$2", partition: batch, gres: null}
  hf_token_file: null
  env: {}
workloads:
  pretrain_nemotron4: {venv: "${REPO}/.venv", venv_kind: venv, image: null}
EOF
}

# refused CODE MESSAGE [VAR=VALUE...] ARG...: llmb-run ARG... (with those variables set).
refused() {
    local code="$1" message="$2"
    shift 2
    local -a vars=()
    while (($#)) && [[ "$1" =~ ^[A-Z_]+= ]]; do
        vars+=("$1")
        shift
    done
    run --separate-stderr env "${vars[@]}" bash "${REPO}/installer/llmb-run" \
        --config "${INSTALL}/cluster_config.yaml" "$@"
    echo "row: $(printf '%q ' "${vars[@]}" "$@")-> status=${status} stderr=${stderr}" >&2
    [ "${status}" -eq "${code}" ]
    [ "${output}" = "" ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == "llmb-run: "*"${message}"* ]]
    [ ! -e "${SHIM_LOG}" ]
    [ ! -e "${INSTALL}/llmb_run_history.jsonl" ]
    [ ! -e "${INSTALL}/workloads" ]
    [ ! -e "${INSTALL}/preflight" ]
    [ -z "$(ls -A "${BATS_TEST_TMPDIR}/cwd")" ]
    [ -z "$(find "${BATS_TEST_TMPDIR}" -name pwned)" ]
}

SINGLE=(single -w pretrain_nemotron4 -s 15b --dtype fp8 --scale 16)

@test "--env cannot override what llmb-run validated and records" {
    refused 2 "--env MODEL_SIZE=340b: llmb-run sets MODEL_SIZE itself (and records it in the history); use -s/--size" \
        "${SINGLE[@]}" --env MODEL_SIZE=340b
    refused 2 "--env DTYPE=bf16: llmb-run sets DTYPE itself" "${SINGLE[@]}" --env DTYPE=bf16
    refused 2 "--env JOB_TOTAL_GPUS=128: llmb-run sets JOB_TOTAL_GPUS itself" \
        "${SINGLE[@]}" --env JOB_TOTAL_GPUS=128
    refused 2 "--env GPU_TYPE=b200: llmb-run sets GPU_TYPE itself" "${SINGLE[@]}" --env GPU_TYPE=b200
    refused 2 '--env NCCL_DEBUG=INFO\n#SBATCH --wrap=touch pwned contains control character(s) \n' \
        "${SINGLE[@]}" --env $'NCCL_DEBUG=INFO\n#SBATCH --wrap=touch pwned'
    refused 2 '--env: A B is not a variable name' "${SINGLE[@]}" --env 'A B=1'
    refused 2 '--env SMOKE_TEST=maybe is not a boolean' "${SINGLE[@]}" --env SMOKE_TEST=maybe
    refused 2 '--env X is not NAME=VALUE' "${SINGLE[@]}" --env X
}

@test "numbers on the command line: ASCII digits, written plainly, within bounds" {
    refused 2 "argument --scale: 016 is not a GPU count; write it as 16" \
        single -w pretrain_nemotron4 -s 15b --dtype fp8 --scale 016
    refused 2 "argument --scale: ١٦ is not a GPU count" \
        single -w pretrain_nemotron4 -s 15b --dtype fp8 --scale ١٦
    refused 2 "argument --scale: -16 is not a GPU count" \
        single -w pretrain_nemotron4 -s 15b --dtype fp8 --scale -16
    refused 2 "argument --scale: 12345678901234567890123 is not a GPU count: a whole number from 1 to 1048576" \
        single -w pretrain_nemotron4 -s 15b --dtype fp8 --scale 12345678901234567890123
    refused 2 "argument --repeats: 0 is not a number of repeats" "${SINGLE[@]}" --repeats 0
    refused 1 '-w pretrain_x\ny is not a workload' \
        single -w $'pretrain_x\ny' -s 15b --dtype fp8 --scale 16
}

@test "placement flags: what an #SBATCH line can hold, nothing more" {
    refused 2 "--exclude=node1;touch pwned is not a Slurm node list" \
        "${SINGLE[@]}" --exclude 'node1;touch pwned'
    refused 2 '--nodelist=n$(id) is not a Slurm node list' "${SINGLE[@]}" --nodelist 'n$(id)'
    refused 2 "--nodelist=n[1-99999999] names 99999999 nodes; at most 65536 are allowed" \
        "${SINGLE[@]}" --nodelist 'n[1-99999999]'
    refused 1 "--nodelist=node[1-3] names 3 nodes but the job runs on 2" \
        "${SINGLE[@]}" --nodelist 'node[1-3]'
    refused 2 '--qos=hi\n contains control character(s) \n' "${SINGLE[@]}" --qos $'hi\n'
    refused 2 "--reservation=maint window is not a reservation name" \
        "${SINGLE[@]}" --reservation 'maint window'
    refused 2 "--segment=-1 is not a positive whole number of nodes" "${SINGLE[@]}" --segment -1
    refused 1 "--segment=3 does not divide the job's 2 node(s)" "${SINGLE[@]}" --segment 3
    refused 2 "--slurm-arg=--account=other: llmb sets --account itself" \
        "${SINGLE[@]}" --slurm-arg=--account=other
    refused 2 "--slurm-arg=--comment=a\"b contains \"" "${SINGLE[@]}" '--slurm-arg=--comment=a"b'
    refused 2 "--slurm-arg=constraint=h100 is not --KEY=VALUE" "${SINGLE[@]}" --slurm-arg=constraint=h100
}

@test "the environment: placement and sbatch settings that would go unrecorded" {
    refused 1 "LLMB_NODELIST=node1 is set in the environment; llmb-run takes placement from its flags" \
        LLMB_NODELIST=node1 "${SINGLE[@]}"
    refused 1 "SBATCH_QOS=high is set; sbatch would apply it over the job script's #SBATCH lines" \
        SBATCH_QOS=high "${SINGLE[@]}"
    refused 1 "STAGE_PATH=/old is no longer used; unset it and set LLMB_INSTALL" STAGE_PATH=/old "${SINGLE[@]}"
    refused 1 "SMOKE_TEST=perhaps is not a boolean; use true or false (also yes/no, 1/0, on/off) (from the environment)" \
        SMOKE_TEST=perhaps "${SINGLE[@]}"
}

@test "bulk files: strict booleans, no overrides, text that is UTF-8" {
    local f="${BATS_TEST_TMPDIR}/sweep.yaml"
    printf 'tasks:\n- {workload: pretrain_nemotron4, size: 15b, dtype: fp8, scale: 16, profile: maybe}\n' >"$f"
    refused 1 "task 1: profile=maybe is not a boolean" bulk "$f"
    printf 'tasks:\n- {workload: pretrain_nemotron4, size: 15b, dtype: fp8, scale: 16, env: {SMOKE_TEST: perhaps}}\n' >"$f"
    refused 1 "task 1: env SMOKE_TEST=perhaps is not a boolean" bulk "$f"
    printf 'tasks:\n- {workload: pretrain_nemotron4, size: 15b, dtype: fp8, scale: 16, env: {DTYPE: bf16}}\n' >"$f"
    refused 1 "task 1: env DTYPE=bf16: llmb-run sets DTYPE itself" bulk "$f"
    printf 'tasks:\n- {workload: pretrain_nemotron4, size: 15b, dtype: fp8, scale: "16"}\n' >"$f"
    refused 1 "task 1: scales must be integers (GPUs), got '16'" bulk "$f"
    printf 'tasks:\n- {workload: pretrain_nemotron4, size: 15b, dtype: fp8, scale: 100000000000000000000}\n' >"$f"
    refused 1 "task 1: scale 100000000000000000000 must be a whole number of GPUs from 1 to 1048576" bulk "$f"
    printf 'tasks:\n- {workload: pretrain_nemotron4, size: 15b, dtype: fp8, scale: 16} # caf\xe9\n' >"$f"
    refused 1 "bulk file $f is not UTF-8 text (byte 0xe9 at offset" bulk "$f"
    refused 1 "No such file" bulk "${BATS_TEST_TMPDIR}/none.yaml"
    refused 1 "cannot read bulk file ${BATS_TEST_TMPDIR}: Is a directory" bulk "${BATS_TEST_TMPDIR}"
}

@test "a hand-edited cluster_config.yaml: one line naming the field" {
    write_config "h100" 'acct\n#SBATCH --wrap=id' # a YAML escape: a real newline
    refused 1 'launcher.slurm.account=acct\n#SBATCH --wrap=id contains control characters' "${SINGLE[@]}"
    write_config "h1000" "acct"
    refused 1 "launcher.gpu_type=h1000 is not a GPU type" "${SINGLE[@]}"
    printf '\xff\xfe' >>"${INSTALL}/cluster_config.yaml"
    refused 1 "cluster_config.yaml is not UTF-8 text" list
    local long
    long="${INSTALL}/$(printf 'x%.0s' {1..300}).yaml"  # longer than a file name may be
    refused 1 "--config ${long} cannot be read (File name too long)" --config "${long}" list
}

@test "status, preflight, rerun, jobs log: flags and job ids" {
    refused 2 "status --timeout applies with --wait only" status --timeout 5
    refused 2 "argument --format: invalid choice: 'xml'" status --format=xml
    refused 2 "argument --nodes: 0 is not a node count" preflight --nodes 0
    refused 2 "argument --timeout: 0 is not seconds" preflight --timeout 0
    refused 2 "argument --format: invalid choice: 'yaml'" preflight --format=yaml
    refused 2 "rerun needs JOB ids or --failed" rerun
    refused 1 'job 7$(touch pwned) is not in' rerun '7$(touch pwned)'
    refused 1 'job 1\n2 is not in' jobs log $'1\n2'
}

@test "a history record without job_id does not crash status" {
    printf '{"type": "submit", "workload": "pretrain_nemotron4"}\nnot json\n' \
        >"${INSTALL}/llmb_run_history.jsonl"
    run --separate-stderr bash "${REPO}/installer/llmb-run" --config "${INSTALL}/cluster_config.yaml" status
    [ "${status}" -eq 0 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "${stderr}" == *"skipped 1 line(s) that are not JSON records (line 2) and 1 submit record(s) without a usable job_id (line 1)" ]]
    [ "${output}" = "no submissions recorded in ${INSTALL}/llmb_run_history.jsonl" ]
}

@test "an allowed value with shell characters is only ever quoted: nothing runs" {
    run --separate-stderr bash "${REPO}/installer/llmb-run" --config "${INSTALL}/cluster_config.yaml" \
        "${SINGLE[@]}" --dry-run --env 'NOTE=$(touch pwned)' --slurm-arg='--comment=$(touch pwned)'
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"#SBATCH --comment='\$(touch pwned)'"* ]]
    [ ! -e "${SHIM_LOG}" ]
    [ -z "$(find "${BATS_TEST_TMPDIR}" "${INSTALL}" -name pwned)" ]
}
