#!/usr/bin/env bats
# Validation every recipe's launch.sh shares: one stderr line, non-zero exit, nothing submitted,
# nothing written. Recipe-specific checks are in launch_<recipe>.bats.

bats_require_minimum_version 1.5.0
load launch_helpers

setup() {
    launch_setup
}

RECIPES=(llama3.1/launch.sh nemotron/launch.sh nemotronh/launch.sh)

# each_recipe MESSAGE VAR=VALUE...: fails_with for the next recipe in turn (HF_TOKEN set for
# llama3.1). The validation itself is one Python module, checked path by path for every recipe
# in tests/launch/test_request.py; round robin here keeps this suite fast while every launch.sh sees
# most paths. EVERY_RECIPE=1 runs each check against all three.
NEXT=0
each_recipe() {
    local i
    for i in "${!RECIPES[@]}"; do
        if [[ "${EVERY_RECIPE:-}" == 1 || "$i" -eq $((NEXT % ${#RECIPES[@]})) ]]; then
            export LAUNCH="$REPO/${RECIPES[$i]}"
            fails_with "$@" HF_TOKEN=hf_abcdefghijklmnop
        fi
    done
    NEXT=$((NEXT + 1))
}

@test "JOB_TOTAL_GPUS missing" {
    each_recipe "JOB_TOTAL_GPUS is not set; set it to a positive integer"
}

@test "JOB_TOTAL_GPUS not a positive integer" {
    each_recipe "JOB_TOTAL_GPUS=abc is not a positive integer" JOB_TOTAL_GPUS=abc
    each_recipe "JOB_TOTAL_GPUS=0 is not a positive integer" JOB_TOTAL_GPUS=0
    each_recipe "JOB_TOTAL_GPUS=-64 is not a positive integer" JOB_TOTAL_GPUS=-64
}

@test "JOB_TOTAL_GPUS not a multiple of GPUS_PER_NODE" {
    each_recipe "JOB_TOTAL_GPUS=12 is not a multiple of GPUS_PER_NODE=8 for h100" JOB_TOTAL_GPUS=12
}

@test "unknown DTYPE, MODEL_SIZE, GPU_TYPE, CLUSTER_TYPE" {
    each_recipe "DTYPE=fp16 is not supported by" JOB_TOTAL_GPUS=64 DTYPE=fp16
    each_recipe "MODEL_SIZE=1t is not supported by" JOB_TOTAL_GPUS=64 MODEL_SIZE=1t
    each_recipe "GPU_TYPE=a100 is not supported by" JOB_TOTAL_GPUS=64 GPU_TYPE=a100
    each_recipe "CLUSTER_TYPE=k8s is not known; allowed: slurm, runai, local" JOB_TOTAL_GPUS=64 CLUSTER_TYPE=k8s
}

@test "a GPU type with no published row: the recipe's GPU types, and what else knows it" {
    local also="the analyzer (--gpu-type) and llmb-run screen also support h200"
    export LAUNCH="$REPO/llama3.1/launch.sh"
    fails_with "GPU_TYPE=b300 is not supported by llama3.1; allowed: h100 (the GPU types it publishes rows for); ${also}" \
        GPU_TYPE=b300 JOB_TOTAL_GPUS=8 DRY_RUN=true HF_TOKEN=hf_abcdefghijklmnop
    export LAUNCH="$REPO/nemotron/launch.sh"
    fails_with "GPU_TYPE=GB300 is not supported by nemotron; allowed: h100, gb200, b200 (the GPU types it publishes rows for); ${also}" \
        GPU_TYPE=GB300 JOB_TOTAL_GPUS=16
    export LAUNCH="$REPO/nemotronh/launch.sh"
    fails_with "GPU_TYPE=h200 is not supported by nemotronh; allowed: h100 (the GPU types it publishes rows for); ${also}" \
        GPU_TYPE=h200 JOB_TOTAL_GPUS=32 DRY_RUN=true
}

@test "SBATCH_ACCOUNT / SBATCH_PARTITION missing for slurm" {
    each_recipe "SBATCH_ACCOUNT is not set" JOB_TOTAL_GPUS=64 SBATCH_ACCOUNT=
    each_recipe "SBATCH_PARTITION is not set" JOB_TOTAL_GPUS=64 SBATCH_PARTITION=
}

@test "profile and NCCL trace together; GPU metrics without profile" {
    each_recipe "ENABLE_PROFILE=true and ENABLE_NCCLTRACE=true cannot be combined" \
        JOB_TOTAL_GPUS=64 ENABLE_PROFILE=yes ENABLE_NCCLTRACE=ON
    each_recipe "ENABLE_GPU_METRICS=true needs ENABLE_PROFILE=true" JOB_TOTAL_GPUS=64 ENABLE_GPU_METRICS=1
}

@test "profile steps" {
    each_recipe "PROFILE_START_STEP=50 must be less than PROFILE_STOP_STEP=40" \
        JOB_TOTAL_GPUS=64 ENABLE_PROFILE=true PROFILE_START_STEP=50 PROFILE_STOP_STEP=40
    each_recipe "PROFILE_START_STEP=x is not a positive integer" JOB_TOTAL_GPUS=64 PROFILE_START_STEP=x
}

@test "a bad boolean is named" {
    each_recipe "ENABLE_CHECKPOINT=sure is not a boolean" JOB_TOTAL_GPUS=64 ENABLE_CHECKPOINT=sure
}

@test "checkpoint to load must exist and hold weights/*.distcp" {
    each_recipe "LOAD_CHECKPOINT_PATH=/no/such/ckpt does not exist" JOB_TOTAL_GPUS=64 \
        LOAD_CHECKPOINT_PATH=/no/such/ckpt
    mkdir -p "$BATS_TEST_TMPDIR/ckpt/weights"
    each_recipe "LOAD_CHECKPOINT_PATH=$BATS_TEST_TMPDIR/ckpt holds no weights/*.distcp" \
        JOB_TOTAL_GPUS=64 LOAD_CHECKPOINT_PATH="$BATS_TEST_TMPDIR/ckpt"
}

@test "STAGE_PATH set is a migration error" {
    each_recipe "STAGE_PATH=/old is no longer used; unset it and set LLMB_INSTALL" STAGE_PATH=/old
}

@test "TIME_LIMIT and MAX_STEPS formats" {
    each_recipe "TIME_LIMIT=1h is not a Slurm time; use HH:MM:SS" JOB_TOTAL_GPUS=64 TIME_LIMIT=1h
    each_recipe "MAX_STEPS=0 is not a positive integer" JOB_TOTAL_GPUS=64 MAX_STEPS=0
    each_recipe "MAX_STEPS=ten is not a positive integer" JOB_TOTAL_GPUS=64 MAX_STEPS=ten
}

@test "LLMB_INSTALL missing; no venv active" {
    each_recipe "LLMB_INSTALL is not set" JOB_TOTAL_GPUS=64 LLMB_INSTALL=
    each_recipe "no Python environment is active" JOB_TOTAL_GPUS=64 VIRTUAL_ENV=
}

@test "missing container image before a real submission" {
    rm "$LLMB_INSTALL/images/nvidia+nemo+25.04.01.sqsh"
    each_recipe "the container image $LLMB_INSTALL/images/nvidia+nemo+25.04.01.sqsh does not exist" \
        JOB_TOTAL_GPUS=64
}

@test "unknown argument and --help" {
    cd /
    run --separate-stderr "$REPO/nemotron/launch.sh" --bogus
    [ "$status" -eq 2 ]
    [[ "$stderr" == "llmb: unknown argument '--bogus'; run with --help" ]]
    run --separate-stderr "$REPO/nemotron/launch.sh" --help
    [ "$status" -eq 0 ]
    [[ "$output" == usage:* ]]
}
