#!/usr/bin/env bats
# nemotronh/launch.sh: recipe-specific validation, DRY_RUN, and a submission through the shim.

bats_require_minimum_version 1.5.0
load launch_helpers

setup() {
    launch_setup
    LAUNCH="$REPO/nemotronh/launch.sh"
}

@test "fp8 only, h100 only, published scales only" {
    fails_with "DTYPE=bf16 is not supported by nemotronh; allowed: fp8" JOB_TOTAL_GPUS=32 DTYPE=bf16
    fails_with "GPU_TYPE=b200 is not supported by nemotronh; allowed: h100" JOB_TOTAL_GPUS=32 GPU_TYPE=b200
    fails_with "JOB_TOTAL_GPUS=16 is not a published scale for nemotronh 56b fp8 on h100; published: 32, 64, 128, 256, 512, 1024, 2048" \
        JOB_TOTAL_GPUS=16
    fails_with "CLUSTER_TYPE=runai is not supported by nemotronh; allowed: slurm, local" JOB_TOTAL_GPUS=32 CLUSTER_TYPE=runai
}

@test "SMOKE_TEST allows an unpublished scale with a warning" {
    # 8 GPUs is the smallest layout nemotronh runs (TP x PP x CP = 8): a local run starts one
    # process per GPU and refuses more than the CPUs it may use.
    [ "$(nproc)" -ge 8 ] || skip "a local run of 8 processes needs 8 CPUs; this machine has $(nproc)"
    cd /
    run --separate-stderr env JOB_TOTAL_GPUS=8 CLUSTER_TYPE=local SMOKE_TEST=true DRY_RUN=true \
        ENABLE_CHECKPOINT=true "$LAUNCH"
    [ "$status" -eq 0 ]
    [[ "$stderr" == *"llmb: warning: checkpoint saving is not tested for nemotronh 56b on h100"* ]]
    [[ "$stderr" == *"llmb: warning: JOB_TOTAL_GPUS=8 is not a published scale"* ]]
    [[ "$output" == *'"smoke_test": true'* ]]
    [[ "$output" == *torchrun* ]]
}

@test "submits with Nemotron-H's env, from any directory" {
    submits JOB_TOTAL_GPUS=32 ENABLE_PROFILE=true PROFILE_START_STEP=10 PROFILE_STOP_STEP=20
    grep -q '^export NVTE_FUSED_ATTN=0$' "$SHIM_LOG"
    grep -q 'nsys profile -s none -t nvtx,cuda' "$SHIM_LOG"
    grep -q '"max_steps": 20' "$LLMB_INSTALL"/workloads/pretrain_nemotronh/experiments/*/*/llmb_manifest.json
}
