#!/usr/bin/env bats
# Hostile input for launch.sh, one table: each row is refused with the exit code it states and
# exactly one stderr line naming the variable; nothing is written (no workloads/ under
# LLMB_INSTALL, nothing in the directory it ran from, no /x) and nothing is submitted (the
# recording sbatch shim is first on PATH and its log stays absent). No value runs a command.
# Hostile values are literal text (SC2016); the table's helper runs `run` and reads its
# results in the same test (SC2030/SC2031 cannot see that).
# shellcheck disable=SC2016,SC2030,SC2031

bats_require_minimum_version 1.5.0
load launch_helpers

setup() {
    launch_setup
    export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz
    mkdir -p "$BATS_TEST_TMPDIR/cwd"
}

# refused CODE MESSAGE VAR=VALUE...: nemotron/launch.sh (llama3.1 when LAUNCH is set).
refused() {
    local code="$1" message="$2"
    shift 2
    cd "$BATS_TEST_TMPDIR/cwd" || return 1
    run --separate-stderr env JOB_TOTAL_GPUS=16 "$@" "${LAUNCH:-$REPO/nemotron/launch.sh}"
    echo "row: $(printf '%q ' "$@")-> status=$status stderr=$stderr" >&2
    [ "$status" -eq "$code" ]
    [ "$output" = "" ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "$stderr" == "llmb: ${message}"* ]]
    [ ! -e "$SHIM_LOG" ]
    [ ! -e "$LLMB_INSTALL/workloads" ]
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/cwd")" ]
    [ ! -e /x ]
}

@test "paths nemo-run hands to a shell: no command runs, nothing is submitted" {
    refused 2 'LLMB_INSTALL=/x/y$(touch pwned) contains $ ( a space ), which a job path cannot hold: nemo-run passes the run directory under it unquoted to a shell (mkdir, sbatch)' \
        'LLMB_INSTALL=/x/y$(touch pwned)'
    refused 2 'LLMB_INSTALL=/x/y`touch pwned` contains ` a space' 'LLMB_INSTALL=/x/y`touch pwned`'
    refused 2 "LLMB_INSTALL=/x/my dir contains a space" "LLMB_INSTALL=/x/my dir"
    refused 2 "LLMB_INSTALL=/x/it's contains '" "LLMB_INSTALL=/x/it's"
    refused 2 "LLMB_INSTALL=/x/a;touch pwned contains ; a space" "LLMB_INSTALL=/x/a;touch pwned"
    refused 2 "LLMB_INSTALL=/x/%j contains %" "LLMB_INSTALL=/x/%j"
    refused 2 'LLMB_WORKLOAD=/x/w$(id) contains $ ( )' 'LLMB_WORKLOAD=/x/w$(id)'
    refused 2 "LLMB_INSTALL=$BATS_TEST_TMPDIR/cwd/rel dir contains a space" "LLMB_INSTALL=rel dir"
}

@test "control characters in any value that lands in the job script" {
    refused 2 'SBATCH_ACCOUNT=acct\n#SBATCH --wrap=touch pwned contains control character(s) \n, which would end or garble a line of the job script' \
        SBATCH_ACCOUNT=$'acct\n#SBATCH --wrap=touch pwned'
    refused 2 'SBATCH_PARTITION=batch\r contains control character(s) \r' SBATCH_PARTITION=$'batch\r'
    refused 2 'TIME_LIMIT=00:30:00\n contains control character(s) \n' TIME_LIMIT=$'00:30:00\n'
    refused 2 'RUN_CONF_IMAGE=/x/i.sqsh\t contains control character(s) \t' RUN_CONF_IMAGE=$'/x/i.sqsh\t'
    refused 2 'LOAD_CHECKPOINT_PATH=/x/c\x1b[2J contains control character(s) \x1b' LOAD_CHECKPOINT_PATH=$'/x/c\e[2J'
    refused 2 'MAX_STEPS=5\x7f contains control character(s) \x7f' MAX_STEPS=$'5\x7f'
    refused 1 "DTYPE=\$'fp8\\nbf16' contains control character(s)" DTYPE=$'fp8\nbf16'
    refused 1 "DRY_RUN=\$'true\\n' contains control character(s)" DRY_RUN=$'true\n'
    refused 1 "LLMB_INSTALL=\$'/x/a\\nb' contains control character(s)" LLMB_INSTALL=$'/x/a\nb'
    refused 1 "STAGE_PATH=\$'/old\\E[31m' contains control character(s)" STAGE_PATH=$'/old\e[31m'
}

@test "Slurm names, times and pyxis mounts" {
    refused 2 'SBATCH_ACCOUNT=a$(touch pwned) contains $ ( a space ), which a Slurm account name cannot hold here' \
        'SBATCH_ACCOUNT=a$(touch pwned)'
    refused 2 "SBATCH_PARTITION=batch;id contains ;" "SBATCH_PARTITION=batch;id"
    refused 2 "SBATCH_PARTITION=-x contains a leading -" SBATCH_PARTITION=-x
    refused 2 "TIME_LIMIT=forever is not a Slurm time" TIME_LIMIT=forever
    refused 2 "TIME_LIMIT=99999-00:00:00 is not a Slurm time" TIME_LIMIT=99999-00:00:00
    mkdir -p "$BATS_TEST_TMPDIR/ck,pt/weights"
    refused 2 "LOAD_CHECKPOINT_PATH=$BATS_TEST_TMPDIR/ck,pt contains ,, which pyxis cannot mount" \
        LOAD_CHECKPOINT_PATH="$BATS_TEST_TMPDIR/ck,pt"
    refused 2 "LOAD_CHECKPOINT_PATH=/x/a:b contains :, which pyxis cannot mount" \
        LOAD_CHECKPOINT_PATH=/x/a:b
    refused 2 "RUN_CONF_IMAGE=nvcr.io/nvidia/nemo:25.04.01 --x is neither an image file" \
        "RUN_CONF_IMAGE=nvcr.io/nvidia/nemo:25.04.01 --x"
    refused 2 "RUN_CONF_IMAGE=$BATS_TEST_TMPDIR/cwd/images/none.sqsh does not exist" \
        RUN_CONF_IMAGE=images/none.sqsh
}

@test "numbers: ASCII digits, written plainly, within bounds, consistent" {
    refused 2 "JOB_TOTAL_GPUS=016 is not a positive integer (the total number of GPUs for the job); write it as 16" \
        JOB_TOTAL_GPUS=016
    refused 2 "JOB_TOTAL_GPUS=١٦ is not a positive integer" JOB_TOTAL_GPUS=١٦
    refused 2 "JOB_TOTAL_GPUS=-16 is not a positive integer" JOB_TOTAL_GPUS=-16
    refused 2 "MAX_STEPS=12345678901234567890123 is too large; at most 1000000" \
        MAX_STEPS=12345678901234567890123
    refused 2 "PROFILE_STOP_STEP=1e9 is not a positive integer" PROFILE_STOP_STEP=1e9
    refused 2 "SBATCH_GPUS_PER_NODE=3 asks for 3 GPUs per node, but a h100 job runs 8 tasks per node, each on one GPU: use gpu:8 (GPUS_PER_NODE=8), or unset it" \
        SBATCH_GPUS_PER_NODE=3
    refused 2 "JOB_TOTAL_GPUS=1000000 is more processes than this machine can run: CLUSTER_TYPE=local starts one per GPU, at most" \
        CLUSTER_TYPE=local SMOKE_TEST=true JOB_TOTAL_GPUS=1000000
}

@test "paths that are not what they should be" {
    : >"$BATS_TEST_TMPDIR/a-file"
    refused 2 "LLMB_INSTALL=$BATS_TEST_TMPDIR/a-file is a file, not a directory" \
        LLMB_INSTALL="$BATS_TEST_TMPDIR/a-file"
    refused 2 "LOAD_CHECKPOINT_PATH=$BATS_TEST_TMPDIR/a-file is a file, not a directory" \
        LOAD_CHECKPOINT_PATH="$BATS_TEST_TMPDIR/a-file"
    ln -s loop "$BATS_TEST_TMPDIR/loop"
    refused 2 "LOAD_CHECKPOINT_PATH=$BATS_TEST_TMPDIR/loop is a symbolic link loop" \
        LOAD_CHECKPOINT_PATH="$BATS_TEST_TMPDIR/loop"
    local long
    long="$BATS_TEST_TMPDIR/$(printf 'x%.0s' {1..300})"  # longer than a file name may be
    refused 2 "LOAD_CHECKPOINT_PATH=$long cannot be read (File name too long)" \
        LOAD_CHECKPOINT_PATH="$long"
}

@test "a token that cannot be one is refused and never shown" {
    export LAUNCH="$REPO/llama3.1/launch.sh"
    refused 2 "HF_TOKEN is a yes/no word, which is not a Hugging Face access token" HF_TOKEN=true
    refused 2 "HF_TOKEN is 5 characters long" HF_TOKEN=hf_ab
    refused 2 "HF_TOKEN contains control character(s) \\n" HF_TOKEN=$'hf_secret_value\nx'
    [[ "$stderr" != *hf_secret_value* ]]
}

@test "an allowed value with shell characters is only ever quoted: submitted, nothing runs" {
    image="$BATS_TEST_TMPDIR/img \$(touch pwned).sqsh"
    : >"$image"
    cd "$BATS_TEST_TMPDIR/cwd" || return 1
    run --separate-stderr env JOB_TOTAL_GPUS=16 RUN_CONF_IMAGE="$image" "$REPO/nemotron/launch.sh"
    [ "$status" -eq 0 ]
    grep -qF -- "--container-image '$image'" "$SHIM_LOG"
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/cwd")" ]
    [ -z "$(find "$BATS_TEST_TMPDIR" "$LLMB_INSTALL" -name pwned)" ]
}

# closed_reader CMD...: CMD with stdout a pipe whose reader has gone (`| head` once head exits),
# stderr captured; its status.
closed_reader() {
    python3 -c 'import os, subprocess, sys
read, write = os.pipe()
os.close(read)
sys.exit(subprocess.run(sys.argv[1:], stdout=write).returncode)' "$@"
}

@test "with its reader gone launch.sh ends 141 and silent, as every front, dry run or not" {
    cd "$BATS_TEST_TMPDIR/cwd" || return 1
    for dry in true false; do
        run --separate-stderr closed_reader env JOB_TOTAL_GPUS=16 DRY_RUN="$dry" \
            "$REPO/nemotron/launch.sh"
        echo "DRY_RUN=$dry -> status=$status stderr=$stderr" >&2
        [ "$status" -eq 141 ]
        [ "$stderr" = "" ]
    done
}
