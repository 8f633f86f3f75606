#!/usr/bin/env bats
# bridge/<name>/launch.sh (Megatron-Bridge recipes): refusals in one line, DRY_RUN, and a
# submission through the sbatch shim, all through the one launcher (llmb.launch.bridgejob).

bats_require_minimum_version 1.5.0
load launch_helpers

setup() {
    launch_setup
    unset FP8_RECIPE TP PP CP EP ETP VP GBS MBS
    touch "$LLMB_INSTALL/images/nvidia+nemo+26.06.01.sqsh"
    LAUNCH="$REPO/bridge/qwen3/launch.sh"
}

@test "a GPU type, dtype, FP8 recipe or scale upstream does not list is refused naming what is" {
    fails_with "GPU_TYPE=h100 is not supported by qwen3 235b fp8; allowed: gb300, gb200, b300, b200" \
        JOB_TOTAL_GPUS=512 GPU_TYPE=h100 DTYPE=fp8
    fails_with "FP8_RECIPE=sc is not supported by qwen3 235b fp8 on gb300 at 512 GPUs; allowed: mx, cs" \
        JOB_TOTAL_GPUS=512 GPU_TYPE=gb300 DTYPE=fp8 FP8_RECIPE=sc
    fails_with "JOB_TOTAL_GPUS=128 is not a published scale for qwen3 235b bf16 on gb300; published: 256, 512" \
        JOB_TOTAL_GPUS=128 GPU_TYPE=gb300
}

@test "DRY_RUN prints the sbatch script and the rank command, and writes nothing" {
    cd /
    run --separate-stderr env JOB_TOTAL_GPUS=512 GPU_TYPE=GB300 DTYPE=FP8 DRY_RUN=true "$LAUNCH"
    [ "$status" -eq 0 ]
    [[ "$output" == *"#SBATCH --nodes=128"* ]]
    [[ "$output" == *"#SBATCH --segment=16"* ]]
    [[ "$output" == *"Megatron-Bridge/scripts/performance/run_script.py --container_image"* ]]
    [[ "$output" == *"--compute_dtype fp8_mx --model_family_name qwen --model_recipe_name qwen3_235b_a22b"* ]]
    [ ! -e "$SHIM_LOG" ]
    [ ! -e "$LLMB_INSTALL/workloads" ]
}

@test "without the pinned Megatron-Bridge checkout the real run is refused" {
    fails_with "$LLMB_INSTALL/workloads/pretrain_qwen3/Megatron-Bridge/scripts/performance/run_script.py does not exist; run ./setup.sh" \
        JOB_TOTAL_GPUS=256 GPU_TYPE=b200 DTYPE=bf16
}

@test "submits through nemo-run with the checkout in place" {
    scripts="$LLMB_INSTALL/workloads/pretrain_qwen3/Megatron-Bridge/scripts/performance"
    mkdir -p "$scripts"
    touch "$scripts/run_script.py"
    submits JOB_TOTAL_GPUS=256 GPU_TYPE=b200 DTYPE=bf16
    grep -q -- '--gpus-per-node=8' "$SHIM_LOG"
    script=("$LLMB_INSTALL"/workloads/pretrain_qwen3/experiments/pretrain_qwen3_235b_bf16_gpus256/*/pretrain_qwen3_235b_bf16_gpus256_sbatch.sh)
    [ -f "${script[0]}" ]
    grep -q 'export NCCL_IB_QPS_PER_CONNECTION=4' "${script[0]}"
}
