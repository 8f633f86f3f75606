#!/usr/bin/env bats
# nemotron/launch.sh: recipe-specific validation (strong scaling, Run:ai), DRY_RUN, submission.

bats_require_minimum_version 1.5.0
load launch_helpers

setup() {
    launch_setup
    LAUNCH="$REPO/nemotron/launch.sh"
    RUNAI=(CLUSTER_TYPE=runai CUSTOM_MOUNT=ws:/workspace:claim BASE_URL=https://runai.example/api/v1
        APP_ID=app APP_SECRET=very-secret PROJECT_NAME=proj PVC_DIR=/workspace/nemo-run)
}

@test "strong scaling only where published" {
    fails_with "STRONG_SCALING=true is not published for nemotron 15b fp8 on h100; published: weak scaling" \
        JOB_TOTAL_GPUS=16 STRONG_SCALING=true
    fails_with "JOB_TOTAL_GPUS=2048 is not a published scale for nemotron 340b fp8 on gb200 with strong scaling; published: 128, 256, 512" \
        JOB_TOTAL_GPUS=2048 MODEL_SIZE=340b GPU_TYPE=gb200 STRONG_SCALING=true
    fails_with "GPU_TYPE=gb200 is not supported by nemotron 15b fp8; allowed: h100" JOB_TOTAL_GPUS=16 GPU_TYPE=gb200
    fails_with "JOB_TOTAL_GPUS=130 is not a multiple of GPUS_PER_NODE=4 for gb200" JOB_TOTAL_GPUS=130 MODEL_SIZE=340b GPU_TYPE=gb200
}

@test "every Run:ai variable is required" {
    local skip var
    for skip in CUSTOM_MOUNT BASE_URL APP_ID APP_SECRET PROJECT_NAME PVC_DIR; do
        local args=()
        for var in "${RUNAI[@]}"; do
            [[ "$var" == "$skip="* ]] || args+=("$var")
        done
        fails_with "$skip is not set; CLUSTER_TYPE=runai needs" JOB_TOTAL_GPUS=16 "${args[@]}"
    done
    fails_with "CUSTOM_MOUNT=ws:/workspace is not name:path:claimName" JOB_TOTAL_GPUS=16 "${RUNAI[@]}" CUSTOM_MOUNT=ws:/workspace
}

@test "Run:ai DRY_RUN prints the workload spec without the secret" {
    cd /
    run --separate-stderr env JOB_TOTAL_GPUS=16 DRY_RUN=true "${RUNAI[@]}" "$LAUNCH"
    [ "$status" -eq 0 ]
    [[ "$output" == *'"url": "https://runai.example/api/v1/workloads/distributed"'* ]]
    [[ "$output" == *'"claimName": "claim"'* ]]
    [[ "$output" != *very-secret* ]]
    [ ! -e "$LLMB_INSTALL/workloads" ]
}

@test "GB200 above 18 nodes gets a Slurm segment; GRES when SBATCH_GPUS_PER_NODE is set" {
    cd /
    run --separate-stderr env JOB_TOTAL_GPUS=256 MODEL_SIZE=340b GPU_TYPE=gb200 STRONG_SCALING=1 \
        SBATCH_GPUS_PER_NODE=4 DRY_RUN=true "$LAUNCH"
    [ "$status" -eq 0 ]
    [[ "$output" == *"#SBATCH --segment=16"* ]]
    [[ "$output" == *"#SBATCH --gres=gpu:4"* ]]
    [[ "$output" != *"--gpus-per-node"* ]]
}

@test "submits an NCCL trace run with checkpointing" {
    submits JOB_TOTAL_GPUS=16 MODEL_SIZE=15b ENABLE_CHECKPOINT=true ENABLE_NCCLTRACE=true
    grep -q 'NCCL_DEBUG=INFO' "$SHIM_LOG"
    compgen -G "$LLMB_INSTALL/workloads/pretrain_nemotron4/experiments/*_nccltrace" >/dev/null
}
