# Shared by tests/bats/launch_*.bats: a fake venv, an install dir, the Slurm PATH shims.
# shellcheck shell=bash
# shellcheck disable=SC2154  # status, output, stderr: set by bats `run`
launch_setup() {
    REPO="$(cd "$BATS_TEST_DIRNAME/../.." && pwd)"
    export PATH="$REPO/tests/shims:$REPO/.venv/bin:$PATH"
    export VIRTUAL_ENV="$REPO/.venv"
    export LLMB_INSTALL="$BATS_TEST_TMPDIR/install"
    export SHIM_LOG="$BATS_TEST_TMPDIR/shim.log"
    export NEMORUN_HOME="$BATS_TEST_TMPDIR/nemo_run"
    mkdir -p "$LLMB_INSTALL/images"
    touch "$LLMB_INSTALL/images/nvidia+nemo+25.04.01.sqsh"
    export SBATCH_ACCOUNT=acct SBATCH_PARTITION=batch
    unset DTYPE MODEL_SIZE GPU_TYPE GPUS_PER_NODE STRONG_SCALING CLUSTER_TYPE ENABLE_PROFILE \
        PROFILE_START_STEP PROFILE_STOP_STEP ENABLE_GPU_METRICS ENABLE_NCCLTRACE ENABLE_CHECKPOINT \
        LOAD_CHECKPOINT_PATH MAX_STEPS TIME_LIMIT RUN_CONF_IMAGE SBATCH_GPUS_PER_NODE CUSTOM_MOUNT \
        BASE_URL APP_ID APP_SECRET PROJECT_NAME PVC_DIR LLMB_WORKLOAD STAGE_PATH DRY_RUN SMOKE_TEST \
        CONDA_PREFIX HF_TOKEN
}

# fails_with MESSAGE VAR=VALUE...: launch.sh (run from /) exits 2 with exactly one stderr line
# starting with "llmb: MESSAGE", prints nothing on stdout, submits nothing, writes nothing.
fails_with() {
    local message="$1"
    shift
    cd /
    run --separate-stderr env "$@" "$LAUNCH"
    echo "status=$status stderr=$stderr" >&2
    [ "$status" -ne 0 ]
    [ "$output" = "" ]
    [[ "$stderr" == "llmb: ${message}"* ]]
    [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
    [ ! -e "$SHIM_LOG" ]
    [ ! -e "$LLMB_INSTALL/workloads" ]
}

# submits VAR=VALUE...: launch.sh submits job 12345 through the sbatch shim.
submits() {
    cd /
    run --separate-stderr env "$@" "$LAUNCH"
    echo "status=$status output=$output stderr=$stderr" >&2
    [ "$status" -eq 0 ]
    [[ "$output" == *"as job 12345"* ]]
    grep -q '^sbatch --requeue --parsable ' "$SHIM_LOG"
}
